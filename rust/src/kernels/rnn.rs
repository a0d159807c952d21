//! Whole-sequence recurrences of LSTM and GRU layers: one layer, one
//! direction, all time steps in one call, forward and backward through time.
//!
//! The caller (python/foo_rs/_ops/rnn_seq.py) does the work that is one large
//! matrix product over the whole sequence: the input projection of every
//! step before the forward (`xg = x @ W_ih^T + bias`), and after the backward
//! the weight gradients (`dW_ih = dG^T @ x`, `dW_hh = dG^T @ h_prev`), bias
//! gradients and the input gradient (`dG @ W_ih`). What remains is sequential
//! and lives here: per step one product with `W_hh` and the fused gate math.
//!
//! Layout. Sequences are flat, `[N, ...]` rows, time-major: step `t` covers
//! rows `offsets[t] .. offsets[t] + sizes[t]`, which are the first
//! `sizes[t]` sequences of the batch ([`Steps`]; `sizes` never grows, as in a
//! packed sequence; an unpacked `[T, B, ...]` input has `sizes = [B; T]`).
//! Gates are in ATen's order (LSTM `i, f, g, o`, GRU `r, z, n`), each
//! `hidden` wide.
//!
//! Threads. Each step is one [`parallel::parallel_for`] over blocks of
//! [`BLOCK`] hidden units: a task multiplies the previous hidden state by the
//! block's gate columns of `W_hh` (on the calling thread; [`Rhs`] says with
//! which kernel) and runs the gate math for those units. The blocks are
//! fixed by `hidden` alone and each element is computed by one task in one
//! order, so results are bit-identical for any thread count.

use super::conv::igemm;
use super::elementwise::math::Real;
use super::elementwise::simd;
use super::linalg::gemm_one;
use super::parallel;
use super::KernelError;

/// Hidden units per task.
pub const BLOCK: usize = 64;
/// Multiply-adds per step from which a step's blocks run on the pool.
const PAR_WORK: usize = 1 << 15;

/// The recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    /// Width of a step's saved activations (the workspace) per hidden unit:
    /// LSTM `i, f, g, o` (activated); GRU `r, z, n, W_hn h + b_hn`.
    pub fn saved(self) -> usize {
        4
    }
}

/// The time steps of a flat (possibly packed) sequence.
#[derive(Clone, Debug)]
pub struct Steps {
    sizes: Vec<usize>,
    offsets: Vec<usize>,
}

impl Steps {
    /// Steps of the given batch sizes (non-increasing, as in a packed sequence).
    pub fn new(sizes: &[usize]) -> Result<Steps, KernelError> {
        if sizes.windows(2).any(|w| w[1] > w[0]) {
            return Err(KernelError::InvalidArgument(
                "foo rnn: batch sizes of a packed sequence must not increase".into(),
            ));
        }
        let mut offsets = Vec::with_capacity(sizes.len());
        let mut acc = 0;
        for &s in sizes {
            offsets.push(acc);
            acc += s;
        }
        Ok(Steps {
            sizes: sizes.to_vec(),
            offsets,
        })
    }

    /// Sequences in the batch (rows of the hidden state).
    pub fn batch(&self) -> usize {
        self.sizes.first().copied().unwrap_or(0)
    }

    /// Rows of the flat layout.
    pub fn rows(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// Steps in the order the forward recurrence runs them.
    fn order(&self, reverse: bool) -> Vec<usize> {
        let n = self.sizes.len();
        if reverse {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        }
    }
}

/// A row-major matrix whose rows are `rs` elements apart (columns contiguous).
#[derive(Clone, Copy, Debug)]
pub struct Rows<T> {
    pub ptr: *mut T,
    pub rs: usize,
}

// SAFETY: kernels write disjoint elements from different tasks (see each use).
unsafe impl<T> Send for Rows<T> {}
unsafe impl<T> Sync for Rows<T> {}

impl<T> Rows<T> {
    pub fn new(ptr: *mut T, rs: usize) -> Rows<T> {
        Rows { ptr, rs }
    }

