"""torch.foo's device module: init, properties, capability, names."""

import pytest
import torch

import foo_rs


def test_init_and_is_initialized():
    torch.foo.init()
    assert torch.foo.is_initialized()
    torch.foo.init()  # idempotent


def test_device_properties():
    p = torch.foo.get_device_properties(1)
    assert p.name == torch.foo.get_device_name(1) and "foo:1" in p.name
    assert p.total_memory == torch.foo.mem_get_info(1)[1] > 0
    assert p.simd_level == foo_rs._C.ew_simd_level()
    assert p.simd_level in ("portable", "avx2", "avx512")
    assert p.worker_threads == foo_rs._C.num_threads() >= 1
    assert p.multi_processor_count == p.worker_threads
    assert (p.major, p.minor) == torch.foo.get_device_capability(1)
    assert "total_memory=" in repr(p) and "simd_level=" in repr(p)
    assert torch.foo.get_device_properties("foo:0").name.startswith("foo:0")
    assert torch.foo.get_device_properties(torch.device("foo", 1)).name.startswith("foo:1")


def test_worker_threads_follow_torch():
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.foo.get_device_properties().worker_threads == 1
    finally:
        torch.set_num_threads(n)


def test_capability_is_simd_level():
    major, minor = torch.foo.get_device_capability()
    assert ("portable", "avx2", "avx512")[major] == foo_rs._C.ew_simd_level()
    assert minor == 0


def test_mem_get_info_tracks_allocations():
    # Free is what the allocator has not reserved (as CUDA's counts the
    # device's memory): start from an empty cache so the new block needs a
    # new segment rather than a cached one.
    torch.foo.empty_cache()
    free0, total = torch.foo.mem_get_info(0)
    assert 0 < free0 <= total
    assert free0 == total - torch.foo.memory_reserved(0)
    x = torch.empty(64 << 20, dtype=torch.uint8, device="foo")
    free1 = torch.foo.mem_get_info(0)[0]
    assert free1 == total - torch.foo.memory_reserved(0)
    assert free1 <= free0 - (64 << 20)
    del x


@pytest.mark.parametrize("bad", [2, 99, "foo:5"])
def test_bad_device_index(bad):
    for fn in (torch.foo.get_device_properties, torch.foo.get_device_capability, torch.foo.get_device_name):
        with pytest.raises(RuntimeError, match="Invalid foo device index"):
            fn(bad)


def test_wrong_device_type():
    with pytest.raises(ValueError, match="foo device"):
        torch.foo.get_device_properties("cpu")


@pytest.mark.skipif(
    not hasattr(torch.accelerator, "get_device_capability"),
    reason="torch.accelerator.get_device_capability is new in this torch version",
)
def test_accelerator_capability_lists_foo_dtypes():
    cap = torch.accelerator.get_device_capability("foo:1")
    assert set(cap["supported_dtypes"]) == set(foo_rs.SUPPORTED_DTYPES)
