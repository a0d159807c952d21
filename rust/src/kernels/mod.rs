//! Compute kernels of foo. They see memory as [`Strided`] views (raw pointer,
//! dtype, sizes, strides in elements) and know nothing of Python or torch.
//!
//! Every kernel is deterministic: the result does not depend on the number
//! of threads rayon uses.

pub mod attention;
pub mod conv;
pub mod copy;
pub mod decomp;
pub mod dropout;
pub mod elementwise;
pub mod entry;
pub mod fft;
pub mod fused;
pub mod index;
pub mod linalg;
pub mod nn;
pub mod norm;
pub mod optim;
pub mod pad;
pub mod parallel;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod search;
pub mod select;
pub mod sort;
// The recurrences' entry points are crate-private and called from the PyO3 binding: without
// the "python" feature (cargo test, cargo bench) they are unused.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub mod rnn;

use crate::dtype::DType;
use smallvec::SmallVec;
use std::fmt;

/// Dimensions a view keeps inline, without a heap allocation (more spill to
/// the heap): building a view is per-call work on every op's path.
pub const INLINE_DIMS: usize = 6;
/// Sizes of a view.
pub type Sizes = SmallVec<[usize; INLINE_DIMS]>;
/// Strides of a view, in elements.
pub type Strides = SmallVec<[isize; INLINE_DIMS]>;

/// Number of elements below which a kernel stays on the calling thread
/// (ATen's `GRAIN_SIZE`).
pub const GRAIN_SIZE: usize = 32768;

/// Whether `strides` lay `sizes` out row-major and dense (dims of one
/// element may have any stride): the one contiguity rule of both view types.
pub fn is_contiguous(sizes: &[usize], strides: &[isize]) -> bool {
    let mut expected = 1isize;
    for (&s, &st) in sizes.iter().zip(strides).rev() {
        if s != 1 && st != expected {
            return false;
        }
        expected *= s as isize;
    }
    true
}

/// Whether `strides` lay `sizes` out densely and without overlap in some
/// order of the dims (a permutation of a contiguous layout; dims of one
/// element may have any stride): ATen's `is_non_overlapping_and_dense`.
/// Views of more than [`INLINE_DIMS`] dims count as not dense.
pub fn is_non_overlapping_and_dense(sizes: &[usize], strides: &[isize]) -> bool {
    if sizes.len() > INLINE_DIMS {
        return false;
    }
    // (stride, size) of the non-trivial dims, sorted by stride.
    let mut dims = [(0isize, 0usize); INLINE_DIMS];
    let mut n = 0;
    for (&s, &st) in sizes.iter().zip(strides) {
        if s == 1 {
            continue;
        }
        if st < 0 {
            return false;
        }
        let mut j = n;
        while j > 0 && dims[j - 1].0 > st {
            dims[j] = dims[j - 1];
            j -= 1;
        }
        dims[j] = (st, s);
        n += 1;
    }
    let mut expect = 1isize;
    for &(st, s) in &dims[..n] {
        if st != expect {
            return false;
        }
        expect *= s as isize;
    }
    true
}

/// Whether the byte ranges `[a0, a1)` and `[b0, b1)` share a byte (an empty
/// range shares none): the one overlap rule, used by [`Strided::overlaps`]
/// and by the SIMD loops on raw pointers.
#[inline(always)]
pub fn ranges_overlap((a0, a1): (usize, usize), (b0, b1): (usize, usize)) -> bool {
    a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1
}

/// A [`Strided`] view whose dims are borrowed (from a `Strided`, or from the
/// caller's arrays at the C boundary): checks and dense copies read it
/// without copying dims into a view of their own on every call.
#[derive(Clone, Copy, Debug)]
pub struct ViewRef<'a> {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub sizes: &'a [usize],
    pub strides: &'a [isize],
}

impl ViewRef<'_> {
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.sizes, self.strides)
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// The view with dims of its own.
    pub fn to_strided(&self) -> Strided {
        Strided::new(
            self.ptr,
            self.dtype,
            Sizes::from_slice(self.sizes),
            Strides::from_slice(self.strides),
        )
    }
}

/// A strided view of memory as a kernel sees it.
///
/// `ptr` addresses element `[0, 0, ...]` (any storage offset is already
/// applied); `strides` count elements, not bytes, and may be zero (broadcast)
/// or negative.
#[derive(Clone, Debug)]
pub struct Strided {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub sizes: Sizes,
    pub strides: Strides,
}

