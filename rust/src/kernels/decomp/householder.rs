//! Householder reflectors in LAPACK's representation: `geqrf` (QR as
//! reflectors and their scalars), `householder_product` (LAPACK's orgqr: the
//! explicit Q) and `ormqr` (Q or Qᵀ times a matrix without forming Q).
//!
//! Written by hand, unblocked (LAPACK's geqr2/org2r/orm2r): faer factors QR
//! with blocked reflectors whose scalars live in its own block layout, while
//! these ops exchange LAPACK's `(v, tau)` form with the user (`torch.geqrf`'s
//! outputs are `householder_product`'s and `ormqr`'s inputs), so the
//! reflector convention itself is the contract: `H = I - tau v vᵀ` with
//! `v[0] = 1` implicit and `v[1..]` stored below the diagonal, `beta =
//! -sign(alpha) ‖(alpha, x)‖` (dlarfg). The matrices these ops see are small
//! (the ops are not on any model's hot path), so the unblocked loops are
//! enough; each matrix of a batch is one task of foo's pool.

use super::{for_batch, invalid, Mats, Real};
use crate::kernels::{KernelError, Strided};
use faer::MatMut;

/// dlarfg on `a[i.., col]` (alpha at row `i`): the reflector's `v[1..]`
/// overwrite `a[i+1.., col]`, `beta` overwrites `a[i, col]`; returns `tau`.
fn make_reflector<T: Real>(a: &mut MatMut<'_, T>, i: usize, col: usize) -> T {
    let m = a.nrows();
    let alpha = a[(i, col)];
    let mut xnorm2 = T::zero();
    for r in i + 1..m {
        xnorm2 += a[(r, col)] * a[(r, col)];
    }
    if xnorm2 == T::zero() {
        return T::zero(); // H = I
    }
    let norm = alpha.hypot(xnorm2.sqrt());
    let beta = if alpha >= T::zero() { -norm } else { norm };
    let tau = (beta - alpha) / beta;
    let scale = T::one() / (alpha - beta);
    for r in i + 1..m {
        a[(r, col)] *= scale;
    }
    a[(i, col)] = beta;
    tau
}

/// Applies `H = I - tau v vᵀ` from the left to rows `i..` of columns `cols`
/// of `c`; `v` is column `vcol` of `v_src` from row `i` (`v[0] = 1`).
fn reflect_left<T: Real>(
    v_src: &dyn Fn(usize) -> T,
    tau: T,
    i: usize,
    c: &mut MatMut<'_, T>,
    cols: std::ops::Range<usize>,
) {
    if tau == T::zero() {
        return;
    }
    let m = c.nrows();
    for j in cols {
        let mut w = c[(i, j)];
        for r in i + 1..m {
            w += v_src(r) * c[(r, j)];
        }
        let w = w * tau;
        c[(i, j)] -= w;
        for r in i + 1..m {
            let d = v_src(r) * w;
            c[(r, j)] -= d;
        }
    }
}

/// Applies `H` from the right to columns `i..` of every row of `c`.
fn reflect_right<T: Real>(v_src: &dyn Fn(usize) -> T, tau: T, i: usize, c: &mut MatMut<'_, T>) {
    if tau == T::zero() {
        return;
    }
    let n = c.ncols();
    for r in 0..c.nrows() {
        let mut w = c[(r, i)];
        for j in i + 1..n {
            w += c[(r, j)] * v_src(j);
        }
        let w = w * tau;
        c[(r, i)] -= w;
        for j in i + 1..n {
            let d = w * v_src(j);
            c[(r, j)] -= d;
        }
    }
}

/// A batch of vectors (`tau`): per-matrix offsets, length and stride.
struct Vecs {
    ptr: usize,
    offs: Vec<isize>,
    len: usize,
    stride: isize,
}

impl Vecs {
    fn of(t: &Strided, batch: usize, op: &str) -> Result<Vecs, KernelError> {
        let offs = super::batch_offsets(t, 1)?;
        if offs.len() != batch {
            return Err(KernelError::ShapeMismatch(format!(
                "foo {op}: {} batch entries of tau for {batch} matrices",
                offs.len()
            )));
        }
        Ok(Vecs {
            ptr: t.ptr as usize,
            offs,
            len: t.sizes[t.ndim() - 1],
            stride: t.strides[t.ndim() - 1],
        })
    }

