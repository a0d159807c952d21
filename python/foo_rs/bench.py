"""Side-by-side benchmark: foo against torch CPU, in one process.

    python -m foo_rs.bench [--quick] [--threads N] [-k NAME ...] [--out bench-results]

Each case runs on torch CPU and on foo alternately (same process, same thread
count), several repeats each; the report gives medians and the ratio foo/CPU
(lower is better), prints a markdown table, writes it to OUT/report.md and a
bar chart of the ratios to OUT/ratios.png. Each timed sample follows a short
pause (so the other backend's spinning worker threads are idle) and untimed
runs of the same step for at least 10 ms, at least one (so the sample is a step
that follows steps, as in a training loop, not the first work after the pause:
on this VM a thread pool's first jobs after 20-50 ms idle take 0.4-5 ms longer,
for torch's OpenMP team and foo's pool alike). ``--cold`` drops the untimed
runs and times that first job instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from dataclasses import dataclass
from collections.abc import Callable

import torch

import foo_rs

N_BIG = 16 * 1024 * 1024
#: Pause before each timed sample (see ``time_case``): longer than the other
#: backend's workers spin after their last job. torch CPU's OpenMP (libgomp)
#: worker stays busy about 8 ms after a parallel region on this 2-core VM
#: (``python scripts/wake_latency.py --omp-spin``), foo's pool 8 ms. With a
#: 5 ms pause foo's millisecond cases ran against CPU's still-spinning worker,
#: which held the second core: a bf16 ``linear`` 256x1024->1024 forward took
#: 2.64 ms after a CPU sample against 1.34 ms after foo's own (one thread's
#: speed). Longer pauses have a cost of their own on this VM: after 20-50 ms idle
#: foo's sleeping worker often misses the lead-in and the timed call (README,
#: sixth session).
SETTLE_S = 0.02
#: Least time the untimed lead-in runs the step before a sample (``time_case``):
#: long enough for a thread pool to be awake again after the pause, which on
#: this VM can take several milliseconds (one run of a millisecond step was
#: not always enough for foo's pool; torch CPU's recovered within it).
LEAD_IN_S = 0.01


@dataclass
class Case:
    name: str
    group: str
    make: Callable[[str], Callable[[], object]]  # device -> zero-arg step
    inner: int = 1  # calls per timed sample


def _elementwise(op: str) -> Callable[[str], Callable[[], object]]:
    def make(device):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(N_BIG, generator=g).to(device)
        b = torch.randn(N_BIG, generator=g).to(device)
        cond = (torch.randn(N_BIG, generator=g) > 0).to(device)
        fns = {
            "add": lambda: a + b,
            "mul": lambda: a * b,
            "exp": lambda: torch.exp(a),
            "gelu": lambda: torch.nn.functional.gelu(a),
            "sigmoid": lambda: torch.sigmoid(a),
            "relu": lambda: torch.relu(a),
            "where": lambda: torch.where(cond, a, b),
            "sum": lambda: a.sum(),
        }
        return fns[op]

    return make


#: In-place random fills (16M elements): the Philox kernels against CPU's
#: (which draws serially from mt19937).
RANDOM_FILLS = {
    "random_ int64": (torch.int64, lambda t: t.random_()),
    "random_(0, 1000) int32": (torch.int32, lambda t: t.random_(0, 1000)),
    "normal_ f32": (torch.float32, lambda t: t.normal_()),
    "exponential_ f32": (torch.float32, lambda t: t.exponential_()),
    "geometric_(0.2) f32": (torch.float32, lambda t: t.geometric_(0.2)),
    "log_normal_ f32": (torch.float32, lambda t: t.log_normal_()),
    "cauchy_ f64": (torch.float64, lambda t: t.cauchy_()),
}


def _random_fill(name: str) -> Callable[[str], Callable[[], object]]:
    dtype, fill = RANDOM_FILLS[name]

    def make(device):
        x = torch.empty(N_BIG, dtype=dtype, device=device)
        return lambda: fill(x)

    return make


def _fresh_alloc(device):
    def step():
        return torch.empty(N_BIG, device=device).fill_(1.0)

    return step


def _tiny_add(device):
    a = torch.ones(4, device=device)
    b = torch.ones(4, device=device)

    def step():
        for _ in range(100):
            a + b

    return step


def _mm(n, dtype=torch.float32):
    def make(device):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g).to(device, dtype)
        b = torch.randn(n, n, generator=g).to(device, dtype)
        return lambda: a @ b

    return make


#: Linear-shaped bf16 products (batch, in, out): the MLP's and the transformer
#: block's layers (rows = batch x tokens).
BF16_LINEARS = [(256, 784, 1024), (256, 1024, 1024), (256, 1024, 10), (1024, 256, 1024), (1024, 1024, 256)]


#: Linear at small batches (batch, in, out), float32: an RNN's decoder, an MLP
#: served a few requests at a time. `x @ W.t()` with few rows had run at a
#: fraction of the machine's rate on foo (README, tenth session).
SMALL_LINEARS = [(2, 1024, 1024), (4, 512, 2000), (16, 256, 1024), (16, 1024, 256), (64, 256, 1024)]


def _linear(rows: int, fin: int, fout: int, backward: bool, dtype: torch.dtype = torch.bfloat16):
    """F.linear (x @ W^T + b); with ``backward`` also the two gradient
    products (grad @ W and grad^T @ x) and the bias sum."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, fin, generator=g).to(device, dtype).requires_grad_(backward)
        w = (torch.randn(fout, fin, generator=g) * fin**-0.5).to(device, dtype).requires_grad_(backward)
        b = torch.randn(fout, generator=g).to(device, dtype).requires_grad_(backward)
        gy = torch.randn(rows, fout, generator=g).to(device, dtype)
        if not backward:
            return lambda: torch.nn.functional.linear(x, w, b)

        def step():
            y = torch.nn.functional.linear(x, w, b)
            return torch.autograd.grad(y, (x, w, b), gy)[0]

        return step

    return make


