// native.cpp: the native path -- C++ kernels that take a call from the
// dispatcher to Rust with no Python in between.
//
// Each kernel runs ATen's own structured meta function for the op (output
// shape and dtype, type promotion, broadcasting, argument checks and their
// error messages: the same code CPU runs) with an output holder that
// allocates from foo's allocator, then hands views of the operands to one
// of the `foo_rs_*` entry points in rust/src/native.rs. So semantics live
// in ATen, compute in Rust, and nothing is re-implemented here.
//
// A kernel hands the call to the op's Python kernel (registered by Python as
// the PrivateUse1 kernel of `foo_slow::<name>`, same schema) when the call
// is outside what the Rust kernel does: a dtype class the op's Rust kernel
// does not cover (the Python kernel knows CPU's exact error for it), a
// complex or symbolic scalar, an out= dtype Rust does not write directly.
//
// Python decides what is registered (foo_rs/_ops/_registry.py): it calls
// `foo_glue_register_fast(name)` for each aten overload it has a kernel for
// and this file offers (`foo_glue_fast_ops()`); `FOO_RS_FAST_LANE=0`
// registers the Python kernels alone.
//
// Adding an op: a struct below naming its meta class, its Rust op name
// (kernels/elementwise/spec.rs), its dtype gate and its parameters, and one
// line in kNativeOps.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SDPBackend.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/native/Resize.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/native_group_norm_native.h>
#include <torch/headeronly/version.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/ForeachUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/TensorAdvancedIndexingUtils.h>
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/topk_meta.h>
#include <ATen/ops/isposinf_meta.h>
#include <ATen/ops/isneginf_meta.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta.h>
#include <ATen/native/UpSample.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/native/Padding.h>
#include <ATen/ops/reflection_pad1d_meta.h>
#include <ATen/ops/reflection_pad1d_backward_meta.h>
#include <ATen/ops/reflection_pad3d_meta.h>
#include <ATen/ops/reflection_pad3d_backward_meta.h>
#include <ATen/ops/replication_pad1d_meta.h>
#include <ATen/ops/replication_pad1d_backward_meta.h>
#include <ATen/ops/replication_pad2d_meta.h>
#include <ATen/ops/replication_pad3d_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/smooth_l1_loss_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/mse_loss_meta.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/atan2_meta.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/erfc_meta.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/expm1_meta.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/hardsigmoid_backward_meta.h>
#include <ATen/ops/hardsigmoid_meta.h>
#include <ATen/ops/index_meta.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/log1p_meta.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/minimum_meta.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/mm_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/ne_meta.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/scatter_reduce_meta.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/sign_meta.h>
#include <ATen/ops/_foreach_sign_native.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/softplus_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/sum_meta.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_clamp_max_native.h>
#include <ATen/ops/_foreach_clamp_min_native.h>
#include <ATen/ops/_foreach_copy_native.h>
#include <ATen/ops/_foreach_cos_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_erf_native.h>
#include <ATen/ops/_foreach_erfc_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_expm1_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_log1p_native.h>
#include <ATen/ops/_foreach_log_native.h>
#include <ATen/ops/_foreach_maximum_native.h>
#include <ATen/ops/_foreach_minimum_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_pow_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_rsqrt_native.h>
#include <ATen/ops/_foreach_sigmoid_native.h>
#include <ATen/ops/_foreach_sin_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_tanh_native.h>
#include <ATen/ops/_foreach_zero_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include <type_traits>
#include <utility>

// ---- The Rust side (rust/src/native.rs) -----------------------------------
extern "C" {
struct FooView {
  void* ptr;
  int64_t ndim;
  const int64_t* sizes;
  const int64_t* strides;  // in elements
  uint8_t dtype;           // foo dtype code (foo_rs_dtype_code)
};
struct FooParam {
  uint8_t kind;  // 0 int, 1 float, 2 bool, 3 None, 4 string
  int64_t i;
  double f;
  const char* s;
};
struct FooOperand {
  FooView view;
  uint8_t is_scalar;
  FooParam scalar;
};
struct FooStatus {
  // Rust writes both only on an error: a status costs no 516-byte clear per call.
  FooStatus() : kind(0) { msg[0] = '\0'; }
  int32_t kind;  // 0 RuntimeError, 1 NotImplementedError, 2 IndexError, 3 ValueError, 4 TypeError
  char msg[512];
};
int32_t foo_rs_dtype_code(int32_t scalar_type);
int32_t foo_rs_ew(const char* name, uint8_t ct, const FooOperand* ops, size_t n, const FooParam* ps, size_t np,
                  uint8_t iter, FooStatus* st);
int32_t foo_rs_fill(const FooView* out, const FooParam* value, FooStatus* st);
int32_t foo_rs_fill_dense(void* ptr, size_t n, uint8_t dtype, const FooParam* value, FooStatus* st);
int32_t foo_rs_zero_dense(void* ptr, size_t n, uint8_t dtype, FooStatus* st);
int32_t foo_rs_reduce(const char* name, const FooView* out, const FooView* out2, const FooView* inp,
                      const int64_t* dims, size_t ndims, double correction, double ord, FooStatus* st);
int32_t foo_rs_addmm(const FooView* out, const FooView* input, const FooView* a, const FooView* b, FooParam beta,
                     FooParam alpha, uint8_t batched, FooStatus* st);
int32_t foo_rs_layer_norm(const FooView* out, const FooView* mean, const FooView* rstd, const FooView* x,
                          const FooView* weight, const FooView* bias, int64_t m, int64_t n, double eps, FooStatus* st);
int32_t foo_rs_layer_norm_backward(const FooView* grad_input, const FooView* grad_weight, const FooView* grad_bias,
                                   const FooView* dy, const FooView* x, const FooView* mean, const FooView* rstd,
                                   const FooView* weight, int64_t m, int64_t n, FooStatus* st);
int32_t foo_rs_group_norm(const FooView* out, const FooView* mean, const FooView* rstd, const FooView* x,
                          const FooView* weight, const FooView* bias, const int64_t* geom, double eps, FooStatus* st);
int32_t foo_rs_group_norm_backward(const FooView* grad_input, const FooView* grad_weight, const FooView* grad_bias,
                                   const FooView* dy, const FooView* x, const FooView* mean, const FooView* rstd,
                                   const FooView* weight, const int64_t* geom, FooStatus* st);
int32_t foo_rs_cat(const FooView* out, const FooView* inputs, size_t n, int64_t dim, FooStatus* st);
int32_t foo_rs_softmax(const FooView* out, const FooView* inp, int64_t dim, uint8_t log, FooStatus* st);
int32_t foo_rs_softmax_backward(const FooView* grad_input, const FooView* grad, const FooView* output, int64_t dim,
                                uint8_t log, FooStatus* st);
int32_t foo_rs_index_select(const FooView* out, const FooView* data, const FooView* index, int64_t dim, FooStatus* st);
int32_t foo_rs_nll_loss(const FooView* out, const FooView* total_weight, const FooView* inp, const FooView* target,
                        const FooView* weight, int64_t reduction, int64_t ignore_index, FooStatus* st);
int32_t foo_rs_nll_loss_backward(const FooView* grad_input, const FooView* grad, const FooView* target,
                                 const FooView* weight, const FooView* total_weight, int64_t reduction,
                                 int64_t ignore_index, FooStatus* st);
int32_t foo_rs_embedding_backward(const FooView* out, const FooView* grad, const FooView* indices, int64_t padding_idx,
                                  uint8_t scale_grad_by_freq, FooStatus* st);
int32_t foo_rs_dropout(const FooView* out, const FooView* mask, const FooView* x, double keep, double scale,
                       int64_t device, FooStatus* st);
int32_t foo_rs_bernoulli(const FooView* dst, double p, int64_t device, FooStatus* st);
int32_t foo_rs_dropout_backward(const FooView* out, const FooView* grad, const FooView* mask, double scale,
                                FooStatus* st);
int32_t foo_rs_max_pool2d(const FooView* out, const FooView* indices, const FooView* x, const int64_t* win,
                          FooStatus* st);
int32_t foo_rs_max_pool2d_backward(const FooView* grad_input, const FooView* grad_output, const FooView* indices,
                                   FooStatus* st);
int32_t foo_rs_sdpa_forward(const FooView* out, const FooView* lse, const FooView* q, const FooView* k,
                            const FooView* v, const FooView* bias, uint8_t causal, double scale, double dropout_p,
                            int64_t device, uint64_t* philox, FooStatus* st);
int32_t foo_rs_sdpa_backward(const FooView* grad_q, const FooView* grad_k, const FooView* grad_v,
                             const FooView* grad_bias, const FooView* grad_out, const FooView* q, const FooView* k,
                             const FooView* v, const FooView* bias, const FooView* out, const FooView* lse,
                             const FooView* work, uint8_t causal, double scale, double dropout_p, uint64_t seed,
                             uint64_t offset, FooStatus* st);
int32_t foo_rs_gather(const FooView* out, const FooView* data, const FooView* index, int64_t dim, FooStatus* st);
struct FooIndexArg {
  FooView idx;
  int64_t size;    // of the data dim the indices select along
  int64_t stride;  // of that dim, in elements
};
int32_t foo_rs_index(const FooView* out, const FooView* data, const FooIndexArg* args, size_t n, FooStatus* st);
int32_t foo_rs_index_put(const FooView* dst, const FooView* src, const FooIndexArg* args, size_t n,
                         uint8_t accumulate, FooStatus* st);
int32_t foo_rs_scatter(const FooView* out, const FooView* src, FooParam value, const FooView* index, int64_t dim,
                       const char* op, uint8_t include_self, FooStatus* st);
int32_t foo_rs_avg_pool2d(const FooView* out, const FooView* x, const int64_t* win, uint8_t count_include_pad,
                          int64_t divisor, uint8_t backward, FooStatus* st);
int32_t foo_rs_arange(const FooView* out, double start_f, double step_f, int64_t start_i, int64_t step_i,
                      uint8_t integral, FooStatus* st);
int32_t foo_rs_adaptive_avg_pool2d(const FooView* out, const FooView* x, uint8_t backward, FooStatus* st);
size_t foo_rs_sdpa_backward_work(size_t b, size_t hq, size_t hk, size_t l, size_t s, size_t d);
int32_t foo_rs_conv2d_forward(const FooView* out, const FooView* x, const FooView* w, const FooView* bias,
                              const int64_t* win, int64_t groups, FooStatus* st);
int32_t foo_rs_conv2d_backward(const FooView* grad_output, const FooView* x, const FooView* w,
                               const FooView* grad_input, const FooView* grad_weight, const FooView* grad_bias,
                               const int64_t* input_size, const int64_t* win, int64_t groups, FooStatus* st);
int32_t foo_rs_batch_norm(const FooView* out, const FooView* save_mean, const FooView* save_invstd, const FooView* x,
                          const FooView* weight, const FooView* bias, const FooView* running_mean,
                          const FooView* running_var, uint8_t training, double momentum, double eps, FooStatus* st);
// The optimizers' hyper-parameters: rust/src/kernels/optim.rs's repr(C)
// structs (Adam, Sgd, Adagrad), field for field.
struct FooAdam {
  double lr, beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize, decoupled;
};
struct FooSgd {
  double lr, weight_decay, momentum, dampening;
  bool nesterov, maximize, first_step;
};
struct FooAdagrad {
  double lr, lr_decay, weight_decay, eps;
  bool maximize;
};
int32_t foo_rs_fused_adam(const FooView* params, const FooView* grads, const FooView* exp_avgs,
                          const FooView* exp_avg_sqs, const FooView* max_exp_avg_sqs, const FooView* steps, size_t n,
                          const FooAdam* cfg, const FooView* grad_scale, FooStatus* st);
int32_t foo_rs_fused_sgd(const FooView* params, const FooView* grads, const FooView* momentum_buffers, size_t n,
                         const FooSgd* cfg, const FooView* grad_scale, FooStatus* st);
int32_t foo_rs_fused_adagrad(const FooView* params, const FooView* grads, const FooView* state_sums,
                             const FooView* steps, size_t n, const FooAdagrad* cfg, const FooView* grad_scale,
                             FooStatus* st);
int32_t foo_rs_amp_unscale(const FooView* grads, size_t n, float inv_scale, uint8_t* found, FooStatus* st);
int32_t foo_rs_local_scalar(const FooView* src, FooParam* value, FooStatus* st);
int32_t foo_rs_scan(const FooView* out, const FooView* inp, int64_t dim, uint8_t prod, FooStatus* st);
int32_t foo_rs_tri(const FooView* out, const FooView* src, int64_t k, uint8_t upper, FooStatus* st);
int32_t foo_rs_topk(const FooView* values, const FooView* indices, const FooView* inp, int64_t dim, int64_t k,
                    uint8_t largest, uint8_t sorted, FooStatus* st);
int32_t foo_rs_random(const FooView* dst, uint8_t kind, double a, double b, int64_t from, uint64_t range,
                      int64_t device, FooStatus* st);
int32_t foo_rs_mse_loss(const FooView* out, const FooView* a, const FooView* b, const int64_t* shape, size_t ndim,
                        int64_t reduction, FooStatus* st);
int32_t foo_rs_mse_loss_backward(const FooView* grad_input, const FooView* grad, const FooView* a, const FooView* b,
                                 int64_t reduction, FooStatus* st);
int32_t foo_rs_amp_update_scale(const FooView* scale, const FooView* growth_tracker, const FooView* found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval, FooStatus* st);
int32_t foo_rs_point_loss(const char* kind, double param, const FooView* out, const FooView* a, const FooView* b,
                          const int64_t* shape, size_t ndim, int64_t reduction, FooStatus* st);
int32_t foo_rs_point_loss_backward(const char* kind, double param, const FooView* grad_input, const FooView* grad,
                                   const FooView* a, const FooView* b, int64_t reduction, FooStatus* st);
int32_t foo_rs_adaptive_max_pool2d(const FooView* out, const FooView* indices, const FooView* x, FooStatus* st);
int32_t foo_rs_upsample_bilinear2d(const FooView* out, const FooView* x, const int64_t* h_idx, const double* h_lam,
                                   size_t nh, const int64_t* w_idx, const double* w_lam, size_t nw, uint8_t backward,
                                   FooStatus* st);
int32_t foo_rs_pad(const FooView* out, const FooView* x, const int64_t* pads, size_t k, uint8_t reflect,
                   uint8_t backward, FooStatus* st);
int32_t foo_rs_count_nonzero(const FooView* src, uint64_t* count, FooStatus* st);
int32_t foo_rs_nonzero(const FooView* out, const FooView* src, FooStatus* st);
int32_t foo_rs_masked_select(const FooView* out, const FooView* src, const FooView* mask, FooStatus* st);
int32_t foo_rs_sort(const FooView* values, const FooView* indices, const FooView* inp, int64_t dim, int64_t k,
                    uint8_t descending, FooStatus* st);
int32_t foo_rs_batch_norm_backward(const FooView* grad_input, const FooView* grad_weight, const FooView* grad_bias,
                                   const FooView* dy, const FooView* x, const FooView* weight,
                                   const FooView* running_mean, const FooView* running_var, const FooView* save_mean,
                                   const FooView* save_invstd, uint8_t train, double eps, FooStatus* st);
}

// ATen's shared padding checks (at::native::padding::pad_shape_check,
// check_valid_input(input, padding, dim) and pad_backward_shape_check, which
// every backend's padding ops call) came after torch 2.13, whose Padding.h
// has only check_valid_input<dim>. foo_rs_pad_aten::kShared says whether
// this torch's header has them: unqualified lookup from foo_rs_pad_aten sees
// ATen's functions and the stand-in below in one overload set (both
// using-directives place them in the global namespace), and ATen's
// non-template wins where it exists. The padding kernels below call ATen's
// through these templates, or keep torch 2.13's per-op checks. (Global
// scope on purpose: from inside foo_rs's anonymous namespace the stand-in
// would hide ATen's.)
namespace foo_rs_pad_compat {
struct Missing {};
template <class T>
Missing pad_shape_check(const T&, at::IntArrayRef, int64_t, bool);
}  // namespace foo_rs_pad_compat

namespace foo_rs_pad_aten {
using namespace at::native::padding;
using namespace foo_rs_pad_compat;
template <class T>
constexpr bool kShared = !std::is_same_v<decltype(pad_shape_check(std::declval<const T&>(), at::IntArrayRef(),
                                                                  int64_t{1}, true)),
                                         foo_rs_pad_compat::Missing>;
template <class T>
at::DimVector shape(const T& input, at::IntArrayRef padding, int64_t dim, bool reflect) {
  return pad_shape_check(input, padding, dim, reflect);
}
template <class T>
void valid_input(const T& input, at::IntArrayRef padding, int64_t dim) {
  check_valid_input(input, padding, dim);
}
template <class T>
void backward_shape(const T& grad_output, const T& input, at::IntArrayRef padding, int64_t dim) {
  pad_backward_shape_check(grad_output, input, padding, dim);
}
}  // namespace foo_rs_pad_aten

namespace foo_rs {
namespace native {
namespace {

constexpr int32_t kOk = 0, kError = 1, kSlow = 2;  // rust/src/native.rs: OK, ERROR, SLOW
const c10::DispatchKeySet kFooKeys{c10::DispatchKey::PrivateUse1};

// The foo dtype code of a dtype the native path's Rust kernels take, or -1.
// Those kernels are real: complex tensors (which foo holds, rust/src/dtype.rs)
// go to the Python kernels (complex copies, fills and FFTs in Rust there).
// Rust's table (foo_rs_dtype_code, the one place it lives), read once into
// an array: every operand of every call asks, and a call across the
// boundary each time cost more than the lookup.
int dtype_code(c10::ScalarType t) {
  static const auto table = [] {
    std::array<int8_t, static_cast<size_t>(c10::ScalarType::NumOptions)> codes{};
    for (size_t i = 0; i < codes.size(); ++i) {
      const auto st = static_cast<c10::ScalarType>(i);
      codes[i] = static_cast<int8_t>(c10::isComplexType(st) ? -1 : foo_rs_dtype_code(static_cast<int32_t>(i)));
    }
    return codes;
  }();
  const auto i = static_cast<size_t>(t);
  return i < table.size() ? table[i] : -1;
}

// Raises a Rust error as the exception class Rust chose (KernelError::kind).
[[noreturn]] void raise(const FooStatus& st) {
  const std::string msg(st.msg);
  switch (st.kind) {
    case 1: TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case 2: TORCH_CHECK_INDEX(false, msg);
    case 3: TORCH_CHECK_VALUE(false, msg);
    case 4: TORCH_CHECK_TYPE(false, msg);
    default: TORCH_CHECK(false, msg);
  }
  TORCH_INTERNAL_ASSERT(false);  // unreachable
}

// true: ran; false: take the slow path; raises on an error.
bool done(int32_t rc, const FooStatus& st) {
  if (rc == kOk) return true;
  if (rc == kSlow) return false;
  raise(st);
}

// Runs `f` (a meta function, then Rust); an error either raises names foo
// (ATen's message, then "(foo)": c10's context, folded into one line).
template <class F>
bool named(F&& f) {
  try {
    return f();
  } catch (c10::Error& e) {
    e.add_context("foo");
    throw;
  } catch (const std::runtime_error& e) {
    // ATen code that reports with a plain std::runtime_error (Scalar::to's
    // "value cannot be converted ... without overflow"): the same
    // RuntimeError in Python, as a c10::Error so it names foo too.
    c10::Error err({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, e.what());
    err.add_context("foo");
    throw err;
  }
}

// ---- Views -----------------------------------------------------------------

// A tensor's view; its sizes and strides arrays are the tensor's own.
bool view_of(const at::Tensor& t, FooView* v) {
  const int code = dtype_code(t.scalar_type());
  if (code < 0) return false;
  *v = {t.data_ptr(), t.dim(), t.sizes().data(), t.strides().data(), static_cast<uint8_t>(code)};
  return true;
}

bool param_of(const c10::Scalar& s, FooParam* p) {
  if (s.isSymbolic()) return false;
  if (s.isBoolean()) {
    *p = {2, s.toBool() ? 1 : 0, 0.0, nullptr};
  } else if (s.isIntegral(false)) {
    *p = {0, s.toLong(), 0.0, nullptr};
  } else if (s.isFloatingPoint()) {
    *p = {1, 0, s.toDouble(), nullptr};
  } else {
    return false;  // complex
  }
  return true;
}

FooParam p_none() { return {3, 0, 0.0, nullptr}; }
FooParam p_str(const char* s) { return {4, 0, 0.0, s}; }
FooParam p_float(double f) { return {1, 0, f, nullptr}; }

// The value of a one-element CPU tensor an elementwise op got (a Python
// number torch wrapped, or a 0-dim CPU tensor), as a parameter.
bool cpu_scalar_param(const void* data, c10::ScalarType t, FooParam* p) {
  switch (t) {
    case c10::ScalarType::Double: *p = p_float(*static_cast<const double*>(data)); return true;
    case c10::ScalarType::Float: *p = p_float(*static_cast<const float*>(data)); return true;
    case c10::ScalarType::Half: *p = p_float(static_cast<float>(*static_cast<const c10::Half*>(data))); return true;
    case c10::ScalarType::BFloat16:
      *p = p_float(static_cast<float>(*static_cast<const c10::BFloat16*>(data)));
      return true;
    case c10::ScalarType::Long: *p = {0, *static_cast<const int64_t*>(data), 0.0, nullptr}; return true;
    case c10::ScalarType::Int: *p = {0, *static_cast<const int32_t*>(data), 0.0, nullptr}; return true;
    case c10::ScalarType::Short: *p = {0, *static_cast<const int16_t*>(data), 0.0, nullptr}; return true;
    case c10::ScalarType::Char: *p = {0, *static_cast<const int8_t*>(data), 0.0, nullptr}; return true;
    case c10::ScalarType::Byte: *p = {0, *static_cast<const uint8_t*>(data), 0.0, nullptr}; return true;
    case c10::ScalarType::Bool: *p = {2, *static_cast<const bool*>(data) ? 1 : 0, 0.0, nullptr}; return true;
    default: return false;
  }
}

// ---- Output holders for ATen's structured meta classes ----------------------
// What torchgen generates for CPU's structured kernels (functional, in-place
// and out= variants), with foo's allocator.

enum class Mode { Functional, Inplace, Out };

bool is_foo(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

at::Tensor create_out(at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options) {
  const auto st = options.dtype().toScalarType();
  if (dtype_code(st) < 0) {
    // Through the dispatcher: foo's empty_strided refuses it with foo's message.
    return strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
  }
  c10::DeviceGuard guard(options.device());
  auto* alloc = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  if (strides.empty()) {
    return at::detail::empty_generic(sizes, alloc, kFooKeys, st, options.memory_format_opt());
  }
  return at::detail::empty_strided_generic(sizes, strides, alloc, kFooKeys, st);
}

void resize_out(const at::Tensor& out, at::IntArrayRef sizes, at::IntArrayRef strides,
                const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(), ", but got ",
              out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ", options.device(),
              ", but got ", out.device(), " instead");
  const bool resized = at::native::resize_output(out, sizes);
  if (resized) {
    if (!strides.empty()) {
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

void check_inplace(const at::Tensor& self, at::IntArrayRef sizes, const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: ", "input tensor dtype ", self.dtype(),
              " and output tensor dtype ", options.dtype(), " should match");
  TORCH_CHECK(options.device() == self.device(), "Bad in-place call: ", "input tensor device ", self.device(),
              " and output tensor device ", options.device(), " should match");
  TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: ", "input tensor size ", self.sizes(),
              " and output tensor size ", sizes, " should match");
}

template <class Meta, Mode M, int N = 1>
struct Holder final : Meta {
  static constexpr bool kIter = std::is_base_of_v<at::TensorIteratorBase, Meta>;
  static_assert(N == 1 || !kIter, "TensorIterator metas have one output here");

  Holder() = default;
  explicit Holder(at::Tensor& target) : target_{&target} {}
  Holder(at::Tensor& t0, at::Tensor& t1) : target_{&t0, &t1} {}

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    set(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    if constexpr (M == Mode::Functional) {
      return out_[i];
    } else {
      return proxy_[i].defined() ? proxy_[i] : *target_[i];
    }
  }
  // The caller's out= tensor i (null for a functional call): for device checks.
  const at::Tensor* out_arg(int i = 0) const {
    if constexpr (M == Mode::Functional) {
      return nullptr;
    } else {
      return target_[i];
    }
  }
  // The result tensor the kernel writes (the proxy, if one was needed).
  const at::Tensor& result(int i = 0) { return maybe_get_output(i); }
  // After the kernel ran: a proxy's values go to the caller's tensor.
  void finish() {
    if constexpr (M != Mode::Functional) {
      for (int i = 0; i < N; ++i)
        if (proxy_[i].defined()) target_[i]->copy_(proxy_[i]);
    }
  }

  std::array<at::Tensor, N> out_;
  std::array<at::Tensor*, N> target_{};
  std::array<at::Tensor, N> proxy_;

 private:
  void set(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options) {
    TORCH_INTERNAL_ASSERT(i >= 0 && i < N, "foo: native kernel output ", i, " of ", N);
    if constexpr (M == Mode::Functional) {
      out_[i] = create_out(sizes, strides, options);
    } else {
      const at::Tensor& out = *target_[i];
      if constexpr (M == Mode::Out) {
        resize_out(out, sizes, strides, options);
      } else {
        check_inplace(out, sizes, options);
      }
      // Kernels outside TensorIterator get the layout the meta asked for.
      if constexpr (!kIter) {
        if (!strides.empty() && out.strides() != strides) proxy_[i] = create_out(sizes, strides, options);
      }
    }
    if constexpr (kIter) this->at::TensorIteratorBase::set_output_raw_strided(i, sizes, strides, options);
  }
};

// ---- The slow path: the op's Python kernel ----------------------------------

template <const char* ATEN, class Sig>
struct Slow;

template <const char* ATEN, class R, class... A>
struct Slow<ATEN, R(A...)> {
  static R call(A... a) {
    static const auto op = [] {
      std::string name = std::string("foo_slow::") + ATEN;
      for (size_t k = std::strlen("foo_slow::"); k < name.size(); ++k)
        if (name[k] == '.') name[k] = '_';
      return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").typed<R(A...)>();
    }();
    return op.redispatch(kFooKeys, std::forward<A>(a)...);
  }
};

// ---- Elementwise: TensorIterator-based metas --------------------------------

// Which compute dtypes an op's Rust kernel takes on this path; the rest go
// to the Python kernel.
enum class Gate { Any, Numeric /* not bool */, Float };

bool gate_ok(Gate g, c10::ScalarType ct) {
  switch (g) {
    case Gate::Any: return true;
    case Gate::Numeric: return ct != c10::ScalarType::Bool;
    case Gate::Float: return c10::isFloatingType(ct);
  }
  return false;
}

constexpr int kMaxOperands = 4;

// Whether a number parameter or operand is one the Rust kernel converts to
// integer compute dtype `ct` as CPU does: an integer within ct's range. A
// float, or an integer outside the range (CPU's wrap-around there differs
// between torch versions), goes to the Python kernel (foo_rs/_compat.py).
bool fits(c10::ScalarType ct, const FooParam& p) {
  if (!c10::isIntegralType(ct, /*includeBool=*/false) || p.kind == 3 || p.kind == 4) return true;
  if (p.kind == 2) return true;
  if (p.kind == 1) return false;
  int64_t lo = 0, hi = 0;
  switch (ct) {
    case c10::ScalarType::Byte: lo = 0; hi = 255; break;
    case c10::ScalarType::Char: lo = -128; hi = 127; break;
    case c10::ScalarType::Short: lo = -32768; hi = 32767; break;
    case c10::ScalarType::Int: lo = INT32_MIN; hi = INT32_MAX; break;
    case c10::ScalarType::Long: return true;
    default: return false;
  }
  return p.i >= lo && p.i <= hi;
}

// Runs a built iterator's loop in Rust; false: take the slow path. `swap`:
// the meta added the two inputs in the other order than the Rust op takes them.
bool run_iter(const char* rust, Gate gate, at::TensorIteratorBase& it, const FooParam* ps, size_t np,
              bool swap = false) {
  const auto ct = it.common_dtype();
  const int ctc = dtype_code(ct);
  if (ctc < 0 || !gate_ok(gate, ct)) return false;
  const int n = it.ntensors();
  TORCH_INTERNAL_ASSERT(n >= 2 && n <= kMaxOperands && it.noutputs() == 1);
  for (size_t k = 0; k < np; ++k)
    if (!fits(ct, ps[k])) return false;
  const auto shape = it.shape();
  const int64_t nd = it.ndim();
  // Every operand dense (ATen coalesced them to one dim of unit stride, the
  // common case): they share one size and one stride, nothing to convert.
  const bool dense = nd == 1 && it.is_contiguous();
  static constexpr int64_t kUnit = 1;
  // Filled below for the n operands used (not cleared: this runs every call).
  std::array<FooOperand, kMaxOperands> ops;
  std::array<c10::SmallVector<int64_t, 6>, kMaxOperands> strides;
  for (int i = 0; i < n; ++i) {
    FooOperand& o = ops[i];
    o.is_scalar = 0;
    const auto dt = it.dtype(i);
    if (i > 0 && it.is_cpu_scalar(i)) {
      o.is_scalar = 1;
      if (!cpu_scalar_param(it.data_ptr(i), dt, &o.scalar) || !fits(ct, o.scalar)) return false;
      continue;
    }
    const int code = dtype_code(dt);
    if (code < 0) return false;
    if (dense) {
      o.view = {it.data_ptr(i), 1, shape.data(), &kUnit, static_cast<uint8_t>(code)};
      continue;
    }
    const int64_t es = static_cast<int64_t>(it.element_size(i));
    const auto bs = it.strides(i);
    strides[i].resize(nd);
    for (int64_t d = 0; d < nd; ++d) strides[i][d] = bs[d] / es;
    o.view = {it.data_ptr(i), nd, shape.data(), strides[i].data(), static_cast<uint8_t>(code)};
  }
  if (swap) std::swap(ops[1], ops[2]);
  FooStatus st{};
  return done(foo_rs_ew(rust, static_cast<uint8_t>(ctc), ops.data(), n, ps, np, /*iter=*/1, &st), st);
}

// ---- The dense lane: contiguous operands of one floating dtype -------------
//
// When every tensor operand is a contiguous foo tensor (no names, no neg bit)
// of one floating dtype and one shape, and any out= or in-place tensor is one
// too, an elementwise op's structured meta can only conclude: that shape,
// that dtype, a contiguous output, one coalesced dim of unit stride, and no
// overlap to refuse (an operand either is the output or lies in another
// storage). The lane checks exactly that precondition and hands Rust the
// views the meta's TensorIterator would have given it, without building one
// (about 2,200 instructions of a 4x8 add_'s 5,400). It is a precondition,
// not a second copy of the rules: whatever it does not recognise (another
// dtype, broadcasting, a CPU scalar, a shared storage, a bool parameter such
// as add's alpha=True, which the meta refuses) builds the meta as before.
// Ops whose result dtype is not their inputs' (comparisons) opt out
// (`dense`); one whose meta checks its parameters further says which it
// leaves to the meta (`dense_ok`: clamp's two absent bounds).
// Named tensors (gone in torch 2.15) propagate names through the meta.
template <class T>
auto has_names_of(const T& x, int) -> decltype(x.has_names()) {
  return x.has_names();
}
template <class T>
bool has_names_of(const T&, long) {
  return false;
}

// A number operand: a one-element 0-dim CPU tensor (a Python number torch
// wrapped, as `x * 0.5` and the Scalar overloads pass it, or a 0-dim CPU
// tensor) of a real dtype. Next to a floating tensor it changes neither the
// result dtype nor the shape (type promotion ranks a 0-dim operand below a
// dimensioned one; only a complex number would promote), so the lane takes
// it as TensorIterator would: a scalar operand (see run_iter).
// Only ops whose meta admits CPU scalars (binary TensorIterator configs:
// `numbers` below) take one; a ternary meta refuses a CPU operand. A bool
// number goes to the meta too (sub refuses it).
bool number_operand(const at::Tensor& x) {
  const auto st = x.scalar_type();
  return x.defined() && x.dim() == 0 && x.device().is_cpu() && !c10::isComplexType(st) &&
         st != c10::ScalarType::Bool && !x.is_neg() && !x.is_conj();
}

struct DenseArgs {
  std::array<const at::Tensor*, kMaxOperands> t{};
  std::array<bool, kMaxOperands> number{};
  int n = 0;
  bool ok = true;
  bool numbers = false;  // whether the op's meta admits number operands
  void add(const at::Tensor& x) {
    if (n + 1 >= kMaxOperands) {
      ok = false;  // the output takes slot 0
      return;
    }
    number[n] = numbers && n > 0 && number_operand(x);  // not self: the output's dtype and shape are self's
    t[n++] = &x;
  }
  template <class X>
  void add(const X&) {}
};

// `out`: the in-place or out= tensor, or undefined (a functional call: the
// lane creates it). True: Rust ran the op.
template <class Op, class... A>
bool dense_lane(at::Tensor& out, const FooParam* ps, int np, const at::Tensor& self, const A&... a) {
  if constexpr (!Op::dense) {
    return false;
  } else {
    const auto st = self.scalar_type();
    if (!c10::isFloatingType(st)) return false;
    DenseArgs in;
    in.numbers = Op::numbers;
    in.add(self);
    (in.add(a), ...);
    if (!in.ok) return false;
    // Shape and dtype first: a broadcast or a promotion (the usual misses)
    // leaves after one compare.
    const auto sizes = self.sizes();
    for (int i = 1; i < in.n; ++i)
      if (!in.number[i] &&
          (!in.t[i]->defined() || in.t[i]->scalar_type() != st || !in.t[i]->sizes().equals(sizes)))
        return false;
    const int code = dtype_code(st);
    if (code < 0 || !is_foo(self)) return false;
    for (int k = 0; k < np; ++k)
      if (ps[k].kind == 2) return false;
    if (!Op::dense_ok(ps, np)) return false;
    // Layout and device (dtype and shape of the inputs are checked above).
    const auto dev = self.device();
    const auto laid_out = [&](const at::Tensor& x) {
      return x.device() == dev && x.is_contiguous() && !x.is_neg() && !has_names_of(x, 0);
    };
    for (int i = 0; i < in.n; ++i)
      if (!in.number[i] && !laid_out(*in.t[i])) return false;
    int64_t numel = self.numel();
    if (numel == 0) return false;
    std::array<FooOperand, kMaxOperands> ops;
    for (int i = 1; i < in.n; ++i) {
      ops[i + 1].is_scalar = in.number[i] ? 1 : 0;
      if (in.number[i] && !cpu_scalar_param(in.t[i]->const_data_ptr(), in.t[i]->scalar_type(), &ops[i + 1].scalar))
        return false;
    }
    if (out.defined()) {
      if (out.scalar_type() != st || !out.sizes().equals(sizes) || !laid_out(out)) return false;
      const void* o = out.const_data_ptr();
      for (int i = 0; i < in.n; ++i)
        if (!in.number[i] && in.t[i]->const_data_ptr() != o && in.t[i]->storage().is_alias_of(out.storage()))
          return false;
    } else {
      out = create_out(sizes, {}, self.options());
    }
    static constexpr int64_t kUnit = 1;
    const uint8_t c = static_cast<uint8_t>(code);
    ops[0].is_scalar = 0;
    ops[0].view = {out.data_ptr(), 1, &numel, &kUnit, c};
    ops[1].is_scalar = 0;
    for (int i = 0; i < in.n; ++i)
      if (!in.number[i]) ops[i + 1].view = {const_cast<void*>(in.t[i]->const_data_ptr()), 1, &numel, &kUnit, c};
    FooStatus s{};
    return done(foo_rs_ew(Op::rust, c, ops.data(), in.n + 1, ps, np, /*iter=*/1, &s), s);
  }
}

// The Rust op of a call: Op::rust, or Op::rust_for(args) where it depends on
// them (detected the C++17 way: the oldest torch builds the glue as C++17).
template <class Op, class = void>
struct HasRustFor : std::false_type {};
template <class Op>
struct HasRustFor<Op, std::void_t<decltype(&Op::rust_for)>> : std::true_type {};

template <class Op, class... A>
const char* rust_of(const at::Tensor& self, const A&... a) {
  if constexpr (HasRustFor<Op>::value) {
    return Op::rust_for(self, a...);
  } else {
    return Op::rust;
  }
}

// The three kernels of an elementwise op `Op` with extra schema arguments A.
// Op gives: Meta (ATen's structured meta class), rust (op name in
// kernels/elementwise/spec.rs), gate, F/I/O (its functional, in-place and
// out= overload names), params(ps, self, a...) (-1: slow path) and
// meta(holder, self, a...).
template <class Op, class... A>
at::Tensor k_functional(const at::Tensor& self, A... a) {
  FooParam ps[4];
  const int np = Op::params(ps, self, a...);
  at::Tensor result;
  if (np >= 0 && named([&] {
        if (dense_lane<Op>(result, ps, np, self, a...)) return true;
        Holder<typename Op::Meta, Mode::Functional> h;
        Op::meta(h, self, a...);
        if (!run_iter(rust_of<Op>(self, a...), Op::gate, h, ps, np, Op::swap)) return false;
        result = std::move(h.out_[0]);
        return true;
      }))
    return result;
  return Slow<Op::F, at::Tensor(const at::Tensor&, A...)>::call(self, a...);
}

template <class Op, class... A>
at::Tensor& k_inplace(at::Tensor& self, A... a) {
  FooParam ps[4];
  const int np = Op::params(ps, self, a...);
  if (np >= 0 && named([&] {
        if (dense_lane<Op>(self, ps, np, self, a...)) return true;
        Holder<typename Op::Meta, Mode::Inplace> h(self);
        Op::meta(h, self, a...);
        return run_iter(rust_of<Op>(self, a...), Op::gate, h, ps, np, Op::swap);
      }))
    return self;
  return Slow<Op::I, at::Tensor&(at::Tensor&, A...)>::call(self, a...);
}

template <class Op, class... A>
at::Tensor& k_out(const at::Tensor& self, A... a, at::Tensor& out) {
  FooParam ps[4];
  const int np = Op::params(ps, self, a...);
  if (np >= 0 && named([&] {
        if (dense_lane<Op>(out, ps, np, self, a...)) return true;
        Holder<typename Op::Meta, Mode::Out> h(out);
        Op::meta(h, self, a...);
        return run_iter(rust_of<Op>(self, a...), Op::gate, h, ps, np, Op::swap);
      }))
    return out;
  return Slow<Op::O, at::Tensor&(const at::Tensor&, A..., at::Tensor&)>::call(self, a..., out);
}

// Defaults: the meta takes the kernel's arguments, adds the inputs in
// schema order, and the op has no parameters.
struct Plain {
  static constexpr bool swap = false;
  static constexpr bool dense = true;  // the dense lane applies (see dense_lane) ...
  static bool dense_ok(const FooParam*, int) { return true; }  // ... to these parameters
  static constexpr bool numbers = false;  // ... and to number operands (number_operand)
  template <class H, class... X>
  static void meta(H& h, X&&... x) {
    h.meta(std::forward<X>(x)...);
  }
  template <class... X>
  static int params(FooParam*, X&&...) {
    return 0;
  }
};

#define FOO_NAMES(f, i, o)                   \
  static constexpr char F[] = f;             \
  static constexpr char I[] = i;             \
  static constexpr char O[] = o;

#define FOO_EW(Name, MetaT, rust_name, gate_v, f, i, o) FOO_EW_ON(Name, Plain, MetaT, rust_name, gate_v, f, i, o)
#define FOO_EW_ON(Name, Base, MetaT, rust_name, gate_v, f, i, o) \
  struct Name : Base {                                 \
    using Meta = at::meta::MetaT;                       \
    static constexpr const char* rust = rust_name;      \
    static constexpr Gate gate = gate_v;                \
    FOO_NAMES(f, i, o)                                  \
  };

// Unary ops (Float gate: their metas promote integer inputs to float; an
// integer compute dtype means the op keeps integers, e.g. neg).
FOO_EW(Neg, structured_neg, "neg", Gate::Numeric, "neg", "neg_", "neg.out")
FOO_EW(Exp, structured_exp, "exp", Gate::Float, "exp", "exp_", "exp.out")
FOO_EW(Log, structured_log, "log", Gate::Float, "log", "log_", "log.out")
FOO_EW(Log1p, structured_log1p, "log1p", Gate::Float, "log1p", "log1p_", "log1p.out")
FOO_EW(Expm1, structured_expm1, "expm1", Gate::Float, "expm1", "expm1_", "expm1.out")
FOO_EW(Sqrt, structured_sqrt, "sqrt", Gate::Float, "sqrt", "sqrt_", "sqrt.out")
FOO_EW(Rsqrt, structured_rsqrt, "rsqrt", Gate::Float, "rsqrt", "rsqrt_", "rsqrt.out")
FOO_EW(Sigmoid, structured_sigmoid, "sigmoid", Gate::Float, "sigmoid", "sigmoid_", "sigmoid.out")
FOO_EW(Tanh, structured_tanh, "tanh", Gate::Float, "tanh", "tanh_", "tanh.out")
FOO_EW(Sin, structured_sin, "sin", Gate::Float, "sin", "sin_", "sin.out")
FOO_EW(Cos, structured_cos, "cos", Gate::Float, "cos", "cos_", "cos.out")
FOO_EW(Reciprocal, structured_reciprocal, "reciprocal", Gate::Float, "reciprocal", "reciprocal_", "reciprocal.out")
FOO_EW(Erf, structured_erf, "erf", Gate::Float, "erf", "erf_", "erf.out")
FOO_EW(Erfc, structured_erfc, "erfc", Gate::Float, "erfc", "erfc_", "erfc.out")
FOO_EW(Silu, structured_silu, "silu", Gate::Float, "silu", "silu_", "silu.out")
FOO_EW(Mish, structured_mish, "mish", Gate::Float, "mish", "mish_", "mish.out")
FOO_EW(Sign, structured_sign, "sign", Gate::Numeric, "sign", "sign_", "sign.out")
FOO_EW(Hardsigmoid, structured_hardsigmoid, "hardsigmoid", Gate::Float, "hardsigmoid", "hardsigmoid_",
       "hardsigmoid.out")

// Binary ops.
// mul and div (and add, sub below) take numbers on the dense lane: `x * 0.5`, the Scalar overloads.
struct Numbers : Plain {
  static constexpr bool numbers = true;
};
FOO_EW_ON(Mul, Numbers, structured_mul_Tensor, "mul", Gate::Numeric, "mul.Tensor", "mul_.Tensor", "mul.out")
FOO_EW_ON(Div, Numbers, structured_div_Tensor, "div", Gate::Numeric, "div.Tensor", "div_.Tensor", "div.out")
FOO_EW(Maximum, structured_maximum, "maximum", Gate::Numeric, "maximum", "maximum_", "maximum.out")
FOO_EW(Minimum, structured_minimum, "minimum", Gate::Numeric, "minimum", "minimum_", "minimum.out")
FOO_EW(PowTT, structured_pow_Tensor_Tensor, "pow", Gate::Float, "pow.Tensor_Tensor", "pow_.Tensor",
       "pow.Tensor_Tensor_out")
FOO_EW(Atan2, structured_atan2, "atan2", Gate::Float, "atan2", "atan2_", "atan2.out")
FOO_EW(SigmoidBackward, structured_sigmoid_backward, "sigmoid_backward", Gate::Float, "sigmoid_backward",
       "sigmoid_backward_", "sigmoid_backward.grad_input")
FOO_EW(TanhBackward, structured_tanh_backward, "tanh_backward", Gate::Float, "tanh_backward", "tanh_backward_",
       "tanh_backward.grad_input")
FOO_EW(SiluBackward, structured_silu_backward, "silu_backward", Gate::Float, "silu_backward", "silu_backward_",
       "silu_backward.grad_input")
// mish_backward (one functional overload, not structured): ATen's CPU kernel
// builds TensorIterator::binary_op(grad_input, grad_output, self), as
// silu_backward's meta does.
FOO_EW(MishBackward, structured_silu_backward, "mish_backward", Gate::Float, "mish_backward", "", "")

// Comparisons: any compute dtype (the output is bool, so not the dense lane).
struct Cmp : Plain {
  static constexpr bool dense = false;
};
#define FOO_CMP(Name, op)                                                                                  \
  FOO_EW_ON(Name##T, Cmp, structured_##op##_Tensor, #op, Gate::Any, #op ".Tensor", #op "_.Tensor",         \
            #op ".Tensor_out")                                                                             \
  FOO_EW_ON(Name##S, Cmp, structured_##op##_Scalar, #op, Gate::Any, #op ".Scalar", #op "_.Scalar",         \
            #op ".Scalar_out")
FOO_CMP(Eq, eq)
FOO_CMP(Ne, ne)
FOO_CMP(Lt, lt)
FOO_CMP(Le, le)
FOO_CMP(Gt, gt)
FOO_CMP(Ge, ge)
#undef FOO_CMP

// Ops with parameters.

// Ops whose one parameter is their last schema argument, a Scalar (add's alpha, lerp's weight,
// addcmul's value, clamp_min's bound ...), after one to three tensors: the rule, once.
template <Gate G>
struct ScalarLast : Plain {
  static constexpr Gate gate = G;
  static int params(FooParam* p, const at::Tensor&, const c10::Scalar& s) { return one(p, s); }
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const c10::Scalar& s) { return one(p, s); }
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::Scalar& s) {
    return one(p, s);
  }

 private:
  static int one(FooParam* p, const c10::Scalar& s) { return param_of(s, &p[0]) ? 1 : -1; }
};
struct Add : ScalarLast<Gate::Numeric> {
  static constexpr bool numbers = true;
  using Meta = at::meta::structured_add_Tensor;
  static constexpr const char* rust = "add";
  FOO_NAMES("add.Tensor", "add_.Tensor", "add.out")
};
struct Sub : ScalarLast<Gate::Numeric> {
  static constexpr bool numbers = true;
  using Meta = at::meta::structured_sub_Tensor;
  static constexpr const char* rust = "sub";
  FOO_NAMES("sub.Tensor", "sub_.Tensor", "sub.out")
};

struct DivMode : Plain {
  using Meta = at::meta::structured_div_Tensor_mode;
  static constexpr const char* rust = "div";
  static constexpr Gate gate = Gate::Numeric;
  FOO_NAMES("div.Tensor_mode", "div_.Tensor_mode", "div.out_mode")
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, std::optional<c10::string_view> mode) {
    if (!mode.has_value()) {
      p[0] = p_none();
    } else if (*mode == "trunc") {
      p[0] = p_str("trunc");
    } else if (*mode == "floor") {
      p[0] = p_str("floor");
    } else {
      return -1;  // the Python kernel raises CPU's error
    }
    return 1;
  }
};

// lerp (a Scalar weight or a tensor one), addcmul and addcdiv (a Scalar value): what the foreach
// paths of torch.optim's Adam/AdamW call per parameter.
struct LerpS : ScalarLast<Gate::Float> {
  using Meta = at::meta::structured_lerp_Scalar;
  static constexpr const char* rust = "lerp";
  FOO_NAMES("lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out")
};
struct LerpT : Plain {
  using Meta = at::meta::structured_lerp_Tensor;
  static constexpr const char* rust = "lerp";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out")
};
struct Addcmul : ScalarLast<Gate::Numeric> {
  using Meta = at::meta::structured_addcmul;
  static constexpr const char* rust = "addcmul";
  FOO_NAMES("addcmul", "addcmul_", "addcmul.out")
};
struct Addcdiv : ScalarLast<Gate::Numeric> {
  using Meta = at::meta::structured_addcdiv;
  static constexpr const char* rust = "addcdiv";
  FOO_NAMES("addcdiv", "addcdiv_", "addcdiv.out")
};

// Unary ops whose one parameter is a Scalar.
#define FOO_EW_SCALAR(Name, MetaT, rust_name, gate_v, f, i, o)                     \
  struct Name : ScalarLast<gate_v> {                                               \
    using Meta = at::meta::MetaT;                                                  \
    static constexpr const char* rust = rust_name;                                 \
    FOO_NAMES(f, i, o)                                                             \
  };
FOO_EW_SCALAR(PowTS, structured_pow_Tensor_Scalar, "pow_scalar", Gate::Float, "pow.Tensor_Scalar",
              "pow_.Scalar", "pow.Tensor_Scalar_out")
FOO_EW_SCALAR(ClampMin, structured_clamp_min, "clamp_min", Gate::Numeric, "clamp_min", "clamp_min_",
              "clamp_min.out")
FOO_EW_SCALAR(ClampMax, structured_clamp_max, "clamp_max", Gate::Numeric, "clamp_max", "clamp_max_",
              "clamp_max.out")
FOO_EW_SCALAR(LeakyRelu, structured_leaky_relu, "leaky_relu", Gate::Float, "leaky_relu", "leaky_relu_",
              "leaky_relu.out")
#undef FOO_EW_SCALAR

struct Clamp : Plain {
  using Meta = at::meta::structured_clamp;
  static constexpr const char* rust = "clamp";
  static constexpr Gate gate = Gate::Numeric;
  FOO_NAMES("clamp", "clamp_", "clamp.out")
  // Its meta refuses two absent bounds: that call is the meta's.
  static bool dense_ok(const FooParam* p, int) { return p[0].kind != 3 || p[1].kind != 3; }
  static int params(FooParam* p, const at::Tensor&, const std::optional<c10::Scalar>& lo,
                    const std::optional<c10::Scalar>& hi) {
    p[0] = p_none();
    p[1] = p_none();
    if (lo.has_value() && !param_of(*lo, &p[0])) return -1;
    if (hi.has_value() && !param_of(*hi, &p[1])) return -1;
    return 2;
  }
  template <class H>
  static void meta(H& h, const at::Tensor& self, const std::optional<c10::Scalar>& lo,
                   const std::optional<c10::Scalar>& hi) {
    h.meta(self, lo.has_value() ? at::OptionalScalarRef(&*lo) : at::OptionalScalarRef(),
           hi.has_value() ? at::OptionalScalarRef(&*hi) : at::OptionalScalarRef());
  }
};

// relu is clamp_min(self, 0) in ATen (not structured; bool refused).
struct Relu : Plain {
  using Meta = at::meta::structured_clamp_min;
  static constexpr const char* rust = "relu";
  static constexpr Gate gate = Gate::Numeric;
  FOO_NAMES("relu", "relu_", "relu.out")
  // ATen refuses bool before clamp_min would promote it: the Python kernel raises that.
  static int params(FooParam*, const at::Tensor& self) { return self.scalar_type() == c10::ScalarType::Bool ? -1 : 0; }
  template <class H>
  static void meta(H& h, const at::Tensor& self) {
    h.meta(self, c10::Scalar(0));
  }
};

struct Gelu : Plain {
  using Meta = at::meta::structured_gelu;
  static constexpr const char* rust = "gelu";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("gelu", "gelu_", "gelu.out")
  static int params(FooParam* p, const at::Tensor&, c10::string_view approximate) {
    if (approximate == "tanh") {
      p[0] = p_str("tanh");
    } else if (approximate == "none") {
      p[0] = p_str("none");
    } else {
      return -1;
    }
    return 1;
  }
};

struct GeluBackward : Plain {
  using Meta = at::meta::structured_gelu_backward;
  static constexpr const char* rust = "gelu_backward";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("gelu_backward", "gelu_backward_", "gelu_backward.grad_input")
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, c10::string_view approximate) {
    return Gelu::params(p, at::Tensor(), approximate);
  }
};

struct ThresholdBackward : Plain {
  using Meta = at::meta::structured_threshold_backward;
  static constexpr const char* rust = "threshold_backward";
  static constexpr Gate gate = Gate::Numeric;
  FOO_NAMES("threshold_backward", "threshold_backward_", "threshold_backward.grad_input")
  static constexpr bool swap = true;  // ATen's meta adds (self, grad)
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const c10::Scalar& threshold) {
    return param_of(threshold, &p[0]) ? 1 : -1;
  }
};

struct Softplus : Plain {
  using Meta = at::meta::structured_softplus;
  static constexpr const char* rust = "softplus";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("softplus", "softplus_", "softplus.out")
  static int params(FooParam* p, const at::Tensor&, const c10::Scalar& beta, const c10::Scalar& threshold) {
    return param_of(beta, &p[0]) && param_of(threshold, &p[1]) ? 2 : -1;
  }
};

struct Elu : Plain {
  using Meta = at::meta::structured_elu;
  static constexpr const char* rust = "elu";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("elu", "elu_", "elu.out")
  static int params(FooParam* p, const at::Tensor&, const c10::Scalar& alpha, const c10::Scalar& scale,
                    const c10::Scalar& input_scale) {
    return param_of(alpha, &p[0]) && param_of(scale, &p[1]) && param_of(input_scale, &p[2]) ? 3 : -1;
  }
};

// hardswish and hardswish_backward are not structured in ATen: CPU builds
// the same unary / binary iterator as hardsigmoid's and hardsigmoid_backward's
// metas do (TensorIterator::unary_op, borrowing_binary_op), so those metas
// stand in for them.
FOO_EW(Hardswish, structured_hardsigmoid, "hardswish", Gate::Float, "hardswish", "hardswish_", "hardswish.out")
FOO_EW(HardsigmoidBackward, structured_hardsigmoid_backward, "hardsigmoid_backward", Gate::Float,
       "hardsigmoid_backward", "", "hardsigmoid_backward.grad_input")
FOO_EW(HardswishBackward, structured_hardsigmoid_backward, "hardswish_backward", Gate::Float, "hardswish_backward",
       "", "hardswish_backward.out")

// ---- More structured elementwise ops: one line each ------------------------
//
// Their Rust ops are the ones their Python kernels call (kernels/elementwise/
// spec.rs). A dtype the Rust op does not take (bitwise ops on floats, gcd on
// floats ...) comes back as UnsupportedDtype: the Python kernel then raises
// CPU's error. Integer inputs of the rounding ops (a copy in ATen) and of the
// float-only ops take the Python kernel through the Float gate.
FOO_EW(Tan, structured_tan, "tan", Gate::Float, "tan", "tan_", "tan.out")
FOO_EW(Asin, structured_asin, "asin", Gate::Float, "asin", "asin_", "asin.out")
FOO_EW(Acos, structured_acos, "acos", Gate::Float, "acos", "acos_", "acos.out")
FOO_EW(Atan, structured_atan, "atan", Gate::Float, "atan", "atan_", "atan.out")
FOO_EW(Sinh, structured_sinh, "sinh", Gate::Float, "sinh", "sinh_", "sinh.out")
FOO_EW(Cosh, structured_cosh, "cosh", Gate::Float, "cosh", "cosh_", "cosh.out")
FOO_EW(Asinh, structured_asinh, "asinh", Gate::Float, "asinh", "asinh_", "asinh.out")
FOO_EW(Acosh, structured_acosh, "acosh", Gate::Float, "acosh", "acosh_", "acosh.out")
FOO_EW(Atanh, structured_atanh, "atanh", Gate::Float, "atanh", "atanh_", "atanh.out")
FOO_EW(Log2, structured_log2, "log2", Gate::Float, "log2", "log2_", "log2.out")
FOO_EW(Log10, structured_log10, "log10", Gate::Float, "log10", "log10_", "log10.out")
FOO_EW(Exp2, structured_exp2, "exp2", Gate::Float, "exp2", "exp2_", "exp2.out")
FOO_EW(Erfinv, structured_erfinv, "erfinv", Gate::Float, "erfinv", "erfinv_", "erfinv.out")
FOO_EW(Lgamma, structured_lgamma, "lgamma", Gate::Float, "lgamma", "lgamma_", "lgamma.out")
FOO_EW(Digamma, structured_digamma, "digamma", Gate::Float, "digamma", "digamma_", "digamma.out")
FOO_EW(Sinc, structured_sinc, "sinc", Gate::Float, "sinc", "sinc_", "sinc.out")
FOO_EW(Floor, structured_floor, "floor", Gate::Float, "floor", "floor_", "floor.out")
FOO_EW(Ceil, structured_ceil, "ceil", Gate::Float, "ceil", "ceil_", "ceil.out")
FOO_EW(Trunc, structured_trunc, "trunc", Gate::Float, "trunc", "trunc_", "trunc.out")
FOO_EW(Frac, structured_frac, "frac", Gate::Float, "frac", "frac_", "frac.out")
FOO_EW(BitwiseNot, structured_bitwise_not, "bitwise_not", Gate::Any, "bitwise_not", "bitwise_not_",
       "bitwise_not.out")
// round: decimals 0 (round) or given (round.decimals; integers refused by CPU's kernel there).
struct Round : Plain {
  using Meta = at::meta::structured_round;
  static constexpr const char* rust = "round";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("round", "round_", "round.out")
  static int params(FooParam* p, const at::Tensor&) { return param_of(c10::Scalar(int64_t{0}), &p[0]) ? 1 : -1; }
};
struct RoundDecimals : Plain {
  using Meta = at::meta::structured_round_decimals;
  static constexpr const char* rust = "round";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("round.decimals", "round_.decimals", "round.decimals_out")
  static int params(FooParam* p, const at::Tensor&, int64_t decimals) {
    return param_of(c10::Scalar(decimals), &p[0]) ? 1 : -1;
  }
};
// Binary ops (the .Scalar overloads are ATen composites over these, with a wrapped number).
FOO_EW_ON(Remainder, Numbers, structured_remainder_Tensor, "remainder", Gate::Numeric, "remainder.Tensor",
          "remainder_.Tensor", "remainder.Tensor_out")
FOO_EW_ON(Fmod, Numbers, structured_fmod_Tensor, "fmod", Gate::Numeric, "fmod.Tensor", "fmod_.Tensor",
          "fmod.Tensor_out")
FOO_EW(Hypot, structured_hypot, "hypot", Gate::Float, "hypot", "hypot_", "hypot.out")
FOO_EW(Fmax, structured_fmax, "fmax", Gate::Float, "fmax", "", "fmax.out")
FOO_EW(Fmin, structured_fmin, "fmin", Gate::Float, "fmin", "", "fmin.out")
FOO_EW(Copysign, structured_copysign_Tensor, "copysign", Gate::Float, "copysign.Tensor", "copysign_.Tensor",
       "copysign.out")
FOO_EW(Xlogy, structured_xlogy_Tensor, "xlogy", Gate::Float, "xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor")
FOO_EW(Logaddexp, structured_logaddexp, "logaddexp", Gate::Float, "logaddexp", "", "logaddexp.out")
FOO_EW(Nextafter, structured_nextafter, "nextafter", Gate::Float, "nextafter", "nextafter_", "nextafter.out")
FOO_EW(BitwiseAnd, structured_bitwise_and_Tensor, "bitwise_and", Gate::Any, "bitwise_and.Tensor",
       "bitwise_and_.Tensor", "bitwise_and.Tensor_out")
FOO_EW(BitwiseOr, structured_bitwise_or_Tensor, "bitwise_or", Gate::Any, "bitwise_or.Tensor", "bitwise_or_.Tensor",
       "bitwise_or.Tensor_out")
FOO_EW(BitwiseXor, structured_bitwise_xor_Tensor, "bitwise_xor", Gate::Any, "bitwise_xor.Tensor",
       "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out")
FOO_EW(Lshift, structured_bitwise_left_shift_Tensor, "lshift", Gate::Numeric, "bitwise_left_shift.Tensor",
       "bitwise_left_shift_.Tensor", "bitwise_left_shift.Tensor_out")
FOO_EW(Rshift, structured_bitwise_right_shift_Tensor, "rshift", Gate::Numeric, "bitwise_right_shift.Tensor",
       "bitwise_right_shift_.Tensor", "bitwise_right_shift.Tensor_out")
FOO_EW(Gcd, structured_gcd, "gcd", Gate::Numeric, "gcd", "gcd_", "gcd.out")
FOO_EW(Lcm, structured_lcm, "lcm", Gate::Numeric, "lcm", "lcm_", "lcm.out")
FOO_EW(ClampMinT, structured_clamp_min_Tensor, "clamp_min", Gate::Numeric, "clamp_min.Tensor", "clamp_min_.Tensor",
       "clamp_min.Tensor_out")
FOO_EW(ClampMaxT, structured_clamp_max_Tensor, "clamp_max", Gate::Numeric, "clamp_max.Tensor", "clamp_max_.Tensor",
       "clamp_max.Tensor_out")
FOO_EW(Sgn, structured_sgn, "sign", Gate::Float, "sgn", "sgn_", "sgn.out")
// isposinf/isneginf: a bool output (Cmp: not the dense lane); integers and bool are never infinite.
FOO_EW_ON(IsPosInf, Cmp, structured_isposinf, "isposinf", Gate::Any, "isposinf", "", "isposinf.out")
FOO_EW_ON(IsNegInf, Cmp, structured_isneginf, "isneginf", Gate::Any, "isneginf", "", "isneginf.out")
// Activation backwards with parameters (what their Python kernels pass Rust).
struct LeakyReluBackward : Plain {
  using Meta = at::meta::structured_leaky_relu_backward;
  static constexpr const char* rust = "leaky_relu_backward";
  static constexpr Gate gate = Gate::Float;
  static constexpr bool swap = true;  // ATen's meta adds (self, grad)
  FOO_NAMES("leaky_relu_backward", "", "leaky_relu_backward.grad_input")
  // ATen's kernel (not its meta) refuses a result's backward with a negative slope: the Python kernel raises that.
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const c10::Scalar& slope, bool is_result) {
    if (is_result && slope.toDouble() < 0.0) return -1;
    return param_of(slope, &p[0]) ? 1 : -1;
  }
};
struct EluBackward : Plain {
  using Meta = at::meta::structured_elu_backward;
  static constexpr const char* rust = "elu_backward";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("elu_backward", "", "elu_backward.grad_input")
  static int params(FooParam* p, const at::Tensor&, const c10::Scalar& alpha, const c10::Scalar& scale,
                    const c10::Scalar& input_scale, bool is_result, const at::Tensor&) {
    if (is_result && alpha.toDouble() < 0.0) return -1;  // refused by ATen: the Python kernel raises that
    return param_of(alpha, &p[0]) && param_of(scale, &p[1]) && param_of(input_scale, &p[2]) &&
                   param_of(c10::Scalar(is_result), &p[3])
               ? 4
               : -1;
  }
};
struct SoftplusBackward : Plain {
  using Meta = at::meta::structured_softplus_backward;
  static constexpr const char* rust = "softplus_backward";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("softplus_backward", "", "softplus_backward.grad_input")
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const c10::Scalar& beta,
                    const c10::Scalar& threshold) {
    return param_of(beta, &p[0]) && param_of(threshold, &p[1]) ? 2 : -1;
  }
};
// hardtanh (ReLU6 too) is not structured: ATen's hardtanh_out is clamp_out
// after refusing an unsigned input with a negative bound (integers take the
// Python kernel, which raises that): clamp's meta, Rust's hardtanh. Its backward builds the binary iterator
// hardsigmoid_backward's meta builds (grad_output, self).
struct Hardtanh : Plain {
  using Meta = at::meta::structured_clamp;
  static constexpr const char* rust = "hardtanh";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("hardtanh", "hardtanh_", "hardtanh.out")
  // Only floating inputs: ATen's bounds never promote (an integer input's are truncated), clamp's meta's would.
  static int params(FooParam* p, const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!c10::isFloatingType(self.scalar_type())) return -1;
    return param_of(lo, &p[0]) && param_of(hi, &p[1]) ? 2 : -1;
  }
  template <class H>
  static void meta(H& h, const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    h.meta(self, at::OptionalScalarRef(&lo), at::OptionalScalarRef(&hi));
  }
};
struct HardtanhBackward : Plain {
  using Meta = at::meta::structured_hardsigmoid_backward;
  static constexpr const char* rust = "hardtanh_backward";
  static constexpr Gate gate = Gate::Float;
  FOO_NAMES("hardtanh_backward", "", "hardtanh_backward.grad_input")
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&, const c10::Scalar& lo, const c10::Scalar& hi) {
    return param_of(lo, &p[0]) && param_of(hi, &p[1]) ? 2 : -1;
  }
  template <class H>
  static void meta(H& h, const at::Tensor& grad, const at::Tensor& self, const c10::Scalar&, const c10::Scalar&) {
    h.meta(grad, self);
  }
};
// floor_divide is not structured: ATen's floor_divide_out builds the binary
// iterator div's meta builds for rounding_mode="floor" and runs div_floor.
struct FloorDivide : Plain {
  static constexpr bool numbers = true;
  using Meta = at::meta::structured_div_Tensor_mode;
  static constexpr const char* rust = "div";
  static constexpr Gate gate = Gate::Numeric;
  FOO_NAMES("floor_divide", "floor_divide_.Tensor", "floor_divide.out")
  static int params(FooParam* p, const at::Tensor&, const at::Tensor&) {
    p[0] = p_str("floor");
    return 1;
  }
  template <class H>
  static void meta(H& h, const at::Tensor& self, const at::Tensor& other) {
    h.meta(self, other, c10::string_view("floor"));
  }
};
// clamp with tensor bounds: ATen's meta builds over the bounds given; the
// kernel is clamp (both), clamp_min or clamp_max (one), as ATen's impl picks.
struct ClampT : Plain {
  using Meta = at::meta::structured_clamp_Tensor;
  static constexpr const char* rust = "clamp";
  static constexpr Gate gate = Gate::Numeric;
  static constexpr bool dense = false;  // optional tensor operands: not the dense lane's
  FOO_NAMES("clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out")
  using OptT = const std::optional<at::Tensor>&;
  static const char* rust_for(const at::Tensor&, OptT lo, OptT hi) {
    const bool has_lo = lo.has_value() && lo->defined(), has_hi = hi.has_value() && hi->defined();
    return has_lo && has_hi ? "clamp" : has_lo ? "clamp_min" : "clamp_max";
  }
  template <class H>
  static void meta(H& h, const at::Tensor& self, OptT lo, OptT hi) {
    h.meta(self, lo.has_value() ? at::OptionalTensorRef(*lo) : at::OptionalTensorRef(),
           hi.has_value() ? at::OptionalTensorRef(*hi) : at::OptionalTensorRef());
  }
};

#undef FOO_EW
#undef FOO_EW_ON
#undef FOO_NAMES

// ---- Ops ATen builds a TensorIterator for without a structured meta --------

constexpr char kWhere[] = "where.self";
constexpr char kWhereOut[] = "where.self_out";
constexpr char kCopy[] = "copy_";

// Elementwise op `rust`, computing in `ct`, over the operands of a built
// iterator as ATen left them (Layout::Iter: one shape, dims innermost
// first, overlap checked), in the order `slots` names them: an iterator
// operand's index, or -1 for the number `scalar`; `ps`: the op's `np` parameters.
bool ew_over_iter(const char* rust, c10::ScalarType ct, const at::TensorIteratorBase& it,
                  std::initializer_list<int> slots, const c10::Scalar* scalar = nullptr,
                  const FooParam* ps = nullptr, size_t np = 0) {
  const int code = dtype_code(ct);
  if (code < 0 || slots.size() > 4) return false;
  std::array<FooOperand, 4> ops{};
  std::array<c10::SmallVector<int64_t, 6>, 4> strides;
  const auto shape = it.shape();
  const int64_t nd = it.ndim();
  int n = 0;
  for (const int i : slots) {
    FooOperand& op = ops[n++];
    if (i < 0) {
      if (scalar == nullptr || !param_of(*scalar, &op.scalar)) return false;
      op.is_scalar = 1;
      continue;
    }
    const int dc = dtype_code(it.dtype(i));
    if (dc < 0) return false;
    const int64_t es = static_cast<int64_t>(it.element_size(i));
    const auto bs = it.strides(i);
    auto& st = strides[n - 1];
    st.resize(nd);
    for (int64_t d = 0; d < nd; ++d) st[d] = bs[d] / es;
    op.view = {it.data_ptr(i), nd, shape.data(), st.data(), static_cast<uint8_t>(dc)};
  }
  FooStatus st{};
  return done(foo_rs_ew(rust, static_cast<uint8_t>(code), ops.data(), n, ps, np, /*iter=*/1, &st), st);
}

// where(cond, self, other) into `out` (defined or not), as ATen's
// where_self_out builds it, for the common case: a bool condition and two
// foo tensors of one dtype; promotion, CPU scalars and a byte condition go
// to the Python kernel.
bool where_native(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  if (cond.scalar_type() != c10::ScalarType::Bool || self.scalar_type() != other.scalar_type() || !is_foo(cond) ||
      !is_foo(self) || !is_foo(other) || (out.defined() && out.scalar_type() != self.scalar_type()))
    return false;
  if (!out.defined()) out = create_out({0}, {}, self.options());
  auto it = at::TensorIteratorConfig()
                .check_all_same_dtype(false)
                .add_output(out)
                .add_const_input(cond)
                .add_const_input(self)
                .add_const_input(other)
                .build();
  // The common dtype TensorIterator saw first is the condition's: compute in self's.
  return ew_over_iter("where", self.scalar_type(), it, {0, 1, 2, 3});
}

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  at::Tensor out;
  if (named([&] { return where_native(cond, self, other, out); })) return out;
  return Slow<kWhere, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>::call(cond, self, other);
}

at::Tensor& where_self_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  if (named([&] { return where_native(cond, self, other, out); })) return out;
  return Slow<kWhereOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&)>::call(
      cond, self, other, out);
}

// abs.out (abs and abs_ are ATen composites over it) as ATen's abs_out
// builds it for real dtypes: TensorIterator::unary_op (one dtype, out
// resized, overlap checked). Complex (a float result) and bool keep the
// Python kernel.
constexpr char kAbsOut[] = "abs.out";
at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  if (named([&] {
        if (!is_foo(self) || !is_foo(out) || self.is_complex() || out.is_complex() ||
            self.scalar_type() == c10::ScalarType::Bool)
          return false;
        auto it = at::TensorIterator::unary_op(out, self);
        return ew_over_iter("abs", self.scalar_type(), it, {0, 1});
      }))
    return out;
  return Slow<kAbsOut, at::Tensor&(const at::Tensor&, at::Tensor&)>::call(self, out);
}

// masked_fill_(mask, number) (masked_fill is ATen's composite over it) as
// ATen's masked_fill_impl_cpu runs it: a bool mask, no partial overlap with
// self, an iterator over self and the mask broadcast to self (outputs not
// resized), then Rust's where(mask, value, self) into self. A self with
// internal overlap (CPU's warning), a value of another kind than self's
// dtype (a float into integers) or complex keep the Python kernel.
constexpr char kMaskedFill[] = "masked_fill_.Scalar";
at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  if (named([&] {
        if (!is_foo(self) || !is_foo(mask) || mask.scalar_type() != c10::ScalarType::Bool || self.is_complex() ||
            value.isComplex() || (!c10::isFloatingType(self.scalar_type()) && value.isFloatingPoint()) ||
            (self.scalar_type() != c10::ScalarType::Bool && value.isBoolean()) ||
            at::has_internal_overlap(self) == at::MemOverlap::Yes)
          return false;
        at::assert_no_partial_overlap(self, mask);
        auto it = at::TensorIteratorConfig()
                      .set_check_mem_overlap(false)
                      .check_all_same_dtype(false)
                      .resize_outputs(false)
                      .add_output(self)
                      .add_const_input(mask)
                      .add_const_input(self)
                      .build();
        return ew_over_iter("where", self.scalar_type(), it, {0, 1, -1, 2}, &value);
      }))
    return self;
  return Slow<kMaskedFill, at::Tensor&(at::Tensor&, const at::Tensor&, const c10::Scalar&)>::call(self, mask, value);
}

// `.item()`: the value of a one-element real foo tensor read by Rust (foo's
// memory is host memory and kernels finish before they return). Complex,
// conjugate/negative views and a wrong element count keep the Python kernel
// (its message, CPU's).
constexpr char kLocalScalar[] = "_local_scalar_dense";
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  c10::Scalar result;
  if (named([&] {
        FooView v;
        if (!is_foo(self) || self.numel() != 1 || self.is_complex() || self.is_conj() || self.is_neg() ||
            !view_of(self, &v))
          return false;
        FooParam p{};
        FooStatus st{};
        if (!done(foo_rs_local_scalar(&v, &p, &st), st)) return false;
        result = p.kind == 2 ? c10::Scalar(p.i != 0) : p.kind == 1 ? c10::Scalar(p.f) : c10::Scalar(p.i);
        return true;
      }))
    return result;
  return Slow<kLocalScalar, c10::Scalar(const at::Tensor&)>::call(self);
}

bool host_addressable(const at::Tensor& t) {
  return (is_foo(t) || t.device().is_cpu()) && t.layout() == c10::Layout::Strided && !t.is_neg() && !t.is_conj();
}

// copy_ between foo tensors or a foo and a CPU tensor: both are host
// memory, so the Rust cast-and-copy loop reads and writes them directly
// (ATen's copy_impl iterator: broadcasting, dtype conversion, overlap checks).
// Views of one storage that are not the same view go to the Python kernel,
// which snapshots the source when ATen cannot decide the overlap.
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.is_same(src)) return self;
  const bool shared = self.has_storage() && src.has_storage() && self.storage().is_alias_of(src.storage());
  if (!host_addressable(self) || !host_addressable(src) || shared)
    return Slow<kCopy, at::Tensor&(at::Tensor&, const at::Tensor&, bool)>::call(self, src, non_blocking);
  // One dtype, one shape, both contiguous (the common copy_ and .to("foo")):
  // nothing to broadcast, cast or order, and separate storages cannot
  // overlap, so Rust copies the views without a TensorIterator (building one
  // was most of a small copy_'s cost).
  if (self.scalar_type() == src.scalar_type() && !self.is_complex() && self.sizes().equals(src.sizes()) &&
      self.is_contiguous() && src.is_contiguous() && named([&] {
        FooOperand ops[2]{};
        if (!view_of(self, &ops[0].view) || !view_of(src, &ops[1].view)) return false;
        FooStatus st{};
        return done(foo_rs_ew("identity", ops[0].view.dtype, ops, 2, nullptr, 0, /*iter=*/0, &st), st);
      }))
    return self;
  if (named([&] {
        auto it = at::TensorIteratorConfig()
                      .add_output(self)
                      .add_const_input(src)
                      .resize_outputs(false)
                      .check_all_same_dtype(false)
                      .check_all_same_device(false)
                      .build();
        return it.numel() == 0 || run_iter("identity", Gate::Any, it, nullptr, 0);
      }))
    return self;
  return Slow<kCopy, at::Tensor&(at::Tensor&, const at::Tensor&, bool)>::call(self, src, non_blocking);
}

constexpr char kZero[] = "zero_";
constexpr char kFill[] = "fill_.Scalar";

// self[...] = value: Rust's cast-and-copy loop with a number as its input.
// A tensor whose elements share memory (Python raises CPU's error for it),
// or a value that does not convert to its integer dtype as CPU does, goes
// to the Python kernel.
bool fill_native(at::Tensor& self, const FooParam& value) {
  if (!is_foo(self) || !fits(self.scalar_type(), value)) return false;
  FooStatus st{};
  // A contiguous tensor (its cached flag) cannot overlap itself: one dense fill.
  if (self.is_contiguous()) {
    const int code = dtype_code(self.scalar_type());
    return code >= 0 && done(foo_rs_fill_dense(self.data_ptr(), static_cast<size_t>(self.numel()),
                                                static_cast<uint8_t>(code), &value, &st),
                             st);
  }
  FooView v;
  if (!view_of(self, &v) || at::has_internal_overlap(self) == at::MemOverlap::Yes) return false;
  return done(foo_rs_fill(&v, &value, &st), st);
}

at::Tensor& zero_(at::Tensor& self) {
  // A contiguous tensor: zero is all-zero bytes in every dtype foo holds.
  if (named([&] {
        const int code = dtype_code(self.scalar_type());
        if (!is_foo(self) || !self.is_contiguous() || code < 0) return fill_native(self, FooParam{0, 0, 0.0, nullptr});
        FooStatus st{};
        return done(foo_rs_zero_dense(self.data_ptr(), static_cast<size_t>(self.numel()), static_cast<uint8_t>(code), &st),
                    st);
      }))
    return self;
  return Slow<kZero, at::Tensor&(at::Tensor&)>::call(self);
}

// CPU's fill_ converts the value with Scalar::to<T>, which refuses one the
// dtype cannot hold ("value cannot be converted to type ... without
// overflow"): ATen's own check, before Rust or the Python kernel stores
// anything (both saturated or wrapped such a value silently).
bool check_fill_value(at::ScalarType st, const c10::Scalar& value) {
  switch (st) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kBool:
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
      AT_DISPATCH_V2(st, "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }), AT_EXPAND(AT_INTEGRAL_TYPES),
                     at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kBool);
      break;
    default:
      break;
  }
  return true;
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (!value.isSymbolic()) named([&] { return check_fill_value(self.scalar_type(), value); });
  FooParam p;
  if (param_of(value, &p) && named([&] { return fill_native(self, p); })) return self;
  return Slow<kFill, at::Tensor&(at::Tensor&, const c10::Scalar&)>::call(self, value);
}

// ---- Matrix products, reductions, softmax: MetaBase-based metas ------------
// Each op registers its functional and out= overloads (ATen's
// CompositeExplicitAutogradNonFunctional kernels of the in-place forms call
// the out= one). An op struct gives Meta, F and O (the functional and out=
// overload names; O's Python kernel is the slow path of both) and
// run(h, args...): device check, ATen's meta, Rust; false: slow path.

// What torchgen's device wrappers check first (a TensorIterator checks it
// itself): every tensor argument on one device, with ATen's message.
void same_device(const char* method, std::initializer_list<std::pair<const char*, const at::Tensor*>> args) {
  std::optional<c10::Device> common;
  for (const auto& [name, t] : args) {
    if (t != nullptr) c10::impl::check_and_update_common_device(common, *t, method, name);
  }
}

template <class Op, class... A>
at::Tensor m_functional(A... a) {
  Holder<typename Op::Meta, Mode::Functional> h;
  if (named([&] { return Op::run(h, a...); })) return std::move(h.out_[0]);
  // The meta ran and made the output: the out= overload's Python kernel fills it.
  TORCH_INTERNAL_ASSERT(h.out_[0].defined());
  return Slow<Op::O, at::Tensor&(A..., at::Tensor&)>::call(a..., h.out_[0]);
}

template <class Op, class... A>
at::Tensor& m_out(A... a, at::Tensor& out) {
  if (named([&] {
        Holder<typename Op::Meta, Mode::Out> h(out);
        return Op::run(h, a...);
      }))
    return out;
  return Slow<Op::O, at::Tensor&(A..., at::Tensor&)>::call(a..., out);
}

#define FOO_META_OP(Name, MetaT, f, o) \
  struct Name {                        \
    using Meta = at::meta::MetaT;      \
    static constexpr char F[] = f;     \
    static constexpr char O[] = o;     \
    static constexpr char kDev[] = "wrapper_PrivateUse1_" f;

// `out = beta * input + alpha * (a @ b)` into h's result.
template <class H>
bool run_addmm(H& h, const at::Tensor* input, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
               const c10::Scalar& alpha, bool batched) {
  const at::Tensor& out = h.result();
  FooView vo, vi, va, vb;
  FooParam pbeta, palpha;
  if (!view_of(out, &vo) || !view_of(a, &va) || !view_of(b, &vb) || !param_of(beta, &pbeta) ||
      !param_of(alpha, &palpha))
    return false;
  // One dtype throughout (ATen's checks have run); anything else is slow.
  if (a.scalar_type() != out.scalar_type() || b.scalar_type() != out.scalar_type()) return false;
  const FooView* pi = nullptr;
  at::Tensor in;
  if (input != nullptr && !(beta.isIntegral(true) ? beta.toLong() == 0 : beta.toDouble() == 0.0)) {
    in = input->expand(out.sizes());
    if (in.scalar_type() != out.scalar_type() || !view_of(in, &vi)) return false;
    pi = &vi;
  }
  FooStatus st{};
  if (!done(foo_rs_addmm(&vo, pi, &va, &vb, pbeta, palpha, batched ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}

FOO_META_OP(Mm, structured_mm, "mm", "mm.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& mat2) {
    same_device(kDev, {{"self", &self}, {"mat2", &mat2}, {"out", h.out_arg()}});
    h.meta(self, mat2);
    return run_addmm(h, nullptr, self, mat2, c10::Scalar(0), c10::Scalar(1), false);
  }
};
FOO_META_OP(Bmm, structured_bmm, "bmm", "bmm.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& mat2) {
    same_device(kDev, {{"self", &self}, {"mat2", &mat2}, {"out", h.out_arg()}});
    h.meta(self, mat2);
    return run_addmm(h, nullptr, self, mat2, c10::Scalar(0), c10::Scalar(1), true);
  }
};
FOO_META_OP(Addmm, structured_addmm, "addmm", "addmm.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
    same_device(kDev, {{"self", &self}, {"mat1", &mat1}, {"mat2", &mat2}, {"out", h.out_arg()}});
    h.meta(self, mat1, mat2, beta, alpha);
    return run_addmm(h, &self, mat1, mat2, beta, alpha, false);
  }
};
FOO_META_OP(Baddbmm, structured_baddbmm, "baddbmm", "baddbmm.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
    same_device(kDev, {{"self", &self}, {"batch1", &b1}, {"batch2", &b2}, {"out", h.out_arg()}});
    h.meta(self, b1, b2, beta, alpha);
    return run_addmm(h, &self, b1, b2, beta, alpha, true);
  }
};

// The dims a reduction runs over (sorted; every dim for none/empty).
c10::SmallVector<int64_t, 6> reduce_dims(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  c10::SmallVector<int64_t, 6> dims;
  const int64_t nd = self.dim();
  if (!dim.has_value() || dim->empty()) {
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
    return dims;
  }
  for (const int64_t d : *dim) dims.push_back(c10::maybe_wrap_dim(d, nd));
  std::sort(dims.begin(), dims.end());
  return dims;
}

// Runs reduction `rust` of `self` into `out` when Rust writes its
// dtype directly: the input's own dtype for floats, int64 for integers
// and bool (sum); other out dtypes (a cast) take the slow path.
bool reduce_into(const at::Tensor& out, const char* rust, const at::Tensor& self, at::OptionalIntArrayRef dim,
                 bool int_to_long) {
  const auto in_t = self.scalar_type();
  const auto out_t = out.scalar_type();
  const bool direct = c10::isFloatingType(in_t) ? out_t == in_t
                                                : out_t == (int_to_long ? c10::ScalarType::Long : in_t);
  FooView vo, vi;
  if (!direct || !view_of(out, &vo) || !view_of(self, &vi)) return false;
  const auto dims = reduce_dims(self, dim);
  FooStatus st{};
  return done(foo_rs_reduce(rust, &vo, nullptr, &vi, dims.data(), dims.size(), 1.0, 2.0, &st), st);
}

// The same into h's result (a proxy's values then go to the caller's out=).
template <class H>
bool run_reduce(H& h, const char* rust, const at::Tensor& self, at::OptionalIntArrayRef dim, bool int_to_long) {
  if (!reduce_into(h.result(), rust, self, dim, int_to_long)) return false;
  h.finish();
  return true;
}

FOO_META_OP(Sum, structured_sum_dim_IntList, "sum.dim_IntList", "sum.IntList_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim, dtype);
    return run_reduce(h, "sum", self, dim, true);
  }
};
FOO_META_OP(Mean, structured_mean_dim, "mean.dim", "mean.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim, dtype);
    return run_reduce(h, "mean", self, dim, false);
  }
};
// The p-norm over dims (every dim for none): Rust in the input's floating
// dtype; a dtype= asking for another (a cast first) or a complex input or
// order takes the slow path.
FOO_META_OP(VectorNorm, structured_linalg_vector_norm, "linalg_vector_norm", "linalg_vector_norm.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<c10::ScalarType> dtype) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, ord, dim, keepdim, dtype);
    const at::Tensor& out = h.result();
    FooView vo, vi;
    if (ord.isComplex() || ord.isSymbolic() || out.scalar_type() != self.scalar_type() || !view_of(out, &vo) ||
        !view_of(self, &vi))
      return false;
    const auto dims = reduce_dims(self, dim);
    FooStatus st{};
    if (!done(foo_rs_reduce("norm", &vo, nullptr, &vi, dims.data(), dims.size(), 1.0, ord.toDouble(), &st), st))
      return false;
    h.finish();
    return true;
  }
};
FOO_META_OP(Amax, structured_amax, "amax", "amax.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim);
    return self.numel() > 0 && run_reduce(h, "max", self, dim, false);
  }
};
FOO_META_OP(Amin, structured_amin, "amin", "amin.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim);
    return self.numel() > 0 && run_reduce(h, "min", self, dim, false);
  }
};

// (log_)softmax over `dim` of an input of the output's dtype, made
// contiguous first as ATen's CPU kernel does (softmax_cpu_out).
template <class H>
bool run_softmax(H& h, const at::Tensor& self_, int64_t dim, bool log) {
  const at::Tensor& out = h.result();
  if (self_.scalar_type() != out.scalar_type() || self_.dim() == 0) return false;
  const at::Tensor self = self_.contiguous();
  FooView vo, vi;
  if (!view_of(out, &vo) || !view_of(self, &vi)) return false;
  FooStatus st{};
  if (!done(foo_rs_softmax(&vo, &vi, c10::maybe_wrap_dim(dim, self.dim()), log ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}

#define FOO_SOFTMAX(Name, MetaT, f, o, log)                                                 \
  FOO_META_OP(Name, MetaT, f, o)                                                            \
    template <class H>                                                                      \
    static bool run(H& h, const at::Tensor& self, int64_t dim, bool half_to_float) {        \
      same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});                           \
      h.meta(self, dim, half_to_float);                                                     \
      return run_softmax(h, self, dim, log);                                                \
    }                                                                                       \
  };
FOO_SOFTMAX(Softmax, structured__softmax, "_softmax", "_softmax.out", false)
FOO_SOFTMAX(LogSoftmax, structured__log_softmax, "_log_softmax", "_log_softmax.out", true)
#undef FOO_SOFTMAX

// Its backward, with grad and output made contiguous as ATen's CPU kernel
// does (a loss's expanded gradient, e.g. of .sum(), has stride 0).
template <class H>
bool run_softmax_backward(H& h, const at::Tensor& grad_, const at::Tensor& output_, int64_t dim, bool log) {
  const at::Tensor& gi = h.result();
  const auto t = gi.scalar_type();
  if (grad_.scalar_type() != t || output_.scalar_type() != t || output_.dim() == 0) return false;
  const at::Tensor grad = grad_.contiguous(), output = output_.contiguous();
  FooView vgi, vg, vy;
  if (!view_of(gi, &vgi) || !view_of(grad, &vg) || !view_of(output, &vy)) return false;
  FooStatus st{};
  const int64_t d = c10::maybe_wrap_dim(dim, output.dim());
  if (!done(foo_rs_softmax_backward(&vgi, &vg, &vy, d, log ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}

#define FOO_SOFTMAX_BACKWARD(Name, MetaT, f, o, log)                                                     \
  FOO_META_OP(Name, MetaT, f, o)                                                                         \
    template <class H>                                                                                   \
    static bool run(H& h, const at::Tensor& grad, const at::Tensor& output, int64_t dim,                 \
                    c10::ScalarType input_dtype) {                                                       \
      same_device(kDev, {{"grad_output", &grad}, {"output", &output}, {"out", h.out_arg()}});            \
      h.meta(grad, output, dim, input_dtype);                                                            \
      return run_softmax_backward(h, grad, output, dim, log);                                            \
    }                                                                                                    \
  };
FOO_SOFTMAX_BACKWARD(SoftmaxBackward, structured__softmax_backward_data, "_softmax_backward_data",
                     "_softmax_backward_data.out", false)
FOO_SOFTMAX_BACKWARD(LogSoftmaxBackward, structured__log_softmax_backward_data, "_log_softmax_backward_data",
                     "_log_softmax_backward_data.out", true)
#undef FOO_SOFTMAX_BACKWARD
// argmax/argmin: ATen's structured meta (the empty-input checks, the
// output's shape), then Rust; over every dim (dim=None) the input is read
// flattened (reshape: a view when it can be) and the output as one element.
// Bool and complex inputs keep their Python kernel (CPU's errors).
template <class H>
bool run_arg(H& h, const char* rust, const at::Tensor& self, std::optional<int64_t> dim) {
  const at::Tensor& out = h.result();
  if (self.scalar_type() == at::kBool || self.is_complex()) return false;
  if (out.numel() > 0) {
    FooView vo, vx;
    const at::Tensor x = dim.has_value() ? self : self.reshape({-1});
    if (!view_of(out, &vo) || !view_of(x, &vx)) return false;
    const int64_t one = 1;
    if (!dim.has_value()) vo = {vo.ptr, 1, &one, &one, vo.dtype};
    const int64_t d = dim.has_value() ? c10::maybe_wrap_dim(*dim, self.dim()) : 0;
    FooStatus st{};
    if (!done(foo_rs_reduce(rust, &vo, nullptr, &vx, &d, x.dim() > 0 ? 1 : 0, 1.0, 2.0, &st), st)) return false;
  }
  h.finish();
  return true;
}
FOO_META_OP(Argmax, structured_argmax, "argmax", "argmax.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim);
    return run_arg(h, "argmax", self, dim);
  }
};
FOO_META_OP(Argmin, structured_argmin, "argmin", "argmin.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim);
    return run_arg(h, "argmin", self, dim);
  }
};

// MSE loss: ATen's structured meta (reduction none: the broadcast output of
// the promoted dtype; mean/sum: a 0-d output of the input's dtype), then
// Rust over the broadcast shape. Mixed or non-floating dtypes keep the
// Python kernel.
FOO_META_OP(MseLoss, structured_mse_loss, "mse_loss", "mse_loss.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
    same_device(kDev, {{"self", &self}, {"target", &target}, {"out", h.out_arg()}});
    h.meta(self, target, reduction);
    const at::Tensor& out = h.result();
    const auto dt = self.scalar_type();
    if (!c10::isFloatingType(dt) || target.scalar_type() != dt || out.scalar_type() != dt) return false;
    const auto shape = at::infer_size(self.sizes(), target.sizes());
    FooView vo, va, vb;
    if (!view_of(out, &vo) || !view_of(self, &va) || !view_of(target, &vb)) return false;
    FooStatus st{};
    if (!done(foo_rs_mse_loss(&vo, &va, &vb, shape.data(), shape.size(), reduction, &st), st)) return false;
    h.finish();
    return true;
  }
};

// cat through ATen's meta (shapes, dim, memory format, legacy empty
// inputs), for foo inputs of the result's dtype; a cast goes to the Python kernel.
struct Cat {
  using Meta = at::meta::structured_cat;
  static constexpr char F[] = "cat";
  static constexpr char O[] = "cat.out";
  static constexpr char kDev[] = "wrapper_PrivateUse1_cat";
  template <class H>
  static bool run(H& h, const at::ITensorListRef& tensors, int64_t dim) {
    std::optional<c10::Device> common;
    if (const at::Tensor* out = h.out_arg()) c10::impl::check_and_update_common_device(common, *out, kDev, "out");
    c10::impl::check_and_update_common_device(common, tensors, kDev, "tensors");
    const auto pre = h.meta(tensors, dim);
    const at::Tensor& result = h.result();
    for (const at::Tensor& t : tensors)
      if (!is_foo(t) || t.scalar_type() != result.scalar_type()) return false;
    // ATen's meta refused an out= that overlaps itself or an input; a
    // functional result is fresh memory.
    c10::SmallVector<FooView, 8> views;
    for (const at::Tensor& t : tensors) {
      if (t.numel() == 0) continue;  // nothing to copy (and legacy 1-d empties)
      FooView v;
      if (!view_of(t, &v)) return false;
      views.push_back(v);
    }
    FooView vo;
    if (!is_foo(result) || !view_of(result, &vo)) return false;
    if (result.numel() > 0) {
      FooStatus st{};
      if (!done(foo_rs_cat(&vo, views.data(), views.size(), pre.dim, &st), st)) return false;
    }
    h.finish();
    return true;
  }
};

constexpr char kLayerNorm[] = "native_layer_norm";
constexpr char kLayerNormBack[] = "native_layer_norm_backward";

using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// One float dtype throughout, every tensor on foo (or absent): what the Rust
// kernels take directly; mixed precision (bf16 input, f32 weight) is slow.
bool same_float(c10::ScalarType t, std::initializer_list<const at::Tensor*> ts) {
  if (!c10::isFloatingType(t)) return false;
  for (const at::Tensor* x : ts)
    if (x->defined() && (!is_foo(*x) || x->scalar_type() != t)) return false;
  return true;
}

const at::Tensor& value_or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// A contiguous tensor as a 1-d view (the norm kernels take per-row and
// per-feature vectors as 1-d); null for an undefined tensor.
struct Flat {
  int64_t size = 0, stride = 1;
  FooView v{};
  const FooView* p = nullptr;
};

bool flat_of(const at::Tensor& t, Flat* f) {
  f->p = nullptr;
  if (!t.defined()) return true;
  if (!t.is_contiguous() || !view_of(t, &f->v)) return false;
  f->size = t.numel();
  f->v.ndim = 1;
  f->v.sizes = &f->size;
  f->v.strides = &f->stride;
  f->p = &f->v;
  return true;
}

// native_layer_norm: ATen's own input checks (_check_layer_norm_inputs),
// ATen's output layout (contiguous out; mean and rstd of shape
// input[:axis] + [1] * len(normalized_shape)), then Rust.
Tensor3 layer_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                   const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
                   double eps) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  Tensor3 result;
  if (same_float(input.scalar_type(), {&input, &weight, &bias}) && named([&] {
        same_device("wrapper_PrivateUse1__native_layer_norm",
                    {{"input", &input}, {"weight", &weight}, {"bias", &bias}});
        const auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
        const auto mn = at::native::_check_layer_norm_inputs(input, shape, weight, bias);
        const int64_t axis = input.dim() - static_cast<int64_t>(shape.size());
        const at::Tensor x = input.contiguous();
        const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
        const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
        c10::SmallVector<int64_t, 6> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
        stat_shape.resize(input.dim(), 1);
        at::Tensor out = create_out(input.sizes(), {}, input.options());
        at::Tensor mean = create_out(stat_shape, {}, input.options());
        at::Tensor rstd = create_out(stat_shape, {}, input.options());
        FooView vo, vx;
        Flat fm, fr, fw, fb;
        if (!view_of(out, &vo) || !view_of(x, &vx) || !flat_of(mean, &fm) || !flat_of(rstd, &fr) ||
            !flat_of(w, &fw) || !flat_of(b, &fb))
          return false;
        FooStatus st{};
        if (!done(foo_rs_layer_norm(&vo, fm.p, fr.p, &vx, fw.p, fb.p, mn.first, mn.second, eps, &st), st))
          return false;
        result = Tensor3(std::move(out), std::move(mean), std::move(rstd));
        return true;
      }))
    return result;
  return Slow<kLayerNorm, Tensor3(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                                  const std::optional<at::Tensor>&, double)>::call(input, normalized_shape, weight_opt,
                                                                                   bias_opt, eps);
}

// native_layer_norm_backward for the common case (the Python kernel keeps
// the checks of unusual calls: mismatched grad_out, stats, masks).
Tensor3 layer_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                            const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
                            const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> mask) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  Tensor3 result;
  if (same_float(input.scalar_type(), {&grad_out, &input, &mean, &rstd, &weight, &bias}) &&
      grad_out.sizes() == input.sizes() && (!mask[1] || weight.defined()) && (!mask[2] || bias.defined()) &&
      named([&] {
        same_device("wrapper_PrivateUse1__native_layer_norm_backward",
                    {{"grad_out", &grad_out}, {"input", &input}, {"mean", &mean}, {"rstd", &rstd},
                     {"weight", &weight}, {"bias", &bias}});
        const auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
        const auto mn = at::native::_check_layer_norm_inputs(input, shape, weight, bias);
        if (mean.numel() != mn.first || rstd.numel() != mn.first) return false;
        const at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
        const at::Tensor mu = mean.contiguous(), r = rstd.contiguous();
        const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
        at::Tensor gi, gw, gb;
        if (mask[0]) gi = create_out(input.sizes(), {}, input.options());
        if (mask[1]) gw = create_out(weight.sizes(), {}, weight.options());
        if (mask[2]) gb = create_out(bias.sizes(), {}, bias.options());
        if (gi.defined() || gw.defined() || gb.defined()) {
          FooView vgi, vdy, vx;
          Flat fgw, fgb, fm, fr, fw;
          if ((gi.defined() && !view_of(gi, &vgi)) || !flat_of(gw, &fgw) || !flat_of(gb, &fgb) ||
              !view_of(dy, &vdy) || !view_of(x, &vx) || !flat_of(mu, &fm) || !flat_of(r, &fr) || !flat_of(w, &fw))
            return false;
          FooStatus st{};
          if (!done(foo_rs_layer_norm_backward(gi.defined() ? &vgi : nullptr, fgw.p, fgb.p, &vdy, &vx, fm.p, fr.p,
                                               fw.p, mn.first, mn.second, &st),
                    st))
            return false;
        }
        result = Tensor3(std::move(gi), std::move(gw), std::move(gb));
        return true;
      }))
    return result;
  return Slow<kLayerNormBack,
              Tensor3(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef, const at::Tensor&, const at::Tensor&,
                      const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, std::array<bool, 3>)>::
      call(grad_out, input, normalized_shape, mean, rstd, weight_opt, bias_opt, mask);
}

constexpr char kGroupNormBack[] = "native_group_norm_backward";

// ATen's check_group_norm_inputs (group_norm.cpp keeps it file-local), with
// its messages; torch 2.14 added the first two.
void check_group_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, int64_t C,
                      int64_t HxW, int64_t groups) {
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 14
  TORCH_CHECK(C > 0, "Expected number of channels to be greater than 0, got ", C);
  TORCH_CHECK(HxW > 0, "Expected HxW to be greater than 0, got ", HxW);
#else
  (void)HxW;
#endif
  TORCH_CHECK(groups > 0, "Expected num groups to be greater than 0, got ", groups);
  TORCH_CHECK(C % groups == 0, "Expected number of channels in input to be divisible by ",
              "num_groups, but got input of shape ", input.sizes(), " and num_groups=", groups);
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == C),
              "Expected weight to be a vector of size equal to the number of ",
              "channels in input, but got weight of shape ", weight.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.numel() == C),
              "Expected bias to be a vector of size equal to the number of ",
              "channels in input, but got bias of shape ", weight.sizes(), " and input of shape ", input.sizes());
}

// The layout CPU's group norm gives its outputs (X.suggest_memory_format()):
// the Rust kernels work on NCHW, so a channels-last result is converted.
at::Tensor in_layout(at::Tensor t, at::MemoryFormat fmt) {
  return fmt == at::MemoryFormat::Contiguous ? t : t.contiguous(fmt);
}

// native_group_norm: CPU's checks, outputs and layouts; Rust for one float
// dtype throughout. Mixed precision (a half input with float32 affine
// parameters) runs ATen's composite, as foo did before this kernel (its
// statistics are then in the input's dtype, where CPU's are float32).
Tensor3 group_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
                   const std::optional<at::Tensor>& bias_opt, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
                   int64_t group, double eps) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  const at::Tensor& bias = value_or_undefined(bias_opt);
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  Tensor3 result;
  if (same_float(input.scalar_type(), {&input, &weight, &bias}) && named([&] {
        same_device("wrapper_PrivateUse1__native_group_norm",
                    {{"input", &input}, {"weight", &weight}, {"bias", &bias}});
        check_group_norm(input, weight, bias, C, HxW, group);
        TORCH_CHECK(input.numel() == N * C * HxW, "native_group_norm: expected input of N * C * HxW = ",
                    N * C * HxW, " elements, but got ", input.sizes());
        const auto fmt = input.suggest_memory_format();
        const auto stat = input.options().memory_format(at::MemoryFormat::Contiguous);
        if (input.numel() == 0) {
          result = Tensor3(at::empty_like(input, fmt), at::zeros({N, group}, stat),
                           at::full({N, group}, NAN, stat));
          return true;
        }
        const at::Tensor x = input.contiguous();
        const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
        const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
        at::Tensor out = create_out(input.sizes(), {}, input.options());
        at::Tensor mean = create_out({N, group}, {}, stat);
        at::Tensor rstd = create_out({N, group}, {}, stat);
        FooView vo, vx, vm, vr;
        Flat fw, fb;
        if (!view_of(out, &vo) || !view_of(x, &vx) || !view_of(mean, &vm) || !view_of(rstd, &vr) ||
            !flat_of(w, &fw) || !flat_of(b, &fb))
          return false;
        const int64_t geom[4] = {N, C, HxW, group};
        FooStatus st{};
        if (!done(foo_rs_group_norm(&vo, &vm, &vr, &vx, fw.p, fb.p, geom, eps, &st), st)) return false;
        result = Tensor3(in_layout(std::move(out), fmt), std::move(mean), std::move(rstd));
        return true;
      }))
    return result;
  // ATen's composite views its input, which fails for a non-contiguous one
  // where CPU's kernel succeeds: it gets a contiguous input.
  return at::native::math_group_norm(input.contiguous(), weight_opt, bias_opt, N, C, HxW, group, eps);
}

// native_group_norm_backward: CPU's checks and layouts, Rust for one float
// dtype throughout; the Python kernel otherwise.
Tensor3 group_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                            const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt, c10::SymInt N_,
                            c10::SymInt C_, c10::SymInt HxW_, int64_t group, std::array<bool, 3> mask) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  Tensor3 result;
  const auto N = N_.maybe_as_int(), C = C_.maybe_as_int(), HxW = HxW_.maybe_as_int();
  if (N && C && HxW && same_float(input.scalar_type(), {&grad_out, &input, &mean, &rstd, &weight}) &&
      grad_out.sizes() == input.sizes() && group > 0 && *C % group == 0 &&
      input.numel() == *N * *C * HxW.value() && mean.numel() == *N * group && rstd.numel() == *N * group &&
      (!weight.defined() || weight.numel() == *C) && named([&] {
        same_device("wrapper_PrivateUse1__native_group_norm_backward",
                    {{"grad_out", &grad_out}, {"input", &input}, {"mean", &mean}, {"rstd", &rstd},
                     {"weight", &weight}});
        const auto fmt = input.suggest_memory_format();
        const auto popts = (weight.defined() ? weight.options() : input.options())
                               .memory_format(at::MemoryFormat::Contiguous);
        at::Tensor gi, gw, gb;
        if (input.numel() == 0) {
          if (mask[0]) gi = at::zeros_like(input, {}, fmt);
          if (mask[1]) gw = at::zeros({*C}, popts);
          if (mask[2]) gb = at::zeros({*C}, popts);
          result = Tensor3(std::move(gi), std::move(gw), std::move(gb));
          return true;
        }
        const at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
        const at::Tensor mu = mean.contiguous(), r = rstd.contiguous();
        const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
        if (mask[0]) gi = create_out(input.sizes(), {}, input.options());
        if (mask[1]) gw = create_out({*C}, {}, popts);
        if (mask[2]) gb = create_out({*C}, {}, popts);
        if (gi.defined() || gw.defined() || gb.defined()) {
          FooView vgi, vdy, vx, vm, vr;
          Flat fgw, fgb, fw;
          if ((gi.defined() && !view_of(gi, &vgi)) || !flat_of(gw, &fgw) || !flat_of(gb, &fgb) ||
              !view_of(dy, &vdy) || !view_of(x, &vx) || !view_of(mu, &vm) || !view_of(r, &vr) || !flat_of(w, &fw))
            return false;
          const int64_t geom[4] = {*N, *C, *HxW, group};
          FooStatus st{};
          if (!done(foo_rs_group_norm_backward(gi.defined() ? &vgi : nullptr, fgw.p, fgb.p, &vdy, &vx, &vm, &vr, fw.p,
                                               geom, &st),
                    st))
            return false;
        }
        if (gi.defined()) gi = in_layout(std::move(gi), fmt);
        result = Tensor3(std::move(gi), std::move(gw), std::move(gb));
        return true;
      }))
    return result;
  return Slow<kGroupNormBack,
              Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const std::optional<at::Tensor>&, c10::SymInt, c10::SymInt, c10::SymInt, int64_t,
                      std::array<bool, 3>)>::call(grad_out, input, mean, rstd, weight_opt, N_, C_, HxW_, group, mask);
}

// ---- Indexing, losses, pooling, dropout ---------------------------------------

constexpr char kIndexSelect[] = "index_select";
constexpr char kIndexSelectOut[] = "index_select.out";

// index_select of a foo tensor (one dim or more) by a 0-d/1-d int32/int64
// foo index into `out` (defined or not). Everything else (a 0-d self, an
// empty self indexed by a non-empty index, out of another dtype or
// overlapping an input) goes to the Python kernel, which raises CPU's errors.
bool index_select_native(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  const auto it = index.scalar_type();
  if (!is_foo(self) || !is_foo(index) || self.dim() == 0 || index.dim() > 1 ||
      (it != c10::ScalarType::Long && it != c10::ScalarType::Int) || (self.numel() == 0 && index.numel() > 0))
    return false;
  if (out.defined() && (!is_foo(out) || out.scalar_type() != self.scalar_type() ||
                        at::has_internal_overlap(out) == at::MemOverlap::Yes ||
                        at::get_overlap_status(out, self) != at::MemOverlapStatus::No ||
                        at::get_overlap_status(out, index) != at::MemOverlapStatus::No))
    return false;
  same_device(out.defined() ? "wrapper_PrivateUse1_out_index_select_out" : "wrapper_PrivateUse1__index_select",
              {{"self", &self}, {"index", &index}, {"out", out.defined() ? &out : nullptr}});
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  c10::SmallVector<int64_t, 6> shape(self.sizes().begin(), self.sizes().end());
  shape[d] = index.numel();
  if (out.defined()) {
    at::native::resize_output(out, shape);
  } else {
    out = create_out(shape, {}, self.options());
  }
  FooView vo, vs, vi;
  if (!view_of(out, &vo) || !view_of(self, &vs) || !view_of(index, &vi)) return false;
  FooStatus st{};
  return done(foo_rs_index_select(&vo, &vs, &vi, d, &st), st);
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out;
  if (named([&] { return index_select_native(self, dim, index, out); })) return out;
  return Slow<kIndexSelect, at::Tensor(const at::Tensor&, int64_t, const at::Tensor&)>::call(self, dim, index);
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  if (named([&] { return index_select_native(self, dim, index, out); })) return out;
  return Slow<kIndexSelectOut, at::Tensor&(const at::Tensor&, int64_t, const at::Tensor&, at::Tensor&)>::call(
      self, dim, index, out);
}

constexpr char kEmbeddingBack[] = "embedding_dense_backward";

// The gradient of embedding: rows of grad_output summed into the rows of a
// fresh [num_weights, d] tensor that the indices name.
at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq) {
  const auto it = indices.scalar_type();
  at::Tensor out;
  if (is_foo(grad_output) && is_foo(indices) && (it == c10::ScalarType::Long || it == c10::ScalarType::Int) &&
      c10::isFloatingType(grad_output.scalar_type()) && named([&] {
        same_device("wrapper_PrivateUse1__embedding_dense_backward",
                    {{"grad_output", &grad_output}, {"indices", &indices}});
        const int64_t d = grad_output.dim() > 0 ? grad_output.size(-1) : 1;
        const at::Tensor grad = grad_output.reshape({-1, d}).contiguous();
        const at::Tensor idx = indices.reshape({-1}).contiguous();
        out = create_out({num_weights.expect_int(), d}, {}, grad_output.options());
        FooView vo, vg, vi;
        if (!view_of(out, &vo) || !view_of(grad, &vg) || !view_of(idx, &vi)) return false;
        FooStatus st{};
        return done(foo_rs_embedding_backward(&vo, &vg, &vi, padding_idx.expect_int(), scale_grad_by_freq ? 1 : 0, &st),
                    st);
      }))
    return out;
  return Slow<kEmbeddingBack, at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, bool)>::call(
      grad_output, indices, std::move(num_weights), std::move(padding_idx), scale_grad_by_freq);
}

constexpr char kNll[] = "nll_loss_forward";
constexpr char kNllOut[] = "nll_loss_forward.output";
constexpr char kNllBack[] = "nll_loss_backward";
constexpr char kNllBackOut[] = "nll_loss_backward.grad_input";

using Tensor2 = std::tuple<at::Tensor, at::Tensor>;
using Tensor2Ref = std::tuple<at::Tensor&, at::Tensor&>;

at::OptionalTensorRef opt_ref(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

// nll_loss forward: ATen's meta (shapes, target dtype, weight size and the
// messages), then Rust on a contiguous input and target; the Python kernel
// for an input dtype Rust does not take.
template <Mode M>
bool nll_native(Holder<at::meta::structured_nll_loss_forward, M, 2>& h, const at::Tensor& self,
                const at::Tensor& target, const std::optional<at::Tensor>& weight, int64_t reduction,
                int64_t ignore_index) {
  const at::Tensor& w = value_or_undefined(weight);
  same_device("wrapper_PrivateUse1_nll_loss_forward",
              {{"self", &self}, {"target", &target}, {"weight", &w},
               {"output", h.out_arg(0)},
               {"total_weight", h.out_arg(1)}});
  h.meta(self, target, opt_ref(weight), reduction, ignore_index);
  const auto tt = target.scalar_type();
  if ((w.defined() && w.scalar_type() != self.scalar_type()) ||
      (tt != c10::ScalarType::Long && tt != c10::ScalarType::Byte))
    return false;  // the Python kernel raises CPU's error
  const at::Tensor x = self.contiguous(), t = target.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  FooView vo, vtw, vx, vt, vw;
  if (!view_of(h.result(0), &vo) || !view_of(h.result(1), &vtw) || !view_of(x, &vx) || !view_of(t, &vt) ||
      (wc.defined() && !view_of(wc, &vw)))
    return false;
  FooStatus st{};
  if (!done(foo_rs_nll_loss(&vo, &vtw, &vx, &vt, wc.defined() ? &vw : nullptr, reduction, ignore_index, &st), st))
    return false;
  h.finish();
  return true;
}

Tensor2 nll_loss_forward(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                         int64_t reduction, c10::SymInt ignore_index) {
  Tensor2 result;
  if (named([&] {
        Holder<at::meta::structured_nll_loss_forward, Mode::Functional, 2> h;
        if (!nll_native(h, self, target, weight, reduction, ignore_index.expect_int())) return false;
        result = Tensor2(std::move(h.out_[0]), std::move(h.out_[1]));
        return true;
      }))
    return result;
  return Slow<kNll, Tensor2(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                            c10::SymInt)>::call(self, target, weight, reduction, std::move(ignore_index));
}

Tensor2Ref nll_loss_forward_out(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                                at::Tensor& output, at::Tensor& total_weight) {
  if (named([&] {
        Holder<at::meta::structured_nll_loss_forward, Mode::Out, 2> h(output, total_weight);
        return nll_native(h, self, target, weight, reduction, ignore_index.expect_int());
      }))
    return Tensor2Ref(output, total_weight);
  return Slow<kNllOut, Tensor2Ref(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                                  c10::SymInt, at::Tensor&, at::Tensor&)>::call(self, target, weight, reduction,
                                                                               std::move(ignore_index), output,
                                                                               total_weight);
}

template <Mode M>
bool nll_backward_native(Holder<at::meta::structured_nll_loss_backward, M>& h, const at::Tensor& grad_output,
                         const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                         int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight) {
  const at::Tensor& w = value_or_undefined(weight);
  same_device("wrapper_PrivateUse1_nll_loss_backward",
              {{"grad_output", &grad_output}, {"self", &self}, {"target", &target}, {"weight", &w},
               {"total_weight", &total_weight}, {"grad_input", h.out_arg(0)}});
  h.meta(grad_output, self, target, opt_ref(weight), reduction, ignore_index, total_weight);
  const auto t = self.scalar_type(), tt = target.scalar_type();
  if ((w.defined() && w.scalar_type() != t) || grad_output.scalar_type() != t || total_weight.scalar_type() != t ||
      (tt != c10::ScalarType::Long && tt != c10::ScalarType::Byte))
    return false;
  const at::Tensor tc = target.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  FooView vgi, vg, vt, vw, vtw;
  if (!view_of(h.result(), &vgi) || !view_of(grad_output, &vg) || !view_of(tc, &vt) ||
      (wc.defined() && !view_of(wc, &vw)) || !view_of(total_weight, &vtw))
    return false;
  FooStatus st{};
  if (!done(foo_rs_nll_loss_backward(&vgi, &vg, &vt, wc.defined() ? &vw : nullptr, &vtw, reduction, ignore_index,
                                     &st),
            st))
    return false;
  h.finish();
  return true;
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
  at::Tensor result;
  if (named([&] {
        Holder<at::meta::structured_nll_loss_backward, Mode::Functional> h;
        if (!nll_backward_native(h, grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                                 total_weight))
          return false;
        result = std::move(h.out_[0]);
        return true;
      }))
    return result;
  return Slow<kNllBack, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, int64_t, c10::SymInt, const at::Tensor&)>::
      call(grad_output, self, target, weight, reduction, std::move(ignore_index), total_weight);
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction,
                                  c10::SymInt ignore_index, const at::Tensor& total_weight, at::Tensor& grad_input) {
  if (named([&] {
        Holder<at::meta::structured_nll_loss_backward, Mode::Out> h(grad_input);
        return nll_backward_native(h, grad_output, self, target, weight, reduction, ignore_index.expect_int(),
                                   total_weight);
      }))
    return grad_input;
  return Slow<kNllBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t, c10::SymInt, const at::Tensor&,
                                       at::Tensor&)>::call(grad_output, self, target, weight, reduction,
                                                           std::move(ignore_index), total_weight, grad_input);
}

// ---- max/min/argmax/argmin over a dim, full max/min, var/std, MSE loss -----

// max/min over one dim with indices: ATen's structured meta (the dim
// wrapped, the zero-size check, both outputs sized and typed), then Rust.
// Complex inputs keep their Python kernel (CPU's error).
template <class Meta, Mode M>
bool extreme_dim_native(Holder<Meta, M, 2>& h, const char* rust, const char* dev, const at::Tensor& self,
                        int64_t dim, bool keepdim) {
  same_device(dev, {{"self", &self}, {"values", h.out_arg(0)}, {"indices", h.out_arg(1)}});
  const auto pre = h.meta(self, dim, keepdim);
  if (self.is_complex()) return false;
  if (self.numel() > 0) {
    FooView vv, vi, vx;
    if (!view_of(h.result(0), &vv) || !view_of(h.result(1), &vi) || !view_of(self, &vx)) return false;
    const int64_t d = pre.dim;
    FooStatus st{};
    if (!done(foo_rs_reduce(rust, &vv, &vi, &vx, &d, self.dim() > 0 ? 1 : 0, 1.0, 2.0, &st), st)) return false;
  }
  h.finish();
  return true;
}

template <class Meta, const char* F, const char* O, const char* Rust>
struct ExtremeDim {
  static Tensor2 functional(const at::Tensor& self, int64_t dim, bool keepdim) {
    Tensor2 result;
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Functional, 2> h;
          if (!extreme_dim_native(h, Rust, F, self, dim, keepdim)) return false;
          result = Tensor2(std::move(h.out_[0]), std::move(h.out_[1]));
          return true;
        }))
      return result;
    // the out= overload's Python kernel fills outputs made here
    at::Tensor v = at::empty({0}, self.options()), i = at::empty({0}, self.options().dtype(at::kLong));
    Slow<O, Tensor2Ref(const at::Tensor&, int64_t, bool, at::Tensor&, at::Tensor&)>::call(self, dim, keepdim, v, i);
    return Tensor2(v, i);
  }
  static Tensor2Ref out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values, at::Tensor& indices) {
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Out, 2> h(values, indices);
          return extreme_dim_native(h, Rust, F, self, dim, keepdim);
        }))
      return Tensor2Ref(values, indices);
    return Slow<O, Tensor2Ref(const at::Tensor&, int64_t, bool, at::Tensor&, at::Tensor&)>::call(self, dim, keepdim,
                                                                                               values, indices);
  }
};
constexpr char kMaxDim[] = "max.dim";
constexpr char kMaxDimOut[] = "max.dim_max";
constexpr char kMinDim[] = "min.dim";
constexpr char kMinDimOut[] = "min.dim_min";
constexpr char kRustMaxDim[] = "max_dim";
constexpr char kRustMinDim[] = "min_dim";
using MaxDim = ExtremeDim<at::meta::structured_max_dim, kMaxDim, kMaxDimOut, kRustMaxDim>;
using MinDim = ExtremeDim<at::meta::structured_min_dim, kMinDim, kMinDimOut, kRustMinDim>;

// max()/min() of every element into a 0-d tensor: Rust. An empty or
// complex input keeps the Python kernel (CPU's errors).
template <const char* N, const char* Rust>
at::Tensor full_extreme(const at::Tensor& self) {
  at::Tensor out;
  if (is_foo(self) && named([&] {
        if (self.numel() == 0 || self.is_complex()) return false;
        out = at::empty({}, self.options());
        FooView vo, vx;
        if (!view_of(out, &vo) || !view_of(self, &vx)) return false;
        const auto dims = reduce_dims(self, std::nullopt);
        FooStatus st{};
        return done(foo_rs_reduce(Rust, &vo, nullptr, &vx, dims.data(), dims.size(), 1.0, 2.0, &st), st);
      }))
    return out;
  return Slow<N, at::Tensor(const at::Tensor&)>::call(self);
}
constexpr char kMax[] = "max";
constexpr char kMin[] = "min";

// var/std (and var_mean/std_mean) of a floating tensor: ATen's reduction
// shape (create_reduction_result/resize_reduction_result: its dim checks),
// then Rust with the correction. Integers (CPU's error), empty inputs and
// degrees of freedom <= 0 (CPU's warning, NaN/inf) keep the Python kernel.
bool var_common_case(const at::Tensor& self, at::OptionalIntArrayRef dim, double correction) {
  if (!is_foo(self) || !c10::isFloatingType(self.scalar_type()) || self.numel() == 0) return false;
  double count = 1;
  for (const int64_t d : reduce_dims(self, dim)) count *= static_cast<double>(self.size(d));
  return count - correction > 0;
}

bool run_var(const char* rust, const at::Tensor& self, at::OptionalIntArrayRef dim, double correction,
             const at::Tensor& out, const at::Tensor* mean) {
  FooView vo, vm, vx;
  if (out.scalar_type() != self.scalar_type() || (mean != nullptr && mean->scalar_type() != self.scalar_type()) ||
      !view_of(out, &vo) || (mean != nullptr && !view_of(*mean, &vm)) || !view_of(self, &vx))
    return false;
  const auto dims = reduce_dims(self, dim);
  FooStatus st{};
  return done(foo_rs_reduce(rust, &vo, mean != nullptr ? &vm : nullptr, &vx, dims.data(), dims.size(), correction,
                            2.0, &st),
              st);
}

template <const char* N, const char* Rust>
at::Tensor var_functional(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<c10::Scalar>& correction, bool keepdim) {
  at::Tensor out;
  const double c = correction.value_or(1).toDouble();
  if (named([&] {
        if (!var_common_case(self, dim, c)) return false;
        out = at::native::create_reduction_result(self, dim, keepdim, self.scalar_type());
        return run_var(Rust, self, dim, c, out, nullptr);
      }))
    return out;
  return Slow<N, at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, const std::optional<c10::Scalar>&, bool)>::call(
      self, dim, correction, keepdim);
}

template <const char* N, const char* Rust>
at::Tensor& var_out(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                    bool keepdim, at::Tensor& out) {
  const double c = correction.value_or(1).toDouble();
  if (is_foo(out) && named([&] {
        if (!var_common_case(self, dim, c) || out.scalar_type() != self.scalar_type()) return false;
        at::native::resize_reduction_result(out, self, at::native::make_dim_mask(dim, self.dim()), keepdim,
                                            self.scalar_type());
        return run_var(Rust, self, dim, c, out, nullptr);
      }))
    return out;
  return Slow<N, at::Tensor&(const at::Tensor&, at::OptionalIntArrayRef, const std::optional<c10::Scalar>&, bool,
                             at::Tensor&)>::call(self, dim, correction, keepdim, out);
}

template <const char* N, const char* Rust>
Tensor2 var_mean_functional(const at::Tensor& self, at::OptionalIntArrayRef dim,
                            const std::optional<c10::Scalar>& correction, bool keepdim) {
  Tensor2 result;
  const double c = correction.value_or(1).toDouble();
  if (named([&] {
        if (!var_common_case(self, dim, c)) return false;
        at::Tensor v = at::native::create_reduction_result(self, dim, keepdim, self.scalar_type());
        at::Tensor m = at::empty_like(v);
        if (!run_var(Rust, self, dim, c, v, &m)) return false;
        result = Tensor2(std::move(v), std::move(m));
        return true;
      }))
    return result;
  return Slow<N, Tensor2(const at::Tensor&, at::OptionalIntArrayRef, const std::optional<c10::Scalar>&, bool)>::call(
      self, dim, correction, keepdim);
}
constexpr char kVar[] = "var.correction";
constexpr char kVarOut[] = "var.correction_out";
constexpr char kStd[] = "std.correction";
constexpr char kStdOut[] = "std.correction_out";
constexpr char kVarMean[] = "var_mean.correction";
constexpr char kStdMean[] = "std_mean.correction";
constexpr char kRustVar[] = "var";
constexpr char kRustStd[] = "std";

// MSE loss backward as ATen's CPU kernel runs it: grad_input shaped like
// the input, ATen's TensorIterator over (grad_input, input, target,
// grad_output) for the checks (one dtype, broadcastable) and grad_input's
// size, then Rust.
constexpr char kMseBack[] = "mse_loss_backward";
constexpr char kMseBackOut[] = "mse_loss_backward.grad_input";
at::Tensor& mse_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  int64_t reduction, at::Tensor& grad_input) {
  if (named([&] {
        same_device("wrapper_PrivateUse1_mse_loss_backward",
                    {{"grad_output", &grad_output}, {"self", &self}, {"target", &target}, {"grad_input", &grad_input}});
        const auto dt = self.scalar_type();
        if (!c10::isFloatingType(dt) || target.scalar_type() != dt || grad_output.scalar_type() != dt ||
            grad_input.scalar_type() != dt)
          return false;
        at::TensorIteratorConfig()
            .add_output(grad_input)
            .add_const_input(self)
            .add_const_input(target)
            .add_const_input(grad_output)
            .build();
        FooView vgi, vg, va, vb;
        if (!view_of(grad_input, &vgi) || !view_of(grad_output, &vg) || !view_of(self, &va) ||
            !view_of(target, &vb))
          return false;
        FooStatus st{};
        return done(foo_rs_mse_loss_backward(&vgi, &vg, &va, &vb, reduction, &st), st);
      }))
    return grad_input;
  return Slow<kMseBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                       at::Tensor&)>::call(grad_output, self, target, reduction, grad_input);
}

at::Tensor mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  if (is_foo(self)) {
    at::Tensor grad_input = at::empty_like(self, at::MemoryFormat::Contiguous);
    return mse_loss_backward_out(grad_output, self, target, reduction, grad_input);
  }
  return Slow<kMseBack, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>::call(
      grad_output, self, target, reduction);
}

constexpr char kMaxPool[] = "max_pool2d_with_indices";
constexpr char kMaxPoolOut[] = "max_pool2d_with_indices.out";
constexpr char kMaxPoolBack[] = "max_pool2d_with_indices_backward";
constexpr char kMaxPoolBackOut[] = "max_pool2d_with_indices_backward.grad_input";

// A 3-d (C, H, W) tensor as the 4-d (1, C, H, W) the Rust kernels take.
at::Tensor as4(const at::Tensor& t) { return t.dim() == 4 ? t : t.unsqueeze(0); }

// kernel, stride, padding, dilation as (h, w) pairs, as ATen reads them
// (one value means both; an empty stride means the kernel size).
std::array<int64_t, 8> pool_window(at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d) {
  auto pair = [](at::IntArrayRef v, at::IntArrayRef dflt, int64_t* o) {
    if (v.empty()) v = dflt;
    o[0] = v[0];
    o[1] = v.size() == 1 ? v[0] : v[1];
  };
  std::array<int64_t, 8> w{};
  pair(k, k, &w[0]);
  pair(s, k, &w[2]);
  pair(p, p, &w[4]);
  pair(d, d, &w[6]);
  return w;
}

template <Mode M>
bool max_pool_native(Holder<at::meta::structured_max_pool2d_with_indices, M, 2>& h, const at::Tensor& self,
                     at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d, bool ceil_mode) {
  same_device("wrapper_PrivateUse1_max_pool2d_with_indices",
              {{"self", &self}, {"out", h.out_arg(0)},
               {"indices", h.out_arg(1)}});
  h.meta(self, k, s, p, d, ceil_mode);
  if (self.scalar_type() == c10::ScalarType::Bool) return false;  // the Python kernel raises CPU's error
  const at::Tensor& out = h.result(0);
  if (out.numel() > 0) {
    const auto win = pool_window(k, s, p, d);
    const at::Tensor o4 = as4(out), i4 = as4(h.result(1)), x4 = as4(self);
    FooView vo, vi, vx;
    if (!view_of(o4, &vo) || !view_of(i4, &vi) || !view_of(x4, &vx)) return false;
    FooStatus st{};
    if (!done(foo_rs_max_pool2d(&vo, &vi, &vx, win.data(), &st), st)) return false;
  }
  h.finish();
  return true;
}

Tensor2 max_pool2d_with_indices(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                at::IntArrayRef d, bool ceil_mode) {
  Tensor2 result;
  if (is_foo(self) && named([&] {
        Holder<at::meta::structured_max_pool2d_with_indices, Mode::Functional, 2> h;
        if (!max_pool_native(h, self, k, s, p, d, ceil_mode)) return false;
        result = Tensor2(std::move(h.out_[0]), std::move(h.out_[1]));
        return true;
      }))
    return result;
  return Slow<kMaxPool, Tensor2(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                                bool)>::call(self, k, s, p, d, ceil_mode);
}

Tensor2Ref max_pool2d_with_indices_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                       at::IntArrayRef p, at::IntArrayRef d, bool ceil_mode, at::Tensor& out,
                                       at::Tensor& indices) {
  if (is_foo(self) && is_foo(out) && is_foo(indices) && named([&] {
        Holder<at::meta::structured_max_pool2d_with_indices, Mode::Out, 2> h(out, indices);
        return max_pool_native(h, self, k, s, p, d, ceil_mode);
      }))
    return Tensor2Ref(out, indices);
  return Slow<kMaxPoolOut, Tensor2Ref(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                                      at::IntArrayRef, bool, at::Tensor&, at::Tensor&)>::call(self, k, s, p, d,
                                                                                             ceil_mode, out, indices);
}

template <Mode M>
bool max_pool_backward_native(Holder<at::meta::structured_max_pool2d_with_indices_backward, M>& h,
                              const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                              at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d, bool ceil_mode,
                              const at::Tensor& indices) {
  same_device("wrapper_PrivateUse1_max_pool2d_with_indices_backward",
              {{"grad_output", &grad_output}, {"self", &self}, {"indices", &indices},
               {"grad_input", h.out_arg(0)}});
  h.meta(grad_output, self, k, s, p, d, ceil_mode, indices);
  const at::Tensor& gi = h.result();
  if (!c10::isFloatingType(self.scalar_type()) || grad_output.scalar_type() != gi.scalar_type()) return false;
  if (gi.numel() > 0) {
    const at::Tensor gi4 = as4(gi), go4 = as4(grad_output), i4 = as4(indices);
    FooView vgi, vgo, vi;
    if (!view_of(gi4, &vgi) || !view_of(go4, &vgo) || !view_of(i4, &vi)) return false;
    FooStatus st{};
    if (!done(foo_rs_max_pool2d_backward(&vgi, &vgo, &vi, &st), st)) return false;
  }
  h.finish();
  return true;
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                                            at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d, bool ceil_mode,
                                            const at::Tensor& indices) {
  at::Tensor result;
  if (is_foo(grad_output) && is_foo(self) && is_foo(indices) && named([&] {
        Holder<at::meta::structured_max_pool2d_with_indices_backward, Mode::Functional> h;
        if (!max_pool_backward_native(h, grad_output, self, k, s, p, d, ceil_mode, indices)) return false;
        result = std::move(h.out_[0]);
        return true;
      }))
    return result;
  return Slow<kMaxPoolBack, at::Tensor(const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                       at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor&)>::call(
      grad_output, self, k, s, p, d, ceil_mode, indices);
}

at::Tensor& max_pool2d_with_indices_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                 at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                                 at::IntArrayRef d, bool ceil_mode, const at::Tensor& indices,
                                                 at::Tensor& grad_input) {
  if (is_foo(grad_output) && is_foo(self) && is_foo(indices) && is_foo(grad_input) && named([&] {
        Holder<at::meta::structured_max_pool2d_with_indices_backward, Mode::Out> h(grad_input);
        return max_pool_backward_native(h, grad_output, self, k, s, p, d, ceil_mode, indices);
      }))
    return grad_input;
  return Slow<kMaxPoolBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                           at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor&, at::Tensor&)>::
      call(grad_output, self, k, s, p, d, ceil_mode, indices, grad_input);
}

// ---- gather, advanced indexing, arange, adaptive average pooling --------------

// gather through ATen's meta (index dtype, rank and sizes, the overlap
// asserts, out='s dtype and resize), then Rust (kernels::entry::gather: an
// index out of range is CPU's RuntimeError).
struct Gather {
  using Meta = at::meta::structured_gather;
  static constexpr char F[] = "gather";
  static constexpr char O[] = "gather.out";
  static constexpr char kDev[] = "wrapper_PrivateUse1_gather";
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"out", h.out_arg()}});
    h.meta(self, dim, index, sparse_grad);
    if (index.numel() > 0) {
      FooView vo, vs, vi;
      if (!view_of(h.result(), &vo) || !view_of(self, &vs) || !view_of(index, &vi)) return false;
      FooStatus st{};
      if (!done(foo_rs_gather(&vo, &vs, &vi, c10::maybe_wrap_dim(dim, self.dim()), &st), st)) return false;
    }
    h.finish();
    return true;
  }
};

// The scatter family through ATen's metas (index dtype, ranks and sizes, the
// src dtype, the reduce argument, the overlap asserts, out='s dtype and
// resize), then as CPU's kernels: out = self, then Rust scatters `src` or
// `value` into it (kernels::entry::scatter). bool with "mean" (CPU raises)
// and a complex value go to the Python kernel.
template <class H>
bool run_scatter(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor* src,
                 const c10::Scalar* value, c10::string_view op, bool include_self) {
  const at::Tensor& out = h.result();
  FooParam pv = p_none();
  if ((value != nullptr && !param_of(*value, &pv)) || (op == "mean" && self.scalar_type() == c10::ScalarType::Bool))
    return false;
  // A reduce argument CPU's kernel refuses: the Python kernel raises CPU's error.
  static constexpr std::array<c10::string_view, 8> kOps{"assign", "add", "multiply", "sum",
                                                         "prod",   "mean", "amax",     "amin"};
  if (std::find(kOps.begin(), kOps.end(), op) == kOps.end()) return false;
  FooView vo, vi, vs;
  if (!is_foo(out) || !view_of(out, &vo) || !view_of(index, &vi) || (src != nullptr && !view_of(*src, &vs)))
    return false;
  if (!out.is_same(self)) out.copy_(self);
  if (index.numel() > 0) {
    const std::string name(op);
    FooStatus st{};
    if (!done(foo_rs_scatter(&vo, src != nullptr ? &vs : nullptr, pv, &vi, c10::maybe_wrap_dim(dim, self.dim()),
                             name.c_str(), include_self ? 1 : 0, &st),
              st))
      return false;
  }
  h.finish();
  return true;
}

// scatter's reduce= takes "add" and "multiply" (CPU's kernel checks it).
bool legacy_reduce(c10::string_view reduce) { return reduce == "add" || reduce == "multiply"; }


FOO_META_OP(ScatterSrc, structured_scatter_src, "scatter.src", "scatter.src_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"src", &src}, {"out", h.out_arg()}});
    h.meta(self, dim, index, src);
    return run_scatter(h, self, dim, index, &src, nullptr, "assign", true);
  }
};
FOO_META_OP(ScatterValue, structured_scatter_value, "scatter.value", "scatter.value_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"out", h.out_arg()}});
    h.meta(self, dim, index, value);
    return run_scatter(h, self, dim, index, nullptr, &value, "assign", true);
  }
};
FOO_META_OP(ScatterReduce, structured_scatter_reduce, "scatter.reduce", "scatter.reduce_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  c10::string_view reduce) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"src", &src}, {"out", h.out_arg()}});
    h.meta(self, dim, index, src, reduce);
    return legacy_reduce(reduce) && run_scatter(h, self, dim, index, &src, nullptr, reduce, true);
  }
};
FOO_META_OP(ScatterValueReduce, structured_scatter_value_reduce, "scatter.value_reduce",
               "scatter.value_reduce_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value,
                  c10::string_view reduce) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"out", h.out_arg()}});
    h.meta(self, dim, index, value, reduce);
    return legacy_reduce(reduce) && run_scatter(h, self, dim, index, nullptr, &value, reduce, true);
  }
};
FOO_META_OP(ScatterAdd, structured_scatter_add, "scatter_add", "scatter_add.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"src", &src}, {"out", h.out_arg()}});
    h.meta(self, dim, index, src);
    return run_scatter(h, self, dim, index, &src, nullptr, "add", true);
  }
};
FOO_META_OP(ScatterReduceTwo, structured_scatter_reduce_two, "scatter_reduce.two", "scatter_reduce.two_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  c10::string_view reduce, bool include_self) {
    same_device(kDev, {{"self", &self}, {"index", &index}, {"src", &src}, {"out", h.out_arg()}});
    h.meta(self, dim, index, src, reduce, include_self);
    return reduce != "add" && reduce != "multiply" && run_scatter(h, self, dim, index, &src, nullptr, reduce, include_self);
  }
};

constexpr char kIndex[] = "index.Tensor";
constexpr char kIndexOut[] = "index.Tensor_out";
using OptTensors = c10::List<std::optional<at::Tensor>>;

// Operand i of a built iterator as a row-major view over `shape`, the
// iterator's shape outermost first (`strides` receives the element strides).
// A TensorIterator keeps its dims innermost first; the Rust index kernels
// take views row-major (their row fast paths look at the last dim), so both
// are reversed here. False for a dtype foo does not hold.
bool iter_view(const at::TensorIteratorBase& it, int i, const c10::SmallVector<int64_t, 6>& shape,
               c10::SmallVector<int64_t, 6>& strides, FooView* v) {
  const int code = dtype_code(it.dtype(i));
  if (code < 0) return false;
  const int64_t nd = it.ndim(), es = static_cast<int64_t>(it.element_size(i));
  const auto bs = it.strides(i);
  strides.resize(nd);
  for (int64_t d = 0; d < nd; ++d) strides[d] = bs[nd - 1 - d] / es;
  *v = {it.data_ptr(i), nd, shape.data(), strides.data(), static_cast<uint8_t>(code)};
  return true;
}

constexpr int kMaxIndices = 8;

// self[indices] through ATen's index meta (index dtypes and devices, bool
// masks expanded by nonzero, broadcasting, non-adjacent indexed dims moved to
// the front, the overlap asserts, and its TensorIterator: self restrided over
// the result with stride 0 along the indexed dims, the indices laid over the
// result), then Rust (kernels::entry::index: negative indices wrap, one out of
// range is CPU's IndexError).
template <Mode M>
bool index_native(Holder<at::meta::structured_index_Tensor, M>& h, const at::Tensor& self,
                  const OptTensors& indices) {
  if (const at::Tensor* out = h.out_arg())
    same_device("wrapper_PrivateUse1_index_Tensor_out", {{"self", &self}, {"out", out}});
  const auto pre = h.meta(self, at::IOptTensorListRef(indices));
  const int n = h.ntensors(), nidx = n - 2;
  if (nidx < 1 || nidx > kMaxIndices || static_cast<int>(pre.sizes.size()) != nidx || h.numel() == 0)
    return nidx >= 1 && h.numel() == 0;  // nothing to read: done
  const int64_t es = static_cast<int64_t>(self.element_size());
  std::array<c10::SmallVector<int64_t, 6>, kMaxIndices + 2> strides;
  std::array<FooIndexArg, kMaxIndices> args;
  FooView vo, vd;
  const c10::SmallVector<int64_t, 6> shape(h.shape().rbegin(), h.shape().rend());
  if (!is_foo(self) || !iter_view(h, 0, shape, strides[0], &vo) || !iter_view(h, 1, shape, strides[1], &vd))
    return false;
  for (int k = 0; k < nidx; ++k) {
    if (h.device(k + 2) != self.device() || !iter_view(h, k + 2, shape, strides[k + 2], &args[k].idx)) return false;
    args[k].size = pre.sizes[k];
    args[k].stride = pre.strides[k] / es;
  }
  FooStatus st{};
  return done(foo_rs_index(&vo, &vd, args.data(), nidx, &st), st);
}

at::Tensor index_tensor(const at::Tensor& self, const OptTensors& indices) {
  at::Tensor result;
  if (named([&] {
        Holder<at::meta::structured_index_Tensor, Mode::Functional> h;
        if (!index_native(h, self, indices)) return false;
        result = std::move(h.out_[0]);
        return true;
      }))
    return result;
  return Slow<kIndex, at::Tensor(const at::Tensor&, const OptTensors&)>::call(self, indices);
}

at::Tensor& index_tensor_out(const at::Tensor& self, const OptTensors& indices, at::Tensor& out) {
  if (named([&] {
        Holder<at::meta::structured_index_Tensor, Mode::Out> h(out);
        return index_native(h, self, indices);
      }))
    return out;
  return Slow<kIndexOut, at::Tensor&(const at::Tensor&, const OptTensors&, at::Tensor&)>::call(self, indices, out);
}

constexpr char kIndexPut[] = "_index_put_impl_";

// self[indices] = values (+= with accumulate) as ATen's _index_put_impl_
// runs it: the number of indices, the masked_fill_ shortcut, a 0-d value
// moved to self's device, the overlap asserts, then make_info's steps (ATen's
// own index type check, bool masks expanded by nonzero, broadcasting, the
// indexed dims moved to the front when not adjacent), AdvancedIndex's
// restriding (its constructor is not exported: the same few lines here) and
// make_index_put_iterator's value checks; then Rust (kernels::entry::index_put).
// A value on another device, or one whose overlap with self ATen cannot
// decide, goes to the Python kernel.
bool index_put_native(at::Tensor& self, const OptTensors& indices, const at::Tensor& values, bool accumulate) {
  if (!is_foo(self) || at::has_internal_overlap(self) == at::MemOverlap::Yes) return false;
  // An index on another foo device: the Python kernel raises (as for x[i]).
  for (const std::optional<at::Tensor>& index : indices)
    if (index.has_value() && index->defined() && !index->device().is_cpu() && index->device() != self.device())
      return false;
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  if (!accumulate) {
    auto mf = at::native::canDispatchToMaskedFill(self, indices, values);
    if (std::get<0>(mf)) {
      self.masked_fill_(std::get<1>(mf), values.item());
      return true;
    }
  }
  at::Tensor v = values;
  if (values.device() != self.device() && values.numel() == 1 && values.dim() == 0) v = values.to(self.device());
  if (v.device() != self.device()) return false;
  at::assert_no_overlap(self, values);
  for (const std::optional<at::Tensor>& index : indices)
    if (index.has_value()) at::assert_no_overlap(self, *index);
  if (at::get_overlap_status(self, v) == at::MemOverlapStatus::TooHard) return false;
  // make_info
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  std::vector<at::Tensor> idx = at::native::expandTensors(self, at::IOptTensorListRef(indices), true);
  try {
    idx = at::expand_outplace(idx);
  } catch (std::exception&) {
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
                      at::native::shapes_as_str(idx));
  }
  while (idx.size() < static_cast<size_t>(self.dim())) idx.emplace_back();
  at::Tensor src = self;
  if (!at::native::hasContiguousSubspace(idx)) std::tie(src, idx) = at::native::transposeToFront(self, idx);
  // AdvancedIndex's constructor: src restrided over the result's shape
  // (stride 0 along the indexed dims), each index laid over it.
  int64_t before = 0, after = 0, nidx = 0;
  at::IntArrayRef repl;
  c10::SmallVector<int64_t, 4> isizes, istrides;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (!idx[d].defined()) {
      (nidx == 0 ? before : after)++;
    } else {
      ++nidx;
      repl = idx[d].sizes();
      isizes.push_back(src.size(d));
      istrides.push_back(src.stride(d));
    }
  }
  if (nidx == 0 || nidx > kMaxIndices) return false;
  if (std::find(isizes.begin(), isizes.end(), 0) != isizes.end() &&
      std::find(repl.begin(), repl.end(), 0) == repl.end())
    TORCH_CHECK_INDEX(false, "index is out of bounds for dimension with size 0");
  c10::SmallVector<int64_t, 6> shape(src.sizes().begin(), src.sizes().begin() + before);
  c10::SmallVector<int64_t, 6> dstr(src.strides().begin(), src.strides().begin() + before);
  shape.append(repl.begin(), repl.end());
  dstr.append(repl.size(), 0);
  shape.append(src.sizes().end() - after, src.sizes().end());
  dstr.append(src.strides().end() - after, src.strides().end());
  // make_index_put_iterator's checks
  TORCH_CHECK(at::is_expandable_to(v.sizes(), shape), "shape mismatch: value tensor of shape ", v.sizes(),
              " cannot be broadcast to indexing result of shape ", at::IntArrayRef(shape));
  TORCH_CHECK(v.scalar_type() == src.scalar_type(), "Index put requires the source and destination dtypes match, ",
              "got ", src.scalar_type(), " for the destination and ", v.scalar_type(), " for the source.");
  const at::Tensor ve = v.expand(shape);
  FooView vd, vv;
  if (!view_of(src, &vd) || !view_of(ve, &vv)) return false;
  vd.ndim = static_cast<int64_t>(shape.size());
  vd.sizes = shape.data();
  vd.strides = dstr.data();
  std::array<FooIndexArg, kMaxIndices> args;
  std::array<c10::SmallVector<int64_t, 6>, kMaxIndices> istr;
  int k = 0;
  for (const at::Tensor& t : idx) {
    if (!t.defined()) continue;
    if (!view_of(t, &args[k].idx)) return false;
    istr[k].assign(before, 0);
    istr[k].append(t.strides().begin(), t.strides().end());
    istr[k].append(after, 0);
    args[k].idx.ndim = vd.ndim;
    args[k].idx.sizes = shape.data();
    args[k].idx.strides = istr[k].data();
    args[k].size = isizes[k];
    args[k].stride = istrides[k];
    ++k;
  }
  FooStatus st{};
  return done(foo_rs_index_put(&vd, &vv, args.data(), nidx, accumulate ? 1 : 0, &st), st);
}

at::Tensor& index_put_impl(at::Tensor& self, const OptTensors& indices, const at::Tensor& values, bool accumulate,
                           bool unsafe) {
  if (named([&] { return index_put_native(self, indices, values, accumulate); })) return self;
  return Slow<kIndexPut, at::Tensor&(at::Tensor&, const OptTensors&, const at::Tensor&, bool, bool)>::call(
      self, indices, values, accumulate, unsafe);
}

constexpr char kArange[] = "arange.start_out";

// arange into `out`: ATen's own size rule and checks (compute_arange_size,
// which follows the torch it is compiled against), CPU's resize warning,
// then Rust. A bool out (CPU raises) and a multi-dim out that is not
// contiguous go to the Python kernel.
at::Tensor& arange_start_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                             at::Tensor& out) {
  const auto t = out.scalar_type();
  FooParam ps, pst;
  if (is_foo(out) && t != c10::ScalarType::Bool && dtype_code(t) >= 0 && (out.dim() <= 1 || out.is_contiguous()) &&
      param_of(start, &ps) && param_of(end, &pst) && param_of(step, &pst) && named([&] {
        int64_t size = 0;
        AT_DISPATCH_ALL_TYPES_AND2(c10::ScalarType::Half, c10::ScalarType::BFloat16, t, "arange_cpu",
                                   [&] { size = at::native::compute_arange_size<scalar_t>(start, end, step); });
        const int64_t numel = out.numel();
        if (numel != size) {
          if (numel > 0) {
            TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", numel,
                       " which does not match the computed number of elements ", size,
                       ". Note that this may occur as a result of rounding error. "
                       "The out tensor will be resized to a tensor of shape (",
                       size, ",).");
          }
          out.resize_({size});
        }
        if (size == 0) return true;
        FooView v;
        if (!view_of(out, &v)) return false;
        const int64_t stride = out.dim() == 1 ? out.stride(0) : 1;
        v.ndim = 1;
        v.sizes = &size;
        v.strides = &stride;
        const bool integral = c10::isIntegralType(t, /*includeBool=*/false);
        FooStatus st{};
        return done(foo_rs_arange(&v, integral ? 0.0 : start.toDouble(), integral ? 0.0 : step.toDouble(),
                                  integral ? start.toLong() : 0, integral ? step.toLong() : 0, integral ? 1 : 0,
                                  &st),
                    st);
      }))
    return out;
  return Slow<kArange, at::Tensor&(const c10::Scalar&, const c10::Scalar&, const c10::Scalar&, at::Tensor&)>::call(
      start, end, step, out);
}

constexpr char kAdaptiveAvg[] = "_adaptive_avg_pool2d";
constexpr char kAdaptiveAvgBack[] = "_adaptive_avg_pool2d_backward";

// Float 3-d or 4-d foo input whose non-batch dims are non-empty: what the
// Rust kernels take. Everything else goes to the Python kernel, which raises
// CPU's errors.
bool adaptive_input(const at::Tensor& t) {
  if (!is_foo(t) || !c10::isFloatingType(t.scalar_type()) || (t.dim() != 3 && t.dim() != 4)) return false;
  for (int64_t d = 1; d < t.dim(); ++d)
    if (t.size(d) == 0) return false;
  return true;
}

// adaptive_avg_pool2d's output (batch dims of the input, then the target
// height and width) in the input's suggested memory format, as CPU's.
at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
  at::Tensor result;
  if (adaptive_input(self) && output_size.size() == 2 && named([&] {
        const int64_t oh = output_size[0].expect_int(), ow = output_size[1].expect_int();
        if (oh < 0 || ow < 0) return false;
        c10::SmallVector<int64_t, 4> shape(self.sizes().begin(), self.sizes().end() - 2);
        shape.push_back(oh);
        shape.push_back(ow);
        at::Tensor out = create_out(shape, {}, self.options().memory_format(self.suggest_memory_format()));
        if (out.numel() > 0) {
          const at::Tensor o4 = as4(out), x4 = as4(self);
          FooView vo, vx;
          if (!view_of(o4, &vo) || !view_of(x4, &vx)) return false;
          FooStatus st{};
          if (!done(foo_rs_adaptive_avg_pool2d(&vo, &vx, 0, &st), st)) return false;
        }
        result = std::move(out);
        return true;
      }))
    return result;
  return Slow<kAdaptiveAvg, at::Tensor(const at::Tensor&, c10::SymIntArrayRef)>::call(self, output_size);
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  at::Tensor result;
  if (adaptive_input(self) && adaptive_input(grad_output) && grad_output.device() == self.device() &&
      grad_output.scalar_type() == self.scalar_type() && grad_output.dim() == self.dim() &&
      grad_output.sizes().slice(0, self.dim() - 2) == self.sizes().slice(0, self.dim() - 2) && named([&] {
        at::Tensor gi = create_out(self.sizes(), {}, self.options().memory_format(self.suggest_memory_format()));
        if (gi.numel() > 0) {
          const at::Tensor gi4 = as4(gi), go4 = as4(grad_output);
          FooView vgi, vgo;
          if (!view_of(gi4, &vgi) || !view_of(go4, &vgo)) return false;
          FooStatus st{};
          if (!done(foo_rs_adaptive_avg_pool2d(&vgi, &vgo, 1, &st), st)) return false;
        }
        result = std::move(gi);
        return true;
      }))
    return result;
  return Slow<kAdaptiveAvgBack, at::Tensor(const at::Tensor&, const at::Tensor&)>::call(grad_output, self);
}

// avg_pool2d and its backward through ATen's metas (window, padding and shape
// checks, output shape and memory format, out='s dtype and resize), then Rust
// (kernels::pool). bool input and a non-float backward go to the Python
// kernel (CPU raises "not implemented").
struct AvgPool {
  using Meta = at::meta::structured_avg_pool2d;
  static constexpr char F[] = "avg_pool2d";
  static constexpr char O[] = "avg_pool2d.out";
  template <class H>
  static bool run(H& h, const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
    same_device("wrapper_PrivateUse1_avg_pool2d", {{"self", &self}, {"out", h.out_arg()}});
    const auto pre = h.meta(self, k, s, p, ceil_mode, count_include_pad, divisor);
    if (self.scalar_type() == c10::ScalarType::Bool) return false;
    const at::Tensor& out = h.result();
    if (out.numel() > 0) {
      const std::array<int64_t, 8> win{pre.kH, pre.kW, pre.dH, pre.dW, pre.padH, pre.padW, 1, 1};
      const at::Tensor o4 = as4(out), x4 = as4(self);
      FooView vo, vx;
      if (!view_of(o4, &vo) || !view_of(x4, &vx)) return false;
      FooStatus st{};
      if (!done(foo_rs_avg_pool2d(&vo, &vx, win.data(), count_include_pad ? 1 : 0, divisor.value_or(0), 0, &st), st))
        return false;
    }
    h.finish();
    return true;
  }
};

struct AvgPoolBack {
  using Meta = at::meta::structured_avg_pool2d_backward;
  static constexpr char F[] = "avg_pool2d_backward";
  static constexpr char O[] = "avg_pool2d_backward.grad_input";
  template <class H>
  static bool run(H& h, const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                  at::IntArrayRef p, bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
    same_device("wrapper_PrivateUse1_avg_pool2d_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", h.out_arg()}});
    h.meta(grad_output, self, k, s, p, ceil_mode, count_include_pad, divisor);
    const at::Tensor& gi = h.result();
    if (!c10::isFloatingType(self.scalar_type()) || grad_output.scalar_type() != gi.scalar_type()) return false;
    if (gi.numel() > 0) {
      const int64_t one[] = {1};
      const auto win = pool_window(k, s, p, at::IntArrayRef(one, 1));
      const at::Tensor gi4 = as4(gi), go4 = as4(grad_output);
      FooView vgi, vgo;
      if (!view_of(gi4, &vgi) || !view_of(go4, &vgo)) return false;
      FooStatus st{};
      if (!done(foo_rs_avg_pool2d(&vgi, &vgo, win.data(), count_include_pad ? 1 : 0, divisor.value_or(0), 1, &st),
                st))
        return false;
    }
    h.finish();
    return true;
  }
};

constexpr char kDropout[] = "native_dropout";

// Training-mode dropout of a non-empty float foo tensor: the Rust kernel
// draws the mask from the device's default generator (the same Philox
// stream as the Python kernel). Evaluation mode, p outside [0, 1] and other
// dtypes go to the Python kernel.
Tensor2 native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  const double keep = 1.0 - p;
  Tensor2 result;
  if (is_foo(input) && train.value_or(true) && input.numel() > 0 && keep >= 0.0 && keep <= 1.0 &&
      c10::isFloatingType(input.scalar_type()) && named([&] {
        const at::Tensor x = input.contiguous();
        at::Tensor out = create_out(x.sizes(), {}, x.options());
        at::Tensor mask = create_out(x.sizes(), {}, x.options().dtype(c10::ScalarType::Bool));
        FooView vo, vm, vx;
        if (!view_of(out, &vo) || !view_of(mask, &vm) || !view_of(x, &vx)) return false;
        FooStatus st{};
        const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
        if (!done(foo_rs_dropout(&vo, &vm, &vx, keep, scale, input.device().index() < 0 ? 0 : input.device().index(),
                                 &st),
                  st))
          return false;
        result = Tensor2(std::move(out), std::move(mask));
        return true;
      }))
    return result;
  return Slow<kDropout, Tensor2(const at::Tensor&, double, std::optional<bool>)>::call(input, p, train);
}

constexpr char kDropoutBack[] = "native_dropout_backward";

// dropout's backward, grad * mask * scale, for a float gradient and a bool mask of its shape (what
// native_dropout saved); other dtypes and broadcasting go to the Python kernel (CPU's expression).
at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  at::Tensor result;
  if (is_foo(grad) && is_foo(mask) && grad.device() == mask.device() &&
      mask.scalar_type() == c10::ScalarType::Bool && c10::isFloatingType(grad.scalar_type()) &&
      grad.sizes() == mask.sizes() && named([&] {
        const at::Tensor g = grad.contiguous();
        const at::Tensor m = mask.contiguous();
        at::Tensor out = create_out(g.sizes(), {}, g.options());
        FooView vo, vg, vm;
        if (!view_of(out, &vo) || !view_of(g, &vg) || !view_of(m, &vm)) return false;
        FooStatus st{};
        if (!done(foo_rs_dropout_backward(&vo, &vg, &vm, scale, &st), st)) return false;
        result = std::move(out);
        return true;
      }))
    return result;
  return Slow<kDropoutBack, at::Tensor(const at::Tensor&, const at::Tensor&, double)>::call(grad, mask, scale);
}

constexpr char kBernoulli[] = "bernoulli_.float";

// self.bernoulli_(p) from the device's default generator (what in-place
// dropout calls; the same Philox stream as the Python kernel). An explicit
// generator and p outside [0, 1] go to the Python kernel.
at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  if (is_foo(self) && !gen.has_value() && p >= 0.0 && p <= 1.0 && named([&] {
        FooView v;
        if (!view_of(self, &v)) return false;
        FooStatus st{};
        return done(foo_rs_bernoulli(&v, p, self.device().index() < 0 ? 0 : self.device().index(), &st), st);
      }))
    return self;
  return Slow<kBernoulli, at::Tensor&(at::Tensor&, double, std::optional<at::Generator>)>::call(self, p,
                                                                                                 std::move(gen));
}

// ---- all/any, cumsum/cumprod, triu/tril, topk, random fills, masked_fill_ --
//
// Ops whose Python kernels only shaped a call to an existing Rust kernel:
// ATen's structured metas (or ATen's own templates) give the semantics, the
// Rust kernels the Python kernels call (kernels/entry.rs) the values.


// all/any over every dim, one dim or a list of dims: ATen's allany_meta (a
// bool or uint8 out, the reduction's shape, the dim checks and messages),
// then Rust's "all"/"any" reduction when it writes the out's dtype (bool;
// uint8 for a uint8 input). Another out dtype (a bool out of a uint8 input,
// a uint8 out of another) and complex inputs take the slow path.
template <class H>
bool run_allany(H& h, const char* rust, const at::Tensor& self, at::OptionalIntArrayRef dim) {
  const at::Tensor& out = h.result();
  const auto want = self.scalar_type() == c10::ScalarType::Byte ? c10::ScalarType::Byte : c10::ScalarType::Bool;
  FooView vo, vi;
  if (out.scalar_type() != want || !view_of(out, &vo) || !view_of(self, &vi)) return false;
  // A 0-d input reduces over no dim (its dim 0 or -1 names the element).
  c10::SmallVector<int64_t, 6> dims;
  if (self.dim() > 0) dims = reduce_dims(self, dim);
  FooStatus st{};
  if (!done(foo_rs_reduce(rust, &vo, nullptr, &vi, dims.data(), dims.size(), 1.0, 2.0, &st), st)) return false;
  h.finish();
  return true;
}

// Params: run's parameters after h; Args: the meta's arguments; Dims: the
// reduced dims as run_allany takes them.
#define FOO_UNPAREN(...) __VA_ARGS__
#define FOO_ALLANY(Name, op, f, o, MetaT, Params, Args, Dims)        \
  FOO_META_OP(Name, MetaT, f, o)                                     \
    template <class H>                                               \
    static bool run(H& h, FOO_UNPAREN Params) {                      \
      same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});    \
      h.meta(FOO_UNPAREN Args);                                      \
      return run_allany(h, op, self, Dims);                          \
    }                                                                \
  };
FOO_ALLANY(AllAll, "all", "all", "all.all_out", structured_all, (const at::Tensor& self), (self), std::nullopt)
FOO_ALLANY(AnyAll, "any", "any", "any.all_out", structured_any, (const at::Tensor& self), (self), std::nullopt)
FOO_ALLANY(AllDim, "all", "all.dim", "all.out", structured_all_dim, (const at::Tensor& self, int64_t dim, bool keepdim),
           (self, dim, keepdim), at::IntArrayRef(&dim, 1))
FOO_ALLANY(AnyDim, "any", "any.dim", "any.out", structured_any_dim, (const at::Tensor& self, int64_t dim, bool keepdim),
           (self, dim, keepdim), at::IntArrayRef(&dim, 1))
FOO_ALLANY(AllDims, "all", "all.dims", "all.dims_out", structured_all_dims,
           (const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim), (self, dim, keepdim), dim)
FOO_ALLANY(AnyDims, "any", "any.dims", "any.dims_out", structured_any_dims,
           (const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim), (self, dim, keepdim), dim)
#undef FOO_ALLANY
#undef FOO_UNPAREN

// cumsum/cumprod (cumsum_/cumprod_ are ATen composites over the out=
// form): ATen's meta (the dim check, the out's dtype: dtype=, else an out=
// tensor's own, else int64 for integers and bool), then, as CPU's
// impl_func_cum_ops, Rust over the input converted to the out's dtype. Rust
// writes a floating dtype or int64: other integer outs (dtype=torch.int32)
// and complex take the slow path.
template <class H>
bool run_scan(H& h, bool prod, const at::Tensor& self, int64_t dim) {
  const at::Tensor& out = h.result();
  const auto ot = out.scalar_type();
  if (self.is_complex() || !(c10::isFloatingType(ot) || ot == c10::ScalarType::Long)) return false;
  const at::Tensor x = self.scalar_type() == ot ? self : self.to(ot);
  FooView vo, vx;
  if (!view_of(out, &vo) || !view_of(x, &vx)) return false;
  FooStatus st{};
  const int64_t d = self.dim() == 0 ? 0 : c10::maybe_wrap_dim(dim, self.dim());
  if (!done(foo_rs_scan(&vo, &vx, d, prod ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}
#define FOO_SCAN(Name, MetaT, f, o, prod)                                                       \
  FOO_META_OP(Name, MetaT, f, o)                                                                \
    template <class H>                                                                          \
    static bool run(H& h, const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) { \
      same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});                               \
      h.meta(self, dim, dtype);                                                                 \
      return run_scan(h, prod, self, dim);                                                      \
    }                                                                                           \
  };
FOO_SCAN(Cumsum, structured_cumsum, "cumsum", "cumsum.out", false)
FOO_SCAN(Cumprod, structured_cumprod, "cumprod", "cumprod.out", true)
#undef FOO_SCAN

// triu/tril (triu_/tril_ are ATen composites over the out= form): ATen's
// meta (at least 2 dims; the out's dtype is self's), then Rust, in place
// when the out is self. Complex takes the slow path.
template <class H>
bool run_tri(H& h, const at::Tensor& self, int64_t k, bool upper) {
  FooView vo, vs;
  if (self.is_complex() || !view_of(h.result(), &vo) || !view_of(self, &vs)) return false;
  FooStatus st{};
  if (!done(foo_rs_tri(&vo, &vs, k, upper ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}
#define FOO_TRI(Name, MetaT, f, o, upper)                                \
  FOO_META_OP(Name, MetaT, f, o)                                         \
    template <class H>                                                   \
    static bool run(H& h, const at::Tensor& self, int64_t diagonal) {    \
      same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});        \
      h.meta(self, diagonal);                                            \
      return run_tri(h, self, diagonal, upper);                          \
    }                                                                    \
  };
FOO_TRI(Triu, structured_triu, "triu", "triu.out", true)
FOO_TRI(Tril, structured_tril, "tril", "tril.out", false)
#undef FOO_TRI

// ---- nonzero, masked_select, isnan/isinf/isfinite, nan_to_num, sort, prod ----
//
// Ops whose Python kernels called one Rust kernel around CPU's rules: the
// rules are ATen's (its structured meta, or the steps of its CPU kernel
// where the op has none), the values the same Rust kernels'. Complex
// inputs keep the Python kernels (foo's complex forms).

constexpr char kNonzero[] = "nonzero";
constexpr char kNonzeroOut[] = "nonzero.out";

// nonzero into `out` as ATen's nonzero_out_cpu: an int64 out (its check
// and message), no overlap with self, out resized to [count, ndim] (and
// then Fortran-contiguous, CPU's layout), then Rust's row-major indices.
bool nonzero_native(const at::Tensor& self, at::Tensor& out) {
  same_device("wrapper_PrivateUse1_out_nonzero_out", {{"self", &self}, {"out", &out}});
  if (!is_foo(self) || self.is_complex()) return false;
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long ",
              "but got scalar type", out.scalar_type());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  FooView vs;
  if (!view_of(self, &vs)) return false;
  uint64_t n = 0;
  FooStatus st{};
  if (!done(foo_rs_count_nonzero(&vs, &n, &st), st)) return false;
  const int64_t count = static_cast<int64_t>(n), nd = self.dim();
  if (at::native::resize_output(out, {count, nd})) out.as_strided_({count, nd}, {1, std::max<int64_t>(count, 1)});
  if (out.numel() == 0) return true;
  FooView vo;
  return view_of(out, &vo) && done(foo_rs_nonzero(&vo, &vs, &st), st);
}

at::Tensor nonzero(const at::Tensor& self) {
  at::Tensor out;
  if (named([&] {
        out = create_out({0}, {}, self.options().dtype(at::kLong));
        return nonzero_native(self, out);
      }))
    return out;
  return Slow<kNonzero, at::Tensor(const at::Tensor&)>::call(self);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  if (named([&] { return nonzero_native(self, out); })) return out;
  return Slow<kNonzeroOut, at::Tensor&(const at::Tensor&, at::Tensor&)>::call(self, out);
}

constexpr char kMaskedSelect[] = "masked_select";
constexpr char kMaskedSelectOut[] = "masked_select.out";

// masked_select into `out` as ATen's masked_select_out_impl_cpu: its
// checks and messages (a bool mask, out of self's dtype, no overlap), self
// and mask broadcast, out resized to the count, then Rust. A mask on
// another device keeps the Python kernel.
bool masked_select_native(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  same_device("wrapper_PrivateUse1_out_masked_select_out", {{"self", &self}, {"mask", &mask}, {"out", &out}});
  if (!is_foo(self) || !is_foo(mask) || self.is_complex()) return false;
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  auto [m, s] = at::expand_outplace(mask, self);
  FooView vm, vs;
  if (!view_of(*m, &vm) || !view_of(*s, &vs)) return false;
  uint64_t n = 0;
  FooStatus st{};
  if (!done(foo_rs_count_nonzero(&vm, &n, &st), st)) return false;
  at::native::resize_output(out, {static_cast<int64_t>(n)});
  if (n == 0) return true;
  FooView vo;
  return view_of(out, &vo) && done(foo_rs_masked_select(&vo, &vs, &vm, &st), st);
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  at::Tensor out;
  if (named([&] {
        out = create_out({0}, {}, self.options());
        return masked_select_native(self, mask, out);
      }))
    return out;
  return Slow<kMaskedSelect, at::Tensor(const at::Tensor&, const at::Tensor&)>::call(self, mask);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  if (named([&] { return masked_select_native(self, mask, out); })) return out;
  return Slow<kMaskedSelectOut, at::Tensor&(const at::Tensor&, const at::Tensor&, at::Tensor&)>::call(self, mask,
                                                                                                      out);
}

// isnan, isinf, isfinite: a bool tensor over self, laid out as the
// iterator ATen's forms build (isnan is self != self, isinf and isfinite
// composites over abs and comparisons: one unary iterator with a bool
// output), Rust's test in self's dtype (integers and bool: never NaN or
// infinite). Their out= forms are ATen's composites over these (a cast to
// another out dtype included).
constexpr char kIsnan[] = "isnan";
constexpr char kIsinf[] = "isinf";
constexpr char kIsfinite[] = "isfinite";
template <const char* N>
at::Tensor fp_class(const at::Tensor& self) {
  at::Tensor result;
  if (is_foo(self) && !self.is_complex() && named([&] {
        // isposinf's meta builds that iterator (its own checks aside).
        Holder<at::meta::structured_isposinf, Mode::Functional> h;
        h.build_borrowing_unary_force_boolean_op(h.maybe_get_output(0), self);
        if (!ew_over_iter(N, self.scalar_type(), h, {0, 1})) return false;
        result = std::move(h.out_[0]);
        return true;
      }))
    return result;
  return Slow<N, at::Tensor(const at::Tensor&)>::call(self);
}

// nan_to_num.out (nan_to_num and nan_to_num_ are ATen's composites over
// it) as ATen's CPU kernel: out of self's dtype (its check and message),
// integers and bool copied, floats through TensorIterator::unary_op and
// Rust's nan_to_num (absent values: 0, the dtype's largest and lowest).
constexpr char kNanToNumOut[] = "nan_to_num.out";
at::Tensor& nan_to_num_out(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                           std::optional<double> neginf, at::Tensor& out) {
  if (is_foo(self) && is_foo(out) && !self.is_complex() && named([&] {
        TORCH_CHECK(self.scalar_type() == out.scalar_type(), "nan_to_num: dtype of out: ", out.scalar_type(),
                    " should be same as input: ", self.scalar_type());
        if (c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)) {
          at::native::resize_output(out, self.sizes());
          out.copy_(self);
          return true;
        }
        auto it = at::TensorIterator::unary_op(out, self);
        const auto opt = [](std::optional<double> v) { return v.has_value() ? p_float(*v) : p_none(); };
        const FooParam ps[3] = {opt(nan), opt(posinf), opt(neginf)};
        return ew_over_iter("nan_to_num", self.scalar_type(), it, {0, 1}, nullptr, ps, 3);
      }))
    return out;
  return Slow<kNanToNumOut, at::Tensor&(const at::Tensor&, std::optional<double>, std::optional<double>,
                                        std::optional<double>, at::Tensor&)>::call(self, nan, posinf, neginf, out);
}

// sort.stable and sort.values_stable (sort and sort.values are ATen's
// composites over them): ATen's structured meta (the dim check, both
// outputs with self's dense strides), then Rust's stable sort, as the
// Python kernel ran it (a stable sort is a valid unstable one).
constexpr char kSortStable[] = "sort.stable";
constexpr char kSortValuesStable[] = "sort.values_stable";
template <Mode M>
bool sort_native(Holder<at::meta::structured_sort_stable, M, 2>& h, const at::Tensor& self,
                 std::optional<bool> stable, int64_t dim, bool descending) {
  same_device("wrapper_PrivateUse1_sort_stable",
              {{"self", &self}, {"values", h.out_arg(0)}, {"indices", h.out_arg(1)}});
  h.meta(self, stable, dim, descending);
  if (self.is_complex()) return false;
  FooView vv, vi, vx;
  if (!view_of(h.result(0), &vv) || !view_of(h.result(1), &vi) || !view_of(self, &vx)) return false;
  const int64_t d = self.dim() == 0 ? 0 : c10::maybe_wrap_dim(dim, self.dim());
  const int64_t k = self.dim() == 0 ? 1 : self.size(d);
  FooStatus st{};
  if (!done(foo_rs_sort(&vv, &vi, &vx, d, k, descending ? 1 : 0, &st), st)) return false;
  h.finish();
  return true;
}

Tensor2 sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim, bool descending) {
  Tensor2 result;
  if (is_foo(self) && named([&] {
        Holder<at::meta::structured_sort_stable, Mode::Functional, 2> h;
        if (!sort_native(h, self, stable, dim, descending)) return false;
        result = Tensor2(std::move(h.out_[0]), std::move(h.out_[1]));
        return true;
      }))
    return result;
  return Slow<kSortStable, Tensor2(const at::Tensor&, std::optional<bool>, int64_t, bool)>::call(self, stable, dim,
                                                                                               descending);
}

Tensor2Ref sort_values_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim, bool descending,
                              at::Tensor& values, at::Tensor& indices) {
  if (is_foo(self) && named([&] {
        Holder<at::meta::structured_sort_stable, Mode::Out, 2> h(values, indices);
        return sort_native(h, self, stable, dim, descending);
      }))
    return Tensor2Ref(values, indices);
  return Slow<kSortValuesStable, Tensor2Ref(const at::Tensor&, std::optional<bool>, int64_t, bool, at::Tensor&,
                                            at::Tensor&)>::call(self, stable, dim, descending, values, indices);
}

// prod over one dim (prod.dim_int is ATen's composite over the out= form):
// ATen's meta (the out's dtype: dtype=, else out='s own, else int64 for
// integers and bool; the reduced shape), then Rust when it writes that
// dtype directly (reduce_into); a cast takes the slow path. A 0-d input
// reduces over no dim.
FOO_META_OP(ProdDim, structured_prod_dim_int, "prod.dim_int", "prod.int_out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
    same_device(kDev, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, dim, keepdim, dtype);
    return run_reduce(h, "prod", self, self.dim() == 0 ? at::OptionalIntArrayRef() : at::IntArrayRef(&dim, 1), true);
  }
};

// prod of every element as ATen's CPU kernel: a 0-d result of
// get_dtype_from_self's dtype (integers and bool: int64), then Rust.
constexpr char kProd[] = "prod";
at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  at::Tensor out;
  if (is_foo(self) && named([&] {
        out = create_out({}, {}, self.options().dtype(at::native::get_dtype_from_self(self, dtype, true)));
        return reduce_into(out, "prod", self, std::nullopt, true);
      }))
    return out;
  return Slow<kProd, at::Tensor(const at::Tensor&, std::optional<c10::ScalarType>)>::call(self, dtype);
}
// ---- Losses: smooth_l1/huber, binary_cross_entropy, nll_loss2d, log_sigmoid ----
//
// The Rust kernels their Python kernels call (nn::PointLoss, the nll_loss
// kernel, the elementwise engine's log_sigmoid) behind ATen's rules: a
// structured meta where the op has one, else the steps of ATen's CPU
// kernel. Calls outside the common case (mixed dtypes, which CPU promotes;
// shapes or arguments CPU refuses) keep the Python kernel and its errors.

bool valid_reduction(int64_t r) { return r == 0 || r == 1 || r == 2; }  // none, mean, sum

// Pointwise loss `kind` of self and target (one floating dtype, out's too)
// over their broadcast shape into `out`: Rust's nn::PointLoss.
bool point_loss_into(const at::Tensor& out, const char* kind, double param, const at::Tensor& self,
                     const at::Tensor& target, int64_t reduction) {
  const auto dt = self.scalar_type();
  if (!c10::isFloatingType(dt) || target.scalar_type() != dt || out.scalar_type() != dt || !is_foo(target))
    return false;
  const auto shape = at::infer_size(self.sizes(), target.sizes());
  FooView vo, va, vb;
  if (!view_of(out, &vo) || !view_of(self, &va) || !view_of(target, &vb)) return false;
  FooStatus st{};
  return done(foo_rs_point_loss(kind, param, &vo, &va, &vb, shape.data(), shape.size(), reduction, &st), st);
}

// smooth_l1_loss: ATen's structured meta (beta's check, the broadcast
// output of the promoted dtype, or 0-d), then Rust.
FOO_META_OP(SmoothL1, structured_smooth_l1_loss, "smooth_l1_loss", "smooth_l1_loss.out")
  template <class H>
  static bool run(H& h, const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
    if (!valid_reduction(reduction)) return false;  // ATen's internal assert; the Python kernel's ValueError
    same_device(kDev, {{"self", &self}, {"target", &target}, {"out", h.out_arg()}});
    h.meta(self, target, reduction, beta);
    if (!point_loss_into(h.result(), "smooth_l1", beta, self, target, reduction)) return false;
    h.finish();
    return true;
  }
};

// huber_loss (not structured) as ATen's CPU kernel: delta > 0 (else the
// Python kernel raises CPU's error), then for self's shape and dtype Rust's
// loss into a new result (self's layout, or 0-d when reduced) or into out=
// (resized).
constexpr char kHuber[] = "huber_loss";
constexpr char kHuberOut[] = "huber_loss.out";
bool huber_native(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                  at::Tensor& out) {
  if (!(delta > 0) || !valid_reduction(reduction) || !is_foo(self)) return false;
  const auto shape = at::infer_size(self.sizes(), target.sizes());
  if (at::IntArrayRef(shape) != self.sizes()) return false;
  same_device(out.defined() ? "wrapper_PrivateUse1_out_huber_loss_out" : "wrapper_PrivateUse1__huber_loss",
              {{"self", &self}, {"target", &target}, {"out", out.defined() ? &out : nullptr}});
  if (!out.defined()) {
    out = reduction == 0 ? at::empty_like(self) : create_out({}, {}, self.options());
  } else if (out.scalar_type() == self.scalar_type()) {
    at::native::resize_output(out, reduction == 0 ? self.sizes() : at::IntArrayRef());
  }
  return point_loss_into(out, "huber", delta, self, target, reduction);
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  at::Tensor out;
  if (named([&] { return huber_native(self, target, reduction, delta, out); })) return out;
  return Slow<kHuber, at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, double)>::call(self, target,
                                                                                            reduction, delta);
}

at::Tensor& huber_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                           at::Tensor& out) {
  if (named([&] { return huber_native(self, target, reduction, delta, out); })) return out;
  return Slow<kHuberOut, at::Tensor&(const at::Tensor&, const at::Tensor&, int64_t, double, at::Tensor&)>::call(
      self, target, reduction, delta, out);
}

// The backward of a pointwise loss (huber_loss_backward.out,
// smooth_l1_loss_backward.grad_input; their functional forms are ATen's
// composites over these) as ATen's CPU kernels: their TensorIterator over
// (grad_input, self, target, grad_output) for the checks and grad_input's
// size, then Rust over grad_input's shape, for one floating dtype.
template <const char* N, const char* Kind, bool Promote>
at::Tensor& point_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double param, at::Tensor& grad_input) {
  if (named([&] {
        same_device(N, {{"grad_output", &grad_output}, {"self", &self}, {"target", &target},
                        {"grad_input", &grad_input}});
        const auto dt = self.scalar_type();
        if (!c10::isFloatingType(dt) || target.scalar_type() != dt || grad_output.scalar_type() != dt ||
            grad_input.scalar_type() != dt || !is_foo(self))
          return false;
        at::TensorIteratorConfig()
            .add_output(grad_input)
            .add_const_input(self)
            .add_const_input(target)
            .add_const_input(grad_output)
            .promote_inputs_to_common_dtype(Promote)
            .cast_common_dtype_to_outputs(Promote)
            .enforce_safe_casting_to_output(Promote)
            .build();
        FooView vgi, vg, va, vb;
        if (!view_of(grad_input, &vgi) || !view_of(grad_output, &vg) || !view_of(self, &va) ||
            !view_of(target, &vb))
          return false;
        FooStatus st{};
        return done(foo_rs_point_loss_backward(Kind, param, &vgi, &vg, &va, &vb, reduction, &st), st);
      }))
    return grad_input;
  return Slow<N, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, double,
                             at::Tensor&)>::call(grad_output, self, target, reduction, param, grad_input);
}
constexpr char kHuberBackOut[] = "huber_loss_backward.out";
constexpr char kSmoothL1BackOut[] = "smooth_l1_loss_backward.grad_input";
constexpr char kKindHuber[] = "huber";
constexpr char kKindSmoothL1[] = "smooth_l1";

// binary_cross_entropy as ATen's CPU kernel: Rust's elementwise loss
// (inputs outside [0, 1] refused with CPU's message) into a tensor of
// self's shape, the weight multiplied in, the mean or sum taken (foo's
// kernels), the result returned or copied into out= (resized). One
// floating dtype, target of self's shape.
constexpr char kBce[] = "binary_cross_entropy";
constexpr char kBceOut[] = "binary_cross_entropy.out";
bool bce_common(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                std::initializer_list<const at::Tensor*> more) {
  if (!valid_reduction(reduction) || !is_foo(self) || target.sizes() != self.sizes()) return false;
  std::vector<const at::Tensor*> ts{&self, &target, &weight};
  ts.insert(ts.end(), more.begin(), more.end());
  for (const at::Tensor* t : ts)
    if (t->defined() && (!is_foo(*t) || t->scalar_type() != self.scalar_type())) return false;
  return c10::isFloatingType(self.scalar_type());
}

bool bce_native(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
                int64_t reduction, at::Tensor& out) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  if (!bce_common(self, target, weight, reduction, {&out})) return false;
  same_device("wrapper_PrivateUse1_binary_cross_entropy",
              {{"self", &self}, {"target", &target}, {"weight", &weight}, {"out", out.defined() ? &out : nullptr}});
  at::Tensor loss = create_out(self.sizes(), {}, self.options());
  if (!point_loss_into(loss, "bce", 0.0, self, target, 0)) return false;
  if (weight.defined()) loss.mul_(weight);
  if (reduction == 1) loss = loss.mean();
  if (reduction == 2) loss = loss.sum();
  if (!out.defined()) {
    out = std::move(loss);
  } else {
    // CPU computes the elementwise loss in out (resized to self's shape),
    // then resizes it to the reduced shape as it is.
    at::native::resize_output(out, self.sizes());
    out.resize_(loss.sizes());
    out.copy_(loss);
  }
  return true;
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out;
  if (named([&] { return bce_native(self, target, weight, reduction, out); })) return out;
  return Slow<kBce, at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t)>::call(
      self, target, weight, reduction);
}

at::Tensor& binary_cross_entropy_out(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& out) {
  if (named([&] { return bce_native(self, target, weight, reduction, out); })) return out;
  return Slow<kBceOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                                   at::Tensor&)>::call(self, target, weight, reduction, out);
}

// Its backward as ATen's CPU kernel: Rust's elementwise gradient into
// grad_input (self's shape), the weight multiplied in, divided by the
// element count for the mean.
constexpr char kBceBack[] = "binary_cross_entropy_backward";
constexpr char kBceBackOut[] = "binary_cross_entropy_backward.grad_input";
bool bce_backward_native(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                         const std::optional<at::Tensor>& weight_opt, int64_t reduction, at::Tensor& grad_input) {
  const at::Tensor& weight = value_or_undefined(weight_opt);
  if (!bce_common(self, target, weight, reduction, {&grad, &grad_input})) return false;
  same_device("wrapper_PrivateUse1_binary_cross_entropy_backward",
              {{"grad_output", &grad}, {"self", &self}, {"target", &target}, {"weight", &weight},
               {"grad_input", grad_input.defined() ? &grad_input : nullptr}});
  if (!grad_input.defined()) {
    grad_input = create_out(self.sizes(), {}, self.options());
  } else {
    at::native::resize_output(grad_input, self.sizes());
  }
  FooView vgi, vg, va, vb;
  if (!view_of(grad_input, &vgi) || !view_of(grad, &vg) || !view_of(self, &va) || !view_of(target, &vb))
    return false;
  FooStatus st{};
  if (!done(foo_rs_point_loss_backward("bce", 0.0, &vgi, &vg, &va, &vb, 0, &st), st)) return false;
  if (weight.defined()) grad_input.mul_(weight);
  if (reduction == 1) grad_input.div_(self.numel());
  return true;
}

at::Tensor binary_cross_entropy_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor gi;
  if (named([&] { return bce_backward_native(grad, self, target, weight, reduction, gi); })) return gi;
  return Slow<kBceBack, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, int64_t)>::call(grad, self, target, weight,
                                                                                     reduction);
}

at::Tensor& binary_cross_entropy_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                              const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                              int64_t reduction, at::Tensor& grad_input) {
  if (named([&] { return bce_backward_native(grad, self, target, weight, reduction, grad_input); }))
    return grad_input;
  return Slow<kBceBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t, at::Tensor&)>::call(
      grad, self, target, weight, reduction, grad_input);
}

// nll_loss2d forward and backward: the nll_loss kernels (Rust takes the
// [N, C, H, W] input and [N, H, W] target as they are) for calls CPU
// accepts: those shapes, a Long or Byte target, a weight of C elements and
// one floating dtype; any other call keeps the Python kernel (CPU's
// errors). Outputs as CPU's: [N, H, W] or 0-d, and a 0-d total weight.
bool nll2d_common(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                  std::initializer_list<const at::Tensor*> same) {
  const auto tt = target.scalar_type();
  if (!valid_reduction(reduction) || self.dim() != 4 || target.dim() != 3 || !is_foo(self) || !is_foo(target) ||
      self.size(0) != target.size(0) || self.size(2) != target.size(1) || self.size(3) != target.size(2) ||
      (tt != at::kLong && tt != at::kByte) || (weight.defined() && weight.numel() != self.size(1)) ||
      !same_float(self.scalar_type(), {&self, &weight}))
    return false;
  for (const at::Tensor* t : same)
    if (t->defined() && (!is_foo(*t) || t->scalar_type() != self.scalar_type())) return false;
  return true;
}

constexpr char kNll2d[] = "nll_loss2d_forward";
constexpr char kNll2dOut[] = "nll_loss2d_forward.output";
bool nll2d_native(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
                  int64_t reduction, int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  const at::Tensor& w = value_or_undefined(weight_opt);
  if (!nll2d_common(self, target, w, reduction, {&output, &total_weight})) return false;
  same_device("wrapper_PrivateUse1_nll_loss2d_forward",
              {{"self", &self}, {"target", &target}, {"weight", &w},
               {"output", output.defined() ? &output : nullptr},
               {"total_weight", total_weight.defined() ? &total_weight : nullptr}});
  const at::IntArrayRef shape = reduction == 0 ? target.sizes() : at::IntArrayRef();
  if (!output.defined()) {
    output = create_out(shape, {}, self.options());
    total_weight = create_out({}, {}, self.options());
  } else {
    at::native::resize_output(output, shape);
    at::native::resize_output(total_weight, {});
  }
  const at::Tensor x = self.contiguous(), t = target.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  FooView vo, vtw, vx, vt, vw;
  if (!view_of(output, &vo) || !view_of(total_weight, &vtw) || !view_of(x, &vx) || !view_of(t, &vt) ||
      (wc.defined() && !view_of(wc, &vw)))
    return false;
  FooStatus st{};
  return done(foo_rs_nll_loss(&vo, &vtw, &vx, &vt, wc.defined() ? &vw : nullptr, reduction, ignore_index, &st), st);
}

Tensor2 nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                           int64_t reduction, c10::SymInt ignore_index) {
  Tensor2 result;
  at::Tensor output, total_weight;
  if (!ignore_index.is_symbolic() && named([&] {
        return nll2d_native(self, target, weight, reduction, ignore_index.as_int_unchecked(), output, total_weight);
      }))
    return Tensor2(std::move(output), std::move(total_weight));
  return Slow<kNll2d, Tensor2(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                              c10::SymInt)>::call(self, target, weight, reduction, std::move(ignore_index));
}

Tensor2Ref nll_loss2d_forward_out(const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction,
                                  c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  if (!ignore_index.is_symbolic() && named([&] {
        return nll2d_native(self, target, weight, reduction, ignore_index.as_int_unchecked(), output, total_weight);
      }))
    return Tensor2Ref(output, total_weight);
  return Slow<kNll2dOut, Tensor2Ref(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                                    c10::SymInt, at::Tensor&, at::Tensor&)>::call(self, target, weight, reduction,
                                                                                 std::move(ignore_index), output,
                                                                                 total_weight);
}

constexpr char kNll2dBack[] = "nll_loss2d_backward";
constexpr char kNll2dBackOut[] = "nll_loss2d_backward.grad_input";
bool nll2d_backward_native(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                           const std::optional<at::Tensor>& weight_opt, int64_t reduction, int64_t ignore_index,
                           const at::Tensor& total_weight, at::Tensor& grad_input) {
  const at::Tensor& w = value_or_undefined(weight_opt);
  if (!nll2d_common(self, target, w, reduction, {&grad_output, &total_weight, &grad_input}) ||
      total_weight.numel() != 1 ||
      (reduction == 0 ? grad_output.sizes() != target.sizes() : grad_output.numel() != 1))
    return false;
  same_device("wrapper_PrivateUse1_nll_loss2d_backward",
              {{"grad_output", &grad_output}, {"self", &self}, {"target", &target}, {"weight", &w},
               {"total_weight", &total_weight}, {"grad_input", grad_input.defined() ? &grad_input : nullptr}});
  if (!grad_input.defined()) {
    grad_input = create_out(self.sizes(), {}, self.options());
  } else {
    at::native::resize_output(grad_input, self.sizes());
  }
  const at::Tensor tc = target.contiguous();
  const at::Tensor wc = w.defined() ? w.contiguous() : w;
  FooView vgi, vg, vt, vw, vtw;
  if (!view_of(grad_input, &vgi) || !view_of(grad_output, &vg) || !view_of(tc, &vt) ||
      (wc.defined() && !view_of(wc, &vw)) || !view_of(total_weight, &vtw))
    return false;
  FooStatus st{};
  return done(foo_rs_nll_loss_backward(&vgi, &vg, &vt, wc.defined() ? &vw : nullptr, &vtw, reduction, ignore_index,
                                       &st),
              st);
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
  at::Tensor gi;
  if (!ignore_index.is_symbolic() && named([&] {
        return nll2d_backward_native(grad_output, self, target, weight, reduction, ignore_index.as_int_unchecked(),
                                     total_weight, gi);
      }))
    return gi;
  return Slow<kNll2dBack, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, int64_t, c10::SymInt, const at::Tensor&)>::
      call(grad_output, self, target, weight, reduction, std::move(ignore_index), total_weight);
}

at::Tensor& nll_loss2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                    c10::SymInt ignore_index, const at::Tensor& total_weight,
                                    at::Tensor& grad_input) {
  if (!ignore_index.is_symbolic() && named([&] {
        return nll2d_backward_native(grad_output, self, target, weight, reduction, ignore_index.as_int_unchecked(),
                                     total_weight, grad_input);
      }))
    return grad_input;
  return Slow<kNll2dBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const std::optional<at::Tensor>&, int64_t, c10::SymInt, const at::Tensor&,
                                         at::Tensor&)>::call(grad_output, self, target, weight, reduction,
                                                             std::move(ignore_index), total_weight, grad_input);
}

// log_sigmoid_forward as ATen's CPU kernel: output of self's shape
// (computed contiguous, then copied into a strided out=), Rust's
// log_sigmoid of contiguous self, and the buffer (contiguous, its check
// and message) holding exp(-|x|) as CPU's does (foo's abs, neg_, exp_;
// the backward never reads it). Floating dtypes; the rest keeps the
// Python kernel (CPU's error).
constexpr char kLogSigmoid[] = "log_sigmoid_forward";
constexpr char kLogSigmoidOut[] = "log_sigmoid_forward.output";
bool log_sigmoid_native(const at::Tensor& self, at::Tensor& output, at::Tensor& buffer) {
  const auto dt = self.scalar_type();
  if (!c10::isFloatingType(dt) || !same_float(dt, {&self, &output, &buffer})) return false;
  same_device("wrapper_PrivateUse1_log_sigmoid_forward",
              {{"self", &self}, {"output", output.defined() ? &output : nullptr},
               {"buffer", buffer.defined() ? &buffer : nullptr}});
  if (!output.defined()) {
    output = create_out(self.sizes(), {}, self.options());
    buffer = create_out(self.sizes(), {}, self.options());
  } else {
    output.resize_as_(self);
    buffer.resize_as_(self, at::MemoryFormat::Contiguous);
    TORCH_CHECK(buffer.is_contiguous(), "Contiguous buffer required for log_sigmoid with out parameter");
  }
  const at::Tensor x = self.contiguous();
  at::Tensor r = output.is_contiguous() ? output : create_out(self.sizes(), {}, self.options());
  FooOperand ops[2]{};
  if (!view_of(r, &ops[0].view) || !view_of(x, &ops[1].view)) return false;
  FooStatus st{};
  if (!done(foo_rs_ew("log_sigmoid", ops[0].view.dtype, ops, 2, nullptr, 0, /*iter=*/0, &st), st)) return false;
  if (!r.is_same(output)) output.copy_(r);
  at::abs_out(buffer, x).neg_().exp_();
  return true;
}

Tensor2 log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor output, buffer;
  if (is_foo(self) && named([&] { return log_sigmoid_native(self, output, buffer); }))
    return Tensor2(std::move(output), std::move(buffer));
  return Slow<kLogSigmoid, Tensor2(const at::Tensor&)>::call(self);
}

Tensor2Ref log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output, at::Tensor& buffer) {
  if (is_foo(self) && named([&] { return log_sigmoid_native(self, output, buffer); }))
    return Tensor2Ref(output, buffer);
  return Slow<kLogSigmoidOut, Tensor2Ref(const at::Tensor&, at::Tensor&, at::Tensor&)>::call(self, output, buffer);
}

// log_sigmoid_backward as ATen's CPU kernel: one iterator over (grad_input,
// self, buffer, grad_output) (one dtype: its check; grad_input like
// grad_output when not given), Rust's log_sigmoid_backward(grad_output, self).
constexpr char kLogSigmoidBack[] = "log_sigmoid_backward";
constexpr char kLogSigmoidBackOut[] = "log_sigmoid_backward.grad_input";
bool log_sigmoid_backward_native(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer,
                                 at::Tensor& grad_input) {
  if (!is_foo(grad_output) || !is_foo(self) || !is_foo(buffer) || !c10::isFloatingType(self.scalar_type()))
    return false;
  if (!grad_input.defined()) grad_input = at::empty_like(grad_output);
  auto it = at::TensorIteratorConfig()
                .add_output(grad_input)
                .add_const_input(self)
                .add_const_input(buffer)
                .add_const_input(grad_output)
                .build();
  return ew_over_iter("log_sigmoid_backward", self.scalar_type(), it, {0, 3, 1});
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer) {
  at::Tensor gi;
  if (named([&] { return log_sigmoid_backward_native(grad_output, self, buffer, gi); })) return gi;
  return Slow<kLogSigmoidBack, at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>::call(
      grad_output, self, buffer);
}

at::Tensor& log_sigmoid_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer,
                                     at::Tensor& grad_input) {
  if (named([&] { return log_sigmoid_backward_native(grad_output, self, buffer, grad_input); })) return grad_input;
  return Slow<kLogSigmoidBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              at::Tensor&)>::call(grad_output, self, buffer, grad_input);
}

// ---- Adaptive max pooling -------------------------------------------------------

// adaptive_max_pool2d (the functional form is ATen's composite over .out)
// and its backward: ATen's structured metas (ranks, sizes, dtypes and their
// messages; outputs laid out as the input), then the Rust kernels the
// Python kernels call: the pooling, and max pooling's scatter of each
// gradient to its maximum. Non-floating inputs keep the Python kernel
// (CPU's error), as does a backward whose indices are not grad_output's shape.
constexpr char kAdaptiveMaxOut[] = "adaptive_max_pool2d.out";
constexpr char kAdaptiveMaxBackOut[] = "adaptive_max_pool2d_backward.grad_input";
Tensor2Ref adaptive_max_pool2d_out(const at::Tensor& self, at::IntArrayRef output_size, at::Tensor& out,
                                   at::Tensor& indices) {
  if (is_foo(self) && named([&] {
        Holder<at::meta::structured_adaptive_max_pool2d, Mode::Out, 2> h(out, indices);
        same_device("wrapper_PrivateUse1_adaptive_max_pool2d_out",
                    {{"self", &self}, {"out", h.out_arg(0)}, {"indices", h.out_arg(1)}});
        h.meta(self, output_size);
        if (!c10::isFloatingType(self.scalar_type())) return false;
        if (h.result(0).numel() > 0) {
          const at::Tensor o4 = as4(h.result(0)), i4 = as4(h.result(1)), x4 = as4(self);
          FooView vo, vi, vx;
          if (!view_of(o4, &vo) || !view_of(i4, &vi) || !view_of(x4, &vx)) return false;
          FooStatus st{};
          if (!done(foo_rs_adaptive_max_pool2d(&vo, &vi, &vx, &st), st)) return false;
        }
        h.finish();
        return true;
      }))
    return Tensor2Ref(out, indices);
  return Slow<kAdaptiveMaxOut, Tensor2Ref(const at::Tensor&, at::IntArrayRef, at::Tensor&, at::Tensor&)>::call(
      self, output_size, out, indices);
}

at::Tensor& adaptive_max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
  if (is_foo(self) && named([&] {
        Holder<at::meta::structured_adaptive_max_pool2d_backward, Mode::Out> h(grad_input);
        same_device("wrapper_PrivateUse1_adaptive_max_pool2d_backward_grad_input",
                    {{"grad_output", &grad_output}, {"self", &self}, {"indices", &indices},
                     {"grad_input", h.out_arg()}});
        h.meta(grad_output, self, indices);
        if (!c10::isFloatingType(self.scalar_type()) || grad_output.sizes() != indices.sizes() ||
            !is_foo(indices) || indices.scalar_type() != at::kLong)
          return false;
        if (h.result().numel() > 0) {
          const at::Tensor gi4 = as4(h.result()), go4 = as4(grad_output), i4 = as4(indices);
          FooView vgi, vgo, vi;
          if (!view_of(gi4, &vgi) || !view_of(go4, &vgo) || !view_of(i4, &vi)) return false;
          FooStatus st{};
          if (!done(foo_rs_max_pool2d_backward(&vgi, &vgo, &vi, &st), st)) return false;
        }
        h.finish();
        return true;
      }))
    return grad_input;
  return Slow<kAdaptiveMaxBackOut, at::Tensor&(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               at::Tensor&)>::call(grad_output, self, indices, grad_input);
}

// ---- Nearest upsampling (2-d) ---------------------------------------------------
//
// upsample_nearest2d and _upsample_nearest_exact2d, forward and backward:
// ATen's structured metas (sizes, scales, their checks and messages, the
// output's layout), the source row and column of every output position
// from ATen's own nearest_idx / nearest_exact_idx, then Rust's advanced
// indexing over those two index vectors: the forward gathers
// x[:, :, rows[:, None], cols[None, :]], the backward accumulates
// grad_output into those positions of a zeroed grad_input. The index
// vectors are CPU tensors (host memory Rust reads as it reads foo's).
// Forward: floating and uint8 inputs (CPU's dtypes); backward: float32 and
// float64 (f16/bf16 sums are CPU's in float32); the rest keeps the Python
// kernel.
struct NearestPlan {
  at::Tensor rows, cols;
  std::array<int64_t, 4> shape{}, dstr{}, rstr{0, 0, 1, 0}, cstr{0, 0, 0, 1};
  FooView vd{};
  std::array<FooIndexArg, 2> args{};

  static at::Tensor sources(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
    at::Tensor idx = at::empty({out}, at::TensorOptions().dtype(at::kLong));
    int64_t* p = idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < out; ++i)
      p[i] = exact ? at::native::nearest_exact_idx(i, in, out, scale) : at::native::nearest_idx(i, in, out, scale);
    return idx;
  }
  // `data` (N, C, IH, IW) read (or written) at the sources of every position of `out_shape` (N, C, OH, OW).
  bool make(const at::Tensor& data, at::IntArrayRef out_shape, std::optional<double> sh, std::optional<double> sw,
            bool exact) {
    rows = sources(data.size(2), out_shape[2], sh, exact);
    cols = sources(data.size(3), out_shape[3], sw, exact);
    std::copy(out_shape.begin(), out_shape.end(), shape.begin());
    dstr = {data.stride(0), data.stride(1), 0, 0};
    if (!view_of(data, &vd) || !view_of(rows, &args[0].idx) || !view_of(cols, &args[1].idx)) return false;
    vd.sizes = shape.data();
    vd.strides = dstr.data();
    const std::array<const int64_t*, 2> istr{rstr.data(), cstr.data()};
    for (int k = 0; k < 2; ++k) {
      args[k].idx.ndim = 4;
      args[k].idx.sizes = shape.data();
      args[k].idx.strides = istr[k];
      args[k].size = data.size(2 + k);
      args[k].stride = data.stride(2 + k);
    }
    return true;
  }
};

template <class Meta, bool Exact, const char* F, const char* O>
struct NearestUp {
  template <Mode M>
  static bool run(Holder<Meta, M>& h, const at::Tensor& self, at::IntArrayRef osize, std::optional<double> sh,
                  std::optional<double> sw) {
    same_device(F, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, osize, sh, sw);
    const auto dt = self.scalar_type();
    if (!(c10::isFloatingType(dt) || dt == at::kByte)) return false;
    const at::Tensor& out = h.result();
    if (out.numel() > 0) {
      NearestPlan plan;
      FooView vo;
      if (!plan.make(self, out.sizes(), sh, sw, Exact) || !view_of(out, &vo)) return false;
      FooStatus st{};
      if (!done(foo_rs_index(&vo, &plan.vd, plan.args.data(), 2, &st), st)) return false;
    }
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& self, c10::SymIntArrayRef output_size, std::optional<double> sh,
                               std::optional<double> sw) {
    at::Tensor result;
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Functional> h;
          if (!run(h, self, C10_AS_INTARRAYREF_SLOW(output_size), sh, sw)) return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<F, at::Tensor(const at::Tensor&, c10::SymIntArrayRef, std::optional<double>,
                              std::optional<double>)>::call(self, output_size, sh, sw);
  }
  static at::Tensor& out(const at::Tensor& self, c10::SymIntArrayRef output_size, std::optional<double> sh,
                         std::optional<double> sw, at::Tensor& out) {
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Out> h(out);
          return run(h, self, C10_AS_INTARRAYREF_SLOW(output_size), sh, sw);
        }))
      return out;
    return Slow<O, at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, std::optional<double>, std::optional<double>,
                               at::Tensor&)>::call(self, output_size, sh, sw, out);
  }
};

template <class Meta, bool Exact, const char* F, const char* O>
struct NearestUpBackward {
  template <Mode M>
  static bool run(Holder<Meta, M>& h, const at::Tensor& grad_output, at::IntArrayRef osize, at::IntArrayRef isize,
                  std::optional<double> sh, std::optional<double> sw) {
    same_device(F, {{"grad_output", &grad_output}, {"grad_input", h.out_arg()}});
    h.meta(grad_output, osize, isize, sh, sw);
    const auto dt = grad_output.scalar_type();
    if (dt != at::kFloat && dt != at::kDouble) return false;
    const at::Tensor& gi = h.result();
    if (gi.numel() > 0) {
      gi.zero_();
      if (grad_output.numel() > 0) {
        NearestPlan plan;
        FooView vg;
        if (!plan.make(gi, grad_output.sizes(), sh, sw, Exact) || !view_of(grad_output, &vg)) return false;
        FooStatus st{};
        if (!done(foo_rs_index_put(&plan.vd, &vg, plan.args.data(), 2, /*accumulate=*/1, &st), st)) return false;
      }
    }
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                               c10::SymIntArrayRef input_size, std::optional<double> sh, std::optional<double> sw) {
    at::Tensor result;
    if (is_foo(grad_output) && named([&] {
          Holder<Meta, Mode::Functional> h;
          if (!run(h, grad_output, C10_AS_INTARRAYREF_SLOW(output_size), C10_AS_INTARRAYREF_SLOW(input_size), sh,
                   sw))
            return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<F, at::Tensor(const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, std::optional<double>,
                              std::optional<double>)>::call(grad_output, output_size, input_size, sh, sw);
  }
  static at::Tensor& out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                         c10::SymIntArrayRef input_size, std::optional<double> sh, std::optional<double> sw,
                         at::Tensor& grad_input) {
    if (is_foo(grad_output) && named([&] {
          Holder<Meta, Mode::Out> h(grad_input);
          return run(h, grad_output, C10_AS_INTARRAYREF_SLOW(output_size), C10_AS_INTARRAYREF_SLOW(input_size), sh,
                     sw);
        }))
      return grad_input;
    return Slow<O, at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, std::optional<double>,
                               std::optional<double>, at::Tensor&)>::call(grad_output, output_size, input_size, sh,
                                                                          sw, grad_input);
  }
};

constexpr char kUpNearest[] = "upsample_nearest2d";
constexpr char kUpNearestOut[] = "upsample_nearest2d.out";
constexpr char kUpNearestBack[] = "upsample_nearest2d_backward";
constexpr char kUpNearestBackOut[] = "upsample_nearest2d_backward.grad_input";
constexpr char kUpExact[] = "_upsample_nearest_exact2d";
constexpr char kUpExactOut[] = "_upsample_nearest_exact2d.out";
constexpr char kUpExactBack[] = "_upsample_nearest_exact2d_backward";
constexpr char kUpExactBackOut[] = "_upsample_nearest_exact2d_backward.grad_input";
using UpNearest = NearestUp<at::meta::structured_upsample_nearest2d, false, kUpNearest, kUpNearestOut>;
using UpExact = NearestUp<at::meta::structured__upsample_nearest_exact2d, true, kUpExact, kUpExactOut>;
using UpNearestBack = NearestUpBackward<at::meta::structured_upsample_nearest2d_backward, false, kUpNearestBack,
                                        kUpNearestBackOut>;
using UpExactBack = NearestUpBackward<at::meta::structured__upsample_nearest_exact2d_backward, true, kUpExactBack,
                                      kUpExactBackOut>;

// ---- Bilinear upsampling (2-d) ----------------------------------------------------
//
// upsample_bilinear2d and its backward (upsample_bilinear2d.vec, what
// F.interpolate calls, is ATen's composite over the first): ATen's
// structured metas (sizes, scales, checks, the output's layout), the two
// source positions and weights of every output row and column from ATen's
// own area_pixel_compute_scale and compute_source_index_and_lambda (the
// weights in the compute type, float for 16-bit inputs, as CPU's), then Rust: each output
// the blend of its four neighbours in CPU's order, the backward their
// weighted sums into grad_input. Floating dtypes; the rest keeps the Python
// kernel (CPU's error).
struct LinearTaps {
  std::vector<int64_t> idx;  // i0, i1 per output position
  std::vector<double> lam;   // their weights l0, l1
  LinearTaps(c10::ScalarType st, int64_t in, int64_t out, bool align_corners, std::optional<double> scale)
      : idx(2 * out), lam(2 * out) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, st, "upsample_bilinear2d", [&] {
      using opmath_t = at::opmath_type<scalar_t>;
      const opmath_t ratio = at::native::area_pixel_compute_scale<opmath_t>(in, out, align_corners, scale);
      for (int64_t i = 0; i < out; ++i) {
        int64_t i0 = 0, i1 = 0;
        opmath_t l0, l1;
        at::native::compute_source_index_and_lambda<opmath_t, opmath_t>(i0, i1, l0, l1, ratio, i, in, out,
                                                                         align_corners);
        idx[2 * i] = i0;
        idx[2 * i + 1] = i1;
        lam[2 * i] = static_cast<double>(l0);
        lam[2 * i + 1] = static_cast<double>(l1);
      }
    });
  }
};

// Rust over `out` (forward: the output; backward: grad_input) and `x`
// (forward: the input; backward: grad_output); `in`/`outs`: the input's and
// output's (N, C, H, W).
bool run_bilinear(const at::Tensor& out, const at::Tensor& x, at::IntArrayRef in, at::IntArrayRef outs,
                  bool align_corners, std::optional<double> sh, std::optional<double> sw, bool backward) {
  const LinearTaps h(x.scalar_type(), in[2], outs[2], align_corners, sh);
  const LinearTaps w(x.scalar_type(), in[3], outs[3], align_corners, sw);
  FooView vo, vx;
  if (!view_of(out, &vo) || !view_of(x, &vx)) return false;
  FooStatus st{};
  return done(foo_rs_upsample_bilinear2d(&vo, &vx, h.idx.data(), h.lam.data(), static_cast<size_t>(outs[2]),
                                         w.idx.data(), w.lam.data(), static_cast<size_t>(outs[3]), backward ? 1 : 0,
                                         &st),
              st);
}

constexpr char kUpBilinear[] = "upsample_bilinear2d";
constexpr char kUpBilinearOut[] = "upsample_bilinear2d.out";
constexpr char kUpBilinearBack[] = "upsample_bilinear2d_backward";
constexpr char kUpBilinearBackOut[] = "upsample_bilinear2d_backward.grad_input";

struct UpBilinear {
  template <Mode M>
  static bool run(Holder<at::meta::structured_upsample_bilinear2d, M>& h, const at::Tensor& self,
                  at::IntArrayRef osize, bool align_corners, std::optional<double> sh, std::optional<double> sw) {
    same_device(kUpBilinear, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, osize, align_corners, sh, sw);
    if (!c10::isFloatingType(self.scalar_type())) return false;
    const at::Tensor& out = h.result();
    if (out.numel() > 0 && !run_bilinear(out, self, self.sizes(), out.sizes(), align_corners, sh, sw, false))
      return false;
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
                               std::optional<double> sh, std::optional<double> sw) {
    at::Tensor result;
    if (is_foo(self) && named([&] {
          Holder<at::meta::structured_upsample_bilinear2d, Mode::Functional> h;
          if (!run(h, self, C10_AS_INTARRAYREF_SLOW(output_size), align_corners, sh, sw)) return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<kUpBilinear, at::Tensor(const at::Tensor&, c10::SymIntArrayRef, bool, std::optional<double>,
                                        std::optional<double>)>::call(self, output_size, align_corners, sh, sw);
  }
  static at::Tensor& out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
                         std::optional<double> sh, std::optional<double> sw, at::Tensor& out) {
    if (is_foo(self) && named([&] {
          Holder<at::meta::structured_upsample_bilinear2d, Mode::Out> h(out);
          return run(h, self, C10_AS_INTARRAYREF_SLOW(output_size), align_corners, sh, sw);
        }))
      return out;
    return Slow<kUpBilinearOut, at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, bool, std::optional<double>,
                                            std::optional<double>, at::Tensor&)>::call(self, output_size,
                                                                                       align_corners, sh, sw, out);
  }
};

struct UpBilinearBack {
  template <Mode M>
  static bool run(Holder<at::meta::structured_upsample_bilinear2d_backward, M>& h, const at::Tensor& grad_output,
                  at::IntArrayRef osize, at::IntArrayRef isize, bool align_corners, std::optional<double> sh,
                  std::optional<double> sw) {
    same_device(kUpBilinearBack, {{"grad_output", &grad_output}, {"grad_input", h.out_arg()}});
    h.meta(grad_output, osize, isize, align_corners, sh, sw);
    if (!c10::isFloatingType(grad_output.scalar_type())) return false;
    const at::Tensor& gi = h.result();
    if (gi.numel() > 0) {
      if (grad_output.numel() == 0) {
        gi.zero_();
      } else if (!run_bilinear(gi, grad_output, gi.sizes(), grad_output.sizes(), align_corners, sh, sw, true)) {
        return false;
      }
    }
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                               c10::SymIntArrayRef input_size, bool align_corners, std::optional<double> sh,
                               std::optional<double> sw) {
    at::Tensor result;
    if (is_foo(grad_output) && named([&] {
          Holder<at::meta::structured_upsample_bilinear2d_backward, Mode::Functional> h;
          if (!run(h, grad_output, C10_AS_INTARRAYREF_SLOW(output_size), C10_AS_INTARRAYREF_SLOW(input_size),
                   align_corners, sh, sw))
            return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<kUpBilinearBack, at::Tensor(const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, bool,
                                            std::optional<double>, std::optional<double>)>::call(
        grad_output, output_size, input_size, align_corners, sh, sw);
  }
  static at::Tensor& out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
                         c10::SymIntArrayRef input_size, bool align_corners, std::optional<double> sh,
                         std::optional<double> sw, at::Tensor& grad_input) {
    if (is_foo(grad_output) && named([&] {
          Holder<at::meta::structured_upsample_bilinear2d_backward, Mode::Out> h(grad_input);
          return run(h, grad_output, C10_AS_INTARRAYREF_SLOW(output_size), C10_AS_INTARRAYREF_SLOW(input_size),
                     align_corners, sh, sw);
        }))
      return grad_input;
    return Slow<kUpBilinearBackOut,
                at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, bool, std::optional<double>,
                            std::optional<double>, at::Tensor&)>::call(grad_output, output_size, input_size,
                                                                       align_corners, sh, sw, grad_input);
  }
};

// ---- Reflection and replication padding (1-3 d) ----------------------------------
//
// reflection_pad{1,2,3}d, replication_pad{1,2,3}d and their backward, each
// with its out= form (F.pad's "reflect" and "replicate" modes). The checks,
// shapes and layouts are CPU's: ATen's structured metas where the op has
// one, else the CPU kernel's own checks (reflection_pad2d and its backward,
// replication_pad2d/3d's backward; ATen's shared padding:: checks, see
// foo_rs_pad_aten above, or torch 2.13's per-op ones); outputs restrided to
// the input's suggested memory format where CPU's kernel does so, and an
// output of another dtype refused with the message CPU's kernel gives.
// Then Rust (kernels/pad.rs): a gather of reflected or clamped positions,
// the backward their sums in output order. float32/float64/float16/bfloat16;
// the rest keeps the Python kernel.

bool pad_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// What CPU's kernel raises when the tensor it writes is not of the dtype it
// dispatched on (data_ptr<scalar_t>'s check).
void check_pad_written(const at::Tensor& written, c10::ScalarType dispatched) {
  TORCH_CHECK(written.scalar_type() == dispatched, "expected scalar type ", dispatched, " but found ",
              written.scalar_type());
}

// CPU's `output.resize_(output.sizes(), input.suggest_memory_format())`
// after a structured meta (a caller's out= tensor is restrided as CPU's).
template <Mode M>
void restride_as_cpu(const at::Tensor& out, const at::Tensor& input) {
  const auto fmt = input.suggest_memory_format();
  if constexpr (M == Mode::Functional) {
    if (!out.is_contiguous(fmt)) out.unsafeGetTensorImpl()->empty_tensor_restride(fmt);
  } else {
    out.resize_(out.sizes(), fmt);
  }
}

// Rust over `out` (the padded output, or grad_input) and `x` (the input, or
// grad_output); `padding` is ATen's list, checked.
bool run_pad(const at::Tensor& out, const at::Tensor& x, at::IntArrayRef padding, bool reflect, bool backward) {
  FooView vo, vx;
  if (!view_of(out, &vo) || !view_of(x, &vx)) return false;
  FooStatus st{};
  return done(foo_rs_pad(&vo, &vx, padding.data(), padding.size() / 2, reflect ? 1 : 0, backward ? 1 : 0, &st), st);
}

// grad_input from grad_output: zeros when grad_output is empty.
bool run_pad_backward(const at::Tensor& gi, const at::Tensor& go, at::IntArrayRef padding, bool reflect) {
  if (gi.numel() == 0) return true;
  check_pad_written(gi, go.scalar_type());
  if (go.numel() == 0) {
    gi.zero_();
    return true;
  }
  return run_pad(gi, go, padding, reflect, true);
}

// torch 2.13's check_valid_input<dim> (the shared checks' first part, with
// the same messages).
void pad_valid_input_213(const at::Tensor& input, at::IntArrayRef padding, int64_t dim) {
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * dim, "padding size is expected to be ", 2 * dim,
              ", but got: ", padding.size());
  const int64_t input_dim = input.dim();
  const bool batch = input_dim == dim + 2;
  bool valid = batch || input_dim == dim + 1;
  for (int64_t d = batch ? 1 : 0; valid && d < input_dim; ++d) valid = input.size(d) != 0;
  TORCH_CHECK(valid, "Expected ", dim + 1, "D or ", dim + 2,
              "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
              input.sizes());
}

// reflection_pad2d's checks and output size (T: at::Tensor; a template so
// that only the branch of this torch's ATen is compiled).
template <class T>
at::DimVector reflection_pad2d_size(const T& input, at::IntArrayRef padding) {
  if constexpr (foo_rs_pad_aten::kShared<T>) {
    return foo_rs_pad_aten::shape(input, padding, 2, true);
  } else {
    pad_valid_input_213(input, padding, 2);
    const int64_t ndim = input.dim();
    const int64_t dim_w = ndim == 4 ? 3 : 2, dim_h = dim_w - 1;
    const int64_t pad_l = padding[0], pad_r = padding[1], pad_t = padding[2], pad_b = padding[3];
    const int64_t input_h = input.size(dim_h), input_w = input.size(dim_w);
    const int64_t output_h = input_h + pad_t + pad_b, output_w = input_w + pad_l + pad_r;
    TORCH_CHECK(pad_l < input_w && pad_r < input_w,
                "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
                pad_l, ", ", pad_r, ") at dimension ", dim_w, " of input ", input.sizes());
    TORCH_CHECK(pad_t < input_h && pad_b < input_h,
                "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (",
                pad_t, ", ", pad_b, ") at dimension ", dim_h, " of input ", input.sizes());
    TORCH_CHECK(output_w >= 1 || output_h >= 1, "input (H: ", input_h, ", W: ", input_w,
                ") is too small. Calculated output H: ", output_h, " W: ", output_w);
    at::DimVector size(input.sizes());
    size[dim_h] = output_h;
    size[dim_w] = output_w;
    return size;
  }
}

// The backward checks of reflection_pad2d (Reflect) and replication_pad2d
// and 3d (dim 2, 3) that CPU's kernels make without a meta.
template <bool Reflect, class T>
void pad_backward_checks(const T& grad_output, const T& input, at::IntArrayRef padding, int64_t dim) {
  if constexpr (foo_rs_pad_aten::kShared<T>) {
    if (!Reflect) foo_rs_pad_aten::valid_input(input, padding, dim);
    foo_rs_pad_aten::backward_shape(grad_output, input, padding, dim);
  } else {
    const char* go = "gradOutput";
    if (!Reflect) TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * dim, "padding size is expected to be ", 2 * dim);
    const int64_t off = input.dim() == dim + 2 ? 1 : 0;
    const int64_t dimw = dim + off, dimh = dimw - 1, dimd = dimw - 2, dimc = off;
    // Sizes read in the order CPU's kernels read them (the first one out of
    // range raises).
    const int64_t ichannel = dim == 3 ? input.size(dimc) : 0;
    const int64_t odepth = dim == 3 ? input.size(dimd) + padding[4] + padding[5] : 0;
    const int64_t oheight = input.size(dimh) + padding[2] + padding[3];
    const int64_t owidth = input.size(dimw) + padding[0] + padding[1];
    if (dim == 3) {
      pad_valid_input_213(input, padding, 3);
      TORCH_CHECK(ichannel == grad_output.size(dimc), go, " channel unexpected. Expected: ", ichannel, ", Got: ",
                  grad_output.size(dimc));
      TORCH_CHECK(owidth == grad_output.size(dimw), go, " width unexpected. Expected: ", owidth, ", Got: ",
                  grad_output.size(dimw));
      TORCH_CHECK(oheight == grad_output.size(dimh), go, " height unexpected. Expected: ", oheight, ", Got: ",
                  grad_output.size(dimh));
      TORCH_CHECK(odepth == grad_output.size(dimd), go, " depth unexpected. Expected: ", odepth, ", Got: ",
                  grad_output.size(dimd));
    } else {
      TORCH_CHECK(owidth == grad_output.size(dimw), go, " width unexpected. Expected: ", owidth, ", Got: ",
                  grad_output.size(dimw));
      TORCH_CHECK(oheight == grad_output.size(dimh), go, " height unexpected. Expected: ", oheight, ", Got: ",
                  grad_output.size(dimh));
    }
  }
}

// A structured forward (reflection_pad1d/3d, replication_pad1d/2d/3d).
template <class Meta, bool Reflect, bool Restride, const char* F, const char* O>
struct PadStructured {
  template <Mode M>
  static bool run(Holder<Meta, M>& h, const at::Tensor& self, at::IntArrayRef padding) {
    if (!pad_dtype(self.scalar_type())) return false;
    same_device(F, {{"self", &self}, {"out", h.out_arg()}});
    h.meta(self, padding);
    const at::Tensor& out = h.result();
    if constexpr (Restride) restride_as_cpu<M>(out, self);
    if (out.numel() > 0 && !run_pad(out, self, padding, Reflect, false)) return false;
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& self, c10::SymIntArrayRef padding) {
    at::Tensor result;
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Functional> h;
          if (!run(h, self, C10_AS_INTARRAYREF_SLOW(padding))) return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<F, at::Tensor(const at::Tensor&, c10::SymIntArrayRef)>::call(self, padding);
  }
  static at::Tensor& out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {
    if (is_foo(self) && named([&] {
          Holder<Meta, Mode::Out> h(out);
          return run(h, self, C10_AS_INTARRAYREF_SLOW(padding));
        }))
      return out;
    return Slow<O, at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, at::Tensor&)>::call(self, padding, out);
  }
};

// A structured backward (reflection_pad1d/3d's, replication_pad1d's).
template <class Meta, bool Reflect, bool Restride, const char* F, const char* O>
struct PadBackStructured {
  template <Mode M>
  static bool run(Holder<Meta, M>& h, const at::Tensor& grad_output, const at::Tensor& self,
                  at::IntArrayRef padding) {
    if (!pad_dtype(grad_output.scalar_type())) return false;
    same_device(F, {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", h.out_arg()}});
    h.meta(grad_output, self, padding);
    const at::Tensor& gi = h.result();
    if constexpr (Restride) {
      if (grad_output.numel() > 0) restride_as_cpu<M>(gi, self);
    }
    if (!run_pad_backward(gi, grad_output, padding, Reflect)) return false;
    h.finish();
    return true;
  }
  static at::Tensor functional(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding) {
    at::Tensor result;
    if (is_foo(grad_output) && named([&] {
          Holder<Meta, Mode::Functional> h;
          if (!run(h, grad_output, self, C10_AS_INTARRAYREF_SLOW(padding))) return false;
          result = std::move(h.out_[0]);
          return true;
        }))
      return result;
    return Slow<F, at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef)>::call(grad_output, self,
                                                                                              padding);
  }
  static at::Tensor& out(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding,
                         at::Tensor& grad_input) {
    if (is_foo(grad_output) && named([&] {
          Holder<Meta, Mode::Out> h(grad_input);
          return run(h, grad_output, self, C10_AS_INTARRAYREF_SLOW(padding));
        }))
      return grad_input;
    return Slow<O, at::Tensor&(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef, at::Tensor&)>::call(
        grad_output, self, padding, grad_input);
  }
};

constexpr char kReflPad1d[] = "reflection_pad1d";
constexpr char kReflPad1dOut[] = "reflection_pad1d.out";
constexpr char kReflPad1dBack[] = "reflection_pad1d_backward";
constexpr char kReflPad1dBackOut[] = "reflection_pad1d_backward.grad_input";
constexpr char kReflPad2d[] = "reflection_pad2d";
constexpr char kReflPad2dOut[] = "reflection_pad2d.out";
constexpr char kReflPad2dBack[] = "reflection_pad2d_backward";
constexpr char kReflPad2dBackOut[] = "reflection_pad2d_backward.grad_input";
constexpr char kReflPad3d[] = "reflection_pad3d";
constexpr char kReflPad3dOut[] = "reflection_pad3d.out";
constexpr char kReflPad3dBack[] = "reflection_pad3d_backward";
constexpr char kReflPad3dBackOut[] = "reflection_pad3d_backward.grad_input";
constexpr char kReplPad1d[] = "replication_pad1d";
constexpr char kReplPad1dOut[] = "replication_pad1d.out";
constexpr char kReplPad1dBack[] = "replication_pad1d_backward";
constexpr char kReplPad1dBackOut[] = "replication_pad1d_backward.grad_input";
constexpr char kReplPad2d[] = "replication_pad2d";
constexpr char kReplPad2dOut[] = "replication_pad2d.out";
constexpr char kReplPad2dBack[] = "replication_pad2d_backward";
constexpr char kReplPad2dBackOut[] = "replication_pad2d_backward.grad_input";
constexpr char kReplPad3d[] = "replication_pad3d";
constexpr char kReplPad3dOut[] = "replication_pad3d.out";
constexpr char kReplPad3dBack[] = "replication_pad3d_backward";
constexpr char kReplPad3dBackOut[] = "replication_pad3d_backward.grad_input";

using ReflPad1d = PadStructured<at::meta::structured_reflection_pad1d, true, false, kReflPad1d, kReflPad1dOut>;
using ReflPad3d = PadStructured<at::meta::structured_reflection_pad3d, true, true, kReflPad3d, kReflPad3dOut>;
using ReplPad1d = PadStructured<at::meta::structured_replication_pad1d, false, false, kReplPad1d, kReplPad1dOut>;
using ReplPad2d = PadStructured<at::meta::structured_replication_pad2d, false, true, kReplPad2d, kReplPad2dOut>;
using ReplPad3d = PadStructured<at::meta::structured_replication_pad3d, false, true, kReplPad3d, kReplPad3dOut>;
using ReflPad1dBack = PadBackStructured<at::meta::structured_reflection_pad1d_backward, true, false, kReflPad1dBack,
                                        kReflPad1dBackOut>;
using ReflPad3dBack = PadBackStructured<at::meta::structured_reflection_pad3d_backward, true, true, kReflPad3dBack,
                                        kReflPad3dBackOut>;
using ReplPad1dBack = PadBackStructured<at::meta::structured_replication_pad1d_backward, false, false,
                                        kReplPad1dBack, kReplPad1dBackOut>;

// reflection_pad2d (no meta): CPU's checks, then its output: the input's
// suggested memory format for a batch, contiguous for one image (a caller's
// out= tensor resized so, as CPU's resize_).
bool reflection_pad2d_native(const at::Tensor& self, at::IntArrayRef padding, at::Tensor& out, bool is_out) {
  if (!pad_dtype(self.scalar_type())) return false;
  same_device(kReflPad2d, {{"self", &self}, {"out", is_out ? &out : nullptr}});
  const at::DimVector size = reflection_pad2d_size(self, padding);
  const std::optional<c10::MemoryFormat> fmt =
      self.dim() == 3 ? std::nullopt : std::optional<c10::MemoryFormat>(self.suggest_memory_format());
  if (is_out) {
    out.resize_(size, fmt);
    check_pad_written(out, self.scalar_type());
  } else {
    out = create_out(size, {}, self.options().memory_format(fmt));
  }
  return out.numel() == 0 || run_pad(out, self, padding, true, false);
}

at::Tensor reflection_pad2d(const at::Tensor& self, c10::SymIntArrayRef padding) {
  at::Tensor out;
  if (is_foo(self) && named([&] { return reflection_pad2d_native(self, C10_AS_INTARRAYREF_SLOW(padding), out, false); }))
    return out;
  return Slow<kReflPad2d, at::Tensor(const at::Tensor&, c10::SymIntArrayRef)>::call(self, padding);
}

at::Tensor& reflection_pad2d_out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {
  if (is_foo(self) && named([&] { return reflection_pad2d_native(self, C10_AS_INTARRAYREF_SLOW(padding), out, true); }))
    return out;
  return Slow<kReflPad2dOut, at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, at::Tensor&)>::call(self, padding,
                                                                                                     out);
}

// The backward with no meta (reflection_pad2d's, replication_pad2d/3d's):
// grad_input in the input's suggested memory format (a caller's tensor
// resized so), then CPU's checks.
template <bool Reflect, int64_t Dim>
bool pad_backward_native(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding,
                         at::Tensor& gi, bool is_out) {
  // (CPU's kernels read 2 * Dim pads; a shorter list is the Python kernel's.)
  if (!pad_dtype(grad_output.scalar_type()) || static_cast<int64_t>(padding.size()) != 2 * Dim) return false;
  same_device(Reflect ? kReflPad2dBack : Dim == 2 ? kReplPad2dBack : kReplPad3dBack,
              {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", is_out ? &gi : nullptr}});
  const auto fmt = self.suggest_memory_format();
  if (is_out) {
    gi.resize_as_(self, fmt);
  } else {
    gi = create_out(self.sizes(), {}, self.options().memory_format(fmt));
  }
  pad_backward_checks<Reflect>(grad_output, self, padding, Dim);
  return run_pad_backward(gi, grad_output, padding, Reflect);
}

template <bool Reflect, int64_t Dim, const char* F, const char* O>
struct PadBack {
  static at::Tensor functional(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding) {
    at::Tensor gi;
    if (is_foo(grad_output) && named([&] {
          return pad_backward_native<Reflect, Dim>(grad_output, self, C10_AS_INTARRAYREF_SLOW(padding), gi, false);
        }))
      return gi;
    return Slow<F, at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef)>::call(grad_output, self,
                                                                                              padding);
  }
  static at::Tensor& out(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding,
                         at::Tensor& grad_input) {
    if (is_foo(grad_output) && named([&] {
          return pad_backward_native<Reflect, Dim>(grad_output, self, C10_AS_INTARRAYREF_SLOW(padding), grad_input,
                                                   true);
        }))
      return grad_input;
    return Slow<O, at::Tensor&(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef, at::Tensor&)>::call(
        grad_output, self, padding, grad_input);
  }
};
using ReflPad2dBack = PadBack<true, 2, kReflPad2dBack, kReflPad2dBackOut>;
using ReplPad2dBack = PadBack<false, 2, kReplPad2dBack, kReplPad2dBackOut>;
using ReplPad3dBack = PadBack<false, 3, kReplPad3dBack, kReplPad3dBackOut>;

#undef FOO_META_OP

// topk: ATen's structured meta (k and dim checks, both outputs sized and
// typed), then Rust's selection in CPU's order (the kernel _C.topk runs).
// A 0-d input's one element is its top 1 and its top 0 (CPU's rule). Bool
// and complex inputs and a symbolic k keep the Python kernel.
constexpr char kTopk[] = "topk";
constexpr char kTopkValues[] = "topk.values";
template <Mode M>
bool topk_native(Holder<at::meta::structured_topk, M, 2>& h, const at::Tensor& self, int64_t k, int64_t dim,
                 bool largest, bool sorted) {
  same_device("wrapper_PrivateUse1_topk", {{"self", &self}, {"values", h.out_arg(0)}, {"indices", h.out_arg(1)}});
  h.meta(self, k, dim, largest, sorted);
  if (self.scalar_type() == c10::ScalarType::Bool || self.is_complex()) return false;
  FooView vv, vi, vx;
  if (!view_of(h.result(0), &vv) || !view_of(h.result(1), &vi) || !view_of(self, &vx)) return false;
  const int64_t d = self.dim() == 0 ? 0 : c10::maybe_wrap_dim(dim, self.dim());
  FooStatus st{};
  if (!done(foo_rs_topk(&vv, &vi, &vx, d, self.dim() == 0 ? 1 : k, largest ? 1 : 0, sorted ? 1 : 0, &st), st))
    return false;
  h.finish();
  return true;
}

Tensor2 topk(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest, bool sorted) {
  Tensor2 result;
  if (is_foo(self) && !k.is_symbolic() && named([&] {
        Holder<at::meta::structured_topk, Mode::Functional, 2> h;
        if (!topk_native(h, self, k.as_int_unchecked(), dim, largest, sorted)) return false;
        result = Tensor2(std::move(h.out_[0]), std::move(h.out_[1]));
        return true;
      }))
    return result;
  return Slow<kTopk, Tensor2(const at::Tensor&, c10::SymInt, int64_t, bool, bool)>::call(self, std::move(k), dim,
                                                                                           largest, sorted);
}

Tensor2Ref topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest, bool sorted,
                       at::Tensor& values, at::Tensor& indices) {
  if (is_foo(self) && !k.is_symbolic() && named([&] {
        Holder<at::meta::structured_topk, Mode::Out, 2> h(values, indices);
        return topk_native(h, self, k.as_int_unchecked(), dim, largest, sorted);
      }))
    return Tensor2Ref(values, indices);
  return Slow<kTopkValues, Tensor2Ref(const at::Tensor&, c10::SymInt, int64_t, bool, bool, at::Tensor&,
                                      at::Tensor&)>::call(self, std::move(k), dim, largest, sorted, values, indices);
}

// masked_fill_(mask, value tensor) (masked_fill.Tensor is ATen's composite
// over it) as ATen's masked_fill__cpu: the value must be 0-d (its check and
// message), its number is read, and the fill is the number form's
// (masked_fill_scalar_ above, with its own slow path: registered first, as
// its table entry `needs`). A complex value or one on another device type
// keeps this overload's Python kernel.
constexpr char kMaskedFillT[] = "masked_fill_.Tensor";
at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  const bool number = named([&] {
    TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.dim(), " dimension(s).");
    return !value.is_complex() && (is_foo(value) || value.device().is_cpu());
  });
  if (number) return masked_fill_scalar_(self, mask, value.item());
  return Slow<kMaskedFillT, at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&)>::call(self, mask, value);
}

// Random fills from the device's default generator: ATen's templates
// (DistributionTemplates.h: the argument checks and messages, their order
// around the zero-size return, random_'s ranges) with kernels that hand the
// tensor to Rust's fill (the Philox stream and element order the Python
// kernels draw with, so a seed gives the values it gave before); a dtype
// CPU's kernel refuses raises CPU's error. An explicit generator and complex
// tensors keep the Python kernel, as would a dtype Rust's fill refused
// (before drawing anything; the kernel notes it in t_rng_slow).
struct FooRng {};  // the templates' RNG parameter: the kernels below draw in Rust
thread_local bool t_rng_slow = false;

void rng_fill(const at::TensorBase& t, uint8_t kind, double a, double b, int64_t from, uint64_t range) {
  const at::Tensor self(t);
  FooView v;
  FooStatus st{};
  const int64_t dev = self.device().index() < 0 ? 0 : self.device().index();
  if (!view_of(self, &v) || !done(foo_rs_random(&v, kind, a, b, from, range, dev, &st), st)) t_rng_slow = true;
}

template <typename RNG>
struct NormalKernel {
  void operator()(const at::TensorBase& self, double mean, double std, std::optional<at::Generator>) {
    at::assert_no_internal_overlap(self);  // CPU's iterator over a non-contiguous self checks it
    // CPU's kernel takes the floating dtypes (its error for the rest).
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "normal_kernel_cpu", [] {});
    rng_fill(self, 0, mean, std, 0, 0);
  }
};
template <typename RNG>
struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to, std::optional<at::Generator>) {
    rng_fill(iter.tensor_base(0), 1, from, to, 0, 0);
  }
};
template <typename RNG>
struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, std::optional<at::Generator>) {
    rng_fill(iter.tensor_base(0), 2, 0.0, 0.0, base, range);
  }
  // Every int64: CPU's kernel takes int64, double, float and bfloat16 (its
  // errors for the rest).
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator>) {
    AT_DISPATCH_ALL_TYPES_AND(at::kBFloat16, iter.dtype(), "random_full_64_bits_range_kernel_cpu", [&] {
      if constexpr (std::is_same_v<scalar_t, int64_t> || std::is_same_v<scalar_t, double> ||
                    std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, at::BFloat16>) {
        rng_fill(iter.tensor_base(0), 2, 0.0, 0.0, std::numeric_limits<int64_t>::min(), 0);
      } else {
        TORCH_CHECK(false, "random_full_64_bits_range_kernel_cpu handles only int64, double, float and bfloat16");
      }
    });
  }
};
// random_(): CPU's default ranges, [0, 2^digits] for floating dtypes, [0,
// max] for integers, {0, 1} for bool.
template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator>) {
    uint64_t range = 0;
    AT_DISPATCH_V2(iter.dtype(), "random_kernel_cpu", AT_WRAP([&] {
      if constexpr (std::is_same_v<scalar_t, bool>) {
        range = 2;
      } else if constexpr (std::is_integral_v<scalar_t>) {
        range = static_cast<uint64_t>(std::numeric_limits<scalar_t>::max()) + 1;
      } else {
        range = (uint64_t{1} << std::numeric_limits<scalar_t>::digits) + 1;
      }
    }), AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16);
    rng_fill(iter.tensor_base(0), 2, 0.0, 0.0, 0, range);
  }
};

// Runs `f` (an ATen template with the kernels above) natively when it can;
// false: take the slow path (nothing was drawn).
template <class F>
bool rng_native(const at::Tensor& self, const std::optional<at::Generator>& gen, F&& f) {
  if (!is_foo(self) || gen.has_value() || self.is_complex()) return false;
  return named([&] {
    t_rng_slow = false;
    f();
    return !t_rng_slow;
  });
}

using OptGen = std::optional<at::Generator>;
namespace tpl = at::native::templates;
constexpr char kNormal[] = "normal_";
constexpr char kUniform[] = "uniform_";
constexpr char kRandom[] = "random_";
constexpr char kRandomFrom[] = "random_.from";
constexpr char kRandomTo[] = "random_.to";

at::Tensor& normal_(at::Tensor& self, double mean, double std, OptGen gen) {
  if (rng_native(self, gen, [&] { tpl::normal_impl_<NormalKernel, FooRng>(self, mean, std, gen); })) return self;
  return Slow<kNormal, at::Tensor&(at::Tensor&, double, double, OptGen)>::call(self, mean, std, std::move(gen));
}
at::Tensor& uniform_(at::Tensor& self, double from, double to, OptGen gen) {
  if (rng_native(self, gen, [&] { tpl::uniform_impl_<UniformKernel, FooRng>(self, from, to, gen); })) return self;
  return Slow<kUniform, at::Tensor&(at::Tensor&, double, double, OptGen)>::call(self, from, to, std::move(gen));
}
at::Tensor& random_(at::Tensor& self, OptGen gen) {
  if (rng_native(self, gen, [&] { tpl::random_impl<RandomKernel, FooRng>(self, gen); })) return self;
  return Slow<kRandom, at::Tensor&(at::Tensor&, OptGen)>::call(self, std::move(gen));
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, OptGen gen) {
  if (rng_native(self, gen, [&] { tpl::random_from_to_impl<RandomFromToKernel, FooRng>(self, from, to, gen); }))
    return self;
  return Slow<kRandomFrom, at::Tensor&(at::Tensor&, int64_t, std::optional<int64_t>, OptGen)>::call(self, from, to,
                                                                                                  std::move(gen));
}
at::Tensor& random_to(at::Tensor& self, int64_t to, OptGen gen) {
  if (rng_native(self, gen, [&] { tpl::random_from_to_impl<RandomFromToKernel, FooRng>(self, 0, to, gen); }))
    return self;
  return Slow<kRandomTo, at::Tensor&(at::Tensor&, int64_t, OptGen)>::call(self, to, std::move(gen));
}

// ---- Scaled dot-product attention ---------------------------------------------
//
// ATen's scaled_dot_product_attention asks `_fused_sdp_choice_stub` (a
// DispatchStub keyed on the device type, registered for PrivateUse1 at the
// end of this file) which backend runs; `aten::_fused_sdp_choice` on foo
// answers the same (sdp_choice below: the rule lives here, once). On
// OVERRIDEABLE, ATen calls `_scaled_dot_product_fused_attention_overrideable`,
// whose foo kernel below allocates the outputs and runs the fused Rust kernel
// (rust/src/kernels/attention.rs). The Python kernels
// (foo_rs/_ops/attention.py) are the slow path: calls the Rust kernel does not
// take directly, whose errors they raise naming foo.

constexpr char kSdpChoice[] = "_fused_sdp_choice";
constexpr char kSdpa[] = "_scaled_dot_product_fused_attention_overrideable";
constexpr char kSdpaBack[] = "_scaled_dot_product_fused_attention_overrideable_backward";

bool sdpa_float(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::Double || t == c10::ScalarType::Half ||
         t == c10::ScalarType::BFloat16;
}

// Whether a mask/bias of `bias`'s shape broadcasts to `full` (trailing dims
// 1 or equal, no more dims than `full`). Sizes may be symbolic (the choice
// runs on fake tensors when torch.compile traces).
template <class Sizes, class Full>
bool broadcasts_to(Sizes bias, const Full& full) {
  if (bias.size() > full.size()) return false;
  for (size_t i = 1; i <= bias.size(); ++i) {
    const auto& m = bias[bias.size() - i];
    if (m != 1 && m != full[full.size() - i]) return false;
  }
  return true;
}

// Whether foo's fused kernel computes this SDPA call: query, key and value
// on foo, 3-d or 4-d, one float dtype, matching batch and head dims
// (grouped-query heads with enable_gqa), dropout in [0, 1), and a bool or
// query-dtype mask on the query's device broadcasting to the weights (not
// with is_causal). Anything else goes to the math composite, which raises
// CPU's error for bad input.
bool sdp_fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal, bool enable_gqa) {
  for (const at::Tensor* t : {&q, &k, &v})
    if (!is_foo(*t) || t->is_nested()) return false;
  const int64_t nd = q.dim();
  if ((nd != 3 && nd != 4) || k.dim() != nd || v.dim() != nd) return false;
  if (!sdpa_float(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    return false;
  if (nd == 4 && (k.sym_size(0) != q.sym_size(0) || v.sym_size(0) != q.sym_size(0))) return false;
  if (k.sym_size(-1) != q.sym_size(-1) || k.sym_size(-2) != v.sym_size(-2)) return false;
  const c10::SymInt hq = q.sym_size(-3), hk = k.sym_size(-3);
  if (v.sym_size(-3) != hk || hk == 0) return false;
  if (hq != hk && !(enable_gqa && hq % hk == 0)) return false;
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) return false;
  if (mask.has_value() && mask->defined()) {
    const at::Tensor& m = *mask;
    if (is_causal || m.device() != q.device()) return false;
    if (m.scalar_type() != c10::ScalarType::Bool && m.scalar_type() != q.scalar_type()) return false;
    c10::SmallVector<c10::SymInt, 4> full(q.sym_sizes().begin(), q.sym_sizes().end() - 1);
    full.push_back(k.sym_size(-2));
    if (!broadcasts_to(m.sym_sizes(), full)) return false;
  }
  return true;
}

int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> /*scale*/, bool enable_gqa) {
  const auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() &&
      sdp_fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? at::SDPBackend::math : at::SDPBackend::error);
}

// A 3-d or 4-d tensor as a 4-d view (a leading 1 for 3-d), or `bias`
// broadcast to `full` (stride 0 along broadcast dims).
struct View4 {
  std::array<int64_t, 4> sizes{}, strides{};
  FooView v{};
  const FooView* p = nullptr;  // null for an undefined tensor

  bool of(const at::Tensor& t) {
    p = nullptr;
    if (!t.defined()) return true;
    const int64_t nd = t.dim();
    if ((nd != 3 && nd != 4) || !view_of(t, &v)) return false;
    const int64_t lead = 4 - nd;
    sizes[0] = 1;
    strides[0] = 0;
    for (int64_t i = 0; i < nd; ++i) {
      sizes[lead + i] = t.size(i);
      strides[lead + i] = t.stride(i);
    }
    if (lead == 1) strides[0] = sizes[1] * strides[1];
    return set();
  }
  bool broadcast(const at::Tensor& t, at::IntArrayRef full) {
    p = nullptr;
    if (!t.defined()) return true;
    if (!broadcasts_to(t.sizes(), full) || !view_of(t, &v)) return false;
    const int64_t lead = 4 - t.dim();
    for (int64_t i = 0; i < 4; ++i) {
      sizes[i] = full[i];
      strides[i] = (i < lead || t.size(i - lead) != full[i]) ? 0 : t.stride(i - lead);
    }
    return set();
  }

 private:
  bool set() {
    v.ndim = 4;
    v.sizes = sizes.data();
    v.strides = strides.data();
    p = &v;
    return true;
  }
};

// A tensor like `t`, as torch.empty_like gives it (its strides when dense).
at::Tensor empty_like_foo(const at::Tensor& t) {
  if (t.is_non_overlapping_and_dense()) return create_out(t.sizes(), t.strides(), t.options());
  return at::empty_like(t);
}

// The attention output of `shape` in the query's layout (as ATen's flash
// meta functions make it).
at::Tensor like_query(const at::Tensor& query, at::IntArrayRef shape) {
  if (shape == query.sizes()) {
    if (query.is_non_overlapping_and_dense()) return create_out(shape, query.strides(), query.options());
    return at::empty_like(query.transpose(1, 2)).transpose(1, 2);
  }
  // Dims ordered by the query's strides, largest first (ties keep order).
  const int64_t nd = query.dim();
  c10::SmallVector<int64_t, 4> order(nd);
  for (int64_t i = 0; i < nd; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  c10::SmallVector<int64_t, 4> strides(nd);
  int64_t step = 1;
  for (int64_t j = nd - 1; j >= 0; --j) {
    strides[order[j]] = step;
    step *= std::max<int64_t>(shape[order[j]], 1);
  }
  return create_out(shape, strides, query.options());
}

// Same foo device for every defined tensor.
bool one_foo_device(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!is_foo(*t)) return false;
    if (first == nullptr) first = t;
    if (t->device() != first->device()) return false;
  }
  return true;
}

// Query, key, value (and out, grad_out) of one float dtype and rank 3 or 4,
// a bool or query-dtype bias on the same foo device: what the Rust kernel
// takes directly. Anything else is the Python kernel's (it raises foo's errors).
bool sdpa_direct(const at::Tensor& q, const at::Tensor& bias, std::initializer_list<const at::Tensor*> same) {
  const auto dt = q.scalar_type();
  if (!sdpa_float(dt) || (q.dim() != 3 && q.dim() != 4)) return false;
  for (const at::Tensor* t : same)
    if (t->scalar_type() != dt || t->dim() != q.dim()) return false;
  return !bias.defined() || bias.scalar_type() == c10::ScalarType::Bool || bias.scalar_type() == dt;
}

double sdpa_scale(std::optional<double> scale, int64_t d) {
  if (scale.has_value()) return *scale;
  return d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : INFINITY;
}

int64_t sdpa_device(const at::Tensor& t) { return t.device().index() < 0 ? 0 : t.device().index(); }

// A 0-d CPU int64 tensor holding `v`'s bits (the Philox seed and offset, as
// the op's schema returns them).
at::Tensor philox_tensor(uint64_t v) {
  at::Tensor t = at::detail::empty_cpu({}, c10::ScalarType::Long, std::nullopt, std::nullopt, std::nullopt,
                                       std::nullopt);
  *t.data_ptr<int64_t>() = static_cast<int64_t>(v);
  return t;
}

// The bits of a Philox seed/offset tensor (0 if absent); false if it is not
// a one-element CPU int64 tensor.
bool philox_value(const at::Tensor& t, uint64_t* v) {
  *v = 0;
  if (!t.defined() || t.numel() == 0) return true;
  if (t.device().type() != c10::DeviceType::CPU || t.scalar_type() != c10::ScalarType::Long || t.numel() != 1)
    return false;
  *v = static_cast<uint64_t>(*t.data_ptr<int64_t>());
  return true;
}

void zero_fill(const at::Tensor& t) {
  if (t.numel() > 0) std::memset(t.data_ptr(), 0, t.numel() * t.element_size());
}

using SdpaOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
                           at::Tensor, at::Tensor>;
using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

SdpaOut sdpa_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                     bool return_debug_mask, std::optional<double> scale) {
  const at::Tensor& bias = value_or_undefined(attn_bias);
  SdpaOut result;
  // The debug mask of a dropout call is drawn by the Python kernel.
  if (!(return_debug_mask && dropout_p > 0.0) && one_foo_device({&query, &key, &value, &bias}) &&
      sdpa_direct(query, bias, {&key, &value}) && named([&] {
        View4 q4, k4, v4, b4;
        if (!q4.of(query) || !k4.of(key) || !v4.of(value)) return false;
        const int64_t b = q4.sizes[0], hq = q4.sizes[1], l = q4.sizes[2], d = q4.sizes[3];
        const int64_t s = k4.sizes[2], dv = v4.sizes[3];
        const std::array<int64_t, 4> full{b, hq, l, s};
        if (!b4.broadcast(bias, full)) return false;
        c10::SmallVector<int64_t, 4> oshape(query.sizes().begin(), query.sizes().end());
        oshape.back() = dv;
        at::Tensor out = like_query(query, oshape);
        at::Tensor lse = create_out({b, hq, l}, {}, query.options().dtype(c10::ScalarType::Float));
        View4 o4;
        FooView vl;
        if (!o4.of(out) || !view_of(lse, &vl)) return false;
        uint64_t philox[2] = {0, 0};
        FooStatus st{};
        if (!done(foo_rs_sdpa_forward(o4.p, &vl, q4.p, k4.p, v4.p, b4.p, is_causal ? 1 : 0, sdpa_scale(scale, d),
                                      dropout_p, sdpa_device(query), philox, &st),
                  st))
          return false;
        at::Tensor debug = create_out({0}, {}, query.options());
        result = SdpaOut(std::move(out), std::move(lse), at::Tensor(), at::Tensor(), c10::SymInt(l), c10::SymInt(s),
                         philox_tensor(philox[0]), philox_tensor(philox[1]), std::move(debug));
        return true;
      }))
    return result;
  return Slow<kSdpa, SdpaOut(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const std::optional<at::Tensor>&, double, bool, bool, std::optional<double>)>::
      call(query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, scale);
}

Tensor4 sdpa_backward(const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
                      const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
                      const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
                      const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
                      bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
                      std::optional<double> scale) {
  Tensor4 result;
  uint64_t seed = 0, offset = 0;
  if (one_foo_device({&grad_out, &query, &key, &value, &attn_bias, &out, &logsumexp}) &&
      sdpa_direct(query, attn_bias, {&key, &value, &grad_out, &out}) &&
      logsumexp.scalar_type() == c10::ScalarType::Float && philox_value(philox_seed, &seed) &&
      philox_value(philox_offset, &offset) && named([&] {
        View4 q4, k4, v4, b4, g4, o4;
        if (!q4.of(query) || !k4.of(key) || !v4.of(value) || !g4.of(grad_out) || !o4.of(out)) return false;
        const int64_t b = q4.sizes[0], hq = q4.sizes[1], l = q4.sizes[2], d = q4.sizes[3];
        const int64_t hk = k4.sizes[1], s = k4.sizes[2];
        const std::array<int64_t, 4> full{b, hq, l, s};
        if (!b4.broadcast(attn_bias, full)) return false;
        at::Tensor gq, gk, gv, gbias;
        if (grad_input_mask[0]) gq = empty_like_foo(query);
        if (grad_input_mask[1]) gk = empty_like_foo(key);
        if (grad_input_mask[2]) gv = empty_like_foo(value);
        if (grad_input_mask[3] && attn_bias.defined()) {
          // Zeros: causal tiles the kernel skips have no gradient.
          gbias = create_out(full, {}, attn_bias.options());
          zero_fill(gbias);
        }
        const auto acc =
            query.scalar_type() == c10::ScalarType::Double ? c10::ScalarType::Double : c10::ScalarType::Float;
        const size_t n = foo_rs_sdpa_backward_work(b, hq, hk, l, s, d);
        at::Tensor work = create_out({static_cast<int64_t>(n)}, {}, query.options().dtype(acc));
        zero_fill(work);
        const at::Tensor lse = logsumexp.contiguous();
        View4 gq4, gk4, gv4, gb4;
        FooView vl, vw;
        if (!gq4.of(gq) || !gk4.of(gk) || !gv4.of(gv) || !gb4.of(gbias) || !view_of(lse, &vl) || !view_of(work, &vw))
          return false;
        FooStatus st{};
        if (!done(foo_rs_sdpa_backward(gq4.p, gk4.p, gv4.p, gb4.p, g4.p, q4.p, k4.p, v4.p, b4.p, o4.p, &vl, &vw,
                                       is_causal ? 1 : 0, sdpa_scale(scale, d), dropout_p, seed, offset, &st),
                  st))
          return false;
        if (gbias.defined() && gbias.sizes() != attn_bias.sizes()) gbias = gbias.sum_to_size(attn_bias.sizes());
        result = Tensor4(std::move(gq), std::move(gk), std::move(gv), std::move(gbias));
        return true;
      }))
    return result;
  return Slow<kSdpaBack,
              Tensor4(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      std::array<bool, 4>, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      c10::SymInt, c10::SymInt, double, bool, const at::Tensor&, const at::Tensor&,
                      std::optional<double>)>::call(grad_out, query, key, value, attn_bias, grad_input_mask, out,
                                                    logsumexp, cum_seq_q, cum_seq_k, std::move(max_q),
                                                    std::move(max_k), dropout_p, is_causal, philox_seed,
                                                    philox_offset, scale);
}

// ---- Convolution ------------------------------------------------------------
//
// ATen's convolution checks the shapes (check_shape_forward), resolves
// padding="same" and sends a foo convolution to convolution_overrideable /
// convolution_backward_overrideable. The kernels below take what the Rust
// 2-d kernels (rust/src/kernels/conv.rs) compute directly: 1-d and 2-d,
// float32/float64, one device, well-formed parameters, non-empty operands,
// transposed or not. Everything else (3-d, integers, half types, which the
// Python kernel upcasts, bad arguments, whose errors it raises naming foo)
// goes to the Python kernel (foo_rs/_ops/conv.py).

constexpr char kConv[] = "convolution_overrideable";
constexpr char kConvBack[] = "convolution_backward_overrideable";

// The values of a SymInt list; false if one is symbolic.
bool concrete(c10::SymIntArrayRef v, c10::SmallVector<int64_t, 4>* out) {
  out->clear();
  for (const auto& s : v) {
    const auto i = s.maybe_as_int();
    if (!i.has_value()) return false;
    out->push_back(*i);
  }
  return true;
}

// A 4-d tensor laid out channels-last (and not also contiguous): a
// convolution's outputs are then channels-last, as on the CPU.
bool channels_last(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// `t` in CPU's channels-last layout (a fresh foo tensor).
at::Tensor to_channels_last(const at::Tensor& t) {
  at::Tensor r = create_out(t.sizes(), {}, t.options().memory_format(at::MemoryFormat::ChannelsLast));
  r.copy_(t);
  return r;
}

// A convolution the Rust kernels compute: nd spatial dims (1 or 2), the
// 2-d stride, padding and dilation as (h, w) pairs (a 1-d convolution is
// a 2-d one of height 1), groups, the spatial output size.
struct ConvPlan {
  int64_t nd = 0;
  std::array<int64_t, 6> win{};
  int64_t groups = 1;
  int64_t out_ch = 0;
  c10::SmallVector<int64_t, 4> out_size;
  bool cl = false;
};

bool conv_plan(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, c10::SymIntArrayRef stride,
               c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
               c10::SymIntArrayRef output_padding, const c10::SymInt& groups, ConvPlan* c) {
  if (!is_foo(input) || !is_foo(weight) || input.device() != weight.device()) return false;
  const auto t = input.scalar_type();
  if ((t != c10::ScalarType::Float && t != c10::ScalarType::Double) || weight.scalar_type() != t) return false;
  if (bias.defined() && (bias.device() != input.device() || bias.scalar_type() != t || bias.dim() != 1)) return false;
  const int64_t dim = input.dim();
  if ((dim != 3 && dim != 4) || weight.dim() != dim || input.numel() == 0 || weight.numel() == 0) return false;
  const size_t nd = static_cast<size_t>(dim - 2);
  c10::SmallVector<int64_t, 4> s, p, d, op;
  const auto g = groups.maybe_as_int();
  if (!g.has_value() || *g <= 0 || !concrete(stride, &s) || !concrete(padding, &p) || !concrete(dilation, &d) ||
      !concrete(output_padding, &op))
    return false;
  auto expand = [nd](c10::SmallVector<int64_t, 4>& v) {
    if (v.size() == 1 && nd == 2) v.push_back(v[0]);
    return v.size() == nd;
  };
  if (!transposed) op.assign(nd, 0);
  if (!expand(s) || !expand(p) || !expand(d) || !expand(op)) return false;
  for (size_t k = 0; k < nd; ++k)
    if (s[k] <= 0 || d[k] <= 0 || p[k] < 0 || op[k] < 0 || (op[k] >= s[k] && op[k] >= d[k])) return false;
  const int64_t ch = input.size(1);
  if (transposed) {
    if (weight.size(0) != ch || ch % *g != 0) return false;
    c->out_ch = weight.size(1) * *g;
  } else {
    if (weight.size(0) % *g != 0 || weight.size(1) * *g != ch) return false;
    c->out_ch = weight.size(0);
  }
  if (bias.defined() && bias.size(0) != c->out_ch) return false;
  c->out_size.clear();
  for (size_t k = 0; k < nd; ++k) {
    const int64_t in = input.size(2 + k), span = d[k] * (weight.size(2 + k) - 1);
    int64_t o;
    if (transposed) {
      o = (in - 1) * s[k] - 2 * p[k] + span + op[k] + 1;
    } else {
      const int64_t room = in + 2 * p[k] - span - 1;
      o = room < 0 ? 0 : room / s[k] + 1;
    }
    if (o <= 0) return false;
    c->out_size.push_back(o);
  }
  c->nd = static_cast<int64_t>(nd);
  c->win = nd == 1 ? std::array<int64_t, 6>{1, s[0], 0, p[0], 1, d[0]}
                   : std::array<int64_t, 6>{s[0], s[1], p[0], p[1], d[0], d[1]};
  c->groups = *g;
  c->cl = channels_last(input) || channels_last(weight);
  return true;
}

// A 1-d convolution's (N, C, L) tensor as (N, C, 1, L), contiguous; 2-d ones contiguous.
at::Tensor as2d(const at::Tensor& t, int64_t nd) { return (nd == 1 ? t.unsqueeze(2) : t).contiguous(); }

// A result of the 2-d kernels in the caller's rank and layout.
at::Tensor from2d(const at::Tensor& t, const ConvPlan& c) {
  if (!t.defined()) return t;
  if (c.nd == 1) return t.squeeze(2);
  return c.cl ? to_channels_last(t) : t;
}

bool view_or_null(const at::Tensor& t, FooView* v, const FooView** p) {
  *p = nullptr;
  if (!t.defined()) return true;
  if (!view_of(t, v)) return false;
  *p = v;
  return true;
}

// out (4-d, fresh) = conv2d(x, w) + bias through Rust: true if it ran.
bool conv2d_forward(const at::Tensor& out, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                    const ConvPlan& c) {
  FooView vo, vx, vw, vb;
  const FooView* pb;
  if (!view_of(out, &vo) || !view_of(x, &vx) || !view_of(w, &vw) || !view_or_null(bias, &vb, &pb)) return false;
  FooStatus st{};
  return done(foo_rs_conv2d_forward(&vo, &vx, &vw, pb, c.win.data(), c.groups, &st), st);
}

// The gradients of grad = conv2d(x, w) the defined outputs ask for (x may be
// undefined when gw is); in_size: the input's 4 sizes.
bool conv2d_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w, const at::Tensor& gi,
                     const at::Tensor& gw, const at::Tensor& gb, at::IntArrayRef in_size, const ConvPlan& c) {
  FooView vg, vx, vw, vgi, vgw, vgb;
  const FooView *px, *pgi, *pgw, *pgb;
  if (!view_of(grad, &vg) || !view_or_null(x, &vx, &px) || !view_of(w, &vw) || !view_or_null(gi, &vgi, &pgi) ||
      !view_or_null(gw, &vgw, &pgw) || !view_or_null(gb, &vgb, &pgb))
    return false;
  FooStatus st{};
  return done(
      foo_rs_conv2d_backward(&vg, px, &vw, pgi, pgw, pgb, in_size.data(), c.win.data(), c.groups, &st), st);
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias_opt,
                       c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                       bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  const at::Tensor& bias = value_or_undefined(bias_opt);
  ConvPlan c;
  at::Tensor result;
  if (conv_plan(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, &c) &&
      named([&] {
        c10::DeviceGuard guard(input.device());
        const at::Tensor x = as2d(input, c.nd), w = as2d(weight, c.nd);
        c10::SmallVector<int64_t, 4> shape{input.size(0), c.out_ch};
        if (c.nd == 1) shape.push_back(1);
        shape.append(c.out_size.begin(), c.out_size.end());
        at::Tensor out = create_out(shape, {}, input.options());
        if (transposed) {
          // The input gradient of the convolution of `out` with `weight`; the bias after.
          if (!conv2d_backward(x, at::Tensor(), w, out, at::Tensor(), at::Tensor(), out.sizes(), c)) return false;
          if (bias.defined()) out.add_(bias.view({1, -1, 1, 1}));
        } else if (!conv2d_forward(out, x, w, bias.defined() ? bias.contiguous() : bias, c)) {
          return false;
        }
        result = from2d(out, c);
        return true;
      }))
    return result;
  return Slow<kConv, at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef, bool,
                                c10::SymIntArrayRef, c10::SymInt)>::call(input, weight, bias_opt, stride, padding,
                                                                         dilation, transposed, output_padding,
                                                                         std::move(groups));
}

Tensor3 convolution_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                             c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                             bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
                             std::array<bool, 3> mask) {
  ConvPlan c;
  Tensor3 result;
  if (conv_plan(input, weight, at::Tensor(), stride, padding, dilation, transposed, output_padding, groups, &c) &&
      grad_output.device() == input.device() && grad_output.scalar_type() == input.scalar_type() &&
      grad_output.dim() == input.dim() && grad_output.size(0) == input.size(0) &&
      grad_output.size(1) == c.out_ch && grad_output.sizes().slice(2).equals(c.out_size) && named([&] {
        c10::DeviceGuard guard(input.device());
        const at::Tensor go = as2d(grad_output, c.nd), x = as2d(input, c.nd), w = as2d(weight, c.nd);
        at::Tensor gi, gw, gb;
        if (mask[0]) gi = create_out(x.sizes(), {}, x.options());
        if (mask[1]) gw = create_out(w.sizes(), {}, w.options());
        if (!transposed) {
          if (mask[2]) gb = create_out({c.out_ch}, {}, x.options());
          if ((mask[0] || mask[1] || mask[2]) &&
              !conv2d_backward(go, mask[1] ? x : at::Tensor(), w, gi, gw, gb, x.sizes(), c))
            return false;
        } else {
          // input -> grad_output is the input gradient of conv(grad_output, weight): gi is that
          // convolution, gw its weight gradient with the roles of input and output swapped.
          if (mask[0] && !conv2d_forward(gi, go, w, at::Tensor(), c)) return false;
          if (mask[1] && !conv2d_backward(x, go, w, at::Tensor(), gw, at::Tensor(), go.sizes(), c)) return false;
          if (mask[2]) gb = go.sum({0, 2, 3});
        }
        result = Tensor3(from2d(gi, c), from2d(gw, c), std::move(gb));
        return true;
      }))
    return result;
  return Slow<kConvBack, Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                 c10::SymIntArrayRef, c10::SymIntArrayRef, bool, c10::SymIntArrayRef, c10::SymInt,
                                 std::array<bool, 3>)>::call(grad_output, input, weight, stride, padding, dilation,
                                                             transposed, output_padding, std::move(groups), mask);
}

// ---- Batch norm -------------------------------------------------------------
//
// The forms torch 2.13-2.15 dispatch to (eager: native_batch_norm and its
// backward; export/compile: _native_batch_norm_legit(.no_stats),
// _batch_norm_with_update, batch_norm_backward), one kernel each way. The
// Rust kernels (kernels/norm.rs) take one float dtype throughout, a
// non-empty input and well-formed per-channel vectors; mixed precision, an
// empty input and bad arguments (whose errors it raises naming foo) go to
// the Python kernel (foo_rs/_ops/norm_pool.py).

constexpr char kBatchNorm[] = "native_batch_norm";
constexpr char kBatchNormLegit[] = "_native_batch_norm_legit";
constexpr char kBatchNormNoStats[] = "_native_batch_norm_legit.no_stats";
constexpr char kBatchNormUpdate[] = "_batch_norm_with_update";
constexpr char kBatchNormBack[] = "native_batch_norm_backward";
constexpr char kBatchNormBackNew[] = "batch_norm_backward";

// A (N, C, *) tensor as the 3-d (N, C, prod(*)) view the Rust kernels take,
// on its own strides; false when its trailing dims do not merge.
struct View3 {
  std::array<int64_t, 3> sizes{}, strides{};
  FooView v{};
};

bool view3_of(const at::Tensor& t, View3* o) {
  if (t.dim() < 2 || !view_of(t, &o->v)) return false;
  int64_t s = 1;
  for (int64_t k = 2; k < t.dim(); ++k) s *= t.size(k);
  o->sizes = {t.size(0), t.size(1), s};
  const auto st = at::detail::computeStride(t.sizes(), t.strides(), at::IntArrayRef(o->sizes));
  if (!st.has_value()) return false;
  std::copy(st->begin(), st->end(), o->strides.begin());
  o->v.ndim = 3;
  o->v.sizes = o->sizes.data();
  o->v.strides = o->strides.data();
  return true;
}

// The layout CPU gives batch norm's outputs: the input's suggested memory format.
at::MemoryFormat bn_format(const at::Tensor& t) {
  if (t.dim() == 4 && channels_last(t)) return at::MemoryFormat::ChannelsLast;
  if (t.dim() == 5 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast3d))
    return at::MemoryFormat::ChannelsLast3d;
  return at::MemoryFormat::Contiguous;
}

// Per-channel vectors: absent, or C elements of the input's dtype on its device.
bool bn_vectors_ok(const at::Tensor& input, std::initializer_list<const at::Tensor*> ts) {
  if (!same_float(input.scalar_type(), {&input}) || !same_float(input.scalar_type(), ts)) return false;
  for (const at::Tensor* t : ts)
    if (t->defined() && (t->device() != input.device() || t->dim() != 1 || t->numel() != input.size(1))) return false;
  return true;
}

// Batch norm's forward on the native path; false: the Python kernel's.
bool batch_norm_native(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& running_mean, const at::Tensor& running_var, bool training, double momentum,
                       double eps, Tensor3* result) {
  if (!is_foo(input) || input.dim() < 2 || input.numel() == 0 ||
      running_mean.defined() != running_var.defined() || (!training && !running_mean.defined()) ||
      !bn_vectors_ok(input, {&weight, &bias, &running_mean, &running_var}))
    return false;
  return named([&] {
    c10::DeviceGuard guard(input.device());
    View3 vx, vo;
    at::Tensor x = input;
    if (!view3_of(x, &vx)) {
      x = input.contiguous();
      if (!view3_of(x, &vx)) return false;
    }
    at::Tensor out = create_out(input.sizes(), {}, input.options().memory_format(bn_format(input)));
    const int64_t c = training ? input.size(1) : 0;
    at::Tensor mean = create_out({c}, {}, input.options()), invstd = create_out({c}, {}, input.options());
    FooView vm, vi, vw, vb, vrm, vrv;
    const FooView *pw, *pb, *prm, *prv;
    if (!view3_of(out, &vo) || !view_of(mean, &vm) || !view_of(invstd, &vi) || !view_or_null(weight, &vw, &pw) ||
        !view_or_null(bias, &vb, &pb) || !view_or_null(running_mean, &vrm, &prm) ||
        !view_or_null(running_var, &vrv, &prv))
      return false;
    FooStatus st{};
    if (!done(foo_rs_batch_norm(&vo.v, training ? &vm : nullptr, training ? &vi : nullptr, &vx.v, pw, pb, prm, prv,
                                training ? 1 : 0, momentum, eps, &st),
              st))
      return false;
    *result = Tensor3(std::move(out), std::move(mean), std::move(invstd));
    return true;
  });
}

using OptT = const std::optional<at::Tensor>&;

Tensor3 native_batch_norm(const at::Tensor& input, OptT weight, OptT bias, OptT running_mean, OptT running_var,
                          bool training, double momentum, double eps) {
  Tensor3 r;
  if (batch_norm_native(input, value_or_undefined(weight), value_or_undefined(bias),
                        value_or_undefined(running_mean), value_or_undefined(running_var), training, momentum, eps,
                        &r))
    return r;
  return Slow<kBatchNorm, Tensor3(const at::Tensor&, OptT, OptT, OptT, OptT, bool, double, double)>::call(
      input, weight, bias, running_mean, running_var, training, momentum, eps);
}

Tensor3 native_batch_norm_legit(const at::Tensor& input, OptT weight, OptT bias, at::Tensor& running_mean,
                                at::Tensor& running_var, bool training, double momentum, double eps) {
  Tensor3 r;
  if (batch_norm_native(input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var,
                        training, momentum, eps, &r))
    return r;
  return Slow<kBatchNormLegit, Tensor3(const at::Tensor&, OptT, OptT, at::Tensor&, at::Tensor&, bool, double,
                                       double)>::call(input, weight, bias, running_mean, running_var, training,
                                                      momentum, eps);
}

Tensor3 native_batch_norm_legit_no_stats(const at::Tensor& input, OptT weight, OptT bias, bool training,
                                         double momentum, double eps) {
  Tensor3 r;
  if (batch_norm_native(input, value_or_undefined(weight), value_or_undefined(bias), at::Tensor(), at::Tensor(),
                        training, momentum, eps, &r))
    return r;
  return Slow<kBatchNormNoStats, Tensor3(const at::Tensor&, OptT, OptT, bool, double, double)>::call(
      input, weight, bias, training, momentum, eps);
}

using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Tensor4 batch_norm_with_update(const at::Tensor& input, OptT weight, OptT bias, at::Tensor& running_mean,
                               at::Tensor& running_var, double momentum, double eps) {
  Tensor3 r;
  if (batch_norm_native(input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var, true,
                        momentum, eps, &r)) {
    at::Tensor reserve = create_out({0}, {}, input.options().dtype(c10::ScalarType::Byte));
    return Tensor4(std::move(std::get<0>(r)), std::move(std::get<1>(r)), std::move(std::get<2>(r)),
                   std::move(reserve));
  }
  return Slow<kBatchNormUpdate, Tensor4(const at::Tensor&, OptT, OptT, at::Tensor&, at::Tensor&, double, double)>::call(
      input, weight, bias, running_mean, running_var, momentum, eps);
}

// Batch norm's gradients on the native path; false: the Python kernel's.
bool batch_norm_backward_native(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
                                const at::Tensor& running_mean, const at::Tensor& running_var,
                                const at::Tensor& save_mean, const at::Tensor& save_invstd, bool train, double eps,
                                std::array<bool, 3> mask, Tensor3* result) {
  if (!is_foo(input) || input.dim() < 2 || input.numel() == 0 || grad_out.sizes() != input.sizes() ||
      grad_out.device() != input.device() || grad_out.scalar_type() != input.scalar_type() ||
      (train ? !(save_mean.defined() && save_invstd.defined())
             : !(running_mean.defined() && running_var.defined())) ||
      !bn_vectors_ok(input, {&weight}) ||
      !(train ? bn_vectors_ok(input, {&save_mean, &save_invstd}) : bn_vectors_ok(input, {&running_mean, &running_var})))
    return false;
  return named([&] {
    c10::DeviceGuard guard(input.device());
    View3 vx, vdy, vgi;
    at::Tensor x = input, dy = grad_out;
    if (!view3_of(x, &vx)) {
      x = input.contiguous();
      if (!view3_of(x, &vx)) return false;
    }
    if (!view3_of(dy, &vdy)) {
      dy = grad_out.contiguous();
      if (!view3_of(dy, &vdy)) return false;
    }
    const auto popts = weight.defined() ? weight.options() : input.options();
    at::Tensor gi, gw, gb;
    if (mask[0]) gi = create_out(input.sizes(), {}, input.options().memory_format(bn_format(input)));
    if (mask[1]) gw = create_out({input.size(1)}, {}, popts);
    if (mask[2]) gb = create_out({input.size(1)}, {}, popts);
    if (mask[0] || mask[1] || mask[2]) {
      FooView vgw, vgb, vw, vrm, vrv, vsm, vsi;
      const FooView *pgw, *pgb, *pw, *prm, *prv, *psm, *psi;
      if ((gi.defined() && !view3_of(gi, &vgi)) || !view_or_null(gw, &vgw, &pgw) || !view_or_null(gb, &vgb, &pgb) ||
          !view_or_null(weight, &vw, &pw) || !view_or_null(running_mean, &vrm, &prm) ||
          !view_or_null(running_var, &vrv, &prv) || !view_or_null(save_mean, &vsm, &psm) ||
          !view_or_null(save_invstd, &vsi, &psi))
        return false;
      FooStatus st{};
      // Only the statistics the mode reads (evaluation's saved ones are empty).
      if (!done(foo_rs_batch_norm_backward(gi.defined() ? &vgi.v : nullptr, pgw, pgb, &vdy.v, &vx.v, pw,
                                           train ? nullptr : prm, train ? nullptr : prv, train ? psm : nullptr,
                                           train ? psi : nullptr, train ? 1 : 0, eps, &st),
                st))
        return false;
    }
    *result = Tensor3(std::move(gi), std::move(gw), std::move(gb));
    return true;
  });
}

Tensor3 native_batch_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, OptT weight,
                                   OptT running_mean, OptT running_var, OptT save_mean, OptT save_invstd, bool train,
                                   double eps, std::array<bool, 3> mask) {
  Tensor3 r;
  if (batch_norm_backward_native(grad_out, input, value_or_undefined(weight), value_or_undefined(running_mean),
                                 value_or_undefined(running_var), value_or_undefined(save_mean),
                                 value_or_undefined(save_invstd), train, eps, mask, &r))
    return r;
  return Slow<kBatchNormBack, Tensor3(const at::Tensor&, const at::Tensor&, OptT, OptT, OptT, OptT, OptT, bool, double,
                                      std::array<bool, 3>)>::call(grad_out, input, weight, running_mean, running_var,
                                                                  save_mean, save_invstd, train, eps, mask);
}

Tensor3 batch_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
                            OptT running_mean, OptT running_var, OptT save_mean, OptT save_var, bool update,
                            double eps, std::array<bool, 3> mask, const at::Tensor& reserve) {
  Tensor3 r;
  if (batch_norm_backward_native(grad_out, input, weight, value_or_undefined(running_mean),
                                 value_or_undefined(running_var), value_or_undefined(save_mean),
                                 value_or_undefined(save_var), update, eps, mask, &r))
    return r;
  return Slow<kBatchNormBackNew, Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, OptT, OptT, OptT,
                                         OptT, bool, double, std::array<bool, 3>, const at::Tensor&)>::
      call(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps, mask, reserve);
}

// ---- Foreach ops: torch.optim's multi-tensor paths ---------------------------
//
// torch.optim steps a foo model through its foreach path by default (foo is
// a PrivateUse1 device: torch.utils._foreach_utils). ATen's kernel for a
// `_foreach_*` overload on a device without one of its own is a loop that
// calls the per-tensor op through the dispatcher for each tensor
// (ForeachOpsKernels.cpp): autograd's layer, a composite that wraps a number
// in a CPU tensor, then the op's kernel, about 6 us a tensor before any work.
// These kernels run the same loop -- ATen's argument checks
// (check_foreach_api_restrictions), then the same per-tensor op with the
// same arguments -- but call this file's per-tensor kernels directly: one
// dispatch a list, and the per-tensor op's semantics (dtypes, broadcasting,
// errors) unchanged, since the per-tensor kernel is the op's own. Lists with
// a tensor that is not a real foo tensor (a CPU tensor among them, complex)
// go to ATen's loop itself.

using T = const at::Tensor&;
using S = const c10::Scalar&;
using TL = at::TensorList;
using SL = at::ArrayRef<c10::Scalar>;

template <bool InPlace>
using FeRet = std::conditional_t<InPlace, void, std::vector<at::Tensor>>;

// The loop's precondition: every tensor of the lists is a real foo tensor
// (and so is the one tensor of a `.Tensor` overload, or a CPU number).
bool fe_foo(std::initializer_list<TL> lists) {
  for (const auto& l : lists)
    for (const auto& t : l)
      if (!t.defined() || !is_foo(t) || t.is_complex()) return false;
  return true;
}

// A per-tensor op: its functional and in-place kernels, with schema
// arguments A after self, and the overloads whose Python kernels they fall
// back to (registered first: see foo_glue_register_fast).
template <class Op, class... A>
struct Per {
  static constexpr const char* needs_f = Op::F;
  static constexpr const char* needs_i = Op::I;
  template <class... X>
  static at::Tensor f(const at::Tensor& t, const X&... x) {
    return k_functional<Op, A...>(t, x...);
  }
  template <class... X>
  static void i(const at::Tensor& t, const X&... x) {
    k_inplace<Op, A...>(const_cast<at::Tensor&>(t), x...);
  }
};
// add/sub with a number operand: their Scalar overloads (alpha 1).
template <class Op>
struct PerAlpha1 : Per<Op, T, S> {
  static at::Tensor f(const at::Tensor& t, const at::Tensor& n) { return Per<Op, T, S>::f(t, n, c10::Scalar(1)); }
  static void i(const at::Tensor& t, const at::Tensor& n) { Per<Op, T, S>::i(t, n, c10::Scalar(1)); }
};
// maximum/minimum, which have no in-place overload: in place is out=self.
template <class Op>
struct PerOutSelf : Per<Op, T> {
  static constexpr const char* needs_i = Op::O;
  static void i(const at::Tensor& t, const at::Tensor& o) {
    k_out<Op, T>(t, o, const_cast<at::Tensor&>(t));
  }
};

// An in-place foreach op bumps its tensors' version counters itself, as
// CUDA's do (autograd's generated layer does not for tensor lists; the
// per-tensor kernels called directly skip theirs): each tensor once it is
// written, as ATen's per-tensor loop does.
void fe_bump(const at::Tensor& t) { t.unsafeGetTensorImpl()->bump_version(); }

// The per-tensor calls: arg(i) gives tensor i's arguments after self.
template <class P, bool InPlace, class Arg>
FeRet<InPlace> fe_each(TL self, Arg&& arg) {
  if constexpr (InPlace) {
    for (size_t i = 0; i < self.size(); ++i) {
      std::apply([&](const auto&... x) { P::i(self[i], x...); }, arg(i));
      fe_bump(self[i]);
    }
  } else {
    std::vector<at::Tensor> r;
    r.reserve(self.size());
    for (size_t i = 0; i < self.size(); ++i)
      r.push_back(std::apply([&](const auto&... x) { return P::f(self[i], x...); }, arg(i)));
    return r;
  }
}

// A number as the per-tensor op's operand, as ATen's Scalar overloads pass
// it (one for the whole list: every call only reads it).
at::Tensor fe_number(const c10::Scalar& s) { return at::native::wrapped_scalar_tensor(s); }

// The overload forms (schema argument lists). Each takes the per-tensor op
// P, whether it is the in-place overload, and ATen's loop for the overload.
// _foreach_op(Tensor[] self)
template <class P, bool In, auto Aten>
FeRet<In> fe_unary(TL self) {
  if (!fe_foo({self})) return Aten(self);
  at::native::check_foreach_api_restrictions(self);
  return fe_each<P, In>(self, [](size_t) { return std::tuple<>(); });
}
// _foreach_op.Scalar(Tensor[] self, Scalar scalar) where the op's number is a parameter.
template <class P, bool In, auto Aten>
FeRet<In> fe_scalar(TL self, S s) {
  if (!fe_foo({self})) return Aten(self, s);
  at::native::check_foreach_api_restrictions(self);
  return fe_each<P, In>(self, [&](size_t) { return std::tie(s); });
}
// ... and where it is an operand (add, sub, mul, div).
template <class P, bool In, auto Aten>
FeRet<In> fe_scalar_number(TL self, S s) {
  if (!fe_foo({self}) || s.isSymbolic()) return Aten(self, s);
  at::native::check_foreach_api_restrictions(self);
  const at::Tensor n = fe_number(s);
  return fe_each<P, In>(self, [&](size_t) { return std::tie(n); });
}
// _foreach_op.ScalarList(Tensor[] self, Scalar[] scalars)
template <class P, bool In, auto Aten>
FeRet<In> fe_scalars(TL self, SL s) {
  if (!fe_foo({self})) return Aten(self, s);
  at::native::check_foreach_api_restrictions(self, s);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(s[i]); });
}
template <class P, bool In, auto Aten>
FeRet<In> fe_scalars_number(TL self, SL s) {
  if (!fe_foo({self}) || std::any_of(s.begin(), s.end(), [](const c10::Scalar& x) { return x.isSymbolic(); }))
    return Aten(self, s);
  at::native::check_foreach_api_restrictions(self, s);
  return fe_each<P, In>(self, [&](size_t i) { return std::make_tuple(fe_number(s[i])); });
}
// _foreach_op.List(Tensor[] self, Tensor[] other)
template <class P, bool In, auto Aten>
FeRet<In> fe_list(TL self, TL other) {
  if (!fe_foo({self, other})) return Aten(self, other);
  at::native::check_foreach_api_restrictions(self, other);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(other[i]); });
}
// _foreach_op.List(Tensor[] self, Tensor[] other, *, Scalar alpha), and
// _foreach_lerp.Scalar(Tensor[] self, Tensor[] end, Scalar weight).
template <class P, bool In, auto Aten>
FeRet<In> fe_list_scalar(TL self, TL other, S s) {
  if (!fe_foo({self, other})) return Aten(self, other, s);
  at::native::check_foreach_api_restrictions(self, other);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(other[i], s); });
}
// _foreach_lerp.ScalarList(Tensor[] self, Tensor[] end, Scalar[] weight)
template <class P, bool In, auto Aten>
FeRet<In> fe_list_scalars(TL self, TL other, SL s) {
  if (!fe_foo({self, other})) return Aten(self, other, s);
  at::native::check_foreach_api_restrictions(self, other, s);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(other[i], s[i]); });
}
// _foreach_lerp.List(Tensor[] self, Tensor[] end, Tensor[] weight)
template <class P, bool In, auto Aten>
FeRet<In> fe_lists(TL self, TL a, TL b) {
  if (!fe_foo({self, a, b})) return Aten(self, a, b);
  at::native::check_foreach_api_restrictions(self, a, b);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(a[i], b[i]); });
}
// _foreach_addcmul.Scalar(Tensor[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar value)
template <class P, bool In, auto Aten>
FeRet<In> fe_lists_scalar(TL self, TL a, TL b, S s) {
  if (!fe_foo({self, a, b})) return Aten(self, a, b, s);
  at::native::check_foreach_api_restrictions(self, a, b);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(a[i], b[i], s); });
}
// _foreach_addcmul.ScalarList(Tensor[] self, Tensor[] tensor1, Tensor[] tensor2, Scalar[] scalars)
template <class P, bool In, auto Aten>
FeRet<In> fe_lists_scalars(TL self, TL a, TL b, SL s) {
  if (!fe_foo({self, a, b})) return Aten(self, a, b, s);
  at::native::check_foreach_api_restrictions(self, a, b, s);
  return fe_each<P, In>(self, [&](size_t i) { return std::tie(a[i], b[i], s[i]); });
}
// _foreach_op.Tensor(Tensor[] self, Tensor other): one 0-dim tensor for
// every call (ATen's loop refuses anything else with its own message).
bool fe_scalar_tensor(const at::Tensor& o) {
  return o.defined() && o.dim() == 0 && (is_foo(o) || o.device().is_cpu()) && !o.is_complex();
}
template <class P, bool In, auto Aten>
FeRet<In> fe_tensor(TL self, T other) {
  if (!fe_foo({self}) || !fe_scalar_tensor(other)) return Aten(self, other);
  at::native::check_foreach_api_restrictions(self);
  return fe_each<P, In>(self, [&](size_t) { return std::tie(other); });
}
// _foreach_add.Tensor(Tensor[] self, Tensor other, *, Scalar alpha)
template <class P, bool In, auto Aten>
FeRet<In> fe_tensor_scalar(TL self, T other, S s) {
  if (!fe_foo({self}) || !fe_scalar_tensor(other)) return Aten(self, other, s);
  at::native::check_foreach_api_restrictions(self);
  return fe_each<P, In>(self, [&](size_t) { return std::tie(other, s); });
}

// _foreach_norm.Scalar(Tensor[] self, Scalar ord, ScalarType? dtype): each
// tensor's norm over all its elements (clip_grad_norm_'s first step).
std::vector<at::Tensor> foreach_norm(TL self, S ord, std::optional<c10::ScalarType> dtype);

void foreach_zero_(TL self) {
  if (!fe_foo({self})) return at::native::foreach_tensor_zero_slow_(self);
  at::native::check_foreach_api_restrictions(self);
  for (const auto& t : self) {
    foo_rs::native::zero_(const_cast<at::Tensor&>(t));
    fe_bump(t);
  }
}

// _foreach_copy_(Tensor[] self, Tensor[] src, bool non_blocking): src may
// be on the CPU (a checkpoint's state loaded into a foo optimizer).
void foreach_copy_(TL self, TL src, bool non_blocking) {
  if (!fe_foo({self}) ||
      std::any_of(src.begin(), src.end(), [](const at::Tensor& t) { return !t.defined() || t.is_complex(); }))
    return at::native::foreach_tensor_copy_list_kernel_slow_(self, src, non_blocking);
  at::native::check_foreach_api_restrictions(self, src);
  for (size_t i = 0; i < self.size(); ++i) {
    copy_(const_cast<at::Tensor&>(self[i]), src[i], non_blocking);
    fe_bump(self[i]);
  }
}

std::vector<at::Tensor> foreach_norm(TL self, S ord, std::optional<c10::ScalarType> dtype) {
  // ATen's loop checks the order's type and empty tensors itself (its
  // messages differ from linalg_vector_norm's): those calls are its.
  if (!fe_foo({self}) || !(ord.isIntegral(false) || ord.isFloatingPoint()) ||
      std::any_of(self.begin(), self.end(), [](const at::Tensor& t) { return t.numel() == 0; }))
    return at::native::foreach_tensor_norm_slow(self, ord, dtype);
  at::native::check_foreach_api_restrictions(self);
  std::vector<at::Tensor> r;
  r.reserve(self.size());
  for (const auto& t : self)
    r.push_back(m_functional<VectorNorm, T, S, at::OptionalIntArrayRef, bool, std::optional<c10::ScalarType>>(
        t, ord, at::IntArrayRef{}, false, dtype));
  return r;
}

// ---- Fused optimizers: torch.optim's fused=True -----------------------------
//
// One call into Rust with every parameter's views (rust/src/native.rs,
// foo_rs_fused_adam): all parameters are checked before any is updated, then
// their elements run together on the pool. A step whose lists are not all
// dense foo tensors of one floating dtype and size per parameter (a strided
// state, another device, lists of other lengths, an integer parameter) goes
// to the op's Python kernel, which copies strided tensors and raises CPU's
// errors.

// Dense views of the `n` tensors of `ts`, each a foo tensor on `dev` of
// `like`'s dtype and size (the parameters' when given), or false.
bool fused_views(TL ts, size_t n, const c10::Device& dev, std::vector<FooView>& out, TL like = {}) {
  if (ts.size() != n) return false;
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = ts[i];
    if (!t.defined() || t.device() != dev || !t.is_contiguous() || !c10::isFloatingType(t.scalar_type()) ||
        t.is_neg() || !view_of(t, &out[i]))
      return false;
    if (!like.empty() && (t.scalar_type() != like[i].scalar_type() || t.numel() != like[i].numel())) return false;
  }
  return true;
}

// A one-element float tensor on `dev` (a grad scale, found_inf), as a view.
bool fused_scalar(const at::Tensor& t, const c10::Device& dev, FooView* v) {
  return t.defined() && t.device() == dev && t.numel() == 1 && t.scalar_type() == c10::ScalarType::Float &&
         view_of(t, v);
}

double lr_value(double lr) { return lr; }
double lr_value(const at::Tensor& lr) { return lr.item().toDouble(); }

// The step's shared inputs: the device, the grad scale's view (null if
// none), and whether found_inf says to skip the step; false: not ours.
struct FusedStep {
  c10::Device dev{c10::DeviceType::PrivateUse1};
  FooView scale_view{};
  const FooView* scale = nullptr;
  bool skip = false;
  bool init(TL self, OptT grad_scale, OptT found_inf) {
    if (self.empty() || !self[0].defined() || !is_foo(self[0])) return false;
    dev = self[0].device();
    if (grad_scale.has_value() && grad_scale->defined()) {
      if (!fused_scalar(*grad_scale, dev, &scale_view)) return false;
      scale = &scale_view;
    }
    if (found_inf.has_value() && found_inf->defined()) {
      FooView f;
      if (!fused_scalar(*found_inf, dev, &f)) return false;
      skip = *static_cast<const float*>(f.ptr) == 1.0f;  // torch's rule: 1.0 skips the whole step
    }
    return true;
  }
};

constexpr char kFusedAdam[] = "_fused_adam_";
constexpr char kFusedAdamLr[] = "_fused_adam_.tensor_lr";
constexpr char kFusedAdamW[] = "_fused_adamw_";
constexpr char kFusedAdamWLr[] = "_fused_adamw_.tensor_lr";
constexpr char kFusedSgd[] = "_fused_sgd_";
constexpr char kFusedSgdLr[] = "_fused_sgd_.tensor_lr";
constexpr char kFusedAdagrad[] = "_fused_adagrad_";
constexpr char kFusedAdagradLr[] = "_fused_adagrad_.tensor_lr";

template <const char* NAME, bool DECOUPLED, class Lr>
void fused_adam(TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps, Lr lr,
                double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                OptT grad_scale, OptT found_inf) {
  if (named([&] {
        FusedStep s;
        if (!s.init(self, grad_scale, found_inf)) return false;
        if (s.skip) return true;
        const size_t n = self.size();
        std::vector<FooView> p, g, m, v, mx, st;
        if (!fused_views(self, n, s.dev, p) || !fused_views(grads, n, s.dev, g, self) ||
            !fused_views(exp_avgs, n, s.dev, m, self) || !fused_views(exp_avg_sqs, n, s.dev, v, self) ||
            !fused_views(max_exp_avg_sqs, amsgrad ? n : max_exp_avg_sqs.size(), s.dev, mx, amsgrad ? self : TL{}) ||
            (amsgrad && mx.size() != n) || !fused_views(state_steps, n, s.dev, st))
          return false;
        const FooAdam cfg{lr_value(lr), beta1, beta2, weight_decay, eps, amsgrad, maximize, DECOUPLED};
        FooStatus status{};
        return done(foo_rs_fused_adam(p.data(), g.data(), m.data(), v.data(), mx.data(), st.data(), n, &cfg, s.scale,
                                      &status),
                    status);
      }))
    return;
  Slow<NAME, void(TL, TL, TL, TL, TL, TL, Lr, double, double, double, double, bool, bool, OptT, OptT)>::call(
      self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad,
      maximize, grad_scale, found_inf);
}

template <const char* NAME, class Lr>
void fused_sgd(TL self, TL grads, TL momentum_buffers, double weight_decay, double momentum, Lr lr, double dampening,
               bool nesterov, bool maximize, bool is_first_step, OptT grad_scale, OptT found_inf) {
  if (named([&] {
        FusedStep s;
        if (!s.init(self, grad_scale, found_inf)) return false;
        if (s.skip) return true;
        const size_t n = self.size();
        std::vector<FooView> p, g, b;
        if (!fused_views(self, n, s.dev, p) || !fused_views(grads, n, s.dev, g, self) ||
            (momentum != 0 && !fused_views(momentum_buffers, n, s.dev, b, self)))
          return false;
        const FooSgd cfg{lr_value(lr), weight_decay, momentum, dampening, nesterov, maximize, is_first_step};
        FooStatus status{};
        return done(foo_rs_fused_sgd(p.data(), g.data(), b.data(), n, &cfg, s.scale, &status), status);
      }))
    return;
  Slow<NAME, void(TL, TL, TL, double, double, Lr, double, bool, bool, bool, OptT, OptT)>::call(
      self, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov, maximize, is_first_step,
      grad_scale, found_inf);
}

template <const char* NAME, class Lr>
void fused_adagrad(TL self, TL grads, TL state_sums, TL state_steps, Lr lr, double lr_decay, double weight_decay,
                   double eps, bool maximize, OptT grad_scale, OptT found_inf) {
  if (named([&] {
        FusedStep s;
        if (!s.init(self, grad_scale, found_inf)) return false;
        if (s.skip) return true;
        const size_t n = self.size();
        std::vector<FooView> p, g, ss, st;
        if (!fused_views(self, n, s.dev, p) || !fused_views(grads, n, s.dev, g, self) ||
            !fused_views(state_sums, n, s.dev, ss, self) || !fused_views(state_steps, n, s.dev, st))
          return false;
        const FooAdagrad cfg{lr_value(lr), lr_decay, weight_decay, eps, maximize};
        FooStatus status{};
        return done(foo_rs_fused_adagrad(p.data(), g.data(), ss.data(), st.data(), n, &cfg, s.scale, &status), status);
      }))
    return;
  Slow<NAME, void(TL, TL, TL, TL, Lr, double, double, double, bool, OptT, OptT)>::call(
      self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale, found_inf);
}

// ---- GradScaler: torch.amp's two ops ---------------------------------------
// Dense foo gradients and one-element foo state go to Rust in one call; any
// other call (the Python kernel raises CPU's errors for bad arguments and
// handles strided gradients) to the Python kernel.

constexpr char kAmpUnscale[] = "_amp_foreach_non_finite_check_and_unscale_";
constexpr char kAmpUpdate[] = "_amp_update_scale_";

// A one-element tensor of dtype `t` on `dev`, as a view.
bool amp_scalar(const at::Tensor& x, const c10::Device& dev, c10::ScalarType t, FooView* v) {
  return x.defined() && x.device() == dev && x.numel() == 1 && x.scalar_type() == t && view_of(x, v);
}

void amp_unscale(TL self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  if (named([&] {
        if (self.empty() || !is_foo(found_inf)) return false;
        const auto dev = found_inf.device();
        FooView vf, vi;
        std::vector<FooView> g;
        if (!amp_scalar(found_inf, dev, c10::ScalarType::Float, &vf) ||
            !amp_scalar(inv_scale, dev, c10::ScalarType::Float, &vi) || !fused_views(self, self.size(), dev, g))
          return false;
        uint8_t found = 0;
        FooStatus st{};
        if (!done(foo_rs_amp_unscale(g.data(), g.size(), *static_cast<const float*>(vi.ptr), &found, &st), st))
          return false;
        if (found) *static_cast<float*>(vf.ptr) = 1.0f;
        return true;
      }))
    return;
  Slow<kAmpUnscale, void(TL, at::Tensor&, const at::Tensor&)>::call(self, found_inf, inv_scale);
}

at::Tensor& amp_update_scale(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (named([&] {
        if (!is_foo(self)) return false;
        const auto dev = self.device();
        FooView vs, vt, vf;
        if (!amp_scalar(self, dev, c10::ScalarType::Float, &vs) ||
            !amp_scalar(growth_tracker, dev, c10::ScalarType::Int, &vt) ||
            !amp_scalar(found_inf, dev, c10::ScalarType::Float, &vf))
          return false;
        FooStatus st{};
        return done(
            foo_rs_amp_update_scale(&vs, &vt, &vf, growth_factor, backoff_factor, growth_interval, &st), st);
      }))
    return self;
  return Slow<kAmpUpdate, at::Tensor&(at::Tensor&, at::Tensor&, const at::Tensor&, double, double, int64_t)>::call(
      self, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
}

// ---- The table Python registers from ----------------------------------------

using Registrar = void (*)(torch::Library&);

struct NativeOp {
  const char* name;
  Registrar reg;
  // The overload whose Python kernel is this one's slow path, when not its
  // own (a functional form served by its out= form's): it is registered
  // with that overload.
  const char* slow_of = nullptr;
  // An overload whose C++ kernel (and so whose Python kernel, its slow
  // path) this one calls: it must be registered first (a foreach op's
  // per-tensor op).
  const char* needs = nullptr;
};

// The three overloads of an elementwise op with extra schema arguments.
#define FOO_REG3(Op, ...)                                                                                   \
  {Op::F, [](torch::Library& m) { m.impl(Op::F, TORCH_FN((k_functional<Op, ##__VA_ARGS__>))); }},          \
      {Op::I, [](torch::Library& m) { m.impl(Op::I, TORCH_FN((k_inplace<Op, ##__VA_ARGS__>))); }},         \
      {Op::O, [](torch::Library& m) { m.impl(Op::O, TORCH_FN((k_out<Op, ##__VA_ARGS__>))); }},
// The functional overload of one with neither (mish_backward).
#define FOO_REG1(Op, ...) \
  {Op::F, [](torch::Library& m) { m.impl(Op::F, TORCH_FN((k_functional<Op, ##__VA_ARGS__>))); }},
// The functional and out= overloads of one with no in-place form (a backward).
#define FOO_REG2(Op, ...)                                                                                   \
  {Op::F, [](torch::Library& m) { m.impl(Op::F, TORCH_FN((k_functional<Op, ##__VA_ARGS__>))); }},          \
      {Op::O, [](torch::Library& m) { m.impl(Op::O, TORCH_FN((k_out<Op, ##__VA_ARGS__>))); }},
#define FOO_REG(name, fn) {name, [](torch::Library& m) { m.impl(name, TORCH_FN(fn)); }},
// A MetaBase-structured op's functional and out= overloads.
#define FOO_REGM(Op, ...)                                                                                    \
  {Op::F, [](torch::Library& m) { m.impl(Op::F, TORCH_FN((m_functional<Op, ##__VA_ARGS__>))); }, Op::O},   \
      {Op::O, [](torch::Library& m) { m.impl(Op::O, TORCH_FN((m_out<Op, ##__VA_ARGS__>))); }},

// A foreach overload and its in-place form: `_foreach_<op>.<ov>` and
// `_foreach_<op>_.<ov>`, kernel form Form, ATen's loops
// at::native::foreach_tensor_<aten>[_], per-tensor op P (the variadic tail).
#define FOO_FE_NAMED(f, i, Form, aten, ...)                                                                   \
  {f, [](torch::Library& m) { m.impl(f, TORCH_FN((Form<__VA_ARGS__, false, &at::native::aten>))); }, nullptr, \
   __VA_ARGS__::needs_f},                                                                                     \
      {i, [](torch::Library& m) { m.impl(i, TORCH_FN((Form<__VA_ARGS__, true, &at::native::aten##_>))); },    \
       nullptr, __VA_ARGS__::needs_i},
#define FOO_FE(op, ov, Form, aten, ...) \
  FOO_FE_NAMED("_foreach_" #op "." #ov, "_foreach_" #op "_." #ov, Form, foreach_tensor_##aten, __VA_ARGS__)
#define FOO_FE1(op, Op) FOO_FE_NAMED("_foreach_" #op, "_foreach_" #op "_", fe_unary, foreach_tensor_##op##_slow, Per<Op>)

const NativeOp kNativeOps[] = {
    FOO_REG3(Neg) FOO_REG3(Exp) FOO_REG3(Log) FOO_REG3(Log1p) FOO_REG3(Expm1) FOO_REG3(Sqrt) FOO_REG3(Rsqrt)
    FOO_REG3(Sigmoid) FOO_REG3(Tanh) FOO_REG3(Sin) FOO_REG3(Cos) FOO_REG3(Reciprocal) FOO_REG3(Erf) FOO_REG3(Erfc)
    FOO_REG3(Silu) FOO_REG3(Mish) FOO_REG3(Hardsigmoid) FOO_REG3(Relu) FOO_REG3(Sign)
    FOO_REG3(Add, T, S) FOO_REG3(Sub, T, S) FOO_REG3(Mul, T) FOO_REG3(Div, T)
    FOO_REG3(DivMode, T, std::optional<c10::string_view>)
    FOO_REG3(Maximum, T) FOO_REG3(Minimum, T) FOO_REG3(PowTT, T) FOO_REG3(Atan2, T)
    FOO_REG3(SigmoidBackward, T) FOO_REG3(TanhBackward, T) FOO_REG3(SiluBackward, T)
    FOO_REG3(EqT, T) FOO_REG3(NeT, T) FOO_REG3(LtT, T) FOO_REG3(LeT, T) FOO_REG3(GtT, T) FOO_REG3(GeT, T)
    FOO_REG3(EqS, S) FOO_REG3(NeS, S) FOO_REG3(LtS, S) FOO_REG3(LeS, S) FOO_REG3(GtS, S) FOO_REG3(GeS, S)
    FOO_REG3(PowTS, S) FOO_REG3(ClampMin, S) FOO_REG3(ClampMax, S) FOO_REG3(LeakyRelu, S)
    FOO_REG3(Clamp, const std::optional<c10::Scalar>&, const std::optional<c10::Scalar>&)
    FOO_REG3(Gelu, c10::string_view) FOO_REG3(GeluBackward, T, c10::string_view)
    FOO_REG3(ThresholdBackward, T, S) FOO_REG3(Softplus, S, S) FOO_REG3(Elu, S, S, S)
    FOO_REG3(Tan) FOO_REG3(Asin) FOO_REG3(Acos) FOO_REG3(Atan) FOO_REG3(Sinh) FOO_REG3(Cosh) FOO_REG3(Asinh)
    FOO_REG3(Acosh) FOO_REG3(Atanh) FOO_REG3(Log2) FOO_REG3(Log10) FOO_REG3(Exp2) FOO_REG3(Erfinv) FOO_REG3(Lgamma)
    FOO_REG3(Digamma) FOO_REG3(Sinc) FOO_REG3(Floor) FOO_REG3(Ceil) FOO_REG3(Trunc) FOO_REG3(Frac)
    FOO_REG3(BitwiseNot) FOO_REG3(Round) FOO_REG3(RoundDecimals, int64_t)
    FOO_REG3(Remainder, T) FOO_REG3(Fmod, T) FOO_REG3(Hypot, T) FOO_REG2(Fmax, T) FOO_REG2(Fmin, T)
    FOO_REG3(Copysign, T) FOO_REG3(Xlogy, T) FOO_REG2(Logaddexp, T) FOO_REG3(Nextafter, T)
    FOO_REG3(BitwiseAnd, T) FOO_REG3(BitwiseOr, T) FOO_REG3(BitwiseXor, T) FOO_REG3(Lshift, T) FOO_REG3(Rshift, T)
    FOO_REG3(Gcd, T) FOO_REG3(Lcm, T) FOO_REG3(ClampMinT, T) FOO_REG3(ClampMaxT, T) FOO_REG3(FloorDivide, T)
    FOO_REG3(ClampT, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)
    FOO_REG3(Sgn) FOO_REG2(LeakyReluBackward, T, S, bool) FOO_REG2(EluBackward, S, S, S, bool, T)
    FOO_REG2(SoftplusBackward, T, S, S)
    FOO_REG3(Hardtanh, S, S) FOO_REG2(HardtanhBackward, T, S, S)
    FOO_REGM(Mm, T, T) FOO_REGM(Bmm, T, T) FOO_REGM(Addmm, T, T, T, S, S) FOO_REGM(Baddbmm, T, T, T, S, S)
    FOO_REGM(Sum, T, at::OptionalIntArrayRef, bool, std::optional<c10::ScalarType>)
    FOO_REGM(Mean, T, at::OptionalIntArrayRef, bool, std::optional<c10::ScalarType>)
    FOO_REGM(Amax, T, at::IntArrayRef, bool) FOO_REGM(Amin, T, at::IntArrayRef, bool)
    FOO_REGM(VectorNorm, T, S, at::OptionalIntArrayRef, bool, std::optional<c10::ScalarType>)
    FOO_REGM(Softmax, T, int64_t, bool) FOO_REGM(LogSoftmax, T, int64_t, bool)
    FOO_REGM(SoftmaxBackward, T, T, int64_t, c10::ScalarType)
    FOO_REGM(LogSoftmaxBackward, T, T, int64_t, c10::ScalarType)
    FOO_REG(kLocalScalar, local_scalar_dense) FOO_REG(kAbsOut, abs_out) FOO_REG(kMaskedFill, masked_fill_scalar_)
    FOO_REG(kWhere, where_self) FOO_REG(kWhereOut, where_self_out) FOO_REG(kCopy, copy_)
    FOO_REG(kZero, zero_) FOO_REG(kFill, fill_scalar) FOO_REGM(Cat, const at::ITensorListRef&, int64_t)
    FOO_REG(kLayerNorm, layer_norm) FOO_REG(kLayerNormBack, layer_norm_backward)
    FOO_REG("native_group_norm", group_norm) FOO_REG(kGroupNormBack, group_norm_backward)
    FOO_REG(kIndexSelect, index_select) FOO_REG(kIndexSelectOut, index_select_out)
    FOO_REG(kEmbeddingBack, embedding_dense_backward)
    FOO_REG(kNll, nll_loss_forward) FOO_REG(kNllOut, nll_loss_forward_out)
    FOO_REG(kNllBack, nll_loss_backward) FOO_REG(kNllBackOut, nll_loss_backward_out)
    {kMaxDim, [](torch::Library& m) { m.impl(kMaxDim, TORCH_FN(MaxDim::functional)); }, kMaxDimOut},
    FOO_REG(kMaxDimOut, MaxDim::out)
    {kMinDim, [](torch::Library& m) { m.impl(kMinDim, TORCH_FN(MinDim::functional)); }, kMinDimOut},
    FOO_REG(kMinDimOut, MinDim::out)
    FOO_REGM(Argmax, T, std::optional<int64_t>, bool) FOO_REGM(Argmin, T, std::optional<int64_t>, bool)
    FOO_REG(kMax, (full_extreme<kMax, kMax>)) FOO_REG(kMin, (full_extreme<kMin, kMin>))
    FOO_REG(kVar, (var_functional<kVar, kRustVar>)) FOO_REG(kVarOut, (var_out<kVarOut, kRustVar>))
    FOO_REG(kStd, (var_functional<kStd, kRustStd>)) FOO_REG(kStdOut, (var_out<kStdOut, kRustStd>))
    FOO_REG(kVarMean, (var_mean_functional<kVarMean, kRustVar>))
    FOO_REG(kStdMean, (var_mean_functional<kStdMean, kRustStd>))
    FOO_REGM(MseLoss, T, T, int64_t)
    FOO_REG(kMseBack, mse_loss_backward) FOO_REG(kMseBackOut, mse_loss_backward_out)
    FOO_REG(kMaxPool, max_pool2d_with_indices) FOO_REG(kMaxPoolOut, max_pool2d_with_indices_out)
    FOO_REG(kMaxPoolBack, max_pool2d_with_indices_backward)
    FOO_REG(kMaxPoolBackOut, max_pool2d_with_indices_backward_out)
    FOO_REG(kDropout, native_dropout) FOO_REG(kDropoutBack, native_dropout_backward)
    FOO_REG(kBernoulli, bernoulli_float_)
    FOO_REGM(Gather, T, int64_t, T, bool) FOO_REG(kIndex, index_tensor) FOO_REG(kIndexOut, index_tensor_out)
    FOO_REG(kIndexPut, index_put_impl)
    FOO_REGM(ScatterSrc, T, int64_t, T, T) FOO_REGM(ScatterValue, T, int64_t, T, S)
    FOO_REGM(ScatterReduce, T, int64_t, T, T, c10::string_view)
    FOO_REGM(ScatterValueReduce, T, int64_t, T, S, c10::string_view) FOO_REGM(ScatterAdd, T, int64_t, T, T)
    FOO_REGM(ScatterReduceTwo, T, int64_t, T, T, c10::string_view, bool)
    FOO_REGM(AvgPool, T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool, std::optional<int64_t>)
    FOO_REGM(AvgPoolBack, T, T, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool, std::optional<int64_t>)
    FOO_REG(kArange, arange_start_out) FOO_REG(kAdaptiveAvg, adaptive_avg_pool2d)
    FOO_REG(kAdaptiveAvgBack, adaptive_avg_pool2d_backward)
    FOO_REG3(LerpS, T, S) FOO_REG3(LerpT, T, T) FOO_REG3(Addcmul, T, T, S) FOO_REG3(Addcdiv, T, T, S)
    FOO_REG(kSdpChoice, sdp_choice) FOO_REG(kSdpa, sdpa_forward) FOO_REG(kSdpaBack, sdpa_backward)
    FOO_REG3(Hardswish) FOO_REG2(HardsigmoidBackward, T) FOO_REG2(HardswishBackward, T)
    FOO_REG(kConv, convolution) FOO_REG(kConvBack, convolution_backward)
    FOO_REG(kBatchNorm, native_batch_norm) FOO_REG(kBatchNormLegit, native_batch_norm_legit)
    FOO_REG(kBatchNormNoStats, native_batch_norm_legit_no_stats) FOO_REG(kBatchNormUpdate, batch_norm_with_update)
    FOO_REG(kBatchNormBack, native_batch_norm_backward) FOO_REG(kBatchNormBackNew, batch_norm_backward)
    FOO_REG(kFusedAdam, (fused_adam<kFusedAdam, false, double>))
    FOO_REG(kFusedAdamLr, (fused_adam<kFusedAdamLr, false, const at::Tensor&>))
    FOO_REG(kFusedAdamW, (fused_adam<kFusedAdamW, true, double>))
    FOO_REG(kFusedAdamWLr, (fused_adam<kFusedAdamWLr, true, const at::Tensor&>))
    FOO_REG(kFusedSgd, (fused_sgd<kFusedSgd, double>)) FOO_REG(kFusedSgdLr, (fused_sgd<kFusedSgdLr, const at::Tensor&>))
    FOO_REG(kFusedAdagrad, (fused_adagrad<kFusedAdagrad, double>))
    FOO_REG(kFusedAdagradLr, (fused_adagrad<kFusedAdagradLr, const at::Tensor&>))
    FOO_REG(kAmpUnscale, amp_unscale) FOO_REG(kAmpUpdate, amp_update_scale)
    // all/any, cumsum/cumprod, triu/tril, topk, masked_fill_(Tensor), random fills
    FOO_REGM(AllAll, T) FOO_REGM(AnyAll, T) FOO_REGM(AllDim, T, int64_t, bool) FOO_REGM(AnyDim, T, int64_t, bool)
    FOO_REGM(AllDims, T, at::OptionalIntArrayRef, bool) FOO_REGM(AnyDims, T, at::OptionalIntArrayRef, bool)
    FOO_REGM(Cumsum, T, int64_t, std::optional<c10::ScalarType>)
    FOO_REGM(Cumprod, T, int64_t, std::optional<c10::ScalarType>)
    FOO_REGM(Triu, T, int64_t) FOO_REGM(Tril, T, int64_t)
    FOO_REG(kTopk, topk) FOO_REG(kTopkValues, topk_values)
    {kMaskedFillT, [](torch::Library& m) { m.impl(kMaskedFillT, TORCH_FN(masked_fill_tensor_)); }, nullptr,
     kMaskedFill},
    FOO_REG(kNormal, normal_) FOO_REG(kUniform, uniform_) FOO_REG(kRandom, random_)
    FOO_REG(kRandomFrom, random_from) FOO_REG(kRandomTo, random_to)
    // nonzero, masked_select, isnan/isinf/isfinite, nan_to_num, sort, prod
    FOO_REG(kNonzero, nonzero) FOO_REG(kNonzeroOut, nonzero_out)
    FOO_REG(kMaskedSelect, masked_select) FOO_REG(kMaskedSelectOut, masked_select_out)
    FOO_REG(kIsnan, fp_class<kIsnan>) FOO_REG(kIsinf, fp_class<kIsinf>) FOO_REG(kIsfinite, fp_class<kIsfinite>)
    FOO_REG2(IsPosInf) FOO_REG2(IsNegInf)
    FOO_REG(kNanToNumOut, nan_to_num_out)
    FOO_REG(kSortStable, sort_stable) FOO_REG(kSortValuesStable, sort_values_stable)
    FOO_REGM(ProdDim, T, int64_t, bool, std::optional<c10::ScalarType>) FOO_REG(kProd, prod_all)
    // losses
    FOO_REG1(MishBackward, T) FOO_REG(kLogSigmoid, log_sigmoid_forward)
    FOO_REG(kLogSigmoidOut, log_sigmoid_forward_out) FOO_REG(kLogSigmoidBack, log_sigmoid_backward)
    FOO_REG(kLogSigmoidBackOut, log_sigmoid_backward_out)
    FOO_REGM(SmoothL1, T, T, int64_t, double) FOO_REG(kHuber, huber_loss) FOO_REG(kHuberOut, huber_loss_out)
    FOO_REG(kHuberBackOut, (point_loss_backward_out<kHuberBackOut, kKindHuber, false>))
    FOO_REG(kSmoothL1BackOut, (point_loss_backward_out<kSmoothL1BackOut, kKindSmoothL1, true>))
    FOO_REG(kBce, binary_cross_entropy) FOO_REG(kBceOut, binary_cross_entropy_out)
    FOO_REG(kBceBack, binary_cross_entropy_backward) FOO_REG(kBceBackOut, binary_cross_entropy_backward_out)
    FOO_REG(kNll2d, nll_loss2d_forward) FOO_REG(kNll2dOut, nll_loss2d_forward_out)
    FOO_REG(kNll2dBack, nll_loss2d_backward) FOO_REG(kNll2dBackOut, nll_loss2d_backward_out)
    FOO_REG(kAdaptiveMaxOut, adaptive_max_pool2d_out) FOO_REG(kAdaptiveMaxBackOut, adaptive_max_pool2d_backward_out)
    FOO_REG(kUpNearest, UpNearest::functional) FOO_REG(kUpNearestOut, UpNearest::out)
    FOO_REG(kUpNearestBack, UpNearestBack::functional) FOO_REG(kUpNearestBackOut, UpNearestBack::out)
    FOO_REG(kUpExact, UpExact::functional) FOO_REG(kUpExactOut, UpExact::out)
    FOO_REG(kUpExactBack, UpExactBack::functional) FOO_REG(kUpExactBackOut, UpExactBack::out)
    FOO_REG(kUpBilinear, UpBilinear::functional) FOO_REG(kUpBilinearOut, UpBilinear::out)
    FOO_REG(kUpBilinearBack, UpBilinearBack::functional) FOO_REG(kUpBilinearBackOut, UpBilinearBack::out)
    FOO_REG(kReflPad1d, ReflPad1d::functional) FOO_REG(kReflPad1dOut, ReflPad1d::out)
    FOO_REG(kReflPad1dBack, ReflPad1dBack::functional) FOO_REG(kReflPad1dBackOut, ReflPad1dBack::out)
    FOO_REG(kReflPad2d, reflection_pad2d) FOO_REG(kReflPad2dOut, reflection_pad2d_out)
    FOO_REG(kReflPad2dBack, ReflPad2dBack::functional) FOO_REG(kReflPad2dBackOut, ReflPad2dBack::out)
    FOO_REG(kReflPad3d, ReflPad3d::functional) FOO_REG(kReflPad3dOut, ReflPad3d::out)
    FOO_REG(kReflPad3dBack, ReflPad3dBack::functional) FOO_REG(kReflPad3dBackOut, ReflPad3dBack::out)
    FOO_REG(kReplPad1d, ReplPad1d::functional) FOO_REG(kReplPad1dOut, ReplPad1d::out)
    FOO_REG(kReplPad1dBack, ReplPad1dBack::functional) FOO_REG(kReplPad1dBackOut, ReplPad1dBack::out)
    FOO_REG(kReplPad2d, ReplPad2d::functional) FOO_REG(kReplPad2dOut, ReplPad2d::out)
    FOO_REG(kReplPad2dBack, ReplPad2dBack::functional) FOO_REG(kReplPad2dBackOut, ReplPad2dBack::out)
    FOO_REG(kReplPad3d, ReplPad3d::functional) FOO_REG(kReplPad3dOut, ReplPad3d::out)
    FOO_REG(kReplPad3dBack, ReplPad3dBack::functional) FOO_REG(kReplPad3dBackOut, ReplPad3dBack::out)
    // Foreach (torch.optim): see fe_each.
    FOO_FE(add, Scalar, fe_scalar_number, add_scalar_kernel_slow, PerAlpha1<Add>)
    FOO_FE(add, ScalarList, fe_scalars_number, add_scalarlist_kernel_slow, PerAlpha1<Add>)
    FOO_FE(add, List, fe_list_scalar, add_list_kernel_slow, Per<Add, T, S>)
    FOO_FE(add, Tensor, fe_tensor_scalar, add_tensor_kernel_slow, Per<Add, T, S>)
    FOO_FE(sub, Scalar, fe_scalar_number, sub_scalar_kernel_slow, PerAlpha1<Sub>)
    FOO_FE(sub, ScalarList, fe_scalars_number, sub_scalarlist_kernel_slow, PerAlpha1<Sub>)
    FOO_FE(sub, List, fe_list_scalar, sub_list_kernel_slow, Per<Sub, T, S>)
    FOO_FE(mul, Scalar, fe_scalar_number, mul_scalar_kernel_slow, Per<Mul, T>)
    FOO_FE(mul, ScalarList, fe_scalars_number, mul_scalarlist_kernel_slow, Per<Mul, T>)
    FOO_FE(mul, List, fe_list, mul_list_kernel_slow, Per<Mul, T>)
    FOO_FE(mul, Tensor, fe_tensor, mul_tensor_kernel_slow, Per<Mul, T>)
    FOO_FE(div, Scalar, fe_scalar_number, div_scalar_kernel_slow, Per<Div, T>)
    FOO_FE(div, ScalarList, fe_scalars_number, div_scalarlist_kernel_slow, Per<Div, T>)
    FOO_FE(div, List, fe_list, div_list_kernel_slow, Per<Div, T>)
    FOO_FE(div, Tensor, fe_tensor, div_tensor_kernel_slow, Per<Div, T>)
    FOO_FE(clamp_min, Scalar, fe_scalar, clamp_min_scalar_kernel_slow, Per<ClampMin, S>)
    FOO_FE(clamp_min, ScalarList, fe_scalars, clamp_min_scalarlist_kernel_slow, Per<ClampMin, S>)
    FOO_FE(clamp_max, Scalar, fe_scalar, clamp_max_scalar_kernel_slow, Per<ClampMax, S>)
    FOO_FE(clamp_max, ScalarList, fe_scalars, clamp_max_scalarlist_kernel_slow, Per<ClampMax, S>)
    // ATen's loops for maximum/minimum are clamp_min/clamp_max's.
    FOO_FE(maximum, Scalar, fe_scalar, clamp_min_scalar_kernel_slow, Per<ClampMin, S>)
    FOO_FE(maximum, ScalarList, fe_scalars, clamp_min_scalarlist_kernel_slow, Per<ClampMin, S>)
    FOO_FE(maximum, List, fe_list, clamp_min_list_kernel_slow, PerOutSelf<Maximum>)
    FOO_FE(minimum, Scalar, fe_scalar, clamp_max_scalar_kernel_slow, Per<ClampMax, S>)
    FOO_FE(minimum, ScalarList, fe_scalars, clamp_max_scalarlist_kernel_slow, Per<ClampMax, S>)
    FOO_FE(minimum, List, fe_list, clamp_max_list_kernel_slow, PerOutSelf<Minimum>)
    FOO_FE(pow, Scalar, fe_scalar, pow_scalar_kernel_slow, Per<PowTS, S>)
    FOO_FE(pow, ScalarList, fe_scalars, pow_scalarlist_kernel_slow, Per<PowTS, S>)
    FOO_FE(pow, List, fe_list, pow_list_kernel_slow, Per<PowTT, T>)
    FOO_FE(addcmul, Scalar, fe_lists_scalar, addcmul_scalar_slow, Per<Addcmul, T, T, S>)
    FOO_FE(addcmul, ScalarList, fe_lists_scalars, addcmul_scalarlist_slow, Per<Addcmul, T, T, S>)
    FOO_FE(addcdiv, Scalar, fe_lists_scalar, addcdiv_scalar_slow, Per<Addcdiv, T, T, S>)
    FOO_FE(addcdiv, ScalarList, fe_lists_scalars, addcdiv_scalarlist_slow, Per<Addcdiv, T, T, S>)
    FOO_FE(lerp, Scalar, fe_list_scalar, lerp_list_kernel_slow, Per<LerpS, T, S>)
    FOO_FE(lerp, ScalarList, fe_list_scalars, lerp_scalarlist_kernel_slow, Per<LerpS, T, S>)
    FOO_FE(lerp, List, fe_lists, ternary_lerp_slow, Per<LerpT, T, T>)
    FOO_FE1(neg, Neg) FOO_FE1(exp, Exp) FOO_FE1(log, Log) FOO_FE1(log1p, Log1p) FOO_FE1(expm1, Expm1)
    FOO_FE1(sqrt, Sqrt) FOO_FE1(rsqrt, Rsqrt) FOO_FE1(sigmoid, Sigmoid) FOO_FE1(tanh, Tanh) FOO_FE1(sin, Sin)
    FOO_FE1(cos, Cos) FOO_FE1(reciprocal, Reciprocal) FOO_FE1(erf, Erf) FOO_FE1(erfc, Erfc) FOO_FE1(sign, Sign)
    {"_foreach_norm.Scalar", [](torch::Library& m) { m.impl("_foreach_norm.Scalar", TORCH_FN(foreach_norm)); },
     nullptr, VectorNorm::O},
    {"_foreach_zero_", [](torch::Library& m) { m.impl("_foreach_zero_", TORCH_FN(foreach_zero_)); }, nullptr, kZero},
    {"_foreach_copy_", [](torch::Library& m) { m.impl("_foreach_copy_", TORCH_FN(foreach_copy_)); }, nullptr, kCopy},
};
#undef FOO_FE_NAMED
#undef FOO_FE
#undef FOO_FE1
#undef FOO_REG3
#undef FOO_REG2
#undef FOO_REG1
#undef FOO_REG
#undef FOO_REGM

}  // namespace
}  // namespace native
}  // namespace foo_rs

// SDPA's backend choice on foo, without the dispatcher (see sdp_choice).
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &foo_rs::native::sdp_choice);
}  // namespace at::native

// The aten overloads the native path has C++ kernels for, comma-separated.
extern "C" const char* foo_glue_fast_ops() {
  static const std::string names = [] {
    std::string s;
    for (const auto& op : foo_rs::native::kNativeOps) {
      if (op.slow_of != nullptr) continue;  // registered with its slow_of overload
      if (!s.empty()) s += ",";
      s += op.name;
    }
    return s;
  }();
  return names.c_str();
}

// Registers the native C++ kernel of `name` for PrivateUse1, and those of
// the overloads whose slow path is `name`'s Python kernel (its functional
// form); 0 on success, 1 if there is none. The op's Python kernel must
// already be registered as `foo_slow::<name with '.' as '_'>`.
// 2: an overload it `needs` is not registered yet.
extern "C" int foo_glue_register_fast(const char* name) {
  static torch::Library* lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static std::set<std::string> registered;
  int rc = 1;
  for (const auto& op : foo_rs::native::kNativeOps) {
    if (op.slow_of == nullptr ? std::strcmp(op.name, name) == 0 : std::strcmp(op.slow_of, name) == 0) {
      if (op.needs != nullptr && registered.count(op.needs) == 0) return 2;
      op.reg(*lib);
      registered.insert(op.name);
      if (op.slow_of == nullptr) rc = 0;
    }
  }
  return rc;
}
