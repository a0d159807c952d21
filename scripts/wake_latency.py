"""Times a bfloat16 ``F.linear`` (256x784 @ 784x1024) call by call after an
idle pause, on foo or torch CPU: how many calls a device's thread pool needs
to run at full speed again once its threads went to sleep.

    python scripts/wake_latency.py foo 0.05      # device, pause in seconds
    FOO_RS_SPIN_US=100000 python scripts/wake_latency.py foo 0.05
    OMP_WAIT_POLICY=passive python scripts/wake_latency.py cpu 0.05

Prints the median time of each of the 12 calls after the pause (40 pauses).
"""

from __future__ import annotations

import sys
import time

import torch

import foo_rs  # noqa: F401  (registers the foo device)


def main() -> None:
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
