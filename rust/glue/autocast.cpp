// torch.autocast("foo"): the AutocastPrivateUse1 kernels, with CUDA's policies.
//
// torch keeps the op lists of each policy as macros (ATen/autocast_mode.h,
// AT_FORALL_*) so that other backends can register exactly what CUDA does, and
// its C++ wrappers (at::autocast::WrapFunction) cast the arguments and
// redispatch below the autocast key. foo registers those lists for
// PrivateUse1: the lists follow the torch foo is built against, an autocast
// call costs no Python (the policies were Python kernels until 2026-11-25:
// ~30 us per call, a tenth of a bf16 MLP step), and casts of leaf tensors (the
// weights) are cached within an autocast region as on CUDA.
//
// The autocast dtype is the one torch.autocast("foo", dtype) sets; foo's device
// module (torch.foo.set_autocast_dtype) refuses the dtypes foo cannot run.

#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace foo_rs {
namespace {

// CUDA refuses binary_cross_entropy under autocast (its float16 inputs can
// overflow the log); foo does the same, with CUDA's advice, naming foo.
at::Tensor binary_cross_entropy_banned(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
      "(on foo, as on CUDA).\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

// torch's op lists spell the signatures as in namespace at.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Ops without a policy run as they are.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define FOO_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FOO_AUTOCAST_LOWER)
#undef FOO_AUTOCAST_LOWER
#define FOO_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FOO_AUTOCAST_FP32)
#undef FOO_AUTOCAST_FP32
#define FOO_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FOO_AUTOCAST_FP32_SET_OPT_DTYPE)
#undef FOO_AUTOCAST_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define FOO_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FOO_AUTOCAST_PROMOTE)
#undef FOO_AUTOCAST_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace
}  // namespace foo_rs

// Referenced from foo_glue_init so that the linker keeps this object (and the
// registrations above, which are static initializers) in the extension.
extern "C" void foo_glue_autocast_linked() {}
