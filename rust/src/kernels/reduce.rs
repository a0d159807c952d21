//! Reductions (`sum`, `mean`, `prod`, `amax`/`amin`, `max`/`min` with
//! indices, `argmax`/`argmin`, `var`/`std` (+ mean), vector norms, `all`/`any`,
//! `count_nonzero`, `nansum`) and scans (`cumsum`, `cumprod`).
//!
//! # The engine
//! A reduction is described by an input view and an output view of the same
//! rank in which every reduced dimension has size 1 (torch's `keepdim=True`
//! shape; the caller inserts those dimensions with any stride). Size-1
//! dimensions are dropped and the rest are split into *kept* dimensions (one
//! output each) and *reduced* dimensions (sorted by decreasing stride, then
//! coalesced), and one of two layouts is chosen from the strides alone:
//!
//! - **inner**: the reduced elements of one output lie closest together
//!   (the innermost reduced stride is the smallest). Each output's reduced
//!   space is a flat range `0..R`, reduced by a pairwise tree whose leaves are
//!   blocks of [`BLOCK`] elements; a leaf runs [`LANES`] independent
//!   accumulators over its contiguous runs (vectorized), then folds them
//!   pairwise.
//! - **outer**: a kept dimension is innermost (e.g. `sum(dim=0)` of a
//!   row-major matrix). Tiles of neighbouring outputs (16, 64 or [`TILE`],
//!   by the length of that dimension; outputs never mix) are reduced
//!   together, one reduced row at a time (vectorized across outputs), again as
//!   a pairwise tree over rows with leaves of [`OUTER_LEAF`] rows.
//!
//! The trees, blocks and lanes depend only on the shapes and strides, never on
//! the number of threads: rayon runs independent outputs, tiles or subtrees
//! on any thread, and the result has the same bits (deterministic). Pairwise
//! trees also keep float error at O(log n), as ATen's cascade sum does.
//!
//! Arg-reductions (`argmax`, `max.dim`, ...) report the index within the
//! reduced space; callers give them exactly one reduced dimension (or a
//! flattened input), so it is the index along that dimension.
//!
//! The hot leaves are compiled three times (AVX-512, AVX2+FMA, baseline) and
//! chosen at run time; lanes make the order of operations the same on all.

// Lane and tile loops index their accumulators on purpose (they vectorize).
#![allow(clippy::needless_range_loop)]

use super::copy::{for_each_offset, Scalar};
use super::elementwise::simd::{self, SimdLevel};
use super::parallel;
use super::{KernelError, Strided, GRAIN_SIZE};
use crate::dtype::DType;
use half::{bf16, f16};

/// Independent accumulators per leaf of the inner layout.
pub const LANES: usize = 32;
/// Independent accumulators for one run of `SHORT_LANES..2 * LANES` elements.
pub const SHORT_LANES: usize = 8;
/// Elements per leaf of the inner layout's pairwise tree.
pub const BLOCK: usize = 4096;
/// Outputs reduced together in the outer layout.
pub const TILE: usize = 256;
/// Rows per leaf of the outer layout's pairwise tree.
pub const OUTER_LEAF: usize = 16;
/// Default of [`par_min`].
pub const PAR_MIN_DEFAULT: usize = 1 << 18;

/// Work (elements) below which the reduction, softmax and loss kernels stay
/// on the calling thread (`FOO_RS_PAR_MIN` overrides it). Handing work to
/// rayon from a thread outside its pool (Python's) costs a wake-up and a
/// hand-back: microseconds on an idle machine, far more when the other core
/// is busy or its vCPU is halted. Parallelism never changes results (the
/// trees are fixed by the shapes), so this is a speed knob only.
pub fn par_min() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if parallel::num_threads() <= 1 {
        return usize::MAX;
    }
    *V.get_or_init(|| parallel::env_usize("FOO_RS_PAR_MIN", PAR_MIN_DEFAULT))
}

/// The most dimensions a reduction takes after coalescing.
const MAX_DIMS: usize = 25;

// ---------------------------------------------------------------------------
// Element traits
// ---------------------------------------------------------------------------

