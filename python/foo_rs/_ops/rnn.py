"""Fused RNN cells: ``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and
their backward (``_thnn_fused_lstm_cell_backward_impl``,
``_thnn_fused_gru_cell_backward``).

ATen's LSTM/GRU cells (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell) take the
fused route for PrivateUse1 tensors, as for CUDA: the two gate matmuls run as
ordinary ops and the pointwise rest of the cell is one of these ops. The CPU
has no kernel for them, so the CPU fallback cannot serve them; foo composes
them from its native elementwise kernels, with CUDA's semantics
(aten/src/ATen/native/cuda/RNN.cu), gate order and workspace layouts:

* LSTM: gates ``i, f, g, o``; workspace ``[B, 4H]`` = the activated gates
  ``sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)``; backward returns
  ``(grad_gates, grad_cx, grad_bias)`` (``_thnn_fused_lstm_cell_backward``,
  an ATen composite, hands grad_gates out for both gate inputs).
* GRU: gates ``r, z, n``; workspace ``[B, 5H]`` = ``r, z, n, hx, hn + b_hn``.

With autograd recording (double backward), ATen differentiates through
``_thnn_differentiable_*_cell_backward`` instead: composites of ordinary ops.
"""

from __future__ import annotations

import torch

from ._registry import check_same_device, impl

__all__ = [
    "fused_lstm_cell",
    "fused_lstm_cell_backward_impl",
    "fused_gru_cell",
    "fused_gru_cell_backward",
]

_FLOAT = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_TYPE = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _where(op: str) -> str:
    return f"(while checking arguments for {op} on foo)"


def _check_dim(op, t, name, pos, dim):
    if t.dim() != dim:
        raise RuntimeError(
            f"Expected {dim}-dimensional tensor, but got {t.dim()}-dimensional tensor for argument #{pos} "
            f"'{name}' {_where(op)}"
        )


def _check_numel(op, t, name, pos, numel):
    if t.numel() != numel:
        raise RuntimeError(
            f"Expected tensor for argument #{pos} '{name}' to have {numel} elements; but it actually has "
            f"{t.numel()} elements {_where(op)}"
        )


def _check_size(op, t, name, pos, size):
    if tuple(t.shape) != tuple(size):
        raise RuntimeError(
            f"Expected tensor for argument #{pos} '{name}' to have the same size as {list(size)}; but got "
            f"{list(t.shape)} instead {_where(op)}"
        )


def _check_dtype(op, *tensors):
    ts = [t for t in tensors if t is not None]
    dt = ts[0].dtype
    if dt not in _FLOAT:
        raise RuntimeError(f"\"{op}\" not implemented for '{str(dt).replace('torch.', '')}' on foo")
    for t in ts[1:]:
        if t.dtype != dt:
            raise RuntimeError(
                f"{op}: expected all tensors to have the same dtype, but got {_TYPE.get(dt, dt)} and "
                f"{_TYPE.get(t.dtype, t.dtype)}"
            )


