//! Neural-network kernels: `_softmax`, `_log_softmax` and their backward,
//! `nll_loss` (and its 2-d / N-d form) forward and backward, `mse_loss`
//! forward and backward, `embedding_dense_backward`.
//!
//! Softmax kernels take contiguous views (the Python layer makes them so, as
//! ATen does) and see them as `[outer, dim, inner]`. With `inner == 1` each
//! row is reduced with [`LANES`] accumulators (vectorized); otherwise tiles of
//! [`TILE`] neighbouring columns are reduced together. Float32 uses a
//! vectorizable `exp` (Cephes' polynomial, about 1 ulp); the half types
//! compute in float32; float64 uses `f64::exp`.
//!
//! Losses sum with a fixed pairwise tree over blocks of [`LOSS_BLOCK`]
//! elements, in float64: deterministic for any thread count.

// Lane and tile loops index their accumulators on purpose (they vectorize).
#![allow(clippy::needless_range_loop)]

use super::copy::{self, Scalar};
use super::elementwise::simd::{self, SimdLevel};
use super::parallel;
use super::reduce::{crate_simd_level, par_min, AccF, FloatElem, Walker3};
use super::{KernelError, Sizes, Strided, Strides, GRAIN_SIZE};
use crate::dtype::DType;
use half::{bf16, f16};
use std::sync::atomic::{AtomicBool, Ordering};

/// Accumulators per row in the softmax row kernels.
pub const LANES: usize = 16;
/// Columns reduced together when the softmax dim is not innermost.
pub const TILE: usize = 64;
/// Leaves of the loss sums' pairwise tree.
pub const LOSS_BLOCK: usize = 4096;

/// `exp` for float32: the one vectorizable implementation, shared with the elementwise kernels
/// (about 1 ulp; subnormal results kept, as torch CPU's vectorized `exp` keeps them).
pub use super::elementwise::math::exp_f32;

/// A compute type of the softmax kernels.
pub trait Real: AccF {
    fn exp_(self) -> Self;
    fn ln_(self) -> Self;
}
impl Real for f32 {
    #[inline(always)]
    fn exp_(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn ln_(self) -> f32 {
        self.ln()
    }
}
impl Real for f64 {
    #[inline(always)]
    fn exp_(self) -> f64 {
        self.exp()
    }
    #[inline(always)]
    fn ln_(self) -> f64 {
        self.ln()
    }
}

#[derive(Clone, Copy)]
struct P(usize);

/// Runs `f(0..n)`: on rayon's threads if `parallel`, else in order on the
/// calling thread (no hand-off to the pool for small work). Stops at the
/// first error (in order when sequential).
fn try_chunks(
    n: usize,
    parallel: bool,
    f: impl Fn(usize) -> Result<(), KernelError> + Sync + Send,
) -> Result<(), KernelError> {
    if parallel && n > 1 {
        parallel::try_parallel_for(n, f)
    } else {
        (0..n).try_for_each(f)
    }
}

/// `v` rounded to `T` and widened back (identity for float32 / float64).
#[inline(always)]
fn rnd<T: FloatElem>(v: T::Acc) -> T::Acc {
    T::narrow(v).widen()
}

/// Contiguous, or empty (any strides).
fn dense(v: &Strided) -> bool {
    v.numel() == 0 || v.is_contiguous()
}

/// Which softmax kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Softmax,
    LogSoftmax,
    SoftmaxBackward,
    LogSoftmaxBackward,
}

fn geometry(t: &Strided, dim: usize) -> (usize, usize, usize) {
    let outer: usize = t.sizes[..dim].iter().product();
    let inner: usize = t.sizes[dim + 1..].iter().product();
    (outer, t.sizes[dim], inner)
}

fn check_softmax(op: &str, views: &[&Strided], dim: usize) -> Result<(), KernelError> {
    let first = views[0];
    for v in views {
        if v.sizes != first.sizes {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: {op}: shapes {:?} and {:?} differ",
                first.sizes, v.sizes
            )));
        }
        if !dense(v) {
            return Err(KernelError::InvalidArgument(format!(
                "foo: {op} takes contiguous tensors"
            )));
        }
        if v.dtype != first.dtype {
            return Err(KernelError::InvalidArgument(format!(
                "foo: {op}: dtypes {} and {} differ",
                first.dtype.name(),
                v.dtype.name()
            )));
        }
    }
    if !first.dtype.is_floating() {
        return Err(KernelError::UnsupportedDtype {
            op: "softmax_lastdim_kernel_impl",
            dtype: first.dtype,
        });
    }
    if dim >= first.ndim().max(1) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: dim {dim} out of range"
        )));
    }
    Ok(())
}

/// `out = softmax(inp, dim)` (or `log_softmax` if `log`), contiguous views of
/// one floating dtype.
pub fn softmax(out: &Strided, inp: &Strided, dim: usize, log: bool) -> Result<(), KernelError> {
    check_softmax("softmax", &[out, inp], dim)?;
    let kind = if log { Kind::LogSoftmax } else { Kind::Softmax };
    run_softmax(kind, out, inp, inp, dim)
}

/// Gradient of `softmax` (`log`: of `log_softmax`) with respect to its input,
/// from `grad` (of the output) and the forward `output`; contiguous views.
pub fn softmax_backward(
    grad_input: &Strided,
    grad: &Strided,
    output: &Strided,
    dim: usize,
    log: bool,
) -> Result<(), KernelError> {
    check_softmax("softmax_backward", &[grad_input, grad, output], dim)?;
    let kind = if log {
        Kind::LogSoftmaxBackward
    } else {
        Kind::SoftmaxBackward
    };
    run_softmax(kind, grad_input, grad, output, dim)
}

fn run_softmax(
    kind: Kind,
    out: &Strided,
    a: &Strided,
    b: &Strided,
    dim: usize,
) -> Result<(), KernelError> {
    if out.numel() == 0 {
        return Ok(());
    }
    let (dim, shape) = if out.ndim() == 0 {
        (0, Sizes::from_slice(&[1]))
    } else {
        (dim, out.sizes.clone())
    };
    let g = geometry(
        &Strided::new(
            out.ptr,
            out.dtype,
            shape.clone(),
            Strides::from_elem(0, shape.len()),
        ),
        dim,
    );
    let (o, a, b) = (P(out.ptr as usize), P(a.ptr as usize), P(b.ptr as usize));
    match out.dtype {
        DType::F32 => lines::<f32>(kind, o, a, b, g),
        DType::F64 => lines::<f64>(kind, o, a, b, g),
        DType::F16 => lines::<f16>(kind, o, a, b, g),
        DType::BF16 => lines::<bf16>(kind, o, a, b, g),
        _ => unreachable!(),
    }
    Ok(())
}

