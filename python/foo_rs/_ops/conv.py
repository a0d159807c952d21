"""Convolution: ``convolution_overrideable`` and ``convolution_backward_overrideable``.

ATen sends every convolution of a PrivateUse1 tensor (nn.Conv1d/2d/3d,
nn.ConvTranspose*d, F.conv*) to these two ops once it has checked the shapes
(``_convolution``'s ``check_shape_forward``), resolved ``padding='same'``,
and viewed 1-d convolutions as 2-d ones. Their default kernels raise, and the
CPU fallback cannot serve them (the CPU has no kernel either).

With the native path on (the default), the C++ kernels in rust/glue/native.cpp
take the common case -- 1-d and 2-d float32/float64 convolutions, transposed
or not, and their gradients -- straight from the dispatcher to the same Rust
entry points (rust/src/kernels/entry.rs); these Python kernels are then the
slow path for everything else (3-d, integers, half types, bad arguments).

1-d and 2-d float convolutions (float16/bfloat16 upcast once to float32)
run in Rust, one call per op and direction (``_C.conv2d_forward`` /
``_C.conv2d_backward``, rust/src/kernels/conv.rs: blocked implicit GEMM over
bounded im2col tiles, plain GEMMs for 1x1 stride-1 convolutions, a direct
loop for depthwise ones); a 1-d convolution is a 2-d one of height 1, a
transposed convolution's forward is a convolution's input gradient. Inputs
are read as contiguous NCHW (a channels-last input is copied once).

3-d and integer convolutions are composed here from foo's native kernels:

* forward: im2col -- the input is copied once into a zero-padded buffer, a
  window view of that buffer (``as_strided``: groups x channels x kernel
  offsets x batch x output positions) is copied once into a contiguous
  column matrix, and one batched gemm (batch = groups) multiplies it by the
  weight viewed as ``[groups, out_channels/groups, in_channels/groups * k]``;
  the product is laid out as NC(D)HW and the bias added.
* gradient w.r.t. the input (and the transposed convolution's forward):
  one batched gemm of the transposed weight with the output gradient gives
  the column gradient, which col2im scatters back by looping over the kernel
  offsets: for one offset the windows do not overlap, so each is one strided
  ``add_`` into the padded buffer.
* gradient w.r.t. the weight: one batched gemm of the output gradient with
  the transposed columns; w.r.t. the bias: a sum.

The batch is processed in chunks so that the column matrix stays below
``_COLS_BUDGET`` elements. Outputs are contiguous NC(D)HW, or channels-last
when the input or the weight is channels-last, as on the CPU.
"""

from __future__ import annotations

import itertools
import math

import torch

from .. import _C
from ._registry import check_same_device, desc, impl
from .linalg import SCALAR_NAME

__all__ = ["convolution_overrideable", "convolution_backward_overrideable"]

#: Largest column matrix (in elements) built at once; the batch is chunked to fit.
_COLS_BUDGET = 1 << 24

#: Computed in float32 and rounded once at the end, as CPU does: col2im and the
#: bias would otherwise round every partial sum.
_REDUCED = (torch.float16, torch.bfloat16)


def _upcast(*tensors):
    return [t.float() if t is not None and t.dtype in _REDUCED else t for t in tensors]


def _downcast(t, dtype):
    return t if t is None or t.dtype == dtype else t.to(dtype)


def _ints(v, n: int, name: str) -> list[int]:
    v = [int(x) for x in v]
    if len(v) == 1 and n > 1:
        v = v * n
    if len(v) != n:
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of {n} values to match the "
            f"convolution dimensions, but got {name}={v}"
        )
    return v


def _is_channels_last(t: torch.Tensor) -> bool:
    """``suggest_memory_format() == ChannelsLast(3d)`` for 4-d / 5-d tensors."""
    if t.dim() == 4:
        fmt = torch.channels_last
    elif t.dim() == 5:
        fmt = torch.channels_last_3d
    else:
        return False
    return not t.is_contiguous() and t.is_contiguous(memory_format=fmt)


