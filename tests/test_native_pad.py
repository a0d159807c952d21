"""Reflection and replication padding on the native path
(rust/glue/native.cpp, rust/src/kernels/pad.rs): reflection_pad1d/2d/3d,
replication_pad1d/2d/3d and their backward, functional and out= forms.
CPU's checks (ATen's metas, or its kernels' own where the op has none),
then Rust. Each case must give CPU's values, dtype, shape and layout with no
Python kernel; errors must be CPU's exception with CPU's message and
"(foo)"; the backward must not depend on the thread count. Circular padding
(a composite of slices in torch) runs no padding kernel in Python."""

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import check_native_error, make_tensor, run_native_case

A = torch.ops.aten
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
MODES = {"reflect": "reflection", "replicate": "replication"}
PAD_OPS = [f"{kind}_pad{k}d" for kind in MODES.values() for k in (1, 2, 3)]


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


def _empty(dtype=torch.float32):
    return torch.empty(0, dtype=dtype)


def _shape(k, batched, n=2, c=3):
    spatial = (5, 4, 6)[3 - k :]
    return ((n, c) if batched else (c,)) + spatial


def _pad(k):
    # Pads under every size (reflection needs pad < size): (2, 1) of the
    # width, (1, 3) of the height, (3, 0) of the depth.
    return [2, 1, 1, 3, 3, 0][: 2 * k]


CASES = {}
for _mode, _kind in MODES.items():
    for _k in (1, 2, 3):
        for _batched in (True, False):
            for _dt in FLOATS:
                _name = f"{_kind}{_k}d_{'batched' if _batched else 'single'}_{str(_dt)[6:]}"
                CASES[_name] = lambda t, k=_k, b=_batched, dt=_dt, m=_mode: F.pad(
                    t(_f(_shape(k, b), dt)), _pad(k), mode=m
                )
        op = getattr(A, f"{_kind}_pad{_k}d")
        bwd = getattr(A, f"{_kind}_pad{_k}d_backward")
        shape = _shape(_k, True)
        out_shape = list(shape)
        for i in range(_k):
            out_shape[-1 - i] += sum(_pad(_k)[2 * i : 2 * i + 2])
        CASES.update(
            {
                # out= (resized from empty), and of the right size
                f"{_kind}{_k}d_out": lambda t, op=op, k=_k: op(t(_f(_shape(k, True))), _pad(k), out=t(_empty())),
                f"{_kind}{_k}d_out_sized": lambda t, op=op, k=_k, s=out_shape: op(
                    t(_f(_shape(k, True), torch.float64)), _pad(k), out=t(torch.full(s, 7.0, dtype=torch.float64))
                ),
                # non-contiguous inputs: the last two dims swapped, every other channel
                f"{_kind}{_k}d_transposed": lambda t, op=op, k=_k: op(
                    t(_f(_shape(k, True)[:-2] + _shape(k, True)[-1:] + _shape(k, True)[-2:-1])).transpose(-1, -2),
                    _pad(k),
                ),
                f"{_kind}{_k}d_sliced": lambda t, op=op, k=_k: op(t(_f((2, 6) + _shape(k, True)[2:]))[:, ::2], _pad(k)),
                # zero batch
                f"{_kind}{_k}d_zero_batch": lambda t, op=op, k=_k: op(t(_f((0, 3) + _shape(k, True)[2:])), _pad(k)),
                # negative pads (the side is cropped); ones of zero
                f"{_kind}{_k}d_negative": lambda t, op=op, k=_k: op(
                    t(_f(_shape(k, True))), [-1, 2, 0, -2, 1, -1][: 2 * k]
                ),
                f"{_kind}{_k}d_zero_pads": lambda t, op=op, k=_k: op(t(_f(_shape(k, False))), [0] * (2 * k)),
                # backward: functional and grad_input=, half types, empty grad_input to resize
                f"{_kind}{_k}d_backward": lambda t, bwd=bwd, k=_k, s=out_shape: bwd(
                    t(_f(s, torch.float64, seed=2)), t(_f(_shape(k, True), torch.float64)), _pad(k)
                ),
                f"{_kind}{_k}d_backward_single_bf16": lambda t, bwd=bwd, k=_k, s=out_shape: bwd(
                    t(_f(s[1:], torch.bfloat16, seed=2)), t(_f(_shape(k, False), torch.bfloat16)), _pad(k)
                ),
                f"{_kind}{_k}d_backward_f16_grad_input": lambda t, bwd=bwd, k=_k, s=out_shape: bwd(
                    t(_f(s, torch.float16, seed=2)),
                    t(_f(_shape(k, True), torch.float16)),
                    _pad(k),
                    grad_input=t(_empty(torch.float16)),
                ),
                f"{_kind}{_k}d_backward_strided_grad": lambda t, bwd=bwd, k=_k, s=out_shape: bwd(
                    t(_f(s[:1] + [2 * s[1]] + s[2:], seed=2))[:, 1::2], t(_f(_shape(k, True))), _pad(k)
                ),
                f"{_kind}{_k}d_backward_negative": lambda t, bwd=bwd, k=_k: bwd(
                    t(_f(_out_size(_shape(k, True), [-1, 2, 0, -2, 1, -1][: 2 * k]), seed=2)),
                    t(_f(_shape(k, True))),
                    [-1, 2, 0, -2, 1, -1][: 2 * k],
                ),
                f"{_kind}{_k}d_backward_zero_batch": lambda t, bwd=bwd, k=_k, s=out_shape: bwd(
                    t(_f([0] + s[1:], seed=2)), t(_f((0, 3) + _shape(k, True)[2:])), _pad(k)
                ),
            }
        )


