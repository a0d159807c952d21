//! Matrix decompositions for `torch.linalg` on foo: Cholesky, LU with partial
//! pivoting, solves with an LU factorization, triangular solves, determinants.
//!
//! faer factors and solves; this module adds what torch's CPU backend (LAPACK)
//! defines around them: batches of strided matrices (any strides: results go
//! straight into ATen's column-major outputs), `info` codes, 1-based int32
//! pivots as LAPACK's sequence of row swaps, and LAPACK's handling of exactly
//! singular matrices. Each matrix of a batch is independent: batches run in
//! parallel over foo's pool, one matrix per task, so results do not depend on
//! the thread count.
//!
//! Every function works in place on views the caller has prepared (a copy of
//! the input in the output's layout); `info`/`pivots` are int32 views with the
//! batch shape (and one more dim for pivots).

use super::{parallel, KernelError, Strided};
use crate::dtype::DType;
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor as llt;
use faer::linalg::lu::partial_pivoting::factor as plu;
use faer::linalg::triangular_solve as tri;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::traits::RealField;
use faer::{MatMut, MatRef, Par};

/// The real element types the decompositions take.
trait Real:
    RealField + num_traits::Float + std::ops::MulAssign + std::ops::AddAssign + Send + Sync + 'static
{
}
impl Real for f32 {}
impl Real for f64 {}

fn invalid(msg: String) -> KernelError {
    KernelError::InvalidArgument(msg)
}

/// Element offsets of each matrix (or vector, or scalar: `item_dims` trailing
/// dims) of a batch, the batch dims in row-major order.
fn batch_offsets(t: &Strided, item_dims: usize) -> Result<Vec<isize>, KernelError> {
    let nd = t.ndim();
    if nd < item_dims {
        return Err(invalid(format!(
            "foo linalg: a {nd}-d tensor where at least {item_dims} dims are needed"
        )));
    }
    let bdims = nd - item_dims;
    let count: usize = t.sizes[..bdims].iter().product();
    let mut offs = Vec::with_capacity(count);
    let mut idx = vec![0usize; bdims];
    for _ in 0..count {
        offs.push(
            idx.iter()
                .zip(&t.strides[..bdims])
                .map(|(&i, &s)| i as isize * s)
                .sum(),
        );
        for d in (0..bdims).rev() {
            idx[d] += 1;
            if idx[d] < t.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(offs)
}

/// A batch of matrices: base pointer, per-matrix offsets, rows, cols, row and
/// column strides (elements).
#[derive(Clone)]
struct Mats {
    ptr: usize,
    offs: Vec<isize>,
    m: usize,
    n: usize,
    rs: isize,
    cs: isize,
}

impl Mats {
    fn of(t: &Strided) -> Result<Mats, KernelError> {
        let offs = batch_offsets(t, 2)?;
        let nd = t.ndim();
        Ok(Mats {
            ptr: t.ptr as usize,
            offs,
            m: t.sizes[nd - 2],
            n: t.sizes[nd - 1],
            rs: t.strides[nd - 2],
            cs: t.strides[nd - 1],
        })
    }

    /// The transposed view of every matrix.
    fn t(mut self) -> Mats {
        std::mem::swap(&mut self.m, &mut self.n);
        std::mem::swap(&mut self.rs, &mut self.cs);
        self
    }

    /// Where matrix `b` starts. An empty matrix may sit in an empty
    /// storage, whose pointer is null; faer requires a non-null, aligned
    /// pointer even when it reads nothing, so it gets a dangling one.
    unsafe fn base<T>(&self, b: usize) -> *mut T {
        if self.m == 0 || self.n == 0 || self.ptr == 0 {
            return std::ptr::NonNull::<T>::dangling().as_ptr();
        }
        (self.ptr as *mut T).offset(self.offs[b])
    }

    /// Matrix `b`, writable.
    ///
    /// # Safety
    /// The caller hands each task a distinct `b` of a non-overlapping batch.
    unsafe fn get_mut<'a, T>(&self, b: usize) -> MatMut<'a, T> {
        let p = self.base::<T>(b);
        MatMut::from_raw_parts_mut(p, self.m, self.n, self.rs, self.cs)
    }

    /// Matrix `b`, read-only.
    unsafe fn get<'a, T>(&self, b: usize) -> MatRef<'a, T> {
        let p = self.base::<T>(b) as *const T;
        MatRef::from_raw_parts(p, self.m, self.n, self.rs, self.cs)
    }
}

/// Int32 vectors (`pivots`) or scalars (`info`) of a batch.
#[derive(Clone)]
struct Ints {
    ptr: usize,
    offs: Vec<isize>,
    len: usize,
    stride: isize,
}

impl Ints {
    fn of(t: &Strided, vector: bool, batch: usize, op: &str) -> Result<Ints, KernelError> {
        if t.dtype != DType::I32 {
            return Err(invalid(format!(
                "foo {op}: expected an int32 tensor, got {}",
                t.dtype.name()
            )));
        }
        let offs = batch_offsets(t, vector as usize)?;
        if offs.len() != batch {
            return Err(KernelError::ShapeMismatch(format!(
                "foo {op}: {} batch entries for {batch} matrices",
                offs.len()
            )));
        }
        let (len, stride) = if vector {
            (t.sizes[t.ndim() - 1], t.strides[t.ndim() - 1])
        } else {
            (1, 0)
        };
        Ok(Ints {
            ptr: t.ptr as usize,
            offs,
            len,
            stride,
        })
    }

    unsafe fn read(&self, b: usize, i: usize) -> i32 {
        *(self.ptr as *const i32).offset(self.offs[b] + i as isize * self.stride)
    }

    unsafe fn write(&self, b: usize, i: usize, v: i32) {
        *(self.ptr as *mut i32).offset(self.offs[b] + i as isize * self.stride) = v;
    }
}

/// Runs `f(b)` for every matrix of a batch of `count` matrices of order `n`:
/// in parallel when the batch has several matrices, else on this thread.
fn for_batch(
    count: usize,
    n: usize,
    f: impl Fn(usize) -> Result<(), KernelError> + Sync,
) -> Result<(), KernelError> {
    // A task per matrix; tiny matrices are grouped so a task does some work.
    let per_task = (4096 / (n * n * n).max(1)).clamp(1, 256);
    let tasks = count.div_ceil(per_task);
    let run = || {
        parallel::try_parallel_for(tasks, |t| {
            for b in t * per_task..((t + 1) * per_task).min(count) {
                f(b)?;
            }
            Ok(())
        })
    };
    // A panic inside faer (an assertion on a case this module did not
    // foresee) becomes an error of the op, not an abort of the caller.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(invalid(format!(
            "foo linalg: internal error in faer: {msg}"
        )))
    })
}

