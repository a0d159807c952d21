"""Whole-sequence LSTM and GRU: ``aten::lstm.input``, ``lstm.data`` (packed),
``gru.input`` and ``gru.data``.

How the ops get here. In ATen these four are CompositeImplicitAutograd: for
a device without its own route they loop over the time steps, two matrix
products and one fused cell op (``_thnn_fused_lstm_cell``, see rnn.py) per
step, and autograd records every step. CUDA (cuDNN) and MPS keep that entry
point but branch inside it to a whole-sequence op of their own
(``_cudnn_rnn``, ``_lstm_mps``) that has an autograd formula in
derivatives.yaml. An out-of-tree backend cannot add such a branch or a
derivatives.yaml entry, but the dispatcher gives it the same effect: a
kernel registered for the op on ``AutogradPrivateUse1`` takes precedence
over the CompositeImplicitAutograd kernel for foo tensors (dispatcher rules
older than torch 2.13; no API newer than 2.13 is used here). That is what is registered here; it runs one
``torch.autograd.Function`` for the whole call, whose forward and backward
go to Rust (kernels/rnn.rs). The same function is the ``PrivateUse1`` kernel
too, for calls that arrive below autograd (``torch.inference_mode``).

Work split. Per layer and direction: the input projection of every step is
one matrix product (``x @ W_ih^T + b``, foo's native addmm), then one Rust
call runs the recurrence (per step one product with ``W_hh``, blocks of
hidden units in parallel, gate math fused). The backward is one Rust call
for the recurrence through time (gate gradients, ``dh0``/``dc0`` and each
step's previous hidden state), then a few large products over the whole
sequence: ``dW_ih = dG^T x``, ``dW_hh = dG^T h_prev``, ``dx = dG W_ih`` and
the bias gradients as column sums. Dropout between layers is foo's
``native_dropout`` in the order ATen's composite draws it, so a seeded run
gives the same masks on both paths.

What goes to the composite (per-step) path instead, with ATen's own
semantics and errors: float16/bfloat16 (ATen's cells, computed in the
tensors' dtype), LSTM projections (``proj_size``), empty inputs, arguments
the kernel's shape checks do not recognise (ATen raises CPU's error), tensor
subclasses and dispatch modes (FakeTensor, tracing), functorch transforms,
dropout of 1. Double backward (``create_graph=True``) recomputes the call
through the composite path and differentiates that, so higher derivatives
are ATen's; with dropout active in training that would draw new masks, so it
raises instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ._registry import _C, desc, impl

__all__: list[str] = []

_NATIVE_DTYPES = (torch.float32, torch.float64)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_aten = torch.ops.aten


@dataclass(frozen=True)
class _Config:
    cell: str  # "lstm" or "gru"
    sizes: tuple[int, ...]  # rows of each time step in the flat layout
    layers: int
    directions: int
    hidden: int
    has_biases: bool
    dropout: float  # applied between layers (0: none)

    @property
    def gates(self) -> int:
        return 4 if self.cell == "lstm" else 3

    @property
    def per_layer(self) -> int:
        return 4 if self.has_biases else 2

    def weights(self, params, layer: int, direction: int):
        k = (layer * self.directions + direction) * self.per_layer
        w_ih, w_hh = params[k], params[k + 1]
        b_ih, b_hh = (params[k + 2], params[k + 3]) if self.has_biases else (None, None)
        return w_ih, w_hh, b_ih, b_hh


def _composite(op, *args):
    """ATen's CompositeImplicitAutograd kernel (the per-step path)."""
    return op._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args)


def _plain(t) -> bool:
    return type(t) in _PLAIN


