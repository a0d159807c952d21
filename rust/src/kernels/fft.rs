//! Discrete Fourier transforms (`_fft_c2c`, `_fft_r2c`, `_fft_c2r`) with
//! rustfft and realfft, as torch CPU computes them with pocketfft: unnormalized
//! transforms along each listed dimension, then one scale factor.
//!
//! Outputs are contiguous (the Python kernel allocates them so); inputs may
//! have any strides. Plans come from a per-thread planner (the planners cache
//! a plan per length); lines along a dimension run in parallel on the crate's
//! pool, each task with its own buffer and scratch.

use super::copy::{copy, for_each_offset};
use super::parallel;
use super::{KernelError, Strided};
use crate::dtype::DType;
use realfft::RealFftPlanner;
use rustfft::num_complex::Complex;
use rustfft::{FftNum, FftPlanner};
use std::cell::RefCell;
use std::sync::Arc;

/// A float type the FFT kernels take (f32 for complex64, f64 for complex128),
/// with its per-thread planners.
trait FftFloat: FftNum + num_traits::Float {
    fn c2c_plan(n: usize, forward: bool) -> Arc<dyn rustfft::Fft<Self>>;
    fn r2c_plan(n: usize) -> Arc<dyn realfft::RealToComplex<Self>>;
    fn c2r_plan(n: usize) -> Arc<dyn realfft::ComplexToReal<Self>>;
}

macro_rules! fft_float {
    ($t:ty, $c:ident, $r:ident) => {
        thread_local! {
            static $c: RefCell<FftPlanner<$t>> = RefCell::new(FftPlanner::new());
            static $r: RefCell<RealFftPlanner<$t>> = RefCell::new(RealFftPlanner::new());
        }
        impl FftFloat for $t {
            fn c2c_plan(n: usize, forward: bool) -> Arc<dyn rustfft::Fft<$t>> {
                $c.with(|p| {
                    let mut p = p.borrow_mut();
                    if forward {
                        p.plan_fft_forward(n)
                    } else {
                        p.plan_fft_inverse(n)
                    }
                })
            }
            fn r2c_plan(n: usize) -> Arc<dyn realfft::RealToComplex<$t>> {
                $r.with(|p| p.borrow_mut().plan_fft_forward(n))
            }
            fn c2r_plan(n: usize) -> Arc<dyn realfft::ComplexToReal<$t>> {
                $r.with(|p| p.borrow_mut().plan_fft_inverse(n))
            }
        }
    };
}
fft_float!(f32, PLAN_C32, PLAN_R32);
fft_float!(f64, PLAN_C64, PLAN_R64);

/// An address that crosses to pool threads.
#[derive(Clone, Copy)]
struct P(usize);

/// Element offsets of the first element of every line along `dim`.
fn line_starts(sizes: &[usize], strides: &[isize], dim: usize) -> Vec<isize> {
    let mut s: Vec<usize> = sizes.to_vec();
    s[dim] = 1;
    let n: usize = s.iter().product();
    let mut out = Vec::with_capacity(n);
    for_each_offset(&s, strides, 0, n, |_, off| out.push(off));
    out
}

/// Lines per task: enough work per task to pay for the hand-off.
fn lines_per_task(lines: usize, len: usize) -> usize {
    let per = (32768 / len.max(1)).max(1);
    per.max(lines.div_ceil(parallel::num_threads() * 4))
}

