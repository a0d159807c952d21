"""Indexing and shape ops: cat, index_select, index (advanced indexing),
index_put, gather, the scatter family, index_add, index_copy, index_fill,
take, put_, masked_scatter_, nonzero, masked_select, flip, roll, tril/triu,
arange, linspace, embedding_renorm_.

Every index op is one plan for two Rust kernels (rust/src/kernels/index.rs):
a "plan shape" over which the data operand is restrided (indexed dims get
stride 0) and each index tensor is laid out (broadcast strides), plus, per
index, the size and stride of the data dimension it selects along. ``gather``
reads ``data[r + Σ idx_k[r] * stride_k]``; ``scatter`` writes (or reduces)
into it. Indices are validated in Rust before any memory is touched.

Structured ops (cat, gather, scatter*, index.Tensor, index_add, index_copy,
tril/triu) register their ``.out`` overload: ATen's generated functional and
in-place kernels run the meta checks, allocate on foo and call it (index.Tensor
also gets a functional kernel, which skips the meta's extra nonzero pass).
Scatters run serially in row-major order, so duplicate indices accumulate in
a fixed order; like CPU, sums of f16/bf16 in scatter*/index_add (scatter
path) accumulate in f32, index_put_(accumulate=True) rounds per add. Output
and input memory that overlap (both dense, or one tensor) raise as ATen's assert_no_overlap
(_overlap.py, shared with the copies).
roll is cat of two narrowed views per dim; masked_scatter_ is nonzero +
index_put_ (native foo ops both).
"""

from __future__ import annotations

import functools
import warnings

import torch

from .. import _compat
from ._overlap import assert_no_overlap, overlaps
from ._registry import _C, check_same_device, desc, impl
from .elementwise import _C_TYPE
from .linalg import SCALAR_NAME, c10_name, check_out, resize_out
from .reduce import wrap_dim

