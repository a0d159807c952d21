//! The `torch.special` functions of one input (Bessel, Airy, error-function
//! relatives) and the orthogonal polynomials `P_n(x)`, one scalar function
//! each, evaluated as ATen's CPU kernels evaluate them: the same
//! approximations (Cephes coefficients, which are published constants), in
//! the same type (`T` = f32 for float32/float16/bfloat16, f64 for float64),
//! so foo's values match CPU's to a few ULP, including where the
//! approximation itself is inexact (large `n`, near zeros).

// Coefficients are kept exactly as Cephes prints them.
#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

use super::math::{erfc_f64, Real};
use crate::dtype::DType;

/// A one-input special function (`UnaryOp::Special`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecialFn {
    /// `i0` / `special_i0`, also `special_modified_bessel_i0`.
    I0,
    I0e,
    /// `special_i1`, also `special_modified_bessel_i1`.
    I1,
    I1e,
    Erfcx,
    LogNdtr,
    Ndtri,
    AiryAi,
    BesselJ0,
    BesselJ1,
    BesselY0,
    BesselY1,
    ModifiedBesselI0,
    ModifiedBesselI1,
    ModifiedBesselK0,
    ModifiedBesselK1,
    ScaledModifiedBesselK0,
    ScaledModifiedBesselK1,
    SphericalBesselJ0,
    /// `angle` of a real number: 0, or pi below zero (NaN kept).
    Angle,
    /// The mantissa of `frexp`, in `[0.5, 1)` (0, inf and NaN kept).
    FrexpMantissa,
}

impl SpecialFn {
    /// The op name (kernels/elementwise/spec.rs) and ATen's kernel name.
    pub fn name(self) -> &'static str {
        use SpecialFn::*;
        match self {
            I0 => "i0",
            I0e => "special_i0e",
            I1 => "special_i1",
            I1e => "special_i1e",
            Erfcx => "special_erfcx",
            LogNdtr => "special_log_ndtr",
            Ndtri => "special_ndtri",
            AiryAi => "special_airy_ai",
            BesselJ0 => "special_bessel_j0",
            BesselJ1 => "special_bessel_j1",
            BesselY0 => "special_bessel_y0",
            BesselY1 => "special_bessel_y1",
            ModifiedBesselI0 => "special_modified_bessel_i0",
            ModifiedBesselI1 => "special_modified_bessel_i1",
            ModifiedBesselK0 => "special_modified_bessel_k0",
            ModifiedBesselK1 => "special_modified_bessel_k1",
            ScaledModifiedBesselK0 => "special_scaled_modified_bessel_k0",
            ScaledModifiedBesselK1 => "special_scaled_modified_bessel_k1",
            SphericalBesselJ0 => "special_spherical_bessel_j0",
            Angle => "angle",
            FrexpMantissa => "frexp_mantissa",
        }
    }

    /// The function of an op name, if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        use SpecialFn::*;
        const ALL: [SpecialFn; 21] = [
            I0,
            I0e,
            I1,
            I1e,
            Erfcx,
            LogNdtr,
            Ndtri,
            AiryAi,
            BesselJ0,
            BesselJ1,
            BesselY0,
            BesselY1,
            ModifiedBesselI0,
            ModifiedBesselI1,
            ModifiedBesselK0,
            ModifiedBesselK1,
            ScaledModifiedBesselK0,
            ScaledModifiedBesselK1,
            SphericalBesselJ0,
            Angle,
            FrexpMantissa,
        ];
        ALL.into_iter().find(|f| f.name() == name)
    }

    /// The function at `x`.
    #[inline(always)]
    pub(crate) fn eval<T: Real>(self, x: T) -> T {
        use SpecialFn::*;
        match self {
            I0 | ModifiedBesselI0 => i0(x),
            I0e => i0e(x),
            I1 => i1(x),
            ModifiedBesselI1 => modified_i1(x),
            I1e => i1e(x),
            Erfcx => erfcx(x),
            LogNdtr => T::c(log_ndtr_f64(x.to_f64())),
            Ndtri => ndtri(x),
            AiryAi => airy_ai(x),
            BesselJ0 => bessel_j0(x),
            BesselJ1 => bessel_j1(x),
            BesselY0 => bessel_y0(x),
            BesselY1 => bessel_y1(x),
            ModifiedBesselK0 => k0(x, false),
            ModifiedBesselK1 => k1(x, false),
            ScaledModifiedBesselK0 => k0(x, true),
            ScaledModifiedBesselK1 => k1(x, true),
            SphericalBesselJ0 => spherical_bessel_j0(x),
            FrexpMantissa => T::c(frexp(x.to_f64()).0),
            Angle => {
                if x.is_nan() {
                    x
                } else if x < T::ZERO {
                    T::c(std::f64::consts::PI)
                } else {
                    T::ZERO
                }
            }
        }
    }
}

/// An orthogonal polynomial `P_n(x)` (`BinaryOp::Polynomial`; `x` first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polynomial {
    ChebyshevT,
    ChebyshevU,
    ChebyshevV,
    ChebyshevW,
    ShiftedChebyshevT,
    ShiftedChebyshevU,
    ShiftedChebyshevV,
    ShiftedChebyshevW,
    HermiteH,
    HermiteHe,
    LaguerreL,
    LegendreP,
}

impl Polynomial {
    pub fn name(self) -> &'static str {
        use Polynomial::*;
        match self {
            ChebyshevT => "special_chebyshev_polynomial_t",
            ChebyshevU => "special_chebyshev_polynomial_u",
            ChebyshevV => "special_chebyshev_polynomial_v",
            ChebyshevW => "special_chebyshev_polynomial_w",
            ShiftedChebyshevT => "special_shifted_chebyshev_polynomial_t",
            ShiftedChebyshevU => "special_shifted_chebyshev_polynomial_u",
            ShiftedChebyshevV => "special_shifted_chebyshev_polynomial_v",
            ShiftedChebyshevW => "special_shifted_chebyshev_polynomial_w",
            HermiteH => "special_hermite_polynomial_h",
            HermiteHe => "special_hermite_polynomial_he",
            LaguerreL => "special_laguerre_polynomial_l",
            LegendreP => "special_legendre_polynomial_p",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        use Polynomial::*;
        const ALL: [Polynomial; 12] = [
            ChebyshevT,
            ChebyshevU,
            ChebyshevV,
            ChebyshevW,
            ShiftedChebyshevT,
            ShiftedChebyshevU,
            ShiftedChebyshevV,
            ShiftedChebyshevW,
            HermiteH,
            HermiteHe,
            LaguerreL,
            LegendreP,
        ];
        ALL.into_iter().find(|p| p.name() == name)
    }

    /// `P_n(x)`, `n` as the compute type (ATen truncates it to an integer).
    #[inline(always)]
    pub(crate) fn eval<T: Real>(self, x: T, n: T) -> T {
        use Polynomial::*;
        match self {
            ChebyshevT => chebyshev_t(x, degree(n)),
            ChebyshevU => chebyshev_u(x, degree(n)),
            ChebyshevV => chebyshev_v(x, degree(n)),
            ChebyshevW => chebyshev_w(x, degree(n)),
            ShiftedChebyshevT => shifted_chebyshev_t(x, degree(n)),
            ShiftedChebyshevU => shifted_chebyshev_u(x, degree(n)),
            ShiftedChebyshevV => shifted_chebyshev_v(x, degree(n)),
            ShiftedChebyshevW => shifted_chebyshev_w(x, degree(n)),
            HermiteH => hermite_h(x, if n.is_finite() { degree(n) } else { -1 }),
            HermiteHe => hermite_he(x, degree(n)),
            LaguerreL => laguerre_l(x, degree(n)),
            LegendreP => legendre_p(x, degree(n)),
        }
    }
}

/// `static_cast<int64_t>(n)` as x86 does it: NaN and values out of range
/// become `i64::MIN` (so a polynomial of them is 0, as on CPU).
#[inline(always)]
fn degree<T: Real>(n: T) -> i64 {
    let v = n.to_f64();
    if v.is_nan() || !(-9.223_372_036_854_775_808e18..9.223_372_036_854_775_808e18).contains(&v) {
        i64::MIN
    } else {
        v as i64
    }
}

#[inline(always)]
fn int<T: Real>(k: i64) -> T {
    T::from_i64(k)
}

/// Horner's rule from zero, `((0 * z + c0) * z + c1) ...`, as ATen's loops.
#[inline(always)]
fn horner<T: Real>(z: T, coef: &[f64]) -> T {
    coef.iter().fold(T::ZERO, |s, &c| s * z + T::c(c))
}

/// Cephes `polevl`: Horner's rule from the first coefficient.
#[inline(always)]
fn polevl<T: Real>(z: T, coef: &[f64]) -> T {
    coef[1..]
        .iter()
        .fold(T::c(coef[0]), |s, &c| s * z + T::c(c))
}

/// Cephes `chbevl`: a Chebyshev series at `x`.
#[inline(always)]
fn chbevl<T: Real>(x: T, coef: &[f64]) -> T {
    let mut b0 = T::c(coef[0]);
    let mut b1 = T::ZERO;
    let mut b2 = T::ZERO;
    for &c in &coef[1..] {
        b2 = b1;
        b1 = b0;
        b0 = x * b1 - b2 + T::c(c);
    }
    T::c(0.5) * (b0 - b2)
}

fn is_f64<T: Real>() -> bool {
    T::DT == DType::F64
}

/// C's `frexp`: `x = m 2^e` with `0.5 <= |m| < 1`; zero, inf and NaN are
/// `(x, 0)`. Exact for float32 values too (their mantissa fits in f32).
pub(crate) fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let (x, bias) = if x.abs() < f64::MIN_POSITIVE {
        (x * 2f64.powi(64), 64) // subnormal: normalise first
    } else {
        (x, 0)
    };
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (m, e - bias)
}

// ---- modified Bessel functions of the first kind -------------------------------

fn i0<T: Real>(x: T) -> T {
    let x = x.abs();
    if x <= T::c(8.0) {
        x.exp() * chbevl(x / T::c(2.0) - T::c(2.0), &I0E_A)
    } else {
        x.exp() * chbevl(T::c(32.0) / x - T::c(2.0), &I0E_B) / x.sqrt()
    }
}

fn i0e<T: Real>(x: T) -> T {
    let x = x.abs();
    if x <= T::c(8.0) {
        chbevl(x / T::c(2.0) - T::c(2.0), &I0E_A)
    } else {
        chbevl(T::c(32.0) / x - T::c(2.0), &I0E_B) / x.sqrt()
    }
}

/// ATen's float tables for i1 and i1e keep only the larger coefficients.
fn i1e_tables<T: Real>() -> (&'static [f64], &'static [f64]) {
    if is_f64::<T>() {
        (&I1E_A, &I1E_B)
    } else {
        (&I1E_A[12..], &I1E_B[18..])
    }
}

