//! Bernoulli draws and dropout from a Philox stream.
//!
//! Element `i` (row-major over the output) draws the float32 uniform `u` of
//! Philox block `offset + i / 4`, lane `i % 4`, and is 1 when `u < p`: the
//! result is the same for any thread count and a draw of `n` elements uses
//! `ceil(n / 4)` blocks (see [`crate::rng`]).

use super::copy::{self, for_each_offset, Scalar};
use super::norm::{dispatch_float, ld};
use super::{KernelError, Strided, GRAIN_SIZE};
use crate::dtype::DType;
use crate::rng::{uniform_f32, Philox};
use half::{bf16, f16};

/// A pointer that crosses to pool threads (tasks write disjoint parts).
struct Ptr<T>(*mut T);
impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}
// SAFETY: see above.
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}

/// Philox blocks a draw of `numel` elements uses.
pub fn blocks_needed(numel: usize) -> u64 {
    numel.div_ceil(4) as u64
}

/// `mask[i] = u_i < p(i)` for a contiguous byte buffer. Each Philox block
/// is computed once for its 4 elements (chunks start at multiples of 4).
fn draw(mask: &mut [u8], seed: u64, offset: u64, p: impl Fn(usize) -> f64 + Sync) {
    let ph = Philox::new(seed);
    let n = mask.len();
    let fill = |start: usize, m: &mut [u8]| {
        debug_assert_eq!(start % 4, 0);
        for (q, quad) in m.chunks_mut(4).enumerate() {
            let first = start + 4 * q;
            let w = ph.block(offset + (first / 4) as u64);
            for (lane, v) in quad.iter_mut().enumerate() {
                *v = ((uniform_f32(w[lane]) as f64) < p(first + lane)) as u8;
            }
        }
    };
    if n <= GRAIN_SIZE {
        fill(0, mask);
    } else {
        let (len, base) = (mask.len(), Ptr(mask.as_mut_ptr()));
        super::parallel::parallel_for(len.div_ceil(GRAIN_SIZE), |c| {
            let (s, e) = (c * GRAIN_SIZE, ((c + 1) * GRAIN_SIZE).min(len));
            #[allow(clippy::redundant_locals)]
            // capture the Send wrapper, not its raw-pointer field
            let base = base;
            // SAFETY: tasks fill disjoint chunks of the mask.
            fill(s, unsafe {
                std::slice::from_raw_parts_mut(base.0.add(s), e - s)
            });
        });
    }
}

/// Fills `dst` (any dtype) with 0 / 1 drawn with probability `p` of 1
/// (`p_tensor`, broadcast to `dst`, when given; else the scalar `p`).
pub fn bernoulli(
    dst: &Strided,
    p: f64,
    p_tensor: Option<&Strided>,
    seed: u64,
    offset: u64,
) -> Result<(), KernelError> {
    let n = dst.numel();
    if n == 0 {
        return Ok(());
    }
    let mut mask = vec![0u8; n];
    match p_tensor {
        None => {
            if !(0.0..=1.0).contains(&p) {
                return Err(KernelError::InvalidArgument(format!(
                    "foo: bernoulli_ expects p to be in [0, 1], but got p={p}"
                )));
            }
            draw(&mut mask, seed, offset, |_| p);
        }
        Some(pt) => {
            if !pt.dtype.is_floating() {
                return Err(KernelError::UnsupportedDtype {
                    op: "bernoulli_tensor_cpu_p_",
                    dtype: pt.dtype,
                });
            }
            let strides = copy::broadcast_strides(pt, &dst.sizes)?;
            let mut probs = vec![0f64; n];
            for_each_offset(&dst.sizes, &strides, 0, n, |k, o| probs[k] = ld(pt, o));
            if let Some(bad) = probs.iter().find(|v| !(0.0..=1.0).contains(*v)) {
                return Err(KernelError::InvalidArgument(format!(
                    "foo: bernoulli_: expected every probability to be in [0, 1], but got {bad}"
                )));
            }
            draw(&mut mask, seed, offset, |i| probs[i]);
        }
    }
    let src = Strided::contiguous(mask.as_mut_ptr(), DType::Bool, &dst.sizes);
    copy::copy(dst, &src)
}

