"""gather, advanced indexing (index.Tensor, index_put_), arange and adaptive
average pooling on the native path (rust/glue/native.cpp): ATen's own meta
functions and checks, then Rust, with no Python kernel in the common case.
Each case must give CPU's values, dtype and shape; errors must be CPU's
exception with CPU's message and "(foo)"."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from foo_rs._ops._registry import fast_lane_ops
from foo_testing import make_tensor, run_native_case


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


def _idx(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


def _grad(f, x, g):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x), x, g)[0]


def _put(t, base, indices, values, accumulate=False):
    x = t(base).clone()
    torch.ops.aten.index_put_(x, [None if i is None else t(i) for i in indices], t(values), accumulate)
    return x


def _quiet(f):
    """f() without its warnings (CPU warns that scatter's reduce= with a src tensor is deprecated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


CASES = {
    # gather: every dtype class, int32/int64 index, strides, 0-d, out=, empty index
    "gather_f32": lambda t: torch.gather(t(_f((4, 5))), 1, t(_idx([[0, 4, 4], [1, 0, 2], [3, 3, 3], [4, 0, 1]]))),
    "gather_int32_index_dim0": lambda t: torch.gather(
        t(_f((4, 3), torch.float64)), 0, t(_idx([[3, 0, 1], [2, 2, 0]], torch.int32))
    ),
    "gather_strided_self_and_index": lambda t: torch.gather(
        t(_f((6, 5), torch.bfloat16)).t(), 1, t(_idx([[5, 0, 1, 2], [4, 4, 4, 4], [0, 1, 2, 3]])).t()
    ),
    "gather_int64_data_3d": lambda t: torch.gather(
        t(_f((2, 3, 4), torch.int64)), 2, t(_idx([[[3], [0], [1]], [[2], [2], [0]]]))
    ),
    "gather_bool": lambda t: torch.gather(t(_f((3, 4), torch.bool)), 1, t(_idx([[1, 3], [0, 0], [2, 1]]))),
    "gather_0d": lambda t: torch.gather(t(torch.tensor(2.5)), 0, t(torch.tensor(0))),
    "gather_empty_index": lambda t: torch.gather(t(_f((3, 4))), 1, t(torch.empty(3, 0, dtype=torch.long))),
    "gather_out": lambda t: torch.gather(
        t(_f((4, 5), torch.float16)), 1, t(_idx([[4], [3], [2], [1]])), out=t(torch.empty(0, dtype=torch.float16))
    ),
    # advanced indexing: x[idx], leading/trailing slices, negative indices,
    # broadcasting index tensors, non-adjacent indexed dims, int32, zero-size, out=
    "index_rows": lambda t: t(_f((5, 3)))[t(_idx([4, 0, -1, 2]))],
    "index_cols_int32": lambda t: t(_f((3, 5), torch.int32))[:, t(_idx([1, -5, 3], torch.int32))],
    "index_broadcast_pair": lambda t: t(_f((4, 5), torch.float64))[t(_idx([[0], [3]])), t(_idx([1, 4, -2]))],
    "index_non_adjacent": lambda t: t(_f((3, 4, 5)))[t(_idx([2, 0])), :, t(_idx([4, 1]))],
    "index_strided_self": lambda t: t(_f((6, 4), torch.bfloat16)).t()[t(_idx([3, 3, 1]))],
    "index_zero_size": lambda t: t(_f((4, 3)))[t(torch.empty(0, dtype=torch.long))],
    "index_out": lambda t: torch.ops.aten.index.Tensor_out(
        t(_f((5, 2), torch.int16)), [t(_idx([1, 4]))], out=t(torch.empty(0, dtype=torch.int16))
    ),
    "index_cpu_index": lambda t: t(_f((5, 3)))[_idx([2, 1])],
    # index_put_: assign and accumulate (duplicates add up), broadcast values, int32, negative
    "index_put_assign": lambda t: _put(t, _f((5, 3)), [_idx([4, 0, -2])], _f((3, 3), seed=1)),
    "index_put_accumulate_dups": lambda t: _put(
        t, _f((4, 3), torch.float64), [_idx([1, 1, 3, 1])], _f((4, 3), torch.float64, 1), accumulate=True
    ),
    "index_put_broadcast_value": lambda t: _put(
        t, _f((3, 4), torch.int64), [None, _idx([0, 3], torch.int32)], _f((3, 1), torch.int64, 1)
    ),
    "index_put_pair_accumulate": lambda t: _put(
        t, _f((3, 4)), [_idx([0, 2, 0]), _idx([1, 1, 1])], _f((3,), seed=2), accumulate=True
    ),
    "index_put_non_adjacent": lambda t: _put(
        t, _f((3, 2, 4), torch.bfloat16), [_idx([2, 0]), None, _idx([1, 3])], _f((2, 2), torch.bfloat16, 3)
    ),
    # whole rows (the index constant along a contiguous innermost dim): the
    # row copies of x[idx] and the row adds of its backward, a scalar value,
    # indexed middle dims, a non-contiguous value, the same bits as CPU's
    # serial accumulation with repeated rows
    "index_rows_embedding_shaped": lambda t: t(_f((7, 33)))[t(_idx([[6, 0, 6], [2, -1, 3]]))],
    "index_rows_middle_dim": lambda t: t(_f((3, 6, 5), torch.bfloat16))[:, t(_idx([5, 1, 1, 0]))],
    "index_rows_backward_repeats": lambda t: _grad(
        lambda x: x[t(_idx([[1, 4, 1], [1, 0, 4]]))], t(_f((5, 17))), t(_f((2, 3, 17), seed=1))
    ),
    "index_put_rows_accumulate_strided_value": lambda t: _put(
        t, _f((6, 9), torch.float64), [_idx([5, 2, 5, 5])], _f((9, 4), torch.float64, 2).t(), accumulate=True
    ),
    "index_put_0d_value_int32": lambda t: _put(
        t, _f((4, 6), torch.int32), [_idx([3, 1])], torch.tensor(7, dtype=torch.int32)
    ),
    "scatter_value_rows": lambda t: torch.scatter(t(_f((4, 5))), 0, t(_idx([[3], [0], [3]])).expand(3, 5), -2.5),
    "scatter_add_rows": lambda t: torch.scatter_add(
        t(_f((4, 5), torch.float64)), 0, t(_idx([[3], [0], [3]])).expand(3, 5), t(_f((3, 5), torch.float64, 1))
    ),
    "index_put_rows_accumulate_middle_dim": lambda t: _put(
        t, _f((2, 5, 8)), [None, _idx([4, 4, 0])], _f((2, 3, 8), seed=4), accumulate=True
    ),
    "index_put_bool_values": lambda t: _put(t, _f((4,), torch.bool), [_idx([3, 0])], _f((2,), torch.bool, 1)),
    # the scatter family: src and value, reductions, in-place, int32 index, strides, 0-d, out=
    "scatter_src": lambda t: torch.scatter(t(_f((3, 5))), 1, t(_idx([[4, 0], [1, 1], [2, 3]])), t(_f((3, 4), seed=1))),
    "scatter_value_inplace_int32": lambda t: t(_f((4, 3), torch.int64)).scatter_(
        0, t(_idx([[3, 0, 1]], torch.int32)), 7
    ),
    "scatter_reduce_multiply": lambda t: _quiet(
        lambda: torch.scatter(
            t(_f((3, 4), torch.float64)),
            1,
            t(_idx([[1, 1], [0, 3], [2, 2]])),
            t(_f((3, 2), torch.float64, 1)),
            reduce="multiply",
        )
    ),
    "scatter_value_reduce_add": lambda t: torch.scatter(t(_f((3, 4))), 0, t(_idx([[2, 2, 0, 1]])), 1.5, reduce="add"),
    "scatter_add_dups_bf16": lambda t: torch.scatter_add(
        t(_f((2, 4), torch.bfloat16)), 1, t(_idx([[0, 0, 0], [3, 1, 3]])), t(_f((2, 3), torch.bfloat16, 1))
    ),
    "scatter_add_strided_out": lambda t: torch.scatter_add(
        t(_f((5, 3))).t(), 1, t(_idx([[4, 0], [1, 1], [0, 0]])), t(_f((3, 2), seed=2)), out=t(torch.empty(0))
    ),
    "scatter_add_inplace_0d": lambda t: t(torch.tensor(1.0)).scatter_add_(0, t(torch.tensor(0)), t(torch.tensor(2.5))),
    "scatter_reduce_mean_exclude_self": lambda t: torch.scatter_reduce(
        t(_f((2, 4))), 1, t(_idx([[0, 0, 3], [1, 2, 1]])), t(_f((2, 3), seed=3)), "mean", include_self=False
    ),
    "scatter_reduce_amax_int": lambda t: torch.scatter_reduce(
        t(_f((2, 4), torch.int32)), 1, t(_idx([[0, 0, 3], [1, 2, 1]])), t(_f((2, 3), torch.int32, 3)), "amax"
    ),
    "gather_backward": lambda t: _grad(
        lambda x: torch.gather(x, 1, t(_idx([[1, 0, 1], [2, 2, 0]]))), t(_f((2, 3))), t(_f((2, 3), seed=1))
    ),
    # avg_pool2d: padding, ceil_mode, count_include_pad, divisor, 3-d, integers, channels-last, backward
    "avg_pool2d": lambda t: F.avg_pool2d(t(_f((2, 3, 7, 6))), 3, 2, 1, ceil_mode=True),
    "avg_pool2d_no_pad_count_divisor": lambda t: F.avg_pool2d(
        t(_f((3, 6, 6), torch.float64)), (2, 3), 1, (1, 1), count_include_pad=False, divisor_override=5
    ),
    "avg_pool2d_int64": lambda t: F.avg_pool2d(t(_f((1, 2, 4, 4), torch.int64)), 2),
    "avg_pool2d_channels_last": lambda t: F.avg_pool2d(
        t(_f((2, 4, 6, 6))).contiguous(memory_format=torch.channels_last), 2
    ),
    "avg_pool2d_backward": lambda t: _grad(
        lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), t(_f((2, 3, 7, 7))), t(_f((2, 3, 4, 4), seed=1))
    ),
    # arange: GPT-2's positions, float steps, half precision, int32 out, out= resized
    "arange_long": lambda t: torch.arange(0, 17, dtype=torch.long, device=t(torch.empty(0)).device),
    "arange_float_step": lambda t: torch.arange(-1.5, 2.25, 0.25, device=t(torch.empty(0)).device),
    "arange_float16": lambda t: torch.arange(0, 9.5, 0.5, dtype=torch.float16, device=t(torch.empty(0)).device),
    "arange_int32_fractional": lambda t: torch.arange(
        0.5, 7.9, 2.2, dtype=torch.int32, device=t(torch.empty(0)).device
    ),
    "arange_negative_step_out": lambda t: torch.arange(10, -3, -3, out=t(torch.empty(0, dtype=torch.int64))),
    "arange_empty": lambda t: torch.arange(4, 4, device=t(torch.empty(0)).device),
    # adaptive average pooling (not 1x1: that is mean) and its backward
    "adaptive_avg_pool2d": lambda t: F.adaptive_avg_pool2d(t(_f((2, 3, 7, 9))), (3, 4)),
    "adaptive_avg_pool2d_3d_f64": lambda t: F.adaptive_avg_pool2d(t(_f((3, 5, 5), torch.float64)), (2, 5)),
    "adaptive_avg_pool2d_channels_last": lambda t: F.adaptive_avg_pool2d(
        t(_f((2, 4, 6, 6))).contiguous(memory_format=torch.channels_last), 4
    ),
    "adaptive_avg_pool2d_backward": lambda t: _grad(
        lambda x: F.adaptive_avg_pool2d(x, (2, 3)), t(_f((2, 3, 5, 7))), t(_f((2, 3, 2, 3), seed=1))
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_cases_match_cpu_and_run_no_python(no_fallback, name):
    f = CASES[name]
    expected, actual = run_native_case(name, f)
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if name.endswith("channels_last"):
        assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def test_native_cases_are_registered():
    lane = fast_lane_ops()
    assert {
        "gather.out",
        "index.Tensor",
        "index.Tensor_out",
        "_index_put_impl_",
        "arange.start_out",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "scatter.src_out",
        "scatter.value_out",
        "scatter.reduce_out",
        "scatter.value_reduce_out",
        "scatter_add.out",
        "scatter_reduce.two_out",
        "avg_pool2d.out",
        "avg_pool2d_backward.grad_input",
    } <= lane


def test_bool_mask_index_and_put_match_cpu(no_fallback):
    """Masks go through ATen's expansion (nonzero), then the same Rust kernels."""
    x = _f((4, 5))
    m = x > 0
    fx, fm = x.to("foo"), m.to("foo")
    torch.testing.assert_close(fx[fm].cpu(), x[m])
    y, fy = x.clone(), fx.clone()
    y[m] = _f((int(m.sum()),), seed=1)
    fy[fm] = _f((int(m.sum()),), seed=1).to("foo")
    torch.testing.assert_close(fy.cpu(), y)
    y[m] = 0.5
    fy[fm] = 0.5
    torch.testing.assert_close(fy.cpu(), y)


ERROR_CASES = {
    "gather_out_of_range": lambda t: torch.gather(t(_f((3, 3))), 1, t(_idx([[0, 3]]))),
    "gather_negative": lambda t: torch.gather(t(_f((3, 3))), 0, t(_idx([[-1, 0]]))),
    "gather_index_dtype": lambda t: torch.gather(t(_f((3, 3))), 0, t(_idx([[1, 0]], torch.int16))),
    "gather_rank": lambda t: torch.gather(t(_f((3, 3))), 0, t(_idx([1, 0]))),
    "gather_index_too_large": lambda t: torch.gather(t(_f((3, 3))), 0, t(torch.zeros(2, 4, dtype=torch.long))),
    "index_out_of_range": lambda t: t(_f((3, 4)))[t(_idx([1, 3]))],
    "index_out_of_range_second": lambda t: t(_f((3, 4)))[t(_idx([1])), t(_idx([-5]))],
    "index_too_many": lambda t: torch.ops.aten.index.Tensor(t(_f((3,))), [t(_idx([0])), t(_idx([0]))]),
    "index_float_index": lambda t: torch.ops.aten.index.Tensor(t(_f((3,))), [t(_f((2,)))]),
    "index_broadcast_mismatch": lambda t: t(_f((3, 4)))[t(_idx([0, 1])), t(_idx([0, 1, 2]))],
    "index_put_out_of_range": lambda t: _put(t, _f((3, 2)), [_idx([0, 5])], _f((2, 2))),
    "index_put_dtype": lambda t: _put(t, _f((3, 2)), [_idx([0, 1])], _f((2, 2), torch.float64)),
    "index_put_shape": lambda t: _put(t, _f((3, 2)), [_idx([0, 1])], _f((3, 2))),
    "scatter_out_of_range": lambda t: torch.scatter(t(_f((3, 3))), 1, t(_idx([[0, 3]])), 1.0),
    "scatter_add_negative": lambda t: torch.scatter_add(t(_f((3, 3))), 0, t(_idx([[-1]])), t(_f((1, 1)))),
    "scatter_src_dtype": lambda t: torch.scatter(t(_f((3, 3))), 0, t(_idx([[1]])), t(_f((1, 1), torch.float64))),
    "scatter_bad_reduce": lambda t: torch.scatter(t(_f((3, 3))), 0, t(_idx([[1]])), 2.0, reduce="max"),
    "avg_pool2d_big_pad": lambda t: F.avg_pool2d(t(_f((1, 1, 4, 4))), 2, padding=2),
    "avg_pool2d_too_small": lambda t: F.avg_pool2d(t(_f((1, 1, 2, 2))), 3),
    "arange_zero_step": lambda t: torch.arange(0, 5, 0, out=t(torch.empty(0))),
    "arange_bad_sign": lambda t: torch.arange(5, 0, 1, out=t(torch.empty(0, dtype=torch.int64))),
    "arange_infinite": lambda t: torch.arange(0, float("inf"), out=t(torch.empty(0))),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_native_errors_match_cpu(no_fallback, name):
    f = ERROR_CASES[name]
    with pytest.raises(Exception) as cpu:
        f(lambda x: x)
    with pytest.raises(type(cpu.value)) as foo:
        f(lambda x: x.to("foo"))
    cpu_msg, foo_msg = str(cpu.value).split("\n")[0], str(foo.value).split("\n")[0]
    assert foo_msg == cpu_msg + " (foo)"


def test_arange_resize_warns_as_cpu(no_fallback):
    for device in ("cpu", "foo"):
        out = torch.empty(3, device=device)
        with pytest.warns(UserWarning, match="does not match the computed number of elements 5"):
            torch.arange(5, out=out)
        assert out.shape == (5,) and out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_native_index_ops_do_not_leak(no_fallback):
    x = _f((64, 32)).to("foo")
    i = _idx([3, 1, 31, 0]).to("foo")

    def step():
        y = x[i]
        z = torch.gather(x, 1, i.expand(64, 4))
        w = x.clone()
        w.index_put_((i,), y, accumulate=True)
        a = torch.arange(0, 100, device="foo")
        p = F.adaptive_avg_pool2d(x.view(1, 2, 32, 32), 5)
        return y, z, w, a, p

    step()
    torch.foo.synchronize()
    base = torch.foo.memory_allocated()
    for _ in range(3):
        step()
    torch.foo.synchronize()
    assert torch.foo.memory_allocated() == base
