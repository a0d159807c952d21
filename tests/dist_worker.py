"""One rank of a multi-process run for tests/test_distributed.py (launched by subprocess or torchrun).

Usage: python dist_worker.py <scenario> [backend]; the rank, world size and rendezvous come
from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as torchrun sets them.
A scenario prints "OK <rank>" on success; a failed check raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta


import torch
import torch.distributed as dist

import foo_rs  # noqa: F401  (registers the foo device and the foo_gloo backend)
from foo_rs import distributed as foo_dist


def say(*parts) -> None:
    """One line in one write(2): the ranks share the parent's pipe, and
    print()'s separate writes interleave between processes."""
    os.write(1, (" ".join(str(p) for p in parts) + "\n").encode())


# Real dtypes: collectives on complex foo tensors are not covered yet (issue 18).
DTYPES = [d for d in foo_rs.SUPPORTED_DTYPES if not d.is_complex]
#: dtypes torch's gloo has no collectives for ("Invalid scalar type" on CPU tensors too)
GLOO_LACKS = {torch.int16}
OPS = [
    dist.ReduceOp.SUM,
    dist.ReduceOp.PRODUCT,
    dist.ReduceOp.MIN,
    dist.ReduceOp.MAX,
    dist.ReduceOp.BAND,
    dist.ReduceOp.BOR,
    dist.ReduceOp.BXOR,
    dist.ReduceOp.AVG,
    dist._make_nccl_premul_sum(2.0),  # ReduceOp.PREMUL_SUM with its factor (gloo lacks it)
]


def init(backend: str | None = None, timeout: float = 30.0) -> tuple[int, int]:
    if dist.is_initialized():  # a combined scenario: one group for all its parts
        return dist.get_rank(), dist.get_world_size()
    kwargs = {"timeout": timedelta(seconds=timeout)}
    if backend is None:
        dist.init_process_group(**kwargs)
    else:
        dist.init_process_group(backend, **kwargs)
    return dist.get_rank(), dist.get_world_size()


