//! `extern "C"` entry points of the native path: the C++ kernels in
//! rust/glue/native.cpp run ATen's own meta functions (shapes, type
//! promotion, argument checks, output allocation) and then call these with
//! views of the operands, so a call from the dispatcher reaches Rust with no
//! Python in between.
//!
//! Every entry point is total: it refuses in a bad-fork child, catches
//! panics, and answers with a status code:
//! [`OK`], [`ERROR`] (with the Python exception class and message in
//! [`FooStatus`]: [`KernelError::kind`], the one mapping) or [`SLOW`]: the
//! kernel does not handle this dtype, and the C++ kernel hands the call to
//! the op's Python kernel (which knows CPU's exact error for it).

use crate::dtype::DType;
use crate::kernels::attention::{Dropout, Sdpa};
use crate::kernels::copy::Number;
use crate::kernels::elementwise::spec::{self, Param, Params};
use crate::kernels::elementwise::{self as ew, Operand, Scalar};
use crate::kernels::linalg::Coef;
use crate::kernels::random::Distribution;
use crate::kernels::reduce::ReduceOp;
use crate::kernels::{entry, ErrorKind, KernelError, Strided, ViewRef};
use std::ffi::{c_char, c_void, CStr};

pub const OK: i32 = 0;
pub const ERROR: i32 = 1;
pub const SLOW: i32 = 2;

/// Most parameters an elementwise op takes on the native path.
const MAX_PARAMS: usize = 4;

/// A tensor as the glue passes it: `sizes` and `strides` (in elements)
/// point at `ndim` values each; `dtype` is a [`DType`] code.
#[repr(C)]
pub struct FooView {
    pub ptr: *mut c_void,
    pub ndim: i64,
    pub sizes: *const i64,
    pub strides: *const i64,
    pub dtype: u8,
}

/// An op parameter: `kind` 0 int (`i`), 1 float (`f`), 2 bool (`i`),
/// 3 None, 4 string (`s`, NUL-terminated).
#[repr(C)]
pub struct FooParam {
    pub kind: u8,
    pub i: i64,
    pub f: f64,
    pub s: *const c_char,
}

/// An elementwise operand: a view, or (`is_scalar`) a number.
#[repr(C)]
pub struct FooOperand {
    pub view: FooView,
    pub is_scalar: u8,
    pub scalar: FooParam,
}

/// Where an entry point reports an error: the exception class
/// ([`ErrorKind`] as i32) and a NUL-terminated message.
#[repr(C)]
pub struct FooStatus {
    pub kind: i32,
    pub msg: [c_char; 512],
}

/// The foo dtype code of a c10 `ScalarType`, or -1 if foo cannot hold it
/// (or after a panic: the type is then treated as one foo cannot hold).
#[no_mangle]
pub extern "C" fn foo_rs_dtype_code(scalar_type: i32) -> i32 {
    crate::ffi::catch_panic(|| DType::from_c10(scalar_type).map_or(-1, |d| d as i32)).unwrap_or(-1)
}

/// The names of the dtypes foo holds, in code order, comma-separated
/// (NUL-terminated, static): for the glue's "does not support dtype" error.
#[no_mangle]
pub extern "C" fn foo_rs_dtype_names() -> *const c_char {
    static NAMES: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| {
            let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
            std::ffi::CString::new(names.join(", ")).unwrap()
        })
        .as_ptr()
}

fn invalid(msg: impl Into<String>) -> KernelError {
    KernelError::InvalidArgument(msg.into())
}

/// # Safety
/// `v` points at a valid [`FooView`] whose arrays hold `ndim` values.
unsafe fn strided_of(v: *const FooView) -> Result<Strided, KernelError> {
    Ok(view_of(v)?.to_strided())
}

/// The view `v` describes, borrowing its arrays: `strided_of` without
/// copying the dims (for entries that may not need a [`Strided`]).
///
/// # Safety
/// As [`strided_of`]; the view's arrays outlive the result.
unsafe fn view_of<'a>(v: *const FooView) -> Result<ViewRef<'a>, KernelError> {
    let v = v.as_ref().ok_or_else(|| invalid("foo: missing operand"))?;
    let dtype = DType::from_code(v.dtype)
        .ok_or_else(|| invalid(format!("foo: unknown dtype code {}", v.dtype)))?;
    let nd = usize::try_from(v.ndim).map_err(|_| invalid("foo: negative rank"))?;
    if nd == 0 {
        return Ok(ViewRef {
            ptr: v.ptr as *mut u8,
            dtype,
            sizes: &[],
            strides: &[],
        });
    }
    let sizes = std::slice::from_raw_parts(v.sizes, nd);
    if sizes.iter().any(|&n| n < 0) {
        return Err(invalid("foo: negative size"));
    }
    // i64 and usize/isize have one layout on the 64-bit targets foo builds
    // for, so the caller's arrays are read as they are.
    const _: () = assert!(std::mem::size_of::<usize>() == std::mem::size_of::<i64>());
    Ok(ViewRef {
        ptr: v.ptr as *mut u8,
        dtype,
        sizes: std::slice::from_raw_parts(sizes.as_ptr() as *const usize, nd),
        strides: std::slice::from_raw_parts(v.strides as *const isize, nd),
    })
}

/// # Safety
/// `v` is null or as in [`strided_of`].
unsafe fn opt_strided(v: *const FooView) -> Result<Option<Strided>, KernelError> {
    if v.is_null() {
        Ok(None)
    } else {
        strided_of(v).map(Some)
    }
}

/// # Safety
/// A string parameter's `s` is a valid NUL-terminated string.
unsafe fn param(p: &FooParam) -> Result<Param, KernelError> {
    Ok(match p.kind {
        0 => Param::Number(Scalar::Int(p.i)),
        1 => Param::Number(Scalar::Float(p.f)),
        2 => Param::Number(Scalar::Bool(p.i != 0)),
        3 => Param::None,
        4 if !p.s.is_null() => Param::Str(CStr::from_ptr(p.s).to_string_lossy().into_owned()),
        k => return Err(invalid(format!("foo: bad parameter kind {k}"))),
    })
}

fn number(p: Param) -> Result<Scalar, KernelError> {
    match p {
        Param::Number(s) => Ok(s),
        _ => Err(invalid("foo: expected a number")),
    }
}

fn coef(s: Scalar) -> Coef {
    match s {
        Scalar::Float(f) => Coef::float(f),
        Scalar::Int(i) => Coef::int(i),
        Scalar::Bool(b) => Coef::int(b as i64),
    }
}

fn report(st: *mut FooStatus, kind: ErrorKind, msg: &str) -> i32 {
    // SAFETY: the glue passes a valid, writable status.
    if let Some(st) = unsafe { st.as_mut() } {
        st.kind = kind as i32;
        crate::ffi::write_message(st.msg.as_mut_ptr(), st.msg.len(), msg);
    }
    ERROR
}

/// `n` values at `p` (may be null when `n` is 0) as `usize`s; a negative
/// one is an error naming `what`.
///
/// # Safety
/// `p` holds `n` values when `n` > 0.
unsafe fn non_negative(p: *const i64, n: usize, what: &str) -> Result<Vec<usize>, KernelError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    std::slice::from_raw_parts(p, n)
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| invalid(format!("foo: negative {what}"))))
        .collect()
}

