use super::*;
use crate::allocator::Stat;
use proptest::prelude::*;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn check(a: &DeviceAllocator) {
    a.lock().check();
}

fn d(a: &DeviceAllocator) -> DeviceStats {
    a.stats().detailed
}

/// Frees `p`, which this test got from `a`.
fn release(a: &DeviceAllocator, p: *mut u8) {
    // SAFETY: tests free only pointers they allocated and no longer use.
    unsafe { a.free(p).unwrap() };
}

#[test]
fn allocates_aligned_and_tracks_stats() {
    let a = DeviceAllocator::new(0, 1 << 20);
    let p = a.allocate(100).unwrap();
    assert_eq!(p as usize % ALIGNMENT, 0);
    assert_eq!(a.live_blocks(), 1);
    assert!(a.stats().allocated_bytes_current >= 100);
    release(&a, p);
    assert_eq!(a.live_blocks(), 0);
    assert_eq!(a.stats().allocated_bytes_current, 0);
    check(&a);
}

#[test]
fn allocation_at_finds_the_live_allocation_holding_an_address() {
    let a = DeviceAllocator::new(0, 8 * MIB);
    let p1 = a.allocate(1000).unwrap() as usize;
    let p2 = a.allocate(1000).unwrap() as usize;
    let p3 = a.allocate(3000).unwrap() as usize;
    assert_eq!(
        (p2 - p1, p3 - p2),
        (1024, 1024),
        "one segment, in address order"
    );
    assert_eq!(a.allocation_at(p1), Some(p1..p1 + 1000));
    assert_eq!(a.allocation_at(p2 + 999), Some(p2..p2 + 1000));
    assert_eq!(a.allocation_at(p3 + 1500), Some(p3..p3 + 3000));
    // The rounding tail, the cached rest of the segment, and no segment at all.
    assert_eq!(a.allocation_at(p1 + 1000), None);
    assert_eq!(a.allocation_at(p3 + 3072), None);
    assert_eq!(a.allocation_at(p1.wrapping_sub(1)), None);
    assert_eq!(a.allocation_at(0), None);
    // A freed block holds no allocation; freeing the segment's first block
    // and then its neighbour (which absorbs it) moves the segment's head.
    release(&a, p1 as *mut u8);
    assert_eq!(a.allocation_at(p1), None);
    release(&a, p2 as *mut u8);
    check(&a);
    assert_eq!(a.allocation_at(p2), None);
    assert_eq!(a.allocation_at(p3), Some(p3..p3 + 3000));
    release(&a, p3 as *mut u8);
    check(&a);
    assert_eq!(a.allocation_at(p3), None);
}

#[test]
fn zero_bytes_is_null_and_free_of_null_is_noop() {
    let a = DeviceAllocator::new(0, 1 << 20);
    let p = a.allocate(0).unwrap();
    assert!(p.is_null());
    release(&a, p);
    assert_eq!(a.stats(), MemoryStats::default());
    check(&a);
}

