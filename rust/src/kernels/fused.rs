//! foo's fused kernels, the ones no single aten op names (Python:
//! `torch.ops.foo.*`, python/foo_rs/ops.py):
//!
//! - [`rms_norm`] / [`rms_norm_backward`]: RMSNorm over the last `n`
//!   elements of each row, one pass per row (the row stays in cache between
//!   its sum of squares and its scaling). The statistic accumulates in f32
//!   for f32, f16 and bf16 and in f64 for f64 (ATen's `opmath`), in eight
//!   lanes so that the loop vectorizes; the backward recomputes `rstd` from
//!   the row it reads anyway, so the forward saves nothing but its inputs.
//! - [`linear_act`]: `act(x @ w^T + b)` computed tile by tile: each block of
//!   output rows is filled with the bias, multiplied into (the gemm crate,
//!   as `addmm`) and passed through the activation while it is in cache,
//!   instead of three ops each streaming the whole output. The activation
//!   is the elementwise kernel's own (`UnaryOp::Gelu`, ...), so its values
//!   are those of `F.gelu` on foo.
//!
//! Results do not depend on the thread count: rows (and row tiles) are
//! split across threads, never one sum.

use super::copy::Scalar;
use super::elementwise::{unary, Operand, UnaryOp};
use super::linalg::{gemm_one, par_gemm, ToF32};
use super::norm::dispatch_float;
use super::reduce::par_min;
use super::{parallel, KernelError, Strided};
use crate::dtype::DType;
use half::{bf16, f16};

#[derive(Clone, Copy)]
struct P(usize);

/// One tile's work in [`linear_act`].
type Task<'a> = dyn Fn(usize) -> Result<(), KernelError> + Sync + 'a;
/// Runs a [`Task`] for every tile.
type Runner<'a> = dyn Fn(&Task<'_>) -> Result<(), KernelError> + 'a;

fn invalid(msg: String) -> KernelError {
    KernelError::InvalidArgument(msg)
}

fn floating(op: &'static str, s: &Strided) -> Result<(), KernelError> {
    if s.dtype.is_floating() {
        Ok(())
    } else {
        Err(KernelError::UnsupportedDtype { op, dtype: s.dtype })
    }
}

fn dense(op: &str, what: &str, s: &Strided, numel: usize, dtype: DType) -> Result<(), KernelError> {
    if s.numel() != numel || !(numel == 0 || s.is_contiguous()) || s.dtype != dtype {
        return Err(invalid(format!(
            "foo: {op}: {what} must be a contiguous {} tensor of {numel} elements",
            dtype.name()
        )));
    }
    Ok(())
}

/// An element type and the type its sums accumulate in (ATen's `opmath`).
trait Elem: Scalar {
    type A: Acc;
    fn load(self) -> Self::A;
    fn store(v: Self::A) -> Self;
}

/// The accumulation type's arithmetic.
trait Acc:
    Copy
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    fn of(v: f64) -> Self;
    fn f64(self) -> f64;
}

impl Acc for f32 {
    const ZERO: f32 = 0.0;
    #[inline(always)]
    fn of(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
}

impl Acc for f64 {
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn of(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
}

impl Elem for f32 {
    type A = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(v: f32) -> f32 {
        v
    }
}

impl Elem for f64 {
    type A = f64;
    #[inline(always)]
    fn load(self) -> f64 {
        self
    }
    #[inline(always)]
    fn store(v: f64) -> f64 {
        v
    }
}

impl Elem for f16 {
    type A = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32_()
    }
    #[inline(always)]
    fn store(v: f32) -> f16 {
        f16::from_f32_(v)
    }
}

impl Elem for bf16 {
    type A = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32_()
    }
    #[inline(always)]
    fn store(v: f32) -> bf16 {
        bf16::from_f32_(v)
    }
}

const LANES: usize = 8;

