"""torch.distributed on foo: a c10d process group that moves foo tensors with gloo.

foo's memory is ordinary host memory, so gloo can read and write it in place: each foo
tensor is handed to a ``ProcessGroupGloo`` as a CPU tensor that aliases its bytes (no
staging copy). A non-contiguous foo tensor goes through a contiguous foo copy, copied back
when the collective completes. gloo does the reductions (communication-library compute);
no torch CPU kernel runs on foo memory.

``import foo_rs`` registers the backend as ``"foo_gloo"`` for the devices ``foo`` and ``cpu``
and makes it foo's default, so ``init_process_group()`` with no backend picks it (as it
picks nccl for CUDA). Explicit forms: ``init_process_group("foo_gloo")`` or
``init_process_group("cpu:gloo,foo:foo_gloo")``. ``init_process_group("gloo")`` (and
``new_group(backend="gloo")``) gives foo tensors to foo_gloo too: gloo is what moves them
(see ``_gloo_covers_foo``). Each form serves CPU and foo tensors (and CUDA tensors, which gloo
supports, where torch has CUDA).

Before each collective the ranks compare a fingerprint of it (the collective, root, reduce op,
dtypes and shapes: 8 bytes per rank, exchanged over the group's own TCP connections to its rank 0,
see ``_FingerprintExchange``), so ranks that disagree get a ``RuntimeError`` that says what
differs, on every rank, instead of gloo aborting the process. ``FOO_RS_DIST_CHECK=0`` (or
``check_collectives = False`` on a group) skips it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import socket
import struct
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

#: The name ``init_process_group`` knows this backend by.
BACKEND_NAME = "foo_gloo"

#: The ``backend`` argument that gives CPU tensors plain gloo and foo tensors this backend.
EXPLICIT_FORM = f"cpu:gloo,foo:{BACKEND_NAME}"

#: Environment variable: ``0`` turns the cross-rank fingerprint check off for new groups.
CHECK_ENV = "FOO_RS_DIST_CHECK"

_Work = getattr(dist, "Work", None) or dist._Work  # type: ignore[attr-defined]

#: The devices torch's gloo serves (cpu, and cuda in torch builds with CUDA), read at import
#: before anything here changes torch's tables.
_GLOO_DEVICES = tuple(dist.Backend.backend_capability.get("gloo", ["cpu"]))


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the bytes of foo tensor ``t`` (same shape, strides and offset).

    The alias keeps ``t``'s storage alive through the ctypes buffer it is built on, so
    gloo may hold it past the caller's last reference (async collectives)."""
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0 or t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    buf = (ctypes.c_char * nbytes).from_address(storage.data_ptr())
    buf._foo_storage = storage  # type: ignore[attr-defined]  # lifetime: alias -> buf -> storage
    flat = torch.frombuffer(buf, dtype=torch.uint8)
    return flat.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def _aliasable(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.untyped_storage().nbytes() % t.element_size() == 0


class _Mapper:
    """Turns the foo tensors of one call's arguments into CPU tensors gloo accepts."""

    def __init__(self) -> None:
        #: (foo tensor, contiguous foo copy) pairs to copy back once the collective is done.
        self.staged: list[tuple[torch.Tensor, torch.Tensor]] = []
        #: (CPU view handed to gloo, the foo tensor it stands for), to map results back.
        self.aliases: list[tuple[torch.Tensor, torch.Tensor]] = []

    def map(self, obj: Any, output: bool) -> Any:
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "foo":
                return obj
            if _aliasable(obj):
                alias = _cpu_alias(obj)
            else:
                staged = obj.contiguous()
                if output:
                    self.staged.append((obj, staged))
                alias = _cpu_alias(staged)
            self.aliases.append((alias, obj))
            return alias
        if isinstance(obj, list):
            return [self.map(o, output) for o in obj]
        if isinstance(obj, tuple):
            return tuple(self.map(o, output) for o in obj)
        return obj


#: What users call each ProcessGroup method (error messages).
_PUBLIC_NAMES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "alltoall_base": "all_to_all_single",
    "alltoall": "all_to_all",
}
#: Point-to-point calls: only two ranks take part, so there is nothing to compare across the
#: group (gloo delivers what was sent, as with CPU tensors).
_UNCHECKED = frozenset({"send", "recv", "recv_anysource"})
#: Collectives where only some tensors must agree across ranks: index of that argument
#: (gather: the inputs; the outputs exist on the root only. scatter: the reverse).
_AGREEING_ARG = {"gather": 1, "scatter": 0}
#: all-to-all with split sizes: ranks differ in dim 0; the splits are compared pairwise.
_ALLTOALL_SINGLE = frozenset({"alltoall_base", "all_to_all_single"})
#: Bytes of a rank's description exchanged when the fingerprints differ.
_DESCRIPTION_BYTES = 512


