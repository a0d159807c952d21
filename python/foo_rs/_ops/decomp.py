"""Matrix decompositions (torch.linalg) on foo: Cholesky, LU, solves, inverse,
determinants, triangular solves. The arithmetic is Rust (faer, in
rust/src/kernels/decomp.rs); this module gives each op ATen's semantics.

Shapes, dtypes, strides and argument errors come from ATen's meta functions:
every kernel runs the op once on meta tensors (:func:`_outputs`), which
checks the arguments as CPU does and gives each output's shape and its
column-major ("batched Fortran") strides, LAPACK's layout. The structured ops
register their ``.out`` overload only; ATen's functional and in-place kernels
call it with outputs allocated from the meta. Each Rust call works in place
on a copy of its input laid out as the output is, so results go straight into
the outputs. Where CPU's result depends on how it calls LAPACK (``_linalg_det``
and ``_linalg_slogdet`` factor a contiguous A as A^T), this follows it: their
LU and pivots reach ATen's backward formulas.
"""

from __future__ import annotations

import torch

from ._registry import _C, check_same_device, desc, impl
from .linalg import c10_name, resize_out

aten = torch.ops.aten


def _meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def _outputs(op, args: tuple, kwargs: dict, outs: tuple) -> list[torch.Tensor]:
    """Runs ``op`` (the functional overload) on meta tensors for its checks and
    output layout, then gives, for each of ``outs`` (the out= tensors), the
    tensor to compute into: the out tensor itself when it has the meta's
    shape and strides, else a fresh foo tensor with them (:func:`_finish`
    copies it back, as ATen's structured kernels do)."""
    metas = op(*(_meta(a) for a in args), **{k: _meta(v) for k, v in kwargs.items()})
    if isinstance(metas, torch.Tensor):
        metas = (metas,)
    targets = []
    for out, m in zip(outs, metas):
        if out.dtype != m.dtype:
            raise RuntimeError(
                f"Expected out tensor to have dtype {c10_name(m.dtype)}, but got {c10_name(out.dtype)} instead"
            )
        if out.shape == m.shape and (out.stride() == m.stride() or m.numel() <= 1):
            targets.append(out)
        else:
            targets.append(torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=out.device))
    return targets


def _finish(outs: tuple, targets: list) -> None:
    for out, t in zip(outs, targets):
        if out is not t:
            if out.shape != t.shape:
                # A resized out takes the meta's (column-major) strides, as
                # ATen's structured kernels restride a resized output.
                resize_out(out, t.shape)
                out.as_strided_(t.shape, t.stride())
            out.copy_(t)


def _f_contig(shape, dtype, device) -> torch.Tensor:
    """A batched column-major tensor (LAPACK's layout)."""
    shape = tuple(shape)
    if len(shape) < 2:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty(shape[:-2] + (shape[-1], shape[-2]), dtype=dtype, device=device).mT


def _check_errors(info: torch.Tensor, api: str, is_matrix: bool) -> None:
    aten._linalg_check_errors(info, api, is_matrix=is_matrix)


def _no_pivot(pivot: bool) -> None:
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on foo (as on the CPU)")


# -- Cholesky -----------------------------------------------------------------


@impl("linalg_cholesky_ex.L")
def linalg_cholesky_ex_out(self, *, upper=False, check_errors=False, L, info):
    check_same_device("linalg.cholesky_ex", self, L, info)
    outs = (L, info)
    lt, it = _outputs(aten.linalg_cholesky_ex.default, (self,), {"upper": upper}, outs)
    lt.copy_(self)
    _C.linalg_cholesky(desc(lt), desc(it), upper)
    _finish(outs, [lt, it])
    if check_errors:
        _check_errors(info, "linalg.cholesky_ex", self.dim() == 2)
    return L, info


def _cholesky_solve_into(x: torch.Tensor, chol: torch.Tensor, upper: bool) -> None:
    """x <- A^-1 x for A = L L^T (or U^T U), ``chol`` broadcast to x's batch."""
    c = chol.expand(x.shape[:-2] + chol.shape[-2:])
    if upper:
        _C.linalg_solve_triangular(desc(c.mT), desc(x), False, False)
        _C.linalg_solve_triangular(desc(c), desc(x), True, False)
    else:
        _C.linalg_solve_triangular(desc(c), desc(x), False, False)
        _C.linalg_solve_triangular(desc(c.mT), desc(x), True, False)


