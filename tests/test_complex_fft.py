"""Complex dtypes on foo (storage, copies and casts, views, the conjugate
bit, fills, serialization) and torch.fft computed natively in Rust, each
compared with torch CPU, with the CPU fallback switched off where foo claims
a native kernel."""

import io
import warnings

import pytest
import torch

import foo_rs

CDTYPES = [torch.complex64, torch.complex128]
REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def crandn(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


@pytest.fixture
def native():
    """No CPU fallback, and nothing fell back."""
    foo_rs.reset_fallback_stats()
    with foo_rs.fallback_disabled():
        yield
    assert foo_rs.fallback_stats() == {}


# ---- M1: holding complex tensors -------------------------------------------


def test_complex_is_supported():
    assert torch.complex64 in foo_rs.SUPPORTED_DTYPES
    assert torch.complex128 in foo_rs.SUPPORTED_DTYPES
    assert torch.complex64 not in foo_rs.UNSUPPORTED_DTYPES
    assert torch.complex32 in foo_rs.UNSUPPORTED_DTYPES


@pytest.mark.parametrize("dtype", CDTYPES)
def test_empty_and_round_trip(native, dtype):
    e = torch.empty(2, 3, dtype=dtype, device="foo")
    assert e.dtype == dtype and e.device.type == "foo" and e.shape == (2, 3)
    s = torch.empty_strided((2, 3), (1, 2), dtype=dtype, device="foo")
    assert s.stride() == (1, 2)
    x = crandn(4, 5, dtype=dtype)
    f = x.to("foo")
    torch.testing.assert_close(f.cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(f.clone().cpu(), x, rtol=0, atol=0)
    # Strided both ways, and foo -> foo.
    torch.testing.assert_close(f.t().contiguous().cpu(), x.t().contiguous(), rtol=0, atol=0)
    d = torch.empty(5, 4, dtype=dtype, device="foo")
    d.copy_(x.t())
    torch.testing.assert_close(d.cpu(), x.t(), rtol=0, atol=0)
    zero = torch.empty(0, 3, dtype=dtype, device="foo")
    assert zero.cpu().shape == (0, 3)


def test_complex_casts(native):
    x = crandn(3, 4)
    f = x.to("foo")
    torch.testing.assert_close(f.to(torch.complex128).cpu(), x.to(torch.complex128), rtol=0, atol=0)
    r = torch.randn(3, 4)
    torch.testing.assert_close(r.to("foo").to(torch.complex64).cpu(), r.to(torch.complex64), rtol=0, atol=0)
    i = torch.arange(6).to("foo")
    torch.testing.assert_close(i.to(torch.complex128).cpu(), torch.arange(6).to(torch.complex128))
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        real = f.to(torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(real.cpu(), x.to(torch.float64), rtol=0, atol=0)
        # Across the device boundary in both directions too.
        out = torch.empty(3, 4)
        out.copy_(f)
        torch.testing.assert_close(out, x.real, rtol=0, atol=0)


def test_view_as_real_complex_and_parts(native):
    x = crandn(3, 4, dtype=torch.complex128)
    f = x.to("foo")
    vr = torch.view_as_real(f)
    assert vr.shape == (3, 4, 2) and vr.stride() == torch.view_as_real(x).stride()
    assert vr.untyped_storage().data_ptr() == f.untyped_storage().data_ptr()
    torch.testing.assert_close(vr.cpu(), torch.view_as_real(x), rtol=0, atol=0)
    torch.testing.assert_close(torch.view_as_complex(vr).cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(f.real.cpu(), x.real, rtol=0, atol=0)
    torch.testing.assert_close(f.imag.cpu(), x.imag, rtol=0, atol=0)
    # Writes through .real / .imag views land in the complex tensor.
    f.imag.fill_(0.5)
    assert torch.all(f.cpu().imag == 0.5)
    with pytest.raises(RuntimeError):
        torch.view_as_real(f.conj())
    with pytest.raises(RuntimeError):
        torch.view_as_complex(torch.randn(3, 3, device="foo"))


def test_conj_bit(native):
    x = crandn(4, 3)
    f = x.to("foo")
    c = f.conj()
    assert c.is_conj()
    torch.testing.assert_close(c.resolve_conj().cpu(), x.conj().resolve_conj(), rtol=0, atol=0)
    assert not c.resolve_conj().is_conj()
    torch.testing.assert_close(c.cpu(), x.conj(), rtol=0, atol=0)
    torch.testing.assert_close(torch._conj_physical(f).cpu(), x.conj_physical(), rtol=0, atol=0)
    torch.testing.assert_close(torch.conj_physical(f).cpu(), x.conj_physical(), rtol=0, atol=0)
    g = f.clone()
    g.conj_physical_()
    torch.testing.assert_close(g.cpu(), x.conj_physical(), rtol=0, atol=0)
    # The imaginary part of a conjugate carries the negative bit.
    torch.testing.assert_close(c.imag.cpu(), x.conj().imag, rtol=0, atol=0)
    torch.testing.assert_close(c.imag.clone().cpu(), -x.imag, rtol=0, atol=0)
    assert c[1, 2].item() == x.conj()[1, 2].item()
    out = torch.empty(4, 3, dtype=torch.complex64, device="foo")
    torch.conj_physical(f, out=out)
    torch.testing.assert_close(out.cpu(), x.conj_physical(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_fill_zero_item(native, dtype):
    t = torch.empty(2, 3, dtype=dtype, device="foo")
    t.fill_(1.5 - 2j)
    torch.testing.assert_close(t.cpu(), torch.full((2, 3), 1.5 - 2j, dtype=dtype), rtol=0, atol=0)
    t.fill_(3)
    torch.testing.assert_close(t.cpu(), torch.full((2, 3), 3 + 0j, dtype=dtype), rtol=0, atol=0)
    t[:, 1].zero_()
    want = torch.full((2, 3), 3 + 0j, dtype=dtype)
    want[:, 1] = 0
    torch.testing.assert_close(t.cpu(), want, rtol=0, atol=0)
    assert t[0, 0].item() == 3 + 0j and isinstance(t[0, 0].item(), complex)
    with pytest.raises(RuntimeError):
        torch.empty(3, device="foo").fill_(1 + 1j)


def test_save_load_and_print():
    x = crandn(3, 2, dtype=torch.complex128)
    f = x.to("foo")
    buf = io.BytesIO()
    torch.save(f, buf)
    buf.seek(0)
    y = torch.load(buf)
    assert y.device.type == "foo" and y.dtype == torch.complex128
    torch.testing.assert_close(y.cpu(), x, rtol=0, atol=0)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, map_location="cpu"), x, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        text = repr(f)
    assert "device='foo:0'" in text and "complex128" in text and "j" in text


def test_real_kernels_route_complex_to_the_fallback():
    # A real-only foo kernel never reads complex memory: the call goes to the
    # CPU fallback (and raises NotImplementedError with it off).
    x = crandn(5)
    f = x.to("foo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        torch.testing.assert_close((f * f).cpu(), x * x)
    # (exp and most pointwise ops have complex kernels now; QR has none.)
    with foo_rs.fallback_disabled(), pytest.raises(NotImplementedError, match="foo"):
        torch.linalg.qr(f.reshape(5, 1))


# ---- M2: FFT -------------------------------------------------------------

FFT_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _same(got, want, real_dtype):
    assert got.device.type == "foo"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu(), want, **FFT_TOL[real_dtype])


NORMS = [None, "forward", "backward", "ortho"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_1d_family(native, dtype, norm):
    g = torch.Generator().manual_seed(1)
    r = torch.randn(3, 10, dtype=dtype, generator=g)
    c = torch.randn(3, 7, dtype=dtype, generator=g) + 1j * torch.randn(3, 7, dtype=dtype, generator=g)
    for fn, x in [
        (torch.fft.fft, c),
        (torch.fft.ifft, c),
        (torch.fft.fft, r),
        (torch.fft.rfft, r),
        (torch.fft.irfft, c),
        (torch.fft.hfft, c),
        (torch.fft.ihfft, r),
    ]:
        _same(fn(x.to("foo"), norm=norm), fn(x, norm=norm), dtype)
        _same(fn(x.to("foo"), n=12, dim=0, norm=norm), fn(x, n=12, dim=0, norm=norm), dtype)
        _same(fn(x.to("foo"), n=5, norm=norm), fn(x, n=5, norm=norm), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_nd_family(native, dtype, norm):
    g = torch.Generator().manual_seed(2)
    r = torch.randn(4, 6, 5, dtype=dtype, generator=g)
    c = torch.complex(r, torch.randn(4, 6, 5, dtype=dtype, generator=g))
    for fn, x, kw in [
        (torch.fft.fft2, c, {}),
        (torch.fft.ifft2, c, {}),
        (torch.fft.fftn, c, {}),
        (torch.fft.fftn, c, {"dim": (0, 2)}),
        (torch.fft.fftn, c, {"dim": (2, 0)}),
        (torch.fft.ifftn, c, {"s": (3, 8), "dim": (1, 2)}),
        (torch.fft.rfft2, r, {}),
        (torch.fft.rfftn, r, {}),
        (torch.fft.rfftn, r, {"dim": (0, 1)}),
        (torch.fft.irfftn, c, {}),
        (torch.fft.irfftn, c, {"s": (4, 9), "dim": (0, 2)}),
        (torch.fft.irfft2, c, {}),
        (torch.fft.hfftn, c, {}),
        (torch.fft.ihfftn, r, {}),
    ]:
        _same(fn(x.to("foo"), norm=norm, **kw), fn(x, norm=norm, **kw), dtype)


def test_fft_noncontiguous_and_conj_inputs(native):
    x = crandn(6, 8, dtype=torch.complex128, seed=3)
    f = x.to("foo")
    _same(torch.fft.fft(f.t(), dim=0), torch.fft.fft(x.t(), dim=0), torch.float64)
    _same(torch.fft.fft(f[:, ::2]), torch.fft.fft(x[:, ::2]), torch.float64)
    _same(torch.fft.fft(f.conj()), torch.fft.fft(x.conj()), torch.float64)
    r = torch.randn(8, 6, dtype=torch.float64)
    _same(torch.fft.rfft(r.to("foo").t()), torch.fft.rfft(r.t()), torch.float64)
    _same(torch.fft.irfft(f.t()), torch.fft.irfft(x.t()), torch.float64)


@pytest.mark.parametrize("op", ["c2c", "r2c", "c2r"])
def test_fft_primitives_two_sided_and_out(native, op):
    r = torch.randn(3, 4, 6, dtype=torch.float64)
    c = torch.complex(r, torch.randn(3, 4, 6, dtype=torch.float64))
    for dims in ([0], [1], [2], [0, 2], [0, 1, 2]):
        for norm in (0, 1, 2):
            if op == "c2c":
                args = [(c, dims, norm, True), (c, dims, norm, False)]
                fn, outf = torch.ops.aten._fft_c2c, torch.ops.aten._fft_c2c.out
            elif op == "r2c":
                args = [(r, dims, norm, True), (r, dims, norm, False)]
                fn, outf = torch.ops.aten._fft_r2c, torch.ops.aten._fft_r2c.out
            else:
                # Signals whose half-spectrum is the input's last transformed dim.
                h = c.shape[dims[-1]]
                args = [(c, dims, norm, 2 * (h - 1)), (c, dims, norm, 2 * h - 1)]
                fn, outf = torch.ops.aten._fft_c2r, torch.ops.aten._fft_c2r.out
            for x, *rest in args:
                want = fn(x, *rest)
                _same(fn(x.to("foo"), *rest), want, torch.float64)
                out = torch.empty(0, dtype=want.dtype, device="foo")
                got = outf(x.to("foo"), *rest, out=out)
                assert got is out
                torch.testing.assert_close(out.cpu(), want, **FFT_TOL[torch.float64])


def test_fft_zero_batch_and_errors(native):
    # An empty batch transforms to an empty result of the spectrum's shape.
    # (Compared with that result, not CPU's: torch 2.13's MKL path raises
    # "Inconsistent configuration parameters" on it; 2.14 and later return it.)
    x = torch.empty(0, 8, dtype=torch.complex64)
    _same(torch.fft.fft(x.to("foo")), torch.empty(0, 8, dtype=torch.complex64), torch.float32)
    _same(torch.fft.rfft(torch.empty(0, 8).to("foo")), torch.empty(0, 5, dtype=torch.complex64), torch.float32)
    # What CPU raises, foo raises.
    for bad in [lambda t: torch.fft.fft(t, n=0), lambda t: torch.fft.rfft(t.to(torch.complex64))]:
        with pytest.raises(Exception) as cpu_err:
            bad(torch.randn(4))
        with pytest.raises(cpu_err.type):
            bad(torch.randn(4).to("foo"))
    for dt in (torch.float16, torch.bfloat16):
        try:
            torch.fft.fft(torch.randn(8, dtype=dt))
            cpu_exc = None
        except Exception as e:  # noqa: BLE001
            cpu_exc = type(e)
        if cpu_exc is None:
            torch.fft.fft(torch.randn(8, dtype=dt).to("foo"))
        else:
            with pytest.raises(cpu_exc):
                torch.fft.fft(torch.randn(8, dtype=dt).to("foo"))


def test_fft_large_parallel_matches_cpu(native):
    x = crandn(64, 1000, dtype=torch.complex64, seed=5)
    _same(torch.fft.fft(x.to("foo")), torch.fft.fft(x), torch.float32)
    _same(torch.fft.fft(x.to("foo"), dim=0), torch.fft.fft(x, dim=0), torch.float32)


def test_fft_c2c_gradient_runs_natively(native):
    x = crandn(4, 6, dtype=torch.complex128, seed=6)
    xf = x.to("foo").requires_grad_()
    xc = x.clone().requires_grad_()
    g = crandn(4, 6, dtype=torch.complex128, seed=7)
    torch.fft.fftn(xf, norm="ortho").backward(g.to("foo"))
    torch.fft.fftn(xc, norm="ortho").backward(g)
    torch.testing.assert_close(xf.grad.cpu(), xc.grad)


def test_fft_r2c_c2r_gradients_match_cpu():
    r = torch.randn(4, 10, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        for fn in (torch.fft.rfft, torch.fft.irfft):
            x = r if fn is torch.fft.rfft else torch.fft.rfft(r)
            xf = x.to("foo").requires_grad_()
            xc = x.clone().requires_grad_()
            yf, yc = fn(xf), fn(xc)
            gr = torch.randn(yc.shape, dtype=yc.dtype)
            yf.backward(gr.to("foo"))
            yc.backward(gr)
            torch.testing.assert_close(xf.grad.cpu(), xc.grad)


# ---- M3: complex arithmetic ------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_add_sub_mul_neg(native, dtype):
    x, y = crandn(3, 4, dtype=dtype, seed=8), crandn(4, dtype=dtype, seed=9)
    r = torch.randn(3, 4, dtype=REAL_OF[dtype])
    f, g, rf = x.to("foo"), y.to("foo"), r.to("foo")
    cases = [
        (lambda a, b, c: a + b, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a - b, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a * b, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a * c, (f, g, rf), (x, y, r)),
        (lambda a, b, c: c * a, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a * 2.5, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a * (1 - 2j), (f, g, rf), (x, y, r)),
        (lambda a, b, c: c + 1j, (f, g, rf), (x, y, r)),
        (lambda a, b, c: torch.add(a, b, alpha=2), (f, g, rf), (x, y, r)),
        (lambda a, b, c: torch.sub(a, c, alpha=0.5), (f, g, rf), (x, y, r)),
        (lambda a, b, c: -a, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a.conj() * b, (f, g, rf), (x, y, r)),
        (lambda a, b, c: a[:, ::2] * b[::2], (f, g, rf), (x, y, r)),
    ]
    for fn, foo_args, cpu_args in cases:
        got, want = fn(*foo_args), fn(*cpu_args)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    h = f.clone()
    h.mul_(g)
    h.add_(1j)
    h.neg_()
    torch.testing.assert_close(h.cpu(), -(x * y + 1j))
    out = torch.empty(0, dtype=dtype, device="foo")
    assert torch.mul(f, g, out=out) is out
    torch.testing.assert_close(out.cpu(), x * y)
    with pytest.raises(RuntimeError):
        rf.add_(f)  # CPU: complex can't be cast to a real output
    with pytest.raises(RuntimeError):
        f[:1].mul_(g.expand(3, 4).clone())


def test_irfft_gradient_runs_natively(native):
    c = torch.fft.rfft(torch.randn(4, 10, dtype=torch.float64))
    xf = c.to("foo").requires_grad_()
    xc = c.clone().requires_grad_()
    g = torch.randn(4, 10, dtype=torch.float64)
    torch.fft.irfft(xf).backward(g.to("foo"))
    torch.fft.irfft(xc).backward(g)
    torch.testing.assert_close(xf.grad.cpu(), xc.grad)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_sum(native, dtype):
    x = crandn(3, 4, 5, dtype=dtype, seed=10)
    f = x.to("foo")
    for kw in ({}, {"dim": 1}, {"dim": (0, 2)}, {"dim": -1, "keepdim": True}):
        got, want = torch.sum(f, **kw), torch.sum(x, **kw)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(f.conj().sum(1).cpu(), x.conj().sum(1))
    torch.testing.assert_close(f.transpose(0, 2).sum(0).cpu(), x.transpose(0, 2).sum(0))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_sum_zero_dim_and_bad_dim(native, dtype):
    # A 0-d tensor reduced over dim 0 (or -1) is itself: its real view's
    # trailing pair must not be summed together.
    x = crandn(1, dtype=dtype, seed=11)[0]
    f = x.to("foo")
    for kw in ({"dim": 0}, {"dim": -1, "keepdim": True}, {"dim": []}):
        got, want = torch.sum(f, **kw), torch.sum(x, **kw)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    for bad in (1, -2):
        with pytest.raises(IndexError):
            torch.sum(x, dim=bad)
        with pytest.raises(IndexError, match="foo"):
            torch.sum(f, dim=bad)
