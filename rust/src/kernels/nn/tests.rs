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
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 8.0 - 4.0
        })
        .collect()
}

fn ref_softmax(x: &[f64], outer: usize, d: usize, inner: usize, log: bool) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * d * inner + k * inner + i;
            let m = (0..d).map(|k| x[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..d).map(|k| (x[at(k)] - m).exp()).sum();
            for k in 0..d {
                y[at(k)] = if log {
                    x[at(k)] - m - s.ln()
                } else {
                    (x[at(k)] - m).exp() / s
                };
            }
        }
    }
    y
}

#[test]
fn softmax_and_log_softmax_every_dim() {
    let sizes = [3usize, 37, 5];
    let n: usize = sizes.iter().product();
    let x64 = data(n, 1);
    let mut x: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
    let xr: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for dim in 0..3 {
        for log in [false, true] {
            let mut y = vec![0f32; n];
            softmax(
                &view(&mut y, DType::F32, &sizes),
                &view(&mut x, DType::F32, &sizes),
                dim,
                log,
            )
            .unwrap();
            let outer: usize = sizes[..dim].iter().product();
            let inner: usize = sizes[dim + 1..].iter().product();
            let want = ref_softmax(&xr, outer, sizes[dim], inner, log);
            for (a, b) in y.iter().zip(&want) {
                assert!(
                    (*a as f64 - b).abs() <= 1e-6 + 2e-6 * b.abs(),
                    "dim {dim} log {log}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn softmax_backward_matches_formula() {
    let (r, d) = (4usize, 50usize);
    let mut x: Vec<f64> = data(r * d, 2);
    let mut g: Vec<f64> = data(r * d, 3);
    let mut y = vec![0f64; r * d];
    let mut gi = vec![0f64; r * d];
    softmax(
        &view(&mut y, DType::F64, &[r, d]),
        &view(&mut x, DType::F64, &[r, d]),
        1,
        false,
    )
    .unwrap();
    softmax_backward(
        &view(&mut gi, DType::F64, &[r, d]),
        &view(&mut g, DType::F64, &[r, d]),
        &view(&mut y, DType::F64, &[r, d]),
        1,
        false,
    )
    .unwrap();
    for row in 0..r {
        let s: f64 = (0..d).map(|k| g[row * d + k] * y[row * d + k]).sum();
        for k in 0..d {
            let i = row * d + k;
            assert!((gi[i] - y[i] * (g[i] - s)).abs() < 1e-12);
        }
    }
    let mut ly = vec![0f64; r * d];
    softmax(
        &view(&mut ly, DType::F64, &[r, d]),
        &view(&mut x, DType::F64, &[r, d]),
        1,
        true,
    )
    .unwrap();
    softmax_backward(
        &view(&mut gi, DType::F64, &[r, d]),
        &view(&mut g, DType::F64, &[r, d]),
        &view(&mut ly, DType::F64, &[r, d]),
        1,
        true,
    )
    .unwrap();
    for row in 0..r {
        let s: f64 = (0..d).map(|k| g[row * d + k]).sum();
        for k in 0..d {
            let i = row * d + k;
            assert!((gi[i] - (g[i] - ly[i].exp() * s)).abs() < 1e-12);
        }
    }
    // Column layout (dim 0 of [d, r]) agrees with the row layout transposed.
    let mut xt = vec![0f64; r * d];
    for row in 0..r {
        for k in 0..d {
            xt[k * r + row] = x[row * d + k];
        }
    }
    let mut yt = vec![0f64; r * d];
    softmax(
        &view(&mut yt, DType::F64, &[d, r]),
        &view(&mut xt, DType::F64, &[d, r]),
        0,
        false,
    )
    .unwrap();
    for row in 0..r {
        for k in 0..d {
            assert!((yt[k * r + row] - y[row * d + k]).abs() < 1e-15);
        }
    }
}

#[test]
fn softmax_all_neg_inf_row_is_nan_and_masked_entries_zero() {
    let mut x = vec![f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 1.0];
    let mut y = vec![0f32; 4];
    softmax(
        &view(&mut y, DType::F32, &[4]),
        &view(&mut x, DType::F32, &[4]),
        0,
        false,
    )
    .unwrap();
    assert_eq!(y[0], 0.0);
    assert!((y[1] + y[3] - 1.0).abs() < 1e-6);
    let mut z = vec![f32::NEG_INFINITY; 3];
    let mut yz = vec![0f32; 3];
    softmax(
        &view(&mut yz, DType::F32, &[3]),
        &view(&mut z, DType::F32, &[3]),
        0,
        false,
    )
    .unwrap();
    assert!(yz.iter().all(|v| v.is_nan()));
}

#[test]
fn nll_loss_forward_backward_with_weight_and_ignore() {
    let (n, c) = (6usize, 4usize);
    let mut x: Vec<f32> = data(n * c, 4).iter().map(|&v| v as f32).collect();
    let mut t: Vec<i64> = vec![0, 3, -100, 2, 1, 3];
    let mut w: Vec<f32> = vec![1.0, 2.0, 0.5, 3.0];
    let mut out = vec![0f32; 1];
    let mut tw = vec![0f32; 1];
    let xv = view(&mut x, DType::F32, &[n, c]);
    let tv = view(&mut t, DType::I64, &[n]);
    let wv = view(&mut w, DType::F32, &[c]);
    nll_loss_forward(
        &view(&mut out, DType::F32, &[]),
        &view(&mut tw, DType::F32, &[]),
        &xv,
        &tv,
        Some(&wv),
        REDUCTION_MEAN,
        -100,
    )
    .unwrap();
    let (mut l, mut s) = (0f64, 0f64);
    for i in 0..n {
        if t[i] != -100 {
            let ti = t[i] as usize;
            l -= x[i * c + ti] as f64 * w[ti] as f64;
            s += w[ti] as f64;
        }
    }
    assert!((out[0] as f64 - l / s).abs() < 1e-6);
    assert_eq!(tw[0] as f64, s);
    let mut g = vec![1.0f32];
    let mut gi = vec![9f32; n * c];
    nll_loss_backward(
        &view(&mut gi, DType::F32, &[n, c]),
        &view(&mut g, DType::F32, &[]),
        &tv,
        Some(&wv),
        REDUCTION_MEAN,
        -100,
        &view(&mut tw, DType::F32, &[]),
    )
    .unwrap();
    for i in 0..n {
        for k in 0..c {
            let want = if t[i] != -100 && t[i] as usize == k {
                -(w[k] as f64) / s
            } else {
                0.0
            };
            assert!((gi[i * c + k] as f64 - want).abs() < 1e-7);
        }
    }
    // Out-of-range target.
    let mut bad: Vec<i64> = vec![0, 4, 0, 0, 0, 0];
    let r = nll_loss_forward(
        &view(&mut out, DType::F32, &[]),
        &view(&mut tw, DType::F32, &[]),
        &xv,
        &view(&mut bad, DType::I64, &[n]),
        None,
        REDUCTION_SUM,
        -100,
    );
    assert_eq!(r.unwrap_err().to_string(), "Target 4 is out of bounds.");
    // Reduction none.
    let mut per = vec![0f32; n];
    nll_loss_forward(
        &view(&mut per, DType::F32, &[n]),
        &view(&mut tw, DType::F32, &[]),
        &xv,
        &tv,
        None,
        REDUCTION_NONE,
        -100,
    )
    .unwrap();
    assert_eq!(per[2], 0.0);
    assert_eq!(per[1], -x[c + 3]);
}

#[test]
fn mse_loss_and_backward_broadcast() {
    let mut a: Vec<f64> = data(12, 5);
    let mut b: Vec<f64> = data(4, 6);
    let mut o = vec![0f64; 1];
    let shape = [3usize, 4];
    mse_loss(
        &view(&mut o, DType::F64, &[]),
        &view(&mut a, DType::F64, &[3, 4]),
        &view(&mut b, DType::F64, &[4]),
        &shape,
        REDUCTION_MEAN,
    )
    .unwrap();
    let want: f64 = (0..12).map(|i| (a[i] - b[i % 4]).powi(2)).sum::<f64>() / 12.0;
    assert!((o[0] - want).abs() < 1e-12);
    let mut g = vec![1f64];
    let mut gi = vec![0f64; 12];
    mse_loss_backward(
        &view(&mut gi, DType::F64, &[3, 4]),
        &view(&mut g, DType::F64, &[]),
        &view(&mut a, DType::F64, &[3, 4]),
        &view(&mut b, DType::F64, &[4]),
        REDUCTION_MEAN,
    )
    .unwrap();
    for i in 0..12 {
        assert!((gi[i] - 2.0 / 12.0 * (a[i] - b[i % 4])).abs() < 1e-14);
    }
    let mut none = vec![0f64; 12];
    mse_loss(
        &view(&mut none, DType::F64, &[3, 4]),
        &view(&mut a, DType::F64, &[3, 4]),
        &view(&mut b, DType::F64, &[4]),
        &shape,
        REDUCTION_NONE,
    )
    .unwrap();
    assert!((none[5] - (a[5] - b[1]).powi(2)).abs() < 1e-15);
}

#[test]
fn embedding_backward_sums_rows_in_order() {
    let mut g: Vec<f32> = (0..8).map(|v| v as f32).collect(); // 4 rows of 2
    let mut idx: Vec<i64> = vec![2, 0, 2, 1];
    let mut out = vec![9f32; 6];
    embedding_dense_backward(
        &view(&mut out, DType::F32, &[3, 2]),
        &view(&mut g, DType::F32, &[4, 2]),
        &view(&mut idx, DType::I64, &[4]),
        1,
        false,
    )
    .unwrap();
    assert_eq!(out, vec![2.0, 3.0, 0.0, 0.0, 4.0, 6.0]);
    embedding_dense_backward(
        &view(&mut out, DType::F32, &[3, 2]),
        &view(&mut g, DType::F32, &[4, 2]),
        &view(&mut idx, DType::I64, &[4]),
        -1,
        true,
    )
    .unwrap();
    assert_eq!(out, vec![2.0, 3.0, 6.0, 7.0, 2.0, 3.0]);
}
