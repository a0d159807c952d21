//! Depthwise convolution (one input and one output channel per group):
//! forward, input gradient and weight gradient.
//!
//! Two strategies. Up to about 125 x 125 planes, `blocked.rs`: channels in
//! the SIMD lanes, one task per sample and block of 16 channels, every lane
//! busy whatever the width or stride. Larger planes (whose blocked scratch
//! would outgrow the caches) take the row kernels here, one task per block
//! of (sample, channel) planes:
//!
//! Each plane is first copied into a zero-padded scratch plane whose
//! columns are split by phase (`iw mod stride`): in that layout every
//! kernel tap reads a contiguous run of columns for a run of output
//! columns, in bounds by construction, so the column loops carry no bounds
//! checks and stride 2 costs the same as stride 1. Rows that fall into the
//! padding are not computed at all: each output row only lists the taps
//! whose input row exists.
//!
//! - Forward: `out[oh, ow] = bias + sum_taps w * x`, accumulated in
//!   registers across all taps of a block of output columns and stored once.
//! - Input gradient: the same gather form over the padded output gradient
//!   (the transposed convolution), per input row and column phase.
//! - Weight gradient: per plane, dot products of output-gradient rows with
//!   the shifted input rows (16 lanes, for every SIMD level), then a sum of
//!   the per-plane partials over the batch in sample order (no atomics).
//!
//! The inner loops are generic over the vector width and run inside a
//! `#[target_feature]` function of the level elementwise/simd.rs detected.
//! Every output element is summed in the same order whatever the level, the
//! width or the thread count, each step a fused multiply-add ([`Real::fma`]:
//! one rounding on every level, an FMA instruction on AVX2 and AVX-512, a
//! correctly rounded library call on the portable level), so results are
//! bit-identical across all three. Fused (it had been a multiply and an
//! add), the channel-block forwards of mobilenet_v3_small's 5 x 5 layers
//! went from 1.28-1.47x torch CPU's time to 0.89-1.12x (one thread, Zen 4,
//! `python -m foo_rs.bench --group conv --quick --threads 1 -k " dw "`).

pub(super) mod blocked;

use super::{igemm, is_f32, parallel, with_scratch, Conv2d, Real, P};
use crate::kernels::elementwise::simd::{self, SimdLevel};

/// Widest vector (in f32 lanes) of any level: padded rows leave room for
/// one such vector past the last output column.
const MAX_LANES: usize = 16;

/// Lanes of the weight-gradient accumulators, the same for every level so
/// that the partial sums (and so the result bits) do not depend on it.
const GW_LANES: usize = 16;

/// Planes per task at most (tasks only group planes: no result depends on it).
const MAX_TASKS: usize = 64;

/// One row of output: `dst[j * step] = init + sum_t w[t.1] * src[t.0 + j]`
/// for `j < n`, over the taps `taps[t0..t1]` (`src` offsets in the padded plane).
#[derive(Clone, Copy, Debug)]
struct RowPlan {
    t0: usize,
    t1: usize,
    dst: usize,
    n: usize,
    step: usize,
}

/// Layout of a padded, column-phase-split copy of a `rows x cols` plane:
/// phase `q` (columns `q, q+s, ...`) row `r` starts at `(q * rows + r) * rw`,
/// its data at column `pl` and zeros around it.
#[derive(Clone, Copy, Debug)]
struct Layout {
    rows: usize,
    cols: usize,
    s: usize,
    pl: usize,
    rw: usize,
}

impl Layout {
    fn len(&self) -> usize {
        self.s * self.rows * self.rw
    }

    /// Copies `src` (`rows x cols`, row-major) into `dst` in this layout.
    #[inline(always)]
    unsafe fn fill<T: Real>(&self, src: *const T, dst: &mut [T]) {
        for q in 0..self.s {
            let n = if self.cols > q {
                (self.cols - q).div_ceil(self.s)
            } else {
                0
            };
            for r in 0..self.rows {
                let row =
                    &mut dst[(q * self.rows + r) * self.rw..(q * self.rows + r + 1) * self.rw];
                let s = src.add(r * self.cols + q);
                row[..self.pl].fill(T::ZERO);
                let data = &mut row[self.pl..self.pl + n];
                if self.s == 1 {
                    data.copy_from_slice(std::slice::from_raw_parts(s, n));
                } else if is_f32::<T>() && n > 0 {
                    // SAFETY: T is f32; the row holds (n - 1) * s + 1 floats from s.
                    let src = std::slice::from_raw_parts(s as *const f32, (n - 1) * self.s + 1);
                    let dst = std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut f32, n);
                    igemm::copy_strided(src, self.s, dst);
                } else {
                    for (c, d) in data.iter_mut().enumerate() {
                        *d = *s.add(c * self.s);
                    }
                }
                row[self.pl + n..].fill(T::ZERO);
            }
        }
    }
}

