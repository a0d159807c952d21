"""torch.foo.memory's snapshot and recorded history (torch.cuda.memory's
memory_snapshot, _snapshot, _record_memory_history, _dump_snapshot): the
segments and blocks are the allocator's, the recorded entries and stack
traces say what allocated and freed what, and torch's own viewer
(torch.cuda._memory_viz) reads the result."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from torch.cuda import _memory_viz

import foo_rs  # noqa: F401  (registers torch.foo)


@pytest.fixture(autouse=True)
def _stop_recording():
    yield
    torch.foo.memory._record_memory_history(None)


def _blocks(snapshot, device=0):
    return [(seg, b) for seg in snapshot["segments"] if seg["device"] == device for b in seg["blocks"]]


def _allocate_in_named_function():
    return torch.empty(1000, device="foo")


def test_snapshot_lists_the_allocators_segments_and_blocks():
    torch.foo.empty_cache()
    keep = [torch.empty(n, device="foo") for n in (10, 1000, 300_000, 1_000_000)]
    snap = torch.foo.memory._snapshot()
    assert torch.foo.memory_snapshot() == snap["segments"]
    by_addr = {b["address"]: (seg, b) for seg, b in _blocks(snap)}
    for t in keep:
        seg, b = by_addr[t.data_ptr()]
        assert b["state"] == "active_allocated"
        assert b["requested_size"] == t.nbytes
        assert b["size"] >= t.nbytes and b["size"] % 512 == 0
        assert seg["segment_type"] == ("large" if b["size"] > 1 << 20 else "small")
    segs = [s for s in snap["segments"] if s["device"] == 0]
    for seg in segs:
        # Blocks tile their segment in address order.
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr
            addr += b["size"]
        assert addr == seg["address"] + seg["total_size"]
        live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert seg["allocated_size"] == sum(b["size"] for b in live)
        assert seg["requested_size"] == sum(b["requested_size"] for b in live)
    stats = torch.foo.memory_stats(0)
    assert sum(s["total_size"] for s in segs) == stats["reserved_bytes.all.current"]
    # No colouring gap at these sizes (none is a multiple of 16 KiB above 1 MiB).
    assert sum(s["allocated_size"] for s in segs) == stats["allocated_bytes.all.current"]
    assert sum(s["requested_size"] for s in segs) == stats["requested_bytes.all.current"]
    assert not any(b["frames"] for _, b in _blocks(snap)), "nothing recorded: no stacks"
    del keep


def test_recorded_history_has_each_allocation_and_free_with_its_stack():
    torch.foo.memory._record_memory_history("all", context="all", stacks="python")
    t = _allocate_in_named_function()
    addr = t.data_ptr()
    snap = torch.foo.memory._snapshot()
    (block,) = [b for _, b in _blocks(snap) if b["address"] == addr]
    names = [f["name"] for f in block["frames"]]
    assert "_allocate_in_named_function" in names
    assert any(f["filename"].endswith("test_memory_history.py") for f in block["frames"])
    del t
    trace = torch.foo.memory._snapshot()["device_traces"][0]
    mine = [e for e in trace if e["addr"] == addr]
    assert [e["action"] for e in mine[-3:]] == ["alloc", "free_requested", "free_completed"]
    alloc, freed = mine[-3], mine[-1]
    assert alloc["size"] == freed["size"] == 4000
    assert "_allocate_in_named_function" in [f["name"] for f in alloc["frames"]]
    assert "test_recorded_history_has_each_allocation_and_free_with_its_stack" in [f["name"] for f in freed["frames"]]
    assert alloc["time_us"] <= freed["time_us"]
    assert all(e["stream"] == 0 for e in trace)


def test_context_alloc_keeps_no_stacks_for_frees_and_state_keeps_no_trace():
    torch.foo.memory._record_memory_history("all", context="alloc", stacks="python")
    t = _allocate_in_named_function()
    addr = t.data_ptr()
    del t
    mine = [e for e in torch.foo.memory._snapshot()["device_traces"][0] if e["addr"] == addr]
    assert mine[-3]["frames"] and not mine[-1]["frames"]

    torch.foo.memory._record_memory_history("state", context="state", stacks="python", clear_history=True)
    t = _allocate_in_named_function()
    snap = torch.foo.memory._snapshot()
    assert snap["device_traces"][0] == []
    (block,) = [b for _, b in _blocks(snap) if b["address"] == t.data_ptr()]
    assert "_allocate_in_named_function" in [f["name"] for f in block["frames"]]


def test_max_entries_keeps_the_newest_and_none_stops_and_drops():
    torch.foo.memory._record_memory_history("all", context=None, max_entries=5)
    ts = [torch.empty(16, device="foo") for _ in range(10)]
    trace = torch.foo.memory._snapshot()["device_traces"][0]
    assert len(trace) == 5
    assert [e["addr"] for e in trace] == [t.data_ptr() for t in ts[-5:]]
    assert not any(e["frames"] for e in trace)
    torch.foo.memory._record_memory_history(None)
    torch.empty(16, device="foo")
    assert torch.foo.memory._snapshot()["device_traces"][0] == []


def test_segment_events_and_device_traces_per_device():
    torch.foo.empty_cache()
    torch.foo.memory._record_memory_history("all", context=None)
    t = torch.empty(3 << 20, dtype=torch.uint8, device="foo:1")
    del t
    torch.foo.empty_cache()
    traces = torch.foo.memory._snapshot()["device_traces"]
    assert len(traces) == torch.foo.device_count()
    actions = [e["action"] for e in traces[1]]
    assert actions == ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"]
    assert traces[1][0]["size"] == 20 << 20
    assert traces[0] == []


def test_an_out_of_memory_error_is_recorded():
    torch.foo.memory._record_memory_history("all", context=None)
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 50, dtype=torch.uint8, device="foo")
    (oom,) = [e for e in torch.foo.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert oom["size"] == 1 << 50
    assert oom["device_free"] == torch.foo.mem_get_info(0)[0]


def test_backward_on_autograd_threads_is_recorded():
    torch.foo.memory._record_memory_history("all", context="all", stacks="python")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("foo")
    model(torch.randn(8, 32, device="foo")).sum().backward()
    trace = torch.foo.memory._snapshot()["device_traces"][0]
    assert sum(e["action"] == "alloc" for e in trace) >= 6
    grads = {p.grad.data_ptr() for p in model.parameters()}
    assert grads <= {e["addr"] for e in trace if e["action"] == "alloc"}


def test_torch_memory_viz_reads_the_snapshot(tmp_path):
    torch.foo.memory._record_memory_history("all", stacks="python")
    keep = [_allocate_in_named_function() for _ in range(3)]
    del keep[1]
    path = tmp_path / "snap.pickle"
    torch.foo.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert snap["segments"] and snap["device_traces"][0]
    assert "Active Memory Timeline" in _memory_viz.trace_plot(snap)
    assert "<html" in _memory_viz.segment_plot(snap).lower()
    # The text trace replays the entries: the segment, three blocks, one freed.
    text = _memory_viz.trace(snap)
    assert len(re.findall(r"^\w+ = \w+\[", text, re.M)) >= 3
    assert "del " in text and "free completed" in text
    assert f"segments: {len(snap['segments'])}" in _memory_viz.segsum(snap)


@pytest.mark.parametrize(
    "kwargs",
    [{"enabled": "some"}, {"context": "everything"}, {"stacks": "cpp"}],
)
def test_bad_arguments_raise_value_error_naming_foo(kwargs):
    with pytest.raises(ValueError, match="foo"):
        torch.foo.memory._record_memory_history(**kwargs)


def test_recording_releases_its_stacks_and_blocks():
    base = torch.foo.memory_allocated(0)
    torch.foo.memory._record_memory_history("all", stacks="python")
    for _ in range(50):
        x = torch.randn(64, 64, device="foo")
        (x @ x).relu_()
    del x
    torch.foo.memory._record_memory_history(None)
    assert torch.foo.memory_allocated(0) == base


def test_fx_augmented_snapshot_keeps_the_frames():
    torch.foo.memory._record_memory_history("all", stacks="python")
    t = _allocate_in_named_function()
    snap = torch.foo.memory._snapshot(augment_with_fx_traces=True)
    (block,) = [b for _, b in _blocks(snap) if b["address"] == t.data_ptr()]
    assert "_allocate_in_named_function" in [f["name"] for f in block["frames"]]