#[test]
fn refuses_beyond_capacity() {
    let a = DeviceAllocator::new(3, 1024);
    match a.allocate(4096) {
        Err(AllocError::OutOfMemory {
            device: 3,
            requested: 4096,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(a.stats().num_ooms, 1);
    check(&a);
}

#[test]
fn rounds_to_512_and_picks_pool_and_segment_size() {
    assert_eq!(round_size(1), 512);
    assert_eq!(round_size(512), 512);
    assert_eq!(round_size(513), 1024);
    assert_eq!(round_size(MIB + 1), MIB + 512);
    assert_eq!(pool_for(MIB), Pool::Small);
    assert_eq!(pool_for(MIB + 512), Pool::Large);
    assert_eq!(segment_size(512), 2 * MIB);
    assert_eq!(segment_size(MIB), 2 * MIB);
    assert_eq!(segment_size(MIB + 512), 20 * MIB);
    assert_eq!(segment_size(10 * MIB - 512), 20 * MIB);
    assert_eq!(segment_size(10 * MIB), 10 * MIB);
    assert_eq!(segment_size(10 * MIB + 512), 12 * MIB);
    assert_eq!(segment_size(64 * MIB), 64 * MIB);

    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(1).unwrap();
    let s = d(&a);
    assert_eq!(s.allocated_bytes.all.current, 512);
    assert_eq!(s.requested_bytes.all.current, 1);
    assert_eq!(s.reserved_bytes.small_pool.current, 2 * MIB as i64);
    release(&a, p);
    check(&a);
}

#[test]
fn small_and_large_pools_are_separate() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let small = a.allocate(MIB).unwrap();
    let large = a.allocate(MIB + 1).unwrap();
    let s = d(&a);
    assert_eq!(s.segment.small_pool.current, 1);
    assert_eq!(s.segment.large_pool.current, 1);
    assert_eq!(s.reserved_bytes.small_pool.current, 2 * MIB as i64);
    assert_eq!(s.reserved_bytes.large_pool.current, 20 * MIB as i64);
    assert_eq!(s.allocated_bytes.small_pool.current, MIB as i64);
    assert_eq!(s.allocated_bytes.large_pool.current, (MIB + 512) as i64);
    assert_eq!(s.allocation.small_pool.current, 1);
    assert_eq!(s.allocation.large_pool.current, 1);
    // A large block is never served from the small pool's cache, and back.
    release(&a, small);
    let again = a.allocate(MIB + 1).unwrap();
    assert_ne!(again, small);
    assert_eq!(d(&a).segment.large_pool.current, 1);
    release(&a, large);
    release(&a, again);
    check(&a);
}

#[test]
fn splits_small_blocks_in_address_order() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(1000).unwrap();
    let q = a.allocate(3000).unwrap();
    assert_eq!(q as usize, p as usize + 1024);
    let s = d(&a);
    assert_eq!(s.segment.all.current, 1);
    assert_eq!(s.inactive_split.all.current, 1);
    assert_eq!(s.inactive_split_bytes.all.current, (2 * MIB - 4096) as i64);
    assert_eq!(a.cached_blocks(), 1);
    check(&a);

    // Small pool: a rest of 512 bytes is still split off, a rest of 0 is not.
    let b = DeviceAllocator::new(0, 1 << 30);
    let x = b.allocate(MIB).unwrap();
    let y = b.allocate(MIB - 512).unwrap();
    assert_eq!(b.cached_blocks(), 1);
    let z = b.allocate(512).unwrap();
    assert_eq!(z as usize, y as usize + MIB - 512);
    assert_eq!(b.cached_blocks(), 0);
    assert_eq!(d(&b).inactive_split.all.current, 0);
    for ptr in [p, q] {
        release(&a, ptr);
    }
    for ptr in [x, y, z] {
        release(&b, ptr);
    }
    check(&a);
    check(&b);
}

#[test]
fn large_blocks_split_only_above_1mib_of_rest() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(5 * MIB).unwrap();
    let s = d(&a);
    assert_eq!(s.reserved_bytes.large_pool.current, 20 * MIB as i64);
    assert_eq!(s.allocated_bytes.all.current, 5 * MIB as i64);
    assert_eq!(
        s.inactive_split_bytes.large_pool.current,
        (15 * MIB - COLOR_GAP) as i64,
        "the rest after the block's colouring gap"
    );
    release(&a, p);
    check(&a);

    // A rest of exactly 1 MiB stays in the block: CUDA splits only above it.
    let b = DeviceAllocator::new(0, 1 << 30);
    let p = b.allocate(19 * MIB).unwrap();
    let s = d(&b);
    assert_eq!(s.allocated_bytes.all.current, 20 * MIB as i64);
    assert_eq!(s.requested_bytes.all.current, 19 * MIB as i64);
    assert_eq!(b.cached_blocks(), 0);
    let q = b.allocate(18 * MIB + MIB / 2).unwrap();
    assert_eq!(d(&b).segment.all.current, 2);
    assert_eq!(b.cached_blocks(), 1, "a 1.5 MiB rest is split off");
    release(&b, p);
    release(&b, q);
    check(&b);
}

