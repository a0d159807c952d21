"""The Rust convolution kernels (rust/src/kernels/conv.rs) against torch CPU.

1-d and 2-d float convolutions on foo run in Rust (implicit GEMM, 1x1 GEMMs,
depthwise loops). Every conv layer shape of resnet18 and mobilenet_v3_small
(the bench's table, at a small batch and spatial size), forward and the
gradients of input, weight and bias, in float64 (tight), float32 and
bfloat16; channels-last, groups, dilation, strides, 'same' padding,
transposed convolutions, zero-size batches, non-contiguous inputs; results
do not depend on the thread count; nothing leaks. The CPU fallback is off.
"""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_rs._ops import conv as foo_conv
from foo_rs.bench import CONV_SHAPES


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _assert_values(actual, expected, reference, what="", cpu_floor=0.0):
    """foo's values against CPU's. float64: torch's default (tight) tolerances
    against CPU. float32 and bfloat16: both are roundings of the same sum
    accumulated in float32 in different orders, so foo is held to the exact
    result (float64 on the same rounded inputs, ``reference``) with torch's
    default relative tolerance for the dtype and, as absolute one, the worst
    deviation CPU itself shows from that reference for the same case (never
    below torch's default). ``cpu_floor``: CPU's deviation for the same case
    in another memory format, when CPU's kernels differ per layout."""
    actual = actual.cpu()
    if expected.dtype == torch.float64:
        torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}{m}")
        return
    rtol = {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[expected.dtype]
    cpu_err = (expected.double() - reference).abs().max().item() if reference.numel() else 0.0
    cpu_err = max(cpu_err, cpu_floor)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(
        actual.double(),
        reference,
        rtol=rtol,
        atol=max(1e-5, cpu_err),
        msg=lambda m: f"{what}{m} (CPU's own deviation: {cpu_err:.3g})",
    )


def _compare(fn, tensors, dtype=None, memory_format=None, grads=True):
    """fn(*tensors) on CPU and foo (fallback off): output, its strides, and
    the gradients of every floating input against a fixed output gradient."""
    cpu = []
    for t in tensors:
        if t is not None and memory_format is not None and t.dim() == 4:
            t = t.contiguous(memory_format=memory_format)
        cpu.append(t)
    cpu = [None if t is None else t.clone().requires_grad_(grads) for t in cpu]
    foo = [None if t is None else t.detach().to("foo").requires_grad_(grads) for t in cpu]
    ref = [None if t is None else t.detach().double().requires_grad_(grads) for t in cpu]
    expected = fn(*cpu)
    reference = fn(*ref)
    with foo_rs.fallback_disabled():
        actual = fn(*foo)
    assert actual.device.type == "foo"
    _assert_values(actual, expected.detach(), reference.detach())
    if expected.numel() > 1:
        assert actual.stride() == expected.stride()
    if not grads:
        return
    go = _rand(expected.shape, expected.dtype, 7)
    if memory_format is not None and go.dim() == 4:
        go = go.contiguous(memory_format=memory_format)
    inputs = [t for t in cpu if t is not None]
    expected_g = torch.autograd.grad(expected, inputs, go)
    reference_g = torch.autograd.grad(reference, [t for t in ref if t is not None], go.double())
    with foo_rs.fallback_disabled():
        actual_g = torch.autograd.grad(actual, [t for t in foo if t is not None], go.to("foo"))
    floors = [0.0] * len(actual_g)
    if memory_format is not None:
        # CPU runs a different kernel per layout (oneDNN's channels-last
        # weight gradient on AVX-512 hosts sums in another order than its
        # NCHW one: on this project's AMD EPYC, 7.7e-6 against 2.2e-5 worst
        # deviation for a 64->64 3x3 layer). foo runs one kernel for both
        # layouts (the same 1.5e-5 in each), so it is held to the worst of
        # CPU's own deviations across the two layouts.
        plain = [t.detach().contiguous().requires_grad_() for t in inputs]
        plain_g = torch.autograd.grad(fn(*_fill(cpu, plain)), plain, go.contiguous())
        floors = [(e.double() - r).abs().max().item() if r.numel() else 0.0 for e, r in zip(plain_g, reference_g)]
    for i, (a, e, r) in enumerate(zip(actual_g, expected_g, reference_g)):
        _assert_values(a, e, r, f"grad {i}: ", cpu_floor=floors[i])
        if e.numel() > 1:
            assert a.stride() == e.stride(), f"grad {i}: strides {a.stride()} vs {e.stride()}"


def _fill(slots, values):
    """``slots`` (tensors or None) with its tensors replaced by ``values``, in order."""
    it = iter(values)
    return [None if t is None else next(it) for t in slots]


def _small(shape):
    """A layer shape at batch 2 and a small spatial size (kernel and stride still act)."""
    _, cin, cout, k, stride, pad, groups, hw, bias = shape
    hw = 1 if hw == 1 else (12 if k == 7 else 9)
    return cin, cout, k, stride, pad, groups, hw, bias


_LAYERS = sorted({_small(s) for s in CONV_SHAPES})


def _layer_case(layer, dtype, memory_format=None):
    cin, cout, k, stride, pad, groups, hw, bias = layer
    x = _rand((2, cin, hw, hw), dtype, 0)
    w = _rand((cout, cin // groups, k, k), dtype, 1) / (cin // groups * k * k) ** 0.5  # outputs of order 1
    b = _rand((cout,), dtype, 2) if bias else None
    _compare(lambda x, w, b: F.conv2d(x, w, b, stride, pad, 1, groups), [x, w, b], memory_format=memory_format)


@pytest.mark.parametrize("layer", _LAYERS, ids=lambda l: "x".join(map(str, l[:7])))
def test_model_layers_float64_and_float32(layer):
    _layer_case(layer, torch.float64)
    _layer_case(layer, torch.float32)


@pytest.mark.parametrize("layer", [l for l in _LAYERS if l[0] <= 128], ids=lambda l: "x".join(map(str, l[:7])))
def test_model_layers_bfloat16(layer):
    _layer_case(layer, torch.bfloat16)


@pytest.mark.parametrize(
    "layer",
    [
        (64, 64, 3, 1, 1, 1, 9, False),
        (16, 16, 3, 2, 1, 16, 9, False),
        (24, 96, 1, 1, 0, 1, 9, True),
        (64, 128, 1, 2, 0, 1, 9, False),
    ],
)
def test_channels_last(layer):
    _layer_case(layer, torch.float32, memory_format=torch.channels_last)


CASES = [
    # id, function, input shape, weight shape, bias, kwargs
    ("multi_tile_padded", F.conv2d, (2, 64, 20, 19), (32, 64, 3, 3), True, dict(padding=1)),
    ("multi_tile_1x1", F.conv2d, (1, 256, 30, 30), (8, 256, 1, 1), False, {}),
    # float32 on AVX-512: 75 output columns across 3 samples (tiles span
    # samples), 512 output channels in row blocks, k = 144 over two k blocks.
    ("row_blocks_across_samples", F.conv2d, (3, 16, 5, 5), (512, 16, 3, 3), True, dict(padding=1)),
    # Small maps, at most 64 output positions in all (conv.rs forward_few_cols,
    # grad_input_few_cols, the weight gradient's samples joined into one
    # product): resnet18's last layers on small images, two column panels,
    # strided, more output channels than one task's block.
    ("few_cols_2x2", F.conv2d, (4, 96, 2, 2), (100, 96, 3, 3), True, dict(padding=1)),
    ("few_cols_two_panels", F.conv2d, (4, 32, 4, 4), (64, 32, 3, 3), False, dict(padding=1)),
    ("few_cols_strided", F.conv2d, (4, 64, 4, 4), (128, 64, 3, 3), True, dict(stride=2, padding=1)),
    # The weight gradient's block-by-block grid (conv.rs grad_weight_igemm,
    # `direct`): 2 channel blocks x 4 blocks of output channels, enough tasks
    # for 2 threads.
    ("weight_grad_gw_blocks", F.conv2d, (2, 128, 3, 3), (300, 128, 3, 3), False, dict(padding=1)),
    # Stride 1 over wide rows: the forward runs on padded copies of the planes
    # (conv.rs, forward_padded), with dilation, uneven padding and groups.
    (
        "padded_rows_dilated_groups",
        F.conv2d,
        (2, 8, 10, 40),
        (6, 4, 3, 3),
        True,
        dict(padding=(1, 2), dilation=(1, 2), groups=2),
    ),
    ("padded_rows_1d", F.conv1d, (2, 4, 200), (5, 4, 3), True, dict(padding=1)),
    # A stride-1 input gradient is the forward of the output gradient with the
    # weight read transposed and flipped (conv.rs, Weight::Transposed): groups,
    # more input channels per group than a 12-row panel (26, so a short last
    # panel), taps of a non-square kernel, k blocks that split an output
    # channel's taps (2 x 5 = 10 taps, 16 output channels per group).
    # The float32 weight gradient reads a padded channels-last copy of the
    # input in place per tap (conv.rs, grad_weight_igemm): two blocks of
    # channels (120 = 64 + 56, a short micro-panel), stride and dilation, and
    # groups with a stride.
    (
        "weight_grad_taps_blocks",
        F.conv2d,
        (2, 120, 9, 7),
        (16, 120, 3, 2),
        True,
        dict(stride=(2, 1), padding=1, dilation=(1, 2)),
    ),
    # Stride-2 3 x 3 layers with enough channels and tiles take the 25-point
    # Winograd forms (conv/winograd.rs: forward, and for padding 1 the input
    # gradient in 4 x 4 tiles, from 96 output channels): a half-outside last
    # tile column, odd sizes and batch 4, no padding (forward only).
    ("winograd_stride2", F.conv2d, (2, 32, 28, 30), (96, 32, 3, 3), True, dict(stride=2, padding=1)),
    ("winograd_stride2_odd", F.conv2d, (4, 33, 15, 20), (100, 33, 3, 3), False, dict(stride=2, padding=1)),
    ("winograd_stride2_unpadded", F.conv2d, (2, 32, 29, 29), (32, 32, 3, 3), True, dict(stride=2)),
    # Few input channels (an image model's first layer) run the direct
    # kernel (conv/direct.rs, float32, rows of 16+ outputs): mobilenet's
    # 3 x 3 stride-2 stem with rows ending mid-vector, resnet's 7 x 7 stem
    # over 40 output channels (blocks of 16, 16 and 8), one channel with
    # strides, dilation and uneven padding.
    ("direct_stem_stride2", F.conv2d, (2, 3, 40, 37), (16, 3, 3, 3), True, dict(stride=2, padding=1)),
    ("direct_7x7_blocks", F.conv2d, (1, 3, 30, 70), (40, 3, 7, 7), True, dict(stride=2, padding=3)),
    (
        "direct_one_channel_dilated",
        F.conv2d,
        (2, 1, 20, 64),
        (20, 1, 5, 3),
        False,
        dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2)),
    ),
    ("weight_grad_taps_groups", F.conv2d, (3, 64, 6, 6), (10, 32, 3, 3), False, dict(stride=2, padding=1, groups=2)),
    ("transposed_weight_groups", F.conv2d, (2, 52, 6, 9), (32, 26, 2, 5), True, dict(padding=(1, 2), groups=2)),
    # Strided convolutions over wide rows run on phase-split padded planes
    # (conv.rs, phase_dims): resnet's stem, strides and dilations that land
    # taps on different phases, a 1x1 stride-2 layer (one phase of four
    # read), a last phase one column short, odd heights.
    ("phase_planes_stem", F.conv2d, (2, 3, 21, 70), (8, 3, 7, 7), True, dict(stride=2, padding=3)),
    (
        "phase_planes_stride3_dilated_groups",
        F.conv2d,
        (2, 6, 13, 60),
        (9, 2, 3, 2),
        True,
        dict(groups=3, stride=(2, 3), padding=(2, 1), dilation=(2, 3)),
    ),
    ("phase_planes_1x1_stride2", F.conv2d, (2, 5, 7, 40), (7, 5, 1, 1), False, dict(stride=2)),
    ("phase_planes_1d_stride2", F.conv1d, (2, 4, 401), (5, 4, 3), True, dict(stride=2, padding=1)),
    ("depthwise_multiplier", F.conv2d, (2, 4, 7, 7), (8, 1, 3, 3), True, dict(groups=4, padding=1)),
    (
        "depthwise_stride2_dilation",
        F.conv2d,
        (2, 6, 11, 10),
        (6, 1, 3, 3),
        True,
        dict(groups=6, stride=2, padding=2, dilation=2),
    ),
    ("depthwise_5x5_no_pad", F.conv2d, (1, 3, 8, 9), (3, 1, 5, 5), False, dict(groups=3)),
    # Channel blocks of 16 (depthwise/blocked.rs): two blocks, the last partial,
    # uneven stride, padding and dilation.
    (
        "depthwise_blocks_partial",
        F.conv2d,
        (2, 21, 9, 12),
        (21, 1, 3, 5),
        True,
        dict(groups=21, stride=(1, 2), padding=(2, 1), dilation=(2, 1)),
    ),
    # Planes too large for the channel blocks' scratch: the row kernels.
    ("depthwise_large_plane", F.conv2d, (1, 3, 131, 140), (3, 1, 3, 3), True, dict(groups=3, stride=2, padding=1)),
    ("groups_1x1", F.conv2d, (2, 8, 5, 5), (12, 2, 1, 1), True, dict(groups=4)),
    # float32 1x1 layers of small maps and many channels run on igemm
    # (conv.rs, pointwise_igemm), forward and input gradient: micro-panels
    # spanning samples (49 and 81 positions a sample), a short last one,
    # output channels off the 12-row panels, groups, and at most 64 columns
    # in all (forward_few_cols).
    ("pointwise_igemm_across_samples", F.conv2d, (3, 144, 7, 7), (130, 144, 1, 1), True, {}),
    ("pointwise_igemm_groups", F.conv2d, (2, 256, 9, 9), (260, 128, 1, 1), False, dict(groups=2)),
    ("pointwise_igemm_few_cols", F.conv2d, (1, 160, 6, 6), (128, 160, 1, 1), True, {}),
    # float32 1x1 stride-1 weight gradients as dot products of whole planes
    # (conv.rs, grad_weight_pointwise): samples in chunks that fit L1 (one a
    # chunk at 40 x 40, the later chunks added to the first's sums), channel
    # counts off the 4 x 6 tiles and the 16-channel tasks, groups, and a
    # small map whose samples share one chunk.
    ("pointwise_weight_gradient_chunks", F.conv2d, (3, 22, 40, 40), (17, 22, 1, 1), False, {}),
    ("pointwise_weight_gradient_groups", F.conv2d, (4, 12, 7, 7), (18, 4, 1, 1), True, dict(groups=3)),
    # 1x1 maps (squeeze-and-excitation): one product over the batch per group.
    ("groups_1x1_on_1x1_maps", F.conv2d, (5, 8, 1, 1), (12, 4, 1, 1), True, dict(groups=2)),
    ("1x1_on_1x1_maps_batch1", F.conv2d, (1, 33, 1, 1), (70, 33, 1, 1), False, {}),
    (
        "groups_dilation_stride",
        F.conv2d,
        (2, 6, 12, 11),
        (9, 2, 3, 2),
        True,
        dict(groups=3, stride=(2, 3), padding=(2, 1), dilation=(2, 3)),
    ),
    ("1x1_stride2", F.conv2d, (2, 5, 9, 8), (7, 5, 1, 1), True, dict(stride=2)),
    ("1x1_padded", F.conv2d, (2, 5, 4, 4), (3, 5, 1, 1), True, dict(padding=1)),
    ("same_even_kernel", F.conv2d, (2, 3, 8, 7), (4, 3, 4, 2), True, dict(padding="same", dilation=(1, 2))),
    ("kernel_wider_than_padded_row_hits_zero", F.conv2d, (1, 2, 3, 3), (2, 2, 3, 3), False, dict(padding=2)),
    ("1d_groups_same", F.conv1d, (2, 6, 17), (6, 2, 5), True, dict(groups=3, padding="same")),
    ("1d_depthwise_stride", F.conv1d, (2, 4, 16), (4, 1, 3), True, dict(groups=4, stride=2, padding=1)),
    ("t2d_stride2", F.conv_transpose2d, (2, 8, 5, 6), (8, 4, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
    ("t2d_1x1", F.conv_transpose2d, (2, 6, 4, 4), (6, 5, 1, 1), True, {}),
    ("t2d_depthwise", F.conv_transpose2d, (2, 4, 5, 5), (4, 1, 3, 3), True, dict(groups=4, stride=2)),
    (
        "t2d_groups_dilation",
        F.conv_transpose2d,
        (1, 6, 4, 5),
        (6, 2, 2, 3),
        False,
        dict(groups=3, dilation=(2, 1), stride=(1, 2)),
    ),
    ("t1d", F.conv_transpose1d, (2, 4, 7), (4, 3, 4), True, dict(stride=3, padding=1, output_padding=2)),
    ("batch0", F.conv2d, (0, 4, 6, 6), (8, 4, 3, 3), True, dict(padding=1)),
    ("batch0_depthwise", F.conv2d, (0, 4, 6, 6), (4, 1, 3, 3), True, dict(groups=4)),
    ("t2d_batch0", F.conv_transpose2d, (0, 4, 3, 3), (4, 2, 3, 3), True, dict(stride=2)),
]


# ATen's own (warn-once) note on even 'same' kernels, raised by whichever device runs first; not foo's.
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cases(case, dtype):
    _, fn, xs, ws, bias, kw = case
    out_ch = ws[1] * kw.get("groups", 1) if fn in (F.conv_transpose1d, F.conv_transpose2d) else ws[0]
    tensors = [_rand(xs, dtype, 0), _rand(ws, dtype, 1), _rand((out_ch,), dtype, 2) if bias else None]
    _compare(lambda x, w, b: fn(x, w, b, **kw), tensors)


def test_non_contiguous_inputs():
    """Strided channel slices and transposed spatial dims of foo tensors (views made on foo)."""

    def fn(base, wbase):
        x = base[:, ::2].transpose(2, 3)
        w = wbase.transpose(2, 3)
        assert not x.is_contiguous() and not w.is_contiguous()
        return F.conv2d(x, w, padding=1, groups=2)

    _compare(fn, [_rand((2, 12, 10, 9), torch.float32, 0), _rand((6, 3, 3, 3), torch.float32, 1)])


def test_runs_in_rust(monkeypatch):
    """2-d and 1-d float convolutions (and transposed ones) never reach the Python composition."""

    def boom(*args, **kwargs):
        raise AssertionError("the Python composition ran")

    monkeypatch.setattr(foo_conv, "_conv_forward", boom)
    monkeypatch.setattr(foo_conv, "_conv_grads", boom)
    for fn, xs, ws in [
        (F.conv2d, (2, 4, 6, 6), (6, 2, 3, 3)),
        (F.conv1d, (2, 4, 9), (6, 2, 3)),
        (F.conv_transpose2d, (2, 4, 6, 6), (4, 3, 3, 3)),
    ]:
        x = _rand(xs, torch.float32, 0).to("foo").requires_grad_()
        w = _rand(ws, torch.float32, 1).to("foo").requires_grad_()
        with foo_rs.fallback_disabled():
            y = fn(x, w, groups=2 if fn is not F.conv_transpose2d else 1, stride=2, padding=1)
            y.sum().backward()
        assert x.grad is not None and w.grad is not None


def test_same_bits_for_any_thread_count():
    x = _rand((2, 64, 20, 20), torch.float32, 0).to("foo").requires_grad_()
    w = _rand((48, 64, 3, 3), torch.float32, 1).to("foo").requires_grad_()
    dw = _rand((64, 1, 5, 5), torch.float32, 2).to("foo").requires_grad_()
    pw = _rand((40, 64, 1, 1), torch.float32, 3).to("foo").requires_grad_()
    results = []
    old = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            with foo_rs.fallback_disabled():
                y = (
                    F.conv2d(x, w, padding=1, stride=2).sum()
                    + F.conv2d(x, w, padding=1).square().sum()
                    # Narrow rows: gathered im2col panels, not padded planes.
                    + F.conv2d(x[..., :7, :3], w, padding=1).square().sum()
                    + F.conv2d(x, dw, padding=2, groups=64).square().sum()
                    # Three input channels: the direct kernel.
                    + F.conv2d(x[:, :3], w[:, :3], padding=1).square().sum()
                    # 1x1: the weight gradient's tasks own 16 output channels.
                    + F.conv2d(x, pw).square().sum()
                )
                gx, gw, gdw, gpw = torch.autograd.grad(y, [x, w, dw, pw])
            results.append([t.cpu() for t in (y, gx, gw, gdw, gpw)])
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_no_leak():
    x = _rand((2, 16, 12, 12), torch.float32, 0).to("foo")
    w = _rand((16, 16, 3, 3), torch.float32, 1).to("foo")
    dw = _rand((16, 1, 3, 3), torch.float32, 2).to("foo")

    def step():
        xg, wg, dwg = (t.detach().requires_grad_() for t in (x, w, dw))
        with foo_rs.fallback_disabled():
            y = F.conv2d(F.conv2d(xg, wg, padding=1), dwg, groups=16, stride=2, padding=1)
            y = F.conv_transpose2d(y, wg, stride=2)
            y.sum().backward()

    # The baseline after one step, garbage collection and a device sync: memory that earlier tests
    # left to be freed later (garbage, blocks waiting on a stream's work) is gone by then; in the
    # full suite such a free during the loop once took the count 117 KB below a baseline taken first.
    step()
    gc.collect()
    torch.foo.synchronize()
    base = torch.foo.memory_allocated()
    for _ in range(3):
        step()
    assert torch.foo.memory_allocated() == base


def test_bad_input_errors():
    x = torch.zeros(2, 4, 5, 5, device="foo")
    with pytest.raises(RuntimeError, match="expected input"):
        F.conv2d(x, torch.zeros(3, 3, 3, 3, device="foo"))
    with pytest.raises(RuntimeError):
        F.conv2d(x, torch.zeros(3, 4, 7, 7, device="foo"))
    with pytest.raises(RuntimeError):
        F.conv2d(x, torch.zeros(3, 4, 3, 3, device="foo", dtype=torch.float64))
