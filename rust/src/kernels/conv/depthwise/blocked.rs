//! Depthwise convolution over blocks of [`CB`] channels, channels in the
//! SIMD lanes (oneDNN's `nChw16c` layout, made per task from NCHW).
//!
//! The row kernels of the parent module vectorize along output columns: on
//! the small maps of a network's last stages (7 x 7, 14 x 14) most of a
//! 16-lane vector is past the row, and a stride-2 plane needs a phase-split
//! copy. Here one task takes one sample's block of 16 channels, transposes
//! its planes into a scratch `rows x cols x 16` (zero columns either side
//! for the padding), computes with every lane busy whatever the width or
//! stride, and transposes the result back into the planes:
//!
//! - Forward: `acc[16] = bias; acc += w[tap] * x[row][col]` over the taps
//!   whose input row exists, for [`NB`] output columns at a time (each tap's
//!   weight vector is loaded once per block).
//! - Input gradient: the same gather over the transposed output gradient,
//!   per input row and column phase (`iw mod stride`), the transposed
//!   convolution's taps.
//! - Weight gradient: per kernel row, `sum over pixels of grad * x` for up
//!   to eight taps (a kernel row) at once, summed per output row and the row sums added in
//!   order; per-sample partials are summed over the batch by the parent.
//!
//! Each lane is its own channel, so no result depends on the SIMD level,
//! the vector width or the thread count; the summation order (taps in
//! order, pixels in order) depends on the shapes only.

use super::super::{is_f32, Conv2d, Real, P};
use super::{for_planes, rows_for, Planes};

/// Channels per block: one AVX-512 vector of f32 (two of f64).
const CB: usize = 16;
/// Output columns per register block.
const NB: usize = 8;

type V<T> = [T; CB];

#[inline(always)]
unsafe fn ld<T: Real>(p: *const T) -> V<T> {
    std::ptr::read_unaligned(p as *const V<T>)
}

#[inline(always)]
unsafe fn st<T: Real>(p: *mut T, v: &V<T>) {
    std::ptr::write_unaligned(p as *mut V<T>, *v);
}

#[cfg(test)]
thread_local! {
    /// Tests: run the channel-block kernels (`Some(true)`), the row kernels
    /// (`Some(false)`) or the choice of [`preferred`] (`None`) on this thread.
    pub(in super::super) static FORCE: std::cell::Cell<Option<bool>> =
        const { std::cell::Cell::new(None) };
}

/// Calls `$obj.$f::<B>(args)` (`$obj.$f::<R, B>(args)` for `$f::<R>`) with
/// `B = $n` (at most [`NB`]): a block
/// narrower than [`NB`] (a row's last columns, a whole 7-wide row) still
/// gets one accumulator per column, independent add chains instead of one.
macro_rules! with_width {
    ($n:expr, $obj:ident . $f:ident :: < $r:literal > ( $($arg:expr),* )) => {
        match $n {
            8 => $obj.$f::<$r, 8>($($arg),*),
            7 => $obj.$f::<$r, 7>($($arg),*),
            6 => $obj.$f::<$r, 6>($($arg),*),
            5 => $obj.$f::<$r, 5>($($arg),*),
            4 => $obj.$f::<$r, 4>($($arg),*),
            3 => $obj.$f::<$r, 3>($($arg),*),
            2 => $obj.$f::<$r, 2>($($arg),*),
            _ => $obj.$f::<$r, 1>($($arg),*),
        }
    };
    ($n:expr, $obj:ident . $f:ident ( $($arg:expr),* )) => {
        match $n {
            8 => $obj.$f::<8>($($arg),*),
            7 => $obj.$f::<7>($($arg),*),
            6 => $obj.$f::<6>($($arg),*),
            5 => $obj.$f::<5>($($arg),*),
            4 => $obj.$f::<4>($($arg),*),
            3 => $obj.$f::<3>($($arg),*),
            2 => $obj.$f::<2>($($arg),*),
            _ => $obj.$f::<1>($($arg),*),
        }
    };
}

/// `acc[b] += w * x[b]` lane by lane, fused ([`Real::fma`]). The lane loop is the outer one on
/// purpose: with the block loop outside, LLVM vectorizes across the block
/// (broadcasting each weight lane) instead of across the channels.
#[inline(always)]
fn mul_add<T: Real, const B: usize>(acc: &mut [V<T>; B], w: &V<T>, x: &[V<T>; B]) {
    for l in 0..CB {
        for b in 0..B {
            acc[b][l] = w[l].fma(x[b][l], acc[b][l]);
        }
    }
}

