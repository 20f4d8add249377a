// What the oneDNN kernels (matmul.cpp, conv.cpp) share: one engine, a stream
// and a scratchpad per thread, a thread-safe LRU cache of primitives
// (core/primitive_cache.h), and the switch that turns bf16 primitives off.
// Tests: tests/core/test_onednn_threads.cpp and each kernel's own.
//
// Note [oneDNN primitive cache]: creating a primitive costs tens of
// microseconds, as much as a 64x64 GEMM; every primitive is therefore created
// once per (shapes, strides, dtype) and kept with its memory objects, so a
// repeated call only swaps data pointers and executes. The cache serves every
// thread (Note [oneDNN scratchpads] says what that needs).
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

// Note [oneDNN scratchpads]: many primitives need a scratch buffer (a GEMM
// that splits its k dim over threads keeps their partial sums there, a
// backward-weights convolution its per-thread reductions). In the default
// scratchpad_mode::library, oneDNN as packaged here (built without
// ONEDNN_ENABLE_CONCURRENT_EXEC) keeps one such buffer per thread, sized by
// the primitives created on that thread, and a primitive uses the buffer of
// whichever thread runs it: run from another thread (ember's cache hands a
// primitive to every thread) it writes past a buffer sized for smaller
// primitives, or into none: wrong values (the fused attention's tiles on
// two threads) or a crash (tests/core/test_onednn_threads.cpp, where the
// workers have none). So every primitive ember creates takes
// onednn_attributes() (scratchpad_mode::user) and runs with
// DNNL_ARG_SCRATCHPAD bound to onednn_scratchpad(): the calling thread's own
// buffer, grown to the largest size the thread has needed and never shrunk,
// so a thread that repeats its shapes allocates nothing.
dnnl::primitive_attr onednn_attributes();

// The calling thread's scratchpad, at least `bytes` long (`bytes` > 0): valid
// until the thread's next call with a larger size.
const dnnl::memory& onednn_scratchpad(size_t bytes);

// The scratchpad a primitive needs, in bytes (0: none).
size_t scratchpad_bytes(const dnnl::primitive& primitive);

// Runs `primitive` on the calling thread's stream and waits. `args` holds
// `count` arguments and room for one more: the thread's scratchpad, bound
// when the primitive needs `scratchpad` bytes. The C API, with the
// arguments on the stack: the C++ API builds a vector per call.
void onednn_execute(const dnnl::primitive& primitive, size_t scratchpad, dnnl_exec_arg_t* args, int count);

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
// Inside a parallel region (the fused attention's tasks) every primitive runs
// on one thread: OpenMP does not nest there, so more would only split the
// work for one thread to do in turn.
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
// builds its own from the descriptors instead of waiting. The scratchpad is
// the caller's thread's (Note [oneDNN scratchpads]).
// A call goes through onednn_execute, and a handle that has not changed since
// the last call (a weight reused across steps) is not set again.
struct CachedPrimitive {
  static constexpr int kMaxArgs = 8;  // data arguments; the scratchpad comes on top

  std::unordered_map<int, dnnl::memory> args;  // DNNL_ARG_* -> memory with a swappable handle
  std::mutex busy;

  // Takes the primitive to run (created with onednn_attributes()).
  void set_primitive(dnnl::primitive primitive);

  // Runs the primitive on `handles` (DNNL_ARG_* -> data pointer, for every arg).
  void execute(std::initializer_list<std::pair<int, void*>> handles);

 private:
  dnnl::primitive primitive_;
  size_t scratchpad_bytes_ = 0;

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