fn i1<T: Real>(v: T) -> T {
    let x = v.abs();
    let (a, b) = i1e_tables::<T>();
    let r = if x <= T::c(8.0) {
        x.exp() * x * chbevl(x / T::c(2.0) - T::c(2.0), a)
    } else {
        x.exp() * chbevl(T::c(32.0) / x - T::c(2.0), b) / x.sqrt()
    };
    if v < T::ZERO {
        -r
    } else {
        r
    }
}

fn i1e<T: Real>(v: T) -> T {
    let x = v.abs();
    let (a, b) = i1e_tables::<T>();
    let r = if x <= T::c(8.0) {
        chbevl(x / T::c(2.0) - T::c(2.0), a) * x
    } else {
        chbevl(T::c(32.0) / x - T::c(2.0), b) / x.sqrt()
    };
    if v < T::ZERO {
        -r
    } else {
        r
    }
}

// ---- modified Bessel functions of the second kind -------------------------------

/// `K0(x)`, or `exp(x) K0(x)` if `scaled`.
fn k0<T: Real>(x: T, scaled: bool) -> T {
    if x == T::ZERO {
        return T::INFINITY;
    }
    if x < T::ZERO {
        return T::NAN;
    }
    if x <= T::c(2.0) {
        let r = chbevl(x * x - T::c(2.0), &K0_A) - (T::c(0.5) * x).ln() * i0(x);
        return if scaled { r * x.exp() } else { r };
    }
    let r = chbevl(T::c(8.0) / x - T::c(2.0), &K0_B) / x.sqrt();
    if scaled {
        r
    } else {
        (-x).exp() * r
    }
}

/// `K1(x)`, or `exp(x) K1(x)` if `scaled`.
fn k1<T: Real>(x: T, scaled: bool) -> T {
    if x == T::ZERO {
        return T::INFINITY;
    }
    if x < T::ZERO {
        return T::NAN;
    }
    if x <= T::c(2.0) {
        let r = (T::c(0.5) * x).ln() * modified_i1(x) + chbevl(x * x - T::c(2.0), &K1_A) / x;
        return if scaled { r * x.exp() } else { r };
    }
    let r = chbevl(T::c(8.0) / x - T::c(2.0), &K1_B) / x.sqrt();
    if scaled {
        r
    } else {
        (-x).exp() * r
    }
}

/// `special_modified_bessel_i1`'s I1: the full table in every type.
fn modified_i1<T: Real>(v: T) -> T {
    let x = v.abs();
    let r = if x <= T::c(8.0) {
        chbevl(x / T::c(2.0) - T::c(2.0), &I1E_A) * x * x.exp()
    } else {
        x.exp() * chbevl(T::c(32.0) / x - T::c(2.0), &I1E_B) / x.sqrt()
    };
    if v < T::ZERO {
        -r
    } else {
        r
    }
}

// ---- Bessel functions of the first and second kind -----------------------------

const PI_4: f64 = std::f64::consts::FRAC_PI_4;
const PI3_4: f64 = 2.356194490192344928846982537459627163;
const SQRT_2_PI: f64 = 0.797884560802865355879892119868763737;
const TWO_PI: f64 = std::f64::consts::FRAC_2_PI;

/// The asymptotic form for `x > 5`, `sin`/`cos` of `x - phase`:
/// `(P cos - 5/x Q sin)` (first kind) or `(P sin + 5/x Q cos)` (second).
#[inline(always)]
fn bessel_asymptotic<T: Real>(x: T, z: T, first: bool, phase: f64, c: [&[f64]; 4]) -> T {
    let p = horner(z, c[0]) / horner(z, c[1]);
    let q = horner(z, c[2]) / horner(z, c[3]);
    let t = x - T::c(phase);
    let five_x = T::c(5.0) / x;
    let v = if first {
        p * t.cos() - five_x * q * t.sin()
    } else {
        p * t.sin() + five_x * q * t.cos()
    };
    v * T::c(SQRT_2_PI) / x.sqrt()
}

fn bessel_j0<T: Real>(x: T) -> T {
    let x = x.abs();
    if x <= T::c(5.0) {
        let xx = x * x;
        if x < T::c(0.00001) {
            return T::ONE - xx / T::c(4.0);
        }
        let rp = horner(xx, &J0_RP);
        let rq = horner(xx, &J0_RQ);
        return (xx - T::c(5.78318596294678452118e+00))
            * (xx - T::c(3.04712623436620863991e+01))
            * rp
            / rq;
    }
    let z = T::c(25.0) / (x * x);
    bessel_asymptotic(x, z, true, PI_4, [&J0_PP, &J0_PQ, &J0_QP, &J0_QQ])
}

fn bessel_j1<T: Real>(x: T) -> T {
    if x < T::ZERO {
        return -bessel_j1(-x);
    }
    if x <= T::c(5.0) {
        let xx = x * x;
        let rp = horner(xx, &J1_RP);
        let rq = horner(xx, &J1_RQ);
        return rp / rq
            * x
            * (xx - T::c(1.46819706421238932572e+01))
            * (xx - T::c(4.92184563216946036703e+01));
    }
    let z = T::c(5.0) / x * (T::c(5.0) / x);
    bessel_asymptotic(x, z, true, PI3_4, [&J1_PP, &J1_PQ, &J1_QP, &J1_QQ])
}

fn bessel_y0<T: Real>(x: T) -> T {
    if x <= T::c(5.0) {
        if x == T::ZERO {
            return -T::INFINITY;
        }
        if x < T::ZERO {
            return T::NAN;
        }
        let xx = x * x;
        return horner(xx, &Y0_YP) / horner(xx, &Y0_YQ) + T::c(TWO_PI) * x.ln() * bessel_j0(x);
    }
    let z = T::c(25.0) / (x * x);
    bessel_asymptotic(x, z, false, PI_4, [&J0_PP, &J0_PQ, &J0_QP, &J0_QQ])
}

fn bessel_y1<T: Real>(x: T) -> T {
    if x <= T::c(5.0) {
        if x == T::ZERO {
            return -T::INFINITY;
        }
        if x <= T::ZERO {
            return T::NAN;
        }
        let xx = x * x;
        return x * (horner(xx, &Y1_YP) / horner(xx, &Y1_YQ))
            + T::c(TWO_PI) * (bessel_j1(x) * x.ln() - T::ONE / x);
    }
    let z = T::c(5.0) / x * (T::c(5.0) / x);
    bessel_asymptotic(x, z, false, PI3_4, [&J1_PP, &J1_PQ, &J1_QP, &J1_QQ])
}

fn spherical_bessel_j0<T: Real>(x: T) -> T {
    if x.is_infinite() {
        return T::ZERO;
    }
    if x.abs() < T::c(0.5) {
        let xx = x * x;
        let c = |v: f64| T::c(v);
        return T::ONE
            + xx * (c(-1.0) / c(6.0)
                + xx * (c(1.0) / c(120.0)
                    + xx * (c(-1.0) / c(5040.0)
                        + xx * (c(1.0) / c(362880.0)
                            + xx * (c(-1.0) / c(39916800.0) + xx * (c(1.0) / c(6227020800.0)))))));
    }
    x.sin() / x
}

// ---- Airy -----------------------------------------------------------------------

fn airy_ai<T: Real>(x: T) -> T {
    if x.is_infinite() {
        return T::NAN;
    }
    if x > T::c(103.892) {
        return T::ZERO;
    }
    const ISQRT_PI: f64 = 5.64189583547756286948e-01;
    if x < T::c(-2.09) {
        let zeta = T::c(-2.0) * x * (-x).sqrt() / T::c(3.0);
        let z = T::ONE / zeta;
        let zz = z * z;
        let afn = horner(zz, &AIRY_AFN);
        let afd = horner(zz, &AIRY_AFD);
        let agn = horner(zz, &AIRY_AGN);
        let agd = horner(zz, &AIRY_AGD);
        let t = zeta + T::c(0.25) * T::c(std::f64::consts::PI);
        return T::c(ISQRT_PI) / (-x).sqrt().sqrt()
            * (t.sin() * (T::ONE + z * z * afn / afd) - t.cos() * (z * agn / agd));
    }
    let mut ai = T::ZERO;
    let large = x >= T::c(2.09);
    if large {
        let zeta = T::c(2.0) * x * x.sqrt() / T::c(3.0);
        let an = horner(T::ONE / zeta, &AIRY_AN);
        let ad = horner(T::ONE / zeta, &AIRY_AD);
        ai = T::c(ISQRT_PI) * (an / ad) / (T::c(2.0) * x.sqrt().sqrt() * zeta.exp());
        if x > T::c(8.3203353) {
            return ai;
        }
    }
    // The power series f(x) - c g(x).
    let mut f = T::ONE;
    let mut g = x;
    let mut k = T::ONE;
    let mut m = T::ONE;
    let mut n = x;
    let mut t = T::ONE;
    let z = x * x * x;
    let eps = T::c(if is_f64::<T>() {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    });
    while t > eps {
        m = m * z;
        k = k + T::ONE;
        m = m / k;
        n = n * z;
        k = k + T::ONE;
        n = n / k;
        m = m / k;
        f = f + m;
        k = k + T::ONE;
        n = n / k;
        g = g + n;
        t = (m / f).abs();
    }
    if large {
        ai
    } else {
        T::c(0.355028053887817239260) * f - T::c(0.258819403792806798405) * g
    }
}

// ---- the normal distribution and erfcx --------------------------------------------

fn ndtri<T: Real>(y0: T) -> T {
    if y0 == T::ZERO {
        return -T::INFINITY;
    }
    if y0 == T::ONE {
        return T::INFINITY;
    }
    if y0 < T::ZERO || y0 > T::ONE {
        return T::NAN;
    }
    const EXP_M2: f64 = 0.13533528323661269189;
    let mut negate = true;
    let mut y = y0;
    if y > T::ONE - T::c(EXP_M2) {
        y = T::ONE - y;
        negate = false;
    }
    if y > T::c(EXP_M2) {
        let y = y - T::c(0.5);
        let y2 = y * y;
        let x = y + y * (y2 * polevl(y2, &NDTRI_P0) / polevl(y2, &NDTRI_Q0));
        return x * T::c(2.50662827463100050242E0);
    }
    let x = (T::c(-2.0) * y.ln()).sqrt();
    let x0 = x - x.ln() / x;
    let z = T::ONE / x;
    let x1 = if x < T::c(8.0) {
        z * polevl(z, &NDTRI_P1) / polevl(z, &NDTRI_Q1)
    } else {
        z * polevl(z, &NDTRI_P2) / polevl(z, &NDTRI_Q2)
    };
    let x = x0 - x1;
    if negate {
        -x
    } else {
        x
    }
}

/// erfcx in `T`: below zero ATen's `2 exp(x^2) - erfcx(-x)` in `T` (whose
/// rounding of `x^2` float32 callers see), above it [`erfcx_f64`].
fn erfcx<T: Real>(x: T) -> T {
    if x.is_nan() || x >= T::ZERO || is_f64::<T>() {
        return T::c(erfcx_f64(x.to_f64()));
    }
    if x < T::c(-26.7) {
        return T::INFINITY;
    }
    let e2 = T::c(2.0) * (x * x).exp();
    if x < T::c(-6.1) {
        e2
    } else {
        e2 - T::c(erfcx_f64(-x.to_f64()))
    }
}

