"""random_ (.default/.from/.to), exponential_, geometric_, log_normal_, cauchy_
natively on foo (fallback off): ATen's ranges and dtypes, the distributions
(moments and Kolmogorov-Smirnov distances), determinism and generator
offsets, strided and zero-size tensors, and CPU's errors and warnings.

Values differ from CPU's (another generator); everything else must match.
Statistical bounds are 5 sigma (or a KS distance of 3/sqrt(n), p < 1e-7)
and every draw is seeded, so the tests are deterministic.
"""

import math
import warnings

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_fallback")

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = [torch.bool, *INTS, *FLOATS]
DIGITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _foo(n, dtype, seed=0):
    torch.foo.manual_seed(seed)
    return torch.empty(n, dtype=dtype, device="foo")


def _default_top(dtype):
    if dtype.is_floating_point:
        return 2 ** DIGITS[dtype]
    return 1 if dtype == torch.bool else torch.iinfo(dtype).max


def _exact(x):
    """Values as exact Python ints (int64 or float64 on CPU)."""
    x = x.cpu()
    return x.to(torch.float64 if x.dtype.is_floating_point else torch.int64)


def _within(mean, expected, sigma, n, k=5.0):
    assert abs(mean - expected) <= k * sigma / math.sqrt(n), (mean, expected, sigma, n)


def _ks(samples, cdf):
    """Kolmogorov-Smirnov distance of float64 `samples` from `cdf`."""
    x, _ = torch.sort(samples.to(torch.float64).flatten())
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).max().item(), (f - (i - 1) / n).max().item())


# ------------------------------------------------------------------ random_


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_random_default_range_every_dtype(dtype):
    n = 20000
    x = _foo(n, dtype, seed=1).random_()
    assert x.device.type == "foo" and x.dtype == dtype and x.shape == (n,)
    v = _exact(x)
    top = _default_top(dtype)
    assert v.min().item() >= 0 and v.max().item() <= top
    if dtype.is_floating_point:
        assert torch.equal(v, v.round())
    if top <= 2**11:
        # [0, top] inclusive, both ends reached (ATen draws % (top + 1)).
        assert v.min().item() == 0 and v.max().item() == top
        counts = torch.bincount(v.to(torch.int64), minlength=top + 1).to(torch.float64)
        p = 1 / (top + 1)
        assert (counts - n * p).abs().max().item() <= 5 * math.sqrt(n * p * (1 - p)) + 1
    else:
        _within(v.to(torch.float64).mean().item() / top, 0.5, 1 / math.sqrt(12), n)
    if dtype in (torch.int64, torch.float64):
        # 64-bit draws: most values lie far above 2^32.
        assert (v.to(torch.float64) > 2.0**40).float().mean().item() > 0.99


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_random_from_to_every_dtype(dtype):
    lo, hi = (0, 2) if dtype == torch.bool else (3, 10) if dtype == torch.uint8 else (-3, 7)
    n = 20000
    v = _exact(_foo(n, dtype, seed=2).random_(lo, hi))
    assert v.min().item() == lo and v.max().item() == hi - 1
    counts = torch.bincount(v.to(torch.int64) - lo, minlength=hi - lo).to(torch.float64)
    p = 1 / (hi - lo)
    assert (counts - n * p).abs().max().item() <= 5 * math.sqrt(n * p * (1 - p))
    # .to: [0, to)
    w = _exact(_foo(n, dtype, seed=3).random_(2))
    assert set(w.unique().tolist()) == {0, 1}


@pytest.mark.parametrize(
    "dtype,lo,top",
    [
        (torch.int8, -3, 127),
        (torch.uint8, 250, 255),
        (torch.bool, 0, 1),
        (torch.bool, 1, 1),
        (torch.float16, 2040, 2048),
        (torch.bfloat16, -5, 256),
        (torch.int16, 32760, 32767),
    ],
    ids=str,
)
def test_random_from_to_dtype_max(dtype, lo, top):
    v = _exact(_foo(5000, dtype, seed=4).random_(lo, None))
    assert v.min().item() == lo and v.max().item() == top


