//! Kernel entry points as both ways into Rust call them (the PyO3 bindings
//! and the C++ native path): each wraps a kernel in the output rules it
//! needs (a scratch output when `out` aliases an input or must be
//! contiguous), so those rules live here once.

use super::attention::{self as attn, Grads, Sdpa};
use super::conv;
use super::dropout as drop;
use super::index::{self as ix, IndexArg};
use super::linalg::{self, Coef};
use super::random::{self as rnd, Distribution};
use super::reduce::{self as red, ReduceOp};
use super::{keepdim_view, nn, select, with_out, KernelError, Strided};

/// Reduction `op` of `inp` over `dims` (sorted, distinct, in range; empty
/// with numel > 0 means none) into `out` (keepdim or not) and `out2`
/// (indices of max_dim/min_dim, or the mean of var/std).
pub fn reduce(
    op: ReduceOp,
    out: Strided,
    out2: Option<Strided>,
    inp: &Strided,
    dims: &[usize],
) -> Result<(), KernelError> {
    let nd = inp.ndim();
    let o = keepdim_view(out, nd, dims)?;
    let o2 = out2.map(|d| keepdim_view(d, nd, dims)).transpose()?;
    with_out(&o, &[Some(inp)], false, false, |o| match &o2 {
        Some(o2) => with_out(o2, &[Some(inp)], false, false, |o2| {
            red::reduce_op(op, o, Some(o2), inp)
        }),
        None => red::reduce_op(op, o, None, inp),
    })
}

/// Cumulative sum (or, with `prod`, product) of `inp` along `dim` into
/// `out` (`inp`'s shape; `inp`'s floating dtype, or int64 for integers and
/// bool), through a scratch buffer when `out` overlaps `inp` (in place).
pub fn scan(prod: bool, out: &Strided, inp: &Strided, dim: usize) -> Result<(), KernelError> {
    with_out(out, &[Some(inp)], false, false, |o| {
        red::scan(prod, o, inp, dim)
    })
}

/// `out = tril(src, k)` (`upper`: triu) over the last two dims. `out` may
/// be `src` itself (the same view: in place); another view that overlaps
/// `src` is written through a scratch buffer.
pub fn tri(out: &Strided, src: &Strided, k: i64, upper: bool) -> Result<(), KernelError> {
    let same = out.ptr == src.ptr && out.strides == src.strides && out.sizes == src.sizes;
    let inputs = if same { [None] } else { [Some(src)] };
    with_out(out, &inputs, false, false, |o| ix::tri(o, src, k, upper))
}

/// The `k` largest (or smallest) elements of every line of `inp` along
/// `dim` and their int64 positions, in CPU's order (ties included), into
/// `values` and `indices` (`inp`'s shape with `k` along `dim`); outputs
/// that overlap `inp` (or each other) are written through scratch buffers.
#[allow(clippy::too_many_arguments)]
pub fn topk(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    largest: bool,
    sorted: bool,
) -> Result<(), KernelError> {
    with_out(values, &[Some(inp)], false, false, |v| {
        with_out(indices, &[Some(inp), Some(v)], false, false, |x| {
            select::topk(v, x, inp, dim, k, largest, sorted)
        })
    })
}

/// Sorts every line of `inp` along `dim`, keeping its first `k` elements
/// in ascending (or `descending`) order, into `values` and their int64
/// positions into `indices` (`inp`'s shape with `k` along `dim`), stably;
/// outputs that overlap `inp` (or each other) are written through scratch
/// buffers.
pub fn sort(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    descending: bool,
) -> Result<(), KernelError> {
    with_out(values, &[Some(inp)], false, false, |v| {
        with_out(indices, &[Some(inp), Some(v)], false, false, |x| {
            super::sort::sort(v, x, inp, dim, k, descending)
        })
    })
}

/// Fills `dst` from `dist`, drawing from the Philox stream `state` (an
/// explicit generator's (seed, offset), which the caller advances) or, with
/// none, from device `device`'s default generator; returns the Philox blocks
/// used. A dtype `dist` does not take is refused before any block is
/// reserved (the native path then hands the call to the Python kernel,
/// whose draw must start where this one would have).
pub fn random(
    dst: &Strided,
    dist: Distribution,
    state: Option<(u64, u64)>,
    device: usize,
) -> Result<u64, KernelError> {
    if !dist.supports(dst.dtype) {
        return Err(KernelError::UnsupportedDtype {
            op: dist.op(),
            dtype: dst.dtype,
        });
    }
    let blocks = rnd::blocks_needed(dst.dtype, dist, dst.numel());
    let (seed, offset) = state.unwrap_or_else(|| crate::rng::reserve_default(device, blocks));
    rnd::fill_random(dst, seed, offset, dist)?;
    Ok(blocks)
}

