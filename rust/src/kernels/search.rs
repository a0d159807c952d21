//! Searching and index building: `searchsorted` (and `bucketize`), `isin`,
//! `logcumsumexp`, the index of `repeat_interleave` and the coordinates of
//! `tril_indices`/`triu_indices`. Inputs are contiguous (the Python layer
//! makes them so); results follow torch CPU's kernels element for element.

use super::copy::Scalar;
use super::select::cxx_sort;
use super::sort::Key;
use super::{parallel, KernelError, Strided, GRAIN_SIZE};
use crate::dispatch_dtype;
use crate::dtype::DType;

fn need(op: &str, ok: bool, what: impl FnOnce() -> String) -> Result<(), KernelError> {
    if ok {
        Ok(())
    } else {
        Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {}",
            what()
        )))
    }
}

fn dense(op: &str, name: &str, t: &Strided) -> Result<(), KernelError> {
    need(op, t.numel() == 0 || t.is_contiguous(), || {
        format!("{name} must be contiguous")
    })
}

/// Shares a raw pointer with the pool's threads, which write disjoint elements.
#[derive(Clone, Copy)]
struct Ptr(usize);

impl Ptr {
    fn of(t: &Strided) -> Ptr {
        Ptr(t.ptr as usize)
    }
    /// # Safety
    /// `i` is in bounds of a buffer of `T`.
    unsafe fn read<T: Copy>(self, i: usize) -> T {
        *(self.0 as *const T).add(i)
    }
    /// # Safety
    /// `i` is in bounds of a buffer of `T`, written by this thread only.
    unsafe fn write<T>(self, i: usize, v: T) {
        *(self.0 as *mut T).add(i) = v;
    }
}

