//! Indexing and shape kernels: advanced-index gather (index, index_select,
//! gather) and scatter (index_put, scatter*, index_add, index_fill),
//! concatenation, nonzero / masked_select, flip, tril/triu, arange, linspace.
//!
//! Every index is validated before any memory is touched through it. The
//! gather direction may run on the foo pool above `par_min()` elements (each output
//! element is written once, so the result does not depend on the thread
//! count); the scatter direction runs serially in row-major order, so
//! duplicate indices accumulate in a fixed order.

use super::copy::{self, Scalar};
use super::{KernelError, Sizes, Strided, Strides, ViewRef, GRAIN_SIZE};
use crate::dispatch_dtype;
use crate::dtype::DType;
use half::{bf16, f16};
use smallvec::SmallVec;
use std::collections::HashMap;

/// One index operand: integer indices laid out over the plan's shape
/// (broadcast strides allowed), selecting along a data dimension of `size`
/// elements spaced `stride` elements apart.
#[derive(Clone, Debug)]
pub struct IndexArg {
    pub idx: Strided,
    pub size: usize,
    pub stride: isize,
}

/// A 16-byte element (complex128) for the kernels that only move elements
/// by size (complex64 moves as u64); align 8, as foo's allocations give.
type Elem16 = [u64; 2];

/// Calls `f(offsets)` for each linear index in `start..start+len` of a
/// row-major walk over `sizes`, with `offsets[k]` the element offset of that
/// multi-index under `strides[k]`.
pub fn walk<S: std::ops::Deref<Target = [isize]>>(
    sizes: &[usize],
    strides: &[S],
    start: usize,
    len: usize,
    mut f: impl FnMut(&[isize]),
) {
    let nd = sizes.len();
    let nk = strides.len();
    // Inline up to the ranks and operand counts calls have (no heap on a
    // small op's path: two allocations here were a tenth of a small x[idx]).
    let mut offs: SmallVec<[isize; 8]> = smallvec::smallvec![0isize; nk];
    if len == 0 {
        return;
    }
    if nd == 0 {
        f(&offs);
        return;
    }
    let mut multi: Sizes = smallvec::smallvec![0usize; nd];
    let mut rem = start;
    for d in (0..nd).rev() {
        let s = sizes[d].max(1);
        multi[d] = rem % s;
        rem /= s;
        for k in 0..nk {
            offs[k] += multi[d] as isize * strides[k][d];
        }
    }
    let last = nd - 1;
    let mut done = 0;
    loop {
        // Innermost run without carries.
        let run = (sizes[last] - multi[last]).min(len - done);
        for _ in 0..run {
            f(&offs);
            for k in 0..nk {
                offs[k] += strides[k][last];
            }
        }
        done += run;
        multi[last] += run;
        if done >= len {
            return;
        }
        let mut d = last;
        while multi[d] == sizes[d] {
            for k in 0..nk {
                offs[k] -= multi[d] as isize * strides[k][d];
            }
            multi[d] = 0;
            if d == 0 {
                return;
            }
            d -= 1;
            multi[d] += 1;
            for k in 0..nk {
                offs[k] += strides[k][d];
            }
        }
    }
}

#[inline(always)]
unsafe fn read_index(p: *const u8, dtype: DType, off: isize) -> i64 {
    match dtype {
        DType::I32 => *(p as *const i32).offset(off) as i64,
        DType::I16 => *(p as *const i16).offset(off) as i64,
        DType::I8 => *(p as *const i8).offset(off) as i64,
        DType::U8 => *p.offset(off) as i64,
        _ => *(p as *const i64).offset(off),
    }
}

fn check_shapes(shape: &[usize], data: &Strided, args: &[IndexArg]) -> Result<(), KernelError> {
    if data.sizes[..] != *shape || data.strides.len() != shape.len() {
        return Err(KernelError::ShapeMismatch(format!(
            "foo index: data view {:?} does not match plan shape {:?}",
            data.sizes, shape
        )));
    }
    for a in args {
        if a.idx.sizes[..] != *shape || a.idx.strides.len() != shape.len() {
            return Err(KernelError::ShapeMismatch(format!(
                "foo index: index view {:?} does not match plan shape {:?}",
                a.idx.sizes, shape
            )));
        }
        if !matches!(
            a.idx.dtype,
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8
        ) {
            return Err(KernelError::UnsupportedDtype {
                op: "index",
                dtype: a.idx.dtype,
            });
        }
    }
    Ok(())
}

/// Checks every index of every operand: in `[0, size)`, or with `wrap` in
/// `[-size, size)`. Returns the first bad one in row-major order.
pub fn check_indices(shape: &[usize], args: &[IndexArg], wrap: bool) -> Result<(), KernelError> {
    let n: usize = shape.iter().product();
    for (k, a) in args.iter().enumerate() {
        let size = a.size as i64;
        let lo = if wrap { -size } else { 0 };
        let mut bad = None;
        let p = a.idx.ptr as *const u8;
        // Each distinct index once: broadcast (stride-0) dims count as size 1.
        let sizes: Sizes = shape
            .iter()
            .zip(&a.idx.strides)
            .map(|(&n, &st)| if st == 0 { n.min(1) } else { n })
            .collect();
        let n = if n == 0 { 0 } else { sizes.iter().product() };
        walk(&sizes, std::slice::from_ref(&a.idx.strides), 0, n, |o| {
            if bad.is_none() {
                // SAFETY: offsets come from the index view's own sizes and strides.
                let v = unsafe { read_index(p, a.idx.dtype, o[0]) };
                if v < lo || v >= size {
                    bad = Some(v);
                }
            }
        });
        if let Some(value) = bad {
            return Err(KernelError::IndexOutOfRange { arg: k, value });
        }
    }
    Ok(())
}

/// The strides of a walk's operands, inline for up to four.
type WalkStrides = SmallVec<[Strides; 4]>;

fn all_strides(data: &Strided, extra: Option<&Strided>, args: &[IndexArg]) -> WalkStrides {
    let mut v = WalkStrides::new();
    v.push(data.strides.clone());
    if let Some(e) = extra {
        v.push(e.strides.clone());
    }
    for a in args {
        v.push(a.idx.strides.clone());
    }
    v
}

/// The data offset of one element, checking every index at use (a gather
/// checks only here; the scatters validated theirs up front, and this keeps
/// memory safe even if they changed since, e.g. written by another thread):
/// None if one is out of range (`wrap`: negative indices count from the end).
#[inline(always)]
unsafe fn data_offset(
    base: isize,
    offs: &[isize],
    first_arg: usize,
    args: &[IndexArg],
    wrap: bool,
) -> Option<isize> {
    let mut o = base;
    for (k, a) in args.iter().enumerate() {
        let mut v = read_index(a.idx.ptr, a.idx.dtype, offs[first_arg + k]);
        if v < 0 && wrap {
            v += a.size as i64;
        }
        if v < 0 || v as u64 >= a.size as u64 {
            return None;
        }
        o += v as isize * a.stride;
    }
    Some(o)
}

/// Everything a scatter through plan view `dst` may write: the view plus
/// each indexed dim.
fn write_extent(dst: &Strided, args: &[IndexArg]) -> Strided {
    let mut full = dst.clone();
    for a in args {
        full.sizes.push(a.size);
        full.strides.push(a.stride);
    }
    full
}

