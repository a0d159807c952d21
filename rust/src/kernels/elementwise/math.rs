//! Scalar math for the elementwise kernels.
//!
//! The float32 transcendentals the hot ops need (exp, expm1, log, log1p,
//! log2, log10, tanh, erf and what is built from them) are branch-free
//! polynomial kernels: `#[inline(always)]`, only selects and fused
//! multiply-adds, so the SIMD map loops vectorize them (libm calls would not).
//! Their error is within 1-2 ULP over the whole float32 range (see the tests).
//! float64 and the remaining float32 functions use the platform libm.

// Polynomial coefficients are kept exactly as their sources print them.
#![allow(clippy::excessive_precision)]

use super::cast::Num;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

mod libm {
    extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
        pub fn lgamma_r(x: f64, sign: *mut i32) -> f64;
    }
}

#[inline(always)]
fn select(c: bool, a: f32, b: f32) -> f32 {
    if c {
        a
    } else {
        b
    }
}

const LN2_HI: f32 = 0.693_359_375;
const LN2_LO: f32 = -2.121_944_4e-4;

/// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer
/// (nearest even) held in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// Splits `x` (clamped to about [-104, 89], or NaN) as `x = n*ln2 + r`,
/// `|r| <= ln2/2`; returns `(expm1(r), n)`. Branch- and UB-free for NaN.
#[inline(always)]
fn exp_reduce(x: f32) -> (f32, i32) {
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    (expm1_poly(r), ni)
}

/// `exp(r) - 1` for `|r| <= ln2/2` (Cephes expf polynomial).
#[inline(always)]
fn expm1_poly(r: f32) -> f32 {
    let mut p = 1.987_569_2e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 5.000_000_1e-1);
    p.mul_add(r * r, r)
}

/// `2^n` for `-126 <= n <= 127` (other `n` give garbage, never UB).
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// `p * 2^n` for `|n| <= 252`, rounding once even into the subnormals.
#[inline(always)]
fn ldexp2(p: f32, n: i32) -> f32 {
    let h = n >> 1;
    p * pow2i(h) * pow2i(n - h)
}

/// e^x.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // min/max forms that keep NaN (x86 minps/maxps); NaN flows through.
    let xc = select(x > 89.0, 89.0, x);
    let xc = select(xc < -104.0, -104.0, xc);
    let (em1, n) = exp_reduce(xc);
    ldexp2(em1 + 1.0, n)
}

/// e^x for `x` in [-87, 88] (normal results only: no clamping, one
/// scaling); NaN propagates. For callers that bound their argument.
#[inline(always)]
fn exp_bounded(x: f32) -> f32 {
    let (em1, n) = exp_reduce(x);
    (em1 + 1.0) * pow2i(n)
}

/// 2^x.
#[inline(always)]
pub fn exp2_f32(x: f32) -> f32 {
    let xc = select(x > 129.0, 129.0, x);
    let xc = select(xc < -151.0, -151.0, xc);
    let t = xc + ROUND_MAGIC;
    let n = t - ROUND_MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let r = (xc - n) * std::f32::consts::LN_2;
    ldexp2(expm1_poly(r) + 1.0, ni)
}

/// e^x - 1, accurate near zero.
#[inline(always)]
pub fn expm1_f32(x: f32) -> f32 {
    let xc = select(x > 40.0, 40.0, x);
    let xc = select(xc < -30.0, -30.0, xc);
    let (em1, n) = exp_reduce(xc);
    let s = pow2i(n);
    let y = em1.mul_add(s, s - 1.0);
    select(x > 40.0, exp_f32(x), y)
}

