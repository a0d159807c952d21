"""Random numbers on foo: seeding, state replay, torch.manual_seed."""

import pytest
import torch


def test_same_seed_same_numbers():
    torch.foo.manual_seed(1234)
    a = torch.randn(1000, device="foo").cpu()
    torch.foo.manual_seed(1234)
    b = torch.randn(1000, device="foo").cpu()
    assert torch.equal(a, b)
    c = torch.randn(1000, device="foo").cpu()
    assert not torch.equal(a, c)


def test_torch_manual_seed_reaches_foo():
    torch.manual_seed(7)
    a = torch.randn(64, device="foo").cpu()
    torch.manual_seed(7)
    b = torch.randn(64, device="foo").cpu()
    assert torch.equal(a, b)
    assert torch.foo.initial_seed() == 7


def test_rng_state_replays_a_sequence():
    torch.foo.manual_seed(99)
    torch.randn(10, device="foo")
    state = torch.foo.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    seq1 = [torch.rand(7, device="foo").cpu() for _ in range(3)]
    torch.foo.set_rng_state(state)
    seq2 = [torch.rand(7, device="foo").cpu() for _ in range(3)]
    for x, y in zip(seq1, seq2):
        assert torch.equal(x, y)


def test_devices_have_separate_generators():
    torch.foo.manual_seed_all(5)
    a0 = torch.randn(8, device="foo:0").cpu()
    a1 = torch.randn(8, device="foo:1").cpu()
    assert torch.equal(a0, a1)  # same seed, same stream
    states = torch.foo.get_rng_state_all()
    assert len(states) == 2
    torch.randn(8, device="foo:0")
    assert not torch.equal(torch.foo.get_rng_state(0), states[0])
    assert torch.equal(torch.foo.get_rng_state(1), states[1])


def test_normal_statistics_and_dtypes():
    torch.foo.manual_seed(0)
    x = torch.randn(100_000, device="foo", dtype=torch.float64).cpu()
    assert abs(x.mean().item()) < 0.02
    assert abs(x.std().item() - 1.0) < 0.02
    u = torch.rand(100_000, device="foo").cpu()
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01
    for dt in (torch.float16, torch.bfloat16):
        assert torch.randn(10, device="foo", dtype=dt).dtype == dt


def test_normal_rejects_negative_std():
    with pytest.raises(RuntimeError, match="std"):
        torch.empty(3, device="foo").normal_(0.0, -1.0)


def test_set_rng_state_rejects_bad_state():
    with pytest.raises(RuntimeError):
        torch.foo.set_rng_state(torch.zeros(3, dtype=torch.uint8))