def _to_format(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``t`` laid out as CPU's ``empty(..., memory_format=channels_last)`` lays it out: ``contiguous`` is not
    enough, it keeps a tensor whose size-1 dims make it count as channels-last already (a 1x1 or a depthwise
    weight) with its NCHW strides."""
    if not channels_last or t.dim() not in (4, 5):
        return t
    n, c, *spatial = t.shape
    strides, acc = [], c
    for size in reversed(spatial):
        strides.insert(0, acc)
        acc *= size
    strides = [acc, 1, *strides]
    if list(t.stride()) == strides or t.numel() <= 1:
        return t
    return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def _chunk(n: int, per_sample: int) -> int:
    return max(1, min(n, _COLS_BUDGET // max(1, per_sample)))


def _interior(buf: torch.Tensor, padding: list[int], size) -> torch.Tensor:
    """The un-padded region of a padded (N, C, *spatial) buffer."""
    for i, (p, s) in enumerate(zip(padding, size)):
        buf = buf.narrow(2 + i, p, s)
    return buf


def _padded(x: torch.Tensor, padding: list[int]) -> torch.Tensor:
    """A contiguous copy of x (N, C, *S) with `padding` zeros on both sides of
    each spatial dim (x itself when it is contiguous and there is no padding)."""
    if not any(padding):
        return x.contiguous()
    spatial = x.shape[2:]
    buf = torch.zeros(
        (x.shape[0], x.shape[1], *[s + 2 * p for s, p in zip(spatial, padding)]), dtype=x.dtype, device=x.device
    )
    _interior(buf, padding, spatial).copy_(x)
    return buf


def _windows(buf: torch.Tensor, groups: int, ksize, stride, dilation, out_size, koff=None) -> torch.Tensor:
    """The window view of a contiguous padded buffer (N, C, *Sp):
    (G, C/G, *K, N, *O) -- or (G, C/G, N, *O) for a single kernel offset `koff`."""
    n, c = buf.shape[:2]
    st = buf.stride()
    sp = st[2:]
    cg = c // groups
    base = buf.storage_offset()
    pos_size = list(out_size)
    pos_stride = [s * t for s, t in zip(stride, sp)]
    if koff is None:
        size = [groups, cg, *ksize, n, *pos_size]
        strides = [cg * st[1], st[1], *[d * t for d, t in zip(dilation, sp)], st[0], *pos_stride]
    else:
        base += sum(k * d * t for k, d, t in zip(koff, dilation, sp))
        size = [groups, cg, n, *pos_size]
        strides = [cg * st[1], st[1], st[0], *pos_stride]
    return buf.as_strided(size, strides, base)


def _im2col(x: torch.Tensor, groups, ksize, stride, padding, dilation, out_size) -> torch.Tensor:
    """Columns of x (N, C, *S): a contiguous (G, C/G * prod(K), N * prod(O))."""
    n, c = x.shape[:2]
    buf = _padded(x, padding)
    view = _windows(buf, groups, ksize, stride, dilation, out_size)
    shape = (groups, (c // groups) * math.prod(ksize), n * math.prod(out_size))
    if view.is_contiguous():  # e.g. a 1x1 convolution of a single sample
        return view.view(shape)
    cols = torch.empty(view.shape, dtype=x.dtype, device=x.device)
    cols.copy_(view)
    return cols.view(shape)


def _grad_rows(g: torch.Tensor, groups: int) -> torch.Tensor:
    """An output gradient (n, OC, *O) as a contiguous (G, OC/G, n * prod(O))."""
    n, oc = g.shape[:2]
    p = math.prod(g.shape[2:])
    t = g.reshape(n, groups, oc // groups, p).permute(1, 2, 0, 3)
    if n == 1:
        return t.reshape(groups, oc // groups, p)
    out = torch.empty(t.shape, dtype=g.dtype, device=g.device)
    out.copy_(t)
    return out.view(groups, oc // groups, n * p)


def _out_size(in_size, ksize, stride, padding, dilation) -> list[int]:
    return [
        (s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in zip(in_size, ksize, stride, padding, dilation)
    ]


def _conv_forward(x, weight, stride, padding, dilation, groups, out_size=None) -> torch.Tensor:
    """Cross-correlation of x (N, C, *S) with weight (OC, C/G, *K): (N, OC, *O)."""
    n = x.shape[0]
    oc = weight.shape[0]
    ksize = list(weight.shape[2:])
    if out_size is None:
        out_size = _out_size(x.shape[2:], ksize, stride, padding, dilation)
    out = torch.empty((n, oc, *out_size), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    ck = weight.shape[1] * math.prod(ksize)
    if ck == 0:
        return out.zero_()
    ocg = oc // groups
    p = math.prod(out_size)
    wm = weight.reshape(groups, ocg, ck)
    nc = _chunk(n, groups * ck * p)
    for n0 in range(0, n, nc):
        m = min(nc, n - n0)
        cols = _im2col(x.narrow(0, n0, m), groups, ksize, stride, padding, dilation, out_size)
        dst = out.narrow(0, n0, m)
        if m == 1:
            torch.bmm(wm, cols, out=dst.view(groups, ocg, p))
        else:
            res = torch.bmm(wm, cols).view(groups, ocg, m, p)
            dst.view(m, groups, ocg, p).copy_(res.permute(2, 0, 1, 3))
    return out


def _conv_grads(x, grad, weight, in_size, stride, padding, dilation, groups, need_input, need_weight):
    """Gradients of the cross-correlation ``grad`` = conv(x, weight) w.r.t. its
    input (N, C, *in_size) -- col2im -- and w.r.t. the weight; ``x`` is only
    read for the latter. Either is None when not asked for."""
    n, oc = grad.shape[:2]
    out_size = list(grad.shape[2:])
    ksize = list(weight.shape[2:])
    cg = weight.shape[1]
    c = cg * groups
    ocg = oc // groups
    kp = math.prod(ksize)
    ck = cg * kp
    p = math.prod(out_size)
    dtype, device = grad.dtype, grad.device
    gi = torch.empty((n, c, *in_size), dtype=dtype, device=device) if need_input else None
    gw = torch.zeros((groups, ocg, ck), dtype=dtype, device=device) if need_weight else None
    if n == 0 or p == 0 or ck == 0 or oc == 0:
        if gi is not None:
            gi.zero_()
        return gi, (gw.view(weight.shape) if gw is not None else None)
    if need_input:
        wt = weight.reshape(groups, ocg, ck).transpose(1, 2)  # (G, CKg, OCg)
        padded_size = [s + 2 * q for s, q in zip(in_size, padding)]
        koffs = list(itertools.product(*[range(k) for k in ksize]))
    nc = _chunk(n, groups * ck * p)
    for n0 in range(0, n, nc):
        m = min(nc, n - n0)
        rows = _grad_rows(grad.narrow(0, n0, m), groups)  # (G, OCg, m*P)
        if need_weight:
            cols = _im2col(x.narrow(0, n0, m), groups, ksize, stride, padding, dilation, out_size)
            gw.add_(torch.bmm(rows, cols.transpose(1, 2)))
        if need_input:
            colg = torch.bmm(wt, rows).view(groups, cg, kp, m, *out_size)
            dst = gi.narrow(0, n0, m)
            if any(padding):
                buf = torch.zeros((m, c, *padded_size), dtype=dtype, device=device)
            else:
                buf = dst.zero_()
            for i, koff in enumerate(koffs):
                # For one kernel offset the windows do not overlap.
                _windows(buf, groups, ksize, stride, dilation, out_size, koff).add_(colg[:, :, i])
            if any(padding):
                dst.copy_(_interior(buf, padding, in_size))
    return gi, (gw.view(weight.shape) if gw is not None else None)


def _transposed_out_size(in_size, ksize, stride, padding, dilation, output_padding) -> list[int]:
    return [
        (s - 1) * st - 2 * p + d * (k - 1) + op + 1
        for s, k, st, p, d, op in zip(in_size, ksize, stride, padding, dilation, output_padding)
    ]


def _check(name, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    check_same_device(name, input, weight, bias)
    if weight.dim() < 3 or input.dim() != weight.dim():
        raise RuntimeError(
            f"{name}: expected a {weight.dim()}-dimensional input for a {weight.dim()}-dimensional weight "
            f"{list(weight.shape)} (batch, channels, spatial dims) on foo, but got an input of size "
            f"{list(input.shape)}"
        )
    nd = weight.dim() - 2
    stride = _ints(stride, nd, "stride")
    padding = _ints(padding, nd, "padding")
    dilation = _ints(dilation, nd, "dilation")
    output_padding = _ints(output_padding, nd, "output_padding") if transposed else [0] * nd
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if any(q < 0 for q in padding):
        raise RuntimeError("negative padding is not supported")
    if any(q < 0 for q in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(q >= s and q >= d for q, s, d in zip(output_padding, stride, dilation)):
        dims = ["depth", "height", "width"][3 - nd :] if nd <= 3 else [str(i) for i in range(nd)]
        got = " ".join(
            f"{what}_{dim}: {v}"
            for what, vals in (("output_padding", output_padding), ("stride", stride), ("dilation", dilation))
            for dim, v in zip(dims, vals)
        )
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got {got} (on foo)")
    # CPU's check_input_same_type_as_parameters, with foo's type names.
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.type()}) and weight type ({weight.type()}) should be the same")
    if bias is not None and bias.dtype != input.dtype:
        raise RuntimeError(f"Input type ({input.type()}) and bias type ({bias.type()}) should be the same")
    if input.dtype not in (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
    ):
        raise RuntimeError(f"\"{name}\" not implemented for '{SCALAR_NAME.get(input.dtype, input.dtype)}' on foo")
    c = input.shape[1]
    if transposed:
        if weight.shape[0] != c:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(input.shape)} to have "
                f"{weight.shape[0]} channels, but got {c} channels instead"
            )
        if c % groups:
            raise RuntimeError(f"{name}: input channels ({c}) are not divisible by groups ({groups})")
        out_ch = weight.shape[1] * groups
    else:
        if weight.shape[0] % groups:
            raise RuntimeError(
                f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got "
                f"weight of size {list(weight.shape)} instead"
            )
        if weight.shape[1] * groups != c:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} to "
                f"have {weight.shape[1] * groups} channels, but got {c} channels instead"
            )
        out_ch = weight.shape[0]
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != out_ch):
        raise RuntimeError(
            f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with {out_ch} elements, "
            f"but got bias of size {list(bias.shape)} instead"
        )
    ksize = list(weight.shape[2:])
    if transposed:
        out_size = _transposed_out_size(input.shape[2:], ksize, stride, padding, dilation, output_padding)
    else:
        out_size = _out_size(input.shape[2:], ksize, stride, padding, dilation)
    if any(o <= 0 for o in out_size) and input.shape[0] != 0 or any(o < 0 for o in out_size):
        raise RuntimeError(
            f"{name}: calculated output size {out_size} is too small (input {list(input.shape)}, kernel size "
            f"{ksize}, stride {stride}, padding {padding}, dilation {dilation})"
        )
    return stride, padding, dilation, output_padding, groups, out_size


#: Dtypes the Rust kernels compute in (half types are upcast to float32 first).
_NATIVE = (torch.float32, torch.float64)


def _native(x: torch.Tensor, nd: int) -> bool:
    """Whether the Rust 2-d kernels (rust/src/kernels/conv.rs) serve this
    convolution: 1-d and 2-d, float; 3-d and integer ones take the composition above."""
    return nd in (1, 2) and x.dtype in _NATIVE


def _as_2d(t, nd):
    """A 1-d convolution's (N, C, L) tensor as (N, C, 1, L); 2-d ones as they are; contiguous NCHW."""
    return (t.unsqueeze(2) if nd == 1 else t).contiguous()


def _params(nd, stride, padding, dilation):
    if nd == 1:
        return (1, int(stride[0])), (0, int(padding[0])), (1, int(dilation[0]))
    return tuple(map(int, stride)), tuple(map(int, padding)), tuple(map(int, dilation))


def _empty_2d(shape, nd, ref):
    shape = [int(v) for v in shape]
    if nd == 1:
        shape.insert(2, 1)
    return torch.empty(shape, dtype=ref.dtype, device=ref.device)


def _from_2d(t, nd):
    return None if t is None else (t.squeeze(2) if nd == 1 else t)


def _opt_desc(t):
    return None if t is None else desc(t)


def _native_forward(x, w, b, stride, padding, dilation, groups, out_size):
    """conv(x, w) + b in one Rust call."""
    nd = x.dim() - 2
    s, p, d = _params(nd, stride, padding, dilation)
    out = _empty_2d((x.shape[0], w.shape[0], *out_size), nd, x)
    # The contiguous copies must outlive the call: a descriptor holds a bare pointer.
    x2, w2, b2 = _as_2d(x, nd), _as_2d(w, nd), None if b is None else b.contiguous()
    _C.conv2d_forward(desc(out), desc(x2), desc(w2), _opt_desc(b2), s, p, d, groups)
    return _from_2d(out, nd)


def _native_backward(grad, x, w, in_shape, stride, padding, dilation, groups, need_input, need_weight, need_bias):
    """Gradients of grad = conv(x, w) in one Rust call (x is only read for the weight's)."""
    nd = grad.dim() - 2
    s, p, d = _params(nd, stride, padding, dilation)
    x2 = _as_2d(x, nd) if need_weight else None
    gi = _empty_2d(in_shape, nd, grad) if need_input else None
    gw = _empty_2d(w.shape, nd, grad) if need_weight else None
    gb = torch.empty(w.shape[0], dtype=grad.dtype, device=grad.device) if need_bias else None
    size2 = [int(v) for v in in_shape]
    if nd == 1:
        size2.insert(2, 1)
    # The contiguous copies must outlive the call: a descriptor holds a bare pointer.
    g2, w2 = _as_2d(grad, nd), _as_2d(w, nd)
    _C.conv2d_backward(
        desc(g2), _opt_desc(x2), desc(w2), _opt_desc(gi), _opt_desc(gw), _opt_desc(gb), size2, s, p, d, groups
    )
    return _from_2d(gi, nd), _from_2d(gw, nd), gb


@impl("convolution_overrideable")
def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    stride, padding, dilation, output_padding, groups, out_size = _check(
        "convolution_overrideable", input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    channels_last = _is_channels_last(input) or _is_channels_last(weight)
    dtype = input.dtype
    input, weight, bias = _upcast(input, weight, bias)
    if _native(input, input.dim() - 2):
        if transposed:
            out_shape = [input.shape[0], weight.shape[1] * groups, *out_size]
            out, _, _ = _native_backward(
                input, None, weight, out_shape, stride, padding, dilation, groups, True, False, False
            )
        else:
            out = _native_forward(input, weight, bias, stride, padding, dilation, groups, out_size)
            bias = None
    elif transposed:
        # The gradient of a convolution (weight [C_in, C_out/G, *K]) w.r.t. its input.
        out, _ = _conv_grads(None, input, weight, out_size, stride, padding, dilation, groups, True, False)
    else:
        out = _conv_forward(input, weight, stride, padding, dilation, groups, out_size)
    if bias is not None and out.numel():
        out.add_(bias.view(1, -1, *([1] * (out.dim() - 2))))
    return _to_format(_downcast(out, dtype), channels_last)


@impl("convolution_backward_overrideable")
def convolution_backward_overrideable(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    stride, padding, dilation, output_padding, groups, out_size = _check(
        "convolution_backward_overrideable",
        input,
        weight,
        None,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )
    check_same_device("convolution_backward_overrideable", grad_output, input)
    expected = [input.shape[0], weight.shape[1] * groups if transposed else weight.shape[0], *out_size]
    if list(grad_output.shape) != expected:
        raise RuntimeError(
            f"convolution_backward_overrideable: expected grad_output of size {expected}, but got "
            f"{list(grad_output.shape)}"
        )
    if grad_output.dtype != input.dtype:
        raise RuntimeError(
            f"convolution_backward_overrideable: expected grad_output of dtype "
            f"{SCALAR_NAME.get(input.dtype, input.dtype)}, but got {SCALAR_NAME.get(grad_output.dtype)}"
        )
    need_input, need_weight, need_bias = (bool(m) for m in output_mask)
    in_size = list(input.shape[2:])
    channels_last = _is_channels_last(input) or _is_channels_last(weight)
    dtype = input.dtype
    grad_output, input, weight = _upcast(grad_output, input, weight)
    gi = gw = gb = None
    native = _native(input, input.dim() - 2)
    if native and not transposed:
        gi, gw, gb = _native_backward(
            grad_output,
            input,
            weight,
            input.shape,
            stride,
            padding,
            dilation,
            groups,
            need_input,
            need_weight,
            need_bias,
        )
    elif native:
        # input -> grad_output is the input-gradient of conv(grad_output, weight).
        if need_input:
            gi = _native_forward(grad_output, weight, None, stride, padding, dilation, groups, in_size)
        if need_weight:
            _, gw, _ = _native_backward(
                input, grad_output, weight, grad_output.shape, stride, padding, dilation, groups, False, True, False
            )
    elif transposed:
        if need_input:
            gi = _conv_forward(grad_output, weight, stride, padding, dilation, groups, in_size)
        if need_weight:
            _, gw = _conv_grads(grad_output, input, weight, None, stride, padding, dilation, groups, False, True)
    else:
        gi, gw = _conv_grads(
            input, grad_output, weight, in_size, stride, padding, dilation, groups, need_input, need_weight
        )
    if need_bias and gb is None:
        gb = grad_output.sum([0, *range(2, grad_output.dim())])
    gi = _downcast(gi, dtype)
    gw = _downcast(gw, dtype)
    gb = _downcast(gb, dtype)
    if gi is not None:
        gi = _to_format(gi, channels_last)
    if gw is not None:
        gw = _to_format(gw, channels_last)
    return gi, gw, gb
