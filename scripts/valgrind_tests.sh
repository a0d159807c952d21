#!/usr/bin/env bash
# The Rust unit tests (allocator, pool, kernels, RNG) under valgrind memcheck.
#
# Miri cannot run them (the allocator maps memory with mmap, kernels use SIMD
# intrinsics) and the sanitizers need a nightly toolchain; valgrind checks the
# real binary: invalid reads/writes, use of uninitialised memory, and
# definitely lost blocks fail the run. Under valgrind the CPU reports no
# AVX-512, so the AVX2 / portable kernel paths are the ones checked.
#
#   bash scripts/valgrind_tests.sh [test name filter...]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin=$(cargo test --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "foo_rs":
        print(m["executable"])' | tail -1)
[ -n "$bin" ] || { echo "could not find the test binary" >&2; exit 1; }
echo "valgrind memcheck: $bin $*"
exec valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  -q "$bin" --test-threads=2 "$@"
