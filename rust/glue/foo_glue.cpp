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
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/profiler/stubs/base.h>
#include <torch/library.h>

#include <ATen/record_function.h>

// torch >= 2.15 lets a PrivateUse1 backend plug an activity profiler into
// Kineto; older versions time foo through the profiler stubs only.
#if defined(USE_KINETO) && __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>)
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#define FOO_KINETO_PLUGIN 1
#endif

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
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
void foo_rs_set_traceback_hooks(void* (*gather)(int32_t cpp), void (*release)(void* handle));
size_t foo_rs_free(void* ptr, int32_t* device);
int32_t foo_rs_memory_totals(int32_t device, size_t* allocated, size_t* reserved);
int32_t foo_rs_device_of_ptr(const void* ptr);
int32_t foo_rs_empty_cache(int32_t device);
int64_t foo_rs_stat(int32_t device, const char* key);
int32_t foo_rs_reset_peak_stats(int32_t device);
int32_t foo_rs_reset_accumulated_stats(int32_t device);
int32_t foo_rs_mem_get_info(int32_t device, size_t* free_bytes, size_t* total_bytes);
uint64_t foo_rs_gen_new(int32_t device);
uint64_t foo_rs_gen_default(int32_t device);
uint64_t foo_rs_gen_clone(uint64_t id);
void foo_rs_gen_release(uint64_t id);
uint64_t foo_rs_gen_seed(uint64_t id);
uint64_t foo_rs_gen_offset(uint64_t id);
int32_t foo_rs_gen_set_seed(uint64_t id, uint64_t seed);
int32_t foo_rs_gen_set_offset(uint64_t id, uint64_t offset);
uint64_t foo_rs_gen_random_seed();
int64_t foo_rs_stream_current(int32_t device);
int64_t foo_rs_stream_exchange(int32_t device, int64_t id, char* err, size_t err_len);
int64_t foo_rs_stream_new(int32_t device, int32_t priority, char* err, size_t err_len);
int64_t foo_rs_stream_pool(int32_t device, int32_t high, char* err, size_t err_len);
int32_t foo_rs_stream_check(int32_t device, int64_t id, char* err, size_t err_len);
uint64_t foo_rs_event_create(int32_t device, int32_t timing, char* err, size_t err_len);
void foo_rs_event_destroy(uint64_t event);
int32_t foo_rs_event_record(uint64_t event, int32_t device, int64_t id, char* err, size_t err_len);
int32_t foo_rs_event_recorded(uint64_t event);
int32_t foo_rs_event_elapsed(uint64_t start, uint64_t end, double* out, char* err, size_t err_len);
uint64_t foo_rs_now_ns();
void* foo_rs_host_alloc(size_t nbytes, char* err, size_t err_len);
void foo_rs_host_free(void* ptr);
int32_t foo_rs_host_is_pinned(const void* ptr);
int32_t foo_rs_take_panic(char* buf, size_t len);
// rust/src/native.rs: the foo dtype code of a c10 ScalarType, or -1, and
// the names of the dtypes foo holds.
int32_t foo_rs_dtype_code(int32_t scalar_type);
const char* foo_rs_dtype_names();

}