def values(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)
    lo, hi = (0, 7) if dtype == torch.uint8 else (-7, 8)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def outcome(fn):
    """The result of ``fn`` moved to the CPU, or the type of the exception it raised."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001  (compared between CPU and foo)
        return type(e)
    if isinstance(out, (list, tuple)):
        return [o.cpu() for o in out]
    return out.cpu()


def same(a, b, what):
    if isinstance(a, type) or isinstance(b, type):
        assert a is b, f"{what}: CPU gave {a}, foo gave {b}"
        return
    if isinstance(a, list):
        assert len(a) == len(b), what
        for x, y in zip(a, b):
            same(x, y, what)
        return
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    assert torch.equal(a, b), f"{what}: values differ\nCPU {a}\nfoo {b}"


#: The group each device's collectives run on in collectives(): None is the default group.
GROUP: dict[str, object] = {"foo": None}


def run_both(what, make, may_raise=False):
    """Run collective ``make(device, async_op)`` on CPU then foo (sync and async); compare.
    Unless ``may_raise`` (reduce ops gloo lacks for some dtypes), the CPU run must succeed."""
    ref = outcome(lambda: make("cpu", False))
    assert may_raise or not isinstance(ref, type), f"{what}: CPU raised {ref}"
    for async_op in (False, True):
        got = outcome(lambda: make("foo", async_op))
        same(ref, got, f"{what} async={async_op}")


def finish(work, result):
    if work is not None:
        work.wait()
    return result


def collectives(dtypes=DTYPES, gloo_group: bool = False) -> None:
    """Every collective, ReduceOp and dtype, sync and async: foo tensors on the default group
    (foo_gloo) and CPU tensors on torch's gloo alone give the same outcome."""
    rank, world = init(os.environ.get("FOO_DIST_BACKEND") or None)
    pg = dist.group.WORLD
    assert isinstance(pg, foo_dist.FooGlooProcessGroup), type(pg)
    # the reference: the same collective on CPU tensors with torch's gloo alone
    GROUP["cpu"] = dist.new_group(backend="cpu:gloo")
    base = torch.foo.memory_allocated()
    for dtype in dtypes:
        x = values((5, 3), dtype, seed=rank)
        for op in OPS:

            def reduce_all(dev, a, op=op):
                t = x.to(dev, copy=True)
                return finish(dist.all_reduce(t, op=op, async_op=a, group=GROUP[dev]), t)

            run_both(f"all_reduce {op} {dtype}", reduce_all, may_raise=True)

            def reduce_to_1(dev, a, op=op):
                t = x.to(dev, copy=True)
                return finish(dist.reduce(t, dst=1, op=op, async_op=a, group=GROUP[dev]), t)

            run_both(f"reduce {op} {dtype}", reduce_to_1, may_raise=True)

            def reduce_scatter(dev, a, op=op):
                out = torch.empty(2, 3, dtype=dtype, device=dev)
                inp = values((4, 3), dtype, seed=rank + 10).to(dev, copy=True)
                return finish(dist.reduce_scatter_tensor(out, inp, op=op, async_op=a, group=GROUP[dev]), out)

            run_both(f"reduce_scatter_tensor {op} {dtype}", reduce_scatter, may_raise=True)

        def broadcast(dev, a):
            t = x.to(dev, copy=True)
            return finish(dist.broadcast(t, src=1, async_op=a, group=GROUP[dev]), t)

        def broadcast_strided(dev, a):  # a non-contiguous foo tensor is staged and copied back
            t = x.to(dev, copy=True).t()
            return finish(dist.broadcast(t, src=0, async_op=a, group=GROUP[dev]), t)

        def all_gather(dev, a):
            outs = [torch.empty(5, 3, dtype=dtype, device=dev) for _ in range(world)]
            return finish(dist.all_gather(outs, x.to(dev, copy=True), async_op=a, group=GROUP[dev]), outs)

        def all_gather_tensor(dev, a):
            out = torch.empty(world * 5, 3, dtype=dtype, device=dev)
            return finish(dist.all_gather_into_tensor(out, x.to(dev, copy=True), async_op=a, group=GROUP[dev]), out)

        def all_to_all(dev, a):  # uneven splits: rank 0 sends 2 rows to itself, 4 to rank 1; rank 1 sends 3 and 3
            inp = values((6, 2), dtype, seed=rank + 20).to(dev, copy=True)
            in_splits, out_splits = ([3, 3], [4, 3]) if rank else ([2, 4], [2, 3])
            out = torch.empty(sum(out_splits), 2, dtype=dtype, device=dev)
            w = dist.all_to_all_single(out, inp, out_splits, in_splits, async_op=a, group=GROUP[dev])
            return finish(w, out)

        def gather(dev, a):
            outs = [torch.empty(5, 3, dtype=dtype, device=dev) for _ in range(world)] if rank == 0 else None
            w = dist.gather(x.to(dev, copy=True), outs, dst=0, async_op=a, group=GROUP[dev])
            return finish(w, outs if rank == 0 else x.to(dev, copy=True))

        def scatter(dev, a):
            out = torch.empty(5, 3, dtype=dtype, device=dev)
            src = [values((5, 3), dtype, seed=30 + i).to(dev, copy=True) for i in range(world)] if rank == 1 else None
            return finish(dist.scatter(out, src, src=1, async_op=a, group=GROUP[dev]), out)

        def send_recv(dev, a):
            t = x.to(dev, copy=True) if rank == 0 else torch.empty(5, 3, dtype=dtype, device=dev)
            if a:
                w = dist.isend(t, dst=1, group=GROUP[dev]) if rank == 0 else dist.irecv(t, src=0, group=GROUP[dev])
                return finish(w, t)
            if rank == 0:
                dist.send(t, dst=1, group=GROUP[dev])
            else:
                dist.recv(t, src=0, group=GROUP[dev])
            return t

        for name, fn in [
            ("broadcast", broadcast),
            ("broadcast non-contiguous", broadcast_strided),
            ("all_gather", all_gather),
            ("all_gather_into_tensor", all_gather_tensor),
            ("all_to_all_single", all_to_all),
            ("gather", gather),
            ("scatter", scatter),
            ("send/recv", send_recv),
        ]:
            run_both(f"{name} {dtype}", fn, may_raise=dtype in GLOO_LACKS)

    # gloo gets foo memory itself (no staging copy) for a contiguous tensor, a staged
    # contiguous copy for a non-contiguous one
    class Spy:
        def __init__(self, inner):
            self.inner, self.ptrs = inner, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def allreduce(self, tensors, *rest):
            self.ptrs += [t.data_ptr() for t in tensors]
            return self.inner.allreduce(tensors, *rest)

    pg._inner = spy = Spy(pg._inner)
    try:
        t = torch.ones(1 << 12, device="foo")
        dist.all_reduce(t)
        s = torch.ones(8, 4, device="foo").t()
        dist.all_reduce(s)
    finally:
        pg._inner = spy.inner
    assert spy.ptrs[0] == t.data_ptr() and spy.ptrs[1] != s.data_ptr(), (spy.ptrs, t.data_ptr(), s.data_ptr())
    assert t.cpu().eq(world).all() and s.cpu().eq(world).all()
    del t, s, spy

    # barrier waits for every rank
    if rank == 1:
        time.sleep(0.5)
    start = time.monotonic()
    dist.barrier()
    if rank == 0:
        assert time.monotonic() - start > 0.4, time.monotonic() - start

    # futures (DDP's comm hooks use them): aliased and staged foo tensors
    for t in (torch.ones(4, 3, device="foo"), torch.ones(4, 3, device="foo").t()):
        fut = dist.all_reduce(t, async_op=True).get_future()
        (value,) = fut.wait()
        assert value is t, (value.device, value.shape)  # the foo tensor, not gloo's CPU view
        assert t.cpu().eq(world).all(), t.cpu()
    del t, fut, value

    # an async collective keeps its foo tensor alive after the caller drops it
    t = torch.full((1 << 16,), float(rank + 1), device="foo")
    w = dist.all_reduce(t, async_op=True)
    ptr = t.data_ptr()
    del t
    filler = torch.zeros(1 << 16, device="foo")  # would reuse the block if it had been freed
    assert filler.data_ptr() != ptr
    w.wait()
    del filler, w
    dist.barrier()
    say("LEFT", torch.foo.memory_allocated() - base)

    if gloo_group:
        # new_group(backend="gloo") covers foo tensors too (foo_gloo); "cpu:gloo" is torch's
        # gloo alone: CPU tensors only, a foo tensor raises torch's error, which names foo
        g = dist.new_group(backend="gloo")
        assert isinstance(g, foo_dist.FooGlooProcessGroup), type(g)
        f = torch.full((3,), float(rank + 1), device="foo")
        dist.all_reduce(f, group=g)
        assert f.cpu().tolist() == [3.0, 3.0, 3.0], f.cpu()
        cpu_only = dist.new_group(backend="cpu:gloo")
        assert not isinstance(cpu_only, foo_dist.FooGlooProcessGroup)
        c = torch.ones(3)
        dist.all_reduce(c, group=cpu_only)
        assert c.tolist() == [2.0, 2.0, 2.0]
        try:
            dist.all_reduce(torch.ones(3, device="foo"), group=cpu_only)
        except RuntimeError as e:
            say("GLOO-RAISED", str(e).replace("\n", " ")[:300])
        else:
            say("GLOO-WORKED")
        del f
    dist.barrier(device_ids=None)
    # gloo's worker thread drops its reference to a finished work (and so to the alias that
    # holds the foo block) just after waking the waiter: give it a moment
    deadline = time.monotonic() + 5
    while torch.foo.memory_allocated() != base and time.monotonic() < deadline:
        time.sleep(0.01)
    assert torch.foo.memory_allocated() == base, (torch.foo.memory_allocated(), base)
    dist.destroy_process_group()
    say("OK", rank)


