//! Winograd's minimal filtering for float32 3 x 3 convolutions: F(2x2, 3x3)
//! at stride 1 (resnet's 3 x 3 layers, forward and input gradient: the input
//! gradient of a stride-1 layer is itself a stride-1 convolution, see
//! [`super::transposed`]), and a 25-point form for stride 2 (the
//! downsampling layers' forward and input gradient; see [`Scheme`]).
//!
//! Each 2 x 2 tile of output pixels is `A^T [(G g G^T) . (B^T d B)] A` for
//! its 4 x 4 input window `d` (Lavin & Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016): 16 multiplications per tile and
//! channel pair instead of 36, so the products summed over input channels
//! become 16 matrix products `M[xi] (OC x tiles) = U[xi] (OC x C) @ V[xi] (C
//! x tiles)`, one per point `xi` of the 4 x 4 transform domain, with 2.25x
//! fewer multiply-adds than the direct convolution (1.72x on 7 x 7 maps,
//! whose last tile row and column are half outside). The stride-2 forms
//! have 25 points and save 1.44x.
//!
//! - The weight transform `U = G g G^T` is computed once per call over foo's
//!   pool straight into [`igemm`]'s packed A layout (`MR` output channels per
//!   micro-panel; see [`packed_at`]).
//! - A task takes one to four `NR`-wide micro-panels of consecutive tiles
//!   (across rows and samples; [`panels_per_task`]), transforms their input windows
//!   (`B^T d B`, 16 tiles per vector: even and odd columns split with two
//!   permutes, zero padding by masked loads), runs the 16 products with
//!   [`igemm::micro_packed`], and transforms the products back into the
//!   output (`A^T M A`, even and odd output columns interleaved again).
//!   A task's transformed input and products (`16 x channels x tiles`
//!   each) fit L2 at 64 channels; beyond, they stream from L3.
//!
//! Measured against the direct product the layers took before (batch 8,
//! one thread, alternating in one process): stride-2 forward 128 -> 256
//! channels at 28 x 28 0.81x the time, 64 -> 128 at 56 x 56 0.83x; input
//! gradient of the same layers 0.83x and 0.80x.
//!
//! Accuracy: the products sum the input channels in blocks of [`CB`], each
//! block summed in registers and then added in order. With igemm's 128-deep
//! blocks the transform's amplification (each output adds nine products)
//! left the largest error 1.4-1.8x torch CPU's on 128-512 channels (both
//! summation orders simulated in float32 on random normal operands, against
//! a float64 reference); with 32-deep blocks 0.9x, as close to the exact
//! result as CPU's direct convolution. The
//! order depends on the shapes only: results do not depend on the thread
//! count.

#![allow(clippy::too_many_arguments)]

use super::{igemm, parallel, Conv2d, Weight};
#[cfg(target_arch = "x86_64")]
use crate::kernels::linalg::first_lanes as first;
use std::cell::RefCell;

/// Tiles per micro-panel of columns.
const NR: usize = igemm::NR;
/// Most micro-panels of tiles per task ([`panels_per_task`]).
const MAX_PANELS: usize = 4;
/// Input channels summed per micro-kernel call (see the module's accuracy
/// note).
const CB: usize = 32;
/// How many channels ahead [`transform_panel`] prefetches the input
/// gradient's weight. Measured: on the 512-channel layer at 7 x 7 (batch 8,
/// one thread) 2, 3, 4, 6 and 8 channels took the pass from 19.6 ms to
/// 16.5-17.5 ms, 4 among the best; the 256-channel layer at 14 x 14 went
/// from 11.6 to 10.5 ms; the 64-channel one (weight in L2) did not move.
const PREFETCH_CHANNELS: usize = 4;
/// How many channels ahead [`input_transform_25`] prefetches the input
/// rows it reads: a run's rows (a few cache lines each) lie a plane apart
/// from the previous channel's, a stride no hardware prefetcher follows.
const PREFETCH_PLANES: usize = 2;
/// Fewest input and output channels. Chosen, not measured: a tile's
/// transforms cost in proportion to the channels, its products to their
/// product, so few channels favour the direct product; resnet's 3 x 3
/// layers have 64 or more.
const MIN_CHANNELS: usize = 32;
/// Fewest output channels (the sums' length) for [`input_gradient`]. Its
/// inputs at odd offsets add four products with cancelling terms (`a1 w2`
/// in two of them), so over few channels it loses to the direct sum's
/// accuracy: largest error against a float64 reference, 4 x C x 28 x 28
/// inputs, 32 or 128 channels in, five seeds each, as a multiple of torch
/// CPU's: 48 channels out 0.77-1.17, 64 0.84-1.23, 96 0.55-0.88, 128
/// 0.50-0.74, 192 0.36-0.72 (resnet18's 128-512-channel layers 0.36-0.74).
/// The forward sums the input channels with no such loss (0.58-0.94 at
/// 32-128).
const MIN_GRADIENT_CHANNELS: usize = 96;

