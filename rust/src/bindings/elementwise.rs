//! Elementwise kernels: `ew_unary`, `ew_binary`, `ew_ternary` run a named
//! pointwise op into a preallocated output, `ew_output_strides` gives the
//! layout ATen would allocate for the result. Every kernel call releases the
//! GIL.
//!
//! Operands are tensor descriptors `(data_ptr, dtype code, sizes, strides)`
//! or Python numbers (bool, int, float). `ct` is the dtype code of the common
//! dtype the op computes in. Op parameters follow the op name positionally,
//! in aten schema order.

use super::{kernel_err, strided, KernelErr, TensorDesc};
use crate::dtype::DType;
use crate::kernels::elementwise::complex::{self as cx, COperand, CParam};
use crate::kernels::elementwise::spec::{self, Param, Params};
use crate::kernels::elementwise::{self as ew, Operand, Scalar};
use crate::kernels::{KernelError, Strided};
use num_complex::Complex64;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt, PyTuple};

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
    DType::from_code(code).ok_or_else(|| {
        kernel_err(KernelError::InvalidType(format!(
            "foo: unknown dtype code {code}"
        )))
    })
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
                kernel_err(KernelError::InvalidType(format!(
                    "foo: unsupported op parameter {v}"
                )))
            })?))
        })
        .collect()
}

/// A Python complex number, if `obj` is one.
fn complex_number(obj: &Bound<'_, PyAny>) -> PyResult<Option<Complex64>> {
    if !obj.is_instance_of::<PyComplex>() {
        return Ok(None);
    }
    let re: f64 = obj.getattr("real")?.extract()?;
    let im: f64 = obj.getattr("imag")?.extract()?;
    Ok(Some(Complex64::new(re, im)))
}

/// An operand of the complex path: a tensor or any Python number.
enum CArg {
    Tensor(Strided),
    Number(Complex64),
}

impl CArg {
    fn operand(&self) -> COperand<'_> {
        match self {
            CArg::Tensor(t) => COperand::Tensor(t),
            CArg::Number(c) => COperand::Number(*c),
        }
    }
}

fn carg(obj: &Bound<'_, PyAny>) -> PyResult<CArg> {
    if let Some(c) = complex_number(obj)? {
        return Ok(CArg::Number(c));
    }
    if let Some(s) = number(obj)? {
        return Ok(CArg::Number(Complex64::new(s.to_f64(), 0.0)));
    }
    let desc: TensorDesc = obj.extract()?;
    Ok(CArg::Tensor(strided(desc)?))
}

fn cparams(items: &Bound<'_, PyTuple>) -> PyResult<Vec<CParam>> {
    items
        .iter()
        .map(|v| {
            if v.is_none() {
                Ok(CParam::None)
            } else if let Some(c) = complex_number(&v)? {
                Ok(CParam::Number(c))
            } else if let Some(s) = number(&v)? {
                Ok(CParam::Number(Complex64::new(s.to_f64(), 0.0)))
            } else {
                Ok(CParam::Str(v.extract::<String>()?))
            }
        })
        .collect()
}

/// Whether a call goes to the complex path (kernels::elementwise::complex):
/// a complex output or compute dtype (the Python layer gives a complex
/// input's dtype as `ct` also when the result is real: abs, isnan, eq).
fn is_complex_call(op: &str, out: &TensorDesc, ct: u8) -> bool {
    let complex_code = |c: u8| DType::from_code(c).is_some_and(DType::is_complex);
    cx::takes_real(op) || complex_code(out.1) || complex_code(ct)
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
    if is_complex_call(op, &out, ct) {
        let (out, x, ct, ps) = (strided(out)?, carg(x)?, dtype(ct)?, cparams(params)?);
        py.detach(|| cx::unary(op, &ps, &out, x.operand(), ct))
            .map_err(KernelErr::from)?;
        return Ok(());
    }
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
    if is_complex_call(op, &out, ct) {
        let (out, a, b, ct, ps) = (
            strided(out)?,
            carg(a)?,
            carg(b)?,
            dtype(ct)?,
            cparams(params)?,
        );
        py.detach(|| cx::binary(op, &ps, &out, a.operand(), b.operand(), ct))
            .map_err(KernelErr::from)?;
        return Ok(());
    }
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
    if is_complex_call(op, &out, ct) {
        let (out, ct, ps) = (strided(out)?, dtype(ct)?, cparams(params)?);
        let (a, b, c) = (carg(a)?, carg(b)?, carg(c)?);
        py.detach(|| cx::ternary(op, &ps, &out, a.operand(), b.operand(), c.operand(), ct))
            .map_err(KernelErr::from)?;
        return Ok(());
    }
    let ps = self::params(params)?;
    let op = spec::ternary(op, &Params::new(op, &ps)).map_err(KernelErr::from)?;
    let (out, a, b, c, ct) = (strided(out)?, arg(a)?, arg(b)?, arg(c)?, dtype(ct)?);
    py.detach(|| ew::ternary(&op, &out, a.operand(), b.operand(), c.operand(), ct))
        .map_err(KernelErr::from)?;
    Ok(())
}

/// Complex products along `dim`: running (`cumulative`, cumprod) or whole
/// (prod; `out` has `dim` of size 1).
#[pyfunction]
fn complex_prod(
    py: Python<'_>,
    out: TensorDesc,
    src: TensorDesc,
    dim: usize,
    cumulative: bool,
) -> PyResult<()> {
    let (out, src) = (strided(out)?, strided(src)?);
    py.detach(|| cx::prod_dim(&out, &src, dim, cumulative))
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
    m.add_function(wrap_pyfunction!(complex_prod, m)?)?;
    m.add_function(wrap_pyfunction!(ew_simd_level, m)?)?;
    Ok(())
}
