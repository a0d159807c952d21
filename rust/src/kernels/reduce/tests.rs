use super::*;
use crate::kernels::contiguous_strides;

fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
    Strided::new(
        v.as_mut_ptr() as *mut u8,
        dtype,
        sizes.to_vec(),
        contiguous_strides(sizes),
    )
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Reference: reduce `x` (row-major `sizes`) over `dims` with f64 sum.
fn ref_sum(x: &[f64], sizes: &[usize], dims: &[usize]) -> Vec<f64> {
    let out_sizes: Vec<usize> = sizes
        .iter()
        .enumerate()
        .map(|(d, &s)| if dims.contains(&d) { 1 } else { s })
        .collect();
    let ost = contiguous_strides(&out_sizes);
    let mut out = vec![0.0; out_sizes.iter().product()];
    let n: usize = sizes.iter().product();
    for (i, &v) in x.iter().enumerate().take(n) {
        let mut rem = i;
        let mut off = 0isize;
        for d in (0..sizes.len()).rev() {
            let idx = rem % sizes[d];
            rem /= sizes[d];
            if !dims.contains(&d) {
                off += idx as isize * ost[d];
            }
        }
        out[off as usize] += v;
    }
    out
}

fn keep(sizes: &[usize], dims: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .enumerate()
        .map(|(d, &s)| if dims.contains(&d) { 1 } else { s })
        .collect()
}

#[test]
fn sum_matches_reference_for_every_layout() {
    let sizes = [5usize, 7, 300];
    let n: usize = sizes.iter().product();
    let x64 = data(n, 1);
    let mut x: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
    let xr: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for dims in [
        vec![0],
        vec![1],
        vec![2],
        vec![0, 1],
        vec![0, 2],
        vec![1, 2],
        vec![0, 1, 2],
    ] {
        let os = keep(&sizes, &dims);
        let mut out = vec![0f32; os.iter().product()];
        reduce_op(
            ReduceOp::Sum,
            &view(&mut out, DType::F32, &os),
            None,
            &view(&mut x, DType::F32, &sizes),
        )
        .unwrap();
        let want = ref_sum(&xr, &sizes, &dims);
        for (a, b) in out.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-4, "dims {dims:?}: {a} vs {b}");
        }
    }
}

#[test]
fn sum_of_transposed_and_negative_strides() {
    // x is [40, 30] row-major; view its transpose [30, 40] and a flipped one.
    let mut x: Vec<f64> = data(1200, 2);
    let xr = x.clone();
    let t = Strided::new(
        x.as_mut_ptr() as *mut u8,
        DType::F64,
        vec![30, 40],
        vec![1, 30],
    );
    let mut out = vec![0f64; 30];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut out, DType::F64, &[30, 1]),
        None,
        &t,
    )
    .unwrap();
    for j in 0..30 {
        let w: f64 = (0..40).map(|i| xr[i * 30 + j]).sum();
        assert!((out[j] - w).abs() < 1e-12);
    }
    // Reduce the transposed view over its dim 0 (memory-contiguous rows).
    let mut out0 = vec![0f64; 40];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut out0, DType::F64, &[1, 40]),
        None,
        &t,
    )
    .unwrap();
    for i in 0..40 {
        let w: f64 = (0..30).map(|j| xr[i * 30 + j]).sum();
        assert!((out0[i] - w).abs() < 1e-12);
    }
    let flipped = Strided::new(
        unsafe { x.as_mut_ptr().add(1199) } as *mut u8,
        DType::F64,
        vec![1200],
        vec![-1],
    );
    let mut all = vec![0f64; 1];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut all, DType::F64, &[1]),
        None,
        &flipped,
    )
    .unwrap();
    assert!((all[0] - xr.iter().sum::<f64>()).abs() < 1e-10);
}

