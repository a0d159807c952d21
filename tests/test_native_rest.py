"""nonzero (bool-mask indexing), masked_select, isnan/isinf/isfinite/
isposinf/isneginf, nan_to_num, sort, prod, the losses (smooth_l1, huber,
binary_cross_entropy, nll_loss2d, log_sigmoid, mish's backward), adaptive
max pooling and nearest and bilinear upsampling on the native path
(rust/glue/native.cpp): ATen's own meta functions (or its CPU kernels'
steps where the op has none), then the Rust kernels the Python kernels
call (or, for upsampling, Rust kernels on ATen's own source indices), with
no Python kernel in the common case. Each case must give CPU's values,
dtype and shape; errors must be CPU's exception with CPU's message and
"(foo)"."""

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import check_native_error, make_tensor, run_native_case


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


def _empty(dtype=torch.float32):
    return torch.empty(0, dtype=dtype)


def _mask(shape, seed=1):
    return make_tensor(shape, torch.float32, seed) > 0


def _special(dtype=torch.float32):
    """NaN, +-inf, +-0 and ordinary values, repeated (ties for sort)."""
    v = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.0, 1e30, 1.5, float("nan"), -2.0, 3.0]
    return torch.tensor(v, dtype=torch.float64).to(dtype).reshape(3, 4)