/// Calls `$f::<T>(args)` with `T` the element type of `$dtype`: float32 and
/// float64 only, the real types faer factorizes (torch.linalg takes no
/// 16-bit floats on CPU either); any other dtype gives `UnsupportedDtype`.
macro_rules! by_dtype {
    ($op:expr, $dtype:expr, $f:ident ( $($arg:expr),* )) => {
        $crate::dispatch_dtype!($dtype, [F32, F64], T => $f::<T>($($arg),*),
            d => Err($crate::kernels::KernelError::UnsupportedDtype { op: $op, dtype: d }))
    };
}

fn square(a: &Mats, op: &str) -> Result<(), KernelError> {
    if a.m != a.n {
        return Err(KernelError::ShapeMismatch(format!(
            "foo {op}: A must be batches of square matrices, but they are {} by {} matrices",
            a.m, a.n
        )));
    }
    Ok(())
}

/// Cholesky factorization in place: `a` holds the symmetric matrices (the
/// lower triangle is read, the upper one with `upper`) and receives `L`
/// (`U = L^T` with `upper`), the other triangle zeroed. `info[b]` is LAPACK's
/// potrf code: 0, or the order of the first leading minor that is not
/// positive definite (the factor is then partial, as LAPACK leaves it).
pub fn cholesky(a: &Strided, info: &Strided, upper: bool) -> Result<(), KernelError> {
    let mut m = Mats::of(a)?;
    square(&m, "linalg.cholesky")?;
    if upper {
        m = m.t();
    }
    let inf = Ints::of(info, false, m.offs.len(), "linalg.cholesky")?;
    by_dtype!("linalg_cholesky", a.dtype, cholesky_t(&m, &inf))
}

fn cholesky_t<T: Real>(a: &Mats, info: &Ints) -> Result<(), KernelError> {
    let n = a.n;
    let req = llt::cholesky_in_place_scratch::<T>(n, Par::Seq, Default::default());
    for_batch(a.offs.len(), n, |b| {
        // SAFETY: matrix b of an output the caller owns; one task per matrix.
        let mut mat = unsafe { a.get_mut::<T>(b) };
        let mut buf = MemBuffer::new(req);
        let r = llt::cholesky_in_place(
            mat.rb_mut(),
            Default::default(),
            Par::Seq,
            MemStack::new(&mut buf),
            Default::default(),
        );
        let code = match r {
            Ok(_) => 0,
            Err(llt::LltError::NonPositivePivot { index }) => index as i32 + 1,
        };
        for j in 1..n {
            for i in 0..j {
                mat[(i, j)] = T::zero();
            }
        }
        unsafe { info.write(b, 0, code) };
        Ok(())
    })
}

