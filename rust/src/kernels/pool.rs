//! Pooling over 2 or 3 spatial dims (1-d arrives as 2-d): max pooling (with
//! indices) and average pooling with their backward, adaptive average and
//! max pooling and their backward.
//!
//! The kernels see 5-d views `[batch, channels, depth, height, width]`; the
//! 2-d entries see a 4-d view as depth 1. The dtype is dispatched once per
//! call to a kernel generic over the element type ([`PoolT`]), which
//! computes as ATen's CPU kernels do: sums in `at::opmath_type` (float32 for
//! float32 and the half types, float64 for float64, int64 for integers) in
//! ATen's order, one division, max windows scanned in ATen's order with
//! "greater or NaN" winning, gradients added in the element type in output
//! order. The layouts:
//!
//! - planes `(batch, channel)` with row-major spatial dims (NCHW, or any
//!   batch / channel strides): one plane at a time, rows of outputs at once
//!   (each window tap compared or added lane-wise over a row's outputs,
//!   vectorized by [`simd::dispatch`]);
//! - channels-last (channels at stride 1): the channels are the lanes, as in
//!   ATen's channels-last kernels;
//! - any other view: each plane is copied to a row-major scratch plane and
//!   back, then as the first case.
//!
//! Work is split over planes (or output rows, or batch elements) by index
//! only, so results do not depend on the thread count. Indices are flat
//! within a plane (`(d * H + h) * W + w`; `h * W + w` in 2-d), as ATen's.

use super::elementwise::simd;
use super::norm::dispatch_float;
use super::reduce::par_min;
use super::{parallel, KernelError, Strided};
use crate::dtype::DType;
use half::{bf16, f16};

/// Kernel, stride, padding and dilation of a 2-d window (height, width).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

/// Kernel, stride, padding and dilation of a 3-d window (depth, height, width).
#[derive(Clone, Copy, Debug)]
pub struct Window3 {
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
}

impl From<Window> for Window3 {
    /// The 2-d window as a 3-d one of depth 1.
    fn from(w: Window) -> Window3 {
        let lift = |v: [usize; 2], d: usize| [d, v[0], v[1]];
        Window3 {
            kernel: lift(w.kernel, 1),
            stride: lift(w.stride, 1),
            padding: lift(w.padding, 0),
            dilation: lift(w.dilation, 1),
        }
    }
}

fn check_dims(op: &str, what: &str, s: &Strided, n: usize) -> Result<(), KernelError> {
    if s.ndim() != n {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must be a {n}-d view, got {:?}",
            s.sizes
        )));
    }
    Ok(())
}

/// Each 4-d view, checked, as a 5-d view of depth 1.
fn lift<const K: usize>(
    op: &str,
    views: [(&str, &Strided); K],
) -> Result<[Strided; K], KernelError> {
    let mut r = Vec::with_capacity(K);
    for (what, s) in views {
        check_dims(op, what, s, 4)?;
        let mut t = s.clone();
        t.sizes.insert(2, 1);
        t.strides.insert(2, 0);
        r.push(t);
    }
    Ok(r.try_into().unwrap_or_else(|_| unreachable!()))
}

fn check5(op: &str, views: &[(&str, &Strided)]) -> Result<(), KernelError> {
    views.iter().try_for_each(|(w, s)| check_dims(op, w, s, 5))
}

fn same_planes(op: &str, a: &Strided, b: &Strided) -> Result<(), KernelError> {
    if a.sizes[..2] != b.sizes[..2] {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: batch and channels differ: {:?} and {:?}",
            a.sizes, b.sizes
        )));
    }
    Ok(())
}

/// The spatial sizes of a 5-d view.
#[inline(always)]
fn dhw(s: &Strided) -> [usize; 3] {
    [s.sizes[2], s.sizes[3], s.sizes[4]]
}

// ---------------------------------------------------------------------------
// element types
// ---------------------------------------------------------------------------

/// An element type the pooling kernels take, with the arithmetic ATen's CPU
/// kernels use for it: `Acc` is `at::opmath_type` (float32 for float32,
/// bfloat16 and float16; float64 for float64; int64 for the integers).
pub(super) trait PoolT: Copy + Default + Send + Sync + 'static {
    type Acc: Copy + PartialOrd + Send + Sync;
    /// `+0` in `Acc`.
    const ZERO: Self::Acc;
    /// The start of a max: -inf, or the integer type's minimum (ATen's).
    const LOWEST: Self::Acc;
    fn acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
    fn is_nan(a: Self::Acc) -> bool;
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `a / d` as C++ divides an `Acc` by an `int64_t` (integers truncate).
    fn div(a: Self::Acc, d: i64) -> Self::Acc;
    /// `a += b` in the element type (C++'s rounding for bfloat16 / float16).
    #[inline(always)]
    fn add_to(a: &mut Self, b: Self) {
        *a = Self::from_acc(Self::add(a.acc(), b.acc()));
    }
}

macro_rules! pool_float {
    ($t:ty, $acc:ty, $to:expr, $from:expr) => {
        impl PoolT for $t {
            type Acc = $acc;
            const ZERO: $acc = 0.0;
            const LOWEST: $acc = <$acc>::NEG_INFINITY;
            #[inline(always)]
            fn acc(self) -> $acc {
                $to(self)
            }
            #[inline(always)]
            fn from_acc(a: $acc) -> $t {
                $from(a)
            }
            #[inline(always)]
            #[allow(clippy::eq_op)]
            fn is_nan(a: $acc) -> bool {
                a != a
            }
            #[inline(always)]
            fn add(a: $acc, b: $acc) -> $acc {
                a + b
            }
            #[inline(always)]
            fn div(a: $acc, d: i64) -> $acc {
                a / d as $acc
            }
        }
    };
}
pool_float!(f32, f32, |v| v, |v| v);
pool_float!(f64, f64, |v| v, |v| v);
pool_float!(bf16, f32, bf16::to_f32, bf16::from_f32);
pool_float!(f16, f32, f16::to_f32, f16::from_f32);

