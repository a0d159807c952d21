"""The ``_foreach_*`` ops on foo: torch.optim's default path (foo is a
PrivateUse1 device, so every optimizer takes its foreach implementation
unless told otherwise).

Each registered foreach overload runs its per-tensor op's native kernel on
every tensor of its lists (rust/glue/native.cpp); every one is compared with
torch CPU running the same overload, for each dtype and for strided lists,
by value, dtype and exception type. Then the optimizers that use them,
against CPU's for-loop implementation, and the native path itself: a float32
optimizer step runs no Python kernel.
"""

from __future__ import annotations

import pytest
import torch

import foo_rs
from foo_rs._ops._registry import fast_lane_ops
from foo_testing import make_tensor

pytestmark = pytest.mark.usefixtures("no_fallback")

FOREACH = sorted(n for n in fast_lane_ops() if n.startswith("_foreach_"))

#: What torch.optim's foreach paths and clip_grad_norm_ call on parameters,
#: gradients and state: all of it native.
OPTIM_OVERLOADS = {
    "_foreach_add_.List",
    "_foreach_add_.Scalar",
    "_foreach_add.List",
    "_foreach_mul_.Scalar",
    "_foreach_mul_.Tensor",
    "_foreach_mul.Scalar",
    "_foreach_div_.ScalarList",
    "_foreach_div_.List",
    "_foreach_lerp_.Scalar",
    "_foreach_addcmul_.Scalar",
    "_foreach_addcdiv_.Scalar",
    "_foreach_addcdiv_.ScalarList",
    "_foreach_sqrt",
    "_foreach_sqrt_",
    "_foreach_neg",
    "_foreach_maximum_.List",
    "_foreach_zero_",
    "_foreach_copy_",
    "_foreach_norm.Scalar",
    "_foreach_sign_",  # Rprop
}

SHAPES = [(4, 5), (7,), (2, 3, 2)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool]


def _overload(name):
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def _numbers(dtype, n):
    if dtype.is_floating_point:
        return [0.5, -1.5, 2.0][:n]
    if dtype == torch.bool:
        return [True, False, True][:n]
    return [2, -3, 1][:n]


def _strided(t):
    """``t`` as a non-contiguous view (every other element of a wider tensor)."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    return wide[..., ::2]


def _args(name, dtype, strided):
    """The overload's positional arguments on CPU (tensors are moved later)."""
    args = []
    seed = 0
    for a in _overload(name)._schema.arguments:
        kind = str(a.type)
        if kind == "List[Tensor]":
            ts = []
            for s in SHAPES:
                seed += 1
                t = make_tensor(s, dtype, seed=seed)
                if a.name in ("tensor2", "weights") and dtype.is_floating_point:
                    t = t / 10  # a divisor and a lerp weight of ordinary size
                ts.append(t)
            args.append(ts)
        elif kind == "List[number]":
            args.append(_numbers(dtype, len(SHAPES)))
        elif kind == "number":
            args.append(0.25 if name.startswith("_foreach_lerp") else _numbers(dtype, 1)[0])
        elif kind == "Tensor":
            args.append(torch.tensor(_numbers(dtype, 1)[0], dtype=dtype))
        elif kind == "bool":
            args.append(False)
        elif kind == "Optional[int]":  # a ScalarType? (dtype=)
            args.append(None)
        else:
            raise AssertionError(f"{name}: no test value for an argument of type {kind}")
    return args


def _to(args, device, strided):
    out = []
    for a in args:
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
            ts = [t.to(device, copy=True) for t in a]  # in-place calls write them
            out.append([_strided(t) for t in ts] if strided else ts)
        elif isinstance(a, torch.Tensor):
            out.append(a.to(device, copy=True))
        else:
            out.append(a)
    return out


def _run(name, args):
    """(result, exception): the overload's returned list, or its mutated
    self list for an in-place overload."""
    try:
        r = _overload(name)(*args)
    except Exception as e:  # noqa: BLE001 - compared by type with CPU's
        return None, e
    return (args[0] if r is None else r), None


