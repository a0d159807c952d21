//! 2-d convolution (cross-correlation), forward and backward, float32 and
//! float64, on contiguous NCHW tensors.
//!
//! - General case: blocked implicit GEMM. Output positions are cut into
//!   tiles; one task packs the input windows of one tile (a bounded
//!   `C/G * KH * KW x T` im2col tile in a per-thread buffer, never the full
//!   column matrix) and multiplies it with the gemm crate.
//! - float32 on AVX-512 (igemm.rs): the same implicit GEMM on foo's own
//!   `12 x 32` register tile, the weight packed once per call, im2col
//!   micro-panels gathered through per-tap offset tables, columns running
//!   across samples (a 7 x 7 layer fills whole panels); over wide rows, any
//!   stride, the product reads im2col rows in place as runs of zero-padded,
//!   phase-split plane copies instead, with no B packing
//!   (`forward_padded`); the input gradient likewise (`W^T` packed once,
//!   col2im as below). The weight gradient stays on the gemm crate: through
//!   this kernel it measured no faster and needed shorter k blocks to stay
//!   as accurate as CPU.
//! - float32 3 x 3, stride 1, ungrouped, at least 32 channels in and out
//!   and 64 output tiles (resnet's 3 x 3 layers; their input gradient too,
//!   which is such a convolution): Winograd's F(2x2, 3x3) (winograd.rs),
//!   16 products over the channels per 2 x 2 output tile instead of 36
//!   multiply-adds, on the same micro-kernel. At stride 2 (the downsampling
//!   layers) the same with 25 products per tile (the kernel split into its
//!   stride phases, F(2, 2) on the even taps), forward and, for padding 1,
//!   input gradient (4 x 4 tiles of it), where the tiles do not overhang the
//!   output much.
//! - float32 with 1-4 input channels (an image model's first layer):
//!   direct.rs, 16 output channels in registers per 16 output columns over
//!   phase-split copies of the input rows, no im2col at all.
//! - 1x1, stride 1, no padding: plain GEMMs on the input itself, no packing.
//! - Depthwise (one input and one output channel per group): direct SIMD
//!   loops with 16 channels in the lanes, over a blocked, zero-padded copy
//!   of one sample's 16 planes (depthwise/blocked.rs); on planes larger
//!   than about 125 x 125, along rows of zero-padded, phase-split copies of
//!   each plane (depthwise.rs).
//!
//! Gradients: w.r.t. the input, for stride 1 on AVX-512 a forward
//! convolution of the output gradient with the weight transposed and flipped
//! (`transposed`), otherwise `W^T @ grad` per tile of positions and a
//! col2im accumulation, tasks over (sample, group, channel block) so that
//! they write disjoint planes; w.r.t. the weight, tasks over blocks of the
//! `C/G * KH * KW` columns of the weight (each packs only its own rows of
//! the im2col tile) accumulating over samples and tiles in a fixed order;
//! w.r.t. the bias, a sum per output channel.
//!
//! Determinism: every accumulation order depends on the shapes only, never
//! on the thread count (the AVX-512 forward sizes its task grid by the
//! thread count, but each output sums `k` in the same blocks in any task).

// Loops over rows and lanes index on purpose.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

mod depthwise;
mod direct;
pub(crate) mod dots;
pub mod fold;
pub(crate) mod igemm;
mod winograd;

use super::parallel;
use super::{KernelError, Strided};
use crate::dtype::DType;
use std::cell::RefCell;

/// Geometry of a 2-d convolution `out[N, OC, OH, OW] = x[N, C, H, W] * w[OC, C/G, KH, KW]`.
#[derive(Clone, Copy, Debug)]
pub struct Conv2d {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Conv2d {
    fn cg(&self) -> usize {
        self.c / self.groups
    }
    fn ocg(&self) -> usize {
        self.oc / self.groups
    }
    fn kp(&self) -> usize {
        self.kh * self.kw
    }
    fn ck(&self) -> usize {
        self.cg() * self.kp()
    }
    fn p(&self) -> usize {
        self.oh * self.ow
    }
    fn hw(&self) -> usize {
        self.h * self.w
    }
    fn pointwise(&self) -> bool {
        self.kh == 1
            && self.kw == 1
            && self.stride == [1, 1]
            && self.padding == [0, 0]
            && self.oh == self.h
            && self.ow == self.w
    }
    fn depthwise(&self) -> bool {
        self.cg() == 1 && self.ocg() == 1
    }
    /// Positions per im2col tile with `rows` rows (bounded to ~L2 size).
    fn tile(&self, rows: usize) -> usize {
        const BUDGET: usize = 48 * 1024;
        let t = (BUDGET / rows.max(1)).max(64);
        let t = t.div_ceil(16) * 16;
        t.min(self.p()).max(1)
    }
    /// Output columns `ow` of row offset `off` (input column `ow*s + off`)
    /// that fall inside the input: `lo..hi`.
    fn valid_cols(&self, off: isize) -> (usize, usize) {
        let s = self.stride[1] as isize;
        let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
        let hi = if (self.w as isize) <= off {
            0
        } else {
            (self.w as isize - 1 - off) / s + 1
        };
        let lo = (lo as usize).min(self.ow);
        let hi = (hi as usize).min(self.ow).max(lo);
        (lo, hi)
    }
}

/// The float types the kernels compute in.
pub trait Real:
    'static
    + Copy
    + Send
    + Sync
    + Default
    + PartialEq
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::AddAssign
{
    const ZERO: Self;
    const ONE: Self;
    /// `self * a + b`; rounded once for f32 and f64 (an FMA instruction
    /// where the calling function's target features have one, correctly
    /// rounded everywhere), twice for the half types.
    #[inline(always)]
    fn fma(self, a: Self, b: Self) -> Self {
        self * a + b
    }
}
impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    #[inline(always)]
    fn fma(self, a: f32, b: f32) -> f32 {
        self.mul_add(a, b)
    }
}
impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    #[inline(always)]
    fn fma(self, a: f64, b: f64) -> f64 {
        self.mul_add(a, b)
    }
}

#[derive(Clone, Copy)]
struct P<T>(*mut T);
// SAFETY: tasks write disjoint elements through it (see each use).
unsafe impl<T> Send for P<T> {}
unsafe impl<T> Sync for P<T> {}
impl<T> P<T> {
    #[inline(always)]
    fn at(self, i: usize) -> *mut T {
        // SAFETY: callers stay inside the tensor they got the pointer of.
        unsafe { self.0.add(i) }
    }
}

thread_local! {
    /// Per-thread packing buffer (8-byte words, reused across calls).
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn with_scratch<T: Real, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let words = (len * std::mem::size_of::<T>()).div_ceil(8);
        if s.len() < words {
            s.resize(words, 0);
        }
        // SAFETY: the buffer holds at least `len` T (8-byte aligned, T is f32 or f64).
        let buf = unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut T, len) };
        f(buf)
    })
}

/// A 1x1 convolution of 1x1 maps (the "linear layers" of squeeze-and-
/// excitation blocks): each pass is one product per group over the whole
/// batch (`N x C` by `C x OC`), not one matrix-vector product per sample.
fn per_batch(g: &Conv2d) -> bool {
    g.pointwise() && g.hw() == 1
}

/// The three passes of a [`per_batch`] convolution, one product per group:
/// `out = x @ w^T (+ bias)`, `gi = grad @ w`, `gw = grad^T @ x`
/// (`x: N x C`, `w: OC x C/G`, `grad: N x OC`).
unsafe fn per_batch_product<T: Real>(g: &Conv2d, pass: Pass, dst: P<T>, a: P<T>, b: P<T>) {
    let (n, c, oc, cg, ocg) = (g.n, g.c, g.oc, g.cg(), g.ocg());
    let par = n * ocg * cg >= (1 << 22);
    for grp in 0..g.groups {
        let w = |m: P<T>| m.at(grp * ocg * cg);
        let (xo, go) = (grp * cg, grp * ocg);
        match pass {
            // dst = out, a = x, b = w
            Pass::Forward => gemm(
                n,
                ocg,
                cg,
                dst.at(go),
                oc as isize,
                1,
                false,
                a.at(xo),
                c as isize,
                1,
                w(b),
                1,
                cg as isize,
                par,
            ),
            // dst = gi, a = grad, b = w
            Pass::Input => gemm(
                n,
                cg,
                ocg,
                dst.at(xo),
                c as isize,
                1,
                false,
                a.at(go),
                oc as isize,
                1,
                w(b),
                cg as isize,
                1,
                par,
            ),
            // dst = gw, a = grad, b = x
            Pass::Weight => gemm(
                ocg,
                cg,
                n,
                w(dst),
                cg as isize,
                1,
                false,
                a.at(go),
                1,
                oc as isize,
                b.at(xo),
                c as isize,
                1,
                par,
            ),
        }
    }
}

#[derive(Clone, Copy)]
enum Pass {
    Forward,
    Input,
    Weight,
}

/// dst = (read ? dst : 0) + lhs @ rhs (gemm crate), strides in elements.
unsafe fn gemm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    drs: isize,
    dcs: isize,
    read: bool,
    lhs: *const T,
    lrs: isize,
    lcs: isize,
    rhs: *const T,
    rrs: isize,
    rcs: isize,
    par: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if par {
        // Output blocks on foo's pool, as linalg's products split (one
        // single-threaded product per block, the same sums).
        let split = crate::kernels::linalg::for_output_blocks(
            m,
            n,
            (dst, drs, dcs),
            (lhs, lrs),
            (rhs, rrs, rcs),
            |b| {
                // SAFETY: a block of the caller's matrices; blocks write
                // disjoint parts of dst.
                unsafe {
                    gemm(
                        b.m, b.n, k, b.dst, drs, dcs, read, b.lhs, lrs, lcs, b.rhs, rrs, rcs, false,
                    )
                }
            },
        );
        if split {
            return;
        }
    }
    // The gemm crate sums all of `k` in one register chain per output; a
    // long chain in f32 drifts further from the exact sum than CPU's oneDNN
    // (mean error 5.4e-6 against 4.6e-6 at k = 576). Blocks of KC along k,
    // each added to `dst`, bring it below CPU's (3.8e-6 at k = 576, 1.2e-5
    // against 1.4e-5 at k = 4608) for one extra pass over the output tile
    // per block, 1 load and store per 128 multiply-adds.
    const KC: usize = 128;
    let mut k0 = 0;
    loop {
        let kb = KC.min(k - k0);
        // gemm's convention: dst := alpha * dst + beta * lhs @ rhs.
        gemm::gemm(
            m,
            n,
            kb,
            dst,
            dcs,
            drs,
            read || k0 > 0,
            lhs.offset(k0 as isize * lcs),
            lcs,
            lrs,
            rhs.offset(k0 as isize * rrs),
            rcs,
            rrs,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
        k0 += kb;
        if k0 >= k {
            break;
        }
    }
}

/// Packs rows `r0..r1` (row = (c, kh, kw) within the group) of the im2col
/// tile of positions `p0..p0+t` of one sample-group's input planes `x`
/// (`cg` planes of H x W) into `dst` (`(r1-r0) x t`, row-major).
unsafe fn pack<T: Real>(
    g: &Conv2d,
    x: *const T,
    r0: usize,
    r1: usize,
    p0: usize,
    t: usize,
    dst: &mut [T],
) {
    let kp = g.kp();
    let (sh, sw) = (g.stride[0] as isize, g.stride[1]);
    for r in r0..r1 {
        let (c, k) = (r / kp, r % kp);
        let (ki, kj) = (k / g.kw, k % g.kw);
        let plane = x.add(c * g.hw());
        let row_dst = &mut dst[(r - r0) * t..(r - r0 + 1) * t];
        let hoff = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
        let woff = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
        let (lo, hi) = g.valid_cols(woff);
        let mut p = p0;
        let end = p0 + t;
        while p < end {
            let oh = p / g.ow;
            let ow0 = p % g.ow;
            let ow1 = (ow0 + (end - p)).min(g.ow);
            let d = &mut row_dst[p - p0..p - p0 + (ow1 - ow0)];
            let ih = oh as isize * sh + hoff;
            if ih < 0 || ih >= g.h as isize {
                d.fill(T::ZERO);
            } else {
                let src = plane.add(ih as usize * g.w);
                let a = lo.clamp(ow0, ow1);
                let b = hi.clamp(a, ow1);
                d[..a - ow0].fill(T::ZERO);
                d[b - ow0..].fill(T::ZERO);
                let start = (a as isize * sw as isize + woff) as usize;
                if sw == 1 {
                    let s = std::slice::from_raw_parts(src.add(start), b - a);
                    d[a - ow0..b - ow0].copy_from_slice(s);
                } else {
                    for (i, v) in d[a - ow0..b - ow0].iter_mut().enumerate() {
                        *v = *src.add(start + i * sw);
                    }
                }
            }
            p += ow1 - ow0;
        }
    }
}

/// Adds rows `r0..r1` of a column-gradient tile `src` (`(r1-r0) x t`,
/// positions `p0..p0+t`, rows `ld` apart) into the input-gradient planes
/// `gi` (col2im).
unsafe fn unpack_add<T: Real>(
    g: &Conv2d,
    gi: *mut T,
    r0: usize,
    r1: usize,
    p0: usize,
    t: usize,
    ld: usize,
    src: &[T],
) {
    let kp = g.kp();
    let (sh, sw) = (g.stride[0] as isize, g.stride[1]);
    for r in r0..r1 {
        let (c, k) = (r / kp, r % kp);
        let (ki, kj) = (k / g.kw, k % g.kw);
        let plane = gi.add(c * g.hw());
        let row = &src[(r - r0) * ld..][..t];
        let hoff = (ki * g.dilation[0]) as isize - g.padding[0] as isize;
        let woff = (kj * g.dilation[1]) as isize - g.padding[1] as isize;
        let (lo, hi) = g.valid_cols(woff);
        let mut p = p0;
        let end = p0 + t;
        while p < end {
            let oh = p / g.ow;
            let ow0 = p % g.ow;
            let ow1 = (ow0 + (end - p)).min(g.ow);
            let ih = oh as isize * sh + hoff;
            if ih >= 0 && ih < g.h as isize {
                let dst = plane.add(ih as usize * g.w);
                let a = lo.clamp(ow0, ow1);
                let b = hi.clamp(a, ow1);
                let start = (a as isize * sw as isize + woff) as usize;
                let s = &row[p - p0 + (a - ow0)..p - p0 + (b - ow0)];
                if sw == 1 {
                    let d = std::slice::from_raw_parts_mut(dst.add(start), b - a);
                    for (o, &v) in d.iter_mut().zip(s) {
                        *o += v;
                    }
                } else {
                    for (i, &v) in s.iter().enumerate() {
                        *dst.add(start + i * sw) += v;
                    }
                }
            }
            p += ow1 - ow0;
        }
    }
}

fn err(msg: String) -> KernelError {
    KernelError::InvalidArgument(msg)
}

fn check(t: &Strided, name: &str, sizes: &[usize], dtype: DType) -> Result<(), KernelError> {
    if t.sizes[..] != *sizes {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: conv2d expected {name} of size {sizes:?}, got {:?}",
            t.sizes
        )));
    }
    if t.dtype != dtype {
        return Err(err(format!(
            "foo: conv2d expected {name} of dtype {}, got {}",
            dtype.name(),
            t.dtype.name()
        )));
    }
    let mut expect = 1isize;
    for (&s, &st) in t.sizes.iter().zip(&t.strides).rev() {
        if s != 1 && st != expect {
            return Err(err(format!(
                "foo: conv2d expects a contiguous {name} (strides {:?})",
                t.strides
            )));
        }
        expect *= s as isize;
    }
    Ok(())
}

/// The geometry from the input and weight shapes (and the given output spatial size).
pub fn geometry(
    x: &[usize],
    w: &[usize],
    out_hw: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Conv2d, KernelError> {
    if x.len() != 4 || w.len() != 4 {
        return Err(err("foo: conv2d expects 4-d input and weight".into()));
    }
    if groups == 0 || stride.contains(&0) || dilation.contains(&0) {
        return Err(err(
            "foo: conv2d expects positive groups, stride and dilation".into(),
        ));
    }
    let g = Conv2d {
        n: x[0],
        c: x[1],
        h: x[2],
        w: x[3],
        oc: w[0],
        kh: w[2],
        kw: w[3],
        oh: out_hw[0],
        ow: out_hw[1],
        stride,
        padding,
        dilation,
        groups,
    };
    if !g.c.is_multiple_of(groups) || !g.oc.is_multiple_of(groups) || w[1] != g.c / groups {
        return Err(err(format!(
            "foo: conv2d weight {w:?} does not fit input {x:?} with groups={groups}"
        )));
    }
    for d in 0..2 {
        let (i, k, o) = [(g.h, g.kh, g.oh), (g.w, g.kw, g.ow)][d];
        let span = dilation[d] * (k.max(1) - 1) + 1;
        let full = i + 2 * padding[d];
        let expect = if full >= span {
            (full - span) / stride[d] + 1
        } else {
            0
        };
        // A transposed convolution's output padding can leave trailing input
        // rows that no window reaches, so fewer outputs than fit are fine.
        if o > expect {
            return Err(err(format!(
                "foo: conv2d output size {o} does not match input {i}, kernel {k}, stride {}, padding {}, dilation {}",
                stride[d], padding[d], dilation[d]
            )));
        }
    }
    Ok(g)
}

/// `out = conv2d(x, w) + bias`.
pub fn forward(
    g: &Conv2d,
    out: &Strided,
    x: &Strided,
    w: &Strided,
    bias: Option<&Strided>,
) -> Result<(), KernelError> {
    let dt = x.dtype;
    check(x, "input", &[g.n, g.c, g.h, g.w], dt)?;
    check(w, "weight", &[g.oc, g.cg(), g.kh, g.kw], dt)?;
    check(out, "output", &[g.n, g.oc, g.oh, g.ow], dt)?;
    if let Some(b) = bias {
        check(b, "bias", &[g.oc], dt)?;
    }
    match dt {
        DType::F32 => forward_t::<f32>(g, out.ptr, x.ptr, w.ptr, bias.map(|b| b.ptr)),
        DType::F64 => forward_t::<f64>(g, out.ptr, x.ptr, w.ptr, bias.map(|b| b.ptr)),
        _ => {
            return Err(KernelError::UnsupportedDtype {
                op: "conv2d",
                dtype: dt,
            })
        }
    }
    Ok(())
}

fn forward_t<T: Real>(g: &Conv2d, out: *mut u8, x: *mut u8, w: *mut u8, bias: Option<*mut u8>) {
    let (out, x, w) = (P(out as *mut T), P(x as *mut T), P(w as *mut T));
    let bias = bias.map(|b| P(b as *mut T));
    let (p, hw, cg, ocg, ck) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck());
    if g.n * g.oc * p == 0 {
        return;
    }
    if g.depthwise() {
        depthwise::forward(g, out, x, w, bias);
        return;
    }
    if per_batch(g) {
        // SAFETY: out, x and w hold the shapes g describes.
        unsafe { per_batch_product(g, Pass::Forward, out, x, w) };
        if let Some(b) = bias {
            add_bias(g, out, b);
        }
        return;
    }
    if is_f32::<T>() && direct::applies(g) {
        direct::forward(
            g,
            out.0 as *mut f32,
            x.0 as *const f32,
            w.0 as *const f32,
            bias.map(|b| b.0 as *const f32),
        );
        return;
    }
    if is_f32::<T>()
        && (!g.pointwise() || pointwise_igemm(g))
        && ck > 0
        && g.n * g.c * hw < i32::MAX as usize
        && igemm::available()
    {
        forward_igemm(
            g,
            out.0 as *mut f32,
            x.0 as *const f32,
            Weight::Given(w.0 as *const f32),
        );
        if let Some(b) = bias {
            add_bias(g, out, b);
        }
        return;
    }
    let t = g.tile(ck);
    let ntiles = p.div_ceil(t);
    let ntasks = g.n * g.groups * ntiles;
    let par = ntasks < parallel::num_threads() && ocg * ck * p >= (1 << 22);
    parallel::parallel_for(ntasks, |task| {
        let tile = task % ntiles;
        let ng = task / ntiles;
        let (n, grp) = (ng / g.groups, ng % g.groups);
        let p0 = tile * t;
        let tt = t.min(p - p0);
        let dst = out.at((n * g.oc + grp * ocg) * p + p0);
        let xg = x.at((n * g.c + grp * cg) * hw);
        let wg = w.at(grp * ocg * ck);
        // SAFETY: each task writes the output columns p0..p0+tt of its
        // (sample, group) rows only.
        unsafe {
            if ck == 0 {
                for o in 0..ocg {
                    std::slice::from_raw_parts_mut(dst.add(o * p), tt).fill(T::ZERO);
                }
            } else if g.pointwise() {
                gemm(
                    ocg,
                    tt,
                    ck,
                    dst,
                    p as isize,
                    1,
                    false,
                    wg,
                    ck as isize,
                    1,
                    xg.add(p0),
                    hw as isize,
                    1,
                    par,
                );
            } else {
                with_scratch::<T, _>(ck * tt, |buf| {
                    pack(g, xg, 0, ck, p0, tt, buf);
                    gemm(
                        ocg,
                        tt,
                        ck,
                        dst,
                        p as isize,
                        1,
                        false,
                        wg,
                        ck as isize,
                        1,
                        buf.as_ptr(),
                        tt as isize,
                        1,
                        par,
                    );
                });
            }
            if let Some(b) = bias {
                for o in 0..ocg {
                    let bv = *b.at(grp * ocg + o);
                    for v in std::slice::from_raw_parts_mut(dst.add(o * p), tt) {
                        *v += bv;
                    }
                }
            }
        }
    });
}