/// LU factorization with partial pivoting in place (LAPACK's getrf): `a`
/// (m x n) receives `L` (unit lower, below the diagonal) and `U`;
/// `pivots[b]` (min(m, n) entries) the 1-based rows swapped with each row in
/// turn; `info[b]` 0, or the 1-based index of the first exactly zero
/// diagonal element of `U` (the factorization is still completed, and as in
/// LAPACK a zero pivot column is not scaled).
pub fn lu_factor(a: &Strided, pivots: &Strided, info: &Strided) -> Result<(), KernelError> {
    let m = Mats::of(a)?;
    let piv = Ints::of(pivots, true, m.offs.len(), "linalg.lu_factor")?;
    let inf = Ints::of(info, false, m.offs.len(), "linalg.lu_factor")?;
    if piv.len != m.m.min(m.n) {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.lu_factor: pivots of length {} for {} by {} matrices",
            piv.len, m.m, m.n
        )));
    }
    by_dtype!("linalg_lu_factor", a.dtype, lu_factor_t(&m, &piv, &inf))
}

fn lu_factor_t<T: Real>(a: &Mats, piv: &Ints, info: &Ints) -> Result<(), KernelError> {
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let req = plu::lu_in_place_scratch::<usize, T>(m, n, Par::Seq, Default::default());
    for_batch(a.offs.len(), m.max(n), |b| {
        // SAFETY: matrix b of an output the caller owns; one task per matrix.
        let mut mat = unsafe { a.get_mut::<T>(b) };
        let saved: Vec<T> = (0..n)
            .flat_map(|j| (0..m).map(move |i| (i, j)))
            .map(|(i, j)| mat[(i, j)])
            .collect();
        let mut perm = vec![0usize; m];
        let mut perm_inv = vec![0usize; m];
        let mut buf = MemBuffer::new(req);
        plu::lu_in_place(
            mat.rb_mut(),
            &mut perm,
            &mut perm_inv,
            Par::Seq,
            MemStack::new(&mut buf),
            Default::default(),
        );
        let mut ipiv = swaps_of(&perm, k);
        let zero = (0..k).find(|&i| mat[(i, i)] == T::zero());
        if zero.is_some() {
            // faer divides by a zero pivot (inf/NaN below it); LAPACK skips
            // the scaling. Redo this matrix as LAPACK's getf2 does.
            for j in 0..n {
                for i in 0..m {
                    mat[(i, j)] = saved[j * m + i];
                }
            }
            ipiv = getf2(mat.rb_mut());
        }
        for (i, &p) in ipiv.iter().enumerate() {
            unsafe { piv.write(b, i, p as i32 + 1) };
        }
        let code = (0..k)
            .find(|&i| mat[(i, i)] == T::zero())
            .map_or(0, |i| i as i32 + 1);
        unsafe { info.write(b, 0, code) };
        Ok(())
    })
}

/// LAPACK's row swaps (0-based) that turn the identity into `perm` (row `i`
/// of the factored matrix is row `perm[i]` of the input): at step `i` the
/// row that belongs at `i` is found at or below `i` and swapped up.
fn swaps_of(perm: &[usize], k: usize) -> Vec<usize> {
    let m = perm.len();
    let mut at: Vec<usize> = (0..m).collect(); // row at each position
    let mut pos: Vec<usize> = (0..m).collect(); // position of each row
    let mut ipiv = Vec::with_capacity(k);
    for i in 0..k {
        let j = pos[perm[i]];
        ipiv.push(j);
        let (ri, rj) = (at[i], at[j]);
        at.swap(i, j);
        pos[ri] = j;
        pos[rj] = i;
    }
    ipiv
}

/// Unblocked LU with partial pivoting exactly as LAPACK's getf2: first
/// largest magnitude pivot, a zero pivot column left unscaled.
fn getf2<T: Real>(mut a: MatMut<'_, T>) -> Vec<usize> {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    let mut ipiv = Vec::with_capacity(k);
    for j in 0..k {
        let mut p = j;
        let mut best = a[(j, j)].abs();
        for i in j + 1..m {
            let v = a[(i, j)].abs();
            if v > best {
                best = v;
                p = i;
            }
        }
        ipiv.push(p);
        if a[(p, j)] != T::zero() {
            if p != j {
                for c in 0..n {
                    let t = a[(j, c)];
                    a[(j, c)] = a[(p, c)];
                    a[(p, c)] = t;
                }
            }
            let r = a[(j, j)].recip();
            for i in j + 1..m {
                a[(i, j)] *= r;
            }
        }
        for c in j + 1..n {
            let u = a[(j, c)];
            for i in j + 1..m {
                a[(i, c)] = a[(i, c)] - a[(i, j)] * u;
            }
        }
    }
    ipiv
}

fn check_pivots(piv: &Ints, b: usize, n: usize) -> Result<Vec<usize>, KernelError> {
    (0..piv.len)
        .map(|i| {
            let p = unsafe { piv.read(b, i) };
            if p < 1 || p as usize > n || i >= n {
                Err(invalid(format!(
                    "foo linalg.lu_solve: pivot {p} at position {i} is out of range for matrices of order {n}"
                )))
            } else {
                Ok(p as usize - 1)
            }
        })
        .collect()
}

