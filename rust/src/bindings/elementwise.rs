//! Elementwise kernels: `ew_unary`, `ew_binary`, `ew_ternary` run a named
//! pointwise op into a preallocated output, `ew_output_strides` gives the
//! layout ATen would allocate for the result. Every kernel call releases the
//! GIL.
//!
//! Operands are tensor descriptors `(data_ptr, dtype code, sizes, strides)`
//! or Python numbers (bool, int, float). `ct` is the dtype code of the common
//! dtype the op computes in. Op parameters follow the op name positionally,
//! in aten schema order.

use super::{strided, KernelErr, TensorDesc};
use crate::dtype::DType;
use crate::kernels::elementwise::spec::{self, Param, Params};
use crate::kernels::elementwise::{self as ew, Operand, Scalar};
use crate::kernels::Strided;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};

/// An operand as it arrives from Python.
enum Arg {
    Tensor(Strided),
    Number(Scalar),
}

impl Arg {
    fn operand(&self) -> Operand<'_> {
        match self {
            Arg::Tensor(t) => Operand::Tensor(t),
            Arg::Number(s) => Operand::Scalar(*s),
        }
    }
}

fn number(obj: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    if obj.is_instance_of::<PyBool>() {
        return Ok(Some(Scalar::Bool(obj.is_truthy()?)));
    }
    if obj.is_instance_of::<PyInt>() {
        return match obj.extract::<i64>() {
            Ok(i) => Ok(Some(Scalar::Int(i))),
            // Beyond int64: torch itself would refuse; keep the value as a float.
            Err(_) => Ok(Some(Scalar::Float(obj.extract::<f64>()?))),
        };
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::Float(obj.extract::<f64>()?)));
    }
    Ok(None)
}

fn arg(obj: &Bound<'_, PyAny>) -> PyResult<Arg> {
    if let Some(s) = number(obj)? {
        return Ok(Arg::Number(s));
    }
    let desc: TensorDesc = obj.extract()?;
    Ok(Arg::Tensor(strided(desc)?))
}

fn dtype(code: u8) -> PyResult<DType> {
    DType::from_code(code)
        .ok_or_else(|| PyTypeError::new_err(format!("foo: unknown dtype code {code}")))
}

/// The op's positional parameters as the shared op table reads them.
fn params(items: &Bound<'_, PyTuple>) -> PyResult<Vec<Param>> {
    items
        .iter()
        .map(|v| {
            if v.is_none() {
                return Ok(Param::None);
            }
            if let Some(s) = number(&v)? {
                return Ok(Param::Number(s));
            }
            Ok(Param::Str(v.extract::<String>().map_err(|_| {
                PyTypeError::new_err(format!("foo: unsupported op parameter {v}"))
            })?))
        })
        .collect()
}

/// `out = op(x, *params)`; `op` "identity" copies with a dtype cast.
#[pyfunction]
#[pyo3(signature = (op, out, x, ct, *params))]
fn ew_unary(
    py: Python<'_>,
    op: &str,
    out: TensorDesc,
    x: &Bound<'_, PyAny>,
    ct: u8,
    params: &Bound<'_, PyTuple>,
) -> PyResult<()> {
    let (out, x, ct) = (strided(out)?, arg(x)?, dtype(ct)?);
    if op == "identity" {
        py.detach(|| ew::identity(&out, x.operand()))
            .map_err(KernelErr::from)?;
        return Ok(());
    }
    let ps = self::params(params)?;
    let op = spec::unary(op, &Params::new(op, &ps)).map_err(KernelErr::from)?;
    py.detach(|| ew::unary(&op, &out, x.operand(), ct))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// `out = op(a, b, *params)`.
#[pyfunction]
#[pyo3(signature = (op, out, a, b, ct, *params))]
fn ew_binary(
    py: Python<'_>,
    op: &str,
    out: TensorDesc,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    ct: u8,
    params: &Bound<'_, PyTuple>,
) -> PyResult<()> {
    let ps = self::params(params)?;
    let op = spec::binary(op, &Params::new(op, &ps)).map_err(KernelErr::from)?;
    let (out, a, b, ct) = (strided(out)?, arg(a)?, arg(b)?, dtype(ct)?);
    py.detach(|| ew::binary(&op, &out, a.operand(), b.operand(), ct))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// `out = op(a, b, c, *params)`.
#[pyfunction]
#[pyo3(signature = (op, out, a, b, c, ct, *params))]
#[allow(clippy::too_many_arguments)]
fn ew_ternary(
    py: Python<'_>,
    op: &str,
    out: TensorDesc,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    c: &Bound<'_, PyAny>,
    ct: u8,
    params: &Bound<'_, PyTuple>,
) -> PyResult<()> {
    let ps = self::params(params)?;
    let op = spec::ternary(op, &Params::new(op, &ps)).map_err(KernelErr::from)?;
    let (out, a, b, c, ct) = (strided(out)?, arg(a)?, arg(b)?, arg(c)?, dtype(ct)?);
    py.detach(|| ew::ternary(&op, &out, a.operand(), b.operand(), c.operand(), ct))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// Strides of the output ATen allocates for `shape` from inputs given as
/// `(sizes, strides)` pairs (see `TensorIterator`'s output layout).
#[pyfunction]
fn ew_output_strides(shape: Vec<usize>, inputs: Vec<(Vec<usize>, Vec<isize>)>) -> Vec<isize> {
    let views: Vec<(&[usize], &[isize])> = inputs
        .iter()
        .map(|(s, st)| (s.as_slice(), st.as_slice()))
        .collect();
    ew::output_strides(&shape, &views)
}

/// The SIMD level the elementwise inner loops use ("avx512", "avx2", "portable").
#[pyfunction]
fn ew_simd_level() -> &'static str {
    ew::simd_level().name()
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ew_unary, m)?)?;
    m.add_function(wrap_pyfunction!(ew_binary, m)?)?;
    m.add_function(wrap_pyfunction!(ew_ternary, m)?)?;
    m.add_function(wrap_pyfunction!(ew_output_strides, m)?)?;
    m.add_function(wrap_pyfunction!(ew_simd_level, m)?)?;
    Ok(())
}
