//! Engine and op tests against known values and float64 references.

use super::cast::Num;
use super::*;
use crate::dispatch_dtype;
use crate::dtype::DType;
use crate::kernels::{contiguous_strides, KernelError, Strided};
use half::{bf16, f16};

/// Owned test storage (8-byte aligned) that hands out strided views.
struct Buf {
    words: Vec<u64>,
    dtype: DType,
    len: usize,
}

impl Buf {
    fn zeros(dtype: DType, len: usize) -> Buf {
        Buf {
            words: vec![0; (len * dtype.size()).div_ceil(8).max(1)],
            dtype,
            len,
        }
    }

    /// Storage holding `vals` (given as f64) converted to `dtype`.
    fn of(dtype: DType, vals: &[f64]) -> Buf {
        let mut b = Buf::zeros(dtype, vals.len());
        for (i, &v) in vals.iter().enumerate() {
            b.set(i, v);
        }
        b
    }

    fn ptr(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    fn set(&mut self, i: usize, v: f64) {
        assert!(i < self.len);
        let p = self.ptr();
        dispatch_dtype!(self.dtype, T => unsafe { (p as *mut T).add(i).write(T::from_f64(v)) });
    }

    fn get(&self, i: usize) -> f64 {
        assert!(i < self.len);
        let p = self.ptr();
        dispatch_dtype!(self.dtype, T => unsafe { (p as *const T).add(i).read().to_f64() })
    }

    fn view(&self, sizes: &[usize], strides: &[isize], offset: usize) -> Strided {
        Strided::new(
            unsafe { self.ptr().add(offset * self.dtype.size()) },
            self.dtype,
            sizes.to_vec(),
            strides.to_vec(),
        )
    }

    fn contiguous(&self, sizes: &[usize]) -> Strided {
        self.view(sizes, &contiguous_strides(sizes), 0)
    }
}

/// The elements of a view in row-major logical order.
fn read(v: &Strided, b: &Buf) -> Vec<f64> {
    let n = v.numel();
    let base = (v.ptr as usize - b.ptr() as usize) / b.dtype.size();
    let mut out = Vec::with_capacity(n);
    for lin in 0..n {
        let mut rem = lin;
        let mut off = base as isize;
        for d in (0..v.ndim()).rev() {
            off += (rem % v.sizes[d]) as isize * v.strides[d];
            rem /= v.sizes[d];
        }
        out.push(b.get(off as usize));
    }
    out
}

fn t(v: &Strided) -> Operand<'_> {
    Operand::Tensor(v)
}

fn lin(n: usize, scale: f64, shift: f64) -> Vec<f64> {
    (0..n).map(|i| i as f64 * scale + shift).collect()
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

#[test]
fn add_contiguous_with_alpha_all_float_dtypes() {
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let n = 1000;
        let a = Buf::of(dt, &lin(n, 0.25, -10.0));
        let b = Buf::of(dt, &lin(n, -0.5, 3.0));
        let o = Buf::zeros(dt, n);
        let (av, bv, ov) = (a.contiguous(&[n]), b.contiguous(&[n]), o.contiguous(&[n]));
        binary(
            &BinaryOp::Add {
                alpha: Scalar::Float(2.0),
            },
            &ov,
            t(&av),
            t(&bv),
            dt,
        )
        .unwrap();
        let want: Vec<f64> = (0..n).map(|i| a.get(i) + 2.0 * b.get(i)).collect();
        let tol = if dt == DType::BF16 { 1e-2 } else { 1e-3 };
        assert_close(&read(&ov, &o), &want, tol, tol);
    }
}

#[test]
fn broadcasting_follows_torch() {
    // [3, 1] + [4] -> [3, 4]; and a 0-d tensor.
    let a = Buf::of(DType::F32, &[1.0, 2.0, 3.0]);
    let b = Buf::of(DType::F32, &[10.0, 20.0, 30.0, 40.0]);
    let o = Buf::zeros(DType::F32, 12);
    let ov = o.contiguous(&[3, 4]);
    binary(
        &BinaryOp::Mul,
        &ov,
        t(&a.contiguous(&[3, 1])),
        t(&b.contiguous(&[4])),
        DType::F32,
    )
    .unwrap();
    let want: Vec<f64> = (0..12)
        .map(|i| [1.0, 2.0, 3.0][i / 4] * [10.0, 20.0, 30.0, 40.0][i % 4])
        .collect();
    assert_eq!(read(&ov, &o), want);

    let s = Buf::of(DType::F32, &[5.0]);
    binary(
        &BinaryOp::Sub {
            alpha: Scalar::Int(1),
        },
        &ov,
        t(&ov.clone()),
        t(&s.contiguous(&[])),
        DType::F32,
    )
    .unwrap();
    let want2: Vec<f64> = want.iter().map(|v| v - 5.0).collect();
    assert_eq!(read(&ov, &o), want2);

    let bad = Buf::zeros(DType::F32, 5);
    let err = binary(
        &BinaryOp::Mul,
        &ov,
        t(&a.contiguous(&[3, 1])),
        t(&bad.contiguous(&[5])),
        DType::F32,
    )
    .unwrap_err();
    assert!(matches!(err, KernelError::ShapeMismatch(_)));
}

#[test]
fn strided_transposed_and_negative_strides() {
    let n = 6 * 7;
    let a = Buf::of(DType::F64, &lin(n, 1.0, 0.0));
    let b = Buf::of(DType::F64, &lin(n, 100.0, 0.0));
    // a^T as [7, 6]; b reversed along both dims; out transposed too.
    let at = a.view(&[7, 6], &[1, 7], 0);
    let br = b.view(&[7, 6], &[-6, -1], n - 1);
    let o = Buf::zeros(DType::F64, n);
    let ot = o.view(&[7, 6], &[1, 7], 0);
    binary(
        &BinaryOp::Add {
            alpha: Scalar::Int(1),
        },
        &ot,
        t(&at),
        t(&br),
        DType::F64,
    )
    .unwrap();
    let (ra, rb) = (read(&at, &a), read(&br, &b));
    let want: Vec<f64> = ra.iter().zip(&rb).map(|(x, y)| x + y).collect();
    assert_eq!(read(&ot, &o), want);

    // Every other element, small inner rows (the cross-row path).
    let big = Buf::of(DType::F32, &lin(4000, 0.5, 0.0));
    let v = big.view(&[1000, 2], &[4, 2], 0);
    let o2 = Buf::zeros(DType::F32, 2000);
    let o2v = o2.contiguous(&[1000, 2]);
    unary(&UnaryOp::Neg, &o2v, t(&v), DType::F32).unwrap();
    let want: Vec<f64> = read(&v, &big).iter().map(|x| -x).collect();
    assert_eq!(read(&o2v, &o2), want);
}

