"""Reductions and scans: sum, nansum, mean, prod, amax/amin, max/min (full and
with indices), argmax/argmin, aminmax, var/std (+ mean), vector norms,
all/any, count_nonzero, trace, cumsum/cumprod.

Structured reductions register their ``.out`` overload (ATen's composite
kernels give the functional forms and allocate on foo). The Rust engine is
deterministic for any thread count (a fixed pairwise tree of blocks).
"""

from __future__ import annotations

import math
import warnings

import torch

from .. import _compat
from ._registry import DTYPE_CODE, _C, check_same_device, desc, impl
from .linalg import SCALAR_NAME, c10_name, check_out, resize_out

_INTEGRAL_OR_BOOL = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


# ---------------------------------------------------------------------------
# dims and shapes
# ---------------------------------------------------------------------------


def wrap_dim(d: int, ndim: int) -> int:
    n = max(ndim, 1)
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n if ndim else 0


def reduce_dims(x: torch.Tensor, dim) -> list[int]:
    """Sorted, wrapped reduction dims; None or an empty list mean all."""
    nd = x.dim()
    if dim is None:
        return list(range(nd))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return list(range(nd))
    out: list[int] = []
    for d in dim:
        w = wrap_dim(d, nd)
        if w in out:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        out.append(w)
    if nd == 0:
        return []
    return sorted(out)


