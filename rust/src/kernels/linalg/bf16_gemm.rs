//! bfloat16 matrix products on AVX512_BF16 (`vdpbf16ps`).
//!
//! Hand-written because the gemm crate has no bfloat16 kernel (gemm 0.19:
//! f32, f64, c32, c64 and f16, the last widened to f32); the widening path
//! ([`super::half_bmm`]) converts both operands to float32 and runs the f32
//! kernel, which reads twice the bytes and does half the multiply-adds per
//! instruction of `vdpbf16ps` (16 lanes x 2 products, float32 accumulate).
//!
//! Goto-style blocking: output blocks of `MC x NC` are independent tasks
//! (over foo's thread pool when the product is large); each walks `k` in
//! blocks of `KC`, packs its `KC x NC` slice of B into pair-interleaved
//! panels of `NR` columns (`[k/2][NR]` u32, each u32 two consecutive-k
//! bfloat16, the layout `vdpbf16ps` multiplies) and runs an `MR x NR`
//! micro-kernel (24 zmm accumulators) that broadcasts one pair of A and
//! multiplies it with two 16-lane vectors of B. A row-major A with an even
//! depth (a Linear's input, an output gradient) is read in place, its pairs
//! broadcast straight from its rows; any other A (a transposed input in a
//! weight gradient) is packed into panels of `MR` rows (`[k/2][MR]` u32).
//! Accumulators live in float32 across k blocks (a per-task tile buffer);
//! each output is rounded once, as CPU's oneDNN does, in registers at the
//! end of the last k block when the output is row-major. Edge tiles run the
//! same kernel with fewer rows or one vector (zero-padded panels, masked
//! stores), so no output is computed twice.
//!
//! `vdpbf16ps` treats bfloat16 subnormal inputs and float32 subnormal
//! results as zero (DAZ/FTZ), as oneDNN's bfloat16 kernels on CPU do.
//!
//! Determinism: each output sums `k` in an order fixed by the shapes
//! (pairs, then `KC` blocks in order); tasks split only `m` and `n`.

use super::{for_batches, Mat, SendPtr, Shape};
use crate::kernels::parallel;
use half::bf16;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// Rows of the micro-kernel.
const MR: usize = 12;
/// Columns of the micro-kernel (two 16-lane vectors).
const NR: usize = 32;
/// Most depth of a k block. Depths up to it (every Linear layer's of the
/// training steps benchmarked) run as one block, so the float32 tile is
/// written once rather than reloaded per block; deeper products split `k`
/// into even blocks (784 at 256 had left a 16-deep last block that paid a
/// full pack and tile reload). 256 -> 1024 with even blocks and the panel
/// reuse below: 256x784x1024 and 1024^3 at one thread 81-83% -> 87-88% of
/// `vdpbf16ps`'s peak (about 520 GFLOP/s a core on this machine).
const KC: usize = 1024;
/// Rows of an output block (a multiple of MR).
const MC: usize = 288;
/// Columns of an output block (a multiple of NR).
const NC: usize = 512;

/// Whether the AVX512_BF16 kernel runs here: the CPU has it, the SIMD level
/// in use is AVX-512 (`FOO_RS_SIMD` caps it) and `FOO_RS_BF16_GEMM` is not
/// `0` (which selects the widening path, for comparisons).
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::elementwise::simd::{level, SimdLevel};
        static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let cpu = *CPU.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bf16")
                && std::env::var("FOO_RS_BF16_GEMM").map_or(true, |v| v != "0")
        });
        cpu && level() == SimdLevel::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline(always)]
fn pair(lo: u16, hi: u16) -> u32 {
    lo as u32 | (hi as u32) << 16
}

/// The scalar packing of [`pack_a`]: any strides, and the reference of the
/// vector packers' tests.
///
/// Packs rows `0..mr` (mr <= MR) of A's `kc` columns (A at `a`, strides in
/// elements) into one panel `[kc/2][MR]` u32; missing rows and the odd last
/// column are zero.
///
/// # Safety
/// `a` must address an `mr x kc` matrix with the given strides; `dst` holds
/// `kc.div_ceil(2) * MR`.
unsafe fn pack_a_scalar(
    a: *const u16,
    rs: isize,
    cs: isize,
    mr: usize,
    kc: usize,
    dst: &mut [u32],
) {
    let kp = kc.div_ceil(2);
    if rs == 1 && cs != 1 {
        // Column-major A (a transposed gradient): pairs come from two runs.
        let full = kc / 2;
        for p in 0..kp {
            let r0 = a.offset(2 * p as isize * cs);
            let d = &mut dst[p * MR..(p + 1) * MR];
            if p < full {
                let r1 = r0.offset(cs);
                for i in 0..mr {
                    d[i] = pair(*r0.add(i), *r1.add(i));
                }
            } else {
                for i in 0..mr {
                    d[i] = pair(*r0.add(i), 0);
                }
            }
            d[mr..].fill(0);
        }
        return;
    }
    for i in 0..MR {
        if i >= mr {
            for p in 0..kp {
                dst[p * MR + i] = 0;
            }
            continue;
        }
        let row = a.offset(i as isize * rs);
        let full = kc / 2;
        if cs == 1 {
            for p in 0..full {
                dst[p * MR + i] = (row.add(2 * p) as *const u32).read_unaligned();
            }
        } else {
            for p in 0..full {
                let c = 2 * p as isize;
                dst[p * MR + i] = pair(*row.offset(c * cs), *row.offset((c + 1) * cs));
            }
        }
        if kc % 2 == 1 {
            dst[full * MR + i] = pair(*row.offset((kc - 1) as isize * cs), 0);
        }
    }
}

