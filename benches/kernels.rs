//! Criterion benches of the elementwise kernels (float32, contiguous,
//! preallocated outputs) at 1K, 64K, 1M and 16M elements. Throughput is the
//! bytes the op reads plus writes, so criterion reports GB/s. The `pool`
//! group times resnet18's stem pooling (8x64x112x112 float32, 3x3 window,
//! stride 2, padding 1) forward and backward, NCHW and channels-last, and
//! its head's 7x7 -> 1x1 adaptive average pooling. The `conv` group times
//! float32 convolutions of resnet18 and mobilenet_v3_small (batch 8:
//! a dense 3x3, a stride-2 3x3, depthwise 3x3 stride 2 and 5x5 layers, a
//! 1x1 on 1x1 maps), forward, input gradient and weight gradient;
//! throughput is the direct convolution's multiply-adds' flops, so
//! criterion's "elem/s" reads as FLOP/s (compare with the FMA peak `cargo
//! bench --bench limits` reports; the dense 3x3 layer's forward and input
//! gradient run Winograd's F(2x2, 3x3), 2.25x fewer multiply-adds, so
//! theirs is an equivalent rate that can exceed the peak).
//!
//! `cargo bench --bench kernels` (optionally `-- add/16M`); set
//! `FOO_RS_SIMD=avx2|portable` to measure a lower SIMD level, and
//! `FOO_RS_NUM_THREADS` (foo's pool) and `RAYON_NUM_THREADS` (the gemm crate's) to
//! change the thread count.

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

/// A contiguous NCHW (or, with `cl`, channels-last) 4-d view of `v`.
fn view4<T>(v: &[T], dtype: DType, [n, c, h, w]: [usize; 4], cl: bool) -> Strided {
    let strides: [isize; 4] = if cl {
        [(h * w * c) as isize, 1, (w * c) as isize, c as isize]
    } else {
        [(c * h * w) as isize, (h * w) as isize, w as isize, 1]
    };
    Strided::new(
        v.as_ptr() as *mut u8,
        dtype,
        &[n, c, h, w][..],
        &strides[..],
    )
}

fn pooling(c: &mut Criterion) {
    use foo_rs::kernels::pool::{self, Window};
    let win = Window {
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
    };
    let (ins, outs) = ([8, 64, 112, 112], [8, 64, 56, 56]);
    let x = f32s(ins.iter().product(), 1);
    let go = f32s(outs.iter().product(), 2);
    let (out, gi) = (vec![0f32; go.len()], vec![0f32; x.len()]);
    let idx = vec![0i64; go.len()];
    let mut g = configure(c, "pool");
    g.throughput(Throughput::Bytes((4 * x.len()) as u64));
    for cl in [false, true] {
        let layout = if cl { "nhwc" } else { "nchw" };
        let (xv, ov, iv) = (
            view4(&x, DType::F32, ins, cl),
            view4(&out, DType::F32, outs, cl),
            view4(&idx, DType::I64, outs, cl),
        );
        let (giv, gov) = (
            view4(&gi, DType::F32, ins, cl),
            view4(&go, DType::F32, outs, cl),
        );
        g.bench_function(format!("max_pool2d fwd {layout}"), |b| {
            b.iter(|| pool::max_pool2d(&ov, &iv, black_box(&xv), win).unwrap())
        });
        pool::max_pool2d(&ov, &iv, &xv, win).unwrap();
        g.bench_function(format!("max_pool2d bwd {layout}"), |b| {
            b.iter(|| pool::max_pool2d_backward(&giv, black_box(&gov), &iv).unwrap())
        });
        g.bench_function(format!("avg_pool2d fwd {layout}"), |b| {
            b.iter(|| pool::avg_pool2d(&ov, black_box(&xv), win, true, None).unwrap())
        });
        g.bench_function(format!("avg_pool2d bwd {layout}"), |b| {
            b.iter(|| pool::avg_pool2d_backward(&giv, black_box(&gov), win, true, None).unwrap())
        });
    }
    let (hx, hout) = (f32s(8 * 512 * 49, 3), vec![0f32; 8 * 512]);
    let (hxv, hov) = (
        view4(&hx, DType::F32, [8, 512, 7, 7], false),
        view4(&hout, DType::F32, [8, 512, 1, 1], false),
    );
    g.bench_function("adaptive_avg_pool2d 8x512x7x7 -> 1x1", |b| {
        b.iter(|| pool::adaptive_avg_pool2d(&hov, black_box(&hxv)).unwrap())
    });
    g.finish();
}

fn conv(c: &mut Criterion) {
    use foo_rs::kernels::conv;
    // (name, input, weight, stride, padding, groups)
    type Layer = (&'static str, [usize; 4], [usize; 4], usize, usize, usize);
    let layers: [Layer; 6] = [
        (
            "resnet18 64->64 3x3 @56",
            [8, 64, 56, 56],
            [64, 64, 3, 3],
            1,
            1,
            1,
        ),
        (
            "resnet18 64->128 3x3 s2 @56",
            [8, 64, 56, 56],
            [128, 64, 3, 3],
            2,
            1,
            1,
        ),
        ("dw 72 3x3 s2 @56", [8, 72, 56, 56], [72, 1, 3, 3], 2, 1, 72),
        (
            "dw 144 5x5 @14",
            [8, 144, 14, 14],
            [144, 1, 5, 5],
            1,
            2,
            144,
        ),
        ("dw 576 5x5 @7", [8, 576, 7, 7], [576, 1, 5, 5], 1, 2, 576),
        (
            "se 144->576 1x1 @1",
            [8, 144, 1, 1],
            [576, 144, 1, 1],
            1,
            0,
            1,
        ),
    ];
    let mut grp = configure(c, "conv");
    for (name, xs, ws, s, p, groups) in layers {
        let o = (xs[2] + 2 * p - ws[2]) / s + 1;
        let os = [xs[0], ws[0], o, o];
        let g = conv::geometry(&xs, &ws, [o, o], [s, s], [p, p], [1, 1], groups).unwrap();
        let (x, w) = (f32s(xs.iter().product(), 1), f32s(ws.iter().product(), 2));
        let go = f32s(os.iter().product(), 3);
        let (out, gi, gw) = (
            vec![0f32; go.len()],
            vec![0f32; x.len()],
            vec![0f32; w.len()],
        );
        let (xv, wv, ov) = (
            view4(&x, DType::F32, xs, false),
            view4(&w, DType::F32, ws, false),
            view4(&out, DType::F32, os, false),
        );
        let (gov, giv, gwv) = (
            view4(&go, DType::F32, os, false),
            view4(&gi, DType::F32, xs, false),
            view4(&gw, DType::F32, ws, false),
        );
        let flops = 2 * os.iter().product::<usize>() * ws[1] * ws[2] * ws[3];
        grp.throughput(Throughput::Elements(flops as u64));
        grp.bench_function(format!("{name} fwd"), |b| {
            b.iter(|| conv::forward(&g, &ov, black_box(&xv), &wv, None).unwrap())
        });
        grp.bench_function(format!("{name} grad input"), |b| {
            b.iter(|| {
                conv::backward(&g, black_box(&gov), None, &wv, Some(&giv), None, None).unwrap()
            })
        });
        grp.bench_function(format!("{name} grad weight"), |b| {
            b.iter(|| {
                conv::backward(&g, black_box(&gov), Some(&xv), &wv, None, Some(&gwv), None).unwrap()
            })
        });
    }
    grp.finish();
}

criterion_group!(benches, elementwise, pooling, conv);
criterion_main!(benches);
