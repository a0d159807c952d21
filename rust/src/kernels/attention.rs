//! Fused scaled dot-product attention, forward and backward, tiled with an
//! online softmax (the FlashAttention-2 scheme): the `L x S` score matrix is
//! never stored, memory stays linear in the sequence lengths.
//!
//! Views are 4-d: query `[B, Hq, L, D]`, key `[B, Hk, S, D]`, value
//! `[B, Hk, S, Dv]` (grouped-query heads: `Hq` a multiple of `Hk`, query head
//! `h` reads key/value head `h / (Hq / Hk)`), an optional bias `[B, Hq, L, S]`
//! (broadcast strides allowed; bool: `false` masks out, float: added to the
//! scaled scores), any strides. Causal masking is top-left aligned as torch's
//! (`key j` is seen by `query i` iff `j <= i`). Rows that see no key give 0,
//! as the math path's safe softmax does.
//!
//! Compute is float32 (float64 for float64 inputs): tiles are packed into
//! contiguous buffers of that type and multiplied with the gemm crate; the
//! softmax loops are vectorizable (AVX-512 / AVX2 builds chosen at run time).
//!
//! Forward tasks are `(batch, head, query tile)`; it saves the log-sum-exp
//! of each row. Backward tasks are `(batch, key/value head, chunk of key
//! tiles)`: each owns its `dK`/`dV` rows and adds `dQ` into its chunk's slice
//! of a caller-provided accumulator, summed in chunk order at the end. The
//! split depends on shapes only, so results do not depend on the thread count.
//!
//! Dropout draws as [`super::dropout`]: element `e` of the `[B, Hq, L, S]`
//! attention matrix (row-major) is kept when the float32 uniform of Philox
//! block `offset + e / 4`, lane `e % 4`, is below `1 - p`.

// Tile loops index several buffers in step on purpose (they vectorize).
#![allow(clippy::needless_range_loop)]

use super::elementwise::simd::dispatch as simd_dispatch;
use super::nn::Real;
use super::parallel;
use super::reduce::{AccF, FloatElem};
use super::{KernelError, Strided};
use crate::dtype::DType;
use crate::rng::{uniform_f32, Philox};
use half::{bf16, f16};

/// Query rows and key rows per tile for `l` queries and `s` keys: [`TILE`]
/// each, capped at the lengths (a shape-only rule: results depend on it,
/// never on the thread count). `FOO_RS_SDPA_TILES="64,64"` overrides the
/// base, for tuning.
pub fn tiles(l: usize, s: usize) -> (usize, usize) {
    static V: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    let (bq, bk) = *V.get_or_init(|| {
        std::env::var("FOO_RS_SDPA_TILES")
            .ok()
            .and_then(|v| {
                let (a, b) = v.split_once(',')?;
                Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
            })
            .filter(|&(a, b): &(usize, usize)| (1..=4096).contains(&a) && (1..=4096).contains(&b))
            .unwrap_or((TILE, TILE))
    });
    (bq.min(l.max(1)), bk.min(s.max(1)))
}
/// Base tile side, measured (1 thread, 8 heads of 64, sequence 1k, forward
/// and backward): 64 208 ms, 128 176 ms, 192 128 ms, 256 120 ms, 512 123 ms.
/// The step past 128 is the gemm crate packing a product's right-hand side
/// only above twice its AVX-512 micro-kernel's height (128 rows); larger
/// products also spread its per-call cost. At 256 a tile's scores (256 KiB
/// of float32) stay in L2.
const TILE: usize = 256;
/// Backward tasks wanted per call when `B * Hk` is small: key tiles are then
/// split into up to this many chunks per head (a shape-only rule).
const BWD_TASKS: usize = 4;
/// Work (`B * Hq * L * S * D`) below which a call stays on the calling thread.
const PAR_WORK: usize = 1 << 18;

/// Dropout of the attention weights: keep with probability `1 - p`.
#[derive(Clone, Copy, Debug)]
pub struct Dropout {
    pub p: f64,
    pub seed: u64,
    pub offset: u64,
}

impl Dropout {
    /// Dropout with probability `p` whose Philox stream is not drawn yet
    /// (the forward entry reserves it: [`super::entry::sdpa_forward`]).
    pub fn with_p(p: f64) -> Dropout {
        Dropout {
            p,
            seed: 0,
            offset: 0,
        }
    }
}

/// The inputs and options of one attention call.
pub struct Sdpa<'a> {
    pub q: &'a Strided,
    pub k: &'a Strided,
    pub v: &'a Strided,
    pub bias: Option<&'a Strided>,
    pub causal: bool,
    pub scale: f64,
    pub dropout: Option<Dropout>,
}

/// Philox blocks the dropout of a `[b, hq, l, s]` attention matrix uses.
pub fn blocks_needed(b: usize, hq: usize, l: usize, s: usize) -> u64 {
    (b * hq * l * s).div_ceil(4) as u64
}

/// Key-tile chunks per `(batch, kv head)` in the backward (the first
/// dimension of its `dQ` accumulator).
pub fn backward_chunks(b: usize, hk: usize, s: usize) -> usize {
    let tiles = s.div_ceil(tiles(1, s).1).max(1);
    let want = BWD_TASKS.div_ceil((b * hk).max(1)).max(1);
    tiles.min(want)
}

/// Elements of the backward's scratch (see [`backward`]) for `[b, hq, l, d]`
/// queries and `[b, hk, s, _]` keys.
pub fn backward_work(b: usize, hq: usize, hk: usize, l: usize, s: usize, d: usize) -> usize {
    (backward_chunks(b, hk, s) * d + 2) * b * hq * l
}

#[derive(Clone, Copy, Debug)]
struct Geo {
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    s: usize,
    d: usize,
    dv: usize,
    group: usize,
    bq: usize,
    bk: usize,
}

