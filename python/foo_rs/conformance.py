"""Native OpInfo conformance of foo: how much of PyTorch's op database foo
runs *natively* (CPU fallback off) with results that match the CPU.

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``
that supports the dtype on the CPU, and for ``max_samples`` (32) of its sample
inputs (``op.sample_inputs("cpu", dtype)``; all of them when it has fewer,
else spread over its first 64), the op runs on the CPU and
on foo (every tensor of the sample copied to foo, storage for storage, so that
strides, offsets and aliasing are kept) and the results are compared with
``torch.testing.assert_close`` (dtype, shape, values; NaN == NaN). The sample's
tensors are compared afterwards too, so a kernel that writes where it should
not is caught. The foo side runs with the CPU fallback switched off.

Each op gets one status:

``pass``         every sample matched (an exception CPU raises too, of exactly
                 the same type, counts as a match).
``fail``         a result (or a mutated input) differs from the CPU's.
``unsupported``  an aten op on the way has no foo kernel (NotImplementedError
                 from the switched-off fallback); ``missing`` names it.
``error``        foo raised where CPU did not (or another exception type).
``timeout``      the op took longer than ``op_timeout`` seconds.
``crash``        the worker process died (e.g. a segfault) during the op.
``skip``         every sample needs a dtype or layout foo cannot hold (sparse,
                 complex32, ...), or the op is on SKIP_OPS.
``cuda_only``    an OpInfo for CUDA alone (``jiterator_*``).
``n/a``          the OpInfo does not support the dtype on the CPU.

Ops whose outputs are not comparable across devices (random ops, uninitialised
memory, undefined orders: OpInfo's own ``test_compare_cpu`` skips and
``has_nondeterministic_output``) are compared by metadata only (dtype, shape,
device); their result carries ``"metadata_only": true`` and the summary counts
them apart from the ops compared by value. Two kinds are compared by value
where they can be: dtype conversions (``byte``, ``int``, ...) wherever the
conversion is defined, and attention's samples without dropout.

The native coverage figure is ``pass / (ops supporting the dtype on CPU, less
cuda_only)``; the figure over in-scope ops (excluding ``skip`` as well) is
printed too.

The sweep runs in a worker process watched by this one: an op that hangs past
the hard timeout, or crashes the worker, is recorded and the sweep resumes with
the next op in a fresh worker.

Usage::

    python -m foo_rs.conformance --dtype float32            # print coverage
    python -m foo_rs.conformance --dtype float32 --write-baseline tests/conformance/baseline_float32.json
    python -m foo_rs.conformance --dtype int64 --ops add,mul -v
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any
from collections.abc import Iterable

__all__ = [
    "DTYPES",
    "SKIP_OPS",
    "TOLERANCES",
    "run",
    "coverage",
    "passing",
    "summary",
    "sweep_key",
    "parse_sweep_key",
    "main",
]

#: Names accepted by --dtype.
DTYPES = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)

#: (rtol, atol) per dtype of the value compared. Looser than assert_close's
#: defaults for floating types: foo's kernels may sum in another order than
#: CPU's (SIMD lanes, threads), and may round intermediates differently (CPU
#: rounds some bf16/fp16 intermediates to the narrow type, foo computes in
#: fp32). Sample values are up to ~9 in size, so after cancellation a result
#: can be off by one unit in the last place *of an intermediate* of that size:
#: 2**-4 for bfloat16, 2**-7 for float16. Integers and bool are compared exactly.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "complex64": (1e-4, 1e-4),
    "complex128": (1e-7, 1e-7),
    "float16": (1e-3, 2**-7),
    "bfloat16": (1.6e-2, 2**-4),
}

#: Ops not run at all (full_name -> reason): they hang, take minutes, or need
#: something out of scope. Keep it short; a hang in foo is a bug to report.
SKIP_OPS: dict[str, str] = {}

#: Ops compared by metadata only (random values) that OpInfo does not flag.
METADATA_ONLY = {"randn", "randint", "rand", "normal.number_mean", "nn.functional.alpha_dropout"}

#: OpInfos that exist for CUDA alone (the jiterator compiles CUDA source at run
#: time; on any other device the OpInfo calls a Python reference): out of
#: scope, counted neither as passing nor in the denominator.
CUDA_ONLY_PREFIXES = ("jiterator_",)

#: Dtype conversions OpInfo skips in test_compare_cpu because a float that
#: does not fit the target type converts to an undefined value. They are
#: compared by value where the conversion is defined: every element of an
#: integer or bool source, and the float elements whose truncation fits.
CONVERSION_OPS = {"byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64"}

#: Ops that are random only when dropout is on: a sample with ``dropout_p``
#: 0 (or ``training=False``) is compared by value, one with dropout by
#: metadata. Values: where the sample keeps dropout_p (a keyword, or the
#: only plain float among the positional arguments).
DROPOUT_OPS = {
    "nn.functional.scaled_dot_product_attention": "kwarg",
    "nn.functional.multi_head_attention_forward": "arg",
}
_NOT_COMPARABLE_WORDS = ("deterministic", "not comparable", "undefined", "random")

#: Samples are drawn from the first SAMPLE_POOL ones an OpInfo generates,
#: spread evenly (first and last included): the first few of an op are often
#: alike (e.g. all tensor-tensor), the later ones bring scalars, broadcasting,
#: empty and non-contiguous inputs.
SAMPLE_POOL = 64

_MARK = "@@FOO_CONFORMANCE "


def _spread(n: int, k: int) -> list[int]:
    """k indices of range(n) spread evenly, first and last included."""
    if n <= k:
        return list(range(n))
    if k <= 1:
        return [0][:k]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


_FALLBACK_OFF_MSG = "CPU fallback is switched off"
#: foo's refusal of a dtype it cannot hold (an intermediate, e.g. complex in
#: fft.irfft): that sample is out of scope. A refusal of a dtype foo does hold
#: stays an error.
_UNHOLDABLE_DTYPE = re.compile(
    r"foo does not support dtype (torch\.)?(Complex|complex|Float8|float8|UInt(16|32|64)|uint(16|32|64)|Q|q|Bits|bits)"
)


# --------------------------------------------------------------------------- worker


class _Timeout(Exception):
    pass


class _SkipSample(Exception):
    pass


class _Unsupported(Exception):
    """The op (not one sample) needs the CPU fallback: the op's verdict."""