def _check_cell(op, input_gates, hidden_gates, input_bias, hidden_bias, factor, prev_hidden):
    """ATen's checkSizes for the fused cells (factor 4 for LSTM, 3 for GRU)."""
    check_same_device(op, input_gates, hidden_gates, input_bias, hidden_bias, prev_hidden)
    _check_dim(op, input_gates, "input_gates", 1, 2)
    _check_size(op, hidden_gates, "hidden_gates", 2, input_gates.shape)
    gates_size = input_gates.shape[1]
    if (input_bias is None) != (hidden_bias is None):
        raise RuntimeError(f"{op}: input_bias and hidden_bias must be both given or both None")
    if input_bias is not None:
        _check_dim(op, input_bias, "input_bias", 3, 1)
        _check_numel(op, input_bias, "input_bias", 3, gates_size)
        _check_size(op, hidden_bias, "hidden_bias", 4, input_bias.shape)
    _check_dim(op, prev_hidden, "prev_hidden", 5, 2)
    _check_numel(op, prev_hidden, "prev_hidden", 5, input_gates.shape[0] * gates_size // factor)
    if gates_size % factor or prev_hidden.shape[0] != input_gates.shape[0]:
        raise RuntimeError(
            f"{op}: gates of size {list(input_gates.shape)} do not hold {factor} gates of a hidden state of size "
            f"{list(prev_hidden.shape)}"
        )
    _check_dtype(op, input_gates, hidden_gates, input_bias, hidden_bias, prev_hidden)


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    """input_gates + hidden_gates (+ input_bias + hidden_bias), a fresh contiguous tensor."""
    gates = torch.add(input_gates, hidden_gates)
    if input_bias is not None:
        gates.add_(input_bias).add_(hidden_bias)
    return gates


# ---------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------


@impl("_thnn_fused_lstm_cell")
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    op = "_thnn_fused_lstm_cell"
    _check_cell(op, input_gates, hidden_gates, input_bias, hidden_bias, 4, cx)
    h = cx.shape[1]
    # The workspace holds the activated gates: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o).
    workspace = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    workspace.narrow(1, 0, 2 * h).sigmoid_()
    workspace.narrow(1, 2 * h, h).tanh_()
    workspace.narrow(1, 3 * h, h).sigmoid_()
    ig, fg, cg, og = (workspace.narrow(1, k * h, h) for k in range(4))
    cy = torch.mul(fg, cx)
    cy.addcmul_(ig, cg)
    hy = torch.tanh(cy)
    hy.mul_(og)
    return hy, cy, workspace


@impl("_thnn_fused_lstm_cell_backward_impl")
def fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    op = "_thnn_fused_lstm_cell_backward_impl"
    if grad_hy is None and grad_cy is None:
        return None, None, None
    check_same_device(op, grad_hy, grad_cy, cx, cy, workspace)
    defined = grad_hy if grad_hy is not None else grad_cy
    _check_dim(op, defined, "grad_hy" if grad_hy is not None else "grad_cy", 1 if grad_hy is not None else 2, 2)
    size = defined.shape
    if grad_hy is not None:
        _check_size(op, grad_hy, "grad_hy", 1, size)
    if grad_cy is not None:
        _check_size(op, grad_cy, "grad_cy", 2, size)
    _check_size(op, cx, "cx", 3, size)
    _check_size(op, cy, "cy", 4, size)
    _check_dim(op, workspace, "workspace", 5, 2)
    _check_numel(op, workspace, "workspace", 5, size[0] * size[1] * 4)
    _check_dtype(op, workspace, grad_hy, grad_cy, cx, cy)

    h = size[1]
    ig, fg, cg, og = (workspace.narrow(1, k * h, h) for k in range(4))
    grad_gates = torch.empty(workspace.shape, dtype=workspace.dtype, device=workspace.device)
    gi, gf, gc, go = (grad_gates.narrow(1, k * h, h) for k in range(4))
    if grad_hy is not None:
        tcy = torch.tanh(cy)
        # d/d(o): grad_hy * tanh(cy) * o * (1 - o)
        torch.ops.aten.sigmoid_backward.grad_input(torch.mul(grad_hy, tcy), og, grad_input=go)
        # d/d(cy): grad_hy * o * (1 - tanh(cy)^2) + grad_cy
        gcy = torch.ops.aten.tanh_backward(torch.mul(grad_hy, og), tcy)
        if grad_cy is not None:
            gcy.add_(grad_cy)
    else:
        go.zero_()
        gcy = grad_cy
    torch.ops.aten.sigmoid_backward.grad_input(torch.mul(gcy, cg), ig, grad_input=gi)
    torch.ops.aten.sigmoid_backward.grad_input(torch.mul(gcy, cx), fg, grad_input=gf)
    torch.ops.aten.tanh_backward.grad_input(torch.mul(gcy, ig), cg, grad_input=gc)
    grad_cx = torch.mul(gcy, fg)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


# ---------------------------------------------------------------------------
# GRU
# ---------------------------------------------------------------------------

_GRU_WORKSPACE = 5


@impl("_thnn_fused_gru_cell")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    op = "_thnn_fused_gru_cell"
    _check_cell(op, input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    b, h = hx.shape
    workspace = torch.empty((b, h * _GRU_WORKSPACE), dtype=hx.dtype, device=hx.device)
    rz, ng, hx_saved, hn = (
        workspace.narrow(1, 0, 2 * h),
        workspace.narrow(1, 2 * h, h),
        workspace.narrow(1, 3 * h, h),
        workspace.narrow(1, 4 * h, h),
    )
    rg = workspace.narrow(1, 0, h)
    zg = workspace.narrow(1, h, h)
    # r, z = sigmoid(i_rz + h_rz + b_ih_rz + b_hh_rz)
    torch.add(input_gates.narrow(1, 0, 2 * h), hidden_gates.narrow(1, 0, 2 * h), out=rz)
    if input_bias is not None:
        rz.add_(input_bias.narrow(0, 0, 2 * h)).add_(hidden_bias.narrow(0, 0, 2 * h))
    rz.sigmoid_()
    # hn = h_n + b_hh_n; n = tanh(i_n + b_ih_n + r * hn)
    hn.copy_(hidden_gates.narrow(1, 2 * h, h))
    if hidden_bias is not None:
        hn.add_(hidden_bias.narrow(0, 2 * h, h))
    torch.mul(rg, hn, out=ng)
    ng.add_(input_gates.narrow(1, 2 * h, h))
    if input_bias is not None:
        ng.add_(input_bias.narrow(0, 2 * h, h))
    ng.tanh_()
    hx_saved.copy_(hx)
    # hy = n + z * (hx - n)
    hy = torch.sub(hx, ng)
    hy.mul_(zg).add_(ng)
    return hy, workspace


@impl("_thnn_fused_gru_cell_backward")
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    op = "_thnn_fused_gru_cell_backward"
    check_same_device(op, grad_hy, workspace)
    _check_dim(op, grad_hy, "grad_hy", 1, 2)
    _check_size(op, workspace, "workspace", 2, (grad_hy.shape[0], grad_hy.shape[1] * _GRU_WORKSPACE))
    _check_dtype(op, workspace, grad_hy)
    b, h = grad_hy.shape
    rg, zg, ng, hx, hn = (workspace.narrow(1, k * h, h) for k in range(_GRU_WORKSPACE))
    grad_input_gates = torch.empty((b, 3 * h), dtype=workspace.dtype, device=workspace.device)
    grad_hidden_gates = torch.empty((b, 3 * h), dtype=workspace.dtype, device=workspace.device)
    gir, giz, gin = (grad_input_gates.narrow(1, k * h, h) for k in range(3))
    ghr, ghz, ghn = (grad_hidden_gates.narrow(1, k * h, h) for k in range(3))
    # z: grad_hy * (hx - n) * z * (1 - z)
    torch.ops.aten.sigmoid_backward.grad_input(torch.mul(grad_hy, torch.sub(hx, ng)), zg, grad_input=giz)
    # n (pre-tanh): grad_hy * (1 - z) * (1 - n^2)
    torch.ops.aten.tanh_backward.grad_input(torch.mul(grad_hy, torch.rsub(zg, 1)), ng, grad_input=gin)
    # hidden n: gin * r; r: gin * hn * r * (1 - r)
    torch.mul(gin, rg, out=ghn)
    torch.ops.aten.sigmoid_backward.grad_input(torch.mul(gin, hn), rg, grad_input=gir)
    ghr.copy_(gir)
    ghz.copy_(giz)
    grad_hx = torch.mul(grad_hy, zg)
    if has_bias:
        grad_input_bias = grad_input_gates.sum(0)
        grad_hidden_bias = grad_hidden_gates.sum(0)
    else:
        grad_input_bias = grad_hidden_bias = None
    return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias
