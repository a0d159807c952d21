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
use crate::kernels::elementwise::{
    self as ew, BinaryOp, DivMode, Operand, Scalar, TernaryOp, UnaryOp,
};
use crate::kernels::Strided;
use pyo3::exceptions::{PyTypeError, PyValueError};
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

/// Positional op parameters.
struct Params<'a, 'py> {
    op: &'a str,
    items: &'a Bound<'py, PyTuple>,
}

impl<'py> Params<'_, 'py> {
    fn get(&self, i: usize) -> PyResult<Bound<'py, PyAny>> {
        self.items.get_item(i).map_err(|_| {
            PyValueError::new_err(format!(
                "foo: op '{}' expects a parameter at position {i}",
                self.op
            ))
        })
    }
    fn f64(&self, i: usize) -> PyResult<f64> {
        self.get(i)?.extract()
    }
    fn i64(&self, i: usize) -> PyResult<i64> {
        self.get(i)?.extract()
    }
    fn bool(&self, i: usize) -> PyResult<bool> {
        self.get(i)?.is_truthy()
    }
    fn opt_f64(&self, i: usize) -> PyResult<Option<f64>> {
        let v = self.get(i)?;
        if v.is_none() {
            Ok(None)
        } else {
            Ok(Some(v.extract()?))
        }
    }
    fn scalar(&self, i: usize) -> PyResult<Scalar> {
        let v = self.get(i)?;
        number(&v)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "foo: op '{}' expects a number at position {i}",
                self.op
            ))
        })
    }
    fn opt_scalar(&self, i: usize) -> PyResult<Option<Scalar>> {
        let v = self.get(i)?;
        if v.is_none() {
            Ok(None)
        } else {
            self.scalar(i).map(Some)
        }
    }
}

fn unknown(kind: &str, op: &str) -> PyErr {
    PyValueError::new_err(format!("foo: unknown {kind} elementwise op '{op}'"))
}

fn parse_unary(op: &str, p: &Params) -> PyResult<UnaryOp> {
    use UnaryOp::*;
    Ok(match op {
        "neg" => Neg,
        "abs" => Abs,
        "sign" => Sign,
        "reciprocal" => Reciprocal,
        "sqrt" => Sqrt,
        "rsqrt" => Rsqrt,
        "exp" => Exp,
        "exp2" => Exp2,
        "expm1" => Expm1,
        "log" => Log,
        "log1p" => Log1p,
        "log2" => Log2,
        "log10" => Log10,
        "sin" => Sin,
        "cos" => Cos,
        "tan" => Tan,
        "asin" => Asin,
        "acos" => Acos,
        "atan" => Atan,
        "sinh" => Sinh,
        "cosh" => Cosh,
        "tanh" => Tanh,
        "asinh" => Asinh,
        "acosh" => Acosh,
        "atanh" => Atanh,
        "erf" => Erf,
        "erfc" => Erfc,
        "erfinv" => Erfinv,
        "sigmoid" => Sigmoid,
        "floor" => Floor,
        "ceil" => Ceil,
        "trunc" => Trunc,
        "frac" => Frac,
        "round" => Round {
            decimals: p.i64(0)?,
        },
        "relu" => Relu,
        "leaky_relu" => LeakyRelu {
            negative_slope: p.f64(0)?,
        },
        "elu" => Elu {
            alpha: p.f64(0)?,
            scale: p.f64(1)?,
            input_scale: p.f64(2)?,
        },
        "gelu" => Gelu { tanh: p.bool(0)? },
        "silu" => Silu,
        "mish" => Mish,
        "softplus" => Softplus {
            beta: p.f64(0)?,
            threshold: p.f64(1)?,
        },
        "hardsigmoid" => Hardsigmoid,
        "hardswish" => Hardswish,
        "hardtanh" => Hardtanh {
            min: p.f64(0)?,
            max: p.f64(1)?,
        },
        "threshold" => Threshold {
            threshold: p.scalar(0)?,
            value: p.scalar(1)?,
        },
        "logit" => Logit { eps: p.opt_f64(0)? },
        "nan_to_num" => NanToNum {
            nan: p.opt_f64(0)?.unwrap_or(0.0),
            posinf: p.opt_f64(1)?,
            neginf: p.opt_f64(2)?,
        },
        "isnan" => IsNan,
        "isinf" => IsInf,
        "isposinf" => IsPosInf,
        "isneginf" => IsNegInf,
        "isfinite" => IsFinite,
        "logical_not" => LogicalNot,
        "bitwise_not" => BitwiseNot,
        "pow_scalar" => PowScalar {
            exponent: p.scalar(0)?,
        },
        "rpow_scalar" => RPowScalar { base: p.scalar(0)? },
        "clamp" => Clamp {
            min: p.opt_scalar(0)?,
            max: p.opt_scalar(1)?,
        },
        "identity" => return Err(unknown("unary", op)),
        _ => return Err(unknown("unary", op)),
    })
}

