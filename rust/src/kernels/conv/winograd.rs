//! Winograd's minimal filtering F(2x2, 3x3) for float32 3 x 3 convolutions of
//! stride 1: resnet's 3 x 3 layers, forward and input gradient (the input
//! gradient of a stride-1 layer is itself a stride-1 convolution, see
//! [`super::transposed`]).
//!
//! Each 2 x 2 tile of output pixels is `A^T [(G g G^T) . (B^T d B)] A` for
//! its 4 x 4 input window `d` (Lavin & Gray, "Fast Algorithms for
//! Convolutional Neural Networks", 2016): 16 multiplications per tile and
//! channel pair instead of 36, so the products summed over input channels
//! become 16 matrix products `M[xi] (OC x tiles) = U[xi] (OC x C) @ V[xi] (C
//! x tiles)`, one per point `xi` of the 4 x 4 transform domain, with 2.25x
//! fewer multiply-adds than the direct convolution (1.72x on 7 x 7 maps,
//! whose last tile row and column are half outside).
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
/// Points of the transform domain (4 x 4).
const XI: usize = 16;
/// Fewest input and output channels. Chosen, not measured: a tile's
/// transforms cost in proportion to the channels, its products to their
/// product, so few channels favour the direct product; resnet's 3 x 3
/// layers have 64 or more.
const MIN_CHANNELS: usize = 32;

/// Whether [`forward`] computes `g`: a float32 3 x 3, stride-1,
/// undilated, ungrouped convolution whose output is the input's size plus
/// twice the padding less two (padding at most 2), with enough channels and
/// at least two micro-panels of tiles (64). The choice depends on the
/// shapes only.
pub(super) fn applies(g: &Conv2d) -> bool {
    g.kh == 3
        && g.kw == 3
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && g.groups == 1
        && g.padding[0] <= 2
        && g.padding[1] <= 2
        && g.oh + 2 == g.h + 2 * g.padding[0]
        && g.ow + 2 == g.w + 2 * g.padding[1]
        && g.c >= MIN_CHANNELS
        && g.oc >= MIN_CHANNELS
        && tiles(g).0 >= 2 * NR
        && igemm::available()
}

/// `(all tiles, tile rows, tile columns)` of a sample's output.
fn tiles(g: &Conv2d) -> (usize, usize, usize) {
    let (th, tw) = (g.oh.div_ceil(2), g.ow.div_ceil(2));
    (g.n * th * tw, th, tw)
}

/// Micro-panels of tiles per task: each packed panel of `U` is read once
/// per task for all of them, so more panels mean fewer passes over `U` (a
/// 512-channel layer's is 16 MB), as long as every thread still has a
/// task. No result depends on it: a tile's arithmetic is the same in any
/// task and panel.
fn panels_per_task(g: &Conv2d) -> usize {
    let panels = tiles(g).0.div_ceil(NR);
    (panels / parallel::num_threads()).clamp(1, MAX_PANELS)
}

