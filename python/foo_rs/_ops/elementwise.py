"""Elementwise ops: pointwise math, comparisons, logic, activations and
their backward kernels, each one call into the Rust elementwise engine.

Every kernel here does the same few things (see ``_run``): look up the
op's *signature* (dtypes and dimensionality of its operands, Python number
types), broadcast the shapes, allocate or check the output, and call
``_C.ew_unary`` / ``ew_binary`` / ``ew_ternary``.

A signature is learned once, on first use, by running the same aten
overload on one-element CPU tensors of the same dtypes and dimensionality:
that yields torch's result dtype and common (compute) dtype, and, when CPU
refuses the combination (``"abs_cpu" not implemented for 'Bool'``, bool
subtraction, an integer in-place op with a float operand ...), the exact
exception foo must raise. Value-dependent refusals are part of the key.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_map

from .. import _compat
from ._registry import _C, DTYPE_CODE, check_same_device, impl

__all__: list[str] = []

_aten = torch.ops.aten
_U, _B, _T = _C.ew_unary, _C.ew_binary, _C.ew_ternary
_Tensor = torch.Tensor
_empty = torch.empty
_empty_like = torch.empty_like
_CODE = DTYPE_CODE


class _Sig(NamedTuple):
    # (exception type, message): never the exception itself, whose traceback
    # would keep the caller's tensors alive in the cache.
    error: tuple[type, str] | None
    out_dtype: torch.dtype | None  # dtype of a freshly allocated result
    ct: int  # dtype code the kernel computes in


_sigs: dict[tuple, _Sig] = {}


def _probe_tensor(x):
    if isinstance(x, _Tensor):
        return torch.ones((1,) * x.dim(), dtype=x.dtype)
    return x


_OUT_KWARGS = ("out", "grad_input")


def _learn(op, func, cmp: bool, args: tuple, kwargs: dict) -> _Sig:
    """Runs ``op`` on CPU stand-ins of its arguments to learn the signature."""
    pa = tree_map(_probe_tensor, args)
    pk = tree_map(_probe_tensor, kwargs)
    ins = [a for a in pa if isinstance(a, _Tensor)]
    ndim = max((t.dim() for t in ins), default=0)
    for k in _OUT_KWARGS:
        if isinstance(pk.get(k), _Tensor):
            pk[k] = torch.ones((1,) * ndim, dtype=pk[k].dtype)
    fk = {k: v for k, v in pk.items() if k not in _OUT_KWARGS}
    # A Python number where the schema wants a Tensor was a wrapped number
    # (the user called a .Scalar overload): the overload packet turns it back
    # into one, with its promotion rules.
    call = op.overloadpacket if _number_for_tensor(op, args, kwargs) else op
    fcall = None
    if func is not None and func is not op:
        fcall = func.overloadpacket if _number_for_tensor(func, args, kwargs) else func
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = call(*pa, **pk)
            if fcall is not None:
                r = fcall(*tree_map(_probe_tensor, args), **fk)
        except Exception as e:  # noqa: BLE001 - replayed to the caller
            return _Sig((type(e), str(e)), None, 0)
    out_dtype = r.dtype if isinstance(r, _Tensor) else None
    if cmp:
        vals = [a for a in pa if isinstance(a, (_Tensor, bool, int, float, complex))]
        ct = torch.result_type(vals[0], vals[1]) if len(vals) >= 2 else vals[0].dtype
    else:
        ct = out_dtype
    cx = [a.dtype for a in pa if isinstance(a, _Tensor) and a.is_complex()]
    if cx and ct is not None and not ct.is_complex:
        # A complex input computes in complex (its real result -- abs, angle,
        # isnan -- is stored from that): the Rust complex path's cue.
        ct = cx[0] if len(cx) == 1 else torch.promote_types(*cx[:2])
    return _Sig(None, out_dtype, DTYPE_CODE.get(ct, DTYPE_CODE[torch.float32]))


def _number_for_tensor(op, args: tuple, kwargs: dict) -> bool:
    schema = op._schema.arguments
    for a, v in zip(schema, args):
        if isinstance(v, (bool, int, float, complex)) and "Tensor" in str(a.type):
            return True
    for a in schema:
        v = kwargs.get(a.name)
        if isinstance(v, (bool, int, float, complex)) and "Tensor" in str(a.type):
            return True
    return False


def _replay(error: tuple[type, str]) -> BaseException:
    kind, msg = error
    msg = msg.replace('_cpu"', '_foo"')
    try:
        return kind(msg)
    except Exception:  # noqa: BLE001 - exotic exception constructors
        return RuntimeError(msg)


def _broadcast(a: torch.Size, b: torch.Size) -> torch.Size:
    n = max(len(a), len(b))
    out = []
    for i in range(n):
        da = a[i - n + len(a)] if i >= n - len(a) else 1
        db = b[i - n + len(b)] if i >= n - len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise RuntimeError(
                f"The size of tensor a ({da}) must match the size of tensor b ({db}) at non-singleton dimension {i}"
            )
    return torch.Size(out)


def _layout(shape, tensors) -> list[int] | None:
    """Strides of TensorIterator's output for non-contiguous inputs, else None."""
    if len(shape) > 1:
        for t in tensors:
            if t.dim() > 1 and not t.is_contiguous():
                strides = _C.ew_output_strides(list(shape), [(list(x.shape), list(x.stride())) for x in tensors])
                return strides
    return None


