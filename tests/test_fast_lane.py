"""The fast lane: C++ kernels in the glue for the hottest elementwise
overloads, calling Rust without Python for the common case and the op's
Python kernel (foo_slow::<name>) for everything else. Both routes must give
exactly what torch CPU gives."""

import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import make_tensor, run_native_case

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
BINARY = {
    "add": lambda a, b: torch.add(a, b),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "add_int_alpha": lambda a, b: torch.add(a, b, alpha=-3),
    "sub": lambda a, b: torch.sub(a, b),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.5),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}
BINARY_ = {
    "add_": lambda a, b: a.add_(b),
    "add_alpha_": lambda a, b: a.add_(b, alpha=-1.5),
    "sub_": lambda a, b: a.sub_(b),
    "mul_": lambda a, b: a.mul_(b),
    "div_": lambda a, b: a.div_(b),
}
UNARY = ["neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "sin", "cos", "reciprocal"]


def to_foo(*xs):
    return [x.to("foo") for x in xs]


def close(actual, expected):
    assert actual.device.type == "foo"
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def test_lane_is_registered():
    lane = fast_lane_ops()
    assert {"add.Tensor", "mul.Tensor", "add_.Tensor", "relu", "sigmoid_"} <= lane
    assert lane <= set(foo_rs.native_ops())
    # Python kernels stand behind the lane as foo_slow ops.
    assert hasattr(torch.ops.foo_slow, "add_Tensor")


def within_ulp(actual, expected, a, b, alpha):
    """a + alpha * b in a 16-bit float: CPU itself differs by position here
    (its vectorized loop fuses the multiply-add in f32, one rounding; its
    scalar tail rounds alpha * b first). foo rounds once everywhere. Both must
    be within one 16-bit ulp of the magnitudes involved."""
    exact = a.double() + alpha * b.double()
    mag = (a.double().abs() + abs(alpha) * b.double().abs()).max().item() if a.numel() else 0.0
    tol = mag * torch.finfo(a.dtype).eps
    assert actual.device.type == "foo" and actual.dtype == expected.dtype
    for r in (actual.cpu(), expected):
        torch.testing.assert_close(r.double(), exact, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 70), (2, 3, 4)])
def test_binary_fast_case(no_fallback, name, dtype, shape):
    f = BINARY[name]
    a, b = make_tensor(shape, dtype, 1), make_tensor(shape, dtype, 2)
    fa, fb = to_foo(a, b)
    if "alpha" in name and dtype in (torch.bfloat16, torch.float16):
        al = {"add_alpha": 2.5, "add_int_alpha": -3, "sub_alpha": -0.5}[name]
        within_ulp(f(fa, fb), f(a, b), a, b, al)
    else:
        close(f(fa, fb), f(a, b))
    # A Python number on either side (a wrapped number), int and float.
    for s in (3, -0.75):
        close(f(fa, s), f(a, s))
    close(2 * fa, 2 * a)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(BINARY_))
def test_binary_inplace_fast_case(no_fallback, name, dtype):
    f = BINARY_[name]
    a, b = make_tensor((4, 33), dtype, 3), make_tensor((4, 33), dtype, 4)
    fa, fb = to_foo(a, b)
    ptr = fa.data_ptr()
    r = f(fa, fb)
    assert r is fa and fa.data_ptr() == ptr
    if name == "add_alpha_" and dtype in (torch.bfloat16, torch.float16):
        within_ulp(fa, f(a.clone(), b), a, b, -1.5)
    else:
        close(fa, f(a.clone(), b))
    # Self as the other operand (exact alias) and a number.
    fa2, a2 = a.to("foo"), a.clone()
    if name == "add_alpha_" and dtype in (torch.bfloat16, torch.float16):
        within_ulp(f(fa2, fa2), f(a2, a2), a, a, -1.5)
        within_ulp(f(a.to("foo"), 2), f(a.clone(), 2), a, torch.full_like(a, 2), -1.5)
    else:
        close(f(fa2, fa2), f(a2, a2))
        close(f(a.to("foo"), 2), f(a.clone(), 2))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_fast_case(no_fallback, name, dtype):
    x = make_tensor((6, 17), dtype, 5)
    if name in ("log", "sqrt", "rsqrt"):
        x = x.abs() + 0.5
    fx = x.to("foo")
    close(getattr(torch, name)(fx), getattr(torch, name)(x))
    fx2, x2 = fx.clone(), x.clone()
    getattr(fx2, name + "_")()
    getattr(x2, name + "_")()
    close(fx2, x2)


@pytest.mark.parametrize(
    "case",
    ["int64", "bool_mul", "mixed_dtype", "broadcast", "strided", "zero_dim_foo", "int_div", "int_tensor_float_number"],
)
def test_slow_cases_match_cpu(no_fallback, case):
    """Calls the lane hands to Python: same results, dtypes, shapes as CPU."""
    f32 = make_tensor((3, 4), torch.float32, 6)
    cases = {
        "int64": (lambda a, b: a + b, make_tensor((3, 4), torch.int64, 1), make_tensor((3, 4), torch.int64, 2)),
        "bool_mul": (lambda a, b: a * b, make_tensor((3, 4), torch.bool, 1), make_tensor((3, 4), torch.bool, 2)),
        "mixed_dtype": (lambda a, b: a + b, f32, make_tensor((3, 4), torch.float64, 2)),
        "broadcast": (lambda a, b: a * b, f32, make_tensor((4,), torch.float32, 2)),
        "strided": (lambda a, b: a - b, f32.t(), make_tensor((4, 3), torch.float32, 2)),
        "zero_dim_foo": (lambda a, b: a / b, f32, torch.tensor(3.0)),
        "int_div": (
            lambda a, b: a / b,
            make_tensor((3, 4), torch.int32, 1),
            make_tensor((3, 4), torch.int32, 2) + 2000,
        ),
        "int_tensor_float_number": (lambda a, b: a * 1.5, make_tensor((3, 4), torch.int16, 1), None),
    }
    f, a, b = cases[case]
    fa = a.to("foo")
    fb = b.to("foo") if b is not None else None
    expected = f(a, b)
    actual = f(fa, fb)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    close(actual, expected)