def _fused(op: str, fused: bool):
    """foo's own operators (``torch.ops.foo.*``) against the composite they
    fuse: with ``fused``, foo runs its op and CPU the composite (CPU has no
    such op); without, both run the composite (foo's separate kernels)."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        F = torch.nn.functional
        if op == "rms_norm":
            x = torch.randn(8192, 1024, generator=g).to(device)
            w = torch.rand(1024, generator=g).to(device)
            if fused and device != "cpu":
                return lambda: torch.ops.foo.rms_norm(x, [1024], w, 1e-6)
            return lambda: F.rms_norm(x, [1024], w, 1e-6)
        x = torch.randn(2048, 1024, generator=g).to(device)
        w = (torch.randn(1024, 1024, generator=g) / 32).to(device)
        b = torch.randn(1024, generator=g).to(device)
        if fused and device != "cpu":
            return lambda: torch.ops.foo.linear_act(x, w, b, "gelu")
        return lambda: F.gelu(F.linear(x, w, b))

    return make


def _decomp(op: str, batch: int, n: int):
    """A torch.linalg decomposition of float32 matrices (foo: faer, CPU: LAPACK)."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(batch, n, n, generator=g)
        a = (a @ a.mT + n * torch.eye(n)).to(device)  # SPD, well conditioned
        b = torch.randn(batch, n, 1, generator=g).to(device)
        fn = {
            "solve": lambda: torch.linalg.solve(a, b),
            "cholesky": lambda: torch.linalg.cholesky(a),
            "inv": lambda: torch.linalg.inv(a),
            "slogdet": lambda: torch.linalg.slogdet(a),
        }[op]
        return fn

    return make


def _transformers_step(kind: str):
    """A training step (forward, backward, AdamW) of a transformers model in
    a small config, random init (nothing downloaded): what users run."""

    def make(device):
        import transformers  # optional extra: cases are skipped without it

        torch.manual_seed(0)
        if kind == "gpt2":
            cfg = transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
            model = transformers.GPT2LMHeadModel(cfg)
        else:
            cfg = transformers.BertConfig(
                vocab_size=1000,
                hidden_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=512,
                max_position_embeddings=128,
            )
            model = transformers.BertForMaskedLM(cfg)
        model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, 1000, (8, 64), generator=g).to(device)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            opt.step()
            return loss

        return step

    return make


#: A 24-layer MLP's parameters (9.85M + 15K), and 250 small tensors (1M
#: parameters: a model of many small layers, where each tensor's call costs
#: more than its arithmetic).
OPT_LARGE = [(640, 640)] * 24 + [(640,)] * 24
OPT_SMALL = [(64, 64)] * 125 + [(4096,)] * 125


