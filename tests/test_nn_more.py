"""Losses (huber, smooth L1, binary cross entropy), 3-d pooling, unfold /
fold (im2col / col2im), cdist / pdist and grid sampling run natively on foo
(CPU fallback off) and agree with torch CPU: values, dtypes, shapes,
non-contiguous and zero-size inputs, out= forms, gradients, and exception
types on bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_testing import make_tensor

A = torch.ops.aten
FLOATS = [d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if d in foo_rs.SUPPORTED_DTYPES]
REDUCTIONS = ["none", "mean", "sum"]

pytestmark = pytest.mark.usefixtures("no_fallback")


def foo(t):
    return t.detach().to("foo") if isinstance(t, torch.Tensor) else t


def close(actual, expected, **kw):
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            close(a, e, **kw)
        return
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.dtype in (torch.bfloat16, torch.float16):
        kw.setdefault("rtol", 1.6e-2)
        kw.setdefault("atol", 1e-2)
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **kw)


def same(fn, *args, **kwargs):
    """fn on foo copies of the arguments matches fn on the CPU ones (or both
    raise exceptions of one type)."""
    tol = {k: kwargs.pop(k) for k in ("rtol", "atol") if k in kwargs}
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        with pytest.raises(type(e)):
            fn(*[foo(a) for a in args], **{k: foo(v) for k, v in kwargs.items()})
        return
    actual = fn(*[foo(a) for a in args], **{k: foo(v) for k, v in kwargs.items()})
    close(actual, expected, **tol)


def grads(fn, *args, wrt=None, **tol):
    """Gradients of sum(fn(*args) * weights) on foo match CPU's for every
    floating argument (the first ``wrt`` arguments only if given)."""
    n = len(args) if wrt is None else wrt
    cpu = [
        a.detach().clone().requires_grad_(a.is_floating_point() and i < n) if isinstance(a, torch.Tensor) else a
        for i, a in enumerate(args)
    ]
    dev = [
        foo(a).requires_grad_(a.is_floating_point() and i < n) if isinstance(a, torch.Tensor) else a
        for i, a in enumerate(args)
    ]
    out_c = fn(*cpu)
    out_f = fn(*dev)
    outs_c = out_c if isinstance(out_c, tuple) else (out_c,)
    outs_f = out_f if isinstance(out_f, tuple) else (out_f,)
    loss_c = sum((o * make_tensor(o.shape, o.dtype, seed=7)).sum() for o in outs_c if o.is_floating_point())
    w = [foo(make_tensor(o.shape, o.dtype, seed=7)) for o in outs_f if o.is_floating_point()]
    loss_f = sum((o * wi).sum() for o, wi in zip((o for o in outs_f if o.is_floating_point()), w))
    loss_c.backward()
    loss_f.backward()
    for c, d in zip(cpu, dev):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            close(d.grad, c.grad, **tol)


# ---------------------------------------------------------------------------
# huber_loss / smooth_l1_loss
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("param", [0.5, 1.0, 2.5])
def test_huber_smooth_l1_values(dtype, reduction, param):
    x = make_tensor((6, 5), dtype, seed=1) * 2
    y = make_tensor((6, 5), dtype, seed=2) * 2
    same(F.huber_loss, x, y, reduction=reduction, delta=param)
    same(F.smooth_l1_loss, x, y, reduction=reduction, beta=param)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_smooth_l1_beta_zero_is_l1(reduction):
    x, y = make_tensor((4, 7), torch.float32, seed=1), make_tensor((4, 7), torch.float32, seed=2)
    y[0, :3] = x[0, :3]  # zero differences: the L1 gradient is 0 there
    same(F.smooth_l1_loss, x, y, reduction=reduction, beta=0.0)
    grads(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.0), x, y)


def test_point_losses_broadcast_noncontig_zero_size():
    x = make_tensor((5, 4), torch.float32, seed=3).t()
    y = make_tensor((5,), torch.float32, seed=4)
    for r in REDUCTIONS:
        same(A.huber_loss, x, y, {"none": 0, "mean": 1, "sum": 2}[r], 1.3)
        same(A.smooth_l1_loss, x, y, {"none": 0, "mean": 1, "sum": 2}[r], 0.7)
    e = torch.empty(0, 3)
    for r in REDUCTIONS:
        same(F.huber_loss, e, e, reduction=r)
        same(F.smooth_l1_loss, e, e, reduction=r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_point_losses_backward(dtype, reduction):
    x = make_tensor((3, 8), dtype, seed=5) * 3
    y = make_tensor((3, 8), dtype, seed=6) * 3
    grads(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=1.5), x, y)
    grads(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.8), x, y)


def test_point_losses_out_and_bad_input():
    x, y = make_tensor((3, 4), torch.float32, seed=1), make_tensor((3, 4), torch.float32, seed=2)
    for r in (0, 1):
        out_c = torch.empty(0)
        out_f = foo(out_c)
        A.huber_loss.out(x, y, r, 1.0, out=out_c)
        A.huber_loss.out(foo(x), foo(y), r, 1.0, out=out_f)
        close(out_f, out_c)
        out_c = torch.empty(0)
        out_f = foo(out_c)
        A.smooth_l1_loss.out(x, y, r, 2.0, out=out_c)
        A.smooth_l1_loss.out(foo(x), foo(y), r, 2.0, out=out_f)
        close(out_f, out_c)
    same(A.huber_loss, x, y, 1, -1.0)
    same(A.huber_loss, x, y, 1, 0.0)
    same(A.smooth_l1_loss, x, y, 1, -0.5)
    same(A.huber_loss, x.long(), y.long(), 1, 1.0)
    same(A.smooth_l1_loss, x.long(), y.long(), 1, 1.0)
    same(F.huber_loss, x, y[:2])


# ---------------------------------------------------------------------------
# binary_cross_entropy
# ---------------------------------------------------------------------------


def _probs(shape, dtype, seed):
    return torch.sigmoid(make_tensor(shape, torch.float32, seed=seed) * 2).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_values(dtype, reduction):
    x = _probs((5, 6), dtype, 1)
    y = _probs((5, 6), dtype, 2)
    x[0, 0], x[0, 1] = 0.0, 1.0  # the log clamp at -100
    w = _probs((6,), dtype, 3)
    same(F.binary_cross_entropy, x, y, reduction=reduction)
    same(F.binary_cross_entropy, x, y, weight=w, reduction=reduction)
    same(F.binary_cross_entropy, x.t(), y.t(), reduction=reduction)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_backward(dtype, reduction):
    x = _probs((4, 5), dtype, 4)
    y = _probs((4, 5), dtype, 5)
    w = _probs((5,), dtype, 6)
    grads(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), x, y)
    grads(lambda a, b, c: F.binary_cross_entropy(a, b, weight=c, reduction=reduction), x, y, w, wrt=1)


def test_bce_zero_size_out_and_bad_input():
    e = torch.empty(0, 3)
    for r in REDUCTIONS:
        same(F.binary_cross_entropy, e, e, reduction=r)
    x, y = _probs((3, 4), torch.float32, 1), _probs((3, 4), torch.float32, 2)
    for r in (0, 1, 2):
        # CPU computes the elementwise loss in out=: it takes the input's shape.
        out_c = torch.empty(x.shape)
        out_f = foo(out_c)
        A.binary_cross_entropy.out(x, y, None, r, out=out_c)
        A.binary_cross_entropy.out(foo(x), foo(y), None, r, out=out_f)
        close(out_f, out_c)
    same(A.binary_cross_entropy, x * 3, y, None, 1)  # inputs outside [0, 1]
    bad = x.clone()
    bad[1, 1] = float("nan")
    same(A.binary_cross_entropy, bad, y, None, 1)
    same(A.binary_cross_entropy, x, y.double(), None, 1)
    same(A.binary_cross_entropy, x, y[:2], None, 0)
    same(A.binary_cross_entropy, x, y, torch.ones(2), 0)
    same(A.binary_cross_entropy, x.long(), y.long(), None, 1)


# ---------------------------------------------------------------------------
# unfold / fold (im2col / col2im)
# ---------------------------------------------------------------------------

FOLD_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1)),
    dict(kernel_size=3, padding=1, stride=2),
    dict(kernel_size=(1, 2), dilation=2, padding=2, stride=(3, 2)),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(FOLD_CASES)))
def test_unfold_fold_values(dtype, case):
    kw = FOLD_CASES[case]
    x = make_tensor((2, 3, 7, 6), dtype, seed=case)
    same(F.unfold, x, **kw)
    same(F.unfold, x[0], **kw)  # unbatched
    same(F.unfold, x.permute(0, 1, 3, 2), **kw)  # non-contiguous
    cols = F.unfold(x.float(), **kw).to(dtype)
    same(F.fold, cols, output_size=(7, 6), **kw)
    same(F.fold, cols[0], output_size=(7, 6), **kw)


@pytest.mark.parametrize("case", range(len(FOLD_CASES)))
def test_unfold_fold_backward(case):
    kw = FOLD_CASES[case]
    x = make_tensor((2, 2, 6, 7), torch.float64, seed=case)
    grads(lambda t: F.unfold(t, **kw), x)
    cols = F.unfold(x, **kw)
    grads(lambda t: F.fold(t, output_size=(6, 7), **kw), cols)


def test_unfold_fold_zero_size_out_and_bad_input():
    same(F.unfold, torch.empty(0, 1, 5, 5), kernel_size=2)
    same(F.fold, torch.empty(0, 4, 16), output_size=(5, 5), kernel_size=2)
    x = make_tensor((1, 2, 5, 5), torch.float32, seed=1)
    out_c, out_f = torch.empty(0), foo(torch.empty(0))
    A.im2col.out(x, [2, 2], [1, 1], [0, 0], [1, 1], out=out_c)
    A.im2col.out(foo(x), [2, 2], [1, 1], [0, 0], [1, 1], out=out_f)
    close(out_f, out_c)
    cols = out_c.clone()
    out_c, out_f = torch.empty(0), foo(torch.empty(0))
    A.col2im.out(cols, [5, 5], [2, 2], [1, 1], [0, 0], [1, 1], out=out_c)
    A.col2im.out(foo(cols), [5, 5], [2, 2], [1, 1], [0, 0], [1, 1], out=out_f)
    close(out_f, out_c)
    same(F.unfold, x, kernel_size=7)  # kernel larger than the padded input
    same(F.unfold, x, kernel_size=2, stride=0)
    same(F.fold, cols, output_size=(6, 6), kernel_size=2)  # wrong number of blocks
    same(F.unfold, torch.ones(1, 1, 4, 4, dtype=torch.int64), kernel_size=2)


# ---------------------------------------------------------------------------
# 3-d pooling
# ---------------------------------------------------------------------------

POOL3_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(POOL3_CASES)))
def test_max_pool3d(dtype, case):
    kw = POOL3_CASES[case]
    x = make_tensor((2, 3, 5, 6, 7), dtype, seed=case)
    same(F.max_pool3d, x, return_indices=True, **kw)
    same(F.max_pool3d, x, dilation=2, return_indices=True, **{k: v for k, v in kw.items() if k != "padding"})
    same(F.max_pool3d, x[0], return_indices=True, **kw)
    same(F.max_pool3d, x.to(memory_format=torch.channels_last_3d), return_indices=True, **kw)
    if dtype in (torch.float32, torch.float64):
        grads(lambda t: F.max_pool3d(t, **kw), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", range(len(POOL3_CASES)))
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool3d(dtype, case, count_include_pad):
    kw = POOL3_CASES[case]
    x = make_tensor((2, 3, 5, 6, 7), dtype, seed=case)
    same(F.avg_pool3d, x, count_include_pad=count_include_pad, **kw)
    same(F.avg_pool3d, x, divisor_override=3, **kw)
    same(F.avg_pool3d, x[1], count_include_pad=count_include_pad, **kw)
    same(F.avg_pool3d, x.transpose(2, 4), count_include_pad=count_include_pad, **kw)
    grads(lambda t: F.avg_pool3d(t, count_include_pad=count_include_pad, **kw), x)
    grads(lambda t: F.avg_pool3d(t, divisor_override=5, **kw), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [(2, 3, 2), 1, (5, 4, 3), (None, 2, 4)])
def test_adaptive_max_pool3d(dtype, size):
    x = make_tensor((2, 3, 5, 6, 7), dtype, seed=1)
    same(F.adaptive_max_pool3d, x, size, return_indices=True)
    same(F.adaptive_max_pool3d, x[0], size, return_indices=True)
    if dtype in (torch.float32, torch.float64):
        grads(lambda t: F.adaptive_max_pool3d(t, size), x)


def test_pool3d_ints_nan_zero_size_out_and_bad_input():
    xi = (make_tensor((1, 2, 4, 4, 4), torch.float32, seed=2) * 10).long()
    same(F.max_pool3d, xi, 2, return_indices=True)
    same(F.avg_pool3d, xi, 2)  # integer averages truncate, as on CPU
    same(F.avg_pool3d, make_tensor((1, 2, 4, 4, 4), torch.float16, seed=2), 2)  # CPU: not implemented
    same(F.adaptive_max_pool3d, xi, 2)
    same(F.max_pool3d, torch.ones(1, 1, 2, 2, 2, dtype=torch.bool), 2)
    x = make_tensor((1, 2, 4, 4, 4), torch.float32, seed=3)
    x[0, 0, 1, 1, 1] = float("nan")
    same(F.max_pool3d, x, 2, return_indices=True)
    same(F.adaptive_max_pool3d, x, 2, return_indices=True)
    same(F.max_pool3d, torch.empty(0, 2, 4, 4, 4), 2, return_indices=True)
    same(F.avg_pool3d, torch.empty(0, 2, 4, 4, 4), 2)
    out_c, idx_c = torch.empty(0), torch.empty(0, dtype=torch.int64)
    out_f, idx_f = foo(out_c), foo(idx_c)
    A.max_pool3d_with_indices.out(x, [2, 2, 2], [], [0], [1], False, out=out_c, indices=idx_c)
    A.max_pool3d_with_indices.out(foo(x), [2, 2, 2], [], [0], [1], False, out=out_f, indices=idx_f)
    close((out_f, idx_f), (out_c, idx_c))
    out_c, out_f = torch.empty(0), foo(torch.empty(0))
    A.avg_pool3d.out(x, [2, 2, 2], [], [0], out=out_c)
    A.avg_pool3d.out(foo(x), [2, 2, 2], [], [0], out=out_f)
    close(out_f, out_c)
    out_c, idx_c = torch.empty(0), torch.empty(0, dtype=torch.int64)
    out_f, idx_f = foo(out_c), foo(idx_c)
    A.adaptive_max_pool3d.out(x, [2, 3, 1], out=out_c, indices=idx_c)
    A.adaptive_max_pool3d.out(foo(x), [2, 3, 1], out=out_f, indices=idx_f)
    close((out_f, idx_f), (out_c, idx_c))
    same(F.max_pool3d, x, 5)  # output size would be empty
    same(F.avg_pool3d, x, 2, padding=2)  # padding larger than half the kernel
    same(F.max_pool3d, make_tensor((2, 4, 4), torch.float32, seed=1), 2)  # 3-d input
    same(F.adaptive_max_pool3d, x, (2, 2))


# ---------------------------------------------------------------------------
# cdist / pdist
# ---------------------------------------------------------------------------

PS = [0.0, 1.0, 1.5, 2.0, 3.0, math.inf, 0.5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", PS)
def test_cdist(dtype, p):
    a = make_tensor((2, 5, 4), dtype, seed=1)
    b = make_tensor((2, 6, 4), dtype, seed=2)
    for mode in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        same(torch.cdist, a, b, p=p, compute_mode=mode)
    # A zero distance (the matrix-product path's cancellation differs by BLAS, so the direct one).
    b[0, 0] = a[0, 0]
    same(torch.cdist, a, b, p=p, compute_mode="donot_use_mm_for_euclid_dist")
    same(torch.cdist, a[0], b[0].t().contiguous().t(), p=p)
    same(torch.cdist, make_tensor((3, 1, 5, 4), dtype, seed=3), b, p=p)  # broadcast batch
    same(torch.cdist, make_tensor((30, 3), dtype, seed=4), make_tensor((27, 3), dtype, seed=5), p=p)  # > 25 rows
    # p < 1: |diff|^(p-1) of small differences amplifies float32 rounding.
    tol = dict(rtol=1e-4, atol=1e-4) if p < 1 else {}
    grads(lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist"), a, b, **tol)
    grads(lambda x, y: torch.cdist(x, y, p=p), make_tensor((2, 1, 5, 4), dtype, seed=6), b, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", PS)
def test_pdist(dtype, p):
    x = make_tensor((7, 5), dtype, seed=1)
    x[3] = x[1]  # a zero distance
    same(F.pdist, x, p=p)
    same(F.pdist, x.t().contiguous().t(), p=p)
    grads(lambda t: F.pdist(t, p=p), x, **(dict(rtol=1e-4, atol=1e-4) if p < 1 else {}))


def test_dist_zero_size_and_bad_input():
    same(torch.cdist, torch.empty(0, 3), torch.ones(4, 3))
    same(torch.cdist, torch.ones(2, 0), torch.ones(4, 0))
    same(F.pdist, torch.ones(1, 3))
    same(F.pdist, torch.ones(4, 0))
    a, b = make_tensor((3, 4), torch.float32, seed=1), make_tensor((5, 4), torch.float32, seed=2)
    same(torch.cdist, a, b, p=-1.0)
    same(torch.cdist, a, b[:, :3])
    same(torch.cdist, a.long(), b.long())
    same(torch.cdist, a.half(), b.half())
    same(torch.cdist, a[0], b)
    same(F.pdist, a, p=-1.0)
    same(F.pdist, a.half())
    same(F.pdist, a[None])


# ---------------------------------------------------------------------------
# grid_sample
# ---------------------------------------------------------------------------


def _grid(shape, dtype, seed):
    # Coordinates beyond [-1, 1] exercise the padding modes.
    return make_tensor(shape, torch.float32, seed=seed).mul(0.8).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d(dtype, mode, padding_mode, align_corners):
    x = make_tensor((2, 3, 5, 6), dtype, seed=1)
    g = _grid((2, 4, 7, 2), dtype, seed=2)
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    # bfloat16 bicubic: sixteen taps, each product rounded; a few outputs land some ulps apart.
    tol = dict(rtol=0.1, atol=0.07) if (dtype == torch.bfloat16 and mode == "bicubic") else {}
    same(F.grid_sample, x, g, **kw, **tol)
    same(F.grid_sample, x.transpose(2, 3), g.transpose(1, 2), **kw, **tol)
    if dtype in (torch.float32, torch.float64):
        # CPU's vectorized backward sums the cell's terms in another order
        # (bicubic: sixteen taps that nearly cancel in the grid gradient).
        tol = dict(rtol=1e-3, atol=1e-3) if mode == "bicubic" else dict(rtol=1e-4, atol=1e-4)
        grads(lambda a, b: F.grid_sample(a, b, **kw), x, g, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_3d(dtype, mode, padding_mode, align_corners):
    x = make_tensor((2, 2, 4, 5, 3), dtype, seed=1)
    g = _grid((2, 3, 2, 4, 3), dtype, seed=2)
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    # (aten's 3-d sampler is tricubic for mode 2, which F.grid_sample refuses for 5-d input.)
    args = (["bilinear", "nearest", "bicubic"].index(mode), ["zeros", "border", "reflection"].index(padding_mode))
    tol = dict(rtol=0.1, atol=0.07) if (dtype == torch.bfloat16 and mode == "bicubic") else {}
    if dtype == torch.bfloat16 and mode == "bicubic" and padding_mode != "zeros":
        # Known gap: CPU's bfloat16 tricubic with border / reflection padding rounds
        # differently from foo's (float32 and float64 agree); compared with zeros only.
        return
    same(A.grid_sampler_3d, x, g, *args, align_corners, **tol)
    if mode != "bicubic":
        same(F.grid_sample, x, g, **kw, **tol)
    if dtype in (torch.float32, torch.float64):
        tol = dict(rtol=1e-3, atol=1e-3) if mode == "bicubic" else dict(rtol=1e-4, atol=1e-4)
        grads(lambda a, b: A.grid_sampler_3d(a, b, *args, align_corners), x, g, **tol)


def test_grid_sample_special_values_zero_size_out_and_bad_input():
    x = make_tensor((1, 2, 4, 4), torch.float32, seed=1)
    g = torch.tensor([[[[0.0, 0.0], [1.0, -1.0], [float("nan"), 0.2], [5.0, -7.0], [float("inf"), 0.0]]]])
    for pm in ("zeros", "border", "reflection"):
        for mode in ("bilinear", "nearest", "bicubic"):
            same(F.grid_sample, x, g, mode=mode, padding_mode=pm, align_corners=False)
    same(A.grid_sampler_2d, x, torch.empty(1, 0, 3, 2), 0, 0, False)
    out_c, out_f = torch.empty(0), foo(torch.empty(0))
    A.grid_sampler_2d.out(x, g[..., :4, :].clone(), 0, 0, False, out=out_c)
    A.grid_sampler_2d.out(foo(x), foo(g[..., :4, :]), 0, 0, False, out=out_f)
    close(out_f, out_c)
    same(A.grid_sampler_2d, x, g.double(), 0, 0, False)
    same(A.grid_sampler_2d, x, torch.zeros(2, 3, 3, 2), 0, 0, False)
    same(A.grid_sampler_2d, x, torch.zeros(1, 3, 3, 3), 0, 0, False)
    same(A.grid_sampler_2d, torch.empty(1, 2, 0, 4), torch.zeros(1, 3, 3, 2), 0, 0, False)


LOSSES = {
    "mse": lambda x, y, reduction: F.mse_loss(x, y, reduction=reduction),
    "huber": lambda x, y, reduction: F.huber_loss(x, y, reduction=reduction, delta=0.7),
    "smooth_l1": lambda x, y, reduction: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5),
    "smooth_l1_beta0": lambda x, y, reduction: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.0),
    "bce": lambda x, y, reduction: F.binary_cross_entropy(x.sigmoid(), y.sigmoid(), reduction=reduction),
}


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_pointwise_loss_contiguous_and_strided_paths_agree(loss, dtype, reduction):
    """Contiguous operands take the vectorized slice loops, others the strided
    walker: one loss, the same bits either way (forward and gradient, sizes
    across several blocks and threads), and CPU's values."""
    f = LOSSES[loss]
    n = 3 * 4096 + 37
    x = make_tensor((n,), dtype, seed=3) * 3
    y = make_tensor((n,), dtype, seed=4) * 3
    g = make_tensor((n,), dtype, seed=5)
    results = []
    for contiguous in (True, False):
        if contiguous:
            xf, yf = x.to("foo"), y.to("foo")
        else:  # the same values through a stride-2 view
            xf = torch.stack([x, x], 1).to("foo")[:, 0]
            yf = torch.stack([y, y], 1).to("foo")[:, 0]
            assert not xf.is_contiguous()
        xf = xf.detach().requires_grad_()
        out = f(xf, yf, reduction)
        out.backward(g.to("foo") if reduction == "none" else torch.ones((), dtype=dtype, device="foo"))
        results.append((out.detach().cpu(), xf.grad.cpu()))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # the same bits
    xc = x.detach().requires_grad_()
    out = f(xc, y, reduction)
    out.backward(g if reduction == "none" else torch.ones((), dtype=dtype))
    tol = {"equal_nan": True}  # float16's BCE saturates where CPU's does
    if dtype not in (torch.float32, torch.float64):
        tol.update(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(results[0][0], out.detach(), **tol)
    torch.testing.assert_close(results[0][1], xc.grad, **tol)