#[test]
fn zero_size_and_zero_dim() {
    let a = Buf::zeros(DType::F32, 1);
    let o = Buf::zeros(DType::F32, 1);
    let e = a.view(&[0, 3], &[3, 1], 0);
    binary(
        &BinaryOp::Mul,
        &o.view(&[0, 3], &[3, 1], 0),
        t(&e),
        t(&e),
        DType::F32,
    )
    .unwrap();
    let x = Buf::of(DType::F32, &[2.0]);
    let ov = o.contiguous(&[]);
    unary(&UnaryOp::Exp, &ov, t(&x.contiguous(&[])), DType::F32).unwrap();
    assert!((o.get(0) - 2f64.exp()).abs() < 1e-5);
}

#[test]
fn scalars_and_mixed_dtypes_cast_like_tensor_iterator() {
    // int32 tensor + float scalar computed in float32, stored into float64.
    let a = Buf::of(DType::I32, &[1.0, 2.0, 3.0]);
    let o = Buf::zeros(DType::F64, 3);
    let ov = o.contiguous(&[3]);
    binary(
        &BinaryOp::Add {
            alpha: Scalar::Int(1),
        },
        &ov,
        t(&a.contiguous(&[3])),
        Operand::Scalar(Scalar::Float(0.5)),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![1.5, 2.5, 3.5]);
    // int8 + int64 in int64, stored into int16.
    let b = Buf::of(DType::I8, &[-1.0, 100.0, 7.0]);
    let c = Buf::of(DType::I64, &[1000.0, 1.0, -9.0]);
    let o16 = Buf::zeros(DType::I16, 3);
    let o16v = o16.contiguous(&[3]);
    binary(
        &BinaryOp::Mul,
        &o16v,
        t(&b.contiguous(&[3])),
        t(&c.contiguous(&[3])),
        DType::I64,
    )
    .unwrap();
    assert_eq!(read(&o16v, &o16), vec![-1000.0, 100.0, -63.0]);
    // float16 * a scalar uses the scalar in float32 (ATen opmath).
    let h = Buf::of(DType::F16, &[1.0, 2.0, 3.0]);
    let oh = Buf::zeros(DType::F16, 3);
    let ohv = oh.contiguous(&[3]);
    binary(
        &BinaryOp::Mul,
        &ohv,
        t(&h.contiguous(&[3])),
        Operand::Scalar(Scalar::Float(0.1)),
        DType::F16,
    )
    .unwrap();
    let want: Vec<f64> = [1.0f32, 2.0, 3.0]
        .iter()
        .map(|v| f16::from_f32(v * 0.1f32).to_f64())
        .collect();
    assert_eq!(read(&ohv, &oh), want);
}

#[test]
fn in_place_aliasing_is_exact() {
    for &(n, step) in &[(1000usize, 1isize), (3000, 3)] {
        let a = Buf::of(DType::F32, &lin(n * step as usize, 1.0, 0.0));
        let b = Buf::of(DType::F32, &lin(n, 2.0, 1.0));
        let av = a.view(&[n], &[step], 0);
        let before = read(&av, &a);
        binary(
            &BinaryOp::Add {
                alpha: Scalar::Int(1),
            },
            &av,
            t(&av),
            t(&b.contiguous(&[n])),
            DType::F32,
        )
        .unwrap();
        let want: Vec<f64> = before
            .iter()
            .enumerate()
            .map(|(i, x)| x + b.get(i))
            .collect();
        assert_eq!(read(&av, &a), want);
        // x.mul_(x)
        binary(&BinaryOp::Mul, &av, t(&av), t(&av), DType::F32).unwrap();
        let want2: Vec<f64> = want
            .iter()
            .map(|x| ((*x as f32) * (*x as f32)) as f64)
            .collect();
        assert_eq!(read(&av, &a), want2);
    }
}

#[test]
fn overlap_is_refused_like_aten() {
    let a = Buf::of(DType::F32, &lin(10, 1.0, 0.0));
    let out = a.view(&[9], &[1], 1);
    let inp = a.view(&[9], &[1], 0);
    let err = unary(&UnaryOp::Neg, &out, t(&inp), DType::F32).unwrap_err();
    assert!(
        format!("{err}").contains("some elements of the input tensor"),
        "{err}"
    );
    let bcast_out = a.view(&[4], &[0], 0);
    let src = Buf::of(DType::F32, &[1.0, 2.0, 3.0, 4.0]);
    let err = unary(
        &UnaryOp::Neg,
        &bcast_out,
        t(&src.contiguous(&[4])),
        DType::F32,
    )
    .unwrap_err();
    assert!(format!("{err}").contains("more than one element"), "{err}");
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let n = 300_001;
    let a = Buf::of(DType::F32, &lin(n, 1e-4, -15.0));
    let run = |threads: usize| -> Vec<u32> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let o = Buf::zeros(DType::F32, n);
        pool.install(|| {
            crate::kernels::parallel::with_threads(threads, || {
                unary(
                    &UnaryOp::Gelu { tanh: false },
                    &o.contiguous(&[n]),
                    t(&a.contiguous(&[n])),
                    DType::F32,
                )
                .unwrap();
            })
        });
        (0..n).map(|i| (o.get(i) as f32).to_bits()).collect()
    };
    let one = run(1);
    for th in [2, 3, 7] {
        assert!(run(th) == one, "threads={th}");
    }
}

