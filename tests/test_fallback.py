"""The CPU fallback: counts, warns once, copies back, can be switched off."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import foo_rs


def _calls(prefix):
    """Fallback calls of every overload of an op (structured ops run their .out)."""
    return sum(n for k, n in foo_rs.fallback_stats().items() if k.split(".")[0] == prefix)


def _op_without_kernel(x):
    # cumsum has no foo kernel (yet); any such op will do.
    return torch.cumsum(x, 0)


def test_fallback_counts_and_matches_cpu():
    foo_rs.reset_fallback_stats()
    x = torch.arange(6.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        y = _op_without_kernel(x.foo())
    assert y.device.type == "foo"
    torch.testing.assert_close(y.cpu(), torch.cumsum(x, 0))
    assert _calls("aten::cumsum") == 1


def test_fallback_handles_out_and_inplace():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        x = torch.arange(5.0).foo()
        out = torch.empty(0, device="foo")
        torch.cumsum(x, 0, out=out)  # out is resized on foo
        assert out.shape == (5,)
        torch.testing.assert_close(out.cpu(), torch.cumsum(torch.arange(5.0), 0))
        x.cumsum_(0)
        torch.testing.assert_close(x.cpu(), torch.cumsum(torch.arange(5.0), 0))


def test_fallback_view_ops_alias_foo_memory():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        x = torch.zeros(4, 4, device="foo")
        d = torch.diagonal(x)
        d.fill_(1.0)
        assert x.cpu().trace().item() == 4.0


def test_disabled_fallback_raises_not_implemented(no_fallback):
    x = torch.arange(4.0).foo()
    with pytest.raises(NotImplementedError, match="cumsum.*foo"):
        _op_without_kernel(x)


def test_env_switch_turns_fallback_off():
    code = (
        "import torch, foo_rs\n"
        "x = torch.arange(4.0).foo()\n"
        "try:\n"
        "    torch.cumsum(x, 0)\n"
        "except NotImplementedError as e:\n"
        "    print('NotImplementedError', e)\n"
    )
    env = dict(os.environ, FOO_RS_CPU_FALLBACK="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NotImplementedError" in out.stdout and "foo" in out.stdout


def test_fallback_warns_once_per_op():
    foo_rs.reset_fallback_stats()
    x = torch.arange(3.0).foo()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.cumprod(x, 0)
        torch.cumprod(x, 0)
    # Warned at most once (maybe zero if an earlier test already triggered it).
    assert sum("cumprod" in str(w.message) for w in rec) <= 1
    assert _calls("aten::cumprod") == 2