def _alarm(signum, frame):  # pragma: no cover - timing dependent
    raise _Timeout()


def _emit(out, **rec) -> None:
    out.write(_MARK + json.dumps(rec) + "\n")
    out.flush()


def _skip_reason(decorator) -> str | None:
    """The reason of a ``unittest.skip(reason)`` decorator, else None."""
    if "skip.<locals>" not in getattr(decorator, "__qualname__", ""):
        return None
    for cell in decorator.__closure__ or ():
        if isinstance(cell.cell_contents, str):
            return cell.cell_contents
    return ""


def _compare_cpu_skipped(op, dtype) -> bool:
    """True when the op's outputs cannot be compared across devices: random
    ops, uninitialised memory, undefined results or orders (OpInfo's own
    test_compare_cpu skips that give such a reason, has_nondeterministic_output,
    and METADATA_ONLY)."""
    if op.full_name in METADATA_ONLY or getattr(op, "has_nondeterministic_output", False):
        return True
    if op.full_name in CONVERSION_OPS or op.full_name in DROPOUT_OPS:
        return False  # compared by value where defined (see run_op)
    for di in getattr(op, "decorators", ()):
        is_active = getattr(di, "is_active", None)
        if is_active is None or getattr(di, "device_type", None) is not None:
            continue
        try:
            active = is_active("TestCommon", "test_compare_cpu", "privateuse1", dtype, {})
        except Exception:
            active = False
        if not active:
            continue
        for d in di.decorators:
            reason = (_skip_reason(d) or "").lower()
            if any(w in reason for w in _NOT_COMPARABLE_WORDS):
                return True
    return False


def _sample_is_random(op_name: str, sample) -> bool:
    """Whether a sample of a DROPOUT_OPS op draws random numbers."""
    where = DROPOUT_OPS.get(op_name)
    if where is None:
        return False
    if where == "kwarg":
        p = sample.kwargs.get("dropout_p", 0.0)
    else:
        floats = [a for a in sample.args if type(a) is float]
        p = floats[0] if len(floats) == 1 else 1.0  # not found: treat as random
        if sample.kwargs.get("training", True) is False:
            p = 0.0
    return p != 0.0


def _conversion_mask(src, out):
    """Elements where CONVERSION_OPS' conversion of ``src`` into ``out``'s
    dtype is defined (see CONVERSION_OPS)."""
    import torch

    if not (src.dtype.is_floating_point or src.dtype.is_complex):
        return torch.ones(src.shape, dtype=torch.bool)
    info = torch.iinfo(out.dtype)
    t = src.real.double().trunc() if src.dtype.is_complex else src.double().trunc()
    return t.isfinite() & (t >= info.min) & (t <= info.max)