def _op_name(op: Any) -> str:
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name, None):
            return name
    return str(op)


def _spec(obj: Any, skip_dim0: bool = False) -> str:
    """``float32[4, 3]`` for a tensor (``float32[*, 3]`` with ``skip_dim0``), ``2 x ...`` for a
    list of equal ones."""
    if isinstance(obj, torch.Tensor):
        dims = [str(d) for d in obj.shape]
        if skip_dim0 and dims:
            dims[0] = "*"
        return f"{str(obj.dtype).removeprefix('torch.')}[{', '.join(dims)}]"
    specs = [_spec(o, skip_dim0) for o in obj if isinstance(o, (torch.Tensor, list, tuple))]
    if len(specs) == 1:
        return specs[0]
    if len(specs) > 1 and all(x == specs[0] for x in specs):
        return f"{len(specs)} x {specs[0]}"
    return "[" + ", ".join(specs) + "]"


def _describe(name: str, args: tuple) -> str:
    """What every rank must agree on for collective ``name`` called with ``args``."""
    opts = args[-1] if args and not isinstance(args[-1], (torch.Tensor, list, tuple)) else None
    parts = [_PUBLIC_NAMES.get(name, name)]
    root = getattr(opts, "rootRank", None)
    if root is not None:
        parts.append(f"root {root}")
    op = getattr(opts, "reduceOp", None)
    if op is not None:
        parts.append(_op_name(op))
    if name in _ALLTOALL_SINGLE:
        out, inp, out_splits, in_splits = args[:4]
        parts += [f"output {_spec(out, True)}", f"input {_spec(inp, True)}"]
        parts.append(f"{len(out_splits)}/{len(in_splits)} split sizes")
    elif name == "alltoall":  # tensors of any size per pair: the dtypes must agree
        dtypes = {t.dtype for a in args[:2] for t in a}
        parts.append("dtype " + ",".join(sorted(str(d).removeprefix("torch.") for d in dtypes)))
    elif name in _AGREEING_ARG:
        parts.append(_spec(args[_AGREEING_ARG[name]]))
    else:
        tensors = [a for a in args if isinstance(a, (torch.Tensor, list, tuple))]
        parts += [_spec(a) for a in tensors if not isinstance(a, (list, tuple)) or a]
    return " ".join(parts)


def _fingerprint(description: str) -> int:
    return int.from_bytes(hashlib.blake2b(description.encode(), digest_size=8).digest(), "little", signed=True)