/// Solves `A X = B` (or `A^T X = B` with `transpose`) in place in `b`
/// (`[..., n, k]`) from `A`'s LU factorization `lu` (`[..., n, n]`) and
/// `pivots` (LAPACK's getrs); all three of one batch shape (broadcast views
/// are fine for `lu` and `pivots`).
pub fn lu_solve(
    lu: &Strided,
    pivots: &Strided,
    b: &Strided,
    transpose: bool,
) -> Result<(), KernelError> {
    let a = Mats::of(lu)?;
    square(&a, "linalg.lu_solve")?;
    let x = Mats::of(b)?;
    if x.offs.len() != a.offs.len() || x.m != a.n || lu.dtype != b.dtype {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.lu_solve: LU {:?} ({}) and B {:?} ({}) do not match",
            lu.sizes,
            lu.dtype.name(),
            b.sizes,
            b.dtype.name()
        )));
    }
    let piv = Ints::of(pivots, true, a.offs.len(), "linalg.lu_solve")?;
    by_dtype!(
        "linalg_lu_solve",
        lu.dtype,
        lu_solve_t(&a, &piv, &x, transpose)
    )
}

fn swap_rows<T: Real>(x: &mut MatMut<'_, T>, i: usize, j: usize) {
    if i != j {
        for c in 0..x.ncols() {
            let t = x[(i, c)];
            x[(i, c)] = x[(j, c)];
            x[(j, c)] = t;
        }
    }
}

fn lu_solve_t<T: Real>(a: &Mats, piv: &Ints, x: &Mats, transpose: bool) -> Result<(), KernelError> {
    let n = a.n;
    if n == 0 || x.n == 0 {
        return Ok(()); // nothing to solve (faer's kernels want a non-empty right-hand side)
    }
    for_batch(a.offs.len(), n, |b| {
        let p = check_pivots(piv, b, n)?;
        // SAFETY: `lu` is read only; matrix b of `x` is this task's alone.
        let (f, mut xm) = unsafe { (a.get::<T>(b), x.get_mut::<T>(b)) };
        if !transpose {
            for (i, &r) in p.iter().enumerate() {
                swap_rows(&mut xm, i, r);
            }
            tri::solve_unit_lower_triangular_in_place(f, xm.rb_mut(), Par::Seq);
            tri::solve_upper_triangular_in_place(f, xm.rb_mut(), Par::Seq);
        } else {
            tri::solve_lower_triangular_in_place(f.transpose(), xm.rb_mut(), Par::Seq);
            tri::solve_unit_upper_triangular_in_place(f.transpose(), xm.rb_mut(), Par::Seq);
            for (i, &r) in p.iter().enumerate().rev() {
                swap_rows(&mut xm, i, r);
            }
        }
        Ok(())
    })
}

/// Solves `A X = B` in place in `b` for triangular `A` (its `upper` or lower
/// triangle is read; a unit diagonal assumed with `unit`): LAPACK's trsm.
/// A right-hand solve is this on the transposed views.
pub fn solve_triangular(
    a: &Strided,
    b: &Strided,
    upper: bool,
    unit: bool,
) -> Result<(), KernelError> {
    let am = Mats::of(a)?;
    square(&am, "linalg.solve_triangular")?;
    let x = Mats::of(b)?;
    if x.offs.len() != am.offs.len() || x.m != am.n || a.dtype != b.dtype {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.solve_triangular: A {:?} ({}) and B {:?} ({}) do not match",
            a.sizes,
            a.dtype.name(),
            b.sizes,
            b.dtype.name()
        )));
    }
    by_dtype!(
        "linalg_solve_triangular",
        a.dtype,
        trsm_t(&am, &x, upper, unit)
    )
}

fn trsm_t<T: Real>(a: &Mats, x: &Mats, upper: bool, unit: bool) -> Result<(), KernelError> {
    if a.n == 0 || x.n == 0 {
        return Ok(()); // nothing to solve (faer's kernels want a non-empty right-hand side)
    }
    for_batch(a.offs.len(), a.n, |b| {
        // SAFETY: `a` is read only; matrix b of `x` is this task's alone.
        let (t, mut xm) = unsafe { (a.get::<T>(b), x.get_mut::<T>(b)) };
        let xm = xm.rb_mut();
        match (upper, unit) {
            (false, false) => tri::solve_lower_triangular_in_place(t, xm, Par::Seq),
            (false, true) => tri::solve_unit_lower_triangular_in_place(t, xm, Par::Seq),
            (true, false) => tri::solve_upper_triangular_in_place(t, xm, Par::Seq),
            (true, true) => tri::solve_unit_upper_triangular_in_place(t, xm, Par::Seq),
        }
        Ok(())
    })
}