_OOB = "index {index} is out of bounds for dimension {dim} with size {size}"
_INDEX_ERR = (0, "foo: " + _OOB)
_RUNTIME_OOB = (1, "foo: " + _OOB)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU 0-d tensor (allowed by check_same_device) moved to foo."""
    return t.to(device) if t.device != device else t


def _desc_as(t: torch.Tensor, sizes, strides) -> tuple:
    d = desc(t)
    return (d[0], d[1], tuple(sizes), tuple(strides))


def _arg(index: torch.Tensor, sizes, strides, size: int, stride: int, dim: int) -> tuple:
    return (_desc_as(index, sizes, strides), size, stride, dim)


def _index_dtype(t: torch.Tensor, allowed, exc, msg):
    if t.dtype not in allowed:
        raise exc(msg)


def _run_gather(out: torch.Tensor, fn, *inputs: torch.Tensor) -> torch.Tensor:
    """Calls ``fn(target)`` with ``out``, or with a fresh tensor copied into
    ``out`` afterwards when ``out`` overlaps an input."""
    if any(isinstance(i, torch.Tensor) and overlaps(out, i) for i in inputs):
        tmp = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        fn(tmp)
        out.copy_(tmp)
    else:
        fn(out)
    return out


# ---------------------------------------------------------------------------
# cat
# ---------------------------------------------------------------------------


def _cat_checks(tensors, dim):
    if len(tensors) == 0:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors (foo)")
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated (foo)")
    valid = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    ref = valid[0] if valid else tensors[0]
    d = wrap_dim(dim, ref.dim())
    for i, t in enumerate(tensors):
        if t.dim() == 1 and t.shape[0] == 0:
            continue
        if t.dim() != ref.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} and {t.dim()} (foo)")
        for k in range(ref.dim()):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {ref.shape[k]} "
                    f"but got size {t.shape[k]} for tensor number {i} in the list. (foo)"
                )
    return valid, ref, d


def _cat_memory_format(valid):
    fmt = None
    for t in valid:
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
            f = torch.channels_last
        elif t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
            f = torch.channels_last_3d
        else:
            f = torch.contiguous_format
        if fmt is None:
            fmt = f
        elif fmt != f:
            return torch.contiguous_format
    return fmt or torch.contiguous_format


@impl("cat.out", complex_ok=True)
def cat_out(tensors, dim=0, *, out):
    tensors = list(tensors)
    check_same_device("cat", *tensors, out)
    valid, ref, d = _cat_checks(tensors, dim)
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    if not torch.can_cast(dtype, out.dtype):
        raise TypeError(
            f"torch.cat(): input types can't be cast to the desired output type {SCALAR_NAME[out.dtype]} (foo)"
        )
    if valid:
        shape = list(ref.shape)
        shape[d] = sum(t.shape[d] for t in valid)
    else:
        shape = [0]
    assert_no_overlap("cat", out, *tensors)
    if tuple(out.shape) != tuple(shape):
        resize_out(out, tuple(shape))
        fmt = _cat_memory_format(valid)
        if fmt != torch.contiguous_format:
            out.resize_(shape, memory_format=fmt)
    inputs = [_on(t, out.device) for t in valid if t.numel() > 0]
    if out.numel() > 0:
        _run_gather(out, lambda o: _C.cat(desc(o), [desc(t) for t in inputs], d), *inputs)
    return out


# ---------------------------------------------------------------------------
# index_select
# ---------------------------------------------------------------------------


def _index_select_checks(self, dim, index):
    _index_dtype(
        index, (torch.int64, torch.int32), RuntimeError, "index_select(): Expected dtype int32 or int64 for index (foo)"
    )
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector (foo)")
    return wrap_dim(dim, self.dim())


def _index_select_into(out, self, d, index):
    n = index.numel()
    if self.dim() > 1 and self.numel() == 0 and n > 0:
        # CPU's path for an empty multi-dim self still checks the indices.
        if self.shape[d] == 0:
            raise RuntimeError("index_select(): self indexing axis dim should be positive (foo)")
        i1 = index.reshape(-1)
        _C.check_index(
            [_arg(i1, [n], [i1.stride(0)], self.shape[d], 0, d)],
            False,
            (1, "INDICES element is out of DATA bounds, id={index} axis_dim={size} (foo)"),
        )
    if self.dim() == 0 and n != 1:
        # CPU: a 0-d self takes exactly one index.
        raise IndexError(f"index_select(): Index to scalar can have only 1 value, got {n} value(s) (foo)")

    def run(target):
        # The plan is Rust's (kernels::entry::index_select, shared with the
        # native path); a 0-d self is the 1-element vector it views.
        if self.dim() == 0:
            _C.index_select(desc(target.view(1)), desc(self.view(1)), desc(index.reshape(1)), 0)
        else:
            _C.index_select(desc(target), desc(self), desc(index), d)

    return _run_gather(out, run, self, index)


@impl("index_select", complex_ok=True)
def index_select(self, dim, index):
    check_same_device("index_select", self, index)
    d = _index_select_checks(self, dim, index)
    shape = list(self.shape)
    if self.dim():
        shape[d] = index.numel()
    out = torch.empty(shape, dtype=self.dtype, device=self.device)
    return _index_select_into(out, self, d, index)


@impl("index_select.out", complex_ok=True)
def index_select_out(self, dim, index, *, out):
    check_same_device("index_select", self, index, out)
    d = _index_select_checks(self, dim, index)
    if out.dtype != self.dtype:
        raise RuntimeError("index_select(): self and result must have the same scalar type (foo)")
    shape = list(self.shape)
    if self.dim():
        shape[d] = index.numel()
    resize_out(out, tuple(shape))
    assert_no_overlap("index_select", out, self, index)
    return _index_select_into(out, self, d, index)


# ---------------------------------------------------------------------------
# advanced indexing: index.Tensor, _index_put_impl_
# ---------------------------------------------------------------------------


def _expand_indices(self, indices):
    """ATen's expandTensors + checks: bool/byte masks become long index
    tensors (one per masked dim, by nonzero on foo); returns a list of
    length self.dim() with None for unindexed dims."""
    out = []
    for idx in indices:
        if idx is None:
            out.append(None)
            continue
        if idx.device.type != "cpu" and idx.device != self.device:
            raise RuntimeError(
                f"indices should be either on cpu or on the same device as the indexed tensor ({self.device}) (foo)"
            )
        if idx.dtype not in (torch.int64, torch.int32, torch.uint8, torch.bool):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors (foo)")
        if idx.dtype in (torch.uint8, torch.bool):
            if idx.dtype == torch.uint8:
                warnings.warn(
                    "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
                    UserWarning,
                    stacklevel=3,
                )
            start = len(out)
            for j in range(idx.dim()):
                if start + j >= self.dim() or idx.shape[j] != self.shape[start + j]:
                    if start + j >= self.dim():
                        raise IndexError(f"too many indices for tensor of dimension {self.dim()} (foo)")
                    raise IndexError(
                        f"The shape of the mask {list(idx.shape)} at index {j} does not match the shape of the "
                        f"indexed tensor {list(self.shape)} at index {start + j} (foo)"
                    )
            if idx.dim() == 0:
                raise IndexError("foo index: a 0-dimensional mask must be applied through Python indexing (x[mask])")
            nz = nonzero(_on(idx, self.device))
            for j in range(idx.dim()):
                out.append(nz.select(1, j))
        else:
            out.append(_on(idx, self.device))
    if len(out) > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()} (foo)")
    out += [None] * (self.dim() - len(out))
    return out


def _index_plan(self, indices):
    """(view of self, plan shape, data strides, index args, tensors to keep
    alive while the args' pointers are in use)."""
    idx = _expand_indices(self, indices)
    defined = [k for k, t in enumerate(idx) if t is not None]
    if not defined:
        raise IndexError("foo index: at least one index must be defined")
    try:
        bshape = tuple(torch.broadcast_shapes(*[idx[k].shape for k in defined]))
    except RuntimeError:
        shapes = ", ".join(str(list(idx[k].shape)) for k in defined)
        raise IndexError(
            f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes} (foo)"
        ) from None
    adjacent = defined == list(range(defined[0], defined[-1] + 1))
    view = self
    dims = list(range(self.dim()))
    if not adjacent:
        # Indexed dims move to the front, like ATen's transposeToFront.
        dims = defined + [k for k in range(self.dim()) if idx[k] is None]
        view = self.permute(dims)
        idx = [idx[k] for k in dims]
        defined = list(range(len(defined)))
    first, last = defined[0], defined[-1]
    before, after = list(view.shape[:first]), list(view.shape[last + 1 :])
    shape = before + list(bshape) + after
    nb = len(bshape)
    if view.numel() == 0 and all(shape):
        # Nothing to read: an index into a zero-size dim is out of range (CPU's
        # IndexError), before any view of the empty storage is described.
        for k in defined:
            if view.shape[k] == 0 and idx[k].numel() > 0:
                v = int(idx[k].flatten()[0])
                raise IndexError(f"index {v} is out of bounds for dimension {dims[k]} with size 0 (foo)")
    dstr = list(view.stride()[:first]) + [0] * nb + list(view.stride()[last + 1 :])
    args = []
    keep = [idx[k] for k in defined]
    for k in defined:
        t = idx[k].expand(bshape)
        istr = [0] * first + list(t.stride()) + [0] * len(after)
        args.append(_arg(t, shape, istr, view.shape[k], view.stride(k), dims[k]))
    return view, shape, dstr, args, keep


@impl("index.Tensor_out", complex_ok=True)
def index_out(self, indices, *, out):
    check_same_device("index", self, out)  # CPU index tensors are allowed (moved to foo)
    view, shape, dstr, args, _keep = _index_plan(self, list(indices))
    check_out(out, tuple(shape), self.dtype)
    assert_no_overlap("index", out, self, *[i for i in indices if i is not None])

    def run(target):
        _C.index_gather(desc(target), _desc_as(view, shape, dstr), args, True, _INDEX_ERR)

    return _run_gather(out, run, self, *[i for i in indices if i is not None])


