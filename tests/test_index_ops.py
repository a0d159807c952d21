"""Indexing and shape ops on foo (python/foo_rs/_ops/index.py) against torch CPU:
cat/stack, index_select, advanced indexing and index_put_, gather, the scatter
family, index_add/index_fill, nonzero, masked_select, flip, roll, tril/triu,
arange, linspace. Every test runs with the CPU fallback off (`no_fallback`)."""

import warnings

import pytest
import torch

import foo_rs
from foo_testing import REAL_DTYPES, make_tensor

pytestmark = pytest.mark.usefixtures("no_fallback")

FOO = torch.device("foo")
NUM_DTYPES = [d for d in REAL_DTYPES if d != torch.bool]


def to_foo(x):
    if isinstance(x, torch.Tensor):
        return x.to(FOO)
    if isinstance(x, (list, tuple)):
        return type(x)(to_foo(v) for v in x)
    return x


def compare(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert b.device.type == "foo", b.device
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape, (a.shape, b.shape)
        torch.testing.assert_close(
            b.cpu(),
            a,
            equal_nan=True,
            atol=1e-5 if a.dtype != torch.bfloat16 else 1e-2,
            rtol=1e-3 if a.dtype in (torch.float16, torch.bfloat16) else 1.3e-6,
        )
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            compare(x, y)
    else:
        assert a == b


def check(fn, *args, mutated=(), **kwargs):
    """Runs fn on CPU args and on foo copies; compares results and the args
    at positions `mutated`; if CPU raises, foo must raise the same type."""
    cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    foo_args = [to_foo(a) for a in args]
    foo_kwargs = {k: to_foo(v) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings(record=True) as cpu_w:
            warnings.simplefilter("always")
            expected = fn(*cpu_args, **kwargs)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*foo_args, **foo_kwargs)
        return None
    with warnings.catch_warnings(record=True) as foo_w:
        warnings.simplefilter("always")
        got = fn(*foo_args, **foo_kwargs)
    compare(expected, got)
    # an out= resize warns on foo exactly when it does on CPU
    assert any("resized" in str(w.message) for w in foo_w) == any("resized" in str(w.message) for w in cpu_w)
    for i in mutated:
        compare(cpu_args[i], foo_args[i])
    return got


def idx(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


# ---------------------------------------------------------------------------
# cat / stack
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_cat_dtypes_dims(dtype):
    a, b = make_tensor((2, 3, 4), dtype, 1), make_tensor((2, 5, 4), dtype, 2)
    check(lambda x, y: torch.cat([x, y], 1), a, b)
    check(lambda x, y: torch.cat([x, y], -2), a, b)
    check(lambda x, y: torch.cat([x, x, x], 0), a, b)
    check(lambda x: torch.stack([x, x], 2), a)
    check(lambda x: torch.hstack([x, x]), a)
    check(lambda x: torch.vstack([x, x]), a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.uint8])
def test_cat_of_contiguous_inputs_by_blocks(dtype):
    # Contiguous inputs into a contiguous result up to one serial copy's size
    # are copied block by block (a memmove per input per outer index); larger
    # ones by the copy engine. Every dim, uneven and zero extents, both sides
    # of the size limit, and out= into a slice of one of the inputs' storage.
    for shape, dim in [((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), 2), ((5,), 0), ((64, 300, 8), 1)]:
        a = make_tensor(shape, dtype, 1)
        b = make_tensor(shape[:dim] + (shape[dim] + 2,) + shape[dim + 1 :], dtype, 2)
        z = make_tensor(shape[:dim] + (0,) + shape[dim + 1 :], dtype, 3)
        check(lambda x, y, e: torch.cat([x, e, y, x], dim), a, b, z)
        check(lambda x, y: torch.cat([y, x], dim - len(shape)), a, b)
    base = make_tensor((6, 4), dtype, 4)
    check(lambda t: torch.cat([t[:2], t[2:3]], 0, out=t[3:6]), base, mutated=(0,))


def test_cat_strided_and_transposed():
    a = make_tensor((4, 6), torch.float32, 3)
    check(lambda x: torch.cat([x.t(), x[:, ::2].t()], 0), a)
    check(lambda x: torch.cat([x[::2], x.flip(0)[:1]], 0), a)
    check(lambda x: torch.cat([x.expand(2, 4, 6), x.unsqueeze(0)], 0), a)


@pytest.mark.parametrize(
    "d1,d2",
    [
        (torch.int64, torch.float16),
        (torch.bool, torch.uint8),
        (torch.int8, torch.uint8),
        (torch.float32, torch.float64),
        (torch.bfloat16, torch.float16),
        (torch.int32, torch.bool),
    ],
)
def test_cat_type_promotion(d1, d2):
    check(lambda x, y: torch.cat([x, y]), make_tensor((3, 2), d1, 4), make_tensor((1, 2), d2, 5))


def test_cat_legacy_empty_and_zero_size():
    a = make_tensor((2, 3), torch.float32, 6)
    check(lambda x, e: torch.cat([e, x, e], 1), a, torch.empty(0, dtype=torch.int64))
    check(lambda x: torch.cat([x[:0], x], 0), a)
    check(lambda x: torch.cat([x[:, :0], x[:, :0]], 1), a)
    check(lambda e: torch.cat([e, e]), torch.empty(0))


def test_cat_out():
    a, b = make_tensor((2, 3), torch.int32, 7), make_tensor((2, 3), torch.int64, 8)
    check(lambda x, y, o: torch.cat([x, y], 0, out=o), a, b, torch.empty(0, dtype=torch.float32), mutated=(2,))
    check(lambda x, y, o: torch.cat([x, y], 1, out=o), a, b, torch.empty(2, 6, dtype=torch.int64), mutated=(2,))
    # out of the wrong shape is resized; out whose dtype can't hold the result raises
    check(lambda x, y, o: torch.cat([x, y], 1, out=o), a, b, torch.empty(5, dtype=torch.int64), mutated=(2,))
    check(lambda x, o: torch.cat([x.float(), x], out=o), a, torch.empty(0, dtype=torch.int64))
    check(lambda x, o: torch.cat([x, x], out=o), a, torch.empty(4, 3, dtype=torch.bool))
    # out strided (a transposed buffer)
    check(lambda x, y, o: torch.cat([x, y], 0, out=o.t()), a, b, torch.empty(3, 4, dtype=torch.int64), mutated=(2,))


def test_cat_bad_input():
    a = make_tensor((2, 3), torch.float32, 9)
    check(lambda x: torch.cat([x, torch.ones(2, 4)], 0), a)  # size mismatch
    check(lambda x: torch.cat([x, x.reshape(-1)], 0), a)  # ndim mismatch
    check(lambda x: torch.cat([x, x], 2), a)  # dim out of range
    check(lambda x: torch.cat([x[0, 0], x[0, 0]]), a)  # zero-dim
    with pytest.raises(RuntimeError):
        x = a.to(FOO)
        torch.cat([x, x], out=x[:1])  # output aliases an input


def test_cat_channels_last():
    a = make_tensor((2, 3, 4, 5), torch.float32, 10).to(memory_format=torch.channels_last)
    f = torch.cat([a.to(FOO), a.to(FOO)], 1)
    c = torch.cat([a, a], 1)
    compare(c, f)
    assert f.stride() == c.stride()


def test_cat_cross_device_raises():
    x0 = torch.ones(2, device="foo:0")
    x1 = torch.ones(2, device="foo:1")
    with pytest.raises(RuntimeError):
        torch.cat([x0, x1])


# ---------------------------------------------------------------------------
# index_select / embedding
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select_dtypes(dtype, index_dtype):
    x = make_tensor((4, 5, 3), dtype, 11)
    for dim, ii in [(0, [3, 0, 0, 2]), (1, [4, 1]), (-1, [2, 2, 0, 1, 0]), (2, [])]:
        check(lambda x, i, d=dim: torch.index_select(x, d, i), x, idx(ii, index_dtype))


def test_index_select_strided_zero_size_0d():
    x = make_tensor((6, 8), torch.float32, 12)
    check(lambda x, i: torch.index_select(x.t(), 0, i), x, idx([7, 0, 3]))
    check(lambda x, i: torch.index_select(x[:, ::3], 1, i[::2]), x, idx([2, 9, 0, 9, 1]))
    check(lambda x, i: torch.index_select(x[:0], 1, i), x, idx([1, 2]))
    check(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor(3))
    check(lambda x, i: torch.index_select(x[0, 0], 0, i), x, idx([0]))
    check(lambda x, i: torch.index_select(x[0, 0], 0, i), x, torch.tensor(0))


def test_index_select_out():
    x = make_tensor((4, 5), torch.float64, 13)
    check(
        lambda x, i, o: torch.index_select(x, 1, i, out=o),
        x,
        idx([4, 0]),
        torch.empty(0, dtype=torch.float64),
        mutated=(2,),
    )
    check(lambda x, i, o: torch.index_select(x, 1, i, out=o), x, idx([4, 0]), torch.empty(0, dtype=torch.float32))


def test_index_select_bad_input():
    x = make_tensor((4, 5), torch.float32, 14)
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([4]))  # IndexError
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([-1]))  # IndexError
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([1 << 40]))
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([0.0], torch.float32))  # RuntimeError
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([[0]]))  # IndexError
    check(lambda x, i: torch.index_select(x, 2, i), x, idx([0]))  # dim out of range
    check(lambda x, i: torch.index_select(x[0, 0], 0, i), x, idx([1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_embedding_forward(dtype):
    w = make_tensor((10, 6), dtype, 15)
    check(lambda w, i: torch.nn.functional.embedding(i, w), w, idx([[1, 9, 1], [0, 0, 3]]))
    check(lambda w, i: torch.nn.functional.embedding(i, w), w, idx([[10]]))


# ---------------------------------------------------------------------------
# advanced indexing
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_index_tensor_dtypes(dtype):
    x = make_tensor((4, 5, 6), dtype, 16)
    i, j = idx([3, -1, 0]), idx([[4], [0]], torch.int32)
    check(lambda x, i: x[i], x, i)
    check(lambda x, i: x[:, i], x, i)
    check(lambda x, i, j: x[j, i], x, i, j)  # broadcast [2,1] x [3]
    check(lambda x, i, j: x[i, :, j], x, i, j)  # non-adjacent: dims to the front
    check(lambda x, i: x[..., i], x, i)
    check(lambda x, i: x[1:, i, ::2], x, i)
    check(lambda x: x[x > x.flatten()[7]], x)  # bool mask over all dims
    check(lambda x, m: x[m], x, make_tensor((4,), torch.bool, 17))
    check(lambda x, m: x[:, m], x, make_tensor((5, 6), torch.bool, 18))


def test_index_tensor_strided_zero_size():
    x = make_tensor((6, 7), torch.float32, 19)
    check(lambda x, i: x.t()[i], x, idx([6, 0]))
    check(lambda x, i: x[::2, 1::3][i], x, idx([2, 0, 1]))
    check(lambda x, i: x[i], x, idx([], torch.int64))
    check(lambda x, i: x[:0, i], x, idx([1, 2]))
    check(lambda x, m: x[m], x, torch.zeros(6, 7, dtype=torch.bool))
    check(lambda x, i: torch.ops.aten.index.Tensor(x, [None, i]), x, idx([1]))
    check(lambda x, i: torch.ops.aten.index.Tensor_out(x, [i], out=torch.empty(0, device=x.device)), x, idx([1, 5]))


def test_index_tensor_byte_mask():
    x = make_tensor((3, 4), torch.int16, 20)
    check(lambda x, m: x[m], x, torch.tensor([1, 0, 1], dtype=torch.uint8))


def test_index_tensor_bad_input():
    x = make_tensor((3, 4), torch.float32, 21)
    check(lambda x, i: x[i], x, idx([3]))  # IndexError
    check(lambda x, i: x[i], x, idx([-4]))
    check(lambda x, i: x[:, i], x, idx([1 << 50]))
    check(lambda x, i: x[i], x, idx([0.0], torch.float32))  # IndexError
    check(lambda x, i: x[i], x, idx([0], torch.int16))
    check(lambda x, m: x[m], x, torch.tensor([True, False]))  # mask shape
    check(lambda x, i: x[i, i, i], x, idx([0]))  # too many
    check(lambda x, i, j: x[i, j], x, idx([0, 1]), idx([0, 1, 2]))  # broadcast


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    x = make_tensor((4, 5), dtype, 22)
    v = make_tensor((3, 5), dtype, 23)
    i = idx([3, 0, -1]) if not accumulate else idx([3, 0, 3])  # duplicates summed with accumulate
    check(lambda x, i, v: x.index_put_((i,), v, accumulate=accumulate), x, i, v, mutated=(0,))
    check(
        lambda x, i, v: x.index_put_((None, i), v[:, :3].t(), accumulate=accumulate), x, idx([4, 1, 2]), v, mutated=(0,)
    )
    check(lambda x, i, v: x.index_put((i, i), v[0, :3], accumulate=accumulate), x, idx([1, 2, 3]), v)
    check(lambda x, v: x.index_put_((x != x.flatten()[0],), v[0, 0], accumulate=accumulate), x, v, mutated=(0,))


def test_index_put_duplicates_accumulate_float():
    x = torch.zeros(3, dtype=torch.float32)
    i = torch.tensor([0, 1, 0, 0, 2, 1] * 100)
    v = make_tensor((600,), torch.float32, 24)
    check(lambda x, i, v: x.index_put_((i,), v, accumulate=True), x, i, v, mutated=(0,))


def test_setitem_forms():
    x = make_tensor((4, 6), torch.float32, 25)

    def f1(x):
        x[x > 0] = 0.5
        return x

    def f2(x, i):
        x[i, 1:3] = torch.ones(2, device=x.device)
        return x

    def f3(x, i):
        x.t()[i] = -1.0
        return x

    check(f1, x)
    check(f2, x, idx([0, 3]))
    check(f3, x, idx([5, 0]))


def test_index_put_bad_input():
    x = make_tensor((3, 4), torch.float32, 26)
    check(lambda x, i: x.index_put_((i,), torch.tensor(1.0)), x, idx([3]))  # IndexError
    check(lambda x, i: x.index_put_((i,), torch.tensor(1.0), accumulate=True), x, idx([-5]))
    check(lambda x, i: x.index_put_((i,), torch.tensor(1.0, dtype=torch.float64)), x, idx([1]))  # RuntimeError
    check(lambda x, i: x.index_put_((i,), torch.ones(3)), x, idx([1]))  # shape mismatch
    check(lambda x, i: x.index_put_((i,), torch.ones(1, device=x.device)), x, idx([0.0], torch.float32))


# ---------------------------------------------------------------------------
# gather / scatter
# ---------------------------------------------------------------------------


def _rand_index(shape, high, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_gather(dtype):
    x = make_tensor((4, 5, 3), dtype, 27)
    for dim in (0, 1, -1):
        i = _rand_index((3, 2, 3), x.shape[dim], 28 + dim)
        check(lambda x, i, d=dim: torch.gather(x, d, i), x, i)
    check(lambda x, i: torch.gather(x, 1, i), x, _rand_index((4, 7, 3), 5, 31))  # index larger along dim
    check(lambda x, i: torch.gather(x.transpose(0, 2), 2, i), x, _rand_index((3, 5, 2), 4, 32))
    check(lambda x, i: torch.gather(x, 0, i.int()), x, _rand_index((2, 2, 2), 4, 33))
    check(lambda x, i: torch.gather(x, 0, i), x, _rand_index((0, 2, 2), 4, 34))
    check(lambda x, i: torch.gather(x[0, 0, 0], 0, i), x, torch.tensor(0))
    check(
        lambda x, i, o: torch.gather(x, 1, i, out=o),
        x,
        _rand_index((4, 2, 3), 5, 35),
        torch.empty(0, dtype=dtype),
        mutated=(2,),
    )


def test_gather_bad_input():
    x = make_tensor((3, 4), torch.float32, 36)
    check(lambda x, i: torch.gather(x, 1, i), x, idx([[4]]))  # RuntimeError
    check(lambda x, i: torch.gather(x, 1, i), x, idx([[-1]]))
    check(lambda x, i: torch.gather(x, 1, i), x, torch.zeros(4, 1, dtype=torch.long))
    check(lambda x, i: torch.gather(x, 1, i), x, torch.zeros(4, dtype=torch.long))
    check(lambda x, i: torch.gather(x, 1, i), x, torch.zeros(1, 1, dtype=torch.int16))
    check(lambda x, i: torch.gather(x, 1, i, out=torch.empty(0, dtype=torch.float64, device=x.device)), x, idx([[0]]))


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_scatter_src_value(dtype):
    x = make_tensor((4, 5), dtype, 37)
    src = make_tensor((3, 6), dtype, 38)
    # unique indices per row (scatter without reduction is only defined then)
    i = torch.stack([torch.randperm(5, generator=torch.Generator().manual_seed(s))[:3] for s in range(3)])
    check(lambda x, i, s: x.scatter_(1, i, s), x, i, src, mutated=(0,))
    check(lambda x, i, s: torch.scatter(x, 1, i, s), x, i, src)
    check(lambda x, i: x.scatter_(1, i, 3), x, i, mutated=(0,))
    check(lambda x, i: torch.scatter(x, 1, i, torch.tensor(True).item() if dtype == torch.bool else 2), x, i)
    i0 = torch.stack([torch.randperm(4, generator=torch.Generator().manual_seed(s))[:2] for s in range(5)]).t()
    check(lambda x, i, s: x.scatter_(0, i, s), x, i0, src, mutated=(0,))
    check(lambda x, i, s, o: torch.scatter(x, 0, i, s, out=o), x, i0, src, torch.empty(0, dtype=dtype), mutated=(3,))


@pytest.mark.parametrize("dtype", NUM_DTYPES)
def test_scatter_add_and_old_reduce(dtype):
    x = make_tensor((4, 5), dtype, 39)
    src = make_tensor((6, 5), dtype, 40) if dtype.is_floating_point else torch.randint(-3, 4, (6, 5)).to(dtype)
    i = _rand_index((6, 5), 4, 41)  # duplicates
    check(lambda x, i, s: x.scatter_add_(0, i, s), x, i, src, mutated=(0,))
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), x, i, src)
    check(lambda x, i, s: x.scatter_(0, i, s, reduce="add"), x, i, src, mutated=(0,))
    check(lambda x, i, s: x.scatter_(0, i, s, reduce="multiply"), x, i, src, mutated=(0,))
    check(lambda x, i: x.scatter_(0, i, 2, reduce="multiply"), x, i, mutated=(0,))
    check(lambda x, i: x.scatter_(0, i, 2, reduce="add"), x, i, mutated=(0,))


@pytest.mark.parametrize("dtype", NUM_DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    x = make_tensor((5, 4), dtype, 42)
    src = make_tensor((7, 4), dtype, 43) if dtype.is_floating_point else torch.randint(-3, 4, (7, 4)).to(dtype)
    i = _rand_index((7, 3), 5, 44)
    check(lambda x, i, s: x.scatter_reduce_(0, i, s, reduce, include_self=include_self), x, i, src, mutated=(0,))
    check(
        lambda x, i, s: torch.scatter_reduce(
            x, 1, i.t()[:, :2].remainder(4), s.t()[:, :2], reduce, include_self=include_self
        ),
        x,
        i,
        src,
    )


def test_scatter_reduce_nan_and_bool():
    x = torch.tensor([1.0, float("nan"), 3.0])
    s = torch.tensor([float("nan"), 5.0, 0.0, 2.0])
    i = idx([0, 1, 2, 2])
    for r in ("amax", "amin", "sum"):
        check(lambda x, i, s, r=r: x.scatter_reduce(0, i, s, r), x, i, s)
    b = torch.tensor([True, False, False])
    bs = torch.tensor([True, False, True, False])
    for r in ("sum", "prod", "amax", "amin", "mean"):
        check(lambda x, i, s, r=r: x.scatter_reduce(0, i, s, r), b, i, bs)
    check(lambda x, i, s: x.scatter_add(0, i, s), b, i, bs)


def test_scatter_bad_input():
    x = make_tensor((3, 4), torch.float32, 45)
    check(lambda x, i: x.scatter_(1, i, 1.0), x, idx([[4]]))  # RuntimeError
    check(lambda x, i: x.scatter_(1, i, 1.0), x, idx([[-1]]))
    check(lambda x, i: x.scatter_add_(1, i, torch.ones(1, 1, device=x.device)), x, idx([[1 << 40]]))
    check(lambda x, i: x.scatter_(1, i, torch.ones(1, 1, dtype=torch.float64, device=x.device)), x, idx([[0]]))
    check(lambda x, i: x.scatter_(1, i, torch.ones(1, 1, device=x.device)), x, torch.zeros(2, 2, dtype=torch.long))
    check(lambda x, i: x.scatter_(1, i, 1.0), x, idx([[0.0]], torch.float32))
    check(lambda x, i: x.scatter_(1, i, 1.0, reduce="max"), x, idx([[0]]))
    check(lambda x, i: x.scatter_reduce_(1, i, torch.ones(1, 1, device=x.device), "max"), x, idx([[0]]))
    check(lambda x, i: x.scatter_reduce_(1, i, x, "sum"), x, idx([[0]]))  # src aliases self


# ---------------------------------------------------------------------------
# index_add / index_fill
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_index_add(dtype):
    x = make_tensor((5, 4), dtype, 46)
    src = make_tensor((3, 4), dtype, 47)
    check(lambda x, i, s: x.index_add_(0, i, s), x, idx([4, 0, 4]), src, mutated=(0,))
    check(lambda x, i, s: torch.index_add(x, 1, i, torch.cat([s, s])[:5, :2]), x, idx([3, 3], torch.int32), src)
    if dtype != torch.bool:
        check(lambda x, i, s: torch.index_add(x, 0, i, s, alpha=2), x, idx([1, 2, 1]), src)
    check(
        lambda x, i, s, o: torch.index_add(x, 0, i, s, out=o),
        x,
        idx([0, 1, 2]),
        src,
        torch.empty(0, dtype=dtype),
        mutated=(3,),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_index_add_paths(dtype):
    # CPU's two paths (scatter_add along the first/last dim with an int64
    # index; per-slice add otherwise) differ in error type and half rounding.
    x3 = make_tensor((3, 5, 4), dtype, 63)
    s3 = make_tensor((3, 6, 4), dtype, 64)
    i = idx([4, 0, 4, 4, 1, 0])
    check(lambda x, i, s: x.index_add_(1, i, s), x3, i, s3, mutated=(0,))
    check(lambda x, i, s: x.index_add_(0, i, s), x3[0], i, s3[0], mutated=(0,))
    check(lambda x, i, s: x.index_add_(0, i.int(), s), x3[0], i, s3[0], mutated=(0,))
    check(lambda x, i, s: x.index_add_(0, i, s), x3[0, 0], i, s3[0, :, 0], mutated=(0,))
    for bad in (idx([5]), idx([-1])):
        check(lambda x, i: x.index_add_(1, i, torch.ones(3, 1, 4, dtype=dtype, device=x.device)), x3, bad)
        check(lambda x, i: x.index_add_(0, i, torch.ones(1, dtype=dtype, device=x.device)), x3[0, 0], bad)
        check(lambda x, i: x.index_add_(0, i.int(), torch.ones(1, 4, dtype=dtype, device=x.device)), x3[0], bad)


def test_index_add_bad_input():
    x = make_tensor((3, 4), torch.float32, 48)
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 4, device=x.device)), x, idx([3]))
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 4, device=x.device)), x, idx([-1]))
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 4, device=x.device)), x, idx([1, 2]))
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 4, dtype=torch.float64, device=x.device)), x, idx([1]))
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 5, device=x.device)), x, idx([1]))
    check(lambda x, i: x.index_add_(0, i, torch.ones(1, 4, device=x.device)), x, idx([[1]]))


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_index_fill(dtype):
    x = make_tensor((4, 5), dtype, 49)
    check(lambda x, i: x.index_fill_(1, i, 1), x, idx([4, -5, 2]), mutated=(0,))
    check(lambda x, i: x.index_fill_(0, i, torch.tensor(0)), x, idx([0]), mutated=(0,))
    check(lambda x, i: torch.index_fill(x.t(), 0, i, 1), x, idx([1, 3]))
    check(lambda x, i: x.index_fill_(0, i, 1), x, idx([4]))  # IndexError
    check(lambda x, i: x.index_fill_(0, i, 1), x, idx([1], torch.int32))
    check(lambda x, i: x.index_fill_(0, i, 1), x, idx([[1]]))
    check(lambda x, i: x.index_fill_(0, i, torch.tensor([1, 2])), x, idx([1]))


