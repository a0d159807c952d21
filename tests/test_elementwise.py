"""Elementwise ops on foo against torch CPU, with the CPU fallback off.

Every op runs on the same values on CPU and on foo, for every dtype foo
holds: results must match (values within torch.testing tolerances, dtype,
shape, and the strides TensorIterator gives), and where CPU raises, foo must
raise the same exception type. Inputs come contiguous, transposed, sliced,
broadcast, 0-dim and empty; in-place and ``out=`` variants are covered too.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import foo_rs

pytestmark = pytest.mark.usefixtures("no_fallback")


def make_tensor(shape, dtype, seed=0):
    """A CPU tensor with varied values of ``dtype`` (incl. negatives, non-integers)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(dtype)
    if dtype.is_complex:
        return (torch.randn(shape, generator=g, dtype=torch.complex128) * 10).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def dname(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def to_foo(x):
    if isinstance(x, torch.Tensor):
        return x.to("foo")
    if isinstance(x, (list, tuple)):
        return type(x)(to_foo(v) for v in x)
    return x


def assert_same(got, expected, *, check_strides: bool = True):
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, check_strides=check_strides)
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected
        return
    assert got.device.type == "foo", got.device
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    if check_strides and expected.numel() > 1:
        # Strides of size-1 dims carry no meaning.
        ge = [s for s, n in zip(got.stride(), got.shape) if n > 1]
        ee = [s for s, n in zip(expected.stride(), expected.shape) if n > 1]
        assert ge == ee, (got.stride(), expected.stride())
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True)


def check(fn, *args, check_strides: bool = True, **kwargs):
    """Runs ``fn`` on CPU and on foo copies of ``args``; compares results or
    exception types. ``fn`` may mutate its arguments (in-place ops)."""
    foo_args = to_foo(args)
    foo_kwargs = {k: to_foo(v) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - compared below
        with pytest.raises(type(e)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*foo_args, **foo_kwargs)
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(*foo_args, **foo_kwargs)
    assert_same(got, expected, check_strides=check_strides)
    # Mutated arguments (in-place, out=) must match too.
    for a, fa in zip(args, foo_args):
        if isinstance(a, torch.Tensor):
            assert_same(fa, a, check_strides=False)
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            assert_same(foo_kwargs[k], v, check_strides=False)
    return got


def special(dtype: torch.dtype) -> torch.Tensor:
    """NaN, infinities, signed zeros, tiny, huge and ordinary values."""
    vals = [
        float("nan"),
        float("inf"),
        float("-inf"),
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1e-30,
        -1e-3,
        2.5,
        -2.5,
        3.0,
        -3.0,
        7.25,
        30.0,
        -30.0,
        100.0,
        -100.0,
        0.999,
        -0.999,
    ]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def values(dtype: torch.dtype, shape=(3, 5), seed=0) -> torch.Tensor:
    x = make_tensor(shape, dtype, seed=seed)
    if dtype.is_floating_point:
        x = x / 4  # keep most float values where the functions are interesting
    return x


# ----------------------------------------------------------------- unary ops

UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "sign": torch.sign,
    "sgn": torch.sgn,
    "reciprocal": torch.reciprocal,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log1p": torch.log1p,
    "log2": torch.log2,
    "log10": torch.log10,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "tanh": torch.tanh,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "erfinv": torch.erfinv,
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "round_decimals": lambda x: torch.round(x, decimals=2),
    "round_neg_decimals": lambda x: torch.round(x, decimals=-1),
    "trunc": torch.trunc,
    "frac": torch.frac,
    "sigmoid": torch.sigmoid,
    "logit": torch.logit,
    "logit_eps": lambda x: torch.logit(x, eps=0.01),
    "relu": torch.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, 1.5),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 3.0),
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "threshold": lambda x: F.threshold(x, 0.5, -3.0),
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinite": torch.isfinite,
    "isposinf": torch.isposinf,
    "isneginf": torch.isneginf,
    "nan_to_num": torch.nan_to_num,
    "nan_to_num_args": lambda x: torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0),
    "logical_not": torch.logical_not,
    "bitwise_not": torch.bitwise_not,
    "square": torch.square,
    "pow_2": lambda x: torch.pow(x, 2),
    "pow_3": lambda x: x**3,
    "pow_half": lambda x: x**0.5,
    "pow_neg_half": lambda x: x**-0.5,
    "pow_neg1": lambda x: x**-1,
    "pow_neg2": lambda x: x**-2.0,
    "pow_2_5": lambda x: x**2.5,
    "pow_neg_int": lambda x: x**-3,
    "rpow": lambda x: 2**x,
    "rpow_float": lambda x: 1.5**x,
    "clamp": lambda x: torch.clamp(x, -1, 2),
    "clamp_float_bounds": lambda x: torch.clamp(x, min=-0.5, max=2.5),
    "clamp_min": lambda x: torch.clamp_min(x, 0),
    "clamp_max": lambda x: torch.clamp_max(x, 1),
    "clamp_nan_bound": lambda x: torch.clamp(x, min=float("nan")),
}