/// Splits the work over outer indices (and column tiles) in parallel.
fn lines<T: FloatElem>(kind: Kind, o: P, a: P, b: P, (outer, d, inner): (usize, usize, usize))
where
    T::Acc: Real + FloatElem<Acc = T::Acc>,
{
    let simd = crate_simd_level();
    if inner == 1 {
        let rows_per_task = (GRAIN_SIZE / d.max(1)).max(1);
        let tasks = outer.div_ceil(rows_per_task);
        let task = |t: usize| {
            let r0 = t * rows_per_task;
            let r1 = (r0 + rows_per_task).min(outer);
            rows_dispatch::<T>(kind, o, a, b, r0, r1, d, simd);
        };
        if tasks > 1 && outer * d >= par_min() {
            parallel::parallel_for(tasks, task);
        } else {
            (0..tasks).for_each(task);
        }
    } else {
        let tiles = inner.div_ceil(TILE);
        let items = outer * tiles;
        let task = |it: usize| {
            let (oi, t) = (it / tiles, it % tiles);
            let c0 = t * TILE;
            let w = TILE.min(inner - c0);
            cols_dispatch::<T>(kind, o, a, b, oi * d * inner + c0, d, inner, w, simd);
        };
        if items > 1 && items * d * TILE.min(inner) >= par_min() {
            let min_len = (GRAIN_SIZE / (d * TILE.min(inner)).max(1)).max(1);
            parallel::for_range(items, min_len, task);
        } else {
            (0..items).for_each(task);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn rows_dispatch<T: FloatElem>(
    kind: Kind,
    o: P,
    a: P,
    b: P,
    r0: usize,
    r1: usize,
    d: usize,
    simd: u8,
) where
    T::Acc: Real + FloatElem<Acc = T::Acc>,
{
    let mut e = vec![<T::Acc as AccF>::ZERO; d];
    simd::dispatch_at(
        SimdLevel::from_u8(simd),
        #[inline(always)]
        || rows::<T>(kind, o, a, b, r0, r1, d, &mut e),
    )
}

#[inline(always)]
fn lane_fold<C: Real>(mut acc: [C; LANES], max: bool) -> C {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = if max {
                gt_max(acc[j], acc[j + w])
            } else {
                acc[j] + acc[j + w]
            };
        }
    }
    acc[0]
}

/// max that vectorizes (NaN need not propagate here: a NaN input makes its
/// whole softmax row NaN through the sum anyway).
#[inline(always)]
fn gt_max<C: Real>(a: C, b: C) -> C {
    if b > a {
        b
    } else {
        a
    }
}

/// Σ (or max) of `x[i]` widened, with LANES accumulators over chunks.
#[inline(always)]
fn lane_reduce<T: FloatElem>(x: &[T], max: bool) -> T::Acc
where
    T::Acc: Real,
{
    let zero = <T::Acc as AccF>::ZERO;
    let init = if max {
        zero - <T::Acc as AccF>::INF
    } else {
        zero
    };
    let mut acc = [init; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            let v = c[j].widen();
            acc[j] = if max { gt_max(acc[j], v) } else { acc[j] + v };
        }
    }
    for (j, v) in chunks.remainder().iter().enumerate() {
        let v = v.widen();
        acc[j] = if max { gt_max(acc[j], v) } else { acc[j] + v };
    }
    lane_fold(acc, max)
}