namespace foo_rs {
namespace {

constexpr c10::DeviceType kFoo = c10::DeviceType::PrivateUse1;

// Every foo_rs_* entry point catches panics and returns its documented
// failure value (rust/src/ffi.rs). Where that value can also be an ordinary
// answer (an id, a seed, a count), `checked` asks Rust whether a panic
// caused it and raises its message as a c10 error. Deleters, destructors and
// noexcept overrides cannot raise: Rust reports their panics on stderr.
void check_panic() {
  char msg[512] = {0};
  TORCH_CHECK(foo_rs_take_panic(msg, sizeof(msg)) == 0, msg);
}

template <typename T, typename F>
T checked(T value, F failure) {
  if (value == static_cast<T>(failure)) check_panic();
  return value;
}

// Status-returning entries (0 on success, -1 only after a panic).
void check_status(int32_t status) {
  if (status != 0) check_panic();
}

int32_t device_count() { return checked(foo_rs_device_count(), -1); }

c10::DeviceIndex current_device() {
  return static_cast<c10::DeviceIndex>(checked(foo_rs_current_device(), -1));
}

c10::DeviceIndex checked_index(c10::DeviceIndex index) {
  const auto count = device_count();
  TORCH_CHECK(
      index >= 0 && index < count,
      "Invalid foo device index ", static_cast<int>(index), ": there are ",
      count, " foo devices (set FOO_RS_DEVICE_COUNT to change)");
  return index;
}

// The element types foo holds: Rust's table (rust/src/dtype.rs, through
// foo_rs_dtype_code, as native.cpp reads it); anything else is refused at
// allocation time (checked_dtype) and left out of the device capability.
bool foo_supports(c10::ScalarType t) { return foo_rs_dtype_code(static_cast<int32_t>(t)) >= 0; }

// ---- Allocator -----------------------------------------------------------

// torch.profiler(profile_memory=True): each allocation and free reported
// with the device's totals, as CUDA's caching allocator reports them.
void report_usage(void* ptr, int64_t delta, int32_t device) {
  size_t allocated = 0, reserved = 0;
  if (foo_rs_memory_totals(device, &allocated, &reserved) == 0) {
    c10::reportMemoryUsageToProfiler(ptr, delta, allocated, reserved, c10::Device(kFoo, device));
  }
}

void delete_block(void* ptr) {
  int32_t device = -1;
  const size_t size = foo_rs_free(ptr, &device);
  if (device >= 0 && c10::memoryProfilingEnabled()) report_usage(ptr, -static_cast<int64_t>(size), device);
}

struct FooAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(!foo_rs_in_bad_fork(), foo_rs_bad_fork_message());
    const auto device = current_device();
    char err[512];  // foo_rs_alloc NUL-terminates any message it writes
    err[0] = 0;
    void* ptr = foo_rs_alloc(device, nbytes, err, sizeof(err));
    // Null with no message is a zero-byte block; a panic's message is an internal error.
    if (ptr == nullptr && (nbytes != 0 || err[0] != 0)) {
      check_panic();
      if (c10::memoryProfilingEnabled()) {
        size_t allocated = 0, reserved = 0;
        foo_rs_memory_totals(device, &allocated, &reserved);
        c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(nbytes), allocated, reserved,
                                         c10::Device(kFoo, device));
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, err);
    }
    if (ptr != nullptr && c10::memoryProfilingEnabled()) report_usage(ptr, static_cast<int64_t>(nbytes), device);
    return {ptr, ptr, &delete_block, c10::Device(kFoo, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  // foo memory is host memory: a storage copy is a memcpy.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) std::memcpy(dest, src, count);
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { check_status(foo_rs_empty_cache(-1)); }

  // Tensor.record_stream: CUDA's allocator would hold the block until the
  // stream's pending work is done. foo's kernels run synchronously, so every
  // kernel queued on `stream` has finished by the time the tensor can be
  // freed: the block is reusable at once and nothing needs remembering. The
  // call is still checked (a foo block, a stream of its device).
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    TORCH_CHECK(stream.device_type() == kFoo, "record_stream: expected a foo stream, got ", stream);
    if (ptr.get() == nullptr) return;
    const auto d = checked(foo_rs_device_of_ptr(ptr.get()), -1);
    TORCH_CHECK(d >= 0, "record_stream: pointer ", ptr.get(), " was not allocated on any foo device");
    TORCH_CHECK(
        d == stream.device_index(), "record_stream: the tensor is on foo:", d, " but the stream is on foo:",
        static_cast<int>(stream.device_index()));
    check_stream(stream);
  }

  static void check_stream(const c10::Stream& stream) {
    char err[256] = {0};
    TORCH_CHECK(foo_rs_stream_check(stream.device_index(), stream.id(), err, sizeof(err)) == 1, err);
  }

  static int64_t stat(int32_t device, const char* key) { return checked(foo_rs_stat(device, key), int64_t{-1}); }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const int32_t d = checked_index(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const char* pools[3] = {"all", "small_pool", "large_pool"};
    auto fill = [&](c10::CachingAllocator::StatArray& arr, const std::string& name) {
      for (int p = 0; p < 3; ++p) {
        const std::string base = name + "." + pools[p] + ".";
        arr[p].current = stat(d, (base + "current").c_str());
        arr[p].peak = stat(d, (base + "peak").c_str());
        arr[p].allocated = stat(d, (base + "allocated").c_str());
        arr[p].freed = stat(d, (base + "freed").c_str());
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
    stats.num_alloc_retries = stat(d, "num_alloc_retries");
    stats.num_ooms = stat(d, "num_ooms");
    stats.num_device_alloc = stat(d, "num_device_alloc");
    stats.num_device_free = stat(d, "num_device_free");
    stats.max_split_size = stat(d, "max_split_size");
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_status(foo_rs_reset_accumulated_stats(checked_index(device)));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_status(foo_rs_reset_peak_stats(checked_index(device)));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free_bytes = 0, total_bytes = 0;
    check_status(foo_rs_mem_get_info(checked_index(device), &free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }
};

FooAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---- Stack traces for the allocator's history ---------------------------
//
// torch.foo.memory._record_memory_history keeps, in Rust
// (rust/src/allocator/history.rs), the stack of each allocation as CUDA's
// allocator does: a c10 CapturedTraceback (Python frames read from the
// interpreter, optionally C++ frames), which only C++ can gather. Rust holds
// them as opaque handles (a heap shared_ptr each) and gets frames back
// through foo_glue_symbolize when a snapshot is taken.

using TracebackPtr = std::shared_ptr<torch::CapturedTraceback>;

void* gather_traceback(int32_t cpp) noexcept {
  try {
    return new TracebackPtr(torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, cpp != 0));
  } catch (...) {
    return nullptr;  // a missing trace, not a failed allocation
  }
}

void release_traceback(void* handle) noexcept { delete static_cast<TracebackPtr*>(handle); }

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

  c10::Device getDevice() const override { return c10::Device(kFoo, current_device()); }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kFoo);
    check_status(foo_rs_set_device(checked_index(d.index())));
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    foo_rs_set_device(d.index());
  }

  // Streams and events: the state (which streams exist, each thread's
  // current stream, event timestamps) is in Rust (rust/src/stream.rs).
  // Kernels run synchronously on the calling thread, so work submitted to a
  // stream has completed when its call returns: queries are true, waits and
  // synchronizations return at once, and an event completes when recorded.
  static c10::Device resolve(c10::Device d) {
    return c10::Device(kFoo, d.has_index() ? checked_index(d.index()) : current_device());
  }

  static c10::Stream make_stream(c10::Device d, int64_t id) {
    return c10::Stream(c10::Stream::UNSAFE, d, static_cast<c10::StreamId>(id));
  }

  c10::Stream getStream(c10::Device d) const override {
    const auto dev = resolve(d);
    return make_stream(dev, checked(foo_rs_stream_current(dev.index()), int64_t{-1}));
  }

  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(resolve(d), 0); }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    const auto dev = resolve(d);
    char err[256] = {0};
    const int64_t id = foo_rs_stream_pool(dev.index(), isHighPriority ? 1 : 0, err, sizeof(err));
    TORCH_CHECK(id >= 0, err);
    return make_stream(dev, id);
  }

  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    const auto dev = resolve(d);
    char err[256] = {0};
    const int64_t id = foo_rs_stream_new(dev.index(), priority, err, sizeof(err));
    TORCH_CHECK(id >= 0, err);
    return make_stream(dev, id);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    TORCH_CHECK(s.device_type() == kFoo, "expected a foo stream, got ", s);
    char err[256] = {0};
    const int64_t prev = foo_rs_stream_exchange(s.device_index(), s.id(), err, sizeof(err));
    TORCH_CHECK(prev >= 0, err);
    return make_stream(s.device(), prev);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event != nullptr) foo_rs_event_destroy(reinterpret_cast<uint64_t>(event));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(), "Event device index ",
        static_cast<int>(device_index), " does not match recording stream's device index ",
        static_cast<int>(stream.device_index()), ".");
    char err[256] = {0};
    if (*event == nullptr) {
      const uint64_t id = foo_rs_event_create(
          stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0, err, sizeof(err));
      TORCH_CHECK(id != 0, err);
      *event = reinterpret_cast<void*>(id);
    }
    TORCH_CHECK(
        foo_rs_event_record(reinterpret_cast<uint64_t>(*event), stream.device_index(), stream.id(), err,
                            sizeof(err)) == 0,
        err);
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    FooAllocator::check_stream(stream);  // the event's work is done: nothing to wait for
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    TORCH_CHECK(checked(foo_rs_event_recorded(reinterpret_cast<uint64_t>(event)), -1) >= 0, "foo: unknown event");
    return true;
  }

  void synchronizeEvent(void* event) const override { queryEvent(event); }

  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(
        event1 != nullptr && event2 != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    double ms = 0.0;
    char err[256] = {0};
    TORCH_CHECK(
        foo_rs_event_elapsed(reinterpret_cast<uint64_t>(event1), reinterpret_cast<uint64_t>(event2), &ms, err,
                             sizeof(err)) == 0,
        err);
    return ms;
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    g_allocator.recordStream(data_ptr, stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    // noexcept: a panic (-1, reported on stderr by Rust) counts as no devices.
    return static_cast<c10::DeviceIndex>(std::max(0, foo_rs_device_count()));
  }

#if __has_include(<c10/core/DeviceCapability.h>)
  // torch.accelerator.get_device_capability: the dtypes foo holds.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    resolve(d);
    c10::DeviceCapability cap;
#define FOO_CAPABILITY(_, name) \
  cap.capability_data.supported_scalar_types.has_##name = foo_supports(c10::ScalarType::name) ? 1 : 0;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(FOO_CAPABILITY)
#undef FOO_CAPABILITY
    return cap;
  }
