//! Selections whose tie order is torch CPU's: `topk`, `kthvalue` and `mode`.
//!
//! Among equal elements, which position CPU reports is whatever its
//! algorithm leaves there: `topk` is libstdc++'s `std::nth_element` +
//! `std::sort` (or `std::partial_sort` when `k * 64 <= n`), `kthvalue` is
//! ATen's own quickselect (Sedgewick's), `mode` takes the last position of
//! the longest run after a `std::sort`. Integer tensors have many ties, so
//! foo runs the same algorithms, step for step, to report the same
//! positions. The ports below follow libstdc++'s `bits/stl_algo.h` and
//! `bits/stl_heap.h` (unchanged for many releases) and ATen's
//! `Sorting.cpp`.

use super::sort::{for_each_line, Key};
use super::{KernelError, Strided};
use crate::dispatch_dtype;
use crate::dtype::DType;
use std::cmp::Ordering;

/// libstdc++'s `_S_threshold`: ranges up to this long end in insertion sort.
const THRESHOLD: usize = 16;

fn lg(n: usize) -> usize {
    (usize::BITS - 1 - n.leading_zeros()) as usize
}

/// `std::sort(v.begin(), v.end(), less)`.
pub fn cxx_sort<E: Copy>(v: &mut [E], less: &impl Fn(&E, &E) -> bool) {
    let n = v.len();
    if n > 1 {
        introsort_loop(v, 0, n, lg(n) * 2, less);
        final_insertion_sort(v, 0, n, less);
    }
}