/// Whether the channel-block kernels run `g` (depthwise): whenever the
/// block's scratch (padded input or output gradient, the result, the
/// weights) is at most [`SCRATCH_BYTES`]. Measured at one thread on
/// mobilenet_v3_small's depthwise layers and on 16-64 channels at 56 x 56
/// and 112 x 112, forward and both gradients, they beat the row kernels
/// at every shape (2-5x on 7 x 7 and 14 x 14 maps, 1.1-2x at 56 x 56 and
/// above); the row kernels remain for planes too large for this scratch.
pub(in super::super) fn preferred(g: &Conv2d) -> bool {
    #[cfg(test)]
    if let Some(f) = FORCE.with(|c| c.get()) {
        return f;
    }
    let elems =
        Padded::input(g).len().max(grad_layout(g).len()) + (g.hw().max(g.p()) + g.kp()) * CB;
    elems * std::mem::size_of::<f64>() <= SCRATCH_BYTES
}

/// Largest per-thread scratch of the channel-block kernels (in f64, so
/// that the choice does not depend on the dtype): planes up to about
/// 125 x 125.
const SCRATCH_BYTES: usize = 4 << 20;

/// One sample's block of channels: (sample, first channel, channels).
/// Units run block by block, the samples of a block in a row, so that a
/// task's consecutive units share the block's weights.
#[inline(always)]
fn block(g: &Conv2d, unit: usize) -> (usize, usize, usize) {
    let (b, n) = (unit / g.n, unit % g.n);
    let c0 = b * CB;
    (n, c0, CB.min(g.c - c0))
}

/// Copies `nc` planes (`rows x cols`, plane `c` at `src + c * plane`) into
/// `dst`: pixel `(r, j)` lane `c` at `(r * rstride + off + j) * CB + c`.
#[inline(always)]
unsafe fn to_blocked<T: Real>(
    src: *const T,
    plane: usize,
    nc: usize,
    rows: usize,
    cols: usize,
    dst: *mut T,
    rstride: usize,
    off: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if is_f32::<T>() && super::super::igemm::wide() {
        to_blocked_avx512(
            src as *const f32,
            plane,
            nc,
            rows,
            cols,
            dst as *mut f32,
            rstride,
            off,
        );
        return;
    }
    for r in 0..rows {
        for c in 0..nc {
            let s = src.add(c * plane + r * cols);
            let d = dst.add((r * rstride + off) * CB + c);
            for j in 0..cols {
                *d.add(j * CB) = *s.add(j);
            }
        }
    }
}

/// Copies lanes `0..nc` of `n` blocked pixels (`src`, pixel `p` at
/// `p * CB`) into `nc` planes at `dst + c * plane`.
#[inline(always)]
unsafe fn from_blocked<T: Real>(src: *const T, n: usize, nc: usize, dst: *mut T, plane: usize) {
    #[cfg(target_arch = "x86_64")]
    if is_f32::<T>() && super::super::igemm::wide() {
        from_blocked_avx512(src as *const f32, n, nc, dst as *mut f32, plane);
        return;
    }
    for c in 0..nc {
        let d = dst.add(c * plane);
        for p in 0..n {
            *d.add(p) = *src.add(p * CB + c);
        }
    }
}

/// [`to_blocked`] for f32: 16 x 16 tiles transposed in registers.
///
/// # Safety
/// AVX-512F; the ranges [`to_blocked`] names are valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn to_blocked_avx512(
    src: *const f32,
    plane: usize,
    nc: usize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    rstride: usize,
    off: usize,
) {
    use crate::kernels::linalg::{first_lanes, transpose16};
    use std::arch::x86_64::*;
    if cols < 16 && cols * rows > 0 {
        // Short rows (7 x 7, 14 x 14 maps): 16 pixels of the flattened
        // plane per transpose, each stored at its row's place.
        let n = rows * cols;
        let (mut r, mut col) = (0, 0);
        let mut p0 = 0;
        while p0 < n {
            let m = (n - p0).min(16);
            let load = first_lanes(m);
            let mut t = [_mm512_setzero_si512(); 16];
            for (c, row) in t.iter_mut().enumerate().take(nc) {
                *row = _mm512_maskz_loadu_epi32(load, src.add(c * plane + p0) as *const i32);
            }
            transpose16(&mut t);
            for row in t.iter().take(m) {
                _mm512_storeu_si512(dst.add((r * rstride + off + col) * CB) as *mut _, *row);
                col += 1;
                if col == cols {
                    (r, col) = (r + 1, 0);
                }
            }
            p0 += m;
        }
        return;
    }
    for r in 0..rows {
        let mut j0 = 0;
        while j0 < cols {
            let m = (cols - j0).min(16);
            let load = first_lanes(m);
            let mut t = [_mm512_setzero_si512(); 16];
            for (c, row) in t.iter_mut().enumerate().take(nc) {
                let s = src.add(c * plane + r * cols + j0);
                *row = _mm512_maskz_loadu_epi32(load, s as *const i32);
            }
            transpose16(&mut t);
            let d = dst.add((r * rstride + off + j0) * CB);
            for (j, row) in t.iter().enumerate().take(m) {
                _mm512_storeu_si512(d.add(j * CB) as *mut _, *row);
            }
            j0 += m;
        }
    }
}