def _optimizer_step(kind: str, shapes=OPT_LARGE):
    """An AdamW step over ``shapes`` with the gradients already there: the
    optimizer alone."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(s, generator=g).to(device).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(device)
        opt = torch.optim.AdamW(params, lr=1e-3, **{kind: True})
        return lambda: opt.step()

    return make


#: The ops models call every step, on tiny tensors: the per-call cost of
#: reaching the kernel (dispatch, checks, allocation), not the kernel's speed.
PER_OP = {
    "add": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: a + b)(),
    "add broadcast": lambda t: (lambda a=t(4, 8), b=t(8): lambda: a + b)(),
    "mul number": lambda t: (lambda a=t(4, 8): lambda: a * 0.5)(),
    "add_ in place": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: a.add_(b))(),
    "div": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: a / b)(),
    "gt number": lambda t: (lambda a=t(4, 8): lambda: a > 0)(),
    "where": lambda t: (lambda c=t(4, 8) > 0, a=t(4, 8), b=t(4, 8): lambda: torch.where(c, a, b))(),
    "clamp": lambda t: (lambda a=t(4, 8): lambda: a.clamp(-1, 1))(),
    "pow 2": lambda t: (lambda a=t(4, 8): lambda: a**2)(),
    "clamp tensor bounds": lambda t: (lambda a=t(4, 8), lo=t(8), hi=t(8): lambda: torch.clamp(a, lo, hi))(),
    "remainder number": lambda t: (lambda a=t(4, 8): lambda: a % 0.7)(),
    "floor_divide int": lambda t: (
        lambda a=torch.arange(32).view(4, 8).to(t.device), b=torch.arange(1, 9).to(t.device): lambda: a // b
    )(),
    "to bf16": lambda t: (lambda a=t(4, 8): lambda: a.to(torch.bfloat16))(),
    "relu": lambda t: (lambda a=t(4, 8): lambda: torch.relu(a))(),
    "gelu": lambda t: (lambda a=t(4, 8): lambda: torch.nn.functional.gelu(a))(),
    "sigmoid": lambda t: (lambda a=t(4, 8): lambda: torch.sigmoid(a))(),
    "sum dim": lambda t: (lambda a=t(4, 8): lambda: a.sum(1))(),
    "mean": lambda t: (lambda a=t(4, 8): lambda: a.mean())(),
    "amax dim": lambda t: (lambda a=t(4, 8): lambda: a.amax(1))(),
    "max dim": lambda t: (lambda a=t(4, 8): lambda: a.max(1))(),
    "argmax dim": lambda t: (lambda a=t(4, 8): lambda: a.argmax(1))(),
    "var dim": lambda t: (lambda a=t(4, 8): lambda: a.var(1))(),
    "softmax": lambda t: (lambda a=t(4, 8): lambda: a.softmax(-1))(),
    "log_softmax": lambda t: (lambda a=t(4, 8): lambda: a.log_softmax(-1))(),
    "mm": lambda t: (lambda a=t(4, 8), b=t(8, 8): lambda: a @ b)(),
    "linear": lambda t: (lambda a=t(4, 8), w=t(8, 8), b=t(8): lambda: torch.nn.functional.linear(a, w, b))(),
    "bmm": lambda t: (lambda a=t(2, 4, 8), b=t(2, 8, 4): lambda: torch.bmm(a, b))(),
    "layer_norm": lambda t: (lambda a=t(4, 8), w=t(8), b=t(8): lambda: torch.nn.functional.layer_norm(a, (8,), w, b))(),
    "cat": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: torch.cat([a, b]))(),
    "index_select": lambda t: (
        lambda a=t(16, 8), i=torch.tensor([1, 3, 5]).to(t.device): lambda: a.index_select(0, i)
    )(),
    "embedding": lambda t: (
        lambda w=t(16, 8), i=torch.tensor([[1, 3], [5, 7]]).to(t.device): lambda: torch.nn.functional.embedding(i, w)
    )(),
    "cross_entropy": lambda t: (
        lambda a=t(4, 8), y=torch.tensor([1, 0, 3, 7]).to(t.device): lambda: torch.nn.functional.cross_entropy(a, y)
    )(),
    "mse_loss": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: torch.nn.functional.mse_loss(a, b))(),
    "gather": lambda t: (
        lambda a=t(4, 8), i=torch.tensor([[1, 3], [5, 7], [0, 0], [2, 6]]).to(t.device): lambda: torch.gather(a, 1, i)
    )(),
    "index x[idx]": lambda t: (lambda a=t(16, 8), i=torch.tensor([1, 3, 5]).to(t.device): lambda: a[i])(),
    "index_put_ accumulate": lambda t: (
        lambda a=t(16, 8), i=torch.tensor([1, 3, 5]).to(t.device), v=t(3, 8): (
            lambda: a.index_put_((i,), v, accumulate=True)
        )
    )(),
    "arange": lambda t: (lambda d=t.device: lambda: torch.arange(0, 16, device=d))(),
    "adaptive_avg_pool2d": lambda t: (
        lambda a=t(1, 2, 6, 6): lambda: torch.nn.functional.adaptive_avg_pool2d(a, (2, 2))
    )(),
    "max_pool2d": lambda t: (lambda a=t(1, 2, 4, 4): lambda: torch.nn.functional.max_pool2d(a, 2))(),
    "sdpa": lambda t: (lambda q=t(1, 2, 4, 8): lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))(),
    "copy_": lambda t: (lambda a=t(4, 8), b=t(4, 8): lambda: a.copy_(b))(),
    "conv2d": lambda t: (
        lambda x=t(1, 4, 8, 8), w=t(8, 4, 3, 3), b=t(8): lambda: torch.nn.functional.conv2d(x, w, b, padding=1)
    )(),
    "conv2d backward": lambda t: (
        lambda x=t(1, 4, 8, 8), w=t(8, 4, 3, 3), g=t(1, 8, 8, 8): (
            lambda: torch.ops.aten.convolution_backward(
                g, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]
            )
        )
    )(),
    "batch_norm train": lambda t: (
        lambda x=t(2, 8, 4, 4), rm=t(8), rv=t(8).abs(), w=t(8), b=t(8): (
            lambda: torch.nn.functional.batch_norm(x, rm, rv, w, b, True)
        )
    )(),
    "group_norm": lambda t: (
        lambda x=t(2, 8, 4, 4), w=t(8), b=t(8): lambda: torch.nn.functional.group_norm(x, 4, w, b)
    )(),
    "hardswish": lambda t: (lambda a=t(4, 8): lambda: torch.nn.functional.hardswish(a))(),
    "zero_": lambda t: (lambda a=t(4, 8): lambda: a.zero_())(),
    # torch.optim's foreach path (foo's default), per call over 8 tiny tensors
    "_foreach_mul_ number x8": lambda t: (lambda a=[t(4, 8) for _ in range(8)]: lambda: torch._foreach_mul_(a, 0.9))(),
    "clip_grad_norm_ x8": lambda t: (
        lambda ps=[t(4, 8).requires_grad_() for _ in range(8)]: (
            [setattr(p, "grad", t(4, 8)) for p in ps],
            lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0),
        )[1]
    )(),
    "_foreach_add_ lists x8": lambda t: (
        lambda a=[t(4, 8) for _ in range(8)], b=[t(4, 8) for _ in range(8)]: (
            lambda: torch._foreach_add_(a, b, alpha=0.1)
        )
    )(),
}
PER_OP_INNER = 200


def _per_op(op: str) -> Callable[[str], Callable[[], object]]:
    def make(device):
        g = torch.Generator().manual_seed(0)

        def t(*shape):
            return torch.randn(*shape, generator=g).to(device)

        t.device = device

        step = PER_OP[op](t)

        def run():
            for _ in range(PER_OP_INNER):
                r = step()
            return r

        return run

    return make


#: foo's peak allocator bytes above the inputs during one SDPA step: {case name: bytes}.
SDPA_PEAK: dict[str, int] = {}


def _sdpa_name(seq: int) -> str:
    return f"SDPA fwd+bwd, 1x8 heads x 64, seq {seq // 1024}k f32"


def _sdpa_step(seq: int):
    """Forward and backward of attention as a model trains it (no mask)."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 8, seq, 64, generator=g).to(device).requires_grad_() for _ in range(3))
        grad = torch.randn(1, 8, seq, 64, generator=g).to(device)

        def step():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return torch.autograd.grad(out, (q, k, v), grad)[0]

        if device == "foo":
            base = torch.foo.memory_allocated()
            torch.foo.reset_peak_memory_stats()
            step()
            SDPA_PEAK[_sdpa_name(seq)] = torch.foo.max_memory_allocated() - base
        return step

    return make


