"""Copies across and within the device, fills, and reading one element."""

from __future__ import annotations

import warnings

import torch

from ._overlap import assert_no_internal_overlap, assert_no_partial_overlap, same_storage
from ._registry import _C, desc, impl


def _is_host_or_foo(t: torch.Tensor) -> bool:
    return t.device.type in ("cpu", "foo")


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """dst[...] = src (broadcast, dtype converted), both in host-addressable memory."""
    if not (_is_host_or_foo(dst) and _is_host_or_foo(src)):
        raise RuntimeError(f"foo: copy between {src.device} and {dst.device} is not supported")
    if dst.numel() == 0:
        # Still check that the shapes broadcast, as CPU does.
        torch.broadcast_shapes(src.shape, dst.shape)
        return dst
    assert_no_internal_overlap(dst)
    if same_storage(dst, src):
        if (
            dst.data_ptr() == src.data_ptr()
            and dst.shape == src.shape
            and dst.stride() == src.stride()
            and dst.dtype == src.dtype
        ):
            return dst
        assert_no_partial_overlap(dst, src)
        # Views of one storage whose overlap ATen cannot decide ("too hard"):
        # read everything before writing anything.
        tmp = torch.empty(src.shape, dtype=src.dtype, device=src.device)
        _C.copy_(desc(tmp), desc(src))
        if src.is_conj() or src.is_neg():  # the snapshot holds src's raw values
            tmp = tmp.conj() if src.is_conj() else tmp
            tmp = torch._neg_view(tmp) if src.is_neg() else tmp
        src = tmp
    if src.is_complex() and not dst.is_complex():
        warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)
    # torch's lazy conjugate and negative bits: the raw values are copied, then
    # the difference between the two tensors' bits is applied.
    conj = src.is_conj() != dst.is_conj() and dst.is_complex() and src.is_complex()
    neg = src.is_neg() != dst.is_neg()
    if src.is_conj() and not dst.is_complex():
        conj = False  # the real part of a conjugate is the real part
    _C.copy_(desc(dst), desc(src), conj, neg)
    return dst


@impl("copy_", complex_ok=True)
def copy_(self, src, non_blocking=False):
    return copy_into(self, src)


@impl("_copy_from", complex_ok=True)
def _copy_from(self, dst, non_blocking=False):
    return copy_into(dst, self)


@impl("_copy_from_and_resize", complex_ok=True)
def _copy_from_and_resize(self, dst):
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_into(dst, self)


@impl("_local_scalar_dense", complex_ok=True)
def _local_scalar_dense(self):
    if self.numel() != 1:
        raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    v = _C.local_scalar(desc(self))
    if self.is_conj():
        v = v.conjugate()
    return -v if self.is_neg() else v


@impl("fill_.Scalar", complex_ok=True)
def fill_scalar(self, value):
    assert_no_internal_overlap(self)
    if isinstance(value, complex):
        if not self.is_complex():
            raise RuntimeError(f"value cannot be converted to type {self.dtype} without overflow")
    elif self.is_complex():
        value = complex(value)
    if self.is_complex() and self.is_conj():
        value = value.conjugate()  # the memory holds the conjugate of what self shows
    # A value the dtype cannot hold was refused before this kernel (native.cpp's
    # check_fill_value: ATen's Scalar::to, as CPU's fill_).
    _C.fill_(desc(self), value)
    return self


@impl("fill_.Tensor", complex_ok=True)
def fill_tensor(self, value):
    if value.dim() != 0:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
        )
    # CPU converts a tensor value as a cast, not as fill_.Scalar's checked
    # conversion: NaN into int64 is INT64_MIN, 2**40 into int8 wraps, 1e30
    # into float16 is inf. copy_ is that cast (and raises CPU's error for a
    # self whose elements share memory).
    return self.copy_(value)


@impl("zero_", complex_ok=True)
def zero_(self):
    _C.fill_(desc(self), 0)
    return self


@impl("conj_physical.out", "_conj_physical.out", complex_ok=True)
def conj_physical_out(self, *, out):
    if out.shape != self.shape:
        out.resize_(self.shape)
    if out.is_complex() != self.is_complex() or out.dtype != self.dtype:
        raise RuntimeError(f"conj_physical: expected out of dtype {self.dtype}, got {out.dtype} (foo)")
    copy_into(out, self.conj() if self.is_complex() else self)
    return out


@impl("conj_physical_", complex_ok=True)
def conj_physical_(self):
    if self.is_complex():
        _C.copy_(desc(self), desc(self), True)
    return self