def test_inplace_needs_promotion_refused_like_cpu(no_fallback):
    a = make_tensor((3,), torch.int64, 1)
    with pytest.raises(RuntimeError) as cpu:
        a.clone().add_(torch.ones(3))
    with pytest.raises(type(cpu.value)):
        a.to("foo").add_(torch.ones(3, device="foo"))


def test_bad_alpha_and_devices_refused_like_cpu(no_fallback):
    a, b = torch.ones(3), torch.ones(3)
    with pytest.raises(RuntimeError, match="Boolean alpha"):
        torch.add(a, b, alpha=True)
    with pytest.raises(RuntimeError, match="Boolean alpha"):
        torch.add(a.to("foo"), b.to("foo"), alpha=True)
    with pytest.raises(RuntimeError, match="same device"):
        a.to("foo") + b  # a non-scalar CPU tensor
    with pytest.raises(RuntimeError, match="same device"):
        a.to("foo:0") + b.to("foo:1")
    with pytest.raises(RuntimeError, match="size of tensor"):
        a.to("foo") * torch.ones(4, device="foo")


def test_partial_overlap_refused_like_cpu(no_fallback):
    base = torch.arange(8.0)
    fbase = base.to("foo")
    with pytest.raises(RuntimeError) as cpu:
        base[1:5].add_(base[0:4])
    with pytest.raises(type(cpu.value)):
        fbase[1:5].add_(fbase[0:4])


# The dense lane (native.cpp's dense_lane): same-shape contiguous operands of
# one floating dtype skip ATen's TensorIterator. Each op in each form, and the
# calls on either side of the lane's precondition, against CPU.
DENSE = {
    "add": (lambda x, y, **kw: torch.add(x, y, alpha=0.5, **kw), lambda x, y: x.add_(y, alpha=0.5)),
    "sub": (lambda x, y, **kw: torch.sub(x, y, alpha=2, **kw), lambda x, y: x.sub_(y, alpha=2)),
    "mul": (torch.mul, lambda x, y: x.mul_(y)),
    "div": (torch.div, lambda x, y: x.div_(y)),
    "div_floor": (
        lambda x, y, **kw: torch.div(x, y, rounding_mode="floor", **kw),
        lambda x, y: x.div_(y, rounding_mode="floor"),
    ),
    "maximum": (torch.maximum, None),
    "atan2": (torch.atan2, lambda x, y: x.atan2_(y)),
    "pow": (torch.pow, lambda x, y: x.pow_(y)),
    "lerp": (lambda x, y, **kw: torch.lerp(x, y, 0.25, **kw), lambda x, y: x.lerp_(y, 0.25)),
    "addcmul": (lambda x, y, **kw: torch.addcmul(x, y, x, value=-0.5, **kw), lambda x, y: x.addcmul_(y, y, value=2)),
    "sigmoid": (lambda x, y, **kw: torch.sigmoid(x, **kw), lambda x, y: x.sigmoid_()),
    "gelu_tanh": (lambda x, y, **kw: torch._C._nn.gelu(x, approximate="tanh", **kw), None),
}


def _dense_args(dtype, n=37):
    a, b = make_tensor((3, n), dtype, 11), make_tensor((3, n), dtype, 12)
    return a, b.abs() + 1  # a positive divisor / exponent


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_lane_forms_match_cpu(no_fallback, name, dtype):
    f, inplace = DENSE[name]
    a, b = _dense_args(dtype)
    fa, fb = to_foo(a, b)
    close(f(fa, fb), f(a, b))
    # out=: a fresh tensor, then the first input itself (an exact alias).
    out, fout = torch.empty_like(a), torch.empty_like(fa)
    f(a, b, out=out)
    r = f(fa, fb, out=fout)
    assert r is fout
    close(fout, out)
    a2, fa2 = a.clone(), fa.clone()
    f(a2, b, out=a2)
    f(fa2, fb, out=fa2)
    close(fa2, a2)
    # Operands and result in one storage, disjoint: the meta decides, not the lane.
    buf = torch.cat([a, b, torch.zeros_like(a)]).reshape(3, *a.shape)
    fbuf = buf.to("foo")
    f(buf[0], buf[1], out=buf[2])
    f(fbuf[0], fbuf[1], out=fbuf[2])
    close(fbuf, buf)
    if inplace is not None:
        a3, fa3 = a.clone(), fa.clone()
        inplace(a3, b)
        assert inplace(fa3, fb) is fa3
        close(fa3, a3)