    /// # Safety
    /// `b < batch`, `i < len`, and the view lies in its allocation.
    unsafe fn at<T>(&self, b: usize, i: usize) -> *mut T {
        (self.ptr as *mut T).offset(self.offs[b] + i as isize * self.stride)
    }
}

fn same_dtype(op: &'static str, ts: &[&Strided]) -> Result<(), KernelError> {
    if ts.iter().any(|t| t.dtype != ts[0].dtype) {
        return Err(invalid(format!("foo {op}: tensors of different dtypes")));
    }
    Ok(())
}

/// QR as LAPACK's geqrf, in place: `a` (`[..., m, n]`) receives `R` on and
/// above the diagonal and the reflectors' `v[1..]` below it; `tau`
/// (`[..., min(m, n)]`) their scalars.
pub fn geqrf(a: &Strided, tau: &Strided) -> Result<(), KernelError> {
    same_dtype("geqrf", &[a, tau])?;
    let am = Mats::of(a)?;
    let tv = Vecs::of(tau, am.offs.len(), "geqrf")?;
    if tv.len != am.m.min(am.n) {
        return Err(KernelError::ShapeMismatch(format!(
            "foo geqrf: tau has {} entries for {}x{} matrices",
            tv.len, am.m, am.n
        )));
    }
    by_dtype!("geqrf", a.dtype, geqrf_t(&am, &tv))
}

fn geqrf_t<T: Real>(a: &Mats, tau: &Vecs) -> Result<(), KernelError> {
    let (m, n) = (a.m, a.n);
    for_batch(a.offs.len(), m.max(n), |b| {
        // SAFETY: matrix b and tau[b] are this task's alone.
        let mut f = unsafe { a.get_mut::<T>(b) };
        for i in 0..m.min(n) {
            let t = make_reflector(&mut f, i, i);
            // Reads v from column i while columns i+1.. change: v is a copy.
            let v: Vec<T> = (0..m).map(|r| f[(r, i)]).collect();
            reflect_left(&|r| v[r], t, i, &mut f, i + 1..n);
            unsafe { *tau.at::<T>(b, i) = t };
        }
        Ok(())
    })
}

/// The reflectors of `v` (`[..., m, k']`, LAPACK's geqrf layout) and `tau`
/// (`[..., k]`, k <= k'), checked against each other.
fn reflectors(v: &Strided, tau: &Strided, op: &'static str) -> Result<(Mats, Vecs), KernelError> {
    let vm = Mats::of(v)?;
    let tv = Vecs::of(tau, vm.offs.len(), op)?;
    if tv.len > vm.n || tv.len > vm.m {
        return Err(invalid(format!(
            "foo {op}: {} reflectors for {}x{} matrices of reflectors",
            tv.len, vm.m, vm.n
        )));
    }
    Ok((vm, tv))
}

/// LAPACK's orgqr: `out` (`[..., m, n]`, n <= m) receives the first n columns
/// of `Q = H_0 H_1 ... H_{k-1}`, the reflectors read from `v` (`[..., m, n]`)
/// and `tau` (`[..., k]`, k <= n). `out` may be `v` itself.
pub fn householder_product(v: &Strided, tau: &Strided, out: &Strided) -> Result<(), KernelError> {
    same_dtype("linalg.householder_product", &[v, tau, out])?;
    let (vm, tv) = reflectors(v, tau, "linalg.householder_product")?;
    let om = Mats::of(out)?;
    if om.offs.len() != vm.offs.len() || om.m != vm.m || om.n != vm.n || om.n > om.m {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.householder_product: output {:?} for reflectors {:?}",
            out.sizes, v.sizes
        )));
    }
    by_dtype!(
        "linalg_householder_product",
        v.dtype,
        householder_product_t(&vm, &tv, &om)
    )
}

fn householder_product_t<T: Real>(v: &Mats, tau: &Vecs, out: &Mats) -> Result<(), KernelError> {
    let (m, n, k) = (out.m, out.n, tau.len);
    for_batch(v.offs.len(), m, |b| {
        // The reflectors are copied first: `out` may alias `v`.
        let vr = unsafe { v.get::<T>(b) };
        let cols: Vec<Vec<T>> = (0..k)
            .map(|i| (0..m).map(|r| vr[(r, i)]).collect())
            .collect();
        let taus: Vec<T> = (0..k).map(|i| unsafe { *tau.at::<T>(b, i) }).collect();
        let mut q = unsafe { out.get_mut::<T>(b) };
        for j in 0..n {
            for r in 0..m {
                q[(r, j)] = if r == j { T::one() } else { T::zero() };
            }
        }
        for i in (0..k).rev() {
            reflect_left(&|r| cols[i][r], taus[i], i, &mut q, i..n);
        }
        Ok(())
    })
}