def _sdpa_table(rows) -> list[str]:
    names = [r[0].name for r in rows if r[0].name in SDPA_PEAK]
    if not names:
        return []
    lines = [
        "",
        "| SDPA case | foo peak memory above inputs | one 8-head score matrix (seq^2 x 8 x 4 B) |",
        "|---|---:|---:|",
    ]
    for name in names:
        seq = int(name.split("seq ")[1].split("k")[0]) * 1024
        lines.append(f"| {name} | {SDPA_PEAK[name] / 2**20:.1f} MiB | {seq * seq * 8 * 4 / 2**20:.0f} MiB |")
    return lines


#: First-call (compile) seconds of the torch.compile cases: {case name: {device: s}}.
FIRST_COMPILE_S: dict[str, dict[str, float]] = {}


def _training_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(784, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 10),
        )
    return torch.nn.TransformerEncoderLayer(
        d_model=256,
        nhead=4,
        dim_feedforward=1024,
        dropout=0.0,
        batch_first=True,
        norm_first=True,
    )


def _train_step(kind: str, compiled: bool, autocast: bool = False):
    """A training step (forward, loss, backward, SGD with momentum) of an
    MLP (784-1024-1024-10, batch 256) or a transformer block (d 256, 4 heads,
    FFN 1024, batch 8 x 128 tokens), eager or under torch.compile, with the
    forward and loss under bfloat16 autocast if ``autocast`` (float32
    parameters, as in mixed-precision training). A compiled
    case's first step (the compile) is timed in a fresh Inductor cache
    (in memory and on disk) and reported apart."""

    def make(device):
        model = _training_model(kind).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        if kind == "mlp":
            x = torch.randn(256, 784, generator=g).to(device)
            y = torch.randint(0, 10, (256,), generator=g).to(device)
            loss_fn = torch.nn.functional.cross_entropy
        else:
            x = torch.randn(8, 128, 256, generator=g).to(device)
            y = torch.randn(8, 128, 256, generator=g).to(device)
            loss_fn = torch.nn.functional.mse_loss
        forward = torch.compile(model) if compiled else model

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device, torch.bfloat16, enabled=autocast):
                loss = loss_fn(forward(x), y)
            loss.backward()
            opt.step()
            return loss

        if compiled:
            from torch._inductor.utils import fresh_inductor_cache

            _warm_up_inductor()
            with fresh_inductor_cache():
                t0 = time.perf_counter()
                _sync(step())
                first = time.perf_counter() - t0
            FIRST_COMPILE_S.setdefault(_COMPILED_NAMES[kind], {})[device] = first
        return step

    return make


class _RecurrentLM(torch.nn.Module):
    """A word-level language model: embedding, a 2-layer LSTM or GRU, a
    linear decoder over the vocabulary."""

    def __init__(self, cell: str, vocab: int = 2000, dim: int = 256, layers: int = 2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.rnn = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(dim, dim, num_layers=layers)
        self.decode = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return self.decode(out)


def _rnn_lm_step(cell: str):
    """A training step (forward, cross-entropy, backward, SGD) of
    :class:`_RecurrentLM`: sequence 35 x batch 16 tokens, vocabulary 2000,
    256-wide embedding and hidden state, 2 layers."""

    def make(device):
        torch.manual_seed(0)
        model = _RecurrentLM(cell).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, 2000, (36, 16), generator=g).to(device)
        x, y = tokens[:-1], tokens[1:]

        def step():
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        return step

    return make


_inductor_warm = False


def _warm_up_inductor():
    """One throwaway compile per process, so the first timed compile (CPU's,
    which runs first) does not also pay Inductor's imports and worker start."""
    global _inductor_warm
    if not _inductor_warm:
        from torch._inductor.utils import fresh_inductor_cache

        with fresh_inductor_cache():
            torch.compile(lambda t: t * 2 + 1)(torch.ones(8))
        _inductor_warm = True


_COMPILED_NAMES = {
    "mlp": "MLP 784-1024-1024-10 step, batch 256, torch.compile",
    "block": "transformer block d256 step, batch 8x128, torch.compile",
}
_EAGER_NAMES = {
    "mlp": "MLP 784-1024-1024-10 step, batch 256",
    "block": "transformer block d256 step, batch 8x128",
}
#: Name suffixes of the bf16 autocast training cases and of their float32
#: twins (the same step without autocast; named so that ``-k bf16`` runs both).
BF16_AUTOCAST = "bf16 autocast"
BF16_REFERENCE = "f32 (bf16 reference)"


def _bf16_table(rows) -> list[str]:
    """foo's bf16 autocast step against foo's float32 step (issue 16's goal:
    faster than float32 on foo, at most 1.0x CPU's autocast step)."""
    times = {r[0].name: (r[1], r[2]) for r in rows}
    lines = []
    for kind in ("mlp", "block"):
        ac = times.get(f"{_EAGER_NAMES[kind]}, {BF16_AUTOCAST}")
        f32 = times.get(f"{_EAGER_NAMES[kind]}, {BF16_REFERENCE}")
        if ac and f32:
            lines.append(
                f"{_EAGER_NAMES[kind]}: bf16 autocast on foo {_fmt(ac[1])} = {ac[1] / f32[1]:.2f}x foo's float32 "
                f"step ({_fmt(f32[1])}), {ac[1] / ac[0]:.2f}x CPU's autocast step ({_fmt(ac[0])})."
            )
    return ["", *lines] if lines else []


