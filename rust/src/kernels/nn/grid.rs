//! `grid_sampler_2d` / `grid_sampler_3d` and their backward
//! (`nn.functional.grid_sample`): bilinear (trilinear), nearest and
//! bicubic (tricubic) sampling with zeros / border / reflection padding, following
//! ATen's `GridSampler.h` step by step, in the element type (float32 for the
//! half types).
//!
//! Spatial dims are handled in the grid's coordinate order: coordinate `k`
//! (x, y, z) indexes input dim `ndim - 1 - k` (W, H, D). Corners of a
//! (tri)linear cell are visited with x fastest, then y, then z, as CPU sums
//! them. Views may have any strides; the forward splits output rows over
//! threads, the backward splits batch samples (each accumulates its own
//! input gradient in a fixed order), so results do not depend on the thread
//! count.

use super::super::reduce::{AccF, FloatElem};
use super::super::{parallel, KernelError, Strided};
use crate::dtype::DType;
use half::{bf16, f16};

/// The compute type: `AccF` with what sampling needs.
trait G: AccF {
    fn floor(self) -> Self;
    fn nearbyint(self) -> Self;
    fn fmod(self, m: Self) -> Self;
}
macro_rules! g {
    ($t:ty) => {
        impl G for $t {
            #[inline(always)]
            fn floor(self) -> $t {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn nearbyint(self) -> $t {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn fmod(self, m: $t) -> $t {
                self % m
            }
        }
    };
}
g!(f32);
g!(f64);

/// Interpolation (0 bilinear, 1 nearest, 2 bicubic), padding (0 zeros,
/// 1 border, 2 reflection) and `align_corners`.
#[derive(Clone, Copy, Debug)]
pub struct GridSpec {
    pub mode: i64,
    pub padding: i64,
    pub align_corners: bool,
}

const BILINEAR: i64 = 0;
const NEAREST: i64 = 1;
const BORDER: i64 = 1;
const REFLECTION: i64 = 2;

#[inline(always)]
fn c<T: FloatElem>(v: f64) -> T::Acc {
    T::Acc::from_f64(v)
}

/// `v` rounded to the element type: every step of CPU's sampling arithmetic
/// rounds to it (a no-op for float32 / float64).
#[inline(always)]
fn r<T: FloatElem>(v: T::Acc) -> T::Acc {
    T::narrow(v).widen()
}

#[inline(always)]
fn unnormalize<T: FloatElem>(coord: T::Acc, size: usize, align: bool) -> (T::Acc, T::Acc) {
    let s = c::<T>(size as f64);
    let (one, two) = (T::Acc::ONE, c::<T>(2.0));
    if align {
        let sm1 = r::<T>(s - one);
        (
            r::<T>(r::<T>(r::<T>(coord + one) / two) * sm1),
            r::<T>(sm1 / two),
        )
    } else {
        (
            r::<T>(r::<T>(r::<T>(r::<T>(coord + one) * s) - one) / two),
            r::<T>(s / two),
        )
    }
}

/// `clip_coordinates_set_grad`. A NaN coordinate clips to 0 in 2-d (CPU's
/// vectorized clamp) and to `size - 1` in 3-d (its scalar `std::min`).
#[inline(always)]
fn clip<T: FloatElem>(v: T::Acc, size: usize, k: usize) -> (T::Acc, T::Acc) {
    let max = c::<T>(size as f64 - 1.0);
    let z = T::Acc::ZERO;
    if v.is_nan() {
        (if k == 2 { z } else { max }, z)
    } else if v <= z {
        (z, z)
    } else if v >= max {
        (max, z)
    } else {
        (v, T::Acc::ONE)
    }
}

/// `reflect_coordinates_set_grad`.
#[inline(always)]
fn reflect<T: FloatElem>(v: T::Acc, twice_low: f64, twice_high: f64) -> (T::Acc, T::Acc)
where
    T::Acc: G,
{
    let z = T::Acc::ZERO;
    if twice_low == twice_high {
        return (z, z);
    }
    let min = c::<T>(twice_low / 2.0);
    let span = c::<T>((twice_high - twice_low) / 2.0);
    let mut v = r::<T>(v - min);
    let mult = if v < z {
        v = z - v;
        z - T::Acc::ONE
    } else {
        T::Acc::ONE
    };
    let extra = r::<T>(v.fmod(span));
    let flips = r::<T>(v / span).floor().to_f64();
    if flips % 2.0 == 0.0 {
        (r::<T>(extra + min), mult)
    } else {
        (r::<T>(r::<T>(span - extra) + min), z - mult)
    }
}

/// `compute_coordinates` (with its gradient factor): padding applied to an
/// unnormalized coordinate.
#[inline(always)]
fn pad_coord<T: FloatElem>(
    v: T::Acc,
    size: usize,
    padding: i64,
    align: bool,
    k: usize,
) -> (T::Acc, T::Acc)
where
    T::Acc: G,
{
    match padding {
        BORDER => clip::<T>(v, size, k),
        REFLECTION => {
            let (rv, gr) = if align {
                reflect::<T>(v, 0.0, 2.0 * (size as f64 - 1.0))
            } else {
                reflect::<T>(v, -1.0, 2.0 * size as f64 - 1.0)
            };
            let (v, gc) = clip::<T>(rv, size, k);
            (v, gr * gc)
        }
        _ => (v, T::Acc::ONE),
    }
}

/// An index from a (floored or rounded) coordinate: non-finite or huge
/// coordinates land far out of bounds, as CPU's integer conversion does.
#[inline(always)]
fn idx<A: G>(v: A) -> i64 {
    let f = v.to_f64();
    if f.is_finite() && f.abs() < 1e15 {
        f as i64
    } else {
        -(1 << 40)
    }
}

/// `grid_sampler_compute_source_index(_set_grad)`: the source coordinate and
/// d source / d grid.
#[inline(always)]
fn source_index<T: FloatElem>(
    coord: T::Acc,
    size: usize,
    spec: &GridSpec,
    k: usize,
) -> (T::Acc, T::Acc)
where
    T::Acc: G,
{
    let (u, gu) = unnormalize::<T>(coord, size, spec.align_corners);
    let (v, gp) = pad_coord::<T>(u, size, spec.padding, spec.align_corners, k);
    (v, gu * gp)
}

/// The view's spatial sizes and strides in coordinate order (x, y, z).
fn spatial(t: &Strided, k: usize) -> ([usize; 3], [isize; 3]) {
    let nd = t.ndim();
    let mut s = [1usize; 3];
    let mut st = [0isize; 3];
    for i in 0..k {
        s[i] = t.sizes[nd - 1 - i];
        st[i] = t.strides[nd - 1 - i];
    }
    (s, st)
}

#[inline(always)]
fn inside(p: [i64; 3], size: [usize; 3], k: usize) -> bool {
    (0..k).all(|i| p[i] >= 0 && (p[i] as usize) < size[i])
}

#[inline(always)]
fn at(p: [i64; 3], st: [isize; 3], k: usize) -> isize {
    (0..k).map(|i| p[i] as isize * st[i]).sum()
}

#[inline(always)]
fn ld<T: FloatElem>(base: usize, off: isize) -> T::Acc {
    // SAFETY: callers pass offsets inside the view.
    unsafe { (*(base as *const T).offset(off)).widen() }
}

/// Cubic convolution coefficients for offset `t` (A = -0.75).
#[inline(always)]
fn cubic_coeffs<T: FloatElem>(t: T::Acc) -> [T::Acc; 4] {
    let a = c::<T>(-0.75);
    let one = T::Acc::ONE;
    let q = r::<T>;
    let conv1 = |x: T::Acc| q(q(q(q(q(a + c::<T>(2.0)) * x) - q(a + c::<T>(3.0))) * x) * x) + one;
    let conv2 = |x: T::Acc| {
        q(
            q(q(q(q(q(a * x) - q(c::<T>(5.0) * a)) * x) + q(c::<T>(8.0) * a)) * x)
                - q(c::<T>(4.0) * a),
        )
    };
    let x2 = q(one - t);
    [conv2(q(t + one)), conv1(t), conv1(x2), conv2(q(x2 + one))]
}

/// d coefficients / d t.
#[inline(always)]
fn cubic_coeffs_grad<T: FloatElem>(t: T::Acc) -> [T::Acc; 4] {
    let a = c::<T>(-0.75);
    let (n3, n2, n10, n8) = (c::<T>(3.0), c::<T>(2.0), c::<T>(10.0), c::<T>(8.0));
    let z = T::Acc::ZERO;
    let x = z - T::Acc::ONE - t;
    let g0 = ((z - n3) * a * x - n10 * a) * x - n8 * a;
    let x = z - t;
    let g1 = ((z - n3) * (a + n2) * x - n2 * (a + n3)) * x;
    let x = T::Acc::ONE - t;
    let g2 = (n3 * (a + n2) * x - n2 * (a + n3)) * x;
    let x = n2 - t;
    let g3 = (n3 * a * x - n10 * a) * x + n8 * a;
    [g0, g1, g2, g3].map(r::<T>)
}

/// The input position of a bicubic tap (padding applied, then truncated).
#[inline(always)]
fn tap<T: FloatElem>(v: i64, size: usize, spec: &GridSpec, k: usize) -> i64
where
    T::Acc: G,
{
    let (p, _) = pad_coord::<T>(c::<T>(v as f64), size, spec.padding, spec.align_corners, k);
    idx(p)
}

/// A (tri)linear cell: the lower corner and, per
/// dim, the weights of the lower and upper neighbour. 2-d follows CPU's
/// vectorized kernel (upper = x - floor, lower = 1 - upper), 3-d its scalar
/// one (coordinates of NaN / huge grids made -100, lower = floor + 1 - x).
#[inline(always)]
fn linear_cell<T: FloatElem>(
    g: &[T::Acc; 3],
    v: &Views<'_>,
    spec: &GridSpec,
) -> ([i64; 3], [[T::Acc; 2]; 3])
where
    T::Acc: G,
{
    let mut lo = [0i64; 3];
    let mut f = [[T::Acc::ZERO; 2]; 3];
    for i in 0..v.k {
        let mut s = source_index::<T>(g[i], v.isz[i], spec, v.k).0;
        if v.k == 3 {
            let x = s.to_f64();
            if !x.is_finite() || x.abs() > 1e15 {
                s = c::<T>(-100.0);
            }
        }
        let fl = s.floor();
        lo[i] = idx(fl);
        let hi = r::<T>(s - fl);
        let low = if v.k == 2 {
            r::<T>(T::Acc::ONE - hi)
        } else {
            r::<T>(r::<T>(fl + T::Acc::ONE) - s)
        };
        f[i] = [low, hi];
    }
    (lo, f)
}

struct Views<'a> {
    k: usize,
    grid: &'a Strided,
    /// Output (or grad_output) spatial sizes in coordinate order.
    osz: [usize; 3],
    ost: [isize; 3],
    isz: [usize; 3],
    ist: [isize; 3],
}

impl Views<'_> {
    /// The grid coordinates of output point `o` of sample `n`.
    #[inline(always)]
    fn coords<A: G, T: FloatElem<Acc = A>>(&self, n: usize, o: [usize; 3]) -> [A; 3] {
        let g = self.grid;
        let nd = g.ndim();
        let mut base = n as isize * g.strides[0];
        for i in 0..self.k {
            base += o[i] as isize * g.strides[nd - 2 - i];
        }
        let mut r = [A::ZERO; 3];
        for (i, v) in r.iter_mut().enumerate().take(self.k) {
            *v = ld::<T>(g.ptr as usize, base + i as isize * g.strides[nd - 1]);
        }
        r
    }
}

