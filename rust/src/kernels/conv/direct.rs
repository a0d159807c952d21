//! Direct float32 forward for convolutions with few inputs per output
//! (`C * KH * KW` at most [`MAX_TAPS`], ungrouped): the first layer of an
//! image model, such as mobilenet_v3_small's 3 -> 16 3 x 3 stride-2 stem.
//!
//! Why not the implicit GEMM: at a depth of 27 it packs every input value
//! into an im2col micro-panel that only 16 output channels then read once,
//! and its `12 x 32` register tile covers 16 channels in two passes; the
//! packing cost as much as the product (1.3x torch CPU's time on the stem).
//! Here each task copies the input rows it needs once into zero-padded,
//! column-phase-split rows (the layout of the depthwise row kernels, see
//! [`super::depthwise`]: every tap then reads a contiguous run of columns,
//! in bounds by construction), and each run of 16 output columns keeps 16
//! output channels in registers across all taps: one load of the input per
//! tap feeds 16 multiply-adds, each with its weight broadcast from a
//! `taps x 16` table.
//!
//! Each output sums its taps in the weight's order (channel, row, column)
//! in one task: results depend on the shapes only, never on the thread
//! count.

#![allow(clippy::too_many_arguments)]

use super::depthwise::{pad_for, phase};
use super::{igemm, parallel, Conv2d};
#[cfg(target_arch = "x86_64")]
use crate::kernels::linalg::first_lanes as first;
use std::cell::RefCell;

/// Most input channels taken here (see [`applies`]).
const MAX_CHANNELS: usize = 4;
/// Most `C * KH * KW` taken here: a 7 x 7 kernel over 3 channels.
const MAX_TAPS: usize = 160;
/// Output channels per register block.
const OB: usize = 16;
/// Lanes of a vector (output columns per step).
const L: usize = 16;
/// Output rows per task (fewer when that leaves too few tasks).
const ROWS: usize = 8;

thread_local! {
    /// Per-thread phase-split input rows.
    static ROWS_BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether the forward of `g` runs here: AVX-512, float32 (the caller's
/// check), ungrouped, at most [`MAX_CHANNELS`] input channels and
/// [`MAX_TAPS`] taps, rows at least one vector wide. Measured against the
/// implicit GEMM (batch 8, one thread, alternating in one process): 3 -> 16
/// 3 x 3 stride 2 at 224 x 224 0.81-0.91x its time, 3 -> 24 0.72-0.79x, 3
/// -> 64 7 x 7 stride 2 (resnet's stem) 0.87x, 3 -> 32 5 x 5 at 64 x 64
/// 0.95x; but 8 -> 16 and 16 -> 32 3 x 3 at 56 x 56 1.29x and 1.16x: with
/// more input channels the GEMM's packed panels pay for themselves.
pub(super) fn applies(g: &Conv2d) -> bool {
    igemm::wide()
        && g.groups == 1
        && g.c <= MAX_CHANNELS
        && g.ck() <= MAX_TAPS
        && g.ow >= L
        && !g.pointwise()
}

/// Column layout of one phase-split input row: phase `q` (input columns
/// `q, q + sw, ...`) at `q * rw`, its data from column `pl`, zeros around
/// it; tap column `kj` reads phase `cols[kj].0` from `pl + cols[kj].1`.
struct Cols {
    cols: Vec<(usize, isize)>,
    pl: usize,
    rw: usize,
}

fn cols(g: &Conv2d) -> Cols {
    let sw = g.stride[1];
    let cols: Vec<(usize, isize)> = (0..g.kw)
        .map(|kj| phase(kj, sw, g.padding[1], g.dilation[1]))
        .collect();
    let (pl, rw) = pad_for(cols.iter().map(|c| c.1), g.ow, g.w.div_ceil(sw));
    Cols { cols, pl, rw }
}

/// `out = conv2d(x, w) (+ bias)` for a layer [`applies`] holds for.
pub(super) fn forward(
    g: &Conv2d,
    out: *mut f32,
    x: *const f32,
    w: *const f32,
    bias: Option<*const f32>,
) {
    let (ck, blocks) = (g.ck(), g.oc.div_ceil(OB));
    // The weight as `blocks` tables of `ck` rows of the block's [`width`]
    // (channel o of block b, tap t at `b * ck * OB + t * width + o % OB`),
    // zero past the last channel; the bias as `blocks x OB`.
    let mut wt = vec![0f32; blocks * ck * OB];
    let mut bt = vec![0f32; blocks * OB];
    for o in 0..g.oc {
        for t in 0..ck {
            // SAFETY: w holds oc x ck floats.
            wt[(o / OB) * ck * OB + t * width(g.oc, o / OB) + o % OB] =
                unsafe { *w.add(o * ck + t) };
        }
        if let Some(b) = bias {
            // SAFETY: bias holds oc floats.
            bt[o] = unsafe { *b.add(o) };
        }
    }
    let layout = cols(g);
    let rows = ROWS.min(
        g.oh.div_ceil((4 * parallel::num_threads()).div_ceil(g.n))
            .max(1),
    );
    let per_sample = g.oh.div_ceil(rows);
    let (out, x) = (out as usize, x as usize);
    parallel::parallel_for(g.n * per_sample, |task| {
        let (n, oh0) = (task / per_sample, (task % per_sample) * rows);
        let oh1 = (oh0 + rows).min(g.oh);
        // Input rows the task's output rows read, clipped to the input.
        let reach = |oh: usize| (oh * g.stride[0]) as isize - g.padding[0] as isize;
        let ih0 = reach(oh0).max(0) as usize;
        let ih1 = ((reach(oh1 - 1) + ((g.kh - 1) * g.dilation[0]) as isize + 1).max(0) as usize)
            .min(g.h)
            .max(ih0);
        let sw = g.stride[1];
        let row_len = sw * layout.rw;
        let len = g.c * (ih1 - ih0) * row_len;
        ROWS_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            let buf = &mut buf[..len];
            for c in 0..g.c {
                for ih in ih0..ih1 {
                    // SAFETY: x holds n x c x h x w floats; row (n, c, ih).
                    let src = unsafe {
                        std::slice::from_raw_parts(
                            (x as *const f32).add(((n * g.c + c) * g.h + ih) * g.w),
                            g.w,
                        )
                    };
                    let row = &mut buf[(c * (ih1 - ih0) + ih - ih0) * row_len..][..row_len];
                    split_row(src, sw, layout.pl, layout.rw, row);
                }
            }
            let mut taps = [(0isize, 0usize); MAX_TAPS];
            for oh in oh0..oh1 {
                let mut nt = 0;
                for c in 0..g.c {
                    for ki in 0..g.kh {
                        let ih = reach(oh) + (ki * g.dilation[0]) as isize;
                        if ih < 0 || ih >= g.h as isize {
                            continue;
                        }
                        let r = (c * (ih1 - ih0) + ih as usize - ih0) * row_len;
                        for (kj, &(q, base)) in layout.cols.iter().enumerate() {
                            let off = (r + q * layout.rw + layout.pl) as isize + base;
                            taps[nt] = (off, (c * g.kh + ki) * g.kw + kj);
                            nt += 1;
                        }
                    }
                }
                for b in 0..blocks {
                    let nob = OB.min(g.oc - b * OB);
                    let dst =
                        (out as *mut f32).wrapping_add(((n * g.oc + b * OB) * g.oh + oh) * g.ow);
                    // SAFETY: `applies` held (AVX-512); every tap reads inside
                    // buf (`pad_for`); the task writes output row oh of
                    // sample n only, channels b * OB.. below oc.
                    #[cfg(target_arch = "x86_64")]
                    unsafe {
                        let args = (buf.as_ptr(), &taps[..nt], wt[b * ck * OB..].as_ptr());
                        let bias = &bt[b * OB..(b + 1) * OB];
                        if width(g.oc, b) < OB {
                            row::<{ OB / 2 }>(args.0, args.1, args.2, bias, dst, g.p(), g.ow, nob)
                        } else {
                            row::<OB>(args.0, args.1, args.2, bias, dst, g.p(), g.ow, nob)
                        }
                    }
                }
            }
        });
    });
}

