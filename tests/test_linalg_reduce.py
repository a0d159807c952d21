"""Matrix products, reductions, softmax and losses on foo against the CPU.

Each case runs the same function on CPU tensors and on their foo copies
(CPU fallback off): results must match (torch.testing.assert_close defaults:
values, dtype, shape), and an exception on the CPU must be raised on foo with
the same type. The end-to-end test trains one step of a small MLP on both.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map

import foo_rs

from foo_testing import make_tensor

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]

#: The aten overloads this file's kernels serve (none may fall back).
OWN_OPS = {
    "mm.out",
    "addmm.out",
    "bmm.out",
    "baddbmm.out",
    "addbmm",
    "addbmm.out",
    "addbmm_",
    "addmv.out",
    "dot",
    "vdot",
    "sum.IntList_out",
    "nansum",
    "nansum.out",
    "mean.out",
    "prod",
    "prod.int_out",
    "amax.out",
    "amin.out",
    "max",
    "min",
    "max.unary_out",
    "min.unary_out",
    "max.dim_max",
    "min.dim_min",
    "argmax.out",
    "argmin.out",
    "aminmax.out",
    "var.correction",
    "std.correction",
    "var.correction_out",
    "std.correction_out",
    "var_mean.correction",
    "std_mean.correction",
    "linalg_vector_norm.out",
    "norm.out",
    "norm.dtype_out",
    "all.out",
    "any.out",
    "all.dims_out",
    "any.dims_out",
    "all.all_out",
    "any.all_out",
    "count_nonzero.dim_IntList",
    "cumsum.out",
    "cumprod.out",
    "trace",
    "_softmax.out",
    "_log_softmax.out",
    "_softmax_backward_data.out",
    "_log_softmax_backward_data.out",
    "nll_loss_forward.output",
    "nll_loss_backward.grad_input",
    "nll_loss2d_forward",
    "nll_loss2d_forward.output",
    "nll_loss2d_backward",
    "nll_loss2d_backward.grad_input",
    "mse_loss.out",
    "mse_loss_backward",
    "mse_loss_backward.grad_input",
    "embedding_dense_backward",
}


def mat(shape, dtype, seed=0):
    """make_tensor scaled to about N(0, 1) for floats: products of N(0, 100)
    values summed with cancellation would test the summation order, not the
    kernel (CPU's MKL and foo's gemm block differently)."""
    t = make_tensor(shape, dtype, seed)
    return t / 10 if dtype.is_floating_point else t


def to_foo(x):
    if isinstance(x, torch.Tensor):
        # Keep strides and offsets: copy the whole storage, view it the same way.
        base = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage()) if x.untyped_storage().nbytes() else None
        if base is None or x.numel() == 0:
            return x.to("foo")
        whole = torch.empty(base.untyped_storage().nbytes() // x.element_size(), dtype=x.dtype)
        whole.view(torch.uint8).copy_(torch.empty(0, dtype=torch.uint8).set_(x.untyped_storage()))
        f = whole.to("foo")
        return f.as_strided(x.shape, x.stride(), x.storage_offset())
    return x


def to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def check(fn, *args, atol=None, rtol=None, **kwargs):
    """fn on CPU and on foo (fallback off): same results or same exception type."""
    fargs, fkwargs = tree_map(to_foo, args), tree_map(to_foo, kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any CPU error must be mirrored
        with foo_rs.fallback_disabled(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(Exception) as info:
                fn(*fargs, **fkwargs)
        assert type(info.value) is type(e), f"CPU raised {type(e).__name__}: {e}; foo raised {info.value!r}"
        return None
    with foo_rs.fallback_disabled(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(*fargs, **fkwargs)
    flat_e, _ = tree_flatten(expected)
    flat_g, _ = tree_flatten(got)
    assert len(flat_e) == len(flat_g)
    for e, g in zip(flat_e, flat_g):
        if isinstance(e, torch.Tensor):
            assert g.device.type == "foo", g.device
            kw = {} if atol is None else {"atol": atol, "rtol": rtol}
            torch.testing.assert_close(g.cpu(), e, equal_nan=True, **kw)
        else:
            assert g == e or (isinstance(e, float) and math.isnan(e) and math.isnan(g))
    # Mutated arguments (out=, in-place) match too.
    for a, fa in zip(tree_flatten((args, kwargs))[0], tree_flatten((fargs, fkwargs))[0]):
        if isinstance(a, torch.Tensor):
            kw = {} if atol is None else {"atol": atol, "rtol": rtol}
            torch.testing.assert_close(fa.cpu(), a, equal_nan=True, **kw)
    return got


def fma_runs(a, b, c=None, beta=1.0, alpha=1.0, run=512):
    """`beta * c + alpha * a @ b` in float32, each output summed in runs of
    `run` fused multiply-adds (one rounding each) and `alpha` times each run
    added in order to `beta * c`: the gemm crate's micro-kernel, whose depth
    block is at least 512 products."""
    a, b = a.double(), b.double()
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    if c is not None:
        out = out + beta * c
    for start in range(0, a.shape[1], run):
        part = torch.zeros_like(out)
        for p in range(start, min(start + run, a.shape[1])):
            part = (part.double() + a[:, p : p + 1] * b[p : p + 1, :]).float()
        out = out + alpha * part
    return out


def check_accurate(fn, *args, model=None):
    """For long float32 reductions, whose last bits depend on the summation
    order: foo's result must be within the default tolerances of the exact
    (float64) result, or as accurate as CPU's: its root-mean-square error at
    most 1.5x CPU's and its worst error at most 2x CPU's worst, or, given a
    `model` of foo's summation order (float32 arguments to result), as
    accurate as it: RMS error at most 1.25x the model's.

    The worst of a few thousand errors alone is one sample, not the
    summation's spread: on an Intel Sapphire Rapids core (MKL on AVX-512)
    foo's float32 product at k = 1024 had a mean-square error 1.40-1.42x
    CPU's on three products, its worst error 1.30x, 1.49x and 1.59x. On an
    AMD EPYC (MKL on AVX2) it is 1.42-1.62x CPU's at k = 300-2048: the gemm
    crate sums runs of 512 products, MKL shorter ones. Against the model of
    runs of 512 (`fma_runs`) foo's RMS error is 0.96-1.00x; runs of 1024
    would be 1.4x."""
    ref = fn(*[a.double() for a in args])
    cpu = fn(*args).double()
    with foo_rs.fallback_disabled():
        got = fn(*[a.to("foo") for a in args]).cpu()
    assert got.dtype == args[0].dtype and got.shape == ref.shape
    err = (got.double() - ref).abs()
    cpu_err = (cpu - ref).abs()
    within = bool((err <= 1e-5 + 1.3e-6 * ref.abs()).all())
    if within:
        return
    rms, cpu_rms = err.pow(2).mean().sqrt().item(), cpu_err.pow(2).mean().sqrt().item()
    worst, cpu_worst = err.max().item(), cpu_err.max().item()
    if rms <= 1.5 * cpu_rms and worst <= 2 * cpu_worst:
        return
    assert model is not None, f"foo error rms {rms} worst {worst} vs CPU's rms {cpu_rms} worst {cpu_worst}"
    model_rms = (model(*args).double() - ref).pow(2).mean().sqrt().item()
    assert rms <= 1.25 * model_rms, (
        f"foo error rms {rms} worst {worst} vs CPU's rms {cpu_rms} worst {cpu_worst}, the model's rms {model_rms}"
    )


# ---------------------------------------------------------------------------
# Matrix products
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_mm_dtypes(dtype):
    a, b = mat((7, 9), dtype, 1), mat((9, 5), dtype, 2)
    if dtype in INTS:
        a, b = a % 5, b % 5
    check(torch.mm, a, b)


@pytest.mark.parametrize(
    "shape",
    [
        ((3, 4), (4, 5)),
        ((0, 4), (4, 5)),
        ((3, 0), (0, 5)),
        ((3, 4), (4, 0)),
        ((1, 1), (1, 1)),
        ((130, 70), (70, 90)),
        ((1, 300), (300, 1)),
    ],
)
def test_mm_shapes(shape):
    check(torch.mm, mat(shape[0], torch.float32, 3), mat(shape[1], torch.float32, 4))


def test_mm_noncontiguous_operands_and_out():
    a = mat((40, 30), torch.float32, 5)
    b = mat((50, 40), torch.float32, 6)
    check(torch.mm, a.t(), b.t())  # both transposed
    check(torch.mm, a[::2, 1::3], b[::5, ::2][:10])  # sliced with steps
    check(lambda x, y: torch.mm(x, y, out=torch.empty(0, device=x.device)), a, b[:30, :7])
    out = mat((20, 40), torch.float32, 7).t()  # strided out
    check(lambda x, y, o: torch.mm(x, y, out=o), a, b[:30, :20], out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mm_right_operand_with_aliasing_column_stride(dtype):
    """Linear's `x @ W.t()` with a weight whose rows are a multiple of 4 KiB (1024 floats, 512 doubles)
    or 2 KiB (512 floats, from 128 rows of x): foo copies the columns, a chunk of at most 512 rows of
    them at a time, to a padded stride (cache-set aliasing) and adds each chunk's product. The result
    is the product's (within float32's summation-order spread of the exact one, as CPU's), for a
    plain, a sliced and a linear use, a depth of unequal chunks, the same bits at 1 and 2 threads, and
    products too small to re-lay (few columns, few rows)."""
    width = 4096 // torch.empty(0, dtype=dtype).element_size()
    x = mat((100, width), dtype, 8)  # 64 rows or more: re-laid; fewer: read in place
    w = mat((70, width), dtype, 9)
    check_accurate(lambda a, b: a @ b.t(), x, w, model=lambda a, b: fma_runs(a, b.t()))
    wide = mat((70, 2 * width), dtype, 10)  # column stride 2 * width, its first width columns
    check_accurate(lambda a, b: a @ b[:, :width].t(), x, wide, model=lambda a, b: fma_runs(a, b[:, :width].t()))
    bias = mat((70,), dtype, 11)
    check_accurate(torch.nn.functional.linear, x, w, bias, model=lambda a, b, c: fma_runs(a, b.t(), c))
    deep = mat((100, width + 300), dtype, 12)  # k = width + 300: unequal chunks
    cut = width + 300
    check_accurate(lambda a, b: a @ b[:, :cut].t(), deep, wide, model=lambda a, b: fma_runs(a, b[:, :cut].t()))
    check_accurate(
        lambda c, a, b: torch.addmm(c, a, b[:, :cut].t(), beta=0.5, alpha=-2.0),
        bias,
        deep,
        wide,
        model=lambda c, a, b: fma_runs(a, b[:, :cut].t(), c, 0.5, -2.0),
    )
    threads, results = torch.get_num_threads(), []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append((deep.to("foo") @ wide.to("foo")[:, : width + 300].t()).cpu())
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0], results[1])
    check(lambda a, b: a[:, :40] @ b[:5, :40].t(), x, w)
    check_accurate(lambda a, b: a[:3] @ b.t(), x, w)
    half = width // 2  # a 2 KiB column stride: re-laid from 128 rows, read in place below
    x2, w2 = mat((128, half), dtype, 13), mat((70, half), dtype, 14)
    check_accurate(lambda a, b: a @ b.t(), x2, w2, model=lambda a, b: fma_runs(a, b.t()))
    check_accurate(lambda a, b: a[:127] @ b.t(), x2, w2, model=lambda a, b: fma_runs(a[:127], b.t()))
    check_accurate(F.linear, x2, w2, bias, model=lambda a, b, c: fma_runs(a, b.t(), c))


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 16, 17, 64, 96, 97])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mm_transposed_right_operand_few_rows(rows, dtype):
    """`x @ W.t()` with few rows of x (Linear at a small batch). float32 on AVX-512 up to 16 rows: dot
    products of rows of x and W (linalg/few_rows.rs); otherwise into a column-major scratch (2-96
    rows; one row at a time up to 4) copied out. Plain, bias (the output read, beta and alpha), in
    place into a column slice of a wider tensor and out= one (a row stride wider than the row) or a
    transposed one (column stride not 1), operands sliced out of wider ones (row strides past k), and
    the same bits at 1 and 2 threads (a product wide enough to split)."""
    x, w, bias = mat((rows, 33), dtype, 1), mat((40, 33), dtype, 2), mat((40,), dtype, 3)
    check(lambda a, b: a @ b.t(), x, w)
    check(lambda a, b: a[:, 2:31] @ b[1:39, 2:31].t(), x, w)
    check(lambda a, b: torch.mm(a, b.t(), out=torch.empty(40, a.shape[0], dtype=a.dtype, device=a.device).t()), x, w)
    check(lambda c, a, b: torch.addmm(c, a, b.t(), beta=0.5, alpha=-2.0), bias, x, w)
    check(F.linear, x, w, bias)
    wide = mat((rows, 50), dtype, 4)
    check(lambda o, a, b: o[:, 3:43].addmm_(a, b.t(), alpha=0.25), wide, x, w)
    check(lambda o, a, b: torch.mm(a, b.t(), out=o[:, 5:45]), wide, x, w)
    threads = torch.get_num_threads()
    xf, wf, bf = (
        mat((rows, 300), dtype, 5).to("foo"),
        mat((256, 300), dtype, 6).to("foo"),
        mat((256,), dtype, 7).to("foo"),
    )
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            with foo_rs.fallback_disabled():
                results.append(F.linear(xf, wf, bf).cpu())
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0], results[1])


def test_mm_errors():
    check(torch.mm, torch.ones(2, 3), torch.ones(4, 5))
    check(torch.mm, torch.ones(2, 3), torch.ones(3))
    check(torch.mm, torch.ones(2, 3, 1), torch.ones(3, 3))
    check(torch.mm, torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float64))
    check(
        lambda x, y: torch.mm(x, y, out=torch.empty(0, dtype=torch.float64, device=x.device)),
        torch.ones(2, 3),
        torch.ones(3, 2),
    )
    with (
        foo_rs.fallback_disabled(),
        pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"),
    ):
        torch.mm(torch.ones(2, 3, device="foo"), torch.ones(4, 5, device="foo"))


def test_mm_out_resize_warns_like_cpu():
    a, b = torch.ones(2, 3), torch.ones(3, 2)
    with pytest.warns(UserWarning, match="was resized"):
        torch.mm(a, b, out=torch.empty(5))
    with foo_rs.fallback_disabled(), pytest.warns(UserWarning, match="was resized"):
        o = torch.empty(5, device="foo")
        torch.mm(a.to("foo"), b.to("foo"), out=o)
    assert o.shape == (2, 2) and o.cpu().eq(3).all()


@pytest.mark.parametrize("bias_shape", [(5,), (4, 5), (1, 5), (4, 1), ()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_addmm(bias_shape, dtype):
    a, b, c = mat((4, 6), dtype, 1), mat((6, 5), dtype, 2), mat(bias_shape, dtype, 3)
    check(torch.addmm, c, a, b)
    if dtype.is_floating_point:
        check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0), c, a, b)
    else:
        check(lambda c, a, b: torch.addmm(c, a, b, beta=3, alpha=-2), c, a, b)


def test_addmm_beta_zero_ignores_nan_and_inplace():
    c = torch.full((3, 2), float("nan"))
    a, b = mat((3, 4), torch.float32, 1), mat((4, 2), torch.float32, 2)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), c, a, b)
    check(lambda c, a, b: c.addmm_(a, b, alpha=0.5), mat((3, 2), torch.float32, 3), a, b)
    check(lambda c, a, b: torch.addmm(c, a, b, out=torch.empty(0, device=a.device)), mat((2,), torch.float32, 4), a, b)
    check(torch.addmm, torch.ones(3), a, b)  # bias does not broadcast


def test_linear_is_native():
    x, w, bias = mat((8, 5), torch.float32, 1), mat((3, 5), torch.float32, 2), mat((3,), torch.float32, 3)
    check(F.linear, x, w, bias)
    check(F.linear, x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32])
def test_bmm_baddbmm_addbmm(dtype):
    a, b = mat((3, 4, 6), dtype, 1), mat((3, 6, 5), dtype, 2)
    if dtype == torch.int32:
        a, b = a % 7, b % 7
    c = mat((4, 5), dtype, 3)
    check(torch.bmm, a, b)
    check(torch.bmm, a.transpose(1, 2).contiguous().transpose(1, 2), b)
    check(torch.baddbmm, c, a, b)
    check(lambda c, a, b: torch.baddbmm(c, a, b, beta=2, alpha=3), c, a, b)
    check(torch.addbmm, c, a, b)
    check(lambda c, a, b: c.clone().addbmm_(a, b, beta=2, alpha=3), c, a, b)
    check(torch.bmm, a, b[:2])
    check(torch.bmm, a[0], b)
    check(torch.bmm, torch.ones(3, 0, 2, dtype=dtype), torch.ones(3, 2, 4, dtype=dtype))
    # Expanded (stride 0) batch operand.
    check(torch.bmm, a, b[:1].expand(3, 6, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "m,n,k", [(1, 1, 1), (4, 4, 8), (8, 16, 16), (8, 16, 17), (2, 128, 8), (2, 129, 8), (16, 128, 1), (3, 5, 0)]
)
def test_products_either_side_of_the_small_kernel(dtype, m, n, k):
    # foo multiplies products of at most 2048 multiply-adds with rows at most
    # 128 wide in a direct loop (the gemm crate's set-up costs more), larger
    # ones with gemm: these shapes sit on both sides of both limits.
    a, b, c = mat((m, k), dtype, 1), mat((k, n), dtype, 2), mat((m, n), dtype, 3)
    check(torch.mm, a, b)
    check(torch.mm, a.t().contiguous().t(), b.t().contiguous().t())
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0), c, a, b)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), torch.full((m, n), float("nan"), dtype=dtype), a, b)
    check(lambda c, a, b: torch.mm(a, b, out=c), torch.empty(n, m, dtype=dtype).t(), a, b)
    check(torch.bmm, mat((3, m, k), dtype, 4), mat((3, k, n), dtype, 5))
    check(
        lambda x, y: torch.baddbmm(x, x @ y, y.transpose(1, 2), alpha=0.25),
        mat((2, m, k), dtype, 6),
        mat((2, k, m), dtype, 7),
    )
    if k:
        bad = a.clone()
        bad[0, 0] = float("nan")
        if m > 1:
            bad[-1, -1] = float("inf")
        check(torch.mm, bad, b)


def test_many_small_bmm_and_large_bmm():
    check(torch.bmm, mat((200, 5, 7), torch.float32, 1), mat((200, 7, 3), torch.float32, 2))
    check(torch.bmm, mat((2, 150, 120), torch.float32, 3), mat((2, 120, 140), torch.float32, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_mv_addmv_dot(dtype):
    m, v, w = mat((6, 9), dtype, 1), mat((9,), dtype, 2), mat((6,), dtype, 3)
    check(torch.mv, m, v)
    check(torch.mv, m.t().contiguous().t(), v)
    check(torch.addmv, w, m, v)
    check(lambda w, m, v: torch.addmv(w, m, v, beta=2, alpha=3), w, m, v)
    check(torch.dot, v, v)
    check(torch.dot, m[:, 0], m[:, 1])  # strided
    check(torch.vdot, v, v)
    check(torch.dot, v, v[:3])
    check(torch.dot, v, m)
    check(torch.mv, m, v[:4])


def test_dot_large_and_dtype_mismatch():
    check_accurate(torch.dot, mat((100_001,), torch.float32, 1), mat((100_001,), torch.float32, 2))
    check(torch.dot, torch.ones(3), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize(
    "shapes",
    [
        ((5,), (5,)),
        ((3, 5), (5,)),
        ((5,), (5, 4)),
        ((2, 3, 5), (5, 4)),
        ((3, 5), (2, 5, 4)),
        ((2, 1, 3, 5), (4, 5, 2)),
        ((2, 3, 5), (2, 5, 4)),
    ],
)
def test_matmul(shapes):
    check(torch.matmul, mat(shapes[0], torch.float32, 1), mat(shapes[1], torch.float32, 2))


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------

DIMS = [None, 0, 1, -1, (0, 2), (2, 0), (), (0, 1, 2)]


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_dims(dim, keepdim):
    x = make_tensor((4, 5, 6), torch.float32, 1)
    if dim is None:
        check(torch.sum, x)
        check(torch.mean, x)
        return
    check(torch.sum, x, dim, keepdim)
    check(torch.mean, x, dim, keepdim)
    check(torch.sum, x.transpose(0, 2), dim, keepdim)
    check(torch.mean, x[:, ::2, 1:], dim, keepdim)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_sum_prod_dtypes(dtype):
    x = make_tensor((3, 7), dtype, 2)
    if dtype in INTS:
        x = x % 4
    check(torch.sum, x)
    check(torch.sum, x, 1)
    check(torch.sum, x, 0, True)
    check(torch.prod, x)
    check(torch.prod, x, 1)
    check(lambda x: torch.sum(x, 1, dtype=torch.float64), x)
    check(lambda x: torch.sum(x, 1, dtype=torch.int32), x)
    check(torch.nansum, x)
    check(torch.nansum, x, 0)
    if dtype.is_floating_point:
        check(torch.mean, x, 1)
        check(lambda x: torch.mean(x, 1, dtype=torch.float64), x)
    else:
        check(torch.mean, x)  # error: not floating
        check(lambda x: torch.mean(x.float(), 0, dtype=torch.int64), x)


def test_sum_edge_cases():
    check(torch.sum, torch.tensor(3.5))
    check(torch.sum, torch.tensor(3.5), 0)
    check(torch.sum, torch.tensor(3.5), 1)
    check(torch.sum, torch.ones(0, 4), 0)
    check(torch.sum, torch.ones(0, 4), 1)
    check(torch.mean, torch.ones(0, 4), 0)
    check(torch.prod, torch.ones(0, 4), 0)
    check(torch.sum, torch.ones(3, 4), (0, 0))
    check(torch.sum, torch.ones(3, 4), 2)
    check(torch.sum, torch.ones(3, 1).expand(3, 1000), 1)  # stride-0 reduced dim
    check(torch.sum, torch.ones(1, 5).expand(1000, 5), 0)
    check(torch.nansum, torch.tensor([1.0, float("nan"), 2.0]))
    check(lambda x: torch.sum(x, 0, out=torch.empty(0, dtype=torch.int64, device=x.device)), torch.ones(2, 3))
    check(lambda x: torch.sum(x, 0, out=torch.empty(0, device=x.device)), torch.ones(2, 3, dtype=torch.int32))
    check(
        lambda x: torch.sum(x, 0, dtype=torch.float32, out=torch.empty(0, dtype=torch.float64, device=x.device)),
        torch.ones(2, 3, dtype=torch.int32),
    )
    check(lambda x: torch.mean(x, 0, out=torch.empty(0, dtype=torch.float64, device=x.device)), torch.ones(2, 3))


@pytest.mark.parametrize("n", [1, 31, 4097, 100_003, 1_000_000])
def test_large_sums(n):
    x = make_tensor((n,), torch.float32, n)
    y = make_tensor((n // 10 + 1, 10), torch.float32, 2)
    if n < 10_000:
        check(torch.sum, x)
        check(torch.mean, x)
        check(torch.sum, y, 0)
    check(torch.sum, y, 1)
    check_accurate(torch.sum, x)
    check_accurate(torch.mean, x)
    check_accurate(lambda y: torch.sum(y, 0), y)
    check_accurate(lambda y: torch.sum(y.t(), 1), y)
    check_accurate(lambda y: torch.sum(y, 0), y.abs())


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
def test_max_min_family(dtype):
    x = make_tensor((5, 8), dtype, 3)
    if dtype in INTS:
        x = x % 4  # ties
    for fn in (torch.amax, torch.amin):
        check(fn, x)
        check(fn, x, 1)
        check(fn, x, (0, 1), True)
        check(fn, x.t(), 0)
    check(torch.max, x)
    check(torch.min, x)
    check(torch.max, x, 1)
    check(torch.min, x, 0, True)
    check(torch.max, x.t(), 1)
    if dtype != torch.bool:
        check(torch.argmax, x)
        check(torch.argmin, x, 1)
        check(torch.argmax, x, 0, True)
        check(torch.argmax, x, keepdim=True)
        check(torch.aminmax, x)
        check(lambda x: torch.aminmax(x, dim=1, keepdim=True), x)


def test_max_min_nan_ties_and_errors():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 2.0, -1.0, 2.0]])
    check(torch.max, x)
    check(torch.max, x, 1)
    check(torch.min, x, 1)
    check(torch.argmax, x, 1)
    check(torch.amax, x, 1)
    check(torch.argmax, torch.tensor([0.0] * 100 + [5.0] * 100 + [5.0]))
    e = torch.ones(0, 4)
    check(torch.amax, e)
    check(torch.amax, e, 1)
    check(torch.amax, e, 0)
    check(torch.max, e)
    check(torch.max, e, 0)
    check(torch.argmax, e)
    check(torch.argmax, e, 1)
    check(torch.max, torch.tensor(2.5), 0)
    check(torch.argmax, torch.tensor(2.5))
    check(lambda x: torch.amax(x, 0, out=torch.empty(0, dtype=torch.float64, device=x.device)), torch.ones(2, 2))
    check(lambda x: torch.argmax(x, 0, out=torch.empty(0, dtype=torch.int32, device=x.device)), torch.ones(2, 2))


@pytest.mark.parametrize("correction", [0, 1, 2.5])
@pytest.mark.parametrize("dim", [None, 0, (0, 2), -1])
def test_var_std(correction, dim):
    x = make_tensor((6, 5, 7), torch.float32, 4)
    check(lambda x: torch.var(x, dim, correction=correction), x)
    check(lambda x: torch.std(x, dim, correction=correction, keepdim=True), x)
    check(lambda x: torch.var_mean(x, dim, correction=correction), x)
    check(lambda x: torch.std_mean(x, dim, correction=correction), x)


def test_var_edge_cases():
    check(torch.var, torch.ones(1))
    check(torch.var, torch.ones(3, dtype=torch.int32))
    check(torch.std, make_tensor((4, 3), torch.float64, 1), 1)
    check(torch.var, make_tensor((4, 3), torch.bfloat16, 2), 0)
    check(lambda x: torch.var(x, unbiased=False), make_tensor((100,), torch.float32, 3))
    with pytest.warns(UserWarning, match="degrees of freedom"):
        torch.var(torch.ones(1, device="foo"))


@pytest.mark.parametrize("ord", [2, 1, 0, 3, 0.5, math.inf, -math.inf, -1])
def test_vector_norm(ord):
    x = make_tensor((5, 6), torch.float32, 5)
    check(torch.linalg.vector_norm, x, ord)
    check(lambda x: torch.linalg.vector_norm(x, ord, dim=1, keepdim=True), x)
    check(lambda x: torch.linalg.vector_norm(x, ord, dim=(0, 1)), x)
    check(lambda x: torch.linalg.vector_norm(x, ord, dtype=torch.float64), x)


def test_norm_variants_and_errors():
    x = make_tensor((5, 6), torch.float32, 6)
    check(torch.norm, x)
    check(lambda x: torch.norm(x, p=1, dim=1), x)
    check(lambda x: x.norm(3, 0, True), x)
    check(torch.linalg.vector_norm, torch.ones(3, dtype=torch.int32))
    check(lambda x: torch.linalg.vector_norm(x, math.inf), torch.ones(0))
    check(lambda x: torch.linalg.vector_norm(x, math.inf, dim=0), torch.ones(0, 3))
    check(lambda x: torch.linalg.vector_norm(x, math.inf, dim=1), torch.ones(0, 3))
    check(torch.linalg.vector_norm, torch.ones(0, 3))
    check(torch.linalg.vector_norm, make_tensor((4,), torch.bfloat16, 1))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.float32, torch.int64])
def test_all_any_count_nonzero(dtype):
    x = make_tensor((4, 5), dtype, 7)
    if dtype != torch.bool:
        x = x * (make_tensor((4, 5), torch.bool, 8)).to(dtype)
    for fn in (torch.all, torch.any):
        check(fn, x)
        check(fn, x, 1)
        check(fn, x, 0, True)
        check(lambda x: fn(x, (0, 1)), x)
    check(torch.all, torch.ones(0, 3, dtype=dtype))
    check(torch.any, torch.ones(0, 3, dtype=dtype), 0)
    check(torch.count_nonzero, x)
    check(torch.count_nonzero, x, 1)
    check(lambda x: torch.count_nonzero(x, (0, 1)), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.bool, torch.uint8])
def test_trace(dtype):
    x = make_tensor((5, 7), dtype, 10)
    check(torch.trace, x)
    check(torch.trace, x.t())
    check(torch.trace, torch.ones(0, 3, dtype=dtype))
    check(torch.trace, torch.ones(3, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.bool, torch.uint8])
def test_cumsum_cumprod(dtype):
    x = make_tensor((4, 6), dtype, 9)
    if dtype in INTS:
        x = x % 3
    for fn in (torch.cumsum, torch.cumprod):
        check(fn, x, 0)
        check(fn, x, 1)
        check(fn, x.t(), -1)
        check(lambda x: fn(x, 1, dtype=torch.float64), x)
    check(torch.cumsum, torch.tensor(2.0), 0)
    check(torch.cumsum, torch.ones(0, 3), 1)
    check(torch.cumsum, x, 2)
    check(torch.cumsum, make_tensor((50_000,), torch.float32, 1), 0)


# ---------------------------------------------------------------------------
# softmax, losses
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dtype, dim):
    x = make_tensor((6, 37, 5), dtype, 1)
    check(torch.softmax, x, dim)
    check(torch.log_softmax, x, dim)
    check(torch.softmax, x.transpose(0, 2), dim)
    y = torch.softmax(x, dim)
    ly = torch.log_softmax(x, dim)
    g = make_tensor(x.shape, dtype, 2)
    check(torch.ops.aten._softmax_backward_data, g, y, dim, dtype)
    check(torch.ops.aten._log_softmax_backward_data, g, ly, dim, dtype)


def test_softmax_edge_cases():
    check(torch.softmax, torch.tensor(1.5), 0)
    check(torch.log_softmax, torch.tensor(1.5), -1)
    check(torch.softmax, torch.ones(0, 3), 1)
    check(torch.softmax, torch.ones(3, dtype=torch.int32), 0)
    check(torch.softmax, torch.ones(3), 1)
    check(torch.softmax, torch.tensor([[float("-inf"), 0.0, 1.0], [float("-inf")] * 3]), 1)
    check(torch.log_softmax, torch.tensor([[float("-inf"), 0.0, 1.0]]), 1)
    check(torch.ops.aten._softmax, torch.ones(3, dtype=torch.float16), 0, True)
    check(torch.softmax, make_tensor((3, 5000), torch.float32, 3) * 10, 1)
    check(lambda x: torch.softmax(x, 1, dtype=torch.float64), make_tensor((3, 4), torch.float32, 4))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    x = torch.log_softmax(make_tensor((7, 5), torch.float32, 1), 1)
    t = torch.tensor([0, 4, -100, 2, 2, 1, 3])
    w = make_tensor((5,), torch.float32, 2).abs() if weighted else None
    check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x, t, w)
    check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction, ignore_index=2), x, t.clamp(min=0), w)
    out, tw = torch.ops.aten.nll_loss_forward(x, t, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100)
    g = make_tensor(out.shape, torch.float32, 3)
    check(torch.ops.aten.nll_loss_backward, g, x, t, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100, tw)
    # 1-d input (no batch), N-d input (nll_loss2d)
    check(lambda x, t: F.nll_loss(x, t, reduction=reduction), x[0], t[1])
    x4 = make_tensor((2, 5, 3, 4), torch.float32, 4)
    t4 = (make_tensor((2, 3, 4), torch.int64, 5) % 5).abs()
    check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x4, t4, w)
    out4, tw4 = torch.ops.aten.nll_loss2d_forward(x4, t4, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100)
    g4 = make_tensor(out4.shape, torch.float32, 6)
    check(torch.ops.aten.nll_loss2d_backward, g4, x4, t4, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100, tw4)


def test_nll_loss_errors_and_dtypes():
    x = torch.log_softmax(make_tensor((3, 5), torch.float64, 1), 1)
    check(F.nll_loss, x, torch.tensor([1, 2, 7]))
    check(F.nll_loss, x, torch.tensor([1, 2, -1]))
    check(F.nll_loss, x, torch.tensor([1, 2]))
    check(F.nll_loss, x, torch.tensor([1, 2, 1], dtype=torch.int32))
    check(F.nll_loss, x, torch.tensor([1, 2, 1], dtype=torch.uint8))
    check(lambda x, t: F.nll_loss(x, t, torch.ones(4, dtype=torch.float64)), x, torch.tensor([1, 2, 1]))
    check(lambda x, t: F.nll_loss(x, t, torch.ones(5)), x, torch.tensor([1, 2, 1]))
    check(F.nll_loss, x, torch.tensor([-100, -100, -100]))
    check(F.nll_loss, x.to(torch.bfloat16), torch.tensor([0, 1, 2]))


def test_cross_entropy_forward():
    x = make_tensor((16, 10), torch.float32, 1)
    t = (make_tensor((16,), torch.int64, 2) % 10).abs()
    check(F.cross_entropy, x, t)
    check(lambda x, t: F.cross_entropy(x, t, reduction="sum"), x, t)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_mse_loss(reduction, dtype):
    a, b = make_tensor((4, 7), dtype, 1), make_tensor((4, 7), dtype, 2)
    check(lambda a, b: F.mse_loss(a, b, reduction=reduction), a, b)
    r = {"none": 0, "mean": 1, "sum": 2}[reduction]
    g = make_tensor((4, 7) if r == 0 else (), dtype, 3)
    check(torch.ops.aten.mse_loss_backward, g, a, b, r)
    check(lambda a, b: torch.ops.aten.mse_loss(a, b, r), a, b[0])  # broadcast
    check(lambda a, b: torch.ops.aten.mse_loss(a, b, r), a.t(), b.t())


def test_mse_loss_int_error():
    check(
        lambda a, b: torch.ops.aten.mse_loss(a, b, 1),
        torch.ones(3, dtype=torch.int32),
        torch.ones(3, dtype=torch.int32),
    )


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_dense_backward(scale, padding_idx):
    g = make_tensor((4, 6, 3), torch.float32, 1)
    idx = (make_tensor((4, 6), torch.int64, 2) % 7).abs()
    check(torch.ops.aten.embedding_dense_backward, g, idx, 7, padding_idx, scale)


# ---------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))


def test_training_step_matches_cpu_without_falling_back():
    x = make_tensor((64, 20), torch.float32, 1) / 10
    y = (make_tensor((64,), torch.int64, 2) % 5).abs()
    models = {"cpu": _mlp(0), "foo": _mlp(0).to("foo")}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for k, m in models.items()}
    data = {"cpu": (x, y), "foo": (x.to("foo"), y.to("foo"))}
    foo_rs.reset_fallback_stats()
    losses = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        for dev in ("cpu", "foo"):
            for _ in range(3):
                opts[dev].zero_grad(set_to_none=True)
                loss = F.cross_entropy(models[dev](data[dev][0]), data[dev][1])
                loss.backward()
                opts[dev].step()
            losses[dev] = loss.item()
    stats = foo_rs.fallback_stats()
    own = {k for k in stats if k.removeprefix("aten::") in OWN_OPS}
    assert not own, f"ops of this family fell back to the CPU: {own}"
    assert losses["foo"] == pytest.approx(losses["cpu"], rel=1e-5, abs=1e-6)
    for pc, pf in zip(models["cpu"].parameters(), models["foo"].parameters()):
        torch.testing.assert_close(pf.detach().cpu(), pc.detach())


def test_every_own_op_is_registered():
    assert OWN_OPS <= foo_rs.native_ops()


def test_printing_reductions_are_native():
    x = make_tensor((3, 4), torch.float32, 1).to("foo")
    with foo_rs.fallback_disabled():
        assert x.max().item() == x.cpu().max().item()
        assert x.min().item() == x.cpu().min().item()
        assert x.sum().item() == pytest.approx(x.cpu().sum().item(), rel=1e-6)


@pytest.mark.parametrize(
    "case",
    ["x @ W.t() + b (Linear)", "g @ W", "g.t() @ h", "300x257 @ 257x301", "700x300 @ 300x64"],
)
def test_products_split_over_threads_match_one_thread_bit_for_bit(case):
    """Mid-size float32 products are split into row or column blocks over
    foo's pool (linalg.rs, SPLIT_WORK): the same bits at 1 and 2 threads, and
    CPU's values."""
    g = torch.Generator().manual_seed(7)

    def r(*s):
        return torch.randn(*s, generator=g)

    x, w, b, h = r(256, 256), r(256, 256), r(256), r(256, 64)
    fns = {
        "x @ W.t() + b (Linear)": (lambda x, w, b, h: torch.addmm(b, x, w.t()), (x, w, b, h)),
        "g @ W": (lambda x, w, b, h: x @ w, (x, w, b, h)),
        "g.t() @ h": (lambda x, w, b, h: x.t() @ h, (x, w, b, h)),
        "300x257 @ 257x301": (lambda x, w, b, h: x @ w, (r(300, 257), r(257, 301), b, h)),
        "700x300 @ 300x64": (lambda x, w, b, h: x @ w, (r(700, 300), r(300, 64), b, h)),
    }
    fn, args = fns[case]
    dev = [a.to("foo") for a in args]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fn(*dev).cpu()
        torch.set_num_threads(2)
        two = fn(*dev).cpu()
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    # Sums of 256-300 products of N(0, 1) values: CPU's BLAS adds in another
    # order, about 1e-5 apart in absolute terms (float32's default atol).
    torch.testing.assert_close(one, fn(*args), atol=1e-4, rtol=1e-5)
