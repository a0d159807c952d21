//! foo's fused kernels (`torch.ops.foo.*`, python/foo_rs/ops.py): RMSNorm
//! forward and backward, linear + activation. Every call releases the GIL;
//! outputs are fresh tensors the Python layer allocated.

use super::kernel_err as py_err;
use super::{strided, TensorDesc};
use crate::kernels::{fused, Strided};
use pyo3::prelude::*;

fn opt(d: Option<TensorDesc>) -> PyResult<Option<Strided>> {
    d.map(strided).transpose()
}

/// RMSNorm of the contiguous `[m, n]` input into `out`; `rstd` (float32, or
/// float64 for float64 inputs; `m` elements) receives the row statistic.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (out, rstd, x, weight, m, n, eps))]
fn rms_norm(
    py: Python<'_>,
    out: TensorDesc,
    rstd: Option<TensorDesc>,
    x: TensorDesc,
    weight: Option<TensorDesc>,
    m: usize,
    n: usize,
    eps: f64,
) -> PyResult<()> {
    let (o, r, x, w) = (strided(out)?, opt(rstd)?, strided(x)?, opt(weight)?);
    py.detach(|| fused::rms_norm(&o, r.as_ref(), &x, w.as_ref(), m, n, eps))
        .map_err(py_err)
}

/// Gradients of [`rms_norm`]: `grad_input` and `grad_weight`, each when given.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (grad_input, grad_weight, dy, x, weight, m, n, eps))]
fn rms_norm_backward(
    py: Python<'_>,
    grad_input: Option<TensorDesc>,
    grad_weight: Option<TensorDesc>,
    dy: TensorDesc,
    x: TensorDesc,
    weight: Option<TensorDesc>,
    m: usize,
    n: usize,
    eps: f64,
) -> PyResult<()> {
    let (gi, gw) = (opt(grad_input)?, opt(grad_weight)?);
    let (dy, x, w) = (strided(dy)?, strided(x)?, opt(weight)?);
    py.detach(|| fused::rms_norm_backward(gi.as_ref(), gw.as_ref(), &dy, &x, w.as_ref(), m, n, eps))
        .map_err(py_err)
}

/// `out = act(x @ w^T + b)`, tile by tile (`act`: none, relu, gelu,
/// gelu_tanh, silu).
#[pyfunction]
#[pyo3(signature = (out, x, w, b, act))]
fn linear_act(
    py: Python<'_>,
    out: TensorDesc,
    x: TensorDesc,
    w: TensorDesc,
    b: Option<TensorDesc>,
    act: &str,
) -> PyResult<()> {
    let act = fused::Act::parse(act).map_err(py_err)?;
    let (o, x, w, b) = (strided(out)?, strided(x)?, strided(w)?, opt(b)?);
    py.detach(|| fused::linear_act(&o, &x, &w, b.as_ref(), act))
        .map_err(py_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(linear_act, m)?)?;
    Ok(())
}