/// A 4-d view as raw parts (crosses to pool threads; tasks touch disjoint
/// elements of the outputs).
#[derive(Clone, Copy)]
struct View {
    ptr: usize,
    st: [isize; 4],
    dtype: DType,
}
// SAFETY: see above.
unsafe impl Send for View {}
unsafe impl Sync for View {}

impl View {
    fn of(s: &Strided) -> View {
        View {
            ptr: s.ptr as usize,
            st: [s.strides[0], s.strides[1], s.strides[2], s.strides[3]],
            dtype: s.dtype,
        }
    }
    #[inline(always)]
    fn off(&self, a: usize, b: usize, c: usize, d: usize) -> isize {
        a as isize * self.st[0]
            + b as isize * self.st[1]
            + c as isize * self.st[2]
            + d as isize * self.st[3]
    }
    /// Element pointer of type `T` at `[a, b, c, 0]`.
    #[inline(always)]
    fn row<T>(&self, a: usize, b: usize, c: usize) -> *mut T {
        (self.ptr as *mut T).wrapping_offset(self.off(a, b, c, 0))
    }
}

fn bad(msg: String) -> KernelError {
    KernelError::InvalidArgument(format!("foo: scaled_dot_product_attention: {msg}"))
}

fn check_inputs(a: &Sdpa) -> Result<Geo, KernelError> {
    for (name, t) in [("query", a.q), ("key", a.k), ("value", a.v)] {
        if t.ndim() != 4 {
            return Err(bad(format!("{name} must be 4-d, got {} dims", t.ndim())));
        }
        if t.dtype != a.q.dtype {
            return Err(bad(format!(
                "query, key and value must have one dtype, got {} and {}",
                a.q.dtype.name(),
                t.dtype.name()
            )));
        }
    }
    if !matches!(
        a.q.dtype,
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    ) {
        return Err(KernelError::UnsupportedDtype {
            op: "scaled_dot_product_attention",
            dtype: a.q.dtype,
        });
    }
    let (q, k, v) = (&a.q.sizes, &a.k.sizes, &a.v.sizes);
    if k[0] != q[0] || v[0] != q[0] || v[1] != k[1] || v[2] != k[2] || k[3] != q[3] {
        return Err(bad(format!(
            "incompatible shapes query {q:?}, key {k:?}, value {v:?}"
        )));
    }
    if (k[1] == 0 && q[1] != 0) || (k[1] != 0 && q[1] % k[1] != 0) {
        return Err(bad(format!(
            "the query's heads ({}) must be a multiple of the key's heads ({})",
            q[1], k[1]
        )));
    }
    let g = Geo {
        b: q[0],
        hq: q[1],
        hk: k[1],
        l: q[2],
        s: k[2],
        d: q[3],
        dv: v[3],
        group: q[1].checked_div(k[1]).unwrap_or(1),
        bq: tiles(q[2], k[2]).0,
        bk: tiles(q[2], k[2]).1,
    };
    if let Some(bias) = a.bias {
        if bias.sizes[..] != [g.b, g.hq, g.l, g.s] {
            return Err(bad(format!(
                "attn_mask of shape {:?} does not match [{}, {}, {}, {}]",
                bias.sizes, g.b, g.hq, g.l, g.s
            )));
        }
        if !(bias.dtype == DType::Bool || bias.dtype.is_floating()) {
            return Err(bad(format!(
                "attn_mask must be bool or floating point, got {}",
                bias.dtype.name()
            )));
        }
    }
    if let Some(dr) = a.dropout {
        if !(0.0..1.0).contains(&dr.p) {
            return Err(bad(format!(
                "dropout probability must be in [0, 1), got {}",
                dr.p
            )));
        }
    }
    Ok(g)
}

fn check_out(name: &str, t: &Strided, sizes: &[usize], dtype: DType) -> Result<(), KernelError> {
    if t.sizes[..] != *sizes || t.dtype != dtype {
        return Err(bad(format!(
            "{name} must be {} of shape {sizes:?}, got {} of shape {:?}",
            dtype.name(),
            t.dtype.name(),
            t.sizes
        )));
    }
    Ok(())
}

/// The compute type: float32 or float64, multiplied by the gemm crate.
pub trait Acc: Real + FloatElem<Acc = Self> {}
impl Acc for f32 {}
impl Acc for f64 {}

/// `dst[m x n] (row stride dst_rs) = (read ? dst : 0) + alpha * lhs @ rhs`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn mm<A: Acc>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut A,
    dst_rs: usize,
    read: bool,
    lhs: *const A,
    (lrs, lcs): (usize, usize),
    rhs: *const A,
    (rrs, rcs): (usize, usize),
    alpha: A,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !read {
            for r in 0..m {
                std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n).fill(A::ZERO);
            }
        }
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        read,
        lhs,
        lcs as isize,
        lrs as isize,
        rhs,
        rcs as isize,
        rrs as isize,
        A::ONE,
        alpha,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// Copies rows `r0..r0 + rows` of `[a, b]` (`cols` wide) into `dst` (row-major, widened).
#[inline(always)]
unsafe fn pack<T: FloatElem>(
    dst: &mut [T::Acc],
    v: &View,
    a: usize,
    b: usize,
    r0: usize,
    rows: usize,
    cols: usize,
) {
    for r in 0..rows {
        let src = v.row::<T>(a, b, r0 + r);
        let out = &mut dst[r * cols..(r + 1) * cols];
        if v.st[3] == 1 {
            let s = std::slice::from_raw_parts(src, cols);
            for c in 0..cols {
                out[c] = s[c].widen();
            }
        } else {
            for c in 0..cols {
                out[c] = (*src.wrapping_offset(c as isize * v.st[3])).widen();
            }
        }
    }
}