CASES = {
    # nonzero: every dtype class, strides, 0-d, zero-size, out= (resized,
    # of the right shape, strided), bool-mask indexing (index.Tensor's
    # meta calls nonzero)
    "nonzero_f32": lambda t: torch.nonzero(t(_f((3, 4)) > 3)),
    "nonzero_float_values": lambda t: torch.nonzero(t(torch.tensor([[0.0, -0.0, 1.0], [float("nan"), 0.0, 2.0]]))),
    "nonzero_int64": lambda t: torch.nonzero(t(_f((2, 3, 4), torch.int64) % 3)),
    "nonzero_uint8": lambda t: torch.nonzero(t(_f((5, 6), torch.uint8) % 2)),
    "nonzero_bool": lambda t: torch.nonzero(t(_f((4, 5), torch.bool))),
    "nonzero_bf16": lambda t: torch.nonzero(t(_f((7,), torch.bfloat16).round())),
    "nonzero_f16_3d": lambda t: torch.nonzero(t(_f((2, 2, 3), torch.float16) > 0)),
    "nonzero_transposed": lambda t: torch.nonzero(t(_f((4, 3), torch.int32) % 2).t()),
    "nonzero_sliced": lambda t: torch.nonzero(t(_f((6, 8)) > 0)[::2, 1::3]),
    "nonzero_0d_true": lambda t: torch.nonzero(t(torch.tensor(3.0))),
    "nonzero_0d_false": lambda t: torch.nonzero(t(torch.tensor(0))),
    "nonzero_zero_size": lambda t: torch.nonzero(t(torch.empty(0, 3))),
    "nonzero_all_zero": lambda t: torch.nonzero(t(torch.zeros(3, 2))),
    "nonzero_as_tuple": lambda t: torch.nonzero(t(_f((3, 4)) > 0), as_tuple=True),
    "nonzero_out": lambda t: torch.nonzero(t(_f((3, 4)) > 0), out=t(_empty(torch.int64))),
    "nonzero_out_right_shape": lambda t: torch.nonzero(
        t(torch.tensor([[1, 0], [0, 1]])), out=t(torch.full((2, 2), 7, dtype=torch.int64))
    ),
    "nonzero_out_strided": lambda t: torch.nonzero(
        t(torch.tensor([[1, 0], [1, 1]])), out=t(torch.zeros(2, 3, dtype=torch.int64)).t()
    ),
    "argwhere": lambda t: torch.argwhere(t(_f((3, 4), torch.int16) % 2)),
    "bool_mask_index": lambda t: t(_f((4, 5)))[t(_mask((4, 5)))],
    "bool_mask_index_rows": lambda t: t(_f((4, 5), torch.int64))[t(_mask((4,)))],
    "bool_mask_index_assign_read": lambda t: t(_f((3, 4)))[t(_f((3, 4)) > 2)] * 2,
    # masked_select: dtypes, broadcasting either way, strides, 0-d, zero-size, out=
    "masked_select_f32": lambda t: torch.masked_select(t(_f((3, 4))), t(_mask((3, 4)))),
    "masked_select_int64": lambda t: torch.masked_select(t(_f((3, 4), torch.int64)), t(_mask((3, 4)))),
    "masked_select_bool": lambda t: torch.masked_select(t(_f((5,), torch.bool)), t(_mask((5,)))),
    "masked_select_f16": lambda t: torch.masked_select(t(_f((2, 3), torch.float16)), t(_mask((2, 3)))),
    "masked_select_broadcast_mask": lambda t: torch.masked_select(t(_f((3, 4), torch.float64)), t(_mask((4,)))),
    "masked_select_broadcast_self": lambda t: torch.masked_select(t(_f((4,))), t(_mask((3, 4)))),
    "masked_select_transposed": lambda t: torch.masked_select(t(_f((4, 3))).t(), t(_mask((3, 4)))),
    "masked_select_0d": lambda t: torch.masked_select(t(torch.tensor(2.5)), t(torch.tensor(True))),
    "masked_select_zero_size": lambda t: torch.masked_select(t(torch.empty(0, 4)), t(_mask((4,)))),
    "masked_select_none": lambda t: torch.masked_select(t(_f((3,))), t(torch.zeros(3, dtype=torch.bool))),
    "masked_select_out": lambda t: torch.masked_select(t(_f((3, 4))), t(_mask((3, 4))), out=t(_empty())),
    "masked_select_out_strided": lambda t: torch.masked_select(
        t(_f((2, 2))), t(torch.tensor([[True, False], [True, True]])), out=t(torch.zeros(6))[::2]
    ),
    # isnan/isinf/isfinite/isposinf/isneginf: floats with specials, every
    # dtype class, strides, zero-size, out= (ATen's composites over the
    # functional forms, a cast to another out dtype included)
    "isnan_f32": lambda t: torch.isnan(t(_special())),
    "isnan_f64_transposed": lambda t: torch.isnan(t(_special(torch.float64)).t()),
    "isnan_bf16": lambda t: torch.isnan(t(_special(torch.bfloat16))),
    "isnan_int": lambda t: torch.isnan(t(_f((3, 4), torch.int32))),
    "isnan_bool": lambda t: torch.isnan(t(_f((3,), torch.bool))),
    "isnan_zero_size": lambda t: torch.isnan(t(torch.empty(0, 2))),
    "isnan_out": lambda t: torch.ops.aten.isnan.out(t(_special()), out=t(_empty(torch.bool))),
    "isinf_f16": lambda t: torch.isinf(t(_special(torch.float16))),
    "isinf_sliced": lambda t: torch.isinf(t(_special())[:, ::2]),
    "isinf_int64": lambda t: torch.isinf(t(_f((4,), torch.int64))),
    "isinf_out": lambda t: torch.ops.aten.isinf.out(t(_special(torch.float64)), out=t(_empty(torch.bool))),
    "isfinite_f32": lambda t: torch.isfinite(t(_special())),
    "isfinite_uint8": lambda t: torch.isfinite(t(_f((2, 3), torch.uint8))),
    "isfinite_0d": lambda t: torch.isfinite(t(torch.tensor(float("inf")))),
    "isposinf_f32": lambda t: torch.isposinf(t(_special())),
    "isneginf_bf16_t": lambda t: torch.isneginf(t(_special(torch.bfloat16)).t()),
    "isposinf_int": lambda t: torch.isposinf(t(_f((5,), torch.int16))),
    "isneginf_out": lambda t: torch.isneginf(t(_special()), out=t(_empty(torch.bool))),
    # nan_to_num (and nan_to_num_, ATen's composites over .out): defaults,
    # given values, every float dtype, integers (a copy), strides, out=
    "nan_to_num_f32": lambda t: torch.nan_to_num(t(_special())),
    "nan_to_num_values": lambda t: torch.nan_to_num(t(_special(torch.float64)), nan=7.0, posinf=1e3, neginf=-5),
    "nan_to_num_f16": lambda t: torch.nan_to_num(t(_special(torch.float16))),
    "nan_to_num_bf16_posinf": lambda t: torch.nan_to_num(t(_special(torch.bfloat16)), posinf=2.0),
    "nan_to_num_int": lambda t: torch.nan_to_num(t(_f((3, 4), torch.int32))),
    "nan_to_num_bool": lambda t: torch.nan_to_num(t(_f((3,), torch.bool))),
    "nan_to_num_transposed": lambda t: torch.nan_to_num(t(_special()).t(), nan=-1.0),
    "nan_to_num_zero_size": lambda t: torch.nan_to_num(t(torch.empty(2, 0))),
    "nan_to_num_inplace": lambda t: t(_special()).nan_to_num_(nan=0.5),
    "nan_to_num_inplace_sliced": lambda t: t(_special(torch.float64))[:, 1:].nan_to_num_(),
    "nan_to_num_out": lambda t: torch.nan_to_num(t(_special()), out=t(_empty())),
    "nan_to_num_out_int": lambda t: torch.nan_to_num(t(_f((4,), torch.int64)), out=t(_empty(torch.int64))),
    # sort (sort and sort.values are ATen's composites over the stable
    # forms): dims, descending, NaN/inf/ties, every real dtype, strides,
    # 0-d, zero-size, out= (incl. strided outs), argsort/msort
    "sort_f32": lambda t: torch.sort(t(_f((4, 6)))),
    "sort_dim0_descending": lambda t: torch.sort(t(_f((5, 3))), 0, descending=True),
    "sort_specials": lambda t: torch.sort(t(_special()), 1),
    "sort_specials_descending_stable": lambda t: torch.sort(t(_special()), dim=1, descending=True, stable=True),
    "sort_ties_stable": lambda t: torch.sort(t(torch.tensor([3, 1, 2, 1, 3, 1])), stable=True),
    "sort_f64_3d_negative_dim": lambda t: torch.sort(t(_f((2, 3, 4), torch.float64)), -2),
    "sort_int32": lambda t: torch.sort(t(_f((3, 7), torch.int32)), stable=True),
    "sort_uint8_descending": lambda t: torch.sort(t(_f((9,), torch.uint8)), descending=True, stable=True),
    "sort_bool": lambda t: torch.sort(t(_f((2, 8), torch.bool)), stable=True),
    "sort_bf16": lambda t: torch.sort(t(_f((3, 5), torch.bfloat16)), stable=True),
    "sort_f16": lambda t: torch.sort(t(_f((3, 5), torch.float16)), dim=0, stable=True),
    "sort_transposed": lambda t: torch.sort(t(_f((6, 4))).t(), 1),
    "sort_sliced": lambda t: torch.sort(t(_f((6, 8)))[::2, 1::2], 0),
    "sort_0d": lambda t: torch.sort(t(torch.tensor(4.0))),
    "sort_zero_size": lambda t: torch.sort(t(torch.empty(3, 0))),
    "sort_zero_size_other_dim": lambda t: torch.sort(t(torch.empty(0, 3)), 1),
    "sort_values_out": lambda t: torch.sort(t(_f((3, 4))), 1, out=(t(_empty()), t(_empty(torch.int64)))),
    "sort_values_out_stable": lambda t: torch.sort(
        t(_f((3, 4))), dim=0, stable=True, out=(t(_empty()), t(_empty(torch.int64)))
    ),
    "sort_values_out_strided": lambda t: torch.sort(
        t(_f((3, 4))), 1, out=(t(torch.zeros(4, 3)).t(), t(torch.zeros(4, 3, dtype=torch.int64)).t())
    ),
    "argsort": lambda t: torch.argsort(t(_f((4, 5))), 1),
    "argsort_stable_descending": lambda t: torch.argsort(t(_special()), dim=0, descending=True, stable=True),
    "msort": lambda t: torch.msort(t(_f((5, 3), torch.int64))),
    # prod: every element (dtype= too), one dim (keepdim, negative dims,
    # dtype=, out=), integers and bool to int64, strides, 0-d, zero-size
    "prod_f32": lambda t: torch.prod(t(_f((3, 4)) / 8)),
    "prod_f64": lambda t: torch.prod(t(_f((2, 5), torch.float64) / 8)),
    "prod_int32_to_int64": lambda t: torch.prod(t(_f((5,), torch.int32) % 5)),
    "prod_bool": lambda t: torch.prod(t(_f((4,), torch.bool))),
    "prod_bf16": lambda t: torch.prod(t(_f((4,), torch.bfloat16) / 8)),
    "prod_dtype_long": lambda t: torch.prod(t(_f((4,), torch.int16) % 4), dtype=torch.int64),
    "prod_zero_size": lambda t: torch.prod(t(torch.empty(0, 3))),
    "prod_0d": lambda t: torch.prod(t(torch.tensor(-2.5))),
    "prod_transposed": lambda t: torch.prod(t(_f((3, 4)) / 8).t(), 1),
    "prod_dim": lambda t: torch.prod(t(_f((3, 4, 2)) / 8), 1),
    "prod_dim_keepdim_negative": lambda t: torch.prod(t(_f((3, 4)) / 8), -1, keepdim=True),
    "prod_dim_int64": lambda t: torch.prod(t(_f((3, 4), torch.int64) % 7), 0),
    "prod_dim_uint8_to_int64": lambda t: torch.prod(t(_f((3, 4), torch.uint8) % 3), 1),
    "prod_dim_bool": lambda t: torch.prod(t(_f((3, 4), torch.bool)), 1),
    "prod_dim_dtype_f64": lambda t: torch.prod(t(_f((3, 4), torch.float64) / 8), 0, dtype=torch.float64),
    "prod_dim_sliced": lambda t: torch.prod(t(_f((6, 5)) / 8)[::2], 0),
    "prod_dim_zero_size_reduced": lambda t: torch.prod(t(torch.empty(3, 0)), 1),
    "prod_dim_zero_size_kept": lambda t: torch.prod(t(torch.empty(0, 3)), 1),
    "prod_dim_0d": lambda t: torch.prod(t(torch.tensor(3.0)), 0),
    "prod_dim_out": lambda t: torch.prod(t(_f((3, 4)) / 8), 1, out=t(_empty())),
    "prod_dim_out_keepdim": lambda t: torch.prod(t(_f((3, 4), torch.int64) % 5), 0, True, out=t(_empty(torch.int64))),
    # losses: every reduction, float dtypes, strides, broadcasting where
    # CPU allows it, weights, out=; log_sigmoid's output and buffer
    "smooth_l1_mean": lambda t: F.smooth_l1_loss(t(_f((3, 4))), t(_f((3, 4), seed=2))),
    "smooth_l1_none_beta": lambda t: F.smooth_l1_loss(t(_f((3, 4))), t(_f((3, 4), seed=2)), reduction="none", beta=4.0),
    "smooth_l1_sum_f64_t": lambda t: F.smooth_l1_loss(
        t(_f((4, 3), torch.float64)).t(), t(_f((3, 4), torch.float64, seed=2)), reduction="sum", beta=0.0
    ),
    "smooth_l1_bf16": lambda t: F.smooth_l1_loss(t(_f((8,), torch.bfloat16)), t(_f((8,), torch.bfloat16, seed=2))),
    "smooth_l1_out": lambda t: torch.ops.aten.smooth_l1_loss(t(_f((3,))), t(_f((3,), seed=2)), 1, 0.5, out=t(_empty())),
    "smooth_l1_zero_size": lambda t: F.smooth_l1_loss(t(torch.empty(0, 3)), t(torch.empty(0, 3)), reduction="none"),
    "huber_mean": lambda t: F.huber_loss(t(_f((3, 4))), t(_f((3, 4), seed=2))),
    "huber_none_delta": lambda t: F.huber_loss(t(_f((3, 4))), t(_f((3, 4), seed=2)), reduction="none", delta=3.0),
    "huber_sum_f64": lambda t: F.huber_loss(
        t(_f((2, 5), torch.float64)), t(_f((2, 5), torch.float64, seed=2)), reduction="sum"
    ),
    "huber_broadcast_target": lambda t: F.huber_loss(t(_f((3, 4))), t(_f((4,), seed=2)).expand(3, 4)),
    "huber_out": lambda t: torch.ops.aten.huber_loss(t(_f((3,))), t(_f((3,), seed=2)), 0, 2.0, out=t(_empty())),
    "bce_mean": lambda t: F.binary_cross_entropy(
        t(torch.rand(3, 4, generator=_g())), t(torch.rand(3, 4, generator=_g(2)))
    ),
    "bce_weight_none": lambda t: F.binary_cross_entropy(
        t(torch.rand(3, 4, generator=_g())),
        t(torch.rand(3, 4, generator=_g(2))),
        weight=t(torch.rand(4, generator=_g(3))),
        reduction="none",
    ),
    "bce_sum_f64": lambda t: F.binary_cross_entropy(
        t(torch.rand(5, dtype=torch.float64, generator=_g())),
        t(torch.tensor([0.0, 1.0, 1.0, 0.0, 0.5], dtype=torch.float64)),
        reduction="sum",
    ),
    "bce_out": lambda t: torch.ops.aten.binary_cross_entropy(
        t(torch.rand(3, generator=_g())), t(torch.rand(3, generator=_g(2))), None, 1, out=t(torch.empty(3))
    ),
    "bce_backward": lambda t: torch.ops.aten.binary_cross_entropy_backward(
        t(torch.rand(3, 4, generator=_g(4))),
        t(torch.rand(3, 4, generator=_g())),
        t(torch.rand(3, 4, generator=_g(2))),
        t(torch.rand(3, 4, generator=_g(3))),
        0,
    ),
    "bce_backward_mean": lambda t: torch.ops.aten.binary_cross_entropy_backward(
        t(torch.tensor(0.5)), t(torch.rand(3, 4, generator=_g())), t(torch.rand(3, 4, generator=_g(2))), None, 1
    ),
    "nll2d_mean": lambda t: F.nll_loss(
        t(_f((2, 3, 4, 5)).log_softmax(1)), t(torch.randint(0, 3, (2, 4, 5), generator=_g()))
    ),
    "nll2d_none_weight_ignore": lambda t: F.nll_loss(
        t(_f((2, 3, 4, 5), torch.float64).log_softmax(1)),
        t(torch.randint(0, 3, (2, 4, 5), generator=_g())),
        weight=t(torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)),
        ignore_index=1,
        reduction="none",
    ),
    "nll2d_sum_channels_last": lambda t: F.nll_loss(
        t(_f((2, 3, 4, 5)).log_softmax(1)).contiguous(memory_format=torch.channels_last),
        t(torch.randint(0, 3, (2, 4, 5), generator=_g())),
        reduction="sum",
    ),
    "log_sigmoid_forward": lambda t: torch.ops.aten.log_sigmoid_forward(t(_f((3, 4)))),
    "log_sigmoid_forward_t_f64": lambda t: torch.ops.aten.log_sigmoid_forward(t(_f((4, 3), torch.float64)).t()),
    "log_sigmoid_forward_out": lambda t: torch.ops.aten.log_sigmoid_forward(
        t(_f((3, 4))), output=t(_empty()), buffer=t(_empty())
    ),
    "logsigmoid": lambda t: F.logsigmoid(t(_special())),
    # (CPU's backward reads the buffer its forward wrote: exp(-|x|))
    "log_sigmoid_backward": lambda t: torch.ops.aten.log_sigmoid_backward(
        t(_f((3, 4), seed=2)), t(_f((3, 4))), t(torch.exp(-_f((3, 4)).abs()))
    ),
    "log_sigmoid_backward_out": lambda t: torch.ops.aten.log_sigmoid_backward(
        t(_f((3, 4), seed=2)), t(_f((3, 4))), t(torch.exp(-_f((3, 4)).abs())), grad_input=t(_empty())
    ),
    "mish_backward": lambda t: torch.ops.aten.mish_backward(t(_f((3, 4), seed=2)), t(_f((3, 4)))),
    "mish_backward_broadcast_f64": lambda t: torch.ops.aten.mish_backward(
        t(_f((4,), torch.float64, seed=2)), t(_f((3, 4), torch.float64))
    ),
    # adaptive max pooling: 3-d and 4-d, output sizes that divide or not,
    # channels-last, out=, backward
    "adaptive_max_pool2d": lambda t: F.adaptive_max_pool2d(t(_f((2, 3, 7, 9))), (3, 4), return_indices=True),
    "adaptive_max_pool2d_3d_f64": lambda t: F.adaptive_max_pool2d(
        t(_f((3, 8, 8), torch.float64)), 4, return_indices=True
    ),
    "adaptive_max_pool2d_channels_last": lambda t: F.adaptive_max_pool2d(
        t(_f((2, 3, 6, 6)).contiguous(memory_format=torch.channels_last)), (2, 5)
    ),
    "adaptive_max_pool2d_specials": lambda t: F.adaptive_max_pool2d(t(_special().reshape(1, 1, 3, 4)), (2, 2)),
    "adaptive_max_pool2d_out": lambda t: torch.ops.aten.adaptive_max_pool2d(
        t(_f((1, 2, 5, 5))), [2, 2], out=t(_empty()), indices=t(_empty(torch.int64))
    ),
    # nearest upsampling (2-d, and its exact form): sizes, scales,
    # channels-last, uint8, zero batch, out=; backward
    "upsample_nearest2d_size": lambda t: F.interpolate(t(_f((2, 3, 4, 5))), size=(7, 9), mode="nearest"),
    "upsample_nearest2d_scale": lambda t: F.interpolate(t(_f((1, 2, 3, 4), torch.float64)), scale_factor=2.5),
    "upsample_nearest2d_down": lambda t: F.interpolate(t(_f((1, 2, 8, 9))), size=(3, 4)),
    "upsample_nearest2d_uint8": lambda t: F.interpolate(t(_f((1, 3, 4, 4), torch.uint8)), scale_factor=2),
    "upsample_nearest2d_bf16_channels_last": lambda t: F.interpolate(
        t(_f((2, 3, 4, 5), torch.bfloat16)).contiguous(memory_format=torch.channels_last), size=(6, 7)
    ),
    "upsample_nearest2d_zero_batch": lambda t: F.interpolate(t(torch.empty(0, 2, 3, 3)), size=(5, 5)),
    "upsample_nearest2d_out": lambda t: torch.ops.aten.upsample_nearest2d(
        t(_f((1, 2, 3, 3))), [5, 4], None, None, out=t(_empty())
    ),
    "upsample_nearest_exact2d": lambda t: F.interpolate(t(_f((2, 3, 4, 5))), size=(7, 3), mode="nearest-exact"),
    "upsample_nearest2d_backward": lambda t: torch.ops.aten.upsample_nearest2d_backward(
        t(_f((2, 3, 7, 9), torch.float64)), [7, 9], [2, 3, 4, 5]
    ),
    "upsample_nearest2d_backward_down_scales": lambda t: torch.ops.aten.upsample_nearest2d_backward(
        t(_f((1, 2, 3, 4))), [3, 4], [1, 2, 8, 9], 0.4, 0.45
    ),
    "upsample_nearest_exact2d_backward_out": lambda t: torch.ops.aten._upsample_nearest_exact2d_backward(
        t(_f((1, 2, 5, 6))), [5, 6], [1, 2, 3, 4], grad_input=t(_empty())
    ),
    # bilinear upsampling (2-d): align_corners either way, scales, down,
    # float dtypes, channels-last, out=; backward
    "upsample_bilinear2d": lambda t: F.interpolate(t(_f((2, 3, 4, 5))), size=(7, 9), mode="bilinear"),
    "upsample_bilinear2d_align": lambda t: F.interpolate(
        t(_f((1, 2, 3, 4), torch.float64)), size=(6, 5), mode="bilinear", align_corners=True
    ),
    "upsample_bilinear2d_scale": lambda t: F.interpolate(t(_f((1, 2, 3, 4))), scale_factor=1.7, mode="bilinear"),
    "upsample_bilinear2d_down": lambda t: F.interpolate(t(_f((1, 2, 9, 8))), size=(4, 3), mode="bilinear"),
    "upsample_bilinear2d_bf16": lambda t: F.interpolate(
        t(_f((1, 2, 4, 4), torch.bfloat16)), size=(8, 6), mode="bilinear"
    ),
    "upsample_bilinear2d_channels_last": lambda t: F.interpolate(
        t(_f((2, 3, 4, 5)).contiguous(memory_format=torch.channels_last)), size=(6, 7), mode="bilinear"
    ),
    "upsample_bilinear2d_out": lambda t: torch.ops.aten.upsample_bilinear2d(
        t(_f((1, 2, 3, 3))), [5, 4], False, None, None, out=t(_empty())
    ),
    "upsample_bilinear2d_backward": lambda t: torch.ops.aten.upsample_bilinear2d_backward(
        t(_f((2, 3, 7, 9), torch.float64)), [7, 9], [2, 3, 4, 5], False
    ),
    "upsample_bilinear2d_backward_align_out": lambda t: torch.ops.aten.upsample_bilinear2d_backward(
        t(_f((1, 2, 5, 6))), [5, 6], [1, 2, 3, 4], True, grad_input=t(_empty())
    ),
}


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _check(name, expected, actual):
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), name
        for e, a in zip(expected, actual):
            _check(name, e, a)
        return
    assert actual.device.type == "foo", name
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (name, actual, expected)
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    else:
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_cases_match_cpu_and_run_no_python(no_fallback, name):
    f = CASES[name]
    expected, actual = run_native_case(name, f)
    _check(name, expected, actual)


