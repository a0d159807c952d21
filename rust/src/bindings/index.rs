//! Indexing and shape kernels (rust/src/kernels/index.rs). Every call
//! releases the GIL; indices are validated in Rust before any memory is
//! touched through them.

use super::{kernel_err, kernel_index_err, strided, TensorDesc};
use crate::kernels::entry;
use crate::kernels::index::{self as ix, IndexArg, Reduce, Src};
use crate::kernels::{KernelError, Strided};
use pyo3::prelude::*;

/// An index operand as Python hands it: (indices desc, size and stride of
/// the data dimension it selects along, that dimension's number for messages).
type ArgDesc = (TensorDesc, usize, isize, i64);

/// How an out-of-range index is reported: (0: IndexError, 1: RuntimeError,
/// message with `{index}`, `{dim}`, `{size}` placeholders).
type ErrFmt = (u8, String);

/// A kernel error of an index op: an index out of range worded by the
/// caller's `fmt` (IndexError or RuntimeError), anything else as usual.
fn index_err(e: KernelError, args: &[ArgDesc], fmt: &ErrFmt) -> PyErr {
    match e {
        KernelError::IndexOutOfRange { arg, value } => {
            let (size, dim) = args.get(arg).map(|a| (a.1, a.3)).unwrap_or((0, 0));
            let msg = fmt
                .1
                .replace("{index}", &value.to_string())
                .replace("{dim}", &dim.to_string())
                .replace("{size}", &size.to_string());
            let e = KernelError::InvalidArgument(msg);
            if fmt.0 == 0 {
                kernel_index_err(e)
            } else {
                kernel_err(e)
            }
        }
        k => kernel_err(k),
    }
}

fn index_args(args: &[ArgDesc]) -> PyResult<Vec<IndexArg>> {
    args.iter()
        .map(|(d, size, stride, _)| {
            Ok(IndexArg {
                idx: strided(d.clone())?,
                size: *size,
                stride: *stride,
            })
        })
        .collect()
}

/// Advanced-index gather: `out[r] = data[r + Σ idx_k[r] * stride_k]`.
#[pyfunction]
fn index_gather(
    py: Python<'_>,
    out: TensorDesc,
    data: TensorDesc,
    args: Vec<ArgDesc>,
    wrap: bool,
    err: ErrFmt,
) -> PyResult<()> {
    let (o, d, a) = (strided(out)?, strided(data)?, index_args(&args)?);
    py.detach(|| ix::gather(&o, &d, &a, wrap))
        .map_err(|e| index_err(e, &args, &err))
}

/// `out = data.index_select(dim, index)` ([`entry::index_select`]; the
/// native path calls the same entry).
#[pyfunction]
fn index_select(
    py: Python<'_>,
    out: TensorDesc,
    data: TensorDesc,
    index: TensorDesc,
    dim: usize,
) -> PyResult<()> {
    let (o, d, i) = (strided(out)?, strided(data)?, strided(index)?);
    py.detach(|| entry::index_select(&o, &d, &i, dim))
        .map_err(kernel_index_err)
}

/// `out = data.gather(dim, index)` ([`entry::gather`]; the native path
/// calls the same entry).
#[pyfunction]
fn gather(
    py: Python<'_>,
    out: TensorDesc,
    data: TensorDesc,
    index: TensorDesc,
    dim: usize,
) -> PyResult<()> {
    let (o, d, i) = (strided(out)?, strided(data)?, strided(index)?);
    py.detach(|| entry::gather(&o, &d, &i, dim))
        .map_err(kernel_err)
}

fn reduce_of(name: &str) -> PyResult<Reduce> {
    Ok(match name {
        "assign" => Reduce::Assign,
        "sum" | "add" => Reduce::Add,
        "prod" | "multiply" => Reduce::Mul,
        "mean" => Reduce::Mean,
        "amax" => Reduce::Max,
        "amin" => Reduce::Min,
        _ => {
            return Err(kernel_err(KernelError::InvalidValue(format!(
                "foo: unknown scatter reduction {name:?}"
            ))))
        }
    })
}

/// Advanced-index scatter: `dst[r + Σ idx_k[r] * stride_k] op= src[r]`
/// (`src` a tensor desc, or `value` a Python number), serially.
#[pyfunction]
#[pyo3(signature = (dst, src, value, args, wrap, op, include_self, err, acc_float=false))]
#[allow(clippy::too_many_arguments)]
fn index_scatter(
    py: Python<'_>,
    dst: TensorDesc,
    src: Option<TensorDesc>,
    value: Option<&Bound<'_, PyAny>>,
    args: Vec<ArgDesc>,
    wrap: bool,
    op: &str,
    include_self: bool,
    err: ErrFmt,
    acc_float: bool,
) -> PyResult<()> {
    let (d, a) = (strided(dst)?, index_args(&args)?);
    let op = reduce_of(op)?;
    let s = src.map(strided).transpose()?;
    let scalar = match value {
        None => None,
        Some(v) => Some(if let Ok(b) = v.extract::<bool>() {
            (b as u8 as f64, b as i64, true)
        } else if let Ok(i) = v.extract::<i64>() {
            (i as f64, i, true)
        } else {
            let f: f64 = v.extract()?;
            (f, f as i64, false)
        }),
    };
    py.detach(|| {
        let src = match (&s, scalar) {
            (Some(s), _) => Src::Tensor(s),
            (None, Some((f, i, is_int))) => Src::Scalar { f, i, is_int },
            (None, None) => {
                return Err(KernelError::InvalidArgument(
                    "foo scatter: no source".into(),
                ))
            }
        };
        ix::scatter(&d, src, &a, wrap, op, include_self, acc_float)
    })
    .map_err(|e| index_err(e, &args, &err))
}