# Ops whose in-place method exists (name_ on torch.Tensor).
UNARY_INPLACE = {
    "neg": "neg_",
    "abs": "abs_",
    "sign": "sign_",
    "sgn": "sgn_",
    "reciprocal": "reciprocal_",
    "sqrt": "sqrt_",
    "rsqrt": "rsqrt_",
    "exp": "exp_",
    "exp2": "exp2_",
    "expm1": "expm1_",
    "log": "log_",
    "log1p": "log1p_",
    "log2": "log2_",
    "log10": "log10_",
    "sin": "sin_",
    "cos": "cos_",
    "tan": "tan_",
    "asin": "asin_",
    "acos": "acos_",
    "atan": "atan_",
    "sinh": "sinh_",
    "cosh": "cosh_",
    "tanh": "tanh_",
    "asinh": "asinh_",
    "acosh": "acosh_",
    "atanh": "atanh_",
    "erf": "erf_",
    "erfc": "erfc_",
    "erfinv": "erfinv_",
    "floor": "floor_",
    "ceil": "ceil_",
    "lgamma": "lgamma_",
    "digamma": "digamma_",
    "round": "round_",
    "trunc": "trunc_",
    "frac": "frac_",
    "sigmoid": "sigmoid_",
    "logit": "logit_",
    "relu": "relu_",
    "nan_to_num": "nan_to_num_",
    "logical_not": "logical_not_",
    "bitwise_not": "bitwise_not_",
    "square": "square_",
}

UNARY_OUT = [
    "neg",
    "abs",
    "sign",
    "reciprocal",
    "sqrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "sin",
    "tanh",
    "erf",
    "erfinv",
    "floor",
    "round",
    "trunc",
    "frac",
    "sigmoid",
    "logit",
    "isnan",
    "isposinf",
    "nan_to_num",
    "logical_not",
    "bitwise_not",
    "exp2",
    "rsqrt",
    "lgamma",
    "digamma",
]


def layouts(x: torch.Tensor):
    """The same values as contiguous, transposed, sliced and expanded views."""
    yield "contiguous", x
    yield "transposed", x.t().contiguous().t()
    big = torch.zeros((x.shape[0] * 2, x.shape[1] * 3), dtype=x.dtype)
    big[::2, ::3] = x
    yield "strided", big[::2, ::3]
    yield "expanded", x[:1].expand_as(x)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(UNARY), ids=str)
def test_unary(op, dtype):
    fn = UNARY[op]
    x = values(dtype)
    for _, v in layouts(x):
        check(fn, v)
    check(fn, x[0, 0].clone())  # 0-dim
    check(fn, x[:0])  # empty
    if dtype.is_floating_point:
        sv = special(dtype)
        if op.startswith("gelu"):
            # CPU's vectorized float32/bfloat16 gelu gives NaN at +inf (its scalar
            # tail and float64 give inf, as foo does everywhere): skip infinities.
            sv = sv[sv.isfinite() | sv.isnan()]
        check(fn, sv)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(UNARY_INPLACE), ids=str)
def test_unary_inplace(op, dtype):
    method = UNARY_INPLACE[op]
    x = values(dtype)
    check(lambda t: getattr(t, method)(), x.clone())
    check(lambda t: getattr(t, method)(), x.clone().t())  # non-contiguous self
    if dtype.is_floating_point:
        check(lambda t: getattr(t, method)(), special(dtype))


@pytest.mark.parametrize(
    "out_dtype", [None, torch.float64, torch.int32, torch.bool], ids=lambda d: dname(d) if d else "same"
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=dname)
@pytest.mark.parametrize("op", UNARY_OUT, ids=str)
def test_unary_out(op, dtype, out_dtype):
    fn = getattr(torch, op)
    x = values(dtype)
    try:
        res_dtype = fn(x).dtype
    except Exception:  # noqa: BLE001 - the error itself is checked below
        res_dtype = dtype
    od = out_dtype or res_dtype
    # Right shape, wrong shape (resized with a warning), empty (resized quietly).
    for shape in [(3, 5), (0,), (2,)]:
        check(lambda t, out: fn(t, out=out), x, out=torch.empty(shape, dtype=od))
    # Out with a non-contiguous layout keeps it.
    check(lambda t, out: fn(t, out=out), x, out=torch.empty((5, 3), dtype=od).t(), check_strides=False)


