//! Strided copy between any two views, with dtype conversion (`copy_`,
//! `_to_copy`, host <-> foo transfers), and `fill_`.

use super::parallel;
use super::{KernelError, Strided, GRAIN_SIZE};
use crate::dispatch_dtype;
use crate::dtype::{DType, FromFloat};
use half::{bf16, f16};

/// An address that crosses to pool threads.
#[derive(Clone, Copy)]
struct P(usize);

/// Conversions an element takes part in, with torch CPU's semantics.
pub trait Scalar: Copy + Send + Sync + 'static {
    fn to_f64(self) -> f64;
    fn to_i64(self) -> i64;
    fn is_float() -> bool;
    fn from_f64(v: f64) -> Self;
    fn from_i64(v: i64) -> Self;
}

macro_rules! int_scalar {
    ($t:ty) => {
        impl Scalar for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn is_float() -> bool {
                false
            }
            // CPU's float -> integer cast on x86-64 (one rule: dtype::FromFloat).
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t as FromFloat>::from_float(v)
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}
int_scalar!(u8);
int_scalar!(i8);
int_scalar!(i16);
int_scalar!(i32);
int_scalar!(i64);

impl Scalar for bool {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn is_float() -> bool {
        false
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

impl Scalar for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn is_float() -> bool {
        true
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f32
    }
}

impl Scalar for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn is_float() -> bool {
        true
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f64
    }
}

macro_rules! half_scalar {
    ($t:ty) => {
        impl Scalar for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self.to_f32() as i64
            }
            #[inline(always)]
            fn is_float() -> bool {
                true
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            // int -> float -> half, as c10 converts.
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
        }
    };
}
half_scalar!(f16);
half_scalar!(bf16);

/// Converts one element with torch CPU's casting rules.
#[inline(always)]
pub fn cast<S: Scalar, D: Scalar>(s: S) -> D {
    if S::is_float() {
        D::from_f64(s.to_f64())
    } else {
        D::from_i64(s.to_i64())
    }
}

/// Walks the element offsets (in elements) of linear indices
/// `start..start+len` of a view with `sizes`/`strides`, in row-major order.
#[inline]
pub fn for_each_offset(
    sizes: &[usize],
    strides: &[isize],
    start: usize,
    len: usize,
    mut f: impl FnMut(usize, isize),
) {
    let nd = sizes.len();
    if nd == 0 {
        if len > 0 {
            f(0, 0);
        }
        return;
    }
    let mut idx = vec![0usize; nd];
    let mut rem = start;
    let mut off = 0isize;
    for d in (0..nd).rev() {
        let s = sizes[d].max(1);
        idx[d] = rem % s;
        rem /= s;
        off += idx[d] as isize * strides[d];
    }
    let last = nd - 1;
    let (inner_size, inner_stride) = (sizes[last], strides[last]);
    let mut i = 0;
    while i < len {
        // Run along the innermost dimension without carries.
        let run = (inner_size - idx[last]).min(len - i);
        for k in 0..run {
            f(i + k, off + k as isize * inner_stride);
        }
        i += run;
        off += run as isize * inner_stride;
        idx[last] += run;
        if i >= len {
            break;
        }
        // Carry.
        let mut d = last;
        while idx[d] == sizes[d] {
            off -= idx[d] as isize * strides[d];
            idx[d] = 0;
            if d == 0 {
                break;
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
        }
    }
}

/// Merges adjacent dimensions that are contiguous with each other in every
/// operand, and drops size-1 dimensions. Returns sizes and per-operand strides.
pub fn coalesce(sizes: &[usize], strides: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut out_sizes: Vec<usize> = Vec::with_capacity(sizes.len());
    let mut out_strides: Vec<Vec<isize>> = vec![Vec::with_capacity(sizes.len()); strides.len()];
    for d in 0..sizes.len() {
        if sizes[d] == 1 {
            continue;
        }
        if let Some(&prev) = out_sizes.last() {
            let mergeable = strides
                .iter()
                .zip(out_strides.iter())
                .all(|(s, o)| *o.last().unwrap() == s[d] * sizes[d] as isize);
            if mergeable {
                let n = out_sizes.len();
                out_sizes[n - 1] = prev * sizes[d];
                for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                    *o.last_mut().unwrap() = s[d];
                }
                continue;
            }
        }
        out_sizes.push(sizes[d]);
        for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
            o.push(s[d]);
        }
    }
    (out_sizes, out_strides)
}

