"""Shared set-up: two foo devices, foo_rs imported once."""

import os

os.environ.setdefault("FOO_RS_DEVICE_COUNT", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import foo_rs  # noqa: E402,F401

#: Every dtype foo holds, for round-trip style tests.
FOO_DTYPES = list(foo_rs.SUPPORTED_DTYPES)


def make_tensor(shape, dtype, seed=0):
    """A CPU tensor with varied values of ``dtype`` (incl. negatives, non-integers)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


@pytest.fixture
def no_fallback():
    """Within the test, an op without a foo kernel raises instead of falling back."""
    with foo_rs.fallback_disabled():
        yield
