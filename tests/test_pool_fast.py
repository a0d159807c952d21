"""The typed pooling kernels (kernels/pool.rs) against torch CPU: max, average
and adaptive pooling in 1-3 d, forward and backward, for every dtype CPU
takes, in every layout the kernels treat apart (contiguous planes,
channels-last, planes with odd batch/channel strides, non-dense planes),
with ceil_mode, dilation, padding, count_include_pad and divisor_override,
zero-size inputs, NaN and ties; and the same bits for any thread count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import foo_rs

pytestmark = pytest.mark.usefixtures("no_fallback")

FLOATS = [d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if d in foo_rs.SUPPORTED_DTYPES]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
LAYOUTS = ["contiguous", "channels_last", "transposed", "sliced"]


def _data(shape, dtype, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if ties:
            x = x.round()
        return x.to(dtype)
    hi = 4 if ties else 100
    lo = 0 if dtype == torch.uint8 else -hi
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def _layout(x, kind, dev):
    """x (CPU) on `dev` in a layout: same values, different strides."""
    if kind == "contiguous":
        return x.to(dev)
    if kind == "channels_last":
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        return x.to(dev).contiguous(memory_format=fmt)
    if kind == "transposed":  # planes not row-major
        return x.transpose(-1, -2).contiguous().to(dev).transpose(-1, -2)
    if kind == "sliced":  # row-major planes at odd channel strides
        return torch.cat([x, x], 1).to(dev)[:, ::2]
    raise AssertionError(kind)


def _close(f, c, dtype=None, loose=False):
    if isinstance(c, (tuple, list)):
        for a, b in zip(f, c):
            _close(a, b, dtype, loose)
        return
    assert f.device.type == "foo"
    assert f.dtype == c.dtype and f.shape == c.shape
    kw = {}
    if loose and c.dtype in (torch.bfloat16, torch.float16):
        kw = {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(f.cpu(), c, equal_nan=True, **kw)


def _run(fn, x, kind, grad=True):
    """fn on CPU and on foo (x in layout `kind` on both), outputs and, for
    floats, the input's gradient for a fixed random output gradient."""
    res = {}
    for dev in ("cpu", "foo"):
        xd = _layout(x, kind, dev)
        if grad and x.is_floating_point():
            xd = xd.detach().requires_grad_()
        out = fn(xd)
        first = out[0] if isinstance(out, tuple) else out
        gx = None
        if grad and x.is_floating_point():
            g = _data(first.shape, first.dtype, 99)
            g = g.to(dev)
            if kind == "channels_last" and g.dim() in (4, 5):
                g = g.contiguous(memory_format=torch.channels_last if g.dim() == 4 else torch.channels_last_3d)
            (gx,) = torch.autograd.grad(first, xd, g)
        res[dev] = (tuple(o.detach() for o in out) if isinstance(out, tuple) else out.detach(), gx)
    return res["cpu"], res["foo"]


def _check(fn, x, kind, loose=False, grad=True):
    try:
        fn(_layout(x, kind, "cpu"))
    except Exception as e:  # bad input or a dtype CPU does not take: foo raises alike
        with pytest.raises(type(e)):
            fn(_layout(x, kind, "foo"))
        return None, None
    (oc, gc), (of, gf) = _run(fn, x, kind, grad)
    _close(of, oc, x.dtype, loose)
    if gc is not None:
        _close(gf, gc, x.dtype, loose=True)
    return of, oc


def _same_indices(of, oc):
    if oc is not None:
        assert torch.equal(of[1].cpu(), oc[1])


# ---------------------------------------------------------------------------
# max pooling
# ---------------------------------------------------------------------------

MAX2D = [
    # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    (2, None, 0, 1, False),
    (3, 1, 1, 1, False),
    ((2, 3), (1, 3), (1, 1), 1, True),
    (3, 2, 1, 2, False),
    ((3, 2), 3, (1, 0), (2, 3), True),
]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("case", MAX2D)
def test_max_pool2d_every_dtype_and_layout(dtype, kind, case):
    k, s, p, d, ceil = case
    # planes under 128 elements: CPU's channels-last int8 kernel indexes in int8
    x = _data((2, 3, 9, 11), dtype, 1, ties=dtype in (torch.int8, torch.bfloat16))
    of, oc = _check(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True), x, kind)
    _same_indices(of, oc)  # the same argmax, ties included
    if kind == "channels_last":
        assert of[0].stride() == oc[0].stride()


def test_max_pool_nan_inf_and_lowest():
    x = torch.randn(2, 4, 9, 9)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 2, 2] = float("nan")
    x[1, 1] = float("-inf")
    x[1, 2, :, :4] = float("inf")
    for kind in LAYOUTS:
        of, oc = _check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x, kind, grad=False)
        _same_indices(of, oc)
    xi = torch.full((1, 2, 5, 5), torch.iinfo(torch.int64).min)
    for kind in LAYOUTS:
        of, oc = _check(lambda x: F.max_pool2d(x, 2, 1, 1, return_indices=True), xi, kind)
        _same_indices(of, oc)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("dims", [2, 3])
def test_max_pool_channels_last_channel_blocks(dtype, dims):
    # 83 channels: a block of 64 and one of 16 (maxima and taps kept in
    # registers over the window), then 3 channels one by one; ties, NaN and
    # -inf in each.
    shape = (2, 83, 9, 11) if dims == 2 else (2, 83, 3, 5, 6)  # planes under 128 (see above)
    x = _data(shape, dtype, 5, ties=True)
    if dtype.is_floating_point:
        x[0, 3, ..., 1, 1] = float("nan")
        x[1, 70, ..., 4, 4] = float("nan")
        x[0, 81, ..., 2, 3] = float("nan")
        x[1, 20] = float("-inf")
    pool = F.max_pool2d if dims == 2 else F.max_pool3d
    for k, s, p in [(3, 2, 1), (2, 1, 0)]:
        of, oc = _check(lambda x, k=k, s=s, p=p: pool(x, k, s, p, return_indices=True), x, "channels_last")
        _same_indices(of, oc)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.uint8])
