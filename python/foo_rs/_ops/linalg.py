"""Matrix products: mm, addmm, bmm, baddbmm, addbmm, addmv (mv), dot, vdot.

The structured ops register their ``.out`` overload only: ATen's
CompositeExplicitAutogradNonFunctional kernels of the functional and in-place
forms run the meta checks, allocate the output on foo and call it. Operands
keep their strides (a transposed matrix is read in place by the Rust gemm).

Also home of the helpers the reduction and nn kernels share (out= checks,
c10 dtype names).
"""

from __future__ import annotations

import warnings

import torch

from ._registry import _C, check_same_device, desc, impl

#: c10's names of dtypes, as they appear in CPU error messages.
C10_NAME = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int",
    torch.int32: "int",
    torch.int16: "short int",
    torch.int8: "signed char",
    torch.uint8: "unsigned char",
    torch.bool: "bool",
}

#: ScalarType names (``Float``, ``Long``, ...), as in other CPU messages.
SCALAR_NAME = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Long",
    torch.int32: "Int",
    torch.int16: "Short",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.bool: "Bool",
}


def c10_name(dtype: torch.dtype) -> str:
    return C10_NAME.get(dtype, str(dtype))


def resize_out(out: torch.Tensor, shape) -> None:
    """ATen's ``resize_output``: resizes ``out`` to ``shape``, warning (as CPU
    does) when a non-empty tensor had another shape."""
    if out.shape != shape:
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                f"which does not match the required output shape {list(shape)}. This behavior is "
                "deprecated, and in a future PyTorch release outputs will not be resized unless they "
                "have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, "
                "to zero elements with t.resize_(0).",
                UserWarning,
                stacklevel=3,
            )
        out.resize_(shape)


def check_out(out: torch.Tensor, shape, dtype: torch.dtype) -> None:
    """Structured ops' out= contract: same dtype (else RuntimeError), then
    resized to ``shape``."""
    if out.dtype != dtype:
        raise RuntimeError(
            f"Expected out tensor to have dtype {c10_name(dtype)}, but got {c10_name(out.dtype)} instead"
        )
    resize_out(out, shape)


def _same_dtype(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {c10_name(a.dtype)} != {c10_name(b.dtype)}"
        )


def _bias_dtype(self: torch.Tensor, a: torch.Tensor) -> None:
    if self.dtype != a.dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {c10_name(self.dtype)} and {c10_name(a.dtype)}"
        )