def test_out_resize_warns_like_cpu():
    x = torch.randn(3, device="foo")
    out = torch.empty(5, device="foo")
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.exp(x, out=out)
    assert out.shape == (3,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.exp(x, out=torch.empty(0, device="foo"))


def test_unary_out_of_empty_tensor_takes_input_layout():
    x = torch.randn(4, 6).t()
    out_cpu = torch.empty(0)
    out_foo = torch.empty(0, device="foo")
    torch.exp(x, out=out_cpu)
    torch.exp(x.to("foo"), out=out_foo)
    assert out_foo.stride() == out_cpu.stride()


# ---------------------------------------------------------------- binary ops

BINARY = {
    "add": torch.add,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": torch.sub,
    # alpha=2 keeps alpha*b exact: CPU's float16 add rounds alpha*b in its
    # scalar tail but not in its vector body, so other alphas differ by ULPs.
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "rsub": torch.rsub,
    "mul": torch.mul,
    "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "atan2": torch.atan2,
    "hypot": torch.hypot,
    "minimum": torch.minimum,
    "maximum": torch.maximum,
    "fmin": torch.fmin,
    "fmax": torch.fmax,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "bitwise_left_shift": torch.bitwise_left_shift,
    "bitwise_right_shift": torch.bitwise_right_shift,
    "lshift_op": lambda a, b: a << b,
    "rshift_op": lambda a, b: a >> b,
    "copysign": torch.copysign,
    "xlogy": torch.xlogy,
    "clamp_min_tensor": torch.clamp_min,
    "clamp_max_tensor": torch.clamp_max,
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "lerp_big_weight": lambda a, b: torch.lerp(a, b, 0.8),
}

BINARY_INPLACE = {
    "add": lambda a, b: a.add_(b, alpha=2),
    "sub": lambda a, b: a.sub_(b),
    "mul": lambda a, b: a.mul_(b),
    "div": lambda a, b: a.div_(b),
    "div_floor": lambda a, b: a.div_(b, rounding_mode="floor"),
    "remainder": lambda a, b: a.remainder_(b),
    "fmod": lambda a, b: a.fmod_(b),
    "pow": lambda a, b: a.pow_(b),
    "atan2": lambda a, b: a.atan2_(b),
    "hypot": lambda a, b: a.hypot_(b),
    "eq": lambda a, b: a.eq_(b),
    "lt": lambda a, b: a.lt_(b),
    "ge": lambda a, b: a.ge_(b),
    "logical_and": lambda a, b: a.logical_and_(b),
    "logical_xor": lambda a, b: a.logical_xor_(b),
    "bitwise_and": lambda a, b: a.bitwise_and_(b),
    "bitwise_xor": lambda a, b: a.bitwise_xor_(b),
    "lshift": lambda a, b: a.__ilshift__(b),
    "rshift": lambda a, b: a.bitwise_right_shift_(b),
    "copysign": lambda a, b: a.copysign_(b),
    "xlogy": lambda a, b: a.xlogy_(b),
    "clamp_min": lambda a, b: a.clamp_min_(b),
    "clamp_max": lambda a, b: a.clamp_max_(b),
    "lerp": lambda a, b: a.lerp_(b, 0.75),
    "floor_divide": lambda a, b: a.floor_divide_(b),
    "maximum_into_self": lambda a, b: torch.maximum(a, b, out=a),
}

MIXED_PAIRS = [
    (torch.int32, torch.float32),
    (torch.uint8, torch.int8),
    (torch.bool, torch.float16),
    (torch.float16, torch.bfloat16),
    (torch.int64, torch.float64),
    (torch.float32, torch.float64),
    (torch.bool, torch.int32),
    (torch.uint8, torch.bool),
    (torch.int16, torch.int64),
    (torch.bfloat16, torch.int64),
]
PAIRS = [(d, d) for d in ALL_DTYPES] + MIXED_PAIRS


def pair_id(p):
    return f"{dname(p[0])}-{dname(p[1])}"


@pytest.mark.parametrize("dtypes", PAIRS, ids=pair_id)
@pytest.mark.parametrize("op", list(BINARY), ids=str)
def test_binary(op, dtypes):
    fn = BINARY[op]
    a = values(dtypes[0], (3, 5), seed=1)
    b = values(dtypes[1], (3, 5), seed=2)
    if (
        not dtypes[1].is_floating_point
        and dtypes[1] != torch.bool
        and op in ("div_trunc", "div_floor", "floor_divide", "remainder", "fmod")
    ):
        b = torch.where(b == 0, torch.ones_like(b), b)  # integer division by zero is tested separately
    check(fn, a, b)
    check(fn, a.t().contiguous().t(), b)  # mixed layouts
    check(fn, a.t(), b.t())  # both transposed: transposed output
    check(fn, a[:, :1], b[:1])  # broadcast [3,1] x [1,5]
    check(fn, a, b[0])  # broadcast a row
    check(fn, a, b[0, 0].clone())  # 0-dim foo tensor
    check(fn, a[:0], b[:0])  # empty
    check(fn, a[0, 0].clone(), b[0, 0].clone())  # both 0-dim


SCALARS = [2, -3, 0.5, 2.5, True, False]


@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dname)
@pytest.mark.parametrize(
    "op",
    [
        "add",
        "sub",
        "mul",
        "div",
        "div_floor",
        "remainder",
        "fmod",
        "pow",
        "eq",
        "lt",
        "ge",
        "bitwise_and",
        "lshift_op",
        "maximum_scalar",
        "rsub_scalar",
        "atan2_scalar",
    ],
    ids=str,
)
def test_binary_with_python_scalar(op, dtype, scalar):
    fns = {
        "maximum_scalar": lambda a, s: torch.clamp_min(a, s),
        "rsub_scalar": lambda a, s: s - a,
        "atan2_scalar": lambda a, s: torch.atan2(a, torch.tensor(s)),
    }
    fn = fns.get(op) or BINARY[op]
    a = values(dtype, seed=3)
    if (scalar == 0 or scalar is False) and op in ("div_floor", "remainder", "fmod") and dtype in INTS:
        pytest.skip("integer division by zero is covered in test_integer_division_by_zero")
    check(fn, a, scalar)
    # The number first (`2 - x`, `0.5 ** x`): another overload or a wrapped number on the left.
    number_first = NUMBER_FIRST.get(op)
    if number_first is not None:
        check(number_first, scalar, a)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32], ids=dname)