/// `exp(x^2) erfc(x)`, in float64: the product where it is representable
/// (`exp` of the exactly split square), Laplace's continued fraction beyond.
pub fn erfcx_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        if x < -26.7 {
            return f64::INFINITY;
        }
        let e2 = 2.0 * exp_square(x);
        return if x < -6.1 { e2 } else { e2 - erfcx_f64(-x) };
    }
    if x < 25.0 {
        return exp_square(x) * erfc_f64(x);
    }
    const ISQRT_PI: f64 = 0.56418958354775628694807945156;
    if x > 5e7 {
        return ISQRT_PI / x;
    }
    // 1/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))).
    let mut d = x;
    for k in (1..=40).rev() {
        d = x + (k as f64 / 2.0) / d;
    }
    ISQRT_PI / d
}

/// `exp(x^2)` with `x^2` split exactly into `h + l` (so the square's
/// rounding does not become a relative error of `x^2 * eps`).
fn exp_square(x: f64) -> f64 {
    let h = x * x;
    let l = x.mul_add(x, -h);
    h.exp() * (1.0 + l)
}

/// `ln(Phi(x))`, the log of the standard normal CDF.
pub fn log_ndtr_f64(x: f64) -> f64 {
    let t = x * std::f64::consts::FRAC_1_SQRT_2;
    if x < -1.0 {
        (erfcx_f64(-t) / 2.0).ln() - t * t
    } else {
        (-erfc_f64(t) / 2.0).ln_1p()
    }
}

// ---- orthogonal polynomials (ATen's recurrences and closed forms) ---------------------

mod libm {
    extern "C" {
        pub fn acosf(x: f32) -> f32;
        pub fn cosf(x: f32) -> f32;
        pub fn sinf(x: f32) -> f32;
    }
}

/// The C library's float `acos`/`cos`/`sin` for float32 (ATen's closed
/// forms call them, and glibc's acosf is not correctly rounded: times a
/// degree in the hundreds, the difference shows); `T`'s own for float64.
#[inline(always)]
fn c_acos<T: Real>(x: T) -> T {
    if is_f64::<T>() {
        x.acos()
    } else {
        // SAFETY: a pure C math function.
        T::from_f32(unsafe { libm::acosf(x.to_f32()) })
    }
}

#[inline(always)]
fn c_cos<T: Real>(x: T) -> T {
    if is_f64::<T>() {
        x.cos()
    } else {
        // SAFETY: a pure C math function.
        T::from_f32(unsafe { libm::cosf(x.to_f32()) })
    }
}

#[inline(always)]
fn c_sin<T: Real>(x: T) -> T {
    if is_f64::<T>() {
        x.sin()
    } else {
        // SAFETY: a pure C math function.
        T::from_f32(unsafe { libm::sinf(x.to_f32()) })
    }
}

/// The three-term recurrence `r = 2y q - p` from `p = 1`, `q` for `k = 2..=n`,
/// stopping at NaN. The recurrences fuse their first product with the
/// subtraction, as the compiler contracts ATen's (`-ffp-contract=fast`):
/// at large `n` the rounding shows.
#[inline(always)]
fn chebyshev_recurrence<T: Real>(two_y: T, q: T, n: i64) -> T {
    let (mut p, mut q, mut r) = (T::ONE, q, q);
    let mut k = 2;
    while k <= n && !q.is_nan() {
        r = two_y.mul_add(q, -p);
        p = q;
        q = r;
        k += 1;
    }
    r
}

fn chebyshev_t<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    if x.abs() == T::ONE {
        return if x > T::ZERO || n % 2 == 0 {
            T::ONE
        } else {
            -T::ONE
        };
    }
    if n > 6 && x.abs() < T::ONE {
        return c_cos(int::<T>(n) * c_acos(x));
    }
    match n {
        0 => T::ONE,
        1 => x,
        _ => chebyshev_recurrence(x + x, x, n),
    }
}

fn chebyshev_u<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let n1 = int::<T>(n.wrapping_add(1));
    if x.abs() == T::ONE {
        return if x > T::ZERO || n % 2 == 0 { n1 } else { -n1 };
    }
    if n > 8 && x.abs() < T::ONE {
        let a = c_acos(x);
        if c_sin(a) != T::ZERO {
            return c_sin(n1 * a) / c_sin(a);
        }
        return n1 * c_cos(n1 * a) / x;
    }
    match n {
        0 => T::ONE,
        1 => x + x,
        _ => chebyshev_recurrence(x + x, x + x, n),
    }
}

fn chebyshev_v<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let odd_sign = |n: i64| {
        let v = int::<T>(n.wrapping_add(n).wrapping_add(1));
        if n % 2 == 0 {
            v
        } else {
            -v
        }
    };
    if x.abs() == T::ONE {
        return if x > T::ZERO { T::ONE } else { odd_sign(n) };
    }
    if n > 8 && x.abs() < T::ONE {
        let a = c_acos(x);
        if c_sin(a / T::c(2.0)) != T::ONE {
            return c_cos((int::<T>(n) + T::c(0.5)) * a) / c_cos(a / T::c(2.0));
        }
        return odd_sign(n);
    }
    match n {
        0 => T::ONE,
        1 => x + x - T::ONE,
        _ => chebyshev_recurrence(x + x, x + x - T::ONE, n),
    }
}

fn chebyshev_w<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let at_one = |x: T| {
        if x > T::ZERO {
            int::<T>(n.wrapping_add(n).wrapping_add(1))
        } else if n % 2 == 0 {
            T::ONE
        } else {
            -T::ONE
        }
    };
    if x.abs() == T::ONE {
        return at_one(x);
    }
    if n > 8 && x.abs() < T::ONE {
        let a = c_acos(x);
        if c_cos(a / T::c(2.0)) != T::ONE {
            return c_sin((int::<T>(n) + T::c(0.5)) * a) / c_sin(a / T::c(2.0));
        }
        return at_one(x);
    }
    match n {
        0 => T::ONE,
        1 => x + x + T::ONE,
        _ => chebyshev_recurrence(x + x, x + x + T::ONE, n),
    }
}

fn shifted_chebyshev_t<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    if x == T::ONE {
        return T::ONE;
    }
    if x == T::ZERO {
        return if n % 2 == 0 { T::ONE } else { -T::ONE };
    }
    let y = x + x - T::ONE;
    if n > 6 && y.abs() < T::ONE {
        return c_cos(int::<T>(n) * c_acos(y));
    }
    match n {
        0 => T::ONE,
        1 => y,
        _ => chebyshev_recurrence(y + y, y, n),
    }
}

fn shifted_chebyshev_u<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let n1 = int::<T>(n.wrapping_add(1));
    if x == T::ONE {
        return n1;
    }
    if x == T::ZERO {
        return if n % 2 == 0 { n1 } else { -n1 };
    }
    let y = x + x - T::ONE;
    if n > 6 && y.abs() < T::ONE {
        let a = c_acos(y);
        if c_sin(a) != T::ZERO {
            return c_sin(n1 * a) / c_sin(a);
        }
        return n1 * c_cos(n1 * a) / y;
    }
    match n {
        0 => T::ONE,
        1 => y + y,
        _ => chebyshev_recurrence(y + y, y + y, n),
    }
}

fn shifted_chebyshev_v<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let odd_sign = || {
        let v = int::<T>(n.wrapping_add(n).wrapping_add(1));
        if n % 2 == 0 {
            v
        } else {
            -v
        }
    };
    if x == T::ONE {
        return T::ONE;
    }
    if x == T::ZERO {
        return odd_sign();
    }
    let y = x + x - T::ONE;
    if n > 6 && y.abs() < T::ONE {
        let a = c_acos(y);
        if c_sin(a / T::c(2.0)) != T::ONE {
            return c_cos((int::<T>(n) + T::c(0.5)) * a) / c_cos(a / T::c(2.0));
        }
        return odd_sign();
    }
    match n {
        0 => T::ONE,
        1 => y + y - T::ONE,
        _ => chebyshev_recurrence(y + y, y + y - T::ONE, n),
    }
}

fn shifted_chebyshev_w<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    let parity = || if n % 2 == 0 { T::ONE } else { -T::ONE };
    if x == T::ONE {
        return int::<T>(n.wrapping_add(n).wrapping_add(1));
    }
    if x == T::ZERO {
        return parity();
    }
    let y = x + x - T::ONE;
    if n > 4 && y.abs() < T::ONE {
        let a = c_acos(y);
        if c_cos(a / T::c(2.0)) != T::ONE {
            return c_sin((int::<T>(n) + T::c(0.5)) * a) / c_sin(a / T::c(2.0));
        }
        return parity();
    }
    match n {
        0 => T::ONE,
        1 => y + y + T::ONE,
        _ => chebyshev_recurrence(y + y, y + y + T::ONE, n),
    }
}

/// ATen's degree limit of the Hermite recurrences (NaN beyond).
fn hermite_limit<T: Real>() -> i64 {
    if is_f64::<T>() {
        512
    } else {
        128
    }
}

fn hermite_h<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    match n {
        0 => return T::ONE,
        1 => return x + x,
        _ => {}
    }
    if n > hermite_limit::<T>() {
        return T::NAN;
    }
    let (mut p, mut q, mut r) = (T::ONE, x + x, T::ZERO);
    let mut k = 2;
    while k < n + n {
        r = (x + x).mul_add(q, -(int::<T>(k) * p));
        p = q;
        q = r;
        k += 2;
    }
    r
}

fn hermite_he<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    match n {
        0 => return T::ONE,
        1 => return x,
        _ => {}
    }
    if n > hermite_limit::<T>() {
        return T::NAN;
    }
    let (mut p, mut q, mut r) = (T::ONE, x, T::ZERO);
    for k in 1..n {
        r = x.mul_add(q, -(int::<T>(k) * p));
        p = q;
        q = r;
    }
    r
}

fn laguerre_l<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    if x.abs() == T::ZERO {
        return T::ONE;
    }
    match n {
        0 => return T::ONE,
        1 => return T::ONE - x,
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::ONE, T::ONE - x, T::ONE - x);
    let mut k = 1;
    while k < n && !q.is_nan() {
        r = (int::<T>(k + k) + (T::ONE - x)).mul_add(q, -(int::<T>(k) * p)) / int::<T>(k + 1);
        p = q;
        q = r;
        k += 1;
    }
    r
}

fn legendre_p<T: Real>(x: T, n: i64) -> T {
    if n < 0 {
        return T::ZERO;
    }
    if x.abs() == T::ONE {
        return if x > T::ZERO || n % 2 == 0 {
            T::ONE
        } else {
            -T::ONE
        };
    }
    match n {
        0 => return T::ONE,
        1 => return x,
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::ONE, x, x);
    let mut k = 1;
    while k < n && !q.is_nan() {
        r = (int::<T>(k + k + 1) * x).mul_add(q, -(int::<T>(k) * p)) / int::<T>(k + 1);
        p = q;
        q = r;
        k += 1;
    }
    r
}

