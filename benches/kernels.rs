//! Criterion benches of the elementwise kernels (float32, contiguous,
//! preallocated outputs) at 1K, 64K, 1M and 16M elements. Throughput is the
//! bytes the op reads plus writes, so criterion reports GB/s.
//!
//! `cargo bench --bench kernels` (optionally `-- add/16M`); set
//! `FOO_RS_SIMD=avx2|portable` to measure a lower SIMD level, and
//! `RAYON_NUM_THREADS` to change the thread count.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use foo_rs::kernels::elementwise::{
    binary, ternary, unary, BinaryOp, Operand, Scalar, TernaryOp, UnaryOp,
};
use foo_rs::kernels::Strided;
use foo_rs::DType;
use std::hint::black_box;
use std::time::Duration;

const SIZES: [(usize, &str); 4] = [
    (1 << 10, "1K"),
    (1 << 16, "64K"),
    (1 << 20, "1M"),
    (1 << 24, "16M"),
];

fn f32s(n: usize, seed: u32) -> Vec<f32> {
    // Deterministic values in about [-4, 4] (a cheap LCG, no rand dependency).
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0
        })
        .collect()
}

fn view<T>(v: &[T], dtype: DType) -> Strided {
    Strided::contiguous(v.as_ptr() as *mut u8, dtype, &[v.len()])
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g
}

fn bench_unary(c: &mut Criterion, name: &str, op: UnaryOp) {
    let mut g = configure(c, name);
    for (n, label) in SIZES {
        let x = f32s(n, 1);
        let out = vec![0f32; n];
        let (xv, ov) = (view(&x, DType::F32), view(&out, DType::F32));
        g.throughput(Throughput::Bytes((2 * 4 * n) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(label), &n, |b, _| {
            b.iter(|| unary(black_box(&op), &ov, Operand::Tensor(&xv), DType::F32).unwrap())
        });
    }
    g.finish();
}

fn bench_binary(c: &mut Criterion, name: &str, op: BinaryOp) {
    let mut g = configure(c, name);
    for (n, label) in SIZES {
        let (x, y) = (f32s(n, 1), f32s(n, 2));
        let out = vec![0f32; n];
        let (xv, yv, ov) = (
            view(&x, DType::F32),
            view(&y, DType::F32),
            view(&out, DType::F32),
        );
        g.throughput(Throughput::Bytes((3 * 4 * n) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(label), &n, |b, _| {
            b.iter(|| {
                binary(
                    black_box(&op),
                    &ov,
                    Operand::Tensor(&xv),
                    Operand::Tensor(&yv),
                    DType::F32,
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    bench_binary(
        c,
        "add",
        BinaryOp::Add {
            alpha: Scalar::Int(1),
        },
    );
    bench_binary(c, "mul", BinaryOp::Mul);
    bench_unary(c, "exp", UnaryOp::Exp);
    bench_unary(c, "gelu", UnaryOp::Gelu { tanh: false });
    bench_unary(c, "sigmoid", UnaryOp::Sigmoid);
    bench_unary(c, "relu", UnaryOp::Relu);

    let mut g = configure(c, "where");
    for (n, label) in SIZES {
        let (x, y) = (f32s(n, 1), f32s(n, 2));
        let cond: Vec<bool> = f32s(n, 3).iter().map(|v| *v > 0.0).collect();
        let out = vec![0f32; n];
        let (cv, xv, yv, ov) = (
            view(&cond, DType::Bool),
            view(&x, DType::F32),
            view(&y, DType::F32),
            view(&out, DType::F32),
        );
        g.throughput(Throughput::Bytes((13 * n) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(label), &n, |b, _| {
            b.iter(|| {
                ternary(
                    black_box(&TernaryOp::Where),
                    &ov,
                    Operand::Tensor(&cv),
                    Operand::Tensor(&xv),
                    Operand::Tensor(&yv),
                    DType::F32,
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, elementwise);
criterion_main!(benches);
