"""Whole-sequence nn.LSTM / nn.GRU on foo (foo_rs/_ops/rnn_seq.py ->
kernels/rnn.rs): outputs, final states and every gradient against CPU's
nn.LSTM / nn.GRU, and that the per-step cell ops did not run."""

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import foo_rs

CELL_OPS = {"lstm": "_thnn_fused_lstm_cell", "gru": "_thnn_fused_gru_cell"}
SEQ_OPS = {"lstm": ("lstm.input", "lstm.data"), "gru": ("gru.input", "gru.data")}
TOL = {torch.float64: dict(rtol=1e-9, atol=1e-9), torch.float32: dict(rtol=2e-4, atol=2e-5)}


def _module(cell, *args, **kwargs):
    return (nn.LSTM if cell == "lstm" else nn.GRU)(*args, **kwargs)


def _pair(cpu_module, dtype):
    cpu_module = cpu_module.to(dtype)
    return cpu_module, copy.deepcopy(cpu_module).to("foo")


def _state(cell, shape, dtype, gen):
    h = torch.randn(shape, dtype=dtype, generator=gen)
    return (h, torch.randn(shape, dtype=dtype, generator=gen)) if cell == "lstm" else h


def _to_foo(state):
    if isinstance(state, tuple):
        return tuple(_to_foo(s) for s in state)
    return state.detach().to("foo").requires_grad_(state.requires_grad)


def _leaves(state):
    return list(state) if isinstance(state, tuple) else [state]


def _loss(out, state, gen_seed):
    """A weighted sum of every output, so each gradient path is exercised."""
    g = torch.Generator().manual_seed(gen_seed)
    total = 0
    for t in [out, *_leaves(state)]:
        w = torch.randn(t.shape, dtype=t.dtype, generator=g).to(t.device)
        total = total + (t * w).sum()
    return total


class _Counts:
    def __enter__(self):
        self.before = foo_rs.python_kernel_calls()
        return self

    def __exit__(self, *exc):
        after = foo_rs.python_kernel_calls()
        self.delta = {k: after[k] - self.before[k] for k in after}

    def __getitem__(self, k):
        return self.delta.get(k, 0)


def _check_whole_sequence(counts, cell, packed=False):
    assert counts[CELL_OPS[cell]] == 0, "the per-step cell op ran"
    assert counts[SEQ_OPS[cell][1 if packed else 0]] >= 1


def _compare(
    cell,
    dtype,
    *,
    layers=1,
    bidirectional=False,
    batch_first=False,
    bias=True,
    give_state=True,
    t=5,
    b=3,
    n_in=4,
    hidden=6,
    seed=0,
):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    cpu, foo = _pair(
        _module(cell, n_in, hidden, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional),
        dtype,
    )
    shape = (b, t, n_in) if batch_first else (t, b, n_in)
    x = torch.randn(shape, dtype=dtype, generator=gen, requires_grad=True)
    xf = _to_foo(x)
    state = fstate = None
    if give_state:
        state = _state(cell, (layers * (2 if bidirectional else 1), b, hidden), dtype, gen)
        for s in _leaves(state):
            s.requires_grad_()
        fstate = _to_foo(state)
    out, st = cpu(x, state)
    with _Counts() as counts:
        fout, fst = foo(xf, fstate)
        _loss(fout, fst, seed).backward()
    _loss(out, st, seed).backward()
    _check_whole_sequence(counts, cell)
    tol = TOL[dtype]
    assert fout.dtype == dtype and fout.shape == out.shape
    torch.testing.assert_close(fout.cpu(), out.detach(), **tol)
    for a, e in zip(_leaves(fst), _leaves(st)):
        torch.testing.assert_close(a.cpu(), e.detach(), **tol)
    torch.testing.assert_close(xf.grad.cpu(), x.grad, **tol)
    if give_state:
        for a, e in zip(_leaves(fstate), _leaves(state)):
            torch.testing.assert_close(a.grad.cpu(), e.grad, **tol)
    for (name, p), fp in zip(cpu.named_parameters(), foo.parameters()):
        torch.testing.assert_close(fp.grad.cpu(), p.grad, **tol, msg=lambda m: f"{name}: {m}")


