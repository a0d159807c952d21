//! Sorting along one dimension: `sort` (stable), and the first `k` elements
//! of each line in order for `topk`, `kthvalue` and `median` (a selection,
//! then a sort of the `k` selected, so `topk` is O(n + k log k) per line).
//!
//! Order as torch CPU's: NaN is greater than every number (last ascending,
//! first descending), `-0.0 == 0.0`, and equal elements keep their input
//! order (the full sort is stable). `values` gets the elements, `indices`
//! (int64) their positions along `dim`.

use super::copy::for_each_offset;
use super::reduce::par_min;
use super::{parallel, KernelError, Strided, GRAIN_SIZE};
use crate::dispatch_dtype;
use crate::dtype::DType;
use half::{bf16, f16};
use std::cmp::Ordering;

/// A total order with NaN greatest: what CPU's sort comparator does.
pub(super) trait Key: Copy + Send + Sync {
    fn order(a: Self, b: Self) -> Ordering;
    /// C++'s `a < b` (false when either is NaN).
    fn less(a: Self, b: Self) -> bool;
    /// C++'s `a != b` (true when either is NaN).
    fn differ(a: Self, b: Self) -> bool;
}

macro_rules! ord_key {
    ($($t:ty),*) => {$(
        impl Key for $t {
            fn order(a: $t, b: $t) -> Ordering {
                a.cmp(&b)
            }
            fn less(a: $t, b: $t) -> bool {
                a < b
            }
            fn differ(a: $t, b: $t) -> bool {
                a != b
            }
        }
    )*};
}
ord_key!(bool, u8, i8, i16, i32, i64);