/// `ln(1 + m) - m` for `m` in `[sqrt(1/2) - 1, sqrt(2) - 1]` (Cephes logf).
#[inline(always)]
fn log1p_poly(m: f32) -> f32 {
    let z = m * m;
    let mut p = 7.037_683_6e-2f32;
    p = p.mul_add(m, -1.151_461e-1);
    p = p.mul_add(m, 1.167_699_9e-1);
    p = p.mul_add(m, -1.242_014_1e-1);
    p = p.mul_add(m, 1.424_932_3e-1);
    p = p.mul_add(m, -1.666_805_8e-1);
    p = p.mul_add(m, 2.000_071_5e-1);
    p = p.mul_add(m, -2.499_999_4e-1);
    p = p.mul_add(m, 3.333_333_1e-1);
    let y = (p * m) * z;
    z.mul_add(-0.5, y)
}

/// Splits `x > 0` (finite) as `ln x = e*ln2 + m + y`.
#[inline(always)]
fn log_core(x: f32) -> (f32, f32, f32) {
    // Scale subnormals into the normal range.
    let sub = x < f32::MIN_POSITIVE;
    let xs = select(sub, x * 8_388_608.0, x); // 2^23
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xFF) as i32 - 126;
    e -= if sub { 23 } else { 0 };
    let mut m = f32::from_bits((bits & 0x807F_FFFF) | 0x3F00_0000); // [0.5, 1)
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= small as i32;
    m = select(small, m + m - 1.0, m - 1.0);
    (e as f32, m, log1p_poly(m))
}

#[inline(always)]
fn log_special(x: f32, y: f32) -> f32 {
    let y = select(x == f32::INFINITY, f32::INFINITY, y);
    let y = select(x == 0.0, f32::NEG_INFINITY, y);
    select(x < 0.0 || x.is_nan(), f32::NAN, y)
}

/// Natural logarithm.
#[inline(always)]
pub fn ln_f32(x: f32) -> f32 {
    let (e, m, y) = log_core(x);
    let y = e.mul_add(LN2_LO, y);
    let r = e.mul_add(LN2_HI, m + y);
    log_special(x, r)
}

/// Base-2 logarithm.
#[inline(always)]
pub fn log2_f32(x: f32) -> f32 {
    let (e, m, y) = log_core(x);
    let r = m.mul_add(std::f32::consts::LOG2_E, y * std::f32::consts::LOG2_E) + e;
    log_special(x, r)
}

/// Base-10 logarithm.
#[inline(always)]
pub fn log10_f32(x: f32) -> f32 {
    const LOG10_2_HI: f32 = 0.301_025_39; // 0x3e9a2000: few bits, e * hi exact
    const LOG10_2_LO: f32 = 4.605_038e-6;
    let (e, m, y) = log_core(x);
    let t = m.mul_add(std::f32::consts::LOG10_E, y * std::f32::consts::LOG10_E);
    let r = e.mul_add(LOG10_2_HI, e.mul_add(LOG10_2_LO, t));
    log_special(x, r)
}

/// ln(1 + x), accurate near zero.
#[inline(always)]
pub fn ln1p_f32(x: f32) -> f32 {
    // Near zero the log polynomial is log1p itself.
    let core = x > std::f32::consts::FRAC_1_SQRT_2 - 1.0 && x < std::f32::consts::SQRT_2 - 1.0;
    let small = x + log1p_poly(select(core, x, 0.0));
    // Elsewhere log(1 + x), corrected for the rounding of 1 + x.
    let u = 1.0 + x;
    let c = (x - (u - 1.0)) / u;
    let large = ln_f32(u) + select(u == f32::INFINITY || u == 0.0, 0.0, c);
    select(core, small, large)
}

/// Hyperbolic tangent.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    // Small |x|: odd polynomial (Cephes tanhf).
    let z = x * x;
    let mut p = -5.704_988_7e-3f32;
    p = p.mul_add(z, 2.063_908_9e-2);
    p = p.mul_add(z, -5.373_971_6e-2);
    p = p.mul_add(z, 1.333_144_2e-1);
    p = p.mul_add(z, -3.333_328_2e-1);
    let small = (p * z).mul_add(x, x);
    // Large |x|: 1 - 2 / (e^2|x| + 1); past 20, tanh is 1 in float32.
    let e = exp_bounded(select(a > 20.0, 40.0, a + a));
    let large = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    let r = select(a < 0.625, small, large);
    select(x == 0.0, x, r)
}