/// A float accumulator (f32 or f64).
pub trait AccF:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Div<Output = Self>
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const INF: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn powf(self, p: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! accf {
    ($t:ty) => {
        impl AccF for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            const INF: $t = <$t>::INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn powf(self, p: Self) -> Self {
                <$t>::powf(self, p)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
accf!(f32);
accf!(f64);

/// A floating element type and the type it accumulates in (float32 for the
/// half types and float32, float64 for float64), as torch CPU's `opmath`.
pub trait FloatElem: Scalar + PartialOrd {
    type Acc: AccF;
    fn widen(self) -> Self::Acc;
    fn narrow(a: Self::Acc) -> Self;
}

impl FloatElem for f32 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(a: f32) -> f32 {
        a
    }
}
impl FloatElem for f64 {
    type Acc = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(a: f64) -> f64 {
        a
    }
}
impl FloatElem for f16 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn narrow(a: f32) -> f16 {
        f16::from_f32(a)
    }
}
impl FloatElem for bf16 {
    type Acc = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline(always)]
    fn narrow(a: f32) -> bf16 {
        bf16::from_f32(a)
    }
}

/// Ordering for max/min: NaN is larger than everything (it propagates).
pub trait Extremum: Scalar {
    fn lowest() -> Self;
    fn highest() -> Self;
    fn nan(self) -> bool;
    fn gt(self, o: Self) -> bool;
    fn lt(self, o: Self) -> bool;
}

macro_rules! extremum_int {
    ($($t:ty),*) => {$(
        impl Extremum for $t {
            #[inline(always)]
            fn lowest() -> Self { <$t>::MIN }
            #[inline(always)]
            fn highest() -> Self { <$t>::MAX }
            #[inline(always)]
            fn nan(self) -> bool { false }
            #[inline(always)]
            fn gt(self, o: Self) -> bool { self > o }
            #[inline(always)]
            fn lt(self, o: Self) -> bool { self < o }
        }
    )*};
}
extremum_int!(u8, i8, i16, i32, i64);

impl Extremum for bool {
    #[inline(always)]
    fn lowest() -> Self {
        false
    }
    #[inline(always)]
    fn highest() -> Self {
        true
    }
    #[inline(always)]
    fn nan(self) -> bool {
        false
    }
    #[inline(always)]
    fn gt(self, o: Self) -> bool {
        self & !o
    }
    #[inline(always)]
    fn lt(self, o: Self) -> bool {
        !self & o
    }
}

macro_rules! extremum_float {
    ($($t:ty),*) => {$(
        impl Extremum for $t {
            #[inline(always)]
            fn lowest() -> Self { <$t>::NEG_INFINITY }
            #[inline(always)]
            fn highest() -> Self { <$t>::INFINITY }
            #[inline(always)]
            fn nan(self) -> bool { self.is_nan() }
            #[inline(always)]
            fn gt(self, o: Self) -> bool { self > o }
            #[inline(always)]
            fn lt(self, o: Self) -> bool { self < o }
        }
    )*};
}
extremum_float!(f32, f64, f16, bf16);

// ---------------------------------------------------------------------------
// Reducers
// ---------------------------------------------------------------------------

/// One reduction: an associative fold with identity `init`. `combine(a, b)`
/// may receive partial results in any order of indices (arg-reductions break
/// ties on the index themselves).
pub trait Reducer: Sync {
    type In: Copy + Send + Sync + 'static;
    type Acc: Copy + Send + Sync;
    type Out: Copy + 'static;
    type Out2: Copy + 'static;
    fn init(&self) -> Self::Acc;
    fn step(&self, acc: Self::Acc, x: Self::In, idx: i64) -> Self::Acc;
    fn combine(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// The outputs for an accumulator over `count` elements.
    fn finish(&self, acc: Self::Acc, count: usize) -> (Self::Out, Self::Out2);
}

/// Sum (`NAN`: skipping NaNs) of floats in their accumulate type; `mean`
/// divides by the count.
pub struct SumF<T, const NAN: bool> {
    pub mean: bool,
    _t: std::marker::PhantomData<T>,
}
impl<T, const NAN: bool> SumF<T, NAN> {
    pub fn new(mean: bool) -> Self {
        SumF {
            mean,
            _t: std::marker::PhantomData,
        }
    }
}
impl<T: FloatElem, const NAN: bool> Reducer for SumF<T, NAN> {
    type In = T;
    type Acc = T::Acc;
    type Out = T;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> T::Acc {
        T::Acc::ZERO
    }
    #[inline(always)]
    fn step(&self, acc: T::Acc, x: T, _: i64) -> T::Acc {
        let v = x.widen();
        if NAN && v.is_nan() {
            acc
        } else {
            acc + v
        }
    }
    #[inline(always)]
    fn combine(&self, a: T::Acc, b: T::Acc) -> T::Acc {
        a + b
    }
    fn finish(&self, acc: T::Acc, count: usize) -> (T, ()) {
        if self.mean {
            (T::narrow(acc / T::Acc::from_f64(count as f64)), ())
        } else {
            (T::narrow(acc), ())
        }
    }
}

/// Product of floats in their accumulate type.
pub struct ProdF<T>(std::marker::PhantomData<T>);
impl<T: FloatElem> Reducer for ProdF<T> {
    type In = T;
    type Acc = T::Acc;
    type Out = T;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> T::Acc {
        T::Acc::ONE
    }
    #[inline(always)]
    fn step(&self, acc: T::Acc, x: T, _: i64) -> T::Acc {
        acc * x.widen()
    }
    #[inline(always)]
    fn combine(&self, a: T::Acc, b: T::Acc) -> T::Acc {
        a * b
    }
    fn finish(&self, acc: T::Acc, _: usize) -> (T, ()) {
        (T::narrow(acc), ())
    }
}

/// Sum (`PROD`: product) of integers or bools into int64, wrapping.
pub struct IntFold<T, const PROD: bool>(std::marker::PhantomData<T>);
impl<T: Scalar, const PROD: bool> Reducer for IntFold<T, PROD> {
    type In = T;
    type Acc = i64;
    type Out = i64;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> i64 {
        PROD as i64
    }
    #[inline(always)]
    fn step(&self, acc: i64, x: T, _: i64) -> i64 {
        if PROD {
            acc.wrapping_mul(x.to_i64())
        } else {
            acc.wrapping_add(x.to_i64())
        }
    }
    #[inline(always)]
    fn combine(&self, a: i64, b: i64) -> i64 {
        if PROD {
            a.wrapping_mul(b)
        } else {
            a.wrapping_add(b)
        }
    }
    fn finish(&self, acc: i64, _: usize) -> (i64, ()) {
        (acc, ())
    }
}

/// `amax` / `amin`: the largest / smallest element, NaN propagating.
pub struct Extreme<T, const MAX: bool>(std::marker::PhantomData<T>);
impl<T: Extremum, const MAX: bool> Reducer for Extreme<T, MAX> {
    type In = T;
    type Acc = T;
    type Out = T;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> T {
        if MAX {
            T::lowest()
        } else {
            T::highest()
        }
    }
    #[inline(always)]
    fn step(&self, acc: T, x: T, _: i64) -> T {
        self.combine(acc, x)
    }
    #[inline(always)]
    fn combine(&self, a: T, b: T) -> T {
        let better = if MAX { b.gt(a) } else { b.lt(a) };
        if better || b.nan() {
            b
        } else {
            a
        }
    }
    fn finish(&self, acc: T, _: usize) -> (T, ()) {
        (acc, ())
    }
}

/// The value and index of the largest / smallest element (the first one on
/// ties; the first NaN if any): `max.dim` (`VALUES`) and `argmax`.
pub struct ArgExtreme<T, const MAX: bool, const VALUES: bool>(std::marker::PhantomData<T>);
impl<T: Extremum, const MAX: bool, const VALUES: bool> ArgExtreme<T, MAX, VALUES> {
    #[inline(always)]
    fn better(a: T, b: T) -> bool {
        // Whether b beats a.
        (b.nan() && !a.nan()) || (if MAX { b.gt(a) } else { b.lt(a) })
    }
}
impl<T: Extremum, const MAX: bool, const VALUES: bool> Reducer for ArgExtreme<T, MAX, VALUES> {
    type In = T;
    type Acc = (T, i64);
    type Out = i64;
    type Out2 = T;
    #[inline(always)]
    fn init(&self) -> (T, i64) {
        (T::lowest(), -1)
    }
    #[inline(always)]
    fn step(&self, acc: (T, i64), x: T, idx: i64) -> (T, i64) {
        if acc.1 < 0 || Self::better(acc.0, x) {
            (x, idx)
        } else {
            acc
        }
    }
    #[inline(always)]
    fn combine(&self, a: (T, i64), b: (T, i64)) -> (T, i64) {
        if a.1 < 0 {
            return b;
        }
        if b.1 < 0 {
            return a;
        }
        let tie =
            (a.0.nan() && b.0.nan()) || (!a.0.gt(b.0) && !a.0.lt(b.0) && !a.0.nan() && !b.0.nan());
        if Self::better(a.0, b.0) || (tie && b.1 < a.1) {
            b
        } else {
            a
        }
    }
    fn finish(&self, acc: (T, i64), _: usize) -> (i64, T) {
        (acc.1.max(0), acc.0)
    }
}

/// `all` (`ALL`) / `any` into bool or uint8.
pub struct Logical<T, O, const ALL: bool>(std::marker::PhantomData<(T, O)>);
impl<T: Scalar, O: Scalar, const ALL: bool> Reducer for Logical<T, O, ALL> {
    type In = T;
    type Acc = bool;
    type Out = O;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> bool {
        ALL
    }
    #[inline(always)]
    fn step(&self, acc: bool, x: T, _: i64) -> bool {
        let nz = if T::is_float() {
            x.to_f64() != 0.0
        } else {
            x.to_i64() != 0
        };
        if ALL {
            acc & nz
        } else {
            acc | nz
        }
    }
    #[inline(always)]
    fn combine(&self, a: bool, b: bool) -> bool {
        if ALL {
            a & b
        } else {
            a | b
        }
    }
    fn finish(&self, acc: bool, _: usize) -> (O, ()) {
        (O::from_i64(acc as i64), ())
    }
}

/// Number of nonzero elements (int64).
pub struct CountNonzero<T>(std::marker::PhantomData<T>);
impl<T: Scalar> Reducer for CountNonzero<T> {
    type In = T;
    type Acc = i64;
    type Out = i64;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> i64 {
        0
    }
    #[inline(always)]
    fn step(&self, acc: i64, x: T, _: i64) -> i64 {
        let nz = if T::is_float() {
            x.to_f64() != 0.0
        } else {
            x.to_i64() != 0
        };
        acc + nz as i64
    }
    #[inline(always)]
    fn combine(&self, a: i64, b: i64) -> i64 {
        a + b
    }
    fn finish(&self, acc: i64, _: usize) -> (i64, ()) {
        (acc, ())
    }
}

/// Welford's running (count, mean, M2), in float64 as torch CPU's var/std.
#[derive(Clone, Copy, Debug)]
pub struct Welford {
    n: f64,
    mean: f64,
    m2: f64,
}

/// `var` / `std` with a correction; the second output is the mean.
pub struct VarStd<T> {
    pub correction: f64,
    pub sqrt: bool,
    _t: std::marker::PhantomData<T>,
}
impl<T> VarStd<T> {
    pub fn new(correction: f64, sqrt: bool) -> Self {
        VarStd {
            correction,
            sqrt,
            _t: std::marker::PhantomData,
        }
    }
}
impl<T: FloatElem> Reducer for VarStd<T> {
    type In = T;
    type Acc = Welford;
    type Out = T;
    type Out2 = T;
    #[inline(always)]
    fn init(&self) -> Welford {
        Welford {
            n: 0.0,
            mean: 0.0,
            m2: 0.0,
        }
    }
    #[inline(always)]
    fn step(&self, a: Welford, x: T, _: i64) -> Welford {
        let x = x.widen().to_f64();
        let n = a.n + 1.0;
        let d = x - a.mean;
        let mean = a.mean + d / n;
        Welford {
            n,
            mean,
            m2: a.m2 + d * (x - mean),
        }
    }
    #[inline(always)]
    fn combine(&self, a: Welford, b: Welford) -> Welford {
        if a.n == 0.0 {
            return b;
        }
        if b.n == 0.0 {
            return a;
        }
        let n = a.n + b.n;
        let d = b.mean - a.mean;
        let nb_over_n = b.n / n;
        Welford {
            n,
            mean: a.mean + d * nb_over_n,
            m2: a.m2 + b.m2 + d * d * a.n * nb_over_n,
        }
    }
    fn finish(&self, a: Welford, _: usize) -> (T, T) {
        let divisor = if a.n > self.correction {
            a.n - self.correction
        } else {
            0.0
        };
        let var = a.m2 / divisor;
        let v = if self.sqrt { var.sqrt() } else { var };
        let mean = if a.n == 0.0 { f64::NAN } else { a.mean };
        (T::from_f64(v), T::from_f64(mean))
    }
}

/// Kinds of vector norm.
pub const NORM_ZERO: u8 = 0;
pub const NORM_ONE: u8 = 1;
pub const NORM_TWO: u8 = 2;
pub const NORM_INF: u8 = 3;
pub const NORM_NEG_INF: u8 = 4;
pub const NORM_P: u8 = 5;

/// `linalg_vector_norm` of order `p` (the kind picks the fast paths).
pub struct Norm<T, const KIND: u8> {
    pub p: f64,
    _t: std::marker::PhantomData<T>,
}
impl<T, const KIND: u8> Norm<T, KIND> {
    pub fn new(p: f64) -> Self {
        Norm {
            p,
            _t: std::marker::PhantomData,
        }
    }
}
impl<T: FloatElem, const KIND: u8> Reducer for Norm<T, KIND> {
    type In = T;
    type Acc = T::Acc;
    type Out = T;
    type Out2 = ();
    #[inline(always)]
    fn init(&self) -> T::Acc {
        if KIND == NORM_NEG_INF {
            T::Acc::INF
        } else {
            T::Acc::ZERO
        }
    }
    #[inline(always)]
    fn step(&self, acc: T::Acc, x: T, _: i64) -> T::Acc {
        let v = x.widen();
        match KIND {
            NORM_ZERO => {
                acc + if v == T::Acc::ZERO {
                    T::Acc::ZERO
                } else {
                    T::Acc::ONE
                }
            }
            NORM_ONE => acc + v.abs(),
            NORM_TWO => acc + v * v,
            NORM_INF | NORM_NEG_INF => self.combine(acc, v.abs()),
            _ => acc + v.abs().powf(T::Acc::from_f64(self.p)),
        }
    }
    #[inline(always)]
    fn combine(&self, a: T::Acc, b: T::Acc) -> T::Acc {
        match KIND {
            NORM_INF => {
                if b > a || b.is_nan() {
                    b
                } else {
                    a
                }
            }
            NORM_NEG_INF => {
                if b < a || b.is_nan() {
                    b
                } else {
                    a
                }
            }
            _ => a + b,
        }
    }
    fn finish(&self, acc: T::Acc, _: usize) -> (T, ()) {
        let v = match KIND {
            NORM_TWO => acc.sqrt(),
            NORM_P => acc.powf(T::Acc::from_f64(1.0 / self.p)),
            _ => acc,
        };
        (T::narrow(v), ())
    }
}

// ---------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------

/// An odometer over a few dimensions that tracks up to three offsets.
#[derive(Clone)]
pub(crate) struct Walker3<'a> {
    sizes: &'a [usize],
    strides: [&'a [isize]; 3],
    idx: [usize; MAX_DIMS],
    /// The offsets (in elements) of the current position in each stride set
    /// (an empty set stays 0).
    pub(crate) off: [isize; 3],
}

impl<'a> Walker3<'a> {
    /// Positioned on row-major linear index `linear` (at most 25 dims).
    pub(crate) fn new(sizes: &'a [usize], strides: [&'a [isize]; 3], linear: usize) -> Walker3<'a> {
        let mut w = Walker3 {
            sizes,
            strides,
            idx: [0; MAX_DIMS],
            off: [0; 3],
        };
        let mut rem = linear;
        for d in (0..sizes.len()).rev() {
            let s = sizes[d].max(1);
            w.idx[d] = rem % s;
            rem /= s;
            for k in 0..3 {
                if !strides[k].is_empty() {
                    w.off[k] += w.idx[d] as isize * strides[k][d];
                }
            }
        }
        w
    }

    /// Advances by one element (not past the last).
    #[inline]
    pub(crate) fn next(&mut self) {
        let mut d = self.sizes.len();
        while d > 0 {
            d -= 1;
            self.idx[d] += 1;
            for k in 0..3 {
                if !self.strides[k].is_empty() {
                    self.off[k] += self.strides[k][d];
                }
            }
            if self.idx[d] < self.sizes[d] || d == 0 {
                return;
            }
            for k in 0..3 {
                if !self.strides[k].is_empty() {
                    self.off[k] -= self.idx[d] as isize * self.strides[k][d];
                }
            }
            self.idx[d] = 0;
        }
    }
}