macro_rules! pool_int {
    ($($t:ty),*) => {$(
        impl PoolT for $t {
            type Acc = i64;
            const ZERO: i64 = 0;
            const LOWEST: i64 = <$t>::MIN as i64;
            #[inline(always)]
            fn acc(self) -> i64 {
                self as i64
            }
            // int64 -> narrower integer wraps, as C++'s conversion.
            #[inline(always)]
            fn from_acc(a: i64) -> $t {
                a as $t
            }
            #[inline(always)]
            fn is_nan(_: i64) -> bool {
                false
            }
            #[inline(always)]
            fn add(a: i64, b: i64) -> i64 {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn div(a: i64, d: i64) -> i64 {
                if d == 0 { 0 } else { a.wrapping_div(d) }
            }
        }
    )*};
}
pool_int!(i64, i32, i16, i8, u8);

/// Calls `$f::<T>(args)` with `T` the element type of `$dtype`: every type
/// CPU's max pooling takes (floats, bfloat16, float16 and the integers; not
/// bool, which has no [`PoolT`]); any other dtype gives `UnsupportedDtype`.
macro_rules! pool_types {
    ($op:expr, $dtype:expr, $f:ident, $($arg:expr),*) => {
        $crate::dispatch_dtype!(
            $dtype,
            [F32, F64, BF16, F16, I64, I32, I16, I8, U8],
            T => $f::<T>($($arg),*),
            d => Err($crate::kernels::KernelError::UnsupportedDtype { op: $op, dtype: d })
        )
    };
}

// ---------------------------------------------------------------------------
// operands, planes and the parallel split
// ---------------------------------------------------------------------------

/// A 5-d operand `[batch, channels, depth, height, width]` as typed
/// pointer and strides (in elements).
#[derive(Clone, Copy)]
struct Op<E> {
    ptr: *mut E,
    dims: [usize; 3],
    st: [isize; 5],
}

// SAFETY: a description of memory; tasks touch disjoint planes or rows.
unsafe impl<E> Send for Op<E> {}
unsafe impl<E> Sync for Op<E> {}

impl<E: Copy + Default> Op<E> {
    fn new(s: &Strided) -> Op<E> {
        let st = [0, 1, 2, 3, 4].map(|k| s.strides[k]);
        Op {
            ptr: s.ptr as *mut E,
            dims: dhw(s),
            st,
        }
    }

    fn plane_len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether every plane is row-major (any batch and channel strides).
    fn dense(&self) -> bool {
        self.flat_step(1)
    }

    /// Whether every plane's flat index `i` (`(d * H + h) * W + w`) is at
    /// offset `i * step` from the plane's start (`step` 1: row-major planes;
    /// the channel count: channels-last memory).
    fn flat_step(&self, step: isize) -> bool {
        let mut expect = step;
        for k in (0..3).rev() {
            if self.dims[k] != 1 && self.st[2 + k] != expect {
                return false;
            }
            expect *= self.dims[k] as isize;
        }
        true
    }

    #[inline(always)]
    fn at(&self, n: usize, c: usize, [d, h, w]: [usize; 3]) -> *mut E {
        let o = n as isize * self.st[0]
            + c as isize * self.st[1]
            + d as isize * self.st[2]
            + h as isize * self.st[3]
            + w as isize * self.st[4];
        self.ptr.wrapping_offset(o)
    }

    /// Plane `(n, c)` to read: the memory itself when planes are dense,
    /// else a copy in `buf`.
    ///
    /// # Safety
    /// `(n, c)` is inside the view.
    #[inline(always)]
    unsafe fn read<'a>(&self, dense: bool, n: usize, c: usize, buf: &'a mut Vec<E>) -> &'a [E] {
        if dense {
            return std::slice::from_raw_parts(self.at(n, c, [0; 3]), self.plane_len());
        }
        buf.clear();
        let [dd, hh, ww] = self.dims;
        for d in 0..dd {
            for h in 0..hh {
                for w in 0..ww {
                    buf.push(*self.at(n, c, [d, h, w]));
                }
            }
        }
        buf
    }

    /// Plane `(n, c)` to write (every element): the memory itself when
    /// planes are dense, else `buf`, which [`Op::flush`] then stores.
    ///
    /// # Safety
    /// `(n, c)` is inside the view and no other task writes it.
    #[inline(always)]
    unsafe fn write<'a>(
        &self,
        dense: bool,
        n: usize,
        c: usize,
        buf: &'a mut Vec<E>,
    ) -> &'a mut [E] {
        if dense {
            return std::slice::from_raw_parts_mut(self.at(n, c, [0; 3]), self.plane_len());
        }
        buf.clear();
        buf.resize(self.plane_len(), E::default());
        buf
    }

    /// Stores a plane [`Op::write`] handed out as `buf`.
    ///
    /// # Safety
    /// As [`Op::write`].
    #[inline(always)]
    unsafe fn flush(&self, dense: bool, n: usize, c: usize, buf: &[E]) {
        if dense {
            return;
        }
        let [dd, hh, ww] = self.dims;
        let mut k = 0;
        for d in 0..dd {
            for h in 0..hh {
                for w in 0..ww {
                    *self.at(n, c, [d, h, w]) = buf[k];
                    k += 1;
                }
            }
        }
    }
}

/// Runs `f(first, end)` over `0..total` in index ranges (one range when
/// `work` is small), each compiled for the SIMD level in use
/// ([`simd::dispatch`]: callers pass `#[inline(always)]` closures). Work is
/// split by index only, so results do not depend on the thread count.
fn split(
    total: usize,
    work: usize,
    f: impl Fn(usize, usize) -> Result<(), KernelError> + Sync + Send,
) -> Result<(), KernelError> {
    if total == 0 {
        return Ok(());
    }
    let tasks = if work > par_min() && total > 1 {
        total.min(parallel::num_threads() * 4)
    } else {
        1
    };
    let chunk = total.div_ceil(tasks);
    let g = |t: usize| {
        let (a, b) = (t * chunk, ((t + 1) * chunk).min(total));
        simd::dispatch(
            #[inline(always)]
            || f(a, b),
        )
    };
    if tasks == 1 {
        g(0)
    } else {
        parallel::try_parallel_for(total.div_ceil(chunk), g)
    }
}

/// Whether the channels-last kernels take these operands: channels
/// innermost (stride 1) in every one, and more than one channel.
fn channels_last(views: &[&Strided]) -> bool {
    views.iter().all(|s| s.strides[1] == 1) && views[0].sizes[1] > 1
}

// ---------------------------------------------------------------------------
// window geometry
// ---------------------------------------------------------------------------

/// Output rows shorter than this are computed window by window: the
/// vectorized interior (accumulator rows allocated per task, one pass per
/// tap) cost more to set up than a few windows, about 3,000 instructions of
/// a 1x2x4x4 `max_pool2d`'s 14,600 (callgrind) against CPU's whole 8,500.
const SHORT_ROW: usize = 8;

/// Input, output and window sizes per spatial dim (depth, height, width).
#[derive(Clone, Copy, Debug)]
struct Geo {
    i: [usize; 3],
    o: [usize; 3],
    k: [usize; 3],
    s: [usize; 3],
    p: [usize; 3],
    d: [usize; 3],
}

impl Geo {
    fn new(x: &Strided, out: &Strided, w: &Window3) -> Geo {
        Geo {
            i: dhw(x),
            o: dhw(out),
            k: w.kernel,
            s: w.stride.map(|v| v.max(1)),
            p: w.padding,
            d: w.dilation.map(|v| v.max(1)),
        }
    }

    /// The taps of output `o`'s dilated max window along `dim`: the first
    /// input position (after skipping the padding by the dilation, as ATen),
    /// the end (exclusive) and the first tap's number.
    #[inline(always)]
    fn taps(&self, dim: usize, o: usize) -> (isize, isize, usize) {
        let (k, d) = (self.k[dim] as isize, self.d[dim] as isize);
        let mut a = o as isize * self.s[dim] as isize - self.p[dim] as isize;
        let end = (a + (k - 1) * d + 1).min(self.i[dim] as isize);
        let mut first = 0;
        while a < 0 {
            a += d;
            first += 1;
        }
        (a, end, first)
    }

    /// Output `o`'s average window along `dim`: clipped `[lo, hi)` and the
    /// size counted with padding (ATen's `pool_size` factor).
    #[inline(always)]
    fn avg(&self, dim: usize, o: usize) -> (usize, usize, usize) {
        let (k, p, len) = (
            self.k[dim] as isize,
            self.p[dim] as isize,
            self.i[dim] as isize,
        );
        let lo = o as isize * self.s[dim] as isize - p;
        let hi = (lo + k).min(len + p);
        let pool = (hi - lo).max(0) as usize;
        let (a, b) = (lo.max(0), hi.min(len));
        (a as usize, b.max(a) as usize, pool)
    }

    /// The outputs along the width that take the vectorized path: the
    /// [`Geo::interior`], or none when output rows are shorter than
    /// [`SHORT_ROW`].
    fn vector_span(&self) -> (usize, usize) {
        if self.o[2] < SHORT_ROW {
            (0, 0)
        } else {
            self.interior()
        }
    }

    /// The outputs along the width whose whole window is inside the input:
    /// `[lo, hi)` (the others are the border).
    fn interior(&self) -> (usize, usize) {
        let (k, s, p, d, w, ow) = (
            self.k[2], self.s[2], self.p[2], self.d[2], self.i[2], self.o[2],
        );
        let lo = p.div_ceil(s).min(ow);
        let span = k.saturating_sub(1) * d;
        let hi = if w + p > span {
            ((w - 1 + p - span) / s + 1).min(ow)
        } else {
            0
        };
        (lo, hi.max(lo))
    }

    fn divisor(&self, rng: [(usize, usize, usize); 3], cip: bool, over: Option<i64>) -> i64 {
        match over {
            Some(d) => d,
            None if cip => rng.iter().map(|r| r.2 as i64).product(),
            None => rng.iter().map(|r| (r.1 - r.0) as i64).product(),
        }
    }
}

// ---------------------------------------------------------------------------
// max pooling
// ---------------------------------------------------------------------------

/// Max pooling (2-d) of `x` into `out` with the flat (`h * W + w`) index of
/// each maximum in `indices` (int64). NaN wins (as on CPU).
pub fn max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window,
) -> Result<(), KernelError> {
    let [o, i, x] = lift(
        "max_pool2d_with_indices",
        [("output", out), ("indices", indices), ("input", x)],
    )?;
    max_pool(
        "max_pool2d_with_indices",
        "max_pool2d",
        &o,
        &i,
        &x,
        win.into(),
    )
}

