"""The ``torch.special`` functions (and ``i0``, ``angle``, ``nextafter``),
each one call into the Rust elementwise engine through the same machinery
as the other pointwise ops (``elementwise._register``): the signature
(result dtype, compute dtype, CPU's refusals such as
``"bessel_j0_cpu" not implemented for 'Half'``) is learned from CPU, integer
inputs promote to float as there, and out= and in-place follow
TensorIterator's rules. The scalar functions are in
``rust/src/kernels/elementwise/special.rs``."""

from __future__ import annotations

import torch

from ._registry import DTYPE_CODE, check_same_device, impl
from .elementwise import (
    _B,
    _U,
    _b_bin,
    _b_bin_,
    _b_bin_out,
    _b_unary,
    _b_unary_,
    _b_unary_out,
    _register,
    _resize_out,
)

__all__: list[str] = []

# One input: the functional and out= overloads (special_i0 is composite: i0).
_UNARY = (
    "special_i0e",
    "special_i1",
    "special_i1e",
    "special_erfcx",
    "special_log_ndtr",
    "special_ndtri",
    "special_airy_ai",
    "special_bessel_j0",
    "special_bessel_j1",
    "special_bessel_y0",
    "special_bessel_y1",
    "special_modified_bessel_i0",
    "special_modified_bessel_i1",
    "special_modified_bessel_k0",
    "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0",
    "angle",
)
for _name in (*_UNARY, "i0"):
    _register(_name, _U, _name, _b_unary)
    _register(f"{_name}.out", _U, _name, _b_unary_out, func=_name)
_register("i0_", _U, "i0", _b_unary_, func="i0")

# P_n(x): the Tensor overloads (the Scalar ones are composite: they wrap the
# number as a CPU scalar tensor and call these).
_POLYNOMIALS = (
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
)
for _name in _POLYNOMIALS:
    _name = "special_" + _name
    _register(_name, _B, _name, _b_bin)
    _register(f"{_name}.out", _B, _name, _b_bin_out, func=_name)

_register("nextafter", _B, "nextafter", _b_bin)
_register("nextafter_", _B, "nextafter", _b_bin_, func="nextafter")
_register("nextafter.out", _B, "nextafter", _b_bin_out, func="nextafter")


# frexp: the mantissa and the int32 exponent, two passes of one input
# (frexp.Tensor is composite: it allocates both and calls this).
_frexp_sigs: dict[tuple, tuple[type, str] | None] = {}


def _frexp_error(dtypes: tuple) -> tuple[type, str] | None:
    """CPU's refusal of these dtypes (self, mantissa, exponent), if any."""
    if dtypes not in _frexp_sigs:
        err = None
        try:
            x = torch.ones(1, dtype=dtypes[0])
            torch.frexp(x, out=(torch.empty(1, dtype=dtypes[1]), torch.empty(1, dtype=dtypes[2])))
        except Exception as e:  # noqa: BLE001 - replayed to the caller
            err = (type(e), str(e))
        _frexp_sigs[dtypes] = err
    return _frexp_sigs[dtypes]


def _operand(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), DTYPE_CODE[t.dtype], t.shape, t.stride())


@impl("frexp.Tensor_out")
def frexp_out(self, *, mantissa, exponent):
    check_same_device("frexp", self, mantissa, exponent)
    err = _frexp_error((self.dtype, mantissa.dtype, exponent.dtype))
    if err is not None:
        raise err[0](err[1])
    for out in (mantissa, exponent):
        if out.shape != self.shape:
            _resize_out(out, self.shape, (self,))
    ct = DTYPE_CODE[self.dtype]
    _U("frexp_mantissa", _operand(mantissa), _operand(self), ct)
    _U("frexp_exponent", _operand(exponent), _operand(self), ct)
    return mantissa, exponent


for _name in ("igamma", "igammac"):
    _register(_name, _B, _name, _b_bin)
    _register(f"{_name}_", _B, _name, _b_bin_, func=_name)
    _register(f"{_name}.out", _B, _name, _b_bin_out, func=_name)
