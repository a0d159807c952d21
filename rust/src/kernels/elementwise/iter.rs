//! The elementwise engine, in the spirit of ATen's `TensorIterator`.
//!
//! Given outputs (all of one shape) and inputs (tensors broadcast to that
//! shape, or scalars), it
//! 1. broadcasts every input (leading dims added, size-1 dims get stride 0),
//! 2. refuses outputs that overlap themselves or partially overlap an input
//!    (exact aliasing, i.e. in-place, is fine),
//! 3. orders dimensions by the outputs' strides and coalesces the ones that
//!    are contiguous for every operand, so most calls become one flat loop,
//! 4. splits the flat index range into tasks for `parallel::parallel_for`
//!    (above `GRAIN_SIZE`),
//! 5. runs the kernel on contiguous runs: operands that are already
//!    contiguous in the kernel's dtype are passed straight through; others
//!    (strided, broadcast, or of another dtype) are loaded with a cast into a
//!    stack block, and outputs are cast/scattered back.
//!
//! A kernel only ever sees rows of its own compute dtypes, contiguous or
//! (an input broadcast along a row) one value per row ([`Rows`]). Each
//! output element depends only on the input elements at the same index, and
//! the inner loops compute the same bits whatever their position or level, so
//! results do not depend on the number of threads or the split.

use super::cast::{self, Scalar};
use super::simd::Rows;
use crate::dtype::DType;
use crate::kernels::parallel;
use crate::kernels::{KernelError, Sizes, Strided, Strides, GRAIN_SIZE, INLINE_DIMS};

/// An input of an elementwise op.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// A tensor view; broadcast to the output shape.
    Tensor(&'a Strided),
    /// A scalar value (a Python number), converted to the compute dtype.
    Scalar(Scalar),
}

impl<'a> Operand<'a> {
    /// The dtype of a tensor operand.
    pub fn dtype(&self) -> Option<DType> {
        match self {
            Operand::Tensor(t) => Some(t.dtype),
            Operand::Scalar(_) => None,
        }
    }
}

impl<'a> From<&'a Strided> for Operand<'a> {
    fn from(t: &'a Strided) -> Self {
        Operand::Tensor(t)
    }
}

/// The inner loop: rows of output and input buffers ([`Rows`]), each in the
/// compute dtype the caller declared for it.
pub(crate) type KernelFn<'k> = dyn Fn(&Rows) -> Result<(), KernelError> + Sync + 'k;

/// How a call's operand views come.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Layout {
    /// Any views: the engine broadcasts the inputs to the output's shape,
    /// checks memory overlap, and orders and coalesces the dims (steps 1-3
    /// above). Python bindings, tests and benches call this way.
    #[default]
    View,
    /// As an ATen `TensorIterator` leaves them (the C++ glue's calls): every
    /// tensor operand has the output's shape (a broadcast dim has stride 0),
    /// dims come innermost first and coalesced, and ATen has checked memory
    /// overlap. The engine skips steps 1-3, which cost more than a small
    /// op's arithmetic (about 1,700 instructions of a broadcast add's 4,800).
    Iter,
}

/// Most operands one call can have (outputs + inputs).
pub const MAX_OPERANDS: usize = 8;
/// Elements per staged block.
pub(crate) const BLOCK: usize = 1024;
/// Rows shorter than this are not [`run_rows`]'s (the general engine's
/// blocks span them).
const MIN_COPY_ROW: usize = 32;
/// Below this inner extent (after coalescing) blocks span several rows.
/// A kernel call per row cost more than staging the rows' non-dense
/// operands into a block: a squeeze-excite scale (`[8, 576, 7, 7] *
/// [8, 576, 1, 1]`, 49-element rows) took 6x CPU's time at 32.
const MIN_ROW: usize = 128;
/// Stack space for staging buffers; more falls back to the heap.
const STACK_BYTES: usize = 16384;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Contiguous along the inner dim and already in the kernel dtype.
    Direct,
    /// The same value everywhere (scalar, 0-d or fully broadcast).
    Const,
    /// Loaded/stored through a block buffer.
    Staged,
}

/// Per-dimension values of a plan, inline up to the rank a view keeps
/// inline (no allocation on the per-call path).
type Dims<T> = smallvec::SmallVec<[T; INLINE_DIMS]>;

#[derive(Clone, Debug)]
struct OpPlan {
    ptr: *mut u8,
    dtype: DType,
    kd: DType,
    mode: Mode,
    konst: u64,
    /// Round float32 kernel values through the 16-bit compute dtype.
    round: bool,
    /// `Direct` and dense in the plan's order (flat index = element offset):
    /// blocks that span rows read and write it in place, unstaged.
    flat: bool,
    strides: Dims<isize>,
}

impl Default for OpPlan {
    fn default() -> OpPlan {
        OpPlan {
            ptr: std::ptr::null_mut(),
            dtype: DType::Bool,
            kd: DType::Bool,
            mode: Mode::Const,
            konst: 0,
            round: false,
            flat: false,
            strides: Dims::from_elem(0, 0),
        }
    }
}

struct Plan<'k, 'p> {
    /// Innermost dimension first; at least one dimension.
    sizes: Dims<usize>,
    /// The `nops` operands (borrowed: a plan is built on every call).
    ops: &'p [OpPlan],
    nops: usize,
    nout: usize,
    via: DType,
    kernel: &'k KernelFn<'k>,
}

// SAFETY: the plan holds raw pointers into tensors the caller keeps alive for
// the call; tasks write disjoint output elements.
unsafe impl Sync for Plan<'_, '_> {}

fn shape_str(s: &[usize]) -> String {
    format!("{s:?}")
}

/// The shape two shapes broadcast to (torch rules).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, KernelError> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(KernelError::ShapeMismatch(format!(
                "The size of tensor a ({da}) must match the size of tensor b ({db}) at non-singleton dimension {i}"
            )));
        };
    }
    Ok(out)
}

/// torch's type promotion for two tensors of the same dimensionality class.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    let rank = |d: DType| match d {
        Bool => 0,
        U8 | I8 | I16 | I32 | I64 => 1,
        _ => 2,
    };
    match (rank(a), rank(b)) {
        (0, _) => b,
        (_, 0) => a,
        (1, 2) => b,
        (2, 1) => a,
        (1, 1) => {
            let (x, y) = if a == U8 { (a, b) } else { (b, a) };
            if x == U8 {
                // uint8 with a signed type: the smallest signed type holding both.
                match y {
                    I8 | I16 => I16,
                    other => other,
                }
            } else if a.size() >= b.size() {
                a
            } else {
                b
            }
        }
        _ => {
            if matches!((a, b), (F16, BF16) | (BF16, F16)) {
                F32
            } else if a.size() >= b.size() {
                a
            } else {
                b
            }
        }
    }
}

fn broadcast_strides(t: &Strided, shape: &[usize]) -> Result<Dims<isize>, KernelError> {
    if t.sizes.len() != t.strides.len() {
        return Err(KernelError::InvalidArgument(format!(
            "foo: tensor has {} sizes but {} strides",
            t.sizes.len(),
            t.strides.len()
        )));
    }
    let nd = shape.len();
    let bad = || {
        KernelError::ShapeMismatch(format!(
            "foo: a tensor of shape {} cannot be broadcast to the output shape {}",
            shape_str(&t.sizes),
            shape_str(shape)
        ))
    };
    if t.sizes.len() > nd {
        // Extra leading dims are allowed only if they are all 1.
        let extra = t.sizes.len() - nd;
        if t.sizes[..extra].iter().any(|&s| s != 1) {
            return Err(bad());
        }
    }
    let mut st = Dims::from_elem(0isize, nd);
    for i in 0..nd.min(t.sizes.len()) {
        let d = nd - 1 - i;
        let td = t.sizes.len() - 1 - i;
        if t.sizes[td] == shape[d] {
            st[d] = if shape[d] == 1 { 0 } else { t.strides[td] };
        } else if t.sizes[td] == 1 {
            st[d] = 0;
        } else {
            return Err(bad());
        }
    }
    Ok(st)
}

