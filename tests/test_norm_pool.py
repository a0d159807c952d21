"""Normalization, pooling and dropout run natively on foo (CPU fallback off)
and agree with torch CPU: values, dtypes, shapes, running statistics,
gradients, and exception types on bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import foo_rs
from foo_testing import make_tensor

A = torch.ops.aten
FLOATS = [d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if d in foo_rs.SUPPORTED_DTYPES]

pytestmark = pytest.mark.usefixtures("no_fallback")


def foo(t):
    return None if t is None else t.detach().to("foo")


def close(actual, expected, **kw):
    """assert_close of a foo result (tensor, tuple, None) against CPU's."""
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            close(a, e, **kw)
        return
    if expected is None:
        assert actual is None
        return
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **kw)


def raises_like(fn, cpu_args, foo_args=None, cpu_kwargs=None):
    """fn raises on foo an exception of exactly the type it raises on CPU."""
    cpu_kwargs = cpu_kwargs or {}
    with pytest.raises(Exception) as cpu_err:
        fn(*cpu_args, **cpu_kwargs)
    if foo_args is None:
        foo_args = [foo(a) if isinstance(a, torch.Tensor) else a for a in cpu_args]
    foo_kwargs = {k: foo(v) if isinstance(v, torch.Tensor) else v for k, v in cpu_kwargs.items()}
    with pytest.raises(Exception) as foo_err:
        fn(*foo_args, **foo_kwargs)
    assert type(foo_err.value) is type(cpu_err.value), (cpu_err.value, foo_err.value)


def grad_tol(dtype):
    # Gradients of normalizations subtract nearly equal sums: in the half
    # types CPU rounds its float partial results, foo accumulates in float64.
    return {"atol": 5e-2, "rtol": 5e-2} if dtype in (torch.bfloat16, torch.float16) else {}


def fwd_tol(dtype):
    # In the half types foo normalizes with the statistics rounded to the
    # dtype, as CPU does, but CPU's float arithmetic can round a statistic
    # one unit (0.4% in bfloat16) away from the float64 one: outputs of a few
    # units then differ by about 1e-2.
    return {"atol": 2e-2, "rtol": 1.6e-2} if dtype in (torch.bfloat16, torch.float16) else {}


def autograd_check(fn, cpu_inputs, dtype, out_tol=None, seed=7):
    """Runs fn on CPU and on foo copies of cpu_inputs (floating tensors
    require grad), compares outputs and the gradients of every input."""

    def leaves(dev):
        res = []
        for t in cpu_inputs:
            if t is None or not isinstance(t, torch.Tensor):
                res.append(t)
                continue
            v = t.detach().clone() if dev == "cpu" else t.detach().to(dev)
            if v.is_floating_point():
                v.requires_grad_(True)
            res.append(v)
        return res

    c, f = leaves("cpu"), leaves("foo")
    out_c, out_f = fn(*c), fn(*f)
    close(out_f, out_c, **(out_tol or {}))
    g = make_tensor(out_c.shape, out_c.dtype, seed=seed)
    out_c.backward(g)
    out_f.backward(g.to("foo"))
    for tc, tf in zip(c, f):
        if isinstance(tc, torch.Tensor) and tc.requires_grad:
            close(tf.grad, tc.grad, **grad_tol(dtype))


