"""Moving modules and parameters to, from and between foo devices keeps what
CUDA keeps: Parameter identity, weights shared by several modules, the
optimizer's references, autograd metadata and version counters.

`Module._apply` (behind `.to`, `.half()`, ...) swaps `param.data` in place only
when `torch._has_compatible_shallow_copy_type(param, new)` holds; foo registers
that op so CPU and foo tensors are compatible both ways, as CPU and CUDA are.
Every test also runs the same steps on the CPU and compares, so a broken tie
shows up as a wrong number, not only as a failed identity check.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import foo_rs  # noqa: F401  (registers foo)


def _tied_lm(vocab=11, dim=6):
    """Embedding and output projection sharing one weight (GPT-2's tie)."""
    emb = nn.Embedding(vocab, dim)
    head = nn.Linear(dim, vocab, bias=False)
    head.weight = emb.weight
    return nn.ModuleDict({"emb": emb, "head": head})


def _lm_loss(m, tokens):
    logits = m["head"](m["emb"](tokens))
    return nn.functional.cross_entropy(logits.flatten(0, -2), tokens.flatten())


@pytest.mark.parametrize(
    "a, b",
    [("cpu", "foo"), ("foo", "cpu"), ("foo", "foo"), ("foo:0", "foo:1")],
)
def test_shallow_copy_compatible(a, b):
    x = torch.ones(2, device=a)
    y = torch.ones(2, device=b)
    assert torch._has_compatible_shallow_copy_type(x, y)
    assert torch._has_compatible_shallow_copy_type(y, x)


def test_shallow_copy_incompatible_layouts_stay_incompatible():
    # Only dense strided tensors swap; a sparse CPU tensor and a foo tensor do not.
    sparse = torch.ones(2, 2).to_sparse()
    dense_foo = torch.ones(2, 2, device="foo")
    assert not torch._has_compatible_shallow_copy_type(sparse, dense_foo)
    assert not torch._has_compatible_shallow_copy_type(dense_foo, sparse)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        dense_foo.data = sparse


@pytest.mark.parametrize("route", [("foo",), ("foo", "cpu"), ("foo:0", "foo:1"), ("foo:1", "foo:0", "cpu")])
def test_tied_weights_stay_tied_and_parameters_keep_identity(route):
    torch.manual_seed(0)
    m = _tied_lm()
    params = {name: p for name, p in m.named_parameters(remove_duplicate=False)}
    for device in route:
        m.to(device)
        assert m["head"].weight is m["emb"].weight, device
        for name, p in m.named_parameters(remove_duplicate=False):
            assert p is params[name], (device, name)
            assert p.device == torch.device(device if ":" in device or device == "cpu" else "foo:0")
    assert len(list(m.parameters())) == 1


def test_half_and_float_on_foo_keep_ties():
    m = _tied_lm().to("foo")
    w = m["emb"].weight
    m.half()
    assert m["head"].weight is m["emb"].weight is w
    assert w.dtype == torch.float16 and w.device.type == "foo"
    m.float()
    assert m["head"].weight is w and w.dtype == torch.float32


def test_tied_gradient_matches_cpu():
    torch.manual_seed(0)
    cpu = _tied_lm()
    foo = copy.deepcopy(cpu).to("foo")
    tokens = torch.randint(0, 11, (5, 7))
    _lm_loss(cpu, tokens).backward()
    _lm_loss(foo, tokens.to("foo")).backward()
    # The shared weight's gradient sums the lookup's and the projection's parts.
    torch.testing.assert_close(foo["emb"].weight.grad.cpu(), cpu["emb"].weight.grad)
    assert foo["head"].weight.grad is foo["emb"].weight.grad


def test_optimizer_built_before_to_updates_the_moved_model():
    torch.manual_seed(0)
    cpu = _tied_lm()
    foo = copy.deepcopy(cpu)
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_foo = torch.optim.AdamW(foo.parameters(), lr=1e-2)  # built while on the CPU
    foo.to("foo")
    tokens = torch.randint(0, 11, (4, 9))
    for _ in range(3):
        for m, opt, t in ((cpu, opt_cpu, tokens), (foo, opt_foo, tokens.to("foo"))):
            opt.zero_grad()
            _lm_loss(m, t).backward()
            opt.step()
    assert opt_foo.param_groups[0]["params"][0] is foo["emb"].weight
    assert opt_foo.state[foo["emb"].weight]["exp_avg"].device.type == "foo"
    torch.testing.assert_close(foo["emb"].weight.detach().cpu(), cpu["emb"].weight.detach())


def test_gradients_move_with_their_parameters():
    m = nn.Linear(3, 2)
    m(torch.randn(4, 3)).sum().backward()
    g = m.weight.grad
    m.to("foo")
    assert m.weight.grad is g and g.device.type == "foo"
    m.to("cpu")
    assert m.weight.grad is g and g.device.type == "cpu"


def test_data_swap_across_devices_keeps_autograd_and_version_counter():
    p = nn.Parameter(torch.randn(3))
    v0 = p._version
    p.data = torch.arange(3.0, device="foo")
    assert p.device.type == "foo" and p.requires_grad and p.is_leaf
    # `.data =` does not bump the version: the parameter's own history is kept.
    assert p._version == v0
    with torch.no_grad():
        p.add_(1)
    assert p._version == v0 + 1
    (p * p).sum().backward()
    torch.testing.assert_close(p.grad.cpu(), 2 * torch.arange(1.0, 4.0))
    # The gradient accumulator follows the device: a second backward on the
    # CPU accumulates a CPU gradient, as on CUDA.
    p.grad = None
    p.data = p.data.cpu()
    (3 * p).sum().backward()
    assert p.grad.device.type == "cpu"
    torch.testing.assert_close(p.grad, torch.full((3,), 3.0))


def test_data_swap_keeps_views_of_the_old_tensor_alone():
    t = torch.arange(4.0)
    view = t[1:]
    t.data = torch.zeros(4, device="foo")
    assert view.device.type == "cpu"
    torch.testing.assert_close(view, torch.tensor([1.0, 2.0, 3.0]))


def test_load_state_dict_from_cpu_into_foo_model():
    torch.manual_seed(0)
    src = _tied_lm()
    dst = _tied_lm().to("foo")
    w = dst["emb"].weight
    dst.load_state_dict(src.state_dict())
    assert dst["emb"].weight is w and dst["head"].weight is w and w.device.type == "foo"
    torch.testing.assert_close(w.detach().cpu(), src["emb"].weight.detach())


def test_load_state_dict_with_assign_takes_the_tensors():
    torch.manual_seed(0)
    src = nn.Linear(3, 2).to("foo")
    with torch.device("meta"):
        dst = nn.Linear(3, 2)
    dst.load_state_dict(src.state_dict(), assign=True)
    assert dst.weight.device.type == "foo" and isinstance(dst.weight, nn.Parameter)
    assert dst.weight.data_ptr() == src.weight.data_ptr()
    x = torch.randn(4, 3, device="foo")
    torch.testing.assert_close(dst(x), src(x))


def test_torch_load_map_location_keeps_ties():
    torch.manual_seed(0)
    m = _tied_lm().to("foo")
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="foo", weights_only=False)
    assert loaded["head"].weight is loaded["emb"].weight
    assert loaded["emb"].weight.device.type == "foo"