/// Output point `j` (row-major over the output's spatial dims) in
/// coordinate order.
#[inline(always)]
fn point(j: usize, osz: [usize; 3]) -> [usize; 3] {
    [j % osz[0], (j / osz[0]) % osz[1], j / (osz[0] * osz[1])]
}

fn check(
    op: &str,
    out: &Strided,
    input: &Strided,
    grid: &Strided,
    k: usize,
) -> Result<(), KernelError> {
    let ok = input.ndim() == k + 2
        && grid.ndim() == k + 2
        && out.ndim() == k + 2
        && grid.sizes[k + 1] == k
        && grid.sizes[0] == input.sizes[0]
        && out.sizes[..2] == input.sizes[..2]
        && out.sizes[2..] == grid.sizes[1..k + 1]
        && input.dtype == grid.dtype
        && out.dtype == input.dtype;
    if !ok {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: input {:?}, grid {:?} and output {:?} do not fit",
            input.sizes, grid.sizes, out.sizes
        )));
    }
    Ok(())
}

/// Samples `input` (`[N, C, (D,) H, W]`) at `grid` (`[N, (D',) H', W', k]`)
/// into `out` (`[N, C, (D',) H', W']`).
pub fn grid_sample(
    out: &Strided,
    input: &Strided,
    grid: &Strided,
    spec: GridSpec,
) -> Result<(), KernelError> {
    let k = input.ndim().saturating_sub(2);
    let op = if k == 3 {
        "grid_sampler_3d"
    } else {
        "grid_sampler_2d"
    };
    if !(k == 2 || k == 3) || !(0..=2).contains(&spec.mode) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: unsupported input rank or interpolation mode {}",
            spec.mode
        )));
    }
    check(op, out, input, grid, k)?;
    if out.numel() == 0 {
        return Ok(());
    }
    match input.dtype {
        DType::F32 => fwd::<f32>(out, input, grid, spec, k),
        DType::F64 => fwd::<f64>(out, input, grid, spec, k),
        DType::F16 => fwd::<f16>(out, input, grid, spec, k),
        DType::BF16 => fwd::<bf16>(out, input, grid, spec, k),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: if k == 3 {
                    "grid_sampler_3d_cpu"
                } else {
                    "grid_sampler_2d_cpu"
                },
                dtype: d,
            })
        }
    }
    Ok(())
}