@pytest.mark.parametrize(
    "lo, hi",
    [(-3, None), (None, -3), (300, None), (None, 300), (-3, 300), (-3, 3), (-40000, 40000), (2.5, None)],
    ids=str,
)
def test_integer_clamp_with_bounds_outside_the_dtype(dtype, lo, hi):
    # torch 2.15 drops a bound that clamps nothing and refuses one that clamps
    # everything; 2.13 wraps it into the dtype. foo follows the torch it runs on.
    a = values(dtype, seed=5)
    check(lambda x: torch.clamp(x, lo, hi), a)
    check(lambda x: x.clamp_(lo, hi), a.clone())
    check(lambda x: torch.clamp(x, lo, hi, out=torch.empty_like(x)), a)
    if lo is not None:
        check(lambda x: torch.clamp_min(x, lo), a)
    if hi is not None:
        check(lambda x: torch.clamp_max(x, hi), a)


#: The number-first form of each op of test_binary_with_python_scalar that has one.
NUMBER_FIRST = {
    "add": lambda s, x: s + x,
    "sub": lambda s, x: s - x,
    "mul": lambda s, x: s * x,
    "div": lambda s, x: s / x,
    "div_floor": lambda s, x: s // x,
    "remainder": lambda s, x: s % x,
    "pow": lambda s, x: s**x,
    "eq": lambda s, x: s == x,
    "lt": lambda s, x: s < x,
    "ge": lambda s, x: s >= x,
    "bitwise_and": lambda s, x: s & x,
    "lshift_op": lambda s, x: s << x,
    "rsub_scalar": lambda s, x: torch.rsub(x, s),
    "atan2_scalar": lambda s, x: torch.atan2(torch.tensor(s), x),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int8], ids=dname)
@pytest.mark.parametrize("op", ["add", "mul", "div", "lt", "pow", "maximum"], ids=str)
def test_binary_with_cpu_scalar_tensor(op, dtype):
    fn = BINARY[op]
    a = values(dtype, seed=4).to("foo")
    for s in [torch.tensor(2.5), torch.tensor(3), torch.tensor(2.0, dtype=torch.float64), torch.tensor(True)]:
        expected = fn(a.cpu(), s)
        got = fn(a, s)
        assert_same(got, expected)


def test_cpu_tensor_with_dims_is_refused_like_cuda():
    a = torch.ones(3, device="foo")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.where(torch.ones(3, dtype=torch.bool), a, a)


def test_tensors_on_two_foo_devices_are_refused():
    a = torch.ones(3, device="foo:0")
    b = torch.ones(3, device="foo:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a * b


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.float32, torch.float32),
        (torch.int64, torch.int64),
        (torch.float32, torch.float64),
        (torch.int32, torch.float32),
        (torch.float16, torch.float16),
        (torch.bool, torch.bool),
        (torch.int8, torch.uint8),
    ],
    ids=pair_id,
)
@pytest.mark.parametrize("op", list(BINARY_INPLACE), ids=str)
def test_binary_inplace(op, dtypes):
    fn = BINARY_INPLACE[op]
    a = values(dtypes[0], seed=5)
    b = values(dtypes[1], seed=6)
    if not dtypes[1].is_floating_point and dtypes[1] != torch.bool:
        b = torch.where(b == 0, torch.ones_like(b), b)
    check(fn, a.clone(), b)
    check(fn, a.clone(), b[0])  # broadcast other into self
    check(fn, a.clone().t(), b.t())  # transposed self
    check(fn, a.clone(), 2)  # Python scalar
    check(fn, a[0].clone(), b)  # other broadcasts to more dims than self: CPU raises


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=dname)
@pytest.mark.parametrize(
    "dtypes", [(torch.float32, torch.float32), (torch.int64, torch.int32), (torch.bool, torch.bool)], ids=pair_id
)
@pytest.mark.parametrize(
    "op",
    [
        "add",
        "sub",
        "mul",
        "div",
        "div_floor",
        "remainder",
        "pow",
        "atan2",
        "minimum",
        "fmax",
        "eq",
        "lt",
        "logical_or",
        "bitwise_or",
        "bitwise_left_shift",
        "copysign",
        "xlogy",
        "hypot",
    ],
    ids=str,
)
def test_binary_out(op, dtypes, out_dtype):
    fn = BINARY[op]
    a = values(dtypes[0], seed=7)
    b = values(dtypes[1], (5,), seed=8)
    if not dtypes[1].is_floating_point and dtypes[1] != torch.bool:
        b = torch.where(b == 0, torch.ones_like(b), b)
    for shape in [(3, 5), (0,), (7,)]:
        check(lambda x, y, out: fn(x, y, out=out), a, b, out=torch.empty(shape, dtype=out_dtype))


def test_out_aliasing_an_input_exactly_is_in_place():
    a = torch.randn(4, 5)
    check(lambda x, y: torch.add(x, y, out=x), a.clone(), torch.randn(5))
    check(lambda x, y: torch.mul(y, x, out=x), a.clone(), torch.randn(4, 5))


def test_partial_overlap_is_refused_like_cpu():
    for dev in ["cpu", "foo"]:
        base = torch.arange(10.0).to(dev)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            torch.add(base[:-1], 1, out=base[1:])
        with pytest.raises(RuntimeError, match="unsupported operation"):
            base[:3].add_(base[1:4])
        with pytest.raises(RuntimeError, match="unsupported operation"):
            torch.exp(base[:4], out=base.expand(4, 10)[:, 0])


