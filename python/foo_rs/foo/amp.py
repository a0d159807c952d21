"""Autocast settings of foo (torch.autocast("foo"))."""

from __future__ import annotations

import torch

__all__ = [
    "get_amp_supported_dtype",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes autocast may use on foo."""
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("foo")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("foo", bool(enabled))


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("foo")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    supported = get_amp_supported_dtype()
    if dtype not in supported:
        raise ValueError(f"foo autocast supports only {', '.join(str(d) for d in supported)}; got {dtype}")
    torch.set_autocast_dtype("foo", dtype)