def _splits(t: torch.Tensor, splits: Any, world: int) -> list[int]:
    """Rows ``t`` sends to (or takes from) each rank; -1 when dim 0 does not split evenly."""
    if len(splits):
        return [int(s) for s in splits]
    rows = t.shape[0] if t.dim() else 0
    return [rows // world if rows % world == 0 else -1] * world


def _store_address(store: Any) -> tuple[str, int] | None:
    """(host, port) of the TCPStore behind ``store`` (through PrefixStores), else None."""
    for _ in range(16):
        if isinstance(store, dist.TCPStore):
            return store.host, store.port
        store = getattr(store, "underlying_store", None)
        if store is None:
            return None
    return None


def _local_address_towards(host: str, port: int) -> tuple[int, str]:
    """(family, address) of this machine's interface that reaches ``host``: the address peers
    that reach the store can reach (a UDP ``connect`` picks the route and sends nothing)."""
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(addr)
        return family, probe.getsockname()[0]


class _FingerprintExchange:
    """Every rank's 8-byte collective fingerprint, gathered in the calling thread over TCP
    connections between every pair of ranks (a mesh: each rank sends its fingerprint to every
    other rank, then reads theirs).

    Written here rather than as a gloo allgather: a gloo call goes through ProcessGroupGloo's work
    queue (a thread hand-off each way). In a loop of checks on this machine that costs 0.55 ms per
    check against 0.09 ms here, and the check runs before every collective. A mesh rather than a
    star through rank 0: every rank sends at once and waits for one message per peer, so a check
    costs one one-way trip (and one thread wake-up) instead of two in a row; in one A/B on 2 loaded
    ranks (back-to-back 4-byte all_reduces, same processes) the star cost 695 us per collective and
    the mesh 578 us (README, "Distributed training", has the bandwidth figures). Set up once per group through the group's store; a rank that cannot
    take part (no TCPStore, no route) makes every rank of the group use the gloo allgather instead.
    A peer that dies or does not call the collective within the group's timeout raises
    ``RuntimeError`` (as gloo does for the same faults); after that the exchange refuses further use."""

    _PREFIX = "foo_gloo/check/"

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        self.rank, self.size = rank, size
        self.timeout = timeout.total_seconds()
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._peers: list[socket.socket] = []  # every other rank, in rank order
        # a group built again on the same store (its keys are per group) gets fresh keys: every rank
        # adds 1 per build, and no rank starts build g+1 before all have added for build g
        generation = (store.add(self._PREFIX + "builds", 1) - 1) // size
        self._prefix = f"{self._PREFIX}{generation}/"
        address = _store_address(store)
        listener = None
        raw = ""
        try:
            if address is not None:
                family, host = _local_address_towards(*address)
                listener = socket.create_server(("", 0), family=family, backlog=size)
                listener.settimeout(self.timeout)
                raw = f"{host} {listener.getsockname()[1]}"
        except OSError:
            listener = None
        store.set(f"{self._prefix}addr/{rank}", raw)  # "" = cannot listen: the others must not wait
        addrs = [store.get(f"{self._prefix}addr/{r}").decode() for r in range(size)]
        ok = all(addrs)
        peers: dict[int, socket.socket] = {}
        # rank r connects to every lower rank and accepts every higher one
        if ok:
            for r in range(rank):
                host, port = addrs[r].rsplit(" ", 1)
                try:
                    conn = socket.create_connection((host, int(port)), timeout=self.timeout)
                    conn.sendall(struct.pack("<q", rank))
                    peers[r] = conn
                except OSError:
                    ok = False
                    break
        # every rank says whether it reached all lower ranks; only then does a rank accept
        store.set(f"{self._prefix}ok/{rank}", "1" if ok else "0")
        everyone = all(store.get(f"{self._prefix}ok/{r}") == b"1" for r in range(size))
        if everyone and listener is not None:
            try:
                for _ in range(size - 1 - rank):
                    conn, _ = listener.accept()
                    conn.settimeout(self.timeout)
                    peers[struct.unpack("<q", self._recv(conn, 8))[0]] = conn
            except OSError:
                ok = False
        if listener is not None:
            listener.close()
        self._peers = [peers[r] for r in sorted(peers)]
        store.set(f"{self._prefix}done/{rank}", "1" if ok and everyone and len(peers) == size - 1 else "0")
        self.active = all(store.get(f"{self._prefix}done/{r}") == b"1" for r in range(size))
        if not self.active:
            self.close()
            return
        for conn in self._peers:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self.timeout)

    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = conn.recv_into(view[got:])
            if k == 0:
                raise ConnectionResetError("connection closed")
            got += k
        return bytes(buf)

    def gather(self, mine: int, what: str) -> list[int]:
        """Every rank's fingerprint, in rank order."""
        with self._lock:
            if self._broken is not None:
                raise RuntimeError(self._broken)
            try:
                mine_raw = struct.pack("<q", mine)
                for conn in self._peers:
                    conn.sendall(mine_raw)
                theirs = [struct.unpack("<q", self._recv(conn, 8))[0] for conn in self._peers]
                return theirs[: self.rank] + [mine] + theirs[self.rank :]
            except OSError as e:
                waited = isinstance(e, TimeoutError) or isinstance(e, socket.timeout)
                cause = (
                    f"a peer did not reach it within the group's timeout ({self.timeout:g} s)"
                    if waited
                    else f"a peer's connection failed ({e}): it may have exited"
                )
                self._broken = (
                    f"{BACKEND_NAME} (torch.distributed on foo): rank {self.rank} could not agree on "
                    f"{what} with the other ranks: {cause}. The group cannot be used after this."
                )
                self.close()
                raise RuntimeError(self._broken) from e

    def close(self) -> None:
        for conn in self._peers:
            try:
                conn.close()
            except OSError:
                pass
        self._peers = []


