//! Fused scaled dot-product attention (`foo_rs._C.sdpa_*`). Every call
//! releases the GIL; outputs are tensors the Python layer allocated.

use super::kernel_err as py_err;
use super::{device_index, strided, TensorDesc};
use crate::kernels::attention::{self as attn, Grads};
use crate::kernels::attention::{Dropout, Sdpa};
use crate::kernels::entry;
use crate::kernels::Strided;
use pyo3::prelude::*;

fn opt(d: Option<TensorDesc>) -> PyResult<Option<Strided>> {
    d.map(strided).transpose()
}

/// Forward of attention over 4-d views: writes `out` and `lse` (float32
/// log-sum-exp per query row). With `dropout_p > 0` draws from `device`'s
/// default generator and returns the (seed, offset) the backward needs.
#[pyfunction]
#[pyo3(signature = (out, lse, q, k, v, bias, causal, scale, dropout_p, device=None))]
#[allow(clippy::too_many_arguments)]
fn sdpa_forward(
    py: Python<'_>,
    out: TensorDesc,
    lse: TensorDesc,
    q: TensorDesc,
    k: TensorDesc,
    v: TensorDesc,
    bias: Option<TensorDesc>,
    causal: bool,
    scale: f64,
    dropout_p: f64,
    device: Option<i64>,
) -> PyResult<(u64, u64)> {
    let (o, l, q, k, v, b) = (
        strided(out)?,
        strided(lse)?,
        strided(q)?,
        strided(k)?,
        strided(v)?,
        opt(bias)?,
    );
    let device = device_index(device)?;
    let a = Sdpa {
        q: &q,
        k: &k,
        v: &v,
        bias: b.as_ref(),
        causal,
        scale,
        dropout: Some(Dropout::with_p(dropout_p)),
    };
    py.detach(|| entry::sdpa_forward(a, &o, &l, device))
        .map_err(py_err)
}

/// Backward of [`sdpa_forward`]: writes the gradients given (any may be
/// None). `work` is a zeroed contiguous scratch (see `sdpa_backward_work`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sdpa_backward(
    py: Python<'_>,
    grad_q: Option<TensorDesc>,
    grad_k: Option<TensorDesc>,
    grad_v: Option<TensorDesc>,
    grad_bias: Option<TensorDesc>,
    grad_out: TensorDesc,
    q: TensorDesc,
    k: TensorDesc,
    v: TensorDesc,
    bias: Option<TensorDesc>,
    out: TensorDesc,
    lse: TensorDesc,
    work: TensorDesc,
    causal: bool,
    scale: f64,
    dropout_p: f64,
    seed: u64,
    offset: u64,
) -> PyResult<()> {
    let (gq, gk, gv, gb) = (opt(grad_q)?, opt(grad_k)?, opt(grad_v)?, opt(grad_bias)?);
    let (go, q, k, v, b) = (
        strided(grad_out)?,
        strided(q)?,
        strided(k)?,
        strided(v)?,
        opt(bias)?,
    );
    let (o, l, w) = (strided(out)?, strided(lse)?, strided(work)?);
    let a = Sdpa {
        q: &q,
        k: &k,
        v: &v,
        bias: b.as_ref(),
        causal,
        scale,
        dropout: Some(Dropout {
            p: dropout_p,
            seed,
            offset,
        }),
    };
    let grads = Grads {
        q: gq.as_ref(),
        k: gk.as_ref(),
        v: gv.as_ref(),
        bias: gb.as_ref(),
    };
    py.detach(|| entry::sdpa_backward(&a, &go, &o, &l, &grads, &w))
        .map_err(py_err)
}

/// Elements of the backward's scratch for `[b, hq, l, d]` queries and
/// `[b, hk, s, _]` keys (in the compute type: float64 for float64, else float32).
#[pyfunction]
fn sdpa_backward_work(b: usize, hq: usize, hk: usize, l: usize, s: usize, d: usize) -> usize {
    attn::backward_work(b, hq, hk, l, s, d)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sdpa_forward, m)?)?;
    m.add_function(wrap_pyfunction!(sdpa_backward, m)?)?;
    m.add_function(wrap_pyfunction!(sdpa_backward_work, m)?)?;
    Ok(())
}
