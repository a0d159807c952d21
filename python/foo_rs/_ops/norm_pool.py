"""Normalization, pooling and dropout as native foo kernels.

* layer norm: ``native_layer_norm`` and its backward (``F.layer_norm`` and
  ``nn.LayerNorm`` reach them through the ``layer_norm`` composite);
* group norm: ``native_group_norm`` (native only) and its backward;
* batch norm: ``native_batch_norm`` (+ ``.out``), ``native_batch_norm_backward``,
  ``_native_batch_norm_legit`` (+ ``.no_stats`` and the out= forms),
  ``_batch_norm_with_update`` (+ ``.out``), ``batch_norm_backward``. Eager
  ``F.batch_norm`` / ``nn.BatchNorm*d`` call ``native_batch_norm``; the
  running statistics are updated in place as on the CPU (momentum, unbiased
  variance);
* pooling: ``max_pool2d_with_indices`` and ``avg_pool2d`` with their
  backward (out= forms: the functional forms are ATen composites that check
  the arguments with the shared meta functions and call these),
  ``_adaptive_avg_pool2d`` and its backward, ``adaptive_avg_pool2d.out``,
  ``adaptive_max_pool2d`` and its backward (out= forms);
* dropout: ``native_dropout``, ``native_dropout_backward``, ``bernoulli_``
  (``.float``, ``.Tensor``) and ``bernoulli.out``, drawing from foo's Philox
  generators (``torch.manual_seed`` makes them reproducible).

Batch norm's common case (one float dtype, a non-empty input) runs on the
native path (rust/glue/native.cpp -> Rust) with no Python; these kernels
then serve mixed precision, empty inputs and bad arguments.

Argument checks raise the CPU's exception types; the pooling ops run the
device-independent meta functions for their shapes and checks, so their
errors are the CPU's own.
"""

from __future__ import annotations

import math

import torch

from ._registry import _C, check_same_device, desc, impl, native_only
from .linalg import SCALAR_NAME, check_out, resize_out

_FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_REDUCED = (torch.float16, torch.bfloat16)
_A = torch.ops.aten


def _name(dtype) -> str:
    return SCALAR_NAME.get(dtype, str(dtype))


def _floating(kernel: str, t: torch.Tensor) -> None:
    if t.dtype not in _FLOAT:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_name(t.dtype)}' on foo")


def _mixed(input: torch.Tensor, *params) -> bool:
    """ATen's mixed-type rule: parameters are all the input's dtype, or all
    float32 for a float16 / bfloat16 input. Returns whether mixed."""
    first = next((p for p in params if p is not None), None)
    if first is None or first.dtype == input.dtype:
        for p in params:
            if p is not None and p.dtype != input.dtype:
                raise RuntimeError(f"expected scalar type {_name(input.dtype)} but found {_name(p.dtype)} (on foo)")
        return False
    for p in params:
        if p is not None and p.dtype != torch.float32:
            raise RuntimeError("mixed dtype (foo): expect parameter to have scalar type of Float")
    if input.dtype not in _REDUCED:
        raise RuntimeError("mixed dtype (foo): all inputs must share same datatype.")
    return True


def _d(t):
    return None if t is None else desc(t)


def _flat(t):
    return None if t is None else desc(t.reshape(-1))


def _memory_format(t: torch.Tensor):
    """``suggest_memory_format`` for 4-d / 5-d tensors."""
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def _copy_out(out: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    if out.dtype != value.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {value.dtype}, but got {out.dtype} instead (on foo)")
    resize_out(out, value.shape)
    out.copy_(value)
    return out


# ---------------------------------------------------------------------------
# layer norm
# ---------------------------------------------------------------------------


def _check_layer_norm(input, shape, weight, bias):
    if len(shape) < 1:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
            f"but got normalized_shape = {shape} (on foo)"
        )
    if weight is not None and list(weight.shape) != shape:
        raise RuntimeError(
            "Expected weight to be of same shape as normalized_shape, but got weight of shape "
            f"{list(weight.shape)} and normalized_shape = {shape} (on foo)"
        )
    if bias is not None and list(bias.shape) != shape:
        raise RuntimeError(
            "Expected bias to be of same shape as normalized_shape, but got bias of shape "
            f"{list(bias.shape)} and normalized_shape = {shape} (on foo)"
        )
    nd = len(shape)
    if input.dim() < nd or list(input.shape[input.dim() - nd :]) != shape:
        expected = "[*" + "".join(f", {s}" for s in shape) + "]"
        raise RuntimeError(
            f"Given normalized_shape={shape}, expected input with shape {expected}, but got input of size"
            f"{list(input.shape)} (on foo)"
        )
    return input.dim() - nd


@impl("native_layer_norm")
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    check_same_device("native_layer_norm", input, weight, bias)
    shape = [int(s) for s in normalized_shape]
    axis = _check_layer_norm(input, shape, weight, bias)
    _floating("LayerNormKernelImpl", input)
    mixed = _mixed(input, weight, bias)
    m = math.prod(input.shape[:axis])
    n = math.prod(shape)
    dev = input.device
    out = torch.empty(input.shape, dtype=input.dtype, device=dev)
    stat_dtype = torch.float32 if mixed else input.dtype
    stat_shape = [*input.shape[:axis], *([1] * len(shape))]
    mean = torch.empty(stat_shape, dtype=stat_dtype, device=dev)
    rstd = torch.empty(stat_shape, dtype=stat_dtype, device=dev)
    _C.layer_norm(
        desc(out),
        desc(mean.view(-1)),
        desc(rstd.view(-1)),
        desc(input.contiguous()),
        _flat(weight),
        _flat(bias),
        m,
        n,
        float(eps),
    )
    return out, mean, rstd


