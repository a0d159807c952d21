//! Element conversions used when the engine loads an operand whose dtype
//! differs from the kernel's compute dtype, or stores a result into an output
//! of another dtype (ATen's "common dtype + cast" of TensorIterator).
//!
//! Conversions follow torch CPU's `static_cast` semantics where they are
//! defined: float to integer truncates toward zero (through int64, as c10
//! does for uint8), integer overflow wraps, anything to bool is `x != 0`,
//! float64 to float16/bfloat16 rounds through float32 like `c10::Half(double)`.
//!
//! Module direction: this module uses [`super::simd`] (bulk float16 /
//! bfloat16 <-> float32 for [`convert16`]) and [`super::half_bits`] (the
//! one-value bit conversions); neither uses this module.

use super::half_bits::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
use crate::dispatch_dtype;
use crate::dtype::{DType, FromFloat};
use half::{bf16, f16};

/// A Rust scalar operand (a Python number): ATen's `c10::Scalar` without
/// the complex case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }

    pub fn to_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::Float(f) => f != 0.0,
        }
    }

    pub fn is_floating(self) -> bool {
        matches!(self, Scalar::Float(_))
    }

    /// The value converted to the element type `T` (`Scalar::to<T>()`).
    #[inline]
    pub(crate) fn to<T: Num>(self) -> T {
        match self {
            Scalar::Bool(b) => T::from_bool(b),
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Float(f) => T::from_f64(f),
        }
    }
}

/// An element type the engine can load, store and compute in.
pub(crate) trait Num:
    Copy + Default + PartialEq + PartialOrd + Send + Sync + 'static
{
    const DT: DType;
    fn from_bool(v: bool) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_f32(v: f32) -> Self;
    fn from_f64(v: f64) -> Self;
    fn to_bool(self) -> bool;
    fn to_i64(self) -> i64;
    fn to_f32(self) -> f32;
    fn to_f64(self) -> f64;
}

/// `static_cast<D>(s)` with torch CPU semantics.
#[inline(always)]
pub(crate) fn cast<S: Num, D: Num>(s: S) -> D {
    match S::DT {
        DType::Bool => D::from_bool(s.to_bool()),
        DType::F64 => D::from_f64(s.to_f64()),
        DType::F32 | DType::F16 | DType::BF16 => D::from_f32(s.to_f32()),
        _ => D::from_i64(s.to_i64()),
    }
}

