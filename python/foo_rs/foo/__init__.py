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
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
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

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device",
    "device", "device_of", "synchronize", "get_device_name", "get_device_properties",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "get_amp_supported_dtype", "is_autocast_enabled", "set_autocast_enabled",
    "get_autocast_dtype", "set_autocast_dtype",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_stats",
    "memory_summary", "empty_cache", "mem_get_info", "set_per_process_memory_fraction",
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


def synchronize(device: Any = None) -> None:
    """Waits for all kernels on a foo device: they run synchronously, so this
    only validates the device."""
    idx = _get_device_index(device, optional=True)
    if not 0 <= idx < device_count():
        raise RuntimeError(f"Invalid foo device index {idx}")


def get_device_name(device: Any = None) -> str:
    idx = _get_device_index(device, optional=True)
    return f"foo:{idx} (foo_rs, Rust on the host CPU)"


class _DeviceProperties:
    def __init__(self, idx: int):
        self.name = get_device_name(idx)
        self.total_memory = mem_get_info(idx)[1]
        self.index = idx

    def __repr__(self) -> str:
        return f"_FooDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1 << 20)}MB)"


def get_device_properties(device: Any = None) -> _DeviceProperties:
    return _DeviceProperties(_get_device_index(device, optional=True))
