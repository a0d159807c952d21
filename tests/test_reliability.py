"""Reliability: no leaks over long loops, thread safety, fork safety.

The training and thread tests run with the CPU fallback on, as a user has it.
The fork tests run in fresh interpreters (a forked child that hangs is killed
and reported, never left to block the run).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
from torch import nn

import foo_rs


@pytest.fixture(autouse=True)
def _quiet_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        yield


def _memory():
    gc.collect()
    return (torch.foo.memory_allocated(0), torch.foo.memory_allocated(1), foo_rs.live_blocks())


# ---------------------------------------------------------------- leaks


def test_training_loop_does_not_leak():
    """200 steps: memory is flat after warm-up and back to baseline at the end."""
    baseline = _memory()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("foo")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=g).to("foo")
    y = torch.randint(0, 4, (8,), generator=g).to("foo")
    steady = None
    for step in range(200):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step == 9:
            steady = _memory()
    assert torch.isfinite(loss).item()
    at_end = _memory()
    assert at_end == steady, f"memory grew over 190 steps: after step 10 {steady}, after step 200 {at_end}"
    del model, opt, loss, x, y
    assert _memory() == baseline


def test_repeated_errors_do_not_leak():
    baseline = _memory()
    x = torch.randn(100, device="foo")
    idx = torch.tensor([0, 1000], device="foo")
    for _ in range(200):
        with pytest.raises(IndexError):
            x.index_select(0, idx)
        with pytest.raises(RuntimeError):
            x + torch.randn(7, device="foo")
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 46, dtype=torch.uint8, device="foo")
    del x, idx
    assert _memory() == baseline


def test_fallback_and_views_do_not_leak():
    baseline = _memory()
    x = torch.randn(64, 64, device="foo")
    foo_rs.reset_fallback_stats()
    for _ in range(200):
        y = torch.nn.functional.interpolate(x[None, None], scale_factor=1.0, mode="bicubic")[0, 0]  # CPU fallback
        v, i = torch.linalg.ldl_factor(x[:8, :8])  # a fallback op with two outputs
        d = torch.diagonal(x)  # view
        d.add_(0.0)
        s = x.t().contiguous()[:8]
        z = torch.cat([y[:2], s[:2], v[:2, :1].expand(2, 64)])
    # The loop went through the fallback: if foo gains native kernels for
    # these ops, pick others that still fall back.
    stats = foo_rs.fallback_stats()
    assert stats.get("aten::upsample_bicubic2d.out") == 200 and stats.get("aten::linalg_ldl_factor_ex.out") == 200, (
        stats
    )
    del x, y, v, i, d, s, z
    assert _memory() == baseline


def test_serialization_does_not_leak(tmp_path):
    baseline = _memory()
    path = tmp_path / "t.pt"
    for _ in range(50):
        t = torch.randn(256, device="foo:1")
        torch.save({"t": t, "view": t[10:20]}, path)
        back = torch.load(path)
        assert back["t"].device == torch.device("foo:1")
        back_cpu = torch.load(path, map_location="cpu")
        assert torch.equal(back_cpu["t"], t.cpu())
    del t, back, back_cpu
    assert _memory() == baseline


# ---------------------------------------------------------------- threads


def _work(i: int, iters: int = 10):
    """A deterministic mixed workload on foo:(i % 2), returning CPU tensors."""
    dev = torch.device("foo", i % 2)
    g = torch.Generator(device="foo").manual_seed(1000 + i)
    torch.foo.set_device(dev)
    out = []
    for k in range(iters):
        x = torch.randn(32, 48, generator=g, device=dev)
        u = torch.empty(48, device=dev).uniform_(-1, 1, generator=g)
        y = (x * u + 0.5).relu()
        z = (y @ y.t()).sum(0) / (k + 1)
        w = torch.cat([z, x.abs().amax(1), y.clone().fill_(k).sum(0, keepdim=False)[:4]])
        assert torch.foo.current_device() == dev.index
        out.append(w.cpu())
    return torch.stack(out)


def test_kernel_descriptor_keeps_a_temporary_alive():
    # `_C.f(desc(x.contiguous()), desc(torch.empty(...)))`: the temporary
    # must outlive the call, or the caching allocator hands its memory to
    # the next allocation and the kernel reads what it writes.
    from foo_rs._ops._registry import desc

    x = torch.randn(64, 64, device="foo").t()
    d1 = desc(x.contiguous())
    d2 = desc(torch.empty(64, 64, device="foo"))
    assert d1[0] != d2[0]
    before = torch.foo.memory_allocated()
    del d1
    gc.collect()
    assert torch.foo.memory_allocated() < before  # released with the descriptor


def test_threads_match_sequential():
    baseline = _memory()
    n = 4
    sequential = [_work(i) for i in range(n)]
    torch.foo.set_device(0)
    results: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i):
        try:
            barrier.wait()
            for _ in range(3):
                results[i] = _work(i)  # noqa: F821  (deleted below, after the threads joined)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread running foo ops hung"
    assert not errors, errors
    # the main thread's current device is untouched by the threads' set_device
    assert torch.foo.current_device() == 0
    for i in range(n):
        assert torch.equal(results[i], sequential[i]), f"thread {i} differs from its sequential run"
    del results, sequential
    assert _memory() == baseline


@pytest.mark.skipif("FOO_RS_NUM_THREADS" in os.environ, reason="FOO_RS_NUM_THREADS fixes the count")
def test_kernels_follow_torch_set_num_threads(no_fallback):
    """torch.set_num_threads governs foo's pool; results do not depend on it."""
    old = torch.get_num_threads()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(600, 700, generator=g).to("foo")
    w = torch.randn(700, 300, generator=g).to("foo")

    def work():
        y = torch.nn.functional.gelu(x * 1.5 + x.sin())
        return torch.cat([t.cpu() for t in (y.sum(0), y.sum(1), (y @ w).flatten(), y.softmax(1)[0])])

    try:
        results = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            assert foo_rs._C.num_threads() == n
            results.append(work())
    finally:
        torch.set_num_threads(old)
    assert foo_rs._C.num_threads() == old
    for r in results[1:]:
        assert torch.equal(r, results[0])