# ---------------------------------------------------------------------------
# layer norm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "shape,norm", [((4, 10), (10,)), ((2, 3, 5), (3, 5)), ((3, 2), (2,)), ((0, 4), (4,)), ((2, 7, 33), (33,))]
)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward_backward(dtype, shape, norm, affine):
    x = make_tensor(shape, dtype, seed=1)
    w = make_tensor(norm, dtype, seed=2) if affine else None
    b = make_tensor(norm, dtype, seed=3) if affine else None
    autograd_check(lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_native_layer_norm_stats_and_masks(dtype):
    x = make_tensor((3, 4, 6), dtype, seed=4)
    w, b = make_tensor((6,), dtype, seed=5), make_tensor((6,), dtype, seed=6)
    cpu = A.native_layer_norm(x, [6], w, b, 1e-5)
    res = A.native_layer_norm(foo(x), [6], foo(w), foo(b), 1e-5)
    close(res, cpu)
    g = make_tensor(x.shape, dtype, seed=7)
    for mask in itertools.product([True, False], repeat=3):
        exp = A.native_layer_norm_backward(g, x, [6], cpu[1], cpu[2], w, b, list(mask))
        got = A.native_layer_norm_backward(foo(g), foo(x), [6], res[1], res[2], foo(w), foo(b), list(mask))
        close(got, exp, **grad_tol(dtype))


def test_layer_norm_strided_and_mixed_dtypes():
    x = make_tensor((5, 8, 6), torch.float32, seed=8).transpose(0, 2)  # (6, 8, 5), not contiguous
    autograd_check(lambda x: F.layer_norm(x, (5,)), [x], torch.float32)
    # bfloat16 input with float32 parameters (CPU's mixed type): float32 statistics.
    xb = make_tensor((4, 6), torch.bfloat16, seed=9)
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    close(A.native_layer_norm(foo(xb), [6], foo(w), foo(b), 1e-5), A.native_layer_norm(xb, [6], w, b, 1e-5))


def test_layer_norm_module_trains():
    torch.manual_seed(0)
    ln = nn.LayerNorm(12)
    x = make_tensor((3, 5, 12), torch.float32, seed=10)
    ln_foo = nn.LayerNorm(12).to("foo")
    ln_foo.load_state_dict({k: v.to("foo") for k, v in ln.state_dict().items()})
    ln(x).square().sum().backward()
    ln_foo(foo(x)).square().sum().backward()
    close(ln_foo.weight.grad, ln.weight.grad, rtol=1e-4, atol=1e-4)
    close(ln_foo.bias.grad, ln.bias.grad, rtol=1e-4, atol=1e-4)


def test_layer_norm_bad_input():
    x = make_tensor((2, 3, 4), torch.float32)
    raises_like(F.layer_norm, [x, (5,)])
    raises_like(F.layer_norm, [x, (4,), torch.ones(5)])
    raises_like(F.layer_norm, [x, (4,), None, torch.ones(3)])
    raises_like(A.native_layer_norm, [x, [], None, None, 1e-5])
    raises_like(A.native_layer_norm, [x.int(), [4], None, None, 1e-5])
    raises_like(A.native_layer_norm, [x, [4], torch.ones(4).bfloat16(), None, 1e-5])


# ---------------------------------------------------------------------------
# batch norm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "sliced"])
def test_group_norm_forward_backward(dtype, layout):
    x = make_tensor((2, 6, 5, 4), dtype, seed=3)
    if layout == "permuted":
        x = x.permute(0, 1, 3, 2)  # non-contiguous: CPU's kernel takes it, so must foo
    elif layout == "sliced":
        x = make_tensor((2, 6, 5, 8), dtype, seed=3)[..., ::2]
    w = make_tensor((6,), dtype, seed=4)
    b = make_tensor((6,), dtype, seed=5)
    autograd_check(lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-5), [x, w, b], dtype)
    autograd_check(lambda x: F.group_norm(x, 2), [x], dtype)


def _bn_pair(cls, c, dtype, **kw):
    torch.manual_seed(0)
    m = cls(c, **kw)
    if m.affine:
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-1, 1)
    m = m.to(dtype)
    mf = cls(c, **kw).to(dtype).to("foo")
    mf.load_state_dict({k: v.to("foo") for k, v in m.state_dict().items()})
    return m, mf


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("track", [True, False])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm2d_train_eval(dtype, affine, track, momentum):
    m, mf = _bn_pair(nn.BatchNorm2d, 3, dtype, affine=affine, track_running_stats=track, momentum=momentum)
    for step in range(2):
        x = make_tensor((4, 3, 5, 5), dtype, seed=20 + step) * 0.3 + 1
        xc, xf = x.clone().requires_grad_(), foo(x).requires_grad_()
        yc, yf = m(xc), mf(xf)
        close(yf, yc, **fwd_tol(dtype))
        g = make_tensor(yc.shape, dtype, seed=30 + step)
        yc.backward(g)
        yf.backward(foo(g))
        close(xf.grad, xc.grad, **grad_tol(dtype))
        if affine:
            close(mf.weight.grad, m.weight.grad, **grad_tol(dtype))
            close(mf.bias.grad, m.bias.grad, **grad_tol(dtype))
    for k, v in m.state_dict().items():
        close(mf.state_dict()[k], v)
    m.eval()
    mf.eval()
    x = make_tensor((2, 3, 4, 4), dtype, seed=40)
    close(mf(foo(x)), m(x), **fwd_tol(dtype))
    # eval with running stats: gradients w.r.t. the input and parameters
    xc, xf = x.clone().requires_grad_(), foo(x).requires_grad_()
    yc, yf = m(xc), mf(xf)
    yc.sum().backward()
    yf.sum().backward()
    close(xf.grad, xc.grad, **grad_tol(dtype))