/// Logistic sigmoid `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// Error function (polynomials by N. Juffa, max error ~1 ULP).
#[inline(always)]
pub fn erf_f32(a: f32) -> f32 {
    let t = a.abs();
    let s = a * a;
    // |a| > 0.927734375: erf = 1 - exp(poly(t))
    let tc = select(t > 10.0, 10.0, t);
    let mut r = (-1.728_534_7e-5f32).mul_add(tc, 3.831_971_3e-4);
    let u = (-3.883_964_4e-3f32).mul_add(tc, 2.425_462_2e-2);
    r = r.mul_add(tc * tc, u);
    r = r.mul_add(tc, -1.067_778_8e-1);
    r = r.mul_add(tc, -6.348_466_9e-1);
    r = r.mul_add(tc, -1.287_175_1e-1);
    r = r.mul_add(tc, -tc);
    // exp(r) below e^-87 cannot change 1 - exp(r) in float32.
    let big = (1.0 - exp_bounded(select(r < -87.0, -87.0, r))).copysign(a);
    // |a| <= 0.927734375
    let mut q = -5.967_617e-4f32;
    q = q.mul_add(s, 4.991_194_2e-3);
    q = q.mul_add(s, -2.676_813_5e-2);
    q = q.mul_add(s, 1.128_199_3e-1);
    q = q.mul_add(s, -3.761_253_4e-1);
    q = q.mul_add(s, 1.283_791_7e-1);
    let small = q.mul_add(a, a);
    select(t > 0.927_734_4, big, small)
}

/// `ln |Γ(x)|` in float64 (the C library's reentrant `lgamma_r`: `lgamma`
/// writes the global `signgam`, a data race across foo's threads).
pub fn lgamma_f64(x: f64) -> f64 {
    let mut sign = 0i32;
    // SAFETY: pure libm function; `sign` is a valid out-pointer.
    unsafe { libm::lgamma_r(x, &mut sign) }
}

/// The digamma function ψ(x) = d/dx ln Γ(x) in `T`'s arithmetic (float32 as
/// CPU computes it for float32 and the 16-bit types, float64 for float64),
/// with CPU's special values (ATen's `calc_digamma`, after Cephes' `psi`):
/// ∓∞ at ±0, NaN at negative integers and -∞; negative x by the reflection
/// ψ(x) = ψ(1 - x) - π / tan(π frac(x)) (that term in float64); the
/// recurrence ψ(x) = ψ(x + 1) - 1/x up to x ≥ 10; then the asymptotic series
/// in 1/x².
pub(crate) fn digamma<T: Real>(x: T) -> T {
    // ψ(10)
    const PSI_10: f64 = 2.251_752_589_066_721_107_64;
    // Coefficients of the asymptotic series, highest power first.
    const A: [f64; 7] = [
        8.333_333_333_333_333_333_33E-2,
        -2.109_279_609_279_609_279_61E-2,
        7.575_757_575_757_575_757_58E-3,
        -4.166_666_666_666_666_666_67E-3,
        3.968_253_968_253_968_253_97E-3,
        -8.333_333_333_333_333_333_33E-3,
        8.333_333_333_333_333_333_33E-2,
    ];
    if x == T::ZERO {
        return T::INFINITY.copysign(-x);
    }
    if x < T::ZERO {
        if x == x.trunc() {
            return T::NAN;
        }
        // tan(π r) of the fractional part r is more accurate than tan(π x).
        let r = (x - x.trunc()).to_f64();
        let pi = std::f64::consts::PI;
        return digamma(T::ONE - x) - T::c(pi / (pi * r).tan());
    }
    let (mut x, mut acc) = (x, T::ZERO);
    while x < T::c(10.0) {
        acc = acc - T::ONE / x;
        x = x + T::ONE;
    }
    if x == T::c(10.0) {
        return acc + T::c(PSI_10);
    }
    let series = if x < T::c(1.0e17) {
        let z = T::ONE / (x * x);
        z * A.iter().fold(T::ZERO, |p, &c| p * z + T::c(c))
    } else {
        T::ZERO
    };
    // A correctly rounded log, as the C library's logf/log that CPU calls
    // (foo's vectorized ln_f32 can differ from it by an ulp).
    acc + T::c(x.to_f64().ln()) - T::c(0.5) / x - series
}