macro_rules! int_num {
    ($t:ty, $d:ident) => {
        impl Num for $t {
            const DT: DType = DType::$d;
            #[inline(always)]
            fn from_bool(v: bool) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                <$t as FromFloat>::from_float(v as f64)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t as FromFloat>::from_float(v)
            }
            #[inline(always)]
            fn to_bool(self) -> bool {
                self != 0
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
int_num!(u8, U8);
int_num!(i8, I8);
int_num!(i16, I16);
int_num!(i32, I32);
int_num!(i64, I64);

impl Num for bool {
    const DT: DType = DType::Bool;
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        v
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn to_bool(self) -> bool {
        self
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as u8 as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
}

impl Num for f32 {
    const DT: DType = DType::F32;
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        v as u8 as f32
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_bool(self) -> bool {
        self != 0.0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Num for f64 {
    const DT: DType = DType::F64;
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        v as u8 as f64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f64
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_bool(self) -> bool {
        self != 0.0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

impl Num for f16 {
    const DT: DType = DType::F16;
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        f16::from_bits(if v { 0x3C00 } else { 0 })
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        f16::from_bits(f32_to_f16_bits(v as f32))
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_bits(f32_to_f16_bits(v))
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        f16::from_bits(f32_to_f16_bits(v as f32))
    }
    #[inline(always)]
    fn to_bool(self) -> bool {
        (self.to_bits() & 0x7FFF) != 0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        f16_bits_to_f32(self.to_bits()) as i64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16_bits_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16_bits_to_f32(self.to_bits()) as f64
    }
}

impl Num for bf16 {
    const DT: DType = DType::BF16;
    #[inline(always)]
    fn from_bool(v: bool) -> Self {
        bf16::from_bits(if v { 0x3F80 } else { 0 })
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        bf16::from_bits(f32_to_bf16_bits(v as f32))
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_bits(f32_to_bf16_bits(v))
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        bf16::from_bits(f32_to_bf16_bits(v as f32))
    }
    #[inline(always)]
    fn to_bool(self) -> bool {
        (self.to_bits() & 0x7FFF) != 0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        bf16_bits_to_f32(self.to_bits()) as i64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16_bits_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        bf16_bits_to_f32(self.to_bits()) as f64
    }
}

/// Elements (of at most 4 bytes) a strided conversion stages at a time.
const TMP_WORDS: usize = 1024;

/// Reads `n` elements of dtype `src_dt` at `src` with `stride` (elements),
/// converts them to `dst_dt` and writes them contiguously at `dst`.
///
/// # Safety
/// `src` must address `n` readable elements along `stride`, `dst` must have
/// room for `n` elements of `dst_dt`, and the two must not overlap.
pub(crate) unsafe fn load(
    dst: *mut u8,
    dst_dt: DType,
    src: *const u8,
    src_dt: DType,
    stride: isize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    if dst_dt == src_dt {
        let es = src_dt.size();
        if stride == 1 {
            std::ptr::copy_nonoverlapping(src, dst, n * es);
        } else {
            gather_raw(dst, src, es, stride, n);
        }
        return;
    }
    if simd_conv(src_dt, dst_dt) {
        if stride == 1 {
            convert16(dst, dst_dt, src, src_dt, n);
            return;
        }
        // Gather strided elements first, then convert in bulk with SIMD. The
        // buffer is not zeroed: a zeroed 4 KiB on every call was a tenth of
        // a bfloat16 relu's time.
        let mut tmp = std::mem::MaybeUninit::<[u32; TMP_WORDS]>::uninit();
        let t = tmp.as_mut_ptr() as *mut u8;
        let (ses, des) = (src_dt.size(), dst_dt.size());
        let mut done = 0;
        while done < n {
            let m = (n - done).min(TMP_WORDS);
            let s = src.offset(done as isize * stride * ses as isize);
            gather_raw(t, s, ses, stride, m);
            convert16(dst.add(done * des), dst_dt, t, src_dt, m);
            done += m;
        }
        return;
    }
    dispatch_dtype!(src_dt, S => dispatch_dtype!(dst_dt, D => cast_loop::<S, D>(src as *const S, stride, dst as *mut D, 1, n)))
}

/// Converts `n` contiguous elements of `src_dt` at `src` to `dst_dt` and
/// writes them at `dst` with `stride` (elements).
///
/// # Safety
/// As for [`load`], with the roles swapped.
pub(crate) unsafe fn store(
    src: *const u8,
    src_dt: DType,
    dst: *mut u8,
    dst_dt: DType,
    stride: isize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    if dst_dt == src_dt {
        let es = src_dt.size();
        if stride == 1 {
            std::ptr::copy_nonoverlapping(src, dst, n * es);
        } else {
            scatter_raw(dst, src, es, stride, n);
        }
        return;
    }
    if simd_conv(src_dt, dst_dt) {
        if stride == 1 {
            convert16(dst, dst_dt, src, src_dt, n);
            return;
        }
        // Convert in bulk with SIMD, then scatter (buffer not zeroed, as in
        // `load`).
        let mut tmp = std::mem::MaybeUninit::<[u32; TMP_WORDS]>::uninit();
        let t = tmp.as_mut_ptr() as *mut u8;
        let (ses, des) = (src_dt.size(), dst_dt.size());
        let mut done = 0;
        while done < n {
            let m = (n - done).min(TMP_WORDS);
            let s = src.add(done * ses);
            let d = dst.offset(done as isize * stride * des as isize);
            convert16(t, dst_dt, s, src_dt, m);
            scatter_raw(d, t as *const u8, des, stride, m);
            done += m;
        }
        return;
    }
    dispatch_dtype!(src_dt, S => dispatch_dtype!(dst_dt, D => cast_loop::<S, D>(src as *const S, 1, dst as *mut D, stride, n)))
}

/// Whether `a -> b` converts between float32 and a 16-bit float, which the
/// SIMD tables do in bulk (F16C / AVX-512 for float16, bit arithmetic for
/// bfloat16; the same bits as the scalar conversions).
pub(crate) fn simd_conv(a: DType, b: DType) -> bool {
    matches!(
        (a, b),
        (DType::F32, DType::F16 | DType::BF16) | (DType::F16 | DType::BF16, DType::F32)
    )
}

/// Converts `n` contiguous elements for a pair [`simd_conv`] accepts.
///
/// # Safety
/// `src` holds `n` elements of `src_dt`, `dst` has room for `n` of `dst_dt`,
/// and the two do not overlap.
pub(crate) unsafe fn convert16(
    dst: *mut u8,
    dst_dt: DType,
    src: *const u8,
    src_dt: DType,
    n: usize,
) {
    match (src_dt, dst_dt) {
        (DType::F16, _) => super::simd::f16_to_f32(src as *const u16, dst as *mut f32, n),
        (DType::BF16, _) => super::simd::bf16_to_f32(src as *const u16, dst as *mut f32, n),
        (_, DType::F16) => super::simd::f32_to_f16(src as *const f32, dst as *mut u16, n),
        _ => super::simd::f32_to_bf16(src as *const f32, dst as *mut u16, n),
    }
}

#[inline(always)]
unsafe fn cast_loop<S: Num, D: Num>(src: *const S, ss: isize, dst: *mut D, ds: isize, n: usize) {
    if ss == 1 && ds == 1 {
        for i in 0..n {
            *dst.add(i) = cast::<S, D>(*src.add(i));
        }
    } else {
        for i in 0..n as isize {
            *dst.offset(i * ds) = cast::<S, D>(*src.offset(i * ss));
        }
    }
}

unsafe fn gather_raw(dst: *mut u8, src: *const u8, es: usize, stride: isize, n: usize) {
    if stride == 0 {
        // A broadcast run (an SE block's [n, c, 1, 1] scale over h x w, a
        // mean's gradient): a fill, where the general loop moved one element
        // per iteration.
        return fill_row(dst, src, es, n);
    }
    match es {
        1 => strided_copy::<u8>(dst, 1, src, stride, n),
        2 => strided_copy::<u16>(dst as *mut u16, 1, src as *const u16, stride, n),
        4 => strided_copy::<u32>(dst as *mut u32, 1, src as *const u32, stride, n),
        8 => strided_copy::<u64>(dst as *mut u64, 1, src as *const u64, stride, n),
        _ => strided_copy::<[u64; 2]>(dst as *mut [u64; 2], 1, src as *const [u64; 2], stride, n),
    }
}

unsafe fn scatter_raw(dst: *mut u8, src: *const u8, es: usize, stride: isize, n: usize) {
    match es {
        1 => strided_copy::<u8>(dst, stride, src, 1, n),
        2 => strided_copy::<u16>(dst as *mut u16, stride, src as *const u16, 1, n),
        4 => strided_copy::<u32>(dst as *mut u32, stride, src as *const u32, 1, n),
        8 => strided_copy::<u64>(dst as *mut u64, stride, src as *const u64, 1, n),
        _ => strided_copy::<[u64; 2]>(dst as *mut [u64; 2], stride, src as *const [u64; 2], 1, n),
    }
}

/// `n` copies of the `es`-byte element at `src` written from `dst`, a
/// vectorized fill at the SIMD level in use.
///
/// # Safety
/// `src` is readable, `dst` holds `n` writable elements.
pub(crate) unsafe fn fill_row(dst: *mut u8, src: *const u8, es: usize, n: usize) {
    super::simd::dispatch(
        #[inline(always)]
        || fill_any(dst, src, es, n),
    )
}

/// [`fill_row`] at the caller's SIMD level (for loops already inside a
/// [`super::simd::dispatch`]).
///
/// # Safety
/// As [`fill_row`].
#[inline(always)]
pub(crate) unsafe fn fill_any(dst: *mut u8, src: *const u8, es: usize, n: usize) {
    match es {
        1 => fill_raw::<u8>(dst, src, n),
        2 => fill_raw::<u16>(dst as *mut u16, src as *const u16, n),
        4 => fill_raw::<u32>(dst as *mut u32, src as *const u32, n),
        8 => fill_raw::<u64>(dst as *mut u64, src as *const u64, n),
        _ => fill_raw::<[u64; 2]>(dst as *mut [u64; 2], src as *const [u64; 2], n),
    }
}

#[inline(always)]
unsafe fn fill_raw<T: Copy>(dst: *mut T, src: *const T, n: usize) {
    let v = src.read_unaligned();
    for i in 0..n {
        dst.add(i).write_unaligned(v);
    }
}

#[inline(always)]
unsafe fn strided_copy<T: Copy>(dst: *mut T, ds: isize, src: *const T, ss: isize, n: usize) {
    for i in 0..n as isize {
        dst.offset(i * ds)
            .write_unaligned(src.offset(i * ss).read_unaligned());
    }
}

/// Reads one element of dtype `src_dt` at `src` and returns its bytes
/// converted to `dst_dt` (little-endian in the low bytes of a `u64`).
pub(crate) unsafe fn load_one(src: *const u8, src_dt: DType, dst_dt: DType) -> u64 {
    let mut out = 0u64;
    load(&mut out as *mut u64 as *mut u8, dst_dt, src, src_dt, 1, 1);
    out
}

/// The bytes of `s` converted to `dt`, as [`load_one`] returns them.
pub(crate) fn scalar_bits(s: Scalar, dt: DType) -> u64 {
    let mut out = 0u64;
    let p = &mut out as *mut u64;
    dispatch_dtype!(dt, T => unsafe { (p as *mut T).write(s.to::<T>()) });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_torch() {
        assert_eq!(cast::<f32, u8>(-1.0), 255);
        assert_eq!(cast::<f32, i32>(-2.7), -2);
        assert_eq!(cast::<i64, i8>(300), 44);
        assert!(cast::<f32, bool>(f32::NAN));
        assert!(!cast::<i32, bool>(0));
        assert_eq!(cast::<bool, f32>(true), 1.0);
        assert_eq!(cast::<i64, f32>(16777217), 16777216.0);
        assert_eq!(Scalar::Float(2.5).to::<i64>(), 2);
        assert_eq!(Scalar::Int(3).to::<f16>(), f16::from_f32(3.0));
    }
}