def _compile_table(rows) -> list[str]:
    """torch.compile on foo next to eager foo and compiled CPU, per model.

    CPU's own compiled/eager ratio is the yardstick for foo's: both compile
    to Inductor's C++ loops and keep the products (mm, convolution, SDPA) as
    extern calls, so what compiling can save is the same share of a step on
    either device."""
    by_name = {case.name: (cpu, foo) for case, cpu, foo, _, _ in rows}
    lines = []
    for kind, name in _COMPILED_NAMES.items():
        if name not in by_name:
            continue
        cpu_c, foo_c = by_name[name]
        first = FIRST_COMPILE_S.get(name, {})
        eager = by_name.get(_EAGER_NAMES[kind])
        lines.append(
            f"| {name} | {_fmt(eager[1]) if eager else '-'} | {_fmt(foo_c)} | "
            f"{f'{foo_c / eager[1]:.2f}' if eager else '-'} | {_fmt(cpu_c)} | "
            f"{f'{cpu_c / eager[0]:.2f}' if eager else '-'} | {foo_c / cpu_c:.2f} | "
            f"{first.get('foo', float('nan')):.1f} s | {first.get('cpu', float('nan')):.1f} s |"
        )
    if not lines:
        return []
    return [
        "",
        "torch.compile (training step; medians; first compile in a fresh Inductor cache):",
        "",
        "| case | foo eager | foo compiled | compiled/eager | CPU compiled | CPU compiled/eager "
        "| foo/CPU compiled | first compile foo | first compile CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *lines,
    ]


#: Every distinct convolution layer of torchvision's resnet18 and
#: mobilenet_v3_small at a 224x224 input: (model, in channels, out channels,
#: kernel, stride, padding, groups, input height = width, bias). SE blocks'
#: 1x1 convolutions on pooled (1x1) maps carry a bias; the others do not.
CONV_SHAPES = [
    ("resnet18", 3, 64, 7, 2, 3, 1, 224, False),
    ("resnet18", 64, 64, 3, 1, 1, 1, 56, False),
    ("resnet18", 64, 128, 3, 2, 1, 1, 56, False),
    ("resnet18", 64, 128, 1, 2, 0, 1, 56, False),
    ("resnet18", 128, 128, 3, 1, 1, 1, 28, False),
    ("resnet18", 128, 256, 3, 2, 1, 1, 28, False),
    ("resnet18", 128, 256, 1, 2, 0, 1, 28, False),
    ("resnet18", 256, 256, 3, 1, 1, 1, 14, False),
    ("resnet18", 256, 512, 3, 2, 1, 1, 14, False),
    ("resnet18", 256, 512, 1, 2, 0, 1, 14, False),
    ("resnet18", 512, 512, 3, 1, 1, 1, 7, False),
    ("mobilenet_v3_small", 3, 16, 3, 2, 1, 1, 224, False),
    ("mobilenet_v3_small", 16, 16, 3, 2, 1, 16, 112, False),
    ("mobilenet_v3_small", 16, 8, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 8, 16, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 16, 16, 1, 1, 0, 1, 56, False),
    ("mobilenet_v3_small", 16, 72, 1, 1, 0, 1, 56, False),
    ("mobilenet_v3_small", 72, 72, 3, 2, 1, 72, 56, False),
    ("mobilenet_v3_small", 72, 24, 1, 1, 0, 1, 28, False),
    ("mobilenet_v3_small", 24, 88, 1, 1, 0, 1, 28, False),
    ("mobilenet_v3_small", 88, 88, 3, 1, 1, 88, 28, False),
    ("mobilenet_v3_small", 88, 24, 1, 1, 0, 1, 28, False),
    ("mobilenet_v3_small", 24, 96, 1, 1, 0, 1, 28, False),
    ("mobilenet_v3_small", 96, 96, 5, 2, 2, 96, 28, False),
    ("mobilenet_v3_small", 96, 24, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 24, 96, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 96, 40, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 40, 240, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 240, 240, 5, 1, 2, 240, 14, False),
    ("mobilenet_v3_small", 240, 64, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 64, 240, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 240, 40, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 40, 120, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 120, 120, 5, 1, 2, 120, 14, False),
    ("mobilenet_v3_small", 120, 32, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 32, 120, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 120, 48, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 48, 144, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 144, 144, 5, 1, 2, 144, 14, False),
    ("mobilenet_v3_small", 144, 40, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 40, 144, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 144, 48, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 48, 288, 1, 1, 0, 1, 14, False),
    ("mobilenet_v3_small", 288, 288, 5, 2, 2, 288, 14, False),
    ("mobilenet_v3_small", 288, 72, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 72, 288, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 288, 96, 1, 1, 0, 1, 7, False),
    ("mobilenet_v3_small", 96, 576, 1, 1, 0, 1, 7, False),
    ("mobilenet_v3_small", 576, 576, 5, 1, 2, 576, 7, False),
    ("mobilenet_v3_small", 576, 144, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 144, 576, 1, 1, 0, 1, 1, True),
    ("mobilenet_v3_small", 576, 96, 1, 1, 0, 1, 7, False),
]

#: Batch of the conv cases.
CONV_BATCH = 8