/// Max pooling (3-d) of `x` into `out` with the flat index of each maximum
/// in `indices` (int64). NaN wins (as on CPU).
pub fn max_pool3d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window3,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool3d_with_indices";
    check5(OP, &[("output", out), ("indices", indices), ("input", x)])?;
    max_pool(OP, "max_pool3d", out, indices, x, win)
}

fn max_pool(
    op: &str,
    dtype_op: &'static str,
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window3,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: indices must be int64 like the output"
        )));
    }
    if win.kernel.iter().product::<usize>() > u32::MAX as usize {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: kernel {:?} too large",
            win.kernel
        )));
    }
    let g = Geo::new(x, out, &win);
    pool_types!(dtype_op, x.dtype, max_typed, out, indices, x, &g)
}

fn max_typed<T: PoolT>(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    g: &Geo,
) -> Result<(), KernelError> {
    let (xo, oo, io) = (Op::<T>::new(x), Op::<T>::new(out), Op::<i64>::new(indices));
    let (nb, nc) = (x.sizes[0], x.sizes[1]);
    let work = out.numel() * g.k.iter().product::<usize>();
    if channels_last(&[x, out, indices]) {
        let rows = nb * g.o[0] * g.o[1];
        return split(
            rows,
            work,
            #[inline(always)]
            |a, b| {
                for r in a..b {
                    // SAFETY: row r of the outputs is this task's alone.
                    unsafe { max_cl_row::<T>(g, &xo, &oo, &io, nc, r) };
                }
                Ok(())
            },
        );
    }
    let dense = [xo.dense(), oo.dense(), io.dense()];
    split(
        nb * nc,
        work,
        #[inline(always)]
        |a, b| {
            let (mut bx, mut bo, mut bi) = (Vec::new(), Vec::new(), Vec::new());
            let (mut best, mut tap) = (Vec::new(), Vec::new());
            for p in a..b {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside the views and this task's alone.
                unsafe {
                    let xs = xo.read(dense[0], n, c, &mut bx);
                    let os = oo.write(dense[1], n, c, &mut bo);
                    let is = io.write(dense[2], n, c, &mut bi);
                    max_plane::<T>(g, xs, os, is, &mut best, &mut tap);
                    oo.flush(dense[1], n, c, &bo);
                    io.flush(dense[2], n, c, &bi);
                }
            }
            Ok(())
        },
    )
}

/// The maximum and its flat index of one output's window, ATen's loop:
/// taps in row-major order, a later tap wins when greater or NaN.
#[inline(always)]
fn max_window<T: PoolT>(
    g: &Geo,
    ranges: [(isize, isize, usize); 3],
    read: impl Fn(usize) -> T,
) -> (T::Acc, i64) {
    let [ih, iw] = [g.i[1] as isize, g.i[2] as isize];
    let [(d0, d1, _), (h0, h1, _), (w0, w1, _)] = ranges;
    let [dd, dh, dw] = g.d.map(|v| v as isize);
    let mut bi = (d0 * ih + h0) * iw + w0;
    let mut bv = T::LOWEST;
    let mut d = d0;
    while d < d1 {
        let mut h = h0;
        while h < h1 {
            let mut w = w0;
            while w < w1 {
                let i = (d * ih + h) * iw + w;
                let v = read(i as usize).acc();
                if v > bv || T::is_nan(v) {
                    bv = v;
                    bi = i;
                }
                w += dw;
            }
            h += dh;
        }
        d += dd;
    }
    (bv, bi as i64)
}

/// One plane of max pooling. Outputs whose window lies inside the input
/// along the width (the interior) run a row at a time: for each tap in
/// ATen's order, a lane-wise compare over the row's outputs, so the
/// maxima and indices are ATen's; border outputs run [`max_window`].
#[inline(always)]
fn max_plane<T: PoolT>(
    g: &Geo,
    x: &[T],
    out: &mut [T],
    idx: &mut [i64],
    best: &mut Vec<T::Acc>,
    tap: &mut Vec<u32>,
) {
    let [ih, iw] = [g.i[1], g.i[2]];
    let [od_n, oh_n, ow_n] = g.o;
    let [_, kh_n, kw_n] = g.k;
    let (lo, hi) = g.vector_span();
    let n_in = hi - lo;
    best.clear();
    best.resize(n_in, T::LOWEST);
    tap.clear();
    tap.resize(n_in, 0);
    // Tap (kd, kh, kw)'s flat offset from its window's origin (for the
    // interior; none for short rows, which run window by window).
    let [kd_n, _, _] = g.k;
    let taps = if n_in == 0 { 0 } else { kd_n * kh_n * kw_n };
    let tap_offs: Vec<isize> = (0..taps)
        .map(|t| {
            let (kd, kh, kw) = (t / (kh_n * kw_n), (t / kw_n) % kh_n, t % kw_n);
            ((kd * g.d[0] * ih + kh * g.d[1]) * iw + kw * g.d[2]) as isize
        })
        .collect();
    for od in 0..od_n {
        let rd = g.taps(0, od);
        for oh in 0..oh_n {
            let rh = g.taps(1, oh);
            let orow = (od * oh_n + oh) * ow_n;
            let empty = rd.0 >= rd.1 || rh.0 >= rh.1;
            for ow in (0..lo)
                .chain(hi..ow_n)
                .chain(if empty { lo..hi } else { 0..0 })
            {
                let (v, i) = max_window::<T>(g, [rd, rh, g.taps(2, ow)], |i| x[i]);
                out[orow + ow] = T::from_acc(v);
                idx[orow + ow] = i;
            }
            if n_in == 0 || empty {
                continue;
            }
            best.fill(T::LOWEST);
            tap.fill(((rd.2 * kh_n + rh.2) * kw_n) as u32);
            let (mut d, mut kd) = (rd.0 as usize, rd.2);
            while d < rd.1 as usize {
                let (mut h, mut kh) = (rh.0 as usize, rh.2);
                while h < rh.1 as usize {
                    let row = &x[(d * ih + h) * iw..][..iw];
                    for kw in 0..kw_n {
                        let t = ((kd * kh_n + kh) * kw_n + kw) as u32;
                        let first = lo * g.s[2] + kw * g.d[2] - g.p[2];
                        match g.s[2] {
                            1 => max_taps::<T, 1>(row, first, 1, best, tap, t),
                            2 => max_taps::<T, 2>(row, first, 2, best, tap, t),
                            s => max_taps::<T, 0>(row, first, s, best, tap, t),
                        }
                    }
                    h += g.d[1];
                    kh += 1;
                }
                d += g.d[0];
                kd += 1;
            }
            // The flat index of output ow's maximum: its window's origin
            // plus its tap's offset (a table: no divisions per output).
            let d = od as isize * g.s[0] as isize - g.p[0] as isize;
            let h = oh as isize * g.s[1] as isize - g.p[1] as isize;
            let origin = (d * ih as isize + h) * iw as isize - g.p[2] as isize;
            for j in 0..n_in {
                let ow = lo + j;
                out[orow + ow] = T::from_acc(best[j]);
                let w = origin + (ow * g.s[2]) as isize;
                idx[orow + ow] = (w + tap_offs[tap[j] as usize]) as i64;
            }
        }
    }
}

/// One tap over a row of interior outputs: `row[first + j * stride]` against
/// `best[j]` (stride `S` when nonzero, else `s`, so the common strides
/// compile to fixed-stride loads). A strided tap is first copied into a
/// short contiguous block: over strided loads the compare-and-select loop
/// compiled to scalar branches, mispredicted on real data (a 3x3 stride-2
/// `max_pool2d` of 8x64x112x112 took 23 ms against CPU's 18).
#[inline(always)]
fn max_taps<T: PoolT, const S: usize>(
    row: &[T],
    first: usize,
    s: usize,
    best: &mut [T::Acc],
    tap: &mut [u32],
    t: u32,
) {
    let s = if S == 0 { s } else { S };
    let n = best.len();
    let tap = &mut tap[..n];
    let xs = &row[first..first + (n - 1) * s + 1];
    if s == 1 {
        max_run::<T>(&xs[..n], best, tap, t);
        return;
    }
    const BLOCK: usize = 64;
    let mut vals = [T::default(); BLOCK];
    for j0 in (0..n).step_by(BLOCK) {
        let m = BLOCK.min(n - j0);
        for (j, v) in vals[..m].iter_mut().enumerate() {
            *v = xs[(j0 + j) * s];
        }
        max_run::<T>(&vals[..m], &mut best[j0..j0 + m], &mut tap[j0..j0 + m], t);
    }
}

