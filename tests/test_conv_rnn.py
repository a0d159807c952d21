"""Convolution and fused RNN cells on foo against the CPU.

Convolutions (nn.Conv*d, nn.ConvTranspose*d, F.conv*) reach foo as
aten::convolution_overrideable / convolution_backward_overrideable; LSTM and
GRU cells as aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their
backward. Each case runs the same function on CPU tensors and on their foo
copies with the CPU fallback off: outputs and gradients must match
(torch.testing.assert_close defaults for float32: values, dtype, shape), with
CPU's strides, and bad input must raise CPU's exception type.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import foo_rs
from foo_rs._ops import conv as foo_conv

#: The aten overloads this file's kernels serve.
OWN_OPS = {
    "convolution_overrideable",
    "convolution_backward_overrideable",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_lstm_cell_backward_impl",
    "_thnn_fused_gru_cell",
    "_thnn_fused_gru_cell_backward",
}


def test_kernels_are_native():
    assert OWN_OPS <= foo_rs.native_ops()


def _rand(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _close(actual, expected, what, strides=True, **tol):
    assert actual.device.type == "foo", what
    torch.testing.assert_close(actual.cpu(), expected, msg=lambda m: f"{what}: {m}", **tol)
    if strides and expected.numel() > 1:
        assert actual.stride() == expected.stride(), f"{what}: strides {actual.stride()} vs CPU {expected.stride()}"


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    res = []
    for o in out:
        res += _flat(o)
    return res


def _check_fwd_bwd(fn, tensors, backward=True, context=foo_rs.fallback_disabled, **tol):
    """fn(*tensors) on the CPU and on foo: outputs and (with a seeded random
    output gradient) the gradients of every input."""
    cpu_in = [t.clone().requires_grad_(backward and t.is_floating_point()) for t in tensors]
    # .to keeps dense strides (channels-last, transposed views).
    foo_in = [t.detach().to("foo").requires_grad_(backward and t.is_floating_point()) for t in tensors]
    expected = _flat(fn(*cpu_in))
    grads = [_rand(e.shape, e.dtype, seed=100 + i) for i, e in enumerate(expected)]
    if backward:
        torch.autograd.backward(expected, grads)
    with context():
        actual = _flat(fn(*foo_in))
        if backward:
            torch.autograd.backward(actual, [g.to("foo") for g in grads])
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        _close(a.detach(), e.detach(), f"output {i}", **tol)
    if backward:
        for i, (a, e) in enumerate(zip(foo_in, cpu_in)):
            if e.requires_grad:
                _close(a.grad, e.grad, f"grad of input {i}", **tol)
    return foo_in, cpu_in


# ---------------------------------------------------------------- convolution

CONV_CASES = [
    # id, function, input shape, weight shape, bias, kwargs
    ("1d", F.conv1d, (2, 4, 11), (5, 4, 3), True, {}),
    ("1d_stride_pad_dil", F.conv1d, (3, 4, 13), (5, 4, 3), True, dict(stride=2, padding=2, dilation=2)),
    ("1d_groups", F.conv1d, (2, 6, 9), (4, 3, 2), False, dict(groups=2)),
    ("1d_same", F.conv1d, (2, 3, 10), (4, 3, 4), True, dict(padding="same", dilation=2)),
    ("2d", F.conv2d, (2, 3, 9, 8), (4, 3, 3, 3), True, {}),
    ("2d_stride_pad", F.conv2d, (2, 3, 9, 8), (4, 3, 3, 2), True, dict(stride=(2, 1), padding=(1, 0))),
    ("2d_dilation", F.conv2d, (2, 3, 10, 9), (4, 3, 3, 3), True, dict(dilation=(2, 3), padding=1)),
    ("2d_groups", F.conv2d, (2, 6, 7, 7), (4, 3, 3, 3), True, dict(groups=2, stride=2, padding=1)),
    ("2d_depthwise", F.conv2d, (2, 4, 6, 6), (8, 1, 3, 3), True, dict(groups=4, padding=1)),
    ("2d_same", F.conv2d, (2, 3, 7, 6), (4, 3, 4, 3), False, dict(padding="same")),
    ("2d_valid_no_bias", F.conv2d, (2, 3, 6, 6), (4, 3, 2, 2), False, dict(padding="valid")),
    ("2d_stride_leaves_rows", F.conv2d, (2, 3, 8, 7), (4, 3, 3, 3), True, dict(stride=3)),
    ("2d_1x1", F.conv2d, (2, 5, 4, 4), (3, 5, 1, 1), True, {}),
    ("2d_batch1", F.conv2d, (1, 3, 6, 6), (4, 3, 3, 3), True, dict(padding=1)),
    ("2d_unbatched", F.conv2d, (3, 6, 6), (4, 3, 3, 3), True, dict(padding=1)),
    ("2d_batch0", F.conv2d, (0, 3, 6, 6), (4, 3, 3, 3), True, dict(padding=1)),
    ("3d", F.conv3d, (2, 2, 5, 4, 6), (3, 2, 3, 2, 3), True, {}),
    (
        "3d_groups_stride_pad",
        F.conv3d,
        (2, 4, 5, 6, 5),
        (6, 2, 3, 3, 2),
        True,
        dict(groups=2, stride=(1, 2, 1), padding=1),
    ),
    ("3d_dilation", F.conv3d, (1, 2, 6, 6, 6), (2, 2, 2, 2, 2), False, dict(dilation=2)),
    ("t1d", F.conv_transpose1d, (2, 4, 5), (4, 3, 3), True, dict(stride=3)),
    ("t1d_pad", F.conv_transpose1d, (2, 4, 6), (4, 2, 4), False, dict(stride=2, padding=1, output_padding=1)),
    ("t2d", F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
    (
        "t2d_groups_dilation",
        F.conv_transpose2d,
        (2, 4, 5, 4),
        (4, 3, 3, 2),
        True,
        dict(stride=2, padding=1, output_padding=1, groups=2, dilation=2),
    ),
    (
        "t2d_output_padding_ge_stride",
        F.conv_transpose2d,
        (2, 3, 4, 4),
        (3, 2, 3, 3),
        False,
        dict(stride=1, output_padding=1, dilation=2),
    ),
    ("t2d_batch0", F.conv_transpose2d, (0, 4, 5, 5), (4, 3, 3, 3), True, dict(stride=2)),
    ("t3d", F.conv_transpose3d, (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True, dict(stride=2)),
    (
        "t3d_groups",
        F.conv_transpose3d,
        (2, 4, 3, 3, 3),
        (4, 1, 2, 2, 2),
        True,
        dict(groups=2, padding=1, stride=(1, 2, 2)),
    ),
]


# CPU and foo both warn for 'same' with an even kernel (ATen pads a copy first).
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_convolution_forward_backward(case):
    _, fn, in_shape, w_shape, bias, kwargs = case
    out_channels = w_shape[1] * kwargs.get("groups", 1) if fn.__name__.startswith("conv_transpose") else w_shape[0]
    tensors = [_rand(in_shape, seed=1), _rand(w_shape, seed=2)]
    if bias:
        tensors.append(_rand((out_channels,), seed=3))
    _check_fwd_bwd(lambda *t: fn(*t, **kwargs), tensors)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_convolution_channels_last_like_cpu(transposed):
    # CPU returns channels-last output and input gradient for a channels-last input.
    x = _rand((2, 4, 6, 5), seed=1).contiguous(memory_format=torch.channels_last)
    w = _rand((4, 3, 3, 3) if transposed else (3, 4, 3, 3), seed=2)
    fn = F.conv_transpose2d if transposed else F.conv2d
    _check_fwd_bwd(lambda x, w: fn(x, w, stride=2, padding=1), [x, w])


def test_convolution_noncontiguous_input():
    x = _rand((2, 7, 3, 8), seed=1).transpose(1, 2)  # (2, 3, 7, 8), not contiguous
    foo_in, _ = _check_fwd_bwd(lambda x, w: F.conv2d(x, w, padding=1), [x, _rand((4, 3, 3, 3), seed=2)])
    assert foo_in[0].stride() == x.stride()


@pytest.mark.parametrize(
    "dtype, tol",
    [
        (torch.float64, {}),
        (torch.float16, dict(rtol=1e-2, atol=2e-2)),
        (torch.bfloat16, dict(rtol=2e-2, atol=1e-1)),
    ],
    ids=["float64", "float16", "bfloat16"],
)
def test_convolution_float_dtypes(dtype, tol):
    tensors = [_rand((2, 3, 6, 6), dtype, 1), _rand((4, 3, 3, 3), dtype, 2), _rand((4,), dtype, 3)]
    _check_fwd_bwd(
        lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), tensors, backward=dtype == torch.float64, **tol
    )


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_convolution_integer_dtypes(dtype):
    x = torch.randint(-5, 5, (2, 3, 6, 6), dtype=dtype)
    w = torch.randint(-5, 5, (4, 3, 3, 3), dtype=dtype)
    _check_fwd_bwd(lambda x, w: F.conv2d(x, w, padding=1), [x, w], backward=False)


@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_double_backward(groups):
    x, w = _rand((2, 4, 5, 5), seed=1), _rand((6, 4 // groups, 3, 3), seed=2)

    def second_order(x, w):
        y = F.conv2d(x, w, stride=2, padding=1, groups=groups)
        gx, gw = torch.autograd.grad((y * y).sum(), (x, w), create_graph=True)
        return (gx * gx).sum() + (gw * gw).sum()

    # ATen's _convolution_double_backward concatenates per-group results (aten::cat, native).
    _check_fwd_bwd(second_order, [x, w], context=foo_rs.fallback_disabled, rtol=1e-4, atol=1e-4)


def test_convolution_gradcheck_float64():
    x = _rand((2, 4, 5, 4), torch.float64, 1).to("foo").requires_grad_()
    w = _rand((6, 2, 3, 2), torch.float64, 2).to("foo").requires_grad_()
    b = _rand((6,), torch.float64, 3).to("foo").requires_grad_()
    with foo_rs.fallback_disabled():
        assert torch.autograd.gradcheck(
            lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
            (x, w, b),
            fast_mode=True,
        )


def test_convolution_in_batch_chunks(monkeypatch):
    # A tiny column budget: one sample per chunk for the forward, both gradients and the transposed forward.
    monkeypatch.setattr(foo_conv, "_COLS_BUDGET", 64)
    tensors = [_rand((3, 3, 7, 6), seed=1), _rand((4, 3, 3, 3), seed=2), _rand((4,), seed=3)]
    _check_fwd_bwd(lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=(1, 2)), tensors)
    tensors = [_rand((3, 4, 5, 5), seed=1), _rand((4, 3, 3, 3), seed=2)]
    _check_fwd_bwd(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), tensors)


def test_convolution_in_batch_chunks_composed(monkeypatch):
    # 2-d float convolutions run in Rust; the composition (and its chunking) still serves 3-d and integer ones.
    monkeypatch.setattr(foo_conv, "_COLS_BUDGET", 64)
    tensors = [_rand((3, 2, 5, 4, 6), seed=1), _rand((3, 2, 3, 2, 3), seed=2), _rand((3,), seed=3)]
    _check_fwd_bwd(lambda x, w, b: F.conv3d(x, w, b, padding=1, stride=(1, 2, 1)), tensors)
    tensors = [_rand((3, 4, 3, 3, 3), seed=1), _rand((4, 2, 2, 2, 2), seed=2)]
    _check_fwd_bwd(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1), tensors)
    x = torch.randint(-5, 5, (3, 3, 7, 6))
    w = torch.randint(-5, 5, (4, 3, 3, 3))
    _check_fwd_bwd(lambda x, w: F.conv2d(x, w, padding=1, stride=(1, 2)), [x, w], backward=False)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, False), (False, False, True)])
def test_convolution_backward_output_mask(transposed, mask):
    x = _rand((2, 4, 6, 5), seed=1)
    w = _rand((4, 2, 3, 3), seed=2)
    args = ([2, 1], [1, 1], [1, 1], transposed, [1, 0] if transposed else [0, 0], 2)
    y = torch.ops.aten.convolution(x, w, None, *args)
    g = _rand(y.shape, seed=3)
    expected = torch.ops.aten.convolution_backward(g, x, w, [y.shape[1]], *args, list(mask))
    with foo_rs.fallback_disabled():
        actual = torch.ops.aten.convolution_backward_overrideable(
            g.to("foo"), x.to("foo"), w.to("foo"), *args, list(mask)
        )
        direct = torch.ops.aten.convolution_overrideable(x.to("foo"), w.to("foo"), None, *args)
    _close(direct, y, "output")
    for name, a, e, wanted in zip(("grad_input", "grad_weight", "grad_bias"), actual, expected, mask):
        if wanted:
            _close(a, e, name)
        else:
            assert a is None, name


def test_conv_modules_backward():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.ConvTranspose1d(4, 2, 3, stride=2),
        nn.Flatten(),
        nn.Linear(2 * 15, 2),
    )
    foo_model = copy.deepcopy(model).to("foo")
    x = _rand((2, 3, 7), seed=1)
    expected = model(x)
    expected.sum().backward()
    with foo_rs.fallback_disabled():
        actual = foo_model(x.to("foo"))
        actual.sum().backward()
    _close(actual.detach(), expected.detach(), "output")
    for (name, p), (_, q) in zip(foo_model.named_parameters(), model.named_parameters()):
        _close(p.grad, q.grad, f"grad of {name}")


BAD_CONV = [
    ("channels", F.conv2d, (2, 5, 8, 8), (4, 3, 3, 3), None, {}),
    ("weight_dims", F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3, 3), None, {}),
    ("kernel_too_big", F.conv2d, (2, 3, 2, 2), (4, 3, 3, 3), None, {}),
    ("bias_size", F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3), (5,), {}),
    ("groups_not_dividing", F.conv2d, (2, 4, 8, 8), (3, 2, 3, 3), None, dict(groups=2)),
    ("negative_padding", F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3), None, dict(padding=-1)),
    ("zero_stride", F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3), None, dict(stride=0)),
    ("transposed_channels", F.conv_transpose2d, (2, 5, 4, 4), (4, 3, 3, 3), None, {}),
    ("output_padding_too_big", F.conv_transpose2d, (2, 4, 4, 4), (4, 3, 3, 3), None, dict(stride=2, output_padding=2)),
]


@pytest.mark.parametrize("case", BAD_CONV, ids=[c[0] for c in BAD_CONV])
def test_convolution_bad_input_raises_like_cpu(case):
    _, fn, in_shape, w_shape, b_shape, kwargs = case
    tensors = [_rand(in_shape, seed=1), _rand(w_shape, seed=2)] + ([_rand(b_shape, seed=3)] if b_shape else [])
    with pytest.raises(Exception) as cpu_err:
        fn(*tensors, **kwargs)
    with foo_rs.fallback_disabled(), pytest.raises(cpu_err.type):
        fn(*[t.to("foo") for t in tensors], **kwargs)


def test_convolution_dtype_mismatch_names_foo():
    with pytest.raises(RuntimeError):
        F.conv2d(_rand((1, 3, 5, 5)), _rand((2, 3, 3, 3), torch.float64))
    with foo_rs.fallback_disabled(), pytest.raises(RuntimeError, match=r"torch\.foo\.FloatTensor"):
        F.conv2d(_rand((1, 3, 5, 5)).to("foo"), _rand((2, 3, 3, 3), torch.float64).to("foo"))


# ---------------------------------------------------------------- fused RNN cells (the ops)

A = torch.ops.aten


def _lstm_reference(ig, hg, cx, ib, hb):
    gates = ig + hg + (ib + hb if ib is not None else 0)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy


def _gru_reference(ig, hg, hx, ib, hb):
    if ib is not None:
        ig, hg = ig + ib, hg + hb
    ir, iz, in_ = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n)


def _cell_inputs(batch, hidden, factor, bias, seed=0):
    ig = _rand((batch, factor * hidden), seed=seed)
    hg = _rand((batch, factor * hidden), seed=seed + 1)
    h = _rand((batch, hidden), seed=seed + 2)
    ib = _rand((factor * hidden,), seed=seed + 3) if bias else None
    hb = _rand((factor * hidden,), seed=seed + 4) if bias else None
    return ig, hg, h, ib, hb


def _foo(t):
    return None if t is None else t.to("foo")


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("grads", ["both", "hy", "cy"])
def test_fused_lstm_cell_op(bias, grads):
    ig, hg, cx, ib, hb = _cell_inputs(3, 5, 4, bias)
    with foo_rs.fallback_disabled():
        hy, cy, ws = A._thnn_fused_lstm_cell(_foo(ig), _foo(hg), _foo(cx), _foo(ib), _foo(hb))
    exp_hy, exp_cy = _lstm_reference(ig, hg, cx, ib, hb)
    _close(hy, exp_hy, "hy")
    _close(cy, exp_cy, "cy")
    assert ws.shape == (3, 20) and ws.device.type == "foo"

    ghy = _rand((3, 5), seed=10) if grads in ("both", "hy") else None
    gcy = _rand((3, 5), seed=11) if grads in ("both", "cy") else None
    # The CPU can run ATen's differentiable (composite) backward of the cell.
    expected = A._thnn_differentiable_lstm_cell_backward(ghy, gcy, ig, hg, ib, hb, cx, exp_cy)
    with foo_rs.fallback_disabled(), torch.no_grad():
        actual = A._thnn_fused_lstm_cell_backward(_foo(ghy), _foo(gcy), _foo(cx), cy, ws, bias)
    for name, a, e in zip(
        ("grad_input_gates", "grad_hidden_gates", "grad_cx", "grad_input_bias", "grad_hidden_bias"), actual, expected
    ):
        if bias or "bias" not in name:
            _close(a, e, name)
        else:
            assert a is None, name


def test_fused_lstm_cell_backward_without_grads():
    ig, hg, cx, _, _ = _cell_inputs(2, 3, 4, False)
    with foo_rs.fallback_disabled():
        _, cy, ws = A._thnn_fused_lstm_cell(_foo(ig), _foo(hg), _foo(cx))
        assert A._thnn_fused_lstm_cell_backward_impl(None, None, _foo(cx), cy, ws, False) == (None, None, None)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_fused_gru_cell_op(bias):
    ig, hg, hx, ib, hb = _cell_inputs(3, 5, 3, bias)
    with foo_rs.fallback_disabled():
        hy, ws = A._thnn_fused_gru_cell(_foo(ig), _foo(hg), _foo(hx), _foo(ib), _foo(hb))
    _close(hy, _gru_reference(ig, hg, hx, ib, hb), "hy")
    assert ws.shape == (3, 25) and ws.device.type == "foo"

    ghy = _rand((3, 5), seed=10)
    expected = A._thnn_differentiable_gru_cell_backward(ghy, ig, hg, hx, ib, hb)
    with foo_rs.fallback_disabled():
        actual = A._thnn_fused_gru_cell_backward(_foo(ghy), ws, bias)
    for name, a, e in zip(
        ("grad_input_gates", "grad_hidden_gates", "grad_hx", "grad_input_bias", "grad_hidden_bias"), actual, expected
    ):
        if bias or "bias" not in name:
            _close(a, e, name)
        else:
            assert a is None, name


@pytest.mark.parametrize(
    "op, args",
    [
        ("lstm_hidden_gates", lambda: (A._thnn_fused_lstm_cell, (_rand((3, 8)), _rand((3, 7)), _rand((3, 2))))),
        ("lstm_cx", lambda: (A._thnn_fused_lstm_cell, (_rand((3, 8)), _rand((3, 8)), _rand((3, 3))))),
        (
            "lstm_bias",
            lambda: (A._thnn_fused_lstm_cell, (_rand((3, 8)), _rand((3, 8)), _rand((3, 2)), _rand((7,)), _rand((7,)))),
        ),
        ("lstm_dims", lambda: (A._thnn_fused_lstm_cell, (_rand((1, 3, 8)), _rand((1, 3, 8)), _rand((3, 2))))),
        ("gru_hx", lambda: (A._thnn_fused_gru_cell, (_rand((3, 6)), _rand((3, 6)), _rand((3, 3))))),
        ("gru_backward_workspace", lambda: (A._thnn_fused_gru_cell_backward, (_rand((3, 2)), _rand((3, 9)), False))),
        (
            "lstm_backward_cy",
            lambda: (
                A._thnn_fused_lstm_cell_backward_impl,
                (_rand((3, 2)), None, _rand((3, 2)), _rand((3, 3)), _rand((3, 8)), False),
            ),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_fused_cells_bad_sizes_raise(op, args):
    fn, tensors = args()
    with foo_rs.fallback_disabled(), pytest.raises(RuntimeError, match="foo"):
        fn(*[_foo(t) if isinstance(t, torch.Tensor) else t for t in tensors])


# ---------------------------------------------------------------- RNN modules


def _module_case(make, inputs, context=foo_rs.fallback_disabled):
    """make() built from a seed on the CPU, copied to foo: outputs, input
    gradients and parameter gradients agree."""
    torch.manual_seed(0)
    cpu_model = make()
    foo_model = copy.deepcopy(cpu_model).to("foo")
    _check_fwd_bwd(
        lambda *t: (cpu_model if t[0].device.type == "cpu" else foo_model)(*t[:1], *_state(t[1:])),
        inputs,
        context=context,
    )
    for (name, p), (_, q) in zip(foo_model.named_parameters(), cpu_model.named_parameters()):
        _close(p.grad, q.grad, f"grad of {name}")


def _state(rest):
    if not rest:
        return ()
    if len(rest) == 1:
        return (rest[0],)
    return ((rest[0], rest[1]),)


@pytest.mark.parametrize(
    "make, shapes",
    [
        (lambda: nn.LSTMCell(5, 7), [(3, 5)]),
        (lambda: nn.LSTMCell(5, 7), [(3, 5), (3, 7), (3, 7)]),
        (lambda: nn.LSTMCell(5, 7, bias=False), [(3, 5), (3, 7), (3, 7)]),
        (lambda: nn.LSTMCell(5, 7), [(5,)]),
        (lambda: nn.GRUCell(5, 7), [(3, 5)]),
        (lambda: nn.GRUCell(5, 7), [(3, 5), (3, 7)]),
        (lambda: nn.GRUCell(5, 7, bias=False), [(3, 5), (3, 7)]),
        (lambda: nn.GRUCell(5, 7), [(1, 5), (1, 7)]),
    ],
    ids=[
        "lstm_cell",
        "lstm_cell_state",
        "lstm_cell_no_bias",
        "lstm_cell_unbatched",
        "gru_cell",
        "gru_cell_state",
        "gru_cell_no_bias",
        "gru_cell_batch1",
    ],
)
def test_rnn_cells(make, shapes):
    _module_case(make, [_rand(s, seed=i + 1) for i, s in enumerate(shapes)])


@pytest.mark.parametrize(
    "make, shapes",
    [
        (lambda: nn.LSTM(5, 7), [(4, 3, 5)]),
        (lambda: nn.LSTM(5, 7, num_layers=2, batch_first=True), [(3, 4, 5)]),
        (lambda: nn.LSTM(5, 7, num_layers=2, bidirectional=True), [(4, 3, 5), (4, 3, 7), (4, 3, 7)]),
        (lambda: nn.LSTM(5, 7, proj_size=3, batch_first=True, bias=False), [(3, 4, 5)]),
        (lambda: nn.GRU(5, 7), [(4, 3, 5)]),
        (lambda: nn.GRU(5, 7, num_layers=2, batch_first=True), [(3, 4, 5), (2, 3, 7)]),
        (lambda: nn.GRU(5, 7, num_layers=2, bidirectional=True, bias=False), [(4, 3, 5)]),
        (lambda: nn.GRU(5, 7, num_layers=2), [(4, 5)]),
    ],
    ids=[
        "lstm",
        "lstm_2layers_batch_first",
        "lstm_bidirectional_state",
        "lstm_proj_no_bias",
        "gru",
        "gru_2layers_batch_first_state",
        "gru_bidirectional_no_bias",
        "gru_unbatched",
    ],
)
@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")  # CPU only
def test_rnn_modules(make, shapes):
    _module_case(make, [_rand(s, seed=i + 1) for i, s in enumerate(shapes)], context=foo_rs.fallback_disabled)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell], ids=["lstm_cell", "gru_cell"])
def test_rnn_cell_double_backward(cell):
    # With create_graph ATen differentiates through _thnn_differentiable_*_cell_backward.
    torch.manual_seed(0)
    cpu_cell = cell(4, 5)
    foo_cell = copy.deepcopy(cpu_cell).to("foo")

    def second_order(x):
        c = cpu_cell if x.device.type == "cpu" else foo_cell
        out = _flat(c(x))
        (gx,) = torch.autograd.grad(sum((o * o).sum() for o in out), x, create_graph=True)
        return (gx * gx).sum()

    _check_fwd_bwd(second_order, [_rand((3, 4), seed=1)], context=foo_rs.fallback_disabled, rtol=1e-4, atol=1e-5)


def test_rnn_cell_bad_input_raises_like_cpu():
    with pytest.raises(RuntimeError):
        nn.LSTMCell(3, 4)(_rand((2, 5)))
    with foo_rs.fallback_disabled(), pytest.raises(RuntimeError):
        nn.LSTMCell(3, 4).to("foo")(_rand((2, 5)).to("foo"))
