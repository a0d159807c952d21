"""The CPU fallback: counts, warns once, copies back, can be switched off.

The ops here are test-only operators with a CPU kernel and no foo kernel, so
the tests do not depend on which aten ops foo has made native."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import foo_rs

_lib = torch.library.Library("foo_test", "DEF")
_lib.define("scale(Tensor x, float k) -> Tensor")
_lib.define("scale_(Tensor(a!) x, float k) -> Tensor(a!)")
_lib.define("scale_out(Tensor x, float k, *, Tensor(a!) out) -> Tensor(a!)")
_lib.define("diag_view(Tensor(a) x) -> Tensor(a)")


def _scale(x, k):
    return x * k


def _scale_(x, k):
    return x.mul_(k)


def _scale_out(x, k, *, out):
    out.resize_(x.shape)
    return torch.mul(x, k, out=out)


def _diag_view(x):
    return x.diagonal()


for _name, _fn in [("scale", _scale), ("scale_", _scale_), ("scale_out", _scale_out), ("diag_view", _diag_view)]:
    _lib.impl(_name, _fn, "CPU")

ops = torch.ops.foo_test


def _calls(name):
    return foo_rs.fallback_stats().get(name, 0)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        yield


def test_fallback_counts_and_matches_cpu():
    foo_rs.reset_fallback_stats()
    x = torch.arange(6.0)
    y = ops.scale(x.foo(), 3.0)
    assert y.device.type == "foo"
    torch.testing.assert_close(y.cpu(), x * 3)
    assert _calls("foo_test::scale") == 1


def test_fallback_resizes_out_and_writes_back_inplace():
    x = torch.arange(5.0).foo()
    out = torch.empty(0, device="foo")
    r = ops.scale_out(x, 2.0, out=out)
    assert r is out and out.shape == (5,) and out.device.type == "foo"
    torch.testing.assert_close(out.cpu(), torch.arange(5.0) * 2)
    r = ops.scale_(x, 10.0)
    assert r is x
    torch.testing.assert_close(x.cpu(), torch.arange(5.0) * 10)


def test_fallback_views_alias_foo_memory():
    x = torch.zeros(4, 4, device="foo")
    d = ops.diag_view(x)
    assert d.device.type == "foo" and d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    d.fill_(1.0)
    assert x.cpu().trace().item() == 4.0


def test_fallback_keeps_aliasing_between_arguments():
    base = torch.arange(8.0).foo()
    view = base[2:6]
    ops.scale_(view, -1.0)
    torch.testing.assert_close(base.cpu(), torch.tensor([0.0, 1, -2, -3, -4, -5, 6, 7]))


def test_fallback_refuses_mixed_foo_devices():
    a = torch.ones(3, device="foo:0")
    b = torch.ones(3, device="foo:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        ops.scale_out(a, 1.0, out=b)


def test_disabled_fallback_raises_not_implemented(no_fallback):
    x = torch.arange(4.0).foo()
    with pytest.raises(NotImplementedError, match="foo_test::scale.*foo"):
        ops.scale(x, 2.0)


def test_env_switch_turns_fallback_off():
    code = (
        "import torch, foo_rs\n"
        "lib = torch.library.Library('foo_env', 'DEF')\n"
        "lib.define('twice(Tensor x) -> Tensor')\n"
        "lib.impl('twice', lambda x: x * 2, 'CPU')\n"
        "x = torch.arange(4.0).foo()\n"
        "try:\n"
        "    torch.ops.foo_env.twice(x)\n"
        "except NotImplementedError as e:\n"
        "    print('NotImplementedError', e)\n"
    )
    env = dict(os.environ, FOO_RS_CPU_FALLBACK="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NotImplementedError" in out.stdout and "foo" in out.stdout and "FOO_RS_CPU_FALLBACK" in out.stdout


def test_fallback_warns_once_per_op():
    foo_rs.reset_fallback_stats()
    x = torch.arange(3.0).foo()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _lib2 = torch.library.Library("foo_warn", "DEF")
        _lib2.define("neg(Tensor x) -> Tensor")
        _lib2.impl("neg", lambda t: -t, "CPU")
        torch.ops.foo_warn.neg(x)
        torch.ops.foo_warn.neg(x)
    msgs = [str(w.message) for w in rec if issubclass(w.category, foo_rs.FooFallbackWarning)]
    assert len([m for m in msgs if "foo_warn::neg" in m]) == 1
    assert _calls("foo_warn::neg") == 2
