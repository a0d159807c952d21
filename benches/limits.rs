//! The machine's physical limits, measured the way the kernels are (same
//! thread pool, same criterion settings), so every kernel bench can be read as
//! a fraction of what the machine can do:
//!
//! - `limits/stream/copy` and `limits/stream/triad` (`a = b + s * c`): STREAM
//!   over 64 MiB arrays, far beyond the caches; throughput in bytes moved.
//! - `limits/fma/peak`: independent fused multiply-add chains at the widest
//!   SIMD level the CPU has, on every thread; throughput in FLOPs
//!   (criterion's `elem/s` reads as FLOP/s).
//!
//! `cargo bench --bench limits`; `python scripts/bench_report.py` then prints
//! every kernel bench as a fraction of these.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foo_rs::kernels::parallel;
use std::hint::black_box;
use std::time::Duration;

const N: usize = 16 << 20; // f32 elements: 64 MiB per array

#[derive(Clone, Copy)]
struct Ptr(*mut f32);
// SAFETY: tasks write disjoint ranges.
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// Runs `f(lo, hi)` over `0..n` split into contiguous tasks on the pool.
fn split(n: usize, f: impl Fn(usize, usize) + Sync) {
    let tasks = parallel::num_threads() * 4;
    let chunk = n.div_ceil(tasks).div_ceil(16) * 16;
    parallel::parallel_for(n.div_ceil(chunk), |t| {
        f(t * chunk, ((t + 1) * chunk).min(n))
    });
}

fn stream(c: &mut Criterion) {
    let a = vec![1.0f32; N];
    let b = vec![2.0f32; N];
    let mut o = vec![0.0f32; N];
    let po = Ptr(o.as_mut_ptr());
    let mut g = c.benchmark_group("limits/stream");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes((2 * 4 * N) as u64));
    g.bench_function("copy", |bch| {
        bch.iter(|| {
            split(N, |lo, hi| {
                #[allow(clippy::redundant_locals)]
                // capture the Send wrapper, not its raw-pointer field
                let po = po;
                // SAFETY: [lo, hi) is this task's part of `o`.
                let dst = unsafe { std::slice::from_raw_parts_mut(po.0.add(lo), hi - lo) };
                dst.copy_from_slice(&a[lo..hi]);
            })
        })
    });
    g.throughput(Throughput::Bytes((3 * 4 * N) as u64));
    let s = black_box(3.0f32);
    g.bench_function("triad", |bch| {
        bch.iter(|| {
            split(N, |lo, hi| {
                #[allow(clippy::redundant_locals)]
                // capture the Send wrapper, not its raw-pointer field
                let po = po;
                // SAFETY: as above.
                let dst = unsafe { std::slice::from_raw_parts_mut(po.0.add(lo), hi - lo) };
                for ((d, &x), &y) in dst.iter_mut().zip(&a[lo..hi]).zip(&b[lo..hi]) {
                    *d = x + s * y;
                }
            })
        })
    });
    g.finish();
    black_box(&o);
}

/// FMA chains per thread and iterations per call.
const CHAINS: usize = 12;
const ITERS: usize = 1 << 16;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512() -> f32 {
    use std::arch::x86_64::*;
    let (x, y) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); CHAINS];
    for _ in 0..ITERS {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_ps(*a, x, y);
        }
    }
    acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2() -> f32 {
    use std::arch::x86_64::*;
    let (x, y) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    for _ in 0..ITERS {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, x, y);
        }
    }
    let mut out = [0f32; 8];
    let mut s = 0.0;
    for a in acc {
        _mm256_storeu_ps(out.as_mut_ptr(), a);
        s += out.iter().sum::<f32>();
    }
    s
}

fn fma_portable() -> f32 {
    let mut acc = [[1.0f32; 8]; CHAINS];
    for _ in 0..ITERS {
        for a in acc.iter_mut() {
            for v in a.iter_mut() {
                *v = v.mul_add(0.999_999, 1e-7);
            }
        }
    }
    acc.iter().flatten().sum()
}

/// (lanes, one call of the widest loop this CPU runs).
fn widest() -> (usize, fn() -> f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected.
            return (16, || unsafe { fma_avx512() });
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected.
            return (8, || unsafe { fma_avx2() });
        }
    }
    (8, fma_portable)
}

fn fma(c: &mut Criterion) {
    let (lanes, f) = widest();
    let threads = parallel::num_threads();
    let mut g = c.benchmark_group("limits/fma");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(
        (threads * ITERS * CHAINS * lanes * 2) as u64,
    ));
    g.bench_function("peak", |bch| {
        bch.iter(|| {
            parallel::parallel_for(threads, |_| {
                black_box(f());
            })
        })
    });
    g.finish();
}

criterion_group!(benches, stream, fma);
criterion_main!(benches);