def test_random_wide_ranges_use_64_bit_draws():
    n = 20000
    for dtype in (torch.int64, torch.float64):
        v = _exact(_foo(n, dtype, seed=5).random_(0, 2**40)).to(torch.float64)
        assert v.min().item() >= 0 and v.max().item() < 2**40
        _within(v.mean().item() / 2**40, 0.5, 1 / math.sqrt(12), n)
    w = _exact(_foo(n, torch.int64, seed=6).random_(2**62, None)).to(torch.float64)
    assert w.min().item() >= 2**62
    _within((w.mean().item() - 2**62) / (2**63 - 2**62), 0.5, 1 / math.sqrt(12), n)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_random_full_int64_range(dtype):
    n = 20000
    v = _exact(_foo(n, dtype, seed=7).random_(I64_MIN, None)).to(torch.float64) / 2.0**64
    assert v.min().item() >= -0.5 and v.max().item() <= 0.5
    _within(v.mean().item(), 0.0, 1 / math.sqrt(12), n)
    assert (v.abs() > 0.25).float().mean().item() > 0.45


def test_random_float_ranges_adjusted_like_aten():
    # half's largest values: to=65504 becomes 65472 (the previous half), with
    # CPU's precision warning.
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^11\), 2\^11\]"):
        x = _foo(4000, torch.float16, seed=8).random_(0, 65504)
    v = _exact(x)
    assert v.min().item() >= 0 and v.max().item() <= 65472 and v.max().item() > 60000
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]"):
        y = _exact(_foo(4000, torch.float32, seed=8).random_(0, 2**25))
    assert y.max().item() < 2**25 and y.max().item() > 2**24


# ------------------------------------------------------- continuous and geometric


def _normal_cdf(z):
    return 0.5 * torch.erfc(-z / math.sqrt(2))


SIZES = {torch.float16: 50000, torch.bfloat16: 50000, torch.float32: 100000, torch.float64: 100000}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_exponential_distribution(dtype):
    n, lam = SIZES[dtype], 2.5
    x = _foo(n, dtype, seed=10).exponential_(lam)
    assert x.dtype == dtype
    v = x.cpu().to(torch.float64)
    assert v.min().item() >= 0 and torch.isfinite(v).all()
    _within(v.mean().item(), 1 / lam, 1 / lam, n)
    _within(v.var().item(), 1 / lam**2, math.sqrt(8) / lam**2, n)  # Var of x^2 term: 8 / lam^4
    assert _ks(v, lambda t: 1 - torch.exp(-lam * t)) < 3 / math.sqrt(n)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_log_normal_distribution(dtype):
    n, mu, sd = SIZES[dtype], 0.5, 0.75
    x = _foo(n, dtype, seed=11).log_normal_(mu, sd)
    v = x.cpu().to(torch.float64)
    assert v.min().item() > 0
    logv = v.log()
    _within(logv.mean().item(), mu, sd, n)
    assert _ks(logv, lambda t: _normal_cdf((t - mu) / sd)) < 3 / math.sqrt(n)
    # default parameters (mean 1, std 2): the median is e^1
    d = _foo(n, dtype, seed=12).log_normal_().cpu().to(torch.float64)
    assert abs((d < math.e).double().mean().item() - 0.5) < 5 * 0.5 / math.sqrt(n)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cauchy_distribution(dtype):
    n, med, sig = SIZES[dtype], 1.0, 2.0
    v = _foo(n, dtype, seed=13).cauchy_(med, sig).cpu().to(torch.float64)
    assert not torch.isnan(v).any()
    assert _ks(v, lambda t: 0.5 + torch.atan((t - med) / sig) / math.pi) < 3 / math.sqrt(n)
    # quartiles at median -/+ sigma
    q = torch.quantile(v, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(q, torch.tensor([med - sig, med, med + sig], dtype=torch.float64), atol=0.15)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS], ids=str)