#: resnet18's last layers on small images (4x3x64x64, as the 64x64 training
#: step): few output positions in all, where packing the weight would cost
#: as much as the product (conv.rs forward_few_cols and friends).
SMALL_MAP_SHAPES = [
    ("resnet18", 128, 128, 3, 1, 1, 1, 8, False),
    ("resnet18", 256, 256, 3, 1, 1, 1, 4, False),
    ("resnet18", 256, 512, 3, 2, 1, 1, 4, False),
    ("resnet18", 512, 512, 3, 1, 1, 1, 2, False),
]

#: Batch of the small-map conv cases.
SMALL_MAP_BATCH = 4


def _conv_name(shape, what: str, batch: int = CONV_BATCH) -> str:
    """A conv case's name; `what`: fwd, fwd+bwd, grad_input or grad_weight."""
    model, cin, cout, k, stride, pad, groups, hw, _ = shape
    kind = "dw " if groups > 1 else ""
    return f"conv {what} {model} {kind}{cin}->{cout} {k}x{k} s{stride} @{hw} (b{batch})"


#: The backward passes timed one by one (`_conv_pass`): resnet18's 3x3
#: layers, whose fwd+bwd figure can hide one slow pass behind a fast one
#: (the 64-channel layer at 56 x 56: Winograd forward and input gradient at
#: 0.4x CPU's time, its weight gradient at 1.38x until 2026-11-29).
PASS_SHAPES = [s for s in CONV_SHAPES if s[0] == "resnet18" and s[3] == 3]


def _conv_pass(shape, weight: bool, batch: int = CONV_BATCH):
    """One backward pass of a conv layer alone (f32): the input gradient or
    the weight gradient, through `aten.convolution_backward`'s output mask."""
    _, cin, cout, k, stride, pad, groups, hw, _ = shape

    def make(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch, cin, hw, hw, generator=g).to(device)
        w = (torch.randn(cout, cin // groups, k, k, generator=g) * 0.1).to(device)
        out_hw = (hw + 2 * pad - k) // stride + 1
        grad = torch.randn(batch, cout, out_hw, out_hw, generator=g).to(device)
        mask = [not weight, weight, False]
        args = (grad, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups, mask)
        return lambda: torch.ops.aten.convolution_backward(*args)

    return make


def _conv(shape, backward: bool, batch: int = CONV_BATCH):
    """One conv layer (f32): forward, or forward and backward (gradients of
    input, weight and bias)."""
    _, cin, cout, k, stride, pad, groups, hw, bias = shape

    def make(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch, cin, hw, hw, generator=g).to(device)
        w = (torch.randn(cout, cin // groups, k, k, generator=g) * 0.1).to(device)
        b = torch.randn(cout, generator=g).to(device) if bias else None
        if not backward:
            return lambda: torch.nn.functional.conv2d(x, w, b, stride, pad, 1, groups)
        x.requires_grad_(True)
        w.requires_grad_(True)
        if b is not None:
            b.requires_grad_(True)
        out_hw = (hw + 2 * pad - k) // stride + 1
        grad = torch.randn(batch, cout, out_hw, out_hw, generator=g).to(device)

        def step():
            y = torch.nn.functional.conv2d(x, w, b, stride, pad, 1, groups)
            return torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], grad)[0]

        return step

    return make


def _vision_step(kind: str, size: int, batch: int = 8, classes: int = 1000):
    """A torchvision (or, for a `timm:` kind, timm) training step (random init,
    `batch` x 3 x size x size input, cross-entropy, SGD with momentum)."""

    def make(device):
        torch.manual_seed(0)
        if kind.startswith("timm:"):
            import timm

            model = timm.create_model(kind[5:], pretrained=False, num_classes=classes).to(device)
        else:
            import torchvision

            model = getattr(torchvision.models, kind)(num_classes=classes).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 3, size, size, generator=g).to(device)
        y = torch.randint(0, classes, (batch,), generator=g).to(device)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    return make


#: Normalization layers at the sizes real models use: (name, input shape, layer).
NORMS = [
    ("layer_norm", (8, 128, 768), lambda: torch.nn.LayerNorm(768)),
    ("group_norm 32 groups", (8, 64, 56, 56), lambda: torch.nn.GroupNorm(32, 64)),
    ("batch_norm train", (8, 64, 56, 56), lambda: torch.nn.BatchNorm2d(64)),
]


def _norm_step(shape, layer):
    """A normalization layer's forward and backward (input and parameter
    gradients) in float32."""

    def make(device):
        torch.manual_seed(0)
        m = layer().to(device)
        x = torch.randn(shape).to(device).requires_grad_()
        g = torch.randn(shape).to(device)

        def step():
            y = m(x)
            return torch.autograd.grad(y, [x, *m.parameters()], g)[0]

        return step

    return make


#: Pooling layers at the sizes real models use: (name, input shape, channels
#: last, function). resnet18's stem pools its 8x64x112x112 conv output; its
#: head pools 8x512x7x7 to 1x1; video networks pool 5-d clips.
POOLS = [
    (
        "max_pool2d k3 s2 p1 8x64x112x112",
        (8, 64, 112, 112),
        False,
        lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1),
    ),
    (
        "max_pool2d k3 s2 p1 8x64x112x112 channels_last",
        (8, 64, 112, 112),
        True,
        lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1),
    ),
    (
        "avg_pool2d k3 s2 p1 8x64x112x112",
        (8, 64, 112, 112),
        False,
        lambda x: torch.nn.functional.avg_pool2d(x, 3, 2, 1),
    ),
    (
        "adaptive_avg_pool2d 8x512x7x7 -> 1x1",
        (8, 512, 7, 7),
        False,
        lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 1),
    ),
    (
        "max_pool3d k3 s2 p1 2x64x16x56x56",
        (2, 64, 16, 56, 56),
        False,
        lambda x: torch.nn.functional.max_pool3d(x, 3, 2, 1),
    ),
]


