"""The torch.special functions foo computes itself (Bessel, Airy, erfcx,
log_ndtr, ndtri, the orthogonal polynomials), i0, nextafter and the angle
of real numbers run natively on foo (CPU fallback off) and agree with torch
CPU: values (edge values included: 0, -0, negative, large, inf, NaN, the
branch points of the approximations), dtypes (integers promote to float),
refusals (CPU's exception type where it has no kernel for a dtype),
non-contiguous, zero-size, out= and in-place forms, and gradients."""

from __future__ import annotations

import pytest
import torch

import foo_rs
from foo_testing import make_tensor

FLOATS = [d for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if d in foo_rs.SUPPORTED_DTYPES]
DTYPES = FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool]

pytestmark = pytest.mark.usefixtures("no_fallback")

S = torch.special
UNARY = [
    torch.i0,
    S.i0,
    S.i0e,
    S.i1,
    S.i1e,
    S.erfcx,
    S.log_ndtr,
    S.ndtri,
    S.airy_ai,
    S.bessel_j0,
    S.bessel_j1,
    S.bessel_y0,
    S.bessel_y1,
    S.modified_bessel_i0,
    S.modified_bessel_i1,
    S.modified_bessel_k0,
    S.modified_bessel_k1,
    S.scaled_modified_bessel_k0,
    S.scaled_modified_bessel_k1,
    S.spherical_bessel_j0,
    torch.angle,
]
POLYNOMIALS = [
    S.chebyshev_polynomial_t,
    S.chebyshev_polynomial_u,
    S.chebyshev_polynomial_v,
    S.chebyshev_polynomial_w,
    S.shifted_chebyshev_polynomial_t,
    S.shifted_chebyshev_polynomial_u,
    S.shifted_chebyshev_polynomial_v,
    S.shifted_chebyshev_polynomial_w,
    S.hermite_polynomial_h,
    S.hermite_polynomial_he,
    S.laguerre_polynomial_l,
    S.legendre_polynomial_p,
]


def foo(t):
    return t.detach().to("foo") if isinstance(t, torch.Tensor) else t


def close(actual, expected, **kw):
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.dtype in (torch.bfloat16, torch.float16):
        kw = {"rtol": 1.6e-2, "atol": 1e-2}
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
    close(fn(*[foo(a) for a in args], **{k: foo(v) for k, v in kwargs.items()}), expected)


def edge_values(dtype):
    """Zeros, signs, the approximations' branch points (2, 5, 8, 2.09,
    8.32, 26.7, 50, 103.9), large, infinite and NaN."""
    v = [0.0, -0.0, 1e-6, -1e-6, 0.5, -0.5, 1.0, -1.0, 2.0, 2.09, -2.09, 5.0, -5.0, 8.0, 8.5, -8.5]
    v += [8.33, 12.0, -12.0, 25.5, -26.0, -27.0, 60.0, 104.0, 1e8, float("inf"), -float("inf"), float("nan")]
    return torch.tensor(v).to(dtype)


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unary_values(fn, dtype):
    x = make_tensor((7, 9), dtype, seed=3)
    if dtype.is_floating_point:
        x = x * 4  # over several branches of the approximations
        same(fn, edge_values(dtype))
    same(fn, x)
    same(fn, x.t())  # non-contiguous
    same(fn, x[:, :0])  # zero-size
    same(fn, torch.tensor(2, dtype=dtype))  # 0-dim


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ndtri_over_its_domain(dtype):
    p = torch.cat([torch.rand(500, dtype=dtype), torch.tensor([0.0, 1.0, 1e-20, 1 - 1e-7, 0.135, 0.865, -0.1, 1.1])])
    p = p.to(dtype)
    same(S.ndtri, p)
    same(S.log_ndtr, S.ndtri(p[:500]) * 3)


@pytest.mark.parametrize("fn", [S.i0e, S.bessel_j0, torch.angle, torch.i0], ids=lambda f: f.__name__)
def test_unary_out_and_inplace(fn):
    x = make_tensor((4, 5), torch.float32, seed=1) * 5
    out = torch.empty(0, device="foo")
    r = fn(foo(x), out=out)
    assert r is out
    close(out, fn(x))
    # out= of another float dtype: computed in the input's type (float32
    # precision), stored in out's
    out64 = torch.empty(4, 5, dtype=torch.float64, device="foo")
    fn(foo(x), out=out64)
    close(out64, fn(x, out=torch.empty(4, 5, dtype=torch.float64)), rtol=1.3e-6, atol=1e-5)
    # an integer out= cannot hold the float result: CPU's exception
    same(lambda t: fn(t, out=torch.empty(4, 5, dtype=torch.int64, device=t.device)), x)
    y = foo(x)
    expected = x.clone().i0_()
    assert y.i0_() is y
    close(y, expected)
    same(lambda t: t.i0_(), torch.arange(4))  # an integer tensor cannot hold i0 in place


