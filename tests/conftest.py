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
