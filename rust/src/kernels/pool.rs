//! Pooling over 2 or 3 spatial dims: max pooling (with indices) and
//! average pooling with their backward, adaptive average and max pooling and
//! their backward.
//!
//! The kernels work on 5-d views `[batch, channels, depth, height, width]`
//! with any strides (NCDHW or channels-last need no copy); the 2-d entries
//! see a 4-d view as depth 1 (a window of depth 1), so both share one loop
//! nest. Planes `(batch, channel)` are independent and are split over
//! threads, so results do not depend on the thread count. Averages and
//! gradients accumulate in float64. Indices are flat within a plane
//! (`(d * H + h) * W + w`; `h * W + w` in 2-d), as ATen's.

use super::norm::{ld, st};
use super::reduce::par_min;
use super::{KernelError, Strided};
use crate::dtype::DType;

/// Kernel, stride, padding and dilation of a 2-d window (height, width).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

/// Kernel, stride, padding and dilation of a 3-d window (depth, height, width).
#[derive(Clone, Copy, Debug)]
pub struct Window3 {
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
}

impl From<Window> for Window3 {
    /// The 2-d window as a 3-d one of depth 1.
    fn from(w: Window) -> Window3 {
        let lift = |v: [usize; 2], d: usize| [d, v[0], v[1]];
        Window3 {
            kernel: lift(w.kernel, 1),
            stride: lift(w.stride, 1),
            padding: lift(w.padding, 0),
            dilation: lift(w.dilation, 1),
        }
    }
}

fn check_dims(op: &str, what: &str, s: &Strided, n: usize) -> Result<(), KernelError> {
    if s.ndim() != n {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must be a {n}-d view, got {:?}",
            s.sizes
        )));
    }
    Ok(())
}

/// Each 4-d view, checked, as a 5-d view of depth 1.
fn lift<const K: usize>(
    op: &str,
    views: [(&str, &Strided); K],
) -> Result<[Strided; K], KernelError> {
    let mut r = Vec::with_capacity(K);
    for (what, s) in views {
        check_dims(op, what, s, 4)?;
        let mut t = s.clone();
        t.sizes.insert(2, 1);
        t.strides.insert(2, 0);
        r.push(t);
    }
    Ok(r.try_into().unwrap_or_else(|_| unreachable!()))
}

fn check5(op: &str, views: &[(&str, &Strided)]) -> Result<(), KernelError> {
    views.iter().try_for_each(|(w, s)| check_dims(op, w, s, 5))
}

fn same_planes(op: &str, a: &Strided, b: &Strided) -> Result<(), KernelError> {
    if a.sizes[..2] != b.sizes[..2] {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: batch and channels differ: {:?} and {:?}",
            a.sizes, b.sizes
        )));
    }
    Ok(())
}

#[inline(always)]
fn off(s: &Strided, n: usize, c: usize, [d, h, w]: [usize; 3]) -> isize {
    n as isize * s.strides[0]
        + c as isize * s.strides[1]
        + d as isize * s.strides[2]
        + h as isize * s.strides[3]
        + w as isize * s.strides[4]
}

/// The spatial sizes of a 5-d view.
#[inline(always)]
fn dhw(s: &Strided) -> [usize; 3] {
    [s.sizes[2], s.sizes[3], s.sizes[4]]
}

/// Every position of a `[d, h, w]` box, in row-major order. A counter, not
/// nested `flat_map`s: LLVM does not flatten those, and the 2-d pooling
/// loops ran 1.3-2.6x slower through them.
struct Positions {
    dims: [usize; 3],
    cur: [usize; 3],
    left: usize,
}

impl Iterator for Positions {
    type Item = [usize; 3];

    #[inline(always)]
    fn next(&mut self) -> Option<[usize; 3]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.cur;
        self.cur[2] += 1;
        if self.cur[2] == self.dims[2] {
            self.cur[2] = 0;
            self.cur[1] += 1;
            if self.cur[1] == self.dims[1] {
                self.cur[1] = 0;
                self.cur[0] += 1;
            }
        }
        Some(p)
    }
}