/// For every element of `values`, the position in its line of `boundaries`
/// (the last dim; one line for all when `boundaries` is 1-d) where it would
/// be inserted to keep the line sorted: before equal elements, or after them
/// with `right`. `sorter` (int64, `boundaries`' shape) sorts unsorted lines.
/// `out` is int64 or int32 with `values`' shape.
pub fn searchsorted(
    out: &Strided,
    boundaries: &Strided,
    values: &Strided,
    sorter: Option<&Strided>,
    right: bool,
) -> Result<(), KernelError> {
    let op = "searchsorted";
    for (name, t) in [("out", out), ("boundaries", boundaries), ("input", values)] {
        dense(op, name, t)?;
    }
    need(op, boundaries.ndim() >= 1, || {
        "boundaries must have a dim".into()
    })?;
    need(op, boundaries.dtype == values.dtype, || {
        "boundaries and input must have one dtype".into()
    })?;
    need(op, out.sizes == values.sizes, || {
        "out must have input's shape".into()
    })?;
    need(op, matches!(out.dtype, DType::I64 | DType::I32), || {
        "out must be int64 or int32".into()
    })?;
    let nb = *boundaries.sizes.last().unwrap_or(&0);
    let lines = boundaries.numel().checked_div(nb).unwrap_or(0);
    let nv = if boundaries.ndim() == 1 {
        values.numel().max(1)
    } else {
        *values.sizes.last().unwrap_or(&1)
    };
    need(
        op,
        boundaries.ndim() == 1 || values.numel() == lines * nv,
        || "boundaries and input differ in their leading dims".into(),
    )?;
    if let Some(s) = sorter {
        dense(op, "sorter", s)?;
        need(
            op,
            s.sizes == boundaries.sizes && s.dtype == DType::I64,
            || "sorter must be int64 of boundaries' shape".into(),
        )?;
        let sp = Ptr::of(s);
        // SAFETY: contiguous int64 of numel elements.
        let bad = (0..s.numel()).any(|i| {
            let v: i64 = unsafe { sp.read(i) };
            v < 0 || v as usize >= nb
        });
        need(op, !bad, || "sorter index out of range".into())?;
    }
    let n = values.numel();
    if n == 0 {
        return Ok(());
    }
    let (po, pb, pv) = (Ptr::of(out), Ptr::of(boundaries), Ptr::of(values));
    let ps = sorter.map(Ptr::of);
    let wide = out.dtype == DType::I64;
    dispatch_dtype!(values.dtype, T => {
        parallel::for_range(n, GRAIN_SIZE / 16, |i| {
            let base = if lines > 1 { (i / nv) * nb } else { 0 };
            // SAFETY: indices below numel of contiguous buffers (checked above).
            unsafe {
                let val: T = pv.read(i);
                let at = |m: usize| -> T {
                    match ps {
                        Some(s) => pb.read(base + s.read::<i64>(base + m) as usize),
                        None => pb.read(base + m),
                    }
                };
                let (mut lo, mut hi) = (0usize, nb);
                while lo < hi {
                    let mid = lo + ((hi - lo) >> 1);
                    let m = at(mid);
                    // CPU's `!(mid >= val)` / `!(mid > val)`: NaN goes right.
                    let go_right = if right { !T::less(val, m) } else { T::less(m, val) || T::differ(m, m) || T::differ(val, val) };
                    if go_right {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                if wide {
                    po.write(i, lo as i64);
                } else {
                    po.write(i, lo as i32);
                }
            }
        })
    });
    Ok(())
}

/// `out[i] = elements[i] in test` (or not, with `invert`): `==` membership,
/// so NaN is in nothing. `out` is bool with `elements`' shape; both inputs
/// have one dtype.
pub fn isin(
    out: &Strided,
    elements: &Strided,
    test: &Strided,
    invert: bool,
) -> Result<(), KernelError> {
    let op = "isin";
    for (name, t) in [
        ("out", out),
        ("elements", elements),
        ("test_elements", test),
    ] {
        dense(op, name, t)?;
    }
    need(op, elements.dtype == test.dtype, || {
        "elements and test_elements must have one dtype".into()
    })?;
    need(
        op,
        out.dtype == DType::Bool && out.numel() == elements.numel(),
        || "out must be bool with elements' numel".into(),
    )?;
    let (po, pe, pt) = (Ptr::of(out), Ptr::of(elements), Ptr::of(test));
    dispatch_dtype!(elements.dtype, T => {
        // SAFETY: contiguous buffers of their numel.
        let mut sorted: Vec<T> = (0..test.numel())
            .map(|i| unsafe { pt.read::<T>(i) })
            .filter(|&v| !T::differ(v, v))
            .collect();
        sorted.sort_unstable_by(|a, b| T::order(*a, *b));
        parallel::for_range(elements.numel(), GRAIN_SIZE / 16, |i| unsafe {
            let v: T = pe.read(i);
            let at = sorted.partition_point(|&s| T::less(s, v));
            let found = at < sorted.len() && !T::differ(sorted[at], v);
            po.write(i, found != invert);
        })
    });
    Ok(())
}

/// `out = log(cumsum(exp(inp)))` along `dim`, as CPU computes it (each step
/// `log1p(exp(min - max)) + max`, in float64 here).
pub fn logcumsumexp(out: &Strided, inp: &Strided, dim: usize) -> Result<(), KernelError> {
    let op = "logcumsumexp";
    dense(op, "out", out)?;
    dense(op, "input", inp)?;
    need(op, out.sizes == inp.sizes && out.dtype == inp.dtype, || {
        "out must match input".into()
    })?;
    if !matches!(
        inp.dtype,
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    ) {
        return Err(KernelError::UnsupportedDtype {
            op: "logcumsumexp",
            dtype: inp.dtype,
        });
    }
    if inp.numel() == 0 {
        return Ok(());
    }
    let sizes: &[usize] = if inp.ndim() == 0 { &[1] } else { &inp.sizes };
    need(op, dim < sizes.len(), || format!("dim {dim} out of range"))?;
    let n = sizes[dim];
    let inner: usize = sizes[dim + 1..].iter().product();
    let lines = inp.numel() / n;
    let (po, pi) = (Ptr::of(out), Ptr::of(inp));
    dispatch_dtype!(inp.dtype, T => {
        parallel::for_range(lines, (GRAIN_SIZE / n.max(1)).max(1), |l| {
            let start = (l / inner) * n * inner + l % inner;
            let mut acc = f64::NEG_INFINITY;
            for e in 0..n {
                let at = start + e * inner;
                // SAFETY: in bounds of the contiguous buffers.
                unsafe {
                    let x = pi.read::<T>(at).to_f64();
                    acc = log_add_exp(x, acc);
                    po.write(at, T::from_f64(acc));
                }
            }
        })
    });
    Ok(())
}

/// ATen's `_log_add_exp_helper` (with `y` the running sum).
fn log_add_exp(x: f64, y: f64) -> f64 {
    let (lo, hi) = if y.is_nan() {
        (y, y)
    } else {
        // std::min / std::max return their first argument when one is NaN.
        (if y < x { y } else { x }, if x < y { y } else { x })
    };
    if lo != hi || lo.is_finite() {
        (lo - hi).exp().ln_1p() + hi
    } else {
        x
    }
}

/// `out` (length `sum(repeats)`, of `repeats`' dtype: int64 or int32) = `i`
/// repeated `repeats[i]` times, for contiguous non-negative `repeats`.
pub fn repeat_index(out: &Strided, repeats: &Strided) -> Result<(), KernelError> {
    let op = "repeat_interleave";
    dense(op, "out", out)?;
    dense(op, "repeats", repeats)?;
    need(op, out.dtype == repeats.dtype && out.ndim() == 1, || {
        "out must be 1-d, of repeats' dtype".into()
    })?;
    let pr = Ptr::of(repeats);
    let counts: Vec<i64> = match repeats.dtype {
        // SAFETY: contiguous buffers of their numel.
        DType::I64 => (0..repeats.numel())
            .map(|i| unsafe { pr.read::<i64>(i) })
            .collect(),
        DType::I32 => (0..repeats.numel())
            .map(|i| unsafe { pr.read::<i32>(i) } as i64)
            .collect(),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "repeat_interleave",
                dtype: d,
            })
        }
    };
    need(op, counts.iter().all(|&c| c >= 0), || {
        "repeats can not be negative".into()
    })?;
    let total: i64 = counts.iter().sum();
    need(op, total as usize == out.numel(), || {
        format!("out has {} elements, repeats sum to {total}", out.numel())
    })?;
    let po = Ptr::of(out);
    let mut at = 0usize;
    for (i, &c) in counts.iter().enumerate() {
        for _ in 0..c {
            // SAFETY: `at` < total == out.numel(), of out's dtype (checked).
            unsafe {
                if out.dtype == DType::I64 {
                    po.write(at, i as i64)
                } else {
                    po.write(at, i as i32)
                }
            };
            at += 1;
        }
    }
    Ok(())
}