@pytest.mark.parametrize("dtype", INTS, ids=dname)
@pytest.mark.parametrize("op", ["div_trunc", "div_floor", "floor_divide", "remainder", "fmod"], ids=str)
def test_integer_division_by_zero(op, dtype):
    a = torch.tensor([5, 7, 9], dtype=dtype)
    b = torch.tensor([1, 0, 2], dtype=dtype)
    check(BINARY[op], a, b)
    check(BINARY[op], a, 0)
    check(BINARY[op], a, False)  # a bool number is an integer zero too
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        BINARY[op](a.to("foo"), b.to("foo"))


def test_true_division_of_integers_is_float_and_by_zero_is_inf():
    check(torch.div, torch.tensor([1, -1, 0, 7]), torch.tensor([0, 0, 0, 2]))
    check(lambda a, b: a / b, torch.tensor([1, 2], dtype=torch.int8), torch.tensor([3, 4], dtype=torch.uint8))


def test_integer_overflow_wraps():
    check(torch.add, torch.tensor([120, -128], dtype=torch.int8), torch.tensor([10, -1], dtype=torch.int8))
    check(torch.mul, torch.tensor([2**62], dtype=torch.int64), torch.tensor([4], dtype=torch.int64))
    check(torch.neg, torch.tensor([-128], dtype=torch.int8))
    check(torch.abs, torch.tensor([-128], dtype=torch.int8))
    check(lambda a: a * 3, torch.tensor([200], dtype=torch.uint8))


def test_sixteen_bit_ops_round_like_aten():
    # The threshold is compared in float32, unrounded (0.10009765625 > 0.1).
    x = torch.tensor([0.1, 0.2, 0.05], dtype=torch.bfloat16)
    check(lambda t: F.threshold(t, 0.1, -1.0), x)
    check(lambda t, g: torch.ops.aten.threshold_backward(g, t, 0.1), x, torch.ones(3, dtype=torch.bfloat16))
    # Integers meet bfloat16 as bfloat16 (257 -> 256); scalars compare in float16.
    check(torch.add, torch.tensor([1.0, 2.0], dtype=torch.bfloat16), torch.tensor([257, 3]))
    check(lambda t: t < 0.1, torch.tensor([0.1, 0.05], dtype=torch.float16))
    check(
        lambda t, out: torch.exp(t, out=out),
        torch.tensor([1.0, 0.3], dtype=torch.float16),
        out=torch.empty(2, dtype=torch.float64),
    )


def test_float16_and_bfloat16_compute_in_float32_like_aten():
    x = torch.tensor([1.0, 2.0, 3.0, 1000.0], dtype=torch.float16)
    check(lambda a: a * 0.1, x)
    check(lambda a: a + 0.1, x.to(torch.bfloat16))
    check(lambda a: torch.add(a, a, alpha=0.3), x)


# --------------------------------------------------------------- ternary ops


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float32),
        (torch.int64, torch.int64),
        (torch.bool, torch.bool),
        (torch.int32, torch.float64),
        (torch.uint8, torch.int8),
        (torch.bfloat16, torch.bfloat16),
        (torch.float64, torch.float64),
    ],
    ids=pair_id,
)
def test_where(dtypes):
    cond = make_tensor((3, 5), torch.bool, seed=9)
    a = values(dtypes[0], seed=10)
    b = values(dtypes[1], seed=11)
    check(torch.where, cond, a, b)
    check(torch.where, cond[:1], a.t().contiguous().t(), b[0])
    check(torch.where, cond, a, 2.5)
    check(torch.where, cond, 1, b)
    check(torch.where, cond.t(), a.t(), b.t())
    check(lambda c, x, y, out: torch.where(c, x, y, out=out), cond, a, b, out=torch.empty(0, dtype=torch.float64))
    check(torch.where, cond.float(), a, b)  # non-bool condition: CPU raises


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dname)
def test_masked_fill(dtype):
    x = values(dtype, seed=12)
    mask = make_tensor((3, 5), torch.bool, seed=13)
    check(lambda t, m: t.masked_fill(m, 2), x, mask)
    check(lambda t, m: t.masked_fill(m, 0.5), x, mask)
    check(lambda t, m: t.masked_fill_(m[0], True), x.clone(), mask)
    check(lambda t, m, v: t.masked_fill(m, v), x, mask, torch.tensor(7))
    check(lambda t, m, v: t.masked_fill(m, v), x, mask, torch.tensor(7.5).to("foo").cpu())
    check(lambda t, m: t.masked_fill(m, 1.0), x, mask.int())  # non-bool mask: CPU raises
    check(lambda t, m, v: t.masked_fill(m, v), x, mask, torch.ones(2))  # non-0-dim value: CPU raises