/// `sum(a[i] * b[i])` in the accumulation type, eight lanes then the lanes
/// in order (a fixed order: the result depends on `n` alone).
#[inline(always)]
fn dot<T: Elem>(a: &[T], b: &[T]) -> T::A {
    let mut acc = [T::A::ZERO; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            acc[l] = acc[l] + x[l].load() * y[l].load();
        }
    }
    for (l, (x, y)) in ar.iter().zip(br).enumerate() {
        acc[l] = acc[l] + x.load() * y.load();
    }
    let mut s = T::A::ZERO;
    for v in acc {
        s = s + v;
    }
    s
}

/// `1 / sqrt(mean(x^2) + eps)` of one row, in the accumulation type.
#[inline(always)]
fn row_rstd<T: Elem>(xs: &[T], eps: f64) -> T::A {
    let n = xs.len();
    let ms = dot(xs, xs).f64() / n as f64;
    // Rounded through the accumulation type as ATen's opmath computation is.
    let ms = T::A::of(ms).f64() + T::A::of(eps).f64();
    T::A::of(1.0 / T::A::of(ms).f64().sqrt())
}

fn rows_parallel(m: usize, n: usize, f: impl Fn(usize) + Sync) {
    if m * n > par_min() && m > 1 {
        parallel::parallel_for(m, f);
    } else {
        (0..m).for_each(f);
    }
}

/// RMSNorm of `x` (contiguous, `m` rows of `n`): `out = T(x * rstd) * w`
/// with `rstd = 1 / sqrt(mean(x^2) + eps)` per row, rounded as ATen's
/// composite `rms_norm` rounds (the normalized row to the element type, then
/// the product with the weight). `weight` (contiguous, `n`, same dtype) is
/// optional; `rstd` (contiguous, `m`, the accumulation dtype: float32 for the
/// 16-bit types) receives the statistic when given.
pub fn rms_norm(
    out: &Strided,
    rstd: Option<&Strided>,
    x: &Strided,
    weight: Option<&Strided>,
    m: usize,
    n: usize,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "rms_norm";
    floating(OP, x)?;
    dense(OP, "input", x, m * n, x.dtype)?;
    dense(OP, "output", out, m * n, x.dtype)?;
    if let Some(w) = weight {
        dense(OP, "weight", w, n, x.dtype)?;
    }
    let acc_dtype = if x.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    if let Some(r) = rstd {
        dense(OP, "rstd", r, m, acc_dtype)?;
    }
    fn go<T: Elem>(
        out: &Strided,
        rstd: Option<&Strided>,
        x: &Strided,
        w: Option<&Strided>,
        m: usize,
        n: usize,
        eps: f64,
    ) {
        let (xp, op) = (P(x.ptr as usize), P(out.ptr as usize));
        let wp = w.map(|w| P(w.ptr as usize));
        let rp = rstd.map(|r| P(r.ptr as usize));
        rows_parallel(m, n, |i| {
            // SAFETY: row i of contiguous [m, n] views, each row written by one task.
            let xs = unsafe { std::slice::from_raw_parts((xp.0 as *const T).add(i * n), n) };
            let os = unsafe { std::slice::from_raw_parts_mut((op.0 as *mut T).add(i * n), n) };
            // An empty row has rstd inf (mean of nothing is NaN on CPU): nothing to write.
            let r = if n == 0 {
                T::A::of(f64::NAN)
            } else {
                row_rstd(xs, eps)
            };
            match wp {
                Some(wp) => {
                    let ws = unsafe { std::slice::from_raw_parts(wp.0 as *const T, n) };
                    for ((o, &v), &g) in os.iter_mut().zip(xs).zip(ws) {
                        *o = T::store(T::store(v.load() * r).load() * g.load());
                    }
                }
                None => {
                    for (o, &v) in os.iter_mut().zip(xs) {
                        *o = T::store(v.load() * r);
                    }
                }
            }
            if let Some(rp) = rp {
                // SAFETY: element i of a contiguous [m] view of the accumulation type.
                unsafe { *(rp.0 as *mut T::A).add(i) = r };
            }
        });
    }
    dispatch_float!(OP, x.dtype, go, out, rstd, x, weight, m, n, eps);
    Ok(())
}

