//! Device memory of foo: one allocator per foo device, configured from the
//! environment (`FOO_RS_DEVICE_COUNT`, `FOO_RS_DEVICE_MEMORY`).
//!
//! Each device has a caching allocator in the manner of PyTorch's CUDA
//! caching allocator: blocks are carved from large segments and cached when
//! freed, so memory that has been touched once is reused without page
//! faults (see [`DeviceAllocator`]).
//!
//! Public API used by the C++ glue (through `ffi`) and the Python bindings:
//! [`devices`], [`device`], [`allocate`], [`free`], [`device_of_ptr`], [`DeviceAllocator`],
//! [`MemoryStats`], [`DeviceStats`], [`AllocError`].

mod config;
mod device;
mod host;
mod os;
mod stats;

pub use config::{parse_memory_size, Config, DEFAULT_DEVICE_COUNT, DEFAULT_DEVICE_MEMORY};
pub use device::{DeviceAllocator, ALIGNMENT};
pub use host::{host, host_block_size, HostAllocator, MIN_HOST_BLOCK};
pub use stats::{DeviceStats, MemoryStats, Stat, StatArray};

use std::fmt;
use std::sync::OnceLock;

/// Why an allocator call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// The request does not fit in the device's capacity, even after the
    /// cache was released.
    OutOfMemory {
        /// Device index.
        device: usize,
        /// Bytes asked for.
        requested: usize,
        /// Bytes in blocks handed out at the time.
        allocated: usize,
        /// Bytes in segments at the time (after the cache was released).
        reserved: usize,
        /// The device's capacity limit.
        capacity: usize,
    },
    /// No foo device has this index.
    InvalidDevice {
        /// The index asked for.
        device: usize,
        /// Number of foo devices.
        count: usize,
    },
    /// The pointer was not handed out by this foo allocator, or was already
    /// freed.
    UnknownPointer {
        /// The pointer's address.
        ptr: usize,
    },
    /// The byte count is too large to be represented (over `isize::MAX / 2`).
    SizeOverflow {
        /// Bytes asked for.
        requested: usize,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory {
                device,
                requested,
                allocated,
                reserved,
                capacity,
            } => write!(
                f,
                "foo out of memory. Tried to allocate {} on foo:{device}. foo:{device} has a total \
                 capacity of {} of which {} is allocated by tensors and {} is reserved by the \
                 foo_rs caching allocator ({} free).",
                format_bytes(*requested),
                format_bytes(*capacity),
                format_bytes(*allocated),
                format_bytes(*reserved),
                format_bytes(capacity.saturating_sub(*reserved)),
            ),
            AllocError::InvalidDevice { device, count } => write!(
                f,
                "Invalid foo device index {device}: there are {count} foo devices \
                 (set FOO_RS_DEVICE_COUNT to change)"
            ),
            AllocError::UnknownPointer { ptr } => {
                write!(
                    f,
                    "foo allocator: pointer {ptr:#x} was not allocated on any foo device"
                )
            }
            AllocError::SizeOverflow { requested } => {
                write!(f, "foo allocator: a request of {requested} bytes overflows")
            }
        }
    }
}

impl std::error::Error for AllocError {}

/// Human-readable byte count ("1.50 GiB").
pub fn format_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

static DEVICES: OnceLock<Vec<DeviceAllocator>> = OnceLock::new();

/// Every foo device's allocator, created on first use from the environment.
pub fn devices() -> &'static [DeviceAllocator] {
    DEVICES.get_or_init(|| {
        let cfg = Config::from_env();
        (0..cfg.device_count)
            .map(|i| DeviceAllocator::new(i, cfg.device_memory))
            .collect()
    })
}

/// The allocator of foo device `index`.
pub fn device(index: usize) -> Result<&'static DeviceAllocator, AllocError> {
    let all = devices();
    all.get(index).ok_or(AllocError::InvalidDevice {
        device: index,
        count: all.len(),
    })
}

/// Allocates `nbytes` on foo device `index`. Zero bytes give a null pointer.
pub fn allocate(index: usize, nbytes: usize) -> Result<*mut u8, AllocError> {
    device(index)?.allocate(nbytes)
}

/// Returns `ptr` (from [`allocate`] on device `index`) to its allocator.
/// A null pointer is a no-op.
///
/// # Safety
/// `ptr` must not be used after this call.
pub unsafe fn free(index: usize, ptr: *mut u8) -> Result<(), AllocError> {
    if ptr.is_null() {
        return Ok(());
    }
    device(index)?.free(ptr)
}

/// The foo device whose memory holds `ptr`, if any.
pub fn device_of_ptr(ptr: *const u8) -> Option<usize> {
    devices().iter().position(|d| d.owns(ptr))
}