@impl("_cholesky_solve_helper")
def _cholesky_solve_helper(self, A, upper):
    check_same_device("cholesky_solve", self, A)
    m = aten._cholesky_solve_helper.default(_meta(self), _meta(A), upper)
    x = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=self.device)
    x.copy_(self)
    _cholesky_solve_into(x, A, upper)
    return x


def _identity_into(x: torch.Tensor) -> None:
    x.zero_()
    x.diagonal(0, -2, -1).fill_(1)


@impl("cholesky_inverse")
def cholesky_inverse(self, upper=False):
    m = aten.cholesky_inverse.default(_meta(self), upper)
    out = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=self.device)
    return cholesky_inverse_out(self, upper, out=out)


@impl("cholesky_inverse.out")
def cholesky_inverse_out(self, upper=False, *, out):
    check_same_device("cholesky_inverse", self, out)
    (t,) = _outputs(aten.cholesky_inverse.default, (self, upper), {}, (out,))
    _identity_into(t)
    _cholesky_solve_into(t, self, upper)
    _finish((out,), [t])
    return out


# -- LU -----------------------------------------------------------------------


def _lu_factor_into(lu: torch.Tensor, pivots: torch.Tensor, info: torch.Tensor, A: torch.Tensor) -> None:
    lu.copy_(A)
    _C.linalg_lu_factor(desc(lu), desc(pivots), desc(info))


@impl("linalg_lu_factor_ex.out")
def linalg_lu_factor_ex_out(A, *, pivot=True, check_errors=False, LU, pivots, info):
    check_same_device("linalg.lu_factor_ex", A, LU, pivots, info)
    outs = (LU, pivots, info)
    targets = _outputs(aten.linalg_lu_factor_ex.default, (A,), {"pivot": pivot}, outs)
    _no_pivot(pivot)
    _lu_factor_into(*targets, A)
    _finish(outs, targets)
    if check_errors:
        _check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2)
    return LU, pivots, info


def _factor(A: torch.Tensor):
    """LU factorization of A into fresh column-major tensors."""
    k = min(A.shape[-2], A.shape[-1])
    lu = _f_contig(A.shape, A.dtype, A.device)
    pivots = torch.empty(A.shape[:-2] + (k,), dtype=torch.int32, device=A.device)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _lu_factor_into(lu, pivots, info, A)
    return lu, pivots, info


@impl("linalg_lu.out")
def linalg_lu_out(A, *, pivot=True, P, L, U):
    check_same_device("linalg.lu", A, P, L, U)
    outs = (P, L, U)
    pt, lt, ut = _outputs(aten.linalg_lu.default, (A,), {"pivot": pivot}, outs)
    _no_pivot(pivot)
    lu, pivots, _ = _factor(A)
    _C.lu_unpack(desc(lu), desc(pivots), desc(pt), desc(lt), desc(ut))
    _finish(outs, [pt, lt, ut])
    return P, L, U


@impl("lu_unpack.out")
def lu_unpack_out(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, P, L, U):
    check_same_device("lu_unpack", LU_data, LU_pivots, P, L, U)
    outs = (P, L, U)
    args = (LU_data, LU_pivots, unpack_data, unpack_pivots)
    pt, lt, ut = _outputs(aten.lu_unpack.default, args, {}, outs)
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    want = LU_data.shape[:-2]
    with_p = unpack_pivots and pt.shape[-2:] == (m, m) and pt.numel() > 0
    with_lu = unpack_data and lt.shape[-2:] == (m, k) and lt.numel() > 0
    if with_p or with_lu:
        piv = LU_pivots.expand(want + LU_pivots.shape[-1:]) if with_p else None
        _C.lu_unpack(
            desc(LU_data),
            desc(piv) if piv is not None else None,
            desc(pt) if with_p else None,
            desc(lt) if with_lu else None,
            desc(ut) if with_lu else None,
        )
    _finish(outs, [pt, lt, ut])
    return P, L, U


