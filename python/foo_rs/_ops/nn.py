"""Softmax family, losses and embedding backward: _softmax, _log_softmax and
their backward, nll_loss (1-d/2-d and 2d/N-d forms) forward and backward,
mse_loss forward and backward, embedding_dense_backward.

cross_entropy (log_softmax + nll_loss), softmax/log_softmax and F.mse_loss
are ATen composites of these, so they run natively too.
"""

from __future__ import annotations

import torch

from ._registry import _C, check_same_device, desc, impl
from .linalg import SCALAR_NAME, check_out, resize_out
from .reduce import wrap_dim

_REDUCTIONS = (0, 1, 2)


# ---------------------------------------------------------------------------
# softmax / log_softmax
# ---------------------------------------------------------------------------


def _softmax_into(name, log, self, dim, half_to_float, out):
    check_same_device(name, self, out)
    if half_to_float:
        raise RuntimeError("softmax with half to float conversion is not supported on CPU")
    d = wrap_dim(dim, self.dim())
    check_out(out, self.shape, self.dtype)
    _C.softmax(desc(out), desc(self.contiguous()), d, log)
    return out


@impl("_softmax.out")
def softmax_out(self, dim, half_to_float, *, out):
    return _softmax_into("softmax", False, self, dim, half_to_float, out)


@impl("_log_softmax.out")
def log_softmax_out(self, dim, half_to_float, *, out):
    return _softmax_into("log_softmax", True, self, dim, half_to_float, out)


def _softmax_backward_into(name, log, grad_output, output, dim, input_dtype, out):
    check_same_device(name, grad_output, output, out)
    if grad_output.shape != output.shape:
        raise RuntimeError(
            f"{name}: grad_output of shape {list(grad_output.shape)} and output of shape {list(output.shape)} differ"
        )
    d = wrap_dim(dim, grad_output.dim())
    check_out(out, grad_output.shape, input_dtype)
    _C.softmax_backward(desc(out), desc(grad_output.contiguous()), desc(output.contiguous()), d, log)
    return out


@impl("_softmax_backward_data.out")
def softmax_backward_out(grad_output, output, dim, input_dtype, *, grad_input):
    return _softmax_backward_into("_softmax_backward_data", False, grad_output, output, dim, input_dtype, grad_input)


@impl("_log_softmax_backward_data.out")
def log_softmax_backward_out(grad_output, output, dim, input_dtype, *, out):
    return _softmax_backward_into("_log_softmax_backward_data", True, grad_output, output, dim, input_dtype, out)


# ---------------------------------------------------------------------------
# nll_loss
# ---------------------------------------------------------------------------


def _nll_common(self, target, weight, n_classes):
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {SCALAR_NAME.get(target.dtype, target.dtype)}"
        )
    if weight is not None:
        if weight.numel() != n_classes:
            raise RuntimeError(
                f"weight tensor should be defined either for all {n_classes} classes or no classes but got "
                f"weight tensor of shape: {list(weight.shape)}"
            )
        if weight.dtype != self.dtype:
            raise RuntimeError(
                f"expected scalar type {SCALAR_NAME.get(self.dtype)} but found {SCALAR_NAME.get(weight.dtype)}"
            )
        weight = weight.contiguous()
    return weight


def _nll_checks(self, target, weight):
    if not (0 < self.dim() <= 2):
        raise RuntimeError("input tensor should be 1D or 2D")
    if target.dim() > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    no_batch = self.dim() == 1 and target.dim() == 0
    if not no_batch and self.shape[0] != target.shape[0]:
        raise RuntimeError(f"size mismatch (got input: {list(self.shape)}, target: {list(target.shape)})")
    return _nll_common(self, target, weight, self.shape[-1])


@impl("nll_loss_forward.output")
def nll_loss_forward_output(self, target, weight, reduction, ignore_index, *, output, total_weight):
    check_same_device("nll_loss_forward", self, target, weight, output, total_weight)
    weight = _nll_checks(self, target, weight)
    shape = (self.shape[0],) if reduction == 0 and self.dim() == 2 else ()
    check_out(output, shape, self.dtype)
    check_out(total_weight, (), self.dtype)
    _C.nll_loss_forward(
        desc(output),
        desc(total_weight),
        desc(self.contiguous()),
        desc(target.contiguous()),
        None if weight is None else desc(weight),
        reduction,
        ignore_index,
    )
    return output, total_weight


