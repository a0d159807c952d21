//! float32 products for convolution on AVX-512, and on AVX2 + FMA: `C
//! (+)= A @ B` with an `MR x NR` register tile, A and B packed per block.
//! Without AVX-512 the tile runs as 6 x 16 sub-tiles ([`micro_avx2`]) on
//! the same packed layouts, so every caller (the implicit-GEMM convolution
//! passes, the recurrent layers' products) runs on AVX2-only CPUs too,
//! with the same bits.
//!
//! Hand-written because the gemm crate's per-call set-up is a large part of
//! a convolution tile's product: it packs both operands on every call (the
//! weights again for every tile of positions), and summing `k` in blocks of
//! [`KC`] (see [`super::gemm`]) multiplies the calls. On resnet18's 3x3
//! layers its kernel ran at 146-164 GFLOP/s against oneDNN's 174-250.
//!
//! Here A (a weight) is packed once per call for every task ([`pack_a_all`],
//! 16 x 16 transposes), and each task packs its B block (im2col columns, by
//! the caller's packer straight from the input) `KC` rows at a time into
//! `NR`-wide micro-panels, or the micro-kernel reads B's rows in place
//! through a table of row offsets ([`Rows`]: contiguous runs of a padded
//! input plane need no packing); BLIS's loop order keeps one B micro-panel in L1
//! while A's panels stream past it from L2. Products with only one or two
//! micro-panels of columns read A in place instead ([`InPlace`]: packing
//! would cost as much as the product) and share one B packed beforehand
//! ([`PrePacked`]). In isolation the `12 x 32`
//! micro-kernel ran at the FMA rate of the machine it was written on (116
//! GFLOP/s on one core, the same as 24 register-only FMA chains); on the
//! Zen 5 core of a later one (full-width AVX-512) resnet18's 64-channel
//! 3 x 3 layer at 56 x 56 ran at 166 GFLOP/s forward and 197 for the input
//! gradient (`cargo bench --bench kernels -- conv`, one thread), where
//! oneDNN reaches about 235; that layer now takes [`super::winograd`],
//! which runs 16 of these products on this micro-kernel. Each output sums
//! `k` in blocks of `KC` in order, each block summed in registers and then
//! added to `C`: the order depends on the shapes only, so results do not
//! depend on the thread count or the task grid.

#![allow(clippy::too_many_arguments)]

use std::cell::RefCell;

/// Rows of the micro-kernel (broadcast from A).
pub const MR: usize = 12;
/// Columns of the micro-kernel (two 16-lane vectors of B).
pub const NR: usize = 32;
/// Depth of a k block (the accuracy block of [`super::gemm`]).
pub const KC: usize = 128;

/// Whether [`gemm`] runs here: the SIMD level in use (`FOO_RS_SIMD`) is
/// AVX-512, or AVX2 + FMA, whose micro-kernel ([`micro_avx2`]) computes
/// the same register tile in sub-tiles, on the same packed layouts.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::elementwise::simd::{level, SimdLevel};
        level() >= SimdLevel::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX-512 kernels run here (the CPU has AVX-512F and the SIMD
/// level in use allows it): the micro-kernel's full-width form, the
/// vector packers, and the kernels written for AVX-512 only
/// ([`super::winograd`], [`super::direct`], [`super::dots`], the blocked
/// depthwise kernels).
pub fn wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::elementwise::simd::{level, SimdLevel};
        level() == SimdLevel::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The A operand of [`gemm`]: rows `first..` (`first` a multiple of
/// [`MR`]) of an A of `rows` rows packed by [`pack_a_all`] at `ptr` (an
/// operand that many tasks share, such as a convolution's weight).
#[derive(Clone, Copy)]
pub struct A {
    pub ptr: *const f32,
    pub rows: usize,
    pub first: usize,
}

/// The A operand of [`gemm`] read in place, not packed: element `(i, k)`
/// at `ptr + i * rs + cols[k]`. For products with few columns (a
/// convolution's weight against the few output positions of a small map),
/// where each element of A meets one or two vectors of B: packing A would
/// read and write it once more than the product reads it (half the time of
/// a 512-channel 3 x 3 layer at 2 x 2, batch 4). The micro-kernel
/// broadcasts from `MR` rows `rs` apart instead of one packed line.
#[derive(Clone, Copy)]
pub struct InPlace<'a> {
    pub ptr: *const f32,
    pub rs: usize,
    pub cols: &'a [isize],
}

/// What [`gemm`] multiplies B by: [`A`] (packed) or [`InPlace`].
pub trait Lhs: Copy {
    /// `C[0..mr][0..nr] = (load ? C : 0) + A[i0..i0+mr][k0..k0+kc] @ B
    /// panel`, B's row `kk` at `b + boff[kk]`; `pf`: prefetch the next
    /// panel's rows ([`B::PREFETCH_NEXT`]).
    ///
    /// # Safety
    /// As [`micro`]'s, for this A's rows and k block.
    unsafe fn product(
        &self,
        i0: usize,
        mr: usize,
        k0: usize,
        kc: usize,
        nr: usize,
        b: *const f32,
        boff: *const isize,
        pf: bool,
        c: *mut f32,
        ldc: usize,
        load: bool,
    );
}

impl Lhs for A {
    unsafe fn product(
        &self,
        i0: usize,
        mr: usize,
        k0: usize,
        kc: usize,
        nr: usize,
        b: *const f32,
        boff: *const isize,
        pf: bool,
        c: *mut f32,
        ldc: usize,
        load: bool,
    ) {
        let panel = self
            .ptr
            .add(packed_offset(self.rows, k0, kc, self.first + i0));
        micro_dyn(wide(), mr, nr, kc, panel, b, boff, pf, c, ldc, load)
    }
}

impl Lhs for InPlace<'_> {
    unsafe fn product(
        &self,
        i0: usize,
        mr: usize,
        k0: usize,
        kc: usize,
        nr: usize,
        b: *const f32,
        boff: *const isize,
        pf: bool,
        c: *mut f32,
        ldc: usize,
        load: bool,
    ) {
        // Two vectors of columns in rows of half a tile: at 12 x 2 the
        // compiler spilled accumulators (24 of them, plus the row
        // addresses), and ran 1.5x slower per FMA than the packed kernel.
        let step = if nr > 16 { MR / 2 } else { MR };
        let mut i = 0;
        while i < mr {
            let a = Unpacked {
                ptr: self.ptr.add((i0 + i) * self.rs),
                rs: self.rs,
                cols: self.cols[k0..k0 + kc].as_ptr(),
            };
            micro_dyn(
                wide(),
                step.min(mr - i),
                nr,
                kc,
                a,
                b,
                boff,
                pf,
                c.add(i * ldc),
                ldc,
                load,
            );
            i += step;
        }
    }
}