/// Writes `src` (row-major, `cols` wide) narrowed into rows `r0..` of `[a, b]`.
#[inline(always)]
unsafe fn unpack<T: FloatElem>(
    src: &[T::Acc],
    v: &View,
    a: usize,
    b: usize,
    r0: usize,
    rows: usize,
    cols: usize,
) {
    for r in 0..rows {
        let dst = v.row::<T>(a, b, r0 + r);
        let s = &src[r * cols..(r + 1) * cols];
        for c in 0..cols {
            *dst.wrapping_offset(c as isize * v.st[3]) = T::narrow(s[c]);
        }
    }
}

/// Adds the bias of row `[b, h, i]`, columns `j0..j0 + row.len()`, to `row`.
#[inline(always)]
unsafe fn add_bias<A: Acc>(row: &mut [A], bias: &View, b: usize, h: usize, i: usize, j0: usize) {
    let base = bias.off(b, h, i, j0);
    let cs = bias.st[3];
    let ninf = A::ZERO - A::INF;
    macro_rules! float {
        ($t:ty) => {{
            let p = (bias.ptr as *const $t).wrapping_offset(base);
            for c in 0..row.len() {
                row[c] =
                    row[c] + <A as AccF>::from_f64((*p.wrapping_offset(c as isize * cs)).to_f64());
            }
        }};
    }
    match bias.dtype {
        DType::Bool => {
            let p = (bias.ptr as *const u8).wrapping_offset(base);
            for c in 0..row.len() {
                if *p.wrapping_offset(c as isize * cs) == 0 {
                    row[c] = ninf;
                }
            }
        }
        DType::F32 => float!(f32),
        DType::F64 => float!(f64),
        DType::F16 => float!(f16),
        DType::BF16 => float!(bf16),
        _ => {}
    }
}

/// Writes `dS` of row `[b, h, i]` into the bias gradient (its dtype).
#[inline(always)]
unsafe fn store_row<A: Acc>(row: &[A], gb: &View, b: usize, h: usize, i: usize, j0: usize) {
    let base = gb.off(b, h, i, j0);
    let cs = gb.st[3];
    macro_rules! put {
        ($t:ty, $conv:expr) => {{
            let p = (gb.ptr as *mut $t).wrapping_offset(base);
            for c in 0..row.len() {
                *p.wrapping_offset(c as isize * cs) = $conv(AccF::to_f64(row[c]));
            }
        }};
    }
    match gb.dtype {
        DType::F32 => put!(f32, |x: f64| x as f32),
        DType::F64 => put!(f64, |x: f64| x),
        DType::F16 => put!(f16, f16::from_f64),
        DType::BF16 => put!(bf16, bf16::from_f64),
        _ => {}
    }
}

/// Keep flags (1 / 0) of `n` consecutive attention elements from `e0`.
fn keep_flags(ph: &Philox, offset: u64, e0: usize, keep: f64, out: &mut [u8]) {
    let n = out.len();
    let mut k = 0;
    while k < n {
        let e = e0 + k;
        let w = ph.block(offset + (e / 4) as u64);
        let mut lane = e % 4;
        while lane < 4 && k < n {
            out[k] = ((uniform_f32(w[lane]) as f64) < keep) as u8;
            lane += 1;
            k += 1;
        }
    }
}

/// Scores of one tile: `s = scale * q @ k^T` plus bias and causal mask, for
/// query rows `i0..i0 + m` and keys `j0..j0 + n` of `[b, h]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scores<A: Acc>(
    s: &mut [A],
    qb: &[A],
    kb: &[A],
    g: &Geo,
    scale: A,
    bias: Option<&View>,
    causal: bool,
    (b, h, i0, m, j0, n): (usize, usize, usize, usize, usize, usize),
) {
    mm(
        m,
        n,
        g.d,
        s.as_mut_ptr(),
        g.bk,
        false,
        qb.as_ptr(),
        (g.d, 1),
        kb.as_ptr(),
        (1, g.d),
        scale,
    );
    let ninf = A::ZERO - A::INF;
    for r in 0..m {
        let i = i0 + r;
        let row = &mut s[r * g.bk..r * g.bk + n];
        if let Some(bv) = bias {
            add_bias(row, bv, b, h, i, j0);
        }
        if causal && j0 + n > i + 1 {
            let first = (i + 1).saturating_sub(j0);
            for c in first..n {
                row[c] = ninf;
            }
        }
    }
}

/// Lanes of the row reductions: independent accumulators let the loops
/// vectorize (a single float accumulator must add in order).
const LANES: usize = 16;

/// The largest of `row` and `init` (NaNs ignored).
#[inline(always)]
fn row_max<A: Acc>(row: &[A], init: A) -> A {
    let mut lanes = [init; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            lanes[k] = if c[k] > lanes[k] { c[k] } else { lanes[k] };
        }
    }
    lanes
        .iter()
        .chain(rest)
        .fold(init, |m, &x| if x > m { x } else { m })
}

/// `row = exp(row - sub)`; returns the sum of the new row.
#[inline(always)]
fn exp_sum<A: Acc>(row: &mut [A], sub: A) -> A {
    for x in row.iter_mut() {
        *x = (*x - sub).exp_();
    }
    let mut lanes = [<A as AccF>::ZERO; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..LANES {
            lanes[k] = lanes[k] + c[k];
        }
    }
    lanes
        .iter()
        .chain(rest)
        .fold(<A as AccF>::ZERO, |a, &x| a + x)
}

/// Per-task scratch of the forward.
struct FwdBufs<A> {
    q: Vec<A>,
    k: Vec<A>,
    v: Vec<A>,
    s: Vec<A>,
    acc: Vec<A>,
    mx: Vec<A>,
    sum: Vec<A>,
    flags: Vec<u8>,
}