/// `nextafter(x, y)`: the float next to `x` towards `y` (in `T`'s own
/// format; float16 and bfloat16 go through [`next_after_16`]).
#[inline(always)]
pub(crate) fn next_after<T: Real>(x: T, y: T) -> T {
    if x.is_nan() || y.is_nan() {
        return x + y;
    }
    if x == y {
        return y;
    }
    T::c(if is_f64::<T>() {
        next_after_f64(x.to_f64(), y.to_f64())
    } else {
        next_after_f32(x.to_f32(), y.to_f32()) as f64
    })
}

fn next_after_f64(x: f64, y: f64) -> f64 {
    if x == 0.0 {
        return f64::from_bits(1).copysign(y);
    }
    let b = x.to_bits();
    let up = (y > x) == (x > 0.0);
    f64::from_bits(if up { b + 1 } else { b - 1 })
}

fn next_after_f32(x: f32, y: f32) -> f32 {
    if x == 0.0 {
        return f32::from_bits(1).copysign(y);
    }
    let b = x.to_bits();
    let up = (y > x) == (x > 0.0);
    f32::from_bits(if up { b + 1 } else { b - 1 })
}

/// `nextafter` on the 16 bits of a float16 (`bf16 == false`) or bfloat16,
/// given and returned as float32 (exact in both directions).
pub(crate) fn next_after_16(x: f32, y: f32, bf16: bool) -> f32 {
    use super::half_bits::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
    if x.is_nan() || y.is_nan() {
        return x + y;
    }
    if x == y {
        return y;
    }
    type Bits = fn(f32) -> u16;
    type Value = fn(u16) -> f32;
    let (to, from): (Bits, Value) = if bf16 {
        (f32_to_bf16_bits, bf16_bits_to_f32)
    } else {
        (f32_to_f16_bits, f16_bits_to_f32)
    };
    if x == 0.0 {
        return from(1).copysign(y);
    }
    let b = to(x);
    let up = (y > x) == (x > 0.0);
    from(if up { b + 1 } else { b - 1 })
}

const AIRY_AN: [f64; 8] = [
    3.46538101525629032477e-01,
    1.20075952739645805542e+01,
    7.62796053615234516538e+01,
    1.68089224934630576269e+02,
    1.59756391350164413639e+02,
    7.05360906840444183113e+01,
    1.40264691163389668864e+01,
    9.99999999999999995305e-01,
];

const AIRY_AD: [f64; 8] = [
    5.67594532638770212846e-01,
    1.47562562584847203173e+01,
    8.45138970141474626562e+01,
    1.77318088145400459522e+02,
    1.64234692871529701831e+02,
    7.14778400825575695274e+01,
    1.40959135607834029598e+01,
    1.00000000000000000470e+00,
];

const AIRY_AFN: [f64; 9] = [
    -1.31696323418331795333e-01,
    -6.26456544431912369773e-01,
    -6.93158036036933542233e-01,
    -2.79779981545119124951e-01,
    -4.91900132609500318020e-02,
    -4.06265923594885404393e-03,
    -1.59276496239262096340e-04,
    -2.77649108155232920844e-06,
    -1.67787698489114633780e-08,
];

const AIRY_AFD: [f64; 9] = [
    1.33560420706553243746e+01,
    3.26825032795224613948e+01,
    2.67367040941499554804e+01,
    9.18707402907259625840e+00,
    1.47529146771666414581e+00,
    1.15687173795188044134e-01,
    4.40291641615211203805e-03,
    7.54720348287414296618e-05,
    4.51850092970580378464e-07,
];

const AIRY_AGN: [f64; 11] = [
    1.97339932091685679179e-02,
    3.91103029615688277255e-01,
    1.06579897599595591108e+00,
    9.39169229816650230044e-01,
    3.51465656105547619242e-01,
    6.33888919628925490927e-02,
    5.85804113048388458567e-03,
    2.82851600836737019778e-04,
    6.98793669997260967291e-06,
    8.11789239554389293311e-08,
    3.41551784765923618484e-10,
];

const AIRY_AGD: [f64; 10] = [
    9.30892908077441974853e+00,
    1.98352928718312140417e+01,
    1.55646628932864612953e+01,
    5.47686069422975497931e+00,
    9.54293611618961883998e-01,
    8.64580826352392193095e-02,
    4.12656523824222607191e-03,
    1.01259085116509135510e-04,
    1.17166733214413521882e-06,
    4.91834570062930015649e-09,
];

const J0_PP: [f64; 7] = [
    7.96936729297347051624e-04,
    8.28352392107440799803e-02,
    1.23953371646414299388e+00,
    5.44725003058768775090e+00,
    8.74716500199817011941e+00,
    5.30324038235394892183e+00,
    9.99999999999999997821e-01,
];

const J0_PQ: [f64; 7] = [
    9.24408810558863637013e-04,
    8.56288474354474431428e-02,
    1.25352743901058953537e+00,
    5.47097740330417105182e+00,
    8.76190883237069594232e+00,
    5.30605288235394617618e+00,
    1.00000000000000000218e+00,
];

const J0_QP: [f64; 8] = [
    -1.13663838898469149931e-02,
    -1.28252718670509318512e+00,
    -1.95539544257735972385e+01,
    -9.32060152123768231369e+01,
    -1.77681167980488050595e+02,
    -1.47077505154951170175e+02,
    -5.14105326766599330220e+01,
    -6.05014350600728481186e+00,
];

const J0_QQ: [f64; 7] = [
    6.43178256118178023184e+01,
    8.56430025976980587198e+02,
    3.88240183605401609683e+03,
    7.24046774195652478189e+03,
    5.93072701187316984827e+03,
    2.06209331660327847417e+03,
    2.42005740240291393179e+02,
];

const J0_RP: [f64; 4] = [
    -4.79443220978201773821e+09,
    1.95617491946556577543e+12,
    -2.49248344360967716204e+14,
    9.70862251047306323952e+15,
];

const J0_RQ: [f64; 8] = [
    4.99563147152651017219e+02,
    1.73785401676374683123e+05,
    4.84409658339962045305e+07,
    1.11855537045356834862e+10,
    2.11277520115489217587e+12,
    3.10518229857422583814e+14,
    3.18121955943204943306e+16,
    1.71086294081043136091e+18,
];

const J1_PP: [f64; 7] = [
    7.62125616208173112003e-04,
    7.31397056940917570436e-02,
    1.12719608129684925192e+00,
    5.11207951146807644818e+00,
    8.42404590141772420927e+00,
    5.21451598682361504063e+00,
    1.00000000000000000254e+00,
];

const J1_PQ: [f64; 7] = [
    5.71323128072548699714e-04,
    6.88455908754495404082e-02,
    1.10514232634061696926e+00,
    5.07386386128601488557e+00,
    8.39985554327604159757e+00,
    5.20982848682361821619e+00,
    9.99999999999999997461e-01,
];

const J1_QP: [f64; 8] = [
    5.10862594750176621635e-02,
    4.98213872951233449420e+00,
    7.58238284132545283818e+01,
    3.66779609360150777800e+02,
    7.10856304998926107277e+02,
    5.97489612400613639965e+02,
    2.11688757100572135698e+02,
    2.52070205858023719784e+01,
];

const J1_QQ: [f64; 7] = [
    7.42373277035675149943e+01,
    1.05644886038262816351e+03,
    4.98641058337653607651e+03,
    9.56231892404756170795e+03,
    7.99704160447350683650e+03,
    2.82619278517639096600e+03,
    3.36093607810698293419e+02,
];

const J1_RP: [f64; 4] = [
    -8.99971225705559398224e+08,
    4.52228297998194034323e+11,
    -7.27494245221818276015e+13,
    3.68295732863852883286e+15,
];

const J1_RQ: [f64; 8] = [
    6.20836478118054335476e+02,
    2.56987256757748830383e+05,
    8.35146791431949253037e+07,
    2.21511595479792499675e+10,
    4.74914122079991414898e+12,
    7.84369607876235854894e+14,
    8.95222336184627338078e+16,
    5.32278620332680085395e+18,
];

const Y0_YP: [f64; 8] = [
    1.55924367855235737965e+04,
    -1.46639295903971606143e+07,
    5.43526477051876500413e+09,
    -9.82136065717911466409e+11,
    8.75906394395366999549e+13,
    -3.46628303384729719441e+15,
    4.42733268572569800351e+16,
    -1.84950800436986690637e+16,
];

const Y0_YQ: [f64; 7] = [
    1.04128353664259848412e+03,
    6.26107330137134956842e+05,
    2.68919633393814121987e+08,
    8.64002487103935000337e+10,
    2.02979612750105546709e+13,
    3.17157752842975028269e+15,
    2.50596256172653059228e+17,
];

const Y1_YP: [f64; 6] = [
    1.26320474790178026440e+09,
    -6.47355876379160291031e+11,
    1.14509511541823727583e+14,
    -8.12770255501325109621e+15,
    2.02439475713594898196e+17,
    -7.78877196265950026825e+17,
];

const Y1_YQ: [f64; 8] = [
    5.94301592346128195359e+02,
    2.35564092943068577943e+05,
    7.34811944459721705660e+07,
    1.87601316108706159478e+10,
    3.88231277496238566008e+12,
    6.20557727146953693363e+14,
    6.87141087355300489866e+16,
    3.97270608116560655612e+18,
];

const K0_A: [f64; 10] = [
    1.37446543561352307156e-16,
    4.25981614279661018399e-14,
    1.03496952576338420167e-11,
    1.90451637722020886025e-09,
    2.53479107902614945675e-07,
    2.28621210311945178607e-05,
    1.26461541144692592338e-03,
    3.59799365153615016266e-02,
    3.44289899924628486886e-01,
    -5.35327393233902768720e-01,
];

const K0_B: [f64; 25] = [
    5.30043377268626276149e-18,
    -1.64758043015242134646e-17,
    5.21039150503902756861e-17,
    -1.67823109680541210385e-16,
    5.51205597852431940784e-16,
    -1.84859337734377901440e-15,
    6.34007647740507060557e-15,
    -2.22751332699166985548e-14,
    8.03289077536357521100e-14,
    -2.98009692317273043925e-13,
    1.14034058820847496303e-12,
    -4.51459788337394416547e-12,
    1.85594911495471785253e-11,
    -7.95748924447710747776e-11,
    3.57739728140030116597e-10,
    -1.69753450938905987466e-09,
    8.57403401741422608519e-09,
    -4.66048989768794782956e-08,
    2.76681363944501510342e-07,
    -1.83175552271911948767e-06,
    1.39498137188764993662e-05,
    -1.28495495816278026384e-04,
    1.56988388573005337491e-03,
    -3.14481013119645005427e-02,
    2.44030308206595545468e+00,
];

