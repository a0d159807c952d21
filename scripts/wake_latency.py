"""Times a bfloat16 ``F.linear`` (256x784 @ 784x1024) call by call after an
idle pause, on foo or torch CPU: how many calls a device's thread pool needs
to run at full speed again once its threads went to sleep.

    python scripts/wake_latency.py foo 0.05      # device, pause in seconds
    FOO_RS_SPIN_US=100000 python scripts/wake_latency.py foo 0.05
    OMP_WAIT_POLICY=passive python scripts/wake_latency.py cpu 0.05
    python scripts/wake_latency.py --omp-spin

Prints the median time of each of the 12 calls after the pause (40 pauses).
``--omp-spin`` instead measures how long torch CPU's OpenMP worker threads
stay busy (spin) after a parallel region: the pause the side-by-side bench
needs before timing foo (``foo_rs.bench.SETTLE_S``), since a spinning worker
holds a core foo's pool would use.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import torch

import foo_rs  # noqa: F401  (registers the foo device)


def omp_spin() -> None:
    """Milliseconds after a CPU matrix product during which the process's
    other threads (torch's OpenMP team) still burn more than 60% of a core,
    sampled every 0.5 ms (10 products)."""
    me = threading.get_native_id()

    def others_ms() -> float:
        total = 0
        for t in os.listdir("/proc/self/task"):
            if int(t) != me:
                with open(f"/proc/self/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
        return total / 1e6

    x = torch.randn(2048, 2048)
    busy_until = []
    for _ in range(10):
        torch.mm(x, x)
        t0 = time.perf_counter()
        before, last_busy = others_ms(), 0.0
        while time.perf_counter() - t0 < 0.06:
            time.sleep(0.0005)
            now = others_ms()
            if now - before > 0.3:
                last_busy = time.perf_counter() - t0
            before = now
        busy_until.append(last_busy * 1e3)
    print(
        f"torch CPU, {torch.get_num_threads()} threads: OpenMP workers busy until "
        + " ".join(f"{v:.1f}" for v in busy_until)
        + " ms after each product"
    )


def main() -> None:
    if sys.argv[1:] == ["--omp-spin"]:
        omp_spin()
        return
    device, pause = sys.argv[1], float(sys.argv[2])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 784, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(1024, 784, generator=g) * 784**-0.5).to(device, torch.bfloat16)
    b = torch.randn(1024, generator=g).to(device, torch.bfloat16)
    for _ in range(5):
        torch.nn.functional.linear(x, w, b)
    calls, pauses = 12, 40
    times: list[list[float]] = [[] for _ in range(calls)]
    for _ in range(pauses):
        time.sleep(pause)
        for i in range(calls):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w, b)
            times[i].append(time.perf_counter() - t)
    medians = " ".join(f"{sorted(v)[pauses // 2] * 1e6:.0f}" for v in times)
    print(f"{device}, {pause * 1e3:.0f} ms idle, us per call after it: {medians}")


if __name__ == "__main__":
    main()