def test_native_cases_are_registered():
    assert {
        "nonzero",
        "nonzero.out",
        "masked_select",
        "masked_select.out",
        "isnan",
        "isinf",
        "isfinite",
        "isposinf",
        "isposinf.out",
        "isneginf",
        "isneginf.out",
        "nan_to_num.out",
        "sort.stable",
        "sort.values_stable",
        "prod",
        "prod.int_out",
        "smooth_l1_loss.out",
        "huber_loss",
        "huber_loss.out",
        "huber_loss_backward.out",
        "smooth_l1_loss_backward.grad_input",
        "binary_cross_entropy",
        "binary_cross_entropy.out",
        "binary_cross_entropy_backward",
        "binary_cross_entropy_backward.grad_input",
        "nll_loss2d_forward",
        "nll_loss2d_forward.output",
        "nll_loss2d_backward",
        "nll_loss2d_backward.grad_input",
        "log_sigmoid_forward",
        "log_sigmoid_forward.output",
        "log_sigmoid_backward",
        "log_sigmoid_backward.grad_input",
        "mish_backward",
        "adaptive_max_pool2d.out",
        "adaptive_max_pool2d_backward.grad_input",
        "upsample_nearest2d",
        "upsample_nearest2d.out",
        "upsample_nearest2d_backward",
        "upsample_nearest2d_backward.grad_input",
        "_upsample_nearest_exact2d",
        "_upsample_nearest_exact2d.out",
        "_upsample_nearest_exact2d_backward",
        "_upsample_nearest_exact2d_backward.grad_input",
        "upsample_bilinear2d",
        "upsample_bilinear2d.out",
        "upsample_bilinear2d_backward",
        "upsample_bilinear2d_backward.grad_input",
    } <= fast_lane_ops()