const K1_A: [f64; 11] = [
    -7.02386347938628759343e-18,
    -2.42744985051936593393e-15,
    -6.66690169419932900609e-13,
    -1.41148839263352776110e-10,
    -2.21338763073472585583e-08,
    -2.43340614156596823496e-06,
    -1.73028895751305206302e-04,
    -6.97572385963986435018e-03,
    -1.22611180822657148235e-01,
    -3.53155960776544875667e-01,
    1.52530022733894777053e+00,
];

const K1_B: [f64; 25] = [
    -5.75674448366501715755e-18,
    1.79405087314755922667e-17,
    -5.68946255844285935196e-17,
    1.83809354436663880070e-16,
    -6.05704724837331885336e-16,
    2.03870316562433424052e-15,
    -7.01983709041831346144e-15,
    2.47715442448130437068e-14,
    -8.97670518232499435011e-14,
    3.34841966607842919884e-13,
    -1.28917396095102890680e-12,
    5.13963967348173025100e-12,
    -2.12996783842756842877e-11,
    9.21831518760500529508e-11,
    -4.19035475934189648750e-10,
    2.01504975519703286596e-09,
    -1.03457624656780970260e-08,
    5.74108412545004946722e-08,
    -3.50196060308781257119e-07,
    2.40648494783721712015e-06,
    -1.93619797416608296024e-05,
    1.95215518471351631108e-04,
    -2.85781685962277938680e-03,
    1.03923736576817238437e-01,
    2.72062619048444266945e+00,
];

const NDTRI_P0: [f64; 5] = [
    -5.99633501014107895267E1,
    9.80010754185999661536E1,
    -5.66762857469070293439E1,
    1.39312609387279679503E1,
    -1.23916583867381258016E0,
];

const NDTRI_Q0: [f64; 9] = [
    1.00000000000000000000E0,
    1.95448858338141759834E0,
    4.67627912898881538453E0,
    8.63602421390890590575E1,
    -2.25462687854119370527E2,
    2.00260212380060660359E2,
    -8.20372256168333339912E1,
    1.59056225126211695515E1,
    -1.18331621121330003142E0,
];

const NDTRI_P1: [f64; 9] = [
    4.05544892305962419923E0,
    3.15251094599893866154E1,
    5.71628192246421288162E1,
    4.40805073893200834700E1,
    1.46849561928858024014E1,
    2.18663306850790267539E0,
    -1.40256079171354495875E-1,
    -3.50424626827848203418E-2,
    -8.57456785154685413611E-4,
];

const NDTRI_Q1: [f64; 9] = [
    1.00000000000000000000E0,
    1.57799883256466749731E1,
    4.53907635128879210584E1,
    4.13172038254672030440E1,
    1.50425385692907503408E1,
    2.50464946208309415979E0,
    -1.42182922854787788574E-1,
    -3.80806407691578277194E-2,
    -9.33259480895457427372E-4,
];

const NDTRI_P2: [f64; 9] = [
    3.23774891776946035970E0,
    6.91522889068984211695E0,
    3.93881025292474443415E0,
    1.33303460815807542389E0,
    2.01485389549179081538E-1,
    1.23716634817820021358E-2,
    3.01581553508235416007E-4,
    2.65806974686737550832E-6,
    6.23974539184983293730E-9,
];

const NDTRI_Q2: [f64; 9] = [
    1.00000000000000000000E0,
    6.02427039364742014255E0,
    3.67983563856160859403E0,
    1.37702099489081330271E0,
    2.16236993594496635890E-1,
    1.34204006088543189037E-2,
    3.28014464682127739104E-4,
    2.89247864745380683936E-6,
    6.79019408009981274425E-9,
];

const I0E_A: [f64; 30] = [
    -4.41534164647933937950E-18,
    3.33079451882223809783E-17,
    -2.43127984654795469359E-16,
    1.71539128555513303061E-15,
    -1.16853328779934516808E-14,
    7.67618549860493561688E-14,
    -4.85644678311192946090E-13,
    2.95505266312963983461E-12,
    -1.72682629144155570723E-11,
    9.67580903537323691224E-11,
    -5.18979560163526290666E-10,
    2.65982372468238665035E-9,
    -1.30002500998624804212E-8,
    6.04699502254191894932E-8,
    -2.67079385394061173391E-7,
    1.11738753912010371815E-6,
    -4.41673835845875056359E-6,
    1.64484480707288970893E-5,
    -5.75419501008210370398E-5,
    1.88502885095841655729E-4,
    -5.76375574538582365885E-4,
    1.63947561694133579842E-3,
    -4.32430999505057594430E-3,
    1.05464603945949983183E-2,
    -2.37374148058994688156E-2,
    4.93052842396707084878E-2,
    -9.49010970480476444210E-2,
    1.71620901522208775349E-1,
    -3.04682672343198398683E-1,
    6.76795274409476084995E-1,
];

const I0E_B: [f64; 25] = [
    -7.23318048787475395456E-18,
    -4.83050448594418207126E-18,
    4.46562142029675999901E-17,
    3.46122286769746109310E-17,
    -2.82762398051658348494E-16,
    -3.42548561967721913462E-16,
    1.77256013305652638360E-15,
    3.81168066935262242075E-15,
    -9.55484669882830764870E-15,
    -4.15056934728722208663E-14,
    1.54008621752140982691E-14,
    3.85277838274214270114E-13,
    7.18012445138366623367E-13,
    -1.79417853150680611778E-12,
    -1.32158118404477131188E-11,
    -3.14991652796324136454E-11,
    1.18891471078464383424E-11,
    4.94060238822496958910E-10,
    3.39623202570838634515E-9,
    2.26666899049817806459E-8,
    2.04891858946906374183E-7,
    2.89137052083475648297E-6,
    6.88975834691682398426E-5,
    3.36911647825569408990E-3,
    8.04490411014108831608E-1,
];

const I1E_A: [f64; 29] = [
    2.77791411276104639959E-18,
    -2.11142121435816608115E-17,
    1.55363195773620046921E-16,
    -1.10559694773538630805E-15,
    7.60068429473540693410E-15,
    -5.04218550472791168711E-14,
    3.22379336594557470981E-13,
    -1.98397439776494371520E-12,
    1.17361862988909016308E-11,
    -6.66348972350202774223E-11,
    3.62559028155211703701E-10,
    -1.88724975172282928790E-9,
    9.38153738649577178388E-9,
    -4.44505912879632808065E-8,
    2.00329475355213526229E-7,
    -8.56872026469545474066E-7,
    3.47025130813767847674E-6,
    -1.32731636560394358279E-5,
    4.78156510755005422638E-5,
    -1.61760815825896745588E-4,
    5.12285956168575772895E-4,
    -1.51357245063125314899E-3,
    4.15642294431288815669E-3,
    -1.05640848946261981558E-2,
    2.47264490306265168283E-2,
    -5.29459812080949914269E-2,
    1.02643658689847095384E-1,
    -1.76416518357834055153E-1,
    2.52587186443633654823E-1,
];

const I1E_B: [f64; 25] = [
    7.51729631084210481353E-18,
    4.41434832307170791151E-18,
    -4.65030536848935832153E-17,
    -3.20952592199342395980E-17,
    2.96262899764595013876E-16,
    3.30820231092092828324E-16,
    -1.88035477551078244854E-15,
    -3.81440307243700780478E-15,
    1.04202769841288027642E-14,
    4.27244001671195135429E-14,
    -2.10154184277266431302E-14,
    -4.08355111109219731823E-13,
    -7.19855177624590851209E-13,
    2.03562854414708950722E-12,
    1.41258074366137813316E-11,
    3.25260358301548823856E-11,
    -1.89749581235054123450E-11,
    -5.58974346219658380687E-10,
    -3.83538038596423702205E-9,
    -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,
    -3.88256480887769039346E-6,
    -1.10588938762623716291E-4,
    -9.76109749136146840777E-3,
    7.78576235018280120474E-1,
];

// ---- the regularized incomplete gamma functions ----------------------------------------
//
// ATen's igamma/igammac (SciPy's gammainc/gammaincc: Cephes igam/igamc with
// Temme's asymptotic expansion and Boost's Lanczos sum), in `T`.

fn machep<T: Real>() -> T {
    T::c(if is_f64::<T>() {
        1.11022302462515654042E-16
    } else {
        5.9604644775390625E-8
    })
}

const IGAM_MAXITER: i32 = 2000;

/// `num(x) / den(x)` (coefficients highest power first), evaluated in `1/x`
/// for `|x| > 1`.
fn ratevl<T: Real>(x: T, num: &[f64], den: &[f64]) -> T {
    if x.abs() > T::ONE {
        let y = T::ONE / x;
        let rev = |c: &[f64]| {
            c.iter()
                .rev()
                .skip(1)
                .fold(T::c(c[c.len() - 1]), |s, &v| s * y + T::c(v))
        };
        let k = den.len() as i32 - num.len() as i32;
        x.powf(T::c(k as f64)) * rev(num) / rev(den)
    } else {
        polevl(x, num) / polevl(x, den)
    }
}

/// `x^a e^-x / Gamma(a)`.
fn igam_fac<T: Real>(a: T, x: T) -> T {
    let maxlog = T::c(if is_f64::<T>() {
        7.09782712893383996843E2
    } else {
        88.72283905206835
    });
    const LANCZOS_G: f64 = 6.024680040776729583740234375;
    if (a - x).abs() > T::c(0.4) * a.abs() {
        let ax = a * x.ln() - x - a.lgamma();
        return if ax < -maxlog { T::ZERO } else { ax.exp() };
    }
    let fac = a + T::c(LANCZOS_G) - T::c(0.5);
    let mut res =
        (fac / T::c(std::f64::consts::E)).sqrt() / ratevl(a, &LANCZOS_NUM, &LANCZOS_DENOM);
    if a < T::c(200.0) && x < T::c(200.0) {
        res = res * (a - x).exp() * (x / fac).powf(a);
    } else {
        let num = x - a - T::c(LANCZOS_G) + T::c(0.5);
        let numfac = num / fac;
        res = res * (a * (numfac.ln1p() - numfac) + x * (T::c(0.5) - T::c(LANCZOS_G)) / fac).exp();
    }
    res
}

/// igamma by its power series (DLMF 8.11.4).
fn igam_series<T: Real>(a: T, x: T) -> T {
    let ax = igam_fac(a, x);
    if ax == T::ZERO {
        return T::ZERO;
    }
    let (mut r, mut c, mut ans) = (a, T::ONE, T::ONE);
    for _ in 0..IGAM_MAXITER {
        r = r + T::ONE;
        c = c * (x / r);
        ans = ans + c;
        if c <= machep::<T>() * ans {
            break;
        }
    }
    ans * ax / a
}

