"""Losses, 3-d pooling, im2col / col2im beyond the core nn kernels:
huber_loss, smooth_l1_loss and binary_cross_entropy (forward and backward:
one Rust kernel family with mse_loss, ``nn::PointLoss``).

Reductions and weights follow CPU's order of operations: the elementwise
loss, then (binary_cross_entropy) the weight multiplied in and the mean or
sum taken by foo's own kernels.
"""

from __future__ import annotations

import torch

from ._registry import _C, check_same_device, desc, impl
from .linalg import SCALAR_NAME, check_out, resize_out

_NONE, _MEAN, _SUM = 0, 1, 2


def _check_reduction(reduction) -> None:
    if reduction not in (_NONE, _MEAN, _SUM):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _into(r: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``r`` itself, or copied into ``out`` (already checked and resized)."""
    if out is None or out is r:
        return r
    out.copy_(r)
    return out


# ---------------------------------------------------------------------------
# huber_loss / smooth_l1_loss: elementwise, reduced in the kernel
# ---------------------------------------------------------------------------


def _point_loss(kind, name, param, self, target, reduction, out_dtype, out=None):
    check_same_device(name, self, target, out)
    _check_reduction(reduction)
    dt = torch.promote_types(self.dtype, target.dtype)
    a, b = self.to(dt), target.to(dt)
    shape = tuple(torch.broadcast_shapes(a.shape, b.shape))
    rshape = shape if reduction == _NONE else ()
    if out is not None:
        check_out(out, rshape, out_dtype)
    if out is not None and out.dtype == dt:
        r = out
    else:
        r = torch.empty(rshape, dtype=dt, device=self.device)
    _C.point_loss(kind, float(param), desc(r), desc(a), desc(b), shape, reduction)
    if out is None:
        return r if r.dtype == out_dtype else r.to(out_dtype)
    return _into(r, out)


def _check_huber(delta) -> None:
    if not delta > 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")


@impl("huber_loss")
def huber_loss(self, target, reduction=_MEAN, delta=1.0):
    _check_huber(delta)
    return _point_loss("huber", "huber_loss", delta, self, target, reduction, self.dtype)


@impl("huber_loss.out")
def huber_loss_out(self, target, reduction=_MEAN, delta=1.0, *, out):
    _check_huber(delta)
    return _point_loss("huber", "huber_loss", delta, self, target, reduction, out.dtype, out)


@impl("smooth_l1_loss.out")
def smooth_l1_loss_out(self, target, reduction=_MEAN, beta=1.0, *, out):
    if not beta >= 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    dt = torch.promote_types(self.dtype, target.dtype)
    return _point_loss("smooth_l1", "smooth_l1_loss", beta, self, target, reduction, dt, out)


def _point_backward(kind, name, param, grad_output, self, target, reduction, grad_input):
    check_same_device(name, grad_output, self, target, grad_input)
    dt = torch.promote_types(torch.promote_types(grad_output.dtype, self.dtype), target.dtype)
    g, a, b = grad_output.to(dt), self.to(dt), target.to(dt)
    shape = tuple(torch.broadcast_shapes(g.shape, a.shape, b.shape))
    if grad_input.dtype != dt:
        raise RuntimeError(f"Found dtype {SCALAR_NAME.get(grad_input.dtype)} but expected {SCALAR_NAME.get(dt)}")
    resize_out(grad_input, shape)
    _C.point_loss_backward(kind, float(param), desc(grad_input), desc(g), desc(a), desc(b), reduction)
    return grad_input


@impl("huber_loss_backward.out")
def huber_loss_backward_out(grad_output, self, target, reduction, delta, *, grad_input):
    return _point_backward("huber", "huber_loss_backward", delta, grad_output, self, target, reduction, grad_input)


@impl("smooth_l1_loss_backward.grad_input")
def smooth_l1_loss_backward_out(grad_output, self, target, reduction, beta, *, grad_input):
    # Rust takes a negative beta as 0 (the L1 loss), as CPU's backward does.
    return _point_backward(
        "smooth_l1", "smooth_l1_loss_backward", beta, grad_output, self, target, reduction, grad_input
    )


# ---------------------------------------------------------------------------
# binary_cross_entropy: the unweighted loss in Rust, then weight and reduction
# ---------------------------------------------------------------------------


def _bce_checks(name, self, target, weight, *rest) -> None:
    check_same_device(name, self, target, weight, *rest)
    if target.dtype != self.dtype:
        raise RuntimeError(f"Found dtype {SCALAR_NAME.get(target.dtype)} but expected {SCALAR_NAME.get(self.dtype)}")
    torch.broadcast_shapes(self.shape, target.shape)


def _bce(self, target, weight, reduction, out=None):
    _bce_checks("binary_cross_entropy", self, target, weight, out)
    _check_reduction(reduction)
    loss = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    _C.point_loss("bce", 0.0, desc(loss), desc(self), desc(target), tuple(self.shape), _NONE)
    if weight is not None:
        loss.mul_(weight)
    if reduction == _MEAN:
        loss = loss.mean()
    elif reduction == _SUM:
        loss = loss.sum()
    if out is not None:
        # CPU computes the elementwise loss in out (resized to the input's
        # shape), then resizes it to the reduced shape as it is.
        check_out(out, self.shape, self.dtype)
        out.resize_(loss.shape)
    return _into(loss, out)


@impl("binary_cross_entropy")
def binary_cross_entropy(self, target, weight=None, reduction=_MEAN):
    return _bce(self, target, weight, reduction)


@impl("binary_cross_entropy.out")
def binary_cross_entropy_out(self, target, weight=None, reduction=_MEAN, *, out):
    return _bce(self, target, weight, reduction, out)


def _bce_backward(grad_output, self, target, weight, reduction, grad_input=None):
    _bce_checks("binary_cross_entropy_backward", self, target, weight, grad_output, grad_input)
    _check_reduction(reduction)
    if grad_output.dtype != self.dtype:
        raise RuntimeError(
            f"Found dtype {SCALAR_NAME.get(grad_output.dtype)} but expected {SCALAR_NAME.get(self.dtype)}"
        )
    if grad_input is None:
        gi = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    else:
        check_out(grad_input, self.shape, self.dtype)
        gi = grad_input
    _C.point_loss_backward("bce", 0.0, desc(gi), desc(grad_output), desc(self), desc(target), _NONE)
    if weight is not None:
        gi.mul_(weight)
    if reduction == _MEAN:
        gi.div_(self.numel())
    return gi


@impl("binary_cross_entropy_backward")
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=_MEAN):
    return _bce_backward(grad_output, self, target, weight, reduction)


@impl("binary_cross_entropy_backward.grad_input")
def binary_cross_entropy_backward_out(grad_output, self, target, weight=None, reduction=_MEAN, *, grad_input):
    return _bce_backward(grad_output, self, target, weight, reduction, grad_input)


# ---------------------------------------------------------------------------
# im2col / col2im (nn.functional.unfold / fold)
# ---------------------------------------------------------------------------


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _kp(params):
    return [[int(v) for v in p] for p in params]


@impl("im2col")
def im2col(self, kernel_size, dilation, padding, stride):
    return _im2col(self, kernel_size, dilation, padding, stride)


@impl("im2col.out")
def im2col_out(self, kernel_size, dilation, padding, stride, *, out):
    return _im2col(self, kernel_size, dilation, padding, stride, out)


def _im2col(self, kernel_size, dilation, padding, stride, out=None):
    check_same_device("im2col", self, out)
    params = _kp((kernel_size, dilation, padding, stride))
    meta = torch.ops.aten.im2col.default(_meta(self), *params)
    batched = self.dim() == 4
    x = (self if batched else self.unsqueeze(0)).contiguous()
    r = torch.empty((x.shape[0], *meta.shape[-2:]), dtype=self.dtype, device=self.device)
    _C.im2col(desc(r), desc(x), *params)
    if not batched:
        r = r.squeeze(0)
    if out is not None:
        check_out(out, meta.shape, self.dtype)
    return _into(r, out)


@impl("col2im")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    return _col2im(self, output_size, kernel_size, dilation, padding, stride)


@impl("col2im.out")
def col2im_out(self, output_size, kernel_size, dilation, padding, stride, *, out):
    return _col2im(self, output_size, kernel_size, dilation, padding, stride, out)


def _col2im(self, output_size, kernel_size, dilation, padding, stride, out=None):
    check_same_device("col2im", self, out)
    params = _kp((kernel_size, dilation, padding, stride))
    meta = torch.ops.aten.col2im.default(_meta(self), [int(v) for v in output_size], *params)
    batched = self.dim() == 3
    cols = (self if batched else self.unsqueeze(0)).contiguous()
    r = torch.empty((cols.shape[0], *meta.shape[-3:]), dtype=self.dtype, device=self.device)
    _C.col2im(desc(r), desc(cols), *params)
    if not batched:
        r = r.squeeze(0)
    if out is not None:
        check_out(out, meta.shape, self.dtype)
    return _into(r, out)


# ---------------------------------------------------------------------------
# cdist / pdist
# ---------------------------------------------------------------------------

_DIST_DTYPES = (torch.float32, torch.float64)


def _dist_dtype(kernel: str, t: torch.Tensor, which: str | None) -> None:
    if not t.is_floating_point():
        if which is None:
            raise RuntimeError(f"{kernel} only supports floating-point dtypes")
        raise RuntimeError(f"{kernel} only supports floating-point dtypes, {which} got: {SCALAR_NAME.get(t.dtype)}")
    if t.dtype not in _DIST_DTYPES:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{SCALAR_NAME.get(t.dtype)}' on foo")


def _cdist_geometry(x1, x2):
    """CPU's broadcast of the batch dims: the expanded shapes and the output's."""
    if x1.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    batch = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    return batch, r1, r2, m


def _euclidean_dist(x1, x2):
    """ATen's ``_euclidean_dist`` (cdist's matrix-product path for p = 2),
    composed of foo's kernels in CPU's order."""
    x1_norm = x1.pow(2).sum(-1, keepdim=True)
    x2_norm = x2.pow(2).sum(-1, keepdim=True)
    x1_ = torch.cat([x1.mul(-2), x1_norm, torch.ones_like(x1_norm)], -1)
    x2_ = torch.cat([x2, torch.ones_like(x2_norm), x2_norm], -1)
    return x1_.matmul(x2_.mT).clamp_min_(1e-30).sqrt_()


@impl("_cdist_forward")
def cdist_forward(x1, x2, p, compute_mode=None):
    check_same_device("cdist", x1, x2)
    batch, r1, r2, m = _cdist_geometry(x1, x2)
    _dist_dtype("cdist", x1, "X1")
    _dist_dtype("cdist", x2, "X2")
    if not p >= 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_NAME.get(x1.dtype)} but found {SCALAR_NAME.get(x2.dtype)}")
    mode = 0 if compute_mode is None else compute_mode
    nb = 1
    for s in batch:
        nb *= s
    shape = (*batch, r1, r2)
    if r1 == 0 or r2 == 0 or nb == 0:
        return torch.empty(shape, dtype=x1.dtype, device=x1.device)
    if m == 0:
        return torch.zeros(shape, dtype=x1.dtype, device=x1.device)
    a = x1.expand(*batch, r1, m).reshape(nb, r1, m)
    b = x2.expand(*batch, r2, m).reshape(nb, r2, m)
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return _euclidean_dist(a, b).view(shape)
    out = torch.empty((nb, r1, r2), dtype=x1.dtype, device=x1.device)
    _C.cdist(desc(out), desc(a.contiguous()), desc(b.contiguous()), float(p))
    return out.view(shape)


@impl("_cdist_backward")
def cdist_backward(grad, x1, x2, p, cdist):
    check_same_device("_cdist_backward", grad, x1, x2, cdist)
    batch, r1, r2, m = _cdist_geometry(x1, x2)
    nb = 1
    for s in batch:
        nb *= s
    if r1 == 0 or r2 == 0 or m == 0 or nb == 0:
        return torch.zeros_like(x1)
    _dist_dtype("cdist", x1, "X1")
    a = x1.expand(*batch, r1, m).reshape(nb, r1, m).contiguous()
    b = x2.expand(*batch, r2, m).reshape(nb, r2, m).contiguous()
    g = grad.reshape(nb, r1, r2).contiguous()
    d = cdist.reshape(nb, r1, r2).contiguous()
    gx = torch.empty((nb, r1, m), dtype=x1.dtype, device=x1.device)
    _C.cdist_backward(desc(gx), desc(g), desc(a), desc(b), desc(d), float(p))
    return gx.view(*batch, r1, m)


@impl("_pdist_forward")
def pdist_forward(self, p=2.0):
    check_same_device("_pdist_forward", self)
    if self.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {self.dim()}D")
    _dist_dtype("pdist", self, None)
    if not p >= 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = self.shape[0]
    out = torch.empty((n * (n - 1) // 2 if n > 1 else 0,), dtype=self.dtype, device=self.device)
    if out.numel():
        if self.shape[1] == 0:
            out.zero_()
        else:
            _C.pdist(desc(out), desc(self.contiguous()), float(p))
    return out


@impl("_pdist_backward")
def pdist_backward(grad, self, p, pdist):
    check_same_device("_pdist_backward", grad, self, pdist)
    _dist_dtype("pdist", self, None)
    gi = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    if self.dim() != 2 or self.shape[0] <= 1 or self.shape[1] == 0 or p == 0:
        return gi.zero_()
    _C.pdist_backward(desc(gi), desc(grad.contiguous()), desc(self.contiguous()), desc(pdist.contiguous()), float(p))
    return gi


# ---------------------------------------------------------------------------
# grid_sampler_2d / grid_sampler_3d and backward
# ---------------------------------------------------------------------------


def _grid_checks(name, input, grid, k, interpolation_mode, padding_mode):
    check_same_device(name, input, grid)
    if input.dtype != grid.dtype:
        raise RuntimeError(
            f"expected scalar type {SCALAR_NAME.get(input.dtype)} but found {SCALAR_NAME.get(grid.dtype)}"
        )
    if input.dim() != k + 2 or grid.dim() != k + 2:
        raise RuntimeError(
            f"grid_sampler(): expected {k + 2}D input and grid with same number of dimensions, but got input with "
            f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
            f"{list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if grid.shape[-1] != k:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {k} in last dimension, but got grid with sizes {list(grid.shape)}"
        )
    for i in range(2, input.dim()):
        if input.shape[i] == 0:
            raise RuntimeError(
                f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes "
                f"{list(input.shape)} with dimension {i} being empty"
            )
    if not input.is_floating_point():
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{SCALAR_NAME.get(input.dtype)}' on foo")


def _grid_sample(name, k, input, grid, interpolation_mode, padding_mode, align_corners, out=None):
    _grid_checks(name, input, grid, k, interpolation_mode, padding_mode)
    shape = (input.shape[0], input.shape[1], *grid.shape[1 : k + 1])
    r = torch.empty(shape, dtype=input.dtype, device=input.device)
    if r.numel():
        _C.grid_sample(
            desc(r), desc(input), desc(grid), int(interpolation_mode), int(padding_mode), bool(align_corners)
        )
    if out is not None:
        check_out(out, r.shape, r.dtype)
    return _into(r, out)


def _grid_sample_backward(
    name, k, grad_output, input, grid, interpolation_mode, padding_mode, align_corners, outs=None
):
    _grid_checks(name, input, grid, k, interpolation_mode, padding_mode)
    check_same_device(name, grad_output, input)
    gi = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    gg = torch.empty(grid.shape, dtype=grid.dtype, device=grid.device)
    if gi.numel():
        gi.zero_()
    if gg.numel():
        gg.zero_()
    if gi.numel() and gg.numel() and grad_output.numel():
        _C.grid_sample_backward(
            desc(gi),
            desc(gg),
            desc(grad_output),
            desc(input),
            desc(grid),
            int(interpolation_mode),
            int(padding_mode),
            bool(align_corners),
        )
    if outs is None:
        return gi, gg
    for o, r in zip(outs, (gi, gg)):
        check_out(o, r.shape, r.dtype)
        o.copy_(r)
    return outs


def _register_grid(k):
    name = f"grid_sampler_{k}d"

    def fwd(input, grid, interpolation_mode, padding_mode, align_corners):
        return _grid_sample(name, k, input, grid, interpolation_mode, padding_mode, align_corners)

    def fwd_out(input, grid, interpolation_mode, padding_mode, align_corners, *, out):
        return _grid_sample(name, k, input, grid, interpolation_mode, padding_mode, align_corners, out)

    def bwd(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        return _grid_sample_backward(
            name + "_backward", k, grad_output, input, grid, interpolation_mode, padding_mode, align_corners
        )

    def bwd_out(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, *, out0, out1):
        return _grid_sample_backward(
            name + "_backward",
            k,
            grad_output,
            input,
            grid,
            interpolation_mode,
            padding_mode,
            align_corners,
            (out0, out1),
        )

    impl(name)(fwd)
    impl(name + ".out")(fwd_out)
    impl(name + "_backward")(bwd)
    impl(name + "_backward.out")(bwd_out)


_register_grid(2)
_register_grid(3)
