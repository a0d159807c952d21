"""Fused optimizers and GradScaler on foo, natively (CPU fallback off).

torch.optim's ``fused=True`` on foo calls ``_fused_adam_`` / ``_fused_adamw_`` /
``_fused_sgd_`` / ``_fused_adagrad_``; ``torch.amp.GradScaler("foo")`` calls
``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``.
Each is compared with torch CPU: the optimizers with CPU's for-loop
implementation of the same optimizer (fused=False, foreach=False) over
several steps, the AMP ops op by op, errors by exception type.
"""

from __future__ import annotations

import copy

import pytest
import torch

import foo_rs

pytestmark = pytest.mark.usefixtures("no_fallback")

SHAPES = [(5, 7), (3,), (2, 3, 4), (70_000,)]  # the last one spans several pool chunks


def _params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]


def _grads(params, step, seed=10):
    g = torch.Generator().manual_seed(seed + step)
    return [torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) for p in params]


OPTIMIZERS = {
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam-wd-amsgrad-max": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
    "adam-beta1-small": (torch.optim.Adam, dict(lr=1e-2, betas=(0.3, 0.9))),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
    "adamw-amsgrad": (torch.optim.AdamW, dict(lr=1e-2, amsgrad=True)),
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd-momentum-wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01, dampening=0.1)),
    "sgd-nesterov-max": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1)),
    "adagrad-decay-wd": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, maximize=True)),
}

TOL = {
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-12, 1e-12),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float16: (2e-3, 1e-3),
}


def _run(opt_cls, kwargs, params, device, steps, **mode):
    ps = [p.clone().to(device).requires_grad_() for p in params]
    opt = opt_cls(ps, **kwargs, **mode)
    for step in range(steps):
        for p, g in zip(ps, _grads(params, step)):
            p.grad = g.to(device)
        opt.step()
    return ps, opt


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_optimizer_matches_cpu_for_loop(name, dtype):
    opt_cls, kwargs = OPTIMIZERS[name]
    params = _params(dtype)
    foo, opt = _run(opt_cls, kwargs, params, "foo", 3, fused=True)
    assert opt.defaults["fused"] is True
    rtol, atol = TOL[dtype]
    if dtype in (torch.float32, torch.float64):
        # CPU's reference: the plain for-loop implementation.
        cpu, _ = _run(opt_cls, kwargs, params, "cpu", 3, foreach=False)
        for i, (a, b) in enumerate(zip(foo, cpu)):
            assert a.device.type == "foo" and a.dtype == dtype
            torch.testing.assert_close(
                a.detach().cpu(),
                b.detach(),
                rtol=rtol,
                atol=atol,
                msg=lambda m: f"param {i} of shape {tuple(a.shape)}: {m}",
            )
    else:
        # The half types store their state rounded, so no float reference
        # matches them; foo must be at least as close to the float64
        # for-loop optimizer as CPU's own fused kernel of the same dtype.
        exact, _ = _run(opt_cls, kwargs, [p.double() for p in params], "cpu", 3, foreach=False)
        cpu, _ = _run(opt_cls, kwargs, params, "cpu", 3, fused=True)
        for i, (a, b, r) in enumerate(zip(foo, cpu, exact)):
            assert a.device.type == "foo" and a.dtype == dtype
            r = r.detach()
            foo_err = (a.detach().cpu().double() - r).abs()
            cpu_err = (b.detach().double() - r).abs()
            worse = foo_err > cpu_err + atol + rtol * r.abs()
            assert not bool(worse.any()), (
                f"param {i}: {int(worse.sum())} elements further from float64 than CPU's fused kernel, "
                f"max foo error {foo_err.max().item():.3g} vs CPU's {cpu_err.max().item():.3g}"
            )
    # the optimizer state lives on foo
    for state in opt.state.values():
        for k, v in state.items():
            if isinstance(v, torch.Tensor):
                assert v.device.type == "foo", k


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd-momentum-wd", "adagrad"])
def test_fused_optimizer_matches_cpu_fused(name):
    # Against CPU's own fused kernel, float32: the same arithmetic, closer agreement.
    opt_cls, kwargs = OPTIMIZERS[name]
    params = _params(torch.float32, seed=3)
    cpu, _ = _run(opt_cls, kwargs, params, "cpu", 4, fused=True)
    foo, _ = _run(opt_cls, kwargs, params, "foo", 4, fused=True)
    for a, b in zip(foo, cpu):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad])