/// The scalar packing of [`pack_b`] (any strides).
///
/// Packs columns `0..nr` (nr <= NR) of B's `kc` rows into one panel
/// `[kc/2][NR]` u32; missing columns and the odd last row are zero.
///
/// # Safety
/// As [`pack_a`], for a `kc x nr` matrix and `kc.div_ceil(2) * NR` u32.
unsafe fn pack_b_scalar(
    b: *const u16,
    rs: isize,
    cs: isize,
    nr: usize,
    kc: usize,
    dst: &mut [u32],
) {
    let kp = kc.div_ceil(2);
    let full = kc / 2;
    if rs == 1 {
        // Column-major B (a Linear weight, transposed): pairs are adjacent.
        for j in 0..NR {
            if j >= nr {
                for p in 0..kp {
                    dst[p * NR + j] = 0;
                }
                continue;
            }
            let col = b.offset(j as isize * cs);
            for p in 0..full {
                dst[p * NR + j] = (col.add(2 * p) as *const u32).read_unaligned();
            }
            if kc % 2 == 1 {
                dst[full * NR + j] = pair(*col.add(kc - 1), 0);
            }
        }
        return;
    }
    for p in 0..kp {
        let r0 = b.offset(2 * p as isize * rs);
        let d = &mut dst[p * NR..(p + 1) * NR];
        if 2 * p + 1 < kc {
            let r1 = r0.offset(rs);
            if cs == 1 {
                for j in 0..nr {
                    d[j] = pair(*r0.add(j), *r1.add(j));
                }
            } else {
                for j in 0..nr {
                    let c = j as isize * cs;
                    d[j] = pair(*r0.offset(c), *r1.offset(c));
                }
            }
        } else {
            for j in 0..nr {
                d[j] = pair(*r0.offset(j as isize * cs), 0);
            }
        }
        d[nr..].fill(0);
    }
}

/// Packs A's `mr x kc` block as [`pack_a_scalar`] does, with AVX-512 for the
/// layouts products have: row-major A (pairs are adjacent: a 16 x 16
/// transpose of u32 pairs) and column-major A (a transposed gradient: two
/// k rows interleaved). Other strides take the scalar loop.
///
/// Packing had been scalar: in a 256 x 1024 x 1024 product at one thread it
/// took a fifth of the time (perf), against oneDNN's vector packing.
///
/// # Safety
/// As [`pack_a_scalar`]; the CPU has AVX512F/BW (the bfloat16 kernel runs
/// only where it does, see [`available`]).
unsafe fn pack_a(a: *const u16, rs: isize, cs: isize, mr: usize, kc: usize, dst: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        debug_assert!(dst.len() >= kc.div_ceil(2) * MR);
        if cs == 1 {
            return vpack::rows_of_pairs::<MR>(a, rs, mr, kc, dst.as_mut_ptr());
        }
        if rs == 1 {
            return vpack::interleaved_rows::<MR>(a, cs, mr, kc, dst.as_mut_ptr());
        }
    }
    pack_a_scalar(a, rs, cs, mr, kc, dst)
}

/// Packs B's `kc x nr` block as [`pack_b_scalar`] does, with AVX-512 for
/// row-major B (two k rows interleaved) and column-major B (a Linear weight
/// read transposed: a 16 x 16 transpose of u32 pairs per half panel).
///
/// # Safety
/// As [`pack_a`].
unsafe fn pack_b(b: *const u16, rs: isize, cs: isize, nr: usize, kc: usize, dst: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        debug_assert!(dst.len() >= kc.div_ceil(2) * NR);
        if rs == 1 {
            return vpack::rows_of_pairs::<NR>(b, cs, nr, kc, dst.as_mut_ptr());
        }
        if cs == 1 {
            return vpack::interleaved_rows::<NR>(b, rs, nr, kc, dst.as_mut_ptr());
        }
    }
    pack_b_scalar(b, rs, cs, nr, kc, dst)
}

/// The AVX-512 packers. Both produce a panel `[kc/2][W]` u32 whose entry
/// `(p, i)` holds the pair (k = 2p, 2p + 1) of line `i` (a row of A, a
/// column of B), zero for lines `>= n` and for the odd last k.
///
/// Hand-written: no crate packs pair-interleaved bfloat16 panels (the gemm
/// crate has no bfloat16 kernel at all, see the module note).
#[cfg(target_arch = "x86_64")]
pub(crate) mod vpack {
    use std::arch::x86_64::*;

    /// The first `n` lanes of a 16-lane vector (all of them from 16 on): the
    /// mask of a partial load or store, shared by every AVX-512 packer.
    #[inline(always)]
    pub(crate) fn first_lanes(n: usize) -> u16 {
        ((1u32 << n.min(16)) - 1) as u16
    }

