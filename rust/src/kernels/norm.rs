//! Normalization kernels: layer norm, group norm and batch norm, forward and
//! backward.
//!
//! Layer norm computes in ATen's opmath type (float32 for float16, bfloat16
//! and float32; float64 for float64), as torch CPU's kernel does; group norm
//! and batch norm accumulate every statistic in float64. Every sum runs in a
//! fixed order, so results do not depend on the thread count: work is split
//! over rows (layer norm) or channels (batch norm), never inside one sum.
//!
//! Layer norm sees contiguous `[m, n]` data (rows of `n` normalized
//! elements); group norm contiguous `[batch, channels, spatial]` data whose
//! channels fall into groups of equal size. Batch norm sees strided `[batch, channels, spatial]` views, so
//! NCHW and channels-last inputs need no copy.

use super::copy::Scalar;
use super::elementwise::simd;
use super::reduce::{par_min, AccF, FloatElem};
use super::{KernelError, Strided};
use crate::dtype::DType;
use half::{bf16, f16};

/// A pointer that may cross threads (each thread touches its own elements).
#[derive(Clone, Copy)]
struct P(usize);

/// Element `off` (in elements) of a view, as f64 (integers exact below 2^53).
#[inline(always)]
pub(crate) fn ld(s: &Strided, off: isize) -> f64 {
    // SAFETY: callers pass offsets inside the view.
    unsafe {
        match s.dtype {
            DType::F32 => *(s.ptr as *const f32).offset(off) as f64,
            DType::F64 => *(s.ptr as *const f64).offset(off),
            DType::F16 => (*(s.ptr as *const f16).offset(off)).to_f64(),
            DType::BF16 => (*(s.ptr as *const bf16).offset(off)).to_f64(),
            DType::I64 => *(s.ptr as *const i64).offset(off) as f64,
            DType::I32 => *(s.ptr as *const i32).offset(off) as f64,
            DType::I16 => *(s.ptr as *const i16).offset(off) as f64,
            DType::I8 => *(s.ptr as *const i8).offset(off) as f64,
            DType::U8 => *(s.ptr as *const u8).offset(off) as f64,
            DType::Bool => *(s.ptr as *const u8).offset(off) as f64,
            DType::C64 | DType::C128 => {
                panic!("foo: a real-only kernel was given a complex tensor")
            }
        }
    }
}

/// Stores `v` (rounded to the view's dtype) at element `off`.
#[inline(always)]
pub(crate) fn st(s: &Strided, off: isize, v: f64) {
    // SAFETY: callers pass offsets inside the view.
    unsafe {
        match s.dtype {
            DType::F32 => *(s.ptr as *mut f32).offset(off) = v as f32,
            DType::F64 => *(s.ptr as *mut f64).offset(off) = v,
            DType::F16 => *(s.ptr as *mut f16).offset(off) = f16::from_f64(v),
            DType::BF16 => *(s.ptr as *mut bf16).offset(off) = bf16::from_f64(v),
            DType::I64 => *(s.ptr as *mut i64).offset(off) = v as i64,
            DType::I32 => *(s.ptr as *mut i32).offset(off) = v as i32,
            DType::I16 => *(s.ptr as *mut i16).offset(off) = v as i16,
            DType::I8 => *(s.ptr as *mut i8).offset(off) = v as i8,
            DType::U8 => *s.ptr.offset(off) = v as u8,
            DType::Bool => *s.ptr.offset(off) = (v != 0.0) as u8,
            DType::C64 | DType::C128 => {
                panic!("foo: a real-only kernel was given a complex tensor")
            }
        }
    }
}

fn floating(op: &'static str, s: &Strided) -> Result<(), KernelError> {
    if s.dtype.is_floating() {
        Ok(())
    } else {
        Err(KernelError::UnsupportedDtype { op, dtype: s.dtype })
    }
}

/// A 1-d floating parameter of `n` elements, read into f64.
pub(crate) fn read_vec(
    op: &'static str,
    what: &str,
    s: Option<&Strided>,
    n: usize,
) -> Result<Option<Vec<f64>>, KernelError> {
    let Some(s) = s else { return Ok(None) };
    floating(op, s)?;
    if s.numel() != n || s.ndim() > 1 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: expected {what} to have {n} elements, but got shape {:?}",
            s.sizes
        )));
    }
    let stride = s.strides.first().copied().unwrap_or(0);
    Ok(Some((0..n).map(|i| ld(s, i as isize * stride)).collect()))
}

/// Writes `v` into a 1-d floating view of `v.len()` elements.
pub(crate) fn write_vec(
    op: &'static str,
    what: &str,
    s: Option<&Strided>,
    v: &[f64],
) -> Result<(), KernelError> {
    let Some(s) = s else { return Ok(()) };
    floating(op, s)?;
    if s.numel() != v.len() || s.ndim() > 1 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: expected {what} to have {} elements, but got shape {:?}",
            v.len(),
            s.sizes
        )));
    }
    let stride = s.strides.first().copied().unwrap_or(0);
    for (i, &x) in v.iter().enumerate() {
        st(s, i as isize * stride, x);
    }
    Ok(())
}

/// Runs `f(i)` for `i in 0..n`, in parallel when `work` elements are many,
/// each call compiled for the SIMD level in use ([`simd::dispatch`]). The
/// callers' closures are `#[inline(always)]`, so their loops (and the
/// `#[inline(always)]` helpers they call) are inlined into the AVX-512 and
/// AVX2 copies and vectorize at those widths, not at the crate's baseline
/// SSE2. No level changes results: nothing here asks for fused multiply-adds.
fn each<R: Send>(n: usize, work: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    let g = |i: usize| {
        let mut r = None;
        simd::dispatch(
            #[inline(always)]
            || r = Some(f(i)),
        );
        r.expect("dispatch runs its body")
    };
    if work > par_min() && n > 1 {
        super::parallel::collect(n, g)
    } else {
        (0..n).map(g).collect()
    }
}

