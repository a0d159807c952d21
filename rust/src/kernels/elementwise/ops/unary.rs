//! One-input pointwise ops (and ops of one tensor and scalars).

use super::{float_dispatch, int_dispatch, max_nan, min_nan, run1, unsupported, Int, Out, Target};
use crate::dispatch_dtype;
use crate::dtype::DType;
use crate::kernels::elementwise::cast::Num;
use crate::kernels::elementwise::cast::Scalar;
use crate::kernels::elementwise::iter::Operand;
use crate::kernels::elementwise::math::{polygamma, Real};
use crate::kernels::elementwise::special::{frexp, SpecialFn};
use crate::kernels::KernelError;

/// A one-input pointwise op; parameters as in the aten schema.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Reciprocal,
    Sqrt,
    Rsqrt,
    Exp,
    Exp2,
    Expm1,
    Log,
    Log1p,
    Log2,
    Log10,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    Erf,
    Erfc,
    Erfinv,
    Lgamma,
    Digamma,
    /// `polygamma(n, x)`, the n-th derivative of digamma (n >= 0).
    Polygamma {
        n: i64,
    },
    /// `log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))`.
    LogSigmoid,
    /// `special.entr`: `-x ln x` (0 at 0, -inf below).
    Entr,
    /// `sin(pi x) / (pi x)` (1 at 0).
    Sinc,
    /// A `torch.special` function of one input (Bessel, Airy, erfcx ...).
    Special(SpecialFn),
    /// The int32 exponent of `frexp` (a float input).
    FrexpExponent,
    /// `0` where `|x| <= lambd`, else `x`.
    Hardshrink {
        lambd: f64,
    },
    /// `x - lambd` above `lambd`, `x + lambd` below `-lambd`, else `0`.
    Softshrink {
        lambd: f64,
    },
    /// Bool output: the sign bit (`x < 0` for integers).
    Signbit,
    Sigmoid,
    Floor,
    Ceil,
    Trunc,
    Frac,
    Round {
        decimals: i64,
    },
    Relu,
    LeakyRelu {
        negative_slope: f64,
    },
    /// `elu(x, alpha, scale, input_scale)`; selu and celu are elu.
    Elu {
        alpha: f64,
        scale: f64,
        input_scale: f64,
    },
    Gelu {
        tanh: bool,
    },
    Silu,
    Mish,
    Softplus {
        beta: f64,
        threshold: f64,
    },
    Hardsigmoid,
    Hardswish,
    Hardtanh {
        min: f64,
        max: f64,
    },
    /// `x <= threshold ? value : x`.
    Threshold {
        threshold: Scalar,
        value: Scalar,
    },
    /// `logit(x, eps)`; `None` (or a negative eps) means no clamping.
    Logit {
        eps: Option<f64>,
    },
    /// Replacements for NaN, +inf and -inf; `None` means the dtype's
    /// largest / lowest finite value.
    NanToNum {
        nan: f64,
        posinf: Option<f64>,
        neginf: Option<f64>,
    },
    /// Bool output.
    IsNan,
    IsInf,
    IsPosInf,
    IsNegInf,
    IsFinite,
    /// Bool output (or the output's dtype, 0/1), any input dtype.
    LogicalNot,
    BitwiseNot,
    /// `x ** exponent`.
    PowScalar {
        exponent: Scalar,
    },
    /// `base ** x`.
    RPowScalar {
        base: Scalar,
    },
    /// `clamp(x, min, max)` with scalar bounds.
    Clamp {
        min: Option<Scalar>,
        max: Option<Scalar>,
    },
}

