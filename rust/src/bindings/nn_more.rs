//! Losses, 3-d pooling, im2col / col2im and distances beyond the core nn
//! kernels (rust/src/kernels/nn.rs and its submodules). Every call releases
//! the GIL; an output that overlaps an input is computed into a scratch
//! buffer and copied back.

use super::{kernel_err, strided, TensorDesc};
use crate::kernels::conv::fold::{self, Fold};
use crate::kernels::nn::grid::{self, GridSpec};
use crate::kernels::nn::{dist, PointLoss};
use crate::kernels::pool::{self, Window3};
use crate::kernels::{entry, KernelError, Strided};
use pyo3::prelude::*;

/// A pointwise loss of `a` (input) and `b` (target) over their broadcast
/// `shape`: into `out` (reduction 0) or its mean (1) / sum (2) into 0-d `out`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn point_loss(
    py: Python<'_>,
    kind: &str,
    param: f64,
    out: TensorDesc,
    a: TensorDesc,
    b: TensorDesc,
    shape: Vec<usize>,
    reduction: i64,
) -> PyResult<()> {
    let k = PointLoss::from_name(kind, param).map_err(kernel_err)?;
    let (o, a, b) = (strided(out)?, strided(a)?, strided(b)?);
    py.detach(|| entry::point_loss(k, &o, &a, &b, &shape, reduction))
        .map_err(kernel_err)
}

/// A pointwise loss's backward over `grad_input`'s shape.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn point_loss_backward(
    py: Python<'_>,
    kind: &str,
    param: f64,
    grad_input: TensorDesc,
    grad: TensorDesc,
    a: TensorDesc,
    b: TensorDesc,
    reduction: i64,
) -> PyResult<()> {
    let k = PointLoss::from_name(kind, param).map_err(kernel_err)?;
    let (gi, g, a, b) = (
        strided(grad_input)?,
        strided(grad)?,
        strided(a)?,
        strided(b)?,
    );
    py.detach(|| entry::point_loss_backward(k, &gi, &g, &a, &b, reduction))
        .map_err(kernel_err)
}

fn fold_geometry(planes: &Strided, params: [[usize; 2]; 4]) -> PyResult<Fold> {
    if planes.sizes.len() != 4 {
        return Err(kernel_err(KernelError::InvalidValue(
            "foo: im2col/col2im take [N, C, H, W] planes".into(),
        )));
    }
    let s = &planes.sizes;
    Ok(Fold {
        n: s[0],
        c: s[1],
        h: s[2],
        w: s[3],
        kernel: params[0],
        dilation: params[1],
        padding: params[2],
        stride: params[3],
    })
}

/// `out[N, C*KH*KW, L] = im2col(x[N, C, H, W])` (contiguous).
#[pyfunction]
fn im2col(
    py: Python<'_>,
    out: TensorDesc,
    x: TensorDesc,
    kernel: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 2],
    stride: [usize; 2],
) -> PyResult<()> {
    let (o, x) = (strided(out)?, strided(x)?);
    let f = fold_geometry(&x, [kernel, dilation, padding, stride])?;
    py.detach(|| fold::im2col(&f, &o, &x)).map_err(kernel_err)
}

/// `out[N, C, H, W] = col2im(cols[N, C*KH*KW, L])` (contiguous).
#[pyfunction]
fn col2im(
    py: Python<'_>,
    out: TensorDesc,
    cols: TensorDesc,
    kernel: [usize; 2],
    dilation: [usize; 2],
    padding: [usize; 2],
    stride: [usize; 2],
) -> PyResult<()> {
    let (o, c) = (strided(out)?, strided(cols)?);
    let f = fold_geometry(&o, [kernel, dilation, padding, stride])?;
    py.detach(|| fold::col2im(&f, &o, &c)).map_err(kernel_err)
}

fn window3(
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
) -> Window3 {
    Window3 {
        kernel,
        stride,
        padding,
        dilation,
    }
}

/// 3-d max pooling of a 5-d `x` into `out` with flat per-plane `indices`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn max_pool3d(
    py: Python<'_>,
    out: TensorDesc,
    indices: TensorDesc,
    x: TensorDesc,
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
) -> PyResult<()> {
    let (o, i, x) = (strided(out)?, strided(indices)?, strided(x)?);
    let win = window3(kernel, stride, padding, dilation);
    py.detach(|| pool::max_pool3d(&o, &i, &x, win))
        .map_err(kernel_err)
}

/// Gradient of 3-d (adaptive) max pooling: scatters `grad_output` to `indices`.
#[pyfunction]
fn max_pool3d_backward(
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
    py.detach(|| pool::max_pool3d_backward(&gi, &go, &i))
        .map_err(kernel_err)
}

/// 3-d average pooling of a 5-d `x` into `out`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn avg_pool3d(
    py: Python<'_>,
    out: TensorDesc,
    x: TensorDesc,
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    count_include_pad: bool,
    divisor: Option<i64>,
) -> PyResult<()> {
    let (o, x) = (strided(out)?, strided(x)?);
    let win = window3(kernel, stride, padding, [1, 1, 1]);
    py.detach(|| pool::avg_pool3d(&o, &x, win, count_include_pad, divisor))
        .map_err(kernel_err)
}