# ---------------------------------------------------------------------------
# nonzero / masked_select
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float32, torch.bfloat16])
def test_nonzero_static(dtype):
    x = make_tensor((4, 5), dtype, 52)
    x.view(-1)[::3] = 0
    n = int(torch.count_nonzero(x))
    for size in (0, 1, n, n + 3):
        check(lambda x, s=size: torch.nonzero_static(x, size=s), x)
        check(lambda x, s=size: torch.nonzero_static(x.t(), size=s, fill_value=-9), x)
    check(lambda x: torch.nonzero_static(x[0, 0], size=2), x)  # 0-dim
    check(lambda x: torch.nonzero_static(x[:0], size=2), x)  # empty
    check(lambda x: torch.nonzero_static(x, size=3, out=torch.empty(7, dtype=torch.int64, device=x.device)), x)
    check(lambda x: torch.nonzero_static(x, size=-1), x)
    check(lambda x: torch.nonzero_static(x, size=2, out=torch.empty(0, dtype=torch.float32, device=x.device)), x)


def test_combinations_is_native():
    # torch >= 2.15 builds combinations on nonzero_static.
    check(lambda x: torch.combinations(x, 2), torch.arange(5.0))
    check(lambda x: torch.combinations(x, 3, with_replacement=True), torch.arange(4))


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_nonzero_masked_select(dtype):
    x = make_tensor((4, 3, 5), dtype, 50)
    x.view(-1)[::3] = 0
    check(torch.nonzero, x)
    check(lambda x: torch.nonzero(x.transpose(0, 2)), x)
    check(lambda x: torch.nonzero(x, as_tuple=True), x)
    check(lambda x: torch.nonzero(x[0, 0, 0]), x)
    check(lambda x: torch.nonzero(x[:0]), x)
    check(lambda x: torch.nonzero(x, out=torch.empty(0, dtype=torch.int64, device=x.device)), x)
    check(lambda x: torch.nonzero(x, out=torch.empty(0, dtype=torch.float32, device=x.device)), x)
    m = make_tensor((3, 5), torch.bool, 51)
    check(lambda x, m: torch.masked_select(x, m), x, m)
    check(lambda x, m: torch.masked_select(x[:, :1], m), x, m)  # broadcast
    check(lambda x, m: torch.masked_select(x, m, out=torch.empty(0, dtype=x.dtype, device=x.device)), x, m)
    check(lambda x, m: torch.masked_select(x, m.long()), x, m)  # RuntimeError