/// `best[j] = vals[j]` and `tap[j] = t` where `vals[j]` is greater or NaN
/// (ATen's rule), over contiguous operands, without branches.
#[inline(always)]
fn max_run<T: PoolT>(vals: &[T], best: &mut [T::Acc], tap: &mut [u32], t: u32) {
    let n = vals.len();
    let (best, tap) = (&mut best[..n], &mut tap[..n]);
    for j in 0..n {
        let v = vals[j].acc();
        // `|`, not `||`: no branch, so the loop vectorizes.
        let m = (v > best[j]) | T::is_nan(v);
        best[j] = if m { v } else { best[j] };
        tap[j] = if m { t } else { tap[j] };
    }
}

/// Output row `r` (of `batch x depth x height` rows) of channels-last max
/// pooling: for each output, the window's taps in ATen's order, each a
/// lane-wise compare over a block of channels.
///
/// # Safety
/// Row `r` is inside the views and this task's alone; channels are at
/// stride 1 in every operand.
#[inline(always)]
unsafe fn max_cl_row<T: PoolT>(
    g: &Geo,
    x: &Op<T>,
    out: &Op<T>,
    idx: &Op<i64>,
    nc: usize,
    r: usize,
) {
    // Flat indices as int32 when the plane allows: the compiler selects a
    // vector of them under the comparison's mask, where int64 ones went
    // lane by lane through scalar moves (perf).
    if g.i.iter().product::<usize>() <= i32::MAX as usize {
        max_cl_outputs::<T, i32>(g, x, out, idx, nc, r)
    } else {
        max_cl_outputs::<T, i64>(g, x, out, idx, nc, r)
    }
}

/// [`max_cl_row`] with flat indices of type `I`.
///
/// # Safety
/// As [`max_cl_row`]; `I` holds every flat index of the plane.
#[inline(always)]
unsafe fn max_cl_outputs<T: PoolT, I: FlatIdx>(
    g: &Geo,
    x: &Op<T>,
    out: &Op<T>,
    idx: &Op<i64>,
    nc: usize,
    r: usize,
) {
    let (n, od, oh) = (r / (g.o[0] * g.o[1]), (r / g.o[1]) % g.o[0], r % g.o[1]);
    let (rd, rh) = (g.taps(0, od), g.taps(1, oh));
    for ow in 0..g.o[2] {
        let ranges = [rd, rh, g.taps(2, ow)];
        let at = [od, oh, ow];
        let mut c = 0;
        while c + 4 * CL_BLOCK <= nc {
            // Four vectors of maxima: four independent compare chains.
            max_cl_block::<T, I, { 4 * CL_BLOCK }>(g, x, out, idx, n, c, at, ranges);
            c += 4 * CL_BLOCK;
        }
        while c + CL_BLOCK <= nc {
            max_cl_block::<T, I, CL_BLOCK>(g, x, out, idx, n, c, at, ranges);
            c += CL_BLOCK;
        }
        while c < nc {
            max_cl_block::<T, I, 1>(g, x, out, idx, n, c, at, ranges);
            c += 1;
        }
    }
}

/// A flat index type of [`max_cl_block`].
trait FlatIdx: Copy + Ord {
    fn new(i: isize) -> Self;
    /// `i` if `m`, else 0, without a branch or select.
    fn masked(m: bool, i: Self) -> Self;
    fn wide(self) -> i64;
}
macro_rules! flat_idx {
    ($($t:ty),*) => {$(
        impl FlatIdx for $t {
            #[inline(always)]
            fn new(i: isize) -> $t {
                i as $t
            }
            #[inline(always)]
            fn masked(m: bool, i: $t) -> $t {
                (m as $t).wrapping_neg() & i
            }
            #[inline(always)]
            fn wide(self) -> i64 {
                self as i64
            }
        }
    )*};
}
flat_idx!(i32, i64);

/// Channels of one channels-last row's window blocked by: the block's
/// maxima and taps stay in registers over the window.
const CL_BLOCK: usize = 16;

/// Channels `c..c + B` of output `o`'s window `ranges`: ATen's loop per
/// channel (taps in row-major order, a later tap wins when greater or NaN),
/// with the taps outside the channels so that the `B` maxima and indices
/// stay in registers (one pass per tap over a buffer in memory had made the
/// row 1.2x CPU's time: 8x64x112x112, k3 s2 p1).
///
/// # Safety
/// As [`max_cl_row`]; `c + B <= nc`; `I` holds every flat index of the
/// plane.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn max_cl_block<T: PoolT, I: FlatIdx, const B: usize>(
    g: &Geo,
    x: &Op<T>,
    out: &Op<T>,
    idx: &Op<i64>,
    n: usize,
    c: usize,
    [od, oh, ow]: [usize; 3],
    [rd, rh, rw]: [(isize, isize, usize); 3],
) {
    let [ih, iw] = [g.i[1] as isize, g.i[2] as isize];
    let mut best = [T::LOWEST; B];
    let mut tap = [I::new((rd.0 * ih + rh.0) * iw + rw.0); B];
    let mut d = rd.0;
    while d < rd.1 {
        let mut h = rh.0;
        while h < rh.1 {
            let mut w = rw.0;
            while w < rw.1 {
                let i = I::new((d * ih + h) * iw + w);
                let xs = &*(x.at(n, c, [d as usize, h as usize, w as usize]) as *const [T; B]);
                for k in 0..B {
                    let v = xs[k].acc();
                    let m = (v > best[k]) | T::is_nan(v);
                    best[k] = if m { v } else { best[k] };
                    // `if m { i } else { tap }` as a max: taps come in
                    // increasing flat order, so a new one is the largest yet
                    // (and 0 is no larger than any). The select was compiled
                    // lane by lane, the max is one vector op.
                    tap[k] = tap[k].max(I::masked(m, i));
                }
                w += g.d[2] as isize;
            }
            h += g.d[1] as isize;
        }
        d += g.d[0] as isize;
    }
    let os = &mut *(out.at(n, c, [od, oh, ow]) as *mut [T; B]);
    let is = &mut *(idx.at(n, c, [od, oh, ow]) as *mut [i64; B]);
    for k in 0..B {
        os[k] = T::from_acc(best[k]);
        is[k] = tap[k].wide();
    }
}

/// Gradient of [`max_pool2d`] and [`adaptive_max_pool2d`]:
/// `grad_input[idx] += grad_output` per plane.
pub fn max_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool2d_with_indices_backward";
    let [gi, go, i] = lift(
        OP,
        [
            ("grad_input", grad_input),
            ("grad_output", grad_output),
            ("indices", indices),
        ],
    )?;
    max_pool_backward(OP, "max_pool2d_backward", &gi, &go, &i)
}

/// Gradient of [`max_pool3d`] and [`adaptive_max_pool3d`].
pub fn max_pool3d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool3d_with_indices_backward";
    check5(
        OP,
        &[
            ("grad_input", grad_input),
            ("grad_output", grad_output),
            ("indices", indices),
        ],
    )?;
    max_pool_backward(OP, "max_pool3d_backward", grad_input, grad_output, indices)
}

fn max_pool_backward(
    op: &'static str,
    dtype_op: &'static str,
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    same_planes(op, grad_input, grad_output)?;
    if indices.sizes != grad_output.sizes || indices.dtype != DType::I64 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: expected int64 indices of shape {:?}, got {:?} of {}",
            grad_output.sizes,
            indices.sizes,
            indices.dtype.name()
        )));
    }
    if grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: dtype_op,
            dtype: grad_output.dtype,
        });
    }
    dispatch_float!(
        dtype_op,
        grad_input.dtype,
        max_back_typed,
        op,
        grad_input,
        grad_output,
        indices
    )
}

fn out_of_range(op: &str, i: i64, plane: usize) -> KernelError {
    KernelError::InvalidArgument(format!(
        "foo: {op}: index {i} out of range for a plane of {plane} elements"
    ))
}