def test_tensor_lr(opt_cls):
    params = _params(torch.float32, seed=4)
    lr = 0.05
    cpu, _ = _run(opt_cls, {"lr": torch.tensor(lr)}, params, "cpu", 2, foreach=False)
    foo, _ = _run(opt_cls, {"lr": torch.tensor(lr)}, params, "foo", 2, fused=True)
    for a, b in zip(foo, cpu):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)


def _fused_args(n=2, device="foo"):
    g = torch.Generator().manual_seed(6)
    ps = [torch.randn(4, 3, generator=g).to(device) for _ in range(n)]
    gs = [torch.randn(4, 3, generator=g).to(device) for _ in range(n)]
    ms = [torch.zeros(4, 3, device=device) for _ in range(n)]
    vs = [torch.zeros(4, 3, device=device) for _ in range(n)]
    steps = [torch.ones((), device=device) for _ in range(n)]
    return ps, gs, ms, vs, steps


def test_grad_scale_unscales_and_writes_back_and_found_inf_skips():
    results = {}
    for dev in ("cpu", "foo"):
        ps, gs, ms, vs, steps = _fused_args(device=dev)
        ps = [p.clone() for p in ps]
        gs_scaled = [g * 8 for g in gs]
        torch._fused_adam_(
            ps,
            gs_scaled,
            ms,
            vs,
            [],
            steps,
            lr=0.1,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
            grad_scale=torch.tensor(8.0, device=dev),
            found_inf=torch.tensor(0.0, device=dev),
        )
        before = [p.clone() for p in ps]
        torch._fused_adam_(
            ps,
            gs_scaled,
            ms,
            vs,
            [],
            steps,
            lr=0.1,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
            grad_scale=torch.tensor(8.0, device=dev),
            found_inf=torch.tensor(1.0, device=dev),
        )
        for a, b in zip(ps, before):
            assert torch.equal(a.cpu(), b.cpu())  # found_inf: the step is skipped
        results[dev] = (ps, gs_scaled, ms, vs)
    for a, b in zip(sum(map(list, results["foo"]), []), sum(map(list, results["cpu"]), [])):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-7)


def test_fused_optimizer_on_strided_parameters():
    # (CPU's fused kernels read a strided tensor as if it were contiguous;
    # foo updates the right elements, as the for-loop optimizer does.)
    base = torch.randn(6, 8)
    p = base.clone().to("foo")[:, ::2]
    g = torch.full_like(p, 2.0)
    buf = torch.zeros(6, 8, device="foo")[:, 1::2]
    torch._fused_sgd_(
        [p],
        [g],
        [buf],
        weight_decay=0.0,
        momentum=0.9,
        lr=0.5,
        dampening=0.0,
        nesterov=False,
        maximize=False,
        is_first_step=True,
    )
    torch.testing.assert_close(p.cpu(), base[:, ::2] - 1.0)
    torch.testing.assert_close(buf.cpu(), torch.full((6, 4), 2.0))
    assert torch.equal(buf._base.cpu()[:, ::2], torch.zeros(6, 4))  # the gaps are untouched


def test_fused_optimizer_rejects_integer_params_like_cpu():
    p = [torch.zeros(3, dtype=torch.int64)]
    for dev in ("cpu", "foo"):
        with pytest.raises(NotImplementedError):
            q = [t.to(dev) for t in p]
            torch._fused_sgd_(
                q,
                q,
                [],
                weight_decay=0.0,
                momentum=0.0,
                lr=0.1,
                dampening=0.0,
                nesterov=False,
                maximize=False,
                is_first_step=True,
            )


