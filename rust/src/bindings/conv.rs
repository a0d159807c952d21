//! 2-d convolution kernels (kernels::conv): one call per op and direction.
//! Every call releases the GIL.

use super::{strided, TensorDesc};
use crate::kernels::entry::{self, ConvParams};
use pyo3::prelude::*;

type Pair = (usize, usize);

fn params(stride: Pair, padding: Pair, dilation: Pair, groups: usize) -> ConvParams {
    ConvParams {
        stride: [stride.0, stride.1],
        padding: [padding.0, padding.1],
        dilation: [dilation.0, dilation.1],
        groups,
    }
}

fn opt(d: Option<TensorDesc>) -> PyResult<Option<crate::kernels::Strided>> {
    d.map(strided).transpose()
}

/// `out = conv2d(input, weight) + bias` (contiguous NCHW, float32/float64).
#[pyfunction]
#[pyo3(signature = (out, input, weight, bias, stride, padding, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn conv2d_forward(
    py: Python<'_>,
    out: TensorDesc,
    input: TensorDesc,
    weight: TensorDesc,
    bias: Option<TensorDesc>,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: usize,
) -> PyResult<()> {
    let (o, x, w, b) = (strided(out)?, strided(input)?, strided(weight)?, opt(bias)?);
    let p = params(stride, padding, dilation, groups);
    py.detach(|| entry::conv2d_forward(&o, &x, &w, b.as_ref(), &p))
        .map_err(super::kernel_err)
}

/// Gradients of `grad_output = conv2d(input, weight)` into `grad_input`,
/// `grad_weight` (needs `input`) and `grad_bias`, each when given.
/// `input_hw` is the input's spatial size (the input may be absent).
#[pyfunction]
#[pyo3(signature = (grad_output, input, weight, grad_input, grad_weight, grad_bias, input_size, stride, padding, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn conv2d_backward(
    py: Python<'_>,
    grad_output: TensorDesc,
    input: Option<TensorDesc>,
    weight: TensorDesc,
    grad_input: Option<TensorDesc>,
    grad_weight: Option<TensorDesc>,
    grad_bias: Option<TensorDesc>,
    input_size: Vec<usize>,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    groups: usize,
) -> PyResult<()> {
    let (go, x, w) = (strided(grad_output)?, opt(input)?, strided(weight)?);
    let (gi, gw, gb) = (opt(grad_input)?, opt(grad_weight)?, opt(grad_bias)?);
    let p = params(stride, padding, dilation, groups);
    py.detach(|| {
        entry::conv2d_backward(
            &go,
            x.as_ref(),
            &w,
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &input_size,
            &p,
        )
    })
    .map_err(super::kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv2d_forward, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d_backward, m)?)?;
    Ok(())
}