@impl("index.Tensor", complex_ok=True)
def index(self, indices):
    check_same_device("index", self)  # CPU index tensors are allowed (moved to foo)
    view, shape, dstr, args, _keep = _index_plan(self, list(indices))
    out = torch.empty(shape, dtype=self.dtype, device=self.device)
    _C.index_gather(desc(out), _desc_as(view, shape, dstr), args, True, _INDEX_ERR)
    return out


def _put_value(values, shape, dtype, device):
    values = _on(values, device)
    if values.dtype != dtype:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got {SCALAR_NAME[dtype]} for the "
            f"destination and {SCALAR_NAME[values.dtype]} for the source. (foo)"
        )
    try:
        v = values.expand(shape)
    except RuntimeError:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to indexing result "
            f"of shape {list(shape)} (foo)"
        ) from None
    return v


@impl("_index_put_impl_", complex_ok=True)
def index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    check_same_device("index_put_", self, values)  # CPU index tensors are allowed (moved to foo)
    view, shape, dstr, args, _keep = _index_plan(self, list(indices))
    v = _put_value(values, shape, self.dtype, self.device)
    assert_no_overlap("index_put_", self, values, *[i for i in indices if i is not None])
    if overlaps(self, v):
        v = v.clone()
    _C.index_scatter(
        _desc_as(view, shape, dstr), desc(v), None, args, True, "add" if accumulate else "assign", True, _INDEX_ERR
    )
    return self


# ---------------------------------------------------------------------------
# gather / scatter
# ---------------------------------------------------------------------------


def _as1d(t):
    return t.reshape(1) if t.dim() == 0 else t


def _gather_checks(name, self, d, index):
    if index.dim() != self.dim() and not (max(index.dim(), 1) == 1 and max(self.dim(), 1) == 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor (foo)")
    s, i = _as1d(self), _as1d(index)
    for k in range(i.dim()):
        if k != d and i.shape[k] > s.shape[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(index.shape)} to be no larger than "
                f"self {list(self.shape)} apart from dimension {d} (foo)"
            )


@impl("gather.out", complex_ok=True)
def gather_out(self, dim, index, *, sparse_grad=False, out):
    check_same_device("gather", self, index, out)
    d = wrap_dim(dim, self.dim())
    if index.numel():
        _index_dtype(
            index, (torch.int64, torch.int32), RuntimeError, "gather(): Expected dtype int32/int64 for index (foo)"
        )
    if index.numel() == 0:  # CPU checks neither dtype nor shapes of an empty index
        check_out(out, index.shape, self.dtype)
        return out
    _gather_checks("gather", self, d, index)
    check_out(out, index.shape, self.dtype)
    assert_no_overlap("gather", out, self, index)
    # The plan and CPU's out-of-range error are Rust's (kernels::entry::gather,
    # shared with the native path in rust/glue/native.cpp).
    return _run_gather(out, lambda target: _C.gather(desc(target), desc(self), desc(index), d), self, index)


_SCATTER_REDUCE = {"sum", "prod", "mean", "amax", "amin"}


def _scatter_into(name, self, dim, index, src, value, op, include_self, out):
    """Shared body of the scatter family: out = self, then scatter into out."""
    tensors = [self, index, out] + ([src] if src is not None else [])
    check_same_device(name, *tensors)
    d = wrap_dim(dim, self.dim())
    if index.numel():
        _index_dtype(
            index, (torch.int64, torch.int32), RuntimeError, f"{name}(): Expected dtype int32/int64 for index (foo)"
        )
    if src is not None:
        src = _on(src, self.device)
        if src.dtype != self.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype (foo)")
    if op == "mean" and self.dtype == torch.bool:
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool' (foo)")
    s, i = _as1d(self), _as1d(index)
    if index.numel() > 0:
        if index.dim() != self.dim() and not (max(index.dim(), 1) == 1 and max(self.dim(), 1) == 1):
            raise RuntimeError("Index tensor must have the same number of dimensions as self tensor (foo)")
        if src is not None and index.dim() != src.dim() and not (max(index.dim(), 1) == 1 and max(src.dim(), 1) == 1):
            raise RuntimeError("Index tensor must have the same number of dimensions as src tensor (foo)")
        sv = _as1d(src) if src is not None else None
        for k in range(i.dim()):
            if (k != d and i.shape[k] > s.shape[k]) or (sv is not None and i.shape[k] > sv.shape[k]):
                raise RuntimeError(
                    f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart from "
                    f"dimension {d}"
                    + (f" and to be no larger size than src {list(src.shape)}" if src is not None else "")
                    + " (foo)"
                )
    check_out(out, self.shape, self.dtype)
    assert_no_overlap(name, out, index, src)
    if src is not None and overlaps(out, src):
        src = src.clone()
    if out is not self and not (out.data_ptr() == self.data_ptr() and out.stride() == self.stride()):
        out.copy_(self)
    if index.numel() == 0:
        return out
    if overlaps(out, index):
        index = index.clone()
        i = _as1d(index)
    o = _as1d(out)
    shape = list(i.shape)
    dstr = list(o.stride())
    dstr[d] = 0
    sdesc = _desc_as(_as1d(src), shape, _as1d(src).stride()) if src is not None else None
    if src is None and isinstance(value, torch.Tensor):
        value = value.item()
    if src is None and out.is_complex():
        # Complex scatters take a tensor source: the value, broadcast.
        src = torch.tensor(value, dtype=out.dtype, device=out.device)
        sdesc, value = _desc_as(src, shape, [0] * len(shape)), None
    _C.index_scatter(
        _desc_as(o, shape, dstr),
        sdesc,
        value,
        [_arg(i, shape, i.stride(), o.shape[d], o.stride(d), d)],
        False,
        op,
        include_self,
        _RUNTIME_OOB,
        True,
    )
    return out


def _old_reduce(reduce):
    if reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply. (foo)")
    return reduce


@impl("scatter.src_out", complex_ok=True)
def scatter_src_out(self, dim, index, src, *, out):
    return _scatter_into("scatter", self, dim, index, src, None, "assign", True, out)