    /// Element `(r, c)`.
    #[inline(always)]
    unsafe fn at(&self, r: usize, c: usize) -> *mut T {
        self.ptr.add(r * self.rs + c)
    }
}

/// Operands of one layer-direction's forward. `[N, k]` means `N` flat rows
/// (see [`Steps`]) of `k` elements; `[B, H]` matrices are contiguous.
pub struct Forward<T> {
    /// `[N, G*H]`: `x @ W_ih^T + b_ih` (LSTM: `+ b_hh` too).
    pub xg: Rows<T>,
    /// `[G*H, H]`, contiguous.
    pub w_hh: *const T,
    /// GRU only: `b_hh`, `[G*H]` (None: no bias).
    pub b_hh: Option<*const T>,
    /// `[B, H]` initial states (`c0` LSTM only).
    pub h0: *const T,
    pub c0: Option<*const T>,
    /// `[N, H]` outputs (the hidden state of every step).
    pub y: Rows<T>,
    /// `[B, H]` final states (`cn` LSTM only).
    pub hn: *mut T,
    pub cn: Option<*mut T>,
    /// LSTM: `[N, H]` cell state of every step (contiguous); needed by the
    /// backward, scratch otherwise.
    pub cs: Option<*mut T>,
    /// `[N, 4H]` saved activations for the backward (contiguous), or None.
    pub ws: Option<*mut T>,
}

/// Operands of one layer-direction's backward (the forward's saved tensors
/// and the incoming gradients).
pub struct Backward<T> {
    /// `[N, H]` gradient of the outputs.
    pub dy: Rows<T>,
    /// `[B, H]` gradients of the final states (`dcn` LSTM only).
    pub dhn: *const T,
    pub dcn: Option<*const T>,
    /// The forward's operands: `[G*H, H]` weights, `[B, H]` initial states,
    /// `[N, H]` outputs, LSTM cell states and the workspace.
    pub w_hh: *const T,
    pub h0: *const T,
    pub c0: Option<*const T>,
    pub y: Rows<T>,
    pub cs: Option<*const T>,
    pub ws: *const T,
    /// `[N, G*H]` gradient of the gate pre-activations from the input side
    /// (`xg`), contiguous.
    pub dgx: *mut T,
    /// GRU: `[N, G*H]` gradient of `h @ W_hh^T + b_hh` (LSTM: the same as
    /// `dgx`, pass None).
    pub dgh: Option<*mut T>,
    /// `[B, H]` gradients of the initial states (`dc0` LSTM only).
    pub dh0: *mut T,
    pub dc0: Option<*mut T>,
    /// `[N, H]`: the hidden state each step started from (for `dW_hh`).
    pub hprev: *mut T,
}

#[derive(Clone, Copy)]
struct P<T>(*mut T);
// SAFETY: shared between tasks that touch disjoint elements.
unsafe impl<T> Send for P<T> {}
unsafe impl<T> Sync for P<T> {}

impl<T> P<T> {
    /// The pointer (a method, so closures capture the whole `P`).
    #[inline(always)]
    fn get(self) -> *mut T {
        self.0
    }
}

/// Runs `f(block, j0, width)` for every block of hidden units, on the pool
/// when the step is big enough.
/// The gate math runs inside [`simd::dispatch_at`] (the callers' `f` is an
/// `#[inline(always)]` closure), so its polynomial `mul_add`s
/// are FMA instructions and the row loops vectorize; no level changes a
/// result bit.
fn for_blocks(hidden: usize, work: usize, f: impl Fn(usize, usize) + Sync) {
    let nb = hidden.div_ceil(BLOCK);
    let level = simd::level();
    let run = |b: usize| {
        let j0 = b * BLOCK;
        let w = (hidden - j0).min(BLOCK);
        simd::dispatch_at(
            level,
            #[inline(always)]
            || f(j0, w),
        );
    };
    if nb > 1 && work >= PAR_WORK {
        parallel::parallel_for(nb, run);
    } else {
        (0..nb).for_each(run);
    }
}

/// The row of `W_hh` (`[G*H, H]`) that column `col` of [`blocked_weights`]
/// holds: block `[j0, j0 + w)` holds columns `G*j0 .. G*(j0 + w)`, gate `g`
/// of unit `j0 + jj` at `G*j0 + g*w + jj`.
fn blocked_row(col: usize, gates: usize, hidden: usize) -> usize {
    let j0 = col / (gates * BLOCK) * BLOCK;
    let bw = (hidden - j0).min(BLOCK);
    let (g, jj) = ((col - gates * j0) / bw, (col - gates * j0) % bw);
    g * hidden + j0 + jj
}

/// `W_hh` `[G*H, H]` as the right operand of `h @ W_hh^T`, `[H, G*H]`
/// row-major, with the columns of each block of hidden units together (see
/// [`blocked_row`]).
fn blocked_weights<T: Copy>(w: *const T, gates: usize, hidden: usize) -> Vec<T> {
    let gh = gates * hidden;
    let mut out: Vec<T> = Vec::with_capacity(gh * hidden);
    // SAFETY: `w` holds `gh * hidden` elements (the caller's contract); the
    // loops write every element of `out`'s capacity (each (k, col) once),
    // and the length is set after them.
    unsafe {
        let o = out.as_mut_ptr();
        for col in 0..gh {
            let src = w.add(blocked_row(col, gates, hidden) * hidden);
            for k in 0..hidden {
                *o.add(k * gh + col) = *src.add(k);
            }
        }
        out.set_len(gh * hidden);
    }
    out
}

/// The right operand of the forward's per-step products (`h @ W_hh^T`,
/// `[K, N]` = `[H, G*H]`), multiplied by the gemm crate or, for float32
/// where the AVX-512 kernel runs, by [`igemm`]'s micro-kernel from a copy
/// packed once per call, the step's few rows of the hidden state read in
/// place.
///
/// Why not the crate every step: its call packs the right operand's block
/// each time (an LSTM task's 256 x 256 floats against 16 rows of the left
/// operand). Whole forward recurrence of a 256-unit LSTM layer, batch 16,
/// 35 steps, gate math included: 5.9 -> 4.0 ms at 1 thread, 4.3 -> 2.3 ms
/// at 2 (GRU, 192 columns a task: 3.0 -> 2.9). The backward's products
/// keep the crate (see [`backward`]).
struct Rhs<T> {
    /// Rows (`H`) and columns (`G*H`).
    k: usize,
    n: usize,
    kind: Kind<T>,
}

/// How [`Rhs`] holds `W_hh`.
enum Kind<T> {
    /// [`blocked_weights`]: row-major `[K, N]`, for the gemm crate.
    Plain(Vec<T>),
    /// [`igemm::PrePacked`] panels of the same matrix and the in-place
    /// column table of the left operand (`0..K`).
    Packed { panels: Vec<f32>, cols: Vec<isize> },
}

impl<T: 'static + Copy + Real> Rhs<T> {
    /// `W_hh` (`[G*H, H]`, contiguous) in [`blocked_row`]'s column order.
    ///
    /// # Safety
    /// `w` holds `gates * hidden * hidden` elements.
    unsafe fn new(w: *const T, gates: usize, hidden: usize) -> Rhs<T> {
        let (k, n) = (hidden, gates * hidden);
        if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() || !igemm::available() {
            let kind = Kind::Plain(blocked_weights(w, gates, hidden));
            return Rhs { k, n, kind };
        }
        let w = P(w as *mut f32);
        let mut panels = vec![0f32; igemm::PrePacked::len(k, n)];
        igemm::PrePacked::pack_all(&mut panels, 1, k, n, |_, k0, kc, j0, nr, dst| {
            for jj in 0..nr {
                // SAFETY: T is f32 (checked above); column `j0 + jj` is
                // the row `blocked_row` names, `k` contiguous elements.
                let src = unsafe { w.get().add(blocked_row(j0 + jj, gates, hidden) * k) };
                for kk in 0..kc {
                    dst[kk * igemm::NR + jj] = unsafe { *src.add(k0 + kk) };
                }
            }
        });
        let cols = (0..k as isize).collect();
        Rhs {
            k,
            n,
            kind: Kind::Packed { panels, cols },
        }
    }

