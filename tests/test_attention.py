"""Scaled dot-product attention on foo runs the fused Rust kernel (the
OVERRIDEABLE backend, CPU fallback off) and agrees with CPU's math SDPA in
float64: values and gradients over shapes, heads, masks, causal, dropout,
grouped-query heads, layouts and dtypes; memory stays linear in the sequence."""

from __future__ import annotations

import gc
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import foo_rs

A = torch.ops.aten
OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE.value)
MATH = int(SDPBackend.MATH.value)
ERROR = int(SDPBackend.ERROR.value)
FUSED = "_scaled_dot_product_fused_attention_overrideable"
FUSED_OP = A._scaled_dot_product_fused_attention_overrideable.default
FUSED_BACKWARD_OP = A._scaled_dot_product_fused_attention_overrideable_backward.default
# Tolerances against a float64 reference (inputs of unit scale).
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=2e-5, rtol=2e-5),
    torch.float16: dict(atol=4e-3, rtol=4e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}

pytestmark = pytest.mark.usefixtures("no_fallback")


def randn(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


class FusedCalls(TorchDispatchMode):
    """Counts the fused op's calls below autograd (its foo kernel is C++ on
    the native path, so Python's kernel counters do not see them)."""

    def __init__(self):
        super().__init__()
        self.forward = self.backward = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.forward += func is FUSED_OP
        self.backward += func is FUSED_BACKWARD_OP
        return func(*args, **(kwargs or {}))


def reference(q, k, v, grad, **kw):
    """Output and input gradients of CPU's math SDPA in float64."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    mask = kw.pop("attn_mask", None)
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.detach().double().requires_grad_(mask.requires_grad)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, **kw)
    inputs = leaves + ([mask] if mask is not None and mask.requires_grad else [])
    grads = torch.autograd.grad(out, inputs, grad.double())
    return out.detach(), grads


def run_foo(q, k, v, grad, dtype, mask_grad=False, direct=False, **kw):
    leaves = [t.detach().to("foo", dtype).requires_grad_() for t in (q, k, v)]
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        mask = mask.detach().to("foo", dtype if mask.dtype != torch.bool else torch.bool)
        mask.requires_grad_(mask_grad)
    with FusedCalls() as seen:
        if direct:
            out = A._scaled_dot_product_fused_attention_overrideable(*leaves, mask, **kw)[0]
        else:
            out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, **kw)
    assert seen.forward == 1, "SDPA on foo did not take the fused kernel"
    inputs = leaves + ([mask] if mask is not None and mask.requires_grad else [])
    grads = torch.autograd.grad(out, inputs, grad.to("foo", dtype))
    return out, grads


def check(q, k, v, dtype, mask_grad=False, direct=False, **kw):
    lq = q.shape[-2]
    grad = randn(*q.shape[:-1], v.shape[-1], seed=9)
    ref_kw = dict(kw)
    if "attn_mask" in kw and mask_grad:
        ref_kw["attn_mask"] = kw["attn_mask"].clone().requires_grad_()
    want, want_grads = reference(q, k, v, grad, **ref_kw)
    out, grads = run_foo(q, k, v, grad, dtype, mask_grad=mask_grad, direct=direct, **kw)
    assert out.device.type == "foo" and out.dtype == dtype and out.shape == want.shape
    tol = TOL[dtype]
    torch.testing.assert_close(out.cpu().double(), want, **tol)
    assert len(grads) == len(want_grads)
    # Gradients sum over L (or S) terms: scale the tolerance with the length.
    gtol = {key: val * max(1.0, math.sqrt(max(lq, k.shape[-2]) / 16)) for key, val in tol.items()}
    for g, w in zip(grads, want_grads):
        assert g.shape == w.shape and g.dtype == (dtype if w.dtype == torch.float64 else w.dtype)
        torch.testing.assert_close(g.cpu().double(), w, **gtol)


# (batch, q heads, kv heads, L, S, head dim)
SHAPES = [
    (2, 3, 3, 17, 17, 16),
    (1, 2, 2, 70, 130, 64),
    (2, 1, 1, 129, 65, 80),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_values_and_grads_float32(shape, causal):
    b, hq, hk, lq, s, d = shape
    check(
        randn(b, hq, lq, d, seed=1),
        randn(b, hk, s, d, seed=2),
        randn(b, hk, s, d, seed=3),
        torch.float32,
        is_causal=causal,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_every_float_dtype(dtype):
    q, k, v = randn(2, 2, 33, 16, seed=1), randn(2, 2, 47, 16, seed=2), randn(2, 2, 47, 16, seed=3)
    check(q, k, v, dtype)
    check(q, k, v, dtype, is_causal=True)


def test_three_dim_inputs_scale_and_value_width():
    q, k, v = randn(3, 20, 16, seed=1), randn(3, 30, 16, seed=2), randn(3, 30, 24, seed=3)
    check(q, k, v, torch.float32, scale=0.3)


@pytest.mark.parametrize("kind", ["bool", "float", "float_grad"])
def test_masks_broadcast(kind):
    q, k, v = randn(2, 3, 19, 16, seed=1), randn(2, 3, 70, 16, seed=2), randn(2, 3, 70, 16, seed=3)
    if kind == "bool":
        mask = randn(19, 70, seed=4) > -0.5
        mask[3] = False  # a row that sees no key: 0, as the math path's safe softmax
    else:
        mask = randn(2, 1, 19, 70, seed=4)
    check(q, k, v, torch.float32, attn_mask=mask, mask_grad=kind == "float_grad")
    if kind == "bool":
        check(q, k, v, torch.float64, attn_mask=mask)


def test_grouped_query_heads():
    q, k, v = randn(2, 6, 21, 16, seed=1), randn(2, 2, 40, 16, seed=2), randn(2, 2, 40, 16, seed=3)
    check(q, k, v, torch.float32, enable_gqa=True)
    check(q, k, v, torch.float32, enable_gqa=True, is_causal=True)


def test_transposed_layouts_as_transformers_make_them():
    # [batch, seq, heads, dim] projections viewed as [batch, heads, seq, dim].
    q = randn(2, 37, 4, 16, seed=1).transpose(1, 2)
    k = randn(2, 45, 4, 16, seed=2).transpose(1, 2)
    v = randn(2, 45, 4, 16, seed=3).transpose(1, 2)
    check(q, k, v, torch.float32)
    out, *_ = A._scaled_dot_product_fused_attention_overrideable(
        q.float().to("foo"), k.float().to("foo"), v.float().to("foo")
    )
    assert out.stride() == q.stride()  # the query's layout, as ATen's meta function gives


@pytest.mark.parametrize("shape", [(0, 2, 5, 8), (2, 2, 0, 8), (2, 0, 5, 8)], ids=str)
def test_zero_size(shape):
    # SDPA itself answers empty inputs without a backend; the fused op, called
    # directly, handles them too.
    b, h, lq, d = shape
    q, k, v = randn(b, h, lq, d, seed=1), randn(b, h, 6, d, seed=2), randn(b, h, 6, d, seed=3)
    check(q, k, v, torch.float32, direct=True)
    # No keys at all: CPU's math path gives zeros.
    q, k, v = randn(2, 2, 5, 8), randn(2, 2, 0, 8), randn(2, 2, 0, 8)
    check(q, k, v, torch.float32, direct=True)


def test_choice_and_routing():
    q = torch.randn(1, 2, 8, 16, device="foo")
    assert torch._fused_sdp_choice(q, q, q) == OVERRIDEABLE
    kv = torch.randn(1, 1, 8, 16, device="foo")
    assert torch._fused_sdp_choice(q, kv, kv, enable_gqa=True) == OVERRIDEABLE
    assert torch._fused_sdp_choice(q, kv, kv) == MATH  # the math path raises CPU's error
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, q, q) == MATH
        with FusedCalls() as seen:
            F.scaled_dot_product_attention(q, q, q)
        assert seen.forward == 0


def test_bad_input_raises_as_cpu():
    cases = [
        lambda dev: (
            torch.randn(1, 2, 8, 16, device=dev),
            torch.randn(1, 2, 8, 8, device=dev),
            torch.randn(1, 2, 8, 16, device=dev),
        ),
        lambda dev: (
            torch.randn(1, 2, 8, 16, device=dev),
            torch.randn(1, 2, 8, 16, device=dev, dtype=torch.float64),
            torch.randn(1, 2, 8, 16, device=dev),
        ),
        lambda dev: (
            torch.randn(1, 4, 8, 16, device=dev),
            torch.randn(1, 3, 8, 16, device=dev),
            torch.randn(1, 3, 8, 16, device=dev),
        ),
    ]
    for make in cases:
        with pytest.raises(RuntimeError) as cpu:
            F.scaled_dot_product_attention(*make("cpu"))
        with pytest.raises(type(cpu.value)):
            F.scaled_dot_product_attention(*make("foo"))
    q = torch.randn(1, 1, 2, 8, 16, device="foo")
    with pytest.raises(RuntimeError, match="foo"):
        A._scaled_dot_product_fused_attention_overrideable(q, q, q)
    q = torch.randn(2, 8, 16, device="foo")
    with pytest.raises(RuntimeError, match="foo"):
        A._scaled_dot_product_fused_attention_overrideable(q, q, q, torch.zeros(3, 8, device="foo"))
    with pytest.raises(RuntimeError, match="foo"):
        A._scaled_dot_product_fused_attention_overrideable(q.int(), q.int(), q.int())


def dropout_reference(q, k, v, keep_mask, p, grad):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    w = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    out = (w * keep_mask.double() / (1 - p)) @ leaves[2]
    return out.detach(), torch.autograd.grad(out, leaves, grad.double())


def test_dropout_same_mask_as_math_and_reproducible():
    p = 0.3
    q, k, v = randn(2, 2, 40, 16, seed=1), randn(2, 2, 50, 16, seed=2), randn(2, 2, 50, 16, seed=3)
    grad = randn(2, 2, 40, 16, seed=4)
    leaves = [t.float().to("foo").requires_grad_() for t in (q, k, v)]
    torch.manual_seed(5)
    res = A._scaled_dot_product_fused_attention_overrideable(*leaves, None, p, False, True)
    out, mask = res[0], res[8]
    assert mask.shape == (2, 2, 40, 50) and mask.dtype == torch.bool
    kept = mask.float().mean().item()
    assert abs(kept - (1 - p)) < 0.03
    grads = torch.autograd.grad(out, leaves, grad.float().to("foo"))
    want, want_grads = dropout_reference(q, k, v, mask.cpu(), p, grad)
    torch.testing.assert_close(out.cpu().double(), want, atol=1e-4, rtol=1e-4)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g.cpu().double(), w, atol=1e-4, rtol=1e-4)
    # The public API draws from foo's generator: manual_seed reproduces it.
    torch.manual_seed(5)
    again = F.scaled_dot_product_attention(*leaves, dropout_p=p)
    torch.testing.assert_close(again, out, atol=0, rtol=0)
    other = F.scaled_dot_product_attention(*leaves, dropout_p=p)
    assert (other != out).any()


class SelfAttention(nn.Module):
    """The attention block of a decoder as transformers writes it."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def test_attention_module_training_step_matches_cpu():
    torch.manual_seed(0)
    cpu = SelfAttention()
    dev = SelfAttention()
    dev.load_state_dict(cpu.state_dict())
    dev.to("foo")
    x = torch.randn(2, 24, 32)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]
    with FusedCalls() as seen:
        for _ in range(3):
            for model, opt, inp in ((cpu, opts[0], x), (dev, opts[1], x.to("foo"))):
                opt.zero_grad()
                model(inp).pow(2).mean().backward()
                opt.step()
    assert seen.forward == 3 and seen.backward == 3
    for a, b in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-5, rtol=1e-5)