const INTERNAL_OVERLAP: &str = "unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation.";
const PARTIAL_OVERLAP: &str = "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory location. Please clone() the tensor before performing the operation.";

fn check_overlap(outs: &[(&Strided, DType)], ins: &[(Operand, DType)]) -> Result<(), KernelError> {
    for (o, _) in outs {
        if !o.is_non_overlapping_and_dense()
            && o.sizes
                .iter()
                .zip(&o.strides)
                .any(|(&s, &st)| s > 1 && st == 0)
        {
            return Err(KernelError::InvalidArgument(INTERNAL_OVERLAP.into()));
        }
        if !o.is_non_overlapping_and_dense() {
            continue;
        }
        for (i, _) in ins {
            let Operand::Tensor(t) = i else { continue };
            if t.numel() == 0 || !t.is_non_overlapping_and_dense() {
                continue;
            }
            let same = t.ptr == o.ptr
                && t.sizes == o.sizes
                && t.strides == o.strides
                && t.dtype.size() == o.dtype.size();
            if !same && t.overlaps(o) {
                return Err(KernelError::InvalidArgument(PARTIAL_OVERLAP.into()));
            }
        }
    }
    Ok(())
}

/// Strides (in elements) of the output ATen's `TensorIterator` allocates for
/// `shape` from inputs of the given sizes and strides: contiguous, or the
/// inputs' layout when they all share one dense layout, or dense in the
/// order the inputs' strides suggest (e.g. a transposed input gives a
/// transposed output).
pub fn output_strides(shape: &[usize], inputs: &[(&[usize], &[isize])]) -> Vec<isize> {
    let nd = shape.len();
    let contiguous = crate::kernels::contiguous_strides(shape);
    if nd <= 1 || inputs.is_empty() {
        return contiguous;
    }
    // ATen's fast set-up: inputs of the output's shape sharing one dense layout.
    if inputs.iter().all(|(s, _)| *s == shape) {
        let first = inputs[0].1;
        let dense = |st: &[isize]| crate::kernels::is_non_overlapping_and_dense(shape, st);
        if inputs.iter().all(|(_, st)| *st == first) && dense(first) {
            return first.to_vec();
        }
    }
    let mut ops: Vec<OpPlan> = Vec::with_capacity(inputs.len());
    for (sizes, strides) in inputs {
        let t = Strided {
            ptr: std::ptr::null_mut(),
            dtype: DType::U8,
            sizes: Sizes::from_slice(sizes),
            strides: Strides::from_slice(strides),
        };
        match broadcast_strides(&t, shape) {
            Ok(st) => ops.push(OpPlan {
                mode: Mode::Staged,
                strides: st,
                ..Default::default()
            }),
            Err(_) => return contiguous,
        }
    }
    let perm = permutation(shape, &ops);
    if perm.iter().enumerate().all(|(k, &d)| d == nd - 1 - k) {
        return contiguous;
    }
    let mut out = vec![0isize; nd];
    let mut acc = 1isize;
    for &d in perm.iter() {
        out[d] = acc;
        acc *= shape[d].max(1) as isize;
    }
    out
}

/// Runs `kernel` over the outputs and inputs. `outs[i].1` / `ins[i].1` are
/// the dtypes the kernel computes in for that operand; the engine casts.
#[allow(dead_code)]
pub(crate) fn run(
    outs: &[(&Strided, DType)],
    ins: &[(Operand, DType)],
    kernel: &KernelFn,
) -> Result<(), KernelError> {
    run_via(outs, ins, kernel, None, Layout::View)
}

/// [`run`] for an op whose common dtype `via` is float16 or bfloat16 while
/// the kernel computes in float32 (ATen's opmath): every float32 operand
/// value that is not already of dtype `via` is rounded through it, inputs
/// on load (as TensorIterator casts inputs to the common dtype) and outputs
/// before the store (as ATen writes the common dtype, then casts).
///
/// `layout` says whether the views still need broadcasting, overlap checks
/// and ordering ([`Layout`]).
pub(crate) fn run_via(
    outs: &[(&Strided, DType)],
    ins: &[(Operand, DType)],
    kernel: &KernelFn,
    via: Option<DType>,
    layout: Layout,
) -> Result<(), KernelError> {
    let planned = layout == Layout::Iter;
    assert!(!outs.is_empty() && outs.len() + ins.len() <= MAX_OPERANDS);
    if via.is_none() {
        if let Some(r) = run_flat(outs, ins, kernel, planned) {
            return r;
        }
        if planned {
            if let Some(r) = run_broadcast_rows(outs, ins, kernel) {
                return r;
            }
        }
    }
    let shape: &[usize] = &outs[0].0.sizes;
    let nd = shape.len();
    let mut ops: [OpPlan; MAX_OPERANDS] = Default::default();
    let nout = outs.len();
    let nops = nout + ins.len();
    for (k, (o, kd)) in outs.iter().enumerate() {
        if o.sizes.as_slice() != shape {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: outputs have different shapes {} and {}",
                shape_str(shape),
                shape_str(&o.sizes)
            )));
        }
        if o.strides.len() != nd {
            return Err(KernelError::InvalidArgument(
                "foo: output sizes and strides differ in length".into(),
            ));
        }
        ops[k] = OpPlan {
            ptr: o.ptr,
            dtype: o.dtype,
            kd: *kd,
            mode: Mode::Staged,
            konst: 0,
            round: false,
            flat: false,
            strides: Dims::from_slice(&o.strides),
        };
    }
    for (k, (i, kd)) in ins.iter().enumerate() {
        ops[nout + k] = match i {
            Operand::Tensor(t) => OpPlan {
                ptr: t.ptr,
                dtype: t.dtype,
                kd: *kd,
                mode: Mode::Staged,
                konst: 0,
                round: false,
                flat: false,
                strides: if planned && t.sizes.as_slice() == shape && t.strides.len() == nd {
                    Dims::from_slice(&t.strides)
                } else {
                    broadcast_strides(t, shape)?
                },
            },
            Operand::Scalar(s) => OpPlan {
                ptr: std::ptr::null_mut(),
                dtype: *kd,
                kd: *kd,
                mode: Mode::Const,
                konst: cast::scalar_bits(*s, *kd),
                round: false,
                flat: false,
                strides: Dims::from_elem(0, nd),
            },
        };
    }
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Ok(());
    }
    if !planned {
        check_overlap(outs, ins)?;
    }

    let via_dt = via.unwrap_or(DType::F32);
    for (k, op) in ops[..nops].iter_mut().enumerate() {
        let scalar = k >= nout && matches!(ins[k - nout].0, Operand::Scalar(_));
        op.round = via.is_some() && op.kd == DType::F32 && (scalar || op.dtype != via_dt);
        if k < nout {
            continue;
        }
        if scalar {
            if op.round {
                let Operand::Scalar(s) = ins[k - nout].0 else {
                    unreachable!()
                };
                op.konst = cast::scalar_bits(s, via_dt);
                // SAFETY: `konst` holds one element of dtype `via_dt`.
                op.konst =
                    unsafe { cast::load_one(&op.konst as *const u64 as *const u8, via_dt, op.kd) };
            }
        } else if op
            .strides
            .iter()
            .zip(shape)
            .all(|(&st, &s)| st == 0 || s == 1)
        {
            // SAFETY: a non-empty tensor has an element at `ptr`.
            op.konst = unsafe { cast::load_one(op.ptr, op.dtype, op.kd) };
            if op.round {
                round_through(&mut op.konst as *mut u64 as *mut f32, 1, via_dt);
            }
            op.mode = Mode::Const;
        }
    }

    let sizes = if planned && nd > 0 {
        Dims::from_slice(shape)
    } else {
        reorder_and_coalesce(shape, &mut ops[..nops])
    };
    for op in ops[..nops].iter_mut() {
        if op.mode != Mode::Const {
            op.mode = if op.dtype == op.kd && !op.round && (op.strides[0] == 1 || sizes[0] == 1) {
                Mode::Direct
            } else {
                Mode::Staged
            };
            op.flat = op.mode == Mode::Direct && is_dense_in_order(&sizes, &op.strides);
        }
    }
    let plan = Plan {
        sizes,
        ops: &ops[..nops],
        nops,
        nout,
        via: via_dt,
        kernel,
    };
    plan.execute(numel)
}