    /// In-place transpose of a 16 x 16 matrix of u32 (`r[i]` lane `j` ->
    /// `r[j]` lane `i`): 32-bit and 64-bit unpacks within 128-bit lanes,
    /// then a 4 x 4 transpose of the 128-bit lanes. Also packs float32
    /// convolution weights (`conv/igemm.rs`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn transpose16(r: &mut [__m512i; 16]) {
        let mut t = [_mm512_setzero_si512(); 16];
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
        }
        // u[4k + c] lane L: column 4L + c of rows 4k..4k+4
        let mut u = [_mm512_setzero_si512(); 16];
        for k in 0..4 {
            u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
            u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
        }
        for c in 0..4 {
            let (a, b, cc, d) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
            let v0 = _mm512_shuffle_i32x4::<0x44>(a, b);
            let v1 = _mm512_shuffle_i32x4::<0x44>(cc, d);
            let v2 = _mm512_shuffle_i32x4::<0xEE>(a, b);
            let v3 = _mm512_shuffle_i32x4::<0xEE>(cc, d);
            r[c] = _mm512_shuffle_i32x4::<0x88>(v0, v1);
            r[4 + c] = _mm512_shuffle_i32x4::<0xDD>(v0, v1);
            r[8 + c] = _mm512_shuffle_i32x4::<0x88>(v2, v3);
            r[12 + c] = _mm512_shuffle_i32x4::<0xDD>(v2, v3);
        }
    }

    /// How far ahead of its loads [`rows_of_pairs`] prefetches each line:
    /// four cache lines. Zen 5, one thread, x @ W.t() against the old
    /// packing (medians of 11, alternating in one process, four runs): foo's
    /// time 2-11% lower at 256 x 784/1024 -> 1024, 1024^3 and 2048^3, where
    /// it was 1.01-1.24x CPU's and is now 0.97-1.09x. 512 and 1024 bytes
    /// were no better; a prefetch to L2 only (`_MM_HINT_T1`) lost most of
    /// the gain.
    const PREFETCH_BYTES: usize = 256;

    /// Lines whose pairs are adjacent in memory (line `i` at
    /// `src + i * ls`, k contiguous): 16 lines x 16 pairs are loaded and
    /// transposed at a time; masked loads cover the last pairs and missing
    /// lines, masked stores a panel narrower than 16 (`W` = 12).
    ///
    /// # Safety
    /// `src` addresses `n` lines of `kc` bfloat16; `dst` holds
    /// `kc.div_ceil(2) * W` u32; `n <= W`, `W` is 12 or 32.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn rows_of_pairs<const W: usize>(
        src: *const u16,
        ls: isize,
        n: usize,
        kc: usize,
        dst: *mut u32,
    ) {
        let full = kc / 2;
        // Pair blocks outer, line groups inner: each 128-byte pair row of a
        // 32-wide panel is written whole while it is in L1 (the groups had
        // been outer, two passes over a 64 KiB panel that L1 does not hold).
        let mut p0 = 0;
        while p0 < full {
            let np = (full - p0).min(16);
            let load_mask = first_lanes(np);
            for g in 0..W.div_ceil(16) {
                let store_mask = first_lanes((W - 16 * g).min(16));
                let lines = n.saturating_sub(16 * g).min(16);
                let mut r = [_mm512_setzero_si512(); 16];
                for (i, v) in r.iter_mut().enumerate().take(lines) {
                    let line = src.offset((16 * g + i) as isize * ls).add(2 * p0);
                    *v = _mm512_maskz_loadu_epi32(load_mask, line as *const i32);
                    // Each step reads one cache line from each of 16 lines
                    // a row apart (1.5-4 KiB in the products measured), 16
                    // interleaved streams that the hardware prefetchers
                    // left waiting on L2/L3 (perf: the loads carried most
                    // of the packing's samples). A prefetch is a hint and
                    // does not fault, so one past the end is harmless.
                    _mm_prefetch::<_MM_HINT_T0>((line as *const i8).wrapping_add(PREFETCH_BYTES));
                }
                if lines > 0 {
                    transpose16(&mut r);
                }
                for (pp, v) in r.iter().enumerate().take(np) {
                    let o = dst.add((p0 + pp) * W + 16 * g) as *mut i32;
                    _mm512_mask_storeu_epi32(o, store_mask, *v);
                }
            }
            p0 += np;
        }
        if kc % 2 == 1 {
            let o = dst.add(full * W);
            for i in 0..W {
                *o.add(i) = if i < n {
                    *src.offset(i as isize * ls).add(kc - 1) as u32
                } else {
                    0
                };
            }
        }
    }

    /// `[t, 32 + t]` for t in `h*16..h*16+16`: interleaves 16 u16 of one
    /// vector with 16 of another into 16 u32 pairs (low half first).
    const fn interleave_index(h: usize) -> [u16; 32] {
        let mut idx = [0u16; 32];
        let mut t = 0;
        while t < 16 {
            idx[2 * t] = (16 * h + t) as u16;
            idx[2 * t + 1] = (32 + 16 * h + t) as u16;
            t += 1;
        }
        idx
    }
    static INTERLEAVE: [[u16; 32]; 2] = [interleave_index(0), interleave_index(1)];

    /// Lines contiguous in memory along the line index (k row `q` at
    /// `src + q * ks`): each pair row of the panel interleaves k rows 2p and
    /// 2p + 1 (one permute per 16 lines). Missing lines and the odd last k
    /// row load as zero.
    ///
    /// # Safety
    /// `src` addresses `kc` k rows of `n` bfloat16; `dst` holds
    /// `kc.div_ceil(2) * W` u32; `n <= W`, `W` is 12 or 32.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn interleaved_rows<const W: usize>(
        src: *const u16,
        ks: isize,
        n: usize,
        kc: usize,
        dst: *mut u32,
    ) {
        let line_mask: __mmask32 = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        let lo = _mm512_loadu_si512(INTERLEAVE[0].as_ptr() as *const _);
        let hi = _mm512_loadu_si512(INTERLEAVE[1].as_ptr() as *const _);
        for p in 0..kc.div_ceil(2) {
            let r0 = src.offset(2 * p as isize * ks);
            let x = _mm512_maskz_loadu_epi16(line_mask, r0 as *const i16);
            let y = if 2 * p + 1 < kc {
                _mm512_maskz_loadu_epi16(line_mask, r0.offset(ks) as *const i16)
            } else {
                _mm512_setzero_si512()
            };
            let o = dst.add(p * W) as *mut i32;
            let a = _mm512_permutex2var_epi16(x, lo, y);
            if W == 32 {
                _mm512_storeu_si512(o as *mut _, a);
                _mm512_storeu_si512(o.add(16) as *mut _, _mm512_permutex2var_epi16(x, hi, y));
            } else {
                let m = first_lanes(W);
                _mm512_mask_storeu_epi32(o, m, a);
            }
        }
    }
}

/// Where a micro-tile's last k block goes when it is rounded in registers
/// rather than through the float32 tile: `nr` columns of `mr` rows of a
/// row-major bfloat16 output (row stride `rs`), `alpha * acc + beta * src`
/// (the latter unless `src` is null; `src` row-major with row stride
/// `src_rs`: the output itself, or a bias row with `src_rs` 0).
#[derive(Clone, Copy)]
struct Out {
    o: *mut u16,
    rs: isize,
    nr: usize,
    src: *const u16,
    src_rs: isize,
    beta: f32,
    alpha: f32,
}

/// The addend of `beta * addend + alpha * a @ b`: bfloat16 at `ptr` with
/// the strides of `m` (rows 0 apart for a bias broadcast over rows); the
/// output itself for `addmm_`/`baddbmm` whose input is their output.
#[derive(Clone, Copy)]
pub(super) struct Addend {
    pub(super) ptr: *const bf16,
    pub(super) m: Mat,
}