/// Floats [`pack_a_all`] writes for an `m x k` A.
pub fn packed_len(m: usize, k: usize) -> usize {
    m.div_ceil(MR) * MR * k
}

/// Where the panel of rows `i0..` in the k block starting at `k0` (of
/// depth `kc`) starts in [`pack_a_all`]'s layout: k blocks in order, each
/// its row panels in order, each `kc` rows of `MR` floats.
fn packed_offset(m: usize, k0: usize, kc: usize, i0: usize) -> usize {
    k0 * m.div_ceil(MR) * MR + i0 * kc
}

/// Packs all of A (`m x k`, element `(i, k)` at `a[i * rs + k * cs]`) for
/// [`A`] over foo's pool, walking A along its contiguous direction (see
/// [`Walk`]).
///
/// # Safety
/// `a` addresses such a matrix; `dst` holds [`packed_len`] floats.
pub unsafe fn pack_a_all(a: *const f32, rs: isize, cs: isize, m: usize, k: usize, dst: &mut [f32]) {
    let a = a as usize;
    let walk = if cs.abs() <= rs.abs() {
        Walk::AlongK
    } else {
        Walk::AlongRows
    };
    pack_blocks(m, k, dst, walk, |i0, mr, k0, kc, panel| {
        pack_a(
            (a as *const f32).offset(i0 as isize * rs + k0 as isize * cs),
            rs,
            cs,
            mr,
            kc,
            panel,
        )
    });
}

/// [`pack_a_all`] for an A whose rows and columns are not evenly spaced:
/// element `(i, k)` at `a[row(i) + col(k)]`. For a convolution's weight
/// read transposed and flipped (the input gradient as a convolution),
/// column `k` is an (output channel, tap) pair whose taps run backwards;
/// for im2col read from a padded input (the weight gradient of a layer with
/// few input channels), row `i` is a (channel, tap) pair and column `k` an
/// output position. Scalar: the reads of a panel's row stay in a few cache
/// lines for the weight; for im2col, consecutive columns read consecutive
/// (or every other) elements of an input row. `walk`: the direction in
/// which A's elements lie closer together in memory.
///
/// # Safety
/// `a` addresses such a matrix; `dst` holds [`packed_len`] floats.
pub unsafe fn pack_a_all_with(
    a: *const f32,
    row: impl Fn(usize) -> isize + Sync,
    col: impl Fn(usize) -> isize + Sync,
    m: usize,
    k: usize,
    walk: Walk,
    dst: &mut [f32],
) {
    let a = a as usize;
    pack_blocks(m, k, dst, walk, |i0, mr, k0, kc, panel| {
        let rows: [isize; MR] = std::array::from_fn(|i| if i < mr { row(i0 + i) } else { 0 });
        for kk in 0..kc {
            let c = (a as *const f32).offset(col(k0 + kk));
            let dst = &mut panel[kk * MR..(kk + 1) * MR];
            for (i, v) in dst[..mr].iter_mut().enumerate() {
                *v = *c.offset(rows[i]);
            }
            dst[mr..].fill(0.0);
        }
    });
}

/// How the packers' tasks walk A: the direction along which its elements
/// are read front to back, streams the hardware prefetcher follows. Packing
/// a 512-channel 3 x 3 weight (9.4 MB, rows along k) one k block per task,
/// each task reading 512 bytes of every row in turn, ran at about 3 GB/s:
/// a third of the time of that layer's forward at 7 x 7; a row panel per
/// task halved it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// A task per row panel, its k blocks in order (A's rows contiguous in
    /// k: a weight as given, an im2col row).
    AlongK,
    /// A task per k block, its row panels in order (A's columns contiguous
    /// down the rows: a weight read transposed).
    AlongRows,
}