/// Whether a float32 1 x 1 layer takes [`forward_igemm`] (its forward, and
/// through [`transposed`] its input gradient): maps of at most 14 x 14 and
/// at least 2^14 products of a group's channels, where the weight packed
/// once and micro-panels of columns spanning samples beat one gemm-crate
/// product per sample. Alternating both in one process (batch 8, one
/// thread, Sapphire Rapids), igemm's time as a fraction of the crate's,
/// forward / input gradient: 288 -> 96 at 7 x 7 0.85 / 0.99, 96 -> 576
/// 0.96 / 0.90, 576 -> 96 0.85 / 1.02, 512 -> 2048 0.84 / 0.86, 2048 ->
/// 512 0.80 / 0.87, 256 -> 512 at 14 x 14 0.96 / 0.91; left out, fewer
/// channels at 14 x 14 (48 -> 288 1.22 / 0.81, 40 -> 240 1.18 / 0.84) and
/// larger maps (64 -> 256 at 56 x 56 1.76 / 1.51, 24 -> 96 at 28 x 28
/// 1.31 / 1.38), where the crate's product runs at about 100 GFLOP/s.
/// AVX-512 only: not measured on AVX2.
fn pointwise_igemm(g: &Conv2d) -> bool {
    g.pointwise() && g.hw() <= 14 * 14 && g.cg() * g.ocg() >= 1 << 14 && igemm::wide()
}

fn is_f32<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
}

/// The AVX-512 forward's task grid for one group: `(columns per tile,
/// tiles, rows per block, row blocks)`. Columns are the group's output
/// positions of all samples in order (`n * P`), so small images still fill
/// whole micro-panels. A tile is whole micro-panels, at most
/// [`IGEMM_TILE`] columns (its packed B block, `KC x IGEMM_TILE` floats,
/// stays within L2), sized for about four tasks per thread (a short last
/// tile evens the pool out). Too few tiles split the output channels into
/// blocks of at least 128: each block packs the same B again, and packing
/// costs about one FMA cycle per element against `rows / 16` for the product.
fn igemm_grid(g: &Conv2d) -> (usize, usize, usize, usize) {
    use igemm::NR;
    let cols = g.n * g.p();
    let want = (4 * parallel::num_threads()).div_ceil(g.groups);
    let panels = cols.div_ceil(NR);
    let per_tile = (panels / want).clamp(2.min(panels), IGEMM_TILE / NR);
    let t = per_tile * NR;
    let tiles = cols.div_ceil(t);
    let ocg = g.ocg();
    let blocks = if tiles >= want {
        1
    } else {
        want.div_ceil(tiles).min(ocg / 128).max(1)
    };
    let rb = ocg.div_ceil(blocks).div_ceil(igemm::MR) * igemm::MR;
    (t, tiles, rb, ocg.div_ceil(rb))
}

/// Most columns in one task of the AVX-512 path.
const IGEMM_TILE: usize = 256;

/// Where [`forward_igemm`] reads its weight from.
#[derive(Clone, Copy)]
enum Weight {
    /// `[OC, C/G, KH, KW]`, as the convolution's.
    Given(*const f32),
    /// The weight of the convolution whose input gradient this one is
    /// ([`transposed`]): this convolution's `(o, c, tap)` element is that
    /// weight's `(c, o, taps - 1 - tap)` in its group, read as it is (no
    /// transposed copy: building one cost about 3 ms a call at 512 channels,
    /// more than the product at 2 x 2).
    Transposed(*const f32),
}

/// The forward product through [`igemm`]: 3 x 3 stride-1 layers by
/// [`winograd`] where it [`winograd::applies`]; otherwise the weight packed
/// once, then [`forward_padded`] (wide rows, any stride; see
/// [`padded_rows`]) or [`forward_gathered`].
fn forward_igemm(g: &Conv2d, out: *mut f32, x: *const f32, weight: Weight) {
    if winograd::applies(g) {
        winograd::forward(g, out, x, weight);
        return;
    }
    let (out, x) = (P(out), P(x as *mut f32));
    if g.n * g.p() <= FEW_COLS {
        forward_few_cols(g, out, x, weight);
        return;
    }
    let (ocg, ck, kp) = (g.ocg(), g.ck(), g.kp());
    let per_group = igemm::packed_len(ocg, ck);
    WEIGHTS.with(|wp| {
        let mut wp = wp.borrow_mut();
        if wp.len() < g.groups * per_group {
            wp.resize(g.groups * per_group, 0.0);
        }
        for grp in 0..g.groups {
            let dst = &mut wp[grp * per_group..];
            match weight {
                // SAFETY: the group's weight rows are ocg x ck, row-major.
                Weight::Given(w) => unsafe {
                    igemm::pack_a_all(w.add(grp * ocg * ck), ck as isize, 1, ocg, ck, dst)
                },
                // SAFETY: the other convolution's weight is [C, OC/G, KH,
                // KW] in this one's terms (g.c = its output channels):
                // column k = (o, tap) of row i is its element (grp * cg + o,
                // i, taps - 1 - tap).
                Weight::Transposed(w) => unsafe {
                    let w = w.add(grp * g.cg() * ocg * kp);
                    let col = |k: usize| flipped_col(k, kp, ocg);
                    igemm::pack_a_all_with(
                        w,
                        |i| (i * kp) as isize,
                        col,
                        ocg,
                        ck,
                        igemm::Walk::AlongRows,
                        dst,
                    )
                },
            }
        }
        let wpp = P(wp.as_mut_ptr());
        if !g.pointwise() && padded_rows(g) {
            forward_padded(g, out, x, wpp, per_group);
        } else {
            forward_gathered(g, out, x, wpp, per_group);
        }
        release_if_large(&mut wp);
    });
}

/// Column `k = (o, tap)` of a [`Weight::Transposed`] group's A (rows `kp`
/// elements apart, from the group's first element): the other
/// convolution's element `(o, row, kp - 1 - tap)`, its `ocg` rows of `kp`
/// taps per `o`. The rule both readers of a transposed weight share (packed
/// by [`forward_igemm`], read in place by [`forward_few_cols`]).
fn flipped_col(k: usize, kp: usize, ocg: usize) -> isize {
    let (o, tap) = (k / kp, k % kp);
    ((o * ocg + 1) * kp - 1 - tap) as isize
}

/// Most columns (output positions of all samples) for [`forward_few_cols`]:
/// two micro-panels. Measured on resnet18's 3 x 3 layers (1 thread): at 16
/// columns (512 channels at 2 x 2, batch 4) packing the weight cost as much
/// as the product; at 64 (256 at 4 x 4) a third of it.
const FEW_COLS: usize = 2 * igemm::NR;

/// [`forward_igemm`] for products with at most [`FEW_COLS`] columns: the
/// weight read in place ([`igemm::InPlace`]: each element meets B's one or
/// two vectors once, so packing it would only add a pass over it), the
/// im2col matrix packed whole once ([`igemm::PrePacked`], at most 64 floats
/// a row), and tasks over (group, block of [`FEW_ROWS`] output channels).
/// Each output's sum runs over `k` in blocks of [`igemm::KC`] as in the
/// other paths, in one task: the same bits for any thread count.
fn forward_few_cols(g: &Conv2d, out: P<f32>, x: P<f32>, weight: Weight) {
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let cols = g.n * p;
    let per_group = igemm::PrePacked::len(ck, cols);
    // Row i, column k of the group's A at base + i * rs + tab[k]: the weight
    // as given ([OC, C/G, KH, KW]), or the weight of the convolution whose
    // input gradient this is ([C, OC/G, KH, KW] in this one's terms), read
    // transposed and flipped as in `Weight::Transposed`.
    // Groups are `per_w` elements apart.
    let (w, per_w, rs, tab): (*const f32, usize, usize, Vec<isize>) = match weight {
        Weight::Given(w) => (w, ocg * ck, ck, (0..ck as isize).collect()),
        Weight::Transposed(w) => {
            let tab = (0..ck).map(|k| flipped_col(k, kp, ocg));
            (w, cg * ocg * kp, kp, tab.collect())
        }
    };
    let w = P(w as *mut f32);
    WEIGHTS.with(|bp| {
        let mut bp = bp.borrow_mut();
        if bp.len() < g.groups * per_group {
            bp.resize(g.groups * per_group, 0.0);
        }
        // SAFETY: the group's input planes of every sample.
        let pack = |grp, k0, kc, j0, nr, dst: &mut [f32]| unsafe {
            pack_cols(g, x.at(grp * cg * hw), k0, kc, j0, nr, dst)
        };
        igemm::PrePacked::pack_all(&mut bp, g.groups, ck, cols, pack);
        let bpp = P(bp.as_mut_ptr());
        let blocks = ocg.div_ceil(FEW_ROWS);
        parallel::parallel_for(g.groups * blocks, |task| {
            let (grp, blk) = (task / blocks, task % blocks);
            let (r0, rows) = (blk * FEW_ROWS, FEW_ROWS.min(ocg - blk * FEW_ROWS));
            let a = igemm::InPlace {
                ptr: w.at(grp * per_w + r0 * rs),
                rs,
                cols: &tab,
            };
            let b = igemm::PrePacked {
                base: bpp.at(grp * per_group),
                k: ck,
            };
            // SAFETY: the task writes output rows r0..r0+rows of its group
            // (through a scratch tile when the columns span samples); A's
            // elements are the group's weight, B the block packed above.
            unsafe {
                if g.n == 1 {
                    let c = out.at((grp * ocg + r0) * p);
                    igemm::gemm(rows, cols, ck, a, b, c, p, false);
                    return;
                }
                with_scratch::<f32, _>(rows * cols, |buf| {
                    igemm::gemm(rows, cols, ck, a, b, buf.as_mut_ptr(), cols, false);
                    for (j, n) in (0..cols).step_by(p).zip(0..) {
                        for i in 0..rows {
                            let dst = out.at((n * g.oc + grp * ocg + r0 + i) * p);
                            std::ptr::copy_nonoverlapping(buf.as_ptr().add(i * cols + j), dst, p);
                        }
                    }
                });
            }
        });
        release_if_large(&mut bp);
    });
}

/// Output channels per task of [`forward_few_cols`]: four micro-tiles (its
/// B, at most 64 columns, stays in L1 while they pass).
const FEW_ROWS: usize = 4 * igemm::MR;

/// [`forward_igemm`]'s general case: tasks over (group, row block, column
/// tile) of [`igemm_grid`]; each gathers its im2col block `KC` rows at a
/// time into micro-panels ([`pack_cols`]) and multiplies it with its rows
/// of the group's packed weight. A tile inside one sample writes the output
/// directly; one across samples goes through a scratch tile.
fn forward_gathered(g: &Conv2d, out: P<f32>, x: P<f32>, wp: P<f32>, per_group: usize) {
    let (p, hw, cg, ocg, ck) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck());
    let (t, tiles, rb, blocks) = igemm_grid(g);
    let cols = g.n * p;
    parallel::parallel_for(g.groups * blocks * tiles, |task| {
        let (grp, rest) = (task / (blocks * tiles), task % (blocks * tiles));
        let (blk, tile) = (rest / tiles, rest % tiles);
        let (r0, q0) = (blk * rb, tile * t);
        let (rows, tt) = (rb.min(ocg - r0), t.min(cols - q0));
        let a = igemm::A {
            ptr: wp.at(grp * per_group),
            rows: ocg,
            first: r0,
        };
        let xg = x.at(grp * cg * hw) as *const f32;
        // SAFETY: the group's input planes of every sample.
        let pack_b = |k0: usize, kc: usize, j0: usize, nr: usize, dst: &mut [f32]| unsafe {
            pack_cols(g, xg, k0, kc, q0 + j0, nr, dst)
        };
        let (n0, pos0) = (q0 / p, q0 % p);
        // SAFETY: each task writes the output rows r0..r0+rows of its
        // group at its columns only.
        unsafe {
            if pos0 + tt <= p {
                let c = out.at((n0 * g.oc + grp * ocg + r0) * p + pos0);
                igemm::gemm(rows, tt, ck, a, igemm::Packed(pack_b), c, p, false);
            } else {
                with_scratch::<f32, _>(rows * tt, |buf| {
                    igemm::gemm(
                        rows,
                        tt,
                        ck,
                        a,
                        igemm::Packed(&pack_b),
                        buf.as_mut_ptr(),
                        tt,
                        false,
                    );
                    let mut j = 0;
                    while j < tt {
                        let (n, pos) = ((q0 + j) / p, (q0 + j) % p);
                        let len = (p - pos).min(tt - j);
                        for i in 0..rows {
                            let dst = out.at((n * g.oc + grp * ocg + r0 + i) * p + pos);
                            std::ptr::copy_nonoverlapping(buf.as_ptr().add(i * tt + j), dst, len);
                        }
                        j += len;
                    }
                });
            }
        }
    });
}

/// The phase-split planes of [`forward_padded`]: a stride-`s` convolution
/// reads, for tap offset `r = k * dilation`, padded row `oh * s + r`, which
/// is row `oh + r / s` of phase `r % s` (the padded rows `r % s, r % s + s,
/// ...`). Split into `s_h * s_w` phase planes, each tap reads one phase
/// plane at a fixed offset, as a stride-1 convolution does: `(rows, cols)`
/// of a phase plane, `ceil(padded / stride)`.
fn phase_dims(g: &Conv2d) -> (usize, usize) {
    let (hp, wp) = (g.h + 2 * g.padding[0], g.w + 2 * g.padding[1]);
    (hp.div_ceil(g.stride[0]), wp.div_ceil(g.stride[1]))
}

/// Whether any of `k` taps `d` apart reads phase `r` of a stride-`s`
/// split (a 1x1 stride-2 layer reads one phase of four).
fn phase_used(r: usize, k: usize, d: usize, s: usize) -> bool {
    (0..k).any(|t| t * d % s == r)
}

/// The column planes of [`forward_padded`]: `(width, first padded column
/// of each plane, shifted)`. Phase planes (not shifted): one per column
/// phase `b < s_w`, `ceil(padded / s_w)` wide, tap column `rw` reading
/// phase `rw % s_w` at `rw / s_w` columns on, so each row computes and drops
/// `width - OW` columns (and the tile goes through a scratch tile).
/// Shifted: one plane per kernel column, exactly `OW` wide, plane `kw`
/// starting at padded column `kw * d_w`: no dropped columns and the product
/// writes the output directly, for `KW / s_w` times the copying and as many
/// more planes for B's rows to come from.
///
/// Shifted when that is at most 1.5 (3 x 3 stride 2). Measured at one
/// thread, batch 8, both layouts alternating in one process (time shifted /
/// phase planes): resnet18's 128 -> 256 at 28 0.95-0.96 (a 14-wide row
/// was 15 computed), mobilenet_v3_small's 3 -> 16 stem 0.92-0.94,
/// resnet18's 64 -> 128 at 56 0.99-1.01; beyond 1.5 mixed: the 7 x 7
/// stride-2 stem 0.98-1.03, 32 -> 64 5 x 5 stride 2 at 64 1.03, 3 x 3
/// stride 1: 16 -> 16 at 56 1.07, 32 -> 16 at 14 1.08, 24 -> 24 at 28 0.95,
/// 3 -> 32 at 64 0.82, 64 -> 64 5 x 5 at 32 0.93.
fn column_planes(g: &Conv2d) -> (usize, Vec<usize>, bool) {
    let shift = g.kw > 1 && 2 * g.kw <= 3 * g.stride[1];
    if shift {
        (g.ow, (0..g.kw).map(|k| k * g.dilation[1]).collect(), true)
    } else {
        (phase_dims(g).1, (0..g.stride[1]).collect(), false)
    }
}

