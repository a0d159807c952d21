//! Matrix products, reductions, scans, softmax and losses. Every call
//! releases the GIL. An output that overlaps an input (or that a kernel needs
//! contiguous and is not) is computed into a scratch buffer and copied back.

use super::{kernel_err, strided, TensorDesc};
use crate::dtype::DType;
use crate::kernels::linalg::{self, Coef};
use crate::kernels::reduce::{self as red, ReduceOp};
use crate::kernels::{entry, with_out, KernelError, Strided};
use pyo3::prelude::*;

/// Kernel errors map in one place (bindings/mod.rs); losses and gathers
/// report invalid arguments (targets, indices) as IndexError.
fn py_err(e: KernelError, index_errors: bool) -> PyErr {
    if index_errors {
        super::kernel_index_err(e)
    } else {
        kernel_err(e)
    }
}

fn coef(v: &Bound<'_, PyAny>) -> PyResult<Coef> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(Coef::int(b as i64));
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(Coef::int(i));
    }
    Ok(Coef::float(v.extract::<f64>()?))
}

fn opt(d: Option<TensorDesc>) -> PyResult<Option<Strided>> {
    d.map(strided).transpose()
}

/// `out = beta * input + alpha * (mat1 @ mat2)` (2-d; `input` optional).
#[pyfunction]
#[pyo3(signature = (out, input, mat1, mat2, beta, alpha))]
fn addmm(
    py: Python<'_>,
    out: TensorDesc,
    input: Option<TensorDesc>,
    mat1: TensorDesc,
    mat2: TensorDesc,
    beta: &Bound<'_, PyAny>,
    alpha: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (o, i, a, b) = (strided(out)?, opt(input)?, strided(mat1)?, strided(mat2)?);
    let (beta, alpha) = (coef(beta)?, coef(alpha)?);
    py.detach(|| entry::addmm(&o, i.as_ref(), &a, &b, beta, alpha, false))
        .map_err(|e| py_err(e, false))
}

/// Batched: `out = beta * input + alpha * (batch1 @ batch2)`.
#[pyfunction]
#[pyo3(signature = (out, input, batch1, batch2, beta, alpha))]
fn baddbmm(
    py: Python<'_>,
    out: TensorDesc,
    input: Option<TensorDesc>,
    batch1: TensorDesc,
    batch2: TensorDesc,
    beta: &Bound<'_, PyAny>,
    alpha: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (o, i, a, b) = (
        strided(out)?,
        opt(input)?,
        strided(batch1)?,
        strided(batch2)?,
    );
    let (beta, alpha) = (coef(beta)?, coef(alpha)?);
    py.detach(|| entry::addmm(&o, i.as_ref(), &a, &b, beta, alpha, true))
        .map_err(|e| py_err(e, false))
}

/// `out = beta * input + alpha * Σ_b batch1[b] @ batch2[b]`.
#[pyfunction]
#[pyo3(signature = (out, input, batch1, batch2, beta, alpha))]
fn addbmm(
    py: Python<'_>,
    out: TensorDesc,
    input: Option<TensorDesc>,
    batch1: TensorDesc,
    batch2: TensorDesc,
    beta: &Bound<'_, PyAny>,
    alpha: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (o, i, a, b) = (
        strided(out)?,
        opt(input)?,
        strided(batch1)?,
        strided(batch2)?,
    );
    let (beta, alpha) = (coef(beta)?, coef(alpha)?);
    py.detach(|| {
        with_out(&o, &[Some(&a), Some(&b)], false, true, |o| {
            linalg::addbmm(o, i.as_ref(), &a, &b, beta, alpha)
        })
    })
    .map_err(|e| py_err(e, false))
}