/// Determinants from LU factorizations (`lu` square, `pivots` LAPACK's):
/// `det[b]` = the product of `U`'s diagonal, negated for an odd number of
/// swaps; with `logabs`, `det` receives the sign (-1, 0, 1; NaN for NaN) and
/// `logabs` log|det| (-inf for a singular matrix), as torch's slogdet.
pub fn lu_det(
    lu: &Strided,
    pivots: &Strided,
    det: &Strided,
    logabs: Option<&Strided>,
) -> Result<(), KernelError> {
    let a = Mats::of(lu)?;
    square(&a, "linalg.det")?;
    let count = a.offs.len();
    let piv = Ints::of(pivots, true, count, "linalg.det")?;
    let d = batch_offsets(det, 0)?;
    let l = logabs.map(|t| batch_offsets(t, 0)).transpose()?;
    if d.len() != count
        || l.as_ref().is_some_and(|l| l.len() != count)
        || det.dtype != lu.dtype
        || logabs.is_some_and(|t| t.dtype != lu.dtype)
    {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.det: outputs do not match LU {:?}",
            lu.sizes
        )));
    }
    let outs = (det.ptr as usize, d, logabs.map(|t| t.ptr as usize), l);
    by_dtype!("linalg_det", lu.dtype, det_t(&a, &piv, &outs))
}

type DetOuts = (usize, Vec<isize>, Option<usize>, Option<Vec<isize>>);

fn det_t<T: Real>(a: &Mats, piv: &Ints, outs: &DetOuts) -> Result<(), KernelError> {
    let n = a.n;
    let (dp, doffs, lp, loffs) = outs;
    for_batch(a.offs.len(), n, |b| {
        let f = unsafe { a.get::<T>(b) };
        let swaps = (0..n)
            .filter(|&i| unsafe { piv.read(b, i) } != i as i32 + 1)
            .count();
        let odd = swaps % 2 == 1;
        let dst = unsafe { (*dp as *mut T).offset(doffs[b]) };
        match (lp, loffs) {
            (Some(lp), Some(lo)) => {
                let mut sign = if odd { -T::one() } else { T::one() };
                let mut log = T::zero();
                for i in 0..n {
                    let v = f[(i, i)];
                    // signum(0) is 1; NaN's is NaN.
                    sign = if v == T::zero() {
                        T::zero()
                    } else {
                        sign * v.signum()
                    };
                    log += v.abs().ln();
                }
                unsafe {
                    *dst = sign;
                    *(*lp as *mut T).offset(lo[b]) = log;
                }
            }
            _ => {
                let mut p = if odd { -T::one() } else { T::one() };
                for i in 0..n {
                    p *= f[(i, i)];
                }
                unsafe { *dst = p };
            }
        }
        Ok(())
    })
}

/// Unpacks LU factorizations (LAPACK's, `[..., m, n]`, with `pivots`) into
/// `P` (`[..., m, m]`, `A = P L U`; skipped when absent), `L`
/// (`[..., m, k]`, unit lower) and `U` (`[..., k, n]`), k = min(m, n) (torch's
/// lu_unpack / linalg.lu).
pub fn lu_unpack(
    lu: &Strided,
    pivots: Option<&Strided>,
    p: Option<&Strided>,
    l: Option<&Strided>,
    u: Option<&Strided>,
) -> Result<(), KernelError> {
    let a = Mats::of(lu)?;
    let k = a.m.min(a.n);
    let count = a.offs.len();
    let shape_ok = |t: Option<&Strided>, r: usize, c: usize| -> Result<Option<Mats>, KernelError> {
        t.map(|t| {
            let v = Mats::of(t)?;
            if v.offs.len() != count || v.m != r || v.n != c || t.dtype != lu.dtype {
                return Err(KernelError::ShapeMismatch(format!(
                    "foo lu_unpack: output {:?} ({}) for LU {:?}",
                    t.sizes,
                    t.dtype.name(),
                    lu.sizes
                )));
            }
            Ok(v)
        })
        .transpose()
    };
    let pm = shape_ok(p, a.m, a.m)?;
    let lm = shape_ok(l, a.m, k)?;
    let um = shape_ok(u, k, a.n)?;
    let piv = match (pm.is_some(), pivots) {
        (true, Some(t)) => Some(Ints::of(t, true, count, "lu_unpack")?),
        (true, None) => return Err(invalid("foo lu_unpack: P needs the pivots".into())),
        _ => None,
    };
    by_dtype!(
        "lu_unpack",
        lu.dtype,
        unpack_t(&a, piv.as_ref(), pm.as_ref(), lm.as_ref(), um.as_ref())
    )
}