def _mm_checks(m1: torch.Tensor, m2: torch.Tensor, first: str = "self") -> None:
    if m1.dim() != 2:
        raise RuntimeError(f"{first} must be a matrix")
    if m2.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    if m1.shape[1] != m2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({m1.shape[0]}x{m1.shape[1]} and {m2.shape[0]}x{m2.shape[1]})"
        )
    _same_dtype(m1, m2)


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A complex operand with its conjugate/negative bits resolved: the
    products are fallthroughs of those dispatch keys, so a conjugate view
    arrives with its unconjugated memory (real operands as they are)."""
    if isinstance(t, torch.Tensor) and (t.is_conj() or t.is_neg()):
        return t.resolve_conj().resolve_neg()
    return t


def _complex_coefs(*coefs) -> bool:
    """Whether a coefficient is a complex number (Rust takes real ones)."""
    return any(isinstance(c, complex) for c in coefs)


def _with_coefs(out, self, product, beta, alpha):
    """out = beta * self + alpha * product with complex coefficients (foo's
    complex elementwise kernels); beta 0 ignores self, as ATen does."""
    r = torch.mul(product, alpha)
    if beta != 0:
        r = torch.add(r, torch.mul(self, beta))
    out.copy_(r)
    return out


@impl("mm.out", complex_ok=True)
def mm_out(self, mat2, *, out):
    self, mat2 = _plain(self), _plain(mat2)
    check_same_device("mm", self, mat2, out)
    _mm_checks(self, mat2)
    check_out(out, (self.shape[0], mat2.shape[1]), self.dtype)
    _C.addmm(desc(out), None, desc(self), desc(mat2), 0, 1)
    return out


@impl("addmm.out", complex_ok=True)
def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    self, mat1, mat2 = _plain(self), _plain(mat1), _plain(mat2)
    check_same_device("addmm", self, mat1, mat2, out)
    _mm_checks(mat1, mat2, "mat1")
    _bias_dtype(self, mat1)
    shape = (mat1.shape[0], mat2.shape[1])
    check_out(out, shape, mat1.dtype)
    if _complex_coefs(beta, alpha):
        return _with_coefs(out, self, torch.mm(mat1, mat2), beta, alpha)
    _C.addmm(desc(out), desc(self), desc(mat1), desc(mat2), beta, alpha)
    return out


def _bmm_checks(b1: torch.Tensor, b2: torch.Tensor) -> None:
    if b1.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b2.dim() != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    bs, k = b1.shape[0], b1.shape[2]
    if b2.shape[0] != bs or b2.shape[1] != k:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{bs}, {k}] but got: "
            f"[{b2.shape[0]}, {b2.shape[1]}]."
        )
    _same_dtype(b1, b2)


@impl("bmm.out", complex_ok=True)
def bmm_out(self, mat2, *, out):
    self, mat2 = _plain(self), _plain(mat2)
    check_same_device("bmm", self, mat2, out)
    _bmm_checks(self, mat2)
    check_out(out, (self.shape[0], self.shape[1], mat2.shape[2]), self.dtype)
    _C.baddbmm(desc(out), None, desc(self), desc(mat2), 0, 1)
    return out


@impl("baddbmm.out", complex_ok=True)
def baddbmm_out(self, batch1, batch2, *, beta=1, alpha=1, out):
    self, batch1, batch2 = _plain(self), _plain(batch1), _plain(batch2)
    check_same_device("baddbmm", self, batch1, batch2, out)
    _bmm_checks(batch1, batch2)
    _bias_dtype(self, batch1)
    check_out(out, (batch1.shape[0], batch1.shape[1], batch2.shape[2]), batch1.dtype)
    if _complex_coefs(beta, alpha):
        return _with_coefs(out, self, torch.bmm(batch1, batch2), beta, alpha)
    _C.baddbmm(desc(out), desc(self), desc(batch1), desc(batch2), beta, alpha)
    return out


@impl("addbmm.out", complex_ok=True)
def addbmm_out(self, batch1, batch2, *, beta=1, alpha=1, out):
    self, batch1, batch2 = _plain(self), _plain(batch1), _plain(batch2)
    check_same_device("addbmm", self, batch1, batch2, out)
    _bmm_checks(batch1, batch2)
    _bias_dtype(self, batch1)
    check_out(out, (batch1.shape[1], batch2.shape[2]), batch1.dtype)
    if _complex_coefs(beta, alpha):
        return _with_coefs(out, self, torch.bmm(batch1, batch2).sum(0), beta, alpha)
    _C.addbmm(desc(out), desc(self), desc(batch1), desc(batch2), beta, alpha)
    return out


@impl("addbmm", complex_ok=True)
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    _bmm_checks(batch1, batch2)
    out = torch.empty((batch1.shape[1], batch2.shape[2]), dtype=batch1.dtype, device=batch1.device)
    return addbmm_out(self, batch1, batch2, beta=beta, alpha=alpha, out=out)


@impl("addbmm_", complex_ok=True)
def addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    _bmm_checks(batch1, batch2)
    if tuple(self.shape) != (batch1.shape[1], batch2.shape[2]):
        raise RuntimeError(
            f"The expanded size of the tensor ({batch2.shape[2]}) must match the existing size "
            f"({self.shape[-1] if self.dim() else 1}) at non-singleton dimension 1"
        )
    return addbmm_out(self, batch1, batch2, beta=beta, alpha=alpha, out=self)


@impl("addmv.out", complex_ok=True)
def addmv_out(self, mat, vec, *, beta=1, alpha=1, out):
    self, mat, vec = _plain(self), _plain(mat), _plain(vec)
    check_same_device("addmv", self, mat, vec, out)
    if mat.dim() != 2 or vec.dim() != 1 or mat.shape[1] != vec.shape[0]:
        raise RuntimeError(
            f"vector + matrix @ vector expected, got {self.dim()}, {mat.dim()}, {vec.dim()}"
            if mat.dim() != 2 or vec.dim() != 1
            else f"size mismatch, got input ({self.shape[0] if self.dim() else 1}), mat "
            f"({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})"
        )
    _same_dtype(mat, vec)
    check_out(out, (mat.shape[0],), mat.dtype)
    if _complex_coefs(beta, alpha):
        return _with_coefs(out, self, torch.mv(mat, vec), beta, alpha)
    _C.addmv(desc(out), desc(self), desc(mat), desc(vec), beta, alpha)
    return out


def _dot(self, other, name):
    self, other = _plain(self), _plain(other)
    check_same_device(name, self, other)
    if self.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {other.dim()}D tensors")
    if self.dtype != other.dtype:
        raise RuntimeError(
            f"{name} : expected both vectors to have same dtype, but found "
            f"{SCALAR_NAME.get(self.dtype)} and {SCALAR_NAME.get(other.dtype)}"
        )
    if self.shape[0] != other.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{self.shape[0]}] and src [{other.shape[0]}] to have "
            f"the same number of elements, but got {self.shape[0]} and {other.shape[0]} elements respectively"
        )
    out = torch.empty((), dtype=self.dtype, device=self.device)
    _C.dot(desc(out), desc(self), desc(other))
    return out


@impl("dot", complex_ok=True)
def dot(self, tensor):
    return _dot(self, tensor, "dot")


@impl("vdot", complex_ok=True)
def vdot(self, other):
    # vdot conjugates its first operand (a no-op for real dtypes).
    return _dot(self.conj() if self.is_complex() else self, other, "vdot")


# ---------------------------------------------------------------------------
# linalg.cross (and cross, its composite)
# ---------------------------------------------------------------------------


def _cross_into(self, other, dim, out):
    from .reduce import wrap_dim

    check_same_device("linalg.cross", self, other, out)
    if self.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    d = wrap_dim(dim, self.dim())
    if self.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {self.shape[d]} and {other.shape[d]}"
        )
    shape = torch.broadcast_shapes(self.shape, other.shape)
    if out is None:
        out = torch.empty(shape, dtype=self.dtype, device=self.device)
    else:
        check_out(out, shape, self.dtype)
    if self.dtype != other.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_NAME[self.dtype]} but found {SCALAR_NAME[other.dtype]}")
    if self.dtype == torch.bool:
        raise NotImplementedError("\"linalg_cross\" not implemented for 'Bool' (foo)")
    # Products rounded to the tensors' dtype, then differenced: CPU's
    # scalar_t arithmetic, each step one of foo's elementwise kernels.
    a = [self.select(d, i) for i in range(3)]
    b = [other.select(d, i) for i in range(3)]
    # All three components before any store: out may alias an input.
    c = [a[(i + 1) % 3] * b[(i + 2) % 3] - a[(i + 2) % 3] * b[(i + 1) % 3] for i in range(3)]
    for i in range(3):
        out.select(d, i).copy_(c[i])
    return out


@impl("linalg_cross", complex_ok=True)
def linalg_cross(self, other, *, dim=-1):
    return _cross_into(self, other, dim, None)


@impl("linalg_cross.out", complex_ok=True)
def linalg_cross_out(self, other, *, dim=-1, out):
    return _cross_into(self, other, dim, out)