/// The number of (row, col) pairs of a `row x col` matrix with
/// `col - row <= offset` (lower) or `col - row >= offset` (upper).
pub fn tri_count(row: usize, col: usize, offset: i64, upper: bool) -> usize {
    (0..row)
        .map(|r| {
            if upper {
                let first = (r as i64 + offset).clamp(0, col as i64);
                col - first as usize
            } else {
                (r as i64 + offset + 1).clamp(0, col as i64) as usize
            }
        })
        .sum()
}

/// `out` (2 x tri_count, int64 or int32, contiguous): row indices, then
/// column indices, of the lower (or upper) triangle in row-major order.
pub fn tri_indices(
    out: &Strided,
    row: usize,
    col: usize,
    offset: i64,
    upper: bool,
) -> Result<(), KernelError> {
    let op = if upper {
        "triu_indices"
    } else {
        "tril_indices"
    };
    dense(op, "out", out)?;
    let n = tri_count(row, col, offset, upper);
    need(op, out.sizes[..] == [2, n], || {
        format!("out must be [2, {n}]")
    })?;
    let po = Ptr::of(out);
    let mut at = 0usize;
    for r in 0..row {
        let (lo, hi) = if upper {
            ((r as i64 + offset).clamp(0, col as i64) as usize, col)
        } else {
            (0, (r as i64 + offset + 1).clamp(0, col as i64) as usize)
        };
        for c in lo..hi {
            // SAFETY: `at` < n, and the buffer holds 2 * n elements.
            unsafe {
                match out.dtype {
                    DType::I64 => {
                        po.write(at, r as i64);
                        po.write(n + at, c as i64);
                    }
                    DType::I32 => {
                        po.write(at, r as i32);
                        po.write(n + at, c as i32);
                    }
                    d => {
                        return Err(KernelError::UnsupportedDtype {
                            op: "tril_indices",
                            dtype: d,
                        })
                    }
                }
            }
            at += 1;
        }
    }
    Ok(())
}