/// igammac by DLMF 8.7.3 (small x).
fn igamc_series<T: Real>(a: T, x: T) -> T {
    let (mut fac, mut sum) = (T::ONE, T::ZERO);
    for n in 1..IGAM_MAXITER {
        let nt = T::from_i64(n as i64);
        fac = fac * (-x / nt);
        let term = fac / (a + nt);
        sum = sum + term;
        if term.abs() <= machep::<T>() * sum.abs() {
            break;
        }
    }
    let logx = x.ln();
    let term = -(a * logx - (T::ONE + a).lgamma()).expm1();
    term - (a * logx - a.lgamma()).exp() * sum
}

/// igamma (`lower`) or igammac for large `a` near `x` (DLMF 8.12.3/8.12.4).
fn igam_asymptotic<T: Real>(a: T, x: T, lower: bool) -> T {
    let eps = machep::<T>();
    let lambda = x / a;
    let sigma = (x - a) / a;
    let sgn = if lower { -T::ONE } else { T::ONE };
    let root = (T::c(-2.0) * (sigma.ln1p() - sigma)).sqrt();
    let eta = if lambda > T::ONE {
        root
    } else if lambda < T::ONE {
        -root
    } else {
        T::ZERO
    };
    let res = T::c(0.5) * (sgn * eta * (a / T::c(2.0)).sqrt()).erfc();
    let mut etapow = [T::ZERO; 25];
    etapow[0] = T::ONE;
    let mut maxpow = 0;
    let (mut sum, mut afac, mut absoldterm) = (T::ZERO, T::ONE, T::INFINITY);
    for d in IGAM_D.iter() {
        let mut ck = T::c(d[0]);
        for n in 1..25 {
            if n > maxpow {
                etapow[n] = eta * etapow[n - 1];
                maxpow += 1;
            }
            let ckterm = T::c(d[n]) * etapow[n];
            ck = ck + ckterm;
            if ckterm.abs() < eps * ck.abs() {
                break;
            }
        }
        let term = ck * afac;
        let absterm = term.abs();
        if absterm > absoldterm {
            break;
        }
        sum = sum + term;
        if absterm < eps * sum.abs() {
            break;
        }
        absoldterm = absterm;
        afac = afac / a;
    }
    // ATen's 2 pi is float32's pi, in every type.
    let two_pi = T::c(2.0 * std::f32::consts::PI as f64);
    res + sgn * (T::c(-0.5) * a * eta * eta).exp() * sum / (two_pi * a).sqrt()
}

/// igammac by its continued fraction (DLMF 8.9.2).
fn igamc_fraction<T: Real>(a: T, x: T) -> T {
    let ax = igam_fac(a, x);
    if ax == T::ZERO {
        return T::ZERO;
    }
    let (big, biginv) = if is_f64::<T>() {
        (T::c(4.503599627370496e15), T::c(2.22044604925031308085e-16))
    } else {
        (T::c(16777216.0), T::c(5.9604644775390625E-8))
    };
    let mut y = T::ONE - a;
    let mut z = x + y + T::ONE;
    let mut c = T::ZERO;
    let (mut pkm2, mut qkm2, mut pkm1, mut qkm1) = (T::ONE, x, x + T::ONE, z * x);
    let mut ans = pkm1 / qkm1;
    for _ in 0..IGAM_MAXITER {
        c = c + T::ONE;
        y = y + T::ONE;
        z = z + T::c(2.0);
        let yc = y * c;
        let pk = pkm1 * z - pkm2 * yc;
        let qk = qkm1 * z - qkm2 * yc;
        let t = if qk != T::ZERO {
            let r = pk / qk;
            let t = ((ans - r) / r).abs();
            ans = r;
            t
        } else {
            T::ONE
        };
        pkm2 = pkm1;
        pkm1 = pk;
        qkm2 = qkm1;
        qkm1 = qk;
        if pk.abs() > big {
            pkm2 = pkm2 * biginv;
            pkm1 = pkm1 * biginv;
            qkm2 = qkm2 * biginv;
            qkm1 = qkm1 * biginv;
        }
        if t <= machep::<T>() {
            break;
        }
    }
    ans * ax
}

/// Whether `(a, x)` is in the regime of the asymptotic expansion.
fn igam_asymptotic_regime<T: Real>(a: T, x: T) -> bool {
    let r = (x - a).abs() / a;
    (a > T::c(20.0) && a < T::c(200.0) && r < T::c(0.3))
        || (a > T::c(200.0) && r < T::c(4.5) / a.sqrt())
}

/// The regularized lower incomplete gamma function `P(a, x)` (`igamma`).
pub(crate) fn igamma<T: Real>(a: T, x: T) -> T {
    if x < T::ZERO || a < T::ZERO {
        return T::NAN;
    }
    if a == T::ZERO {
        return if x > T::ZERO { T::ONE } else { T::NAN };
    }
    if x == T::ZERO {
        return T::ZERO;
    }
    if a.is_infinite() {
        return if x.is_infinite() { T::NAN } else { T::ZERO };
    }
    if x.is_infinite() {
        return T::ONE;
    }
    if igam_asymptotic_regime(a, x) {
        return igam_asymptotic(a, x, true);
    }
    if x > T::ONE && x > a {
        return T::ONE - igammac(a, x);
    }
    igam_series(a, x)
}

/// The regularized upper incomplete gamma function `Q(a, x)` (`igammac`).
pub(crate) fn igammac<T: Real>(a: T, x: T) -> T {
    if x < T::ZERO || a < T::ZERO {
        return T::NAN;
    }
    if a == T::ZERO {
        return if x > T::ZERO { T::ZERO } else { T::NAN };
    }
    if x == T::ZERO {
        return T::ONE;
    }
    if a.is_infinite() {
        return if x.is_infinite() { T::NAN } else { T::ONE };
    }
    if x.is_infinite() {
        return T::ZERO;
    }
    if igam_asymptotic_regime(a, x) {
        return igam_asymptotic(a, x, false);
    }
    let lower_series = if x > T::c(1.1) {
        x < a
    } else if x <= T::c(0.5) {
        T::c(-0.4) / x.ln() < a
    } else {
        x * T::c(1.1) < a
    };
    if lower_series {
        T::ONE - igam_series(a, x)
    } else if x > T::c(1.1) {
        igamc_fraction(a, x)
    } else {
        igamc_series(a, x)
    }
}