def test_geometric_distribution(dtype):
    n, p = 50000, 0.3
    x = _foo(n, dtype, seed=14).geometric_(p)
    assert x.dtype == dtype
    v = _exact(x).to(torch.float64)
    assert v.min().item() == 1 and torch.equal(v, v.round())
    _within(v.mean().item(), 1 / p, math.sqrt(1 - p) / p, n)
    for k in range(1, 6):
        pk = (1 - p) ** (k - 1) * p
        _within((v == k).double().mean().item(), pk, math.sqrt(pk * (1 - pk)), n)
    # a small p: counts far beyond what float32 uniforms could resolve stay exact
    if dtype == torch.float64:
        w = _foo(n, dtype, seed=15).geometric_(1e-6).cpu()
        _within(w.mean().item(), 1e6, 1e6, n)


# ----------------------------------------------------- determinism, generators


OPS = {
    "random_": lambda t, **k: t.random_(**k),
    "random_.from": lambda t, **k: t.random_(-5, 1000, **k),
    "random_.to": lambda t, **k: t.random_(77, **k),
    "random_.full": lambda t, **k: t.random_(I64_MIN, None, **k),
    "exponential_": lambda t, **k: t.exponential_(**k),
    "geometric_": lambda t, **k: t.geometric_(0.1, **k),
    "log_normal_": lambda t, **k: t.log_normal_(**k),
    "cauchy_": lambda t, **k: t.cauchy_(**k),
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_seeded_draws_repeat_and_advance(op, dtype):
    f = OPS[op]
    a = f(_foo(1001, dtype, seed=21)).cpu()
    a2 = f(torch.empty(1001, dtype=dtype, device="foo")).cpu()
    b = f(_foo(1001, dtype, seed=21)).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, a2)  # the default generator moved on
    # An explicit generator: same seed, same values; its offset advances;
    # the default generator is left alone.
    state = torch.foo.get_rng_state()
    g = torch.Generator(device="foo")
    g.manual_seed(21)
    c = f(torch.empty(1001, dtype=dtype, device="foo"), generator=g).cpu()
    assert torch.equal(a, c)
    assert g.get_offset() > 0
    c2 = f(torch.empty(1001, dtype=dtype, device="foo"), generator=g).cpu()
    assert torch.equal(a2, c2)
    assert torch.equal(torch.foo.get_rng_state(), state)


@pytest.mark.parametrize("op", list(OPS))
def test_stream_continues_across_calls(op):
    # Two draws of 8 equal one draw of 16 (a 64-bit draw takes 2 per block).
    f = OPS[op]
    whole = f(_foo(16, torch.float64, seed=22)).cpu()
    torch.foo.manual_seed(22)
    first = f(torch.empty(8, dtype=torch.float64, device="foo")).cpu()
    second = f(torch.empty(8, dtype=torch.float64, device="foo")).cpu()
    assert torch.equal(whole, torch.cat([first, second]))


def test_cpu_generator_refused():
    g = torch.Generator()
    with pytest.raises(RuntimeError, match="Expected a 'foo' device type for generator"):
        torch.empty(4, device="foo").exponential_(generator=g)
    with pytest.raises(RuntimeError, match="Expected a 'foo' device type for generator"):
        torch.empty(4, dtype=torch.int64, device="foo").random_(0, 5, generator=g)


# ------------------------------------------------------- strided and zero-size


@pytest.mark.parametrize("op", list(OPS))
def test_strided_view_fills_only_its_elements(op):
    f = OPS[op]
    base = torch.full((40, 30), -7.0, dtype=torch.float64, device="foo")
    view = base.t()[::2, 1:]  # non-contiguous, offset storage
    torch.foo.manual_seed(23)
    f(view)
    got = base.cpu()
    mask = torch.zeros(40, 30, dtype=torch.bool)
    mask.t()[::2, 1:] = True
    assert (got[~mask] == -7.0).all()
    # The view holds what a contiguous draw of its shape holds (row-major order).
    dense = f(_foo(view.numel(), torch.float64, seed=23)).cpu().view(view.shape)
    assert torch.equal(view.cpu(), dense)


