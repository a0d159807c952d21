//! 2-d pooling: max pooling (with indices) and average pooling with their
//! backward, adaptive average pooling and its backward.
//!
//! Every view is 4-d `[batch, channels, height, width]` with any strides
//! (NCHW or channels-last need no copy); planes `(batch, channel)` are
//! independent and are split over threads, so results do not depend on the
//! thread count. Averages and gradients accumulate in float64.

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

fn check4(op: &str, what: &str, s: &Strided) -> Result<(), KernelError> {
    if s.ndim() != 4 {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must be a 4-d view, got {:?}",
            s.sizes
        )));
    }
    Ok(())
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
fn off(s: &Strided, n: usize, c: usize, h: usize, w: usize) -> isize {
    n as isize * s.strides[0]
        + c as isize * s.strides[1]
        + h as isize * s.strides[2]
        + w as isize * s.strides[3]
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

/// Max pooling of `x` into `out` with the flat (`h * W + w`) index of each
/// maximum in `indices` (int64). NaN wins (as on CPU).
pub fn max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
    win: Window,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool2d_with_indices";
    for (w, s) in [("input", x), ("output", out), ("indices", indices)] {
        check4(OP, w, s)?;
    }
    same_planes(OP, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {OP}: indices must be int64 like the output"
        )));
    }
    if x.dtype == DType::Bool {
        return Err(KernelError::UnsupportedDtype {
            op: "max_pool2d",
            dtype: x.dtype,
        });
    }
    let (ih, iw) = (x.sizes[2] as isize, x.sizes[3] as isize);
    let (oh, ow) = (out.sizes[2], out.sizes[3]);
    let [kh, kw] = win.kernel.map(|v| v as isize);
    let [sh, sw] = win.stride.map(|v| v as isize);
    let [ph, pw] = win.padding.map(|v| v as isize);
    let [dh, dw] = win.dilation.map(|v| v.max(1) as isize);
    let work = out.numel() * (kh * kw) as usize;
    planes(out, work, |n, c| {
        for y in 0..oh {
            let mut h0 = y as isize * sh - ph;
            let h1 = (h0 + (kh - 1) * dh + 1).min(ih);
            while h0 < 0 {
                h0 += dh;
            }
            for xw in 0..ow {
                let mut w0 = xw as isize * sw - pw;
                let w1 = (w0 + (kw - 1) * dw + 1).min(iw);
                while w0 < 0 {
                    w0 += dw;
                }
                let mut best = h0 * iw + w0;
                let mut bestv = f64::NEG_INFINITY;
                let mut bo: Option<isize> = None;
                let mut h = h0;
                while h < h1 {
                    let mut w = w0;
                    while w < w1 {
                        let o = off(x, n, c, h as usize, w as usize);
                        let v = ld(x, o);
                        if v > bestv || v.is_nan() {
                            bestv = v;
                            best = h * iw + w;
                            bo = Some(o);
                        }
                        w += dw;
                    }
                    h += dh;
                }
                let oo = off(out, n, c, y, xw);
                match bo {
                    // Copy the element itself (no rounding).
                    Some(o) => copy_elem(out, oo, x, o),
                    None => st(out, oo, f64::NEG_INFINITY),
                }
                // SAFETY: inside the indices view.
                unsafe {
                    *(indices.ptr as *mut i64).offset(off(indices, n, c, y, xw)) = best as i64
                };
            }
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

/// Accumulates a plane's gradient in float64 and stores it.
fn store_plane(gi: &Strided, n: usize, c: usize, acc: &[f64]) {
    let (h, w) = (gi.sizes[2], gi.sizes[3]);
    for y in 0..h {
        for x in 0..w {
            st(gi, off(gi, n, c, y, x), acc[y * w + x]);
        }
    }
}

/// Gradient of [`max_pool2d`]: `grad_input[idx] += grad_output` per plane.
pub fn max_pool2d_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    indices: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "max_pool2d_with_indices_backward";
    for (w, s) in [
        ("grad_input", grad_input),
        ("grad_output", grad_output),
        ("indices", indices),
    ] {
        check4(OP, w, s)?;
    }
    same_planes(OP, grad_input, grad_output)?;
    if indices.sizes != grad_output.sizes || indices.dtype != DType::I64 {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {OP}: expected int64 indices of shape {:?}, got {:?} of {}",
            grad_output.sizes,
            indices.sizes,
            indices.dtype.name()
        )));
    }
    if !grad_input.dtype.is_floating() || grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: "max_pool2d_backward",
            dtype: grad_output.dtype,
        });
    }
    let plane = grad_input.sizes[2] * grad_input.sizes[3];
    let (oh, ow) = (grad_output.sizes[2], grad_output.sizes[3]);
    planes(
        grad_input,
        grad_input.numel() + grad_output.numel(),
        |n, c| {
            let mut acc = vec![0.0f64; plane];
            for y in 0..oh {
                for x in 0..ow {
                    // SAFETY: inside the indices view.
                    let i =
                        unsafe { *(indices.ptr as *const i64).offset(off(indices, n, c, y, x)) };
                    if i < 0 || i as usize >= plane {
                        return Err(KernelError::InvalidArgument(format!(
                            "foo: {OP}: index {i} out of range for a plane of {plane} elements"
                        )));
                    }
                    acc[i as usize] += ld(grad_output, off(grad_output, n, c, y, x));
                }
            }
            store_plane(grad_input, n, c, &acc);
            Ok(())
        },
    )
}