/// The taps of every output row of a gather over a padded plane.
struct Plan {
    layout: Layout,
    /// (offset in the padded plane, weight index), row by row.
    taps: Vec<(isize, usize)>,
    rows: Vec<RowPlan>,
}

/// Row and column offsets of kernel tap `k` along one dimension, as phase
/// `q` and shift `base` of the phase-split input: input index
/// `o * s + k * d - p = (o + base) * s + q`.
pub(super) fn phase(k: usize, s: usize, p: usize, d: usize) -> (usize, isize) {
    let off = (k * d) as isize - p as isize;
    (
        off.rem_euclid(s as isize) as usize,
        off.div_euclid(s as isize),
    )
}

/// Padding and row width that keep reads at columns `pl + shift + j`,
/// `j < round_up(n, MAX_LANES)`, inside a row holding `len` data columns.
pub(super) fn pad_for(
    shifts: impl Iterator<Item = isize> + Clone,
    n: usize,
    len: usize,
) -> (usize, usize) {
    let lo = shifts.clone().min().unwrap_or(0);
    let hi = shifts.max().unwrap_or(0);
    let pl = (-lo).max(0) as usize;
    let reach = (hi + n.div_ceil(MAX_LANES) as isize * MAX_LANES as isize).max(len as isize);
    (pl, pl + reach.max(0) as usize)
}

/// Forward taps: output row `oh` reads input rows `oh*sh + ki*dh - ph`
/// that exist, each tap at its column phase and shift.
fn forward_plan(g: &Conv2d) -> Plan {
    let (sh, sw) = (g.stride[0], g.stride[1]);
    let cols: Vec<(usize, isize)> = (0..g.kw)
        .map(|kj| phase(kj, sw, g.padding[1], g.dilation[1]))
        .collect();
    let (pl, rw) = pad_for(cols.iter().map(|c| c.1), g.ow, g.w.div_ceil(sw));
    let layout = Layout {
        rows: g.h,
        cols: g.w,
        s: sw,
        pl,
        rw,
    };
    let mut taps = Vec::new();
    let mut rows = Vec::with_capacity(g.oh);
    for oh in 0..g.oh {
        let t0 = taps.len();
        for ki in 0..g.kh {
            let ih = (oh * sh + ki * g.dilation[0]) as isize - g.padding[0] as isize;
            if ih < 0 || ih >= g.h as isize {
                continue;
            }
            for (kj, &(q, base)) in cols.iter().enumerate() {
                let off = ((q * g.h) as isize + ih) * rw as isize + pl as isize + base;
                taps.push((off, ki * g.kw + kj));
            }
        }
        rows.push(RowPlan {
            t0,
            t1: taps.len(),
            dst: oh * g.ow,
            n: g.ow,
            step: 1,
        });
    }
    Plan { layout, taps, rows }
}

/// Input-gradient taps: input row `ih`, column phase `q` (columns
/// `q, q + sw, ...`) gathers the output-gradient entries whose window covers
/// it: tap `(ki, kj)` contributes where `ih + ph - ki*dh` and
/// `q + pw - kj*dw` are multiples of the strides.
fn grad_input_plan(g: &Conv2d) -> Plan {
    let (sh, sw) = (g.stride[0] as isize, g.stride[1]);
    // Per column phase: (kj, shift of the output column).
    let cols: Vec<Vec<(usize, isize)>> = (0..sw)
        .map(|q| {
            (0..g.kw)
                .filter_map(|kj| {
                    let num = (q + g.padding[1]) as isize - (kj * g.dilation[1]) as isize;
                    (num.rem_euclid(sw as isize) == 0).then(|| (kj, num / sw as isize))
                })
                .collect()
        })
        .collect();
    let (pl, rw) = pad_for(cols.iter().flatten().map(|c| c.1), g.w.div_ceil(sw), g.ow);
    let layout = Layout {
        rows: g.oh,
        cols: g.ow,
        s: 1,
        pl,
        rw,
    };
    let mut taps = Vec::new();
    let mut rows = Vec::with_capacity(g.h * sw);
    for ih in 0..g.h {
        for (q, qcols) in cols.iter().enumerate() {
            if q >= g.w {
                break;
            }
            let t0 = taps.len();
            for ki in 0..g.kh {
                let num = (ih + g.padding[0]) as isize - (ki * g.dilation[0]) as isize;
                if num < 0 || num % sh != 0 || num / sh >= g.oh as isize {
                    continue;
                }
                for &(kj, shift) in qcols {
                    let off = (num / sh) * rw as isize + pl as isize + shift;
                    taps.push((off, ki * g.kw + kj));
                }
            }
            rows.push(RowPlan {
                t0,
                t1: taps.len(),
                dst: ih * g.w + q,
                n: (g.w - q).div_ceil(sw),
                step: sw,
            });
        }
    }
    Plan { layout, taps, rows }
}