/// Coalesces adjacent dims (in the given order) whose strides nest in every set.
fn coalesce_sets(sizes: &mut Vec<usize>, sets: &mut [Vec<isize>]) {
    let mut i = 0;
    while i + 1 < sizes.len() {
        let nest = sets
            .iter()
            .all(|s| s[i] == s[i + 1] * sizes[i + 1] as isize);
        if nest {
            sizes[i] *= sizes[i + 1];
            sizes.remove(i + 1);
            for s in sets.iter_mut() {
                s[i] = s[i + 1];
                s.remove(i + 1);
            }
        } else {
            i += 1;
        }
    }
}

#[derive(Debug)]
struct Plan {
    /// Kept dims: sizes and strides of input, output, second output.
    kept: Vec<usize>,
    k_in: Vec<isize>,
    k_out: Vec<isize>,
    k_out2: Vec<isize>,
    /// Reduced dims (decreasing |stride|), coalesced; last is the row.
    red: Vec<usize>,
    r_in: Vec<isize>,
    m: usize,
    r: usize,
}

fn plan(out: &Strided, out2: Option<&Strided>, inp: &Strided) -> Result<Plan, KernelError> {
    let nd = inp.ndim();
    if out.ndim() != nd || out2.is_some_and(|o| o.sizes != out.sizes) {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: reduction output of shape {:?} for an input of shape {:?}",
            out.sizes, inp.sizes
        )));
    }
    let (mut kept, mut k_in, mut k_out, mut k_out2) = (vec![], vec![], vec![], vec![]);
    let mut red: Vec<(usize, isize)> = vec![];
    for d in 0..nd {
        let (si, so) = (inp.sizes[d], out.sizes[d]);
        if si == so {
            if si != 1 {
                kept.push(si);
                k_in.push(inp.strides[d]);
                k_out.push(out.strides[d]);
                k_out2.push(out2.map_or(0, |o| o.strides[d]));
            }
        } else if so == 1 {
            red.push((si, inp.strides[d]));
        } else {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: reduction output of shape {:?} for an input of shape {:?}",
                out.sizes, inp.sizes
            )));
        }
    }
    let m = kept.iter().product();
    let r = red.iter().map(|x| x.0).product();
    red.retain(|x| x.0 != 1);
    // Decreasing |stride| (stable), so that the last reduced dim is the
    // innermost in memory.
    red.sort_by_key(|x| std::cmp::Reverse(x.1.unsigned_abs()));
    let mut rs: Vec<usize> = red.iter().map(|x| x.0).collect();
    let mut rst = [red.iter().map(|x| x.1).collect::<Vec<_>>()];
    coalesce_sets(&mut rs, &mut rst);
    let mut sets = [k_in, k_out, k_out2];
    coalesce_sets(&mut kept, &mut sets);
    let [k_in, k_out, k_out2] = sets;
    let [r_in] = rst;
    if kept.len() > MAX_DIMS || rs.len() > MAX_DIMS {
        return Err(KernelError::InvalidArgument(
            "foo: too many dimensions for a reduction".into(),
        ));
    }
    Ok(Plan {
        kept,
        k_in,
        k_out,
        k_out2,
        red: rs,
        r_in,
        m,
        r,
    })
}