/// The layout both packers write: k blocks one after another, each its row
/// panels in order; `panel(i0, mr, k0, kc, dst)` packs rows `i0..i0+mr`
/// (`mr <= MR`) and columns `k0..k0+kc` as `kc` rows of `MR` floats into
/// `dst`, rows past `mr` zero. Tasks over foo's pool as `walk` says.
unsafe fn pack_blocks(
    m: usize,
    k: usize,
    dst: &mut [f32],
    walk: Walk,
    panel: impl Fn(usize, usize, usize, usize, &mut [f32]) + Sync,
) {
    assert!(dst.len() >= packed_len(m, k));
    let d = dst.as_mut_ptr() as usize;
    let (panels, kblocks) = (m.div_ceil(MR), k.div_ceil(KC));
    let one = |ip: usize, kb: usize| {
        let (i0, k0) = (ip * MR, kb * KC);
        let (mr, kc) = (MR.min(m - i0), KC.min(k - k0));
        let off = packed_offset(m, k0, kc, i0);
        // SAFETY: each (panel, block) is written by one task, disjoint
        // from every other's.
        panel(i0, mr, k0, kc, unsafe {
            std::slice::from_raw_parts_mut((d as *mut f32).add(off), kc * MR)
        });
    };
    match walk {
        Walk::AlongK => crate::kernels::parallel::parallel_for(panels, |ip| {
            (0..kblocks).for_each(|kb| one(ip, kb))
        }),
        Walk::AlongRows => crate::kernels::parallel::parallel_for(kblocks, |kb| {
            // In slices of SLICE columns across every row panel: a slice's
            // columns are a few streams down A (a transposed 3 x 3 weight:
            // two output channels' rows); a whole block's 128 columns at
            // once were 15 streams, which ran at memory latency.
            let (k0, kc) = (kb * KC, KC.min(k - kb * KC));
            for s0 in (0..kc).step_by(SLICE) {
                let sc = SLICE.min(kc - s0);
                for ip in 0..panels {
                    let (i0, mr) = (ip * MR, MR.min(m - ip * MR));
                    let off = packed_offset(m, k0, kc, i0) + s0 * MR;
                    // SAFETY: as above, rows s0..s0+sc of the panel's block.
                    panel(i0, mr, k0 + s0, sc, unsafe {
                        std::slice::from_raw_parts_mut((d as *mut f32).add(off), sc * MR)
                    });
                }
            }
        }),
    }
}

/// Columns per pass of [`Walk::AlongRows`] over a k block's row panels.
const SLICE: usize = 16;

thread_local! {
    /// Per-thread packed B micro-panel ([`Packed`]).
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where [`gemm`] reads B from, one micro-panel (`kc` rows, `NR` columns)
/// at a time: row `kk` of the panel starts at `base + offs[kk]`, and
/// `NR` floats are readable there (columns past the panel's `nr` may hold
/// anything: they never reach C).
pub trait B {
    /// Whether the micro-kernel prefetches, while it multiplies a panel,
    /// the same rows of the next panel (`NR` floats on): for rows read in
    /// place ([`Rows`]), scattered over the channels' planes where the
    /// hardware prefetcher does not follow, so that the first A panel
    /// against each new B panel waited on its rows (perf: the broadcast
    /// after B's loads held 9% of the kernel's samples). Measured on
    /// resnet18's 64 -> 128 3 x 3 stride-2 layer, forward, batch 8, one
    /// thread: 0.87-0.91x the time without (three runs, alternating in one
    /// process); the other layers on this path within noise.
    const PREFETCH_NEXT: bool = false;

    /// Rows `k0..k0+kc`, columns `j0..j0+nr` (`nr <= NR`) of B as `(base,
    /// offs)`, `buf` holding `KC * NR` floats the source may pack into.
    ///
    /// # Safety
    /// As the implementation's.
    unsafe fn panel(
        &self,
        k0: usize,
        kc: usize,
        j0: usize,
        nr: usize,
        buf: &mut [f32],
    ) -> (*const f32, *const isize);
}

/// B packed by a closure: `pack(k0, kc, j0, nr, dst)` writes rows
/// `k0..k0+kc` and columns `j0..j0+nr` of B into `dst` as `kc` rows of
/// `NR` floats.
pub struct Packed<F>(pub F);

/// Row offsets of a packed micro-panel.
static PANEL_ROWS: [isize; KC] = {
    let mut offs = [0; KC];
    let mut kk = 0;
    while kk < KC {
        offs[kk] = (kk * NR) as isize;
        kk += 1;
    }
    offs
};

impl<F: Fn(usize, usize, usize, usize, &mut [f32])> B for Packed<F> {
    unsafe fn panel(
        &self,
        k0: usize,
        kc: usize,
        j0: usize,
        nr: usize,
        buf: &mut [f32],
    ) -> (*const f32, *const isize) {
        (self.0)(k0, kc, j0, nr, &mut buf[..kc * NR]);
        (buf.as_ptr(), PANEL_ROWS.as_ptr())
    }
}

/// B packed whole beforehand, in the layout [`Packed`] packs a block in
/// (rows `NR` floats apart), its panels of `NR` columns one after another:
/// panel `j0 / NR` at `base + (j0 / NR) * k * NR`. Tasks that share B (row
/// blocks of a product with few columns) read it without packing it again.
pub struct PrePacked {
    pub base: *const f32,
    pub k: usize,
}

impl PrePacked {
    /// Floats a B of `k` rows and `n` columns takes in this layout.
    pub fn len(k: usize, n: usize) -> usize {
        n.div_ceil(NR) * k * NR
    }

    /// Packs `count` Bs of `k x n` one after another into `dst` (B `b` at
    /// `b * len(k, n)`), blocks of `KC` rows of each panel over foo's pool:
    /// `pack(b, k0, kc, j0, nr, dst)` writes rows `k0..k0+kc` and columns
    /// `j0..j0+nr` of B `b` as [`Packed`]'s closure does (`kc` rows of `NR`
    /// floats, columns past `nr` zero).
    pub fn pack_all(
        dst: &mut [f32],
        count: usize,
        k: usize,
        n: usize,
        pack: impl Fn(usize, usize, usize, usize, usize, &mut [f32]) + Sync,
    ) {
        let (len, panels, kblocks) = (Self::len(k, n), n.div_ceil(NR), k.div_ceil(KC));
        assert!(dst.len() >= count * len);
        let d = dst.as_mut_ptr() as usize;
        crate::kernels::parallel::parallel_for(count * kblocks * panels, |task| {
            let (b, rest) = (task / (kblocks * panels), task % (kblocks * panels));
            let (kb, jp) = (rest / panels, rest % panels);
            let (k0, j0) = (kb * KC, jp * NR);
            let kc = KC.min(k - k0);
            // SAFETY: task (b, kb, jp) writes its own block of panel jp of
            // B b, inside `dst` (checked above).
            let block = unsafe {
                let at = (d as *mut f32).add(b * len + (jp * k + k0) * NR);
                std::slice::from_raw_parts_mut(at, kc * NR)
            };
            pack(b, k0, kc, j0, NR.min(n - j0), block);
        });
    }
}

impl B for PrePacked {
    unsafe fn panel(
        &self,
        k0: usize,
        _: usize,
        j0: usize,
        _: usize,
        _: &mut [f32],
    ) -> (*const f32, *const isize) {
        (
            self.base.add((j0 / NR * self.k + k0) * NR),
            PANEL_ROWS.as_ptr(),
        )
    }
}

/// B read in place, no packing: row `k` is `base + offs[k]`, its columns
/// contiguous (the runs of [`super::forward_padded`]'s phase planes).
/// Every row must have `NR - 1` readable floats past B's last column.
pub struct Rows<'a> {
    pub base: *const f32,
    pub offs: &'a [isize],
}

