"""Complex arithmetic on foo (add, sub, mul, neg and their in-place and out=
forms), computed by foo's real Rust kernels on the real views of complex
tensors (``view_as_real``: a trailing dimension of 2). The real kernels of
these ops hand complex calls here (``_registry.complex_kernel``)."""

from __future__ import annotations

import torch
from torch._prims_common import canonicalize_dim

from ._registry import _C, complex_kernel, desc, impl
from .copy import copy_into
from .linalg import resize_out


def _operand(x, dtype: torch.dtype, device) -> torch.Tensor:
    """``x`` as a foo tensor of complex ``dtype`` with no conj/neg bit."""
    if not isinstance(x, torch.Tensor):
        x = torch.tensor(x, dtype=dtype)
    if x.device.type != "foo":
        x = x.to(device)
    if x.dtype != dtype or x.is_conj() or x.is_neg():
        y = torch.empty(x.shape, dtype=dtype, device=device)
        copy_into(y, x)
        x = y
    return x


def _parts(t: torch.Tensor):
    r = torch.view_as_real(t)
    return r[..., 0], r[..., 1]


def _result_dtype(self, other) -> torch.dtype:
    return torch.result_type(self, other)


def _device(*xs):
    for x in xs:
        if isinstance(x, torch.Tensor) and x.device.type == "foo":
            return x.device
    return torch.device("foo", torch.foo.current_device())


def _binary(kind: str, self, other, alpha=1) -> torch.Tensor:
    dtype = _result_dtype(self, other)
    if alpha != 1:
        dtype = torch.promote_types(dtype, torch.result_type(torch.tensor(0, dtype=dtype), alpha))
    dev = _device(self, other)
    a, b = _operand(self, dtype, dev), _operand(other, dtype, dev)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    out = torch.empty(shape, dtype=dtype, device=dev)
    o = torch.view_as_real(out)
    if kind in ("add", "sub"):
        if alpha != 1:
            b = _binary("mul", b, alpha)
        fn = torch.add if kind == "add" else torch.sub
        fn(torch.view_as_real(a), torch.view_as_real(b), out=o)
        return out
    # (ar + ai j)(br + bi j) = (ar br - ai bi) + (ar bi + ai br) j
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    torch.sub(ar * br, ai * bi, out=o[..., 0])
    torch.add(ar * bi, ai * br, out=o[..., 1])
    return out


def _into(out: torch.Tensor, result: torch.Tensor, op: str) -> torch.Tensor:
    if not out.is_complex():
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {out.dtype}")
    resize_out(out, result.shape)
    return copy_into(out, result)