/// Whether `strides` lay the plan's `sizes` out densely, innermost first.
fn is_dense_in_order(sizes: &[usize], strides: &[isize]) -> bool {
    let mut expect = 1isize;
    for (&n, &st) in sizes.iter().zip(strides) {
        if n != 1 && st != expect {
            return false;
        }
        expect *= n as isize;
    }
    true
}

/// Scalar inputs [`run_flat`] takes: each is expanded into a stack block.
const FLAT_SCALARS: usize = 2;

/// The common case without planning: every operand is a contiguous tensor
/// of the output's shape, already in its kernel dtype, or (for at most
/// `BLOCK` elements) a scalar. `None` if not. `planned`: the views are
/// [`Layout::Iter`]'s, so they share one shape and ATen checked overlap.
fn run_flat(
    outs: &[(&Strided, DType)],
    ins: &[(Operand, DType)],
    kernel: &KernelFn,
    planned: bool,
) -> Option<Result<(), KernelError>> {
    let shape = &outs[0].0.sizes;
    let plain = |t: &Strided, kd: DType| {
        t.dtype == kd && (planned || &t.sizes == shape) && t.is_contiguous()
    };
    if !outs
        .iter()
        .all(|(o, kd)| plain(o, *kd) && o.strides.len() == shape.len())
    {
        return None;
    }
    let n: usize = shape.iter().product();
    let mut iptr = [std::ptr::null::<u8>(); MAX_OPERANDS];
    let mut is_tensor = [false; MAX_OPERANDS];
    let mut blocks = std::mem::MaybeUninit::<[[u64; BLOCK]; FLAT_SCALARS]>::uninit();
    let mut nscalars = 0;
    for (k, (i, kd)) in ins.iter().enumerate() {
        match i {
            Operand::Tensor(t) if plain(t, *kd) => {
                iptr[k] = t.ptr;
                is_tensor[k] = true;
            }
            Operand::Scalar(v) if n <= BLOCK && nscalars < FLAT_SCALARS => {
                // SAFETY: block `nscalars` holds BLOCK elements of up to 8 bytes.
                let buf =
                    unsafe { (blocks.as_mut_ptr() as *mut [u64; BLOCK]).add(nscalars) } as *mut u8;
                // SAFETY: `n <= BLOCK` elements of `kd` fit the block.
                unsafe { fill_const(buf, cast::scalar_bits(*v, *kd), kd.size(), n) };
                iptr[k] = buf;
                nscalars += 1;
            }
            _ => return None,
        }
    }
    if n == 0 {
        return Some(Ok(()));
    }
    // Contiguous views of one shape either coincide or overlap partially.
    for (o, _) in outs.iter().filter(|_| !planned) {
        let (olo, ohi) = (o.ptr as usize, o.ptr as usize + n * o.dtype.size());
        for (k, (_, kd)) in ins.iter().enumerate() {
            if !is_tensor[k] {
                continue;
            }
            let (lo, hi) = (iptr[k] as usize, iptr[k] as usize + n * kd.size());
            if lo < ohi && olo < hi && (lo != olo || kd.size() != o.dtype.size()) {
                return Some(Err(KernelError::InvalidArgument(PARTIAL_OVERLAP.into())));
            }
        }
    }
    let mut optr = [std::ptr::null_mut::<u8>(); MAX_OPERANDS];
    for (k, (o, _)) in outs.iter().enumerate() {
        optr[k] = o.ptr;
    }
    let (nout, nin) = (outs.len(), ins.len());
    let osz: [usize; MAX_OPERANDS] = std::array::from_fn(|k| outs.get(k).map_or(0, |o| o.1.size()));
    let isz: [usize; MAX_OPERANDS] = std::array::from_fn(|k| ins.get(k).map_or(0, |i| i.1.size()));
    struct Ptrs([*mut u8; MAX_OPERANDS], [*const u8; MAX_OPERANDS]);
    // SAFETY: tasks touch disjoint element ranges of live tensors.
    unsafe impl Sync for Ptrs {}
    let p = Ptrs(optr, iptr);
    Some(for_chunks(n, 1, |s, e| {
        let p = &p;
        let o: [*mut u8; MAX_OPERANDS] = std::array::from_fn(|k| p.0[k].wrapping_add(s * osz[k]));
        let i: [*const u8; MAX_OPERANDS] = std::array::from_fn(|k| p.1[k].wrapping_add(s * isz[k]));
        kernel(&Rows::flat(e - s, &o[..nout], &i[..nin]))
    }))
}

/// Rows at most this long take [`run_broadcast_rows`] only if there are few of them
/// (a row this short is mostly its loop's scalar tail; the plan's blocks span
/// short rows instead).
const ROWS_SHORT: usize = 16;
/// Rows at least this long take [`run_broadcast_rows`] at any size (split
/// over threads by rows).
const ROWS_LONG: usize = 32;

