"""complex64/complex128 ops computed natively on foo (issue #14): pointwise
math in Rust (rust/src/kernels/elementwise/complex.rs), the element-moving
kernels (cat, flip, index*, scatter, gather, masked_*, tril/triu, where),
products through gemm's complex kernels, and reductions over the real
kernels; each compared with torch CPU, with the CPU fallback switched off."""

import pytest
import torch

import foo_rs

CDTYPES = [torch.complex64, torch.complex128]


def crandn(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


@pytest.fixture
def native():
    """No CPU fallback, and nothing fell back."""
    foo_rs.reset_fallback_stats()
    with foo_rs.fallback_disabled():
        yield
    assert foo_rs.fallback_stats() == {}


def close(foo_result, cpu_result, **kw):
    if isinstance(cpu_result, (tuple, list)):
        for a, b in zip(foo_result, cpu_result):
            close(a, b, **kw)
        return
    assert foo_result.device.type == "foo"
    assert foo_result.dtype == cpu_result.dtype
    torch.testing.assert_close(foo_result.cpu(), cpu_result, equal_nan=True, **kw)


UNARY = [
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "sigmoid",
    "reciprocal",
    "sgn",
    "abs",
    "angle",
    "isnan",
    "isinf",
    "isfinite",
    "logical_not",
    "square",
    "nan_to_num",
]


# Ops whose infinities foo follows CPU on (the others: finite and NaN inputs).
EXTREMAL = {"abs", "angle", "isnan", "isinf", "isfinite", "logical_not", "nan_to_num"}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary(native, name, dtype):
    x = crandn(4, 6, dtype=dtype)
    x[0, 0] = 0
    x[0, 1] = complex(float("nan"), 1.0)
    if name in EXTREMAL:
        x[0, 2] = complex(float("inf"), 0.5)
    x[1, :3] = torch.tensor([1e-4 + 1e-5j, -2 + 0j, 0.3j])
    fn = getattr(torch, name)
    xt = x.t()  # strided
    close(fn(x.to("foo")), fn(x))
    close(fn(xt.to("foo").t().t()), fn(xt))
    if name not in ("isnan", "isinf", "isfinite", "logical_not", "square", "angle", "abs"):
        y = x.clone().to("foo")
        getattr(y, name + "_")()
        close(y, fn(x))
    if name in ("abs", "angle", "exp", "sgn"):
        out = torch.empty(0, dtype=fn(x).dtype, device="foo")
        fn(x.to("foo"), out=out)
        close(out, fn(x))


def test_angle_of_reals(native):
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan")])
    close(torch.angle(x.to("foo")), torch.angle(x))
    i = torch.tensor([-3, 0, 4])
    close(torch.angle(i.to("foo")), torch.angle(i))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_binary(native, dtype):
    a, b = crandn(3, 4, dtype=dtype, seed=1), crandn(4, dtype=dtype, seed=2)
    b[1] = 0
    fa, fb = a.to("foo"), b.to("foo")
    for name in ("div", "true_divide", "pow", "eq", "ne", "logical_and", "logical_or", "logical_xor", "rsub"):
        fn = getattr(torch, name)
        close(fn(fa, fb), fn(a, b))
    close(fa / 2.5, a / 2.5)
    close(fa / (1 - 2j), a / (1 - 2j))
    close(2 / fa, 2 / a)
    close(fa**2, a**2)
    close(fa**0.5, a**0.5)
    close(fa ** (1 + 1j), a ** (1 + 1j))
    close(2**fa, 2**a)
    close(fa == fa[0], a == a[0])
    # Real and complex operands promote.
    r = torch.randn(3, 4)
    close(fa / r.to("foo"), a / r)
    close(r.to("foo") * (2 + 1j), r * (2 + 1j))
    c = fa.clone()
    c /= fb
    close(c, a / b)
    out = torch.empty(3, 4, dtype=dtype, device="foo")
    torch.div(fa, fb, out=out)
    close(out, a / b)


def test_div_edge_values(native):
    a = torch.tensor([1 + 1j, 1e30 + 1e30j, 1e-30 + 0j, 0j, float("nan") + 0j], dtype=torch.complex64)
    b = torch.tensor([0j, 1e30 - 1e30j, 1e-30 + 1e-30j, 0j, 1 + 1j], dtype=torch.complex64)
    close(a.to("foo") / b.to("foo"), a / b)


def test_errors_match_cpu(native):
    x = crandn(3).to("foo")
    for fn in (torch.floor, torch.erf, torch.sign):
        with pytest.raises(Exception) as e:
            fn(x)
        with pytest.raises(type(e.value)):
            fn(x.cpu())
    with pytest.raises(RuntimeError):
        torch.div(x, x, rounding_mode="floor")
    with pytest.raises(RuntimeError):
        torch.lt(x, x)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_ternary_and_selection(native, dtype):
    a, b = crandn(3, 4, dtype=dtype, seed=3), crandn(3, 1, dtype=dtype, seed=4)
    m = torch.rand(3, 4) > 0.5
    fa, fb, fm = a.to("foo"), b.to("foo"), m.to("foo")
    close(torch.where(fm, fa, fb), torch.where(m, a, b))
    close(torch.where(fm, fa, 2j), torch.where(m, a, 2j))
    close(fa.masked_fill(fm, 1 - 1j), a.masked_fill(m, 1 - 1j))
    close(torch.lerp(fa, fb, 0.3), torch.lerp(a, b, 0.3))
    close(torch.lerp(fa, fb, 0.7), torch.lerp(a, b, 0.7))
    close(torch.addcmul(fa, fa, fb, value=2), torch.addcmul(a, a, b, value=2))
    close(torch.addcdiv(fa, fa, fb, value=0.5), torch.addcdiv(a, a, b, value=0.5))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_data_movement(native, dtype):
    x = crandn(4, 5, dtype=dtype, seed=5)
    y = crandn(2, 5, dtype=dtype, seed=6)
    fx, fy = x.to("foo"), y.to("foo")
    close(torch.cat([fx, fy]), torch.cat([x, y]))
    close(torch.cat([fx.t(), fy.t()], 1), torch.cat([x.t(), y.t()], 1))
    close(torch.stack([fx, fx]), torch.stack([x, x]))
    close(torch.flip(fx, [0, 1]), torch.flip(x, [0, 1]))
    close(torch.roll(fx, 2, 1), torch.roll(x, 2, 1))
    close(torch.tril(fx, -1), torch.tril(x, -1))
    close(torch.triu(fx.t(), 1), torch.triu(x.t(), 1))
    i = torch.tensor([3, 0, 3])
    fi = i.to("foo")
    close(fx.index_select(0, fi), x.index_select(0, i))
    close(fx.index_select(1, fi), x.index_select(1, i))
    close(fx[fi], x[i])
    close(fx[:, fi], x[:, i])
    close(fx[fx.abs() > 1], x[x.abs() > 1])
    g = torch.randint(0, 4, (3, 5))
    close(torch.gather(fx, 0, g.to("foo")), torch.gather(x, 0, g))
    close(torch.take(fx, fi), torch.take(x, i))
    m = x.abs() > 0.8
    close(torch.masked_select(fx, m.to("foo")), torch.masked_select(x, m))
    close(torch.nonzero(fx * m.to("foo")), torch.nonzero(x * m))
    close(torch.count_nonzero(fx * m.to("foo"), dim=1), torch.count_nonzero(x * m, dim=1))
    close(torch.eye(3, dtype=dtype, device="foo"), torch.eye(3, dtype=dtype))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_scatters(native, dtype):
    x = crandn(4, 5, dtype=dtype, seed=7)
    src = crandn(3, 5, dtype=dtype, seed=8)
    idx = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1], [2, 3, 0, 1, 2]])
    fx, fs, fi = x.to("foo"), src.to("foo"), idx.to("foo")
    close(fx.scatter(0, fi, fs), x.scatter(0, idx, src))
    close(fx.scatter_add(0, fi, fs), x.scatter_add(0, idx, src))
    close(fx.scatter(0, fi, 2 - 1j), x.scatter(0, idx, 2 - 1j))
    v = torch.tensor([2, 0])
    fv = v.to("foo")
    close(fx.index_add(0, fv, fs[:2], alpha=2), x.index_add(0, v, src[:2], alpha=2))
    close(fx.index_copy(0, fv, fs[:2]), x.index_copy(0, v, src[:2]))
    close(fx.index_fill(1, fv, 1 + 2j), x.index_fill(1, v, 1 + 2j))
    p = fx.clone()
    p[fv] = fs[:2]
    q = x.clone()
    q[v] = src[:2]
    close(p, q)
    p.index_put_((fv,), fs[:2], accumulate=True)
    q.index_put_((v,), src[:2], accumulate=True)
    close(p, q)
    close(fx.clone().put_(fv, fs[0, :2]), x.clone().put_(v, src[0, :2]))
    m = x.abs() > 1
    close(fx.masked_scatter(m.to("foo"), fs.repeat(2, 1)), x.masked_scatter(m, src.repeat(2, 1)))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_products(native, dtype):
    a, b = crandn(5, 3, dtype=dtype, seed=9), crandn(3, 4, dtype=dtype, seed=10)
    c = crandn(5, 4, dtype=dtype, seed=11)
    v = crandn(3, dtype=dtype, seed=12)
    fa, fb, fc, fv = a.to("foo"), b.to("foo"), c.to("foo"), v.to("foo")
    close(fa @ fb, a @ b)
    close(fa.conj() @ fb, a.conj() @ b)
    close(fb.mH @ fa.mT, b.mH @ a.mT)
    close((-fa) @ fb, (-a) @ b)
    close(torch.addmm(fc, fa, fb, beta=0.5, alpha=2), torch.addmm(c, a, b, beta=0.5, alpha=2))
    close(torch.addmm(fc, fa, fb, beta=1j, alpha=2 - 1j), torch.addmm(c, a, b, beta=1j, alpha=2 - 1j))
    close(fa @ fv, a @ v)
    close(torch.dot(fv, fv.conj()), torch.dot(v, v.conj()))
    close(torch.vdot(fv, fv * 2), torch.vdot(v, v * 2))
    close(torch.bmm(fa.expand(2, 5, 3), fb.expand(2, 3, 4)), torch.bmm(a.expand(2, 5, 3), b.expand(2, 3, 4)))
    close(torch.einsum("ij,jk->ik", fa, fb), torch.einsum("ij,jk->ik", a, b))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_reductions(native, dtype):
    x = crandn(4, 5, dtype=dtype, seed=13)
    fx = x.to("foo")
    close(fx.mean(), x.mean())
    close(fx.mean(1, keepdim=True), x.mean(1, keepdim=True))
    close(fx.cumsum(0), x.cumsum(0))
    close(fx.trace(), x.trace())
    close(fx.var(), x.var())
    close(fx.std(0, correction=0), x.std(0, correction=0))
    close(torch.var_mean(fx, 1), torch.var_mean(x, 1))
    close(torch.std_mean(fx, 1), torch.std_mean(x, 1))
    close(torch.linalg.vector_norm(fx), torch.linalg.vector_norm(x))
    close(torch.linalg.vector_norm(fx, 1, dim=1), torch.linalg.vector_norm(x, 1, dim=1))
    close(torch.linalg.vector_norm(fx, float("inf")), torch.linalg.vector_norm(x, float("inf")))
    close(torch.norm(fx), torch.norm(x))
    z = x * (x.abs() > 1)
    fz = z.to("foo")
    close(fz.any(), z.any())
    close(fz.all(1), z.all(1))
    close(torch.count_nonzero(fz), torch.count_nonzero(z))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_products_and_scans(native, dtype):
    x = crandn(3, 4, dtype=dtype, seed=14)
    fx = x.to("foo")
    close(fx.cumprod(1), x.cumprod(1))
    close(fx.cumprod(0), x.cumprod(0))
    close(fx.prod(), x.prod())
    close(fx.prod(1, keepdim=True), x.prod(1, keepdim=True))
    close(fx.t().prod(0), x.t().prod(0))
    close(fx[:, :0].prod(1), x[:, :0].prod(1))
    close(torch.logsumexp(fx, 1), torch.logsumexp(x, 1))
    s = crandn((), dtype=dtype, seed=15)
    close(torch.logsumexp(s.to("foo"), 0, True), torch.logsumexp(s, 0, True))
    close(s.to("foo").sum(0), s.sum(0))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_ramps_and_constructors(native, dtype):
    close(torch.linspace(1 - 2j, 3 + 4j, 7, dtype=dtype, device="foo"), torch.linspace(1 - 2j, 3 + 4j, 7, dtype=dtype))
    close(torch.linspace(0, 5, 4, dtype=dtype, device="foo"), torch.linspace(0, 5, 4, dtype=dtype))
    close(torch.logspace(0, 1j, 5, dtype=dtype, device="foo"), torch.logspace(0, 1j, 5, dtype=dtype))
    re, im = torch.randn(3, 1), torch.randn(4)
    if dtype == torch.complex128:
        re, im = re.double(), im.double()
    close(torch.complex(re.to("foo"), im.to("foo")), torch.complex(re, im))
    r = torch.randn(2000, dtype=dtype, device="foo")
    assert r.dtype == dtype and abs(r.real.var().item() - 0.5) < 0.1 and abs(r.imag.mean().item()) < 0.1
    u = torch.rand(2000, dtype=dtype, device="foo")
    assert 0 <= u.real.min().item() and u.imag.max().item() < 1


@pytest.mark.parametrize("dtype", CDTYPES)
def test_linalg_by_embedding(native, dtype):
    a = crandn(2, 4, 3, dtype=dtype, seed=16)
    fa = a.to("foo")
    close(torch.linalg.svdvals(fa), torch.linalg.svdvals(a))
    close(torch.linalg.matrix_norm(fa, "nuc"), torch.linalg.matrix_norm(a, "nuc"))
    h = crandn(3, 3, dtype=dtype, seed=17)
    close(torch.linalg.eigvalsh(h.to("foo")), torch.linalg.eigvalsh(h))
    close(torch.linalg.eigvalsh(h.to("foo"), UPLO="U"), torch.linalg.eigvalsh(h, UPLO="U"))
    s = crandn(2, 3, 3, dtype=dtype, seed=18)
    close(torch.linalg.inv(s.to("foo")), torch.linalg.inv(s))
    inv, info = torch.linalg.inv_ex(s.to("foo"))
    close(inv, torch.linalg.inv(s))
    assert (info.cpu() == 0).all()
    with pytest.raises(NotImplementedError):
        torch.linalg.svd(fa)  # singular vectors are not computed on foo