/// Index operands that alias `dst` are snapshotted into `bufs` (a scatter
/// must not read indices it may overwrite).
fn detach_indices(dst: &Strided, args: &[IndexArg], bufs: &mut Vec<Vec<i64>>) -> Vec<IndexArg> {
    let dst = &write_extent(dst, args);
    args.iter()
        .map(|a| {
            if !dst.overlaps(&a.idx) {
                return a.clone();
            }
            let n = a.idx.numel();
            let mut v = vec![0i64; n.max(1)];
            let p = a.idx.ptr as *const u8;
            let mut k = 0;
            walk(
                &a.idx.sizes,
                std::slice::from_ref(&a.idx.strides),
                0,
                n,
                |o| {
                    // SAFETY: the view's own offsets.
                    v[k] = unsafe { read_index(p, a.idx.dtype, o[0]) };
                    k += 1;
                },
            );
            let ptr = v.as_mut_ptr() as *mut u8;
            bufs.push(v);
            // The snapshot is dense over the index's (plan) sizes.
            let strides = super::contiguous_strides(&a.idx.sizes);
            IndexArg {
                idx: Strided::new(ptr, DType::I64, a.idx.sizes.clone(), strides),
                size: a.size,
                stride: a.stride,
            }
        })
        .collect()
}

/// Gathers elements `start..start+len` of the plan; false if an index was
/// out of range (that element is left unwritten).
unsafe fn gather_range<T: Copy>(
    out: &Strided,
    data: &Strided,
    args: &[IndexArg],
    strides: &[&[isize]],
    wrap: bool,
    start: usize,
    len: usize,
) -> bool {
    let (op, dp) = (out.ptr as *mut T, data.ptr as *const T);
    let mut ok = true;
    walk(&out.sizes, strides, start, len, |o| {
        match data_offset(o[0], o, 2, args, wrap) {
            Some(src) => *op.offset(o[1]) = *dp.offset(src),
            None => ok = false,
        }
    });
    ok
}

/// The walk strides of a gather: data, out, then each index operand, the
/// first `k` dims of each (borrowed: no copies on a small op's path).
fn walk_strides<'a>(
    data: &'a Strided,
    out: &'a Strided,
    args: &'a [IndexArg],
    k: usize,
) -> SmallVec<[&'a [isize]; 6]> {
    let mut v: SmallVec<[&[isize]; 6]> = SmallVec::with_capacity(args.len() + 2);
    v.push(&data.strides[..k]);
    v.push(&out.strides[..k]);
    for a in args {
        v.push(&a.idx.strides[..k]);
    }
    v
}

/// Runs `go(start, len)` over `m` work items, on the foo pool when the
/// plan's `n` elements are enough to pay for it; false if any call was.
fn run_chunks(n: usize, m: usize, go: impl Fn(usize, usize) -> bool + Sync) -> bool {
    let pm = super::reduce::par_min();
    if n < pm.max(2) || m < 2 {
        return go(0, m);
    }
    let nchunks = n
        .div_ceil((pm / 4).max(1))
        .clamp(1, super::parallel::num_threads() * 4)
        .min(m);
    let chunk = m.div_ceil(nchunks);
    let ok = std::sync::atomic::AtomicBool::new(true);
    super::parallel::parallel_for(nchunks, |c| {
        let s = c * chunk;
        if s < m && !go(s, chunk.min(m - s)) {
            ok.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    });
    ok.into_inner()
}

/// `out[r] = data[r + Σ_k idx_k[r] * stride_k]` over the plan shape
/// (`out.sizes`): `data` is restrided to that shape (indexed dims have
/// stride 0) and must have `out`'s dtype.
///
/// Each index is checked as it is read, as CPU's kernels do (so an error may
/// leave `out` partly written, as on CPU); on a bad one, the first in
/// row-major order is reported ([`check_indices`]). Checking as it goes
/// rather than in a pass before cut a small `x[idx]`'s Rust side by about a
/// third (3.8K -> 2.5K instructions under callgrind).
pub fn gather(
    out: &Strided,
    data: &Strided,
    args: &[IndexArg],
    wrap: bool,
) -> Result<(), KernelError> {
    check_shapes(&out.sizes, data, args)?;
    if out.dtype != data.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo index: out dtype {} differs from data dtype {}",
            out.dtype.name(),
            data.dtype.name()
        )));
    }
    let n = out.numel();
    if n == 0 {
        return Ok(());
    }
    let es = out.dtype.size();
    let ok = if let Some(rows) = RowPlan::new(out, data, args) {
        rows.run(out, data, args, es, n, wrap)
    } else {
        let strides = walk_strides(data, out, args, out.sizes.len());
        run_chunks(n, n, |start, len| unsafe {
            // SAFETY: chunks write disjoint output elements.
            match es {
                1 => gather_range::<u8>(out, data, args, &strides, wrap, start, len),
                2 => gather_range::<u16>(out, data, args, &strides, wrap, start, len),
                4 => gather_range::<u32>(out, data, args, &strides, wrap, start, len),
                8 => gather_range::<u64>(out, data, args, &strides, wrap, start, len),
                _ => gather_range::<Elem16>(out, data, args, &strides, wrap, start, len),
            }
        })
    };
    if !ok {
        check_indices(&out.sizes, args, wrap)?;
        // Every index is in range now: another thread wrote them meanwhile.
        return Err(KernelError::InvalidArgument(
            "foo index: the indices changed while they were read".into(),
        ));
    }
    Ok(())
}

/// Gather by rows: the trailing plan dims no index varies along (merged
/// while contiguous in both `out` and `data`) are copied as runs, so the
/// indices are read once per row instead of once per element.
struct RowPlan {
    /// The plan dims outside the rows (the walk's).
    k: usize,
    inner: usize,
    out_stride: isize,
    data_stride: isize,
}

impl RowPlan {
    fn new(out: &Strided, data: &Strided, args: &[IndexArg]) -> Option<RowPlan> {
        let nd = out.sizes.len();
        let unindexed = |d: usize| {
            args.iter()
                .all(|a| a.idx.strides[d] == 0 || a.idx.sizes[d] == 1)
        };
        if nd == 0 || !unindexed(nd - 1) || out.sizes[nd - 1] < 2 {
            return None;
        }
        let (os, ds) = (out.strides[nd - 1], data.strides[nd - 1]);
        let mut inner = out.sizes[nd - 1];
        let mut k = nd - 1;
        while k > 0
            && unindexed(k - 1)
            && out.strides[k - 1] == os * inner as isize
            && data.strides[k - 1] == ds * inner as isize
        {
            inner *= out.sizes[k - 1];
            k -= 1;
        }
        Some(RowPlan {
            k,
            inner,
            out_stride: os,
            data_stride: ds,
        })
    }

