//! Complex pointwise math (complex64/complex128 operands or results): the
//! complex side of `ew_unary` / `ew_binary` / `ew_ternary`, with the same
//! calling convention as the real engine (output preallocated with the
//! broadcast shape and result dtype, `ct` the common dtype torch's
//! promotion gives). Operands of any dtype load as complex (real part, 0),
//! are rounded to `ct` (complex64 computes on complex64 inputs, as CPU's
//! casts do), and the op runs in `Complex<f64>`; a real result (abs, angle)
//! stores the real part, a bool result (eq, isnan, ...) whether it is
//! nonzero. The formulas are ATen's / c10's (division, expm1, log1p, pow's
//! special exponents, sgn), so values match CPU within rounding.

use super::super::copy::Scalar as _;
use super::super::index::walk;
use super::super::{KernelError, Strided, Strides};
use crate::dispatch_dtype;
use crate::dtype::DType;
use num_complex::Complex64 as C;

/// A complex-path operand: a tensor view of any dtype, or a number.
#[derive(Clone, Copy)]
pub enum COperand<'a> {
    Tensor(&'a Strided),
    Number(C),
}

/// A parameter of a complex-path op (after the operands, schema order).
#[derive(Clone, Debug)]
pub enum CParam {
    None,
    Number(C),
    Str(String),
}

impl CParam {
    fn num(&self) -> Option<C> {
        match self {
            CParam::Number(c) => Some(*c),
            _ => None,
        }
    }
}

fn unsupported(op: &str) -> KernelError {
    KernelError::InvalidArgument(format!("foo: {op} has no complex kernel"))
}

type Load = unsafe fn(*const u8, isize) -> C;
type Store = unsafe fn(*mut u8, isize, C);

unsafe fn load_c64(p: *const u8, o: isize) -> C {
    let q = (p as *const f32).offset(2 * o);
    C::new(*q as f64, *q.add(1) as f64)
}
unsafe fn load_c128(p: *const u8, o: isize) -> C {
    let q = (p as *const f64).offset(2 * o);
    C::new(*q, *q.add(1))
}
unsafe fn store_c64(p: *mut u8, o: isize, v: C) {
    let q = (p as *mut f32).offset(2 * o);
    *q = v.re as f32;
    *q.add(1) = v.im as f32;
}
unsafe fn store_c128(p: *mut u8, o: isize, v: C) {
    let q = (p as *mut f64).offset(2 * o);
    *q = v.re;
    *q.add(1) = v.im;
}

fn loader(dtype: DType) -> Load {
    match dtype {
        DType::C64 => load_c64,
        DType::C128 => load_c128,
        DType::Bool => {
            unsafe fn f(p: *const u8, o: isize) -> C {
                C::new((*p.offset(o) != 0) as u8 as f64, 0.0)
            }
            f
        }
        d => dispatch_dtype!(d, T => {
            unsafe fn f(p: *const u8, o: isize) -> C {
                C::new((*(p as *const T).offset(o)).to_f64(), 0.0)
            }
            f as Load
        }),
    }
}

fn storer(dtype: DType) -> Store {
    match dtype {
        DType::C64 => store_c64,
        DType::C128 => store_c128,
        DType::Bool => {
            unsafe fn f(p: *mut u8, o: isize, v: C) {
                *p.offset(o) = (v.re != 0.0 || v.im != 0.0) as u8;
            }
            f
        }
        d => dispatch_dtype!(d, T => {
            unsafe fn f(p: *mut u8, o: isize, v: C) {
                *(p as *mut T).offset(o) = <T as super::super::copy::Scalar>::from_f64(v.re);
            }
            f as Store
        }),
    }
}