def test_dense_lane_precondition_edges_match_cpu(no_fallback):
    """Calls the dense lane must leave to ATen's meta: the same result or error as CPU."""
    a, b = _dense_args(torch.float32)
    fa, fb = to_foo(a, b)
    # A partial overlap of result and operand: CPU's error.
    base = torch.arange(10.0)
    with pytest.raises(RuntimeError) as cpu:
        torch.add(base[0:8], base[0:8], out=base[1:9])
    with pytest.raises(type(cpu.value), match="single memory location"):
        fbase = base.to("foo")
        torch.add(fbase[0:8], fbase[0:8], out=fbase[1:9])
    # An out= of another dtype (cast on write) or another shape (resized).
    for out in (torch.empty(3, 37, dtype=torch.float64), torch.empty(0)):
        fout = out.to("foo")
        torch.mul(a, b, out=out)
        torch.mul(fa, fb, out=fout)
        assert fout.dtype == out.dtype and fout.shape == out.shape
        close(fout, out)
    # An out= that is a non-contiguous view, and operands with the neg bit.
    out = torch.zeros(37, 3).t()
    fout = torch.zeros(37, 3, device="foo").t()
    torch.sub(a, b, out=out)
    torch.sub(fa, fb, out=fout)
    close(fout, out)
    close(torch._neg_view(fa) * fb, torch._neg_view(a) * b)
    na = torch._neg_view(fa.clone())
    close(torch.add(na, fb, out=torch.empty_like(fa)), torch._neg_view(a.clone()) + b)
    # In-place with another operand in the same storage, disjoint and exact.
    buf, fbuf = torch.arange(12.0), torch.arange(12.0, device="foo")
    buf[0:6].mul_(buf[6:12])
    fbuf[0:6].mul_(fbuf[6:12])
    close(fbuf, buf)
    # Bool parameters are the meta's to refuse; comparisons keep their bool result.
    with pytest.raises(RuntimeError, match="Boolean alpha"):
        fa.sub_(fb, alpha=True)
    assert torch.equal((fa < fb).cpu(), a < b)
    with pytest.raises(RuntimeError) as cpu:
        torch.clamp(a)
    with pytest.raises(type(cpu.value)):
        torch.clamp(fa)


def test_autograd_through_the_lane(no_fallback):
    x = make_tensor((5, 7), torch.float32, 8).requires_grad_()
    fx = x.detach().to("foo").requires_grad_()
    for t in (x, fx):
        y = (torch.sigmoid(t) * t + t.exp() / (t * t + 1) - t.relu()).tanh()
        y.sum().backward()
    close(fx.grad, x.grad)


def test_threads_agree(no_fallback):
    a = make_tensor((257, 300), torch.float32, 9).to("foo")
    b = make_tensor((257, 300), torch.float32, 10).to("foo")
    expected = ((a + b) * a).sigmoid().cpu()
    results, errors = [], []

    def work():
        try:
            for _ in range(50):
                results.append(((a + b) * a).sigmoid().cpu())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 200
    assert all(torch.equal(r, expected) for r in results)