/// [`round_bf16`] on 16 lanes: the same bits (round to nearest even, NaN
/// kept quiet), narrowed to 16 u16 in the low half.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn round_bf16_x16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let x = _mm512_castps_si512(v);
    let hi = _mm512_srli_epi32::<16>(x);
    let lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(
        x,
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb),
    ));
    let nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    let abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fff_ffff));
    let is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
    _mm512_mask_blend_epi32(is_nan, rounded, nan)
}

/// `c[MR0 x 16*NV] (row stride NR) = (load ? c : 0) + A @ B panel` over `kp`
/// k pairs, the first `MR0` rows of A and the first `NV` vectors of a B
/// panel; with `out`, the sums are rounded into the output instead of `c`.
/// A is a packed panel (`DIRECT` false: `[kp][MR]` u32) or read in place
/// (`DIRECT`: row-major bfloat16 with even k, row `i`'s pair `p` at byte
/// `i * lda + 4 * p`), its pairs broadcast from memory either way.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/BF16; `a` holds `kp` pairs of `MR0` rows as
/// above, `b` `kp * NR` u32, `c` `MR0` rows of `NR` floats, and `out`'s
/// pointer `MR0` rows of `nr <= 16 * NV` bfloat16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const MR0: usize, const NV: usize, const DIRECT: bool>(
    kp: usize,
    a: *const u8,
    lda: isize,
    b: *const u32,
    c: *mut f32,
    load: bool,
    out: Option<Out>,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NV]; MR0];
    if load {
        for i in 0..MR0 {
            for v in 0..NV {
                acc[i][v] = _mm512_loadu_ps(c.add(i * NR + v * 16));
            }
        }
    }
    let (mut a, mut b) = (a, b);
    for _ in 0..kp {
        let mut bv = [_mm512_setzero_si512(); NV];
        for v in 0..NV {
            bv[v] = _mm512_loadu_si512(b.add(v * 16) as *const _);
        }
        for i in 0..MR0 {
            let pa = if DIRECT {
                a.offset(i as isize * lda)
            } else {
                a.add(4 * i)
            };
            let av: __m512bh =
                std::mem::transmute(_mm512_set1_epi32((pa as *const i32).read_unaligned()));
            for v in 0..NV {
                let bh: __m512bh = std::mem::transmute(bv[v]);
                acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bh);
            }
        }
        a = a.add(if DIRECT { 4 } else { 4 * MR });
        b = b.add(NR);
    }
    match out {
        None => {
            for i in 0..MR0 {
                for v in 0..NV {
                    _mm512_storeu_ps(c.add(i * NR + v * 16), acc[i][v]);
                }
            }
        }
        Some(o) => {
            let (alpha, beta) = (_mm512_set1_ps(o.alpha), _mm512_set1_ps(o.beta));
            for i in 0..MR0 {
                let row = o.o.offset(i as isize * o.rs);
                let src = o.src.wrapping_offset(i as isize * o.src_rs);
                for v in 0..NV {
                    let m = vpack::first_lanes(o.nr.saturating_sub(16 * v));
                    let p = row.add(16 * v) as *mut i16;
                    // alpha * v + beta * src as the scalar store computes
                    // it: two products and a sum, no fused multiply-add
                    let mut x = _mm512_mul_ps(alpha, acc[i][v]);
                    if !o.src.is_null() {
                        let s = src.add(16 * v) as *const i16;
                        let old = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s));
                        x = _mm512_add_ps(
                            x,
                            _mm512_mul_ps(beta, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(old))),
                        );
                    }
                    _mm512_mask_cvtepi32_storeu_epi16(p as *mut _, m, round_bf16_x16(x));
                }
            }
        }
    }
}