# ---------------------------------------------------------------------------
# flip / roll / tril / triu
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_flip_roll(dtype):
    x = make_tensor((3, 4, 5), dtype, 52)
    for dims in ([0], [-1], [0, 2], [], [1, 0, 2]):
        check(lambda x, d=dims: torch.flip(x, d), x)
    check(lambda x: torch.flip(x.transpose(0, 2)[::2], [1]), x)
    check(lambda x: torch.flip(x, [0, 0]), x)
    check(lambda x: torch.flip(x, [3]), x)
    for shifts, dims in [(1, 0), (-2, 2), ((1, 7), (0, 1)), (3, None), (0, 1), ((2, -1), (1, 1))]:
        check(lambda x, s=shifts, d=dims: torch.roll(x, s, d) if d is not None else torch.roll(x, s), x)
    check(lambda x: torch.roll(x[:, :0], 2, 1), x)
    check(lambda x: torch.roll(x, (1,), (0, 1)), x)
    check(lambda x: torch.fliplr(x), x)
    check(lambda x: torch.rot90(x, 1, (1, 2)), x)


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_tril_triu(dtype):
    x = make_tensor((2, 4, 5), dtype, 53)
    for k in (0, 1, -2, 10, -10):
        check(lambda x, k=k: torch.tril(x, k), x)
        check(lambda x, k=k: torch.triu(x, k), x)
    check(lambda x: x.tril_(), x, mutated=(0,))
    check(lambda x: x.transpose(1, 2).triu_(1), x, mutated=(0,))
    check(lambda x: torch.tril(x[:, :0]), x)
    check(lambda x: torch.triu(x, out=torch.empty(0, dtype=dtype, device=x.device)), x)
    check(lambda x: torch.tril(x[0, 0]), x)  # RuntimeError: 1-d
    check(
        lambda x: torch.tril(
            x, out=torch.empty(0, dtype=torch.float64 if dtype != torch.float64 else torch.float32, device=x.device)
        ),
        x,
    )