@impl("scatter.value_out", complex_ok=True)
def scatter_value_out(self, dim, index, value, *, out):
    return _scatter_into("scatter", self, dim, index, None, value, "assign", True, out)


@impl("scatter.reduce_out")
def scatter_reduce_out(self, dim, index, src, *, reduce, out):
    return _scatter_into("scatter", self, dim, index, src, None, _old_reduce(reduce), True, out)


@impl("scatter.value_reduce_out")
def scatter_value_reduce_out(self, dim, index, value, *, reduce, out):
    return _scatter_into("scatter", self, dim, index, None, value, _old_reduce(reduce), True, out)


@impl("scatter_add.out", complex_ok=True)
def scatter_add_out(self, dim, index, src, *, out):
    return _scatter_into("scatter_add", self, dim, index, src, None, "add", True, out)


@impl("scatter_reduce.two_out")
def scatter_reduce_two_out(self, dim, index, src, reduce, *, include_self=True, out):
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    if reduce not in _SCATTER_REDUCE:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce} (foo)")
    return _scatter_into("scatter_reduce", self, dim, index, src, None, reduce, include_self, out)


# ---------------------------------------------------------------------------
# index_add / index_fill
# ---------------------------------------------------------------------------


@impl("index_add.out", complex_ok=True)
def index_add_out(self, dim, index, source, *, alpha=1, out):
    check_same_device("index_add", self, index, source, out)
    d = wrap_dim(dim, self.dim())
    if index.dim() > 1:
        raise IndexError(
            f"index_add_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
            f"{SCALAR_NAME.get(index.dtype, index.dtype)} and size: {list(index.shape)} (foo)"
        )
    _index_dtype(
        index, (torch.int64, torch.int32), RuntimeError, "index_add_(): Expected dtype int32/int64 for index (foo)"
    )
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_add_(): self ({SCALAR_NAME[self.dtype]}) and source ({SCALAR_NAME[source.dtype]}) must have the "
            "same scalar type (foo)"
        )
    src1 = _as1d(source)
    s1 = _as1d(self)
    n = index.numel()
    if src1.dim() != s1.dim() and not (source.dim() == 0 and n == 1):
        raise RuntimeError("index_add_(): Source and self must have the same number of dimensions (foo)")
    if source.dim() > 0 and source.shape[d] != n:
        raise RuntimeError(
            f"index_add_(): Number of indices ({n}) should be equal to source.size(dim): ({source.shape[d]}), for dim: {d} (foo)"
        )
    for k in range(src1.dim()):
        if k != d and src1.shape[k] != s1.shape[k]:
            raise RuntimeError(
                "source tensor shape must match self tensor shape, excluding the specified dimension. Got "
                f"self.shape = {list(self.shape)} source.shape = {list(source.shape)} (foo)"
            )
    check_out(out, self.shape, self.dtype)
    assert_no_overlap("index_add/index_copy", out, index, source)
    if overlaps(out, source) or overlaps(out, index):
        source, index = source.clone(), index.clone()
        src1 = _as1d(source)
    if out is not self and not (out.data_ptr() == self.data_ptr() and out.stride() == self.stride()):
        out.copy_(self)
    if n == 0:
        return out
    if alpha != 1:
        src1 = src1 * alpha
    o = _as1d(out)
    shape = list(src1.shape)
    dstr = list(o.stride())
    dstr[d] = 0
    istr = [0] * len(shape)
    istr[d] = _as1d(index).stride(0)
    # CPU takes scatter_add (RuntimeError on a bad index, f32 accumulation of
    # halves) for an int64 index along the first or last dim of a >1-d self,
    # and per-slice add_ (IndexError, one rounding per add) otherwise.
    via_scatter = self.dim() > 1 and d in (0, self.dim() - 1) and index.dtype == torch.int64
    err = _RUNTIME_OOB if via_scatter else (0, "index out of range in self (foo index_add)")
    _C.index_scatter(
        _desc_as(o, shape, dstr),
        desc(src1),
        None,
        [_arg(index, shape, istr, o.shape[d], o.stride(d), d)],
        False,
        "add",
        True,
        err,
        via_scatter,
    )
    return out


def _index_fill(self, dim, index, value):
    check_same_device("index_fill_", self, index)
    d = wrap_dim(dim, self.dim())
    if index.dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index. (foo)")
    if index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar (foo)")
    assert_no_overlap("index_fill_", self, index)
    o = _as1d(self)
    shape = list(o.shape)
    shape[d] = index.numel()
    dstr = list(o.stride())
    dstr[d] = 0
    istr = [0] * len(shape)
    istr[d] = _as1d(index).stride(0)
    src = None
    if self.is_complex():
        # Complex scatters take a tensor source: the value, broadcast.
        src = torch.tensor(value, dtype=self.dtype, device=self.device)
        value = None
    _C.index_scatter(
        _desc_as(o, shape, dstr),
        None if src is None else _desc_as(src, shape, [0] * len(shape)),
        value,
        [_arg(index, shape, istr, o.shape[d], o.stride(d), d)],
        True,
        "assign",
        True,
        _INDEX_ERR,
    )
    return self


@impl("index_fill_.int_Scalar", complex_ok=True)
def index_fill_scalar_(self, dim, index, value):
    return _index_fill(self, dim, index, value)


@impl("index_fill_.int_Tensor", complex_ok=True)
def index_fill_tensor_(self, dim, index, value):
    if value.dim() != 0:
        raise RuntimeError(
            f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.dim()} dimension(s). (foo)"
        )
    return _index_fill(self, dim, index, value.item())


# ---------------------------------------------------------------------------
# nonzero / masked_select
# ---------------------------------------------------------------------------


def _nonzero_operand(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor's nonzero elements as a bool tensor (foo's complex
    ne), the real kernels' operand; a real tensor as is."""
    return torch.ne(t, 0) if t.is_complex() else t


@impl("nonzero", complex_ok=True)
def nonzero(self):
    self = _nonzero_operand(self)
    n = _C.count_nonzero_all(desc(self))
    out = torch.empty((n, self.dim()), dtype=torch.int64, device=self.device)
    if n:
        _C.nonzero(desc(out), desc(self))
    return out