    /// Rows `start..start+len`; false if an index was out of range (that
    /// row is left unwritten).
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows<T: Copy>(
        &self,
        out: &Strided,
        data: &Strided,
        args: &[IndexArg],
        strides: &[&[isize]],
        wrap: bool,
        start: usize,
        len: usize,
    ) -> bool {
        let (op, dp) = (out.ptr as *mut T, data.ptr as *const T);
        let (inner, os, ds) = (self.inner, self.out_stride, self.data_stride);
        let mut ok = true;
        walk(&out.sizes[..self.k], strides, start, len, |o| {
            let Some(base) = data_offset(o[0], o, 2, args, wrap) else {
                ok = false;
                return;
            };
            if os == 1 && ds == 1 {
                // SAFETY: `out` does not overlap `data` (the caller resolves that).
                std::ptr::copy_nonoverlapping(dp.offset(base), op.offset(o[1]), inner);
            } else {
                for k in 0..inner as isize {
                    *op.offset(o[1] + k * os) = *dp.offset(base + k * ds);
                }
            }
        });
        ok
    }

    fn run(
        &self,
        out: &Strided,
        data: &Strided,
        args: &[IndexArg],
        es: usize,
        n: usize,
        wrap: bool,
    ) -> bool {
        let m: usize = out.sizes[..self.k].iter().product();
        let strides = walk_strides(data, out, args, self.k);
        let s = &strides[..];
        // SAFETY (inside rows): chunks write disjoint output rows.
        run_chunks(n, m, |start, len| unsafe {
            match es {
                1 => self.rows::<u8>(out, data, args, s, wrap, start, len),
                2 => self.rows::<u16>(out, data, args, s, wrap, start, len),
                4 => self.rows::<u32>(out, data, args, s, wrap, start, len),
                8 => self.rows::<u64>(out, data, args, s, wrap, start, len),
                _ => self.rows::<Elem16>(out, data, args, s, wrap, start, len),
            }
        })
    }
}

/// How a scatter combines the destination with the source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduce {
    Assign,
    Add,
    Mul,
    Mean,
    Max,
    Min,
}

/// The source of a scatter: a tensor over the plan shape, or one value.
pub enum Src<'a> {
    Tensor(&'a Strided),
    Scalar { f: f64, i: i64, is_int: bool },
}

/// Element arithmetic of the scatter reductions, with torch CPU's semantics
/// (integers wrap, halves compute in f32, NaN propagates through max/min).
pub trait Arith: Scalar {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn lowest() -> Self;
    fn highest() -> Self;
    fn div_count(self, c: i64) -> Self;
}

macro_rules! int_arith {
    ($t:ty) => {
        impl Arith for $t {
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            fn div_count(self, c: i64) -> Self {
                // floor division by a count of the same dtype
                let c = c as $t as i64;
                if c == 0 {
                    return self;
                }
                (self as i64).div_euclid(c) as $t
            }
        }
    };
}
int_arith!(u8);
int_arith!(i8);
int_arith!(i16);
int_arith!(i32);
int_arith!(i64);

