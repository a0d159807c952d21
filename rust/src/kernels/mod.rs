//! Compute kernels of foo. They see memory as [`Strided`] views (raw pointer,
//! dtype, sizes, strides in elements) and know nothing of Python or torch.
//!
//! Every kernel is deterministic: the result does not depend on the number
//! of threads rayon uses.

pub mod copy;
pub mod dropout;
pub mod elementwise;
pub mod index;
pub mod linalg;
pub mod nn;
pub mod norm;
pub mod optim;
pub mod parallel;
pub mod pool;
pub mod random;
pub mod reduce;

use crate::dtype::DType;
use std::fmt;

/// Number of elements below which a kernel stays on the calling thread
/// (ATen's `GRAIN_SIZE`).
pub const GRAIN_SIZE: usize = 32768;

/// A strided view of memory as a kernel sees it.
///
/// `ptr` addresses element `[0, 0, ...]` (any storage offset is already
/// applied); `strides` count elements, not bytes, and may be zero (broadcast)
/// or negative.
#[derive(Clone, Debug)]
pub struct Strided {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub sizes: Vec<usize>,
    pub strides: Vec<isize>,
}

// SAFETY: a `Strided` is a description of memory; kernels that read or write
// through it take care that threads touch disjoint elements.
unsafe impl Send for Strided {}
unsafe impl Sync for Strided {}

impl Strided {
    pub fn new(ptr: *mut u8, dtype: DType, sizes: Vec<usize>, strides: Vec<isize>) -> Strided {
        Strided {
            ptr,
            dtype,
            sizes,
            strides,
        }
    }

    /// A contiguous (row-major) view.
    pub fn contiguous(ptr: *mut u8, dtype: DType, sizes: &[usize]) -> Strided {
        Strided {
            ptr,
            dtype,
            sizes: sizes.to_vec(),
            strides: contiguous_strides(sizes),
        }
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for (&s, &st) in self.sizes.iter().zip(&self.strides).rev() {
            if s != 1 && st != expected {
                return false;
            }
            expected *= s as isize;
        }
        true
    }
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
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::ShapeMismatch(m) => write!(f, "{m}"),
            KernelError::UnsupportedDtype { op, dtype } => {
                write!(f, "\"{op}\" not implemented for '{}' on foo", dtype.name())
            }
            KernelError::InvalidArgument(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for KernelError {}