fn parse_binary(op: &str, p: &Params) -> PyResult<BinaryOp> {
    use BinaryOp::*;
    Ok(match op {
        "add" => Add { alpha: p.scalar(0)? },
        "sub" => Sub { alpha: p.scalar(0)? },
        "mul" => Mul,
        "div" => Div {
            mode: match p.get(0)?.extract::<Option<String>>()?.as_deref() {
                None => DivMode::True,
                Some("trunc") => DivMode::Trunc,
                Some("floor") => DivMode::Floor,
                Some(m) => {
                    return Err(PyValueError::new_err(format!(
                        "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{m}'"
                    )))
                }
            },
        },
        "remainder" => Remainder,
        "fmod" => Fmod,
        "pow" => Pow,
        "atan2" => Atan2,
        "hypot" => Hypot,
        "minimum" => Minimum,
        "maximum" => Maximum,
        "fmin" => Fmin,
        "fmax" => Fmax,
        "eq" => Eq,
        "ne" => Ne,
        "lt" => Lt,
        "le" => Le,
        "gt" => Gt,
        "ge" => Ge,
        "logical_and" => LogicalAnd,
        "logical_or" => LogicalOr,
        "logical_xor" => LogicalXor,
        "bitwise_and" => BitwiseAnd,
        "bitwise_or" => BitwiseOr,
        "bitwise_xor" => BitwiseXor,
        "lshift" => Shl,
        "rshift" => Shr,
        "clamp_min" => ClampMin,
        "clamp_max" => ClampMax,
        "copysign" => Copysign,
        "xlogy" => Xlogy,
        "lerp" => Lerp { weight: p.scalar(0)? },
        "threshold_backward" => ThresholdBackward { threshold: p.scalar(0)? },
        "gelu_backward" => GeluBackward { tanh: p.bool(0)? },
        "silu_backward" => SiluBackward,
        "sigmoid_backward" => SigmoidBackward,
        "tanh_backward" => TanhBackward,
        "elu_backward" => EluBackward { alpha: p.f64(0)?, scale: p.f64(1)?, input_scale: p.f64(2)?, is_result: p.bool(3)? },
        "leaky_relu_backward" => LeakyReluBackward { negative_slope: p.f64(0)? },
        "hardtanh_backward" => HardtanhBackward { min: p.f64(0)?, max: p.f64(1)? },
        "hardsigmoid_backward" => HardsigmoidBackward,
        "hardswish_backward" => HardswishBackward,
        "softplus_backward" => SoftplusBackward { beta: p.f64(0)?, threshold: p.f64(1)? },
        "mish_backward" => MishBackward,
        "logit_backward" => LogitBackward { eps: p.opt_f64(0)? },
        _ => return Err(unknown("binary", op)),
    })
}

fn parse_ternary(op: &str, p: &Params) -> PyResult<TernaryOp> {
    Ok(match op {
        "where" => TernaryOp::Where,
        "lerp" => TernaryOp::Lerp,
        "addcmul" => TernaryOp::Addcmul {
            value: p.scalar(0)?,
        },
        "addcdiv" => TernaryOp::Addcdiv {
            value: p.scalar(0)?,
        },
        "clamp" => TernaryOp::Clamp,
        _ => return Err(unknown("ternary", op)),
    })
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
    let op = parse_unary(op, &Params { op, items: params })?;
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
    let op = parse_binary(op, &Params { op, items: params })?;
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
    let op = parse_ternary(op, &Params { op, items: params })?;
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
