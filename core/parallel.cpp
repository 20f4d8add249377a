// The OpenMP side of parallel_for, kept out of headers so users of ember need
// no -fopenmp.
#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace ember {

void set_num_threads(int num_threads) {
  EMBER_CHECK(num_threads >= 1, "set_num_threads: expected a positive thread count, got {}", num_threads);
  omp_set_num_threads(num_threads);
}

int get_num_threads() { return omp_get_max_threads(); }

bool in_parallel_region() { return omp_in_parallel() != 0; }

namespace detail {

void parallel_for_omp(int64_t begin, int64_t end, int64_t grain, FunctionRef<void(int64_t, int64_t)> body) {
  int64_t max_chunks = (end - begin + grain - 1) / grain;
  int threads = int(std::min<int64_t>(omp_get_max_threads(), max_chunks));
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    int64_t count = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t chunk = (end - begin + count - 1) / count;
    int64_t lo = begin + id * chunk, hi = std::min(end, lo + chunk);
    if (lo < hi) {
      try {
        body(lo, hi);
      } catch (...) {
#pragma omp critical
        error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail
}  // namespace ember
