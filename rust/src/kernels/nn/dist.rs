//! p-norm distances: `_cdist_forward` / `_cdist_backward` (all pairs of rows
//! of two batched matrices) and `_pdist_forward` / `_pdist_backward` (the
//! pairs `i < j` of one matrix's rows), float32 and float64 as on CPU.
//!
//! Views are contiguous (the Python layer makes them so and flattens the
//! batch). Each distance sums its `m` terms in order in the element type, as
//! CPU's kernel does; each gradient row sums its pairs in order of the other
//! row, so results do not depend on the thread count.

use super::super::{parallel, KernelError, Strided};
use crate::dtype::DType;

/// Which norm: CPU's kernels specialize these.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Norm {
    Zero,
    One,
    Two,
    Inf,
    /// 0 < p < 2 (not 1).
    LtTwo(f64),
    /// p > 2.
    P(f64),
}

impl Norm {
    fn of(p: f64) -> Result<Norm, KernelError> {
        if p.is_nan() || p < 0.0 {
            return Err(KernelError::InvalidArgument(
                "cdist only supports non-negative p values".into(),
            ));
        }
        Ok(if p == 0.0 {
            Norm::Zero
        } else if p == 1.0 {
            Norm::One
        } else if p == 2.0 {
            Norm::Two
        } else if p.is_infinite() {
            Norm::Inf
        } else if p < 2.0 {
            Norm::LtTwo(p)
        } else {
            Norm::P(p)
        })
    }
}