class _FooWork(_Work):  # type: ignore[misc,valid-type]
    """gloo's work on CPU views of foo tensors, seen as work on the foo tensors: ``wait()``
    copies staged outputs back, ``result()`` and the future's value are the foo tensors."""

    def __init__(self, inner: Any, mapper: _Mapper) -> None:
        super().__init__()
        self._inner = inner
        self._staged = mapper.staged
        self._aliases = mapper.aliases
        self._lock = threading.Lock()
        self._done = not self._staged

    def _copy_back(self) -> None:
        with self._lock:
            if not self._done:
                for dst, src in self._staged:
                    dst.copy_(src)
                self._done = True

    def _to_foo(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            for alias, foo in self._aliases:
                if value.data_ptr() == alias.data_ptr() and value.dtype == alias.dtype and value.shape == alias.shape:
                    return foo
            return value
        if isinstance(value, list):
            return [self._to_foo(v) for v in value]
        return value

    def wait(self, timeout: timedelta | None = None) -> bool:
        ok = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        self._copy_back()
        return ok

    def is_completed(self) -> bool:
        return self._inner.is_completed() and self._done

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self) -> Any:
        return self._inner.exception()

    def source_rank(self) -> int:
        return self._inner.source_rank()

    def result(self) -> list[torch.Tensor]:
        return self._to_foo(self._inner.result())

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        def finish(fut: torch.futures.Future) -> Any:
            value = fut.value()  # raises if the collective failed
            self._copy_back()
            return self._to_foo(value)

        return self._inner.get_future().then(finish)


def _collective(name: str, outputs: bool) -> Callable[..., Any]:
    def method(self: FooGlooProcessGroup, *args: Any) -> Any:
        if self.check_collectives and name not in _UNCHECKED:
            self._check_agreement(name, args)
        mapper = _Mapper()
        mapped = [mapper.map(a, output=outputs and i == 0) for i, a in enumerate(args)]
        try:
            work = getattr(self._inner, name)(*mapped)
        except (RuntimeError, ValueError, TypeError) as e:
            if not mapper.aliases:
                raise
            # gloo checked CPU views of the foo tensors: say so, keep the exception type
            try:
                named = type(e)(
                    f"{BACKEND_NAME} {name} on foo tensors (passed to gloo as CPU views of foo "
                    f"memory, so gloo's message says cpu): {e}"
                )
            except Exception:  # noqa: BLE001  (an exception type with another constructor)
                raise e from None
            raise named from e
        return _FooWork(work, mapper) if mapper.aliases else work

    method.__name__ = name
    method.__doc__ = f"``ProcessGroup.{name}`` with foo tensors passed to gloo as CPU aliases."
    return method


#: ProcessGroup methods whose first argument holds the outputs (or the in-place tensors).
_COLLECTIVES_WITH_OUTPUT = (
    "allreduce",
    "allreduce_coalesced",
    "broadcast",
    "reduce",
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced",
    "gather",
    "scatter",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "recv",
    "recv_anysource",
)
_COLLECTIVES_INPUT_ONLY = ("send",)