/// `init + sum_t w[t] * src[t + l]` for `l < N`, taps in order.
#[inline(always)]
unsafe fn gather<T: Real, const N: usize>(
    src: *const T,
    taps: &[(isize, usize)],
    w: *const T,
    init: T,
) -> [T; N] {
    let mut acc = [init; N];
    for &(off, wi) in taps {
        let s = src.offset(off);
        let wv = *w.add(wi);
        for l in 0..N {
            acc[l] = wv.fma(*s.add(l), acc[l]);
        }
    }
    acc
}

#[inline(always)]
unsafe fn store<T: Real>(dst: *mut T, step: usize, v: &[T]) {
    if step == 1 {
        std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len());
    } else {
        for (l, &x) in v.iter().enumerate() {
            *dst.add(l * step) = x;
        }
    }
}

/// Runs a plan on one plane: `src` is the padded plane, `dst` the output plane.
#[inline(always)]
unsafe fn apply<T: Real, const L: usize, const NB: usize>(
    plan: &Plan,
    src: *const T,
    w: *const T,
    init: T,
    dst: *mut T,
) {
    for r in &plan.rows {
        let taps = &plan.taps[r.t0..r.t1];
        let d = dst.add(r.dst);
        let mut j = 0;
        while j + NB <= r.n {
            let acc = gather::<T, NB>(src.add(j), taps, w, init);
            store(d.add(j * r.step), r.step, &acc);
            j += NB;
        }
        while j < r.n {
            let acc = gather::<T, L>(src.add(j), taps, w, init);
            store(d.add(j * r.step), r.step, &acc[..L.min(r.n - j)]);
            j += L;
        }
    }
}

/// Work split into tasks of whole planes, run inside the detected level.
trait Planes: Sync {
    type T: Real;
    /// Elements of the per-thread scratch plane.
    fn scratch(&self) -> usize;
    /// Runs planes `p0..p1` with vectors of `L` lanes, blocks of `NB`.
    unsafe fn run<const L: usize, const NB: usize>(
        &self,
        p0: usize,
        p1: usize,
        buf: &mut [Self::T],
    );
}

/// Runs `k` over `nplanes` planes on the pool, in the SIMD level's instantiation.
fn for_planes<K: Planes>(k: &K, nplanes: usize) {
    let ntasks = nplanes.min(MAX_TASKS);
    if ntasks == 0 {
        return;
    }
    let per = nplanes.div_ceil(ntasks);
    let level = simd::level();
    parallel::parallel_for(nplanes.div_ceil(per), |t| {
        let (p0, p1) = (t * per, ((t + 1) * per).min(nplanes));
        // The scratch is taken out here: the thread-local access is not
        // inlined, and the kernel must be (inside the level's function).
        with_scratch::<K::T, _>(k.scratch(), |buf| {
            // SAFETY: `k` writes only the planes it is given. The lane
            // count follows the level: 16 f32 lanes in AVX-512, 8 in AVX2.
            match level {
                SimdLevel::Avx512 => simd::dispatch_at(
                    level,
                    #[inline(always)]
                    || unsafe { k.run::<16, 64>(p0, p1, buf) },
                ),
                SimdLevel::Avx2 => simd::dispatch_at(
                    level,
                    #[inline(always)]
                    || unsafe { k.run::<8, 32>(p0, p1, buf) },
                ),
                SimdLevel::Portable => unsafe { k.run::<4, 16>(p0, p1, buf) },
            }
        })
    });
}