CONFIGS = [
    dict(),
    dict(layers=2, bidirectional=True, batch_first=True, give_state=False),
    dict(layers=2, bias=False),
    dict(bidirectional=True, bias=False, batch_first=True),
    dict(b=1, t=1),
    dict(b=1, t=7, layers=2, bidirectional=True),
]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_matches_cpu_float64(no_fallback, cell, cfg):
    _compare(cell, torch.float64, **cfg)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_matches_cpu_float32_several_blocks(no_fallback, cell):
    # 70 hidden units: two blocks of the kernel, the second partial.
    _compare(cell, torch.float32, layers=2, bidirectional=True, t=6, b=4, n_in=9, hidden=70)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_parallel_steps_match_cpu_and_are_thread_count_independent(no_fallback, cell):
    # Steps big enough for the pool (three blocks of hidden units).
    _compare(cell, torch.float64, t=4, b=8, n_in=5, hidden=130)
    torch.manual_seed(3)
    m = _module(cell, 16, 130, num_layers=2).to("foo")
    x = torch.randn(6, 8, 16, device="foo", requires_grad=True)
    results = []
    old = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            x.grad = None
            m.zero_grad()
            out, _ = m(x)
            out.square().sum().backward()
            results.append((out.detach().cpu(), x.grad.cpu(), m.weight_hh_l0.grad.cpu()))
    finally:
        torch.set_num_threads(old)
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_unsorted_lengths(no_fallback, cell, bidirectional):
    torch.manual_seed(0)
    dtype = torch.float64
    cpu, foo = _pair(_module(cell, 3, 5, num_layers=2, bidirectional=bidirectional), dtype)
    lengths = torch.tensor([3, 6, 1, 4])
    x = torch.randn(6, 4, 3, dtype=dtype, requires_grad=True)
    xf = _to_foo(x)
    state = _state(cell, (2 * (2 if bidirectional else 1), 4, 5), dtype, torch.Generator().manual_seed(2))
    fstate = _to_foo(state)

    def run(module, inp, st):
        packed = pack_padded_sequence(inp, lengths, enforce_sorted=False)
        out, hn = module(packed, st)
        padded, lens = pad_packed_sequence(out)
        return padded, hn, lens

    out, st, lens = run(cpu, x, state)
    with _Counts() as counts:
        fout, fst, flens = run(foo, xf, fstate)
        _loss(fout, fst, 5).backward()
    _loss(out, st, 5).backward()
    _check_whole_sequence(counts, cell, packed=True)
    assert torch.equal(flens, lens)
    torch.testing.assert_close(fout.cpu(), out.detach())
    for a, e in zip(_leaves(fst), _leaves(st)):
        torch.testing.assert_close(a.cpu(), e.detach())
    torch.testing.assert_close(xf.grad.cpu(), x.grad)
    for p, fp in zip(cpu.parameters(), foo.parameters()):
        torch.testing.assert_close(fp.grad.cpu(), p.grad)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_dropout_is_seeded_and_matches_the_composite_path(no_fallback, cell):
    m = _module(cell, 4, 8, num_layers=3, dropout=0.4).to(torch.float64).to("foo")
    x = torch.randn(5, 3, 4, dtype=torch.float64, device="foo")

    def native():
        torch.foo.manual_seed(7)
        out, _ = m(x)
        return out

    def composite():
        torch.foo.manual_seed(7)
        op = torch.ops.aten.lstm.input if cell == "lstm" else torch.ops.aten.gru.input
        h = torch.zeros(3, 3, 8, dtype=torch.float64, device="foo")
        hx = [h, h] if cell == "lstm" else h
        return op._op_dk(
            torch._C.DispatchKey.CompositeImplicitAutograd, x, hx, m._flat_weights, True, 3, 0.4, True, False, False
        )[0]

    with _Counts() as counts:
        a, b = native(), native()
    _check_whole_sequence(counts, cell)
    assert torch.equal(a.cpu(), b.cpu())
    m.eval()
    assert not torch.equal(native().cpu(), a.cpu())  # eval: no dropout
    m.train()
    torch.testing.assert_close(a.cpu(), composite().cpu())