def test_nonzero_layout_is_cpus():
    # CPU's nonzero gives a Fortran-contiguous result (gh-46224).
    x = torch.tensor([[1, 0, 2], [0, 3, 0]])
    assert torch.nonzero(x.to("foo")).stride() == torch.nonzero(x).stride()


def test_slow_cases_keep_cpu_values(no_fallback):
    # Cases the Rust kernels do not write directly: the Python kernels, as before.
    for f in (
        lambda t: torch.nonzero(t(torch.tensor([0j, 1 + 1j, 0j]))),  # complex
        lambda t: torch.masked_select(t(torch.tensor([1j, 2j])), t(torch.tensor([True, False]))),
        lambda t: torch.isnan(t(torch.tensor([complex(float("nan"), 0), 1j]))),
        lambda t: torch.prod(t(_f((3, 4), torch.float16)), 1, dtype=torch.float32),  # a cast
        lambda t: torch.prod(t(_f((3,), torch.int32) % 4), dtype=torch.int32),
        lambda t: torch.sort(t(torch.tensor([2 + 1j, 1j]))),
    ):
        try:
            expected = f(lambda v: v)
        except Exception as e:  # noqa: BLE001 - then foo must raise the same
            with pytest.raises(type(e)):
                f(lambda v: v.to("foo"))
            continue
        _check("slow", expected, f(lambda v: v.to("foo")))


