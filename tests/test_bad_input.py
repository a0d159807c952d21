"""Bad input on foo: the exception CPU gives (or, where CPU does not apply, a
clear one naming foo), never a crash, and no memory left behind.

Every case runs in a worker process (this file run as a script), so that a
segfault or a hang fails that case instead of killing the test run; the worker
restarts after the case that killed it. Around each case the worker checks
that ``torch.foo.memory_allocated`` of both devices and ``foo_rs.live_blocks()``
are back to what they were before (after gc). The CPU fallback is on, as a
user has it: native kernels where foo has them.

Run one case by hand:  python tests/test_bad_input.py --worker --only oob_gather
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

os.environ.setdefault("FOO_RS_DEVICE_COUNT", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import foo_rs  # noqa: E402

# ---------------------------------------------------------------- cases

CASES: dict[str, tuple[Callable[[], None], str | None]] = {}


def case(bug: str | None = None):
    """Registers a case; ``bug`` (a precise description) marks a known foo bug
    (the pytest test is then xfail(strict=True))."""

    def register(fn):
        CASES[fn.__name__.removeprefix("case_")] = (fn, bug)
        return fn

    return register


def _outcome(fn, device):
    try:
        out = fn(device)
    except Exception as e:  # noqa: BLE001
        return None, type(e), str(e)
    return out, None, None


def same_as_cpu(fn, match: str | None = None, reference: str = "cpu") -> None:
    """fn(device) must raise on foo exactly the exception type it raises on
    ``reference`` (or return equal results if it does not raise there)."""
    ref, ref_t, ref_msg = _outcome(fn, reference)
    out, foo_t, foo_msg = _outcome(fn, "foo")
    if ref_t is None:
        assert foo_t is None, f"{reference} succeeds, foo raised {foo_t.__name__}: {foo_msg}"
        if reference == "cpu":
            torch.testing.assert_close(_to_cpu(out), ref, equal_nan=True, check_device=False)
        return
    assert foo_t is not None, f"{reference} raised {ref_t.__name__}: {ref_msg}; foo did not raise"
    assert foo_t is ref_t, f"foo raised {foo_t.__name__}: {foo_msg!r}; {reference} raised {ref_t.__name__}: {ref_msg!r}"
    if match is not None:
        assert re.search(match, foo_msg), f"foo's message {foo_msg!r} does not match {match!r}"


def raises(fn: Callable[[], object], types, match: str) -> str:
    try:
        fn()
    except types as e:
        msg = str(e)
        assert re.search(match, msg), f"{type(e).__name__} message {msg!r} does not match {match!r}"
        return msg
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {types}, got {type(e).__name__}: {e}") from None
    raise AssertionError(f"expected {types}, nothing was raised")


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v) for v in x)
    return x


def T(data, device, dtype=None):
    return torch.tensor(data, dtype=dtype).to(device)


def R(shape, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device)


# -- unsupported dtypes (CPU holds them; foo must refuse, naming foo) --------

_DTYPE_MSG = r"foo.*(not support|Cannot create)|not support.*foo"


@case()
def case_dtype_empty_complex32():
    raises(lambda: torch.empty(3, dtype=torch.complex32, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_zeros_complex32():
    raises(lambda: torch.zeros(2, 2, dtype=torch.complex32, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_randn_complex32():
    raises(lambda: torch.randn(3, dtype=torch.complex32, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_complex_tensor_to_foo():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ComplexHalf is experimental in torch
        c = torch.randn(3, dtype=torch.complex64).to(torch.complex32)
    raises(lambda: c.to("foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_foo_to_complex():
    x = R(3, "foo")
    raises(lambda: x.to(torch.complex32), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_complex_from_two_foo_tensors():
    x = R(3, "foo").half()
    raises(lambda: torch.complex(x, x), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_view_as_complex():
    x = R((3, 2), "foo").half()
    raises(lambda: torch.view_as_complex(x), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_tensor_literal_complex():
    raises(lambda: torch.tensor([1 + 2j], dtype=torch.complex32, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_view_reinterpret_complex():
    x = R(4, "foo")
    raises(lambda: x.view(torch.complex32), RuntimeError, _DTYPE_MSG)
    u = torch.zeros(4, dtype=torch.uint8, device="foo")
    raises(lambda: u.view(torch.float8_e4m3fn), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_float8_to_foo():
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        f8 = torch.randn(4).to(dt)
        raises(lambda: f8.to("foo"), RuntimeError, _DTYPE_MSG)
        raises(lambda: torch.empty(4, dtype=dt, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_foo_to_float8():
    x = R(4, "foo")
    raises(lambda: x.to(torch.float8_e4m3fn), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_unsigned_wide():
    for dt in (torch.uint16, torch.uint32, torch.uint64):
        raises(lambda: torch.zeros(3, dtype=dt, device="foo"), RuntimeError, _DTYPE_MSG)


@case()
def case_dtype_quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized tensors are deprecated in torch
        q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8)
    # No quantized foo backend: NotImplementedError naming 'Quantizedfoo' (as CUDA's would).
    raises(lambda: q.to("foo"), (RuntimeError, NotImplementedError), "foo")
    raises(lambda: torch.empty(3, dtype=torch.qint8, device="foo"), (RuntimeError, NotImplementedError), "foo")


@case()
def case_dtype_typed_storage_complex():
    # (torch.TypedStorage(4, dtype=torch.complex32, device="foo") is torch's own
    # constructor, which checks nothing for PrivateUse1: it succeeds, as it would for CUDA.)
    warnings.filterwarnings("ignore", "TypedStorage is deprecated")
    ts = torch.TypedStorage(4, dtype=torch.complex32)
    raises(
        lambda: ts.foo(),
        RuntimeError,
        r"Cannot create foo storage as torch.complex32 dtype is not supported",
    )


# -- foo:0 with foo:1 (and with CPU) ----------------------------------------

_SAME_DEVICE = r"Expected all tensors to be on the same device.*foo:0.*foo:1|foo:1.*foo:0"


def _pair():
    return R(3, "foo:0", 1), R(3, "foo:1", 2)


@case()
def case_devices_add():
    a, b = _pair()
    raises(lambda: a + b, RuntimeError, _SAME_DEVICE)
    raises(lambda: b + a, RuntimeError, r"Expected all tensors to be on the same device")


@case()
def case_devices_inplace_mul():
    a, b = _pair()
    raises(lambda: a.mul_(b), RuntimeError, _SAME_DEVICE)


@case()
def case_devices_matmul():
    a, b = R((3, 3), "foo:0"), R((3, 3), "foo:1")
    raises(lambda: a @ b, RuntimeError, _SAME_DEVICE)
    raises(lambda: torch.mm(a, b), RuntimeError, _SAME_DEVICE)


@case()
def case_devices_cat_stack():
    a, b = _pair()
    raises(lambda: torch.cat([a, b]), RuntimeError, _SAME_DEVICE)
    raises(lambda: torch.stack([a, b]), RuntimeError, _SAME_DEVICE)


@case()
def case_devices_where():
    a, b = _pair()
    cond = torch.tensor([True, False, True], device="foo:0")
    raises(lambda: torch.where(cond, a, b), RuntimeError, _SAME_DEVICE)


@case()
def case_devices_index_select():
    a = R(5, "foo:0")
    idx = torch.tensor([0, 1], device="foo:1")
    raises(lambda: a.index_select(0, idx), RuntimeError, _SAME_DEVICE)


@case()
def case_devices_out_on_other_device():
    a = R(3, "foo:0")
    out = torch.empty(3, device="foo:1")
    raises(lambda: torch.add(a, a, out=out), RuntimeError, r"foo:0|foo:1|device")


@case()
def case_devices_linear_module():
    lin = torch.nn.Linear(3, 2).to("foo:0")
    x = R((4, 3), "foo:1")
    raises(lambda: lin(x), RuntimeError, r"Expected all tensors to be on the same device")


@case()
def case_devices_foo_with_cpu_tensor():
    a = R(3, "foo:0")
    raises(
        lambda: a + torch.ones(3),
        RuntimeError,
        r"Expected all tensors to be on the same device.*(foo:0.*cpu|cpu.*foo:0)",
    )


@case()
def case_devices_allowed_mixes():
    # Not errors: a CPU 0-dim tensor is a scalar; copies across devices are fine.
    a, b = _pair()
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), a.cpu() + 2)
    c = torch.empty(3, device="foo:0")
    c.copy_(b)
    assert c.device == torch.device("foo:0")
    torch.testing.assert_close(c.cpu(), b.cpu())
    torch.testing.assert_close(b.to("foo:0").cpu(), b.cpu())


# -- shape mismatches (as CPU) ---------------------------------------------


@case()
def case_shape_add():
    same_as_cpu(lambda d: R(3, d) + R(4, d), r"size of tensor a \(3\) must match")


@case()
def case_shape_inplace_broadcast_self():
    same_as_cpu(lambda d: R((3, 1), d).add_(R((3, 4), d)))


@case()
def case_shape_matmul():
    same_as_cpu(lambda d: R((2, 3), d) @ R((4, 5), d))
    same_as_cpu(lambda d: torch.mm(R(3, d), R((3, 3), d)))
    same_as_cpu(lambda d: torch.bmm(R((2, 3, 4), d), R((3, 4, 5), d)))


@case()
def case_shape_cat_stack():
    same_as_cpu(lambda d: torch.cat([R((2, 3), d), R((2, 4), d)]))
    same_as_cpu(lambda d: torch.stack([R(3, d), R(4, d)]))
    same_as_cpu(lambda d: torch.cat([R((2, 3), d), R((2, 3), d)], dim=2))


@case()
def case_shape_view_reshape():
    same_as_cpu(lambda d: R(6, d).view(7))
    same_as_cpu(lambda d: R(6, d).reshape(4, 4))
    same_as_cpu(lambda d: R((2, 3), d).t().view(6))
    same_as_cpu(lambda d: R(6, d).view(-1, -1))


@case()
def case_shape_expand_copy():
    same_as_cpu(lambda d: R(3, d).expand(4))
    same_as_cpu(lambda d: torch.empty(3, device=d).copy_(R(4, d)))
    same_as_cpu(lambda d: torch.empty(3, device=d).copy_(R(4, "cpu")))


@case()
def case_shape_masked_and_where():
    same_as_cpu(lambda d: R(4, d).masked_fill(torch.ones(3, dtype=torch.bool, device=d), 0.0))
    same_as_cpu(lambda d: torch.where(torch.ones(3, dtype=torch.bool, device=d), R(4, d), R(4, d)))


@case()
def case_shape_index_put():
    def put(d):
        x = R(5, d)
        x[T([0, 1], d)] = R(3, d)
        return x

    same_as_cpu(put)


@case()
def case_shape_linear_and_loss():
    same_as_cpu(lambda d: torch.nn.functional.linear(R((2, 3), d), R((4, 5), d)))
    same_as_cpu(lambda d: torch.nn.functional.cross_entropy(R((4, 3), d), T([0, 1, 2], d)))


# -- out-of-range indices (as CPU) ------------------------------------------


@case()
def case_oob_index_select():
    same_as_cpu(lambda d: R(5, d).index_select(0, T([0, 5], d)))
    same_as_cpu(lambda d: R(5, d).index_select(0, T([-6], d)))
    same_as_cpu(lambda d: R((5, 2), d).index_select(2, T([0], d)))


@case()
def case_oob_gather():
    same_as_cpu(lambda d: torch.gather(R((3, 3), d), 1, T([[0, 3]], d)))
    same_as_cpu(lambda d: torch.gather(R((3, 3), d), 0, T([[-4, 0]], d)))


@case()
def case_oob_scatter():
    same_as_cpu(lambda d: torch.zeros(3, 3, device=d).scatter_(1, T([[0, 3]], d), R((1, 2), d)))
    same_as_cpu(lambda d: torch.zeros(3, device=d).scatter_add_(0, T([7], d), R(1, d)))
    same_as_cpu(lambda d: torch.zeros(3, device=d).scatter(0, T([-4], d), 1.0))


@case()
def case_oob_advanced_index():
    same_as_cpu(lambda d: R(5, d)[T([1, 5], d)])
    same_as_cpu(lambda d: R((2, 5), d)[:, T([-6], d)])
    same_as_cpu(lambda d: R(5, d)[torch.ones(6, dtype=torch.bool, device=d)])

    def setitem(d):
        x = R(5, d)
        x[T([9], d)] = 1.0
        return x

    same_as_cpu(setitem)


@case()
def case_oob_basic_index():
    same_as_cpu(lambda d: R(5, d)[5])
    same_as_cpu(lambda d: R((2, 3), d)[:, -4])
    same_as_cpu(lambda d: R(5, d).select(0, 7))
    same_as_cpu(lambda d: R(5, d).narrow(0, 3, 4))


@case()
def case_oob_embedding():
    same_as_cpu(lambda d: torch.nn.functional.embedding(T([[0, 10]], d), R((10, 3), d)))
    same_as_cpu(lambda d: torch.nn.functional.embedding(T([-1], d), R((10, 3), d)))


@case()
def case_oob_take_put():
    same_as_cpu(lambda d: torch.take(R((2, 3), d), T([6], d)))
    same_as_cpu(lambda d: torch.take(R((2, 3), d), T([-7], d)))
    same_as_cpu(lambda d: R((2, 3), d).put_(T([6], d), R(1, d)))


@case()
def case_oob_index_add_copy_fill():
    same_as_cpu(lambda d: torch.zeros(3, device=d).index_add_(0, T([3], d), R(1, d)))
    same_as_cpu(lambda d: torch.zeros(3, device=d).index_copy_(0, T([-4], d), R(1, d)))
    same_as_cpu(lambda d: torch.zeros(3, device=d).index_fill_(0, T([3], d), 1.0))


@case()
def case_oob_index_dtype():
    # float indices are a type error, as on CPU
    same_as_cpu(lambda d: R(5, d).index_select(0, T([0.0], d)))
    same_as_cpu(lambda d: R(5, d)[T([0.5], d)])


# -- huge sizes: the byte count overflows (reference: meta, which allocates nothing)


@case()
def case_huge_overflowing_sizes():
    big = 2**62
    same_as_cpu(lambda d: torch.empty(big, big, device=d), r"overflow", reference="meta")
    same_as_cpu(lambda d: torch.zeros(2**61, dtype=torch.float64, device=d), reference="meta")
    same_as_cpu(lambda d: torch.empty(2**63 - 1, device=d), reference="meta")
    same_as_cpu(lambda d: torch.empty_strided((big, 4), (4, 1), device=d), reference="meta")


@case()
def case_huge_overflow_in_ops():
    # CPU checks these sizes before allocating anything, so it is the reference.
    same_as_cpu(lambda d: torch.ones(2, device=d).repeat(2**62, 2**62))
    same_as_cpu(lambda d: torch.ones(2, 2, device=d).new_empty((2**40, 2**40, 2**40)), r"overflow")
    same_as_cpu(lambda d: torch.ones(1, device=d).expand(2**62, 2**62).contiguous(), r"overflow")
    same_as_cpu(lambda d: torch.ones(1, device=d).expand(2**31, 2**31, 4) + 1, r"overflow")


# -- negative sizes (as CPU) ------------------------------------------------


@case()
def case_negative_sizes_factories():
    same_as_cpu(lambda d: torch.empty(-1, device=d), r"negative dimension")
    same_as_cpu(lambda d: torch.zeros(2, -3, device=d))
    same_as_cpu(lambda d: torch.randn(-2, device=d))
    same_as_cpu(lambda d: torch.full((-1,), 1.0, device=d))
    same_as_cpu(lambda d: torch.empty_strided((2, -1), (1, 1), device=d))
    same_as_cpu(lambda d: torch.arange(0, -5, 1, device=d))


@case()
def case_negative_sizes_methods():
    same_as_cpu(lambda d: R(3, d).new_zeros(-1))
    same_as_cpu(lambda d: R(6, d).view(-2, 3))
    same_as_cpu(lambda d: R(3, d).expand(-2))
    same_as_cpu(lambda d: R(3, d).resize_(-1))
    same_as_cpu(lambda d: R(3, d).repeat(-1))


# -- overlapping outputs (as CPU) -------------------------------------------


@case()
def case_overlap_out_internal():
    same_as_cpu(
        lambda d: torch.add(R(4, d), R(4, d), out=torch.empty(1, device=d).expand(4)), r"single memory location"
    )
    same_as_cpu(lambda d: torch.mul(R(4, d), 2.0, out=torch.empty(1, device=d).expand(4)))


@case()
def case_overlap_inplace_on_expanded():
    same_as_cpu(lambda d: R(3, d).expand(3, 3).add_(1.0))
    same_as_cpu(lambda d: R(3, d).expand(2, 3).copy_(R((2, 3), d)), r"single memory location")
    same_as_cpu(lambda d: R(3, d)[None].expand(3, 3).exp_())


@case()
def case_overlap_partial_input_output():
    def shifted(d):
        x = R(6, d)
        return torch.exp(x[1:], out=x[:-1])

    same_as_cpu(shifted)

    def shifted_add(d):
        x = R(6, d)
        return torch.add(x[:-1], 1.0, out=x[1:])

    same_as_cpu(shifted_add)


@case()
def case_overlap_full_alias_is_fine():
    def aliased(d):
        x = R(5, d)
        torch.add(x, x, out=x)
        return x

    same_as_cpu(aliased)

    def self_copy(d):
        x = R(5, d)
        x.copy_(x)
        return x

    same_as_cpu(self_copy)


@case()
def case_overlap_partial_copy():
    def overlapping_copy(d):
        x = torch.arange(6.0).to(d)
        x[1:].copy_(x[:-1])
        return x

    same_as_cpu(overlapping_copy, r"single memory location")


# -- NaN and Inf inputs (results as CPU's, NaN == NaN) -----------------------


def _special(d, dtype=torch.float32):
    nan, inf = float("nan"), float("inf")
    return torch.tensor([1.0, nan, -inf, inf, -0.0, 0.0, -2.5, 3.0], dtype=dtype).to(d)


@case()
def case_nan_elementwise():
    for f in (
        torch.exp,
        torch.log,
        torch.sqrt,
        torch.tanh,
        torch.sigmoid,
        torch.relu,
        torch.abs,
        torch.neg,
        torch.floor,
        torch.sign,
        torch.reciprocal,
        torch.isnan,
        torch.isinf,
        torch.isfinite,
        torch.nn.functional.silu,
        torch.nan_to_num,
    ):
        same_as_cpu(lambda d: f(_special(d)))
    # gelu(+inf): CPU itself gives inf on its scalar path and NaN on its
    # vectorised one (torch.full((64,), inf)); either is accepted from foo.
    same_as_cpu(lambda d: torch.nn.functional.gelu(_special(d)[[0, 1, 2, 4, 5, 6, 7]]))
    g = torch.nn.functional.gelu(torch.full((64,), float("inf"), device="foo")).cpu()
    assert bool(((g == float("inf")) | g.isnan()).all()), g
    same_as_cpu(lambda d: _special(d) + _special(d).flip(0))
    same_as_cpu(lambda d: _special(d) * 0.0)
    same_as_cpu(lambda d: _special(d) / torch.zeros(8, device=d))
    same_as_cpu(lambda d: torch.clamp(_special(d), -1.0, 1.0))
    same_as_cpu(lambda d: torch.maximum(_special(d), torch.zeros(8, device=d)))
    same_as_cpu(lambda d: torch.minimum(_special(d), torch.zeros(8, device=d)))
    same_as_cpu(lambda d: torch.where(_special(d) > 0, _special(d), -_special(d)))
    same_as_cpu(lambda d: _special(d) == _special(d))


@case()
def case_nan_reductions():
    for f in (
        torch.sum,
        torch.mean,
        torch.prod,
        torch.max,
        torch.min,
        torch.amax,
        torch.argmax,
        torch.argmin,
        torch.nansum,
        torch.nanmean,
        torch.var,
        torch.std,
    ):
        same_as_cpu(lambda d: f(_special(d)))
    same_as_cpu(lambda d: torch.logsumexp(_special(d), 0))
    same_as_cpu(lambda d: torch.cumsum(_special(d), 0))
    same_as_cpu(lambda d: torch.softmax(_special(d), 0))
    same_as_cpu(lambda d: torch.log_softmax(torch.tensor([0.0, float("inf"), 1.0]).to(d), 0))
    same_as_cpu(lambda d: torch.sort(_special(d)))
    same_as_cpu(lambda d: torch.topk(_special(d), 3))
    same_as_cpu(lambda d: torch.max(_special(d).view(2, 4), dim=1))


@case()
def case_nan_matmul_and_lowp():
    same_as_cpu(lambda d: _special(d).view(2, 4) @ _special(d).view(4, 2))
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        same_as_cpu(lambda d: torch.exp(_special(d, dt)) + 1)
        same_as_cpu(lambda d: _special(d, dt).to(torch.float32))
    same_as_cpu(lambda d: torch.tensor([1e30, -1e30, 70000.0]).to(d).to(torch.float16))


@case()
def case_nan_raising_ops():
    nan = float("nan")
    same_as_cpu(lambda d: torch.multinomial(torch.tensor([0.5, nan]).to(d), 1))
    same_as_cpu(lambda d: torch.multinomial(torch.tensor([-1.0, 2.0]).to(d), 1))
    same_as_cpu(lambda d: torch.bernoulli(torch.tensor([0.5, 1.5]).to(d)))
    same_as_cpu(lambda d: torch.histc(torch.tensor([1.0, nan]).to(d), bins=4, min=0, max=0))
    same_as_cpu(lambda d: torch.randint(5, 2, (3,), device=d))
    same_as_cpu(lambda d: torch.empty(3, device=d).uniform_(2.0, 1.0))
    same_as_cpu(lambda d: torch.empty(3, device=d).normal_(0.0, -1.0))


@case()
def case_nan_item():
    same_as_cpu(lambda d: torch.tensor(float("nan")).to(d).item())
    same_as_cpu(lambda d: torch.tensor([float("inf")]).to(d).item())
    same_as_cpu(lambda d: R(2, d).item(), r"2 elements cannot be converted to Scalar")


# -- out of memory ----------------------------------------------------------

_OOM_MSG = r"foo out of memory.*foo:0"


@case()
def case_oom_single_allocation():
    msg = raises(lambda: torch.empty(1 << 46, dtype=torch.uint8, device="foo"), torch.OutOfMemoryError, _OOM_MSG)
    assert "64.00 TiB" in msg, msg
    assert issubclass(torch.OutOfMemoryError, RuntimeError)
    # foo still works afterwards
    torch.testing.assert_close(torch.ones(3, device="foo").cpu(), torch.ones(3))


@case()
def case_oom_names_the_device():
    raises(lambda: torch.empty(1 << 46, dtype=torch.uint8, device="foo:1"), torch.OutOfMemoryError, r"foo:1")
    raises(lambda: torch.zeros(1 << 44, device="foo:1"), torch.OutOfMemoryError, r"foo out of memory.*foo:1")


@case()
def case_oom_under_memory_fraction():
    torch.foo.set_per_process_memory_fraction(0.002)  # 16 MiB of 8 GiB
    try:
        raises(lambda: torch.empty(64 << 20, dtype=torch.uint8, device="foo"), torch.OutOfMemoryError, _OOM_MSG)
        x = torch.ones(4, device="foo")
        # inside ops: the output allocation fails (native or through the fallback)
        raises(lambda: x[:1].expand(16 << 20).contiguous(), torch.OutOfMemoryError, _OOM_MSG)  # noqa: F821  (x is deleted below, after the calls)
        raises(lambda: x[:1].expand(16 << 20) + 1, torch.OutOfMemoryError, _OOM_MSG)  # noqa: F821  (x is deleted below, after the calls)
        raises(lambda: x.repeat(4 << 20), torch.OutOfMemoryError, _OOM_MSG)  # noqa: F821  (x is deleted below, after the calls)
        small = torch.ones(1024, device="foo")  # still fits
        assert small.sum().item() == 1024
        del x, small
    finally:
        torch.foo.set_per_process_memory_fraction(1.0)
    big = torch.empty(64 << 20, dtype=torch.uint8, device="foo")  # fits again
    del big
    torch.foo.empty_cache()


@case()
def case_oom_many_tensors_then_free():
    torch.foo.set_per_process_memory_fraction(0.004)  # 32 MiB
    try:
        held = []

        def fill():
            while True:
                held.append(torch.empty(4 << 20, dtype=torch.uint8, device="foo"))

        raises(fill, torch.OutOfMemoryError, _OOM_MSG)
        assert 4 <= len(held) <= 8, len(held)
        held.clear()
        torch.empty(16 << 20, dtype=torch.uint8, device="foo")
    finally:
        torch.foo.set_per_process_memory_fraction(1.0)
        torch.foo.empty_cache()


# ---------------------------------------------------------------- worker

_MARK = "@@FOO_BAD_INPUT "


def _snapshot():
    gc.collect()
    return (torch.foo.memory_allocated(0), torch.foo.memory_allocated(1), foo_rs.live_blocks())


def _worker(start: int, only: set[str] | None) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
    names = list(CASES)
    torch.ones(1, device="foo:0"), torch.ones(1, device="foo:1")  # first-use costs out of the way
    for i, name in enumerate(names):
        if i < start or (only is not None and name not in only):
            continue
        proto.write(_MARK + json.dumps({"event": "begin", "i": i, "name": name}) + "\n")
        fn, _ = CASES[name]
        before = _snapshot()
        err = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a warning CPU would not give is a failure too
                warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                fn()
        except BaseException as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"
            e = None  # noqa: F841 - drop the traceback's frames (and their tensors)
        after = _snapshot()
        if err is None and after != before:
            err = f"memory not returned: (memory_allocated foo:0, foo:1, live_blocks) before {before}, after {after}"
        elif err is not None and after != before:
            err += f" [and memory not returned: before {before}, after {after}]"
        proto.write(_MARK + json.dumps({"event": "end", "i": i, "name": name, "error": err}) + "\n")
    proto.write(_MARK + json.dumps({"event": "done"}) + "\n")


def run_isolated(
    only: list[str] | None = None, case_timeout: float = 60.0, script: str | None = None
) -> dict[str, str | None]:
    """Runs the cases in watched worker processes (``script --worker``, this
    file by default): {case: None (ok) or the error}."""
    results: dict[str, str | None] = {}
    start = 0
    env = dict(os.environ, FOO_RS_DEVICE_COUNT="2", PYTHONUNBUFFERED="1")
    while True:
        cmd = [sys.executable, script or os.path.abspath(__file__), "--worker", "--start", str(start)]
        if only:
            cmd += ["--only", ",".join(only)]
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
            current, done = None, False
            import selectors

            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + case_timeout + 60
            killed = False
            while True:
                if not sel.select(timeout=1.0):
                    if time.monotonic() > deadline:
                        proc.kill()
                        killed = True
                        break
                    continue
                line = proc.stdout.readline()
                if not line:
                    break
                if not line.startswith(_MARK):
                    continue
                rec = json.loads(line[len(_MARK) :])
                deadline = time.monotonic() + case_timeout
                if rec["event"] == "begin":
                    current = (rec["i"], rec["name"])
                elif rec["event"] == "end":
                    results[rec["name"]] = rec["error"]
                    current = None
                    start = rec["i"] + 1
                else:
                    done = True
            rc = proc.wait()
            sel.close()
            proc.stdout.close()
            if done:
                return results
            err.seek(0)
            tail = " | ".join(err.read().decode(errors="replace").strip().splitlines()[-4:])
            if current is None:
                raise RuntimeError(f"bad-input worker exited (rc={rc}) between cases: {tail}")
            i, name = current
            results[name] = (
                f"hung: no answer within {case_timeout:g} s (worker killed)"
                if killed
                else f"CRASHED the process (rc={rc}): {tail}"
            )
            start = i + 1


# ---------------------------------------------------------------- pytest


@pytest.fixture(scope="module")
def outcomes():
    return run_isolated()


def _params():
    for name, (_, bug) in CASES.items():
        marks = [pytest.mark.xfail(strict=True, reason="foo bug: " + bug)] if bug else []
        yield pytest.param(name, id=name, marks=marks)


@pytest.mark.parametrize("name", list(_params()))
def test_bad_input(name, outcomes):
    err = outcomes.get(name, "case did not run")
    if err is not None:
        pytest.fail(f"{name}: {err}", pytrace=False)


def test_worker_catches_a_crash(tmp_path):
    """The isolation works: a segfaulting case is reported, and the cases after it still run."""
    script = tmp_path / "crash_case.py"
    script.write_text(
        "import ctypes, runpy, sys\n"
        f"mod = runpy.run_path({os.path.abspath(__file__)!r}, run_name='bad_input_cases')\n"
        "mod['CASES']['boom'] = (lambda: ctypes.string_at(0), None)\n"
        "mod['CASES']['after'] = (lambda: None, None)\n"
        "mod['_worker'](int(sys.argv[sys.argv.index('--start') + 1]), {'boom', 'after'})\n"
    )
    res = run_isolated(case_timeout=30, script=str(script))
    assert "CRASHED" in (res.get("boom") or ""), res
    assert res.get("after", "missing") is None, res


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--worker" in args:
        start = int(args[args.index("--start") + 1]) if "--start" in args else 0
        only = set(args[args.index("--only") + 1].split(",")) if "--only" in args else None
        _worker(start, only)
    else:
        for name, err in run_isolated().items():
            print(f"{'ok' if err is None else 'FAIL'}  {name}  {err or ''}")