/// [`digamma`] in float64.
pub fn digamma_f64(x: f64) -> f64 {
    digamma(x)
}

/// The trigamma function ψ'(x) in `T`'s arithmetic (ATen's `trigamma`):
/// the reflection ψ'(x) = π²/sin²(πx) - ψ'(1 - x) below 1/2, six steps of
/// the recurrence, then the asymptotic series.
pub(crate) fn trigamma<T: Real>(x: T) -> T {
    let (mut x, mut sign, mut result) = (x, T::ONE, T::ZERO);
    if x < T::c(0.5) {
        sign = -T::ONE;
        let pi = T::c(std::f64::consts::PI);
        let sin_pi_x = (pi * x).sin();
        result = result - (pi * pi) / (sin_pi_x * sin_pi_x);
        x = T::ONE - x;
    }
    for _ in 0..6 {
        result = result + T::ONE / (x * x);
        x = x + T::ONE;
    }
    let ixx = T::ONE / (x * x);
    let two = T::c(2.0);
    result = result
        + (T::ONE
            + T::ONE / (two * x)
            + ixx * (T::c(1.0 / 6.0) - ixx * (T::c(1.0 / 30.0) - ixx * T::c(1.0 / 42.0))))
            / x;
    sign * result
}

/// The Hurwitz zeta function ζ(x, q) = Σ_k (k + q)^-x in float64 (ATen's
/// `zeta`, after Cephes, which CPU runs in float64 for float32 too): the
/// direct sum up to a ≥ 9, then the Euler-Maclaurin tail.
pub fn zeta_f64(x: f64, q: f64) -> f64 {
    const MACHEP: f64 = 1.110_223_024_625_156_540_42E-16;
    const A: [f64; 12] = [
        12.0,
        -720.0,
        30240.0,
        -1209600.0,
        47900160.0,
        -1.892_437_580_318_379_160_6e9,
        7.472_424_96e10,
        -2.950_130_727_918_164_224e12,
        1.164_678_281_435_006_724_9e14,
        -4.597_978_722_407_472_610_5e15,
        1.815_210_540_194_354_677_3e17,
        -7.166_165_256_175_667_011_3e18,
    ];
    if x == 1.0 {
        return f64::INFINITY;
    }
    if x < 1.0 {
        return f64::NAN;
    }
    if q <= 0.0 {
        if q == q.floor() {
            return f64::INFINITY;
        }
        if x != x.floor() {
            return f64::NAN;
        }
    }
    let mut s = q.powf(-x);
    let mut a = q;
    let mut b = 0.0;
    let mut i = 0;
    while i < 9 || a <= 9.0 {
        i += 1;
        a += 1.0;
        b = a.powf(-x);
        s += b;
        if -MACHEP * s < b && b < MACHEP * s {
            return s;
        }
    }
    let w = a;
    s += b * w / (x - 1.0);
    s -= 0.5 * b;
    let mut a = 1.0;
    let mut k = 0.0;
    for c in A {
        a *= x + k;
        b /= w;
        let t = a * b / c;
        s += t;
        if (t / s).abs() < MACHEP {
            return s;
        }
        k += 1.0;
        a *= x + k;
        b /= w;
        k += 1.0;
    }
    s
}