/// Calls `$f::<T>(args)` with `T` the element type of `$dtype`, one of the
/// floating dtypes (the set torch's CPU normalization, pooling, dropout and
/// optimizer kernels take); any other dtype returns `UnsupportedDtype` from
/// the calling function.
macro_rules! dispatch_float {
    ($op:expr, $dtype:expr, $f:ident, $($arg:expr),*) => {
        $crate::dispatch_dtype!($dtype, [F32, F64, F16, BF16], T => $f::<T>($($arg),*),
            d => return Err($crate::kernels::KernelError::UnsupportedDtype { op: $op, dtype: d }))
    };
}
pub(crate) use dispatch_float;

fn check_dense(
    op: &str,
    what: &str,
    s: &Strided,
    numel: usize,
    dtype: DType,
) -> Result<(), KernelError> {
    if s.numel() != numel || !(s.numel() == 0 || s.is_contiguous()) || s.dtype != dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must be a contiguous {} tensor of {numel} elements",
            dtype.name()
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// layer norm
// ---------------------------------------------------------------------------

/// Layer norm of `x` (contiguous, `m` rows of `n`): `out = (x - mean) * rstd
/// * weight + bias`, with the row statistics written to `mean` and `rstd`
/// (1-d, `m` elements; `rstd = 1 / sqrt(var + eps)`, biased variance).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    out: &Strided,
    mean: &Strided,
    rstd: &Strided,
    x: &Strided,
    weight: Option<&Strided>,
    bias: Option<&Strided>,
    m: usize,
    n: usize,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "native_layer_norm";
    floating(OP, x)?;
    check_dense(OP, "input", x, m * n, x.dtype)?;
    check_dense(OP, "output", out, m * n, x.dtype)?;
    let w = read_vec(OP, "weight", weight, n)?;
    let b = read_vec(OP, "bias", bias, n)?;
    let (xp, op) = (P(x.ptr as usize), P(out.ptr as usize));
    fn rows<T: FloatElem + Widen<T::Acc>>(
        xp: P,
        op: P,
        m: usize,
        n: usize,
        eps: f64,
        w: &Option<Vec<f64>>,
        b: &Option<Vec<f64>>,
    ) -> Vec<(f64, f64)> {
        let acc = |v: &Option<Vec<f64>>| {
            v.as_ref()
                .map(|v| v.iter().map(|&e| T::Acc::from_f64(e)).collect::<Vec<_>>())
        };
        let (w, b) = (acc(w), acc(b));
        let (nf, eps) = (T::Acc::from_f64(n as f64), T::Acc::from_f64(eps));
        each(
            m,
            m * n,
            #[inline(always)]
            |i| {
                // SAFETY: row i of contiguous [m, n] views.
                let xs = unsafe { std::slice::from_raw_parts((xp.0 as *const T).add(i * n), n) };
                let os = unsafe { std::slice::from_raw_parts_mut((op.0 as *mut T).add(i * n), n) };
                // An empty row has mean 0 and rstd NaN (as on CPU).
                if n == 0 {
                    return (0.0, f64::NAN);
                }
                let mu = lane_sum(xs, |v| v) / nf;
                let var = lane_sum(xs, |v| (v - mu) * (v - mu)) / nf;
                // A row holding inf: CPU's Welford moments give mean NaN
                // (inf - inf), where the plain sum gives inf.
                let mu = if var.is_nan() { var } else { mu };
                // std::max(var, 0) as ATen: a NaN variance stays NaN.
                let var = if var < T::Acc::ZERO {
                    T::Acc::ZERO
                } else {
                    var
                };
                let r = T::Acc::ONE / (var + eps).sqrt();
                let y = |x: &T| (x.widen() - mu) * r;
                // One loop per affine form, so each vectorizes without branches.
                match (&w, &b) {
                    (Some(w), Some(b)) => {
                        for (((o, x), &w), &b) in os.iter_mut().zip(xs).zip(w).zip(b) {
                            *o = T::narrow(y(x) * w + b);
                        }
                    }
                    (Some(w), None) => {
                        for ((o, x), &w) in os.iter_mut().zip(xs).zip(w) {
                            *o = T::narrow(y(x) * w);
                        }
                    }
                    (None, Some(b)) => {
                        for ((o, x), &b) in os.iter_mut().zip(xs).zip(b) {
                            *o = T::narrow(y(x) + b);
                        }
                    }
                    (None, None) => {
                        for (o, x) in os.iter_mut().zip(xs) {
                            *o = T::narrow(y(x));
                        }
                    }
                }
                (mu.to_f64(), r.to_f64())
            },
        )
    }
    let stats = dispatch_float!(OP, x.dtype, rows, xp, op, m, n, eps, &w, &b);
    let (mu, r): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
    write_vec(OP, "mean", Some(mean), &mu)?;
    write_vec(OP, "rstd", Some(rstd), &r)?;
    Ok(())
}