    /// `dst[rows, n] = lhs[rows, K] @ self[:, c0..c0 + n]`,
    /// rows `dst_rs` and `lhs_rs` apart. `c0` is a multiple of
    /// [`igemm::NR`].
    ///
    /// # Safety
    /// The pointers address such matrices; nothing else writes `dst`'s
    /// elements meanwhile.
    #[allow(clippy::too_many_arguments)]
    unsafe fn product(
        &self,
        rows: usize,
        n: usize,
        dst: *mut T,
        dst_rs: usize,
        lhs: *const T,
        lhs_rs: usize,
        c0: usize,
    ) {
        let k = self.k;
        match &self.kind {
            Kind::Plain(wb) => gemm_one::<T>(
                rows,
                n,
                k,
                dst,
                dst_rs as isize,
                1,
                false,
                lhs,
                lhs_rs as isize,
                1,
                wb.as_ptr().add(c0),
                self.n as isize,
                1,
                T::ONE,
                T::ONE,
                false,
            ),
            Kind::Packed { panels, cols } => {
                debug_assert_eq!(c0 % igemm::NR, 0);
                igemm::gemm(
                    rows,
                    n,
                    k,
                    igemm::InPlace {
                        ptr: lhs as *const f32,
                        rs: lhs_rs,
                        cols,
                    },
                    igemm::PrePacked {
                        base: panels.as_ptr().add(c0 / igemm::NR * k * igemm::NR),
                        k,
                    },
                    dst as *mut f32,
                    dst_rs,
                    false,
                )
            }
        }
    }
}