def _native_config(cell, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, sizes, in_features):
    """The whole-sequence config when the Rust kernel covers this call, else None."""
    if torch._C._are_functorch_transforms_active() or _get_current_dispatch_mode() is not None:
        return None
    tensors = [x, *hx, *params]
    if not all(_plain(t) for t in tensors):
        return None
    dtype = x.dtype
    if dtype not in _NATIVE_DTYPES or any(t.dtype != dtype or t.device != x.device for t in tensors):
        return None
    if x.numel() == 0 or not sizes or num_layers < 1:
        return None
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    if len(params) != num_layers * directions * per_layer:
        return None  # projections (LSTM proj_size) or a malformed list: ATen decides
    h0 = hx[0]
    if h0.dim() != 3:
        return None
    hidden = h0.shape[2]
    gates = 4 if cell == "lstm" else 3
    if tuple(h0.shape) != (num_layers * directions, sizes[0], hidden) or any(
        tuple(h.shape) != tuple(h0.shape) for h in hx[1:]
    ):
        return None
    p = float(dropout) if train and num_layers > 1 else 0.0
    if p >= 1.0 or p < 0.0:
        return None
    cfg = _Config(cell, tuple(sizes), num_layers, directions, hidden, bool(has_biases), p)
    for layer in range(num_layers):
        want_in = in_features if layer == 0 else directions * hidden
        for d in range(directions):
            w_ih, w_hh, b_ih, b_hh = cfg.weights(params, layer, d)
            if tuple(w_ih.shape) != (gates * hidden, want_in) or tuple(w_hh.shape) != (gates * hidden, hidden):
                return None
            if has_biases and (tuple(b_ih.shape) != (gates * hidden,) or tuple(b_hh.shape) != (gates * hidden,)):
                return None
    return cfg


def _forward(cfg: _Config, x, h0, c0, params, keep: bool):
    """Every layer and direction over the flat sequence ``x`` ``[N, in]``.
    Returns ``(out [N, D*H], h_n, c_n, saved)``; ``saved`` (when ``keep``)
    holds per layer its input, output, dropout mask and per direction the
    cell states and workspace."""
    n, hsz, dirs = x.shape[0], cfg.hidden, cfg.directions
    lstm = cfg.cell == "lstm"
    h0 = h0.contiguous()
    c0 = c0.contiguous() if lstm else None
    hn = torch.empty_like(h0)
    cn = torch.empty_like(c0) if lstm else None
    saved = []
    layer_in = x
    for layer in range(cfg.layers):
        y = x.new_empty((n, dirs * hsz))
        per_dir = []
        for d in range(dirs):
            idx = layer * dirs + d
            w_ih, w_hh, b_ih, b_hh = cfg.weights(params, layer, d)
            w_hh = w_hh.contiguous()
            if b_ih is None:
                xg = torch.mm(layer_in, w_ih.t())
            else:
                xg = torch.addmm(b_ih + b_hh if lstm else b_ih, layer_in, w_ih.t())
            cs = x.new_empty((n, hsz)) if lstm else None
            ws = x.new_empty((n, 4 * hsz)) if keep else None
            _C.rnn_forward(
                cfg.cell,
                cfg.sizes,
                d == 1,
                hsz,
                desc(xg),
                desc(w_hh),
                desc(b_hh.contiguous().view(1, -1)) if (not lstm and b_hh is not None) else None,
                desc(h0[idx]),
                desc(c0[idx]) if lstm else None,
                desc(y.narrow(1, d * hsz, hsz)),
                desc(hn[idx]),
                desc(cn[idx]) if lstm else None,
                desc(cs) if lstm else None,
                desc(ws) if keep else None,
            )
            per_dir.append((cs, ws))
        mask = None
        out = y
        if cfg.dropout > 0 and layer < cfg.layers - 1:
            out, mask = torch.native_dropout(y, cfg.dropout, True)
        if keep:
            saved.append((layer_in, y, mask, per_dir))
        layer_in = out
    return layer_in, hn, cn, saved


def _flatten(saved):
    flat, layout = [], []
    for layer_in, y, mask, per_dir in saved:
        layout.append(len(per_dir))
        flat += [layer_in, y, mask]
        for cs, ws in per_dir:
            flat += [cs, ws]
    return flat


def _unflatten(cfg: _Config, flat):
    saved, i = [], 0
    for _ in range(cfg.layers):
        layer_in, y, mask = flat[i : i + 3]
        i += 3
        per_dir = []
        for _ in range(cfg.directions):
            per_dir.append((flat[i], flat[i + 1]))
            i += 2
        saved.append((layer_in, y, mask, per_dir))
    return saved


