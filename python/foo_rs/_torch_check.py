"""Refuses to load foo_rs under a torch it does not support or was not built for.

The native module links torch's own libc10/libtorch_cpu and its C++ glue is
compiled against one torch's headers; loading it under another torch fails
with a dynamic-loader error at best. These checks run before the native
module is loaded and raise an ImportError that says what to do instead.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import mmap
import re

import torch

_MARKER = b"\0FOO_RS_BUILT_TORCH="


def _minor(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ImportError(f"foo_rs: cannot read the torch version {version!r}")
    return int(m.group(1)), int(m.group(2))


def supported_range() -> tuple[str, str] | None:
    """The ``(lower, upper)`` bounds of foo_rs's torch requirement, upper
    excluded, from the installed package's metadata (written once, in
    pyproject.toml); None when foo_rs runs without metadata."""
    try:
        requires = importlib.metadata.requires("foo_rs") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for req in requires:
        m = re.match(r"torch\s*(?:\(\s*)?([^;)]*)", req)
        if m is None or not req.startswith("torch"):
            continue
        spec = dict((op, v.strip()) for op, v in re.findall(r"(>=|<)\s*([\d.]+)", m.group(1)))
        if ">=" in spec and "<" in spec:
            return spec[">="], spec["<"]
    return None


def built_version() -> str | None:
    """The torch version the native module was compiled against, read from
    the library's bytes without loading it; None if it cannot be found."""
    spec = importlib.util.find_spec("foo_rs._C")
    if spec is None or not spec.origin:
        return None
    try:
        with open(spec.origin, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            at = mm.find(_MARKER)
            if at < 0:
                return None
            end = mm.find(b"\0", at + len(_MARKER))
            return mm[at + len(_MARKER) : end].decode("ascii", "replace")
    except OSError:
        return None


def check(installed: str | None = None) -> None:
    """Raises ImportError when the installed torch is outside foo_rs's
    supported range or differs (major.minor) from the one foo_rs was built
    against."""
    installed = installed or torch.__version__
    bounds = supported_range()
    if bounds is not None:
        lo, hi = bounds
        if not (_minor(lo) <= _minor(installed) < _minor(hi)):
            raise ImportError(
                f"foo_rs supports torch >={lo},<{hi}, but torch {installed} is installed. "
                f"Install a supported torch (pip install 'torch>={lo},<{hi}') and rebuild foo_rs."
            )
    built = built_version()
    if built is not None and _minor(built) != _minor(installed):
        raise ImportError(
            f"foo_rs was built against torch {built}, but torch {installed} is installed; its C++ "
            "glue must be compiled against the torch it runs with. Rebuild foo_rs "
            "(`maturin develop --release`, or `pip install --no-build-isolation .`)."
        )
