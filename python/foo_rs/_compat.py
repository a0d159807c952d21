"""Behaviours that differ between the torch versions foo_rs supports.

foo follows the torch it runs on. Where torch CPU changed what users see
between 2.13 and 2.15 (a result, an exception type), foo asks the installed
torch once, on tiny CPU tensors, instead of keeping a table of versions:
a new torch that changes the behaviour again is followed as well.
"""

from __future__ import annotations

import functools
from typing import NoReturn
from collections.abc import Callable

import torch


@functools.cache
def clamp_checks_integer_range() -> bool:
    """torch >= 2.15: an integer bound outside an integer tensor's range is
    ignored when it clamps nothing (``clamp_min(uint8, -3)``) and an error
    when it would clamp everything; older torch wraps it into the dtype."""
    return torch.clamp_min(torch.zeros(1, dtype=torch.uint8), -3).item() == 0


@functools.cache
def linspace_low_precision_in_opmath() -> bool:
    """torch >= 2.15 computes float16/bfloat16 linspace in float and rounds
    once; older torch computes the step and each value in the half type."""
    return torch.linspace(0, 10, 7, dtype=torch.float16)[4].item() == 6.66796875


@functools.cache
def arange_int64_size_from_doubles() -> bool:
    """torch >= 2.15 sizes an int64 arange from the double bounds and step,
    as for every other dtype (``arange(3.1, dtype=int64)`` has 4 elements; a
    fractional step that truncates to 0 fills with the start); torch 2.13
    sizes it from the truncated int64 values (3 elements) and raises
    ValueError for a step that truncates to 0."""
    return torch.arange(3.1, dtype=torch.int64).numel() == 4


def raise_like_cpu(cpu_call: Callable[[], object], otherwise: BaseException) -> NoReturn:
    """Raises the exception torch CPU raises for ``cpu_call`` (a call of the
    same op on CPU stand-ins of the arguments), its type and message, naming
    foo; ``otherwise`` if the CPU call does not raise. ATen stays the one
    place of the rule: its type and text follow the installed torch."""
    try:
        with torch.no_grad():
            cpu_call()
    except Exception as e:  # noqa: BLE001 - re-raised as foo's
        try:
            err = type(e)(f"{e} (foo)")
        except Exception:  # noqa: BLE001 - an exception type with another constructor
            raise e from None
        raise err from None
    raise otherwise