def test_masked_fill_with_foo_value_tensor():
    x = torch.randn(3, 4)
    mask = x > 0
    v = torch.tensor(-9.0)
    assert_same(x.to("foo").masked_fill(mask.to("foo"), v.to("foo")), x.masked_fill(mask, v))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int16], ids=dname
)
@pytest.mark.parametrize(
    "op",
    [
        "addcmul",
        "addcdiv",
        "addcmul_",
        "addcdiv_",
        "addcmul_out",
        "lerp",
        "lerp_",
        "lerp_out",
        "clamp",
        "clamp_",
        "clamp_out",
        "clamp_min_only",
        "clamp_max_only",
    ],
    ids=str,
)
def test_ternary(op, dtype):
    s = values(dtype, seed=14)
    t1 = values(dtype, (5,), seed=15)
    t2 = values(dtype, (3, 1), seed=16)
    if not dtype.is_floating_point:
        t2 = torch.where(t2 == 0, torch.ones_like(t2), t2)
    w = torch.rand(3, 5, dtype=torch.float64).to(dtype) if dtype.is_floating_point else t2
    lo = torch.minimum(t1, t2[0].expand_as(t1))
    hi = torch.maximum(t1, t2[0].expand_as(t1)) + 1
    fns = {
        "addcmul": lambda: (
            lambda a, b, c: (
                torch.addcmul(a, b, c, value=0.5) if dtype.is_floating_point else torch.addcmul(a, b, c, value=2)
            ),
            (s, t1, t2),
        ),
        "addcdiv": lambda: (lambda a, b, c: torch.addcdiv(a, b, c, value=2), (s, t1, t2)),
        "addcmul_": lambda: (lambda a, b, c: a.addcmul_(b, c), (s.clone(), t1, t2)),
        "addcdiv_": lambda: (lambda a, b, c: a.addcdiv_(b, c, value=-1), (s.clone(), t1, t2)),
        "addcmul_out": lambda: (
            lambda a, b, c: torch.addcmul(a, b, c, out=torch.empty(0, dtype=dtype, device=a.device)),
            (s, t1, t2),
        ),
        "lerp": lambda: (lambda a, b, c: torch.lerp(a, b, c), (s, t1, w)),
        "lerp_": lambda: (lambda a, b, c: a.lerp_(b, c), (s.clone(), t1, w)),
        "lerp_out": lambda: (
            lambda a, b, c: torch.lerp(a, b, c, out=torch.empty(0, dtype=dtype, device=a.device)),
            (s, t1, w),
        ),
        "clamp": lambda: (lambda a, b, c: torch.clamp(a, b, c), (s, lo, hi)),
        "clamp_": lambda: (lambda a, b, c: a.clamp_(b, c), (s.clone(), lo, hi)),
        "clamp_out": lambda: (
            lambda a, b, c: torch.clamp(a, b, c, out=torch.empty(0, dtype=dtype, device=a.device)),
            (s, lo, hi),
        ),
        "clamp_min_only": lambda: (lambda a, b: torch.clamp(a, min=b), (s, lo)),
        "clamp_max_only": lambda: (lambda a, b: torch.clamp(a, max=b), (s, hi)),
    }
    fn, args = fns[op]()
    check(fn, *args)


def test_clamp_tensor_promotes_and_handles_nan():
    check(torch.clamp, torch.tensor([1, 5, 9]), torch.tensor([2.5]), torch.tensor([6.5]))
    check(
        torch.clamp, torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([float("nan"), 0.0, 0.0]), torch.tensor([2.0])
    )
    with pytest.raises(RuntimeError):
        torch.clamp(torch.ones(2, device="foo"))


# ------------------------------------------------------------- activations


ACTIVATIONS = {
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": lambda x: F.elu(x, 1.2),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.5),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "softplus": lambda x: F.softplus(x, beta=1.5, threshold=4),
    "hardtanh": lambda x: F.hardtanh(x, -1.5, 2.0),
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "threshold": lambda x: F.threshold(x, 0.2, 0.0),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "logit": lambda x: torch.logit(x.sigmoid(), eps=1e-4),
    "exp": torch.exp,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=dname)
