"""Fused optimizers (torch.optim's ``fused=True``) and GradScaler's kernels.

Each op is one call into Rust (rust/src/kernels/optim.rs) with the lists of
tensors; step counts and grad scales are read from their tensors in Rust.
Argument errors are torch CPU's own: the CPU op is run on stand-ins that
reproduce the problem (``_compat.raise_like_cpu``), so type and message
follow the installed torch.
"""

from __future__ import annotations

import torch

from .. import _compat
from ._registry import _C, check_same_device, desc, impl

_FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _descs(tensors) -> list:
    return [desc(t) for t in tensors]


def _skipped(found_inf) -> bool:
    """torch CPU's rule: a found_inf of 1.0 skips the whole step."""
    return found_inf is not None and found_inf.item() == 1.0


def _contiguous(*lists):
    """The lists with every non-contiguous tensor replaced by a contiguous
    copy, and the (original, copy) pairs to write back afterwards."""
    back = []
    out = []
    for ts in lists:
        new = []
        for t in ts:
            if t.is_contiguous():
                new.append(t)
            else:
                c = t.contiguous()
                back.append((t, c))
                new.append(c)
        out.append(new)
    return out, back


def _write_back(pairs) -> None:
    for original, copy in pairs:
        original.copy_(copy)


def _check_optimizer(name: str, params, *lists) -> None:
    check_same_device(name, *params, *(t for ts in lists for t in ts))
    for p in params:
        if p.dtype not in _FLOAT:
            raise NotImplementedError(f"\"{name}\" not implemented for '{p.dtype}' on foo")


def _lr(lr) -> float:
    return float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)


def _adam(decoupled: bool):
    name = "_fused_adamw_" if decoupled else "_fused_adam_"

    def kernel(
        self,
        grads,
        exp_avgs,
        exp_avg_sqs,
        max_exp_avg_sqs,
        state_steps,
        *,
        lr,
        beta1,
        beta2,
        weight_decay,
        eps,
        amsgrad,
        maximize,
        grad_scale=None,
        found_inf=None,
    ):
        if _skipped(found_inf):
            return
        _check_optimizer(name, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
        (p, g, m, v, mx), back = _contiguous(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
        _C.fused_adam(
            _descs(p),
            _descs(g),
            _descs(m),
            _descs(v),
            _descs(mx),
            _descs(state_steps),
            _lr(lr),
            float(beta1),
            float(beta2),
            float(weight_decay),
            float(eps),
            bool(amsgrad),
            bool(maximize),
            decoupled,
            desc(grad_scale) if grad_scale is not None else None,
        )
        _write_back(back)

    return kernel


impl("_fused_adam_", "_fused_adam_.tensor_lr")(_adam(decoupled=False))
impl("_fused_adamw_", "_fused_adamw_.tensor_lr")(_adam(decoupled=True))


@impl("_fused_sgd_", "_fused_sgd_.tensor_lr")
def fused_sgd_(
    self,
    grads,
    momentum_buffer_list,
    *,
    weight_decay,
    momentum,
    lr,
    dampening,
    nesterov,
    maximize,
    is_first_step,
    grad_scale=None,
    found_inf=None,
):
    if _skipped(found_inf):
        return
    bufs = momentum_buffer_list if momentum != 0 else []
    _check_optimizer("_fused_sgd_", self, grads, bufs)
    (p, g, b), back = _contiguous(self, grads, bufs)
    _C.fused_sgd(
        _descs(p),
        _descs(g),
        _descs(b),
        float(weight_decay),
        float(momentum),
        _lr(lr),
        float(dampening),
        bool(nesterov),
        bool(maximize),
        bool(is_first_step),
        desc(grad_scale) if grad_scale is not None else None,
    )
    _write_back(back)


@impl("_fused_adagrad_", "_fused_adagrad_.tensor_lr")
def fused_adagrad_(
    self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize, grad_scale=None, found_inf=None
):
    if _skipped(found_inf):
        return
    _check_optimizer("_fused_adagrad_", self, grads, state_sums)
    (p, g, s), back = _contiguous(self, grads, state_sums)
    _C.fused_adagrad(
        _descs(p),
        _descs(g),
        _descs(s),
        _descs(state_steps),
        _lr(lr),
        float(lr_decay),
        float(weight_decay),
        float(eps),
        bool(maximize),
        desc(grad_scale) if grad_scale is not None else None,
    )
    _write_back(back)


def _amp_scalar_ok(t, dtype) -> bool:
    return t.numel() == 1 and t.dtype == dtype


@impl("_amp_foreach_non_finite_check_and_unscale_")
def amp_foreach_non_finite_check_and_unscale_(self, found_inf, inv_scale):
    grads = list(self)
    if not (_amp_scalar_ok(found_inf, torch.float32) and _amp_scalar_ok(inv_scale, torch.float32)) or any(
        g.dtype not in _FLOAT for g in grads
    ):
        _compat.raise_like_cpu(
            lambda: torch._amp_foreach_non_finite_check_and_unscale_(
                [torch.ones(1, dtype=g.dtype) for g in grads],
                torch.zeros(found_inf.shape, dtype=found_inf.dtype),
                torch.ones(inv_scale.shape, dtype=inv_scale.dtype),
            ),
            RuntimeError("_amp_foreach_non_finite_check_and_unscale_: invalid arguments (foo)"),
        )
    if not grads:
        return
    check_same_device("_amp_foreach_non_finite_check_and_unscale_", *grads, found_inf, inv_scale)
    inv = float(inv_scale.item())
    plain = [g for g in grads if g.is_contiguous()]
    found = _C.amp_unscale(_descs(plain), inv) if plain else False
    for g in grads:
        if not g.is_contiguous():  # rare: a strided gradient, through native ops
            found = found or not bool(torch.isfinite(g).all())
            if inv != 1.0:
                g.mul_(inv)
    if found:
        found_inf.fill_(1.0)


@impl("_amp_update_scale_")
def amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    if not (
        _amp_scalar_ok(self, torch.float32)
        and _amp_scalar_ok(growth_tracker, torch.int32)
        and _amp_scalar_ok(found_inf, torch.float32)
    ):
        _compat.raise_like_cpu(
            lambda: torch._amp_update_scale_(
                torch.ones(self.shape, dtype=self.dtype),
                torch.zeros(growth_tracker.shape, dtype=growth_tracker.dtype),
                torch.zeros(found_inf.shape, dtype=found_inf.dtype),
                scale_growth_factor,
                scale_backoff_factor,
                growth_interval,
            ),
            RuntimeError("_amp_update_scale_: invalid arguments (foo)"),
        )
    check_same_device("_amp_update_scale_", self, growth_tracker, found_inf)
    _C.amp_update_scale(
        desc(self),
        desc(growth_tracker),
        desc(found_inf),
        float(scale_growth_factor),
        float(scale_backoff_factor),
        int(growth_interval),
    )
    return self