#[test]
fn every_simd_level_gives_the_same_bits() {
    let _level = crate::kernels::elementwise::simd::level_switch();
    let n = 4099;
    let a = Buf::of(DType::F32, &lin(n, 0.013, -27.0));
    let b = Buf::of(DType::F32, &lin(n, -0.007, 3.0));
    let ops = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu { tanh: false },
        UnaryOp::Gelu { tanh: true },
        UnaryOp::Silu,
        UnaryOp::Mish,
        UnaryOp::Expm1,
        UnaryOp::Log1p,
        UnaryOp::Softplus {
            beta: 1.0,
            threshold: 20.0,
        },
    ];
    let run_all = || -> Vec<u32> {
        let mut bits = Vec::new();
        for op in &ops {
            let o = Buf::zeros(DType::F32, n);
            unary(op, &o.contiguous(&[n]), t(&a.contiguous(&[n])), DType::F32).unwrap();
            bits.extend((0..n).map(|i| (o.get(i) as f32).to_bits()));
        }
        let o = Buf::zeros(DType::F32, n);
        binary(
            &BinaryOp::GeluBackward { tanh: false },
            &o.contiguous(&[n]),
            t(&b.contiguous(&[n])),
            t(&a.contiguous(&[n])),
            DType::F32,
        )
        .unwrap();
        bits.extend((0..n).map(|i| (o.get(i) as f32).to_bits()));
        bits
    };
    let prev = simd_level();
    set_simd_level(SimdLevel::Portable);
    let reference = run_all();
    for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
        if set_simd_level(l) == l {
            assert!(run_all() == reference, "{l:?}");
        }
    }
    set_simd_level(prev);
}

#[test]
fn unary_float_ops_match_f64_references() {
    type R = fn(f64) -> f64;
    let cases: Vec<(UnaryOp, R, f64, f64)> = vec![
        (UnaryOp::Exp, f64::exp, -20.0, 20.0),
        (UnaryOp::Exp2, f64::exp2, -20.0, 20.0),
        (UnaryOp::Expm1, f64::exp_m1, -5.0, 5.0),
        (UnaryOp::Log, f64::ln, 0.001, 100.0),
        (UnaryOp::Log1p, f64::ln_1p, -0.9, 100.0),
        (UnaryOp::Log2, f64::log2, 0.001, 100.0),
        (UnaryOp::Log10, f64::log10, 0.001, 100.0),
        (UnaryOp::Sqrt, f64::sqrt, 0.0, 100.0),
        (UnaryOp::Rsqrt, |x| 1.0 / x.sqrt(), 0.01, 100.0),
        (UnaryOp::Sin, f64::sin, -10.0, 10.0),
        (UnaryOp::Cos, f64::cos, -10.0, 10.0),
        (UnaryOp::Tan, f64::tan, -1.5, 1.5),
        (UnaryOp::Asin, f64::asin, -1.0, 1.0),
        (UnaryOp::Acos, f64::acos, -1.0, 1.0),
        (UnaryOp::Atan, f64::atan, -10.0, 10.0),
        (UnaryOp::Sinh, f64::sinh, -5.0, 5.0),
        (UnaryOp::Cosh, f64::cosh, -5.0, 5.0),
        (UnaryOp::Tanh, f64::tanh, -10.0, 10.0),
        (UnaryOp::Asinh, f64::asinh, -10.0, 10.0),
        (UnaryOp::Acosh, f64::acosh, 1.0, 10.0),
        (UnaryOp::Atanh, f64::atanh, -0.99, 0.99),
        (UnaryOp::Erf, math::erf_f64, -4.0, 4.0),
        (UnaryOp::Erfc, math::erfc_f64, -4.0, 4.0),
        (UnaryOp::Erfinv, math::erfinv_f64, -0.99, 0.99),
        (UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp()), -20.0, 20.0),
        (UnaryOp::Floor, f64::floor, -5.0, 5.0),
        (UnaryOp::Ceil, f64::ceil, -5.0, 5.0),
        (UnaryOp::Trunc, f64::trunc, -5.0, 5.0),
        (UnaryOp::Frac, |x| x - x.trunc(), -5.0, 5.0),
        (
            UnaryOp::Round { decimals: 0 },
            f64::round_ties_even,
            -5.0,
            5.0,
        ),
        (UnaryOp::Neg, |x| -x, -5.0, 5.0),
        (UnaryOp::Abs, f64::abs, -5.0, 5.0),
        (UnaryOp::Reciprocal, |x| 1.0 / x, 0.1, 5.0),
        (
            UnaryOp::Sign,
            |x| {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            },
            -5.0,
            5.0,
        ),
        (UnaryOp::Relu, |x| x.max(0.0), -5.0, 5.0),
        (UnaryOp::Silu, |x| x / (1.0 + (-x).exp()), -20.0, 20.0),
        (UnaryOp::Mish, |x| x * x.exp().ln_1p().tanh(), -20.0, 20.0),
        (
            UnaryOp::Gelu { tanh: false },
            |x| 0.5 * x * (1.0 + math::erf_f64(x / 2f64.sqrt())),
            -8.0,
            8.0,
        ),
        (
            UnaryOp::Gelu { tanh: true },
            |x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
            },
            -8.0,
            8.0,
        ),
        (
            UnaryOp::Hardsigmoid,
            |x| (x + 3.0).clamp(0.0, 6.0) / 6.0,
            -5.0,
            5.0,
        ),
        (
            UnaryOp::Hardswish,
            |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            -5.0,
            5.0,
        ),
        (
            UnaryOp::LeakyRelu {
                negative_slope: 0.01,
            },
            |x| if x > 0.0 { x } else { 0.01 * x },
            -5.0,
            5.0,
        ),
        (
            UnaryOp::Elu {
                alpha: 1.0,
                scale: 1.0,
                input_scale: 1.0,
            },
            |x| if x > 0.0 { x } else { x.exp_m1() },
            -5.0,
            5.0,
        ),
        (
            UnaryOp::Softplus {
                beta: 1.0,
                threshold: 20.0,
            },
            |x| if x > 20.0 { x } else { x.exp().ln_1p() },
            -30.0,
            30.0,
        ),
        (
            UnaryOp::Hardtanh {
                min: -1.0,
                max: 1.0,
            },
            |x| x.clamp(-1.0, 1.0),
            -5.0,
            5.0,
        ),
        (
            UnaryOp::Logit { eps: None },
            |x| (x / (1.0 - x)).ln(),
            0.01,
            0.99,
        ),
        (
            UnaryOp::Round { decimals: 2 },
            |x| (x * 100.0).round_ties_even() / 100.0,
            -5.0,
            5.0,
        ),
        (
            UnaryOp::PowScalar {
                exponent: Scalar::Float(1.7),
            },
            |x| x.powf(1.7),
            0.0,
            5.0,
        ),
        (
            UnaryOp::PowScalar {
                exponent: Scalar::Int(2),
            },
            |x| x * x,
            -5.0,
            5.0,
        ),
        (
            UnaryOp::RPowScalar {
                base: Scalar::Float(2.5),
            },
            |x| 2.5f64.powf(x),
            -5.0,
            5.0,
        ),
    ];
    let n = 517;
    for dt in [DType::F32, DType::F64] {
        for (op, f, lo, hi) in &cases {
            let xs = lin(n, (hi - lo) / (n - 1) as f64, *lo);
            let a = Buf::of(dt, &xs);
            let o = Buf::zeros(dt, n);
            unary(op, &o.contiguous(&[n]), t(&a.contiguous(&[n])), dt).unwrap();
            let want: Vec<f64> = (0..n).map(|i| f(a.get(i))).collect();
            let (rtol, atol) = if dt == DType::F32 {
                (3e-6, 1e-6)
            } else {
                (1e-12, 1e-12)
            };
            let got = read(&o.contiguous(&[n]), &o);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let ok =
                    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
                assert!(ok, "{op:?} {dt:?} at x={}: got {g}, want {w}", a.get(i));
            }
        }
    }
}