/// Every output position of a 5-d view's plane, in row-major order.
#[inline(always)]
fn positions(dims: [usize; 3]) -> Positions {
    Positions {
        dims,
        cur: [0; 3],
        left: dims.iter().product(),
    }
}

/// Runs `f(n, c)` for every plane, in parallel when the work is large.
fn planes(
    s: &Strided,
    work: usize,
    f: impl Fn(usize, usize) -> Result<(), KernelError> + Sync + Send,
) -> Result<(), KernelError> {
    let (nb, nc) = (s.sizes[0], s.sizes[1]);
    let total = nb * nc;
    let g = |p: usize| f(p / nc.max(1), p % nc.max(1));
    if work > par_min() && total > 1 {
        super::parallel::try_for_range(total, 1, g)
    } else {
        (0..total).try_for_each(g)
    }
}

/// The input positions a dilated window starting at `start` reads along one
/// dim of size `len`: first (the first non-negative), end, step.
#[inline(always)]
fn taps(start: isize, k: isize, dil: isize, len: isize) -> (isize, isize, isize) {
    let mut a = start;
    let end = (start + (k - 1) * dil + 1).min(len);
    while a < 0 {
        a += dil;
    }
    (a, end, dil)
}

/// Max pooling (2-d) of `x` into `out` with the flat (`h * W + w`) index of
/// each maximum in `indices` (int64). NaN wins (as on CPU).
pub fn max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window,
) -> Result<(), KernelError> {
    let [o, i, x] = lift(
        "max_pool2d_with_indices",
        [("output", out), ("indices", indices), ("input", x)],
    )?;
    max_pool(
        "max_pool2d_with_indices",
        "max_pool2d",
        &o,
        &i,
        &x,
        win.into(),
    )
}

/// Max pooling (3-d) of `x` into `out` with the flat index of each maximum
/// in `indices` (int64). NaN wins (as on CPU).
pub fn max_pool3d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window3,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool3d_with_indices";
    check5(OP, &[("output", out), ("indices", indices), ("input", x)])?;
    max_pool(OP, "max_pool3d", out, indices, x, win)
}

fn max_pool(
    op: &str,
    dtype_op: &'static str,
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window3,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: indices must be int64 like the output"
        )));
    }
    if x.dtype == DType::Bool {
        return Err(KernelError::UnsupportedDtype {
            op: dtype_op,
            dtype: x.dtype,
        });
    }
    let [id, ih, iw] = dhw(x).map(|v| v as isize);
    let k = win.kernel.map(|v| v as isize);
    let s = win.stride.map(|v| v as isize);
    let p = win.padding.map(|v| v as isize);
    let dl = win.dilation.map(|v| v.max(1) as isize);
    let work = out.numel() * win.kernel.iter().product::<usize>();
    planes(out, work, |n, c| {
        for pos in positions(dhw(out)) {
            let [od, oh, ow] = pos.map(|v| v as isize);
            let (d0, d1, sd) = taps(od * s[0] - p[0], k[0], dl[0], id);
            let (h0, h1, sh) = taps(oh * s[1] - p[1], k[1], dl[1], ih);
            let (w0, w1, sw) = taps(ow * s[2] - p[2], k[2], dl[2], iw);
            let mut best = (d0 * ih + h0) * iw + w0;
            let mut bestv = f64::NEG_INFINITY;
            let mut bo: Option<isize> = None;
            let mut d = d0;
            while d < d1 {
                let mut h = h0;
                while h < h1 {
                    let mut w = w0;
                    while w < w1 {
                        let o = off(x, n, c, [d as usize, h as usize, w as usize]);
                        let v = ld(x, o);
                        if v > bestv || v.is_nan() {
                            bestv = v;
                            best = (d * ih + h) * iw + w;
                            bo = Some(o);
                        }
                        w += sw;
                    }
                    h += sh;
                }
                d += sd;
            }
            let oo = off(out, n, c, pos);
            match bo {
                // Copy the element itself (no rounding).
                Some(o) => copy_elem(out, oo, x, o),
                None => st(out, oo, f64::NEG_INFINITY),
            }
            // SAFETY: inside the indices view.
            unsafe { *(indices.ptr as *mut i64).offset(off(indices, n, c, pos)) = best as i64 };
        }
        Ok(())
    })
}