def test_the_optimizer_overloads_are_native():
    missing = OPTIM_OVERLOADS - set(FOREACH)
    assert not missing, f"not registered natively: {sorted(missing)}"


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", FOREACH)
def test_overload_matches_cpu(name, dtype, strided):
    args = _args(name, dtype, strided)
    expected, cpu_err = _run(name, _to(args, "cpu", strided))
    actual, foo_err = _run(name, _to(args, "foo", strided))
    if cpu_err is not None or foo_err is not None:
        assert type(foo_err) is type(cpu_err), f"CPU raised {cpu_err!r}, foo raised {foo_err!r}"
        return
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.device.type == "foo"
        assert a.dtype == e.dtype and a.shape == e.shape, (
            f"tensor {i}: {a.dtype}{tuple(a.shape)} vs {e.dtype}{tuple(e.shape)}"
        )
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, msg=lambda m: f"tensor {i}: {m}")


@pytest.mark.parametrize(
    "name, make",
    [
        ("empty list", lambda d: torch._foreach_mul_([], 2.0)),
        (
            "lists of two lengths",
            lambda d: torch._foreach_add_([torch.ones(2, device=d)] * 2, [torch.ones(2, device=d)]),
        ),
        (
            "scalar list of another length",
            lambda d: torch._foreach_div_([torch.ones(2, device=d)] * 2, [1.0, 2.0, 3.0]),
        ),
        ("tensor that is not 0-dim", lambda d: torch._foreach_mul_([torch.ones(2, device=d)], torch.ones(2, device=d))),
        (
            "shapes that do not broadcast",
            lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(3, device=d)]),
        ),
        ("in place to an integer list", lambda d: torch._foreach_sqrt_([torch.ones(2, dtype=torch.int64, device=d)])),
    ],
)
def test_bad_arguments_raise_like_cpu(name, make):
    with pytest.raises(Exception) as cpu:
        make("cpu")
    with pytest.raises(type(cpu.value)):
        make("foo")


@pytest.mark.parametrize("ord", [2, 1, 3.5, 0, float("inf"), float("-inf"), -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, None], ids=str)
def test_norm_orders_and_dtypes_match_cpu(ord, dtype):
    """clip_grad_norm_'s per-tensor norms, every order, with and without
    dtype= (float32 tensors; a bf16 dtype= is a cast first), an empty tensor
    among them (CPU's error for orders without an identity)."""
    g = torch.Generator().manual_seed(3)
    ts = [torch.randn(s, generator=g) for s in SHAPES] + [torch.randn(70_000, generator=g)]
    for with_empty in (False, True):
        cpu_ts = ts + [torch.empty(0)] if with_empty else ts
        try:
            expected = torch._foreach_norm(cpu_ts, ord, dtype=dtype)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                torch._foreach_norm([t.to("foo") for t in cpu_ts], ord, dtype=dtype)
            continue
        actual = torch._foreach_norm([t.to("foo") for t in cpu_ts], ord, dtype=dtype)
        for a, e in zip(actual, expected):
            assert a.device.type == "foo" and a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a.cpu(), e, rtol=1e-5 if e.dtype != torch.bfloat16 else 1e-2, atol=1e-6)


def test_a_list_with_a_cpu_tensor_runs_each_on_its_device():
    """A foo tensor and a CPU one in one list: ATen's loop, each tensor on its device."""
    a, b = torch.arange(3.0, device="foo"), torch.arange(3.0)
    torch._foreach_mul_([a, b], 2.0)
    assert a.device.type == "foo"
    torch.testing.assert_close(a.cpu(), torch.arange(3.0) * 2)
    torch.testing.assert_close(b, torch.arange(3.0) * 2)