def _lu_solve_into(x: torch.Tensor, LU: torch.Tensor, pivots: torch.Tensor, left: bool, adjoint: bool) -> None:
    """x <- op(A)^-1 x (left) or x op(A)^-1 (right), A = P L U from ``LU``
    and ``pivots`` broadcast to x's batch; op = transpose with ``adjoint``."""
    batch = x.shape[:-2]
    lu = LU.expand(batch + LU.shape[-2:])
    piv = pivots.expand(batch + pivots.shape[-1:])
    if left:
        _C.linalg_lu_solve(desc(lu), desc(piv), desc(x), adjoint)
    else:
        # X A = B  <=>  A^T X^T = B^T
        _C.linalg_lu_solve(desc(lu), desc(piv), desc(x.mT), not adjoint)


@impl("linalg_lu_solve.out")
def linalg_lu_solve_out(LU, pivots, B, *, left=True, adjoint=False, out):
    check_same_device("linalg.lu_solve", LU, pivots, B, out)
    kw = {"left": left, "adjoint": adjoint}
    (t,) = _outputs(aten.linalg_lu_solve.default, (LU, pivots, B), kw, (out,))
    t.copy_(B)
    _lu_solve_into(t, LU, pivots, left, adjoint)
    _finish((out,), [t])
    return out


def _is_vector_rhs(LU: torch.Tensor, B: torch.Tensor) -> bool:
    # ATen's linalg_solve_is_vector_rhs
    return B.dim() == 1 or (LU.dim() - 1 == B.dim() and B.shape == LU.shape[:-1])


@impl("_linalg_solve_ex.result")
def _linalg_solve_ex_out(A, B, *, left=True, check_errors=False, result, LU, pivots, info):
    check_same_device("linalg.solve", A, B, result, LU, pivots, info)
    outs = (result, LU, pivots, info)
    rt, lut, pt, it = _outputs(aten._linalg_solve_ex.default, (A, B), {"left": left}, outs)
    _lu_factor_into(lut, pt, it, A)
    if check_errors:
        _finish(outs[1:], [lut, pt, it])
        _check_errors(info, "torch.linalg.solve_ex", A.dim() == 2)
    vector = _is_vector_rhs(lut, B)
    r = rt.unsqueeze(-1) if vector else rt
    r.copy_(B.unsqueeze(-1) if vector else B)
    _lu_solve_into(r, lut, pt, left, False)
    _finish(outs, [rt, lut, pt, it])
    return result, LU, pivots, info


@impl("linalg_inv_ex.inverse")
def linalg_inv_ex_out(A, *, check_errors=False, inverse, info):
    check_same_device("linalg.inv", A, inverse, info)
    outs = (inverse, info)
    xt, it = _outputs(aten.linalg_inv_ex.default, (A,), {}, outs)
    if A.numel():
        lu, pivots, finfo = _factor(A)
        it.copy_(finfo)
        _identity_into(xt)
        _lu_solve_into(xt, lu, pivots, True, False)
    else:
        it.zero_()
    _finish(outs, [xt, it])
    if check_errors:
        _check_errors(info, "linalg.inv_ex", A.dim() == 2)
    return inverse, info


# -- determinants -------------------------------------------------------------


@impl("_linalg_det.result")
def _linalg_det_out(A, *, result, LU, pivots):
    check_same_device("linalg.det", A, result, LU, pivots)
    outs = (result, LU, pivots)
    dt, lut, pt = _outputs(aten._linalg_det.default, (A,), {}, outs)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    # As CPU: det(A^T) = det(A), and a contiguous A^T is already column-major.
    _lu_factor_into(lut, pt, info, A.mT if A.is_contiguous() else A)
    _C.linalg_lu_det(desc(lut), desc(pt), desc(dt))
    _finish(outs, [dt, lut, pt])
    return result, LU, pivots


@impl("_linalg_slogdet.sign")
def _linalg_slogdet_out(A, *, sign, logabsdet, LU, pivots):
    check_same_device("linalg.slogdet", A, sign, logabsdet, LU, pivots)
    outs = (sign, logabsdet, LU, pivots)
    st, lt, lut, pt = _outputs(aten._linalg_slogdet.default, (A,), {}, outs)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    _lu_factor_into(lut, pt, info, A.mT if A.is_contiguous() else A)
    _C.linalg_lu_det(desc(lut), desc(pt), desc(st), desc(lt))
    _finish(outs, [st, lt, lut, pt])
    return sign, logabsdet, LU, pivots