def test_threads_share_one_tensor_readonly():
    x = torch.randn(256, 256, device="foo")
    expected = (x * 2).sum(1).cpu()
    errors, outs = [], []

    def run():
        try:
            for _ in range(20):
                outs.append((x * 2).sum(1).cpu())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(outs) == 80
    assert all(torch.equal(o, expected) for o in outs)


def test_threads_allocate_and_free_concurrently():
    baseline = _memory()
    errors = []

    def run(i):
        try:
            dev = f"foo:{i % 2}"
            for k in range(300):
                t = torch.empty((k % 17 + 1) * 1024, dtype=torch.uint8, device=dev)
                t.fill_(i)
                if k % 50 == 0:
                    assert (t.cpu() == i).all()
                del t
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert _memory() == baseline
    stats = torch.foo.memory_stats(0)
    assert stats["allocated_bytes.all.current"] == baseline[0]


# ---------------------------------------------------------------- fork


def _run_python(code: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    env = dict(os.environ, FOO_RS_DEVICE_COUNT="2")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )


_FORK_PROBE = r"""
import json, os, sys, time, warnings
import torch, foo_rs
warnings.simplefilter("ignore")

x = torch.ones(3, device="foo")   # foo is initialised and used in the parent
y = x + 1
parent_before = torch.foo.is_initialized()

def attempt(fn):
    try:
        fn()
        return "ok"
    except BaseException as e:
        return [type(e).__name__, str(e)]

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    res = {"bad_fork": torch.foo._is_in_bad_fork(), "is_initialized": torch.foo.is_initialized()}
    res["alloc"] = attempt(lambda: torch.empty(4, device="foo"))
    res["kernel_on_parent_tensor"] = attempt(lambda: x.fill_(2.0))
    # The fast lane's in-place kernels (C++ straight into Rust) allocate nothing.
    res["fast_lane_inplace_tensor"] = attempt(lambda: x.add_(y))
    res["fast_lane_inplace_scalar"] = attempt(lambda: x.mul_(2.0))
    res["fast_lane_unary_inplace"] = attempt(lambda: x.exp_())
    res["copy_to_cpu"] = attempt(lambda: x.cpu())
    res["lazy_init"] = attempt(torch.foo._lazy_init)
    res["device_count"] = attempt(torch.foo.device_count)
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
deadline = time.monotonic() + 60
status = None
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print(json.dumps({"child": "HUNG (killed after 60 s)"}))
    sys.exit(0)
data = b""
while chunk := os.read(r, 65536):
    data += chunk
child = json.loads(data) if data else {"child": f"died without answering, status {status}"}
parent_after = (y * 2).cpu().tolist()
print(json.dumps({"child": child, "parent_before": parent_before,
                  "parent_after": parent_after, "parent_bad_fork": torch.foo._is_in_bad_fork()}))
"""