@impl("nonzero.out", complex_ok=True)
def nonzero_out(self, *, out):
    check_same_device("nonzero", self, out)
    if out.dtype != torch.int64:
        raise RuntimeError(
            f"nonzero: Expected out tensor to have scalar type Long but got scalar type{SCALAR_NAME[out.dtype]} (foo)"
        )
    self = _nonzero_operand(self)
    n = _C.count_nonzero_all(desc(self))
    if tuple(out.shape) != (n, self.dim()):
        out.resize_((n, self.dim()))
    if n:

        def run(target):
            _C.nonzero(desc(target), desc(self))

        _run_gather(out, run, self)
    return out


@impl("nonzero_static", complex_ok=True)
def nonzero_static(self, *, size, fill_value=-1):
    out = torch.empty((0,), dtype=torch.int64, device=self.device)
    return nonzero_static_out(self, size=size, fill_value=fill_value, out=out)


@impl("nonzero_static.out", complex_ok=True)
def nonzero_static_out(self, *, size, fill_value=-1, out):
    """The first ``size`` rows of nonzero(self), padded with ``fill_value``
    (torch.combinations and export-friendly code call it from torch 2.15)."""
    check_same_device("nonzero_static", self, out)
    if size < 0 or out.dtype != torch.int64:
        _compat.raise_like_cpu(
            lambda: torch.nonzero_static(
                torch.zeros(1, dtype=self.dtype), size=size, fill_value=fill_value, out=torch.empty(0, dtype=out.dtype)
            ),
            RuntimeError(f"nonzero_static: invalid size {size} or out dtype {out.dtype} (foo)"),
        )
    nz = nonzero(self)
    n = min(nz.shape[0], size)
    resize_out(out, torch.Size((size, self.dim())))
    if n:
        out[:n].copy_(nz[:n])
    if n < size:
        out[n:].fill_(fill_value)
    return out


def _masked_select_prep(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask (foo)")
    mask = _on(mask, self.device)
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    return self.expand(shape), mask.expand(shape)


@impl("masked_select", complex_ok=True)
def masked_select(self, mask):
    check_same_device("masked_select", self, mask)
    s, m = _masked_select_prep(self, mask)
    n = _C.count_nonzero_all(desc(m))
    out = torch.empty((n,), dtype=self.dtype, device=self.device)
    if n:
        _C.masked_select(desc(out), desc(s), desc(m))
    return out


@impl("masked_select.out", complex_ok=True)
def masked_select_out(self, mask, *, out):
    check_same_device("masked_select", self, mask, out)
    s, m = _masked_select_prep(self, mask)
    if out.dtype != self.dtype:
        raise RuntimeError("masked_select(): self and result must have the same scalar type (foo)")
    n = _C.count_nonzero_all(desc(m))
    resize_out(out, (n,))
    if n:
        _run_gather(out, lambda t: _C.masked_select(desc(t), desc(s), desc(m)), self, mask)
    return out


# ---------------------------------------------------------------------------
# flip / roll / tril / triu
# ---------------------------------------------------------------------------


def _flip_dims(self, dims):
    ds = [wrap_dim(d, self.dim()) for d in dims]
    seen = set()
    for d in ds:
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims (foo)")
        seen.add(d)
    return ds if self.dim() else []


@impl("flip", complex_ok=True)
def flip(self, dims):
    ds = _flip_dims(self, dims)
    out = torch.empty_like(self)
    _C.flip(desc(out), desc(self), ds)
    return out


@impl("flip.out", complex_ok=True)
def flip_out(self, dims, *, out):
    check_same_device("flip", self, out)
    ds = _flip_dims(self, dims)
    if out.dtype != self.dtype:
        raise RuntimeError(
            f"Expected out tensor to have dtype {c10_name(self.dtype)}, but got {c10_name(out.dtype)} instead (foo)"
        )
    resize_out(out, self.shape)
    return _run_gather(out, lambda t: _C.flip(desc(t), desc(self), ds), self)


def _roll(self, shifts, dims):
    shifts, dims = list(shifts), list(dims)
    if not shifts:
        raise RuntimeError("`shifts` required (foo)")
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)} (foo)")
        return _roll(self.reshape(-1), shifts, [0]).view(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)} (foo)")
    x = self
    for s, d in zip(shifts, dims):
        d = wrap_dim(d, x.dim())
        n = x.shape[d]
        k = s % n if n else 0
        if k == 0:
            continue
        x = torch.cat([x.narrow(d, n - k, k), x.narrow(d, 0, n - k)], d)
    if x is self:
        x = self.clone(memory_format=torch.contiguous_format)
    return x


@impl("roll", complex_ok=True)
def roll(self, shifts, dims=()):
    return _roll(self, shifts, dims)


@impl("roll.out", complex_ok=True)
def roll_out(self, shifts, dims=(), *, out):
    check_same_device("roll", self, out)
    r = _roll(self, shifts, dims)
    if out.dtype != self.dtype:
        raise RuntimeError(
            f"Expected out tensor to have dtype {c10_name(self.dtype)}, but got {c10_name(out.dtype)} instead (foo)"
        )
    resize_out(out, r.shape)
    out.copy_(r)
    return out


def _tri_out(name, upper, self, diagonal, out):
    check_same_device(name, self, out)
    if self.dim() < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions (foo)")
    check_out(out, self.shape, self.dtype)
    same = out.data_ptr() == self.data_ptr() and out.stride() == self.stride()
    if not same and overlaps(out, self):
        return _run_gather(out, lambda t: _C.tri(desc(t), desc(self), diagonal, upper), self)
    _C.tri(desc(out), desc(self), diagonal, upper)
    return out


@impl("tril.out", complex_ok=True)
def tril_out(self, diagonal=0, *, out):
    return _tri_out("tril", False, self, diagonal, out)


@impl("triu.out", complex_ok=True)
def triu_out(self, diagonal=0, *, out):
    return _tri_out("triu", True, self, diagonal, out)