#[test]
fn large_blocks_of_aligned_sizes_are_coloured() {
    // 640x640 float32: a multiple of 64 KiB. Blocks split one after another
    // must not all sit at the same offset modulo the cache's set period.
    let a = DeviceAllocator::new(0, 1 << 30);
    let size = 640 * 640 * 4;
    let ps: Vec<usize> = (0..6).map(|_| a.allocate(size).unwrap() as usize).collect();
    check(&a);
    for w in ps.windows(2) {
        assert_eq!(
            w[1] - w[0],
            size + COLOR_GAP,
            "each block ends in a 1 KiB gap"
        );
    }
    let offsets: std::collections::BTreeSet<usize> = ps.iter().map(|p| p % (128 * KIB)).collect();
    assert_eq!(
        offsets.len(),
        ps.len(),
        "distinct offsets in a 128 KiB period"
    );
    let s = d(&a);
    assert_eq!(
        s.allocated_bytes.all.current,
        (6 * size) as i64,
        "gaps are not counted"
    );
    assert_eq!(s.requested_bytes.all.current, (6 * size) as i64);
    assert_eq!(s.reserved_bytes.all.current, 20 * MIB as i64);
    // Sizes that are not a multiple of 16 KiB are packed as before, and the
    // pool's small blocks never get a gap.
    let odd = a.allocate(size + 512).unwrap() as usize;
    let next = a.allocate(size).unwrap() as usize;
    assert_eq!(next - odd, size + 512);
    let small: Vec<usize> = (0..2)
        .map(|_| a.allocate(256 * KIB).unwrap() as usize)
        .collect();
    assert_eq!(small[1] - small[0], 256 * KIB);
    for p in ps.into_iter().chain([odd, next]).chain(small) {
        release(&a, p as *mut u8);
        check(&a);
    }
    assert_eq!(a.cached_blocks(), 2, "one free block per segment");
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes_current, 0);
}

#[test]
fn merges_with_both_neighbours() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let x = a.allocate(4 * KIB).unwrap();
    let y = a.allocate(4 * KIB).unwrap();
    let z = a.allocate(4 * KIB).unwrap();
    release(&a, x);
    check(&a);
    assert_eq!(a.cached_blocks(), 2);
    release(&a, z);
    check(&a);
    assert_eq!(a.cached_blocks(), 2, "z merged with the segment's tail");
    assert_eq!(d(&a).inactive_split.all.current, 2);
    release(&a, y);
    check(&a);
    assert_eq!(a.cached_blocks(), 1, "y merged with x before and z after");
    let s = d(&a);
    assert_eq!(s.inactive_split.all.current, 0);
    assert_eq!(s.inactive_split_bytes.all.current, 0);
    let w = a.allocate(12 * KIB).unwrap();
    assert_eq!(w, x, "the merged block starts at the segment");
    release(&a, w);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes_current, 0);
    check(&a);
}

#[test]
fn best_fit_takes_the_smallest_block_that_fits() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p12 = a.allocate(12 * MIB).unwrap();
    let p16 = a.allocate(16 * MIB).unwrap();
    let p14 = a.allocate(14 * MIB).unwrap();
    for p in [p12, p16, p14] {
        release(&a, p);
    }
    assert_eq!(a.cached_blocks(), 3);
    let q = a.allocate(13 * MIB).unwrap();
    assert_eq!(q, p14);
    assert_eq!(
        d(&a).allocated_bytes.all.current,
        14 * MIB as i64,
        "1 MiB rest not split"
    );
    let r = a.allocate(11 * MIB).unwrap();
    assert_eq!(r, p12);
    let t = a.allocate(15 * MIB).unwrap();
    assert_eq!(t, p16);
    assert_eq!(d(&a).num_device_alloc, 3);
    for p in [q, r, t] {
        release(&a, p);
    }
    check(&a);
}

#[test]
fn freed_64mib_block_is_reused_with_its_pages() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(64 * MIB).unwrap();
    assert_eq!(
        p as usize % (2 * MIB),
        0,
        "large segments are huge-page aligned"
    );
    // SAFETY: p is 64 MiB of writable memory we own.
    unsafe { std::ptr::write_bytes(p, 7, 64 * MIB) };
    release(&a, p);
    let q = a.allocate(64 * MIB).unwrap();
    assert_eq!(p, q);
    let s = d(&a);
    assert_eq!(s.num_device_alloc, 1);
    assert_eq!(s.reserved_bytes.all.current, 64 * MIB as i64);
    release(&a, q);
    check(&a);
}