/// `out = beta * input + alpha * (a @ b)`, 2-d, or batched (3-d) with `batched`.
pub fn addmm(
    out: &Strided,
    input: Option<&Strided>,
    a: &Strided,
    b: &Strided,
    beta: Coef,
    alpha: Coef,
    batched: bool,
) -> Result<(), KernelError> {
    with_out(out, &[Some(a), Some(b)], false, true, |o| {
        if batched {
            linalg::baddbmm(o, input, a, b, beta, alpha)
        } else {
            linalg::addmm(o, input, a, b, beta, alpha)
        }
    })
}

/// MSE loss of `a` (input) and `b` (target), one floating dtype, over their
/// broadcast `shape`: into `out` of that shape (reduction none) or its mean
/// or sum into a 0-d `out`.
pub fn mse_loss(
    out: &Strided,
    a: &Strided,
    b: &Strided,
    shape: &[usize],
    reduction: i64,
) -> Result<(), KernelError> {
    with_out(out, &[Some(a), Some(b)], false, false, |o| {
        nn::mse_loss(o, a, b, shape, reduction)
    })
}

/// MSE loss backward over `grad_input`'s shape (`grad`, `a`, `b` broadcast
/// to it).
pub fn mse_loss_backward(
    grad_input: &Strided,
    grad: &Strided,
    a: &Strided,
    b: &Strided,
    reduction: i64,
) -> Result<(), KernelError> {
    with_out(
        grad_input,
        &[Some(grad), Some(a), Some(b)],
        false,
        false,
        |gi| nn::mse_loss_backward(gi, grad, a, b, reduction),
    )
}

/// Pointwise loss `kind` of `a` (input) and `b` (target), one floating
/// dtype, over their broadcast `shape`: into `out` of that shape (reduction
/// none) or its mean or sum into a 0-d `out`.
pub fn point_loss(
    kind: nn::PointLoss,
    out: &Strided,
    a: &Strided,
    b: &Strided,
    shape: &[usize],
    reduction: i64,
) -> Result<(), KernelError> {
    with_out(out, &[Some(a), Some(b)], false, false, |o| {
        nn::point_loss(kind, o, a, b, shape, reduction)
    })
}

/// Pointwise loss `kind`'s backward over `grad_input`'s shape (`grad`,
/// `a`, `b` broadcast to it).
pub fn point_loss_backward(
    kind: nn::PointLoss,
    grad_input: &Strided,
    grad: &Strided,
    a: &Strided,
    b: &Strided,
    reduction: i64,
) -> Result<(), KernelError> {
    with_out(
        grad_input,
        &[Some(grad), Some(a), Some(b)],
        false,
        false,
        |gi| nn::point_loss_backward(kind, gi, grad, a, b, reduction),
    )
}

/// `out = (log_)softmax(inp, dim)`; `inp` contiguous.
pub fn softmax(out: &Strided, inp: &Strided, dim: usize, log: bool) -> Result<(), KernelError> {
    with_out(out, &[Some(inp)], true, false, |o| {
        nn::softmax(o, inp, dim, log)
    })
}

/// Gradient of (log_)softmax; `grad` and `output` contiguous.
pub fn softmax_backward(
    grad_input: &Strided,
    grad: &Strided,
    output: &Strided,
    dim: usize,
    log: bool,
) -> Result<(), KernelError> {
    with_out(grad_input, &[Some(grad), Some(output)], true, false, |gi| {
        nn::softmax_backward(gi, grad, output, dim, log)
    })
}