/// Where row `r` of step `t`'s previous hidden state is: the previous step's
/// output row, or the initial state for a sequence that starts at `t`.
struct Prev {
    /// First flat row of the previous step (None at the first step).
    off: Option<usize>,
    /// Rows of the previous step.
    size: usize,
}

/// `dst[0..rows, 0..n] = prev_h[0..rows] @ rhs[:, c0..c0 + n]` where the
/// rows of `prev_h` come from the previous step's outputs (`y`) or, past
/// them, from `h0` (`k` wide).
#[allow(clippy::too_many_arguments)]
unsafe fn prev_h_product<T: 'static + Copy + Real>(
    rows: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: usize,
    prev: &Prev,
    y: Rows<T>,
    h0: *const T,
    rhs: &Rhs<T>,
    c0: usize,
) {
    let from_y = match prev.off {
        Some(_) => rows.min(prev.size),
        None => 0,
    };
    if from_y > 0 {
        rhs.product(
            from_y,
            n,
            dst,
            dst_rs,
            y.at(prev.off.unwrap_or(0), 0),
            y.rs,
            c0,
        );
    }
    if rows > from_y {
        rhs.product(
            rows - from_y,
            n,
            dst.add(from_y * dst_rs),
            dst_rs,
            h0.add(from_y * k),
            k,
            c0,
        );
    }
}

/// The forward recurrence of one layer-direction over all steps.
///
/// # Safety
/// Every pointer must hold the elements its field documents for `steps`
/// (`N = steps.rows()`, `B = steps.batch()`) and `hidden`; outputs must not
/// overlap inputs or each other.
pub(crate) unsafe fn forward<T: 'static + Copy + Send + Sync + Real>(
    cell: Cell,
    steps: &Steps,
    reverse: bool,
    hidden: usize,
    op: &Forward<T>,
) -> Result<(), KernelError> {
    let (gates, h, b) = (cell.gates(), hidden, steps.batch());
    if (cell == Cell::Lstm) != (op.c0.is_some() && op.cn.is_some() && op.cs.is_some()) {
        return Err(KernelError::InvalidArgument(
            "foo rnn: an LSTM needs c0, cn and the cell states; a GRU none".into(),
        ));
    }
    // The running states live in hn / cn: each task reads and writes only
    // its own columns of them.
    std::ptr::copy_nonoverlapping(op.h0, op.hn, b * h);
    if let (Some(c0), Some(cn)) = (op.c0, op.cn) {
        std::ptr::copy_nonoverlapping(c0, cn, b * h);
    }
    if steps.rows() == 0 || h == 0 {
        return Ok(());
    }
    let gh = gates * h;
    let rhs = Rhs::new(op.w_hh, gates, h);
    // Per-step product h_prev @ W_hh^T, in the blocked column order.
    let mut scratch: Vec<T> = vec![T::ZERO; b * gh];
    let sp = P(scratch.as_mut_ptr());
    let rhs = &rhs;
    let (xg, y, hn) = (op.xg, op.y, P(op.hn));
    let (h0, b_hh) = (P(op.h0 as *mut T), op.b_hh.map(|p| P(p as *mut T)));
    let (cn, cs, ws) = (op.cn.map(P), op.cs.map(P), op.ws.map(P));
    let mut prev = Prev { off: None, size: 0 };
    for t in steps.order(reverse) {
        let (off, bs) = (steps.offsets[t], steps.sizes[t]);
        let prev_ref = &prev;
        for_blocks(
            h,
            bs * h * gh,
            #[inline(always)]
            |j0, w| {
                let blk = sp.get().add(gates * j0);
                prev_h_product(
                    bs,
                    gates * w,
                    h,
                    blk,
                    gh,
                    prev_ref,
                    y,
                    h0.get(),
                    rhs,
                    gates * j0,
                );
                for r in 0..bs {
                    let s = blk.add(r * gh);
                    let x = xg.at(off + r, j0);
                    let hrow = hn.get().add(r * h + j0);
                    let yrow = y.at(off + r, j0);
                    match cell {
                        Cell::Lstm => {
                            let crow = cn.unwrap().get().add(r * h + j0);
                            let csrow = cs.unwrap().get().add((off + r) * h + j0);
                            lstm_cell(
                                s,
                                x,
                                h,
                                w,
                                crow,
                                hrow,
                                yrow,
                                csrow,
                                ws.map(|p| p.get().add((off + r) * 4 * h + j0)),
                                h,
                            );
                        }
                        Cell::Gru => {
                            gru_cell(
                                s,
                                x,
                                h,
                                w,
                                b_hh.map(|p| p.get().add(j0) as *const T),
                                hrow,
                                yrow,
                                ws.map(|p| p.get().add((off + r) * 4 * h + j0)),
                            );
                        }
                    }
                }
            },
        );
        prev = Prev {
            off: Some(off),
            size: bs,
        };
    }
    Ok(())
}