def _resize_out(out: _Tensor, shape, tensors) -> None:
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
            f"not match the required output shape {list(shape)}. This behavior is deprecated, and in a future "
            "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly reuse "
            "an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    out.resize_(shape)
    strides = _layout(shape, tensors)
    if strides is not None:
        out.as_strided_(shape, strides)


def _device_error(opname: str, *tensors) -> RuntimeError:
    try:
        check_same_device(opname, *tensors)
    except RuntimeError as e:
        return e
    return RuntimeError(f"foo: {opname} got tensors on different devices")


def _run(
    fn,
    name: str,
    op,
    func,
    cmp: bool,
    inputs: tuple,
    params: tuple,
    args: tuple,
    kwargs: dict,
    out: _Tensor | None,
    inplace: bool,
    keyx: tuple,
    contiguous: bool = False,
):
    # One pass over the inputs: signature key, Rust operands, foo tensors,
    # common shape. This is the per-op overhead: only cheap attribute reads.
    key = [op, keyx]
    if params:
        key.extend(map(type, params))
    dev = -2
    tensors = []
    operands = []
    shape = None
    plain = True  # all foo tensors contiguous and of one shape
    for x in inputs:
        if isinstance(x, _Tensor):
            if x.is_cpu:
                if x.dim() != 0:
                    raise _device_error(name, *[t for t in inputs if isinstance(t, _Tensor)])
                key.append((x.dtype, True, False))
                operands.append(x.item())
                continue
            d = x.get_device()
            if dev == -2:
                dev = d
            elif d != dev:
                raise _device_error(name, *[t for t in inputs if isinstance(t, _Tensor)])
            dt = x.dtype
            xs = x.shape
            key.append((dt, not xs, True))
            tensors.append(x)
            operands.append((x.data_ptr(), _CODE[dt], xs, x.stride()))
            if shape is None:
                shape = xs
            elif xs != shape:
                shape = _broadcast(shape, xs)
                plain = False
            if plain and not x.is_contiguous():
                plain = False
        else:
            key.append(type(x))
            operands.append(x)
    if out is not None:
        key.append(out.dtype)
    sig = _sigs.get(tuple(key))
    if sig is None:
        sig = _learn(op, func, cmp, args, kwargs)
        # The key holds the types of Python numbers, not their values: an error
        # that may come from a value (`x // 0`, an integer to a negative power)
        # is not the signature's, so it is raised, not remembered.
        if sig.error is None or not any(isinstance(v, (bool, int, float)) for v in (*inputs, *params)):
            _sigs[tuple(key)] = sig
    if sig.error is not None:
        raise _replay(sig.error)
    if shape is None:
        shape = torch.Size([])

    if out is None:
        if plain and tensors:
            out = _empty_like(tensors[0], dtype=sig.out_dtype)  # the cheapest allocation from Python
        else:
            strides = None if contiguous else _layout(shape, tensors)
            device = tensors[0].device if tensors else None
            if strides is None:
                out = _empty(shape, dtype=sig.out_dtype, device=device)
            else:
                out = torch.empty_strided(shape, strides, dtype=sig.out_dtype, device=device)
    else:
        if dev != -2 and (out.is_cpu or out.get_device() != dev):
            raise _device_error(name, *tensors, out)
        if out.shape != shape:
            # An out= that is also an input is never resized (TensorIterator's is_read_write).
            if inplace or any(out is x for x in inputs):
                raise RuntimeError(
                    f"output with shape {list(out.shape)} doesn't match the broadcast shape {list(shape)}"
                )
            _resize_out(out, shape, tensors)
    fn(name, (out.data_ptr(), _CODE[out.dtype], out.shape, out.stride()), *operands, sig.ct, *params)
    return out


def _register(
    names: str | tuple[str, ...],
    fn,
    rust: str,
    build: Callable,
    *,
    func: str | None = None,
    cmp: bool = False,
    contiguous: bool = False,
) -> None:
    """Registers one kernel per aten overload in ``names``.

    ``build(*args, **kwargs)`` maps the schema's arguments to
    ``(inputs, params, out, inplace, keyx)``; ``func`` names the functional
    overload whose result dtype is the compute dtype (default: the op itself);
    ``contiguous`` allocates a contiguous result where ATen does (instead of
    TensorIterator's layout).
    """
    if isinstance(names, str):
        names = (names,)
    functional = _overload(func) if func else None
    for name in names:
        op = _overload(name)

        def kernel(*args, _op=op, **kwargs):
            inputs, params, out, inplace, keyx = build(*args, **kwargs)
            return _run(
                fn, rust, _op, functional or _op, cmp, inputs, params, args, kwargs, out, inplace, keyx, contiguous
            )

        impl(name, complex_ok=rust in _COMPLEX_RUST and name not in _COMPLEX_ELSEWHERE)(kernel)


