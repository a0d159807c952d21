"""Native OpInfo conformance of foo, as a ratchet.

Every OpInfo of PyTorch's op_db runs on the CPU and natively on foo (CPU
fallback off) for its first few sample inputs; see foo_rs/conformance.py for
the rules. The checked-in baselines (baseline_<dtype>.json: {op: "pass"}) list
the ops that passed when they were last written:

- an op of a baseline that no longer passes fails this test (a regression);
- an op that passes but is not in the baseline is only reported, with the
  command that adds it: ``python tests/conformance/update_baseline.py``.

The native coverage figures (ops passing natively / OpInfo ops supporting the
dtype on CPU) are printed in pytest's terminal summary.

The sweeps run in worker processes (a hang or a segfault in one op is
recorded, not fatal), two dtypes at a time; together they take a few minutes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import foo_rs  # noqa: F401  (registers the foo device)
from foo_rs import conformance

HERE = Path(__file__).resolve().parent
#: Sweep keys with a baseline: a dtype (values) or grad_<dtype> (gradients).
BASELINE_DTYPES = sorted(p.stem.removeprefix("baseline_") for p in HERE.glob("baseline_*.json"))


def _run(key, **kw):
    dtype, grad = conformance.parse_sweep_key(key)
    return conformance.run(dtype, grad=grad, **kw)


@pytest.fixture(scope="module")
def sweeps(request):
    """{dtype: results} of the baselined dtypes the selected tests need (all of
    them in a full run), two sweeps at a time."""
    needed = set()
    for item in request.session.items:
        if item.module is not request.module:
            continue
        if getattr(item, "originalname", None) == "test_native_opinfo_ratchet":
            needed.add(item.callspec.params["dtype"])
        elif getattr(item, "originalname", None) == "test_runner_classifies_ops":
            needed.add("float32")
    dtypes = [d for d in BASELINE_DTYPES if d in needed]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {d: pool.submit(_run, d) for d in dtypes}
        return {d: f.result() for d, f in futures.items()}


@pytest.mark.parametrize("dtype", BASELINE_DTYPES)
def test_native_opinfo_ratchet(dtype, sweeps, conformance_report):
    results = sweeps[dtype]
    baseline = json.loads((HERE / f"baseline_{dtype}.json").read_text())
    regressed = [op for op in baseline if results.get(op, {}).get("status") != "pass"]
    if regressed:
        # Once more, alone and with more time, so that a loaded machine's
        # timeout is not taken for a regression.
        again = _run(dtype, ops=regressed, op_timeout=120.0)
        for op in regressed:
            if op in again:
                results[op] = again[op]
        regressed = [op for op in regressed if results.get(op, {}).get("status") != "pass"]
    newly = sorted(op for op, r in results.items() if r["status"] == "pass" and op not in baseline)

    conformance_report.append(conformance.summary(results, *conformance.parse_sweep_key(dtype)))
    if newly:
        conformance_report.append(
            f"  {len(newly)} op(s) now pass natively for {dtype} but are not in baseline_{dtype}.json; "
            f"add them with `python tests/conformance/update_baseline.py`: " + ", ".join(newly)
        )
    if regressed:
        lines = [f"{len(regressed)} op(s) of baseline_{dtype}.json no longer pass natively on foo:"]
        for op in regressed:
            r = results.get(op, {"status": "gone", "detail": "no longer in op_db"})
            lines.append(f"  {op}: {r['status']}: {r.get('detail', r.get('missing', ''))}")
        pytest.fail("\n".join(lines), pytrace=False)


def test_baselines_exist():
    # The ratchet must be armed for float32 values and gradients and at least
    # one more dtype.
    assert {"float32", "grad_float32"} <= set(BASELINE_DTYPES) and len(BASELINE_DTYPES) >= 3, BASELINE_DTYPES


def test_runner_classifies_ops(sweeps):
    """The runner's verdicts on ops whose state does not depend on the kernels
    landing: view ops pass (metadata kernels are native), complex views and
    FFTs pass, sparse ops are out of scope, random ops are compared by metadata, and every
    OpInfo gets a verdict."""
    if "float32" not in sweeps:
        pytest.skip("no float32 baseline")
    r = sweeps["float32"]
    from torch.testing._internal.common_methods_invocations import op_db

    assert set(r) == {op.full_name for op in op_db}
    assert r["t"]["status"] == "pass", r["t"]
    assert r["transpose"]["status"] == "pass", r["transpose"]
    # foo holds complex dtypes (complex outputs are compared like any other);
    # sparse layouts are out of scope.
    for op in ("view_as_complex", "fft.fft"):
        assert r[op]["status"] == "pass", (op, r[op])
    assert r["to_sparse"]["status"] == "skip", r["to_sparse"]
    if r["randn"]["status"] == "pass":
        assert r["randn"].get("metadata_only"), r["randn"]
    # CUDA-only OpInfos are out of scope, not passes.
    assert r["jiterator_binary"]["status"] == "cuda_only", r["jiterator_binary"]
    # Conversions are compared by value where defined, attention by value
    # for its samples without dropout.
    for op in ("byte", "long"):
        assert r[op]["status"] == "pass" and not r[op].get("metadata_only"), (op, r[op])
    sdpa = r["nn.functional.scaled_dot_product_attention"]
    assert sdpa["status"] == "pass" and not sdpa.get("metadata_only"), sdpa
    assert 0 < sdpa.get("samples_by_metadata", 0) < sdpa["samples"], sdpa
    for op, res in r.items():
        assert res["status"] in (
            "pass",
            "fail",
            "unsupported",
            "error",
            "timeout",
            "crash",
            "skip",
            "cuda_only",
            "n/a",
        ), (op, res)
        if res["status"] == "unsupported":
            assert res.get("missing") or res.get("detail"), (op, res)


# ----------------------------------------------------------------------------
# PyTorch's device-generic test machinery, instantiated for foo.
#
# torch 2.13's common_device_type has PrivateUse1TestBase: once foo_rs is
# imported (conftest does it before this module imports common_device_type),
# `torch.foo.is_available()` puts it among the device bases, and
# instantiate_device_type_tests(..., only_for="privateuse1") makes
# TestFooGenericPRIVATEUSE1 whose tests receive device="foo:0". The @ops
# decorator works too (test per OpInfo x dtype). These tests run with the CPU
# fallback on: they check the device integration, not native coverage (that is
# the sweep above). PyTorch's own test files (test_torch.py, test_ops.py) are
# not installed with the wheel, so their classes cannot be imported here.
# ----------------------------------------------------------------------------

from torch.testing._internal.common_device_type import (  # noqa: E402
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402

# (Importing common_utils calls torch.backends.disable_global_flags() for the
# whole session; no foo test sets torch.backends flags.)

_GENERIC_OPS = ("clone", "t", "transpose", "view", "reshape", "zero_", "fill", "contiguous", "narrow", "expand")
_FOO_FLOAT_INT = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
)


class TestFooGeneric(TestCase):
    def test_device_is_foo(self, device):
        self.assertEqual(torch.device(device).type, "foo")
        self.assertEqual(self.device_type, "foo")

    @dtypes(*_FOO_FLOAT_INT)
    def test_roundtrip_and_fill(self, device, dtype):
        x = torch.testing.make_tensor((3, 5), device="cpu", dtype=dtype)
        y = x.to(device)
        self.assertEqual(y.device, torch.device(device))
        self.assertEqual(y.cpu(), x)
        y.fill_(1)
        self.assertEqual(y.cpu(), torch.ones(3, 5, dtype=dtype))
        self.assertEqual(torch.zeros(2, 2, dtype=dtype, device=device).cpu(), torch.zeros(2, 2, dtype=dtype))

    def test_multi_device(self, device):
        devices = self.get_all_devices()
        self.assertGreaterEqual(len(devices), 2)
        for d in devices:
            t = torch.arange(4.0).to(d)
            self.assertEqual(str(t.device), d)
            self.assertEqual(t.cpu(), torch.arange(4.0))

    @ops([op for op in op_db if op.full_name in _GENERIC_OPS], allowed_dtypes=(torch.float32, torch.int64))
    def test_matches_cpu(self, device, dtype, op):
        for i, sample in enumerate(op.sample_inputs(device, dtype)):
            if i >= 4:
                break
            cpu_sample = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            expected = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            self.assertEqual(actual, expected, exact_device=False)


instantiate_device_type_tests(TestFooGeneric, globals(), only_for="privateuse1")