/// Rows `r0..r1` of `[outer, d]`: each op is a few simple passes over the
/// row (which stays in L1), each of which vectorizes on its own; `e` is a
/// row of scratch in the compute type.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rows<T: FloatElem>(
    kind: Kind,
    o: P,
    a: P,
    b: P,
    r0: usize,
    r1: usize,
    d: usize,
    e: &mut [T::Acc],
) where
    T::Acc: Real,
    T::Acc: FloatElem<Acc = T::Acc>,
{
    for r in r0..r1 {
        // SAFETY: row r of contiguous [outer, d] views; the output does not
        // overlap the inputs (the caller guarantees it).
        let (y, x, z) = unsafe {
            (
                std::slice::from_raw_parts_mut((o.0 as *mut T).add(r * d), d),
                std::slice::from_raw_parts((a.0 as *const T).add(r * d), d),
                std::slice::from_raw_parts((b.0 as *const T).add(r * d), d),
            )
        };
        match kind {
            Kind::Softmax | Kind::LogSoftmax => {
                let m = lane_reduce(x, true);
                for (ei, xi) in e.iter_mut().zip(x) {
                    *ei = (xi.widen() - m).exp_();
                }
                let s = lane_reduce::<T::Acc>(e, false);
                if kind == Kind::Softmax {
                    let inv = <T::Acc as AccF>::ONE / s;
                    for (yi, &ei) in y.iter_mut().zip(e.iter()) {
                        *yi = T::narrow(ei * inv);
                    }
                } else {
                    // torch CPU keeps the row sum in the element type (the
                    // half types round it before the log); so does foo.
                    let ls = T::narrow(s).widen().ln_();
                    for (yi, xi) in y.iter_mut().zip(x) {
                        *yi = T::narrow(xi.widen() - m - ls);
                    }
                }
            }
            Kind::SoftmaxBackward => {
                // x = grad, z = output: gi = z * (x - Σ x z)
                for ((ei, xi), zi) in e.iter_mut().zip(x).zip(z) {
                    *ei = xi.widen() * zi.widen();
                }
                let s = lane_reduce::<T::Acc>(e, false);
                for ((yi, xi), zi) in y.iter_mut().zip(x).zip(z) {
                    *yi = T::narrow(zi.widen() * (xi.widen() - s));
                }
            }
            Kind::LogSoftmaxBackward => {
                // gi = x - exp(z) * Σ x
                let s = lane_reduce(x, false);
                for ((yi, xi), zi) in y.iter_mut().zip(x).zip(z) {
                    *yi = T::narrow(xi.widen() - zi.widen().exp_() * s);
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn cols_dispatch<T: FloatElem>(
    kind: Kind,
    o: P,
    a: P,
    b: P,
    base: usize,
    d: usize,
    inner: usize,
    w: usize,
    simd: u8,
) where
    T::Acc: Real,
{
    simd::dispatch_at(
        SimdLevel::from_u8(simd),
        #[inline(always)]
        || cols::<T>(kind, o, a, b, base, d, inner, w),
    )
}

/// A tile of `w` columns starting at element `base` of `[d, inner]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn cols<T: FloatElem>(kind: Kind, o: P, a: P, b: P, base: usize, d: usize, inner: usize, w: usize)
where
    T::Acc: Real,
{
    let zero = <T::Acc as AccF>::ZERO;
    let ninf = zero - <T::Acc as AccF>::INF;
    let (yp, xp, zp) = (o.0 as *mut T, a.0 as *const T, b.0 as *const T);
    let at = |p: *const T, k: usize, j: usize| unsafe { (*p.add(base + k * inner + j)).widen() };
    let put =
        |k: usize, j: usize, v: T::Acc| unsafe { *yp.add(base + k * inner + j) = T::narrow(v) };
    let mut m = [ninf; TILE];
    let mut s = [zero; TILE];
    match kind {
        Kind::Softmax | Kind::LogSoftmax => {
            for k in 0..d {
                for j in 0..w {
                    m[j] = gt_max(m[j], at(xp, k, j));
                }
            }
            for k in 0..d {
                for j in 0..w {
                    s[j] = s[j] + (at(xp, k, j) - m[j]).exp_();
                }
            }
            if kind == Kind::Softmax {
                for v in s.iter_mut().take(w) {
                    *v = <T::Acc as AccF>::ONE / *v;
                }
                for k in 0..d {
                    for j in 0..w {
                        put(k, j, (at(xp, k, j) - m[j]).exp_() * s[j]);
                    }
                }
            } else {
                for j in 0..w {
                    m[j] = m[j] + s[j].ln_();
                }
                for k in 0..d {
                    for j in 0..w {
                        put(k, j, at(xp, k, j) - m[j]);
                    }
                }
            }
        }
        Kind::SoftmaxBackward => {
            for k in 0..d {
                for j in 0..w {
                    s[j] = s[j] + at(xp, k, j) * at(zp, k, j);
                }
            }
            for k in 0..d {
                for j in 0..w {
                    put(k, j, at(zp, k, j) * (at(xp, k, j) - s[j]));
                }
            }
        }
        Kind::LogSoftmaxBackward => {
            for k in 0..d {
                for j in 0..w {
                    s[j] = s[j] + at(xp, k, j);
                }
            }
            for k in 0..d {
                for j in 0..w {
                    put(k, j, at(xp, k, j) - at(zp, k, j).exp_() * s[j]);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------

/// torch's `Reduction` enum.
pub const REDUCTION_NONE: i64 = 0;
pub const REDUCTION_MEAN: i64 = 1;
pub const REDUCTION_SUM: i64 = 2;

/// Σ f(i) over `0..n` as a fixed pairwise tree over [`LOSS_BLOCK`] leaves,
/// in float64 (pairs of sums, for the loss and the total weight).
fn tree_sum2(
    n: usize,
    f: &(impl Fn(usize) -> Result<(f64, f64), KernelError> + Sync),
) -> Result<(f64, f64), KernelError> {
    fn go(
        lo: usize,
        hi: usize,
        f: &(impl Fn(usize) -> Result<(f64, f64), KernelError> + Sync),
    ) -> Result<(f64, f64), KernelError> {
        let n = hi - lo;
        if n <= LOSS_BLOCK {
            let mut acc = [(0f64, 0f64); 8];
            for i in lo..hi {
                let (a, b) = f(i)?;
                let l = &mut acc[(i - lo) % 8];
                l.0 += a;
                l.1 += b;
            }
            let mut w = 8;
            while w > 1 {
                w /= 2;
                for j in 0..w {
                    acc[j].0 += acc[j + w].0;
                    acc[j].1 += acc[j + w].1;
                }
            }
            return Ok(acc[0]);
        }
        let mid = lo + n.div_ceil(LOSS_BLOCK).div_ceil(2) * LOSS_BLOCK;
        let (a, b) = if n >= par_min() {
            parallel::join(|| go(lo, mid, f), || go(mid, hi, f))
        } else {
            (go(lo, mid, f), go(mid, hi, f))
        };
        let (a, b) = (a?, b?);
        Ok((a.0 + b.0, a.1 + b.1))
    }
    go(0, n, f)
}

fn read_target(t: &Strided, i: usize) -> i64 {
    // SAFETY: i < numel of a contiguous target.
    unsafe {
        match t.dtype {
            DType::U8 => *(t.ptr as *const u8).add(i) as i64,
            _ => *(t.ptr as *const i64).add(i),
        }
    }
}

fn out_of_bounds(t: i64) -> KernelError {
    KernelError::InvalidArgument(format!("Target {t} is out of bounds."))
}

/// NLL geometry: input `[N, C, S]` (or `[C]`), target `[N, S]` (or `[]`).
fn nll_geometry(inp: &Strided, target: &Strided) -> Result<(usize, usize, usize), KernelError> {
    let (n, c, s) = match inp.ndim() {
        1 => (1, inp.sizes[0], 1),
        0 => {
            return Err(KernelError::InvalidArgument(
                "input tensor should be 1D or 2D".into(),
            ))
        }
        _ => (inp.sizes[0], inp.sizes[1], inp.sizes[2..].iter().product()),
    };
    if target.numel() != n * s {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: nll_loss: target of shape {:?} for an input of shape {:?}",
            target.sizes, inp.sizes
        )));
    }
    for v in [inp, target] {
        if !dense(v) {
            return Err(KernelError::InvalidArgument(
                "foo: nll_loss takes contiguous tensors".into(),
            ));
        }
    }
    if !matches!(target.dtype, DType::I64 | DType::U8) {
        return Err(KernelError::InvalidArgument(format!(
            "expected target dtype to be Long or Byte, but got {}",
            target.dtype.name()
        )));
    }
    Ok((n, c, s))
}

fn weight_at<T: FloatElem>(w: Option<&Strided>, c: i64) -> f64 {
    match w {
        // SAFETY: c < C = numel of the (contiguous) weight.
        Some(w) => unsafe {
            (*(w.ptr as *const T).offset(c as isize * w.strides[0]))
                .widen()
                .to_f64()
        },
        None => 1.0,
    }
}

/// `nll_loss_forward` / `nll_loss2d_forward`: `out` is `[N, S...]` (the
/// target's shape) for reduction none, else 0-d; `total_weight` is 0-d.
#[allow(clippy::too_many_arguments)]
pub fn nll_loss_forward(
    out: &Strided,
    total_weight: &Strided,
    inp: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore_index: i64,
) -> Result<(), KernelError> {
    let (n, c, s) = nll_geometry(inp, target)?;
    match inp.dtype {
        DType::F32 => nll_fwd::<f32>(
            out,
            total_weight,
            inp,
            target,
            weight,
            reduction,
            ignore_index,
            n,
            c,
            s,
        ),
        DType::F64 => nll_fwd::<f64>(
            out,
            total_weight,
            inp,
            target,
            weight,
            reduction,
            ignore_index,
            n,
            c,
            s,
        ),
        DType::F16 => nll_fwd::<f16>(
            out,
            total_weight,
            inp,
            target,
            weight,
            reduction,
            ignore_index,
            n,
            c,
            s,
        ),
        DType::BF16 => nll_fwd::<bf16>(
            out,
            total_weight,
            inp,
            target,
            weight,
            reduction,
            ignore_index,
            n,
            c,
            s,
        ),
        d => Err(KernelError::UnsupportedDtype {
            op: "nll_loss_out_frame",
            dtype: d,
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn nll_fwd<T: FloatElem>(
    out: &Strided,
    tw: &Strided,
    inp: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore: i64,
    n: usize,
    c: usize,
    s: usize,
) -> Result<(), KernelError> {
    let x = P(inp.ptr as usize);
    let sample = |i: usize| -> Result<(f64, f64), KernelError> {
        let t = read_target(target, i);
        if t == ignore {
            return Ok((0.0, 0.0));
        }
        if t < 0 || t as usize >= c {
            return Err(out_of_bounds(t));
        }
        let (ni, si) = (i / s, i % s);
        let w = weight_at::<T>(weight, t);
        // SAFETY: (ni, t, si) is inside the contiguous input.
        let v = unsafe {
            (*(x.0 as *const T).add(ni * c * s + t as usize * s + si))
                .widen()
                .to_f64()
        };
        Ok((-v * w, w))
    };
    let put = |v: &Strided, off: isize, val: f64| unsafe {
        *(v.ptr as *mut T).offset(off) = T::from_f64(val)
    };
    if reduction == REDUCTION_NONE {
        let m = n * s;
        let o = P(out.ptr as usize);
        let (osz, ost) = (out.sizes.clone(), out.strides.clone());
        let chunk = GRAIN_SIZE;
        let res: Result<(), KernelError> = try_chunks(m.div_ceil(chunk), m >= par_min(), |k| {
            let lo = k * chunk;
            let hi = (lo + chunk).min(m);
            let mut err = Ok(());
            copy::for_each_offset(&osz, &ost, lo, hi - lo, |j, off| {
                if err.is_ok() {
                    match sample(lo + j) {
                        Ok((v, _)) => unsafe { *(o.0 as *mut T).offset(off) = T::from_f64(v) },
                        Err(e) => err = Err(e),
                    }
                }
            });
            err
        });
        res?;
        put(tw, 0, 0.0);
        return Ok(());
    }
    let (loss, total) = tree_sum2(n * s, &sample)?;
    let v = if reduction == REDUCTION_MEAN {
        // Rounded to the element type first, as CPU divides in it.
        (T::from_f64(loss).widen().to_f64()) / T::from_f64(total).widen().to_f64()
    } else {
        loss
    };
    put(out, 0, v);
    put(tw, 0, total);
    Ok(())
}

/// `nll_loss_backward` / `nll_loss2d_backward` into a contiguous
/// `grad_input` of the input's shape (zeroed here).
#[allow(clippy::too_many_arguments)]
pub fn nll_loss_backward(
    grad_input: &Strided,
    grad_out: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore_index: i64,
    total_weight: &Strided,
) -> Result<(), KernelError> {
    let (n, c, s) = nll_geometry(grad_input, target)?;
    copy::fill(grad_input, 0.0, 0, true)?;
    match grad_input.dtype {
        DType::F32 => nll_bwd::<f32>(
            grad_input,
            grad_out,
            target,
            weight,
            reduction,
            ignore_index,
            total_weight,
            n,
            c,
            s,
        ),
        DType::F64 => nll_bwd::<f64>(
            grad_input,
            grad_out,
            target,
            weight,
            reduction,
            ignore_index,
            total_weight,
            n,
            c,
            s,
        ),
        DType::F16 => nll_bwd::<f16>(
            grad_input,
            grad_out,
            target,
            weight,
            reduction,
            ignore_index,
            total_weight,
            n,
            c,
            s,
        ),
        DType::BF16 => nll_bwd::<bf16>(
            grad_input,
            grad_out,
            target,
            weight,
            reduction,
            ignore_index,
            total_weight,
            n,
            c,
            s,
        ),
        d => Err(KernelError::UnsupportedDtype {
            op: "nll_loss_backward_out_frame",
            dtype: d,
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn nll_bwd<T: FloatElem>(
    gi: &Strided,
    g: &Strided,
    target: &Strided,
    weight: Option<&Strided>,
    reduction: i64,
    ignore: i64,
    tw: &Strided,
    n: usize,
    c: usize,
    s: usize,
) -> Result<(), KernelError> {
    let m = n * s;
    let gp = P(g.ptr as usize);
    let gip = P(gi.ptr as usize);
    // SAFETY: 0-d views.
    let scalar = |v: &Strided| unsafe { (*(v.ptr as *const T)).widen() };
    let (gsz, gst) = (g.sizes.clone(), g.strides.clone());
    let none = reduction == REDUCTION_NONE;
    if !none && g.numel() != 1 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: nll_loss_backward: grad_output of shape {:?} for a reduced loss",
            g.sizes
        )));
    }
    if none && g.numel() != m {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: nll_loss_backward: grad_output of shape {:?} for {m} samples",
            g.sizes
        )));
    }
    let grad_reduced = if none {
        T::Acc::ZERO
    } else {
        let gv = scalar(g);
        let v = if reduction == REDUCTION_MEAN {
            gv / scalar(tw)
        } else {
            gv
        };
        T::Acc::ZERO - v
    };
    let chunk = GRAIN_SIZE;
    try_chunks(m.div_ceil(chunk), m >= par_min(), |k| {
        let lo = k * chunk;
        let hi = (lo + chunk).min(m);
        let mut err = Ok(());
        let mut visit = |i: usize, goff: isize| {
            if err.is_err() {
                return;
            }
            let t = read_target(target, i);
            if t == ignore {
                return;
            }
            if t < 0 || t as usize >= c {
                err = Err(out_of_bounds(t));
                return;
            }
            let w = T::Acc::from_f64(weight_at::<T>(weight, t));
            let (ni, si) = (i / s, i % s);
            let v = if none {
                // SAFETY: goff is the offset of sample i in grad_output.
                let gv = unsafe { (*(gp.0 as *const T).offset(goff)).widen() };
                T::Acc::ZERO - w * gv
            } else if weight.is_some() {
                w * grad_reduced
            } else {
                grad_reduced
            };
            // SAFETY: inside the contiguous grad_input.
            unsafe { *(gip.0 as *mut T).add(ni * c * s + t as usize * s + si) = T::narrow(v) };
        };
        if none {
            copy::for_each_offset(&gsz, &gst, lo, hi - lo, |j, off| visit(lo + j, off));
        } else {
            for i in lo..hi {
                visit(i, 0);
            }
        }
        err
    })
}

/// Runs `$body` with `$k` bound to `$kind` as a constant of its variant, so
/// each loop is compiled per loss (the per-element `match` folds away and
/// the loop vectorizes) instead of matching on the kind per element.
macro_rules! with_kind {
    ($kind:expr, $k:ident => $body:expr) => {
        match $kind {
            PointLoss::Mse => {
                let $k = PointLoss::Mse;
                $body
            }
            PointLoss::Huber(d) => {
                let $k = PointLoss::Huber(d);
                $body
            }
            PointLoss::SmoothL1(b) => {
                let $k = PointLoss::SmoothL1(b);
                $body
            }
            PointLoss::Bce => {
                let $k = PointLoss::Bce;
                $body
            }
        }
    };
}

/// Sum of 8 lanes in a fixed tree order.
#[inline(always)]
fn tree8(mut acc: [f64; 8]) -> f64 {
    let mut k = 8;
    while k > 1 {
        k /= 2;
        for j in 0..k {
            acc[j] += acc[j + k];
        }
    }
    acc[0]
}

/// A loss computed element by element from (input, target), with its
/// gradient: each operation rounds to the element type, as CPU's kernels do
/// (in half arithmetic for the half types, except where CPU computes them in
/// float32: smooth L1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PointLoss {
    /// `mse_loss`: (x - y)^2.
    Mse,
    /// `huber_loss` with `delta` (> 0).
    Huber(f64),
    /// `smooth_l1_loss` with `beta` (>= 0; 0 is the L1 loss).
    SmoothL1(f64),
    /// `binary_cross_entropy` without weight (the caller multiplies it in and
    /// reduces, as CPU does): x must lie in [0, 1].
    Bce,
}

impl PointLoss {
    /// The loss `kind` ("mse", "huber", "smooth_l1", "bce") with its
    /// parameter (delta, beta). smooth_l1's beta is at least 0: a negative
    /// one is the L1 loss, as CPU's backward takes it (its forward refuses it).
    pub fn from_name(kind: &str, param: f64) -> Result<Self, KernelError> {
        Ok(match kind {
            "mse" => PointLoss::Mse,
            "huber" => PointLoss::Huber(param),
            "smooth_l1" => PointLoss::SmoothL1(param.max(0.0)),
            "bce" => PointLoss::Bce,
            k => return Err(KernelError::InvalidValue(format!("foo: unknown loss {k}"))),
        })
    }

    fn name(self) -> &'static str {
        match self {
            PointLoss::Mse => "mse_loss",
            PointLoss::Huber(_) => "huber_loss",
            PointLoss::SmoothL1(_) => "smooth_l1_loss",
            PointLoss::Bce => "binary_cross_entropy",
        }
    }

    /// The loss of one element.
    #[inline(always)]
    fn value<T: FloatElem>(self, x: T::Acc, y: T::Acc) -> T::Acc {
        let half = T::Acc::from_f64(0.5);
        match self {
            PointLoss::Mse => {
                let d = rnd::<T>(x - y);
                rnd::<T>(d * d)
            }
            PointLoss::Huber(delta) => {
                let dl = rnd::<T>(T::Acc::from_f64(delta));
                let z = rnd::<T>(x - y).abs();
                if z < dl {
                    rnd::<T>(rnd::<T>(half * z) * z)
                } else {
                    rnd::<T>(dl * rnd::<T>(z - rnd::<T>(half * dl)))
                }
            }
            PointLoss::SmoothL1(beta) => {
                let b = T::Acc::from_f64(beta);
                let z = (x - y).abs();
                if z < b {
                    half * z * z / b
                } else {
                    z - half * b
                }
            }
            PointLoss::Bce => {
                let one = T::Acc::ONE;
                let lo = T::Acc::from_f64(-100.0);
                let ln = |v: T::Acc| {
                    let l = rnd::<T>(T::Acc::from_f64(v.to_f64().ln()));
                    if l < lo {
                        lo
                    } else {
                        l
                    }
                };
                let a = rnd::<T>(rnd::<T>(y - one) * ln(rnd::<T>(one - x)));
                rnd::<T>(a - rnd::<T>(y * ln(x)))
            }
        }
    }

    /// d loss / d x times `g`, `norm` the reduction's factor (rounded to
    /// the element type).
    #[inline(always)]
    fn grad<T: FloatElem>(self, x: T::Acc, y: T::Acc, g: T::Acc, norm: T::Acc) -> T::Acc {
        match self {
            PointLoss::Mse => rnd::<T>(rnd::<T>(norm * rnd::<T>(x - y)) * g),
            PointLoss::Huber(delta) => {
                let dl = rnd::<T>(T::Acc::from_f64(delta));
                let d = rnd::<T>(x - y);
                let ng = rnd::<T>(norm * g);
                if d <= T::Acc::ZERO - dl {
                    T::Acc::ZERO - rnd::<T>(ng * dl)
                } else if d >= dl {
                    rnd::<T>(ng * dl)
                } else {
                    rnd::<T>(rnd::<T>(norm * d) * g)
                }
            }
            PointLoss::SmoothL1(beta) => {
                let d = x - y;
                let ng = norm * g;
                if beta == 0.0 {
                    // The L1 loss's gradient: sign(d) (0 at 0).
                    if d > T::Acc::ZERO {
                        ng
                    } else if d < T::Acc::ZERO {
                        T::Acc::ZERO - ng
                    } else {
                        d * ng
                    }
                } else {
                    let b = T::Acc::from_f64(beta);
                    if d <= T::Acc::ZERO - b {
                        T::Acc::ZERO - ng
                    } else if d >= b {
                        ng
                    } else {
                        norm * d * g / b
                    }
                }
            }
            PointLoss::Bce => {
                let eps = rnd::<T>(T::Acc::from_f64(1e-12));
                let den = rnd::<T>(rnd::<T>(T::Acc::ONE - x) * x);
                let den = if den < eps { eps } else { den };
                rnd::<T>(rnd::<T>(g * rnd::<T>(x - y)) / den)
            }
        }
    }
}

/// `mse_loss`: `out` = (a - b)^2 over the broadcast shape `out.sizes`
/// (reduction none) or its mean / sum into a 0-d `out`. `shape` is the
/// broadcast shape of `a` and `b`.
pub fn mse_loss(
    out: &Strided,
    a: &Strided,
    b: &Strided,
    shape: &[usize],
    reduction: i64,
) -> Result<(), KernelError> {
    point_loss(PointLoss::Mse, out, a, b, shape, reduction)
}

/// A [`PointLoss`] of `a` (input) and `b` (target) over their broadcast
/// `shape`, into `out` of that shape (reduction none) or its mean / sum into
/// a 0-d `out`. All three of one floating dtype.
pub fn point_loss(
    kind: PointLoss,
    out: &Strided,
    a: &Strided,
    b: &Strided,
    shape: &[usize],
    reduction: i64,
) -> Result<(), KernelError> {
    let sa = copy::broadcast_strides(a, shape)?;
    let sb = copy::broadcast_strides(b, shape)?;
    if a.dtype != b.dtype || out.dtype != a.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {}: operands of different dtypes",
            kind.name()
        )));
    }
    match a.dtype {
        DType::F32 => loss_fwd::<f32>(kind, out, a, &sa, b, &sb, shape, reduction),
        DType::F64 => loss_fwd::<f64>(kind, out, a, &sa, b, &sb, shape, reduction),
        DType::F16 => loss_fwd::<f16>(kind, out, a, &sa, b, &sb, shape, reduction),
        DType::BF16 => loss_fwd::<bf16>(kind, out, a, &sa, b, &sb, shape, reduction),
        d => Err(KernelError::UnsupportedDtype {
            op: match kind {
                PointLoss::Mse => "mse_cpu",
                PointLoss::Huber(_) => "huber_cpu",
                PointLoss::SmoothL1(_) => "smooth_l1_cpu",
                PointLoss::Bce => "binary_cross_entropy",
            },
            dtype: d,
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn loss_fwd<T: FloatElem>(
    kind: PointLoss,
    out: &Strided,
    a: &Strided,
    sa: &[isize],
    b: &Strided,
    sb: &[isize],
    shape: &[usize],
    reduction: i64,
) -> Result<(), KernelError> {
    let n: usize = shape.iter().product();
    let (pa, pb) = (P(a.ptr as usize), P(b.ptr as usize));
    // The common case (input and target contiguous, of the loss's shape; the
    // output too without reduction): typed slice loops, vectorized.
    let flat = n > 0
        && a.sizes[..] == *shape
        && b.sizes[..] == *shape
        && a.is_contiguous()
        && b.is_contiguous()
        && (reduction != REDUCTION_NONE || (out.sizes[..] == *shape && out.is_contiguous()));
    if kind == PointLoss::Bce {
        // CPU's check, before any output is written.
        let bad = AtomicBool::new(false);
        let chunk = GRAIN_SIZE;
        let _ = try_chunks(n.div_ceil(chunk), n >= par_min(), |k| {
            let lo = k * chunk;
            let hi = (lo + chunk).min(n);
            let mut w = Walker3::new(shape, [sa, &[], &[]], lo);
            for i in lo..hi {
                // SAFETY: broadcast offsets inside a.
                let x = unsafe { (*(pa.0 as *const T).offset(w.off[0])).widen() };
                if !(x >= T::Acc::ZERO && x <= T::Acc::ONE) {
                    bad.store(true, Ordering::Relaxed);
                    break;
                }
                if i + 1 < hi {
                    w.next();
                }
            }
            Ok(())
        });
        if bad.load(Ordering::Relaxed) {
            return Err(KernelError::InvalidArgument(
                "all elements of input should be between 0 and 1".into(),
            ));
        }
    }
    let sq = |oa: isize, ob: isize| -> T::Acc {
        // SAFETY: broadcast offsets inside a and b.
        let (x, y) = unsafe {
            (
                (*(pa.0 as *const T).offset(oa)).widen(),
                (*(pb.0 as *const T).offset(ob)).widen(),
            )
        };
        kind.value::<T>(x, y)
    };
    if reduction == REDUCTION_NONE {
        if out.sizes[..] != *shape {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: {} output {:?} for shape {:?}",
                kind.name(),
                out.sizes,
                shape
            )));
        }
        let po = P(out.ptr as usize);
        let chunk = GRAIN_SIZE;
        if flat {
            let _ = try_chunks(n.div_ceil(chunk), n >= par_min(), |c| {
                let lo = c * chunk;
                let hi = (lo + chunk).min(n);
                // SAFETY: all three are contiguous views of `shape`.
                let (x, y, o) = unsafe {
                    (
                        std::slice::from_raw_parts((pa.0 as *const T).add(lo), hi - lo),
                        std::slice::from_raw_parts((pb.0 as *const T).add(lo), hi - lo),
                        std::slice::from_raw_parts_mut((po.0 as *mut T).add(lo), hi - lo),
                    )
                };
                with_kind!(kind, k => simd::dispatch(
                    #[inline(always)]
                    || {
                        for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                            *o = T::narrow(k.value::<T>(x.widen(), y.widen()));
                        }
                    },
                ));
                Ok(())
            });
            return Ok(());
        }
        let _ = try_chunks(n.div_ceil(chunk), n >= par_min(), |k| {
            let lo = k * chunk;
            let hi = (lo + chunk).min(n);
            let mut w = Walker3::new(shape, [sa, sb, &out.strides], lo);
            for i in lo..hi {
                // SAFETY: output offset from its own strides.
                unsafe { *(po.0 as *mut T).offset(w.off[2]) = T::narrow(sq(w.off[0], w.off[1])) };
                if i + 1 < hi {
                    w.next();
                }
            }
            Ok(())
        });
        return Ok(());
    }
    // Pairwise over blocks; within a block, a walker.
    fn go<T: FloatElem>(
        lo: usize,
        hi: usize,
        shape: &[usize],
        sa: &[isize],
        sb: &[isize],
        sq: &(impl Fn(isize, isize) -> T::Acc + Sync),
        flat: Option<(PointLoss, P, P)>,
    ) -> f64 {
        let n = hi - lo;
        if let (true, Some((kind, pa, pb))) = (n <= LOSS_BLOCK, flat) {
            // SAFETY: both are contiguous views of `shape`.
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts((pa.0 as *const T).add(lo), n),
                    std::slice::from_raw_parts((pb.0 as *const T).add(lo), n),
                )
            };
            return with_kind!(kind, k => simd::dispatch(
                #[inline(always)]
                || {
                    let mut acc = [0f64; 8];
                    let (cx, cy) = (x.chunks_exact(8), y.chunks_exact(8));
                    let (tx, ty) = (cx.remainder(), cy.remainder());
                    for (cx, cy) in cx.zip(cy) {
                        for l in 0..8 {
                            acc[l] += k.value::<T>(cx[l].widen(), cy[l].widen()).to_f64();
                        }
                    }
                    for (l, (&x, &y)) in tx.iter().zip(ty).enumerate() {
                        acc[l] += k.value::<T>(x.widen(), y.widen()).to_f64();
                    }
                    tree8(acc)
                },
            ));
        }
        if n <= LOSS_BLOCK {
            let mut acc = [0f64; 8];
            let mut w = Walker3::new(shape, [sa, sb, &[]], lo);
            for i in lo..hi {
                acc[(i - lo) % 8] += sq(w.off[0], w.off[1]).to_f64();
                if i + 1 < hi {
                    w.next();
                }
            }
            return tree8(acc);
        }
        let mid = lo + n.div_ceil(LOSS_BLOCK).div_ceil(2) * LOSS_BLOCK;
        let (x, y) = if n >= par_min() {
            parallel::join(
                || go::<T>(lo, mid, shape, sa, sb, sq, flat),
                || go::<T>(mid, hi, shape, sa, sb, sq, flat),
            )
        } else {
            (
                go::<T>(lo, mid, shape, sa, sb, sq, flat),
                go::<T>(mid, hi, shape, sa, sb, sq, flat),
            )
        };
        x + y
    }
    let total = go::<T>(0, n, shape, sa, sb, &sq, flat.then_some((kind, pa, pb)));
    let v = if reduction == REDUCTION_MEAN {
        total / n as f64
    } else {
        total
    };
    // SAFETY: a 0-d output.
    unsafe { *(out.ptr as *mut T) = T::from_f64(v) };
    Ok(())
}

