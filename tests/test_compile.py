"""torch.compile on foo: Inductor's C++ loops on foo's buffers, extern ops
through foo's kernels, the Dynamo backend "foo".

Compiles are slow (seconds each), so each model is compiled once per test and
every assert about it shares that compile. All of it runs with the CPU
fallback off: an op without a foo kernel would raise, not hide on the CPU.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

import foo_rs

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    with foo_rs.fallback_disabled():
        yield
    torch._dynamo.reset()


def _grads_close(compiled, reference, what):
    for (name, p), (_, q) in zip(compiled.named_parameters(), reference.named_parameters()):
        assert p.grad is not None, f"{what}: no gradient for {name}"
        assert p.grad.device == p.device, name
        torch.testing.assert_close(
            p.grad.cpu(), q.grad.cpu(), rtol=RTOL, atol=ATOL, msg=lambda m: f"{what} {name}: {m}"
        )


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))

    def forward(self, x):
        return self.net(x)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1))


class Block(nn.Module):
    """A pre-norm transformer block: attention (SDPA) and an MLP."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class LstmModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 12, batch_first=True)
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


MODELS = {
    "mlp": (Mlp, (4, 12)),
    "cnn_bn": (Cnn, (2, 3, 8, 8)),
    "transformer_block": (Block, (2, 6, 16)),
    "lstm": (LstmModel, (2, 5, 6)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matches_eager_and_cpu(name):
    """Forward and backward (AOTAutograd) of the compiled model on foo give
    eager foo's and CPU's outputs and every parameter's gradient; buffers
    (batch norm's running stats) are updated as eagerly."""
    make, shape = MODELS[name]
    torch.manual_seed(0)
    cpu_model = make()
    eager = copy.deepcopy(cpu_model).to("foo")
    model = copy.deepcopy(cpu_model).to("foo")
    x_cpu = torch.randn(shape)
    x = x_cpu.to("foo")

    compiled = torch.compile(model, backend="foo", fullgraph=True)
    stats0 = torch.foo.memory_stats()["allocation.all.allocated"]
    # Dynamo traces RNNs only when asked (its default graph-breaks on them).
    with torch._dynamo.config.patch(allow_rnn=name == "lstm"):
        out = compiled(x)
    assert out.device.type == "foo"
    assert torch.foo.memory_stats()["allocation.all.allocated"] > stats0
    out.square().mean().backward()

    eager_out = eager(x)
    eager_out.square().mean().backward()
    cpu_out = cpu_model(x_cpu)
    cpu_out.square().mean().backward()

    torch.testing.assert_close(out.cpu(), eager_out.cpu(), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(out.cpu(), cpu_out.detach(), rtol=RTOL, atol=ATOL)
    _grads_close(model, eager, f"{name} vs eager foo")
    _grads_close(model, cpu_model, f"{name} vs CPU")
    for (bname, b), (_, c) in zip(model.named_buffers(), cpu_model.named_buffers()):
        assert b.device.type == "foo"
        torch.testing.assert_close(b.cpu(), c, rtol=RTOL, atol=ATOL, msg=lambda m: f"buffer {bname}: {m}")


def _allocations(device=0):
    return torch.foo.memory_stats(device)["allocation.all.allocated"]


def test_inference_runs_generated_cpp_on_foo_buffers():
    """The default backend (inductor): C++ loops and foo allocations in the
    generated wrapper, eager's values, every intermediate freed."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = Mlp().to("foo").eval()
    x = torch.randn(7, 12, device="foo")
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        expected = model(x)
        before = torch.foo.memory_allocated()
        out, (code, *_) = run_and_get_code(compiled, x)
        assert out.device == x.device
        torch.testing.assert_close(out, expected, rtol=RTOL, atol=ATOL)
        del out
        assert torch.foo.memory_allocated() == before
        again = compiled(x)
    torch.testing.assert_close(again, expected, rtol=RTOL, atol=ATOL)
    assert "cpp_fused" in code  # Inductor's C++ loops ...
    assert "device='foo:0'" in code  # ... on buffers from foo's allocator
    assert "= empty_strided_cpu(" not in code


def test_attention_stays_one_fused_call():
    """SDPA under Inductor is foo's fused attention kernel, forward and backward, as an extern call
    (as CPU's flash kernel is on CPU): not a traced bmm/softmax composite. The backend choice runs
    in C++ on the fake tensors Dynamo traces with."""
    from torch._inductor.utils import run_and_get_code

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    fq, fk, fv = (t.to("foo").requires_grad_() for t in (q, k, v))
    compiled = torch.compile(attend, fullgraph=True)
    out, codes = run_and_get_code(lambda: compiled(fq, fk, fv).sum().backward())
    code = "\n".join(codes)
    assert "_scaled_dot_product_fused_attention_overrideable.default" in code
    assert "_scaled_dot_product_fused_attention_overrideable_backward.default" in code
    assert "bmm" not in code
    cq, ck, cv = (t.clone().requires_grad_() for t in (q, k, v))
    attend(cq, ck, cv).sum().backward()
    for got, want in ((fq, cq), (fk, ck), (fv, cv)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(compiled(fq, fk, fv).detach().cpu(), attend(q, k, v), rtol=RTOL, atol=ATOL)


def test_relu_backward_stays_foo_kernel():
    """relu's backward in a foo graph is foo's threshold_backward kernel on the saved relu output,
    not Inductor's decomposition (whose partition saved a bool mask, which Inductor's C++ loops
    store and load slowly); a CPU graph still decomposes. Gradients equal eager's."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    x = torch.randn(6, 12)
    cpu_model = Mlp()
    model = copy.deepcopy(cpu_model).to("foo")
    compiled = torch.compile(model, fullgraph=True)
    _, codes = run_and_get_code(lambda: compiled(x.to("foo")).sum().backward())
    code = "\n".join(codes)
    assert code.count("torch.ops.aten.threshold_backward.default(") == 1, code  # one ReLU
    assert "dtype=torch.bool" not in code, code  # no mask saved for the backward
    cpu_model(x).sum().backward()
    _grads_close(model, cpu_model, "relu backward vs CPU")

    torch._dynamo.reset()
    cpu_compiled = torch.compile(copy.deepcopy(cpu_model), fullgraph=True)
    _, cpu_codes = run_and_get_code(lambda: cpu_compiled(x).sum().backward())
    assert "threshold_backward.default(" not in "\n".join(cpu_codes)


def test_dynamic_shapes_compile_once():
    counter = torch._dynamo.testing.CompileCounterWithBackend("foo")
    torch.manual_seed(0)
    model = Mlp().to("foo")
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for batch in (3, 5, 9):
            x = torch.randn(batch, 12, device="foo")
            torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    assert counter.frame_count == 1


def test_recompiles_when_the_device_changes():
    """Guards key on the device: foo:1 (and CPU) inputs recompile, and the
    foo:1 graph allocates from foo:1's pool, not the current device's."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("foo")

    def fn(x, w):
        return torch.relu(x @ w).sum(dim=1) * 2

    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    g = torch.Generator().manual_seed(0)
    x_cpu, w_cpu = torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g)
    expected = fn(x_cpu, w_cpu)

    out0 = compiled(x_cpu.to("foo:0"), w_cpu.to("foo:0"))
    assert counter.frame_count == 1
    x1, w1 = x_cpu.to("foo:1"), w_cpu.to("foo:1")
    allocs0, allocs1 = _allocations(0), _allocations(1)
    out1 = compiled(x1, w1)
    assert counter.frame_count == 2
    assert out0.device == torch.device("foo:0") and out1.device == torch.device("foo:1")
    assert _allocations(1) > allocs1 and _allocations(0) == allocs0
    out_cpu = compiled(x_cpu, w_cpu)
    assert counter.frame_count == 3 and out_cpu.device.type == "cpu"
    for out in (out0, out1, out_cpu):
        torch.testing.assert_close(out.cpu(), expected, rtol=RTOL, atol=ATOL)
    compiled(x1, w1)  # each graph stays cached under its guards
    assert counter.frame_count == 3


def test_fx_graph_cache_serves_foo_graphs():
    from torch._dynamo.utils import counters

    def fn(x):
        return torch.nn.functional.silu(x) * x.mean(dim=0) + 3.25

    x = torch.randn(6, 5, device="foo")
    with torch._inductor.config.patch(fx_graph_cache=True, fx_graph_remote_cache=False):
        first = torch.compile(fn, backend="foo", fullgraph=True)(x)
        torch._dynamo.reset()
        hits = counters["inductor"]["fxgraph_cache_hit"]
        second = torch.compile(fn, backend="foo", fullgraph=True)(x)
    assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1
    torch.testing.assert_close(first, fn(x), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(second, first, rtol=0, atol=0)


def test_random_numbers_come_from_foo_philox():
    """Dropout in a graph compiled by the foo backend draws from foo's Philox
    generator: exactly eager's values for the same seed. The plain inductor
    backend's fused C++ RNG draws its seeds with aten::random_.from, which
    foo runs natively: it works with the fallback off, seeded runs repeat."""

    def fn(x):
        return torch.nn.functional.dropout(x, p=0.5, training=True) + 1

    x = torch.rand(64, 64, device="foo") + 1
    compiled = torch.compile(fn, backend="foo", fullgraph=True)
    torch.manual_seed(3)
    a = compiled(x)
    b = compiled(x)
    torch.manual_seed(3)
    torch.testing.assert_close(a, fn(x), rtol=0, atol=0)
    torch.testing.assert_close(b, fn(x), rtol=0, atol=0)
    assert not torch.equal(a.cpu(), b.cpu())
    kept = (a != 1).cpu()
    assert 0.4 < kept.float().mean().item() < 0.6

    torch._dynamo.reset()
    fused = torch.compile(fn, backend="inductor", fullgraph=True)
    foo_rs.reset_fallback_stats()
    torch.manual_seed(4)
    c = fused(x)
    d = fused(x)
    torch.manual_seed(4)
    torch.testing.assert_close(fused(x), c, rtol=0, atol=0)
    assert not torch.equal(c.cpu(), d.cpu())
    assert foo_rs.fallback_stats() == {}
    assert c.device == x.device
    kept = (c != 1).cpu()
    assert 0.4 < kept.float().mean().item() < 0.6
    torch.testing.assert_close(c.cpu()[kept], (2 * x + 1).cpu()[kept])


def test_errors_name_foo_and_the_reason():
    # The foo backend refuses graphs on devices it cannot run.
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="foo backend compiles graphs on foo"):
        torch.compile(lambda t: t * 2, backend="foo")(torch.randn(3, device="meta"))
    torch._dynamo.reset()
    # No C++ wrapper (cpp_wrapper / AOTInductor) for foo: said, not crashed.
    with torch._inductor.config.patch(cpp_wrapper=True):
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"C\+\+ wrapper .* not supported on foo"):
            torch.compile(lambda t: t.sin() + 1, backend="foo")(torch.randn(3, device="foo"))
    torch._dynamo.reset()
    # Mixing devices raises what eager raises.
    with pytest.raises(RuntimeError, match="same device"):
        torch.compile(lambda a, b: a + b, backend="foo")(torch.randn(3, device="foo"), torch.randn(3))
    torch._dynamo.reset()

    # An op Inductor leaves to an extern kernel that foo lacks: with the CPU
    # fallback off, the dispatcher's error naming foo and the op ...
    def no_kernel(t):
        return torch.linalg.ldl_factor(t @ t.mT + 3 * torch.eye(3, device=t.device)).LD + 1

    a = torch.randn(3, 3, device="foo")
    compiled = torch.compile(no_kernel, backend="foo", fullgraph=True)
    with pytest.raises(NotImplementedError, match="not implemented for the foo device"):
        compiled(a)
    # ... and with it on, the safety net serves it (counted) with CPU's values.
    foo_rs.reset_fallback_stats()
    foo_rs.set_fallback_enabled(True)  # the fixture switches it off again
    out = compiled(a)
    assert foo_rs.fallback_stats()
    torch.testing.assert_close(out.cpu(), no_kernel(a.cpu()), rtol=RTOL, atol=ATOL)


def test_import_does_not_load_dynamo_until_needed():
    code = (
        "import sys, torch, foo_rs\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "import torch._dynamo\n"
        "from torch._dynamo.device_interface import get_interface_for_device\n"
        "from torch._dynamo.backends.registry import list_backends\n"
        "assert get_interface_for_device('foo').device_count() == torch.foo.device_count()\n"
        "assert not get_interface_for_device('foo').is_gpu()\n"
        "assert 'foo' in list_backends()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