impl B for Rows<'_> {
    const PREFETCH_NEXT: bool = true;

    unsafe fn panel(
        &self,
        k0: usize,
        _: usize,
        j0: usize,
        _: usize,
        _: &mut [f32],
    ) -> (*const f32, *const isize) {
        (self.base.add(j0), self.offs.as_ptr().add(k0))
    }
}

/// `C[m x n] = (acc ? C : 0) + A @ B` in float32.
///
/// - A: see [`Lhs`] ([`A`] or [`InPlace`]);
/// - B: see [`B`] ([`Packed`] or [`Rows`]);
/// - C: element `(i, j)` at `c[i * ldc + j]`.
///
/// # Safety
/// [`available`] holds; A and C address `m x k` and `m x n` matrices with
/// those strides, B as its [`B::panel`] requires; nothing else writes C's
/// elements meanwhile.
pub unsafe fn gemm<Src: B>(
    m: usize,
    n: usize,
    k: usize,
    a: impl Lhs,
    b: Src,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            for i in 0..m {
                std::slice::from_raw_parts_mut(c.add(i * ldc), n).fill(0.0);
            }
        }
        return;
    }
    let npanels = n.div_ceil(NR);
    PANEL.with(|s| {
        let mut buf = s.borrow_mut();
        if buf.len() < KC * NR {
            buf.resize(KC * NR, 0.0);
        }
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            let load = acc || k0 > 0;
            let mpanels = m.div_ceil(MR);
            // BLIS's order: one B micro-panel stays in L1 while A's panels
            // stream past it from L2.
            for jp in 0..npanels {
                let j0 = jp * NR;
                let nr = NR.min(n - j0);
                let (bp, offs) = b.panel(k0, kc, j0, nr, &mut buf);
                for ip in 0..mpanels {
                    let i0 = ip * MR;
                    let c = c.add(i0 * ldc + j0);
                    a.product(
                        i0,
                        MR.min(m - i0),
                        k0,
                        kc,
                        nr,
                        bp,
                        offs,
                        Src::PREFETCH_NEXT,
                        c,
                        ldc,
                        load,
                    );
                }
            }
            k0 += kc;
        }
    })
}

/// One micro-tile for callers that run the loops themselves ([`super::winograd`]):
/// `C[0..mr][0..nr] = (load ? C : 0) + A @ B` over `kc` (at most [`KC`])
/// steps, the sum of the `kc` steps formed in registers and then added to C.
/// A: a packed micro-panel, `kc` rows of [`MR`] floats (rows past `mr`
/// anything finite); B: `kc` rows [`NR`] floats apart from `b`.
///
/// # Safety
/// [`available`] holds; `a` holds `kc * MR` floats, `b` `kc * NR`; C has
/// `mr` rows of `nr` (at most `NR`) floats `ldc` apart.
pub unsafe fn micro_packed(
    mr: usize,
    nr: usize,
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    debug_assert!(kc <= KC && mr <= MR && nr <= NR);
    micro_dyn(
        wide(),
        mr,
        nr,
        kc,
        a,
        b,
        PANEL_ROWS.as_ptr(),
        false,
        c,
        ldc,
        load,
    )
}

/// Packs A's `mr x kc` block (strides in elements) as `kc` rows of `MR`
/// floats, rows past `mr` zero.
unsafe fn pack_a(a: *const f32, rs: isize, cs: isize, mr: usize, kc: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if cs == 1 && wide() {
        assert!(dst.len() >= kc * MR);
        pack_rows_avx512(a, rs, mr, kc, dst.as_mut_ptr());
        return;
    }
    if cs == 1 {
        // Rows contiguous in k (a weight's output channels): one row at a time.
        for i in 0..mr {
            let row = std::slice::from_raw_parts(a.offset(i as isize * rs), kc);
            for (kk, &v) in row.iter().enumerate() {
                *dst.get_unchecked_mut(kk * MR + i) = v;
            }
        }
    } else {
        for kk in 0..kc {
            let col = a.offset(kk as isize * cs);
            for i in 0..mr {
                *dst.get_unchecked_mut(kk * MR + i) = *col.offset(i as isize * rs);
            }
        }
    }
    if mr < MR {
        for kk in 0..kc {
            dst[kk * MR + mr..(kk + 1) * MR].fill(0.0);
        }
    }
}