def _out_size(shape, pads):
    s = list(shape)
    for i in range(len(pads) // 2):
        s[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    return s


# Channels-last inputs (2-d and 3-d): CPU's outputs and gradients keep the layout.
for _kind in MODES.values():
    CASES[f"{_kind}2d_channels_last"] = lambda t, kind=_kind: getattr(A, f"{kind}_pad2d")(
        t(_f((2, 3, 4, 6)).contiguous(memory_format=torch.channels_last)), [1, 2, 3, 0]
    )
    CASES[f"{_kind}3d_channels_last"] = lambda t, kind=_kind: getattr(A, f"{kind}_pad3d")(
        t(_f((2, 3, 4, 5, 6)).contiguous(memory_format=torch.channels_last_3d)), [1, 2, 3, 0, 1, 1]
    )
    CASES[f"{_kind}2d_channels_last_out"] = lambda t, kind=_kind: getattr(A, f"{kind}_pad2d")(
        t(_f((2, 3, 4, 6)).contiguous(memory_format=torch.channels_last)), [1, 2, 3, 0], out=t(_empty())
    )
    CASES[f"{_kind}2d_backward_channels_last"] = lambda t, kind=_kind: getattr(A, f"{kind}_pad2d_backward")(
        t(_f((2, 3, 7, 9), seed=2)), t(_f((2, 3, 4, 6)).contiguous(memory_format=torch.channels_last)), [1, 2, 3, 0]
    )
    CASES[f"{_kind}3d_backward_channels_last_out"] = lambda t, kind=_kind: getattr(A, f"{kind}_pad3d_backward")(
        t(_f((2, 3, 6, 8, 9), seed=2)),
        t(_f((2, 3, 4, 5, 6)).contiguous(memory_format=torch.channels_last_3d)),
        [1, 2, 3, 0, 1, 1],
        grad_input=t(_empty()),
    )


def _check(expected, actual):
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.numel() > 1:
        assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def _as_float32(x):
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_pad_matches_cpu_with_no_python(no_fallback, name):
    expected, actual = run_native_case(name, CASES[name])
    if "backward" in name and expected.dtype in (torch.float16, torch.bfloat16):
        # foo sums a 16-bit gradient in float32 then rounds; CPU's kernel adds
        # in the 16-bit type. The reference is CPU's float32 sum, rounded.
        expected = CASES[name](lambda x: _as_float32(x)).to(expected.dtype)
    _check(expected, actual)


def test_forward_values_are_exact():
    # The forward is a copy: CPU's values bit for bit in every float dtype.
    for dt in FLOATS:
        for mode in MODES:
            x = _f((2, 3, 4, 5, 6), dt)
            for k in (1, 2, 3):
                xk = x.flatten(0, 3 - k) if k < 3 else x
                e = F.pad(xk, _pad(k), mode=mode)
                assert torch.equal(F.pad(xk.to("foo"), _pad(k), mode=mode).cpu(), e), (dt, mode, k)


def test_pad_ops_are_registered():
    names = set()
    for op in PAD_OPS:
        names |= {op, op + ".out", op + "_backward", op + "_backward.grad_input"}
    assert names <= fast_lane_ops()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
def test_autograd_backward_matches_cpu_with_no_python(no_fallback, mode, k, batched):
    x = _f(_shape(k, batched), torch.float64)
    pads = _pad(k)
    grads = []
    for dev in ("cpu", "foo", "foo"):
        a = x.clone().to(dev).requires_grad_()
        before = foo_rs.python_kernel_calls()
        y = F.pad(a, pads, mode=mode)
        (y * torch.arange(y.numel(), dtype=y.dtype, device=dev).reshape(y.shape).sin()).sum().backward()
        ran_python = foo_rs.python_kernel_calls() - before
        grads.append(a.grad.cpu())
    assert not ran_python, dict(ran_python)
    torch.testing.assert_close(grads[2], grads[0])


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_gradcheck_float64(mode, k):
    x = _f((1, 2) + (3, 4, 5)[3 - k :], torch.float64).div(10).to("foo").requires_grad_()
    pads = [2, 1, -1, 2, 1, 0][: 2 * k]
    before = foo_rs.python_kernel_calls()
    assert torch.autograd.gradcheck(lambda v: F.pad(v, pads, mode=mode), (x,))
    assert torch.autograd.gradgradcheck(lambda v: F.pad(v, pads, mode=mode), (x,))
    ran = {n: c for n, c in (foo_rs.python_kernel_calls() - before).items() if "_pad" in n}
    assert not ran, ran


def test_same_bits_for_one_and_two_threads():
    # Enough planes and bytes for the pool to split the work.
    x = _f((4, 16, 33, 35), torch.float32).to("foo").requires_grad_()
    x3 = _f((2, 8, 9, 10, 11), torch.bfloat16).to("foo").requires_grad_()
    results = []
    old = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert foo_rs._C.num_threads() == n
            with foo_rs.fallback_disabled():
                y = F.pad(x, (3, 2, 1, 4), mode="reflect")
                z = F.pad(x3, (2, 3, 1, 1, 2, 0), mode="replicate")
                gy = torch.ones_like(y).cumsum(-1).sin()
                gz = torch.ones_like(z).cumsum(-1).cos()
                gx, gx3 = torch.autograd.grad([y, z], [x, x3], [gy, gz])
            results.append([t.cpu() for t in (y, z, gx, gx3)])
    finally:
        torch.set_num_threads(old)
    for a, b in zip(*results):
        assert torch.equal(a, b)


ERROR_CASES = {
    # reflection: a pad as large as the dim it pads
    "reflection1d_pad_too_large": lambda t: A.reflection_pad1d(t(_f((2, 3, 4))), [4, 0]),
    "reflection2d_pad_too_large_w": lambda t: A.reflection_pad2d(t(_f((2, 3, 4, 5))), [1, 5, 0, 0]),
    "reflection2d_pad_too_large_h": lambda t: A.reflection_pad2d(t(_f((3, 4, 5))), [1, 1, 4, 0]),
    "reflection3d_pad_too_large": lambda t: A.reflection_pad3d(t(_f((1, 2, 3, 4, 5))), [0, 0, 0, 0, 3, 1]),
    "reflection1d_backward_pad_too_large": lambda t: A.reflection_pad1d_backward(
        t(_f((2, 3, 9))), t(_f((2, 3, 4))), [4, 1]
    ),
    # wrong padding length, rank, empty non-batch dims
    "reflection1d_padding_length": lambda t: A.reflection_pad1d(t(_f((2, 3, 4))), [1, 1, 1]),
    "reflection2d_padding_length": lambda t: A.reflection_pad2d(t(_f((2, 3, 4, 5))), [1, 1, 1]),
    "replication3d_padding_length": lambda t: A.replication_pad3d(t(_f((1, 2, 3, 4, 5))), [1, 1]),
    "reflection2d_rank": lambda t: A.reflection_pad2d(t(_f((4, 5))), [1, 1, 1, 1]),
    "replication1d_rank": lambda t: A.replication_pad1d(t(_f((1, 2, 3, 4))), [1, 1]),
    "replication2d_empty_channels": lambda t: A.replication_pad2d(t(_f((2, 0, 4, 5))), [1, 1, 1, 1]),
    "reflection3d_empty_single": lambda t: A.reflection_pad3d(t(_f((0, 3, 4, 5))), [1, 1, 1, 1, 1, 1]),
    # an output dim under 1 (negative pads)
    "replication1d_output_too_small": lambda t: A.replication_pad1d(t(_f((2, 3, 4))), [-3, -1]),
    "reflection2d_output_too_small": lambda t: A.reflection_pad2d(t(_f((1, 3, 4))), [-2, -2, -3, 0]),
    "replication2d_output_too_small": lambda t: A.replication_pad2d(t(_f((1, 3, 4))), [0, 0, -2, -1]),
    "replication3d_output_too_small": lambda t: A.replication_pad3d(t(_f((1, 2, 3, 4))), [0, 0, 0, 0, -1, -1]),
    # backward: grad_output of the wrong shape
    "reflection1d_backward_shape": lambda t: A.reflection_pad1d_backward(t(_f((2, 3, 8))), t(_f((2, 3, 4))), [2, 1]),
    "reflection2d_backward_shape": lambda t: A.reflection_pad2d_backward(
        t(_f((1, 3, 5, 5))), t(_f((1, 3, 3, 4))), [1, 1, 1, 1]
    ),
    "replication2d_backward_height": lambda t: A.replication_pad2d_backward(
        t(_f((1, 3, 4, 6))), t(_f((1, 3, 3, 4))), [1, 1, 1, 1]
    ),
    "replication3d_backward_channels": lambda t: A.replication_pad3d_backward(
        t(_f((2, 1, 5, 5, 6))), t(_f((2, 3, 3, 3, 4))), [1, 1, 1, 1, 1, 1]
    ),
    "reflection3d_backward_depth": lambda t: A.reflection_pad3d_backward(
        t(_f((1, 2, 4, 5, 6))), t(_f((1, 2, 3, 3, 4))), [1, 1, 1, 1, 1, 1]
    ),
    "replication1d_backward_width": lambda t: A.replication_pad1d_backward(t(_f((2, 3, 7))), t(_f((2, 3, 4))), [1, 1]),
    # out= and grad_input= of another dtype
    "reflection1d_out_dtype": lambda t: A.reflection_pad1d(t(_f((2, 3, 4))), [1, 1], out=t(_empty(torch.float64))),
    "reflection2d_out_dtype": lambda t: A.reflection_pad2d(
        t(_f((2, 3, 4, 5))), [1, 1, 1, 1], out=t(_empty(torch.float64))
    ),
    "replication3d_out_dtype": lambda t: A.replication_pad3d(
        t(_f((1, 2, 3, 4, 5))), [1, 1, 1, 1, 1, 1], out=t(_empty(torch.float16))
    ),
    "reflection2d_backward_grad_input_dtype": lambda t: A.reflection_pad2d_backward(
        t(_f((1, 3, 5, 6))), t(_f((1, 3, 3, 4))), [1, 1, 1, 1], grad_input=t(_empty(torch.float64))
    ),
    "replication3d_backward_grad_input_dtype": lambda t: A.replication_pad3d_backward(
        t(_f((1, 2, 5, 5, 6))), t(_f((1, 2, 3, 3, 4))), [1, 1, 1, 1, 1, 1], grad_input=t(_empty(torch.float64))
    ),
    "reflection1d_backward_mixed_dtypes": lambda t: A.reflection_pad1d_backward(
        t(_f((2, 3, 6))), t(_f((2, 3, 4), torch.float64)), [1, 1]
    ),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_native_pad_errors_match_cpu(no_fallback, name):
    f = ERROR_CASES[name]
    try:
        f(lambda x: x)
    except Exception:
        check_native_error(name, f)
        return
    # torch 2.13's CPU kernels let some of these through (an empty output
    # where later versions raise): foo must then give CPU's result.
    expected, actual = run_native_case(name, f)
    torch.testing.assert_close(actual.cpu(), expected)


def test_other_dtypes_keep_the_python_kernel(no_fallback):
    # Integers: the Python kernel, CPU's values; bool: CPU's exception type.
    for dt in (torch.int64, torch.int32, torch.uint8):
        x = _f((2, 3, 4, 5), dt)
        for mode in MODES:
            before = foo_rs.python_kernel_calls()
            got = F.pad(x.to("foo"), (1, 2, 2, 1), mode=mode)
            assert foo_rs.python_kernel_calls() - before, "expected the slow path"
            assert torch.equal(got.cpu(), F.pad(x, (1, 2, 2, 1), mode=mode))
    b = _f((2, 3, 4), torch.bool)
    with pytest.raises(NotImplementedError) as cpu:
        A.reflection_pad1d(b, [1, 1])
    with pytest.raises(type(cpu.value)):
        A.reflection_pad1d(b.to("foo"), [1, 1])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_circular_padding_runs_no_python(no_fallback, k):
    x = _f(_shape(k, True), torch.float64)
    pads = [2, 1, 1, 3, 2, 0][: 2 * k]
    grads, outs = [], []
    for dev in ("cpu", "foo", "foo"):
        a = x.clone().to(dev).requires_grad_()
        before = foo_rs.python_kernel_calls()
        y = F.pad(a, pads, mode="circular")
        (y * y).sum().backward()
        ran_python = foo_rs.python_kernel_calls() - before
        outs.append(y.detach().cpu())
        grads.append(a.grad.cpu())
    # No padding kernel in Python; the composite's strided copy_ into the
    # output's slices still takes copy_'s Python kernel (not a padding op).
    assert not {n for n in ran_python if n != "copy_"}, dict(ran_python)
    torch.testing.assert_close(outs[2], outs[0], rtol=0, atol=0)
    torch.testing.assert_close(grads[2], grads[0])