#: The Rust op names the complex path computes (the match arms of
#: rust/src/kernels/elementwise/complex.rs): kernels of other ops (clamp,
#: the backward kernels, ...) send complex calls to the CPU fallback.
_COMPLEX_RUST = frozenset(
    """identity neg conj reciprocal sign sgn abs angle exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
    sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh sigmoid sinc silu isnan isinf isfinite
    logical_not nan_to_num pow_scalar rpow_scalar add sub mul div pow logaddexp eq ne logical_and
    logical_or logical_xor lerp where addcmul addcdiv""".split()
)

#: Overloads whose complex calls go to complex_ops.py's kernels (foo's real
#: kernels on view_as_real views); every other elementwise kernel takes
#: complex operands itself (rust/src/kernels/elementwise/complex.rs).
_COMPLEX_ELSEWHERE = frozenset(
    f"{op}{ov}" for op in ("add", "sub", "mul") for ov in (".Tensor", "_.Tensor", ".out")
) | {"neg", "neg_", "neg.out"}


def _overload(name: str):
    base, _, ov = name.partition(".")
    return getattr(getattr(_aten, base), ov or "default")


# ---- builders: (inputs, params, out, inplace, keyx) -------------------------


def _b_unary(self):
    return (self,), (), None, False, ()


def _b_unary_(self):
    return (self,), (), self, True, ()


def _b_unary_out(self, *, out):
    return (self,), (), out, False, ()


def _b_bin(self, other):
    return (self, other), (), None, False, ()


def _b_bin_(self, other):
    return (self, other), (), self, True, ()


def _b_bin_out(self, other, *, out):
    return (self, other), (), out, False, ()


def _unary(name: str, rust: str, *, cmp: bool = False, inplace: bool = True, out: str | None = "out") -> None:
    _register(name, _U, rust, _b_unary, cmp=cmp)
    if inplace:
        _register(name + "_", _U, rust, _b_unary_, func=name, cmp=cmp)
    if out:
        _register(f"{name}.{out}", _U, rust, _b_unary_out, func=name, cmp=cmp)


def _binary(
    base: str,
    rust: str,
    *,
    functional: str = "Tensor",
    inplace: str | None = "Tensor",
    out: str = "out",
    cmp: bool = False,
) -> None:
    f = f"{base}.{functional}" if functional else base
    _register(f, _B, rust, _b_bin, cmp=cmp)
    if inplace is not None:
        _register(f"{base}_.{inplace}" if inplace else base + "_", _B, rust, _b_bin_, func=f, cmp=cmp)
    _register(f"{base}.{out}", _B, rust, _b_bin_out, func=f, cmp=cmp)


# ---- arithmetic -------------------------------------------------------------


def _alpha_key(alpha):
    return (type(alpha),)


for _base, _rust in (("add", "add"), ("sub", "sub")):
    _register(
        f"{_base}.Tensor",
        _B,
        _rust,
        lambda self, other, *, alpha=1: ((self, other), (alpha,), None, False, _alpha_key(alpha)),
    )
    _register(
        f"{_base}_.Tensor",
        _B,
        _rust,
        lambda self, other, *, alpha=1: ((self, other), (alpha,), self, True, _alpha_key(alpha)),
        func=f"{_base}.Tensor",
    )
    _register(
        f"{_base}.out",
        _B,
        _rust,
        lambda self, other, *, alpha=1, out: ((self, other), (alpha,), out, False, _alpha_key(alpha)),
        func=f"{_base}.Tensor",
    )

_register(
    "rsub.Tensor", _B, "sub", lambda self, other, *, alpha=1: ((other, self), (alpha,), None, False, _alpha_key(alpha))
)

_binary("mul", "mul")
_register("div.Tensor", _B, "div", lambda self, other: ((self, other), (None,), None, False, ()))
_register("div_.Tensor", _B, "div", lambda self, other: ((self, other), (None,), self, True, ()), func="div.Tensor")
_register("div.out", _B, "div", lambda self, other, *, out: ((self, other), (None,), out, False, ()), func="div.Tensor")
_register(
    "div.Tensor_mode",
    _B,
    "div",
    lambda self, other, *, rounding_mode: ((self, other), (rounding_mode,), None, False, (rounding_mode,)),
)
_register(
    "div_.Tensor_mode",
    _B,
    "div",
    lambda self, other, *, rounding_mode: ((self, other), (rounding_mode,), self, True, (rounding_mode,)),
    func="div.Tensor_mode",
)
_register(
    "div.out_mode",
    _B,
    "div",
    lambda self, other, *, rounding_mode, out: ((self, other), (rounding_mode,), out, False, (rounding_mode,)),
    func="div.Tensor_mode",
)
_register("floor_divide", _B, "div", lambda self, other: ((self, other), ("floor",), None, False, ()))
_register(
    "floor_divide_.Tensor",
    _B,
    "div",
    lambda self, other: ((self, other), ("floor",), self, True, ()),
    func="floor_divide",
)
_register(
    "floor_divide.out",
    _B,
    "div",
    lambda self, other, *, out: ((self, other), ("floor",), out, False, ()),
    func="floor_divide",
)