/// Strides of `src` broadcast to `shape` (size-1 and missing leading dims
/// get stride 0), or an error naming both shapes.
pub fn broadcast_strides(src: &Strided, shape: &[usize]) -> Result<Vec<isize>, KernelError> {
    if src.sizes.len() > shape.len() {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: source shape {:?} cannot be broadcast to {:?}",
            src.sizes, shape
        )));
    }
    let lead = shape.len() - src.sizes.len();
    let mut out = vec![0isize; shape.len()];
    for (i, (&s, &st)) in src.sizes.iter().zip(&src.strides).enumerate() {
        let target = shape[lead + i];
        if s == target {
            out[lead + i] = if s == 1 { 0 } else { st };
        } else if s == 1 {
            out[lead + i] = 0;
        } else {
            return Err(KernelError::ShapeMismatch(format!(
                "The size of tensor a ({s}) must match the size of tensor b ({target}) at non-singleton dimension {} (foo copy: source {:?}, destination {:?})",
                i, src.sizes, shape
            )));
        }
    }
    Ok(out)
}

struct Plan {
    sizes: Vec<usize>,
    dst_strides: Vec<isize>,
    src_strides: Vec<isize>,
}

unsafe fn copy_range<S: Scalar, D: Scalar>(
    dst: *mut D,
    src: *const S,
    plan: &Plan,
    start: usize,
    len: usize,
) {
    let nd = plan.sizes.len();
    // Both contiguous in the coalesced 1-d case.
    if nd == 1 && plan.dst_strides[0] == 1 && plan.src_strides[0] == 1 {
        let d = std::slice::from_raw_parts_mut(dst.add(start), len);
        let s = std::slice::from_raw_parts(src.add(start), len);
        for (o, &i) in d.iter_mut().zip(s) {
            *o = cast::<S, D>(i);
        }
        return;
    }
    // Offsets of the two operands advance together: walk the destination's,
    // and recompute the source offset from the same multi-index.
    let mut idx_src = 0isize;
    let mut first = true;
    let mut prev_linear = 0usize;
    let mut multi = vec![0usize; nd];
    for_each_offset(&plan.sizes, &plan.dst_strides, start, len, |i, doff| {
        let linear = start + i;
        if first {
            let mut rem = linear;
            idx_src = 0;
            for d in (0..nd).rev() {
                let s = plan.sizes[d].max(1);
                multi[d] = rem % s;
                rem /= s;
                idx_src += multi[d] as isize * plan.src_strides[d];
            }
            first = false;
        } else {
            debug_assert_eq!(linear, prev_linear + 1);
            let mut d = nd - 1;
            multi[d] += 1;
            idx_src += plan.src_strides[d];
            while multi[d] == plan.sizes[d] && d > 0 {
                idx_src -= multi[d] as isize * plan.src_strides[d];
                multi[d] = 0;
                d -= 1;
                multi[d] += 1;
                idx_src += plan.src_strides[d];
            }
        }
        prev_linear = linear;
        *dst.offset(doff) = cast::<S, D>(*src.offset(idx_src));
    });
}

fn run_copy<S: Scalar, D: Scalar>(dst: &Strided, src: &Strided, plan: Plan) {
    let n: usize = plan.sizes.iter().product();
    let dptr = dst.ptr as usize;
    let sptr = src.ptr as usize;
    let nchunks = n.div_ceil(GRAIN_SIZE).clamp(1, parallel::num_threads() * 4);
    if n < 2 * GRAIN_SIZE || nchunks == 1 {
        // SAFETY: the caller checked shapes; every offset is inside both views.
        unsafe { copy_range::<S, D>(dptr as *mut D, sptr as *const S, &plan, 0, n) };
        return;
    }
    let chunk = n.div_ceil(nchunks);
    parallel::parallel_for(nchunks, |c| {
        let start = c * chunk;
        let len = chunk.min(n.saturating_sub(start));
        if len > 0 {
            // SAFETY: chunks cover disjoint destination elements (a valid
            // destination view has no internal overlap).
            unsafe { copy_range::<S, D>(dptr as *mut D, sptr as *const S, &plan, start, len) };
        }
    });
}