/// [`micro`] for `mr` rows (1..=MR) and `nv` vectors (1 or 2).
///
/// # Safety
/// As [`micro`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro_dyn(
    mr: usize,
    nv: usize,
    kp: usize,
    a: *const u8,
    lda: Option<isize>,
    b: *const u32,
    c: *mut f32,
    load: bool,
    out: Option<Out>,
) {
    macro_rules! go {
        ($($m:literal)*) => {
            match (mr, nv, lda) {
                $(($m, 1, None) => micro::<$m, 1, false>(kp, a, 0, b, c, load, out),
                  ($m, _, None) => micro::<$m, 2, false>(kp, a, 0, b, c, load, out),
                  ($m, 1, Some(l)) => micro::<$m, 1, true>(kp, a, l, b, c, load, out),
                  ($m, _, Some(l)) => micro::<$m, 2, true>(kp, a, l, b, c, load, out),)*
                _ => unreachable!(),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn micro_dyn(
    _: usize,
    _: usize,
    _: usize,
    _: *const u8,
    _: Option<isize>,
    _: *const u32,
    _: *mut f32,
    _: bool,
    _: Option<Out>,
) {
    unreachable!("the bfloat16 kernel runs on x86_64 only")
}

thread_local! {
    /// Per-thread packed panels of A and B and the float32 tile buffer.
    static SCRATCH: RefCell<(Vec<u32>, Vec<u32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
    /// What SCRATCH's A and B panels hold: (product, row or column block,
    /// k0). Consecutive tasks of one product share a column block of B
    /// (tasks run row blocks first) or, with one row block, the A block:
    /// those are packed once per thread instead of once per task.
    static PACKED: Cell<[(u64, usize, usize); 2]> = const { Cell::new([(0, 0, 0); 2]) };
}

/// Numbers each product, so that PACKED never matches another product's panels.
static PRODUCTS: AtomicU64 = AtomicU64::new(1);

/// The depth of each k block of a `k`-deep product: at most [`KC`], even,
/// blocks as equal as that allows.
fn k_block(k: usize) -> usize {
    let blocks = k.div_ceil(KC).max(1);
    k.div_ceil(blocks).next_multiple_of(2)
}

/// Output block sizes (rows, columns) for `threads` threads: at most
/// `MC x NC`, a whole number of micro-tiles each, as even as that allows,
/// and, when the product has the micro-tiles for it, a number of blocks
/// that is at least `threads` and a multiple of it where a few more blocks
/// do that. The fixed `MC x NC` grid had left a 1024 x 1024 x 256 product
/// with row blocks 288, 288, 288, 160 (576 rows on one thread, 448 on the
/// other), and a 256 x 256 product as one block on one thread.
fn blocks(m: usize, n: usize, threads: usize) -> (usize, usize) {
    let (mp, np) = (m.div_ceil(MR).max(1), n.div_ceil(NR).max(1));
    let (mut mb, mut nb) = (m.div_ceil(MC).max(1), n.div_ceil(NC).max(1));
    let threads = threads.max(1);
    while mb * nb < threads || (mb * nb % threads != 0 && mb * nb < 8 * threads) {
        // split the dimension whose blocks hold more micro-tiles
        let rows_larger = mp.div_ceil(mb) * MR >= np.div_ceil(nb) * NR;
        if (rows_larger || nb >= np) && mb < mp {
            mb += 1;
        } else if nb < np {
            nb += 1;
        } else {
            break;
        }
    }
    (mp.div_ceil(mb) * MR, np.div_ceil(nb) * NR)
}

/// One product: `dst = beta * addend (if any) + alpha * lhs @ rhs`, bfloat16
/// operands, float32 accumulation, one rounding per output.
///
/// # Safety
/// The pointers address `m x k`, `k x n` and `m x n` bfloat16 matrices with
/// the given strides (in elements), the addend `m x n` (broadcast strides
/// allowed); `dst` overlaps neither operand, and the addend only if it is
/// `dst` itself.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_bf16(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut bf16,
    d: Mat,
    addend: Option<Addend>,
    lhs: *const bf16,
    l: Mat,
    rhs: *const bf16,
    r: Mat,
    beta: f32,
    alpha: f32,
    par: bool,
) {
    let (mc_max, nc_max) = blocks(m, n, if par { parallel::num_threads() } else { 1 });
    let (mb, nb) = (m.div_ceil(mc_max), n.div_ceil(nc_max));
    let (dp, lp, rp) = (
        SendPtr(dst as usize),
        SendPtr(lhs as usize),
        SendPtr(rhs as usize),
    );
    let product = PRODUCTS.fetch_add(1, Ordering::Relaxed);
    let kcb = k_block(k);
    // A read in place, its pairs broadcast from its rows, when it is
    // row-major with an even depth (so no pair reads past a row's end): no
    // packing of A. Against packing it (one thread, medians alternating in
    // one process, with `fuse` below): 256 x 784/1024 -> 1024 forward
    // (x @ W.t()) 2-3% less time, 256 x 1024 -> 10 44%, 1024^3 2%.
    let direct = l.cs == 1 && k.is_multiple_of(2);
    // A row-major output's last k block is rounded in registers (no float32
    // tile written and read back): 256 x 10 @ 10 x 1024 31% less time,
    // 256 x 784 -> 1024 3%, the weight gradient 1024 x 256 @ 256 x 1024 2-6%.
    let fuse = d.cs == 1 && addend.is_none_or(|s| s.m.cs == 1);
    let sp = addend.map(|s| (SendPtr(s.ptr as usize), s.m));
    let task = |t: usize| {
        let (ib, jb) = (t % mb, t / mb);
        let (i0, j0) = (ib * mc_max, jb * nc_max);
        let (mc, nc) = (mc_max.min(m - i0), nc_max.min(n - j0));
        let (mp, np) = (mc.div_ceil(MR), nc.div_ceil(NR));
        SCRATCH.with(|s| {
            let (abuf, bbuf, ws) = &mut *s.borrow_mut();
            let kpmax = kcb.min(k).div_ceil(2);
            // grown only: a reused panel must survive a smaller task's resize
            if abuf.len() < mp * kpmax * MR {
                abuf.resize(mp * kpmax * MR, 0);
            }
            if bbuf.len() < np * kpmax * NR {
                bbuf.resize(np * kpmax * NR, 0);
            }
            ws.resize(mp * np * MR * NR, 0.0);
            let mut k0 = 0;
            while k0 < k {
                let kc = kcb.min(k - k0);
                let kp = kc.div_ceil(2);
                let last = k0 + kc == k;
                let held = PACKED.get();
                let (a_held, b_held) = (held[0] == (product, ib, k0), held[1] == (product, jb, k0));
                PACKED.set([(product, ib, k0), (product, jb, k0)]);
                let a = (lp.0 as *const u16).offset(i0 as isize * l.rs + k0 as isize * l.cs);
                for ip in 0..if a_held || direct { 0 } else { mp } {
                    let mr = MR.min(mc - ip * MR);
                    pack_a(
                        a.offset((ip * MR) as isize * l.rs),
                        l.rs,
                        l.cs,
                        mr,
                        kc,
                        &mut abuf[ip * kp * MR..(ip + 1) * kp * MR],
                    );
                }
                let b = (rp.0 as *const u16).offset(k0 as isize * r.rs + j0 as isize * r.cs);
                for jp in 0..if b_held { 0 } else { np } {
                    let nr = NR.min(nc - jp * NR);
                    pack_b(
                        b.offset((jp * NR) as isize * r.cs),
                        r.rs,
                        r.cs,
                        nr,
                        kc,
                        &mut bbuf[jp * kp * NR..(jp + 1) * kp * NR],
                    );
                }
                for jp in 0..np {
                    let nr = NR.min(nc - jp * NR);
                    for ip in 0..mp {
                        let mr = MR.min(mc - ip * MR);
                        let tile = ws.as_mut_ptr().add((jp * mp + ip) * MR * NR);
                        let o = (dp.0 as *mut bf16).offset(
                            (i0 + ip * MR) as isize * d.rs + (j0 + jp * NR) as isize * d.cs,
                        );
                        let src = sp.map(|(p, m)| {
                            let at =
                                (i0 + ip * MR) as isize * m.rs + (j0 + jp * NR) as isize * m.cs;
                            ((p.0 as *const u16).offset(at), m)
                        });
                        let out = (last && fuse).then_some(Out {
                            o: o as *mut u16,
                            rs: d.rs,
                            nr,
                            src: src.map_or(std::ptr::null(), |s| s.0),
                            src_rs: src.map_or(0, |s| s.1.rs),
                            beta,
                            alpha,
                        });
                        let (ap, lda) = if direct {
                            (
                                a.offset((ip * MR) as isize * l.rs) as *const u8,
                                Some(2 * l.rs),
                            )
                        } else {
                            (abuf.as_ptr().add(ip * kp * MR) as *const u8, None)
                        };
                        micro_dyn(
                            mr,
                            nr.div_ceil(16),
                            kp,
                            ap,
                            lda,
                            bbuf.as_ptr().add(jp * kp * NR),
                            tile,
                            k0 > 0,
                            out,
                        );
                        if last && !fuse {
                            store(tile, o, d, mr, nr, src, beta, alpha);
                        }
                    }
                }
                k0 += kc;
            }
        });
    };
    let tasks = mb * nb;
    if par {
        parallel::parallel_for(tasks, task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// float32 to bfloat16, round to nearest even (NaN stays NaN): the bits of
/// `bf16::from_f32`, branch-free so that a row of them vectorizes.
#[inline(always)]
fn round_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let nan = (x >> 16) | 0x40;
    (if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }) as u16
}

#[inline(always)]
fn widen_bf16(v: u16) -> f32 {
    f32::from_bits((v as u32) << 16)
}

/// Rounds a float32 tile (row stride NR) into `mr x nr` outputs:
/// `alpha * tile + beta * src` (the latter if there is a `src`: its tile's
/// first element and strides), rounded once.
///
/// # Safety
/// `o` addresses `mr x nr` outputs with the strides of `d`, `src` as many
/// addends; AVX-512 CPU.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw"))]
#[allow(clippy::too_many_arguments)]
unsafe fn store(
    tile: *const f32,
    o: *mut bf16,
    d: Mat,
    mr: usize,
    nr: usize,
    src: Option<(*const u16, Mat)>,
    beta: f32,
    alpha: f32,
) {
    for i in 0..mr {
        let t = std::slice::from_raw_parts(tile.add(i * NR), nr);
        let row = o.offset(i as isize * d.rs) as *mut u16;
        match src {
            None if d.cs == 1 => {
                let out = std::slice::from_raw_parts_mut(row, nr);
                for (p, &v) in out.iter_mut().zip(t) {
                    *p = round_bf16(alpha * v);
                }
            }
            _ => {
                for (j, &v) in t.iter().enumerate() {
                    let p = row.offset(j as isize * d.cs);
                    let mut v = alpha * v;
                    if let Some((s, m)) = src {
                        v += beta * widen_bf16(*s.offset(i as isize * m.rs + j as isize * m.cs));
                    }
                    *p = round_bf16(v);
                }
            }
        }
    }
}

/// The batched product of [`super::baddbmm`] for bfloat16 on this kernel:
/// `out = beta * addend + alpha * a @ b`, the addend (if any) with its own
/// strides (batch stride included).
#[allow(clippy::too_many_arguments)]
pub(super) fn bmm(
    out: *mut u8,
    om: Mat,
    a: *mut u8,
    am: Mat,
    b: *mut u8,
    bm: Mat,
    s: Shape,
    addend: Option<(*mut u8, Mat)>,
    beta: f32,
    alpha: f32,
) {
    let (o, a, b) = (
        SendPtr(out as usize),
        SendPtr(a as usize),
        SendPtr(b as usize),
    );
    let addend = addend.map(|(p, m)| (SendPtr(p as usize), m));
    // `for_batches` threads one product from `SPLIT_WORK` multiply-adds
    // (about 10 us of this kernel at one thread), as for float32.
    for_batches(s, |i, par| {
        let i = i as isize;
        // SAFETY: the views were checked against their shapes; each batch's
        // output matrix is written by one call.
        unsafe {
            gemm_bf16(
                s.m,
                s.n,
                s.k,
                (o.0 as *mut bf16).offset(i * om.bs),
                om,
                addend.map(|(p, m)| Addend {
                    ptr: (p.0 as *const bf16).offset(i * m.bs),
                    m,
                }),
                (a.0 as *const bf16).offset(i * am.bs),
                am,
                (b.0 as *const bf16).offset(i * bm.bs),
                bm,
                beta,
                alpha,
                par,
            )
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(n: usize, seed: u64, small_ints: bool) -> Vec<bf16> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                if small_ints {
                    bf16::from_f32((u * 9.0).floor() - 4.0)
                } else {
                    bf16::from_f32(u * 2.0 - 1.0)
                }
            })
            .collect()
    }

    /// Row-major `m x k` times `k x n` in float32 (f64 for `exact`).
    fn naive(a: &[bf16], b: &[bf16], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| a[i * k + p].to_f64() * b[p * n + j].to_f64())
                    .sum();
            }
        }
        c
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        a: &[bf16],
        am: Mat,
        b: &[bf16],
        bm: Mat,
        m: usize,
        k: usize,
        n: usize,
        par: bool,
    ) -> Vec<bf16> {
        let mut c = vec![bf16::ZERO; m * n];
        // SAFETY: the buffers match the shapes and strides.
        unsafe { run_into(&mut c, rm(n), None, 0.0, 1.0, a, am, b, bm, m, k, n, par) };
        c
    }

    /// An addend for [`run_into`]: none, `c` itself (`Some(None)`), or a
    /// matrix with its strides.
    type Src<'a> = Option<Option<(&'a [bf16], Mat)>>;

    /// `c = beta * addend (if any) + alpha * a @ b` with `c` laid out as
    /// `cm`.
    ///
    /// # Safety
    /// The buffers match the shapes and strides.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_into(
        c: &mut [bf16],
        cm: Mat,
        addend: Src,
        beta: f32,
        alpha: f32,
        a: &[bf16],
        am: Mat,
        b: &[bf16],
        bm: Mat,
        m: usize,
        k: usize,
        n: usize,
        par: bool,
    ) {
        let addend = addend.map(|s| match s {
            None => Addend {
                ptr: c.as_ptr(),
                m: cm,
            },
            Some((v, m)) => Addend { ptr: v.as_ptr(), m },
        });
        gemm_bf16(
            m,
            n,
            k,
            c.as_mut_ptr(),
            cm,
            addend,
            a.as_ptr(),
            am,
            b.as_ptr(),
            bm,
            beta,
            alpha,
            par,
        )
    }

    fn rm(cols: usize) -> Mat {
        Mat {
            rs: cols as isize,
            cs: 1,
            bs: 0,
        }
    }

    /// The strides of a column-major matrix of `rows` rows.
    fn cm(rows: usize) -> Mat {
        Mat {
            rs: 1,
            cs: rows as isize,
            bs: 0,
        }
    }

    /// A row-major `rows x cols` matrix stored column-major (as `cols x
    /// rows` row-major), for the strides of [`cm`].
    fn transposed(v: &[bf16], rows: usize, cols: usize) -> Vec<bf16> {
        let mut t = vec![bf16::ZERO; rows * cols];
        for i in 0..rows {
            for j in 0..cols {
                t[j * rows + i] = v[i * cols + j];
            }
        }
        t
    }

    /// Rounding values of every class: the scalar rule against `half`, and
    /// the micro-kernel's vector rounding against the scalar rule.
    #[test]
    fn rounding_matches_half() {
        let mut vals = vec![
            0.0f32,
            -0.0,
            1.0,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffff_ffff),
            f32::MIN_POSITIVE / 3.0,
        ];
        let mut s = 1u32;
        for _ in 0..100_000 {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            vals.push(f32::from_bits(s));
            // Ties: the low 16 bits exactly half-way.
            vals.push(f32::from_bits((s & 0xffff_0000) | 0x8000));
        }
        for &v in &vals {
            assert_eq!(
                round_bf16(v),
                bf16::from_f32(v).to_bits(),
                "{v:e} {:#x}",
                v.to_bits()
            );
        }
        #[cfg(target_arch = "x86_64")]
        if available() {
            #[target_feature(enable = "avx512f")]
            unsafe fn round16(v: &[f32]) -> [u16; 16] {
                use std::arch::x86_64::*;
                let r = round_bf16_x16(_mm512_loadu_ps(v.as_ptr()));
                let mut out = [0u16; 16];
                _mm256_storeu_si256(out.as_mut_ptr() as *mut _, _mm512_cvtepi32_epi16(r));
                out
            }
            for chunk in vals.chunks_exact(16) {
                // SAFETY: `available` checked AVX-512.
                let got = unsafe { round16(chunk) };
                for (g, &v) in got.iter().zip(chunk) {
                    assert_eq!(*g, round_bf16(v), "{v:e} {:#x}", v.to_bits());
                }
            }
        }
    }

    /// The vector packers against the scalar ones: every line count, pair
    /// counts around the 16-pair blocks, odd depths, row- and column-major
    /// sources with padded strides; the panels must be equal word for word
    /// (padding included: the kernel multiplies it).
    #[test]
    fn vector_packing_matches_scalar() {
        if !available() {
            return;
        }
        let src: Vec<u16> = lcg(40_000, 5, false).iter().map(|v| v.to_bits()).collect();
        for kc in [1usize, 2, 3, 30, 31, 32, 33, 34, 63, 65, 256] {
            let kp = kc.div_ceil(2);
            for n in 1..=NR {
                // (line stride, k stride): lines of adjacent pairs, lines
                // adjacent along the line index, with padding
                for (ls, ks) in [
                    (kc as isize, 1isize),
                    (kc as isize + 3, 1),
                    (1, n as isize),
                    (1, 37),
                ] {
                    let (rs_a, cs_a) = (ls, ks);
                    let last = (n as isize - 1) * ls + (kc as isize - 1) * ks;
                    assert!((last as usize) < src.len());
                    if n <= MR {
                        let mut want = vec![u32::MAX; kp * MR];
                        let mut got = vec![u32::MAX; kp * MR];
                        unsafe {
                            pack_a_scalar(src.as_ptr(), rs_a, cs_a, n, kc, &mut want);
                            pack_a(src.as_ptr(), rs_a, cs_a, n, kc, &mut got);
                        }
                        assert_eq!(got, want, "A: {n} rows, kc {kc}, strides {rs_a} {cs_a}");
                    }
                    // B's lines are columns: column j at j * ls, k row q at q * ks
                    let mut want = vec![u32::MAX; kp * NR];
                    let mut got = vec![u32::MAX; kp * NR];
                    unsafe {
                        pack_b_scalar(src.as_ptr(), ks, ls, n, kc, &mut want);
                        pack_b(src.as_ptr(), ks, ls, n, kc, &mut got);
                    }
                    assert_eq!(got, want, "B: {n} cols, kc {kc}, strides {ks} {ls}");
                }
            }
        }
    }

    /// Blocks cover the product in whole micro-tiles, never exceed the
    /// cache blocking, and give every thread work when there is enough.
    #[test]
    fn blocks_are_even_and_feed_every_thread() {
        assert_eq!(blocks(1024, 256, 2), (264, 256)); // 4 blocks: 528 / 496 rows per thread
        assert_eq!(blocks(256, 256, 2).0 * 2, 264); // split, not one block
        assert_eq!(blocks(1, 1, 8), (MR, NR));
        for &(m, n) in &[
            (1usize, 1usize),
            (7, 1000),
            (1000, 7),
            (256, 1024),
            (1024, 1024),
            (4096, 300),
            (13, 33),
        ] {
            for threads in 1..=8 {
                let (mc, nc) = blocks(m, n, threads);
                assert!(
                    mc % MR == 0 && nc % NR == 0 && mc <= MC && nc <= NC,
                    "{m}x{n}/{threads}"
                );
                let tasks = m.div_ceil(mc) * n.div_ceil(nc);
                if m.div_ceil(MR) * n.div_ceil(NR) >= threads {
                    assert!(tasks >= threads, "{m}x{n}/{threads}: {tasks} blocks");
                }
            }
        }
    }

    /// The micro-kernel on every row count and both widths, small integers
    /// (every sum exact in float32): bit-equal to the naive loop.
    #[test]
    fn micro_kernel_matches_naive_exactly() {
        if !available() {
            return;
        }
        for &(m, k, n) in &[
            (12, 256, 32),
            (1, 1, 1),
            (7, 3, 17),
            (13, 255, 33),
            (5, 600, 16),
            (25, 513, 70),
            // several row and column blocks on one thread: B's column block
            // packed once for consecutive row blocks, A's once for one row block
            (300, 40, 600),
            (20, 2050, 1100),
        ] {
            let a = lcg(m * k, 1, true);
            let b = lcg(k * n, 2, true);
            let want = naive(&a, &b, m, k, n);
            let got = run(&a, rm(k), &b, rm(n), m, k, n, false);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.to_f64(), bf16::from_f64(*w).to_f64(), "{m}x{k}x{n}");
            }
        }
    }

    /// The output rounded in the micro-kernel's registers (a row-major
    /// output) against the float32 tile and the scalar store (the same
    /// output transposed): the same bits for `beta * c + alpha * a @ b`,
    /// with and without reading `c`, at edge tiles, several k blocks, A read
    /// in place (even k) and packed (odd k), and `c` holding NaN, infinities
    /// and values whose sum lands on rounding ties. A bias row read in place
    /// (row stride 0) gives the bits of the same row copied into every row
    /// of `c` first, on both paths.
    #[test]
    fn rounding_in_registers_matches_tile_store() {
        if !available() {
            return;
        }
        for &(m, k, n) in &[
            (1, 2, 1),
            (13, 64, 33),
            (30, 7, 50),
            (25, 2050, 40),
            (300, 40, 600),
        ] {
            let a = lcg(m * k, 7, false);
            let b = lcg(k * n, 8, false);
            let special = [
                bf16::NAN,
                bf16::INFINITY,
                bf16::NEG_INFINITY,
                bf16::from_f32(1.0 + 1.0 / 256.0),
            ];
            let mut c0 = lcg(m * n, 9, false);
            for (i, v) in c0.iter_mut().enumerate().step_by(7) {
                *v = special[i % 4];
            }
            let mut bias = lcg(n, 10, false);
            for (i, v) in bias.iter_mut().enumerate().step_by(5) {
                *v = special[i % 4];
            }
            let bias_m = Mat {
                rs: 0,
                cs: 1,
                bs: 0,
            };
            let bias_rows: Vec<bf16> = (0..m).flat_map(|_| bias.iter().copied()).collect();
            // no addend, c itself, the bias row
            let addends: [Src; 3] = [None, Some(None), Some(Some((&bias, bias_m)))];
            for (beta, alpha) in [(1.0, 1.0), (0.5, -3.0)] {
                for addend in addends {
                    let mut row = c0.clone();
                    let mut col = transposed(&c0, m, n);
                    // SAFETY: the buffers match the shapes and strides.
                    unsafe {
                        run_into(
                            &mut row,
                            rm(n),
                            addend,
                            beta,
                            alpha,
                            &a,
                            rm(k),
                            &b,
                            rm(n),
                            m,
                            k,
                            n,
                            false,
                        );
                        run_into(
                            &mut col,
                            cm(m),
                            addend,
                            beta,
                            alpha,
                            &a,
                            rm(k),
                            &b,
                            rm(n),
                            m,
                            k,
                            n,
                            true,
                        );
                    }
                    let what = format!(
                        "{m}x{k}x{n} beta {beta} alpha {alpha} addend {:?}",
                        addend.map(|s| s.is_some())
                    );
                    let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&transposed(&row, m, n)),
                        bits(&col),
                        "{what}: registers vs tile"
                    );
                    if matches!(addend, Some(Some(_))) {
                        // the old route: bias rows copied into c, c read
                        let mut copied = bias_rows.clone();
                        unsafe {
                            run_into(
                                &mut copied,
                                rm(n),
                                Some(None),
                                beta,
                                alpha,
                                &a,
                                rm(k),
                                &b,
                                rm(n),
                                m,
                                k,
                                n,
                                false,
                            );
                        }
                        assert_eq!(bits(&row), bits(&copied), "{what}: in place vs copied");
                    }
                }
            }
        }
    }

    /// Random values, transposed operands, blocks and edges in every
    /// direction: within one bfloat16 rounding of the exact product, and the
    /// same bits with and without threads.
    #[test]
    fn random_values_round_once() {
        if !available() {
            return;
        }
        for &(m, k, n) in &[
            (1, 7, 1),
            (17, 63, 129),
            (150, 1100, 290),
            (63, 4096, 7),
            (600, 70, 1100),
        ] {
            let a = lcg(m * k, 3, false);
            let b = lcg(k * n, 4, false);
            let want = naive(&a, &b, m, k, n);
            // A transposed in place: stored as k x m.
            let (at, atm) = (transposed(&a, m, k), cm(m));
            // B column-major (a Linear weight): stored as n x k.
            let (bt, btm) = (transposed(&b, k, n), cm(k));
            let base = run(&a, rm(k), &b, rm(n), m, k, n, false);
            for (x, y) in base.iter().zip(&want) {
                let tol = y.abs() * 2f64.powi(-8) + 1e-5 * (k as f64).sqrt();
                assert!((x.to_f64() - y).abs() <= tol, "{m}x{k}x{n}: {x} vs {y}");
            }
            for (am, av, bm, bv, par) in [
                (atm, &at, rm(n), &b, false),
                (rm(k), &a, btm, &bt, false),
                (atm, &at, btm, &bt, true),
            ] {
                let got = run(av, am, bv, bm, m, k, n, par);
                assert_eq!(got, base, "{m}x{k}x{n} strides/threads");
            }
        }
    }
}
