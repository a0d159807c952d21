//! Random fills (`normal_`, `uniform_`, `log_normal_`, `exponential_`,
//! `cauchy_`, `geometric_`, `random_`) from a Philox stream.
//!
//! Element `i` (row-major over the view) uses block `offset + i / per_block`:
//! 4 elements a block when an element takes one 32-bit word, 2 when it takes
//! two (float64, `geometric_`, `random_` ranges of 2^32 or more, as ATen
//! draws `random64()` for them). The result is the same whatever the thread
//! count.

use super::copy::{for_each_offset, Scalar};
use super::{KernelError, Strided, GRAIN_SIZE};
use crate::dtype::DType;
use crate::rng::{uniform_f32, uniform_f64, Philox};
use half::{bf16, f16};

/// The distribution a fill draws from (parameters already checked by the caller).
#[derive(Clone, Copy, Debug)]
pub enum Distribution {
    Normal {
        mean: f64,
        std: f64,
    },
    Uniform {
        from: f64,
        to: f64,
    },
    /// `exp(N(mean, std))`.
    LogNormal {
        mean: f64,
        std: f64,
    },
    /// `-log(1 - u) / lambda`.
    Exponential {
        lambda: f64,
    },
    /// `median + sigma * tan(pi * (u - 1/2))`.
    Cauchy {
        median: f64,
        sigma: f64,
    },
    /// Trials up to the first success, `ceil(log(1 - u) / log(1 - p))` (>= 1),
    /// from 53-bit uniforms whatever the dtype.
    Geometric {
        p: f64,
    },
    /// `random_`: the int64 `from + bits % range`, converted to the dtype as
    /// ATen's `static_cast` does; `bits` is 32 bits wide when `range < 2^32`,
    /// else 64. `range == 0` stands for 2^64 (every int64).
    Integers {
        from: i64,
        range: u64,
    },
}

impl Distribution {
    /// The op's name (in errors).
    pub fn op(&self) -> &'static str {
        match self {
            Distribution::Normal { .. } => "normal_",
            Distribution::Uniform { .. } => "uniform_",
            Distribution::LogNormal { .. } => "log_normal_",
            Distribution::Exponential { .. } => "exponential_",
            Distribution::Cauchy { .. } => "cauchy_",
            Distribution::Geometric { .. } => "geometric_",
            Distribution::Integers { .. } => "random_",
        }
    }

    /// Whether an element takes two 32-bit words (one 64-bit draw).
    fn wide(&self, dtype: DType) -> bool {
        match *self {
            Distribution::Geometric { .. } => true,
            Distribution::Integers { range, .. } => range == 0 || range > u32::MAX as u64,
            _ => dtype == DType::F64,
        }
    }

    /// Whether a fill of `dtype` can draw from this distribution.
    pub fn supports(&self, dtype: DType) -> bool {
        match self {
            Distribution::Integers { .. } => !dtype.is_complex(),
            Distribution::Geometric { .. } => dtype.is_floating() || dtype.is_integral(),
            _ => dtype.is_floating(),
        }
    }
}

/// Values drawn per Philox block for `dtype` and `dist`.
pub fn per_block(dtype: DType, dist: Distribution) -> usize {
    if dist.wide(dtype) {
        2
    } else {
        4
    }
}

