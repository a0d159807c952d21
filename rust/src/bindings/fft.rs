//! FFT kernels (`torch.fft` through `_fft_c2c` / `_fft_r2c` / `_fft_c2r`).
//! Every call releases the GIL.

use super::{strided, KernelErr, TensorDesc};
use crate::kernels::fft;
use pyo3::prelude::*;

/// `out` = the complex transform of `inp` along `dims` (forward or
/// inverse), times `scale`.
#[pyfunction]
fn fft_c2c(
    py: Python<'_>,
    out: TensorDesc,
    inp: TensorDesc,
    dims: Vec<usize>,
    forward: bool,
    scale: f64,
) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| fft::fft_c2c(&o, &i, &dims, forward, scale))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// `out` = the real-to-complex transform of `inp` along `dims` (half the
/// last dim when `onesided`), times `scale`.
#[pyfunction]
fn fft_r2c(
    py: Python<'_>,
    out: TensorDesc,
    inp: TensorDesc,
    dims: Vec<usize>,
    onesided: bool,
    scale: f64,
) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| fft::fft_r2c(&o, &i, &dims, onesided, scale))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// `out` (real, signal sizes) = the complex-to-real transform of the
/// half-spectrum `inp` along `dims`, times `scale`.
#[pyfunction]
fn fft_c2r(
    py: Python<'_>,
    out: TensorDesc,
    inp: TensorDesc,
    dims: Vec<usize>,
    scale: f64,
) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| fft::fft_c2r(&o, &i, &dims, scale))
        .map_err(KernelErr::from)?;
    Ok(())
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fft_c2c, m)?)?;
    m.add_function(wrap_pyfunction!(fft_r2c, m)?)?;
    m.add_function(wrap_pyfunction!(fft_c2r, m)?)?;
    Ok(())
}
