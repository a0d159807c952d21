//! `grid_sampler_2d` / `grid_sampler_3d` and their backward
//! (`nn.functional.grid_sample`): bilinear (trilinear), nearest and (2-d)
//! bicubic sampling with zeros / border / reflection padding, following
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
const BICUBIC: i64 = 2;
const BORDER: i64 = 1;
const REFLECTION: i64 = 2;

#[inline(always)]
fn c<A: G>(v: f64) -> A {
    A::from_f64(v)
}

#[inline(always)]
fn unnormalize<A: G>(coord: A, size: usize, align: bool) -> (A, A) {
    let s: A = c(size as f64);
    let (one, two) = (A::ONE, c::<A>(2.0));
    if align {
        (((coord + one) / two) * (s - one), (s - one) / two)
    } else {
        (((coord + one) * s - one) / two, s / two)
    }
}

/// `clip_coordinates_set_grad`.
#[inline(always)]
fn clip<A: G>(v: A, size: usize) -> (A, A) {
    let max: A = c(size as f64 - 1.0);
    if v <= A::ZERO {
        (A::ZERO, A::ZERO)
    } else if v >= max {
        (max, A::ZERO)
    } else {
        (v, A::ONE)
    }
}

/// `reflect_coordinates_set_grad`.
#[inline(always)]
fn reflect<A: G>(v: A, twice_low: f64, twice_high: f64) -> (A, A) {
    if twice_low == twice_high {
        return (A::ZERO, A::ZERO);
    }
    let min: A = c(twice_low / 2.0);
    let span: A = c((twice_high - twice_low) / 2.0);
    let mut v = v - min;
    let mult = if v < A::ZERO {
        v = A::ZERO - v;
        A::ZERO - A::ONE
    } else {
        A::ONE
    };
    let extra = v.fmod(span);
    let flips = (v / span).floor().to_f64();
    if flips % 2.0 == 0.0 {
        (extra + min, mult)
    } else {
        (span - extra + min, A::ZERO - mult)
    }
}

/// `compute_coordinates` (with its gradient factor): padding applied to an
/// unnormalized coordinate.
#[inline(always)]
fn pad_coord<A: G>(v: A, size: usize, padding: i64, align: bool) -> (A, A) {
    match padding {
        BORDER => clip(v, size),
        REFLECTION => {
            let (r, gr) = if align {
                reflect(v, 0.0, 2.0 * (size as f64 - 1.0))
            } else {
                reflect(v, -1.0, 2.0 * size as f64 - 1.0)
            };
            let (v, gc) = clip(r, size);
            (v, gr * gc)
        }
        _ => (v, A::ONE),
    }
}

/// ATen's `safe_downgrade_to_int_range`: non-finite or huge coordinates
/// become -100 (out of bounds).
#[inline(always)]
fn safe<A: G>(v: A) -> A {
    let f = v.to_f64();
    if !f.is_finite() || f.abs() > i64::MAX as f64 / 2.0 {
        c(-100.0)
    } else {
        v
    }
}

