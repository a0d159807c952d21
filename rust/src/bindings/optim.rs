//! Fused optimizer steps and AMP gradient scaling (rust/src/kernels/optim.rs).
//! The Python kernels' path (strided state, made contiguous in Python; the
//! native path's C++ kernels call rust/src/native.rs instead): the lists of
//! tensors cross once, and the GIL is released for the whole update.

use super::{kernel_err, strided, TensorDesc};
use crate::kernels::optim::{self, Adagrad, Adam, Sgd};
use crate::kernels::Strided;
use pyo3::prelude::*;

fn views(descs: Vec<TensorDesc>) -> PyResult<Vec<Strided>> {
    descs.into_iter().map(strided).collect()
}

/// `_fused_adam_` / `_fused_adamw_` over lists of parameters (torch CPU's
/// rules: `max_exp_avg_sqs` is empty unless amsgrad).
#[pyfunction]
#[pyo3(signature = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled, grad_scale))]
#[allow(clippy::too_many_arguments)]
fn fused_adam(
    py: Python<'_>,
    params: Vec<TensorDesc>,
    grads: Vec<TensorDesc>,
    exp_avgs: Vec<TensorDesc>,
    exp_avg_sqs: Vec<TensorDesc>,
    max_exp_avg_sqs: Vec<TensorDesc>,
    steps: Vec<TensorDesc>,
    lr: f64,
    beta1: f64,
    beta2: f64,
    weight_decay: f64,
    eps: f64,
    amsgrad: bool,
    maximize: bool,
    decoupled: bool,
    grad_scale: Option<TensorDesc>,
) -> PyResult<()> {
    let (p, g, m, v, mx, s) = (
        views(params)?,
        views(grads)?,
        views(exp_avgs)?,
        views(exp_avg_sqs)?,
        views(max_exp_avg_sqs)?,
        views(steps)?,
    );
    let scale = grad_scale.map(strided).transpose()?;
    let cfg = Adam {
        lr,
        beta1,
        beta2,
        weight_decay,
        eps,
        amsgrad,
        maximize,
        decoupled,
    };
    py.detach(|| optim::adam_step(&p, &g, &m, &v, &mx, &s, &cfg, scale.as_ref()))
        .map_err(kernel_err)
}

/// `_fused_sgd_` over lists of parameters (`momentum_buffers` is empty when
/// momentum is 0).
#[pyfunction]
#[pyo3(signature = (params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov, maximize, first_step, grad_scale))]
#[allow(clippy::too_many_arguments)]
fn fused_sgd(
    py: Python<'_>,
    params: Vec<TensorDesc>,
    grads: Vec<TensorDesc>,
    momentum_buffers: Vec<TensorDesc>,
    weight_decay: f64,
    momentum: f64,
    lr: f64,
    dampening: f64,
    nesterov: bool,
    maximize: bool,
    first_step: bool,
    grad_scale: Option<TensorDesc>,
) -> PyResult<()> {
    let (p, g, b) = (views(params)?, views(grads)?, views(momentum_buffers)?);
    let scale = grad_scale.map(strided).transpose()?;
    let cfg = Sgd {
        lr,
        weight_decay,
        momentum,
        dampening,
        nesterov,
        maximize,
        first_step,
    };
    py.detach(|| optim::sgd_step(&p, &g, &b, &cfg, scale.as_ref()))
        .map_err(kernel_err)
}

/// `_fused_adagrad_` over lists of parameters.
#[pyfunction]
#[pyo3(signature = (params, grads, state_sums, steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale))]
#[allow(clippy::too_many_arguments)]
fn fused_adagrad(
    py: Python<'_>,
    params: Vec<TensorDesc>,
    grads: Vec<TensorDesc>,
    state_sums: Vec<TensorDesc>,
    steps: Vec<TensorDesc>,
    lr: f64,
    lr_decay: f64,
    weight_decay: f64,
    eps: f64,
    maximize: bool,
    grad_scale: Option<TensorDesc>,
) -> PyResult<()> {
    let (p, g, ss, s) = (
        views(params)?,
        views(grads)?,
        views(state_sums)?,
        views(steps)?,
    );
    let scale = grad_scale.map(strided).transpose()?;
    let cfg = Adagrad {
        lr,
        lr_decay,
        weight_decay,
        eps,
        maximize,
    };
    py.detach(|| optim::adagrad_step(&p, &g, &ss, &s, &cfg, scale.as_ref()))
        .map_err(kernel_err)
}

/// Multiplies each contiguous gradient by `inv_scale` in place; True if any
/// held an inf or NaN.
#[pyfunction]
fn amp_unscale(py: Python<'_>, grads: Vec<TensorDesc>, inv_scale: f32) -> PyResult<bool> {
    let g = views(grads)?;
    py.detach(|| optim::unscale(&g, inv_scale))
        .map_err(kernel_err)
}

/// GradScaler's scale update on one-element tensors.
#[pyfunction]
fn amp_update_scale(
    scale: TensorDesc,
    growth_tracker: TensorDesc,
    found_inf: TensorDesc,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> PyResult<()> {
    let (s, t, f) = (
        strided(scale)?,
        strided(growth_tracker)?,
        strided(found_inf)?,
    );
    optim::update_scale(&s, &t, &f, growth_factor, backoff_factor, growth_interval)
        .map_err(kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fused_adam, m)?)?;
    m.add_function(wrap_pyfunction!(fused_sgd, m)?)?;
    m.add_function(wrap_pyfunction!(fused_adagrad, m)?)?;
    m.add_function(wrap_pyfunction!(amp_unscale, m)?)?;
    m.add_function(wrap_pyfunction!(amp_update_scale, m)?)?;
    Ok(())
}