/// Strides of `t` broadcast to `shape` (trailing alignment, 0 where it has
/// size 1 or no dim).
fn broadcast_strides(t: &Strided, shape: &[usize]) -> Result<Strides, KernelError> {
    let (n, m) = (shape.len(), t.sizes.len());
    if m > n {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: operand {:?} does not broadcast to {:?}",
            t.sizes, shape
        )));
    }
    let mut s: Strides = std::iter::repeat_n(0isize, n).collect();
    for k in 0..m {
        let (d, sz) = (n - m + k, t.sizes[k]);
        if sz == shape[d] {
            s[d] = if sz == 1 { 0 } else { t.strides[k] };
        } else if sz != 1 {
            return Err(KernelError::ShapeMismatch(format!(
                "foo: operand {:?} does not broadcast to {:?}",
                t.sizes, shape
            )));
        }
    }
    Ok(s)
}

/// Rounds a loaded value to the precision of the compute dtype.
#[inline(always)]
fn round_to(v: C, single: bool) -> C {
    if single {
        C::new(v.re as f32 as f64, v.im as f32 as f64)
    } else {
        v
    }
}

/// `out[i] = f(ins[0][i], ins[1][i], ...)` over `out`'s shape, inputs
/// broadcast, loaded as complex and rounded to `ct`.
fn map<const N: usize>(
    out: &Strided,
    ins: [COperand; N],
    ct: DType,
    f: impl Fn([C; N]) -> C + Sync,
) -> Result<(), KernelError> {
    let n = out.numel();
    if n == 0 {
        return Ok(());
    }
    let single = matches!(ct, DType::C64 | DType::F32 | DType::F16 | DType::BF16);
    let mut strides: Vec<Strides> = vec![out.strides.clone()];
    let mut loads: Vec<(Load, usize, C)> = Vec::with_capacity(N);
    for x in ins.iter() {
        match x {
            COperand::Tensor(t) => {
                strides.push(broadcast_strides(t, &out.sizes)?);
                loads.push((loader(t.dtype), t.ptr as usize, C::new(0.0, 0.0)));
            }
            COperand::Number(c) => {
                strides.push(std::iter::repeat_n(0isize, out.sizes.len()).collect());
                unsafe fn zero(_: *const u8, _: isize) -> C {
                    C::new(0.0, 0.0)
                }
                loads.push((zero, 0, round_to(*c, single)));
            }
        }
    }
    let store = storer(out.dtype);
    let optr = out.ptr as usize;
    let sizes = &out.sizes;
    let run = |start: usize, len: usize| {
        walk(sizes, &strides, start, len, |o| {
            let mut v = [C::new(0.0, 0.0); N];
            for (k, &(ld, p, c)) in loads.iter().enumerate() {
                // SAFETY: offsets of the operand's own (broadcast) view.
                v[k] = if p == 0 {
                    c
                } else {
                    round_to(unsafe { ld(p as *const u8, o[k + 1]) }, single)
                };
            }
            // SAFETY: the output view's own offsets; each written once.
            unsafe { store(optr as *mut u8, o[0], f(v)) };
        });
    };
    let pm = super::super::reduce::par_min();
    if n < pm.max(2) {
        run(0, n);
    } else {
        let nchunks = n
            .div_ceil((pm / 4).max(1))
            .clamp(1, super::super::parallel::num_threads() * 4);
        let chunk = n.div_ceil(nchunks);
        super::super::parallel::parallel_for(nchunks, |c| {
            let s = c * chunk;
            if s < n {
                run(s, chunk.min(n - s));
            }
        });
    }
    Ok(())
}

/// c10::complex's division (numpy's scaled form): `a / b`.
#[inline]
pub fn div(a: C, b: C) -> C {
    let (ar, ai, c, d) = (a.re, a.im, b.re, b.im);
    let (abs_c, abs_d) = (c.abs(), d.abs());
    if abs_c >= abs_d {
        if abs_c == 0.0 && abs_d == 0.0 {
            C::new(ar / abs_c, ai / abs_d)
        } else {
            let rat = d / c;
            let scl = 1.0 / (c + d * rat);
            C::new((ar + ai * rat) * scl, (ai - ar * rat) * scl)
        }
    } else {
        let rat = c / d;
        let scl = 1.0 / (d + c * rat);
        C::new((ar * rat + ai) * scl, (ai * rat - ar) * scl)
    }
}