/// Validates the indices of `args` over their own shape (for ops that check
/// indices even when there is nothing to gather).
#[pyfunction]
fn check_index(py: Python<'_>, args: Vec<ArgDesc>, wrap: bool, err: ErrFmt) -> PyResult<()> {
    let a = index_args(&args)?;
    py.detach(|| {
        for (k, x) in a.iter().enumerate() {
            match ix::check_indices(&x.idx.sizes, std::slice::from_ref(x), wrap) {
                Err(KernelError::IndexOutOfRange { value, .. }) => {
                    return Err(KernelError::IndexOutOfRange { arg: k, value })
                }
                r => r?,
            }
        }
        Ok(())
    })
    .map_err(|e| index_err(e, &args, &err))
}

/// In-place embedding_renorm_ of the 2-d `weight` over the rows `indices` names.
#[pyfunction]
fn embedding_renorm(
    py: Python<'_>,
    weight: TensorDesc,
    indices: TensorDesc,
    max_norm: f64,
    norm_type: f64,
) -> PyResult<()> {
    let (w, i) = (strided(weight)?, strided(indices)?);
    let rows = w.sizes.first().copied().unwrap_or(0);
    let fake = [(
        ((0usize, 0u8, vec![], vec![]) as TensorDesc),
        rows,
        0isize,
        0i64,
    )];
    py.detach(|| ix::embedding_renorm(&w, &i, max_norm, norm_type))
        .map_err(|e| index_err(e, &fake, &(0, "index {index} is out of bounds for dimension 0 with size {size} (foo embedding_renorm_)".into())))
}

/// Concatenates `inputs` into `out` along `dim`.
#[pyfunction]
fn cat(py: Python<'_>, out: TensorDesc, inputs: Vec<TensorDesc>, dim: usize) -> PyResult<()> {
    let o = strided(out)?;
    let ins: Vec<Strided> = inputs.into_iter().map(strided).collect::<PyResult<_>>()?;
    py.detach(|| ix::cat(&o, &ins, dim)).map_err(kernel_err)
}

/// Number of nonzero elements.
#[pyfunction]
fn count_nonzero_all(py: Python<'_>, src: TensorDesc) -> PyResult<usize> {
    let s = strided(src)?;
    Ok(py.detach(|| ix::count_nonzero(&s)))
}

/// Indices of the nonzero elements into the int64 `[count, ndim]` `out`.
#[pyfunction]
fn nonzero(py: Python<'_>, out: TensorDesc, src: TensorDesc) -> PyResult<()> {
    let (o, s) = (strided(out)?, strided(src)?);
    py.detach(|| ix::nonzero(&o, &s)).map_err(kernel_err)
}

/// Elements of `src` where `mask` is true, into the 1-d `out`.
#[pyfunction]
fn masked_select(
    py: Python<'_>,
    out: TensorDesc,
    src: TensorDesc,
    mask: TensorDesc,
) -> PyResult<()> {
    let (o, s, m) = (strided(out)?, strided(src)?, strided(mask)?);
    py.detach(|| ix::masked_select(&o, &s, &m))
        .map_err(kernel_err)
}

/// `out = src` reversed along `dims`.
#[pyfunction]
fn flip(py: Python<'_>, out: TensorDesc, src: TensorDesc, dims: Vec<usize>) -> PyResult<()> {
    let (o, s) = (strided(out)?, strided(src)?);
    py.detach(|| ix::flip(&o, &s, &dims)).map_err(kernel_err)
}

/// `out = tril(src, k)` or `triu` with `upper`.
#[pyfunction]
fn tri(py: Python<'_>, out: TensorDesc, src: TensorDesc, k: i64, upper: bool) -> PyResult<()> {
    let (o, s) = (strided(out)?, strided(src)?);
    py.detach(|| entry::tri(&o, &s, k, upper))
        .map_err(kernel_err)
}

/// `out[i] = start + i * step`.
#[pyfunction]
fn arange(
    py: Python<'_>,
    out: TensorDesc,
    start_f: f64,
    step_f: f64,
    start_i: i64,
    step_i: i64,
    integral: bool,
) -> PyResult<()> {
    let o = strided(out)?;
    py.detach(|| ix::arange(&o, start_f, step_f, start_i, step_i, integral))
        .map_err(kernel_err)
}

/// torch CPU's linspace into the 1-d `out`; `opmath` computes float16 and
/// bfloat16 in f32 and rounds once (torch >= 2.15), else in the half type.
#[pyfunction]
fn linspace(py: Python<'_>, out: TensorDesc, start: f64, end: f64, opmath: bool) -> PyResult<()> {
    let o = strided(out)?;
    py.detach(|| ix::linspace(&o, start, end, opmath))
        .map_err(kernel_err)
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(index_gather, m)?)?;
    m.add_function(wrap_pyfunction!(index_select, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(index_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(check_index, m)?)?;
    m.add_function(wrap_pyfunction!(cat, m)?)?;
    m.add_function(wrap_pyfunction!(embedding_renorm, m)?)?;
    m.add_function(wrap_pyfunction!(count_nonzero_all, m)?)?;
    m.add_function(wrap_pyfunction!(nonzero, m)?)?;
    m.add_function(wrap_pyfunction!(masked_select, m)?)?;
    m.add_function(wrap_pyfunction!(flip, m)?)?;
    m.add_function(wrap_pyfunction!(tri, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(linspace, m)?)?;
    Ok(())
}
