"""In-place random fills from foo's Philox generators: normal_, uniform_,
log_normal_, exponential_, cauchy_, geometric_ and random_ (``.default``,
``.from``, ``.to``).

The functional and ``out=`` forms (``aten::random.from_out``,
``aten::exponential``, ...) are ATen's CompositeExplicitAutograd kernels,
which call these. Argument checks, their order (before or after the
zero-size early return) and the ranges random_ draws from are ATen's
(DistributionTemplates.h); the values come from foo's own generator, so they
differ from CPU's but follow the same distributions.
"""

from __future__ import annotations

import warnings

import torch

from ._registry import _C, desc, impl
from .linalg import SCALAR_NAME, c10_name

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

#: Significand bits (std::numeric_limits<T>::digits) of the floating dtypes.
_DIGITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}

#: ATen's random_full_64_bits_range kernel (random_(INT64_MIN, None)) covers these.
_FULL_RANGE_DTYPES = (torch.int64, torch.float64, torch.float32, torch.bfloat16)


def _draw(fill, self, params, generator):
    if generator is None:
        fill(desc(self), *params, self.device.index or 0, None)
        return self
    if generator.device.type != "foo":
        raise RuntimeError(f"Expected a 'foo' device type for generator but found '{generator.device.type}'")
    offset = generator.get_offset()
    used = fill(desc(self), *params, None, (generator.initial_seed(), offset))
    generator.set_offset(offset + used)
    return self


def _g(x: float) -> str:
    """A double as C++'s ostream prints it (in ATen's messages)."""
    return format(x, "g")


@impl("normal_", complex_ok=True)
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if std < 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if self.is_complex():
        # ATen: both parts of a complex tensor, with std / sqrt(2).
        normal_(torch.view_as_real(self), mean, std / 2**0.5, generator=generator)
        return self
    return _draw(_C.normal_, self, (float(mean), float(std)), generator)


@impl("uniform_", complex_ok=True)
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    if self.is_complex():
        # ATen: both parts of a complex tensor uniform in [from, to).
        uniform_(torch.view_as_real(self), from_, to, generator=generator)
        return self
    return _draw(_C.uniform_, self, (float(from_), float(to)), generator)


# --------------------------------------------------------- continuous (and geometric)


def _not_floating(self, kind: str):
    """exponential_ / cauchy_ refuse non-floating dtypes with RuntimeError."""
    name = SCALAR_NAME[self.dtype] if kind == "Exponential" else c10_name(self.dtype)
    return RuntimeError(
        f"{kind} distribution is a continuous probability distribution. "
        f"dtype must be a floating point but you specified {name} (on foo)"
    )


@impl("exponential_")
def exponential_(self, lambd=1.0, *, generator=None):
    lambd = float(lambd)
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_g(lambd)} (on foo)")
    if self.numel() == 0:
        return self
    if not self.dtype.is_floating_point:
        raise _not_floating(self, "Exponential")
    return _draw(_C.exponential_, self, (lambd,), generator)


@impl("cauchy_")
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    sigma = float(sigma)
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_g(sigma)} (on foo)")
    if not self.dtype.is_floating_point:  # before the zero-size return, unlike exponential_
        raise _not_floating(self, "Cauchy")
    if self.numel() == 0:
        return self
    return _draw(_C.cauchy_, self, (float(median), sigma), generator)


@impl("log_normal_")
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    std = float(std)
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_g(std)} (on foo)")
    if self.numel() == 0:
        return self
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"log_normal_cpu\" not implemented for '{SCALAR_NAME[self.dtype]}' (on foo)")
    return _draw(_C.log_normal_, self, (float(mean), std), generator)


@impl("geometric_")
def geometric_(self, p, *, generator=None):
    p = float(p)
    if not 0.0 < p < 1.0:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_g(p)} (on foo)")
    if self.numel() == 0:
        return self
    if self.dtype == torch.bool:
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'Bool' (on foo)")
    return _draw(_C.geometric_, self, (p,), generator)


# ------------------------------------------------------------------------ random_


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def _round_bits(v: int, digits: int) -> int:
    """``v`` rounded to ``digits`` significant bits, to nearest, ties to even."""
    a = abs(v)
    shift = a.bit_length() - digits
    if shift <= 0:
        return v
    q, r = divmod(a, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << shift) if v >= 0 else -(q << shift)


def _through(v: int, dtype: torch.dtype) -> int:
    """``static_cast<int64_t>(static_cast<scalar_t>(v))`` for a floating
    ``scalar_t`` (Half and BFloat16 convert an int64 through float; a value
    that does not fit int64, or inf, comes back as INT64_MIN as on x86)."""
    if dtype == torch.float64:
        x = _round_bits(v, 53)
    else:
        x = _round_bits(v, 24)
        if dtype != torch.float32:
            x = _round_bits(x, _DIGITS[dtype])
            if dtype == torch.float16 and abs(x) > 65504:
                return _I64_MIN
    return x if _I64_MIN <= x <= _I64_MAX else _I64_MIN