fn bool_c(b: bool) -> C {
    C::new(b as u8 as f64, 0.0)
}

fn nonzero(z: C) -> bool {
    z.re != 0.0 || z.im != 0.0
}

fn recip(z: C) -> C {
    div(C::new(1.0, 0.0), z)
}

/// std::pow(complex, complex) as glibc's cpow: exp(y log x), 0 for x = 0
/// (1 for y = 0).
pub fn pow(x: C, y: C) -> C {
    if y.re == 0.0 && y.im == 0.0 {
        return C::new(1.0, 0.0);
    }
    if x.re == 0.0 && x.im == 0.0 {
        return if y.re > 0.0 {
            C::new(0.0, 0.0)
        } else {
            C::new(f64::INFINITY, f64::NAN)
        };
    }
    (y * x.ln()).exp()
}

/// ATen's pow(tensor, scalar) for complex: the exponents it special-cases
/// (0, 1, ±0.5, -1, 2, 3, -2) and std::pow otherwise.
fn pow_scalar(x: C, e: C) -> C {
    if e.im == 0.0 {
        match e.re {
            0.0 => return C::new(1.0, 0.0),
            1.0 => return x,
            0.5 => return x.sqrt(),
            -0.5 => return recip(x.sqrt()),
            -1.0 => return recip(x),
            2.0 => return x * x,
            3.0 => return x * x * x,
            -2.0 => return recip(x * x),
            _ => {}
        }
    }
    pow(x, e)
}

/// ATen's complex sgn: z / |z|, 0 at 0.
fn sgn(z: C) -> C {
    if !nonzero(z) {
        return C::new(0.0, 0.0);
    }
    let a = z.norm();
    C::new(z.re / a, z.im / a)
}

/// ATen's complex expm1: expm1(x) cos(y) - 2 sin(y/2)^2 + i e^x sin(y).
fn expm1(z: C) -> C {
    let (x, y) = (z.re, z.im);
    let s = (y / 2.0).sin();
    C::new(x.exp_m1() * y.cos() - 2.0 * s * s, x.exp() * y.sin())
}

/// ATen's complex log1p (no cancellation near 0).
fn log1p(z: C) -> C {
    let (x, y) = (z.re, z.im);
    let theta = y.atan2(x + 1.0);
    if z.norm() < 0.5 {
        let r = x * (2.0 + x) + y * y;
        if r == 0.0 {
            return C::new(x, theta);
        }
        C::new(0.5 * r.ln_1p(), theta)
    } else {
        C::new((x + 1.0).hypot(y).ln(), theta)
    }
}

/// ATen's complex sinc: sin(pi z) / (pi z), 1 at 0.
fn sinc(z: C) -> C {
    if !nonzero(z) {
        return C::new(1.0, 0.0);
    }
    let p = z * std::f64::consts::PI;
    div(p.sin(), p)
}

/// ATen's complex logaddexp: max + log1p(exp(min - max)), min and max by
/// real part; NaN in either operand gives NaN.
fn logaddexp(x: C, y: C) -> C {
    if x.re.is_nan() || x.im.is_nan() || y.re.is_nan() || y.im.is_nan() {
        return C::new(f64::NAN, f64::NAN);
    }
    let (lo, hi) = if x.re < y.re { (x, y) } else { (y, x) };
    if lo.re == f64::NEG_INFINITY {
        return hi;
    }
    log1p((lo - hi).exp()) + hi
}

fn sigmoid(z: C) -> C {
    recip(C::new(1.0, 0.0) + (-z).exp())
}

