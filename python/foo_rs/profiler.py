"""Where time goes on foo: per aten op calls, total time, native or fallback.

    with foo_rs.profiler.op_profile() as prof:
        train_step()
    print(prof.table())

Runs every op through a TorchDispatchMode (so it adds a little per-op cost of
its own); an op counts as "fallback" when the CPU fallback served it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._fallback import fallback_stats

__all__ = ["op_profile", "OpProfile"]


class OpProfile:
    """Per-op totals gathered by :func:`op_profile`."""

    def __init__(self):
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.fallback_calls: dict[str, int] = defaultdict(int)

    def rows(self):
        """(op, calls, total ms, mean us, route) sorted by total time."""
        out = []
        for op, n in self.calls.items():
            fb = self.fallback_calls.get(op, 0)
            route = "native" if fb == 0 else ("fallback" if fb >= n else f"fallback x{fb}")
            total = self.seconds[op]
            out.append((op, n, total * 1e3, total / n * 1e6, route))
        return sorted(out, key=lambda r: -r[2])

    def table(self) -> str:
        lines = ["| op | calls | total ms | mean us | route |", "|---|---:|---:|---:|---|"]
        for op, n, ms, us, route in self.rows():
            lines.append(f"| {op} | {n} | {ms:.3f} | {us:.1f} | {route} |")
        return "\n".join(lines)


class _Mode(TorchDispatchMode):
    def __init__(self, prof: OpProfile):
        super().__init__()
        self.prof = prof

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.name())
        involves_foo = (
            any(
                isinstance(a, torch.Tensor) and a.device.type == "foo"
                for a in torch.utils._pytree.tree_leaves((args, kwargs or {}))
            )
            or (kwargs or {}).get("device") is not None
            and "foo" in str(kwargs.get("device"))
        )
        before = fallback_stats() if involves_foo else None
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        dt = time.perf_counter() - t0
        if involves_foo:
            self.prof.calls[name] += 1
            self.prof.seconds[name] += dt
            after = fallback_stats()
            if after != before:
                self.prof.fallback_calls[name] += 1
        return out


@contextmanager
def op_profile():
    """Collects per-op calls and time of every op touching a foo tensor."""
    prof = OpProfile()
    with _Mode(prof):
        yield prof