/// Runs one native-path call: bad-fork check, panic barrier (the one of
/// every entry point, [`crate::ffi::catch_panic`]; the panic's message goes
/// to the status), status code.
fn run(st: *mut FooStatus, index_errors: bool, f: impl FnOnce() -> Result<(), KernelError>) -> i32 {
    // A child forked after foo initialised refuses like every other entry
    // point (in-place ops never allocate, so the allocator's check is not enough).
    if crate::fork::in_bad_fork() {
        return report(st, ErrorKind::Runtime, crate::fork::BAD_FORK_MESSAGE);
    }
    match crate::ffi::catch_panic(f) {
        Ok(Ok(())) => OK,
        Ok(Err(KernelError::UnsupportedDtype { .. })) => SLOW,
        Ok(Err(e)) => report(st, e.kind(index_errors), &e.to_string()),
        Err(msg) => report(st, ErrorKind::Runtime, &msg),
    }
}

/// Elementwise op `name` (the shared op table, kernels/elementwise/spec.rs)
/// computing in dtype code `ct`: `ops[0]` is the output, `ops[1..n]` the
/// inputs (1-3), all views of one shape (broadcast dims have stride 0);
/// "identity" copies with a dtype cast. `iter` != 0: the views are an ATen
/// `TensorIterator`'s ([`ew::Layout::Iter`]: dims innermost first and
/// coalesced, overlap checked), so the engine does not redo that.
///
/// # Safety
/// `name` is a NUL-terminated string; `ops` holds `n` operands and `ps` `np`
/// parameters, as described on their types; the views describe live memory.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_ew(
    name: *const c_char,
    ct: u8,
    ops: *const FooOperand,
    n: usize,
    ps: *const FooParam,
    np: usize,
    iter: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        // Op names are ASCII: checking that is a few word compares, where
        // `to_str`'s UTF-8 validation was about 100 instructions per call.
        let name = CStr::from_ptr(name).to_bytes();
        if !name.is_ascii() {
            return Err(invalid("foo: bad op name"));
        }
        // SAFETY: ASCII bytes are valid UTF-8.
        let name = std::str::from_utf8_unchecked(name);
        if !(2..=4).contains(&n) {
            return Err(invalid("foo: elementwise ops take 1 to 3 inputs"));
        }
        let ct = DType::from_code(ct).ok_or_else(|| invalid("foo: unknown compute dtype"))?;
        let ops = std::slice::from_raw_parts(ops, n);
        let out = strided_of(&ops[0].view)?;
        // Tensor inputs are kept alive here; operands borrow them. Fixed
        // arrays, not vectors: no allocation per call for the bookkeeping.
        let mut views: [Option<Strided>; 3] = [None, None, None];
        let mut nums = [Scalar::Int(0); 3];
        for (k, op) in ops[1..].iter().enumerate() {
            if op.is_scalar != 0 {
                nums[k] = number(param(&op.scalar)?)?;
            } else {
                views[k] = Some(strided_of(&op.view)?);
            }
        }
        let operand = |i: usize| match &views[i] {
            Some(t) => Operand::Tensor(t),
            None => Operand::Scalar(nums[i]),
        };
        if np > MAX_PARAMS {
            return Err(invalid("foo: too many op parameters"));
        }
        let mut items: [Param; MAX_PARAMS] = std::array::from_fn(|_| Param::None);
        if np > 0 {
            for (slot, p) in items.iter_mut().zip(std::slice::from_raw_parts(ps, np)) {
                *slot = param(p)?;
            }
        }
        let p = Params::new(name, &items[..np]);
        let target = if iter != 0 {
            ew::Target::iter(&out)
        } else {
            ew::Target::from(&out)
        };
        match n - 1 {
            1 if name == "identity" => ew::identity(target, operand(0)),
            1 => ew::unary(&spec::unary(name, &p)?, target, operand(0), ct),
            2 => ew::binary(&spec::binary(name, &p)?, target, operand(0), operand(1), ct),
            _ => ew::ternary(
                &spec::ternary(name, &p)?,
                target,
                operand(0),
                operand(1),
                operand(2),
                ct,
            ),
        }
    })
}

/// Every element of `out` set to the number `value` (`fill_`, `zero_`),
/// converted as the elementwise engine converts scalars: the elementwise
/// entry's "identity" with a number, minus its operand and parameter
/// handling (a contiguous `out` is one plain fill, `iter::run_fill`).
///
/// # Safety
/// As [`foo_rs_ew`]; `value` points to one parameter.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_fill(
    out: *const FooView,
    value: *const FooParam,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let out = strided_of(out)?;
        ew::identity(&out, Operand::Scalar(fill_value(value)?))
    })
}

/// The number a fill entry ([`foo_rs_fill`], [`foo_rs_fill_dense`]) stores.
///
/// # Safety
/// `value` is null or points to one parameter.
unsafe fn fill_value(value: *const FooParam) -> Result<Scalar, KernelError> {
    let value = value
        .as_ref()
        .ok_or_else(|| invalid("foo: missing fill value"))?;
    number(param(value)?)
}

/// [`foo_rs_fill`] for a contiguous tensor: `n` elements of dtype code
/// `dtype` from `ptr` (no view to read; `zero_` on a small tensor is mostly
/// this call's fixed cost).
///
/// # Safety
/// `ptr` holds `n` writable elements of `dtype`; `value` points to one parameter.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_fill_dense(
    ptr: *mut c_void,
    n: usize,
    dtype: u8,
    value: *const FooParam,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dtype = DType::from_code(dtype).ok_or_else(|| invalid("foo: unknown dtype code"))?;
        ew::fill_dense(ptr as *mut u8, n, dtype, fill_value(value)?)
    })
}

/// `zero_` of a contiguous tensor: `n` elements of dtype code `dtype` from
/// `ptr` set to zero ([`ew::zero_dense`]; no value to convert).
///
/// # Safety
/// `ptr` holds `n` writable elements of `dtype`.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_zero_dense(
    ptr: *mut c_void,
    n: usize,
    dtype: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dtype = DType::from_code(dtype).ok_or_else(|| invalid("foo: unknown dtype code"))?;
        ew::zero_dense(ptr as *mut u8, n, dtype.size());
        Ok(())
    })
}

/// Reduction `name` ([`ReduceOp::by_name`]) of `inp` over `dims` into `out`
/// (and `out2`, may be null), as [`entry::reduce`].
///
/// # Safety
/// As [`foo_rs_ew`]; `dims` holds `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_reduce(
    name: *const c_char,
    out: *const FooView,
    out2: *const FooView,
    inp: *const FooView,
    dims: *const i64,
    ndims: usize,
    correction: f64,
    ord: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let name = CStr::from_ptr(name).to_string_lossy();
        let op = ReduceOp::by_name(&name, correction, ord)
            .ok_or_else(|| invalid(format!("foo: unknown reduction {name:?}")))?;
        let dims = non_negative(dims, ndims, "dim")?;
        let (o, o2, i) = (strided_of(out)?, opt_strided(out2)?, strided_of(inp)?);
        entry::reduce(op, o, o2, &i, &dims)
    })
}