/// [`from_blocked`] for f32.
///
/// # Safety
/// AVX-512F; the ranges [`from_blocked`] names are valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn from_blocked_avx512(src: *const f32, n: usize, nc: usize, dst: *mut f32, plane: usize) {
    use crate::kernels::linalg::{first_lanes, transpose16};
    use std::arch::x86_64::*;
    let mut p0 = 0;
    while p0 < n {
        let m = (n - p0).min(16);
        let store = first_lanes(m);
        let mut t = [_mm512_setzero_si512(); 16];
        for (j, row) in t.iter_mut().enumerate().take(m) {
            *row = _mm512_loadu_si512(src.add((p0 + j) * CB) as *const _);
        }
        transpose16(&mut t);
        for (c, row) in t.iter().enumerate().take(nc) {
            _mm512_mask_storeu_epi32(dst.add(c * plane + p0) as *mut i32, store, *row);
        }
        p0 += m;
    }
}

/// Zero-padded blocked copy of input planes: row `r` starts at pixel
/// `r * cols`, input column `j` at column `pad + j`.
#[derive(Clone, Copy, Debug)]
struct Padded {
    rows: usize,
    cols: usize,
    pad: usize,
}

impl Padded {
    /// For the forward pass and the weight gradient: column `ow * sw + kj * dw`
    /// holds input column `ow * sw + kj * dw - pw` (zero outside the input).
    fn input(g: &Conv2d) -> Padded {
        let reach = (g.ow.max(1) - 1) * g.stride[1] + (g.kw - 1) * g.dilation[1] + 1;
        Padded {
            rows: g.h,
            cols: reach.max(g.padding[1] + g.w),
            pad: g.padding[1],
        }
    }
    fn len(&self) -> usize {
        self.rows * self.cols * CB
    }
    /// Zeroes the padding columns of every row (the data columns are
    /// overwritten by every block).
    unsafe fn zero_pads<T: Real>(&self, buf: *mut T, data: usize) {
        for r in 0..self.rows {
            let row = buf.add(r * self.cols * CB);
            for j in (0..self.pad).chain(self.pad + data..self.cols) {
                st(row.add(j * CB), &[T::ZERO; CB]);
            }
        }
    }
}

/// Per-block weights: tap `t` lane `c` = `w[(c0 + c) * kp + t]` (zero past
/// `nc`), unless `dst` already holds block `c0`'s (`*held == Some(c0)`).
#[inline(always)]
unsafe fn block_weights<T: Real>(
    g: &Conv2d,
    w: P<T>,
    (c0, nc): (usize, usize),
    held: &mut Option<usize>,
    dst: *mut T,
) {
    if *held == Some(c0) {
        return;
    }
    *held = Some(c0);
    let kp = g.kp();
    if nc < CB {
        // Lanes past the last channel stay zero.
        for t in 0..kp {
            st(dst.add(t * CB), &[T::ZERO; CB]);
        }
    }
    // The block's weights are `nc` rows of `kp` taps: one row of `kp` pixels.
    to_blocked(w.at(c0 * kp), kp, nc, 1, kp, dst, 0, 0);
}

/// Kernel rows `ki` whose input row `o * s + ki * d - p` lies in `0..len`.
#[inline(always)]
fn valid_taps(o: usize, s: usize, d: usize, p: usize, k: usize, len: usize) -> (usize, usize) {
    let base = (o * s) as isize - p as isize;
    let d = d as isize;
    let lo = if base >= 0 { 0 } else { (-base + d - 1) / d };
    let hi = if base >= len as isize {
        0
    } else {
        (len as isize - 1 - base) / d + 1
    };
    let lo = (lo as usize).min(k);
    (lo, (hi as usize).clamp(lo, k))
}