/// [`pack_a`] for rows contiguous in k (a weight's output channels): 16 k
/// at a time, the `mr` rows (zero rows up to 16) are loaded, transposed as
/// a 16 x 16 block and stored as 16 rows of `MR` (a scalar transpose had
/// cost 1 ns per element: a twentieth of a 512-channel layer at 7 x 7).
/// [`super::winograd`]'s weight transform turns its taps with it too.
///
/// # Safety
/// AVX-512F; `a` addresses `mr <= MR` rows of `kc` floats at stride `rs`;
/// `dst` holds `kc * MR` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_rows_avx512(
    a: *const f32,
    rs: isize,
    mr: usize,
    kc: usize,
    dst: *mut f32,
) {
    use crate::kernels::linalg::{first_lanes, transpose16};
    use std::arch::x86_64::*;
    let store = first_lanes(MR);
    let mut k0 = 0;
    while k0 < kc {
        let n = (kc - k0).min(16);
        let load = first_lanes(n);
        let mut r = [_mm512_setzero_si512(); 16];
        for (i, row) in r.iter_mut().enumerate().take(mr) {
            *row = _mm512_maskz_loadu_epi32(load, a.offset(i as isize * rs).add(k0) as *const i32);
        }
        transpose16(&mut r);
        for (kk, row) in r.iter().enumerate().take(n) {
            _mm512_mask_storeu_epi32(dst.add((k0 + kk) * MR) as *mut i32, store, *row);
        }
        k0 += n;
    }
}

/// `dst[j] = src[j * step]` for every `j < dst.len()` (a row of a
/// stride-`step` phase plane). Stride 2, the common one, deinterleaves 32
/// floats per two loads on AVX-512 (the scalar loop had cost a tenth of a
/// stride-2 3x3 layer's product).
pub fn copy_strided(src: &[f32], step: usize, dst: &mut [f32]) {
    assert!(dst.is_empty() || (dst.len() - 1) * step < src.len());
    #[cfg(target_arch = "x86_64")]
    if step == 2 && wide() {
        // SAFETY: AVX-512F; reads below src.len() (masked), writes below dst.len().
        unsafe { copy_even_avx512(src.as_ptr(), src.len(), dst.as_mut_ptr(), dst.len()) };
        return;
    }
    for (j, d) in dst.iter_mut().enumerate() {
        *d = src[j * step];
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_even_avx512(src: *const f32, n: usize, dst: *mut f32, len: usize) {
    use std::arch::x86_64::*;
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let mask = crate::kernels::linalg::first_lanes;
    let mut j = 0;
    while j < len {
        let at = 2 * j;
        let lo = _mm512_maskz_loadu_ps(mask(n - at), src.add(at));
        // wrapping_add: past the row's end when fully masked (never read).
        let hi = _mm512_maskz_loadu_ps(mask(n.saturating_sub(at + 16)), src.wrapping_add(at + 16));
        let v = _mm512_permutex2var_ps(lo, even, hi);
        _mm512_mask_storeu_ps(dst.add(j), mask(len - j), v);
        j += 16;
    }
}

/// `dst[j] = src[tab[j]]` for the `NR` entries of `tab`, 0 where `tab[j]`
/// is negative (an im2col row read through its tap's offset table).
/// Without AVX-512 a scalar loop: AVX2's gather is no faster than scalar
/// loads on the cores that lack AVX-512 (Zen 1: about 4 cycles an element).
///
/// # Safety
/// Every non-negative entry is an offset inside the allocation `src`
/// points into.
#[inline]
pub unsafe fn gather_row(src: *const f32, tab: &[i32], dst: &mut [f32]) {
    assert!(tab.len() >= NR && dst.len() >= NR);
    #[cfg(target_arch = "x86_64")]
    if wide() {
        gather_row_avx512(src, tab.as_ptr(), dst.as_mut_ptr());
        return;
    }
    for (d, &t) in dst[..NR].iter_mut().zip(&tab[..NR]) {
        *d = if t >= 0 { *src.offset(t as isize) } else { 0.0 };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gather_row_avx512(src: *const f32, tab: *const i32, dst: *mut f32) {
    use std::arch::x86_64::*;
    for v in 0..NR / 16 {
        let idx = _mm512_loadu_si512(tab.add(v * 16) as *const _);
        let inside = _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512());
        let x = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), inside, idx, src as *const _);
        _mm512_storeu_ps(dst.add(v * 16), x);
    }
}

/// Where [`micro`] reads A: element `(i, kk)` of its micro-tile at
/// `col(kk) + i * rs()`.
trait Tile: Copy {
    /// Step `kk`'s first row.
    unsafe fn col(&self, kk: usize) -> *const f32;
    /// Elements between rows.
    fn rs(&self) -> usize;
}

/// A packed micro-panel: `kc` rows of `MR` floats.
impl Tile for *const f32 {
    #[inline(always)]
    unsafe fn col(&self, kk: usize) -> *const f32 {
        self.add(kk * MR)
    }
    #[inline(always)]
    fn rs(&self) -> usize {
        1
    }
}

/// [`InPlace`]'s rows from the first of a micro-tile: element `(i, kk)`
/// at `ptr + i * rs + cols[kk]`.
#[derive(Clone, Copy)]
struct Unpacked {
    ptr: *const f32,
    rs: usize,
    cols: *const isize,
}

impl Tile for Unpacked {
    #[inline(always)]
    unsafe fn col(&self, kk: usize) -> *const f32 {
        self.ptr.offset(*self.cols.add(kk))
    }
    #[inline(always)]
    fn rs(&self) -> usize {
        self.rs
    }
}

/// `C[0..M][0..nr] = (load ? C : 0) + A_tile @ B_panel` over `kc` steps,
/// `NV` 16-lane vectors of columns; B's row `kk` at `b + boff[kk]`; A's
/// elements where its [`Tile`] says (one broadcast per row and step).
/// `PF`: prefetch each row of the next panel as [`B::PREFETCH_NEXT`] says.
///
/// # Safety
/// AVX-512F; `a` addresses `M` rows of `kc` elements, `boff` holds `kc`
/// offsets, each with `NV * 16` floats readable at `b` plus it; C has `M`
/// rows of `nr` floats at stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn micro<const M: usize, const NV: usize, T: Tile, const PF: bool>(
    kc: usize,
    a: T,
    b: *const f32,
    boff: *const isize,
    c: *mut f32,
    ldc: usize,
    nr: usize,
    load: bool,
) {
    use std::arch::x86_64::*;
    let mask = |v: usize| crate::kernels::linalg::first_lanes(nr.saturating_sub(v * 16));
    let mut acc = [[_mm512_setzero_ps(); NV]; M];
    let rs = a.rs();
    for kk in 0..kc {
        let row = b.offset(*boff.add(kk));
        if PF {
            prefetch_next(row);
        }
        let col = a.col(kk);
        let mut bv = [_mm512_setzero_ps(); NV];
        for v in 0..NV {
            bv[v] = _mm512_loadu_ps(row.add(v * 16));
        }
        for i in 0..M {
            let av = _mm512_set1_ps(*col.add(i * rs));
            for v in 0..NV {
                acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
            }
        }
    }
    // The block's sum is added to C's running total, not accumulated onto
    // it: one chain over all of `k` drifts further from the exact sum.
    if load {
        for i in 0..M {
            for v in 0..NV {
                let prev = _mm512_maskz_loadu_ps(mask(v), c.add(i * ldc + v * 16));
                acc[i][v] = _mm512_add_ps(prev, acc[i][v]);
            }
        }
    }
    for i in 0..M {
        for v in 0..NV {
            _mm512_mask_storeu_ps(c.add(i * ldc + v * 16), mask(v), acc[i][v]);
        }
    }
}