#[test]
fn integer_semantics_follow_torch() {
    let a = Buf::of(DType::I32, &[7.0, -7.0, 7.0, -7.0, 0.0]);
    let b = Buf::of(DType::I32, &[2.0, 2.0, -2.0, -2.0, 3.0]);
    let o = Buf::zeros(DType::I32, 5);
    let (av, bv, ov) = (a.contiguous(&[5]), b.contiguous(&[5]), o.contiguous(&[5]));
    let check = |op: BinaryOp, want: &[f64]| {
        binary(&op, &ov, t(&av), t(&bv), DType::I32).unwrap();
        assert_eq!(read(&ov, &o), want, "{op:?}");
    };
    check(
        BinaryOp::Div {
            mode: DivMode::Trunc,
        },
        &[3.0, -3.0, -3.0, 3.0, 0.0],
    );
    check(
        BinaryOp::Div {
            mode: DivMode::Floor,
        },
        &[3.0, -4.0, -4.0, 3.0, 0.0],
    );
    check(BinaryOp::Remainder, &[1.0, 1.0, -1.0, -1.0, 0.0]);
    check(BinaryOp::Fmod, &[1.0, -1.0, 1.0, -1.0, 0.0]);
    check(BinaryOp::Pow, &[49.0, 49.0, 0.0, 0.0, 0.0]);
    check(BinaryOp::Shl, &[28.0, -28.0, 0.0, 0.0, 0.0]);
    check(BinaryOp::Shr, &[1.0, -2.0, 0.0, -1.0, 0.0]);
    check(
        BinaryOp::Sub {
            alpha: Scalar::Int(3),
        },
        &[1.0, -13.0, 13.0, -1.0, -9.0],
    );
    // Overflow wraps.
    let big = Buf::of(DType::I8, &[100.0]);
    let o8 = Buf::zeros(DType::I8, 1);
    binary(
        &BinaryOp::Add {
            alpha: Scalar::Int(1),
        },
        &o8.contiguous(&[1]),
        t(&big.contiguous(&[1])),
        t(&big.contiguous(&[1])),
        DType::I8,
    )
    .unwrap();
    assert_eq!(o8.get(0), -56.0);
    // Division by zero raises.
    let z = Buf::of(DType::I64, &[1.0, 0.0]);
    let oz = Buf::zeros(DType::I64, 2);
    for op in [
        BinaryOp::Div {
            mode: DivMode::Floor,
        },
        BinaryOp::Div {
            mode: DivMode::Trunc,
        },
        BinaryOp::Remainder,
        BinaryOp::Fmod,
    ] {
        let err = binary(
            &op,
            &oz.contiguous(&[2]),
            t(&z.contiguous(&[2])),
            t(&z.contiguous(&[2])),
            DType::I64,
        )
        .unwrap_err();
        assert_eq!(format!("{err}"), "ZeroDivisionError");
    }
    // uint8 floor division is truncation, negation wraps.
    let u = Buf::of(DType::U8, &[5.0, 200.0]);
    let ou = Buf::zeros(DType::U8, 2);
    unary(
        &UnaryOp::Neg,
        &ou.contiguous(&[2]),
        t(&u.contiguous(&[2])),
        DType::U8,
    )
    .unwrap();
    assert_eq!(read(&ou.contiguous(&[2]), &ou), vec![251.0, 56.0]);
}

#[test]
fn float_division_modes_and_remainder() {
    let a = Buf::of(DType::F64, &[7.5, -7.5, 7.5, -7.5, 1.0, -1.0, 0.0]);
    let b = Buf::of(DType::F64, &[2.0, 2.0, -2.0, -2.0, 0.0, 0.0, -3.0]);
    let o = Buf::zeros(DType::F64, 7);
    let (av, bv, ov) = (a.contiguous(&[7]), b.contiguous(&[7]), o.contiguous(&[7]));
    binary(
        &BinaryOp::Div {
            mode: DivMode::Floor,
        },
        &ov,
        t(&av),
        t(&bv),
        DType::F64,
    )
    .unwrap();
    let got = read(&ov, &o);
    assert_eq!(&got[..4], &[3.0, -4.0, -4.0, 3.0]);
    assert_eq!(got[4], f64::INFINITY);
    assert_eq!(got[5], f64::NEG_INFINITY);
    assert!(got[6] == 0.0 && got[6].is_sign_negative());
    binary(&BinaryOp::Remainder, &ov, t(&av), t(&bv), DType::F64).unwrap();
    let got = read(&ov, &o);
    assert_eq!(&got[..4], &[1.5, 0.5, -0.5, -1.5]);
    assert!(got[4].is_nan());
    binary(
        &BinaryOp::Div {
            mode: DivMode::Trunc,
        },
        &ov,
        t(&av),
        t(&bv),
        DType::F64,
    )
    .unwrap();
    assert_eq!(&read(&ov, &o)[..4], &[3.0, -3.0, -3.0, 3.0]);
}