def _pool_step(shape, channels_last: bool, fn, backward: bool):
    """A pooling layer in float32: forward, or forward and the input's gradient."""

    def make(device):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(shape, generator=g)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        x = x.to(device)
        if not backward:
            return lambda: fn(x)
        x.requires_grad_(True)
        grad = torch.randn(fn(x.detach()).shape, generator=g).to(device)
        if channels_last:
            grad = grad.contiguous(memory_format=torch.channels_last)
        return lambda: torch.autograd.grad(fn(x), x, grad)[0]

    return make


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


CASES = [
    *(
        Case(f"{op} 16M f32 (fresh out)", "elementwise", _elementwise(op))
        for op in ["add", "mul", "exp", "gelu", "sigmoid", "relu", "where"]
    ),
    Case("empty+fill 64 MiB (fresh)", "allocator", _fresh_alloc),
    Case("sum 16M f32", "reduction", _elementwise("sum")),
    *(Case(f"{name} 16M (in place)", "random", _random_fill(name)) for name in RANDOM_FILLS),
    Case("add 4 elements (per op, x100)", "overhead", _tiny_add),
    *(Case(f"{op} (tiny, per call)", "per-op", _per_op(op), inner=PER_OP_INNER) for op in PER_OP),
    Case("mm 1024 f32", "matmul", _mm(1024)),
    Case("mm 1024 bf16", "matmul", _mm(1024, torch.bfloat16)),
    *(
        Case(f"linear bf16 {r}x{i}->{o} {'fwd+bwd' if bwd else 'fwd'}", "matmul", _linear(r, i, o, bwd))
        for r, i, o in BF16_LINEARS
        for bwd in (False, True)
    ),
    *(
        Case(f"linear f32 {r}x{i}->{o} fwd", "matmul", _linear(r, i, o, False, torch.float32))
        for r, i, o in SMALL_LINEARS
    ),
    *(
        Case(f"{name} {'x'.join(map(str, shape))} fwd+bwd", "norm", _norm_step(shape, layer))
        for name, shape, layer in NORMS
    ),
    *(
        Case(f"{name} {'fwd+bwd' if bwd else 'fwd'}", "pool", _pool_step(shape, cl, fn, bwd))
        for name, shape, cl, fn in POOLS
        for bwd in (False, True)
    ),
    Case("rms_norm 8192x1024 f32: foo::rms_norm vs CPU F.rms_norm", "fused", _fused("rms_norm", True)),
    Case("rms_norm 8192x1024 f32: F.rms_norm on both", "fused", _fused("rms_norm", False)),
    Case("linear+gelu 2048x1024x1024 f32: foo::linear_act vs CPU composite", "fused", _fused("linear_act", True)),
    Case("linear+gelu 2048x1024x1024 f32: composite on both", "fused", _fused("linear_act", False)),
    *(
        Case(f"linalg.{op} {b}x{n}x{n} f32", "linalg", _decomp(op, b, n))
        for op in ("solve", "cholesky", "inv", "slogdet")
        for b, n in ((1, 256), (64, 32))
    ),
    *(Case(_sdpa_name(seq), "sdpa", _sdpa_step(seq)) for seq in (1024, 2048, 4096)),
    Case(_EAGER_NAMES["mlp"], "training", _train_step("mlp", compiled=False)),
    Case(_COMPILED_NAMES["mlp"], "compile", _train_step("mlp", compiled=True)),
    Case(_EAGER_NAMES["block"], "training", _train_step("block", compiled=False)),
    *(
        Case(f"{_EAGER_NAMES[kind]}, {label}", "training", _train_step(kind, compiled=False, autocast=ac))
        for kind in ("mlp", "block")
        for label, ac in ((BF16_AUTOCAST, True), (BF16_REFERENCE, False))
    ),
    Case(_COMPILED_NAMES["block"], "compile", _train_step("block", compiled=True)),
    Case("LSTM language model step, 2x256, seq 35 x batch 16", "training", _rnn_lm_step("lstm")),
    Case("GRU language model step, 2x256, seq 35 x batch 16", "training", _rnn_lm_step("gru")),
    Case("AdamW step, 10M params (fused=True)", "optimizer", _optimizer_step("fused")),
    Case("AdamW step, 10M params (foreach=True)", "optimizer", _optimizer_step("foreach")),
    Case("AdamW step, 250 tensors of 4K (fused=True)", "optimizer", _optimizer_step("fused", OPT_SMALL)),
    Case("AdamW step, 250 tensors of 4K (foreach=True)", "optimizer", _optimizer_step("foreach", OPT_SMALL)),
    *(
        [
            Case("GPT-2 2x128 step, batch 8x64 (transformers)", "training", _transformers_step("gpt2")),
            Case("BERT-MLM 2x128 step, batch 8x64 (transformers)", "training", _transformers_step("bert")),
        ]
        if _have("transformers")
        else []
    ),
    *(
        Case(_conv_name(shape, "fwd+bwd" if bwd else "fwd"), "conv", _conv(shape, bwd))
        for shape in CONV_SHAPES
        for bwd in (False, True)
    ),
    *(
        Case(_conv_name(shape, "grad_weight" if wg else "grad_input"), "conv", _conv_pass(shape, wg))
        for shape in PASS_SHAPES
        for wg in (False, True)
    ),
    *(
        Case(
            _conv_name(shape, "fwd+bwd" if bwd else "fwd", SMALL_MAP_BATCH), "conv", _conv(shape, bwd, SMALL_MAP_BATCH)
        )
        for shape in SMALL_MAP_SHAPES
        for bwd in (False, True)
    ),
    *(
        [
            Case("resnet18 training step, batch 8x3x224x224 (torchvision)", "conv", _vision_step("resnet18", 224)),
            Case(
                "mobilenet_v3_small training step, batch 8x3x224x224 (torchvision)",
                "conv",
                _vision_step("mobilenet_v3_small", 224),
            ),
            # Small inputs: the per-call cost of every conv / batch norm layer dominates.
            Case("resnet18 training step, batch 4x3x64x64 (torchvision)", "conv", _vision_step("resnet18", 64, 4, 10)),
            Case(
                "mobilenet_v3_small training step, batch 4x3x64x64 (torchvision)",
                "conv",
                _vision_step("mobilenet_v3_small", 64, 4, 10),
            ),
        ]
        if _have("torchvision")
        else []
    ),
    *(
        [
            Case(
                "ViT-tiny training step, batch 8x3x224x224 (timm)",
                "conv",
                _vision_step("timm:vit_tiny_patch16_224", 224),
            )
        ]
        if _have("timm")
        else []
    ),
]