/// torch.angle: the argument of a complex number; of a real one, pi for
/// negatives, 0 otherwise, NaN kept.
fn angle(z: C, real: bool) -> C {
    if real {
        let a = z.re;
        let v = if a.is_nan() {
            a
        } else if a < 0.0 {
            std::f64::consts::PI
        } else {
            0.0
        };
        return C::new(v, 0.0);
    }
    C::new(z.im.atan2(z.re), 0.0)
}

fn nan_to_num(z: C, nan: f64, posinf: f64, neginf: f64) -> C {
    let f = |v: f64| {
        if v.is_nan() {
            nan
        } else if v == f64::INFINITY {
            posinf
        } else if v == f64::NEG_INFINITY {
            neginf
        } else {
            v
        }
    };
    C::new(f(z.re), f(z.im))
}

/// Whether the op names a real-input op the complex path also serves.
pub fn takes_real(op: &str) -> bool {
    op == "angle"
}

/// `out = op(x, *params)`.
pub fn unary(
    op: &str,
    params: &[CParam],
    out: &Strided,
    x: COperand,
    ct: DType,
) -> Result<(), KernelError> {
    let p0 = params.first().and_then(CParam::num);
    let ln2 = std::f64::consts::LN_2;
    let ln10 = std::f64::consts::LN_10;
    let i = [x];
    match op {
        "identity" => map(out, i, ct, |[z]| z),
        "neg" => map(out, i, ct, |[z]| -z),
        "conj" => map(out, i, ct, |[z]| z.conj()),
        "reciprocal" => map(out, i, ct, |[z]| recip(z)),
        "sign" | "sgn" => map(out, i, ct, |[z]| sgn(z)),
        "abs" => map(out, i, ct, |[z]| C::new(z.norm(), 0.0)),
        "angle" => {
            let real = match x {
                COperand::Tensor(t) => !t.dtype.is_complex(),
                COperand::Number(_) => false,
            };
            map(out, i, ct, move |[z]| angle(z, real))
        }
        "exp" => map(out, i, ct, |[z]| z.exp()),
        "exp2" => map(out, i, ct, |[z]| (z * ln2).exp()),
        "expm1" => map(out, i, ct, |[z]| expm1(z)),
        "log" => map(out, i, ct, |[z]| z.ln()),
        "log2" => map(out, i, ct, |[z]| z.ln() / ln2),
        "log10" => map(out, i, ct, |[z]| z.ln() / ln10),
        "log1p" => map(out, i, ct, |[z]| log1p(z)),
        "sqrt" => map(out, i, ct, |[z]| z.sqrt()),
        "rsqrt" => map(out, i, ct, |[z]| recip(z.sqrt())),
        "sin" => map(out, i, ct, |[z]| z.sin()),
        "cos" => map(out, i, ct, |[z]| z.cos()),
        "tan" => map(out, i, ct, |[z]| z.tan()),
        "asin" => map(out, i, ct, |[z]| z.asin()),
        "acos" => map(out, i, ct, |[z]| z.acos()),
        "atan" => map(out, i, ct, |[z]| z.atan()),
        "sinh" => map(out, i, ct, |[z]| z.sinh()),
        "cosh" => map(out, i, ct, |[z]| z.cosh()),
        "tanh" => map(out, i, ct, |[z]| z.tanh()),
        "asinh" => map(out, i, ct, |[z]| z.asinh()),
        "acosh" => map(out, i, ct, |[z]| z.acosh()),
        "atanh" => map(out, i, ct, |[z]| z.atanh()),
        "sigmoid" => map(out, i, ct, |[z]| sigmoid(z)),
        "sinc" => map(out, i, ct, |[z]| sinc(z)),
        "silu" => map(out, i, ct, |[z]| div(z, C::new(1.0, 0.0) + (-z).exp())),
        "isnan" => map(out, i, ct, |[z]| bool_c(z.re.is_nan() || z.im.is_nan())),
        "isinf" => map(out, i, ct, |[z]| {
            bool_c(z.re.is_infinite() || z.im.is_infinite())
        }),
        "isfinite" => map(out, i, ct, |[z]| {
            bool_c(z.re.is_finite() && z.im.is_finite())
        }),
        "logical_not" => map(out, i, ct, |[z]| bool_c(!nonzero(z))),
        "nan_to_num" => {
            let (big, low) = match out.dtype.to_real() {
                DType::F32 => (f32::MAX as f64, f32::MIN as f64),
                _ => (f64::MAX, f64::MIN),
            };
            let get = |k: usize, d: f64| params.get(k).and_then(CParam::num).map_or(d, |c| c.re);
            let (nan, pos, neg) = (get(0, 0.0), get(1, big), get(2, low));
            map(out, i, ct, move |[z]| nan_to_num(z, nan, pos, neg))
        }
        "pow_scalar" => {
            let e = p0.ok_or_else(|| unsupported("pow without exponent"))?;
            map(out, i, ct, move |[z]| pow_scalar(z, e))
        }
        "rpow_scalar" => {
            let b = p0.ok_or_else(|| unsupported("pow without base"))?;
            let b = round_to(b, ct == DType::C64);
            map(out, i, ct, move |[z]| pow(b, z))
        }
        _ => Err(unsupported(op)),
    }
}