/// The transforms: which one a convolution takes depends on its stride, and
/// for stride 2 on the pass.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scheme {
    /// F(2x2, 3x3): a 2 x 2 tile of outputs from its 4 x 4 input window, 16
    /// points, 16 multiplications where the direct product takes 36.
    Stride1,
    /// Stride 2: a 2 x 2 tile of outputs from its 5 x 5 input window, 25
    /// points, 25 multiplications where the direct product takes 36. Along
    /// one axis, the outputs `y0 = w0 x0 + w1 x1 + w2 x2` and `y1 = w0 x2 +
    /// w1 x3 + w2 x4` are the even inputs `x0, x2, x4` filtered by the
    /// two taps `w0, w2` (F(2, 2): `(x0 - x2) w0`, `x2 (w0 + w2)`, `(x4 -
    /// x2) w2`, three products) plus the odd inputs `x1, x3` times `w1` (two
    /// products): 5 products instead of 6, 25 instead of 36 in two
    /// dimensions (the decomposition of a strided kernel into its stride
    /// phases, each filtered at stride 1). Every transform coefficient is 0
    /// or +-1: no rounding in the transforms but the sums'.
    Stride2,
    /// The input gradient of a stride-2 layer of padding 1 (its transpose):
    /// a 4 x 4 tile of the input gradient from a 3 x 3 window of the output
    /// gradient `a` (rows and columns `2 t ..= 2 t + 2` for tile `t`). Along
    /// one axis, the tile's four inputs (`4 t + r`, `r = 0..4`) receive `w1
    /// a0`, `w2 a0 + w0 a1`, `w1 a1` and `w2 a1 + w0 a2`: the second and
    /// fourth are F(2, 2) over `a` with the taps `w2, w0` (`(a0 - a1) w2`,
    /// `a1 (w0 + w2)`, `(a2 - a1) w0`), the others the products `a0 w1` and
    /// `a1 w1`: 5 products for 4 inputs where the direct sum takes 6, 25
    /// instead of 36 in two dimensions, again with coefficients 0 and +-1.
    /// The weight's transform is [`Scheme::Stride2`]'s on the taps reversed.
    Stride2Input,
}

impl Scheme {
    fn of(g: &Conv2d) -> Scheme {
        if g.stride == [2, 2] {
            Scheme::Stride2
        } else {
            Scheme::Stride1
        }
    }
    /// Points of the transform domain along one axis.
    fn side(self) -> usize {
        match self {
            Scheme::Stride1 => 4,
            Scheme::Stride2 | Scheme::Stride2Input => 5,
        }
    }
    fn points(self) -> usize {
        self.side() * self.side()
    }
    /// Outputs of a tile along one axis.
    fn tile(self) -> usize {
        match self {
            Scheme::Stride1 | Scheme::Stride2 => 2,
            Scheme::Stride2Input => 4,
        }
    }
}

/// What a task computes: `out` (`n x oc x oh x ow`) from `x` (`n x c x h x
/// w`) as `scheme` says. For the forward passes `g` is the convolution; for
/// [`Scheme::Stride2Input`] its input gradient seen the same way (`x` the
/// output gradient, `out` the input gradient; see [`input_gradient`]).
struct Layer {
    g: Conv2d,
    scheme: Scheme,
}

impl std::ops::Deref for Layer {
    type Target = Conv2d;
    fn deref(&self) -> &Conv2d {
        &self.g
    }
}

/// Whether [`forward`] computes `g`: a float32 3 x 3, undilated, ungrouped
/// convolution of stride 1 or 2 whose output has the size its input and
/// padding (at most 2) give, with enough channels and at least two
/// micro-panels of tiles (64); at stride 2 also [`few_outside`]. The
/// choice depends on the shapes only.
pub(super) fn applies(g: &Conv2d) -> bool {
    let layer = Layer {
        g: *g,
        scheme: Scheme::of(g),
    };
    plain_3x3(g)
        && (g.stride == [1, 1] || g.stride == [2, 2])
        && g.padding[0] <= 2
        && g.padding[1] <= 2
        && (g.stride == [1, 1] || few_outside(&layer))
        && tiles(&layer).0 >= 2 * NR
}

/// A float32 3 x 3, undilated, ungrouped layer of equal strides whose output
/// has the size its input and padding give, with enough channels, on a
/// machine with AVX-512.
fn plain_3x3(g: &Conv2d) -> bool {
    let out = |i: usize, p: usize| (i + 2 * p).checked_sub(3).map(|r| r / g.stride[0] + 1);
    g.kh == 3
        && g.kw == 3
        && g.stride[0] == g.stride[1]
        && g.dilation == [1, 1]
        && g.groups == 1
        && out(g.h, g.padding[0]) == Some(g.oh)
        && out(g.w, g.padding[1]) == Some(g.ow)
        && g.c >= MIN_CHANNELS
        && g.oc >= MIN_CHANNELS
        && igemm::wide()
}

/// [`input_gradient`]'s layer for `g`'s input gradient (see [`Layer`]).
fn input_layer(g: &Conv2d) -> Layer {
    let t = Conv2d {
        c: g.oc,
        h: g.oh,
        w: g.ow,
        oc: g.c,
        oh: g.h,
        ow: g.w,
        ..*g
    };
    Layer {
        g: t,
        scheme: Scheme::Stride2Input,
    }
}

/// Whether [`input_gradient`] computes `g`'s input gradient: a layer
/// [`plain_3x3`] of stride 2 and padding 1 (every 3 x 3 downsampling layer
/// of torchvision's models) with [`MIN_GRADIENT_CHANNELS`] output channels,
/// whose tiles leave few outside ([`few_outside`]) and fill two
/// micro-panels.
pub(super) fn applies_input_gradient(g: &Conv2d) -> bool {
    let layer = input_layer(g);
    plain_3x3(g)
        && g.stride == [2, 2]
        && g.padding == [1, 1]
        && g.oc >= MIN_GRADIENT_CHANNELS
        && few_outside(&layer)
        && tiles(&layer).0 >= 2 * NR
}

