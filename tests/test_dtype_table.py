"""foo's dtype table is Rust's (rust/src/dtype.rs): the Python layer, the C++
glue and torch see the same dtypes, codes and c10 values."""

import pytest
import torch

import foo_rs
from foo_rs import _C, _dtypes

QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def test_rust_table_is_in_code_order_with_torch_names():
    table = _C.dtype_table()
    assert [code for code, _, _ in table] == list(range(len(table)))
    for _, name, _ in table:
        assert isinstance(getattr(torch, name), torch.dtype), name


def test_rust_c10_values_are_torchs():
    for _, name, c10 in _C.dtype_table():
        assert torch.ops.prim.dtype(torch.empty(0, dtype=getattr(torch, name))) == c10, name


def test_python_table_is_rusts():
    expected = {getattr(torch, name): code for code, name, _ in _C.dtype_table()}
    assert _dtypes.DTYPE_CODE == expected
    assert list(foo_rs.SUPPORTED_DTYPES) == list(expected)
    assert not set(foo_rs.UNSUPPORTED_DTYPES) & set(expected)


@pytest.mark.skipif(
    not hasattr(torch.accelerator, "get_device_capability"),
    reason="torch.accelerator.get_device_capability is new in this torch version",
)
def test_glue_capability_is_rusts():
    cap = torch.accelerator.get_device_capability("foo")
    assert set(cap["supported_dtypes"]) == {getattr(torch, name) for _, name, _ in _C.dtype_table()}


def test_every_dtype_of_the_table_round_trips_and_no_other_is_allocated():
    names = ", ".join(name for _, name, _ in _C.dtype_table())
    for dtype in foo_rs.SUPPORTED_DTYPES:
        x = torch.arange(6).to(dtype)
        y = x.to("foo")
        assert y.dtype == dtype
        assert torch.equal(y.cpu(), x)
        assert torch.equal((y + y).cpu(), x + x)  # a kernel reads the code of each operand
    for dtype in foo_rs.UNSUPPORTED_DTYPES:
        if dtype in QUANTIZED:
            continue  # torch refuses a quantized dtype before foo sees it
        with pytest.raises(RuntimeError, match=rf"foo does not support dtype .*\(supported: {names}\)"):
            torch.empty(2, dtype=dtype, device="foo")
