"""Training small models on foo gives CPU's losses; their state_dicts travel.

Each model is built once on the CPU from a seed, copied to foo, and both
copies train for a few steps on the same batches. The losses must agree
within the stated tolerance (fp32: rtol 1e-4 -- the kernels may sum in another
order than CPU's). These run with the CPU fallback on: native kernels where
foo has them, the fallback elsewhere.
"""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
from torch import nn

import foo_rs

FP32_RTOL = 1e-4
FP32_ATOL = 1e-5


@pytest.fixture(autouse=True)
def _quiet_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        yield


def _train(model, batches, loss_fn, device, steps, opt="sgd"):
    model = model.to(device)
    model.train()
    if opt == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device), y.to(device)
        optim.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optim.step()
        assert loss.device.type == torch.device(device).type
        losses.append(loss.item())
    return model, losses


def _check_same_training(
    make_model,
    make_batches,
    loss_fn,
    steps,
    opt="sgd",
    rtol=FP32_RTOL,
    atol=FP32_ATOL,
    param_atol=None,
    buffers=True,
):
    torch.manual_seed(0)
    cpu_model = make_model()
    foo_model = copy.deepcopy(cpu_model)
    batches = make_batches()
    cpu_model, cpu_losses = _train(cpu_model, batches, loss_fn, "cpu", steps, opt)
    foo_model, foo_losses = _train(foo_model, batches, loss_fn, "foo", steps, opt)
    # The model learns: a falling loss shows the gradients were applied.
    assert cpu_losses[-1] < cpu_losses[0]
    torch.testing.assert_close(
        torch.tensor(foo_losses),
        torch.tensor(cpu_losses),
        rtol=rtol,
        atol=atol,
        msg=lambda m: f"losses on foo {foo_losses} vs CPU {cpu_losses}\n{m}",
    )
    params = dict(cpu_model.named_parameters())
    for (name, p_cpu), (_, p_foo) in zip(cpu_model.state_dict().items(), foo_model.state_dict().items()):
        assert p_foo.device.type == "foo", name
        if not buffers and name not in params:
            continue
        torch.testing.assert_close(
            p_foo.cpu(), p_cpu, rtol=10 * rtol, atol=param_atol or 10 * atol, msg=lambda m: f"{name}: {m}"
        )
    return cpu_model, foo_model


def _check_state_dict_roundtrip(foo_model, make_model):
    sd = foo_model.state_dict()
    assert all(t.device.type == "foo" for t in sd.values())
    buf = io.BytesIO()
    torch.save(sd, buf)

    # foo -> CPU
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    cpu_model = make_model()
    cpu_model.load_state_dict(on_cpu)
    for k, v in cpu_model.state_dict().items():
        assert v.device.type == "cpu"
        assert torch.equal(v, sd[k].cpu()), k

    # without map_location the tensors come back on foo
    buf.seek(0)
    again = torch.load(buf)
    for k, v in again.items():
        assert v.device == sd[k].device, k
        assert torch.equal(v.cpu(), sd[k].cpu()), k

    # CPU -> foo
    buf2 = io.BytesIO()
    torch.save(cpu_model.state_dict(), buf2)
    buf2.seek(0)
    back = torch.load(buf2, map_location="foo")
    fresh = make_model().to("foo")
    fresh.load_state_dict(back)
    for k, v in fresh.state_dict().items():
        assert v.device.type == "foo", k
        assert torch.equal(v.cpu(), sd[k].cpu()), k


# ---------------------------------------------------------------- MLP


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def _mlp_batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]


def test_mlp_trains_like_cpu():
    _, foo_model = _check_same_training(_mlp, _mlp_batches, nn.CrossEntropyLoss(), steps=10)
    _check_state_dict_roundtrip(foo_model, _mlp)


def test_mlp_adam_trains_like_cpu():
    # Adam divides by sqrt(v): a gradient element near 0 whose last bits differ
    # can move its weight by up to lr per step, so weights get lr-sized slack.
    _check_same_training(_mlp, _mlp_batches, nn.CrossEntropyLoss(), steps=8, opt="adam", param_atol=1e-2)


# ---------------------------------------------------------------- CNN


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(x.flatten(1))


def _cnn_batches():
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(2)]


def test_cnn_batchnorm_maxpool_trains_like_cpu():
    _, foo_model = _check_same_training(_CNN, _cnn_batches, nn.CrossEntropyLoss(), steps=5)
    # BatchNorm's running statistics and its counter travel too.
    sd = foo_model.state_dict()
    assert "bn1.running_mean" in sd and "bn1.num_batches_tracked" in sd
    assert sd["bn1.num_batches_tracked"].item() == 5
    _check_state_dict_roundtrip(foo_model, _CNN)
    # eval mode uses the running statistics: same outputs as on the CPU.
    x = _cnn_batches()[0][0]
    cpu_copy = _CNN()
    cpu_copy.load_state_dict({k: v.cpu() for k, v in sd.items()})
    torch.testing.assert_close(foo_model.eval()(x.to("foo")).cpu(), cpu_copy.eval()(x), rtol=FP32_RTOL, atol=FP32_ATOL)