/// Whether `g`'s tiles (2 x 2, or the input gradient's 4 x 4) compute at
/// most 15% more outputs than the layer has (sizes off the tile leave the
/// last tile row or column partly outside). The stride-2 schemes are taken
/// only then: their 25 points save a third of the direct product's
/// multiplications, which the outputs outside eat. Measured, batch 8, one thread, against the direct product:
/// 14 x 14 and 28 x 28 outputs (none outside) 8.3 against 9.8 ms and 8.1
/// against 9.5; 7 x 7 (31% more) 13.0 against 9.8 ms, the 25-point weight
/// at 512 x 256 channels (13 MB) also no longer in cache. The bound in
/// between is chosen, not measured.
fn few_outside(g: &Layer) -> bool {
    let (_, th, tw) = tiles(g);
    let t = g.scheme.tile();
    20 * (t * th) * (t * tw) <= 23 * g.oh * g.ow
}

/// `(all tiles, tile rows, tile columns)` of a sample's output.
fn tiles(g: &Layer) -> (usize, usize, usize) {
    let t = g.scheme.tile();
    let (th, tw) = (g.oh.div_ceil(t), g.ow.div_ceil(t));
    (g.n * th * tw, th, tw)
}

/// Micro-panels of tiles per task: each packed panel of `U` is read once
/// per task for all of them, so more panels mean fewer passes over `U` (a
/// 512-channel layer's is 16 MB), as long as every thread still has a
/// task. No result depends on it: a tile's arithmetic is the same in any
/// task and panel.
fn panels_per_task(g: &Layer) -> usize {
    let panels = tiles(g).0.div_ceil(NR);
    (panels / parallel::num_threads()).clamp(1, MAX_PANELS)
}

thread_local! {
    /// A task's transformed input (`points x C x tiles`) and products (`OC x
    /// points x tiles`, see [`products`]), reused across calls.
    static BUFS: RefCell<[Vec<f32>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// Floats from one output channel's products to the next's in a task's
/// products (`points x tb` of them): one cache line more, so that the rows
/// of the micro-kernel's tile are not a power of two apart (16 points of
/// 128 tiles are 8 KiB: all 12 rows of a tile in one L1 set).
fn products(points: usize, tb: usize) -> usize {
    points * tb + 16
}

/// `out = x * weight` (no bias) for a `g` that [`applies`].
pub(super) fn forward(g: &Conv2d, out: *mut f32, x: *const f32, weight: Weight) {
    let layer = Layer {
        g: *g,
        scheme: Scheme::of(g),
    };
    run(&layer, out, x, weight);
}

/// The input gradient `gi` of a `g` that [`applies_input_gradient`], from
/// the output gradient `grad` and the weight `w` (`[OC, C, 3, 3]`).
pub(super) fn input_gradient(g: &Conv2d, gi: *mut f32, grad: *const f32, w: *const f32) {
    run(&input_layer(g), gi, grad, Weight::Transposed(w));
}

/// [`Layer`]'s `out` from `x` and the weight.
fn run(g: &Layer, out: *mut f32, x: *const f32, weight: Weight) {
    let (k, c, points) = (g.oc, g.c, g.scheme.points());
    let len = points * k.next_multiple_of(igemm::MR) * c;
    super::WEIGHTS.with(|u| {
        let mut u = u.borrow_mut();
        if u.len() < len {
            u.resize(len, 0.0);
        }
        transform_weight(g, weight, &mut u[..len]);
        let (u_at, out, x) = (u.as_ptr() as usize, out as usize, x as usize);
        let tb = panels_per_task(g) * NR;
        parallel::parallel_for(tiles(g).0.div_ceil(tb), |b| {
            BUFS.with(|bufs| {
                let mut bufs = bufs.borrow_mut();
                let [v, m] = &mut *bufs;
                for (buf, len) in [
                    (&mut *v, points * c * tb),
                    (&mut *m, k * products(points, tb)),
                ] {
                    if buf.len() < len {
                        buf.resize(len, 0.0);
                    }
                }
                // SAFETY: `applies` held (AVX-512); x and out hold g's
                // shapes, u the transformed weight, v and m their sizes; task
                // b writes only its own tiles' output pixels.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    block(
                        g,
                        b,
                        tb,
                        x as *const f32,
                        u_at as *const f32,
                        v.as_mut_ptr(),
                        m.as_mut_ptr(),
                        out as *mut f32,
                    )
                }
            })
        });
        super::release_if_large(&mut u);
    });
}

/// Where the packed micro-panel of output channels `i0..` for input channels
/// `c0..c0 + kc` (`c0` a multiple of [`CB`]) of point `xi` starts: channel
/// blocks in order, each its row panels in order, each its 16 points'
/// micro-panels (`kc` rows of `MR` floats) side by side, so that the
/// transform, which makes all 16 points of a (row, channel) pair at once,
/// writes one contiguous region per channel block and row panel rather
/// than 16 streams a point's `U` apart.
fn packed_at(g: &Layer, xi: usize, c0: usize, kc: usize, i0: usize) -> usize {
    let kpad = g.oc.next_multiple_of(igemm::MR);
    (c0 * kpad + i0 * kc) * g.scheme.points() + xi * kc * igemm::MR
}