impl Arith for bool {
    fn add(self, o: Self) -> Self {
        self || o
    }
    fn mul(self, o: Self) -> Self {
        self && o
    }
    fn max(self, o: Self) -> Self {
        self || o
    }
    fn min(self, o: Self) -> Self {
        self && o
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
    fn div_count(self, _c: i64) -> Self {
        self
    }
}

macro_rules! float_arith {
    ($t:ty, $via:ty, $to:expr, $from:expr) => {
        impl Arith for $t {
            fn add(self, o: Self) -> Self {
                let (a, b): ($via, $via) = ($to(self), $to(o));
                $from(a + b)
            }
            fn mul(self, o: Self) -> Self {
                let (a, b): ($via, $via) = ($to(self), $to(o));
                $from(a * b)
            }
            fn max(self, o: Self) -> Self {
                let (a, b): ($via, $via) = ($to(self), $to(o));
                if b.is_nan() || a.is_nan() {
                    if a.is_nan() {
                        self
                    } else {
                        o
                    }
                } else if a < b {
                    o
                } else {
                    self
                }
            }
            fn min(self, o: Self) -> Self {
                let (a, b): ($via, $via) = ($to(self), $to(o));
                if b.is_nan() || a.is_nan() {
                    if a.is_nan() {
                        self
                    } else {
                        o
                    }
                } else if b < a {
                    o
                } else {
                    self
                }
            }
            fn lowest() -> Self {
                $from(<$via>::NEG_INFINITY)
            }
            fn highest() -> Self {
                $from(<$via>::INFINITY)
            }
            fn div_count(self, c: i64) -> Self {
                let a: $via = $to(self);
                let c: $via = $to(<$t as Scalar>::from_i64(c));
                $from(a / c)
            }
        }
    };
}
float_arith!(f32, f32, |x: f32| x, |x: f32| x);
float_arith!(f64, f64, |x: f64| x, |x: f64| x);
float_arith!(f16, f32, |x: f16| x.to_f32(), f16::from_f32);
float_arith!(bf16, f32, |x: bf16| x.to_f32(), bf16::from_f32);

#[inline(always)]
fn combine<T: Arith>(op: Reduce, d: T, s: T) -> T {
    match op {
        Reduce::Assign => s,
        Reduce::Add | Reduce::Mean => d.add(s),
        Reduce::Mul => d.mul(s),
        Reduce::Max => d.max(s),
        Reduce::Min => d.min(s),
    }
}

fn identity<T: Arith>(op: Reduce) -> T {
    match op {
        Reduce::Mul => T::from_i64(1),
        Reduce::Max => T::lowest(),
        Reduce::Min => T::highest(),
        _ => T::from_i64(0),
    }
}

unsafe fn scatter_typed<T: Arith>(
    dst: &Strided,
    src: &Src,
    args: &[IndexArg],
    op: Reduce,
    include_self: bool,
    acc_float: bool,
) {
    let shape = &dst.sizes;
    let n: usize = shape.iter().product();
    let dp = dst.ptr as *mut T;
    let (sview, scalar) = match src {
        Src::Tensor(s) => (Some(*s), T::from_i64(0)),
        Src::Scalar { f, i, is_int } => (
            None,
            if *is_int {
                T::from_i64(*i)
            } else {
                T::from_f64(*f)
            },
        ),
    };
    let strides = match sview {
        Some(s) => all_strides(dst, Some(s), args),
        None => {
            let mut v = all_strides(dst, None, args);
            v.insert(1, Strides::from_elem(0, shape.len()));
            v
        }
    };
    let sp = sview.map(|s| s.ptr as *const T);
    if !include_self && op != Reduce::Assign {
        let id = identity::<T>(op);
        walk(shape, &strides, 0, n, |o| {
            if let Some(off) = data_offset(o[0], o, 2, args, true) {
                *dp.offset(off) = id;
            }
        });
    }
    let mut counts: HashMap<isize, i64> = HashMap::new();
    if acc_float && matches!(op, Reduce::Add | Reduce::Mean | Reduce::Mul) {
        // Sums and products of halves accumulate in f32 per destination
        // element and round once (torch CPU's opmath for scatter/index_add).
        let mut acc: HashMap<isize, f32> = HashMap::new();
        let mut order: Vec<isize> = Vec::new();
        walk(shape, &strides, 0, n, |o| {
            let Some(off) = data_offset(o[0], o, 2, args, true) else {
                return;
            };
            let s = match sp {
                Some(p) => *p.offset(o[1]),
                None => scalar,
            }
            .to_f64() as f32;
            let a = acc.entry(off).or_insert_with(|| {
                order.push(off);
                (*dp.offset(off)).to_f64() as f32
            });
            *a = if op == Reduce::Mul { *a * s } else { *a + s };
            if op == Reduce::Mean {
                *counts.entry(off).or_insert(include_self as i64) += 1;
            }
        });
        for off in order {
            let v = T::from_f64(acc[&off] as f64);
            *dp.offset(off) = if op == Reduce::Mean {
                v.div_count(counts[&off])
            } else {
                v
            };
        }
        return;
    }
    // Rows: when the innermost dim runs along contiguous memory of dst (and
    // of src) with every index constant along it (`x[idx] += rows`, the
    // backward of `table[idx]`), each index position moves a whole row, in
    // the same order per destination element as the element walk below.
    let nd = shape.len();
    if nd > 0 && shape[nd - 1] > 1 && matches!(op, Reduce::Add | Reduce::Assign) {
        let last = nd - 1;
        let src_unit = if sp.is_some() { 1 } else { 0 };
        if strides[0][last] == 1
            && strides[1][last] == src_unit
            && strides[2..].iter().all(|st| st[last] == 0)
        {
            let len = shape[last];
            let outer: Vec<Strides> = strides
                .iter()
                .map(|st| Strides::from_slice(&st[..last]))
                .collect();
            // A source apart from everything the scatter may write is read
            // through slices, so the row loops vectorize; one that aliases
            // dst keeps ATen's element-by-element semantics (raw pointers).
            let apart = sview.is_none_or(|s| !write_extent(dst, args).overlaps(s));
            walk(&shape[..last], &outer, 0, n / len, |o| {
                let Some(off) = data_offset(o[0], o, 2, args, true) else {
                    return;
                };
                let d = dp.offset(off);
                if apart {
                    // SAFETY: a row of dst and (disjoint from it) one of src.
                    let ds = std::slice::from_raw_parts_mut(d, len);
                    let ss = sp.map(|p| std::slice::from_raw_parts(p.offset(o[1]), len));
                    match (ss, op) {
                        (Some(ss), Reduce::Assign) => ds.copy_from_slice(ss),
                        (Some(ss), _) => ds.iter_mut().zip(ss).for_each(|(x, &y)| *x = x.add(y)),
                        (None, Reduce::Assign) => ds.fill(scalar),
                        (None, _) => ds.iter_mut().for_each(|x| *x = x.add(scalar)),
                    }
                    return;
                }
                match sp {
                    Some(p) => {
                        let p = p.offset(o[1]);
                        for j in 0..len {
                            *d.add(j) = combine(op, *d.add(j), *p.add(j));
                        }
                    }
                    None => {
                        for j in 0..len {
                            *d.add(j) = combine(op, *d.add(j), scalar);
                        }
                    }
                }
            });
            return;
        }
    }
    walk(shape, &strides, 0, n, |o| {
        let Some(off) = data_offset(o[0], o, 2, args, true) else {
            return;
        };
        let s = match sp {
            Some(p) => *p.offset(o[1]),
            None => scalar,
        };
        let d = dp.offset(off);
        *d = combine(op, *d, s);
        if op == Reduce::Mean {
            *counts.entry(off).or_insert(include_self as i64) += 1;
        }
    });
    if op == Reduce::Mean {
        for (off, c) in counts {
            let d = dp.offset(off);
            *d = (*d).div_count(c);
        }
    }
}

/// `dst[r + Σ_k idx_k[r] * stride_k] op= src[r]` over the plan shape
/// (`dst.sizes`; `dst` restrided like `gather`'s data), serially in
/// row-major order. Without `include_self`, the positions written start
/// from the reduction's identity. `Mean` divides each written position by
/// its count (plus one with `include_self`), floor-dividing integers.
/// With `acc_float`, sums and products of f16/bf16 accumulate in f32 and
/// round once per destination element.
pub fn scatter(
    dst: &Strided,
    src: Src,
    args: &[IndexArg],
    wrap: bool,
    op: Reduce,
    include_self: bool,
    acc_float: bool,
) -> Result<(), KernelError> {
    if dst.dtype.is_complex() {
        return scatter_complex(dst, src, args, wrap, op, include_self);
    }
    let shape = dst.sizes.clone();
    for a in args {
        if a.idx.sizes != shape {
            return Err(KernelError::ShapeMismatch(format!(
                "foo scatter: index view {:?} does not match {:?}",
                a.idx.sizes, shape
            )));
        }
    }
    if let Src::Tensor(s) = &src {
        if s.sizes != shape {
            return Err(KernelError::ShapeMismatch(format!(
                "foo scatter: source view {:?} does not match {:?}",
                s.sizes, shape
            )));
        }
        if s.dtype != dst.dtype {
            return Err(KernelError::InvalidArgument(format!(
                "foo scatter: source dtype {} differs from destination dtype {}",
                s.dtype.name(),
                dst.dtype.name()
            )));
        }
    }
    check_shapes(&shape, dst, args)?;
    check_indices(&shape, args, wrap)?;
    let mut bufs = Vec::new();
    let detached = detach_indices(dst, args, &mut bufs);
    let args = &detached[..];
    if shape.iter().product::<usize>() == 0 {
        return Ok(());
    }
    // SAFETY: indices checked; offsets stay inside the views.
    let acc_float = acc_float && matches!(dst.dtype, DType::F16 | DType::BF16);
    dispatch_dtype!(dst.dtype, T => unsafe { scatter_typed::<T>(dst, &src, args, op, include_self, acc_float) });
    Ok(())
}

/// `scatter` into a complex `dst`: assignment and sums act on the real and
/// imaginary parts independently, so each part is one real scatter (the
/// index strides doubled with the parts' element strides). CPU's complex
/// scatters have no other reduction here.
fn scatter_complex(
    dst: &Strided,
    src: Src,
    args: &[IndexArg],
    wrap: bool,
    op: Reduce,
    include_self: bool,
) -> Result<(), KernelError> {
    if !matches!(op, Reduce::Assign | Reduce::Add) {
        return Err(KernelError::UnsupportedDtype {
            op: "scatter (reduce)",
            dtype: dst.dtype,
        });
    }
    let Src::Tensor(s) = src else {
        return Err(KernelError::InvalidArgument(
            "foo scatter: a complex destination takes a tensor source".into(),
        ));
    };
    if s.dtype != dst.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo scatter: source dtype {} differs from destination dtype {}",
            s.dtype.name(),
            dst.dtype.name()
        )));
    }
    let part_args: Vec<IndexArg> = args
        .iter()
        .map(|a| IndexArg {
            idx: a.idx.clone(),
            size: a.size,
            stride: 2 * a.stride,
        })
        .collect();
    for p in 0..2 {
        let sp = s.complex_part(p);
        scatter(
            &dst.complex_part(p),
            Src::Tensor(&sp),
            &part_args,
            wrap,
            op,
            include_self,
            false,
        )?;
    }
    Ok(())
}

/// Copies each input into its slice of `out` along `dim` (inputs in order,
/// each with `out`'s sizes except along `dim`), converting dtype.
pub fn cat(out: &Strided, inputs: &[Strided], dim: usize) -> Result<(), KernelError> {
    let views: SmallVec<[ViewRef; 8]> = inputs.iter().map(Strided::as_view).collect();
    if cat_views(out.as_view(), &views, dim)? {
        return Ok(());
    }
    cat_strided(out, inputs, dim)
}

