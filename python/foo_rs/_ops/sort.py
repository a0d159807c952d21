"""Sorting and the selections built on it: sort (stable), topk, kthvalue,
median and nanmedian. One Rust kernel (``_C.sort``, rust/src/kernels/sort.rs)
writes the first k elements of every line along a dim, in order, with their
positions; each op here is its shape and argument rules around that call.
topk and kthvalue run CPU's own selection algorithms (``_C.topk``,
``_C.kthvalue``, rust/src/kernels/select.rs), so that among equal elements
they report the positions CPU reports.
argsort, msort and the non-stable sort overloads are ATen composites over
these."""

from __future__ import annotations

import torch

from ._registry import _C, check_same_device, desc, impl
from .linalg import check_out
from .reduce import wrap_dim


def _sorted_prefix(self, d: int, k: int, descending: bool, values, indices, keep_shape) -> None:
    """The first ``k`` elements of each line of ``self`` along ``d`` in order,
    written with ``keep_shape`` (the output shape with ``k`` along ``d``)."""
    check_out(values, keep_shape, self.dtype)
    check_out(indices, keep_shape, torch.int64)
    _C.sort(desc(values), desc(indices), desc(self), d, k, descending)


def _line_len(self, d: int) -> int:
    return self.shape[d] if self.dim() else 1


def _with(shape, d: int, k: int) -> tuple:
    s = list(shape)
    if s:
        s[d] = k
    return tuple(s)


@impl("sort.values_stable")
def sort_values_stable(self, *, stable, dim=-1, descending=False, values, indices):
    check_same_device("sort", self, values, indices)
    d = wrap_dim(dim, self.dim())
    # A stable sort is a valid unstable one: foo always sorts stably.
    _sorted_prefix(self, d, _line_len(self, d), descending, values, indices, tuple(self.shape))
    return values, indices


@impl("sort.stable")
def sort_stable(self, *, stable, dim=-1, descending=False):
    values = torch.empty_like(self, memory_format=torch.contiguous_format)
    indices = torch.empty(self.shape, dtype=torch.int64, device=self.device)
    return sort_values_stable(self, stable=stable, dim=dim, descending=descending, values=values, indices=indices)


@impl("topk.values")
def topk_values(self, k, dim=-1, largest=True, sorted=True, *, values, indices):
    check_same_device("topk", self, values, indices)
    if self.dtype == torch.bool:
        raise NotImplementedError("topk does not support bool dtypes on foo")
    d = wrap_dim(dim, self.dim())
    if k < 0 or k > _line_len(self, d):
        raise RuntimeError("selected index k out of range")
    if self.dim() == 0:
        # CPU's topk of a scalar is the scalar for k = 0 as for k = 1.
        check_out(values, (), self.dtype)
        check_out(indices, (), torch.int64)
        values.copy_(self)
        indices.zero_()
        return values, indices
    shape = _with(self.shape, d, k)
    check_out(values, shape, self.dtype)
    check_out(indices, shape, torch.int64)
    # CPU's algorithm, so that ties report CPU's positions.
    _C.topk(desc(values), desc(indices), desc(self), d, k, largest, sorted)
    return values, indices


@impl("topk")
def topk(self, k, dim=-1, largest=True, sorted=True):
    values = torch.empty(0, dtype=self.dtype, device=self.device)
    indices = torch.empty(0, dtype=torch.int64, device=self.device)
    return topk_values(self, k, dim, largest, sorted, values=values, indices=indices)


def _nonempty_dim(name: str, self, d: int) -> None:
    if self.dim() and self.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _pick(self, d: int, k: int, keepdim: bool, values, indices) -> None:
    """Element ``k - 1`` (ascending, NaN last) of every line along ``d``."""
    shape = list(self.shape)
    if shape:
        shape[d] = 1
    reduced = tuple(shape) if keepdim or not shape else tuple(s for i, s in enumerate(self.shape) if i != d)
    v = torch.empty(_with(self.shape, d, k), dtype=self.dtype, device=self.device)
    i = torch.empty(v.shape, dtype=torch.int64, device=self.device)
    _C.sort(desc(v), desc(i), desc(self), d, k, False)
    check_out(values, reduced, self.dtype)
    check_out(indices, reduced, torch.int64)
    last = (v.narrow(d, k - 1, 1), i.narrow(d, k - 1, 1)) if self.dim() else (v, i)
    values.copy_(last[0].reshape(reduced))
    indices.copy_(last[1].reshape(reduced))