class FooGlooProcessGroup(dist.ProcessGroup):
    """A process group for foo (and CPU) tensors whose transport and reductions are gloo.

    An ordinary c10d ``ProcessGroup`` with a ``ProcessGroupGloo`` backend does the work; this
    class hands it CPU aliases of foo tensors. The gloo backend is also registered on this
    group for ``cpu``, ``foo`` (and ``cuda``), so ``pg._get_backend(device)`` (timeouts,
    options) answers.

    ``check_collectives`` (default: on unless ``FOO_RS_DIST_CHECK=0``): before each collective
    the ranks exchange an 8-byte fingerprint of it; if they differ, every rank raises a
    ``RuntimeError`` naming each rank's collective, dtypes and shapes, and the group stays usable.
    """

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # (store, rank, size) cannot build a Python subclass on torch 2.13
        self.check_collectives = os.environ.get(CHECK_ENV, "1") != "0"
        gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._exchange = (
            _FingerprintExchange(store, rank, size, timeout) if self.check_collectives and size > 1 else None
        )
        self._gloo = gloo
        if dist.get_debug_level() == dist.DebugLevel.DETAIL:
            # as torch does for its own backends: check every collective's shapes and dtypes
            # across ranks first (a separate helper gloo group), so a mismatch raises
            gloo = dist.distributed_c10d._create_process_group_wrapper(gloo, "foo_gloo", store, rank, size, timeout)
        self._inner = dist.ProcessGroup(store, rank, size)
        gloo_type = dist.ProcessGroup.BackendType.GLOO
        self._inner._set_default_backend(gloo_type)
        for device in _GLOO_DEVICES:  # CPU (and CUDA) tensors go to the inner group as they are
            self._inner._register_backend(torch.device(device), gloo_type, gloo)
        self._set_default_backend(gloo_type)
        for device in (*_GLOO_DEVICES, "foo"):
            self._register_backend(torch.device(device), gloo_type, gloo)

    def getBackendName(self) -> str:  # noqa: N802  (the C++ name the trampoline asks for)
        return BACKEND_NAME

    def _check_agreement(self, name: str, args: tuple) -> None:
        """Raise on every rank if the ranks' calls of collective ``name`` differ (see the class)."""
        world = self.size()
        if world == 1:
            return
        description = _describe(name, args)
        mine = _fingerprint(description)
        if self._exchange is not None and self._exchange.active:
            prints = self._exchange.gather(mine, _PUBLIC_NAMES.get(name, name))
        else:
            gathered = torch.empty(world, dtype=torch.int64)
            self._inner._allgather_base(gathered, torch.tensor([mine], dtype=torch.int64)).wait()
            prints = gathered.tolist()
        if all(p == mine for p in prints):
            if name in _ALLTOALL_SINGLE and len(args[2]) in (0, world) and len(args[3]) in (0, world):
                self._check_splits(name, args, world)
            return
        raw = description.encode()[:_DESCRIPTION_BYTES].ljust(_DESCRIPTION_BYTES, b"\0")
        everyone = torch.empty(world * _DESCRIPTION_BYTES, dtype=torch.uint8)
        self._inner._allgather_base(everyone, torch.frombuffer(bytearray(raw), dtype=torch.uint8)).wait()
        rows = everyone.view(world, _DESCRIPTION_BYTES).tolist()
        said = [bytes(row).rstrip(bytes(1)).decode(errors="replace") for row in rows]
        calls = "; ".join(f"rank {r}: {call}" for r, call in enumerate(said))
        raise RuntimeError(
            f"{BACKEND_NAME} (torch.distributed on foo): the ranks called collectives that do not "
            f"match ({calls}). Every rank must call the same collective with the same dtypes and "
            f"shapes; nothing was sent. ({CHECK_ENV}=0 skips this check.)"
        )

    def _check_splits(self, name: str, args: tuple, world: int) -> None:
        """all_to_all_single: rank i's input split for rank j must be rank j's output split for i."""
        out, inp, out_splits, in_splits = args[:4]
        mine = torch.tensor(_splits(inp, in_splits, world) + _splits(out, out_splits, world), dtype=torch.int64)
        table = torch.empty(world * 2 * world, dtype=torch.int64)
        self._inner._allgather_base(table, mine).wait()
        rows = table.view(world, 2 * world).tolist()
        bad = [
            f"rank {i} sends {rows[i][j] if rows[i][j] >= 0 else 'an uneven split'} to rank {j}, "
            f"which expects {rows[j][world + i] if rows[j][world + i] >= 0 else 'an uneven split'}"
            for i in range(world)
            for j in range(world)
            if rows[i][j] != rows[j][world + i] or rows[i][j] < 0
        ]
        if bad:
            raise RuntimeError(
                f"{BACKEND_NAME} (torch.distributed on foo): {_PUBLIC_NAMES.get(name, name)} split sizes "
                f"(rows along dim 0) do not match across ranks: {'; '.join(bad[:8])}. Nothing was sent. "
                f"({CHECK_ENV}=0 skips this check.)"
            )

    def barrier(self, opts: Any = None) -> Any:
        if self.check_collectives:
            self._check_agreement("barrier", ())
        opts = dist.BarrierOptions() if opts is None else opts
        if getattr(opts, "device", None) is not None and opts.device.type == "foo":
            opts.device = torch.device("cpu")
        return self._inner.barrier(opts)

    def monitored_barrier(self, *args: Any, **kwargs: Any) -> Any:
        return self._gloo.monitored_barrier(*args, **kwargs)