/// Gradient of 3-d average pooling.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn avg_pool3d_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad_output: TensorDesc,
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    count_include_pad: bool,
    divisor: Option<i64>,
) -> PyResult<()> {
    let (gi, go) = (strided(grad_input)?, strided(grad_output)?);
    let win = window3(kernel, stride, padding, [1, 1, 1]);
    py.detach(|| pool::avg_pool3d_backward(&gi, &go, win, count_include_pad, divisor))
        .map_err(kernel_err)
}

/// 3-d adaptive max pooling (target sizes are `out`'s).
#[pyfunction]
fn adaptive_max_pool3d(
    py: Python<'_>,
    out: TensorDesc,
    indices: TensorDesc,
    x: TensorDesc,
) -> PyResult<()> {
    let (o, i, x) = (strided(out)?, strided(indices)?, strided(x)?);
    py.detach(|| pool::adaptive_max_pool3d(&o, &i, &x))
        .map_err(kernel_err)
}

/// `out[b, i, j] = ||x1[b, i] - x2[b, j]||_p` (contiguous `[B, P, M]`,
/// `[B, R, M]`, `[B, P, R]`).
#[pyfunction]
fn cdist(py: Python<'_>, out: TensorDesc, x1: TensorDesc, x2: TensorDesc, p: f64) -> PyResult<()> {
    let (o, a, b) = (strided(out)?, strided(x1)?, strided(x2)?);
    py.detach(|| dist::cdist(&o, &a, &b, p)).map_err(kernel_err)
}

/// Gradient of `cdist` with respect to `x1` (all contiguous).
#[pyfunction]
fn cdist_backward(
    py: Python<'_>,
    grad_x1: TensorDesc,
    grad: TensorDesc,
    x1: TensorDesc,
    x2: TensorDesc,
    cdist: TensorDesc,
    p: f64,
) -> PyResult<()> {
    let (gx, g, a, b, d) = (
        strided(grad_x1)?,
        strided(grad)?,
        strided(x1)?,
        strided(x2)?,
        strided(cdist)?,
    );
    py.detach(|| dist::cdist_backward(&gx, &g, &a, &b, &d, p))
        .map_err(kernel_err)
}

/// Distances of the row pairs `i < j` of a contiguous `[N, M]` `x`.
#[pyfunction]
fn pdist(py: Python<'_>, out: TensorDesc, x: TensorDesc, p: f64) -> PyResult<()> {
    let (o, x) = (strided(out)?, strided(x)?);
    py.detach(|| dist::pdist(&o, &x, p)).map_err(kernel_err)
}

/// Gradient of `pdist` (all contiguous).
#[pyfunction]
fn pdist_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad: TensorDesc,
    x: TensorDesc,
    pdist: TensorDesc,
    p: f64,
) -> PyResult<()> {
    let (gi, g, x, d) = (
        strided(grad_input)?,
        strided(grad)?,
        strided(x)?,
        strided(pdist)?,
    );
    py.detach(|| dist::pdist_backward(&gi, &g, &x, &d, p))
        .map_err(kernel_err)
}

/// Grid sampling (2-d or 3-d by the input's rank) of `input` at `grid`.
#[pyfunction]
fn grid_sample(
    py: Python<'_>,
    out: TensorDesc,
    input: TensorDesc,
    grid: TensorDesc,
    mode: i64,
    padding: i64,
    align_corners: bool,
) -> PyResult<()> {
    let (o, x, g) = (strided(out)?, strided(input)?, strided(grid)?);
    let spec = GridSpec {
        mode,
        padding,
        align_corners,
    };
    py.detach(|| grid::grid_sample(&o, &x, &g, spec))
        .map_err(kernel_err)
}

/// Gradients of grid sampling: `grad_input` (overwritten) and `grad_grid`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python call's arguments, one by one
fn grid_sample_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad_grid: TensorDesc,
    grad_output: TensorDesc,
    input: TensorDesc,
    grid: TensorDesc,
    mode: i64,
    padding: i64,
    align_corners: bool,
) -> PyResult<()> {
    let (gi, gg, go, x, g) = (
        strided(grad_input)?,
        strided(grad_grid)?,
        strided(grad_output)?,
        strided(input)?,
        strided(grid)?,
    );
    let spec = GridSpec {
        mode,
        padding,
        align_corners,
    };
    py.detach(|| grid::grid_sample_backward(&gi, &gg, &go, &x, &g, spec))
        .map_err(kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(point_loss, m)?)?;
    m.add_function(wrap_pyfunction!(point_loss_backward, m)?)?;
    m.add_function(wrap_pyfunction!(im2col, m)?)?;
    m.add_function(wrap_pyfunction!(col2im, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool3d, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool3d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(avg_pool3d, m)?)?;
    m.add_function(wrap_pyfunction!(avg_pool3d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_max_pool3d, m)?)?;
    m.add_function(wrap_pyfunction!(cdist, m)?)?;
    m.add_function(wrap_pyfunction!(cdist_backward, m)?)?;
    m.add_function(wrap_pyfunction!(pdist, m)?)?;
    m.add_function(wrap_pyfunction!(pdist_backward, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample_backward, m)?)?;
    Ok(())
}