#[test]
fn bool_arithmetic_and_logic() {
    let a = Buf::of(DType::Bool, &[0.0, 0.0, 1.0, 1.0]);
    let b = Buf::of(DType::Bool, &[0.0, 1.0, 0.0, 1.0]);
    let o = Buf::zeros(DType::Bool, 4);
    let (av, bv, ov) = (a.contiguous(&[4]), b.contiguous(&[4]), o.contiguous(&[4]));
    let check = |op: BinaryOp, want: &[f64]| {
        binary(&op, &ov, t(&av), t(&bv), DType::Bool).unwrap();
        assert_eq!(read(&ov, &o), want, "{op:?}");
    };
    check(
        BinaryOp::Add {
            alpha: Scalar::Bool(true),
        },
        &[0.0, 1.0, 1.0, 1.0],
    );
    check(BinaryOp::Mul, &[0.0, 0.0, 0.0, 1.0]);
    check(BinaryOp::BitwiseXor, &[0.0, 1.0, 1.0, 0.0]);
    check(BinaryOp::Lt, &[0.0, 1.0, 0.0, 0.0]);
    // Logical ops read any dtype as bool and can write other dtypes.
    let x = Buf::of(DType::F32, &[0.0, 2.5, f64::NAN, -1.0]);
    let y = Buf::of(DType::I64, &[3.0, 0.0, 1.0, 5.0]);
    let of = Buf::zeros(DType::F32, 4);
    binary(
        &BinaryOp::LogicalAnd,
        &of.contiguous(&[4]),
        t(&x.contiguous(&[4])),
        t(&y.contiguous(&[4])),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&of.contiguous(&[4]), &of), vec![0.0, 0.0, 1.0, 1.0]);
    unary(
        &UnaryOp::LogicalNot,
        &of.contiguous(&[4]),
        t(&x.contiguous(&[4])),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&of.contiguous(&[4]), &of), vec![1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn comparisons_nan_and_min_max() {
    let a = Buf::of(DType::F32, &[1.0, f64::NAN, 3.0, -0.5]);
    let b = Buf::of(DType::F32, &[2.0, 1.0, f64::NAN, -0.5]);
    let (av, bv) = (a.contiguous(&[4]), b.contiguous(&[4]));
    let ob = Buf::zeros(DType::Bool, 4);
    let obv = ob.contiguous(&[4]);
    binary(&BinaryOp::Le, &obv, t(&av), t(&bv), DType::F32).unwrap();
    assert_eq!(read(&obv, &ob), vec![1.0, 0.0, 0.0, 1.0]);
    binary(&BinaryOp::Ne, &obv, t(&av), t(&bv), DType::F32).unwrap();
    assert_eq!(read(&obv, &ob), vec![1.0, 1.0, 1.0, 0.0]);
    let o = Buf::zeros(DType::F32, 4);
    let ov = o.contiguous(&[4]);
    binary(&BinaryOp::Maximum, &ov, t(&av), t(&bv), DType::F32).unwrap();
    let got = read(&ov, &o);
    assert!(got[0] == 2.0 && got[1].is_nan() && got[2].is_nan() && got[3] == -0.5);
    binary(&BinaryOp::Fmin, &ov, t(&av), t(&bv), DType::F32).unwrap();
    assert_eq!(read(&ov, &o), vec![1.0, 1.0, 3.0, -0.5]);
}

#[test]
fn where_masked_fill_and_ternary_ops() {
    let c = Buf::of(DType::Bool, &[1.0, 0.0, 1.0]);
    let a = Buf::of(DType::BF16, &[1.5, 2.5, 3.5]);
    let o = Buf::zeros(DType::BF16, 6);
    let ov = o.contiguous(&[2, 3]);
    // where(c, a, scalar) broadcast to [2, 3]
    ternary(
        &TernaryOp::Where,
        &ov,
        t(&c.contiguous(&[3])),
        t(&a.contiguous(&[1, 3])),
        Operand::Scalar(Scalar::Float(-1.0)),
        DType::BF16,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![1.5, -1.0, 3.5, 1.5, -1.0, 3.5]);

    let s = Buf::of(DType::F32, &[1.0, 2.0, 3.0]);
    let x = Buf::of(DType::F32, &[4.0, 5.0, 6.0]);
    let y = Buf::of(DType::F32, &[2.0, 4.0, 8.0]);
    let o = Buf::zeros(DType::F32, 3);
    let (sv, xv, yv, ov) = (
        s.contiguous(&[3]),
        x.contiguous(&[3]),
        y.contiguous(&[3]),
        o.contiguous(&[3]),
    );
    ternary(
        &TernaryOp::Addcmul {
            value: Scalar::Float(0.5),
        },
        &ov,
        t(&sv),
        t(&xv),
        t(&yv),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![5.0, 12.0, 27.0]);
    ternary(
        &TernaryOp::Addcdiv {
            value: Scalar::Int(2),
        },
        &ov,
        t(&sv),
        t(&xv),
        t(&yv),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![5.0, 4.5, 4.5]);
    ternary(
        &TernaryOp::Lerp,
        &ov,
        t(&sv),
        t(&xv),
        Operand::Scalar(Scalar::Float(0.75)),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![3.25, 4.25, 5.25]);
    binary(
        &BinaryOp::Lerp {
            weight: Scalar::Float(0.25),
        },
        &ov,
        t(&sv),
        t(&xv),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![1.75, 2.75, 3.75]);
    ternary(&TernaryOp::Clamp, &ov, t(&xv), t(&sv), t(&yv), DType::F32).unwrap();
    assert_eq!(read(&ov, &o), vec![2.0, 4.0, 6.0]);
}

#[test]
fn backward_kernels_match_derivatives() {
    // Finite differences of the forward ops on float64.
    let n = 101;
    let xs = lin(n, 0.1, -5.03);
    let x = Buf::of(DType::F64, &xs);
    let g = Buf::of(DType::F64, &lin(n, 0.01, 0.5));
    let pairs: Vec<(BinaryOp, UnaryOp)> = vec![
        (
            BinaryOp::GeluBackward { tanh: false },
            UnaryOp::Gelu { tanh: false },
        ),
        (
            BinaryOp::GeluBackward { tanh: true },
            UnaryOp::Gelu { tanh: true },
        ),
        (BinaryOp::SiluBackward, UnaryOp::Silu),
        (BinaryOp::MishBackward, UnaryOp::Mish),
        (
            BinaryOp::SoftplusBackward {
                beta: 2.0,
                threshold: 20.0,
            },
            UnaryOp::Softplus {
                beta: 2.0,
                threshold: 20.0,
            },
        ),
        (
            BinaryOp::EluBackward {
                alpha: 1.3,
                scale: 1.1,
                input_scale: 0.9,
                is_result: false,
            },
            UnaryOp::Elu {
                alpha: 1.3,
                scale: 1.1,
                input_scale: 0.9,
            },
        ),
        (
            BinaryOp::LeakyReluBackward {
                negative_slope: 0.2,
            },
            UnaryOp::LeakyRelu {
                negative_slope: 0.2,
            },
        ),
        (
            BinaryOp::HardtanhBackward {
                min: -1.0,
                max: 2.0,
            },
            UnaryOp::Hardtanh {
                min: -1.0,
                max: 2.0,
            },
        ),
        (BinaryOp::HardsigmoidBackward, UnaryOp::Hardsigmoid),
        (BinaryOp::HardswishBackward, UnaryOp::Hardswish),
        (
            BinaryOp::ThresholdBackward {
                threshold: Scalar::Float(0.0),
            },
            UnaryOp::Relu,
        ),
    ];
    let eval = |op: &UnaryOp, v: f64| -> f64 {
        let i = Buf::of(DType::F64, &[v]);
        let o = Buf::zeros(DType::F64, 1);
        unary(op, &o.contiguous(&[1]), t(&i.contiguous(&[1])), DType::F64).unwrap();
        o.get(0)
    };
    for (bw, fw) in &pairs {
        let o = Buf::zeros(DType::F64, n);
        binary(
            bw,
            &o.contiguous(&[n]),
            t(&g.contiguous(&[n])),
            t(&x.contiguous(&[n])),
            DType::F64,
        )
        .unwrap();
        for (i, &xi) in xs.iter().enumerate() {
            let h = 1e-6;
            let d = (eval(fw, xi + h) - eval(fw, xi - h)) / (2.0 * h);
            let want = g.get(i) * d;
            assert!(
                (o.get(i) - want).abs() < 1e-5 * (1.0 + want.abs()),
                "{bw:?} at {}: {} vs {want}",
                xi,
                o.get(i)
            );
        }
    }
    // Backward from outputs.
    let y = Buf::of(DType::F64, &[0.2, 0.5]);
    let gy = Buf::of(DType::F64, &[2.0, 3.0]);
    let o = Buf::zeros(DType::F64, 2);
    binary(
        &BinaryOp::SigmoidBackward,
        &o.contiguous(&[2]),
        t(&gy.contiguous(&[2])),
        t(&y.contiguous(&[2])),
        DType::F64,
    )
    .unwrap();
    assert_close(
        &read(&o.contiguous(&[2]), &o),
        &[2.0 * 0.8 * 0.2, 3.0 * 0.25],
        1e-15,
        0.0,
    );
    binary(
        &BinaryOp::TanhBackward,
        &o.contiguous(&[2]),
        t(&gy.contiguous(&[2])),
        t(&y.contiguous(&[2])),
        DType::F64,
    )
    .unwrap();
    assert_close(
        &read(&o.contiguous(&[2]), &o),
        &[2.0 * 0.96, 3.0 * 0.75],
        1e-15,
        0.0,
    );
    binary(
        &BinaryOp::LogitBackward { eps: None },
        &o.contiguous(&[2]),
        t(&gy.contiguous(&[2])),
        t(&y.contiguous(&[2])),
        DType::F64,
    )
    .unwrap();
    assert_close(
        &read(&o.contiguous(&[2]), &o),
        &[2.0 / 0.16, 3.0 / 0.25],
        1e-15,
        0.0,
    );
}

#[test]
fn special_values() {
    let x = Buf::of(
        DType::F32,
        &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0],
    );
    let xv = x.contiguous(&[4]);
    let o = Buf::zeros(DType::F32, 4);
    let ov = o.contiguous(&[4]);
    unary(
        &UnaryOp::NanToNum {
            nan: 0.0,
            posinf: None,
            neginf: Some(-7.0),
        },
        &ov,
        t(&xv),
        DType::F32,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![0.0, f32::MAX as f64, -7.0, 1.0]);
    let h = Buf::of(
        DType::F16,
        &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0],
    );
    let oh = Buf::zeros(DType::F16, 4);
    unary(
        &UnaryOp::NanToNum {
            nan: 1.0,
            posinf: None,
            neginf: None,
        },
        &oh.contiguous(&[4]),
        t(&h.contiguous(&[4])),
        DType::F16,
    )
    .unwrap();
    assert_eq!(
        read(&oh.contiguous(&[4]), &oh),
        vec![1.0, 65504.0, -65504.0, 1.0]
    );
    let ob = Buf::zeros(DType::Bool, 4);
    let obv = ob.contiguous(&[4]);
    for (op, want) in [
        (UnaryOp::IsNan, [1.0, 0.0, 0.0, 0.0]),
        (UnaryOp::IsInf, [0.0, 1.0, 1.0, 0.0]),
        (UnaryOp::IsFinite, [0.0, 0.0, 0.0, 1.0]),
        (UnaryOp::IsPosInf, [0.0, 1.0, 0.0, 0.0]),
        (UnaryOp::IsNegInf, [0.0, 0.0, 1.0, 0.0]),
    ] {
        unary(&op, &obv, t(&xv), DType::F32).unwrap();
        assert_eq!(read(&obv, &ob), want, "{op:?}");
    }
    unary(&UnaryOp::Exp, &ov, t(&xv), DType::F32).unwrap();
    let got = read(&ov, &o);
    assert!(got[0].is_nan() && got[1] == f64::INFINITY && got[2] == 0.0);
    unary(
        &UnaryOp::Clamp {
            min: Some(Scalar::Float(-1.0)),
            max: Some(Scalar::Float(2.0)),
        },
        &ov,
        t(&xv),
        DType::F32,
    )
    .unwrap();
    let got = read(&ov, &o);
    assert!(got[0].is_nan() && got[1..] == [2.0, -1.0, 1.0]);
    let _ = bf16::ONE;
}

