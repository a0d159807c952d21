//! foo's pinned host memory: the allocator behind `Tensor.pin_memory()`,
//! `torch.empty(..., pin_memory=True)` and DataLoader's pinning thread when
//! foo is the accelerator.
//!
//! foo's device memory is host memory too, so there is no DMA engine that
//! needs page-locked pages; what "pinned" means for foo is what the rest of
//! torch can observe: the block comes from this allocator, `is_pinned()` is
//! true for any pointer inside a live block, and blocks are cached and reused
//! the way CUDA's host caching allocator does it (sizes rounded up to a power
//! of two, freed blocks kept until `empty_cache`), with statistics of their
//! own (`torch.foo.host_memory_stats()`).

use super::os;
use super::stats::Stat;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Smallest block the host allocator hands out (one page).
pub const MIN_HOST_BLOCK: usize = 4096;

#[derive(Debug)]
struct Block {
    size: usize,
    in_use: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every block from the system, by address.
    blocks: BTreeMap<usize, Block>,
    /// Cached (freed) blocks by size.
    cached: HashMap<usize, Vec<usize>>,
    allocation: Stat,
    segment: Stat,
    allocated_bytes: Stat,
    reserved_bytes: Stat,
    num_host_alloc: i64,
    num_host_free: i64,
}

/// The pinned host memory allocator (one per process).
#[derive(Debug, Default)]
pub struct HostAllocator {
    inner: Mutex<Inner>,
}

/// The block size a request of `nbytes` (> 0) gets.
pub fn host_block_size(nbytes: usize) -> Option<usize> {
    nbytes.max(MIN_HOST_BLOCK).checked_next_power_of_two()
}

impl HostAllocator {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // As the device allocator's: every critical section updates the maps
        // and counters with nothing that could panic in between, so a
        // poisoned lock still guards valid state; and panicking here would
        // fail every later pinned allocation (and free: c10's deleter).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `nbytes`; null for zero bytes; `None` when the
    /// system refuses (or the size overflows).
    pub fn allocate(&self, nbytes: usize) -> Option<*mut u8> {
        if nbytes == 0 {
            return Some(std::ptr::null_mut());
        }
        let size = host_block_size(nbytes).filter(|s| *s <= isize::MAX as usize / 2)?;
        let mut g = self.lock();
        let addr = match g.cached.get_mut(&size).and_then(Vec::pop) {
            Some(a) => a,
            None => {
                let p = os::map(size, false).or_else(|| {
                    // Give the cache back and try once more.
                    Self::release_cached(&mut g);
                    os::map(size, false)
                })?;
                g.blocks.insert(
                    p as usize,
                    Block {
                        size,
                        in_use: false,
                    },
                );
                g.segment.increase(1);
                g.reserved_bytes.increase(size as i64);
                g.num_host_alloc += 1;
                p as usize
            }
        };
        g.blocks.get_mut(&addr).expect("host block").in_use = true;
        g.allocation.increase(1);
        g.allocated_bytes.increase(size as i64);
        Some(addr as *mut u8)
    }

    /// Returns a block to the cache; false if `ptr` is not a live block.
    pub fn free(&self, ptr: *mut u8) -> bool {
        let mut g = self.lock();
        let addr = ptr as usize;
        let size = match g.blocks.get_mut(&addr) {
            Some(b) if b.in_use => {
                b.in_use = false;
                b.size
            }
            _ => return false,
        };
        g.cached.entry(size).or_default().push(addr);
        g.allocation.decrease(1);
        g.allocated_bytes.decrease(size as i64);
        true
    }

    /// Whether `ptr` points into a live block.
    pub fn is_pinned(&self, ptr: *const u8) -> bool {
        let addr = ptr as usize;
        let g = self.lock();
        g.blocks
            .range(..=addr)
            .next_back()
            .is_some_and(|(start, b)| b.in_use && addr < start + b.size)
    }

    fn release_cached(g: &mut Inner) {
        let cached = std::mem::take(&mut g.cached);
        for (size, addrs) in cached {
            for a in addrs {
                g.blocks.remove(&a);
                // SAFETY: `a` came from `os::map(size)` and is not in use.
                unsafe { os::unmap(a as *mut u8, size) };
                g.segment.decrease(1);
                g.reserved_bytes.decrease(size as i64);
                g.num_host_free += 1;
            }
        }
    }

    /// Gives every cached block back to the system.
    pub fn empty_cache(&self) {
        Self::release_cached(&mut self.lock());
    }

    /// Statistics with the keys of `torch.cuda.host_memory_stats()`.
    pub fn stats_map(&self) -> Vec<(String, i64)> {
        let g = self.lock();
        let mut out = Vec::new();
        for (name, s) in [
            ("allocations", g.allocation),
            ("segment", g.segment),
            ("allocated_bytes", g.allocated_bytes),
            ("reserved_bytes", g.reserved_bytes),
        ] {
            out.push((format!("{name}.current"), s.current));
            out.push((format!("{name}.peak"), s.peak));
            out.push((format!("{name}.allocated"), s.allocated));
            out.push((format!("{name}.freed"), s.freed));
        }
        out.push(("num_host_alloc".into(), g.num_host_alloc));
        out.push(("num_host_free".into(), g.num_host_free));
        out
    }

    /// Resets the peaks to the current values.
    pub fn reset_peak_stats(&self) {
        let mut guard = self.lock();
        let g = &mut *guard;
        for s in [
            &mut g.allocation,
            &mut g.segment,
            &mut g.allocated_bytes,
            &mut g.reserved_bytes,
        ] {
            s.peak = s.current;
        }
    }

    /// Resets the allocated/freed sums and the system call counts.
    pub fn reset_accumulated_stats(&self) {
        let mut guard = self.lock();
        let g = &mut *guard;
        for s in [
            &mut g.allocation,
            &mut g.segment,
            &mut g.allocated_bytes,
            &mut g.reserved_bytes,
        ] {
            s.allocated = 0;
            s.freed = 0;
        }
        g.num_host_alloc = 0;
        g.num_host_free = 0;
    }
}

/// The process's pinned host allocator.
pub fn host() -> &'static HostAllocator {
    static HOST: OnceLock<HostAllocator> = OnceLock::new();
    HOST.get_or_init(HostAllocator::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(a: &HostAllocator, key: &str) -> i64 {
        a.stats_map().into_iter().find(|(k, _)| k == key).unwrap().1
    }

    #[test]
    fn caches_reuses_and_releases() {
        let a = HostAllocator::default();
        let p = a.allocate(5000).unwrap();
        assert!(a.is_pinned(p));
        // SAFETY: inside the 8192-byte block.
        assert!(a.is_pinned(unsafe { p.add(8191) }));
        assert!(!a.is_pinned(unsafe { p.add(8192) }));
        assert_eq!(stat(&a, "allocated_bytes.current"), 8192);
        assert!(a.free(p));
        assert!(!a.is_pinned(p), "a cached block is not a pinned tensor");
        assert!(!a.free(p), "double free is refused");
        let q = a.allocate(6000).unwrap();
        assert_eq!(p, q, "same size class reuses the cached block");
        assert_eq!(stat(&a, "num_host_alloc"), 1);
        assert!(a.free(q));
        a.empty_cache();
        assert_eq!(stat(&a, "reserved_bytes.current"), 0);
        assert_eq!(stat(&a, "num_host_free"), 1);
        assert_eq!(a.allocate(0), Some(std::ptr::null_mut()));
        assert!(!a.is_pinned(std::ptr::null()));
    }
}