/// `U[xi] = G g G^T` for every (output, input) channel pair into `dst` as
/// [`packed_at`] lays it out, a task per row panel. `g`'s 3 x 3 taps are the
/// weight's as given, or for the input gradient ([`Weight::Transposed`])
/// the other convolution's weight `[C, OC, 3, 3]` (this one's `C` and `OC`
/// swapped) with its taps reversed.
fn transform_weight(g: &Layer, weight: Weight, dst: &mut [f32]) {
    let (src, given) = match weight {
        Weight::Given(w) => (w as usize, true),
        Weight::Transposed(w) => (w as usize, false),
    };
    let d = dst.as_mut_ptr() as usize;
    parallel::parallel_for(g.oc.div_ceil(igemm::MR), |ip| {
        // SAFETY: `applies` held (AVX-512); src holds the weight, dst the
        // packed layout; each task writes its own row panel.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            transform_panel(g, src as *const f32, given, ip * igemm::MR, d as *mut f32)
        }
    });
}

/// [`transform_weight`]'s row panel `i0..i0 + MR`: a vector lane per
/// output channel (row) of the panel, `G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2
/// 1/2; 0 0 1]` at stride 1, `[1 0 0; 1 0 1; 0 0 1; 0 1 0; 0 1 0]` for
/// both stride-2 schemes (the input gradient's on the taps reversed, as
/// every [`Weight::Transposed`] is read). A weight as given has each row's
/// taps of consecutive channels contiguous, so 16 channels' taps (144 floats a row) are loaded
/// and transposed by igemm's A packing ([`igemm::pack_rows_avx512`], 16 x
/// 16 blocks) into a float per row; the input gradient's weight
/// ([`Weight::Transposed`]) has a channel's taps of consecutive rows
/// contiguous instead, and its taps are gathered, the channel
/// [`PREFETCH_CHANNELS`] ahead prefetched. Under `perf` at one thread on
/// the 512-channel layer at 7 x 7, the transform took 23% of the kernel's
/// samples one (row, channel) pair at a time in scalar code, 25% gathered
/// without the prefetch, 15% with it. Transposing each channel's run of
/// `9 * nrows` floats with igemm's A packing instead of gathering it was
/// no faster (15.6 against 15.1 ms for the whole pass, prefetched).
///
/// # Safety
/// AVX-512F; `src` holds the weight `given` (or transposed) describes for
/// `g`, `dst` the packed layout.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transform_panel(g: &Layer, src: *const f32, given: bool, i0: usize, dst: *mut f32) {
    use igemm::MR;
    use std::arch::x86_64::*;
    let (k, c) = (g.oc, g.c);
    let nrows = MR.min(k - i0);
    let rows = first(nrows);
    // Gathered: lane i reads row i0 + i, 9 floats apart (the other
    // weight's `[c, o, 3, 3]`), taps reversed.
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(9));
    let half = _mm512_set1_ps(0.5);
    let add3 = |a: __m512, b: __m512, c: __m512| _mm512_add_ps(_mm512_add_ps(a, b), c);
    let alt3 = |a: __m512, b: __m512, c: __m512| _mm512_add_ps(_mm512_sub_ps(a, b), c);
    let scheme = g.scheme;
    let side = scheme.side();
    // G applied to three taps along one axis (`side` values; the fifth is
    // unused by F(2x2, 3x3)).
    let g_rows = |t0: __m512, t1: __m512, t2: __m512| match scheme {
        Scheme::Stride1 => [
            t0,
            _mm512_mul_ps(half, add3(t0, t1, t2)),
            _mm512_mul_ps(half, alt3(t0, t1, t2)),
            t2,
            _mm512_setzero_ps(),
        ],
        // Even taps through F(2, 2)'s G = [1 0; 1 1; 0 1], the odd tap
        // once for each of the two odd inputs.
        Scheme::Stride2 | Scheme::Stride2Input => [t0, _mm512_add_ps(t0, t2), t2, t1, t1],
    };
    // A weight as given: up to 16 channels' taps of the panel's rows, flat
    // index `cc * 9 + tap` at `tr[f * MR..]`, a float per row (igemm's A
    // packing, which transposes 16 x 16 blocks).
    let mut tr = [0f32; 16 * 9 * MR];
    for c0 in (0..c).step_by(CB) {
        let kc = CB.min(c - c0);
        for cc in 0..kc {
            let ch = c0 + cc;
            if given && cc % 16 == 0 {
                let floats = 9 * 16.min(kc - cc);
                let at = src.add((i0 * c + ch) * 9);
                igemm::pack_rows_avx512(at, (c * 9) as isize, nrows, floats, tr.as_mut_ptr());
            }
            if !given && ch + PREFETCH_CHANNELS < c {
                // A channel's taps for the panel's rows are one run of
                // `9 * nrows` floats, the next channel's `9 * k` floats on
                // (18 KiB at 512 channels): each run starts a new page and
                // no hardware prefetcher follows that stride, so the
                // gathers waited for memory. Ask for the run of the
                // channel PREFETCH_CHANNELS ahead now (every cache line the
                // run touches; the last address may lie past the weight's
                // end, which a prefetch does not fault on).
                let run = src.add(((ch + PREFETCH_CHANNELS) * k + i0) * 9) as *const i8;
                for line in (0..nrows * 9 * 4 + 63).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(run.wrapping_add(line));
                }
            }
            let tap = |t: usize| {
                if given {
                    _mm512_maskz_loadu_ps(rows, tr.as_ptr().add((cc % 16 * 9 + t) * MR))
                } else {
                    let at = src.add((ch * k + i0) * 9 + 8 - t);
                    _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), rows, idx, at as *const _)
                }
            };
            // G g: `side` rows of 3 columns.
            let mut gg = [[_mm512_setzero_ps(); 3]; 5];
            for s in 0..3 {
                let rows = g_rows(tap(s), tap(3 + s), tap(6 + s));
                for (a, row) in rows.into_iter().enumerate() {
                    gg[a][s] = row;
                }
            }
            // (G g) G^T: point (a, b) at `side * a + b`.
            for (a, [t0, t1, t2]) in gg.into_iter().take(side).enumerate() {
                for (b, val) in g_rows(t0, t1, t2).into_iter().take(side).enumerate() {
                    let at = dst.add(packed_at(g, side * a + b, c0, kc, i0) + cc * MR);
                    _mm512_mask_storeu_ps(at, first(MR), val);
                }
            }
        }
    }
}

