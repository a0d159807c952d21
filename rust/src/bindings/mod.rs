//! The PyO3 module `foo_rs._C`: a thin layer over the Rust core. Errors of
//! the core are mapped to Python exceptions here, in one place.

mod attention;
mod conv;
mod decomp;
mod device;
mod elementwise;
mod fft;
mod fused;
mod index;
mod kernels;
mod linalg;
mod memory;
mod nn_more;
mod norm_pool;
mod optim;
mod rnn;
mod runtime;
mod search;

use crate::allocator::{self, AllocError};
use crate::dtype::DType;
use crate::kernels::{ErrorKind, KernelError, Strided};
use pyo3::exceptions::{
    PyIndexError, PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;

extern "C" {
    /// Registers the PrivateUse1 hooks with ATen (rust/glue/foo_glue.cpp).
    fn foo_glue_init();
    /// `at::get_num_threads()`: foo's kernels follow `torch.set_num_threads`.
    fn foo_glue_num_threads() -> i32;
    /// The aten overloads with a fast-lane C++ kernel, comma-separated.
    fn foo_glue_fast_ops() -> *const std::ffi::c_char;
    /// Registers the fast-lane kernel of one overload (0 on success).
    fn foo_glue_register_fast(name: *const std::ffi::c_char) -> i32;
}

/// The aten overloads the glue has fast-lane C++ kernels for: the common case
/// (float foo tensors of one shape, or a tensor and a Python number) calls
/// Rust from C++ with no Python in between; other calls reach the overload's
/// Python kernel, registered as `foo_slow::<name>`.
#[pyfunction]
fn fast_ops() -> Vec<String> {
    // SAFETY: a static NUL-terminated string owned by the glue.
    let s = unsafe { std::ffi::CStr::from_ptr(foo_glue_fast_ops()) };
    s.to_string_lossy()
        .split(',')
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Threads foo's kernels use (follows `torch.set_num_threads`, or
/// `FOO_RS_NUM_THREADS`).
#[pyfunction]
fn num_threads() -> usize {
    crate::kernels::parallel::num_threads()
}

/// Registers the fast-lane kernel of `name` (an aten overload) for foo.
#[pyfunction]
fn register_fast(name: &str) -> PyResult<()> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("foo: bad op name"))?;
    // SAFETY: `c` is a valid C string; registration happens at import, under the GIL.
    match unsafe { foo_glue_register_fast(c.as_ptr()) } {
        0 => Ok(()),
        2 => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "foo: the kernel of {name} calls an op not registered before it"
        ))),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "foo: no fast-lane kernel for {name}"
        ))),
    }
}

extern "C" fn torch_num_threads() -> i32 {
    // SAFETY: plain call into ATen; torch is loaded before this module.
    unsafe { foo_glue_num_threads() }
}

/// A tensor as it crosses into Rust: (data_ptr, dtype code, sizes, strides in elements).
pub(crate) type TensorDesc = (usize, u8, Vec<usize>, Vec<isize>);

/// The [`Strided`] view a [`TensorDesc`] of foo memory describes: every
/// byte it reaches ([`Strided::try_byte_range`], the one extent rule) must
/// lie in one live allocation of a foo device ([`allocator::check_range`]);
/// a view of no elements needs no memory. Anything else (a stale or made-up
/// address, an extent past the end of the storage) is refused with
/// ValueError before a kernel touches it.
pub(crate) fn strided(desc: TensorDesc) -> PyResult<Strided> {
    let s = unchecked_view(desc)?;
    let (lo, hi) = extent(&s)?;
    allocator::check_range(lo, hi).map_err(AllocErr)?;
    Ok(s)
}

/// As [`strided`] for an argument that may be host memory (a CPU tensor,
/// pinned or not: the two sides of a copy between the host and foo). Such
/// memory belongs to torch's CPU allocator and cannot be checked here; a
/// view that reaches into foo memory at either end is held to
/// [`strided`]'s rule.
pub(crate) fn strided_host_or_foo(desc: TensorDesc) -> PyResult<Strided> {
    let s = unchecked_view(desc)?;
    let (lo, hi) = extent(&s)?;
    if hi > lo
        && (allocator::device_of_ptr(lo as *const u8).is_some()
            || allocator::device_of_ptr((hi - 1) as *const u8).is_some())
    {
        allocator::check_range(lo, hi).map_err(AllocErr)?;
    }
    Ok(s)
}

fn extent(s: &Strided) -> PyResult<(usize, usize)> {
    s.try_byte_range()
        .ok_or_else(|| PyValueError::new_err("foo: the view's extent overflows the address space"))
}