/// In-place complex transforms along `dims` of a view of complex `T`s.
fn c2c_in_place<T: FftFloat>(v: &Strided, dims: &[usize], forward: bool) {
    for &d in dims {
        let n = v.sizes[d];
        if n <= 1 || v.numel() == 0 {
            continue;
        }
        let plan = T::c2c_plan(n, forward);
        let starts = line_starts(&v.sizes, &v.strides, d);
        let st = v.strides[d];
        let base = P(v.ptr as usize);
        let per = lines_per_task(starts.len(), n);
        parallel::parallel_for(starts.len().div_ceil(per), |t| {
            let mut buf = vec![Complex::<T>::new(T::zero(), T::zero()); n];
            let mut scratch =
                vec![Complex::<T>::new(T::zero(), T::zero()); plan.get_inplace_scratch_len()];
            let p = base.0 as *mut Complex<T>;
            for &s0 in &starts[t * per..((t + 1) * per).min(starts.len())] {
                // SAFETY: lines are disjoint; offsets come from the view.
                unsafe {
                    for (i, b) in buf.iter_mut().enumerate() {
                        *b = *p.offset(s0 + i as isize * st);
                    }
                    plan.process_with_scratch(&mut buf, &mut scratch);
                    for (i, b) in buf.iter().enumerate() {
                        *p.offset(s0 + i as isize * st) = *b;
                    }
                }
            }
        });
    }
}

/// Multiplies every element of a (real or complex) float view by `scale`.
fn scale_view<T: FftFloat>(v: &Strided, scale: f64) {
    if scale == 1.0 || v.numel() == 0 {
        return;
    }
    let r = v.as_real();
    let s = T::from(scale).unwrap();
    let p = r.ptr as usize;
    for_each_offset(&r.sizes, &r.strides, 0, r.numel(), |_, off| {
        // SAFETY: offsets come from the view's own sizes and strides.
        unsafe { *(p as *mut T).offset(off) = *(p as *mut T).offset(off) * s };
    });
}

fn check_dims(v: &Strided, dims: &[usize]) -> Result<(), KernelError> {
    if dims.iter().any(|&d| d >= v.ndim()) {
        return Err(KernelError::InvalidArgument(format!(
            "foo fft: dims {dims:?} out of range for a {}-d tensor",
            v.ndim()
        )));
    }
    Ok(())
}

fn unsupported(op: &'static str, dtype: DType) -> KernelError {
    KernelError::UnsupportedDtype { op, dtype }
}

/// `_fft_c2c`: `out` (complex, `inp`'s shape and dtype) = the transform of
/// `inp` along `dims`, times `scale`.
pub fn fft_c2c(
    out: &Strided,
    inp: &Strided,
    dims: &[usize],
    forward: bool,
    scale: f64,
) -> Result<(), KernelError> {
    if !out.dtype.is_complex() || out.dtype != inp.dtype || out.sizes != inp.sizes {
        return Err(unsupported("_fft_c2c", inp.dtype));
    }
    check_dims(out, dims)?;
    copy(out, inp)?;
    match out.dtype {
        DType::C64 => {
            c2c_in_place::<f32>(out, dims, forward);
            scale_view::<f32>(out, scale)
        }
        _ => {
            c2c_in_place::<f64>(out, dims, forward);
            scale_view::<f64>(out, scale)
        }
    }
    Ok(())
}

fn r2c_last<T: FftFloat>(out: &Strided, inp: &Strided, d: usize) {
    let n = inp.sizes[d];
    let h = out.sizes[d];
    let plan = T::r2c_plan(n);
    let in_starts = line_starts(&inp.sizes, &inp.strides, d);
    let out_starts = line_starts(&out.sizes, &out.strides, d);
    let (ist, ost) = (inp.strides[d], out.strides[d]);
    let (ib, ob) = (P(inp.ptr as usize), P(out.ptr as usize));
    let per = lines_per_task(in_starts.len(), n);
    parallel::parallel_for(in_starts.len().div_ceil(per), |t| {
        let mut rin = plan.make_input_vec();
        let mut cout = plan.make_output_vec();
        let mut scratch = plan.make_scratch_vec();
        let (ip, op) = (ib.0 as *const T, ob.0 as *mut Complex<T>);
        for l in t * per..((t + 1) * per).min(in_starts.len()) {
            // SAFETY: output lines are disjoint; offsets come from the views.
            unsafe {
                for (i, r) in rin.iter_mut().enumerate() {
                    *r = *ip.offset(in_starts[l] + i as isize * ist);
                }
                // Lengths match the plan: the error cannot happen.
                let _ = plan.process_with_scratch(&mut rin, &mut cout, &mut scratch);
                for k in 0..h {
                    // A two-sided output: the other half is the conjugate mirror.
                    let v = if k < cout.len() {
                        cout[k]
                    } else {
                        cout[n - k].conj()
                    };
                    *op.offset(out_starts[l] + k as isize * ost) = v;
                }
            }
        }
    });
}