#[test]
fn big_sum_is_accurate_and_thread_count_independent() {
    let _level = crate::kernels::elementwise::simd::level_switch();
    let n = 3_000_017;
    let mut x: Vec<f32> = data(n, 3).iter().map(|&v| (v + 1.0) as f32).collect();
    let exact: f64 = x.iter().map(|&v| v as f64).sum();
    let run = |threads: usize, x: &mut Vec<f32>, level: u8| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = vec![0f32; 1];
        set_simd_level(level);
        pool.install(|| {
            crate::kernels::parallel::with_threads(threads, || {
                reduce_op(
                    ReduceOp::Sum,
                    &view(&mut out, DType::F32, &[1]),
                    None,
                    &view(x, DType::F32, &[n]),
                )
                .unwrap()
            })
        });
        set_simd_level(2);
        out[0]
    };
    let one = run(1, &mut x, 2);
    assert!(
        ((one as f64) - exact).abs() / exact < 1e-6,
        "{one} vs {exact}"
    );
    for t in [2, 3, 7] {
        assert_eq!(run(t, &mut x, 2).to_bits(), one.to_bits());
    }
    // Same bits at every SIMD level (lanes fix the order of additions).
    assert_eq!(run(2, &mut x, 0).to_bits(), one.to_bits());
    assert_eq!(run(2, &mut x, 1).to_bits(), one.to_bits());
}

#[test]
fn outer_layout_is_thread_count_independent() {
    let (r, c) = (5000, 70);
    let mut x: Vec<f32> = data(r * c, 4).iter().map(|&v| v as f32).collect();
    let run = |threads: usize, x: &mut Vec<f32>| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = vec![0f32; c];
        pool.install(|| {
            crate::kernels::parallel::with_threads(threads, || {
                reduce_op(
                    ReduceOp::Sum,
                    &view(&mut out, DType::F32, &[1, c]),
                    None,
                    &view(x, DType::F32, &[r, c]),
                )
                .unwrap()
            })
        });
        out
    };
    let one = run(1, &mut x);
    let two = run(4, &mut x);
    assert!(one
        .iter()
        .zip(&two)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    for j in 0..c {
        let w: f64 = (0..r).map(|i| x[i * c + j] as f64).sum();
        assert!((one[j] as f64 - w).abs() < 1e-3);
    }
}

#[test]
fn integer_sum_prod_and_bool() {
    let mut x: Vec<i8> = vec![100, 100, 100, -3, 2, 1];
    let mut out = vec![0i64; 2];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut out, DType::I64, &[2, 1]),
        None,
        &view(&mut x, DType::I8, &[2, 3]),
    )
    .unwrap();
    assert_eq!(out, vec![300, 0]);
    reduce_op(
        ReduceOp::Prod,
        &view(&mut out, DType::I64, &[2, 1]),
        None,
        &view(&mut x, DType::I8, &[2, 3]),
    )
    .unwrap();
    assert_eq!(out, vec![1_000_000, -6]);
    let mut b = vec![true, false, true, true];
    let mut o = vec![0i64; 1];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut o, DType::I64, &[1]),
        None,
        &view(&mut b, DType::Bool, &[4]),
    )
    .unwrap();
    assert_eq!(o[0], 3);
    let mut ob = vec![false; 2];
    reduce_op(
        ReduceOp::All,
        &view(&mut ob, DType::Bool, &[2, 1]),
        None,
        &view(&mut b, DType::Bool, &[2, 2]),
    )
    .unwrap();
    assert_eq!(ob, vec![false, true]);
    reduce_op(
        ReduceOp::Any,
        &view(&mut ob, DType::Bool, &[1, 2]),
        None,
        &view(&mut b, DType::Bool, &[2, 2]),
    )
    .unwrap();
    assert_eq!(ob, vec![true, true]);
}

