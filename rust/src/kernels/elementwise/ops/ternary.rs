//! Three-input pointwise ops.

use super::{int_dispatch, max_nan, min_nan, run3, unsupported, Int, Out, Target};
use crate::dispatch_dtype;
use crate::dtype::DType;
use crate::kernels::elementwise::cast::Scalar;
use crate::kernels::elementwise::iter::Operand;
use crate::kernels::elementwise::math::Real;
use crate::kernels::KernelError;

/// A three-input pointwise op `out = op(a, b, c)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TernaryOp {
    /// `where(a, b, c)`: `a` is the condition (read as bool); also
    /// `masked_fill(self, mask, value) = where(mask, value, self)`.
    Where,
    /// `lerp(a, b, weight=c)`.
    Lerp,
    /// `a + value * b * c`.
    Addcmul { value: Scalar },
    /// `a + value * b / c`.
    Addcdiv { value: Scalar },
    /// `clamp(a, min=b, max=c)` with tensor bounds.
    Clamp,
}

impl TernaryOp {
    pub fn name(&self) -> &'static str {
        match self {
            TernaryOp::Where => "where",
            TernaryOp::Lerp => "lerp",
            TernaryOp::Addcmul { .. } => "addcmul",
            TernaryOp::Addcdiv { .. } => "addcdiv",
            TernaryOp::Clamp => "clamp",
        }
    }
}

/// `out = op(a, b, c)`, computing in common dtype `ct` (of `b` and `c` for
/// `Where`, of all three otherwise).
pub fn ternary<'a>(
    op: &TernaryOp,
    out: impl Into<Target<'a>>,
    a: Operand,
    b: Operand,
    c: Operand,
    ct: DType,
) -> Result<(), KernelError> {
    let out = &Out::new(out.into(), ct);
    if let TernaryOp::Where = op {
        // Pure selection: work in the storage type itself (no float32 detour).
        return dispatch_dtype!(ct, T => run3::<bool, T, T, T, _>(out, a, b, c, #[inline(always)] |m, x, y| if m { x } else { y }));
    }
    match ct {
        DType::F32 | DType::F16 | DType::BF16 => float_ternary::<f32>(op, out, a, b, c),
        DType::F64 => float_ternary::<f64>(op, out, a, b, c),
        DType::Bool => Err(unsupported(op.name(), DType::Bool)),
        _ => int_dispatch!(ct, op.name(), T => int_ternary::<T>(op, out, a, b, c, ct)),
    }
}

fn float_ternary<T: Real>(
    op: &TernaryOp,
    out: &Out,
    a: Operand,
    b: Operand,
    c: Operand,
) -> Result<(), KernelError> {
    let one = T::ONE;
    match *op {
        TernaryOp::Lerp => {
            let half = T::c(0.5);
            run3::<T, T, T, T, _>(
                out,
                a,
                b,
                c,
                #[inline(always)]
                move |s, e, w: T| {
                    let small = w.abs() < half;
                    let coeff = if small { w } else { w - one };
                    let base = if small { s } else { e };
                    coeff.mul_add(e - s, base)
                },
            )
        }
        TernaryOp::Addcmul { value } => {
            let v = value.to::<T>();
            run3::<T, T, T, T, _>(
                out,
                a,
                b,
                c,
                #[inline(always)]
                move |s, x, y| s + v * x * y,
            )
        }
        TernaryOp::Addcdiv { value } => {
            let v = value.to::<T>();
            run3::<T, T, T, T, _>(
                out,
                a,
                b,
                c,
                #[inline(always)]
                move |s, x, y| s + v * x / y,
            )
        }
        TernaryOp::Clamp => run3::<T, T, T, T, _>(
            out,
            a,
            b,
            c,
            #[inline(always)]
            |x, lo, hi| min_nan(max_nan(x, lo), hi),
        ),
        TernaryOp::Where => unreachable!(),
    }
}

fn int_ternary<T: Int>(
    op: &TernaryOp,
    out: &Out,
    a: Operand,
    b: Operand,
    c: Operand,
    ct: DType,
) -> Result<(), KernelError> {
    match *op {
        TernaryOp::Addcmul { value } => {
            let v = value.to::<T>();
            run3::<T, T, T, T, _>(
                out,
                a,
                b,
                c,
                #[inline(always)]
                move |s: T, x: T, y| s.wadd(v.wmul(x).wmul(y)),
            )
        }
        TernaryOp::Clamp => run3::<T, T, T, T, _>(
            out,
            a,
            b,
            c,
            #[inline(always)]
            |x: T, lo, hi| x.max(lo).min(hi),
        ),
        _ => Err(unsupported(op.name(), ct)),
    }
}