/// Dropout of contiguous `x` into contiguous `out` and the bool `mask`
/// (`u < keep`): `out = x * mask * scale`, as CPU computes it.
pub fn dropout(
    out: &Strided,
    mask: &Strided,
    x: &Strided,
    keep: f64,
    scale: f64,
    seed: u64,
    offset: u64,
) -> Result<(), KernelError> {
    let n = x.numel();
    for (what, s) in [("output", out), ("mask", mask), ("input", x)] {
        if s.numel() != n || !(n == 0 || s.is_contiguous()) {
            return Err(KernelError::InvalidArgument(format!(
                "foo: native_dropout: {what} must be contiguous with {n} elements"
            )));
        }
    }
    if mask.dtype != DType::Bool || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(
            "foo: native_dropout: mask must be bool and output like input".into(),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    // SAFETY: a contiguous bool buffer of n elements.
    let m = unsafe { std::slice::from_raw_parts_mut(mask.ptr, n) };
    draw(m, seed, offset, |_| keep);
    apply(out, x, mask, scale, "native_dropout")
}

/// `out = g * mask * scale` (contiguous views).
pub fn dropout_backward(
    out: &Strided,
    g: &Strided,
    mask: &Strided,
    scale: f64,
) -> Result<(), KernelError> {
    let n = g.numel();
    for (what, s) in [("output", out), ("mask", mask), ("grad_output", g)] {
        if s.numel() != n || !(n == 0 || s.is_contiguous()) {
            return Err(KernelError::InvalidArgument(format!(
                "foo: native_dropout_backward: {what} must be contiguous with {n} elements"
            )));
        }
    }
    if mask.dtype != DType::Bool || out.dtype != g.dtype {
        return Err(KernelError::InvalidArgument(
            "foo: native_dropout_backward: mask must be bool".into(),
        ));
    }
    apply(out, g, mask, scale, "native_dropout_backward")
}

fn apply(
    out: &Strided,
    x: &Strided,
    mask: &Strided,
    scale: f64,
    op: &'static str,
) -> Result<(), KernelError> {
    fn run<T: Scalar + ScaleMul>(out: &Strided, x: &Strided, mask: &Strided, scale: f64) {
        let n = x.numel();
        // SAFETY: contiguous views of n elements.
        let (o, xs, m) = unsafe {
            (
                std::slice::from_raw_parts_mut(out.ptr as *mut T, n),
                std::slice::from_raw_parts(x.ptr as *const T, n),
                std::slice::from_raw_parts(mask.ptr as *const u8, n),
            )
        };
        let body = |o: &mut [T], xs: &[T], m: &[u8]| {
            for k in 0..o.len() {
                o[k] = T::scale_mul(xs[k], m[k], scale);
            }
        };
        if n <= GRAIN_SIZE {
            body(o, xs, m);
        } else {
            let (len, base) = (o.len(), Ptr(o.as_mut_ptr()));
            super::parallel::parallel_for(len.div_ceil(GRAIN_SIZE), |c| {
                let (s, e) = (c * GRAIN_SIZE, ((c + 1) * GRAIN_SIZE).min(len));
                #[allow(clippy::redundant_locals)]
                // capture the Send wrapper, not its raw-pointer field
                let base = base;
                // SAFETY: tasks write disjoint chunks of the output.
                body(
                    unsafe { std::slice::from_raw_parts_mut(base.0.add(s), e - s) },
                    &xs[s..e],
                    &m[s..e],
                );
            });
        }
    }
    dispatch_float!(op, x.dtype, run, out, x, mask, scale);
    Ok(())
}

/// `(x * m) * scale` in the element type's arithmetic (float for the half
/// types, rounded once), as torch CPU's `input.mul(mask).mul_(scale)`.
trait ScaleMul: Sized {
    fn scale_mul(x: Self, m: u8, scale: f64) -> Self;
}
impl ScaleMul for f32 {
    #[inline(always)]
    fn scale_mul(x: f32, m: u8, scale: f64) -> f32 {
        (x * m as f32) * scale as f32
    }
}
impl ScaleMul for f64 {
    #[inline(always)]
    fn scale_mul(x: f64, m: u8, scale: f64) -> f64 {
        (x * m as f64) * scale
    }
}
impl ScaleMul for f16 {
    #[inline(always)]
    fn scale_mul(x: f16, m: u8, scale: f64) -> f16 {
        f16::from_f32((x.to_f32() * m as f32) * scale as f32)
    }
}
impl ScaleMul for bf16 {
    #[inline(always)]
    fn scale_mul(x: bf16, m: u8, scale: f64) -> bf16 {
        bf16::from_f32((x.to_f32() * m as f32) * scale as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bernoulli_rate_and_determinism() {
        let n = 100_003;
        let mut a = vec![0f32; n];
        let d = Strided::contiguous(a.as_mut_ptr() as *mut u8, DType::F32, &[n]);
        bernoulli(&d, 0.3, None, 7, 0).unwrap();
        let rate = a.iter().sum::<f32>() as f64 / n as f64;
        assert!((rate - 0.3).abs() < 0.01, "{rate}");
        let mut b = vec![0f32; n];
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let db = Strided::contiguous(b.as_mut_ptr() as *mut u8, DType::F32, &[n]);
        one.install(|| {
            crate::kernels::parallel::with_threads(1, || bernoulli(&db, 0.3, None, 7, 0))
        })
        .unwrap();
        assert_eq!(a, b);
        assert!(bernoulli(&d, 1.5, None, 7, 0).is_err());
    }

    #[test]
    fn dropout_scales_kept() {
        let n = 1000;
        let mut x = vec![2f32; n];
        let mut out = vec![0f32; n];
        let mut m = vec![0u8; n];
        let xs = Strided::contiguous(x.as_mut_ptr() as *mut u8, DType::F32, &[n]);
        let os = Strided::contiguous(out.as_mut_ptr() as *mut u8, DType::F32, &[n]);
        let ms = Strided::contiguous(m.as_mut_ptr(), DType::Bool, &[n]);
        dropout(&os, &ms, &xs, 0.5, 2.0, 1, 0).unwrap();
        for k in 0..n {
            assert_eq!(out[k], if m[k] == 1 { 4.0 } else { 0.0 });
        }
    }
}
