"""Searching, counting and index building: searchsorted, bucketize, isin,
unique (sorted, consecutive, by dim), mode, cummax/cummin, logcumsumexp,
repeat_interleave, bincount, tril/triu_indices, channel_shuffle and renorm.

The Rust kernels (rust/src/kernels/search.rs and select.rs) follow torch
CPU's algorithms element for element, ties included (mode, cummax/cummin).
Ops whose result size depends on the data (unique, repeat_interleave,
bincount) learn the size from Rust (or a foo reduction) and allocate once.
Argument checks and their messages are CPU's."""

from __future__ import annotations

import torch

from ._registry import _C, check_same_device, desc, impl
from .linalg import c10_name, check_out
from .reduce import wrap_dim

__all__: list[str] = []

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _name(dtype: torch.dtype) -> str:
    return c10_name(dtype)


def _not_implemented(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    return NotImplementedError(f"\"{kernel}\" not implemented for '{_name(dtype)}'")


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


# ---- searchsorted / bucketize -----------------------------------------------


def _searchsorted(boundaries, values, out_int32, right, side, sorter, out, scalar: bool):
    check_same_device("searchsorted", boundaries, values, sorter, out)
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True"
            )
        right = side == "right"
    want = torch.int32 if out_int32 else torch.int64
    if out is not None and out.dtype != want:
        raise RuntimeError(
            "torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or Long(int64) "
            "depending on whether out_int32 flag is True, but we got output tensor's dtype "
            f"{_name(out.dtype)} and out_int32 flag is {out_int32}"
        )
    if sorter is not None:
        if sorter.dtype != torch.int64:
            raise RuntimeError(
                f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype {_name(sorter.dtype)}"
            )
        if sorter.shape != boundaries.shape:
            raise RuntimeError(
                "torch.searchsorted(): boundary and sorter must have the same size, but got boundary tensor "
                f"{list(boundaries.shape)}and got sorter tensor {list(sorter.shape)}"
            )
    if boundaries.dim() == 0:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension"
        )
    if scalar and boundaries.dim() != 1:
        raise RuntimeError(
            "torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is 1, but we "
            f"got boundaries tensor dim({boundaries.dim()}) and input value's dim({values.dim()}) "
            f"numel({values.numel()})"
        )
    if boundaries.dim() != 1 and (boundaries.dim() != values.dim() or boundaries.shape[:-1] != values.shape[:-1]):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries "
            f"tensor and input value tensor must match, but we got boundaries tensor {list(boundaries.shape)} and "
            f"input value tensor {list(values.shape)}"
        )
    common = torch.result_type(boundaries, values)
    if common == torch.bool or common.is_complex:
        raise _not_implemented("searchsorted_out_cpu", common)
    result = torch.empty(values.shape, dtype=want, device=boundaries.device)
    b = _dense(boundaries.to(common))
    v = _dense(values.to(common))
    s = None if sorter is None else _dense(sorter)
    try:
        _C.searchsorted(desc(result), desc(b), desc(v), None if s is None else desc(s), right)
    except ValueError as e:
        if "sorter index out of range" in str(e):
            raise RuntimeError("torch.searchsorted(): sorter index out of range") from None
        raise
    if out is None:
        return result
    check_out(out, result.shape, want)
    out.copy_(result)
    return out


def _scalar_tensor(x, like: torch.Tensor) -> torch.Tensor:
    return torch.scalar_tensor(x, dtype=torch.result_type(like, x), device=like.device)


@impl("searchsorted.Tensor")
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, None, False)


@impl("searchsorted.Tensor_out")
def searchsorted_out(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None, out):
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter, out, False)


@impl("searchsorted.Scalar")
def searchsorted_scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    v = _scalar_tensor(self, sorted_sequence)
    return _searchsorted(sorted_sequence, v, out_int32, right, side, sorter, None, True)


@impl("searchsorted.Scalar_out")
def searchsorted_scalar_out(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None, out):
    v = _scalar_tensor(self, sorted_sequence)
    return _searchsorted(sorted_sequence, v, out_int32, right, side, sorter, out, True)


def _bucketize(self, boundaries, out_int32, right, out, scalar: bool):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, self, out_int32, right, None, None, out, scalar)


