"""Searching, counting and index building on foo against torch CPU
(python/foo_rs/_ops/search.py; Rust in rust/src/kernels/search.rs and
select.rs): topk/kthvalue/mode positions among ties, cummax/cummin,
logcumsumexp, searchsorted/bucketize (right=/side=/sorter=/out_int32/out=),
isin, unique (sorted, consecutive, by dim, inverse and counts),
repeat_interleave, bincount, histc, tril/triu_indices, gcd/lcm,
channel_shuffle and renorm: values, dtypes, shapes, strides, zero-size,
out=, exception types, gradients. The CPU fallback is off throughout."""

import pytest
import torch

from foo_testing import REAL_DTYPES

pytestmark = pytest.mark.usefixtures("no_fallback")

FOO = torch.device("foo")
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def data(dtype, shape, seed=0, dups=True, nan=True):
    """Values with many ties, and for floats NaN and infinities."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        hi = 5 if dups else 100
        lo = 0 if dtype == torch.uint8 else -hi
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    if dups:
        x = x.round()
    flat = x.view(-1)
    if nan and flat.numel() >= 8:
        flat[::9] = float("nan")
        flat[1::17] = float("inf")
        flat[2::19] = float("-inf")
    return x.to(dtype)


def same(cpu, foo):
    if isinstance(cpu, (tuple, list)):
        assert len(cpu) == len(foo)
        for a, b in zip(cpu, foo):
            same(a, b)
        return
    assert foo.device.type == "foo"
    assert foo.dtype == cpu.dtype and foo.shape == cpu.shape, (foo.dtype, foo.shape, cpu.dtype, cpu.shape)
    torch.testing.assert_close(foo.cpu(), cpu, equal_nan=True, rtol=0, atol=0)


def close(cpu, foo, **tol):
    assert foo.device.type == "foo"
    assert foo.dtype == cpu.dtype and foo.shape == cpu.shape
    torch.testing.assert_close(foo.cpu(), cpu, equal_nan=True, **tol)


def like_cpu(fn, x, f):
    """``fn(f)`` on foo as ``fn(x)`` on CPU: the same result, or the same exception type."""
    try:
        want = fn(x)
    except Exception as e:
        with pytest.raises(type(e)):
            fn(f)
        return
    same(want, fn(f))


def raises_like_cpu(fn, *args, **kwargs):
    with pytest.raises(Exception) as cpu_err:
        fn(*[a for a in args], **kwargs)
    foo_args = [a.to(FOO) if isinstance(a, torch.Tensor) else a for a in args]
    foo_kwargs = {k: v.to(FOO) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(cpu_err.type):
        fn(*foo_args, **foo_kwargs)


# ---- selections in CPU's tie order ----------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_topk_positions_among_ties_are_cpus(dtype):
    for shape, seed in [((5, 10, 5), 0), ((3, 200), 1), ((4, 40), 2)]:
        x = data(dtype, shape, seed)
        f = x.to(FOO)
        for dim in range(x.dim()):
            n = x.shape[dim]
            for k in sorted({1, 2, 3, n // 2, n}):
                for largest in (True, False):
                    like_cpu(lambda t: torch.topk(t, k, dim, largest), x, f)


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_kthvalue_positions_among_ties_are_cpus(dtype):
    x = data(dtype, (5, 9, 33), 3)
    f = x.to(FOO)
    for dim in (0, 1, 2, -1):
        for k in (1, 2, x.shape[dim] // 2 + 1, x.shape[dim]):
            for keep in (False, True):
                like_cpu(lambda t: torch.kthvalue(t, k, dim, keep), x, f)


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_mode_matches_cpu(dtype):
    x = data(dtype, (4, 7, 30), 4, nan=False)
    f = x.to(FOO)
    for dim in (0, 1, 2, -1):
        for keep in (False, True):
            same(torch.mode(x, dim, keep), torch.mode(f, dim, keep))
    same(torch.mode(x[0, 0, 0]), torch.mode(f[0, 0, 0]))
    # strided input, out= (resized), zero-size outside the reduced dim
    t = x.transpose(0, 2)
    v, i = torch.empty(0, dtype=dtype, device=FOO), torch.empty(0, dtype=torch.int64, device=FOO)
    torch.mode(t.to(FOO), 1, out=(v, i))
    same(torch.mode(t, 1), (v, i))
    same(torch.mode(x[:0], 1), torch.mode(f[:0], 1))
    raises_like_cpu(torch.mode, x[:, :0], 1)


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_cummax_cummin_match_cpu(dtype):
    x = data(dtype, (6, 25), 5)
    f = x.to(FOO)
    for op in (torch.cummax, torch.cummin):
        for dim in (0, 1, -1):
            same(op(x, dim), op(f, dim))
        same(op(x.t(), 0), op(f.t(), 0))
        same(op(x[0, 0], 0), op(f[0, 0], 0))
        same(op(x[:0], 1), op(f[:0], 1))
        v, i = torch.empty(0, dtype=dtype, device=FOO), torch.empty(0, dtype=torch.int64, device=FOO)
        op(f, 1, out=(v, i))
        same(op(x, 1), (v, i))


def test_cummax_logcumsumexp_gradients_match_cpu():
    x = torch.randn(4, 9, dtype=torch.float64)
    for fn in (lambda t: torch.cummax(t, 1)[0], lambda t: torch.cummin(t, 0)[0], lambda t: torch.logcumsumexp(t, 1)):
        a = x.clone().requires_grad_()
        b = x.to(FOO).requires_grad_()
        g = torch.randn(4, 9, dtype=torch.float64)
        fn(a).backward(g)
        fn(b).backward(g.to(FOO))
        close(a.grad, b.grad)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logcumsumexp_matches_cpu(dtype):
    x = torch.randn(5, 40, dtype=torch.float64).mul(4).to(dtype)
    x[0, 3] = float("inf")
    x[1, 5] = float("-inf")
    x[2, 7] = float("nan")
    x[3, :] = float("-inf")
    f = x.to(FOO)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype in (torch.float32, torch.float64) else {}
    for dim in (0, 1, -1):
        close(torch.logcumsumexp(x, dim), torch.logcumsumexp(f, dim), **tol)
    close(torch.logcumsumexp(x.t(), 1), torch.logcumsumexp(f.t(), 1), **tol)
    out = torch.empty(0, dtype=dtype, device=FOO)
    torch.logcumsumexp(f, 1, out=out)
    close(torch.logcumsumexp(x, 1), out, **tol)
    close(torch.logcumsumexp(x[:0], 1), torch.logcumsumexp(f[:0], 1))
    raises_like_cpu(torch.logcumsumexp, torch.ones(3, dtype=torch.int64), 0)


# ---- searchsorted / bucketize / isin ------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.searchsorted")
@pytest.mark.parametrize("dtype", [d for d in REAL_DTYPES if d != torch.bool], ids=str)
def test_searchsorted_matches_cpu(dtype):
    b = data(dtype, (3, 20), 6, nan=False).sort(-1).values
    v = data(dtype, (3, 11), 7)
    fb, fv = b.to(FOO), v.to(FOO)
    for kw in ({}, {"right": True}, {"side": "right"}, {"side": "left"}, {"out_int32": True}):
        same(torch.searchsorted(b, v, **kw), torch.searchsorted(fb, fv, **kw))
        same(torch.searchsorted(b[0], v, **kw), torch.searchsorted(fb[0], fv, **kw))
        same(torch.bucketize(v, b[1], **kw), torch.bucketize(fv, fb[1], **kw)) if "side" not in kw else None
    # strided operands, a sorter, a scalar, zero-size, out=
    same(torch.searchsorted(b.t().contiguous().t(), v[:, ::2]), torch.searchsorted(fb.t().contiguous().t(), fv[:, ::2]))
    u = data(dtype, (2, 15), 8, nan=False)
    s = torch.argsort(u, dim=-1, stable=True)
    same(torch.searchsorted(u, v[:2], sorter=s), torch.searchsorted(u.to(FOO), fv[:2], sorter=s.to(FOO)))
    same(torch.searchsorted(b[0], 3), torch.searchsorted(fb[0], 3))
    same(torch.bucketize(3, b[0], right=True), torch.bucketize(3, fb[0], right=True))
    same(torch.searchsorted(b[0, :0], v), torch.searchsorted(fb[0, :0], fv))
    same(torch.searchsorted(b[0], v[:0]), torch.searchsorted(fb[0], fv[:0]))
    out = torch.empty(0, dtype=torch.int32, device=FOO)
    torch.searchsorted(fb, fv, out_int32=True, out=out)
    same(torch.searchsorted(b, v, out_int32=True), out)


def test_searchsorted_promotes_mixed_dtypes_like_cpu():
    b = torch.tensor([1, 2, 3, 5], dtype=torch.int32)
    v = torch.tensor([[2.5, 5.0, -1.0]])
    same(torch.searchsorted(b, v), torch.searchsorted(b.to(FOO), v.to(FOO)))
    same(torch.searchsorted(b, 2.5), torch.searchsorted(b.to(FOO), 2.5))


def test_searchsorted_bucketize_bad_input_raise_like_cpu():
    b = torch.tensor([1.0, 2.0, 3.0])
    v = torch.tensor([[2.0, 5.0]])
    cases = [
        (torch.searchsorted, (torch.tensor(1.0), v), {}),
        (torch.searchsorted, (torch.ones(2, 3), torch.ones(3, 3)), {}),
        (torch.searchsorted, (b, v), {"side": "left", "right": True}),
        (torch.searchsorted, (b, v), {"side": "middle"}),
        (torch.searchsorted, (b, v), {"sorter": torch.tensor([0, 1])}),
        (torch.searchsorted, (b, v), {"sorter": torch.tensor([0, 1, 5])}),
        (torch.searchsorted, (b, v), {"sorter": torch.tensor([0.0, 1, 2])}),
        (torch.searchsorted, (torch.ones(2, 3), 1.0), {}),
        (torch.searchsorted, (b.bool(), v.bool()), {}),
        (torch.searchsorted, (b, v), {"out_int32": True, "out": torch.empty(0, dtype=torch.int64)}),
        (torch.bucketize, (v, torch.ones(2, 2)), {}),
    ]
    for fn, args, kwargs in cases:
        raises_like_cpu(fn, *args, **kwargs)


@pytest.mark.parametrize("dtype", [d for d in REAL_DTYPES if d != torch.bool], ids=str)
def test_isin_matches_cpu(dtype):
    e = data(dtype, (4, 13), 9)
    t = data(dtype, (7,), 10)
    fe, ft = e.to(FOO), t.to(FOO)
    for invert in (False, True):
        same(torch.isin(e, t, invert=invert), torch.isin(fe, ft, invert=invert))
        same(torch.isin(e.t(), t[::2], invert=invert), torch.isin(fe.t(), ft[::2], invert=invert))
        same(torch.isin(e, 2, invert=invert), torch.isin(fe, 2, invert=invert))
        same(torch.isin(2, t, invert=invert), torch.isin(2, ft, invert=invert))
    same(torch.isin(e[:0], t), torch.isin(fe[:0], ft))
    same(torch.isin(e, t[:0]), torch.isin(fe, ft[:0]))
    out = torch.empty(0, dtype=torch.bool, device=FOO)
    torch.isin(fe, ft, out=out)
    same(torch.isin(e, t), out)


def test_isin_mixed_dtypes_and_bad_input_like_cpu():
    e, t = torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0])
    same(torch.isin(e, t), torch.isin(e.to(FOO), t.to(FOO)))
    raises_like_cpu(torch.isin, torch.tensor([True]), torch.tensor([1]))


# ---- unique ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_unique_matches_cpu(dtype):
    x = data(dtype, (6, 11), 11)
    f = x.to(FOO)
    for sorted_ in (True, False):
        for inv in (False, True):
            for cnt in (False, True):
                kw = {"sorted": sorted_, "return_inverse": inv, "return_counts": cnt}
                same(torch.unique(x, **kw), torch.unique(f, **kw))
                same(torch.unique(x.t(), **kw), torch.unique(f.t(), **kw))
                kc = {"return_inverse": inv, "return_counts": cnt}
                same(torch.unique_consecutive(x, **kc), torch.unique_consecutive(f, **kc))
                for dim in (0, 1):
                    if dtype.is_floating_point:
                        y = x.nan_to_num()
                        same(torch.unique(y, dim=dim, **kw), torch.unique(y.to(FOO), dim=dim, **kw))
                        same(
                            torch.unique_consecutive(y, dim=dim, **kc),
                            torch.unique_consecutive(y.to(FOO), dim=dim, **kc),
                        )
                    else:
                        same(torch.unique(x, dim=dim, **kw), torch.unique(f, dim=dim, **kw))
                        same(torch.unique_consecutive(x, dim=dim, **kc), torch.unique_consecutive(f, dim=dim, **kc))
    for t in (x[0, 0], x[:0]):
        kw = {"return_inverse": True, "return_counts": True}
        same(torch.unique(t, **kw), torch.unique(t.to(FOO), **kw))
        same(torch.unique_consecutive(t, **kw), torch.unique_consecutive(t.to(FOO), **kw))


# ---- repeat_interleave, bincount, histc, tril/triu_indices --------------------------


def test_repeat_interleave_matches_cpu():
    r = torch.tensor([2, 0, 3, 1])
    for rep in (r, r.int(), r[:0]):
        same(torch.repeat_interleave(rep), torch.repeat_interleave(rep.to(FOO)))
    x = data(torch.float32, (2, 4, 3), 12)
    same(torch.repeat_interleave(x, r, 1), torch.repeat_interleave(x.to(FOO), r.to(FOO), 1))
    same(torch.repeat_interleave(x, 2, 0), torch.repeat_interleave(x.to(FOO), 2, 0))
    same(torch.repeat_interleave(r, output_size=6), torch.repeat_interleave(r.to(FOO), output_size=6))
    for bad in (torch.tensor([1, -1]), torch.tensor([[1]]), torch.tensor([1.0, 2.0])):
        raises_like_cpu(torch.repeat_interleave, bad)
    raises_like_cpu(torch.repeat_interleave, r, output_size=2)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_bincount_matches_cpu(dtype):
    x = torch.randint(0, 9, (40,), generator=torch.Generator().manual_seed(13)).to(dtype)
    w = torch.randn(40, dtype=torch.float64)
    f = x.to(FOO)
    same(torch.bincount(x), torch.bincount(f))
    same(torch.bincount(x, minlength=20), torch.bincount(f, minlength=20))
    same(torch.bincount(x[::3]), torch.bincount(f[::3]))
    same(torch.bincount(x[:0], minlength=3), torch.bincount(f[:0], minlength=3))
    for wd in (torch.float32, torch.float64, torch.float16, torch.int32):
        close(torch.bincount(x, w.to(wd)), torch.bincount(f, w.to(wd).to(FOO)))
    for args in [
        (torch.tensor([-1]),),
        (torch.ones(2, 2).long(),),
        (torch.ones(2),),
        (torch.tensor([1, 2]), torch.ones(3)),
    ]:
        raises_like_cpu(torch.bincount, *args)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_histc_matches_cpu(dtype):
    x = torch.randn(500, generator=torch.Generator().manual_seed(14), dtype=torch.float64).mul(3).to(dtype)
    x[::50] = float("nan")
    f = x.to(FOO)
    for bins, lo, hi in [(100, 0, 0), (7, -2, 2), (10, 0, 1), (1, -1, 1)]:
        # (the data's range, when lo == hi, is NaN here: an error on both)
        like_cpu(lambda t: torch.histc(t, bins, lo, hi), x, f)
        z = x.nan_to_num(0.0, 0.0, 0.0)
        same(torch.histc(z, bins, lo, hi), torch.histc(z.to(FOO), bins, lo, hi))
    y = x.nan_to_num(0.0, 0.0, 0.0)[1::2].reshape(10, -1)[:, :3]
    same(torch.histc(y, 5), torch.histc(y.to(FOO), 5))
    ones = torch.ones(4, dtype=dtype)
    same(torch.histc(ones, 3), torch.histc(ones.to(FOO), 3))
    same(torch.histc(x[:0], 4), torch.histc(f[:0], 4))
    out = torch.empty(0, dtype=dtype, device=FOO)
    torch.histc(f, 6, -1, 1, out=out)
    same(torch.histc(x, 6, -1, 1), out)
    for args in [(torch.tensor([1, 2]), 3), (ones, -3), (ones, 3, 2, 1), (torch.tensor([1.0, float("inf")]), 3)]:
        raises_like_cpu(torch.histc, *args)


def test_tril_triu_indices_match_cpu():
    for row, col, off in [(0, 0, 0), (3, 3, 0), (4, 6, 2), (6, 4, -3), (5, 5, 9), (5, 5, -9), (1, 7, 0)]:
        for fn in (torch.tril_indices, torch.triu_indices):
            same(fn(row, col, off), fn(row, col, off, device=FOO))
            same(fn(row, col, off, dtype=torch.int32), fn(row, col, off, dtype=torch.int32, device=FOO))
    for fn in (torch.tril_indices, torch.triu_indices):
        with pytest.raises(NotImplementedError):
            fn(3, 3, dtype=torch.float32, device=FOO)
        with pytest.raises(RuntimeError):
            fn(-1, 3, device=FOO)


# ---- gcd/lcm, channel_shuffle, renorm -------------------------------------------


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_gcd_lcm_match_cpu(dtype):
    g = torch.Generator().manual_seed(15)
    lo = 0 if dtype == torch.uint8 else -30
    a = torch.randint(lo, 30, (6, 7), generator=g).to(dtype)
    b = torch.randint(lo, 30, (7,), generator=g).to(dtype)
    for fn in (torch.gcd, torch.lcm):
        same(fn(a, b), fn(a.to(FOO), b.to(FOO)))
        same(fn(a.t(), a.t().contiguous()), fn(a.to(FOO).t(), a.to(FOO).t().contiguous()))
        out = torch.empty(0, dtype=dtype, device=FOO)
        fn(a.to(FOO), b.to(FOO), out=out)
        same(fn(a, b), out)
        y = a.clone().to(FOO)
        getattr(y, fn.__name__ + "_")(b.to(FOO))
        same(fn(a, b), y)
    raises_like_cpu(torch.gcd, torch.tensor([1.0]), torch.tensor([2.0]))


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
def test_channel_shuffle_matches_cpu(dtype):
    x = data(dtype, (2, 6, 3, 4), 16)
    for groups in (1, 2, 3, 6):
        same(torch.channel_shuffle(x, groups), torch.channel_shuffle(x.to(FOO), groups))
        same(
            torch.nn.functional.channel_shuffle(x[..., ::2], groups),
            torch.nn.functional.channel_shuffle(x.to(FOO)[..., ::2], groups),
        )
    cl = x.contiguous(memory_format=torch.channels_last)
    r, fr = torch.channel_shuffle(cl, 2), torch.channel_shuffle(cl.to(FOO), 2)
    same(r, fr)
    assert fr.stride() == r.stride()
    for args in [(torch.ones(1, 5, 2, 2), 2), (torch.ones(1, 4, 2, 2), 0), (torch.ones(4), 2)]:
        raises_like_cpu(torch.channel_shuffle, *args)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_renorm_matches_cpu(dtype):
    x = torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(17), dtype=torch.float64).to(dtype)
    f = x.to(FOO)
    tol = {} if dtype in (torch.float16, torch.bfloat16) else {"rtol": 1e-5, "atol": 1e-6}
    for p, dim, maxnorm in [(2, 1, 0.5), (1, 0, 1.0), (3, -1, 2.0), (2.5, 2, 100.0)]:
        close(torch.renorm(x, p, dim, maxnorm), torch.renorm(f, p, dim, maxnorm), **tol)
        y = f.clone()
        y.renorm_(p, dim, maxnorm)
        close(torch.renorm(x, p, dim, maxnorm), y, **tol)
    out = torch.empty(0, dtype=dtype, device=FOO)
    torch.renorm(f.transpose(0, 2), 2, 0, 0.5, out=out)
    close(torch.renorm(x.transpose(0, 2), 2, 0, 0.5), out, **tol)
    for args in [
        (torch.ones(4), 2, 0, 1),
        (torch.ones(4, 4), -1, 0, 1),
        (torch.ones(4, 4), 2, 0, -1),
        (torch.ones(4, 4).long(), 2, 0, 1),
    ]:
        raises_like_cpu(torch.renorm, *args)


def test_renorm_gradient_matches_cpu():
    x = torch.randn(4, 5, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.to(FOO).requires_grad_()
    g = torch.randn(4, 5, dtype=torch.float64)
    torch.renorm(a, 2, 0, 0.7).backward(g)
    torch.renorm(b, 2, 0, 0.7).backward(g.to(FOO))
    close(a.grad, b.grad)
