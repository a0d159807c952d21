"""Every criterion bench as a fraction of the machine's limits.

    cargo bench                      # or: cargo bench --bench limits --bench kernels
    python scripts/bench_report.py   # reads target/criterion

Memory-bound benches (throughput in bytes) are compared with the STREAM triad
bandwidth of `benches/limits.rs`; compute benches whose throughput is counted
in FLOPs (GEMM, `limits/fma/peak`) with the FMA peak. The table gives the
median time, the rate, and the percentage of the limit. Small sizes can exceed
100% of STREAM: their arrays sit in the caches, which STREAM deliberately
does not measure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FLOP_GROUPS = ("sgemm", "dgemm", "limits/fma")


def load(root: Path) -> list[dict]:
    rows = []
    for bench in sorted(root.glob("**/new/benchmark.json")):
        est = bench.with_name("estimates.json")
        if not est.exists():
            continue
        b = json.loads(bench.read_text())
        e = json.loads(est.read_text())
        tp = b.get("throughput") or {}
        kind, amount = next(iter(tp.items()), (None, None))
        rows.append(
            {
                "id": b.get("full_id") or f"{b.get('group_id')}/{b.get('function_id') or b.get('value_str')}",
                "group": b.get("group_id", ""),
                "median_ns": e["median"]["point_estimate"],
                "kind": kind,
                "amount": amount,
            }
        )
    return rows


def fmt_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--criterion", default="target/criterion", type=Path)
    args = p.parse_args(argv)
    rows = load(args.criterion)
    if not rows:
        print(f"no criterion results under {args.criterion}; run `cargo bench` first")
        return 1
    by_id = {r["id"]: r for r in rows}

    def rate(r):  # per second
        return r["amount"] / (r["median_ns"] * 1e-9) if r["amount"] else None

    triad = by_id.get("limits/stream/triad")
    peak = by_id.get("limits/fma/peak")
    bw = rate(triad) if triad else None
    flops = rate(peak) if peak else None
    if bw:
        print(f"STREAM triad: {bw / 1e9:.1f} GB/s", end="")
    if flops:
        print(f"   FMA peak: {flops / 1e9:.1f} GFLOP/s", end="")
    print("\n")
    print("| bench | median | rate | % of limit |")
    print("|---|---:|---:|---:|")
    for r in rows:
        rt = rate(r)
        if rt is None:
            print(f"| {r['id']} | {fmt_time(r['median_ns'])} | | |")
            continue
        is_flops = r["kind"] == "Elements" and any(r["group"].startswith(g) for g in FLOP_GROUPS)
        if r["kind"] == "Bytes":
            shown, limit = f"{rt / 1e9:.1f} GB/s", bw
        elif is_flops:
            shown, limit = f"{rt / 1e9:.1f} GFLOP/s", flops
        else:
            shown, limit = f"{rt / 1e9:.2f} Gelem/s", None
        pct = f"{100 * rt / limit:.0f}%" if limit else ""
        print(f"| {r['id']} | {fmt_time(r['median_ns'])} | {shown} | {pct} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