/// The float types the distance kernels compute in.
trait Real: Copy + Send + Sync + PartialOrd + 'static {
    fn f(self) -> f64;
    fn from(v: f64) -> Self;
}
impl Real for f32 {
    #[inline(always)]
    fn f(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from(v: f64) -> f32 {
        v as f32
    }
}
impl Real for f64 {
    #[inline(always)]
    fn f(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from(v: f64) -> f64 {
        v
    }
}

/// The distance of rows `a` and `b`, accumulated in the element type.
#[inline(always)]
fn distance<T: Real>(norm: Norm, a: &[T], b: &[T]) -> T {
    // Each step rounds to T (a no-op for float64).
    let r = |v: f64| T::from(v).f();
    let mut agg = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        let d = r((x.f() - y.f()).abs());
        agg = match norm {
            Norm::Zero => r(agg + if d != 0.0 { 1.0 } else { 0.0 }),
            Norm::One => r(agg + d),
            Norm::Two => r(agg + r(d * d)),
            Norm::Inf => {
                if d > agg || d.is_nan() {
                    d
                } else {
                    agg
                }
            }
            Norm::LtTwo(p) | Norm::P(p) => r(agg + r(d.powf(p))),
        };
    }
    T::from(match norm {
        Norm::Two => agg.sqrt(),
        Norm::LtTwo(p) | Norm::P(p) => agg.powf(1.0 / p),
        _ => agg,
    })
}

/// d dist / d a for one coordinate (`diff = a - b`, rounded to the element
/// type as CPU's: the infinity norm's gradient compares it with `dist`),
/// times `grad`.
#[inline(always)]
fn grad_term(norm: Norm, diff: f64, grad: f64, dist: f64) -> f64 {
    let sign = ((diff > 0.0) as i32 - (diff < 0.0) as i32) as f64;
    match norm {
        Norm::Zero => 0.0,
        Norm::One => grad * sign,
        Norm::Two => {
            if dist == 0.0 {
                0.0
            } else {
                grad * diff / dist
            }
        }
        Norm::Inf => grad * sign * (1.0 - (diff.abs() - dist).abs().ceil().min(1.0)),
        Norm::LtTwo(p) => {
            if dist == 0.0 || (diff == 0.0 && p < 1.0) {
                0.0
            } else {
                sign * diff.abs().powf(p - 1.0) * grad / dist.powf(p - 1.0)
            }
        }
        Norm::P(p) => {
            if dist == 0.0 {
                0.0
            } else {
                diff * diff.abs().powf(p - 2.0) * grad / dist.powf(p - 1.0)
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Ptr(usize);

fn contiguous(views: &[(&str, &Strided)], dtype: DType) -> Result<(), KernelError> {
    for (what, v) in views {
        if v.dtype != dtype || !(v.numel() == 0 || v.is_contiguous()) {
            return Err(KernelError::InvalidArgument(format!(
                "foo: cdist/pdist expect contiguous {what} of dtype {}",
                dtype.name()
            )));
        }
    }
    Ok(())
}

fn unsupported(op: &'static str, d: DType) -> KernelError {
    KernelError::UnsupportedDtype { op, dtype: d }
}

/// `out[b, i, j] = ||x1[b, i] - x2[b, j]||_p` (`x1` `[B, P, M]`, `x2`
/// `[B, R, M]`, `out` `[B, P, R]`).
pub fn cdist(out: &Strided, x1: &Strided, x2: &Strided, p: f64) -> Result<(), KernelError> {
    let norm = Norm::of(p)?;
    contiguous(&[("x1", x1), ("x2", x2), ("output", out)], x1.dtype)?;
    let (b, pn, m) = dims3(x1)?;
    let (b2, r, m2) = dims3(x2)?;
    if b2 != b || m2 != m || out.sizes[..] != [b, pn, r] {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: cdist: shapes {:?}, {:?} -> {:?}",
            x1.sizes, x2.sizes, out.sizes
        )));
    }
    fn go<T: Real>(
        norm: Norm,
        o: Ptr,
        a: Ptr,
        c: Ptr,
        (b, pn, r, m): (usize, usize, usize, usize),
    ) {
        parallel::parallel_for(b * pn, |row| {
            let bi = row / pn;
            // SAFETY: row `row` of x1, batch `bi` of x2 and output row `row`
            // (written by this task only) lie inside their tensors.
            unsafe {
                let xa = std::slice::from_raw_parts((a.0 as *const T).add(row * m), m);
                let dst = std::slice::from_raw_parts_mut((o.0 as *mut T).add(row * r), r);
                for (j, d) in dst.iter_mut().enumerate() {
                    let xb = std::slice::from_raw_parts((c.0 as *const T).add((bi * r + j) * m), m);
                    *d = distance(norm, xa, xb);
                }
            }
        });
    }
    if out.numel() == 0 {
        return Ok(());
    }
    let args = (
        Ptr(out.ptr as usize),
        Ptr(x1.ptr as usize),
        Ptr(x2.ptr as usize),
    );
    match x1.dtype {
        DType::F32 => go::<f32>(norm, args.0, args.1, args.2, (b, pn, r, m)),
        DType::F64 => go::<f64>(norm, args.0, args.1, args.2, (b, pn, r, m)),
        d => return Err(unsupported("cdist", d)),
    }
    Ok(())
}

fn dims3(t: &Strided) -> Result<(usize, usize, usize), KernelError> {
    match t.sizes[..] {
        [a, b, c] => Ok((a, b, c)),
        _ => Err(KernelError::InvalidArgument(format!(
            "foo: cdist takes [B, P, M] views, got {:?}",
            t.sizes
        ))),
    }
}

/// Gradient of [`cdist`] with respect to `x1`: `gx1[b, i] = Σ_j grad[b, i, j]
/// * d dist(x1[b, i], x2[b, j]) / d x1[b, i]` (`dist` the forward result).
pub fn cdist_backward(
    gx1: &Strided,
    grad: &Strided,
    x1: &Strided,
    x2: &Strided,
    dist: &Strided,
    p: f64,
) -> Result<(), KernelError> {
    let norm = Norm::of(p)?;
    contiguous(
        &[
            ("grad_x1", gx1),
            ("grad", grad),
            ("x1", x1),
            ("x2", x2),
            ("cdist", dist),
        ],
        x1.dtype,
    )?;
    let (b, pn, m) = dims3(x1)?;
    let (_, r, _) = dims3(x2)?;
    if gx1.sizes != x1.sizes || grad.sizes[..] != [b, pn, r] || dist.sizes != grad.sizes {
        return Err(KernelError::ShapeMismatch(
            "foo: _cdist_backward: shapes do not fit".into(),
        ));
    }
    fn go<T: Real>(
        norm: Norm,
        [o, g, a, c, d]: [Ptr; 5],
        (b, pn, r, m): (usize, usize, usize, usize),
    ) {
        parallel::parallel_for(b * pn, |row| {
            let bi = row / pn;
            let mut acc = vec![0.0f64; m];
            // SAFETY: reads inside the inputs; writes row `row` of gx1 (this
            // task's only).
            unsafe {
                let xa = std::slice::from_raw_parts((a.0 as *const T).add(row * m), m);
                for j in 0..r {
                    let gv = (*(g.0 as *const T).add(row * r + j)).f();
                    let dv = (*(d.0 as *const T).add(row * r + j)).f();
                    let xb = std::slice::from_raw_parts((c.0 as *const T).add((bi * r + j) * m), m);
                    for k in 0..m {
                        acc[k] += grad_term(norm, T::from(xa[k].f() - xb[k].f()).f(), gv, dv);
                    }
                }
                let dst = std::slice::from_raw_parts_mut((o.0 as *mut T).add(row * m), m);
                for (o, &v) in dst.iter_mut().zip(&acc) {
                    *o = T::from(v);
                }
            }
        });
    }
    if gx1.numel() == 0 {
        return Ok(());
    }
    let ptrs = [gx1, grad, x1, x2, dist].map(|t| Ptr(t.ptr as usize));
    match x1.dtype {
        DType::F32 => go::<f32>(norm, ptrs, (b, pn, r, m)),
        DType::F64 => go::<f64>(norm, ptrs, (b, pn, r, m)),
        d => return Err(unsupported("cdist", d)),
    }
    Ok(())
}

/// The index of pair `(i, j)`, `i < j`, among `n` rows (row-major upper triangle).
#[inline(always)]
fn pair(n: usize, i: usize, j: usize) -> usize {
    i * (2 * n - i - 1) / 2 + (j - i - 1)
}

fn dims2(t: &Strided) -> Result<(usize, usize), KernelError> {
    match t.sizes[..] {
        [a, b] => Ok((a, b)),
        _ => Err(KernelError::InvalidArgument(format!(
            "foo: pdist takes an [N, M] view, got {:?}",
            t.sizes
        ))),
    }
}

/// `out[pair(i, j)] = ||x[i] - x[j]||_p` for `i < j` (`x` `[N, M]`).
pub fn pdist(out: &Strided, x: &Strided, p: f64) -> Result<(), KernelError> {
    let norm = Norm::of(p)?;
    contiguous(&[("input", x), ("output", out)], x.dtype)?;
    let (n, m) = dims2(x)?;
    if out.numel() != n * n.saturating_sub(1) / 2 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: pdist: output of {} elements for {n} rows",
            out.numel()
        )));
    }
    fn go<T: Real>(norm: Norm, o: Ptr, a: Ptr, (n, m): (usize, usize)) {
        parallel::parallel_for(n, |i| {
            // SAFETY: row i's pairs (written by this task only) and rows of x.
            unsafe {
                let xi = std::slice::from_raw_parts((a.0 as *const T).add(i * m), m);
                for j in i + 1..n {
                    let xj = std::slice::from_raw_parts((a.0 as *const T).add(j * m), m);
                    *(o.0 as *mut T).add(pair(n, i, j)) = distance(norm, xi, xj);
                }
            }
        });
    }
    if out.numel() == 0 {
        return Ok(());
    }
    let (o, a) = (Ptr(out.ptr as usize), Ptr(x.ptr as usize));
    match x.dtype {
        DType::F32 => go::<f32>(norm, o, a, (n, m)),
        DType::F64 => go::<f64>(norm, o, a, (n, m)),
        d => return Err(unsupported("pdist", d)),
    }
    Ok(())
}