/// Number of Philox blocks a fill of `numel` elements of `dtype` consumes.
pub fn blocks_needed(dtype: DType, dist: Distribution, numel: usize) -> u64 {
    numel.div_ceil(per_block(dtype, dist)) as u64
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

/// A value of the dtype from each kind of draw: floats computed in float32
/// (normal_/uniform_ below float64), in float64, or an int64 (`random_`),
/// converted as ATen's `static_cast`s do.
trait Draw: Scalar {
    fn of_f32(v: f32) -> Self;
    fn of_f64(v: f64) -> Self;
    fn of_int(v: i64) -> Self;
}

macro_rules! draw_int {
    ($($t:ty),*) => {$(
        impl Draw for $t {
            #[inline(always)]
            fn of_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn of_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn of_int(v: i64) -> Self {
                v as $t
            }
        }
    )*};
}
draw_int!(u8, i8, i16, i32, i64);

impl Draw for bool {
    #[inline(always)]
    fn of_f32(v: f32) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn of_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn of_int(v: i64) -> Self {
        v != 0
    }
}

impl Draw for f32 {
    #[inline(always)]
    fn of_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn of_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn of_int(v: i64) -> Self {
        v as f32
    }
}

impl Draw for f64 {
    #[inline(always)]
    fn of_f32(v: f32) -> Self {
        v as f64
    }
    #[inline(always)]
    fn of_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn of_int(v: i64) -> Self {
        v as f64
    }
}

macro_rules! draw_half {
    ($($t:ty),*) => {$(
        impl Draw for $t {
            #[inline(always)]
            fn of_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            #[inline(always)]
            fn of_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            // c10::Half / BFloat16 convert an int64 through float.
            #[inline(always)]
            fn of_int(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
        }
    )*};
}
draw_half!(f16, bf16);

/// The continuous distributions other than normal/uniform, from uniforms
/// `u` in [0, 1), computed in float64 (as ATen's CPU kernels do).
#[inline(always)]
fn transform(dist: Distribution, u: &mut [f64]) {
    match dist {
        Distribution::Exponential { lambda } => {
            for x in u.iter_mut() {
                *x = -(-*x).ln_1p() / lambda;
            }
        }
        Distribution::Cauchy { median, sigma } => {
            for x in u.iter_mut() {
                *x = median + sigma * (std::f64::consts::PI * (*x - 0.5)).tan();
            }
        }
        Distribution::LogNormal { mean, std } => {
            for pair in u.chunks_exact_mut(2) {
                let (a, b) = box_muller_f64(pair[0], pair[1]);
                pair[0] = (a * std + mean).exp();
                pair[1] = (b * std + mean).exp();
            }
        }
        Distribution::Geometric { p } => {
            let denom = (-p).ln_1p();
            for x in u.iter_mut() {
                // 1 - u is in (0, 1]: the log is finite, the count at least 1
                // (u = 0 gives 0 / denom = -0, so clamp to 1).
                *x = ((1.0 - *x).ln() / denom).ceil().max(1.0);
            }
        }
        _ => unreachable!("normal, uniform and integers are drawn elsewhere"),
    }
}

/// The values of block `b` (4, or 2 when `wide`).
#[inline(always)]
fn block_values<T: Draw>(ph: &Philox, b: u64, dist: Distribution, wide: bool) -> [T; 4] {
    let w = ph.block(b);
    let zero = T::of_int(0);
    match dist {
        Distribution::Integers { from, range } => {
            // `bits % range`; a power-of-two range (every default range of
            // the integer dtypes) is a mask, a narrow one a 32-bit division.
            let pow2 = range.is_power_of_two();
            let draw = |bits: u64| {
                let r = if range == 0 {
                    bits
                } else if pow2 {
                    bits & (range - 1)
                } else if !wide {
                    (bits as u32 % range as u32) as u64
                } else {
                    bits % range
                };
                T::of_int(from.wrapping_add(r as i64))
            };
            if wide {
                let hi = |a: u32, b: u32| (a as u64) << 32 | b as u64;
                [draw(hi(w[0], w[1])), draw(hi(w[2], w[3])), zero, zero]
            } else {
                w.map(|x| draw(x as u64))
            }
        }
        Distribution::Normal { mean, std } if !wide => {
            let u = w.map(uniform_f32);
            let (a, c) = box_muller_f32(u[0], u[1]);
            let (d, e) = box_muller_f32(u[2], u[3]);
            let (m, s) = (mean as f32, std as f32);
            [a * s + m, c * s + m, d * s + m, e * s + m].map(T::of_f32)
        }
        Distribution::Uniform { from, to } if !wide => {
            let (f, span) = (from as f32, (to - from) as f32);
            w.map(|x| T::of_f32(uniform_f32(x) * span + f))
        }
        Distribution::Normal { mean, std } => {
            let (a, c) = box_muller_f64(uniform_f64(w[0], w[1]), uniform_f64(w[2], w[3]));
            [
                T::of_f64(a * std + mean),
                T::of_f64(c * std + mean),
                zero,
                zero,
            ]
        }
        Distribution::Uniform { from, to } => {
            let u = [uniform_f64(w[0], w[1]), uniform_f64(w[2], w[3])];
            let [a, c] = u.map(|x| T::of_f64(x * (to - from) + from));
            [a, c, zero, zero]
        }
        _ if wide => {
            let mut u = [uniform_f64(w[0], w[1]), uniform_f64(w[2], w[3])];
            transform(dist, &mut u);
            [T::of_f64(u[0]), T::of_f64(u[1]), zero, zero]
        }
        _ => {
            let mut u = w.map(|x| uniform_f32(x) as f64);
            transform(dist, &mut u);
            u.map(T::of_f64)
        }
    }
}

/// Draws elements `start..start + len` of the view, computing each Philox
/// block once (`PB` elements a block).
#[allow(clippy::too_many_arguments)]
fn fill_range<T: Draw, const PB: usize>(
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
    let wide = PB == 2;
    if dense {
        // SAFETY: a dense view; [start, start+len) is inside it.
        let out = unsafe { std::slice::from_raw_parts_mut((p as *mut T).add(start), len) };
        let mut k = 0;
        while k < len {
            let i = start + k;
            let v = block_values::<T>(ph, offset.wrapping_add((i / PB) as u64), dist, wide);
            let lane = i % PB;
            let take = (PB - lane).min(len - k);
            out[k..k + take].copy_from_slice(&v[lane..lane + take]);
            k += take;
        }
    } else {
        let mut cached: Option<(u64, [T; 4])> = None;
        let mut value = |i: usize| -> T {
            let b = offset.wrapping_add((i / PB) as u64);
            match cached {
                Some((cb, v)) if cb == b => v[i % PB],
                _ => {
                    let v = block_values::<T>(ph, b, dist, wide);
                    cached = Some((b, v));
                    v[i % PB]
                }
            }
        };
        for_each_offset(sizes, strides, start, len, |k, off| {
            // SAFETY: offsets come from the view's sizes and strides.
            unsafe { *(p as *mut T).offset(off) = value(start + k) };
        });
    }
}

fn run<T: Draw>(dst: &Strided, seed: u64, offset: u64, dist: Distribution) {
    if dist.wide(dst.dtype) {
        run_pb::<T, 2>(dst, seed, offset, dist)
    } else {
        run_pb::<T, 4>(dst, seed, offset, dist)
    }
}

fn run_pb<T: Draw, const PB: usize>(dst: &Strided, seed: u64, offset: u64, dist: Distribution) {
    let n = dst.numel();
    let ph = Philox::new(seed);
    let dense = dst.is_contiguous();
    let p = dst.ptr as usize;
    // Chunks are multiples of 4 elements so no block straddles two threads
    // (it would not change results, only waste work).
    let chunk = GRAIN_SIZE;
    let fill = |start: usize, len: usize| {
        fill_range::<T, PB>(
            p,
            &dst.sizes,
            &dst.strides,
            dense,
            &ph,
            offset,
            start,
            len,
            dist,
        )
    };
    if n <= chunk {
        fill(0, n);
    } else {
        super::parallel::parallel_for(n.div_ceil(chunk), |c| {
            let start = c * chunk;
            fill(start, chunk.min(n - start));
        });
    }
}

/// Fills `dst` from `dist` using the Philox stream (`seed`, first block
/// `offset`). Floating dtypes only, but for `geometric_` (also integers) and
/// `random_` (every dtype), as torch's CPU kernels.
pub fn fill_random(
    dst: &Strided,
    seed: u64,
    offset: u64,
    dist: Distribution,
) -> Result<(), KernelError> {
    if !dist.supports(dst.dtype) {
        return Err(KernelError::UnsupportedDtype {
            op: dist.op(),
            dtype: dst.dtype,
        });
    }
    if dst.numel() == 0 {
        return Ok(());
    }
    match dst.dtype {
        DType::F32 => run::<f32>(dst, seed, offset, dist),
        DType::F64 => run::<f64>(dst, seed, offset, dist),
        DType::F16 => run::<f16>(dst, seed, offset, dist),
        DType::BF16 => run::<bf16>(dst, seed, offset, dist),
        DType::Bool => run::<bool>(dst, seed, offset, dist),
        DType::U8 => run::<u8>(dst, seed, offset, dist),
        DType::I8 => run::<i8>(dst, seed, offset, dist),
        DType::I16 => run::<i16>(dst, seed, offset, dist),
        DType::I32 => run::<i32>(dst, seed, offset, dist),
        DType::I64 => run::<i64>(dst, seed, offset, dist),
        DType::C64 | DType::C128 => unreachable!("refused by Distribution::supports"),
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

    fn ints<T: Default + Clone>(dtype: DType, n: usize, from: i64, range: u64, off: u64) -> Vec<T> {
        let mut v = vec![T::default(); n];
        let d = Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, &[n]);
        fill_random(&d, 11, off, Distribution::Integers { from, range }).unwrap();
        v
    }

    #[test]
    fn integers_cover_their_range() {
        let v: Vec<i8> = ints(DType::I8, 4000, -3, 7, 0);
        assert!(v.iter().all(|&x| (-3..4).contains(&x)));
        for k in -3..4 {
            assert!(v.contains(&k), "{k} never drawn");
        }
        let b: Vec<bool> = ints(DType::Bool, 1000, 0, 2, 0);
        assert!(b.iter().any(|&x| x) && b.iter().any(|&x| !x));
        // The full int64 range (range 0 = 2^64): both signs, large magnitudes.
        let w: Vec<i64> = ints(DType::I64, 1000, i64::MIN, 0, 0);
        assert!(w.iter().any(|&x| x < -(1 << 62)) && w.iter().any(|&x| x > 1 << 62));
    }

    #[test]
    fn wide_ranges_take_two_words_and_reach_past_u32() {
        let r = 1u64 << 40;
        let d = Distribution::Integers { from: 0, range: r };
        assert_eq!(per_block(DType::I64, d), 2);
        assert_eq!(
            per_block(DType::I64, Distribution::Integers { from: 0, range: 10 }),
            4
        );
        let v: Vec<i64> = ints(DType::I64, 1000, 0, r, 0);
        assert!(v.iter().all(|&x| (0..r as i64).contains(&x)));
        assert!(v.iter().filter(|&&x| x > u32::MAX as i64).count() > 900);
        // The stream continues across calls: element 6 of a draw at block 0
        // equals element 0 of a draw at block 3.
        let tail: Vec<i64> = ints(DType::I64, 2, 0, r, 3);
        assert_eq!(&v[6..8], &tail[..]);
    }

    #[test]
    fn float_integers_round_like_aten() {
        // [0, 2^11] inclusive for half (random_()'s default range).
        let v: Vec<f16> = ints(DType::F16, 20000, 0, (1 << 11) + 1, 0);
        assert!(v.iter().all(|x| x.to_f32() >= 0.0 && x.to_f32() <= 2048.0));
        assert!(v.iter().all(|x| x.to_f32().fract() == 0.0));
        assert!(v.iter().any(|x| x.to_f32() == 2048.0));
    }

    #[test]
    fn geometric_on_integers_and_continuous_refused_there() {
        let mut v = vec![0i32; 10000];
        let d = Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::I32, &[10000]);
        fill_random(&d, 1, 0, Distribution::Geometric { p: 0.5 }).unwrap();
        assert!(v.iter().all(|&x| x >= 1));
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!((mean - 2.0).abs() < 0.1, "mean {mean}");
        assert!(fill_random(&d, 1, 0, Distribution::Exponential { lambda: 1.0 }).is_err());
        let mut b = vec![false; 4];
        let d = Strided::contiguous(b.as_mut_ptr() as *mut u8, DType::Bool, &[4]);
        assert!(fill_random(&d, 1, 0, Distribution::Geometric { p: 0.5 }).is_err());
    }

    #[test]
    fn exponential_mean_f32_and_f64() {
        let mut v = vec![0f32; 100_000];
        let d = Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F32, &[v.len()]);
        fill_random(&d, 2, 0, Distribution::Exponential { lambda: 4.0 }).unwrap();
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!(v.iter().all(|&x| x >= 0.0));
        assert!((mean - 0.25).abs() < 0.005, "mean {mean}");
        let mut w = vec![0f64; 100_000];
        let d = Strided::contiguous(w.as_mut_ptr() as *mut u8, DType::F64, &[w.len()]);
        fill_random(&d, 2, 0, Distribution::Exponential { lambda: 4.0 }).unwrap();
        let mean = w.iter().sum::<f64>() / w.len() as f64;
        assert!((mean - 0.25).abs() < 0.005, "mean {mean}");
    }
}