impl UnaryOp {
    /// The aten-style name used in error messages.
    pub fn name(&self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Reciprocal => "reciprocal",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Exp => "exp",
            Exp2 => "exp2",
            Expm1 => "expm1",
            Log => "log",
            Log1p => "log1p",
            Log2 => "log2",
            Log10 => "log10",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Asin => "asin",
            Acos => "acos",
            Atan => "atan",
            Sinh => "sinh",
            Cosh => "cosh",
            Tanh => "tanh",
            Asinh => "asinh",
            Acosh => "acosh",
            Atanh => "atanh",
            Erf => "erf",
            Erfc => "erfc",
            Erfinv => "erfinv",
            Lgamma => "lgamma",
            Digamma => "digamma",
            Polygamma { .. } => "polygamma",
            LogSigmoid => "log_sigmoid",
            Entr => "special_entr",
            Sinc => "sinc",
            Special(f) => f.name(),
            FrexpExponent => "frexp_exponent",
            Hardshrink { .. } => "hardshrink",
            Softshrink { .. } => "softshrink",
            Signbit => "signbit",
            Sigmoid => "sigmoid",
            Floor => "floor",
            Ceil => "ceil",
            Trunc => "trunc",
            Frac => "frac",
            Round { .. } => "round",
            Relu => "relu",
            LeakyRelu { .. } => "leaky_relu",
            Elu { .. } => "elu",
            Gelu { .. } => "gelu",
            Silu => "silu",
            Mish => "mish",
            Softplus { .. } => "softplus",
            Hardsigmoid => "hardsigmoid",
            Hardswish => "hardswish",
            Hardtanh { .. } => "hardtanh",
            Threshold { .. } => "threshold",
            Logit { .. } => "logit",
            NanToNum { .. } => "nan_to_num",
            IsNan => "isnan",
            IsInf => "isinf",
            IsPosInf => "isposinf",
            IsNegInf => "isneginf",
            IsFinite => "isfinite",
            LogicalNot => "logical_not",
            BitwiseNot => "bitwise_not",
            PowScalar { .. } => "pow",
            RPowScalar { .. } => "pow",
            Clamp { .. } => "clamp",
        }
    }
}

