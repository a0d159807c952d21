"""torch.distributed on foo: the foo_gloo backend (foo_rs/distributed.py).

Multi-process cases run two ranks on localhost as subprocesses (tests/dist_worker.py), never
forked from this process (foo refuses to run in a child forked after it initialised), each
run bounded by a timeout.
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


def test_collectives_under_torchrun_with_default_backend(tmp_path):
    """Every collective, every ReduceOp and dtype, sync and async: same values and exception
    types as the same collective on CPU tensors; foo memory back to baseline."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(WORKER),
        "collectives",
    ]
    proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True, timeout=90, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK 0" in out and "OK 1" in out, out[-4000:]


def test_explicit_form_and_a_plain_gloo_group():
    """"cpu:gloo,foo:foo_gloo" serves foo tensors; a group of gloo alone serves CPU tensors and
    refuses foo tensors with an error that names foo."""
    results = run_pair("collectives_quick", FOO_DIST_BACKEND=foo_dist.EXPLICIT_FORM)
    assert_ok(results)
    for _, out, _ in results:
        assert "GLOO-RAISED" in out and "foo" in out.split("GLOO-RAISED", 1)[1].splitlines()[0], out[-3000:]


@cache
def training_run(tmp: str):
    """DDP then FSDP2 in one 2-process run (both import torch._dynamo: one start-up)."""
    return run_pair("training", timeout=100, FOO_DIST_TMP=tmp)


@pytest.fixture
def training(tmp_path_factory):
    return training_run(str(tmp_path_factory.getbasetemp()))


def test_ddp_trains_like_one_process(training):
    """plain, gradient buckets of a parameter or so, no_sync; checkpoint saved on rank 0 and
    loaded with map_location="foo"."""
    assert_ok(training)


def test_ddp_find_unused_parameters_and_static_graph(training):
    for _, out, _ in training:
        assert "PASSED find_unused_parameters" in out and "PASSED static_graph" in out, out[-2000:]


def test_fsdp2_shards_and_gathers_on_foo(training):
    for rank, (code, out, _) in enumerate(training):
        assert code == 0 and f"SHARDED {rank}" in out and f"FSDP-OK {rank}" in out, out[-3000:]


def test_fsdp2_trains_like_one_process(training):
    for rank, (_, out, _) in enumerate(training):
        assert f"TRAINED {rank}" in out, out[-2000:]


def test_dead_peer_raises_within_the_timeout():
    code, out, seconds = run_pair("peer_dies", timeout=40, FOO_DIST_TIMEOUT="10")[0]
    assert code == 0 and "RAISED RuntimeError" in out, out[-3000:]
    assert float(out.split("RAISED RuntimeError", 1)[1].split()[0]) < 10


def test_collective_timeout_raises(tmp_path):
    code, out, _ = run_pair("times_out", timeout=40, FOO_DIST_TIMEOUT="3", FOO_DIST_TMP=str(tmp_path))[0]
    assert code == 0 and "RAISED RuntimeError" in out, out[-3000:]
    waited = float(out.split("RAISED RuntimeError", 1)[1].split()[0])
    assert 2.5 < waited < 10, waited


def test_mismatched_dtypes_and_shapes_raise_clear_errors():
    """Local mismatches raise at once; ranks that disagree on a shape raise under
    TORCH_DISTRIBUTED_DEBUG=DETAIL (torch's collective checks, as for its own backends)."""
    for code, out, _ in run_pair("mismatch", timeout=40, TORCH_DISTRIBUTED_DEBUG="DETAIL"):
        assert code == 0, out[-3000:]
        assert "LOCAL RuntimeError foo_gloo" in out and "invalid tensor type" in out, out[-3000:]
        assert "REMOTE RuntimeError" in out and "mismatch between collectives" in out, out[-3000:]
