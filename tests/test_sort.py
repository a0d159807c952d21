"""Sorting and selection on foo (python/foo_rs/_ops/sort.py, one Rust kernel in
rust/src/kernels/sort.rs) against torch CPU: sort (stable, descending, NaN and
signed zeros, every dim, strided, zero-size, out=, aliasing), argsort, msort,
topk, kthvalue, median and nanmedian, their errors and gradients. Every test
runs with the CPU fallback off (an op without a foo kernel raises)."""

import pytest
import torch

from foo_testing import REAL_DTYPES

pytestmark = pytest.mark.usefixtures("no_fallback")

FOO = torch.device("foo")


def data(dtype, shape, seed=0, dups=False):
    """Values with ties (`dups`), and for floats NaN, infinities and signed zeros."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        hi = 4 if dups else 100
        lo = 0 if dtype == torch.uint8 else -hi
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if dups:
        x = x.round()
    flat = x.view(-1)
    if flat.numel() >= 8:
        flat[::7] = float("nan")
        flat[3::11] = -0.0
        flat[5::13] = 0.0
        flat[1::17] = float("inf")
        flat[2::19] = float("-inf")
    return x.to(dtype)


def same(cpu, foo, exact_indices=True):
    assert foo.device.type == "foo"
    assert foo.dtype == cpu.dtype and foo.shape == cpu.shape, (foo.dtype, foo.shape, cpu.dtype, cpu.shape)
    if exact_indices or cpu.dtype != torch.int64:
        torch.testing.assert_close(foo.cpu(), cpu, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", REAL_DTYPES, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_cpu(dtype, descending):
    x = data(dtype, (5, 37), dups=True)
    for dim in (0, 1, -1):
        v, i = torch.sort(x, dim=dim, descending=descending, stable=True)
        fv, fi = torch.sort(x.to(FOO), dim=dim, descending=descending, stable=True)
        same(v, fv)
        same(i, fi)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
def test_unstable_sort_argsort_msort_match_cpu(dtype):
    # Without ties every valid order is the same: values and indices as CPU.
    x = torch.randperm(300, generator=torch.Generator().manual_seed(1)).reshape(3, 100).to(dtype)
    if dtype == torch.bfloat16:
        x = torch.randperm(200, generator=torch.Generator().manual_seed(1)).reshape(2, 100).to(dtype)
    f = x.to(FOO)
    for dim in (0, 1):
        for desc in (False, True):
            v, i = torch.sort(x, dim, desc)
            fv, fi = torch.sort(f, dim, desc)
            same(v, fv)
            same(i, fi)
            same(torch.argsort(x, dim, desc), torch.argsort(f, dim, desc))
    same(torch.msort(x), torch.msort(f))


def test_sort_strided_zero_size_scalar_and_out():
    x = data(torch.float32, (6, 8, 5))
    t = x.transpose(0, 2)[:, ::2]
    ft = x.to(FOO).transpose(0, 2)[:, ::2]
    assert not ft.is_contiguous()
    for a, b in zip(torch.sort(t, dim=1, stable=True), torch.sort(ft, dim=1, stable=True)):
        same(a, b)
    for shape in [(0,), (3, 0), (0, 4)]:
        e = torch.empty(shape)
        for a, b in zip(torch.sort(e, -1), torch.sort(e.to(FOO), -1)):
            same(a, b)
    s = torch.tensor(2.5)
    for a, b in zip(torch.sort(s), torch.sort(s.to(FOO))):
        same(a, b)
    # out=, resized from the wrong shape, and an input sorted into itself
    v, i = torch.empty(0, device=FOO), torch.empty(0, dtype=torch.int64, device=FOO)
    torch.sort(x.to(FOO), dim=1, out=(v, i), stable=True)
    for a, b in zip(torch.sort(x, dim=1, stable=True), (v, i)):
        same(a, b)
    f = x.to(FOO)
    i = torch.empty(0, dtype=torch.int64, device=FOO)
    torch.sort(f, dim=2, out=(f, i), stable=True)
    for a, b in zip(torch.sort(x, dim=2, stable=True), (f, i)):
        same(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.float16], ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_cpu(dtype, largest):
    x = torch.randperm(240, generator=torch.Generator().manual_seed(2)).reshape(4, 60).to(dtype)
    f = x.to(FOO)
    for k, dim in [(1, 1), (5, 1), (60, 1), (0, 1), (3, 0), (4, 0)]:
        v, i = torch.topk(x, k, dim, largest)
        fv, fi = torch.topk(f, k, dim, largest)
        same(v, fv)
        same(i, fi)
    # A scalar: CPU gives the scalar back for k = 0 and k = 1.
    for k in (0, 1):
        for a, b in zip(torch.topk(x[0, 0], k), torch.topk(f[0, 0], k)):
            same(a, b)


def test_topk_with_nan_and_ties_selects_like_cpu():
    x = data(torch.float32, (3, 50), dups=True)
    f = x.to(FOO)
    for largest in (True, False):
        v, _ = torch.topk(x, 7, 1, largest)
        fv, fi = torch.topk(f, 7, 1, largest)
        same(v, fv)
        # the indices point at the values returned
        same(x.gather(1, fi.cpu()), fv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
def test_kthvalue_matches_cpu(dtype):
    x = torch.randperm(120, generator=torch.Generator().manual_seed(3)).reshape(4, 30).to(dtype)
    f = x.to(FOO)
    for k, dim, keep in [(1, 1, False), (30, 1, True), (7, -1, False), (2, 0, True), (4, 0, False)]:
        v, i = torch.kthvalue(x, k, dim, keep)
        fv, fi = torch.kthvalue(f, k, dim, keep)
        same(v, fv)
        same(i, fi)
    same(torch.kthvalue(torch.tensor(3.0), 1)[0], torch.kthvalue(torch.tensor(3.0, device=FOO), 1)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_matches_cpu(dtype, name):
    fn = getattr(torch, name)
    for shape in [(7, 9), (6, 8), (1, 5)]:
        x = torch.randperm(shape[0] * shape[1], generator=torch.Generator().manual_seed(4)).reshape(shape).to(dtype)
        if dtype.is_floating_point:
            x[0, 1] = float("nan")
            x[-1, :] = float("nan")  # a line of NaN only
        f = x.to(FOO)
        same(fn(x), fn(f))
        for dim in (0, 1):
            for keep in (False, True):
                v, i = fn(x, dim, keep)
                fv, fi = fn(f, dim, keep)
                same(v, fv)
                if name == "nanmedian" and dtype.is_floating_point:
                    # A line of NaN only has no median: CPU's index there is whichever NaN
                    # std::nth_element leaves first (libstdc++'s introselect), foo's the
                    # first NaN. Every other index as CPU's; that one a NaN of the line.
                    all_nan = x.isnan().all(dim, keepdim=True)
                    all_nan = all_nan if keep else all_nan.squeeze(dim)
                    same(i[~all_nan], fi[~all_nan.to(FOO)])
                    picked = x.gather(dim, fi.cpu() if keep else fi.cpu().unsqueeze(dim))
                    assert picked[all_nan if keep else all_nan.unsqueeze(dim)].isnan().all()
                else:
                    same(i, fi)
    same(fn(torch.empty(0)), fn(torch.empty(0, device=FOO)))


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.int16,
        torch.uint8,
        torch.int64,
    ],
    ids=str,
)
@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_median_of_nothing_matches_cpu(dtype, name):
    # CPU answers NaN cast to the dtype.
    fn = getattr(torch, name)
    same(fn(torch.empty(0, dtype=dtype)), fn(torch.empty(0, dtype=dtype, device=FOO)))


def test_errors_match_cpu():
    x = torch.randn(3, 4)
    f = x.to(FOO)
    cases = [
        lambda t: torch.sort(t, 2),
        lambda t: torch.topk(t, 5),
        lambda t: torch.topk(t, -1),
        lambda t: torch.kthvalue(t, 0),
        lambda t: torch.kthvalue(t, 5),
        lambda t: torch.median(t, 3),
        lambda t: torch.median(t[:, :0], 1),
        lambda t: torch.kthvalue(t[:, :0], 1, 1),
    ]
    for case in cases:
        with pytest.raises(Exception) as cpu_err:
            case(x)
        with pytest.raises(cpu_err.type):
            case(f)


def test_gradients_match_cpu():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    g = torch.randn(4, 9, dtype=torch.float64)
    ops = [
        lambda t: torch.sort(t, 1)[0] * g.to(t.device),
        lambda t: torch.topk(t, 3, 1)[0].sum(1),
        lambda t: torch.kthvalue(t, 2, 0)[0],
        lambda t: torch.median(t, 1)[0],
        lambda t: torch.median(t),
    ]
    for op in ops:
        a = x.clone().requires_grad_()
        b = x.to(FOO).requires_grad_()
        op(a).sum().backward()
        op(b).sum().backward()
        torch.testing.assert_close(b.grad.cpu(), a.grad)


def test_no_leak():
    x = data(torch.float32, (8, 64)).to(FOO)
    torch.sort(x, 1)  # warm the allocator's pools
    torch.foo.synchronize()
    base = torch.foo.memory_allocated()
    for _ in range(3):
        torch.sort(x, dim=1, stable=True)
        torch.topk(x, 5)
        torch.kthvalue(x, 3)
        torch.median(x, 1)
        torch.nanmedian(x)
    torch.foo.synchronize()
    assert torch.foo.memory_allocated() == base