/// The coefficients `d[k][n]` of DLMF 8.12 (Temme's uniform asymptotic
/// expansion of the incomplete gamma functions, as Cephes/SciPy tabulate them).
const IGAM_D: [[f64; 25]; 25] = [
    [
        -3.3333333333333333e-1,
        8.3333333333333333e-2,
        -1.4814814814814815e-2,
        1.1574074074074074e-3,
        3.527336860670194e-4,
        -1.7875514403292181e-4,
        3.9192631785224378e-5,
        -2.1854485106799922e-6,
        -1.85406221071516e-6,
        8.296711340953086e-7,
        -1.7665952736826079e-7,
        6.7078535434014986e-9,
        1.0261809784240308e-8,
        -4.3820360184533532e-9,
        9.1476995822367902e-10,
        -2.551419399494625e-11,
        -5.8307721325504251e-11,
        2.4361948020667416e-11,
        -5.0276692801141756e-12,
        1.1004392031956135e-13,
        3.3717632624009854e-13,
        -1.3923887224181621e-13,
        2.8534893807047443e-14,
        -5.1391118342425726e-16,
        -1.9752288294349443e-15,
    ],
    [
        -1.8518518518518519e-3,
        -3.4722222222222222e-3,
        2.6455026455026455e-3,
        -9.9022633744855967e-4,
        2.0576131687242798e-4,
        -4.0187757201646091e-7,
        -1.8098550334489978e-5,
        7.6491609160811101e-6,
        -1.6120900894563446e-6,
        4.6471278028074343e-9,
        1.378633446915721e-7,
        -5.752545603517705e-8,
        1.1951628599778147e-8,
        -1.7543241719747648e-11,
        -1.0091543710600413e-9,
        4.1627929918425826e-10,
        -8.5639070264929806e-11,
        6.0672151016047586e-14,
        7.1624989648114854e-12,
        -2.9331866437714371e-12,
        5.9966963656836887e-13,
        -2.1671786527323314e-16,
        -4.9783399723692616e-14,
        2.0291628823713425e-14,
        -4.13125571381061e-15,
    ],
    [
        4.1335978835978836e-3,
        -2.6813271604938272e-3,
        7.7160493827160494e-4,
        2.0093878600823045e-6,
        -1.0736653226365161e-4,
        5.2923448829120125e-5,
        -1.2760635188618728e-5,
        3.4235787340961381e-8,
        1.3721957309062933e-6,
        -6.298992138380055e-7,
        1.4280614206064242e-7,
        -2.0477098421990866e-10,
        -1.4092529910867521e-8,
        6.228974084922022e-9,
        -1.3670488396617113e-9,
        9.4283561590146782e-13,
        1.2872252400089318e-10,
        -5.5645956134363321e-11,
        1.1975935546366981e-11,
        -4.1689782251838635e-15,
        -1.0940640427884594e-12,
        4.6622399463901357e-13,
        -9.905105763906906e-14,
        1.8931876768373515e-17,
        8.8592218725911273e-15,
    ],
    [
        6.4943415637860082e-4,
        2.2947209362139918e-4,
        -4.6918949439525571e-4,
        2.6772063206283885e-4,
        -7.5618016718839764e-5,
        -2.3965051138672967e-7,
        1.1082654115347302e-5,
        -5.6749528269915966e-6,
        1.4230900732435884e-6,
        -2.7861080291528142e-11,
        -1.6958404091930277e-7,
        8.0994649053880824e-8,
        -1.9111168485973654e-8,
        2.3928620439808118e-12,
        2.0620131815488798e-9,
        -9.4604966618551322e-10,
        2.1541049775774908e-10,
        -1.388823336813903e-14,
        -2.1894761681963939e-11,
        9.7909989511716851e-12,
        -2.1782191880180962e-12,
        6.2088195734079014e-17,
        2.126978363279737e-13,
        -9.3446887915174333e-14,
        2.0453671226782849e-14,
    ],
    [
        -8.618882909167117e-4,
        7.8403922172006663e-4,
        -2.9907248030319018e-4,
        -1.4638452578843418e-6,
        6.6414982154651222e-5,
        -3.9683650471794347e-5,
        1.1375726970678419e-5,
        2.5074972262375328e-10,
        -1.6954149536558306e-6,
        8.9075075322053097e-7,
        -2.2929348340008049e-7,
        2.956794137544049e-11,
        2.8865829742708784e-8,
        -1.4189739437803219e-8,
        3.4463580499464897e-9,
        -2.3024517174528067e-13,
        -3.9409233028046405e-10,
        1.8602338968504502e-10,
        -4.356323005056618e-11,
        1.2786001016296231e-15,
        4.6792750266579195e-12,
        -2.1492464706134829e-12,
        4.9088156148096522e-13,
        -6.3385914848915603e-18,
        -5.0453320690800944e-14,
    ],
    [
        -3.3679855336635815e-4,
        -6.9728137583658578e-5,
        2.7727532449593921e-4,
        -1.9932570516188848e-4,
        6.7977804779372078e-5,
        1.419062920643967e-7,
        -1.3594048189768693e-5,
        8.0184702563342015e-6,
        -2.2914811765080952e-6,
        -3.252473551298454e-10,
        3.4652846491085265e-7,
        -1.8447187191171343e-7,
        4.8240967037894181e-8,
        -1.7989466721743515e-14,
        -6.3061945000135234e-9,
        3.1624176287745679e-9,
        -7.8409242536974293e-10,
        5.1926791652540407e-15,
        9.3589442423067836e-11,
        -4.5134262161632782e-11,
        1.0799129993116827e-11,
        -3.661886712685252e-17,
        -1.210902069055155e-12,
        5.6807435849905643e-13,
        -1.3249659916340829e-13,
    ],
    [
        5.3130793646399222e-4,
        -5.9216643735369388e-4,
        2.7087820967180448e-4,
        7.9023532326603279e-7,
        -8.1539693675619688e-5,
        5.6116827531062497e-5,
        -1.8329116582843376e-5,
        -3.0796134506033048e-9,
        3.4651553688036091e-6,
        -2.0291327396058604e-6,
        5.7887928631490037e-7,
        2.338630673826657e-13,
        -8.8286007463304835e-8,
        4.7435958880408128e-8,
        -1.2545415020710382e-8,
        8.6496488580102925e-14,
        1.6846058979264063e-9,
        -8.5754928235775947e-10,
        2.1598224929232125e-10,
        -7.6132305204761539e-16,
        -2.6639822008536144e-11,
        1.3065700536611057e-11,
        -3.1799163902367977e-12,
        4.7109761213674315e-18,
        3.6902800842763467e-13,
    ],
    [
        3.4436760689237767e-4,
        5.1717909082605922e-5,
        -3.3493161081142236e-4,
        2.812695154763237e-4,
        -1.0976582244684731e-4,
        -1.2741009095484485e-7,
        2.7744451511563644e-5,
        -1.8263488805711333e-5,
        5.7876949497350524e-6,
        4.9387589339362704e-10,
        -1.0595367014026043e-6,
        6.1667143761104075e-7,
        -1.7562973359060462e-7,
        -1.2974473287015439e-12,
        2.695423606288966e-8,
        -1.4578352908731271e-8,
        3.887645959386175e-9,
        -3.8810022510194121e-17,
        -5.3279941738772867e-10,
        2.7437977643314845e-10,
        -6.9957960920705679e-11,
        2.5899863874868481e-17,
        8.8566890996696381e-12,
        -4.403168815871311e-12,
        1.0865561947091654e-12,
    ],
    [
        -6.5262391859530942e-4,
        8.3949872067208728e-4,
        -4.3829709854172101e-4,
        -6.969091458420552e-7,
        1.6644846642067548e-4,
        -1.2783517679769219e-4,
        4.6299532636913043e-5,
        4.5579098679227077e-9,
        -1.0595271125805195e-5,
        6.7833429048651666e-6,
        -2.1075476666258804e-6,
        -1.7213731432817145e-11,
        3.7735877416110979e-7,
        -2.1867506700122867e-7,
        6.2202288040189269e-8,
        6.5977038267330006e-16,
        -9.5903864974256858e-9,
        5.2132144922808078e-9,
        -1.3991589583935709e-9,
        5.382058999060575e-16,
        1.9484714275467745e-10,
        -1.0127287556389682e-10,
        2.6077347197254926e-11,
        -5.0904186999932993e-18,
        -3.3721464474854592e-12,
    ],
    [
        -5.9676129019274625e-4,
        -7.2048954160200106e-5,
        6.7823088376673284e-4,
        -6.4014752602627585e-4,
        2.7750107634328704e-4,
        1.8197008380465151e-7,
        -8.4795071170685032e-5,
        6.105192082501531e-5,
        -2.1073920183404862e-5,
        -8.8585890141255994e-10,
        4.5284535953805377e-6,
        -2.8427815022504408e-6,
        8.7082341778646412e-7,
        3.6886101871706965e-12,
        -1.5344695190702061e-7,
        8.862466778790695e-8,
        -2.5184812301826817e-8,
        -1.0225912098215092e-14,
        3.8969470758154777e-9,
        -2.1267304792235635e-9,
        5.7370135528051385e-10,
        -1.887749850169741e-19,
        -8.0931538694657866e-11,
        4.2382723283449199e-11,
        -1.1002224534207726e-11,
    ],
    [
        1.3324454494800656e-3,
        -1.9144384985654775e-3,
        1.1089369134596637e-3,
        9.932404122642299e-7,
        -5.0874501293093199e-4,
        4.2735056665392884e-4,
        -1.6858853767910799e-4,
        -8.1301893922784998e-9,
        4.5284402370562147e-5,
        -3.127053674781734e-5,
        1.044986828530338e-5,
        4.8435226265680926e-11,
        -2.1482565873456258e-6,
        1.329369701097492e-6,
        -4.0295693092101029e-7,
        -1.7567877666323291e-13,
        7.0145043163668257e-8,
        -4.040787734999483e-8,
        1.1474026743371963e-8,
        3.9642746853563325e-18,
        -1.7804938269892714e-9,
        9.7480262548731646e-10,
        -2.6405338676507616e-10,
        5.794875163403742e-18,
        3.7647749553543836e-11,
    ],
    [
        1.579727660730835e-3,
        1.6251626278391582e-4,
        -2.0633421035543276e-3,
        2.1389686185689098e-3,
        -1.0108559391263003e-3,
        -3.9912705529919201e-7,
        3.6235025084764691e-4,
        -2.8143901463712154e-4,
        1.0449513336495887e-4,
        2.1211418491830297e-9,
        -2.5779417251947842e-5,
        1.7281818956040463e-5,
        -5.6413773872904282e-6,
        -1.1024320105776174e-11,
        1.1223224418895175e-6,
        -6.8693396379526735e-7,
        2.0653236975414887e-7,
        4.6714772409838506e-14,
        -3.5609886164949055e-8,
        2.0470855345905963e-8,
        -5.8091738633283358e-9,
        -1.332821287582869e-16,
        9.0354604391335133e-10,
        -4.9598782517330834e-10,
        1.3481607129399749e-10,
    ],
    [
        -4.0725121195140166e-3,
        6.4033628338080698e-3,
        -4.0410161081676618e-3,
        -2.183732802866233e-6,
        2.1740441801254639e-3,
        -1.9700440518418892e-3,
        8.3595469747962458e-4,
        1.9445447567109655e-8,
        -2.5779387120421696e-4,
        1.9009987368139304e-4,
        -6.7696499937438965e-5,
        -1.4440629666426572e-10,
        1.5712512518742269e-5,
        -1.0304008744776893e-5,
        3.304517767401387e-6,
        7.9829760242325709e-13,
        -6.4097794149313004e-7,
        3.8894624761300056e-7,
        -1.1618347644948869e-7,
        -2.816808630596451e-15,
        1.9878012911297093e-8,
        -1.1407719956357511e-8,
        3.2355857064185555e-9,
        4.1759468293455945e-20,
        -5.0423112718105824e-10,
    ],
    [
        -5.9475779383993003e-3,
        -5.4016476789260452e-4,
        8.7910413550767898e-3,
        -9.8576315587856125e-3,
        5.0134695031021538e-3,
        1.2807521786221875e-6,
        -2.0626019342754683e-3,
        1.7109128573523058e-3,
        -6.7695312714133799e-4,
        -6.9011545676562133e-9,
        1.8855128143995902e-4,
        -1.3395215663491969e-4,
        4.6263183033528039e-5,
        4.0034230613321351e-11,
        -1.0255652921494033e-5,
        6.612086372797651e-6,
        -2.0913022027253008e-6,
        -2.0951775649603837e-13,
        3.9756029041993247e-7,
        -2.3956211978815887e-7,
        7.1182883382145864e-8,
        8.925574873053455e-16,
        -1.2101547235064676e-8,
        6.9350618248334386e-9,
        -1.9661464453856102e-9,
    ],
    [
        1.7402027787522711e-2,
        -2.9527880945699121e-2,
        2.0045875571402799e-2,
        7.0289515966903407e-6,
        -1.2375421071343148e-2,
        1.1976293444235254e-2,
        -5.4156038466518525e-3,
        -6.3290893396418616e-8,
        1.8855118129005065e-3,
        -1.473473274825001e-3,
        5.5515810097708387e-4,
        5.2406834412550662e-10,
        -1.4357913535784836e-4,
        9.9181293224943297e-5,
        -3.3460834749478311e-5,
        -3.5755837291098993e-12,
        7.1560851960630076e-6,
        -4.5516802628155526e-6,
        1.4236576649271475e-6,
        1.8803149082089664e-14,
        -2.6623403898929211e-7,
        1.5950642189595716e-7,
        -4.7187514673841102e-8,
        -6.5107872958755177e-17,
        7.9795091026746235e-9,
    ],
    [
        3.0249124160905891e-2,
        2.4817436002649977e-3,
        -4.9939134373457022e-2,
        5.9915643009307869e-2,
        -3.2483207601623391e-2,
        -5.7212968652103441e-6,
        1.5085251778569354e-2,
        -1.3261324005088445e-2,
        5.5515262632426148e-3,
        3.0263182257030016e-8,
        -1.7229548406756723e-3,
        1.2893570099929637e-3,
        -4.6845138348319876e-4,
        -1.830259937893045e-10,
        1.1449739014822654e-4,
        -7.7378565221244477e-5,
        2.5625836246985201e-5,
        1.0766165333192814e-12,
        -5.3246809282422621e-6,
        3.349634863064464e-6,
        -1.0381253128684018e-6,
        -5.608909920621128e-15,
        1.9150821930676591e-7,
        -1.1418365800203486e-7,
        3.3654425209171788e-8,
    ],
    [
        -9.9051020880159045e-2,
        1.7954011706123486e-1,
        -1.2989606383463778e-1,
        -3.1478872752284357e-5,
        9.0510635276848131e-2,
        -9.2828824411184397e-2,
        4.4412112839877808e-2,
        2.7779236316835888e-7,
        -1.7229543805449697e-2,
        1.4182925050891573e-2,
        -5.6214161633747336e-3,
        -2.39598509186381e-9,
        1.6029634366079908e-3,
        -1.1606784674435773e-3,
        4.1001337768153873e-4,
        1.8365800754090661e-11,
        -9.5844256563655903e-5,
        6.3643062337764708e-5,
        -2.076250624489065e-5,
        -1.1806020912804483e-13,
        4.2131808239120649e-6,
        -2.6262241337012467e-6,
        8.0770620494930662e-7,
        6.0125912123632725e-16,
        -1.4729737374018841e-7,
    ],
    [
        -1.9994542198219728e-1,
        -1.5056113040026424e-2,
        3.6470239469348489e-1,
        -4.6435192311733545e-1,
        2.6640934719197893e-1,
        3.4038266027147191e-5,
        -1.3784338709329624e-1,
        1.276467178337056e-1,
        -5.6213828755200985e-2,
        -1.753150885483011e-7,
        1.9235592956768113e-2,
        -1.5088821281095315e-2,
        5.7401854451350123e-3,
        1.0622382710310225e-9,
        -1.5335082692563998e-3,
        1.0819320643228214e-3,
        -3.7372510193945659e-4,
        -6.6170909729031985e-12,
        8.4263617380909628e-5,
        -5.5150706827483479e-5,
        1.7769536448348069e-5,
        3.8827923210205533e-14,
        -3.53513697488768e-6,
        2.1865832130045269e-6,
        -6.6812849447625594e-7,
    ],
    [
        7.2438608504029431e-1,
        -1.3918010932653375,
        1.0654143352413968,
        1.876173868950258e-4,
        -8.2705501176152696e-1,
        8.9352433347828414e-1,
        -4.4971003995291339e-1,
        -1.6107401567546652e-6,
        1.9235590165271091e-1,
        -1.6597702160042609e-1,
        6.8882222681814333e-2,
        1.3910091724608687e-8,
        -2.146911561508663e-2,
        1.6228980898865892e-2,
        -5.9796016172584256e-3,
        -1.1287469112826745e-10,
        1.5167451119784857e-3,
        -1.0478634293553899e-3,
        3.5539072889126421e-4,
        8.1704322111801517e-13,
        -7.7773013442452395e-5,
        5.0291413897007722e-5,
        -1.6035083867000518e-5,
        1.2469354315487605e-14,
        3.1369106244517615e-6,
    ],
    [
        1.6668949727276811,
        1.165462765994632e-1,
        -3.3288393225018906,
        4.4692325482864037,
        -2.6977693045875807,
        -2.600667859891061e-4,
        1.5389017615694539,
        -1.4937962361134612,
        6.8881964633233148e-1,
        1.3077482004552385e-6,
        -2.5762963325596288e-1,
        2.1097676102125449e-1,
        -8.3714408359219882e-2,
        -7.7920428881354753e-9,
        2.4267923064833599e-2,
        -1.7813678334552311e-2,
        6.3970330388900056e-3,
        4.9430807090480523e-11,
        -1.5554602758465635e-3,
        1.0561196919903214e-3,
        -3.5277184460472902e-4,
        9.3002334645022459e-14,
        7.5285855026557172e-5,
        -4.8186515569156351e-5,
        1.5227271505597605e-5,
    ],
    [
        -6.6188298861372935,
        1.3397985455142589,
        -1.0789350606845146,
        -1.4352254537875018e-3,
        9.2333694596189809,
        -1.0456552819547769,
        5.5105526029033471,
        1.2024439690716742e-5,
        -2.5762961164755816,
        2.3207442745387179,
        -1.0045728797216284,
        -1.0207833290021914e-7,
        3.3975092171169466e-1,
        -2.6720517450757468e-1,
        1.0235252851562706e-1,
        8.4329730484871625e-10,
        -2.7998284958442595e-2,
        2.0066274144976813e-2,
        -7.0554368915086242e-3,
        1.9402238183698188e-12,
        1.6562888105449611e-3,
        -1.1082898580743683e-3,
        3.654545161310169e-4,
        -5.1290032026971794e-11,
        -7.6340103696869031e-5,
    ],
    [
        -1.7112706061976095,
        -1.1208044642899116,
        3.7131966511885444,
        -5.2298271025348962,
        3.3058589696624618,
        2.4791298976200222e-3,
        -2.061089403411526,
        2.088672775145582,
        -1.0045703956517752,
        -1.2238783449063012e-5,
        4.0770134274221141,
        -3.473667358470195,
        1.4329352617312006,
        7.1359914411879712e-8,
        -4.4797257159115612e-1,
        3.4112666080644461e-1,
        -1.2699786326594923e-1,
        -2.8953677269081528e-10,
        3.3125776278259863e-2,
        -2.3274087021036101e-2,
        8.0399993503648882e-3,
        -1.177805216235265e-9,
        -1.8321624891071668e-3,
        1.2108282933588665e-3,
        -3.9479941246822517e-4,
    ],
    [
        7.389033153567425,
        -1.5680141270402273,
        1.322177542759164,
        1.3692876877324546e-2,
        -1.2366496885920151,
        1.4620689391062729,
        -8.0365587724865346,
        -1.1259851148881298e-4,
        4.0770132196179938,
        -3.8210340013273034,
        1.719522294277362,
        9.3519707955168356e-7,
        -6.2716159907747034,
        5.1168999071852637,
        -2.0319658112299095,
        -4.9507215582761543e-9,
        5.9626397294332597e-1,
        -4.4220765337238094e-1,
        1.6079998700166273e-1,
        -2.4733786203223402e-8,
        -4.0307574759979762e-2,
        2.7849050747097869e-2,
        -9.4751858992054221e-3,
        6.419922235909132e-6,
        2.1250180774699461e-3,
    ],
    [
        2.1216837098382522,
        1.3107863022633868,
        -4.9698285932871748,
        7.3121595266969204,
        -4.8213821720890847,
        -2.8817248692894889e-2,
        3.2616720302947102,
        -3.4389340280087117,
        1.7195193870816232,
        1.4038077378096158e-4,
        -7.52594195897599,
        6.651969984520934,
        -2.8447519748152462,
        -7.613702615875391e-7,
        9.5402237105304373,
        -7.5175301113311376,
        2.8943997568871961,
        -4.6612194999538201e-7,
        -8.0615149598794088e-1,
        5.8483006570631029e-1,
        -2.0845408972964956e-1,
        1.4765818959305817e-4,
        5.1000433863753019e-2,
        -3.3066252141883665e-2,
        1.5109265210467774e-2,
    ],
    [
        -9.8959643098322368,
        2.1925555360905233,
        -1.9283586782723356,
        -1.5925738122215253e-1,
        1.9569985945919857,
        -2.4072514765081556,
        1.3756149959336496,
        1.2920735237496668e-3,
        -7.525941715948055,
        7.3171668742208716,
        -3.4137023466220065,
        -9.9857390260608043e-6,
        1.3356313181291573,
        -1.1276295161252794,
        4.6310396098204458,
        -7.9237387133614756e-6,
        -1.4510726927018646,
        1.1111771248100563,
        -4.1690817945270892,
        3.1008219800117808e-3,
        1.1220095449981468,
        -7.6052379926149916e-1,
        3.6262236505085254e-1,
        2.216867741940747e-1,
        4.8683443692930507e-1,
    ],
];