/// Copies `src` (broadcast to `dst`'s shape) into `dst`, converting dtype.
/// The two views must not partially overlap (the caller resolves that).
pub fn copy(dst: &Strided, src: &Strided) -> Result<(), KernelError> {
    if dst.dtype.is_complex() || src.dtype.is_complex() {
        return copy_complex(dst, src);
    }
    let src_strides = broadcast_strides(src, &dst.sizes)?;
    let n = dst.numel();
    if n == 0 {
        return Ok(());
    }
    let (sizes, strides) = coalesce(&dst.sizes, &[&dst.strides, &src_strides]);
    let (sizes, dst_strides, src_strides) = if sizes.is_empty() {
        (vec![1], vec![0], vec![0])
    } else {
        let mut it = strides.into_iter();
        (sizes, it.next().unwrap(), it.next().unwrap())
    };
    // Same dtype, both dense: a parallel memcpy.
    if dst.dtype == src.dtype && sizes.len() == 1 && dst_strides[0] == 1 && src_strides[0] == 1 {
        let bytes = n * dst.dtype.size();
        let (d, s) = (dst.ptr as usize, src.ptr as usize);
        if d == s {
            return Ok(());
        }
        let chunk = (GRAIN_SIZE * 16).max(bytes.div_ceil(parallel::num_threads() * 2));
        if bytes <= chunk {
            // SAFETY: both views hold `bytes` bytes and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(s as *const u8, d as *mut u8, bytes) };
        } else {
            parallel::parallel_for(bytes.div_ceil(chunk), |c| {
                let start = c * chunk;
                let len = chunk.min(bytes - start);
                // SAFETY: disjoint byte ranges of the two buffers.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (s + start) as *const u8,
                        (d + start) as *mut u8,
                        len,
                    )
                };
            });
        }
        return Ok(());
    }
    let plan = Plan {
        sizes,
        dst_strides,
        src_strides,
    };
    dispatch_dtype!(src.dtype, S => dispatch_dtype!(dst.dtype, D => run_copy::<S, D>(dst, src, plan)));
    Ok(())
}

/// `copy` with a complex operand, with torch's casts: complex <-> complex
/// converts both parts; real -> complex sets the imaginary part to 0;
/// complex -> real keeps the real part (the caller warns, as torch does).
fn copy_complex(dst: &Strided, src: &Strided) -> Result<(), KernelError> {
    match (dst.dtype.is_complex(), src.dtype.is_complex()) {
        (true, true) => copy(&dst.as_real(), &src.as_real()),
        (true, false) => {
            // Check the shapes before writing anything.
            broadcast_strides(src, &dst.sizes)?;
            copy(&dst.complex_part(0), src)?;
            fill(&dst.complex_part(1), 0.0, 0, false)
        }
        _ => copy(dst, &src.complex_part(0)),
    }
}

/// Negates every element of a float32/float64 view in place (with
/// `Strided::complex_part(1)` of a complex view: `conj_physical_`; with
/// `Strided::as_real`: resolving a negative bit).
pub fn negate_in_place(dst: &Strided) -> Result<(), KernelError> {
    fn go<T: Copy + std::ops::Neg<Output = T>>(v: &Strided) {
        let (sizes, strides) = coalesce(&v.sizes, &[&v.strides]);
        let (sizes, st) = if sizes.is_empty() {
            (vec![1], vec![0])
        } else {
            (sizes, strides[0].clone())
        };
        let p = v.ptr as usize;
        let n: usize = sizes.iter().product();
        for_each_offset(&sizes, &st, 0, n, |_, off| {
            // SAFETY: offsets come from the view's own sizes and strides.
            unsafe {
                let e = (p as *mut T).offset(off);
                *e = -*e
            };
        });
    }
    if dst.numel() == 0 {
        return Ok(());
    }
    match dst.dtype {
        DType::F32 => go::<f32>(dst),
        DType::F64 => go::<f64>(dst),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "negate",
                dtype: d,
            })
        }
    }
    Ok(())
}

/// Negates the imaginary part of every element of a complex `dst` (what
/// `conj_physical_` does; a real `dst` is left alone, as torch does).
pub fn conj_in_place(dst: &Strided) -> Result<(), KernelError> {
    if !dst.dtype.is_complex() {
        return Ok(());
    }
    negate_in_place(&dst.complex_part(1))
}

/// Sets every element of a complex `dst` to `re + im*j`.
pub fn fill_complex(dst: &Strided, re: f64, im: f64) -> Result<(), KernelError> {
    if !dst.dtype.is_complex() {
        return fill(dst, re, 0, false);
    }
    fill(&dst.complex_part(0), re, 0, false)?;
    fill(&dst.complex_part(1), im, 0, false)
}