def test_lane_switch_gives_same_results():
    """FOO_RS_FAST_LANE=0 registers the Python kernels directly; same bits."""
    code = (
        "import torch, foo_rs\n"
        "from foo_rs._ops._registry import fast_lane_ops\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)\n"
        "fa, fb = a.to('foo'), b.to('foo')\n"
        "r = torch.stack([(fa + fb).cpu(), (fa * 3).cpu(), fa.sigmoid().cpu(), (fa / fb).cpu(), fa.relu().cpu()])\n"
        "print(len(fast_lane_ops()))\n"
        "torch.save(r, __import__('sys').argv[1])\n"
    )
    outs = []
    for lane, path in (("1", "on"), ("0", "off")):
        env = dict(os.environ, FOO_RS_FAST_LANE=lane)
        p = f"{os.environ.get('TMPDIR', '/tmp')}/foo_lane_{path}_{os.getpid()}.pt"
        r = subprocess.run([sys.executable, "-c", code, p], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append((int(r.stdout.split()[-1]), torch.load(p)))
        os.unlink(p)
    assert outs[0][0] > 0 and outs[1][0] == 0
    assert torch.equal(outs[0][1], outs[1][1])


# ---- The native path: calls models make every step run no Python ----------


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


NATIVE_CASES = {
    # elementwise: broadcasting, mixed dtypes, integers, numbers, strides
    "add_broadcast": lambda t: t(_f((3, 4))) + t(_f((4,), seed=1)),
    "add_mixed_dtype": lambda t: t(_f((3, 4))) + t(_f((3, 4), torch.float64, 1)),
    "add_int64": lambda t: t(_f((5,), torch.int64)) + t(_f((5,), torch.int64, 1)),
    "mul_int32_number": lambda t: t(_f((5,), torch.int32)) * 3,
    "mul_int_by_float_number": lambda t: t(_f((5,), torch.int16)) * 1.5,
    "sub_strided": lambda t: t(_f((4, 3))).t() - t(_f((3, 4), seed=1)),
    "div_zero_dim_foo": lambda t: t(_f((3, 4))) / t(torch.tensor(3.0)),
    "div_floor": lambda t: torch.div(t(_f((6,))), 0.7, rounding_mode="floor"),
    "div_int_true": lambda t: t(_f((6,), torch.int64)) / t(_f((6,), torch.int64, 1) + 100),
    "rsub_number": lambda t: 1 - t(_f((4,), torch.bfloat16)),
    "gt_number": lambda t: t(_f((3, 4))) > 0,
    "eq_tensor_broadcast": lambda t: t(_f((3, 1), torch.int64)) == t(_f((4,), torch.int64)),
    "clamp": lambda t: t(_f((7,))).clamp(-0.5, 0.5),
    # clamp with tensor bounds: both (ternary), one (clamp_min/clamp_max), promotion, in-place
    "clamp_tensor_bounds_broadcast": lambda t: torch.clamp(t(_f((3, 4))), t(_f((4,), seed=1)), t(_f((3, 1), seed=2))),
    "clamp_tensor_min_only_int": lambda t: torch.clamp(t(_f((3, 4), torch.int64)), min=t(_f((4,), torch.int64, 1))),
    "clamp_tensor_max_only_promotes": lambda t: torch.clamp(t(_f((5,), torch.int32)), max=t(_f((5,), torch.float64))),
    "clamp_tensor_inplace": lambda t: t(_f((4, 3))).clamp_(t(_f((3,), seed=1)), t(_f((3,), seed=1)) + 0.5),
    "clamp_min_tensor_out": lambda t: torch.clamp_min(t(_f((6,))), t(_f((6,), seed=3)), out=t(torch.empty(0))),
    # remainder / fmod / floor_divide: integers (Python's sign rules), floats, numbers, strided
    "remainder_int_negative": lambda t: t(_f((8,), torch.int64)) % t(_f((8,), torch.int64, 1)).clamp(min=1) * -1,
    "remainder_float_number": lambda t: t(_f((3, 4))).t() % 0.7,
    "fmod_int32_broadcast": lambda t: torch.fmod(t(_f((3, 4), torch.int32)), t(_f((4,), torch.int32, 1)).abs() + 1),
    "floor_divide_float": lambda t: t(_f((2, 5), torch.float64)) // t(_f((5,), torch.float64, 1)),
    "floor_divide_int_number": lambda t: t(_f((7,), torch.int16)) // 3,
    "floor_divide_inplace": lambda t: t(_f((7,), torch.int64)).floor_divide_(t(_f((7,), torch.int64, 1)).abs() + 1),
    # bitwise and shifts, gcd: integer and bool
    "bitwise_and_bool": lambda t: t(_f((6,), torch.bool)) & t(_f((6,), torch.bool, 1)),
    "bitwise_xor_uint8_broadcast": lambda t: t(_f((2, 3), torch.uint8)) ^ t(_f((3,), torch.uint8, 1)),
    "bitwise_not_int8": lambda t: ~t(_f((6,), torch.int8)),
    "left_shift_int64": lambda t: torch.bitwise_left_shift(t(_f((6,), torch.int64)), t(_f((6,), torch.int64, 1)).abs()),
    "gcd_int32": lambda t: torch.gcd(t(_f((6,), torch.int32)), t(_f((6,), torch.int32, 1))),
    # unary math and rounding: strided, 16-bit, out=
    "floor_bf16_strided": lambda t: torch.floor(t(_f((4, 3), torch.bfloat16)).t()),
    "round_decimals": lambda t: torch.round(t(_f((6,), torch.float64)) * 7, decimals=2),
    "frac_out": lambda t: torch.frac(t(_f((5,))), out=t(torch.empty(5))),
    "log2_int_promotes": lambda t: torch.log2(t(_f((5,), torch.int64)).abs() + 1),
    "atan_inplace_f16": lambda t: t(_f((5,), torch.float16)).atan_(),
    "lgamma": lambda t: torch.lgamma(t(_f((3, 3))).abs() + 0.1),
    "hypot_broadcast": lambda t: torch.hypot(t(_f((2, 3))), t(_f((3,), seed=1))),
    "copysign_number": lambda t: torch.copysign(t(_f((4,))), -1.0),
    "fmax_nan": lambda t: torch.fmax(
        t(torch.tensor([float("nan"), 1.0, 2.0])), t(torch.tensor([0.5, float("nan"), 3.0]))
    ),
    "xlogy": lambda t: torch.xlogy(t(_f((4,))).abs(), t(_f((4,), seed=1)).abs()),
    "sgn": lambda t: torch.sgn(t(_f((3, 4))).t()),
    # activation backwards (through their functional forms' autograd), and softmax's with the expanded
    # (stride 0) gradient a .sum() gives
    "leaky_relu_backward": lambda t: _grad(lambda x: F.leaky_relu(x, 0.1), t(_f((3, 4))), t(_f((3, 4), seed=1))),
    "elu_backward": lambda t: _grad(F.elu, t(_f((3, 4), torch.float64)), t(_f((3, 4), torch.float64, 1))),
    "selu_backward_of_result": lambda t: torch.ops.aten.elu_backward(
        t(_f((5,))), 1.67, 1.05, 1.0, True, t(_f((5,), seed=1))
    ),
    "relu6_and_backward": lambda t: _grad(F.relu6, t(_f((3, 4))) * 4, t(_f((3, 4), seed=1))),
    "hardtanh_inplace_f64": lambda t: F.hardtanh(t(_f((5,), torch.float64)), -0.5, 0.25, inplace=True),
    "softplus_backward": lambda t: _grad(lambda x: F.softplus(x, 2.0, 3.0), t(_f((6,))), t(_f((6,), seed=1))),
    "softmax_backward_expanded_grad": lambda t: _grad(lambda x: x.softmax(-1).sum(), t(_f((3, 5))), None),
    "log_softmax_backward_strided": lambda t: _grad(
        lambda x: x.log_softmax(0), t(_f((4, 3))), t(_f((3, 4), seed=1)).t()
    ),
    "clamp_min_int": lambda t: t(_f((7,), torch.int64)).clamp(min=0),
    "pow_scalar": lambda t: t(_f((7,))) ** 2,
    "pow_tensor": lambda t: t(_f((7,)).abs() + 0.1) ** t(_f((7,), seed=1)),
    "maximum": lambda t: torch.maximum(t(_f((2, 3))), t(_f((3,), seed=1))),
    "relu_half": lambda t: t(_f((9,), torch.float16)).relu(),
    "gelu": lambda t: torch.nn.functional.gelu(t(_f((9,)))),
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t(_f((9,))), approximate="tanh"),
    "silu_bf16": lambda t: torch.nn.functional.silu(t(_f((9,), torch.bfloat16))),
    "leaky_relu": lambda t: torch.nn.functional.leaky_relu(t(_f((9,))), 0.2),
    "erfc": lambda t: torch.erfc(t(_f((9,), torch.float64))),
    "exp_of_int": lambda t: t(_f((4,), torch.int32)).exp(),
    "neg_int": lambda t: -t(_f((4,), torch.int64)),
    "sqrt_out": lambda t: torch.sqrt(t(_f((4,)).abs()), out=t(torch.empty(4))),
    "add_out_int_to_float": lambda t: torch.add(t(_f((4,), torch.int64)), 1, out=t(torch.empty(4))),
    "mul_inplace_broadcast": lambda t: t(_f((3, 4))).mul_(t(_f((4,), seed=1))),
    "add_inplace_number": lambda t: t(_f((3, 4), torch.float16)).add_(2, alpha=3),
    "where": lambda t: torch.where(t(_f((3, 4))) > 0, t(_f((3, 4), seed=1)), t(_f((4,), seed=2))),
    # copies: to/from CPU, dtype casts, strided, broadcast into a view
    "to_bf16": lambda t: t(_f((3, 4))).to(torch.bfloat16),
    "int_to_float": lambda t: t(_f((3, 4), torch.int64)).float(),
    "contiguous_of_transpose": lambda t: t(_f((3, 4))).t().contiguous(),
    "clone_strided": lambda t: t(_f((6, 4)))[::2].clone(),
    "copy_broadcast": lambda t: t(torch.zeros(3, 4)).copy_(t(_f((4,)))),
    "copy_from_cpu_cast": lambda t: t(torch.zeros(3, 4)).copy_(_f((3, 4), torch.int32)),
    "zero_": lambda t: t(_f((3, 4))).t().zero_(),
    "fill_int": lambda t: t(_f((3, 4), torch.int32)).fill_(7),
    "fill_half": lambda t: t(_f((3, 4), torch.float16)).fill_(-0.25),
    "cat": lambda t: torch.cat([t(_f((2, 3))), t(_f((4, 3), seed=1))]),
    "cat_dim1_legacy_empty": lambda t: torch.cat([t(_f((2, 3))), t(torch.empty(0)), t(_f((2, 2), seed=1))], 1),
    "stack": lambda t: torch.stack([t(_f((2, 3))), t(_f((2, 3), seed=1))], -1),
    "layer_norm": lambda t: torch.nn.functional.layer_norm(
        t(_f((2, 3, 8))), (8,), t(_f((8,), seed=1)), t(_f((8,), seed=2))
    ),
    "layer_norm_2d_no_affine": lambda t: torch.nn.functional.layer_norm(t(_f((4, 3, 5)).transpose(0, 1)), (4, 5)),
    "sum_int64": lambda t: t(_f((3, 4), torch.int64)).sum(1),
    # matrix products, reductions, softmax
    "linear": lambda t: torch.nn.functional.linear(t(_f((5, 8))), t(_f((3, 8), seed=1)), t(_f((3,), seed=2))),
    "matmul_3d_2d": lambda t: t(_f((2, 5, 8))) @ t(_f((8, 3), seed=1)),
    "bmm": lambda t: torch.bmm(t(_f((2, 5, 8))), t(_f((2, 8, 3), seed=1))),
    "baddbmm": lambda t: torch.baddbmm(t(_f((2, 5, 3), seed=2)), t(_f((2, 5, 8))), t(_f((2, 8, 3), seed=1)), alpha=0.5),
    "mm_transposed": lambda t: t(_f((8, 5))).t() @ t(_f((3, 8), seed=1)).t(),
    "sum_dim": lambda t: t(_f((3, 4, 5))).sum(1),
    "sum_dims_keepdim": lambda t: t(_f((3, 4, 5))).sum((0, 2), keepdim=True),
    "sum_int_dim": lambda t: t(_f((3, 4), torch.int32)).sum(0),
    "mean_dim": lambda t: t(_f((3, 4, 5))).mean(-1),
    "amax": lambda t: t(_f((3, 4, 5))).amax(1),
    "softmax": lambda t: t(_f((3, 7))).softmax(-1),
    # abs (abs/abs_ are ATen composites over abs.out), masked_fill (a composite over masked_fill_)
    "abs": lambda t: t(_f((3, 4))).abs(),
    "abs_int64_strided_inplace": lambda t: t(_f((4, 3), torch.int64)).t().abs_(),
    "abs_out_bf16": lambda t: torch.abs(t(_f((5,), torch.bfloat16)), out=t(torch.empty(0, dtype=torch.bfloat16))),
    "l1_loss": lambda t: torch.nn.functional.l1_loss(t(_f((3, 4))), t(_f((3, 4), seed=1))),
    "masked_fill_inf_broadcast_mask": lambda t: t(_f((2, 3, 4))).masked_fill(t(_f((3, 4), seed=1)) > 0, float("-inf")),
    "masked_fill_int_inplace_strided": lambda t: (
        t(_f((4, 3), torch.int32)).t().masked_fill_(t(_f((3, 4), seed=1)) > 0, 7)
    ),
    # .item() (_local_scalar_dense) of each kind of dtype (the number back in a tensor)
    "item_float": lambda t: t(torch.tensor(t(_f((1, 1), torch.float64)).item())),
    "item_int64": lambda t: t(torch.tensor(t(_f((1,), torch.int64)).item())),
    "item_bool_strided": lambda t: t(torch.tensor((t(_f((2, 3))) > 0).t()[1, 0].item())),
    "item_bf16": lambda t: t(torch.tensor(t(_f((), torch.bfloat16)).item())),
    # max/min over a dim (values and indices), argmax/argmin, full max/min, var/std, MSE loss
    "max_dim": lambda t: _pair(t(_f((3, 4, 5))).max(1)),
    "min_dim_keepdim_int64": lambda t: _pair(t(_f((3, 4), torch.int64)).min(0, keepdim=True)),
    "max_dim_out_strided": lambda t: _pair(
        torch.max(t(_f((4, 6))).t(), 1, out=(t(torch.empty(0)), t(torch.empty(0, dtype=torch.int64))))
    ),
    "max_dim_0d": lambda t: _pair(t(torch.tensor(2.5)).max(0)),
    "argmax_dim": lambda t: t(_f((3, 4, 5))).argmax(2),
    "argmax_every_dim_strided": lambda t: t(_f((4, 6))).t().argmax(),
    "argmin_every_dim_keepdim": lambda t: t(_f((3, 4), torch.float64)).argmin(keepdim=True),
    "argmin_out": lambda t: torch.argmin(t(_f((3, 4), torch.int32)), 1, out=t(torch.empty(0, dtype=torch.int64))),
    "max_every_element": lambda t: t(_f((3, 4))).max(),
    "min_every_element_int32": lambda t: t(_f((5,), torch.int32)).min(),
    "var_dim": lambda t: t(_f((3, 4, 5))).var(1),
    "std_every_dim_correction0": lambda t: t(_f((3, 4))).std(correction=0),
    "var_dims_keepdim_float64": lambda t: t(_f((3, 4, 2), torch.float64)).var((0, 2), keepdim=True),
    "var_out": lambda t: torch.var(t(_f((3, 4))), 1, out=t(torch.empty(0))),
    "var_mean": lambda t: torch.stack(torch.var_mean(t(_f((3, 4))), 1)),
    "std_mean_strided": lambda t: torch.stack(torch.std_mean(t(_f((3, 4))).t(), 1, correction=2)),
    "mse_loss_mean": lambda t: torch.nn.functional.mse_loss(t(_f((3, 4))), t(_f((3, 4), seed=1))),
    "mse_loss_none_float64": lambda t: torch.nn.functional.mse_loss(
        t(_f((3, 4), torch.float64)), t(_f((3, 4), torch.float64, 1)), reduction="none"
    ),
    "mse_loss_sum_out": lambda t: torch.ops.aten.mse_loss.out(
        t(_f((3, 4))), t(_f((3, 4), seed=1)), 2, out=t(torch.empty(0))
    ),
    "mse_loss_backward": lambda t: _grad(
        lambda x: torch.nn.functional.mse_loss(x, t(_f((3, 4), seed=1))), t(_f((3, 4))), t(torch.tensor(1.5))
    ),
    "mse_loss_backward_none": lambda t: _grad(
        lambda x: torch.nn.functional.mse_loss(x, t(_f((3, 4), seed=1)), reduction="none"),
        t(_f((3, 4))),
        t(_f((3, 4), seed=2)),
    ),
    "log_softmax": lambda t: t(_f((2, 3, 7))).log_softmax(1),
    # indexing, embedding, losses, pooling (forward and, through autograd, backward)
    "index_select": lambda t: t(_f((5, 4))).index_select(0, t(torch.tensor([4, 0, 4, 2]))),
    "index_select_int32_strided": lambda t: (
        t(_f((4, 6), torch.float64)).t().index_select(1, t(torch.tensor([3, 1], dtype=torch.int32)))
    ),
    "index_select_0d_index_out": lambda t: torch.index_select(
        t(_f((3, 4), torch.int64)), 1, t(torch.tensor(2)), out=t(torch.empty(0, dtype=torch.int64))
    ),
    "embedding": lambda t: torch.nn.functional.embedding(t(torch.tensor([[1, 3], [5, 1]])), t(_f((6, 4)))),
    "embedding_backward": lambda t: _grad(
        lambda w: torch.nn.functional.embedding(t(torch.tensor([[1, 3], [5, 1]])), w, padding_idx=3),
        t(_f((6, 4))),
        t(_f((2, 2, 4), seed=1)),
    ),
    "cross_entropy": lambda t: torch.nn.functional.cross_entropy(t(_f((5, 7))), t(torch.tensor([1, 0, 6, 3, 3]))),
    "cross_entropy_backward": lambda t: _grad(
        lambda x: torch.nn.functional.cross_entropy(x, t(torch.tensor([1, 0, 6, 3, 3]))),
        t(_f((5, 7))),
        t(torch.tensor(1.5)),
    ),
    "nll_loss_weight_ignore_none": lambda t: torch.nn.functional.nll_loss(
        t(_f((5, 4), torch.float64)),
        t(torch.tensor([1, 0, 3, 3, 2])),
        weight=t(_f((4,), torch.float64).abs()),
        ignore_index=3,
        reduction="none",
    ),
    "nll_loss_backward_sum_1d": lambda t: _grad(
        lambda x: torch.nn.functional.nll_loss(x, t(torch.tensor(2)), reduction="sum"),
        t(_f((4,))),
        t(torch.tensor(0.5)),
    ),
    "max_pool2d": lambda t: torch.nn.functional.max_pool2d(t(_f((2, 3, 7, 6))), 3, 2, 1, ceil_mode=True),
    "max_pool2d_3d_dilated": lambda t: torch.nn.functional.max_pool2d(
        t(_f((3, 8, 8), torch.float64)), (2, 3), dilation=2
    ),
    "max_pool2d_backward": lambda t: _grad(
        lambda x: torch.nn.functional.max_pool2d(x, 2), t(_f((2, 3, 6, 6))), t(_f((2, 3, 3, 3), seed=1))
    ),
    # dropout's backward (the mask native_dropout saved), lerp, addcmul, addcdiv
    "dropout_backward": lambda t: torch.ops.aten.native_dropout_backward(
        t(_f((3, 5))), t(_f((3, 5), seed=1)) > 0, 1.25
    ),
    "lerp_scalar_inplace": lambda t: t(_f((3, 4))).lerp_(t(_f((3, 4), seed=1)), 0.3),
    "lerp_tensor_broadcast": lambda t: torch.lerp(t(_f((3, 4))), t(_f((4,), seed=1)), t(_f((3, 1), seed=2))),
    "lerp_out_float64": lambda t: torch.lerp(
        t(_f((5,), torch.float64)), t(_f((5,), torch.float64, 1)), 0.8, out=t(torch.empty(0, dtype=torch.float64))
    ),
    "addcmul_int64": lambda t: torch.addcmul(
        t(_f((5,), torch.int64)), t(_f((5,), torch.int64, 1)), t(_f((5,), torch.int64, 2)), value=3
    ),
    "addcmul_inplace_strided": lambda t: (
        t(_f((4, 3))).t().addcmul_(t(_f((3, 4), seed=1)), t(_f((4,), seed=2)), value=0.5)
    ),
    "addcdiv_bf16_out": lambda t: torch.addcdiv(
        t(_f((3, 4), torch.bfloat16)),
        t(_f((3, 4), torch.bfloat16, 1)),
        t(torch.full((4,), 1.5, dtype=torch.bfloat16)),
        value=-2,
        out=t(torch.empty(3, 4, dtype=torch.bfloat16)),
    ),
    # the foreach path of torch.optim (AdamW's default on foo): per-parameter ops, all native
    "adamw_foreach_step": lambda t: _adamw_steps(t),
}