ERROR_CASES = {
    "nonzero_out_float": lambda t: torch.nonzero(t(_f((3,))), out=t(_empty())),
    "masked_select_byte_mask": lambda t: torch.masked_select(t(_f((3,))), t(torch.ones(3, dtype=torch.uint8))),
    "masked_select_out_dtype": lambda t: torch.masked_select(t(_f((3,))), t(_mask((3,))), out=t(_empty(torch.float64))),
    "masked_select_not_broadcastable": lambda t: torch.masked_select(t(_f((3, 4))), t(_mask((3,)))),
    "nan_to_num_out_dtype": lambda t: torch.nan_to_num(t(_f((3,))), out=t(_empty(torch.float64))),
    "isposinf_out_float": lambda t: torch.isposinf(t(_f((3,))), out=t(_empty())),
    "sort_bad_dim": lambda t: torch.sort(t(_f((3, 4))), 2),
    "sort_out_dtype": lambda t: torch.sort(t(_f((3, 4))), out=(t(_empty(torch.float64)), t(_empty(torch.int64)))),
    "prod_bad_dim": lambda t: torch.prod(t(_f((3, 4))), 3),
    "prod_out_dtype": lambda t: torch.prod(t(_f((3, 4))), 0, dtype=torch.float64, out=t(_empty())),
    "smooth_l1_negative_beta": lambda t: F.smooth_l1_loss(t(_f((3,))), t(_f((3,))), beta=-1.0),
    "smooth_l1_not_broadcastable": lambda t: torch.ops.aten.smooth_l1_loss(t(_f((3,))), t(_f((4,))), 0),
    "bce_out_of_range": lambda t: F.binary_cross_entropy(t(torch.tensor([2.0])), t(torch.tensor([1.0]))),
    "log_sigmoid_backward_mixed": lambda t: torch.ops.aten.log_sigmoid_backward(
        t(_f((3,), torch.float64)), t(_f((3,))), t(torch.empty(3))
    ),
    "adaptive_max_pool2d_2d_input": lambda t: torch.ops.aten.adaptive_max_pool2d.out(
        t(_f((4, 4))), [2, 2], out=t(_empty()), indices=t(_empty(torch.int64))
    ),
    "upsample_nearest2d_3d_input": lambda t: torch.ops.aten.upsample_nearest2d(t(_f((2, 3, 4))), [4, 4]),
    "upsample_bilinear2d_3d_input": lambda t: torch.ops.aten.upsample_bilinear2d(t(_f((2, 3, 4))), [4, 4], False),
    "upsample_nearest2d_zero_output": lambda t: torch.ops.aten.upsample_nearest2d(t(_f((1, 1, 2, 2))), [0, 3]),
    "adaptive_max_pool2d_backward_dtype": lambda t: torch.ops.aten.adaptive_max_pool2d_backward.grad_input(
        t(_f((1, 1, 2, 2), torch.float64)),
        t(_f((1, 1, 4, 4))),
        t(torch.zeros(1, 1, 2, 2, dtype=torch.int64)),
        grad_input=t(_empty()),
    ),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_native_errors_match_cpu(no_fallback, name):
    check_native_error(name, ERROR_CASES[name])


def test_autograd_through_native_ops(no_fallback):
    # sort's and prod's backward (ATen's formulas over foo's native kernels).
    x = _f((3, 5), torch.float64) / 8
    grads = []
    for dev in ("cpu", "foo"):
        a, b, c = (x.clone().to(dev).requires_grad_() for _ in range(3))
        v, _ = torch.sort(a, 1)
        (v * torch.arange(5.0, dtype=torch.float64, device=dev)).sum().backward()
        torch.prod(b, 0).sum().backward()
        c[c > 0].sum().backward()
        grads.append([a.grad.cpu(), b.grad.cpu(), c.grad.cpu()])
    for e, a in zip(*grads):
        torch.testing.assert_close(a, e)


_LOSSES = {
    "smooth_l1": lambda x, y: F.smooth_l1_loss(x, y, beta=0.5),
    "smooth_l1_none": lambda x, y: (F.smooth_l1_loss(x, y, reduction="none") * 2).sum(),
    "huber": lambda x, y: F.huber_loss(x, y, delta=0.7, reduction="sum"),
    "bce": lambda x, y: F.binary_cross_entropy(x.sigmoid(), y.sigmoid().detach()),
    "bce_weight": lambda x, y: F.binary_cross_entropy(x.sigmoid(), y.sigmoid().detach(), weight=y.detach().abs()),
    "logsigmoid": lambda x, y: (F.logsigmoid(x) * y).sum(),
    "mish": lambda x, y: (F.mish(x) * y).sum(),
    "nll2d": lambda x, y: F.nll_loss(x.reshape(1, 2, 3, 4).log_softmax(1), (y.reshape(1, 2, 3, 4) > 0).long()[:, 0]),
    "adaptive_max_pool2d": lambda x, y: (F.adaptive_max_pool2d(x.reshape(1, 2, 3, 4), (2, 3)) ** 2).sum(),
    "upsample_nearest2d": lambda x, y: (F.interpolate(x.reshape(1, 2, 3, 4), size=(5, 7)) ** 2).sum(),
    "upsample_bilinear2d": lambda x, y: (F.interpolate(x.reshape(1, 2, 3, 4), size=(5, 7), mode="bilinear") ** 2).sum(),
}


@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_loss_backward_matches_cpu_with_no_python(no_fallback, name):
    f = _LOSSES[name]
    x, y = _f((6, 4), torch.float64) / 8, _f((6, 4), torch.float64, seed=3) / 8
    grads = []
    for dev in ("cpu", "foo", "foo"):
        a, b = x.clone().to(dev).requires_grad_(), y.clone().to(dev).requires_grad_()
        before = foo_rs.python_kernel_calls()
        f(a, b).backward()
        ran_python = foo_rs.python_kernel_calls() - before
        grads.append([None if g.grad is None else g.grad.cpu() for g in (a, b)])
    assert not ran_python, f"{name} ran Python kernels: {dict(ran_python)}"
    for e, a in zip(grads[0], grads[2]):
        assert (e is None) == (a is None), name
        if e is not None:
            torch.testing.assert_close(a, e)
