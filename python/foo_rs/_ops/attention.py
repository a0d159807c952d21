"""Scaled dot-product attention on foo's fused Rust kernel (the OVERRIDEABLE
SDPA backend): ``_scaled_dot_product_fused_attention_overrideable`` and its
backward.

``F.scaled_dot_product_attention`` asks ATen's ``_fused_sdp_choice_stub``,
which the glue (rust/glue/native.cpp, ``sdp_choice``) answers in C++:
OVERRIDEABLE for foo inputs the fused kernel covers, MATH otherwise (the math
composite then raises CPU's errors for bad input). Both ops have C++ kernels
on the native path (allocation in C++, compute in Rust, no Python per call);
the Python kernels below are their slow path: calls the C++ kernels do not
take directly (a debug mask of dropout, mixed devices or dtypes, bad ranks),
whose errors they raise naming foo. The fused kernel is tiled with an online
softmax (rust/src/kernels/attention.rs): memory linear in the sequence
lengths, causal, float and bool masks, dropout from foo's Philox generator,
grouped-query heads.
"""

from __future__ import annotations

import math

import torch

from ._registry import _C, check_same_device, desc, impl, native_only

__all__: list[str] = []

_FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_OP = "_scaled_dot_product_fused_attention_overrideable"

# Which backend SDPA runs on foo is C++'s rule alone (rust/glue/native.cpp's
# sdp_choice, also what ATen's _fused_sdp_choice_stub asks): no Python form.
native_only("_fused_sdp_choice")


def _as_4d(op, query, key, value):
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError(
            f"{op}: query, key and value must all be 3-d or 4-d (on foo), got {query.dim()}-d, "
            f"{key.dim()}-d and {value.dim()}-d"
        )
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise RuntimeError(
                f"{op}: Expected query, key, and value to have the same dtype (on foo), but got "
                f"query.dtype: {query.dtype}, {name}.dtype: {t.dtype}"
            )
    if query.dtype not in _FLOAT:
        raise RuntimeError(f"{op}: foo supports float32, float64, float16 and bfloat16, got {query.dtype}")
    if query.dim() == 3:
        return query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    return query, key, value


def _bias_4d(op, bias, full):
    if bias is None:
        return None
    if bias.dim() > 4 or any(m not in (1, f) for m, f in zip(reversed(bias.shape), reversed(full))):
        raise RuntimeError(f"{op}: attn_bias of shape {list(bias.shape)} does not broadcast to {list(full)} (on foo)")
    return bias.expand(full)


def _like_query(query, shape):
    """The output layout ATen's meta function gives: the query's."""
    if tuple(query.shape) == tuple(shape):
        return torch.empty_like(query.transpose(1, 2)).transpose(1, 2)
    order = sorted(range(query.dim()), key=lambda i: query.stride()[i], reverse=True)
    permuted = torch.empty([shape[i] for i in order], dtype=query.dtype, device=query.device)
    return permuted.permute([order.index(i) for i in range(query.dim())])


def _scale(scale, d):
    if scale is not None:
        return float(scale)
    return 1.0 / math.sqrt(d) if d > 0 else math.inf


def _i64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@impl(_OP)
def sdpa_overrideable(
    query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    check_same_device(_OP, query, key, value, attn_bias)
    q, k, v = _as_4d(_OP, query, key, value)
    b, hq, seq_q, d = q.shape
    seq_k, dv = k.shape[2], v.shape[3]
    bias = _bias_4d(_OP, attn_bias, (b, hq, seq_q, seq_k))
    out = _like_query(query, (*query.shape[:-1], dv))
    out4 = out.unsqueeze(0) if query.dim() == 3 else out
    lse = torch.empty((b, hq, seq_q), dtype=torch.float32, device=query.device)
    p = float(dropout_p)
    seed, offset = _C.sdpa_forward(
        desc(out4),
        desc(lse),
        desc(q),
        desc(k),
        desc(v),
        None if bias is None else desc(bias),
        bool(is_causal),
        _scale(scale, d),
        p,
        query.device.index or 0,
    )
    debug = torch.empty(0, dtype=query.dtype, device=query.device)
    if return_debug_mask and p > 0.0:
        # The keep mask of the attention weights, drawn as the kernel drew it.
        debug = torch.empty((b, hq, seq_q, seq_k), dtype=torch.bool, device=query.device)
        _C.bernoulli_(desc(debug), 1.0 - p, None, None, (seed, offset))
    philox_seed = torch.tensor(_i64(seed), dtype=torch.int64)
    philox_offset = torch.tensor(_i64(offset), dtype=torch.int64)
    return out, lse, None, None, seq_q, seq_k, philox_seed, philox_offset, debug


@impl(_OP + "_backward")
def sdpa_overrideable_backward(
    grad_out,
    query,
    key,
    value,
    attn_bias,
    grad_input_mask,
    out,
    logsumexp,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    philox_seed,
    philox_offset,
    *,
    scale=None,
):
    op = _OP + "_backward"
    check_same_device(op, grad_out, query, key, value, attn_bias, out, logsumexp)
    q, k, v = _as_4d(op, query, key, value)
    b, hq, seq_q, d = q.shape
    hk, seq_k = k.shape[1], k.shape[2]
    bias = _bias_4d(op, attn_bias, (b, hq, seq_q, seq_k))
    want_q, want_k, want_v, want_bias = (bool(x) for x in grad_input_mask)
    gq = torch.empty_like(query) if want_q else None
    gk = torch.empty_like(key) if want_k else None
    gv = torch.empty_like(value) if want_v else None
    gbias = None
    if want_bias and attn_bias is not None:
        # Zeros: causal tiles the kernel skips have no gradient.
        gbias = torch.zeros((b, hq, seq_q, seq_k), dtype=attn_bias.dtype, device=query.device)
    if query.dim() == 3:
        g4, o4 = grad_out.unsqueeze(0), out.unsqueeze(0)
        gq4, gk4, gv4 = (None if t is None else t.unsqueeze(0) for t in (gq, gk, gv))
    else:
        g4, o4, gq4, gk4, gv4 = grad_out, out, gq, gk, gv
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    work = torch.zeros(_C.sdpa_backward_work(b, hq, hk, seq_q, seq_k, d), dtype=acc, device=query.device)
    seed = int(philox_seed.item()) & ((1 << 64) - 1) if philox_seed is not None and philox_seed.numel() else 0
    offset = int(philox_offset.item()) & ((1 << 64) - 1) if philox_offset is not None and philox_offset.numel() else 0
    _C.sdpa_backward(
        None if gq4 is None else desc(gq4),
        None if gk4 is None else desc(gk4),
        None if gv4 is None else desc(gv4),
        None if gbias is None else desc(gbias),
        desc(g4),
        desc(q),
        desc(k),
        desc(v),
        None if bias is None else desc(bias),
        desc(o4),
        desc(logsumexp.contiguous()),
        desc(work),
        bool(is_causal),
        _scale(scale, d),
        float(dropout_p),
        seed,
        offset,
    )
    del work
    if gbias is not None:
        gbias = gbias.sum_to_size(attn_bias.shape)
    return gq, gk, gv, gbias