struct Forward<'a, T> {
    g: &'a Conv2d,
    lay: Padded,
    out: P<T>,
    x: P<T>,
    w: P<T>,
    bias: Option<P<T>>,
}

impl<T: Real> Forward<'_, T> {
    /// Output columns `ow0..ow0 + B` of output rows `oh..oh + R` from the
    /// padded input `xp`, weights `wb`, kernel rows `taps[r]` for row
    /// `oh + r`. Each input row the rows read is loaded once and feeds every
    /// row that reads it (a 5 x 5 stride-1 layer loads 6 rows for a pair,
    /// not 10); each output still adds its taps in kernel-row then
    /// kernel-column order, so the bits do not depend on `R` (checked on
    /// mobilenet_v3_small's depthwise shapes, dilation 2 and stride 3).
    /// Measured, two rows against one at a time alternating in one process
    /// (one thread, batch 8, forward): mobilenet_v3_small's 5 x 5 layers
    /// 0.84-0.94 of the time, 88 channels 3 x 3 at 28 x 28 0.91, the 3 x 3
    /// stride-2 layers at 112 and 56 1.01 (bound by the blocked copies, not
    /// the loads). One row and two had been separate functions; this one
    /// serving both was 0.79-1.02 of their time on those layers (the same
    /// kind of run, two runs), the same bits.
    #[inline(always)]
    unsafe fn rows<const R: usize, const B: usize>(
        &self,
        xp: *const T,
        wb: *const T,
        init: &V<T>,
        oh: usize,
        taps: [(usize, usize); R],
        ow0: usize,
        y: *mut T,
    ) {
        let g = self.g;
        let (sh, sw) = (g.stride[0], g.stride[1]);
        let (dh, dw) = (g.dilation[0], g.dilation[1]);
        let ph = g.padding[0];
        let mut acc = [[*init; B]; R];
        // Row r's next kernel row, and the input row it reads (ascending in
        // the kernel row; usize::MAX once row r has read all its taps).
        let mut k: [usize; R] = std::array::from_fn(|r| taps[r].0);
        let next = |k: &[usize; R], r: usize| {
            if k[r] < taps[r].1 {
                (oh + r) * sh + k[r] * dh - ph
            } else {
                usize::MAX
            }
        };
        loop {
            let ih = (0..R).map(|r| next(&k, r)).min().unwrap_or(usize::MAX);
            if ih == usize::MAX {
                break;
            }
            let reads: [bool; R] = std::array::from_fn(|r| next(&k, r) == ih);
            let row = xp.add((ih * self.lay.cols + ow0 * sw) * CB);
            for kj in 0..g.kw {
                let s = row.add(kj * dw * CB);
                let xs: [V<T>; B] = std::array::from_fn(|c| ld(s.add(c * sw * CB)));
                for r in 0..R {
                    if reads[r] {
                        let wv = ld(wb.add((k[r] * g.kw + kj) * CB));
                        mul_add(&mut acc[r], &wv, &xs);
                    }
                }
            }
            for r in 0..R {
                k[r] += reads[r] as usize;
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, v) in acc.iter().enumerate() {
                st(y.add(((oh + r) * g.ow + ow0 + c) * CB), v);
            }
        }
    }
}

impl<T: Real> Planes for Forward<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.lay.len() + self.g.p() * CB + self.g.kp() * CB
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB_: usize>(&self, u0: usize, u1: usize, buf: &mut [T]) {
        let g = self.g;
        let xp = buf.as_mut_ptr();
        let y = xp.add(self.lay.len());
        let wb = y.add(g.p() * CB);
        self.lay.zero_pads(xp, g.w);
        let mut held = None;
        for unit in u0..u1 {
            let (n, c0, nc) = block(g, unit);
            let first = n * g.c + c0;
            to_blocked(
                self.x.at(first * g.hw()),
                g.hw(),
                nc,
                g.h,
                g.w,
                xp,
                self.lay.cols,
                self.lay.pad,
            );
            block_weights(g, self.w, (c0, nc), &mut held, wb);
            let mut init = [T::ZERO; CB];
            if let Some(b) = self.bias {
                for (c, v) in init.iter_mut().enumerate().take(nc) {
                    *v = *b.at(c0 + c);
                }
            }
            let taps = |oh| valid_taps(oh, g.stride[0], g.dilation[0], g.padding[0], g.kh, g.h);
            let mut oh = 0;
            while oh + 2 <= g.oh {
                let pair = [taps(oh), taps(oh + 1)];
                let mut ow = 0;
                while ow < g.ow {
                    let b = (g.ow - ow).min(NB);
                    with_width!(b, self.rows::<2>(xp, wb, &init, oh, pair, ow, y));
                    ow += b;
                }
                oh += 2;
            }
            for oh in oh..g.oh {
                let mut ow = 0;
                while ow < g.ow {
                    let b = (g.ow - ow).min(NB);
                    with_width!(b, self.rows::<1>(xp, wb, &init, oh, [taps(oh)], ow, y));
                    ow += b;
                }
            }
            from_blocked(y, g.p(), nc, self.out.at(first * g.p()), g.p());
        }
    }
}