/// Gradients of [`layer_norm`]: `grad_input` (contiguous `[m, n]`),
/// `grad_weight`, `grad_bias` (1-d, `n`) -- each only when given.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    grad_input: Option<&Strided>,
    grad_weight: Option<&Strided>,
    grad_bias: Option<&Strided>,
    dy: &Strided,
    x: &Strided,
    mean: &Strided,
    rstd: &Strided,
    weight: Option<&Strided>,
    m: usize,
    n: usize,
) -> Result<(), KernelError> {
    const OP: &str = "native_layer_norm_backward";
    floating(OP, x)?;
    check_dense(OP, "input", x, m * n, x.dtype)?;
    check_dense(OP, "grad_output", dy, m * n, x.dtype)?;
    if let Some(gi) = grad_input {
        check_dense(OP, "grad_input", gi, m * n, x.dtype)?;
    }
    let mu = read_vec(OP, "mean", Some(mean), m)?.unwrap_or_default();
    let rs = read_vec(OP, "rstd", Some(rstd), m)?.unwrap_or_default();
    let w = read_vec(OP, "weight", weight, n)?;
    let (xp, dyp) = (P(x.ptr as usize), P(dy.ptr as usize));
    fn grads<T: FloatElem + Widen<T::Acc>>(
        gi: Option<P>,
        xp: P,
        dyp: P,
        m: usize,
        n: usize,
        mu: &[f64],
        rs: &[f64],
        w: &Option<Vec<f64>>,
        need_wb: bool,
    ) -> (Vec<f64>, Vec<f64>)
    where
        T::Acc: Widen<T::Acc>,
    {
        type A<T> = <T as FloatElem>::Acc;
        let row = |i: usize| unsafe {
            // SAFETY: row i of contiguous [m, n] views.
            (
                std::slice::from_raw_parts((xp.0 as *const T).add(i * n), n),
                std::slice::from_raw_parts((dyp.0 as *const T).add(i * n), n),
            )
        };
        let wv: Vec<A<T>> = match w {
            Some(w) => w.iter().map(|&v| A::<T>::from_f64(v)).collect(),
            None if gi.is_some() => vec![A::<T>::ONE; n],
            None => Vec::new(),
        };
        let scale = A::<T>::ONE / A::<T>::from_f64(n as f64);
        // One pass over blocks of rows: each row's grad_input (two sweeps
        // of the row, which stays in L1 between them) and, while the row is
        // still there, the block's partial column sums for grad_weight and
        // grad_bias (in the opmath type, as ATen's per-thread buffers). The
        // partials are added in block order, in f64, and the block size
        // depends only on `m`, so the result does not depend on the thread
        // count.
        let rows_per = m.div_ceil(32).clamp(1, 64);
        let blocks = each(
            m.div_ceil(rows_per),
            m * n,
            #[inline(always)]
            |bk| {
                let (mut gw, mut gb) = if need_wb {
                    (vec![A::<T>::ZERO; n], vec![A::<T>::ZERO; n])
                } else {
                    (Vec::new(), Vec::new())
                };
                for i in bk * rows_per..((bk + 1) * rows_per).min(m) {
                    let (xs, ds) = row(i);
                    let (mi, ri) = (A::<T>::from_f64(mu[i]), A::<T>::from_f64(rs[i]));
                    // dgamma += dy * (rstd * x - rstd * mean), dbeta += dy.
                    let shift = A::<T>::ZERO - ri * mi;
                    if let Some(gp) = gi {
                        // SAFETY: row i of the contiguous [m, n] grad_input.
                        let gs = unsafe {
                            std::slice::from_raw_parts_mut((gp.0 as *mut T).add(i * n), n)
                        };
                        // ATen's arithmetic, in its order: with g = dy * w,
                        // sg = sum(g), sgx = sum(g * x), and
                        // dx = rstd * g + bx * x + c (affine in x per row).
                        let sg = lane_sum2(ds, &wv[..], |d, w| d * w);
                        let sgx = lane_sum3(ds, xs, &wv[..], |d, x, w| d * x * w);
                        let bx = (sg * mi - sgx) * ri * ri * ri * scale;
                        let c = A::<T>::ZERO - bx * mi - sg * ri * scale;
                        let rows = gs.iter_mut().zip(ds).zip(xs).zip(&wv);
                        if need_wb {
                            // The parameter sums in the same sweep as dx.
                            let sums = gw.iter_mut().zip(gb.iter_mut());
                            for ((((o, d), x), &w), (gwj, gbj)) in rows.zip(sums) {
                                let (d, x) = (d.widen(), x.widen());
                                *o = T::narrow(ri * d * w + bx * x + c);
                                *gwj = *gwj + d * (ri * x + shift);
                                *gbj = *gbj + d;
                            }
                        } else {
                            for (((o, d), x), &w) in rows {
                                *o = T::narrow(ri * d.widen() * w + bx * x.widen() + c);
                            }
                        }
                    } else if need_wb {
                        for (((w, b), x), d) in gw.iter_mut().zip(gb.iter_mut()).zip(xs).zip(ds) {
                            let d = d.widen();
                            *w = *w + d * (ri * x.widen() + shift);
                            *b = *b + d;
                        }
                    }
                }
                (gw, gb)
            },
        );
        if !need_wb {
            return (Vec::new(), Vec::new());
        }
        let (mut gw, mut gb) = (vec![0.0f64; n], vec![0.0f64; n]);
        for (a, b) in blocks {
            gw.iter_mut().zip(a).for_each(|(s, v)| *s += v.to_f64());
            gb.iter_mut().zip(b).for_each(|(s, v)| *s += v.to_f64());
        }
        (gw, gb)
    }
    let gi = grad_input.map(|g| P(g.ptr as usize));
    let need_wb = grad_weight.is_some() || grad_bias.is_some();
    let (gw, gb) = dispatch_float!(OP, x.dtype, grads, gi, xp, dyp, m, n, &mu, &rs, &w, need_wb);
    if need_wb {
        write_vec(OP, "grad_weight", grad_weight, &gw)?;
        write_vec(OP, "grad_bias", grad_bias, &gb)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// group norm
// ---------------------------------------------------------------------------

/// Lanes of the sums below: independent accumulators the compiler keeps in
/// vector registers (a single running sum is a serial dependency chain);
/// 16 fill one AVX-512 register of f32, two of f64.
///
/// Each helper keeps exactly one lane array: LLVM vectorizes one lane-wise
/// reduction per loop at the full width, but a loop that feeds two lane
/// arrays comes out as scalar and 2-wide code (checked in the disassembly;
/// it made layer norm's backward 2.8x CPU's time). Two sums over a row are
/// two passes over it, the second from L1.
const LANES: usize = 16;

/// An element read into accumulator type `A`: f64 from every element type
/// (group and batch norm), or ATen's opmath type for layer norm.
pub(crate) trait Widen<A>: Copy {
    fn widen_to(self) -> A;
}

impl<T: Scalar> Widen<f64> for T {
    #[inline(always)]
    fn widen_to(self) -> f64 {
        self.to_f64()
    }
}

impl<T: FloatElem<Acc = f32>> Widen<f32> for T {
    #[inline(always)]
    fn widen_to(self) -> f32 {
        self.widen()
    }
}

/// `sum(f(x))` over a slice in `A`, lane-wise then across lanes (a fixed
/// order: the same bits whatever the thread count).
#[inline(always)]
fn lane_sum<A: AccF, T: Widen<A>>(xs: &[T], f: impl Fn(A) -> A) -> A {
    let mut acc = [A::ZERO; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = acc[l] + f(c[l].widen_to());
        }
    }
    let mut s = acc.iter().fold(A::ZERO, |s, &v| s + v);
    for &v in tail {
        s = s + f(v.widen_to());
    }
    s
}

/// `sum(f(a, b))` over two slices of equal length, as [`lane_sum`].
#[inline(always)]
fn lane_sum2<A: AccF, X: Widen<A>, Y: Widen<A>>(a: &[X], b: &[Y], f: impl Fn(A, A) -> A) -> A {
    let mut acc = [A::ZERO; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] = acc[l] + f(x[l].widen_to(), y[l].widen_to());
        }
    }
    let mut s = acc.iter().fold(A::ZERO, |s, &v| s + v);
    for (x, y) in ta.iter().zip(tb) {
        s = s + f(x.widen_to(), y.widen_to());
    }
    s
}

