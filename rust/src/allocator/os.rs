//! Segments of memory from the operating system.
//!
//! On Linux (x86_64, aarch64) segments are anonymous `mmap`s rather than
//! `std::alloc` blocks, for three reasons:
//! - `empty_cache` must really give memory back. glibc's malloc raises its
//!   mmap threshold (up to 32 MiB) after each large free, so 2 MiB and 20 MiB
//!   segments from `std::alloc` would end up in glibc's heap, which keeps
//!   them; `munmap` returns them at once.
//! - Large-pool segments whose size is a multiple of 2 MiB (every standard
//!   one) are 2 MiB-aligned and advised `MADV_HUGEPAGE`, so where transparent
//!   huge pages are on (`madvise` is the common default) the first touch of a
//!   big tensor costs one fault per 2 MiB instead of one per 4 KiB. Small-pool
//!   segments are not: their blocks are touched piecemeal, and one 512-byte
//!   tensor should not make 2 MiB resident and zeroed.
//! - Fresh mappings cost no physical memory until touched, like a device
//!   allocation that is reserved but not yet used.
//!
//! Elsewhere segments come from `std::alloc` with the same alignment.

/// Huge-page size: large-pool segments that are a multiple of it are
/// aligned to it.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Alignment every segment has at least (CUDA's block granularity).
pub(crate) const MIN_SEGMENT_ALIGN: usize = 512;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
    use super::HUGE_PAGE;
    use std::ffi::{c_int, c_void};

    // The values are those of <sys/mman.h> on x86_64 and aarch64 Linux; the
    // libc crate is not a dependency for three calls.
    const PROT_READ: c_int = 0x1;
    const PROT_WRITE: c_int = 0x2;
    const MAP_PRIVATE: c_int = 0x02;
    const MAP_ANONYMOUS: c_int = 0x20;
    const MADV_HUGEPAGE: c_int = 14;
    const MAP_FAILED: *mut c_void = !0usize as *mut c_void;

    extern "C" {
        fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: i64,
        ) -> *mut c_void;
        fn munmap(addr: *mut c_void, len: usize) -> c_int;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    fn map_anonymous(len: usize) -> Option<*mut u8> {
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory; failure is MAP_FAILED.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != MAP_FAILED).then_some(p.cast())
    }

    pub(super) fn map(size: usize, huge_pages: bool) -> Option<*mut u8> {
        if !huge_pages || !size.is_multiple_of(HUGE_PAGE) {
            // mmap is page-aligned, which is more than MIN_SEGMENT_ALIGN.
            return map_anonymous(size);
        }
        // Over-map by one huge page and trim both ends to a 2 MiB boundary.
        let raw = map_anonymous(size.checked_add(HUGE_PAGE)?)? as usize;
        let start = (raw + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
        let head = start - raw;
        let tail = HUGE_PAGE - head;
        // SAFETY: [raw, raw + size + HUGE_PAGE) is our fresh mapping; the
        // head and tail ranges lie inside it, start at page boundaries (raw
        // and start are page-aligned, 2 MiB is a multiple of the page size)
        // and nobody else has seen them.
        unsafe {
            if head > 0 {
                munmap(raw as *mut c_void, head);
            }
            if tail > 0 {
                munmap((start + size) as *mut c_void, tail);
            }
            // Advice only: without THP it fails harmlessly.
            madvise(start as *mut c_void, size, MADV_HUGEPAGE);
        }
        Some(start as *mut u8)
    }

    /// # Safety
    /// `ptr` and `size` must come from one [`map`] call, not yet unmapped.
    pub(super) unsafe fn unmap(ptr: *mut u8, size: usize) {
        // SAFETY: the caller passes a mapping of exactly this extent (for
        // 2 MiB multiples, the trimmed one that `map` returned).
        let rc = unsafe { munmap(ptr.cast(), size) };
        debug_assert_eq!(rc, 0, "munmap of a foo segment failed");
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod imp {
    use super::{HUGE_PAGE, MIN_SEGMENT_ALIGN};
    use std::alloc::{alloc, dealloc, Layout};

    fn layout(size: usize) -> Option<Layout> {
        let align = if size % HUGE_PAGE == 0 {
            HUGE_PAGE
        } else {
            MIN_SEGMENT_ALIGN
        };
        Layout::from_size_align(size, align).ok()
    }

    pub(super) fn map(size: usize, _huge_pages: bool) -> Option<*mut u8> {
        let layout = layout(size)?;
        // SAFETY: segments are never empty, so the layout has non-zero size.
        let p = unsafe { alloc(layout) };
        (!p.is_null()).then_some(p)
    }

    /// # Safety
    /// `ptr` and `size` must come from one [`map`] call, not yet unmapped.
    pub(super) unsafe fn unmap(ptr: *mut u8, size: usize) {
        let layout = layout(size).expect("segment layout was valid when mapped");
        // SAFETY: the caller guarantees `ptr` came from `alloc` with this
        // very layout (`layout` is a function of `size` only).
        unsafe { dealloc(ptr, layout) }
    }
}

/// Obtains a fresh segment of `size` (> 0) bytes, aligned to at least
/// [`MIN_SEGMENT_ALIGN`]. With `huge_pages`, a `size` that is a multiple of
/// [`HUGE_PAGE`] is aligned to it and backed by huge pages where the system
/// offers them. `None` when the system refuses.
pub(crate) fn map(size: usize, huge_pages: bool) -> Option<*mut u8> {
    debug_assert!(size > 0);
    imp::map(size, huge_pages)
}

/// Returns a segment to the system.
///
/// # Safety
/// `ptr` and `size` must come from one [`map`] call, and nothing may use the
/// memory afterwards.
pub(crate) unsafe fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: forwarded contract.
    unsafe { imp::unmap(ptr, size) }
}
