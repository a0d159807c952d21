"""The foo device itself: naming, the device module, generated methods."""

import pytest
import torch

import foo_rs


def test_seed_document_examples():
    a = torch.tensor(2).foo()
    assert a.is_foo
    assert a.device == torch.device("foo", 0)
    assert hasattr(torch.nn.Module, "foo")
    assert torch.ones(2, device="foo").cpu().tolist() == [1.0, 1.0]
    r = torch.randn(3, device="foo")
    assert r.device.type == "foo" and r.shape == (3,) and r.dtype == torch.float32


def test_backend_is_renamed_and_module_registered():
    assert torch._C._get_privateuse1_backend_name() == "foo"
    assert torch.foo is foo_rs.foo
    assert torch.foo.is_available()
    assert torch.foo.device_count() == 2


def test_device_module_api_is_complete():
    names = [
        "is_available",
        "is_initialized",
        "_lazy_init",
        "device_count",
        "current_device",
        "set_device",
        "device",
        "synchronize",
        "_is_in_bad_fork",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "seed_all",
        "initial_seed",
        "get_rng_state",
        "set_rng_state",
        "get_rng_state_all",
        "set_rng_state_all",
        "get_amp_supported_dtype",
        "is_autocast_enabled",
        "set_autocast_enabled",
        "get_autocast_dtype",
        "set_autocast_dtype",
    ]
    missing = [n for n in names if not callable(getattr(torch.foo, n, None))]
    assert missing == []


def test_current_device_and_context_manager():
    assert torch.foo.current_device() == 0
    with torch.foo.device(1):
        assert torch.foo.current_device() == 1
        assert torch.empty(2, device="foo").device.index == 1
    assert torch.foo.current_device() == 0
    torch.foo.set_device("foo:1")
    try:
        assert torch.foo.current_device() == 1
    finally:
        torch.foo.set_device(0)


def test_invalid_device_index_raises():
    with pytest.raises(RuntimeError, match="foo"):
        torch.empty(2, device="foo:7")


def test_tensors_know_their_device_and_copy_across():
    x = torch.arange(6.0).reshape(2, 3)
    a = x.to("foo:1")
    assert a.device == torch.device("foo:1")
    b = a.to("foo:0")
    assert b.device == torch.device("foo:0")
    torch.testing.assert_close(b.cpu(), x)


def test_module_to_foo_moves_parameters():
    m = torch.nn.Linear(3, 2)
    m.foo()
    assert all(p.device.type == "foo" for p in m.parameters())
    m.to("cpu")
    assert all(p.device.type == "cpu" for p in m.parameters())


def test_unsupported_dtype_cannot_be_created():
    with pytest.raises((RuntimeError, TypeError), match="foo"):
        torch.empty(2, dtype=torch.complex32, device="foo")


def test_item_and_print():
    t = torch.tensor([1.5, -2.0]).foo()
    assert t[1].item() == -2.0
    assert torch.tensor(True).foo().item() is True
    assert torch.tensor(7, dtype=torch.int64).foo().item() == 7
    assert "device='foo:0'" in repr(t)


def test_generator_on_foo():
    g = torch.Generator(device="foo")
    assert g.device.type == "foo"
    g.manual_seed(123)
    a = torch.randn(5, device="foo", generator=g)
    g.manual_seed(123)
    b = torch.randn(5, device="foo", generator=g)
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)
    state = g.get_state()
    c = torch.randn(5, device="foo", generator=g)
    g.set_state(state)
    d = torch.randn(5, device="foo", generator=g)
    torch.testing.assert_close(c.cpu(), d.cpu(), rtol=0, atol=0)
    assert not torch.equal(a.cpu(), c.cpu())


def test_torch_accelerator_sees_foo():
    assert str(torch.accelerator.current_accelerator()) == "foo"
    assert torch.accelerator.device_count() == 2
    x = torch.empty(1 << 16, dtype=torch.uint8, device="foo")
    assert torch.accelerator.memory_allocated(0) == torch.foo.memory_allocated(0)
    assert torch.accelerator.memory_allocated(0) >= 1 << 16
    del x


def test_mixing_foo_devices_raises_like_cuda():
    a = torch.ones(3, device="foo:0")
    b = torch.ones(3, device="foo:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cumsum(a, 0) + b
