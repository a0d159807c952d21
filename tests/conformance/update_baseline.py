#!/usr/bin/env python
"""Regenerates the native OpInfo conformance baselines (the ratchet of
tests/conformance/test_opinfo.py) from the current state of foo.

    python tests/conformance/update_baseline.py            # every baseline_<dtype>.json here
    python tests/conformance/update_baseline.py float32 grad_float32  # only these sweeps

Each baseline is {OpInfo full name: "pass"} for the ops that pass natively
(CPU fallback off). Review the diff: an op that disappears from a baseline is
a regression, not a cleanup.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))

from foo_rs import conformance  # noqa: E402

DEFAULT_DTYPES = ("float32", "grad_float32", "int64", "bfloat16", "float16", "complex64")


def _run(key):
    dtype, grad = conformance.parse_sweep_key(key)
    return conformance.run(dtype, grad=grad)


def main(argv: list[str]) -> int:
    dtypes = argv or sorted({p.stem.removeprefix("baseline_") for p in HERE.glob("baseline_*.json")} or DEFAULT_DTYPES)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:  # as the test runs them: two sweeps at a time
        futures = {d: pool.submit(_run, d) for d in dtypes}
        all_results = {d: f.result() for d, f in futures.items()}
    for dtype in dtypes:
        path = HERE / f"baseline_{dtype}.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        results = all_results[dtype]
        new = conformance.passing(results)
        path.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        gained = sorted(set(new) - set(old))
        lost = sorted(set(old) - set(new))
        print(conformance.summary(results, *conformance.parse_sweep_key(dtype)))
        print(f"  wrote {path.relative_to(HERE.parents[1])}: {len(new)} ops (+{len(gained)} -{len(lost)})")
        if lost:
            print(
                "  NO LONGER PASSING (regressions!): "
                + ", ".join(f"{op} [{results.get(op, {}).get('status', 'gone')}]" for op in lost)
            )
        if gained:
            print("  newly passing: " + ", ".join(gained))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