/// Prefetches the same row of the next B micro-panel, `NR` floats on from
/// `row` (up to three cache lines), for both micro-kernels' `PF`; a
/// prefetch past the end of B does not fault.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch_next(row: *const f32) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let next = row.wrapping_add(NR);
    _mm_prefetch::<_MM_HINT_T0>(next as *const i8);
    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(16) as *const i8);
    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(NR - 1) as *const i8);
}

/// [`micro`] on AVX2 + FMA: AVX2's 16 registers hold a tile of at most 6
/// rows by 16 columns (12 accumulators, two B vectors, a broadcast), so
/// the `mr x nr` tile runs as such sub-tiles one after another, each over
/// all `kc` steps while the micro-panels of A (`kc x MR`) and B (`kc x
/// NR`) stay in L1. Each output is the same FMA chain over `kk` as in
/// [`micro`], added to C the same way: the same bits as the AVX-512 kernel.
///
/// # Safety
/// As [`micro`], AVX2 and FMA instead of AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<T: Tile>(
    mr: usize,
    nr: usize,
    kc: usize,
    a: T,
    b: *const f32,
    boff: *const isize,
    pf: bool,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    macro_rules! go {
        ($($r:literal)*) => {
            let mut i0 = 0;
            while i0 < mr {
                let rows = (mr - i0).min(6);
                let mut j0 = 0;
                while j0 < nr {
                    let cols = (nr - j0).min(16);
                    let pf = pf && i0 == 0 && j0 == 0;
                    let (c, b) = (c.add(i0 * ldc + j0), b.add(j0));
                    match (rows, cols > 8) {
                        $(($r, false) => sub_avx2::<$r, 1, T>(kc, a, i0, b, boff, pf, c, ldc, cols, load),
                          ($r, true) => sub_avx2::<$r, 2, T>(kc, a, i0, b, boff, pf, c, ldc, cols, load),)*
                        _ => unreachable!(),
                    }
                    j0 += 16;
                }
                i0 += 6;
            }
        };
    }
    go!(1 2 3 4 5 6);
}

/// One sub-tile of [`micro_avx2`]: rows `i0..i0 + R` of A's tile against
/// `V` 8-lane vectors of B's columns from `b` (the first `cols` valid);
/// `pf` as [`micro`]'s `PF`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sub_avx2<const R: usize, const V: usize, T: Tile>(
    kc: usize,
    a: T,
    i0: usize,
    b: *const f32,
    boff: *const isize,
    pf: bool,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    load: bool,
) {
    use std::arch::x86_64::*;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask =
        |v: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(cols.saturating_sub(8 * v) as i32), lanes);
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let rs = a.rs();
    for kk in 0..kc {
        let row = b.offset(*boff.add(kk));
        if pf {
            prefetch_next(row);
        }
        let col = a.col(kk).add(i0 * rs);
        let mut bv = [_mm256_setzero_ps(); V];
        for (v, bv) in bv.iter_mut().enumerate() {
            *bv = _mm256_loadu_ps(row.add(v * 8));
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*col.add(i * rs));
            for v in 0..V {
                acc[v] = _mm256_fmadd_ps(av, bv[v], acc[v]);
            }
        }
    }
    for (i, acc) in acc.iter_mut().enumerate() {
        for (v, acc) in acc.iter_mut().enumerate() {
            let at = c.add(i * ldc + v * 8);
            if load {
                *acc = _mm256_add_ps(_mm256_maskload_ps(at, mask(v)), *acc);
            }
            _mm256_maskstore_ps(at, mask(v), *acc);
        }
    }
}