@pytest.fixture(scope="module")
def fork_probe():
    proc = _run_python(_FORK_PROBE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fork_child_is_in_bad_fork(fork_probe):
    child = fork_probe["child"]
    assert isinstance(child, dict), child
    assert child["bad_fork"] is True
    assert child["is_initialized"] is False


def test_fork_child_lazy_init_raises(fork_probe):
    got = fork_probe["child"]["lazy_init"]
    assert got != "ok", "torch.foo._lazy_init() did not raise in the forked child"
    assert got[0] == "RuntimeError" and "fork" in got[1], got


@pytest.mark.parametrize(
    "use",
    [
        "alloc",
        "kernel_on_parent_tensor",
        "copy_to_cpu",
        "fast_lane_inplace_tensor",
        "fast_lane_inplace_scalar",
        "fast_lane_unary_inplace",
    ],
)
def test_fork_child_first_use_raises_clearly(fork_probe, use):
    child = fork_probe["child"]
    assert isinstance(child, dict), child
    got = child[use]
    assert got != "ok", f"{use} in a child forked after foo was initialised did not raise"
    name, msg = got
    assert name == "RuntimeError", got
    assert "foo" in msg and "fork" in msg, got


def test_fork_parent_unaffected(fork_probe):
    assert fork_probe["parent_before"] is True
    assert fork_probe["parent_bad_fork"] is False
    assert fork_probe["parent_after"] == [4.0, 4.0, 4.0]


def test_spawned_process_uses_foo():
    """What the bad-fork message recommends: the 'spawn' start method works."""
    code = r"""
    import multiprocessing as mp

    def child(q):
        import torch, foo_rs
        t = torch.arange(4.0, device="foo:1") * 2
        q.put((str(t.device), t.cpu().tolist(), torch.foo._is_in_bad_fork()))

    if __name__ == "__main__":
        import torch, foo_rs
        torch.ones(1, device="foo")  # initialised in the parent
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        print(q.get(timeout=90))
        p.join(30)
        print(p.exitcode)
    """
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    try:
        env = dict(os.environ, FOO_RS_DEVICE_COUNT="2")
        proc = subprocess.run([sys.executable, f.name], capture_output=True, text=True, timeout=150, env=env)
    finally:
        os.unlink(f.name)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == "('foo:1', [0.0, 2.0, 4.0, 6.0], False)", lines
    assert lines[-1] == "0", lines


def test_exit_waits_for_autograd_device_threads():
    """foo_rs's exit hook runs one small backward per foo device (each on that
    device's autograd worker thread), so that a worker still dropping an
    earlier graph task does so before Python finalizes (pytorch/pytorch#38228:
    a worker that takes the GIL then aborts the process)."""
    for i in range(torch.foo.device_count()):  # the worker threads exist once a backward ran
        torch.ones(2, device=f"foo:{i}", requires_grad=True).sum().backward()
    assert foo_rs._autograd_device_threads_started()
    before = len(foo_rs._EXIT_PASSES)
    foo_rs._drain_autograd_threads()
    leaves = [leaf for leaf, _, _ in foo_rs._EXIT_PASSES[before:]]
    assert [t.device for t in leaves] == [torch.device("foo", i) for i in range(torch.foo.device_count())]
    assert all(t.grad is not None and t.grad.item() == 1.0 for t in leaves)


def test_exit_after_discarded_gradients_is_clean():
    """The case that aborted 2-4 runs in 30 before the exit hook: the script's last
    line discards autograd.grad's results on foo."""
    code = r"""
    import atexit

    def report():  # registered before foo_rs's hook, so it runs after it
        import foo_rs
        print("exit passes", len(foo_rs._EXIT_PASSES))

    atexit.register(report)
    import torch, foo_rs
    import torch.nn.functional as F
    x = torch.randn(8, 64, 28, 28, device="foo", requires_grad=True)
    w = torch.randn(64, 64, 3, 3, device="foo", requires_grad=True)
    for _ in range(2):
        torch.autograd.grad(F.conv2d(x, w, padding=1).sum(), [x, w])
    """
    env = dict(os.environ, FOO_RS_DEVICE_COUNT="2")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=150, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminate called" not in proc.stderr
    assert "exit passes 2" in proc.stdout  # the hook ran at exit, one backward per device


def test_exit_without_backward_starts_no_autograd_threads():
    """A process that never ran a backward on foo has no autograd worker threads;
    the exit hook must not start them while Python shuts down (each takes the GIL
    once as it starts: a script with no backward aborted once in a CI run)."""
    code = r"""
    import atexit, os

    def report():  # registered before foo_rs's hook, so it runs after it
        import foo_rs
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        print("exit passes", len(foo_rs._EXIT_PASSES), "autograd threads", sum(n.startswith("pt_autograd_") for n in names))

    atexit.register(report)
    import torch, foo_rs
    a = torch.randn(1000, device="foo")
    print(float((a + a).sum()))
    """
    env = dict(os.environ, FOO_RS_DEVICE_COUNT="2")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=150, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exit passes 0 autograd threads 0" in proc.stdout, proc.stdout