@impl("nll_loss_forward")
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    # Behind the native kernel (rust/glue/native.cpp): the calls it leaves here.
    output = torch.empty((), dtype=self.dtype, device=self.device)
    total_weight = torch.empty((), dtype=self.dtype, device=self.device)
    return nll_loss_forward_output(
        self, target, weight, reduction, ignore_index, output=output, total_weight=total_weight
    )


def _nll_backward_checks(grad_output, self, target, reduction, total_weight, batch):
    if total_weight.numel() != 1:
        raise RuntimeError(
            f"expected total_weight to be a single element tensor, got: {list(total_weight.shape)} "
            f"({total_weight.numel()} elements)"
        )
    if reduction == 0 and batch is not None:
        if grad_output.shape != batch:
            raise RuntimeError(
                f"Expected a tensor of dimension {len(batch)} and tensor.size[0] == {batch[0]} but got: "
                f"dimension {grad_output.dim()} and tensor.size[0] == "
                f"{grad_output.shape[0] if grad_output.dim() else 1}"
            )
    elif grad_output.numel() != 1:
        raise RuntimeError(f"Expected a single element grad_output tensor, but got: {list(grad_output.shape)}")


@impl("nll_loss_backward.grad_input")
def nll_loss_backward_grad_input(
    grad_output, self, target, weight, reduction, ignore_index, total_weight, *, grad_input
):
    check_same_device("nll_loss_backward", grad_output, self, target, weight, total_weight, grad_input)
    weight = _nll_checks(self, target, weight)
    batch = (self.shape[0],) if self.dim() == 2 else None
    _nll_backward_checks(grad_output, self, target, reduction, total_weight, batch)
    check_out(grad_input, self.shape, self.dtype)
    _C.nll_loss_backward(
        desc(grad_input),
        desc(grad_output),
        desc(target.contiguous()),
        None if weight is None else desc(weight),
        reduction,
        ignore_index,
        desc(total_weight),
    )
    return grad_input


@impl("nll_loss_backward")
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    grad_input = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    return nll_loss_backward_grad_input(
        grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input=grad_input
    )


def _nll2d_checks(self, target, weight):
    if target.dim() != 3:
        raise RuntimeError(
            f"only batches of spatial targets supported (3D tensors) but got targets of dimension: {target.dim()}"
        )
    if self.dim() != 4:
        raise RuntimeError(
            f"only batches of spatial inputs supported (4D tensors), but got input of dimension: {self.dim()}"
        )
    if (self.shape[0], self.shape[2], self.shape[3]) != tuple(target.shape):
        raise RuntimeError(
            f"input and target batch or spatial sizes don't match: target {list(target.shape)}, "
            f"input {list(self.shape)}"
        )
    return _nll_common(self, target, weight, self.shape[1])


@impl("nll_loss2d_forward.output")
def nll_loss2d_forward_output(self, target, weight, reduction, ignore_index, *, output, total_weight):
    check_same_device("nll_loss2d_forward", self, target, weight, output, total_weight)
    weight = _nll2d_checks(self, target, weight)
    shape = tuple(target.shape) if reduction == 0 else ()
    check_out(output, shape, self.dtype)
    check_out(total_weight, (), self.dtype)
    _C.nll_loss_forward(
        desc(output),
        desc(total_weight),
        desc(self.contiguous()),
        desc(target.contiguous()),
        None if weight is None else desc(weight),
        reduction,
        ignore_index,
    )
    return output, total_weight


@impl("nll_loss2d_forward")
def nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    output = torch.empty(0, dtype=self.dtype, device=self.device)
    total_weight = torch.empty((), dtype=self.dtype, device=self.device)
    return nll_loss2d_forward_output(
        self, target, weight, reduction, ignore_index, output=output, total_weight=total_weight
    )


@impl("nll_loss2d_backward.grad_input")
def nll_loss2d_backward_grad_input(
    grad_output, self, target, weight, reduction, ignore_index, total_weight, *, grad_input
):
    check_same_device("nll_loss2d_backward", grad_output, self, target, weight, total_weight, grad_input)
    weight = _nll2d_checks(self, target, weight)
    _nll_backward_checks(grad_output, self, target, reduction, total_weight, tuple(target.shape))
    check_out(grad_input, self.shape, self.dtype)
    _C.nll_loss_backward(
        desc(grad_input),
        desc(grad_output),
        desc(target.contiguous()),
        None if weight is None else desc(weight),
        reduction,
        ignore_index,
        desc(total_weight),
    )
    return grad_input