# ---------------------------------------------------------------------------
# arange / linspace
# ---------------------------------------------------------------------------

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _num(v):
    return v.item() if isinstance(v, torch.Tensor) else v


@impl("arange.start_out")
def arange_start_out(start, end, step=1, *, out):
    import math

    start, end, step = _num(start), _num(end), _num(step)
    dtype = out.dtype
    if dtype == torch.bool:
        raise NotImplementedError("\"arange_cpu\" not implemented for 'Bool' (foo)")
    integral = dtype in _INT_DTYPES
    # ATen: values in acc_type (int64 for integers: truncated bounds); the
    # size from int64 arithmetic for int64, from doubles otherwise.
    if integral:
        xs, xe, xst = int(start), int(end), int(step)
    else:
        xs, xe, xst = float(start), float(end), float(step)
    if float(step) == 0:
        raise RuntimeError("step must be nonzero (foo)")
    # torch 2.13 sizes an int64 arange from the truncated values (and raises
    # ValueError for a fractional step truncated to 0); later torch sizes it
    # from the doubles, as every other dtype (_compat).
    if dtype == torch.int64 and not _compat.arange_int64_size_from_doubles():
        if xst == 0:
            raise ValueError("step must be nonzero (foo)")
        sgn = (xst > 0) - (xst < 0)
        num = xe - xs + xst - sgn
        size_d = abs(num) // abs(xst) * (1 if (num >= 0) == (xst > 0) else -1)
        cs, ce, cst = xs, xe, xst
    else:
        cs, ce, cst = float(start), float(end), float(step)
        if cst == 0:
            raise RuntimeError("step must be nonzero (foo)")
        size_d = math.ceil((ce - cs) / cst)
    if not (math.isfinite(float(cs)) and math.isfinite(float(ce))):
        raise RuntimeError(f"unsupported range: {cs} -> {ce} (foo)")
    if not ((cst > 0 and ce >= cs) or (cst < 0 and ce <= cs)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign (foo)")
    if not (0 <= size_d <= 2**63 - 1):
        raise RuntimeError("invalid size, possible overflow? (foo)")
    size = int(size_d)
    if out.numel() != size:
        if out.numel() > 0:
            warnings.warn(
                f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} which does not "
                f"match the computed number of elements {size}. Note that this may occur as a result of rounding "
                f"error. The out tensor will be resized to a tensor of shape ({size},).",
                UserWarning,
                stacklevel=2,
            )
        out.resize_((size,))
    if size:
        o = out.view(-1) if out.dim() == 1 else out.reshape(-1)
        _C.arange(desc(o), float(xs), float(xst), int(xs), int(xst), integral)
        if o.data_ptr() != out.data_ptr() or o.shape != out.shape:
            out.copy_(o.view(out.shape))
    return out


def _complex_ramp(start, end, steps, out) -> torch.Tensor:
    """ATen's two-sided linspace ramp for a complex ``out`` (start + step * i
    below halfway, end - step * (steps - 1 - i) from there), with foo's
    complex elementwise kernels."""
    step = (complex(end) - complex(start)) / (steps - 1)
    i = torch.arange(steps, dtype=out.dtype.to_real(), device=out.device)
    lo = torch.add(torch.mul(i, step), start)
    hi = torch.add(torch.mul(torch.sub(i, steps - 1), step), end)
    return torch.where(i < steps // 2, lo, hi)


@impl("linspace.out", complex_ok=True)
def linspace_out(start, end, steps, *, out):
    start, end = _num(start), _num(end)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative (foo)")
    if out.is_complex() and steps > 1:
        if out.numel() != steps:
            out.resize_((steps,))
        return out.copy_(_complex_ramp(start, end, steps, out))
    if out.dtype == torch.bool:
        raise NotImplementedError("\"linspace_cpu\" not implemented for 'Bool' (foo)")
    if out.numel() != steps:
        out.resize_((steps,))
    if steps == 0:
        return out
    if steps == 1:
        out.fill_(start)
        return out
    _C.linspace(desc(out.view(-1)), float(start), float(end), _compat.linspace_low_precision_in_opmath())
    return out


def _as_dtype(v, dtype):
    """A Python number converted to ``dtype`` as ``Scalar.to<scalar_t>()`` does
    (c10's checked conversion: an unsigned type also takes integers down to
    -max, which wrap)."""
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        floor = -info.max if info.min == 0 and not isinstance(v, float) else info.min
        if not floor <= v <= info.max:
            raise RuntimeError(f"value cannot be converted to type {_C_TYPE[dtype]} without overflow (foo)")
    return torch.tensor(v, dtype=torch.float64 if isinstance(v, float) else None).to(dtype).item()


@impl("logspace.out", complex_ok=True)
def logspace_out(start, end, steps, base=10.0, *, out):
    """ATen's logspace_cpu: ``base ** e`` in float64 with the exponents of its
    two-sided ramp (``start + step * i`` below halfway, ``end - step * (steps
    - i - 1)`` from there), start and end first converted to the dtype; each
    step one of foo's float64 elementwise kernels, then a cast into out."""
    start, end = _num(start), _num(end)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative (foo)")
    if out.dtype == torch.bool:
        raise NotImplementedError("\"logspace_cpu\" not implemented for 'Bool' (foo)")
    if out.numel() != steps:
        out.resize_((steps,))
    if steps == 0:
        return out
    base = float(base)
    if out.is_complex():
        if steps == 1:
            return out.fill_(base ** complex(start))
        return out.copy_(torch.pow(base, _complex_ramp(start, end, steps, out)))
    if steps == 1:
        out.fill_(base ** float(start))
        return out
    dtype = out.dtype
    s, e = _as_dtype(start, dtype), _as_dtype(end, dtype)
    step = float(_as_dtype(e - s, dtype)) / (steps - 1)
    i = torch.arange(steps, dtype=torch.float64, device=out.device)
    lo = torch.add(torch.mul(i, step), float(s))
    hi = torch.sub(float(e), torch.mul(torch.sub(float(steps - 1), i), step))
    exponent = torch.where(i < steps // 2, lo, hi)
    out.copy_(torch.pow(base, exponent))
    return out


# ---------------------------------------------------------------------------
# index_copy / take / put_ / masked_scatter_
# ---------------------------------------------------------------------------


@impl("index_copy.out", complex_ok=True)
def index_copy_out(self, dim, index, source, *, out):
    check_same_device("index_copy", self, index, source, out)
    d = wrap_dim(dim, self.dim())
    if index.dim() > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()}) (foo)")
    n = index.numel()
    if source.dim() > 0 and source.dim() != self.dim() and self.dim() > 0:
        raise IndexError(
            "index_copy_(): When source and destination are not scalars, their dimensionality must match. "
            f"Source dimensionality ({source.dim()}), destination dimensionality ({self.dim()}) (foo)"
        )
    if (source.shape[d] if source.dim() else 1) != n:
        raise IndexError(
            f"index_copy_(): Number of indices ({n}) should be equal to source.size(dim) "
            f"({source.shape[d] if source.dim() else 1}) (foo)"
        )
    if index.dtype != torch.int64:
        raise RuntimeError(
            f"index_copy_(): Expected a long tensor for index, but got {SCALAR_NAME.get(index.dtype, index.dtype)} (foo)"
        )
    if source.dtype != self.dtype:
        raise RuntimeError(
            "index_copy_(): self and source expected to have the same dtype, but got (self) "
            f"{SCALAR_NAME[self.dtype]} and (source) {SCALAR_NAME[source.dtype]} (foo)"
        )
    src1, s1 = _as1d(source), _as1d(self)
    for k in range(s1.dim()):
        if k != d and src1.shape[k] != s1.shape[k]:
            raise RuntimeError(
                "index_copy_(): Source/destination tensor must have same slice shapes. Destination slice shape: "
                f"{s1.shape[k]} at dimension {k} and source slice shape: {src1.shape[k]} at dimension {k}. (foo)"
            )
    check_out(out, self.shape, self.dtype)
    assert_no_overlap("index_add/index_copy", out, index, source)
    if overlaps(out, source) or overlaps(out, index):
        source, index = source.clone(), index.clone()
        src1 = _as1d(source)
    if out is not self and not (out.data_ptr() == self.data_ptr() and out.stride() == self.stride()):
        out.copy_(self)
    if n == 0:
        return out
    o = _as1d(out)
    shape = list(src1.shape)
    dstr = list(o.stride())
    dstr[d] = 0
    istr = [0] * len(shape)
    istr[d] = _as1d(index).stride(0)
    _C.index_scatter(
        _desc_as(o, shape, dstr),
        desc(src1),
        None,
        [_arg(index, shape, istr, o.shape[d], o.stride(d), d)],
        False,
        "assign",
        True,
        (0, "index_copy_(): index {index} is out of bounds for dimension {dim} with size {size} (foo)"),
    )
    return out