#[test]
fn dtype_errors_are_reported() {
    let x = Buf::of(DType::Bool, &[1.0]);
    let o = Buf::zeros(DType::Bool, 1);
    let err = unary(
        &UnaryOp::Neg,
        &o.contiguous(&[1]),
        t(&x.contiguous(&[1])),
        DType::Bool,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        KernelError::UnsupportedDtype {
            op: "neg",
            dtype: DType::Bool
        }
    ));
    let i = Buf::of(DType::I32, &[1.0]);
    let oi = Buf::zeros(DType::I32, 1);
    let err = unary(
        &UnaryOp::Exp,
        &oi.contiguous(&[1]),
        t(&i.contiguous(&[1])),
        DType::I32,
    )
    .unwrap_err();
    assert!(matches!(err, KernelError::UnsupportedDtype { .. }));
}

#[test]
fn large_broadcast_multithreaded_matches_serial() {
    // [513, 700] * [700]: rows split across tasks mid-row.
    let (r, c) = (513, 700);
    let a = Buf::of(DType::F32, &lin(r * c, 0.001, -100.0));
    let b = Buf::of(DType::F32, &lin(c, 0.01, 1.0));
    let o = Buf::zeros(DType::F32, r * c);
    let ov = o.contiguous(&[r, c]);
    binary(
        &BinaryOp::Mul,
        &ov,
        t(&a.contiguous(&[r, c])),
        t(&b.contiguous(&[c])),
        DType::F32,
    )
    .unwrap();
    for i in (0..r * c).step_by(997) {
        assert_eq!(o.get(i), ((a.get(i) as f32) * (b.get(i % c) as f32)) as f64);
    }
    // Identity copy through a transposed bf16 source.
    let h = Buf::of(DType::BF16, &lin(r * c, 1.0, 0.0));
    let hv = h.view(&[c, r], &[1, c as isize], 0);
    let of = Buf::zeros(DType::F32, r * c);
    identity(&of.contiguous(&[c, r]), t(&hv)).unwrap();
    assert_eq!(read(&of.contiguous(&[c, r]), &of), read(&hv, &h));
}