/// `mse_loss_backward`: `grad_input = norm * (a - b) * grad` over the
/// broadcast shape of `grad_input`, `norm = 2 / a.numel()` for mean, else 2.
pub fn mse_loss_backward(
    grad_input: &Strided,
    grad: &Strided,
    a: &Strided,
    b: &Strided,
    reduction: i64,
) -> Result<(), KernelError> {
    point_loss_backward(PointLoss::Mse, grad_input, grad, a, b, reduction)
}

/// A [`PointLoss`]'s backward: `grad_input` = d loss / d a times `grad`
/// (broadcast to `grad_input`'s shape), divided by `a.numel()` for mean
/// (`binary_cross_entropy`: never; its caller divides, as CPU does).
pub fn point_loss_backward(
    kind: PointLoss,
    grad_input: &Strided,
    grad: &Strided,
    a: &Strided,
    b: &Strided,
    reduction: i64,
) -> Result<(), KernelError> {
    let shape = grad_input.sizes.clone();
    let (sg, sa, sb) = (
        copy::broadcast_strides(grad, &shape)?,
        copy::broadcast_strides(a, &shape)?,
        copy::broadcast_strides(b, &shape)?,
    );
    let base = if kind == PointLoss::Mse { 2.0 } else { 1.0 };
    let norm = if reduction == REDUCTION_MEAN && kind != PointLoss::Bce {
        base / a.numel() as f64
    } else {
        base
    };
    #[allow(clippy::too_many_arguments)]
    fn go<T: FloatElem>(
        kind: PointLoss,
        gi: &Strided,
        g: &Strided,
        sg: &[isize],
        a: &Strided,
        sa: &[isize],
        b: &Strided,
        sb: &[isize],
        norm: f64,
    ) {
        let n = gi.numel();
        let (po, pg, pa, pb) = (
            P(gi.ptr as usize),
            P(g.ptr as usize),
            P(a.ptr as usize),
            P(b.ptr as usize),
        );
        let norm = rnd::<T>(T::Acc::from_f64(norm));
        let chunk = GRAIN_SIZE;
        // The common case: input, target and grad_input contiguous, the
        // incoming gradient one value (a reduced loss) or contiguous too.
        let scalar_g = sg.iter().all(|&st| st == 0);
        if [gi, a, b]
            .iter()
            .all(|t| t.is_contiguous() && t.sizes == gi.sizes)
            && (scalar_g || (g.is_contiguous() && g.sizes == gi.sizes))
        {
            let _ = try_chunks(n.div_ceil(chunk), n >= par_min(), |c| {
                let lo = c * chunk;
                let hi = (lo + chunk).min(n);
                // SAFETY: contiguous views of grad_input's shape (g: of one
                // element when scalar_g).
                let (o, x, y) = unsafe {
                    (
                        std::slice::from_raw_parts_mut((po.0 as *mut T).add(lo), hi - lo),
                        std::slice::from_raw_parts((pa.0 as *const T).add(lo), hi - lo),
                        std::slice::from_raw_parts((pb.0 as *const T).add(lo), hi - lo),
                    )
                };
                if scalar_g {
                    // SAFETY: a non-empty view has an element at its pointer.
                    let gv = unsafe { (*(pg.0 as *const T)).widen() };
                    with_kind!(kind, k => simd::dispatch(
                        #[inline(always)]
                        || {
                            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                                *o = T::narrow(k.grad::<T>(x.widen(), y.widen(), gv, norm));
                            }
                        },
                    ));
                } else {
                    // SAFETY: as above.
                    let gs =
                        unsafe { std::slice::from_raw_parts((pg.0 as *const T).add(lo), hi - lo) };
                    with_kind!(kind, k => simd::dispatch(
                        #[inline(always)]
                        || {
                            for (((o, &x), &y), &gv) in o.iter_mut().zip(x).zip(y).zip(gs) {
                                *o = T::narrow(k.grad::<T>(x.widen(), y.widen(), gv.widen(), norm));
                            }
                        },
                    ));
                }
                Ok(())
            });
            return;
        }
        let _ = try_chunks(n.div_ceil(chunk), n >= par_min(), |k| {
            let lo = k * chunk;
            let hi = (lo + chunk).min(n);
            let mut wo = Walker3::new(&gi.sizes, [&gi.strides, sg, &[]], lo);
            let mut wi = Walker3::new(&gi.sizes, [sa, sb, &[]], lo);
            for i in lo..hi {
                // SAFETY: offsets from the views' broadcast strides.
                unsafe {
                    let x = (*(pa.0 as *const T).offset(wi.off[0])).widen();
                    let y = (*(pb.0 as *const T).offset(wi.off[1])).widen();
                    let gv = (*(pg.0 as *const T).offset(wo.off[1])).widen();
                    *(po.0 as *mut T).offset(wo.off[0]) = T::narrow(kind.grad::<T>(x, y, gv, norm));
                }
                if i + 1 < hi {
                    wo.next();
                    wi.next();
                }
            }
            Ok(())
        });
    }
    if grad_input.numel() == 0 {
        return Ok(());
    }
    if [grad.dtype, a.dtype, b.dtype]
        .iter()
        .any(|&d| d != grad_input.dtype)
    {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {}_backward: operands of different dtypes",
            kind.name()
        )));
    }
    match grad_input.dtype {
        DType::F32 => go::<f32>(kind, grad_input, grad, &sg, a, &sa, b, &sb, norm),
        DType::F64 => go::<f64>(kind, grad_input, grad, &sg, a, &sa, b, &sb, norm),
        DType::F16 => go::<f16>(kind, grad_input, grad, &sg, a, &sa, b, &sb, norm),
        DType::BF16 => go::<bf16>(kind, grad_input, grad, &sg, a, &sa, b, &sb, norm),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "mse_backward_cpu",
                dtype: d,
            })
        }
    }
    Ok(())
}

