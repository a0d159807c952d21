//! The pointwise ops of foo on top of the engine.
//!
//! Every entry point takes the output view(s), the inputs and the *common
//! dtype* `ct` the caller computed with torch's promotion rules (for ops that
//! promote integers to float, like `exp` or true division, the float dtype).
//! The kernels compute in `ct`, or in float32 for float16/bfloat16 (ATen's
//! "opmath" type); the engine casts inputs on load and outputs on store.

mod binary;
mod ternary;
mod unary;

pub use binary::{binary, BinaryOp, DivMode};
pub use ternary::{ternary, TernaryOp};
pub use unary::{identity, unary, UnaryOp};

use super::cast::Num;
use super::iter::{self, Layout, Operand};
use super::simd;
use crate::dtype::DType;
use crate::kernels::{KernelError, Strided};
use std::ops::{BitAnd, BitOr, BitXor, Not};

pub(crate) fn unsupported(op: &'static str, dtype: DType) -> KernelError {
    KernelError::UnsupportedDtype { op, dtype }
}

pub(crate) fn zero_division() -> KernelError {
    KernelError::InvalidArgument("ZeroDivisionError".into())
}

/// Where an op writes: the output view and how the call's views are laid
/// out ([`Layout`]). A plain `&Strided` converts to one of [`Layout::View`].
#[derive(Clone, Copy)]
pub struct Target<'a> {
    t: &'a Strided,
    layout: Layout,
}

impl<'a> Target<'a> {
    /// An output whose call comes with [`Layout::Iter`] views.
    pub fn iter(t: &'a Strided) -> Target<'a> {
        Target {
            t,
            layout: Layout::Iter,
        }
    }
}

impl<'a> From<&'a Strided> for Target<'a> {
    fn from(t: &'a Strided) -> Self {
        Target {
            t,
            layout: Layout::View,
        }
    }
}

/// The output of an op, the 16-bit common dtype its float32 kernel
/// rounds through (see `iter::run_via`), if any, and the views' layout.
#[derive(Clone, Copy)]
pub(crate) struct Out<'a> {
    pub t: &'a Strided,
    pub via: Option<DType>,
    pub layout: Layout,
}