/// `out = beta * input + alpha * (a @ b)` (`input` may be null), 2-d or
/// (`batched`) 3-d.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_addmm(
    out: *const FooView,
    input: *const FooView,
    a: *const FooView,
    b: *const FooView,
    beta: FooParam,
    alpha: FooParam,
    batched: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, i) = (strided_of(out)?, opt_strided(input)?);
        let (a, b) = (strided_of(a)?, strided_of(b)?);
        let (beta, alpha) = (coef(number(param(&beta)?)?), coef(number(param(&alpha)?)?));
        entry::addmm(&o, i.as_ref(), &a, &b, beta, alpha, batched != 0)
    })
}

/// `out = (log_)softmax(inp, dim)`.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_softmax(
    out: *const FooView,
    inp: *const FooView,
    dim: i64,
    log: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dim = usize::try_from(dim).map_err(|_| invalid("foo: negative dim"))?;
        entry::softmax(&strided_of(out)?, &strided_of(inp)?, dim, log != 0)
    })
}

/// Gradient of (log_)softmax.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_softmax_backward(
    grad_input: *const FooView,
    grad: *const FooView,
    output: *const FooView,
    dim: i64,
    log: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dim = usize::try_from(dim).map_err(|_| invalid("foo: negative dim"))?;
        let (gi, g, y) = (
            strided_of(grad_input)?,
            strided_of(grad)?,
            strided_of(output)?,
        );
        entry::softmax_backward(&gi, &g, &y, dim, log != 0)
    })
}

/// Concatenates the `n` inputs along `dim` into `out` (each input has out's
/// rank and dtype; sizes match out's off `dim`; their extents along `dim`
/// add up to out's).
///
/// # Safety
/// As [`foo_rs_ew`]; `inputs` holds `n` views.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_cat(
    out: *const FooView,
    inputs: *const FooView,
    n: usize,
    dim: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dim = usize::try_from(dim).map_err(|_| invalid("foo: negative dim"))?;
        let raw = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(inputs, n)
        };
        // Borrowed views first: checked, and copied when all are contiguous
        // (a Strided per input, two dim arrays each, cost more than a small
        // cat's copy).
        let views = raw
            .iter()
            .map(|v| view_of(v))
            .collect::<Result<smallvec::SmallVec<[ViewRef; 8]>, _>>()?;
        let o = view_of(out)?;
        if crate::kernels::index::cat_views(o, &views, dim)? {
            return Ok(());
        }
        // The views already read and checked, with dims of their own.
        let ins: smallvec::SmallVec<[Strided; 4]> = views.iter().map(ViewRef::to_strided).collect();
        crate::kernels::index::cat_strided(&o.to_strided(), &ins, dim)
    })
}

/// Layer norm over the last `n` elements of each of `m` rows: `out`, and
/// per-row `mean` and `rstd` (all dense; `weight`, `bias` may be null).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_layer_norm(
    out: *const FooView,
    mean: *const FooView,
    rstd: *const FooView,
    x: *const FooView,
    weight: *const FooView,
    bias: *const FooView,
    m: i64,
    n: i64,
    eps: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (m, n) = (dim_of(m)?, dim_of(n)?);
        let (o, mu, r, x) = (
            strided_of(out)?,
            strided_of(mean)?,
            strided_of(rstd)?,
            strided_of(x)?,
        );
        let (w, b) = (opt_strided(weight)?, opt_strided(bias)?);
        crate::kernels::norm::layer_norm(&o, &mu, &r, &x, w.as_ref(), b.as_ref(), m, n, eps)
    })
}

/// Gradients of layer norm; any of `grad_input`, `grad_weight`, `grad_bias`
/// may be null (not wanted), as may `weight`.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_layer_norm_backward(
    grad_input: *const FooView,
    grad_weight: *const FooView,
    grad_bias: *const FooView,
    dy: *const FooView,
    x: *const FooView,
    mean: *const FooView,
    rstd: *const FooView,
    weight: *const FooView,
    m: i64,
    n: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (m, n) = (dim_of(m)?, dim_of(n)?);
        let (gi, gw, gb) = (
            opt_strided(grad_input)?,
            opt_strided(grad_weight)?,
            opt_strided(grad_bias)?,
        );
        let (dy, x, mu, r) = (
            strided_of(dy)?,
            strided_of(x)?,
            strided_of(mean)?,
            strided_of(rstd)?,
        );
        let w = opt_strided(weight)?;
        crate::kernels::norm::layer_norm_backward(
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &dy,
            &x,
            &mu,
            &r,
            w.as_ref(),
            m,
            n,
        )
    })
}

/// Group norm of `x` (dense `[n, c, hxw]` in `g` groups): `out`, and
/// per-(sample, group) `mean` and `rstd` (dense `[n, g]`); `weight`, `bias`
/// may be null.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_group_norm(
    out: *const FooView,
    mean: *const FooView,
    rstd: *const FooView,
    x: *const FooView,
    weight: *const FooView,
    bias: *const FooView,
    geom: *const i64,
    eps: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let [n, c, hxw, g] = group_geometry(geom)?;
        let (o, mu, r, x) = (
            strided_of(out)?,
            strided_of(mean)?,
            strided_of(rstd)?,
            strided_of(x)?,
        );
        let (w, b) = (opt_strided(weight)?, opt_strided(bias)?);
        crate::kernels::norm::group_norm(&o, &mu, &r, &x, w.as_ref(), b.as_ref(), n, c, hxw, g, eps)
    })
}

/// Gradients of group norm; any of `grad_input`, `grad_weight`, `grad_bias`
/// may be null (not wanted), as may `weight`.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_group_norm_backward(
    grad_input: *const FooView,
    grad_weight: *const FooView,
    grad_bias: *const FooView,
    dy: *const FooView,
    x: *const FooView,
    mean: *const FooView,
    rstd: *const FooView,
    weight: *const FooView,
    geom: *const i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let [n, c, hxw, g] = group_geometry(geom)?;
        let (gi, gw, gb) = (
            opt_strided(grad_input)?,
            opt_strided(grad_weight)?,
            opt_strided(grad_bias)?,
        );
        let (dy, x, mu, r) = (
            strided_of(dy)?,
            strided_of(x)?,
            strided_of(mean)?,
            strided_of(rstd)?,
        );
        let w = opt_strided(weight)?;
        crate::kernels::norm::group_norm_backward(
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &dy,
            &x,
            &mu,
            &r,
            w.as_ref(),
            n,
            c,
            hxw,
            g,
        )
    })
}

/// Group norm's `[n, c, hxw, groups]`, four extents.
///
/// # Safety
/// `geom` points to four `i64`s.
unsafe fn group_geometry(geom: *const i64) -> Result<[usize; 4], KernelError> {
    if geom.is_null() {
        return Err(KernelError::InvalidArgument(
            "foo: null group norm geometry".into(),
        ));
    }
    let v = std::slice::from_raw_parts(geom, 4);
    Ok([dim_of(v[0])?, dim_of(v[1])?, dim_of(v[2])?, dim_of(v[3])?])
}