/// `out = beta * input + alpha * (mat @ vec)`.
#[pyfunction]
#[pyo3(signature = (out, input, mat, vec, beta, alpha))]
fn addmv(
    py: Python<'_>,
    out: TensorDesc,
    input: Option<TensorDesc>,
    mat: TensorDesc,
    vec: TensorDesc,
    beta: &Bound<'_, PyAny>,
    alpha: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (o, i, a, v) = (strided(out)?, opt(input)?, strided(mat)?, strided(vec)?);
    let (beta, alpha) = (coef(beta)?, coef(alpha)?);
    py.detach(|| {
        with_out(&o, &[Some(&a), Some(&v)], false, true, |o| {
            linalg::addmv(o, i.as_ref(), &a, &v, beta, alpha)
        })
    })
    .map_err(|e| py_err(e, false))
}

/// 0-d `out = a · b`.
#[pyfunction]
fn dot(py: Python<'_>, out: TensorDesc, a: TensorDesc, b: TensorDesc) -> PyResult<()> {
    let (o, a, b) = (strided(out)?, strided(a)?, strided(b)?);
    py.detach(|| linalg::dot(&o, &a, &b))
        .map_err(|e| py_err(e, false))
}

fn reduce_op(name: &str, correction: f64, ord: f64) -> PyResult<ReduceOp> {
    ReduceOp::by_name(name, correction, ord).ok_or_else(|| {
        kernel_err(KernelError::InvalidValue(format!(
            "foo: unknown reduction {name:?}"
        )))
    })
}

/// Reduction `op` of `inp` over `dims` (sorted, distinct, in range; empty
/// with numel > 0 means none) into `out` (keepdim or not) and `out2`
/// (indices of max_dim/min_dim, or the mean of var/std).
#[pyfunction]
#[pyo3(signature = (op, out, out2, inp, dims, correction=1.0, ord=2.0))]
#[allow(clippy::too_many_arguments)]
fn reduce(
    py: Python<'_>,
    op: &str,
    out: TensorDesc,
    out2: Option<TensorDesc>,
    inp: TensorDesc,
    dims: Vec<usize>,
    correction: f64,
    ord: f64,
) -> PyResult<()> {
    let op = reduce_op(op, correction, ord)?;
    let (i, o, o2) = (strided(inp)?, strided(out)?, opt(out2)?);
    py.detach(|| entry::reduce(op, o, o2, &i, &dims))
        .map_err(|e| py_err(e, false))
}

/// Cumulative sum (or product) along `dim`.
#[pyfunction]
fn scan(py: Python<'_>, prod: bool, out: TensorDesc, inp: TensorDesc, dim: usize) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| entry::scan(prod, &o, &i, dim))
        .map_err(|e| py_err(e, false))
}

/// The first `k` elements of every line of `inp` along `dim`, in order
/// (`k` = the line's length: a stable sort), into `values` and their
/// positions into `indices` (int64). Outputs that overlap `inp` are
/// computed into scratch buffers first.
#[pyfunction]
fn sort(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    dim: usize,
    k: usize,
    descending: bool,
) -> PyResult<()> {
    let (v, x, i) = (strided(values)?, strided(indices)?, strided(inp)?);
    py.detach(|| entry::sort(&v, &x, &i, dim, k, descending))
        .map_err(|e| py_err(e, false))
}

/// `out = (log_)softmax(inp, dim)`; `inp` contiguous.
#[pyfunction]
fn softmax(
    py: Python<'_>,
    out: TensorDesc,
    inp: TensorDesc,
    dim: usize,
    log: bool,
) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| entry::softmax(&o, &i, dim, log))
        .map_err(|e| py_err(e, false))
}

/// Gradient of (log_)softmax; `grad` and `output` contiguous.
#[pyfunction]
fn softmax_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad: TensorDesc,
    output: TensorDesc,
    dim: usize,
    log: bool,
) -> PyResult<()> {
    let (gi, g, y) = (strided(grad_input)?, strided(grad)?, strided(output)?);
    py.detach(|| entry::softmax_backward(&gi, &g, &y, dim, log))
        .map_err(|e| py_err(e, false))
}

