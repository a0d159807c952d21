// foo_glue.cpp: the ABI bridge between c10/ATen and the Rust core of foo_rs.
//
// Nothing in Python can register a c10 allocator, a device guard or
// PrivateUse1 hooks, so this file does it. It holds no state and no logic of
// its own: every decision (which block, which device is current, RNG seed and
// offset, statistics) is made in Rust behind the `foo_rs_*` functions below.
//
// Compiled by build.rs against the headers of the torch installed in the
// build's Python, and linked (whole-archive) into foo_rs._C.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/native_group_norm_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

// ---- The Rust side (rust/src/ffi.rs) -------------------------------------
extern "C" {
int32_t foo_rs_in_bad_fork();
const char* foo_rs_bad_fork_message();
int32_t foo_rs_device_count();
int32_t foo_rs_current_device();
int32_t foo_rs_set_device(int32_t device);
void* foo_rs_alloc(int32_t device, size_t nbytes, char* err, size_t err_len);
void foo_rs_free(void* ptr);
int32_t foo_rs_device_of_ptr(const void* ptr);
void foo_rs_empty_cache(int32_t device);
int64_t foo_rs_stat(int32_t device, const char* key);
void foo_rs_reset_peak_stats(int32_t device);
void foo_rs_reset_accumulated_stats(int32_t device);
void foo_rs_mem_get_info(int32_t device, size_t* free_bytes, size_t* total_bytes);
uint64_t foo_rs_gen_new(int32_t device);
uint64_t foo_rs_gen_default(int32_t device);
uint64_t foo_rs_gen_clone(uint64_t id);
void foo_rs_gen_release(uint64_t id);
uint64_t foo_rs_gen_seed(uint64_t id);
uint64_t foo_rs_gen_offset(uint64_t id);
void foo_rs_gen_set_seed(uint64_t id, uint64_t seed);
void foo_rs_gen_set_offset(uint64_t id, uint64_t offset);
uint64_t foo_rs_gen_random_seed();

}

namespace foo_rs {
namespace {

constexpr c10::DeviceType kFoo = c10::DeviceType::PrivateUse1;

c10::DeviceIndex checked_index(c10::DeviceIndex index) {
  const auto count = foo_rs_device_count();
  TORCH_CHECK(
      index >= 0 && index < count,
      "Invalid foo device index ", static_cast<int>(index), ": there are ",
      count, " foo devices (set FOO_RS_DEVICE_COUNT to change)");
  return index;
}

// ---- Allocator -----------------------------------------------------------

void delete_block(void* ptr) { foo_rs_free(ptr); }

struct FooAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(!foo_rs_in_bad_fork(), foo_rs_bad_fork_message());
    const auto device = static_cast<c10::DeviceIndex>(foo_rs_current_device());
    char err[512] = {0};
    void* ptr = foo_rs_alloc(device, nbytes, err, sizeof(err));
    if (ptr == nullptr && nbytes != 0) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, err);
    }
    return {ptr, ptr, &delete_block, c10::Device(kFoo, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  // foo memory is host memory: a storage copy is a memcpy.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) std::memcpy(dest, src, count);
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { foo_rs_empty_cache(-1); }

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const int32_t d = checked_index(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const char* pools[3] = {"all", "small_pool", "large_pool"};
    auto fill = [&](c10::CachingAllocator::StatArray& arr, const std::string& name) {
      for (int p = 0; p < 3; ++p) {
        const std::string base = name + "." + pools[p] + ".";
        arr[p].current = foo_rs_stat(d, (base + "current").c_str());
        arr[p].peak = foo_rs_stat(d, (base + "peak").c_str());
        arr[p].allocated = foo_rs_stat(d, (base + "allocated").c_str());
        arr[p].freed = foo_rs_stat(d, (base + "freed").c_str());
      }
    };
    fill(stats.allocation, "allocation");
    fill(stats.segment, "segment");
    fill(stats.active, "active");
    fill(stats.inactive_split, "inactive_split");
    fill(stats.allocated_bytes, "allocated_bytes");
    fill(stats.reserved_bytes, "reserved_bytes");
    fill(stats.active_bytes, "active_bytes");
    fill(stats.inactive_split_bytes, "inactive_split_bytes");
    fill(stats.requested_bytes, "requested_bytes");
    stats.num_alloc_retries = foo_rs_stat(d, "num_alloc_retries");
    stats.num_ooms = foo_rs_stat(d, "num_ooms");
    stats.num_device_alloc = foo_rs_stat(d, "num_device_alloc");
    stats.num_device_free = foo_rs_stat(d, "num_device_free");
    stats.max_split_size = foo_rs_stat(d, "max_split_size");
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    foo_rs_reset_accumulated_stats(checked_index(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    foo_rs_reset_peak_stats(checked_index(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free_bytes = 0, total_bytes = 0;
    foo_rs_mem_get_info(checked_index(device), &free_bytes, &total_bytes);
    return {free_bytes, total_bytes};
  }
};

FooAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---- Device guard --------------------------------------------------------

struct FooGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kFoo;

  c10::DeviceType type() const override { return kFoo; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kFoo);
    auto old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(kFoo, static_cast<c10::DeviceIndex>(foo_rs_current_device()));
  }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kFoo);
    foo_rs_set_device(checked_index(d.index()));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    foo_rs_set_device(d.index());
  }

  // foo runs every kernel synchronously on the calling thread: one stream.
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(foo_rs_device_count());
  }

  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FooGuardImpl);