/// `sum(f(a, b, c))` over three slices of equal length, as [`lane_sum`].
#[inline(always)]
fn lane_sum3<A: AccF, X: Widen<A>, Y: Widen<A>, Z: Widen<A>>(
    a: &[X],
    b: &[Y],
    c: &[Z],
    f: impl Fn(A, A, A) -> A,
) -> A {
    let mut acc = [A::ZERO; LANES];
    let (ca, cb, cc) = (
        a.chunks_exact(LANES),
        b.chunks_exact(LANES),
        c.chunks_exact(LANES),
    );
    let (ta, tb, tc) = (ca.remainder(), cb.remainder(), cc.remainder());
    for ((x, y), z) in ca.zip(cb).zip(cc) {
        for l in 0..LANES {
            acc[l] = acc[l] + f(x[l].widen_to(), y[l].widen_to(), z[l].widen_to());
        }
    }
    let mut s = acc.iter().fold(A::ZERO, |s, &v| s + v);
    for ((x, y), z) in ta.iter().zip(tb).zip(tc) {
        s = s + f(x.widen_to(), y.widen_to(), z.widen_to());
    }
    s
}

fn gn_check(
    op: &str,
    x: &Strided,
    n: usize,
    c: usize,
    hxw: usize,
    g: usize,
) -> Result<(), KernelError> {
    if g == 0 || !c.is_multiple_of(g) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {c} channels do not divide into {g} groups"
        )));
    }
    check_dense(op, "input", x, n * c * hxw, x.dtype)
}

/// Group norm of `x` (contiguous `[n, c, hxw]`, channels in `g` groups of
/// `c / g`): `out = (x - mean) * rstd * weight + bias` with per-(sample,
/// group) statistics written to `mean` and `rstd` (contiguous `[n, g]`;
/// biased variance, `rstd = 1 / sqrt(var + eps)`) and per-channel `weight`,
/// `bias` (1-d, `c`; optional).
#[allow(clippy::too_many_arguments)]
pub fn group_norm(
    out: &Strided,
    mean: &Strided,
    rstd: &Strided,
    x: &Strided,
    weight: Option<&Strided>,
    bias: Option<&Strided>,
    n: usize,
    c: usize,
    hxw: usize,
    g: usize,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "native_group_norm";
    floating(OP, x)?;
    gn_check(OP, x, n, c, hxw, g)?;
    check_dense(OP, "output", out, n * c * hxw, x.dtype)?;
    let w = read_vec(OP, "weight", weight, c)?;
    let b = read_vec(OP, "bias", bias, c)?;
    let (xp, op) = (P(x.ptr as usize), P(out.ptr as usize));
    // Statistics and the affine map in ATen's opmath type (float32 for
    // every float but float64), as its CPU kernel: float64 lanes held half
    // the elements per register and converted each one twice (1.2x CPU's
    // time at two threads).
    #[allow(clippy::too_many_arguments)]
    fn rows<T: FloatElem + Widen<T::Acc>>(
        xp: P,
        op: P,
        n: usize,
        c: usize,
        hxw: usize,
        g: usize,
        eps: f64,
        w: &Option<Vec<f64>>,
        b: &Option<Vec<f64>>,
    ) -> Vec<(f64, f64)> {
        let d = c / g;
        let len = d * hxw;
        let (nf, eps) = (T::Acc::from_f64(len as f64), T::Acc::from_f64(eps));
        each(
            n * g,
            n * c * hxw,
            #[inline(always)]
            |i| {
                // SAFETY: row i (sample i / g, group i % g) of contiguous [n*g, d*hxw] views.
                let xs =
                    unsafe { std::slice::from_raw_parts((xp.0 as *const T).add(i * len), len) };
                let os =
                    unsafe { std::slice::from_raw_parts_mut((op.0 as *mut T).add(i * len), len) };
                if len == 0 {
                    return (0.0, f64::NAN);
                }
                let mu: T::Acc = lane_sum(xs, |v| v) / nf;
                let var = lane_sum(xs, |v| (v - mu) * (v - mu)) / nf;
                let r = T::Acc::ONE / (var + eps).sqrt();
                let param = |p: &Option<Vec<f64>>, ch: usize, none: f64| {
                    T::Acc::from_f64(p.as_ref().map_or(none, |p| p[ch]))
                };
                for k in 0..d {
                    let ch = (i % g) * d + k;
                    // y = x * scale + shift, the channel's affine folded in.
                    let scale = r * param(w, ch, 1.0);
                    let shift = param(b, ch, 0.0) - mu * scale;
                    let (xc, oc) = (&xs[k * hxw..(k + 1) * hxw], &mut os[k * hxw..(k + 1) * hxw]);
                    for (o, &v) in oc.iter_mut().zip(xc) {
                        *o = T::narrow(v.widen() * scale + shift);
                    }
                }
                (mu.to_f64(), r.to_f64())
            },
        )
    }
    let stats = dispatch_float!(OP, x.dtype, rows, xp, op, n, c, hxw, g, eps, &w, &b);
    let (mu, r): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
    check_dense(OP, "mean", mean, n * g, mean.dtype)?;
    check_dense(OP, "rstd", rstd, n * g, rstd.dtype)?;
    for (i, (&m, &v)) in mu.iter().zip(&r).enumerate() {
        st(mean, i as isize, m);
        st(rstd, i as isize, v);
    }
    Ok(())
}