/// `out = op(a, b, *params)`.
pub fn binary(
    op: &str,
    params: &[CParam],
    out: &Strided,
    a: COperand,
    b: COperand,
    ct: DType,
) -> Result<(), KernelError> {
    let i = [a, b];
    let p0 = params.first().and_then(CParam::num);
    match op {
        "add" | "sub" => {
            let alpha = p0.unwrap_or(C::new(1.0, 0.0));
            let s = if op == "sub" { -1.0 } else { 1.0 };
            map(out, i, ct, move |[x, y]| x + y * alpha * s)
        }
        "mul" => map(out, i, ct, |[x, y]| x * y),
        "div" => match params.first() {
            None | Some(CParam::None) => map(out, i, ct, |[x, y]| div(x, y)),
            _ => Err(unsupported("div with a rounding mode")),
        },
        "pow" => map(out, i, ct, |[x, y]| pow(x, y)),
        "logaddexp" => map(out, i, ct, |[x, y]| logaddexp(x, y)),
        "eq" => map(out, i, ct, |[x, y]| bool_c(x == y)),
        "ne" => map(out, i, ct, |[x, y]| bool_c(x != y)),
        "logical_and" => map(out, i, ct, |[x, y]| bool_c(nonzero(x) && nonzero(y))),
        "logical_or" => map(out, i, ct, |[x, y]| bool_c(nonzero(x) || nonzero(y))),
        "logical_xor" => map(out, i, ct, |[x, y]| bool_c(nonzero(x) != nonzero(y))),
        "lerp" => {
            let w = p0.ok_or_else(|| unsupported("lerp without weight"))?;
            map(out, i, ct, move |[x, y]| lerp(x, y, w))
        }
        _ => Err(unsupported(op)),
    }
}

/// ATen's lerp: from the nearer end (|w| < 0.5: start).
fn lerp(x: C, y: C, w: C) -> C {
    if w.norm() < 0.5 {
        x + w * (y - x)
    } else {
        y - (y - x) * (C::new(1.0, 0.0) - w)
    }
}

/// `out = op(a, b, c, *params)`.
pub fn ternary(
    op: &str,
    params: &[CParam],
    out: &Strided,
    a: COperand,
    b: COperand,
    c: COperand,
    ct: DType,
) -> Result<(), KernelError> {
    let i = [a, b, c];
    let value = params
        .first()
        .and_then(CParam::num)
        .unwrap_or(C::new(1.0, 0.0));
    match op {
        "where" => map(out, i, ct, |[m, x, y]| if nonzero(m) { x } else { y }),
        "lerp" => map(out, i, ct, |[x, y, w]| lerp(x, y, w)),
        "addcmul" => map(out, i, ct, move |[s, x, y]| s + value * x * y),
        "addcdiv" => map(out, i, ct, move |[s, x, y]| s + value * div(x, y)),
        _ => Err(unsupported(op)),
    }
}