/// [`cat`]'s checks of the inputs against `out`, then its copy when every
/// view is contiguous and small ([`cat_dense`]): true if that copied, false
/// if the views need [`cat_strided`]. Borrowed views: the C entry calls this
/// before it builds a [`Strided`] per input.
pub fn cat_views(out: ViewRef, inputs: &[ViewRef], dim: usize) -> Result<bool, KernelError> {
    if dim >= out.sizes.len() {
        return Err(KernelError::ShapeMismatch(format!(
            "foo cat: dim {dim} out of range for output {:?}",
            out.sizes
        )));
    }
    let mut total = 0usize;
    for t in inputs {
        if t.sizes.len() != out.sizes.len() || dim >= out.sizes.len() {
            return Err(KernelError::ShapeMismatch(format!(
                "foo cat: input {:?} does not fit output {:?}",
                t.sizes, out.sizes
            )));
        }
        for d in 0..out.sizes.len() {
            if d != dim && t.sizes[d] != out.sizes[d] {
                return Err(KernelError::ShapeMismatch(format!(
                    "foo cat: input {:?} does not fit output {:?}",
                    t.sizes, out.sizes
                )));
            }
        }
        total += t.sizes[dim];
        if total > out.sizes[dim] {
            return Err(KernelError::ShapeMismatch(format!(
                "foo cat: inputs exceed output {:?} along {dim}",
                out.sizes
            )));
        }
    }
    Ok(cat_dense(out, inputs, dim))
}

/// [`cat`] of views [`cat_views`] checked and did not copy.
pub fn cat_strided(out: &Strided, inputs: &[Strided], dim: usize) -> Result<(), KernelError> {
    let mut off = 0usize;
    for t in inputs {
        let n = t.sizes[dim];
        if n > 0 && t.numel() > 0 {
            let es = out.dtype.size() as isize;
            let ptr = unsafe { out.ptr.offset(off as isize * out.strides[dim] * es) };
            let mut sizes = out.sizes.clone();
            sizes[dim] = n;
            let sub = Strided::new(ptr, out.dtype, sizes, out.strides.clone());
            let last = sub.sizes.len() - 1;
            if t.dtype == sub.dtype
                && (!t.is_contiguous() || !sub.is_contiguous())
                && t.strides[last] == 1
                && sub.strides[last] == 1
                && sub.sizes[last] > 1
            {
                // Rows contiguous in both: one memcpy per row.
                let row = sub.sizes[last] * es as usize;
                let outer = &sub.sizes[..last];
                let m: usize = outer.iter().product();
                let (dp, sp) = (sub.ptr as usize, t.ptr as usize);
                walk(
                    outer,
                    &[sub.strides[..last].to_vec(), t.strides[..last].to_vec()],
                    0,
                    m,
                    |o| unsafe {
                        // SAFETY: rows of the two views. `out` may be the
                        // very memory of an input (an out= view over the
                        // inputs' storage, which CPU computes too), so the
                        // copy is a memmove, defined for overlapping rows.
                        std::ptr::copy(
                            (sp as isize + o[1] * es) as *const u8,
                            (dp as isize + o[0] * es) as *mut u8,
                            row,
                        );
                    },
                );
                off += n;
                continue;
            }
            copy::copy(&sub, t)?;
        }
        off += n;
    }
    Ok(())
}

/// [`cat`] of contiguous inputs of `out`'s dtype into a contiguous `out`
/// of at most one serial copy's size, as CPU's serial cat kernel: per index
/// of the dims before `dim`, each input's block is one memmove (the copy
/// engine's per-input set-up cost more than a small cat's bytes). False if
/// not that case; the inputs are already checked against `out`.
fn cat_dense(out: ViewRef, inputs: &[ViewRef], dim: usize) -> bool {
    let es = out.dtype.size();
    let bytes = out.numel() * es;
    if bytes > GRAIN_SIZE * 16
        || !out.is_contiguous()
        || inputs
            .iter()
            .any(|t| t.dtype != out.dtype || !t.is_contiguous())
    {
        return false;
    }
    let outer: usize = out.sizes[..dim].iter().product();
    let inner: usize = out.sizes[dim + 1..].iter().product::<usize>() * es;
    let row = out.sizes[dim] * inner;
    let mut off = 0;
    for t in inputs {
        let block = t.sizes[dim] * inner;
        for o in 0..outer {
            // SAFETY: block `o` of a contiguous input, into its place in row
            // `o` of the contiguous output; a memmove, as `out` may be an
            // input's own memory (see the row copies in `cat`).
            unsafe { std::ptr::copy(t.ptr.add(o * block), out.ptr.add(o * row + off), block) };
        }
        off += block;
    }
    true
}

/// Number of nonzero elements of `src`.
pub fn count_nonzero(src: &Strided) -> usize {
    fn go<T: Scalar>(src: &Strided) -> usize {
        let p = src.ptr as *const T;
        let mut c = 0usize;
        walk(
            &src.sizes,
            std::slice::from_ref(&src.strides),
            0,
            src.numel(),
            |o| {
                // SAFETY: the view's own offsets.
                let v = unsafe { *p.offset(o[0]) };
                if nonzero_val(v) {
                    c += 1;
                }
            },
        );
        c
    }
    dispatch_dtype!(src.dtype, T => go::<T>(src))
}

#[inline(always)]
fn nonzero_val<T: Scalar>(v: T) -> bool {
    if T::is_float() {
        v.to_f64() != 0.0
    } else {
        v.to_i64() != 0
    }
}

/// Writes the multi-indices of the nonzero elements of `src` (row-major)
/// into the int64 `out` of shape `[count, ndim]`.
pub fn nonzero(out: &Strided, src: &Strided) -> Result<(), KernelError> {
    let nd = src.sizes.len();
    let count = out.sizes.first().copied().unwrap_or(0);
    if out.dtype != DType::I64 || out.sizes.len() != 2 || out.sizes[1] != nd {
        return Err(KernelError::InvalidArgument(format!(
            "foo nonzero: bad output {:?} for input {:?}",
            out.sizes, src.sizes
        )));
    }
    fn go<T: Scalar>(out: &Strided, src: &Strided, count: usize) -> Result<(), KernelError> {
        let p = src.ptr as *const T;
        let op = out.ptr as *mut i64;
        let nd = src.sizes.len();
        let n = src.numel();
        let mut row = 0usize;
        let mut lin = 0usize;
        let mut overflow = false;
        walk(&src.sizes, std::slice::from_ref(&src.strides), 0, n, |o| {
            // SAFETY: the view's own offsets; rows bounded by `count`.
            let v = unsafe { *p.offset(o[0]) };
            if nonzero_val(v) {
                if row >= count {
                    overflow = true;
                } else {
                    let mut rem = lin;
                    for d in (0..nd).rev() {
                        let s = src.sizes[d].max(1);
                        unsafe {
                            *op.offset(
                                row as isize * out.strides[0] + d as isize * out.strides[1],
                            ) = (rem % s) as i64
                        };
                        rem /= s;
                    }
                    row += 1;
                }
            }
            lin += 1;
        });
        if overflow || row != count {
            return Err(KernelError::InvalidArgument(
                "foo nonzero: the input changed while it was read".into(),
            ));
        }
        Ok(())
    }
    dispatch_dtype!(src.dtype, T => go::<T>(out, src, count))
}