# ---------------------------------------------------------------- GradScaler


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_unscale_op_matches_cpu(dtype):
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(s, generator=g).to(dtype) * 100 for s in SHAPES]
    grads.append(torch.randn(5, 6, generator=g).to(dtype).t())  # strided
    for bad in (float("inf"), float("nan"), None):
        cpu = [t.clone() for t in grads]
        if bad is not None:
            cpu[1].view(-1)[1] = bad
        foo = [t.to("foo") for t in cpu]
        found = {"cpu": torch.zeros(1), "foo": torch.zeros(1, device="foo")}
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found["cpu"], torch.tensor([0.125]))
        torch._amp_foreach_non_finite_check_and_unscale_(foo, found["foo"], torch.tensor([0.125], device="foo"))
        assert found["foo"].item() == found["cpu"].item() == (0.0 if bad is None else 1.0)
        for a, b in zip(foo, cpu):
            torch.testing.assert_close(a.cpu(), b, equal_nan=True, rtol=0, atol=0)


def test_unscale_strided_gradient_with_inf():
    g = torch.ones(4, 6)
    g[2, 2] = float("inf")
    f = g.to("foo").t()  # only the strided path sees the inf
    found = torch.zeros(1, device="foo")
    torch._amp_foreach_non_finite_check_and_unscale_([f], found, torch.tensor([0.5], device="foo"))
    assert found.item() == 1.0 and f[0, 0].item() == 0.5


@pytest.mark.parametrize(
    "case",
    ["found_inf-2-elements", "inv_scale-double", "int-grad"],
)
def test_unscale_bad_arguments_raise_like_cpu(case):
    grads, found, inv = [torch.ones(3)], torch.zeros(1), torch.ones(1)
    if case == "found_inf-2-elements":
        found = torch.zeros(2)
    elif case == "inv_scale-double":
        inv = torch.ones(1, dtype=torch.float64)
    else:
        grads = [torch.ones(3, dtype=torch.int64)]
    with pytest.raises(Exception) as cpu_exc:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    with pytest.raises(type(cpu_exc.value), match="foo"):
        torch._amp_foreach_non_finite_check_and_unscale_([g.to("foo") for g in grads], found.to("foo"), inv.to("foo"))


def test_update_scale_op_matches_cpu_over_a_sequence():
    found_seq = [0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0]
    state = {}
    for dev in ("cpu", "foo"):
        scale = torch.tensor([1024.0], device=dev)
        tracker = torch.zeros(1, dtype=torch.int32, device=dev)
        seen = []
        for f in found_seq:
            out = torch._amp_update_scale_(scale, tracker, torch.tensor([float(f)], device=dev), 2.0, 0.5, 3)
            assert out is scale
            seen.append((scale.item(), tracker.item()))
        state[dev] = seen
    assert state["foo"] == state["cpu"]


def test_update_scale_bad_arguments_raise_like_cpu():
    with pytest.raises(Exception) as cpu_exc:
        torch._amp_update_scale_(torch.ones(1), torch.zeros(1), torch.zeros(1), 2.0, 0.5, 3)  # float tracker
    with pytest.raises(type(cpu_exc.value), match="foo"):
        torch._amp_update_scale_(
            torch.ones(1, device="foo"), torch.zeros(1, device="foo"), torch.zeros(1, device="foo"), 2.0, 0.5, 3
        )


def _amp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