/// Whether the forward takes [`forward_padded`]: when the columns it
/// computes and drops cost less than gathering. Dropped are the columns
/// `ow >= OW` of each row and the rest of each sample's last micro-panels
/// (its tiles do not span samples); at most a quarter. A gathered im2col
/// row costs about the same whatever the layer, the product `OC / G`
/// multiply-adds per element, so the waste may be larger for fewer output
/// channels: at 1 thread a 256-channel 3x3 layer at 14 x 14 ran as fast
/// either way (an eighth wasted, gathers a sixth of the product's time
/// under perf), a 128-channel one at 28 x 28 17% faster padded and a 64 ->
/// 128 stride-2 one 15% faster on phase planes; a 128-channel one at 8 x 8
/// (80 columns per sample in 96, a third dropped) 2.4x CPU's time padded.
/// Resnet's 3x3 layers at 56, 28 and 14, its stride-2 layers and its stem
/// take it; the 512-channel layers at 7 x 7 and small maps gather.
fn padded_rows(g: &Conv2d) -> bool {
    let wq = column_planes(g).0;
    if wq < g.ow || g.oh * wq == 0 {
        return false;
    }
    let (t, tiles) = padded_tiles(g.oh * wq);
    let computed = (tiles - 1) * t + (g.oh * wq - (tiles - 1) * t).next_multiple_of(igemm::NR);
    let dropped = computed - g.oh * g.ow;
    dropped * g.ocg() <= 48 * computed && dropped * 4 <= computed
}

/// [`forward_padded`]'s tiles of one sample's `cols` columns: `(columns
/// per tile, tiles)`.
fn padded_tiles(cols: usize) -> (usize, usize) {
    let t = cols.div_ceil(igemm::NR).clamp(1, IGEMM_TILE / igemm::NR) * igemm::NR;
    (t, cols.div_ceil(t))
}

/// The forward without im2col gathers: each input plane is copied once
/// with its zero padding, split into its stride's phase planes (see
/// [`phase_dims`]; one plane for stride 1), so that for output position
/// `(oh, ow)` numbered `q = oh * Wq + ow` over the phase planes' width
/// `Wq`, tap `(kh, kw)` reads element `q + (kh * dh / sh) * Wq + kw * dw /
/// sw` of its channel's phase plane `(kh * dh % sh, kw * dw % sw)`. An
/// im2col row is then a contiguous run, and a micro-panel's row one copy.
/// (3 x 3 stride-2 layers split the columns into shifted planes instead,
/// `Wq = OW`: see [`column_planes`].)
/// The columns `ow >= OW` of each row are computed and dropped (`(Wq - OW)
/// / Wq` of the work); the tile goes through a scratch tile and its valid
/// columns to the output. Gathering had cost 60% of the product's time on a
/// 64-channel 3x3 layer at 56 x 56 (perf), and the gathers of the 7x7
/// stride-2 stem (147 rows of 3 channels) more than the product.
fn forward_padded(g: &Conv2d, out: P<f32>, x: P<f32>, wp: P<f32>, per_group: usize) {
    use igemm::NR;
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let ([sh, sw], [dh, dw]) = (g.stride, g.dilation);
    let hq = phase_dims(g).0;
    let (wq, firsts, shift) = column_planes(g);
    let ncol = firsts.len();
    let phase = hq * wq;
    // A channel's planes, then slack: reads reach past the last row by up
    // to a kernel column's offset and a micro-panel (dropped columns
    // only). An odd number of cache lines per channel spreads the
    // micro-kernel's rows over L1's sets.
    let plane = (sh * ncol * phase + NR + (g.kw - 1) * dw / sw).div_ceil(32) * 32 + 16;
    // Where im2col row `r` (channel, tap) starts in the sample-group's planes.
    let offs: Vec<isize> = (0..ck)
        .map(|r| {
            let (c, tap) = (r / kp, r % kp);
            let (rh, kw) = ((tap / g.kw) * dh, tap % g.kw);
            let rw = kw * dw;
            let (col, at) = if shift { (kw, 0) } else { (rw % sw, rw / sw) };
            (c * plane + ((rh % sh) * ncol + col) * phase + (rh / sh) * wq + at) as isize
        })
        .collect();
    let cols = g.oh * wq;
    let (t, tiles) = padded_tiles(cols);
    // No dropped columns: the product writes the output directly.
    let direct = wq == g.ow;
    PADDED.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.len() < g.n * g.c * plane {
            buf.resize(g.n * g.c * plane, 0.0);
        }
        let xp = P(buf.as_mut_ptr());
        parallel::parallel_for(g.n * g.c, |pl| {
            // SAFETY: task pl writes its own channel's phase planes only.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(xp.at(pl * plane), plane);
                let src = std::slice::from_raw_parts(x.at(pl * hw) as *const f32, hw);
                for (ph, dst) in dst.chunks_exact_mut(phase).take(sh * ncol).enumerate() {
                    let (a, b) = (ph / ncol, firsts[ph % ncol]);
                    if phase_used(a, g.kh, dh, sh) && (shift || phase_used(b, g.kw, dw, sw)) {
                        split_phase(g, src, (a, b), 0, wq, dst);
                    }
                }
            }
        });
        parallel::parallel_for(g.groups * g.n * tiles, |task| {
            let (grp, rest) = (task / (g.n * tiles), task % (g.n * tiles));
            let (n, tile) = (rest / tiles, rest % tiles);
            let q0 = tile * t;
            let tt = t.min(cols - q0);
            let a = igemm::A {
                ptr: wp.at(grp * per_group),
                rows: ocg,
                first: 0,
            };
            // Reads stay inside the sample-group's phase planes and their
            // slack (see `plane`); the task writes its own output positions.
            let b = igemm::Rows {
                base: xp.at((n * g.c + grp * cg) * plane + q0),
                offs: &offs,
            };
            let first = out.at((n * g.oc + grp * ocg) * p);
            if direct {
                // SAFETY: as above, at output positions q0..q0+tt.
                unsafe { igemm::gemm(ocg, tt, ck, a, b, first.add(q0), p, false) };
                return;
            }
            with_scratch::<f32, _>(ocg * tt, |c| unsafe {
                igemm::gemm(ocg, tt, ck, a, b, c.as_mut_ptr(), tt, false);
                let mut j = 0;
                while j < tt {
                    let (oh, ow) = ((q0 + j) / wq, (q0 + j) % wq);
                    let len = (wq - ow).min(tt - j);
                    if ow < g.ow {
                        let keep = len.min(g.ow - ow);
                        for o in 0..ocg {
                            let dst = first.add(o * p + oh * g.ow + ow);
                            std::ptr::copy_nonoverlapping(c.as_ptr().add(o * tt + j), dst, keep);
                        }
                    }
                    j += len;
                }
            });
        });
        release_if_large(&mut buf);
    });
}

/// Writes rows `i0..` of phase plane `(a, b)` of one input plane `src` (see
/// [`phase_dims`]), as many as `dst` holds: element `(i, j)` is padded
/// element `(a + i * sh, b + j * sw)`, zero in the padding.
fn split_phase(
    g: &Conv2d,
    src: &[f32],
    (a, b): (usize, usize),
    i0: usize,
    wq: usize,
    dst: &mut [f32],
) {
    let ([sh, sw], [ph, pw]) = (g.stride, g.padding);
    // Phase column j reads input column b + j * sw - pw: from j0 on, len of them.
    let j0 = pw.saturating_sub(b).div_ceil(sw).min(wq);
    let iw0 = (j0 * sw + b).saturating_sub(pw).min(g.w);
    let len = if iw0 < g.w {
        (g.w - iw0).div_ceil(sw).min(wq - j0)
    } else {
        0
    };
    for (i, drow) in dst.chunks_exact_mut(wq).enumerate() {
        let ih = (a + (i0 + i) * sh).wrapping_sub(ph);
        if ih >= g.h {
            drow.fill(0.0);
            continue;
        }
        let row = &src[ih * g.w + iw0..(ih + 1) * g.w];
        drow[..j0].fill(0.0);
        drow[j0 + len..].fill(0.0);
        let drow = &mut drow[j0..j0 + len];
        if sw == 1 {
            drow.copy_from_slice(&row[..len]);
        } else {
            igemm::copy_strided(row, sw, drow);
        }
    }
}

/// Floats a per-thread buffer of the AVX-512 path keeps between calls: a
/// larger one (the padded copy of a large batch, the weight of a very wide
/// layer) is freed after its call instead of held for the thread's life.
const KEEP_FLOATS: usize = 1 << 24;

fn release_if_large(buf: &mut Vec<f32>) {
    if buf.len() > KEEP_FLOATS {
        *buf = Vec::new();
    }
}

thread_local! {
    /// [`forward_padded`]'s padded copy of the input (the calling thread's,
    /// reused across calls).
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Packs rows `k0..k0+kc` and columns `q0..q0+nr` (`nr <= NR`) of one
/// group's im2col matrix into `kc` rows of [`igemm::NR`] floats (columns
/// past `nr` zero). Columns are (sample, output position) in order, so a
/// micro-panel may span samples; `xg` is sample 0's first plane of the group.
///
/// Every row `(c, kh, kw)` reads the same positions of its channel's plane,
/// so each call first tabulates, per kernel tap and column, the offset it
/// reads (or -1 for padding), and then copies each row through its tap's
/// table: no index arithmetic per element, whatever the stride, padding or
/// dilation, and no per-row segments (a 7-wide output row had made the
/// segment loop of [`pack`] cost a third of the product's time).
unsafe fn pack_cols(
    g: &Conv2d,
    xg: *const f32,
    k0: usize,
    kc: usize,
    q0: usize,
    nr: usize,
    dst: &mut [f32],
) {
    use igemm::NR;
    let (p, kp) = (g.p(), g.kp());
    if g.pointwise() {
        // Each row: the channel's runs of positions, sample by sample; a
        // whole panel inside one sample as one fixed-size copy (a call to
        // memcpy per row had cost as much as the product's FMAs on
        // mobilenet's 1 x 1 layers at 14 x 14).
        let hw = g.hw();
        let (n0, pos0) = (q0 / p, q0 % p);
        if nr == NR && pos0 + NR <= p {
            for kk in 0..kc {
                let src = xg.add((n0 * g.c + k0 + kk) * hw + pos0) as *const [f32; NR];
                (dst.as_mut_ptr().add(kk * NR) as *mut [f32; NR])
                    .write_unaligned(src.read_unaligned());
            }
            return;
        }
        for kk in 0..kc {
            let row = &mut dst[kk * NR..(kk + 1) * NR];
            let mut j = 0;
            while j < nr {
                let (n, pos) = ((q0 + j) / p, (q0 + j) % p);
                let len = (p - pos).min(nr - j);
                let src = xg.add((n * g.c + k0 + kk) * hw + pos);
                std::ptr::copy_nonoverlapping(src, row[j..].as_mut_ptr(), len);
                j += len;
            }
            row[nr..].fill(0.0);
        }
        return;
    }
    let sample = (g.c * g.hw()) as isize;
    // Per column: the sample's offset and the window's top-left input row/col.
    let mut base = [0isize; NR];
    let mut top = [0isize; NR];
    let mut left = [0isize; NR];
    for j in 0..nr {
        let q = q0 + j;
        let (n, pos) = (q / p, q % p);
        base[j] = n as isize * sample;
        top[j] = (pos / g.ow * g.stride[0]) as isize - g.padding[0] as isize;
        left[j] = (pos % g.ow * g.stride[1]) as isize - g.padding[1] as isize;
    }
    TAPS.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() < kp * NR {
            t.resize(kp * NR, -1);
        }
        let first = k0 % kp;
        for i in 0..kc.min(kp) {
            let tap = (first + i) % kp;
            let (ki, kj) = (tap / g.kw, tap % g.kw);
            let row = &mut t[tap * NR..(tap + 1) * NR];
            for j in 0..NR {
                let ih = top[j] + (ki * g.dilation[0]) as isize;
                let iw = left[j] + (kj * g.dilation[1]) as isize;
                let inside = j < nr && ih >= 0 && ih < g.h as isize && iw >= 0 && iw < g.w as isize;
                // i32: the AVX-512 path takes inputs of fewer than 2^31 elements.
                row[j] = if inside {
                    (base[j] + ih * g.w as isize + iw) as i32
                } else {
                    -1
                };
            }
        }
        for r in k0..k0 + kc {
            let plane = xg.add(r / kp * g.hw());
            let tab = &t[r % kp * NR..(r % kp + 1) * NR];
            igemm::gather_row(plane, tab, &mut dst[(r - k0) * NR..(r - k0 + 1) * NR]);
        }
    })
}

thread_local! {
    /// [`pack_cols`]' per-tap offset tables.
    static TAPS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    /// The calling thread's packed weights of the AVX-512 path (reused
    /// across calls: a fresh buffer would fault its pages in every call).
    static WEIGHTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[n, o, :] += bias[o]`.
fn add_bias<T: Real>(g: &Conv2d, out: P<T>, bias: P<T>) {
    let p = g.p();
    parallel::parallel_for(g.n, |n| {
        for o in 0..g.oc {
            let bv = unsafe { *bias.at(o) };
            // SAFETY: task n writes sample n's planes only.
            for v in unsafe { std::slice::from_raw_parts_mut(out.at((n * g.oc + o) * p), p) } {
                *v += bv;
            }
        }
    });
}

/// Gradients of `grad = conv2d(x, w)`: w.r.t. the input into `gi`, the
/// weight into `gw` (needs `x`), the bias into `gb` (each when given).
pub fn backward(
    g: &Conv2d,
    grad: &Strided,
    x: Option<&Strided>,
    w: &Strided,
    gi: Option<&Strided>,
    gw: Option<&Strided>,
    gb: Option<&Strided>,
) -> Result<(), KernelError> {
    let dt = grad.dtype;
    check(grad, "grad_output", &[g.n, g.oc, g.oh, g.ow], dt)?;
    check(w, "weight", &[g.oc, g.cg(), g.kh, g.kw], dt)?;
    if let Some(t) = gi {
        check(t, "grad_input", &[g.n, g.c, g.h, g.w], dt)?;
    }
    if let Some(t) = gw {
        check(t, "grad_weight", &[g.oc, g.cg(), g.kh, g.kw], dt)?;
        match x {
            Some(x) => check(x, "input", &[g.n, g.c, g.h, g.w], dt)?,
            None => return Err(err("foo: conv2d weight gradient needs the input".into())),
        }
    }
    if let Some(t) = gb {
        check(t, "grad_bias", &[g.oc], dt)?;
    }
    let ptr = |t: Option<&Strided>| t.map(|t| t.ptr);
    macro_rules! run {
        ($t:ty) => {{
            if let Some(gi) = gi {
                grad_input_t::<$t>(g, gi.ptr, grad.ptr, w.ptr);
            }
            if let Some(gw) = gw {
                grad_weight_t::<$t>(g, gw.ptr, grad.ptr, ptr(x).unwrap());
            }
            if let Some(gb) = gb {
                grad_bias_t::<$t>(g, gb.ptr, grad.ptr);
            }
        }};
    }
    match dt {
        DType::F32 => run!(f32),
        DType::F64 => run!(f64),
        _ => {
            return Err(KernelError::UnsupportedDtype {
                op: "conv2d_backward",
                dtype: dt,
            })
        }
    }
    Ok(())
}

fn grad_input_t<T: Real>(g: &Conv2d, gi: *mut u8, grad: *mut u8, w: *mut u8) {
    let (gi, grad, w) = (P(gi as *mut T), P(grad as *mut T), P(w as *mut T));
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    if g.n * g.c * hw == 0 {
        return;
    }
    if p == 0 || g.oc == 0 || kp == 0 {
        // SAFETY: gi is n*c*hw elements.
        unsafe { std::slice::from_raw_parts_mut(gi.0, g.n * g.c * hw).fill(T::ZERO) };
        return;
    }
    if g.depthwise() {
        depthwise::grad_input(g, gi, grad, w);
        return;
    }
    if per_batch(g) {
        // SAFETY: gi, grad and w hold the shapes g describes.
        unsafe { per_batch_product(g, Pass::Input, gi, grad, w) };
        return;
    }
    if is_f32::<T>() && igemm::available() {
        if let Some(t) = transposed(g) {
            let w = Weight::Transposed(w.0 as *const f32);
            forward_igemm(&t, gi.0 as *mut f32, grad.0 as *const f32, w);
            return;
        }
        if winograd::applies_input_gradient(g) {
            let (gi, grad) = (gi.0 as *mut f32, grad.0 as *const f32);
            winograd::input_gradient(g, gi, grad, w.0 as *const f32);
            return;
        }
    }
    if is_f32::<T>() && igemm::available() && g.n * p <= FEW_COLS {
        grad_input_few_cols(g, gi.0 as *mut f32, grad.0 as *const f32, w.0 as *const f32);
        return;
    }
    let (cb, ncb) = channel_blocks(g);
    if is_f32::<T>() && !g.pointwise() && igemm::available() {
        grad_input_igemm(
            g,
            gi.0 as *mut f32,
            grad.0 as *const f32,
            w.0 as *const f32,
            cb,
            ncb,
        );
        return;
    }
    let ntasks = g.n * g.groups * ncb;
    let par = ntasks < parallel::num_threads() && ocg * ck * p >= (1 << 22);
    parallel::parallel_for(ntasks, |task| {
        let (ngi, blk) = (task / ncb, task % ncb);
        let (n, grp) = (ngi / g.groups, ngi % g.groups);
        let c0 = blk * cb;
        let c1 = (c0 + cb).min(cg);
        let gig = gi.at((n * g.c + grp * cg) * hw);
        let gg = grad.at((n * g.oc + grp * ocg) * p);
        let wg = w.at(grp * ocg * ck);
        // SAFETY: each task writes the planes c0..c1 of its (sample, group).
        unsafe {
            if g.pointwise() {
                // gi[c0..c1] = W[:, c0..c1]^T @ grad
                gemm(
                    c1 - c0,
                    p,
                    ocg,
                    gig.add(c0 * hw),
                    hw as isize,
                    1,
                    false,
                    wg.add(c0),
                    1,
                    ck as isize,
                    gg,
                    p as isize,
                    1,
                    par,
                );
                return;
            }
            std::slice::from_raw_parts_mut(gig.add(c0 * hw), (c1 - c0) * hw).fill(T::ZERO);
            let rows = (c1 - c0) * kp;
            let t = g.tile(rows);
            with_scratch::<T, _>(rows * t, |buf| {
                let mut p0 = 0;
                while p0 < p {
                    let tt = t.min(p - p0);
                    // colg (rows x tt) = W[:, c0*kp..c1*kp]^T @ grad[:, p0..p0+tt]
                    gemm(
                        rows,
                        tt,
                        ocg,
                        buf.as_mut_ptr(),
                        tt as isize,
                        1,
                        false,
                        wg.add(c0 * kp),
                        1,
                        ck as isize,
                        gg.add(p0),
                        p as isize,
                        1,
                        par,
                    );
                    unpack_add(g, gig, c0 * kp, c1 * kp, p0, tt, tt, &buf[..rows * tt]);
                    p0 += tt;
                }
            });
        }
    });
}

/// A stride-1 convolution's input gradient as a convolution of the output
/// gradient: `gi[c, ih, iw] = sum over (o, kh, kw) of grad[o, ih + p - kh *
/// d, iw + p - kw * d] * w[o, c, kh, kw]`, which is `grad` convolved with
/// the weight transposed (`[C, OC/G, KH, KW]`) and flipped, padding `d *
/// (K - 1) - p`. Through [`forward_igemm`] it needs no col2im and reads the
/// gradient's padded planes in place. `None` for strides (a fractionally
/// strided product), padding beyond the kernel's reach, input rows no
/// output reads (a transposed convolution's output padding), 1x1 stride-1
/// layers (plain products already) and sizes past the gathers' 32-bit
/// offsets.
fn transposed(g: &Conv2d) -> Option<Conv2d> {
    let reach = |k: usize, d: usize, p: usize| ((k - 1) * d).checked_sub(p);
    let full = |i: usize, o: usize, k: usize, d: usize, p: usize| i + 2 * p == o + (k - 1) * d;
    if g.stride != [1, 1]
        || (g.pointwise() && !pointwise_igemm(g))
        || g.depthwise()
        || g.n * g.oc * g.p() >= i32::MAX as usize
        // Every input row and column reached (a transposed convolution's
        // output padding leaves the last ones to zero).
        || !full(g.h, g.oh, g.kh, g.dilation[0], g.padding[0])
        || !full(g.w, g.ow, g.kw, g.dilation[1], g.padding[1])
    {
        return None;
    }
    let t = Conv2d {
        n: g.n,
        c: g.oc,
        h: g.oh,
        w: g.ow,
        oc: g.c,
        kh: g.kh,
        kw: g.kw,
        oh: g.h,
        ow: g.w,
        stride: [1, 1],
        padding: [
            reach(g.kh, g.dilation[0], g.padding[0])?,
            reach(g.kw, g.dilation[1], g.padding[1])?,
        ],
        dilation: g.dilation,
        groups: g.groups,
    };
    (t.ck() > 0).then_some(t)
}

/// Channel blocks of the input gradient per (sample, group), enough tasks
/// for a small batch: (channels per block, blocks).
fn channel_blocks(g: &Conv2d) -> (usize, usize) {
    let (ng, cg) = (g.n * g.groups, g.cg());
    let ncb = if ng >= 8 { 1 } else { (8 / ng).min(cg).max(1) };
    let cb = cg.div_ceil(ncb);
    (cb, cg.div_ceil(cb))
}

/// The input gradient of a convolution with at most [`FEW_COLS`] output
/// positions in all (small maps; the stride-1 layers take
/// [`forward_few_cols`] first): `W[:, rows]^T @ grad` with the columns of
/// every sample side by side (one product per sample had filled 4 of a
/// panel's 32 columns at 2 x 2), the transposed weight read in place
/// ([`igemm::InPlace`]: row `(c, tap)`, column `o` at `o * C/G*KH*KW + (c,
/// tap)`, no packing pass over the weight), the output gradient packed
/// once; tasks over (group, block of whole channels) each add their rows
/// into their planes of every sample (col2im), in order.
fn grad_input_few_cols(g: &Conv2d, gi: *mut f32, grad: *const f32, w: *const f32) {
    use igemm::NR;
    let (gi, grad, w) = (P(gi), P(grad as *mut f32), P(w as *mut f32));
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let cols = g.n * p;
    let per_group = igemm::PrePacked::len(ocg, cols);
    let tab: Vec<isize> = (0..ocg).map(|o| (o * ck) as isize).collect();
    // Whole channels per task (its planes are its own), about FEW_ROWS rows.
    let cb = (FEW_ROWS / kp).max(1);
    let blocks = cg.div_ceil(cb);
    WEIGHTS.with(|bp| {
        let mut bp = bp.borrow_mut();
        if bp.len() < g.groups * per_group {
            bp.resize(g.groups * per_group, 0.0);
        }
        // B[o, (n, q)] = grad[n, grp * ocg + o, q].
        let pack = |grp, k0, _, j0, nr, dst: &mut [f32]| {
            for (kk, row) in dst.chunks_exact_mut(NR).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = if j < nr {
                        let (n, q) = ((j0 + j) / p, (j0 + j) % p);
                        // SAFETY: the group's output-gradient rows of sample n.
                        unsafe { *grad.at((n * g.oc + grp * ocg + k0 + kk) * p + q) }
                    } else {
                        0.0
                    };
                }
            }
        };
        igemm::PrePacked::pack_all(&mut bp, g.groups, ocg, cols, pack);
        let bpp = P(bp.as_mut_ptr());
        parallel::parallel_for(g.groups * blocks, |task| {
            let (grp, blk) = (task / blocks, task % blocks);
            let (c0, c1) = (blk * cb, ((blk + 1) * cb).min(cg));
            let rows = (c1 - c0) * kp;
            let a = igemm::InPlace {
                ptr: w.at(grp * ocg * ck + c0 * kp),
                rs: 1,
                cols: &tab,
            };
            let b = igemm::PrePacked {
                base: bpp.at(grp * per_group),
                k: ocg,
            };
            // SAFETY: A is the group's weight read transposed, B the block
            // packed above; the task writes planes c0..c1 of its group in
            // every sample only.
            unsafe {
                with_scratch::<f32, _>(rows * cols, |buf| {
                    igemm::gemm(rows, cols, ocg, a, b, buf.as_mut_ptr(), cols, false);
                    for n in 0..g.n {
                        let gig = gi.at((n * g.c + grp * cg) * hw);
                        std::slice::from_raw_parts_mut(gig.add(c0 * hw), (c1 - c0) * hw).fill(0.0);
                        unpack_add(g, gig, c0 * kp, c1 * kp, 0, p, cols, &buf[n * p..]);
                    }
                });
            }
        });
        release_if_large(&mut bp);
    });
}