@pytest.mark.parametrize("op", list(OPS))
def test_zero_size_draws_nothing(op):
    g = torch.Generator(device="foo")
    g.manual_seed(1)
    e = torch.empty(0, 5, device="foo")
    assert OPS[op](e, generator=g) is e
    assert g.get_offset() == 0


def test_functional_and_out_forms():
    A = torch.ops.aten
    x = torch.empty(1000, dtype=torch.int64, device="foo")
    r = A.random.default(x)
    assert r.device.type == "foo" and r.dtype == torch.int64 and r.min().item() >= 0
    assert r.max().item() > 2**60
    for r in (A.random.to(x, 9), getattr(A.random, "from")(x, 3, 9)):
        assert r.device.type == "foo" and r.dtype == torch.int64
        assert r.min().item() >= 0 and r.max().item() == 8
    out = torch.empty(1000, dtype=torch.int64, device="foo")
    A.random.from_out(x, 3, 9, out=out)
    assert out.min().item() == 3 and out.max().item() == 8
    A.random.to_out(x, 2, out=out)
    assert set(out.cpu().unique().tolist()) == {0, 1}
    A.random.out(x, out=out)
    assert out.min().item() >= 0
    f = torch.empty(1000, device="foo")
    assert A.exponential.default(f, 3.0).min().item() >= 0
    assert A.geometric.default(f, 0.5).min().item() >= 1
    assert A.log_normal.default(f).min().item() > 0
    fo = torch.empty(1000, device="foo")
    A.cauchy.out(f, 0.0, 1.0, out=fo)
    A.exponential.out(f, out=fo)
    assert fo.min().item() >= 0
    A.geometric.out(f, 0.5, out=fo)
    assert fo.min().item() >= 1
    A.log_normal.out(f, out=fo)
    assert fo.min().item() > 0


def test_memory_returns_to_baseline():
    torch.foo.synchronize()
    before = torch.foo.memory_allocated()
    for op in OPS.values():
        op(torch.empty(3000, dtype=torch.float32, device="foo"))
    assert torch.foo.memory_allocated() == before


# ------------------------------------------------------------- errors vs CPU