macro_rules! float_key {
    ($($t:ty => $wide:expr),*) => {$(
        impl Key for $t {
            fn order(a: $t, b: $t) -> Ordering {
                let (a, b) = ($wide(a), $wide(b));
                a.partial_cmp(&b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
            }
            fn less(a: $t, b: $t) -> bool {
                $wide(a) < $wide(b)
            }
            fn differ(a: $t, b: $t) -> bool {
                $wide(a) != $wide(b)
            }
        }
    )*};
}
float_key!(f32 => |x: f32| x, f64 => |x: f64| x, f16 => f16::to_f32, bf16 => bf16::to_f32);

fn bad(msg: String) -> KernelError {
    KernelError::ShapeMismatch(msg)
}

/// Writes, for every line of `inp` along `dim`, its first `k` elements in
/// ascending (or `descending`) order into `values` and their positions into
/// `indices`; both are `inp`'s shape with `k` along `dim`. `k == n` is a
/// stable sort of the whole line.
pub fn sort(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    descending: bool,
) -> Result<(), KernelError> {
    let nd = inp.ndim();
    if nd == 0 {
        let one = |t: &Strided| Strided::new(t.ptr, t.dtype, &[1usize][..], &[1isize][..]);
        let (v, i, x) = (one(values), one(indices), one(inp));
        return sort(&v, &i, &x, 0, k, descending);
    }
    if dim >= nd {
        return Err(bad(format!("foo: sort along dim {dim} of a {nd}-d tensor")));
    }
    let n = inp.sizes[dim];
    let mut want = inp.sizes.clone();
    want[dim] = k;
    if k > n || values.sizes != want || indices.sizes != want {
        return Err(bad(format!(
            "foo: sort of shape {:?} along {dim} keeping {k} into values {:?} and indices {:?}",
            inp.sizes, values.sizes, indices.sizes
        )));
    }
    if values.dtype != inp.dtype || indices.dtype != DType::I64 {
        return Err(KernelError::InvalidArgument(format!(
            "foo: sort of {} into values of {} and indices of {} (want {} and int64)",
            inp.dtype.name(),
            values.dtype.name(),
            indices.dtype.name(),
            inp.dtype.name()
        )));
    }
    if inp.numel() == 0 || k == 0 {
        return Ok(());
    }
    dispatch_dtype!(inp.dtype, T => lines::<T>(values, indices, inp, dim, k, descending));
    Ok(())
}

fn lines<T: Key>(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    descending: bool,
) {
    let n = inp.sizes[dim];
    let cmp = |a: &(T, i64), b: &(T, i64)| {
        let o = T::order(a.0, b.0);
        if descending {
            o.reverse()
        } else {
            o
        }
    };
    for_each_line(values, indices, inp, dim, 0, |line: &mut Vec<(T, i64)>| {
        if k == n {
            line.sort_by(cmp);
        } else {
            // Selection, then a sort of the k selected: ties within the
            // selection keep input order only up to the selection.
            if k < n {
                line.select_nth_unstable_by(k - 1, cmp);
            }
            line[..k].sort_by(|a, b| cmp(a, b).then(a.1.cmp(&b.1)));
        }
    });
}

/// Runs `order` on every line of `inp` along `dim`, as (element, position)
/// pairs, and writes pairs `skip..skip + m` of the ordered line into the
/// lines of `values` and `indices` (`m` = their size along `dim`). Lines run
/// in parallel when there is enough work.
pub(super) fn for_each_line<T: Copy + Send + Sync>(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    skip: usize,
    order: impl Fn(&mut Vec<(T, i64)>) + Sync,
) {
    let n = inp.sizes[dim];
    let m = values.sizes[dim];
    let mut outer = inp.sizes.clone();
    outer.remove(dim);
    let strides_without = |t: &Strided| {
        let mut s = t.strides.clone();
        s.remove(dim);
        s
    };
    let (si, sv, sx) = (
        strides_without(inp),
        strides_without(values),
        strides_without(indices),
    );
    let (di, dv, dx) = (inp.strides[dim], values.strides[dim], indices.strides[dim]);
    let nlines: usize = outer.iter().product();
    let (pi, pv, px) = (inp.ptr as usize, values.ptr as usize, indices.ptr as usize);
    let run = |lo: usize, hi: usize| {
        let mut line: Vec<(T, i64)> = Vec::with_capacity(n);
        let mut starts = Vec::with_capacity(hi - lo);
        for_each_offset(&outer, &si, lo, hi - lo, |_, o| starts.push(o));
        let mut outs = Vec::with_capacity(hi - lo);
        for_each_offset(&outer, &sv, lo, hi - lo, |_, o| outs.push(o));
        let mut j = 0;
        for_each_offset(&outer, &sx, lo, hi - lo, |_, ox| {
            line.clear();
            // SAFETY: offsets of line starts inside the views; `n` elements along `dim`.
            unsafe {
                let src = (pi as *const T).offset(starts[j]);
                line.extend((0..n).map(|e| (*src.offset(e as isize * di), e as i64)));
            }
            order(&mut line);
            // SAFETY: as above, `m` elements along `dim` of the outputs.
            unsafe {
                let v = (pv as *mut T).offset(outs[j]);
                let x = (px as *mut i64).offset(ox);
                for (e, &(val, pos)) in line[skip..skip + m].iter().enumerate() {
                    *v.offset(e as isize * dv) = val;
                    *x.offset(e as isize * dx) = pos;
                }
            }
            j += 1;
        });
    };
    let chunk = (GRAIN_SIZE / n.max(1)).max(1);
    if nlines > 1 && nlines * n >= par_min() {
        parallel::parallel_for(nlines.div_ceil(chunk), |c| {
            run(c * chunk, ((c + 1) * chunk).min(nlines))
        });
    } else {
        run(0, nlines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, sizes)
    }

    #[test]
    fn stable_with_nan_last_and_signed_zeros_equal() {
        let mut x = [3.0f32, f32::NAN, -0.0, 1.0, 0.0, -1.0];
        let (mut v, mut i) = ([0f32; 6], [0i64; 6]);
        let (vx, vv, vi) = (
            view(&mut x, DType::F32, &[6]),
            view(&mut v, DType::F32, &[6]),
            view(&mut i, DType::I64, &[6]),
        );
        sort(&vv, &vi, &vx, 0, 6, false).unwrap();
        assert_eq!(i, [5, 2, 4, 3, 0, 1]);
        assert!(v[5].is_nan());
        sort(&vv, &vi, &vx, 0, 6, true).unwrap();
        assert_eq!(i, [1, 0, 3, 2, 4, 5]);
    }

    #[test]
    fn top_k_along_the_first_dim() {
        // [[1, 9], [5, 2], [7, 4]]: the 2 largest of each column.
        let mut x = [1i32, 9, 5, 2, 7, 4];
        let (mut v, mut i) = ([0i32; 4], [0i64; 4]);
        let (vx, vv, vi) = (
            view(&mut x, DType::I32, &[3, 2]),
            view(&mut v, DType::I32, &[2, 2]),
            view(&mut i, DType::I64, &[2, 2]),
        );
        sort(&vv, &vi, &vx, 0, 2, true).unwrap();
        assert_eq!(v, [7, 9, 5, 4]);
        assert_eq!(i, [2, 0, 1, 2]);
    }

    #[test]
    fn refuses_a_wrong_shape() {
        let mut x = [1f64, 2.0];
        let (mut v, mut i) = ([0f64; 2], [0i64; 1]);
        let (vx, vv, vi) = (
            view(&mut x, DType::F64, &[2]),
            view(&mut v, DType::F64, &[2]),
            view(&mut i, DType::I64, &[1]),
        );
        assert!(sort(&vv, &vi, &vx, 0, 2, false).is_err());
    }
}