def test_deepcopy_of_foo_model_keeps_shared_parameters():
    m = _tied_lm().to("foo")
    c = copy.deepcopy(m)
    assert c["head"].weight is c["emb"].weight
    assert c["emb"].weight is not m["emb"].weight
    assert c["emb"].weight.device.type == "foo"
    torch.testing.assert_close(c["emb"].weight, m["emb"].weight)


def _symmetric_step(device):
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", _Symmetric())
    original = lin.parametrizations.weight.original
    lin.to(device)
    assert lin.parametrizations.weight.original is original
    x = torch.randn(3, 4).to(device)
    lin(x).square().sum().backward()
    return lin


class _Symmetric(nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(0, 1)


def test_parametrize_moves_and_trains_like_cpu():
    cpu = _symmetric_step("cpu")
    foo = _symmetric_step("foo")
    w = foo.weight
    torch.testing.assert_close(w, w.transpose(0, 1))
    torch.testing.assert_close(
        foo.parametrizations.weight.original.grad.cpu(), cpu.parametrizations.weight.original.grad
    )


@pytest.mark.parametrize("norm", ["weight_norm", "spectral_norm"])
def test_weight_and_spectral_norm_move_and_match_cpu(norm):
    torch.manual_seed(0)
    wrap = getattr(nn.utils.parametrizations, norm)
    cpu = wrap(nn.Linear(5, 3))
    foo = copy.deepcopy(cpu)
    originals = {n: p for n, p in foo.named_parameters()}
    foo.to("foo")
    assert {n: p for n, p in foo.named_parameters()} == originals
    x = torch.randn(4, 5)
    cpu.train(), foo.train()
    cpu(x).sum().backward()
    foo(x.to("foo")).sum().backward()
    for (name, p_cpu), (_, p_foo) in zip(cpu.named_parameters(), foo.named_parameters()):
        assert p_foo.device.type == "foo", name
        torch.testing.assert_close(p_foo.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for (name, b_cpu), (_, b_foo) in zip(cpu.named_buffers(), foo.named_buffers()):
        torch.testing.assert_close(b_foo.cpu(), b_cpu, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_module_to_does_not_leak_foo_memory():
    base = torch.foo.memory_allocated()
    m = _tied_lm(vocab=1000, dim=64)
    for _ in range(3):
        m.to("foo")
        m.to("cpu")
    # Back on the CPU: every foo block of the moves is freed again.
    assert torch.foo.memory_allocated() == base