impl<A: Acc> FwdBufs<A> {
    fn new(g: &Geo) -> Self {
        FwdBufs {
            q: vec![A::ZERO; g.bq * g.d],
            k: vec![A::ZERO; g.bk * g.d],
            v: vec![A::ZERO; g.bk * g.dv],
            s: vec![A::ZERO; g.bq * g.bk],
            acc: vec![A::ZERO; g.bq * g.dv],
            mx: vec![A::ZERO; g.bq],
            sum: vec![A::ZERO; g.bq],
            flags: vec![0; g.bk],
        }
    }
}

#[derive(Clone, Copy)]
struct Ctx {
    g: Geo,
    q: View,
    k: View,
    v: View,
    bias: Option<View>,
    causal: bool,
    scale: f64,
    dropout: Option<Dropout>,
}

/// Keys `0..end` a query tile `i0..i0 + m` sees.
fn key_end(c: &Ctx, i0: usize, m: usize) -> usize {
    if c.causal {
        (i0 + m).min(c.g.s)
    } else {
        c.g.s
    }
}

/// One forward task: rows `i0..i0 + m` of `[b, h]`. Writes the output rows
/// (when `out` is given) and the row log-sum-exp through `lse(r, value)`.
#[inline(always)]
unsafe fn fwd_tile<T: FloatElem>(
    c: &Ctx,
    bufs: &mut FwdBufs<T::Acc>,
    (b, h, i0, m): (usize, usize, usize, usize),
    out: Option<&View>,
    mut lse: impl FnMut(usize, T::Acc),
) where
    T::Acc: Acc,
{
    let g = &c.g;
    let kvh = h / g.group;
    let zero = <T::Acc as AccF>::ZERO;
    let ninf = zero - <T::Acc as AccF>::INF;
    let scale = <T::Acc as AccF>::from_f64(c.scale);
    pack::<T>(&mut bufs.q, &c.q, b, h, i0, m, g.d);
    bufs.mx[..m].fill(ninf);
    bufs.sum[..m].fill(zero);
    bufs.acc[..m * g.dv].fill(zero);
    let keep = c.dropout.map(|d| 1.0 - d.p);
    let ph = c.dropout.map(|d| Philox::new(d.seed));
    let inv_keep = <T::Acc as AccF>::from_f64(keep.map_or(1.0, |k| 1.0 / k));
    let end = key_end(c, i0, m);
    let mut j0 = 0;
    while j0 < end {
        let n = g.bk.min(g.s - j0);
        pack::<T>(&mut bufs.k, &c.k, b, kvh, j0, n, g.d);
        scores(
            &mut bufs.s,
            &bufs.q,
            &bufs.k,
            g,
            scale,
            c.bias.as_ref(),
            c.causal,
            (b, h, i0, m, j0, n),
        );
        for r in 0..m {
            let row = &mut bufs.s[r * g.bk..r * g.bk + n];
            let mt = row_max(row, ninf);
            let old = bufs.mx[r];
            let mnew = if mt > old { mt } else { old };
            if mnew == ninf {
                // No key seen yet: this tile adds nothing to the row.
                row.fill(zero);
                continue;
            }
            let alpha = (old - mnew).exp_();
            let ssum = exp_sum(row, mnew);
            bufs.sum[r] = bufs.sum[r] * alpha + ssum;
            bufs.mx[r] = mnew;
            if alpha != <T::Acc as AccF>::ONE {
                for a in &mut bufs.acc[r * g.dv..(r + 1) * g.dv] {
                    *a = *a * alpha;
                }
            }
            if let (Some(ph), Some(kp), Some(d)) = (ph.as_ref(), keep, c.dropout) {
                if out.is_some() {
                    let e0 = ((b * g.hq + h) * g.l + i0 + r) * g.s + j0;
                    let fl = &mut bufs.flags[..n];
                    keep_flags(ph, d.offset, e0, kp, fl);
                    for k in 0..n {
                        row[k] = if fl[k] != 0 { row[k] * inv_keep } else { zero };
                    }
                }
            }
        }
        if out.is_some() {
            pack::<T>(&mut bufs.v, &c.v, b, kvh, j0, n, g.dv);
            mm(
                m,
                g.dv,
                n,
                bufs.acc.as_mut_ptr(),
                g.dv,
                true,
                bufs.s.as_ptr(),
                (g.bk, 1),
                bufs.v.as_ptr(),
                (g.dv, 1),
                <T::Acc as AccF>::ONE,
            );
        }
        j0 += n;
    }
    for r in 0..m {
        let l = bufs.sum[r];
        if l == zero {
            lse(r, ninf);
            bufs.acc[r * g.dv..(r + 1) * g.dv].fill(zero);
        } else {
            lse(r, bufs.mx[r] + l.ln_());
            let inv = <T::Acc as AccF>::ONE / l;
            for a in &mut bufs.acc[r * g.dv..(r + 1) * g.dv] {
                *a = *a * inv;
            }
        }
    }
    if let Some(o) = out {
        unpack::<T>(&bufs.acc, o, b, h, i0, m, g.dv);
    }
}

/// Runs `f(t)` for `t in 0..tasks`, in parallel when the work is large.
fn run(tasks: usize, work: usize, f: impl Fn(usize) + Sync) {
    if tasks > 1 && work >= PAR_WORK {
        parallel::parallel_for(tasks, f);
    } else {
        (0..tasks).for_each(f);
    }
}

fn context(a: &Sdpa, g: Geo) -> Ctx {
    Ctx {
        g,
        q: View::of(a.q),
        k: View::of(a.k),
        v: View::of(a.v),
        bias: a.bias.map(View::of),
        causal: a.causal,
        scale: a.scale,
        dropout: a.dropout.filter(|d| d.p > 0.0),
    }
}

