"""foo's own operators, ``torch.ops.foo.*``: fused Rust kernels that no
single aten op names.

* ``foo::rms_norm(Tensor x, int[] normalized_shape, Tensor? weight=None,
  float? eps=None) -> Tensor``: ``F.rms_norm`` in one pass per row (the
  statistic in float32 for float32/float16/bfloat16, float64 for float64).
* ``foo::rms_norm_backward(Tensor grad_out, Tensor x, int[] normalized_shape,
  Tensor? weight, float? eps, bool[2] output_mask) -> (Tensor, Tensor)``:
  its gradients (input, weight) in one Rust kernel that recomputes the row
  statistic from the row it reads; a gradient not asked for is an empty
  tensor.
* ``foo::linear_act(Tensor x, Tensor weight, Tensor? bias=None, str
  act="none") -> Tensor``: ``act(F.linear(x, weight, bias))`` with ``act`` in
  none, relu, gelu, gelu_tanh, silu; on foo one Rust kernel applies bias and
  activation to each tile of the product while it is in cache.

Each op has a foo kernel (Rust), a reference kernel for every other device
(``CompositeExplicitAutograd``: the composite of torch ops, so CPU tensors
work too and define the semantics), a fake kernel (``register_fake``: shapes,
dtypes and the argument checks, so the ops trace under FakeTensor, export and
``torch.compile``, where Inductor keeps each one extern call) and autograd
(``register_autograd``).

Why a ``torch.library.Library("foo", "DEF")`` and not ``custom_op``: the
schema is written once, as text, in ATen's own form (``rms_norm``'s is
aten's), with defaults; each dispatch key gets exactly one kernel, the same
way on torch 2.13-2.15, and other code can add kernels to the namespace
(``Library("foo", "IMPL")``) as OpenReg's ``TORCH_LIBRARY(openreg, m)`` allows.

>>> x = torch.randn(8, 64, device="foo", requires_grad=True)
>>> w = torch.ones(64, device="foo")
>>> y = torch.ops.foo.rms_norm(x, [64], w, 1e-6)     # == F.rms_norm(x, [64], w, 1e-6)
>>> h = torch.ops.foo.linear_act(y, torch.randn(256, 64, device="foo"), None, "gelu")
>>> h.sum().backward()
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import _C
from ._ops._registry import check_same_device, desc
from ._ops.linalg import SCALAR_NAME

__all__ = ["ACTIVATIONS", "linear_act", "rms_norm"]

#: The activations ``foo::linear_act`` fuses.
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
_FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

_lib = torch.library.Library("foo", "DEF")
_lib.define("rms_norm(Tensor x, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor")
_lib.define(
    "rms_norm_backward(Tensor grad_out, Tensor x, int[] normalized_shape, Tensor? weight, float? eps, "
    "bool[2] output_mask) -> (Tensor, Tensor)"
)
_lib.define('linear_act(Tensor x, Tensor weight, Tensor? bias=None, str act="none") -> Tensor')


def _name(dtype: torch.dtype) -> str:
    return SCALAR_NAME.get(dtype, str(dtype))


# --------------------------------------------------------------------------- rms_norm


def _check_rms_norm(x, shape, weight) -> tuple[int, int]:
    """CPU's checks and messages (naming foo); returns the (rows, row length)
    the kernels see."""
    if len(shape) < 1:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
            f"but got normalized_shape = {list(shape)} (on foo)"
        )
    if weight is not None and list(weight.shape) != list(shape):
        raise RuntimeError(
            "Expected weight to be of same shape as normalized_shape, but got weight of shape "
            f"{list(weight.shape)} and normalized_shape = {list(shape)} (on foo)"
        )
    nd = len(shape)
    if x.dim() < nd or list(x.shape[x.dim() - nd :]) != list(shape):
        expected = "[*" + "".join(f", {s}" for s in shape) + "]"
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape {expected}, but got input of size"
            f"{list(x.shape)} (on foo)"
        )
    if x.dtype not in _FLOAT:
        raise NotImplementedError(f"\"rms_norm\" not implemented for '{_name(x.dtype)}' (on foo)")
    n = math.prod(shape)
    return (x.numel() // n if n else math.prod(x.shape[: x.dim() - nd])), n


def _eps(x: torch.Tensor, eps: float | None) -> float:
    # ATen's default: the epsilon of the type the statistic is computed in.
    return eps if eps is not None else torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


@torch.library.impl(_lib, "rms_norm", "PrivateUse1")
def _rms_norm_foo(x, normalized_shape, weight=None, eps=None):
    check_same_device("foo::rms_norm", x, weight)
    m, n = _check_rms_norm(x, normalized_shape, weight)
    x = x.contiguous()
    if weight is not None:
        weight = weight.to(x.dtype).contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _C.rms_norm(desc(out), None, desc(x), None if weight is None else desc(weight), m, n, _eps(x, eps))
    return out


@torch.library.impl(_lib, "rms_norm", "CompositeExplicitAutograd")
def _rms_norm_reference(x, normalized_shape, weight=None, eps=None):
    _check_rms_norm(x, normalized_shape, weight)
    if weight is not None:
        weight = weight.to(x.dtype)
    return F.rms_norm(x, list(normalized_shape), weight, _eps(x, eps)).contiguous()


@torch.library.register_fake("foo::rms_norm", lib=_lib)
def _rms_norm_fake(x, normalized_shape, weight=None, eps=None):
    _check_rms_norm(x, normalized_shape, weight)
    return x.new_empty(x.shape)


def _rms_norm_grad_shapes(x, weight, output_mask):
    gi = x.new_empty(x.shape) if output_mask[0] else x.new_empty(0)
    gw = x.new_empty(weight.shape) if (output_mask[1] and weight is not None) else x.new_empty(0)
    return gi, gw


@torch.library.impl(_lib, "rms_norm_backward", "PrivateUse1")
def _rms_norm_backward_foo(grad_out, x, normalized_shape, weight, eps, output_mask):
    check_same_device("foo::rms_norm_backward", grad_out, x, weight)
    m, n = _check_rms_norm(x, normalized_shape, weight)
    x = x.contiguous()
    grad_out = grad_out.to(x.dtype).contiguous()
    if weight is not None:
        weight = weight.to(x.dtype).contiguous()
    gi, gw = _rms_norm_grad_shapes(x, weight, output_mask)
    _C.rms_norm_backward(
        desc(gi) if output_mask[0] else None,
        desc(gw) if output_mask[1] and weight is not None else None,
        desc(grad_out),
        desc(x),
        None if weight is None else desc(weight),
        m,
        n,
        _eps(x, eps),
    )
    return gi, gw


@torch.library.impl(_lib, "rms_norm_backward", "CompositeExplicitAutograd")
def _rms_norm_backward_reference(grad_out, x, normalized_shape, weight, eps, output_mask):
    _check_rms_norm(x, normalized_shape, weight)
    gi, gw = _rms_norm_grad_shapes(x, weight, output_mask)
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xa, ga = x.to(acc), grad_out.to(acc)
    rstd = torch.rsqrt(xa.square().mean(dims, keepdim=True) + _eps(x, eps))
    if output_mask[0]:
        g = ga * weight.to(acc) if weight is not None else ga
        c = (g * xa).mean(dims, keepdim=True) * rstd**3
        gi = (rstd * g - c * xa).to(x.dtype)
    if output_mask[1] and weight is not None:
        y = (xa * rstd).to(x.dtype).to(acc)
        lead = list(range(x.dim() - len(normalized_shape)))
        gw = (ga * y).sum(lead).to(x.dtype) if lead else (ga * y).to(x.dtype)
    return gi, gw


@torch.library.register_fake("foo::rms_norm_backward", lib=_lib)
def _rms_norm_backward_fake(grad_out, x, normalized_shape, weight, eps, output_mask):
    _check_rms_norm(x, normalized_shape, weight)
    return _rms_norm_grad_shapes(x, weight, output_mask)


def _rms_norm_setup(ctx, inputs, output):
    x, shape, weight, eps = (list(inputs) + [None, None])[:4]
    ctx.shape, ctx.eps = list(shape), eps
    ctx.save_for_backward(x, weight)


def _rms_norm_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2]]
    gi, gw = torch.ops.foo.rms_norm_backward(grad, x, ctx.shape, weight, ctx.eps, mask)
    return (gi if mask[0] else None), None, (gw.to(weight.dtype) if mask[1] else None), None


torch.library.register_autograd("foo::rms_norm", _rms_norm_backward, setup_context=_rms_norm_setup, lib=_lib)


# --------------------------------------------------------------------------- linear_act


def _check_linear_act(x, weight, bias, act) -> None:
    if act not in ACTIVATIONS:
        raise ValueError(f"foo::linear_act: unknown activation {act!r}; expected one of {ACTIVATIONS}")
    if weight.dim() != 2:
        raise RuntimeError(f"foo::linear_act: weight must be 2-d [out_features, in_features], got {list(weight.shape)}")
    if x.dim() < 1:
        raise RuntimeError("foo::linear_act: input must have at least 1 dimension, got a 0-d tensor")
    if x.shape[-1] != weight.shape[1]:
        rows = math.prod(x.shape[:-1]) if x.dim() > 1 else 1
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1]} and "
            f"{weight.shape[1]}x{weight.shape[0]}) (on foo)"
        )
    if weight.dtype != x.dtype:
        raise RuntimeError(
            f"mat1 and mat2 must have the same dtype, but got {_name(x.dtype)} and {_name(weight.dtype)} (on foo)"
        )
    if bias is not None:
        if bias.dim() > 1 or (bias.dim() == 1 and bias.shape[0] != weight.shape[0]):
            raise RuntimeError(f"foo::linear_act: bias must have shape [{weight.shape[0]}], got {list(bias.shape)}")
        if bias.dtype != x.dtype:
            raise RuntimeError(
                f"self and mat2 must have the same dtype, but got {_name(bias.dtype)} and {_name(x.dtype)} (on foo)"
            )
    if act not in ("none", "relu") and x.dtype not in _FLOAT:
        raise NotImplementedError(f"\"{act.split('_')[0]}\" not implemented for '{_name(x.dtype)}' (on foo)")


def _apply_act(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "relu":
        return torch.relu(y)
    if act == "gelu":
        return F.gelu(y)
    if act == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if act == "silu":
        return F.silu(y)
    return y


@torch.library.impl(_lib, "linear_act", "CompositeExplicitAutograd")
def _linear_act_reference(x, weight, bias=None, act="none"):
    _check_linear_act(x, weight, bias, act)
    return _apply_act(F.linear(x, weight, bias), act).contiguous()


@torch.library.impl(_lib, "linear_act", "PrivateUse1")
def _linear_act_foo(x, weight, bias=None, act="none"):
    check_same_device("foo::linear_act", x, weight, bias)
    _check_linear_act(x, weight, bias, act)
    if x.dtype not in _FLOAT:
        # Integer products (none, relu) are foo's own mm and relu kernels.
        return _linear_act_reference(x, weight, bias, act)
    k, n = weight.shape[1], weight.shape[0]
    x2 = x.reshape(math.prod(x.shape[:-1]), k)
    if bias is not None and bias.dim() == 0:
        bias = bias.expand(n)
    out = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    _C.linear_act(desc(out), desc(x2), desc(weight), None if bias is None else desc(bias), act)
    return out.view(*x.shape[:-1], n)


@torch.library.register_fake("foo::linear_act", lib=_lib)
def _linear_act_fake(x, weight, bias=None, act="none"):
    _check_linear_act(x, weight, bias, act)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_act_setup(ctx, inputs, output):
    x, weight, bias, act = (list(inputs) + [None, "none"])[:4]
    ctx.act = act
    ctx.has_bias = bias is not None
    # relu's derivative reads the output (as threshold_backward does); the
    # others recompute the pre-activation in the backward (one addmm), so
    # the forward keeps no second [M, N] tensor.
    ctx.save_for_backward(x, weight, bias, output if act == "relu" else None)


def _linear_act_backward(ctx, grad):
    x, weight, bias, out = ctx.saved_tensors
    k, n = weight.shape[1], weight.shape[0]
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)
    g = grad.reshape(m, n)
    act = ctx.act
    if act == "relu":
        g = torch.ops.aten.threshold_backward(g, out.reshape(m, n), 0)
    elif act != "none":
        pre = F.linear(x2, weight, bias)
        if act == "silu":
            g = torch.ops.aten.silu_backward(g, pre)
        else:
            g = torch.ops.aten.gelu_backward(g, pre, approximate="tanh" if act == "gelu_tanh" else "none")
    gx = (g @ weight).reshape(x.shape) if ctx.needs_input_grad[0] else None
    gw = g.t() @ x2 if ctx.needs_input_grad[1] else None
    gb = None
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = g.sum(0) if bias.dim() == 1 else g.sum()
    return gx, gw, gb, None


torch.library.register_autograd("foo::linear_act", _linear_act_backward, setup_context=_linear_act_setup, lib=_lib)


# --------------------------------------------------------------------------- Python API


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """``torch.ops.foo.rms_norm``: ``F.rms_norm`` as one fused kernel on foo."""
    if isinstance(normalized_shape, int):
        normalized_shape = [normalized_shape]
    return torch.ops.foo.rms_norm(x, list(normalized_shape), weight, eps)


def linear_act(x, weight, bias=None, act="none"):
    """``torch.ops.foo.linear_act``: ``act(F.linear(x, weight, bias))`` as one
    fused kernel on foo (``act`` in :data:`ACTIVATIONS`)."""
    return torch.ops.foo.linear_act(x, weight, bias, act)