// ---- Generator -----------------------------------------------------------
// The Philox seed and offset live in Rust, keyed by a generator id; this
// class only carries the id. State bytes: seed (u64 LE) then offset (u64 LE).

constexpr size_t kStateBytes = 16;

struct FooGeneratorImpl final : c10::GeneratorImpl {
  FooGeneratorImpl(c10::DeviceIndex device, uint64_t id, bool owned)
      : c10::GeneratorImpl(c10::Device(kFoo, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        id_(id),
        owned_(owned) {}

  ~FooGeneratorImpl() override {
    if (owned_) foo_rs_gen_release(id_);
  }

  void set_current_seed(uint64_t seed) override { foo_rs_gen_set_seed(id_, seed); }
  void set_offset(uint64_t offset) override { foo_rs_gen_set_offset(id_, offset); }
  uint64_t get_offset() const override { return foo_rs_gen_offset(id_); }
  uint64_t current_seed() const override { return foo_rs_gen_seed(id_); }

  uint64_t seed() override {
    const uint64_t s = foo_rs_gen_random_seed();
    set_current_seed(s);
    return s;
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::empty({static_cast<int64_t>(kStateBytes)}, at::TensorOptions().dtype(at::kByte));
    uint64_t words[2] = {current_seed(), get_offset()};
    std::memcpy(state.data_ptr(), words, kStateBytes);
    return state.getIntrusivePtr();
  }

  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(
        new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.device().is_cpu(),
        "foo generator state must be a CPU torch.ByteTensor");
    TORCH_CHECK(
        static_cast<size_t>(new_state.numel()) == kStateBytes,
        "foo generator state must have ", kStateBytes, " bytes (seed, offset), got ", new_state.numel());
    uint64_t words[2];
    std::memcpy(words, new_state.data(), kStateBytes);
    set_current_seed(words[0]);
    set_offset(words[1]);
  }

  uint64_t id() const { return id_; }

 private:
  FooGeneratorImpl* clone_impl() const override {
    return new FooGeneratorImpl(device().index(), foo_rs_gen_clone(id_), true);
  }

  uint64_t id_;
  bool owned_;
};

// ---- Hooks ---------------------------------------------------------------

struct FooHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return foo_rs_device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  void init() const override {}

  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(foo_rs_device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    foo_rs_set_device(checked_index(device));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(foo_rs_current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    static std::once_flag once;
    static std::vector<at::Generator> defaults;
    std::call_once(once, [] {
      const auto n = foo_rs_device_count();
      for (int32_t i = 0; i < n; ++i) {
        defaults.emplace_back(c10::make_intrusive<FooGeneratorImpl>(
            static_cast<c10::DeviceIndex>(i), foo_rs_gen_default(i), false));
      }
    });
    const auto idx = device_index < 0 ? getCurrentDevice() : checked_index(device_index);
    return defaults[idx];
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    const auto idx = device_index < 0 ? getCurrentDevice() : checked_index(device_index);
    return at::Generator(c10::make_intrusive<FooGeneratorImpl>(idx, foo_rs_gen_new(idx), true));
  }

  at::Device getDeviceFromPtr(void* data) const override {
    const auto d = foo_rs_device_of_ptr(data);
    TORCH_CHECK(d >= 0, "pointer ", data, " was not allocated on any foo device");
    return c10::Device(kFoo, static_cast<c10::DeviceIndex>(d));
  }

  bool isPinnedPtr(const void* /*data*/) const override { return false; }

  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }

  // Resizes a foo storage in place (storage.resize_()): new block, copy, swap.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize foo storage that is not resizable");
    const auto device = impl->device();
    c10::DeviceGuard guard(device);
    c10::DataPtr fresh = impl->allocator()->allocate(newsize);
    const size_t keep = std::min(newsize, impl->nbytes());
    if (keep != 0) std::memcpy(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

// ---- Metadata kernels ----------------------------------------------------
// Device-agnostic in ATen; registered natively so they never pay a Python call.

// The element types foo holds (rust/src/dtype.rs); anything else is refused
// at allocation time so no kernel ever sees it.
c10::ScalarType checked_dtype(std::optional<c10::ScalarType> dtype) {
  const auto t = c10::dtype_or_default(dtype);
  switch (t) {
    case c10::ScalarType::Bool:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
      return t;
    default:
      TORCH_CHECK(false, "foo does not support dtype ", t,
                  " (supported: bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)");
  }
}

c10::Device foo_device(std::optional<c10::Device> device) {
  if (!device.has_value()) return c10::Device(kFoo, foo_rs_current_device());
  if (!device->has_index()) return c10::Device(kFoo, foo_rs_current_device());
  return c10::Device(kFoo, checked_index(device->index()));
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  const auto dev = foo_device(device);
  TORCH_CHECK(
      !layout.has_value() || *layout == c10::Layout::Strided,
      "foo supports only the strided layout, got ", *layout);
  c10::DeviceGuard guard(dev);
  const c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(
      size, &g_allocator, ks, checked_dtype(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  const auto dev = foo_device(device);
  TORCH_CHECK(
      !layout.has_value() || *layout == c10::Layout::Strided,
      "foo supports only the strided layout, got ", *layout);
  c10::DeviceGuard guard(dev);
  const c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, ks, checked_dtype(dtype));
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

// Reinterpreting foo memory as a dtype foo cannot hold is refused like creating one.
at::Tensor view_dtype(const at::Tensor& self, c10::ScalarType dtype) {
  checked_dtype(dtype);
  return at::native::view_dtype(self, dtype);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize_(
    const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_source_storage_offset(
    at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

// Group norm: ATen's composite kernel (what PrivateUse1 gets without a kernel
// of its own) views its input, which fails for a non-contiguous input on
// torch 2.14 where CPU's kernel succeeds; foo runs the same composite on a
// contiguous input (a no-op for the usual contiguous one).
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    int64_t N, int64_t C, int64_t HxW, int64_t group, double eps) {
  return at::native::math_group_norm(input.contiguous(), weight, bias, N, C, HxW, group, eps);
}

// Whether `param.data = from` may swap `self`'s TensorImpl contents in place
// (Module._apply, behind `model.to("foo")` and `.half()`). ATen's rule treats
// two dense tensors as compatible only for the backends it lists (CPU, CUDA,
// ...), not PrivateUse1, so without this kernel every `.to("foo")` builds a
// new Parameter per module: ties are broken and Parameter identity is lost.
// foo is a dense strided backend like CUDA: a dense foo tensor is compatible
// with another dense foo tensor and with any tensor ATen calls dense (CPU,
// CUDA, ...); everything else (sparse, quantized, nested, ...) keeps ATen's
// answer. The dispatcher picks this kernel when either argument is on foo.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    const auto ks = t.key_set();
    if (ks.has_backend(c10::BackendComponent::PrivateUse1Bit)) {
      return ks.has(c10::DispatchKey::PrivateUse1) && t.layout() == c10::Layout::Strided;
    }
    // ATen's own dense test, asked of a CPU key set.
    return t.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(
        c10::DispatchKeySet(c10::DispatchKey::CPU));
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}


TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("view.dtype", TORCH_FN(view_dtype));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("native_group_norm", TORCH_FN(native_group_norm));
}

FooHooks g_hooks;

}  // namespace
}  // namespace foo_rs

// torch's intra-op thread count (torch.set_num_threads), which foo's kernels follow.
extern "C" int foo_glue_num_threads() { return at::get_num_threads(); }

// Called once from the PyO3 module's init, after torch is loaded.
extern "C" void foo_glue_init() {
  static std::once_flag once;
  std::call_once(once, [] { at::RegisterPrivateUse1HooksInterface(&foo_rs::g_hooks); });
}