/// A convolution's stride, padding and dilation ((height, width) pairs
/// each, in that order: 6 values) and groups.
///
/// # Safety
/// `win` points at 6 values.
unsafe fn conv_params(win: *const i64, groups: i64) -> Result<entry::ConvParams, KernelError> {
    if win.is_null() {
        return Err(invalid("foo: missing convolution parameters"));
    }
    let w = std::slice::from_raw_parts(win, 6);
    let pair =
        |k: usize| -> Result<[usize; 2], KernelError> { Ok([dim_of(w[k])?, dim_of(w[k + 1])?]) };
    Ok(entry::ConvParams {
        stride: pair(0)?,
        padding: pair(2)?,
        dilation: pair(4)?,
        groups: dim_of(groups)?,
    })
}

/// `out = conv2d(x, w) + bias` ([`entry::conv2d_forward`]); `bias` may be null.
///
/// # Safety
/// As [`foo_rs_ew`]; `win` as in [`conv_params`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_conv2d_forward(
    out: *const FooView,
    x: *const FooView,
    w: *const FooView,
    bias: *const FooView,
    win: *const i64,
    groups: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, x, w, b) = (
            strided_of(out)?,
            strided_of(x)?,
            strided_of(w)?,
            opt_strided(bias)?,
        );
        entry::conv2d_forward(&o, &x, &w, b.as_ref(), &conv_params(win, groups)?)
    })
}

/// Gradients of a 2-d convolution ([`entry::conv2d_backward`]): any of
/// `grad_input`, `grad_weight`, `grad_bias` may be null (not wanted), as may
/// `x` when the weight's is not wanted; `input_size` holds the input's 4 sizes.
///
/// # Safety
/// As [`foo_rs_ew`]; `win` as in [`conv_params`]; `input_size` points at 4 values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_conv2d_backward(
    grad_output: *const FooView,
    x: *const FooView,
    w: *const FooView,
    grad_input: *const FooView,
    grad_weight: *const FooView,
    grad_bias: *const FooView,
    input_size: *const i64,
    win: *const i64,
    groups: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (go, x, w) = (strided_of(grad_output)?, opt_strided(x)?, strided_of(w)?);
        let (gi, gw, gb) = (
            opt_strided(grad_input)?,
            opt_strided(grad_weight)?,
            opt_strided(grad_bias)?,
        );
        if input_size.is_null() {
            return Err(invalid("foo: missing convolution input size"));
        }
        let size = std::slice::from_raw_parts(input_size, 4)
            .iter()
            .map(|&v| dim_of(v))
            .collect::<Result<Vec<_>, _>>()?;
        entry::conv2d_backward(
            &go,
            x.as_ref(),
            &w,
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &size,
            &conv_params(win, groups)?,
        )
    })
}

/// Batch norm of a 3-d `[batch, channels, spatial]` view `x` into `out`
/// ([`crate::kernels::norm::batch_norm`]): training with the batch
/// statistics (into `save_mean`/`save_invstd`, and the running ones updated
/// in place when given), or evaluation with the running ones. Any of the
/// per-channel vectors may be null.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_batch_norm(
    out: *const FooView,
    save_mean: *const FooView,
    save_invstd: *const FooView,
    x: *const FooView,
    weight: *const FooView,
    bias: *const FooView,
    running_mean: *const FooView,
    running_var: *const FooView,
    training: u8,
    momentum: f64,
    eps: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, x) = (strided_of(out)?, strided_of(x)?);
        let (sm, si) = (opt_strided(save_mean)?, opt_strided(save_invstd)?);
        let (w, b) = (opt_strided(weight)?, opt_strided(bias)?);
        let (rm, rv) = (opt_strided(running_mean)?, opt_strided(running_var)?);
        crate::kernels::norm::batch_norm(
            &o,
            sm.as_ref(),
            si.as_ref(),
            &x,
            w.as_ref(),
            b.as_ref(),
            rm.as_ref(),
            rv.as_ref(),
            training != 0,
            momentum,
            eps,
        )
    })
}

/// Gradients of batch norm ([`crate::kernels::norm::batch_norm_backward`]);
/// any of `grad_input`, `grad_weight`, `grad_bias` may be null (not wanted),
/// as may the per-channel vectors the mode does not read.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_batch_norm_backward(
    grad_input: *const FooView,
    grad_weight: *const FooView,
    grad_bias: *const FooView,
    dy: *const FooView,
    x: *const FooView,
    weight: *const FooView,
    running_mean: *const FooView,
    running_var: *const FooView,
    save_mean: *const FooView,
    save_invstd: *const FooView,
    train: u8,
    eps: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (gi, gw, gb) = (
            opt_strided(grad_input)?,
            opt_strided(grad_weight)?,
            opt_strided(grad_bias)?,
        );
        let (dy, x, w) = (strided_of(dy)?, strided_of(x)?, opt_strided(weight)?);
        let (rm, rv) = (opt_strided(running_mean)?, opt_strided(running_var)?);
        let (sm, si) = (opt_strided(save_mean)?, opt_strided(save_invstd)?);
        crate::kernels::norm::batch_norm_backward(
            gi.as_ref(),
            gw.as_ref(),
            gb.as_ref(),
            &dy,
            &x,
            w.as_ref(),
            rm.as_ref(),
            rv.as_ref(),
            sm.as_ref(),
            si.as_ref(),
            train != 0,
            eps,
        )
    })
}

fn dim_of(v: i64) -> Result<usize, KernelError> {
    usize::try_from(v).map_err(|_| invalid("foo: negative extent"))
}

/// `out = data.index_select(dim, index)` ([`entry::index_select`]); an
/// index out of range is IndexError.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_index_select(
    out: *const FooView,
    data: *const FooView,
    index: *const FooView,
    dim: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (o, d, i) = (strided_of(out)?, strided_of(data)?, strided_of(index)?);
        entry::index_select(&o, &d, &i, dim_of(dim)?)
    })
}

/// NLL loss forward ([`entry::nll_loss_forward`]); `weight` may be null.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_nll_loss(
    out: *const FooView,
    total_weight: *const FooView,
    inp: *const FooView,
    target: *const FooView,
    weight: *const FooView,
    reduction: i64,
    ignore_index: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (o, tw) = (strided_of(out)?, strided_of(total_weight)?);
        let (i, t, w) = (strided_of(inp)?, strided_of(target)?, opt_strided(weight)?);
        entry::nll_loss_forward(&o, &tw, &i, &t, w.as_ref(), reduction, ignore_index)
    })
}

/// NLL loss backward ([`entry::nll_loss_backward`]); `weight` may be null.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_nll_loss_backward(
    grad_input: *const FooView,
    grad: *const FooView,
    target: *const FooView,
    weight: *const FooView,
    total_weight: *const FooView,
    reduction: i64,
    ignore_index: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (gi, g, t) = (
            strided_of(grad_input)?,
            strided_of(grad)?,
            strided_of(target)?,
        );
        let (w, tw) = (opt_strided(weight)?, strided_of(total_weight)?);
        entry::nll_loss_backward(&gi, &g, &t, w.as_ref(), reduction, ignore_index, &tw)
    })
}