#[inline(always)]
fn copy_elem(dst: &Strided, d: isize, src: &Strided, s: isize) {
    let sz = src.dtype.size();
    // SAFETY: same dtype, offsets inside both views.
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.ptr.offset(s * sz as isize),
            dst.ptr.offset(d * sz as isize),
            sz,
        )
    };
}

/// Stores a plane's gradient, accumulated in float64.
fn store_plane(gi: &Strided, n: usize, c: usize, acc: &[f64]) {
    for (k, pos) in positions(dhw(gi)).enumerate() {
        st(gi, off(gi, n, c, pos), acc[k]);
    }
}

/// Gradient of [`max_pool2d`] and [`adaptive_max_pool2d`]:
/// `grad_input[idx] += grad_output` per plane.
pub fn max_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool2d_with_indices_backward";
    let [gi, go, i] = lift(
        OP,
        [
            ("grad_input", grad_input),
            ("grad_output", grad_output),
            ("indices", indices),
        ],
    )?;
    max_pool_backward(OP, "max_pool2d_backward", &gi, &go, &i)
}

/// Gradient of [`max_pool3d`] and [`adaptive_max_pool3d`].
pub fn max_pool3d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool3d_with_indices_backward";
    check5(
        OP,
        &[
            ("grad_input", grad_input),
            ("grad_output", grad_output),
            ("indices", indices),
        ],
    )?;
    max_pool_backward(OP, "max_pool3d_backward", grad_input, grad_output, indices)
}

fn max_pool_backward(
    op: &str,
    dtype_op: &'static str,
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    same_planes(op, grad_input, grad_output)?;
    if indices.sizes != grad_output.sizes || indices.dtype != DType::I64 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: expected int64 indices of shape {:?}, got {:?} of {}",
            grad_output.sizes,
            indices.sizes,
            indices.dtype.name()
        )));
    }
    if !grad_input.dtype.is_floating() || grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: dtype_op,
            dtype: grad_output.dtype,
        });
    }
    let plane: usize = dhw(grad_input).iter().product();
    planes(
        grad_input,
        grad_input.numel() + grad_output.numel(),
        |n, c| {
            let mut acc = vec![0.0f64; plane];
            for pos in positions(dhw(grad_output)) {
                // SAFETY: inside the indices view.
                let i = unsafe { *(indices.ptr as *const i64).offset(off(indices, n, c, pos)) };
                if i < 0 || i as usize >= plane {
                    return Err(KernelError::InvalidArgument(format!(
                        "foo: {op}: index {i} out of range for a plane of {plane} elements"
                    )));
                }
                acc[i as usize] += ld(grad_output, off(grad_output, n, c, pos));
            }
            store_plane(grad_input, n, c, &acc);
            Ok(())
        },
    )
}