fn max_back_typed<T: PoolT>(
    op: &'static str,
    gi: &Strided,
    go: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    let (gio, goo, io) = (Op::<T>::new(gi), Op::<T>::new(go), Op::<i64>::new(indices));
    let (nb, nc) = (gi.sizes[0], gi.sizes[1]);
    let plane = gio.plane_len();
    let work = gi.numel() + go.numel();
    if channels_last(&[gi, go, indices]) {
        // Per batch element (the scatter of a channel stays in its batch).
        return split(
            nb,
            work,
            #[inline(always)]
            |a, b| {
                for n in a..b {
                    // SAFETY: batch n is this task's alone; channels at stride 1.
                    unsafe { max_back_cl::<T>(&gio, &goo, &io, nc, n) }
                        .map_err(|i| out_of_range(op, i, plane))?;
                }
                Ok(())
            },
        );
    }
    let dense = [gio.dense(), goo.dense(), io.dense()];
    split(
        nb * nc,
        work,
        #[inline(always)]
        |a, b| {
            let (mut bgi, mut bgo, mut bi) = (Vec::new(), Vec::new(), Vec::new());
            for p in a..b {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside the views and this task's alone.
                unsafe {
                    let g = goo.read(dense[1], n, c, &mut bgo);
                    let i = io.read(dense[2], n, c, &mut bi);
                    let o = gio.write(dense[0], n, c, &mut bgi);
                    max_back_plane::<T>(g, i, o).map_err(|i| out_of_range(op, i, plane))?;
                    gio.flush(dense[0], n, c, &bgi);
                }
            }
            Ok(())
        },
    )
}

/// `gi[idx[k]] += go[k]` over a plane (ATen skips index -1).
#[inline(always)]
fn max_back_plane<T: PoolT>(go: &[T], idx: &[i64], gi: &mut [T]) -> Result<(), i64> {
    gi.fill(T::default());
    let len = gi.len();
    for (&g, &i) in go.iter().zip(idx) {
        if i == -1 {
            continue;
        }
        if i < 0 || i as usize >= len {
            return Err(i);
        }
        T::add_to(&mut gi[i as usize], g);
    }
    Ok(())
}

/// Channels-last max pooling gradient of batch element `n`.
///
/// # Safety
/// Batch `n` is inside the views and this task's alone; channels are at
/// stride 1 in every operand.
#[inline(always)]
unsafe fn max_back_cl<T: PoolT>(
    gi: &Op<T>,
    go: &Op<T>,
    idx: &Op<i64>,
    nc: usize,
    n: usize,
) -> Result<(), i64> {
    let [id, ih, iw] = gi.dims;
    for d in 0..id {
        for h in 0..ih {
            for w in 0..iw {
                std::slice::from_raw_parts_mut(gi.at(n, 0, [d, h, w]), nc).fill(T::default());
            }
        }
    }
    let plane = gi.plane_len() as i64;
    let [od, oh, ow] = go.dims;
    let step = Some(gi.st[4]).filter(|&s| gi.flat_step(s));
    let base = gi.at(n, 0, [0; 3]);
    for d in 0..od {
        for h in 0..oh {
            for w in 0..ow {
                let gs = std::slice::from_raw_parts(go.at(n, 0, [d, h, w]), nc);
                let is = std::slice::from_raw_parts(idx.at(n, 0, [d, h, w]), nc);
                for c in 0..nc {
                    let i = is[c];
                    if i == -1 {
                        continue;
                    }
                    if !(0..plane).contains(&i) {
                        return Err(i);
                    }
                    let p = match step {
                        // Dense planes: the flat index times one stride, no
                        // division per element (two of them had made the
                        // pass 2x CPU's time: 8x64x112x112, k3 s2 p1).
                        Some(s) => base.wrapping_offset(i as isize * s + c as isize),
                        None => {
                            let i = i as usize;
                            let (q, w_) = (i / iw, i % iw);
                            gi.at(n, c, [q / ih, q % ih, w_])
                        }
                    };
                    T::add_to(&mut *p, gs[c]);
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// average pooling
// ---------------------------------------------------------------------------

/// Average pooling (2-d) of `x` into `out` (ATen's rules for padding,
/// `count_include_pad` and `divisor_override`; floats and int64, which
/// truncates, as CPU).
pub fn avg_pool2d(
    out: &Strided,
    x: &Strided,
    win: Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool2d";
    let [o, x] = lift(OP, [("output", out), ("input", x)])?;
    // CPU's: the floating types and int64.
    if !(x.dtype.is_floating() || x.dtype == DType::I64) {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: x.dtype,
        });
    }
    avg_pool(OP, &o, &x, win.into(), count_include_pad, divisor)
}

/// Average pooling (3-d) of `x` into `out` (float32, float64 and int64, as
/// CPU).
pub fn avg_pool3d(
    out: &Strided,
    x: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool3d";
    check5(OP, &[("output", out), ("input", x)])?;
    if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I64) {
        return Err(KernelError::UnsupportedDtype {
            op: "avg_pool3d_out_frame",
            dtype: x.dtype,
        });
    }
    avg_pool(OP, out, x, win, count_include_pad, divisor)
}

fn avg_pool(
    op: &'static str,
    out: &Strided,
    x: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op,
            dtype: out.dtype,
        });
    }
    let mut win = win;
    win.dilation = [1; 3];
    let g = Geo::new(x, out, &win);
    pool_types!(
        op,
        x.dtype,
        avg_typed,
        out,
        x,
        &g,
        count_include_pad,
        divisor
    )
}

fn avg_typed<T: PoolT>(
    out: &Strided,
    x: &Strided,
    g: &Geo,
    cip: bool,
    over: Option<i64>,
) -> Result<(), KernelError> {
    let (xo, oo) = (Op::<T>::new(x), Op::<T>::new(out));
    let (nb, nc) = (x.sizes[0], x.sizes[1]);
    let work = out.numel() * g.k.iter().product::<usize>();
    if channels_last(&[x, out]) {
        let rows = nb * g.o[0] * g.o[1];
        return split(
            rows,
            work,
            #[inline(always)]
            |a, b| {
                let mut acc = Vec::new();
                for r in a..b {
                    // SAFETY: row r of the output is this task's alone.
                    unsafe { avg_cl_row::<T>(g, &xo, &oo, nc, r, cip, over, &mut acc) };
                }
                Ok(())
            },
        );
    }
    let dense = [xo.dense(), oo.dense()];
    split(
        nb * nc,
        work,
        #[inline(always)]
        |a, b| {
            let (mut bx, mut bo, mut acc) = (Vec::new(), Vec::new(), Vec::new());
            for p in a..b {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside the views and this task's alone.
                unsafe {
                    let xs = xo.read(dense[0], n, c, &mut bx);
                    let os = oo.write(dense[1], n, c, &mut bo);
                    avg_plane::<T>(g, xs, os, cip, over, &mut acc);
                    oo.flush(dense[1], n, c, &bo);
                }
            }
            Ok(())
        },
    )
}

/// One plane of average pooling, ATen's sums (in `Acc`, taps in row-major
/// order, then one division): interior outputs a row at a time, each tap
/// added lane-wise over the row; border outputs one by one.
#[inline(always)]
fn avg_plane<T: PoolT>(
    g: &Geo,
    x: &[T],
    out: &mut [T],
    cip: bool,
    over: Option<i64>,
    acc: &mut Vec<T::Acc>,
) {
    let [ih, iw] = [g.i[1], g.i[2]];
    let [od_n, oh_n, ow_n] = g.o;
    let (lo, hi) = g.vector_span();
    let n_in = hi - lo;
    acc.clear();
    acc.resize(n_in, T::ZERO);
    for od in 0..od_n {
        let rd = g.avg(0, od);
        for oh in 0..oh_n {
            let rh = g.avg(1, oh);
            let orow = (od * oh_n + oh) * ow_n;
            for ow in (0..lo).chain(hi..ow_n) {
                let rw = g.avg(2, ow);
                let mut s = T::ZERO;
                for d in rd.0..rd.1 {
                    for h in rh.0..rh.1 {
                        for w in rw.0..rw.1 {
                            s = T::add(s, x[(d * ih + h) * iw + w].acc());
                        }
                    }
                }
                let empty = rd.0 >= rd.1 || rh.0 >= rh.1 || rw.0 >= rw.1;
                out[orow + ow] = if empty {
                    T::default()
                } else {
                    T::from_acc(T::div(s, g.divisor([rd, rh, rw], cip, over)))
                };
            }
            if n_in == 0 {
                continue;
            }
            let os = &mut out[orow + lo..orow + hi];
            if rd.0 >= rd.1 || rh.0 >= rh.1 {
                os.fill(T::default());
                continue;
            }
            let div = g.divisor([rd, rh, (0, g.k[2], g.k[2])], cip, over);
            acc.fill(T::ZERO);
            for d in rd.0..rd.1 {
                for h in rh.0..rh.1 {
                    let row = &x[(d * ih + h) * iw..][..iw];
                    for kw in 0..g.k[2] {
                        let first = lo * g.s[2] + kw - g.p[2];
                        match g.s[2] {
                            1 => add_taps::<T, 1>(row, first, 1, acc),
                            2 => add_taps::<T, 2>(row, first, 2, acc),
                            s => add_taps::<T, 0>(row, first, s, acc),
                        }
                    }
                }
            }
            for (o, &a) in os.iter_mut().zip(acc.iter()) {
                *o = T::from_acc(T::div(a, div));
            }
        }
    }
}