/// Embedding gradient ([`entry::embedding_dense_backward`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_embedding_backward(
    out: *const FooView,
    grad: *const FooView,
    indices: *const FooView,
    padding_idx: i64,
    scale_grad_by_freq: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (o, g, i) = (strided_of(out)?, strided_of(grad)?, strided_of(indices)?);
        entry::embedding_dense_backward(&o, &g, &i, padding_idx, scale_grad_by_freq != 0)
    })
}

/// Dropout ([`entry::dropout`]) drawing from device `device`'s generator.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_dropout(
    out: *const FooView,
    mask: *const FooView,
    x: *const FooView,
    keep: f64,
    scale: f64,
    device: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, m, x) = (strided_of(out)?, strided_of(mask)?, strided_of(x)?);
        entry::dropout(&o, &m, &x, keep, scale, dim_of(device)?).map(|_| ())
    })
}

/// `dst.bernoulli_(p)` ([`entry::bernoulli`]) from device `device`'s generator.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_bernoulli(
    dst: *const FooView,
    p: f64,
    device: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        entry::bernoulli(&strided_of(dst)?, p, dim_of(device)?).map(|_| ())
    })
}

/// The backward of dropout, `out = grad * mask * scale` ([`drop::dropout_backward`]: contiguous
/// operands of one shape, a bool mask).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_dropout_backward(
    out: *const FooView,
    grad: *const FooView,
    mask: *const FooView,
    scale: f64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, g, m) = (strided_of(out)?, strided_of(grad)?, strided_of(mask)?);
        crate::kernels::dropout::dropout_backward(&o, &g, &m, scale)
    })
}

/// 2-d max pooling of a 4-d input into `out` and `indices`; `win` holds
/// kernel, stride, padding and dilation as (h, w) pairs: 8 values.
///
/// # Safety
/// As [`foo_rs_ew`]; `win` holds 8 values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_max_pool2d(
    out: *const FooView,
    indices: *const FooView,
    x: *const FooView,
    win: *const i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let win = window_of(win)?;
        let (o, i, x) = (strided_of(out)?, strided_of(indices)?, strided_of(x)?);
        crate::kernels::pool::max_pool2d(&o, &i, &x, win)
    })
}

/// A pooling window from kernel, stride, padding and dilation as (h, w)
/// pairs: 8 values.
///
/// # Safety
/// `win` holds 8 values.
unsafe fn window_of(win: *const i64) -> Result<crate::kernels::pool::Window, KernelError> {
    let w = std::slice::from_raw_parts(win, 8)
        .iter()
        .map(|&v| dim_of(v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(crate::kernels::pool::Window {
        kernel: [w[0], w[1]],
        stride: [w[2], w[3]],
        padding: [w[4], w[5]],
        dilation: [w[6], w[7]],
    })
}

/// 2-d average pooling of a 4-d `x` into `out` (`divisor` 0: none, ATen's
/// meta refuses a zero override), or (`backward`) its gradient: `out` is
/// grad_input, `x` grad_output.
///
/// # Safety
/// As [`foo_rs_ew`]; `win` holds 8 values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_avg_pool2d(
    out: *const FooView,
    x: *const FooView,
    win: *const i64,
    count_include_pad: u8,
    divisor: i64,
    backward: u8,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::pool;
    run(st, false, || {
        let win = window_of(win)?;
        let (o, x) = (strided_of(out)?, strided_of(x)?);
        let (cip, div) = (count_include_pad != 0, (divisor != 0).then_some(divisor));
        if backward != 0 {
            pool::avg_pool2d_backward(&o, &x, win, cip, div)
        } else {
            pool::avg_pool2d(&o, &x, win, cip, div)
        }
    })
}

/// Gradient of 2-d max pooling (4-d views).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_max_pool2d_backward(
    grad_input: *const FooView,
    grad_output: *const FooView,
    indices: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (gi, go, i) = (
            strided_of(grad_input)?,
            strided_of(grad_output)?,
            strided_of(indices)?,
        );
        crate::kernels::pool::max_pool2d_backward(&gi, &go, &i)
    })
}

/// Attention forward ([`entry::sdpa_forward`]) over 4-d views; `bias` may
/// be null. Writes the dropout's Philox (seed, offset) to `philox[0..2]`.
///
/// # Safety
/// As [`foo_rs_ew`]; `philox` points at 2 writable values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_sdpa_forward(
    out: *const FooView,
    lse: *const FooView,
    q: *const FooView,
    k: *const FooView,
    v: *const FooView,
    bias: *const FooView,
    causal: u8,
    scale: f64,
    dropout_p: f64,
    device: i64,
    philox: *mut u64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, l) = (strided_of(out)?, strided_of(lse)?);
        let (q, k, v, b) = (
            strided_of(q)?,
            strided_of(k)?,
            strided_of(v)?,
            opt_strided(bias)?,
        );
        let a = Sdpa {
            q: &q,
            k: &k,
            v: &v,
            bias: b.as_ref(),
            causal: causal != 0,
            scale,
            dropout: Some(Dropout::with_p(dropout_p)),
        };
        let (seed, offset) = entry::sdpa_forward(a, &o, &l, dim_of(device)?)?;
        let philox = std::slice::from_raw_parts_mut(philox, 2);
        philox[0] = seed;
        philox[1] = offset;
        Ok(())
    })
}

/// Attention backward ([`entry::sdpa_backward`]); any of the gradients and
/// `bias` may be null; `work` is zeroed, [`foo_rs_sdpa_backward_work`] elements.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_sdpa_backward(
    grad_q: *const FooView,
    grad_k: *const FooView,
    grad_v: *const FooView,
    grad_bias: *const FooView,
    grad_out: *const FooView,
    q: *const FooView,
    k: *const FooView,
    v: *const FooView,
    bias: *const FooView,
    out: *const FooView,
    lse: *const FooView,
    work: *const FooView,
    causal: u8,
    scale: f64,
    dropout_p: f64,
    seed: u64,
    offset: u64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (gq, gk) = (opt_strided(grad_q)?, opt_strided(grad_k)?);
        let (gv, gb) = (opt_strided(grad_v)?, opt_strided(grad_bias)?);
        let (go, o, l, w) = (
            strided_of(grad_out)?,
            strided_of(out)?,
            strided_of(lse)?,
            strided_of(work)?,
        );
        let (q, k, v, b) = (
            strided_of(q)?,
            strided_of(k)?,
            strided_of(v)?,
            opt_strided(bias)?,
        );
        let a = Sdpa {
            q: &q,
            k: &k,
            v: &v,
            bias: b.as_ref(),
            causal: causal != 0,
            scale,
            dropout: Some(Dropout {
                p: dropout_p,
                seed,
                offset,
            }),
        };
        let grads = crate::kernels::attention::Grads {
            q: gq.as_ref(),
            k: gk.as_ref(),
            v: gv.as_ref(),
            bias: gb.as_ref(),
        };
        entry::sdpa_backward(&a, &go, &o, &l, &grads, &w)
    })
}

/// Elements of the attention backward's scratch for `[b, hq, l, d]` queries
/// and `[b, hk, s, _]` keys (0 after a panic: the backward then refuses the
/// scratch with an error).
#[no_mangle]
pub extern "C" fn foo_rs_sdpa_backward_work(
    b: usize,
    hq: usize,
    hk: usize,
    l: usize,
    s: usize,
    d: usize,
) -> usize {
    std::panic::catch_unwind(|| crate::kernels::attention::backward_work(b, hq, hk, l, s, d))
        .unwrap_or(0)
}