@pytest.mark.parametrize("shape", [(6, 4), (5, 4, 7), (3, 4, 2, 3, 2)])
def test_batch_norm_ranks(shape):
    x = make_tensor(shape, torch.float64, seed=41)
    rm, rv = torch.randn(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64) + 0.5
    w, b = torch.rand(4, dtype=torch.float64) + 0.5, torch.randn(4, dtype=torch.float64)
    rm_f, rv_f = foo(rm), foo(rv)
    autograd_check(
        lambda x, w, b: F.batch_norm(
            x, rm_f if x.device.type == "foo" else rm, rv_f if x.device.type == "foo" else rv, w, b, True, 0.2, 1e-3
        ),
        [x, w, b],
        torch.float64,
    )
    close(rm_f, rm)
    close(rv_f, rv)


def test_batch_norm_channels_last_and_strided():
    x = make_tensor((4, 3, 5, 6), torch.float32, seed=42).contiguous(memory_format=torch.channels_last)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    cpu = A.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    got = A.native_batch_norm(
        foo(x).contiguous(memory_format=torch.channels_last), foo(w), foo(b), None, None, True, 0.1, 1e-5
    )
    close(got, cpu)
    assert got[0].stride() == cpu[0].stride()
    xt = make_tensor((4, 6, 5, 3), torch.float32, seed=43).permute(0, 3, 2, 1)  # neither layout
    autograd_check(lambda x, w, b: F.batch_norm(x, None, None, w, b, True), [xt, w, b], torch.float32)


def test_batch_norm_mixed_dtype():
    # bfloat16 input, float32 parameters and statistics (as autocast leaves them)
    m, mf = _bn_pair(nn.BatchNorm2d, 3, torch.float32)
    x = make_tensor((4, 3, 4, 4), torch.bfloat16, seed=44)
    close(mf(foo(x)), m(x))
    close(mf.running_mean, m.running_mean)
    close(mf.running_var, m.running_var)


def test_batch_norm_direct_overloads():
    x = make_tensor((4, 3, 5), torch.float32, seed=45)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    rmf, rvf = foo(rm), foo(rv)
    for training in (True, False):
        close(
            A._native_batch_norm_legit(foo(x), foo(w), foo(b), rmf, rvf, training, 0.1, 1e-5),
            A._native_batch_norm_legit(x, w, b, rm, rv, training, 0.1, 1e-5),
        )
        close(rmf, rm)
        close(rvf, rv)
    close(
        A._native_batch_norm_legit.no_stats(foo(x), foo(w), foo(b), True, 0.1, 1e-5),
        A._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
    )
    close(
        A._native_batch_norm_legit_no_training(foo(x), foo(w), foo(b), rmf, rvf, 0.1, 1e-5),
        A._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5),
    )
    cpu = A._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
    got = A._batch_norm_with_update(foo(x), foo(w), foo(b), rmf, rvf, 0.1, 1e-5)
    close(got, cpu)
    close(rmf, rm)
    close(rvf, rv)
    g = make_tensor(x.shape, torch.float32, seed=46)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        for update in (True, False):
            exp = A.batch_norm_backward(g, x, w, rm, rv, cpu[1], cpu[2], update, 1e-5, mask, cpu[3])
            res = A.batch_norm_backward(foo(g), foo(x), foo(w), rmf, rvf, got[1], got[2], update, 1e-5, mask, got[3])
            close(res, exp, rtol=1e-4, atol=1e-4)
    # out= forms
    outs = [torch.empty(0, device="foo") for _ in range(3)]
    A.native_batch_norm.out(
        foo(x), foo(w), foo(b), None, None, True, 0.1, 1e-5, out=outs[0], save_mean=outs[1], save_invstd=outs[2]
    )
    close(tuple(outs), A.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5))


