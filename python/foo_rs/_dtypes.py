"""The element types foo holds, and the codes the Rust core knows them by.

The table lives once, in rust/src/dtype.rs (`DType`): ``_C.dtype_table()``
gives each dtype's code and name, the C++ glue reads the same table through
``foo_rs_dtype_code``."""

from __future__ import annotations

import torch

from . import _C

#: torch.dtype -> code of rust/src/dtype.rs `DType`.
DTYPE_CODE: dict[torch.dtype, int] = {getattr(torch, name): code for code, name, _c10 in _C.dtype_table()}

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = tuple(DTYPE_CODE)


def _all_dtypes() -> list[torch.dtype]:
    return [v for v in vars(torch).values() if isinstance(v, torch.dtype)]


#: Every dtype torch knows that foo cannot hold (complex32, float8, quantized,
#: unsigned 16/32/64, sub-byte and bit types).
UNSUPPORTED_DTYPES: list[torch.dtype] = sorted({d for d in _all_dtypes() if d not in DTYPE_CODE}, key=str)