impl<'a> Out<'a> {
    pub(crate) fn new(target: Target<'a>, ct: DType) -> Out<'a> {
        Out {
            t: target.t,
            via: matches!(ct, DType::F16 | DType::BF16).then_some(ct),
            layout: target.layout,
        }
    }
}

/// `out = f(x)` elementwise, computing in `A` -> `R`.
pub(crate) fn run1<A: Num, R: Num, F: Fn(A) -> R + Sync>(
    out: &Out,
    x: Operand,
    f: F,
) -> Result<(), KernelError> {
    let k = move |r: &simd::Rows| -> Result<(), KernelError> {
        // SAFETY: the engine passes rows of the declared dtypes.
        unsafe { simd::rows1(r, &f) };
        Ok(())
    };
    iter::run_via(&[(out.t, R::DT)], &[(x, A::DT)], &k, out.via, out.layout)
}

/// `out = f(a, b)` elementwise.
pub(crate) fn run2<A: Num, B: Num, R: Num, F: Fn(A, B) -> R + Sync>(
    out: &Out,
    a: Operand,
    b: Operand,
    f: F,
) -> Result<(), KernelError> {
    let k = move |r: &simd::Rows| -> Result<(), KernelError> {
        // SAFETY: as in `run1`.
        unsafe { simd::rows2(r, &f) };
        Ok(())
    };
    iter::run_via(
        &[(out.t, R::DT)],
        &[(a, A::DT), (b, B::DT)],
        &k,
        out.via,
        out.layout,
    )
}

/// `out = f(a, b)` for integer division-like ops: fails with
/// "ZeroDivisionError" (as ATen's `TORCH_CHECK(b != 0)`) if any `b` is 0.
pub(crate) fn run2_nonzero<T: Int, F: Fn(T, T) -> T + Sync>(
    out: &Out,
    a: Operand,
    b: Operand,
    f: F,
) -> Result<(), KernelError> {
    let k = move |r: &simd::Rows| -> Result<(), KernelError> {
        // SAFETY: as in `run1`.
        unsafe {
            // A broadcast divisor is one element per row.
            let len = if r.bcast & 2 != 0 { 1 } else { r.n };
            for j in 0..r.rows {
                if std::slice::from_raw_parts(r.inp::<T>(1, j), len).contains(&T::ZERO) {
                    return Err(zero_division());
                }
            }
            simd::rows2(r, &f)
        };
        Ok(())
    };
    iter::run_via(
        &[(out.t, T::DT)],
        &[(a, T::DT), (b, T::DT)],
        &k,
        out.via,
        out.layout,
    )
}

/// `out = f(a, b, c)` elementwise.
pub(crate) fn run3<A: Num, B: Num, C: Num, R: Num, F: Fn(A, B, C) -> R + Sync>(
    out: &Out,
    a: Operand,
    b: Operand,
    c: Operand,
    f: F,
) -> Result<(), KernelError> {
    let k = move |r: &simd::Rows| -> Result<(), KernelError> {
        // SAFETY: as in `run1`.
        unsafe { simd::rows3(r, &f) };
        Ok(())
    };
    iter::run_via(
        &[(out.t, R::DT)],
        &[(a, A::DT), (b, B::DT), (c, C::DT)],
        &k,
        out.via,
        out.layout,
    )
}

/// The type the kernels compute in for common dtype `ct` (ATen's opmath):
/// float32 for the 16-bit floats, `ct` otherwise.
pub fn compute_dtype(ct: DType) -> DType {
    match ct {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// NaN-propagating maximum (`torch.maximum`).
#[inline(always)]
pub(crate) fn max_nan<T: super::math::Real>(a: T, b: T) -> T {
    let m = if a > b { a } else { b };
    if a.is_nan() || b.is_nan() {
        T::NAN
    } else {
        m
    }
}

/// NaN-propagating minimum (`torch.minimum`).
#[inline(always)]
pub(crate) fn min_nan<T: super::math::Real>(a: T, b: T) -> T {
    let m = if a < b { a } else { b };
    if a.is_nan() || b.is_nan() {
        T::NAN
    } else {
        m
    }
}

/// Integer compute types with torch's integer semantics (wrapping overflow,
/// C-style truncating division, ATen's shift and power rules).
pub(crate) trait Int:
    Num
    + Ord
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    /// Truncating division; `o` must not be 0.
    fn wdiv(self, o: Self) -> Self;
    /// C remainder; `o` must not be 0.
    fn wrem(self, o: Self) -> Self;
    fn is_neg(self) -> bool;
    /// ATen `lshift`: 0 for negative or too large shift counts.
    fn shl_t(self, b: Self) -> Self;
    /// ATen `rshift`: sign fill for negative or too large shift counts.
    fn shr_t(self, b: Self) -> Self;
    /// ATen `powi`.
    fn powi(self, e: Self) -> Self;
}

macro_rules! int_impl {
    ($t:ty, $u:ty, $s:ty, $signed:expr) => {
        impl Int for $t {
            const ZERO: $t = 0;
            const ONE: $t = 1;
            #[inline(always)]
            fn wadd(self, o: $t) -> $t {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn wsub(self, o: $t) -> $t {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn wmul(self, o: $t) -> $t {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn wneg(self) -> $t {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn wabs(self) -> $t {
                if $signed && (self as $s) < 0 {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            #[inline(always)]
            fn wdiv(self, o: $t) -> $t {
                self.wrapping_div(o)
            }
            #[inline(always)]
            fn wrem(self, o: $t) -> $t {
                self.wrapping_rem(o)
            }
            #[inline(always)]
            fn is_neg(self) -> bool {
                $signed && (self as $s) < 0
            }
            #[inline(always)]
            fn shl_t(self, b: $t) -> $t {
                if (b as $s) < 0 || (b as $u as u64) >= <$t>::BITS as u64 {
                    0
                } else {
                    ((self as $u) << (b as u32)) as $t
                }
            }
            #[inline(always)]
            fn shr_t(self, b: $t) -> $t {
                let max_shift = <$t>::BITS - $signed as u32;
                if (b as $s) < 0 || (b as $u as u64) >= max_shift as u64 {
                    if $signed {
                        self >> (<$t>::BITS - 1)
                    } else {
                        0
                    }
                } else {
                    self >> (b as u32)
                }
            }
            #[inline(always)]
            fn powi(self, e: $t) -> $t {
                let mut a = self;
                let mut b = e;
                if $signed && (b as $s) < 0 {
                    if a == 1 {
                        return 1;
                    }
                    if $signed && (a as $s) == -1 {
                        return if (b as $s) % 2 != 0 { a } else { 1 };
                    }
                    return 0;
                }
                let mut r: $t = 1;
                while b != 0 {
                    if b & 1 != 0 {
                        r = r.wrapping_mul(a);
                    }
                    b >>= 1;
                    a = a.wrapping_mul(a);
                }
                r
            }
        }
    };
}
int_impl!(u8, u8, i8, false);
int_impl!(i8, u8, i8, true);
int_impl!(i16, u16, i16, true);
int_impl!(i32, u32, i32, true);
int_impl!(i64, u64, i64, true);

/// Runs `$body` with `$T` the float compute type of `$ct`: float32 for
/// float16 / bfloat16 too ([`compute_dtype`]: the ops compute in float32 and
/// round on store, as torch CPU does), float64 for float64.
macro_rules! float_dispatch {
    ($ct:expr, $name:expr, $T:ident => $body:expr) => {
        $crate::dispatch_dtype!(
            $crate::kernels::elementwise::ops::compute_dtype($ct),
            [F32, F64],
            $T => $body,
            d => Err($crate::kernels::elementwise::ops::unsupported($name, d))
        )
    };
}
pub(crate) use float_dispatch;

/// Runs `$body` with `$T` the integer type of `$ct` (bool has ops of its own).
macro_rules! int_dispatch {
    ($ct:expr, $name:expr, $T:ident => $body:expr) => {
        $crate::dispatch_dtype!(
            $ct,
            [U8, I8, I16, I32, I64],
            $T => $body,
            d => Err($crate::kernels::elementwise::ops::unsupported($name, d))
        )
    };
}
pub(crate) use int_dispatch;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_rules_follow_aten() {
        assert_eq!(3i32.shl_t(40), 0);
        assert_eq!(3i32.shl_t(-1), 0);
        assert_eq!((-8i32).shr_t(100), -1);
        assert_eq!(200u8.shr_t(9), 0);
        assert_eq!(1u8.shl_t(7), 128);
        assert_eq!(2i64.powi(10), 1024);
        assert_eq!(2i64.powi(-1), 0);
        assert_eq!((-1i64).powi(-3), -1);
        assert_eq!((-1i64).powi(-2), 1);
        assert_eq!(1i8.powi(-5), 1);
        assert_eq!(3u8.powi(6), 217); // 729 wraps
        assert_eq!((-128i8).wabs(), -128);
        assert_eq!(i64::MIN.wdiv(-1), i64::MIN);
    }
}