/// Sets every element of `dst` to `value` (given as f64 for floats/bools
/// or i64 for integers, converted with the casting rules).
pub fn fill(
    dst: &Strided,
    value_f64: f64,
    value_i64: i64,
    value_is_int: bool,
) -> Result<(), KernelError> {
    fn go<D: Scalar>(dst: &Strided, v: D) {
        let n = dst.numel();
        let (sizes, strides) = coalesce(&dst.sizes, &[&dst.strides]);
        let p = dst.ptr as usize;
        if sizes.len() <= 1
            && strides
                .first()
                .and_then(|s| s.first())
                .copied()
                .unwrap_or(1)
                == 1
        {
            // SAFETY: a dense view of n elements.
            let slice = unsafe { std::slice::from_raw_parts_mut(p as *mut D, n) };
            if n < 2 * GRAIN_SIZE {
                slice.fill(v);
            } else {
                let (len, chunk) = (slice.len(), GRAIN_SIZE * 4);
                let base = P(slice.as_mut_ptr() as usize);
                parallel::parallel_for(len.div_ceil(chunk), |c| {
                    let (s, e) = (c * chunk, ((c + 1) * chunk).min(len));
                    // SAFETY: tasks fill disjoint parts of the slice.
                    unsafe { std::slice::from_raw_parts_mut((base.0 as *mut D).add(s), e - s) }
                        .fill(v);
                });
            }
            return;
        }
        let st = &strides[0];
        for_each_offset(&sizes, st, 0, n, |_, off| {
            // SAFETY: offsets come from the view's own sizes and strides.
            unsafe { *(p as *mut D).offset(off) = v };
        });
    }
    if dst.numel() == 0 {
        return Ok(());
    }
    if dst.dtype.is_complex() {
        return fill_complex(
            dst,
            if value_is_int {
                value_i64 as f64
            } else {
                value_f64
            },
            0.0,
        );
    }
    dispatch_dtype!(dst.dtype, D => {
        let v: D = if value_is_int { D::from_i64(value_i64) } else { D::from_f64(value_f64) };
        go::<D>(dst, v)
    });
    Ok(())
}

/// Reads element 0 of a complex `src` as (real, imaginary).
pub fn read_complex(src: &Strided) -> (f64, f64) {
    (
        read_scalar(&src.complex_part(0)).0,
        read_scalar(&src.complex_part(1)).0,
    )
}

/// Reads element 0 of `src` as (f64, i64) for `_local_scalar_dense`.
pub fn read_scalar(src: &Strided) -> (f64, i64) {
    fn go<S: Scalar>(p: *const u8) -> (f64, i64) {
        // SAFETY: the caller passes a view with at least one element.
        let v = unsafe { *(p as *const S) };
        (v.to_f64(), v.to_i64())
    }
    if src.dtype.is_complex() {
        return read_scalar(&src.complex_part(0));
    }
    dispatch_dtype!(src.dtype, S => go::<S>(src.ptr))
}

/// Element 0 of a real `src` as the Python number `.item()` returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Bool(bool),
    Float(f64),
    Int(i64),
}

/// Element 0 of a real `src` as the number of its dtype's kind (bool, float,
/// integer): the one rule of `_local_scalar_dense` for both ways into Rust.
pub fn read_number(src: &Strided) -> Number {
    let (f, i) = read_scalar(src);
    if src.dtype == DType::Bool {
        Number::Bool(i != 0)
    } else if src.dtype.is_floating() {
        Number::Float(f)
    } else {
        Number::Int(i)
    }
}