@impl("nll_loss2d_backward")
def nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    grad_input = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    return nll_loss2d_backward_grad_input(
        grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input=grad_input
    )


# ---------------------------------------------------------------------------
# mse_loss
# ---------------------------------------------------------------------------


def _promote(*ts):
    dt = ts[0].dtype
    for t in ts[1:]:
        dt = torch.promote_types(dt, t.dtype)
    return dt, [t if t.dtype == dt else t.to(dt) for t in ts]


@impl("mse_loss.out")
def mse_loss_out(self, target, reduction=1, *, out):
    check_same_device("mse_loss", self, target, out)
    dt, (a, b) = _promote(self, target)
    shape = tuple(torch.broadcast_shapes(a.shape, b.shape))
    check_out(out, shape if reduction == 0 else (), dt)
    _C.mse_loss(desc(out), desc(a), desc(b), shape, reduction)
    return out


@impl("mse_loss_backward.grad_input")
def mse_loss_backward_grad_input(grad_output, self, target, reduction, *, grad_input):
    check_same_device("mse_loss_backward", grad_output, self, target, grad_input)
    dt, (g, a, b) = _promote(grad_output, self, target)
    shape = tuple(torch.broadcast_shapes(g.shape, a.shape, b.shape))
    if grad_input.dtype != dt:
        raise RuntimeError(f"Found dtype {SCALAR_NAME.get(grad_input.dtype)} but expected {SCALAR_NAME.get(dt)}")
    resize_out(grad_input, shape)
    _C.mse_loss_backward(desc(grad_input), desc(g), desc(a), desc(b), reduction)
    return grad_input


@impl("mse_loss_backward")
def mse_loss_backward(grad_output, self, target, reduction):
    dt, (g, a, b) = _promote(grad_output, self, target)
    shape = tuple(torch.broadcast_shapes(g.shape, a.shape, b.shape))
    grad_input = torch.empty(shape, dtype=dt, device=self.device)
    return mse_loss_backward_grad_input(grad_output, self, target, reduction, grad_input=grad_input)


# ---------------------------------------------------------------------------
# embedding backward
# ---------------------------------------------------------------------------


@impl("embedding_dense_backward")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    check_same_device("embedding_dense_backward", grad_output, indices)
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {indices.type()} instead (while checking arguments for embedding_backward)"
        )
    d = grad_output.shape[-1] if grad_output.dim() else 1
    grad = grad_output.reshape(-1, d).contiguous()
    idx = indices.reshape(-1).contiguous()
    out = torch.empty((num_weights, d), dtype=grad_output.dtype, device=grad_output.device)
    _C.embedding_dense_backward(desc(out), desc(grad), desc(idx), padding_idx, scale_grad_by_freq)
    return out


# ---------------------------------------------------------------------------
# reflection / replication padding (1-3d) and backward
# ---------------------------------------------------------------------------
#
# The slow path of the native kernels (rust/glue/native.cpp, Rust's
# kernels/pad.rs), which take the float dtypes: each padded dimension is one
# index_select with a source index per output position (a small
# CPU-computed plan); the backward is index_add into the unpadded size,
# dimension by dimension in reverse. Both are foo kernels.


def _pad_source(n_in: int, lo: int, hi: int, reflect: bool) -> torch.Tensor:
    src = torch.arange(-lo, n_in + hi, dtype=torch.int64)
    if reflect:
        src = src.abs()
        src = torch.where(src >= n_in, 2 * (n_in - 1) - src, src)
    else:
        src = src.clamp(0, n_in - 1)
    return src


