"""Special functions (polygamma, zeta, entr, sinc, xlog1py), logaddexp(2),
heaviside, signbit, the shrink and log-sigmoid activations with their
backward, and equal run natively on foo (CPU fallback off) and agree with
torch CPU: values, dtypes, shapes, non-contiguous and zero-size inputs,
out= and in-place forms, gradients, and exception types on bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_testing import make_tensor

A = torch.ops.aten
FLOATS = [d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if d in foo_rs.SUPPORTED_DTYPES]
INTS = [torch.int64, torch.int32, torch.uint8]

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
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        with pytest.raises(type(e)):
            fn(*[foo(a) for a in args], **{k: foo(v) for k, v in kwargs.items()})
        return
    actual = fn(*[foo(a) for a in args], **{k: foo(v) for k, v in kwargs.items()})
    close(actual, expected)


def noncontig(t):
    return t.transpose(0, 1) if t.dim() >= 2 else t


def special_values(dtype):
    return torch.tensor(
        [0.0, -0.0, 1.0, -1.0, -2.0, -2.5, 0.5, 1e-3, 30.0, float("inf"), -float("inf"), float("nan")]
    ).to(dtype)


# ---- unary special functions --------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 6])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
def test_polygamma(n, dtype):
    x = make_tensor((5, 7), dtype, seed=n) if dtype != torch.bool else torch.tensor([True, False])
    if dtype.is_floating_point:
        x = x / 3  # near the poles too
        same(torch.polygamma, n, special_values(dtype))
        same(torch.polygamma, n, noncontig(x))
    same(torch.polygamma, n, x)
    same(torch.special.polygamma, n, x)
    same(lambda t: t.polygamma(n), x)


def test_polygamma_inplace_out_and_bad_n():
    x = make_tensor((4, 6), torch.float32) / 4
    expected = x.clone().polygamma_(2)
    y = foo(x)
    r = y.polygamma_(2)
    assert r is y
    close(y, expected)
    out = torch.empty(0, device="foo")
    torch.polygamma(3, foo(x), out=out)
    close(out, torch.polygamma(3, x))
    same(torch.polygamma, -1, x)
    same(torch.polygamma, 2, torch.empty(0, 3))
    # an integer in-place result cannot hold polygamma's float result
    same(lambda t: t.polygamma_(1), torch.arange(4))


def test_polygamma_gradient():
    x = (make_tensor((3, 4), torch.float64) / 5).abs() + 0.1
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    torch.polygamma(1, xc).sum().backward()
    torch.polygamma(1, xf).sum().backward()
    close(xf.grad, xc.grad)


def test_mvlgamma():
    x = make_tensor((3, 4), torch.float32).abs() + 3
    for p in (1, 3, 5):
        same(torch.mvlgamma, x, p)
    same(torch.mvlgamma, torch.zeros(3), 3)  # below the domain: CPU's RuntimeError


@pytest.mark.parametrize("fn", [torch.special.entr, torch.sinc, torch.special.sinc])
@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_entr_sinc(fn, dtype):
    x = make_tensor((6, 5), dtype)
    same(fn, x)
    same(fn, noncontig(x))
    same(fn, x[:0])
    if dtype.is_floating_point:
        same(fn, special_values(dtype))
        same(fn, x / 10)


def test_sinc_inplace_and_out():
    x = make_tensor((6, 5), torch.float32) / 7
    y = foo(x)
    y.sinc_()
    close(y, torch.sinc(x))
    out = torch.empty(30, device="foo")[::2]  # wrong shape, resized
    with pytest.warns(UserWarning):
        torch.special.entr(foo(x.abs()), out=out.resize_(3))
    close(out, torch.special.entr(x.abs()))
    same(lambda t: t.sinc_(), torch.arange(3))  # int in-place: CPU refuses the float result


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.int8, torch.bool])
def test_signbit(dtype):
    x = make_tensor((6, 5), dtype)
    same(torch.signbit, x)
    same(torch.signbit, noncontig(x))
    if dtype.is_floating_point:
        same(torch.signbit, special_values(dtype))
        same(torch.signbit, -special_values(dtype))
    out = torch.empty(x.shape, dtype=torch.bool, device="foo")
    torch.signbit(foo(x), out=out)
    close(out, torch.signbit(x))


# ---- binary ------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_logaddexp(fn, dtype):
    a, b = make_tensor((4, 5), dtype, seed=1), make_tensor((5,), dtype, seed=2)
    same(fn, a, b)
    same(fn, noncontig(make_tensor((5, 4), dtype)), a)
    same(fn, a[:0], b)
    if dtype.is_floating_point:
        s = special_values(dtype)
        same(fn, s, s)
        same(fn, s, s.flip(0))
        same(fn, a, torch.tensor(2.5, dtype=torch.float64))  # a 0-dim CPU operand
    out = torch.empty((4, 5), dtype=a.dtype, device="foo")
    if dtype.is_floating_point:
        fn(foo(a), foo(b), out=out)
        close(out, fn(a, b))


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_heaviside(dtype):
    x = make_tensor((4, 5), dtype)
    x[0] = 0
    v = make_tensor((5,), dtype, seed=3)
    same(torch.heaviside, x, v)
    same(torch.heaviside, noncontig(x.reshape(5, 4)), v[:4])
    if dtype.is_floating_point:
        same(torch.heaviside, special_values(dtype), special_values(dtype).flip(0))
    y = foo(x)
    y.heaviside_(foo(v))
    close(y, torch.heaviside(x, v))
    same(torch.heaviside, x, v.to(torch.float64))  # different dtypes: CPU refuses


@pytest.mark.parametrize("fn", [torch.special.xlog1py, torch.special.zeta])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_xlog1py_zeta(fn, dtype):
    a = make_tensor((4, 5), dtype, seed=1)
    b = make_tensor((5,), dtype, seed=2)
    if fn is torch.special.zeta and dtype.is_floating_point:
        a = a.abs() / 2 + 1  # zeta's x > 1; q of either sign
        b = b / 3
    same(fn, a, b)
    same(fn, noncontig(a.reshape(5, 4)), b[:4])
    same(fn, a, 2)
    same(fn, 3, b)
    same(fn, a[:0], b)
    if dtype.is_floating_point:
        s = special_values(dtype)
        same(fn, s, s.flip(0))
        same(fn, s, s)
        same(lambda x, y, out: fn(x, y, out=out), a, b, torch.empty((4, 5), dtype=dtype))


# ---- activations -------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [F.hardshrink, F.softshrink, F.logsigmoid])
@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_and_gradient(fn, dtype):
    x = make_tensor((6, 5), dtype) / 10
    kw = {} if fn is F.logsigmoid else {"lambd": 0.3}
    same(fn, x, **kw)
    same(fn, noncontig(x), **kw)
    same(fn, x[:0], **kw)
    same(fn, special_values(dtype), **kw)
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    g = make_tensor((6, 5), dtype, seed=9)
    fn(xc, **kw).backward(g)
    fn(xf, **kw).backward(foo(g))
    close(xf.grad, xc.grad)


def test_activation_bad_input_and_out():
    same(F.logsigmoid, torch.arange(4))
    same(F.hardshrink, torch.arange(4))
    same(F.softshrink, torch.randn(4), -1.0)  # negative lambda
    x = make_tensor((3, 4), torch.float32) / 5
    out = torch.empty((3, 4), device="foo")
    A.hardshrink.out(foo(x), 0.2, out=out)
    close(out, F.hardshrink(x, 0.2))
    output, buffer = torch.empty(0, device="foo"), torch.empty(0, device="foo")
    A.log_sigmoid_forward.output(foo(x), output=output, buffer=buffer)
    close((output, buffer), A.log_sigmoid_forward(x))
    same(A.log_sigmoid_forward, x)
    g = make_tensor((3, 4), torch.float32, seed=4)
    _, buf = A.log_sigmoid_forward(x)
    same(A.log_sigmoid_backward, g, x, buf)
    same(A.softshrink_backward, g, x, 0.4)
    same(A.hardshrink_backward, g, noncontig(x.reshape(4, 3)).contiguous().t(), 0.4)


# ---- equal -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_equal(dtype):
    x = make_tensor((4, 5), dtype)
    y = x.clone()
    y[2, 3] = 0 if dtype != torch.bool else not y[2, 3]
    for a, b in [(x, x), (x, x.clone()), (x, y), (x, x[:3]), (x, x.t().contiguous().t()), (x[:0], x[:0])]:
        assert torch.equal(foo(a), foo(b)) is torch.equal(a, b)
    assert torch.equal(foo(x), foo(x.to(torch.float64))) is torch.equal(x, x.to(torch.float64))
    if dtype.is_floating_point:
        n = torch.tensor([1.0, float("nan")], dtype=dtype)
        assert torch.equal(foo(n), foo(n)) is torch.equal(n, n)
    with pytest.raises(RuntimeError):
        torch.equal(foo(x), x)


# ---- cross -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_linalg_cross(dtype):
    a, b = make_tensor((4, 3), dtype, seed=1), make_tensor((4, 3), dtype, seed=2)
    same(torch.linalg.cross, a, b)
    same(torch.cross, a, b, dim=1)
    same(torch.linalg.cross, a.t(), b.t(), dim=0)  # non-contiguous
    same(torch.linalg.cross, a[:1], b)  # broadcast
    same(torch.linalg.cross, a[:0], b[:0])
    out = torch.empty(0, dtype=dtype, device="foo")
    torch.linalg.cross(foo(a), foo(b), out=out)
    close(out, torch.linalg.cross(a, b))
    x = foo(a)
    torch.linalg.cross(x, foo(b), out=x)  # out aliases an input
    close(x, torch.linalg.cross(a, b))


def test_linalg_cross_bad_input():
    same(torch.linalg.cross, torch.ones(3), torch.ones(2, 3))
    same(torch.linalg.cross, torch.ones(2, 4), torch.ones(2, 4))
    same(torch.linalg.cross, torch.ones(2, 3), torch.ones(2, 3), dim=2)
    same(torch.linalg.cross, torch.ones(2, 3), torch.ones(5, 3))
    same(torch.linalg.cross, torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64))
    same(torch.linalg.cross, torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(RuntimeError):
        torch.linalg.cross(
            torch.ones(2, 3, device="foo"),
            torch.ones(2, 3, device="foo"),
            out=torch.empty(2, 3, dtype=torch.float64, device="foo"),
        )


# ---- unfold (a view) -----------------------------------------------------------------------


def test_tensor_unfold_is_a_view():
    x = make_tensor((5, 8), torch.float32)
    for dim, size, step in [(0, 2, 1), (1, 3, 2), (-1, 8, 1), (1, 1, 3)]:
        same(lambda t: t.unfold(dim, size, step), x)
        same(lambda t: t.t().unfold(dim, size, step), x)
    y = foo(x)
    u = y.unfold(1, 3, 2)
    assert u._base is y or u.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    same(lambda t: t.unfold(1, 9, 1), x)  # size too large: CPU's RuntimeError
    same(lambda t: t.unfold(1, 2, 0), x)  # step 0
    same(lambda t: t.unfold(2, 2, 1), x)  # dim out of range
    same(lambda t: t.unfold(0, 1, 1), torch.tensor(3.0))  # 0-dim


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 3, 2), (1, 2, 3), (-1, 8, 1), (1, 3, 1)])
def test_unfold_backward(dtype, dim, size, step):
    x = make_tensor((5, 8), dtype)
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    g = make_tensor(tuple(x.unfold(dim, size, step).shape), dtype, seed=5)
    xc.unfold(dim, size, step).backward(g)
    xf.unfold(dim, size, step).backward(foo(g))
    close(xf.grad, xc.grad)
    same(A.unfold_backward, g, [5, 8], dim, size, step)


def test_unfold_backward_edges():
    same(A.unfold_backward, torch.ones(1), [], 0, 1, 1)  # 0-dim input
    same(A.unfold_backward, torch.ones(0, 7, 2), [0, 8], 1, 2, 1)  # empty input
    same(A.unfold_backward, torch.ones(2, 3, 2), [2, 8], 1, 2, 0)  # step 0


# ---- reflection / replication padding --------------------------------------------------------

PAD_CASES = [
    (1, (2, 5), [1, 2]),
    (1, (3, 2, 6), [2, -1]),
    (1, (3, 2, 6), [-1, 3]),
    (2, (2, 4, 5), [1, 2, 3, 0]),
    (2, (2, 3, 4, 5), [2, 1, -1, 2]),
    (3, (2, 3, 4, 5), [1, 1, 2, 0, 1, 2]),
    (3, (1, 2, 3, 4, 5), [0, 2, 1, 1, 2, 1]),
]


@pytest.mark.parametrize("kind", ["reflection", "replication"])
@pytest.mark.parametrize("k,shape,padding", PAD_CASES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_pad(kind, k, shape, padding, dtype):
    fwd = getattr(A, f"{kind}_pad{k}d")
    x = make_tensor(shape, dtype)
    same(fwd, x, padding)
    same(fwd, x.transpose(-1, -2).contiguous().transpose(-1, -2), padding)  # non-contiguous
    if dtype.is_floating_point:
        y = fwd(x, padding)
        g = make_tensor(tuple(y.shape), dtype, seed=7)
        # CPU sums the gradients of a 16-bit input in that type, foo in
        # float32: they may differ by a rounding of the largest partial sum.
        tol = (
            {}
            if dtype in (torch.float32, torch.float64)
            else {"atol": 4 * torch.finfo(dtype).eps * 4 * float(g.abs().max())}
        )
        xc = x.clone().requires_grad_()
        xf = foo(x).requires_grad_()
        fwd(xc, padding).backward(g)
        fwd(xf, padding).backward(foo(g))
        close(xf.grad, xc.grad, **tol)
        close(getattr(A, f"{kind}_pad{k}d_backward")(foo(g), foo(x), padding), xc.grad, **tol)
    out = torch.empty(0, dtype=dtype, device="foo")
    getattr(A, f"{kind}_pad{k}d").out(foo(x), padding, out=out)
    close(out, fwd(x, padding))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_functional_pad(mode):
    x = make_tensor((2, 3, 6, 7), torch.float32)
    same(F.pad, x, (2, 3, 1, 4), mode=mode)
    same(F.pad, x[0], (2, 3), mode=mode)
    same(F.pad, x[:0], (1, 1, 1, 1), mode=mode)  # zero batch


@pytest.mark.parametrize("kind", ["reflection", "replication"])
def test_pad_bad_input(kind):
    f1 = getattr(A, f"{kind}_pad1d")
    same(f1, torch.ones(2, 3), [1])  # wrong padding length
    same(f1, torch.ones(3), [1, 1])  # wrong dimensionality
    same(f1, torch.ones(2, 0, 3), [1, 1])  # empty non-batch dim
    same(f1, torch.ones(2, 3), [3, 0])  # reflection: padding too large
    same(f1, torch.ones(2, 3), [-3, -1])  # output too small
    same(f1, torch.ones(2, 3, dtype=torch.bool), [1, 1])


# ---- max_unpool ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_unpool2d(dtype):
    x = make_tensor((2, 3, 6, 8), torch.float32)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    y = y.to(dtype)
    same(F.max_unpool2d, y, idx, 2)
    same(F.max_unpool2d, y, idx, 2, output_size=(7, 9))
    same(F.max_unpool2d, y[0], idx[0], 2)  # no batch
    same(F.max_unpool2d, y[:0], idx[:0], 2)  # zero batch
    same(F.max_unpool2d, y.transpose(2, 3), idx.transpose(2, 3), 2)  # non-contiguous
    cl = y.contiguous(memory_format=torch.channels_last)
    icl = idx.contiguous(memory_format=torch.channels_last)
    r = F.max_unpool2d(foo(cl), foo(icl), 2)
    close(r, F.max_unpool2d(cl, icl, 2))
    assert r.stride() == F.max_unpool2d(cl, icl, 2).stride()
    out = torch.empty(0, dtype=dtype, device="foo")
    A.max_unpool2d.out(foo(y), foo(idx), [6, 8], out=out)
    close(out, A.max_unpool2d(y, idx, [6, 8]))
    # 1d goes through 2d
    y1, i1 = F.max_pool1d(make_tensor((2, 3, 9), torch.float32), 3, return_indices=True)
    same(F.max_unpool1d, y1.to(dtype), i1, 3)


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_unpool_gradient(dtype):
    x = make_tensor((2, 3, 4, 6, 4), torch.float32)
    y, idx = F.max_pool3d(x, 2, return_indices=True)
    y = y.to(dtype)
    same(F.max_unpool3d, y, idx, 2)
    same(F.max_unpool3d, y, idx, 2, stride=(2, 2, 2), output_size=(5, 7, 4))
    yc = y.clone().requires_grad_()
    yf = foo(y).requires_grad_()
    g = make_tensor((2, 3, 4, 6, 4), dtype, seed=3)
    F.max_unpool3d(yc, idx, 2).backward(g)
    F.max_unpool3d(yf, foo(idx), 2).backward(foo(g))
    close(yf.grad, yc.grad)


def test_max_unpool_bad_input():
    y, idx = F.max_pool2d(make_tensor((1, 2, 4, 4), torch.float32), 2, return_indices=True)
    same(A.max_unpool2d, y, idx.int(), [4, 4])  # indices not int64
    same(A.max_unpool2d, y, idx, [4])  # output_size length
    same(A.max_unpool2d, y[0, 0], idx[0, 0], [4, 4])  # 2-d input
    same(A.max_unpool2d, y, idx[:, :1], [4, 4])  # shape mismatch
    same(A.max_unpool2d, y, idx, [2, 2])  # index out of range
    same(A.max_unpool2d, y, idx * 0 - 1, [4, 4])  # negative index
    same(A.max_unpool2d, y.bool(), idx, [4, 4])
    same(A.max_unpool2d, y.long(), idx, [4, 4])  # CPU has no integer kernel
    same(A.max_unpool3d, y[None], idx[None], [1, 4, 4], [0, 2, 2], [0, 0, 0])  # zero stride
    same(A.max_unpool3d, y[None], idx[None], [1, 4, 4], [1, 2], [0, 0, 0])


# ---- eye -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_eye(dtype):
    for args in [(0,), (1,), (4,), (3, 5), (5, 3), (0, 3), (3, 0)]:
        close(torch.eye(*args, dtype=dtype, device="foo"), torch.eye(*args, dtype=dtype))
    out = torch.empty(7, dtype=dtype, device="foo")[::2]
    torch.eye(2, 3, out=out)
    close(out, torch.eye(2, 3, dtype=dtype))
    for args in [(-1,), (2, -1)]:
        with pytest.raises(RuntimeError):
            torch.eye(*args)
        with pytest.raises(RuntimeError):
            torch.eye(*args, device="foo")


# ---- glu, prelu ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_glu_prelu_and_gradients(dtype):
    x = make_tensor((4, 6), dtype) / 5
    same(F.glu, x)
    same(F.glu, x, 0)
    same(F.glu, x.t())
    same(F.glu, x[:0])
    w = torch.tensor([0.25, -0.5, 1.5, 0.1, 2.0, -1.0], dtype=dtype)
    same(F.prelu, x, w)
    same(F.prelu, x, w[:1])
    same(F.prelu, x.t().contiguous().t(), w)
    for fn, extra in [(F.glu, ()), (F.prelu, (w,))]:
        xc = x.clone().requires_grad_()
        xf = foo(x).requires_grad_()
        ec = [e.clone().requires_grad_() for e in extra]
        ef = [foo(e).requires_grad_() for e in extra]
        yc = fn(xc, *ec)
        g = make_tensor(tuple(yc.shape), dtype, seed=8)
        yc.backward(g)
        fn(xf, *ef).backward(foo(g))
        close(xf.grad, xc.grad)
        for a, b in zip(ef, ec):
            close(a.grad, b.grad)


def test_glu_bad_input_and_out():
    same(F.glu, torch.tensor(1.0))
    same(F.glu, torch.randn(3, 5), 1)
    same(F.glu, torch.randn(3, 4), 5)
    same(F.glu, torch.arange(4))
    same(F.prelu, torch.arange(4), torch.tensor([1]))
    x = make_tensor((4, 6), torch.float32)
    out = torch.empty(0, device="foo")
    torch.ops.aten.glu.out(foo(x), 1, out=out)
    close(out, F.glu(x, 1))


# ---- logspace ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8])
def test_logspace(dtype):
    cases = [(0, 3, 7, 10.0), (-2.5, 1.3, 9, 2.0), (1, 5, 1, 10.0), (0, 1, 0, 10.0), (3, -1, 6, 1.5), (0.5, 2, 4, 3.0)]
    for start, end, steps, base in cases:
        if dtype == torch.uint8 and end < start:
            continue  # wraps to a huge exponent: CPU's float-to-uint8 cast of it is undefined
        try:
            expected = torch.logspace(start, end, steps, base=base, dtype=dtype)
        except RuntimeError:  # start or end out of the dtype's range
            with pytest.raises(RuntimeError):
                torch.logspace(start, end, steps, base=base, dtype=dtype, device="foo")
            continue
        close(torch.logspace(start, end, steps, base=base, dtype=dtype, device="foo"), expected)
    out = torch.empty(3, dtype=dtype, device="foo")
    torch.logspace(0, 2, 5, out=out)
    close(out, torch.logspace(0, 2, 5, dtype=dtype))
    with pytest.raises(RuntimeError):
        torch.logspace(0, 1, -1, device="foo")
    with pytest.raises(NotImplementedError):
        torch.logspace(0, 1, 3, dtype=torch.bool, device="foo")


# ---- nearest upsampling --------------------------------------------------------------------

UP_CASES = [
    ((2, 3, 5), {"size": 11}),
    ((2, 3, 5), {"scale_factor": 2}),
    ((2, 3, 8), {"size": 3}),
    ((1, 2, 4, 5), {"size": (7, 3)}),
    ((1, 2, 4, 5), {"scale_factor": (1.7, 0.6)}),
    ((1, 2, 3, 4, 5), {"size": (5, 4, 9)}),
    ((1, 2, 3, 4, 5), {"scale_factor": 1.5, "recompute_scale_factor": False}),
]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape,kw", UP_CASES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.uint8])
def test_upsample_nearest(mode, shape, kw, dtype):
    x = make_tensor(shape, dtype)
    same(F.interpolate, x, mode=mode, **kw)
    same(F.interpolate, x.transpose(-1, -2).contiguous().transpose(-1, -2), mode=mode, **kw)
    if len(shape) == 4:
        cl = x.contiguous(memory_format=torch.channels_last)
        r, e = F.interpolate(foo(cl), mode=mode, **kw), F.interpolate(cl, mode=mode, **kw)
        close(r, e)
        assert r.stride() == e.stride()
    same(F.interpolate, x[:0], mode=mode, **kw)
    if dtype.is_floating_point:
        tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 0.5}
        xc = x.clone().requires_grad_()
        xf = foo(x).requires_grad_()
        yc = F.interpolate(xc, mode=mode, **kw)
        g = make_tensor(tuple(yc.shape), dtype, seed=6)
        yc.backward(g)
        F.interpolate(xf, mode=mode, **kw).backward(foo(g))
        close(xf.grad, xc.grad, **tol)


def test_upsample_nearest_bad_input_and_out():
    same(A.upsample_nearest2d, torch.ones(2, 3, 4), [4, 4])  # 3-d input to 2d
    same(A.upsample_nearest1d, torch.ones(2, 3, 4), [0])  # empty output
    same(A.upsample_nearest1d, torch.ones(2, 3, 4, dtype=torch.int64), [8])  # no integer kernel but uint8
    x = make_tensor((1, 2, 3, 4), torch.float32)
    out = torch.empty(0, device="foo")
    A.upsample_nearest2d.out(foo(x), [5, 7], out=out)
    close(out, A.upsample_nearest2d(x, [5, 7]))
    g = make_tensor((1, 2, 5, 7), torch.float32)
    gi = torch.empty(0, device="foo")
    A.upsample_nearest2d_backward.grad_input(foo(g), [5, 7], [1, 2, 3, 4], grad_input=gi)
    close(gi, A.upsample_nearest2d_backward(g, [5, 7], [1, 2, 3, 4]))


# ---- linear / bilinear / trilinear upsampling -------------------------------------------------

LIN_CASES = [
    ((2, 3, 5), "linear", {"size": 11}),
    ((2, 3, 8), "linear", {"size": 3}),
    ((2, 3, 5), "linear", {"scale_factor": 2.5, "recompute_scale_factor": False}),
    ((1, 2, 4, 5), "bilinear", {"size": (7, 3)}),
    ((1, 2, 4, 5), "bilinear", {"scale_factor": (1.7, 0.6)}),
    ((1, 2, 3, 4, 5), "trilinear", {"size": (5, 4, 9)}),
    ((1, 2, 3, 4, 5), "trilinear", {"size": (1, 4, 2)}),
]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape,mode,kw", LIN_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_upsample_linear(align_corners, shape, mode, kw, dtype):
    kw = dict(kw, mode=mode, align_corners=align_corners)
    x = make_tensor(shape, dtype) / 8
    if len(shape) == 4:
        cl = x.contiguous(memory_format=torch.channels_last)
        r, e = F.interpolate(foo(cl), **kw), F.interpolate(cl, **kw)
        close(r, e)
        assert r.stride() == e.stride()
    same(F.interpolate, x[:0], **kw)
    # CPU rounds some 16-bit intermediates (per dim) where foo rounds once:
    # the conformance sweep's 16-bit tolerance.
    if dtype in (torch.bfloat16, torch.float16):
        close(F.interpolate(foo(x), **kw), F.interpolate(x, **kw), rtol=1.6e-2, atol=2**-4)
    else:
        same(F.interpolate, x, **kw)
        same(F.interpolate, x.transpose(-1, -2).contiguous().transpose(-1, -2), **kw)  # non-contiguous
    tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 0.5}
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    yc = F.interpolate(xc, **kw)
    g = make_tensor(tuple(yc.shape), dtype, seed=6)
    yc.backward(g)
    F.interpolate(xf, **kw).backward(foo(g))
    close(xf.grad, xc.grad, **tol)


def test_upsample_linear_bad_input_and_out():
    same(A.upsample_bilinear2d, torch.ones(2, 3, 4), [4, 4], False)  # 3-d input to 2d
    same(A.upsample_linear1d, torch.ones(2, 3, 4), [0], False)  # empty output
    same(A.upsample_linear1d, torch.ones(2, 3, 4, dtype=torch.int64), [8], False)  # floats only
    x = make_tensor((1, 2, 3, 4), torch.float32)
    out = torch.empty(0, device="foo")
    A.upsample_bilinear2d.out(foo(x), [5, 7], True, out=out)
    close(out, A.upsample_bilinear2d(x, [5, 7], True))
    g = make_tensor((1, 2, 5, 7), torch.float32)
    gi = torch.empty(0, device="foo")
    A.upsample_bilinear2d_backward.grad_input(foo(g), [5, 7], [1, 2, 3, 4], False, grad_input=gi)
    close(gi, A.upsample_bilinear2d_backward(g, [5, 7], [1, 2, 3, 4], False))


# ---- adaptive_avg_pool3d ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,size", [((2, 3, 5, 6, 7), (2, 3, 4)), ((3, 4, 4, 9), (4, 1, 5)), ((1, 2, 3, 4, 5), (6, 4, 2))]
)
@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_avg_pool3d(shape, size, dtype):
    x = make_tensor(shape, dtype) / 8
    same(F.adaptive_avg_pool3d, x, size)
    same(F.adaptive_avg_pool3d, x.transpose(-1, -2).contiguous().transpose(-1, -2), size)
    same(F.adaptive_avg_pool3d, x[:0] if len(shape) == 5 else x, size)
    if len(shape) == 5:
        cl = x.contiguous(memory_format=torch.channels_last_3d)
        r, e = F.adaptive_avg_pool3d(foo(cl), size), F.adaptive_avg_pool3d(cl, size)
        close(r, e)
        assert r.stride() == e.stride()
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    yc = F.adaptive_avg_pool3d(xc, size)
    g = make_tensor(tuple(yc.shape), dtype, seed=6)
    yc.backward(g)
    F.adaptive_avg_pool3d(xf, size).backward(foo(g))
    # CPU accumulates a 16-bit gradient in that type, foo in float32.
    tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 2**-4}
    close(xf.grad, xc.grad, **tol)


def test_adaptive_avg_pool3d_bad_input_and_out():
    same(F.adaptive_avg_pool3d, torch.ones(2, 3, 4), (1, 1, 1))
    same(F.adaptive_avg_pool3d, torch.ones(2, 0, 4, 4, 4), (1, 1, 1))
    same(F.adaptive_avg_pool3d, torch.ones(2, 3, 4, 4, 4, dtype=torch.int64), (1, 1, 1))
    x = make_tensor((2, 3, 4, 5, 6), torch.float32)
    out = torch.empty(0, device="foo")
    A.adaptive_avg_pool3d.out(foo(x), [2, 2, 3], out=out)
    close(out, F.adaptive_avg_pool3d(x, (2, 2, 3)))


# ---- rrelu ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_rrelu(dtype):
    x = make_tensor((6, 7), dtype)
    x[0, 0] = float("nan")
    same(F.rrelu, x)  # eval: leaky_relu with the mean slope
    same(F.rrelu, x.t(), 0.2, 0.4)
    # training: random slopes in [lower, upper] where x <= 0, as CPU draws them
    xf = foo(x).requires_grad_()
    y = F.rrelu(xf, 0.1, 0.3, training=True)
    assert y.device.type == "foo" and y.dtype == dtype and y.shape == x.shape
    yc, xs = y.detach().cpu(), x.to(y.dtype)
    pos = ~(xs <= 0)
    torch.testing.assert_close(yc[pos], xs[pos], equal_nan=True)
    ratio = (yc[~pos] / xs[~pos]).float()
    ratio = ratio[xs[~pos] != 0]
    assert bool(((ratio >= 0.1 - 1e-2) & (ratio <= 0.3 + 1e-2)).all()), ratio
    g = torch.ones_like(x)
    y.backward(foo(g))
    gc = xf.grad.cpu()
    assert bool((gc[pos] == 1).all())
    assert bool(((gc[~pos] >= 0.099) & (gc[~pos] <= 0.301)).all())
    # in place, and a bad range
    z = foo(x)
    F.rrelu(z, inplace=True)
    close(z, F.rrelu(x))
    same(lambda t: F.rrelu(t, 0.5, 0.1, training=True), x)