/// `embedding_dense_backward`: `out[w] = Σ_{i: idx[i] == w} grad[i]` (rows
/// of `d` elements; contiguous `grad` `[n, d]`, `indices` `[n]` int64 or
/// int32, `out` `[num_weights, d]`). Rows of `padding_idx` stay zero; with
/// `scale_grad_by_freq` each contribution is divided by its index's count.
/// Each output row sums in index order, in float32 for the half types.
pub fn embedding_dense_backward(
    out: &Strided,
    grad: &Strided,
    indices: &Strided,
    padding_idx: i64,
    scale_grad_by_freq: bool,
) -> Result<(), KernelError> {
    let nw = out.sizes.first().copied().unwrap_or(0);
    let d = out.sizes.get(1).copied().unwrap_or(0);
    let n = indices.numel();
    if !dense(out) || !dense(grad) || !dense(indices) || out.ndim() != 2 || grad.numel() != n * d {
        return Err(KernelError::InvalidArgument("foo: embedding_dense_backward takes contiguous [n, d] grads and [num_weights, d] output".into()));
    }
    if grad.dtype != out.dtype {
        return Err(KernelError::InvalidArgument(
            "foo: embedding_dense_backward: grad and output dtypes differ".into(),
        ));
    }
    let idx: Vec<i64> = (0..n)
        .map(|i| unsafe {
            // SAFETY: i < n, contiguous indices.
            match indices.dtype {
                DType::I32 => *(indices.ptr as *const i32).add(i) as i64,
                _ => *(indices.ptr as *const i64).add(i),
            }
        })
        .collect();
    if !matches!(indices.dtype, DType::I32 | DType::I64) {
        return Err(KernelError::InvalidArgument(format!(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got {} instead",
            indices.dtype.name()
        )));
    }
    // Counting sort of positions by index (stable: each row sums in order).
    let mut counts = vec![0usize; nw + 1];
    for &v in &idx {
        if v < 0 || v as usize >= nw {
            return Err(KernelError::InvalidArgument(format!(
                "foo: embedding_dense_backward: index {v} out of range for {nw} weights"
            )));
        }
        counts[v as usize + 1] += 1;
    }
    for w in 0..nw {
        counts[w + 1] += counts[w];
    }
    let mut order = vec![0usize; n];
    let mut next = counts.clone();
    for (i, &v) in idx.iter().enumerate() {
        order[next[v as usize]] = i;
        next[v as usize] += 1;
    }
    #[allow(clippy::too_many_arguments)]
    fn go<T: Scalar>(
        out: &Strided,
        grad: &Strided,
        d: usize,
        counts: &[usize],
        order: &[usize],
        padding: i64,
        scale: bool,
        half: bool,
    ) {
        let (po, pg) = (P(out.ptr as usize), P(grad.ptr as usize));
        let nw = counts.len() - 1;
        let row = |w: usize| {
            let mut acc = vec![0f64; d];
            let members = &order[counts[w]..counts[w + 1]];
            if w as i64 != padding && !members.is_empty() {
                let f = if scale {
                    1.0 / members.len() as f64
                } else {
                    1.0
                };
                for &i in members {
                    // SAFETY: row i of the contiguous grad.
                    let g = unsafe { std::slice::from_raw_parts((pg.0 as *const T).add(i * d), d) };
                    for (a, &v) in acc.iter_mut().zip(g) {
                        // Half types: float32 accumulation; others: their own type.
                        *a = if half {
                            ((*a as f32) + (v.to_f64() * f) as f32) as f64
                        } else {
                            *a + v.to_f64() * f
                        };
                    }
                }
            }
            // SAFETY: row w of the contiguous output.
            let o = unsafe { std::slice::from_raw_parts_mut((po.0 as *mut T).add(w * d), d) };
            for (x, &a) in o.iter_mut().zip(&acc) {
                *x = T::from_f64(a);
            }
        };
        if nw * d >= par_min() {
            parallel::for_range(nw, (GRAIN_SIZE / d.max(1)).max(1), row);
        } else {
            (0..nw).for_each(row);
        }
    }
    match out.dtype {
        DType::F32 => go::<f32>(
            out,
            grad,
            d,
            &counts,
            &order,
            padding_idx,
            scale_grad_by_freq,
            true,
        ),
        DType::F64 => go::<f64>(
            out,
            grad,
            d,
            &counts,
            &order,
            padding_idx,
            scale_grad_by_freq,
            false,
        ),
        DType::F16 => go::<f16>(
            out,
            grad,
            d,
            &counts,
            &order,
            padding_idx,
            scale_grad_by_freq,
            true,
        ),
        DType::BF16 => go::<bf16>(
            out,
            grad,
            d,
            &counts,
            &order,
            padding_idx,
            scale_grad_by_freq,
            true,
        ),
        dt => {
            return Err(KernelError::UnsupportedDtype {
                op: "embedding_dense_backward",
                dtype: dt,
            })
        }
    }
    Ok(())
}

pub mod dist;
pub mod grid;
#[cfg(test)]
mod tests;
