//! Random fills (`normal_`, `uniform_`) from a Philox stream.
//!
//! Element `i` (row-major over the view) uses block `offset + i / per_block`;
//! the result is the same whatever the thread count.

use super::copy::{for_each_offset, Scalar};
use super::{KernelError, Strided, GRAIN_SIZE};
use crate::dtype::DType;
use crate::rng::{uniform_f32, uniform_f64, Philox};
use half::{bf16, f16};

/// The distribution a fill draws from.
#[derive(Clone, Copy, Debug)]
pub enum Distribution {
    Normal { mean: f64, std: f64 },
    Uniform { from: f64, to: f64 },
}

/// Values drawn per Philox block for `dtype`.
pub fn per_block(dtype: DType) -> usize {
    if dtype == DType::F64 {
        2
    } else {
        4
    }
}

/// Number of Philox blocks a fill of `numel` elements of `dtype` consumes.
pub fn blocks_needed(dtype: DType, numel: usize) -> u64 {
    numel.div_ceil(per_block(dtype)) as u64
}

#[inline(always)]
fn box_muller_f32(u1: f32, u2: f32) -> (f32, f32) {
    // u1 in (0, 1] so the log is finite.
    let r = (-2.0 * (1.0 - u1).ln()).sqrt();
    let t = std::f32::consts::TAU * u2;
    (r * t.cos(), r * t.sin())
}

#[inline(always)]
fn box_muller_f64(u1: f64, u2: f64) -> (f64, f64) {
    let r = (-2.0 * (1.0 - u1).ln()).sqrt();
    let t = std::f64::consts::TAU * u2;
    (r * t.cos(), r * t.sin())
}

/// The values of block `b` (up to 4), as f64 for the reduced-precision path.
#[inline(always)]
fn block_values_f32(ph: &Philox, b: u64, dist: Distribution) -> [f32; 4] {
    let w = ph.block(b);
    let u = [
        uniform_f32(w[0]),
        uniform_f32(w[1]),
        uniform_f32(w[2]),
        uniform_f32(w[3]),
    ];
    match dist {
        Distribution::Normal { mean, std } => {
            let (a, c) = box_muller_f32(u[0], u[1]);
            let (d, e) = box_muller_f32(u[2], u[3]);
            let (m, s) = (mean as f32, std as f32);
            [a * s + m, c * s + m, d * s + m, e * s + m]
        }
        Distribution::Uniform { from, to } => {
            let (f, span) = (from as f32, (to - from) as f32);
            u.map(|x| x * span + f)
        }
    }
}

#[inline(always)]
fn block_values_f64(ph: &Philox, b: u64, dist: Distribution) -> [f64; 2] {
    let w = ph.block(b);
    let u = [uniform_f64(w[0], w[1]), uniform_f64(w[2], w[3])];
    match dist {
        Distribution::Normal { mean, std } => {
            let (a, c) = box_muller_f64(u[0], u[1]);
            [a * std + mean, c * std + mean]
        }
        Distribution::Uniform { from, to } => u.map(|x| x * (to - from) + from),
    }
}

trait Draw: Scalar {
    fn draw(ph: &Philox, offset: u64, i: usize, dist: Distribution) -> Self;
}

macro_rules! draw32 {
    ($t:ty, $conv:expr) => {
        impl Draw for $t {
            #[inline(always)]
            fn draw(ph: &Philox, offset: u64, i: usize, dist: Distribution) -> Self {
                let v = block_values_f32(ph, offset + (i / 4) as u64, dist)[i % 4];
                $conv(v)
            }
        }
    };
}
draw32!(f32, |v: f32| v);
draw32!(f16, f16::from_f32);
draw32!(bf16, bf16::from_f32);

impl Draw for f64 {
    #[inline(always)]
    fn draw(ph: &Philox, offset: u64, i: usize, dist: Distribution) -> Self {
        block_values_f64(ph, offset + (i / 2) as u64, dist)[i % 2]
    }
}

