//! Elementwise ops by name: the one table that turns an op name and its
//! positional parameters (aten schema order) into a [`UnaryOp`],
//! [`BinaryOp`] or [`TernaryOp`]. Both callers use it: the Python bindings
//! (`_C.ew_unary("leaky_relu", ..., 0.01)`) and the C++ kernels of the
//! native path (rust/glue/native.cpp through `foo_rs_ew`), so an op name
//! means the same thing whichever way a call arrives.

use super::special::{Polynomial as Poly, SpecialFn};
use super::{BinaryOp, DivMode, Scalar, TernaryOp, UnaryOp};
use crate::kernels::KernelError;

/// One positional parameter of an op.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    None,
    Number(Scalar),
    Str(String),
}

fn bad(op: &str, i: usize, want: &str) -> KernelError {
    KernelError::InvalidArgument(format!(
        "foo: op '{op}' expects {want} at parameter position {i}"
    ))
}

/// An op's parameters, read by position.
pub struct Params<'a> {
    op: &'a str,
    items: &'a [Param],
}

impl<'a> Params<'a> {
    pub fn new(op: &'a str, items: &'a [Param]) -> Self {
        Params { op, items }
    }
    fn get(&self, i: usize) -> Result<&Param, KernelError> {
        self.items
            .get(i)
            .ok_or_else(|| bad(self.op, i, "a parameter"))
    }
    fn scalar(&self, i: usize) -> Result<Scalar, KernelError> {
        match self.get(i)? {
            Param::Number(s) => Ok(*s),
            _ => Err(bad(self.op, i, "a number")),
        }
    }
    // Optional parameters may be omitted (trailing): None.
    fn opt_scalar(&self, i: usize) -> Result<Option<Scalar>, KernelError> {
        match self.items.get(i).unwrap_or(&Param::None) {
            Param::None => Ok(None),
            _ => self.scalar(i).map(Some),
        }
    }
    fn f64(&self, i: usize) -> Result<f64, KernelError> {
        Ok(match self.scalar(i)? {
            Scalar::Float(f) => f,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(b) => b as i64 as f64,
        })
    }
    fn opt_f64(&self, i: usize) -> Result<Option<f64>, KernelError> {
        match self.items.get(i).unwrap_or(&Param::None) {
            Param::None => Ok(None),
            _ => self.f64(i).map(Some),
        }
    }
    fn i64(&self, i: usize) -> Result<i64, KernelError> {
        match self.scalar(i)? {
            Scalar::Int(v) => Ok(v),
            Scalar::Bool(b) => Ok(b as i64),
            Scalar::Float(_) => Err(bad(self.op, i, "an integer")),
        }
    }
    fn bool(&self, i: usize) -> Result<bool, KernelError> {
        Ok(match self.scalar(i)? {
            Scalar::Bool(b) => b,
            Scalar::Int(v) => v != 0,
            Scalar::Float(f) => f != 0.0,
        })
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>, KernelError> {
        match self.items.get(i).unwrap_or(&Param::None) {
            Param::None => Ok(None),
            Param::Str(s) => Ok(Some(s)),
            Param::Number(_) => Err(bad(self.op, i, "a string or None")),
        }
    }
}

fn unknown(kind: &str, op: &str) -> KernelError {
    KernelError::InvalidArgument(format!("foo: unknown {kind} elementwise op '{op}'"))
}

/// gelu's `approximate`: "none" or "tanh" (a bool is accepted too).
fn gelu_tanh(p: &Params, i: usize) -> Result<bool, KernelError> {
    match p.get(i)? {
        Param::Str(s) if s == "tanh" => Ok(true),
        Param::Str(s) if s == "none" => Ok(false),
        Param::Str(s) => Err(KernelError::InvalidArgument(format!(
            "approximate argument must be either none or tanh, got {s}"
        ))),
        _ => p.bool(i),
    }
}

pub fn unary(op: &str, p: &Params) -> Result<UnaryOp, KernelError> {
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
        "lgamma" => Lgamma,
        "digamma" => Digamma,
        "polygamma" => Polygamma { n: p.i64(0)? },
        "log_sigmoid" => LogSigmoid,
        "special_entr" => Entr,
        "sinc" => Sinc,
        "hardshrink" => Hardshrink { lambd: p.f64(0)? },
        "softshrink" => Softshrink { lambd: p.f64(0)? },
        "signbit" => Signbit,
        "frexp_exponent" => FrexpExponent,
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
        "gelu" => Gelu {
            tanh: gelu_tanh(p, 0)?,
        },
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
        "clamp_min" => Clamp {
            min: Some(p.scalar(0)?),
            max: None,
        },
        "clamp_max" => Clamp {
            min: None,
            max: Some(p.scalar(0)?),
        },
        _ => match SpecialFn::from_name(op) {
            Some(f) => Special(f),
            None => return Err(unknown("unary", op)),
        },
    })
}

pub fn binary(op: &str, p: &Params) -> Result<BinaryOp, KernelError> {
    use BinaryOp::*;
    Ok(match op {
        "add" => Add { alpha: p.scalar(0)? },
        "sub" => Sub { alpha: p.scalar(0)? },
        "mul" => Mul,
        "div" => Div {
            mode: match p.opt_str(0)? {
                None => DivMode::True,
                Some("trunc") => DivMode::Trunc,
                Some("floor") => DivMode::Floor,
                Some(m) => {
                    return Err(KernelError::InvalidArgument(format!(
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
        "gcd" => Gcd,
        "lcm" => Lcm,
        "clamp_min" => ClampMin,
        "clamp_max" => ClampMax,
        "copysign" => Copysign,
        "xlogy" => Xlogy,
        "logaddexp" => LogAddExp,
        "logaddexp2" => LogAddExp2,
        "heaviside" => Heaviside,
        "log_sigmoid_backward" => LogSigmoidBackward,
        "special_xlog1py" => Xlog1py,
        "special_zeta" => Zeta,
        "nextafter" => NextAfter,
        "igamma" => Igamma,
        "igammac" => Igammac,
        "hardshrink_backward" => ShrinkBackward { lambd: p.f64(0)? },
        "softshrink_backward" => ShrinkBackward { lambd: p.f64(0)? },
        "lerp" => Lerp { weight: p.scalar(0)? },
        "threshold_backward" => ThresholdBackward {
            threshold: p.scalar(0)?,
        },
        "gelu_backward" => GeluBackward {
            tanh: gelu_tanh(p, 0)?,
        },
        "silu_backward" => SiluBackward,
        "sigmoid_backward" => SigmoidBackward,
        "tanh_backward" => TanhBackward,
        "elu_backward" => EluBackward {
            alpha: p.f64(0)?,
            scale: p.f64(1)?,
            input_scale: p.f64(2)?,
            is_result: p.bool(3)?,
        },
        "leaky_relu_backward" => LeakyReluBackward {
            negative_slope: p.f64(0)?,
        },
        "hardtanh_backward" => HardtanhBackward {
            min: p.f64(0)?,
            max: p.f64(1)?,
        },
        "hardsigmoid_backward" => HardsigmoidBackward,
        "hardswish_backward" => HardswishBackward,
        "softplus_backward" => SoftplusBackward {
            beta: p.f64(0)?,
            threshold: p.f64(1)?,
        },
        "mish_backward" => MishBackward,
        "logit_backward" => LogitBackward { eps: p.opt_f64(0)? },
        _ => match Poly::from_name(op) {
            Some(p) => Polynomial(p),
            None => return Err(unknown("binary", op)),
        },
    })
}

pub fn ternary(op: &str, p: &Params) -> Result<TernaryOp, KernelError> {
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
