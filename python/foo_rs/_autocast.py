"""Autocast policies for foo (``torch.autocast("foo")``).

torch registers autocast kernels only for its own devices, so foo's come from
here, on the AutocastPrivateUse1 key, with CUDA's op lists: matmul-like ops run
in the autocast dtype, precision-sensitive ops in float32, and multi-input ops
at the widest input type. Every other op falls through.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

_KEY = "AutocastPrivateUse1"
_EXCLUDE = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

# CUDA's lists (aten/src/ATen/autocast_mode.cpp), limited to overloads that exist.
LOWER_PRECISION_FP = [
    "_convolution.deprecated",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linalg_vecdot",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "scaled_dot_product_attention",
]
FP32 = [
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "nuclear_norm.dim",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "softmax.int",
    "log_softmax.int",
    "cumprod",
    "cumsum",
    "prod",
    "prod.dim_int",
    "sum",
    "sum.dim_IntList",
    "linalg_vector_norm",
]
PROMOTE = [
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "grid_sampler",
    "index_put",
    "scatter_add",
    "tensordot",
]


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "foo" and t.is_floating_point() and t.dtype != torch.float64


def _cast(x, dtype):
    if _eligible(x) and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _widest(args, kwargs):
    widest = None
    for x in list(args) + list(kwargs.values()):
        for t in x if isinstance(x, (list, tuple)) else (x,):
            if _eligible(t):
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def _make(op, policy):
    def kernel(*args, **kwargs):
        if policy == "lower":
            dtype = torch.get_autocast_dtype("foo")
        elif policy == "fp32":
            dtype = torch.float32
        else:
            dtype = _widest(args, kwargs)
        if dtype is not None:
            args = tuple(_cast(a, dtype) for a in args)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _overload(name):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


_lib = torch.library.Library("aten", "IMPL")
_fallthrough = torch.library.Library("_", "IMPL")
_fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)

REGISTERED: dict[str, str] = {}
for _policy, _names in (("lower", LOWER_PRECISION_FP), ("fp32", FP32), ("promote", PROMOTE)):
    for _name in _names:
        _op = _overload(_name)
        if _op is None:
            continue
        _lib.impl(_name, _make(_op, _policy), _KEY)
        REGISTERED[_name] = _policy
