"""all/any, cumsum/cumprod, triu/tril, topk, masked_fill_ with a value
tensor and the random fills (normal_, uniform_, random_) on the native path
(rust/glue/native.cpp): ATen's own meta functions, checks and templates,
then the Rust kernels the Python kernels call, with no Python kernel in the
common case. Each case must give CPU's values, dtype and shape; errors must
be CPU's exception with CPU's message and "(foo)". Random fills draw from
foo's Philox stream, so they are compared with the Python kernel's draw for
the same seed rather than with CPU."""

import pytest
import torch

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import check_native_error, make_tensor, run_native_case


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


def _empty(dtype=torch.float32):
    return torch.empty(0, dtype=dtype)


def _pair(t, dtype=torch.float32):
    """Empty (values, indices) out= tensors for topk."""
    return t(_empty(dtype)), t(_empty(torch.int64))


def _mask(shape, seed=1):
    return make_tensor(shape, torch.float32, seed) > 0


CASES = {
    # all/any: every form (all dims, one dim, a list of dims), negative dims,
    # keepdim, bool/uint8/int/bf16 inputs, strides, zero-size, 0-d, out=
    "all_bool": lambda t: torch.all(t(_f((3, 4), torch.bool))),
    "any_float": lambda t: torch.any(t(_f((3, 4)))),
    "all_of_zeros_float64": lambda t: torch.all(t(torch.zeros(2, 3, dtype=torch.float64))),
    "any_of_zeros_int16": lambda t: torch.any(t(torch.zeros(5, dtype=torch.int16))),
    "all_dim_int32_negative": lambda t: t(_f((3, 4, 5), torch.int32) % 3).all(-1),
    "any_dim_keepdim_bf16": lambda t: (t(_f((3, 4), torch.bfloat16)) > 8).any(0, keepdim=True),
    "all_dims_tuple": lambda t: (t(_f((2, 3, 4))) > -15).all((0, 2)),
    "any_dims_negative_keepdim": lambda t: (t(_f((2, 3, 4), torch.int64)) > 500).any((-1, 0), keepdim=True),
    "all_dims_empty_list": lambda t: torch.all(t(_f((2, 3), torch.bool)), dim=()),
    "all_uint8_keeps_uint8": lambda t: t(_f((3, 4), torch.uint8)).all(1),
    "any_uint8_full": lambda t: torch.any(t(torch.zeros(4, dtype=torch.uint8))),
    "all_transposed": lambda t: (t(_f((4, 3))) > -5).t().all(1),
    "any_sliced": lambda t: (t(_f((6, 5))) > 12)[::2, 1:].any(0),
    "all_zero_size": lambda t: torch.all(t(torch.empty(0, 3))),
    "any_zero_size_dim": lambda t: t(torch.empty(0, 3)).any(0),
    "all_zero_size_reduced_dim": lambda t: t(torch.empty(4, 0, dtype=torch.bool)).all(1),
    "all_0d_dim": lambda t: t(torch.tensor(0.0)).all(0),
    "any_0d_dim_negative": lambda t: t(torch.tensor(3, dtype=torch.int64)).any(-1, keepdim=True),
    "all_out": lambda t: torch.all(t(_f((3, 4), torch.bool)), 1, out=t(_empty(torch.bool))),
    "any_all_out": lambda t: torch.any(t(_f((3, 4))), out=t(_empty(torch.bool))),
    "all_dims_out_keepdim": lambda t: torch.all(
        t(_f((2, 3, 4), torch.bool)), (1, 2), keepdim=True, out=t(_empty(torch.bool))
    ),
    "any_uint8_out_uint8": lambda t: torch.any(t(_f((3, 4), torch.uint8)), 0, out=t(_empty(torch.uint8))),
    # cumsum/cumprod: float/int/bool/bf16/f16, negative dims, strides,
    # zero-size, 0-d, dtype=, out= (incl. an int input into a float out),
    # in place (ATen's cumsum_ is a composite over cumsum.out)
    "cumsum_f32": lambda t: t(_f((3, 5))).cumsum(1),
    "cumsum_f64_negative_dim": lambda t: t(_f((4, 3, 2), torch.float64)).cumsum(-3),
    "cumsum_int32_to_int64": lambda t: t(_f((3, 5), torch.int32)).cumsum(0),
    "cumsum_uint8": lambda t: t(_f((7,), torch.uint8)).cumsum(0),
    "cumsum_bool": lambda t: t(_f((2, 6), torch.bool)).cumsum(1),
    "cumsum_bf16": lambda t: t(_f((3, 9), torch.bfloat16)).cumsum(-1),
    "cumsum_f16": lambda t: t(_f((8,), torch.float16)).cumsum(0),
    "cumsum_transposed": lambda t: t(_f((5, 3))).t().cumsum(1),
    "cumsum_sliced": lambda t: t(_f((6, 8), torch.int64))[1::2, ::3].cumsum(0),
    "cumsum_zero_size": lambda t: t(torch.empty(0, 4)).cumsum(1),
    "cumsum_0d": lambda t: t(torch.tensor(2.5)).cumsum(0),
    "cumsum_dtype_f64": lambda t: torch.cumsum(t(_f((3, 4), torch.int16)), 1, dtype=torch.float64),
    "cumsum_dtype_long_of_float": lambda t: torch.cumsum(t(_f((6,))), 0, dtype=torch.int64),
    "cumsum_out": lambda t: torch.cumsum(t(_f((3, 4))), 0, out=t(_empty())),
    "cumsum_out_int_into_float": lambda t: torch.cumsum(t(_f((3, 4), torch.int32)), 1, out=t(_empty())),
    "cumsum_out_strided": lambda t: torch.cumsum(t(_f((3, 4))), 1, out=t(torch.zeros(4, 3)).t()),
    "cumsum_inplace": lambda t: t(_f((4, 5))).cumsum_(1),
    "cumsum_inplace_int64_transposed": lambda t: t(_f((4, 5), torch.int64)).t().cumsum_(1),
    "cumprod_f64": lambda t: (t(_f((3, 6), torch.float64)) / 10).cumprod(1),
    "cumprod_int64": lambda t: t(_f((3, 6), torch.int64) % 5).cumprod(-1),
    "cumprod_inplace_bf16": lambda t: (t(_f((2, 5), torch.bfloat16)) / 8).cumprod_(0),
    # triu/tril: diagonals above and below, every dtype class, batches,
    # strides, zero-size, out=, in place (triu_/tril_ are composites over .out)
    "triu_f32": lambda t: t(_f((4, 5))).triu(),
    "triu_k1": lambda t: t(_f((4, 5))).triu(1),
    "tril_negative_k_int64": lambda t: t(_f((5, 4), torch.int64)).tril(-2),
    "tril_bool": lambda t: t(_f((4, 4), torch.bool)).tril(),
    "triu_batched_bf16": lambda t: t(_f((2, 3, 4, 5), torch.bfloat16)).triu(-1),
    "tril_uint8_wide": lambda t: t(_f((3, 7), torch.uint8)).tril(2),
    "triu_transposed": lambda t: t(_f((5, 3))).t().triu(1),
    "tril_sliced_f64": lambda t: t(_f((6, 6), torch.float64))[::2, 1:].tril(),
    "triu_k_beyond": lambda t: t(_f((3, 4))).triu(10),
    "tril_k_below": lambda t: t(_f((3, 4))).tril(-10),
    "triu_zero_size": lambda t: t(torch.empty(0, 3)).triu(),
    "tril_zero_batch": lambda t: t(torch.empty(2, 0, 3, dtype=torch.int32)).tril(),
    "triu_out": lambda t: torch.triu(t(_f((3, 4), torch.float16)), 1, out=t(_empty(torch.float16))),
    "tril_out_strided": lambda t: torch.tril(t(_f((3, 4))), out=t(torch.zeros(4, 3)).t()),
    "triu_inplace": lambda t: t(_f((4, 4))).triu_(1),
    "tril_inplace_transposed_int32": lambda t: t(_f((3, 5), torch.int32)).t().tril_(),
    # topk: largest/smallest, dims incl. negative, sorted=False, ties (CPU's
    # positions), every real dtype, strides, k=0, 0-d, zero-size lines, out=
    "topk_f32": lambda t: t(_f((4, 6))).topk(3),
    "topk_smallest_dim0": lambda t: t(_f((5, 3), torch.float64)).topk(2, dim=0, largest=False),
    "topk_negative_dim_3d": lambda t: t(_f((2, 5, 4))).topk(2, dim=-2),
    "topk_int32": lambda t: t(_f((3, 8), torch.int32)).topk(4),
    "topk_ties_int64": lambda t: t(_f((3, 10), torch.int64) % 3).topk(5),
    "topk_ties_smallest": lambda t: t(_f((2, 9), torch.int16) % 2).topk(4, largest=False),
    "topk_bf16": lambda t: t(_f((3, 7), torch.bfloat16)).topk(3),
    "topk_f16_uint8": lambda t: (t(_f((6,), torch.float16)).topk(6), t(_f((9,), torch.uint8)).topk(2)),
    "topk_unsorted": lambda t: t(_f((3, 40))).topk(7, sorted=False),
    "topk_transposed": lambda t: t(_f((6, 4))).t().topk(2),
    "topk_k0": lambda t: t(_f((3, 4))).topk(0),
    "topk_full_line": lambda t: t(_f((2, 5))).topk(5, largest=False),
    "topk_0d": lambda t: t(torch.tensor(1.5)).topk(1),
    "topk_0d_k0": lambda t: t(torch.tensor(-2, dtype=torch.int64)).topk(0),
    "topk_zero_size_lines": lambda t: t(torch.empty(0, 5)).topk(2),
    "topk_out": lambda t: torch.topk(t(_f((3, 5))), 2, out=_pair(t)),
    "topk_out_int8": lambda t: torch.topk(t(_f((3, 5), torch.int8)), 3, 0, False, out=_pair(t, torch.int8)),
    "topk_out_strided": lambda t: torch.topk(
        t(_f((4, 5))), 3, out=(t(torch.zeros(3, 4)).t(), t(torch.zeros(3, 4, dtype=torch.int64)).t())
    ),
    # masked_fill_ with a 0-d value tensor (foo or CPU), masked_fill (a
    # composite over it): dtypes, a value of another dtype, broadcast masks,
    # strided self, zero-size
    "masked_fill_foo_value": lambda t: t(_f((3, 4))).masked_fill_(t(_mask((3, 4))), t(torch.tensor(-7.5))),
    "masked_fill_cpu_value": lambda t: t(_f((3, 4))).masked_fill_(t(_mask((3, 4))), torch.tensor(2.25)),
    "masked_fill_functional_broadcast": lambda t: t(_f((2, 3, 4))).masked_fill(
        t(_mask((3, 4))), t(torch.tensor(float("-inf")))
    ),
    "masked_fill_int64_value": lambda t: t(_f((5,), torch.int64)).masked_fill_(
        t(_mask((5,))), t(torch.tensor(42, dtype=torch.int64))
    ),
    "masked_fill_int32_from_int64_value": lambda t: t(_f((2, 5), torch.int32)).masked_fill_(
        t(_mask((5,))), torch.tensor(-3)
    ),
    "masked_fill_bool": lambda t: t(_f((4,), torch.bool)).masked_fill_(t(_mask((4,))), t(torch.tensor(True))),
    "masked_fill_bf16_f64_value": lambda t: t(_f((3, 3), torch.bfloat16)).masked_fill(
        t(_mask((3, 3))), t(torch.tensor(1.0 / 3, dtype=torch.float64))
    ),
    "masked_fill_float_of_int_value": lambda t: t(_f((4,))).masked_fill(t(_mask((4,))), t(torch.tensor(3))),
    "masked_fill_strided_inplace": lambda t: t(_f((4, 3))).t().masked_fill_(t(_mask((3, 4))), t(torch.tensor(0.5))),
    "masked_fill_zero_size": lambda t: t(torch.empty(0, 3)).masked_fill(t(_mask((0, 3))), t(torch.tensor(1.0))),
}