/// Output channels of block `b` in registers: [`OB`], or half that for a
/// last block of at most `OB / 2` channels.
fn width(oc: usize, b: usize) -> usize {
    if oc - b * OB <= OB / 2 {
        OB / 2
    } else {
        OB
    }
}

/// One input row into its phase-split form: phase `q` at `q * rw`, zeros,
/// then `src[q], src[q + sw], ...` from column `pl`, then zeros to `rw`.
fn split_row(src: &[f32], sw: usize, pl: usize, rw: usize, dst: &mut [f32]) {
    for q in 0..sw {
        let row = &mut dst[q * rw..(q + 1) * rw];
        let n = src.len().saturating_sub(q).div_ceil(sw);
        row[..pl].fill(0.0);
        if q < src.len() {
            igemm::copy_strided(&src[q..], sw, &mut row[pl..pl + n]);
        }
        row[pl + n..].fill(0.0);
    }
}

/// Output row `dst[o * plane + j] = bias[o] + sum_t w[t][o] * src[off_t + j]`
/// for `o < nob`, `j < ow`, 16 columns at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row<const N: usize>(
    src: *const f32,
    taps: &[(isize, usize)],
    w: *const f32,
    bias: &[f32],
    dst: *mut f32,
    plane: usize,
    ow: usize,
    nob: usize,
) {
    use std::arch::x86_64::*;
    let mut j = 0;
    while j < ow {
        let mut acc = [_mm512_setzero_ps(); N];
        for (o, a) in acc.iter_mut().enumerate() {
            *a = _mm512_set1_ps(bias[o]);
        }
        for &(off, t) in taps {
            let xv = _mm512_loadu_ps(src.offset(off).add(j));
            let wt = w.add(t * N);
            for (o, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(xv, _mm512_set1_ps(*wt.add(o)), *a);
            }
        }
        let m = first(ow - j);
        for (o, a) in acc.iter().enumerate().take(nob) {
            _mm512_mask_storeu_ps(dst.add(o * plane + j), m, *a);
        }
        j += L;
    }
}