/// `out = op(x)`, computing in common dtype `ct` (see the module docs).
pub fn unary<'a>(
    op: &UnaryOp,
    out: impl Into<Target<'a>>,
    x: Operand,
    ct: DType,
) -> Result<(), KernelError> {
    let out = &Out::new(out.into(), ct);
    match op {
        // An integer result: stored as computed, never through a 16-bit float.
        UnaryOp::FrexpExponent => {
            let o = &Out { via: None, ..*out };
            return float_dispatch!(ct, "frexp", T => run1::<T, i32, _>(
                o,
                x,
                #[inline(always)]
                |a: T| frexp(a.to_f64()).1,
            ));
        }
        UnaryOp::LogicalNot => {
            return run1::<bool, bool, _>(
                out,
                x,
                #[inline(always)]
                |a: bool| !a,
            )
        }
        // ATen's pow: exponent 0 fills ones, exponent 1 copies (any dtype).
        UnaryOp::PowScalar { exponent } if exponent.to_f64() == 0.0 || exponent.to_f64() == 1.0 => {
            let ct_out = &Out { via: None, ..*out };
            return if exponent.to_f64() == 0.0 {
                dispatch_dtype!(ct, T => run1::<T, T, _>(ct_out, x, #[inline(always)] |_a: T| T::from_i64(1)))
            } else {
                dispatch_dtype!(ct, T => run1::<T, T, _>(ct_out, x, #[inline(always)] |a: T| a))
            };
        }
        // float16 pow uses no special exponents on CPU (plain std::pow).
        UnaryOp::PowScalar { exponent } if ct == DType::F16 => {
            let e = exponent.to::<f32>();
            return run1::<f32, f32, _>(
                out,
                x,
                #[inline(always)]
                move |a: f32| Real::powf(a, e),
            );
        }
        // CPU's float16 rsqrt rounds sqrt(x) to float16 before the reciprocal.
        UnaryOp::Rsqrt if ct == DType::F16 => {
            let rt = round_to(ct);
            return run1::<f32, f32, _>(
                out,
                x,
                #[inline(always)]
                move |a: f32| 1.0 / rt(Real::sqrt(a)),
            );
        }
        UnaryOp::NanToNum {
            nan,
            posinf,
            neginf,
        } if ct.is_floating() => {
            let (lo, hi) = finite_range(ct);
            let (nan, posinf, neginf) = (*nan, posinf.unwrap_or(hi), neginf.unwrap_or(lo));
            return float_dispatch!(ct, "nan_to_num", T => {
                let (n, p, m) = (T::c(nan), T::c(posinf), T::c(neginf));
                run1::<T, T, _>(out, x, #[inline(always)] move |a: T| nan_to_num(a, n, p, m))
            });
        }
        // ATen computes logit's ratio in the 16-bit type itself (rounding
        // `1 - x` and `x / (1 - x)`), then the log in float32.
        UnaryOp::Logit { eps } if matches!(ct, DType::F16 | DType::BF16) => {
            let rt = round_to(ct);
            let lo = eps.filter(|e| *e >= 0.0).map(|e| rt(e as f32));
            return run1::<f32, f32, _>(
                out,
                x,
                #[inline(always)]
                move |a: f32| {
                    let c = match lo {
                        Some(lo) => {
                            let hi = rt(1.0 - lo);
                            if a < lo {
                                lo
                            } else if a > hi {
                                hi
                            } else {
                                a
                            }
                        }
                        None => a,
                    };
                    Real::ln(rt(c / rt(1.0 - c)))
                },
            );
        }
        _ => {}
    }
    // ATen converts hardshrink's lambd to the 16-bit type itself.
    let rounded;
    let op = match (ct, op) {
        (DType::F16 | DType::BF16, UnaryOp::Hardshrink { lambd }) => {
            rounded = UnaryOp::Hardshrink {
                lambd: round_to(ct)(*lambd as f32) as f64,
            };
            &rounded
        }
        _ => op,
    };
    match ct {
        DType::F32 | DType::F16 | DType::BF16 => float_unary::<f32>(op, out, x),
        DType::F64 => float_unary::<f64>(op, out, x),
        DType::Bool => bool_unary(op, out, x),
        _ => int_dispatch!(ct, op.name(), T => int_unary::<T>(op, out, x, ct)),
    }
}

/// Rounds a float32 to the 16-bit float `dt` and back (for ops ATen runs in
/// that type rather than in float32).
pub(crate) fn round_to(dt: DType) -> fn(f32) -> f32 {
    use crate::kernels::elementwise::half_bits::{
        bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits,
    };
    if dt == DType::F16 {
        |v| f16_bits_to_f32(f32_to_f16_bits(v))
    } else {
        |v| bf16_bits_to_f32(f32_to_bf16_bits(v))
    }
}

fn finite_range(dt: DType) -> (f64, f64) {
    match dt {
        DType::F16 => (-65504.0, 65504.0),
        DType::BF16 => (-3.389_531_389_251_535_5e38, 3.389_531_389_251_535_5e38),
        DType::F32 => (f32::MIN as f64, f32::MAX as f64),
        _ => (f64::MIN, f64::MAX),
    }
}

#[inline(always)]
fn nan_to_num<T: Real>(a: T, nan: T, posinf: T, neginf: T) -> T {
    if a.is_nan() {
        nan
    } else if a == T::INFINITY {
        posinf
    } else if a == -T::INFINITY {
        neginf
    } else {
        a
    }
}

/// ATen's `pow_tensor_scalar` for floats: special exponents become cheaper
/// (and differently rounded) expressions, exactly as on CPU.
fn float_pow_scalar<T: Real>(out: &Out, x: Operand, e: f64) -> Result<(), KernelError> {
    if e == 0.5 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.sqrt(),
        )
    } else if e == 2.0 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a * a,
        )
    } else if e == 3.0 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a * a * a,
        )
    } else if e == -0.5 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| T::ONE / a.sqrt(),
        )
    } else if e == -1.0 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| T::ONE / a,
        )
    } else if e == -2.0 {
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| T::ONE / (a * a),
        )
    } else {
        let e = T::c(e);
        run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| a.powf(e),
        )
    }
}

