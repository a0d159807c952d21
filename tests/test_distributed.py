"""torch.distributed on foo: the foo_gloo backend (foo_rs/distributed.py).

Multi-process cases run ranks on localhost (tests/dist_worker.py) under torchrun (2 ranks, one
run with 4) or as subprocesses with torchrun's environment, never forked from this process
(foo refuses to run in a child forked after it initialised), each run bounded by a timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import foo_rs
from foo_rs import distributed as foo_dist

WORKER = Path(__file__).with_name("dist_worker.py")
PACKAGE_ROOT = str(Path(foo_rs.__file__).resolve().parent.parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, env.get("PYTHONPATH", "")])
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    env.update(extra)
    return env


def run_pair(scenario: str, timeout: float = 60, **extra: str) -> list[tuple[int, str, float]]:
    """Both ranks of ``scenario``: (exit code, output, seconds) per rank; kills them at ``timeout``."""
    port = str(free_port())
    procs = []
    start = time.monotonic()
    for rank in range(2):
        env = worker_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **extra)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), scenario],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            pytest.fail(f"{scenario}: no result within {timeout}s (hang)\n{out[-3000:]}")
        results.append((p.returncode, out, time.monotonic() - start))
    return results


def assert_ok(results) -> None:
    for rank, (code, out, _) in enumerate(results):
        assert code == 0 and f"OK {rank}" in out, f"rank {rank} exit {code}\n{out[-4000:]}"


def test_cpu_alias_shares_foo_memory():
    base = torch.foo.memory_allocated()
    t = torch.arange(12, dtype=torch.float32, device="foo").reshape(3, 4)[1:]
    alias = foo_dist._cpu_alias(t)
    assert alias.device.type == "cpu" and alias.shape == t.shape and alias.stride() == t.stride()
    assert alias.data_ptr() == t.data_ptr()  # no staging copy
    alias.mul_(2)  # a write through the alias is a write to foo memory
    assert t.cpu().tolist() == [[8.0, 10.0, 12.0, 14.0], [16.0, 18.0, 20.0, 22.0]]
    del t  # the alias keeps the foo block alive (async collectives rely on it)
    assert torch.foo.memory_allocated() > base
    assert alias.tolist()[0] == [8.0, 10.0, 12.0, 14.0]
    del alias
    assert torch.foo.memory_allocated() == base
    for dtype in foo_rs.SUPPORTED_DTYPES:
        x = torch.ones(3, dtype=dtype, device="foo")
        assert foo_dist._cpu_alias(x).dtype == dtype
    assert foo_dist._cpu_alias(torch.empty(0, 5, device="foo")).shape == (0, 5)


def test_registered_as_foos_default_backend():
    assert dist.Backend.default_device_backend_map["foo"] == foo_dist.BACKEND_NAME
    assert set(dist.Backend.backend_capability[foo_dist.BACKEND_NAME]) == {"foo", "cpu"}
    # what init_process_group() with no backend argument picks (the accelerator is foo)
    config = dist.distributed_c10d.BackendConfig(dist.Backend.UNDEFINED)
    assert config.get_device_backend_map() == {"foo": foo_dist.BACKEND_NAME}
    explicit = dist.distributed_c10d.BackendConfig(foo_dist.EXPLICIT_FORM)
    assert explicit.get_device_backend_map() == {"cpu": "gloo", "foo": foo_dist.BACKEND_NAME}
    # "gloo" covers foo tensors through foo_gloo; foo comes first, so the group helper builds
    # foo_gloo (which serves cpu and cuda tensors too) and no gloo context it would drop
    for form in ("gloo", "GLOO", dist.Backend.GLOO, "cpu:gloo,foo:gloo", foo_dist.EXPLICIT_FORM):
        mapping = dist.distributed_c10d.BackendConfig(form).get_device_backend_map()
        assert next(iter(mapping.items())) == ("foo", foo_dist.BACKEND_NAME), (form, mapping)
        assert mapping["cpu"] == "gloo", (form, mapping)
    # a form that leaves foo out keeps it out
    assert dist.distributed_c10d.BackendConfig("cpu:gloo").get_device_backend_map() == {"cpu": "gloo"}


def test_fingerprint_check_is_on_by_default_and_opt_out(monkeypatch):
    """The cross-rank check runs before each collective (not point-to-point) unless
    FOO_RS_DIST_CHECK=0; descriptions that must differ do."""
    from datetime import timedelta

    checked = []
    monkeypatch.setattr(foo_dist.FooGlooProcessGroup, "_check_agreement", lambda self, name, args: checked.append(name))
    for env, expected in ((None, True), ("0", False), ("1", True)):
        if env is None:
            monkeypatch.delenv(foo_dist.CHECK_ENV, raising=False)
        else:
            monkeypatch.setenv(foo_dist.CHECK_ENV, env)
        pg = foo_dist.FooGlooProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=10))
        assert pg.check_collectives is expected
        checked.clear()
        t = torch.ones(3, device="foo")
        pg.allreduce([t]).wait()
        pg.broadcast([t]).wait()
        pg.barrier().wait()
        assert checked == (["allreduce", "broadcast", "barrier"] if expected else []), checked
        assert t.cpu().tolist() == [1.0, 1.0, 1.0]
    d = foo_dist._describe
    ar = dist.AllreduceOptions()
    ar_max = dist.AllreduceOptions()
    ar_max.reduceOp = dist.ReduceOp.MAX
    a, b = torch.ones(4, device="foo"), torch.ones(5, device="foo")
    assert d("allreduce", ([a], ar)) == d("allreduce", ([a.clone()], ar)) == "all_reduce SUM float32[4]"
    distinct = {
        d("allreduce", ([a], ar)),
        d("allreduce", ([b], ar)),
        d("allreduce", ([a.double()], ar)),
        d("allreduce", ([a], ar_max)),
        d("broadcast", ([a], dist.BroadcastOptions())),
        d("barrier", ()),
    }
    assert len(distinct) == 6, distinct
    assert len({foo_dist._fingerprint(x) for x in distinct}) == 6


def run_torchrun(nproc: int, scenario: str, timeout: float, cwd, **extra: str) -> str:
    """All ranks of ``scenario`` under torchrun; their output. Every rank must print "OK <rank>"."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(WORKER),
        scenario,
    ]
    proc = subprocess.run(cmd, env=worker_env(**extra), capture_output=True, text=True, timeout=timeout, cwd=cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and all(f"OK {r}" in out for r in range(nproc)), out[-4000:]
    return out


def test_collectives_under_torchrun_with_default_backend(tmp_path):
    """init_process_group(): every collective, every ReduceOp and dtype, sync and async: same
    values and exception types as the same collective on CPU tensors with torch's gloo; gloo
    gets foo memory itself; foo memory back to baseline. new_group(backend="gloo") serves foo
    tensors too; a "cpu:gloo" group is torch's gloo alone and refuses foo tensors with an error
    that names foo."""
    out = run_torchrun(2, "collectives_and_groups", 120, tmp_path)
    raised = [line.split("GLOO-RAISED", 1)[1] for line in out.splitlines() if "GLOO-RAISED" in line]
    assert len(raised) == 2 and all("foo" in r for r in raised), out[-3000:]


def test_gloo_backend_and_ddp_on_four_processes_under_torchrun(tmp_path):
    """init_process_group("gloo") with foo tensors, 4 ranks: collectives, then DDP (plain and
    small buckets) trains like one process on the whole batch; rank 0's checkpoint loads onto foo."""
    run_torchrun(4, "gloo_ddp", 120, tmp_path, FOO_DIST_TMP=str(tmp_path))


@cache
def training_run(tmp: str) -> str:
    """DDP then FSDP2 in one 2-process torchrun with init_process_group("cpu:gloo,foo:foo_gloo")
    (both import torch._dynamo: one start-up)."""
    try:
        return run_torchrun(2, "training", 150, tmp, FOO_DIST_TMP=tmp, FOO_DIST_BACKEND=foo_dist.EXPLICIT_FORM)
    except AssertionError as e:  # cached: the tests that share the run fail on its output, run once
        return str(e)


@pytest.fixture
def training(tmp_path_factory):
    return training_run(str(tmp_path_factory.getbasetemp()))


def test_ddp_trains_like_one_process(training):
    """The explicit form under torchrun; DDP plain, gradient buckets of a parameter or so,
    no_sync, a comm hook; checkpoint saved on rank 0 and loaded with map_location="foo"."""
    assert "OK 0" in training and "OK 1" in training, training[-3000:]


def test_ddp_find_unused_parameters_and_static_graph(training):
    for rank in range(2):
        for name in ("find_unused_parameters", "static_graph"):
            assert f"PASSED {name} {rank}" in training, training[-2000:]


def test_fsdp2_shards_and_gathers_on_foo(training):
    for rank in range(2):
        assert f"SHARDED {rank}" in training and f"FSDP-OK {rank}" in training, training[-3000:]


def test_fsdp2_trains_like_one_process(training):
    for rank in range(2):
        assert f"TRAINED {rank}" in training, training[-2000:]


def test_dead_peer_raises_within_the_timeout():
    code, out, seconds = run_pair("peer_dies", timeout=40, FOO_DIST_TIMEOUT="10")[0]
    assert code == 0 and "RAISED RuntimeError" in out, out[-3000:]
    assert float(out.split("RAISED RuntimeError", 1)[1].split()[0]) < 10


def test_collective_timeout_raises(tmp_path):
    code, out, _ = run_pair("times_out", timeout=40, FOO_DIST_TIMEOUT="3", FOO_DIST_TMP=str(tmp_path))[0]
    assert code == 0 and "RAISED RuntimeError" in out, out[-3000:]
    waited = float(out.split("RAISED RuntimeError", 1)[1].split()[0])
    assert 2.5 < waited < 10, waited


@cache
def mismatch_run():
    return run_pair("mismatch", timeout=40)


def test_mismatched_collectives_raise_on_every_rank():
    """Without TORCH_DISTRIBUTED_DEBUG: ranks that disagree on shape, dtype, reduce op, root,
    the collective itself or all_to_all split sizes raise a RuntimeError on every rank that
    names foo and what each rank passed (gloo would abort); the group works afterwards. Local
    mismatches raise at once."""
    for rank, (code, out, _) in enumerate(mismatch_run()):
        assert code == 0 and f"OK {rank}" in out, out[-3000:]
        assert "LOCAL RuntimeError foo_gloo" in out and "invalid tensor type" in out, out[-3000:]
        cases = {line.split()[1]: float(line.split()[2]) for line in out.splitlines() if line.startswith("MISMATCH")}
        expected = {"shape", "dtype", "op", "root", "collective", "reduce_scatter_tensor", "splits"}
        assert set(cases) == expected, out[-3000:]
        assert max(cases.values()) < 5, cases  # at once, not at the group's 10 s timeout


def test_mismatch_check_without_a_tcp_store(tmp_path):
    """On a FileStore group the exchange cannot connect; the check uses a gloo allgather instead."""
    results = run_pair("mismatch_file_store", timeout=40, FOO_DIST_TMP=str(tmp_path))
    assert_ok(results)
    for _, out, _ in results:
        assert "MISMATCH shape" in out, out[-3000:]


def test_torch_detail_checks_still_apply():
    """With foo_gloo's check off, TORCH_DISTRIBUTED_DEBUG=DETAIL's collective checks (torch's,
    as for its own backends) catch ranks that disagree."""
    for code, out, _ in mismatch_run():
        assert code == 0, out[-3000:]
        assert "REMOTE RuntimeError" in out and "mismatch between collectives" in out, out[-3000:]