#[test]
fn stats_follow_a_sequence() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(1000).unwrap();
    let q = a.allocate(30 * MIB).unwrap();
    release(&a, p);
    let s = a.stats();
    assert_eq!(s.allocated_bytes_current, 30 * MIB);
    assert_eq!(s.allocated_bytes_peak, 30 * MIB + 1024);
    assert_eq!(s.allocated_bytes_allocated, (30 * MIB + 1024) as u64);
    assert_eq!(s.allocated_bytes_freed, 1024);
    assert_eq!(s.reserved_bytes_current, 32 * MIB);
    assert_eq!(s.reserved_bytes_peak, 32 * MIB);
    assert_eq!(s.requested_bytes_current, 30 * MIB);
    assert_eq!(s.requested_bytes_peak, 30 * MIB + 1000);
    assert_eq!((s.active_current, s.active_peak), (1, 2));
    assert_eq!((s.allocation_count, s.free_count), (2, 1));
    assert_eq!((s.segment_current, s.segment_peak), (2, 2));
    let t = &s.detailed;
    assert_eq!(
        t.allocated_bytes.small_pool,
        Stat {
            current: 0,
            peak: 1024,
            allocated: 1024,
            freed: 1024
        }
    );
    assert_eq!(t.active_bytes, t.allocated_bytes);
    assert_eq!(t.active, t.allocation);
    assert_eq!(t.requested_bytes.large_pool.current, 30 * MIB as i64);
    assert_eq!(
        t.inactive_split.small_pool.current, 0,
        "the small segment is whole again"
    );
    release(&a, q);
    let s = a.stats();
    assert_eq!((s.allocated_bytes_current, s.active_current), (0, 0));
    assert_eq!(s.reserved_bytes_current, 32 * MIB, "segments stay cached");
    check(&a);
}

#[test]
fn resets_peaks_and_accumulated_stats() {
    let a = DeviceAllocator::new(0, 64 * MIB);
    let p = a.allocate(40 * MIB).unwrap();
    release(&a, p);
    let p = a.allocate(50 * MIB).unwrap(); // one retry
    assert!(a.allocate(40 * MIB).is_err()); // one OOM
    a.reset_peak_stats();
    let s = a.stats();
    assert_eq!(s.allocated_bytes_peak, 50 * MIB);
    assert_eq!(s.reserved_bytes_peak, 50 * MIB);
    assert_eq!(s.active_peak, 1);
    assert_eq!(s.detailed.requested_bytes.all.peak, 50 * MIB as i64);
    assert_ne!(s.allocated_bytes_allocated, 0);
    assert_eq!((s.num_alloc_retries, s.num_ooms), (2, 1));
    a.reset_accumulated_stats();
    let s = a.stats();
    assert_eq!(s.allocated_bytes_current, 50 * MIB, "current values stay");
    assert_eq!(
        (s.allocated_bytes_allocated, s.allocated_bytes_freed),
        (0, 0)
    );
    assert_eq!((s.reserved_bytes_allocated, s.reserved_bytes_freed), (0, 0));
    assert_eq!((s.allocation_count, s.free_count), (0, 0));
    assert_eq!((s.num_alloc_retries, s.num_ooms), (0, 0));
    assert_eq!(
        (s.detailed.num_device_alloc, s.detailed.num_device_free),
        (0, 0)
    );
    assert_eq!(s.allocated_bytes_peak, 50 * MIB, "peaks stay");
    release(&a, p);
    check(&a);
}

