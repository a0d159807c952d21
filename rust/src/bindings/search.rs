//! Selections in CPU's tie order, running extrema, searching and index
//! building (kernels/select.rs, kernels/search.rs). Every call releases the
//! GIL; an output that overlaps an input, or that a kernel needs contiguous
//! and is not, is computed into a scratch buffer and copied back.

use super::{kernel_err, strided, TensorDesc};
use crate::kernels::{entry, search, select, with_out, KernelError, Strided};
use pyo3::prelude::*;

/// Runs `f(values, indices)` on outputs that do not overlap `inp`.
fn pair(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    f: impl FnOnce(&Strided, &Strided, &Strided) -> Result<(), KernelError> + Send,
) -> PyResult<()> {
    let (v, x, i) = (strided(values)?, strided(indices)?, strided(inp)?);
    py.detach(|| {
        with_out(&v, &[Some(&i)], false, false, |v| {
            with_out(&x, &[Some(&i), Some(v)], false, false, |x| f(v, x, &i))
        })
    })
    .map_err(kernel_err)
}

/// The `k` largest (or smallest) elements of every line of `inp` along
/// `dim` and their positions (int64), in torch CPU's order, ties included.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn topk(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    dim: usize,
    k: usize,
    largest: bool,
    sorted: bool,
) -> PyResult<()> {
    let (v, x, i) = (strided(values)?, strided(indices)?, strided(inp)?);
    py.detach(|| entry::topk(&v, &x, &i, dim, k, largest, sorted))
        .map_err(kernel_err)
}

/// Element `k` (from 1) of every line of `inp` along `dim` and its position,
/// as CPU's quickselect finds it (outputs: 1 along `dim`).
#[pyfunction]
fn kthvalue(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    dim: usize,
    k: usize,
) -> PyResult<()> {
    pair(py, values, indices, inp, |v, x, i| {
        select::kthvalue(v, x, i, dim, k)
    })
}

/// The most frequent element of every line of `inp` along `dim` and the
/// position CPU reports (outputs: 1 along `dim`).
#[pyfunction]
fn mode(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    dim: usize,
) -> PyResult<()> {
    pair(py, values, indices, inp, |v, x, i| {
        select::mode(v, x, i, dim)
    })
}

/// Running maximum (`max`) or minimum along `dim` and its position.
#[pyfunction]
fn cummax_cummin(
    py: Python<'_>,
    values: TensorDesc,
    indices: TensorDesc,
    inp: TensorDesc,
    dim: usize,
    max: bool,
) -> PyResult<()> {
    pair(py, values, indices, inp, |v, x, i| {
        select::cummax_cummin(v, x, i, dim, max)
    })
}

/// Insertion positions of `values` in the lines of `boundaries` (int64 or
/// int32 `out`); `sorter` sorts unsorted boundaries. Inputs contiguous.
#[pyfunction]
#[pyo3(signature = (out, boundaries, values, sorter, right))]
fn searchsorted(
    py: Python<'_>,
    out: TensorDesc,
    boundaries: TensorDesc,
    values: TensorDesc,
    sorter: Option<TensorDesc>,
    right: bool,
) -> PyResult<()> {
    let (o, b, v) = (strided(out)?, strided(boundaries)?, strided(values)?);
    let s = sorter.map(strided).transpose()?;
    py.detach(|| {
        with_out(&o, &[Some(&b), Some(&v), s.as_ref()], true, false, |o| {
            search::searchsorted(o, &b, &v, s.as_ref(), right)
        })
    })
    .map_err(kernel_err)
}

/// `out = isin(elements, test)` (bool; `invert` negates). Inputs contiguous,
/// of one dtype.
#[pyfunction]
fn isin(
    py: Python<'_>,
    out: TensorDesc,
    elements: TensorDesc,
    test: TensorDesc,
    invert: bool,
) -> PyResult<()> {
    let (o, e, t) = (strided(out)?, strided(elements)?, strided(test)?);
    py.detach(|| {
        with_out(&o, &[Some(&e), Some(&t)], true, false, |o| {
            search::isin(o, &e, &t, invert)
        })
    })
    .map_err(kernel_err)
}

/// `out = logcumsumexp(inp, dim)`; `inp` contiguous.
#[pyfunction]
fn logcumsumexp(py: Python<'_>, out: TensorDesc, inp: TensorDesc, dim: usize) -> PyResult<()> {
    let (o, i) = (strided(out)?, strided(inp)?);
    py.detach(|| {
        with_out(&o, &[Some(&i)], true, false, |o| {
            search::logcumsumexp(o, &i, dim)
        })
    })
    .map_err(kernel_err)
}

/// `out` (`sum(repeats)` long, of `repeats`' dtype) = each `i` repeated
/// `repeats[i]` times.
#[pyfunction]
fn repeat_index(py: Python<'_>, out: TensorDesc, repeats: TensorDesc) -> PyResult<()> {
    let (o, r) = (strided(out)?, strided(repeats)?);
    py.detach(|| search::repeat_index(&o, &r))
        .map_err(kernel_err)
}

/// How many indices `tril_indices` (or `triu_indices` with `upper`) has.
#[pyfunction]
fn tri_count(row: usize, col: usize, offset: i64, upper: bool) -> usize {
    search::tri_count(row, col, offset, upper)
}

/// `out` (2 x tri_count, contiguous) = the lower (upper) triangle's indices.
#[pyfunction]
fn tri_indices(
    py: Python<'_>,
    out: TensorDesc,
    row: usize,
    col: usize,
    offset: i64,
    upper: bool,
) -> PyResult<()> {
    let o = strided(out)?;
    py.detach(|| search::tri_indices(&o, row, col, offset, upper))
        .map_err(kernel_err)
}

/// Groups of equal rows (`width` elements each) of contiguous `inp`, sorted
/// or `consecutive`: a member row per group into `first`, sizes into
/// `counts`, each row's group into `inverse`; returns the number of groups.
#[pyfunction]
fn unique_rows(
    py: Python<'_>,
    first: TensorDesc,
    inverse: TensorDesc,
    counts: TensorDesc,
    inp: TensorDesc,
    width: usize,
    consecutive: bool,
) -> PyResult<usize> {
    let (f, x, c, i) = (
        strided(first)?,
        strided(inverse)?,
        strided(counts)?,
        strided(inp)?,
    );
    py.detach(|| search::unique_rows(&f, &x, &c, &i, width, consecutive))
        .map_err(kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(topk, m)?)?;
    m.add_function(wrap_pyfunction!(kthvalue, m)?)?;
    m.add_function(wrap_pyfunction!(mode, m)?)?;
    m.add_function(wrap_pyfunction!(cummax_cummin, m)?)?;
    m.add_function(wrap_pyfunction!(searchsorted, m)?)?;
    m.add_function(wrap_pyfunction!(isin, m)?)?;
    m.add_function(wrap_pyfunction!(logcumsumexp, m)?)?;
    m.add_function(wrap_pyfunction!(repeat_index, m)?)?;
    m.add_function(wrap_pyfunction!(tri_count, m)?)?;
    m.add_function(wrap_pyfunction!(tri_indices, m)?)?;
    m.add_function(wrap_pyfunction!(unique_rows, m)?)?;
    Ok(())
}