/// Gradients of [`rms_norm`] for output gradient `dy` (contiguous `[m, n]`):
/// `grad_input = rstd * (g - x * rstd^2 * mean(g * x))` with `g = dy * w`,
/// and `grad_weight = sum over rows of dy * T(x * rstd)`, each only when
/// given (contiguous, of `x`'s dtype). `rstd` is recomputed per row.
/// `grad_weight`'s row sums run over fixed blocks of rows, added in order.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_backward(
    grad_input: Option<&Strided>,
    grad_weight: Option<&Strided>,
    dy: &Strided,
    x: &Strided,
    weight: Option<&Strided>,
    m: usize,
    n: usize,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "rms_norm_backward";
    floating(OP, x)?;
    dense(OP, "input", x, m * n, x.dtype)?;
    dense(OP, "grad_output", dy, m * n, x.dtype)?;
    if let Some(w) = weight {
        dense(OP, "weight", w, n, x.dtype)?;
    }
    if let Some(g) = grad_input {
        dense(OP, "grad_input", g, m * n, x.dtype)?;
    }
    if let Some(g) = grad_weight {
        dense(OP, "grad_weight", g, n, x.dtype)?;
    }
    #[allow(clippy::too_many_arguments)]
    fn go<T: Elem>(
        gi: Option<&Strided>,
        gw: Option<&Strided>,
        dy: &Strided,
        x: &Strided,
        w: Option<&Strided>,
        m: usize,
        n: usize,
        eps: f64,
    ) {
        let (xp, dp) = (P(x.ptr as usize), P(dy.ptr as usize));
        let wp = w.map(|w| P(w.ptr as usize));
        let row = |i: usize| unsafe {
            // SAFETY: row i of contiguous [m, n] views.
            (
                std::slice::from_raw_parts((xp.0 as *const T).add(i * n), n),
                std::slice::from_raw_parts((dp.0 as *const T).add(i * n), n),
            )
        };
        let ws = wp.map(|wp| unsafe { std::slice::from_raw_parts(wp.0 as *const T, n) });
        if let Some(gi) = gi {
            let gp = P(gi.ptr as usize);
            rows_parallel(m, n, |i| {
                let (xs, ds) = row(i);
                // SAFETY: row i of the contiguous grad_input, written by this task alone.
                let gs = unsafe { std::slice::from_raw_parts_mut((gp.0 as *mut T).add(i * n), n) };
                let r = row_rstd(xs, eps);
                let g = |j: usize| match ws {
                    Some(ws) => ds[j].load() * ws[j].load(),
                    None => ds[j].load(),
                };
                let mut acc = T::A::ZERO;
                for (j, &v) in xs.iter().enumerate() {
                    acc = acc + g(j) * v.load();
                }
                let c = r * r * r * acc / T::A::of(n as f64);
                for (j, (o, &v)) in gs.iter_mut().zip(xs).enumerate() {
                    *o = T::store(r * g(j) - c * v.load());
                }
            });
        }
        if let Some(gw) = gw {
            // Partial sums over blocks of rows (fixed by `m`), then added in order.
            const ROWS: usize = 64;
            let blocks = m.div_ceil(ROWS);
            let part = |b: usize| {
                let mut s = vec![T::A::ZERO; n];
                for i in b * ROWS..((b + 1) * ROWS).min(m) {
                    let (xs, ds) = row(i);
                    let r = row_rstd(xs, eps);
                    for ((acc, &v), &d) in s.iter_mut().zip(xs).zip(ds) {
                        *acc = *acc + d.load() * T::store(v.load() * r).load();
                    }
                }
                s
            };
            let parts = if m * n > par_min() && blocks > 1 {
                parallel::collect(blocks, part)
            } else {
                (0..blocks).map(part).collect()
            };
            // SAFETY: contiguous [n] view of T.
            let out = unsafe { std::slice::from_raw_parts_mut(gw.ptr as *mut T, n) };
            for (j, o) in out.iter_mut().enumerate() {
                let mut s = T::A::ZERO;
                for p in &parts {
                    s = s + p[j];
                }
                *o = T::store(s);
            }
        }
    }
    dispatch_float!(
        OP,
        x.dtype,
        go,
        grad_input,
        grad_weight,
        dy,
        x,
        weight,
        m,
        n,
        eps
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// linear + activation
// ---------------------------------------------------------------------------

/// The activations [`linear_act`] fuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    Gelu,
    GeluTanh,
    Silu,
}

