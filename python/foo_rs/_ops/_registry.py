"""How foo kernels are registered with torch.library, and what they share."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

import torch

from .. import _C
from .._dtypes import DTYPE_CODE

__all__ = [
    "impl",
    "desc",
    "DTYPE_CODE",
    "_C",
    "check_same_device",
    "registered_ops",
    "dtype_code",
    "fast_lane_ops",
    "FAST_LANE",
    "python_kernel_calls",
    "native_only",
    "complex_kernel",
]

_lib = torch.library.Library("aten", "IMPL")
_registered: set[str] = set()

#: The native path: overloads whose foo kernel is C++ (rust/glue/native.cpp):
#: ATen's own meta function, then Rust, with no Python in between, for every
#: call the op's Rust kernel covers (dtypes, broadcasting, strides, Python
#: numbers, out= and in-place); this module's Python kernel otherwise.
#: ``FOO_RS_FAST_LANE=0`` registers the Python kernels directly instead.
FAST_LANE: frozenset[str] = frozenset(_C.fast_ops()) if os.environ.get("FOO_RS_FAST_LANE", "1") != "0" else frozenset()
_slow_lib = torch.library.Library("foo_slow", "DEF")
_fast: set[str] = set()
_python_calls: Counter[str] = Counter()


def _register_fast(name: str, fn: Callable) -> None:
    # The Python kernel becomes the PrivateUse1 kernel of foo_slow::<name>,
    # an op with the aten overload's schema, which the C++ kernel calls for
    # every case it does not handle itself.
    base, _, ov = name.partition(".")
    schema = str(getattr(getattr(torch.ops.aten, base), ov or "default")._schema)
    slow = name.replace(".", "_")
    _slow_lib.define(slow + schema[schema.index("(") :])
    _slow_lib.impl(slow, fn, "PrivateUse1")
    _C.register_fast(name)
    _fast.add(name)


def impl(*aten_names: str, dispatch_key: str = "PrivateUse1", complex_ok: bool = False) -> Callable:
    """Registers the decorated function as the PrivateUse1 (foo) kernel of
    each aten operator overload named, e.g. ``@impl("add.Tensor", "add.out")``
    (behind the fast lane's C++ kernel for the overloads in ``FAST_LANE``).
    ``dispatch_key="AutogradPrivateUse1"`` registers it above autograd
    instead (an op that brings its own ``torch.autograd.Function``).
    Kernels are real unless ``complex_ok``: a call with a complex tensor
    goes to the CPU fallback (as an op without a foo kernel does)."""

    def register(fn: Callable) -> Callable:
        for name in aten_names:
            kernel = _counted(name, fn, real_only=not complex_ok and dispatch_key == "PrivateUse1")
            if name in FAST_LANE and dispatch_key == "PrivateUse1":
                _register_fast(name, kernel)
            else:
                _lib.impl(name, kernel, dispatch_key)
            _registered.add(name)
        return fn

    return register


def native_only(*aten_names: str) -> None:
    """Registers the C++ kernel (rust/glue/native.cpp) of each aten overload
    that has no Python form (its rule lives in C++ alone; registered with the
    fast lane off too)."""
    for name in aten_names:
        _C.register_fast(name)
        _registered.add(name)


def register_foreach() -> None:
    """Registers the C++ kernels of the ``_foreach_*`` overloads (torch.optim's
    default path on foo): each runs its per-tensor op's native kernel on
    every tensor of its lists, so it is registered after every other op
    (``_C.register_fast`` refuses one whose per-tensor op is not registered).
    With the fast lane off, ATen's own per-tensor loops run them."""
    for name in sorted(n for n in FAST_LANE if n.startswith("_foreach_")):
        _C.register_fast(name)
        _fast.add(name)
        _registered.add(name)


def fast_lane_ops() -> frozenset[str]:
    """The overloads registered behind the fast lane's C++ kernels."""
    return frozenset(_fast)


#: Complex forms of real kernels (aten overload -> Python kernel), which a
#: real kernel's complex call runs instead of the CPU fallback.
_complex_kernels: dict[str, Callable] = {}


def complex_kernel(name: str) -> Callable:
    """Registers the decorated function as the complex form of the real
    kernel of aten overload ``name`` (registered with ``impl``)."""

    def register(fn: Callable) -> Callable:
        _complex_kernels[name] = fn
        return fn

    return register


def _has_complex(args, kwargs) -> bool:
    for a in (*args, *kwargs.values()):
        if isinstance(a, complex):
            return True
        if isinstance(a, torch.Tensor):
            if a.is_complex():
                return True
        elif isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) and t.is_complex() for t in a):
            return True
    return False


def _aten_overload(name: str):
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def _counted(name: str, fn: Callable, real_only: bool = False) -> Callable:
    if real_only:
        from .._fallback import cpu_fallback

        def kernel(*args, **kwargs):
            if _has_complex(args, kwargs):
                alt = _complex_kernels.get(name)
                if alt is not None:
                    _python_calls[name] += 1
                    return alt(*args, **kwargs)
                # A real kernel: complex goes where an op without a foo kernel goes.
                return cpu_fallback(_aten_overload(name), *args, **kwargs)
            _python_calls[name] += 1
            return fn(*args, **kwargs)

    else:

        def kernel(*args, **kwargs):
            _python_calls[name] += 1
            return fn(*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", name)
    return kernel


def python_kernel_calls() -> Counter[str]:
    """How often each aten overload ran a Python kernel since import: ops
    without a native C++ kernel, and native-path calls the Rust kernel does
    not cover (``foo_rs.python_kernel_calls()`` shows where Python remains)."""
    return Counter(_python_calls)


def registered_ops() -> frozenset[str]:
    """The aten overloads with a native foo kernel registered from Python."""
    return frozenset(_registered)


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return DTYPE_CODE[dtype]
    except KeyError:
        raise TypeError(f"foo does not support dtype {dtype}") from None


class _Desc(tuple):
    """A tensor descriptor that keeps its tensor alive. A temporary such as
    ``_C.f(desc(x.contiguous()), desc(torch.empty(...)))`` would otherwise be
    freed as soon as ``desc`` returns, and its memory handed by the caching
    allocator to the next allocation (here the second argument) or, while
    the kernel runs without the GIL, to another thread: the kernel would
    read and write memory someone else owns."""

    # (tuple subclasses cannot have __slots__ with members; the instance
    # __dict__ holds the tensor.)


def desc(t: torch.Tensor) -> tuple:
    """The (data_ptr, dtype code, sizes, strides) tuple a Rust kernel takes;
    it holds a reference to ``t`` for as long as it lives (see _Desc)."""
    try:
        code = DTYPE_CODE[t.dtype]
    except KeyError:
        raise TypeError(f"foo does not support dtype {t.dtype}") from None
    d = _Desc((t.data_ptr(), code, t.shape, t.stride()))
    d.tensor = t
    return d


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