#endif

  bool queryStream(const c10::Stream& stream) const override {
    FooAllocator::check_stream(stream);
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override { FooAllocator::check_stream(stream); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { checked_index(device_index); }
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

  void set_current_seed(uint64_t seed) override { check_status(foo_rs_gen_set_seed(id_, seed)); }
  void set_offset(uint64_t offset) override { check_status(foo_rs_gen_set_offset(id_, offset)); }
  uint64_t get_offset() const override { return checked(foo_rs_gen_offset(id_), uint64_t{0}); }
  uint64_t current_seed() const override { return checked(foo_rs_gen_seed(id_), uint64_t{0}); }

  uint64_t seed() override {
    const uint64_t s = checked(foo_rs_gen_random_seed(), uint64_t{0});
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
    return new FooGeneratorImpl(device().index(), checked(foo_rs_gen_clone(id_), UINT64_MAX), true);
  }

  uint64_t id_;
  bool owned_;
};

// ---- Pinned host memory --------------------------------------------------
// Host (CPU) blocks from foo's caching host allocator (rust/src/allocator/host.rs).

void delete_host_block(void* ptr) { foo_rs_host_free(ptr); }

struct FooHostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(!foo_rs_in_bad_fork(), foo_rs_bad_fork_message());
    char err[512];  // foo_rs_host_alloc NUL-terminates any message it writes
    err[0] = 0;
    void* ptr = foo_rs_host_alloc(nbytes, err, sizeof(err));
    if (ptr == nullptr && (nbytes != 0 || err[0] != 0)) {
      check_panic();
      TORCH_CHECK_WITH(OutOfMemoryError, false, err);
    }
    return {ptr, ptr, &delete_host_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_host_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) std::memcpy(dest, src, count);
  }
};