/// The input gradient through [`igemm`]: tasks over (sample, group,
/// channel block); each computes its column-gradient tiles
/// `W[:, rows]^T @ grad[:, tile]` and adds them into its planes (col2im).
/// `W^T` is packed once per call, one block of rows per channel block.
fn grad_input_igemm(
    g: &Conv2d,
    gi: *mut f32,
    grad: *const f32,
    w: *const f32,
    cb: usize,
    ncb: usize,
) {
    let (gi, grad, w) = (P(gi), P(grad as *mut f32), P(w as *mut f32));
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let per_block = igemm::packed_len(cb * kp, ocg);
    WEIGHTS.with(|wp| {
        let mut wp = wp.borrow_mut();
        let need = g.groups * ncb * per_block;
        if wp.len() < need {
            wp.resize(need, 0.0);
        }
        for grp in 0..g.groups {
            for blk in 0..ncb {
                let (c0, c1) = (blk * cb, ((blk + 1) * cb).min(cg));
                let dst = &mut wp[(grp * ncb + blk) * per_block..];
                // SAFETY: W^T's rows c0*kp..c1*kp: element (r, o) at w[o*ck + r].
                unsafe {
                    igemm::pack_a_all(
                        w.at(grp * ocg * ck + c0 * kp),
                        1,
                        ck as isize,
                        (c1 - c0) * kp,
                        ocg,
                        dst,
                    )
                };
            }
        }
        let wp = P(wp.as_mut_ptr());
        if 2 * p <= IGEMM_TILE {
            grad_input_samples(g, gi, grad, wp, cb, ncb, per_block);
            return;
        }
        parallel::parallel_for(g.n * g.groups * ncb, |task| {
            let (ngi, blk) = (task / ncb, task % ncb);
            let (n, grp) = (ngi / g.groups, ngi % g.groups);
            let (c0, c1) = (blk * cb, ((blk + 1) * cb).min(cg));
            let rows = (c1 - c0) * kp;
            let gig = gi.at((n * g.c + grp * cg) * hw);
            let gg = grad.at((n * g.oc + grp * ocg) * p) as *const f32;
            let a = igemm::A {
                ptr: wp.at((grp * ncb + blk) * per_block),
                rows,
                first: 0,
            };
            let t = g.tile(rows).div_ceil(igemm::NR) * igemm::NR;
            // SAFETY: each task writes the planes c0..c1 of its (sample, group).
            unsafe {
                std::slice::from_raw_parts_mut(gig.add(c0 * hw), (c1 - c0) * hw).fill(0.0);
                with_scratch::<f32, _>(rows * t, |buf| {
                    let mut p0 = 0;
                    while p0 < p {
                        let tt = t.min(p - p0);
                        let pack_grad =
                            |k0: usize, kc: usize, j0: usize, nr: usize, dst: &mut [f32]| {
                                for kk in 0..kc {
                                    let src = std::slice::from_raw_parts(
                                        gg.add((k0 + kk) * p + p0 + j0),
                                        nr,
                                    );
                                    dst[kk * igemm::NR..kk * igemm::NR + nr].copy_from_slice(src);
                                }
                            };
                        igemm::gemm(
                            rows,
                            tt,
                            ocg,
                            a,
                            igemm::Packed(&pack_grad),
                            buf.as_mut_ptr(),
                            tt,
                            false,
                        );
                        unpack_add(g, gig, c0 * kp, c1 * kp, p0, tt, tt, &buf[..rows * tt]);
                        p0 += tt;
                    }
                });
            }
        });
    });
}

/// Rows of `W^T` per product in [`grad_input_samples`]: a block of the
/// column gradient (`ROW_BLOCK x` up to [`IGEMM_TILE`] floats, 192 KiB)
/// stays in L2 until it is added into the planes.
const ROW_BLOCK: usize = 16 * igemm::MR;

/// [`grad_input_igemm`] for small maps (`2 * OH * OW <= IGEMM_TILE`): the
/// columns of several samples side by side in one product (one sample's 49
/// positions at 7 x 7 had filled 49 of 64 computed columns), `W^T`'s rows in
/// blocks of [`ROW_BLOCK`], each block added into its planes (col2im) before
/// the next. Tasks over (group, channel block, run of whole samples), so no
/// two write the same plane; each element's sum runs over the rows in the
/// same order as in [`grad_input_igemm`] (the same bits). Measured against
/// one sample per product (input gradient alone, batch 8, alternating in
/// one process; 1 / 2 threads): resnet18's 256 -> 512 3 x 3 stride 2 at 14
/// 0.88 / 0.82 of the time, its 1 x 1 stride-2 shortcut 0.88 / 0.62, a 5 x 5
/// stride-2 layer at 14 0.96 / 0.92.
fn grad_input_samples(
    g: &Conv2d,
    gi: P<f32>,
    grad: P<f32>,
    wp: P<f32>,
    cb: usize,
    ncb: usize,
    per_block: usize,
) {
    let (p, hw, cg, ocg, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.kp());
    // Runs of samples: as many as fit in a tile, but at least one run per
    // thread (while samples last), of equal length.
    let most = (IGEMM_TILE / p).max(1);
    let runs = g.n.div_ceil(most).max(parallel::num_threads().min(g.n));
    let per_run = g.n.div_ceil(runs);
    let runs = g.n.div_ceil(per_run);
    parallel::parallel_for(g.groups * ncb * runs, |task| {
        let (grp, rest) = (task / (ncb * runs), task % (ncb * runs));
        let (blk, run) = (rest / runs, rest % runs);
        let (c0, c1) = (blk * cb, ((blk + 1) * cb).min(cg));
        let (n0, n1) = (run * per_run, ((run + 1) * per_run).min(g.n));
        let (rows, cols) = ((c1 - c0) * kp, (n1 - n0) * p);
        let planes = |n: usize| gi.at((n * g.c + grp * cg) * hw);
        // Output channel `o`'s gradient plane of sample `n`.
        let src = |n: usize, o: usize| grad.at((n * g.oc + grp * ocg + o) * p) as *const f32;
        // SAFETY: each task writes the planes c0..c1 of its samples' group;
        // reads stay inside the samples' gradient planes.
        unsafe {
            for n in n0..n1 {
                std::slice::from_raw_parts_mut(planes(n).add(c0 * hw), (c1 - c0) * hw).fill(0.0);
            }
            let pack_grad = |k0: usize, kc: usize, j0: usize, nr: usize, dst: &mut [f32]| {
                for kk in 0..kc {
                    let row = &mut dst[kk * igemm::NR..kk * igemm::NR + nr];
                    let mut j = 0;
                    while j < nr {
                        let (n, pos) = (n0 + (j0 + j) / p, (j0 + j) % p);
                        let len = (p - pos).min(nr - j);
                        let from = std::slice::from_raw_parts(src(n, k0 + kk).add(pos), len);
                        row[j..j + len].copy_from_slice(from);
                        j += len;
                    }
                }
            };
            with_scratch::<f32, _>(ROW_BLOCK.min(rows) * cols, |buf| {
                let mut r0 = 0;
                while r0 < rows {
                    let rr = ROW_BLOCK.min(rows - r0);
                    let a = igemm::A {
                        ptr: wp.at((grp * ncb + blk) * per_block),
                        rows,
                        first: r0,
                    };
                    let c = buf.as_mut_ptr();
                    igemm::gemm(rr, cols, ocg, a, igemm::Packed(&pack_grad), c, cols, false);
                    let (r, r1) = (c0 * kp + r0, c0 * kp + r0 + rr);
                    for n in n0..n1 {
                        let col = &buf[(n - n0) * p..];
                        unpack_add(g, planes(n), r, r1, 0, p, cols, col);
                    }
                    r0 += rr;
                }
            });
        }
    });
}

fn grad_weight_t<T: Real>(g: &Conv2d, gw: *mut u8, grad: *mut u8, x: *mut u8) {
    let (gw, grad, x) = (P(gw as *mut T), P(grad as *mut T), P(x as *mut T));
    let (p, hw, cg, ocg, ck) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck());
    let total = g.oc * ck;
    if total == 0 {
        return;
    }
    // SAFETY: gw is oc*ck elements; tasks below write disjoint parts.
    unsafe { std::slice::from_raw_parts_mut(gw.0, total).fill(T::ZERO) };
    if g.n * p == 0 {
        return;
    }
    if g.depthwise() {
        depthwise::grad_weight(g, gw, grad, x);
        return;
    }
    if per_batch(g) {
        // SAFETY: gw, grad and x hold the shapes g describes.
        unsafe { per_batch_product(g, Pass::Weight, gw, grad, x) };
        return;
    }
    // The implicit-GEMM weight gradients take AVX-512 (igemm::wide): their
    // operands are packed by the AVX-512 transposes, scalar without them.
    // On an AVX2-only Zen 1 (one thread, batch 8, `python -m foo_rs.bench
    // --group conv -k resnet18`) they ran at 1.08-1.55x CPU's time on
    // resnet18's 3 x 3 layers, where the path below ran at 0.75-1.09x on
    // six of the seven (64 channels at 56 x 56: 1.33 against 1.58).
    let wide = igemm::wide();
    if is_f32::<T>() && wide && taps_in_place(g) {
        let (gw, grad, x) = (gw.0 as *mut f32, grad.0 as *const f32, x.0 as *const f32);
        grad_weight_igemm(g, gw, grad, x, KEEP_FLOATS);
        return;
    }
    if is_f32::<T>() && dots::available() && g.pointwise() {
        let (gw, grad, x) = (gw.0 as *mut f32, grad.0 as *const f32, x.0 as *const f32);
        grad_weight_pointwise(g, gw, grad, x);
        return;
    }
    if is_f32::<T>() && dots::available() && dots_of_rows(g) {
        let (gw, grad, x) = (gw.0 as *mut f32, grad.0 as *const f32, x.0 as *const f32);
        grad_weight_dots(g, gw, grad, x, KEEP_FLOATS);
        return;
    }
    if is_f32::<T>() && wide && rows_as_a(g) {
        let (gw, grad, x) = (gw.0 as *mut f32, grad.0 as *const f32, x.0 as *const f32);
        grad_weight_rows(g, gw, grad, x, KEEP_FLOATS);
        return;
    }
    // Blocks of the C/G*KH*KW columns of each group's weight gradient.
    let nrb = if g.groups >= 8 {
        1
    } else {
        (8 / g.groups).min(ck.div_ceil(16)).max(1)
    };
    let rb = ck.div_ceil(nrb);
    let nrb = ck.div_ceil(rb);
    let ntasks = g.groups * nrb;
    let par = ntasks < parallel::num_threads() && ocg * ck * p >= (1 << 22);
    parallel::parallel_for(ntasks, |task| {
        let (grp, blk) = (task / nrb, task % nrb);
        let r0 = blk * rb;
        let r1 = (r0 + rb).min(ck);
        let rows = r1 - r0;
        let dst = gw.at(grp * ocg * ck + r0);
        // SAFETY: each task writes columns r0..r1 of its group's rows.
        unsafe {
            if g.pointwise() {
                for n in 0..g.n {
                    let gg = grad.at((n * g.oc + grp * ocg) * p);
                    let xg = x.at((n * g.c + grp * cg + r0) * hw);
                    // gw[:, r0..r1] += grad (ocg x p) @ x[r0..r1]^T (p x rows)
                    gemm(
                        ocg,
                        rows,
                        p,
                        dst,
                        ck as isize,
                        1,
                        true,
                        gg,
                        p as isize,
                        1,
                        xg,
                        1,
                        hw as isize,
                        par,
                    );
                }
                return;
            }
            let t = g.tile(rows);
            with_scratch::<T, _>(rows * t, |buf| {
                for n in 0..g.n {
                    let gg = grad.at((n * g.oc + grp * ocg) * p);
                    let xg = x.at((n * g.c + grp * cg) * hw);
                    let mut p0 = 0;
                    while p0 < p {
                        let tt = t.min(p - p0);
                        pack(g, xg, r0, r1, p0, tt, buf);
                        gemm(
                            ocg,
                            rows,
                            tt,
                            dst,
                            ck as isize,
                            1,
                            true,
                            gg.add(p0),
                            p as isize,
                            1,
                            buf.as_ptr(),
                            1,
                            tt as isize,
                            par,
                        );
                        p0 += tt;
                    }
                }
            });
        }
    });
}

/// Where each output position's window starts in a zero-padded input of
/// row width `wp` whose elements are `step` floats apart (1 for planes, the
/// channel count for channels-last): `((oh * sh) * wp + ow * sw) * step`.
fn window_origins(g: &Conv2d, wp: usize, step: usize) -> Vec<isize> {
    let [sh, sw] = g.stride;
    (0..g.p())
        .map(|q| (((q / g.ow) * sh * wp + (q % g.ow) * sw) * step) as isize)
        .collect()
}

