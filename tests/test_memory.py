"""Caching allocator through torch.foo's memory API (torch.cuda's semantics)."""

import gc
import os
import subprocess
import sys
import threading

import pytest
import torch

import foo_rs

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _clean():
    gc.collect()
    yield
    gc.collect()


def test_stats_follow_tensor_lives_exactly():
    base = torch.foo.memory_allocated()
    a = torch.empty(MiB, dtype=torch.uint8, device="foo")
    assert torch.foo.memory_allocated() == base + MiB
    b = torch.empty(3 * MiB, dtype=torch.uint8, device="foo")
    assert torch.foo.memory_allocated() == base + 4 * MiB
    del a
    assert torch.foo.memory_allocated() == base + 3 * MiB
    del b
    assert torch.foo.memory_allocated() == base


def test_small_requests_round_to_512_bytes():
    base = torch.foo.memory_allocated()
    x = torch.empty(3, dtype=torch.uint8, device="foo")
    assert torch.foo.memory_allocated() == base + 512
    del x


def test_freed_memory_stays_reserved_and_is_reused():
    torch.foo.empty_cache()
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="foo")
    ptr = x.data_ptr()
    reserved = torch.foo.memory_reserved()
    del x
    assert torch.foo.memory_reserved() == reserved  # cached, not returned
    y = torch.empty(64 * MiB, dtype=torch.uint8, device="foo")
    assert y.data_ptr() == ptr  # the cached block comes back
    assert torch.foo.memory_reserved() == reserved
    del y


def test_empty_cache_returns_reserved_memory():
    # Segments that still hold a live block (other tests' tensors) stay
    # reserved; the freed block's own segment must go back.
    torch.foo.empty_cache()
    r0 = torch.foo.memory_reserved()
    x = torch.empty(32 * MiB, dtype=torch.uint8, device="foo")
    r1 = torch.foo.memory_reserved()
    assert r1 >= r0 + 32 * MiB
    del x
    assert torch.foo.memory_reserved() == r1  # cached, not returned yet
    torch.foo.empty_cache()
    assert torch.foo.memory_reserved() == r0
    assert torch.foo.memory_reserved() >= torch.foo.memory_allocated()


def test_peaks_and_reset():
    torch.foo.reset_peak_memory_stats()
    base = torch.foo.memory_allocated()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="foo")
    del x
    assert torch.foo.max_memory_allocated() >= base + 8 * MiB
    torch.foo.reset_peak_memory_stats()
    assert torch.foo.max_memory_allocated() == torch.foo.memory_allocated()
    assert torch.foo.max_memory_reserved() == torch.foo.memory_reserved()


def test_memory_stats_has_cuda_keys():
    s = torch.foo.memory_stats()
    for key in [
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.all.allocated",
        "allocated_bytes.all.freed",
        "reserved_bytes.all.peak",
        "reserved_bytes.small_pool.current",
        "reserved_bytes.large_pool.current",
        "active.all.current",
        "segment.all.current",
        "num_alloc_retries",
        "num_ooms",
    ]:
        assert key in s, key
    torch.foo.reset_accumulated_memory_stats()
    s = torch.foo.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 0 and s["num_ooms"] == 0


def _summary_row(summary: str, label: str) -> list[str]:
    line = next(ln for ln in summary.splitlines() if ln.startswith("| " + label))
    return [c.strip() for c in line.strip("|").split("|")[1:]]


def _shows(cell: str, nbytes: int) -> bool:
    """Whether a summary cell ("3076 KiB") shows ``nbytes`` in its unit (truncated, as torch.cuda's)."""
    value, unit = cell.split()
    return int(value) == nbytes // {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def test_memory_summary_reports_the_device_and_its_figures():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="foo:1")
    s = torch.foo.memory_summary("foo:1")
    assert "device ID 1" in s.splitlines()[1]
    cur, peak, _, _ = _summary_row(s, "Allocated memory")
    with_x = torch.foo.memory_allocated(1)
    assert with_x >= 3 * MiB and _shows(cur, with_x)
    assert _shows(peak, torch.foo.max_memory_allocated(1))
    assert _shows(_summary_row(s, "Reserved memory")[0], torch.foo.memory_reserved(1))
    del x
    assert torch.foo.memory_allocated(1) == with_x - 3 * MiB
    assert _shows(_summary_row(torch.foo.memory_summary(1), "Allocated memory")[0], with_x - 3 * MiB)


def test_devices_have_separate_pools():
    b0, b1 = torch.foo.memory_allocated(0), torch.foo.memory_allocated(1)
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="foo:1")
    assert torch.foo.memory_allocated(1) == b1 + 2 * MiB
    assert torch.foo.memory_allocated(0) == b0
    y = x.to("foo:0")
    assert y.device == torch.device("foo:0")
    assert torch.foo.memory_allocated(0) == b0 + 2 * MiB
    del x, y
    assert torch.foo.memory_allocated(0) == b0 and torch.foo.memory_allocated(1) == b1


def test_mem_get_info_and_fraction():
    free, total = torch.foo.mem_get_info()
    assert 0 < free <= total
    with pytest.raises(ValueError):
        torch.foo.set_per_process_memory_fraction(1.5)


def test_out_of_memory_frees_cache_then_raises_and_recovers():
    code = r"""
import gc, torch, foo_rs
MiB = 1 << 20
keep = torch.empty(40 * MiB, dtype=torch.uint8, device="foo")
cached = torch.empty(40 * MiB, dtype=torch.uint8, device="foo"); del cached
s0 = torch.foo.memory_stats()
try:
    torch.empty(80 * MiB, dtype=torch.uint8, device="foo")
    print("NO-OOM")
except torch.OutOfMemoryError as e:
    msg = str(e)
    assert "foo:0" in msg and "80.00 MiB" in msg, msg
s1 = torch.foo.memory_stats()
assert s1["num_ooms"] == s0["num_ooms"] + 1, (s0["num_ooms"], s1["num_ooms"])
assert s1["num_alloc_retries"] == s0["num_alloc_retries"] + 1
assert torch.foo.memory_allocated() == 40 * MiB
ok = torch.empty(50 * MiB, dtype=torch.uint8, device="foo")  # fits after the cache was freed
del ok, keep; gc.collect()
assert torch.foo.memory_allocated() == 0 and foo_rs.live_blocks() == 0
print("OK")
"""
    env = dict(os.environ, FOO_RS_DEVICE_MEMORY="100MiB")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("OK"), out.stdout


def test_concurrent_allocation_from_threads():
    base = foo_rs.live_blocks()
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            for _ in range(200):
                n = int(torch.randint(1, 1 << 16, (1,), generator=g))
                t = torch.empty(n, dtype=torch.uint8, device=f"foo:{seed % 2}")
                t.fill_(seed % 256)
                assert t[-1].item() == seed % 256
                del t
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gc.collect()
    assert foo_rs.live_blocks() == base
