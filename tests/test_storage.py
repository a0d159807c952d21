"""Storage on foo: creation, moves, unsupported dtypes, serialization."""

import io

import pytest
import torch

import foo_rs  # noqa: F401  (registers the foo device)
from foo_testing import FOO_DTYPES, make_tensor


def test_untyped_storage_on_foo():
    s = torch.UntypedStorage(8, device="foo")
    assert s.device.type == "foo"
    assert s.nbytes() == 8
    assert s.is_foo


def test_storage_to_foo_keeps_bytes():
    t = torch.arange(4, dtype=torch.int32)
    s = t.untyped_storage().foo()
    assert s.is_foo
    assert bytes(s.cpu()) == bytes(t.untyped_storage())


def test_typed_storage_unsupported_dtype_raises():
    ts = torch.TypedStorage(4, dtype=torch.complex32)
    with pytest.raises(RuntimeError, match="complex32"):
        ts.foo()


@pytest.mark.parametrize("dtype", FOO_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "zero-size", "scalar"])
def test_round_trip_exact(dtype, layout):
    base = make_tensor((4, 6), dtype)
    x = {
        "contiguous": base,
        "transposed": base.t(),
        "sliced": base[1:, ::2],
        "zero-size": base[:0],
        "scalar": base[1, 2],
    }[layout]
    y = x.to("foo")
    assert y.device.type == "foo" and y.dtype == dtype and y.shape == x.shape
    back = y.cpu()
    assert torch.equal(back, x)


def test_save_load_round_trip(tmp_path):
    tensors = {
        "w": torch.randn(3, 4).foo(),
        "i": torch.arange(5).foo(),
        "h": torch.randn(2, 2).to(torch.bfloat16).foo(),
        "t": torch.randn(4, 3).foo().t(),
    }
    path = tmp_path / "ckpt.pt"
    torch.save(tensors, path)
    for map_location, expect in [(None, "foo"), ("foo", "foo"), ("cpu", "cpu")]:
        loaded = torch.load(path, map_location=map_location)
        for k, v in tensors.items():
            assert loaded[k].device.type == expect, (k, map_location)
            assert torch.equal(loaded[k].cpu(), v.cpu())
            assert loaded[k].stride() == v.stride()


def test_load_cpu_checkpoint_onto_foo():
    buf = io.BytesIO()
    sd = torch.nn.Linear(4, 2).state_dict()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="foo")
    for k in sd:
        assert loaded[k].device.type == "foo"
        assert torch.equal(loaded[k].cpu(), sd[k])
