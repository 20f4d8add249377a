// The shared oneDNN state of the CPU kernels (see kernels/cpu/onednn.h).
#include "kernels/cpu/onednn.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ember::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

dnnl::memory::data_type onednn_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: EMBER_ASSERT(false, "oneDNN has no kernels for {}", dtype);
  }
}

namespace {
std::atomic<bool>& bf16_enabled() {
  static std::atomic<bool> enabled = [] {
    const char* value = std::getenv("EMBER_DISABLE_BF16_GEMM");
    return value == nullptr || std::strcmp(value, "1") != 0;
  }();
  return enabled;
}
}  // namespace

bool onednn_bf16_enabled() { return bf16_enabled().load(std::memory_order_relaxed); }
void set_onednn_bf16_enabled(bool enabled) { bf16_enabled().store(enabled, std::memory_order_relaxed); }

int onednn_threads(int64_t multiply_adds) {
  return multiply_adds < kSingleThreadMultiplyAdds ? 1 : omp_get_max_threads();
}

OnednnThreadsGuard::OnednnThreadsGuard(int threads)
    : previous_(omp_get_max_threads()), changed_(threads != previous_) {
  if (changed_) omp_set_num_threads(threads);
}

OnednnThreadsGuard::~OnednnThreadsGuard() {
  if (changed_) omp_set_num_threads(previous_);
}

bool is_reference_implementation(const dnnl::primitive_desc_base& pd) {
  return std::strncmp(pd.impl_info_str(), "ref", 3) == 0;
}

CachedPrimitive::Binding& CachedPrimitive::binding_of(int arg) {
  for (int i = 0; i < binding_count_; ++i)
    if (bindings_[i].arg == arg) return bindings_[i];
  EMBER_ASSERT(binding_count_ < kMaxArgs, "CachedPrimitive: more than {} arguments", kMaxArgs);
  Binding& binding = bindings_[binding_count_++];
  binding.arg = arg, binding.memory = &args.at(arg), binding.handle = binding.memory->get_data_handle();
  return binding;
}

void CachedPrimitive::execute(std::initializer_list<std::pair<int, void*>> handles) {
  EMBER_ASSERT(handles.size() <= size_t(kMaxArgs), "CachedPrimitive: more than {} arguments", kMaxArgs);
  dnnl_exec_arg_t exec_args[kMaxArgs];
  int count = 0;
  std::vector<dnnl::memory> own;  // a concurrent caller's memory objects
  std::unique_lock lock(busy, std::try_to_lock);
  if (lock.owns_lock()) {
    for (auto& [arg, handle] : handles) {
      Binding& binding = binding_of(arg);
      if (binding.handle != handle) binding.memory->set_data_handle(handle), binding.handle = handle;
      exec_args[count++] = {arg, binding.memory->get()};
    }
  } else {
    own.reserve(handles.size());
    for (auto& [arg, handle] : handles) {
      own.emplace_back(args.at(arg).get_desc(), onednn_engine(), handle);
      exec_args[count++] = {arg, own.back().get()};
    }
  }
  dnnl::stream& stream = onednn_stream();
  dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream.get(), count, exec_args),
                          "could not execute a primitive");
  stream.wait();
}

}  // namespace ember::cpu
