"""foo's own operators (torch.ops.foo.*, foo_rs/ops.py): values and
gradients against the composite they fuse, on foo and on CPU, every float
dtype, strided and empty inputs, errors, opcheck, torch.compile.

Everything runs with the CPU fallback off: a foo kernel that handed its work
to torch's CPU kernels would raise here, not hide.
"""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_rs.ops import ACTIVATIONS

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}
# Gradients go through a longer chain of roundings (a 16-bit backward sums
# 16-bit products the composite rounds at every op).
GRAD_TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float16: dict(rtol=2e-2, atol=3e-2),
    torch.bfloat16: dict(rtol=5e-2, atol=1e-1),
}


@pytest.fixture(autouse=True)
def _no_fallback():
    # The baseline after a collection: garbage that earlier tests left (a
    # full-suite run) would otherwise be freed during this test.
    gc.collect()
    torch.foo.synchronize()
    before = torch.foo.memory_allocated()
    with foo_rs.fallback_disabled():
        yield
    gc.collect()
    assert torch.foo.memory_allocated() == before  # every output and saved tensor freed


def _act(y, act):
    return {
        "none": lambda t: t,
        "relu": torch.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
    }[act](y)


def _leaves(*tensors, device):
    return [None if t is None else t.detach().to(device).requires_grad_(t.is_floating_point()) for t in tensors]


# --------------------------------------------------------------------------- rms_norm


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_matches_composite_values_and_grads(dtype, with_weight):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 40, generator=g).to(dtype)
    w = (torch.randn(6, 40, generator=g) + 1).to(dtype) if with_weight else None
    dy = torch.randn(4, 6, 40, generator=g).to(dtype)
    # Reference: the composite on CPU in the same dtype.
    xr, wr = _leaves(x, w, device="cpu")
    ref = F.rms_norm(xr, [6, 40], wr, 1e-5)
    ref.backward(dy)
    for device in ("foo", "cpu"):
        xf, wf = _leaves(x, w, device=device)
        out = torch.ops.foo.rms_norm(xf, [6, 40], wf, 1e-5)
        assert out.device.type == device and out.dtype == dtype and out.shape == x.shape
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), **TOL[dtype])
        out.backward(dy.to(device))
        torch.testing.assert_close(xf.grad.cpu(), xr.grad, **GRAD_TOL[dtype], msg=lambda m: f"{device} dx: {m}")
        if with_weight:
            assert wf.grad.dtype == dtype
            torch.testing.assert_close(wf.grad.cpu(), wr.grad, **GRAD_TOL[dtype], msg=lambda m: f"{device} dw: {m}")


def test_rms_norm_default_eps_strided_and_empty():
    x = torch.randn(5, 16, 3).transpose(1, 2)  # non-contiguous, rows of 16
    w = torch.rand(16) + 0.5
    got = foo_rs.ops.rms_norm(x.to("foo"), 16, w.to("foo"))  # eps None: finfo(float32).eps, as aten
    torch.testing.assert_close(got.cpu(), F.rms_norm(x, [16], w), rtol=1e-5, atol=1e-6)
    # Tiny values: the default eps is what decides the result.
    small = torch.full((2, 8), 1e-5, dtype=torch.bfloat16)
    torch.testing.assert_close(
        torch.ops.foo.rms_norm(small.to("foo"), [8]).cpu(), F.rms_norm(small, [8]), **TOL[torch.bfloat16]
    )
    for shape in [(0, 8), (3, 0)]:
        e = torch.empty(shape, device="foo", requires_grad=True)
        out = torch.ops.foo.rms_norm(e, [shape[1]])
        assert out.shape == shape
        out.sum().backward()
        assert e.grad.shape == shape