fn float_unary<T: Real>(op: &UnaryOp, out: &Out, x: Operand) -> Result<(), KernelError> {
    use UnaryOp::*;
    let z = T::ZERO;
    let one = T::ONE;
    match *op {
        Neg => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| -a,
        ),
        Abs => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.abs(),
        ),
        Sign => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| T::from_bool(a > z) - T::from_bool(a < z),
        ),
        Reciprocal => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| one / a,
        ),
        Sqrt => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.sqrt(),
        ),
        Rsqrt => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| one / a.sqrt(),
        ),
        Exp => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.exp(),
        ),
        Exp2 => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.exp2(),
        ),
        Expm1 => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.expm1(),
        ),
        Log => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.ln(),
        ),
        Log1p => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.ln1p(),
        ),
        Log2 => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.log2(),
        ),
        Log10 => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.log10(),
        ),
        Sin => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.sin(),
        ),
        Cos => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.cos(),
        ),
        Tan => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.tan(),
        ),
        Asin => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.asin(),
        ),
        Acos => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.acos(),
        ),
        Atan => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.atan(),
        ),
        Sinh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.sinh(),
        ),
        Cosh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.cosh(),
        ),
        Tanh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.tanh(),
        ),
        Asinh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.asinh(),
        ),
        Acosh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.acosh(),
        ),
        Atanh => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.atanh(),
        ),
        Erf => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.erf(),
        ),
        Erfc => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.erfc(),
        ),
        Erfinv => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.erfinv(),
        ),
        Lgamma => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.lgamma(),
        ),
        Digamma => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.digamma(),
        ),
        Polygamma { n } => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| polygamma(n, a),
        ),
        Entr => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| {
                if a.is_nan() {
                    a
                } else if a > z {
                    -a * a.ln()
                } else if a == z {
                    z
                } else {
                    -T::INFINITY
                }
            },
        ),
        Sinc => {
            let pi = T::c(std::f64::consts::PI);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| {
                    if a == z {
                        one
                    } else {
                        let p = pi * a;
                        p.sin() / p
                    }
                },
            )
        }
        Special(f) => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| f.eval(a),
        ),
        Hardshrink { lambd } => {
            let l = T::c(lambd);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| if a >= -l && a <= l { z } else { a },
            )
        }
        Softshrink { lambd } => {
            let l = T::c(lambd);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| {
                    if a > l {
                        a - l
                    } else if a < -l {
                        a + l
                    } else {
                        a * z
                    }
                },
            )
        }
        Signbit => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| one.copysign(a) < z,
        ),
        LogSigmoid => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| {
                let m = if a < z { a } else { z };
                m - (-a.abs()).exp().ln1p()
            },
        ),
        Sigmoid => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.sigmoid(),
        ),
        Floor => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.floor(),
        ),
        Ceil => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.ceil(),
        ),
        Trunc => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.trunc(),
        ),
        Frac => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a - a.trunc(),
        ),
        Round { decimals: 0 } => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.round_even(),
        ),
        Round { decimals } => {
            let p = T::c(10f64.powi(decimals.unsigned_abs().min(400) as i32));
            if decimals < 0 {
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| (a / p).round_even() * p,
                )
            } else {
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| (a * p).round_even() / p,
                )
            }
        }
        Relu => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| max_nan(a, z),
        ),
        LeakyRelu { negative_slope } => {
            let s = T::c(negative_slope);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| if a > z { a } else { a * s },
            )
        }
        Elu {
            alpha,
            scale,
            input_scale,
        } => {
            let neg = T::c(alpha) * T::c(scale);
            let pos = T::c(scale);
            let inp = T::c(input_scale);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| {
                    if a > z {
                        a * pos
                    } else {
                        ((a * inp).exp() - one) * neg
                    }
                },
            )
        }
        Gelu { tanh: false } => {
            let k = T::c(std::f64::consts::FRAC_1_SQRT_2);
            let half = T::c(0.5);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| a * half * (one + (a * k).erf()),
            )
        }
        Gelu { tanh: true } => {
            let beta = T::c(std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5);
            let kappa = T::c(0.044715);
            let half = T::c(0.5);
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| {
                    let inner = beta * (a + kappa * (a * a * a));
                    half * a * (one + inner.tanh())
                },
            )
        }
        Silu => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| a / (one + (-a).exp()),
        ),
        Mish => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a * a.exp().ln1p().tanh(),
        ),
        Softplus { beta, threshold } => {
            let (b, t) = (T::c(beta), T::c(threshold));
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| {
                    if a * b > t {
                        a
                    } else {
                        (a * b).exp().ln1p() / b
                    }
                },
            )
        }
        Hardsigmoid => {
            let (three, six) = (T::c(3.0), T::c(6.0));
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| min_nan(max_nan(a + three, z), six) / six,
            )
        }
        Hardswish => {
            let (three, six) = (T::c(3.0), T::c(6.0));
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| a * min_nan(max_nan(a + three, z), six) / six,
            )
        }
        Hardtanh { min, max } => {
            let (lo, hi) = (T::c(min), T::c(max));
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| min_nan(max_nan(a, lo), hi),
            )
        }
        Threshold { threshold, value } => {
            let (t, v) = (threshold.to::<T>(), value.to::<T>());
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| if a <= t { v } else { a },
            )
        }
        Logit { eps } => match eps {
            Some(e) if e >= 0.0 => {
                let lo = T::c(e);
                let hi = one - lo;
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| {
                        let c = if a < lo {
                            lo
                        } else if a > hi {
                            hi
                        } else {
                            a
                        };
                        (c / (one - c)).ln()
                    },
                )
            }
            _ => run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| (a / (one - a)).ln(),
            ),
        },
        NanToNum { .. } => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a,
        ),
        IsNan => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.is_nan(),
        ),
        IsInf => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.is_infinite(),
        ),
        IsPosInf => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a == T::INFINITY,
        ),
        IsNegInf => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a == -T::INFINITY,
        ),
        IsFinite => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.is_finite(),
        ),
        PowScalar { exponent } => float_pow_scalar::<T>(out, x, exponent.to_f64()),
        RPowScalar { base } => {
            let b = base.to::<T>();
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| b.powf(a),
            )
        }
        Clamp { min, max } => {
            let lo = min.map(|s| s.to::<T>());
            let hi = max.map(|s| s.to::<T>());
            match (lo, hi) {
                (Some(lo), Some(hi)) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| min_nan(max_nan(a, lo), hi),
                ),
                (Some(lo), None) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| max_nan(a, lo),
                ),
                (None, Some(hi)) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| min_nan(a, hi),
                ),
                (None, None) => Err(KernelError::InvalidArgument(
                    "torch.clamp: At least one of 'min' or 'max' must not be None".into(),
                )),
            }
        }
        LogicalNot | BitwiseNot | FrexpExponent => Err(unsupported(op.name(), T::DT)),
    }
}