/// `out = data.gather(dim, index)` ([`entry::gather`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_gather(
    out: *const FooView,
    data: *const FooView,
    index: *const FooView,
    dim: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, d, i) = (strided_of(out)?, strided_of(data)?, strided_of(index)?);
        entry::gather(&o, &d, &i, dim_of(dim)?)
    })
}

/// One index operand of an advanced-indexing plan: the indices over the
/// plan's shape, and the size and stride (elements) of the data dim they
/// select along.
#[repr(C)]
pub struct FooIndexArg {
    pub idx: FooView,
    pub size: i64,
    pub stride: i64,
}

/// # Safety
/// `args` holds `n` valid [`FooIndexArg`]s.
unsafe fn index_args(
    args: *const FooIndexArg,
    n: usize,
) -> Result<smallvec::SmallVec<[crate::kernels::index::IndexArg; 2]>, KernelError> {
    if n == 0 {
        return Err(invalid("foo index: no index operands"));
    }
    // A plain loop: collecting Results into a SmallVec cost a small x[idx]
    // about 600 instructions (try_process) per call.
    let mut v = smallvec::SmallVec::with_capacity(n);
    for a in std::slice::from_raw_parts(args, n) {
        v.push(crate::kernels::index::IndexArg {
            idx: strided_of(&a.idx)?,
            size: dim_of(a.size)?,
            stride: a.stride as isize,
        });
    }
    Ok(v)
}

/// Advanced indexing `out = data[indices]` on ATen's plan ([`entry::index`]);
/// an index out of range is IndexError.
///
/// # Safety
/// As [`foo_rs_ew`]; `args` holds `n` operands.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_index(
    out: *const FooView,
    data: *const FooView,
    args: *const FooIndexArg,
    n: usize,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (o, d, a) = (strided_of(out)?, strided_of(data)?, index_args(args, n)?);
        entry::index(&o, &d, &a)
    })
}

/// `dst[indices] = src` (`+=` with `accumulate`) on ATen's plan
/// ([`entry::index_put`]); an index out of range is IndexError.
///
/// # Safety
/// As [`foo_rs_ew`]; `args` holds `n` operands.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_index_put(
    dst: *const FooView,
    src: *const FooView,
    args: *const FooIndexArg,
    n: usize,
    accumulate: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, true, || {
        let (d, s, a) = (strided_of(dst)?, strided_of(src)?, index_args(args, n)?);
        entry::index_put(&d, &s, &a, accumulate != 0)
    })
}

/// `out[i] = start + i * step` into the 1-d `out`, in i64 (`integral`) or
/// as CPU's accumulate type ([`crate::kernels::index::arange`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_arange(
    out: *const FooView,
    start_f: f64,
    step_f: f64,
    start_i: i64,
    step_i: i64,
    integral: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let o = strided_of(out)?;
        crate::kernels::index::arange(&o, start_f, step_f, start_i, step_i, integral != 0)
    })
}

/// Adaptive average pooling of a 4-d `x` into the 4-d `out` (its height and
/// width are the target sizes), or (`backward`) the gradient: `out` is
/// grad_input, `x` grad_output.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_adaptive_avg_pool2d(
    out: *const FooView,
    x: *const FooView,
    backward: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, x) = (strided_of(out)?, strided_of(x)?);
        if backward != 0 {
            crate::kernels::pool::adaptive_avg_pool2d_backward(&o, &x)
        } else {
            crate::kernels::pool::adaptive_avg_pool2d(&o, &x)
        }
    })
}

/// The scatter family ([`entry::scatter`]) into `out`, which already holds
/// self's values: `src` (may be null) or the number `value`; `op` one of
/// "assign", "add"/"sum", "multiply"/"prod", "mean", "amax", "amin".
///
/// # Safety
/// As [`foo_rs_ew`]; `op` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_scatter(
    out: *const FooView,
    src: *const FooView,
    value: FooParam,
    index: *const FooView,
    dim: i64,
    op: *const c_char,
    include_self: u8,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::index::{Reduce, Src};
    run(st, false, || {
        let op = match CStr::from_ptr(op).to_bytes() {
            b"assign" => Reduce::Assign,
            b"add" | b"sum" => Reduce::Add,
            b"multiply" | b"prod" => Reduce::Mul,
            b"mean" => Reduce::Mean,
            b"amax" => Reduce::Max,
            b"amin" => Reduce::Min,
            _ => return Err(invalid("foo scatter: unknown reduction")),
        };
        let (o, i, s) = (strided_of(out)?, strided_of(index)?, opt_strided(src)?);
        let src = match &s {
            Some(t) => Src::Tensor(t),
            None => match number(param(&value)?)? {
                Scalar::Bool(b) => Src::Scalar {
                    f: b as u8 as f64,
                    i: b as i64,
                    is_int: true,
                },
                Scalar::Int(i) => Src::Scalar {
                    f: i as f64,
                    i,
                    is_int: true,
                },
                Scalar::Float(f) => Src::Scalar {
                    f,
                    i: f as i64,
                    is_int: false,
                },
            },
        };
        entry::scatter(&o, src, &i, dim_of(dim)?, op, include_self != 0)
    })
}

// ---- Fused optimizers (torch.optim's fused=True) ---------------------------

/// `n` views from the array `p` (which may be null when `n` is 0).
///
/// # Safety
/// `p` holds `n` views, each as in [`strided_of`].
unsafe fn views_of(p: *const FooView, n: usize) -> Result<Vec<Strided>, KernelError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(invalid("foo: missing operand list"));
    }
    (0..n).map(|i| strided_of(p.add(i))).collect()
}

/// `_fused_adam_` / `_fused_adamw_` over `n` parameters: dense views of
/// each list (`max_exp_avg_sqs` holds `n` with amsgrad, else none), `steps`
/// one-element step counts (already incremented), `grad_scale` null or one
/// element. Every parameter is checked before any is updated; then all run
/// together ([`crate::kernels::optim::run_tasks`]).
///
/// # Safety
/// Each list holds its views, as in [`strided_of`]; `cfg` is valid.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_fused_adam(
    params: *const FooView,
    grads: *const FooView,
    exp_avgs: *const FooView,
    exp_avg_sqs: *const FooView,
    max_exp_avg_sqs: *const FooView,
    steps: *const FooView,
    n: usize,
    cfg: *const crate::kernels::optim::Adam,
    grad_scale: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::optim;
    run(st, false, || {
        let cfg = cfg
            .as_ref()
            .ok_or_else(|| invalid("foo: missing optimizer arguments"))?;
        let mx = views_of(max_exp_avg_sqs, if cfg.amsgrad { n } else { 0 })?;
        optim::adam_step(
            &views_of(params, n)?,
            &views_of(grads, n)?,
            &views_of(exp_avgs, n)?,
            &views_of(exp_avg_sqs, n)?,
            &mx,
            &views_of(steps, n)?,
            cfg,
            opt_strided(grad_scale)?.as_ref(),
        )
    })
}