def test_long_sequence_memory_is_linear_and_nothing_leaks():
    seq, d = 4096, 64
    gc.collect()  # earlier tests' garbage, freed mid-test, would lower the count below the baseline
    base = torch.foo.memory_allocated()
    q, k, v = (torch.randn(1, 1, seq, d, device="foo", requires_grad=True) for _ in range(3))
    torch.foo.reset_peak_memory_stats()
    start = torch.foo.memory_allocated()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(torch.ones_like(out))
    peak = torch.foo.max_memory_allocated() - start
    # A score matrix alone would be seq * seq * 4 bytes (64 MiB).
    assert peak < seq * seq * 4 // 4, peak
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
    del q, k, v, out
    assert torch.foo.memory_allocated() == base


# ---- The native path: dispatcher -> C++ -> Rust, no Python per call ----------

SLOW = torch.ops.foo_slow


def python_calls(f):
    """The Python kernels `f()` ran (foo_rs's per-overload counters)."""
    before = foo_rs.python_kernel_calls()
    result = f()
    return result, foo_rs.python_kernel_calls() - before


@pytest.mark.parametrize("case", ["plain", "causal_gqa", "float_mask_3d", "bool_mask_strided"])
def test_forward_and_backward_run_no_python(case):
    q, k, v = randn(2, 4, 9, 8, seed=1), randn(2, 4, 11, 8, seed=2), randn(2, 4, 11, 8, seed=3)
    kw = {}
    if case == "causal_gqa":
        k, v, kw = k[:, :2], v[:, :2], dict(is_causal=True, enable_gqa=True)
    elif case == "float_mask_3d":
        q, k, v = q[0], k[0], v[0]
        kw = dict(attn_mask=randn(9, 11, seed=4))
    elif case == "bool_mask_strided":
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        kw = dict(attn_mask=randn(1, 9, 11, seed=4) > -1)
    grad = randn(*q.shape[:-1], v.shape[-1], seed=9)
    check(q, k, v, torch.float32, **kw)  # values and grads as CPU's (and a warm-up)
    leaves = [t.float().to("foo").requires_grad_() for t in (q, k, v)]
    fkw = {
        key: val.to("foo", val.dtype if val.dtype == torch.bool else torch.float32)
        if isinstance(val, torch.Tensor)
        else val
        for key, val in kw.items()
    }

    def step():
        out = F.scaled_dot_product_attention(*leaves, **fkw)
        return out, torch.autograd.grad(out, leaves, grad.float().to("foo"))

    with FusedCalls() as seen:
        (out, grads), ran = python_calls(step)
    assert seen.forward == 1 and seen.backward == 1
    assert not {FUSED, FUSED + "_backward"} & set(ran), dict(ran)
    want, want_grads = reference(q, k, v, grad, **kw)
    torch.testing.assert_close(out.cpu().double(), want, **TOL[torch.float32])
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g.cpu().double(), w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
@pytest.mark.parametrize("layout", ["contiguous", "split_heads", "wide_values"])
def test_native_kernels_agree_with_the_python_kernels(layout, dropout_p):
    """Same bits, layouts and Philox draws as the slow path (the Python
    kernels, called directly), forward and backward."""
    if layout == "split_heads":
        # A transformer's fused projection split and viewed as heads (not dense).
        qkv = randn(2, 7, 3 * 16, seed=1).float().to("foo")
        q, k, v = (z.view(2, 7, 4, 4).transpose(1, 2) for z in qkv.split(16, dim=2))
    else:
        dv = 12 if layout == "wide_values" else 8
        q = randn(2, 3, 6, 8, seed=1).float().to("foo").transpose(1, 2).contiguous().transpose(1, 2)
        k, v = randn(2, 3, 5, 8, seed=2).float().to("foo"), randn(2, 3, 5, dv, seed=3).float().to("foo")
    bias = randn(q.shape[-2], k.shape[-2], seed=4).float().to("foo")
    args = (q, k, v, bias, dropout_p, False, False)
    torch.manual_seed(3)
    native, ran = python_calls(lambda: A._scaled_dot_product_fused_attention_overrideable(*args, scale=0.7))
    assert FUSED not in ran
    torch.manual_seed(3)
    slow = SLOW._scaled_dot_product_fused_attention_overrideable(*args, scale=0.7)
    for a, b in ((native[0], slow[0]), (native[1], slow[1]), (native[6], slow[6]), (native[7], slow[7])):
        assert a.device == b.device and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert native[4:6] == slow[4:6] and native[8].shape == slow[8].shape
    out, lse = native[0], native[1]
    grad = randn(*out.shape, seed=5).float().to("foo")
    none = torch.empty(0, device="foo")  # cum_seq_q, cum_seq_k: unused
    bargs = (
        grad,
        q,
        k,
        v,
        bias,
        [True, True, True, True],
        out,
        lse,
        none,
        none,
        q.shape[-2],
        k.shape[-2],
        dropout_p,
        False,
        native[6],
        native[7],
    )
    back, ran = python_calls(lambda: A._scaled_dot_product_fused_attention_overrideable_backward(*bargs, scale=0.7))
    assert FUSED + "_backward" not in ran
    slow_back = SLOW._scaled_dot_product_fused_attention_overrideable_backward(*bargs, scale=0.7)
    for a, b in zip(back, slow_back):
        assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_choice_is_native_and_follows_the_backend_flags():
    q = torch.randn(1, 2, 8, 16, device="foo")
    kv = torch.randn(1, 1, 8, 16, device="foo")
    assert "_fused_sdp_choice" in foo_rs.native_ops()
    mask = torch.zeros(8, 8, device="foo")
    cases = [
        ((q, q, q), {}, OVERRIDEABLE),
        ((q, q, q, mask), {}, OVERRIDEABLE),
        ((q, q, q, mask.bool()), {}, OVERRIDEABLE),
        ((q, q, q, mask), dict(is_causal=True), MATH),
        ((q, q, q, mask.double()), {}, MATH),
        ((q, q, q, torch.zeros(3, 8, device="foo")), {}, MATH),
        ((q, q, q), dict(dropout_p=1.0), MATH),
        ((q, kv, kv), {}, MATH),
        ((q, kv, kv), dict(enable_gqa=True), OVERRIDEABLE),
        ((q.double(), q, q), {}, MATH),
        ((q.half(), q.half(), q.half()), {}, OVERRIDEABLE),
        ((q[0, 0], q[0, 0], q[0, 0]), {}, MATH),  # 2-d
    ]
    choices, ran = python_calls(lambda: [torch._fused_sdp_choice(*a, **kw) for a, kw, _ in cases])
    assert choices == [want for *_, want in cases]
    assert not ran, dict(ran)
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert torch._fused_sdp_choice(q, q, q) == OVERRIDEABLE
        assert torch._fused_sdp_choice(q, kv, kv) == ERROR
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q, kv, kv)
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, q, q) == MATH


def test_native_path_leaves_no_memory_behind():
    gc.collect()
    base = torch.foo.memory_allocated()
    q, k, v = (torch.randn(2, 2, 33, 16, device="foo", requires_grad=True) for _ in range(3))
    mask = torch.randn(33, 33, device="foo", requires_grad=True)
    for p in (0.0, 0.2):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out.sum().backward()
    assert mask.grad.shape == mask.shape and torch.isfinite(mask.grad).all()
    del q, k, v, mask, out
    assert torch.foo.memory_allocated() == base
