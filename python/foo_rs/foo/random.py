"""RNG state of foo devices: Philox4x32-10 (seed, offset) kept in Rust.

A state is a CPU ByteTensor of 16 bytes: seed then offset, little-endian u64s
(the layout foo's torch.Generator uses too)."""

from __future__ import annotations

import struct
from typing import Any
from collections.abc import Iterable

import torch

from .. import _C

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]


def _index(device: Any) -> int:
    from . import _get_device_index

    return _get_device_index(device, optional=True)


def get_rng_state(device: Any = "foo") -> torch.Tensor:
    """The random number generator state of a foo device as a ByteTensor."""
    seed_, offset = _C.rng_state(_index(device))
    return torch.frombuffer(bytearray(struct.pack("<QQ", seed_, offset)), dtype=torch.uint8)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(_C.device_count())]


def set_rng_state(new_state: torch.Tensor, device: Any = "foo") -> None:
    """Restores a state returned by get_rng_state."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("foo RNG state must be a torch.ByteTensor")
    if new_state.numel() != 16:
        raise RuntimeError(f"foo RNG state must have 16 bytes (seed, offset), got {new_state.numel()}")
    seed_, offset = struct.unpack("<QQ", bytes(new_state.cpu().contiguous().tolist()))
    _C.set_rng_state(seed_, offset, _index(device))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


def _to_u64(seed_: int) -> int:
    return int(seed_) & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed(seed: int) -> None:
    """Seeds the current foo device."""
    _C.manual_seed(_to_u64(seed), None)


def manual_seed_all(seed: int) -> None:
    """Seeds every foo device (torch.manual_seed calls this)."""
    for i in range(_C.device_count()):
        _C.manual_seed(_to_u64(seed), i)


def seed() -> None:
    """Seeds the current foo device with a random number."""
    _C.manual_seed(_C.random_seed(), None)


def seed_all() -> None:
    s = _C.random_seed()
    for i in range(_C.device_count()):
        _C.manual_seed(s, i)


def initial_seed() -> int:
    """The seed of the current foo device."""
    return _C.rng_state(None)[0]