#[test]
fn capacity_retry_oom_and_recovery() {
    let a = DeviceAllocator::new(5, 64 * MIB);
    let p = a.allocate(40 * MIB).unwrap();
    release(&a, p);
    // 40 MiB cached + 50 MiB new > 64 MiB: the cache goes, then it fits.
    let q = a.allocate(50 * MIB).unwrap();
    let s = d(&a);
    assert_eq!((s.num_alloc_retries, s.num_ooms), (1, 0));
    assert_eq!((s.num_device_alloc, s.num_device_free), (2, 1));
    assert_eq!(s.reserved_bytes.all.current, 50 * MIB as i64);

    // 50 MiB in use: 20 MiB cannot fit even with the cache empty.
    let err = a.allocate(20 * MIB).unwrap_err();
    assert_eq!(
        err,
        AllocError::OutOfMemory {
            device: 5,
            requested: 20 * MIB,
            allocated: 50 * MIB,
            reserved: 50 * MIB,
            capacity: 64 * MIB
        }
    );
    assert!(err.to_string().contains("foo out of memory"), "{err}");
    let s = d(&a);
    assert_eq!((s.num_alloc_retries, s.num_ooms), (2, 1));
    assert_eq!(a.live_blocks(), 1);
    check(&a);

    // What fits still succeeds: 14 MiB is its own standard segment.
    let r = a.allocate(14 * MIB).unwrap();
    assert_eq!(a.stats().reserved_bytes_current, 64 * MIB);
    assert!(matches!(a.allocate(1), Err(AllocError::OutOfMemory { .. })));
    release(&a, q);
    // After freeing, a small request releases the cached 50 MiB and fits.
    let t = a.allocate(1).unwrap();
    assert_eq!(d(&a).num_ooms, 2);
    release(&a, r);
    release(&a, t);
    assert_eq!(a.live_blocks(), 0);
    check(&a);
}

#[test]
fn tight_capacity_falls_back_to_exact_segments() {
    // Standard segments (2 MiB small, 20 MiB large) would not fit at all.
    let a = DeviceAllocator::new(0, 3 * MIB);
    let p = a.allocate(3 * MIB / 2).unwrap();
    let q = a.allocate(MIB).unwrap();
    let s = d(&a);
    assert_eq!(s.reserved_bytes.large_pool.current, (3 * MIB / 2) as i64);
    assert_eq!(s.reserved_bytes.small_pool.current, MIB as i64);
    assert_eq!(s.num_alloc_retries, 0, "exact segments fit without a retry");
    assert!(a.allocate(MIB).is_err());
    assert_eq!(d(&a).num_alloc_retries, 1);
    release(&a, p);
    release(&a, q);
    check(&a);
}

#[test]
fn memory_fraction_limits_reserved_bytes() {
    let a = DeviceAllocator::new(0, 64 * MIB);
    a.set_memory_fraction(0.5);
    assert_eq!(a.capacity(), 32 * MIB);
    assert_eq!(a.total_memory(), 64 * MIB);
    assert!(a.allocate(40 * MIB).is_err());
    a.set_memory_fraction(2.0);
    assert_eq!(a.capacity(), 64 * MIB);
    let p = a.allocate(40 * MIB).unwrap();
    release(&a, p);
    check(&a);
}

#[test]
fn empty_cache_releases_only_whole_free_segments() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let s1 = a.allocate(4 * KIB).unwrap();
    let s2 = a.allocate(4 * KIB).unwrap();
    let l = a.allocate(30 * MIB).unwrap();
    release(&a, s1);
    release(&a, l);
    a.empty_cache();
    let s = d(&a);
    assert_eq!(
        s.reserved_bytes.all.current,
        2 * MIB as i64,
        "the small segment is still in use"
    );
    assert_eq!((s.num_device_alloc, s.num_device_free), (2, 1));
    assert_eq!(a.mem_get_info(), ((1 << 30) - 2 * MIB, 1 << 30));
    check(&a);
    release(&a, s2);
    a.empty_cache();
    let s = d(&a);
    assert_eq!(s.reserved_bytes.all.current, 0);
    assert_eq!(s.segment.all.current, 0);
    assert_eq!(s.reserved_bytes.all.freed, (32 * MIB) as i64);
    assert_eq!(a.cached_blocks(), 0);
    assert_eq!(a.mem_get_info(), (1 << 30, 1 << 30));
    check(&a);
}