#[test]
fn max_min_propagate_nan_and_arg_takes_first() {
    let mut x = vec![1.0f32, 5.0, 5.0, -2.0, 5.0];
    let mut v = vec![0f32; 1];
    let mut i = vec![0i64; 1];
    reduce_op(
        ReduceOp::MaxDim,
        &view(&mut v, DType::F32, &[1]),
        Some(&view(&mut i, DType::I64, &[1])),
        &view(&mut x, DType::F32, &[5]),
    )
    .unwrap();
    assert_eq!((v[0], i[0]), (5.0, 1));
    reduce_op(
        ReduceOp::ArgMin,
        &view(&mut i, DType::I64, &[1]),
        None,
        &view(&mut x, DType::F32, &[5]),
    )
    .unwrap();
    assert_eq!(i[0], 3);
    // Ties spread over lanes: the first index wins.
    let mut long: Vec<f32> = (0..1000).map(|k| (k % 7) as f32).collect();
    long[999] = 7.0;
    long[500] = 7.0;
    reduce_op(
        ReduceOp::ArgMax,
        &view(&mut i, DType::I64, &[1]),
        None,
        &view(&mut long, DType::F32, &[1000]),
    )
    .unwrap();
    assert_eq!(i[0], 500);
    long[700] = f32::NAN;
    long[800] = f32::NAN;
    reduce_op(
        ReduceOp::ArgMax,
        &view(&mut i, DType::I64, &[1]),
        None,
        &view(&mut long, DType::F32, &[1000]),
    )
    .unwrap();
    assert_eq!(i[0], 700);
    reduce_op(
        ReduceOp::Max,
        &view(&mut v, DType::F32, &[1]),
        None,
        &view(&mut long, DType::F32, &[1000]),
    )
    .unwrap();
    assert!(v[0].is_nan());
    reduce_op(
        ReduceOp::Min,
        &view(&mut v, DType::F32, &[1]),
        None,
        &view(&mut long, DType::F32, &[1000]),
    )
    .unwrap();
    assert!(v[0].is_nan());
    // Column-wise (outer layout) indices.
    let mut m: Vec<i32> = vec![1, 9, 3, 7, 2, 9];
    let mut mv = vec![0i32; 2];
    let mut mi = vec![0i64; 2];
    reduce_op(
        ReduceOp::MaxDim,
        &view(&mut mv, DType::I32, &[1, 2]),
        Some(&view(&mut mi, DType::I64, &[1, 2])),
        &view(&mut m, DType::I32, &[3, 2]),
    )
    .unwrap();
    assert_eq!((mv, mi), (vec![3, 9], vec![1, 0]));
}

#[test]
fn var_std_mean_and_norms() {
    let mut x: Vec<f64> = data(1001, 5);
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
    let mut o = vec![0f64; 1];
    let mut m = vec![0f64; 1];
    reduce_op(
        ReduceOp::Var {
            correction: 1.0,
            sqrt: false,
        },
        &view(&mut o, DType::F64, &[1]),
        Some(&view(&mut m, DType::F64, &[1])),
        &view(&mut x, DType::F64, &[1001]),
    )
    .unwrap();
    assert!((o[0] - var).abs() < 1e-12 && (m[0] - mean).abs() < 1e-14);
    reduce_op(
        ReduceOp::Var {
            correction: 0.0,
            sqrt: true,
        },
        &view(&mut o, DType::F64, &[1]),
        None,
        &view(&mut x, DType::F64, &[1001]),
    )
    .unwrap();
    assert!((o[0] - (var * (n - 1.0) / n).sqrt()).abs() < 1e-12);
    let l2 = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    reduce_op(
        ReduceOp::Norm { ord: 2.0 },
        &view(&mut o, DType::F64, &[1]),
        None,
        &view(&mut x, DType::F64, &[1001]),
    )
    .unwrap();
    assert!((o[0] - l2).abs() < 1e-12);
    let l3 = x
        .iter()
        .map(|v| v.abs().powi(3))
        .sum::<f64>()
        .powf(1.0 / 3.0);
    reduce_op(
        ReduceOp::Norm { ord: 3.0 },
        &view(&mut o, DType::F64, &[1]),
        None,
        &view(&mut x, DType::F64, &[1001]),
    )
    .unwrap();
    assert!((o[0] - l3).abs() < 1e-12);
    let linf = x.iter().fold(0f64, |a, v| a.max(v.abs()));
    reduce_op(
        ReduceOp::Norm { ord: f64::INFINITY },
        &view(&mut o, DType::F64, &[1]),
        None,
        &view(&mut x, DType::F64, &[1001]),
    )
    .unwrap();
    assert_eq!(o[0], linf);
    // One element, correction 1: 0/0.
    reduce_op(
        ReduceOp::Var {
            correction: 1.0,
            sqrt: false,
        },
        &view(&mut o, DType::F64, &[1]),
        None,
        &view(&mut x[..1], DType::F64, &[1]),
    )
    .unwrap();
    assert!(o[0].is_nan());
}

