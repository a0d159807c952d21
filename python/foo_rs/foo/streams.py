"""Streams and events of foo: ``torch.foo.Stream``, ``torch.foo.Event`` and
the current-stream functions, with torch.cuda's names and meaning.

foo runs every kernel synchronously on the calling thread, so the work
submitted to a stream has finished when the call that submitted it returns.
Ordering on a stream and across ``wait_event``/``wait_stream`` therefore holds
by construction; ``query()`` is True and ``synchronize()`` returns at once. An
event completes when it is recorded, and ``elapsed_time`` between two timing
events measures the work submitted between the two records. The state
(streams, each thread's current stream per device, events) lives in Rust
(rust/src/stream.rs) and is shared with c10, so ``torch.Stream``,
``torch.Event`` and ``torch.accelerator`` see the same streams.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C

__all__ = [
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
]


def _index(device: Any) -> int:
    from . import _get_device_index

    return _get_device_index(device, optional=True)


def _foo_stream(stream_id: int, device_index: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=device_index, device_type=_FOO_TYPE)


class Stream(torch.Stream):
    """A foo stream: an in-order queue of work on one foo device.

    Args:
        device: the stream's foo device (default: the current one).
        priority: 0 (default) or negative for a higher priority; values out
            of range are clamped to ``torch.foo.Stream.priority_range()``.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs and "device_index" in kwargs:
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=torch.device("foo", _index(device)), priority=priority)

    @property
    def priority(self) -> int:
        return _C.stream_priority(self.device_index, self.stream_id)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(least, greatest) priority, as ``torch.cuda.Stream.priority_range``."""
        return _C.stream_priority_range()

    def wait_event(self, event: torch.Event) -> None:
        """Makes future work on this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Makes future work on this stream wait for the work queued on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Records ``event`` (a new one if None) on this stream and returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __enter__(self):
        self._ctx = StreamContext(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, torch.Stream):
            return (other.device_type, other.device_index, other.stream_id) == (
                self.device_type,
                self.device_index,
                self.stream_id,
            )
        return False

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.foo.Stream device=foo:{self.device_index} stream_id={self.stream_id} priority={self.priority}>"


class Event(torch.Event):
    """A foo event: a marker on a stream, with optional timing.

    Args:
        enable_timing: whether ``elapsed_time`` may use this event.
        blocking, interprocess: accepted for torch.cuda.Event's signature;
            foo events are host objects, so there is nothing to block on or
            share.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("foo events cannot be shared between processes (interprocess=True)")
        return super().__new__(
            cls, device=torch.device("foo", _index(None)), enable_timing=enable_timing, blocking=blocking
        )

    def record(self, stream: torch.Stream | None = None) -> None:
        """Records the event on ``stream`` (default: the current stream)."""
        if stream is None:
            stream = current_stream()
        super().record(stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Makes future work on ``stream`` (default: current) wait for this event."""
        if stream is None:
            stream = current_stream()
        super().wait(stream)

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s; both
        must be recorded, with ``enable_timing=True``, on one foo device.
        (torch.Event.elapsed_time accepts only exact torch.Event arguments,
        so foo asks its event registry directly.)"""
        if not isinstance(end_event, torch.Event) or end_event.device.type != "foo":
            raise TypeError(f"expected a foo event, got {end_event!r}")
        return _C.event_elapsed_ms(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"<torch.foo.Event device={self.device} recorded={self.event_id != 0}>"


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream on ``device`` (default: current device)."""
    idx = _index(device)
    return _foo_stream(_C.current_stream_id(idx), idx)


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device`` (default: current device)."""
    return _foo_stream(0, _index(device))


def set_stream(stream: torch.Stream | None) -> None:
    """Makes ``stream`` current on its device and its device current (as
    ``torch.cuda.set_stream``). None is a no-op."""
    if stream is None:
        return
    _check_foo(stream)
    from . import set_device

    _C.exchange_stream(stream.device_index, stream.stream_id)
    set_device(stream.device_index)


def _check_foo(stream: torch.Stream) -> None:
    if stream.device.type != "foo":
        raise ValueError(f"Expected a foo stream, but got a stream on {stream.device}")


class StreamContext:
    """Context manager that makes ``stream`` current (with its device) and
    restores the previous streams and device on exit. None is a no-op."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        if stream is not None:
            _check_foo(stream)

    def __enter__(self):
        s = self.stream
        if s is None:
            return None
        from . import current_device

        self._prev_device = current_device()
        self._prev_src = _C.current_stream_id(self._prev_device)
        self._prev_dst = _C.exchange_stream(s.device_index, s.stream_id)
        _C.set_device(s.device_index)
        return s

    def __exit__(self, *exc) -> None:
        s = self.stream
        if s is None:
            return
        _C.exchange_stream(s.device_index, self._prev_dst)
        _C.exchange_stream(self._prev_device, self._prev_src)
        _C.set_device(self._prev_device)


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.foo.stream(s):`` runs the block with ``s`` current."""
    return StreamContext(stream)


# c10's DeviceType of foo (PrivateUse1), as torch.Stream reports it.
_FOO_TYPE = 20