/// One average-pooling window: the clipped `[lo, hi)` range per dim and its divisor.
#[inline(always)]
fn avg_window(
    pos: [usize; 3],
    input: [usize; 3],
    win: &Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> ([(isize, isize); 3], f64) {
    let mut r = [(0isize, 0isize); 3];
    let (mut pool, mut valid) = (1isize, 1isize);
    for k in 0..3 {
        let (s, p, kk) = (
            win.stride[k] as isize,
            win.padding[k] as isize,
            win.kernel[k] as isize,
        );
        let lo = pos[k] as isize * s - p;
        let hi = (lo + kk).min(input[k] as isize + p);
        pool *= hi - lo;
        let (lo, hi) = (lo.max(0), hi.min(input[k] as isize));
        valid *= (hi - lo).max(0);
        r[k] = (lo, hi);
    }
    let div = match divisor {
        Some(d) => d as f64,
        None if count_include_pad => pool as f64,
        None => valid as f64,
    };
    (r, div)
}

/// A clipped window's `[lo, hi)` along one dim as indices (empty when
/// `hi <= lo`).
#[inline(always)]
fn span((lo, hi): (isize, isize)) -> std::ops::Range<usize> {
    let lo = lo.max(0);
    lo as usize..hi.max(lo) as usize
}

/// The positions of a clipped window, in row-major order.
#[inline(always)]
fn window_positions(r: [(isize, isize); 3]) -> impl Iterator<Item = [usize; 3]> {
    positions([0, 1, 2].map(|k| (r[k].1 - r[k].0).max(0) as usize))
        .map(move |q| [0, 1, 2].map(|k| q[k] + r[k].0 as usize))
}

/// Average pooling (2-d) of `x` into `out` (ATen's rules for padding,
/// `count_include_pad` and `divisor_override`; integers truncate, as CPU).
pub fn avg_pool2d(
    out: &Strided,
    x: &Strided,
    win: Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool2d";
    let [o, x] = lift(OP, [("output", out), ("input", x)])?;
    if x.dtype == DType::Bool {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: x.dtype,
        });
    }
    avg_pool(OP, &o, &x, win.into(), count_include_pad, divisor)
}

/// Average pooling (3-d) of `x` into `out` (float32, float64 and int64, as
/// CPU).
pub fn avg_pool3d(
    out: &Strided,
    x: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool3d";
    check5(OP, &[("output", out), ("input", x)])?;
    if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I64) {
        return Err(KernelError::UnsupportedDtype {
            op: "avg_pool3d_out_frame",
            dtype: x.dtype,
        });
    }
    avg_pool(OP, out, x, win, count_include_pad, divisor)
}

fn avg_pool(
    op: &'static str,
    out: &Strided,
    x: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op,
            dtype: out.dtype,
        });
    }
    let int = !x.dtype.is_floating();
    let input = dhw(x);
    let work = out.numel() * win.kernel.iter().product::<usize>();
    planes(out, work, |n, c| {
        for pos in positions(dhw(out)) {
            let (r, div) = avg_window(pos, input, &win, count_include_pad, divisor);
            let oo = off(out, n, c, pos);
            if r.iter().any(|&(lo, hi)| lo >= hi) {
                st(out, oo, 0.0);
                continue;
            }
            let mut s = 0.0;
            for d in span(r[0]) {
                for h in span(r[1]) {
                    for w in span(r[2]) {
                        s += ld(x, off(x, n, c, [d, h, w]));
                    }
                }
            }
            st(out, oo, if int { (s / div).trunc() } else { s / div });
        }
        Ok(())
    })
}