impl Act {
    /// Names as `torch.ops.foo.linear_act` takes them.
    pub const NAMES: [&'static str; 5] = ["none", "relu", "gelu", "gelu_tanh", "silu"];

    pub fn parse(name: &str) -> Result<Act, KernelError> {
        Ok(match name {
            "none" => Act::None,
            "relu" => Act::Relu,
            "gelu" => Act::Gelu,
            "gelu_tanh" => Act::GeluTanh,
            "silu" => Act::Silu,
            other => {
                return Err(invalid(format!(
                    "foo: linear_act: unknown activation {other:?}; expected one of {:?}",
                    Act::NAMES
                )))
            }
        })
    }

    /// The elementwise op that applies it (the same kernel as `F.gelu` & co.).
    fn op(self) -> Option<UnaryOp> {
        match self {
            Act::None => None,
            Act::Relu => Some(UnaryOp::Relu),
            Act::Gelu => Some(UnaryOp::Gelu { tanh: false }),
            Act::GeluTanh => Some(UnaryOp::Gelu { tanh: true }),
            Act::Silu => Some(UnaryOp::Silu),
        }
    }
}

/// Output elements per tile on one thread: the tile (and its rows of `x`)
/// stays in L2 between the product and the epilogue, while each gemm call
/// has rows enough (at least [`MIN_TILE_ROWS`]) to amortize packing `w`.
const TILE_ELEMS: usize = 1 << 18;
const MIN_TILE_ROWS: usize = 256;

/// Rows per tile. A product large enough for threads gets two tiles per
/// thread (each thread packs `w` twice rather than once per small tile, and
/// a thread the OS delays leaves its second tile to the others); a smaller
/// one runs on the calling thread in L2-sized tiles.
fn tile_rows(m: usize, n: usize, k: usize) -> usize {
    let threads = parallel::num_threads();
    let rows = if threads > 1 && m * n * k >= par_gemm() {
        m.div_ceil(2 * threads).max(64)
    } else {
        (TILE_ELEMS / n.max(1)).max(MIN_TILE_ROWS)
    };
    rows.clamp(1, m.max(1))
}

/// `out = act(x @ w^T + b)` for `x` `[M, K]`, `w` `[N, K]` (any strides),
/// `b` `[N]` (any stride) or none, `out` contiguous `[M, N]`, all of one
/// floating dtype. The product and bias are rounded to the dtype before the
/// activation, as `F.linear` then the activation round them; float16 and
/// bfloat16 multiply in float32 (`w` widened once).
pub fn linear_act(
    out: &Strided,
    x: &Strided,
    w: &Strided,
    b: Option<&Strided>,
    act: Act,
) -> Result<(), KernelError> {
    const OP: &str = "linear_act";
    floating(OP, x)?;
    if x.ndim() != 2 || w.ndim() != 2 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: linear_act expects a 2-d input and a 2-d weight, got {}-d and {}-d",
            x.ndim(),
            w.ndim()
        )));
    }
    let (m, k, n) = (x.sizes[0], x.sizes[1], w.sizes[0]);
    if w.sizes[1] != k {
        return Err(KernelError::ShapeMismatch(format!(
            "mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {}x{n})",
            w.sizes[1]
        )));
    }
    for (what, t) in [("weight", Some(w)), ("bias", b)] {
        if let Some(t) = t {
            if t.dtype != x.dtype {
                return Err(invalid(format!(
                    "foo: linear_act: {what} is {} but input is {}",
                    t.dtype.name(),
                    x.dtype.name()
                )));
            }
        }
    }
    if let Some(b) = b {
        if b.ndim() != 1 || b.sizes[0] != n {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: linear_act: bias must have shape [{n}], got {:?}",
                b.sizes.as_slice()
            )));
        }
    }
    dense(OP, "output", out, m * n, x.dtype)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let rows = tile_rows(m, n, k);
    let tiles = m.div_ceil(rows);
    let work = m * n * k;
    let run = |f: &Task<'_>| -> Result<(), KernelError> {
        if tiles > 1 && work >= par_gemm() {
            parallel::try_parallel_for(tiles, f)
        } else {
            (0..tiles).try_for_each(f)
        }
    };
    let esize = x.dtype.size() as isize;
    let tile_view = |t: usize| -> (usize, Strided, Strided) {
        let r0 = t * rows;
        let mt = rows.min(m - r0);
        let o = Strided::new(
            // SAFETY (pointer arithmetic): row r0 of the contiguous output.
            unsafe { out.ptr.offset(r0 as isize * n as isize * esize) },
            out.dtype,
            &[mt, n][..],
            &[n as isize, 1][..],
        );
        let xt = Strided::new(
            unsafe { x.ptr.offset(r0 as isize * x.strides[0] * esize) },
            x.dtype,
            &[mt, k][..],
            &[x.strides[0], x.strides[1]][..],
        );
        (mt, o, xt)
    };
    let epilogue = |o: &Strided| -> Result<(), KernelError> {
        match act.op() {
            Some(op) => unary(&op, o, Operand::Tensor(o), o.dtype),
            None => Ok(()),
        }
    };
    match x.dtype {
        DType::F32 => run(&|t| {
            let (mt, o, xt) = tile_view(t);
            // SAFETY: views checked above; each tile's rows are written by one task.
            unsafe { fill_and_gemm::<f32>(&o, &xt, w, b, mt, n, k) };
            epilogue(&o)
        }),
        DType::F64 => run(&|t| {
            let (mt, o, xt) = tile_view(t);
            // SAFETY: as above.
            unsafe { fill_and_gemm::<f64>(&o, &xt, w, b, mt, n, k) };
            epilogue(&o)
        }),
        DType::F16 => half_linear::<f16>(w, b, n, k, &run, &tile_view, &epilogue),
        DType::BF16 => half_linear::<bf16>(w, b, n, k, &run, &tile_view, &epilogue),
        d => Err(KernelError::UnsupportedDtype { op: OP, dtype: d }),
    }
}