#[test]
fn unknown_pointers_and_double_frees_are_errors() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let mut local = 0u8;
    let stack = &mut local as *mut u8;
    // SAFETY: free rejects pointers it did not hand out without touching them.
    let result = unsafe { a.free(stack) };
    assert_eq!(
        result,
        Err(AllocError::UnknownPointer {
            ptr: stack as usize
        })
    );
    let p = a.allocate(2048).unwrap();
    let inside = p.wrapping_add(512);
    // SAFETY: as above; `inside` is not the start of a block.
    assert!(unsafe { a.free(inside) }.is_err());
    release(&a, p);
    let before = a.stats();
    // SAFETY: as above; p was freed already.
    let result = unsafe { a.free(p) };
    assert_eq!(result, Err(AllocError::UnknownPointer { ptr: p as usize }));
    assert_eq!(a.stats(), before);
    let other = DeviceAllocator::new(1, 1 << 30);
    let q = other.allocate(100).unwrap();
    // SAFETY: as above; q belongs to another allocator.
    assert!(unsafe { a.free(q) }.is_err());
    release(&other, q);
    check(&a);
    check(&other);
}

#[test]
fn owns_addresses_inside_its_segments() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(3 * MIB).unwrap();
    assert!(a.owns(p));
    assert!(
        a.owns(p.wrapping_add(3 * MIB)),
        "the cached rest of the segment"
    );
    assert!(a.owns(p.wrapping_add(20 * MIB - 1)));
    assert!(!a.owns(p.wrapping_add(20 * MIB)));
    assert!(!a.owns(p.wrapping_sub(1)));
    assert!(!a.owns(std::ptr::null()));
    release(&a, p);
    assert!(a.owns(p), "cached memory is still the device's");
    a.empty_cache();
    assert!(!a.owns(p));
}

#[test]
fn oversized_requests_fail_cleanly() {
    let a = DeviceAllocator::new(0, 8 << 30);
    assert_eq!(
        a.allocate(usize::MAX),
        Err(AllocError::SizeOverflow {
            requested: usize::MAX
        })
    );
    assert!(matches!(
        a.allocate(1 << 40),
        Err(AllocError::OutOfMemory { .. })
    ));
    check(&a);
}

#[test]
fn stats_map_has_torch_keys_and_values() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let p = a.allocate(1000).unwrap();
    let q = a.allocate(3 * MIB).unwrap();
    release(&a, p);
    let m = a.stats_map();
    let get = |k: &str| {
        m.iter()
            .find(|e| e.0 == k)
            .unwrap_or_else(|| panic!("{k}"))
            .1
    };
    assert_eq!(m.len(), 122);
    assert_eq!(get("allocated_bytes.all.current"), 3 * MIB as i64);
    assert_eq!(get("allocated_bytes.all.peak"), (3 * MIB + 1024) as i64);
    assert_eq!(get("allocated_bytes.small_pool.freed"), 1024);
    assert_eq!(get("reserved_bytes.all.current"), 22 * MIB as i64);
    assert_eq!(get("reserved_bytes.large_pool.current"), 20 * MIB as i64);
    assert_eq!(get("segment.all.current"), 2);
    assert_eq!(get("active.all.current"), 1);
    assert_eq!(get("active_bytes.large_pool.current"), 3 * MIB as i64);
    assert_eq!(get("allocation.all.allocated"), 2);
    assert_eq!(get("requested_bytes.all.current"), 3 * MIB as i64);
    assert_eq!(get("inactive_split.large_pool.current"), 1);
    assert_eq!(
        get("inactive_split_bytes.large_pool.current"),
        (17 * MIB - COLOR_GAP) as i64,
        "the 3 MiB block keeps its colouring gap"
    );
    assert_eq!(get("num_device_alloc"), 2);
    assert_eq!(get("num_sync_all_streams"), 0);
    assert_eq!(get("max_split_size"), -1);
    assert_eq!(get("oversize_allocations.current"), 0);
    release(&a, q);
}

#[test]
fn memory_summary_is_a_table() {
    let a = DeviceAllocator::new(3, 1 << 30);
    let p = a.allocate(5 * MIB).unwrap();
    let text = a.memory_summary();
    assert!(text.contains("device ID 3"), "{text}");
    assert!(text.contains("Allocated memory"));
    assert!(text.contains("from small pool"));
    assert!(text.contains("Non-releasable memory"));
    assert!(text.lines().all(|l| l.chars().count() == 77), "{text}");
    release(&a, p);
}

