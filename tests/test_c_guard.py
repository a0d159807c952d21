"""The private ``foo_rs._C`` kernels refuse views of memory foo does not own
(rust/src/bindings/mod.rs ``strided``): a made-up address, or an extent past
the end of a foo tensor's allocation, raises ValueError before any kernel
touches memory. A view of no elements needs no memory; the two sides of a
copy may be host (CPU) memory."""

import pytest
import torch

import foo_rs
from foo_rs._ops._registry import DTYPE_CODE

F32 = DTYPE_CODE[torch.float32]
BOGUS = 0xDEAD_0000  # below where mmap places foo's segments


def view(t, sizes, strides, offset_bytes=0):
    return (t.data_ptr() + offset_bytes, DTYPE_CODE[t.dtype], tuple(sizes), tuple(strides))


def test_made_up_pointer_is_refused():
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.fill_((BOGUS, F32, (4,), (1,)), 1.0)
    with pytest.raises(ValueError, match="not inside one live foo allocation"):
        foo_rs._C.local_scalar((BOGUS, F32, (), ()))
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.fill_((8, F32, (1,), (1,)), 1.0)


def test_cpu_tensor_is_not_foo_memory():
    x = torch.zeros(4)
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.fill_(view(x, (4,), (1,)), 1.0)
    assert x.tolist() == [0.0] * 4


def test_extent_past_the_allocation_is_refused():
    x = torch.zeros(4, device="foo")
    with pytest.raises(ValueError, match="not inside one live foo allocation"):
        foo_rs._C.fill_(view(x, (1 << 20,), (1,)), 1.0)
    foo_rs._C.fill_(view(x, (2,), (3,)), 1.0)  # elements 0 and 3: inside
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.fill_(view(x, (2,), (4,)), 1.0)  # element 4 is past the end
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.local_scalar(view(x, (), (), offset_bytes=16))
    with pytest.raises(ValueError, match="foo"):
        # Starts before the allocation (whatever lies there, the view spans two).
        foo_rs._C.fill_(view(x, (2,), (1,), offset_bytes=-4), 1.0)
    assert x.cpu().tolist() == [1.0, 0.0, 0.0, 1.0]


def test_extent_that_overflows_is_refused():
    x = torch.zeros(4, device="foo")
    with pytest.raises(ValueError, match="foo"):
        foo_rs._C.fill_(view(x, (1 << 62, 2), (1 << 62, 1)), 1.0)
    assert x.cpu().tolist() == [0.0] * 4


def test_views_inside_the_allocation_still_work():
    x = torch.zeros(8, device="foo")
    foo_rs._C.fill_(view(x, (4,), (2,)), 2.0)
    foo_rs._C.fill_(view(x, (3,), (0,), offset_bytes=4), 5.0)  # broadcast: one element
    assert foo_rs._C.local_scalar(view(x, (), (), offset_bytes=28)) == 0.0
    assert x.cpu().tolist() == [2.0, 5.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0]
    # A view of a slice: its own data_ptr, inside the storage.
    y = x[2:6]
    foo_rs._C.fill_(view(y, (4,), (1,)), 7.0)
    assert x.cpu().tolist() == [2.0, 5.0, 7.0, 7.0, 7.0, 7.0, 2.0, 0.0]


def test_empty_view_needs_no_memory():
    foo_rs._C.fill_((BOGUS, F32, (0, 3), (3, 1)), 1.0)
    foo_rs._C.fill_((0, F32, (0,), (1,)), 1.0)


def test_copy_takes_host_memory_but_not_past_a_foo_allocation():
    x = torch.zeros(4, device="foo")
    cpu = torch.arange(4, dtype=torch.float32)
    foo_rs._C.copy_(view(x, (4,), (1,)), view(cpu, (4,), (1,)))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    back = torch.zeros(4)
    foo_rs._C.copy_(view(back, (4,), (1,)), view(x, (4,), (1,)))
    assert back.tolist() == [0.0, 1.0, 2.0, 3.0]
    big = torch.arange(1 << 16, dtype=torch.float32)
    with pytest.raises(ValueError, match="not inside one live foo allocation"):
        foo_rs._C.copy_(view(x, (1 << 16,), (1,)), view(big, (1 << 16,), (1,)))
    with pytest.raises(ValueError, match="not inside one live foo allocation"):
        foo_rs._C.copy_(view(back, (4,), (1,)), view(x, (4,), (1,), offset_bytes=8))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert back.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_pinned_round_trip_is_unaffected():
    p = torch.arange(6.0).pin_memory()
    x = p.to("foo")
    assert x.cpu().tolist() == p.tolist()
    q = torch.empty(6).pin_memory()
    q.copy_(x * 2)
    assert q.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_public_ops_are_unaffected():
    x = torch.arange(12.0, device="foo").reshape(3, 4)
    y = x.t()[1:, ::2] * 2
    assert y.cpu().tolist() == (torch.arange(12.0).reshape(3, 4).t()[1:, ::2] * 2).tolist()
    assert x[torch.tensor([2, 0])].cpu().tolist() == [[8.0, 9.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]
    z = torch.empty(0, device="foo")
    z.fill_(1.0)