/// Whether the float32 weight gradient takes [`grad_weight_igemm`]: when
/// im2col would hold more elements than the input it copies (not a 1x1
/// layer: a stride-1 one is a plain product already, and a stride-2 one
/// reads a quarter of its input, 2x slower through the copy at 56 x 56),
/// and channels per group fill `NR`-wide micro-panels with at most a fifth
/// wasted (resnet's 3->64 stem would compute 32 columns for 3).
fn taps_in_place(g: &Conv2d) -> bool {
    let cg = g.cg();
    g.kp() * g.p() > g.hw() && cg.next_multiple_of(igemm::NR) * 4 <= cg * 5
}

/// [`grad_weight_igemm`] joins samples into one product below this many
/// output positions per sample. Measured (1 thread, batch 8, foo/CPU time
/// of the weight gradient, alternating in one process) against joining
/// below [`igemm::KC`] (128): 64 -> 128 stride 2 at 56 x 56 (784 positions)
/// 1.37 -> 1.28, 128 -> 256 stride 2 at 28 x 28 1.13 -> 1.10, 128 at 28 x 28
/// 0.92 -> 0.88, 256 at 14 x 14 0.88 -> 0.89: a per-sample product of under
/// a thousand positions still re-reads every per-tap sum once per sample.
const JOIN_POSITIONS: usize = 1024;

/// The floats of copies (padded input, packed output gradient) a chunk of
/// [`grad_weight_igemm`]'s samples holds at least, about a core's L2 (1
/// MiB on the Zen 5 measured): a whole batch's copies (8 samples, 10 MB at
/// 64 channels, 56 x 56) were written out to memory before the products
/// read them back. Measured (1 thread, batch 8, each foo call right after a
/// CPU call, foo/CPU against one chunk of every sample): 64 -> 128 stride 2
/// at 56 x 56 1.37 -> 1.04, 64 at 56 x 56 0.97 -> 0.67, 128 at 28 x 28 0.96
/// -> 0.85 (one sample a chunk), 128 -> 256 stride 2 1.19 -> 1.12 (three);
/// layers whose sums outweigh their copies (256 channels and up) took
/// 1.2-4.5x as long at one sample a chunk (512 at 4 x 4: 0.30 -> 1.35),
/// hence the sums' term. At two threads (foo alone, a 64 MB copy before
/// each timed call) the first call after the copy took 3.6 against 4.7 ms
/// (64 -> 128 stride 2), 7.0 against 9.1 (64 at 56 x 56), 5.3 against 6.3
/// (128 at 28 x 28); 2 MiB chunks were no better.
const CHUNK_FLOATS: usize = 1 << 18;

thread_local! {
    /// [`grad_weight_igemm`]'s padded channels-last copy of the input, its
    /// packed output gradient and its per-tap sums (the calling thread's,
    /// reused across calls).
    static GW_BUFS: RefCell<[Vec<f32>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// The weight gradient without im2col: for each tap `(kh, kw)`,
/// `gw[:, :, kh, kw] = sum over samples of grad (OC/G x P) @ X_tap (P x
/// C/G)`, where row `q` of `X_tap` is the channels of the input at the
/// position output `q` reads through that tap. In a zero-padded
/// channels-last copy of the input those channels are contiguous, so
/// [`igemm`] reads `X_tap`'s rows in place ([`igemm::Rows`], one offset
/// table for every tap, shifted by the tap's offset); the output gradient
/// is packed once per sample as A. The input is copied once instead of
/// gathered once per tap (im2col: 9 times for a 3x3 layer, then packed
/// again by the gemm crate; 1.75x CPU's time on resnet18's 64-channel
/// layer at 56 x 56). Tasks over (group, tap, block of channels) each sum
/// their outputs over the samples in order, 128 positions at a time (the
/// same bits for any thread count).
///
/// Maps of fewer than [`JOIN_POSITIONS`] positions (resnet18's last layers on
/// small images: 4 positions at 64 x 64) take one product over a chunk's
/// samples, A packed across them and B's row table running on into the next
/// sample's copy: one product per sample would have added its few positions
/// to every sum in memory (512 x 512 x 9 floats, 9.4 MB) once per sample.
///
/// A strided layer's copy is split into stride phases, as
/// [`forward_padded`]'s phase planes: input column `iw` sits at slot
/// `(iw % sw) * ceil(wp / sw) + iw / sw` of its row, rows likewise, so a
/// tap's windows for consecutive outputs are consecutive positions of one
/// phase instead of every `sw`-th one.
fn grad_weight_igemm(g: &Conv2d, gw: *mut f32, grad: *const f32, x: *const f32, budget: usize) {
    use igemm::NR;
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let ([dh, dw], [ph, pw]) = (g.dilation, g.padding);
    let (hp, wp) = (g.h + 2 * ph, g.w + 2 * pw);
    let (gw, grad, x) = (P(gw), P(grad as *mut f32), P(x as *mut f32));
    // Sample n's padded input (ih, iw), channel c at n * sample + at(ih, iw)
    // + c; the micro-kernel reads NR floats from a block's first channel, so
    // NR floats of slack follow the last sample.
    let cs = position_stride(g.c);
    let [sh, sw] = g.stride;
    let (hq, wq) = (hp.div_ceil(sh), wp.div_ceil(sw));
    let pitch = sw * wq * cs;
    let sample = sh * hq * pitch;
    let slot = |iw: usize| (iw % sw) * wq + iw / sw;
    let at = |ih: usize, iw: usize| ((ih % sh) * hq + ih / sh) * pitch + slot(iw) * cs;
    let per_a = igemm::packed_len(ocg, p);
    // Tasks over (group, channel block, block of RBLOCK output channels)
    // that compute every tap and write their block of gw at once (the
    // direct grid), or over (group, tap, channel block) into per-tap sums,
    // transposed into gw at the end: a pass over all of gw and the sums in
    // memory (9.4 MB each for 512 channels, 3x3: about half the time of that
    // layer's gradient at 2 x 2). The direct grid is taken with channel
    // blocks of two micro-panels when that leaves at least four tasks per
    // thread, else of one when the pool's threads share those tasks within a
    // quarter of even; else the tap grid, with blocks of two micro-panels
    // when that leaves four tasks per thread (64 channels in 3x3 taps at 64
    // threads: 18 tasks, not 9). resnet18's 64-channel layer at 56 x 56
    // (batch 8, one thread) had taken the tap grid, 9 tasks of one tap and
    // two panels of channels each: 27.6 ms, against 20 ms on the direct grid
    // in two tasks of one panel (1.38 -> 1.03x CPU's time). Each output sums
    // in the same order in every grid (the same bits for any thread count).
    let threads = parallel::num_threads();
    // Blocks of output channels as even as whole micro-panels allow (128
    // channels: 72 + 56, not 96 + 32).
    let rb = ocg
        .div_ceil(ocg.div_ceil(RBLOCK))
        .next_multiple_of(igemm::MR);
    let rblocks = ocg.div_ceil(rb);
    let tasks = |block: usize| g.groups * cg.div_ceil(block) * rblocks;
    let even = |t: usize| t >= threads && t.div_ceil(threads) * threads * 4 <= t * 5;
    let (block, direct) = if tasks(2 * NR) >= 4 * threads {
        (2 * NR, true)
    } else if even(tasks(NR)) {
        (NR, true)
    } else if g.groups * kp * cg.div_ceil(2 * NR) >= 4 * threads {
        (2 * NR, false)
    } else {
        (NR, false)
    };
    let blocks = cg.div_ceil(block);
    // Samples in chunks whose copies stay within `budget` floats (a batch of
    // 256 at 112 x 112 would otherwise hold the input and the gradient a
    // second time, 1.6 GB); the sums carry across chunks in sample order.
    // Within that, a chunk's copies are about the size of what each further
    // chunk costs (reading and writing every sum: 2 x gw's floats), and
    // otherwise of L2 ([`CHUNK_FLOATS`]).
    let per_sample = sample + g.groups * per_a;
    let fit = (2 * g.oc * ck).max(CHUNK_FLOATS).min(budget);
    let chunk = (fit / per_sample).clamp(1, g.n);
    // One product over the chunk's samples (small maps), else one per sample.
    let joined = p < JOIN_POSITIONS;
    // Row q of every X_tap, before the tap's own offset: for a joined
    // product, the rows of each sample of the chunk in turn.
    // Output (oh, ow)'s window starts at input (oh * sh, ow * sw): in the
    // phase layout, row oh and slot ow of phase (0, 0).
    let mut rows: Vec<isize> = (0..p)
        .map(|q| ((q / g.ow) * pitch + (q % g.ow) * cs) as isize)
        .collect();
    if joined {
        rows = (0..chunk * p)
            .map(|k| ((k / p) * sample) as isize + rows[k % p])
            .collect();
    }
    GW_BUFS.with(|bufs| {
        let mut bufs = bufs.borrow_mut();
        let [xt, ap, sums] = &mut *bufs;
        let sums_len = if direct { 0 } else { g.groups * kp * ocg * cg };
        for (buf, len) in [
            (&mut *xt, chunk * sample + NR),
            (&mut *ap, chunk * g.groups * per_a),
            (&mut *sums, sums_len),
        ] {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        }
        let (xtp, app, sp) = (P(xt.as_mut_ptr()), P(ap.as_mut_ptr()), P(sums.as_mut_ptr()));
        for n0 in (0..g.n).step_by(chunk) {
            let nn = chunk.min(g.n - n0);
            // The padded channels-last copy of samples n0.., a padded row
            // per task.
            parallel::parallel_for(nn * hp, |task| {
                let (n, ih) = (task / hp, task % hp);
                // SAFETY: task (n, ih) writes its own padded row only.
                let row = unsafe {
                    std::slice::from_raw_parts_mut(xtp.at(n * sample + at(ih, 0)), pitch)
                };
                if ih < ph || ih >= ph + g.h {
                    row.fill(0.0);
                    return;
                }
                for iw in (0..pw).chain(pw + g.w..sw * wq) {
                    row[slot(iw) * cs..][..cs].fill(0.0);
                }
                // SAFETY: input row ih - ph of every plane of sample n0 + n.
                unsafe {
                    let first = x.at((n0 + n) * g.c * hw + (ih - ph) * g.w);
                    rows_to_channels_last(first, hw, g.c, g.w, cs, |iw| slot(iw + pw), row);
                }
            });
            // SAFETY: the NR floats of slack after the chunk's last sample.
            unsafe { std::slice::from_raw_parts_mut(xtp.at(nn * sample), NR).fill(0.0) };
            // A joined product's A is the group's rows of every sample in
            // turn, ocg x (nn * p) (nn * per_a floats).
            let per_joined = nn * per_a;
            for n in 0..nn {
                for grp in 0..g.groups {
                    // SAFETY: the group's output-gradient rows of sample n0 + n
                    // (ocg x p), or of every sample from n0 on (ocg x nn * p
                    // for a joined product, column (n, q) at n * oc * p + q),
                    // into this chunk's packed buffer.
                    unsafe {
                        let src = grad.at(((n0 + n) * g.oc + grp * ocg) * p);
                        if !joined {
                            let at = (n * g.groups + grp) * per_a;
                            let dst = std::slice::from_raw_parts_mut(app.at(at), per_a);
                            igemm::pack_a_all(src, p as isize, 1, ocg, p, dst)
                        } else if n == 0 {
                            let dst = std::slice::from_raw_parts_mut(
                                app.at(grp * per_joined),
                                per_joined,
                            );
                            let (row, col) = (
                                |i| (i * p) as isize,
                                |k| ((k / p) * g.oc * p + k % p) as isize,
                            );
                            igemm::pack_a_all_with(
                                src,
                                row,
                                col,
                                ocg,
                                nn * p,
                                igemm::Walk::AlongK,
                                dst,
                            )
                        }
                    };
                }
            }
            // C (+)= the tap's product for output channels r0..r0+rows_n
            // and channels c0..c0+nc, C's rows `ldc` apart; from the chunk's
            // first sample on it adds to C when `n0 > 0` (the earlier
            // chunks' sums).
            let product = |grp: usize,
                           tap: usize,
                           r0: usize,
                           rows_n: usize,
                           c0: usize,
                           nc: usize,
                           c: *mut f32,
                           ldc: usize| {
                let shift = at((tap / g.kw) * dh, (tap % g.kw) * dw) + grp * cg + c0;
                if joined {
                    let a = igemm::A {
                        ptr: app.at(grp * per_joined),
                        rows: ocg,
                        first: r0,
                    };
                    let b = igemm::Rows {
                        base: xtp.at(shift),
                        offs: &rows[..nn * p],
                    };
                    // SAFETY: as below, B's rows running through the chunk's
                    // samples in turn.
                    unsafe { igemm::gemm(rows_n, nc, nn * p, a, b, c, ldc, n0 > 0) };
                    return;
                }
                for n in 0..nn {
                    let a = igemm::A {
                        ptr: app.at((n * g.groups + grp) * per_a),
                        rows: ocg,
                        first: r0,
                    };
                    let b = igemm::Rows {
                        base: xtp.at(n * sample + shift),
                        offs: &rows,
                    };
                    // SAFETY: B's rows are inside sample n's padded copy (a
                    // valid output position reads a padded position through
                    // every tap) or the NR floats of slack after the chunk;
                    // the caller's C block is its own.
                    unsafe { igemm::gemm(rows_n, nc, p, a, b, c, ldc, n0 + n > 0) };
                }
            };
            if direct {
                parallel::parallel_for(g.groups * blocks * rblocks, |task| {
                    let (grp, rest) = (task / (blocks * rblocks), task % (blocks * rblocks));
                    let (blk, rbk) = (rest / rblocks, rest % rblocks);
                    let (c0, nc) = (blk * block, block.min(cg - blk * block));
                    let (r0, nr) = (rbk * rb, rb.min(ocg - rbk * rb));
                    // Row i of gw's block: channels c0..c0+nc, each its kp
                    // taps, one contiguous run.
                    let run = |i: usize| gw.at((grp * ocg + r0 + i) * ck + c0 * kp);
                    with_scratch::<f32, _>(kp * nr * nc, |buf| {
                        // buf[tap][i][c]: the chunk's sums, after the earlier
                        // chunks' (taken from gw, so each output sums in the
                        // tap grid's order).
                        if n0 > 0 {
                            for i in 0..nr {
                                // SAFETY: row i's run of this task's block.
                                let src = unsafe { std::slice::from_raw_parts(run(i), nc * kp) };
                                for (c, taps) in src.chunks_exact(kp).enumerate() {
                                    for (tap, &v) in taps.iter().enumerate() {
                                        buf[(tap * nr + i) * nc + c] = v;
                                    }
                                }
                            }
                        }
                        for tap in 0..kp {
                            let c = buf[tap * nr * nc..].as_mut_ptr();
                            product(grp, tap, r0, nr, c0, nc, c, nc);
                        }
                        for i in 0..nr {
                            // SAFETY: the task writes its own block of gw.
                            let dst = unsafe { std::slice::from_raw_parts_mut(run(i), nc * kp) };
                            for (c, taps) in dst.chunks_exact_mut(kp).enumerate() {
                                for (tap, v) in taps.iter_mut().enumerate() {
                                    *v = buf[(tap * nr + i) * nc + c];
                                }
                            }
                        }
                    });
                });
            } else {
                parallel::parallel_for(g.groups * kp * blocks, |task| {
                    let (grp, rest) = (task / (kp * blocks), task % (kp * blocks));
                    let (tap, blk) = (rest / blocks, rest % blocks);
                    let (c0, nc) = (blk * block, block.min(cg - blk * block));
                    let c = sp.at(((grp * kp + tap) * ocg) * cg + c0);
                    product(grp, tap, 0, ocg, c0, nc, c, cg);
                });
            }
        }
        if direct {
            for buf in bufs.iter_mut() {
                release_if_large(buf);
            }
            return;
        }
        // gw[grp * ocg + o, c, tap] = sums[grp, tap, o, c]
        let sums = &*sums;
        parallel::parallel_for(g.oc, |o| {
            let (grp, oo) = (o / ocg, o % ocg);
            // SAFETY: task o writes row o of gw only.
            let dst = unsafe { std::slice::from_raw_parts_mut(gw.at(o * ck), ck) };
            for tap in 0..kp {
                let src = &sums[((grp * kp + tap) * ocg + oo) * cg..][..cg];
                for (c, &v) in src.iter().enumerate() {
                    dst[c * kp + tap] = v;
                }
            }
        });
        for buf in bufs.iter_mut() {
            release_if_large(buf);
        }
    });
}

/// Floats between consecutive positions of [`grad_weight_igemm`]'s
/// channels-last copy of `c` channels: `c`, plus a cache line when `c`
/// floats are a multiple of 8 lines. The micro-kernel reads `KC` of the
/// copy's rows per call, one position apart; 2^j lines apart they fall
/// into 64 / 2^j of L1's 64 sets (two lines each), and from 8 lines on more
/// rows share a set than it has ways (12 on the Sapphire Rapids core this
/// was measured on): perf put a quarter of the micro-kernel's samples on
/// its loads of B. Alternating both strides in one process (batch 8, one
/// thread), the padded one's time on resnet18's weight gradients: 256
/// channels at 14 x 14 0.81-0.91, 512 at 7 x 7 0.86-0.89, 128 -> 256 stride
/// 2 0.94, 128 at 28 x 28 0.95-0.99; at 64 channels (4 lines, 8 rows a set)
/// it lost (1.12-1.16), so those keep `c`.
fn position_stride(c: usize) -> usize {
    if c.is_multiple_of(128) {
        c + 16
    } else {
        c
    }
}

/// `dst[pos(iw) * ld + c] = src[c * plane + iw]` for `c < nc`, `iw < w`:
/// one row of `nc` planes, interleaved channel by channel (a row of
/// [`grad_weight_igemm`]'s channels-last copy, positions `ld` floats
/// apart, column `iw` at position `pos(iw)` (its stride phase's slot); the
/// floats between a position's channels and the next are left as they
/// are). On AVX-512, 16 channels by
/// 16 columns at a time through a 16 x 16 transpose: the scalar copy, one
/// store per element 4 * `nc` bytes from the last, took a fifth as long as
/// the products of a 64 -> 128 stride-2 layer's weight gradient at 56 x 56.
///
/// # Safety
/// `src` addresses `nc` planes `plane` floats apart with `w` readable floats
/// each; `ld >= nc`.
unsafe fn rows_to_channels_last(
    src: *const f32,
    plane: usize,
    nc: usize,
    w: usize,
    ld: usize,
    pos: impl Fn(usize) -> usize,
    dst: &mut [f32],
) {
    assert!(ld >= nc && (0..w).all(|iw| (pos(iw) + 1) * ld <= dst.len()));
    #[cfg(target_arch = "x86_64")]
    if igemm::wide() {
        rows_to_channels_last_avx512(src, plane, nc, w, ld, pos, dst.as_mut_ptr());
        return;
    }
    for c in 0..nc {
        let row = std::slice::from_raw_parts(src.add(c * plane), w);
        for (iw, &v) in row.iter().enumerate() {
            dst[pos(iw) * ld + c] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_to_channels_last_avx512(
    src: *const f32,
    plane: usize,
    nc: usize,
    w: usize,
    ld: usize,
    pos: impl Fn(usize) -> usize,
    dst: *mut f32,
) {
    use crate::kernels::linalg::{first_lanes as mask, transpose16};
    use std::arch::x86_64::*;
    for c0 in (0..nc).step_by(16) {
        let lanes = mask(nc - c0);
        for j0 in (0..w).step_by(16) {
            let cols = (w - j0).min(16);
            let mut r = [_mm512_setzero_si512(); 16];
            for (c, v) in r.iter_mut().enumerate().take(nc - c0) {
                let at = src.add((c0 + c) * plane + j0);
                *v = _mm512_maskz_loadu_epi32(mask(cols), at as *const i32);
                // The plane's next row, most often this thread's next call:
                // `nc` planes read side by side are more streams than the
                // hardware prefetcher follows.
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(w) as *const i8);
            }
            transpose16(&mut r);
            for (j, v) in r.iter().enumerate().take(cols) {
                let at = dst.add(pos(j0 + j) * ld + c0) as *mut i32;
                _mm512_mask_storeu_epi32(at, lanes, *v);
            }
        }
    }
}

/// Most output channels per task of [`grad_weight_igemm`]'s direct grid: its
/// sums for every tap of a 64-channel block (9 x 96 x 64 floats for 3 x 3)
/// stay in L2.
const RBLOCK: usize = 8 * igemm::MR;

/// Whether the float32 weight gradient takes [`grad_weight_rows`]: layers
/// [`taps_in_place`] leaves for their few input channels and
/// [`dots_of_rows`] for their narrow output rows (a stem on a small image),
/// with at least a panel of im2col rows, output channels that fill
/// `NR`-wide panels with at most a fifth wasted, and an im2col larger than
/// the input.
fn rows_as_a(g: &Conv2d) -> bool {
    let ocg = g.ocg();
    g.kp() * g.p() > g.hw() && g.ck() >= igemm::MR && ocg.next_multiple_of(igemm::NR) * 4 <= ocg * 5
}

thread_local! {
    /// [`grad_weight_rows`]' padded input, transposed output gradient,
    /// partial sums per segment and sums (the calling thread's, reused
    /// across calls).
    static GW_ROWS: RefCell<[Vec<f32>; 4]> =
        const { RefCell::new([Vec::new(), Vec::new(), Vec::new(), Vec::new()]) };
}

/// The weight gradient with the roles of [`grad_weight_igemm`] swapped, for
/// few input channels: `gw^T (C/G*KH*KW x OC/G) = sum over positions of
/// im2col (C/G*KH*KW x P) @ grad^T (P x OC/G)`. The output gradient,
/// transposed once to positions x channels, is B read in place
/// ([`igemm::Rows`]); im2col is packed as A one block of 128 positions at a
/// time straight from a zero-padded copy of the input (row `(c, kh, kw)`,
/// column `(oh, ow)` at a row offset plus a column offset:
/// [`igemm::pack_a_all_with`]) and used at once while it is in cache (packed
/// whole, the stem's im2col is 8 MB a sample and streamed from memory twice).
/// With 3 input channels the 64 output channels fill the panels that 3
/// channels could not (the gemm crate's path took 2.2-2.6x CPU's time on
/// resnet18's stem; at 224 x 224 the stem now takes [`grad_weight_dots`],
/// this path its narrow rows on small images). Tasks are fixed segments of
/// [`SEGMENT`] positions of one sample, each summing its blocks in order
/// into its own partial sums; the partials are then added in (sample,
/// segment) order, so the bits do not depend on the thread count. Samples
/// in chunks within `budget` floats.
fn grad_weight_rows(g: &Conv2d, gw: *mut f32, grad: *const f32, x: *const f32, budget: usize) {
    use igemm::{KC, NR};
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let ([dh, dw], [ph, pw]) = (g.dilation, g.padding);
    let (hp, wp) = (g.h + 2 * ph, g.w + 2 * pw);
    let (gw, grad, x) = (P(gw), P(grad as *mut f32), P(x as *mut f32));
    let plane = hp * wp;
    let (xsample, gsample) = (g.c * plane, p * g.oc);
    // im2col of one group: row r = (c, tap) and column q = (oh, ow) at
    // row(r) + col(q) from the group's first padded plane.
    let row = |r: usize| {
        let (c, tap) = (r / kp, r % kp);
        (c * plane + (tap / g.kw) * dh * wp + (tap % g.kw) * dw) as isize
    };
    let cols = window_origins(g, wp, 1);
    // B's row q: the transposed gradient's channels at position q.
    let brows: Vec<isize> = (0..p).map(|q| (q * g.oc) as isize).collect();
    let segs = p.div_ceil(SEGMENT);
    let part = g.groups * ck * ocg;
    let per_sample = xsample + gsample + segs * part;
    let chunk = (budget / per_sample).clamp(1, g.n);
    // Positions per task of the gradient's transpose.
    const QB: usize = 64;
    let qblocks = p.div_ceil(QB);
    GW_ROWS.with(|bufs| {
        let mut bufs = bufs.borrow_mut();
        let [xp, gt, parts, sums] = &mut *bufs;
        for (buf, len) in [
            (&mut *xp, chunk * xsample),
            (&mut *gt, chunk * gsample + NR),
            (&mut *parts, chunk * segs * part),
            (&mut *sums, part),
        ] {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        }
        let (xpp, gtp) = (P(xp.as_mut_ptr()), P(gt.as_mut_ptr()));
        let (pp, sp) = (P(parts.as_mut_ptr()), P(sums.as_mut_ptr()));
        for n0 in (0..g.n).step_by(chunk) {
            let nn = chunk.min(g.n - n0);
            // Zero-padded planes of samples n0.., a plane per task.
            parallel::parallel_for(nn * g.c, |t| {
                // SAFETY: task t writes padded plane t only; reads input plane
                // (n0 + t / C, t % C).
                let (dst, src) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(xpp.at(t * plane), plane),
                        std::slice::from_raw_parts(x.at((n0 * g.c + t) * hw) as *const f32, hw),
                    )
                };
                dst[..ph * wp].fill(0.0);
                dst[(ph + g.h) * wp..].fill(0.0);
                for (ih, src) in src.chunks_exact(g.w).enumerate() {
                    let d = &mut dst[(ph + ih) * wp..(ph + ih + 1) * wp];
                    d[..pw].fill(0.0);
                    d[pw..pw + g.w].copy_from_slice(src);
                    d[pw + g.w..].fill(0.0);
                }
            });
            // The output gradient as positions x channels, QB positions a task.
            parallel::parallel_for(nn * qblocks, |t| {
                let (n, qb) = (t / qblocks, t % qblocks);
                let (q0, q1) = (qb * QB, ((qb + 1) * QB).min(p));
                // SAFETY: task t writes positions q0..q1 of sample n only.
                unsafe {
                    let dst = gtp.at(n * gsample);
                    for o in 0..g.oc {
                        let src = grad.at(((n0 + n) * g.oc + o) * p);
                        for q in q0..q1 {
                            *dst.add(q * g.oc + o) = *src.add(q);
                        }
                    }
                }
            });
            // SAFETY: the NR floats of slack after the chunk's last sample.
            unsafe { std::slice::from_raw_parts_mut(gtp.at(nn * gsample), NR).fill(0.0) };
            parallel::parallel_for(nn * segs, |task| {
                let (n, seg) = (task / segs, task % segs);
                let (q0, q1) = (seg * SEGMENT, ((seg + 1) * SEGMENT).min(p));
                A_BLOCK.with(|ab| {
                    let mut ab = ab.borrow_mut();
                    let len = igemm::packed_len(ck, KC);
                    if ab.len() < len {
                        ab.resize(len, 0.0);
                    }
                    for grp in 0..g.groups {
                        let c = pp.at((task * g.groups + grp) * ck * ocg);
                        let src = xpp.at((n * g.c + grp * cg) * plane) as *const f32;
                        for k0 in (q0..q1).step_by(KC) {
                            let kc = KC.min(q1 - k0);
                            // SAFETY: rows and columns stay inside sample n's
                            // group planes (a valid output position reads a
                            // padded position through every tap); B's rows
                            // are sample n's transposed gradient (or the
                            // slack after the chunk); the task writes its
                            // own partial sums.
                            unsafe {
                                let col = |q: usize| cols[k0 + q];
                                igemm::pack_a_all_with(
                                    src,
                                    row,
                                    col,
                                    ck,
                                    kc,
                                    igemm::Walk::AlongK,
                                    &mut ab,
                                );
                                let a = igemm::A {
                                    ptr: ab.as_ptr(),
                                    rows: ck,
                                    first: 0,
                                };
                                let b = igemm::Rows {
                                    base: gtp.at(n * gsample + grp * ocg),
                                    offs: &brows[k0..k0 + kc],
                                };
                                igemm::gemm(ck, ocg, kc, a, b, c, ocg, k0 > q0);
                            }
                        }
                    }
                });
            });
            // Partials into the sums, in (sample, segment) order.
            // SAFETY: the sums hold `part` floats, the partials nn * segs
            // times as many.
            unsafe { add_partials(sp, pp, nn * segs, part, n0 == 0) };
        }
        // gw[grp * ocg + o, r] = sums[grp, r, o]
        let sums = &*sums;
        parallel::parallel_for(g.oc, |o| {
            let (grp, oo) = (o / ocg, o % ocg);
            // SAFETY: task o writes row o of gw only.
            let dst = unsafe { std::slice::from_raw_parts_mut(gw.at(o * ck), ck) };
            for (r, v) in dst.iter_mut().enumerate() {
                *v = sums[(grp * ck + r) * ocg + oo];
            }
        });
        for buf in bufs.iter_mut() {
            release_if_large(buf);
        }
    });
}

/// `dst += parts[0] + parts[1] + ...` for `count` partial sums of `part`
/// floats each, added one at a time in order (so the bits depend on the
/// split into partials only, never on the thread count), the first copied
/// over `dst` when `overwrite`; tasks over blocks of elements.
///
/// # Safety
/// `dst` holds `part` floats and `parts` `count * part`, and nothing else
/// touches them meanwhile.
unsafe fn add_partials(dst: P<f32>, parts: P<f32>, count: usize, part: usize, overwrite: bool) {
    parallel::parallel_for(part.div_ceil(1024), |t| {
        let (e0, e1) = (t * 1024, ((t + 1) * 1024).min(part));
        // SAFETY: task t owns elements e0..e1 of dst; the caller's bounds.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(dst.at(e0), e1 - e0);
            for pi in 0..count {
                let src = std::slice::from_raw_parts(parts.at(pi * part + e0), e1 - e0);
                if overwrite && pi == 0 {
                    dst.copy_from_slice(src);
                } else {
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d += v;
                    }
                }
            }
        }
    });
}