#[test]
fn module_functions_reach_the_devices() {
    assert!(!crate::allocator::devices().is_empty());
    let p = crate::allocator::allocate(0, 4096).unwrap();
    assert_eq!(crate::allocator::device_of_ptr(p), Some(0));
    assert_eq!(
        crate::allocator::device_of_ptr(p.wrapping_add(100)),
        Some(0)
    );
    let host = 0u8;
    assert_eq!(crate::allocator::device_of_ptr(&host), None);
    // SAFETY: p came from device 0 and is not used again.
    unsafe { crate::allocator::free(0, p).unwrap() };
    assert!(matches!(
        crate::allocator::allocate(1000, 1),
        Err(AllocError::InvalidDevice { device: 1000, .. })
    ));
}

/// xorshift64*: enough randomness for the threads below.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn threads_allocate_and_free_concurrently() {
    let a = DeviceAllocator::new(0, 8 << 30);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let a = &a;
            scope.spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                let mut live: Vec<(*mut u8, usize, u8)> = Vec::new();
                for i in 0..3000 {
                    let r = next(&mut rng);
                    if live.len() < 64 && (!r.is_multiple_of(3) || live.is_empty()) {
                        let n = match r % 10 {
                            0 => 1 + (r >> 8) as usize % (24 * MIB),
                            1..=3 => 1 + (r >> 8) as usize % (2 * MIB),
                            _ => 1 + (r >> 8) as usize % (64 * KIB),
                        };
                        let p = a.allocate(n).unwrap();
                        let mark = (t as u8) ^ (i as u8);
                        // SAFETY: p has n >= 1 writable bytes of our own.
                        unsafe {
                            *p = mark;
                            *p.add(n - 1) = mark;
                        }
                        live.push((p, n, mark));
                    } else {
                        let (p, n, mark) = live.swap_remove((r >> 16) as usize % live.len());
                        // SAFETY: the block is still ours; another thread's
                        // overlapping block would have changed the marks.
                        unsafe {
                            assert_eq!((*p, *p.add(n - 1)), (mark, mark));
                        }
                        release(a, p);
                    }
                }
                for (p, _, _) in live {
                    release(a, p);
                }
            });
        }
    });
    assert_eq!(a.live_blocks(), 0);
    assert_eq!(a.stats().allocated_bytes_current, 0);
    assert_eq!(a.stats().requested_bytes_current, 0);
    check(&a);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes_current, 0);
}

#[test]
fn freed_small_blocks_wait_in_bins_and_are_reused_unmerged() {
    let a = DeviceAllocator::new(0, 1 << 30);
    let x = a.allocate(4 * KIB).unwrap();
    let y = a.allocate(4 * KIB).unwrap();
    let z = a.allocate(4 * KIB).unwrap();
    release(&a, x);
    release(&a, z);
    release(&a, y);
    {
        let s = a.lock();
        s.check();
        assert_eq!(
            s.bins[4 * KIB / MIN_BLOCK_SIZE].len(),
            3,
            "all three binned"
        );
        assert_eq!(s.binned, 12 * KIB);
        assert_eq!(
            s.free[0].len(),
            1,
            "only the segment's tail is in the free set"
        );
    }
    // The request of the size freed last takes that block back (LIFO).
    assert_eq!(a.allocate(4 * KIB - 100).unwrap(), y);
    assert_eq!(a.lock().binned, 8 * KIB);
    release(&a, y);
    // Any statistic read merges the bins first: what it reports is CUDA's
    // allocator's after the same frees (x, y, z merged with the tail).
    assert_eq!(a.cached_blocks(), 1);
    let s = d(&a);
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.inactive_split.all.current, 0);
    assert_eq!(s.active.all.freed, 4);
    assert_eq!(a.lock().binned, 0);
    check(&a);
    assert_eq!(
        a.allocate(12 * KIB).unwrap(),
        x,
        "the merged block starts at the segment"
    );
}

