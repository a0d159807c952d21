"""Memory statistics and control of foo devices (torch.cuda.memory's API)."""

from __future__ import annotations

import pickle
import sys
from typing import Any

from .. import _C

__all__ = [
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_summary",
    "empty_cache",
    "mem_get_info",
    "set_per_process_memory_fraction",
    "memory_snapshot",
    "host_memory_stats",
    "empty_host_cache",
    "reset_peak_host_memory_stats",
    "reset_accumulated_host_memory_stats",
]


def _index(device: Any) -> int:
    from . import _get_device_index

    return _get_device_index(device, optional=True)


def memory_stats(device: Any = None) -> dict[str, int]:
    """Allocator statistics, with torch.cuda.memory_stats's keys."""
    return dict(sorted(_C.memory_stats(_index(device)).items()))


def memory_allocated(device: Any = None) -> int:
    """Bytes occupied by tensors on a foo device."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator (in use or cached)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _C.reset_accumulated_memory_stats(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return _C.memory_summary(_index(device))


def empty_cache() -> None:
    """Releases every cached block of every foo device to the system."""
    _C.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of a foo device."""
    return _C.mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limits a foo device to ``fraction`` of its memory."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _C.set_per_process_memory_fraction(fraction, _index(device))


# ---- History and snapshots (torch.cuda.memory's _record_memory_history,
# _snapshot, _dump_snapshot, memory_snapshot) ------------------------------
# The format is CUDA's, so torch.cuda._memory_viz and pytorch.org/memory_viz
# read it: `python -m torch.cuda._memory_viz trace_plot snap.pickle -o t.html`.


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
) -> None:
    """Starts (``enabled="all"``: every alloc/free/segment event, at most
    ``max_entries``, the oldest dropped first; ``"state"``: only what the
    live blocks were allocated by) or stops (``None``, which also drops what
    was recorded) recording foo's allocator history, for every foo device
    (``device`` is accepted for CUDA's signature). ``context`` picks the
    stack traces kept: ``None``, ``"state"`` (live blocks), ``"alloc"`` (and
    the trace's allocations), ``"all"`` (and its frees); ``stacks="python"``
    records Python frames only, ``"all"`` C++ frames too (slower to
    symbolize). Stack traces are c10's, gathered as CUDA's allocator gathers
    them."""
    _C.record_memory_history(enabled, context, stacks, max_entries, clear_history)


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """The allocator's state as ``torch.cuda.memory._snapshot()`` gives it:
    ``segments`` (every foo device's segments, each with ``device`` and its
    ``blocks``: address, size, requested_size, state ``active_allocated`` or
    ``inactive``, and the allocating stack's ``frames`` if recorded) and
    ``device_traces`` (per device, the recorded entries: action, addr, size,
    time_us, frames). foo has one stream per device as far as memory goes
    (kernels run synchronously), so ``stream`` is 0 everywhere.
    ``augment_with_fx_traces`` adds torch's FX source mapping to the frames
    (torch.cuda.memory's helper, where this torch has it)."""
    snapshot = _C.memory_snapshot()
    if augment_with_fx_traces:
        import torch.cuda.memory as cuda_memory

        augment = getattr(cuda_memory, "_augment_memory_snapshot_stack_traces", None)
        if augment is not None:
            snapshot = augment(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles :func:`_snapshot` to ``filename`` (for pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(augment_with_fx_traces=augment_with_fx_traces), f)


def memory_snapshot(mempool_id: Any = None) -> list[dict[str, Any]]:
    """Every foo device's segments and their blocks (``_snapshot()["segments"]``)."""
    return _snapshot()["segments"]


# ---- Pinned host memory (torch.cuda's host_memory_* API) -----------------


def host_memory_stats() -> dict[str, int]:
    """Statistics of foo's pinned host allocator (``Tensor.pin_memory()``,
    ``pin_memory=True``, DataLoader pinning), with the keys of
    ``torch.cuda.host_memory_stats()``: allocations, segment,
    allocated_bytes, reserved_bytes (each .current/.peak/.allocated/.freed),
    num_host_alloc, num_host_free."""
    return dict(sorted(_C.host_memory_stats().items()))


def empty_host_cache() -> None:
    """Returns the pinned host allocator's cached blocks to the system."""
    _C.host_empty_cache()


def reset_peak_host_memory_stats() -> None:
    _C.host_reset_peak_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    _C.host_reset_accumulated_memory_stats()