def test_batch_norm_zero_batch_and_bad_input():
    # F.batch_norm's composite handles the empty batch; native_batch_norm raises in training
    x0 = torch.randn(0, 3, 2)
    close(
        F.batch_norm(foo(x0), foo(torch.zeros(3)), foo(torch.ones(3)), training=True),
        F.batch_norm(x0, torch.zeros(3), torch.ones(3), training=True),
    )
    raises_like(A.native_batch_norm, [x0, None, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5])
    close(
        A.native_batch_norm(foo(x0), None, None, foo(torch.zeros(3)), foo(torch.ones(3)), False, 0.1, 1e-5),
        A.native_batch_norm(x0, None, None, torch.zeros(3), torch.ones(3), False, 0.1, 1e-5),
    )
    x = make_tensor((4, 3, 5, 5), torch.float32)
    raises_like(F.batch_norm, [x, torch.zeros(4), torch.ones(4)], cpu_kwargs={"training": True})
    raises_like(F.batch_norm, [x, torch.zeros(3), torch.ones(3), torch.ones(4)], cpu_kwargs={"training": True})
    raises_like(F.batch_norm, [torch.randn(1, 3), torch.zeros(3), torch.ones(3)], cpu_kwargs={"training": True})
    raises_like(A.native_batch_norm, [x.int(), None, None, None, None, True, 0.1, 1e-5])
    raises_like(A.native_batch_norm, [torch.randn(3), None, None, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5])
    raises_like(A.native_batch_norm, [x.double(), torch.ones(3), None, None, None, True, 0.1, 1e-5])
    raises_like(
        A.native_batch_norm, [x.bfloat16(), torch.ones(3), None, torch.zeros(3).bfloat16(), None, True, 0.1, 1e-5]
    )
    # eval without running statistics: CPU crashes here; foo raises.
    with pytest.raises(RuntimeError, match="foo"):
        A.native_batch_norm(foo(x), None, None, None, None, False, 0.1, 1e-5)
    # a weight of the wrong size reaching the native op: an error, never a bad read
    with pytest.raises(RuntimeError, match="foo"):
        A.native_batch_norm(foo(x), foo(torch.ones(4)), None, None, None, True, 0.1, 1e-5)


# ---------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------