/// `out = data.index_select(dim, index)`: `out` has `data`'s shape with
/// `dim` replaced by `index.numel()`; `index` is a 0-d or 1-d int32/int64
/// tensor; `data` has at least one dim. An index outside `data.sizes[dim]`
/// is CPU's IndexError ("index out of range in self").
pub fn index_select(
    out: &Strided,
    data: &Strided,
    index: &Strided,
    dim: usize,
) -> Result<(), KernelError> {
    let nd = data.ndim();
    if dim >= nd || index.ndim() > 1 || out.ndim() != nd {
        return Err(KernelError::InvalidArgument(format!(
            "foo index_select: dim {dim} of a {nd}-d input with a {}-d index",
            index.ndim()
        )));
    }
    let mut shape = data.sizes.clone();
    shape[dim] = index.numel();
    if out.sizes != shape {
        return Err(KernelError::ShapeMismatch(format!(
            "foo index_select: output of shape {:?}, expected {shape:?}",
            out.sizes
        )));
    }
    // The plan: data restrided over out's shape (stride 0 along `dim`), the
    // index laid along `dim` and selecting data's `dim`.
    let mut dstr = data.strides.clone();
    dstr[dim] = 0;
    let mut istr = vec![0isize; nd];
    istr[dim] = index.strides.first().copied().unwrap_or(0);
    let arg = IndexArg {
        idx: Strided::new(index.ptr, index.dtype, shape.clone(), istr),
        size: data.sizes[dim],
        stride: data.strides[dim],
    };
    let d = Strided::new(data.ptr, data.dtype, shape, dstr);
    ix::gather(out, &d, &[arg], false).map_err(|e| match e {
        KernelError::IndexOutOfRange { .. } => {
            KernelError::InvalidArgument("index out of range in self".into())
        }
        k => k,
    })
}

/// NLL loss forward: `out` (per-sample or reduced) and `total_weight`;
/// `inp` and `target` contiguous.
pub fn nll_loss_forward(
    out: &Strided,
    total_weight: &Strided,
    inp: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore_index: i64,
) -> Result<(), KernelError> {
    let ins = [Some(inp), Some(target), weight];
    with_out(out, &ins, false, false, |o| {
        with_out(total_weight, &ins, false, false, |tw| {
            nn::nll_loss_forward(o, tw, inp, target, weight, reduction, ignore_index)
        })
    })
}

/// NLL loss backward into `grad_input` (made contiguous); `target` contiguous.
pub fn nll_loss_backward(
    grad_input: &Strided,
    grad: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore_index: i64,
    total_weight: &Strided,
) -> Result<(), KernelError> {
    let ins = [Some(grad), Some(target), weight, Some(total_weight)];
    with_out(grad_input, &ins, true, false, |gi| {
        nn::nll_loss_backward(
            gi,
            grad,
            target,
            weight,
            reduction,
            ignore_index,
            total_weight,
        )
    })
}

/// Embedding gradient: `out[num_weights, d]` from `grad[n, d]` and `indices[n]`.
pub fn embedding_dense_backward(
    out: &Strided,
    grad: &Strided,
    indices: &Strided,
    padding_idx: i64,
    scale_grad_by_freq: bool,
) -> Result<(), KernelError> {
    with_out(out, &[Some(grad), Some(indices)], true, false, |o| {
        nn::embedding_dense_backward(o, grad, indices, padding_idx, scale_grad_by_freq)
    })
}

/// Stride, padding and dilation (as (height, width) pairs) and groups of a
/// 2-d convolution; a 1-d one is a 2-d one of height 1.
#[derive(Clone, Copy, Debug)]
pub struct ConvParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl ConvParams {
    /// The geometry of the convolution of an input of size `x` (NCHW) with
    /// weight `w` (OIHW) giving `out_hw` output positions.
    fn geometry(
        &self,
        x: &[usize],
        w: &[usize],
        out_hw: [usize; 2],
    ) -> Result<conv::Conv2d, KernelError> {
        conv::geometry(
            x,
            w,
            out_hw,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )
    }
}

fn spatial(t: &Strided) -> [usize; 2] {
    [
        t.sizes.get(2).copied().unwrap_or(0),
        t.sizes.get(3).copied().unwrap_or(0),
    ]
}

/// `out = conv2d(x, w) + bias`: contiguous NCHW `out` and `x`, OIHW `w`,
/// float32/float64.
pub fn conv2d_forward(
    out: &Strided,
    x: &Strided,
    w: &Strided,
    bias: Option<&Strided>,
    p: &ConvParams,
) -> Result<(), KernelError> {
    let g = p.geometry(&x.sizes, &w.sizes, spatial(out))?;
    conv::forward(&g, out, x, w, bias)
}

/// Gradients of `grad_output = conv2d(input, w)` into `grad_input`,
/// `grad_weight` (needs `x`) and `grad_bias`, each when given; `input_size`
/// is the input's NCHW size (the input itself may be absent).
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    grad_output: &Strided,
    x: Option<&Strided>,
    w: &Strided,
    grad_input: Option<&Strided>,
    grad_weight: Option<&Strided>,
    grad_bias: Option<&Strided>,
    input_size: &[usize],
    p: &ConvParams,
) -> Result<(), KernelError> {
    let g = p.geometry(input_size, &w.sizes, spatial(grad_output))?;
    conv::backward(&g, grad_output, x, w, grad_input, grad_weight, grad_bias)
}