ERRORS = [
    (torch.float32, 10, lambda t: t.random_(5, 5)),
    (torch.float32, 0, lambda t: t.random_(5, 5)),
    (torch.float32, 10, lambda t: t.random_(0)),
    (torch.float32, 10, lambda t: t.random_(-5)),
    (torch.bool, 10, lambda t: t.random_(0, 3)),
    (torch.bool, 10, lambda t: t.random_(-3, None)),
    (torch.int8, 10, lambda t: t.random_(0, 200)),
    (torch.int8, 10, lambda t: t.random_(-200, 0)),
    (torch.uint8, 10, lambda t: t.random_(-1, 10)),
    (torch.uint8, 0, lambda t: t.random_(-1, 10)),
    (torch.uint8, 10, lambda t: t.random_(300)),
    (torch.float16, 10, lambda t: t.random_(0, 70000)),
    (torch.float16, 10, lambda t: t.random_(65000, None)),
    (torch.float16, 10, lambda t: t.random_(2050, None)),
    (torch.float32, 10, lambda t: t.random_(2**30 + 1, 2**30 + 3)),
    (torch.int32, 10, lambda t: t.random_(I64_MIN, None)),
    (torch.uint8, 10, lambda t: t.random_(I64_MIN, None)),
    (torch.bool, 10, lambda t: t.random_(I64_MIN, None)),
    (torch.float16, 10, lambda t: t.random_(I64_MIN, None)),
    (torch.float32, 10, lambda t: t.exponential_(0)),
    (torch.float32, 0, lambda t: t.exponential_(-1)),
    (torch.float32, 10, lambda t: t.exponential_(float("nan"))),
    (torch.int32, 10, lambda t: t.exponential_()),
    (torch.bool, 10, lambda t: t.exponential_()),
    (torch.float32, 10, lambda t: t.geometric_(0)),
    (torch.float32, 10, lambda t: t.geometric_(1)),
    (torch.float32, 0, lambda t: t.geometric_(1.5)),
    (torch.float32, 10, lambda t: t.geometric_(float("nan"))),
    (torch.bool, 10, lambda t: t.geometric_(0.5)),
    (torch.float32, 10, lambda t: t.log_normal_(1, 0)),
    (torch.float64, 10, lambda t: t.log_normal_(1, -1)),
    (torch.int64, 10, lambda t: t.log_normal_()),
    (torch.float32, 10, lambda t: t.cauchy_(0, 0)),
    (torch.float32, 10, lambda t: t.cauchy_(0, -2.5)),
    (torch.uint8, 10, lambda t: t.cauchy_()),
    (torch.uint8, 0, lambda t: t.cauchy_()),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_match_cpu(case):
    dtype, n, f = ERRORS[case]
    with pytest.raises(Exception) as cpu:
        f(torch.empty(n, dtype=dtype))
    with pytest.raises(type(cpu.value)) as foo:
        f(torch.empty(n, dtype=dtype, device="foo"))
    assert type(foo.value) is type(cpu.value)
    msg = str(foo.value)
    assert msg.startswith(str(cpu.value).splitlines()[0]) and "foo" in msg, (msg, str(cpu.value))


ACCEPTED = [
    (torch.int32, 0, lambda t: t.exponential_()),
    (torch.int64, 0, lambda t: t.log_normal_()),
    (torch.bool, 0, lambda t: t.geometric_(0.5)),
    (torch.int32, 0, lambda t: t.random_(I64_MIN, None)),
    (torch.float32, 10, lambda t: t.exponential_(float("inf"))),
    (torch.bool, 10, lambda t: t.random_(0, 2)),
    (torch.int64, 10, lambda t: t.random_(I64_MIN, I64_MAX)),
]


@pytest.mark.parametrize("case", range(len(ACCEPTED)))
def test_accepted_like_cpu(case):
    dtype, n, f = ACCEPTED[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(torch.empty(n, dtype=dtype))
        r = f(torch.empty(n, dtype=dtype, device="foo"))
    assert r.device.type == "foo" and r.dtype == dtype and r.numel() == n


def test_exponential_of_infinite_rate_is_zero():
    assert torch.equal(torch.empty(8, device="foo").exponential_(float("inf")).cpu(), torch.zeros(8))


def _outcome(f):
    """("ok", warnings) or (exception type, message), foo's suffix removed."""
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            f()
        return ("ok", tuple(str(x.message).split(" (Triggered internally")[0] for x in w))
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        # The Python kernels' suffix, and the native path's (ATen's message, then "(foo)").
        return (type(e).__name__, str(e).replace(" (on foo)", "").removesuffix(" (foo)"))


def test_random_range_rules_match_cpu_on_a_sweep():
    """ATen's range arithmetic (update_from/update_to, the dtype bounds, the
    precision warnings) over 600 seeded (dtype, from, to) triples near every
    power of two: the same error, message and warnings as CPU."""
    import random

    rng = random.Random(0)
    for _ in range(600):
        dt = rng.choice(ALL)
        e = rng.randint(0, 63)
        a = max(min(rng.choice([-1, 1]) * rng.randint(0, 2**e), I64_MAX), I64_MIN)
        mode = rng.randint(0, 2)
        if mode == 0:
            b = max(min(a + rng.randint(-3, 2 ** max(e - rng.randint(0, 12), 0)), I64_MAX), I64_MIN)
            args = (a, b)
        else:
            args = (a, None) if mode == 1 else (abs(a),)
        cpu = _outcome(lambda: torch.empty(3, dtype=dt).random_(*args))
        foo = _outcome(lambda: torch.empty(3, dtype=dt, device="foo").random_(*args))
        assert foo == cpu, (dt, args)
