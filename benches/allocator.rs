//! Allocator benchmarks: foo's caching allocator against the system
//! allocator (`std::alloc`, glibc malloc on Linux).
//!
//! - `alloc_free/*`: allocate and free at once, from a warm cache.
//! - `alloc_touch_free/*`: allocate, write one byte per 4 KiB page, free.
//!   This is where page faults show: the system allocator hands back fresh
//!   pages for large sizes, the cache hands back pages already faulted in.
//!   `foo_cold` empties the cache every time, so it pays for a new segment
//!   (2 MiB-aligned, advised for transparent huge pages).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use foo_rs::allocator::{DeviceAllocator, ALIGNMENT};
use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const PAGE: usize = 4 * KIB;

fn label(n: usize) -> String {
    if n >= MIB {
        format!("{}MiB", n / MIB)
    } else if n >= KIB {
        format!("{}KiB", n / KIB)
    } else {
        format!("{n}B")
    }
}

/// Writes one byte in every page of `p[..n]`.
///
/// # Safety
/// `p` must point to `n` writable bytes.
unsafe fn touch(p: *mut u8, n: usize) {
    for off in (0..n).step_by(PAGE) {
        // SAFETY: off < n, within the caller's block.
        unsafe { p.add(off).write_volatile(1) };
    }
}

fn foo_cycle(a: &DeviceAllocator, n: usize, write: bool) {
    let p = a.allocate(n).expect("bench fits in 8 GiB");
    if write {
        // SAFETY: p is a fresh block of n bytes.
        unsafe { touch(p, n) };
    }
    // SAFETY: p came from `a` and is not used again.
    unsafe { a.free(black_box(p)).expect("p is live") };
}

fn system_cycle(n: usize, write: bool) {
    let layout = Layout::from_size_align(n, ALIGNMENT).expect("valid layout");
    // SAFETY: n > 0.
    let p = unsafe { alloc(layout) };
    assert!(!p.is_null());
    if write {
        // SAFETY: p is a fresh block of n bytes.
        unsafe { touch(p, n) };
    }
    // SAFETY: p came from `alloc` with this layout.
    unsafe { dealloc(black_box(p), layout) };
}

fn alloc_free(c: &mut Criterion) {
    let a = DeviceAllocator::new(0, 8 << 30);
    let mut g = c.benchmark_group("alloc_free");
    for n in [512, 64 * KIB, 4 * MIB, 64 * MIB] {
        foo_cycle(&a, n, true);
        g.bench_with_input(BenchmarkId::new("foo", label(n)), &n, |b, &n| {
            b.iter(|| foo_cycle(&a, n, false))
        });
        g.bench_with_input(BenchmarkId::new("system", label(n)), &n, |b, &n| {
            b.iter(|| system_cycle(n, false))
        });
    }
    g.finish();
}

fn alloc_touch_free(c: &mut Criterion) {
    let a = DeviceAllocator::new(0, 8 << 30);
    let mut g = c.benchmark_group("alloc_touch_free");
    for n in [4 * MIB, 64 * MIB] {
        foo_cycle(&a, n, true);
        g.bench_with_input(BenchmarkId::new("foo", label(n)), &n, |b, &n| {
            b.iter(|| foo_cycle(&a, n, true))
        });
        g.bench_with_input(BenchmarkId::new("foo_cold", label(n)), &n, |b, &n| {
            b.iter(|| {
                foo_cycle(&a, n, true);
                a.empty_cache();
            })
        });
        g.bench_with_input(BenchmarkId::new("system", label(n)), &n, |b, &n| {
            b.iter(|| system_cycle(n, true))
        });
    }
    g.finish();
}

criterion_group!(benches, alloc_free, alloc_touch_free);
criterion_main!(benches);