/// The polygamma function ψ⁽ⁿ⁾(x), n ≥ 0, as CPU computes it: [`digamma`]
/// for n = 0, [`trigamma`] for n = 1, else (-1)ⁿ⁺¹ n! ζ(n + 1, x) with n!
/// as exp(lgamma(n + 1)) in `T` and ζ in float64 ([`zeta_f64`]).
pub(crate) fn polygamma<T: Real>(n: i64, x: T) -> T {
    match n {
        0 => digamma(x),
        1 => trigamma(x),
        _ => {
            let sign = if n % 2 == 1 { T::ONE } else { -T::ONE };
            let fact = (T::c(n as f64) + T::ONE).lgamma().exp();
            sign * fact * T::c(zeta_f64((n + 1) as f64, x.to_f64()))
        }
    }
}

/// Inverse error function (rational start + two Newton steps, ATen's
/// `calc_erfinv`), in float64.
pub fn erfinv_f64(y: f64) -> f64 {
    const A: [f64; 4] = [0.886226899, -1.645349621, 0.914624893, -0.140543331];
    const B: [f64; 4] = [-2.118377725, 1.442710462, -0.329097515, 0.012229801];
    const C: [f64; 4] = [-1.970840454, -1.624906493, 3.429567803, 1.641345311];
    const D: [f64; 2] = [3.543889200, 1.637067800];
    let ya = y.abs();
    if ya > 1.0 || y.is_nan() {
        return f64::NAN;
    }
    if ya == 1.0 {
        return f64::INFINITY.copysign(y);
    }
    let mut x = if ya <= 0.7 {
        let z = y * y;
        let num = ((A[3] * z + A[2]) * z + A[1]) * z + A[0];
        let dem = (((B[3] * z + B[2]) * z + B[1]) * z + B[0]) * z + 1.0;
        y * num / dem
    } else {
        let z = (-((1.0 - ya) / 2.0).ln()).sqrt();
        let num = ((C[3] * z + C[2]) * z + C[1]) * z + C[0];
        let dem = (D[1] * z + D[0]) * z + 1.0;
        num.copysign(y) / dem
    };
    let k = 2.0 / std::f64::consts::PI.sqrt();
    for _ in 0..2 {
        x -= (erf_f64(x) - y) / (k * (-x * x).exp());
    }
    x
}

#[inline]
pub fn erf_f64(x: f64) -> f64 {
    // SAFETY: pure libm function.
    unsafe { libm::erf(x) }
}

#[inline]
pub fn erfc_f64(x: f64) -> f64 {
    // SAFETY: pure libm function.
    unsafe { libm::erfc(x) }
}