#[derive(Clone, Copy)]
struct Ptrs {
    inp: usize,
    out: usize,
    out2: usize,
}

/// Reduces `inp` into `out` (and `out2`, for reducers with a second output)
/// with reducer `red`. `out` has the input's rank, with size 1 on every
/// reduced dimension. The element types must match the reducer's.
pub fn reduce<R: Reducer>(
    red: &R,
    out: &Strided,
    out2: Option<&Strided>,
    inp: &Strided,
) -> Result<(), KernelError> {
    let plan = plan(out, out2, inp)?;
    if plan.m == 0 {
        return Ok(());
    }
    let ptrs = Ptrs {
        inp: inp.ptr as usize,
        out: out.ptr as usize,
        out2: out2.map_or(0, |o| o.ptr as usize),
    };
    let simd = crate_simd_level();
    if plan.r == 0 || plan.red.is_empty() {
        // Nothing to reduce over (or one element each): finish directly.
        let count = plan.r;
        run_outputs(&plan, ptrs, |w: &Walker3| {
            let acc = if count == 0 {
                red.init()
            } else {
                // SAFETY: offset of this output's only input element.
                red.step(
                    red.init(),
                    unsafe { *(ptrs.inp as *const R::In).offset(w.off[0]) },
                    0,
                )
            };
            write(red, acc, count, ptrs, w.off[1], w.off[2]);
        });
        return Ok(());
    }
    let row_stride = *plan.r_in.last().unwrap();
    let min_kept = plan.k_in.iter().map(|s| s.unsigned_abs()).min();
    let outer = matches!(min_kept, Some(s) if s < row_stride.unsigned_abs());
    if outer {
        reduce_outer(red, &plan, ptrs, simd);
    } else if plan.r <= BLOCK {
        // Rows of one leaf (a pooled 7x7 window, a softmax-sized row): one
        // SIMD dispatch per chunk of outputs, the leaf inlined in the loop.
        // A call per output (tree, dispatch, walker) had cost more than the
        // row itself (perf: sum over the last two dims of 8x512x7x7).
        let r = plan.r;
        run_chunks(&plan, |lo, hi| {
            simd::dispatch_at(
                SimdLevel::from_u8(simd),
                #[inline(always)]
                || {
                    for_outputs(&plan, lo, hi, |w| {
                        let base =
                            ptrs.inp as isize + w.off[0] * std::mem::size_of::<R::In>() as isize;
                        let acc = inner_leaf(red, &plan, base as usize, 0, r);
                        write(red, acc, r, ptrs, w.off[1], w.off[2]);
                    })
                },
            )
        });
    } else {
        let r = plan.r;
        run_outputs(&plan, ptrs, |w: &Walker3| {
            let base = ptrs.inp as isize + w.off[0] * std::mem::size_of::<R::In>() as isize;
            let acc = inner_tree(red, &plan, base as usize, 0, r, simd);
            write(red, acc, r, ptrs, w.off[1], w.off[2]);
        });
    }
    Ok(())
}

#[inline(always)]
fn write<R: Reducer>(red: &R, acc: R::Acc, count: usize, p: Ptrs, off: isize, off2: isize) {
    let (a, b) = red.finish(acc, count);
    // SAFETY: offsets of this output in the output views.
    unsafe {
        *(p.out as *mut R::Out).offset(off) = a;
        if p.out2 != 0 {
            *(p.out2 as *mut R::Out2).offset(off2) = b;
        }
    }
}

/// Calls `f` for every output (a walker positioned on it), in parallel
/// chunks when there is enough work.
fn run_outputs(plan: &Plan, _p: Ptrs, f: impl Fn(&Walker3) + Sync) {
    run_chunks(plan, |lo, hi| for_outputs(plan, lo, hi, &f));
}

