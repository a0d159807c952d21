//! Copy, fill, scalar read and random kernels. Every call releases the GIL.

use super::{device_index, strided, strided_host_or_foo, KernelErr, TensorDesc};
use crate::kernels::random::Distribution;
use crate::kernels::{copy, entry, Strided};
use pyo3::prelude::*;
use pyo3::types::PyComplex;
use pyo3::IntoPyObjectExt;

/// Copies `src` (broadcast) into `dst`, converting dtype; with `conj`,
/// writes the complex conjugate, with `neg` the negation (a source whose
/// conj or neg bit differs from `dst`'s).
#[pyfunction]
#[pyo3(signature = (dst, src, conj = false, neg = false))]
fn copy_(py: Python<'_>, dst: TensorDesc, src: TensorDesc, conj: bool, neg: bool) -> PyResult<()> {
    // Either side may be a CPU tensor (copies between the host and foo).
    let (d, s) = (strided_host_or_foo(dst)?, strided_host_or_foo(src)?);
    py.detach(|| {
        copy::copy(&d, &s)?;
        if neg {
            copy::negate_in_place(&d.as_real())?;
        }
        if conj {
            copy::conj_in_place(&d)?;
        }
        Ok::<(), crate::kernels::KernelError>(())
    })
    .map_err(KernelErr::from)?;
    Ok(())
}

/// Sets every element of `dst` to `value` (bool, int, float or, for a
/// complex `dst`, complex).
#[pyfunction]
fn fill_(py: Python<'_>, dst: TensorDesc, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let d = strided(dst)?;
    if let Ok(c) = value.cast::<PyComplex>() {
        let (re, im) = (c.real(), c.imag());
        py.detach(|| copy::fill_complex(&d, re, im))
            .map_err(KernelErr::from)?;
        return Ok(());
    }
    let (f, i, is_int) = if let Ok(b) = value.extract::<bool>() {
        (b as u8 as f64, b as i64, true)
    } else if let Ok(i) = value.extract::<i64>() {
        (i as f64, i, true)
    } else {
        let f: f64 = value.extract()?;
        (f, f as i64, false)
    };
    py.detach(|| copy::fill(&d, f, i, is_int))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// Element 0 of `src` as a Python bool, int or float (`.item()`).
#[pyfunction]
fn local_scalar(py: Python<'_>, src: TensorDesc) -> PyResult<Py<PyAny>> {
    let s: Strided = strided(src)?;
    if s.dtype.is_complex() {
        let (re, im) = copy::read_complex(&s);
        return PyComplex::from_doubles(py, re, im).into_py_any(py);
    }
    match copy::read_number(&s) {
        copy::Number::Bool(b) => b.into_py_any(py),
        copy::Number::Float(f) => f.into_py_any(py),
        copy::Number::Int(i) => i.into_py_any(py),
    }
}

fn random(
    py: Python<'_>,
    dst: TensorDesc,
    dist: Distribution,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    let d = strided(dst)?;
    // The device matters only to a draw from its default generator.
    let device = match state {
        Some(_) => 0,
        None => device_index(device)?,
    };
    Ok(py
        .detach(|| entry::random(&d, dist, state, device))
        .map_err(KernelErr::from)?)
}

/// Fills `dst` with N(mean, std). With `state=(seed, offset)` draws from
/// that stream; otherwise from `device`'s default generator. Returns the
/// number of Philox blocks used (the caller advances an explicit generator).
#[pyfunction]
#[pyo3(signature = (dst, mean, std, device=None, state=None))]
fn normal_(
    py: Python<'_>,
    dst: TensorDesc,
    mean: f64,
    std: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(py, dst, Distribution::Normal { mean, std }, device, state)
}

/// Fills `dst` with U[from, to). See `normal_` for `device` and `state`.
#[pyfunction]
#[pyo3(signature = (dst, low, high, device=None, state=None))]
fn uniform_(
    py: Python<'_>,
    dst: TensorDesc,
    low: f64,
    high: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(
        py,
        dst,
        Distribution::Uniform {
            from: low,
            to: high,
        },
        device,
        state,
    )
}

/// Fills `dst` with exp(N(mean, std)). See `normal_` for `device` and `state`.
#[pyfunction]
#[pyo3(signature = (dst, mean, std, device=None, state=None))]
fn log_normal_(
    py: Python<'_>,
    dst: TensorDesc,
    mean: f64,
    std: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(
        py,
        dst,
        Distribution::LogNormal { mean, std },
        device,
        state,
    )
}

/// Fills `dst` with Exp(lambd). See `normal_` for `device` and `state`.
#[pyfunction]
#[pyo3(signature = (dst, lambd, device=None, state=None))]
fn exponential_(
    py: Python<'_>,
    dst: TensorDesc,
    lambd: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(
        py,
        dst,
        Distribution::Exponential { lambda: lambd },
        device,
        state,
    )
}

/// Fills `dst` with Cauchy(median, sigma). See `normal_` for `device` and `state`.
#[pyfunction]
#[pyo3(signature = (dst, median, sigma, device=None, state=None))]
fn cauchy_(
    py: Python<'_>,
    dst: TensorDesc,
    median: f64,
    sigma: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(
        py,
        dst,
        Distribution::Cauchy { median, sigma },
        device,
        state,
    )
}

/// Fills `dst` (floating or integer) with Geometric(p) trial counts. See
/// `normal_` for `device` and `state`.
#[pyfunction]
#[pyo3(signature = (dst, p, device=None, state=None))]
fn geometric_(
    py: Python<'_>,
    dst: TensorDesc,
    p: f64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(py, dst, Distribution::Geometric { p }, device, state)
}

/// Fills `dst` (any dtype) with `from + bits % range` (`range == 0`: every
/// int64), as `random_` after ATen's range rules. See `normal_` for `device`
/// and `state`.
#[pyfunction]
#[pyo3(signature = (dst, from, range, device=None, state=None))]
fn random_(
    py: Python<'_>,
    dst: TensorDesc,
    from: i64,
    range: u64,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    random(
        py,
        dst,
        Distribution::Integers { from, range },
        device,
        state,
    )
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_, m)?)?;
    m.add_function(wrap_pyfunction!(fill_, m)?)?;
    m.add_function(wrap_pyfunction!(local_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(normal_, m)?)?;
    m.add_function(wrap_pyfunction!(uniform_, m)?)?;
    m.add_function(wrap_pyfunction!(log_normal_, m)?)?;
    m.add_function(wrap_pyfunction!(exponential_, m)?)?;
    m.add_function(wrap_pyfunction!(cauchy_, m)?)?;
    m.add_function(wrap_pyfunction!(geometric_, m)?)?;
    m.add_function(wrap_pyfunction!(random_, m)?)?;
    Ok(())
}