/// The forward: `out [B, Hq, L, Dv]` (query's dtype, any strides) and
/// `lse [B, Hq, L]` (float32, contiguous).
pub fn forward(a: &Sdpa, out: &Strided, lse: &Strided) -> Result<(), KernelError> {
    let g = check_inputs(a)?;
    check_out("output", out, &[g.b, g.hq, g.l, g.dv], a.q.dtype)?;
    check_out("logsumexp", lse, &[g.b, g.hq, g.l], DType::F32)?;
    if !(lse.numel() == 0 || lse.is_contiguous()) {
        return Err(bad("logsumexp must be contiguous".into()));
    }
    if out.numel() == 0 && lse.numel() == 0 {
        return Ok(());
    }
    let c = context(a, g);
    let (o, lp) = (View::of(out), lse.ptr as usize);
    fn go<T: FloatElem>(c: &Ctx, o: &View, lp: usize)
    where
        T::Acc: Acc,
    {
        let g = c.g;
        let qt = g.l.div_ceil(g.bq);
        let tasks = g.b * g.hq * qt;
        run(tasks, tasks * g.bq * g.s * (g.d + g.dv), |t| {
            let (bh, tile) = (t / qt, t % qt);
            let (b, h) = (bh / g.hq, bh % g.hq);
            let i0 = tile * g.bq;
            let m = g.bq.min(g.l - i0);
            simd_dispatch(
                #[inline(always)]
                || {
                    let mut bufs = FwdBufs::<T::Acc>::new(&g);
                    let lrow = (lp as *mut f32).wrapping_add(bh * g.l + i0);
                    // SAFETY: this task owns rows i0..i0+m of [b, h] in out and lse.
                    unsafe {
                        fwd_tile::<T>(c, &mut bufs, (b, h, i0, m), Some(o), |r, v| {
                            *lrow.add(r) = AccF::to_f64(v) as f32
                        })
                    }
                },
            );
        });
    }
    match a.q.dtype {
        DType::F32 => go::<f32>(&c, &o, lp),
        DType::F64 => go::<f64>(&c, &o, lp),
        DType::F16 => go::<f16>(&c, &o, lp),
        DType::BF16 => go::<bf16>(&c, &o, lp),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "scaled_dot_product_attention",
                dtype: d,
            })
        }
    }
    Ok(())
}

/// Gradients the backward writes (any strides; `None`: not wanted).
pub struct Grads<'a> {
    pub q: Option<&'a Strided>,
    pub k: Option<&'a Strided>,
    pub v: Option<&'a Strided>,
    pub bias: Option<&'a Strided>,
}

/// The backward. `work` is a contiguous scratch of the compute type (float64
/// for float64 inputs, else float32) with
/// `(backward_chunks(B, Hk, S) * D + 2) * B * Hq * L` elements.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    a: &Sdpa,
    grad_out: &Strided,
    out: &Strided,
    lse: &Strided,
    grads: &Grads,
    work: &Strided,
) -> Result<(), KernelError> {
    let g = check_inputs(a)?;
    check_out("grad_out", grad_out, &[g.b, g.hq, g.l, g.dv], a.q.dtype)?;
    check_out("out", out, &[g.b, g.hq, g.l, g.dv], a.q.dtype)?;
    check_out("logsumexp", lse, &[g.b, g.hq, g.l], DType::F32)?;
    if !(lse.numel() == 0 || lse.is_contiguous()) {
        return Err(bad("logsumexp must be contiguous".into()));
    }
    if let Some(t) = grads.q {
        check_out("grad_query", t, &a.q.sizes, a.q.dtype)?;
    }
    if let Some(t) = grads.k {
        check_out("grad_key", t, &a.k.sizes, a.q.dtype)?;
    }
    if let Some(t) = grads.v {
        check_out("grad_value", t, &a.v.sizes, a.q.dtype)?;
    }
    if let Some(t) = grads.bias {
        if t.sizes[..] != [g.b, g.hq, g.l, g.s] || !t.dtype.is_floating() {
            return Err(bad(format!(
                "grad_attn_bias must be floating point of shape [{}, {}, {}, {}]",
                g.b, g.hq, g.l, g.s
            )));
        }
    }
    let acc = if a.q.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let chunks = backward_chunks(g.b, g.hk, g.s);
    let rows = g.b * g.hq * g.l;
    if work.dtype != acc
        || work.numel() != (chunks * g.d + 2) * rows
        || !(work.numel() == 0 || work.is_contiguous())
    {
        return Err(bad(format!(
            "backward scratch must be a contiguous {} tensor of {} elements",
            acc.name(),
            (chunks * g.d + 2) * rows
        )));
    }
    let c = context(a, g);
    let views = BwdViews {
        go: View::of(grad_out),
        o: View::of(out),
        lse: lse.ptr as usize,
        gq: grads.q.map(View::of),
        gk: grads.k.map(View::of),
        gv: grads.v.map(View::of),
        gb: grads.bias.map(View::of),
        work: work.ptr as usize,
        chunks,
    };
    match a.q.dtype {
        DType::F32 => bwd::<f32>(&c, &views),
        DType::F64 => bwd::<f64>(&c, &views),
        DType::F16 => bwd::<f16>(&c, &views),
        DType::BF16 => bwd::<bf16>(&c, &views),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "scaled_dot_product_attention_backward",
                dtype: d,
            })
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct BwdViews {
    go: View,
    o: View,
    lse: usize,
    gq: Option<View>,
    gk: Option<View>,
    gv: Option<View>,
    gb: Option<View>,
    work: usize,
    chunks: usize,
}
// SAFETY: raw addresses; tasks touch disjoint elements.
unsafe impl Send for BwdViews {}
unsafe impl Sync for BwdViews {}