def _sync(x):
    if isinstance(x, torch.Tensor) and x.device.type == "foo":
        torch.foo.synchronize()


def time_case(case: Case, repeats: int, warmup: int, cold: bool = False) -> dict[str, list[float]]:
    steps = {dev: case.make(dev) for dev in ("cpu", "foo")}
    for dev in ("cpu", "foo"):
        for _ in range(warmup):
            _sync(steps[dev]())
    samples = {"cpu": [], "foo": []}
    for _ in range(repeats):
        for dev in ("cpu", "foo"):
            # Let the other backend's spinning workers (torch's OpenMP team,
            # foo's pool) go idle first, so neither is timed against the
            # other's busy-waiting threads on a 2-core machine.
            time.sleep(SETTLE_S)
            if not cold:
                # The lead-in (module docstring): the step until LEAD_IN_S
                # has passed, at least once.
                t0 = time.perf_counter()
                while True:
                    _sync(steps[dev]())
                    if time.perf_counter() - t0 >= LEAD_IN_S:
                        break
            t0 = time.perf_counter()
            _sync(steps[dev]())
            samples[dev].append(time.perf_counter() - t0)
    return samples


def _fmt(sec: float) -> str:
    if sec >= 1e-3:
        return f"{sec * 1e3:.2f} ms"
    return f"{sec * 1e6:.1f} us"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="foo vs torch CPU, side by side")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", default="bench-results")
    p.add_argument(
        "--cold",
        action="store_true",
        help="time each sample's first step after the pause (no untimed lead-in step): wake-up from idle included",
    )
    p.add_argument(
        "-k", action="append", default=[], help="only cases whose name contains this (repeat -k for several)"
    )
    p.add_argument("--group", default="", help="only cases of this group (elementwise, per-op, training, ...)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads for both backends (default: torch's, all cores)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (5 if args.quick else 15)

    foo_rs.reset_fallback_stats()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        for case in CASES:
            if (args.k and not any(k in case.name for k in args.k)) or (args.group and args.group != case.group):
                continue
            before = sum(foo_rs.fallback_stats().values())
            s = time_case(case, repeats, warmup=2, cold=args.cold)
            fell_back = sum(foo_rs.fallback_stats().values()) - before
            # Per call for cases that loop (`inner`).
            cpu, foo = statistics.median(s["cpu"]) / case.inner, statistics.median(s["foo"]) / case.inner
            rows.append((case, cpu, foo, foo / cpu, fell_back))
            print(
                f"  {case.name}: cpu {_fmt(cpu)}  foo {_fmt(foo)}  ratio {foo / cpu:.2f}"
                + (f"  ({fell_back} fallback calls)" if fell_back else ""),
                flush=True,
            )

    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {repeats} repeats" + (", cold samples" if args.cold else "")
    )
    lines = [
        f"Machine: {machine}",
        "",
        "| case | torch CPU (median) | foo (median) | foo/CPU | fallback calls |",
        "|---|---:|---:|---:|---:|",
    ]
    for case, cpu, foo, ratio, fb in rows:
        lines.append(f"| {case.name} | {_fmt(cpu)} | {_fmt(foo)} | {ratio:.2f} | {fb} |")
    per_op = [r[3] for r in rows if r[0].group == "per-op"]
    if per_op:
        geo = statistics.geometric_mean(per_op)
        within = sum(r <= 1.2 for r in per_op)
        lines += [
            "",
            f"Per-op (tiny tensors, per call): {within} of {len(per_op)} ops within 1.2x of torch CPU; "
            f"geometric mean of foo/CPU {geo:.2f}.",
        ]
    lines += _compile_table(rows)
    lines += _sdpa_table(rows)
    lines += _bf16_table(rows)
    table = "\n".join(lines)
    print()
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(table + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.5))
        names = [r[0].name for r in rows][::-1]
        ratios = [r[3] for r in rows][::-1]
        colors = ["tab:green" if r <= 1.0 else "tab:red" for r in ratios]
        ax.barh(names, ratios, color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("foo time / torch CPU time (median; lower is better)")
        ax.set_title(f"foo_rs vs torch CPU — {machine}", fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "ratios.png"), dpi=110)
        print(f"\nwrote {args.out}/report.md and {args.out}/ratios.png")
    except ImportError:
        print("\n(matplotlib missing: no chart)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