@impl("bucketize.Tensor")
def bucketize(self, boundaries, *, out_int32=False, right=False):
    return _bucketize(self, boundaries, out_int32, right, None, False)


@impl("bucketize.Tensor_out")
def bucketize_out(self, boundaries, *, out_int32=False, right=False, out):
    return _bucketize(self, boundaries, out_int32, right, out, False)


@impl("bucketize.Scalar")
def bucketize_scalar(self, boundaries, *, out_int32=False, right=False):
    return _bucketize(_scalar_tensor(self, boundaries), boundaries, out_int32, right, None, True)


@impl("bucketize.Scalar_out")
def bucketize_scalar_out(self, boundaries, *, out_int32=False, right=False, out):
    return _bucketize(_scalar_tensor(self, boundaries), boundaries, out_int32, right, out, True)


# ---- isin -------------------------------------------------------------------


def _isin(elements, test, invert, out):
    check_same_device("isin", elements, test, out)
    for t in (elements, test):
        if t.dtype == torch.bool or t.is_complex():
            raise NotImplementedError(f"Unsupported input type encountered for isin(): {_name(t.dtype)}")
    common = torch.result_type(elements, test)
    result = torch.empty(elements.shape, dtype=torch.bool, device=elements.device)
    # Bound to names: a temporary's memory would be freed before the call.
    e, t = _dense(elements.to(common)), _dense(test.to(common))
    _C.isin(desc(result), desc(e), desc(t), invert)
    if out is None:
        return result
    check_out(out, result.shape, torch.bool)
    out.copy_(result)
    return out


@impl("isin.Tensor_Tensor")
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    return _isin(elements, test_elements, invert, None)


@impl("isin.Tensor_Tensor_out")
def isin_out(elements, test_elements, *, assume_unique=False, invert=False, out):
    return _isin(elements, test_elements, invert, out)


@impl("isin.Tensor_Scalar")
def isin_ts(elements, test_element, *, assume_unique=False, invert=False):
    return _isin(elements, _scalar_tensor(test_element, elements), invert, None)


@impl("isin.Tensor_Scalar_out")
def isin_ts_out(elements, test_element, *, assume_unique=False, invert=False, out):
    return _isin(elements, _scalar_tensor(test_element, elements), invert, out)


@impl("isin.Scalar_Tensor")
def isin_st(element, test_elements, *, assume_unique=False, invert=False):
    return _isin(_scalar_tensor(element, test_elements), test_elements, invert, None)


@impl("isin.Scalar_Tensor_out")
def isin_st_out(element, test_elements, *, assume_unique=False, invert=False, out):
    return _isin(_scalar_tensor(element, test_elements), test_elements, invert, out)


# ---- unique -----------------------------------------------------------------


def _groups(rows: torch.Tensor, width: int, consecutive: bool):
    """(first member row, counts, inverse) of the groups of equal rows of the
    contiguous ``rows`` (``width`` elements each), each trimmed to its size."""
    n = rows.numel() // width if width else 0
    first = torch.empty(n, dtype=torch.int64, device=rows.device)
    counts = torch.empty(n, dtype=torch.int64, device=rows.device)
    inverse = torch.empty(n, dtype=torch.int64, device=rows.device)
    g = _C.unique_rows(desc(first), desc(inverse), desc(counts), desc(rows), width, consecutive)
    return first[:g], counts[:g], inverse


def _unique_flat(self, consecutive: bool, return_inverse: bool, return_counts: bool):
    check_same_device("unique", self)
    x = _dense(self).reshape(-1)
    first, counts, inverse = _groups(x, 1, consecutive)
    values = x.index_select(0, first)
    empty = torch.empty(0, dtype=torch.int64, device=self.device)
    return (
        values,
        inverse.reshape(self.shape) if return_inverse else empty,
        counts if return_counts else empty.clone(),
    )


@impl("_unique2")
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # CPU's result is sorted whatever ``sorted`` says.
    return _unique_flat(self, False, return_inverse, return_counts)


@impl("_unique")
def unique_(self, sorted=True, return_inverse=False):
    values, inverse, _ = _unique_flat(self, False, return_inverse, False)
    return values, inverse


