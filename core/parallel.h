// CPU parallelism. ember's kernels and oneDNN share one OpenMP pool; work is
// split only above a grain size, so small tensors never pay for threads.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace ember {

// Work below this many elements stays on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

void set_num_threads(int num_threads);
int get_num_threads();
bool in_parallel_region();

// A non-owning reference to a callable: no allocation, one indirect call.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>, int> = 0>
  FunctionRef(F&& f)  // NOLINT: implicit by design
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(args...); }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

namespace detail {
void parallel_for_omp(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> body);
}

// Calls body(chunk_begin, chunk_end) over [begin, end), in parallel when the
// range is larger than `grain` and more than one thread is available.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& body) {
  if (end - begin <= grain || get_num_threads() == 1 || in_parallel_region()) {
    if (end > begin) body(begin, end);
    return;
  }
  detail::parallel_for_omp(begin, end, grain, body);
}

}  // namespace ember