/// One row of an LSTM block: `s` holds the block's `h @ W_hh^T` (gate `g` at
/// `g*w`), `x` the input side (gate `g` at `g*h`); updates `c`, `hs` (the
/// running states) and writes the output, the cell state and the activated
/// gates (`ws`, gate `g` at `g*ws_h`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn lstm_cell<T: Real + Copy>(
    s: *const T,
    x: *const T,
    h: usize,
    w: usize,
    c: *mut T,
    hs: *mut T,
    y: *mut T,
    cs: *mut T,
    ws: Option<*mut T>,
    ws_h: usize,
) {
    for jj in 0..w {
        let i = (*s.add(jj) + *x.add(jj)).sigmoid();
        let f = (*s.add(w + jj) + *x.add(h + jj)).sigmoid();
        let g = (*s.add(2 * w + jj) + *x.add(2 * h + jj)).tanh();
        let o = (*s.add(3 * w + jj) + *x.add(3 * h + jj)).sigmoid();
        let cy = f * *c.add(jj) + i * g;
        let hy = o * cy.tanh();
        *c.add(jj) = cy;
        *cs.add(jj) = cy;
        *hs.add(jj) = hy;
        *y.add(jj) = hy;
        if let Some(ws) = ws {
            *ws.add(jj) = i;
            *ws.add(ws_h + jj) = f;
            *ws.add(2 * ws_h + jj) = g;
            *ws.add(3 * ws_h + jj) = o;
        }
    }
}

/// One row of a GRU block (see [`lstm_cell`]); `hs` holds the previous
/// hidden state on entry. `ws` gets `r, z, n, hn` (stride `h`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gru_cell<T: Real + Copy>(
    s: *const T,
    x: *const T,
    h: usize,
    w: usize,
    b_hh: Option<*const T>,
    hs: *mut T,
    y: *mut T,
    ws: Option<*mut T>,
) {
    for jj in 0..w {
        let (mut hr, mut hz, mut hn) = (*s.add(jj), *s.add(w + jj), *s.add(2 * w + jj));
        if let Some(bh) = b_hh {
            hr = hr + *bh.add(jj);
            hz = hz + *bh.add(h + jj);
            hn = hn + *bh.add(2 * h + jj);
        }
        let r = (*x.add(jj) + hr).sigmoid();
        let z = (*x.add(h + jj) + hz).sigmoid();
        let n = (*x.add(2 * h + jj) + r * hn).tanh();
        let hp = *hs.add(jj);
        let hy = n + z * (hp - n);
        *hs.add(jj) = hy;
        *y.add(jj) = hy;
        if let Some(ws) = ws {
            *ws.add(jj) = r;
            *ws.add(h + jj) = z;
            *ws.add(2 * h + jj) = n;
            *ws.add(3 * h + jj) = hn;
        }
    }
}

