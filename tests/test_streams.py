"""Streams and events on foo: torch.foo.Stream/Event, the generic torch.Stream,
torch.Event and torch.accelerator stream API, record_stream.

foo's kernels run synchronously, so work on a stream has finished when the
submitting call returns; these tests check the state that is real (which
stream is current where, priorities, pools, event recording and timing) and
the errors of bad use."""

import threading
import time

import pytest
import torch

import foo_rs
from foo_rs.foo.streams import _FOO_TYPE


def test_default_and_current_stream():
    s0 = torch.foo.default_stream()
    assert s0.stream_id == 0 and s0.device_index == torch.foo.current_device()
    assert s0.device == torch.device("foo", torch.foo.current_device())
    assert torch.foo.current_stream() == s0
    assert torch.foo.default_stream(1).device_index == 1


def test_new_streams_are_distinct_with_priorities():
    a, b = torch.foo.Stream(), torch.foo.Stream(priority=-1)
    assert a != b and a.stream_id != b.stream_id
    assert a.priority == 0 and b.priority == -1
    least, greatest = torch.foo.Stream.priority_range()
    assert (least, greatest) == (0, -1)
    assert torch.foo.Stream(priority=-10).priority == greatest  # clamped, as CUDA
    assert torch.foo.Stream(priority=5).priority == least
    s1 = torch.foo.Stream(device=1)
    assert s1.device == torch.device("foo", 1)
    assert isinstance(a, torch.Stream)


def test_stream_context_sets_and_restores_stream_and_device():
    s = torch.foo.Stream(device=1)
    before = torch.foo.current_stream(0)
    assert torch.foo.current_device() == 0
    with torch.foo.stream(s):
        assert torch.foo.current_device() == 1
        assert torch.foo.current_stream() == s
        # c10 sees the same current stream: a new tensor's ops run "on" it,
        # and torch.accelerator reports it.
        assert torch.accelerator.current_stream(1).stream_id == s.stream_id
        x = torch.ones(4, device="foo") * 3
        assert x.device.index == 1
    assert torch.foo.current_device() == 0
    assert torch.foo.current_stream(0) == before
    assert torch.foo.current_stream(1).stream_id == 0
    with s:  # the stream itself is a context manager too
        assert torch.foo.current_stream(1) == s
    assert torch.foo.current_stream(1).stream_id == 0
    with torch.foo.stream(None):  # a no-op, as torch.cuda.stream(None)
        assert torch.foo.current_stream(0) == before


def test_current_stream_is_per_thread():
    s = torch.foo.Stream()
    seen = []
    with torch.foo.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.foo.current_stream().stream_id))
        t.start()
        t.join()
        assert torch.foo.current_stream() == s
    assert seen == [0]


def test_set_stream_and_accelerator_api():
    s = torch.foo.Stream()
    try:
        torch.foo.set_stream(s)
        assert torch.foo.current_stream() == s
        assert torch.accelerator.current_stream().stream_id == s.stream_id
    finally:
        torch.foo.set_stream(torch.foo.default_stream(0))
    g = torch.Stream(device="foo")
    torch.accelerator.set_stream(g)
    try:
        assert torch.foo.current_stream().stream_id == g.stream_id
    finally:
        torch.accelerator.set_stream(torch.foo.default_stream(0))
    torch.accelerator.synchronize()
    torch.foo.synchronize(1)
    with pytest.raises(RuntimeError, match="foo"):
        torch.foo.synchronize(7)


def test_generic_stream_and_event_objects():
    s = torch.Stream(device="foo:1", priority=-1)
    assert s.device_type == torch.foo.default_stream().device_type
    assert s.device_index == 1
    assert s.query() is True
    s.synchronize()
    e = torch.Event(device="foo", enable_timing=True)
    assert e.query() is True  # never recorded: complete, as CUDA
    e.record(s)
    assert e.query() is True
    e.synchronize()
    s2 = torch.Stream(device="foo:1")
    s2.wait_event(e)
    s2.wait_stream(s)


def test_pool_streams_round_robin():
    # torch.foo.Stream() makes a new stream; c10's global pool (used by
    # torch internals such as DDP) hands out 32 per priority, round robin.
    ids = {torch.foo.Stream().stream_id for _ in range(4)}
    assert len(ids) == 4