struct Forward<'a, T> {
    g: &'a Conv2d,
    plan: Plan,
    out: P<T>,
    x: P<T>,
    w: P<T>,
    bias: Option<P<T>>,
}

impl<T: Real> Planes for Forward<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.plan.layout.len()
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB: usize>(&self, p0: usize, p1: usize, buf: &mut [T]) {
        let (g, lay) = (self.g, &self.plan.layout);
        for plane in p0..p1 {
            let c = plane % g.c;
            lay.fill(self.x.at(plane * g.hw()), buf);
            let b = self.bias.map_or(T::ZERO, |b| *b.at(c));
            apply::<T, L, NB>(
                &self.plan,
                buf.as_ptr(),
                self.w.at(c * g.kp()),
                b,
                self.out.at(plane * g.p()),
            );
        }
    }
}

struct GradInput<'a, T> {
    g: &'a Conv2d,
    plan: Plan,
    gi: P<T>,
    grad: P<T>,
    w: P<T>,
}

impl<T: Real> Planes for GradInput<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.plan.layout.len()
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB: usize>(&self, p0: usize, p1: usize, buf: &mut [T]) {
        let (g, lay) = (self.g, &self.plan.layout);
        for plane in p0..p1 {
            let c = plane % g.c;
            lay.fill(self.grad.at(plane * g.p()), buf);
            apply::<T, L, NB>(
                &self.plan,
                buf.as_ptr(),
                self.w.at(c * g.kp()),
                T::ZERO,
                self.gi.at(plane * g.hw()),
            );
        }
    }
}

struct GradWeight<'a, T> {
    g: &'a Conv2d,
    /// The forward plan's layout of the padded input plane.
    layout: Layout,
    /// Per kernel row `ki`: the output rows whose input row exists.
    rows: Vec<(usize, usize)>,
    /// Per tap `(ki, kj)`: its offset in the padded plane for output row 0.
    offs: Vec<isize>,
    grad: P<T>,
    x: P<T>,
    /// Per (channel, sample) plane: its `kh * kw` partial sums.
    partial: P<T>,
}

impl<T: Real> GradWeight<'_, T> {
    /// Partial sums of the taps `k0..k0+G` (one kernel row) over one plane.
    #[inline(always)]
    unsafe fn taps<const G: usize>(
        &self,
        ki: usize,
        k0: usize,
        grad: *const T,
        xp: *const T,
        dst: *mut T,
    ) {
        let g = self.g;
        let rstep = (g.stride[0] * self.layout.rw) as isize;
        let mut acc = [[T::ZERO; GW_LANES]; G];
        let (lo, hi) = self.rows[ki];
        let full = g.ow / GW_LANES * GW_LANES;
        let offs: [isize; G] = std::array::from_fn(|t| self.offs[k0 + t]);
        for oh in lo..hi {
            let gr = grad.add(oh * g.ow);
            let xr = xp.offset(oh as isize * rstep);
            let mut j = 0;
            while j < full {
                let gv: [T; GW_LANES] = std::array::from_fn(|l| *gr.add(j + l));
                for t in 0..G {
                    let s = xr.offset(offs[t] + j as isize);
                    for l in 0..GW_LANES {
                        acc[t][l] = gv[l].fma(*s.add(l), acc[t][l]);
                    }
                }
                j += GW_LANES;
            }
            if j < g.ow {
                // The last columns: lanes past the row add nothing (the
                // padded input there may hold any value, even inf).
                let mut gv = [T::ZERO; GW_LANES];
                let rem = g.ow - j;
                std::ptr::copy_nonoverlapping(gr.add(j), gv.as_mut_ptr(), rem);
                for t in 0..G {
                    let s = xr.offset(offs[t] + j as isize);
                    for l in 0..GW_LANES {
                        let v = gv[l] * *s.add(l);
                        acc[t][l] += if l < rem { v } else { T::ZERO };
                    }
                }
            }
        }
        for t in 0..G {
            let a = &acc[t];
            let mut h = [T::ZERO; 8];
            for l in 0..8 {
                h[l] = a[l] + a[l + 8];
            }
            *dst.add(k0 + t) = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
        }
    }
}