/// Floating compute types (`f32`, also used for float16/bfloat16, and
/// `f64`) with the math the ops need.
pub(crate) trait Real:
    Num
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Rem<Output = Self>
    + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    const NAN: Self;
    const INFINITY: Self;
    /// A constant, rounded to `Self`.
    fn c(v: f64) -> Self;
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn trunc(self) -> Self;
    fn round_even(self) -> Self;
    fn sqrt(self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_finite(self) -> bool;
    fn copysign(self, sign: Self) -> Self;
    fn exp(self) -> Self;
    fn exp2(self) -> Self;
    fn expm1(self) -> Self;
    fn ln(self) -> Self;
    fn log2(self) -> Self;
    fn log10(self) -> Self;
    fn ln1p(self) -> Self;
    fn tanh(self) -> Self;
    fn sigmoid(self) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn erfinv(self) -> Self;
    fn lgamma(self) -> Self;
    fn digamma(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn atan2(self, o: Self) -> Self;
    fn hypot(self, o: Self) -> Self;
    fn powf(self, o: Self) -> Self;
    /// C `fmax`: the other operand if one is NaN.
    fn fmax(self, o: Self) -> Self;
    fn fmin(self, o: Self) -> Self;
}

macro_rules! via_f64 {
    ($($name:ident => $e:expr),* $(,)?) => {
        $(
            #[inline(always)]
            fn $name(self) -> f32 {
                let f: fn(f64) -> f64 = $e;
                f(self as f64) as f32
            }
        )*
    };
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NAN: f32 = f32::NAN;
    const INFINITY: f32 = f32::INFINITY;
    #[inline(always)]
    fn c(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        f32::mul_add(self, a, b)
    }
    #[inline(always)]
    fn abs(self) -> f32 {
        f32::abs(self)
    }
    #[inline(always)]
    fn floor(self) -> f32 {
        f32::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> f32 {
        f32::ceil(self)
    }
    #[inline(always)]
    fn trunc(self) -> f32 {
        f32::trunc(self)
    }
    #[inline(always)]
    fn round_even(self) -> f32 {
        f32::round_ties_even(self)
    }
    #[inline(always)]
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn is_infinite(self) -> bool {
        f32::is_infinite(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn copysign(self, s: f32) -> f32 {
        f32::copysign(self, s)
    }
    #[inline(always)]
    fn exp(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn exp2(self) -> f32 {
        exp2_f32(self)
    }
    #[inline(always)]
    fn expm1(self) -> f32 {
        expm1_f32(self)
    }
    #[inline(always)]
    fn ln(self) -> f32 {
        ln_f32(self)
    }
    #[inline(always)]
    fn log2(self) -> f32 {
        log2_f32(self)
    }
    #[inline(always)]
    fn log10(self) -> f32 {
        log10_f32(self)
    }
    #[inline(always)]
    fn ln1p(self) -> f32 {
        ln1p_f32(self)
    }
    #[inline(always)]
    fn tanh(self) -> f32 {
        tanh_f32(self)
    }
    #[inline(always)]
    fn sigmoid(self) -> f32 {
        sigmoid_f32(self)
    }
    #[inline(always)]
    fn erf(self) -> f32 {
        erf_f32(self)
    }
    #[inline(always)]
    fn digamma(self) -> f32 {
        digamma(self)
    }
    via_f64! {
        erfc => erfc_f64,
        erfinv => erfinv_f64,
        lgamma => lgamma_f64,
        sin => f64::sin,
        cos => f64::cos,
        tan => f64::tan,
        asin => f64::asin,
        acos => f64::acos,
        atan => f64::atan,
        sinh => f64::sinh,
        cosh => f64::cosh,
        asinh => f64::asinh,
        acosh => f64::acosh,
        atanh => f64::atanh,
    }
    #[inline(always)]
    fn atan2(self, o: f32) -> f32 {
        (self as f64).atan2(o as f64) as f32
    }
    #[inline(always)]
    fn hypot(self, o: f32) -> f32 {
        (self as f64).hypot(o as f64) as f32
    }
    #[inline(always)]
    fn powf(self, o: f32) -> f32 {
        f32::powf(self, o)
    }
    #[inline(always)]
    fn fmax(self, o: f32) -> f32 {
        f32::max(self, o)
    }
    #[inline(always)]
    fn fmin(self, o: f32) -> f32 {
        f32::min(self, o)
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NAN: f64 = f64::NAN;
    const INFINITY: f64 = f64::INFINITY;
    #[inline(always)]
    fn c(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn mul_add(self, a: f64, b: f64) -> f64 {
        f64::mul_add(self, a, b)
    }
    #[inline(always)]
    fn abs(self) -> f64 {
        f64::abs(self)
    }
    #[inline(always)]
    fn floor(self) -> f64 {
        f64::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> f64 {
        f64::ceil(self)
    }
    #[inline(always)]
    fn trunc(self) -> f64 {
        f64::trunc(self)
    }
    #[inline(always)]
    fn round_even(self) -> f64 {
        f64::round_ties_even(self)
    }
    #[inline(always)]
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn is_infinite(self) -> bool {
        f64::is_infinite(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn copysign(self, s: f64) -> f64 {
        f64::copysign(self, s)
    }
    #[inline(always)]
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    #[inline(always)]
    fn exp2(self) -> f64 {
        f64::exp2(self)
    }
    #[inline(always)]
    fn expm1(self) -> f64 {
        f64::exp_m1(self)
    }
    #[inline(always)]
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    #[inline(always)]
    fn log2(self) -> f64 {
        f64::log2(self)
    }
    #[inline(always)]
    fn log10(self) -> f64 {
        f64::log10(self)
    }
    #[inline(always)]
    fn ln1p(self) -> f64 {
        f64::ln_1p(self)
    }
    #[inline(always)]
    fn tanh(self) -> f64 {
        f64::tanh(self)
    }
    #[inline(always)]
    fn sigmoid(self) -> f64 {
        1.0 / (1.0 + f64::exp(-self))
    }
    #[inline(always)]
    fn erf(self) -> f64 {
        erf_f64(self)
    }
    #[inline(always)]
    fn erfc(self) -> f64 {
        erfc_f64(self)
    }
    #[inline(always)]
    fn erfinv(self) -> f64 {
        erfinv_f64(self)
    }
    #[inline(always)]
    fn lgamma(self) -> f64 {
        lgamma_f64(self)
    }
    #[inline(always)]
    fn digamma(self) -> f64 {
        digamma_f64(self)
    }
    #[inline(always)]
    fn sin(self) -> f64 {
        f64::sin(self)
    }
    #[inline(always)]
    fn cos(self) -> f64 {
        f64::cos(self)
    }
    #[inline(always)]
    fn tan(self) -> f64 {
        f64::tan(self)
    }
    #[inline(always)]
    fn asin(self) -> f64 {
        f64::asin(self)
    }
    #[inline(always)]
    fn acos(self) -> f64 {
        f64::acos(self)
    }
    #[inline(always)]
    fn atan(self) -> f64 {
        f64::atan(self)
    }
    #[inline(always)]
    fn sinh(self) -> f64 {
        f64::sinh(self)
    }
    #[inline(always)]
    fn cosh(self) -> f64 {
        f64::cosh(self)
    }
    #[inline(always)]
    fn asinh(self) -> f64 {
        f64::asinh(self)
    }
    #[inline(always)]
    fn acosh(self) -> f64 {
        f64::acosh(self)
    }
    #[inline(always)]
    fn atanh(self) -> f64 {
        f64::atanh(self)
    }
    #[inline(always)]
    fn atan2(self, o: f64) -> f64 {
        f64::atan2(self, o)
    }
    #[inline(always)]
    fn hypot(self, o: f64) -> f64 {
        f64::hypot(self, o)
    }
    #[inline(always)]
    fn powf(self, o: f64) -> f64 {
        f64::powf(self, o)
    }
    #[inline(always)]
    fn fmax(self, o: f64) -> f64 {
        f64::max(self, o)
    }
    #[inline(always)]
    fn fmin(self, o: f64) -> f64 {
        f64::min(self, o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the float64
    /// reference rounded to float32.
    fn ulp(got: f32, want: f64) -> f64 {
        if want.is_nan() {
            return if got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        let w = want as f32;
        if got == w {
            return 0.0;
        }
        if w.is_infinite() || got.is_infinite() {
            return f64::INFINITY;
        }
        let spacing = {
            let a = w.abs().max(f32::MIN_POSITIVE * 2f32.powi(-23));
            let next = f32::from_bits(a.to_bits() + 1);
            (next - a) as f64
        };
        ((got as f64) - want).abs() / spacing
    }

    /// Worst error over an even sweep of bit patterns in `[lo, hi]` plus
    /// some dense points.
    fn max_ulp(
        f: impl Fn(f32) -> f32,
        reference: impl Fn(f64) -> f64,
        lo: f32,
        hi: f32,
    ) -> (f64, f32) {
        let mut worst = (0.0, 0.0);
        let mut check = |x: f32| {
            let e = ulp(f(x), reference(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
        };
        // Sweep both signs through bit patterns.
        for sign in [1.0f32, -1.0] {
            let (a, b) = if sign > 0.0 {
                (lo.max(0.0), hi)
            } else {
                ((-hi).max(0.0), -lo)
            };
            if b < a {
                continue;
            }
            let (ba, bb) = (a.to_bits(), b.to_bits());
            let step = ((bb - ba) / 300_000).max(1);
            let mut bits = ba;
            while bits <= bb {
                check(sign * f32::from_bits(bits));
                bits = match bits.checked_add(step) {
                    Some(v) => v,
                    None => break,
                };
            }
        }
        worst
    }

    #[test]
    fn exp_is_within_one_ulp() {
        let (e, x) = max_ulp(exp_f32, f64::exp, -104.0, 89.0);
        assert!(e <= 1.0, "exp: {e} ulp at {x:e}");
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(88.73), f32::INFINITY);
        assert!(exp_f32(-100.0) > 0.0);
    }

    #[test]
    fn exp2_and_expm1_are_accurate() {
        let (e, x) = max_ulp(exp2_f32, f64::exp2, -150.0, 128.0);
        assert!(e <= 1.0, "exp2: {e} ulp at {x:e}");
        assert_eq!(exp2_f32(3.0), 8.0);
        let (e, x) = max_ulp(expm1_f32, f64::exp_m1, -88.0, 88.7);
        assert!(e <= 2.0, "expm1: {e} ulp at {x:e}");
        assert_eq!(expm1_f32(-1e-30), -1e-30);
        assert_eq!(expm1_f32(-50.0), -1.0);
        assert_eq!(expm1_f32(100.0), f32::INFINITY);
    }

    #[test]
    fn logs_are_accurate() {
        let (e, x) = max_ulp(ln_f32, f64::ln, 0.0, f32::MAX);
        assert!(e <= 1.0, "ln: {e} ulp at {x:e}");
        let (e, x) = max_ulp(log2_f32, f64::log2, 0.0, f32::MAX);
        assert!(e <= 2.0, "log2: {e} ulp at {x:e}");
        let (e, x) = max_ulp(log10_f32, f64::log10, 0.0, f32::MAX);
        assert!(e <= 2.0, "log10: {e} ulp at {x:e}");
        let (e, x) = max_ulp(ln1p_f32, f64::ln_1p, -1.0, f32::MAX);
        assert!(e <= 2.0, "log1p: {e} ulp at {x:e}");
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(log2_f32(8.0), 3.0);
        assert_eq!(log10_f32(1000.0), 3.0);
        assert_eq!(ln1p_f32(-1.0), f32::NEG_INFINITY);
        assert_eq!(ln1p_f32(f32::INFINITY), f32::INFINITY);
        assert!(ln_f32(1e-45) < -103.0);
    }

    #[test]
    fn tanh_sigmoid_erf_are_accurate() {
        let (e, x) = max_ulp(tanh_f32, f64::tanh, -100.0, 100.0);
        assert!(e <= 2.0, "tanh: {e} ulp at {x:e}");
        let (e, x) = max_ulp(erf_f32, erf_f64, -100.0, 100.0);
        assert!(e <= 2.0, "erf: {e} ulp at {x:e}");
        let (e, x) = max_ulp(sigmoid_f32, |x| 1.0 / (1.0 + (-x).exp()), -80.0, 100.0);
        assert!(e <= 2.0, "sigmoid: {e} ulp at {x:e}");
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        assert_eq!(erf_f32(f32::INFINITY), 1.0);
        assert!(erf_f32(f32::NAN).is_nan());
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn erfinv_inverts_erf() {
        for &y in &[-0.999, -0.5, -0.1, 0.0, 0.3, 0.7, 0.9, 0.999999] {
            let x = erfinv_f64(y);
            assert!((erf_f64(x) - y).abs() < 1e-15, "{y}");
        }
        assert_eq!(erfinv_f64(1.0), f64::INFINITY);
        assert!(erfinv_f64(1.5).is_nan());
    }
}