def reduced_shape(x: torch.Tensor, dims: list[int], keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    return tuple(s for i, s in enumerate(x.shape) if i not in dims)


def _count(x: torch.Tensor, dims: list[int]) -> int:
    return math.prod(x.shape[d] for d in dims)


def _natural(op: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype Rust writes for reduction ``op`` of ``dtype``."""
    if op in ("sum", "nansum", "prod") and dtype in _INTEGRAL_OR_BOOL:
        return torch.int64
    if op in ("argmax", "argmin", "count_nonzero"):
        return torch.int64
    if op in ("all", "any"):
        return torch.uint8 if dtype == torch.uint8 else torch.bool
    return dtype


def run_reduce(op: str, out: torch.Tensor, x: torch.Tensor, dims: list[int], out2=None, correction=1.0, ord=2.0):
    """Runs Rust reduction ``op`` of ``x`` over ``dims`` into ``out`` (already
    of the reduced shape), through a scratch tensor if ``out`` has another
    dtype than the one Rust writes."""
    nat = _natural(op, x.dtype)
    if out.dtype == nat:
        _C.reduce(op, desc(out), None if out2 is None else desc(out2), desc(x), dims, correction, ord)
        return out
    tmp = torch.empty(out.shape, dtype=nat, device=out.device)
    _C.reduce(op, desc(tmp), None if out2 is None else desc(out2), desc(x), dims, correction, ord)
    out.copy_(tmp)
    return out


def _cast_for(x: torch.Tensor, cd: torch.dtype) -> torch.Tensor:
    """The input converted to compute dtype ``cd`` when torch would (any
    float involved); integer inputs sum exactly in int64 anyway."""
    if x.dtype != cd and (cd.is_floating_point or x.dtype.is_floating_point or cd == torch.bool):
        return x.to(cd)
    return x


# ---------------------------------------------------------------------------
# sum, nansum, mean, prod
# ---------------------------------------------------------------------------


def _sum_like(op, self, dim, keepdim, dtype, out):
    check_same_device(op, self, out)
    dims = reduce_dims(self, dim)
    shape = reduced_shape(self, dims, keepdim)
    if dtype is not None:
        check_out(out, shape, dtype)
    else:
        resize_out(out, shape)
    x = _cast_for(self, out.dtype)
    if op == "nansum" and not x.dtype.is_floating_point:
        op = "sum"
    return run_reduce(op, out, x, dims)


def _default_sum_dtype(self, dtype):
    if dtype is not None:
        return dtype
    return torch.int64 if self.dtype in _INTEGRAL_OR_BOOL else self.dtype


@impl("sum.IntList_out")
def sum_out(self, dim, keepdim=False, *, dtype=None, out):
    return _sum_like("sum", self, dim, keepdim, dtype, out)


@impl("nansum.out")
def nansum_out(self, dim=None, keepdim=False, *, dtype=None, out):
    return _sum_like("nansum", self, dim, keepdim, dtype, out)


@impl("nansum")
def nansum(self, dim=None, keepdim=False, *, dtype=None):
    dims = reduce_dims(self, dim)
    out = torch.empty(reduced_shape(self, dims, keepdim), dtype=_default_sum_dtype(self, dtype), device=self.device)
    return _sum_like("nansum", self, dim, keepdim, dtype, out)


@impl("mean.out")
def mean_out(self, dim, keepdim=False, *, dtype=None, out):
    check_same_device("mean", self, out)
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError(
            "mean(): could not infer output dtype. Optional dtype must be either a floating point or "
            f"complex dtype. Got: {SCALAR_NAME.get(dtype, dtype)}"
        )
    if dtype is None and not self.dtype.is_floating_point:
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or "
            f"complex dtype. Got: {SCALAR_NAME.get(self.dtype, self.dtype)}"
        )
    dims = reduce_dims(self, dim)
    shape = reduced_shape(self, dims, keepdim)
    if dtype is not None:
        check_out(out, shape, dtype)
    else:
        resize_out(out, shape)
    x = self if self.dtype == out.dtype else self.to(out.dtype)
    return run_reduce("mean", out, x, dims)


@impl("prod.int_out")
def prod_int_out(self, dim, keepdim=False, *, dtype=None, out):
    return _sum_like("prod", self, dim, keepdim, dtype, out)


@impl("prod")
def prod(self, *, dtype=None):
    out = torch.empty((), dtype=_default_sum_dtype(self, dtype), device=self.device)
    return _sum_like("prod", self, None, False, dtype, out)


# ---------------------------------------------------------------------------
# amax / amin, max / min, argmax / argmin, aminmax
# ---------------------------------------------------------------------------


def _nonempty(name: str, x: torch.Tensor, dims: list[int], all_dims: bool) -> None:
    if x.numel() != 0:
        return
    if all_dims:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
            "reduction dim with the 'dim' argument."
        )
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _extreme_out(name, self, dim, keepdim, out):
    check_same_device(name, self, out)
    dims = reduce_dims(self, dim)
    _nonempty(name, self, dims, dim is None or len(dim) == 0)
    if out.dtype != self.dtype:
        raise RuntimeError(
            f"Expected the dtype for input and out to match, but got {SCALAR_NAME.get(self.dtype)} for "
            f"input's dtype and {SCALAR_NAME.get(out.dtype)} for out's dtype."
        )
    resize_out(out, reduced_shape(self, dims, keepdim))
    return run_reduce("max" if name == "amax" else "min", out, self, dims)


@impl("amax.out")
def amax_out(self, dim=(), keepdim=False, *, out):
    return _extreme_out("amax", self, dim, keepdim, out)


@impl("amin.out")
def amin_out(self, dim=(), keepdim=False, *, out):
    return _extreme_out("amin", self, dim, keepdim, out)


def _full_extreme(name, self, out=None):
    if self.numel() == 0:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
            "reduction dim with the 'dim' argument."
        )
    if out is None:
        out = torch.empty((), dtype=self.dtype, device=self.device)
    else:
        check_same_device(name, self, out)
        check_out(out, (), self.dtype)
    return run_reduce(name, out, self, list(range(self.dim())))


@impl("max")
def max_full(self):
    return _full_extreme("max", self)


@impl("min")
def min_full(self):
    return _full_extreme("min", self)


@impl("max.unary_out")
def max_unary_out(self, *, out):
    return _full_extreme("max", self, out)


@impl("min.unary_out")
def min_unary_out(self, *, out):
    return _full_extreme("min", self, out)


def _extreme_dim(name, self, dim, keepdim, values, indices):
    check_same_device(name, self, values, indices)
    d = wrap_dim(dim, self.dim())
    dims = [d] if self.dim() else []
    if self.dim() and self.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    shape = reduced_shape(self, dims, keepdim)
    check_out(values, shape, self.dtype)
    check_out(indices, shape, torch.int64)
    _C.reduce(name + "_dim", desc(values), desc(indices), desc(self), dims)
    return values, indices


@impl("max.dim_max")
def max_dim_max(self, dim, keepdim=False, *, max, max_values):
    return _extreme_dim("max", self, dim, keepdim, max, max_values)


@impl("min.dim_min")
def min_dim_min(self, dim, keepdim=False, *, min, min_indices):
    return _extreme_dim("min", self, dim, keepdim, min, min_indices)


def _arg(name, self, dim, keepdim, out):
    check_same_device(name, self, out)
    if dim is None:
        if self.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        shape = (1,) * self.dim() if keepdim else ()
        check_out(out, shape, torch.int64)
        x = self.reshape(-1)
        # out seen as [1] (its elements are one)
        _C.reduce(name, (out.data_ptr(), DTYPE_CODE[torch.int64], (1,), (1,)), None, desc(x), [0])
        return out
    d = wrap_dim(dim, self.dim())
    dims = [d] if self.dim() else []
    if self.dim() and self.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    check_out(out, reduced_shape(self, dims, keepdim), torch.int64)
    _C.reduce(name, desc(out), None, desc(self), dims)
    return out


@impl("argmax.out")
def argmax_out(self, dim=None, keepdim=False, *, out):
    return _arg("argmax", self, dim, keepdim, out)


@impl("argmin.out")
def argmin_out(self, dim=None, keepdim=False, *, out):
    return _arg("argmin", self, dim, keepdim, out)


@impl("aminmax.out")
def aminmax_out(self, *, dim=None, keepdim=False, min, max):
    check_same_device("aminmax", self, min, max)
    if dim is None:
        dims = list(range(self.dim()))
        if self.numel() == 0:
            raise RuntimeError(
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."
            )
        shape = (1,) * self.dim() if keepdim else ()
    else:
        d = wrap_dim(dim, self.dim())
        dims = [d] if self.dim() else []
        if self.dim() and self.shape[d] == 0:
            raise IndexError(f"aminmax(): Expected reduction dim {d} to have non-zero size.")
        shape = reduced_shape(self, dims, keepdim)
    check_out(min, shape, self.dtype)
    check_out(max, shape, self.dtype)
    for op, o in (("min", min), ("max", max)):
        if dim is None and keepdim and self.dim() > 1:
            _C.reduce(op, (o.data_ptr(), DTYPE_CODE[o.dtype], (1,), (1,)), None, desc(self.reshape(-1)), [0])
        else:
            _C.reduce(op, desc(o), None, desc(self), dims)
    return min, max


# ---------------------------------------------------------------------------
# var / std
# ---------------------------------------------------------------------------


def _var_prep(name, self, dim, correction, keepdim):
    if not self.dtype.is_floating_point:
        _compat.raise_like_cpu(
            lambda: torch.var(torch.zeros(2, dtype=self.dtype)),
            RuntimeError("std and var only support floating point and complex dtypes (foo)"),
        )
    dims = reduce_dims(self, dim)
    c = 1.0 if correction is None else float(correction)
    if _count(self, dims) - c <= 0:
        warnings.warn(
            f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the "
            "reduction factor (input numel divided by output numel).",
            UserWarning,
            stacklevel=3,
        )
    return dims, c, reduced_shape(self, dims, keepdim)


def _var_into(name, op, self, dim, correction, keepdim, out, mean_out=None):
    dims, c, shape = _var_prep(name, self, dim, correction, keepdim)
    check_out(out, shape, self.dtype)
    if mean_out is not None:
        check_out(mean_out, shape, self.dtype)
    _C.reduce(op, desc(out), None if mean_out is None else desc(mean_out), desc(self), dims, c)
    return out if mean_out is None else (out, mean_out)


def _var_new(name, op, self, dim, correction, keepdim, with_mean):
    dims, _, shape = _var_prep(name, self, dim, correction, keepdim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.empty(shape, dtype=self.dtype, device=self.device)
        m = torch.empty(shape, dtype=self.dtype, device=self.device) if with_mean else None
        return _var_into(name, op, self, dim, correction, keepdim, out, m)


@impl("var.correction")
def var_correction(self, dim=None, *, correction=None, keepdim=False):
    return _var_new("var", "var", self, dim, correction, keepdim, False)


@impl("std.correction")
def std_correction(self, dim=None, *, correction=None, keepdim=False):
    return _var_new("std", "std", self, dim, correction, keepdim, False)


@impl("var.correction_out")
def var_correction_out(self, dim=None, *, correction=None, keepdim=False, out):
    check_same_device("var", self, out)
    return _var_into("var", "var", self, dim, correction, keepdim, out)


@impl("std.correction_out")
def std_correction_out(self, dim=None, *, correction=None, keepdim=False, out):
    check_same_device("std", self, out)
    return _var_into("std", "std", self, dim, correction, keepdim, out)


@impl("var_mean.correction")
def var_mean_correction(self, dim=None, *, correction=None, keepdim=False):
    return _var_new("var_mean", "var", self, dim, correction, keepdim, True)


@impl("std_mean.correction")
def std_mean_correction(self, dim=None, *, correction=None, keepdim=False):
    return _var_new("std_mean", "std", self, dim, correction, keepdim, True)


# ---------------------------------------------------------------------------
# norms
# ---------------------------------------------------------------------------


def _ord_str(o: float) -> str:
    if o == math.inf:
        return "inf"
    if o == -math.inf:
        return "-inf"
    return repr(float(o))


def _vector_norm_into(self, ord, dim, keepdim, dtype, out, name="linalg.vector_norm"):
    check_same_device(name, self, out)
    if not self.dtype.is_floating_point:
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {SCALAR_NAME.get(self.dtype)}"
        )
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError(f"{name}: dtype should be floating point or complex. Got {SCALAR_NAME.get(dtype)}")
    ord = float(ord)
    dims = reduce_dims(self, dim)
    if ord < 0 or math.isinf(ord):
        if self.numel() == 0:
            if dim is None or (not isinstance(dim, int) and len(dim) == 0):
                raise RuntimeError(
                    f"{name} cannot compute the {_ord_str(ord)} norm on an empty tensor because the "
                    "operation does not have an identity"
                )
            for d in dims:
                if self.shape[d] == 0:
                    raise RuntimeError(
                        f"{name} cannot compute the {_ord_str(ord)} norm on the dimension {d}because this "
                        "dimension is empty and the operation does not have an identity"
                    )
    shape = reduced_shape(self, dims, keepdim)
    if dtype is not None:
        check_out(out, shape, dtype)
    else:
        resize_out(out, shape)
    x = self if self.dtype == out.dtype else self.to(out.dtype)
    return run_reduce("norm", out, x, dims, ord=ord)


@impl("linalg_vector_norm.out")
def linalg_vector_norm_out(self, ord=2, dim=None, keepdim=False, *, dtype=None, out):
    return _vector_norm_into(self, ord, dim, keepdim, dtype, out)


@impl("norm.out")
def norm_out(self, p, dim, keepdim=False, *, out):
    return _vector_norm_into(self, 2 if p is None else p, dim, keepdim, None, out, "norm")


@impl("norm.dtype_out")
def norm_dtype_out(self, p, dim, keepdim, *, dtype, out):
    return _vector_norm_into(self, 2 if p is None else p, dim, keepdim, dtype, out, "norm")


# ---------------------------------------------------------------------------
# all / any / count_nonzero
# ---------------------------------------------------------------------------


def _logical(op, self, dims, keepdim, out):
    check_same_device(op, self, out)
    resize_out(out, reduced_shape(self, dims, keepdim))
    return run_reduce(op, out, self, dims)


@impl("all.out")
def all_out(self, dim, keepdim=False, *, out):
    return _logical("all", self, reduce_dims(self, [dim]), keepdim, out)


@impl("any.out")
def any_out(self, dim, keepdim=False, *, out):
    return _logical("any", self, reduce_dims(self, [dim]), keepdim, out)


@impl("all.dims_out")
def all_dims_out(self, dim=None, keepdim=False, *, out):
    return _logical("all", self, reduce_dims(self, dim), keepdim, out)


@impl("any.dims_out")
def any_dims_out(self, dim=None, keepdim=False, *, out):
    return _logical("any", self, reduce_dims(self, dim), keepdim, out)


@impl("all.all_out")
def all_all_out(self, *, out):
    return _logical("all", self, list(range(self.dim())), False, out)


@impl("any.all_out")
def any_all_out(self, *, out):
    return _logical("any", self, list(range(self.dim())), False, out)


@impl("count_nonzero.dim_IntList")
def count_nonzero_dims(self, dim):
    check_same_device("count_nonzero", self)
    dims = reduce_dims(self, dim)
    out = torch.empty(reduced_shape(self, dims, False), dtype=torch.int64, device=self.device)
    return run_reduce("count_nonzero", out, self, dims)


@impl("trace")
def trace(self):
    check_same_device("trace", self)
    if self.dtype == torch.bool:
        raise NotImplementedError("\"trace\" not implemented for 'Bool' on foo")
    if self.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    out = torch.empty((), dtype=_default_sum_dtype(self, None), device=self.device)
    return run_reduce("sum", out, self.diagonal(), [0])


# ---------------------------------------------------------------------------
# cumsum / cumprod
# ---------------------------------------------------------------------------


def _scan(name, prod, self, dim, dtype, out):
    check_same_device(name, self, out)
    d = wrap_dim(dim, self.dim())
    cd = dtype if dtype is not None else (torch.int64 if self.dtype in _INTEGRAL_OR_BOOL else self.dtype)
    check_out(out, self.shape, cd)
    x = _cast_for(self, cd)
    nat = x.dtype if x.dtype.is_floating_point else torch.int64
    if out.dtype == nat:
        _C.scan(prod, desc(out), desc(x), d)
    else:
        tmp = torch.empty(out.shape, dtype=nat, device=out.device)
        _C.scan(prod, desc(tmp), desc(x), d)
        out.copy_(tmp)
    return out


@impl("cumsum.out")
def cumsum_out(self, dim, *, dtype=None, out):
    return _scan("cumsum", False, self, dim, dtype, out)


@impl("cumprod.out")
def cumprod_out(self, dim, *, dtype=None, out):
    return _scan("cumprod", True, self, dim, dtype, out)


__all__ = ["reduce_dims", "reduced_shape", "run_reduce", "wrap_dim", "c10_name"]