def _unique_dim(self, dim: int, consecutive: bool, return_inverse: bool, return_counts: bool):
    check_same_device("unique_dim", self)
    d = wrap_dim(dim, self.dim())
    if self.numel() == 0 and self.dim() and self.shape[d] != 0:
        if any(s == 0 for j, s in enumerate(self.shape) if j != d):
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    if self.dim() == 0:
        return _unique_flat(self, consecutive, return_inverse, return_counts)
    n = self.shape[d]
    rows = self.movedim(d, 0).contiguous()
    width = rows.numel() // n if n else 0
    if n == 0:
        empty = torch.empty(0, dtype=torch.int64, device=self.device)
        return self.clone(), empty, empty.clone()
    first, counts, inverse = _groups(rows.reshape(n, width), width, consecutive)
    return self.index_select(d, first), inverse, counts


@impl("unique_dim")
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_dim(self, dim, False, return_inverse, return_counts)


@impl("unique_dim_consecutive")
def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_dim(self, dim, True, return_inverse, return_counts)


@impl("unique_consecutive")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is not None:
        return _unique_dim(self, dim, True, return_inverse, return_counts)
    return _unique_flat(self, True, return_inverse, return_counts)


# ---- mode, cummax/cummin, logcumsumexp ----------------------------------------


@impl("mode.values")
def mode_values(self, dim=-1, keepdim=False, *, values, indices):
    from .sort import _nonempty_dim, _reduced_line

    check_same_device("mode", self, values, indices)
    d = wrap_dim(dim, self.dim())
    if self.numel() == 0 and self.dim() and self.shape[d] == 0:
        _nonempty_dim("mode", self, d)
    _reduced_line(self, d, keepdim, values, indices, lambda v, i: _C.mode(v, i, desc(self), d))
    return values, indices


@impl("mode")
def mode(self, dim=-1, keepdim=False):
    values = torch.empty(0, dtype=self.dtype, device=self.device)
    indices = torch.empty(0, dtype=torch.int64, device=self.device)
    return mode_values(self, dim, keepdim, values=values, indices=indices)


def _cum_helper(name: str, largest: bool):
    def helper(self, values, indices, dim):
        check_same_device(name, self, values, indices)
        d = wrap_dim(dim, self.dim())
        _C.cummax_cummin(desc(values), desc(indices), desc(self), d, largest)

    return helper


impl("_cummax_helper")(_cum_helper("cummax", True))
impl("_cummin_helper")(_cum_helper("cummin", False))


@impl("_logcumsumexp.out")
def logcumsumexp_out(self, dim, *, out):
    check_same_device("logcumsumexp", self, out)
    if not (self.dtype.is_floating_point or self.is_complex()):
        raise _not_implemented("logcumsumexp_out_cpu", self.dtype)
    d = wrap_dim(dim, self.dim())
    check_out(out, self.shape, self.dtype)
    x = _dense(self)
    _C.logcumsumexp(desc(out), desc(x), d)
    return out


@impl("_logcumsumexp")
def logcumsumexp(self, dim):
    out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    return logcumsumexp_out(self, dim, out=out)


# ---- repeat_interleave, bincount, tril/triu_indices ---------------------------


@impl("repeat_interleave.Tensor")
def repeat_interleave(repeats, *, output_size=None):
    check_same_device("repeat_interleave", repeats)
    if repeats.dtype not in (torch.int32, torch.int64):
        raise _not_implemented("repeat_interleave_cpu", repeats.dtype)
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    r = _dense(repeats)
    if r.numel() and int(r.min()) < 0:
        raise RuntimeError("repeats can not be negative")
    total = int(r.sum()) if r.numel() else 0
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    out = torch.empty(total, dtype=repeats.dtype, device=repeats.device)
    _C.repeat_index(desc(out), desc(r))
    return out


@impl("bincount")
def bincount(self, weights=None, minlength=0):
    check_same_device("bincount", self, weights)
    if self.dtype not in _INT_DTYPES:
        raise _not_implemented("bincount_cpu", self.dtype)
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if self.dim() == 1 and self.numel() == 0:
        return torch.zeros(minlength, dtype=torch.int64, device=self.device)
    if self.dim() != 1 or int(self.min()) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = max(int(self.max()) + 1, minlength)
    index = self.to(torch.int64)
    if weights is None:
        src = torch.ones(self.shape, dtype=torch.int64, device=self.device)
    else:
        # CPU sums float32 weights in float32 and every other dtype in float64.
        src = weights.to(torch.float32 if weights.dtype == torch.float32 else torch.float64)
    return torch.zeros(n, dtype=src.dtype, device=self.device).index_add_(0, index, src)