def test_rms_norm_bad_input_errors_name_foo():
    x = torch.randn(3, 4, device="foo")
    cases = [
        (lambda: torch.ops.foo.rms_norm(x, [5]), RuntimeError, "expected input with shape"),
        (lambda: torch.ops.foo.rms_norm(x, [4], torch.ones(3, device="foo")), RuntimeError, "weight"),
        (lambda: torch.ops.foo.rms_norm(x, []), RuntimeError, "at least 1-dimensional"),
        (lambda: torch.ops.foo.rms_norm(x.int(), [4]), NotImplementedError, "'Int'"),
        (lambda: torch.ops.foo.rms_norm(x, [4], torch.ones(4)), RuntimeError, "same device"),
    ]
    for fn, exc, text in cases:
        with pytest.raises(exc, match=text) as info:
            fn()
        assert "foo" in str(info.value)
    # The same cases raise the composite's exception types on CPU.
    with pytest.raises(RuntimeError):
        F.rms_norm(x.cpu(), [5])


# --------------------------------------------------------------------------- linear_act


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_linear_act_matches_composite_values_and_grads(dtype, act):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, 24, generator=g).to(dtype)
    w = (torch.randn(20, 24, generator=g) / 5).to(dtype)
    b = torch.randn(20, generator=g).to(dtype)
    dy = torch.randn(3, 7, 20, generator=g).to(dtype)
    xr, wr, br = _leaves(x, w, b, device="cpu")
    ref = _act(F.linear(xr, wr, br), act)
    ref.backward(dy)
    for device in ("foo", "cpu"):
        xf, wf, bf = _leaves(x, w, b, device=device)
        out = torch.ops.foo.linear_act(xf, wf, bf, act)
        assert out.device.type == device and out.dtype == dtype and out.shape == ref.shape
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), **TOL[dtype])
        out.backward(dy.to(device))
        for name, got, want in [("dx", xf, xr), ("dw", wf, wr), ("db", bf, br)]:
            torch.testing.assert_close(
                got.grad.cpu(), want.grad, **GRAD_TOL[dtype], msg=lambda m: f"{device} {act} {name}: {m}"
            )


def test_linear_act_large_tiles_strided_no_bias_and_empty():
    # Rows enough for several output tiles (and threads); transposed operands.
    g = torch.Generator().manual_seed(2)
    x = torch.randn(96, 700, generator=g).t()  # [700, 96], column-major
    w = torch.randn(96, 300, generator=g).t()  # [300, 96], strided weight
    got = torch.ops.foo.linear_act(x.to("foo"), w.to("foo"), None, "gelu_tanh")
    torch.testing.assert_close(got.cpu(), F.gelu(F.linear(x, w), approximate="tanh"), rtol=1e-4, atol=1e-4)
    # A bias given as a 0-d tensor broadcasts as in F.linear.
    b0 = torch.tensor(0.5)
    got = torch.ops.foo.linear_act(x[:5].to("foo"), w.to("foo"), b0.to("foo"), "relu")
    torch.testing.assert_close(got.cpu(), torch.relu(F.linear(x[:5], w, b0)), rtol=1e-4, atol=1e-4)
    for xs, ws in [((0, 4), (3, 4)), ((2, 4), (0, 4)), ((2, 0), (3, 0))]:
        xe = torch.randn(xs, device="foo", requires_grad=True)
        we = torch.randn(ws, device="foo", requires_grad=True)
        be = torch.randn(ws[0], device="foo", requires_grad=True)
        out = torch.ops.foo.linear_act(xe, we, be, "silu")
        torch.testing.assert_close(out.cpu(), F.silu(F.linear(xe.detach().cpu(), we.detach().cpu(), be.detach().cpu())))
        out.sum().backward()
        assert xe.grad.shape == xe.shape and we.grad.shape == we.shape and be.grad.shape == be.shape


def test_linear_act_integers_use_foo_kernels():
    x = torch.randint(-5, 5, (4, 3))
    w = torch.randint(-5, 5, (2, 3))
    got = torch.ops.foo.linear_act(x.to("foo"), w.to("foo"), None, "relu")
    assert got.dtype == torch.int64
    torch.testing.assert_close(got.cpu(), torch.relu(x @ w.t()))