#[test]
fn bins_hold_at_most_binned_bytes_and_merge_before_a_new_segment() {
    // Two small segments of 64 KiB blocks, freed every other one first: the
    // bins take BINNED_BYTES of them (half of both segments), and the other
    // half, between binned neighbours, cannot merge.
    let a = DeviceAllocator::new(0, 4 * MIB);
    let blocks: Vec<*mut u8> = (0..64).map(|_| a.allocate(64 * KIB).unwrap()).collect();
    assert_eq!(d(&a).segment.all.current, 2);
    for &p in blocks
        .iter()
        .step_by(2)
        .chain(blocks.iter().skip(1).step_by(2))
    {
        release(&a, p);
    }
    {
        let s = a.lock();
        s.check();
        assert_eq!(s.binned, BINNED_BYTES);
        assert_eq!(
            s.free[0].len(),
            32,
            "no free block merged with a binned one"
        );
    }
    // No bin and no free block serves 1 MiB: the bins merge instead of a new
    // segment being reserved (the capacity, 4 MiB, is full anyway).
    let big = a.allocate(MIB).unwrap();
    assert_eq!(a.lock().binned, 0);
    let s = d(&a);
    assert_eq!(s.num_device_alloc, 2);
    assert_eq!(s.num_alloc_retries, 0);
    release(&a, big);
    a.empty_cache();
    assert_eq!(a.stats().reserved_bytes_current, 0);
    check(&a);
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    Free(usize),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..=4 * KIB).prop_map(Op::Alloc),
        2 => (4 * KIB..=2 * MIB).prop_map(Op::Alloc),
        1 => (2 * MIB..=24 * MIB).prop_map(Op::Alloc),
        5 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::EmptyCache),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_sequences_keep_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let a = DeviceAllocator::new(0, 96 * MIB);
        let mut live: Vec<(usize, usize)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(n) => match a.allocate(n) {
                    Ok(p) if n == 0 => prop_assert!(p.is_null()),
                    Ok(p) => {
                        prop_assert_eq!(p as usize % ALIGNMENT, 0);
                        live.push((p as usize, n));
                    }
                    Err(AllocError::OutOfMemory { reserved, capacity, .. }) => {
                        prop_assert!(reserved + round_size(n) > capacity);
                    }
                    Err(e) => prop_assert!(false, "{}", e),
                },
                Op::Free(i) if !live.is_empty() => {
                    let (p, _) = live.swap_remove(i % live.len());
                    release(&a, p as *mut u8);
                }
                Op::Free(_) => {}
                Op::EmptyCache => a.empty_cache(),
            }
            check(&a); // with blocks in the bins (reading stats merges them)
            let mut sorted = live.clone();
            sorted.sort_unstable();
            for w in sorted.windows(2) {
                prop_assert!(w[0].0 + w[0].1 <= w[1].0, "live blocks overlap");
            }
            let s = a.stats();
            let rounded: usize = live.iter().map(|&(_, n)| round_size(n)).sum();
            let large = live.iter().filter(|&&(_, n)| pool_for(round_size(n)) == Pool::Large).count();
            prop_assert!(s.allocated_bytes_current >= rounded);
            prop_assert!(s.allocated_bytes_current <= rounded + large * MIB, "only 1 MiB rests stay unsplit");
            prop_assert_eq!(s.requested_bytes_current, live.iter().map(|&(_, n)| n).sum::<usize>());
            prop_assert_eq!(a.live_blocks(), live.len());
            prop_assert!(s.reserved_bytes_current <= a.capacity());
            for &(p, n) in &live {
                prop_assert_eq!(a.allocation_at(p), Some(p..p + n));
                prop_assert_eq!(a.allocation_at(p + n - 1), Some(p..p + n));
                // Past the last byte: the rounding tail (None) or the next block.
                prop_assert!(a.allocation_at(p + n).is_none_or(|r| r.start == p + n));
            }
            check(&a);
        }
        for (p, _) in live {
            release(&a, p as *mut u8);
        }
        a.empty_cache();
        prop_assert_eq!(a.stats().allocated_bytes_current, 0);
        prop_assert_eq!(a.stats().reserved_bytes_current, 0);
    }
}
