//! Allocator statistics with the names and meaning of `torch.cuda.memory_stats`
//! and a `torch.cuda.memory_summary`-like report.

use std::fmt::Write as _;

/// The two block pools, as in the CUDA caching allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pool {
    /// Rounded requests of at most 1 MiB, carved from 2 MiB segments.
    Small = 0,
    /// Everything larger.
    Large = 1,
}

/// One statistic in torch's four views (`c10::CachingAllocator::Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Value now.
    pub current: i64,
    /// Largest value since creation or the last peak reset.
    pub peak: i64,
    /// Sum of all increases since the last accumulated-stats reset.
    pub allocated: i64,
    /// Sum of all decreases since the last accumulated-stats reset.
    pub freed: i64,
}

impl Stat {
    pub(crate) fn increase(&mut self, amount: i64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    pub(crate) fn decrease(&mut self, amount: i64) {
        self.current -= amount;
        debug_assert!(self.current >= 0, "negative allocator statistic");
        self.freed += amount;
    }

    /// Applies a signed net change as one increase or one decrease, the way
    /// the CUDA allocator books its inactive-split statistics.
    pub(crate) fn change(&mut self, delta: i64) {
        if delta > 0 {
            self.increase(delta);
        } else if delta < 0 {
            self.decrease(-delta);
        }
    }

    fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// One statistic over all pools and per pool (`StatArray`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// Blocks of at most 1 MiB.
    pub small_pool: Stat,
    /// Blocks above 1 MiB.
    pub large_pool: Stat,
}

impl StatArray {
    fn pool_mut(&mut self, pool: Pool) -> &mut Stat {
        match pool {
            Pool::Small => &mut self.small_pool,
            Pool::Large => &mut self.large_pool,
        }
    }

    pub(crate) fn increase(&mut self, pool: Pool, amount: i64) {
        self.all.increase(amount);
        self.pool_mut(pool).increase(amount);
    }

    pub(crate) fn decrease(&mut self, pool: Pool, amount: i64) {
        self.all.decrease(amount);
        self.pool_mut(pool).decrease(amount);
    }

    pub(crate) fn change(&mut self, pool: Pool, delta: i64) {
        self.all.change(delta);
        self.pool_mut(pool).change(delta);
    }

    fn each_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }

    fn named(&self) -> [(&'static str, &Stat); 3] {
        [
            ("all", &self.all),
            ("small_pool", &self.small_pool),
            ("large_pool", &self.large_pool),
        ]
    }
}

/// Every statistic of one device, field for field those of
/// `c10::CachingDeviceAllocator::DeviceStats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStats {
    /// Blocks handed out to callers (count).
    pub allocation: StatArray,
    /// Segments obtained from the system (count).
    pub segment: StatArray,
    /// Blocks in use (count). Without streams, equal to `allocation`.
    pub active: StatArray,
    /// Free blocks that share a segment with other blocks, so cannot be
    /// released (count).
    pub inactive_split: StatArray,
    /// Bytes of blocks handed out, after rounding.
    pub allocated_bytes: StatArray,
    /// Bytes of segments.
    pub reserved_bytes: StatArray,
    /// Bytes of blocks in use. Without streams, equal to `allocated_bytes`.
    pub active_bytes: StatArray,
    /// Bytes of `inactive_split` blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes callers asked for, before rounding.
    pub requested_bytes: StatArray,
    /// Blocks of at least `max_split_size` (never: no limit is set).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` (never: no limit is set).
    pub oversize_segments: Stat,
    /// Times the cache was released because a new segment did not fit.
    pub num_alloc_retries: i64,
    /// Requests refused with `OutOfMemory`.
    pub num_ooms: i64,
    /// Always 0: foo has no streams to synchronise.
    pub num_sync_all_streams: i64,
    /// Segments obtained from the system.
    pub num_device_alloc: i64,
    /// Segments returned to the system.
    pub num_device_free: i64,
    /// Largest block that may be split; -1 means no limit (torch reports
    /// `SIZE_MAX` as -1 too).
    pub max_split_size: i64,
}

impl Default for DeviceStats {
    fn default() -> Self {
        DeviceStats {
            allocation: StatArray::default(),
            segment: StatArray::default(),
            active: StatArray::default(),
            inactive_split: StatArray::default(),
            allocated_bytes: StatArray::default(),
            reserved_bytes: StatArray::default(),
            active_bytes: StatArray::default(),
            inactive_split_bytes: StatArray::default(),
            requested_bytes: StatArray::default(),
            oversize_allocations: Stat::default(),
            oversize_segments: Stat::default(),
            num_alloc_retries: 0,
            num_ooms: 0,
            num_sync_all_streams: 0,
            num_device_alloc: 0,
            num_device_free: 0,
            max_split_size: -1,
        }
    }
}