/// One average-pooling window: the clipped `[h0, h1) x [w0, w1)` range and its divisor.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn avg_window(
    y: usize,
    x: usize,
    ih: isize,
    iw: isize,
    win: &Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> (isize, isize, isize, isize, f64) {
    let [kh, kw] = win.kernel.map(|v| v as isize);
    let [sh, sw] = win.stride.map(|v| v as isize);
    let [ph, pw] = win.padding.map(|v| v as isize);
    let mut h0 = y as isize * sh - ph;
    let mut w0 = x as isize * sw - pw;
    let mut h1 = (h0 + kh).min(ih + ph);
    let mut w1 = (w0 + kw).min(iw + pw);
    let pool = (h1 - h0) * (w1 - w0);
    h0 = h0.max(0);
    w0 = w0.max(0);
    h1 = h1.min(ih);
    w1 = w1.min(iw);
    let div = match divisor {
        Some(d) => d as f64,
        None if count_include_pad => pool as f64,
        None => ((h1 - h0) * (w1 - w0)) as f64,
    };
    (h0, h1, w0, w1, div)
}

/// Average pooling of `x` into `out` (ATen's rules for padding,
/// `count_include_pad` and `divisor_override`).
pub fn avg_pool2d(
    out: &Strided,
    x: &Strided,
    win: Window,
    count_include_pad: bool,
    divisor: Option<i64>,
) -> Result<(), KernelError> {
    const OP: &str = "avg_pool2d";
    check4(OP, "input", x)?;
    check4(OP, "output", out)?;
    same_planes(OP, x, out)?;
    if x.dtype == DType::Bool || out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: "avg_pool2d",
            dtype: x.dtype,
        });
    }
    // Integers: the integer sum divided with truncation (as CPU).
    let int = !x.dtype.is_floating();
    let (ih, iw) = (x.sizes[2] as isize, x.sizes[3] as isize);
    let (oh, ow) = (out.sizes[2], out.sizes[3]);
    planes(out, out.numel() * win.kernel[0] * win.kernel[1], |n, c| {
        for y in 0..oh {
            for xw in 0..ow {
                let (h0, h1, w0, w1, div) =
                    avg_window(y, xw, ih, iw, &win, count_include_pad, divisor);
                let oo = off(out, n, c, y, xw);
                if h0 >= h1 || w0 >= w1 {
                    st(out, oo, 0.0);
                    continue;
                }
                let mut s = 0.0;
                for h in h0..h1 {
                    for w in w0..w1 {
                        s += ld(x, off(x, n, c, h as usize, w as usize));
                    }
                }
                st(out, oo, if int { (s / div).trunc() } else { s / div });
            }
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
    check4(OP, "grad_input", grad_input)?;
    check4(OP, "grad_output", grad_output)?;
    same_planes(OP, grad_input, grad_output)?;
    if !grad_input.dtype.is_floating() || grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: "avg_pool2d_backward",
            dtype: grad_output.dtype,
        });
    }
    let (ih, iw) = (grad_input.sizes[2] as isize, grad_input.sizes[3] as isize);
    let (oh, ow) = (grad_output.sizes[2], grad_output.sizes[3]);
    planes(
        grad_input,
        grad_output.numel() * win.kernel[0] * win.kernel[1],
        |n, c| {
            let mut acc = vec![0.0f64; (ih * iw) as usize];
            for y in 0..oh {
                for xw in 0..ow {
                    let (h0, h1, w0, w1, div) =
                        avg_window(y, xw, ih, iw, &win, count_include_pad, divisor);
                    let g = ld(grad_output, off(grad_output, n, c, y, xw)) / div;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            acc[(h * iw + w) as usize] += g;
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

/// Adaptive average pooling of `x` into `out` (the output's height and width
/// are the target sizes).
pub fn adaptive_avg_pool2d(out: &Strided, x: &Strided) -> Result<(), KernelError> {
    const OP: &str = "adaptive_avg_pool2d";
    check4(OP, "input", x)?;
    check4(OP, "output", out)?;
    same_planes(OP, x, out)?;
    if !x.dtype.is_floating() || out.dtype != x.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: "adaptive_avg_pool2d",
            dtype: x.dtype,
        });
    }
    let (ih, iw) = (x.sizes[2], x.sizes[3]);
    let (oh, ow) = (out.sizes[2], out.sizes[3]);
    planes(out, x.numel() + out.numel(), |n, c| {
        for y in 0..oh {
            let (h0, h1) = adaptive_range(y, oh, ih);
            for xw in 0..ow {
                let (w0, w1) = adaptive_range(xw, ow, iw);
                let mut s = 0.0;
                for h in h0..h1 {
                    for w in w0..w1 {
                        s += ld(x, off(x, n, c, h, w));
                    }
                }
                st(
                    out,
                    off(out, n, c, y, xw),
                    s / ((h1 - h0) * (w1 - w0)) as f64,
                );
            }
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
    check4(OP, "grad_input", grad_input)?;
    check4(OP, "grad_output", grad_output)?;
    same_planes(OP, grad_input, grad_output)?;
    if !grad_input.dtype.is_floating() || grad_output.dtype != grad_input.dtype {
        return Err(KernelError::UnsupportedDtype {
            op: "adaptive_avg_pool2d_backward",
            dtype: grad_output.dtype,
        });
    }
    let (ih, iw) = (grad_input.sizes[2], grad_input.sizes[3]);
    let (oh, ow) = (grad_output.sizes[2], grad_output.sizes[3]);
    planes(
        grad_input,
        grad_input.numel() + grad_output.numel(),
        |n, c| {
            let mut acc = vec![0.0f64; ih * iw];
            for y in 0..oh {
                let (h0, h1) = adaptive_range(y, oh, ih);
                for xw in 0..ow {
                    let (w0, w1) = adaptive_range(xw, ow, iw);
                    let g = ld(grad_output, off(grad_output, n, c, y, xw))
                        / ((h1 - h0) * (w1 - w0)) as f64;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            acc[h * iw + w] += g;
                        }
                    }
                }
            }
            store_plane(grad_input, n, c, &acc);
            Ok(())
        },
    )
}

/// Adaptive max pooling of `x` into `out` (target height and width are the
/// output's), with the flat index of each maximum in `indices` (int64); the
/// gradient is [`max_pool2d_backward`]. NaN wins (as on CPU).
pub fn adaptive_max_pool2d(
    out: &Strided,
    indices: &Strided,
    x: &Strided,
) -> Result<(), KernelError> {
    const OP: &str = "adaptive_max_pool2d";
    for (w, s) in [("input", x), ("output", out), ("indices", indices)] {
        check4(OP, w, s)?;
    }
    same_planes(OP, x, out)?;
    if indices.sizes != out.sizes || indices.dtype != DType::I64 || out.dtype != x.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {OP}: indices must be int64 like the output"
        )));
    }
    if !x.dtype.is_floating() {
        return Err(KernelError::UnsupportedDtype {
            op: "adaptive_max_pool2d",
            dtype: x.dtype,
        });
    }
    let (ih, iw) = (x.sizes[2], x.sizes[3]);
    let (oh, ow) = (out.sizes[2], out.sizes[3]);
    planes(out, x.numel() + out.numel(), |n, c| {
        for y in 0..oh {
            let (h0, h1) = adaptive_range(y, oh, ih);
            for xw in 0..ow {
                let (w0, w1) = adaptive_range(xw, ow, iw);
                let mut best = h0 * iw + w0;
                let mut bestv = f64::NEG_INFINITY;
                let mut bo: Option<isize> = None;
                for h in h0..h1 {
                    for w in w0..w1 {
                        let o = off(x, n, c, h, w);
                        let v = ld(x, o);
                        if v > bestv || v.is_nan() {
                            bestv = v;
                            best = h * iw + w;
                            bo = Some(o);
                        }
                    }
                }
                let oo = off(out, n, c, y, xw);
                match bo {
                    Some(o) => copy_elem(out, oo, x, o),
                    None => st(out, oo, f64::NEG_INFINITY),
                }
                // SAFETY: inside the indices view.
                unsafe {
                    *(indices.ptr as *mut i64).offset(off(indices, n, c, y, xw)) = best as i64
                };
            }
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
