// The shared oneDNN state of the CPU kernels (see kernels/cpu/onednn.h).
#include "kernels/cpu/onednn.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

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

bool is_reference_implementation(const dnnl::primitive_desc_base& pd) {
  return std::strncmp(pd.impl_info_str(), "ref", 3) == 0;
}

void CachedPrimitive::execute(std::initializer_list<std::pair<int, void*>> handles) {
  std::unique_lock lock(busy, std::try_to_lock);
  if (lock.owns_lock()) {
    for (auto& [arg, handle] : handles) args.at(arg).set_data_handle(handle);
    primitive.execute(onednn_stream(), args);
  } else {
    std::unordered_map<int, dnnl::memory> own;
    for (auto& [arg, handle] : handles) own.emplace(arg, dnnl::memory(args.at(arg).get_desc(), onednn_engine(), handle));
    primitive.execute(onednn_stream(), own);
  }
  onednn_stream().wait();
}

}  // namespace ember::cpu