def _inplace(self: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if not self.is_complex():
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {self.dtype}")
    if result.shape != self.shape:
        raise RuntimeError(
            f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
        )
    return copy_into(self, result)


for _kind in ("add", "sub"):

    def _f(self, other, *, alpha=1, _k=_kind):
        return _binary(_k, self, other, alpha)

    def _i(self, other, *, alpha=1, _k=_kind):
        return _inplace(self, _binary(_k, self, other, alpha))

    def _o(self, other, *, alpha=1, out, _k=_kind):
        return _into(out, _binary(_k, self, other, alpha), _k)

    complex_kernel(f"{_kind}.Tensor")(_f)
    complex_kernel(f"{_kind}_.Tensor")(_i)
    complex_kernel(f"{_kind}.out")(_o)


@complex_kernel("mul.Tensor")
def mul(self, other):
    return _binary("mul", self, other)


@complex_kernel("mul_.Tensor")
def mul_(self, other):
    return _inplace(self, _binary("mul", self, other))


@complex_kernel("mul.out")
def mul_out(self, other, *, out):
    return _into(out, _binary("mul", self, other), "mul")


def _neg(self) -> torch.Tensor:
    a = _operand(self, self.dtype, self.device)
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    torch.neg(torch.view_as_real(a), out=torch.view_as_real(out))
    return out


complex_kernel("neg")(_neg)
complex_kernel("neg_")(lambda self: _inplace(self, _neg(self)))
complex_kernel("neg.out")(lambda self, *, out: _into(out, _neg(self), "neg"))


@complex_kernel("sum.IntList_out")
def sum_out(self, dim, keepdim=False, *, dtype=None, out):
    dtype = dtype or self.dtype
    if not dtype.is_complex:
        raise RuntimeError(f"sum: a complex input can't be summed to {dtype} (foo)")
    a = _operand(self, dtype, self.device)
    # Checked and wrapped against the complex rank (a 0-d tensor takes dim 0
    # or -1 and stays itself); the real view's trailing 2 is never reduced.
    dims = sorted({canonicalize_dim(a.dim(), d) for d in dim}) if dim else list(range(a.dim()))
    dims = [d for d in dims if d < a.dim()]
    r = torch.view_as_real(a)
    if dims:
        r = torch.sum(r, dim=dims, keepdim=keepdim)
    result = torch.view_as_complex(r.contiguous())
    return _into(out, result, "sum")


# ---------------------------------------------------------------------------
# Reductions and scans whose complex result is the real one of each part
# (mean, cumsum, trace) or a real reduction of a real quantity (var/std of
# both parts, norms of abs, any/all/count_nonzero of ``!= 0``): foo's real
# Rust reductions on ``view_as_real`` views or on the complex elementwise
# kernels' real results.
# ---------------------------------------------------------------------------


def _wrap_dims(a: torch.Tensor, dim) -> list[int]:
    from .reduce import reduce_dims

    return reduce_dims(a, dim)


def _real_reduce(fn, a: torch.Tensor, dims: list[int], keepdim: bool) -> torch.Tensor:
    """``fn`` of each part over ``dims`` of complex ``a``, as a complex tensor."""
    r = torch.view_as_real(a)
    if dims:
        r = fn(r, dims, keepdim)
    return torch.view_as_complex(r.contiguous())


@complex_kernel("mean.out")
def mean_out(self, dim, keepdim=False, *, dtype=None, out):
    dtype = dtype or self.dtype
    if not dtype.is_complex:
        raise RuntimeError(f"mean: a complex input can't be averaged to {dtype} (foo)")
    a = _operand(self, dtype, self.device)
    dims = _wrap_dims(a, dim)
    result = _real_reduce(lambda r, d, k: torch.mean(r, dim=d, keepdim=k), a, dims, keepdim)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    return _into(out, result, "mean")


@complex_kernel("cumsum.out")
def cumsum_out(self, dim, *, dtype=None, out):
    from .reduce import wrap_dim

    dtype = dtype or self.dtype
    if not dtype.is_complex:
        raise RuntimeError(f"cumsum: a complex input can't be summed to {dtype} (foo)")
    a = _operand(self, dtype, self.device)
    d = wrap_dim(dim, a.dim())
    r = torch.view_as_real(a if a.dim() else a.reshape(1))
    result = torch.view_as_complex(torch.cumsum(r, dim=d).contiguous()).reshape(a.shape)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    return _into(out, result, "cumsum")


@complex_kernel("trace")
def trace(self):
    if self.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    a = _operand(self, self.dtype, self.device)
    r = torch.view_as_real(a.diagonal())
    return torch.view_as_complex(torch.sum(r, dim=0).contiguous())


def _var(self, dim, correction, keepdim, std: bool):
    """var of a complex tensor: the variance of the real parts plus that of
    the imaginary parts (mean |z - mean|^2), in the real dtype."""
    from .reduce import reduced_shape

    a = _operand(self, self.dtype, self.device)
    dims = _wrap_dims(a, dim)
    shape = reduced_shape(a, dims, keepdim)
    r = torch.view_as_real(a if a.dim() else a.reshape(1))
    c = 1 if correction is None else correction
    v = torch.var(r, dim=dims or [0], correction=c, keepdim=keepdim).sum(-1).reshape(shape)
    return torch.sqrt(v) if std else v


def _var_out(out, result):
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {result.dtype}, but got {out.dtype} instead")
    resize_out(out, result.shape)
    return copy_into(out, result)


for _std in (False, True):
    _n = "std" if _std else "var"

    def _f(self, dim=None, *, correction=None, keepdim=False, _s=_std):
        return _var(self, dim, correction, keepdim, _s)

    def _o(self, dim=None, *, correction=None, keepdim=False, out, _s=_std):
        return _var_out(out, _var(self, dim, correction, keepdim, _s))

    def _m(self, dim=None, *, correction=None, keepdim=False, _s=_std):
        a = _operand(self, self.dtype, self.device)
        dims = _wrap_dims(a, dim)
        m = _real_reduce(lambda r, d, k: torch.mean(r, dim=d, keepdim=k), a, dims, keepdim)
        return _var(a, dim, correction, keepdim, _s), m

    complex_kernel(f"{_n}.correction")(_f)
    complex_kernel(f"{_n}.correction_out")(_o)
    complex_kernel(f"{_n}_mean.correction")(_m)


def _norm_of_abs(self, ord, dim, keepdim, dtype, out, name):
    from .reduce import _vector_norm_into

    if dtype is not None and not dtype.is_complex:
        raise RuntimeError(f"{name}: dtype should be complex for a complex input. Got {dtype} (foo)")
    a = self if dtype is None or dtype == self.dtype else _operand(self, dtype, self.device)
    rdtype = a.dtype.to_real()
    if out.dtype != rdtype:
        raise RuntimeError(f"Expected out tensor to have dtype {rdtype}, but got {out.dtype} instead")
    return _vector_norm_into(torch.abs(a), ord, dim, keepdim, None, out, name)


@complex_kernel("linalg_vector_norm.out")
def linalg_vector_norm_out(self, ord=2, dim=None, keepdim=False, *, dtype=None, out):
    return _norm_of_abs(self, ord, dim, keepdim, dtype, out, "linalg.vector_norm")


@complex_kernel("norm.out")
def norm_out(self, p, dim, keepdim=False, *, out):
    return _norm_of_abs(self, 2 if p is None else p, dim, keepdim, None, out, "norm")


@complex_kernel("norm.dtype_out")
def norm_dtype_out(self, p, dim, keepdim, *, dtype, out):
    return _norm_of_abs(self, 2 if p is None else p, dim, keepdim, dtype, out, "norm")


def _nonzero_of(self):
    return torch.ne(self, 0)


for _name in (
    "all.out",
    "any.out",
    "all.dims_out",
    "any.dims_out",
):
    complex_kernel(_name)(
        lambda self, dim=None, keepdim=False, *, out, _n=_name: getattr(torch, _n.split(".")[0])(
            _nonzero_of(self), dim=dim, keepdim=keepdim, out=out
        )
    )
complex_kernel("all.all_out")(lambda self, *, out: torch.all(_nonzero_of(self), out=out))
complex_kernel("any.all_out")(lambda self, *, out: torch.any(_nonzero_of(self), out=out))
complex_kernel("count_nonzero.dim_IntList")(lambda self, dim: torch.count_nonzero(_nonzero_of(self), dim=dim))


# ---------------------------------------------------------------------------
# prod / cumprod: complex products in Rust (kernels::elementwise::complex)
# ---------------------------------------------------------------------------


def _prod_dtype(self, dtype, name):
    dtype = dtype or self.dtype
    if not dtype.is_complex:
        raise RuntimeError(f"{name}: a complex input can't be multiplied to {dtype} (foo)")
    return dtype


@complex_kernel("cumprod.out")
def cumprod_out(self, dim, *, dtype=None, out):
    from .reduce import wrap_dim

    dtype = _prod_dtype(self, dtype, "cumprod")
    a = _operand(self, dtype, self.device)
    d = wrap_dim(dim, a.dim())
    a1 = a if a.dim() else a.reshape(1)
    result = torch.empty(a1.shape, dtype=dtype, device=a.device)
    _C.complex_prod(desc(result), desc(a1), d, True)
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtype}, but got {out.dtype} instead")
    return _into(out, result.reshape(a.shape), "cumprod")