_binary("remainder", "remainder", out="Tensor_out")
_register("remainder.Scalar_Tensor", _B, "remainder", _b_bin)
_binary("fmod", "fmod", out="Tensor_out")

_binary("pow", "pow", functional="Tensor_Tensor", inplace="Tensor", out="Tensor_Tensor_out")


def _pow_key(exponent):
    # "Integers to negative integer powers are not allowed." depends on the value.
    return (type(exponent), isinstance(exponent, int) and exponent < 0)


_register(
    "pow.Tensor_Scalar",
    _U,
    "pow_scalar",
    lambda self, exponent: ((self,), (exponent,), None, False, _pow_key(exponent)),
)
_register(
    "pow_.Scalar",
    _U,
    "pow_scalar",
    lambda self, exponent: ((self,), (exponent,), self, True, _pow_key(exponent)),
    func="pow.Tensor_Scalar",
)
_register(
    "pow.Tensor_Scalar_out",
    _U,
    "pow_scalar",
    lambda self, exponent, *, out: ((self,), (exponent,), out, False, _pow_key(exponent)),
    func="pow.Tensor_Scalar",
)
# pow(Scalar, Tensor) allocates its result contiguous (its meta function does).
_register(
    "pow.Scalar",
    _U,
    "rpow_scalar",
    lambda self, exponent: ((exponent,), (self,), None, False, (type(self),)),
    contiguous=True,
)
_register(
    "pow.Scalar_out",
    _U,
    "rpow_scalar",
    lambda self, exponent, *, out: ((exponent,), (self,), out, False, (type(self),)),
    func="pow.Scalar",
)

_unary("neg", "neg")
_register("abs.out", _U, "abs", _b_unary_out)
_unary("sign", "sign")
_unary("sgn", "sign")
_unary("reciprocal", "reciprocal")
# angle is computed by the complex path for every dtype (CPU's real rule: pi
# for negatives, 0 otherwise, NaN kept).
_unary("angle", "angle", inplace=False)

for _name in (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "erfinv",
    "lgamma",
    "digamma",
    "floor",
    "ceil",
    "trunc",
    "frac",
    "sigmoid",
    "hardsigmoid",
    "hardswish",
    "silu",
    "mish",
):
    _unary(_name, _name)
_register("round", _U, "round", lambda self: ((self,), (0,), None, False, ()))
_register("round_", _U, "round", lambda self: ((self,), (0,), self, True, ()), func="round")
_register("round.out", _U, "round", lambda self, *, out: ((self,), (0,), out, False, ()), func="round")
_register(
    "round.decimals", _U, "round", lambda self, *, decimals: ((self,), (decimals,), None, False, (decimals != 0,))
)
_register(
    "round_.decimals",
    _U,
    "round",
    lambda self, *, decimals: ((self,), (decimals,), self, True, (decimals != 0,)),
    func="round.decimals",
)
_register(
    "round.decimals_out",
    _U,
    "round",
    lambda self, *, decimals, out: ((self,), (decimals,), out, False, (decimals != 0,)),
    func="round.decimals",
)

_binary("atan2", "atan2", functional="", inplace="", out="out")
_binary("hypot", "hypot", functional="", inplace="", out="out")
_binary("copysign", "copysign", functional="Tensor", inplace="Tensor", out="out")
_binary("xlogy", "xlogy", functional="Tensor", inplace="Tensor", out="OutTensor")
for _name in ("minimum", "maximum", "fmin", "fmax"):
    _binary(_name, _name, functional="", inplace=None, out="out")

# ---- clamp ------------------------------------------------------------------


def _clamp_key(lo, hi):
    return (type(lo), type(hi))