# -- triangular solves --------------------------------------------------------


def _trsm_into(x: torch.Tensor, A: torch.Tensor, upper: bool, left: bool, unit: bool) -> None:
    a = A.expand(x.shape[:-2] + A.shape[-2:])
    if left:
        _C.linalg_solve_triangular(desc(a), desc(x), upper, unit)
    else:
        # X A = B  <=>  A^T X^T = B^T, A^T triangular on the other side
        _C.linalg_solve_triangular(desc(a.mT), desc(x.mT), not upper, unit)


@impl("linalg_solve_triangular")
def linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    kw = {"upper": upper, "left": left, "unitriangular": unitriangular}
    m = aten.linalg_solve_triangular.default(_meta(self), _meta(B), **kw)
    out = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=B.device)
    return linalg_solve_triangular_out(self, B, **kw, out=out)


@impl("linalg_solve_triangular.out")
def linalg_solve_triangular_out(self, B, *, upper, left=True, unitriangular=False, out):
    check_same_device("linalg.solve_triangular", self, B, out)
    kw = {"upper": upper, "left": left, "unitriangular": unitriangular}
    (t,) = _outputs(aten.linalg_solve_triangular.default, (self, B), kw, (out,))
    t.copy_(B)
    _trsm_into(t, self, upper, left, unitriangular)
    _finish((out,), [t])
    return out


@impl("triangular_solve.X")
def triangular_solve_out(self, A, upper=True, transpose=False, unitriangular=False, *, X, M):
    check_same_device("triangular_solve", self, A, X, M)
    outs = (X, M)
    xt, mt = _outputs(aten.triangular_solve.default, (self, A, upper, transpose, unitriangular), {}, outs)
    mt.copy_(A)
    xt.copy_(self)
    a = mt.mT if transpose else mt
    _trsm_into(xt, a, upper != transpose, True, unitriangular)
    _finish(outs, [xt, mt])
    return X, M


# -- QR -----------------------------------------------------------------------


@impl("linalg_qr.out")
def linalg_qr_out(A, mode="reduced", *, Q, R):
    check_same_device("linalg.qr", A, Q, R)
    outs = (Q, R)
    qt, rt = _outputs(aten.linalg_qr.default, (A, mode), {}, outs)
    scratch = _f_contig(A.shape, A.dtype, A.device)
    scratch.copy_(A)
    _C.linalg_qr(desc(scratch), desc(qt) if mode != "r" else None, desc(rt))
    _finish(outs, [qt, rt])
    return Q, R


# -- Householder reflectors (LAPACK's geqrf / orgqr / ormqr) ------------------


def _check_geqrf(A: torch.Tensor) -> None:
    # CPU's checks (ATen has no meta function for geqrf).
    if A.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if not (A.dtype.is_floating_point or A.dtype.is_complex):
        raise RuntimeError(
            f"torch.geqrf: Expected a floating point or complex tensor as input. Got {c10_name(A.dtype)}"
        )


@impl("geqrf")
def geqrf(self):
    _check_geqrf(self)
    a = _f_contig(self.shape, self.dtype, self.device)
    tau = torch.empty(self.shape[:-2] + (min(self.shape[-2:]),), dtype=self.dtype, device=self.device)
    a.copy_(self)
    _C.geqrf(desc(a), desc(tau))
    return a, tau


@impl("geqrf.a")
def geqrf_out(self, *, a, tau):
    check_same_device("torch.geqrf", self, a, tau)
    _check_geqrf(self)
    for name, out in (("a", a), ("tau", tau)):
        if out.dtype != self.dtype:
            raise RuntimeError(
                f"torch.geqrf: Expected {name} to have dtype {c10_name(self.dtype)}, but got {c10_name(out.dtype)}"
            )
    ra, rt = geqrf(self)
    _finish((a, tau), [ra, rt])
    return a, tau


@impl("linalg_householder_product.out")
def linalg_householder_product_out(input, tau, *, out):
    check_same_device("torch.linalg.householder_product", input, tau, out)
    (qt,) = _outputs(aten.linalg_householder_product.default, (input, tau), {}, (out,))
    _C.householder_product(desc(input), desc(tau), desc(qt))
    _finish((out,), [qt])
    return out


