"""torch.compile on foo: Inductor's C++ loops on foo's buffers, extern ops
through foo's kernels, the Dynamo backend "foo".

Compiles are slow (seconds each), so each model is compiled once per test and
every assert about it shares that compile. All of it runs with the CPU
fallback off: an op without a foo kernel would raise, not hide on the CPU.
"""

from __future__ import annotations

import copy

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
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=RTOL, atol=ATOL, msg=lambda m: f"{what} {name}: {m}")


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