/// The backward recurrence of one layer-direction: the gate gradients of
/// every step, the initial states' gradients and the previous hidden state of
/// every step (for the caller's `dW_hh` product).
///
/// # Safety
/// As [`forward`], for the fields of [`Backward`].
pub(crate) unsafe fn backward<T: 'static + Copy + Send + Sync + Real>(
    cell: Cell,
    steps: &Steps,
    reverse: bool,
    hidden: usize,
    op: &Backward<T>,
) -> Result<(), KernelError> {
    let (gates, h, b) = (cell.gates(), hidden, steps.batch());
    let lstm = cell == Cell::Lstm;
    if lstm != (op.c0.is_some() && op.dcn.is_some() && op.dc0.is_some() && op.cs.is_some())
        || lstm == op.dgh.is_some()
    {
        return Err(KernelError::InvalidArgument(
            "foo rnn backward: an LSTM needs c0, dcn, dc0 and the cell states; a GRU dgh".into(),
        ));
    }
    // Running gradients of the hidden and cell state, per column block.
    std::ptr::copy_nonoverlapping(op.dhn, op.dh0, b * h);
    if let (Some(dcn), Some(dc0)) = (op.dcn, op.dc0) {
        std::ptr::copy_nonoverlapping(dcn, dc0, b * h);
    }
    if steps.rows() == 0 || h == 0 {
        return Ok(());
    }
    let gh = gates * h;
    let dgx = P(op.dgx);
    let dgh = P(op.dgh.unwrap_or(op.dgx));
    let (dh, dc) = (P(op.dh0), op.dc0.map(P));
    let (dy, y, h0) = (op.dy, op.y, P(op.h0 as *mut T));
    let (c0, cs, ws) = (
        op.c0.map(|p| P(p as *mut T)),
        op.cs.map(|p| P(p as *mut T)),
        P(op.ws as *mut T),
    );
    let (w_hh, hprev) = (P(op.w_hh as *mut T), P(op.hprev));
    // Adds (GRU) or writes (LSTM) `dgh[rows of step] @ W_hh[:, block]` into
    // the running hidden-state gradient. The gemm crate, not [`Rhs`]'s
    // packed kernel: with 64 columns and `K = G*H` per task the packed
    // kernel was slower (LSTM 256 units, batch 16: 4.0 vs 3.7 ms per layer
    // at 1 thread, 2.1 vs 1.9 at 2; GRU 3.0 vs 2.8), and with the step's
    // rows packed too (the 12-row kernel) slower still (4.2, 2.7, 3.2).
    let recur = move |next: (usize, usize), j0: usize, w: usize| {
        let (noff, nbs) = next;
        gemm_one::<T>(
            nbs,
            w,
            gh,
            dh.get().add(j0),
            h as isize,
            1,
            !lstm,
            dgh.get().add(noff * gh),
            gh as isize,
            1,
            w_hh.get().add(j0),
            h as isize,
            1,
            T::ONE,
            T::ONE,
            false,
        );
    };
    let order = steps.order(reverse);
    let mut next: Option<(usize, usize)> = None;
    for (pos, &t) in order.iter().enumerate().rev() {
        let (off, bs) = (steps.offsets[t], steps.sizes[t]);
        // The step that ran before `t` in the forward.
        let (poff, psize) = match pos.checked_sub(1) {
            Some(p) => (Some(steps.offsets[order[p]]), steps.sizes[order[p]]),
            None => (None, 0),
        };
        let next_ref = next;
        for_blocks(
            h,
            (bs + next_ref.map_or(0, |n| n.1)) * h * gh,
            #[inline(always)]
            |j0, w| {
                if let Some(nx) = next_ref {
                    recur(nx, j0, w);
                }
                for r in 0..bs {
                    let from_y = poff.is_some() && r < psize;
                    let hp_row = if from_y {
                        y.at(poff.unwrap_or(0) + r, j0) as *const T
                    } else {
                        h0.get().add(r * h + j0) as *const T
                    };
                    std::ptr::copy_nonoverlapping(hp_row, hprev.get().add((off + r) * h + j0), w);
                    let dyr = dy.at(off + r, j0) as *const T;
                    let dhr = dh.get().add(r * h + j0);
                    let wsr = ws.get().add((off + r) * 4 * h + j0) as *const T;
                    let gx = dgx.get().add((off + r) * gh + j0);
                    if lstm {
                        let cp_row = if from_y {
                            cs.unwrap().get().add((poff.unwrap_or(0) + r) * h + j0)
                        } else {
                            c0.unwrap().get().add(r * h + j0)
                        } as *const T;
                        let c_row = cs.unwrap().get().add((off + r) * h + j0) as *const T;
                        lstm_cell_backward(
                            dyr,
                            dhr,
                            dc.unwrap().get().add(r * h + j0),
                            wsr,
                            c_row,
                            cp_row,
                            gx,
                            h,
                            w,
                        );
                    } else {
                        gru_cell_backward(
                            dyr,
                            dhr,
                            wsr,
                            hp_row,
                            gx,
                            dgh.get().add((off + r) * gh + j0),
                            h,
                            w,
                        );
                    }
                }
            },
        );
        next = Some((off, bs));
    }
    if let Some(nx) = next {
        for_blocks(
            h,
            nx.1 * h * gh,
            #[inline(always)]
            |j0, w| recur(nx, j0, w),
        );
    }
    Ok(())
}

