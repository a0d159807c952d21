"""ATen's memory-overlap rules (aten/src/ATen/MemoryOverlap.cpp), once for
every Python kernel that writes into memory an input may share: copies and
fills (copy.py), the index ops' ``out=`` (index.py)."""

from __future__ import annotations

import enum

import torch

_INTERNAL_OVERLAP_MSG = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)
_OVERLAP_MSG = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory "
    "location. Please clone() the tensor before performing the operation."
)


class Overlap(enum.Enum):
    """ATen's MemOverlapStatus."""

    NO = 0
    FULL = 1
    PARTIAL = 2
    TOO_HARD = 3


def non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Whether some permutation of ``t``'s dims is contiguous: the flag ATen
    keeps on the tensor (TensorImpl::is_non_overlapping_and_dense), read
    through the TorchScript builtin of that name."""
    return torch.ops.aten.is_non_overlapping_and_dense(t)


def has_internal_overlap(t: torch.Tensor) -> bool:
    """ATen's has_internal_overlap(t) == YES: a stride of 0 on a dim of size > 1."""
    return any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride()))


def assert_no_internal_overlap(t: torch.Tensor) -> None:
    """ATen's assert_no_internal_overlap."""
    if has_internal_overlap(t):
        raise RuntimeError(_INTERNAL_OVERLAP_MSG)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are views of one (non-empty) storage."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def overlap_status(a: torch.Tensor, b: torch.Tensor) -> Overlap:
    """ATen's get_overlap_status(a, b): decided only for two non-overlapping
    and dense tensors (TOO_HARD otherwise), whose memory is then one range each."""
    if a is b:
        return Overlap.FULL
    if a.numel() == 0 or b.numel() == 0:
        return Overlap.NO
    if not (non_overlapping_and_dense(a) and non_overlapping_and_dense(b)):
        return Overlap.TOO_HARD
    if not same_storage(a, b):
        return Overlap.NO
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return Overlap.FULL if a.stride() == b.stride() else Overlap.PARTIAL
    return Overlap.PARTIAL if a0 < b1 and b0 < a1 else Overlap.NO


def assert_no_partial_overlap(a: torch.Tensor, b: torch.Tensor) -> None:
    """ATen's assert_no_partial_overlap."""
    if overlap_status(a, b) is Overlap.PARTIAL:
        raise RuntimeError(_OVERLAP_MSG)


def assert_no_overlap(name: str, out: torch.Tensor, *inputs) -> None:
    """ATen's assert_no_overlap(out, t) for each tensor of ``inputs``: raises
    on a partial or full overlap (a "too hard" one is left to the caller,
    which computes it safely, see ``overlaps``)."""
    for t in inputs:
        if isinstance(t, torch.Tensor) and overlap_status(out, t) in (Overlap.PARTIAL, Overlap.FULL):
            raise RuntimeError(f"{_OVERLAP_MSG} (foo {name})")


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The byte range ``t``'s elements lie in."""
    lo = hi = 0
    for n, st in zip(t.shape, t.stride()):
        span = (n - 1) * st
        if span < 0:
            lo += span
        else:
            hi += span
    es = t.element_size()
    p = t.data_ptr()
    return (p + lo * es, p + (hi + 1) * es)


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' memory ranges intersect: conservative (strided
    views may interleave without sharing an element), for deciding whether a
    kernel must write into a temporary first."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1