/// A broadcast without a plan: [`Layout::Iter`] views of two dims (ATen
/// coalesced the rest), every operand a tensor already in its kernel dtype,
/// contiguous along the inner dim or broadcast along it (stride 0: a
/// squeeze-excite scale `[n, c, 1, 1]` over `h x w`), with an outer stride
/// of its own (0 for a broadcast row such as a bias): one kernel call per
/// task over its rows ([`Rows`]), straight on the operands. Building the
/// plan cost about 1,600 instructions of a `[4, 8] + [8]` add's 9,300
/// (callgrind), against ATen's whole loop of about 700; at larger sizes its
/// per-row bookkeeping made a `[1024, 128] * [128]` 2.5x CPU's time. A call
/// per row, with the broadcast value filled into a buffer, still left a
/// squeeze-excite scale (`[8, 576, 7, 7] * [8, 576, 1, 1]`) at 1.7x.
/// `None` if not that case.
fn run_broadcast_rows(
    outs: &[(&Strided, DType)],
    ins: &[(Operand, DType)],
    kernel: &KernelFn,
) -> Option<Result<(), KernelError>> {
    let shape = &outs[0].0.sizes;
    if shape.len() != 2 {
        return None;
    }
    let (inner, rows) = (shape[0], shape[1]);
    let n = inner * rows;
    if n == 0 || (inner < ROWS_SHORT && rows > ROWS_SHORT) || (n > GRAIN_SIZE && inner < ROWS_LONG)
    {
        return None;
    }
    // (address, outer stride in bytes, broadcast along the row) of each operand.
    let fits = |t: &Strided, kd: DType, input: bool| {
        let bcast = input && inner > 1 && t.strides.len() == 2 && t.strides[0] == 0;
        (t.dtype == kd && t.strides.len() == 2 && (t.strides[0] == 1 || inner == 1 || bcast))
            .then(|| (t.ptr as usize, t.strides[1] * kd.size() as isize, bcast))
    };
    let mut o = [(0usize, 0isize, false); MAX_OPERANDS];
    for (k, (t, kd)) in outs.iter().enumerate() {
        o[k] = fits(t, *kd, false)?;
    }
    let mut i = [(0usize, 0isize, false); MAX_OPERANDS];
    for (k, (op, kd)) in ins.iter().enumerate() {
        let Operand::Tensor(t) = op else {
            return None;
        };
        i[k] = fits(t, *kd, true)?;
    }
    let (nout, nin) = (outs.len(), ins.len());
    let bcast = (0..nin).fold(0u32, |m, k| m | (u32::from(i[k].2) << k));
    let osteps: [isize; MAX_OPERANDS] = std::array::from_fn(|k| o[k].1);
    let isteps: [isize; MAX_OPERANDS] = std::array::from_fn(|k| i[k].1);
    // One kernel call per task's range of rows: the kernel walks the rows
    // and holds each broadcast row's one value in a register.
    Some(for_chunks(rows, inner, |r0, r1| {
        let r0 = r0 as isize;
        let optr: [*mut u8; MAX_OPERANDS] =
            std::array::from_fn(|k| (o[k].0 as *mut u8).wrapping_offset(r0 * o[k].1));
        let iptr: [*const u8; MAX_OPERANDS] =
            std::array::from_fn(|k| (i[k].0 as *const u8).wrapping_offset(r0 * i[k].1));
        kernel(&Rows {
            n: inner,
            rows: r1 - r0 as usize,
            outs: &optr[..nout],
            ins: &iptr[..nin],
            out_steps: &osteps[..nout],
            in_steps: &isteps[..nin],
            bcast,
        })
    }))
}

/// A cast between float32 and a 16-bit float of one contiguous tensor into
/// another of its shape: one SIMD conversion pass ([`cast::convert16`]),
/// split over threads, instead of the staged blocks of [`run_via`] (load
/// into a buffer, then copy out). `None` if not that case.
pub(crate) fn run_convert(out: &Strided, x: &Strided) -> Option<Result<(), KernelError>> {
    if !cast::simd_conv(x.dtype, out.dtype)
        || x.sizes != out.sizes
        || !x.is_contiguous()
        || !out.is_contiguous()
    {
        return None;
    }
    let n = out.numel();
    if n == 0 {
        return Some(Ok(()));
    }
    if out.overlaps(x) {
        // Different dtypes over shared bytes: the general path reports it.
        return None;
    }
    let (ies, oes) = (x.dtype.size(), out.dtype.size());
    let (ip, op) = (x.ptr as usize, out.ptr as usize);
    Some(for_chunks(n, 1, |s, e| {
        // SAFETY: tasks convert disjoint ranges of two live, disjoint tensors.
        unsafe {
            cast::convert16(
                (op + s * oes) as *mut u8,
                out.dtype,
                (ip + s * ies) as *const u8,
                x.dtype,
                e - s,
            )
        };
        Ok(())
    }))
}

/// A number written to every element of a contiguous tensor (`zero_`,
/// `fill_`, `x[...] = v`): the value is converted once as the engine
/// converts every scalar ([`cast::scalar_bits`]), then stored with a plain
/// fill. The general path staged a constant block and ran the identity
/// kernel over it: about 570 instructions per call before any work, against
/// about 120 for CPU's whole zero_. `None` if not that case.
pub(crate) fn run_fill(out: &Strided, v: Scalar) -> Option<Result<(), KernelError>> {
    if out.dtype.is_complex() || !out.is_contiguous() {
        return None;
    }
    // SAFETY: a contiguous view of a live tensor holds numel elements.
    Some(unsafe { fill_dense(out.ptr, out.numel(), out.dtype, v) })
}

/// `n` elements of `dtype` from `ptr` set to `v`, converted as the engine
/// converts scalars ([`run_fill`]'s fill, also the C++ glue's entry for a
/// contiguous `zero_`/`fill_`). A complex dtype is `UnsupportedDtype`.
///
/// # Safety
/// `ptr` holds `n` writable elements of `dtype`.
pub(crate) unsafe fn fill_dense(
    ptr: *mut u8,
    n: usize,
    dtype: DType,
    v: Scalar,
) -> Result<(), KernelError> {
    if dtype.is_complex() {
        return Err(KernelError::UnsupportedDtype { op: "fill_", dtype });
    }
    if n == 0 {
        return Ok(());
    }
    let (bits, es, p) = (cast::scalar_bits(v, dtype), dtype.size(), ptr as usize);
    for_chunks(n, 1, |s, e| {
        // SAFETY: chunks of the caller's n elements.
        unsafe { fill_const((p + s * es) as *mut u8, bits, es, e - s) };
        Ok(())
    })
}

/// `n` elements of `es` bytes each from `ptr` set to all-zero bytes, split
/// as [`fill_dense`] splits: `zero_` of a contiguous tensor. Zero is all-zero
/// bytes in every dtype foo holds (+0.0, false, 0, 0+0j), so no value is
/// converted.
///
/// # Safety
/// `ptr` holds `n * es` writable bytes.
#[cfg_attr(not(feature = "python"), allow(dead_code))] // its caller is the C entry (native.rs)
pub(crate) unsafe fn zero_dense(ptr: *mut u8, n: usize, es: usize) {
    if n == 0 {
        return; // an empty tensor's pointer may be null, which write_bytes refuses even for 0 bytes
    }
    let p = ptr as usize;
    // The closure cannot fail; for_chunks's Result is its callers' errors.
    let _ = for_chunks(n, 1, |s, e| {
        // SAFETY: chunks of the caller's n elements.
        unsafe { std::ptr::write_bytes((p + s * es) as *mut u8, 0, (e - s) * es) };
        Ok(())
    });
}