/// Positions per task of [`grad_weight_rows`] (a fixed split: the sums do
/// not depend on the thread count).
const SEGMENT: usize = 16 * igemm::KC;

thread_local! {
    /// [`grad_weight_rows`]' packed block of im2col (per thread).
    static A_BLOCK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether the float32 weight gradient takes [`grad_weight_dots`]: layers
/// [`taps_in_place`] leaves for their few input channels per group (the
/// stems), except 1x1 stride-1 ones (a plain product), whose output rows
/// fill 16-lane vectors with at most a fifth wasted. Measured at batch 8,
/// alternating in one process (time against the path each layer took
/// before, at one and at two threads): mobilenet_v3_small's 3 -> 16
/// stem 0.30-0.31 of the gemm crate's over im2col tiles, resnet18's 3 -> 64
/// 7 x 7 stem 0.65-0.68 of [`grad_weight_rows`], 3 -> 32 3 x 3 at 64 x 64
/// 0.37-0.39; the 7 x 7 stem on a 64 x 64 image (16-wide rows) 1.05. On rows
/// that fill vectors poorly [`grad_weight_rows`] stays ahead (3 -> 64 at
/// 7 x 7: dots 1.8x its time, 8 -> 64 stride 2 at 20 x 20 1.4x, 4 -> 48
/// 5 x 5 at 10 x 10 1.3x).
fn dots_of_rows(g: &Conv2d) -> bool {
    !g.pointwise() && g.ow.next_multiple_of(16) * 4 <= g.ow * 5
}

/// Output rows per task of [`grad_weight_dots`] (a fixed split: the sums do
/// not depend on the thread count).
const DOT_ROWS: usize = 16;

thread_local! {
    /// [`grad_weight_dots`]' partial sums per segment (the calling
    /// thread's, reused across calls).
    static GW_DOTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The weight gradient as dot products along output rows, for layers with
/// few input channels per group: `gw[o, (c, kh, kw)] = sum over
/// samples and positions of grad[o, oh, ow] * x[c, oh * sh + kh * dh - ph,
/// ow * sw + kw * dw - pw]`. Split into its stride's phase planes (see
/// [`phase_dims`]), the input row a tap reads along an output row is a
/// contiguous run of a phase plane, as the gradient's row is: [`dots::tile`]
/// sums `O x R` such pairs at a time in 16-lane accumulators, no operand
/// packed or transposed, at the machine's multiply-add rate (perf: 59% of
/// the stem's samples in the kernel, 16% splitting phases). mobilenet_v3_small's
/// 3 -> 16 stem (16 x 27 sums over 12,544 positions a sample) had taken
/// the gemm crate over im2col tiles, its 16 rows in a third-empty register
/// tile: 2.5x CPU's time.
/// Tasks are segments of [`DOT_ROWS`] output rows of one sample; each
/// splits the phase rows its segment reads and writes partial sums of the
/// whole gradient, which are then added in (sample, segment) order: the
/// same bits for any thread count. Samples in chunks within `budget`
/// floats of partial sums.
fn grad_weight_dots(g: &Conv2d, gw: *mut f32, grad: *const f32, x: *const f32, budget: usize) {
    let (p, hw, cg, ocg, ck, kp) = (g.p(), g.hw(), g.cg(), g.ocg(), g.ck(), g.kp());
    let ([sh, sw], [dh, dw]) = (g.stride, g.dilation);
    let wq = phase_dims(g).1;
    let (gw, grad, x) = (P(gw), P(grad as *mut f32), P(x as *mut f32));
    // A segment reads its own rows of each phase plane and up to `reach`
    // more (the last kernel row's).
    let reach = (g.kh - 1) * dh / sh;
    let prows = DOT_ROWS.min(g.oh) + reach;
    // A segment's planes of one channel: sh * sw phases of prows x wq.
    let chan = sh * sw * prows * wq;
    // Where B row (c, tap) starts in a segment's planes.
    let offs: Vec<isize> = (0..ck)
        .map(|r| {
            let (c, tap) = (r / kp, r % kp);
            let (rh, rw) = ((tap / g.kw) * dh, (tap % g.kw) * dw);
            let phase = (rh % sh) * sw + rw % sw;
            (c * chan + phase * prows * wq + (rh / sh) * wq + rw / sw) as isize
        })
        .collect();
    let segs = g.oh.div_ceil(DOT_ROWS);
    let part = g.oc * ck;
    let chunk = (budget / (segs * part)).clamp(1, g.n);
    GW_DOTS.with(|parts| {
        let mut parts = parts.borrow_mut();
        if parts.len() < chunk * segs * part {
            parts.resize(chunk * segs * part, 0.0);
        }
        let pp = P(parts.as_mut_ptr());
        for n0 in (0..g.n).step_by(chunk) {
            let nn = chunk.min(g.n - n0);
            parallel::parallel_for(nn * segs, |task| {
                let (n, seg) = (n0 + task / segs, task % segs);
                let (oh0, oh1) = (seg * DOT_ROWS, ((seg + 1) * DOT_ROWS).min(g.oh));
                let rows = oh1 - oh0 + reach;
                with_scratch::<f32, _>(cg * chan, |planes| {
                    for grp in 0..g.groups {
                        for (i, dst) in planes.chunks_exact_mut(prows * wq).enumerate() {
                            let (c, phase) = (i / (sh * sw), i % (sh * sw));
                            let (a, b) = (phase / sw, phase % sw);
                            if phase_used(a, g.kh, dh, sh) && phase_used(b, g.kw, dw, sw) {
                                // SAFETY: input plane (n, grp * cg + c).
                                let src = unsafe {
                                    let at = x.at((n * g.c + grp * cg + c) * hw);
                                    std::slice::from_raw_parts(at as *const f32, hw)
                                };
                                split_phase(g, src, (a, b), oh0, wq, &mut dst[..rows * wq]);
                            }
                        }
                        for o0 in (0..ocg).step_by(dots::O) {
                            for r0 in (0..ck).step_by(dots::R) {
                                let r1 = (r0 + dots::R).min(ck);
                                // SAFETY: the gradient rows oh0..oh1 of
                                // output channels o0.. of sample n; B's rows
                                // stay inside this segment's planes (a valid
                                // output position reads a padded position
                                // through every tap); the task writes its
                                // own partial sums.
                                unsafe {
                                    dots::tile(
                                        dots::O.min(ocg - o0),
                                        oh1 - oh0,
                                        g.ow,
                                        grad.at(((n * g.oc + grp * ocg + o0) * g.oh + oh0) * g.ow),
                                        p,
                                        g.ow,
                                        planes.as_ptr(),
                                        &offs[r0..r1],
                                        wq,
                                        pp.at(task * part + (grp * ocg + o0) * ck + r0),
                                        ck,
                                        false,
                                    )
                                };
                            }
                        }
                    }
                });
            });
            // The partial sums into gw, in (sample, segment) order.
            // SAFETY: gw holds `part` floats, the partials nn * segs times
            // as many.
            unsafe { add_partials(gw, pp, nn * segs, part, n0 == 0) };
        }
        release_if_large(&mut parts);
    });
}

/// Output channels per task of [`grad_weight_pointwise`].
const PW_ROWS: usize = 4 * dots::O;

/// The weight gradient of a 1x1 stride-1 layer as dot products of whole
/// planes: `gw[o, c] = sum over samples and positions of grad[n, o, q] *
/// x[n, c, q]`, both operands read in place, contiguous along the positions
/// ([`dots::tile`]: `O x R` sums at a time, a chunk of samples as its rows,
/// the chunk's `O + R` planes within [`PW_L1`]). The gemm crate's path, one
/// product per sample (`grad_n @ x_n^T`, x's planes packed transposed every
/// time), took 1.5-2.7x torch CPU's time on mobilenet_v3_small's 1x1 layers
/// (batch 8, one thread); alternating both in one process, this one's time
/// against CPU's: 0.86-0.99 at 28 x 28 (was 1.55-2.25), 1.15-1.43 at 56 x
/// 56 (1.19-1.56), 0.96-1.81 at 14 x 14 (1.23-2.37), 1.41-1.59 at 7 x 7
/// except 576 -> 96 (1.97, was 1.69). Chunks that hold the planes of all
/// `PW_ROWS` output channels were slower (more lane sums per product);
/// whole batches as one chunk too (planes from L2). Each output sums its
/// chunks in order, each chunk in 16 lane-wise partial sums added in a
/// fixed tree; tasks own whole outputs (blocks of [`PW_ROWS`] output
/// channels), so the bits do not depend on the thread count.
fn grad_weight_pointwise(g: &Conv2d, gw: *mut f32, grad: *const f32, x: *const f32) {
    let (p, cg, ocg) = (g.p(), g.cg(), g.ocg());
    let (gw, grad, x) = (P(gw), P(grad as *mut f32), P(x as *mut f32));
    let offs: Vec<isize> = (0..cg).map(|c| (c * p) as isize).collect();
    let blocks = ocg.div_ceil(PW_ROWS);
    // Samples per tile call: the O + R planes of a call within L1.
    let chunk = (PW_L1 / ((dots::O + dots::R) * p.next_multiple_of(16) * 4)).clamp(1, g.n);
    parallel::parallel_for(g.groups * blocks, |task| {
        let (grp, blk) = (task / blocks, task % blocks);
        let (o_lo, o_hi) = (blk * PW_ROWS, ((blk + 1) * PW_ROWS).min(ocg));
        for n0 in (0..g.n).step_by(chunk) {
            let nn = chunk.min(g.n - n0);
            for c0 in (0..cg).step_by(dots::R) {
                let c1 = (c0 + dots::R).min(cg);
                for o0 in (o_lo..o_hi).step_by(dots::O) {
                    // SAFETY: planes of output channels o0.. and input
                    // channels c0..c1 of samples n0..n0+nn; the task's own
                    // outputs.
                    unsafe {
                        dots::tile(
                            dots::O.min(o_hi - o0),
                            nn,
                            p,
                            grad.at((n0 * g.oc + grp * ocg + o0) * p),
                            p,
                            g.oc * p,
                            x.at((n0 * g.c + grp * cg) * p),
                            &offs[c0..c1],
                            g.c * p,
                            gw.at((grp * ocg + o0) * cg + c0),
                            cg,
                            n0 > 0,
                        )
                    };
                }
            }
        }
    });
}

/// Bytes of planes a [`grad_weight_pointwise`] tile call reads.
const PW_L1: usize = 32 << 10;

fn grad_bias_t<T: Real>(g: &Conv2d, gb: *mut u8, grad: *mut u8) {
    let (gb, grad) = (P(gb as *mut T), P(grad as *mut T));
    let p = g.p();
    parallel::parallel_for(g.oc, |o| {
        let mut acc = T::ZERO;
        for n in 0..g.n {
            // SAFETY: plane (n, o) of grad; task `o` writes gb[o] only.
            let s = unsafe { std::slice::from_raw_parts(grad.at((n * g.oc + o) * p), p) };
            let mut lanes = [T::ZERO; 8];
            let mut it = s.chunks_exact(8);
            for ch in &mut it {
                for l in 0..8 {
                    lanes[l] += ch[l];
                }
            }
            for (i, &v) in it.remainder().iter().enumerate() {
                lanes[i] += v;
            }
            acc += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
                + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        }
        unsafe { *gb.at(o) = acc };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct reference convolution.
    fn reference(g: &Conv2d, x: &[f64], w: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; g.n * g.oc * g.p()];
        let (cg, ocg) = (g.cg(), g.ocg());
        for n in 0..g.n {
            for o in 0..g.oc {
                let grp = o / ocg;
                for oh in 0..g.oh {
                    for ow in 0..g.ow {
                        let mut s = 0.0;
                        for c in 0..cg {
                            for ki in 0..g.kh {
                                for kj in 0..g.kw {
                                    let ih = (oh * g.stride[0] + ki * g.dilation[0]) as isize
                                        - g.padding[0] as isize;
                                    let iw = (ow * g.stride[1] + kj * g.dilation[1]) as isize
                                        - g.padding[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= g.h as isize || iw >= g.w as isize
                                    {
                                        continue;
                                    }
                                    s += x[((n * g.c + grp * cg + c) * g.h + ih as usize) * g.w
                                        + iw as usize]
                                        * w[((o * cg + c) * g.kh + ki) * g.kw + kj];
                                }
                            }
                        }
                        out[((n * g.oc + o) * g.oh + oh) * g.ow + ow] = s;
                    }
                }
            }
        }
        out
    }

    /// A test case's geometry: input and weight shapes, stride, padding,
    /// dilation and groups; the output size follows.
    fn case_geometry(
        x: [usize; 4],
        w: [usize; 4],
        s: [usize; 2],
        pd: [usize; 2],
        d: [usize; 2],
        groups: usize,
    ) -> Conv2d {
        let oh = (x[2] + 2 * pd[0] - d[0] * (w[2] - 1) - 1) / s[0] + 1;
        let ow = (x[3] + 2 * pd[1] - d[1] * (w[3] - 1) - 1) / s[1] + 1;
        geometry(&x, &w, [oh, ow], s, pd, d, groups).unwrap()
    }

    fn run(
        x: [usize; 4],
        w: [usize; 4],
        s: [usize; 2],
        pd: [usize; 2],
        d: [usize; 2],
        groups: usize,
    ) {
        let g = case_geometry(x, w, s, pd, d, groups);
        let (oh, ow) = (g.oh, g.ow);
        let xv: Vec<f64> = (0..x.iter().product::<usize>())
            .map(|i| ((i * 7919) % 13) as f64 - 6.0)
            .collect();
        let wv: Vec<f64> = (0..w.iter().product::<usize>())
            .map(|i| ((i * 104729) % 11) as f64 - 5.0)
            .collect();
        let mut out = vec![0.0f64; g.n * g.oc * g.p()];
        let xs = Strided::contiguous(xv.as_ptr() as *mut u8, DType::F64, &x);
        let ws = Strided::contiguous(wv.as_ptr() as *mut u8, DType::F64, &w);
        let os = Strided::contiguous(
            out.as_mut_ptr() as *mut u8,
            DType::F64,
            &[g.n, g.oc, oh, ow],
        );
        forward(&g, &os, &xs, &ws, None).unwrap();
        assert_eq!(out, reference(&g, &xv, &wv));
    }

    /// Direct reference gradients w.r.t. the input and the weight.
    fn reference_grads(g: &Conv2d, x: &[f64], w: &[f64], grad: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let mut gi = vec![0.0; g.n * g.c * g.hw()];
        let mut gw = vec![0.0; g.oc * g.ck()];
        let (cg, ocg) = (g.cg(), g.ocg());
        for n in 0..g.n {
            for o in 0..g.oc {
                let grp = o / ocg;
                for oh in 0..g.oh {
                    for ow in 0..g.ow {
                        let gv = grad[((n * g.oc + o) * g.oh + oh) * g.ow + ow];
                        for c in 0..cg {
                            for ki in 0..g.kh {
                                for kj in 0..g.kw {
                                    let ih = (oh * g.stride[0] + ki * g.dilation[0]) as isize
                                        - g.padding[0] as isize;
                                    let iw = (ow * g.stride[1] + kj * g.dilation[1]) as isize
                                        - g.padding[1] as isize;
                                    if ih < 0 || iw < 0 || ih >= g.h as isize || iw >= g.w as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((n * g.c + grp * cg + c) * g.h + ih as usize) * g.w
                                        + iw as usize;
                                    let wi = ((o * cg + c) * g.kh + ki) * g.kw + kj;
                                    gi[xi] += gv * w[wi];
                                    gw[wi] += gv * x[xi];
                                }
                            }
                        }
                    }
                }
            }
        }
        (gi, gw)
    }

    /// (x, w, stride, padding, dilation, groups)
    type GwCase = (
        [usize; 4],
        [usize; 4],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
    );

    /// A float32 weight-gradient kernel (`kernel(g, gw, grad, x, budget)`)
    /// against the direct reference on small integers (exact sums), in the
    /// chunks of samples the kernel picks and in smaller ones down to one
    /// sample per chunk (the sums carry across chunks); `takes` is the rule
    /// that must send each case there.
    fn check_weight_gradient(
        cases: &[GwCase],
        takes: fn(&Conv2d) -> bool,
        kernel: fn(&Conv2d, *mut f32, *const f32, *const f32, usize),
    ) {
        for &(x, w, s, pd, d, groups) in cases {
            let g = case_geometry(x, w, s, pd, d, groups);
            assert!(takes(&g), "{x:?} {w:?}");
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let gv = ints(g.n * g.oc * g.p(), 104729, 5);
            let (_, want) = reference_grads(&g, &xv, &vec![0.0; g.oc * g.ck()], &gv);
            let (x32, g32): (Vec<f32>, Vec<f32>) = (
                xv.iter().map(|&v| v as f32).collect(),
                gv.iter().map(|&v| v as f32).collect(),
            );
            // The chunks a layer would take (usize::MAX; for
            // grad_weight_igemm, all samples at these sizes but for the
            // largest cases, one a chunk), one per chunk, and budgets
            // between (chunks of some samples, a shorter last chunk).
            let plane = g.c * g.hw();
            let budgets = [usize::MAX, 1]
                .into_iter()
                .chain((2..=8).map(|k| k * plane));
            for budget in budgets {
                // One thread and many: grad_weight_igemm's two task grids.
                for threads in [1, 64] {
                    let mut gw = vec![f32::NAN; g.oc * g.ck()];
                    crate::kernels::parallel::with_threads(threads, || {
                        kernel(&g, gw.as_mut_ptr(), g32.as_ptr(), x32.as_ptr(), budget)
                    });
                    let got: Vec<f64> = gw.iter().map(|&v| v as f64).collect();
                    assert_eq!(got, want, "{x:?} {w:?} budget {budget} threads {threads}");
                }
            }
        }
    }

    /// [`grad_weight_igemm`]: groups, strides, dilation, uneven padding,
    /// channel blocks of one and of two micro-panels.
    #[test]
    fn weight_gradient_taps_in_place_matches_reference() {
        if !igemm::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([3, 64, 7, 9], [5, 64, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([2, 104, 9, 7], [8, 52, 3, 2], [2, 1], [1, 0], [1, 2], 2),
            ([3, 30, 6, 6], [16, 30, 3, 3], [2, 2], [2, 1], [2, 1], 1),
            // Rows wider than one 16-column block of the channels-last copy.
            ([2, 60, 5, 37], [7, 60, 3, 3], [1, 2], [1, 1], [1, 1], 1),
            // Stride 3: three phases a row and a column, the last short.
            ([2, 32, 13, 14], [16, 32, 3, 3], [3, 3], [1, 1], [1, 1], 1),
            // 1,056 positions a sample, stride 2: one product per sample
            // (the cases above join their samples' positions into one
            // product, below JOIN_POSITIONS).
            ([2, 32, 64, 66], [24, 32, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            // Several blocks of output channels, the last one short, in
            // channel blocks of two micro-panels (joined samples, and one
            // product per sample with groups). At one thread every case
            // takes the direct grid, at 64 threads the tap grid.
            ([3, 32, 5, 6], [300, 32, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([2, 64, 32, 32], [200, 32, 3, 3], [1, 1], [1, 1], [1, 1], 2),
            // One product per sample on the direct grid in channel blocks
            // of one micro-panel (one thread), with groups: several KC
            // blocks of positions and a short last one.
            ([2, 32, 32, 33], [24, 32, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([2, 64, 31, 35], [40, 32, 3, 3], [1, 1], [1, 1], [1, 1], 2),
            // Positions a cache line further apart than the channels
            // (position_stride: 128 and 256 channels), with groups, joined
            // samples and one product per sample.
            ([2, 128, 6, 7], [20, 128, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([2, 256, 32, 32], [26, 128, 3, 3], [1, 1], [1, 1], [1, 1], 2),
        ];
        check_weight_gradient(cases, taps_in_place, grad_weight_igemm);
    }

    /// [`grad_weight_dots`]: mobilenet's stem shape (small), groups,
    /// dilation, uneven strides and padding, a 1x1 stride-2 layer (one
    /// phase of four read), a short last segment, short tiles of output
    /// channels and of taps, partial vectors.
    #[test]
    fn weight_gradient_dots_match_reference() {
        if !dots::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([2, 3, 36, 30], [16, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([2, 4, 20, 40], [6, 2, 3, 3], [1, 1], [1, 1], [1, 1], 2),
            ([1, 3, 41, 60], [5, 3, 2, 3], [1, 2], [2, 1], [2, 2], 1),
            ([3, 5, 20, 32], [7, 5, 1, 1], [2, 2], [0, 0], [1, 1], 1),
            ([1, 2, 23, 60], [3, 2, 5, 5], [3, 2], [2, 2], [1, 1], 1),
        ];
        check_weight_gradient(
            cases,
            |g| !taps_in_place(g) && dots_of_rows(g),
            grad_weight_dots,
        );
    }

    /// [`grad_weight_rows`]: resnet's stem shape (small), groups, dilation, a
    /// short last row panel and output-channel panel, samples of more than
    /// one segment.
    #[test]
    fn weight_gradient_rows_as_a_matches_reference() {
        if !igemm::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([2, 3, 23, 21], [64, 3, 7, 7], [2, 2], [3, 3], [1, 1], 1),
            ([3, 4, 9, 11], [60, 2, 3, 4], [1, 2], [2, 1], [2, 1], 2),
            ([1, 2, 5, 50], [30, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            // 2,500 positions: two segments of a sample.
            ([2, 2, 50, 50], [32, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1),
        ];
        // The rows path is the one for layers the taps and dots paths leave.
        check_weight_gradient(
            cases,
            |g| !taps_in_place(g) && !dots_of_rows(g) && rows_as_a(g),
            grad_weight_rows,
        );
    }

    /// [`winograd`]: the forward (weight as given) and the input gradient
    /// (stride 1: the transposed weight, [`transposed`]; stride 2 and
    /// padding 1: [`winograd::input_gradient`]) against the
    /// direct reference on small integers, where every transform and sum is
    /// exact: paddings 0-2 (the input gradient's 2-0), odd output sizes
    /// (half-outside last tiles), input rows and columns no output reads
    /// (stride 2), channels off the 32-channel blocks and the 12-row panels,
    /// runs of tiles across rows and samples, rows of several runs, tasks'
    /// last tiles; then the same on random floats bit for bit at 1 and 3
    /// threads.
    #[test]
    fn winograd_matches_reference() {
        let _level = crate::kernels::elementwise::simd::level_held();
        if !igemm::wide() {
            return;
        }
        // (x, output channels, padding, stride)
        let cases: &[([usize; 4], usize, [usize; 2], usize)] = &[
            ([2, 32, 14, 14], 32, [1, 1], 1),
            ([3, 40, 9, 11], 37, [1, 1], 1),
            ([3, 70, 12, 7], 33, [0, 2], 1),
            ([5, 33, 7, 7], 64, [2, 0], 1),
            ([1, 32, 40, 38], 45, [1, 1], 1),
            ([2, 32, 28, 28], 100, [1, 1], 2),
            ([6, 40, 13, 11], 37, [1, 1], 2),
            ([4, 33, 17, 20], 64, [0, 0], 2),
            ([4, 70, 17, 20], 33, [2, 0], 2),
            ([1, 32, 70, 140], 45, [1, 2], 2),
            ([6, 40, 15, 12], 97, [1, 1], 2),
            ([1, 33, 64, 130], 96, [1, 1], 2),
        ];
        for &(x, oc, pd, s) in cases {
            let g = case_geometry(x, [oc, x[1], 3, 3], [s, s], pd, [1, 1], 1);
            let t = transposed(&g);
            assert_eq!(t.is_some(), s == 1);
            assert!(winograd::applies(&g), "{x:?} {oc} {s}");
            assert!(t.as_ref().is_none_or(winograd::applies), "{x:?} {oc}");
            // Stride 2: the input gradient's own scheme, for padding 1, 96
            // output channels and tiles that fit the input well.
            let outputs = 16 * x[2].div_ceil(4) * x[3].div_ceil(4);
            let strided = s == 2 && 20 * outputs <= 23 * x[2] * x[3];
            assert_eq!(
                winograd::applies_input_gradient(&g),
                strided && pd == [1, 1] && oc >= 96
            );
            let has_gi = t.is_some() || winograd::applies_input_gradient(&g);
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let wv = ints(g.oc * g.ck(), 104729, 5);
            let gv = ints(g.n * g.oc * g.p(), 15485863, 5);
            let want_out = reference(&g, &xv, &wv);
            let (want_gi, _) = reference_grads(&g, &xv, &wv, &gv);
            let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&a| a as f32).collect() };
            let (x32, w32, g32) = (f32s(&xv), f32s(&wv), f32s(&gv));
            let run = |x32: &[f32], w32: &[f32], g32: &[f32], threads: usize| {
                let mut out = vec![f32::NAN; g.n * g.oc * g.p()];
                let mut gi = vec![f32::NAN; g.n * g.c * g.hw()];
                parallel::with_threads(threads, || {
                    let w = w32.as_ptr();
                    winograd::forward(&g, out.as_mut_ptr(), x32.as_ptr(), Weight::Given(w));
                    if let Some(t) = &t {
                        let wt = Weight::Transposed(w);
                        winograd::forward(t, gi.as_mut_ptr(), g32.as_ptr(), wt);
                    } else if has_gi {
                        winograd::input_gradient(&g, gi.as_mut_ptr(), g32.as_ptr(), w);
                    }
                });
                (out, gi)
            };
            let (out, gi) = run(&x32, &w32, &g32, 1);
            let f64s = |v: &[f32]| -> Vec<f64> { v.iter().map(|&a| a as f64).collect() };
            assert_eq!(f64s(&out), want_out, "forward {x:?} {oc} {pd:?} {s}");
            if has_gi {
                assert_eq!(f64s(&gi), want_gi, "input gradient {x:?} {oc} {pd:?} {s}");
            }
            let noise = |n: usize, seed: u64| f32s(&crate::kernels::uniform(n, seed));
            let (x32, w32, g32) = (
                noise(x32.len(), 1),
                noise(w32.len(), 2),
                noise(g32.len(), 3),
            );
            let one = run(&x32, &w32, &g32, 1);
            let three = run(&x32, &w32, &g32, 3);
            let bits = |v: &[f32]| -> Vec<u32> { v.iter().map(|a| a.to_bits()).collect() };
            assert_eq!(bits(&one.0), bits(&three.0), "forward threads {x:?} {s}");
            assert_eq!(bits(&one.1), bits(&three.1), "input gradient threads {x:?}");
        }
    }

    /// [`direct`] (few input channels) through [`forward`], with a bias,
    /// against the direct reference on small integers (exact): strides 1-3,
    /// dilation, uneven padding, no padding, a last block of output channels
    /// of half width (20 = 16 + 4) and of full width (40 = 16 + 16 + 8),
    /// rows ending mid-vector; then random floats bit for bit at 1 and 3
    /// threads.
    #[test]
    fn direct_matches_reference() {
        let _level = crate::kernels::elementwise::simd::level_held();
        if !igemm::wide() {
            return;
        }
        /// (x, weight, stride, padding, dilation)
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 2], [usize; 2]);
        let cases: &[Case] = &[
            ([2, 3, 40, 37], [16, 3, 3, 3], [2, 2], [1, 1], [1, 1]),
            ([1, 3, 30, 70], [40, 3, 7, 7], [2, 2], [3, 3], [1, 1]),
            ([2, 1, 20, 64], [20, 1, 5, 3], [2, 3], [2, 1], [1, 2]),
            ([3, 2, 9, 50], [17, 2, 3, 3], [1, 1], [0, 0], [1, 1]),
            ([1, 4, 5, 33], [24, 4, 2, 4], [1, 1], [1, 2], [2, 1]),
        ];
        for &(x, w, s, pd, d) in cases {
            let g = case_geometry(x, w, s, pd, d, 1);
            assert!(direct::applies(&g), "{x:?} {w:?}");
            let run = |xv: &[f32], wv: &[f32], bv: &[f32], threads: usize| {
                let mut out = vec![f32::NAN; g.n * g.oc * g.p()];
                let f = |v: &[f32], shape: &[usize]| {
                    Strided::contiguous(v.as_ptr() as *mut u8, DType::F32, shape)
                };
                let shape = [g.n, g.oc, g.oh, g.ow];
                let os = Strided::contiguous(out.as_mut_ptr() as *mut u8, DType::F32, &shape);
                let (xs, ws, bs) = (f(xv, &x), f(wv, &w), f(bv, &[g.oc]));
                parallel::with_threads(threads, || forward(&g, &os, &xs, &ws, Some(&bs)).unwrap());
                out
            };
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let wv = ints(g.oc * g.ck(), 104729, 5);
            let bv = ints(g.oc, 31, 9);
            let mut want = reference(&g, &xv, &wv);
            for (i, v) in want.iter_mut().enumerate() {
                *v += bv[(i / g.p()) % g.oc];
            }
            let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&a| a as f32).collect() };
            let out = run(&f32s(&xv), &f32s(&wv), &f32s(&bv), 1);
            let got: Vec<f64> = out.iter().map(|&a| a as f64).collect();
            assert_eq!(got, want, "{x:?} {w:?}");
            let noise = |n: usize, seed: u64| f32s(&crate::kernels::uniform(n, seed));
            let (xv, wv, bv) = (noise(xv.len(), 1), noise(wv.len(), 2), noise(bv.len(), 3));
            let bits = |v: Vec<f32>| -> Vec<u32> { v.iter().map(|a| a.to_bits()).collect() };
            assert_eq!(
                bits(run(&xv, &wv, &bv, 1)),
                bits(run(&xv, &wv, &bv, 3)),
                "{x:?}"
            );
        }
    }

    /// Small integers: every sum is exact, in any order, in f32 and f64.
    fn ints(n: usize, mul: usize, m: usize) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * mul) % m) as f64 - (m / 2) as f64)
            .collect()
    }

    /// Forward and both gradients of a depthwise convolution, in `T`, at
    /// SIMD level `level` and `threads` threads.
    fn depthwise_run<T: Real + From<f32> + Into<f64>>(
        g: &Conv2d,
        xv: &[f64],
        wv: &[f64],
        gv: &[f64],
        dt: DType,
        threads: usize,
    ) -> [Vec<f64>; 3] {
        let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&a| T::from(a as f32)).collect() };
        let (x, w, grad) = (cast(xv), cast(wv), cast(gv));
        let mut out = vec![T::ZERO; g.n * g.oc * g.p()];
        let mut gi = vec![T::ZERO; g.n * g.c * g.hw()];
        let mut gw = vec![T::ONE; g.oc * g.ck()];
        let xs = Strided::contiguous(x.as_ptr() as *mut u8, dt, &[g.n, g.c, g.h, g.w]);
        let ws = Strided::contiguous(w.as_ptr() as *mut u8, dt, &[g.oc, 1, g.kh, g.kw]);
        let gs = Strided::contiguous(grad.as_ptr() as *mut u8, dt, &[g.n, g.oc, g.oh, g.ow]);
        let os = Strided::contiguous(out.as_mut_ptr() as *mut u8, dt, &[g.n, g.oc, g.oh, g.ow]);
        let gis = Strided::contiguous(gi.as_mut_ptr() as *mut u8, dt, &[g.n, g.c, g.h, g.w]);
        let gws = Strided::contiguous(gw.as_mut_ptr() as *mut u8, dt, &[g.oc, 1, g.kh, g.kw]);
        parallel::with_threads(threads, || {
            forward(g, &os, &xs, &ws, None).unwrap();
            backward(g, &gs, Some(&xs), &ws, Some(&gis), Some(&gws), None).unwrap();
        });
        let back = |v: Vec<T>| v.into_iter().map(Into::into).collect();
        [back(out), back(gi), back(gw)]
    }

    /// The SIMD depthwise paths (every level this CPU has, 1 and 3 threads,
    /// f32 and f64) against the direct reference: odd widths, borders wider
    /// than the plane, strides 1-3, dilation, asymmetric padding, planes
    /// narrower and wider than a vector.
    #[test]
    fn depthwise_matches_reference_at_every_level() {
        use crate::kernels::elementwise::simd::{self, SimdLevel};
        let _level = simd::level_switch();
        /// (x, kernel, stride, padding, dilation)
        type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2]);
        let cases: &[Case] = &[
            ([2, 3, 7, 7], [5, 5], [1, 1], [2, 2], [1, 1]),
            ([1, 2, 14, 13], [3, 3], [1, 1], [1, 1], [1, 1]),
            ([2, 2, 13, 37], [3, 3], [2, 2], [1, 1], [1, 1]),
            ([1, 3, 12, 50], [5, 5], [2, 2], [2, 2], [1, 1]),
            ([1, 2, 9, 21], [3, 3], [1, 1], [2, 2], [2, 2]),
            ([1, 2, 11, 19], [3, 5], [2, 1], [0, 3], [1, 2]),
            ([1, 1, 10, 40], [3, 3], [3, 3], [1, 1], [1, 1]),
            ([1, 2, 4, 5], [5, 5], [1, 2], [4, 4], [1, 1]),
            ([1, 2, 6, 66], [1, 7], [1, 1], [0, 3], [1, 1]),
            ([3, 2, 5, 3], [3, 3], [2, 2], [1, 1], [1, 1]),
            // More than one block of 16 channels, the last one partial.
            ([2, 17, 7, 7], [5, 5], [2, 2], [2, 2], [1, 1]),
            ([1, 40, 9, 11], [3, 3], [1, 2], [1, 1], [2, 1]),
            ([2, 33, 14, 14], [3, 3], [1, 1], [1, 1], [1, 1]),
        ];
        let start = simd::level();
        let mut levels = vec![SimdLevel::Portable];
        for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
            if simd::detected() >= l {
                levels.push(l);
            }
        }
        for &(x, k, s, pd, d) in cases {
            let oh = (x[2] + 2 * pd[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
            let ow = (x[3] + 2 * pd[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
            let w = [x[1], 1, k[0], k[1]];
            let g = geometry(&x, &w, [oh, ow], s, pd, d, x[1]).unwrap();
            let xv = ints(x.iter().product(), 7919, 13);
            let wv = ints(w.iter().product(), 104729, 11);
            let gv = ints(g.n * g.oc * g.p(), 613, 9);
            let fwd = reference(&g, &xv, &wv);
            let (gi, gw) = reference_grads(&g, &xv, &wv, &gv);
            for (&level, blocked) in levels.iter().flat_map(|l| [(l, false), (l, true)]) {
                simd::set_level(level);
                depthwise::blocked::FORCE.with(|f| f.set(Some(blocked)));
                for threads in [1, 3] {
                    let what = format!(
                        "{x:?} k{k:?} s{s:?} p{pd:?} d{d:?} {level:?} {threads}t blocked {blocked}"
                    );
                    let r = depthwise_run::<f64>(&g, &xv, &wv, &gv, DType::F64, threads);
                    assert_eq!(r, [fwd.clone(), gi.clone(), gw.clone()], "f64 {what}");
                    let r = depthwise_run::<f32>(&g, &xv, &wv, &gv, DType::F32, threads);
                    assert_eq!(r, [fwd.clone(), gi.clone(), gw.clone()], "f32 {what}");
                }
            }
        }
        depthwise::blocked::FORCE.with(|f| f.set(None));
        simd::set_level(start);
    }

    /// Non-integer values: every level and thread count gives the same bits,
    /// and a non-finite input outside every window changes nothing.
    #[test]
    fn depthwise_bits_do_not_depend_on_level_or_threads() {
        use crate::kernels::elementwise::simd::{self, SimdLevel};
        let _level = simd::level_switch();
        // W = 112, 3 wide, stride 2, no column padding: 55 output columns,
        // and input column 111 is in no window (but sits in the padded
        // rows the vector loops read past the last output column).
        let x = [2, 3, 9, 112];
        let (k, s, pd) = ([3, 3], [2, 2], [1, 0]);
        let (oh, ow) = ((x[2] + 2 - 3) / 2 + 1, (x[3] - 3) / 2 + 1);
        let w = [x[1], 1, k[0], k[1]];
        let g = geometry(&x, &w, [oh, ow], s, pd, [1, 1], x[1]).unwrap();
        let frac = |n: usize, m: usize| -> Vec<f64> {
            (0..n)
                .map(|i| ((i * m) % 1000) as f64 / 317.0 - 1.3)
                .collect()
        };
        let mut xv = frac(x.iter().product(), 7919);
        for row in xv.chunks_mut(x[3]) {
            row[x[3] - 1] = f64::INFINITY;
        }
        let wv = frac(w.iter().product(), 104729);
        let gv = frac(g.n * g.oc * g.p(), 613);
        // Both the row kernels and the channel-block kernels.
        for blocked in [false, true] {
            depthwise::blocked::FORCE.with(|f| f.set(Some(blocked)));
            let start = simd::level();
            simd::set_level(SimdLevel::Portable);
            let base = depthwise_run::<f32>(&g, &xv, &wv, &gv, DType::F32, 1);
            for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
                simd::set_level(level);
                for threads in [1, 2, 5] {
                    let r = depthwise_run::<f32>(&g, &xv, &wv, &gv, DType::F32, threads);
                    assert_eq!(r, base, "{level:?} {threads} threads, blocked {blocked}");
                }
            }
            simd::set_level(start);
            // Close to the f64 reference (f32 rounding only).
            let fwd = reference(&g, &xv, &wv);
            let (gi, gw) = reference_grads(&g, &xv, &wv, &gv);
            for (got, want) in base.iter().zip([fwd, gi, gw]) {
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
        depthwise::blocked::FORCE.with(|f| f.set(None));
    }

    /// [`forward_few_cols`], the weight as given and read transposed (the
    /// stride-1 input gradient), and [`grad_input_few_cols`] (the input
    /// gradient of other strides): one sample (output written in place) and
    /// several (through the scratch tile), one and two column panels, row
    /// blocks with a short last micro-tile, `k` over several blocks, groups;
    /// small integers, so every sum is exact and must equal the reference.
    #[test]
    fn few_columns_match_reference() {
        if !igemm::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([1, 20, 4, 5], [50, 20, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([3, 16, 3, 3], [13, 16, 3, 3], [1, 1], [1, 1], [1, 1], 1),
            ([4, 24, 4, 4], [60, 12, 3, 3], [1, 1], [1, 1], [1, 1], 2),
            ([2, 9, 4, 5], [30, 9, 3, 2], [2, 1], [2, 0], [1, 2], 1),
            // Strided: the input gradient through grad_input_few_cols
            // (several samples, channel blocks, groups, a 1x1 layer).
            ([4, 16, 4, 4], [40, 16, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([3, 12, 5, 5], [20, 6, 3, 3], [2, 2], [1, 1], [1, 1], 2),
            ([3, 60, 6, 6], [20, 60, 1, 1], [2, 2], [0, 0], [1, 1], 1),
        ];
        for &(x, w, s, pd, d, groups) in cases {
            let g = case_geometry(x, w, s, pd, d, groups);
            assert!(g.n * g.p() <= FEW_COLS, "{x:?} {w:?}");
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let wv = ints(g.oc * g.ck(), 104729, 5);
            let gv = ints(g.n * g.oc * g.p(), 613, 9);
            let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&e| e as f32).collect() };
            let (x32, w32, g32) = (f32s(&xv), f32s(&wv), f32s(&gv));
            let mut out = vec![f32::NAN; g.n * g.oc * g.p()];
            forward_igemm(
                &g,
                out.as_mut_ptr(),
                x32.as_ptr(),
                Weight::Given(w32.as_ptr()),
            );
            let got: Vec<f64> = out.iter().map(|&e| e as f64).collect();
            assert_eq!(got, reference(&g, &xv, &wv), "forward {x:?} {w:?}");
            // The input gradient: stride 1 through forward_few_cols with the
            // weight transposed, other strides through grad_input_few_cols.
            let (want_gi, _) = reference_grads(&g, &xv, &wv, &gv);
            if let Some(t) = transposed(&g) {
                assert!(t.n * t.p() <= FEW_COLS, "{x:?} {w:?}");
            } else {
                assert!(
                    s != [1, 1] || g.pointwise(),
                    "{x:?} {w:?}: stride 1 has a transposed form"
                );
            }
            let mut gi = vec![f32::NAN; g.n * g.c * g.hw()];
            let ptr = |v: &[f32]| v.as_ptr() as *mut u8;
            grad_input_t::<f32>(&g, gi.as_mut_ptr() as *mut u8, ptr(&g32), ptr(&w32));
            let got: Vec<f64> = gi.iter().map(|&e| e as f64).collect();
            assert_eq!(got, want_gi, "input gradient {x:?} {w:?}");
        }
    }

    /// [`forward_padded`] with shifted column planes ([`column_planes`]: 3 x
    /// 3 stride 2) against the direct reference on small integers (exact):
    /// odd sizes, dilation, groups, asymmetric padding, several tiles.
    #[test]
    fn shifted_column_planes_match_reference() {
        if !igemm::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([2, 8, 15, 13], [12, 8, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([2, 5, 17, 16], [7, 5, 3, 3], [2, 2], [2, 1], [2, 2], 1),
            ([3, 8, 12, 12], [10, 4, 3, 3], [2, 2], [1, 0], [1, 1], 2),
            ([1, 3, 50, 47], [16, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1),
        ];
        for &(x, w, s, pd, d, groups) in cases {
            let g = case_geometry(x, w, s, pd, d, groups);
            assert!(
                column_planes(&g).2 && padded_rows(&g) && g.n * g.p() > FEW_COLS,
                "{x:?} {w:?} takes shifted planes"
            );
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let wv = ints(g.oc * g.ck(), 104729, 5);
            let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&e| e as f32).collect() };
            let (x32, w32) = (f32s(&xv), f32s(&wv));
            let mut out = vec![f32::NAN; g.n * g.oc * g.p()];
            forward_igemm(
                &g,
                out.as_mut_ptr(),
                x32.as_ptr(),
                Weight::Given(w32.as_ptr()),
            );
            let got: Vec<f64> = out.iter().map(|&e| e as f64).collect();
            assert_eq!(got, reference(&g, &xv, &wv), "{x:?} {w:?}");
        }
    }

    /// [`grad_input_samples`] (strided layers on small maps, several
    /// samples per product): against the direct reference on small
    /// integers (exact), and bit for bit at 1, 2 and 3 threads (other runs of
    /// samples per task): runs of uneven length, channel blocks (a sample
    /// alone), groups, rows past one [`ROW_BLOCK`] (24 channels x 9 taps),
    /// a 1 x 1 stride-2 layer, dilation.
    #[test]
    fn input_gradient_across_samples_matches_reference() {
        if !igemm::available() {
            return;
        }
        let cases: &[GwCase] = &[
            ([7, 24, 14, 14], [40, 24, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([2, 24, 13, 11], [16, 24, 3, 3], [2, 2], [1, 1], [1, 1], 1),
            ([5, 12, 9, 9], [20, 6, 3, 3], [2, 2], [0, 1], [1, 1], 2),
            ([6, 20, 14, 14], [33, 20, 1, 1], [2, 2], [0, 0], [1, 1], 1),
            ([3, 8, 15, 13], [10, 8, 3, 2], [2, 3], [2, 1], [2, 1], 1),
        ];
        for &(x, w, s, pd, d, groups) in cases {
            let g = case_geometry(x, w, s, pd, d, groups);
            assert!(
                transposed(&g).is_none() && 2 * g.p() <= IGEMM_TILE && g.n * g.p() > FEW_COLS,
                "{x:?} {w:?} takes grad_input_samples"
            );
            let xv = ints(g.n * g.c * g.hw(), 7919, 7);
            let wv = ints(g.oc * g.ck(), 104729, 5);
            let gv = ints(g.n * g.oc * g.p(), 613, 9);
            let (want, _) = reference_grads(&g, &xv, &wv, &gv);
            let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&e| e as f32).collect() };
            let (w32, g32) = (f32s(&wv), f32s(&gv));
            let ptr = |v: &[f32]| v.as_ptr() as *mut u8;
            let run = |threads: usize| {
                let mut gi = vec![f32::NAN; g.n * g.c * g.hw()];
                parallel::with_threads(threads, || {
                    grad_input_t::<f32>(&g, gi.as_mut_ptr() as *mut u8, ptr(&g32), ptr(&w32))
                });
                gi
            };
            let one = run(1);
            let got: Vec<f64> = one.iter().map(|&e| e as f64).collect();
            assert_eq!(got, want, "input gradient {x:?} {w:?}");
            for threads in [2, 3] {
                assert_eq!(run(threads), one, "{x:?} {w:?} at {threads} threads");
            }
        }
    }

    #[test]
    fn forward_matches_reference() {
        run([2, 4, 7, 6], [6, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1);
        run([2, 4, 9, 8], [6, 2, 3, 2], [2, 3], [1, 2], [2, 1], 2);
        run([1, 3, 5, 5], [3, 1, 3, 3], [2, 2], [1, 1], [1, 1], 3);
        run([2, 4, 5, 5], [8, 4, 1, 1], [1, 1], [0, 0], [1, 1], 1);
    }
}
