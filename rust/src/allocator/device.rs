//! One foo device's caching allocator, after PyTorch's CUDA caching
//! allocator (`c10/cuda/CUDACachingAllocator.cpp`).
//!
//! Requests are rounded up to 512 bytes. Rounded sizes up to 1 MiB come from
//! the small pool, whose segments are 2 MiB; larger ones from the large pool,
//! whose segments are 20 MiB for requests under 10 MiB and the request
//! rounded up to 2 MiB otherwise. A request takes the smallest cached block
//! that fits (best fit on `(size, address)`), split when the rest is worth
//! keeping; a freed block merges with free neighbours of its segment and
//! stays cached until `empty_cache`. Fully free segments go back to the
//! system only then, or when a new segment would exceed the capacity.
//!
//! The point of the cache for foo is that the pages of a cached block are
//! already faulted in: a fresh output tensor reuses them, so elementwise
//! kernels run at memory bandwidth instead of paying a page fault per 4 KiB.
//!
//! Small blocks are coalesced lazily, as glibc's fastbins do: a freed small
//! block first waits, unmerged, in a bin of its exact size (up to
//! [`BINNED_BYTES`] in all), and the next request of that size takes it back
//! without touching the ordered free set. Binned blocks are merged (and
//! booked as CUDA books a free) before anything needs the free set to be
//! whole: a request the free set cannot serve, `empty_cache`, and every
//! statistic read. So what callers observe is CUDA's allocator; a small
//! tensor's allocate/free pair costs about half the instructions (the
//! per-op cost of tiny ops is what this buys).

use super::history::{self, Action};
use super::os;
use super::stats::{DeviceStats, MemoryStats, Pool};
use super::AllocError;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

/// Every block is aligned to at least this many bytes (room for AVX-512).
/// In fact blocks are 512-byte aligned: segments are, and block sizes are
/// multiples of 512.
pub const ALIGNMENT: usize = 64;

/// Granularity of block sizes (CUDA's `kMinBlockSize`).
const MIN_BLOCK_SIZE: usize = 512;
/// Largest rounded request of the small pool (`kSmallSize`).
const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
const SMALL_BUFFER: usize = 2 << 20;
/// Segment size of large requests below `MIN_LARGE_ALLOC` (`kLargeBuffer`).
const LARGE_BUFFER: usize = 20 << 20;
/// Large requests from this size get a segment of their own (`kMinLargeAlloc`).
const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Such segments are rounded up to this (`kRoundLarge`).
const ROUND_LARGE: usize = 2 << 20;
/// Large blocks whose size is a multiple of this are followed by a
/// [`COLOR_GAP`] when split from a bigger block.
const COLOR_ALIGN: usize = 16 << 10;
/// The gap kept at the end of such a block (cache colouring, as jemalloc's
/// `cache_oblivious` offsets large allocations). Segments are 2 MiB-aligned
/// huge pages, so a block's offset in its segment is its offset in the
/// physically indexed caches: blocks of a size like 640x640 float32
/// (1.5625 MiB, a multiple of 64 KiB) split one after another all started at
/// the same L2 set offset, and a kernel streaming several of them (an Adam
/// step reads a parameter, its gradient and two moments) lost a quarter of
/// its bandwidth to set conflicts: fused AdamW over 24 such parameters ran at
/// 1.33x torch CPU's time against 0.85x with blocks 512 bytes apart.
/// The gap belongs to the block (it merges back with it when freed), but the
/// statistics leave it out: allocated bytes are those of an uncoloured
/// allocator, as on CUDA.
const COLOR_GAP: usize = 1 << 10;
/// Largest request accepted: keeps every size computation and `mmap` length
/// far from overflow.
const MAX_REQUEST: usize = (isize::MAX as usize) / 2;
/// Most bytes held in the small-block bins (lazy coalescing): what the
/// deferral can keep unmerged. One small segment's worth: enough for the
/// outputs a step of tiny ops frees and allocates again.
const BINNED_BYTES: usize = SMALL_BUFFER;
/// One bin per small-pool block size (multiples of 512 up to 1 MiB).
const BINS: usize = SMALL_SIZE / MIN_BLOCK_SIZE + 1;