impl<T: Real> Planes for GradWeight<'_, T> {
    type T = T;
    fn scratch(&self) -> usize {
        self.layout.len()
    }
    #[inline(always)]
    unsafe fn run<const L: usize, const NB: usize>(&self, p0: usize, p1: usize, buf: &mut [T]) {
        let (g, lay) = (self.g, &self.layout);
        let kp = g.kp();
        {
            for plane in p0..p1 {
                let (n, c) = (plane / g.c, plane % g.c);
                lay.fill(self.x.at(plane * g.hw()), buf);
                let grad = self.grad.at(plane * g.p()) as *const T;
                let dst = self.partial.at((c * g.n + n) * kp);
                for ki in 0..g.kh {
                    let mut kj = 0;
                    while kj < g.kw {
                        let k0 = ki * g.kw + kj;
                        let xp = buf.as_ptr();
                        match (g.kw - kj).min(4) {
                            4 => self.taps::<4>(ki, k0, grad, xp, dst),
                            3 => self.taps::<3>(ki, k0, grad, xp, dst),
                            2 => self.taps::<2>(ki, k0, grad, xp, dst),
                            _ => self.taps::<1>(ki, k0, grad, xp, dst),
                        }
                        kj += 4;
                    }
                }
            }
        }
    }
}

pub(super) fn forward<T: Real>(g: &Conv2d, out: P<T>, x: P<T>, w: P<T>, bias: Option<P<T>>) {
    if blocked::preferred(g) {
        return blocked::forward(g, out, x, w, bias);
    }
    let k = Forward {
        g,
        plan: forward_plan(g),
        out,
        x,
        w,
        bias,
    };
    for_planes(&k, g.n * g.c);
}

pub(super) fn grad_input<T: Real>(g: &Conv2d, gi: P<T>, grad: P<T>, w: P<T>) {
    if blocked::preferred(g) {
        return blocked::grad_input(g, gi, grad, w);
    }
    let k = GradInput {
        g,
        plan: grad_input_plan(g),
        gi,
        grad,
        w,
    };
    for_planes(&k, g.n * g.c);
}

/// `gw` (C x KH x KW) = the weight gradient; `gw` need not be zeroed.
pub(super) fn grad_weight<T: Real>(g: &Conv2d, gw: P<T>, grad: P<T>, x: P<T>) {
    let kp = g.kp();
    let mut partial = vec![T::ZERO; g.c * g.n * kp];
    let pp = P(partial.as_mut_ptr());
    if blocked::preferred(g) {
        blocked::grad_weight_partials(g, pp, grad, x);
    } else {
        grad_weight_partials(g, pp, grad, x);
    }
    parallel::for_range(g.c, 16, |c| {
        for t in 0..kp {
            let mut s = T::ZERO;
            for n in 0..g.n {
                s += partial[(c * g.n + n) * kp + t];
            }
            // SAFETY: index `c` writes row `c` of gw only.
            unsafe { *gw.at(c * kp + t) = s };
        }
    });
}

/// Output rows whose input row for kernel row `ki` exists: `lo..hi`.
fn rows_for(g: &Conv2d, ki: usize) -> (usize, usize) {
    let off = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
    let sh = g.stride[0] as isize;
    // Output rows with 0 <= oh*sh + off < h.
    let lo = if off >= 0 { 0 } else { (-off + sh - 1) / sh };
    let hi = if off >= g.h as isize {
        0
    } else {
        (g.h as isize - 1 - off) / sh + 1
    };
    let lo = (lo as usize).min(g.oh);
    (lo, (hi as usize).clamp(lo, g.oh))
}

/// Fills `partial` (`C x N x KH*KW`, per channel and sample) with the row kernels.
fn grad_weight_partials<T: Real>(g: &Conv2d, partial: P<T>, grad: P<T>, x: P<T>) {
    let kp = g.kp();
    let layout = forward_plan(g).layout;
    let rows = (0..g.kh).map(|ki| rows_for(g, ki)).collect();
    let offs = (0..kp)
        .map(|k| {
            let (ki, kj) = (k / g.kw, k % g.kw);
            let (q, base) = phase(kj, g.stride[1], g.padding[1], g.dilation[1]);
            let ih0 = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
            ((q * g.h) as isize + ih0) * layout.rw as isize + layout.pl as isize + base
        })
        .collect();
    let k = GradWeight {
        g,
        layout,
        rows,
        offs,
        grad,
        x,
        partial,
    };
    for_planes(&k, g.n * g.c);
}