/// Dropout of `x` keeping each element with probability `keep` (scaled by
/// `scale`), drawing from device `device`'s default generator; returns the
/// Philox blocks used.
pub fn dropout(
    out: &Strided,
    mask: &Strided,
    x: &Strided,
    keep: f64,
    scale: f64,
    device: usize,
) -> Result<u64, KernelError> {
    let blocks = drop::blocks_needed(x.numel());
    let (seed, offset) = crate::rng::reserve_default(device, blocks);
    drop::dropout(out, mask, x, keep, scale, seed, offset)?;
    Ok(blocks)
}

/// Fills `dst` (any dtype) with Bernoulli(`p`) draws from device `device`'s
/// default generator; returns the Philox blocks used.
pub fn bernoulli(dst: &Strided, p: f64, device: usize) -> Result<u64, KernelError> {
    let blocks = drop::blocks_needed(dst.numel());
    let (seed, offset) = crate::rng::reserve_default(device, blocks);
    drop::bernoulli(dst, p, None, seed, offset)?;
    Ok(blocks)
}

/// Attention forward into `out` and `lse`. With dropout (`a.dropout`'s `p`
/// above 0; its seed and offset are ignored) it reserves the Philox blocks of
/// the `[B, Hq, L, S]` weights on device `device`'s default generator and
/// returns the (seed, offset) the backward needs; (0, 0) without.
pub fn sdpa_forward(
    mut a: Sdpa,
    out: &Strided,
    lse: &Strided,
    device: usize,
) -> Result<(u64, u64), KernelError> {
    let mut drawn = (0, 0);
    if let Some(d) = a.dropout.as_mut() {
        if d.p > 0.0 && a.q.ndim() == 4 && a.k.ndim() == 4 {
            let blocks =
                attn::blocks_needed(a.q.sizes[0], a.q.sizes[1], a.q.sizes[2], a.k.sizes[2]);
            drawn = crate::rng::reserve_default(device, blocks);
        }
        (d.seed, d.offset) = drawn;
    }
    attn::forward(&a, out, lse)?;
    Ok(drawn)
}

/// Attention backward: the gradients `grads` asks for, from the forward's
/// `out`, `lse` and `a.dropout` with the forward's (seed, offset); `work` is
/// a zeroed scratch of [`attn::backward_work`] elements.
pub fn sdpa_backward(
    a: &Sdpa,
    grad_out: &Strided,
    out: &Strided,
    lse: &Strided,
    grads: &Grads,
    work: &Strided,
) -> Result<(), KernelError> {
    attn::backward(a, grad_out, out, lse, grads, work)
}

/// A 0-d view as the 1-element vector it is (CPU's rule for 0-d operands of
/// gather and scatter).
fn as1d(t: &Strided) -> Strided {
    if t.ndim() == 0 {
        Strided::new(t.ptr, t.dtype, vec![1], vec![1])
    } else {
        t.clone()
    }
}

/// `out = data.gather(dim, index)`: `out` has `index`'s shape; `index` is an
/// int32/int64 tensor of `data`'s rank (0-d operands count as 1-d), no larger
/// than `data` off `dim` (ATen's meta has checked all this on the native
/// path; it is checked again here, for memory safety). An index outside
/// `[0, data.sizes[dim])` is CPU's RuntimeError.
pub fn gather(
    out: &Strided,
    data: &Strided,
    index: &Strided,
    dim: usize,
) -> Result<(), KernelError> {
    if index.numel() == 0 {
        return Ok(());
    }
    let (o, d, i) = (as1d(out), as1d(data), as1d(index));
    let nd = d.ndim();
    let fits = (0..nd).all(|k| k == dim || i.sizes[k] <= d.sizes[k]);
    if dim >= nd || i.ndim() != nd || o.sizes != i.sizes || !fits {
        return Err(KernelError::ShapeMismatch(format!(
            "foo gather: index {:?} and output {:?} do not fit data {:?} along dim {dim}",
            i.sizes, o.sizes, d.sizes
        )));
    }
    let mut dstr = d.strides.clone();
    dstr[dim] = 0;
    let arg = IndexArg {
        idx: i.clone(),
        size: d.sizes[dim],
        stride: d.strides[dim],
    };
    let dv = Strided::new(d.ptr, d.dtype, i.sizes.clone(), dstr);
    ix::gather(&o, &dv, &[arg], false).map_err(|e| match e {
        KernelError::IndexOutOfRange { value, .. } => KernelError::InvalidArgument(format!(
            "index {value} is out of bounds for dimension {dim} with size {}",
            d.sizes[dim]
        )),
        k => k,
    })
}