fn bwd<T: FloatElem>(c: &Ctx, w: &BwdViews)
where
    T::Acc: Acc,
{
    let g = c.g;
    let rows = g.b * g.hq * g.l;
    let zero = <T::Acc as AccF>::ZERO;
    // work = [dq partials: chunks x rows x D | lse: rows | delta: rows]
    let base = w.work as *mut T::Acc;
    let dq_len = w.chunks * rows * g.d;
    let (lse_acc, delta) = (
        base.wrapping_add(dq_len) as usize,
        base.wrapping_add(dq_len + rows) as usize,
    );
    // Pass 1, per query tile: the row statistics. delta = rowsum(dO * O);
    // log-sum-exp recomputed exactly for float64 (the saved one is float32).
    let qt = g.l.div_ceil(g.bq);
    let tasks = g.b * g.hq * qt;
    run(
        tasks,
        tasks * g.bq * g.dv.max(1) * if T::Acc::is_f64() { g.s } else { 1 },
        |t| {
            let (bh, tile) = (t / qt, t % qt);
            let (b, h) = (bh / g.hq, bh % g.hq);
            let i0 = tile * g.bq;
            let m = g.bq.min(g.l - i0);
            simd_dispatch(
                #[inline(always)]
                || {
                    let mut ob = vec![zero; m * g.dv];
                    let mut gb = vec![zero; m * g.dv];
                    // SAFETY: this task owns rows i0..i0+m of [b, h] in the scratch.
                    unsafe {
                        pack::<T>(&mut ob, &w.o, b, h, i0, m, g.dv);
                        pack::<T>(&mut gb, &w.go, b, h, i0, m, g.dv);
                        let dl = (delta as *mut T::Acc).add(bh * g.l + i0);
                        for r in 0..m {
                            let mut s = zero;
                            for k in 0..g.dv {
                                s = s + ob[r * g.dv + k] * gb[r * g.dv + k];
                            }
                            *dl.add(r) = s;
                        }
                        let ll = (lse_acc as *mut T::Acc).add(bh * g.l + i0);
                        if T::Acc::is_f64() {
                            let mut bufs = FwdBufs::<T::Acc>::new(&g);
                            fwd_tile::<T>(c, &mut bufs, (b, h, i0, m), None, |r, v| *ll.add(r) = v);
                        } else {
                            let src = (w.lse as *const f32).add(bh * g.l + i0);
                            for r in 0..m {
                                *ll.add(r) = <T::Acc as AccF>::from_f64(*src.add(r) as f64);
                            }
                        }
                    }
                },
            );
        },
    );
    // Pass 2, per (batch, kv head, chunk of key tiles).
    let kt = g.s.div_ceil(g.bk);
    let tasks = g.b * g.hk * w.chunks;
    run(tasks, g.b * g.hq * g.l * g.s * (g.d + g.dv), |t| {
        let (bk, ch) = (t / w.chunks, t % w.chunks);
        let (b, kvh) = (bk / g.hk, bk % g.hk);
        let (t0, t1) = (ch * kt / w.chunks, (ch + 1) * kt / w.chunks);
        simd_dispatch(
            #[inline(always)]
            || {
                // SAFETY: this task owns key rows of tiles t0..t1 of [b, kvh],
                // the bias-gradient columns of those keys and chunk ch of dQ.
                unsafe { bwd_chunk::<T>(c, w, (b, kvh, ch, t0, t1), lse_acc, delta) }
            },
        );
    });
    // dQ: the chunks' partial sums, in chunk order.
    if let Some(gq) = w.gq {
        let tasks = g.b * g.hq * qt;
        run(tasks, tasks * g.bq * g.d * w.chunks * 64, |t| {
            let (bh, tile) = (t / qt, t % qt);
            let (b, h) = (bh / g.hq, bh % g.hq);
            let i0 = tile * g.bq;
            let m = g.bq.min(g.l - i0);
            let mut acc = vec![zero; m * g.d];
            // SAFETY: this task reads its rows of every chunk and writes its rows of dQ.
            unsafe {
                for ch in 0..w.chunks {
                    let p = (w.work as *const T::Acc).add(ch * rows * g.d + (bh * g.l + i0) * g.d);
                    let part = std::slice::from_raw_parts(p, m * g.d);
                    for k in 0..m * g.d {
                        acc[k] = acc[k] + part[k];
                    }
                }
                unpack::<T>(&acc, &gq, b, h, i0, m, g.d);
            }
        });
    }
}

/// Whether the compute type is float64.
trait IsF64 {
    fn is_f64() -> bool;
}
impl<A: Acc> IsF64 for A {
    fn is_f64() -> bool {
        std::mem::size_of::<A>() == 8
    }
}