/// `_fused_sgd_` over `n` parameters (`momentum_buffers` holds `n` views
/// when momentum is not 0, else none); as [`foo_rs_fused_adam`].
///
/// # Safety
/// As [`foo_rs_fused_adam`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_fused_sgd(
    params: *const FooView,
    grads: *const FooView,
    momentum_buffers: *const FooView,
    n: usize,
    cfg: *const crate::kernels::optim::Sgd,
    grad_scale: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::optim;
    run(st, false, || {
        let cfg = cfg
            .as_ref()
            .ok_or_else(|| invalid("foo: missing optimizer arguments"))?;
        let b = views_of(momentum_buffers, if cfg.momentum != 0.0 { n } else { 0 })?;
        optim::sgd_step(
            &views_of(params, n)?,
            &views_of(grads, n)?,
            &b,
            cfg,
            opt_strided(grad_scale)?.as_ref(),
        )
    })
}

/// `_fused_adagrad_` over `n` parameters; as [`foo_rs_fused_adam`].
///
/// # Safety
/// As [`foo_rs_fused_adam`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_fused_adagrad(
    params: *const FooView,
    grads: *const FooView,
    state_sums: *const FooView,
    steps: *const FooView,
    n: usize,
    cfg: *const crate::kernels::optim::Adagrad,
    grad_scale: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::optim;
    run(st, false, || {
        let cfg = cfg
            .as_ref()
            .ok_or_else(|| invalid("foo: missing optimizer arguments"))?;
        optim::adagrad_step(
            &views_of(params, n)?,
            &views_of(grads, n)?,
            &views_of(state_sums, n)?,
            &views_of(steps, n)?,
            cfg,
            opt_strided(grad_scale)?.as_ref(),
        )
    })
}

// ---- GradScaler -------------------------------------------------------------

/// `_amp_foreach_non_finite_check_and_unscale_` over `n` dense gradients:
/// scales each by `inv_scale` and sets `*found` to 1 if any held an inf or
/// NaN (else leaves it).
///
/// # Safety
/// `grads` holds `n` views, as in [`strided_of`]; `found` is valid.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_amp_unscale(
    grads: *const FooView,
    n: usize,
    inv_scale: f32,
    found: *mut u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let g = views_of(grads, n)?;
        if crate::kernels::optim::unscale(&g, inv_scale)? {
            *found = 1;
        }
        Ok(())
    })
}

/// `_amp_update_scale_` on one-element views: float `scale`, int32
/// `growth_tracker`, float `found_inf`.
///
/// # Safety
/// Each view as in [`strided_of`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_amp_update_scale(
    scale: *const FooView,
    growth_tracker: *const FooView,
    found_inf: *const FooView,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (s, t, f) = (
            strided_of(scale)?,
            strided_of(growth_tracker)?,
            strided_of(found_inf)?,
        );
        crate::kernels::optim::update_scale(
            &s,
            &t,
            &f,
            growth_factor,
            backoff_factor,
            growth_interval,
        )
    })
}

/// MSE loss of `a` and `b` over their broadcast shape (`shape`, `ndim`
/// dims) into `out` ([`entry::mse_loss`]).
///
/// # Safety
/// As [`foo_rs_ew`]; `shape` holds `ndim` values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_mse_loss(
    out: *const FooView,
    a: *const FooView,
    b: *const FooView,
    shape: *const i64,
    ndim: usize,
    reduction: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let shape = non_negative(shape, ndim, "size")?;
        entry::mse_loss(
            &strided_of(out)?,
            &strided_of(a)?,
            &strided_of(b)?,
            &shape,
            reduction,
        )
    })
}

/// MSE loss backward over `grad_input`'s shape ([`entry::mse_loss_backward`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_mse_loss_backward(
    grad_input: *const FooView,
    grad: *const FooView,
    a: *const FooView,
    b: *const FooView,
    reduction: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        entry::mse_loss_backward(
            &strided_of(grad_input)?,
            &strided_of(grad)?,
            &strided_of(a)?,
            &strided_of(b)?,
            reduction,
        )
    })
}

/// The value of a one-element real view (`_local_scalar_dense`, `.item()`)
/// into `value`: kind 2 (bool), 1 (float) or 0 (integer), as the dtype is.
///
/// # Safety
/// As [`foo_rs_ew`]; `value` is writable.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_local_scalar(
    src: *const FooView,
    value: *mut FooParam,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let s = strided_of(src)?;
        if s.dtype.is_complex() || s.numel() != 1 {
            return Err(invalid("foo: _local_scalar_dense takes one real element"));
        }
        let v = &mut *value;
        (v.kind, v.i, v.f) = match crate::kernels::copy::read_number(&s) {
            Number::Bool(b) => (2, i64::from(b), 0.0),
            Number::Float(f) => (1, 0, f),
            Number::Int(i) => (0, i, 0.0),
        };
        Ok(())
    })
}

/// Cumulative sum (`prod`: product) of `inp` along `dim` into `out`
/// ([`entry::scan`]: `inp`'s floating dtype, or int64 for integers and bool).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_scan(
    out: *const FooView,
    inp: *const FooView,
    dim: i64,
    prod: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        entry::scan(
            prod != 0,
            &strided_of(out)?,
            &strided_of(inp)?,
            dim_of(dim)?,
        )
    })
}

/// `out = tril(src, k)` (`upper`: triu) ([`entry::tri`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_tri(
    out: *const FooView,
    src: *const FooView,
    k: i64,
    upper: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        entry::tri(&strided_of(out)?, &strided_of(src)?, k, upper != 0)
    })
}

/// The `k` largest (`largest`; else smallest) elements of every line of
/// `inp` along `dim` and their positions ([`entry::topk`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn foo_rs_topk(
    values: *const FooView,
    indices: *const FooView,
    inp: *const FooView,
    dim: i64,
    k: i64,
    largest: u8,
    sorted: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (v, i, x) = (strided_of(values)?, strided_of(indices)?, strided_of(inp)?);
        entry::topk(
            &v,
            &i,
            &x,
            dim_of(dim)?,
            dim_of(k)?,
            largest != 0,
            sorted != 0,
        )
    })
}

/// A random fill of `dst` from device `device`'s default generator
/// ([`entry::random`]): `kind` 0 is normal_ (mean `a`, std `b`), 1 uniform_
/// ([`a`, `b`)), 2 random_ (`from + bits % range`, `range` 0: every int64).
/// A dtype the distribution does not take is [`SLOW`], with nothing drawn.
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn foo_rs_random(
    dst: *const FooView,
    kind: u8,
    a: f64,
    b: f64,
    from: i64,
    range: u64,
    device: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let dist = match kind {
            0 => Distribution::Normal { mean: a, std: b },
            1 => Distribution::Uniform { from: a, to: b },
            2 => Distribution::Integers { from, range },
            k => return Err(invalid(format!("foo: unknown random fill {k}"))),
        };
        entry::random(&strided_of(dst)?, dist, None, dim_of(device)?).map(|_| ())
    })
}

/// The number of nonzero elements of `src` into `count`
/// ([`crate::kernels::index::count_nonzero`]).
///
/// # Safety
/// As [`foo_rs_ew`]; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_count_nonzero(
    src: *const FooView,
    count: *mut u64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let n = crate::kernels::index::count_nonzero(&strided_of(src)?);
        *count
            .as_mut()
            .ok_or_else(|| invalid("foo: missing count"))? = n as u64;
        Ok(())
    })
}