/// Calls `f` for outputs `lo..hi` (a walker positioned on each).
#[inline(always)]
fn for_outputs(plan: &Plan, lo: usize, hi: usize, f: impl Fn(&Walker3)) {
    let strides = [&plan.k_in[..], &plan.k_out[..], &plan.k_out2[..]];
    let mut w = Walker3::new(&plan.kept, strides, lo);
    for i in lo..hi {
        f(&w);
        if i + 1 < hi {
            w.next();
        }
    }
}

/// Calls `run(lo, hi)` over the outputs `0..m` in chunks, in parallel when
/// there is enough work (the chunks depend on the sizes only).
fn run_chunks(plan: &Plan, run: impl Fn(usize, usize) + Sync) {
    let m = plan.m;
    let per = plan.r.max(1);
    let chunk = (GRAIN_SIZE / per).max(1);
    if m > 1 && m.saturating_mul(per) >= par_min() {
        let nchunks = m.div_ceil(chunk);
        parallel::parallel_for(nchunks, |c| run(c * chunk, ((c + 1) * chunk).min(m)));
    } else {
        run(0, m);
    }
}

// ---------------------------------------------------------------------------
// Inner layout
// ---------------------------------------------------------------------------

/// Reduces elements `lo..hi` of the flat reduced space of one output whose
/// input starts at byte address `base`.
fn inner_tree<R: Reducer>(
    red: &R,
    plan: &Plan,
    base: usize,
    lo: usize,
    hi: usize,
    simd: u8,
) -> R::Acc {
    let n = hi - lo;
    if n <= BLOCK {
        return inner_leaf_dispatch(red, plan, base, lo, hi, simd);
    }
    let blocks = n.div_ceil(BLOCK);
    let mid = lo + blocks.div_ceil(2) * BLOCK;
    let (a, b) = if n >= par_min() {
        parallel::join(
            || inner_tree(red, plan, base, lo, mid, simd),
            || inner_tree(red, plan, base, mid, hi, simd),
        )
    } else {
        (
            inner_tree(red, plan, base, lo, mid, simd),
            inner_tree(red, plan, base, mid, hi, simd),
        )
    };
    red.combine(a, b)
}

fn inner_leaf_dispatch<R: Reducer>(
    red: &R,
    plan: &Plan,
    base: usize,
    lo: usize,
    hi: usize,
    simd: u8,
) -> R::Acc {
    simd::dispatch_at(
        SimdLevel::from_u8(simd),
        #[inline(always)]
        || inner_leaf(red, plan, base, lo, hi),
    )
}

#[inline(always)]
fn fold_lanes<R: Reducer, const L: usize>(red: &R, mut acc: [R::Acc; L]) -> R::Acc {
    let mut w = L;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = red.combine(acc[j], acc[j + w]);
        }
    }
    acc[0]
}

/// Accumulates `len` elements at `p` (stride `s`) into the lanes.
#[inline(always)]
unsafe fn lanes_run<R: Reducer, const L: usize>(
    red: &R,
    acc: &mut [R::Acc; L],
    p: *const R::In,
    s: isize,
    len: usize,
    idx0: i64,
) {
    let mut i = 0;
    if s == 1 {
        while i + L <= len {
            let x = &*(p.add(i) as *const [R::In; L]);
            for j in 0..L {
                acc[j] = red.step(acc[j], x[j], idx0 + (i + j) as i64);
            }
            i += L;
        }
        for j in 0..len - i {
            acc[j] = red.step(acc[j], *p.add(i + j), idx0 + (i + j) as i64);
        }
    } else {
        while i + L <= len {
            for j in 0..L {
                acc[j] = red.step(
                    acc[j],
                    *p.offset((i + j) as isize * s),
                    idx0 + (i + j) as i64,
                );
            }
            i += L;
        }
        for j in 0..len - i {
            acc[j] = red.step(
                acc[j],
                *p.offset((i + j) as isize * s),
                idx0 + (i + j) as i64,
            );
        }
    }
}

#[inline(always)]
fn inner_leaf<R: Reducer>(red: &R, plan: &Plan, base: usize, lo: usize, hi: usize) -> R::Acc {
    let nd = plan.red.len();
    let row_len = plan.red[nd - 1];
    let s = plan.r_in[nd - 1];
    let p0 = base as *const R::In;
    if nd == 1 && (SHORT_LANES..2 * LANES).contains(&(hi - lo)) {
        // One short run (a pooled 7x7 window, a small row): a few lanes, no
        // walker. One accumulator made a chain of dependent adds, four cycles
        // each (perf: adaptive_avg_pool2d to 1x1 of 8x512x7x7 at 3.3x CPU's time).
        let mut acc = [red.init(); SHORT_LANES];
        // SAFETY: elements lo..hi of this output's only reduced dim.
        unsafe {
            lanes_run(
                red,
                &mut acc,
                p0.offset(lo as isize * s),
                s,
                hi - lo,
                lo as i64,
            )
        };
        return fold_lanes(red, acc);
    }
    if nd == 1 && hi - lo < 2 * LANES {
        // One very short run: one accumulator, no walker.
        let mut acc = red.init();
        for i in lo..hi {
            // SAFETY: element i of this output's only reduced dim.
            acc = red.step(acc, unsafe { *p0.offset(i as isize * s) }, i as i64);
        }
        return acc;
    }
    if hi - lo < 2 * LANES {
        // Short: one accumulator.
        let mut acc = red.init();
        let outer = &plan.red[..nd - 1];
        let mut w = Walker3::new(outer, [&plan.r_in[..nd - 1], &[], &[]], lo / row_len);
        let mut pos = lo;
        while pos < hi {
            let col = pos % row_len;
            let len = (row_len - col).min(hi - pos);
            // SAFETY: the walker's offsets stay within the input view.
            let p = unsafe { p0.offset(w.off[0] + col as isize * s) };
            for i in 0..len {
                acc = red.step(acc, unsafe { *p.offset(i as isize * s) }, (pos + i) as i64);
            }
            pos += len;
            if pos < hi {
                w.next();
            }
        }
        return acc;
    }
    let mut acc = [red.init(); LANES];
    let outer = &plan.red[..nd - 1];
    let mut w = Walker3::new(outer, [&plan.r_in[..nd - 1], &[], &[]], lo / row_len);
    let mut pos = lo;
    while pos < hi {
        let col = pos % row_len;
        let len = (row_len - col).min(hi - pos);
        // SAFETY: as above.
        unsafe {
            lanes_run(
                red,
                &mut acc,
                p0.offset(w.off[0] + col as isize * s),
                s,
                len,
                pos as i64,
            )
        };
        pos += len;
        if pos < hi {
            w.next();
        }
    }
    fold_lanes(red, acc)
}

// ---------------------------------------------------------------------------
// Outer layout
// ---------------------------------------------------------------------------

fn reduce_outer<R: Reducer>(red: &R, plan: &Plan, ptrs: Ptrs, simd: u8) {
    // The kept dim with the smallest input stride is the vector dim. Narrow
    // vectors get narrow tiles (each output's result does not depend on the
    // tile width: outputs never mix).
    let v = (0..plan.kept.len())
        .min_by_key(|&d| plan.k_in[d].unsigned_abs())
        .unwrap();
    match plan.kept[v] {
        0..=16 => reduce_outer_w::<R, 16>(red, plan, ptrs, simd, v),
        17..=64 => reduce_outer_w::<R, 64>(red, plan, ptrs, simd, v),
        _ => reduce_outer_w::<R, TILE>(red, plan, ptrs, simd, v),
    }
}

