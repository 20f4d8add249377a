// What the oneDNN kernels (matmul.cpp, conv.cpp) share: one engine, a stream
// per thread, a thread-safe LRU cache of primitives (core/primitive_cache.h),
// and the switch that turns
// bf16 primitives off. Note [oneDNN primitive cache]: creating a primitive
// costs tens of microseconds, as much as a 64x64 GEMM; every primitive is
// therefore created once per (shapes, strides, dtype) and kept with its memory
// objects, so a repeated call only swaps data pointers and executes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/primitive_cache.h"

namespace ember::cpu {

const dnnl::engine& onednn_engine();
// Executions are synchronous on CPU; a stream per thread keeps concurrent
// callers from sharing one.
dnnl::stream& onednn_stream();

dnnl::memory::data_type onednn_type(DType dtype);

// Whether bf16 runs on oneDNN's bf16 primitives (AVX512 CPUs) or converts to
// f32. Starts on unless the environment sets EMBER_DISABLE_BF16_GEMM=1; it also
// turns off by itself the first time oneDNN reports bf16 unimplemented.
// Tests flip it to cover the fallback on any CPU.
bool onednn_bf16_enabled();
void set_onednn_bf16_enabled(bool enabled);

// Note [Small primitives run on one thread]: with OMP_WAIT_POLICY=passive the
// pool's threads sleep between regions, and waking one costs tens of
// microseconds: more than a whole 64x64 GEMM. oneDNN's OpenMP build splits work
// over omp_get_max_threads() of the calling thread, read when a primitive is
// created and when it runs, so a small problem is created and run with that
// (thread-local) setting at 1, and its primitive is cached apart from the
// threaded one (the thread count is part of the key). The threshold is in
// multiply-adds: a second thread saves half of a 1-thread f32 time of about
// 30 us at 128^3, 90 us at 192^3, 220 us at 256^3 (this 2-core machine), against
// a wake-up of tens of microseconds, so the split starts at 192^3. bf16 runs
// several times faster per multiply-add and would gain from a higher threshold;
// measure on a quiet machine (bench_gemm, 2 threads, passive) before tuning.
inline constexpr int64_t kSingleThreadMultiplyAdds = int64_t(192) * 192 * 192;

// The thread count a primitive of `multiply_adds` work runs on.
int onednn_threads(int64_t multiply_adds);

// Sets the calling thread's OpenMP thread count for its lifetime, restoring
// the previous one after; a no-op when the count is already `threads`.
class OnednnThreadsGuard {
 public:
  explicit OnednnThreadsGuard(int threads);
  ~OnednnThreadsGuard();
  OnednnThreadsGuard(const OnednnThreadsGuard&) = delete;
  OnednnThreadsGuard& operator=(const OnednnThreadsGuard&) = delete;

 private:
  int previous_;
  bool changed_;
};

// Whether a primitive descriptor fell through to oneDNN's naive reference
// implementation (correct, but far slower than converting the operands).
bool is_reference_implementation(const dnnl::primitive_desc_base& pd);

// A primitive with its memory objects, reused across calls. One caller at a
// time owns the memory objects (`busy`); a concurrent caller of the same shape
// builds its own from the descriptors instead of waiting.
// A call goes straight to oneDNN's C API with the arguments on the stack (the
// C++ API builds a vector per call), and a handle that has not changed since
// the last call (a weight reused across steps) is not set again.
struct CachedPrimitive {
  static constexpr int kMaxArgs = 8;

  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;  // DNNL_ARG_* -> memory with a swappable handle
  std::mutex busy;

  // Runs the primitive on `handles` (DNNL_ARG_* -> data pointer, for every arg).
  void execute(std::initializer_list<std::pair<int, void*>> handles);

 private:
  // An arg's memory object and the handle it holds now; guarded by `busy`.
  struct Binding {
    int arg = 0;
    dnnl::memory* memory = nullptr;
    void* handle = nullptr;
  };
  Binding& binding_of(int arg);

  Binding bindings_[kMaxArgs];
  int binding_count_ = 0;
};

}  // namespace ember::cpu