/// `grid_sampler_compute_source_index(_set_grad)`: the source coordinate and
/// d source / d grid.
#[inline(always)]
fn source_index<A: G>(coord: A, size: usize, spec: &GridSpec) -> (A, A) {
    let (u, gu) = unnormalize(coord, size, spec.align_corners);
    let (v, gp) = pad_coord(u, size, spec.padding, spec.align_corners);
    (safe(v), gu * gp)
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
fn cubic_coeffs<A: G>(t: A) -> [A; 4] {
    let a: A = c(-0.75);
    let one = A::ONE;
    let conv1 = |x: A| ((a + c(2.0)) * x - (a + c(3.0))) * x * x + one;
    let conv2 = |x: A| ((a * x - c::<A>(5.0) * a) * x + c::<A>(8.0) * a) * x - c::<A>(4.0) * a;
    let x2 = one - t;
    [conv2(t + one), conv1(t), conv1(x2), conv2(x2 + one)]
}

/// d coefficients / d t.
#[inline(always)]
fn cubic_coeffs_grad<A: G>(t: A) -> [A; 4] {
    let a: A = c(-0.75);
    let (n3, n2, n10, n8): (A, A, A, A) = (c(3.0), c(2.0), c(10.0), c(8.0));
    let z = A::ZERO;
    let x = z - A::ONE - t;
    let g0 = ((z - n3) * a * x - n10 * a) * x - n8 * a;
    let x = z - t;
    let g1 = ((z - n3) * (a + n2) * x - n2 * (a + n3)) * x;
    let x = A::ONE - t;
    let g2 = (n3 * (a + n2) * x - n2 * (a + n3)) * x;
    let x = n2 - t;
    let g3 = (n3 * a * x - n10 * a) * x + n8 * a;
    [g0, g1, g2, g3]
}

/// The input position of a bicubic tap (padding applied, then truncated).
#[inline(always)]
fn tap<A: G>(v: i64, size: usize, spec: &GridSpec) -> i64 {
    let (p, _) = pad_coord::<A>(c(v as f64), size, spec.padding, spec.align_corners);
    safe(p).to_f64() as i64
}

struct Views<'a> {
    k: usize,
    input: &'a Strided,
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
    let op = if k == 3 { "grid_sampler_3d" } else { "grid_sampler_2d" };
    if !(k == 2 || k == 3) || (k == 3 && spec.mode == BICUBIC) || !(0..=2).contains(&spec.mode) {
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
                op: if k == 3 { "grid_sampler_3d_cpu" } else { "grid_sampler_2d_cpu" },
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
        input,
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
        let (b, r) = (task / rows, task % rows);
        for j in r * row..(r + 1) * row {
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
                    let mut ix = [T::Acc::ZERO; 3];
                    let mut lo = [0i64; 3];
                    for i in 0..k {
                        ix[i] = source_index(g[i], v.isz[i], &spec).0;
                        lo[i] = ix[i].floor().to_f64() as i64;
                    }
                    // Corner weights, x fastest.
                    let mut corners = [([0i64; 3], T::Acc::ZERO); 8];
                    for (cidx, cw) in corners.iter_mut().enumerate().take(1 << k) {
                        let mut p = [0i64; 3];
                        let mut w = T::Acc::ONE;
                        for i in 0..k {
                            let hi = (cidx >> i) & 1 == 1;
                            p[i] = lo[i] + hi as i64;
                            // The weight of a corner is the distance to the opposite one.
                            let f = if hi {
                                ix[i] - T::Acc::from_f64(lo[i] as f64)
                            } else {
                                T::Acc::from_f64((lo[i] + 1) as f64) - ix[i]
                            };
                            w = if i == 0 { f } else { w * f };
                        }
                        *cw = (p, w);
                    }
                    for cc in 0..ch {
                        let cb = ibase + cc as isize * isc;
                        let mut acc = T::Acc::ZERO;
                        for &(p, w) in corners.iter().take(1 << k) {
                            if inside(p, v.isz, k) {
                                acc = acc + ld::<T>(ip, cb + at(p, v.ist, k)) * w;
                            }
                        }
                        put(cc, acc);
                    }
                }
                NEAREST => {
                    let mut p = [0i64; 3];
                    for i in 0..k {
                        p[i] = source_index(g[i], v.isz[i], &spec).0.nearbyint().to_f64() as i64;
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
                    // Bicubic (2-d): unnormalized (padding applies per tap).
                    let (x, _) = unnormalize(g[0], v.isz[0], spec.align_corners);
                    let (y, _) = unnormalize(g[1], v.isz[1], spec.align_corners);
                    let (x0, y0) = (x.floor(), y.floor());
                    let cx = cubic_coeffs(x - x0);
                    let cy = cubic_coeffs(y - y0);
                    let (x0, y0) = (x0.to_f64() as i64, y0.to_f64() as i64);
                    let xs = [0, 1, 2, 3].map(|i| tap::<T::Acc>(x0 - 1 + i, v.isz[0], &spec));
                    let ys = [0, 1, 2, 3].map(|j| tap::<T::Acc>(y0 - 1 + j, v.isz[1], &spec));
                    for cc in 0..ch {
                        let cb = ibase + cc as isize * isc;
                        let val = |i: usize, j: usize| {
                            let p = [xs[i], ys[j], 0];
                            if inside(p, v.isz, 2) {
                                ld::<T>(ip, cb + at(p, v.ist, 2))
                            } else {
                                T::Acc::ZERO
                            }
                        };
                        let mut rows = [T::Acc::ZERO; 4];
                        for (j, r) in rows.iter_mut().enumerate() {
                            *r = val(0, j) * cx[0] + val(1, j) * cx[1] + val(2, j) * cx[2] + val(3, j) * cx[3];
                        }
                        put(
                            cc,
                            rows[0] * cy[0] + rows[1] * cy[1] + rows[2] * cy[2] + rows[3] * cy[3],
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
    if !(k == 2 || k == 3) || (k == 3 && spec.mode == BICUBIC) || !(0..=2).contains(&spec.mode) {
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
                    let mut ix = [T::Acc::ZERO; 3];
                    let mut lo = [0i64; 3];
                    for i in 0..k {
                        let (s, m) = source_index(g[i], v.isz[i], &spec);
                        ix[i] = s;
                        mult[i] = m;
                        lo[i] = s.floor().to_f64() as i64;
                    }
                    // Per corner: position, per-dim factors and sign.
                    let mut f = [[T::Acc::ZERO; 3]; 8];
                    let mut pos = [[0i64; 3]; 8];
                    for cidx in 0..1 << k {
                        for i in 0..k {
                            let hi = (cidx >> i) & 1 == 1;
                            pos[cidx][i] = lo[i] + hi as i64;
                            f[cidx][i] = if hi {
                                ix[i] - T::Acc::from_f64(lo[i] as f64)
                            } else {
                                T::Acc::from_f64((lo[i] + 1) as f64) - ix[i]
                            };
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
                        p[i] = source_index(g[i], v.isz[i], &spec).0.nearbyint().to_f64() as i64;
                    }
                    if inside(p, v.isz, k) {
                        for cc in 0..ch {
                            add(cc, p, gout(cc));
                        }
                    }
                }
                _ => {
                    let (x, mx) = unnormalize(g[0], v.isz[0], spec.align_corners);
                    let (y, my) = unnormalize(g[1], v.isz[1], spec.align_corners);
                    mult[0] = mx;
                    mult[1] = my;
                    let (x0, y0) = (x.floor(), y.floor());
                    let (tx, ty) = (x - x0, y - y0);
                    let (cx, cy) = (cubic_coeffs(tx), cubic_coeffs(ty));
                    let (dx, dy) = (cubic_coeffs_grad(tx), cubic_coeffs_grad(ty));
                    let (x0, y0) = (x0.to_f64() as i64, y0.to_f64() as i64);
                    let xs = [0, 1, 2, 3].map(|i| tap::<T::Acc>(x0 - 1 + i, v.isz[0], &spec));
                    let ys = [0, 1, 2, 3].map(|j| tap::<T::Acc>(y0 - 1 + j, v.isz[1], &spec));
                    for cc in 0..ch {
                        let gv = gout(cc);
                        let cb = ibase + cc as isize * isc;
                        for i in 0..4 {
                            for j in 0..4 {
                                let p = [xs[i], ys[j], 0];
                                if !inside(p, v.isz, 2) {
                                    continue;
                                }
                                add(cc, p, gv * cx[i] * cy[j]);
                                let val = ld::<T>(ip, cb + at(p, v.ist, 2));
                                gcoord[0] = gcoord[0] - val * dx[i] * cy[j] * gv;
                                gcoord[1] = gcoord[1] - val * dy[j] * cx[i] * gv;
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