#[inline(always)]
unsafe fn bwd_chunk<T: FloatElem>(
    c: &Ctx,
    w: &BwdViews,
    (b, kvh, ch, t0, t1): (usize, usize, usize, usize, usize),
    lse_acc: usize,
    delta: usize,
) where
    T::Acc: Acc,
{
    let g = c.g;
    let zero = <T::Acc as AccF>::ZERO;
    let one = <T::Acc as AccF>::ONE;
    let ninf = zero - <T::Acc as AccF>::INF;
    let scale = <T::Acc as AccF>::from_f64(c.scale);
    let rows = g.b * g.hq * g.l;
    let keep = c.dropout.map(|d| 1.0 - d.p);
    let ph = c.dropout.map(|d| Philox::new(d.seed));
    let inv_keep = <T::Acc as AccF>::from_f64(keep.map_or(1.0, |k| 1.0 / k));
    let mut kb = vec![zero; g.bk * g.d];
    let mut vb = vec![zero; g.bk * g.dv];
    let mut qb = vec![zero; g.bq * g.d];
    let mut gob = vec![zero; g.bq * g.dv];
    let mut p = vec![zero; g.bq * g.bk];
    let mut pd = vec![zero; g.bq * g.bk];
    let mut dp = vec![zero; g.bq * g.bk];
    let mut dk = vec![zero; g.bk * g.d];
    let mut dv = vec![zero; g.bk * g.dv];
    let mut flags = vec![0u8; g.bq * g.bk];
    // The caller zeroed the scratch: dQ rows no key tile of this chunk
    // reaches (causal) stay 0.
    let dq_base = (w.work as *mut T::Acc).add(ch * rows * g.d);
    for tile in t0..t1 {
        let j0 = tile * g.bk;
        let n = g.bk.min(g.s - j0);
        pack::<T>(&mut kb, &c.k, b, kvh, j0, n, g.d);
        pack::<T>(&mut vb, &c.v, b, kvh, j0, n, g.dv);
        dk[..n * g.d].fill(zero);
        dv[..n * g.dv].fill(zero);
        for hh in 0..g.group {
            let h = kvh * g.group + hh;
            let bh = b * g.hq + h;
            // Causal: query rows below j0 see none of these keys.
            let first = if c.causal { (j0 / g.bq) * g.bq } else { 0 };
            let mut i0 = first;
            while i0 < g.l {
                let m = g.bq.min(g.l - i0);
                pack::<T>(&mut qb, &c.q, b, h, i0, m, g.d);
                pack::<T>(&mut gob, &w.go, b, h, i0, m, g.dv);
                scores(
                    &mut p,
                    &qb,
                    &kb,
                    &g,
                    scale,
                    c.bias.as_ref(),
                    c.causal,
                    (b, h, i0, m, j0, n),
                );
                let ll = (lse_acc as *const T::Acc).add(bh * g.l + i0);
                for r in 0..m {
                    let lr = *ll.add(r);
                    let row = &mut p[r * g.bk..r * g.bk + n];
                    if lr == ninf {
                        row.fill(zero);
                    } else {
                        for x in row.iter_mut() {
                            *x = (*x - lr).exp_();
                        }
                    }
                }
                // pd: the dropped-out weights that multiplied V.
                if let (Some(ph), Some(kp), Some(d)) = (ph.as_ref(), keep, c.dropout) {
                    for r in 0..m {
                        let e0 = ((bh) * g.l + i0 + r) * g.s + j0;
                        let fl = &mut flags[r * g.bk..r * g.bk + n];
                        keep_flags(ph, d.offset, e0, kp, fl);
                        for k in 0..n {
                            pd[r * g.bk + k] = if fl[k] != 0 {
                                p[r * g.bk + k] * inv_keep
                            } else {
                                zero
                            };
                        }
                    }
                }
                let pw = if c.dropout.is_some() { &pd } else { &p };
                // dV += pw^T @ dO
                mm(
                    n,
                    g.dv,
                    m,
                    dv.as_mut_ptr(),
                    g.dv,
                    true,
                    pw.as_ptr(),
                    (1, g.bk),
                    gob.as_ptr(),
                    (g.dv, 1),
                    one,
                );
                // dp = dO @ V^T
                mm(
                    m,
                    n,
                    g.dv,
                    dp.as_mut_ptr(),
                    g.bk,
                    false,
                    gob.as_ptr(),
                    (g.dv, 1),
                    vb.as_ptr(),
                    (1, g.dv),
                    one,
                );
                let dl = (delta as *const T::Acc).add(bh * g.l + i0);
                for r in 0..m {
                    let di = *dl.add(r);
                    let (pr, dr) = (&p[r * g.bk..r * g.bk + n], &mut dp[r * g.bk..r * g.bk + n]);
                    if c.dropout.is_some() {
                        let fl = &flags[r * g.bk..r * g.bk + n];
                        for k in 0..n {
                            let dpk = if fl[k] != 0 { dr[k] * inv_keep } else { zero };
                            dr[k] = pr[k] * (dpk - di);
                        }
                    } else {
                        for k in 0..n {
                            dr[k] = pr[k] * (dr[k] - di);
                        }
                    }
                    if let Some(gbv) = w.gb.as_ref() {
                        store_row(dr, gbv, b, h, i0 + r, j0);
                    }
                }
                // dQ[rows] += scale * dS @ K
                if w.gq.is_some() {
                    let dst = dq_base.add((bh * g.l + i0) * g.d);
                    mm(
                        m,
                        g.d,
                        n,
                        dst,
                        g.d,
                        true,
                        dp.as_ptr(),
                        (g.bk, 1),
                        kb.as_ptr(),
                        (g.d, 1),
                        scale,
                    );
                }
                // dK += scale * dS^T @ Q
                mm(
                    n,
                    g.d,
                    m,
                    dk.as_mut_ptr(),
                    g.d,
                    true,
                    dp.as_ptr(),
                    (1, g.bk),
                    qb.as_ptr(),
                    (g.d, 1),
                    scale,
                );
                i0 += m;
            }
        }
        if let Some(gk) = w.gk.as_ref() {
            unpack::<T>(&dk, gk, b, kvh, j0, n, g.d);
        }
        if let Some(gv) = w.gv.as_ref() {
            unpack::<T>(&dv, gv, b, kvh, j0, n, g.dv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive attention in f64 on contiguous [1, 1, l, d] data.
    fn naive(
        q: &[f64],
        k: &[f64],
        v: &[f64],
        l: usize,
        s: usize,
        d: usize,
        causal: bool,
    ) -> Vec<f64> {
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0.0; l * d];
        for i in 0..l {
            let mut w: Vec<f64> = (0..s)
                .map(|j| {
                    if causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>() * scale
                    }
                })
                .collect();
            let mx = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = w
                .iter_mut()
                .map(|x| {
                    *x = (*x - mx).exp();
                    *x
                })
                .sum();
            for j in 0..s {
                for c in 0..d {
                    out[i * d + c] += w[j] / sum * v[j * d + c];
                }
            }
        }
        out
    }

    /// Runs forward and backward on deterministic data, float64, [1, hq, l, d]
    /// queries and [1, hk, s, d] keys; returns (out, dq, dk, dv).
    fn fwd_bwd(hq: usize, hk: usize, l: usize, s: usize, d: usize, causal: bool) -> [Vec<f64>; 4] {
        let f = |n: usize, seed: usize| -> Vec<f64> {
            (0..n)
                .map(|x| (((x * 7 + seed * 13) % 17) as f64 - 8.0) / 8.0)
                .collect()
        };
        let (mut q, mut k, mut v, mut go) = (
            f(hq * l * d, 1),
            f(hk * s * d, 2),
            f(hk * s * d, 3),
            f(hq * l * d, 4),
        );
        let (mut out, mut lse) = (vec![0f64; hq * l * d], vec![0f32; hq * l]);
        let (mut dq, mut dk, mut dv) = (
            vec![0f64; hq * l * d],
            vec![0f64; hk * s * d],
            vec![0f64; hk * s * d],
        );
        let mut work = vec![0f64; (backward_chunks(1, hk, s) * d + 2) * hq * l];
        let st = |p: &mut Vec<f64>, sz: &[usize]| {
            Strided::contiguous(p.as_mut_ptr() as *mut u8, DType::F64, sz)
        };
        let (qs, ks, vs) = (
            st(&mut q, &[1, hq, l, d]),
            st(&mut k, &[1, hk, s, d]),
            st(&mut v, &[1, hk, s, d]),
        );
        let (os, gos) = (st(&mut out, &[1, hq, l, d]), st(&mut go, &[1, hq, l, d]));
        let (dqs, dks, dvs) = (
            st(&mut dq, &[1, hq, l, d]),
            st(&mut dk, &[1, hk, s, d]),
            st(&mut dv, &[1, hk, s, d]),
        );
        let n = work.len();
        let ws = st(&mut work, &[n]);
        let ls = Strided::contiguous(lse.as_mut_ptr() as *mut u8, DType::F32, &[1, hq, l]);
        let a = Sdpa {
            q: &qs,
            k: &ks,
            v: &vs,
            bias: None,
            causal,
            scale: 0.5,
            dropout: None,
        };
        forward(&a, &os, &ls).unwrap();
        let grads = Grads {
            q: Some(&dqs),
            k: Some(&dks),
            v: Some(&dvs),
            bias: None,
        };
        backward(&a, &gos, &os, &ls, &grads, &ws).unwrap();
        [out, dq, dk, dv]
    }

    #[test]
    fn backward_is_exact_and_thread_independent() {
        // Single head, one key: softmax weight 1, so dV = sum of dO over the
        // rows, dQ = dK = 0.
        let [_, dq, dk, dv] = fwd_bwd(1, 1, 5, 1, 3, false);
        let go: Vec<f64> = (0..15)
            .map(|x| (((x * 7 + 4 * 13) % 17) as f64 - 8.0) / 8.0)
            .collect();
        for c in 0..3 {
            let want: f64 = (0..5).map(|i| go[i * 3 + c]).sum();
            assert!((dv[c] - want).abs() < 1e-12);
        }
        assert!(dq.iter().chain(&dk).all(|x| x.abs() < 1e-12));
        // Grouped heads, causal, several tiles and chunks: same bits for any thread count.
        let one = parallel::with_threads(1, || fwd_bwd(4, 2, 150, 200, 8, true));
        let two = parallel::with_threads(2, || fwd_bwd(4, 2, 150, 200, 8, true));
        assert_eq!(one, two);
        // Several query and key tiles, partial last tiles, four key chunks.
        assert!(backward_chunks(1, 1, 1100) > 1);
        let one = parallel::with_threads(1, || fwd_bwd(2, 1, 600, 1100, 4, true));
        let two = parallel::with_threads(2, || fwd_bwd(2, 1, 600, 1100, 4, true));
        assert_eq!(one, two);
    }

    #[test]
    fn forward_matches_naive() {
        for &(l, s, d, causal) in &[
            (5usize, 7usize, 3usize, false),
            (130, 70, 16, true),
            (64, 200, 8, false),
            (600, 530, 4, true),
            (300, 700, 4, false),
        ] {
            let f = |n: usize, seed: usize| -> Vec<f64> {
                (0..n)
                    .map(|x| (((x * 7 + seed * 13) % 17) as f64 - 8.0) / 8.0)
                    .collect()
            };
            let (mut q, mut k, mut v) = (f(l * d, 1), f(s * d, 2), f(s * d, 3));
            let mut out = vec![0f64; l * d];
            let mut lse = vec![0f32; l];
            let qs = Strided::contiguous(q.as_mut_ptr() as *mut u8, DType::F64, &[1, 1, l, d]);
            let ks = Strided::contiguous(k.as_mut_ptr() as *mut u8, DType::F64, &[1, 1, s, d]);
            let vs = Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F64, &[1, 1, s, d]);
            let os = Strided::contiguous(out.as_mut_ptr() as *mut u8, DType::F64, &[1, 1, l, d]);
            let ls = Strided::contiguous(lse.as_mut_ptr() as *mut u8, DType::F32, &[1, 1, l]);
            let a = Sdpa {
                q: &qs,
                k: &ks,
                v: &vs,
                bias: None,
                causal,
                scale: 1.0 / (d as f64).sqrt(),
                dropout: None,
            };
            forward(&a, &os, &ls).unwrap();
            let want = naive(&q, &k, &v, l, s, d, causal);
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() < 1e-12, "{x} vs {y}");
            }
        }
    }
}
