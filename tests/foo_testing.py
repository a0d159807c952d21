"""Helpers shared by the test modules (a uniquely named module: `conftest`
is ambiguous once several test folders have one)."""

import pytest
import torch

import foo_rs

#: Every dtype foo holds, for round-trip style tests.
FOO_DTYPES = list(foo_rs.SUPPORTED_DTYPES)
#: The real dtypes foo holds: those its own kernels compute in (complex tensors
#: reach Rust only for copies, fills, FFTs and a few elementwise ops; the rest
#: of their ops fall back to CPU).
REAL_DTYPES = [d for d in FOO_DTYPES if not d.is_complex]


def make_tensor(shape, dtype, seed=0):
    """A CPU tensor with varied values of ``dtype`` (incl. negatives, non-integers)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(dtype)
    if dtype.is_complex:
        return (torch.randn(shape, generator=g, dtype=torch.complex128) * 10).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


def run_native_case(name, f):
    """A CASES-style case `f(t)` (t moves each tensor to the device) on CPU,
    then on foo twice: the first foo call does anything lazy, the second must
    run no Python kernel (dispatcher -> C++ kernel -> Rust). Returns
    (expected, actual)."""
    expected = f(lambda x: x)
    f(lambda x: x.to("foo"))
    before = foo_rs.python_kernel_calls()
    actual = f(lambda x: x.to("foo"))
    ran_python = foo_rs.python_kernel_calls() - before
    assert not ran_python, f"{name} ran Python kernels: {dict(ran_python)}"
    return expected, actual


def check_native_error(name, f):
    """An ERROR_CASES-style case `f(t)` raises on foo what it raises on CPU
    (the exception's type, and its first line with " (foo)" appended), from
    the native kernel: no Python kernel runs on the way."""
    with pytest.raises(Exception) as cpu:
        f(lambda x: x)
    before = foo_rs.python_kernel_calls()
    with pytest.raises(type(cpu.value)) as foo:
        f(lambda x: x.to("foo"))
    ran_python = foo_rs.python_kernel_calls() - before
    assert not ran_python, f"{name} ran Python kernels: {dict(ran_python)}"
    cpu_msg, foo_msg = str(cpu.value).split("\n")[0], str(foo.value).split("\n")[0]
    assert foo_msg == cpu_msg + " (foo)"