fn int_unary<T: Int>(op: &UnaryOp, out: &Out, x: Operand, ct: DType) -> Result<(), KernelError> {
    use UnaryOp::*;
    let z = T::ZERO;
    match *op {
        Neg => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.wneg(),
        ),
        Abs => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a.wabs(),
        ),
        Sign => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| T::from_bool(a > z).wsub(T::from_bool(a < z)),
        ),
        Floor | Ceil | Trunc | Round { decimals: 0 } | NanToNum { .. } => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| a,
        ),
        Relu => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| if a > z { a } else { z },
        ),
        Threshold { threshold, value } => {
            let (t, v) = (threshold.to::<T>(), value.to::<T>());
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| if a <= t { v } else { a },
            )
        }
        Hardtanh { min, max } => {
            let (lo, hi) = (Scalar::Float(min).to::<T>(), Scalar::Float(max).to::<T>());
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| a.max(lo).min(hi),
            )
        }
        IsNan | IsInf | IsPosInf | IsNegInf => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |_a: T| false,
        ),
        Signbit => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            move |a: T| a < z,
        ),
        IsFinite => run1::<T, bool, _>(
            out,
            x,
            #[inline(always)]
            |_a: T| true,
        ),
        BitwiseNot => run1::<T, T, _>(
            out,
            x,
            #[inline(always)]
            |a: T| !a,
        ),
        PowScalar { exponent } => {
            let e = exponent.to::<T>();
            if e == T::from_i64(2) {
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    |a: T| a.wmul(a),
                )
            } else if e == T::from_i64(3) {
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    |a: T| a.wmul(a).wmul(a),
                )
            } else {
                run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| a.powi(e),
                )
            }
        }
        RPowScalar { base } => {
            let b = base.to::<T>();
            run1::<T, T, _>(
                out,
                x,
                #[inline(always)]
                move |a: T| b.powi(a),
            )
        }
        Clamp { min, max } => {
            let lo = min.map(|s| s.to::<T>());
            let hi = max.map(|s| s.to::<T>());
            match (lo, hi) {
                (Some(lo), Some(hi)) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| a.max(lo).min(hi),
                ),
                (Some(lo), None) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| a.max(lo),
                ),
                (None, Some(hi)) => run1::<T, T, _>(
                    out,
                    x,
                    #[inline(always)]
                    move |a: T| a.min(hi),
                ),
                (None, None) => Err(KernelError::InvalidArgument(
                    "torch.clamp: At least one of 'min' or 'max' must not be None".into(),
                )),
            }
        }
        _ => Err(unsupported(op.name(), ct)),
    }
}

