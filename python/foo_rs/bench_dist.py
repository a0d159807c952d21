"""torch.distributed benchmark: foo tensors against CPU tensors over gloo, in the same run.

    python -m foo_rs.bench_dist [--repeats N] [--sizes 1,4,16,64,256] [--skip-ddp]

Starts 2 local ranks (subprocesses, never fork). Part 1: all_reduce (SUM, float32) of one
element (latency) and 1-256 MiB: CPU tensors on torch's gloo alone, foo tensors on foo_gloo
(gloo on CPU views of foo memory) with and without its cross-rank fingerprint check,
alternately in the same processes; each sample times up to 16 back-to-back calls (as nccl-tests
does); medians and bus bandwidth (size * 2 * (n - 1) / n / time).
Part 2: DDP step time of a small MLP on foo, 1 process then 2 processes (check on, then off),
the same per-rank batch (weak scaling: the same step time would be perfect), threads split
between processes.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

MiB = 1 << 20


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, args: list[str]) -> list[str]:
    """Run this module's worker on ``world`` local ranks; rank 0's output lines."""
    port = str(_port())
    package_root = str(Path(__file__).resolve().parent.parent)
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env["PYTHONPATH"] = os.pathsep.join([package_root, env.get("PYTHONPATH", "")])
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "foo_rs.bench_dist", "--worker", *args],
                env=env,
                stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                text=True,
            )
        )
    out, _ = procs[0].communicate(timeout=1800)
    for p in procs[1:]:
        p.wait(timeout=60)
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    return out.splitlines()


def _timed_allreduce(tensor: torch.Tensor, group: object, iters: int) -> float:
    """Seconds per all_reduce over ``iters`` back-to-back calls, started in step by a barrier.

    Back to back, as nccl-tests measures bus bandwidth and as DDP issues its buckets: each call
    pays what a collective costs in a stream of them (foo_gloo's fingerprint check included)."""
    import torch.distributed as dist

    # the barrier runs on the measured group itself: a barrier on another group would leave this
    # group's gloo threads asleep, and waking them is a large part of a 1 MiB all_reduce here
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - t0) / iters