def collectives_and_groups() -> None:
    collectives(gloo_group=True)


def batches(steps, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 8, generator=g), torch.randn(batch, 4, generator=g)) for _ in range(steps)]


class Net(torch.nn.Module):
    def __init__(self, unused: bool = False, hidden: int = 16, depth: int = 0) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, hidden)
        self.mid = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(depth))
        self.b = torch.nn.Linear(hidden, 4)
        self.unused = torch.nn.Linear(hidden, 4) if unused else None

    def forward(self, x):
        h = torch.tanh(self.a(x))
        for layer in self.mid:
            h = torch.tanh(layer(h))
        return self.b(h)


def train(model, data, opt, rank=None, world=1, accumulate=1, ddp=None):
    """SGD on mean-squared error; with ``rank``, each rank takes its slice of every batch."""
    for i, (x, y) in enumerate(data):
        if rank is not None:
            n = x.shape[0] // world
            x, y = x[rank * n : (rank + 1) * n], y[rank * n : (rank + 1) * n]
        last = (i + 1) % accumulate == 0
        ctx = ddp.no_sync() if (ddp is not None and not last) else _null()
        with ctx:
            loss = torch.nn.functional.mse_loss(model(x.to("foo")), y.to("foo")) / accumulate
            loss.backward()
        if last:
            opt.step()
            opt.zero_grad()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


