"""Tensors' memory comes from, and returns to, the Rust allocator."""

import gc

import torch

import foo_rs


def test_deleted_tensors_leave_no_live_blocks():
    gc.collect()
    base = foo_rs.live_blocks()
    xs = [torch.randn(1000, device="foo") for _ in range(10)]
    ys = [x.to("foo:1") for x in xs]
    assert foo_rs.live_blocks() == base + 20
    del xs, ys
    gc.collect()
    assert foo_rs.live_blocks() == base


def test_allocation_is_tracked_by_bytes():
    gc.collect()
    before = torch.foo.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="foo")
    assert torch.foo.memory_allocated() - before >= 1 << 20
    del x
    gc.collect()
    assert torch.foo.memory_allocated() == before


def test_out_of_memory_is_catchable():
    gc.collect()
    before = torch.foo.memory_allocated()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="foo")
    except torch.OutOfMemoryError as e:
        assert "foo" in str(e)
    else:
        raise AssertionError("expected torch.OutOfMemoryError")
    assert torch.foo.memory_allocated() == before
    assert torch.ones(3, device="foo").sum().item() == 3.0