/// `acc[j] += row[first + j * stride]` (stride `S` when nonzero, else `s`).
#[inline(always)]
fn add_taps<T: PoolT, const S: usize>(row: &[T], first: usize, s: usize, acc: &mut [T::Acc]) {
    let s = if S == 0 { s } else { S };
    let n = acc.len();
    let xs = &row[first..first + (n - 1) * s + 1];
    for j in 0..n {
        acc[j] = T::add(acc[j], xs[j * s].acc());
    }
}

/// Output row `r` of channels-last average pooling: per output, the taps
/// summed lane-wise over the channels in ATen's order.
///
/// # Safety
/// As [`max_cl_row`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn avg_cl_row<T: PoolT>(
    g: &Geo,
    x: &Op<T>,
    out: &Op<T>,
    nc: usize,
    r: usize,
    cip: bool,
    over: Option<i64>,
    acc: &mut Vec<T::Acc>,
) {
    let (n, od, oh) = (r / (g.o[0] * g.o[1]), (r / g.o[1]) % g.o[0], r % g.o[1]);
    let (rd, rh) = (g.avg(0, od), g.avg(1, oh));
    acc.resize(nc, T::ZERO);
    for ow in 0..g.o[2] {
        let rw = g.avg(2, ow);
        let os = std::slice::from_raw_parts_mut(out.at(n, 0, [od, oh, ow]), nc);
        if rd.0 >= rd.1 || rh.0 >= rh.1 || rw.0 >= rw.1 {
            os.fill(T::default());
            continue;
        }
        let acc = &mut acc[..nc];
        acc.fill(T::ZERO);
        for d in rd.0..rd.1 {
            for h in rh.0..rh.1 {
                for w in rw.0..rw.1 {
                    let xs = std::slice::from_raw_parts(x.at(n, 0, [d, h, w]), nc);
                    for c in 0..nc {
                        acc[c] = T::add(acc[c], xs[c].acc());
                    }
                }
            }
        }
        let div = g.divisor([rd, rh, rw], cip, over);
        for c in 0..nc {
            os[c] = T::from_acc(T::div(acc[c], div));
        }
    }
}