FooHostAllocator g_host_allocator;

// ---- Profiler ------------------------------------------------------------
// What torch's profiler asks of a PrivateUse1 device when it times ops by
// device events (torch.autograd.profiler.profile(use_device="foo"), and
// torch.profiler on torch versions that take that route): an event is a
// timestamp on foo's clock. Kernels are synchronous, so the time between the
// events recorded at an op's start and end is the time its kernels ran.

struct FooProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device != nullptr) *device = current_device();
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    auto* stamp = new uint64_t(checked(foo_rs_now_ns(), uint64_t{0}));
    *event = std::shared_ptr<void>(stamp, [](void* p) { delete static_cast<uint64_t*>(p); });
  }

  // Microseconds between two events.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* event,
                const torch::profiler::impl::ProfilerVoidEventStub* event2) const override {
    TORCH_CHECK(event && event2 && *event && *event2, "foo profiler: elapsed() of an unrecorded event");
    const auto t0 = *static_cast<const uint64_t*>(event->get());
    const auto t1 = *static_cast<const uint64_t*>(event2->get());
    return static_cast<float>((static_cast<double>(t1) - static_cast<double>(t0)) / 1000.0);
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const auto n = device_count();
    for (int32_t i = 0; i < n; ++i) {
      c10::DeviceGuard guard(c10::Device(kFoo, static_cast<c10::DeviceIndex>(i)));
      op(i);
    }
  }

  void synchronize() const override {}  // kernels are synchronous
};