def _check(name, expected, actual):
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), name
        for e, a in zip(expected, actual):
            _check(name, e, a)
        return
    assert actual.device.type == "foo", name
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (name, actual, expected)
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_cases_match_cpu_and_run_no_python(no_fallback, name):
    f = CASES[name]
    expected, actual = run_native_case(name, f)
    _check(name, expected, actual)


def test_native_cases_are_registered():
    assert {
        "all.all_out",
        "any.all_out",
        "all.out",
        "any.out",
        "all.dims_out",
        "any.dims_out",
        "cumsum.out",
        "cumprod.out",
        "triu.out",
        "tril.out",
        "topk",
        "topk.values",
        "masked_fill_.Tensor",
        "normal_",
        "uniform_",
        "random_",
        "random_.from",
        "random_.to",
    } <= fast_lane_ops()


def test_out_of_another_dtype_keeps_cpu_values(no_fallback):
    """Outs Rust does not write directly take the Python kernel, with CPU's values."""
    x = _f((3, 4), torch.uint8)
    for f in (
        lambda t: torch.all(t(x), 1, out=t(_empty(torch.bool))),  # a bool out of a uint8 input
        lambda t: torch.any(t(_f((3, 4))), 0, out=t(_empty(torch.uint8))),  # a uint8 out of a float input
        lambda t: torch.cumsum(t(_f((3, 4), torch.int16)), 1, dtype=torch.int32),  # an int32 scan
        lambda t: torch.triu(t(_f((3, 3), torch.complex64)), 1),  # complex
        lambda t: t(_f((4, 4), torch.complex64)).cumsum(0),
    ):
        _check("slow", f(lambda v: v), f(lambda v: v.to("foo")))


