//! Normalization, pooling and dropout kernels. Every call releases the GIL.
//! Outputs are fresh tensors the Python layer allocated (no aliasing with
//! the inputs).

use super::{device_index, stream, strided, TensorDesc};
use crate::kernels::pool::Window;
use crate::kernels::{dropout as drop, entry, norm, pool, Strided};
use pyo3::prelude::*;

use super::kernel_err as py_err;

fn opt(d: Option<TensorDesc>) -> PyResult<Option<Strided>> {
    d.map(strided).transpose()
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn layer_norm(
    py: Python<'_>,
    out: TensorDesc,
    mean: TensorDesc,
    rstd: TensorDesc,
    x: TensorDesc,
    weight: Option<TensorDesc>,
    bias: Option<TensorDesc>,
    m: usize,
    n: usize,
    eps: f64,
) -> PyResult<()> {
    let (o, mu, r, x, w, b) = (
        strided(out)?,
        strided(mean)?,
        strided(rstd)?,
        strided(x)?,
        opt(weight)?,
        opt(bias)?,
    );
    py.detach(|| norm::layer_norm(&o, &mu, &r, &x, w.as_ref(), b.as_ref(), m, n, eps))
        .map_err(py_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn layer_norm_backward(
    py: Python<'_>,
    grad_input: Option<TensorDesc>,
    grad_weight: Option<TensorDesc>,
    grad_bias: Option<TensorDesc>,
    dy: TensorDesc,
    x: TensorDesc,
    mean: TensorDesc,
    rstd: TensorDesc,
    weight: Option<TensorDesc>,
    m: usize,
    n: usize,
) -> PyResult<()> {
    let (gi, gw, gb) = (opt(grad_input)?, opt(grad_weight)?, opt(grad_bias)?);
    let (dy, x, mu, r, w) = (
        strided(dy)?,
        strided(x)?,
        strided(mean)?,
        strided(rstd)?,
        opt(weight)?,
    );
    py.detach(|| {
        norm::layer_norm_backward(
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &dy,
            &x,
            &mu,
            &r,
            w.as_ref(),
            m,
            n,
        )
    })
    .map_err(py_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn batch_norm(
    py: Python<'_>,
    out: TensorDesc,
    save_mean: Option<TensorDesc>,
    save_invstd: Option<TensorDesc>,
    x: TensorDesc,
    weight: Option<TensorDesc>,
    bias: Option<TensorDesc>,
    running_mean: Option<TensorDesc>,
    running_var: Option<TensorDesc>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> PyResult<()> {
    let (o, sm, si, x) = (
        strided(out)?,
        opt(save_mean)?,
        opt(save_invstd)?,
        strided(x)?,
    );
    let (w, b, rm, rv) = (
        opt(weight)?,
        opt(bias)?,
        opt(running_mean)?,
        opt(running_var)?,
    );
    py.detach(|| {
        norm::batch_norm(
            &o,
            sm.as_ref(),
            si.as_ref(),
            &x,
            w.as_ref(),
            b.as_ref(),
            rm.as_ref(),
            rv.as_ref(),
            training,
            momentum,
            eps,
        )
    })
    .map_err(py_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn batch_norm_backward(
    py: Python<'_>,
    grad_input: Option<TensorDesc>,
    grad_weight: Option<TensorDesc>,
    grad_bias: Option<TensorDesc>,
    dy: TensorDesc,
    x: TensorDesc,
    weight: Option<TensorDesc>,
    running_mean: Option<TensorDesc>,
    running_var: Option<TensorDesc>,
    save_mean: Option<TensorDesc>,
    save_invstd: Option<TensorDesc>,
    train: bool,
    eps: f64,
) -> PyResult<()> {
    let (gi, gw, gb) = (opt(grad_input)?, opt(grad_weight)?, opt(grad_bias)?);
    let (dy, x, w) = (strided(dy)?, strided(x)?, opt(weight)?);
    let (rm, rv, sm, si) = (
        opt(running_mean)?,
        opt(running_var)?,
        opt(save_mean)?,
        opt(save_invstd)?,
    );
    py.detach(|| {
        norm::batch_norm_backward(
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &dy,
            &x,
            w.as_ref(),
            rm.as_ref(),
            rv.as_ref(),
            sm.as_ref(),
            si.as_ref(),
            train,
            eps,
        )
    })
    .map_err(py_err)
}

fn window(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Window {
    Window {
        kernel,
        stride,
        padding,
        dilation,
    }
}

#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn max_pool2d(
    py: Python<'_>,
    out: TensorDesc,
    indices: TensorDesc,
    x: TensorDesc,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> PyResult<()> {
    let (o, i, x) = (strided(out)?, strided(indices)?, strided(x)?);
    let win = window(kernel, stride, padding, dilation);
    py.detach(|| pool::max_pool2d(&o, &i, &x, win))
        .map_err(py_err)
}

#[pyfunction]
fn max_pool2d_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad_output: TensorDesc,
    indices: TensorDesc,
) -> PyResult<()> {
    let (gi, go, i) = (
        strided(grad_input)?,
        strided(grad_output)?,
        strided(indices)?,
    );
    py.detach(|| pool::max_pool2d_backward(&gi, &go, &i))
        .map_err(py_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn avg_pool2d(
    py: Python<'_>,
    out: TensorDesc,
    x: TensorDesc,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    count_include_pad: bool,
    divisor: Option<i64>,
) -> PyResult<()> {
    let (o, x) = (strided(out)?, strided(x)?);
    let win = window(kernel, stride, padding, [1, 1]);
    py.detach(|| pool::avg_pool2d(&o, &x, win, count_include_pad, divisor))
        .map_err(py_err)
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn avg_pool2d_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad_output: TensorDesc,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    count_include_pad: bool,
    divisor: Option<i64>,
) -> PyResult<()> {
    let (gi, go) = (strided(grad_input)?, strided(grad_output)?);
    let win = window(kernel, stride, padding, [1, 1]);
    py.detach(|| pool::avg_pool2d_backward(&gi, &go, win, count_include_pad, divisor))
        .map_err(py_err)
}

#[pyfunction]
fn adaptive_avg_pool2d(py: Python<'_>, out: TensorDesc, x: TensorDesc) -> PyResult<()> {
    let (o, x) = (strided(out)?, strided(x)?);
    py.detach(|| pool::adaptive_avg_pool2d(&o, &x))
        .map_err(py_err)
}

#[pyfunction]
fn adaptive_max_pool2d(
    py: Python<'_>,
    out: TensorDesc,
    indices: TensorDesc,
    x: TensorDesc,
) -> PyResult<()> {
    let (o, i, x) = (strided(out)?, strided(indices)?, strided(x)?);
    py.detach(|| pool::adaptive_max_pool2d(&o, &i, &x))
        .map_err(py_err)
}

#[pyfunction]
fn adaptive_avg_pool2d_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad_output: TensorDesc,
) -> PyResult<()> {
    let (gi, go) = (strided(grad_input)?, strided(grad_output)?);
    py.detach(|| pool::adaptive_avg_pool2d_backward(&gi, &go))
        .map_err(py_err)
}

/// Fills `dst` with Bernoulli(p) draws (`p_tensor` broadcast when given).
/// Returns the Philox blocks used.
#[pyfunction]
#[pyo3(signature = (dst, p, p_tensor=None, device=None, state=None))]
fn bernoulli_(
    py: Python<'_>,
    dst: TensorDesc,
    p: f64,
    p_tensor: Option<TensorDesc>,
    device: Option<i64>,
    state: Option<(u64, u64)>,
) -> PyResult<u64> {
    let (d, pt) = (strided(dst)?, opt(p_tensor)?);
    let blocks = drop::blocks_needed(d.numel());
    let (seed, offset) = stream(blocks, device, state)?;
    py.detach(|| drop::bernoulli(&d, p, pt.as_ref(), seed, offset))
        .map_err(py_err)?;
    Ok(blocks)
}

/// Dropout with keep probability `keep`; returns the Philox blocks used.
#[pyfunction]
#[pyo3(signature = (out, mask, x, keep, scale, device=None))]
fn dropout(
    py: Python<'_>,
    out: TensorDesc,
    mask: TensorDesc,
    x: TensorDesc,
    keep: f64,
    scale: f64,
    device: Option<i64>,
) -> PyResult<u64> {
    let (o, m, x) = (strided(out)?, strided(mask)?, strided(x)?);
    let device = device_index(device)?;
    py.detach(|| entry::dropout(&o, &m, &x, keep, scale, device))
        .map_err(py_err)
}

#[pyfunction]
fn dropout_backward(
    py: Python<'_>,
    out: TensorDesc,
    grad: TensorDesc,
    mask: TensorDesc,
    scale: f64,
) -> PyResult<()> {
    let (o, g, m) = (strided(out)?, strided(grad)?, strided(mask)?);
    py.detach(|| drop::dropout_backward(&o, &g, &m, scale))
        .map_err(py_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool2d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(avg_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(avg_pool2d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_avg_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_avg_pool2d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_max_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(bernoulli_, m)?)?;
    m.add_function(wrap_pyfunction!(dropout, m)?)?;
    m.add_function(wrap_pyfunction!(dropout_backward, m)?)?;
    Ok(())
}