/// Gradients of [`group_norm`]: `grad_input` (contiguous like `x`),
/// `grad_weight`, `grad_bias` (1-d, `c`) -- each only when given -- from
/// the forward's `mean` and `rstd` (`[n, g]`).
#[allow(clippy::too_many_arguments)]
pub fn group_norm_backward(
    grad_input: Option<&Strided>,
    grad_weight: Option<&Strided>,
    grad_bias: Option<&Strided>,
    dy: &Strided,
    x: &Strided,
    mean: &Strided,
    rstd: &Strided,
    weight: Option<&Strided>,
    n: usize,
    c: usize,
    hxw: usize,
    g: usize,
) -> Result<(), KernelError> {
    const OP: &str = "native_group_norm_backward";
    floating(OP, x)?;
    gn_check(OP, x, n, c, hxw, g)?;
    check_dense(OP, "grad_output", dy, n * c * hxw, x.dtype)?;
    if let Some(gi) = grad_input {
        check_dense(OP, "grad_input", gi, n * c * hxw, x.dtype)?;
    }
    check_dense(OP, "mean", mean, n * g, mean.dtype)?;
    check_dense(OP, "rstd", rstd, n * g, rstd.dtype)?;
    let mu: Vec<f64> = (0..n * g).map(|i| ld(mean, i as isize)).collect();
    let rs: Vec<f64> = (0..n * g).map(|i| ld(rstd, i as isize)).collect();
    let w = read_vec(OP, "weight", weight, c)?;
    let (xp, dyp) = (P(x.ptr as usize), P(dy.ptr as usize));
    let d = c / g;
    // Per (sample, channel): sum(dy * x) and sum(dy) over the channel's
    // spatial extent (ATen's ds and db), the sums every gradient is made of.
    fn sums<T: FloatElem + Widen<T::Acc>>(xp: P, dyp: P, nc: usize, hxw: usize) -> Vec<(f64, f64)> {
        each(
            nc,
            nc * hxw,
            #[inline(always)]
            |i| {
                // SAFETY: channel i of contiguous [n*c, hxw] views.
                let xs =
                    unsafe { std::slice::from_raw_parts((xp.0 as *const T).add(i * hxw), hxw) };
                let ds =
                    unsafe { std::slice::from_raw_parts((dyp.0 as *const T).add(i * hxw), hxw) };
                let dot: T::Acc = lane_sum2(ds, xs, |d, x| d * x);
                let sum: T::Acc = lane_sum(ds, |d| d);
                (dot.to_f64(), sum.to_f64())
            },
        )
    }
    let sb = dispatch_float!(OP, x.dtype, sums, xp, dyp, n * c, hxw);
    if let Some(gi) = grad_input {
        // dx = rstd * w * dy + c2 * x + c3 per (sample, group), with
        // c2 = (db_g * mean - ds_g) * rstd^3 / m and
        // c3 = -c2 * mean - db_g * rstd / m, where ds_g, db_g are the
        // group's weight-scaled ds, db and m = d * hxw.
        let gp = P(gi.ptr as usize);
        #[allow(clippy::too_many_arguments)]
        fn dx<T: FloatElem + Widen<T::Acc>>(
            gp: P,
            xp: P,
            dyp: P,
            sb: &[(f64, f64)],
            mu: &[f64],
            rs: &[f64],
            w: &Option<Vec<f64>>,
            n: usize,
            g: usize,
            d: usize,
            hxw: usize,
        ) {
            let len = d * hxw;
            each(
                n * g,
                n * g * len,
                #[inline(always)]
                |i| {
                    let (ni, gi) = (i / g, i % g);
                    let wc = |k: usize| w.as_ref().map_or(1.0, |w| w[gi * d + k]);
                    let (mut dsg, mut dbg) = (0.0, 0.0);
                    for k in 0..d {
                        let (dsv, dbv) = sb[ni * g * d + gi * d + k];
                        dsg += dsv * wc(k);
                        dbg += dbv * wc(k);
                    }
                    let (m, r) = (mu[i], rs[i]);
                    let s = 1.0 / len as f64;
                    let c2 = (dbg * m - dsg) * r * r * r * s;
                    let c3 = -c2 * m - dbg * r * s;
                    // SAFETY: row i of contiguous [n*g, d*hxw] views.
                    let xs =
                        unsafe { std::slice::from_raw_parts((xp.0 as *const T).add(i * len), len) };
                    let ds = unsafe {
                        std::slice::from_raw_parts((dyp.0 as *const T).add(i * len), len)
                    };
                    let gs = unsafe {
                        std::slice::from_raw_parts_mut((gp.0 as *mut T).add(i * len), len)
                    };
                    let (c2, c3) = (T::Acc::from_f64(c2), T::Acc::from_f64(c3));
                    for k in 0..d {
                        let c1 = T::Acc::from_f64(r * wc(k));
                        let rng = k * hxw..(k + 1) * hxw;
                        for ((o, &dv), &xv) in gs[rng.clone()]
                            .iter_mut()
                            .zip(&ds[rng.clone()])
                            .zip(&xs[rng])
                        {
                            *o = T::narrow(c1 * dv.widen() + c2 * xv.widen() + c3);
                        }
                    }
                },
            );
        }
        dispatch_float!(OP, x.dtype, dx, gp, xp, dyp, &sb, &mu, &rs, &w, n, g, d, hxw);
    }
    if grad_weight.is_some() || grad_bias.is_some() {
        // dgamma[c] = sum_n (ds - db * mean) * rstd; dbeta[c] = sum_n db.
        let mut gw = vec![0.0f64; c];
        let mut gb = vec![0.0f64; c];
        for ni in 0..n {
            for ch in 0..c {
                let (dsv, dbv) = sb[ni * c + ch];
                let i = ni * g + ch / d;
                gw[ch] += (dsv - dbv * mu[i]) * rs[i];
                gb[ch] += dbv;
            }
        }
        write_vec(OP, "grad_weight", grad_weight, &gw)?;
        write_vec(OP, "grad_bias", grad_bias, &gb)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// batch norm
// ---------------------------------------------------------------------------

/// `[batch, channels, spatial]` view geometry.
fn bn_geometry(op: &str, what: &str, s: &Strided, like: &Strided) -> Result<(), KernelError> {
    if s.ndim() != 3 || s.sizes != like.sizes || s.dtype != like.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must be a 3-d view {:?} of {}, got {:?} of {}",
            like.sizes,
            like.dtype.name(),
            s.sizes,
            s.dtype.name()
        )));
    }
    Ok(())
}