FooProfilerStubs g_profiler_stubs;

#ifdef FOO_KINETO_PLUGIN
// ---- Kineto plugin (torch >= 2.15) ----------------------------------------
// torch.profiler with ProfilerActivity.PrivateUse1 asks this profiler for
// foo's device activity. foo's "device" executes each op's kernels
// synchronously inside the op, so the device track is the time foo ops spend
// doing their own work: while a session runs, a RecordFunction callback
// watches every op that touches foo (a foo tensor argument, or a foo device
// for a factory) and records the op's self time as kernel segments (the time
// of nested ops is cut out and recorded under their own names). Segments never
// overlap and are linked by correlation id to the CPU op that ran them, so
// key_averages() gives each op its own device time and the totals add up.

struct KernelRecord {
  std::string name;
  int64_t start_ns;
  int64_t end_ns;
  int32_t device;
  int64_t stream;
  uint64_t correlation;
  int32_t thread;
};

std::mutex g_prof_mutex;
std::vector<KernelRecord> g_prof_records;

// The correlation ids Kineto pushes for the ops in flight on this thread.
thread_local std::vector<uint64_t> t_correlation;

struct OpFrame final : at::ObserverContext {
  bool foo = false;
  std::string name;
  int64_t segment_start = 0;
  int32_t device = 0;
  uint64_t correlation = 0;
};
thread_local std::vector<OpFrame*> t_frames;
// Sessions are numbered so that a thread's frames left from an earlier session
// (an op in flight when it stopped) are dropped, never dereferenced.
std::atomic<uint64_t> g_prof_session{0};
thread_local uint64_t t_session = 0;

bool is_foo_value(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    return t.defined() && t.device().type() == kFoo;
  }
  if (v.isDevice()) return v.toDevice().type() == kFoo;
  if (v.isTensorList()) {
    for (const auto& t : v.toTensorList()) {
      if (static_cast<at::Tensor>(t).defined() && static_cast<at::Tensor>(t).device().type() == kFoo) return true;
    }
  }
  if (v.isList()) {
    for (const auto& e : v.toListRef()) {
      if (is_foo_value(e)) return true;
    }
  }
  return false;
}

void emit(const OpFrame& f, int64_t end_ns) {
  if (end_ns <= f.segment_start) return;
  std::lock_guard<std::mutex> lock(g_prof_mutex);
  // A profiler observer must not raise (it may run in RecordFunction's
  // destructor): a panic's -1 is recorded as the stream (Rust's panic hook
  // has printed the message).
  g_prof_records.push_back({f.name, f.segment_start, end_ns, f.device,
                            foo_rs_stream_current(f.device), f.correlation,
                            static_cast<int32_t>(at::RecordFunction::currentThreadId())});
}

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  if (t_session != g_prof_session.load()) {
    t_frames.clear();
    t_session = g_prof_session.load();
  }
  auto frame = std::make_unique<OpFrame>();
  for (const auto& v : fn.inputs()) {
    if (is_foo_value(v)) {
      frame->foo = true;
      break;
    }
  }
  const int64_t now = c10::getTime();
  if (frame->foo) {
    frame->name = std::string(fn.name()) + " (foo)";  // a kernel row apart from the CPU op's
    frame->device = foo_rs_current_device();  // not raising in an observer (see emit)
    frame->segment_start = now;
  }
  // The enclosing foo op's work stops here; its next segment starts when this op ends.
  for (auto it = t_frames.rbegin(); it != t_frames.rend(); ++it) {
    if ((*it)->foo) {
      if ((*it)->correlation == 0 && !t_correlation.empty()) (*it)->correlation = t_correlation.back();
      emit(**it, now);
      break;
    }
  }
  t_frames.push_back(frame.get());
  return frame;
}

