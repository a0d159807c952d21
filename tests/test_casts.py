"""Float -> integer casts on foo against torch CPU (x86-64): NaN, infinities and values out of the
target's range give what CPU's static_cast gives there (the "integer indefinite" value of x86's
truncating conversions), through `.to()` and `copy_`. One rule in Rust: `dtype::FromFloat`."""

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_fallback")

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
SPECIAL = [float("nan"), float("inf"), float("-inf"), 3e9, -3e9, 1e19, -1e19, 1e5, -1.0, 300.0, 2.7, -2.7, 0.0]


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dst", INTS, ids=str)
def test_float_to_int_matches_cpu(src, dst):
    x = torch.tensor(SPECIAL, dtype=torch.float64).to(src)
    f = x.to("foo")
    expected = x.to(dst)
    torch.testing.assert_close(f.to(dst).cpu(), expected, rtol=0, atol=0)
    out = torch.zeros(len(SPECIAL), dtype=dst, device="foo")
    out.copy_(f)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


def _f32_specials(n):
    """float32 values that stress rounding to 16 bits: ties to even, NaN payloads, infinities, float16
    overflow and subnormals, bfloat16 carries, signed zeros; repeated with random values up to n."""
    bits = [
        0x3F808000,  # bf16 tie, round down to even
        0x3F818000,  # bf16 tie, round up to even
        0x3F80F000,  # bf16 carry into the exponent
        0x7F7FFFFF,  # largest float: bf16 rounds to inf
        0x7FC00001,  # quiet NaN with a payload
        0x7F800001,  # signalling NaN
        0xFFC00000,  # negative NaN
        0x7F800000,  # inf
        0xFF800000,  # -inf
        0x80000000,  # -0
        0x477FF000,  # 65520: float16 rounds to inf
        0x477FE000,  # 65504: float16 max
        0x33800000,  # 2^-24: smallest float16 subnormal
        0x33000000,  # 2^-25: float16 tie to zero
        0x387FC000,  # just below float16's smallest normal
        0x00000001,  # float32 subnormal
    ]
    special = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    rand = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 100
    return torch.cat([special, rand])


@pytest.mark.parametrize("n", [0, 5, 1000, 300_000], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_float32_half_casts_are_cpus_bits(n, half):
    """float32 <-> float16/bfloat16 (autocast's casts): the contiguous bulk path, the strided staged path
    and copy_ into a preallocated tensor all give CPU's bits (ties, carries, overflow to inf, float16
    subnormals) at any size."""
    x = _f32_specials(n)
    f = x.to("foo")

    def same(actual, expected):
        """Bit for bit, except that a NaN only has to be a NaN: CPU's own NaN bits differ between its
        vectorized bfloat16 conversion (0xFFFF) and its scalar one (0x7FC0, for every NaN)."""
        actual = actual.cpu()
        nan = expected.isnan()
        assert torch.equal(actual.isnan(), nan)
        view = torch.int16 if expected.element_size() == 2 else torch.int32
        assert torch.equal(actual[~nan].view(view), expected[~nan].view(view))

    same(f.to(half), x.to(half))
    same(f[::3].to(half), x[::3].to(half))
    out = torch.empty(len(x), dtype=half, device="foo")
    out.copy_(f)
    same(out, x.to(half))
    h = x.to(half)
    same(h.to("foo").to(torch.float32), h.to(torch.float32))
    same(h.to("foo")[1::2].to(torch.float32), h[1::2].to(torch.float32))


def test_float32_half_cast_into_overlapping_memory_raises_as_cpu():
    """A cast whose output shares bytes with its input (of another dtype) raises CPU's overlap error."""
    for dev in ("cpu", "foo"):
        base = torch.zeros(64, dtype=torch.float32, device=dev)
        halves = base.view(torch.bfloat16)[8:72]
        with pytest.raises(RuntimeError, match="single memory location"):
            halves.copy_(base[:64])