/// CPU's IndexError message for index operand `arg` holding `value`
/// (operand numbers, not data dims, as CPU's index kernels name them).
fn advanced_index_err(e: KernelError, args: &[IndexArg]) -> KernelError {
    match e {
        KernelError::IndexOutOfRange { arg, value } => KernelError::InvalidArgument(format!(
            "index {value} is out of bounds for dimension {arg} with size {}",
            args.get(arg).map_or(0, |a| a.size)
        )),
        k => k,
    }
}

/// Advanced indexing, `out = data[indices]`, on ATen's plan (the index
/// op's TensorIterator: `data` restrided over out's shape with stride 0
/// along the indexed dims, each index laid over out's shape and selecting
/// along its data dim). Negative indices wrap; one outside `[-size, size)`
/// is CPU's IndexError (raise it with `index_errors`).
pub fn index(out: &Strided, data: &Strided, args: &[IndexArg]) -> Result<(), KernelError> {
    ix::gather(out, data, args, true).map_err(|e| advanced_index_err(e, args))
}

/// `dst[indices] = src` (or `+=` with `accumulate`) on ATen's index_put
/// plan: `dst` restrided as in [`index`], `src` broadcast over its shape.
/// Duplicate indices apply in row-major order, as CPU's serial kernel.
pub fn index_put(
    dst: &Strided,
    src: &Strided,
    args: &[IndexArg],
    accumulate: bool,
) -> Result<(), KernelError> {
    let op = if accumulate {
        ix::Reduce::Add
    } else {
        ix::Reduce::Assign
    };
    ix::scatter(dst, ix::Src::Tensor(src), args, true, op, true, false)
        .map_err(|e| advanced_index_err(e, args))
}

/// The scatter family into `out` (already holding self's values): `out`
/// along `dim` at `index` gets `src` (a tensor of index's rank, no smaller
/// than it, or a number) with `op`; `include_self` as scatter_reduce's.
/// 0-d operands count as 1-d. Sums, means and products of f16/bf16
/// accumulate in f32, as CPU's. An index outside `[0, out.sizes[dim])` is
/// CPU's RuntimeError.
pub fn scatter(
    out: &Strided,
    src: ix::Src,
    index: &Strided,
    dim: usize,
    op: ix::Reduce,
    include_self: bool,
) -> Result<(), KernelError> {
    if index.numel() == 0 {
        return Ok(());
    }
    let (o, i) = (as1d(out), as1d(index));
    let nd = o.ndim();
    let fits = |t: &Strided, skip: usize| (0..nd).all(|k| k == skip || i.sizes[k] <= t.sizes[k]);
    if dim >= nd || i.ndim() != nd || !fits(&o, dim) {
        return Err(KernelError::ShapeMismatch(format!(
            "foo scatter: index {:?} does not fit output {:?} along dim {dim}",
            i.sizes, o.sizes
        )));
    }
    let shape = i.sizes.clone();
    let mut dstr = o.strides.clone();
    dstr[dim] = 0;
    let dst = Strided::new(o.ptr, o.dtype, shape.clone(), dstr);
    let arg = IndexArg {
        idx: i.clone(),
        size: o.sizes[dim],
        stride: o.strides[dim],
    };
    let src_view;
    let src = match src {
        ix::Src::Tensor(t) => {
            let t1 = as1d(t);
            if t1.ndim() != nd || !fits(&t1, nd) {
                return Err(KernelError::ShapeMismatch(format!(
                    "foo scatter: index {:?} larger than source {:?}",
                    i.sizes, t1.sizes
                )));
            }
            src_view = Strided::new(t1.ptr, t1.dtype, shape, t1.strides.clone());
            ix::Src::Tensor(&src_view)
        }
        s => s,
    };
    ix::scatter(&dst, src, &[arg], false, op, include_self, true).map_err(|e| match e {
        KernelError::IndexOutOfRange { value, .. } => KernelError::InvalidArgument(format!(
            "index {value} is out of bounds for dimension {dim} with size {}",
            o.sizes[dim]
        )),
        k => k,
    })
}