@pytest.mark.parametrize("act", list(ACTIVATIONS), ids=str)
def test_activation_forward_and_backward(act, dtype):
    fn = ACTIVATIONS[act]
    x = (torch.randn(4, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3).to(dtype)
    g = torch.randn(4, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    xc = x.clone().requires_grad_()
    xf = x.to("foo").requires_grad_()
    yc = fn(xc)
    yf = fn(xf)
    assert_same(yf.detach(), yc.detach())
    yc.backward(g)
    yf.backward(g.to("foo"))
    assert_same(xf.grad, xc.grad)


@pytest.mark.parametrize(
    "act", ["relu", "leaky_relu", "elu", "gelu", "silu", "hardtanh", "hardsigmoid", "hardswish", "threshold"], ids=str
)
def test_inplace_activation(act):
    fns = {
        "relu": lambda x: F.relu(x, inplace=True),
        "leaky_relu": lambda x: F.leaky_relu(x, 0.3, inplace=True),
        "elu": lambda x: F.elu(x, 0.8, inplace=True),
        "gelu": lambda x: x.copy_(F.gelu(x)),
        "silu": lambda x: F.silu(x, inplace=True),
        "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.5, inplace=True),
        "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
        "hardswish": lambda x: F.hardswish(x, inplace=True),
        "threshold": lambda x: F.threshold(x, 0.1, 20.0, inplace=True),
    }
    check(fns[act], torch.randn(5, 7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=dname)
def test_backward_kernels_directly(dtype):
    aten = torch.ops.aten
    g = values(dtype, seed=20)
    x = values(dtype, seed=21)
    y = torch.sigmoid(x.float()).to(dtype)
    cases = [
        (aten.threshold_backward, (g, x, 0.25)),
        (aten.gelu_backward, (g, x)),
        (lambda a, b: aten.gelu_backward(a, b, approximate="tanh"), (g, x)),
        (aten.silu_backward, (g, x)),
        (aten.mish_backward, (g, x)),
        (aten.sigmoid_backward, (g, y)),
        (aten.tanh_backward, (g, y)),
        (aten.elu_backward, (g, 1.0, 1.0507, 1.0, False, x)),
        (aten.elu_backward, (g, 1.3, 1.0, 1.0, True, y)),
        (aten.leaky_relu_backward, (g, x, 0.02, False)),
        (aten.leaky_relu_backward, (g, x, -0.02, True)),  # CPU refuses
        (aten.hardtanh_backward, (g, x, -1.0, 1.0)),
        (aten.hardsigmoid_backward, (g, x)),
        (aten.hardswish_backward, (g, x)),
        (aten.softplus_backward, (g, x, 2.0, 3.0)),
        (aten.logit_backward, (g, y)),
        (aten.logit_backward, (g, y, 0.1)),
    ]
    for fn, args in cases:
        check(fn, *args)
    # The grad_input= overloads.
    out = torch.empty(0, dtype=dtype)
    check(
        lambda a, b, grad_input: aten.threshold_backward.grad_input(a, b, 0.0, grad_input=grad_input),
        g,
        x,
        grad_input=out,
    )
    check(
        lambda a, b, grad_input: aten.sigmoid_backward.grad_input(a, b, grad_input=grad_input),
        g,
        y,
        grad_input=torch.empty(0, dtype=dtype),
    )
    check(lambda a, b, out: aten.hardswish_backward.out(a, b, out=out), g, x, out=torch.empty(0, dtype=dtype))


def test_selu_and_relu6_go_through_native_kernels():
    x = torch.randn(10, device="foo")
    foo_rs.reset_fallback_stats()
    F.selu(x)
    F.relu6(x)
    F.hardtanh(x)
    torch.isfinite(x)
    assert foo_rs.fallback_stats() == {}


# --------------------------------------------------------------- error parity


def test_shape_mismatch_raises_like_cpu():
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size of tensor b \(4\)"):
        torch.ones(3, device="foo") + torch.ones(4, device="foo")
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        torch.ones(3, device="foo").add_(torch.ones(2, 3, device="foo"))


def test_dtype_errors_name_foo():
    with pytest.raises(NotImplementedError, match="foo"):
        torch.ones(2, dtype=torch.bool, device="foo").abs()
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.ones(2, dtype=torch.int64, device="foo").mul_(0.5)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        torch.ones(2, dtype=torch.bool, device="foo") - torch.ones(2, dtype=torch.bool, device="foo")
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.ones(2, dtype=torch.int64, device="foo") ** -1
    with pytest.raises(RuntimeError, match="alpha must not be a floating point number"):
        torch.add(torch.ones(2, dtype=torch.int64, device="foo"), 1, alpha=0.5)


# ----------------------------------------------------------- numerics, sizes


@pytest.mark.parametrize("op", ["exp", "exp2", "log", "log2", "log10", "tanh", "erf", "expm1", "log1p"], ids=str)
def test_float32_transcendentals_are_within_two_ulp(op):
    fn = getattr(torch, op)
    x = torch.linspace(-90, 90, 200_001, dtype=torch.float32)
    if op.startswith("log"):
        x = torch.logspace(-38, 38, 200_001, dtype=torch.float32)
    if op == "log1p":
        x = torch.cat([torch.linspace(-0.999, 1, 100_000), torch.logspace(-30, 30, 100_001)])
    ref = fn(x.double())
    got = fn(x.to("foo")).cpu().double()
    finite = ref.abs() < 3e38
    # ULP of the reference in float32, down to the subnormal spacing.
    spacing = torch.finfo(torch.float32).eps * ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
    err = ((got - ref).abs() / spacing)[finite]
    assert err.max().item() <= 2.0, err.max().item()


@pytest.mark.parametrize("op", ["sigmoid", "gelu", "gelu_tanh", "silu", "mish", "softplus", "elu"], ids=str)
def test_float32_activations_match_cpu_over_a_wide_range(op):
    fn = {
        "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "silu": F.silu,
        "mish": F.mish,
        "softplus": F.softplus,
        "elu": F.elu,
        "sigmoid": torch.sigmoid,
    }[op]
    x = torch.linspace(-90, 90, 200_001, dtype=torch.float32)
    torch.testing.assert_close(fn(x.to("foo")).cpu(), fn(x))


@pytest.mark.parametrize("n", [1, 7, 31, 32, 33, 1000, 70_001])
def test_sizes_around_block_and_grain_boundaries(n):
    a = torch.randn(n)
    b = torch.randn(n)
    check(torch.add, a, b)
    check(lambda x: F.gelu(x), a)
    check(torch.where, a > 0, a, b)
    check(lambda x, y: x.mul_(y), a.clone(), b)


@pytest.mark.parametrize("other_threads", [1, 3])
def test_large_tensor_multithreaded_is_deterministic(other_threads):
    x = torch.randn(1 << 20).to("foo")
    r1 = F.gelu(x).cpu()
    s1 = x.sum().item()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(other_threads)
        assert foo_rs._C.num_threads() == other_threads
        r2 = F.gelu(x).cpu()
        s2 = x.sum().item()
    finally:
        torch.set_num_threads(threads)
    # Bit-identical for any thread count: kernels split work by index only.
    assert torch.equal(r1, r2)
    assert s1 == s2
    assert torch.allclose(r1, F.gelu(x.cpu()), rtol=1.3e-6, atol=1e-5)


def test_many_dims_and_broadcast_of_every_dim():
    a = torch.randn(2, 1, 3, 1, 2, 1, 2, 1, 2, 1, 2, 3)
    b = torch.randn(1, 3, 1, 2, 1, 2, 1, 2, 1, 2, 1, 3)
    check(torch.add, a, b)
    check(torch.mul, a.transpose(0, 5), b.transpose(0, 5))


def test_simd_level_is_reported():
    assert foo_rs._C.ew_simd_level() in ("avx512", "avx2", "portable")


def test_math_constants_roundtrip():
    check(lambda x: torch.exp(torch.log(x)), torch.tensor([math.pi, math.e, 1e-10, 1e10]))


def test_an_error_from_a_number_is_not_remembered_for_other_values():
    # The kernel caches what it learns per argument types; an error that comes
    # from a value (division by zero, a negative integer power) must not be
    # replayed for the next call with another value of the same type.
    x = torch.tensor([4, 7, -3], device="foo")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # CPU's error
        x // 0
    assert (x // 2).cpu().tolist() == [2, 3, -2]
    with pytest.raises(RuntimeError, match="negative integer powers"):
        x**-1
    assert (x**2).cpu().tolist() == [16, 49, 9]


@pytest.mark.parametrize("dtype", ALL_DTYPES + [torch.complex64, torch.complex128])
@pytest.mark.parametrize("row", [1, 7, 31, 49, 127, 128, 196, 1025])
def test_broadcast_rows_around_the_row_thresholds(dtype, row):
    # A [n, c, 1, 1] operand over [n, c, h, w] (a squeeze-excite scale, a
    # mean's gradient): its rows are one value each. Rows under 128 go
    # through blocks that span rows, longer ones row by row; a copy of the
    # expanded operand is a fill per row at any length.
    x = make_tensor((3, 5, row), dtype, 1)
    s = make_tensor((3, 5, 1), dtype, 2)
    check(torch.mul, x, s)
    check(torch.add, s, x)
    check(lambda a, b: a.mul_(b), x.clone(), s)
    check(lambda a: a.expand(3, 5, row).contiguous(), s)
    check(lambda a: torch.empty(3, 5, row, dtype=dtype, device=a.device).copy_(a.expand(3, 5, row)), s)
    # Sliced (non-dense) rows alongside the broadcast one.
    wide = make_tensor((3, 5, 2 * row), dtype, 3)
    check(lambda a, b: a[..., ::2] * b, wide, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.complex128])
@pytest.mark.parametrize(
    "shape, bshape",
    [
        ((8, 96, 7, 7), (8, 96, 1, 1)),  # rows of one value, above the grain: threads
        ((4, 8, 40, 40), (4, 8, 1, 1)),  # rows of one value longer than a block
        ((300, 1000), (1000,)),  # a bias row over many rows
        ((64, 1, 64), (64, 64, 64)),  # the broadcast operand first
    ],
)
def test_broadcast_rows_at_model_sizes(dtype, shape, bshape):
    x = make_tensor(shape, dtype, 4)
    s = make_tensor(bshape, dtype, 5)
    check(torch.mul, x, s)
    check(torch.sub, s, x)
    check(lambda a, b: torch.addcmul(a, a, b, value=2) if dtype.is_floating_point else a + b, x, s)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("row", [1, 7, 49, 128, 1025])
def test_broadcast_rows_of_every_arity(dtype, row):
    # The kernels hold a row's one broadcast value in a register (`Rows`'s
    # bcast): unary ops on an expanded input, binary ops with either or both
    # inputs broadcast, ternary ops with any of the three broadcast, an integer
    # division whose broadcast divisor holds a zero, and rows that ATen
    # cannot coalesce to two dims (the plan's runs).
    x = make_tensor((3, 5, row), dtype, 6)
    s = make_tensor((3, 5, 1), dtype, 7)
    t = make_tensor((3, 1, 1), dtype, 8)
    if dtype == torch.bool:
        check(lambda a: torch.bitwise_not(a.expand(3, 5, row)), s)
        check(torch.logical_xor, x, s)
        check(lambda a, b: torch.where(a, b, a), s, x)
        return
    check(lambda a: torch.neg(a.expand(3, 5, row)), s)
    check(torch.sub, s, x)
    check(torch.maximum, s, t)  # both broadcast along the row
    check(lambda a, b: a.sub_(b), x.clone(), s)
    check(lambda c, a, b: torch.where(c, a, b), s > 0, x, s)
    check(lambda c, a, b: torch.where(c, a, b), x > 0, s, t)
    # Rows that do not coalesce to two dims: the plan's runs.
    xt = make_tensor((5, 3, row), dtype, 9)
    check(lambda a, b: a.transpose(0, 1) * b, xt, s)
    check(lambda a, b: b - a.transpose(0, 1), xt, s)
    if dtype.is_floating_point:
        check(lambda a: torch.exp(a.expand(3, 5, row)), s)
        check(lambda a, b: torch.addcmul(a, b, a, value=0.5), x, s)
        check(lambda a, b, c: torch.lerp(a, b, c), s, x, t.abs() / 20)
        check(lambda a, b, c: torch.addcdiv(a, b, c, value=2), t, s, x.abs() + 1)
    else:
        check(lambda a, b: torch.div(a, b, rounding_mode="floor"), x, s.abs() + 1)
        zero = s.clone()
        zero[1, 3] = 0
        check(lambda a, b: torch.div(a, b, rounding_mode="floor"), x, zero)
        check(lambda a, b: torch.remainder(a, b), x, zero)