/// Gradient of [`pdist`]: `gx[i] = Σ_{j ≠ i} grad[pair] * d dist / d x[i]`.
pub fn pdist_backward(
    gx: &Strided,
    grad: &Strided,
    x: &Strided,
    dist: &Strided,
    p: f64,
) -> Result<(), KernelError> {
    let norm = Norm::of(p)?;
    contiguous(
        &[
            ("grad_input", gx),
            ("grad", grad),
            ("input", x),
            ("pdist", dist),
        ],
        x.dtype,
    )?;
    let (n, m) = dims2(x)?;
    let k = n * n.saturating_sub(1) / 2;
    if gx.sizes != x.sizes || grad.numel() != k || dist.numel() != k {
        return Err(KernelError::ShapeMismatch(
            "foo: _pdist_backward: shapes do not fit".into(),
        ));
    }
    fn go<T: Real>(norm: Norm, [o, g, a, d]: [Ptr; 4], (n, m): (usize, usize)) {
        parallel::parallel_for(n, |i| {
            let mut acc = vec![0.0f64; m];
            // SAFETY: reads inside the inputs; writes row i of gx (this task's only).
            unsafe {
                let xi = std::slice::from_raw_parts((a.0 as *const T).add(i * m), m);
                for j in (0..n).filter(|&j| j != i) {
                    let q = if i < j { pair(n, i, j) } else { pair(n, j, i) };
                    let gv = (*(g.0 as *const T).add(q)).f();
                    let dv = (*(d.0 as *const T).add(q)).f();
                    let xj = std::slice::from_raw_parts((a.0 as *const T).add(j * m), m);
                    for c in 0..m {
                        acc[c] += grad_term(norm, T::from(xi[c].f() - xj[c].f()).f(), gv, dv);
                    }
                }
                let dst = std::slice::from_raw_parts_mut((o.0 as *mut T).add(i * m), m);
                for (o, &v) in dst.iter_mut().zip(&acc) {
                    *o = T::from(v);
                }
            }
        });
    }
    if gx.numel() == 0 {
        return Ok(());
    }
    let ptrs = [gx, grad, x, dist].map(|t| Ptr(t.ptr as usize));
    match x.dtype {
        DType::F32 => go::<f32>(norm, ptrs, (n, m)),
        DType::F64 => go::<f64>(norm, ptrs, (n, m)),
        d => return Err(unsupported("pdist", d)),
    }
    Ok(())
}
