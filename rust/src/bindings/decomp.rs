//! Matrix decompositions (`torch.linalg` on foo): thin wrappers of
//! `kernels::decomp`, each working in place on views the Python kernel
//! prepared (python/foo_rs/_ops/decomp.py). Every call releases the GIL.

use super::{kernel_err, strided, TensorDesc};
use crate::kernels::decomp;
use pyo3::prelude::*;

/// Cholesky factorization in place in `a` (lower triangle read; upper with
/// `upper`), LAPACK's potrf code into int32 `info`.
#[pyfunction]
fn linalg_cholesky(py: Python<'_>, a: TensorDesc, info: TensorDesc, upper: bool) -> PyResult<()> {
    let (a, i) = (strided(a)?, strided(info)?);
    py.detach(|| decomp::cholesky(&a, &i, upper))
        .map_err(kernel_err)
}

/// LU factorization with partial pivoting in place in `a`; 1-based int32
/// `pivots` and `info` as LAPACK's getrf.
#[pyfunction]
fn linalg_lu_factor(
    py: Python<'_>,
    a: TensorDesc,
    pivots: TensorDesc,
    info: TensorDesc,
) -> PyResult<()> {
    let (a, p, i) = (strided(a)?, strided(pivots)?, strided(info)?);
    py.detach(|| decomp::lu_factor(&a, &p, &i))
        .map_err(kernel_err)
}

/// Solves `A X = B` (`A^T X = B` with `transpose`) in place in `b` from
/// `A`'s LU factorization and pivots.
#[pyfunction]
fn linalg_lu_solve(
    py: Python<'_>,
    lu: TensorDesc,
    pivots: TensorDesc,
    b: TensorDesc,
    transpose: bool,
) -> PyResult<()> {
    let (lu, p, b) = (strided(lu)?, strided(pivots)?, strided(b)?);
    py.detach(|| decomp::lu_solve(&lu, &p, &b, transpose))
        .map_err(kernel_err)
}

/// Solves `A X = B` in place in `b` for triangular `A`.
#[pyfunction]
fn linalg_solve_triangular(
    py: Python<'_>,
    a: TensorDesc,
    b: TensorDesc,
    upper: bool,
    unitriangular: bool,
) -> PyResult<()> {
    let (a, b) = (strided(a)?, strided(b)?);
    py.detach(|| decomp::solve_triangular(&a, &b, upper, unitriangular))
        .map_err(kernel_err)
}

/// Determinants from LU factorizations into `det`; with `logabs`, the sign
/// into `det` and log|det| into `logabs`.
#[pyfunction]
#[pyo3(signature = (lu, pivots, det, logabs=None))]
fn linalg_lu_det(
    py: Python<'_>,
    lu: TensorDesc,
    pivots: TensorDesc,
    det: TensorDesc,
    logabs: Option<TensorDesc>,
) -> PyResult<()> {
    let (lu, p, d) = (strided(lu)?, strided(pivots)?, strided(det)?);
    let l = logabs.map(strided).transpose()?;
    py.detach(|| decomp::lu_det(&lu, &p, &d, l.as_ref()))
        .map_err(kernel_err)
}

/// Unpacks LU factorizations into `p` (needs `pivots`), `l` and `u`, each
/// when given.
#[pyfunction]
#[pyo3(signature = (lu, pivots, p, l, u))]
fn lu_unpack(
    py: Python<'_>,
    lu: TensorDesc,
    pivots: Option<TensorDesc>,
    p: Option<TensorDesc>,
    l: Option<TensorDesc>,
    u: Option<TensorDesc>,
) -> PyResult<()> {
    let lu = strided(lu)?;
    let piv = pivots.map(strided).transpose()?;
    let (p, l, u) = (
        p.map(strided).transpose()?,
        l.map(strided).transpose()?,
        u.map(strided).transpose()?,
    );
    py.detach(|| decomp::lu_unpack(&lu, piv.as_ref(), p.as_ref(), l.as_ref(), u.as_ref()))
        .map_err(kernel_err)
}