@impl("linalg_householder_product")
def linalg_householder_product(input, tau):
    check_same_device("torch.linalg.householder_product", input, tau)
    m = aten.linalg_householder_product.default(_meta(input), _meta(tau))
    out = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=input.device)
    _C.householder_product(desc(input), desc(tau), desc(out))
    return out


@impl("ormqr.out")
def ormqr_out(self, input2, input3, left=True, transpose=False, *, out):
    check_same_device("torch.ormqr", self, input2, input3, out)
    (ct,) = _outputs(aten.ormqr.default, (self, input2, input3, left, transpose), {}, (out,))
    ct.copy_(input3)
    _C.ormqr(desc(self), desc(input2), desc(ct), left, transpose)
    _finish((out,), [ct])
    return out


@impl("ormqr")
def ormqr(self, input2, input3, left=True, transpose=False):
    check_same_device("torch.ormqr", self, input2, input3)
    m = aten.ormqr.default(_meta(self), _meta(input2), _meta(input3), left, transpose)
    out = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=self.device)
    out.copy_(input3)
    _C.ormqr(desc(self), desc(input2), desc(out), left, transpose)
    return out


# -- matrix exponential -------------------------------------------------------


@impl("linalg_matrix_exp")
def linalg_matrix_exp(self):
    # CPU's checks and exception types (ATen's meta function raises others).
    if self.dim() < 2:
        raise RuntimeError("linalg.matrix_exp: The input tensor A must have at least 2 dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(
            "linalg.matrix_exp: A must be batches of square matrices, "
            f"but they are {self.shape[-2]} by {self.shape[-1]} matrices"
        )
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise NotImplementedError(
            f"linalg.matrix_exp: Expected a floating point or complex tensor as input. Got {c10_name(self.dtype)}"
        )
    # Computed in float64 for every real dtype: the squarings magnify the
    # approximant's rounding (a float32 Pade/Taylor loses ~1e-3 relative on
    # the small entries of a matrix with entries ~1e5), and the cast back
    # rounds once.
    x = self if self.dtype == torch.float64 else self.to(torch.float64)
    out = torch.empty(self.shape, dtype=torch.float64, device=self.device)
    _C.linalg_matrix_exp(desc(x), desc(out))
    return out if self.dtype == torch.float64 else out.to(self.dtype)


# -- eigh, SVD ----------------------------------------------------------------


@impl("_linalg_eigh.eigenvalues")
def _linalg_eigh_out(A, UPLO="L", compute_v=True, *, eigenvalues, eigenvectors):
    check_same_device("linalg.eigh", A, eigenvalues, eigenvectors)
    outs = (eigenvalues, eigenvectors)
    wt, vt = _outputs(aten._linalg_eigh.default, (A, UPLO, compute_v), {}, outs)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    a = A.mT if UPLO.upper() == "U" else A
    _C.linalg_eigh(desc(a), desc(wt), desc(vt) if compute_v else None, desc(info))
    _finish(outs, [wt, vt])
    _check_errors(info, "linalg.eigh", A.dim() == 2)
    return eigenvalues, eigenvectors


@impl("_linalg_svd.U")
def _linalg_svd_out(A, full_matrices=False, compute_uv=True, *, driver=None, U, S, Vh):
    check_same_device("linalg.svd", A, U, S, Vh)
    if driver is not None:
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
        )
    outs = (U, S, Vh)
    args = (A, full_matrices, compute_uv)
    ut, st, vt = _outputs(aten._linalg_svd.default, args, {}, outs)
    info = torch.empty(A.shape[:-2], dtype=torch.int32, device=A.device)
    uv = compute_uv and ut.numel() > 0 and vt.numel() > 0
    _C.linalg_svd(desc(A), desc(st), desc(ut) if uv else None, desc(vt) if uv else None, desc(info))
    if compute_uv and not uv:  # an empty A: CPU's full_matrices U / Vh are identities
        for t in (ut, vt):
            if t.numel():
                _identity_into(t)
    _finish(outs, [ut, st, vt])
    _check_errors(info, "linalg.svd", A.dim() == 2)
    return U, S, Vh