_C_TYPE = {
    torch.uint8: "uint8_t",
    torch.int8: "int8_t",
    torch.int16: "int16_t",
    torch.int32: "int",
    torch.int64: "int64_t",
}
_INT_NAMES = {torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long"}


def _bounds(self, lo, hi):
    """The Python-number bounds of a clamp of ``self``, as the installed torch
    treats an integer bound outside an integer tensor's range: from 2.15 it
    is dropped when it clamps nothing and refused when it would clamp
    everything; 2.13 converts it with c10's overflow check (an unsigned type
    takes negatives down to -max, which wrap, as the Rust kernel does)."""
    name = _INT_NAMES.get(self.dtype)
    if name is None or (lo is None and hi is None):
        return lo, hi
    info = torch.iinfo(self.dtype)
    if not _compat.clamp_checks_integer_range():
        # c10's checked conversion: an unsigned type also takes negatives
        # down to -max (they wrap), anything else outside the range overflows.
        floor = -info.max if info.min == 0 else info.min
        for v in (lo, hi):
            if type(v) is int and not floor <= v <= info.max:
                raise RuntimeError(f"value cannot be converted to type {_C_TYPE[self.dtype]} without overflow (foo)")
        return lo, hi
    for which, v in (("min", lo), ("max", hi)):
        if type(v) is int and not info.min <= v <= info.max:
            if (which == "min") == (v > info.max):
                raise RuntimeError(f"Clamp {which} value {v} is outside the representable range of {name} (foo)")
    if type(lo) is int and lo < info.min:
        lo = None
    if type(hi) is int and hi > info.max:
        hi = None
    if lo is None and hi is None:
        lo = info.min  # both dropped: clamping to the dtype's own range is a copy
    return lo, hi


def _b_clamp(self, min=None, max=None):
    lo, hi = _bounds(self, min, max)
    return (self,), (lo, hi), None, False, _clamp_key(lo, hi)


def _b_clamp_(self, min=None, max=None):
    lo, hi = _bounds(self, min, max)
    return (self,), (lo, hi), self, True, _clamp_key(lo, hi)


def _b_clamp_out(self, min=None, max=None, *, out):
    lo, hi = _bounds(self, min, max)
    return (self,), (lo, hi), out, False, _clamp_key(lo, hi)


_register("clamp", _U, "clamp", _b_clamp)
_register("clamp_", _U, "clamp", _b_clamp_, func="clamp")
_register("clamp.out", _U, "clamp", _b_clamp_out, func="clamp")


def _clamp_tensor(self, min=None, max=None, *, out=None, _inplace=False, _op=None):
    if min is not None and max is not None:
        fn, rust, inputs = _T, "clamp", (self, min, max)
    elif min is not None:
        fn, rust, inputs = _B, "clamp_min", (self, min)
    elif max is not None:
        fn, rust, inputs = _B, "clamp_max", (self, max)
    else:
        fn, rust, inputs = _U, "clamp", (self,)
    args, kwargs = (self, min, max), ({"out": out} if out is not None else {})
    target = self if _inplace else out
    return _run(
        fn,
        rust,
        _op,
        _aten.clamp.Tensor,
        False,
        inputs,
        (None, None) if fn is _U else (),
        args,
        kwargs,
        target,
        _inplace,
        (min is None, max is None),
    )


impl("clamp.Tensor")(lambda self, min=None, max=None: _clamp_tensor(self, min, max, _op=_aten.clamp.Tensor))
impl("clamp_.Tensor")(
    lambda self, min=None, max=None: _clamp_tensor(self, min, max, _inplace=True, _op=_aten.clamp_.Tensor)
)
impl("clamp.Tensor_out")(
    lambda self, min=None, max=None, *, out: _clamp_tensor(self, min, max, out=out, _op=_aten.clamp.Tensor_out)
)

for _name, _bound in (("clamp_min", "min"), ("clamp_max", "max")):
    _register(
        _name,
        _U,
        "clamp",
        (lambda self, v: _b_clamp(self, v, None)) if _bound == "min" else (lambda self, v: _b_clamp(self, None, v)),
    )
    _register(
        _name + "_",
        _U,
        "clamp",
        (lambda self, v: _b_clamp_(self, v, None)) if _bound == "min" else (lambda self, v: _b_clamp_(self, None, v)),
        func=_name,
    )
    _register(
        _name + ".out",
        _U,
        "clamp",
        (lambda self, v, *, out: _b_clamp_out(self, v, None, out=out))
        if _bound == "min"
        else (lambda self, v, *, out: _b_clamp_out(self, None, v, out=out)),
        func=_name,
    )
    _binary(_name, _name, functional="Tensor", inplace="Tensor", out="Tensor_out")

# ---- lerp, addcmul, addcdiv -------------------------------------------------

_register("lerp.Scalar", _B, "lerp", lambda self, end, weight: ((self, end), (weight,), None, False, (type(weight),)))
_register(
    "lerp_.Scalar",
    _B,
    "lerp",
    lambda self, end, weight: ((self, end), (weight,), self, True, (type(weight),)),
    func="lerp.Scalar",
)
_register(
    "lerp.Scalar_out",
    _B,
    "lerp",
    lambda self, end, weight, *, out: ((self, end), (weight,), out, False, (type(weight),)),
    func="lerp.Scalar",
)
_register("lerp.Tensor", _T, "lerp", lambda self, end, weight: ((self, end, weight), (), None, False, ()))
_register(
    "lerp_.Tensor", _T, "lerp", lambda self, end, weight: ((self, end, weight), (), self, True, ()), func="lerp.Tensor"
)
_register(
    "lerp.Tensor_out",
    _T,
    "lerp",
    lambda self, end, weight, *, out: ((self, end, weight), (), out, False, ()),
    func="lerp.Tensor",
)

for _name in ("addcmul", "addcdiv"):
    _register(
        _name,
        _T,
        _name,
        lambda self, tensor1, tensor2, *, value=1: ((self, tensor1, tensor2), (value,), None, False, (type(value),)),
    )
    _register(
        _name + "_",
        _T,
        _name,
        lambda self, tensor1, tensor2, *, value=1: ((self, tensor1, tensor2), (value,), self, True, (type(value),)),
        func=_name,
    )
    _register(
        _name + ".out",
        _T,
        _name,
        lambda self, tensor1, tensor2, *, value=1, out: (
            (self, tensor1, tensor2),
            (value,),
            out,
            False,
            (type(value),),
        ),
        func=_name,
    )

# ---- comparisons, logic, bits -----------------------------------------------

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _binary(_name, _name, functional="Tensor", inplace="Tensor", out="Tensor_out", cmp=True)
    _binary(_name, _name, functional="Scalar", inplace="Scalar", out="Scalar_out", cmp=True)

for _name in ("logical_and", "logical_or", "logical_xor"):
    _register(_name + ".out", _B, _name, _b_bin_out, func=_name, cmp=True)
_register("logical_not.out", _U, "logical_not", _b_unary_out, func="logical_not", cmp=True)

for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _binary(_name, _name, functional="Tensor", inplace="Tensor", out="Tensor_out")
_unary("bitwise_not", "bitwise_not")
_binary("bitwise_left_shift", "lshift", functional="Tensor", inplace="Tensor", out="Tensor_out")
_binary("bitwise_right_shift", "rshift", functional="Tensor", inplace="Tensor", out="Tensor_out")
for _dunder, _rust in (("lshift", "lshift"), ("rshift", "rshift")):
    for _ov in ("Tensor", "Scalar"):
        _register(f"__{_dunder}__.{_ov}", _B, _rust, _b_bin)
        _register(f"__i{_dunder}__.{_ov}", _B, _rust, _b_bin_, func=f"__{_dunder}__.{_ov}")

# ---- selection ---------------------------------------------------------------

_register("where.self", _T, "where", lambda condition, self, other: ((condition, self, other), (), None, False, ()))
_register(
    "where.self_out",
    _T,
    "where",
    lambda condition, self, other, *, out: ((condition, self, other), (), out, False, ()),
    func="where.self",
)
_register(
    "masked_fill_.Scalar",
    _T,
    "where",
    lambda self, mask, value: ((mask, value, self), (), self, True, (type(value),)),
    func="masked_fill.Scalar",
)
_register(
    "masked_fill_.Tensor",
    _T,
    "where",
    lambda self, mask, value: ((mask, value, self), (), self, True, ()),
    func="masked_fill.Tensor",
)

# ---- floating-point classification --------------------------------------------

# The out= forms of isnan and isinf, and nan_to_num and nan_to_num_, are
# ATen's composites over the overloads registered here (native: isnan,
# isinf, nan_to_num.out; these kernels are their slow paths).
_register("isnan", _U, "isnan", _b_unary, cmp=True)
_register("isinf", _U, "isinf", _b_unary, cmp=True)
_register("isfinite", _U, "isfinite", _b_unary, cmp=True)
for _name in ("isposinf", "isneginf"):
    _register(_name, _U, _name, _b_unary, cmp=True)
    _register(_name + ".out", _U, _name, _b_unary_out, func=_name, cmp=True)

_register(
    "nan_to_num.out",
    _U,
    "nan_to_num",
    lambda self, nan=None, posinf=None, neginf=None, *, out: ((self,), (nan, posinf, neginf), out, False, ()),
    func="nan_to_num",
)

_register("logit", _U, "logit", lambda self, eps=None: ((self,), (eps,), None, False, ()))
_register("logit_", _U, "logit", lambda self, eps=None: ((self,), (eps,), self, True, ()), func="logit")
_register("logit.out", _U, "logit", lambda self, eps=None, *, out: ((self,), (eps,), out, False, ()), func="logit")

# ---- activations --------------------------------------------------------------

_register("relu", _U, "relu", _b_unary)
_register("relu_", _U, "relu", _b_unary_, func="relu")
_register("relu.out", _U, "relu", _b_unary_out, func="relu")

_register(
    "leaky_relu", _U, "leaky_relu", lambda self, negative_slope=0.01: ((self,), (negative_slope,), None, False, ())
)
_register(
    "leaky_relu_",
    _U,
    "leaky_relu",
    lambda self, negative_slope=0.01: ((self,), (negative_slope,), self, True, ()),
    func="leaky_relu",
)
_register(
    "leaky_relu.out",
    _U,
    "leaky_relu",
    lambda self, negative_slope=0.01, *, out: ((self,), (negative_slope,), out, False, ()),
    func="leaky_relu",
)

_register(
    "elu",
    _U,
    "elu",
    lambda self, alpha=1, scale=1, input_scale=1: ((self,), (alpha, scale, input_scale), None, False, ()),
)
_register(
    "elu_",
    _U,
    "elu",
    lambda self, alpha=1, scale=1, input_scale=1: ((self,), (alpha, scale, input_scale), self, True, ()),
    func="elu",
)
_register(
    "elu.out",
    _U,
    "elu",
    lambda self, alpha=1, scale=1, input_scale=1, *, out: ((self,), (alpha, scale, input_scale), out, False, ()),
    func="elu",
)
_register(
    "celu",
    _U,
    "elu",
    lambda self, alpha=1.0: ((self,), (alpha, 1.0, 1.0 / alpha if alpha else float("inf")), None, False, (alpha == 0,)),
)
_register(
    "celu_",
    _U,
    "elu",
    lambda self, alpha=1.0: ((self,), (alpha, 1.0, 1.0 / alpha if alpha else float("inf")), self, True, (alpha == 0,)),
    func="celu",
)


def _gelu_params(approximate):
    return (approximate == "tanh",)


_register(
    "gelu",
    _U,
    "gelu",
    lambda self, *, approximate="none": ((self,), _gelu_params(approximate), None, False, (approximate,)),
)
_register(
    "gelu_",
    _U,
    "gelu",
    lambda self, *, approximate="none": ((self,), _gelu_params(approximate), self, True, (approximate,)),
    func="gelu",
)
_register(
    "gelu.out",
    _U,
    "gelu",
    lambda self, *, approximate="none", out: ((self,), _gelu_params(approximate), out, False, (approximate,)),
    func="gelu",
)

_register("softplus", _U, "softplus", lambda self, beta=1, threshold=20: ((self,), (beta, threshold), None, False, ()))
_register(
    "softplus.out",
    _U,
    "softplus",
    lambda self, beta=1, threshold=20, *, out: ((self,), (beta, threshold), out, False, ()),
    func="softplus",
)


def _hardtanh_key(lo, hi):
    # "cannot do hardtanh on an unsigned type with negative limits"
    return (lo < 0 or hi < 0,)


_register(
    "hardtanh",
    _U,
    "hardtanh",
    lambda self, min_val=-1, max_val=1: ((self,), (min_val, max_val), None, False, _hardtanh_key(min_val, max_val)),
)
_register(
    "hardtanh_",
    _U,
    "hardtanh",
    lambda self, min_val=-1, max_val=1: ((self,), (min_val, max_val), self, True, _hardtanh_key(min_val, max_val)),
    func="hardtanh",
)
_register(
    "hardtanh.out",
    _U,
    "hardtanh",
    lambda self, min_val=-1, max_val=1, *, out: (
        (self,),
        (min_val, max_val),
        out,
        False,
        _hardtanh_key(min_val, max_val),
    ),
    func="hardtanh",
)

_register("threshold", _U, "threshold", lambda self, threshold, value: ((self,), (threshold, value), None, False, ()))
_register(
    "threshold_",
    _U,
    "threshold",
    lambda self, threshold, value: ((self,), (threshold, value), self, True, ()),
    func="threshold",
)
_register(
    "threshold.out",
    _U,
    "threshold",
    lambda self, threshold, value, *, out: ((self,), (threshold, value), out, False, ()),
    func="threshold",
)

# ---- backward kernels ---------------------------------------------------------


def _backward(name: str, rust: str, build: Callable, build_out: Callable, out_name: str = "grad_input") -> None:
    _register(name, _B, rust, build)
    if out_name:
        _register(f"{name}.{out_name}", _B, rust, build_out, func=name)


_backward(
    "threshold_backward",
    "threshold_backward",
    lambda grad_output, self, threshold: ((grad_output, self), (threshold,), None, False, ()),
    lambda grad_output, self, threshold, *, grad_input: ((grad_output, self), (threshold,), grad_input, False, ()),
)
_backward(
    "gelu_backward",
    "gelu_backward",
    lambda grad_output, self, *, approximate="none": (
        (grad_output, self),
        _gelu_params(approximate),
        None,
        False,
        (approximate,),
    ),
    lambda grad_output, self, *, approximate="none", grad_input: (
        (grad_output, self),
        _gelu_params(approximate),
        grad_input,
        False,
        (approximate,),
    ),
)
for _name in ("silu_backward", "mish_backward", "hardsigmoid_backward", "hardswish_backward"):
    _backward(
        _name,
        _name,
        lambda grad_output, self: ((grad_output, self), (), None, False, ()),
        (lambda grad_output, self, *, grad_input: ((grad_output, self), (), grad_input, False, ()))
        if _name != "hardswish_backward"
        else (lambda grad_output, self, *, out: ((grad_output, self), (), out, False, ())),
        out_name={"mish_backward": "", "hardswish_backward": "out"}.get(_name, "grad_input"),
    )
for _name in ("sigmoid_backward", "tanh_backward"):
    _backward(
        _name,
        _name,
        lambda grad_output, output: ((grad_output, output), (), None, False, ()),
        lambda grad_output, output, *, grad_input: ((grad_output, output), (), grad_input, False, ()),
    )
_backward(
    "elu_backward",
    "elu_backward",
    lambda grad_output, alpha, scale, input_scale, is_result, self_or_result: (
        (grad_output, self_or_result),
        (alpha, scale, input_scale, is_result),
        None,
        False,
        (is_result and alpha < 0,),
    ),
    lambda grad_output, alpha, scale, input_scale, is_result, self_or_result, *, grad_input: (
        (grad_output, self_or_result),
        (alpha, scale, input_scale, is_result),
        grad_input,
        False,
        (is_result and alpha < 0,),
    ),
)
_backward(
    "leaky_relu_backward",
    "leaky_relu_backward",
    lambda grad_output, self, negative_slope, self_is_result: (
        (grad_output, self),
        (negative_slope,),
        None,
        False,
        (self_is_result and negative_slope < 0,),
    ),
    lambda grad_output, self, negative_slope, self_is_result, *, grad_input: (
        (grad_output, self),
        (negative_slope,),
        grad_input,
        False,
        (self_is_result and negative_slope < 0,),
    ),
)
_backward(
    "hardtanh_backward",
    "hardtanh_backward",
    lambda grad_output, self, min_val, max_val: ((grad_output, self), (min_val, max_val), None, False, ()),
    lambda grad_output, self, min_val, max_val, *, grad_input: (
        (grad_output, self),
        (min_val, max_val),
        grad_input,
        False,
        (),
    ),
)
_backward(
    "softplus_backward",
    "softplus_backward",
    lambda grad_output, self, beta, threshold: ((grad_output, self), (beta, threshold), None, False, ()),
    lambda grad_output, self, beta, threshold, *, grad_input: (
        (grad_output, self),
        (beta, threshold),
        grad_input,
        False,
        (),
    ),
)
_backward(
    "logit_backward",
    "logit_backward",
    lambda grad_output, self, eps=None: ((grad_output, self), (eps,), None, False, ()),
    lambda grad_output, self, eps=None, *, grad_input: ((grad_output, self), (eps,), grad_input, False, ()),
)

# ---- special functions ----------------------------------------------------------

# CPU refuses a negative n: a value-dependent error, so part of the key.
_register("polygamma", _U, "polygamma", lambda n, self: ((self,), (n,), None, False, (n < 0,)))
# polygamma_ takes (self, n): its own CPU call gives the signature.
_register("polygamma_", _U, "polygamma", lambda self, n: ((self,), (n,), self, True, (n < 0,)))
_register(
    "polygamma.out", _U, "polygamma", lambda n, self, *, out: ((self,), (n,), out, False, (n < 0,)), func="polygamma"
)
_unary("special_entr", "special_entr", inplace=False)
_unary("sinc", "sinc")
_register("signbit", _U, "signbit", _b_unary, cmp=True)
_register("signbit.out", _U, "signbit", _b_unary_out, func="signbit", cmp=True)
for _name in ("logaddexp", "logaddexp2"):
    _binary(_name, _name, functional="", inplace=None, out="out")
_binary("heaviside", "heaviside", functional="", inplace="", out="out")
for _name in ("gcd", "lcm"):
    _binary(_name, _name, functional="", inplace="", out="out")
for _name in ("special_xlog1py", "special_zeta"):
    _binary(_name, _name, functional="", inplace=None, out="out")

# ---- shrink and log-sigmoid activations -------------------------------------------

# softshrink refuses a negative lambda (a value-dependent error: in the key).
for _name in ("hardshrink", "softshrink"):
    _register(_name, _U, _name, lambda self, lambd=0.5: ((self,), (lambd,), None, False, (lambd < 0,)))
    _register(
        _name + ".out",
        _U,
        _name,
        lambda self, lambd=0.5, *, out: ((self,), (lambd,), out, False, (lambd < 0,)),
        func=_name,
    )
    _backward(
        _name + "_backward",
        _name + "_backward",
        lambda grad_output, self, lambd: ((grad_output, self), (lambd,), None, False, (lambd < 0,)),
        lambda grad_output, self, lambd, *, grad_input: (
            (grad_output, self),
            (lambd,),
            grad_input,
            False,
            (lambd < 0,),
        ),
    )

# The composite log_sigmoid (one result) gives the signature.
_log_sigmoid = _overload("log_sigmoid")


def _log_sigmoid_buffer(self, buffer):
    # CPU's buffer holds exp(-|x|) (contiguous); its backward never reads it.
    torch.abs(self, out=buffer).neg_().exp_()
    return buffer


@impl("log_sigmoid_forward")
def log_sigmoid_forward(self):
    output = _run(_U, "log_sigmoid", _log_sigmoid, None, False, (self,), (), (self,), {}, None, False, ())
    buffer = _empty(self.shape, dtype=output.dtype, device=self.device)
    return output, _log_sigmoid_buffer(self, buffer)


@impl("log_sigmoid_forward.output")
def log_sigmoid_forward_output(self, *, output, buffer):
    _run(_U, "log_sigmoid", _log_sigmoid, None, False, (self,), (), (self,), {}, output, False, ())
    check_same_device("log_sigmoid_forward", self, buffer)
    if buffer.shape != self.shape:
        buffer.resize_(self.shape)
    return output, _log_sigmoid_buffer(self, buffer)


_backward(
    "log_sigmoid_backward",
    "log_sigmoid_backward",
    lambda grad_output, self, buffer: ((grad_output, self), (), None, False, ()),
    lambda grad_output, self, buffer, *, grad_input: ((grad_output, self), (), grad_input, False, ()),
)


@impl("equal", complex_ok=True)
def equal(self, other):
    check_same_device("equal", self, other)
    if self.shape != other.shape:
        return False
    return bool(torch.eq(self, other).all())