def _pad_plan(name: str, self, padding, k: int, reflect: bool):
    """CPU's checks of ``<name>`` (k padded dims); the padded dims and their
    source index tensors on ``self``'s device."""
    if len(padding) != 2 * k:
        raise RuntimeError(f"padding size is expected to be {2 * k}, but got: {len(padding)}")
    nd = self.dim()
    lo_dims, hi_dims = k + 1, k + 2
    non_empty = nd in (lo_dims, hi_dims) and all(self.shape[d] != 0 for d in range(1 if nd == hi_dims else 0, nd))
    if not non_empty:
        raise RuntimeError(
            f"Expected {lo_dims}D or {hi_dims}D (batch mode) tensor with possibly 0 batch size and other "
            f"non-zero dimensions for input, but got: {list(self.shape)}"
        )
    if self.dtype == torch.bool:
        raise NotImplementedError(f"\"{name}\" not implemented for 'Bool' (foo)")
    plan = []
    for i in range(k):
        d = nd - 1 - i
        lo, hi = padding[2 * i], padding[2 * i + 1]
        n_in = self.shape[d]
        if reflect and (lo >= n_in or hi >= n_in):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                f"padding ({lo}, {hi}) at dimension {d} of input {list(self.shape)}"
            )
        n_out = n_in + lo + hi
        if n_out < 1:
            raise RuntimeError(f"input (W: {n_in}) is too small. Calculated output W: {n_out} (foo)")
        plan.append((d, _pad_source(n_in, lo, hi, reflect).to(self.device)))
    return plan


def _pad_forward(name, self, padding, k, reflect, out=None):
    check_same_device(name, self, out)
    plan = _pad_plan(name, self, padding, k, reflect)
    r = self
    for d, idx in plan:
        r = torch.index_select(r, d, idx)
    if out is None:
        return r if r is not self else r.clone()
    check_out(out, r.shape, self.dtype)
    return out.copy_(r)


def _pad_backward(name, grad_output, self, padding, k, reflect, grad_input=None):
    check_same_device(name, grad_output, self, grad_input)
    plan = _pad_plan(name, self, padding, k, reflect)
    expected = list(self.shape)
    for d, idx in plan:
        expected[d] = idx.numel()
    if list(grad_output.shape) != expected:
        raise RuntimeError(
            f"grad_output must have the shape {expected} of {name}'s output, but got {list(grad_output.shape)} (foo)"
        )
    g = grad_output
    for d, idx in reversed(plan):
        shape = list(g.shape)
        shape[d] = self.shape[d]
        g = torch.zeros(shape, dtype=g.dtype, device=g.device).index_add_(d, idx, g)
    if grad_input is None:
        return g
    check_out(grad_input, self.shape, self.dtype)
    return grad_input.copy_(g)


def _register_pad(kind: str, reflect: bool) -> None:
    for k in (1, 2, 3):
        name = f"{kind}_pad{k}d"

        def fwd(self, padding, _n=name, _k=k):
            return _pad_forward(_n, self, padding, _k, reflect)

        def fwd_out(self, padding, *, out, _n=name, _k=k):
            return _pad_forward(_n, self, padding, _k, reflect, out)

        def bwd(grad_output, self, padding, _n=name + "_backward", _k=k):
            return _pad_backward(_n, grad_output, self, padding, _k, reflect)

        def bwd_out(grad_output, self, padding, *, grad_input, _n=name + "_backward", _k=k):
            return _pad_backward(_n, grad_output, self, padding, _k, reflect, grad_input)

        impl(name)(fwd)
        impl(name + ".out")(fwd_out)
        impl(name + "_backward")(bwd)
        impl(name + "_backward.grad_input")(bwd_out)


_register_pad("reflection", True)
_register_pad("replication", False)


# ---------------------------------------------------------------------------
# glu and prelu (compositions of foo's elementwise kernels)
# ---------------------------------------------------------------------------