@impl("native_layer_norm_backward")
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    check_same_device("native_layer_norm_backward", grad_out, input, mean, rstd, weight, bias)
    shape = [int(s) for s in normalized_shape]
    axis = _check_layer_norm(input, shape, weight, bias)
    _floating("LayerNormBackwardKernelImpl", input)
    _mixed(input, weight, bias)
    if grad_out.shape != input.shape or grad_out.dtype != input.dtype:
        raise RuntimeError(
            f"native_layer_norm_backward: expected grad_out of shape {list(input.shape)} and dtype "
            f"{_name(input.dtype)}, but got {list(grad_out.shape)} of {_name(grad_out.dtype)} (on foo)"
        )
    m = math.prod(input.shape[:axis])
    n = math.prod(shape)
    if mean.numel() != m or rstd.numel() != m:
        raise RuntimeError(
            f"native_layer_norm_backward: expected mean and rstd with {m} elements, but got "
            f"{mean.numel()} and {rstd.numel()} (on foo)"
        )
    need_input, need_weight, need_bias = (bool(v) for v in output_mask)
    dev = input.device
    gi = torch.empty(input.shape, dtype=input.dtype, device=dev) if need_input else None
    gw = gb = None
    if need_weight:
        if weight is None:
            raise RuntimeError("native_layer_norm_backward: grad_weight requested without a weight (on foo)")
        gw = torch.empty(weight.shape, dtype=weight.dtype, device=dev)
    if need_bias:
        if bias is None:
            raise RuntimeError("native_layer_norm_backward: grad_bias requested without a bias (on foo)")
        gb = torch.empty(bias.shape, dtype=bias.dtype, device=dev)
    if gi is not None or gw is not None or gb is not None:
        _C.layer_norm_backward(
            _d(gi),
            _flat(gw),
            _flat(gb),
            desc(grad_out.contiguous()),
            desc(input.contiguous()),
            desc(mean.reshape(-1)),
            desc(rstd.reshape(-1)),
            _flat(weight),
            m,
            n,
        )
    return gi, gw, gb


# ---------------------------------------------------------------------------
# batch norm
# ---------------------------------------------------------------------------


def _bn_view(t: torch.Tensor) -> torch.Tensor:
    """t (N, C, *) as a 3-d (N, C, S) view (a contiguous copy if t has no such view)."""
    n, c = t.shape[0], t.shape[1]
    s = math.prod(t.shape[2:])
    try:
        return t.view(n, c, s)
    except RuntimeError:
        return t.contiguous().view(n, c, s)


def _bn_checks(name, input, weight, bias, running_mean, running_var):
    check_same_device(name, input, weight, bias, running_mean, running_var)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None (on foo)")
    _floating("batch_norm", input)
    if input.dim() < 2:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1) (on foo)")
    mixed = _mixed(input, weight, bias, running_mean, running_var)
    c = input.shape[1]
    for what, p in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if p is not None and p.numel() != c:
            raise RuntimeError(f"{what} should contain {c} elements not {p.numel()} (on foo)")
    return mixed


def _batch_norm(name, input, weight, bias, running_mean, running_var, training, momentum, eps):
    mixed = _bn_checks(name, input, weight, bias, running_mean, running_var)
    if training and input.numel() == 0:
        raise RuntimeError(
            f"input tensor must have at least one element, but got input_sizes = {list(input.shape)} (on foo)"
        )
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError(f"{name}: running_mean and running_var must be defined in evaluation mode (on foo)")
    dev = input.device
    c = input.shape[1]
    stat_dtype = torch.float32 if mixed else input.dtype
    out = torch.empty_like(input, memory_format=_memory_format(input))
    if training:
        save_mean = torch.empty(c, dtype=stat_dtype, device=dev)
        save_invstd = torch.empty(c, dtype=stat_dtype, device=dev)
    else:
        save_mean = torch.empty(0, dtype=stat_dtype, device=dev)
        save_invstd = torch.empty(0, dtype=stat_dtype, device=dev)
    if input.numel():
        _C.batch_norm(
            desc(_bn_view(out)),
            desc(save_mean) if training else None,
            desc(save_invstd) if training else None,
            desc(_bn_view(input)),
            _d(weight),
            _d(bias),
            _d(running_mean),
            _d(running_var),
            bool(training),
            float(momentum),
            float(eps),
        )
    return out, save_mean, save_invstd


# Group norm forward: C++ and Rust alone (rust/glue/native.cpp); ATen's
# composite for mixed precision.
native_only("native_group_norm")


