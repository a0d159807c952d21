"""Fused attention over several of the kernel's tiles (256 query rows and 256
keys each, capped at the lengths): the online softmax across key tiles, partial
last tiles, causal tiles on and off the diagonal, masks, grouped-query heads
and the backward's key chunks agree with CPU's math SDPA in float64."""

from __future__ import annotations

import pytest
import torch

from test_attention import check, randn

pytestmark = pytest.mark.usefixtures("no_fallback")

# (batch, q heads, kv heads, L, S, head dim): L and S past one and two tiles.
SHAPES = [
    (1, 2, 1, 300, 530, 16),
    (1, 1, 1, 600, 257, 8),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_values_and_grads_over_tiles(shape, causal):
    b, hq, hk, lq, s, d = shape
    q, k, v = randn(b, hq, lq, d, seed=1), randn(b, hk, s, d, seed=2), randn(b, hk, s, d, seed=3)
    check(q, k, v, torch.float32, is_causal=causal, enable_gqa=hq != hk)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_float_mask_with_its_gradient_over_tiles(dtype):
    q, k, v = randn(1, 2, 280, 8, seed=1), randn(1, 2, 520, 8, seed=2), randn(1, 2, 520, 8, seed=3)
    mask = randn(1, 2, 280, 520, seed=4)
    check(q, k, v, dtype, attn_mask=mask, mask_grad=True)


def test_bool_mask_hiding_whole_tiles():
    q, k, v = randn(1, 1, 300, 8, seed=1), randn(1, 1, 600, 8, seed=2), randn(1, 1, 600, 8, seed=3)
    mask = torch.ones(300, 600, dtype=torch.bool)
    mask[:, :300] = False  # the first key tile is hidden from every row
    mask[:10] = False  # rows that see no key give 0
    check(q, k, v, torch.float32, attn_mask=mask)