/// One tile of `out = x @ w^T + b` in `T` (f32 / f64): the tile's rows are
/// set to the bias (or left to the product), then the gemm crate adds into them.
unsafe fn fill_and_gemm<T: Scalar + Copy + 'static>(
    o: &Strided,
    xt: &Strided,
    w: &Strided,
    b: Option<&Strided>,
    mt: usize,
    n: usize,
    k: usize,
) {
    let op = o.ptr as *mut T;
    if let Some(b) = b {
        let (bp, bs) = (b.ptr as *const T, b.strides[0]);
        for r in 0..mt {
            let row = std::slice::from_raw_parts_mut(op.add(r * n), n);
            for (c, v) in row.iter_mut().enumerate() {
                *v = *bp.offset(c as isize * bs);
            }
        }
    }
    if k == 0 {
        if b.is_none() {
            std::slice::from_raw_parts_mut(op, mt * n).fill(T::from_f64(0.0));
        }
        return;
    }
    gemm_one::<T>(
        mt,
        n,
        k,
        op,
        n as isize,
        1,
        b.is_some(),
        xt.ptr as *const T,
        xt.strides[0],
        xt.strides[1],
        w.ptr as *const T,
        w.strides[1],
        w.strides[0],
        T::from_f64(1.0),
        T::from_f64(1.0),
        false,
    );
}