@impl("kthvalue.values")
def kthvalue_values(self, k, dim=-1, keepdim=False, *, values, indices):
    check_same_device("kthvalue", self, values, indices)
    if self.dtype == torch.bool:
        raise NotImplementedError("\"kthvalue_cpu\" not implemented for 'Bool' on foo")
    d = wrap_dim(dim, self.dim())
    _nonempty_dim("kthvalue", self, d)
    if k < 1 or k > _line_len(self, d):
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    _reduced_line(self, d, keepdim, values, indices, lambda v, i: _C.kthvalue(v, i, desc(self), d, k))
    return values, indices


def _reduced_line(self, d: int, keepdim: bool, values, indices, kernel) -> None:
    """Runs ``kernel(values, indices)`` (descs with 1 along ``d``) into the
    out= tensors, resized to the reduction's shape (``keepdim`` or not)."""
    keep = _with(self.shape, d, 1)
    reduced = keep if keepdim or not self.dim() else tuple(s for j, s in enumerate(self.shape) if j != d)
    check_out(values, reduced, self.dtype)
    check_out(indices, reduced, torch.int64)
    if keepdim or not self.dim():
        kernel(desc(values), desc(indices))
    else:
        kernel(desc(values.unsqueeze(d)), desc(indices.unsqueeze(d)))


def _median_dim(name: str, ignore_nan: bool, self, dim, keepdim, values, indices):
    check_same_device(name, self, values, indices)
    d = wrap_dim(dim, self.dim())
    _nonempty_dim(name, self, d)
    n = _line_len(self, d)
    if not (self.dtype.is_floating_point and self.numel()):
        _pick(self, d, (n + 1) // 2, keepdim, values, indices)
        return values, indices
    # NaN sorts last: a whole sort, then per line the lower median of the
    # numbers (nanmedian) or, when the line has a NaN, its first NaN (median).
    v = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    i = torch.empty(self.shape, dtype=torch.int64, device=self.device)
    _C.sort(desc(v), desc(i), desc(self), d, n, False)
    if self.dim() == 0:
        v, i, d = v.reshape(1), i.reshape(1), 0
    nans = torch.isnan(v).sum(d, keepdim=True)
    numbers = n - nans
    at = (numbers - 1).clamp(min=0) // 2
    if not ignore_nan:
        at = torch.where(nans > 0, numbers, at)
    if self.dim() == 0 or keepdim:
        shape = _with(self.shape, d, 1)
    else:
        shape = tuple(s for j, s in enumerate(self.shape) if j != d)
    check_out(values, shape, self.dtype)
    check_out(indices, shape, torch.int64)
    values.copy_(v.gather(d, at).reshape(values.shape))
    indices.copy_(i.gather(d, at).reshape(indices.shape))
    return values, indices


@impl("median.dim_values")
def median_dim_values(self, dim, keepdim=False, *, values, indices):
    return _median_dim("median", False, self, dim, keepdim, values, indices)


@impl("nanmedian.dim_values")
def nanmedian_dim_values(self, dim, keepdim=False, *, values, indices):
    return _median_dim("nanmedian", True, self, dim, keepdim, values, indices)


def _median_all(name: str, ignore_nan: bool, self):
    check_same_device(name, self)
    if self.numel() == 0:
        # CPU's median of nothing: NaN, cast to the input's dtype (so an integer
        # tensor gets what the cast of NaN gives, e.g. int64's minimum).
        return torch.full((), float("nan"), device=self.device).to(self.dtype)
    values = torch.empty((), dtype=self.dtype, device=self.device)
    indices = torch.empty((), dtype=torch.int64, device=self.device)
    _median_dim(name, ignore_nan, self.reshape(-1), 0, False, values, indices)
    return values


@impl("median")
def median(self):
    return _median_all("median", False, self)


@impl("nanmedian")
def nanmedian(self):
    return _median_all("nanmedian", True, self)