ERROR_CASES = {
    "all_bad_dim": lambda t: t(_f((3, 4))).all(5),
    "any_dims_repeated": lambda t: t(_f((3, 4))).any((0, -2)),
    "all_out_float": lambda t: torch.all(t(_f((3, 4))), 1, out=t(_empty())),
    "any_all_out_int32": lambda t: torch.any(t(_f((3, 4))), out=t(_empty(torch.int32))),
    "cumsum_bad_dim": lambda t: t(_f((3, 4))).cumsum(2),
    "cumsum_out_dtype": lambda t: torch.cumsum(t(_f((3, 4))), 0, dtype=torch.float64, out=t(_empty())),
    "cumprod_bad_dim_0d": lambda t: t(torch.tensor(1.0)).cumprod(1),
    "triu_1d": lambda t: torch.triu(t(_f((3,)))),
    "tril_out_dtype": lambda t: torch.tril(t(_f((3, 4))), out=t(_empty(torch.float64))),
    "topk_k_too_large": lambda t: t(_f((3, 4))).topk(5),
    "topk_k_negative": lambda t: t(_f((3, 4))).topk(-1),
    "topk_0d_k2": lambda t: t(torch.tensor(1.0)).topk(2),
    "topk_bad_dim": lambda t: t(_f((3, 4))).topk(1, dim=2),
    "topk_values_dtype": lambda t: torch.topk(t(_f((3, 4))), 2, out=_pair(t, torch.float64)),
    "topk_indices_dtype": lambda t: torch.topk(t(_f((3, 4))), 2, out=(t(_empty()), t(_empty(torch.int32)))),
    "topk_bool": lambda t: t(_f((3, 4), torch.bool)).topk(1),
    "masked_fill_1d_value": lambda t: t(_f((3, 4))).masked_fill_(t(_mask((3, 4))), t(torch.tensor([1.0]))),
    "masked_fill_2d_cpu_value": lambda t: t(_f((3, 4))).masked_fill(t(_mask((3, 4))), torch.ones(1, 1)),
    "normal_std_negative": lambda t: t(_f((3, 4))).normal_(0, -1),
    "normal_std_negative_empty": lambda t: t(torch.empty(0)).normal_(2, -0.5),
    "normal_int": lambda t: t(torch.zeros(3, dtype=torch.int64)).normal_(),
    "normal_expanded": lambda t: t(torch.zeros(1)).expand(3).normal_(),
    "uniform_from_above_to": lambda t: t(_f((3, 4))).uniform_(1, 0),
    "uniform_half_out_of_bounds": lambda t: t(torch.zeros(3, dtype=torch.float16)).uniform_(0, 1e6),
    "uniform_int": lambda t: t(torch.zeros(3, dtype=torch.int64)).uniform_(),
    "random_from_not_below_to": lambda t: t(_f((3,))).random_(5, 2),
    "random_to_out_of_bounds": lambda t: t(torch.zeros(3, dtype=torch.uint8)).random_(0, 300),
    "random_from_out_of_bounds_int8": lambda t: t(torch.zeros(3, dtype=torch.int8)).random_(-200, None),
    "random_full_range_half": lambda t: t(torch.zeros(3, dtype=torch.float16)).random_(-(2**63), None),
    "random_full_range_int32": lambda t: t(torch.zeros(3, dtype=torch.int32)).random_(-(2**63), None),
    "random_expanded": lambda t: t(torch.zeros(1, dtype=torch.int64)).expand(4).random_(),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_native_errors_match_cpu(no_fallback, name):
    check_native_error(name, ERROR_CASES[name])


# ---- Random fills: the Python kernels' Philox draws, with no Python ----------

# (name, make the tensor on foo, the native call, the same fill through the
# op's Python kernel: torch.ops.foo_slow.<overload>)
_slow = torch.ops.foo_slow
RANDOM_CASES = {
    "normal_": (lambda: torch.zeros(37), lambda x: x.normal_(), lambda x: _slow.normal_(x)),
    "normal_mean_std_f64": (
        lambda: torch.zeros(5, 7, dtype=torch.float64),
        lambda x: x.normal_(1.5, 0.25),
        lambda x: _slow.normal_(x, 1.5, 0.25),
    ),
    "normal_transposed_bf16": (
        lambda: torch.zeros(6, 5, dtype=torch.bfloat16),
        lambda x: x.t().normal_(-1, 3),
        lambda x: _slow.normal_(x.t(), -1, 3),
    ),
    "normal_f16_std0": (
        lambda: torch.zeros(9, dtype=torch.float16),
        lambda x: x.normal_(2, 0),
        lambda x: _slow.normal_(x, 2, 0),
    ),
    "normal_zero_size": (lambda: torch.zeros(0, 3), lambda x: x.normal_(), lambda x: _slow.normal_(x)),
    "uniform_": (lambda: torch.zeros(33), lambda x: x.uniform_(), lambda x: _slow.uniform_(x)),
    "uniform_range_sliced_f64": (
        lambda: torch.zeros(8, 6, dtype=torch.float64),
        lambda x: x[::2, 1:].uniform_(-3, 5),
        lambda x: _slow.uniform_(x[::2, 1:], -3, 5),
    ),
    "uniform_bf16_empty_range": (
        lambda: torch.zeros(11, dtype=torch.bfloat16),
        lambda x: x.uniform_(2, 2),
        lambda x: _slow.uniform_(x, 2, 2),
    ),
    "random_int32": (
        lambda: torch.zeros(13, dtype=torch.int32),
        lambda x: x.random_(),
        lambda x: _slow.random_(x),
    ),
    "random_float": (lambda: torch.zeros(13), lambda x: x.random_(), lambda x: _slow.random_(x)),
    "random_bool": (
        lambda: torch.zeros(2, 9, dtype=torch.bool),
        lambda x: x.random_(),
        lambda x: _slow.random_(x),
    ),
    "random_int64": (
        lambda: torch.zeros(9, dtype=torch.int64),
        lambda x: x.random_(),
        lambda x: _slow.random_(x),
    ),
    "random_from_to_f16": (
        lambda: torch.zeros(10, dtype=torch.float16),
        lambda x: x.random_(-5, 10),
        lambda x: _slow.random__from(x, -5, 10),
    ),
    "random_from_none_uint8": (
        lambda: torch.zeros(10, dtype=torch.uint8),
        lambda x: x.random_(200, None),
        lambda x: _slow.random__from(x, 200, None),
    ),
    "random_full_range_int64": (
        lambda: torch.zeros(7, dtype=torch.int64),
        lambda x: x.random_(-(2**63), None),
        lambda x: _slow.random__from(x, -(2**63), None),
    ),
    "random_wide_range_f64": (
        lambda: torch.zeros(7, dtype=torch.float64),
        lambda x: x.random_(-(2**40), 2**45),
        lambda x: _slow.random__from(x, -(2**40), 2**45),
    ),
    "random_to_transposed_int16": (
        lambda: torch.zeros(4, 5, dtype=torch.int16),
        lambda x: x.t().random_(1000),
        lambda x: _slow.random__to(x.t(), 1000),
    ),
}


@pytest.mark.parametrize("name", sorted(RANDOM_CASES))
def test_random_fills_draw_the_python_kernels_values(no_fallback, name):
    make, native, slow = RANDOM_CASES[name]
    results = []
    for run in (native, slow):
        torch.manual_seed(1234)
        x = make().to("foo")
        before = foo_rs.python_kernel_calls()
        run(x)
        ran_python = foo_rs.python_kernel_calls() - before
        if run is native:
            assert not ran_python, f"{name} ran Python kernels: {dict(ran_python)}"
        else:
            assert sum(ran_python.values()) >= 1  # the comparison is with the Python kernel
        after = torch.empty(5, device="foo").normal_()  # where each left the default generator
        results.append((x.cpu(), after.cpu()))
    (xn, an), (xs, as_) = results
    assert xn.dtype == xs.dtype and xn.shape == xs.shape
    assert torch.equal(xn, xs), name
    assert torch.equal(an, as_), name


def test_random_factories_are_native_and_in_range(no_fallback):
    torch.manual_seed(7)
    before = foo_rs.python_kernel_calls()
    n = torch.randn(2000, device="foo")
    u = torch.rand(2000, device="foo", dtype=torch.float64)
    i = torch.randint(-3, 4, (2000,), device="foo")
    b = torch.empty(2000, device="foo").bernoulli_(0.5)
    ran_python = foo_rs.python_kernel_calls() - before
    assert not ran_python, dict(ran_python)
    assert abs(n.mean().item()) < 0.1 and abs(n.std().item() - 1) < 0.1
    assert 0 <= u.min().item() and u.max().item() < 1
    assert set(i.cpu().tolist()) == set(range(-3, 4))
    assert set(b.cpu().tolist()) == {0.0, 1.0}
    x = torch.empty(3000, dtype=torch.bfloat16, device="foo").uniform_(-2, 3)
    assert -2 <= x.min().item() and x.max().item() <= 3
    r = torch.empty(3000, dtype=torch.float16, device="foo").random_(-5, 10)
    assert set(r.cpu().tolist()) == set(float(v) for v in range(-5, 10))


def test_random_fills_follow_the_seed(no_fallback):
    torch.manual_seed(3)
    a = torch.empty(10, device="foo").normal_()
    torch.manual_seed(3)
    b = torch.empty(10, device="foo").normal_()
    c = torch.empty(10, device="foo").normal_()
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())


def test_explicit_generator_keeps_the_python_kernel(no_fallback):
    """An explicit generator is the Python kernel's (it advances that generator)."""
    outs = []
    for _ in range(2):
        g = torch.Generator("foo").manual_seed(5)
        before = foo_rs.python_kernel_calls()
        x = torch.empty(8, device="foo").normal_(generator=g)
        y = torch.empty(8, device="foo").uniform_(generator=g)
        assert (foo_rs.python_kernel_calls() - before) == {"normal_": 1, "uniform_": 1}
        outs.append(torch.cat([x, y]).cpu())
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0][:8], outs[0][8:])


def test_complex_fills_keep_the_python_kernel(no_fallback):
    torch.manual_seed(11)
    z = torch.empty(6, dtype=torch.complex64, device="foo").normal_()
    torch.manual_seed(11)
    r = torch.empty(6, 2, device="foo").normal_(0, 2**-0.5)
    assert torch.equal(torch.view_as_real(z).cpu(), r.cpu())