/// `_fft_r2c`: the real-to-complex transform of real `inp` along `dims`
/// (the last listed dimension halved to n/2+1 when `onesided`), times `scale`.
pub fn fft_r2c(
    out: &Strided,
    inp: &Strided,
    dims: &[usize],
    onesided: bool,
    scale: f64,
) -> Result<(), KernelError> {
    let ok = matches!(
        (inp.dtype, out.dtype),
        (DType::F32, DType::C64) | (DType::F64, DType::C128)
    );
    if !ok || dims.is_empty() {
        return Err(unsupported("_fft_r2c", inp.dtype));
    }
    check_dims(inp, dims)?;
    if out.numel() == 0 {
        return Ok(());
    }
    let last = *dims.last().unwrap();
    let rest = &dims[..dims.len() - 1];
    if !onesided && !rest.is_empty() {
        // Two-sided over several dims: the whole complex transform.
        copy(out, inp)?;
        return fft_c2c(out, &out.clone(), dims, true, scale);
    }
    match inp.dtype {
        DType::F32 => {
            r2c_last::<f32>(out, inp, last);
            c2c_in_place::<f32>(out, rest, true);
            scale_view::<f32>(out, scale);
        }
        _ => {
            r2c_last::<f64>(out, inp, last);
            c2c_in_place::<f64>(out, rest, true);
            scale_view::<f64>(out, scale);
        }
    }
    Ok(())
}

fn c2r_last<T: FftFloat>(out: &Strided, tmp: &Strided, d: usize) {
    let n = out.sizes[d];
    let h = tmp.sizes[d];
    let plan = T::c2r_plan(n);
    let in_starts = line_starts(&tmp.sizes, &tmp.strides, d);
    let out_starts = line_starts(&out.sizes, &out.strides, d);
    let (ist, ost) = (tmp.strides[d], out.strides[d]);
    let (ib, ob) = (P(tmp.ptr as usize), P(out.ptr as usize));
    let per = lines_per_task(in_starts.len(), n);
    parallel::parallel_for(in_starts.len().div_ceil(per), |t| {
        let mut cin = plan.make_input_vec();
        let mut rout = plan.make_output_vec();
        let mut scratch = plan.make_scratch_vec();
        let (ip, op) = (ib.0 as *const Complex<T>, ob.0 as *mut T);
        let zero = Complex::new(T::zero(), T::zero());
        for l in t * per..((t + 1) * per).min(in_starts.len()) {
            // SAFETY: output lines are disjoint; offsets come from the views.
            unsafe {
                for (k, c) in cin.iter_mut().enumerate() {
                    // Missing input (a short last dim) is zero, as pocketfft pads.
                    *c = if k < h {
                        *ip.offset(in_starts[l] + k as isize * ist)
                    } else {
                        zero
                    };
                }
                // pocketfft ignores the imaginary parts of the DC and Nyquist terms.
                cin[0].im = T::zero();
                if n.is_multiple_of(2) {
                    let last = cin.len() - 1;
                    cin[last].im = T::zero();
                }
                let _ = plan.process_with_scratch(&mut cin, &mut rout, &mut scratch);
                for (i, r) in rout.iter().enumerate() {
                    *op.offset(out_starts[l] + i as isize * ost) = *r;
                }
            }
        }
    });
}