fn views<'a>(out: &Strided, input: &'a Strided, grid: &'a Strided, k: usize) -> Views<'a> {
    let (osz, ost) = spatial(out, k);
    let (isz, ist) = spatial(input, k);
    Views {
        k,
        grid,
        osz,
        ost,
        isz,
        ist,
    }
}

fn fwd<T: FloatElem>(out: &Strided, input: &Strided, grid: &Strided, spec: GridSpec, k: usize)
where
    T::Acc: G,
{
    let v = views(out, input, grid, k);
    let (n, ch) = (input.sizes[0], input.sizes[1]);
    let pts: usize = v.osz.iter().product();
    let (ip, op) = (input.ptr as usize, out.ptr as usize);
    let (isn, isc) = (input.strides[0], input.strides[1]);
    let (osn, osc) = (out.strides[0], out.strides[1]);
    // Tasks: runs of output rows (x fastest) of one sample.
    let row = v.osz[0];
    let rows = pts / row.max(1);
    parallel::parallel_for(n * rows, |task| {
        let (b, ri) = (task / rows, task % rows);
        for j in ri * row..(ri + 1) * row {
            let o = point(j, v.osz);
            let g = v.coords::<T::Acc, T>(b, o);
            let obase = b as isize * osn + at(o.map(|x| x as i64), v.ost, k);
            let ibase = b as isize * isn;
            let put = |cc: usize, val: T::Acc| {
                // SAFETY: inside the output; each point is this task's own.
                unsafe { *(op as *mut T).offset(obase + cc as isize * osc) = T::narrow(val) };
            };
            match spec.mode {
                BILINEAR => {
                    let (lo, f) = linear_cell::<T>(&g, &v, &spec);
                    // Corner positions and weights, x fastest.
                    let mut corners = [([0i64; 3], T::Acc::ZERO); 8];
                    for (cidx, cw) in corners.iter_mut().enumerate().take(1 << k) {
                        let mut p = [0i64; 3];
                        let mut w = T::Acc::ONE;
                        for i in 0..k {
                            let hi = (cidx >> i) & 1;
                            p[i] = lo[i] + hi as i64;
                            w = if i == 0 {
                                f[i][hi]
                            } else {
                                r::<T>(w * f[i][hi])
                            };
                        }
                        *cw = (p, w);
                    }
                    for cc in 0..ch {
                        let cb = ibase + cc as isize * isc;
                        let mut acc = T::Acc::ZERO;
                        for &(p, w) in corners.iter().take(1 << k) {
                            if inside(p, v.isz, k) {
                                acc = r::<T>(acc + r::<T>(ld::<T>(ip, cb + at(p, v.ist, k)) * w));
                            } else if k == 2 {
                                // CPU's 2-d kernel adds masked corners as 0 * w
                                // (NaN weights of a NaN coordinate reach the output).
                                acc = r::<T>(acc + T::Acc::ZERO * w);
                            }
                        }
                        put(cc, acc);
                    }
                }
                NEAREST => {
                    let mut p = [0i64; 3];
                    for i in 0..k {
                        p[i] = idx(source_index::<T>(g[i], v.isz[i], &spec, k).0.nearbyint());
                    }
                    let ok = inside(p, v.isz, k);
                    for cc in 0..ch {
                        let val = if ok {
                            ld::<T>(ip, ibase + cc as isize * isc + at(p, v.ist, k))
                        } else {
                            T::Acc::ZERO
                        };
                        put(cc, val);
                    }
                }
                _ => {
                    // Bi-/tricubic: unnormalized (padding applies per tap);
                    // interpolated along x, then y, then z.
                    let mut cf = [[T::Acc::ZERO; 4]; 3];
                    let mut taps = [[0i64; 4]; 3];
                    for i in 0..k {
                        let (u, _) = unnormalize::<T>(g[i], v.isz[i], spec.align_corners);
                        let u0 = u.floor();
                        cf[i] = cubic_coeffs::<T>(r::<T>(u - u0));
                        let u0 = idx(u0);
                        taps[i] = [0, 1, 2, 3]
                            .map(|t| tap::<T>(u0.saturating_add(t - 1), v.isz[i], &spec, k));
                    }
                    let interp = |vals: [T::Acc; 4], w: &[T::Acc; 4]| {
                        let mut a = r::<T>(vals[0] * w[0]);
                        for q in 1..4 {
                            a = r::<T>(a + r::<T>(vals[q] * w[q]));
                        }
                        a
                    };
                    let nz = if k == 3 { 4 } else { 1 };
                    for cc in 0..ch {
                        let cb = ibase + cc as isize * isc;
                        let val = |i: usize, j: usize, l: usize| {
                            let p = [taps[0][i], taps[1][j], taps[2][l]];
                            if inside(p, v.isz, k) {
                                ld::<T>(ip, cb + at(p, v.ist, k))
                            } else {
                                T::Acc::ZERO
                            }
                        };
                        let mut planes = [T::Acc::ZERO; 4];
                        for (l, plane) in planes.iter_mut().enumerate().take(nz) {
                            let mut rows = [T::Acc::ZERO; 4];
                            for (j, row) in rows.iter_mut().enumerate() {
                                *row = interp([0, 1, 2, 3].map(|i| val(i, j, l)), &cf[0]);
                            }
                            *plane = interp(rows, &cf[1]);
                        }
                        put(
                            cc,
                            if k == 3 {
                                interp(planes, &cf[2])
                            } else {
                                planes[0]
                            },
                        );
                    }
                }
            }
        }
    });
}