@impl("native_group_norm_backward")
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    """Group norm's gradients, the slow path behind the native kernel (mixed
    precision, unusual arguments), from foo's native ops. Computes in
    float32 for the half types, like CPU."""
    check_same_device("native_group_norm_backward", grad_out, input, mean, rstd, weight)
    N, C, HxW, G = int(N), int(C), int(HxW), int(group)
    D = C // G
    half = input.dtype in (torch.float16, torch.bfloat16)
    acc = torch.float32 if half else input.dtype
    x = input.to(acc).reshape(N, G, D, HxW)
    dy = grad_out.to(acc).reshape(N, G, D, HxW)
    xhat = (x - mean.to(acc).view(N, G, 1, 1)) * rstd.to(acc).view(N, G, 1, 1)
    w = weight.to(acc).view(1, G, D, 1) if weight is not None else None
    dx = dgamma = dbeta = None
    wdtype = weight.dtype if weight is not None else input.dtype
    if output_mask[0]:
        dyw = dy * w if w is not None else dy
        m1 = dyw.mean(dim=(2, 3), keepdim=True)
        m2 = (dyw * xhat).mean(dim=(2, 3), keepdim=True)
        dx = ((dyw - m1 - xhat * m2) * rstd.to(acc).view(N, G, 1, 1)).reshape(input.shape).to(input.dtype)
    if output_mask[1]:
        dgamma = (dy * xhat).sum(dim=(0, 3)).reshape(C).to(wdtype)
    if output_mask[2]:
        dbeta = dy.sum(dim=(0, 3)).reshape(C).to(wdtype)
    return dx, dgamma, dbeta


@impl("native_batch_norm")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm("native_batch_norm", input, weight, bias, running_mean, running_var, training, momentum, eps)


@impl("native_batch_norm.out")
def native_batch_norm_out(
    input, weight, bias, running_mean, running_var, training, momentum, eps, *, out, save_mean, save_invstd
):
    check_same_device("native_batch_norm", input, out, save_mean, save_invstd)
    r = _batch_norm("native_batch_norm", input, weight, bias, running_mean, running_var, training, momentum, eps)
    return _copy_out(out, r[0]), _copy_out(save_mean, r[1]), _copy_out(save_invstd, r[2])


@impl("_native_batch_norm_legit")
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(
        "_native_batch_norm_legit", input, weight, bias, running_mean, running_var, training, momentum, eps
    )


@impl("_native_batch_norm_legit.no_stats")
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return _batch_norm("_native_batch_norm_legit", input, weight, bias, None, None, training, momentum, eps)


@impl("_native_batch_norm_legit.out")
def native_batch_norm_legit_out(
    input, weight, bias, running_mean, running_var, training, momentum, eps, *, out, save_mean, save_invstd
):
    check_same_device("_native_batch_norm_legit", input, out, save_mean, save_invstd)
    r = _batch_norm("_native_batch_norm_legit", input, weight, bias, running_mean, running_var, training, momentum, eps)
    return _copy_out(out, r[0]), _copy_out(save_mean, r[1]), _copy_out(save_invstd, r[2])


@impl("_native_batch_norm_legit.no_stats_out")
def native_batch_norm_legit_no_stats_out(input, weight, bias, training, momentum, eps, *, out, save_mean, save_invstd):
    check_same_device("_native_batch_norm_legit", input, out, save_mean, save_invstd)
    r = _batch_norm("_native_batch_norm_legit", input, weight, bias, None, None, training, momentum, eps)
    return _copy_out(out, r[0]), _copy_out(save_mean, r[1]), _copy_out(save_invstd, r[2])


