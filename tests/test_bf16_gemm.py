"""bfloat16 matrix products (the AVX512_BF16 kernel where the CPU has it, the
widening path elsewhere) and a bfloat16 autocast training step, against torch
CPU: values within torch.testing's bfloat16 tolerances, dtypes and shapes."""

import pytest
import torch

BF16 = torch.bfloat16
SIZES = [1, 7, 17, 63, 129]


def rand(*shape, seed=0, dtype=BF16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def foo(t):
    return t.to("foo")


def close(got, want, **kw):
    assert got.device.type == "foo"
    torch.testing.assert_close(got.cpu(), want, **kw)


@pytest.fixture(autouse=True)
def _native(no_fallback):
    """Every product here runs on foo's own kernels."""
    yield


@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("n", SIZES)
def test_mm_odd_sizes(m, k, n):
    a, b = rand(m, k, seed=m), rand(k, n, seed=n + 1)
    close(foo(a) @ foo(b), a @ b)


@pytest.mark.parametrize("m,k,n", [(300, 600, 290), (256, 784, 1024), (33, 4096, 65), (8, 16384, 5)])
def test_mm_large_and_long_k(m, k, n):
    # k well past one k block (256): the accumulation stays in float32 across blocks.
    a, b = rand(m, k, seed=1), rand(k, n, seed=2)
    close(foo(a) @ foo(b), a @ b)


def test_long_k_rounds_once_from_float32():
    # The exact float64 product, rounded once, is what both devices approximate:
    # foo's error is at most CPU's plus one bfloat16 step.
    a, b = rand(64, 8192, seed=3), rand(8192, 48, seed=4)
    exact = a.double() @ b.double()
    err_foo = ((foo(a) @ foo(b)).cpu().double() - exact).abs()
    err_cpu = ((a @ b).double() - exact).abs()
    ulp = exact.abs() * 2.0**-8
    assert (err_foo <= err_cpu + ulp + 1e-3).all()
    assert err_foo.mean() <= 1.5 * err_cpu.mean() + 1e-6


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_transposed_operands(ta, tb):
    m, k, n = 45, 300, 70
    a = rand(k, m, seed=5).t() if ta else rand(m, k, seed=5)
    b = rand(n, k, seed=6).t() if tb else rand(k, n, seed=6)
    fa = foo(a.t().contiguous()).t() if ta else foo(a)
    fb = foo(b.t().contiguous()).t() if tb else foo(b)
    assert fa.stride() == a.stride() and fb.stride() == b.stride()
    close(fa @ fb, a @ b)


def test_sliced_and_strided_operands_and_output():
    a, b = rand(40, 90, seed=7), rand(120, 50, seed=8)
    fa, fb = foo(a), foo(b)
    sa, sb = a[3:36, 1:80:2], b[5:45, ::3]  # steps in both dimensions
    close(fa[3:36, 1:80:2] @ fb[5:45, ::3], sa @ sb)
    out_cpu = torch.zeros(33, 34, dtype=BF16)
    out_foo = foo(torch.zeros(33, 34, dtype=BF16))
    torch.mm(sa, sb[:, :17], out=out_cpu[:, ::2])
    torch.mm(fa[3:36, 1:80:2], fb[5:45, ::3][:, :17], out=out_foo[:, ::2])
    close(out_foo, out_cpu)


def test_linear_and_matmul():
    x, w, bias = rand(5, 30, 200, seed=9), rand(150, 200, seed=10), rand(150, seed=11)
    close(torch.nn.functional.linear(foo(x), foo(w), foo(bias)), torch.nn.functional.linear(x, w, bias))
    close(torch.nn.functional.linear(foo(x), foo(w)), torch.nn.functional.linear(x, w))
    y = rand(5, 200, 31, seed=12)
    close(torch.matmul(foo(x), foo(y)), torch.matmul(x, y))
    v = rand(200, seed=13)
    close(torch.matmul(foo(x), foo(v)), torch.matmul(x, v))


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5), (-1, 0.25)])
@pytest.mark.parametrize("bias_shape", [(70,), (1, 70), (33, 70), (33, 1)])
def test_addmm_alpha_beta(beta, alpha, bias_shape):
    bias, a, b = rand(*bias_shape, seed=14), rand(33, 260, seed=15), rand(260, 70, seed=16)
    close(
        torch.addmm(foo(bias), foo(a), foo(b), beta=beta, alpha=alpha), torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    )


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2)])
@pytest.mark.parametrize("bias_shape", [(130,), (1, 130), (40, 130), (40, 1)])
def test_addmm_input_read_in_place_matches_input_in_output(beta, alpha, bias_shape):
    """The kernel reads addmm's input where it is (a bias row, a matrix):
    the same bits as the in-place form, whose input is its output."""
    bias, a, b = rand(*bias_shape, seed=30), rand(40, 96, seed=31), rand(96, 130, seed=32)
    got = torch.addmm(foo(bias), foo(a), foo(b), beta=beta, alpha=alpha)
    inplace = foo(bias.expand(40, 130).contiguous()).addmm_(foo(a), foo(b), beta=beta, alpha=alpha)
    assert torch.equal(got.cpu().view(torch.int16), inplace.cpu().view(torch.int16))
    close(got, torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    c = rand(3, 40, 130, seed=33)[:, :1]  # a bias per batch, broadcast over rows
    got = torch.baddbmm(foo(c), foo(a).expand(3, 40, 96), foo(b).expand(3, 96, 130), beta=beta, alpha=alpha)
    close(got, torch.baddbmm(c, a.expand(3, 40, 96), b.expand(3, 96, 130), beta=beta, alpha=alpha))


def test_addmm_beta_zero_ignores_nan_and_inplace_forms():
    c = torch.full((20, 30), float("nan"), dtype=BF16)
    a, b = rand(20, 40, seed=17), rand(40, 30, seed=18)
    close(torch.addmm(foo(c), foo(a), foo(b), beta=0), torch.addmm(c, a, b, beta=0))
    c2 = rand(20, 30, seed=19)
    fc2 = foo(c2)
    fc2.addmm_(foo(a), foo(b), beta=0.5, alpha=-1)
    close(fc2, c2.clone().addmm_(a, b, beta=0.5, alpha=-1))


@pytest.mark.parametrize("batch,m,k,n", [(3, 17, 63, 129), (16, 64, 64, 64), (2, 1, 300, 7), (5, 129, 1, 17)])
def test_bmm_baddbmm(batch, m, k, n):
    a, b, c = rand(batch, m, k, seed=20), rand(batch, k, n, seed=21), rand(batch, m, n, seed=22)
    close(torch.bmm(foo(a), foo(b)), torch.bmm(a, b))
    close(
        torch.baddbmm(foo(c), foo(a), foo(b), beta=0.5, alpha=1.5),
        torch.baddbmm(c, a, b, beta=0.5, alpha=1.5),
    )
    bt = b.transpose(1, 2).contiguous().transpose(1, 2)  # column-major matrices
    close(torch.bmm(foo(a), foo(b.transpose(1, 2).contiguous()).transpose(1, 2)), torch.bmm(a, bt))
    out = foo(torch.empty(batch, m, n, dtype=BF16))
    torch.bmm(foo(a), foo(b), out=out)
    close(out, torch.bmm(a, b))


@pytest.mark.parametrize("shape", [((0, 5), (5, 7)), ((4, 0), (0, 7)), ((4, 5), (5, 0))])
def test_zero_size(shape):
    a, b = rand(*shape[0], seed=23), rand(*shape[1], seed=24)
    close(foo(a) @ foo(b), a @ b)
    bias = rand(a.shape[0], b.shape[1], seed=25)
    close(torch.addmm(foo(bias), foo(a), foo(b), beta=2), torch.addmm(bias, a, b, beta=2))
    close(torch.bmm(foo(a[None]), foo(b[None])), torch.bmm(a[None], b[None]))


def test_out_variants_and_errors():
    a, b = rand(30, 40, seed=26), rand(40, 50, seed=27)
    out = foo(torch.empty(30, 50, dtype=BF16))
    r = torch.mm(foo(a), foo(b), out=out)
    assert r.data_ptr() == out.data_ptr()
    close(out, a @ b)
    with pytest.raises(RuntimeError):
        torch.mm(foo(a), foo(b).float())
    with pytest.raises(RuntimeError):
        torch.mm(foo(a), foo(a))


def test_special_values():
    a, b = rand(20, 300, seed=28), rand(300, 20, seed=29)
    a[3, 7] = float("inf")
    a[5, 11] = float("nan")
    b[2, 4] = float("-inf")
    close(foo(a) @ foo(b), a @ b, equal_nan=True)


def test_thread_count_independence():
    a, b = rand(300, 1100, seed=30), rand(1100, 530, seed=31)
    fa, fb = foo(a), foo(b)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (fa @ fb).cpu()
        torch.set_num_threads(2)
        two = (fa @ fb).cpu()
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    torch.testing.assert_close(one, a @ b)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(96, 200),
        torch.nn.GELU(),
        torch.nn.LayerNorm(200),
        torch.nn.Linear(200, 130),
        torch.nn.ReLU(),
        torch.nn.Linear(130, 10),
    )


