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
