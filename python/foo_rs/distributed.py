"""torch.distributed on foo: a c10d process group that moves foo tensors with gloo.

foo's memory is ordinary host memory, so gloo can read and write it in place: each foo
tensor is handed to a ``ProcessGroupGloo`` as a CPU tensor that aliases its bytes (no
staging copy). A non-contiguous foo tensor goes through a contiguous foo copy, copied back
when the collective completes. gloo does the reductions (communication-library compute);
no torch CPU kernel runs on foo memory.

``import foo_rs`` registers the backend as ``"foo_gloo"`` for the devices ``foo`` and ``cpu``
and makes it foo's default, so ``init_process_group()`` with no backend picks it (as it
picks nccl for CUDA). Explicit forms: ``init_process_group("foo_gloo")`` or
``init_process_group("cpu:gloo,foo:foo_gloo")``; either serves CPU and foo tensors.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

#: The name ``init_process_group`` knows this backend by.
BACKEND_NAME = "foo_gloo"

#: The ``backend`` argument that gives CPU tensors plain gloo and foo tensors this backend.
EXPLICIT_FORM = f"cpu:gloo,foo:{BACKEND_NAME}"

_Work = getattr(dist, "Work", None) or dist._Work  # type: ignore[attr-defined]


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the bytes of foo tensor ``t`` (same shape, strides and offset).

    The alias keeps ``t``'s storage alive through the ctypes buffer it is built on, so
    gloo may hold it past the caller's last reference (async collectives)."""
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0 or t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    buf = (ctypes.c_char * nbytes).from_address(storage.data_ptr())
    buf._foo_storage = storage  # type: ignore[attr-defined]  # lifetime: alias -> buf -> storage
    flat = torch.frombuffer(buf, dtype=torch.uint8)
    return flat.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def _aliasable(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.untyped_storage().nbytes() % t.element_size() == 0


class _Mapper:
    """Turns the foo tensors of one call's arguments into CPU tensors gloo accepts."""

    def __init__(self) -> None:
        #: (foo tensor, contiguous foo copy) pairs to copy back once the collective is done.
        self.staged: list[tuple[torch.Tensor, torch.Tensor]] = []
        #: (CPU view handed to gloo, the foo tensor it stands for), to map results back.
        self.aliases: list[tuple[torch.Tensor, torch.Tensor]] = []

    def map(self, obj: Any, output: bool) -> Any:
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "foo":
                return obj
            if _aliasable(obj):
                alias = _cpu_alias(obj)
            else:
                staged = obj.contiguous()
                if output:
                    self.staged.append((obj, staged))
                alias = _cpu_alias(staged)
            self.aliases.append((alias, obj))
            return alias
        if isinstance(obj, list):
            return [self.map(o, output) for o in obj]
        if isinstance(obj, tuple):
            return tuple(self.map(o, output) for o in obj)
        return obj


class _FooWork(_Work):  # type: ignore[misc,valid-type]
    """gloo's work on CPU views of foo tensors, seen as work on the foo tensors: ``wait()``
    copies staged outputs back, ``result()`` and the future's value are the foo tensors."""

    def __init__(self, inner: Any, mapper: _Mapper) -> None:
        super().__init__()
        self._inner = inner
        self._staged = mapper.staged
        self._aliases = mapper.aliases
        self._lock = threading.Lock()
        self._done = not self._staged

    def _copy_back(self) -> None:
        with self._lock:
            if not self._done:
                for dst, src in self._staged:
                    dst.copy_(src)
                self._done = True

    def _to_foo(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            for alias, foo in self._aliases:
                if (
                    value.data_ptr() == alias.data_ptr()
                    and value.dtype == alias.dtype
                    and value.shape == alias.shape
                ):
                    return foo
            return value
        if isinstance(value, list):
            return [self._to_foo(v) for v in value]
        return value

    def wait(self, timeout: timedelta | None = None) -> bool:
        ok = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        self._copy_back()
        return ok

    def is_completed(self) -> bool:
        return self._inner.is_completed() and self._done

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self) -> Any:
        return self._inner.exception()

    def source_rank(self) -> int:
        return self._inner.source_rank()

    def result(self) -> list[torch.Tensor]:
        return self._to_foo(self._inner.result())

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        def finish(fut: torch.futures.Future) -> Any:
            value = fut.value()  # raises if the collective failed
            self._copy_back()
            return self._to_foo(value)

        return self._inner.get_future().then(finish)


def _collective(name: str, outputs: bool) -> Callable[..., Any]:
    def method(self: FooGlooProcessGroup, *args: Any) -> Any:
        mapper = _Mapper()
        mapped = [mapper.map(a, output=outputs and i == 0) for i, a in enumerate(args)]
        try:
            work = getattr(self._inner, name)(*mapped)
        except (RuntimeError, ValueError, TypeError) as e:
            if not mapper.aliases:
                raise
            # gloo checked CPU views of the foo tensors: say so, keep the exception type
            try:
                named = type(e)(
                    f"{BACKEND_NAME} {name} on foo tensors (passed to gloo as CPU views of foo "
                    f"memory, so gloo's message says cpu): {e}"
                )
            except Exception:  # noqa: BLE001  (an exception type with another constructor)
                raise e from None
            raise named from e
        return _FooWork(work, mapper) if mapper.aliases else work

    method.__name__ = name
    method.__doc__ = f"``ProcessGroup.{name}`` with foo tensors passed to gloo as CPU aliases."
    return method


#: ProcessGroup methods whose first argument holds the outputs (or the in-place tensors).
_COLLECTIVES_WITH_OUTPUT = (
    "allreduce",
    "allreduce_coalesced",
    "broadcast",
    "reduce",
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced",
    "gather",
    "scatter",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "recv",
    "recv_anysource",
)
_COLLECTIVES_INPUT_ONLY = ("send",)


class FooGlooProcessGroup(dist.ProcessGroup):
    """A process group for foo (and CPU) tensors whose transport and reductions are gloo.

    An ordinary c10d ``ProcessGroup`` with a ``ProcessGroupGloo`` backend does the work; this
    class hands it CPU aliases of foo tensors. The gloo backend is also registered on this
    group for ``cpu`` and ``foo``, so ``pg._get_backend(device)`` (timeouts, options) answers."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # (store, rank, size) cannot build a Python subclass on torch 2.13
        gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._gloo = gloo
        if dist.get_debug_level() == dist.DebugLevel.DETAIL:
            # as torch does for its own backends: check every collective's shapes and dtypes
            # across ranks first (a separate helper gloo group), so a mismatch raises
            gloo = dist.distributed_c10d._create_process_group_wrapper(
                gloo, "foo_gloo", store, rank, size, timeout
            )
        self._inner = dist.ProcessGroup(store, rank, size)
        gloo_type = dist.ProcessGroup.BackendType.GLOO
        self._inner._set_default_backend(gloo_type)
        self._inner._register_backend(torch.device("cpu"), gloo_type, gloo)
        self._set_default_backend(gloo_type)
        for device in ("cpu", "foo"):
            self._register_backend(torch.device(device), gloo_type, gloo)

    def getBackendName(self) -> str:  # noqa: N802  (the C++ name the trampoline asks for)
        return BACKEND_NAME

    def barrier(self, opts: Any = None) -> Any:
        opts = dist.BarrierOptions() if opts is None else opts
        if getattr(opts, "device", None) is not None and opts.device.type == "foo":
            opts.device = torch.device("cpu")
        return self._inner.barrier(opts)

    def monitored_barrier(self, *args: Any, **kwargs: Any) -> Any:
        return self._gloo.monitored_barrier(*args, **kwargs)


for _name in _COLLECTIVES_WITH_OUTPUT:
    setattr(FooGlooProcessGroup, _name, _collective(_name, outputs=True))
for _name in _COLLECTIVES_INPUT_ONLY:
    setattr(FooGlooProcessGroup, _name, _collective(_name, outputs=False))
del _name


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> FooGlooProcessGroup:
    return FooGlooProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Register ``foo_gloo`` with torch.distributed and make it foo's default backend."""
    backend = dist.Backend
    if BACKEND_NAME.upper() in backend._plugins:
        return
    backend.register_backend(BACKEND_NAME, _create, devices=["foo", "cpu"])
    # torch 2.13 leaves this map to the device (torch 2.15 fills it in register_backend)
    backend.default_device_backend_map.setdefault("foo", BACKEND_NAME)


__all__ = ["BACKEND_NAME", "EXPLICIT_FORM", "FooGlooProcessGroup", "register"]