fn unpack_t<T: Real>(
    a: &Mats,
    piv: Option<&Ints>,
    p: Option<&Mats>,
    l: Option<&Mats>,
    u: Option<&Mats>,
) -> Result<(), KernelError> {
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    for_batch(a.offs.len(), m.max(n), |b| {
        let f = unsafe { a.get::<T>(b) };
        if let Some(l) = l {
            let mut lm = unsafe { l.get_mut::<T>(b) };
            for j in 0..k {
                for i in 0..m {
                    lm[(i, j)] = match i.cmp(&j) {
                        std::cmp::Ordering::Less => T::zero(),
                        std::cmp::Ordering::Equal => T::one(),
                        std::cmp::Ordering::Greater => f[(i, j)],
                    };
                }
            }
        }
        if let Some(u) = u {
            let mut um = unsafe { u.get_mut::<T>(b) };
            for j in 0..n {
                for i in 0..k {
                    um[(i, j)] = if i <= j { f[(i, j)] } else { T::zero() };
                }
            }
        }
        if let (Some(p), Some(piv)) = (p, piv) {
            let swaps = check_pivots(piv, b, m)?;
            let mut perm: Vec<usize> = (0..m).collect();
            for (i, &r) in swaps.iter().enumerate() {
                perm.swap(i, r);
            }
            let mut pm = unsafe { p.get_mut::<T>(b) };
            for j in 0..m {
                for i in 0..m {
                    pm[(i, j)] = T::zero();
                }
            }
            for (i, &r) in perm.iter().enumerate() {
                pm[(r, i)] = T::one();
            }
        }
        Ok(())
    })
}

/// QR factorization (LAPACK's geqrf + orgqr; Householder reflections with
/// LAPACK's sign convention, so `R`'s diagonal signs are CPU's): `a`
/// (`[..., m, n]`, overwritten: a scratch copy of the input) is factored,
/// `r` (`[..., kr, n]`, kr = min(m, n) or m) receives `R`, and `q` (when
/// given, `[..., m, mq]`, mq = min(m, n) or m) the first mq columns of `Q`.
pub fn qr(a: &Strided, q: Option<&Strided>, r: &Strided) -> Result<(), KernelError> {
    let am = Mats::of(a)?;
    let rm = Mats::of(r)?;
    let qm = q.map(Mats::of).transpose()?;
    let count = am.offs.len();
    let bad_q = qm
        .as_ref()
        .is_some_and(|qm| qm.offs.len() != count || qm.m != am.m || qm.n < am.m.min(am.n));
    if rm.offs.len() != count || rm.n != am.n || rm.m > am.m || bad_q {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.qr: outputs do not match A {:?}",
            a.sizes
        )));
    }
    by_dtype!("linalg_qr", a.dtype, qr_t(&am, qm.as_ref(), &rm))
}

fn qr_t<T: Real>(a: &Mats, q: Option<&Mats>, r: &Mats) -> Result<(), KernelError> {
    use faer::linalg::householder as hh;
    use faer::linalg::qr::no_pivoting::factor as qrf;
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let bs = qrf::recommended_block_size::<T>(m, n).max(1);
    let mq = q.map_or(0, |q| q.n);
    let req = qrf::qr_in_place_scratch::<T>(m, n, bs, Par::Seq, Default::default())
        .or(hh::apply_block_householder_sequence_on_the_left_in_place_scratch::<T>(m, bs, mq));
    for_batch(a.offs.len(), m.max(n), |b| {
        // SAFETY: the scratch `a` and the outputs are this task's matrices alone.
        let mut f = unsafe { a.get_mut::<T>(b) };
        let mut coeff = faer::Mat::<T>::zeros(bs, k);
        let mut buf = MemBuffer::new(req);
        if k > 0 {
            qrf::qr_in_place(
                f.rb_mut(),
                coeff.as_mut(),
                Par::Seq,
                MemStack::new(&mut buf),
                Default::default(),
            );
        }
        let mut rr = unsafe { r.get_mut::<T>(b) };
        for j in 0..n {
            for i in 0..r.m {
                rr[(i, j)] = if i <= j { f[(i, j)] } else { T::zero() };
            }
        }
        if let Some(q) = q {
            let mut qq = unsafe { q.get_mut::<T>(b) };
            for j in 0..q.n {
                for i in 0..m {
                    qq[(i, j)] = if i == j { T::one() } else { T::zero() };
                }
            }
            if k > 0 {
                hh::apply_block_householder_sequence_on_the_left_in_place_with_conj(
                    f.rb().get(.., ..k),
                    coeff.as_ref(),
                    faer::Conj::No,
                    qq.rb_mut(),
                    Par::Seq,
                    MemStack::new(&mut buf),
                );
            }
        }
        Ok(())
    })
}

fn write_info(info: &Ints, b: usize, code: i32) {
    unsafe { info.write(b, 0, code) };
}