def test_dropout_gradients_match_the_composite_path(no_fallback):
    m = nn.LSTM(4, 6, num_layers=2, dropout=0.5).to(torch.float64).to("foo")
    x = torch.randn(5, 2, 4, dtype=torch.float64, device="foo", requires_grad=True)
    grads = []
    for native in (True, False):
        torch.foo.manual_seed(11)
        h = torch.zeros(2, 2, 6, dtype=torch.float64, device="foo")
        if native:
            out = m(x, (h, h))[0]
        else:
            out = torch.ops.aten.lstm.input._op_dk(
                torch._C.DispatchKey.CompositeImplicitAutograd,
                x,
                [h, h],
                m._flat_weights,
                True,
                2,
                0.5,
                True,
                False,
                False,
            )[0]
        grads.append(torch.autograd.grad(out.sin().sum(), [x, m.weight_ih_l0, m.weight_hh_l1]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a.cpu(), b.cpu())


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_inference_mode_and_no_grad(no_fallback, cell):
    torch.manual_seed(0)
    cpu, foo = _pair(_module(cell, 3, 5, num_layers=2, bidirectional=True), torch.float32)
    x = torch.randn(4, 2, 3)
    expected, _ = cpu(x)
    for ctx in (torch.inference_mode, torch.no_grad):
        with ctx(), _Counts() as counts:
            out, _ = foo(x.to("foo"))
        _check_whole_sequence(counts, cell)
        torch.testing.assert_close(out.cpu(), expected.detach())


def test_double_backward_matches_cpu(no_fallback):
    torch.manual_seed(0)
    cpu, foo = _pair(nn.LSTM(3, 4), torch.float64)
    x = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    xf = _to_foo(x)
    results = []
    for m, inp in ((cpu, x), (foo, xf)):
        out, _ = m(inp)
        (gx,) = torch.autograd.grad(out.pow(2).sum(), inp, create_graph=True)
        gx.sin().sum().backward()
        results.append((gx.detach().cpu(), inp.grad.cpu(), m.weight_hh_l0.grad.cpu()))
    for a, b in zip(results[1], results[0]):
        torch.testing.assert_close(a, b)


def test_double_backward_with_dropout_refuses(no_fallback):
    m = nn.GRU(3, 4, num_layers=2, dropout=0.3).to("foo")
    x = torch.randn(3, 2, 3, device="foo", requires_grad=True)
    out, _ = m(x)
    with pytest.raises(RuntimeError, match="foo: double backward"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_zero_batch_and_half_types_follow_the_composite_path(no_fallback, cell):
    m = _module(cell, 3, 4).to("foo")
    cpu_m = copy.deepcopy(m).cpu()
    x = torch.randn(2, 0, 3)
    try:
        expected = cpu_m(x)[0]
    except RuntimeError as e:
        with pytest.raises(type(e)):
            m(x.to("foo"))
    else:
        out = m(x.to("foo"))[0]
        assert out.shape == expected.shape
    # bfloat16 runs ATen's per-step cells (in the tensors' dtype) on foo.
    mb = copy.deepcopy(m).to(torch.bfloat16)
    with _Counts() as counts:
        out = mb(torch.randn(2, 3, 3, dtype=torch.bfloat16, device="foo"))[0]
    assert counts[CELL_OPS[cell]] > 0 and out.dtype == torch.bfloat16


def test_lstm_projections_follow_the_composite_path(no_fallback):
    torch.manual_seed(0)
    cpu, foo = _pair(nn.LSTM(3, 6, proj_size=2), torch.float64)
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    with _Counts() as counts:
        out, (hn, cn) = foo(x.to("foo"))
    assert counts[CELL_OPS["lstm"]] > 0
    e_out, (e_hn, e_cn) = cpu(x)
    torch.testing.assert_close(out.cpu(), e_out.detach())
    torch.testing.assert_close(cn.cpu(), e_cn.detach())


def test_bad_state_shape_raises_like_cpu(no_fallback):
    m = nn.LSTM(3, 4).to(torch.float64)
    x = torch.randn(2, 2, 3, dtype=torch.float64)
    h = torch.zeros(1, 3, 4, dtype=torch.float64)  # batch 3, input batch 2
    with pytest.raises(RuntimeError) as cpu_err:
        torch.lstm(x, [h, h], m._flat_weights, True, 1, 0.0, False, False, False)
    f = [w.to("foo") for w in m._flat_weights]
    with pytest.raises(type(cpu_err.value)):
        torch.lstm(x.to("foo"), [h.to("foo"), h.to("foo")], f, True, 1, 0.0, False, False, False)


def test_memory_returns_to_baseline(no_fallback):
    m = nn.LSTM(8, 16, num_layers=2, bidirectional=True).to("foo")
    x = torch.randn(5, 3, 8, device="foo", requires_grad=True)
    torch.foo.synchronize()
    base = torch.foo.memory_allocated()
    out, (hn, cn) = m(x)
    (out.sum() + hn.sum() + cn.sum()).backward()
    del out, hn, cn
    x.grad = None
    m.zero_grad(set_to_none=True)
    assert torch.foo.memory_allocated() == base