@pytest.mark.parametrize("fn", POLYNOMIALS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_polynomial_values(fn, dtype):
    """x inside and outside [-1, 1] and at the special points (0, 1, -1),
    n negative, small, non-integer, past the closed-form switch (6, 8), large
    (past the Hermite limits 128 and 512), infinite and NaN: the recurrences
    and closed forms CPU evaluates, with its rounding."""
    g = torch.Generator().manual_seed(7)
    x = torch.cat(
        [
            torch.rand(40, generator=g) * 2 - 1,
            torch.randn(30, generator=g) * 3,
            torch.tensor([0.0, 1.0, -1.0, 0.5, 2.0]),
        ]
    )
    x = torch.cat([x, torch.tensor([float("nan"), float("inf"), -float("inf")])]).to(dtype)
    n = torch.tensor([-3.0, -1, 0, 1, 2, 3, 4.7, 5, 6, 7, 8, 9, 10, 15, 40, 129, 513, float("inf"), float("nan")])
    n = n.to(dtype)
    same(fn, x[:, None], n[None, :])
    same(fn, x[:, None].expand(-1, 19).t(), n[:, None])  # non-contiguous
    same(fn, x, 3)  # n a Python number
    same(fn, 0.25, n)  # x a Python number
    same(fn, x[:0], n[:1])


@pytest.mark.parametrize("fn", POLYNOMIALS[::3] + [S.hermite_polynomial_h], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.bfloat16, torch.bool], ids=str)
def test_polynomial_dtypes(fn, dtype):
    """Integer x and n promote to float (CPU's kernel); 16-bit floats are
    refused as on CPU."""
    x = make_tensor((5, 6), dtype, seed=2)
    n = torch.arange(6).to(dtype)
    same(fn, x, n)
    same(fn, x, 4)
    same(fn, x.float(), torch.arange(6))  # float x, integer n


def test_polynomial_out_and_broadcast():
    x = torch.linspace(-1.5, 1.5, 12).reshape(3, 4)
    n = torch.tensor([0.0, 3.0, 9.0, 12.0])
    out = torch.empty(0, device="foo")
    r = S.chebyshev_polynomial_u(foo(x), foo(n), out=out)
    assert r is out
    close(out, S.chebyshev_polynomial_u(x, n))
    same(S.legendre_polynomial_p, x, n[:3])  # shapes that do not broadcast: CPU's RuntimeError
    same(lambda a, b: S.laguerre_polynomial_l(a, b, out=torch.empty(3, 4, dtype=torch.int64, device=a.device)), x, n)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_nextafter(dtype):
    a = make_tensor((6, 7), dtype, seed=4)
    b = make_tensor((6, 7), dtype, seed=5)
    if dtype.is_floating_point:
        b[::2] = a[::2]  # equal: b itself
        a[0, :3] = torch.tensor([0.0, -0.0, float("nan")])
        b[0, :3] = torch.tensor([-1.0, 1.0, 1.0])
        a[1, :3] = torch.tensor([float("inf"), -float("inf"), 1.0])
        b[1, :3] = torch.tensor([0.0, 0.0, float("inf")])
    for args in ((a, b), (a.t(), b.t()), (a, b[:1]), (a[:0], b[:0])):
        expected = torch.nextafter(*args) if dtype.is_floating_point else None
        if expected is None:
            same(torch.nextafter, *args)
            continue
        actual = torch.nextafter(*[foo(t) for t in args])
        assert actual.dtype == expected.dtype
        assert actual.stride() == expected.stride()
        assert torch.equal(actual.cpu().nan_to_num(), expected.nan_to_num()), "nextafter is exact"
    if dtype.is_floating_point:
        y = foo(a)
        assert y.nextafter_(foo(b)) is y
        assert torch.equal(y.cpu().nan_to_num(), torch.nextafter(a, b).nan_to_num())