/// Gradients of [`grid_sample`]: `grad_input` (overwritten; same shape as
/// `input`) and `grad_grid` (same shape as `grid`).
pub fn grid_sample_backward(
    grad_input: &Strided,
    grad_grid: &Strided,
    grad_output: &Strided,
    input: &Strided,
    grid: &Strided,
    spec: GridSpec,
) -> Result<(), KernelError> {
    let k = input.ndim().saturating_sub(2);
    let op = if k == 3 {
        "grid_sampler_3d_backward"
    } else {
        "grid_sampler_2d_backward"
    };
    if !(k == 2 || k == 3) || !(0..=2).contains(&spec.mode) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: unsupported input rank or interpolation mode {}",
            spec.mode
        )));
    }
    check(op, grad_output, input, grid, k)?;
    if grad_input.sizes != input.sizes
        || grad_grid.sizes != grid.sizes
        || grad_input.dtype != input.dtype
        || grad_grid.dtype != input.dtype
        || grad_output.dtype != input.dtype
    {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: gradient views do not fit"
        )));
    }
    match input.dtype {
        DType::F32 => bwd::<f32>(grad_input, grad_grid, grad_output, input, grid, spec, k),
        DType::F64 => bwd::<f64>(grad_input, grad_grid, grad_output, input, grid, spec, k),
        DType::F16 => bwd::<f16>(grad_input, grad_grid, grad_output, input, grid, spec, k),
        DType::BF16 => bwd::<bf16>(grad_input, grad_grid, grad_output, input, grid, spec, k),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: if k == 3 {
                    "grid_sampler_3d_backward_cpu"
                } else {
                    "grid_sampler_2d_backward_cpu"
                },
                dtype: d,
            })
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn bwd<T: FloatElem>(
    gi: &Strided,
    gg: &Strided,
    go: &Strided,
    input: &Strided,
    grid: &Strided,
    spec: GridSpec,
    k: usize,
) where
    T::Acc: G,
{
    let v = views(go, input, grid, k);
    let (n, ch) = (input.sizes[0], input.sizes[1]);
    let pts: usize = v.osz.iter().product();
    let (_, gist) = spatial(gi, k);
    let (ip, gip, gop, ggp) = (
        input.ptr as usize,
        gi.ptr as usize,
        go.ptr as usize,
        gg.ptr as usize,
    );
    let (isn, isc, gisn, gisc, gosn, gosc) = (
        input.strides[0],
        input.strides[1],
        gi.strides[0],
        gi.strides[1],
        go.strides[0],
        go.strides[1],
    );
    let ggnd = gg.ndim();
    let per_input: usize = v.isz.iter().take(k).product();
    parallel::parallel_for(n, |b| {
        // This sample's input gradient: zeroed, then accumulated in order.
        let add = |cc: usize, p: [i64; 3], val: T::Acc| {
            let o = b as isize * gisn + cc as isize * gisc + at(p, gist, k);
            // SAFETY: inside grad_input; sample b is this task's own.
            unsafe {
                let q = (gip as *mut T).offset(o);
                *q = T::narrow((*q).widen() + val);
            }
        };
        for cc in 0..ch {
            for j in 0..per_input {
                let p = point(j, v.isz).map(|x| x as i64);
                let o = b as isize * gisn + cc as isize * gisc + at(p, gist, k);
                // SAFETY: inside grad_input.
                unsafe { *(gip as *mut T).offset(o) = T::narrow(T::Acc::ZERO) };
            }
        }
        for j in 0..pts {
            let o = point(j, v.osz);
            let g = v.coords::<T::Acc, T>(b, o);
            let gobase = b as isize * gosn + at(o.map(|x| x as i64), v.ost, k);
            let ibase = b as isize * isn;
            let gout = |cc: usize| ld::<T>(gop, gobase + cc as isize * gosc);
            let mut gcoord = [T::Acc::ZERO; 3];
            let mut mult = [T::Acc::ZERO; 3];
            match spec.mode {
                BILINEAR => {
                    let (lo, fs) = linear_cell::<T>(&g, &v, &spec);
                    for i in 0..k {
                        mult[i] = source_index::<T>(g[i], v.isz[i], &spec, k).1;
                    }
                    // Per corner: position and per-dim factors.
                    let mut f = [[T::Acc::ZERO; 3]; 8];
                    let mut pos = [[0i64; 3]; 8];
                    for cidx in 0..1 << k {
                        for i in 0..k {
                            let hi = (cidx >> i) & 1;
                            pos[cidx][i] = lo[i] + hi as i64;
                            f[cidx][i] = fs[i][hi];
                        }
                    }
                    for cc in 0..ch {
                        let gv = gout(cc);
                        let cb = ibase + cc as isize * isc;
                        for cidx in 0..1 << k {
                            let p = pos[cidx];
                            if !inside(p, v.isz, k) {
                                continue;
                            }
                            let mut w = f[cidx][0];
                            for i in 1..k {
                                w = w * f[cidx][i];
                            }
                            add(cc, p, w * gv);
                            let val = ld::<T>(ip, cb + at(p, v.ist, k));
                            for i in 0..k {
                                // The other dims' factors, in coordinate order.
                                let mut t = val;
                                for (i2, &fi) in f[cidx].iter().enumerate().take(k) {
                                    if i2 != i {
                                        t = t * fi;
                                    }
                                }
                                let t = t * gv;
                                gcoord[i] = if (cidx >> i) & 1 == 1 {
                                    gcoord[i] + t
                                } else {
                                    gcoord[i] - t
                                };
                            }
                        }
                    }
                }
                NEAREST => {
                    let mut p = [0i64; 3];
                    for i in 0..k {
                        p[i] = idx(source_index::<T>(g[i], v.isz[i], &spec, k).0.nearbyint());
                    }
                    if inside(p, v.isz, k) {
                        for cc in 0..ch {
                            add(cc, p, gout(cc));
                        }
                    }
                }
                _ => {
                    let mut cf = [[T::Acc::ZERO; 4]; 3];
                    let mut df = [[T::Acc::ZERO; 4]; 3];
                    let mut taps = [[0i64; 4]; 3];
                    for i in 0..k {
                        let (u, m) = unnormalize::<T>(g[i], v.isz[i], spec.align_corners);
                        mult[i] = m;
                        let u0 = u.floor();
                        let t = r::<T>(u - u0);
                        cf[i] = cubic_coeffs::<T>(t);
                        df[i] = cubic_coeffs_grad::<T>(t);
                        let u0 = idx(u0);
                        taps[i] = [0, 1, 2, 3]
                            .map(|q| tap::<T>(u0.saturating_add(q - 1), v.isz[i], &spec, k));
                    }
                    let nz = if k == 3 { 4 } else { 1 };
                    for cc in 0..ch {
                        let gv = gout(cc);
                        let cb = ibase + cc as isize * isc;
                        for l in 0..nz {
                            for j in 0..4 {
                                for i in 0..4 {
                                    let p = [taps[0][i], taps[1][j], taps[2][l]];
                                    if !inside(p, v.isz, k) {
                                        continue;
                                    }
                                    let q = [i, j, l];
                                    // The tap's weight: its coefficient per dim.
                                    let w = |skip: usize, d: &[[T::Acc; 4]; 3]| {
                                        let mut w = T::Acc::ONE;
                                        for dim in 0..k {
                                            w = w * if dim == skip {
                                                d[dim][q[dim]]
                                            } else {
                                                cf[dim][q[dim]]
                                            };
                                        }
                                        w
                                    };
                                    add(cc, p, gv * w(usize::MAX, &df));
                                    let val = ld::<T>(ip, cb + at(p, v.ist, k));
                                    for dim in 0..k {
                                        gcoord[dim] = gcoord[dim] - val * w(dim, &df) * gv;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let mut gbase = b as isize * gg.strides[0];
            for i in 0..k {
                gbase += o[i] as isize * gg.strides[ggnd - 2 - i];
            }
            for i in 0..k {
                // SAFETY: inside grad_grid; each point is this task's own.
                unsafe {
                    *(ggp as *mut T).offset(gbase + i as isize * gg.strides[ggnd - 1]) =
                        T::narrow(mult[i] * gcoord[i])
                };
            }
        }
    });
}