/// Input-gradient layout of the blocked output gradient: row `oh` at pixel
/// `oh * cols`, output column `ow` at column `pad + ow`, zeros around, wide
/// enough for every tap of every column phase.
fn grad_layout(g: &Conv2d) -> Padded {
    let sw = g.stride[1] as isize;
    let (mut lo, mut hi) = (0isize, g.ow as isize);
    for q in 0..g.stride[1].min(g.w) {
        let nt = (g.w - q).div_ceil(g.stride[1]) as isize;
        for kj in 0..g.kw {
            let num = (q + g.padding[1]) as isize - (kj * g.dilation[1]) as isize;
            if num.rem_euclid(sw) == 0 {
                lo = lo.min(num / sw);
                hi = hi.max(num / sw + nt);
            }
        }
    }
    let pad = (-lo) as usize;
    Padded {
        rows: g.oh,
        cols: pad + hi as usize,
        pad,
    }
}

struct GradInput<'a, T> {
    g: &'a Conv2d,
    lay: Padded,
    gi: P<T>,
    grad: P<T>,
    w: P<T>,
}

impl<T: Real> GradInput<'_, T> {
    /// Input columns `q + (t0 + b) * sw`, `b < B`, of input row `ih`.
    #[inline(always)]
    unsafe fn cols<const B: usize>(
        &self,
        gp: *const T,
        wb: *const T,
        ih: usize,
        q: usize,
        t0: usize,
        y: *mut T,
    ) {
        let g = self.g;
        let (sh, sw) = (g.stride[0], g.stride[1]);
        let mut acc = [[T::ZERO; CB]; B];
        for ki in 0..g.kh {
            let num = (ih + g.padding[0]) as isize - (ki * g.dilation[0]) as isize;
            if num < 0 || num % sh as isize != 0 || num / sh as isize >= g.oh as isize {
                continue;
            }
            let row = gp.add((num as usize / sh * self.lay.cols + self.lay.pad + t0) * CB);
            for kj in 0..g.kw {
                let c = (q + g.padding[1]) as isize - (kj * g.dilation[1]) as isize;
                if c.rem_euclid(sw as isize) != 0 {
                    continue;
                }
                let wv = ld(wb.add((ki * g.kw + kj) * CB));
                let s = row.offset(c / sw as isize * CB as isize);
                let gs: [V<T>; B] = std::array::from_fn(|b| ld(s.add(b * CB)));
                mul_add(&mut acc, &wv, &gs);
            }
        }
        for (b, a) in acc.iter().enumerate() {
            st(y.add((ih * g.w + q + (t0 + b) * sw) * CB), a);
        }
    }
}

impl<T: Real> Planes for GradInput<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.lay.len() + self.g.hw() * CB + self.g.kp() * CB
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB_: usize>(&self, u0: usize, u1: usize, buf: &mut [T]) {
        let g = self.g;
        let gp = buf.as_mut_ptr();
        let y = gp.add(self.lay.len());
        let wb = y.add(g.hw() * CB);
        self.lay.zero_pads(gp, g.ow);
        let sw = g.stride[1];
        let mut held = None;
        for unit in u0..u1 {
            let (n, c0, nc) = block(g, unit);
            let first = n * g.c + c0;
            to_blocked(
                self.grad.at(first * g.p()),
                g.p(),
                nc,
                g.oh,
                g.ow,
                gp,
                self.lay.cols,
                self.lay.pad,
            );
            block_weights(g, self.w, (c0, nc), &mut held, wb);
            for ih in 0..g.h {
                for q in 0..sw.min(g.w) {
                    let nt = (g.w - q).div_ceil(sw);
                    let mut t = 0;
                    while t < nt {
                        let b = (nt - t).min(NB);
                        with_width!(b, self.cols(gp, wb, ih, q, t, y));
                        t += b;
                    }
                }
            }
            from_blocked(y, g.hw(), nc, self.gi.at(first * g.hw()), g.hw());
        }
    }
}