#[test]
fn sixteen_bit_common_dtype_rounds_operands_like_aten() {
    // bfloat16 + int64: the integer is converted to bfloat16 first (257 -> 256).
    let a = Buf::of(DType::BF16, &[1.0, 2.0]);
    let b = Buf::of(DType::I64, &[257.0, 3.0]);
    let o = Buf::zeros(DType::BF16, 2);
    let ov = o.contiguous(&[2]);
    binary(
        &BinaryOp::Add {
            alpha: Scalar::Int(1),
        },
        &ov,
        t(&a.contiguous(&[2])),
        t(&b.contiguous(&[2])),
        DType::BF16,
    )
    .unwrap();
    assert_eq!(read(&ov, &o), vec![256.0, 5.0]);
    // float16 < 0.1: the scalar is rounded to float16 too (0.0999756 < 0.0999756 is false).
    let h = Buf::of(DType::F16, &[0.1, 0.05]);
    let ob = Buf::zeros(DType::Bool, 2);
    let obv = ob.contiguous(&[2]);
    binary(
        &BinaryOp::Lt,
        &obv,
        t(&h.contiguous(&[2])),
        Operand::Scalar(Scalar::Float(0.1)),
        DType::F16,
    )
    .unwrap();
    assert_eq!(read(&obv, &ob), vec![0.0, 1.0]);
    // float16 exp into a float64 out: the result is rounded to float16 first.
    let x = Buf::of(DType::F16, &[1.0]);
    let o64 = Buf::zeros(DType::F64, 1);
    unary(
        &UnaryOp::Exp,
        &o64.contiguous(&[1]),
        t(&x.contiguous(&[1])),
        DType::F16,
    )
    .unwrap();
    assert_eq!(o64.get(0), f16::from_f32(1f32.exp()).to_f64());
    // ... but a scalar factor stays in float32 (ATen's opmath scalar).
    let o16 = Buf::zeros(DType::F16, 1);
    let y = Buf::of(DType::F16, &[3.0]);
    binary(
        &BinaryOp::Mul,
        &o16.contiguous(&[1]),
        t(&y.contiguous(&[1])),
        Operand::Scalar(Scalar::Float(0.1)),
        DType::F16,
    )
    .unwrap();
    assert_eq!(o16.get(0), f16::from_f32(3.0 * 0.1f32).to_f64());
    // pow with exponent 0 / 1 fills / copies, for bool too.
    let bb = Buf::of(DType::Bool, &[0.0, 1.0]);
    let obb = Buf::zeros(DType::Bool, 2);
    unary(
        &UnaryOp::PowScalar {
            exponent: Scalar::Bool(false),
        },
        &obb.contiguous(&[2]),
        t(&bb.contiguous(&[2])),
        DType::Bool,
    )
    .unwrap();
    assert_eq!(read(&obb.contiguous(&[2]), &obb), vec![1.0, 1.0]);
}