@pytest.mark.parametrize("kind", LAYOUTS)
def test_max_pool3d_and_1d(dtype, kind):
    x = _data((2, 3, 4, 5, 6), dtype, 2)  # planes under 128 elements (see above)
    of, oc = _check(lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True), x, kind)
    _same_indices(of, oc)
    of, oc = _check(lambda x: F.max_pool3d(x, (1, 3, 2), (1, 2, 2), (0, 1, 1), (1, 1, 2), True, True), x, kind)
    _same_indices(of, oc)
    if kind in ("contiguous", "transposed"):
        x1 = _data((2, 3, 17), dtype, 3)
        lay = "contiguous" if kind == "contiguous" else "sliced"
        of, oc = _check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), x1, lay)
        _same_indices(of, oc)


# ---------------------------------------------------------------------------
# average pooling
# ---------------------------------------------------------------------------

AVG2D = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    (2, None, 0, False, True, None),
    (3, 1, 1, False, False, None),
    ((2, 3), (1, 3), (1, 1), True, True, None),
    (3, 2, 1, False, True, 5),
    (4, 3, 2, True, False, -3),
]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("case", AVG2D)
def test_avg_pool2d_every_dtype_and_layout(dtype, kind, case):
    k, s, p, ceil, cip, div = case
    x = _data((2, 3, 11, 13), dtype, 4)

    _check(lambda x: F.avg_pool2d(x, k, s, p, ceil, cip, div), x, kind, loose=True)


def test_avg_pool2d_float32_sums_like_aten():
    # float32 sums in float32 in ATen's order, then one division: the same bits.
    x = torch.randn(4, 8, 30, 31) * 1e3
    for kind in ("contiguous", "channels_last"):
        for case in AVG2D:
            k, s, p, ceil, cip, div = case
            (oc, gc), (of, gf) = _run(lambda x: F.avg_pool2d(x, k, s, p, ceil, cip, div), x, kind)
            assert torch.equal(of.cpu(), oc), (kind, case)
            assert torch.equal(gf.cpu(), gc), (kind, case)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("kind", LAYOUTS)
def test_avg_pool3d_and_1d(dtype, kind):
    x = _data((2, 3, 6, 7, 8), dtype, 5)

    _check(lambda x: F.avg_pool3d(x, 3, 2, 1, True, False), x, kind, loose=True)
    _check(lambda x: F.avg_pool3d(x, (1, 3, 2), (1, 2, 2), (0, 1, 1), False, True, 7), x, kind, loose=True)
    if kind == "contiguous" and dtype.is_floating_point:
        _check(lambda x: F.avg_pool1d(x, 3, 2, 1, True, False), _data((2, 3, 17), dtype, 6), kind, loose=True)


# ---------------------------------------------------------------------------
# adaptive pooling
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("size", [1, (3, 4), (7, 9), (5, 2)])
def test_adaptive_pool2d(dtype, kind, size):
    x = _data((2, 3, 7, 9), dtype, 7)
    _check(lambda x: F.adaptive_avg_pool2d(x, size), x, kind, loose=True)
    of, oc = _check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), x, kind)
    _same_indices(of, oc)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["contiguous", "channels_last", "transposed"])
def test_adaptive_pool3d(dtype, kind):
    x = _data((2, 3, 5, 7, 6), dtype, 8)
    of, oc = _check(lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True), x, kind)
    _same_indices(of, oc)
    _check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), x, kind, loose=True)


# ---------------------------------------------------------------------------
# zero size, threads
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (2, 0, 8, 8)])
def test_zero_size(shape):
    x = torch.randn(shape)
    _check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x, "contiguous")
    _check(lambda x: F.avg_pool2d(x, 3, 2, 1), x, "contiguous")
    _check(lambda x: F.adaptive_avg_pool2d(x, 2), x, "contiguous", grad=shape[0] == 0)
    _check(lambda x: F.max_pool3d(x.unsqueeze(2), 1, return_indices=True), x, "contiguous")


def _all_pools(x):
    outs = []
    for kind in ("contiguous", "channels_last", "transposed"):
        xd = _layout(x, kind, "foo").detach().requires_grad_()
        y, i = F.max_pool2d(xd, 3, 2, 1, return_indices=True)
        a = F.avg_pool2d(xd, 3, 2, 1, count_include_pad=False)
        m = F.adaptive_avg_pool2d(xd, 3)
        am = F.adaptive_max_pool2d(xd, 5)
        loss = (y * 1.5).sum() + (a * a).sum() + m.sum() * 0.3 + am.sum()
        (gx,) = torch.autograd.grad(loss, xd)
        outs += [y, i, a, m, am, gx]
    x3 = x[:, :, :16].unsqueeze(2).expand(-1, -1, 4, -1, -1).contiguous().requires_grad_()
    y3 = F.max_pool3d(x3, 3, 2, 1)
    a3 = F.avg_pool3d(x3, 3, 2, 1)
    (g3,) = torch.autograd.grad(y3.sum() + (a3 * a3).sum(), x3)
    return [t.detach().cpu() for t in outs + [y3, a3, g3]]


def test_same_bits_for_any_thread_count():
    x = torch.randn(4, 32, 40, 40)
    old = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(_all_pools(x))
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)