/// `v` rounded to `dtype` (floating dtypes; others leave it).
fn round_as(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// The run of batch `bi`, channel `ch` of a 3-d view (its `sizes[2]`
/// spatial elements): the elements themselves when they are adjacent,
/// otherwise gathered into `buf` (channels-last).
///
/// # Safety
/// `s` is a valid view of `T`s; `bi`, `ch` are in range.
#[inline(always)]
unsafe fn run_of<'a, T: Scalar>(
    s: &'a Strided,
    bi: usize,
    ch: usize,
    buf: &'a mut Vec<T>,
) -> &'a [T] {
    let ns = s.sizes[2];
    let p = (s.ptr as *const T).offset(bi as isize * s.strides[0] + ch as isize * s.strides[1]);
    if s.strides[2] == 1 || ns <= 1 {
        return std::slice::from_raw_parts(p, ns);
    }
    buf.clear();
    buf.extend((0..ns).map(|k| *p.offset(k as isize * s.strides[2])));
    buf
}

/// Writes `f(k)` to element `k` of the run of batch `bi`, channel `ch`.
///
/// # Safety
/// As [`run_of`]; each run is written by one thread.
#[inline(always)]
unsafe fn write_run<T: Scalar>(s: &Strided, bi: usize, ch: usize, f: impl Fn(usize) -> f64) {
    let (ns, ss) = (s.sizes[2], s.strides[2]);
    let p = (s.ptr as *mut T).offset(bi as isize * s.strides[0] + ch as isize * s.strides[1]);
    if ss == 1 {
        for (k, o) in std::slice::from_raw_parts_mut(p, ns).iter_mut().enumerate() {
            *o = T::from_f64(f(k));
        }
    } else {
        for k in 0..ns {
            *p.offset(k as isize * ss) = T::from_f64(f(k));
        }
    }
}

/// `(sum(d), sum((x - mu) * d))` over two runs, in f64 lanes.
#[inline(always)]
fn lane_centered_dot<T: Scalar>(d: &[T], x: &[T], mu: f64) -> (f64, f64) {
    (lane_sum(d, |v| v), lane_sum2(d, x, |dv, xv| (xv - mu) * dv))
}

/// A view that crosses to pool threads (each channel is one thread's).
#[derive(Clone, Copy)]
struct V<'a>(&'a Strided);
// SAFETY: the kernels below touch disjoint channels from each thread.
unsafe impl Send for V<'_> {}
unsafe impl Sync for V<'_> {}