// SAFETY: a `Strided` is a description of memory; kernels that read or write
// through it take care that threads touch disjoint elements.
unsafe impl Send for Strided {}
unsafe impl Sync for Strided {}

impl Strided {
    pub fn new(
        ptr: *mut u8,
        dtype: DType,
        sizes: impl Into<Sizes>,
        strides: impl Into<Strides>,
    ) -> Strided {
        Strided {
            ptr,
            dtype,
            sizes: sizes.into(),
            strides: strides.into(),
        }
    }

    /// A contiguous (row-major) view.
    pub fn contiguous(ptr: *mut u8, dtype: DType, sizes: &[usize]) -> Strided {
        Strided {
            ptr,
            dtype,
            sizes: Sizes::from_slice(sizes),
            strides: contiguous_strides(sizes).into(),
        }
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// A complex view as its real dtype with a trailing dimension of 2
    /// (real, imaginary): `torch.view_as_real`'s layout. A real view as is.
    pub fn as_real(&self) -> Strided {
        if !self.dtype.is_complex() {
            return self.clone();
        }
        let mut sizes = self.sizes.clone();
        let mut strides: Strides = self.strides.iter().map(|&s| 2 * s).collect();
        sizes.push(2);
        strides.push(1);
        Strided::new(self.ptr, self.dtype.to_real(), sizes, strides)
    }

    /// The real (`part` 0) or imaginary (`part` 1) parts of a complex view,
    /// as a view of its real dtype (`.real` / `.imag`).
    pub fn complex_part(&self, part: usize) -> Strided {
        debug_assert!(self.dtype.is_complex() && part < 2);
        let real = self.dtype.to_real();
        let strides: Strides = self.strides.iter().map(|&s| 2 * s).collect();
        // SAFETY: the imaginary part is the second half of each element.
        let ptr = unsafe { self.ptr.add(part * real.size()) };
        Strided::new(ptr, real, self.sizes.clone(), strides)
    }

    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_contiguous(&self) -> bool {
        is_contiguous(&self.sizes, &self.strides)
    }

    /// See [`is_non_overlapping_and_dense`].
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        is_non_overlapping_and_dense(&self.sizes, &self.strides)
    }

    /// The view borrowed: its dims are not copied.
    pub fn as_view(&self) -> ViewRef<'_> {
        ViewRef {
            ptr: self.ptr,
            dtype: self.dtype,
            sizes: &self.sizes,
            strides: &self.strides,
        }
    }

    /// Byte range `[lo, hi)` the view's elements occupy (empty, at `ptr`,
    /// for no elements). The one extent rule every overlap check uses.
    ///
    /// # Panics
    /// If the extent overflows the address space: a view built from a live
    /// tensor never does ([`Strided::try_byte_range`] is the check for views
    /// from outside).
    pub fn byte_range(&self) -> (usize, usize) {
        self.try_byte_range()
            .expect("foo: a view's extent overflows the address space")
    }

    /// [`Strided::byte_range`], or `None` if the extent (or the view's
    /// sizes, strides or address) overflows the address space.
    pub fn try_byte_range(&self) -> Option<(usize, usize)> {
        let p = self.ptr as usize;
        if self.sizes.contains(&0) {
            return Some((p, p));
        }
        let (mut lo, mut hi) = (0isize, 0isize);
        for (&n, &st) in self.sizes.iter().zip(&self.strides) {
            let span = (isize::try_from(n).ok()? - 1).checked_mul(st)?;
            if span < 0 {
                lo = lo.checked_add(span)?;
            } else {
                hi = hi.checked_add(span)?;
            }
        }
        let es = self.dtype.size() as isize;
        let lo = p.checked_add_signed(lo.checked_mul(es)?)?;
        let hi = p.checked_add_signed(hi.checked_add(1)?.checked_mul(es)?)?;
        Some((lo, hi))
    }

    /// Whether the byte ranges of two non-empty views intersect.
    pub fn overlaps(&self, other: &Strided) -> bool {
        ranges_overlap(self.byte_range(), other.byte_range())
    }
}