def _glu_halves(self, dim):
    if self.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = wrap_dim(dim, self.dim())
    n = self.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    return d, self.narrow(d, 0, n // 2), self.narrow(d, n // 2, n // 2)


def _check_float(name, self):
    if not self.is_floating_point():
        raise NotImplementedError(f"\"{name}\" not implemented for '{SCALAR_NAME.get(self.dtype)}' (foo)")


@impl("glu.out")
def glu_out(self, dim=-1, *, out):
    check_same_device("glu", self, out)
    d, a, b = _glu_halves(self, dim)
    _check_float("glu_cpu", self)
    check_out(out, a.shape, self.dtype)
    return torch.mul(a, torch.sigmoid(b), out=out)


@impl("glu")
def glu(self, dim=-1):
    d, a, b = _glu_halves(self, dim)
    _check_float("glu_cpu", self)
    return torch.mul(a, torch.sigmoid(b))


def _glu_backward(grad_output, self, dim):
    check_same_device("glu_backward", grad_output, self)
    d, a, b = _glu_halves(self, dim)
    _check_float("glu_backward_cpu", self)
    s = torch.sigmoid(b)
    ga = s * grad_output
    gb = ga * a * (1 - s)
    return torch.cat([ga, gb], d)


@impl("glu_backward")
def glu_backward(grad_output, self, dim):
    return _glu_backward(grad_output, self, dim)


@impl("glu_backward.grad_input")
def glu_backward_grad_input(grad_output, self, dim, *, grad_input):
    g = _glu_backward(grad_output, self, dim)
    check_out(grad_input, self.shape, self.dtype)
    return grad_input.copy_(g)


@impl("_prelu_kernel")
def prelu_kernel(self, weight):
    check_same_device("prelu", self, weight)
    _check_float("prelu_cpu", self)
    return torch.where(self > 0, self, weight * self)


@impl("_prelu_kernel_backward")
def prelu_kernel_backward(grad_output, self, weight):
    check_same_device("prelu_backward", grad_output, self, weight)
    _check_float("prelu_backward_cpu", self)
    pos = self > 0
    grad_input = torch.where(pos, grad_output, weight * grad_output)
    grad_weight = torch.where(pos, torch.zeros((), dtype=self.dtype, device=self.device), self * grad_output)
    return grad_input, grad_weight


# ---------------------------------------------------------------------------
# nearest and nearest-exact upsampling (1-3d) and backward
# ---------------------------------------------------------------------------
#
# ATen's meta function (run on a meta tensor) checks the arguments and gives
# the output's shape and strides; every spatial dim is then one index_select
# with ATen's source index per output position (`nearest_idx`, in float32),
# the backward one index_add per dim in reverse. All foo kernels.


def _nearest_source(n_in: int, n_out: int, scale, exact: bool) -> torch.Tensor:
    dst = torch.arange(n_out, dtype=torch.int64)
    if not exact and n_out == n_in:
        return dst
    if not exact and n_out == 2 * n_in:
        return dst >> 1
    s = torch.tensor(1.0 / scale if scale is not None and scale > 0 else n_in / n_out, dtype=torch.float32)
    pos = (dst.to(torch.float32) + 0.5 if exact else dst.to(torch.float32)) * s
    return pos.floor().to(torch.int64).clamp(max=n_in - 1)


def _upsample_plan(self, output_size, scales, exact: bool):
    k = len(scales)
    shape = self if isinstance(self, torch.Size) else self.shape
    nd = len(shape)
    return [(nd - k + i, _nearest_source(shape[nd - k + i], output_size[i], scales[i], exact)) for i in range(k)]


def _into_meta(r, meta, out, dtype):
    """``r`` written into ``out`` (checked against ``meta``, the op's meta
    result) or, without ``out``, into a new ``dtype`` tensor with the meta's
    sizes and strides on ``r``'s device."""
    if out is None:
        out = torch.empty_strided(meta.shape, meta.stride(), dtype=dtype, device=r.device)
    else:
        check_out(out, meta.shape, dtype)
    if out.numel():
        out.copy_(r)
    return out


def _meta_call(op, t, *args):
    """``op`` on a meta stand-in of ``t``: CPU's checks, the result's shape
    and strides. torch's Python meta of nearest upsampling trips over a zero
    batch (its check yields an int), which CPU accepts: that case is asked
    with a batch of one; the linear ones divide by a zero output size, which
    CPU refuses with a RuntimeError."""
    if t.dim() and t.shape[0] == 0 and t.numel() == 0 and all(t.shape[1:]):
        one = op(torch.empty((1, *t.shape[1:]), device="meta"), *args)
        return torch.empty((0, *one.shape[1:]), device="meta")
    try:
        return op(torch.empty_like(t, device="meta"), *args)
    except ZeroDivisionError:  # torch's Python meta divides by an empty output size
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got output {args[0]} (foo)") from None


def _upsample_forward(op, name, exact, self, output_size, scales, out=None):
    check_same_device(name, self, out)
    meta = _meta_call(op, self, output_size, *scales)
    if not (self.is_floating_point() or self.dtype == torch.uint8):
        raise NotImplementedError(f"\"{name}\" not implemented for '{SCALAR_NAME.get(self.dtype)}' (foo)")
    r = self
    if self.numel() and meta.numel():
        for d, idx in _upsample_plan(self, output_size, scales, exact):
            r = torch.index_select(r, d, idx.to(self.device))
    return _into_meta(r, meta, out, self.dtype)


def _upsample_backward(op, name, exact, grad_output, output_size, input_size, scales, grad_input=None):
    check_same_device(name, grad_output, grad_input)
    meta = _meta_call(op, grad_output, output_size, input_size, *scales)
    g = grad_output
    if g.numel():
        for d, idx in reversed(_upsample_plan(torch.Size(input_size), output_size, scales, exact)):
            shape = list(g.shape)
            shape[d] = input_size[d]
            g = torch.zeros(shape, dtype=g.dtype, device=g.device).index_add_(d, idx.to(g.device), g)
    else:
        g = torch.zeros(input_size, dtype=g.dtype, device=g.device)
    return _into_meta(g, meta, grad_input, grad_output.dtype)


def _register_upsample(prefix: str, exact: bool) -> None:
    for k in (1, 2, 3):
        name = f"{prefix}{k}d"
        fop = getattr(torch.ops.aten, name).default
        bop = getattr(torch.ops.aten, name + "_backward").default
        nsc = k  # one optional scale per spatial dim

        def fwd(self, output_size, *scales, _n=name, _f=fop, _k=nsc):
            return _upsample_forward(_f, _n, exact, self, output_size, _pad_scales(scales, _k))

        def fwd_out(self, output_size, *scales, out, _n=name, _f=fop, _k=nsc):
            return _upsample_forward(_f, _n, exact, self, output_size, _pad_scales(scales, _k), out)

        def bwd(grad_output, output_size, input_size, *scales, _n=name + "_backward", _b=bop, _k=nsc):
            return _upsample_backward(_b, _n, exact, grad_output, output_size, input_size, _pad_scales(scales, _k))

        def bwd_out(grad_output, output_size, input_size, *scales, grad_input, _n=name + "_backward", _b=bop, _k=nsc):
            return _upsample_backward(
                _b, _n, exact, grad_output, output_size, input_size, _pad_scales(scales, _k), grad_input
            )

        impl(name)(fwd)
        impl(name + ".out")(fwd_out)
        impl(name + "_backward")(bwd)
        impl(name + "_backward.grad_input")(bwd_out)


def _pad_scales(scales, k):
    return tuple(scales) + (None,) * (k - len(scales))


_register_upsample("upsample_nearest", False)
_register_upsample("_upsample_nearest_exact", True)


# ---------------------------------------------------------------------------
# linear, bilinear and trilinear upsampling and backward
# ---------------------------------------------------------------------------
#
# Separable: per spatial dim two index_selects weighted by ATen's lambdas
# (`compute_source_index_and_lambda`, in the compute type: float32 for
# float32 and the 16-bit types, which are computed in float32 and rounded
# once, float64 for float64); the backward is two weighted index_adds per dim.


def _linear_plan(n_in, n_out, align_corners, scale, ct):
    dst = torch.arange(n_out, dtype=ct)
    if n_out == n_in:
        i0 = torch.arange(n_out)
        return i0, i0, torch.ones(n_out, dtype=ct), torch.zeros(n_out, dtype=ct)
    if align_corners:
        ratio = torch.tensor((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0, dtype=ct)
        src = ratio * dst
    else:
        ratio = torch.tensor(1.0 / scale if scale is not None and scale > 0 else n_in / n_out, dtype=ct)
        src = (ratio * (dst + 0.5) - 0.5).clamp(min=0)
    i0 = src.floor().to(torch.int64).clamp(max=n_in - 1)
    l1 = (src - i0.to(ct)).clamp(0, 1)
    i1 = i0 + (i0 < n_in - 1).to(torch.int64)
    return i0, i1, 1 - l1, l1


def _bcast(v, d, nd):
    return v.reshape([-1 if i == d else 1 for i in range(nd)])


def _linear_plans(shape, output_size, align_corners, scales, ct, device):
    nd, k = len(shape), len(scales)
    out = []
    for i in range(k):
        d = nd - k + i
        i0, i1, l0, l1 = _linear_plan(shape[d], output_size[i], align_corners, scales[i], ct)
        out.append((d, i0.to(device), i1.to(device), _bcast(l0, d, nd).to(device), _bcast(l1, d, nd).to(device)))
    return out


def _compute_type(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _upsample_linear_forward(op, name, self, output_size, align_corners, scales, out=None):
    check_same_device(name, self, out)
    meta = _meta_call(op, self, output_size, align_corners, *scales)
    _check_float(name, self)
    ct = _compute_type(self.dtype)
    r = self.to(ct)
    if self.numel() and meta.numel():
        for d, i0, i1, l0, l1 in _linear_plans(self.shape, output_size, align_corners, scales, ct, self.device):
            r = torch.index_select(r, d, i0) * l0 + torch.index_select(r, d, i1) * l1
    return _into_meta(r, meta, out, self.dtype)


def _upsample_linear_backward(op, name, grad_output, output_size, input_size, align_corners, scales, grad_input=None):
    check_same_device(name, grad_output, grad_input)
    meta = _meta_call(op, grad_output, output_size, input_size, align_corners, *scales)
    ct = _compute_type(grad_output.dtype)
    g = grad_output.to(ct)
    if g.numel():
        plans = _linear_plans(torch.Size(input_size), output_size, align_corners, scales, ct, g.device)
        for d, i0, i1, l0, l1 in reversed(plans):
            shape = list(g.shape)
            shape[d] = input_size[d]
            z = torch.zeros(shape, dtype=ct, device=g.device)
            g = z.index_add_(d, i0, g * l0).index_add_(d, i1, g * l1)
    else:
        g = torch.zeros(input_size, dtype=ct, device=g.device)
    return _into_meta(g, meta, grad_input, grad_output.dtype)


def _register_upsample_linear() -> None:
    for k, name in ((1, "upsample_linear1d"), (2, "upsample_bilinear2d"), (3, "upsample_trilinear3d")):
        fop = getattr(torch.ops.aten, name).default
        bop = getattr(torch.ops.aten, name + "_backward").default

        def fwd(self, output_size, align_corners, *scales, _n=name, _f=fop, _k=k):
            return _upsample_linear_forward(_f, _n, self, output_size, align_corners, _pad_scales(scales, _k))

        def fwd_out(self, output_size, align_corners, *scales, out, _n=name, _f=fop, _k=k):
            return _upsample_linear_forward(_f, _n, self, output_size, align_corners, _pad_scales(scales, _k), out)

        def bwd(grad_output, output_size, input_size, align_corners, *scales, _n=name + "_backward", _b=bop, _k=k):
            return _upsample_linear_backward(
                _b, _n, grad_output, output_size, input_size, align_corners, _pad_scales(scales, _k)
            )

        def bwd_out(
            grad_output,
            output_size,
            input_size,
            align_corners,
            *scales,
            grad_input,
            _n=name + "_backward",
            _b=bop,
            _k=k,
        ):
            return _upsample_linear_backward(
                _b, _n, grad_output, output_size, input_size, align_corners, _pad_scales(scales, _k), grad_input
            )

        impl(name)(fwd)
        impl(name + ".out")(fwd_out)
        impl(name + "_backward")(bwd)
        impl(name + "_backward.grad_input")(bwd_out)


_register_upsample_linear()


# ---------------------------------------------------------------------------
# rrelu_with_noise (F.rrelu): foo's leaky_relu in eval mode; in training a
# slope drawn from foo's uniform_ for each non-positive element, as CPU does.
# ---------------------------------------------------------------------------


def _rrelu_into(self, noise, lower, upper, training, generator, out):
    check_same_device("rrelu_with_noise", self, noise, out)
    lower, upper = float(lower), float(upper)
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound (foo)")
    _check_float("rrelu_with_noise_out_cpu", self)
    if not training:
        return torch.ops.aten.leaky_relu.out(self, (lower + upper) / 2, out=out)
    if noise.shape != self.shape:
        noise.resize_(self.shape)
    slope = torch.empty(self.shape, dtype=self.dtype, device=self.device).uniform_(lower, upper, generator=generator)
    pos = torch.logical_not(self <= 0)  # CPU draws a slope where input <= 0 only (not for NaN)
    noise.copy_(torch.where(pos, torch.ones((), dtype=self.dtype, device=self.device), slope))
    return torch.mul(self, noise, out=out)


@impl("rrelu_with_noise")
def rrelu_with_noise(self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    out = torch.empty_like(self, memory_format=torch.contiguous_format)
    return _rrelu_into(self, noise, lower, upper, training, generator, out)


@impl("rrelu_with_noise.out")
def rrelu_with_noise_out(self, noise, lower=0.125, upper=1 / 3, training=False, generator=None, *, out):
    check_out(out, self.shape, self.dtype)
    return _rrelu_into(self, noise, lower, upper, training, generator, out)


@impl("rrelu_with_noise_")
def rrelu_with_noise_inplace(self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    _rrelu_into(self, noise, lower, upper, training, generator, self)
    return self