/// `_fft_c2r`: the complex-to-real transform of Hermitian half-spectrum `inp`
/// along `dims`; `out`'s size along the last listed dimension is the signal
/// length (`last_dim_size`). Times `scale`.
pub fn fft_c2r(
    out: &Strided,
    inp: &Strided,
    dims: &[usize],
    scale: f64,
) -> Result<(), KernelError> {
    let ok = matches!(
        (inp.dtype, out.dtype),
        (DType::C64, DType::F32) | (DType::C128, DType::F64)
    );
    if !ok || dims.is_empty() {
        return Err(unsupported("_fft_c2r", inp.dtype));
    }
    check_dims(inp, dims)?;
    if out.numel() == 0 {
        return Ok(());
    }
    let last = *dims.last().unwrap();
    let rest = &dims[..dims.len() - 1];
    // The other dims' inverse transforms run on a contiguous copy of the input.
    let n: usize = inp.numel();
    let mut buf = vec![0u8; n * inp.dtype.size()];
    let tmp = Strided::contiguous(buf.as_mut_ptr(), inp.dtype, &inp.sizes);
    copy(&tmp, inp)?;
    match out.dtype {
        DType::F32 => {
            c2c_in_place::<f32>(&tmp, rest, false);
            c2r_last::<f32>(out, &tmp, last);
            scale_view::<f32>(out, scale);
        }
        _ => {
            c2c_in_place::<f64>(&tmp, rest, false);
            c2r_last::<f64>(out, &tmp, last);
            scale_view::<f64>(out, scale);
        }
    }
    drop(buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_dft(x: &[(f64, f64)], forward: bool) -> Vec<(f64, f64)> {
        let n = x.len();
        let sign = if forward { -1.0 } else { 1.0 };
        (0..n)
            .map(|k| {
                x.iter()
                    .enumerate()
                    .fold((0.0, 0.0), |acc, (j, &(re, im))| {
                        let a = sign * 2.0 * std::f64::consts::PI * (j * k) as f64 / n as f64;
                        (
                            acc.0 + re * a.cos() - im * a.sin(),
                            acc.1 + re * a.sin() + im * a.cos(),
                        )
                    })
            })
            .collect()
    }

    #[test]
    fn c2c_matches_a_naive_dft_along_a_strided_dim() {
        // 2 x 5 complex128, transformed along dim 0 (stride 5) and dim 1.
        let mut x: Vec<f64> = (0..20).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut y = vec![0f64; 20];
        let s = Strided::contiguous(x.as_mut_ptr() as *mut u8, DType::C128, &[2, 5]);
        let d = Strided::contiguous(y.as_mut_ptr() as *mut u8, DType::C128, &[2, 5]);
        fft_c2c(&d, &s, &[1], true, 1.0).unwrap();
        for r in 0..2 {
            let row: Vec<(f64, f64)> = (0..5)
                .map(|k| (x[10 * r + 2 * k], x[10 * r + 2 * k + 1]))
                .collect();
            let want = naive_dft(&row, true);
            for k in 0..5 {
                assert!((y[10 * r + 2 * k] - want[k].0).abs() < 1e-12);
                assert!((y[10 * r + 2 * k + 1] - want[k].1).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn r2c_then_c2r_round_trips() {
        let mut x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
        let mut spec = vec![0f32; 2 * 2 * 4];
        let mut back = vec![0f32; 12];
        let s = Strided::contiguous(x.as_mut_ptr() as *mut u8, DType::F32, &[2, 6]);
        let f = Strided::contiguous(spec.as_mut_ptr() as *mut u8, DType::C64, &[2, 4]);
        let b = Strided::contiguous(back.as_mut_ptr() as *mut u8, DType::F32, &[2, 6]);
        fft_r2c(&f, &s, &[0, 1], true, 1.0).unwrap();
        fft_c2r(&b, &f, &[0, 1], 1.0 / 12.0).unwrap();
        for (a, e) in back.iter().zip(&x) {
            assert!((a - e).abs() < 1e-5, "{a} vs {e}");
        }
    }
}