/// One row of an LSTM block's backward: `dh` / `dc` hold the running
/// gradients of the step's outputs `h` (without `dy`) and `c`; writes the
/// gate gradients and leaves `dc` the gradient of the previous cell state.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn lstm_cell_backward<T: Real + Copy>(
    dy: *const T,
    dh: *const T,
    dc: *mut T,
    ws: *const T,
    c: *const T,
    c_prev: *const T,
    dg: *mut T,
    h: usize,
    w: usize,
) {
    let one = T::ONE;
    for jj in 0..w {
        let (i, f, g, o) = (
            *ws.add(jj),
            *ws.add(h + jj),
            *ws.add(2 * h + jj),
            *ws.add(3 * h + jj),
        );
        let dhy = *dy.add(jj) + *dh.add(jj);
        let tc = (*c.add(jj)).tanh();
        let dcy = dhy * o * (one - tc * tc) + *dc.add(jj);
        *dg.add(jj) = dcy * g * i * (one - i);
        *dg.add(h + jj) = dcy * *c_prev.add(jj) * f * (one - f);
        *dg.add(2 * h + jj) = dcy * i * (one - g * g);
        *dg.add(3 * h + jj) = dhy * tc * o * (one - o);
        *dc.add(jj) = dcy * f;
    }
}

