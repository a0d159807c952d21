"""Pinned host memory for foo: Tensor.pin_memory(), is_pinned(),
pin_memory=True, DataLoader pinning, non_blocking copies, the host allocator's
statistics."""

import inspect
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import foo_rs  # noqa: F401


def _stat(key):
    return torch.foo.host_memory_stats()[key]


def test_pin_memory_pins_and_copies():
    t = torch.arange(1000, dtype=torch.float32)
    assert not t.is_pinned()
    before = _stat("allocations.current")
    p = t.pin_memory()
    assert p.is_pinned() and p.is_pinned("foo")
    assert p.device.type == "cpu"
    assert p.data_ptr() != t.data_ptr()
    assert torch.equal(p, t)
    assert _stat("allocations.current") == before + 1
    assert _stat("allocated_bytes.current") >= 4000
    view = p[10:]  # a pointer inside the block is pinned too
    assert view.is_pinned()
    assert p.pin_memory() is p  # already pinned: returned as is
    del p, view
    assert _stat("allocations.current") == before


def test_empty_pin_memory_and_host_cache_reuse():
    a = torch.empty(3000, dtype=torch.uint8, pin_memory=True)
    assert a.is_pinned()
    ptr = a.data_ptr()
    n_alloc = _stat("num_host_alloc")
    del a
    b = torch.empty(2500, dtype=torch.uint8, pin_memory=True)  # same size class
    assert b.data_ptr() == ptr
    assert _stat("num_host_alloc") == n_alloc  # served from the cache
    del b
    torch.foo.empty_host_cache()
    assert _stat("reserved_bytes.current") == _stat("allocated_bytes.current")


def test_host_stats_reset():
    x = torch.ones(10000).pin_memory()
    torch.foo.reset_peak_host_memory_stats()
    assert _stat("allocated_bytes.peak") == _stat("allocated_bytes.current")
    torch.foo.reset_accumulated_host_memory_stats()
    assert _stat("allocations.allocated") == 0 and _stat("num_host_alloc") == 0
    del x
    assert _stat("allocations.freed") == 1


def test_non_blocking_copies_both_ways():
    src = torch.randn(64, 33).pin_memory()
    d = src.to("foo", non_blocking=True)
    assert d.device.type == "foo"
    back = torch.empty_like(src).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.foo.synchronize()
    assert torch.equal(back, src)
    h = d.to("cpu", non_blocking=True)
    torch.foo.current_stream().synchronize()
    assert torch.equal(h, src)


def test_dataloader_pins_batches_for_foo():
    ds = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    # A DataLoader that pins for the current accelerator (torch 2.15) pins for
    # foo with pin_memory=True alone; one that does not (checked by its source,
    # for older torch) is given pin_memory_device="foo".
    assert torch.accelerator.current_accelerator().type == "foo"
    follows_accelerator = "current_accelerator" in inspect.getsource(torch.utils.data.dataloader)
    kwargs = {} if follows_accelerator else {"pin_memory_device": "foo"}
    batches = list(DataLoader(ds, batch_size=8, pin_memory=True, **kwargs))
    assert len(batches) == 3
    for xb, yb in batches:
        assert xb.is_pinned() and yb.is_pinned()
    assert torch.equal(torch.cat([b[0] for b in batches]), ds.tensors[0])
    moved = batches[0][0].to("foo", non_blocking=True)
    assert torch.equal(moved.cpu(), ds.tensors[0][:8])


def test_dataloader_pin_memory_device_foo():
    ds = TensorDataset(torch.ones(6, 3))
    # torch 2.15 deprecates the argument (one UserWarning) and pins for the
    # current accelerator, which is foo; older versions pin for the device named.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(DataLoader(ds, batch_size=3, pin_memory=True, pin_memory_device="foo"))
    assert all("pin_memory_device" in str(w.message) for w in caught)
    assert all(b[0].is_pinned() for b in batches)


def test_pinned_memory_is_not_foo_memory():
    base = torch.foo.memory_allocated()
    p = torch.ones(1 << 16).pin_memory()
    assert torch.foo.memory_allocated() == base  # host blocks are not device blocks
    with pytest.raises(RuntimeError):
        torch.ones(4, device="foo").pin_memory()  # only CPU tensors can be pinned
    del p