@pytest.mark.parametrize(
    "fn, grad_dtypes",
    [
        (torch.i0, None),
        (S.i0e, None),
        (S.i1, None),
        (S.i1e, None),
        (S.erfcx, None),
        (S.log_ndtr, None),
        (S.ndtri, None),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_gradients(fn, grad_dtypes):
    """The backward formulas (i0 -> i1, i0e -> i1e and i0e, i1 -> i0, ...) run
    natively and match CPU's gradients."""
    x = make_tensor((4, 5), torch.float64, seed=6) * 3
    if fn is S.ndtri:
        x = torch.rand(4, 5, dtype=torch.float64) * 0.98 + 0.01
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    fn(xc).sum().backward()
    fn(xf).sum().backward()
    close(xf.grad, xc.grad)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_frexp(dtype):
    x = make_tensor((5, 6), dtype, seed=8)
    if dtype.is_floating_point:
        x = x * 1e3
        x[0] = edge_values(dtype)[:6]
        x[1, :3] = torch.tensor([1e-40, 1e-45, -3e-39]).to(dtype)  # subnormal in float32
    for t in (x, x.t(), x[:0], x[0, 0]):
        try:
            expected = torch.frexp(t)
        except RuntimeError:  # integers: CPU's refusal
            with pytest.raises(RuntimeError, match="floating-point"):
                torch.frexp(foo(t))
            continue
        actual = torch.frexp(foo(t))
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype and a.stride() == e.stride()
            assert torch.equal(a.cpu().nan_to_num(), e.nan_to_num()), "frexp is exact"


def test_frexp_out():
    x = make_tensor((3, 4), torch.float32, seed=9) * 10
    m = torch.empty(0, device="foo")
    e = torch.empty(0, dtype=torch.int32, device="foo")
    r = torch.frexp(foo(x), out=(m, e))
    assert r[0] is m and r[1] is e
    em, ee = torch.frexp(x)
    assert torch.equal(m.cpu(), em) and torch.equal(e.cpu(), ee)
    # the dtypes CPU requires (mantissa: the input's, exponent: int32)
    for md, xd in ((torch.float64, torch.int32), (torch.float32, torch.int64)):
        with pytest.raises(RuntimeError, match="torch.frexp\\(\\) expects"):
            torch.frexp(foo(x), out=(torch.empty(0, dtype=md, device="foo"), torch.empty(0, dtype=xd, device="foo")))


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
def test_igamma(fn, dtype):
    """Every regime of ATen's evaluation (power series, continued fraction,
    the small-x series, Temme's expansion for large a near x) and the
    boundary values (a or x zero, negative, infinite, NaN)."""
    g = torch.Generator().manual_seed(11)
    a = torch.cat([torch.rand(30, generator=g) * 5, torch.rand(20, generator=g) * 300, torch.tensor([25.0, 250.0])])
    x = torch.cat([torch.rand(30, generator=g) * 5, torch.rand(20, generator=g) * 300, torch.tensor([24.0, 260.0])])
    edge = torch.tensor([0.0, 1.0, -1.0, 1e-3, float("inf"), float("nan")])
    a, x = torch.cat([a, edge]).to(dtype), torch.cat([x, edge]).to(dtype)
    same(fn, a[:, None], x[None, :])
    same(fn, a[:, None].expand(-1, 3).t(), x[:3, None])  # non-contiguous
    same(fn, a[:0], x[:0])
    if dtype.is_floating_point:
        y = foo(a)
        expected = getattr(a.clone(), fn.__name__ + "_")(x)
        assert getattr(y, fn.__name__ + "_")(foo(x)) is y
        close(y, expected)
        out = torch.empty(0, dtype=dtype, device="foo")
        assert fn(foo(a), foo(x), out=out) is out
        close(out, fn(a, x))


def test_igamma_gradient():
    a = torch.rand(3, 4, dtype=torch.float64) * 3 + 0.5
    x = torch.rand(3, 4, dtype=torch.float64) * 3 + 0.1
    xc = x.clone().requires_grad_()
    xf = foo(x).requires_grad_()
    (torch.igamma(a, xc) + torch.igammac(a, xc)).sum().backward()
    (torch.igamma(foo(a), xf) + torch.igammac(foo(a), xf)).sum().backward()
    close(xf.grad, xc.grad)