/// One row of a GRU block's backward: writes the gradients of the input-side
/// and hidden-side gate pre-activations and leaves in `dh` the direct part
/// of the previous hidden state's gradient (`dh * z`; the product with
/// `W_hh` is added by the next step).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gru_cell_backward<T: Real + Copy>(
    dy: *const T,
    dh: *mut T,
    ws: *const T,
    h_prev: *const T,
    dgx: *mut T,
    dgh: *mut T,
    h: usize,
    w: usize,
) {
    let one = T::ONE;
    for jj in 0..w {
        let (r, z, n, hn) = (
            *ws.add(jj),
            *ws.add(h + jj),
            *ws.add(2 * h + jj),
            *ws.add(3 * h + jj),
        );
        let dhy = *dy.add(jj) + *dh.add(jj);
        let dz = dhy * (*h_prev.add(jj) - n) * z * (one - z);
        let dn = dhy * (one - z) * (one - n * n);
        let dr = dn * hn * r * (one - r);
        *dgx.add(jj) = dr;
        *dgx.add(h + jj) = dz;
        *dgx.add(2 * h + jj) = dn;
        *dgh.add(jj) = dr;
        *dgh.add(h + jj) = dz;
        *dgh.add(2 * h + jj) = dn * r;
        *dh.add(jj) = dhy * z;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// A plain per-step LSTM over an unpacked batch, for reference.
    fn lstm_ref(
        x: &[f64],
        t: usize,
        b: usize,
        h: usize,
        w: &[f64],
        h0: &[f64],
        c0: &[f64],
    ) -> Vec<f64> {
        let (mut hs, mut cs) = (h0.to_vec(), c0.to_vec());
        let mut out = vec![0.0; t * b * h];
        for s in 0..t {
            let mut nh = hs.clone();
            for r in 0..b {
                for j in 0..h {
                    let pre = |g: usize| {
                        let mut v = x[(s * b + r) * 4 * h + g * h + j];
                        for k in 0..h {
                            v += hs[r * h + k] * w[(g * h + j) * h + k];
                        }
                        v
                    };
                    let (i, f, g, o) = (sig(pre(0)), sig(pre(1)), pre(2).tanh(), sig(pre(3)));
                    let c = f * cs[r * h + j] + i * g;
                    cs[r * h + j] = c;
                    nh[r * h + j] = o * c.tanh();
                    out[(s * b + r) * h + j] = nh[r * h + j];
                }
            }
            hs = nh;
        }
        out
    }

    use crate::kernels::uniform as fill;

    /// [`forward`] of an LSTM (no `b_hh`, no workspace) over the given step
    /// sizes at `threads` threads: `(outputs, h_n)`.
    fn run_lstm<T: 'static + Copy + Send + Sync + Real>(
        (x, w, h0, c0): (&[T], &[T], &[T], &[T]),
        h: usize,
        sizes: &[usize],
        threads: usize,
    ) -> (Vec<T>, Vec<T>) {
        let steps = Steps::new(sizes).unwrap();
        let (n, b) = (steps.rows(), steps.batch());
        let (mut y, mut hn, mut cn, mut cs) = (
            vec![T::ZERO; n * h],
            vec![T::ZERO; b * h],
            vec![T::ZERO; b * h],
            vec![T::ZERO; n * h],
        );
        let op = Forward {
            xg: Rows::new(x.as_ptr() as *mut T, 4 * h),
            w_hh: w.as_ptr(),
            b_hh: None,
            h0: h0.as_ptr(),
            c0: Some(c0.as_ptr()),
            y: Rows::new(y.as_mut_ptr(), h),
            hn: hn.as_mut_ptr(),
            cn: Some(cn.as_mut_ptr()),
            cs: Some(cs.as_mut_ptr()),
            ws: None,
        };
        // SAFETY: the operands hold what `Forward` documents for `steps`.
        parallel::with_threads(threads, || unsafe {
            forward(Cell::Lstm, &steps, false, h, &op)
        })
        .unwrap();
        (y, hn)
    }

    #[test]
    fn lstm_forward_matches_per_step_reference_and_any_thread_count() {
        let (t, b, h) = (5, 3, 70); // two blocks, the second partial
        let x = fill(t * b * 4 * h, 1);
        let w = fill(4 * h * h, 2)
            .iter()
            .map(|v| v * 0.2)
            .collect::<Vec<_>>();
        let (h0, c0) = (fill(b * h, 3), fill(b * h, 4));
        let expected = lstm_ref(&x, t, b, h, &w, &h0, &c0);
        let run = |threads| run_lstm((&x, &w, &h0, &c0), h, &vec![b; t], threads);
        let (y1, hn1) = run(1);
        let (y2, _) = run(2);
        assert_eq!(y1, y2);
        for (a, e) in y1.iter().zip(&expected) {
            assert!((a - e).abs() < 1e-12, "{a} vs {e}");
        }
        assert_eq!(&hn1[..], &y1[(t - 1) * b * h..]);
    }

    /// float32 takes the packed kernel ([`Kind::Packed`] where AVX-512 runs):
    /// against the float64 reference within float32's rounding, bit for bit
    /// at 1 and 2 threads; widths whose last block is partial (70: 24
    /// columns, under one panel; 100: 144, four and a half) and a packed
    /// sequence whose batch shrinks (the rows from `h0` past the previous
    /// step's).
    #[test]
    fn float32_forward_matches_reference_at_any_thread_count() {
        for h in [70usize, 100] {
            let (t, b) = (6, 5);
            let x = fill(t * b * 4 * h, 1);
            let w: Vec<f64> = fill(4 * h * h, 2).iter().map(|v| v * 0.2).collect();
            let (h0, c0) = (fill(b * h, 3), fill(b * h, 4));
            let expected = lstm_ref(&x, t, b, h, &w, &h0, &c0);
            let f = |v: &[f64]| v.iter().map(|&e| e as f32).collect::<Vec<f32>>();
            let (x32, w32, h032, c032) = (f(&x), f(&w), f(&h0), f(&c0));
            // SAFETY: w32 holds 4 h x h elements.
            let rhs = unsafe { Rhs::new(w32.as_ptr(), 4, h) };
            assert_eq!(matches!(rhs.kind, Kind::Packed { .. }), igemm::available());
            let run =
                |sizes: &[usize], threads| run_lstm((&x32, &w32, &h032, &c032), h, sizes, threads);
            let (y1, hn1) = run(&vec![b; t], 1);
            assert_eq!(y1, run(&vec![b; t], 2).0, "h {h}");
            for (i, (a, e)) in y1.iter().zip(&expected).enumerate() {
                assert!(
                    (*a as f64 - e).abs() < 2e-5,
                    "h {h} element {i}: {a} vs {e}"
                );
            }
            assert_eq!(&hn1[..], &y1[(t - 1) * b * h..]);
            // Packed: 5, 5, 3, 3, 2, 1 rows; the same thread invariance.
            let sizes = [5, 5, 3, 3, 2, 1];
            assert_eq!(run(&sizes, 1), run(&sizes, 2), "h {h} packed");
        }
    }

    #[test]
    fn increasing_batch_sizes_are_refused() {
        assert!(Steps::new(&[2, 3]).is_err());
        let s = Steps::new(&[3, 2, 2]).unwrap();
        assert_eq!((s.batch(), s.rows()), (3, 7));
    }
}
