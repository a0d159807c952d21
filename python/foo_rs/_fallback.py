"""The CPU fallback: a safety net for ops that have no foo kernel.

It works like a real accelerator's would: inputs are copied across the device
boundary to the CPU, the CPU kernel runs there, and results and mutated
arguments are copied back. CPU kernels never run on foo memory. Each op warns
once (FooFallbackWarning) and is counted (``foo_rs.fallback_stats()``).
``FOO_RS_CPU_FALLBACK=0`` switches it off: such an op then raises
NotImplementedError naming the op and the foo device.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import Counter
from contextlib import contextmanager

import torch
from torch.utils._pytree import tree_flatten, tree_map

__all__ = [
    "FooFallbackWarning",
    "fallback_stats",
    "reset_fallback_stats",
    "fallback_enabled",
    "set_fallback_enabled",
    "fallback_disabled",
]


class FooFallbackWarning(UserWarning):
    """An op ran on the CPU because foo has no kernel for it."""


_enabled = os.environ.get("FOO_RS_CPU_FALLBACK", "1").strip().lower() not in ("0", "false", "off", "no")
_stats: Counter[str] = Counter()
_warned: set[str] = set()
_lock = threading.Lock()


def fallback_stats() -> dict[str, int]:
    """{aten op name: number of calls that fell back to the CPU}."""
    with _lock:
        return dict(_stats)


def reset_fallback_stats() -> None:
    with _lock:
        _stats.clear()


def fallback_enabled() -> bool:
    return _enabled


def set_fallback_enabled(enabled: bool) -> None:
    """Switches the CPU fallback on or off at run time (see FOO_RS_CPU_FALLBACK)."""
    global _enabled
    _enabled = bool(enabled)


@contextmanager
def fallback_disabled():
    """Within the block, an op without a foo kernel raises NotImplementedError."""
    global _enabled
    old = _enabled
    _enabled = False
    try:
        yield
    finally:
        _enabled = old


# Ops that write arguments their schema does not mark as mutable.
_UNDECLARED_MUTATIONS: dict[str, set[str]] = {
    "aten::native_batch_norm": {"running_mean", "running_var"},
    "aten::native_batch_norm.out": {"running_mean", "running_var"},
    "aten::batch_norm_update_stats": {"running_mean", "running_var"},
}


def _op_name(op) -> str:
    schema = op._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _foo_view_of(foo_storage, like: torch.Tensor, device) -> torch.Tensor:
    t = torch.empty(0, dtype=like.dtype, device=device)
    return t.set_(foo_storage, like.storage_offset(), like.shape, like.stride())


class _ToCpu:
    """Copies foo tensors to the CPU, one CPU copy per foo storage, so that
    views and aliases among the arguments stay views and aliases."""

    def __init__(self):
        self.storages: dict[int, tuple] = {}  # foo storage ptr -> (foo storage, cpu storage)
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (foo, cpu)

    def __call__(self, x):
        if isinstance(x, torch.device) and x.type == "foo":
            return torch.device("cpu")
        if not isinstance(x, torch.Tensor) or x.device.type != "foo":
            return x
        storage = x.untyped_storage()
        key = storage.data_ptr()
        entry = self.storages.get(key) if storage.nbytes() else None
        if entry is None:
            cpu_storage = torch.UntypedStorage(storage.nbytes())
            if storage.nbytes():
                src = torch.empty(0, dtype=torch.uint8, device=x.device).set_(storage)
                dst = torch.empty(0, dtype=torch.uint8).set_(cpu_storage)
                dst.copy_(src)
                self.storages[key] = (storage, cpu_storage)
            entry = (storage, cpu_storage)
        cpu = torch.empty(0, dtype=x.dtype).set_(entry[1], x.storage_offset(), x.shape, x.stride())
        cpu.requires_grad_(False)
        self.pairs.append((x, cpu))
        return cpu


def _device_of(args, kwargs):
    flat, _ = tree_flatten((args, kwargs))
    found = None
    for x in flat:
        dev = None
        if isinstance(x, torch.Tensor) and x.device.type == "foo":
            dev = x.device
        elif isinstance(x, torch.device) and x.type == "foo":
            dev = torch.device("foo", x.index if x.index is not None else torch.foo.current_device())
        if dev is not None:
            if found is None:
                found = dev
            elif dev != found and isinstance(x, torch.Tensor):
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, {found} and {dev}!"
                )
    return found if found is not None else torch.device("foo", torch.foo.current_device())


def cpu_fallback(op, *args, **kwargs):
    name = _op_name(op)
    if not _enabled:
        raise NotImplementedError(
            f"The operator '{name}' is not implemented for the foo device, and the CPU fallback "
            "is switched off (FOO_RS_CPU_FALLBACK=0)."
        )
    with _lock:
        _stats[name] += 1
        first = name not in _warned
        _warned.add(name)
    if first:
        warnings.warn(
            f"foo_rs: '{name}' has no foo kernel; it runs on the CPU, copying its tensors across "
            "the device boundary (this warning is shown once per op).",
            FooFallbackWarning,
            stacklevel=3,
        )
    device = _device_of(args, kwargs)
    to_cpu = _ToCpu()
    cpu_args = tree_map(to_cpu, args)
    cpu_kwargs = tree_map(to_cpu, kwargs)
    out = op(*cpu_args, **cpu_kwargs)

    # Copy mutated arguments back.
    schema_args = op._schema.arguments
    mutated_names = {a.name for a in schema_args if a.alias_info is not None and a.alias_info.is_write}
    mutated_names |= _UNDECLARED_MUTATIONS.get(name, set())
    if mutated_names:
        by_name = {}
        for i, a in enumerate(schema_args):
            if a.name not in mutated_names:
                continue
            if a.kwarg_only or i >= len(args):
                v, cv = kwargs.get(a.name), cpu_kwargs.get(a.name)
            else:
                v, cv = args[i], cpu_args[i]
            by_name[a.name] = (v, cv)
        for v, cv in by_name.values():
            foo_list = v if isinstance(v, (list, tuple)) else [v]
            cpu_list = cv if isinstance(cv, (list, tuple)) else [cv]
            for f, c in zip(foo_list, cpu_list):
                if isinstance(f, torch.Tensor) and f.device.type == "foo":
                    if f.shape != c.shape or f.stride() != c.stride():
                        f.resize_(c.shape)
                        if f.stride() != c.stride() and c.is_contiguous() is False:
                            f.as_strided_(c.shape, c.stride())
                    f.copy_(c)

    cpu_to_foo = {id(c): f for f, c in to_cpu.pairs}
    storage_map = {cpu.data_ptr(): foo for foo, cpu in to_cpu.storages.values()}

    def back(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) in cpu_to_foo:
            return cpu_to_foo[id(x)]
        if x.device.type != "cpu":
            return x
        if x.numel() and x.untyped_storage().data_ptr() in storage_map:
            return _foo_view_of(storage_map[x.untyped_storage().data_ptr()], x, device)
        return x.to(device)

    return tree_map(back, out)


_lib = torch.library.Library("_", "IMPL")
_lib.fallback(cpu_fallback, "PrivateUse1")