@pytest.mark.parametrize("fused", [False, True])
def test_grad_scaler_training_skips_inf_steps_and_grows(fused):
    model = _amp_model().to("foo")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, fused=fused or None)
    scaler = torch.amp.GradScaler("foo", init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    x = torch.randn(8, 16).to("foo")
    y = torch.randn(8, 4).to("foo")
    scales, losses = [], []
    for step in range(6):
        opt.zero_grad()
        with torch.autocast("foo", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if step == 2:
            model[0].weight.grad[0, 0] = float("inf")  # an overflow: this step must be skipped
            before = [p.detach().clone() for p in model.parameters()]
        scaler.step(opt)
        if step == 2:
            for p, b in zip(model.parameters(), before):
                assert torch.equal(p.detach().cpu(), b.cpu())
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(loss.item())
    # grows after 2 clean steps, halves on the overflow, grows again after 2 more
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 2048.0]
    assert losses[-1] < losses[0]
    assert scaler._scale.device.type == "foo"


def test_grad_scaler_training_matches_cpu():
    runs = {}
    for dev in ("cpu", "foo"):
        model = copy.deepcopy(_amp_model()).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler(dev, init_scale=256.0, growth_interval=3)
        g = torch.Generator().manual_seed(5)
        for _ in range(5):
            x = torch.randn(8, 16, generator=g).to(dev)
            y = torch.randn(8, 4, generator=g).to(dev)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        runs[dev] = (model, scaler.get_scale())
    assert runs["foo"][1] == runs["cpu"][1]
    for a, b in zip(runs["foo"][0].parameters(), runs["cpu"][0].parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)


def test_kernels_are_native():
    for op in (
        "_fused_adam_",
        "_fused_adamw_",
        "_fused_sgd_",
        "_fused_adagrad_",
        "_fused_adam_.tensor_lr",
        "_amp_foreach_non_finite_check_and_unscale_",
        "_amp_update_scale_",
    ):
        assert op in foo_rs.native_ops(), op


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad])
@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
def test_fused_step_reaches_rust_with_no_python(opt_cls, tensor_lr):
    """A fused step over dense parameters (and their state) goes from the
    dispatcher to Rust in one call, grad scale included; the result is the
    Python path's (the same step with the fast lane's C++ kernel bypassed
    is checked against CPU above)."""
    params = _params(torch.float32, seed=7)
    kwargs = dict(lr=torch.tensor(0.05) if tensor_lr else 0.05)
    if opt_cls is torch.optim.SGD:
        kwargs["momentum"] = 0.9
    foo, opt = _run(opt_cls, kwargs, params, "foo", 1, fused=True)  # creates the state
    cpu, cpu_opt = _run(opt_cls, kwargs, params, "cpu", 1, foreach=False)
    g = torch.Generator().manual_seed(99)
    grads = [torch.randn(p.shape, generator=g) for p in params]
    for p, q, gr in zip(foo, cpu, grads):
        p.grad, q.grad = gr.to("foo"), gr.clone()
    before = foo_rs.python_kernel_calls()
    opt.step()
    ran = foo_rs.python_kernel_calls() - before
    assert not ran, f"Python kernels ran: {dict(ran)}"
    cpu_opt.step()
    for a, b in zip(foo, cpu):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)


def test_grad_scaler_step_reaches_rust_with_no_python():
    """GradScaler's unscale_, step and update (and the fused optimizer under
    it) run no Python kernel on dense gradients: one call into Rust each."""
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).to("foo")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("foo", init_scale=2.0**8)
    x, y = torch.randn(5, 6).to("foo"), torch.randn(5, 3).to("foo")

    def step(poison=False):
        opt.zero_grad()
        scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
        if poison:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()

    step()  # creates the optimizer state
    kernels = ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_", "_fused_adamw_")
    before = foo_rs.python_kernel_calls()
    weights = [p.detach().clone() for p in model.parameters()]
    step(poison=True)  # skipped: the scale halves, the weights stay
    assert scaler.get_scale() == 2.0**7
    for p, w in zip(model.parameters(), weights):
        assert torch.equal(p.detach(), w)
    step()
    ran = foo_rs.python_kernel_calls() - before
    assert not any(k in ran for k in kernels), f"Python kernels ran: {dict(ran)}"