/// Complex products along `dim` of `src`, in order: with `cumulative`,
/// `out` (src's shape) gets the running products (cumprod); otherwise `out`
/// (src's shape with `dim` of size 1) gets the whole product (prod).
/// Accumulates in `Complex<f64>`, rounded once per stored element.
pub fn prod_dim(
    out: &Strided,
    src: &Strided,
    dim: usize,
    cumulative: bool,
) -> Result<(), KernelError> {
    let nd = src.sizes.len();
    let fits = dim < nd
        && out.sizes.len() == nd
        && (0..nd).all(|d| {
            out.sizes[d] == src.sizes[d] || (d == dim && !cumulative && out.sizes[d] == 1)
        });
    if !fits || !src.dtype.is_complex() || !out.dtype.is_complex() {
        return Err(KernelError::ShapeMismatch(format!(
            "foo complex prod: output {:?} does not fit input {:?} along {dim}",
            out.sizes, src.sizes
        )));
    }
    let mut outer = src.sizes.clone();
    let n = outer[dim];
    outer[dim] = 1;
    let m: usize = outer.iter().product();
    if m == 0 {
        return Ok(());
    }
    let (ld, st) = (loader(src.dtype), storer(out.dtype));
    let (sp, op) = (src.ptr as usize, out.ptr as usize);
    let (ss, os) = (src.strides[dim], out.strides[dim]);
    let strides = [out.strides.clone(), src.strides.clone()];
    let run = |start: usize, len: usize| {
        walk(&outer, &strides, start, len, |o| {
            let mut acc = C::new(1.0, 0.0);
            for j in 0..n as isize {
                // SAFETY: offsets inside both views along `dim`.
                unsafe {
                    acc *= ld(sp as *const u8, o[1] + j * ss);
                    if cumulative {
                        st(op as *mut u8, o[0] + j * os, acc);
                    }
                }
            }
            if !cumulative {
                // SAFETY: the output's element for this outer position.
                unsafe { st(op as *mut u8, o[0], acc) };
            }
        });
    };
    let pm = super::super::reduce::par_min();
    if m * n.max(1) < pm.max(2) || m < 2 {
        run(0, m);
    } else {
        let nchunks = m.clamp(1, super::super::parallel::num_threads() * 4);
        let chunk = m.div_ceil(nchunks);
        super::super::parallel::parallel_for(nchunks, |c| {
            let s = c * chunk;
            if s < m {
                run(s, chunk.min(m - s));
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_follows_c10() {
        let q = div(C::new(1.0, 2.0), C::new(3.0, -4.0));
        assert!((q - C::new(-0.2, 0.4)).norm() < 1e-15);
        let q = div(C::new(1.0, 1.0), C::new(0.0, 0.0));
        assert!(q.re.is_infinite() && q.im.is_infinite());
    }

    #[test]
    fn maps_broadcast_and_cast() {
        // complex64 [1+2j, 3-1j] * real f64 column [[2], [0]] -> complex64 2x2.
        let mut a = [1.0f32, 2.0, 3.0, -1.0];
        let mut b = [2.0f64, 0.0];
        let mut o = [0f32; 8];
        let av = Strided::new(a.as_mut_ptr() as *mut u8, DType::C64, vec![2], vec![1]);
        let bv = Strided::new(
            b.as_mut_ptr() as *mut u8,
            DType::F64,
            vec![2, 1],
            vec![1, 1],
        );
        let ov = Strided::new(
            o.as_mut_ptr() as *mut u8,
            DType::C64,
            vec![2, 2],
            vec![2, 1],
        );
        binary(
            "mul",
            &[],
            &ov,
            COperand::Tensor(&av),
            COperand::Tensor(&bv),
            DType::C64,
        )
        .unwrap();
        assert_eq!(o, [2.0, 4.0, 6.0, -2.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