def test_in_place_bumps_each_version_and_functional_has_autograd():
    xs = [torch.randn(3, device="foo") for _ in range(2)]
    for write in (
        lambda: torch._foreach_add_(xs, 1.0),
        lambda: torch._foreach_zero_(xs),
        lambda: torch._foreach_copy_(xs, [torch.ones(3)] * 2),
    ):
        before = [x._version for x in xs]
        write()
        assert [x._version for x in xs] == [v + 1 for v in before]

    leaves = [torch.randn(s, dtype=torch.float64).requires_grad_() for s in SHAPES]
    grads = {}
    for dev in ("cpu", "foo"):
        ls = [leaf.detach().to(dev).requires_grad_() for leaf in leaves]
        ys = torch._foreach_mul(torch._foreach_exp(ls), 3.0)
        sum(y.sum() for y in ys).backward()
        grads[dev] = [leaf.grad.cpu() for leaf in ls]
    for a, e in zip(grads["foo"], grads["cpu"]):
        torch.testing.assert_close(a, e)


OPTIMIZERS = {
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam-amsgrad-wd-max": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd-momentum-wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01, dampening=0.1)),
    "sgd-nesterov-max": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    "rmsprop-centered-momentum": (torch.optim.RMSprop, dict(lr=1e-2, centered=True, momentum=0.5)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.1)),
    "adamax": (torch.optim.Adamax, dict(lr=1e-2)),
    "nadam": (torch.optim.NAdam, dict(lr=1e-2)),
    "radam": (torch.optim.RAdam, dict(lr=1e-2)),
    "adadelta": (torch.optim.Adadelta, dict(lr=0.5)),
}

OPT_SHAPES = [(5, 7), (3,), (2, 3, 4), (70_000,)]  # the last one spans several pool chunks


def _optimize(opt_cls, kwargs, params, device, steps, clip=None, **mode):
    ps = [p.clone().to(device).requires_grad_() for p in params]
    opt = opt_cls(ps, **kwargs, **mode)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 + step)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype).to(device)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ps, clip, foreach=True)
        opt.step()
    return ps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_foreach_optimizer_matches_cpu_for_loop(name, dtype):
    opt_cls, kwargs = OPTIMIZERS[name]
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in OPT_SHAPES]
    foo = _optimize(opt_cls, kwargs, params, "foo", 3)  # foo's default: foreach
    cpu = _optimize(opt_cls, kwargs, params, "cpu", 3, foreach=False)
    rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (1e-12, 1e-12)
    for i, (a, b) in enumerate(zip(foo, cpu)):
        assert a.device.type == "foo" and a.dtype == dtype
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=rtol, atol=atol, msg=lambda m: f"param {i}: {m}")


@pytest.mark.parametrize("name", ["adam-amsgrad-wd-max", "adamw", "sgd-nesterov-max"])
def test_foreach_optimizer_step_runs_no_python(name):
    """The optimizer step (after its first, which creates the state) and
    clip_grad_norm_ (norms, total, scaling) reach Rust with no Python kernel."""
    opt_cls, kwargs = OPTIMIZERS[name]
    ps = [torch.randn(s).to("foo").requires_grad_() for s in OPT_SHAPES]
    opt = opt_cls(ps, **kwargs)
    for p in ps:
        p.grad = torch.randn(p.shape).to("foo")
    opt.step()
    before = foo_rs.python_kernel_calls()
    opt.step()
    torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
    ran = foo_rs.python_kernel_calls() - before
    assert not ran, f"Python kernels ran: {dict(ran)}"


def test_clip_grad_norm_foreach_matches_cpu():
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(s, generator=g) for s in OPT_SHAPES]
    foo = _optimize(torch.optim.SGD, dict(lr=0.1, momentum=0.9), params, "foo", 2, clip=1.0)
    cpu = _optimize(torch.optim.SGD, dict(lr=0.1, momentum=0.9), params, "cpu", 2, clip=1.0, foreach=False)
    for a, b in zip(foo, cpu):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)