def _bn_pool():
    # BatchNorm2d + MaxPool2d without convolution, so that they are covered
    # while the convolution kernel is missing.
    return nn.Sequential(nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 8 * 8, 5))


def test_batchnorm_maxpool_trains_like_cpu():
    # Parameters and losses only: the running statistics are checked by
    # test_batchnorm_updates_running_stats.
    _, foo_model = _check_same_training(_bn_pool, _cnn_batches, nn.CrossEntropyLoss(), steps=5, buffers=False)
    assert foo_model.state_dict()["0.num_batches_tracked"].item() == 5
    _check_state_dict_roundtrip(foo_model, _bn_pool)


def test_batchnorm_updates_running_stats():
    x = torch.randn(4, 3, 5, 5) * 3 + 1
    bn_cpu = nn.BatchNorm2d(3)
    bn_foo = nn.BatchNorm2d(3).to("foo")
    bn_cpu(x)
    bn_foo(x.to("foo"))
    torch.testing.assert_close(bn_foo.running_mean.cpu(), bn_cpu.running_mean)
    torch.testing.assert_close(bn_foo.running_var.cpu(), bn_cpu.running_var)
    assert bn_foo.num_batches_tracked.item() == 1


# ---------------------------------------------------------------- transformer


class _TinyTransformer(nn.Module):
    def __init__(self, vocab=50, d=32, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(12, d) * 0.02)
        self.layer = nn.TransformerEncoderLayer(
            d, nhead=4, dim_feedforward=64, dropout=0.0, activation="gelu", batch_first=True
        )
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos[: tokens.shape[1]]
        h = self.norm(self.layer(h))
        return self.head(h.mean(1))


def _tokens():
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(0, 50, (4, 12), generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(2)]


def test_transformer_trains_like_cpu():
    _, foo_model = _check_same_training(_TinyTransformer, _tokens, nn.CrossEntropyLoss(), steps=6)
    _check_state_dict_roundtrip(foo_model, _TinyTransformer)
    # Inference (no_grad, eval: the encoder layer's fused fast path) agrees too.
    tokens = _tokens()[0][0]
    cpu_copy = _TinyTransformer()
    cpu_copy.load_state_dict({k: v.cpu() for k, v in foo_model.state_dict().items()})
    with torch.no_grad():
        torch.testing.assert_close(
            foo_model.eval()(tokens.to("foo")).cpu(), cpu_copy.eval()(tokens), rtol=FP32_RTOL, atol=FP32_ATOL
        )


# ---------------------------------------------------------------- recurrent


class _Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(6, 12, num_layers=2, batch_first=True)
        self.head = nn.Linear(12, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1]).squeeze(-1)


def _sequences():
    g = torch.Generator().manual_seed(4)
    return [(torch.randn(4, 7, 6, generator=g), torch.randn(4, generator=g)) for _ in range(2)]


@pytest.mark.parametrize(
    "cell",
    [
        pytest.param(nn.LSTM, id="lstm"),
        pytest.param(nn.GRU, id="gru"),
        pytest.param(nn.RNN, id="rnn_tanh"),
    ],
)
def test_recurrent_trains_like_cpu(cell):
    make = lambda: _Recurrent(cell)  # noqa: E731
    # Squared error by hand: nn.MSELoss on foo warns where CPU does not
    # (test_mse_loss_does_not_warn).
    _, foo_model = _check_same_training(make, _sequences, lambda out, y: ((out - y) ** 2).mean(), steps=5)
    _check_state_dict_roundtrip(foo_model, make)


def test_mse_loss_does_not_warn():
    # It did while mse_loss.out fell back to CPU's mse_loss_out, which resizes a
    # 0-dim out to the elementwise shape and warns about it.
    x, y = torch.randn(4), torch.randn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        expected = nn.functional.mse_loss(x, y)
        actual = nn.functional.mse_loss(x.to("foo"), y.to("foo"))
    torch.testing.assert_close(actual.cpu(), expected)


def test_optimizer_state_dict_roundtrip():
    """Adam's state (exp_avg, step) saved on foo loads on the CPU and back."""
    torch.manual_seed(0)
    model = _mlp().to("foo")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _mlp_batches()[0]
    nn.CrossEntropyLoss()(model(x.to("foo")), y.to("foo")).backward()
    opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    sd_cpu = torch.load(buf, map_location="cpu")
    buf.seek(0)
    sd_foo = torch.load(buf, map_location="foo")
    for k, st in opt.state_dict()["state"].items():
        for name, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert sd_foo["state"][k][name].device.type == "foo"
                assert sd_cpu["state"][k][name].device.type == "cpu"
                assert torch.equal(sd_cpu["state"][k][name], v.cpu())
    opt2 = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt2.load_state_dict(sd_foo)