fn vectors_of(
    t: &Strided,
    count: usize,
    len: usize,
    op: &str,
) -> Result<(usize, Vec<isize>, isize), KernelError> {
    let offs = batch_offsets(t, 1)?;
    if offs.len() != count || t.sizes[t.ndim() - 1] != len {
        return Err(KernelError::ShapeMismatch(format!(
            "foo {op}: {:?} does not hold {count} vectors of {len} values",
            t.sizes
        )));
    }
    Ok((t.ptr as usize, offs, t.strides[t.ndim() - 1]))
}

/// Eigen-decomposition of symmetric matrices (LAPACK's syevd): the lower
/// triangle of `a` is read (pass the transposed view for the upper one);
/// eigenvalues in ascending order into `w` (`[..., n]`), eigenvectors into
/// the columns of `v` when given; `info[b]` is 1 when the iteration did not
/// converge (0 otherwise). Eigenvectors are unique up to sign only.
pub fn eigh(
    a: &Strided,
    w: &Strided,
    v: Option<&Strided>,
    info: &Strided,
) -> Result<(), KernelError> {
    let am = Mats::of(a)?;
    square(&am, "linalg.eigh")?;
    let count = am.offs.len();
    let wv = vectors_of(w, count, am.n, "linalg.eigh")?;
    let vm = v.map(Mats::of).transpose()?;
    if vm
        .as_ref()
        .is_some_and(|v| v.offs.len() != count || v.m != am.n || v.n != am.n)
        || w.dtype != a.dtype
    {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.eigh: outputs do not match A {:?}",
            a.sizes
        )));
    }
    let inf = Ints::of(info, false, count, "linalg.eigh")?;
    by_dtype!("linalg_eigh", a.dtype, eigh_t(&am, &wv, vm.as_ref(), &inf))
}

fn eigh_t<T: Real>(
    a: &Mats,
    w: &(usize, Vec<isize>, isize),
    v: Option<&Mats>,
    info: &Ints,
) -> Result<(), KernelError> {
    use faer::linalg::evd;
    let n = a.n;
    let want = if v.is_some() {
        evd::ComputeEigenvectors::Yes
    } else {
        evd::ComputeEigenvectors::No
    };
    if n == 0 {
        // Nothing to decompose (faer's evd and its scratch size underflow
        // `n - 1` on it, and `w` may sit in an empty storage whose pointer
        // is null).
        (0..a.offs.len()).for_each(|b| write_info(info, b, 0));
        return Ok(());
    }
    let req = evd::self_adjoint_evd_scratch::<T>(n, want, Par::Seq, Default::default());
    for_batch(a.offs.len(), n, |b| {
        // SAFETY: `a` is read only; the outputs' matrices are this task's alone.
        let am = unsafe { a.get::<T>(b) };
        let wp = unsafe { (w.0 as *mut T).offset(w.1[b]) };
        let s = unsafe { faer::ColMut::<T>::from_raw_parts_mut(wp, n, w.2) };
        let u = v.map(|v| unsafe { v.get_mut::<T>(b) });
        let mut buf = MemBuffer::new(req);
        let ok = (0..n).all(|j| (j..n).all(|i| am[(i, j)].is_finite()))
            && evd::self_adjoint_evd(
                am,
                s.as_diagonal_mut(),
                u,
                Par::Seq,
                MemStack::new(&mut buf),
                Default::default(),
            )
            .is_ok();
        write_info(info, b, !ok as i32);
        Ok(())
    })
}

/// Singular value decomposition (LAPACK's gesdd): singular values in
/// descending order into `s` (`[..., k]`, k = min(m, n)); when given, the
/// left singular vectors into `u` (`[..., m, k]` or `[..., m, m]`) and the
/// right ones, transposed, into `vh` (`[..., k, n]` or `[..., n, n]`);
/// `info[b]` -4 when the input holds non-finite values (ATen's code for
/// it), 1 when the iteration did not converge. Singular vectors are unique up to sign (per pair) only.
pub fn svd(
    a: &Strided,
    s: &Strided,
    u: Option<&Strided>,
    vh: Option<&Strided>,
    info: &Strided,
) -> Result<(), KernelError> {
    let am = Mats::of(a)?;
    let count = am.offs.len();
    let k = am.m.min(am.n);
    let sv = vectors_of(s, count, k, "linalg.svd")?;
    let um = u.map(Mats::of).transpose()?;
    let vm = vh.map(|t| Mats::of(t).map(Mats::t)).transpose()?;
    let cols_ok =
        |x: &Mats, rows: usize| x.offs.len() == count && x.m == rows && (x.n == k || x.n == rows);
    if um.as_ref().is_some_and(|x| !cols_ok(x, am.m))
        || vm.as_ref().is_some_and(|x| !cols_ok(x, am.n))
        || um.is_some() != vm.is_some()
        || s.dtype != a.dtype
    {
        return Err(KernelError::ShapeMismatch(format!(
            "foo linalg.svd: outputs do not match A {:?}",
            a.sizes
        )));
    }
    let inf = Ints::of(info, false, count, "linalg.svd")?;
    by_dtype!(
        "linalg_svd",
        a.dtype,
        svd_t(&am, &sv, um.as_ref(), vm.as_ref(), &inf)
    )
}