struct GradWeight<'a, T> {
    g: &'a Conv2d,
    lay: Padded,
    grad: P<T>,
    x: P<T>,
    /// Per (channel, sample): its `kh * kw` partial sums.
    partial: P<T>,
}

impl<T: Real> GradWeight<'_, T> {
    /// Sums over the pixels of taps `(ki, kj0..kj0 + G)` into `tot`.
    #[inline(always)]
    unsafe fn taps<const G: usize>(
        &self,
        xp: *const T,
        gp: *const T,
        ki: usize,
        kj0: usize,
        tot: *mut T,
    ) {
        let g = self.g;
        let (sw, dw) = (g.stride[1], g.dilation[1]);
        let mut sum = [[T::ZERO; CB]; G];
        let (lo, hi) = rows_for(g, ki);
        for oh in lo..hi {
            let ih = oh * g.stride[0] + ki * g.dilation[0] - g.padding[0];
            let row = xp.add((ih * self.lay.cols + kj0 * dw) * CB);
            let grow = gp.add(oh * g.ow * CB);
            let mut acc = [[T::ZERO; CB]; G];
            for ow in 0..g.ow {
                let gv = ld(grow.add(ow * CB));
                let s = row.add(ow * sw * CB);
                let xs: [V<T>; G] = std::array::from_fn(|t| ld(s.add(t * dw * CB)));
                mul_add(&mut acc, &gv, &xs);
            }
            for l in 0..CB {
                for t in 0..G {
                    sum[t][l] += acc[t][l];
                }
            }
        }
        for (t, s) in sum.iter().enumerate() {
            st(tot.add((ki * g.kw + kj0 + t) * CB), s);
        }
    }
}

impl<T: Real> Planes for GradWeight<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.lay.len() + self.g.p() * CB + self.g.kp() * CB
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB_: usize>(&self, u0: usize, u1: usize, buf: &mut [T]) {
        let g = self.g;
        let kp = g.kp();
        let xp = buf.as_mut_ptr();
        let gp = xp.add(self.lay.len());
        let tot = gp.add(g.p() * CB);
        self.lay.zero_pads(xp, g.w);
        for unit in u0..u1 {
            let (n, c0, nc) = block(g, unit);
            let first = n * g.c + c0;
            to_blocked(
                self.x.at(first * g.hw()),
                g.hw(),
                nc,
                g.h,
                g.w,
                xp,
                self.lay.cols,
                self.lay.pad,
            );
            to_blocked(
                self.grad.at(first * g.p()),
                g.p(),
                nc,
                g.oh,
                g.ow,
                gp,
                g.ow,
                0,
            );
            for ki in 0..g.kh {
                let mut kj = 0;
                while kj < g.kw {
                    let b = (g.kw - kj).min(NB);
                    with_width!(b, self.taps(xp, gp, ki, kj, tot));
                    kj += b;
                }
            }
            for c in 0..nc {
                let dst = self.partial.at(((c0 + c) * g.n + n) * kp);
                for t in 0..kp {
                    *dst.add(t) = *tot.add(t * CB + c);
                }
            }
        }
    }
}

fn units(g: &Conv2d) -> usize {
    g.n * g.c.div_ceil(CB)
}

pub(super) fn forward<T: Real>(g: &Conv2d, out: P<T>, x: P<T>, w: P<T>, bias: Option<P<T>>) {
    let k = Forward {
        g,
        lay: Padded::input(g),
        out,
        x,
        w,
        bias,
    };
    for_planes(&k, units(g));
}

pub(super) fn grad_input<T: Real>(g: &Conv2d, gi: P<T>, grad: P<T>, w: P<T>) {
    let k = GradInput {
        g,
        lay: grad_layout(g),
        gi,
        grad,
        w,
    };
    for_planes(&k, units(g));
}

/// Fills `partial` (`C x N x KH*KW`, per channel and sample).
pub(super) fn grad_weight_partials<T: Real>(g: &Conv2d, partial: P<T>, grad: P<T>, x: P<T>) {
    let k = GradWeight {
        g,
        lay: Padded::input(g),
        grad,
        x,
        partial,
    };
    for_planes(&k, units(g));
}