/// Runs `f` on `out`, or, if `out` overlaps one of `inputs` (or is not
/// contiguous and `contiguous` is asked), on a contiguous scratch buffer that
/// is then copied into `out`. With `read`, the scratch starts as a copy of `out`.
pub fn with_out<R>(
    out: &Strided,
    inputs: &[Option<&Strided>],
    contiguous: bool,
    read: bool,
    f: impl FnOnce(&Strided) -> Result<R, KernelError>,
) -> Result<R, KernelError> {
    let clash = inputs.iter().flatten().any(|i| out.overlaps(i));
    if !clash && (!contiguous || out.numel() == 0 || out.is_contiguous()) {
        return f(out);
    }
    let bytes = out.numel() * out.dtype.size();
    let mut buf = vec![0u64; bytes.div_ceil(8).max(1)];
    let tmp = Strided::contiguous(buf.as_mut_ptr() as *mut u8, out.dtype, &out.sizes);
    if read {
        copy::copy(&tmp, out)?;
    }
    let r = f(&tmp)?;
    copy::copy(out, &tmp)?;
    Ok(r)
}

/// `out` of a reduction seen with the input's rank: size 1 (stride 0)
/// inserted at `dims` (sorted) unless it already has them (`keepdim`).
pub fn keepdim_view(mut s: Strided, ndim: usize, dims: &[usize]) -> Result<Strided, KernelError> {
    if s.ndim() == ndim {
        return Ok(s);
    }
    for &d in dims {
        if d > s.sizes.len() {
            return Err(KernelError::InvalidArgument(
                "foo: reduction dims out of range".into(),
            ));
        }
        s.sizes.insert(d, 1);
        s.strides.insert(d, 0);
    }
    if s.ndim() != ndim {
        return Err(KernelError::InvalidArgument(
            "foo: reduction output rank does not match".into(),
        ));
    }
    Ok(s)
}

/// Row-major strides (in elements) for `sizes`.
pub fn contiguous_strides(sizes: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; sizes.len()];
    let mut acc = 1isize;
    for i in (0..sizes.len()).rev() {
        strides[i] = acc;
        acc *= sizes[i].max(1) as isize;
    }
    strides
}

/// Why a kernel refused its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelError {
    /// Shapes that must match (or broadcast) do not.
    ShapeMismatch(String),
    /// The kernel does not support this dtype (or dtype combination).
    UnsupportedDtype { op: &'static str, dtype: DType },
    /// Any other invalid argument, with a message naming the op.
    InvalidArgument(String),
    /// Index operand `arg` holds `value`, outside its dimension (callers
    /// word it as CPU does for their op; unworded it is IndexError).
    IndexOutOfRange { arg: usize, value: i64 },
    /// An argument whose value the op does not know (an unknown reduction
    /// or loss name, a dtype code): ValueError.
    InvalidValue(String),
    /// An argument of a type the op does not take: TypeError.
    InvalidType(String),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::ShapeMismatch(m) => write!(f, "{m}"),
            KernelError::UnsupportedDtype { op, dtype } => {
                write!(f, "\"{op}\" not implemented for '{}' on foo", dtype.name())
            }
            KernelError::InvalidArgument(m) => write!(f, "{m}"),
            KernelError::IndexOutOfRange { arg, value } => {
                write!(
                    f,
                    "foo: index {value} is out of range (index operand {arg})"
                )
            }
            KernelError::InvalidValue(m) | KernelError::InvalidType(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for KernelError {}

/// The Python exception class a [`KernelError`] becomes, decided here once
/// for both ways into Rust (the PyO3 bindings and the C++ native path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorKind {
    Runtime = 0,
    NotImplemented = 1,
    Index = 2,
    Value = 3,
    Type = 4,
}

impl KernelError {
    /// An unsupported dtype is NotImplementedError (what CPU's dispatch
    /// macros raise: "... not implemented for 'Bool'"); with `index_errors`
    /// (kernels whose invalid arguments are bad indices: loss targets,
    /// gather indices) an invalid argument is IndexError, as on CPU; an
    /// index out of range no caller worded is IndexError, an invalid value
    /// ValueError, an invalid type TypeError; everything else RuntimeError.
    pub fn kind(&self, index_errors: bool) -> ErrorKind {
        match self {
            KernelError::UnsupportedDtype { .. } => ErrorKind::NotImplemented,
            KernelError::InvalidArgument(_) if index_errors => ErrorKind::Index,
            KernelError::IndexOutOfRange { .. } => ErrorKind::Index,
            KernelError::InvalidValue(_) => ErrorKind::Value,
            KernelError::InvalidType(_) => ErrorKind::Type,
            KernelError::ShapeMismatch(_) | KernelError::InvalidArgument(_) => ErrorKind::Runtime,
        }
    }
}

/// Tests: `n` uniform values in `[-0.5, 0.5)` from a 64-bit LCG seeded with
/// `seed` (the same sequence on every machine).
#[cfg(test)]
pub(crate) fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        })
        .collect()
}