/// The dtypes every copy supports (all of them).
pub fn supported(_d: DType) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::contiguous_strides;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize], strides: &[isize]) -> Strided {
        Strided::new(
            v.as_mut_ptr() as *mut u8,
            dtype,
            sizes.to_vec(),
            strides.to_vec(),
        )
    }

    #[test]
    fn transposed_copy_with_cast() {
        let mut src: Vec<f32> = (0..6).map(|x| x as f32 + 0.5).collect();
        let mut dst = vec![0i32; 6];
        // src viewed as 3x2 transposed of a 2x3.
        let s = view(&mut src, DType::F32, &[3, 2], &[1, 3]);
        let d = view(&mut dst, DType::I32, &[3, 2], &contiguous_strides(&[3, 2]));
        copy(&d, &s).unwrap();
        assert_eq!(dst, vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn broadcast_copy() {
        let mut src = vec![1u8, 2, 3];
        let mut dst = vec![0f64; 6];
        let s = view(&mut src, DType::U8, &[3], &[1]);
        let d = view(&mut dst, DType::F64, &[2, 3], &[3, 1]);
        copy(&d, &s).unwrap();
        assert_eq!(dst, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn mismatched_shapes_are_refused() {
        let mut src = vec![0f32; 4];
        let mut dst = vec![0f32; 6];
        let s = view(&mut src, DType::F32, &[4], &[1]);
        let d = view(&mut dst, DType::F32, &[6], &[1]);
        assert!(matches!(copy(&d, &s), Err(KernelError::ShapeMismatch(_))));
    }

    #[test]
    fn large_strided_copy_matches_serial() {
        let n = 300_000;
        let mut src: Vec<f32> = (0..2 * n).map(|x| x as f32).collect();
        let mut dst = vec![0f32; n];
        let s = view(&mut src, DType::F32, &[n], &[2]);
        let d = view(&mut dst, DType::F32, &[n], &[1]);
        copy(&d, &s).unwrap();
        assert!(dst.iter().enumerate().all(|(i, &v)| v == (2 * i) as f32));
    }

    #[test]
    fn negative_strides_and_4d() {
        let mut src: Vec<i64> = (0..24).collect();
        let mut dst = vec![0i64; 24];
        // Flip the last dim of a 2x3x4 tensor.
        let s = Strided::new(
            unsafe { (src.as_mut_ptr()).add(3) } as *mut u8,
            DType::I64,
            vec![2, 3, 4],
            vec![12, 4, -1],
        );
        let d = view(
            &mut dst,
            DType::I64,
            &[2, 3, 4],
            &contiguous_strides(&[2, 3, 4]),
        );
        copy(&d, &s).unwrap();
        assert_eq!(&dst[..8], &[3, 2, 1, 0, 7, 6, 5, 4]);
    }

    #[test]
    fn casting_rules() {
        assert_eq!(cast::<f32, u8>(-1.0), 255);
        assert!(cast::<f32, bool>(f32::NAN));
        assert_eq!(cast::<bool, f32>(true), 1.0);
        assert_eq!(cast::<i64, f16>(3), f16::from_f32(3.0));
        assert_eq!(cast::<f64, i32>(-2.7), -2);
    }

    #[test]
    fn complex_copies_follow_torch_casts() {
        // complex64 [1+2j, 3+4j] -> complex128, -> float32 (real part), and
        // float32 -> complex64 (imaginary 0).
        let mut c = vec![1f32, 2.0, 3.0, 4.0];
        let mut z = vec![0f64; 4];
        let s = view(&mut c, DType::C64, &[2], &[1]);
        let d = view(&mut z, DType::C128, &[2], &[1]);
        copy(&d, &s).unwrap();
        assert_eq!(z, vec![1.0, 2.0, 3.0, 4.0]);
        let mut r = vec![0f32; 2];
        copy(&view(&mut r, DType::F32, &[2], &[1]), &s).unwrap();
        assert_eq!(r, vec![1.0, 3.0]);
        let mut back = vec![9f32; 4];
        let rv = view(&mut r, DType::F32, &[2], &[1]);
        copy(&view(&mut back, DType::C64, &[2], &[1]), &rv).unwrap();
        assert_eq!(back, vec![1.0, 0.0, 3.0, 0.0]);
        fill_complex(&view(&mut back, DType::C64, &[2], &[1]), 5.0, -1.0).unwrap();
        assert_eq!(back, vec![5.0, -1.0, 5.0, -1.0]);
        conj_in_place(&view(&mut back, DType::C64, &[1], &[2])).unwrap();
        assert_eq!(back, vec![5.0, 1.0, 5.0, -1.0]);
        assert_eq!(
            read_complex(&view(&mut back, DType::C64, &[], &[])),
            (5.0, 1.0)
        );
    }

    #[test]
    fn fill_strided() {
        let mut v = vec![0i16; 6];
        let d = view(&mut v, DType::I16, &[3], &[2]);
        fill(&d, 0.0, 7, true).unwrap();
        assert_eq!(v, vec![7, 0, 7, 0, 7, 0]);
    }
}