/// Copies the elements of `src` where `mask` (same shape, bool) is true, in
/// row-major order, into the 1-d `out` of exactly that many elements.
pub fn masked_select(out: &Strided, src: &Strided, mask: &Strided) -> Result<(), KernelError> {
    if mask.dtype != DType::Bool
        || mask.sizes != src.sizes
        || out.sizes.len() != 1
        || out.dtype != src.dtype
    {
        return Err(KernelError::InvalidArgument(
            "foo masked_select: bad arguments".into(),
        ));
    }
    let count = out.sizes[0];
    fn go<T: Copy>(out: &Strided, src: &Strided, mask: &Strided, count: usize) -> bool {
        let (sp, mp, op) = (
            src.ptr as *const T,
            mask.ptr as *const u8,
            out.ptr as *mut T,
        );
        let mut k = 0usize;
        let mut ok = true;
        walk(
            &src.sizes,
            &[src.strides.clone(), mask.strides.clone()],
            0,
            src.numel(),
            |o| unsafe {
                if *mp.offset(o[1]) != 0 {
                    if k < count {
                        *op.offset(k as isize * out.strides[0]) = *sp.offset(o[0]);
                        k += 1;
                    } else {
                        ok = false;
                    }
                }
            },
        );
        ok && k == count
    }
    let ok = match src.dtype.size() {
        1 => go::<u8>(out, src, mask, count),
        2 => go::<u16>(out, src, mask, count),
        4 => go::<u32>(out, src, mask, count),
        8 => go::<u64>(out, src, mask, count),
        _ => go::<Elem16>(out, src, mask, count),
    };
    if !ok {
        return Err(KernelError::InvalidArgument(
            "foo masked_select: the mask changed while it was read".into(),
        ));
    }
    Ok(())
}

/// `out = src` reversed along `dims` (same shapes).
pub fn flip(out: &Strided, src: &Strided, dims: &[usize]) -> Result<(), KernelError> {
    if out.sizes != src.sizes {
        return Err(KernelError::ShapeMismatch(format!(
            "foo flip: {:?} vs {:?}",
            out.sizes, src.sizes
        )));
    }
    if src.numel() == 0 {
        return Ok(());
    }
    let es = src.dtype.size() as isize;
    let mut strides = src.strides.clone();
    let mut ptr = src.ptr;
    for &d in dims {
        if d >= strides.len() {
            return Err(KernelError::InvalidArgument(format!(
                "foo flip: dim {d} out of range"
            )));
        }
        ptr = unsafe { ptr.offset((src.sizes[d] as isize - 1) * strides[d] * es) };
        strides[d] = -strides[d];
    }
    copy::copy(
        out,
        &Strided::new(ptr, src.dtype, src.sizes.clone(), strides),
    )
}

/// `out = tril(src, k)` (`upper`: triu) over the last two dims; `out` may
/// be `src` itself (same view).
pub fn tri(out: &Strided, src: &Strided, k: i64, upper: bool) -> Result<(), KernelError> {
    if out.sizes != src.sizes || out.sizes.len() < 2 || out.dtype != src.dtype {
        return Err(KernelError::ShapeMismatch(format!(
            "foo tril/triu: {:?} vs {:?}",
            out.sizes, src.sizes
        )));
    }
    fn go<T: Scalar>(out: &Strided, src: &Strided, k: i64, upper: bool) {
        let nd = out.sizes.len();
        let (rows, cols) = (out.sizes[nd - 2], out.sizes[nd - 1]);
        let (op, sp) = (out.ptr as *mut T, src.ptr as *const T);
        let zero = T::from_i64(0);
        let mut lin = 0usize;
        walk(
            &out.sizes,
            &[out.strides.clone(), src.strides.clone()],
            0,
            out.numel(),
            |o| {
                let j = (lin % cols) as i64;
                let i = ((lin / cols) % rows) as i64;
                let keep = if upper { j - i >= k } else { j - i <= k };
                // SAFETY: the views' own offsets; same element read then written.
                unsafe { *op.offset(o[0]) = if keep { *sp.offset(o[1]) } else { zero } };
                lin += 1;
            },
        );
    }
    if out.numel() == 0 {
        return Ok(());
    }
    if out.dtype.is_complex() {
        // Zeros and copies of each part: two real passes.
        for p in 0..2 {
            tri(&out.complex_part(p), &src.complex_part(p), k, upper)?;
        }
        return Ok(());
    }
    dispatch_dtype!(out.dtype, T => go::<T>(out, src, k, upper));
    Ok(())
}

/// `out[i] = start + i * step` (1-d), in f64 for floating dtypes (rounded
/// once) and in i64 for the integer ones, as torch CPU's arange.
pub fn arange(
    out: &Strided,
    start_f: f64,
    step_f: f64,
    start_i: i64,
    step_i: i64,
    integral: bool,
) -> Result<(), KernelError> {
    if out.sizes.len() != 1 {
        return Err(KernelError::InvalidArgument(
            "foo arange: output must be 1-d".into(),
        ));
    }
    fn go<T: Scalar>(
        out: &Strided,
        start_f: f64,
        step_f: f64,
        start_i: i64,
        step_i: i64,
        integral: bool,
    ) {
        let p = out.ptr as *mut T;
        let half = matches!(out.dtype, DType::F16 | DType::BF16);
        for i in 0..out.sizes[0] {
            let v = if integral {
                T::from_i64(start_i.wrapping_add(step_i.wrapping_mul(i as i64)))
            } else if half {
                // acc_type of f16/bf16 is f32
                T::from_f64((start_f as f32 + step_f as f32 * i as f32) as f64)
            } else {
                T::from_f64(start_f + step_f * i as f64)
            };
            // SAFETY: i < size of the 1-d view.
            unsafe { *p.offset(i as isize * out.strides[0]) = v };
        }
    }
    dispatch_dtype!(out.dtype, T => go::<T>(out, start_f, step_f, start_i, step_i, integral));
    Ok(())
}