/// LAPACK's ormqr: `c` (`[..., p, q]`) is overwritten by `op(Q) C`
/// (`left`) or `C op(Q)`, `op(Q) = Qᵀ` with `transpose`, Q the product of
/// the reflectors in `v` (`[..., mn, k']`, mn = p when left, else q) and
/// `tau` (`[..., k]`).
pub fn ormqr(
    v: &Strided,
    tau: &Strided,
    c: &Strided,
    left: bool,
    transpose: bool,
) -> Result<(), KernelError> {
    same_dtype("ormqr", &[v, tau, c])?;
    let (vm, tv) = reflectors(v, tau, "ormqr")?;
    let cm = Mats::of(c)?;
    let mn = if left { cm.m } else { cm.n };
    if cm.offs.len() != vm.offs.len() || vm.m != mn {
        return Err(KernelError::ShapeMismatch(format!(
            "foo ormqr: reflectors {:?} do not fit the other matrix {:?}",
            v.sizes, c.sizes
        )));
    }
    by_dtype!("ormqr", v.dtype, ormqr_t(&vm, &tv, &cm, left, transpose))
}

fn ormqr_t<T: Real>(
    v: &Mats,
    tau: &Vecs,
    c: &Mats,
    left: bool,
    transpose: bool,
) -> Result<(), KernelError> {
    let k = tau.len;
    let mn = v.m;
    for_batch(v.offs.len(), c.m.max(c.n), |b| {
        let vr = unsafe { v.get::<T>(b) };
        let cols: Vec<Vec<T>> = (0..k)
            .map(|i| (0..mn).map(|r| vr[(r, i)]).collect())
            .collect();
        let taus: Vec<T> = (0..k).map(|i| unsafe { *tau.at::<T>(b, i) }).collect();
        let mut cc = unsafe { c.get_mut::<T>(b) };
        let ncols = cc.ncols();
        // Q = H_0 ... H_{k-1}. Q C and C Qᵀ apply the last reflector first;
        // Qᵀ C and C Q the first.
        let forward = left == transpose;
        for step in 0..k {
            let i = if forward { step } else { k - 1 - step };
            let vi = &cols[i];
            if left {
                reflect_left(&|r| vi[r], taus[i], i, &mut cc, 0..ncols);
            } else {
                reflect_right(&|r| vi[r], taus[i], i, &mut cc);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn view(v: &mut [f64], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F64, sizes)
    }

    #[test]
    fn geqrf_then_orgqr_rebuilds_a() {
        // A 4x3 matrix; Q (4x3) R (3x3) must give A back, Q orthonormal.
        let a0 = [
            2.0, -1.0, 0.5, 1.0, 3.0, -2.0, 0.0, 1.5, 4.0, -3.0, 0.25, 1.0,
        ];
        let mut a = a0;
        let mut tau = [0.0; 3];
        geqrf(&view(&mut a, &[4, 3]), &view(&mut tau, &[3])).unwrap();
        let mut q = a;
        let (vv, tt) = (view(&mut a, &[4, 3]), view(&mut tau, &[3]));
        householder_product(&vv, &tt, &view(&mut q, &[4, 3])).unwrap();
        for i in 0..4 {
            for j in 0..3 {
                let s: f64 = (0..=j).map(|l| q[i * 3 + l] * a[l * 3 + j]).sum();
                assert!((s - a0[i * 3 + j]).abs() < 1e-12, "{i},{j}: {s}");
            }
        }
        for j in 0..3 {
            for l in 0..3 {
                let s: f64 = (0..4).map(|i| q[i * 3 + j] * q[i * 3 + l]).sum();
                assert!((s - (j == l) as u8 as f64).abs() < 1e-12);
            }
        }
        // LAPACK's sign: beta = -sign(alpha) * norm, so R[0,0] < 0 here.
        assert!(a[0] < 0.0);
        // Qᵀ A = R (ormqr, left, transposed).
        let mut c = a0;
        ormqr(&vv, &tt, &view(&mut c, &[4, 3]), true, true).unwrap();
        for i in 0..4 {
            for j in 0..3 {
                let want = if i <= j { a[i * 3 + j] } else { 0.0 };
                assert!((c[i * 3 + j] - want).abs() < 1e-12, "{i},{j}");
            }
        }
    }
}