/// Gradient of [`avg_pool2d`].
pub fn avg_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool2d_backward";
    let [gi, go] = lift(
        OP,
        [("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    avg_pool_backward(OP, &gi, &go, win.into(), count_include_pad, divisor)
}

/// Gradient of [`avg_pool3d`].
pub fn avg_pool3d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool3d_backward";
    check5(
        OP,
        &[("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    avg_pool_backward(OP, grad_input, grad_output, win, count_include_pad, divisor)
}

fn avg_pool_backward(
    op: &'static str,
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    same_planes(op, grad_input, grad_output)?;
    if grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op,
            dtype: grad_output.dtype,
        });
    }
    let mut win = win;
    win.dilation = [1; 3];
    let g = Geo::new(grad_input, grad_output, &win);
    dispatch_float!(
        op,
        grad_input.dtype,
        avg_back_typed,
        grad_input,
        grad_output,
        &g,
        count_include_pad,
        divisor
    )
}

fn avg_back_typed<T: PoolT>(
    gi: &Strided,
    go: &Strided,
    g: &Geo,
    cip: bool,
    over: Option<i64>,
) -> Result<(), KernelError> {
    let (gio, goo) = (Op::<T>::new(gi), Op::<T>::new(go));
    let (nb, nc) = (gi.sizes[0], gi.sizes[1]);
    let work = go.numel() * g.k.iter().product::<usize>();
    if channels_last(&[gi, go]) {
        return split(
            nb,
            work,
            #[inline(always)]
            |a, b| {
                let mut delta = Vec::new();
                for n in a..b {
                    // SAFETY: batch n is this task's alone.
                    unsafe { avg_back_cl::<T>(g, &gio, &goo, nc, n, cip, over, &mut delta) };
                }
                Ok(())
            },
        );
    }
    let dense = [gio.dense(), goo.dense()];
    split(
        nb * nc,
        work,
        #[inline(always)]
        |a, b| {
            let (mut bgi, mut bgo, mut up) = (Vec::new(), Vec::new(), Vec::new());
            for p in a..b {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside the views and this task's alone.
                unsafe {
                    let gos = goo.read(dense[1], n, c, &mut bgo);
                    let gis = gio.write(dense[0], n, c, &mut bgi);
                    avg_back_plane::<T>(g, gos, gis, cip, over, &mut up);
                    gio.flush(dense[0], n, c, &bgi);
                }
            }
            Ok(())
        },
    )
}

/// One plane of the average pooling gradient. ATen adds `go / divisor` of
/// each output, in output order, to every input of its window. Here an
/// output row's deltas are spread `stride` apart (zeros between) and added
/// to each input row its windows cover as a shifted row, taps from the last
/// to the first: every input receives the same terms in the same order as
/// in ATen's loop (plus exact zeros), and the rows vectorize.
#[inline(always)]
fn avg_back_plane<T: PoolT>(
    g: &Geo,
    go: &[T],
    gi: &mut [T],
    cip: bool,
    over: Option<i64>,
    up: &mut Vec<T>,
) {
    gi.fill(T::default());
    let [ih, iw] = [g.i[1], g.i[2]];
    let [od_n, oh_n, ow_n] = g.o;
    if ow_n == 0 {
        return;
    }
    let sw = g.s[2];
    let len = (ow_n - 1) * sw + 1;
    up.clear();
    up.resize(len, T::default());
    for od in 0..od_n {
        let rd = g.avg(0, od);
        for oh in 0..oh_n {
            let rh = g.avg(1, oh);
            if rd.0 >= rd.1 || rh.0 >= rh.1 {
                continue;
            }
            let orow = (od * oh_n + oh) * ow_n;
            for ow in 0..ow_n {
                let rw = g.avg(2, ow);
                let div = g.divisor([rd, rh, rw], cip, over);
                up[ow * sw] = T::from_acc(T::div(go[orow + ow].acc(), div));
            }
            for d in rd.0..rd.1 {
                for h in rh.0..rh.1 {
                    let row = &mut gi[(d * ih + h) * iw..][..iw];
                    for kw in (0..g.k[2]).rev() {
                        // input w takes up[w + p - kw]
                        let off = g.p[2] as isize - kw as isize;
                        let lo = (-off).max(0) as usize;
                        let hi = (len as isize - off).clamp(0, iw as isize) as usize;
                        if lo >= hi {
                            continue;
                        }
                        let src = &up[(lo as isize + off) as usize..][..hi - lo];
                        for (o, &u) in row[lo..hi].iter_mut().zip(src) {
                            T::add_to(o, u);
                        }
                    }
                }
            }
        }
    }
}

/// Channels-last average pooling gradient of batch element `n`: ATen's
/// loop, each output's delta added lane-wise over the channels.
///
/// # Safety
/// Batch `n` is inside the views and this task's alone; channels are at
/// stride 1 in both.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn avg_back_cl<T: PoolT>(
    g: &Geo,
    gi: &Op<T>,
    go: &Op<T>,
    nc: usize,
    n: usize,
    cip: bool,
    over: Option<i64>,
    delta: &mut Vec<T>,
) {
    let [id, ih, iw] = gi.dims;
    for d in 0..id {
        for h in 0..ih {
            for w in 0..iw {
                std::slice::from_raw_parts_mut(gi.at(n, 0, [d, h, w]), nc).fill(T::default());
            }
        }
    }
    delta.resize(nc, T::default());
    for od in 0..g.o[0] {
        let rd = g.avg(0, od);
        for oh in 0..g.o[1] {
            let rh = g.avg(1, oh);
            for ow in 0..g.o[2] {
                let rw = g.avg(2, ow);
                let div = g.divisor([rd, rh, rw], cip, over);
                let gs = std::slice::from_raw_parts(go.at(n, 0, [od, oh, ow]), nc);
                let delta = &mut delta[..nc];
                for c in 0..nc {
                    delta[c] = T::from_acc(T::div(gs[c].acc(), div));
                }
                for d in rd.0..rd.1 {
                    for h in rh.0..rh.1 {
                        for w in rw.0..rw.1 {
                            let gs = std::slice::from_raw_parts_mut(gi.at(n, 0, [d, h, w]), nc);
                            for c in 0..nc {
                                T::add_to(&mut gs[c], delta[c]);
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// adaptive pooling
// ---------------------------------------------------------------------------

/// ATen's adaptive window along one dim: `[start, end)` of output `o`.
#[inline(always)]
fn adaptive_range(o: usize, osize: usize, isize_: usize) -> (usize, usize) {
    let start = (o * isize_) / osize;
    let end = ((o + 1) * isize_).div_ceil(osize);
    (start, end)
}

/// The input window of adaptive pooling's output position `pos`.
#[inline(always)]
fn adaptive_window(pos: [usize; 3], out: [usize; 3], input: [usize; 3]) -> [(usize, usize); 3] {
    [0, 1, 2].map(|k| adaptive_range(pos[k], out[k], input[k]))
}

/// Runs `f(plane input, plane output)` for every plane of two operands with
/// the same batch and channels (reading `a`, writing every element of `b`).
pub(super) fn two_planes<A: Copy + Default, B: Copy + Default>(
    a: &Strided,
    b: &Strided,
    work: usize,
    f: impl Fn(&[A], &mut [B]) + Sync + Send,
) -> Result<(), KernelError> {
    let (ao, bo) = (Op::<A>::new(a), Op::<B>::new(b));
    let dense = [ao.dense(), bo.dense()];
    let nc = a.sizes[1];
    split(
        a.sizes[0] * nc,
        work,
        #[inline(always)]
        |p0, p1| {
            let (mut ba, mut bb) = (Vec::new(), Vec::new());
            for p in p0..p1 {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside both views and this task's alone.
                unsafe {
                    let xs = ao.read(dense[0], n, c, &mut ba);
                    let os = bo.write(dense[1], n, c, &mut bb);
                    f(xs, os);
                    bo.flush(dense[1], n, c, &bb);
                }
            }
            Ok(())
        },
    )
}

/// Adaptive average pooling of `x` into `out` (the output's height and width
/// are the target sizes).
pub fn adaptive_avg_pool2d(out: &Strided, x: &Strided) -> Result<(), KernelError> {
    const OP: &str = "adaptive_avg_pool2d";
    let [out, x] = lift(OP, [("output", out), ("input", x)])?;
    same_planes(OP, &x, &out)?;
    if out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: x.dtype,
        });
    }
    dispatch_float!(OP, x.dtype, adaptive_avg_typed, &out, &x)
}

fn adaptive_avg_typed<T: PoolT>(out: &Strided, x: &Strided) -> Result<(), KernelError> {
    let (input, osz) = (dhw(x), dhw(out));
    let [_, ih, iw] = input;
    // ATen's: the sum in `Acc`, then divided by each window extent in turn.
    two_planes::<T, T>(
        x,
        out,
        x.numel() + out.numel(),
        #[inline(always)]
        |xs, os| {
            let mut k = 0;
            for od in 0..osz[0] {
                for oh in 0..osz[1] {
                    for ow in 0..osz[2] {
                        let r = adaptive_window([od, oh, ow], osz, input);
                        let mut s = T::ZERO;
                        for d in r[0].0..r[0].1 {
                            for h in r[1].0..r[1].1 {
                                for w in r[2].0..r[2].1 {
                                    s = T::add(s, xs[(d * ih + h) * iw + w].acc());
                                }
                            }
                        }
                        for (a, b) in r {
                            s = T::div(s, (b - a) as i64);
                        }
                        os[k] = T::from_acc(s);
                        k += 1;
                    }
                }
            }
        },
    )
}

/// Gradient of [`adaptive_avg_pool2d`].
pub fn adaptive_avg_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_avg_pool2d_backward";
    let [gi, go] = lift(
        OP,
        [("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    same_planes(OP, &gi, &go)?;
    if go.dtype != gi.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: go.dtype,
        });
    }
    dispatch_float!(OP, gi.dtype, adaptive_avg_back_typed, &gi, &go)
}

fn adaptive_avg_back_typed<T: PoolT>(gi: &Strided, go: &Strided) -> Result<(), KernelError> {
    let (input, osz) = (dhw(gi), dhw(go));
    let [_, ih, iw] = input;
    two_planes::<T, T>(
        go,
        gi,
        gi.numel() + go.numel(),
        #[inline(always)]
        |gos, gis| {
            gis.fill(T::default());
            let mut k = 0;
            for od in 0..osz[0] {
                for oh in 0..osz[1] {
                    for ow in 0..osz[2] {
                        let r = adaptive_window([od, oh, ow], osz, input);
                        let mut g = gos[k].acc();
                        for (a, b) in r {
                            g = T::div(g, (b - a) as i64);
                        }
                        let g = T::from_acc(g);
                        for d in r[0].0..r[0].1 {
                            for h in r[1].0..r[1].1 {
                                for w in r[2].0..r[2].1 {
                                    T::add_to(&mut gis[(d * ih + h) * iw + w], g);
                                }
                            }
                        }
                        k += 1;
                    }
                }
            }
        },
    )
}

/// One output position's two source positions along a dim and their
/// weights (ATen's `compute_source_index_and_lambda`, which the glue runs).
#[derive(Clone, Copy, Debug)]
pub struct Tap {
    pub i0: usize,
    pub i1: usize,
    pub l0: f64,
    pub l1: f64,
}

/// The float element types' products for interpolation, in `Acc`.
trait Interp: PoolT {
    fn weight(w: f64) -> Self::Acc;
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

macro_rules! interp {
    ($($t:ty => $acc:ty),*) => {$(
        impl Interp for $t {
            #[inline(always)]
            fn weight(w: f64) -> $acc {
                w as $acc
            }
            #[inline(always)]
            fn mul(a: $acc, b: $acc) -> $acc {
                a * b
            }
        }
    )*};
}
interp!(f32 => f32, f64 => f64, bf16 => f32, f16 => f32);

fn check_taps(op: &str, taps: &[Tap], n_out: usize, n_in: usize) -> Result<(), KernelError> {
    if taps.len() != n_out || taps.iter().any(|t| t.i0 >= n_in || t.i1 >= n_in) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {} taps into {n_in} positions for {n_out} outputs",
            taps.len()
        )));
    }
    Ok(())
}

/// The checks both directions of bilinear upsampling make: `dst` (written)
/// and `src` (read) 4-d views, lifted to 5-d, with the same batch, channels
/// and dtype (else `src`'s dtype is refused), and a tap per output row and
/// column into the input's. The input side is `src` forward, `dst`
/// (grad_input) `backward`.
fn bilinear_operands(
    op: &'static str,
    dst: (&str, &Strided),
    src: (&str, &Strided),
    backward: bool,
    h: &[Tap],
    w: &[Tap],
) -> Result<[Strided; 2], KernelError> {
    let [d, s] = lift(op, [dst, src])?;
    same_planes(op, &s, &d)?;
    if d.dtype != s.dtype {
        return Err(KernelError::UnsupportedDtype { op, dtype: s.dtype });
    }
    let (input, output) = if backward { (&d, &s) } else { (&s, &d) };
    let ([_, ih, iw], [_, oh, ow]) = (dhw(input), dhw(output));
    check_taps(op, h, oh, ih)?;
    check_taps(op, w, ow, iw)?;
    Ok([d, s])
}

/// Bilinear upsampling (2-d) of `x` into `out` along the taps `h` (one per
/// output row) and `w` (one per output column), in CPU's order: each
/// source row's two columns blended, then the two rows, in `Acc`.
pub fn upsample_bilinear2d(
    out: &Strided,
    x: &Strided,
    h: &[Tap],
    w: &[Tap],
) -> Result<(), KernelError> {
    const OP: &str = "upsample_bilinear2d";
    let [out, x] = bilinear_operands(OP, ("output", out), ("input", x), false, h, w)?;
    dispatch_float!(OP, x.dtype, bilinear_typed, &out, &x, h, w)
}

fn acc_taps<T: Interp>(taps: &[Tap]) -> Vec<(usize, usize, T::Acc, T::Acc)> {
    taps.iter()
        .map(|t| (t.i0, t.i1, T::weight(t.l0), T::weight(t.l1)))
        .collect()
}

fn bilinear_typed<T: Interp>(
    out: &Strided,
    x: &Strided,
    h: &[Tap],
    w: &[Tap],
) -> Result<(), KernelError> {
    let [_, _, iw] = dhw(x);
    let (hs, ws) = (acc_taps::<T>(h), acc_taps::<T>(w));
    two_planes::<T, T>(
        x,
        out,
        x.numel() + 4 * out.numel(),
        #[inline(always)]
        |xs, os| {
            let mut k = 0;
            for &(h0, h1, lh0, lh1) in &hs {
                for &(w0, w1, lw0, lw1) in &ws {
                    let row = |r: usize| {
                        T::add(
                            T::mul(xs[r * iw + w0].acc(), lw0),
                            T::mul(xs[r * iw + w1].acc(), lw1),
                        )
                    };
                    os[k] = T::from_acc(T::add(T::mul(row(h0), lh0), T::mul(row(h1), lh1)));
                    k += 1;
                }
            }
        },
    )
}

/// Gradient of [`upsample_bilinear2d`]: every output gradient, weighted,
/// summed into its four source positions of `grad_input` (in `Acc`, then
/// stored), output positions in row-major order as CPU's.
pub fn upsample_bilinear2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    h: &[Tap],
    w: &[Tap],
) -> Result<(), KernelError> {
    const OP: &str = "upsample_bilinear2d_backward";
    let [gi, go] = bilinear_operands(
        OP,
        ("grad_input", grad_input),
        ("grad_output", grad_output),
        true,
        h,
        w,
    )?;
    dispatch_float!(OP, gi.dtype, bilinear_back_typed, &gi, &go, h, w)
}