/// `std::nth_element(v.begin(), v.begin() + nth, v.end(), less)`.
pub fn cxx_nth_element<E: Copy>(v: &mut [E], nth: usize, less: &impl Fn(&E, &E) -> bool) {
    let n = v.len();
    if n == 0 || nth == n {
        return;
    }
    let (mut first, mut last, mut depth) = (0, n, lg(n) * 2);
    while last - first > 3 {
        if depth == 0 {
            heap_select(v, first, nth + 1, last, less);
            v.swap(first, nth);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        if cut <= nth {
            first = cut;
        } else {
            last = cut;
        }
    }
    insertion_sort(v, first, last, less);
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`.
pub fn cxx_partial_sort<E: Copy>(v: &mut [E], middle: usize, less: &impl Fn(&E, &E) -> bool) {
    heap_select(v, 0, middle, v.len(), less);
    sort_heap(v, 0, middle, less);
}

fn introsort_loop<E: Copy>(
    v: &mut [E],
    first: usize,
    mut last: usize,
    mut depth: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    while last - first > THRESHOLD {
        if depth == 0 {
            heap_select(v, first, last, last, less);
            sort_heap(v, first, last, less);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth, less);
        last = cut;
    }
}

fn final_insertion_sort<E: Copy>(
    v: &mut [E],
    first: usize,
    last: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, less);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, first, i, less);
        }
    } else {
        insertion_sort(v, first, last, less);
    }
}

fn insertion_sort<E: Copy>(v: &mut [E], first: usize, last: usize, less: &impl Fn(&E, &E) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if less(&v[i], &v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, first, i, less);
        }
    }
}

/// libstdc++'s unguarded insert; `floor` only stops a comparator that is no
/// strict weak order (NaN under `<`) from running off the range, where C++
/// would read out of bounds.
fn unguarded_linear_insert<E: Copy>(
    v: &mut [E],
    floor: usize,
    mut last: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    let val = v[last];
    while last > floor && less(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

fn unguarded_partition_pivot<E: Copy>(
    v: &mut [E],
    first: usize,
    last: usize,
    less: &impl Fn(&E, &E) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, less);
    unguarded_partition(v, first + 1, last, first, less)
}

fn move_median_to_first<E: Copy>(
    v: &mut [E],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<E: Copy>(
    v: &mut [E],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &impl Fn(&E, &E) -> bool,
) -> usize {
    let n = v.len();
    loop {
        while first < n && less(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while last > pivot && less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn heap_select<E: Copy>(
    v: &mut [E],
    first: usize,
    middle: usize,
    last: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    make_heap(v, first, middle, less);
    for i in middle..last {
        if less(&v[i], &v[first]) {
            pop_heap(v, first, middle, i, less);
        }
    }
}

fn sort_heap<E: Copy>(v: &mut [E], first: usize, mut last: usize, less: &impl Fn(&E, &E) -> bool) {
    while last - first > 1 {
        last -= 1;
        pop_heap(v, first, last, last, less);
    }
}

fn make_heap<E: Copy>(v: &mut [E], first: usize, last: usize, less: &impl Fn(&E, &E) -> bool) {
    let len = (last - first) as isize;
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[first + parent as usize];
        adjust_heap(v, first, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn pop_heap<E: Copy>(
    v: &mut [E],
    first: usize,
    last: usize,
    result: usize,
    less: &impl Fn(&E, &E) -> bool,
) {
    let value = v[result];
    v[result] = v[first];
    adjust_heap(v, first, 0, (last - first) as isize, value, less);
}

fn adjust_heap<E: Copy>(
    v: &mut [E],
    first: usize,
    mut hole: isize,
    len: isize,
    value: E,
    less: &impl Fn(&E, &E) -> bool,
) {
    let at = |i: isize| first + i as usize;
    let top = hole;
    let mut second = hole;
    while second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if less(&v[at(second)], &v[at(second - 1)]) {
            second -= 1;
        }
        v[at(hole)] = v[at(second)];
        hole = second;
    }
    if len & 1 == 0 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[at(hole)] = v[at(second - 1)];
        hole = second - 1;
    }
    // __push_heap
    let mut parent = (hole - 1) / 2;
    while hole > top && less(&v[at(parent)], &value) {
        v[at(hole)] = v[at(parent)];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    v[at(hole)] = value;
}

/// ATen's `quick_select_template`: puts element `k` of the order `gt`
/// ("greater, NaN greatest") in place, the smaller before it.
fn quick_select<E: Copy>(v: &mut [E], k: usize, gt: impl Fn(&E, &E) -> bool) {
    let k = k as isize;
    let (mut l, mut r) = (0isize, v.len() as isize - 1);
    let at = |i: isize| i as usize;
    loop {
        if r <= l {
            return;
        }
        if r == l + 1 {
            if gt(&v[at(l)], &v[at(r)]) {
                v.swap(at(l), at(r));
            }
            return;
        }
        let p = (l + r) >> 1;
        v.swap(at(p), at(l + 1));
        if gt(&v[at(l + 1)], &v[at(r)]) {
            v.swap(at(l + 1), at(r));
        }
        if gt(&v[at(l)], &v[at(r)]) {
            v.swap(at(l), at(r));
        }
        if gt(&v[at(l + 1)], &v[at(l)]) {
            v.swap(at(l + 1), at(l));
        }
        let (mut i, mut j) = (l + 1, r);
        let piv = v[at(l)];
        loop {
            loop {
                i += 1;
                if !gt(&piv, &v[at(i)]) {
                    break;
                }
            }
            loop {
                j -= 1;
                if !gt(&v[at(j)], &piv) {
                    break;
                }
            }
            if j < i {
                break;
            }
            v.swap(at(i), at(j));
        }
        v.swap(at(l), at(j));
        if j <= k {
            l = i;
        }
        if j >= k {
            r = j - 1;
        }
    }
}

fn check(
    op: &str,
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    m: usize,
) -> Result<(), KernelError> {
    let nd = inp.ndim();
    if dim >= nd {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op} along dim {dim} of a {nd}-d tensor"
        )));
    }
    let mut want = inp.sizes.clone();
    want[dim] = m;
    if values.sizes != want || indices.sizes != want {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op} of shape {:?} along {dim} into values {:?} and indices {:?} (want {want:?})",
            inp.sizes, values.sizes, indices.sizes
        )));
    }
    if values.dtype != inp.dtype || indices.dtype != DType::I64 {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op} of {} into values of {} and indices of {} (want {} and int64)",
            inp.dtype.name(),
            values.dtype.name(),
            indices.dtype.name(),
            inp.dtype.name()
        )));
    }
    Ok(())
}

/// 1-d views of a 0-d call (a line of one element).
fn lift(t: &Strided) -> Strided {
    if t.ndim() == 0 {
        Strided::new(t.ptr, t.dtype, &[1usize][..], &[1isize][..])
    } else {
        t.clone()
    }
}

/// The `k` largest (or smallest) elements of every line of `inp` along
/// `dim` and their positions, in CPU's order (ties included); `values` and
/// `indices` have `inp`'s shape with `k` along `dim`.
pub fn topk(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    largest: bool,
    sorted: bool,
) -> Result<(), KernelError> {
    let (values, indices, inp) = (lift(values), lift(indices), lift(inp));
    check("topk", &values, &indices, &inp, dim, k)?;
    if k > inp.sizes[dim] {
        return Err(KernelError::InvalidArgument(
            "foo: topk: selected index k out of range".into(),
        ));
    }
    if inp.numel() == 0 || k == 0 {
        return Ok(());
    }
    dispatch_dtype!(inp.dtype, T => topk_lines::<T>(&values, &indices, &inp, dim, k, largest, sorted));
    Ok(())
}

fn topk_lines<T: Key>(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
    largest: bool,
    sorted: bool,
) {
    let n = inp.sizes[dim];
    // CPU's comparators: NaN is the largest.
    let less = move |a: &(T, i64), b: &(T, i64)| {
        let o = T::order(a.0, b.0);
        if largest {
            o == Ordering::Greater
        } else {
            o == Ordering::Less
        }
    };
    for_each_line(values, indices, inp, dim, 0, |line: &mut Vec<(T, i64)>| {
        if k * 64 <= n {
            cxx_partial_sort(line, k, &less);
        } else {
            cxx_nth_element(line, k - 1, &less);
            if sorted {
                cxx_sort(&mut line[..k - 1], &less);
            }
        }
    });
}

/// Element `k` (from 1, ascending, NaN greatest) of every line of `inp` along
/// `dim` and its position as CPU's quickselect finds it; `values` and
/// `indices` have `inp`'s shape with 1 along `dim`.
pub fn kthvalue(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    k: usize,
) -> Result<(), KernelError> {
    let (values, indices, inp) = (lift(values), lift(indices), lift(inp));
    check("kthvalue", &values, &indices, &inp, dim, 1)?;
    if k == 0 || k > inp.sizes[dim] {
        return Err(KernelError::InvalidArgument(
            "foo: kthvalue(): selected number k out of range".into(),
        ));
    }
    if inp.numel() == 0 {
        return Ok(());
    }
    dispatch_dtype!(inp.dtype, T => {
        let gt = |a: &(T, i64), b: &(T, i64)| T::order(a.0, b.0) == Ordering::Greater;
        for_each_line(&values, &indices, &inp, dim, k - 1, |line: &mut Vec<(T, i64)>| {
            quick_select(line, k - 1, gt)
        })
    });
    Ok(())
}

/// The most frequent element of every line of `inp` along `dim` (the largest
/// such) and a position of it, as CPU's kernel reports them; `values` and
/// `indices` have `inp`'s shape with 1 along `dim`.
pub fn mode(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
) -> Result<(), KernelError> {
    let (values, indices, inp) = (lift(values), lift(indices), lift(inp));
    check("mode", &values, &indices, &inp, dim, 1)?;
    if inp.numel() == 0 {
        return Ok(());
    }
    dispatch_dtype!(inp.dtype, T => {
        for_each_line(&values, &indices, &inp, dim, 0, |line: &mut Vec<(T, i64)>| {
            cxx_sort(line, &|a: &(T, i64), b: &(T, i64)| T::less(a.0, b.0));
            let n = line.len();
            let (mut best, mut run, mut max_run) = (0, 0usize, 0usize);
            for i in 0..n {
                run += 1;
                if i == n - 1 || T::differ(line[i].0, line[i + 1].0) {
                    if run > max_run {
                        best = i;
                        max_run = run;
                    }
                    run = 0;
                }
            }
            line[0] = line[best];
        })
    });
    Ok(())
}

/// Running maximum (`max`) or minimum of every line of `inp` along `dim` and
/// its position, as CPU's `cummax`/`cummin`: the later of equal elements
/// wins, and NaN, once seen, stays (its last position).
pub fn cummax_cummin(
    values: &Strided,
    indices: &Strided,
    inp: &Strided,
    dim: usize,
    max: bool,
) -> Result<(), KernelError> {
    let (values, indices, inp) = (lift(values), lift(indices), lift(inp));
    let n = inp.sizes.get(dim).copied().unwrap_or(0);
    check(
        if max { "cummax" } else { "cummin" },
        &values,
        &indices,
        &inp,
        dim,
        n,
    )?;
    if inp.numel() == 0 {
        return Ok(());
    }
    dispatch_dtype!(inp.dtype, T => {
        for_each_line(&values, &indices, &inp, dim, 0, |line: &mut Vec<(T, i64)>| {
            let mut best = line[0];
            for e in line.iter_mut() {
                let nan = T::differ(e.0, e.0);
                let wins = if max { !T::less(e.0, best.0) } else { !T::less(best.0, e.0) };
                if nan || (!T::differ(best.0, best.0) && wins) {
                    best = *e;
                }
                *e = best;
            }
        })
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_element_and_sort_order_everything() {
        let less = |a: &i32, b: &i32| a < b;
        for n in 0..80 {
            let base: Vec<i32> = (0..n).map(|i| (i * 37 + 11) % 13).collect();
            let mut want = base.clone();
            want.sort();
            let mut v = base.clone();
            cxx_sort(&mut v, &less);
            assert_eq!(v, want);
            for nth in 0..n as usize {
                let mut v = base.clone();
                cxx_nth_element(&mut v, nth, &less);
                assert_eq!(v[nth], want[nth]);
                assert!(v[..nth].iter().all(|&x| x <= v[nth]));
                let mut v = base.clone();
                cxx_partial_sort(&mut v, nth + 1, &less);
                assert_eq!(v[..=nth], want[..=nth]);
                let mut v = base.clone();
                quick_select(&mut v, nth, |a, b| a > b);
                assert_eq!(v[nth], want[nth]);
            }
        }
    }

    #[test]
    fn running_max_takes_the_last_tie_and_nan() {
        let mut x = [1.0f32, 3.0, 3.0, f32::NAN, 2.0];
        let (mut v, mut i) = ([0f32; 5], [0i64; 5]);
        let view = |p: *mut u8, d| Strided::contiguous(p, d, &[5]);
        let (vx, vv, vi) = (
            view(x.as_mut_ptr() as *mut u8, DType::F32),
            view(v.as_mut_ptr() as *mut u8, DType::F32),
            view(i.as_mut_ptr() as *mut u8, DType::I64),
        );
        cummax_cummin(&vv, &vi, &vx, 0, true).unwrap();
        assert_eq!(i, [0, 1, 2, 3, 3]);
        assert_eq!(v[..3], [1.0, 3.0, 3.0]);
        assert!(v[4].is_nan());
    }
}