class _WholeSequence(torch.autograd.Function):
    """One LSTM/GRU call over the whole (flat) sequence: inputs ``x``
    ``[N, in]``, ``h0`` (and LSTM ``c0``) ``[L*D, B, H]``, the flat weights;
    outputs ``out`` ``[N, D*H]``, ``h_n`` (and ``c_n``)."""

    @staticmethod
    def forward(ctx, cfg: _Config, rebuild, x, h0, c0, *params):
        keep = any(ctx.needs_input_grad)
        out, hn, cn, saved = _forward(cfg, x, h0, c0, params, keep)
        ctx.cfg, ctx.rebuild = cfg, rebuild
        if keep:
            ctx.save_for_backward(x, h0, c0, *params, *_flatten(saved))
        if cfg.cell == "lstm":
            return out, hn, cn
        return out, hn

    @staticmethod
    def backward(ctx, dout, dhn, dcn=None):
        cfg: _Config = ctx.cfg
        lstm = cfg.cell == "lstm"
        tensors = ctx.saved_tensors
        nparams = cfg.layers * cfg.directions * cfg.per_layer
        x, h0, c0 = tensors[:3]
        params = tensors[3 : 3 + nparams]
        if torch.is_grad_enabled():
            return (None, None, *_double_backward(ctx, cfg, x, h0, c0, params, dout, dhn, dcn))
        saved = _unflatten(cfg, tensors[3 + nparams :])
        hsz, dirs, gates = cfg.hidden, cfg.directions, cfg.gates
        h0 = h0.contiguous()
        c0 = c0.contiguous() if lstm else None
        dhn = dhn.contiguous()
        dcn = dcn.contiguous() if lstm else None
        dh0 = torch.empty_like(h0)
        dc0 = torch.empty_like(c0) if lstm else None
        dparams: list[torch.Tensor | None] = [None] * nparams
        d_out = dout.contiguous()
        for layer in reversed(range(cfg.layers)):
            layer_in, y, mask, per_dir = saved[layer]
            if mask is not None:
                d_out = torch.ops.aten.native_dropout_backward(d_out, mask, 1.0 / (1.0 - cfg.dropout))
            n = layer_in.shape[0]
            d_in = None
            for d in range(dirs):
                idx = layer * dirs + d
                cs, ws = per_dir[d]
                w_ih, w_hh, b_ih, _ = cfg.weights(params, layer, d)
                w_hh = w_hh.contiguous()
                dgx = y.new_empty((n, gates * hsz))
                dgh = None if lstm else y.new_empty((n, gates * hsz))
                hprev = y.new_empty((n, hsz))
                _C.rnn_backward(
                    cfg.cell,
                    cfg.sizes,
                    d == 1,
                    hsz,
                    desc(d_out.narrow(1, d * hsz, hsz)),
                    desc(dhn[idx]),
                    desc(dcn[idx]) if lstm else None,
                    desc(w_hh),
                    desc(h0[idx]),
                    desc(c0[idx]) if lstm else None,
                    desc(y.narrow(1, d * hsz, hsz)),
                    desc(cs) if lstm else None,
                    desc(ws),
                    desc(dgx),
                    None if lstm else desc(dgh),
                    desc(dh0[idx]),
                    desc(dc0[idx]) if lstm else None,
                    desc(hprev),
                )
                dgh_ = dgx if lstm else dgh
                k = (layer * dirs + d) * cfg.per_layer
                dparams[k] = torch.mm(dgx.t(), layer_in)
                dparams[k + 1] = torch.mm(dgh_.t(), hprev)
                if b_ih is not None:
                    dparams[k + 2] = dgx.sum(0)
                    dparams[k + 3] = dparams[k + 2].clone() if lstm else dgh.sum(0)
                if d_in is None:
                    d_in = torch.mm(dgx, w_ih)
                else:
                    d_in = torch.addmm(d_in, dgx, w_ih)
            d_out = d_in
        return (None, None, d_out, dh0, dc0 if lstm else None, *dparams)


def _double_backward(ctx, cfg: _Config, x, h0, c0, params, dout, dhn, dcn):
    """Gradients with ``create_graph=True``: the call recomputed through
    ATen's composite path, differentiated with a graph."""
    if cfg.dropout > 0:
        raise RuntimeError(
            f"foo: double backward through {cfg.cell.upper()} with dropout > 0 in training mode is not "
            "supported (the recomputation would draw new dropout masks); use eval() or dropout=0"
        )
    lstm = cfg.cell == "lstm"
    inputs = [x, h0, *([c0] if lstm else []), *params]
    needs = ctx.needs_input_grad[2:]
    if not lstm:
        needs = needs[:2] + needs[3:]
    # The saved inputs keep their history, so the recomputed graph (and the
    # gradients it yields) reaches whatever produced them.
    outs = ctx.rebuild(x, h0, c0 if lstm else None, list(params))
    grads_out = (dout, dhn, dcn) if lstm else (dout, dhn)
    wanted = [t for t, need in zip(inputs, needs) if need]
    got = iter(torch.autograd.grad(outs, wanted, grads_out, create_graph=True, allow_unused=True))
    grads = [next(got) if need else None for need in needs]
    if lstm:
        return grads[0], grads[1], grads[2], *grads[3:]
    return grads[0], grads[1], None, *grads[2:]