fn svd_t<T: Real>(
    a: &Mats,
    sv: &(usize, Vec<isize>, isize),
    u: Option<&Mats>,
    v: Option<&Mats>,
    info: &Ints,
) -> Result<(), KernelError> {
    use faer::linalg::svd as fsvd;
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let mode = |x: Option<&Mats>, rows: usize| match x {
        None => fsvd::ComputeSvdVectors::No,
        Some(x) if x.n == rows && rows != k => fsvd::ComputeSvdVectors::Full,
        Some(_) => fsvd::ComputeSvdVectors::Thin,
    };
    let (mu, mv) = (mode(u, m), mode(v, n));
    let req = fsvd::svd_scratch::<T>(m, n, mu, mv, Par::Seq, Default::default());
    for_batch(a.offs.len(), m.max(n), |b| {
        if k == 0 {
            // No singular values; `s` may sit in an empty storage whose
            // pointer is null, which a faer view must not hold. (The Python
            // kernel fills full_matrices' identities itself.)
            write_info(info, b, 0);
            return Ok(());
        }
        // SAFETY: `a` is read only; the outputs' matrices are this task's alone.
        let am = unsafe { a.get::<T>(b) };
        let sp = unsafe { (sv.0 as *mut T).offset(sv.1[b]) };
        let s = unsafe { faer::ColMut::<T>::from_raw_parts_mut(sp, k, sv.2) };
        // faer's full U / V extend the thin ones in place: start from zeros.
        let mut uu = u.map(|x| unsafe { x.get_mut::<T>(b) });
        let mut vv = v.map(|x| unsafe { x.get_mut::<T>(b) });
        for x in [uu.as_mut(), vv.as_mut()].into_iter().flatten() {
            x.fill(T::zero());
        }
        let mut buf = MemBuffer::new(req);
        let finite = (0..n).all(|j| (0..m).all(|i| am[(i, j)].is_finite()));
        let ok = !finite
            || fsvd::svd(
                am,
                s.as_diagonal_mut(),
                uu,
                vv,
                Par::Seq,
                MemStack::new(&mut buf),
                Default::default(),
            )
            .is_ok();
        // LAPACK's codes as ATen reads them: -4 for a non-finite input.
        write_info(info, b, if !finite { -4 } else { !ok as i32 });
        Ok(())
    })
}

// (After `by_dtype!`: a macro_rules macro is visible to the modules that
// follow its definition.)
mod expm;
mod householder;
pub use expm::matrix_exp;
pub use householder::{geqrf, householder_product, ormqr};

#[cfg(test)]
mod tests {
    use super::*;

    fn view(v: &mut [f64], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F64, sizes)
    }

    fn ints(v: &mut [i32], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::I32, sizes)
    }

    #[test]
    fn cholesky_info_is_the_failing_minor() {
        // [[4, 2], [2, 1]]: the second leading minor is 0.
        let mut a = [4.0, 2.0, 2.0, 1.0];
        let mut info = [7];
        cholesky(&view(&mut a, &[2, 2]), &ints(&mut info, &[]), false).unwrap();
        assert_eq!(info[0], 2);
        let mut a = [4.0, 2.0, 2.0, 5.0];
        cholesky(&view(&mut a, &[2, 2]), &ints(&mut info, &[]), false).unwrap();
        assert_eq!((info[0], a), (0, [2.0, 0.0, 1.0, 2.0]));
    }

    #[test]
    fn lu_pivots_follow_lapack_and_singular_columns_stay_unscaled() {
        // Row 2 has the largest first entry: pivots [2, 2].
        let mut a = [1.0, 2.0, 3.0, 4.0];
        let (mut piv, mut info) = ([0; 2], [9]);
        lu_factor(
            &view(&mut a, &[2, 2]),
            &ints(&mut piv, &[2]),
            &ints(&mut info, &[]),
        )
        .unwrap();
        assert_eq!((piv, info[0]), ([2, 2], 0));
        assert_eq!(a, [3.0, 4.0, 1.0 / 3.0, 2.0 - 4.0 / 3.0]);
        // A zero first column: no swap, info 1, finite factors.
        let mut a = [0.0, 1.0, 0.0, 2.0];
        lu_factor(
            &view(&mut a, &[2, 2]),
            &ints(&mut piv, &[2]),
            &ints(&mut info, &[]),
        )
        .unwrap();
        assert_eq!(info[0], 1);
        assert!(a.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn swaps_rebuild_the_permutation() {
        let perm = [2usize, 0, 3, 1];
        let s = swaps_of(&perm, 4);
        let mut p: Vec<usize> = (0..4).collect();
        for (i, &r) in s.iter().enumerate() {
            p.swap(i, r);
        }
        assert_eq!(p, perm);
    }
}
