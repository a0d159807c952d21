"""torch.autocast("foo") and the AMP settings of torch.foo."""

import pytest
import torch


def test_amp_settings_api():
    assert torch.foo.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.foo.get_autocast_dtype() == torch.float16
    assert torch.foo.is_autocast_enabled() is False
    torch.foo.set_autocast_enabled(True)
    try:
        assert torch.foo.is_autocast_enabled() is True
        assert torch.is_autocast_enabled("foo")
    finally:
        torch.foo.set_autocast_enabled(False)
    torch.foo.set_autocast_dtype(torch.bfloat16)
    try:
        assert torch.foo.get_autocast_dtype() == torch.bfloat16
    finally:
        torch.foo.set_autocast_dtype(torch.float16)


def test_set_autocast_dtype_rejects_unsupported():
    with pytest.raises(ValueError, match="foo"):
        torch.foo.set_autocast_dtype(torch.float64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_policies(dtype):
    m = torch.nn.Linear(8, 4).to("foo")
    x = torch.randn(5, 8, device="foo")
    with torch.autocast("foo", dtype=dtype):
        y = m(x)
        assert y.dtype == dtype  # lower-precision op
        assert torch.mm(x, x.t()).dtype == dtype
        assert torch.softmax(y, -1).dtype == torch.float32  # float32 op
        assert torch.addcmul(x, x.to(dtype), x).dtype == torch.float32  # promote op
        assert torch.mm(x.double(), x.double().t()).dtype == torch.float64  # doubles untouched
    assert m(x).dtype == torch.float32


def test_autocast_matches_cpu_autocast_values():
    torch.manual_seed(0)
    m = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = m(x)
    mf = m.to("foo")
    with torch.autocast("foo", dtype=torch.bfloat16):
        got = mf(x.to("foo"))
    assert got.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu(), ref, atol=2e-2, rtol=2e-2)


def test_autocast_backward_gives_float32_grads():
    m = torch.nn.Linear(8, 2).to("foo")
    x = torch.randn(3, 8, device="foo")
    with torch.autocast("foo", dtype=torch.bfloat16):
        loss = m(x).float().square().mean()
    loss.backward()
    assert m.weight.grad.dtype == torch.float32
    assert m.weight.grad.device.type == "foo"