/// Gradient of [`avg_pool2d`].
pub fn avg_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool2d_backward";
    let [gi, go] = lift(
        OP,
        [("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    avg_pool_backward(OP, &gi, &go, win.into(), count_include_pad, divisor)
}

/// Gradient of [`avg_pool3d`].
pub fn avg_pool3d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool3d_backward";
    check5(
        OP,
        &[("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    avg_pool_backward(OP, grad_input, grad_output, win, count_include_pad, divisor)
}

fn avg_pool_backward(
    op: &'static str,
    grad_input: &Strided,
    grad_output: &Strided,
    win: Window3,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    same_planes(op, grad_input, grad_output)?;
    if !grad_input.dtype.is_floating() || grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op,
            dtype: grad_output.dtype,
        });
    }
    let input = dhw(grad_input);
    let [_, ih, iw] = input;
    planes(
        grad_input,
        grad_output.numel() * win.kernel.iter().product::<usize>(),
        |n, c| {
            let mut acc = vec![0.0f64; input.iter().product()];
            for pos in positions(dhw(grad_output)) {
                let (r, div) = avg_window(pos, input, &win, count_include_pad, divisor);
                let g = ld(grad_output, off(grad_output, n, c, pos)) / div;
                for d in span(r[0]) {
                    for h in span(r[1]) {
                        for w in span(r[2]) {
                            acc[(d * ih + h) * iw + w] += g;
                        }
                    }
                }
            }
            store_plane(grad_input, n, c, &acc);
            Ok(())
        },
    )
}

#[inline(always)]
fn adaptive_range(o: usize, osize: usize, isize_: usize) -> (usize, usize) {
    let start = (o * isize_) / osize;
    let end = ((o + 1) * isize_).div_ceil(osize);
    (start, end)
}

/// The input window of adaptive pooling's output position `pos`.
#[inline(always)]
fn adaptive_window(pos: [usize; 3], out: [usize; 3], input: [usize; 3]) -> [(isize, isize); 3] {
    [0, 1, 2].map(|k| {
        let (a, b) = adaptive_range(pos[k], out[k], input[k]);
        (a as isize, b as isize)
    })
}

fn window_len(r: &[(isize, isize); 3]) -> f64 {
    r.iter().map(|&(a, b)| (b - a) as f64).product()
}

/// Adaptive average pooling of `x` into `out` (the output's height and width
/// are the target sizes).
pub fn adaptive_avg_pool2d(out: &Strided, x: &Strided) -> Result<(), KernelError> {
    const OP: &str = "adaptive_avg_pool2d";
    let [out, x] = lift(OP, [("output", out), ("input", x)])?;
    same_planes(OP, &x, &out)?;
    if !x.dtype.is_floating() || out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: x.dtype,
        });
    }
    let (input, osz) = (dhw(&x), dhw(&out));
    planes(&out, x.numel() + out.numel(), |n, c| {
        for pos in positions(osz) {
            let r = adaptive_window(pos, osz, input);
            let mut s = 0.0;
            for q in window_positions(r) {
                s += ld(&x, off(&x, n, c, q));
            }
            st(&out, off(&out, n, c, pos), s / window_len(&r));
        }
        Ok(())
    })
}

/// Gradient of [`adaptive_avg_pool2d`].
pub fn adaptive_avg_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_avg_pool2d_backward";
    let [gi, go] = lift(
        OP,
        [("grad_input", grad_input), ("grad_output", grad_output)],
    )?;
    same_planes(OP, &gi, &go)?;
    if !gi.dtype.is_floating() || go.dtype != gi.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: OP,
            dtype: go.dtype,
        });
    }
    let (input, osz) = (dhw(&gi), dhw(&go));
    let [_, ih, iw] = input;
    planes(&gi, gi.numel() + go.numel(), |n, c| {
        let mut acc = vec![0.0f64; input.iter().product()];
        for pos in positions(osz) {
            let r = adaptive_window(pos, osz, input);
            let g = ld(&go, off(&go, n, c, pos)) / window_len(&r);
            for [d, h, w] in window_positions(r) {
                acc[(d * ih + h) * iw + w] += g;
            }
        }
        store_plane(&gi, n, c, &acc);
        Ok(())
    })
}

/// Adaptive max pooling (2-d) of `x` into `out` (target sizes are the
/// output's), with the flat index of each maximum in `indices` (int64); the
/// gradient is [`max_pool2d_backward`]. NaN wins (as on CPU).
pub fn adaptive_max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_max_pool2d";
    let [o, i, x] = lift(OP, [("output", out), ("indices", indices), ("input", x)])?;
    adaptive_max_pool(OP, &o, &i, &x)
}