def _prod(self, dim, keepdim, dtype):
    """Products over ``dim`` (all dims for None): the reduced dims moved last
    and flattened into one, then one Rust product along it."""
    from .reduce import reduce_dims, reduced_shape

    dtype = _prod_dtype(self, dtype, "prod")
    a = _operand(self, dtype, self.device)
    dims = reduce_dims(a, dim)
    shape = reduced_shape(a, dims, keepdim)
    if a.numel() == 0:
        return torch.ones(shape, dtype=dtype, device=a.device)
    keep = [d for d in range(a.dim()) if d not in dims]
    flat = a.permute(keep + dims).reshape([a.shape[d] for d in keep] + [-1])
    result = torch.empty([*flat.shape[:-1], 1], dtype=dtype, device=a.device)
    _C.complex_prod(desc(result), desc(flat), flat.dim() - 1, False)
    return result.reshape(shape)


@complex_kernel("prod")
def prod(self, *, dtype=None):
    return _prod(self, None, False, dtype)


@complex_kernel("prod.int_out")
def prod_int_out(self, dim, keepdim=False, *, dtype=None, out):
    result = _prod(self, [dim], keepdim, dtype)
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {result.dtype}, but got {out.dtype} instead")
    return _into(out, result, "prod")


# ---------------------------------------------------------------------------
# Linear algebra through the real embedding of a complex matrix: A = X + iY
# is, as a real operator, M = [[X, -Y], [Y, X]] (2m x 2n). M's singular
# values are A's, each twice; a Hermitian A gives a symmetric M whose
# eigenvalues are A's, each twice; inv(M) is the embedding of inv(A). Each
# runs foo's real Rust decompositions on M. (Singular vectors, eigenvectors
# and factorizations are not recovered this way: those calls fall back.)
# ---------------------------------------------------------------------------