# ---------------------------------------------------------------------------
# arange / linspace
# ---------------------------------------------------------------------------


def _factory(fn):
    cpu = None
    try:
        cpu = fn("cpu")
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            fn("foo")
        return
    got = fn("foo")
    compare(cpu, got)


@pytest.mark.parametrize("dtype", NUM_DTYPES)
def test_arange(dtype):
    _factory(lambda dev: torch.arange(10, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(2, 11, 3, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(10, 0, -2, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(0, 0, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(0.5, 5.2, 0.7, dtype=dtype, device=dev))
    # Fractional bounds: torch 2.15 sizes int64 from the doubles, 2.13 from the truncated values.
    _factory(lambda dev: torch.arange(3.1, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(-2.5, 3.1, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(1, 7.9, 2, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(0, 5, -1, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(0, 5, 0, dtype=dtype, device=dev))
    _factory(lambda dev: torch.arange(0, 3, out=torch.empty(5, dtype=dtype, device=dev)))


def test_arange_float_default_and_bool():
    _factory(lambda dev: torch.arange(-1.0, 1.0, 0.1, device=dev))
    _factory(lambda dev: torch.arange(1e6, device=dev))
    _factory(lambda dev: torch.arange(3, dtype=torch.bool, device=dev))


@pytest.mark.parametrize("dtype", NUM_DTYPES)
def test_linspace(dtype):
    for start, end, steps in [(0, 1, 5), (-3, 7, 11), (5, -5, 4), (0, 100, 1), (2, 3, 0), (0, 10, 7), (1.5, 2.5, 3)]:
        _factory(lambda dev, a=start, b=end, n=steps: torch.linspace(a, b, n, dtype=dtype, device=dev))
    _factory(lambda dev: torch.linspace(0, 1, -1, dtype=dtype, device=dev))
    _factory(lambda dev: torch.linspace(0, 1, 4, out=torch.empty(2, dtype=dtype, device=dev)))


# ---------------------------------------------------------------------------
# large inputs: the parallel gather gives the same result
# ---------------------------------------------------------------------------


def test_large_index_select_and_gather():
    x = make_tensor((600, 700), torch.float32, 54)
    i = _rand_index((900,), 600, 55)
    check(lambda x, i: torch.index_select(x, 0, i), x, i)
    check(lambda x, i: torch.gather(x, 1, i), x, _rand_index((600, 700), 700, 56))


def test_ops_are_native():
    names = foo_rs.native_ops()
    for op in (
        "cat.out",
        "index_select",
        "index.Tensor_out",
        "_index_put_impl_",
        "gather.out",
        "scatter.src_out",
        "scatter_add.out",
        "scatter_reduce.two_out",
        "nonzero",
        "masked_select",
        "flip",
        "roll",
        "tril.out",
        "triu.out",
        "arange.start_out",
        "linspace.out",
        "index_add.out",
        "index_fill_.int_Scalar",
    ):
        assert any(op == n or n.endswith("::" + op) or n == "aten::" + op for n in names), op


def test_cpu_index_tensors_are_accepted():
    x = make_tensor((5, 4), torch.float32, 57)
    xf = x.to(FOO)
    m = torch.tensor([True, False, True, False, True])
    compare(x[m], xf[m])
    compare(x[idx([4, 0])], xf[idx([4, 0])])
    xf.index_put_((m,), torch.ones(4, device=FOO))
    x.index_put_((m,), torch.ones(4))
    compare(x, xf)


def test_empty_index_of_any_dtype():
    x = make_tensor((5,), torch.float32, 58)
    check(lambda x, i: torch.gather(x, 0, i), x, torch.empty(0, dtype=torch.uint8))
    check(lambda x, i: torch.gather(x, 0, i), x, torch.empty(2, 0, dtype=torch.uint8))
    check(lambda x, i: torch.gather(x, 0, i), x, torch.empty(2, 0, dtype=torch.float32))
    check(lambda x, i: x.scatter_(0, i, 1.0), x, torch.empty(0, dtype=torch.uint8))


@pytest.mark.parametrize("dtype", REAL_DTYPES)
def test_index_copy_take_put_masked_scatter(dtype):
    x = make_tensor((5, 4), dtype, 59)
    src = make_tensor((3, 4), dtype, 60)
    check(lambda x, i, s: x.index_copy_(0, i, s), x, idx([4, 0, 2]), src, mutated=(0,))
    check(lambda x, i, s: torch.index_copy(x, 1, i, torch.cat([s, s[:2]])[:, :2]), x, idx([3, 1]), src)
    check(
        lambda x, i, s: torch.index_copy(x, 0, i, s, out=torch.empty(0, dtype=x.dtype, device=x.device)),
        x,
        idx([1, 2, 3]),
        src,
    )
    for bad in (idx([5, 0, 1]), idx([-1, 0, 1]), idx([1, 2]), idx([1, 2, 3], torch.int32), idx([[1, 2, 3]])):
        check(lambda x, i, s: x.index_copy_(0, i, s), x, bad, src)
    check(
        lambda x, i, s: x.index_copy_(0, i, s),
        x,
        idx([1, 2, 3]),
        src.double() if dtype != torch.float64 else src.float(),
    )
    check(lambda x, i: torch.take(x, i), x, idx([[19, -20, 3]]))
    check(lambda x, i: torch.take(x.t(), i), x, idx([1, 7]))
    for bad in (idx([20]), idx([-21]), idx([1], torch.int32)):
        check(lambda x, i: torch.take(x, i), x, bad)
    check(lambda x, i: torch.take(x[:0], i), x, idx([0]))
    check(lambda x, i, s: x.put_(i, s), x, idx([19, -1, 3]), src[0, :3], mutated=(0,))
    check(lambda x, i, s: x.t().put_(i, s), x, idx([[1, 7, 3]]), src[0, :3], mutated=(0,))
    if dtype != torch.bool:
        check(lambda x, i, s: x.put_(i, s, accumulate=True), x, idx([1, 1, 1]), src[0, :3], mutated=(0,))
    for bad in (idx([20, 0, 1]), idx([1, 2]), idx([1, 2, 3], torch.int32)):
        check(lambda x, i, s: x.put_(i, s), x, bad, src[0, :3])
    m = make_tensor((5, 4), torch.bool, 61)
    big = make_tensor((30,), dtype, 62)
    check(lambda x, m, s: x.masked_scatter_(m, s), x, m, big, mutated=(0,))
    check(lambda x, m, s: torch.masked_scatter(x, m[0], s), x, m, big)
    check(lambda x, m, s: x.masked_scatter_(m, s[:2]), x, m, big)
    check(lambda x, m, s: x.masked_scatter_(m.long(), s), x, m, big)


def test_outputs_aliasing_inputs_raise_like_cpu():
    def x6(d):
        return torch.arange(6, device=d)

    cases = [
        lambda d: x6(d).index_put_((x6(d)[:3] % 3,), torch.tensor(1, device=d)),
        lambda d: (lambda x: x.index_put_((x[:3],), torch.tensor(100, device=d)))(x6(d)),
        lambda d: (lambda x: x.index_put_((x[:3],), torch.tensor(1, device=d), accumulate=True))(x6(d)),
        lambda d: (lambda x: x.view(2, 3).scatter_(1, x.view(2, 3)[:, :2] % 3, 7))(x6(d)),
        lambda d: (lambda x: x.index_fill_(0, x[:2], 9))(x6(d)),
        lambda d: (lambda x: x.index_add_(0, x[:2], x[2:4]))(x6(d)),
        lambda d: (lambda x: x.index_copy_(0, x[:2], x[2:4]))(x6(d)),
        lambda d: (lambda x: x.put_(x[:2], x[2:4]))(x6(d)),
        lambda d: (lambda x: torch.index_select(x, 0, x[:2], out=x[2:4]))(x6(d)),
        lambda d: (lambda x: torch.gather(x, 0, x[:2], out=x[2:4]))(x6(d)),
        lambda d: (lambda x: torch.take(x, x[:2], out=x[2:4]))(x6(d)),
        lambda d: (lambda x: torch.cat([x[:2], x[2:4]], out=x[3:]))(x6(d)),
        # non-dense overlaps are computed, not refused (as CPU)
        lambda d: (lambda x: torch.index_select(x[:, 2:], 1, torch.tensor([0, 1], device=d), out=x[:, :2]))(
            torch.arange(12.0, device=d).view(3, 4)
        ),
        lambda d: (lambda x: torch.cat([x[:, :1], x[:, 1:]], 1, out=x.t()[:1].t()))(
            torch.arange(12.0, device=d).view(3, 4)
        ),
        # ... but an output that is an input is refused even when not dense (ATen's FULL overlap)
        lambda d: (lambda x: torch.index_select(x, 1, torch.tensor([0, 1], device=d), out=x))(
            torch.arange(16.0, device=d).view(4, 4)[:, ::2]
        ),
        lambda d: (lambda x: x.masked_scatter_(x > 2, x))(torch.arange(6.0, device=d)),
        lambda d: (lambda x: torch.tril(x, out=x))(torch.arange(6.0, device=d).view(2, 3)),
    ]
    for fn in cases:
        try:
            expected = fn("cpu")
        except Exception as e:  # noqa: BLE001
            with pytest.raises(type(e)):
                fn("foo")
            continue
        compare(expected, fn("foo"))


def test_scatter_through_self_aliasing_indices_is_safe():
    # Where CPU refuses an index that aliases the output, foo does too; the
    # Rust kernel also snapshots such indices before writing (memory safety
    # does not rest on the Python check).
    x = torch.tensor([[1, 0, 2]], device="foo")
    with pytest.raises(RuntimeError):
        x.scatter_(1, x, 7)
    assert x.cpu().tolist() == [[1, 0, 2]]
    x = torch.tensor([2, 0, 1], device="foo")
    foo_rs._C.index_scatter(
        (x.data_ptr(), foo_rs._ops._registry.DTYPE_CODE[torch.int64], (3,), (0,)),
        None,
        9,
        [((x.data_ptr(), foo_rs._ops._registry.DTYPE_CODE[torch.int64], (3,), (1,)), 3, 1, 0)],
        False,
        "assign",
        True,
        (0, "bad {index}"),
    )
    assert x.cpu().tolist() == [9, 9, 9]


def test_index_on_another_foo_device_raises():
    x = torch.ones(3, device="foo:0")
    i = torch.tensor([0], device="foo:1")
    with pytest.raises(RuntimeError):
        x[i]
    with pytest.raises(RuntimeError):
        x.index_put_((i,), torch.tensor(1.0, device="foo:0"))


def test_zero_size_with_bad_indices_and_noncontiguous_put():
    x = make_tensor((0, 5), torch.float32, 65)
    check(lambda x, i: torch.index_select(x, 1, i), x, idx([9]))
    check(lambda x, i: torch.index_select(x, 0, i), x, idx([0]))
    check(lambda x, i: x[:, i], x, idx([9]))
    check(lambda x, i: x[i], x, idx([0]))
    check(lambda x, i: torch.gather(x, 1, i), x, torch.zeros(0, 2, dtype=torch.long))
    check(lambda x, i: torch.index_select(x, 1, i), x, idx([-1], torch.int32))
    check(lambda x, i: torch.index_select(x, 1, i), x, idx([4, 0]))
    check(lambda x, i: torch.index_select(x[0], 0, i), x, idx([0]))
    check(lambda x, i: torch.ops.aten.index_put_(x, [None, i], torch.tensor(1.0)), x, idx([9]))
    y = make_tensor((3, 4, 5), torch.float64, 66)
    check(
        lambda y, i, j: y.index_put_((i, None, j), torch.ones(4, device=y.device)),
        y,
        idx([[2], [0]]),
        idx([4, 1, 0]),
        mutated=(0,),
    )
    check(
        lambda y, i, j: y.index_put_((i, None, j), torch.ones(2, 3, 4, device=y.device), accumulate=True),
        y,
        idx([[2], [2]]),
        idx([4, 4, 0]),
        mutated=(0,),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_renorm(dtype, norm_type):
    w = make_tensor((6, 4), dtype, 67)
    i = idx([[1, 5, 1], [-1, 0, 2]])
    check(lambda w, i: torch.embedding_renorm_(w, i, 5.0, norm_type), w, i, mutated=(0,))
    check(lambda w, i: torch.nn.functional.embedding(i, w, max_norm=4.0, norm_type=norm_type), w, i.abs(), mutated=(0,))
    check(lambda w, i: torch.embedding_renorm_(w.t(), i, 5.0, norm_type), w, idx([3, 0]), mutated=(0,))
    for bad in (idx([6]), idx([-7]), idx([0.0], torch.float32)):
        check(lambda w, i: torch.embedding_renorm_(w, i, 5.0, norm_type), w, bad)
    check(lambda w, i: torch.embedding_renorm_(w[0], i, 5.0, norm_type), w, idx([0]))
    check(lambda w, i: torch.embedding_renorm_(w.long(), i, 5.0, norm_type), w, idx([0]))


@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(dtype, reduce, include_self):
    x = make_tensor((5, 4), dtype, 68)
    src = (
        make_tensor((6, 4), dtype, 69)
        if dtype.is_floating_point or dtype == torch.bool
        else torch.randint(-3, 4, (6, 4)).to(dtype)
    )
    i = idx([4, 0, 4, 2, 4, 0])
    check(lambda x, i, s: x.index_reduce_(0, i, s, reduce, include_self=include_self), x, i, src, mutated=(0,))
    check(
        lambda x, i, s: torch.index_reduce(x, 1, i[:4].remainder(4), s[:5].t(), reduce, include_self=include_self),
        x,
        i,
        src,
    )
    check(
        lambda x, i, s: x.index_reduce_(
            0,
            i.int(),
            s,
            reduce,
            include_self=include_self,
        ),
        x,
        i,
        src,
        mutated=(0,),
    )
    for bad in (idx([5] * 6), idx([-1] * 6), idx([1.0] * 6, torch.float32), idx([[1] * 6]), idx([1, 2])):
        check(lambda x, i, s: x.index_reduce_(0, i, s, reduce, include_self=include_self), x, bad, src)
    check(lambda x, i, s: x.index_reduce_(0, i, s, "sum"), x, i, src)