fn reduce_outer_w<R: Reducer, const W: usize>(
    red: &R,
    plan: &Plan,
    ptrs: Ptrs,
    simd: u8,
    v: usize,
) {
    let vlen = plan.kept[v];
    let (vs, vo, vo2) = (plan.k_in[v], plan.k_out[v], plan.k_out2[v]);
    let rest: Vec<usize> = (0..plan.kept.len()).filter(|&d| d != v).collect();
    let rsizes: Vec<usize> = rest.iter().map(|&d| plan.kept[d]).collect();
    let rin: Vec<isize> = rest.iter().map(|&d| plan.k_in[d]).collect();
    let rout: Vec<isize> = rest.iter().map(|&d| plan.k_out[d]).collect();
    let rout2: Vec<isize> = rest.iter().map(|&d| plan.k_out2[d]).collect();
    let nrest: usize = rsizes.iter().product();
    let ntiles = vlen.div_ceil(W);
    let items = nrest * ntiles;
    let r = plan.r;
    let insz = std::mem::size_of::<R::In>() as isize;
    let one = |item: usize| {
        let (ri, t) = (item / ntiles, item % ntiles);
        let w = Walker3::new(&rsizes, [&rin, &rout, &rout2], ri);
        let j0 = t * W;
        let width = W.min(vlen - j0);
        let base = ptrs.inp as isize + (w.off[0] + j0 as isize * vs) * insz;
        let acc = outer_tree::<R, W>(red, plan, base as usize, vs, width, 0, r, simd);
        for (j, a) in acc.iter().enumerate().take(width) {
            let jj = (j0 + j) as isize;
            write(red, *a, r, ptrs, w.off[1] + jj * vo, w.off[2] + jj * vo2);
        }
    };
    let work_per_item = r.saturating_mul(W.min(vlen));
    if items > 1 && items.saturating_mul(work_per_item) >= par_min() {
        let min_len = (GRAIN_SIZE / work_per_item.max(1)).max(1);
        parallel::for_range(items, min_len, one);
    } else {
        (0..items).for_each(one);
    }
}

#[allow(clippy::too_many_arguments)]
fn outer_tree<R: Reducer, const W: usize>(
    red: &R,
    plan: &Plan,
    base: usize,
    vs: isize,
    width: usize,
    lo: usize,
    hi: usize,
    simd: u8,
) -> [R::Acc; W] {
    let n = hi - lo;
    if n <= OUTER_LEAF {
        return outer_leaf_dispatch::<R, W>(red, plan, base, vs, width, lo, hi, simd);
    }
    let leaves = n.div_ceil(OUTER_LEAF);
    let mid = lo + leaves.div_ceil(2) * OUTER_LEAF;
    let (mut a, b) = if n * width >= par_min() {
        parallel::join(
            || outer_tree::<R, W>(red, plan, base, vs, width, lo, mid, simd),
            || outer_tree::<R, W>(red, plan, base, vs, width, mid, hi, simd),
        )
    } else {
        (
            outer_tree::<R, W>(red, plan, base, vs, width, lo, mid, simd),
            outer_tree::<R, W>(red, plan, base, vs, width, mid, hi, simd),
        )
    };
    for j in 0..width {
        a[j] = red.combine(a[j], b[j]);
    }
    a
}

#[allow(clippy::too_many_arguments)]
fn outer_leaf_dispatch<R: Reducer, const W: usize>(
    red: &R,
    plan: &Plan,
    base: usize,
    vs: isize,
    width: usize,
    lo: usize,
    hi: usize,
    simd: u8,
) -> [R::Acc; W] {
    simd::dispatch_at(
        SimdLevel::from_u8(simd),
        #[inline(always)]
        || outer_leaf::<R, W>(red, plan, base, vs, width, lo, hi),
    )
}

#[inline(always)]
fn outer_leaf<R: Reducer, const W: usize>(
    red: &R,
    plan: &Plan,
    base: usize,
    vs: isize,
    width: usize,
    lo: usize,
    hi: usize,
) -> [R::Acc; W] {
    let mut acc = [red.init(); W];
    // The rows' offsets first: a call to the walker between rows (it is not
    // inlined) made the compiler spill and reload every accumulator vector
    // around it (all zmm registers are caller-saved), which took most of a
    // bfloat16 sum over dim 0 (perf: 1024 x 1024, one thread).
    debug_assert!(hi - lo <= OUTER_LEAF);
    let mut offs = [0isize; OUTER_LEAF];
    let mut w = Walker3::new(&plan.red, [&plan.r_in, &[], &[]], lo);
    for (t, off) in offs.iter_mut().enumerate().take(hi - lo) {
        *off = w.off[0];
        if lo + t + 1 < hi {
            w.next();
        }
    }
    let p0 = base as *const R::In;
    for (r, &off) in (lo..hi).zip(&offs) {
        // SAFETY: offsets from the reduced walker and the tile stay in the view.
        unsafe {
            let p = p0.offset(off);
            if vs == 1 && width == W {
                let x = &*(p as *const [R::In; W]);
                for j in 0..W {
                    acc[j] = red.step(acc[j], x[j], r as i64);
                }
            } else if vs == 1 {
                for j in 0..width {
                    acc[j] = red.step(acc[j], *p.add(j), r as i64);
                }
            } else {
                for j in 0..width {
                    acc[j] = red.step(acc[j], *p.offset(j as isize * vs), r as i64);
                }
            }
        }
    }
    acc
}

// ---------------------------------------------------------------------------
// SIMD level
// ---------------------------------------------------------------------------

/// The SIMD level the reduction, nn and attention kernels use, as 2 (AVX-512 F/BW/VL/DQ),
/// 1 (AVX2 + FMA + F16C) or 0 (baseline): the crate's one level
/// ([`crate::kernels::elementwise::simd::level`], capped by `FOO_RS_SIMD`).
#[inline]
pub fn crate_simd_level() -> u8 {
    crate::kernels::elementwise::simd::level() as u8
}

/// Caps the crate's SIMD level (2, 1 or 0; for tests).
pub fn set_simd_level(level: u8) {
    use crate::kernels::elementwise::simd;
    simd::set_level(simd::SimdLevel::from_u8(level));
}

// ---------------------------------------------------------------------------
// Ops (dtype dispatch)
// ---------------------------------------------------------------------------

/// The reductions foo offers, by name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    Sum,
    NanSum,
    Mean,
    Prod,
    /// `amax` and full `max()`.
    Max,
    Min,
    /// `max.dim`: values to `out`, int64 indices to `out2`.
    MaxDim,
    MinDim,
    /// int64 indices to `out`.
    ArgMax,
    ArgMin,
    All,
    Any,
    CountNonzero,
    /// `out` = var (std if `sqrt`), optional `out2` = mean.
    Var {
        correction: f64,
        sqrt: bool,
    },
    /// `linalg_vector_norm` of order `ord` (float inputs).
    Norm {
        ord: f64,
    },
}

