"""How foo kernels are registered with torch.library, and what they share."""

from __future__ import annotations

from typing import Callable

import torch

from .. import _C
from .._dtypes import DTYPE_CODE

__all__ = ["impl", "desc", "DTYPE_CODE", "_C", "check_same_device", "registered_ops", "dtype_code"]

_lib = torch.library.Library("aten", "IMPL")
_registered: set[str] = set()


def impl(*aten_names: str) -> Callable:
    """Registers the decorated function as the PrivateUse1 (foo) kernel of
    each aten operator overload named, e.g. ``@impl("add.Tensor", "add.out")``."""

    def register(fn: Callable) -> Callable:
        for name in aten_names:
            _lib.impl(name, fn, "PrivateUse1")
            _registered.add(name)
        return fn

    return register


def registered_ops() -> frozenset[str]:
    """The aten overloads with a native foo kernel registered from Python."""
    return frozenset(_registered)


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return DTYPE_CODE[dtype]
    except KeyError:
        raise TypeError(f"foo does not support dtype {dtype}") from None


def desc(t: torch.Tensor) -> tuple:
    """The (data_ptr, dtype code, sizes, strides) tuple a Rust kernel takes."""
    try:
        code = DTYPE_CODE[t.dtype]
    except KeyError:
        raise TypeError(f"foo does not support dtype {t.dtype}") from None
    return (t.data_ptr(), code, t.shape, t.stride())


def check_same_device(opname: str, *tensors: torch.Tensor) -> None:
    """Raises CUDA's error when foo tensors on different foo devices (or a
    foo tensor and a non-scalar CPU tensor) meet in one op."""
    first = None
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        dev = t.device
        if dev.type == "cpu" and t.dim() == 0:
            continue
        if first is None:
            first = dev
        elif dev != first:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{first} and {dev}! (when checking argument for {opname})"
            )