def _worker(
    dtype_name: str, start: int, only: set[str] | None, max_samples: int, op_timeout: float, grad: bool = False
) -> None:
    import warnings

    # The protocol goes to the original stdout; everything else to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")

    import torch
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

    import foo_rs
    from foo_rs._dtypes import SUPPORTED_DTYPES
    from torch.testing._internal.common_methods_invocations import op_db

    dtype = getattr(torch, dtype_name)
    rtol, atol = TOLERANCES.get(dtype_name, (0.0, 0.0))
    foo0 = torch.device("foo", 0)
    torch.foo.set_device(0)
    signal.signal(signal.SIGALRM, _alarm)

    def check_cpu_value(x):
        if isinstance(x, torch.Tensor):
            if x.layout != torch.strided:
                raise _SkipSample(f"layout {x.layout}")
            if x.dtype not in SUPPORTED_DTYPES:
                raise _SkipSample(f"dtype {x.dtype}")
            if x.is_conj() or x.is_neg():
                raise _SkipSample("conj/neg bit")
        return x

    class ToFoo:
        """Copies CPU tensors to foo storage by storage (keeps views/aliasing)."""

        def __init__(self):
            self.storages: dict[int, Any] = {}

        def __call__(self, x):
            if isinstance(x, torch.device) and x.type == "cpu":
                return foo0
            if not isinstance(x, torch.Tensor):
                return x
            check_cpu_value(x)
            if x.device.type != "cpu":
                return x
            st = x.untyped_storage()
            key = st.data_ptr()
            foo_st = self.storages.get(key) if st.nbytes() else None
            if foo_st is None:
                foo_st = torch.UntypedStorage(st.nbytes(), device=foo0)
                if st.nbytes():
                    dst = torch.empty(0, dtype=torch.uint8, device=foo0).set_(foo_st)
                    dst.copy_(torch.empty(0, dtype=torch.uint8).set_(st))
                    self.storages[key] = foo_st
            t = torch.empty(0, dtype=x.dtype, device=foo0)
            t.set_(foo_st, x.storage_offset(), x.shape, x.stride())
            return t

    def is_cpu_device(v):
        return (isinstance(v, str) and v == "cpu") or (isinstance(v, torch.device) and v.type == "cpu")

    def meta_twins(op, n):
        """The op's first ``n`` samples made on the meta device (None where
        that fails): where a twin still holds a CPU tensor (or names the CPU),
        the sample function pinned it to the CPU (e.g. tensor_split's
        indices), and it stays there on the foo side."""
        twins = []
        try:
            for s in op.sample_inputs("meta", dtype, requires_grad=False):
                if len(twins) >= n:
                    break
                twins.append(tree_flatten((s.input, s.args, s.kwargs)))
        except Exception:  # noqa: BLE001 - not every sample function runs on meta
            pass
        return twins + [None] * (n - len(twins))

    def to_foo_sample(sample, twin):
        tf = ToFoo()
        flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
        pinned: set[int] = set()
        if twin is not None and len(twin[0]) == len(flat) and str(twin[1]) == str(spec):
            pinned = {
                j
                for j, m in enumerate(twin[0])
                if is_cpu_device(m) or (isinstance(m, torch.Tensor) and m.device.type == "cpu")
            }
        out = []
        for j, v in enumerate(flat):
            if j in pinned:
                out.append(v)
            elif is_cpu_device(v):
                out.append(foo0)
            elif isinstance(v, torch.Tensor) and v.requires_grad:
                # Gradient mode: the foo twin of a tensor the CPU side
                # differentiates by is a leaf foo differentiates by.
                out.append(tf(v.detach()).requires_grad_(True))
            else:
                out.append(tf(v))
        inp, args, kwargs = tree_unflatten(out, spec)
        # A device the sample function pinned to the CPU (e.g. zeros_like(x,
        # device="cpu")) makes CPU outputs legitimate.
        cpu_ok = any(is_cpu_device(flat[j]) for j in pinned)
        return inp, args, kwargs, cpu_ok

    def back_to_cpu(x, cpu_ok=False):
        if isinstance(x, torch.Tensor):
            if x.device != foo0 and not (cpu_ok and x.device.type == "cpu"):
                raise AssertionError(f"output on {x.device}, expected {foo0}")
            return x.cpu()
        return x

    def tensors_of(tree):
        return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]

    def meta(x):
        if isinstance(x, torch.Tensor):
            return ("tensor", x.dtype, tuple(x.shape))
        if isinstance(x, (int, float, bool, complex, str, type(None))):
            return (type(x).__name__,)
        return (type(x).__name__,)

    def compare(actual, expected, metadata_only):
        if metadata_only:
            fa, sa = tree_flatten(actual)
            fe, se = tree_flatten(expected)
            a, e = [meta(v) for v in fa], [meta(v) for v in fe]
            if a != e or len(fa) != len(fe):
                raise AssertionError(f"metadata differs: foo {a} vs cpu {e}")
            return
        fa, sa = tree_flatten(actual)
        fe, se = tree_flatten(expected)
        # (tree_map rebuilds a torch.Size as a tuple)
        if len(fa) != len(fe) or str(sa).replace("Size", "tuple") != str(se).replace("Size", "tuple"):
            raise AssertionError(f"structure differs: foo {sa} vs cpu {se}")
        for j, (a, e) in enumerate(zip(fa, fe)):
            # Tolerance by the dtype of the value compared (an int64 op may
            # well return floats), exact for integers and bool.
            if isinstance(e, torch.Tensor):
                tol = TOLERANCES.get(str(e.dtype).removeprefix("torch."), (0.0, 0.0))
            elif isinstance(e, float):
                tol = (rtol, atol) if dtype.is_floating_point else TOLERANCES["float64"]
            else:
                tol = (0.0, 0.0)
            torch.testing.assert_close(
                a,
                e,
                rtol=tol[0],
                atol=tol[1],
                equal_nan=True,
                check_device=False,
                check_dtype=True,
                check_layout=True,
                check_stride=False,
                msg=(lambda m, j=j: f"output {j}: {m}") if len(fe) > 1 else None,
            )

    def at_least_as_accurate(op, sample, actual, expected) -> bool:
        """For a float16/bfloat16 result that differs from CPU's beyond the
        tolerance: whether foo's is at least as close as CPU's to the op
        computed in float64 on the same inputs. CPU rounds some intermediates
        to the narrow type (e.g. bf16 conv_transpose accumulates in bf16, up
        to ~2 off on sample-sized values) where foo accumulates in fp32; foo
        must not be failed for being more accurate than the CPU."""
        if dtype not in (torch.float16, torch.bfloat16):
            return False

        def wide(x):
            return x.double() if isinstance(x, torch.Tensor) and x.dtype == dtype else x

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = op(tree_map(wide, sample.input), *tree_map(wide, sample.args), **tree_map(wide, sample.kwargs))
                ref = sample.output_process_fn_grad(ref)
        except Exception:  # noqa: BLE001 - no float64 reference: judge by CPU alone
            return False
        fa, fe, fr = tree_flatten(actual)[0], tree_flatten(expected)[0], tree_flatten(ref)[0]
        if not (len(fa) == len(fe) == len(fr)):
            return False
        rtol, atol = TOLERANCES[str(dtype).removeprefix("torch.")]
        for a, e, r in zip(fa, fe, fr):
            if not isinstance(e, torch.Tensor) or e.dtype != dtype:
                continue  # the other outputs already compared equal to CPU's
            if not isinstance(r, torch.Tensor) or r.shape != e.shape or a.shape != e.shape:
                return False
            a, e, r = a.double(), e.double(), r.double()
            foo_err = (a - r).abs()
            cpu_err = (e - r).abs()
            both_nan = a.isnan() & e.isnan()
            ok = both_nan | (foo_err <= cpu_err + atol + rtol * r.abs())
            if not bool(ok.all()):
                return False
        return True

    def stride_note(actual, expected):
        fa, _ = tree_flatten(actual)
        fe, _ = tree_flatten(expected)
        for a, e in zip(fa, fe):
            if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.shape == e.shape:
                sa = [s for n, s in zip(a.shape, a.stride()) if n > 1]
                se = [s for n, s in zip(e.shape, e.stride()) if n > 1]
                if sa != se:
                    return f"strides {tuple(a.stride())} vs cpu {tuple(e.stride())} for shape {tuple(a.shape)}"
        return None

    def short(e: BaseException) -> str:
        s = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")
        return s[:400]

    def judge_exceptions(where, cpu_exc, foo_exc):
        """What the exceptions of one sample (either may be None) mean: a
        result dict that ends the op (unsupported, error), "skip" (foo
        refused a dtype it cannot hold), "match" (both raised the same
        type), or None (neither raised: compare the results)."""
        if isinstance(foo_exc, NotImplementedError) and _FALLBACK_OFF_MSG in str(foo_exc):
            missing = str(foo_exc).split("'")[1] if "'" in str(foo_exc) else "?"
            return {"status": "unsupported", "missing": missing, "detail": f"{where} -> {short(foo_exc)}"}
        if isinstance(foo_exc, NotImplementedError) and "_overrideable" in str(foo_exc):
            missing = "aten::" + str(foo_exc).split()[0]
            return {"status": "unsupported", "missing": missing, "detail": f"{where} -> {short(foo_exc)}"}
        if foo_exc is not None and cpu_exc is None and _UNHOLDABLE_DTYPE.search(str(foo_exc)):
            return "skip"
        if cpu_exc is None and foo_exc is None:
            return None
        if cpu_exc is not None and foo_exc is not None and type(foo_exc) is type(cpu_exc):
            return "match"
        if cpu_exc is None:
            return {"status": "error", "detail": f"{where} -> foo raised {short(foo_exc)}; CPU did not"}
        if foo_exc is None:
            return {"status": "error", "detail": f"{where} -> CPU raised {short(cpu_exc)}; foo did not"}
        return {"status": "error", "detail": f"{where} -> foo raised {short(foo_exc)}; CPU raised {short(cpu_exc)}"}

    def chosen_samples(op, requires_grad):
        """(index among the op's samples, sample, its meta twin, a label) for
        the samples a sweep compares: up to `max_samples` spread over the
        first `SAMPLE_POOL`; the gradient sweep leaves out random samples
        (dropout on: gradients not comparable)."""
        torch.manual_seed(0)
        pool = []
        for k, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
            if requires_grad and _sample_is_random(op.full_name, sample):
                continue
            pool.append((k, sample))
            if len(pool) >= SAMPLE_POOL:
                break
        chosen = [pool[j] for j in _spread(len(pool), max_samples)]
        twins = meta_twins(op, chosen[-1][0] + 1 if chosen else 0)
        for i, sample in chosen:
            where = f"sample {i}: {sample.summary() if hasattr(sample, 'summary') else ''}"
            yield i, sample, twins[i], where.replace('device="cpu", ', "").replace("SampleInput(", "(")[:240]

    def sample_on_foo(sample, twin):
        """The sample's arguments on foo (see to_foo_sample); raises
        _SkipSample for a sample foo cannot take, and _Unsupported when
        copying it to foo needs the fallback."""
        try:
            tree_map(check_cpu_value, (sample.input, sample.args, sample.kwargs))
            return to_foo_sample(sample, twin)
        except NotImplementedError as e:
            if _FALLBACK_OFF_MSG in str(e):
                raise _Unsupported("copying the sample to foo: " + short(e)) from e
            raise

    def run_op(op):
        op_metadata_only = _compare_cpu_skipped(op, dtype)
        n_run = n_skip = n_metadata = 0
        notes: list[str] = []
        for i, sample, twin, where in chosen_samples(op, requires_grad=False):
            metadata_only = op_metadata_only or _sample_is_random(op.full_name, sample)
            flat_sample = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
            if not any(isinstance(v, torch.Tensor) or is_cpu_device(v) for v in flat_sample):
                # e.g. arange(1, 3, 1): no tensor and no device, so nothing
                # can be put on foo; the op runs on the CPU either way.
                n_skip += 1
                notes.append(f"sample {i} skipped: no tensor or device to put on foo")
                continue
            try:
                finp, fargs, fkwargs, cpu_ok = sample_on_foo(sample, twin)
            except _SkipSample as e:
                n_skip += 1
                notes.append(f"sample {i} skipped: {e}")
                continue
            # CPU
            cpu_exc = cpu_out = None
            try:
                cpu_out = op(sample.input, *sample.args, **sample.kwargs)
                tree_map(check_cpu_value, cpu_out)
                cpu_out = sample.output_process_fn_grad(cpu_out)
                tree_map(check_cpu_value, cpu_out)
            except _SkipSample as e:
                n_skip += 1
                notes.append(f"sample {i} skipped: output {e}")
                continue
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001 - any CPU exception is a reference behaviour
                cpu_exc = e
            # foo, natively
            foo_exc = foo_out = None
            try:
                with foo_rs.fallback_disabled():
                    foo_out = op(finp, *fargs, **fkwargs)
                    foo_out = sample.output_process_fn_grad(foo_out)
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001
                foo_exc = e
            verdict = judge_exceptions(where, cpu_exc, foo_exc)
            if verdict == "skip":
                n_skip += 1
                notes.append(f"sample {i} skipped: needs a dtype foo cannot hold ({short(foo_exc)[:80]})")
                continue
            if verdict == "match":
                n_run += 1
                continue
            if verdict is not None:
                return verdict
            try:
                with foo_rs.fallback_disabled():
                    foo_cpu = tree_map(lambda x: back_to_cpu(x, cpu_ok), foo_out)  # noqa: B023  (called here)
                    foo_in = [t.cpu() for t in tensors_of((finp, fargs, fkwargs))]
            except NotImplementedError as e:
                if _FALLBACK_OFF_MSG in str(e):
                    return {"status": "unsupported", "detail": f"{where} -> reading the result back: {short(e)}"}
                return {"status": "error", "detail": f"{where} -> reading the result back: {short(e)}"}
            except AssertionError as e:
                return {"status": "fail", "detail": f"{where} -> {short(e)}"}
            if op.full_name in CONVERSION_OPS and isinstance(cpu_out, torch.Tensor):
                # Compare where the conversion is defined (see CONVERSION_OPS);
                # dtype, shape and the rest by metadata.
                try:
                    compare(foo_cpu, cpu_out, True)
                    mask = _conversion_mask(sample.input, cpu_out)
                    compare(foo_cpu[mask], cpu_out[mask], False)
                except AssertionError as e:
                    return {"status": "fail", "detail": f"{where} -> result where defined: {short(e)}"}
            else:
                try:
                    compare(foo_cpu, cpu_out, metadata_only)
                except AssertionError as e:
                    if metadata_only or not at_least_as_accurate(op, sample, foo_cpu, cpu_out):
                        return {"status": "fail", "detail": f"{where} -> result: {short(e)}"}
                    notes.append(f"sample {i}: differs from CPU beyond tolerance, but is closer to float64")
            try:
                compare(foo_in, tensors_of((sample.input, sample.args, sample.kwargs)), metadata_only)
            except AssertionError as e:
                return {"status": "fail", "detail": f"{where} -> inputs after the op: {short(e)}"}
            if not metadata_only:
                sn = stride_note(foo_out, cpu_out)
                if sn and len(notes) < 4:
                    notes.append(f"sample {i}: {sn}")
            n_run += 1
            n_metadata += metadata_only
        if n_run == 0:
            return {"status": "skip", "detail": "; ".join(notes[:3]) or "no samples"}
        res = {"status": "pass", "samples": n_run}
        if n_metadata == n_run:
            res["metadata_only"] = True
        elif n_metadata:
            res["samples_by_metadata"] = n_metadata
        if notes:
            res["notes"] = notes[:4]
        return res

    def grad_of(op, sample, inp, args, kwargs, cotangents_like=None):
        """Output(s) of the op on the sample, and the gradients of
        sum(out * cotangent) by each tensor of the sample that requires grad
        (None where unused). Cotangents are drawn from a fixed seed on the
        CPU (or copied from ``cotangents_like``, the CPU side's)."""
        out = sample.output_process_fn_grad(op(inp, *args, **kwargs))
        outs = [
            t
            for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor) and t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)
        ]
        leaves = [t for t in tensors_of((inp, args, kwargs)) if t.requires_grad]
        if not outs or not leaves:
            raise _SkipSample("no differentiable output or input")
        if cotangents_like is None:
            g = torch.Generator().manual_seed(1)
            cots = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]
        else:
            if len(cotangents_like) != len(outs):
                raise AssertionError(f"{len(outs)} differentiable outputs, cpu has {len(cotangents_like)}")
            cots = [c.to(o.device) for c, o in zip(cotangents_like, outs)]
        grads = torch.autograd.grad(outs, leaves, cots, allow_unused=True)
        # None (unused input) and zeros are the same gradient.
        grads = [torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, leaves)]
        return grads, cots

    def run_op_grad(op):
        n_run = n_skip = 0
        notes: list[str] = []
        for i, sample, twin, where in chosen_samples(op, requires_grad=True):
            try:
                finp, fargs, fkwargs, cpu_ok = sample_on_foo(sample, twin)
            except _SkipSample as e:
                n_skip += 1
                notes.append(f"sample {i} skipped: {e}")
                continue
            cpu_exc = cpu_grads = cots = None
            try:
                cpu_grads, cots = grad_of(op, sample, sample.input, sample.args, sample.kwargs)
            except _SkipSample as e:
                n_skip += 1
                notes.append(f"sample {i} skipped: {e}")
                continue
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001 - any CPU exception is a reference behaviour
                cpu_exc = e
            foo_exc = foo_grads = None
            try:
                with foo_rs.fallback_disabled():
                    foo_grads, _ = grad_of(op, sample, finp, fargs, fkwargs, cots)
                    foo_grads = [back_to_cpu(gr, cpu_ok) for gr in foo_grads]
            except _Timeout:
                raise
            except _SkipSample as e:
                foo_exc = AssertionError(f"foo: {e}; the CPU side differentiated")
            except Exception as e:  # noqa: BLE001
                foo_exc = e
            verdict = judge_exceptions(where, cpu_exc, foo_exc)
            if verdict == "skip":
                n_skip += 1
                notes.append(f"sample {i} skipped: needs a dtype foo cannot hold ({short(foo_exc)[:80]})")
                continue
            if verdict == "match":
                n_run += 1
                continue
            if verdict is not None:
                return verdict
            try:
                compare(foo_grads, cpu_grads, False)
            except AssertionError as e:
                return {"status": "fail", "detail": f"{where} -> gradient: {short(e)}"}
            n_run += 1
        if n_run == 0:
            return {"status": "skip", "detail": "; ".join(notes[:3]) or "no samples"}
        res = {"status": "pass", "samples": n_run}
        if notes:
            res["notes"] = notes[:4]
        return res

    for idx, op in enumerate(op_db):
        if idx < start:
            continue
        name = op.full_name
        if only is not None and name not in only:
            continue
        if dtype not in op.supported_dtypes("cpu") or (
            grad and (not op.supports_autograd or dtype not in op.supported_backward_dtypes("cpu"))
        ):
            _emit(proto, event="end", i=idx, name=name, status="n/a")
            continue
        if grad and _compare_cpu_skipped(op, dtype):
            # Random or uninitialised outputs: their gradients are not comparable.
            _emit(proto, event="end", i=idx, name=name, status="skip", detail="random outputs")
            continue
        if name.startswith(CUDA_ONLY_PREFIXES):
            _emit(proto, event="end", i=idx, name=name, status="cuda_only", detail="CUDA-only OpInfo")
            continue
        if name in SKIP_OPS:
            _emit(proto, event="end", i=idx, name=name, status="skip", detail=SKIP_OPS[name])
            continue
        _emit(proto, event="begin", i=idx, name=name)
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, op_timeout)
        try:
            res = run_op_grad(op) if grad else run_op(op)
        except _Unsupported as e:
            res = {"status": "unsupported", "detail": str(e)}
        except _Timeout:
            res = {"status": "timeout", "detail": f"> {op_timeout:g} s"}
        except Exception as e:  # noqa: BLE001 - e.g. sample generation failed
            res = {"status": "error", "detail": f"harness: {short(e)}"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        res["seconds"] = round(time.perf_counter() - t0, 3)
        _emit(proto, event="end", i=idx, name=name, **res)
    _emit(proto, event="done")


# --------------------------------------------------------------------------- supervisor


def run(
    dtype: str = "float32",
    ops: Iterable[str] | None = None,
    max_samples: int = 32,
    op_timeout: float = 20.0,
    hard_timeout: float | None = None,
    verbose: bool = False,
    grad: bool = False,
) -> dict[str, dict]:
    """Runs the sweep for ``dtype`` in watched worker processes.

    Returns {op full name: {"status": ..., "detail": ..., ...}} for every
    OpInfo (``n/a`` for those not supporting ``dtype`` on the CPU)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {DTYPES}")
    hard = hard_timeout if hard_timeout is not None else op_timeout + 40.0
    only = sorted(set(ops)) if ops is not None else None
    results: dict[str, dict] = {}
    start = 0
    env = dict(os.environ)
    env["FOO_RS_CPU_FALLBACK"] = "0"
    env.setdefault("FOO_RS_DEVICE_COUNT", "2")
    env["PYTHONUNBUFFERED"] = "1"
    while True:
        cmd = [
            sys.executable,
            "-m",
            "foo_rs.conformance",
            "--worker",
            "--dtype",
            dtype,
            "--start",
            str(start),
            "--max-samples",
            str(max_samples),
            "--op-timeout",
            str(op_timeout),
        ]
        if only is not None:
            cmd += ["--ops", ",".join(only)]
        if grad:
            cmd.append("--grad")
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            current: tuple[int, str] | None = None
            done = False
            buf = b""
            last = time.monotonic()
            # Importing torch + op_db counts against the first op's clock.
            limit = hard + 60.0
            killed = False
            while True:
                events = sel.select(timeout=1.0)
                if events:
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        text = line.decode(errors="replace")
                        if not text.startswith(_MARK):
                            continue
                        rec = json.loads(text[len(_MARK) :])
                        last = time.monotonic()
                        limit = hard
                        ev = rec.pop("event")
                        if ev == "begin":
                            current = (rec["i"], rec["name"])
                        elif ev == "end":
                            i, name = rec.pop("i"), rec.pop("name")
                            results[name] = rec
                            current = None
                            start = i + 1
                            if verbose:
                                _print_one(name, rec)
                        elif ev == "done":
                            done = True
                elif time.monotonic() - last > limit:
                    proc.kill()
                    killed = True
                    break
            rc = proc.wait()
            sel.close()
            proc.stdout.close()
            if done:
                return results
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-5:]
            if current is None:
                raise RuntimeError(
                    f"conformance worker for {dtype} exited (rc={rc}) between ops; stderr tail:\n" + "\n".join(tail)
                )
            i, name = current
            if killed:
                results[name] = {"status": "timeout", "detail": f"no answer within {hard:g} s (worker killed)"}
            else:
                sig = -rc if rc < 0 else None
                how = f"signal {signal.Signals(sig).name}" if sig else f"exit code {rc}"
                results[name] = {"status": "crash", "detail": f"worker died ({how}): " + " | ".join(tail)[-400:]}
            if verbose:
                _print_one(name, results[name])
            start = i + 1


def _print_one(name: str, rec: dict) -> None:
    detail = rec.get("detail") or rec.get("missing") or ""
    print(f"{rec['status']:>11}  {name:<40} {detail[:160]}", flush=True)


def sweep_key(dtype: str, grad: bool = False) -> str:
    """The name of a sweep (and of its baseline file, ``baseline_<key>.json``):
    the dtype, prefixed ``grad_`` in gradient mode."""
    return f"grad_{dtype}" if grad else dtype


def parse_sweep_key(key: str) -> tuple[str, bool]:
    """(dtype, grad) of a sweep_key."""
    grad = key.startswith("grad_")
    dtype = key.removeprefix("grad_")
    if dtype not in DTYPES:
        raise ValueError(f"unknown sweep {key!r}: a dtype of {DTYPES}, optionally prefixed grad_")
    return dtype, grad


def passing(results: dict[str, dict]) -> dict[str, str]:
    """The baseline form: {op: "pass"} for every passing op, sorted."""
    return {k: "pass" for k in sorted(results) if results[k]["status"] == "pass"}


def coverage(results: dict[str, dict]) -> dict[str, int]:
    counts = Counter(r["status"] for r in results.values())
    supported = sum(n for s, n in counts.items() if s not in ("n/a", "cuda_only"))
    return {
        "pass": counts["pass"],
        "pass_by_metadata_only": sum(1 for r in results.values() if r["status"] == "pass" and r.get("metadata_only")),
        "supported_on_cpu": supported,
        "in_scope": supported - counts["skip"],
        **{f"n_{s}": n for s, n in sorted(counts.items())},
    }


def summary(results: dict[str, dict], dtype: str, grad: bool = False) -> str:
    c = coverage(results)
    missing = Counter(r.get("missing") for r in results.values() if r["status"] == "unsupported" and r.get("missing"))
    lines = [
        f"foo native OpInfo {'gradient ' if grad else ''}coverage ({dtype}): {c['pass']}/{c['supported_on_cpu']} "
        f"OpInfo ops supporting {dtype}{' backward' if grad else ''} on CPU pass natively ({100.0 * c['pass'] / max(1, c['supported_on_cpu']):.1f}%); "
        f"{c['pass']}/{c['in_scope']} of those in scope ({100.0 * c['pass'] / max(1, c['in_scope']):.1f}%)",
        f"  of the {c['pass']} passing: {c['pass'] - c['pass_by_metadata_only']} compared by value, "
        f"{c['pass_by_metadata_only']} by metadata only (random or uninitialised outputs)",
        "  " + ", ".join(f"{k[2:]}={v}" for k, v in c.items() if k.startswith("n_")),
    ]
    if missing:
        lines.append(
            "  most wanted kernels (OpInfo ops blocked): " + ", ".join(f"{k} ({n})" for k, n in missing.most_common(15))
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foo_rs.conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--ops", default=None, help="comma-separated OpInfo full names (default: all)")
    p.add_argument("--max-samples", type=int, default=32)
    p.add_argument("--op-timeout", type=float, default=20.0)
    p.add_argument("--write-baseline", metavar="PATH", help="write {op: 'pass'} of the passing ops to PATH")
    p.add_argument("--json", metavar="PATH", help="write every op's full result to PATH")
    p.add_argument("-v", "--verbose", action="store_true", help="print each op's result as it comes")
    p.add_argument(
        "--grad",
        action="store_true",
        help="gradient mode: foo's gradients (forward and backward natively) against CPU's, every OpInfo with autograd",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    only = set(a.ops.split(",")) if a.ops else None
    if a.worker:
        _worker(a.dtype, a.start, only, a.max_samples, a.op_timeout, a.grad)
        return 0
    t0 = time.perf_counter()
    results = run(a.dtype, only, a.max_samples, a.op_timeout, verbose=a.verbose, grad=a.grad)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if a.write_baseline:
        with open(a.write_baseline, "w") as f:
            json.dump(passing(results), f, indent=1, sort_keys=True)
            f.write("\n")
    print(summary(results, a.dtype, grad=a.grad))
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