/// Batch norm of `x` (`[batch, channels, spatial]`) into `out`. Training:
/// batch statistics (saved to `save_mean`, `save_invstd` when given) and the
/// running statistics updated in place (`momentum`, unbiased variance);
/// otherwise the running statistics normalize.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    out: &Strided,
    save_mean: Option<&Strided>,
    save_invstd: Option<&Strided>,
    x: &Strided,
    weight: Option<&Strided>,
    bias: Option<&Strided>,
    running_mean: Option<&Strided>,
    running_var: Option<&Strided>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "batch_norm";
    floating(OP, x)?;
    if x.ndim() != 3 {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {OP}: expected a 3-d view, got {:?}",
            x.sizes
        )));
    }
    bn_geometry(OP, "output", out, x)?;
    let c = x.sizes[1];
    let w = read_vec(OP, "weight", weight, c)?;
    let b = read_vec(OP, "bias", bias, c)?;
    let rm = read_vec(OP, "running_mean", running_mean, c)?;
    let rv = read_vec(OP, "running_var", running_var, c)?;
    if !training && (rm.is_none() || rv.is_none()) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {OP}: running_mean and running_var must be defined in evaluation mode"
        )));
    }
    // CPU normalizes with the statistics as stored (rounded to their dtype).
    let stat_dtype = save_mean.map_or(DType::F64, |s| s.dtype);
    /// Per channel: (mean, invstd, sum of squared deviations).
    #[allow(clippy::too_many_arguments)]
    fn channels<T: Scalar>(
        x: V,
        out: V,
        w: &Option<Vec<f64>>,
        b: &Option<Vec<f64>>,
        rm: &Option<Vec<f64>>,
        rv: &Option<Vec<f64>>,
        training: bool,
        eps: f64,
        stat_dtype: DType,
    ) -> Vec<(f64, f64, f64)> {
        let (x, out) = (x.0, out.0);
        let (nb, cnt) = (x.sizes[0], x.sizes[0] * x.sizes[2]);
        each(
            x.sizes[1],
            x.numel(),
            #[inline(always)]
            |ch| {
                let mut buf = Vec::new();
                let (mean, invstd, var_sum) = if training {
                    // SAFETY: runs of channel ch of a valid view.
                    let s: f64 = (0..nb)
                        .map(|bi| lane_sum(unsafe { run_of::<T>(x, bi, ch, &mut buf) }, |v| v))
                        .sum();
                    let mean = s / cnt as f64;
                    let v: f64 = (0..nb)
                        .map(|bi| {
                            lane_sum(unsafe { run_of::<T>(x, bi, ch, &mut buf) }, |v| {
                                (v - mean) * (v - mean)
                            })
                        })
                        .sum();
                    let invstd = if cnt == 0 {
                        0.0
                    } else {
                        1.0 / (v / cnt as f64 + eps).sqrt()
                    };
                    (round_as(stat_dtype, mean), round_as(stat_dtype, invstd), v)
                } else {
                    let (m, v) = (rm.as_ref().unwrap()[ch], rv.as_ref().unwrap()[ch]);
                    (m, 1.0 / (v + eps).sqrt(), 0.0)
                };
                let alpha = invstd * w.as_ref().map_or(1.0, |w| w[ch]);
                let beta = b.as_ref().map_or(0.0, |b| b[ch]) - mean * alpha;
                for bi in 0..nb {
                    // SAFETY: as above; out has x's sizes and this thread owns channel ch.
                    unsafe {
                        let xs = run_of::<T>(x, bi, ch, &mut buf);
                        write_run::<T>(out, bi, ch, |k| xs[k].to_f64() * alpha + beta);
                    }
                }
                (mean, invstd, var_sum)
            },
        )
    }
    let stats = dispatch_float!(
        OP,
        x.dtype,
        channels,
        V(x),
        V(out),
        &w,
        &b,
        &rm,
        &rv,
        training,
        eps,
        stat_dtype
    );
    let cnt = x.sizes[0] * x.sizes[2];
    if training {
        let mean: Vec<f64> = stats.iter().map(|s| s.0).collect();
        let invstd: Vec<f64> = stats.iter().map(|s| s.1).collect();
        write_vec(OP, "save_mean", save_mean, &mean)?;
        write_vec(OP, "save_invstd", save_invstd, &invstd)?;
        if let Some(rm) = rm {
            let v: Vec<f64> = rm
                .iter()
                .zip(&mean)
                .map(|(r, m)| momentum * m + (1.0 - momentum) * r)
                .collect();
            write_vec(OP, "running_mean", running_mean, &v)?;
        }
        if let Some(rv) = rv {
            let v: Vec<f64> = rv
                .iter()
                .zip(&stats)
                .map(|(r, s)| momentum * (s.2 / (cnt as f64 - 1.0)) + (1.0 - momentum) * r)
                .collect();
            write_vec(OP, "running_var", running_var, &v)?;
        }
    }
    Ok(())
}