/// A run of at most 16 consecutive tiles in one tile row of one sample and
/// one micro-panel: sample `n`, tile row `ty`, first tile column `tx`,
/// `len` tiles, the first the task's tile `j`.
#[derive(Clone, Copy, Debug)]
struct Run {
    n: usize,
    ty: usize,
    tx: usize,
    len: usize,
    j: usize,
}

/// The [`Run`]s of tiles `t0..t1` in order, into `dst`; returns how many.
fn runs(g: &Layer, t0: usize, t1: usize, dst: &mut [Run; RUNS]) -> usize {
    let (_, th, tw) = tiles(g);
    let (mut t, mut count) = (t0, 0);
    while t < t1 {
        let (n, rest) = (t / (th * tw), t % (th * tw));
        let (ty, tx) = (rest / tw, rest % tw);
        let j = t - t0;
        let len = (t1 - t).min(tw - tx).min(16).min(NR - j % NR);
        dst[count] = Run { n, ty, tx, len, j };
        count += 1;
        t += len;
    }
    count
}

/// Most runs of a task: one per tile.
const RUNS: usize = MAX_PANELS * NR;

/// Task `b`: tiles `b * tb..` (`tb` a multiple of `NR`), transformed into
/// `v` (point `xi`'s `C x tb` as `tb / NR` packed B panels of `C x NR`),
/// multiplied into `m` (output channel `o`'s products for point `xi` at
/// `o * products(points, tb) + xi * tb`, so that the output transform finds
/// a channel's points together), transformed
/// back into `out`.
///
/// # Safety
/// As [`forward`]'s task.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn block(
    g: &Layer,
    b: usize,
    tb: usize,
    x: *const f32,
    u: *const f32,
    v: *mut f32,
    m: *mut f32,
    out: *mut f32,
) {
    use igemm::MR;
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let (k, c) = (g.oc, g.c);
    let t0 = b * tb;
    let t1 = (t0 + tb).min(tiles(g).0);
    let mut all = [Run {
        n: 0,
        ty: 0,
        tx: 0,
        len: 0,
        j: 0,
    }; RUNS];
    let count = runs(g, t0, t1, &mut all);
    let runs = &all[..count];
    match g.scheme {
        Scheme::Stride1 => input_transform(g, runs, tb, x, v),
        Scheme::Stride2 => input_transform_25::<false>(g, runs, tb, x, v),
        Scheme::Stride2Input => input_transform_25::<true>(g, runs, tb, x, v),
    }
    let nt = t1 - t0;
    // BLIS's order within a point: a block of B's rows stays in L1 while
    // A's panels pass, each panel used for every micro-panel of tiles.
    let points = g.scheme.points();
    let ms = products(points, tb);
    for xi in 0..points {
        for c0 in (0..c).step_by(CB) {
            let kc = CB.min(c - c0);
            for i0 in (0..k).step_by(MR) {
                let a = u.add(packed_at(g, xi, c0, kc, i0));
                // The next row panel of U lies the 16 points' panels
                // further on, a stride the hardware does not follow: fetch
                // it while this one serves the tiles. On the 512-channel
                // layer at 7 x 7 (U 16 MB, four micro-panels of tiles per
                // task, batch 8, one thread) 0.88x the pass's time, forward
                // and input gradient; on larger maps no change.
                if i0 + MR < k {
                    let next = u.add(packed_at(g, xi, c0, kc, i0 + MR)) as *const i8;
                    for line in (0..kc * MR * 4).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(next.add(line));
                    }
                }
                for j0 in (0..nt).step_by(NR) {
                    igemm::micro_packed(
                        MR.min(k - i0),
                        NR.min(nt - j0),
                        kc,
                        a,
                        v.add(xi * c * tb + j0 * c + c0 * NR),
                        m.add(i0 * ms + xi * tb + j0),
                        ms,
                        c0 > 0,
                    );
                }
            }
        }
    }
    match g.scheme {
        Scheme::Stride1 => output_transform::<4>(g, runs, tb, m, out),
        Scheme::Stride2 => output_transform::<5>(g, runs, tb, m, out),
        Scheme::Stride2Input => output_transform_gradient(g, runs, tb, m, out),
    }
}

