"""torch.distributed benchmark: foo tensors against CPU tensors over gloo, in the same run.

    python -m foo_rs.bench_dist [--repeats N] [--sizes 1,4,16,64,256] [--skip-ddp]

Starts 2 local ranks (subprocesses, never fork). Part 1: all_reduce (SUM, float32) of 1-256 MiB,
foo tensors (foo_gloo: gloo on CPU views of foo memory) and CPU tensors (the same gloo
transport) alternately in one process group; medians and bus bandwidth
(size * 2 * (n - 1) / n / time). Part 2: DDP step time of a small MLP on foo, 1 process then
2 processes, the same per-rank batch (weak scaling: the same step time would be perfect), threads split between processes.
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


def _worker_allreduce(sizes: list[int], repeats: int) -> None:
    import torch.distributed as dist

    import foo_rs  # noqa: F401

    dist.init_process_group("foo_gloo")
    world = dist.get_world_size()
    for mib in sizes:
        n = mib * MiB // 4
        tensors = {"cpu": torch.ones(n), "foo": torch.ones(n, device="foo")}
        times: dict[str, list[float]] = {"cpu": [], "foo": []}
        for dev in ("cpu", "foo"):  # warm-up: connections, caches, first-touch of pages
            dist.all_reduce(tensors[dev])
        for i in range(repeats):
            for dev in ("cpu", "foo") if i % 2 == 0 else ("foo", "cpu"):  # no order bias
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(tensors[dev])
                times[dev].append(time.perf_counter() - t0)
        # the slower rank decides a collective's time: take the maximum over ranks
        med = torch.tensor([statistics.median(times["cpu"]), statistics.median(times["foo"])], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            cpu_t, foo_t = med.tolist()
            factor = 2 * (world - 1) / world
            print(f"ALLREDUCE {mib} {cpu_t} {foo_t} {mib * MiB * factor / cpu_t / 1e9} {mib * MiB * factor / foo_t / 1e9}", flush=True)
        del tensors
    dist.destroy_process_group()


def _worker_ddp(repeats: int, batch: int, threads: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import foo_rs  # noqa: F401

    dist.init_process_group("foo_gloo")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
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
        print(f"DDP {dist.get_world_size()} {med.item()} {torch.get_num_threads()}", flush=True)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sizes", default="1,4,16,64,256", help="all_reduce sizes in MiB")
    p.add_argument("--batch", type=int, default=128, help="per-rank batch of the DDP step")
    p.add_argument("--skip-ddp", action="store_true")
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker", choices=["allreduce", "ddp"], help=argparse.SUPPRESS)
    a = p.parse_args(argv if argv is not None else sys.argv[1:])
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.worker == "allreduce":
        return _worker_allreduce(sizes, a.repeats)
    if a.worker == "ddp":
        return _worker_ddp(a.repeats, a.batch, a.threads)

    command = "python -m foo_rs.bench_dist " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; `{command.strip()}`")
    print(f"\nall_reduce SUM float32, 2 ranks on localhost (gloo), median of {a.repeats}\n")
    print("| size | CPU tensors | foo tensors | CPU bus GB/s | foo bus GB/s | foo/CPU bandwidth |")
    print("|---:|---:|---:|---:|---:|---:|")
    for line in _launch(2, ["allreduce", "--sizes", a.sizes, "--repeats", str(a.repeats)]):
        if line.startswith("ALLREDUCE"):
            _, mib, cpu_t, foo_t, cpu_bw, foo_bw = line.split()
            print(
                f"| {mib} MiB | {float(cpu_t) * 1e3:.2f} ms | {float(foo_t) * 1e3:.2f} ms | "
                f"{float(cpu_bw):.2f} | {float(foo_bw):.2f} | {float(foo_bw) / float(cpu_bw):.2f} |"
            )
    if a.skip_ddp:
        return
    print(f"\nDDP step, MLP 784-1024-1024-10 on foo, batch {a.batch} per rank, median of {a.repeats}\n")
    print("| processes | step time | threads per process | vs 1 process |")
    print("|---:|---:|---:|---:|")
    first = None
    cores = os.cpu_count() or 1
    # 1 process on all cores, 1 process on the cores one rank of 2 gets, then 2 processes
    for world, threads in ((1, cores), (1, max(1, cores // 2)), (2, max(1, cores // 2))):
        args = ["ddp", "--repeats", str(a.repeats), "--batch", str(a.batch), "--threads", str(threads)]
        for line in _launch(world, args):
            if line.startswith("DDP"):
                _, w, t, threads = line.split()
                first = first or float(t)
                print(f"| {w} | {float(t) * 1e3:.2f} ms | {threads} | {float(t) / first:.2f} |")


if __name__ == "__main__":
    main()