thread_local! {
    /// A task's transformed input (`XI x C x tiles`) and products (`XI x OC
    /// x tiles`), reused across calls.
    static BUFS: RefCell<[Vec<f32>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// `out = x * weight` (no bias) for a `g` that [`applies`].
pub(super) fn forward(g: &Conv2d, out: *mut f32, x: *const f32, weight: Weight) {
    let (k, c) = (g.oc, g.c);
    let len = XI * k.next_multiple_of(igemm::MR) * c;
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
                for (buf, rows) in [(&mut *v, c), (&mut *m, k)] {
                    if buf.len() < XI * rows * tb {
                        buf.resize(XI * rows * tb, 0.0);
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
fn packed_at(g: &Conv2d, xi: usize, c0: usize, kc: usize, i0: usize) -> usize {
    let kpad = g.oc.next_multiple_of(igemm::MR);
    (c0 * kpad + i0 * kc) * XI + xi * kc * igemm::MR
}

/// `U[xi] = G g G^T` for every (output, input) channel pair into `dst` as
/// [`packed_at`] lays it out, a task per row panel. `g`'s 3 x 3 taps are the
/// weight's as given, or for the input gradient ([`Weight::Transposed`])
/// the other convolution's weight `[C, OC, 3, 3]` (this one's `C` and `OC`
/// swapped) with its taps reversed.
fn transform_weight(g: &Conv2d, weight: Weight, dst: &mut [f32]) {
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
/// 1/2; 0 0 1]`. A weight as given has each row's taps of consecutive
/// channels contiguous, so 16 channels' taps (144 floats a row) are loaded
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
unsafe fn transform_panel(g: &Conv2d, src: *const f32, given: bool, i0: usize, dst: *mut f32) {
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
            // G g: 4 rows of 3 columns.
            let mut gg = [[_mm512_setzero_ps(); 3]; 4];
            for s in 0..3 {
                let (r0, r1, r2) = (tap(s), tap(3 + s), tap(6 + s));
                gg[0][s] = r0;
                gg[1][s] = _mm512_mul_ps(half, add3(r0, r1, r2));
                gg[2][s] = _mm512_mul_ps(half, alt3(r0, r1, r2));
                gg[3][s] = r2;
            }
            // (G g) G^T: point (a, b) at 4 a + b.
            for (a, [t0, t1, t2]) in gg.into_iter().enumerate() {
                let u = [
                    t0,
                    _mm512_mul_ps(half, add3(t0, t1, t2)),
                    _mm512_mul_ps(half, alt3(t0, t1, t2)),
                    t2,
                ];
                for (b, val) in u.into_iter().enumerate() {
                    let at = dst.add(packed_at(g, 4 * a + b, c0, kc, i0) + cc * MR);
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
fn runs(g: &Conv2d, t0: usize, t1: usize, dst: &mut [Run; RUNS]) -> usize {
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
/// multiplied into `m` (point `xi`'s `OC x tb`, row-major), transformed
/// back into `out`.
///
/// # Safety
/// As [`forward`]'s task.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn block(
    g: &Conv2d,
    b: usize,
    tb: usize,
    x: *const f32,
    u: *const f32,
    v: *mut f32,
    m: *mut f32,
    out: *mut f32,
) {
    use igemm::MR;
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
    input_transform(g, runs, tb, x, v);
    let nt = t1 - t0;
    // BLIS's order within a point: a block of B's rows stays in L1 while
    // A's panels pass, each panel used for every micro-panel of tiles.
    for xi in 0..XI {
        for c0 in (0..c).step_by(CB) {
            let kc = CB.min(c - c0);
            for i0 in (0..k).step_by(MR) {
                let a = u.add(packed_at(g, xi, c0, kc, i0));
                for j0 in (0..nt).step_by(NR) {
                    igemm::micro_packed(
                        MR.min(k - i0),
                        NR.min(nt - j0),
                        kc,
                        a,
                        v.add(xi * c * tb + j0 * c + c0 * NR),
                        m.add((xi * k + i0) * tb + j0),
                        tb,
                        c0 > 0,
                    );
                }
            }
        }
    }
    output_transform(g, runs, tb, m, out);
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
static ZIP_LO: [i32; 16] = [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23];
static ZIP_HI: [i32; 16] = [8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31];

/// `(B^T d B)[xi]` for every input channel and every tile of `runs`, `d`
/// the tile's 4 x 4 input window (zero outside the input), with `B^T = [1
/// 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]`, into `v` as [`block`] lays it out
/// (the task's tile `j` in column `j % NR` of micro-panel `j / NR`); lane
/// `l` of a vector is the run's tile `l`.
///
/// # Safety
/// AVX-512F; x holds g's input, v `XI x C x tb` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn input_transform(g: &Conv2d, runs: &[Run], tb: usize, x: *const f32, v: *mut f32) {
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

/// `out[tile] = A^T M A` for every output channel and every tile of `runs`,
/// with `A^T = [1 1 1 0; 0 1 -1 -1]`: output pixels past the output's last
/// row or column are not stored.
///
/// # Safety
/// AVX-512F; m holds `XI x OC x tb` floats (the tiles' products), out g's
/// output.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn output_transform(g: &Conv2d, runs: &[Run], tb: usize, m: *const f32, out: *mut f32) {
    use std::arch::x86_64::*;
    let (k, oh, ow) = (g.oc, g.oh, g.ow);
    let idx = |t: &[i32; 16]| _mm512_loadu_si512(t.as_ptr() as *const _);
    let (zip_lo, zip_hi) = (idx(&ZIP_LO), idx(&ZIP_HI));
    for o in 0..k {
        for run in runs {
            let mask = first(run.len);
            // Point (a, s) at `4 a + s`, points `k * tb` floats apart.
            let step = k * tb;
            let mut at = m.add(o * tb + run.j);
            // A^T along the rows of the 4 x 4 products, then along the columns.
            let mut z = [[_mm512_setzero_ps(); 4]; 2];
            for s in 0..4 {
                let p = |a: usize| _mm512_maskz_loadu_ps(mask, at.add(4 * a * step));
                let (p0, p1, p2, p3) = (p(0), p(1), p(2), p(3));
                at = at.add(step);
                z[0][s] = _mm512_add_ps(_mm512_add_ps(p0, p1), p2);
                z[1][s] = _mm512_sub_ps(_mm512_sub_ps(p1, p2), p3);
            }
            let col = 2 * run.tx;
            let cols = (ow - col).min(2 * run.len);
            for (r, zr) in z.iter().enumerate() {
                let oy = 2 * run.ty + r;
                if oy >= oh {
                    continue;
                }
                let y0 = _mm512_add_ps(_mm512_add_ps(zr[0], zr[1]), zr[2]);
                let y1 = _mm512_sub_ps(_mm512_sub_ps(zr[1], zr[2]), zr[3]);
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