# ---------------------------------------------------------------------------
# The four entry points
# ---------------------------------------------------------------------------


def _run(cfg: _Config, rebuild, x, h0, c0, params, autograd: bool):
    if autograd and torch.is_grad_enabled():
        return _WholeSequence.apply(cfg, rebuild, x, h0, c0, *params)
    out, hn, cn, _ = _forward(cfg, x, h0, c0, params, keep=False)
    return (out, hn, cn) if cfg.cell == "lstm" else (out, hn)


def _seq_input(
    autograd, op, cell, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    hx_list = list(hx) if cell == "lstm" else [hx]
    params = list(params)
    x = input.transpose(0, 1) if (batch_first and input.dim() == 3) else input
    cfg = None
    if input.dim() == 3:
        t, b = x.shape[0], x.shape[1]
        cfg = _native_config(
            cell, x, hx_list, params, has_biases, num_layers, dropout, train, bidirectional, [b] * t, x.shape[2]
        )
    if cfg is None:
        return _composite(op, *args)
    t, b, f = x.shape

    def rebuild(lx, lh0, lc0, lparams):
        hxs = [lh0, lc0] if cell == "lstm" else lh0
        res = _composite(
            op, lx.view(t, b, f), hxs, lparams, has_biases, num_layers, dropout, train, bidirectional, False
        )
        return (res[0].reshape(t * b, -1), *res[1:])

    res = _run(cfg, rebuild, x.reshape(t * b, f), hx_list[0], hx_list[1] if cell == "lstm" else None, params, autograd)
    out = res[0].view(t, b, -1)
    if batch_first:
        out = out.transpose(0, 1)
    return (out, *res[1:])


def _seq_data(autograd, op, cell, data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    args = (data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
    hx_list = list(hx) if cell == "lstm" else [hx]
    params = list(params)
    cfg = None
    if (
        data.dim() == 2
        and batch_sizes.device.type == "cpu"
        and batch_sizes.dim() == 1
        and batch_sizes.dtype == torch.int64
    ):
        sizes = batch_sizes.tolist()
        if (
            sizes
            and all(s > 0 for s in sizes)
            and sum(sizes) == data.shape[0]
            and all(a >= b for a, b in zip(sizes, sizes[1:]))
        ):
            cfg = _native_config(
                cell, data, hx_list, params, has_biases, num_layers, dropout, train, bidirectional, sizes, data.shape[1]
            )
    if cfg is None:
        return _composite(op, *args)

    def rebuild(lx, lh0, lc0, lparams):
        hxs = [lh0, lc0] if cell == "lstm" else lh0
        return _composite(op, lx, batch_sizes, hxs, lparams, has_biases, num_layers, dropout, train, bidirectional)

    return _run(cfg, rebuild, data, hx_list[0], hx_list[1] if cell == "lstm" else None, params, autograd)


_OPS = {
    "lstm.input": (_seq_input, _aten.lstm.input, "lstm"),
    "gru.input": (_seq_input, _aten.gru.input, "gru"),
    "lstm.data": (_seq_data, _aten.lstm.data, "lstm"),
    "gru.data": (_seq_data, _aten.gru.data, "gru"),
}


def _kernel(name: str, autograd: bool):
    run, op, cell = _OPS[name]

    def kernel(*args):
        return run(autograd, op, cell, *args)

    kernel.__name__ = kernel.__qualname__ = name.replace(".", "_")
    return kernel


# Above autograd: one autograd.Function for the call. Below it (autograd
# excluded, as under torch.inference_mode): the forward alone.
for _name in _OPS:
    impl(_name, dispatch_key="AutogradPrivateUse1")(_kernel(_name, autograd=True))
    impl(_name, dispatch_key="PrivateUse1")(_kernel(_name, autograd=False))
