// Routes scaled_dot_product_attention on foo to the fused kernel.
//
// ATen's scaled_dot_product_attention asks `_fused_sdp_choice_stub`, a
// DispatchStub keyed on the device type (not the `aten::_fused_sdp_choice`
// operator), which backend to run; without a PrivateUse1 entry it runs the
// math composite. The entry below asks the operator, whose foo kernel is the
// Python one in python/foo_rs/_ops/attention.py: the rule lives there, once.
// When it answers OVERRIDEABLE, ATen calls
// `_scaled_dot_product_fused_attention_overrideable` (also registered from
// Python, computed in Rust: rust/src/kernels/attention.rs).

#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>

namespace {

int64_t foo_fused_sdp_choice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  return at::_fused_sdp_choice(
      query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

} // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &foo_fused_sdp_choice);
} // namespace at::native