void on_op_exit(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  auto* frame = static_cast<OpFrame*>(ctx);
  if (frame == nullptr) return;
  const int64_t now = c10::getTime();
  if (!t_frames.empty() && t_frames.back() == frame) t_frames.pop_back();
  if (frame->foo) {
    if (frame->correlation == 0 && !t_correlation.empty()) frame->correlation = t_correlation.back();
    emit(*frame, now);
  }
  for (auto it = t_frames.rbegin(); it != t_frames.rend(); ++it) {
    if ((*it)->foo) {
      (*it)->segment_start = now;
      break;
    }
  }
}

class FooProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit FooProfilerSession(bool record) : record_(record) {}

  void start() override {
    if (!record_) return;
    {
      std::lock_guard<std::mutex> lock(g_prof_mutex);
      g_prof_records.clear();
    }
    ++g_prof_session;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(on_op_enter, on_op_exit).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (!record_ || handle_ == 0) return;
    at::removeCallback(handle_);
    handle_ = 0;
    std::lock_guard<std::mutex> lock(g_prof_mutex);
    records_ = std::move(g_prof_records);
    g_prof_records.clear();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(0, 0, "foo");
    for (const auto& r : records_) {
      auto act = std::make_unique<libkineto::GenericTraceActivity>(
          buffer_->span, libkineto::ActivityType::CONCURRENT_KERNEL, r.name);
      act->startTime = r.start_ns;
      act->endTime = r.end_ns;
      act->id = static_cast<int32_t>(r.correlation);
      act->device = r.device;
      act->resource = r.stream;
      act->threadId = r.thread;
      act->linked = r.correlation != 0 ? linked(static_cast<int32_t>(r.correlation)) : nullptr;
      // (No addMetadata: its inline fmt::format needs a libfmt torch does not export.)
      devices_.insert(r.device);
      streams_.insert({r.device, r.stream});
      buffer_->activities.push_back(std::move(act));
    }
    for (const auto& act : buffer_->activities) logger.handleGenericActivity(*act);
    records_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    const int32_t d = devices_.empty() ? foo_rs_current_device() : *devices_.begin();
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{d, d, "foo " + std::to_string(d), "foo"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [d, st] : streams_) {
      out.push_back(libkineto::ResourceInfo{st, st, d, "foo stream " + std::to_string(st)});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

  ~FooProfilerSession() override {
    if (handle_ != 0) {
      at::removeCallback(handle_);
    }
  }

 private:
  bool record_;
  at::CallbackHandle handle_ = 0;
  std::vector<KernelRecord> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<int32_t> devices_;
  std::set<std::pair<int32_t, int64_t>> streams_;
};

class FooActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    bool record = false;
    for (auto t : activity_types) record = record || activities_.count(t) != 0;
    return std::make_unique<FooProfilerSession>(record);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"foo"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
      libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};
#endif  // FOO_KINETO_PLUGIN

// ---- Hooks ---------------------------------------------------------------

struct FooHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  void init() const override {}

  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_status(foo_rs_set_device(checked_index(device)));
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
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
      const auto n = device_count();
      for (int32_t i = 0; i < n; ++i) {
        defaults.emplace_back(c10::make_intrusive<FooGeneratorImpl>(
            static_cast<c10::DeviceIndex>(i), checked(foo_rs_gen_default(i), UINT64_MAX), false));
      }
    });
    const auto idx = device_index < 0 ? getCurrentDevice() : checked_index(device_index);
    return defaults[idx];
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    const auto idx = device_index < 0 ? getCurrentDevice() : checked_index(device_index);
    return at::Generator(c10::make_intrusive<FooGeneratorImpl>(idx, checked(foo_rs_gen_new(idx), UINT64_MAX), true));
  }

  at::Device getDeviceFromPtr(void* data) const override {
    const auto d = checked(foo_rs_device_of_ptr(data), -1);
    TORCH_CHECK(d >= 0, "pointer ", data, " was not allocated on any foo device");
    return c10::Device(kFoo, static_cast<c10::DeviceIndex>(d));
  }

  bool isPinnedPtr(const void* data) const override { return checked(foo_rs_host_is_pinned(data), 0) != 0; }

  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_host_allocator; }

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