def test_event_elapsed_time_measures_work_between_records():
    start, end = torch.foo.Event(enable_timing=True), torch.foo.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)
    x = torch.randn(256, 256, device="foo")
    y = x @ x
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 20.0 <= ms < 5000.0
    assert torch.equal((y - x @ x).abs().max().cpu(), torch.tensor(0.0))
    # Two back-to-back records measure (almost) nothing.
    a, b = torch.foo.Event(enable_timing=True), torch.foo.Event(enable_timing=True)
    a.record()
    b.record()
    assert 0.0 <= a.elapsed_time(b) < ms


def test_event_errors():
    a, b = torch.foo.Event(enable_timing=True), torch.foo.Event(enable_timing=True)
    a.record()
    with pytest.raises(RuntimeError, match="recorded before calculating elapsed time"):
        a.elapsed_time(b)
    c = torch.foo.Event()  # timing disabled, as CUDA's default
    c.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        a.elapsed_time(c)
    d = torch.foo.Event(enable_timing=True)
    d.record(torch.foo.Stream(device=1))
    with pytest.raises(RuntimeError):
        a.elapsed_time(d)  # different devices
    with pytest.raises(NotImplementedError, match="foo"):
        torch.foo.Event(interprocess=True)


def test_stream_record_event_and_wait_stream():
    s1, s2 = torch.foo.Stream(), torch.foo.Stream()
    with torch.foo.stream(s1):
        x = torch.arange(10.0, device="foo")
        y = x * 2
    e = s1.record_event()
    assert isinstance(e, torch.foo.Event) and e.query()
    s2.wait_event(e)
    s2.wait_stream(s1)
    with torch.foo.stream(s2):
        z = y + 1  # ordered after s1's work
    assert torch.equal(z.cpu(), torch.arange(10.0) * 2 + 1)


def test_events_are_released():
    before = foo_rs._C.live_events()
    for _ in range(20):
        e = torch.foo.Event(enable_timing=True)
        e.record()
        del e
    assert foo_rs._C.live_events() == before


def test_record_stream_block_reused_at_once():
    """record_stream keeps a block from being reused until the stream's
    pending work is done; foo's work is never pending (kernels are
    synchronous), so freeing the tensor returns its block at once and the
    next allocation of that size reuses it."""
    s = torch.foo.Stream()
    base = torch.foo.memory_allocated()
    with torch.foo.stream(s):
        x = torch.ones(1 << 16, device="foo")
    x.record_stream(s)
    x.record_stream(torch.foo.current_stream())
    ptr = x.data_ptr()
    assert torch.foo.memory_allocated() > base
    del x
    assert torch.foo.memory_allocated() == base
    y = torch.empty(1 << 16, device="foo")
    assert y.data_ptr() == ptr


def test_record_stream_bad_input():
    x = torch.ones(8, device="foo")
    with pytest.raises(RuntimeError, match="foo:0 but the stream is on foo:1"):
        x.record_stream(torch.foo.Stream(device=1))


def test_set_stream_refuses_other_devices():
    with pytest.raises(ValueError, match="foo stream"):
        torch.foo.set_stream(torch.Stream(device="cpu"))


def test_bad_streams_and_devices_raise():
    with pytest.raises(RuntimeError, match="Invalid foo device index 5"):
        torch.Stream(device="foo:5")
    with pytest.raises(RuntimeError, match="Invalid foo device index 5"):
        torch.foo.Stream(device=5)
    with pytest.raises(RuntimeError, match="Invalid foo device index 3"):
        torch.foo.current_stream(3)
    forged = torch.foo.Stream(stream_id=12345, device_index=0, device_type=_FOO_TYPE)
    for use in (
        forged.query,
        forged.synchronize,
        lambda: torch.foo.set_stream(forged),
        lambda: torch.accelerator.set_stream(forged),
        lambda: torch.foo.Event().record(forged),
    ):
        with pytest.raises(RuntimeError, match="foo:0 has no stream with id 12345"):
            use()
    assert torch.foo.current_stream(0).stream_id == 0  # nothing changed
