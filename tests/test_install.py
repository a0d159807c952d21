"""foo_rs loads only under a torch it supports and was built for, and finds
torch's libraries by itself.

Each import happens in a fresh interpreter: the checks run before the native
module is loaded, so they must be seen from a process that has not loaded it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import foo_rs
from foo_rs import _torch_check


def _import_with_version(version: str) -> subprocess.CompletedProcess:
    code = f"import torch\ntorch.__version__ = {version!r}\nimport foo_rs\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _minor(v: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", v).groups()
    return int(major), int(minor)


def test_supported_range_comes_from_the_package_metadata():
    lo, hi = _torch_check.supported_range()
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert f'"torch>={lo},<{hi}"' in pyproject.read_text()
    assert _minor(lo) <= _minor(torch.__version__) < _minor(hi)


def test_built_version_is_the_running_torch():
    assert _torch_check.built_version() == foo_rs._C.BUILT_TORCH_VERSION
    assert _minor(foo_rs._C.BUILT_TORCH_VERSION) == _minor(torch.__version__)


@pytest.mark.parametrize("version", ["2.12.1", "2.16.0", "3.0.0"])
def test_unsupported_torch_raises_import_error_naming_versions(version):
    lo, hi = _torch_check.supported_range()
    r = _import_with_version(version)
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert f"torch {version} is installed" in r.stderr
    assert f">={lo},<{hi}" in r.stderr
    # Refused before the native module was loaded: no loader error.
    assert "undefined symbol" not in r.stderr


def test_torch_other_than_the_build_raises_import_error():
    lo, hi = _torch_check.supported_range()
    built = _minor(foo_rs._C.BUILT_TORCH_VERSION)
    other = next(
        (major, minor)
        for major, minor in ((_minor(lo)[0], m) for m in range(_minor(lo)[1], _minor(hi)[1]))
        if (major, minor) != built
    )
    r = _import_with_version(f"{other[0]}.{other[1]}.0")
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert f"built against torch {foo_rs._C.BUILT_TORCH_VERSION}" in r.stderr
    assert "Rebuild foo_rs" in r.stderr


def test_import_in_a_fresh_process_without_library_path():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run(
        [sys.executable, "-c", "import torch, foo_rs; print(torch.ones(2, device='foo').sum().item())"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2.0"


@pytest.mark.skipif(shutil.which("ldd") is None, reason="ldd is not installed")
def test_native_module_resolves_torchs_own_libraries():
    so = foo_rs._C.__file__
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(["ldd", so], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "not found" not in out
    torch_lib = Path(torch.__file__).resolve().parent / "lib"
    for lib in ("libc10.so", "libtorch_cpu.so"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(lib))
        # The installed torch's copy, never one grafted next to foo_rs.
        assert Path(line.split("=>")[1].split("(")[0].strip()).resolve().parent == torch_lib, line
