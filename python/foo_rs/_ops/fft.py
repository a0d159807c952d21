"""torch.fft on foo: the three ATen FFT primitives (``_fft_c2c``,
``_fft_r2c``, ``_fft_c2r``, and their ``out=`` forms) every torch.fft
function decomposes into, computed in Rust (rustfft / realfft)."""

from __future__ import annotations

import math

import torch

from ._registry import _C, desc, impl
from .copy import copy_into
from .linalg import resize_out


def _dims(self: torch.Tensor, dim) -> list[int]:
    nd = max(self.dim(), 1)
    return [d % nd for d in dim]


def _scale(normalization: int, signal: list[int]) -> float:
    # ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n.
    n = math.prod(signal)
    if normalization == 1:
        return 1.0 / math.sqrt(n) if n else 1.0
    if normalization == 2:
        return 1.0 / n if n else 1.0
    return 1.0


def _by_stride(t: torch.Tensor, dims: list[int]) -> list[int]:
    return sorted(dims, key=lambda d: -t.stride(d))


def _empty_like_cpu(inp: torch.Tensor, shape, dtype, dims: list[int], exclude_last: bool) -> torch.Tensor:
    """The output CPU's FFT allocates: batch dims outermost (by the input's
    strides), then the transformed dims (by stride; with ``exclude_last`` the
    last one stays innermost), contiguous in that order."""
    tdims = set(dims)
    batch = _by_stride(inp, [d for d in range(inp.dim()) if d not in tdims])
    if exclude_last:
        order = batch + _by_stride(inp, dims[:-1]) + [dims[-1]]
    else:
        order = batch + _by_stride(inp, dims)
    out = torch.empty([shape[d] for d in order], dtype=dtype, device=inp.device)
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return out.permute(inv)


def _plain(t: torch.Tensor) -> torch.Tensor:
    # The Rust kernels read raw memory: resolve lazy conjugate / negative bits.
    return t.resolve_conj().resolve_neg() if (t.is_conj() or t.is_neg()) else t


def _complex_of(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.complex128 else torch.float32


def _check_float(self: torch.Tensor, op: str, want_complex: bool) -> None:
    ok = (torch.complex64, torch.complex128) if want_complex else (torch.float32, torch.float64)
    if self.dtype not in ok:
        if want_complex != self.is_complex():
            kind = "complex" if want_complex else "real"
            raise RuntimeError(f"{op} expects a {kind} input tensor, but got {self.dtype} (foo)")
        raise NotImplementedError(f"foo FFT doesn't support tensors of type: {self.dtype}")


@impl("_fft_c2c", complex_ok=True)
def fft_c2c(self, dim, normalization, forward):
    _check_float(self, "_fft_c2c", True)
    dims = _dims(self, dim)
    out = _empty_like_cpu(self, self.shape, self.dtype, dims, False)
    if not dims:
        return copy_into(out, self)
    scale = _scale(normalization, [self.shape[d] for d in dims])
    _C.fft_c2c(desc(out), desc(_plain(self)), dims, bool(forward), scale)
    return out


@impl("_fft_r2c", complex_ok=True)
def fft_r2c(self, dim, normalization, onesided):
    _check_float(self, "_fft_r2c", False)
    dims = _dims(self, dim)
    shape = list(self.shape)
    if onesided:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    out = _empty_like_cpu(self, shape, _complex_of(self.dtype), dims, True)
    scale = _scale(normalization, [self.shape[d] for d in dims])
    _C.fft_r2c(desc(out), desc(_plain(self)), dims, bool(onesided), scale)
    return out


@impl("_fft_c2r", complex_ok=True)
def fft_c2r(self, dim, normalization, last_dim_size):
    _check_float(self, "_fft_c2r", True)
    dims = _dims(self, dim)
    if last_dim_size < 1:
        raise RuntimeError(f"Invalid number of data points ({last_dim_size}) specified")
    shape = list(self.shape)
    shape[dims[-1]] = last_dim_size
    out = _empty_like_cpu(self, shape, _real_of(self.dtype), dims, True)
    scale = _scale(normalization, [shape[d] for d in dims])
    _C.fft_c2r(desc(out), desc(_plain(self)), dims, scale)
    return out


def _into(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    # CPU's out= forms: compute, resize_output, copy.
    resize_out(out, result.shape)
    return copy_into(out, result)


@impl("_fft_c2c.out", complex_ok=True)
def fft_c2c_out(self, dim, normalization, forward, *, out):
    return _into(out, fft_c2c(self, dim, normalization, forward))


@impl("_fft_r2c.out", complex_ok=True)
def fft_r2c_out(self, dim, normalization, onesided, *, out):
    return _into(out, fft_r2c(self, dim, normalization, onesided))


@impl("_fft_c2r.out", complex_ok=True)
def fft_c2r_out(self, dim, normalization, last_dim_size, *, out):
    return _into(out, fft_c2r(self, dim, normalization, last_dim_size))