// Refuses, at allocation time, element types foo cannot hold (foo_supports),
// so no kernel ever sees one.
c10::ScalarType checked_dtype(std::optional<c10::ScalarType> dtype) {
  const auto t = c10::dtype_or_default(dtype);
  TORCH_CHECK(foo_supports(t), "foo does not support dtype ", t, " (supported: ", foo_rs_dtype_names(), ")");
  return t;
}

// view_as_complex as CPU's, refusing a complex dtype foo does not hold (complex32).
at::Tensor view_as_complex(const at::Tensor& self) {
  if (self.scalar_type() == c10::ScalarType::Half) checked_dtype(c10::ScalarType::ComplexHalf);
  return at::native::view_as_complex(self);
}

c10::Device foo_device(std::optional<c10::Device> device) {
  if (!device.has_value()) return c10::Device(kFoo, current_device());
  if (!device->has_index()) return c10::Device(kFoo, current_device());
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

// Tensor.unfold is a strided view; ATen's kernel only computes sizes and strides.
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
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


// Tensor.record_stream (ATen has kernels for CUDA only): the allocator's
// recordStream, which documents what it means for foo.
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == kFoo, "record_stream: expected a foo stream, got ", s);
  g_allocator.recordStream(self.storage().data_ptr(), s);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("view.dtype", TORCH_FN(view_dtype));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
}

FooHooks g_hooks;

}  // namespace
}  // namespace foo_rs

// torch's intra-op thread count (torch.set_num_threads), which foo's kernels follow.
extern "C" int foo_glue_num_threads() { return at::get_num_threads(); }

// autocast.cpp: torch.autocast("foo")'s kernels (registered when this links).
extern "C" void foo_glue_autocast_linked();

// Symbolizes `n` traceback handles (from gather_traceback): `frame` is called
// for each frame of each, in order (innermost first), with the handle's
// index. Called from Python (the GIL held), as Python frames need it.
// Returns 0, or -1 after a C++ exception (its message in `err`).
extern "C" int foo_glue_symbolize(const void* const* handles, size_t n,
                                  void (*frame)(void* ctx, size_t index, const char* filename,
                                                const char* name, uint64_t line),
                                  void* ctx, char* err, size_t err_len) {
  try {
    std::vector<torch::CapturedTraceback*> tracebacks;
    tracebacks.reserve(n);
    for (size_t i = 0; i < n; ++i) tracebacks.push_back(static_cast<const foo_rs::TracebackPtr*>(handles[i])->get());
    const torch::SymbolizedTracebacks s = torch::symbolize(tracebacks);
    for (size_t i = 0; i < s.tracebacks.size(); ++i) {
      for (const uint64_t f : s.tracebacks[i]) {
        const auto& fr = s.all_frames.at(f);
        frame(ctx, i, fr.filename.c_str(), fr.funcname.c_str(), fr.lineno);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "%s", e.what());
    return -1;
  }
}

// Called once from the PyO3 module's init, after torch is loaded.
extern "C" void foo_glue_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    foo_glue_autocast_linked();
    foo_rs_set_traceback_hooks(&foo_rs::gather_traceback, &foo_rs::release_traceback);
    at::RegisterPrivateUse1HooksInterface(&foo_rs::g_hooks);
    torch::profiler::impl::registerPrivateUse1Methods(&foo_rs::g_profiler_stubs);
#ifdef FOO_KINETO_PLUGIN
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::unique_ptr<libkineto::IActivityProfiler>(new foo_rs::FooActivityProfiler()); });
#endif
  });
}
