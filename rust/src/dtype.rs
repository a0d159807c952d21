//! Element types foo can hold: the one table of them. The C++ glue reads it
//! through `foo_rs_dtype_code` (rust/src/native.rs), the Python layer
//! (`foo_rs._dtypes`) through `_C.dtype_table()`, which gives each dtype's
//! code, name (its `torch.<name>`) and c10 `ScalarType` value.

use half::{bf16, f16};

/// An element type of a foo tensor.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool = 0,
    U8 = 1,
    I8 = 2,
    I16 = 3,
    I32 = 4,
    I64 = 5,
    F16 = 6,
    BF16 = 7,
    F32 = 8,
    F64 = 9,
    /// complex64: two f32 (real, imaginary), as c10::complex<float>.
    C64 = 10,
    /// complex128: two f64, as c10::complex<double>.
    C128 = 11,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
    ];

    /// The dtype with this numeric code, if any.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(code as usize).copied()
    }

    /// The dtype of a c10 `ScalarType` (its enum value), if foo holds it:
    /// the one table the C++ glue uses (c10's values are part of its ABI).
    pub fn from_c10(scalar_type: i32) -> Option<DType> {
        Some(match scalar_type {
            0 => DType::U8,
            1 => DType::I8,
            2 => DType::I16,
            3 => DType::I32,
            4 => DType::I64,
            5 => DType::F16,
            6 => DType::F32,
            7 => DType::F64,
            9 => DType::C64,
            10 => DType::C128,
            11 => DType::Bool,
            15 => DType::BF16,
            _ => return None,
        })
    }

    /// c10's `ScalarType` value of this dtype: [`DType::from_c10`] inverted,
    /// so that the mapping is written once.
    pub fn c10(self) -> i32 {
        (0..64)
            .find(|&st| DType::from_c10(st) == Some(self))
            .expect("DType::from_c10 maps a c10 value to every DType")
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    pub fn is_floating(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// The real dtype of a complex dtype's two parts (itself for a real dtype).
    pub fn to_real(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    pub fn is_integral(self) -> bool {
        matches!(
            self,
            DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }
}

/// Maps a Rust element type to its [`DType`].
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    };
}
element!(bool, Bool);
element!(u8, U8);
element!(i8, I8);
element!(i16, I16);
element!(i32, I32);
element!(i64, I64);
element!(f16, F16);
element!(bf16, BF16);
element!(f32, F32);
element!(f64, F64);

/// The one map from a [`DType`] to its Rust element type (the reverse of
/// [`Element`]): runs `$body` with the type alias `$t` bound to the element
/// type of `$dtype`.
///
/// - `dispatch_dtype!(dtype, T => body)`: every real dtype; a complex one
///   panics (complex tensors reach real kernels only through a gating bug:
///   complex work goes through `Strided::as_real` / `complex_part` or the
///   complex kernels, kernels/fft.rs).
/// - `dispatch_dtype!(dtype, [F32, F64], T => body, d => otherwise)`: the
///   listed dtypes only; any other value of `dtype` is matched by the pattern
///   `d` and gives `otherwise` (e.g. an `UnsupportedDtype` error). The
///   kernels' partial dispatch macros (`norm::dispatch_float!`,
///   `decomp`'s `by_dtype!`, `pool`'s `pool_types!`, `ops::int_dispatch!`)
///   are this form with their dtype set.
#[macro_export]
macro_rules! dispatch_dtype {
    (@type Bool) => { bool };
    (@type U8) => { u8 };
    (@type I8) => { i8 };
    (@type I16) => { i16 };
    (@type I32) => { i32 };
    (@type I64) => { i64 };
    (@type F16) => { half::f16 };
    (@type BF16) => { half::bf16 };
    (@type F32) => { f32 };
    (@type F64) => { f64 };
    ($dtype:expr, [$($d:ident),+ $(,)?], $t:ident => $body:expr, $other:pat => $otherwise:expr) => {
        match $dtype {
            $($crate::dtype::DType::$d => {
                type $t = $crate::dispatch_dtype!(@type $d);
                $body
            })+
            $other => $otherwise,
        }
    };
    ($dtype:expr, $t:ident => $body:expr) => {
        $crate::dispatch_dtype!(
            $dtype,
            [Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64],
            $t => $body,
            _ => panic!("foo: a real-only kernel was given a complex tensor")
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d as u8), Some(d));
        }
        assert_eq!(DType::from_code(12), None);
    }

    #[test]
    fn c10_values_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_c10(d.c10()), Some(d));
        }
    }

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DType::F16.size(), std::mem::size_of::<f16>());
        assert_eq!(DType::BF16.size(), std::mem::size_of::<bf16>());
        assert_eq!(DType::I64.size(), std::mem::size_of::<i64>());
        assert_eq!(DType::Bool.size(), std::mem::size_of::<bool>());
    }
}

/// A float's `static_cast` to an integer type as torch CPU computes it on
/// x86-64: the one rule for every float -> integer conversion foo makes
/// (copies, `.to()`, elementwise outputs). Rust's `as` saturates (NaN -> 0);
/// x86's truncating conversions give the "integer indefinite" value instead:
/// int64 through a 64-bit `cvttsd2si` (int64's minimum for NaN and out of
/// range); int32, int16 and int8 through a 32-bit conversion (int32's
/// minimum), then truncated; uint8 through int64 (c10's
/// `static_cast_with_inter_type`), then truncated.
pub trait FromFloat {
    fn from_float(v: f64) -> Self;
}

#[inline(always)]
fn to_i64_x86(v: f64) -> i64 {
    // -2^63 and 2^63 are exact in f64; NaN is in no range.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v) {
        v as i64
    } else {
        i64::MIN
    }
}

#[inline(always)]
fn to_i32_x86(v: f64) -> i32 {
    if v > -2_147_483_649.0 && v < 2_147_483_648.0 {
        v as i32
    } else {
        i32::MIN
    }
}

impl FromFloat for i64 {
    #[inline(always)]
    fn from_float(v: f64) -> i64 {
        to_i64_x86(v)
    }
}

impl FromFloat for u8 {
    #[inline(always)]
    fn from_float(v: f64) -> u8 {
        to_i64_x86(v) as u8
    }
}

macro_rules! from_float_via_i32 {
    ($($t:ty),*) => {$(
        impl FromFloat for $t {
            #[inline(always)]
            fn from_float(v: f64) -> $t {
                to_i32_x86(v) as $t
            }
        }
    )*};
}
from_float_via_i32!(i32, i16, i8);

#[cfg(test)]
mod from_float_tests {
    use super::FromFloat;

    #[test]
    fn nan_and_out_of_range_give_x86_integer_indefinite() {
        assert_eq!(i64::from_float(f64::NAN), i64::MIN);
        assert_eq!(i64::from_float(1e19), i64::MIN);
        assert_eq!(i64::from_float(-1e19), i64::MIN);
        assert_eq!(i64::from_float(-2.7), -2);
        assert_eq!(i32::from_float(3e9), i32::MIN);
        assert_eq!(i32::from_float(f64::NAN), i32::MIN);
        assert_eq!(i32::from_float(2_147_483_647.9), i32::MAX);
        assert_eq!(i16::from_float(1e5), -31072); // 100000 truncated to 16 bits
        assert_eq!(i16::from_float(f64::NAN), 0);
        assert_eq!(i8::from_float(f64::INFINITY), 0);
        assert_eq!(u8::from_float(-1.0), 255);
        assert_eq!(u8::from_float(300.0), 44);
        assert_eq!(u8::from_float(f64::NAN), 0);
    }
}
