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
//! bfloat16, the layout `vdpbf16ps` multiplies) and its `MC x KC` slice of A
//! into panels of `MR` rows (`[k/2][MR]` u32), and runs an `MR x NR`
//! micro-kernel (24 zmm accumulators) that broadcasts one pair of A and
//! multiplies it with two 16-lane vectors of B. Accumulators live in float32
//! across k blocks (a per-task tile buffer); each output is rounded once, as
//! CPU's oneDNN does. Edge tiles run the same kernel with fewer rows or one
//! vector (zero-padded panels), so no output is computed twice.
//!
//! `vdpbf16ps` treats bfloat16 subnormal inputs and float32 subnormal
//! results as zero (DAZ/FTZ), as oneDNN's bfloat16 kernels on CPU do.
//!
//! Determinism: each output sums `k` in an order fixed by the shapes
//! (pairs, then `KC` blocks in order); tasks split only `m` and `n`.

use super::{for_batches, Mat, SendPtr, Shape};
use crate::kernels::parallel;
use half::bf16;
use std::cell::RefCell;

/// Rows of the micro-kernel.
const MR: usize = 12;
/// Columns of the micro-kernel (two 16-lane vectors).
const NR: usize = 32;
/// Depth of a k block (even: packed in pairs).
const KC: usize = 256;
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

/// Packs rows `0..mr` (mr <= MR) of A's `kc` columns (A at `a`, strides in
/// elements) into one panel `[kc/2][MR]` u32; missing rows and the odd last
/// column are zero.
///
/// # Safety
/// `a` must address an `mr x kc` matrix with the given strides; `dst` holds
/// `kc.div_ceil(2) * MR`.
unsafe fn pack_a(a: *const u16, rs: isize, cs: isize, mr: usize, kc: usize, dst: &mut [u32]) {
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

/// Packs columns `0..nr` (nr <= NR) of B's `kc` rows into one panel
/// `[kc/2][NR]` u32; missing columns and the odd last row are zero.
///
/// # Safety
/// As [`pack_a`], for a `kc x nr` matrix and `kc.div_ceil(2) * NR` u32.
unsafe fn pack_b(b: *const u16, rs: isize, cs: isize, nr: usize, kc: usize, dst: &mut [u32]) {
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

/// `c[MR0 x 16*NV] (row stride NR) = (load ? c : 0) + A panel @ B panel`
/// over `kp` k pairs, the first `MR0` rows of an A panel and the first `NV`
/// vectors of a B panel.
///
/// # Safety
/// The CPU has AVX512F/BW/BF16; `a` holds `kp * MR`, `b` `kp * NR` u32 and
/// `c` `MR0` rows of `NR` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn micro<const MR0: usize, const NV: usize>(
    kp: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    load: bool,
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
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(i) as i32));
            for v in 0..NV {
                let bh: __m512bh = std::mem::transmute(bv[v]);
                acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bh);
            }
        }
        a = a.add(MR);
        b = b.add(NR);
    }
    for i in 0..MR0 {
        for v in 0..NV {
            _mm512_storeu_ps(c.add(i * NR + v * 16), acc[i][v]);
        }
    }
}