/// Lanes `l` of a 16-float load at column `q` of a row of `w` floats with
/// `0 <= q + l < w`.
#[inline(always)]
fn inside(q: isize, w: usize) -> u16 {
    let lo = (-q).clamp(0, 16) as u32;
    let hi = (w as isize - q).clamp(0, 16) as u32;
    if hi <= lo {
        0
    } else {
        (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as u16
    }
}

/// Lane indices for `_mm512_permutex2var_ps`: even and odd elements of 32,
/// and two 16-lane vectors interleaved (lanes 0-7, then 8-15).
static EVEN: [i32; 16] = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30];
static ODD: [i32; 16] = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31];
/// Lanes 1-15 of the first vector, then the second's lane 0.
static NEXT: [i32; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
/// 64-bit lane indices: two vectors' pairs of floats interleaved (their
/// lanes 0-3, then 4-7).
static PAIRS_LO: [i64; 8] = [0, 8, 1, 9, 2, 10, 3, 11];
static PAIRS_HI: [i64; 8] = [4, 12, 5, 13, 6, 14, 7, 15];
static ZIP_LO: [i32; 16] = [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23];
static ZIP_HI: [i32; 16] = [8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31];

/// `(B^T d B)[xi]` for every input channel and every tile of `runs`, `d`
/// the tile's 4 x 4 input window (zero outside the input), with `B^T = [1
/// 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]`, into `v` as [`block`] lays it out
/// (the task's tile `j` in column `j % NR` of micro-panel `j / NR`); lane
/// `l` of a vector is the run's tile `l`.
///
/// # Safety
/// AVX-512F; x holds g's input, v `16 x C x tb` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn input_transform(g: &Layer, runs: &[Run], tb: usize, x: *const f32, v: *mut f32) {
    use std::arch::x86_64::*;
    let (c, h, w) = (g.c, g.h, g.w);
    let (ph, pw) = (g.padding[0] as isize, g.padding[1] as isize);
    let idx = |t: &[i32; 16]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (even, odd) = (idx(&EVEN), idx(&ODD));
    for ch in 0..c {
        for run in runs {
            let plane = x.add((run.n * c + ch) * h * w);
            // Input column of the run's first window's first column.
            let q = 2 * run.tx as isize - pw;
            // Rows of the windows after B^T along the columns: d0 - d2,
            // d1 + d2, d2 - d1, d1 - d3 for columns d0..d3 of each window.
            let mut t = [[_mm512_setzero_ps(); 4]; 4];
            for (i, ti) in t.iter_mut().enumerate() {
                let r = (2 * run.ty + i) as isize - ph;
                if r < 0 || r >= h as isize {
                    continue;
                }
                let row = plane.add(r as usize * w);
                let load = |q: isize| _mm512_maskz_loadu_ps(inside(q, w), row.wrapping_offset(q));
                let (a, b) = (load(q), load(q + 16));
                let (a2, b2) = (load(q + 2), load(q + 18));
                let (d0, d1) = (
                    _mm512_permutex2var_ps(a, even, b),
                    _mm512_permutex2var_ps(a, odd, b),
                );
                let (d2, d3) = (
                    _mm512_permutex2var_ps(a2, even, b2),
                    _mm512_permutex2var_ps(a2, odd, b2),
                );
                *ti = [
                    _mm512_sub_ps(d0, d2),
                    _mm512_add_ps(d1, d2),
                    _mm512_sub_ps(d2, d1),
                    _mm512_sub_ps(d1, d3),
                ];
            }
            // B^T down the rows, column by column: point (a, s) at `4 a + s`,
            // points `c * tb` floats apart.
            let (mask, step) = (first(run.len), c * tb);
            let (jp, jj) = (run.j / NR, run.j % NR);
            let mut at = v.add((jp * c + ch) * NR + jj);
            for s in 0..4 {
                let out = [
                    _mm512_sub_ps(t[0][s], t[2][s]),
                    _mm512_add_ps(t[1][s], t[2][s]),
                    _mm512_sub_ps(t[2][s], t[1][s]),
                    _mm512_sub_ps(t[1][s], t[3][s]),
                ];
                let mut p = at;
                for val in out {
                    _mm512_mask_storeu_ps(p, mask, val);
                    p = p.add(4 * step);
                }
                at = at.add(step);
            }
        }
    }
}

