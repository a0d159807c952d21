"""Complex arithmetic on foo (add, sub, mul, neg and their in-place and out=
forms), computed by foo's real Rust kernels on the real views of complex
tensors (``view_as_real``: a trailing dimension of 2). The real kernels of
these ops hand complex calls here (``_registry.complex_kernel``)."""

from __future__ import annotations

import torch
from torch._prims_common import canonicalize_dim

from ._registry import complex_kernel
from .copy import copy_into
from .linalg import resize_out


def _operand(x, dtype: torch.dtype, device) -> torch.Tensor:
    """``x`` as a foo tensor of complex ``dtype`` with no conj/neg bit."""
    if not isinstance(x, torch.Tensor):
        x = torch.tensor(x, dtype=dtype)
    if x.device.type != "foo":
        x = x.to(device)
    if x.dtype != dtype or x.is_conj() or x.is_neg():
        y = torch.empty(x.shape, dtype=dtype, device=device)
        copy_into(y, x)
        x = y
    return x


def _parts(t: torch.Tensor):
    r = torch.view_as_real(t)
    return r[..., 0], r[..., 1]


def _result_dtype(self, other) -> torch.dtype:
    return torch.result_type(self, other)


def _device(*xs):
    for x in xs:
        if isinstance(x, torch.Tensor) and x.device.type == "foo":
            return x.device
    return torch.device("foo", torch.foo.current_device())


def _binary(kind: str, self, other, alpha=1) -> torch.Tensor:
    dtype = _result_dtype(self, other)
    if alpha != 1:
        dtype = torch.promote_types(dtype, torch.result_type(torch.tensor(0, dtype=dtype), alpha))
    dev = _device(self, other)
    a, b = _operand(self, dtype, dev), _operand(other, dtype, dev)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    out = torch.empty(shape, dtype=dtype, device=dev)
    o = torch.view_as_real(out)
    if kind in ("add", "sub"):
        if alpha != 1:
            b = _binary("mul", b, alpha)
        fn = torch.add if kind == "add" else torch.sub
        fn(torch.view_as_real(a), torch.view_as_real(b), out=o)
        return out
    # (ar + ai j)(br + bi j) = (ar br - ai bi) + (ar bi + ai br) j
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    torch.sub(ar * br, ai * bi, out=o[..., 0])
    torch.add(ar * bi, ai * br, out=o[..., 1])
    return out


def _into(out: torch.Tensor, result: torch.Tensor, op: str) -> torch.Tensor:
    if not out.is_complex():
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {out.dtype}")
    resize_out(out, result.shape)
    return copy_into(out, result)


def _inplace(self: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if not self.is_complex():
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {self.dtype}")
    if result.shape != self.shape:
        raise RuntimeError(
            f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
        )
    return copy_into(self, result)


for _kind in ("add", "sub"):

    def _f(self, other, *, alpha=1, _k=_kind):
        return _binary(_k, self, other, alpha)

    def _i(self, other, *, alpha=1, _k=_kind):
        return _inplace(self, _binary(_k, self, other, alpha))

    def _o(self, other, *, alpha=1, out, _k=_kind):
        return _into(out, _binary(_k, self, other, alpha), _k)

    complex_kernel(f"{_kind}.Tensor")(_f)
    complex_kernel(f"{_kind}_.Tensor")(_i)
    complex_kernel(f"{_kind}.out")(_o)


@complex_kernel("mul.Tensor")
def mul(self, other):
    return _binary("mul", self, other)


@complex_kernel("mul_.Tensor")
def mul_(self, other):
    return _inplace(self, _binary("mul", self, other))


@complex_kernel("mul.out")
def mul_out(self, other, *, out):
    return _into(out, _binary("mul", self, other), "mul")


def _neg(self) -> torch.Tensor:
    a = _operand(self, self.dtype, self.device)
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    torch.neg(torch.view_as_real(a), out=torch.view_as_real(out))
    return out


complex_kernel("neg")(_neg)
complex_kernel("neg_")(lambda self: _inplace(self, _neg(self)))
complex_kernel("neg.out")(lambda self, *, out: _into(out, _neg(self), "neg"))


@complex_kernel("sum.IntList_out")
def sum_out(self, dim, keepdim=False, *, dtype=None, out):
    dtype = dtype or self.dtype
    if not dtype.is_complex:
        raise RuntimeError(f"sum: a complex input can't be summed to {dtype} (foo)")
    a = _operand(self, dtype, self.device)
    # Checked and wrapped against the complex rank (a 0-d tensor takes dim 0
    # or -1 and stays itself); the real view's trailing 2 is never reduced.
    dims = sorted({canonicalize_dim(a.dim(), d) for d in dim}) if dim else list(range(a.dim()))
    dims = [d for d in dims if d < a.dim()]
    r = torch.view_as_real(a)
    if dims:
        r = torch.sum(r, dim=dims, keepdim=keepdim)
    result = torch.view_as_complex(r.contiguous())
    return _into(out, result, "sum")