/// [`micro`] for `mr` rows (1..=MR) and `nv` vectors (1 or 2).
///
/// # Safety
/// As [`micro`].
#[cfg(target_arch = "x86_64")]
unsafe fn micro_dyn(
    mr: usize,
    nv: usize,
    kp: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    load: bool,
) {
    macro_rules! go {
        ($($m:literal)*) => {
            match (mr, nv) {
                $(($m, 1) => micro::<$m, 1>(kp, a, b, c, load),
                  ($m, _) => micro::<$m, 2>(kp, a, b, c, load),)*
                _ => unreachable!(),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn micro_dyn(
    _: usize,
    _: usize,
    _: usize,
    _: *const u32,
    _: *const u32,
    _: *mut f32,
    _: bool,
) {
    unreachable!("the bfloat16 kernel runs on x86_64 only")
}

thread_local! {
    /// Per-thread packed panels of A and B and the float32 tile buffer.
    static SCRATCH: RefCell<(Vec<u32>, Vec<u32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// One product: `dst = beta * dst (if read) + alpha * lhs @ rhs`, bfloat16
/// operands, float32 accumulation, one rounding per output.
///
/// # Safety
/// The pointers address `m x k`, `k x n` and `m x n` bfloat16 matrices with
/// the given strides (in elements); `dst` overlaps neither operand.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_bf16(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut bf16,
    d: Mat,
    read: bool,
    lhs: *const bf16,
    l: Mat,
    rhs: *const bf16,
    r: Mat,
    beta: f32,
    alpha: f32,
    par: bool,
) {
    let (mb, nb) = (m.div_ceil(MC), n.div_ceil(NC));
    let (dp, lp, rp) = (
        SendPtr(dst as usize),
        SendPtr(lhs as usize),
        SendPtr(rhs as usize),
    );
    let task = |t: usize| {
        let (ib, jb) = (t % mb, t / mb);
        let (i0, j0) = (ib * MC, jb * NC);
        let (mc, nc) = (MC.min(m - i0), NC.min(n - j0));
        let (mp, np) = (mc.div_ceil(MR), nc.div_ceil(NR));
        SCRATCH.with(|s| {
            let (abuf, bbuf, ws) = &mut *s.borrow_mut();
            let kpmax = KC.min(k).div_ceil(2);
            abuf.resize(mp * kpmax * MR, 0);
            bbuf.resize(np * kpmax * NR, 0);
            ws.resize(mp * np * MR * NR, 0.0);
            let mut k0 = 0;
            while k0 < k {
                let kc = KC.min(k - k0);
                let kp = kc.div_ceil(2);
                let last = k0 + kc == k;
                let a = (lp.0 as *const u16).offset(i0 as isize * l.rs + k0 as isize * l.cs);
                for ip in 0..mp {
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
                for jp in 0..np {
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
                        micro_dyn(
                            mr,
                            nr.div_ceil(16),
                            kp,
                            abuf.as_ptr().add(ip * kp * MR),
                            bbuf.as_ptr().add(jp * kp * NR),
                            tile,
                            k0 > 0,
                        );
                        if last {
                            let o = (dp.0 as *mut bf16).offset(
                                (i0 + ip * MR) as isize * d.rs + (j0 + jp * NR) as isize * d.cs,
                            );
                            store(tile, o, d, mr, nr, read, beta, alpha);
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
/// `alpha * tile + beta * out` (the latter if `read`), rounded once.
///
/// # Safety
/// `o` addresses `mr x nr` outputs with the strides of `d`; AVX-512 CPU.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw"))]
#[allow(clippy::too_many_arguments)]
unsafe fn store(
    tile: *const f32,
    o: *mut bf16,
    d: Mat,
    mr: usize,
    nr: usize,
    read: bool,
    beta: f32,
    alpha: f32,
) {
    for i in 0..mr {
        let t = std::slice::from_raw_parts(tile.add(i * NR), nr);
        let row = o.offset(i as isize * d.rs) as *mut u16;
        if d.cs == 1 {
            let out = std::slice::from_raw_parts_mut(row, nr);
            if read {
                for (p, &v) in out.iter_mut().zip(t) {
                    *p = round_bf16(alpha * v + beta * widen_bf16(*p));
                }
            } else {
                for (p, &v) in out.iter_mut().zip(t) {
                    *p = round_bf16(alpha * v);
                }
            }
        } else {
            for (j, &v) in t.iter().enumerate() {
                let p = row.offset(j as isize * d.cs);
                let mut v = alpha * v;
                if read {
                    v += beta * widen_bf16(*p);
                }
                *p = round_bf16(v);
            }
        }
    }
}

/// The batched product of [`super::baddbmm`] for bfloat16 on this kernel.
#[allow(clippy::too_many_arguments)]
pub(super) fn bmm(
    out: *mut u8,
    om: Mat,
    a: *mut u8,
    am: Mat,
    b: *mut u8,
    bm: Mat,
    s: Shape,
    read: bool,
    beta: f32,
    alpha: f32,
) {
    let (o, a, b) = (
        SendPtr(out as usize),
        SendPtr(a as usize),
        SendPtr(b as usize),
    );
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
                read,
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
        let cm = Mat {
            rs: n as isize,
            cs: 1,
            bs: 0,
        };
        // SAFETY: the buffers match the shapes and strides.
        unsafe {
            gemm_bf16(
                m,
                n,
                k,
                c.as_mut_ptr(),
                cm,
                false,
                a.as_ptr(),
                am,
                b.as_ptr(),
                bm,
                0.0,
                1.0,
                par,
            )
        };
        c
    }

    fn rm(cols: usize) -> Mat {
        Mat {
            rs: cols as isize,
            cs: 1,
            bs: 0,
        }
    }

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
        for v in vals {
            assert_eq!(
                round_bf16(v),
                bf16::from_f32(v).to_bits(),
                "{v:e} {:#x}",
                v.to_bits()
            );
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

    /// Random values, transposed operands, blocks and edges in every
    /// direction: within one bfloat16 rounding of the exact product, and the
    /// same bits with and without threads.
    #[test]
    fn random_values_round_once() {
        if !available() {
            return;
        }
        for &(m, k, n) in &[(1, 7, 1), (17, 63, 129), (150, 1100, 290), (63, 4096, 7)] {
            let a = lcg(m * k, 3, false);
            let b = lcg(k * n, 4, false);
            let want = naive(&a, &b, m, k, n);
            // A transposed in place: stored as k x m.
            let mut at = vec![bf16::ZERO; m * k];
            for i in 0..m {
                for p in 0..k {
                    at[p * m + i] = a[i * k + p];
                }
            }
            let atm = Mat {
                rs: 1,
                cs: m as isize,
                bs: 0,
            };
            // B column-major (a Linear weight): stored as n x k.
            let mut bt = vec![bf16::ZERO; k * n];
            for p in 0..k {
                for j in 0..n {
                    bt[j * k + p] = b[p * n + j];
                }
            }
            let btm = Mat {
                rs: 1,
                cs: k as isize,
                bs: 0,
            };
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
