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

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import make_tensor

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
        "int_div": (lambda a, b: a / b, make_tensor((3, 4), torch.int32, 1), make_tensor((3, 4), torch.int32, 2) + 2000),
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