def _autocast_step(device):
    model = _mlp().to(device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 96, generator=g).to(device)
    y = torch.randint(0, 10, (64,), generator=g).to(device)
    with torch.autocast(device, torch.bfloat16):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    return out, loss, [p.grad for p in model.parameters()]


def test_autocast_training_step_matches_cpu():
    out_c, loss_c, grads_c = _autocast_step("cpu")
    out_f, loss_f, grads_f = _autocast_step("foo")
    assert out_f.dtype == out_c.dtype == BF16
    assert loss_f.dtype == loss_c.dtype == torch.float32
    close(out_f, out_c)
    close(loss_f, loss_c, rtol=1.6e-2, atol=1e-5)
    for gf, gc in zip(grads_f, grads_c):
        assert gf.dtype == gc.dtype == torch.float32
        # bfloat16 tolerances, scaled by each gradient's own magnitude.
        close(gf, gc, rtol=1.6e-2, atol=1.6e-2 * gc.abs().max().item())


def test_autocast_transformer_block_gradients():
    # CPU's own autocast step is no exact reference here (its linear1 weight
    # gradient is 10x further from the float32 step than foo's): both
    # devices' autocast steps are held to the float32 step, foo's no further
    # from it than CPU's plus bfloat16 tolerance.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
    x = rand(2, 16, 64, seed=32, dtype=torch.float32)
    results = {}
    for device, autocast in (("cpu", False), ("cpu", True), ("foo", True)):
        m = layer.to(device)
        m.zero_grad()
        with torch.autocast(device, torch.bfloat16, enabled=autocast):
            y = m(x.to(device))
        y.float().square().mean().backward()
        results[device, autocast] = [y.cpu(), *(p.grad.cpu().clone() for p in m.parameters())]
    ref, cpu, got = results["cpu", False], results["cpu", True], results["foo", True]
    assert got[0].dtype == cpu[0].dtype
    for r, c, f in zip(ref, cpu, got):
        tol = 1.6e-2 * r.abs().max().item()
        torch.testing.assert_close(f, r, rtol=1.6e-2, atol=tol)
        assert (f - r).abs().max() <= 2 * (c - r).abs().max() + tol / 4