/// A same-dtype copy whose output and input are contiguous along different
/// dims (`x.t().contiguous()`, a key transposed for `q @ k^T`): copied in square
/// tiles one cache line wide, each read from the input row by row into a
/// stack tile and written to the output row by row, so both sides move whole
/// lines once. The staged path gathers one strided element per line, and
/// with a 4 KiB stride every line falls into the same cache sets: 1024x1024
/// float32 took 4 ms against CPU's 0.6. `None` if not that case.
pub(crate) fn run_transpose(out: &Strided, x: &Strided) -> Option<Result<(), KernelError>> {
    const LINE: usize = 64;
    let nd = out.sizes.len();
    let es = out.dtype.size();
    if x.dtype != out.dtype || x.sizes != out.sizes || x.strides.len() != nd || es > 8 {
        return None;
    }
    let t = LINE / es;
    let unit = |v: &Strided| (0..nd).find(|&d| v.strides[d] == 1 && v.sizes[d] > 1);
    let (a, b) = (unit(out)?, unit(x)?);
    // An input broadcast along the output's rows (`[n, 1]` expanded to
    // `[n, m]`) is run_rows' fill per row, not a transpose.
    if a == b || out.sizes[a] < t || out.sizes[b] < t || x.strides[a] == 0 || out.overlaps(x) {
        return None;
    }
    let (na, nb) = (out.sizes[a], out.sizes[b]);
    let others: Dims<usize> = (0..nd).filter(|&d| d != a && d != b).collect();
    let outer: usize = others.iter().map(|&d| out.sizes[d]).product();
    let tiles_b = nb.div_ceil(t);
    let (osb, xsa) = (out.strides[b], x.strides[a]);
    let (op, xp) = (out.ptr as usize, x.ptr as usize);
    // Element offsets of outer index `o` (row-major over `others`).
    let bases = |mut o: usize| {
        let (mut bo, mut bx) = (0isize, 0isize);
        for &d in others.iter().rev() {
            let i = (o % out.sizes[d]) as isize;
            o /= out.sizes[d];
            bo += i * out.strides[d];
            bx += i * x.strides[d];
        }
        (bo, bx)
    };
    /// Columns `b0..b1` (b is the input's contiguous dim) of every row of
    /// dim a (the output's contiguous dim), `t` rows at a time.
    fn strip<E: Copy>(
        (op, xp): (usize, usize),
        (bo, bx): (isize, isize),
        (b0, b1): (usize, usize),
        (na, t): (usize, usize),
        (osb, xsa): (isize, isize),
    ) {
        let (o, x) = (op as *mut E, xp as *const E);
        // One tile of t x t elements: 4 KiB / size_of::<E>() elements.
        let mut buf = [0u64; 512];
        let tb = buf.as_mut_ptr() as *mut E;
        let w = b1 - b0;
        for a0 in (0..na).step_by(t) {
            let h = t.min(na - a0);
            // SAFETY: in-bounds offsets of two live, disjoint views; the
            // tile holds h * t <= t * t elements.
            unsafe {
                for i in 0..h {
                    let src = x.offset(bx + (a0 + i) as isize * xsa + b0 as isize);
                    std::ptr::copy_nonoverlapping(src, tb.add(i * t), w);
                }
                for j in 0..w {
                    let dst = o.offset(bo + (b0 + j) as isize * osb + a0 as isize);
                    for i in 0..h {
                        *dst.add(i) = *tb.add(i * t + j);
                    }
                }
            }
        }
    }
    let task = |k: usize| {
        let (o, tb) = (k / tiles_b, k % tiles_b);
        let span = (tb * t, ((tb + 1) * t).min(nb));
        let args = ((op, xp), bases(o), span, (na, t), (osb, xsa));
        match es {
            1 => strip::<u8>(args.0, args.1, args.2, args.3, args.4),
            2 => strip::<u16>(args.0, args.1, args.2, args.3, args.4),
            4 => strip::<u32>(args.0, args.1, args.2, args.3, args.4),
            _ => strip::<u64>(args.0, args.1, args.2, args.3, args.4),
        }
    };
    // A task is one strip: na rows of up to t elements.
    Some(for_chunks(outer * tiles_b, na * t, |k0, k1| {
        (k0..k1).for_each(task);
        Ok(())
    }))
}

/// A same-dtype copy whose output and input share a contiguous inner dim
/// but not their outer layout (attention's head permute
/// `x.view(b, t, h, d).transpose(1, 2).contiguous()`, a slice copied out):
/// after ATen's reorder and coalesce, each row is one `copy_nonoverlapping`
/// and the outer dims advance an odometer. The general engine pays its
/// per-segment plan (operand arrays, the kernel's indirect call and dtype
/// dispatch) on every row, which at 64-element rows cost as much as the copy:
/// 8x64x12x64 float32 took 3.3x CPU's time. `None` if not that case.
pub(crate) fn run_rows(out: &Strided, x: &Strided) -> Option<Result<(), KernelError>> {
    let nd = out.sizes.len();
    if x.dtype != out.dtype
        || x.sizes != out.sizes
        || x.strides.len() != nd
        || out.strides.len() != nd
    {
        return None;
    }
    // Two contiguous views are run_flat's one pass; telling that costs a
    // fraction of the plan below (~900 instructions on a tiny copy_).
    if out.is_contiguous() && x.is_contiguous() {
        return None;
    }
    let n = out.numel();
    let plan = |t: &Strided| OpPlan {
        ptr: t.ptr,
        dtype: t.dtype,
        kd: t.dtype,
        mode: Mode::Direct,
        strides: Dims::from_slice(&t.strides),
        ..OpPlan::default()
    };
    let mut ops = [plan(out), plan(x)];
    let sizes = reorder_and_coalesce(&out.sizes, &mut ops);
    // One coalesced dim is a contiguous copy, which run_flat already does.
    // A row of the input at inner stride 0 (`expand(...).contiguous()`, a
    // mean's gradient) is one value: the row is a fill, at any length.
    let fill = ops[1].strides[0] == 0;
    if n == 0
        || sizes.len() < 2
        || (sizes[0] < MIN_COPY_ROW && !fill)
        || ops[0].strides[0] != 1
        || (ops[1].strides[0] != 1 && !fill)
        || out.overlaps(x)
    {
        return None;
    }
    let (row, rows) = (sizes[0], n / sizes[0]);
    let bytes = row * out.dtype.size();
    let es = out.dtype.size() as isize;
    let (op, xp) = (out.ptr as usize, x.ptr as usize);
    // Strides alone cross to the pool (the plans hold raw pointers).
    let (os, xs) = (&ops[0].strides, &ops[1].strides);
    let sizes = &sizes;
    // Rows r0..r1, in the coalesced order (dim 1 fastest).
    let copy_rows = |r0: usize, r1: usize| {
        let nd = sizes.len();
        let mut idx = Dims::from_elem(0usize, nd);
        let (mut oo, mut xo) = (0isize, 0isize);
        let mut rem = r0;
        for d in 1..nd {
            idx[d] = rem % sizes[d];
            rem /= sizes[d];
            oo += idx[d] as isize * os[d];
            xo += idx[d] as isize * xs[d];
        }
        let mut r = r0;
        while r < r1 {
            // A run of rows along dim 1: a tight loop; the odometer below
            // advances only between runs.
            let run = (sizes[1] - idx[1]).min(r1 - r);
            // SAFETY: in-bounds rows of two live, non-overlapping views.
            unsafe {
                let (mut o, mut x) = (
                    (op as *mut u8).offset(oo * es),
                    (xp as *const u8).offset(xo * es),
                );
                for _ in 0..run {
                    if fill {
                        cast::fill_any(o, x, es as usize, row);
                    } else {
                        std::ptr::copy_nonoverlapping(x, o, bytes);
                    }
                    o = o.offset(os[1] * es);
                    x = x.offset(xs[1] * es);
                }
            }
            r += run;
            oo += run as isize * os[1];
            xo += run as isize * xs[1];
            idx[1] += run;
            let mut d = 1;
            while d + 1 < nd && idx[d] == sizes[d] {
                oo += os[d + 1] - sizes[d] as isize * os[d];
                xo += xs[d + 1] - sizes[d] as isize * xs[d];
                idx[d] = 0;
                d += 1;
                idx[d] += 1;
            }
        }
    };
    Some(for_chunks(rows, row, |r0, r1| {
        // At the SIMD level in use, for the fills (one dispatch per chunk).
        super::simd::dispatch(
            #[inline(always)]
            || copy_rows(r0, r1),
        );
        Ok(())
    }))
}

