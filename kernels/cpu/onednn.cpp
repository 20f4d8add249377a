// The shared oneDNN state of the CPU kernels (see kernels/cpu/onednn.h).
#include "kernels/cpu/onednn.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/ember_variables.h"

namespace ember::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

dnnl::primitive_attr onednn_attributes() {
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attributes;
}

const dnnl::memory& onednn_scratchpad(size_t bytes) {
  thread_local dnnl::memory scratchpad;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    // Grown by half again over the request, so a thread whose shapes creep up
    // reallocates a few times, not on every new shape.
    size_t grown = std::max(bytes, capacity + capacity / 2);
    scratchpad = dnnl::memory(dnnl::memory::desc({dnnl::memory::dim(grown)}, dnnl::memory::data_type::u8,
                                                 dnnl::memory::format_tag::x),
                              onednn_engine());
    capacity = grown;
  }
  return scratchpad;
}

size_t scratchpad_bytes(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_get_primitive_desc(primitive.get(), &pd),
                          "could not get a primitive descriptor");
  const dnnl_memory_desc_t* scratchpad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  return scratchpad == nullptr ? 0 : dnnl_memory_desc_get_size(scratchpad);
}

void onednn_execute(const dnnl::primitive& primitive, size_t scratchpad, dnnl_exec_arg_t* args, int count) {
  if (scratchpad > 0) args[count++] = {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(scratchpad).get()};
  dnnl::stream& stream = onednn_stream();
  dnnl::error::wrap_c_api(dnnl_primitive_execute(primitive.get(), stream.get(), count, args),
                          "could not execute a primitive");
  stream.wait();
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
  static std::atomic<bool> enabled = !flag_variable("EMBER_DISABLE_BF16_GEMM").value_or(false);
  return enabled;
}
}  // namespace

bool onednn_bf16_enabled() { return bf16_enabled().load(std::memory_order_relaxed); }
void set_onednn_bf16_enabled(bool enabled) { bf16_enabled().store(enabled, std::memory_order_relaxed); }

int onednn_threads(int64_t multiply_adds) {
  return multiply_adds < kSingleThreadMultiplyAdds || omp_in_parallel() ? 1 : omp_get_max_threads();
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

void CachedPrimitive::set_primitive(dnnl::primitive primitive) {
  scratchpad_bytes_ = scratchpad_bytes(primitive);
  primitive_ = std::move(primitive);
}

void CachedPrimitive::execute(std::initializer_list<std::pair<int, void*>> handles) {
  EMBER_ASSERT(handles.size() <= size_t(kMaxArgs), "CachedPrimitive: more than {} arguments", kMaxArgs);
  dnnl_exec_arg_t exec_args[kMaxArgs + 1];
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
  onednn_execute(primitive_, scratchpad_bytes_, exec_args, count);
}

}  // namespace ember::cpu
