"""Profiling foo: foo_rs.profiler.op_profile (per-op counts, time, route) and
torch's profilers with foo device events."""

import json
import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

import foo_rs
from foo_rs.profiler import op_profile


def test_profile_counts_ops_and_routes():
    x = torch.ones(8, device="foo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        with op_profile() as prof:
            x.fill_(2.0)
            x.fill_(3.0)
            lib = torch.library.Library("foo_prof", "DEF")
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda t: t * 2, "CPU")
            torch.ops.foo_prof.twice(x)  # no foo kernel: falls back
    rows = {r[0]: r for r in prof.rows()}
    assert rows["aten::fill_.Scalar"][1] == 2
    assert rows["aten::fill_.Scalar"][4] == "native"
    assert rows["foo_prof::twice"][4] == "fallback"
    assert "| aten::fill_.Scalar | 2 |" in prof.table()


# ---- torch's profilers with foo device events ------------------------------


# torch 2.15 lets a PrivateUse1 backend plug a Kineto activity profiler in
# (foo's glue does); torch 2.13/2.14's torch.profiler times foo through the
# profiler stubs, the route use_kineto=False takes on every version.
HAS_PLUGIN = hasattr(torch._C._profiler.ProfilerState, "KINETO_PRIVATEUSE1")


def _work():
    x = torch.randn(192, 192, device="foo")
    with record_function("foo_block"):
        y = x @ x
        z = torch.relu(y + 1).sum()
    return z


def _device_total(evt):
    return evt.device_time_total if hasattr(evt, "device_time_total") else evt.privateuse1_time_total


def _self_device_total(evt):
    if hasattr(evt, "self_device_time_total"):
        return evt.self_device_time_total
    return evt.self_privateuse1_time_total


def _check_totals(averages):
    keys = {e.key: e for e in averages}
    assert "foo_block" in keys and "aten::mm" in keys
    for e in averages:
        assert e.cpu_time_total >= 0 and e.self_cpu_time_total >= 0, e.key
        assert _device_total(e) >= 0, e.key
    assert _device_total(keys["aten::mm"]) > 0
    return keys


def test_stub_route_times_foo_ops_without_spam(capfd):
    _work()  # warm up
    with torch.autograd.profiler.profile(use_device="foo", use_kineto=False) as prof:
        _work()
    assert "not enabled" not in capfd.readouterr().err
    keys = _check_totals(prof.key_averages())
    # Kernels are synchronous and timed inside each op: no op has more foo
    # time than CPU time (an op's events bracket its whole run, nested ops
    # included, as the stubs of every backend do), and the block's foo time is
    # its duration.
    for e in prof.key_averages():
        assert _device_total(e) <= e.cpu_time_total * 1.05 + 50, e.key
    block = keys["foo_block"]
    assert _device_total(block) >= 0.9 * block.cpu_time_total


def test_torch_profiler_foo_track(capfd, tmp_path):
    _work()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _work()
    assert "not enabled" not in capfd.readouterr().err
    keys = _check_totals(prof.key_averages())
    if not HAS_PLUGIN:
        return  # the stub route (checked above) is all these versions offer
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    names = {e.name for e in kernels}
    assert {"aten::mm (foo)", "aten::add (foo)"} <= names, names
    assert all(e.time_range.end > e.time_range.start for e in kernels)
    # Self-time segments never overlap, and all lie within the block.
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    assert all(a[1] <= b[0] + 1 for a, b in zip(spans, spans[1:]))
    # The kernels run inside the block take no more than the block's time.
    (blk,) = [e for e in prof.events() if e.name == "foo_block"]
    inside = [
        e for e in kernels if e.time_range.start >= blk.time_range.start and e.time_range.end <= blk.time_range.end
    ]
    assert {"aten::mm (foo)", "aten::sum (foo)"} <= {e.name for e in inside}
    assert 0 < sum(e.time_range.end - e.time_range.start for e in inside) <= blk.time_range.end - blk.time_range.start
    # Each kernel row's time is linked to its CPU op: mm's foo time covers the
    # matrix product, at least half of the op's own CPU time, never more than its total.
    mm = keys["aten::mm"]
    assert 0.5 * mm.self_cpu_time_total <= _device_total(mm) <= mm.cpu_time_total * 1.05 + 50
    assert keys["aten::mm (foo)"].cpu_time_total == 0
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    foo_kernels = [e for e in events if e.get("cat") == "kernel" and e.get("name") == "aten::mm (foo)"]
    assert foo_kernels, "no foo kernel events in the chrome trace"
    pids = {e["pid"] for e in foo_kernels}
    labels = [e for e in events if e.get("ph") == "M" and e.get("pid") in pids and e.get("name") == "process_name"]
    assert any("foo" in str(e["args"]) for e in labels), labels


@pytest.mark.parametrize("rounds", [1, 2])
def test_profiler_sessions_repeat_and_leave_nothing_behind(rounds):
    for _ in range(rounds):
        with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            torch.ones(8, device="foo").add_(1)
        assert any(e.key == "aten::add_" for e in prof.key_averages())
    # Outside a session nothing is recorded or slowed: ops still run.
    assert torch.equal(torch.ones(3, device="foo").mul(2).cpu(), torch.full((3,), 2.0))


def test_profile_memory_reports_foo_allocations_and_frees():
    """profile_memory=True: each op's foo allocations land in its device
    memory columns ("FOO Mem"), frees outside an op as [memory] events, as
    CUDA's allocator reports them."""
    x = torch.randn(256, 256, device="foo")
    with torch.profiler.profile(profile_memory=True) as prof:
        y = (x @ x).relu()
        s = y.sum()
        del y
    mem = {e.name: e.device_memory_usage for e in prof.events() if e.name in ("aten::mm", "aten::relu", "aten::sum")}
    assert mem == {"aten::mm": 256 * 256 * 4, "aten::relu": 256 * 256 * 4, "aten::sum": 4}
    freed = [e.device_memory_usage for e in prof.events() if e.name == "[memory]"]
    assert sorted(freed) == [-(256 * 256 * 4)] * 2, freed  # x @ x's result, then y
    assert all(e.cpu_memory_usage == 0 for e in prof.events() if e.name in mem)
    assert "FOO Mem" in prof.key_averages().table(row_limit=3)
    del s
    # Without profile_memory nothing is reported.
    with torch.profiler.profile() as prof:
        torch.ones(64, device="foo").mul(2)
    assert all(e.device_memory_usage == 0 for e in prof.events())