/// `nbytes` rounded up to the block granularity (CUDA's `round_size`).
fn round_size(nbytes: usize) -> usize {
    nbytes.max(1).div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
}

/// The pool serving a rounded size.
fn pool_for(size: usize) -> Pool {
    if size <= SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

/// Size of the segment to create for a rounded size
/// (CUDA's `get_allocation_size`).
fn segment_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// Whether serving `size` from a free block of `block_size` leaves a rest
/// worth a block of its own (CUDA's `should_split` without
/// `max_split_size`): any 512 bytes in the small pool, more than 1 MiB in the
/// large one.
fn should_split(pool: Pool, block_size: usize, size: usize) -> bool {
    let rest = block_size - size;
    match pool {
        Pool::Small => rest >= MIN_BLOCK_SIZE,
        Pool::Large => rest > SMALL_SIZE,
    }
}

type BlockId = u32;
const NIL: BlockId = BlockId::MAX;

/// A piece of a segment, free or handed out. Blocks of a segment form a
/// doubly linked list in address order that tiles the segment exactly.
#[derive(Debug, Clone, Copy)]
struct Block {
    addr: usize,
    size: usize,
    /// Bytes the caller asked for; 0 while free.
    requested: usize,
    /// Colouring gap at the end of an allocated block (`COLOR_GAP` or 0;
    /// 0 while free): part of the block, not of the allocation's bytes.
    pad: usize,
    prev: BlockId,
    next: BlockId,
    pool: Pool,
    allocated: bool,
    /// Free and waiting in a bin, unmerged (never with `allocated`).
    binned: bool,
}

impl Block {
    fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

/// A segment obtained from the system.
#[derive(Debug, Clone, Copy)]
struct Segment {
    size: usize,
    pool: Pool,
    /// The block at the segment's base (the head of its block list).
    head: BlockId,
}

/// Key of a free block in its pool: ordered by size, then address, so the
/// first key at or above `(n, 0, 0)` is the best fit for `n` bytes.
type FreeKey = (usize, usize, BlockId);

/// Hasher for block addresses: a folded 128-bit multiply. Addresses are
/// distinct multiples of 512, and SipHash would cost more than the rest of a
/// cached allocation.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = u128::from(v ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

struct State {
    /// Slab of blocks; ids in `vacant` are unused slots.
    blocks: Vec<Block>,
    vacant: Vec<BlockId>,
    /// Blocks handed out, by address.
    live: AddrMap<BlockId>,
    /// Cached (free) blocks per pool, indexed by `Pool as usize`; binned
    /// blocks are not among them.
    free: [BTreeSet<FreeKey>; 2],
    /// Freed small blocks not yet merged, by size / 512 (see the module
    /// documentation); LIFO, so a request takes the block freed last.
    bins: Vec<Vec<BlockId>>,
    /// Bytes in `bins`.
    binned: usize,
    /// Segments by base address.
    segments: BTreeMap<usize, Segment>,
    stats: DeviceStats,
    capacity: usize,
    /// The device's index (the one copy: the recorded history's segment
    /// events need it under the lock, and [`DeviceAllocator::index`] reads it).
    device: usize,
}

/// One block of a [`SegmentInfo`], as `torch.cuda.memory_snapshot()` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    pub address: usize,
    /// Bytes of the block (a colouring gap included: blocks tile their segment).
    pub size: usize,
    /// Bytes its caller asked for (0 when free).
    pub requested: usize,
    pub allocated: bool,
}

/// One segment and its blocks in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub address: usize,
    pub total_size: usize,
    /// The large pool's (`segment_type` "large").
    pub large: bool,
    pub blocks: Vec<BlockInfo>,
}

/// The allocator of one foo device.
///
/// Dropping it returns every segment to the system: pointers it handed out
/// dangle afterwards. The allocators of [`super::devices`] live for the
/// whole process.
pub struct DeviceAllocator {
    total: usize,
    state: Mutex<State>,
}

