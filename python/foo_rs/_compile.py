"""torch.compile for foo: a Dynamo device interface, an Inductor backend and
a Dynamo backend named ``"foo"``.

foo's memory is host memory, so the kernels Inductor generates for foo are
the vectorized C++ loops it generates for CPU (``CppScheduling``); they run on
foo's buffers, which the generated wrapper allocates with
``empty_strided(..., device="foo:i")`` (foo's Rust allocator). Ops Inductor
leaves as extern calls (mm, convolution, SDPA, ...) reach foo's kernels
through the dispatcher.

Decisions that key on the device type:

* foo is not a GPU (``is_gpu() -> False``): Inductor takes its host paths
  (C++ codegen, no Triton, no CUDA graphs, no stream guards).
* Random numbers: the backend "foo" compiles with Inductor's
  ``fallback_random``, so rand/randn/dropout/bernoulli in a compiled graph
  call foo's own Philox kernels: compiled values equal eager's for the same
  seed, and nothing random runs outside foo. (Inductor's fused C++ RNG
  path, which the plain "inductor" backend takes, draws its seeds with
  foo's native ``aten::random_.from`` and the values in the generated C++
  loops on foo's buffers: it works too, with values that differ from eager's.)
* Device properties, current device, synchronize: from ``torch.foo``.

``import foo_rs`` imports this module but not Dynamo: :func:`install`
arranges for the registration to run when ``torch._dynamo`` is first
imported, so users who never compile do not pay for it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

DEVICE = "foo"


class FooCompileError(RuntimeError):
    """A graph (or part of one) that cannot be compiled for foo."""


# --------------------------------------------------------------------------- Dynamo


@dataclass
class FooDeviceProperties:
    """What Inductor asks of a device's properties (the C++ loops use the
    host's cores; foo's pool follows torch.set_num_threads)."""

    name: str
    total_memory: int
    multi_processor_count: int
    index: int


def _device_interface():
    from torch._dynamo.device_interface import DeviceInterface

    class FooInterface(DeviceInterface):
        """Dynamo/Inductor's view of foo: a host device, one implicit stream."""

        class device:  # noqa: N801  (DeviceInterface's name)
            def __new__(cls, device: Any):
                return torch.foo.device(device)

        class Event(torch.Event):
            pass

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                torch.foo.set_device(device)

            @staticmethod
            def current_device() -> int:
                return torch.foo.current_device()

            @staticmethod
            def get_device_properties(device: Any = None) -> FooDeviceProperties:
                idx = torch.foo._get_device_index(device, optional=True)
                props = torch.foo.get_device_properties(idx)
                return FooDeviceProperties(
                    name=props.name,
                    total_memory=props.total_memory,
                    multi_processor_count=torch.get_num_threads(),
                    index=idx,
                )

        @staticmethod
        def current_device() -> int:
            return torch.foo.current_device()

        @staticmethod
        def set_device(device: Any) -> None:
            torch.foo.set_device(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = torch.foo.current_device()
            if device >= 0 and device != prev:
                torch.foo.set_device(device)
            return prev

        @staticmethod
        def exchange_device(device: int) -> int:
            return FooInterface.maybe_exchange_device(device)

        @staticmethod
        def device_count() -> int:
            return torch.foo.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch.foo.is_available()

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return 0

        @staticmethod
        def synchronize(device: Any = None) -> None:
            torch.foo.synchronize(device)

        @staticmethod
        def get_compute_capability(device: Any = None) -> str:
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @classmethod
        def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
            from ._dtypes import SUPPORTED_DTYPES

            return dtype in SUPPORTED_DTYPES

        @staticmethod
        def memory_allocated(device: Any = None) -> int:
            return torch.foo.memory_allocated(device)

        @staticmethod
        def is_triton_capable(device: Any = None) -> bool:
            return False

        @staticmethod
        def is_gpu() -> bool:
            return False

    return FooInterface


def _check_graph_devices(gm: torch.fx.GraphModule) -> None:
    """Refuses graphs whose inputs live on a device foo's kernels cannot use
    (CPU tensors are fine where eager allows them, e.g. 0-dim scalars)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(val, torch.Tensor) and val.device.type not in (DEVICE, "cpu"):
            raise FooCompileError(
                f"torch.compile(backend='foo'): input {node.target!r} is on {val.device}; "
                f"the foo backend compiles graphs on foo (and CPU) tensors only. "
                f"Move it with .to('foo') or use another backend."
            )


def foo_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend ``"foo"``: checks the graph's devices, then compiles
    it with Inductor (foo's Inductor backend, random numbers from foo's
    Philox kernels: see the module's docstring)."""
    _check_graph_devices(gm)
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    with config.patch(fallback_random=True):
        return compile_fx(gm, example_inputs, **kwargs)


# --------------------------------------------------------------------------- Inductor


def _inductor_classes():
    from torch._inductor.codegen.common import DeviceOpOverrides
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    class FooDeviceOpOverrides(DeviceOpOverrides):
        """Lines the Python wrapper writes for foo: foo's device module; no streams."""

        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(_):\n    return 0"

        def set_device(self, device_idx: int) -> str:
            return f"torch.foo.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.foo.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.foo.device({device_idx})"

        def current_device_idx_expr(self) -> str:
            return "torch.foo.current_device()"

    class FooWrapperCodegen(PythonWrapperCodegen):
        """CPU's Python wrapper, with foo's buffers: allocations name the foo
        device (index included), C++ kernels are called as CPU's are (they take
        the data pointers of foo's host memory)."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                from torch._inductor.codegen.wrapper import SubgraphPythonWrapperCodegen

                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return FooWrapperCodegen()

        def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
            if device.type != DEVICE:
                return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
            shape_t = self.codegen_python_shape_tuple(allocation_shape if allocation_shape is not None else shape)
            stride_t = self.codegen_python_shape_tuple(stride)
            return f"{name} = empty_strided({shape_t}, {stride_t}, device='{device}', dtype={dtype})"

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, **kwargs):
            from torch._inductor.virtualized import V

            device = device or V.graph.get_current_device_or_throw()
            if device.type == DEVICE:
                device = torch.device("cpu")
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    class FooCppWrapperUnsupported:
        """Stands for a C++ wrapper (``cpp_wrapper``, AOTInductor), which foo
        does not have: its ``create`` says so."""

        supports_caching = False  # asked before create: nothing to cache

        @staticmethod
        def create(*args, **kwargs):
            raise FooCompileError(
                "Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper=True, AOTInductor) is not "
                "supported on foo yet: foo's compiled graphs use the Python wrapper. Set "
                "torch._inductor.config.cpp_wrapper = False."
            )

    return CppScheduling, FooWrapperCodegen, FooCppWrapperUnsupported, FooDeviceOpOverrides


_dynamo_registered = False
_inductor_registered = False


def register_inductor() -> None:
    """Registers foo's Inductor backend: scheduling, wrapper codegen, device
    op overrides. Idempotent; torch >= 2.15 calls it on its first compile for
    foo (``torch.foo._inductor_backend_init``)."""
    global _inductor_registered
    if _inductor_registered:
        return
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

    _see_foo_as_cpp_device()
    _keep_foo_kernels()
    scheduling, wrapper, cpp_wrapper, op_overrides = _inductor_classes()
    register_device_op_overrides(DEVICE, op_overrides())
    register_backend_for_device(DEVICE, scheduling, wrapper, cpp_wrapper)
    _inductor_registered = True


def _see_foo_as_cpp_device() -> None:
    """Inductor asks ``device.type == "cpu"`` in a few places where it means
    "this node is generated by the C++ backend": which loop reorderings and
    fusions the C++ codegen supports (the scheduler's ``is_cpu``; the others
    assume Triton's ``(numel, rnumel)`` groups and fail on C++'s), and the
    realization heuristics tuned for C++ loops (``ir.is_cpu``); and which
    code generator is active (``utils.get_current_backend``: "triton" for
    any device it does not know, which makes the C++ kernels lose their
    dtypes). foo's nodes are C++ nodes, so all three answer as for CPU."""
    import torch._inductor.codegen.cpp  # noqa: F401  (its importers bind the names patched here)
    import torch._inductor.lowering  # noqa: F401
    from torch._inductor import ir, scheduler, utils

    node_is_cpu = scheduler.BaseSchedulerNode.is_cpu
    if not getattr(node_is_cpu, "_foo", False):

        def is_cpu(self) -> bool:
            device = self.get_device()
            return node_is_cpu(self) or (device is not None and device.type == DEVICE)

        is_cpu._foo = True
        scheduler.BaseSchedulerNode.is_cpu = is_cpu

    current_backend = utils.get_current_backend
    if not getattr(current_backend, "_foo", False):

        def get_current_backend(device_type: str | None = None) -> str:
            if device_type is None:
                from torch._inductor.virtualized import V

                device_type = V.graph.get_current_device_or_throw().type
            return "cpp" if device_type == DEVICE else current_backend(device_type)

        get_current_backend._foo = True
        # Modules that imported the name hold their own reference.
        for name, module in list(sys.modules.items()):
            if name.startswith("torch._inductor") and getattr(module, "get_current_backend", None) is current_backend:
                module.get_current_backend = get_current_backend

    ir_is_cpu = ir.is_cpu
    if not getattr(ir_is_cpu, "_foo", False):

        def ir_is_cpu_or_foo(x) -> bool:
            return ir_is_cpu(x) or ir.get_device_type(x) == DEVICE

        ir_is_cpu_or_foo._foo = True
        ir.is_cpu = ir_is_cpu_or_foo


#: aten ops that stay one call of foo's kernel in a foo graph instead of
#: Inductor's decomposition, and why.
#:
#: threshold_backward (relu's backward): decomposed, it is
#: ``where(out <= 0, 0, grad)``, and AOTAutograd's partitioner then computes
#: the ``out <= 0`` mask in the forward and saves it as a bool tensor. Inductor's
#: C++ loops store and load bool masks through ``VecMask`` at about 20 ns an
#: element here (1M elements: 19 ms for the mask against 0.2 ms for the relu
#: itself), which made the compiled transformer block and MLP training steps
#: slower than eager. Kept whole, the backward reads the relu output (saved
#: anyway for the next layer's weight gradient) in foo's native kernel.
_FOO_EXTERN_OPS = ("threshold_backward",)


def _keep_foo_kernels() -> None:
    """For each op of :data:`_FOO_EXTERN_OPS`, Inductor's decomposition
    answers NotImplemented for foo tensors (other devices decompose as
    before), and the op lowers to a fallback: one extern call of foo's kernel."""
    from torch._inductor import decomposition, lowering

    for name in _FOO_EXTERN_OPS:
        op = getattr(torch.ops.aten, name).default
        original = decomposition.decompositions.get(op)
        if original is None or getattr(original, "_foo", False):
            continue

        def decompose_unless_foo(*args, _original=original, **kwargs):
            if any(isinstance(a, torch.Tensor) and a.device.type == DEVICE for a in args):
                return NotImplemented
            return _original(*args, **kwargs)

        decompose_unless_foo._foo = True
        decomposition.decompositions[op] = decompose_unless_foo
        if op not in lowering.lowerings:
            lowering.make_fallback(op, warn=False, override_decomp=True)


def _inductor_asks_device_module() -> bool:
    """Whether this torch's Inductor calls the device module's
    ``_inductor_backend_init`` on its first compile for the device (2.15)."""
    import inspect

    from torch._inductor.codegen.common import init_backend_registration

    code = inspect.unwrap(init_backend_registration).__code__  # lru_cache'd on 2.13
    return "_inductor_backend_init" in code.co_consts


def register() -> None:
    """Registers foo with Dynamo (device interface, backend ``"foo"``) and
    with Inductor (now, or on its first compile where torch supports that).
    Idempotent."""
    global _dynamo_registered
    if _dynamo_registered:
        return
    _dynamo_registered = True
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device(DEVICE, _device_interface())
    if DEVICE not in _BACKENDS:
        register_backend(compiler_fn=foo_backend, name=DEVICE)
    if not _inductor_asks_device_module():
        register_inductor()


class _RegisterAfterDynamo(importlib.abc.MetaPathFinder):
    """Runs :func:`register` right after ``torch._dynamo`` is first imported
    (by torch.compile, an optimizer step, ...), so ``import foo_rs`` does not
    import Dynamo (about 1.5 s)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        # The path finder directly (not importlib.util.find_spec): no recursion
        # into this finder. A find_spec that imports nothing (an availability
        # check) leaves this finder in place for the real import.
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                register()
            except Exception as e:  # never break `import torch._dynamo` itself
                warnings.warn(
                    f"foo_rs could not register the foo device with torch.compile "
                    f"({type(e).__name__}: {e}); torch.compile on foo will fail",
                    RuntimeWarning,
                    stacklevel=2,
                )

        spec.loader.exec_module = exec_module
        return spec


def install(device_module) -> None:
    """Called once by ``import foo_rs``."""
    device_module._inductor_backend_init = register_inductor
    if "torch._dynamo" in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _RegisterAfterDynamo())