/// [`micro`] for `mr` rows (1..=MR) and `nr` columns (1..=NR) when `wide`
/// (callers pass [`wide`]; the level is an argument so that a test can run
/// both on one CPU), else [`micro_avx2`]'s sub-tiles.
///
/// # Safety
/// As [`micro`]; AVX-512F when `wide`, else AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
unsafe fn micro_dyn<T: Tile>(
    wide: bool,
    mr: usize,
    nr: usize,
    kc: usize,
    a: T,
    b: *const f32,
    boff: *const isize,
    pf: bool,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    if !wide {
        micro_avx2(mr, nr, kc, a, b, boff, pf, c, ldc, load);
        return;
    }
    macro_rules! go {
        ($($m:literal)*) => {
            match (mr, nr > 16, pf) {
                $(($m, false, false) => micro::<$m, 1, T, false>(kc, a, b, boff, c, ldc, nr, load),
                  ($m, true, false) => micro::<$m, 2, T, false>(kc, a, b, boff, c, ldc, nr, load),
                  ($m, false, true) => micro::<$m, 1, T, true>(kc, a, b, boff, c, ldc, nr, load),
                  ($m, true, true) => micro::<$m, 2, T, true>(kc, a, b, boff, c, ldc, nr, load),)*
                _ => unreachable!(),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn micro_dyn<T: Tile>(
    _: bool,
    _: usize,
    _: usize,
    _: usize,
    _: T,
    _: *const f32,
    _: *const isize,
    _: bool,
    _: *mut f32,
    _: usize,
    _: bool,
) {
    unreachable!("the AVX-512 convolution kernel runs on x86_64 only")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floats in [-0.5, 0.5) from a linear congruential sequence seeded
    /// with `seed`.
    fn uniform(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        }
    }

    /// Against a plain triple loop in float64, for edge rows/columns,
    /// several k blocks, A packed from rows or from columns (the vector and
    /// the scalar packing), accumulation into C, a block of rows alone, and
    /// B read in place ([`Rows`]) bit for bit as B packed.
    #[test]
    fn copy_strided_matches_scalar() {
        let src: Vec<f32> = (0..71).map(|i| i as f32).collect();
        for step in 1..4 {
            for len in 0..=(71 - 1) / step + 1 {
                let (mut got, want): (Vec<f32>, Vec<f32>) = (
                    vec![-1.0; len],
                    (0..len).map(|j| (j * step) as f32).collect(),
                );
                if len > 0 && (len - 1) * step >= src.len() {
                    continue;
                }
                copy_strided(&src[..], step, &mut got);
                assert_eq!(got, want, "step {step} len {len}");
                // The source cut just past the last element read.
                if len > 0 {
                    let mut got2 = vec![-1.0; len];
                    copy_strided(&src[..(len - 1) * step + 1], step, &mut got2);
                    assert_eq!(got2, want, "step {step} len {len}, tight source");
                }
            }
        }
    }

    /// [`pack_a_all_with`] with evenly spaced columns writes what
    /// [`pack_a_all`] writes (padding rows included), and with reversed
    /// runs of taps (a weight read transposed and flipped) the elements the
    /// column table names.
    #[test]
    fn column_table_packing_matches_strided() {
        let a: Vec<f32> = (0..40 * 300).map(|i| i as f32).collect();
        for (m, k) in [(1, 1), (12, 128), (13, 129), (26, 300), (40, 257)] {
            let len = packed_len(m, k);
            let (mut want, mut got) = (vec![-1.0; len], vec![-2.0; len]);
            // SAFETY: rows at stride 1, columns at stride m: inside a.
            unsafe {
                pack_a_all(a.as_ptr(), 1, m as isize, m, k, &mut want);
                pack_a_all_with(
                    a.as_ptr(),
                    |i| i as isize,
                    |j| (j * m) as isize,
                    m,
                    k,
                    Walk::AlongRows,
                    &mut got,
                );
            }
            assert_eq!(got, want, "m {m} k {k}");
            // Columns (o, tap) of 3 taps each, taps reversed: element (i, k)
            // at (k / 3 * m + i) * 3 + 2 - k % 3.
            let kk = k.div_ceil(3) * 3;
            let mut flipped = vec![0.0; packed_len(m, kk)];
            let col = |j: usize| ((j / 3 * m) * 3 + 2 - j % 3) as isize;
            // SAFETY: the largest offset is below m * kk <= a.len().
            unsafe {
                pack_a_all_with(
                    a.as_ptr(),
                    |i| 3 * i as isize,
                    col,
                    m,
                    kk,
                    Walk::AlongK,
                    &mut flipped,
                )
            };
            for j in 0..kk {
                let (k0, kc) = (j / KC * KC, KC.min(kk - j / KC * KC));
                for i in 0..m {
                    let at = packed_offset(m, k0, kc, i / MR * MR) + (j - k0) * MR + i % MR;
                    assert_eq!(
                        flipped[at],
                        a[(col(j) + 3 * i as isize) as usize],
                        "m {m} k {kk} ({i}, {j})"
                    );
                }
            }
        }
    }

    /// The AVX2 micro-kernel's sub-tiles give the AVX-512 tile's bits (each
    /// output the same FMA chain): every row count, column counts around
    /// the vectors' edges, short and full k blocks, A packed and read in
    /// place, B's rows out of order, with and without accumulation. Calls
    /// both levels directly ([`micro_dyn`]): switching the process's SIMD
    /// level would change the paths of tests running beside this one.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn bits_do_not_depend_on_level() {
        use crate::kernels::elementwise::simd::{detected, SimdLevel};
        if detected() < SimdLevel::Avx512 {
            return;
        }
        let mut rnd = uniform(11);
        let ldc = NR + 3;
        for kc in [1, 7, KC] {
            let packed: Vec<f32> = (0..kc * MR).map(|_| rnd()).collect();
            let rows: Vec<f32> = (0..MR * kc).map(|_| rnd()).collect();
            let cols: Vec<isize> = (0..kc as isize).collect();
            let b: Vec<f32> = (0..kc * NR).map(|_| rnd()).collect();
            let boff: Vec<isize> = (0..kc).map(|r| ((kc - 1 - r) * NR) as isize).collect();
            let c0: Vec<f32> = (0..MR * ldc).map(|_| rnd()).collect();
            let unpacked = Unpacked {
                ptr: rows.as_ptr(),
                rs: kc,
                cols: cols.as_ptr(),
            };
            for mr in 1..=MR {
                for nr in [1, 8, 9, 16, 17, 31, NR] {
                    for load in [false, true] {
                        let run = |wide: bool, in_place: bool| {
                            let mut c = c0.clone();
                            let (b, o, cp) = (b.as_ptr(), boff.as_ptr(), c.as_mut_ptr());
                            // SAFETY: A holds MR x kc, B kc rows of NR, C MR x ldc.
                            unsafe {
                                if in_place {
                                    micro_dyn(wide, mr, nr, kc, unpacked, b, o, true, cp, ldc, load)
                                } else {
                                    let a = packed.as_ptr();
                                    micro_dyn(wide, mr, nr, kc, a, b, o, false, cp, ldc, load)
                                }
                            }
                            c.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                        };
                        for in_place in [false, true] {
                            assert_eq!(
                                run(true, in_place),
                                run(false, in_place),
                                "kc {kc} mr {mr} nr {nr} load {load} in place {in_place}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn matches_reference() {
        if !available() {
            return;
        }
        let mut rnd = uniform(7);
        for &(m, n, k) in &[
            (1, 1, 1),
            (12, 32, 128),
            (13, 33, 129),
            (25, 17, 300),
            (5, 70, 7),
            (40, 64, 257),
        ] {
            for trans in [false, true] {
                for acc in [false, true] {
                    let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
                    let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
                    let ldc = n + 3;
                    let c0: Vec<f32> = (0..m * ldc).map(|_| rnd()).collect();
                    let mut c = c0.clone();
                    // A row-major (i, k) at i*k + k, or stored transposed at k*m + i.
                    let at: Vec<f32> = if trans {
                        let mut t = vec![0.0; m * k];
                        for i in 0..m {
                            for kk in 0..k {
                                t[kk * m + i] = a[i * k + kk];
                            }
                        }
                        t
                    } else {
                        a.clone()
                    };
                    let (ars, acs) = if trans {
                        (1, m as isize)
                    } else {
                        (k as isize, 1)
                    };
                    let pack = |k0: usize, kc: usize, j0: usize, nr: usize, dst: &mut [f32]| {
                        for kk in 0..kc {
                            for j in 0..NR {
                                dst[kk * NR + j] = if j < nr {
                                    b[(k0 + kk) * n + j0 + j]
                                } else {
                                    f32::NAN
                                };
                            }
                        }
                    };
                    let mut packed = vec![0.0; packed_len(m, k)];
                    unsafe { pack_a_all(at.as_ptr(), ars, acs, m, k, &mut packed) };
                    let pa = A {
                        ptr: packed.as_ptr(),
                        rows: m,
                        first: 0,
                    };
                    unsafe { gemm(m, n, k, pa, Packed(pack), c.as_mut_ptr(), ldc, acc) };
                    // B read in place through row offsets (rows out of
                    // order, NaN past each row's columns): the same sums.
                    let ld = n + NR + 3;
                    let offs: Vec<isize> = (0..k).map(|r| ((k - 1 - r) * ld) as isize).collect();
                    let mut rows = vec![f32::NAN; k * ld];
                    for (r, &o) in offs.iter().enumerate() {
                        rows[o as usize..o as usize + n].copy_from_slice(&b[r * n..(r + 1) * n]);
                    }
                    let mut c2 = c0.clone();
                    let rb = Rows {
                        base: rows.as_ptr(),
                        offs: &offs,
                    };
                    unsafe { gemm(m, n, k, pa, rb, c2.as_mut_ptr(), ldc, acc) };
                    assert!(
                        c.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "B in place differs from B packed"
                    );
                    // The rows from the second panel on, alone.
                    if m > MR {
                        let mut c3 = c0.clone();
                        let pa = A {
                            ptr: packed.as_ptr(),
                            rows: m,
                            first: MR,
                        };
                        let c3p = unsafe { c3.as_mut_ptr().add(MR * ldc) };
                        unsafe { gemm(m - MR, n, k, pa, Packed(pack), c3p, ldc, acc) };
                        assert_eq!(
                            c[MR * ldc..],
                            c3[MR * ldc..],
                            "a block of packed rows differs"
                        );
                    }
                    for i in 0..m {
                        for j in 0..ldc {
                            let got = c[i * ldc + j];
                            if j >= n {
                                assert_eq!(
                                    got.to_bits(),
                                    c0[i * ldc + j].to_bits(),
                                    "padding written"
                                );
                                continue;
                            }
                            let mut want = if acc { c0[i * ldc + j] as f64 } else { 0.0 };
                            for kk in 0..k {
                                want += a[i * k + kk] as f64 * b[kk * n + j] as f64;
                            }
                            assert!(
                                (got as f64 - want).abs() < 1e-4 * (k as f64).sqrt(),
                                "{m}x{n}x{k} ({i},{j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
