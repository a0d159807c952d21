//! Device memory of foo: one allocator per foo device, configured from the
//! environment (`FOO_RS_DEVICE_COUNT`, `FOO_RS_DEVICE_MEMORY`).
//!
//! Each device has a caching allocator in the manner of PyTorch's CUDA
//! caching allocator: blocks are carved from large segments and cached when
//! freed, so memory that has been touched once is reused without page
//! faults (see [`DeviceAllocator`]).
//!
//! Public API used by the C++ glue (through `ffi`) and the Python bindings:
//! [`devices`], [`device`], [`allocate`], [`free`], [`device_of_ptr`], [`check_range`], [`DeviceAllocator`],
//! [`MemoryStats`], [`DeviceStats`], [`AllocError`].

mod config;
mod device;
pub mod history;
mod host;
mod os;
mod stats;

pub use config::{parse_memory_size, Config, DEFAULT_DEVICE_COUNT, DEFAULT_DEVICE_MEMORY};
pub use device::{BlockInfo, DeviceAllocator, SegmentInfo, ALIGNMENT};
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
    /// Bytes `[lo, hi)` that should be foo memory are not inside one live
    /// foo allocation ([`check_range`]).
    OutsideAllocation {
        /// First byte.
        lo: usize,
        /// One past the last byte.
        hi: usize,
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
            AllocError::OutsideAllocation { lo, hi } => write!(
                f,
                "foo: memory [{lo:#x}, {hi:#x}) is not inside one live foo allocation \
                 (a pointer or extent outside the tensor's storage)"
            ),
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
    device(index)?.free(ptr).map(drop)
}

/// The foo device whose memory holds `ptr`, if any.
pub fn device_of_ptr(ptr: *const u8) -> Option<usize> {
    devices().iter().position(|d| d.owns(ptr))
}

/// The device whose one live allocation holds every byte of `[lo, hi)`;
/// an empty range needs no memory (`Ok(None)`). Anything else, a range
/// reaching past its allocation's end or across two, is
/// [`AllocError::OutsideAllocation`].
pub fn check_range(lo: usize, hi: usize) -> Result<Option<usize>, AllocError> {
    if hi <= lo {
        return Ok(None);
    }
    for d in devices() {
        if let Some(a) = d.allocation_at(lo) {
            return if hi <= a.end {
                Ok(Some(d.index()))
            } else {
                Err(AllocError::OutsideAllocation { lo, hi })
            };
        }
    }
    Err(AllocError::OutsideAllocation { lo, hi })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_accepts_only_bytes_of_one_live_allocation() {
        let p = allocate(0, 1000).unwrap() as usize;
        let q = allocate(0, 512).unwrap() as usize;
        assert_eq!(check_range(p, p + 1000), Ok(Some(0)));
        assert_eq!(check_range(p + 10, p + 20), Ok(Some(0)));
        assert_eq!(check_range(q, q + 512), Ok(Some(0)));
        // Empty ranges need no memory, wherever they are.
        assert_eq!(check_range(8, 8), Ok(None));
        let outside = |lo, hi| Err(AllocError::OutsideAllocation { lo, hi });
        // Past the allocation's last byte (into its rounding tail or a neighbour).
        assert_eq!(check_range(p, p + 1001), outside(p, p + 1001));
        assert_eq!(
            check_range(p + 999, p + 1024 + 1),
            outside(p + 999, p + 1025)
        );
        // Not foo memory at all.
        let stack = 0u64;
        let a = &stack as *const u64 as usize;
        assert_eq!(check_range(a, a + 8), outside(a, a + 8));
        assert_eq!(check_range(16, 24), outside(16, 24));
        // (Freed blocks: device/tests.rs, on an allocator of its own: the
        // global one is shared with tests running alongside.)
        // SAFETY: both were allocated above and are not used again.
        unsafe {
            free(0, p as *mut u8).unwrap();
            free(0, q as *mut u8).unwrap();
        }
    }
}
