"""foo_rs: the ``foo`` PyTorch device, whose memory and compute are Rust.

``import foo_rs`` is all a user does; then ``torch.randn(3, device="foo")``,
``model.to("foo")``, ``torch.save``/``torch.load(map_location="foo")`` and
``torch.autocast("foo")`` work.
"""

from __future__ import annotations

import atexit
import os

import torch  # first: the native module resolves torch's own libc10/libtorch_cpu

from . import _torch_check

_torch_check.check()  # before loading the native module: an ImportError, not a loader error

from . import _C  # noqa: E402
from ._dtypes import SUPPORTED_DTYPES, UNSUPPORTED_DTYPES  # noqa: E402

torch.utils.rename_privateuse1_backend("foo")

from . import foo as _device_module  # noqa: E402

torch._register_device_module("foo", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True,
    for_module=True,
    for_packed_sequence=True,
    for_storage=True,
    unsupported_dtype=UNSUPPORTED_DTYPES,
)

from . import _ops  # noqa: E402  (registers the kernels)

# torch.autocast("foo")'s kernels (CUDA's policies) are C++, rust/glue/autocast.cpp: _C registers them.
from . import ops  # noqa: E402,F401  (foo's own operators, torch.ops.foo.*)
from . import _compile  # noqa: E402
from ._compile import FooCompileError  # noqa: E402

_compile.install(_device_module)  # torch.compile: registers with Dynamo/Inductor when they load
from ._fallback import (  # noqa: E402  (registers the CPU fallback)
    FooFallbackWarning,
    fallback_disabled,
    fallback_enabled,
    fallback_stats,
    reset_fallback_stats,
    set_fallback_enabled,
)

if torch.distributed.is_available():
    from . import distributed as _distributed  # noqa: E402

    _distributed.register()  # the "foo_gloo" c10d backend, foo's default (foo_rs/distributed.py)


#: The exit-time backward passes below, (leaf, output, seed gradient) each,
#: kept alive to the end.
_EXIT_PASSES: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []


def _autograd_device_threads_started() -> bool:
    """Whether autograd has started its per-device worker threads.

    The engine starts them on the first backward that touches a device other
    than the CPU and names them ``pt_autograd_<index>``. Where the thread
    names cannot be read (no /proc), answer yes: draining is always safe
    before finalization, only wasted.
    """
    try:
        tasks = os.listdir("/proc/self/task")
        names = []
        for task in tasks:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read())
    except OSError:
        return True
    return any(name.startswith("pt_autograd_") for name in names)


def _drain_autograd_threads() -> None:
    """At interpreter exit, let autograd's foo worker threads finish.

    Backward passes on foo run on autograd's per-device worker thread (as on
    CUDA). After the caller's backward returns, that thread still drops its
    reference to the finished graph task; if that was the last reference to
    the returned gradients, the drop takes the GIL. Once Python is
    finalizing, a thread that takes the GIL is ended with ``pthread_exit``
    inside C++ frames, and the process aborts ("terminate called without an
    active exception", pytorch/pytorch#38228): 4 runs in 30 of a script whose
    last line discards an ``autograd.grad`` of a conv2d on foo. A thread
    finishes one task before it takes the next, so one more small backward
    per device, run while the GIL is released, waits until every earlier drop
    is done. Every tensor it makes (leaf, output, seed gradient) stays
    referenced here, so its own drops need no GIL.

    A process that never ran a backward on foo has no such threads; starting
    them at exit would only add threads that take the GIL while Python shuts
    down (each takes it once as it starts), so the drain runs only when they
    exist.
    """
    if not _autograd_device_threads_started():
        return
    try:
        with torch.enable_grad():
            for index in range(torch.foo.device_count()):
                leaf = torch.zeros((), device=f"foo:{index}", requires_grad=True)
                out = leaf.sum()
                seed = torch.ones((), device=f"foo:{index}")
                _EXIT_PASSES.append((leaf, out, seed))
                torch.autograd.backward(out, seed)
    except Exception:  # noqa: BLE001  (exit must not fail: e.g. a child forked after foo initialised)
        pass


atexit.register(_drain_autograd_threads)


def live_blocks(device: int | None = None) -> int:
    """Blocks the Rust allocator has handed out and not yet taken back."""
    return _C.live_blocks(device)


def native_ops() -> frozenset[str]:
    """The aten overloads with a native foo kernel (Rust behind torch.library)."""
    return _ops.registered_ops()


def python_kernel_calls():
    """A Counter of aten overloads by how often their foo kernel ran Python
    since import: ops with no C++ kernel yet, and calls a native-path kernel
    handed to its Python kernel. Empty for a model step means the step ran
    dispatcher -> C++ -> Rust throughout."""
    return _ops.python_kernel_calls()


__version__ = "0.1.0"
__all__ = [
    "FooCompileError",
    "FooFallbackWarning",
    "SUPPORTED_DTYPES",
    "UNSUPPORTED_DTYPES",
    "fallback_disabled",
    "fallback_enabled",
    "fallback_stats",
    "live_blocks",
    "native_ops",
    "python_kernel_calls",
    "reset_fallback_stats",
    "set_fallback_enabled",
]