/// float16 / bfloat16: `w^T` widened to a row-major f32 `[K, N]` once, each
/// tile's rows of `x` widened, multiplied in f32 with the bias added in f32,
/// rounded once to `T`, then the activation (computing in f32 as ATen does).
#[allow(clippy::too_many_arguments)]
fn half_linear<T: Scalar + ToF32>(
    w: &Strided,
    b: Option<&Strided>,
    n: usize,
    k: usize,
    run: &Runner<'_>,
    tile_view: &(dyn Fn(usize) -> (usize, Strided, Strided) + Sync),
    epilogue: &(dyn Fn(&Strided) -> Result<(), KernelError> + Sync),
) -> Result<(), KernelError> {
    let mut wt = vec![0f32; k * n];
    let wp = w.ptr as *const T;
    for (c, col) in (0..n).map(|c| (c, c as isize * w.strides[0])) {
        for p in 0..k {
            // SAFETY: element (c, p) of the [N, K] weight view.
            wt[p * n + c] = unsafe { *wp.offset(col + p as isize * w.strides[1]) }.to_f32_();
        }
    }
    let bias: Option<Vec<f32>> = b.map(|b| {
        let bp = b.ptr as *const T;
        // SAFETY: element c of the [N] bias view.
        (0..n)
            .map(|c| unsafe { *bp.offset(c as isize * b.strides[0]) }.to_f32_())
            .collect()
    });
    let wt = &wt;
    let bias = &bias;
    run(&|t| {
        let (mt, o, xt) = tile_view(t);
        let mut xb = vec![0f32; mt * k];
        let mut ob = vec![0f32; mt * n];
        let xp = xt.ptr as *const T;
        for r in 0..mt {
            for p in 0..k {
                // SAFETY: element (r, p) of the tile's rows of x.
                xb[r * k + p] =
                    unsafe { *xp.offset(r as isize * xt.strides[0] + p as isize * xt.strides[1]) }
                        .to_f32_();
            }
        }
        if let Some(bias) = bias {
            for row in ob.chunks_exact_mut(n) {
                row.copy_from_slice(bias);
            }
        }
        if k > 0 {
            // SAFETY: private row-major buffers of the sizes given.
            unsafe {
                gemm_one::<f32>(
                    mt,
                    n,
                    k,
                    ob.as_mut_ptr(),
                    n as isize,
                    1,
                    bias.is_some(),
                    xb.as_ptr(),
                    k as isize,
                    1,
                    wt.as_ptr(),
                    n as isize,
                    1,
                    1.0,
                    1.0,
                    false,
                )
            };
        }
        // SAFETY: the tile is contiguous [mt, n] of T.
        let os = unsafe { std::slice::from_raw_parts_mut(o.ptr as *mut T, mt * n) };
        for (d, &v) in os.iter_mut().zip(&ob) {
            *d = T::from_f32_(v);
        }
        epilogue(&o)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, sizes)
    }

    #[test]
    fn rms_norm_rows_and_weight() {
        let mut x = vec![3.0f32, 4.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let mut w = vec![1.0f32, 2.0, 1.0, 1.0];
        let mut out = vec![0f32; 8];
        let mut r = vec![0f32; 2];
        rms_norm(
            &view(&mut out, DType::F32, &[2, 4]),
            Some(&view(&mut r, DType::F32, &[2])),
            &view(&mut x, DType::F32, &[2, 4]),
            Some(&view(&mut w, DType::F32, &[4])),
            2,
            4,
            0.0,
        )
        .unwrap();
        // Row 0: mean square 25/4, rstd 0.4.
        assert!((r[0] - 0.4).abs() < 1e-6 && (r[1] - 1.0).abs() < 1e-6);
        let want = [1.2f32, 3.2, 0.0, 0.0, 1.0, 2.0, 1.0, 1.0];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn rms_norm_backward_matches_finite_differences() {
        let (m, n, eps) = (3usize, 5usize, 1e-6);
        let x: Vec<f64> = (0..m * n)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0)
            .collect();
        let w: Vec<f64> = (0..n).map(|j| 0.5 + j as f64 / 4.0).collect();
        let dy: Vec<f64> = (0..m * n)
            .map(|i| ((i * 5 % 7) as f64 - 3.0) / 2.0)
            .collect();
        let loss = |x: &[f64], w: &[f64]| -> f64 {
            let (mut xv, mut wv) = (x.to_vec(), w.to_vec());
            let mut out = vec![0f64; m * n];
            rms_norm(
                &view(&mut out, DType::F64, &[m, n]),
                None,
                &view(&mut xv, DType::F64, &[m, n]),
                Some(&view(&mut wv, DType::F64, &[n])),
                m,
                n,
                eps,
            )
            .unwrap();
            out.iter().zip(&dy).map(|(a, b)| a * b).sum()
        };
        let (mut gi, mut gw) = (vec![0f64; m * n], vec![0f64; n]);
        let (mut xv, mut wv, mut dv) = (x.clone(), w.clone(), dy.clone());
        rms_norm_backward(
            Some(&view(&mut gi, DType::F64, &[m, n])),
            Some(&view(&mut gw, DType::F64, &[n])),
            &view(&mut dv, DType::F64, &[m, n]),
            &view(&mut xv, DType::F64, &[m, n]),
            Some(&view(&mut wv, DType::F64, &[n])),
            m,
            n,
            eps,
        )
        .unwrap();
        let h = 1e-6;
        for i in 0..m * n {
            let (mut a, mut b) = (x.clone(), x.clone());
            a[i] += h;
            b[i] -= h;
            let fd = (loss(&a, &w) - loss(&b, &w)) / (2.0 * h);
            assert!((fd - gi[i]).abs() < 1e-6, "dx[{i}]: {fd} vs {}", gi[i]);
        }
        for j in 0..n {
            let (mut a, mut b) = (w.clone(), w.clone());
            a[j] += h;
            b[j] -= h;
            let fd = (loss(&x, &a) - loss(&x, &b)) / (2.0 * h);
            assert!((fd - gw[j]).abs() < 1e-6, "dw[{j}]: {fd} vs {}", gw[j]);
        }
    }

    #[test]
    fn linear_act_relu_with_bias_over_many_tiles() {
        // Enough rows for several tiles (256 rows each at this width); x
        // transposed in memory (strided).
        let (m, k, n) = (600usize, 3usize, 1100usize);
        assert!(m.div_ceil(tile_rows(m, n, k)) > 1);
        let mut xt: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 - 6.0).collect(); // [k, m]
        let mut w: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 / 2.0 - 1.5).collect(); // [n, k]
        let mut b: Vec<f32> = (0..n).map(|c| (c % 5) as f32 / 4.0 - 0.5).collect();
        let mut out = vec![0f32; m * n];
        let x = Strided::new(
            xt.as_mut_ptr() as *mut u8,
            DType::F32,
            &[m, k][..],
            &[1, m as isize][..],
        );
        linear_act(
            &view(&mut out, DType::F32, &[m, n]),
            &x,
            &view(&mut w, DType::F32, &[n, k]),
            Some(&view(&mut b, DType::F32, &[n])),
            Act::Relu,
        )
        .unwrap();
        for i in 0..m {
            for c in 0..n {
                let mut s = b[c];
                for p in 0..k {
                    s += xt[p * m + i] * w[c * k + p];
                }
                assert_eq!(out[i * n + c], s.max(0.0), "({i}, {c})");
            }
        }
    }

    #[test]
    fn linear_act_rejects_unknown_activation_and_shapes() {
        assert!(Act::parse("tanh").is_err());
        let mut x = vec![0f32; 6];
        let mut w = vec![0f32; 6];
        let mut out = vec![0f32; 4];
        let e = linear_act(
            &view(&mut out, DType::F32, &[2, 2]),
            &view(&mut x, DType::F32, &[2, 3]),
            &view(&mut w, DType::F32, &[3, 2]),
            None,
            Act::None,
        );
        assert!(matches!(e, Err(KernelError::ShapeMismatch(_))));
    }
}