DDP_CONFIGS = {
    "plain": ({}, 1),
    # DDP's first bucket holds up to 1 MiB whatever bucket_cap_mb says (torch: CPU alike), so
    # a 1.3 MB model: several buckets from the second step on (after DDP rebuilds them), counted below
    "small buckets": ({"bucket_cap_mb": 0.0005}, 1),
    "no_sync": ({}, 2),  # gradients accumulated locally over 2 batches, then reduced
    "comm hook": ({"hook": "allreduce_hook"}, 1),  # a Python hook on the work's future
    "find_unused_parameters": ({"find_unused_parameters": True}, 1),
    "static_graph": ({"static_graph": True}, 1),
}


def ddp(names: str = "plain,small buckets,no_sync,comm hook", checkpoint: bool = True) -> None:
    """DDP over 2 ranks trains to the parameters of one process on the whole batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = init()
    data = batches(6, 8)
    for name in names.split(","):
        kw, acc = DDP_CONFIGS[name]
        unused = name == "find_unused_parameters"
        size = (256, 5) if name == "small buckets" else (16, 0)
        torch.manual_seed(0)
        ref = Net(unused, *size).to("foo")
        torch.manual_seed(1 + rank)  # DDP must broadcast rank 0's parameters
        local = Net(unused, *size).to("foo")
        if rank == 0:
            local.load_state_dict(ref.state_dict())
        kw = dict(kw)
        hook = kw.pop("hook", None)
        model = DDP(local, **kw)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if hook is not None:
            model.register_comm_hook(None, getattr(default_hooks, hook))
        buckets = set()
        if name == "small buckets":  # count the buckets DDP reduces (gloo's allreduce still does it)

            def counting(state, bucket):
                buckets.add(bucket.index())
                return default_hooks.allreduce_hook(state, bucket)

            model.register_comm_hook(None, counting)
        lr = 0.1
        start = [p.detach().cpu().clone() for p in ref.parameters()]
        train(ref, data, torch.optim.SGD(ref.parameters(), lr=lr), accumulate=acc)
        moved = max((p.detach().cpu() - p0).abs().max().item() for p, p0 in zip(ref.parameters(), start))
        assert moved > 1e-3, f"{name}: training barely moved the parameters ({moved}): the comparison says nothing"
        train(model, data, torch.optim.SGD(model.parameters(), lr=lr), rank, world, acc, ddp=model)
        if name == "small buckets":
            assert len(buckets) >= 2, buckets
        for (pn, p), q in zip(model.module.named_parameters(), ref.parameters()):
            assert p.device.type == "foo"
            torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), msg=f"{name}: {pn}")

    if not checkpoint:
        return
    # checkpoint: rank 0 saves, every rank loads onto foo
    path = os.environ["FOO_DIST_TMP"] + "/ckpt.pt"
    if rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()
    sd = torch.load(path, map_location="foo")
    for k, v in model.state_dict().items():
        assert sd[k].device.type == "foo"
        torch.testing.assert_close(sd[k].cpu(), v.cpu(), rtol=0, atol=0)
    say("OK", rank)


def ddp_all() -> None:
    """The configurations that work, then those that need pinned memory (reported, not raised)."""
    ddp()
    for name in ("find_unused_parameters", "static_graph"):
        try:
            ddp(name, checkpoint=False)
        except Exception as e:  # noqa: BLE001  (reported to the test)
            say("FAILED", name, type(e).__name__, str(e).splitlines()[0][:200])
        else:
            say("PASSED", name, dist.get_rank())


def fsdp() -> None:
    """FSDP2 (fully_shard) of a small transformer: sharding, gathering, then training."""
    from torch.distributed.fsdp import fully_shard

    rank, world = init()

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            torch.nn.Linear(16, 4),
        ).to("foo")

    ref = make()
    model = make()
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    # sharding: each rank holds its dim-0 half of every parameter, on foo
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        local = p.to_local()
        assert local.device.type == "foo", n
        rows = -(-q.shape[0] // world)
        torch.testing.assert_close(local.cpu(), q.detach()[rank * rows : (rank + 1) * rows].cpu(), msg=n)
        torch.testing.assert_close(p.full_tensor().cpu(), q.detach().cpu(), msg=n)
    say("SHARDED", rank)

    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(4, 5, 16, generator=g), torch.randn(4, 5, 4, generator=g)) for _ in range(3)]
    try:
        for net, part in ((ref, None), (model, rank)):
            opt = torch.optim.SGD(net.parameters(), lr=0.05)
            for x, y in data:
                if part is not None:
                    x, y = x[2 * part : 2 * part + 2], y[2 * part : 2 * part + 2]
                torch.nn.functional.mse_loss(net(x.to("foo")), y.to("foo")).backward()
                opt.step()
                opt.zero_grad()
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.full_tensor().cpu(), q.detach().cpu(), msg=n)
        say("TRAINED", rank)
    except Exception as e:  # noqa: BLE001  (reported to the test, which says what is missing)
        say("TRAIN-FAILED", type(e).__name__, str(e).splitlines()[0][:200])
    say("FSDP-OK", rank)


def training() -> None:
    """DDP, then FSDP2, in one group (one start-up: both import torch._dynamo)."""
    init(os.environ.get("FOO_DIST_BACKEND") or None)
    assert isinstance(dist.group.WORLD, foo_dist.FooGlooProcessGroup), type(dist.group.WORLD)
    ddp_all()
    fsdp()
    dist.destroy_process_group()


def peer_dies() -> None:
    rank, _ = init(timeout=float(os.environ.get("FOO_DIST_TIMEOUT", "10")))
    t = torch.ones(4, device="foo")
    dist.all_reduce(t)
    if rank == 1:
        os._exit(3)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        time.sleep(0.5)
        dist.all_reduce(t)
    except RuntimeError as e:
        say("RAISED", type(e).__name__, f"{time.monotonic() - start:.1f}", str(e)[:200].replace("\n", " "))
        os._exit(0)
    raise AssertionError("all_reduce with a dead peer returned")


def times_out() -> None:
    rank, _ = init(timeout=float(os.environ.get("FOO_DIST_TIMEOUT", "3")))
    t = torch.ones(4, device="foo")
    dist.all_reduce(t)
    done = os.path.join(os.environ["FOO_DIST_TMP"], "timed_out")
    if rank == 1:
        deadline = time.monotonic() + float(os.environ.get("FOO_DIST_TIMEOUT", "3")) + 10
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(t, async_op=True).wait()
    except RuntimeError as e:
        open(done, "w").close()
        say("RAISED", type(e).__name__, f"{time.monotonic() - start:.1f}", str(e)[:200].replace("\n", " "))
        os._exit(0)
    raise AssertionError("all_reduce with a silent peer returned")


def gloo_ddp() -> None:
    """init_process_group("gloo") under torchrun (4 ranks): foo tensors go to foo_gloo; then
    DDP trains like one process on the whole batch; checkpoint saved on rank 0, loaded on foo."""
    rank, world = init("gloo")
    assert isinstance(dist.group.WORLD, foo_dist.FooGlooProcessGroup), type(dist.group.WORLD)
    assert dist.get_backend() == "gloo", dist.get_backend()
    t = torch.full((3,), float(rank), device="foo")
    dist.all_reduce(t)
    c = torch.full((3,), float(rank))
    dist.all_reduce(c)
    expected = [float(sum(range(world)))] * 3
    assert t.cpu().tolist() == expected and c.tolist() == expected, (t.cpu(), c)
    del t
    ddp("plain,small buckets")
    dist.destroy_process_group()


def _raises_everywhere(what: str, fn, *needles: str) -> None:
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        msg = str(e).replace("\n", " ")
        missing = [n for n in ("foo", *needles) if n not in msg]
        assert not missing, f"{what}: {missing} not in {msg}"
        say("MISMATCH", what, f"{time.monotonic() - start:.1f}", msg[:300])
    else:
        raise AssertionError(f"{what}: returned")


def mismatch() -> None:
    rank, world = init(timeout=10)
    # the fingerprints travel over the group's own connections to rank 0, not a gloo allgather
    exchange = dist.group.WORLD._exchange
    assert exchange is not None and exchange.active, "foo_gloo's fingerprint exchange is not connected"
    # local mismatches: raise on each rank before anything is sent
    out = torch.empty(world * 4, dtype=torch.float64, device="foo")
    try:
        dist.all_gather_into_tensor(out, torch.ones(4, device="foo"))
    except (RuntimeError, ValueError, TypeError) as e:
        say("LOCAL", type(e).__name__, str(e)[:200].replace("\n", " "))
    else:
        raise AssertionError("all_gather_into_tensor with mismatched dtypes returned")

    # ranks that disagree: every rank raises, says what each rank passed; the group stays usable
    def ones(n, dtype=torch.float32):
        return torch.ones(n, dtype=dtype, device="foo")

    _raises_everywhere(
        "shape",
        lambda: dist.all_reduce(ones(4 + rank)),
        "rank 0: all_reduce SUM float32[4]",
        "rank 1: all_reduce SUM float32[5]",
    )
    dtype = torch.float64 if rank else torch.float32
    _raises_everywhere("dtype", lambda: dist.all_reduce(ones(4, dtype), async_op=True), "float64[4]", "float32[4]")
    op = dist.ReduceOp.MAX if rank else dist.ReduceOp.SUM
    _raises_everywhere("op", lambda: dist.all_reduce(ones(4), op=op), "all_reduce SUM", "all_reduce MAX")
    _raises_everywhere("root", lambda: dist.broadcast(ones(4), src=rank), "broadcast root 0", "broadcast root 1")
    _raises_everywhere(
        "collective",
        lambda: dist.barrier() if rank else dist.all_gather_into_tensor(ones(8), ones(4)),
        "rank 1: barrier",
        "rank 0: all_gather_into_tensor",
    )
    _raises_everywhere(
        "reduce_scatter_tensor",
        lambda: dist.reduce_scatter_tensor(ones(2 + rank), ones(4 + 2 * rank)),
        "float32[2]",
        "float32[3]",
    )
    # all_to_all_single: rank 0 sends 3 rows to rank 1, which expects 2 from it
    out_splits = [2, 4] if rank else [3, 3]
    _raises_everywhere(
        "splits",
        lambda: dist.all_to_all_single(ones(6), ones(6), out_splits, [3, 3]),
        "rank 0 sends 3 to rank 1, which expects 2",
    )
    t = torch.full((4,), float(rank + 1), device="foo")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [3.0] * 4, t.cpu()
    say("OK", rank)

    # TORCH_DISTRIBUTED_DEBUG=DETAIL: torch's own collective checks (as for its backends) wrap
    # a new group's gloo; with foo_gloo's check off they catch the mismatch
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    g = dist.new_group(backend="gloo")
    g.check_collectives = False
    try:
        dist.all_reduce(torch.ones(4 + rank, device="foo"), group=g)
    except RuntimeError as e:
        say("REMOTE", type(e).__name__, str(e)[:200].replace("\n", " "))
        os._exit(0)
    raise AssertionError("all_reduce of mismatched sizes returned")


def mismatch_file_store() -> None:
    """A group on a FileStore (no TCP address to meet at): the fingerprint check falls back to a
    gloo allgather on every rank and still catches ranks that disagree; the group works after."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        init_method=f"file://{os.environ['FOO_DIST_TMP']}/store",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=10),
    )
    exchange = dist.group.WORLD._exchange
    assert exchange is not None and not exchange.active, "a FileStore group has no address for the exchange"
    _raises_everywhere(
        "shape",
        lambda: dist.all_reduce(torch.ones(4 + rank, device="foo")),
        "rank 0: all_reduce SUM float32[4]",
        "rank 1: all_reduce SUM float32[5]",
    )
    t = torch.full((4,), float(rank + 1), device="foo")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [3.0] * 4, t.cpu()
    say("OK", rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    globals()[sys.argv[1]]()
