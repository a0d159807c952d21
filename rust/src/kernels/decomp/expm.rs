//! The matrix exponential (`torch.linalg.matrix_exp`): scaling and squaring
//! with the degree-13 Padé approximant (Higham, "The scaling and squaring
//! method for the matrix exponential revisited", SIAM J. Matrix Anal. Appl.
//! 26(4), 2005, Algorithm 2.3). faer has no matrix exponential; the products
//! are faer's, the solve is LU with partial pivoting (this module's `getf2`
//! and faer's triangular solves). ATen selects a Taylor polynomial by the
//! norm instead; both approximate exp(A) to the working precision, so the
//! results agree to rounding.

use super::{for_batch, getf2, square, swap_rows, Mats, Real};
use crate::kernels::{KernelError, Strided};
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve as tri;
use faer::prelude::ReborrowMut;
use faer::{Accum, Mat, Par};

/// Padé [13/13] numerator coefficients b_0..b_13 (Higham 2005, Table 10.4).
const B13: [f64; 14] = [
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
];

/// The 1-norm bound below which [13/13] needs no scaling (Higham's theta_13
/// for double precision; single precision is only more forgiving).
const THETA13: f64 = 5.371920351148152;

/// `out` (`[..., n, n]`) receives exp(A) for every matrix of `a`.
pub fn matrix_exp(a: &Strided, out: &Strided) -> Result<(), KernelError> {
    let am = Mats::of(a)?;
    let om = Mats::of(out)?;
    square(&am, "linalg.matrix_exp")?;
    if om.offs.len() != am.offs.len() || om.m != am.m || om.n != am.n || a.dtype != out.dtype {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.matrix_exp: output {:?} for input {:?}",
            out.sizes, a.sizes
        )));
    }
    by_dtype!("linalg_matrix_exp", a.dtype, expm_t(&am, &om))
}

fn mul<T: Real>(x: &Mat<T>, y: &Mat<T>) -> Mat<T> {
    let mut z = Mat::<T>::zeros(x.nrows(), y.ncols());
    matmul(
        z.as_mut(),
        Accum::Replace,
        x.as_ref(),
        y.as_ref(),
        T::one(),
        Par::Seq,
    );
    z
}

fn expm_t<T: Real>(a: &Mats, out: &Mats) -> Result<(), KernelError> {
    let n = a.n;
    if n == 0 {
        return Ok(());
    }
    let c = |v: f64| T::from(v).unwrap();
    for_batch(a.offs.len(), n, |b| {
        // SAFETY: `a` is read only; matrix b of `out` is this task's alone.
        let src = unsafe { a.get::<T>(b) };
        let mut x = Mat::<T>::from_fn(n, n, |i, j| src[(i, j)]);
        let norm = (0..n)
            .map(|j| {
                (0..n)
                    .map(|i| x[(i, j)].abs())
                    .fold(T::zero(), |s, v| s + v)
            })
            .fold(T::zero(), |m, v| if v > m || v.is_nan() { v } else { m });
        // Squarings: 2^-s A has a 1-norm <= theta_13. A non-finite norm
        // gives a non-finite result through the approximant itself.
        let s = if norm.is_finite() && norm.to_f64().unwrap() > THETA13 {
            (norm.to_f64().unwrap() / THETA13).log2().ceil() as i32
        } else {
            0
        };
        if s > 0 {
            let f = c(0.5f64.powi(s));
            for j in 0..n {
                for i in 0..n {
                    x[(i, j)] *= f;
                }
            }
        }
        let a2 = mul(&x, &x);
        let a4 = mul(&a2, &a2);
        let a6 = mul(&a4, &a2);
        let lin = |w6: f64, w4: f64, w2: f64, w0: f64| {
            Mat::<T>::from_fn(n, n, |i, j| {
                let id = if i == j { c(w0) } else { T::zero() };
                c(w6) * a6[(i, j)] + c(w4) * a4[(i, j)] + c(w2) * a2[(i, j)] + id
            })
        };
        // U = A [A6 (b13 A6 + b11 A4 + b9 A2) + b7 A6 + b5 A4 + b3 A2 + b1 I]
        let inner_u = mul(&a6, &lin(B13[13], B13[11], B13[9], 0.0));
        let u = mul(&x, &(inner_u + lin(B13[7], B13[5], B13[3], B13[1])));
        // V = A6 (b12 A6 + b10 A4 + b8 A2) + b6 A6 + b4 A4 + b2 A2 + b0 I
        let v = mul(&a6, &lin(B13[12], B13[10], B13[8], 0.0)) + lin(B13[6], B13[4], B13[2], B13[0]);
        // (V - U) X = (V + U)
        let mut q = &v - &u;
        let mut r = &v + &u;
        let piv = getf2(q.as_mut());
        for (i, &p) in piv.iter().enumerate() {
            swap_rows(&mut r.as_mut(), i, p);
        }
        tri::solve_unit_lower_triangular_in_place(q.as_ref(), r.as_mut().rb_mut(), Par::Seq);
        tri::solve_upper_triangular_in_place(q.as_ref(), r.as_mut().rb_mut(), Par::Seq);
        for _ in 0..s {
            r = mul(&r, &r);
        }
        let mut dst = unsafe { out.get_mut::<T>(b) };
        for j in 0..n {
            for i in 0..n {
                dst[(i, j)] = r[(i, j)];
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
    fn exp_of_rotation_generator_and_diagonal() {
        // exp([[0, -t], [t, 0]]) is the rotation by t; a large t exercises
        // the squarings.
        for t in [0.5f64, 3.0, 40.0] {
            let mut a = [0.0, -t, t, 0.0];
            let mut e = [0.0; 4];
            matrix_exp(&view(&mut a, &[2, 2]), &view(&mut e, &[2, 2])).unwrap();
            let want = [t.cos(), -t.sin(), t.sin(), t.cos()];
            for k in 0..4 {
                assert!(
                    (e[k] - want[k]).abs() < 1e-12 * 40.0,
                    "t={t}: {e:?} vs {want:?}"
                );
            }
        }
        let mut d = [1.0, 0.0, 0.0, -2.0];
        let mut e = [0.0; 4];
        matrix_exp(&view(&mut d, &[2, 2]), &view(&mut e, &[2, 2])).unwrap();
        assert!((e[0] - 1f64.exp()).abs() < 1e-14 && (e[3] - (-2f64).exp()).abs() < 1e-15);
        assert!(e[1] == 0.0 && e[2] == 0.0);
    }
}