def _embed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.cat([x, torch.neg(y)], -1), torch.cat([y, x], -1)], -2)


def _parts_of(a: torch.Tensor):
    a = _operand(a, a.dtype, a.device)
    r = torch.view_as_real(a)
    return r[..., 0], r[..., 1]


def _fallback(op, *args, **kwargs):
    from .._fallback import cpu_fallback

    return cpu_fallback(op, *args, **kwargs)


@complex_kernel("_linalg_svd.U")
def _linalg_svd_out(A, full_matrices=False, compute_uv=True, *, driver=None, U, S, Vh):
    from .decomp import _finish, _outputs

    if compute_uv or driver is not None:
        return _fallback(torch.ops.aten._linalg_svd.U, A, full_matrices, compute_uv, driver=driver, U=U, S=S, Vh=Vh)
    outs = (U, S, Vh)
    ut, st, vt = _outputs(torch.ops.aten._linalg_svd.default, (A, full_matrices, False), {}, outs)
    if A.numel():
        x, y = _parts_of(A)
        st.copy_(torch.linalg.svdvals(_embed(x, y))[..., ::2])
    _finish(outs, [ut, st, vt])
    return U, S, Vh


@complex_kernel("_linalg_eigh.eigenvalues")
def _linalg_eigh_out(A, UPLO="L", compute_v=True, *, eigenvalues, eigenvectors):
    from .decomp import _finish, _outputs

    if compute_v:
        return _fallback(
            torch.ops.aten._linalg_eigh.eigenvalues,
            A,
            UPLO,
            compute_v,
            eigenvalues=eigenvalues,
            eigenvectors=eigenvectors,
        )
    outs = (eigenvalues, eigenvectors)
    wt, vt = _outputs(torch.ops.aten._linalg_eigh.default, (A, UPLO, False), {}, outs)
    if A.numel():
        x, y = _parts_of(A if UPLO.upper() == "L" else A.mH)
        # The Hermitian matrix of the lower triangle (a real diagonal), as LAPACK reads it.
        hx = torch.add(torch.tril(x), torch.tril(x, -1).mT)
        ly = torch.tril(y, -1)
        hy = torch.sub(ly, ly.mT)
        wt.copy_(torch.linalg.eigvalsh(_embed(hx, hy))[..., ::2])
    _finish(outs, [wt, vt])
    return eigenvalues, eigenvectors


@complex_kernel("linalg_inv_ex.inverse")
def linalg_inv_ex_out(A, *, check_errors=False, inverse, info):
    from .decomp import _finish, _outputs

    outs = (inverse, info)
    xt, it = _outputs(torch.ops.aten.linalg_inv_ex.default, (A,), {}, outs)
    if A.numel():
        n = A.shape[-1]
        x, y = _parts_of(A)
        m, minfo = torch.linalg.inv_ex(_embed(x, y))
        # info: 0, or nonzero (A singular) with the embedding's pivot index.
        it.copy_(minfo)
        r = torch.view_as_real(xt)
        r[..., 0].copy_(m[..., :n, :n])
        r[..., 1].copy_(m[..., n:, :n])
    else:
        it.zero_()
    _finish(outs, [xt, it])
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "linalg.inv_ex", is_matrix=A.dim() == 2)
    return inverse, info


@impl("complex.out", complex_ok=True)
def complex_out(real, imag, *, out):
    """torch.complex: ``out``'s parts are copies of ``real`` and ``imag``
    (broadcast); dtype rules and errors are CPU's (probed on 1-element
    tensors)."""
    expected = torch.complex(torch.zeros(1, dtype=real.dtype), torch.zeros(1, dtype=imag.dtype)).dtype
    if out.dtype != expected:
        raise RuntimeError(
            f"Expected object of scalar type {expected} but got scalar type {out.dtype} for argument 'out'"
        )
    shape = torch.broadcast_shapes(real.shape, imag.shape)
    resize_out(out, shape)
    r = torch.view_as_real(out)
    r[..., 0].copy_(real.expand(shape))
    r[..., 1].copy_(imag.expand(shape))
    return out