def _log2_floor(a: int) -> int:
    return max(a.bit_length() - 1, 0)


def _update_from(from_: int, dtype: torch.dtype) -> int:
    # Moves `from` right to the first int64 that stays >= from once cast to
    # the dtype (ATen's update_from).
    plus1 = _through(_wrap64(from_ + 1), dtype)
    if plus1 < from_:
        n = _log2_floor(abs(_wrap64(from_ + 1)))
        from_ = _wrap64(plus1 + (1 << (n - _DIGITS[dtype] + 1)))
    return from_


def _update_to(to: int, dtype: torch.dtype) -> int:
    minus1 = _through(_wrap64(to - 1), dtype)
    if minus1 >= to:
        n = _log2_floor(abs(_wrap64(to - 1)))
        to = _wrap64(minus1 - (1 << (n - _DIGITS[dtype] + 1)))
    return to


def _check_in_range(from_: int, to_inc: int, dtype: torch.dtype) -> None:
    """ATen's check_from_to_in_range: errors outside the dtype, and for
    floats the warning past 2^digits."""
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        lo, hi = info.min, info.max
        vals = ((float(from_), "from"), (float(to_inc), "to - 1"))
    else:
        lo, hi = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
        vals = ((from_, "from"), (to_inc, "to - 1"))
    for v, name in vals:
        if not lo <= v <= hi:
            raise RuntimeError(f"{name} is out of bounds for {c10_name(dtype)} (on foo)")
    if dtype.is_floating_point:
        d = _DIGITS[dtype]
        for v, name in ((from_, "from"), (to_inc, "to - 1")):
            if v < -(1 << d) or v > (1 << d):
                warnings.warn(
                    f"{name} is out of bounds [-(2^{d}), 2^{d}]. Due to precision limitations "
                    f"{c10_name(dtype)} can support discrete uniform distribution only within this "
                    "range. This warning will become an error in version 1.7 release, please fix "
                    "the code in advance",
                    UserWarning,
                    stacklevel=3,
                )


def _random(self, from_: int, range_: int, generator):
    return _draw(_C.random_, self, (from_, range_), generator)


@impl("random_")
def random_(self, *, generator=None):
    # ATen's default range: [0, 2^digits] for floats, [0, max] for integers.
    if self.numel() == 0:
        return self
    dt = self.dtype
    if dt.is_floating_point:
        range_ = (1 << _DIGITS[dt]) + 1
    elif dt == torch.bool:
        range_ = 2
    else:
        range_ = torch.iinfo(dt).max + 1
    return _random(self, 0, range_, generator)


@impl("random_.from")
def random_from(self, from_, to=None, *, generator=None):
    dt = self.dtype
    from_ = int(from_)
    if to is not None:
        to = int(to)
        if not from_ < to:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to} (on foo)")
        if dt.is_floating_point:
            from_, to = _update_from(from_, dt), _update_to(to, dt)
            if not from_ < to:
                raise RuntimeError(
                    "random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, "
                    f"but got from={from_} >= to={to} (on foo)"
                )
        _check_in_range(from_, to - 1, dt)
        if self.numel() == 0:
            return self
        return _random(self, from_, to - from_, generator)
    if from_ != _I64_MIN:
        # [from, the dtype's largest value]
        if dt.is_floating_point:
            to_inc = min(1 << _DIGITS[dt], _I64_MAX)
            from_ = _update_from(from_, dt)
            if not from_ < to_inc:
                raise RuntimeError(
                    "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                    f"casted to dtype, but got from={from_} > to_inc={to_inc} (on foo)"
                )
        else:
            to_inc = 1 if dt == torch.bool else torch.iinfo(dt).max
        _check_in_range(from_, to_inc, dt)
        if self.numel() == 0:
            return self
        return _random(self, from_, to_inc - from_ + 1, generator)
    # Every int64 (range 2^64, passed as 0).
    if self.numel() == 0:
        return self
    if dt not in _FULL_RANGE_DTYPES:
        kernel = "random_full_64_bits_range_kernel_cpu"
        if dt in (torch.bool, torch.float16):
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{SCALAR_NAME[dt]}' (on foo)")
        raise RuntimeError(f"{kernel} handles only int64, double, float and bfloat16 (on foo)")
    return _random(self, _I64_MIN, 0, generator)


@impl("random_.to")
def random_to(self, to, *, generator=None):
    return random_from(self, 0, to, generator=generator)