def _adamw_steps(t):
    params = [t(_f((4, 3))).requires_grad_(), t(_f((3,), seed=1)).requires_grad_()]
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.01, foreach=True)
    for step in range(2):
        for i, p in enumerate(params):
            p.grad = t(_f(p.shape, seed=10 * step + i + 2))
        opt.step()
    return torch.cat([p.detach().flatten() for p in params])


def _pair(values_indices):
    """max/min's (values, indices) as one float64 tensor (values, then indices)."""
    v, i = values_indices
    return torch.cat((v.double().flatten(), i.double().flatten()))


def _grad(f, x, g):
    """d f(x) / d x applied to g (one backward call, nothing else)."""
    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x), x, g)[0]


@pytest.mark.parametrize("name", sorted(NATIVE_CASES))
def test_common_calls_run_no_python(no_fallback, name):
    """Broadcasting, mixed dtypes, integers, numbers, strides, out= and
    in-place: dispatcher -> ATen's meta -> Rust, with CPU's results."""
    f = NATIVE_CASES[name]
    expected, actual = run_native_case(name, f)
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def test_training_step_backward_runs_no_python_for_native_ops(no_fallback):
    """An MLP step's backward (threshold/tanh/sigmoid/softmax backward, mm,
    sum) stays on the native path too, and matches CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 16),
        torch.nn.LayerNorm(16),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 4),
    )
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    fmodel = __import__("copy").deepcopy(model).to("foo")
    fx, fy = x.to("foo"), y.to("foo")
    for m, a, b in ((model, x, y), (fmodel, fx, fy)):
        torch.nn.functional.cross_entropy(m(a).log_softmax(-1).exp().softmax(-1), b).backward()
    for p, fp in zip(model.parameters(), fmodel.parameters()):
        torch.testing.assert_close(fp.grad.cpu(), p.grad)
    fmodel.zero_grad()
    before = foo_rs.python_kernel_calls()
    out = fmodel(fx)
    (out.softmax(-1) * out.sigmoid()).sum(1).mean().backward()
    ran = foo_rs.python_kernel_calls() - before
    for op in (
        "native_layer_norm",
        "native_layer_norm_backward",
        "addmm.out",
        "mm.out",
        "threshold_backward",
        "tanh_backward",
        "sigmoid_backward",
        "sum.IntList_out",
        "_softmax.out",
        "_softmax_backward_data.out",
        "mul.Tensor",
        "relu",
        "tanh",
        "sigmoid",
    ):
        assert op not in ran, f"{op} ran Python: {dict(ran)}"


def test_native_path_errors_match_cpu(no_fallback):
    """Errors come from ATen's meta functions: CPU's exception and message."""
    a = torch.ones(3, 4)
    fa = a.to("foo")
    cases = [
        lambda t: t(a) + t(torch.ones(5)),
        lambda t: t(torch.ones(3, dtype=torch.int64)).add_(t(torch.ones(3))),
        lambda t: t(torch.ones(3, dtype=torch.bool)) - t(torch.ones(3, dtype=torch.bool)),
        lambda t: -t(torch.ones(3, dtype=torch.bool)),
        lambda t: t(a) @ t(torch.ones(5, 2)),
        lambda t: torch.bmm(t(torch.ones(2, 3, 4)), t(torch.ones(3, 4, 5))),
        lambda t: t(a).sum(5),
        lambda t: t(a).softmax(2),
        lambda t: t(torch.ones(3, dtype=torch.int64)).clamp(),
        lambda t: torch.cat([t(a), t(torch.ones(3, 5))]),
        lambda t: t(a).index_select(0, t(torch.tensor([1, 3]))),
        lambda t: torch.nn.functional.nll_loss(t(a), t(torch.tensor([1, 7, 0]))),
        lambda t: torch.nn.functional.max_pool2d(t(torch.ones(1, 3, 2, 2)), 3),
    ]
    for f in cases:
        with pytest.raises(Exception) as cpu:
            f(lambda x: x)
        with pytest.raises(type(cpu.value)) as foo:
            f(lambda x: x.to("foo"))
        # ATen's message with "(foo)" appended: every case is raised inside
        # foo's native kernels (functional mm/bmm/sum/softmax/cat included;
        # clamp() by clamp.Tensor's meta).
        cpu_msg, foo_msg = str(cpu.value).split("\n")[0], str(foo.value).split("\n")[0]
        assert foo_msg == cpu_msg + " (foo)"
    del fa


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.bool, torch.complex64], ids=str
)
@pytest.mark.parametrize(
    "shape,view",
    [
        ((1024, 1024), lambda t: t.t()),  # a 4 KiB row stride for 4-byte types
        ((70, 45), lambda t: t.t()),  # ragged tiles for every element size
        ((3, 40, 33), lambda t: t.transpose(1, 2)),  # outer dim
        ((5, 34, 6, 65), lambda t: t.permute(3, 1, 0, 2)),  # two outer dims, strided result dims
        ((40, 100), lambda t: t[::2, 1::3].t()),  # the input's unit-stride dim is gone: general path
        ((2, 64, 3, 64), lambda t: t.permute(0, 2, 1, 3)),  # attention's head permute (rows stay contiguous)
        ((8, 64, 12, 64), lambda t: t.permute(0, 2, 1, 3)),  # the same, large enough to split over threads
        ((7, 9, 50), lambda t: t[:, 2:, 3:]),  # a slice: 47-element rows, outer strides of the parent
        ((6, 1, 40), lambda t: t.expand(6, 5, 40)),  # rows repeated from a stride-0 dim
    ],
    ids=["1024sq", "ragged", "3d", "4d", "sliced", "heads", "heads-big", "slice-rows", "expanded-rows"],
)
def test_transposed_copies_match_cpu(no_fallback, dtype, shape, view):
    """contiguous() / clone() / copy_ of a transposed or permuted view: the tiled transpose path and the
    general one give CPU's elements exactly, into fresh and preallocated (also transposed) outputs."""
    x = make_tensor(shape, dtype, seed=3)
    f = x.to("foo")
    assert torch.equal(view(f).contiguous().cpu(), view(x).contiguous())
    assert torch.equal(view(f).clone(memory_format=torch.contiguous_format).cpu(), view(x).contiguous())
    out = torch.empty(view(x).shape[::-1], dtype=dtype, device="foo").t() if view(x).dim() == 2 else None
    if out is not None:  # a transposed output of a transposed input: both unit strides agree
        out.copy_(view(f))
        assert torch.equal(out.cpu(), view(x))
        plain = torch.empty(view(x).shape, dtype=dtype, device="foo")
        plain.copy_(view(f))  # into a preallocated contiguous output
        assert torch.equal(plain.cpu(), view(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_row_copies_into_permuted_outputs_match_cpu(no_fallback, dtype):
    """copy_ into a permuted preallocated output whose rows stay contiguous (attention's head merge
    written in place), and out of one: each row copied whole gives CPU's elements."""
    src = make_tensor((8, 12, 64, 64), dtype, seed=5)
    for shape in [(8, 64, 12, 64), (2, 40, 3, 33)]:
        x = src.flatten()[: torch.Size(shape).numel()].view(shape[0], shape[2], shape[1], shape[3])
        want = torch.zeros(shape, dtype=dtype)
        want.permute(0, 2, 1, 3).copy_(x)
        dst = torch.zeros(shape, dtype=dtype, device="foo")
        dst.permute(0, 2, 1, 3).copy_(x.to("foo"))
        assert torch.equal(dst.cpu(), want)
        back = torch.empty_like(x, device="foo")
        back.copy_(dst.permute(0, 2, 1, 3))
        assert torch.equal(back.cpu(), x)


FILL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
]
FILL_VALUES = [0, -0.0, 1 / 3, 1e-8, 65504.5, 1e30, float("nan"), float("-inf"), True, 2**40, 255, -3, 0.5]


@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 5), (0, 4), (300, 257)], ids=["small", "empty", "threaded"])
def test_fill_and_zero_match_cpu_bits(no_fallback, dtype, shape):
    """fill_/zero_ on contiguous tensors (the direct fill) and on transposed ones (the general path):
    every value converts to the dtype exactly as on CPU, or raises CPU's overflow error, naming foo."""
    for value in FILL_VALUES + [torch.tensor(v) for v in FILL_VALUES[::3]]:  # fill_.Scalar and fill_.Tensor
        for layout in (lambda t: t, lambda t: t.t()):
            cpu = layout(torch.ones(shape, dtype=dtype))
            foo = layout(torch.ones(shape, dtype=dtype, device="foo"))
            try:
                cpu.fill_(value)
            except Exception as e:  # noqa: BLE001  (CPU's refusal: foo must refuse alike)
                with pytest.raises(type(e), match="(?s)without overflow.*foo|foo.*without overflow"):
                    foo.fill_(value)
                continue
            foo.fill_(value)
            assert torch.equal(foo.cpu().reshape(-1).view(torch.uint8), cpu.reshape(-1).view(torch.uint8)) or (
                cpu.is_floating_point() and cpu.isnan().all() and foo.cpu().isnan().all()
            ), (dtype, value)
    # zero_: contiguous (all-zero bytes), transposed and complex alike; a
    # float's zero is +0.0 (its bytes, not ==, tell it from -0.0).
    for layout in (lambda t: t, lambda t: t.t()):
        z = layout((-torch.rand(shape)).to(dtype).to("foo"))
        assert z.zero_() is z
        assert torch.equal(z.cpu().reshape(-1).view(torch.uint8), torch.zeros(z.numel(), dtype=dtype).view(torch.uint8))
    if dtype == torch.float32:
        c = torch.randn(shape, dtype=torch.complex64).to("foo")
        c.zero_()
        assert torch.equal(torch.view_as_real(c.cpu()), torch.zeros(*shape, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("shape", [(4, 8), (0, 3), (257, 300)], ids=["small", "empty", "threaded"])
def test_same_layout_copies_match_cpu(no_fallback, dtype, shape):
    """copy_ of one dtype and shape between contiguous tensors (the copy without an iterator): foo to
    foo, CPU to foo and foo to CPU give the source's elements; a view of the same storage and a
    broadcast source still take the iterator's path and agree too."""
    x = make_tensor(shape, dtype, seed=9)
    f = x.to("foo")
    dst = torch.empty(shape, dtype=dtype, device="foo")
    assert torch.equal(dst.copy_(f).cpu(), x)
    dst2 = torch.empty(shape, dtype=dtype, device="foo")
    assert torch.equal(dst2.copy_(x).cpu(), x)
    back = torch.empty(shape, dtype=dtype)
    assert torch.equal(back.copy_(f), x)
    if x.numel():
        row = make_tensor(shape[1:], dtype, seed=10)
        assert torch.equal(dst.copy_(row.to("foo")).cpu(), row.expand(shape))
        big = torch.cat([x, x]).to("foo")
        big[: shape[0]].copy_(big[shape[0] :])  # one storage: not the direct copy
        assert torch.equal(big.cpu(), torch.cat([x, x]))
