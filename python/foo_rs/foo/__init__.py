"""``torch.foo``: the device module of foo, with torch.cuda's names and meaning."""

from __future__ import annotations

import threading
from typing import Any

import torch

from .. import _C
from .amp import (
    get_amp_supported_dtype,
    get_autocast_dtype,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    empty_host_cache,
    host_memory_stats,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "is_available",
    "init",
    "is_initialized",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "device_of",
    "synchronize",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "host_memory_stats",
    "empty_host_cache",
    "reset_peak_host_memory_stats",
    "reset_accumulated_host_memory_stats",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "get_amp_supported_dtype",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_stats",
    "memory_summary",
    "memory_snapshot",
    "empty_cache",
    "mem_get_info",
    "set_per_process_memory_fraction",
]

_initialized = False
_init_lock = threading.Lock()


def is_available() -> bool:
    """foo is always available: its memory and compute are this machine's."""
    return device_count() > 0


def device_count() -> int:
    """Number of foo devices (FOO_RS_DEVICE_COUNT, default 2)."""
    return _C.device_count()


def is_initialized() -> bool:
    return _initialized and not _is_in_bad_fork()


def init() -> None:
    """Initialises foo (as torch.cuda.init); every foo call does it lazily."""
    _lazy_init()


def _lazy_init() -> None:
    """Initialises foo on first use; refuses in a child forked after foo_rs
    was loaded (its memory and worker threads belong to the parent)."""
    global _initialized
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize foo in forked subprocess. To use foo with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    if _initialized:
        return
    with _init_lock:
        _initialized = True


def _is_in_bad_fork() -> bool:
    """True in a child forked after foo_rs was loaded: foo raises there."""
    return _C.in_bad_fork()


def _get_device_index(device: Any, optional: bool = False) -> int:
    """Index of a foo device given as int, str, torch.device or None (current)."""
    if device is None:
        return current_device() if optional else current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "foo":
            raise ValueError(f"Expected a foo device, but got: {device}")
        return current_device() if device.index is None else device.index
    raise ValueError(f"Expected a foo device, but got: {device!r}")


def current_device() -> int:
    """Index of this thread's current foo device."""
    return _C.current_device()


def set_device(device: Any) -> None:
    """Selects the current foo device of this thread."""
    idx = _get_device_index(device)
    if idx >= 0:
        _C.set_device(idx)


class device:
    """Context manager that makes ``device`` the current foo device."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _get_device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C.set_device(self.idx)
        return self

    def __exit__(self, *exc) -> bool:
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C.set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.device.index if obj.device.type == "foo" else None)


def _checked_index(device: Any) -> int:
    idx = _get_device_index(device, optional=True)
    if not 0 <= idx < device_count():
        raise RuntimeError(
            f"Invalid foo device index {idx}: there are {device_count()} foo devices "
            "(set FOO_RS_DEVICE_COUNT to change)"
        )
    return idx


def synchronize(device: Any = None) -> None:
    """Waits for all work on all streams of a foo device. Kernels run
    synchronously, so it has finished already: this validates the device."""
    _checked_index(device)


def get_device_name(device: Any = None) -> str:
    """Name of a foo device."""
    idx = _checked_index(device)
    return f"foo:{idx} (foo_rs, Rust on the host CPU)"


# The instruction-set levels of foo's kernels, as (major) capability numbers.
_SIMD_LEVELS = ("portable", "avx2", "avx512")


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """(major, minor) capability of a foo device: major is the SIMD level its
    kernels run at (0 portable, 1 AVX2+FMA, 2 AVX-512), minor is 0."""
    _checked_index(device)
    return _SIMD_LEVELS.index(_C.ew_simd_level()), 0


class _FooDeviceProperties:
    """What ``torch.foo.get_device_properties`` returns (as CUDA's
    ``_CudaDeviceProperties``): name, total_memory (bytes, the device's
    capacity), major/minor (``get_device_capability``), simd_level,
    worker_threads (threads foo's kernels use, ``torch.get_num_threads``) and
    multi_processor_count (the same number, CUDA's name for parallel units)."""

    def __init__(self, idx: int):
        self.index = idx
        self.name = get_device_name(idx)
        self.total_memory = mem_get_info(idx)[1]
        self.major, self.minor = get_device_capability(idx)
        self.simd_level = _C.ew_simd_level()
        self.worker_threads = _C.num_threads()
        self.multi_processor_count = self.worker_threads
        self.type = "foo"

    def __repr__(self) -> str:
        return (
            f"_FooDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, simd_level='{self.simd_level}', "
            f"worker_threads={self.worker_threads})"
        )


def get_device_properties(device: Any = None) -> _FooDeviceProperties:
    """Properties of a foo device (see ``_FooDeviceProperties``)."""
    return _FooDeviceProperties(_checked_index(device))