/// The row-major multi-indices of the nonzero elements of `src` into the
/// int64 `[count, ndim]` `out` ([`crate::kernels::index::nonzero`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_nonzero(
    out: *const FooView,
    src: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        crate::kernels::index::nonzero(&strided_of(out)?, &strided_of(src)?)
    })
}

/// The elements of `src` where `mask` (bool, `src`'s shape) is true into
/// the 1-d `out` ([`crate::kernels::index::masked_select`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_masked_select(
    out: *const FooView,
    src: *const FooView,
    mask: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        crate::kernels::index::masked_select(
            &strided_of(out)?,
            &strided_of(src)?,
            &strided_of(mask)?,
        )
    })
}

/// A stable sort of every line of `inp` along `dim` (its first `k`
/// elements) into `values` and `indices` ([`entry::sort`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_sort(
    values: *const FooView,
    indices: *const FooView,
    inp: *const FooView,
    dim: i64,
    k: i64,
    descending: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (v, i, x) = (strided_of(values)?, strided_of(indices)?, strided_of(inp)?);
        entry::sort(&v, &i, &x, dim_of(dim)?, dim_of(k)?, descending != 0)
    })
}

/// Pointwise loss `kind` ("mse", "huber", "smooth_l1", "bce") with its
/// parameter (delta, beta) of `a` and `b` over their broadcast shape
/// (`shape`, `ndim` dims) into `out` ([`entry::point_loss`]).
///
/// # Safety
/// As [`foo_rs_ew`]; `kind` is a NUL-terminated string, `shape` holds `ndim` values.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn foo_rs_point_loss(
    kind: *const c_char,
    param: f64,
    out: *const FooView,
    a: *const FooView,
    b: *const FooView,
    shape: *const i64,
    ndim: usize,
    reduction: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let k = crate::kernels::nn::PointLoss::from_name(
            &CStr::from_ptr(kind).to_string_lossy(),
            param,
        )?;
        let shape = non_negative(shape, ndim, "size")?;
        entry::point_loss(
            k,
            &strided_of(out)?,
            &strided_of(a)?,
            &strided_of(b)?,
            &shape,
            reduction,
        )
    })
}

/// Pointwise loss `kind`'s backward over `grad_input`'s shape
/// ([`entry::point_loss_backward`]).
///
/// # Safety
/// As [`foo_rs_point_loss`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn foo_rs_point_loss_backward(
    kind: *const c_char,
    param: f64,
    grad_input: *const FooView,
    grad: *const FooView,
    a: *const FooView,
    b: *const FooView,
    reduction: i64,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let k = crate::kernels::nn::PointLoss::from_name(
            &CStr::from_ptr(kind).to_string_lossy(),
            param,
        )?;
        entry::point_loss_backward(
            k,
            &strided_of(grad_input)?,
            &strided_of(grad)?,
            &strided_of(a)?,
            &strided_of(b)?,
            reduction,
        )
    })
}

/// Adaptive max pooling of the 4-d `x` into `out` (its sizes are the
/// targets) and the flat positions of the maxima into `indices`
/// ([`crate::kernels::pool::adaptive_max_pool2d`]; its gradient is
/// [`foo_rs_max_pool2d_backward`]).
///
/// # Safety
/// As [`foo_rs_ew`].
#[no_mangle]
pub unsafe extern "C" fn foo_rs_adaptive_max_pool2d(
    out: *const FooView,
    indices: *const FooView,
    x: *const FooView,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, i, x) = (strided_of(out)?, strided_of(indices)?, strided_of(x)?);
        crate::kernels::pool::adaptive_max_pool2d(&o, &i, &x)
    })
}

/// `n` taps from the glue's `idx` (i0, i1 per position) and `lam` (l0, l1).
///
/// # Safety
/// `idx` and `lam` hold `2 * n` values each (may be null when `n` is 0).
unsafe fn taps(
    idx: *const i64,
    lam: *const f64,
    n: usize,
) -> Result<Vec<crate::kernels::pool::Tap>, KernelError> {
    let i = non_negative(idx, 2 * n, "index")?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let l = std::slice::from_raw_parts(lam, 2 * n);
    Ok((0..n)
        .map(|k| crate::kernels::pool::Tap {
            i0: i[2 * k],
            i1: i[2 * k + 1],
            l0: l[2 * k],
            l1: l[2 * k + 1],
        })
        .collect())
}

/// Bilinear upsampling (2-d) of `x` into `out`, or (`backward`) its
/// gradient: `out` is then grad_input and `x` grad_output
/// ([`crate::kernels::pool::upsample_bilinear2d`] and its backward), along
/// `nh` row taps and `nw` column taps.
///
/// # Safety
/// As [`foo_rs_ew`]; the tap arrays as in [`taps`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn foo_rs_upsample_bilinear2d(
    out: *const FooView,
    x: *const FooView,
    h_idx: *const i64,
    h_lam: *const f64,
    nh: usize,
    w_idx: *const i64,
    w_lam: *const f64,
    nw: usize,
    backward: u8,
    st: *mut FooStatus,
) -> i32 {
    run(st, false, || {
        let (o, x) = (strided_of(out)?, strided_of(x)?);
        let (h, w) = (taps(h_idx, h_lam, nh)?, taps(w_idx, w_lam, nw)?);
        if backward != 0 {
            crate::kernels::pool::upsample_bilinear2d_backward(&o, &x, &h, &w)
        } else {
            crate::kernels::pool::upsample_bilinear2d(&o, &x, &h, &w)
        }
    })
}

/// Reflection (`reflect` != 0) or replication padding of `x` into `out`
/// over `k` (1 to 3) spatial dims, or (`backward`) its gradient: `out` is
/// then grad_input and `x` grad_output ([`crate::kernels::pad::pad`] and its
/// backward). `pads`: ATen's padding list, `2 * k` values.
///
/// # Safety
/// As [`foo_rs_ew`]; `pads` holds `2 * k` values.
#[no_mangle]
pub unsafe extern "C" fn foo_rs_pad(
    out: *const FooView,
    x: *const FooView,
    pads: *const i64,
    k: usize,
    reflect: u8,
    backward: u8,
    st: *mut FooStatus,
) -> i32 {
    use crate::kernels::pad::{pad, pad_backward, PadMode};
    run(st, false, || {
        let (o, x) = (strided_of(out)?, strided_of(x)?);
        if !(1..=3).contains(&k) || pads.is_null() {
            return Err(KernelError::InvalidArgument(format!(
                "foo: padding of {k} dims"
            )));
        }
        let pairs: Vec<(i64, i64)> = std::slice::from_raw_parts(pads, 2 * k)
            .chunks_exact(2)
            .map(|p| (p[0], p[1]))
            .collect();
        let mode = if reflect != 0 {
            PadMode::Reflect
        } else {
            PadMode::Replicate
        };
        if backward != 0 {
            pad_backward(&o, &x, &pairs, mode)
        } else {
            pad(&o, &x, &pairs, mode)
        }
    })
}