/// NLL loss forward (1-d/2-d input `[N, C]` or N-d `[N, C, S...]`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nll_loss_forward(
    py: Python<'_>,
    out: TensorDesc,
    total_weight: TensorDesc,
    inp: TensorDesc,
    target: TensorDesc,
    weight: Option<TensorDesc>,
    reduction: i64,
    ignore_index: i64,
) -> PyResult<()> {
    let (o, tw, i, t, w) = (
        strided(out)?,
        strided(total_weight)?,
        strided(inp)?,
        strided(target)?,
        opt(weight)?,
    );
    py.detach(|| entry::nll_loss_forward(&o, &tw, &i, &t, w.as_ref(), reduction, ignore_index))
        .map_err(|e| py_err(e, true))
}

/// NLL loss backward into a contiguous `grad_input`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nll_loss_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad: TensorDesc,
    target: TensorDesc,
    weight: Option<TensorDesc>,
    reduction: i64,
    ignore_index: i64,
    total_weight: TensorDesc,
) -> PyResult<()> {
    let (gi, g, t, w, tw) = (
        strided(grad_input)?,
        strided(grad)?,
        strided(target)?,
        opt(weight)?,
        strided(total_weight)?,
    );
    py.detach(|| entry::nll_loss_backward(&gi, &g, &t, w.as_ref(), reduction, ignore_index, &tw))
        .map_err(|e| py_err(e, true))
}

/// MSE loss over the broadcast `shape` of `a` and `b`.
#[pyfunction]
fn mse_loss(
    py: Python<'_>,
    out: TensorDesc,
    a: TensorDesc,
    b: TensorDesc,
    shape: Vec<usize>,
    reduction: i64,
) -> PyResult<()> {
    let (o, a, b) = (strided(out)?, strided(a)?, strided(b)?);
    py.detach(|| entry::mse_loss(&o, &a, &b, &shape, reduction))
        .map_err(|e| py_err(e, false))
}

/// MSE loss backward over `grad_input`'s shape.
#[pyfunction]
fn mse_loss_backward(
    py: Python<'_>,
    grad_input: TensorDesc,
    grad: TensorDesc,
    a: TensorDesc,
    b: TensorDesc,
    reduction: i64,
) -> PyResult<()> {
    let (gi, g, a, b) = (
        strided(grad_input)?,
        strided(grad)?,
        strided(a)?,
        strided(b)?,
    );
    py.detach(|| entry::mse_loss_backward(&gi, &g, &a, &b, reduction))
        .map_err(|e| py_err(e, false))
}

/// Dense embedding gradient: contiguous `grad` `[n, d]`, `indices` `[n]`.
#[pyfunction]
fn embedding_dense_backward(
    py: Python<'_>,
    out: TensorDesc,
    grad: TensorDesc,
    indices: TensorDesc,
    padding_idx: i64,
    scale_grad_by_freq: bool,
) -> PyResult<()> {
    let (o, g, i) = (strided(out)?, strided(grad)?, strided(indices)?);
    py.detach(|| entry::embedding_dense_backward(&o, &g, &i, padding_idx, scale_grad_by_freq))
        .map_err(|e| py_err(e, true))
}

/// The output dtype code of reduction `op` for an input dtype code.
#[pyfunction]
fn reduce_result_dtype(op: &str, dtype: u8) -> PyResult<u8> {
    let d = DType::from_code(dtype)
        .ok_or_else(|| kernel_err(KernelError::InvalidValue("foo: unknown dtype code".into())))?;
    Ok(red::result_dtype(reduce_op(op, 1.0, 2.0)?, d) as u8)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(addmm, m)?)?;
    m.add_function(wrap_pyfunction!(baddbmm, m)?)?;
    m.add_function(wrap_pyfunction!(addbmm, m)?)?;
    m.add_function(wrap_pyfunction!(addmv, m)?)?;
    m.add_function(wrap_pyfunction!(dot, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(softmax_backward, m)?)?;
    m.add_function(wrap_pyfunction!(nll_loss_forward, m)?)?;
    m.add_function(wrap_pyfunction!(nll_loss_backward, m)?)?;
    m.add_function(wrap_pyfunction!(mse_loss, m)?)?;
    m.add_function(wrap_pyfunction!(mse_loss_backward, m)?)?;
    m.add_function(wrap_pyfunction!(embedding_dense_backward, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_result_dtype, m)?)?;
    Ok(())
}