def _tri_indices(upper: bool, row, col, offset, dtype, device):
    name = "triu_indices" if upper else "tril_indices"
    dtype = torch.int64 if dtype is None else dtype
    if dtype not in (torch.int32, torch.int64):
        raise _not_implemented(name, dtype)
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    n = _C.tri_count(row, col, offset, upper)
    out = torch.empty((2, n), dtype=dtype, device=device)
    _C.tri_indices(desc(out), row, col, offset, upper)
    return out


@impl("tril_indices")
def tril_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _tri_indices(False, row, col, offset, dtype, device)


@impl("triu_indices")
def triu_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _tri_indices(True, row, col, offset, dtype, device)


# ---- channel_shuffle, renorm ------------------------------------------------


def _channel_shuffle(self, groups):
    if self.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes {list(self.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    c = self.shape[1]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    n = self.shape[0]
    fmt = torch.channels_last if self.dim() == 4 and self.is_contiguous(memory_format=torch.channels_last) else None
    shuffled = self.reshape(n, groups, c // groups, *self.shape[2:]).transpose(1, 2).reshape(self.shape)
    if fmt is not None and not self.is_contiguous():
        return shuffled.contiguous(memory_format=fmt)
    return shuffled.contiguous()


impl("channel_shuffle", "native_channel_shuffle")(_channel_shuffle)


@impl("renorm.out")
def renorm_out(self, p, dim, maxnorm, *, out):
    check_same_device("renorm", self, out)
    if self.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.dim()} dimensions")
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if not (self.dtype.is_floating_point or self.is_complex()):
        raise NotImplementedError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {_name(self.dtype)}"
        )
    d = wrap_dim(dim, self.dim())
    dims = [j for j in range(self.dim()) if j != d]
    acc = torch.float32 if self.dtype in (torch.float16, torch.bfloat16) else None
    norm = torch.linalg.vector_norm(self, p, dims, keepdim=True, dtype=acc)
    factor = torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), torch.ones_like(norm))
    check_out(out, self.shape, self.dtype)
    torch.mul(self, factor.to(self.dtype), out=out)
    return out


@impl("renorm")
def renorm(self, p, dim, maxnorm):
    out = torch.empty_like(self)
    return renorm_out(self, p, dim, maxnorm, out=out)


@impl("renorm_")
def renorm_inplace(self, p, dim, maxnorm):
    return renorm_out(self.clone(), p, dim, maxnorm, out=self)


# ---- histc ------------------------------------------------------------------


def _fmt(v: float) -> str:
    # C++ ostream's default formatting of a double.
    return f"{v:g}"


@impl("histc.out")
def histc_out(self, bins=100, min=0, max=0, *, out):
    check_same_device("histc", self, out)
    if not self.dtype.is_floating_point:
        raise _not_implemented("histogram_cpu", self.dtype)
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    lo, hi = float(min), float(max)
    if lo == hi and self.numel() > 0:
        lo, hi = float(self.min()), float(self.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if any(v != v or v in (float("inf"), float("-inf")) for v in (lo, hi)):
        raise RuntimeError(f"torch.histc: range of [{_fmt(lo)}, {_fmt(hi)}] is not finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    # CPU's bins: the outer edges are those of linspace(lo, hi) in the
    # input's dtype, an element's bin is (x - left) * bins / (right - left)
    # computed in that dtype (no search), the last bin holds its right edge,
    # and elements outside the edges (and NaN) go nowhere.
    edges = torch.linspace(lo, hi, bins + 1, dtype=self.dtype, device=self.device)
    left, right = edges[0], edges[-1]
    x = self.reshape(-1)
    pos = ((x - left) * bins / (right - left)).to(torch.int64).clamp_(0, bins - 1)
    inside = (x >= left) & (x <= right)
    hist = torch.zeros(bins, dtype=self.dtype, device=self.device)
    hist.index_add_(0, pos, inside.to(self.dtype))
    check_out(out, (bins,), self.dtype)
    out.copy_(hist)
    return out


@impl("histc")
def histc(self, bins=100, min=0, max=0):
    out = torch.empty(0, dtype=self.dtype, device=self.device)
    return histc_out(self, bins, min, max, out=out)
