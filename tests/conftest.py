"""Shared set-up: two foo devices, foo_rs imported once."""

import os

os.environ.setdefault("FOO_RS_DEVICE_COUNT", "2")

import pytest  # noqa: E402
import torch  # noqa: E402,F401  (before foo_rs, as users import it)

import foo_rs  # noqa: E402,F401

from foo_testing import FOO_DTYPES, make_tensor  # noqa: E402,F401  (re-exported)


@pytest.fixture
def no_fallback():
    """Within the test, an op without a foo kernel raises instead of falling back."""
    with foo_rs.fallback_disabled():
        yield


_MEASURES_MEMORY: dict = {}


def _measures_memory(fn) -> bool:
    """Whether a test reads the allocator's counters (its source names them)."""
    if fn not in _MEASURES_MEMORY:
        import inspect

        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            src = ""
        _MEASURES_MEMORY[fn] = "memory_allocated" in src or "live_blocks" in src
    return _MEASURES_MEMORY[fn]


def pytest_runtest_setup(item):
    # A test that compares foo's live bytes with a baseline starts from a
    # collected heap: garbage of earlier tests (an exception's traceback
    # holds frames, and so tensors, in a reference cycle) would otherwise be
    # freed by a collection in the middle of the measurement, and the
    # baseline would count memory the test then sees released.
    fn = getattr(item, "function", None)
    if fn is not None and _measures_memory(fn):
        import gc

        gc.collect()
