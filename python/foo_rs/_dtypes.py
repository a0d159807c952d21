"""The element types foo holds, and the codes the Rust core knows them by.

The same table lives in rust/src/dtype.rs (`DType`, with c10's ScalarType
values in `DType::from_c10`) and rust/glue/foo_glue.cpp (`foo_supports`);
keep the three in step."""

from __future__ import annotations

import torch

#: torch.dtype -> code of rust/src/dtype.rs `DType`.
DTYPE_CODE: dict[torch.dtype, int] = {
    torch.bool: 0,
    torch.uint8: 1,
    torch.int8: 2,
    torch.int16: 3,
    torch.int32: 4,
    torch.int64: 5,
    torch.float16: 6,
    torch.bfloat16: 7,
    torch.float32: 8,
    torch.float64: 9,
    torch.complex64: 10,
    torch.complex128: 11,
}

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = tuple(DTYPE_CODE)


def _all_dtypes() -> list[torch.dtype]:
    return [v for v in vars(torch).values() if isinstance(v, torch.dtype)]


#: Every dtype torch knows that foo cannot hold (complex32, float8, quantized,
#: unsigned 16/32/64, sub-byte and bit types).
UNSUPPORTED_DTYPES: list[torch.dtype] = sorted({d for d in _all_dtypes() if d not in DTYPE_CODE}, key=str)