def test_linear_act_bad_input_errors_name_foo():
    x = torch.randn(3, 4, device="foo")
    w = torch.randn(5, 4, device="foo")
    cases = [
        (lambda: torch.ops.foo.linear_act(x, torch.randn(5, 3, device="foo")), RuntimeError, "cannot be multiplied"),
        (lambda: torch.ops.foo.linear_act(x, w.double()), RuntimeError, "same dtype"),
        (lambda: torch.ops.foo.linear_act(x, w, None, "tanh"), ValueError, "unknown activation"),
        (lambda: torch.ops.foo.linear_act(x, w, torch.randn(4, device="foo")), RuntimeError, "bias"),
        (lambda: torch.ops.foo.linear_act(x, w.cpu()), RuntimeError, "same device"),
        (lambda: torch.ops.foo.linear_act(x.long(), w.long(), None, "gelu"), NotImplementedError, "'Long'"),
    ]
    for fn, exc, text in cases:
        with pytest.raises(exc, match=text) as info:
            fn()
        assert "foo" in str(info.value)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        F.linear(x.cpu(), torch.randn(5, 3))  # the CPU's own type and message


# --------------------------------------------------------------------------- library machinery


# opcheck's own AOT check reads .grad of non-leaf tensors it makes (torch 2.15 warns so
# for aten.sin too): that warning is the harness's, not the ops'.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf Tensor")
@pytest.mark.parametrize("device", ["foo", "cpu"])
def test_opcheck(device):
    """Schema, fake kernel, autograd registration and AOT dispatch agree
    with the real kernels (torch.library.opcheck)."""
    g = torch.Generator().manual_seed(3)

    def t(*shape):
        return torch.randn(*shape, generator=g).to(device).requires_grad_()

    samples = [
        (torch.ops.foo.rms_norm.default, (t(3, 8), [8], t(8), 1e-6)),
        (torch.ops.foo.rms_norm.default, (t(2, 3, 4), [3, 4], None, None)),
        (torch.ops.foo.linear_act.default, (t(5, 6), t(4, 6), t(4), "gelu")),
        (torch.ops.foo.linear_act.default, (t(2, 5, 6), t(4, 6), None, "relu")),
        (
            torch.ops.foo.rms_norm_backward.default,
            (t(3, 8).detach(), t(3, 8).detach(), [8], t(8).detach(), 1e-6, [True, True]),
        ),
    ]
    # opcheck's autograd-registration check knows CPU/CUDA/XPU only ("NYI devices
    # other than CPU/CUDA/XPU"): on foo, the registration is asserted directly.
    utils = ["test_schema", "test_faketensor", "test_aot_dispatch_dynamic"]
    if device == "cpu":
        utils.append("test_autograd_registration")
    for op, args in samples:
        result = torch.library.opcheck(op, args, test_utils=utils)
        assert set(result) == set(utils) and all(v == "SUCCESS" for v in result.values()), (op, result)
    for name in ("foo::rms_norm", "foo::linear_act"):
        # register_autograd's kernel, for every backend (foo's included).
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd"), name


def test_compiled_ops_stay_one_extern_call_each():
    """Under torch.compile (fullgraph) each op is one call of the foo op in
    the generated code, forward and backward, with eager's values."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 32, generator=g).to("foo")
    w_norm = (torch.rand(32, generator=g) + 0.5).to("foo").requires_grad_()
    w = (torch.randn(48, 32, generator=g) / 6).to("foo").requires_grad_()
    b = torch.randn(48, generator=g).to("foo").requires_grad_()

    def f(x, w_norm, w, b):
        h = torch.ops.foo.rms_norm(x, [32], w_norm, 1e-6)
        return torch.ops.foo.linear_act(h, w, b, "silu").square().sum()

    compiled = torch.compile(f, backend="inductor", fullgraph=True)

    def run():
        loss = compiled(x, w_norm, w, b)
        loss.backward()
        return loss

    loss, codes = run_and_get_code(run)
    code = "\n".join(codes)
    assert code.count("torch.ops.foo.rms_norm.default(") == 1, code
    assert code.count("torch.ops.foo.linear_act.default(") == 1, code
    assert code.count("torch.ops.foo.rms_norm_backward.default(") == 1, code
    grads = [w_norm.grad.clone(), w.grad.clone(), b.grad.clone()]
    for p in (w_norm, w, b):
        p.grad = None
    eager = f(x, w_norm, w, b)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-5)
    for got, p in zip(grads, (w_norm, w, b)):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
