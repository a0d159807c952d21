"""Matrix decompositions on foo (python/foo_rs/_ops/decomp.py over faer in
rust/src/kernels/decomp.rs) against torch CPU (LAPACK): Cholesky, LU factor /
solve / unpack, solve, inverse, det / slogdet, triangular solves, Cholesky
solve and inverse. Values, dtypes, shapes, strides (LAPACK's column-major
outputs), pivots and info codes, errors for singular and non-PD inputs, empty,
batched, broadcast and strided inputs, out=, gradients. Every test runs with
the CPU fallback off (an op without a foo kernel raises)."""

import warnings

import pytest
import torch

import foo_rs

pytestmark = pytest.mark.usefixtures("no_fallback")

FOO = torch.device("foo")
DTYPES = [torch.float32, torch.float64]


def rand(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def spd(*shape, dtype=torch.float64, seed=0):
    a = rand(*shape, dtype=torch.float64, seed=seed)
    n = shape[-1]
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def same(foo, cpu, exact=False, strides=True):
    """foo's result equals CPU's: values (torch.testing's tolerances), dtype,
    shape and, for LAPACK's outputs, strides."""
    if isinstance(cpu, (tuple, list)):
        assert len(foo) == len(cpu)
        for f, c in zip(foo, cpu):
            same(f, c, exact, strides)
        return
    assert foo.device.type == "foo", foo.device
    assert (foo.dtype, foo.shape) == (cpu.dtype, cpu.shape)
    if strides and cpu.numel() > 1:
        assert foo.stride() == cpu.stride(), (foo.stride(), cpu.stride())
    if exact or not cpu.dtype.is_floating_point:
        torch.testing.assert_close(foo.cpu(), cpu, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(foo.cpu(), cpu, equal_nan=True)


SHAPES = [(4, 4), (3, 5, 5), (2, 3, 6, 6), (0, 3, 3), (0, 0), (1, 1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_cpu(dtype, shape, upper):
    a = spd(*shape, dtype=dtype)
    same(torch.linalg.cholesky_ex(a.to(FOO), upper=upper), torch.linalg.cholesky_ex(a, upper=upper))
    same(torch.linalg.cholesky(a.to(FOO), upper=upper), torch.linalg.cholesky(a, upper=upper))


def test_cholesky_reads_one_triangle_and_strided_input():
    a = spd(3, 5, 5)
    junk = a.clone()
    junk.triu_(1).add_(100.0)  # garbage in the upper triangle, ignored for upper=False
    a_junk = a.tril() + junk
    same(torch.linalg.cholesky(a_junk.to(FOO)), torch.linalg.cholesky(a_junk))
    big = spd(3, 10, 10)
    view = big[:, ::2, ::2]  # a strided view, not column- or row-major
    same(torch.linalg.cholesky(big.to(FOO)[:, ::2, ::2]), torch.linalg.cholesky(view))
    same(torch.linalg.cholesky(big.mT.to(FOO)), torch.linalg.cholesky(big.mT))


def test_cholesky_info_and_errors_match_cpu():
    a = spd(3, 4, 4)
    a[1, 2, 2] = -50.0  # batch 1 fails at the third leading minor
    l_cpu, info_cpu = torch.linalg.cholesky_ex(a)
    l_foo, info_foo = torch.linalg.cholesky_ex(a.to(FOO))
    same(info_foo, info_cpu)
    assert info_foo.tolist() == [0, 3, 0]
    same(l_foo[0], l_cpu[0])
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\): The factorization could not be"):
        torch.linalg.cholesky(a.to(FOO))
    with pytest.raises(torch.linalg.LinAlgError, match="order 3 is not positive-definite"):
        torch.linalg.cholesky(a[1].to(FOO))
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky_ex(a.to(FOO), check_errors=True)
    nan = spd(3, 3)
    nan[0, 0] = float("nan")
    assert torch.linalg.cholesky_ex(nan.to(FOO)).info.item() == torch.linalg.cholesky_ex(nan).info.item()
    for bad in (rand(3, 4), rand(3, 3).int()):
        with pytest.raises(RuntimeError) as cpu_err:
            torch.linalg.cholesky(bad)
        with pytest.raises(type(cpu_err.value)):
            torch.linalg.cholesky(bad.to(FOO))
    with pytest.raises(NotImplementedError, match="foo"):
        torch.linalg.cholesky(spd(3, 3).half().to(FOO))


def test_cholesky_out_resizes_and_keeps_views():
    a = spd(2, 4, 4)
    L = torch.empty(0, device=FOO)
    info = torch.empty(0, dtype=torch.int32, device=FOO)
    r = torch.linalg.cholesky_ex(a.float().to(FOO), out=(L, info))
    assert r.L is L and r.info is info
    same(L, torch.linalg.cholesky(a.float()), strides=False)
    L2 = torch.empty(2, 4, 4, device=FOO)  # row-major: computed elsewhere, copied in
    torch.linalg.cholesky(a.float().to(FOO), out=L2)
    same(L2, torch.linalg.cholesky(a.float()), strides=False)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        torch.linalg.cholesky(a.float().to(FOO), out=torch.empty(2, 4, 4, dtype=torch.float64, device=FOO))


LU_SHAPES = [(5, 5), (3, 4, 4), (6, 4), (4, 6), (2, 3, 5, 3), (0, 4, 4), (3, 0), (0, 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", LU_SHAPES, ids=str)
def test_lu_factor_and_unpack_match_cpu(dtype, shape):
    a = rand(*shape, dtype=dtype, seed=1)
    # LU, pivots (1-based int32) and info exactly as LAPACK's getrf (pivots bit for bit).
    lu_f, piv_f, info_f = torch.linalg.lu_factor_ex(a.to(FOO))
    lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(a)
    same((lu_f, info_f), (lu_c, info_c))
    same(piv_f, piv_c, exact=True)
    same(torch.linalg.lu(a.to(FOO)), torch.linalg.lu(a))
    same(torch.lu_unpack(lu_f, piv_f), torch.lu_unpack(lu_c, piv_c))


def test_lu_singular_matrices_follow_lapack():
    a = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)  # rank 1
    for m in (a, b, torch.zeros(3, 3, dtype=torch.float64)):
        lu_f, piv_f, info_f = torch.linalg.lu_factor_ex(m.to(FOO))
        lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(m)
        same((lu_f, piv_f, info_f), (lu_c, piv_c, info_c))
        assert info_f.item() > 0
    with pytest.raises(RuntimeError, match=r"U\[1,1\] is zero") as cpu_err:
        torch.linalg.lu_factor(a)
    with pytest.raises(type(cpu_err.value), match=r"U\[1,1\] is zero"):
        torch.linalg.lu_factor(a.to(FOO))
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on foo"):
        torch.linalg.lu_factor(a.to(FOO), pivot=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_matches_cpu_with_broadcasting(dtype, left, adjoint):
    a = rand(3, 1, 5, 5, dtype=dtype, seed=2)
    b = rand(4, 5, 2, dtype=dtype, seed=3) if left else rand(4, 2, 5, dtype=dtype, seed=3)
    lu, piv = torch.linalg.lu_factor(a)
    got = torch.linalg.lu_solve(lu.to(FOO), piv.to(FOO), b.to(FOO), left=left, adjoint=adjoint)
    same(got, torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint))
    bad = piv.clone()
    bad[0, 0, 0] = 99
    with pytest.raises(RuntimeError, match="out of range"):
        torch.linalg.lu_solve(lu.to(FOO), bad.to(FOO), b.to(FOO), left=left, adjoint=adjoint)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_solve_and_inverse_match_cpu(dtype):
    a = rand(3, 6, 6, dtype=dtype, seed=4)
    for b in (rand(3, 6, 2, dtype=dtype), rand(6, dtype=dtype), rand(3, 6, dtype=dtype), rand(2, 1, 6, 4, dtype=dtype)):
        same(torch.linalg.solve(a.to(FOO), b.to(FOO)), torch.linalg.solve(a, b))
        same(torch.linalg.solve_ex(a.mT.to(FOO), b.to(FOO)), torch.linalg.solve_ex(a.mT, b))
    br = rand(3, 2, 6, dtype=dtype)
    same(torch.linalg.solve(a.to(FOO), br.to(FOO), left=False), torch.linalg.solve(a, br, left=False))
    # The LU factors of the solve are CPU's too (ATen's backward uses them).
    same(torch.ops.aten._linalg_solve_ex(a.to(FOO), br.mT.to(FOO)), torch.ops.aten._linalg_solve_ex(a, br.mT))
    same(torch.linalg.inv_ex(a.to(FOO)), torch.linalg.inv_ex(a))
    same(torch.linalg.inv(a[:, ::2, ::2].to(FOO)), torch.linalg.inv(a[:, ::2, ::2]))
    same(torch.linalg.inv(rand(0, 3, 3, dtype=dtype).to(FOO)), torch.linalg.inv(rand(0, 3, 3, dtype=dtype)))
    sing = torch.ones(2, 3, 3, dtype=dtype)
    same(torch.linalg.inv_ex(sing.to(FOO)).info, torch.linalg.inv_ex(sing).info)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(sing.to(FOO))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.solve(sing[0].to(FOO), br[0, 0, :3].to(FOO))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_det_and_slogdet_match_cpu(dtype):
    a = rand(4, 5, 5, dtype=dtype, seed=5)
    a[1] = 0.0  # singular: det 0, sign 0, logabsdet -inf
    views = (lambda t: t, lambda t: t.mT, lambda t: t[:, ::2, ::2], lambda t: t[2])
    for view in views:
        # The same layout on both devices: CPU factors a contiguous A as A^T.
        x, xf = view(a), view(a.to(FOO))
        same(torch.linalg.det(xf), torch.linalg.det(x))
        same(torch.linalg.slogdet(xf), torch.linalg.slogdet(x))
        same(torch.ops.aten._linalg_det(xf), torch.ops.aten._linalg_det(x))
        same(torch.ops.aten._linalg_slogdet(xf), torch.ops.aten._linalg_slogdet(x))
    for x in (rand(0, 2, 2, dtype=dtype), rand(0, 0, dtype=dtype)):
        same(torch.linalg.slogdet(x.to(FOO)), torch.linalg.slogdet(x))
    same(torch.logdet(spd(3, 3, dtype=dtype).to(FOO)), torch.logdet(spd(3, 3, dtype=dtype)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_matches_cpu(dtype, upper, left, unit):
    a = rand(2, 1, 5, 5, dtype=dtype, seed=6) + 5 * torch.eye(5, dtype=dtype)  # both triangles filled
    b = rand(3, 5, 4, dtype=dtype) if left else rand(3, 4, 5, dtype=dtype)
    kw = {"upper": upper, "left": left, "unitriangular": unit}
    same(torch.linalg.solve_triangular(a.to(FOO), b.to(FOO), **kw), torch.linalg.solve_triangular(a, b, **kw))
    out = torch.empty(0, dtype=dtype, device=FOO)
    torch.linalg.solve_triangular(a.to(FOO), b.to(FOO), **kw, out=out)
    same(out, torch.linalg.solve_triangular(a, b, **kw), strides=False)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("upper", [False, True])
def test_triangular_solve_matches_cpu(transpose, upper):
    a = rand(3, 4, 4, seed=7) + 4 * torch.eye(4, dtype=torch.float64)
    b = rand(3, 4, 2)
    with warnings.catch_warnings():  # "torch.triangular_solve is deprecated", on CPU too
        warnings.simplefilter("ignore", UserWarning)
        same(
            torch.triangular_solve(b.to(FOO), a.to(FOO), upper, transpose),
            torch.triangular_solve(b, a, upper, transpose),
        )


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse_match_cpu(upper):
    a = spd(2, 5, 5, seed=8)
    c = torch.linalg.cholesky(a, upper=upper)
    b = rand(2, 5, 3)
    same(torch.cholesky_solve(b.to(FOO), c.to(FOO), upper), torch.cholesky_solve(b, c, upper))
    same(torch.cholesky_inverse(c[0].to(FOO), upper), torch.cholesky_inverse(c[0], upper))
    out = torch.empty(5, 5, dtype=torch.float64, device=FOO)
    torch.cholesky_inverse(c[1].to(FOO), upper, out=out)
    same(out, torch.cholesky_inverse(c[1], upper), strides=False)


def test_large_batch_and_thread_count_do_not_change_results():
    a = rand(300, 8, 8, seed=9)
    b = rand(300, 8, 3, seed=10)
    x1 = torch.linalg.solve(a.to(FOO), b.to(FOO)).cpu()
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        x2 = torch.linalg.solve(a.to(FOO), b.to(FOO)).cpu()
    finally:
        torch.set_num_threads(n)
    assert torch.equal(x1, x2)
    torch.testing.assert_close(x1, torch.linalg.solve(a, b))


def test_gradients_through_atens_formulas():
    a = rand(2, 4, 4, seed=11).to(FOO).requires_grad_()
    s = spd(4, 4, seed=12).to(FOO).requires_grad_()
    b = rand(2, 4, 2, seed=13).to(FOO).requires_grad_()
    eye4 = 4 * torch.eye(4, dtype=torch.float64).to(FOO)
    checks = [
        (lambda a, b: torch.linalg.solve(a, b), (a, b)),
        (lambda a: torch.linalg.inv(a), (a,)),
        (lambda a: torch.linalg.det(a), (a,)),
        (lambda a: torch.linalg.slogdet(a).logabsdet, (a,)),
        (lambda s: torch.linalg.cholesky(s + s.mT), (s,)),
        (lambda a: torch.linalg.lu_factor(a).LU, (a,)),
        (lambda a, b: torch.linalg.solve_triangular(a.triu() + eye4, b, upper=True), (a, b)),
    ]
    for fn, args in checks:
        assert torch.autograd.gradcheck(fn, args)


def test_no_fallback_and_memory_returns_to_baseline():
    torch.foo.synchronize()
    base = torch.foo.memory_allocated()
    before = dict(foo_rs.fallback_stats())
    a = spd(3, 6, 6).to(FOO)
    b = rand(3, 6, 2).to(FOO)
    torch.linalg.cholesky(a)
    torch.linalg.solve(a, b)
    torch.linalg.inv(a)
    torch.linalg.slogdet(a)
    torch.linalg.lu(a)
    try:
        torch.linalg.cholesky(-a)
    except torch.linalg.LinAlgError:
        pass
    del a, b
    assert dict(foo_rs.fallback_stats()) == before
    assert torch.foo.memory_allocated() == base


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (7, 4), (4, 7), (2, 3, 6, 3), (0, 3), (3, 0), (0, 4, 4)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_cpu_signs_included(dtype, shape, mode):
    # Householder reflections with LAPACK's sign convention: Q and R equal
    # CPU's themselves, not only up to the signs of R's diagonal.
    a = rand(*shape, dtype=dtype, seed=14)
    same(torch.linalg.qr(a.to(FOO), mode=mode), torch.linalg.qr(a, mode=mode))
    same(torch.linalg.qr(a.mT.to(FOO), mode=mode), torch.linalg.qr(a.mT, mode=mode))


def test_qr_of_rank_deficient_input_and_gradient():
    """A rank-1 input: R, and Q's first column, are determined and equal CPU's; Q's other
    columns are any orthonormal completion (LAPACK's Householder reflectors leave them as the
    first reflector's; MKL on an Intel Sapphire Rapids core returned another), so they are
    checked for what makes a QR: Q orthonormal and Q @ R the input."""
    a = torch.ones(4, 3, dtype=torch.float64)
    a[:, 2] = 0.0
    (q, r), (cq, cr) = torch.linalg.qr(a.to(FOO)), torch.linalg.qr(a)
    same(r, cr)
    same(q[:, :1], cq[:, :1])
    assert q.device.type == "foo" and (q.dtype, q.shape, q.stride()) == (cq.dtype, cq.shape, cq.stride())
    torch.testing.assert_close((q.mT @ q).cpu(), torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close((q @ r).cpu(), a)
    x = rand(5, 3, seed=15).to(FOO).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: torch.linalg.qr(x), (x,))


def fix_signs(v, pair=None):
    """Eigen/singular vectors are unique up to sign (per column; per U/Vh
    pair): flip each column so its largest-magnitude entry is positive, the
    same way on both devices, before comparing (a gauge-invariant check)."""
    if v.numel() == 0:
        return v if pair is None else (v, pair)
    idx = v.abs().argmax(dim=-2, keepdim=True)
    sign = torch.gather(v, -2, idx).sign()
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    if pair is None:
        return v * sign
    return v * sign, pair * sign.mT


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (1, 1), (0, 3, 3), (0, 0)], ids=str)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_matches_cpu_up_to_signs(dtype, shape, uplo):
    a = rand(*shape, dtype=dtype, seed=16)
    sym = a + a.mT
    # Garbage in the triangle that is not read.
    x = sym.triu() + 100 * a.tril(-1) if uplo == "U" else sym.tril() + 100 * a.triu(1)
    w_f, v_f = torch.linalg.eigh(x.to(FOO), UPLO=uplo)
    w_c, v_c = torch.linalg.eigh(x, UPLO=uplo)
    same(w_f, w_c)
    assert v_f.stride() == v_c.stride() or v_c.numel() <= 1
    torch.testing.assert_close(fix_signs(v_f.cpu()), fix_signs(v_c))
    same(torch.linalg.eigvalsh(x.to(FOO), UPLO=uplo), torch.linalg.eigvalsh(x, UPLO=uplo))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (3, 6), (2, 4, 3), (0, 3), (3, 0), (0, 2, 2)], ids=str)
@pytest.mark.parametrize("full", [False, True])
def test_svd_matches_cpu_up_to_signs(dtype, shape, full):
    a = rand(*shape, dtype=dtype, seed=17)
    u_f, s_f, vh_f = torch.linalg.svd(a.to(FOO), full_matrices=full)
    u_c, s_c, vh_c = torch.linalg.svd(a, full_matrices=full)
    same(s_f, s_c)
    for f, c in ((u_f, u_c), (vh_f, vh_c)):
        assert (f.shape, f.dtype) == (c.shape, c.dtype)
        assert f.stride() == c.stride() or c.numel() <= 1
    k = min(shape[-2:])
    # The first k singular vector pairs are unique up to sign; the rest of a
    # full U / Vh is any orthonormal completion.
    uf, vf = fix_signs(u_f.cpu()[..., :k], vh_f.cpu()[..., :k, :])
    uc, vc = fix_signs(u_c[..., :k], vh_c[..., :k, :])
    torch.testing.assert_close((uf, vf), (uc, vc))
    for q in (u_f.cpu(), vh_f.cpu()):
        eye = torch.eye(q.shape[-1], dtype=dtype).expand(q.shape[:-2] + (q.shape[-1], q.shape[-1]))
        if q.shape[-2] >= q.shape[-1]:
            torch.testing.assert_close(q.mT @ q, eye, atol=1e-5, rtol=0)
    same(torch.linalg.svdvals(a.to(FOO)), torch.linalg.svdvals(a))


def test_eigh_svd_errors_and_gradients():
    nan = torch.full((3, 3), float("nan"), dtype=torch.float64)
    with pytest.raises(torch.linalg.LinAlgError, match="non-finite"):
        torch.linalg.svd(nan.to(FOO))
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.eigh: The algorithm failed to converge"):
        torch.linalg.eigh(nan.to(FOO))
    with pytest.raises(RuntimeError, match="driver"):
        torch.linalg.svd(rand(3, 3).to(FOO), driver="gesvd")
    x = rand(4, 4, seed=18).to(FOO).requires_grad_()
    y = rand(5, 3, seed=19).to(FOO).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: torch.linalg.eigvalsh(x + x.mT), (x,))
    assert torch.autograd.gradcheck(lambda x: torch.linalg.eigh(x + x.mT).eigenvectors ** 2, (x,))
    assert torch.autograd.gradcheck(lambda y: torch.linalg.svdvals(y), (y,))
    assert torch.autograd.gradcheck(lambda y: torch.linalg.svd(y, full_matrices=False).U ** 2, (y,))


def test_empty_right_hand_sides():
    # OpInfo's samples: B with no columns (faer's solvers would panic on it).
    a = rand(3, 3, seed=20) + 3 * torch.eye(3, dtype=torch.float64)
    b = rand(3, 0)
    lu, piv = torch.linalg.lu_factor(a)
    same(torch.linalg.lu_solve(lu.to(FOO), piv.to(FOO), b.to(FOO)), torch.linalg.lu_solve(lu, piv, b))
    same(
        torch.linalg.solve_triangular(a.to(FOO), b.to(FOO), upper=True), torch.linalg.solve_triangular(a, b, upper=True)
    )
    same(torch.linalg.solve(a.to(FOO), b.to(FOO)), torch.linalg.solve(a, b))
    same(torch.cholesky_solve(b.to(FOO), a.to(FOO)), torch.cholesky_solve(b, a))


# -- Householder reflectors: geqrf, householder_product (orgqr), ormqr --------

HH_SHAPES = [(5, 3), (4, 4), (3, 5), (2, 6, 4), (0, 3), (3, 0), (2, 0, 4, 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", HH_SHAPES, ids=str)
def test_geqrf_matches_lapack(dtype, shape):
    # Same reflectors and scalars as LAPACK's geqrf (its sign convention),
    # column-major `a` as CPU returns it; the reflectors rebuild Q.
    a = rand(*shape, dtype=dtype, seed=3)
    fa, ft = torch.geqrf(a.to(FOO))
    ca, ct = torch.geqrf(a)
    same((fa, ft), (ca, ct))
    if shape[-2] >= shape[-1]:
        same(torch.linalg.householder_product(fa, ft), torch.linalg.householder_product(ca, ct))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr_and_householder_product_match_cpu(dtype, left, transpose):
    v = rand(3, 6, 4, dtype=dtype, seed=4)
    c = rand(3, 6, 2, dtype=dtype, seed=6) if left else rand(3, 2, 6, dtype=dtype, seed=6)
    tau = rand(3, 4, dtype=dtype, seed=5)
    same(torch.ormqr(v.to(FOO), tau.to(FOO), c.to(FOO), left, transpose), torch.ormqr(v, tau, c, left, transpose))
    same(torch.linalg.householder_product(v.to(FOO), tau.to(FOO)), torch.linalg.householder_product(v, tau))
    t3 = tau[..., :3]  # fewer reflectors than columns
    same(torch.linalg.householder_product(v.to(FOO), t3.to(FOO)), torch.linalg.householder_product(v, t3))
    # Strided (transposed) operands.
    vt = rand(3, 4, 6, dtype=dtype, seed=7).mT
    same(
        torch.ormqr(vt.to(FOO), tau.to(FOO), c.to(FOO), left, transpose),
        torch.ormqr(vt, tau, c, left, transpose),
    )


def test_householder_out_errors_and_gradient():
    v, tau = rand(5, 3, seed=8), rand(3, seed=9)
    out = torch.empty(0, dtype=torch.float64, device=FOO)
    r = torch.linalg.householder_product(v.to(FOO), tau.to(FOO), out=out)
    assert r is out
    same(out, torch.linalg.householder_product(v, tau))
    a_out, t_out = torch.empty(0, device=FOO, dtype=torch.float64), torch.empty(0, device=FOO, dtype=torch.float64)
    torch.geqrf(v.to(FOO), out=(a_out, t_out))
    same((a_out, t_out), torch.geqrf(v))
    # CPU's errors: too few dims, integer input, too many reflectors.
    for bad in (
        lambda d: torch.geqrf(torch.ones(3, device=d)),
        lambda d: torch.geqrf(torch.ones(2, 2, dtype=torch.long, device=d)),
    ):
        with pytest.raises(RuntimeError):
            bad("cpu")
        with pytest.raises(RuntimeError):
            bad(FOO)
    with pytest.raises(RuntimeError):
        torch.linalg.householder_product(v, rand(4, seed=1))
    with pytest.raises(RuntimeError):
        torch.linalg.householder_product(v.to(FOO), rand(4, seed=1).to(FOO))
    # Gradients through ATen's formula for householder_product.
    vc, tc = v.clone().requires_grad_(), tau.clone().requires_grad_()
    vf, tf = v.to(FOO).requires_grad_(), tau.to(FOO).requires_grad_()
    g = rand(5, 3, seed=10)
    torch.linalg.householder_product(vc, tc).backward(g)
    torch.linalg.householder_product(vf, tf).backward(g.to(FOO))
    same(vf.grad, vc.grad, strides=False)
    same(tf.grad, tc.grad, strides=False)


# -- matrix exponential -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES + [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (1, 1), (0, 3, 3), (0, 0), (2, 8, 8)], ids=str)
@pytest.mark.parametrize("scale", [0.1, 1.0, 6.0])
def test_matrix_exp_matches_cpu(dtype, shape, scale):
    # Small norms (no squaring) and large ones (several squarings). foo
    # computes in float64 for every dtype: against CPU in float64, and for
    # the narrower dtypes at least as close as CPU to the float64 result.
    a = rand(*shape, dtype=dtype, seed=20) * scale
    want = torch.linalg.matrix_exp(a)
    got = torch.linalg.matrix_exp(a.to(FOO))
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    ref = torch.linalg.matrix_exp(a.double())
    if dtype == torch.float64:
        torch.testing.assert_close(got.cpu(), want)
    else:
        eps = torch.finfo(dtype).eps
        foo_err = (got.cpu().double() - ref).abs()
        # (CPU's half-precision matrix_exp overflows to NaN on large norms.)
        cpu_err = (want.double() - ref).abs().nan_to_num(nan=float("inf"))
        assert bool((foo_err <= cpu_err + eps * ref.abs() + 1e-30).all()), (foo_err.max(), cpu_err.max())


def test_matrix_exp_strided_errors_and_gradient():
    a = rand(3, 4, 4, seed=21)
    same(torch.linalg.matrix_exp(a.mT.to(FOO)), torch.linalg.matrix_exp(a.mT))
    same(torch.matrix_exp(a.to(FOO)), torch.matrix_exp(a))
    for bad in (torch.ones(3, 4), torch.ones(4), torch.ones(2, 2, dtype=torch.long)):
        with pytest.raises(Exception) as cpu_err:
            torch.linalg.matrix_exp(bad)
        with pytest.raises(type(cpu_err.value), match=str(cpu_err.value)[:30]):
            torch.linalg.matrix_exp(bad.to(FOO))
    ac, af = a.clone().requires_grad_(), a.to(FOO).requires_grad_()
    g = rand(3, 4, 4, seed=22)
    torch.linalg.matrix_exp(ac).backward(g)
    torch.linalg.matrix_exp(af).backward(g.to(FOO))
    same(af.grad, ac.grad, strides=False)