const LANCZOS_NUM: [f64; 13] = [
    0.006061842346248906525783753964555936883222,
    0.5098416655656676188125178644804694509993,
    19.51992788247617482847860966235652136208,
    449.9445569063168119446858607650988409623,
    6955.999602515376140356310115515198987526,
    75999.29304014542649875303443598909137092,
    601859.6171681098786670226533699352302507,
    3481712.15498064590882071018964774556468,
    14605578.08768506808414169982791359218571,
    43338889.32467613834773723740590533316085,
    86363131.28813859145546927288977868422342,
    103794043.1163445451906271053616070238554,
    56906521.91347156388090791033559122686859,
];
const LANCZOS_DENOM: [f64; 13] = [
    1.0,
    66.0,
    1925.0,
    32670.0,
    357423.0,
    2637558.0,
    13339535.0,
    45995730.0,
    105258076.0,
    150917976.0,
    120543840.0,
    39916800.0,
    0.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frexp_splits_normal_subnormal_and_special_values() {
        assert_eq!(frexp(3.0), (0.75, 2));
        assert_eq!(frexp(-0.75), (-0.75, 0));
        assert_eq!(frexp(1e-40f32 as f64).1, -132);
        assert_eq!(frexp(f64::from_bits(1)), (0.5, -1073));
        assert_eq!(frexp(f64::INFINITY), (f64::INFINITY, 0));
        assert_eq!(frexp(-0.0).0.to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn next_after_steps_one_ulp_each_way() {
        assert_eq!(next_after(1.0f32, 2.0), 1.0 + f32::EPSILON);
        assert_eq!(next_after(1.0f64, 0.0), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(next_after(0.0f32, -1.0), -f32::from_bits(1));
        assert_eq!(next_after(2.0f32, 2.0), 2.0);
        assert!(next_after(f32::NAN, 1.0).is_nan());
        // float16: 1 + 2^-10; bfloat16: 1 - 2^-8
        assert_eq!(next_after_16(1.0, 2.0, false), 1.0 + 2f32.powi(-10));
        assert_eq!(next_after_16(1.0, 0.0, true), 1.0 - 2f32.powi(-8));
    }

    #[test]
    fn erfcx_matches_reference_values() {
        // exp(x^2) erfc(x) (values from the Faddeeva package's tests / mpmath)
        for (x, want) in [
            (0.0, 1.0),
            (1.0, 0.427_583_576_155_807),
            (10.0, 0.056_140_992_743_822_59),
            (30.0, 0.018_795_888_861_416_75),
            (-1.0, 5.008_980_080_762_283),
        ] {
            let got = erfcx_f64(x);
            assert!(
                (got - want).abs() <= 1e-13 * want,
                "erfcx({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn polynomials_at_known_points() {
        use Polynomial::*;
        // T_3(x) = 4x^3 - 3x, U_2 = 4x^2 - 1, H_3 = 8x^3 - 12x, L_2 = (x^2 - 4x + 2) / 2
        let x = 0.3f64;
        assert!((ChebyshevT.eval(x, 3.0) - (4.0 * x * x * x - 3.0 * x)).abs() < 1e-15);
        assert!((ChebyshevU.eval(x, 2.0) - (4.0 * x * x - 1.0)).abs() < 1e-15);
        assert!((HermiteH.eval(x, 3.0) - (8.0 * x * x * x - 12.0 * x)).abs() < 1e-14);
        assert!((LaguerreL.eval(x, 2.0) - (x * x - 4.0 * x + 2.0) / 2.0).abs() < 1e-15);
        // n < 0 and NaN n give 0, a Hermite degree past the limit NaN
        assert_eq!(LegendreP.eval(x, -1.0), 0.0);
        assert_eq!(ChebyshevT.eval(x, f64::NAN), 0.0);
        assert!(HermiteHe.eval(x, 600.0).is_nan());
    }

    #[test]
    fn incomplete_gamma_halves_sum_to_one() {
        for (a, x) in [
            (0.5, 0.2),
            (3.0, 2.5),
            (30.0, 28.0),
            (250.0, 260.0),
            (2.0, 40.0),
        ] {
            let (p, q) = (igamma(a, x), igammac(a, x));
            assert!(
                (p + q - 1.0f64).abs() < 1e-14,
                "P + Q at ({a}, {x}) = {}",
                p + q
            );
        }
        // P(1, x) = 1 - exp(-x)
        assert!((igamma(1.0f64, 0.7) - (1.0 - (-0.7f64).exp())).abs() < 1e-15);
    }
}