/// Gradients of [`batch_norm`] w.r.t. its input (into `grad_input`, a 3-d
/// view like `x`), weight and bias (1-d), each only when given. `train`:
/// the saved batch statistics were used; else the running ones.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_backward(
    grad_input: Option<&Strided>,
    grad_weight: Option<&Strided>,
    grad_bias: Option<&Strided>,
    dy: &Strided,
    x: &Strided,
    weight: Option<&Strided>,
    running_mean: Option<&Strided>,
    running_var: Option<&Strided>,
    save_mean: Option<&Strided>,
    save_invstd: Option<&Strided>,
    train: bool,
    eps: f64,
) -> Result<(), KernelError> {
    const OP: &str = "batch_norm_backward";
    floating(OP, x)?;
    if x.ndim() != 3 {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {OP}: expected a 3-d view, got {:?}",
            x.sizes
        )));
    }
    bn_geometry(OP, "grad_output", dy, x)?;
    if let Some(gi) = grad_input {
        bn_geometry(OP, "grad_input", gi, x)?;
    }
    let c = x.sizes[1];
    let w = read_vec(OP, "weight", weight, c)?;
    let (mean, invstd) = if train {
        let m = read_vec(OP, "save_mean", save_mean, c)?;
        let s = read_vec(OP, "save_invstd", save_invstd, c)?;
        match (m, s) {
            (Some(m), Some(s)) => (m, s),
            _ => {
                return Err(KernelError::InvalidArgument(format!(
                    "foo: {OP}: save_mean and save_invstd must be defined in training mode"
                )))
            }
        }
    } else {
        let m = read_vec(OP, "running_mean", running_mean, c)?;
        let v = read_vec(OP, "running_var", running_var, c)?;
        match (m, v) {
            (Some(m), Some(v)) => (m, v.iter().map(|v| 1.0 / (v + eps).sqrt()).collect()),
            _ => {
                return Err(KernelError::InvalidArgument(format!(
                    "foo: {OP}: running_mean and running_var must be defined in evaluation mode"
                )))
            }
        }
    };
    /// Per channel: (grad_weight, grad_bias); grad_input written when given.
    #[allow(clippy::too_many_arguments)]
    fn channels<T: Scalar>(
        gi: Option<V>,
        dy: V,
        x: V,
        w: &Option<Vec<f64>>,
        mean: &[f64],
        invstd: &[f64],
        train: bool,
    ) -> Vec<(f64, f64)> {
        let (dy, x) = (dy.0, x.0);
        let (nb, cnt) = (x.sizes[0], x.sizes[0] * x.sizes[2]);
        each(
            x.sizes[1],
            x.numel(),
            #[inline(always)]
            |ch| {
                let (mu, is) = (mean[ch], invstd[ch]);
                let (mut bd, mut bx) = (Vec::new(), Vec::new());
                let (mut sum, mut dot) = (0.0f64, 0.0f64);
                for bi in 0..nb {
                    // SAFETY: runs of channel ch of valid views of equal sizes.
                    let (s, d) = unsafe {
                        lane_centered_dot(
                            run_of::<T>(dy, bi, ch, &mut bd),
                            run_of::<T>(x, bi, ch, &mut bx),
                            mu,
                        )
                    };
                    sum += s;
                    dot += d;
                }
                if let Some(gi) = gi {
                    let wc = w.as_ref().map_or(1.0, |w| w[ch]);
                    let kk = if cnt == 0 {
                        0.0
                    } else {
                        dot * is * is / cnt as f64
                    };
                    let gm = if cnt == 0 { 0.0 } else { sum / cnt as f64 };
                    for bi in 0..nb {
                        // SAFETY: as above; this thread owns channel ch of grad_input.
                        unsafe {
                            let (ds, xs) = (
                                run_of::<T>(dy, bi, ch, &mut bd),
                                run_of::<T>(x, bi, ch, &mut bx),
                            );
                            if train {
                                write_run::<T>(gi.0, bi, ch, |k| {
                                    (ds[k].to_f64() - gm - (xs[k].to_f64() - mu) * kk) * is * wc
                                });
                            } else {
                                write_run::<T>(gi.0, bi, ch, |k| ds[k].to_f64() * is * wc);
                            }
                        }
                    }
                }
                (dot * is, sum)
            },
        )
    }
    let sums = dispatch_float!(
        OP,
        x.dtype,
        channels,
        grad_input.map(V),
        V(dy),
        V(x),
        &w,
        &mean,
        &invstd,
        train
    );
    let gw: Vec<f64> = sums.iter().map(|s| s.0).collect();
    let gb: Vec<f64> = sums.iter().map(|s| s.1).collect();
    write_vec(OP, "grad_weight", grad_weight, &gw)?;
    write_vec(OP, "grad_bias", grad_bias, &gb)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(v: &mut [f32], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F32, sizes)
    }

    #[test]
    fn layer_norm_rows() {
        let mut x = vec![1.0f32, 2.0, 3.0, 4.0, -1.0, -1.0, 1.0, 1.0];
        let mut out = vec![0f32; 8];
        let (mut mean, mut rstd) = (vec![0f32; 2], vec![0f32; 2]);
        let mut w = vec![2.0f32; 4];
        layer_norm(
            &view(&mut out, &[2, 4]),
            &view(&mut mean, &[2]),
            &view(&mut rstd, &[2]),
            &view(&mut x, &[2, 4]),
            Some(&view(&mut w, &[4])),
            None,
            2,
            4,
            0.0,
        )
        .unwrap();
        assert_eq!(mean, vec![2.5, 0.0]);
        let r = 1.0 / 1.25f32.sqrt();
        assert!((rstd[0] - r).abs() < 1e-6);
        assert!((out[0] - 2.0 * (-1.5) * r).abs() < 1e-5);
        assert_eq!(&out[4..], &[-2.0, -2.0, 2.0, 2.0]);
    }

    #[test]
    fn layer_norm_independent_of_threads() {
        let (m, n) = (600, 512); // above par_min(): rows split over threads
        let mut x: Vec<f32> = (0..m * n)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
            .collect();
        let run = |x: &mut Vec<f32>| {
            let (mut out, mut mean, mut rstd) = (vec![0f32; m * n], vec![0f32; m], vec![0f32; m]);
            layer_norm(
                &view(&mut out, &[m, n]),
                &view(&mut mean, &[m]),
                &view(&mut rstd, &[m]),
                &view(x, &[m, n]),
                None,
                None,
                m,
                n,
                1e-5,
            )
            .unwrap();
            (out, mean, rstd)
        };
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let a = one.install(|| crate::kernels::parallel::with_threads(1, || run(&mut x)));
        let b = run(&mut x);
        assert_eq!(a, b);
    }

    #[test]
    fn batch_norm_updates_running_stats() {
        // [batch 2, channels 1, spatial 2]
        let mut x = vec![1.0f32, 3.0, 5.0, 7.0];
        let mut out = vec![0f32; 4];
        let (mut rm, mut rv) = (vec![0f32], vec![1f32]);
        let (mut sm, mut si) = (vec![0f32], vec![0f32]);
        batch_norm(
            &view(&mut out, &[2, 1, 2]),
            Some(&view(&mut sm, &[1])),
            Some(&view(&mut si, &[1])),
            &view(&mut x, &[2, 1, 2]),
            None,
            None,
            Some(&view(&mut rm, &[1])),
            Some(&view(&mut rv, &[1])),
            true,
            0.1,
            0.0,
        )
        .unwrap();
        assert_eq!(sm[0], 4.0);
        assert!((si[0] - 1.0 / 5f32.sqrt()).abs() < 1e-6);
        assert!((rm[0] - 0.4).abs() < 1e-6);
        // unbiased variance 20/3
        assert!((rv[0] - (0.1 * 20.0 / 3.0 + 0.9)).abs() < 1e-5);
        let s: f32 = out.iter().sum();
        assert!(s.abs() < 1e-5);
    }

    #[test]
    fn batch_norm_backward_sums() {
        let mut x = vec![1.0f32, 2.0, 3.0, 4.0];
        let mut dy = vec![1.0f32; 4];
        let (mut m, mut s) = (vec![2.5f32], vec![1.0f32]);
        let (mut gw, mut gb, mut gi) = (vec![0f32], vec![0f32], vec![9f32; 4]);
        batch_norm_backward(
            Some(&view(&mut gi, &[4, 1, 1])),
            Some(&view(&mut gw, &[1])),
            Some(&view(&mut gb, &[1])),
            &view(&mut dy, &[4, 1, 1]),
            &view(&mut x, &[4, 1, 1]),
            None,
            None,
            None,
            Some(&view(&mut m, &[1])),
            Some(&view(&mut s, &[1])),
            true,
            0.0,
        )
        .unwrap();
        assert_eq!(gb[0], 4.0);
        assert_eq!(gw[0], 0.0);
        assert_eq!(gi, vec![0.0; 4]);
    }
}