_TAKE_OOB = (0, "out of range: tried to access index {index} on a tensor of {size} elements. (foo)")


def _flat(t):
    """A 1-d view of ``t`` (a contiguous copy on foo when it has no such view)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


@impl("take", complex_ok=True)
def take(self, index):
    check_same_device("take", self, index)
    if index.dtype != torch.int64:
        raise RuntimeError(
            f"take(): Expected a long tensor for index, but got {SCALAR_NAME.get(index.dtype, index.dtype)} (foo)"
        )
    if self.numel() == 0 and index.numel() > 0:
        raise IndexError("take(): tried to take from an empty tensor (foo)")
    out = torch.empty(index.shape, dtype=self.dtype, device=self.device)
    if index.numel() == 0:
        return out
    flat = _flat(self)
    shape = list(index.shape)
    _C.index_gather(
        desc(out),
        _desc_as(flat, shape, [0] * len(shape)),
        [_arg(index, shape, index.stride(), flat.numel(), 1, 0)],
        True,
        _TAKE_OOB,
    )
    return out


@impl("put_", complex_ok=True)
def put_(self, index, source, accumulate=False):
    check_same_device("put_", self, index, source)
    if index.dtype != torch.int64:
        raise RuntimeError(
            f"put_(): Expected a long tensor for index, but got {SCALAR_NAME.get(index.dtype, index.dtype)} (foo)"
        )
    if source.dtype != self.dtype:
        raise RuntimeError(
            "put_(): self and source expected to have the same dtype, but got self.dtype = "
            f"{SCALAR_NAME[self.dtype]} and source.dtype = {SCALAR_NAME[source.dtype]} (foo)"
        )
    if source.numel() != index.numel():
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but got source.numel() = "
            f"{source.numel()}, index.numel() = {index.numel()} (foo)"
        )
    if self.numel() == 0 and index.numel() > 0:
        raise IndexError("put_(): Tried to put elements into an empty tensor (foo)")
    assert_no_overlap("put_", self, index, source)
    if index.numel() == 0:
        return self
    flat = self.reshape(-1) if self.is_contiguous() else None
    target = flat if flat is not None else self.contiguous().reshape(-1)
    src, idx = _flat(source), _flat(index)
    if overlaps(target, src):
        src = src.clone()
    n = idx.numel()
    _C.index_scatter(
        _desc_as(target, [n], [0]),
        _desc_as(src, [n], [1]),
        None,
        [_arg(idx, [n], [1], target.numel(), 1, 0)],
        True,
        "add" if accumulate else "assign",
        True,
        _TAKE_OOB,
    )
    if flat is None:
        self.copy_(target.view(self.shape))
    return self


@impl("masked_scatter_", complex_ok=True)
def masked_scatter_(self, mask, source):
    check_same_device("masked_scatter_", self, mask, source)
    if mask.dtype != torch.bool:
        raise RuntimeError(
            f"masked_scatter_ only supports boolean masks, but got mask with dtype {SCALAR_NAME.get(mask.dtype, mask.dtype)} (foo)"
        )
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"masked_scatter: expected self and source to have same dtypes but got{SCALAR_NAME[self.dtype]} and "
            f"{SCALAR_NAME[source.dtype]} (foo)"
        )
    m = _on(mask, self.device).expand(self.shape)
    nz = nonzero(m)
    count = nz.shape[0]
    if source.numel() < count:
        raise RuntimeError("Number of elements of source < number of ones in mask (foo)")
    if count == 0:
        return self
    src = _flat(source).narrow(0, 0, count)
    if self.dim() == 0:
        return self.copy_(src.view(()))
    index_put_impl_(self, [nz.select(1, j) for j in range(self.dim())], src.clone() if overlaps(self, src) else src)
    return self


# ---------------------------------------------------------------------------
# embedding_renorm_ (nn.Embedding(max_norm=...))
# ---------------------------------------------------------------------------


@impl("embedding_renorm_")
def embedding_renorm_(self, indices, max_norm, norm_type):
    check_same_device("embedding_renorm_", self, indices)
    if self.dim() != 2:
        raise RuntimeError(
            f"Expected 2-dimensional tensor, but got {self.dim()}-dimensional tensor for argument #1 'self' "
            "(while checking arguments for embedding_renorm_) (foo)"
        )
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            "Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {indices.dtype} instead (while checking arguments for embedding_renorm_) (foo)"
        )
    if not self.dtype.is_floating_point:
        _compat.raise_like_cpu(
            lambda: torch.embedding_renorm_(
                torch.zeros(1, 1, dtype=self.dtype), torch.zeros(1, dtype=torch.long), 1.0, 2.0
            ),
            RuntimeError(f"embedding_renorm_: {self.dtype} is not a floating point dtype (foo)"),
        )
    if indices.numel():
        _C.embedding_renorm(desc(self), desc(indices), float(max_norm), float(norm_type))
    return self


# ---------------------------------------------------------------------------
# index_reduce
# ---------------------------------------------------------------------------


@impl("index_reduce.out")
def index_reduce_out(self, dim, index, source, reduce, *, include_self=True, out):
    check_same_device("index_reduce", self, index, source, out)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(
            f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}. (foo)"
        )
    d = wrap_dim(dim, self.dim())
    if index.dim() > 1:
        raise IndexError(
            f"index_reduce_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
            f"{SCALAR_NAME.get(index.dtype, index.dtype)} and size: {list(index.shape)} (foo)"
        )
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            f"index_reduce_(): Expected dtype int32/int64 for index but got: {SCALAR_NAME.get(index.dtype, index.dtype)} (foo)"
        )
    if source.dtype != self.dtype:
        raise RuntimeError(
            f"index_reduce_(): self ({SCALAR_NAME[self.dtype]}) and source ({SCALAR_NAME[source.dtype]}) must have the "
            "same scalar type (foo)"
        )
    src1, s1 = _as1d(source), _as1d(self)
    n = index.numel()
    if source.dim() > 0 and source.shape[d] != n:
        raise RuntimeError(
            f"index_reduce_(): Number of indices ({n}) should be equal to source.size(dim): ({source.shape[d]}), for dim: {d} (foo)"
        )
    if src1.dim() != s1.dim():
        raise RuntimeError("index_reduce_(): Source and self must have the same number of dimensions (foo)")
    for k in range(src1.dim()):
        if k != d and src1.shape[k] != s1.shape[k]:
            raise RuntimeError(
                "source tensor shape must match self tensor shape, excluding the specified dimension. Got "
                f"self.shape = {list(self.shape)} source.shape = {list(source.shape)} (foo)"
            )
    if self.dtype == torch.bool and (not include_self or self.dim() <= 1):
        # CPU: the index_fill_ / 1-d paths have no Bool kernel
        raise NotImplementedError("\"index_func_\" not implemented for 'Bool' (foo)")
    check_out(out, self.shape, self.dtype)
    assert_no_overlap("index_reduce", out, index, source)
    if out is not self and not (out.data_ptr() == self.data_ptr() and out.stride() == self.stride()):
        out.copy_(self)
    if n == 0:
        return out
    o = _as1d(out)
    shape = list(src1.shape)
    dstr = list(o.stride())
    dstr[d] = 0
    istr = [0] * len(shape)
    istr[d] = _as1d(index).stride(0)
    _C.index_scatter(
        _desc_as(o, shape, dstr),
        desc(src1),
        None,
        [_arg(index, shape, istr, o.shape[d], o.stride(d), d)],
        False,
        reduce,
        include_self,
        (0, "index out of range in self (foo index_reduce)"),
        False,
    )
    if self.dtype == torch.bool and reduce == "mean":
        # CPU reduces, then fails dividing by the counts
        raise NotImplementedError("\"div_floor_cpu\" not implemented for 'Bool' (foo)")
    return out


@impl("unfold_backward", complex_ok=True)
def unfold_backward(grad_in, input_sizes, dim, size, step):
    """Tensor.unfold's backward: window element ``j`` of every window adds into
    the strided view ``grad[j::step]`` along ``dim`` (one foo add per element
    of a window; overlapping windows accumulate in window order)."""
    if step <= 0:
        raise ValueError(f"step is {step} but must be > 0")
    nd = len(input_sizes)
    grad = torch.zeros(input_sizes, dtype=grad_in.dtype, device=grad_in.device)
    if nd == 0:
        return grad.add_(grad_in.reshape(()))
    d = dim % nd if -nd <= dim < nd else dim
    n = grad_in.shape[d]
    if n == 0 or grad.numel() == 0:
        return grad
    lead = (slice(None),) * d
    for j in range(size):
        grad.narrow(d, j, (n - 1) * step + 1)[(*lead, slice(None, None, step))].add_(grad_in.select(-1, j))
    return grad


@impl("eye.m_out", complex_ok=True)
def eye_m_out(n, m, *, out):
    """Zero, then a fill of the diagonal view: foo's zero_ and fill_ kernels."""
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    out.resize_((n, m))
    out.zero_()
    if n and m:
        out.diagonal().fill_(1)
    return out


@impl("eye.out", complex_ok=True)
def eye_out(n, *, out):
    return eye_m_out(n, n, out=out)