impl DeviceStats {
    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    /// Sets every peak to the current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.each_mut().into_iter().for_each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// Zeroes the `allocated`/`freed` sums and the event counters
    /// (`reset_accumulated_memory_stats`).
    pub fn reset_accumulated(&mut self) {
        for a in self.arrays_mut() {
            a.each_mut().into_iter().for_each(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// The flat dictionary of `torch.cuda.memory_stats()`: the same keys
    /// ("allocated_bytes.all.current", "num_ooms", ...), sorted as torch
    /// sorts them.
    pub fn to_map(&self) -> Vec<(String, i64)> {
        let mut out = Vec::with_capacity(9 * 3 * 4 + 2 * 4 + 6);
        let views = |prefix: &str, s: &Stat, out: &mut Vec<(String, i64)>| {
            for (view, v) in [
                ("current", s.current),
                ("peak", s.peak),
                ("allocated", s.allocated),
                ("freed", s.freed),
            ] {
                out.push((format!("{prefix}.{view}"), v));
            }
        };
        for (name, array) in self.arrays() {
            for (pool, stat) in array.named() {
                views(&format!("{name}.{pool}"), stat, &mut out);
            }
        }
        views("oversize_allocations", &self.oversize_allocations, &mut out);
        views("oversize_segments", &self.oversize_segments, &mut out);
        for (k, v) in [
            ("num_alloc_retries", self.num_alloc_retries),
            ("num_ooms", self.num_ooms),
            ("num_sync_all_streams", self.num_sync_all_streams),
            ("num_device_alloc", self.num_device_alloc),
            ("num_device_free", self.num_device_free),
            ("max_split_size", self.max_split_size),
        ] {
            out.push((k.to_string(), v));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A `torch.cuda.memory_summary()`-style table of these statistics.
    pub fn summary(&self, device: usize) -> String {
        const WIDTH: usize = 75;
        let mut lines: Vec<String> = Vec::new();
        lines.push("=".repeat(WIDTH));
        lines.push(format!(
            "{:^75}",
            format!("foo_rs memory summary, device ID {device}")
        ));
        lines.push("-".repeat(WIDTH));
        lines.push(format!(
            "{:<37}|{:<37}",
            format!("            foo OOMs: {}", self.num_ooms),
            format!("        alloc retries: {}", self.num_alloc_retries)
        ));
        lines.push("=".repeat(WIDTH));
        lines.push(
            "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "
                .to_string(),
        );
        type Fmt = fn(i64, i64) -> String;
        let metrics: [(&StatArray, &str, Fmt); 9] = [
            (&self.allocated_bytes, "Allocated memory", format_size),
            (&self.active_bytes, "Active memory", format_size),
            (&self.requested_bytes, "Requested memory", format_size),
            (&self.reserved_bytes, "Reserved memory", format_size),
            (
                &self.inactive_split_bytes,
                "Non-releasable memory",
                format_size,
            ),
            (&self.allocation, "Allocations", format_count),
            (&self.active, "Active allocs", format_count),
            (&self.segment, "Reserved segments", format_count),
            (&self.inactive_split, "Non-releasable allocs", format_count),
        ];
        let row = |name: &str, s: &Stat, pref: &Stat, f: Fmt| {
            format!(
                " {name:<21} | {} | {} | {} | {} ",
                f(s.current, pref.current),
                f(s.peak, pref.peak),
                f(s.allocated, pref.allocated),
                f(s.freed, pref.freed)
            )
        };
        for (array, name, f) in metrics {
            lines.push("-".repeat(WIDTH));
            lines.push(row(name, &array.all, &array.all, f));
            lines.push(row(
                "      from large pool",
                &array.large_pool,
                &array.all,
                f,
            ));
            lines.push(row(
                "      from small pool",
                &array.small_pool,
                &array.all,
                f,
            ));
        }
        lines.push("-".repeat(WIDTH));
        let o = &self.oversize_allocations;
        let g = &self.oversize_segments;
        lines.push(row("Oversize allocations", o, o, format_count));
        lines.push(row("Oversize segments", g, g, format_count));
        lines.push("=".repeat(WIDTH));
        let mut out = String::new();
        for l in lines {
            let _ = writeln!(out, "|{l}|");
        }
        out
    }
}

/// torch's `_format_size`: the unit is chosen from `pref` (the all-pools
/// value) so that a metric's rows line up.
fn format_size(v: i64, pref: i64) -> String {
    const PREFIXES: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut v, mut pref, mut unit) = (v, pref as f64, PREFIXES[0]);
    for p in &PREFIXES[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        unit = p;
        v /= 1024;
        pref /= 1024.0;
    }
    format!("{v:6} {unit}")
}

/// torch's `_format_count`.
fn format_count(v: i64, pref: i64) -> String {
    let (mut v, mut pref, mut unit) = (v, pref as f64, " ");
    for p in ["K", "M"] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        unit = p;
        v /= 1000;
        pref /= 1000.0;
    }
    format!("{v:7} {unit} ")
}

/// Counters with the meaning of `torch.cuda.memory_stats` (all pools), plus
/// the full per-pool [`DeviceStats`] in `detailed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// `allocated_bytes.all.current`.
    pub allocated_bytes_current: usize,
    /// `allocated_bytes.all.peak`.
    pub allocated_bytes_peak: usize,
    /// `allocated_bytes.all.allocated`.
    pub allocated_bytes_allocated: u64,
    /// `allocated_bytes.all.freed`.
    pub allocated_bytes_freed: u64,
    /// `reserved_bytes.all.current`.
    pub reserved_bytes_current: usize,
    /// `reserved_bytes.all.peak`.
    pub reserved_bytes_peak: usize,
    /// `reserved_bytes.all.allocated`.
    pub reserved_bytes_allocated: u64,
    /// `reserved_bytes.all.freed`.
    pub reserved_bytes_freed: u64,
    /// `requested_bytes.all.current`.
    pub requested_bytes_current: usize,
    /// `requested_bytes.all.peak`.
    pub requested_bytes_peak: usize,
    /// `active.all.current`.
    pub active_current: usize,
    /// `active.all.peak`.
    pub active_peak: usize,
    /// `allocation.all.allocated`: blocks handed out.
    pub allocation_count: u64,
    /// `allocation.all.freed`: blocks returned.
    pub free_count: u64,
    /// `segment.all.current`.
    pub segment_current: usize,
    /// `segment.all.peak`.
    pub segment_peak: usize,
    /// `num_alloc_retries`.
    pub num_alloc_retries: u64,
    /// `num_ooms`.
    pub num_ooms: u64,
    /// Every statistic, per pool, as torch keeps them.
    pub detailed: DeviceStats,
}

impl From<&DeviceStats> for MemoryStats {
    fn from(d: &DeviceStats) -> Self {
        let u = |v: i64| v.max(0) as usize;
        let w = |v: i64| v.max(0) as u64;
        MemoryStats {
            allocated_bytes_current: u(d.allocated_bytes.all.current),
            allocated_bytes_peak: u(d.allocated_bytes.all.peak),
            allocated_bytes_allocated: w(d.allocated_bytes.all.allocated),
            allocated_bytes_freed: w(d.allocated_bytes.all.freed),
            reserved_bytes_current: u(d.reserved_bytes.all.current),
            reserved_bytes_peak: u(d.reserved_bytes.all.peak),
            reserved_bytes_allocated: w(d.reserved_bytes.all.allocated),
            reserved_bytes_freed: w(d.reserved_bytes.all.freed),
            requested_bytes_current: u(d.requested_bytes.all.current),
            requested_bytes_peak: u(d.requested_bytes.all.peak),
            active_current: u(d.active.all.current),
            active_peak: u(d.active.all.peak),
            allocation_count: w(d.allocation.all.allocated),
            free_count: w(d.allocation.all.freed),
            segment_current: u(d.segment.all.current),
            segment_peak: u(d.segment.all.peak),
            num_alloc_retries: w(d.num_alloc_retries),
            num_ooms: w(d.num_ooms),
            detailed: d.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_has_torch_keys_sorted() {
        let m = DeviceStats::default().to_map();
        assert_eq!(m.len(), 9 * 3 * 4 + 2 * 4 + 6);
        assert!(m.windows(2).all(|w| w[0].0 < w[1].0));
        let get = |k: &str| m.iter().find(|e| e.0 == k).map(|e| e.1);
        for k in [
            "allocated_bytes.all.current",
            "allocated_bytes.large_pool.peak",
            "allocated_bytes.small_pool.freed",
            "reserved_bytes.all.allocated",
            "active_bytes.all.current",
            "active.small_pool.peak",
            "allocation.all.allocated",
            "segment.large_pool.current",
            "requested_bytes.all.freed",
            "inactive_split.all.current",
            "inactive_split_bytes.small_pool.current",
            "oversize_allocations.current",
            "oversize_segments.freed",
            "num_alloc_retries",
            "num_ooms",
            "num_sync_all_streams",
            "num_device_alloc",
            "num_device_free",
        ] {
            assert_eq!(get(k), Some(0), "{k}");
        }
        assert_eq!(get("max_split_size"), Some(-1));
    }

    #[test]
    fn stat_views_follow_torch() {
        let mut s = Stat::default();
        s.increase(10);
        s.decrease(4);
        s.change(3);
        s.change(-2);
        assert_eq!(
            s,
            Stat {
                current: 7,
                peak: 10,
                allocated: 13,
                freed: 6
            }
        );
        s.reset_peak();
        s.reset_accumulated();
        assert_eq!(
            s,
            Stat {
                current: 7,
                peak: 7,
                allocated: 0,
                freed: 0
            }
        );
    }

    #[test]
    fn formats_like_torch() {
        assert_eq!(format_size(1024, 1024), "  1024 B  ");
        assert_eq!(format_size(2 << 20, 2 << 20), "  2048 KiB");
        assert_eq!(format_size(20 << 20, 20 << 20), " 20480 KiB");
        assert_eq!(format_size(1 << 30, 1 << 30), "  1024 MiB");
        assert_eq!(format_size(0, 1 << 30), "     0 MiB");
        assert_eq!(format_count(12, 12), "     12   ");
    }
}