fn bilinear_back_typed<T: Interp>(
    gi: &Strided,
    go: &Strided,
    h: &[Tap],
    w: &[Tap],
) -> Result<(), KernelError> {
    let [_, ih, iw] = dhw(gi);
    let (hs, ws) = (acc_taps::<T>(h), acc_taps::<T>(w));
    two_planes::<T, T>(
        go,
        gi,
        gi.numel() + 4 * go.numel(),
        #[inline(always)]
        |gos, gis| {
            let mut acc = vec![T::ZERO; ih * iw];
            let mut k = 0;
            for &(h0, h1, lh0, lh1) in &hs {
                for &(w0, w1, lw0, lw1) in &ws {
                    let g = gos[k].acc();
                    k += 1;
                    for (r, lr) in [(h0, lh0), (h1, lh1)] {
                        for (c, lc) in [(w0, lw0), (w1, lw1)] {
                            let i = r * iw + c;
                            acc[i] = T::add(acc[i], T::mul(T::mul(lr, lc), g));
                        }
                    }
                }
            }
            for (o, a) in gis.iter_mut().zip(acc) {
                *o = T::from_acc(a);
            }
        },
    )
}

/// Adaptive max pooling (2-d) of `x` into `out` (target sizes are the
/// output's), with the flat index of each maximum in `indices` (int64); the
/// gradient is [`max_pool2d_backward`]. NaN wins (as on CPU).
pub fn adaptive_max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_max_pool2d";
    let [o, i, x] = lift(OP, [("output", out), ("indices", indices), ("input", x)])?;
    adaptive_max_pool(OP, &o, &i, &x)
}

/// Adaptive max pooling (3-d); the gradient is [`max_pool3d_backward`].
pub fn adaptive_max_pool3d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_max_pool3d";
    check5(OP, &[("output", out), ("indices", indices), ("input", x)])?;
    adaptive_max_pool(OP, out, indices, x)
}

fn adaptive_max_pool(
    op: &'static str,
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: indices must be int64 like the output"
        )));
    }
    dispatch_float!(op, x.dtype, adaptive_max_typed, out, indices, x)
}

fn adaptive_max_typed<T: PoolT>(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    let (input, osz) = (dhw(x), dhw(out));
    let [_, ih, iw] = input;
    let (xo, oo, io) = (Op::<T>::new(x), Op::<T>::new(out), Op::<i64>::new(indices));
    let dense = [xo.dense(), oo.dense(), io.dense()];
    let nc = x.sizes[1];
    split(
        x.sizes[0] * nc,
        x.numel() + out.numel(),
        #[inline(always)]
        |p0, p1| {
            let (mut bx, mut bo, mut bi) = (Vec::new(), Vec::new(), Vec::new());
            for p in p0..p1 {
                let (n, c) = (p / nc, p % nc);
                // SAFETY: plane p is inside the views and this task's alone.
                unsafe {
                    let xs = xo.read(dense[0], n, c, &mut bx);
                    let os = oo.write(dense[1], n, c, &mut bo);
                    let is = io.write(dense[2], n, c, &mut bi);
                    let mut k = 0;
                    for od in 0..osz[0] {
                        for oh in 0..osz[1] {
                            for ow in 0..osz[2] {
                                let r = adaptive_window([od, oh, ow], osz, input);
                                let mut bi = (r[0].0 * ih + r[1].0) * iw + r[2].0;
                                let mut bv = T::LOWEST;
                                for d in r[0].0..r[0].1 {
                                    for h in r[1].0..r[1].1 {
                                        for w in r[2].0..r[2].1 {
                                            let i = (d * ih + h) * iw + w;
                                            let v = xs[i].acc();
                                            if v > bv || T::is_nan(v) {
                                                bv = v;
                                                bi = i;
                                            }
                                        }
                                    }
                                }
                                os[k] = T::from_acc(bv);
                                is[k] = bi as i64;
                                k += 1;
                            }
                        }
                    }
                    oo.flush(dense[1], n, c, &bo);
                    io.flush(dense[2], n, c, &bi);
                }
            }
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(v: &mut [f32], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F32, sizes)
    }

    #[test]
    fn max_pool_picks_max_and_index() {
        let mut x: Vec<f32> = (0..16).map(|v| ((v * 7) % 16) as f32).collect();
        let mut out = vec![0f32; 4];
        let mut idx = vec![0i64; 4];
        let iv = Strided::contiguous(idx.as_mut_ptr() as *mut u8, DType::I64, &[1, 1, 2, 2]);
        let win = Window {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
        };
        max_pool2d(
            &view(&mut out, &[1, 1, 2, 2]),
            &iv,
            &view(&mut x, &[1, 1, 4, 4]),
            win,
        )
        .unwrap();
        for (k, (&o, &i)) in out.iter().zip(&idx).enumerate() {
            assert_eq!(x[i as usize], o, "window {k}");
        }
        let mut gi = vec![1f32; 16];
        let mut go = vec![1f32; 4];
        max_pool2d_backward(
            &view(&mut gi, &[1, 1, 4, 4]),
            &view(&mut go, &[1, 1, 2, 2]),
            &iv,
        )
        .unwrap();
        assert_eq!(gi.iter().sum::<f32>(), 4.0);
    }

    #[test]
    fn avg_pool_padding_divisors() {
        let mut x = vec![1f32; 4];
        let mut out = vec![0f32; 4];
        let win = Window {
            kernel: [2, 2],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        };
        // output 3x3 would be full size; take 2x2 corner outputs
        let mut o9 = vec![0f32; 9];
        avg_pool2d(
            &view(&mut o9, &[1, 1, 3, 3]),
            &view(&mut x, &[1, 1, 2, 2]),
            win,
            true,
            None,
        )
        .unwrap();
        assert_eq!(o9[0], 0.25);
        avg_pool2d(
            &view(&mut o9, &[1, 1, 3, 3]),
            &view(&mut x, &[1, 1, 2, 2]),
            win,
            false,
            None,
        )
        .unwrap();
        assert_eq!(o9[0], 1.0);
        out.fill(0.0);
        adaptive_avg_pool2d(&view(&mut out, &[1, 1, 1, 1]), &view(&mut x, &[1, 1, 2, 2])).unwrap();
        assert_eq!(out[0], 1.0);
    }
}
