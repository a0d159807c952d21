//! The PyO3 module `foo_rs._C`: a thin layer over the Rust core. Errors of
//! the core are mapped to Python exceptions here, in one place.

mod device;
mod elementwise;
mod index;
mod kernels;
mod linalg;
mod memory;

use crate::allocator::AllocError;
use crate::dtype::DType;
use crate::kernels::{KernelError, Strided};
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

extern "C" {
    /// Registers the PrivateUse1 hooks with ATen (rust/glue/foo_glue.cpp).
    fn foo_glue_init();
}

/// A tensor as it crosses into Rust: (data_ptr, dtype code, sizes, strides in elements).
pub(crate) type TensorDesc = (usize, u8, Vec<usize>, Vec<isize>);

/// The [`Strided`] view a [`TensorDesc`] describes.
pub(crate) fn strided(desc: TensorDesc) -> PyResult<Strided> {
    if crate::fork::in_bad_fork() {
        return Err(PyRuntimeError::new_err(crate::fork::BAD_FORK_MESSAGE));
    }
    let (ptr, code, sizes, strides) = desc;
    let dtype = DType::from_code(code)
        .ok_or_else(|| PyTypeError::new_err(format!("foo: unknown dtype code {code}")))?;
    if sizes.len() != strides.len() {
        return Err(PyValueError::new_err("foo: sizes and strides differ in length"));
    }
    Ok(Strided::new(ptr as *mut u8, dtype, sizes, strides))
}

/// Python's view of a core kernel error.
pub(crate) struct KernelErr(pub KernelError);

impl From<KernelError> for KernelErr {
    fn from(e: KernelError) -> Self {
        KernelErr(e)
    }
}

impl From<KernelErr> for PyErr {
    fn from(e: KernelErr) -> PyErr {
        let msg = e.0.to_string();
        match e.0 {
            KernelError::ShapeMismatch(_) => PyRuntimeError::new_err(msg),
            KernelError::UnsupportedDtype { .. } => PyRuntimeError::new_err(msg),
            KernelError::InvalidArgument(_) => PyRuntimeError::new_err(msg),
        }
    }
}

/// Python's view of an allocator error.
pub(crate) struct AllocErr(pub AllocError);

impl From<AllocError> for AllocErr {
    fn from(e: AllocError) -> Self {
        AllocErr(e)
    }
}

impl From<AllocErr> for PyErr {
    fn from(e: AllocErr) -> PyErr {
        let msg = e.0.to_string();
        match e.0 {
            // torch.OutOfMemoryError is raised by the glue for tensor
            // allocations; direct calls only see RuntimeError.
            AllocError::OutOfMemory { .. } => PyRuntimeError::new_err(msg),
            AllocError::InvalidDevice { .. } => PyRuntimeError::new_err(msg),
            AllocError::UnknownPointer { .. } => PyValueError::new_err(msg),
            AllocError::SizeOverflow { .. } => PyRuntimeError::new_err(msg),
        }
    }
}

/// Resolves an optional device index (None: the current device).
pub(crate) fn device_index(device: Option<i64>) -> PyResult<usize> {
    match device {
        None => Ok(crate::device::current()),
        Some(d) if d >= 0 && (d as usize) < crate::device::count() => Ok(d as usize),
        Some(d) => Err(PyIndexError::new_err(format!(
            "Invalid foo device index {d}: there are {} foo devices (set FOO_RS_DEVICE_COUNT to change)",
            crate::device::count()
        ))),
    }
}

/// Whether this process is a child forked after foo_rs was loaded.
#[pyfunction]
fn in_bad_fork() -> bool {
    crate::fork::in_bad_fork()
}

#[pymodule]
#[pyo3(name = "_C")]
fn foo_rs_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // SAFETY: idempotent registration; torch is loaded (foo_rs imports it first).
    unsafe { foo_glue_init() };
    crate::fork::install();
    m.add_function(wrap_pyfunction!(in_bad_fork, m)?)?;
    device::register(m)?;
    memory::register(m)?;
    kernels::register(m)?;
    elementwise::register(m)?;
    linalg::register(m)?;
    index::register(m)?;
    Ok(())
}