/// torch CPU's linspace: `start + step*i` in the first half and
/// `end - step*(steps-1-i)` in the second, with `step` computed in f64 for
/// integer dtypes and in f32 for float32 / half types.
/// torch CPU's linspace into the 1-d `out`: the first half counts up from
/// `start`, the second down from `end`. float16/bfloat16 compute in f32 and
/// round once when `opmath` (torch >= 2.15), else every operation rounds to
/// the half type (c10::Half arithmetic, torch 2.13).
pub fn linspace(out: &Strided, start: f64, end: f64, opmath: bool) -> Result<(), KernelError> {
    if out.sizes.len() != 1 {
        return Err(KernelError::InvalidArgument(
            "foo linspace: output must be 1-d".into(),
        ));
    }
    let steps = out.sizes[0];
    if steps == 0 {
        return Ok(());
    }
    let p = out.ptr;
    let st = out.strides[0];
    fn write<T: Scalar>(p: *mut u8, st: isize, i: usize, v: T) {
        // SAFETY: i < steps, the view's size.
        unsafe { *(p as *mut T).offset(i as isize * st) = v };
    }
    let half = (steps / 2) as i64;
    macro_rules! floaty {
        ($t:ty, $via:ty) => {{
            let s: $via = <$t>::from_f64(start).to_f64() as $via;
            let e: $via = <$t>::from_f64(end).to_f64() as $via;
            let step: $via = if steps > 1 {
                (e - s) / (steps - 1) as $via
            } else {
                0.0
            };
            for i in 0..steps {
                let ii = i as i64;
                let v: $via = if ii < half {
                    s + step * ii as $via
                } else {
                    e - step * (steps as i64 - ii - 1) as $via
                };
                write::<$t>(p, st, i, <$t as Scalar>::from_f64(v as f64));
            }
        }};
    }
    // c10::Half / BFloat16 arithmetic: each operation computes in f32 and
    // rounds back (integers convert to the half type first).
    macro_rules! halfy {
        ($t:ty) => {{
            let r = |x: f32| <$t>::from_f32(x).to_f32();
            let s = r(start as f32);
            let e = r(end as f32);
            let step = r(r(e - s) / r((steps - 1) as f32));
            for i in 0..steps {
                let ii = i as i64;
                let v = if ii < half {
                    r(s + r(step * r(ii as f32)))
                } else {
                    r(e - r(step * r((steps as i64 - ii - 1) as f32)))
                };
                write::<$t>(p, st, i, <$t>::from_f32(v));
            }
        }};
    }
    match out.dtype {
        DType::F64 => floaty!(f64, f64),
        DType::F32 => floaty!(f32, f32),
        DType::F16 if opmath => floaty!(f16, f32),
        DType::BF16 if opmath => floaty!(bf16, f32),
        DType::F16 => halfy!(f16),
        DType::BF16 => halfy!(bf16),
        dt => {
            dispatch_dtype!(dt, T => {
                let s = T::from_f64(start).to_i64() as f64;
                let e = T::from_f64(end).to_i64() as f64;
                let step = if steps > 1 { (e - s) / (steps - 1) as f64 } else { 0.0 };
                for i in 0..steps {
                    let ii = i as i64;
                    let v = if ii < half { s + step * ii as f64 } else { e - step * (steps as i64 - ii - 1) as f64 };
                    write::<T>(p, st, i, T::from_f64(v));
                }
            })
        }
    }
    Ok(())
}