fn bool_unary(op: &UnaryOp, out: &Out, x: Operand) -> Result<(), KernelError> {
    use UnaryOp::*;
    match *op {
        BitwiseNot => run1::<bool, bool, _>(
            out,
            x,
            #[inline(always)]
            |a: bool| !a,
        ),
        Sign | Abs | Floor | Ceil | Trunc | Round { decimals: 0 } | NanToNum { .. } => {
            run1::<bool, bool, _>(
                out,
                x,
                #[inline(always)]
                |a: bool| a,
            )
        }
        IsNan | IsInf | IsPosInf | IsNegInf | Signbit => run1::<bool, bool, _>(
            out,
            x,
            #[inline(always)]
            |_a: bool| false,
        ),
        IsFinite => run1::<bool, bool, _>(
            out,
            x,
            #[inline(always)]
            |_a: bool| true,
        ),
        Clamp { min, max } => {
            let lo = min.map(|s| s.to::<bool>());
            let hi = max.map(|s| s.to::<bool>());
            run1::<bool, bool, _>(
                out,
                x,
                #[inline(always)]
                move |a: bool| {
                    let a = lo.map_or(
                        a,
                        #[inline(always)]
                        |l| a.max(l),
                    );
                    hi.map_or(
                        a,
                        #[inline(always)]
                        |h| a.min(h),
                    )
                },
            )
        }
        _ => Err(unsupported(op.name(), DType::Bool)),
    }
}

/// Copies `x` into `out` converting dtypes (a pointwise identity); handy for
/// tests and for ops whose result is their input.
pub fn identity<'a>(out: impl Into<Target<'a>>, x: Operand) -> Result<(), KernelError> {
    let o = &Out {
        via: None,
        ..Out::new(out.into(), DType::F32)
    };
    let out = o.t;
    use crate::kernels::elementwise::iter::{run_convert, run_fill, run_rows, run_transpose};
    let fast = match x {
        Operand::Tensor(t) => run_convert(out, t)
            .or_else(|| run_transpose(out, t))
            .or_else(|| run_rows(out, t)),
        Operand::Scalar(v) => run_fill(out, v),
    };
    if let Some(r) = fast {
        return r;
    }
    dispatch_dtype!(out.dtype, T => run1::<T, T, _>(o, x, #[inline(always)] |a: T| a))
}