impl ReduceOp {
    /// The reduction called `name` (`correction` for var/std, `ord` for
    /// norm): the one name table, shared by the Python bindings and the
    /// native path.
    pub fn by_name(name: &str, correction: f64, ord: f64) -> Option<ReduceOp> {
        Some(match name {
            "sum" => ReduceOp::Sum,
            "nansum" => ReduceOp::NanSum,
            "mean" => ReduceOp::Mean,
            "prod" => ReduceOp::Prod,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            "max_dim" => ReduceOp::MaxDim,
            "min_dim" => ReduceOp::MinDim,
            "argmax" => ReduceOp::ArgMax,
            "argmin" => ReduceOp::ArgMin,
            "all" => ReduceOp::All,
            "any" => ReduceOp::Any,
            "count_nonzero" => ReduceOp::CountNonzero,
            "var" => ReduceOp::Var {
                correction,
                sqrt: false,
            },
            "std" => ReduceOp::Var {
                correction,
                sqrt: true,
            },
            "norm" => ReduceOp::Norm { ord },
            _ => return None,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum_cpu",
            ReduceOp::NanSum => "nansum_cpu",
            ReduceOp::Mean => "mean_cpu",
            ReduceOp::Prod => "prod_cpu",
            ReduceOp::Max | ReduceOp::MaxDim => "max_cpu",
            ReduceOp::Min | ReduceOp::MinDim => "min_cpu",
            ReduceOp::ArgMax => "argmax_cpu",
            ReduceOp::ArgMin => "argmin_cpu",
            ReduceOp::All => "all_cpu",
            ReduceOp::Any => "any_cpu",
            ReduceOp::CountNonzero => "count_nonzero_cpu",
            ReduceOp::Var { .. } => "var_cpu",
            ReduceOp::Norm { .. } => "norm_cpu",
        }
    }
}

/// The output dtype of `op` for an input of `dtype` (the caller converts the
/// input first when torch is asked for another `dtype=`).
pub fn result_dtype(op: ReduceOp, dtype: DType) -> DType {
    match op {
        ReduceOp::Sum | ReduceOp::NanSum | ReduceOp::Prod if !dtype.is_floating() => DType::I64,
        ReduceOp::ArgMax | ReduceOp::ArgMin | ReduceOp::CountNonzero => DType::I64,
        ReduceOp::All | ReduceOp::Any => {
            if dtype == DType::U8 {
                DType::U8
            } else {
                DType::Bool
            }
        }
        _ => dtype,
    }
}

fn check_dtypes(
    op: ReduceOp,
    out: &Strided,
    out2: Option<&Strided>,
    inp: &Strided,
) -> Result<(), KernelError> {
    let want = result_dtype(op, inp.dtype);
    if out.dtype != want {
        return Err(KernelError::InvalidArgument(format!(
            "Expected out tensor to have dtype {}, but got {} instead (foo {:?})",
            want.name(),
            out.dtype.name(),
            op
        )));
    }
    let want2 = match op {
        ReduceOp::MaxDim | ReduceOp::MinDim => Some(DType::I64),
        ReduceOp::Var { .. } => out2.map(|_| inp.dtype),
        _ => None,
    };
    match (want2, out2) {
        (Some(d), Some(o)) if o.dtype != d => Err(KernelError::InvalidArgument(format!(
            "Expected out tensor to have dtype {}, but got {} instead",
            d.name(),
            o.dtype.name()
        ))),
        (None, Some(_)) => Err(KernelError::InvalidArgument(format!(
            "foo: {op:?} has one output"
        ))),
        (Some(_), None) if matches!(op, ReduceOp::MaxDim | ReduceOp::MinDim) => Err(
            KernelError::InvalidArgument("foo: max/min with dim need an indices output".into()),
        ),
        _ => Ok(()),
    }
}

macro_rules! float_only {
    ($op:expr, $d:expr, $T:ident => $body:expr) => {
        match $d {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            d => {
                return Err(KernelError::UnsupportedDtype {
                    op: $op.name(),
                    dtype: d,
                })
            }
        }
    };
}

/// Runs reduction `op` of `inp` into `out` (keepdim shape, dtype
/// [`result_dtype`]) and, for `MaxDim`/`MinDim` (indices) and `Var` (mean,
/// optional), `out2`.
pub fn reduce_op(
    op: ReduceOp,
    out: &Strided,
    out2: Option<&Strided>,
    inp: &Strided,
) -> Result<(), KernelError> {
    check_dtypes(op, out, out2, inp)?;
    let d = inp.dtype;
    match op {
        ReduceOp::Sum | ReduceOp::Prod if !d.is_floating() => crate::dispatch_dtype!(d, T => {
            if op == ReduceOp::Sum {
                reduce(&IntFold::<T, false>(Default::default()), out, None, inp)
            } else {
                reduce(&IntFold::<T, true>(Default::default()), out, None, inp)
            }
        }),
        ReduceOp::NanSum if !d.is_floating() => {
            crate::dispatch_dtype!(d, T => reduce(&IntFold::<T, false>(Default::default()), out, None, inp))
        }
        ReduceOp::Sum => {
            float_only!(op, d, T => reduce(&SumF::<T, false>::new(false), out, None, inp))
        }
        ReduceOp::NanSum => {
            float_only!(op, d, T => reduce(&SumF::<T, true>::new(false), out, None, inp))
        }
        ReduceOp::Mean => {
            float_only!(op, d, T => reduce(&SumF::<T, false>::new(true), out, None, inp))
        }
        ReduceOp::Prod => {
            float_only!(op, d, T => reduce(&ProdF::<T>(Default::default()), out, None, inp))
        }
        ReduceOp::Max => {
            crate::dispatch_dtype!(d, T => reduce(&Extreme::<T, true>(Default::default()), out, None, inp))
        }
        ReduceOp::Min => {
            crate::dispatch_dtype!(d, T => reduce(&Extreme::<T, false>(Default::default()), out, None, inp))
        }
        // Values go to out, indices to out2: the reducer's outputs are (index, value).
        ReduceOp::MaxDim => {
            crate::dispatch_dtype!(d, T => reduce(&ArgExtreme::<T, true, true>(Default::default()), out2.unwrap(), Some(out), inp))
        }
        ReduceOp::MinDim => {
            crate::dispatch_dtype!(d, T => reduce(&ArgExtreme::<T, false, true>(Default::default()), out2.unwrap(), Some(out), inp))
        }
        ReduceOp::ArgMax => {
            crate::dispatch_dtype!(d, T => reduce(&ArgExtreme::<T, true, false>(Default::default()), out, None, inp))
        }
        ReduceOp::ArgMin => {
            crate::dispatch_dtype!(d, T => reduce(&ArgExtreme::<T, false, false>(Default::default()), out, None, inp))
        }
        ReduceOp::All | ReduceOp::Any => {
            let all = op == ReduceOp::All;
            crate::dispatch_dtype!(d, T => {
                match (out.dtype, all) {
                    (DType::U8, true) => reduce(&Logical::<T, u8, true>(Default::default()), out, None, inp),
                    (DType::U8, false) => reduce(&Logical::<T, u8, false>(Default::default()), out, None, inp),
                    (_, true) => reduce(&Logical::<T, bool, true>(Default::default()), out, None, inp),
                    (_, false) => reduce(&Logical::<T, bool, false>(Default::default()), out, None, inp),
                }
            })
        }
        ReduceOp::CountNonzero => {
            crate::dispatch_dtype!(d, T => reduce(&CountNonzero::<T>(Default::default()), out, None, inp))
        }
        ReduceOp::Var { correction, sqrt } => {
            float_only!(op, d, T => reduce(&VarStd::<T>::new(correction, sqrt), out, out2, inp))
        }
        ReduceOp::Norm { ord } => float_only!(op, d, T => {
            if ord == 2.0 {
                reduce(&Norm::<T, NORM_TWO>::new(ord), out, None, inp)
            } else if ord == 1.0 {
                reduce(&Norm::<T, NORM_ONE>::new(ord), out, None, inp)
            } else if ord == 0.0 {
                reduce(&Norm::<T, NORM_ZERO>::new(ord), out, None, inp)
            } else if ord == f64::INFINITY {
                reduce(&Norm::<T, NORM_INF>::new(ord), out, None, inp)
            } else if ord == f64::NEG_INFINITY {
                reduce(&Norm::<T, NORM_NEG_INF>::new(ord), out, None, inp)
            } else {
                reduce(&Norm::<T, NORM_P>::new(ord), out, None, inp)
            }
        }),
    }
}

// ---------------------------------------------------------------------------
// Scans
// ---------------------------------------------------------------------------

/// Cumulative sum / product along `dim`: `out[..., i, ...] = op(inp[..., :i+1, ...])`.
/// Floats accumulate in float64 (float32, float64) or float32 (half types),
/// as torch CPU; integers and bools in wrapping int64 (`out` is int64).
pub fn scan(prod: bool, out: &Strided, inp: &Strided, dim: usize) -> Result<(), KernelError> {
    if out.sizes != inp.sizes || dim >= inp.ndim().max(1) {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: scan output of shape {:?} for an input of shape {:?} along dim {dim}",
            out.sizes, inp.sizes
        )));
    }
    let want = if inp.dtype.is_floating() {
        inp.dtype
    } else {
        DType::I64
    };
    if out.dtype != want {
        return Err(KernelError::InvalidArgument(format!(
            "Expected out tensor to have dtype {}, but got {} instead",
            want.name(),
            out.dtype.name()
        )));
    }
    if inp.numel() == 0 {
        return Ok(());
    }
    if inp.ndim() == 0 {
        let one_in = Strided::new(inp.ptr, inp.dtype, vec![1], vec![1]);
        let one_out = Strided::new(out.ptr, out.dtype, vec![1], vec![1]);
        return scan(prod, &one_out, &one_in, 0);
    }
    match inp.dtype {
        DType::F32 => scan_lines::<f32, f32>(prod, out, inp, dim, |x| x as f64, |a| a as f32),
        DType::F64 => scan_lines::<f64, f64>(prod, out, inp, dim, |x| x, |a| a),
        DType::F16 => scan_lines::<f16, f16>(
            prod,
            out,
            inp,
            dim,
            |x| x.to_f32() as f64,
            |a| f16::from_f32(a as f32),
        ),
        DType::BF16 => scan_lines::<bf16, bf16>(
            prod,
            out,
            inp,
            dim,
            |x| x.widen() as f64,
            |a| bf16::from_f32(a as f32),
        ),
        d => crate::dispatch_dtype!(d, T => scan_int::<T>(prod, out, inp, dim)),
    }
    Ok(())
}

