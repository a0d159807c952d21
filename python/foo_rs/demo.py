"""Train the same small model on foo and on the CPU, side by side.

    python -m foo_rs.demo [--steps N]

Both runs start from the same weights (one seed) on the same synthetic data,
generated here; each step prints the loss on both devices and the time the
step took on both. The CPU trains first, then foo: a step timed right after
the other backend's step would share the two cores with that backend's
still-spinning worker threads (torch's OpenMP team spins for milliseconds
after a parallel region), which measured foo at 1.40x CPU's step time
against 1.04x with each device's steps back to back.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import foo_rs


#: Steps each device first trains a throwaway copy of the model for: the
#: one-time costs of a process (thread start-up, malloc arenas, the allocator's
#: first segments, autograd's device thread) took foo's first 8-10 steps to
#: settle (4.9, 2.0, 1.8, 1.8, 2.1, 1.7, 1.7, then 1.2-1.3 ms), the CPU's 3.
WARMUP_STEPS = 10


def make_data(n: int, d_in: int, n_classes: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(n_classes, d_in, generator=g) * 2.0
    labels = torch.randint(0, n_classes, (n,), generator=g)
    x = centers[labels] + torch.randn(n, d_in, generator=g)
    return x, labels


def make_model(d_in: int, hidden: int, n_classes: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, n_classes),
    )


def train_step(model, opt, x, y) -> float:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    d_in, n_classes = 64, 10
    x, y = make_data(args.batch * 8, d_in, n_classes, args.seed)
    models = {
        "cpu": make_model(d_in, args.hidden, n_classes, args.seed),
        "foo": make_model(d_in, args.hidden, n_classes, args.seed).to("foo"),
    }
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in models.items()}
    data = {"cpu": (x, y), "foo": (x.to("foo"), y.to("foo"))}

    print(
        f"foo_rs demo: MLP {d_in}-{args.hidden}-{args.hidden}-{n_classes}, batch {args.batch}, "
        f"SGD momentum, {args.steps} steps, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'step':>4} {'loss cpu':>10} {'loss foo':>10} {'|diff|':>9} {'ms cpu':>8} {'ms foo':>8}")
    for dev in ("cpu", "foo"):
        spare = make_model(d_in, args.hidden, n_classes, args.seed + 1).to(dev)
        spare_opt = torch.optim.SGD(spare.parameters(), lr=0.05, momentum=0.9)
        for _ in range(WARMUP_STEPS):
            train_step(spare, spare_opt, data[dev][0][: args.batch], data[dev][1][: args.batch])
        del spare, spare_opt
    foo_rs.reset_fallback_stats()
    times = {"cpu": [], "foo": []}
    losses = {"cpu": [], "foo": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        for dev in ("cpu", "foo"):
            for step in range(args.steps):
                lo = (step * args.batch) % x.shape[0]
                xb, yb = (t[lo : lo + args.batch] for t in data[dev])
                t0 = time.perf_counter()
                losses[dev].append(train_step(models[dev], opts[dev], xb, yb))
                times[dev].append(time.perf_counter() - t0)
            time.sleep(0.05)  # the CPU's worker threads go idle before foo starts
    for step in range(args.steps):
        lc, lf = losses["cpu"][step], losses["foo"][step]
        print(
            f"{step:4d} {lc:10.5f} {lf:10.5f} {abs(lc - lf):9.2e} "
            f"{times['cpu'][step] * 1e3:8.2f} {times['foo'][step] * 1e3:8.2f}"
        )
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"median step: cpu {med['cpu']:.2f} ms, foo {med['foo']:.2f} ms (foo/cpu = {med['foo'] / med['cpu']:.2f})")
    fb = foo_rs.fallback_stats()
    if fb:
        print(
            f"ops that fell back to the CPU ({sum(fb.values())} calls): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(fb.items(), key=lambda kv: -kv[1]))
        )
    else:
        print("every op ran natively on foo")


if __name__ == "__main__":
    main()