/// The view a [`TensorDesc`] describes, its memory unchecked.
fn unchecked_view(desc: TensorDesc) -> PyResult<Strided> {
    if crate::fork::in_bad_fork() {
        return Err(PyRuntimeError::new_err(crate::fork::BAD_FORK_MESSAGE));
    }
    let (ptr, code, sizes, strides) = desc;
    let dtype = DType::from_code(code)
        .ok_or_else(|| PyTypeError::new_err(format!("foo: unknown dtype code {code}")))?;
    if sizes.len() != strides.len() {
        return Err(PyValueError::new_err(
            "foo: sizes and strides differ in length",
        ));
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

/// Core kernel errors as Python exceptions; the class is
/// [`KernelError::kind`]'s (the one mapping, shared with the native path).
fn py_exception(kind: ErrorKind, msg: String) -> PyErr {
    match kind {
        ErrorKind::Runtime => PyRuntimeError::new_err(msg),
        ErrorKind::NotImplemented => PyNotImplementedError::new_err(msg),
        ErrorKind::Index => PyIndexError::new_err(msg),
        ErrorKind::Value => PyValueError::new_err(msg),
        ErrorKind::Type => PyTypeError::new_err(msg),
    }
}

impl From<KernelErr> for PyErr {
    fn from(e: KernelErr) -> PyErr {
        py_exception(e.0.kind(false), e.0.to_string())
    }
}

/// [`KernelErr`]'s mapping as a function, for `map_err`.
pub(crate) fn kernel_err(e: KernelError) -> PyErr {
    KernelErr(e).into()
}

/// As [`kernel_err`], for kernels whose invalid arguments are bad indices
/// (targets of a loss, gather indices): those raise IndexError, as on CPU.
pub(crate) fn kernel_index_err(e: KernelError) -> PyErr {
    py_exception(e.kind(true), e.to_string())
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
            AllocError::OutsideAllocation { .. } => PyValueError::new_err(msg),
        }
    }
}

/// Stream and event errors (rust/src/stream.rs) as Python exceptions:
/// RuntimeError, as torch.cuda's.
pub(crate) fn stream_err(e: crate::stream::StreamError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
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

/// The torch version the glue was compiled against, as a marker that
/// foo_rs/_torch_check.py finds in this library's bytes *before* loading it:
/// loading runs the glue's static initialisers (allocator, guard, kernel
/// registrations) against whatever torch is in the process, so a mismatch
/// must be caught without loading.
#[used]
static BUILT_TORCH_MARKER: &str =
    concat!("\0FOO_RS_BUILT_TORCH=", env!("FOO_RS_BUILT_TORCH"), "\0");

/// (seed, first block) for a draw of `blocks`: from `state` (an explicit
/// generator's (seed, offset), which the caller advances) or `device`'s
/// default generator.
fn stream(blocks: u64, device: Option<i64>, state: Option<(u64, u64)>) -> PyResult<(u64, u64)> {
    Ok(match state {
        Some(s) => s,
        None => crate::rng::reserve_default(device_index(device)?, blocks),
    })
}

/// The element types foo holds, in code order: (foo dtype code, name as in
/// `torch.<name>`, c10 `ScalarType` value), from rust/src/dtype.rs, the one
/// table of them (foo_rs._dtypes builds its `torch.dtype` map from this).
#[pyfunction]
fn dtype_table() -> Vec<(u8, &'static str, i32)> {
    DType::ALL
        .iter()
        .map(|&d| (d as u8, d.name(), d.c10()))
        .collect()
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
    crate::kernels::parallel::set_threads_hook(torch_num_threads);
    crate::fork::install();
    m.add("BUILT_TORCH_VERSION", env!("FOO_RS_BUILT_TORCH"))?;
    m.add_function(wrap_pyfunction!(in_bad_fork, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_table, m)?)?;
    m.add_function(wrap_pyfunction!(fast_ops, m)?)?;
    m.add_function(wrap_pyfunction!(register_fast, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    device::register(m)?;
    conv::register(m)?;
    memory::register(m)?;
    kernels::register(m)?;
    elementwise::register(m)?;
    fft::register(m)?;
    linalg::register(m)?;
    decomp::register(m)?;
    norm_pool::register(m)?;
    index::register(m)?;
    optim::register(m)?;
    rnn::register(m)?;
    runtime::register(m)?;
    attention::register(m)?;
    fused::register(m)?;
    search::register(m)?;
    nn_more::register(m)?;
    Ok(())
}
