#!/usr/bin/env bash
# Creates .venv, installs the pinned torch and the build/test tools, and
# builds foo_rs into it with maturin. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PROFILE=${FOO_RS_PROFILE:-release}

if ! command -v cargo >/dev/null; then
    echo "setup: cargo (Rust) is required: https://rustup.rs" >&2
    exit 1
fi
# valgrind runs the allocator and pool tests under memcheck in `make test`.
if ! command -v valgrind >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get install -y -qq valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
    else
        echo "setup: valgrind not found (needed by make test-memcheck); install it with your package manager" >&2
    fi
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch first: the build compiles the C++ glue against its headers.
"$VENV/bin/python" -m pip install --quiet "torch>=2.13,<2.14" numpy
"$VENV/bin/python" -m pip install --quiet "maturin>=1.9,<2" pytest hypothesis expecttest matplotlib

export VIRTUAL_ENV="$PWD/$VENV"
export PATH="$VIRTUAL_ENV/bin:$PATH"
if [ "$PROFILE" = "release" ]; then
    maturin develop --release --quiet
else
    maturin develop --quiet
fi
"$VENV/bin/python" -c "import foo_rs, torch; print('foo_rs ready:', torch.__version__, torch.foo.device_count(), 'foo devices')"