@impl("_batch_norm_with_update")
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, m, s = _batch_norm(
        "_batch_norm_with_update", input, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return out, m, s, torch.empty(0, dtype=torch.uint8, device=input.device)


@impl("_batch_norm_with_update.out")
def batch_norm_with_update_out(
    input, weight, bias, running_mean, running_var, momentum, eps, *, out, save_mean, save_invstd, reserve
):
    check_same_device("_batch_norm_with_update", input, out, save_mean, save_invstd, reserve)
    r = _batch_norm("_batch_norm_with_update", input, weight, bias, running_mean, running_var, True, momentum, eps)
    resize_out(reserve, (0,))
    return _copy_out(out, r[0]), _copy_out(save_mean, r[1]), _copy_out(save_invstd, r[2]), reserve


def _batch_norm_backward(
    name, grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    _bn_checks(name, input, weight, None, running_mean, running_var)
    check_same_device(name, grad_out, input, save_mean, save_invstd)
    if grad_out.shape != input.shape or grad_out.dtype != input.dtype:
        raise RuntimeError(
            f"{name}: expected grad_out of shape {list(input.shape)} and dtype {_name(input.dtype)}, but got "
            f"{list(grad_out.shape)} of {_name(grad_out.dtype)} (on foo)"
        )
    c = input.shape[1]
    if train:
        if save_mean is None or save_invstd is None or save_mean.numel() != c or save_invstd.numel() != c:
            raise RuntimeError(f"{name}: save_mean and save_invstd must have {c} elements in training mode (on foo)")
    elif running_mean is None or running_var is None:
        raise RuntimeError(f"{name}: running_mean and running_var must be defined in evaluation mode (on foo)")
    need_input, need_weight, need_bias = (bool(v) for v in output_mask)
    dev = input.device
    pdtype = weight.dtype if weight is not None else input.dtype
    gi = torch.empty_like(input, memory_format=_memory_format(input)) if need_input else None
    gw = torch.empty(c, dtype=pdtype, device=dev) if need_weight else None
    gb = torch.empty(c, dtype=pdtype, device=dev) if need_bias else None
    if input.numel() == 0:
        for g in (gw, gb):
            if g is not None:
                g.zero_()
        return gi, gw, gb
    if gi is not None or gw is not None or gb is not None:
        _C.batch_norm_backward(
            None if gi is None else desc(_bn_view(gi)),
            _d(gw),
            _d(gb),
            desc(_bn_view(grad_out)),
            desc(_bn_view(input)),
            _d(weight),
            _d(running_mean),
            _d(running_var),
            _flat(save_mean) if train else None,
            _flat(save_invstd) if train else None,
            bool(train),
            float(eps),
        )
    return gi, gw, gb


@impl("native_batch_norm_backward")
def native_batch_norm_backward(
    grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    return _batch_norm_backward(
        "native_batch_norm_backward",
        grad_out,
        input,
        weight,
        running_mean,
        running_var,
        save_mean,
        save_invstd,
        train,
        eps,
        output_mask,
    )


@impl("batch_norm_backward")
def batch_norm_backward(
    grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, output_mask, reserve
):
    return _batch_norm_backward(
        "batch_norm_backward",
        grad_out,
        input,
        weight,
        running_mean,
        running_var,
        save_mean,
        save_var,
        update,
        eps,
        output_mask,
    )


# ---------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _pair(v, default=None):
    v = [int(x) for x in v] if v is not None else []
    if not v:
        return list(default)
    return [v[0], v[-1]] if len(v) <= 2 else v[:2]


def _as4(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 4 else t.unsqueeze(0)


def _fits(out: torch.Tensor, like: torch.Tensor) -> None:
    """Structured out= contract: same dtype, then resized to ``like``'s shape."""
    check_out(out, like.shape, like.dtype)


@impl("max_pool2d_with_indices.out")
def max_pool2d_with_indices_out(
    self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False, *, out, indices
):
    check_same_device("max_pool2d_with_indices", self, out, indices)
    mo, mi = _A.max_pool2d_with_indices(_meta(self), kernel_size, stride, padding, dilation, ceil_mode)
    _fits(out, mo)
    _fits(indices, mi)
    if self.dtype == torch.bool:
        raise NotImplementedError("\"max_pool2d\" not implemented for 'Bool' on foo")
    if out.numel():
        k = _pair(kernel_size)
        _C.max_pool2d(
            desc(_as4(out)),
            desc(_as4(indices)),
            desc(_as4(self)),
            k,
            _pair(stride, k),
            _pair(padding),
            _pair(dilation),
        )
    return out, indices


@impl("max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward_grad_input(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, *, grad_input
):
    check_same_device("max_pool2d_with_indices_backward", grad_output, self, indices, grad_input)
    mg = _A.max_pool2d_with_indices_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, dilation, ceil_mode, _meta(indices)
    )
    _fits(grad_input, mg)
    _floating("max_pool2d_with_indices_backward", self)
    if grad_input.numel():
        _C.max_pool2d_backward(desc(_as4(grad_input)), desc(_as4(grad_output)), desc(_as4(indices)))
    return grad_input


@impl("max_pool2d_with_indices")
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    # Behind the native kernel (rust/glue/native.cpp): the calls it leaves here.
    out = torch.empty(0, dtype=self.dtype, device=self.device)
    indices = torch.empty(0, dtype=torch.int64, device=self.device)
    return max_pool2d_with_indices_out(
        self, kernel_size, stride, padding, dilation, ceil_mode, out=out, indices=indices
    )


@impl("max_pool2d_with_indices_backward")
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    grad_input = torch.empty(0, dtype=self.dtype, device=self.device)
    return max_pool2d_with_indices_backward_grad_input(
        grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, grad_input=grad_input
    )


@impl("avg_pool2d.out")
def avg_pool2d_out(
    self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor_override=None, *, out
):
    check_same_device("avg_pool2d", self, out)
    # CPU takes the floating types and int64 and raises NotImplementedError for
    # others after its argument checks; torch's meta refuses uint8 with a
    # RuntimeError, so it checks a float stand-in.
    supported = self.dtype.is_floating_point or self.dtype == torch.int64
    m = _meta(self) if supported else _meta(self).float()
    mo = _A.avg_pool2d(m, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if not supported:
        raise NotImplementedError(f"\"avg_pool2d\" not implemented for '{_name(self.dtype)}' on foo")
    _fits(out, mo)
    if out.numel():
        k = _pair(kernel_size)
        _C.avg_pool2d(
            desc(_as4(out)),
            desc(_as4(self)),
            k,
            _pair(stride, k),
            _pair(padding),
            bool(count_include_pad),
            None if divisor_override is None else int(divisor_override),
        )
    return out


@impl("avg_pool2d_backward.grad_input")
def avg_pool2d_backward_grad_input(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, *, grad_input
):
    check_same_device("avg_pool2d_backward", grad_output, self, grad_input)
    mg = _A.avg_pool2d_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    _fits(grad_input, mg)
    _floating("avg_pool2d_backward_out_frame", self)
    if grad_input.numel():
        k = _pair(kernel_size)
        _C.avg_pool2d_backward(
            desc(_as4(grad_input)),
            desc(_as4(grad_output)),
            k,
            _pair(stride, k),
            _pair(padding),
            bool(count_include_pad),
            None if divisor_override is None else int(divisor_override),
        )
    return grad_input


def _adaptive_checks(self, output_size):
    if len(output_size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2 (on foo)")
    if self.dim() not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(self.shape)} (on foo)")
    for i in range(self.dim() - 2, self.dim()):  # CPU checks the spatial dims (channels may be 0)
        if self.shape[i] == 0:
            raise RuntimeError(
                "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions, but input "
                f"has sizes {list(self.shape)} with dimension {i} being empty (on foo)"
            )
    oh, ow = (int(v) for v in output_size)
    if oh < 0 or ow < 0:
        raise RuntimeError(
            f"adaptive_avg_pool2d: elements of output_size must be non-negative, got {[oh, ow]} (on foo)"
        )
    _floating("adaptive_avg_pool2d", self)
    return oh, ow


@impl("_adaptive_avg_pool2d")
def adaptive_avg_pool2d(self, output_size):
    check_same_device("adaptive_avg_pool2d", self)
    oh, ow = _adaptive_checks(self, output_size)
    out = torch.empty(
        (*self.shape[:-2], oh, ow), dtype=self.dtype, device=self.device, memory_format=_memory_format(self)
    )
    if out.numel():
        _C.adaptive_avg_pool2d(desc(_as4(out)), desc(_as4(self)))
    return out


@impl("adaptive_avg_pool2d.out")
def adaptive_avg_pool2d_out(self, output_size, *, out):
    check_same_device("adaptive_avg_pool2d", self, out)
    return _copy_out(out, adaptive_avg_pool2d(self, output_size))


@impl("_adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output, self):
    check_same_device("adaptive_avg_pool2d_backward", grad_output, self)
    _floating("adaptive_avg_pool2d_backward_cpu", self)
    if self.dim() not in (3, 4) or grad_output.dim() != self.dim() or grad_output.shape[:-2] != self.shape[:-2]:
        raise RuntimeError(
            f"adaptive_avg_pool2d_backward: expected grad_output of {self.dim()} dimensions with the input's batch "
            f"and channels {list(self.shape[:-2])}, but got {list(grad_output.shape)} (on foo)"
        )
    if grad_output.dtype != self.dtype:
        raise RuntimeError(
            f"expected dtype {_name(self.dtype)} for `grad_output` but got dtype {_name(grad_output.dtype)} (on foo)"
        )
    gi = torch.empty_like(self, memory_format=_memory_format(self))
    if gi.numel():
        _C.adaptive_avg_pool2d_backward(desc(_as4(gi)), desc(_as4(grad_output)))
    return gi


@impl("adaptive_max_pool2d.out")
def adaptive_max_pool2d_out(self, output_size, *, out, indices):
    check_same_device("adaptive_max_pool2d", self, out, indices)
    mo, mi = _A.adaptive_max_pool2d(_meta(self), output_size)
    _fits(out, mo)
    _fits(indices, mi)
    _floating("adaptive_max_pool2d", self)
    if out.numel():
        _C.adaptive_max_pool2d(desc(_as4(out)), desc(_as4(indices)), desc(_as4(self)))
    return out, indices


@impl("adaptive_max_pool2d_backward.grad_input")
def adaptive_max_pool2d_backward_grad_input(grad_output, self, indices, *, grad_input):
    check_same_device("adaptive_max_pool2d_backward", grad_output, self, indices, grad_input)
    mg = _A.adaptive_max_pool2d_backward(_meta(grad_output), _meta(self), _meta(indices))
    _fits(grad_input, mg)
    _floating("adaptive_max_pool2d_backward", self)
    if grad_output.shape != indices.shape:
        raise RuntimeError(
            f"adaptive_max_pool2d_backward: expected indices of shape {list(grad_output.shape)}, but got "
            f"{list(indices.shape)} (on foo)"
        )
    if grad_input.numel():
        # The same scatter of each gradient to its maximum as max pooling.
        _C.max_pool2d_backward(desc(_as4(grad_input)), desc(_as4(grad_output)), desc(_as4(indices)))
    return grad_input


# ---------------------------------------------------------------------------
# dropout and bernoulli
# ---------------------------------------------------------------------------


def _bernoulli_draw(self, p, p_tensor, generator):
    if generator is None:
        _C.bernoulli_(desc(self), p, p_tensor, self.device.index or 0, None)
        return self
    if generator.device.type != "foo":
        raise RuntimeError(f"Expected a 'foo' device type for generator but found '{generator.device.type}'")
    offset = generator.get_offset()
    used = _C.bernoulli_(desc(self), p, p_tensor, None, (generator.initial_seed(), offset))
    generator.set_offset(offset + used)
    return self


@impl("bernoulli_.float")
def bernoulli_float_(self, p=0.5, *, generator=None):
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p} (on foo)")
    return _bernoulli_draw(self, p, None, generator)


@impl("bernoulli_.Tensor")
def bernoulli_tensor_(self, p, *, generator=None):
    if p.device.type == "cpu" and p.dim() == 0:
        p = p.to(self.device)
    check_same_device("bernoulli_", self, p)
    _floating("bernoulli_tensor_cpu_p_", p)
    try:
        torch.broadcast_shapes(p.shape, self.shape)
    except RuntimeError:
        raise RuntimeError(
            f"bernoulli_: the probability tensor of shape {list(p.shape)} does not broadcast to the tensor of "
            f"shape {list(self.shape)} (on foo)"
        ) from None
    if p.dim() > self.dim() or any(a != b and a != 1 for a, b in zip(reversed(p.shape), reversed(self.shape))):
        raise RuntimeError(
            f"bernoulli_: the probability tensor of shape {list(p.shape)} does not expand to the tensor of "
            f"shape {list(self.shape)} (on foo)"
        )
    return _bernoulli_draw(self, 0.0, desc(p), generator)


@impl("bernoulli.out")
def bernoulli_out(self, *, generator=None, out):
    check_same_device("bernoulli", self, out)
    resize_out(out, self.shape)
    return bernoulli_tensor_(out, self, generator=generator)


@impl("native_dropout")
def native_dropout(input, p, train):
    check_same_device("native_dropout", input)
    if input.numel() == 0:
        return torch.empty_like(input), torch.empty_like(input)
    if train is None or train:
        p1m = 1.0 - float(p)
        if not 0.0 <= p1m <= 1.0:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p1m} (on foo)")
        if input.dtype not in _FLOAT:
            raise RuntimeError(
                f"result type Float can't be cast to the desired output type {_name(input.dtype)} (on foo)"
            )
        scale = 0.0 if p1m == 0 else 1.0 / p1m
        x = input.contiguous()
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
        _C.dropout(desc(out), desc(mask), desc(x), p1m, scale, input.device.index or 0)
        return out, mask
    return input.clone(), torch.ones_like(input, dtype=torch.bool)


@impl("native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    check_same_device("native_dropout_backward", grad_output, mask)
    if mask.dtype == torch.bool and grad_output.dtype in _FLOAT and mask.shape == grad_output.shape:
        g = grad_output.contiguous()
        out = torch.empty(g.shape, dtype=g.dtype, device=g.device)
        _C.dropout_backward(desc(out), desc(g), desc(mask.contiguous()), float(scale))
        return out
    # Other dtypes / broadcasting: CPU's very expression, from native foo ops.
    return grad_output * mask * scale


# ---------------------------------------------------------------------------
# max_unpool2d / max_unpool3d (max_unpool1d is ATen's composite of 2d)
# ---------------------------------------------------------------------------
#
# A zeroed output, then one scatter of every input value to its flat index
# within its (batch, channel) plane: foo's scatter kernel, which validates
# the indices before writing. Their backward is ATen's gather composite.


def _max_unpool(name: str, self, indices, output_size, k: int, out=None):
    check_same_device(name, self, indices, out)
    if indices.dtype != torch.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {SCALAR_NAME.get(indices.dtype)}")
    if len(output_size) != k:
        what = "(height, width)" if k == 2 else "(depth, height, width)"
        raise RuntimeError(
            f"There should be exactly {k} elements {what} in output_size, but got {len(output_size)} elements."
        )
    if self.dim() not in (k + 1, k + 2):
        raise RuntimeError(
            f"Input to max_unpooling{k}d should be a {k + 1}d or {k + 2}d Tensor, but got a tensor with "
            f"{self.dim()} dimensions."
        )
    if self.shape != indices.shape:
        raise RuntimeError(
            f"Expected shape of indices to be same as that of the input tensor ({list(self.shape)}) but got "
            f"indices tensor with shape: {list(indices.shape)}"
        )
    for i in range(1, self.dim()):
        if self.shape[i] == 0:
            raise RuntimeError(
                f"max_unpooling{k}d_forward_out_cpu(): Expected input to have non-zero size for non-batch "
                f"dimensions, but got {list(self.shape)} with dimension {i} being empty."
            )
    if not self.is_floating_point():
        raise NotImplementedError(f"\"max_unpool{k}d\" not implemented for '{SCALAR_NAME.get(self.dtype)}' (foo)")
    lead = list(self.shape[: self.dim() - k])
    shape = lead + list(output_size)
    plane = math.prod(output_size)
    flat = torch.zeros(lead + [plane], dtype=self.dtype, device=self.device)
    if flat.numel() and self.numel():
        idx = indices.reshape(lead + [-1])
        if plane == 0 or bool(((idx < 0) | (idx >= plane)).any()):
            bad = idx[(idx < 0) | (idx >= plane)][0].item() if plane else idx.flatten()[0].item()
            raise RuntimeError(
                f"Found an invalid max index: {bad} (output volumes are of size {'x'.join(map(str, output_size))})"
            )
        flat.scatter_(-1, idx, self.reshape(lead + [-1]))
    result = flat.view(shape)
    if (
        self.dim() == k + 2
        and k == 2
        and self.is_contiguous(memory_format=torch.channels_last)
        and not self.is_contiguous()
    ):
        result = result.contiguous(memory_format=torch.channels_last)
    if out is None:
        return result
    check_out(out, shape, self.dtype)
    return out.copy_(result)


@impl("max_unpool2d")
def max_unpool2d(self, indices, output_size):
    return _max_unpool("max_unpool2d", self, indices, output_size, 2)


@impl("max_unpool2d.out")
def max_unpool2d_out(self, indices, output_size, *, out):
    return _max_unpool("max_unpool2d", self, indices, output_size, 2, out)


def _unpool3d_checks(stride, padding):
    if len(stride) != 3:
        raise RuntimeError(
            f"There should be exactly three elements (depth, height, width) in stride, but got: {len(stride)} elements."
        )
    if len(padding) != 3:
        raise RuntimeError(
            f"There should be exactly three elements (depth, height, width) in padding, but got: {len(padding)} elements."
        )
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: {list(stride)}")


@impl("max_unpool3d")
def max_unpool3d(self, indices, output_size, stride, padding):
    _unpool3d_checks(stride, padding)
    return _max_unpool("max_unpool3d", self, indices, output_size, 3)


@impl("max_unpool3d.out")
def max_unpool3d_out(self, indices, output_size, stride, padding, *, out):
    _unpool3d_checks(stride, padding)
    return _max_unpool("max_unpool3d", self, indices, output_size, 3, out)


# ---------------------------------------------------------------------------
# adaptive_avg_pool3d and backward
# ---------------------------------------------------------------------------
#
# An adaptive average over a box of bins is separable: per spatial dim, one
# product with the (out x in) averaging matrix of ATen's bins
# [floor(i*in/out), ceil((i+1)*in/out)) (foo's matmul, float32 for the 16-bit
# types); the backward multiplies by the transposed matrices.


def _bins_matrix(n_in: int, n_out: int, dtype, device) -> torch.Tensor:
    w = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        a, b = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        w[i, a:b] = 1.0 / (b - a)
    return w.to(dtype).to(device)


def _apply_bins(x, mats):
    nd = x.dim()
    for i, w in enumerate(mats):
        d = nd - 3 + i
        x = torch.matmul(x.movedim(d, -1), w.t()).movedim(-1, d)
    return x


def _adaptive_avg_pool3d(self, output_size, out=None):
    check_same_device("adaptive_avg_pool3d", self, out)
    if len(output_size) != 3:
        raise RuntimeError("adaptive_avg_pool3d: output_size must be 3")
    if self.dim() not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got {list(self.shape)}")
    for i in range(1, self.dim()):
        if self.shape[i] == 0:
            raise RuntimeError(
                f"adaptive_avg_pool3d(): Expected input to have non-zero size for non-batch dimensions, but input "
                f"has sizes {list(self.shape)} with dimension {i} being empty"
            )
    if any(s < 0 for s in output_size):
        raise RuntimeError(
            f"adaptive_avg_pool3d: elements of output_size must be greater than or equal to 0 but received {list(output_size)}"
        )
    if not self.is_floating_point():
        raise NotImplementedError(
            f"\"adaptive_avg_pool3d_cpu\" not implemented for '{SCALAR_NAME.get(self.dtype)}' (foo)"
        )
    ct = torch.float64 if self.dtype == torch.float64 else torch.float32
    shape = (*self.shape[:-3], *output_size)
    mats = [_bins_matrix(self.shape[self.dim() - 3 + i], output_size[i], ct, self.device) for i in range(3)]
    r = _apply_bins(self.to(ct), mats) if self.numel() and math.prod(output_size) else None
    if out is None:
        out = torch.empty(shape, dtype=self.dtype, device=self.device)  # contiguous, as CPU's
    else:
        check_out(out, shape, self.dtype)
    if r is not None:
        out.copy_(r)
    return out


@impl("_adaptive_avg_pool3d")
def adaptive_avg_pool3d_(self, output_size):
    return _adaptive_avg_pool3d(self, output_size)


@impl("_adaptive_avg_pool3d.out", "adaptive_avg_pool3d.out")
def adaptive_avg_pool3d_out(self, output_size, *, out):
    return _adaptive_avg_pool3d(self, output_size, out)


def _adaptive_avg_pool3d_backward(grad_output, self, out=None):
    check_same_device("adaptive_avg_pool3d_backward", grad_output, self, out)
    if grad_output.dim() != self.dim() or grad_output.shape[:-3] != self.shape[:-3]:
        raise RuntimeError(
            f"adaptive_avg_pool3d_backward: grad_output {list(grad_output.shape)} does not match input "
            f"{list(self.shape)} (foo)"
        )
    if not self.is_floating_point():
        raise NotImplementedError(
            f"\"adaptive_avg_pool3d_backward_cpu\" not implemented for '{SCALAR_NAME.get(self.dtype)}' (foo)"
        )
    ct = torch.float64 if self.dtype == torch.float64 else torch.float32
    nd = self.dim()
    mats = [_bins_matrix(self.shape[nd - 3 + i], grad_output.shape[nd - 3 + i], ct, self.device).t() for i in range(3)]
    if out is None:
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    else:
        check_out(out, self.shape, self.dtype)
    if grad_output.numel():
        out.copy_(_apply_bins(grad_output.to(ct), mats))
    else:
        out.zero_()
    return out


@impl("_adaptive_avg_pool3d_backward")
def adaptive_avg_pool3d_backward(grad_output, self):
    return _adaptive_avg_pool3d_backward(grad_output, self)


@impl("_adaptive_avg_pool3d_backward.out")
def adaptive_avg_pool3d_backward_out(grad_output, self, *, out):
    return _adaptive_avg_pool3d_backward(grad_output, self, out)


# ---------------------------------------------------------------------------
# 3-d pooling: the same Rust loop nest as 2-d (rust/src/kernels/pool.rs)
# ---------------------------------------------------------------------------


def _triple(v, default=None):
    v = [int(x) for x in v] if v is not None else []
    if not v:
        return list(default)
    return v * 3 if len(v) == 1 else v[:3]


def _as5(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 5 else t.unsqueeze(0)


def _like_meta(m: torch.Tensor, device) -> torch.Tensor:
    """A foo tensor with the meta result's shape, dtype and strides."""
    return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=device)


@impl("max_pool3d_with_indices.out")
def max_pool3d_with_indices_out(
    self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False, *, out, indices
):
    check_same_device("max_pool3d_with_indices", self, out, indices)
    mo, mi = _A.max_pool3d_with_indices(_meta(self), kernel_size, stride, padding, dilation, ceil_mode)
    _fits(out, mo)
    _fits(indices, mi)
    if self.dtype == torch.bool:
        raise NotImplementedError("\"max_pool3d\" not implemented for 'Bool' on foo")
    if out.numel():
        k = _triple(kernel_size)
        _C.max_pool3d(
            desc(_as5(out)),
            desc(_as5(indices)),
            desc(_as5(self)),
            k,
            _triple(stride, k),
            _triple(padding),
            _triple(dilation),
        )
    return out, indices


@impl("max_pool3d_with_indices")
def max_pool3d_with_indices(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    mo, mi = _A.max_pool3d_with_indices(_meta(self), kernel_size, stride, padding, dilation, ceil_mode)
    out, indices = _like_meta(mo, self.device), _like_meta(mi, self.device)
    return max_pool3d_with_indices_out(
        self, kernel_size, stride, padding, dilation, ceil_mode, out=out, indices=indices
    )


def _scatter_max_grad3d(name, grad_output, self, indices, grad_input):
    _floating(name, self)
    if grad_output.shape != indices.shape:
        raise RuntimeError(
            f"{name}: expected indices of shape {list(grad_output.shape)}, but got {list(indices.shape)} (on foo)"
        )
    if grad_input.numel():
        _C.max_pool3d_backward(desc(_as5(grad_input)), desc(_as5(grad_output)), desc(_as5(indices)))
    return grad_input


@impl("max_pool3d_with_indices_backward.grad_input")
def max_pool3d_with_indices_backward_grad_input(
    grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, *, grad_input
):
    check_same_device("max_pool3d_with_indices_backward", grad_output, self, indices, grad_input)
    mg = _A.max_pool3d_with_indices_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, dilation, ceil_mode, _meta(indices)
    )
    _fits(grad_input, mg)
    return _scatter_max_grad3d("max_pool3d_backward", grad_output, self, indices, grad_input)


@impl("max_pool3d_with_indices_backward")
def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    check_same_device("max_pool3d_with_indices_backward", grad_output, self, indices)
    mg = _A.max_pool3d_with_indices_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, dilation, ceil_mode, _meta(indices)
    )
    return _scatter_max_grad3d("max_pool3d_backward", grad_output, self, indices, _like_meta(mg, self.device))


def _avg3d_args(kernel_size, stride, padding, count_include_pad, divisor_override):
    k = _triple(kernel_size)
    return (
        k,
        _triple(stride, k),
        _triple(padding),
        bool(count_include_pad),
        None if divisor_override is None else int(divisor_override),
    )


@impl("avg_pool3d.out")
def avg_pool3d_out(
    self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor_override=None, *, out
):
    check_same_device("avg_pool3d", self, out)
    mo = _A.avg_pool3d(_meta(self), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    _fits(out, mo)
    if out.numel():
        _C.avg_pool3d(
            desc(_as5(out)),
            desc(_as5(self)),
            *_avg3d_args(kernel_size, stride, padding, count_include_pad, divisor_override),
        )
    return out


@impl("avg_pool3d")
def avg_pool3d(
    self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    mo = _A.avg_pool3d(_meta(self), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return avg_pool3d_out(
        self,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        out=_like_meta(mo, self.device),
    )


@impl("avg_pool3d_backward.grad_input")
def avg_pool3d_backward_grad_input(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, *, grad_input
):
    check_same_device("avg_pool3d_backward", grad_output, self, grad_input)
    mg = _A.avg_pool3d_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    _fits(grad_input, mg)
    _floating("avg_pool3d_backward_out_frame", self)
    if grad_input.numel():
        _C.avg_pool3d_backward(
            desc(_as5(grad_input)),
            desc(_as5(grad_output)),
            *_avg3d_args(kernel_size, stride, padding, count_include_pad, divisor_override),
        )
    return grad_input


@impl("avg_pool3d_backward")
def avg_pool3d_backward(
    grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    mg = _A.avg_pool3d_backward(
        _meta(grad_output), _meta(self), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    return avg_pool3d_backward_grad_input(
        grad_output,
        self,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        grad_input=_like_meta(mg, self.device),
    )


@impl("adaptive_max_pool3d.out")
def adaptive_max_pool3d_out(self, output_size, *, out, indices):
    check_same_device("adaptive_max_pool3d", self, out, indices)
    mo, mi = _A.adaptive_max_pool3d(_meta(self), output_size)
    _fits(out, mo)
    _fits(indices, mi)
    _floating("adaptive_max_pool3d_cpu", self)
    if out.numel():
        _C.adaptive_max_pool3d(desc(_as5(out)), desc(_as5(indices)), desc(_as5(self)))
    return out, indices


@impl("adaptive_max_pool3d_backward.grad_input")
def adaptive_max_pool3d_backward_grad_input(grad_output, self, indices, *, grad_input):
    check_same_device("adaptive_max_pool3d_backward", grad_output, self, indices, grad_input)
    mg = _A.adaptive_max_pool3d_backward(_meta(grad_output), _meta(self), _meta(indices))
    _fits(grad_input, mg)
    return _scatter_max_grad3d("adaptive_max_pool3d_backward", grad_output, self, indices, grad_input)