for _name in _COLLECTIVES_WITH_OUTPUT:
    setattr(FooGlooProcessGroup, _name, _collective(_name, outputs=True))
for _name in _COLLECTIVES_INPUT_ONLY:
    setattr(FooGlooProcessGroup, _name, _collective(_name, outputs=False))
del _name


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> FooGlooProcessGroup:
    return FooGlooProcessGroup(store, rank, size, timeout)


def _gloo_covers_foo() -> bool:
    """Let the backend ``"gloo"`` serve foo tensors (through foo_gloo); True if hooked.

    ``init_process_group(backend)`` and ``new_group(backend=...)`` turn ``backend`` into a
    ``BackendConfig`` whose ``device_backend_map`` names the backend of each device type; for
    ``"gloo"`` torch 2.13-2.15 fill it from ``Backend.backend_capability["gloo"]`` (cpu, cuda),
    so a foo tensor finds no backend. Adding ``foo: gloo`` there would not help: the group would
    hand foo tensors to ``ProcessGroupGloo``, which refuses them. So after torch builds the map,
    a plain ``"gloo"`` (or a ``"foo:gloo"`` pair) gets ``foo: foo_gloo``, placed first (as
    ``"foo:foo_gloo"`` is in the explicit form). The group
    helper then builds foo_gloo first and, as for any backend that returns a whole
    ``ProcessGroup``, makes it the group: one gloo context that serves foo, cpu and cuda tensors.
    ``dist.get_backend()`` still says ``"gloo"``. A torch without ``BackendConfig`` is left
    alone: foo tensors then raise torch's "No backend type associated with device type foo",
    and the README gives the form ``"cpu:gloo,foo:foo_gloo"``."""
    config = getattr(dist.distributed_c10d, "BackendConfig", None)
    original = getattr(config, "__init__", None)
    if original is None:
        return False
    if getattr(original, "_foo_gloo", False):
        return True

    @functools.wraps(original)
    def __init__(self: Any, backend: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original(self, backend, *args, **kwargs)
        mapping = getattr(self, "device_backend_map", None)
        if not isinstance(mapping, dict):
            return
        foo = str(mapping.get("foo", "")).lower()
        if str(backend).lower() == "gloo" or foo in ("gloo", BACKEND_NAME):
            # first, so no gloo context is built for cpu and then dropped (the explicit form too)
            rest = {device: name for device, name in mapping.items() if device != "foo"}
            self.device_backend_map = {"foo": dist.Backend(BACKEND_NAME), **rest}

    __init__._foo_gloo = True  # type: ignore[attr-defined]
    config.__init__ = __init__  # type: ignore[union-attr]
    return True


def register() -> None:
    """Register ``foo_gloo`` with torch.distributed, make it foo's default backend and let
    ``"gloo"`` cover foo tensors with it."""
    backend = dist.Backend
    if BACKEND_NAME.upper() not in backend._plugins:
        backend.register_backend(BACKEND_NAME, _create, devices=["foo", "cpu"])
    # torch 2.13 leaves this map to the device (torch 2.15 fills it in register_backend)
    backend.default_device_backend_map.setdefault("foo", BACKEND_NAME)
    _gloo_covers_foo()


__all__ = ["BACKEND_NAME", "CHECK_ENV", "EXPLICIT_FORM", "FooGlooProcessGroup", "register"]