fn scan_lines<T: Copy + Send + Sync, O: Copy>(
    prod: bool,
    out: &Strided,
    inp: &Strided,
    dim: usize,
    widen: impl Fn(T) -> f64 + Sync,
    narrow: impl Fn(f64) -> O + Sync,
) {
    // The half types accumulate in float32, the others in float64.
    let half = std::mem::size_of::<T>() == 2;
    scan_generic(
        out,
        inp,
        dim,
        |src: *const T, ss: isize, dst: *mut O, ds: isize, n: usize| {
            // SAFETY: a line of the views.
            unsafe {
                if half {
                    let mut acc: f32 = if prod { 1.0 } else { 0.0 };
                    for i in 0..n as isize {
                        let x = widen(*src.offset(i * ss)) as f32;
                        acc = if prod { acc * x } else { acc + x };
                        *dst.offset(i * ds) = narrow(acc as f64);
                    }
                } else {
                    let mut acc: f64 = if prod { 1.0 } else { 0.0 };
                    for i in 0..n as isize {
                        let x = widen(*src.offset(i * ss));
                        acc = if prod { acc * x } else { acc + x };
                        *dst.offset(i * ds) = narrow(acc);
                    }
                }
            }
        },
    );
}

fn scan_int<T: Scalar>(prod: bool, out: &Strided, inp: &Strided, dim: usize) {
    scan_generic(
        out,
        inp,
        dim,
        |src: *const T, ss: isize, dst: *mut i64, ds: isize, n: usize| {
            // SAFETY: a line of the views.
            unsafe {
                let mut acc: i64 = prod as i64;
                for i in 0..n as isize {
                    let x = (*src.offset(i * ss)).to_i64();
                    acc = if prod {
                        acc.wrapping_mul(x)
                    } else {
                        acc.wrapping_add(x)
                    };
                    *dst.offset(i * ds) = acc;
                }
            }
        },
    );
}

/// Runs `line(src, src_stride, dst, dst_stride, len)` for every line along
/// `dim`, in parallel chunks of lines.
fn scan_generic<T: Copy, O: Copy>(
    out: &Strided,
    inp: &Strided,
    dim: usize,
    line: impl Fn(*const T, isize, *mut O, isize, usize) + Sync,
) {
    let n = inp.sizes[dim];
    let (ss, ds) = (inp.strides[dim], out.strides[dim]);
    let mut sizes = inp.sizes.clone();
    let mut si = inp.strides.clone();
    let mut so = out.strides.clone();
    sizes.remove(dim);
    si.remove(dim);
    so.remove(dim);
    let lines: usize = sizes.iter().product();
    let (ip, op) = (inp.ptr as usize, out.ptr as usize);
    let chunk = (GRAIN_SIZE / n.max(1)).max(1);
    let run = |lo: usize, hi: usize| {
        let mut offs_in = Vec::with_capacity(hi - lo);
        for_each_offset(&sizes, &si, lo, hi - lo, |_, o| offs_in.push(o));
        let mut k = 0;
        for_each_offset(&sizes, &so, lo, hi - lo, |_, o| {
            // SAFETY: offsets of line starts in both views.
            unsafe {
                line(
                    (ip as *const T).offset(offs_in[k]),
                    ss,
                    (op as *mut O).offset(o),
                    ds,
                    n,
                )
            };
            k += 1;
        });
    };
    if lines > 1 && lines * n >= par_min() {
        parallel::parallel_for(lines.div_ceil(chunk), |c| {
            run(c * chunk, ((c + 1) * chunk).min(lines))
        });
    } else {
        run(0, lines);
    }
}

#[cfg(test)]
mod tests;