/// QR factorization: `a` (a scratch copy of the input, overwritten) into
/// `r` and, when given, `q`.
#[pyfunction]
#[pyo3(signature = (a, q, r))]
fn linalg_qr(py: Python<'_>, a: TensorDesc, q: Option<TensorDesc>, r: TensorDesc) -> PyResult<()> {
    let (a, r) = (strided(a)?, strided(r)?);
    let q = q.map(strided).transpose()?;
    py.detach(|| decomp::qr(&a, q.as_ref(), &r))
        .map_err(kernel_err)
}

/// Symmetric eigen-decomposition of `a` (lower triangle read): eigenvalues
/// into `w`, eigenvectors into `v` when given, int32 `info` (1: no convergence).
#[pyfunction]
#[pyo3(signature = (a, w, v, info))]
fn linalg_eigh(
    py: Python<'_>,
    a: TensorDesc,
    w: TensorDesc,
    v: Option<TensorDesc>,
    info: TensorDesc,
) -> PyResult<()> {
    let (a, w, i) = (strided(a)?, strided(w)?, strided(info)?);
    let v = v.map(strided).transpose()?;
    py.detach(|| decomp::eigh(&a, &w, v.as_ref(), &i))
        .map_err(kernel_err)
}

/// Singular value decomposition of `a`: `s`, and `u`/`vh` when given, int32
/// `info` (1: non-finite input or no convergence).
#[pyfunction]
#[pyo3(signature = (a, s, u, vh, info))]
fn linalg_svd(
    py: Python<'_>,
    a: TensorDesc,
    s: TensorDesc,
    u: Option<TensorDesc>,
    vh: Option<TensorDesc>,
    info: TensorDesc,
) -> PyResult<()> {
    let (a, s, i) = (strided(a)?, strided(s)?, strided(info)?);
    let (u, vh) = (u.map(strided).transpose()?, vh.map(strided).transpose()?);
    py.detach(|| decomp::svd(&a, &s, u.as_ref(), vh.as_ref(), &i))
        .map_err(kernel_err)
}

/// LAPACK's geqrf in place in `a`: R on and above the diagonal, the
/// reflectors below it, their scalars into `tau`.
#[pyfunction]
fn geqrf(py: Python<'_>, a: TensorDesc, tau: TensorDesc) -> PyResult<()> {
    let (a, tau) = (strided(a)?, strided(tau)?);
    py.detach(|| decomp::geqrf(&a, &tau)).map_err(kernel_err)
}

/// LAPACK's orgqr: the first columns of Q from reflectors `v` and `tau` into
/// `out` (which may be `v`).
#[pyfunction]
fn householder_product(
    py: Python<'_>,
    v: TensorDesc,
    tau: TensorDesc,
    out: TensorDesc,
) -> PyResult<()> {
    let (v, tau, out) = (strided(v)?, strided(tau)?, strided(out)?);
    py.detach(|| decomp::householder_product(&v, &tau, &out))
        .map_err(kernel_err)
}

/// LAPACK's ormqr: `c` overwritten by op(Q) C (`left`) or C op(Q), op(Q) =
/// Qᵀ with `transpose`.
#[pyfunction]
fn ormqr(
    py: Python<'_>,
    v: TensorDesc,
    tau: TensorDesc,
    c: TensorDesc,
    left: bool,
    transpose: bool,
) -> PyResult<()> {
    let (v, tau, c) = (strided(v)?, strided(tau)?, strided(c)?);
    py.detach(|| decomp::ormqr(&v, &tau, &c, left, transpose))
        .map_err(kernel_err)
}

/// exp(A) of every matrix of `a` into `out`.
#[pyfunction]
fn linalg_matrix_exp(py: Python<'_>, a: TensorDesc, out: TensorDesc) -> PyResult<()> {
    let (a, out) = (strided(a)?, strided(out)?);
    py.detach(|| decomp::matrix_exp(&a, &out))
        .map_err(kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(linalg_cholesky, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_lu_factor, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_lu_solve, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_solve_triangular, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_lu_det, m)?)?;
    m.add_function(wrap_pyfunction!(lu_unpack, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_qr, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_eigh, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_svd, m)?)?;
    m.add_function(wrap_pyfunction!(geqrf, m)?)?;
    m.add_function(wrap_pyfunction!(householder_product, m)?)?;
    m.add_function(wrap_pyfunction!(ormqr, m)?)?;
    m.add_function(wrap_pyfunction!(linalg_matrix_exp, m)?)?;
    Ok(())
}
