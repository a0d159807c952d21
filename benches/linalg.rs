//! Criterion benches of the matrix-product, reduction and softmax kernels.
//!
//! - `sgemm/{256,1024,2048}` (and `sgemm_at/1024`, A transposed in place,
//!   `dgemm/1024`): throughput is 2 n^3 flops, so criterion's "elem/s" is
//!   FLOP/s (`Gelem/s` = GFLOP/s).
//! - `bgemm/{256,1024,2048}` (bfloat16, the AVX512_BF16 kernel where the CPU
//!   has it; `FOO_RS_BF16_GEMM=0` selects the widening path for comparison)
//!   and `bgemm_linear/256x1024x1024` (x @ W^T, W row-major): GFLOP/s as above.
//! - `sum/{1M,16M}` (float32, full reduction) and `sum_dim0/16M` (column
//!   sums of a 4096 x 4096 matrix): throughput is the bytes read (GB/s).
//! - `softmax/4096x4096` (float32, last dim): bytes read plus written.
//!
//! `cargo bench --bench linalg` (optionally `-- sgemm/1024`); set
//! `RAYON_NUM_THREADS` to change the thread count (default: all cores).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use foo_rs::kernels::linalg::mm;
use foo_rs::kernels::nn::softmax;
use foo_rs::kernels::reduce::{reduce_op, ReduceOp};
use foo_rs::kernels::Strided;
use foo_rs::DType;
use std::hint::black_box;
use std::time::Duration;

fn f32s(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn mat<T>(v: &[T], dtype: DType, rows: usize, cols: usize) -> Strided {
    Strided::contiguous(v.as_ptr() as *mut u8, dtype, &[rows, cols])
}

fn gemm_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("sgemm");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for &n in &[256usize, 1024, 2048] {
        let a = f32s(n * n, 1);
        let b = f32s(n * n, 2);
        let out = vec![0f32; n * n];
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, &n| {
            bench.iter(|| {
                mm(
                    &mat(&out, DType::F32, n, n),
                    &mat(&a, DType::F32, n, n),
                    &mat(&b, DType::F32, n, n),
                )
                .unwrap()
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("sgemm_at");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let n = 1024;
    let a = f32s(n * n, 3);
    let b = f32s(n * n, 4);
    let out = vec![0f32; n * n];
    let at = Strided::new(
        a.as_ptr() as *mut u8,
        DType::F32,
        vec![n, n],
        vec![1, n as isize],
    );
    g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
    g.bench_function(BenchmarkId::from_parameter(n), |bench| {
        bench.iter(|| {
            mm(
                &mat(&out, DType::F32, n, n),
                &at,
                &mat(&b, DType::F32, n, n),
            )
            .unwrap()
        });
    });
    g.finish();

    let mut g = c.benchmark_group("dgemm");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let a: Vec<f64> = f32s(n * n, 5).into_iter().map(f64::from).collect();
    let b: Vec<f64> = f32s(n * n, 6).into_iter().map(f64::from).collect();
    let out = vec![0f64; n * n];
    g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
    g.bench_function(BenchmarkId::from_parameter(n), |bench| {
        bench.iter(|| {
            mm(
                &mat(&out, DType::F64, n, n),
                &mat(&a, DType::F64, n, n),
                &mat(&b, DType::F64, n, n),
            )
            .unwrap()
        });
    });
    g.finish();
}

fn bf16s(n: usize, seed: u32) -> Vec<half::bf16> {
    f32s(n, seed)
        .into_iter()
        .map(half::bf16::from_f32)
        .collect()
}

fn bf16_gemm_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("bgemm");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for &n in &[256usize, 1024, 2048] {
        let a = bf16s(n * n, 9);
        let b = bf16s(n * n, 10);
        let out = bf16s(n * n, 11);
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, &n| {
            bench.iter(|| {
                mm(
                    &mat(&out, DType::BF16, n, n),
                    &mat(&a, DType::BF16, n, n),
                    &mat(&b, DType::BF16, n, n),
                )
                .unwrap()
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("bgemm_linear");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let (m, k, n) = (256usize, 1024usize, 1024usize);
    let x = bf16s(m * k, 12);
    let w = bf16s(n * k, 13);
    let out = bf16s(m * n, 14);
    // W^T: the [n, k] weight read as a k x n matrix with unit row stride.
    let wt = Strided::new(
        w.as_ptr() as *mut u8,
        DType::BF16,
        vec![k, n],
        vec![1, k as isize],
    );
    g.throughput(Throughput::Elements(2 * (m * k * n) as u64));
    g.bench_function(BenchmarkId::from_parameter("256x1024x1024"), |bench| {
        bench.iter(|| {
            mm(
                &mat(&out, DType::BF16, m, n),
                &mat(&x, DType::BF16, m, k),
                &wt,
            )
            .unwrap()
        });
    });
    g.finish();
}

fn reduce_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("sum");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for &(n, name) in &[(1usize << 20, "1M"), (1 << 24, "16M")] {
        let x = f32s(n, 7);
        let mut out = [0f32; 1];
        g.throughput(Throughput::Bytes((n * 4) as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |bench| {
            bench.iter(|| {
                reduce_op(
                    ReduceOp::Sum,
                    &Strided::contiguous(out.as_mut_ptr() as *mut u8, DType::F32, &[1]),
                    None,
                    &Strided::contiguous(x.as_ptr() as *mut u8, DType::F32, &[n]),
                )
                .unwrap();
                black_box(out[0])
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("sum_dim0");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let n = 4096;
    let x = f32s(n * n, 8);
    let out = vec![0f32; n];
    g.throughput(Throughput::Bytes((n * n * 4) as u64));
    g.bench_function(BenchmarkId::from_parameter("16M"), |bench| {
        bench.iter(|| {
            reduce_op(
                ReduceOp::Sum,
                &mat(&out, DType::F32, 1, n),
                None,
                &mat(&x, DType::F32, n, n),
            )
            .unwrap();
        });
    });
    g.finish();
}

fn softmax_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("softmax");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let n = 4096;
    let x = f32s(n * n, 9);
    let out = vec![0f32; n * n];
    g.throughput(Throughput::Bytes((2 * n * n * 4) as u64));
    g.bench_function(BenchmarkId::from_parameter("4096x4096"), |bench| {
        bench.iter(|| {
            softmax(
                &mat(&out, DType::F32, n, n),
                &mat(&x, DType::F32, n, n),
                1,
                false,
            )
            .unwrap()
        });
    });
    g.finish();
}

criterion_group!(
    benches,
    gemm_benches,
    bf16_gemm_benches,
    reduce_benches,
    softmax_benches
);
criterion_main!(benches);