/// Groups the `n` rows (of `width` elements) of contiguous `inp` into runs
/// of equal rows: sorted (ascending, lexicographic, NaN last) or, with
/// `consecutive`, in input order. Writes, per group `g`, a member row
/// `first[g]` and its size `counts[g]`, and per row its group `inverse[r]`
/// (int64, contiguous, `n` long each); returns the number of groups. NaN is
/// equal to nothing, as under CPU's `!=`.
pub fn unique_rows(
    first: &Strided,
    inverse: &Strided,
    counts: &Strided,
    inp: &Strided,
    width: usize,
    consecutive: bool,
) -> Result<usize, KernelError> {
    let op = "unique";
    dense(op, "input", inp)?;
    let n = inp.numel().checked_div(width).unwrap_or(0);
    for (name, t) in [("first", first), ("inverse", inverse), ("counts", counts)] {
        dense(op, name, t)?;
        need(op, t.dtype == DType::I64 && t.numel() >= n, || {
            format!("{name} must be int64 with {n} elements")
        })?;
    }
    if n == 0 {
        return Ok(0);
    }
    let (pf, px, pc, pi) = (
        Ptr::of(first),
        Ptr::of(inverse),
        Ptr::of(counts),
        Ptr::of(inp),
    );
    let groups = dispatch_dtype!(inp.dtype, T => {
        // SAFETY: contiguous `n * width` elements, only read here.
        let all: &[T] = unsafe { std::slice::from_raw_parts(pi.0 as *const T, n * width) };
        let row = |r: usize| &all[r * width..(r + 1) * width];
        // CPU's orders, step for step (its std::sort leaves equal elements,
        // e.g. -0.0 and 0.0, in an order that decides which one is kept).
        let mut order: Vec<usize> = (0..n).collect();
        if !consecutive && width == 1 {
            let mut pairs: Vec<(T, usize)> = order.iter().map(|&r| (all[r], r)).collect();
            cxx_sort(&mut pairs, &|a: &(T, usize), b: &(T, usize)| {
                T::order(a.0, b.0) == std::cmp::Ordering::Less
            });
            order = pairs.into_iter().map(|p| p.1).collect();
        } else if !consecutive {
            cxx_sort(&mut order, &|&a: &usize, &b: &usize| {
                for (x, y) in row(a).iter().zip(row(b)) {
                    if T::less(*x, *y) {
                        return true;
                    }
                    if T::less(*y, *x) {
                        return false;
                    }
                }
                false
            });
        }
        let (mut g, mut lead) = (0usize, order[0]);
        for (at, &r) in order.iter().enumerate() {
            // Compared with the group's first row, as CPU's unique_dim does.
            let new = at == 0 || row(lead).iter().zip(row(r)).any(|(x, y)| T::differ(*x, *y));
            if new {
                lead = r;
            }
            // SAFETY: g < n and r < n: in bounds of the n-long outputs.
            unsafe {
                if new {
                    if at > 0 {
                        g += 1;
                    }
                    pf.write(g, r as i64);
                    pc.write(g, 0i64);
                }
                pc.write(g, pc.read::<i64>(g) + 1);
                px.write(r, g as i64);
            }
        }
        g + 1
    });
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, sizes)
    }

    #[test]
    fn searchsorted_left_right_and_nan() {
        let mut b = [1.0f32, 2.0, 2.0, 3.0];
        let mut v = [2.0f32, 0.0, 9.0, f32::NAN];
        let mut o = [0i64; 4];
        let (vb, vv, vo) = (
            view(&mut b, DType::F32, &[4]),
            view(&mut v, DType::F32, &[4]),
            view(&mut o, DType::I64, &[4]),
        );
        searchsorted(&vo, &vb, &vv, None, false).unwrap();
        assert_eq!(o, [1, 0, 4, 4]);
        searchsorted(&vo, &vb, &vv, None, true).unwrap();
        assert_eq!(o, [3, 0, 4, 4]);
    }

    #[test]
    fn isin_ignores_nan_and_matches_signed_zero() {
        let mut e = [0.0f64, f64::NAN, 2.0, 5.0];
        let mut t = [-0.0f64, f64::NAN, 5.0];
        let mut o = [false; 4];
        let (ve, vt, vo) = (
            view(&mut e, DType::F64, &[4]),
            view(&mut t, DType::F64, &[3]),
            view(&mut o, DType::Bool, &[4]),
        );
        isin(&vo, &ve, &vt, false).unwrap();
        assert_eq!(o, [true, false, false, true]);
    }

    #[test]
    fn unique_sorted_and_consecutive() {
        let mut x = [3i32, 1, 3, 2, 2];
        let (mut f, mut i, mut c) = ([0i64; 5], [0i64; 5], [0i64; 5]);
        let vx = view(&mut x, DType::I32, &[5]);
        let (vf, vi, vc) = (
            view(&mut f, DType::I64, &[5]),
            view(&mut i, DType::I64, &[5]),
            view(&mut c, DType::I64, &[5]),
        );
        assert_eq!(unique_rows(&vf, &vi, &vc, &vx, 1, false).unwrap(), 3);
        assert_eq!(
            (&f[..3], i, &c[..3]),
            (&[1, 3, 0][..], [2, 0, 2, 1, 1], &[1, 2, 2][..])
        );
        assert_eq!(unique_rows(&vf, &vi, &vc, &vx, 1, true).unwrap(), 4);
        assert_eq!((i, &c[..4]), ([0, 1, 2, 3, 3], &[1, 1, 1, 2][..]));
    }

    #[test]
    fn triangle_counts_and_order() {
        assert_eq!(tri_count(3, 3, 0, false), 6);
        assert_eq!(tri_count(3, 3, 1, true), 3);
        let mut o = [0i64; 6];
        tri_indices(&view(&mut o, DType::I64, &[2, 3]), 3, 3, 1, true).unwrap();
        assert_eq!(o, [0, 0, 1, 1, 2, 2]);
    }
}