/// [`input_transform`] for the 25-point schemes, `B^T d B` with the same
/// `B^T` along both axes. [`Scheme::Stride2`] (`GRADIENT` false): the tile's
/// 5 x 5 input window `d` (rows and columns `4 t - padding ..`), `B^T = [1 0
/// -1 0 0; 0 0 1 0 0; 0 0 -1 0 1; 0 1 0 0 0; 0 0 0 1 0]` (the even inputs
/// through F(2, 2), then the odd ones as they are); lane `l`, the run's tile
/// `l`, reads columns `4 l ..= 4 l + 4` of the run's first: the 64 columns
/// of 16 tiles split into even and odd columns, each of those again (6
/// permutes), the fifth column the next tile's first (one more).
/// [`Scheme::Stride2Input`] (`GRADIENT` true): the tile's 3 x 3 window of
/// the output gradient (rows and columns `2 t ..= 2 t + 2`), `B^T = [1 -1 0;
/// 0 1 0; 0 -1 1; 1 0 0; 0 1 0]`; lane `l` reads columns `2 l ..= 2 l + 2`:
/// even and odd columns of 32, the third the next tile's first. Point `(a,
/// s)` at `5 a + s` in both.
///
/// # Safety
/// AVX-512F; x holds g's input, v `25 x C x tb` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn input_transform_25<const GRADIENT: bool>(
    g: &Layer,
    runs: &[Run],
    tb: usize,
    x: *const f32,
    v: *mut f32,
) {
    use std::arch::x86_64::*;
    let (c, h, w) = (g.c, g.h, g.w);
    // Tiles' offset along an axis, rows of a window, and its origin.
    let (span, rows) = if GRADIENT { (2, 3) } else { (4, 5) };
    let (ph, pw) = if GRADIENT {
        (0, 0)
    } else {
        (g.padding[0] as isize, g.padding[1] as isize)
    };
    let idx = |t: &[i32; 16]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (even, odd, next) = (idx(&EVEN), idx(&ODD), idx(&NEXT));
    let perm = |a: __m512, i: __m512i, b: __m512| _mm512_permutex2var_ps(a, i, b);
    let sub = |a: __m512, b: __m512| _mm512_sub_ps(a, b);
    // B^T along one axis, from a window's values along it.
    let bt = |x: [__m512; 5]| {
        if GRADIENT {
            [sub(x[0], x[1]), x[1], sub(x[2], x[1]), x[0], x[1]]
        } else {
            [sub(x[0], x[2]), x[2], sub(x[4], x[2]), x[1], x[3]]
        }
    };
    for ch in 0..c {
        for run in runs {
            let plane = x.add((run.n * c + ch) * h * w);
            // Input column of the run's first window's first column.
            let q = (span * run.tx) as isize - pw;
            // Rows of the windows after B^T along the columns.
            let mut t = [[_mm512_setzero_ps(); 5]; 5];
            for (i, ti) in t.iter_mut().take(rows).enumerate() {
                let r = (span * run.ty + i) as isize - ph;
                if r < 0 || r >= h as isize {
                    continue;
                }
                let row = plane.add(r as usize * w);
                if ch + PREFETCH_PLANES < c {
                    // The same row of the plane PREFETCH_PLANES channels on
                    // (a prefetch does not fault past the plane's ends).
                    let ahead = row.wrapping_add(PREFETCH_PLANES * h * w).wrapping_offset(q);
                    let floats = span * run.len + rows - span;
                    for line in (0..floats * 4 + 63).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>((ahead as *const i8).wrapping_add(line));
                    }
                }
                let load = |q: isize| _mm512_maskz_loadu_ps(inside(q, w), row.wrapping_offset(q));
                // Column `span * l + j` of the run's first, for lane l.
                let cols = if GRADIENT {
                    let [a, b, cc] = [0, 16, 32].map(|o| load(q + o));
                    let x0 = perm(a, even, b);
                    [x0, perm(a, odd, b), perm(x0, next, cc), x0, x0]
                } else {
                    let [a, b, cc, d, f] = [0, 16, 32, 48, 64].map(|o| load(q + o));
                    // Even and odd columns of the first and second 32.
                    let (e0, o0) = (perm(a, even, b), perm(a, odd, b));
                    let (e1, o1) = (perm(cc, even, d), perm(cc, odd, d));
                    let x0 = perm(e0, even, e1);
                    let x3 = perm(o0, odd, o1);
                    [
                        x0,
                        perm(o0, even, o1),
                        perm(e0, odd, e1),
                        x3,
                        perm(x0, next, f),
                    ]
                };
                *ti = bt(cols);
            }
            // B^T down the rows, column by column: point (a, s) at `5 a + s`,
            // points `c * tb` floats apart.
            let (mask, step) = (first(run.len), c * tb);
            let (jp, jj) = (run.j / NR, run.j % NR);
            let at = v.add((jp * c + ch) * NR + jj);
            for s in 0..5 {
                let out = bt([t[0][s], t[1][s], t[2][s], t[3][s], t[4][s]]);
                for (a, val) in out.into_iter().enumerate() {
                    _mm512_mask_storeu_ps(at.add((5 * a + s) * step), mask, val);
                }
            }
        }
    }
}