#[test]
fn lgamma_and_digamma_known_values_and_poles() {
    let euler = 0.577_215_664_901_532_9;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-13 * b.abs().max(1.0);
    assert!(close(math::digamma_f64(1.0), -euler));
    assert!(close(
        math::digamma_f64(0.5),
        -euler - 2.0 * std::f64::consts::LN_2
    ));
    assert!(close(math::digamma_f64(-0.5), 0.036_489_973_978_576_52));
    assert!(close(math::digamma_f64(10.0), 2.251_752_589_066_721));
    assert!(close(math::digamma_f64(100.5), 4.605_174_352_581_845));
    assert_eq!(math::digamma_f64(0.0), f64::NEG_INFINITY);
    assert_eq!(math::digamma_f64(-0.0), f64::INFINITY);
    assert!(math::digamma_f64(-3.0).is_nan() && math::digamma_f64(f64::NEG_INFINITY).is_nan());
    assert!(close(math::lgamma_f64(0.5), 0.572_364_942_924_700_1));
    assert!(close(math::lgamma_f64(10.0), 12.801_827_480_081_469));
    assert_eq!(math::lgamma_f64(-2.0), f64::INFINITY);
}

#[test]
fn cross_row_blocks_mix_dense_and_staged_operands() {
    // [1500, 8] + [8] (a bias add): blocks span rows and start mid-row; the
    // dense operands are used in place, the broadcast row is staged. Then the
    // same in place (out aliases the dense input), then with a transposed
    // input that must be staged next to a dense one.
    let rows = 1500;
    let n = rows * 8;
    let a = Buf::of(DType::F32, &lin(n, 0.25, -3.0));
    let bias = Buf::of(DType::F32, &lin(8, 10.0, 1.0));
    let o = Buf::zeros(DType::F32, n);
    let (av, bv, ov) = (
        a.contiguous(&[rows, 8]),
        bias.contiguous(&[8]),
        o.contiguous(&[rows, 8]),
    );
    let add = BinaryOp::Add {
        alpha: Scalar::Int(2),
    };
    binary(&add, &ov, t(&av), t(&bv), DType::F32).unwrap();
    let ra = read(&av, &a);
    let want: Vec<f64> = (0..n)
        .map(|i| ra[i] + 2.0 * (10.0 * (i % 8) as f64 + 1.0))
        .collect();
    assert_eq!(read(&ov, &o), want);

    binary(&add, &av, t(&av.clone()), t(&bv), DType::F32).unwrap();
    assert_eq!(read(&av, &a), want);

    let c = Buf::of(DType::F32, &lin(n, 1.0, 0.0));
    let ct = c.view(&[rows, 8], &[1, rows as isize], 0);
    let o2 = Buf::zeros(DType::F32, n);
    let o2v = o2.contiguous(&[rows, 8]);
    binary(&BinaryOp::Mul, &o2v, t(&ct), t(&av), DType::F32).unwrap();
    let rc = read(&ct, &c);
    let want2: Vec<f64> = rc.iter().zip(&want).map(|(x, y)| x * y).collect();
    assert_close(&read(&o2v, &o2), &want2, 1e-6, 0.0);
}

#[test]
fn rows_broadcast_along_them_match_a_reference() {
    // ATen's coalesced views (innermost dim first): [inner, rows] with
    // inputs broadcast along the row (strides [0, 1]: one value per row,
    // which the kernels hold in a register) or along the rows (a bias,
    // strides [1, 0]), over enough rows to split across tasks.
    let _level = super::simd::level_held();
    for &(inner, rows) in &[(49usize, 4608usize), (128, 300), (1000, 7)] {
        let n = inner * rows;
        let x = Buf::of(DType::F32, &lin(n, 0.25, -3.0));
        let s = Buf::of(DType::F32, &lin(rows, 0.5, -7.0));
        let bias = Buf::of(DType::F32, &lin(inner, 0.125, 1.0));
        let xv = x.view(&[inner, rows], &[1, inner as isize], 0);
        let sv = s.view(&[inner, rows], &[0, 1], 0);
        let bv = bias.view(&[inner, rows], &[1, 0], 0);
        let o = Buf::zeros(DType::F32, n);
        let ov = o.view(&[inner, rows], &[1, inner as isize], 0);
        let at = |i: usize| (i % inner, i / inner);
        let xs = |i: usize| x.get(i) as f32;
        let ss = |i: usize| s.get(at(i).1) as f32;
        let bs = |i: usize| bias.get(at(i).0) as f32;
        let check = |want: &dyn Fn(usize) -> f32| {
            for i in 0..n {
                assert_eq!(o.get(i) as f32, want(i), "inner {inner}, element {i}");
            }
        };
        binary(
            &BinaryOp::Sub {
                alpha: Scalar::Int(1),
            },
            Target::iter(&ov),
            t(&xv),
            t(&sv),
            DType::F32,
        )
        .unwrap();
        check(&|i| xs(i) - ss(i));
        binary(
            &BinaryOp::Sub {
                alpha: Scalar::Int(1),
            },
            Target::iter(&ov),
            t(&sv),
            t(&xv),
            DType::F32,
        )
        .unwrap();
        check(&|i| ss(i) - xs(i));
        binary(
            &BinaryOp::Mul,
            Target::iter(&ov),
            t(&sv),
            t(&bv),
            DType::F32,
        )
        .unwrap();
        check(&|i| ss(i) * bs(i));
        unary(&UnaryOp::Neg, Target::iter(&ov), t(&sv), DType::F32).unwrap();
        check(&|i| -ss(i));
        let one = Scalar::Float(1.0);
        for (a, b, c) in [(&xv, &sv, &bv), (&sv, &xv, &sv), (&sv, &sv, &xv)] {
            ternary(
                &TernaryOp::Addcmul { value: one },
                Target::iter(&ov),
                t(a),
                t(b),
                t(c),
                DType::F32,
            )
            .unwrap();
            let get = |v: &Strided, i: usize| {
                if std::ptr::eq(v, &xv) {
                    xs(i)
                } else if std::ptr::eq(v, &sv) {
                    ss(i)
                } else {
                    bs(i)
                }
            };
            check(&|i| get(a, i) + get(b, i) * get(c, i));
        }
    }
}