def _iters(numel: int) -> int:
    """Back-to-back calls per sample: 16 for the smallest sizes, fewer as a call grows past 1 MiB."""
    return max(1, min(16, (16 * MiB) // max(1, numel * 4)))


def _worker_allreduce(sizes: list[int], repeats: int) -> None:
    import torch.distributed as dist

    import foo_rs  # noqa: F401

    dist.init_process_group("gloo")  # foo_gloo for foo tensors (and the group's CPU tensors)
    foo_group = dist.group.WORLD
    plain = dist.new_group(backend="cpu:gloo")  # torch's gloo alone: the CPU baseline
    world = dist.get_world_size()
    # (label, device, group, fingerprint check): CPU tensors on plain gloo, foo tensors on foo_gloo
    cases = [("cpu", "cpu", plain, True), ("foo", "foo", foo_group, True), ("foo-nocheck", "foo", foo_group, False)]
    factor = 2 * (world - 1) / world

    def run(numel: int, reps: int) -> list[float]:
        tensors = {label: torch.ones(numel, device=dev) for label, dev, _, _ in cases}
        times: dict[str, list[float]] = {label: [] for label, _, _, _ in cases}
        for label, _, group, check in cases:  # warm-up: connections, caches, first-touch of pages
            foo_group.check_collectives = check
            dist.all_reduce(tensors[label], group=group)
        for i in range(reps):
            order = cases if i % 2 == 0 else cases[::-1]  # no order bias
            for label, _, group, check in order:
                foo_group.check_collectives = check
                times[label].append(_timed_allreduce(tensors[label], group, _iters(numel)))
        foo_group.check_collectives = True
        # the slower rank decides a collective's time: take the maximum over ranks
        med = torch.tensor([statistics.median(times[label]) for label, _, _, _ in cases], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        return med.tolist()

    # latency: one float32, where foo_gloo's own cost per collective shows
    cpu_t, foo_t, nocheck_t = run(1, max(51, repeats))
    if dist.get_rank() == 0:
        print(f"LATENCY {cpu_t} {foo_t} {nocheck_t}", flush=True)
    for mib in sizes:
        cpu_t, foo_t, nocheck_t = run(mib * MiB // 4, repeats)
        if dist.get_rank() == 0:
            bw = [mib * MiB * factor / t / 1e9 for t in (cpu_t, foo_t, nocheck_t)]
            print(f"ALLREDUCE {mib} {cpu_t} {foo_t} {nocheck_t} {bw[0]} {bw[1]} {bw[2]}", flush=True)
    dist.destroy_process_group()


def _worker_ddp(repeats: int, batch: int, threads: int, check: bool) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import foo_rs  # noqa: F401

    dist.init_process_group("gloo")
    dist.group.WORLD.check_collectives = check
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    ).to("foo")
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, 784, device="foo")
    y = torch.randint(0, 10, (batch,)).to("foo")

    def step() -> None:
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"DDP {dist.get_world_size()} {med.item()} {torch.get_num_threads()} {int(check)}", flush=True)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sizes", default="1,4,16,64,256", help="all_reduce sizes in MiB")
    p.add_argument("--batch", type=int, default=128, help="per-rank batch of the DDP step")
    p.add_argument("--skip-ddp", action="store_true")
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--no-check", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", choices=["allreduce", "ddp"], help=argparse.SUPPRESS)
    a = p.parse_args(argv if argv is not None else sys.argv[1:])
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.worker == "allreduce":
        return _worker_allreduce(sizes, a.repeats)
    if a.worker == "ddp":
        return _worker_ddp(a.repeats, a.batch, a.threads, not a.no_check)

    command = "python -m foo_rs.bench_dist " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; `{command.strip()}`")
    print(
        f"\nall_reduce SUM float32, 2 ranks on localhost, median of {a.repeats} samples of up to 16 back-to-back "
        "calls (max over ranks). CPU tensors: "
        "torch's gloo alone (new_group(backend='cpu:gloo')); foo tensors: foo_gloo (init_process_group('gloo')), "
        "with and without its cross-rank fingerprint check\n"
    )
    print(
        "| size | CPU tensors | foo tensors | foo, no check | CPU bus GB/s | foo bus GB/s "
        "| foo/CPU bandwidth | foo/CPU, no check |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for line in _launch(2, ["allreduce", "--sizes", a.sizes, "--repeats", str(a.repeats)]):
        if line.startswith("LATENCY"):
            cpu_t, foo_t, nocheck_t = (float(v) * 1e6 for v in line.split()[1:])
            print(
                f"| 4 B (latency) | {cpu_t:.0f} us | {foo_t:.0f} us | {nocheck_t:.0f} us | | | "
                f"{cpu_t / foo_t:.2f} | {cpu_t / nocheck_t:.2f} |"
            )
        if line.startswith("ALLREDUCE"):
            _, mib, cpu_t, foo_t, nocheck_t, cpu_bw, foo_bw, nocheck_bw = line.split()
            print(
                f"| {mib} MiB | {float(cpu_t) * 1e3:.2f} ms | {float(foo_t) * 1e3:.2f} ms | "
                f"{float(nocheck_t) * 1e3:.2f} ms | "
                f"{float(cpu_bw):.2f} | {float(foo_bw):.2f} | {float(foo_bw) / float(cpu_bw):.2f} | "
                f"{float(nocheck_bw) / float(cpu_bw):.2f} |"
            )
    if a.skip_ddp:
        return
    print(f"\nDDP step, MLP 784-1024-1024-10 on foo, batch {a.batch} per rank, median of {a.repeats}\n")
    print("| processes | step time | threads per process | fingerprint check | vs 1 process |")
    print("|---:|---:|---:|---|---:|")
    first = None
    cores = os.cpu_count() or 1
    # 1 process on all cores, 1 process on the cores one rank of 2 gets, then 2 processes
    # (with foo_gloo's fingerprint check, then without)
    half = max(1, cores // 2)
    for world, threads, check in ((1, cores, True), (1, half, True), (2, half, True), (2, half, False)):
        args = ["ddp", "--repeats", str(a.repeats), "--batch", str(a.batch), "--threads", str(threads)]
        for line in _launch(world, args + ([] if check else ["--no-check"])):
            if line.startswith("DDP"):
                _, w, t, threads_used, checked = line.split()
                first = first or float(t)
                on = "on" if checked == "1" else "off"
                print(f"| {w} | {float(t) * 1e3:.2f} ms | {threads_used} | {on} | {float(t) / first:.2f} |")


if __name__ == "__main__":
    main()