/// Adaptive max pooling (3-d); the gradient is [`max_pool3d_backward`].
pub fn adaptive_max_pool3d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_max_pool3d";
    check5(OP, &[("output", out), ("indices", indices), ("input", x)])?;
    adaptive_max_pool(OP, out, indices, x)
}

fn adaptive_max_pool(
    op: &'static str,
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    same_planes(op, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: indices must be int64 like the output"
        )));
    }
    if !x.dtype.is_floating() {
        return Err(KernelError::UnsupportedDtype { op, dtype: x.dtype });
    }
    let (input, osz) = (dhw(x), dhw(out));
    let [_, ih, iw] = input;
    planes(out, x.numel() + out.numel(), |n, c| {
        for pos in positions(osz) {
            let r = adaptive_window(pos, osz, input);
            let [d0, h0, w0] = r.map(|v| v.0 as usize);
            let mut best = (d0 * ih + h0) * iw + w0;
            let mut bestv = f64::NEG_INFINITY;
            let mut bo: Option<isize> = None;
            for q in window_positions(r) {
                let o = off(x, n, c, q);
                let v = ld(x, o);
                if v > bestv || v.is_nan() {
                    bestv = v;
                    best = (q[0] * ih + q[1]) * iw + q[2];
                    bo = Some(o);
                }
            }
            let oo = off(out, n, c, pos);
            match bo {
                Some(o) => copy_elem(out, oo, x, o),
                None => st(out, oo, f64::NEG_INFINITY),
            }
            // SAFETY: inside the indices view.
            unsafe { *(indices.ptr as *mut i64).offset(off(indices, n, c, pos)) = best as i64 };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(v: &mut [f32], sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, DType::F32, sizes)
    }

    #[test]
    fn max_pool_picks_max_and_index() {
        let mut x: Vec<f32> = (0..16).map(|v| ((v * 7) % 16) as f32).collect();
        let mut out = vec![0f32; 4];
        let mut idx = vec![0i64; 4];
        let iv = Strided::contiguous(idx.as_mut_ptr() as *mut u8, DType::I64, &[1, 1, 2, 2]);
        let win = Window {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
        };
        max_pool2d(
            &view(&mut out, &[1, 1, 2, 2]),
            &iv,
            &view(&mut x, &[1, 1, 4, 4]),
            win,
        )
        .unwrap();
        for (k, (&o, &i)) in out.iter().zip(&idx).enumerate() {
            assert_eq!(x[i as usize], o, "window {k}");
        }
        let mut gi = vec![1f32; 16];
        let mut go = vec![1f32; 4];
        max_pool2d_backward(
            &view(&mut gi, &[1, 1, 4, 4]),
            &view(&mut go, &[1, 1, 2, 2]),
            &iv,
        )
        .unwrap();
        assert_eq!(gi.iter().sum::<f32>(), 4.0);
    }

    #[test]
    fn avg_pool_padding_divisors() {
        let mut x = vec![1f32; 4];
        let mut out = vec![0f32; 4];
        let win = Window {
            kernel: [2, 2],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        };
        // output 3x3 would be full size; take 2x2 corner outputs
        let mut o9 = vec![0f32; 9];
        avg_pool2d(
            &view(&mut o9, &[1, 1, 3, 3]),
            &view(&mut x, &[1, 1, 2, 2]),
            win,
            true,
            None,
        )
        .unwrap();
        assert_eq!(o9[0], 0.25);
        avg_pool2d(
            &view(&mut o9, &[1, 1, 3, 3]),
            &view(&mut x, &[1, 1, 2, 2]),
            win,
            false,
            None,
        )
        .unwrap();
        assert_eq!(o9[0], 1.0);
        out.fill(0.0);
        adaptive_avg_pool2d(&view(&mut out, &[1, 1, 1, 1]), &view(&mut x, &[1, 1, 2, 2])).unwrap();
        assert_eq!(out[0], 1.0);
    }
}