_MAX_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, True),
    ((2, 3), (1, 2), (1, 0), 1, False),
    (3, 1, 1, 2, False),
    (2, 3, 1, (1, 2), True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", _MAX_CASES)
# (2, 3, 5, 150): output rows long enough for the vectorized interior (pool.rs,
# max_taps), over more than one 64-output block for strides 1 and 2.
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7), (2, 3, 5, 150)])
def test_max_pool2d(dtype, case, shape):
    k, s, p, d, ceil = case
    x = torch.randn(shape, dtype=torch.float64).to(dtype)  # few ties
    c = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    f = F.max_pool2d(foo(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
    close(f, c)
    autograd_check(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), [x], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d_wide_rows_nan_inf_and_ties(dtype):
    """Long rows take the vectorized interior: NaN wins wherever it is in a
    window, -inf and ties keep the first tap (indices as CPU's), strides 1-3."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (2, 2, 6, 200), generator=g).to(torch.float64)  # many ties
    x[0, 0, 2, 17] = float("nan")
    x[0, 1, 3, 100:140:3] = float("nan")
    x[1, 0, :, 50:90] = float("-inf")
    x[1, 1, 4, 150] = float("inf")
    x = x.to(dtype)
    for k, s, p in [(3, 2, 1), (3, 1, 1), (2, 3, 0), (5, 2, 2)]:
        c = F.max_pool2d(x, k, s, p, return_indices=True)
        f = F.max_pool2d(foo(x), k, s, p, return_indices=True)
        close(f, c)
        assert torch.equal(f[1].cpu(), c[1]), (k, s, p)


def test_max_pool2d_layouts_nan_ints_zero_batch():
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    c = F.max_pool2d(x, 2, return_indices=True)
    f = F.max_pool2d(foo(x).contiguous(memory_format=torch.channels_last), 2, return_indices=True)
    close(f, c)
    assert f[0].stride() == c[0].stride()
    xt = torch.randn(2, 9, 8, 3).permute(0, 3, 1, 2)
    autograd_check(lambda x: F.max_pool2d(x, 3, 2, 1), [xt], torch.float32)
    xn = torch.randn(1, 1, 4, 4)
    xn[0, 0, 1, 1] = float("nan")
    close(F.max_pool2d(foo(xn), 2, return_indices=True), F.max_pool2d(xn, 2, return_indices=True))
    xi = torch.randint(-100, 100, (2, 2, 6, 6))
    close(F.max_pool2d(foo(xi), 2, return_indices=True), F.max_pool2d(xi, 2, return_indices=True))
    x0 = torch.randn(0, 3, 6, 6)
    close(F.max_pool2d(foo(x0), 2, return_indices=True), F.max_pool2d(x0, 2, return_indices=True))
    close(nn.MaxPool2d(3, 2, 1)(foo(x)), nn.MaxPool2d(3, 2, 1)(x))


def test_max_pool2d_out_variants():
    x = torch.randn(2, 3, 7, 7)
    out, idx = torch.empty(0, device="foo"), torch.empty(0, dtype=torch.long, device="foo")
    A.max_pool2d_with_indices.out(foo(x), [3], [2], [1], [1], True, out=out, indices=idx)
    close((out, idx), A.max_pool2d_with_indices(x, [3], [2], [1], [1], True))
    g = torch.randn(out.shape)
    gi = torch.empty(0, device="foo")
    A.max_pool2d_with_indices_backward.grad_input(foo(g), foo(x), [3], [2], [1], [1], True, idx, grad_input=gi)
    exp = A.max_pool2d_with_indices_backward(g, x, [3], [2], [1], [1], True, idx.cpu())
    close(gi, exp)
    with pytest.raises(RuntimeError):
        A.max_pool2d_with_indices.out(
            foo(x), [3], [2], [1], [1], True, out=torch.empty(0, device="foo", dtype=torch.float64), indices=idx
        )


def test_max_pool2d_bad_input():
    x = torch.randn(2, 3, 7, 7)
    raises_like(F.max_pool2d, [x, 0])
    raises_like(F.max_pool2d, [x, 2, 2, 2])
    raises_like(F.max_pool2d, [x, 9])
    raises_like(F.max_pool2d, [torch.randn(7, 7), 2])
    raises_like(F.max_pool2d, [torch.randn(2, 0, 7, 7), 2])
    raises_like(F.max_pool2d, [x, (2, 2, 2)])
    raises_like(F.max_pool2d, [x, 2, 0])


_AVG_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None),
    (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None),
    ((2, 3), (1, 2), (1, 1), False, False, None),
    (3, 2, 1, False, True, 5),
    (4, 3, 2, True, False, None),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", _AVG_CASES)
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7)])
def test_avg_pool2d(dtype, case, shape):
    k, s, p, ceil, cip, div = case
    x = make_tensor(shape, dtype, seed=50)
    autograd_check(lambda x: F.avg_pool2d(x, k, s, p, ceil, cip, div), [x], dtype)


def test_avg_pool2d_layouts_ints_out_and_bad_input():
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    c = F.avg_pool2d(x, 3, 2, 1)
    f = F.avg_pool2d(foo(x).contiguous(memory_format=torch.channels_last), 3, 2, 1)
    close(f, c)
    assert f.stride() == c.stride()
    xi = torch.randint(-100, 100, (2, 2, 6, 6))
    close(F.avg_pool2d(foo(xi), 3, 2, 1), F.avg_pool2d(xi, 3, 2, 1))
    x0 = torch.randn(0, 3, 6, 6)
    close(F.avg_pool2d(foo(x0), 2), F.avg_pool2d(x0, 2))
    out = torch.empty(0, device="foo")
    A.avg_pool2d.out(foo(x), [3], [2], [1], True, False, None, out=out)
    close(out, A.avg_pool2d(x, [3], [2], [1], True, False, None))
    g = torch.randn(out.shape)
    gi = torch.empty(0, device="foo")
    A.avg_pool2d_backward.grad_input(foo(g), foo(x), [3], [2], [1], True, False, None, grad_input=gi)
    close(gi, A.avg_pool2d_backward(g, x, [3], [2], [1], True, False, None))
    close(nn.AvgPool2d(2)(foo(x)), nn.AvgPool2d(2)(x))
    raises_like(F.avg_pool2d, [x, 0])
    raises_like(F.avg_pool2d, [x, 2, 2, 2])
    raises_like(F.avg_pool2d, [x, 9])
    raises_like(F.avg_pool2d, [x, 2], cpu_kwargs={"divisor_override": 0})
    raises_like(F.avg_pool2d, [torch.randn(8, 8), 2])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out_size", [(1, 1), (3, 2), (5, 7), (7, 9), (2, None)])
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (3, 5, 6)])
def test_adaptive_avg_pool2d(dtype, out_size, shape):
    x = make_tensor(shape, dtype, seed=60)
    autograd_check(lambda x: F.adaptive_avg_pool2d(x, out_size), [x], dtype)


def test_adaptive_avg_pool2d_direct_layouts_and_bad_input():
    x = torch.randn(2, 3, 7, 9)
    close(A._adaptive_avg_pool2d(foo(x), [3, 4]), A._adaptive_avg_pool2d(x, [3, 4]))
    xc = x.contiguous(memory_format=torch.channels_last)
    f = A._adaptive_avg_pool2d(foo(x).contiguous(memory_format=torch.channels_last), [3, 4])
    c = A._adaptive_avg_pool2d(xc, [3, 4])
    close(f, c)
    assert f.stride() == c.stride()
    g = torch.randn(2, 3, 3, 4)
    close(A._adaptive_avg_pool2d_backward(foo(g), foo(x)), A._adaptive_avg_pool2d_backward(g, x))
    out = torch.empty(0, device="foo")
    A.adaptive_avg_pool2d.out(foo(x), [3, 4], out=out)
    close(out, A.adaptive_avg_pool2d(x, [3, 4]))
    x0 = torch.randn(0, 3, 5, 4)
    close(A._adaptive_avg_pool2d(foo(x0), [3, 2]), A._adaptive_avg_pool2d(x0, [3, 2]))
    close(nn.AdaptiveAvgPool2d((2, 3))(foo(x)), nn.AdaptiveAvgPool2d((2, 3))(x))
    raises_like(A._adaptive_avg_pool2d, [torch.randn(2, 3, 0, 4), [3, 2]])
    raises_like(A._adaptive_avg_pool2d, [torch.randn(5, 4), [3, 2]])
    raises_like(A._adaptive_avg_pool2d, [x, [3]])
    raises_like(A._adaptive_avg_pool2d, [x, [-1, 2]])
    raises_like(A._adaptive_avg_pool2d, [x.long(), [3, 2]])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out_size", [(1, 1), (3, 2), (5, 7), (7, 9), (2, None)])
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (3, 5, 6)])
def test_adaptive_max_pool2d(dtype, out_size, shape):
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    close(
        F.adaptive_max_pool2d(foo(x), out_size, return_indices=True),
        F.adaptive_max_pool2d(x, out_size, return_indices=True),
    )
    autograd_check(lambda x: F.adaptive_max_pool2d(x, out_size), [x], dtype)


def test_adaptive_max_pool2d_layouts_out_and_bad_input():
    x = torch.randn(2, 3, 7, 9).contiguous(memory_format=torch.channels_last)
    c = F.adaptive_max_pool2d(x, (3, 4), return_indices=True)
    f = F.adaptive_max_pool2d(foo(x).contiguous(memory_format=torch.channels_last), (3, 4), return_indices=True)
    close(f, c)
    assert f[0].stride() == c[0].stride()
    out, idx = torch.empty(0, device="foo"), torch.empty(0, dtype=torch.long, device="foo")
    A.adaptive_max_pool2d.out(foo(x), [3, 4], out=out, indices=idx)
    close((out, idx), c)
    g = torch.randn(2, 3, 3, 4)
    gi = torch.empty(0, device="foo")
    A.adaptive_max_pool2d_backward.grad_input(foo(g), foo(x), idx, grad_input=gi)
    close(gi, A.adaptive_max_pool2d_backward(g, x, c[1]))
    x0 = torch.randn(0, 3, 5, 4)
    close(F.adaptive_max_pool2d(foo(x0), 2, return_indices=True), F.adaptive_max_pool2d(x0, 2, return_indices=True))
    close(nn.AdaptiveMaxPool2d(2)(foo(x)), nn.AdaptiveMaxPool2d(2)(x))
    raises_like(A.adaptive_max_pool2d, [torch.randn(2, 3, 0, 4), [3, 2]])
    raises_like(A.adaptive_max_pool2d, [torch.randn(5, 4), [3, 2]])
    raises_like(A.adaptive_max_pool2d, [x, [3]])
    raises_like(A.adaptive_max_pool2d, [x.long(), [3, 2]])


# ---------------------------------------------------------------------------
# dropout and bernoulli
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_mask_scale_and_grad(dtype):
    p = 0.3
    x = (torch.rand(64, 50, dtype=torch.float64) + 0.5).to(dtype)
    xf = foo(x).requires_grad_()
    y = F.dropout(xf, p, training=True)
    kept = (y != 0).cpu()
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 0.03
    close(y, torch.where(kept, x * (1 / (1 - p)), torch.zeros((), dtype=dtype)))
    g = make_tensor(x.shape, dtype, seed=70)
    y.backward(foo(g))
    close(xf.grad, torch.where(kept, g * (1 / (1 - p)), torch.zeros((), dtype=dtype)))


def test_dropout_reproducible_and_eval():
    x = foo(torch.randn(1000))
    torch.manual_seed(123)
    a = F.dropout(x, 0.5)
    b = F.dropout(x, 0.5)
    torch.manual_seed(123)
    a2 = F.dropout(x, 0.5)
    assert torch.equal(a.cpu(), a2.cpu())
    assert not torch.equal(a.cpu(), b.cpu())
    assert torch.equal(F.dropout(x, 0.5, training=False).cpu(), x.cpu())
    out, mask = A.native_dropout(x, 0.5, False)
    assert torch.equal(out.cpu(), x.cpu()) and mask.dtype == torch.bool and bool(mask.all())
    out, mask = A.native_dropout(foo(torch.randn(0, 2)), 0.5, True)
    cout, cmask = A.native_dropout(torch.randn(0, 2), 0.5, True)
    assert (out.shape, out.dtype, mask.dtype) == (cout.shape, cout.dtype, cmask.dtype)
    out, mask = A.native_dropout(x, 1.0, True)
    assert not bool(out.cpu().any()) and not bool(mask.cpu().any())
    raises_like(A.native_dropout, [torch.randn(4, 4).long(), 0.5, True])
    m = torch.rand(4, 4) > 0.5
    g = torch.randn(4, 4)
    close(A.native_dropout_backward(foo(g), foo(m), 2.0), A.native_dropout_backward(g, m, 2.0))
    close(A.native_dropout_backward(foo(g), foo(m.float()), 2.0), A.native_dropout_backward(g, m.float(), 2.0))


def test_dropout_module_in_training_loop():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.25), nn.Linear(16, 2)).to("foo")
    x = foo(torch.randn(5, 8))
    model(x).sum().backward()
    assert model[0].weight.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_bernoulli(dtype):
    t = torch.empty(20000, dtype=dtype, device="foo")
    torch.manual_seed(5)
    t.bernoulli_(0.25)
    v = t.cpu().double()
    assert set(v.unique().tolist()) <= {0.0, 1.0}
    assert abs(v.mean().item() - 0.25) < 0.02
    torch.manual_seed(5)
    u = torch.empty(20000, dtype=dtype, device="foo").bernoulli_(0.25)
    assert torch.equal(t.cpu(), u.cpu())


def test_bernoulli_tensor_generator_and_bad_input():
    p = foo(torch.tensor([0.0, 1.0, 0.5]).repeat(1000))
    r = torch.bernoulli(p).cpu().view(1000, 3)
    assert not r[:, 0].any() and r[:, 1].all() and 0.4 < r[:, 2].mean() < 0.6
    g1 = torch.Generator(device="foo").manual_seed(9)
    g2 = torch.Generator(device="foo").manual_seed(9)
    a = torch.empty(100, device="foo").bernoulli_(0.5, generator=g1)
    b = torch.empty(100, device="foo").bernoulli_(0.5, generator=g2)
    assert torch.equal(a.cpu(), b.cpu())
    c = torch.empty(100, device="foo").bernoulli_(0.5, generator=g1)
    assert not torch.equal(a.cpu(), c.cpu())  # the generator advanced
    d = torch.empty(2, 50, device="foo").bernoulli_(foo(torch.full((50,), 0.5)))
    assert d.shape == (2, 50)
    assert torch.bernoulli(foo(torch.rand(3, 3)), 0.5).shape == (3, 3)
    out = torch.empty(0, device="foo")
    torch.bernoulli(foo(torch.rand(4)), out=out)
    assert out.shape == (4,)
    raises_like(lambda t: t.bernoulli_(1.5), [torch.empty(3)])
    raises_like(lambda t, p: t.bernoulli_(p), [torch.empty(3), torch.tensor([0.5, 2.0, 0.1])])
    raises_like(lambda t, p: t.bernoulli_(p), [torch.empty(3), torch.tensor([1, 0, 1])])


# ---------------------------------------------------------------------------
# models: no fallback at all
# ---------------------------------------------------------------------------


def test_cnn_step_is_native():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(4, 3),
    ).to("foo")
    x = foo(torch.randn(4, 3, 8, 8))
    y = foo(torch.randint(0, 3, (4,)))
    F.cross_entropy(model(x), y).backward()
    model.eval()
    model(x)
    assert model[1].num_batches_tracked.item() == 1


def test_layer_norm_dropout_block_is_native():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Dropout(0.1), nn.Linear(8, 2)).to("foo")
    x = foo(torch.randn(3, 5, 8))
    model(x).sum().backward()


def test_composite_out_forms_stay_native():
    # These out= overloads are ATen composites of the functional kernels above.
    x = make_tensor((3, 4, 6), torch.float32, seed=80)
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    outs = [torch.empty(0, device="foo") for _ in range(3)]
    A.native_layer_norm.out(foo(x), [6], foo(w), foo(b), 1e-5, out0=outs[0], out1=outs[1], out2=outs[2])
    close(tuple(outs), A.native_layer_norm(x, [6], w, b, 1e-5))
    xp = torch.randn(2, 3, 7, 9)
    out = torch.empty(0, device="foo")
    A._adaptive_avg_pool2d.out(foo(xp), [3, 4], out=out)
    close(out, A._adaptive_avg_pool2d(xp, [3, 4]))
    g, m = torch.randn(4, 5), torch.rand(4, 5) > 0.5
    out = torch.empty(0, device="foo")
    A.native_dropout_backward.out(foo(g), foo(m), 2.0, out=out)
    close(out, A.native_dropout_backward(g, m, 2.0))


def test_large_inputs_take_the_parallel_path():
    # Above FOO_RS_PAR_MIN (256K elements) the kernels split rows / channels /
    # planes over threads.
    x = make_tensor((8, 16, 48, 48), torch.float32, seed=90)
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    close(
        A.native_batch_norm(foo(x), foo(w), foo(b), None, None, True, 0.1, 1e-5),
        A.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5),
        rtol=1e-4,
        atol=1e-4,
    )
    close(F.max_pool2d(foo(x), 3, 2, 1, return_indices=True), F.max_pool2d(x, 3, 2, 1, return_indices=True))
    close(F.avg_pool2d(foo(x), 3, 2, 1), F.avg_pool2d(x, 3, 2, 1))
    xl = make_tensor((600, 512), torch.float32, seed=91)
    close(F.layer_norm(foo(xl), (512,)), F.layer_norm(xl, (512,)), rtol=1e-4, atol=1e-4)


def test_tensors_on_two_foo_devices_raise():
    if torch.foo.device_count() < 2:
        pytest.skip("needs two foo devices")
    x = torch.randn(2, 3, 4, 4, device="foo:0")
    w = torch.ones(3, device="foo:1")
    with pytest.raises(RuntimeError, match="same device"):
        A.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="same device"):
        F.layer_norm(torch.randn(3, 4, device="foo:0"), (4,), torch.ones(4, device="foo:1"))


def test_pooling_parameter_errors_match_cpu():
    x = torch.randn(2, 3, 7, 7)
    raises_like(F.max_pool2d, [x, 3, 1, -1])
    raises_like(F.max_pool2d, [x, 3, 1, 0, 0])
    raises_like(F.max_pool2d, [x, 3, 0])
    raises_like(F.max_pool2d, [x, 3, -1])
    raises_like(F.avg_pool2d, [x, 3, 1, -1])
    raises_like(F.avg_pool2d, [x, 3, 0])
    raises_like(
        A.max_pool2d_with_indices_backward,
        [torch.ones(2, 3, 9, 9), x, [2], [2], [0], [1], False, torch.zeros(2, 3, 3, 3, dtype=torch.long)],
    )


def test_inconsistent_arguments_raise_where_cpu_corrupts_memory():
    # CPU writes out of bounds (or reads past its buffers) for these; foo raises.
    x = foo(torch.randn(2, 3, 7, 7))
    bad_idx = torch.full((2, 3, 3, 3), 100, dtype=torch.long, device="foo")
    with pytest.raises(RuntimeError, match="foo"):
        A.max_pool2d_with_indices_backward(torch.ones(2, 3, 3, 3, device="foo"), x, [2], [2], [0], [1], False, bad_idx)
    with pytest.raises(RuntimeError, match="foo"):
        A._adaptive_avg_pool2d_backward(torch.ones(2, 4, 3, 3, device="foo"), x)
    with pytest.raises(RuntimeError, match="foo"):
        A.native_batch_norm_backward(
            torch.ones(2, 3, 7, 6, device="foo"),
            x,
            None,
            None,
            None,
            torch.zeros(3, device="foo"),
            torch.ones(3, device="foo"),
            True,
            1e-5,
            [True, True, True],
        )
    with pytest.raises(RuntimeError, match="foo"):
        A.native_layer_norm_backward(
            torch.ones_like(x),
            x,
            [7],
            torch.zeros(3, device="foo"),
            torch.zeros(3, device="foo"),
            None,
            None,
            [True, False, False],
        )
    with pytest.raises(RuntimeError, match="foo"):
        torch.empty(3, device="foo").bernoulli_(torch.full((4,), 0.5, device="foo"))


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_nonfinite_rows_match_cpu(dtype):
    """A row holding inf has a NaN variance: CPU keeps it NaN (std::max(var, 0)), so its rstd and outputs are NaN;
    a NaN row likewise; the finite rows are unaffected."""
    x = make_tensor((3, 20), dtype, seed=10)
    x[0, 3] = float("inf")
    x[1, 7] = float("nan")
    w, b = make_tensor((20,), dtype, seed=11), make_tensor((20,), dtype, seed=12)
    close(A.native_layer_norm(foo(x), [20], foo(w), foo(b), 1e-5), A.native_layer_norm(x, [20], w, b, 1e-5))