/// torch CPU's embedding_renorm_: each distinct row of the 2-d `weight`
/// named by `indices` (validated, negative wrapped) whose `norm_type`-norm
/// exceeds `max_norm` is scaled by `max_norm / (norm + 1e-7)`. The norm is
/// rounded to the weight's dtype (as `row.norm()` returns it), so is the
/// scale, which multiplies in f32 for f32/f16/bf16 and in f64 for f64.
pub fn embedding_renorm(
    weight: &Strided,
    indices: &Strided,
    max_norm: f64,
    norm_type: f64,
) -> Result<(), KernelError> {
    if weight.sizes.len() != 2 {
        return Err(KernelError::InvalidArgument(
            "foo embedding_renorm_: weight must be 2-d".into(),
        ));
    }
    if !weight.dtype.is_floating() {
        return Err(KernelError::UnsupportedDtype {
            op: "embedding_renorm_",
            dtype: weight.dtype,
        });
    }
    let rows = weight.sizes[0];
    let arg = IndexArg {
        idx: indices.clone(),
        size: rows,
        stride: 0,
    };
    check_indices(&indices.sizes, std::slice::from_ref(&arg), true)?;
    let mut ids: Vec<i64> = Vec::with_capacity(indices.numel());
    walk(
        &indices.sizes,
        std::slice::from_ref(&indices.strides),
        0,
        indices.numel(),
        |o| {
            // SAFETY: the view's own offsets.
            let mut v = unsafe { read_index(indices.ptr, indices.dtype, o[0]) };
            if v < 0 {
                v += rows as i64;
            }
            ids.push(v);
        },
    );
    ids.sort_unstable();
    ids.dedup();
    fn go<T: Scalar>(w: &Strided, ids: &[i64], max_norm: f64, p: f64) {
        let (cols, rs, cs) = (w.sizes[1], w.strides[0], w.strides[1]);
        let base = w.ptr as *mut T;
        let wide = w.dtype == DType::F64;
        for &r in ids {
            if r < 0 || r as usize >= w.sizes[0] {
                continue; // validated above; kept for memory safety
            }
            // SAFETY: r < rows and c < cols: inside the view.
            let at = |c: usize| unsafe { base.offset(r as isize * rs + c as isize * cs) };
            let mut acc = 0f64;
            for c in 0..cols {
                let a = unsafe { (*at(c)).to_f64() }.abs();
                if p == f64::INFINITY {
                    acc = acc.max(a);
                } else if p == 0.0 {
                    acc += (a != 0.0) as u8 as f64;
                } else if p == 1.0 {
                    acc += a;
                } else if p == 2.0 {
                    acc += a * a;
                } else {
                    acc += a.powf(p);
                }
            }
            let norm = if p == f64::INFINITY || p == 0.0 || p == 1.0 {
                acc
            } else if p == 2.0 {
                acc.sqrt()
            } else {
                acc.powf(1.0 / p)
            };
            let norm = T::from_f64(norm).to_f64();
            if norm > max_norm {
                // `row *= scale`: the scalar converts to the row's dtype first.
                let scale = T::from_f64(max_norm / (norm + 1e-7)).to_f64();
                for c in 0..cols {
                    unsafe {
                        let x = at(c);
                        *x = if wide {
                            T::from_f64((*x).to_f64() * scale)
                        } else {
                            T::from_f64(((*x).to_f64() as f32 * scale as f32) as f64)
                        };
                    }
                }
            }
        }
    }
    dispatch_dtype!(weight.dtype, T => go::<T>(weight, &ids, max_norm, norm_type));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::contiguous_strides;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize], strides: &[isize]) -> Strided {
        Strided::new(
            v.as_mut_ptr() as *mut u8,
            dtype,
            sizes.to_vec(),
            strides.to_vec(),
        )
    }

    #[test]
    fn index_select_rows() {
        // data 3x2, select rows [2, 0, -1] (wrapped)
        let mut data: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let mut idx: Vec<i64> = vec![2, 0, -1];
        let mut out = vec![0f32; 6];
        let o = view(&mut out, DType::F32, &[3, 2], &contiguous_strides(&[3, 2]));
        let d = view(&mut data, DType::F32, &[3, 2], &[0, 1]);
        let i = view(&mut idx, DType::I64, &[3, 2], &[1, 0]);
        let args = [IndexArg {
            idx: i,
            size: 3,
            stride: 2,
        }];
        gather(&o, &d, &args, true).unwrap();
        assert_eq!(out, vec![4., 5., 0., 1., 4., 5.]);
        let args_nowrap = [IndexArg {
            idx: args[0].idx.clone(),
            size: 3,
            stride: 2,
        }];
        assert_eq!(
            gather(&o, &d, &args_nowrap, false),
            Err(KernelError::IndexOutOfRange { arg: 0, value: -1 })
        );
    }

    #[test]
    fn row_gather_matches_element_gather() {
        // data 4x3 (rows) read transposed and straight; select rows [3, 1, 3]
        let mut data: Vec<i32> = (0..12).collect();
        let mut idx: Vec<i64> = vec![3, 1, 3];
        for (dstr, expect) in [
            (vec![0isize, 1], vec![9, 10, 11, 3, 4, 5, 9, 10, 11]),
            (vec![0isize, 4], vec![3, 7, 11, 1, 5, 9, 3, 7, 11]),
        ] {
            let (size, stride) = if dstr[1] == 1 { (4, 3) } else { (4, 1) };
            let mut out = vec![0i32; 9];
            let o = view(&mut out, DType::I32, &[3, 3], &[3, 1]);
            let d = view(&mut data, DType::I32, &[3, 3], &dstr);
            let i = view(&mut idx, DType::I64, &[3, 3], &[1, 0]);
            gather(
                &o,
                &d,
                &[IndexArg {
                    idx: i,
                    size,
                    stride,
                }],
                false,
            )
            .unwrap();
            assert_eq!(out, expect);
        }
    }

    #[test]
    fn out_of_range_is_refused_before_reading() {
        // The bad index is never read through (data holds 3 elements); the
        // elements before it are gathered, as CPU's kernel (which checks each
        // index as it reads it) leaves them, and the bad one is left alone.
        let mut data = vec![1i32; 3];
        let mut idx: Vec<i64> = vec![0, 1_000_000_000];
        let mut out = vec![0i32; 2];
        let o = view(&mut out, DType::I32, &[2], &[1]);
        let d = view(&mut data, DType::I32, &[2], &[0]);
        let i = view(&mut idx, DType::I64, &[2], &[1]);
        let r = gather(
            &o,
            &d,
            &[IndexArg {
                idx: i,
                size: 3,
                stride: 1,
            }],
            true,
        );
        assert_eq!(
            r,
            Err(KernelError::IndexOutOfRange {
                arg: 0,
                value: 1_000_000_000
            })
        );
        assert_eq!(out, vec![1, 0]);
    }

    #[test]
    fn scatter_add_duplicates_and_mean() {
        let mut dst = vec![1f64; 3];
        let mut src = vec![1f64, 2., 3., 4.];
        let mut idx: Vec<i64> = vec![0, 2, 0, 0];
        let d = view(&mut dst, DType::F64, &[4], &[0]);
        let s = view(&mut src, DType::F64, &[4], &[1]);
        let i = view(&mut idx, DType::I64, &[4], &[1]);
        let args = [IndexArg {
            idx: i,
            size: 3,
            stride: 1,
        }];
        scatter(&d, Src::Tensor(&s), &args, false, Reduce::Add, true, false).unwrap();
        assert_eq!(dst, vec![9., 1., 3.]);
        let mut dst2 = vec![1f64; 3];
        let d2 = view(&mut dst2, DType::F64, &[4], &[0]);
        scatter(
            &d2,
            Src::Tensor(&s),
            &args,
            false,
            Reduce::Mean,
            true,
            false,
        )
        .unwrap();
        assert_eq!(dst2, vec![9. / 4., 1., 3. / 2.]);
        let mut dst3 = vec![5i32; 3];
        let mut src3 = vec![1i32, 2, 3, 4];
        let d3 = view(&mut dst3, DType::I32, &[4], &[0]);
        let s3 = view(&mut src3, DType::I32, &[4], &[1]);
        scatter(
            &d3,
            Src::Tensor(&s3),
            &args,
            false,
            Reduce::Max,
            false,
            false,
        )
        .unwrap();
        assert_eq!(dst3, vec![4, 5, 2]);
    }

    #[test]
    fn scatter_through_indices_that_alias_the_destination() {
        // dst[idx] = 100 where idx is dst itself: the indices are read before
        // any write, never after (100 would be out of range).
        let mut v: Vec<i64> = vec![1, 0, 2];
        let d = view(&mut v, DType::I64, &[3], &[0]);
        let i = Strided::new(d.ptr, DType::I64, vec![3], vec![1]);
        scatter(
            &d,
            Src::Scalar {
                f: 100.0,
                i: 100,
                is_int: true,
            },
            &[IndexArg {
                idx: i,
                size: 3,
                stride: 1,
            }],
            false,
            Reduce::Assign,
            true,
            false,
        )
        .unwrap();
        assert_eq!(v, vec![100, 100, 100]);
    }

    #[test]
    fn cat_and_flip_and_tri() {
        let mut a: Vec<i16> = vec![1, 2, 3, 4];
        let mut b: Vec<f32> = vec![5.0, 6.0];
        let mut out = vec![0i16; 6];
        let o = view(&mut out, DType::I16, &[2, 3], &[3, 1]);
        let av = view(&mut a, DType::I16, &[2, 2], &[2, 1]);
        let bv = view(&mut b, DType::F32, &[2, 1], &[1, 1]);
        cat(&o, &[av, bv], 1).unwrap();
        assert_eq!(out, vec![1, 2, 5, 3, 4, 6]);
        let mut f = vec![0i16; 6];
        let fv = view(&mut f, DType::I16, &[2, 3], &[3, 1]);
        flip(&fv, &o, &[0, 1]).unwrap();
        assert_eq!(f, vec![6, 4, 3, 5, 2, 1]);
        tri(&fv, &fv.clone(), 0, false).unwrap();
        assert_eq!(f, vec![6, 0, 0, 5, 2, 0]);
    }

    #[test]
    fn nonzero_and_linspace() {
        let mut x = vec![0u8, 3, 0, 1];
        let xv = view(&mut x, DType::U8, &[2, 2], &[2, 1]);
        assert_eq!(count_nonzero(&xv), 2);
        let mut out = vec![0i64; 4];
        let ov = view(&mut out, DType::I64, &[2, 2], &[2, 1]);
        nonzero(&ov, &xv).unwrap();
        assert_eq!(out, vec![0, 1, 1, 1]);
        let mut l = vec![0f64; 5];
        let lv = view(&mut l, DType::F64, &[5], &[1]);
        linspace(&lv, 0.0, 1.0, true).unwrap();
        assert_eq!(l, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    }

    #[test]
    fn half_linspace_rounds_per_operation_or_once() {
        // torch 2.13 / 2.15 CPU: linspace(0, 10, 7, dtype=float16)[4].
        let mut h = vec![half::f16::ZERO; 7];
        let hv = view(&mut h, DType::F16, &[7], &[1]);
        linspace(&hv, 0.0, 10.0, false).unwrap();
        assert_eq!(h[4].to_f32(), 1706.0 / 256.0); // 6.6640625
        linspace(&hv, 0.0, 10.0, true).unwrap();
        assert_eq!(h[4].to_f32(), 1707.0 / 256.0); // 6.66796875
        assert_eq!(
            (h[0].to_f32(), h[3].to_f32(), h[6].to_f32()),
            (0.0, 5.0, 10.0)
        );
    }

    #[test]
    fn large_gather_is_thread_independent() {
        let n = 600_000usize;
        let mut data: Vec<i64> = (0..1000).collect();
        let mut idx: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % 1000).collect();
        let mut out = vec![0i64; n];
        let o = view(&mut out, DType::I64, &[n], &[1]);
        let d = view(&mut data, DType::I64, &[n], &[0]);
        let i = view(&mut idx, DType::I64, &[n], &[1]);
        gather(
            &o,
            &d,
            &[IndexArg {
                idx: i,
                size: 1000,
                stride: 1,
            }],
            false,
        )
        .unwrap();
        assert!(out
            .iter()
            .enumerate()
            .all(|(k, &v)| v == (k as i64 * 7919) % 1000));
    }
}
