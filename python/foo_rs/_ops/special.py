"""The ``torch.special`` functions (and ``i0``, ``angle``, ``nextafter``),
each one call into the Rust elementwise engine through the same machinery
as the other pointwise ops (``elementwise._register``): the signature
(result dtype, compute dtype, CPU's refusals such as
``"bessel_j0_cpu" not implemented for 'Half'``) is learned from CPU, integer
inputs promote to float as there, and out= and in-place follow
TensorIterator's rules. The scalar functions are in
``rust/src/kernels/elementwise/special.rs``."""

from __future__ import annotations

from .elementwise import _B, _U, _b_bin, _b_bin_, _b_bin_out, _b_unary, _b_unary_, _b_unary_out, _register

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