/// Runs `f(start, end)` over `n` units of `unit` elements each: inline when
/// the work is at most `GRAIN_SIZE` elements (tiny work never asks the pool
/// anything), otherwise in up to four tasks per thread of at least
/// `GRAIN_SIZE` elements. The engine's one split rule (every path here).
fn for_chunks(
    n: usize,
    unit: usize,
    f: impl Fn(usize, usize) -> Result<(), KernelError> + Sync,
) -> Result<(), KernelError> {
    let elems = n * unit;
    if elems <= GRAIN_SIZE || parallel::num_threads() <= 1 {
        return f(0, n);
    }
    let ntasks = elems.div_ceil(GRAIN_SIZE).min(parallel::num_threads() * 4);
    let mut chunk = n.div_ceil(ntasks);
    if unit == 1 {
        // Element tasks start on 64-element multiples: on cache lines.
        chunk = chunk.div_ceil(64) * 64;
    }
    parallel::try_parallel_for(n.div_ceil(chunk), |t| {
        let s = t * chunk;
        f(s, (s + chunk).min(n))
    })
}

/// ATen's `reorder_dimensions`: `perm[k]` is the original dim placed at
/// position `k`, innermost first, ordered by the operands' strides.
fn permutation(shape: &[usize], ops: &[OpPlan]) -> Dims<usize> {
    let nd = shape.len();
    // perm[k] = original dim at position k, innermost first.
    let mut perm = Dims::from_elem(0usize, nd);
    for (k, p) in perm.iter_mut().enumerate() {
        *p = nd - 1 - k;
    }
    let should_swap = |ops: &[OpPlan], d0: usize, d1: usize| -> i32 {
        for op in ops {
            if op.mode == Mode::Const {
                continue;
            }
            let (s0, s1) = (op.strides[d0].unsigned_abs(), op.strides[d1].unsigned_abs());
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 < s1 {
                return -1;
            }
            if s0 > s1 {
                return 1;
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    for i in 1..nd {
        let mut dim1 = i;
        for dim0 in (0..i).rev() {
            let c = should_swap(ops, perm[dim0], perm[dim1]);
            if c > 0 {
                perm.swap(dim0, dim1);
                dim1 = dim0;
            } else if c < 0 {
                break;
            }
        }
    }
    perm
}

/// Orders dims innermost-first by the operands' strides (outputs first, like
/// ATen's `reorder_dimensions`) and merges dims that are contiguous with
/// their inner neighbour for every operand.
fn reorder_and_coalesce(shape: &[usize], ops: &mut [OpPlan]) -> Dims<usize> {
    let nd = shape.len();
    if nd == 0 {
        for op in ops.iter_mut() {
            op.strides = Dims::from_elem(0, 1);
        }
        return Dims::from_elem(1, 1);
    }
    let perm = permutation(shape, ops);
    let mut sizes = Dims::from_elem(0usize, nd);
    for (k, &d) in perm.iter().enumerate() {
        sizes[k] = shape[d];
    }
    for op in ops.iter_mut() {
        let orig = op.strides.clone();
        for (k, &d) in perm.iter().enumerate() {
            op.strides[k] = orig[d];
        }
    }

    let mut prev = 0;
    for d in 1..nd {
        let can = sizes[prev] == 1
            || sizes[d] == 1
            || ops
                .iter()
                .all(|op| op.strides[prev] * sizes[prev] as isize == op.strides[d]);
        if can {
            if sizes[prev] == 1 {
                for op in ops.iter_mut() {
                    op.strides[prev] = op.strides[d];
                }
            }
            sizes[prev] *= sizes[d];
        } else {
            prev += 1;
            if prev != d {
                for op in ops.iter_mut() {
                    op.strides[prev] = op.strides[d];
                }
                sizes[prev] = sizes[d];
            }
        }
    }
    sizes.truncate(prev + 1);
    for op in ops.iter_mut() {
        op.strides.truncate(prev + 1);
    }
    sizes
}

/// Whether tensor input `op` of a plan is broadcast along the inner dim
/// (stride 0) and already in its kernel dtype: one value per run, which a
/// kernel holds in a register ([`Rows::bcast`]) or a block is filled with.
fn broadcast_run(op: &OpPlan) -> bool {
    op.strides[0] == 0 && op.kd == op.dtype && !op.round
}

/// Whether input `op` of a plan is one value along each run of the inner
/// dim: a scalar, or a [`broadcast_run`].
fn one_per_run(op: &OpPlan) -> bool {
    op.mode == Mode::Const || broadcast_run(op)
}

impl Plan<'_, '_> {
    fn execute(&self, numel: usize) -> Result<(), KernelError> {
        if self.direct_rows() {
            let n = self.sizes[0];
            // SAFETY: chunks cover disjoint ranges of valid rows.
            return for_chunks(numel / n, n, |r0, r1| unsafe { self.rows_range(r0, r1) });
        }
        // SAFETY: chunks cover disjoint ranges of valid elements.
        for_chunks(numel, 1, |s, e| unsafe { self.range(s, e) })
    }

    /// Rows of at least [`ROWS_LONG`] elements whose every operand the
    /// kernel can take in place: contiguous along the row in its kernel
    /// dtype, or (an input) one value along it. Runs of rows along dim 1
    /// then go to the kernel in one call each ([`Plan::rows_range`]), where
    /// a call per row cost more than a 64-element row's arithmetic and
    /// blocks that span rows stage every operand not dense across them
    /// (`[64, 64, 64] * [64, 1, 64]` took 3.3x CPU's time).
    fn direct_rows(&self) -> bool {
        self.sizes.len() > 1
            && self.sizes[0] >= ROWS_LONG
            && self.ops[..self.nops]
                .iter()
                .enumerate()
                .all(|(k, op)| op.mode == Mode::Direct || (k >= self.nout && one_per_run(op)))
    }

    /// Rows `r0..r1` (flat row index over dims 1..), a kernel call per run
    /// of them along dim 1.
    unsafe fn rows_range(&self, r0: usize, r1: usize) -> Result<(), KernelError> {
        let (nd, nout, nops) = (self.sizes.len(), self.nout, self.nops);
        let (n, run) = (self.sizes[0], self.sizes[1]);
        let ops = &self.ops[..nops];
        let mut steps = [0isize; MAX_OPERANDS];
        let mut bcast = 0u32;
        for (k, op) in ops.iter().enumerate() {
            let konst = op.mode == Mode::Const;
            steps[k] = if konst {
                0
            } else {
                op.strides[1] * op.dtype.size() as isize
            };
            if k >= nout && op.mode != Mode::Direct {
                bcast |= 1 << (k - nout);
            }
        }
        let mut optr = [std::ptr::null_mut::<u8>(); MAX_OPERANDS];
        let mut iptr = [std::ptr::null::<u8>(); MAX_OPERANDS];
        let mut r = r0;
        while r < r1 {
            let (i1, mut outer) = (r % run, r / run);
            let mut offs = [0isize; MAX_OPERANDS];
            for (k, op) in ops.iter().enumerate() {
                offs[k] = i1 as isize * op.strides[1];
            }
            for d in 2..nd {
                let i = outer % self.sizes[d];
                outer /= self.sizes[d];
                for (k, op) in ops.iter().enumerate() {
                    offs[k] += i as isize * op.strides[d];
                }
            }
            for (k, op) in ops.iter().enumerate() {
                let p = if op.mode == Mode::Const {
                    &op.konst as *const u64 as *mut u8
                } else {
                    op.ptr.offset(offs[k] * op.dtype.size() as isize)
                };
                if k < nout {
                    optr[k] = p;
                } else {
                    iptr[k - nout] = p;
                }
            }
            let rows = (run - i1).min(r1 - r);
            (self.kernel)(&Rows {
                n,
                rows,
                outs: &optr[..nout],
                ins: &iptr[..nops - nout],
                out_steps: &steps[..nout],
                in_steps: &steps[nout..nops],
                bcast,
            })?;
            r += rows;
        }
        Ok(())
    }

    fn cross_rows(&self) -> bool {
        self.sizes.len() > 1 && self.sizes[0] < MIN_ROW
    }

    unsafe fn range(&self, s: usize, e: usize) -> Result<(), KernelError> {
        let cross = self.cross_rows();
        let mut offsets = [0usize; MAX_OPERANDS];
        let mut need = 0;
        for (k, op) in self.ops[..self.nops].iter().enumerate() {
            if op.mode != Mode::Direct || (cross && !op.flat) {
                offsets[k] = need;
                need += (BLOCK * op.kd.size()).div_ceil(64) * 64;
            }
        }
        let mut stack = std::mem::MaybeUninit::<[u64; STACK_BYTES / 8]>::uninit();
        let mut heap: Vec<u64> = Vec::new();
        let base: *mut u8 = if need <= STACK_BYTES {
            stack.as_mut_ptr() as *mut u8
        } else {
            heap.resize(need / 8, 0);
            heap.as_mut_ptr() as *mut u8
        };
        let fill = (e - s).min(BLOCK);
        for (k, op) in self.ops[..self.nops].iter().enumerate() {
            if op.mode == Mode::Const {
                fill_const(base.add(offsets[k]), op.konst, op.kd.size(), fill);
            }
        }
        if cross {
            self.cross_range(s, e, base, &offsets)
        } else {
            self.row_range(s, e, base, &offsets)
        }
    }

    unsafe fn row_range(
        &self,
        s: usize,
        e: usize,
        base: *mut u8,
        boff: &[usize; MAX_OPERANDS],
    ) -> Result<(), KernelError> {
        let nd = self.sizes.len();
        let nops = self.nops;
        let mut idx = Dims::from_elem(0usize, nd);
        let mut rem = s;
        for d in 0..nd {
            idx[d] = rem % self.sizes[d];
            rem /= self.sizes[d];
        }
        let mut offs = [0isize; MAX_OPERANDS];
        for (k, op) in self.ops[..self.nops].iter().enumerate() {
            offs[k] = (0..nd).map(|d| idx[d] as isize * op.strides[d]).sum();
        }
        let mut lin = s;
        while lin < e {
            let seg = (self.sizes[0] - idx[0]).min(e - lin);
            self.segment(&offs[..nops], seg, base, boff)?;
            lin += seg;
            if lin >= e {
                break;
            }
            for (k, op) in self.ops[..self.nops].iter().enumerate() {
                offs[k] += seg as isize * op.strides[0];
            }
            idx[0] += seg;
            let mut d = 0;
            while idx[d] == self.sizes[d] && d + 1 < nd {
                for (k, op) in self.ops[..self.nops].iter().enumerate() {
                    offs[k] -= self.sizes[d] as isize * op.strides[d];
                    offs[k] += op.strides[d + 1];
                }
                idx[d] = 0;
                d += 1;
                idx[d] += 1;
            }
        }
        Ok(())
    }

    /// One run along the inner dimension, starting at element offsets `offs`.
    unsafe fn segment(
        &self,
        offs: &[isize],
        len: usize,
        base: *mut u8,
        boff: &[usize; MAX_OPERANDS],
    ) -> Result<(), KernelError> {
        let nout = self.nout;
        let nops = self.nops;
        let mut optr = [std::ptr::null_mut::<u8>(); MAX_OPERANDS];
        let mut iptr = [std::ptr::null::<u8>(); MAX_OPERANDS];
        if self.ops[..self.nops]
            .iter()
            .all(|op| op.mode == Mode::Direct)
        {
            for (k, op) in self.ops[..self.nops].iter().enumerate() {
                let p = op.ptr.offset(offs[k] * op.dtype.size() as isize);
                if k < nout {
                    optr[k] = p;
                } else {
                    iptr[k - nout] = p;
                }
            }
            return (self.kernel)(&Rows::flat(len, &optr[..nout], &iptr[..nops - nout]));
        }
        let mut c = 0;
        while c < len {
            let m = (len - c).min(BLOCK);
            let mut bcast = 0u32;
            for (k, op) in self.ops[..self.nops].iter().enumerate() {
                let buf = base.add(boff[k]);
                let p = match op.mode {
                    Mode::Const => buf,
                    Mode::Direct => op
                        .ptr
                        .offset((offs[k] + c as isize) * op.dtype.size() as isize),
                    // One value along the run, already in the kernel dtype:
                    // the kernel holds it ([`Rows::bcast`]) instead of a
                    // filled block.
                    Mode::Staged if k >= nout && broadcast_run(op) => {
                        bcast |= 1 << (k - nout);
                        op.ptr.offset(offs[k] * op.dtype.size() as isize)
                    }
                    Mode::Staged => {
                        if k >= nout {
                            let src = op.ptr.offset(
                                (offs[k] + c as isize * op.strides[0]) * op.dtype.size() as isize,
                            );
                            cast::load(buf, op.kd, src, op.dtype, op.strides[0], m);
                            if op.round {
                                round_through(buf as *mut f32, m, self.via);
                            }
                        }
                        buf
                    }
                };
                if k < nout {
                    optr[k] = p;
                } else {
                    iptr[k - nout] = p;
                }
            }
            let mut rows = Rows::flat(m, &optr[..nout], &iptr[..nops - nout]);
            rows.bcast = bcast;
            (self.kernel)(&rows)?;
            for (k, op) in self.ops[..nout].iter().enumerate() {
                if op.mode == Mode::Staged {
                    if op.round {
                        round_through(base.add(boff[k]) as *mut f32, m, self.via);
                    }
                    let dst = op
                        .ptr
                        .offset((offs[k] + c as isize * op.strides[0]) * op.dtype.size() as isize);
                    cast::store(base.add(boff[k]), op.kd, dst, op.dtype, op.strides[0], m);
                }
            }
            c += m;
        }
        Ok(())
    }

    /// Blocks of `BLOCK` flat elements spanning rows (small inner extent):
    /// dense operands are read and written in place, every other
    /// non-constant operand goes through its buffer (a `[rows, 8] + [8]`
    /// bias add stages only the broadcast row).
    unsafe fn cross_range(
        &self,
        s: usize,
        e: usize,
        base: *mut u8,
        boff: &[usize; MAX_OPERANDS],
    ) -> Result<(), KernelError> {
        let nout = self.nout;
        let nops = self.nops;
        let mut optr = [std::ptr::null_mut::<u8>(); MAX_OPERANDS];
        let mut iptr = [std::ptr::null::<u8>(); MAX_OPERANDS];
        let mut b = s;
        while b < e {
            let m = (e - b).min(BLOCK);
            for (k, op) in self.ops[..self.nops].iter().enumerate() {
                let buf = if op.flat {
                    op.ptr.add(b * op.dtype.size())
                } else {
                    base.add(boff[k])
                };
                if k >= nout && op.mode != Mode::Const && !op.flat && broadcast_run(op) {
                    // Rows of one value each (a `[n, c, 1, 1]` scale over
                    // `h x w`): fills, all in one SIMD dispatch. Loading
                    // each row through `cast::load` (dtype checks, a
                    // dispatch per row) took longer than the op's arithmetic.
                    let es = op.dtype.size();
                    super::simd::dispatch(
                        #[inline(always)]
                        || {
                            self.walk(op, b, m, |p, _, done, run| {
                                cast::fill_any(buf.add(done * es), p, es, run)
                            })
                        },
                    );
                } else if k >= nout && op.mode != Mode::Const && !op.flat {
                    self.walk(op, b, m, |p, st, done, run| {
                        cast::load(buf.add(done * op.kd.size()), op.kd, p, op.dtype, st, run)
                    });
                    if op.round {
                        round_through(buf as *mut f32, m, self.via);
                    }
                }
                if k < nout {
                    optr[k] = buf;
                } else {
                    iptr[k - nout] = buf;
                }
            }
            (self.kernel)(&Rows::flat(m, &optr[..nout], &iptr[..nops - nout]))?;
            for (k, op) in self.ops[..nout].iter().enumerate() {
                if op.flat {
                    continue;
                }
                let buf = base.add(boff[k]);
                if op.round {
                    round_through(buf as *mut f32, m, self.via);
                }
                self.walk(op, b, m, |p, st, done, run| {
                    cast::store(buf.add(done * op.kd.size()), op.kd, p, op.dtype, st, run)
                });
            }
            b += m;
        }
        Ok(())
    }

    /// Calls `f(ptr, inner_stride, done, run)` for each inner-dim run of the
    /// flat range `[start, start + m)` of `op`.
    #[inline(always)]
    unsafe fn walk(
        &self,
        op: &OpPlan,
        start: usize,
        m: usize,
        mut f: impl FnMut(*mut u8, isize, usize, usize),
    ) {
        let nd = self.sizes.len();
        let mut idx = Dims::from_elem(0usize, nd);
        let mut rem = start;
        for d in 0..nd {
            idx[d] = rem % self.sizes[d];
            rem /= self.sizes[d];
        }
        let es = op.dtype.size() as isize;
        let mut off: isize = (0..nd).map(|d| idx[d] as isize * op.strides[d]).sum();
        let mut done = 0;
        while done < m {
            let run = (self.sizes[0] - idx[0]).min(m - done);
            f(op.ptr.offset(off * es), op.strides[0], done, run);
            done += run;
            if done >= m {
                break;
            }
            off += run as isize * op.strides[0];
            idx[0] += run;
            let mut d = 0;
            while idx[d] == self.sizes[d] && d + 1 < nd {
                off -= self.sizes[d] as isize * op.strides[d];
                off += op.strides[d + 1];
                idx[d] = 0;
                d += 1;
                idx[d] += 1;
            }
        }
    }
}

/// Rounds `n` float32 values in place to float16 or bfloat16 `dt` and back.
fn round_through(p: *mut f32, n: usize, dt: DType) {
    let mut tmp = [0u16; 256];
    let mut done = 0;
    while done < n {
        let m = (n - done).min(tmp.len());
        // SAFETY: `p` addresses `n` float32 values the caller owns.
        unsafe {
            let q = p.add(done);
            if dt == DType::F16 {
                super::simd::f32_to_f16(q, tmp.as_mut_ptr(), m);
                super::simd::f16_to_f32(tmp.as_ptr(), q, m);
            } else {
                super::simd::f32_to_bf16(q, tmp.as_mut_ptr(), m);
                super::simd::bf16_to_f32(tmp.as_ptr(), q, m);
            }
        }
        done += m;
    }
}

/// Writes `n` copies of the `es`-byte value `bits` at `dst` (one loop per
/// width, so the compiler vectorizes it; a memset for zero).
unsafe fn fill_const(dst: *mut u8, bits: u64, es: usize, n: usize) {
    match es {
        1 => std::slice::from_raw_parts_mut(dst, n).fill(bits as u8),
        2 => std::slice::from_raw_parts_mut(dst as *mut u16, n).fill(bits as u16),
        4 => std::slice::from_raw_parts_mut(dst as *mut u32, n).fill(bits as u32),
        _ => std::slice::from_raw_parts_mut(dst as *mut u64, n).fill(bits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_dense_clears_every_byte_across_chunks() {
        // Above GRAIN_SIZE elements, so the pool's chunks each clear their part.
        let n = GRAIN_SIZE * 3 + 5;
        let mut v = vec![-1.0f64; n + 1];
        // SAFETY: the first n of the vector's n + 1 elements.
        unsafe { zero_dense(v.as_mut_ptr() as *mut u8, n, 8) };
        assert!(v[..n].iter().all(|x| x.to_bits() == 0));
        assert_eq!(v[n], -1.0);
        // No elements: nothing written, a null pointer included.
        unsafe { zero_dense(std::ptr::null_mut(), 0, 4) };
    }

    fn plan_of(shape: &[usize], strides: &[&[isize]]) -> (Vec<usize>, Vec<Vec<isize>>) {
        let mut ops: Vec<OpPlan> = strides
            .iter()
            .map(|st| OpPlan {
                mode: Mode::Staged,
                strides: Dims::from_slice(st),
                ..Default::default()
            })
            .collect();
        let sizes = reorder_and_coalesce(shape, &mut ops);
        (
            sizes.to_vec(),
            ops.iter().map(|o| o.strides.to_vec()).collect(),
        )
    }

    #[test]
    fn coalesces_contiguous_and_reorders_transposed() {
        let (s, st) = plan_of(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(s, vec![24]);
        assert_eq!(st, vec![vec![1], vec![1]]);
        // Transposed output: iterate in its memory order.
        let (s, st) = plan_of(&[3, 4], &[&[1, 3], &[4, 1]]);
        assert_eq!(s, vec![3, 4]);
        assert_eq!(st[0], vec![1, 3]);
        // Broadcast input keeps dims apart.
        let (s, st) = plan_of(&[5, 6], &[&[6, 1], &[0, 1]]);
        assert_eq!(s, vec![6, 5]);
        assert_eq!(st[1], vec![1, 0]);
        // 0-d.
        let (s, _) = plan_of(&[], &[&[], &[]]);
        assert_eq!(s, vec![1]);
    }

    #[test]
    fn output_layout_follows_tensor_iterator() {
        // Contiguous inputs, broadcasting: contiguous output.
        assert_eq!(
            output_strides(&[2, 3], &[(&[2, 3], &[3, 1]), (&[3], &[1])]),
            vec![3, 1]
        );
        // A transposed input: transposed output.
        assert_eq!(output_strides(&[3, 4], &[(&[3, 4], &[1, 3])]), vec![1, 3]);
        // Channels-last 4-d input.
        assert_eq!(
            output_strides(&[2, 3, 4, 5], &[(&[2, 3, 4, 5], &[60, 1, 15, 3])]),
            vec![60, 1, 15, 3]
        );
        // Transposed input broadcast with a row vector.
        assert_eq!(
            output_strides(&[3, 4], &[(&[3, 4], &[1, 3]), (&[4], &[1])]),
            vec![1, 3]
        );
        // Non-dense (sliced) input: dense output in its order.
        assert_eq!(output_strides(&[3, 4], &[(&[3, 4], &[8, 2])]), vec![4, 1]);
    }

    #[test]
    fn promotion_follows_torch() {
        use DType::*;
        assert_eq!(promote_types(U8, I8), I16);
        assert_eq!(promote_types(U8, I32), I32);
        assert_eq!(promote_types(I16, I8), I16);
        assert_eq!(promote_types(Bool, U8), U8);
        assert_eq!(promote_types(I64, F16), F16);
        assert_eq!(promote_types(F16, BF16), F32);
        assert_eq!(promote_types(F32, F64), F64);
    }

    #[test]
    fn broadcast_shapes_follow_torch() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]).unwrap(), vec![3, 4]);
        assert_eq!(broadcast_shapes(&[], &[2, 2]).unwrap(), vec![2, 2]);
        assert!(broadcast_shapes(&[3], &[4]).is_err());
    }
}