/// [`output_transform`] for [`Scheme::Stride2Input`]: `A^T = [0 0 0 1 0;
/// 1 1 0 0 0; 0 0 0 0 1; 0 1 1 0 0]`, a 4 x 4 tile of the input gradient
/// per 25 products; the four outputs of a row of 16 tiles (64 columns) are
/// interleaved by two rounds of permutes (pairs of floats, then pairs of
/// pairs). Outputs past the last row or column are not stored.
///
/// # Safety
/// AVX-512F; m holds `OC` channels' products (see [`block`]), out the
/// input gradient.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn output_transform_gradient(
    g: &Layer,
    runs: &[Run],
    tb: usize,
    m: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let (k, oh, ow) = (g.oc, g.oh, g.ow);
    let idx = |t: &[i32; 16]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (zip_lo, zip_hi) = (idx(&ZIP_LO), idx(&ZIP_HI));
    let idx64 = |t: &[i64; 8]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (pairs_lo, pairs_hi) = (idx64(&PAIRS_LO), idx64(&PAIRS_HI));
    let add = |a: __m512, b: __m512| _mm512_add_ps(a, b);
    let at_rows = |p: [__m512; 5]| [p[3], add(p[0], p[1]), p[4], add(p[1], p[2])];
    let cast = |v: __m512| _mm512_castps_si512(v);
    let zero = _mm512_setzero_ps();
    for o in 0..k {
        for run in runs {
            let p = products_of::<5>(m, o, tb, run);
            let mut z = [[zero; 5]; 4];
            for s in 0..5 {
                let rows = at_rows([p[0][s], p[1][s], p[2][s], p[3][s], p[4][s]]);
                for (zr, val) in z.iter_mut().zip(rows) {
                    zr[s] = val;
                }
            }
            let col = 4 * run.tx;
            let cols = (ow - col).min(4 * run.len);
            for (r, zr) in z.into_iter().enumerate() {
                let oy = 4 * run.ty + r;
                if oy >= oh {
                    continue;
                }
                let [y0, y1, y2, y3] = at_rows(zr);
                // Tiles' (y0, y1) and (y2, y3) pairs, then pairs of pairs:
                // vector `i` holds tiles 4 i .. 4 i + 4.
                let (a_lo, a_hi) = (
                    _mm512_permutex2var_ps(y0, zip_lo, y1),
                    _mm512_permutex2var_ps(y0, zip_hi, y1),
                );
                let (b_lo, b_hi) = (
                    _mm512_permutex2var_ps(y2, zip_lo, y3),
                    _mm512_permutex2var_ps(y2, zip_hi, y3),
                );
                let quads = [
                    _mm512_permutex2var_epi64(cast(a_lo), pairs_lo, cast(b_lo)),
                    _mm512_permutex2var_epi64(cast(a_lo), pairs_hi, cast(b_lo)),
                    _mm512_permutex2var_epi64(cast(a_hi), pairs_lo, cast(b_hi)),
                    _mm512_permutex2var_epi64(cast(a_hi), pairs_hi, cast(b_hi)),
                ];
                let at = out.add(((run.n * k + o) * oh + oy) * ow + col);
                for (i, quad) in quads.into_iter().enumerate() {
                    if cols > 16 * i {
                        let lanes = first(cols - 16 * i);
                        _mm512_mask_storeu_ps(at.add(16 * i), lanes, _mm512_castsi512_ps(quad));
                    }
                }
            }
        }
    }
}

/// Output channel `o`'s products for the tiles of `run`: point (a, s) at
/// `SIDE * a + s`, points `tb` floats apart, read in memory order; the
/// entries past `SIDE` stay zero. Both output transforms load through here.
///
/// # Safety
/// AVX-512F; m holds `OC` channels' products (see [`block`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn products_of<const SIDE: usize>(
    m: *const f32,
    o: usize,
    tb: usize,
    run: &Run,
) -> [[std::arch::x86_64::__m512; 5]; 5] {
    use std::arch::x86_64::*;
    let mask = first(run.len);
    let mut p = [[_mm512_setzero_ps(); 5]; 5];
    let mut at = m.add(o * products(SIDE * SIDE, tb) + run.j);
    for pa in p.iter_mut().take(SIDE) {
        for ps in pa.iter_mut().take(SIDE) {
            *ps = _mm512_maskz_loadu_ps(mask, at);
            at = at.add(tb);
        }
    }
    p
}

/// `out[tile] = A^T M A` for every output channel and every tile of `runs`,
/// with `A^T = [1 1 1 0; 0 1 -1 -1]` at stride 1, `[1 1 0 1 0; 0 1 1 0 1]`
/// at stride 2: output pixels past the output's last row or column are not
/// stored.
///
/// # Safety
/// AVX-512F; m holds `OC` channels' products (see [`block`]), out
/// g's output.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn output_transform<const SIDE: usize>(
    g: &Layer,
    runs: &[Run],
    tb: usize,
    m: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let (k, oh, ow) = (g.oc, g.oh, g.ow);
    let idx = |t: &[i32; 16]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (zip_lo, zip_hi) = (idx(&ZIP_LO), idx(&ZIP_HI));
    let add = |a: __m512, b: __m512| _mm512_add_ps(a, b);
    let sub = |a: __m512, b: __m512| _mm512_sub_ps(a, b);
    // A^T along one axis: the tile's two outputs from `SIDE` points.
    let at_rows = |p: [__m512; 5]| match SIDE {
        4 => [add(add(p[0], p[1]), p[2]), sub(sub(p[1], p[2]), p[3])],
        _ => [add(add(p[0], p[1]), p[3]), add(add(p[1], p[2]), p[4])],
    };
    let zero = _mm512_setzero_ps();
    for o in 0..k {
        for run in runs {
            let p = products_of::<SIDE>(m, o, tb, run);
            // A^T along the rows of the products, then along the columns.
            let mut z = [[zero; 5]; 2];
            for s in 0..SIDE {
                let [z0, z1] = at_rows([p[0][s], p[1][s], p[2][s], p[3][s], p[4][s]]);
                z[0][s] = z0;
                z[1][s] = z1;
            }
            let col = 2 * run.tx;
            let cols = (ow - col).min(2 * run.len);
            for (r, zr) in z.into_iter().enumerate() {
                let oy = 2 * run.ty + r;
                if oy >= oh {
                    continue;
                }
                let [y0, y1] = at_rows(zr);
                let at = out.add(((run.n * k + o) * oh + oy) * ow + col);
                _mm512_mask_storeu_ps(at, first(cols), _mm512_permutex2var_ps(y0, zip_lo, y1));
                if cols > 16 {
                    let hi = _mm512_permutex2var_ps(y0, zip_hi, y1);
                    _mm512_mask_storeu_ps(at.add(16), first(cols - 16), hi);
                }
            }
        }
    }
}