#[test]
fn empty_reductions_give_identities_and_mean_nan() {
    let mut x: Vec<f32> = vec![];
    let mut o = vec![7f32; 3];
    let e = Strided::new(
        x.as_mut_ptr() as *mut u8,
        DType::F32,
        vec![0, 3],
        vec![3, 1],
    );
    reduce_op(ReduceOp::Sum, &view(&mut o, DType::F32, &[1, 3]), None, &e).unwrap();
    assert_eq!(o, vec![0.0; 3]);
    reduce_op(ReduceOp::Prod, &view(&mut o, DType::F32, &[1, 3]), None, &e).unwrap();
    assert_eq!(o, vec![1.0; 3]);
    reduce_op(ReduceOp::Mean, &view(&mut o, DType::F32, &[1, 3]), None, &e).unwrap();
    assert!(o.iter().all(|v| v.is_nan()));
}

#[test]
fn half_types_accumulate_in_f32() {
    let n = 10_000;
    let mut x: Vec<bf16> = (0..n).map(|_| bf16::from_f32(1.0)).collect();
    let mut o = vec![bf16::ZERO; 1];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut o, DType::BF16, &[1]),
        None,
        &view(&mut x, DType::BF16, &[n]),
    )
    .unwrap();
    assert_eq!(
        o[0].to_f32(),
        10_000f32.min(bf16::from_f32(10_000.0).to_f32())
    );
    let mut h: Vec<f16> = (0..n).map(|_| f16::from_f32(0.5)).collect();
    let mut oh = vec![f16::ZERO; 1];
    reduce_op(
        ReduceOp::Mean,
        &view(&mut oh, DType::F16, &[1]),
        None,
        &view(&mut h, DType::F16, &[n]),
    )
    .unwrap();
    assert_eq!(oh[0].to_f32(), 0.5);
}

#[test]
fn dtype_mismatch_is_refused() {
    let mut x = vec![1i32; 4];
    let mut o = vec![0i32; 1];
    assert!(reduce_op(
        ReduceOp::Sum,
        &view(&mut o, DType::I32, &[1]),
        None,
        &view(&mut x, DType::I32, &[4])
    )
    .is_err());
    let mut of = vec![0f32; 1];
    let r = reduce_op(
        ReduceOp::Mean,
        &view(&mut of, DType::I32, &[1]),
        None,
        &view(&mut x, DType::I32, &[4]),
    );
    assert!(matches!(r, Err(KernelError::UnsupportedDtype { .. })));
}

#[test]
fn cumsum_and_cumprod() {
    let mut x: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut o = vec![0f32; 6];
    scan(
        false,
        &view(&mut o, DType::F32, &[2, 3]),
        &view(&mut x, DType::F32, &[2, 3]),
        1,
    )
    .unwrap();
    assert_eq!(o, vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    scan(
        false,
        &view(&mut o, DType::F32, &[2, 3]),
        &view(&mut x, DType::F32, &[2, 3]),
        0,
    )
    .unwrap();
    assert_eq!(o, vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    let mut xi: Vec<u8> = vec![2, 3, 4];
    let mut oi = vec![0i64; 3];
    scan(
        true,
        &view(&mut oi, DType::I64, &[3]),
        &view(&mut xi, DType::U8, &[3]),
        0,
    )
    .unwrap();
    assert_eq!(oi, vec![2, 6, 24]);
}

#[test]
fn many_small_outputs_parallel() {
    // M large, R small: the parallel-over-outputs path.
    let (m, r) = (50_000, 3);
    let mut x: Vec<f64> = data(m * r, 6);
    let mut o = vec![0f64; m];
    reduce_op(
        ReduceOp::Sum,
        &view(&mut o, DType::F64, &[m, 1]),
        None,
        &view(&mut x, DType::F64, &[m, r]),
    )
    .unwrap();
    for i in (0..m).step_by(997) {
        assert!((o[i] - (x[3 * i] + x[3 * i + 1] + x[3 * i + 2])).abs() < 1e-12);
    }
}