impl DeviceAllocator {
    /// An allocator for device `index` that holds at most `capacity` bytes.
    pub fn new(index: usize, capacity: usize) -> DeviceAllocator {
        DeviceAllocator {
            total: capacity,
            state: Mutex::new(State {
                blocks: Vec::new(),
                vacant: Vec::new(),
                live: AddrMap::default(),
                free: [BTreeSet::new(), BTreeSet::new()],
                bins: vec![Vec::new(); BINS],
                binned: 0,
                segments: BTreeMap::new(),
                stats: DeviceStats::default(),
                capacity,
                device: index,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before anything
        // that could panic, so a poisoned lock still guards valid state; and
        // panicking here would abort through the C++ glue.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state with every binned block merged: what statistics and the
    /// free set report is then CUDA's allocator's.
    fn flushed(&self) -> MutexGuard<'_, State> {
        let mut s = self.lock();
        s.flush_bins();
        s
    }

    /// The device index.
    pub fn index(&self) -> usize {
        self.lock().device
    }

    /// Total memory of the device (its capacity before any memory fraction).
    pub fn total_memory(&self) -> usize {
        self.total
    }

    /// Current capacity limit (total memory times the memory fraction):
    /// reserved bytes never exceed it.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Limits this device to `fraction` (0..=1) of its total memory. Memory
    /// already reserved above the new limit stays until freed and released.
    pub fn set_memory_fraction(&self, fraction: f64) {
        let mut s = self.lock();
        s.capacity = (self.total as f64 * fraction.clamp(0.0, 1.0)) as usize;
    }

    /// Allocates `nbytes` (null for zero bytes), aligned to at least
    /// [`ALIGNMENT`] (in fact 512) bytes.
    ///
    /// A cached block is reused when one fits. Otherwise a new segment is
    /// obtained: of the standard size, or of exactly the rounded request if
    /// only that fits the capacity. If neither fits, the cache is released
    /// and both are tried again (`num_alloc_retries`); if that fails too the
    /// result is [`AllocError::OutOfMemory`] (`num_ooms`) and nothing else
    /// changes.
    pub fn allocate(&self, nbytes: usize) -> Result<*mut u8, AllocError> {
        if nbytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        if nbytes > MAX_REQUEST {
            return Err(AllocError::SizeOverflow { requested: nbytes });
        }
        let size = round_size(nbytes);
        let pool = pool_for(size);
        let mut s = self.lock();
        if pool == Pool::Small {
            if let Some(id) = s.bins[size / MIN_BLOCK_SIZE].pop() {
                return Ok(s.take_binned(id, nbytes) as *mut u8);
            }
        }
        let fit = s.best_fit(pool, size).or_else(|| {
            // Binned blocks, merged, may make the block that fits.
            s.flush_bins();
            s.best_fit(pool, size)
        });
        let id = match fit {
            Some(id) => id,
            None => s.grow(pool, size).ok_or_else(|| {
                s.stats.num_ooms += 1;
                if history::RECORDER.enabled() {
                    history::RECORDER.on_segment(Action::Oom, s.device, 0, nbytes);
                }
                AllocError::OutOfMemory {
                    device: s.device,
                    requested: nbytes,
                    allocated: s.stats.allocated_bytes.all.current as usize,
                    reserved: s.stats.reserved_bytes.all.current as usize,
                    capacity: s.capacity,
                }
            })?,
        };
        Ok(s.take(id, size, nbytes) as *mut u8)
    }

    /// Frees a pointer returned by [`DeviceAllocator::allocate`]: its block
    /// goes back to the cache, merged with free neighbours; the result is the
    /// bytes its caller had asked for. A null pointer is a no-op (0); a
    /// pointer this allocator does not have in use (never handed out,
    /// already freed, or inside a block) is [`AllocError::UnknownPointer`]
    /// and changes nothing.
    ///
    /// # Safety
    /// `ptr` must not be used after this call.
    pub unsafe fn free(&self, ptr: *mut u8) -> Result<usize, AllocError> {
        if ptr.is_null() {
            return Ok(0);
        }
        self.free_on_device(ptr).map(|(_, requested)| requested)
    }

    /// [`DeviceAllocator::free`] that also gives the device's index, read
    /// under the same lock: `(device, requested bytes)`, what c10's deleter
    /// reports to the profiler and the history.
    ///
    /// # Safety
    /// As [`DeviceAllocator::free`].
    pub unsafe fn free_on_device(&self, ptr: *mut u8) -> Result<(usize, usize), AllocError> {
        let mut s = self.lock();
        if ptr.is_null() {
            return Ok((s.device, 0));
        }
        let id = s
            .live
            .remove(&(ptr as usize))
            .ok_or(AllocError::UnknownPointer { ptr: ptr as usize })?;
        let requested = s.blocks[id as usize].requested;
        s.book_free(id);
        let size = s.blocks[id as usize].size;
        if s.blocks[id as usize].pool == Pool::Small && s.binned + size <= BINNED_BYTES {
            s.binned += size;
            s.blocks[id as usize].binned = true;
            s.bins[size / MIN_BLOCK_SIZE].push(id);
        } else {
            s.coalesce(id);
        }
        Ok((s.device, requested))
    }

    /// Whether `ptr` points into memory of this device (any byte of any
    /// segment), as `getDeviceFromPtr` needs for pointers inside a tensor.
    pub fn owns(&self, ptr: *const u8) -> bool {
        let addr = ptr as usize;
        let s = self.lock();
        s.segments
            .range(..=addr)
            .next_back()
            .is_some_and(|(&base, seg)| addr < base + seg.size)
    }

    /// The allocation holding byte `addr`: `[start, start + n)` of the live
    /// block containing it, `n` the bytes its caller asked for (not the
    /// rounding or colouring gap after them). `None` for an address in no
    /// segment, in a cached block, or past its allocation's bytes.
    ///
    /// A range query on the segments, then a walk of that segment's blocks
    /// (a few in the large pool; in the small pool at most 4096, and as many
    /// as are split off): for checks on the Python kernels' path, not the
    /// C++ fast lane.
    pub fn allocation_at(&self, addr: usize) -> Option<std::ops::Range<usize>> {
        let s = self.lock();
        let (&base, seg) = s.segments.range(..=addr).next_back()?;
        if addr >= base + seg.size {
            return None;
        }
        let mut cur = seg.head;
        while cur != NIL {
            let b = &s.blocks[cur as usize];
            if addr < b.addr + b.size {
                let end = b.addr + b.requested;
                return (b.allocated && addr < end).then_some(b.addr..end);
            }
            cur = b.next;
        }
        None
    }

    /// `(allocated, reserved)` bytes now: booked at once, so exact with
    /// blocks in the bins (no merge needed, unlike the other statistics).
    pub fn totals(&self) -> (usize, usize) {
        let s = self.lock();
        let st = &s.stats;
        (
            st.allocated_bytes.all.current as usize,
            st.reserved_bytes.all.current as usize,
        )
    }

    /// Every segment and its blocks, in address order (bins merged first),
    /// for `torch.foo.memory_snapshot()`.
    pub fn snapshot(&self) -> Vec<SegmentInfo> {
        let s = self.flushed();
        s.segments
            .iter()
            .map(|(&address, seg)| {
                let mut blocks = Vec::new();
                let mut cur = seg.head;
                while cur != NIL {
                    let b = &s.blocks[cur as usize];
                    blocks.push(BlockInfo {
                        address: b.addr,
                        size: b.size,
                        requested: b.requested,
                        allocated: b.allocated,
                    });
                    cur = b.next;
                }
                SegmentInfo {
                    address,
                    total_size: seg.size,
                    large: seg.pool == Pool::Large,
                    blocks,
                }
            })
            .collect()
    }

    /// Number of blocks handed out and not yet freed.
    pub fn live_blocks(&self) -> usize {
        self.lock().live.len()
    }

    /// Number of free blocks held in the cache (both pools).
    pub fn cached_blocks(&self) -> usize {
        let s = self.flushed();
        s.free.iter().map(BTreeSet::len).sum()
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats::from(&self.flushed().stats)
    }

    /// The statistics as `torch.cuda.memory_stats()` returns them: flat
    /// keys such as `"allocated_bytes.all.current"`, sorted.
    pub fn stats_map(&self) -> Vec<(String, i64)> {
        let stats = self.flushed().stats.clone();
        stats.to_map()
    }

    /// A table of the statistics in the style of `torch.cuda.memory_summary()`.
    pub fn memory_summary(&self) -> String {
        let (stats, device) = {
            let s = self.flushed();
            (s.stats.clone(), s.device)
        };
        stats.summary(device)
    }

    /// `(free, total)` as `torch.cuda.mem_get_info` reports them: the
    /// device's total memory, and what of it this allocator has not reserved.
    pub fn mem_get_info(&self) -> (usize, usize) {
        let reserved = self.lock().stats.reserved_bytes.all.current as usize;
        (self.total.saturating_sub(reserved), self.total)
    }

    /// Returns every fully free segment to the system; reserved bytes drop
    /// accordingly. Segments with a block in use stay.
    pub fn empty_cache(&self) {
        let released = self.lock().release_cached();
        for (addr, size) in released {
            // SAFETY: `release_cached` unlinked these segments, so no block
            // refers to them any more, and each (addr, size) is one mapping.
            unsafe { os::unmap(addr as *mut u8, size) };
        }
    }

    /// Sets every peak statistic to its current value.
    pub fn reset_peak_stats(&self) {
        self.flushed().stats.reset_peak();
    }

    /// Zeroes the accumulated statistics (`allocated`/`freed` sums, retry,
    /// OOM and segment alloc/free counters).
    pub fn reset_accumulated_stats(&self) {
        self.flushed().stats.reset_accumulated();
    }
}

impl Drop for DeviceAllocator {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (&addr, seg) in &s.segments {
            // SAFETY: each entry is one live mapping; the allocator is going
            // away, and its pointers with it (documented on the type).
            unsafe { os::unmap(addr as *mut u8, seg.size) };
        }
        s.segments.clear();
    }
}

impl State {
    fn key(&self, id: BlockId) -> FreeKey {
        let b = &self.blocks[id as usize];
        (b.size, b.addr, id)
    }

    fn new_block(&mut self, block: Block) -> BlockId {
        match self.vacant.pop() {
            Some(id) => {
                self.blocks[id as usize] = block;
                id
            }
            None => {
                self.blocks.push(block);
                BlockId::try_from(self.blocks.len() - 1).expect("fewer than 2^32 blocks")
            }
        }
    }

    /// The smallest cached block of `pool` with at least `size` bytes.
    fn best_fit(&self, pool: Pool, size: usize) -> Option<BlockId> {
        self.free[pool as usize]
            .range((size, 0, 0)..)
            .next()
            .map(|k| k.2)
    }

    /// `(count, bytes)` a block adds to the inactive-split statistics.
    fn inactive_split(&self, id: BlockId) -> (i64, i64) {
        let b = &self.blocks[id as usize];
        if !b.allocated && b.is_split() {
            (1, b.size as i64)
        } else {
            (0, 0)
        }
    }

    fn book_inactive_split(&mut self, pool: Pool, before: (i64, i64), after: (i64, i64)) {
        self.stats.inactive_split.change(pool, after.0 - before.0);
        self.stats
            .inactive_split_bytes
            .change(pool, after.1 - before.1);
    }

    /// Obtains a segment for a request of `size` (rounded) bytes and returns
    /// its single free block, already cached in `pool`.
    ///
    /// The standard segment size is tried first, then — if the capacity is
    /// tight — a segment of exactly `size`, so that a device limited to a few
    /// MiB can still be filled. Only if neither fits is the cache released
    /// and both tried again (CUDA's `release_cached_blocks` retry).
    fn grow(&mut self, pool: Pool, size: usize) -> Option<BlockId> {
        if let Some(id) = self.new_segment_for(pool, size) {
            return Some(id);
        }
        self.stats.num_alloc_retries += 1;
        for (addr, len) in self.release_cached() {
            // SAFETY: unlinked by `release_cached`; one mapping each. Done
            // under the lock: this is the rare path before an OOM.
            unsafe { os::unmap(addr as *mut u8, len) };
        }
        self.new_segment_for(pool, size)
    }

    fn new_segment_for(&mut self, pool: Pool, size: usize) -> Option<BlockId> {
        let standard = segment_size(size);
        self.new_segment(pool, standard).or_else(|| {
            if standard > size {
                self.new_segment(pool, size)
            } else {
                None
            }
        })
    }

    fn new_segment(&mut self, pool: Pool, size: usize) -> Option<BlockId> {
        let reserved = self.stats.reserved_bytes.all.current as usize;
        if reserved.checked_add(size)? > self.capacity {
            return None;
        }
        let addr = os::map(size, pool == Pool::Large)? as usize;
        debug_assert_eq!(addr % os::MIN_SEGMENT_ALIGN, 0);
        let id = self.new_block(Block {
            addr,
            size,
            requested: 0,
            pad: 0,
            prev: NIL,
            next: NIL,
            pool,
            allocated: false,
            binned: false,
        });
        self.segments.insert(
            addr,
            Segment {
                size,
                pool,
                head: id,
            },
        );
        self.free[pool as usize].insert(self.key(id));
        self.stats.segment.increase(pool, 1);
        self.stats.reserved_bytes.increase(pool, size as i64);
        self.stats.num_device_alloc += 1;
        if history::RECORDER.enabled() {
            history::RECORDER.on_segment(Action::SegmentAlloc, self.device, addr, size);
        }
        Some(id)
    }

    /// Hands out the first `size` bytes of cached block `id` for a request
    /// of `requested` bytes, splitting off the rest when worth it.
    fn take(&mut self, id: BlockId, size: usize, requested: usize) -> usize {
        let b = self.blocks[id as usize];
        self.free[b.pool as usize].remove(&(b.size, b.addr, id));
        let before = self.inactive_split(id);
        let mut after = (0, 0);
        // A large block of an aligned size keeps a colouring gap at its end
        // when the rest is split off anyway (COLOR_GAP).
        let pad = if b.pool == Pool::Large
            && size.is_multiple_of(COLOR_ALIGN)
            && b.size >= size + COLOR_GAP
            && should_split(b.pool, b.size, size + COLOR_GAP)
        {
            COLOR_GAP
        } else {
            0
        };
        let size = size + pad;
        if should_split(b.pool, b.size, size) {
            let rest = self.new_block(Block {
                addr: b.addr + size,
                size: b.size - size,
                requested: 0,
                pad: 0,
                prev: id,
                next: b.next,
                pool: b.pool,
                allocated: false,
                binned: false,
            });
            if b.next != NIL {
                self.blocks[b.next as usize].prev = rest;
            }
            let blk = &mut self.blocks[id as usize];
            blk.next = rest;
            blk.size = size;
            self.free[b.pool as usize].insert(self.key(rest));
            after = self.inactive_split(rest);
        }
        self.book_inactive_split(b.pool, before, after);

        let blk = &mut self.blocks[id as usize];
        blk.allocated = true;
        blk.requested = requested;
        blk.pad = pad;
        let (addr, size) = (blk.addr, (blk.size - pad) as i64);
        self.live.insert(addr, id);
        self.book_allocation(b.pool, size, requested as i64);
        addr
    }

    /// Hands out binned block `id` again (its size is the request's rounded
    /// size: small blocks are split to exactly that). It was never merged or
    /// booked as inactive, so only the allocation is booked.
    fn take_binned(&mut self, id: BlockId, requested: usize) -> usize {
        let blk = &mut self.blocks[id as usize];
        blk.allocated = true;
        blk.binned = false;
        blk.requested = requested;
        let (addr, size) = (blk.addr, blk.size);
        self.binned -= size;
        self.live.insert(addr, id);
        self.book_allocation(Pool::Small, size as i64, requested as i64);
        addr
    }

    fn book_allocation(&mut self, pool: Pool, size: i64, requested: i64) {
        let st = &mut self.stats;
        st.allocation.increase(pool, 1);
        st.allocated_bytes.increase(pool, size);
        st.active.increase(pool, 1);
        st.active_bytes.increase(pool, size);
        st.requested_bytes.increase(pool, requested);
    }

    /// Merges every binned block into the free set.
    fn flush_bins(&mut self) {
        if self.binned == 0 {
            return;
        }
        for bin in 0..BINS {
            while let Some(id) = self.bins[bin].pop() {
                self.blocks[id as usize].binned = false;
                self.coalesce(id);
            }
        }
        self.binned = 0;
    }

    /// Books the free of block `id` (already removed from `live`) and marks
    /// it free; [`State::coalesce`] or a bin then takes it.
    fn book_free(&mut self, id: BlockId) {
        let b = self.blocks[id as usize];
        let st = &mut self.stats;
        st.allocation.decrease(b.pool, 1);
        st.allocated_bytes.decrease(b.pool, (b.size - b.pad) as i64);
        st.active.decrease(b.pool, 1);
        st.active_bytes.decrease(b.pool, (b.size - b.pad) as i64);
        st.requested_bytes.decrease(b.pool, b.requested as i64);

        let blk = &mut self.blocks[id as usize];
        blk.allocated = false;
        blk.requested = 0;
        blk.pad = 0;
    }

    /// Returns free block `id` (in no bin) to the cache, merged with its
    /// free neighbours.
    fn coalesce(&mut self, id: BlockId) {
        let b = self.blocks[id as usize];
        let mut before = (0, 0);
        for neighbour in [b.prev, b.next] {
            // A binned neighbour merges when its own turn comes (flush_bins).
            if neighbour != NIL && {
                let nb = &self.blocks[neighbour as usize];
                !nb.allocated && !nb.binned
            } {
                let (n, bytes) = self.inactive_split(neighbour);
                before = (before.0 + n, before.1 + bytes);
                self.merge(id, neighbour);
            }
        }
        let after = self.inactive_split(id);
        self.book_inactive_split(b.pool, before, after);
        self.free[b.pool as usize].insert(self.key(id));
    }

    /// Absorbs free neighbour `src` into block `dst` (not cached itself).
    fn merge(&mut self, dst: BlockId, src: BlockId) {
        let key = self.key(src);
        self.free[self.blocks[src as usize].pool as usize].remove(&key);
        let s = self.blocks[src as usize];
        let d = &mut self.blocks[dst as usize];
        if d.prev == src {
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NIL {
                self.blocks[s.prev as usize].next = dst;
            } else if let Some(seg) = self.segments.get_mut(&s.addr) {
                seg.head = dst; // `src` was the segment's first block
            }
        } else {
            debug_assert_eq!(d.next, src);
            d.next = s.next;
            if s.next != NIL {
                self.blocks[s.next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.vacant.push(src);
    }

    /// Unlinks every fully free segment and returns the `(addr, size)`
    /// mappings for the caller to unmap.
    fn release_cached(&mut self) -> Vec<(usize, usize)> {
        self.flush_bins();
        let mut released = Vec::new();
        for pool in [Pool::Small, Pool::Large] {
            let whole: Vec<FreeKey> = self.free[pool as usize]
                .iter()
                .filter(|k| !self.blocks[k.2 as usize].is_split())
                .copied()
                .collect();
            for key @ (size, addr, id) in whole {
                self.free[pool as usize].remove(&key);
                self.vacant.push(id);
                let seg = self.segments.remove(&addr);
                debug_assert!(matches!(seg, Some(s) if s.size == size && s.pool == pool));
                self.stats.segment.decrease(pool, 1);
                self.stats.reserved_bytes.decrease(pool, size as i64);
                self.stats.num_device_free += 1;
                if history::RECORDER.enabled() {
                    history::RECORDER.on_segment(Action::SegmentFree, self.device, addr, size);
                }
                released.push((addr, size));
            }
        }
        released
    }

    /// Checks every structural invariant against a recount (tests only).
    #[cfg(test)]
    fn check(&self) {
        let mut allocated = [0i64; 2];
        let mut requested = [0i64; 2];
        let mut inactive = [(0i64, 0i64); 2];
        let mut reserved = [0i64; 2];
        let mut cached = 0;
        let (mut binned, mut binned_bytes) = (0, 0);
        let vacant: std::collections::HashSet<BlockId> = self.vacant.iter().copied().collect();
        assert_eq!(vacant.len(), self.vacant.len(), "a slot is vacant once");
        let heads: HashMap<usize, BlockId> = (0..self.blocks.len() as BlockId)
            .filter(|id| !vacant.contains(id) && self.blocks[*id as usize].prev == NIL)
            .map(|id| (self.blocks[id as usize].addr, id))
            .collect();
        assert_eq!(
            heads.len(),
            self.segments.len(),
            "one head block per segment"
        );
        let mut linked = 0;
        for (&base, seg) in &self.segments {
            reserved[seg.pool as usize] += seg.size as i64;
            let id = heads[&base];
            assert_eq!(seg.head, id, "the segment knows its head block");
            let (mut cur, mut addr, mut prev_free) = (id, base, false);
            while cur != NIL {
                let b = &self.blocks[cur as usize];
                assert_eq!(b.addr, addr, "blocks tile the segment");
                assert_eq!(b.pool, seg.pool);
                assert_eq!(b.size % MIN_BLOCK_SIZE, 0);
                if b.next != NIL {
                    assert_eq!(self.blocks[b.next as usize].prev, cur);
                }
                if b.allocated {
                    assert!(!b.binned);
                    assert_eq!(self.live.get(&b.addr), Some(&cur));
                    assert!(b.pad == 0 || b.pad == COLOR_GAP);
                    allocated[b.pool as usize] += (b.size - b.pad) as i64;
                    requested[b.pool as usize] += b.requested as i64;
                    prev_free = false;
                } else if b.binned {
                    assert_eq!(b.pool, Pool::Small);
                    assert_eq!((b.pad, b.requested), (0, 0));
                    assert!(!self.live.contains_key(&b.addr));
                    assert!(self.bins[b.size / MIN_BLOCK_SIZE].contains(&cur));
                    assert!(!self.free[0].contains(&(b.size, b.addr, cur)));
                    binned += 1;
                    binned_bytes += b.size;
                    prev_free = false;
                } else {
                    assert!(!prev_free, "adjacent free blocks are merged");
                    assert_eq!(b.pad, 0);
                    assert!(self.free[b.pool as usize].contains(&(b.size, b.addr, cur)));
                    let (n, bytes) = self.inactive_split(cur);
                    inactive[b.pool as usize].0 += n;
                    inactive[b.pool as usize].1 += bytes;
                    cached += 1;
                    prev_free = true;
                }
                addr += b.size;
                linked += 1;
                cur = b.next;
            }
            assert_eq!(addr, base + seg.size, "blocks cover the segment");
        }
        assert_eq!(cached, self.free[0].len() + self.free[1].len());
        assert_eq!(binned, self.bins.iter().map(Vec::len).sum::<usize>());
        assert_eq!(binned_bytes, self.binned);
        assert!(self.binned <= BINNED_BYTES);
        assert_eq!(linked + vacant.len(), self.blocks.len(), "no block is lost");
        assert_eq!(self.live.len() + cached + binned, linked);
        let st = &self.stats;
        for (i, pool) in [
            (0, &st.allocated_bytes.small_pool),
            (1, &st.allocated_bytes.large_pool),
        ] {
            assert_eq!(pool.current, allocated[i]);
        }
        assert_eq!(st.allocated_bytes.all.current, allocated[0] + allocated[1]);
        assert_eq!(st.active_bytes.all.current, allocated[0] + allocated[1]);
        assert_eq!(st.requested_bytes.all.current, requested[0] + requested[1]);
        assert_eq!(st.reserved_bytes.small_pool.current, reserved[0]);
        assert_eq!(st.reserved_bytes.large_pool.current, reserved[1]);
        assert_eq!(st.inactive_split.small_pool.current, inactive[0].0);
        assert_eq!(st.inactive_split.large_pool.current, inactive[1].0);
        assert_eq!(st.inactive_split_bytes.small_pool.current, inactive[0].1);
        assert_eq!(st.inactive_split_bytes.large_pool.current, inactive[1].1);
        assert_eq!(st.active.all.current as usize, self.live.len());
        assert_eq!(st.allocation.all.current as usize, self.live.len());
        assert_eq!(st.segment.all.current as usize, self.segments.len());
    }
}

#[cfg(test)]
mod tests;