fn fill_range<T: Draw>(
    p: usize,
    sizes: &[usize],
    strides: &[isize],
    dense: bool,
    ph: &Philox,
    offset: u64,
    start: usize,
    len: usize,
    dist: Distribution,
) {
    if dense {
        // SAFETY: a dense view; [start, start+len) is inside it.
        let out = unsafe { std::slice::from_raw_parts_mut((p as *mut T).add(start), len) };
        for (k, o) in out.iter_mut().enumerate() {
            *o = T::draw(ph, offset, start + k, dist);
        }
    } else {
        for_each_offset(sizes, strides, start, len, |k, off| {
            // SAFETY: offsets come from the view's sizes and strides.
            unsafe { *(p as *mut T).offset(off) = T::draw(ph, offset, start + k, dist) };
        });
    }
}

fn run<T: Draw>(dst: &Strided, seed: u64, offset: u64, dist: Distribution) {
    let n = dst.numel();
    let ph = Philox::new(seed);
    let dense = dst.is_contiguous();
    let p = dst.ptr as usize;
    // Chunks are multiples of 4 elements so no block straddles two threads
    // (it would not change results, only waste work).
    let chunk = GRAIN_SIZE;
    if n <= chunk {
        fill_range::<T>(p, &dst.sizes, &dst.strides, dense, &ph, offset, 0, n, dist);
    } else {
        super::parallel::parallel_for(n.div_ceil(chunk), |c| {
            let start = c * chunk;
            fill_range::<T>(
                p,
                &dst.sizes,
                &dst.strides,
                dense,
                &ph,
                offset,
                start,
                chunk.min(n - start),
                dist,
            );
        });
    }
}

/// Fills `dst` from `dist` using the Philox stream (`seed`, first block `offset`).
/// Floating dtypes only (as torch's normal_/uniform_).
pub fn fill_random(
    dst: &Strided,
    seed: u64,
    offset: u64,
    dist: Distribution,
) -> Result<(), KernelError> {
    let op = match dist {
        Distribution::Normal { .. } => "normal_",
        Distribution::Uniform { .. } => "uniform_",
    };
    if dst.numel() == 0 {
        return Ok(());
    }
    match dst.dtype {
        DType::F32 => run::<f32>(dst, seed, offset, dist),
        DType::F64 => run::<f64>(dst, seed, offset, dist),
        DType::F16 => run::<f16>(dst, seed, offset, dist),
        DType::BF16 => run::<bf16>(dst, seed, offset, dist),
        d => return Err(KernelError::UnsupportedDtype { op, dtype: d }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(n: usize, seed: u64, offset: u64) -> Vec<f32> {
        let mut v = vec![0f32; n];
        let d = Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F32, &[n]);
        fill_random(
            &d,
            seed,
            offset,
            Distribution::Normal {
                mean: 0.0,
                std: 1.0,
            },
        )
        .unwrap();
        v
    }

    #[test]
    fn normal_moments() {
        let v = normal(200_000, 1, 0);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "var {var}");
    }

    #[test]
    fn deterministic_and_offset_continues_stream() {
        let a = normal(100_000, 5, 0);
        let b = normal(100_000, 5, 0);
        assert_eq!(a, b);
        // The second half of a long draw equals a draw starting at its block.
        let tail = normal(8, 5, 10);
        assert_eq!(&a[40..48], &tail[..]);
        assert_ne!(normal(16, 6, 0), normal(16, 5, 0));
    }

    #[test]
    fn thread_count_does_not_matter() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let a = one.install(|| crate::kernels::parallel::with_threads(1, || normal(100_003, 9, 3)));
        let b = normal(100_003, 9, 3);
        assert_eq!(a, b);
    }

    #[test]
    fn uniform_range_and_strided() {
        let mut v = vec![-100f64; 1000];
        let d = Strided::new(v.as_mut_ptr() as *mut u8, DType::F64, vec![500], vec![2]);
        fill_random(
            &d,
            3,
            0,
            Distribution::Uniform {
                from: -2.0,
                to: 3.0,
            },
        )
        .unwrap();
        for (i, &x) in v.iter().enumerate() {
            if i % 2 == 0 {
                assert!((-2.0..3.0).contains(&x));
            } else {
                assert_eq!(x, -100.0);
            }
        }
    }

    #[test]
    fn integer_dtype_refused() {
        let mut v = vec![0i32; 4];
        let d = Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::I32, &[4]);
        assert!(fill_random(&d, 0, 0, Distribution::Uniform { from: 0.0, to: 1.0 }).is_err());
    }
}
