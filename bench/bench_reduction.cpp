// Reductions at 1M f32 elements ([1024, 1024]): sum over the last dim (each
// row contiguous), sum over the first dim (strided across rows) and softmax
// over the last dim, in GB/s of bytes each op must move; both sums in f16 and
// bf16 too (accumulated in f32).
// Run by scripts/bench.sh; figures go to bench/RESULTS.md.
#include <fmt/format.h>

#include <string>

#include "bench_support.h"
#include "core/ops/reduction.h"
#include "core/parallel.h"

namespace ember::bench {
namespace {

constexpr int64_t kRows = 1024, kColumns = 1024;

void set_counters(benchmark::State& state, int64_t bytes) {
  state.counters["bytes/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

// Reads the whole input once and writes one value per reduced row or column.
void sum_over(benchmark::State& state, int64_t dim, DType dtype) {
  Tensor input = uniform_tensor({kRows, kColumns}, dtype, 1);
  warm_up(state, [&] { return sum(input, {dim}); });
  for (auto _ : state) {
    Tensor total = sum(input, {dim});
    benchmark::DoNotOptimize(total.data_ptr());
  }
  int64_t outputs = dim == 0 ? kColumns : kRows;
  set_counters(state, (kRows * kColumns + outputs) * element_size(dtype));
}

// Reads the input and writes the output once each (the minimum; the max and
// the normaliser need more passes over a row, which cache should absorb).
void softmax_last(benchmark::State& state) {
  Tensor input = uniform_tensor({kRows, kColumns}, DType::f32, 1);
  warm_up(state, [&] { return softmax(input, 1); });
  for (auto _ : state) {
    Tensor probabilities = softmax(input, 1);
    benchmark::DoNotOptimize(probabilities.data_ptr());
  }
  set_counters(state, 2 * kRows * kColumns * int64_t(sizeof(float)));
}

void register_all() {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string suffix = dtype == DType::f32 ? std::string() : fmt::format("_{}", dtype_name(dtype));
    const std::string last = fmt::format("reduction/sum_last_dim{}/1024x1024", suffix);
    const std::string first = fmt::format("reduction/sum_first_dim{}/1024x1024", suffix);
    benchmark::RegisterBenchmark(last.c_str(), sum_over, int64_t(1), dtype)->UseRealTime();
    benchmark::RegisterBenchmark(first.c_str(), sum_over, int64_t(0), dtype)->UseRealTime();
  }
  benchmark::RegisterBenchmark("reduction/softmax_last_dim/1024x1024", softmax_last)->UseRealTime();
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  ember::bench::register_all();
  ember::bench::RecordingReporter reporter;
  return ember::bench::run_benchmarks(argc, argv, reporter) ? 0 : 1;
}
