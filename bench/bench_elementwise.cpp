// Element-wise throughput: ember's add, a*b+c and addcmul against a STREAM-style triad
// (a plain OpenMP loop on the same threads) in the same run, in GB/s of bytes
// each op must move; add in f16 and bf16 too (computed in f32, rounded back);
// plus the per-op overhead of a 1-element add.
// Run by scripts/bench.sh; figures go to bench/RESULTS.md.
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_support.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/parallel.h"

namespace ember::bench {
namespace {

constexpr int64_t kSizes[] = {int64_t(1) << 10, int64_t(1) << 20, int64_t(1) << 24};

std::string size_label(int64_t n) {
  if (n >= (int64_t(1) << 20)) return std::to_string(n >> 20) + "M";
  return std::to_string(n >> 10) + "K";
}

std::string run_name(const char* op, const char* side, int64_t n) {
  return std::string("elementwise/") + op + "/" + side + "/" + size_label(n);
}

// `arrays` arrays of elements of `bytes_per_element` bytes are read or written once per iteration.
void set_counters(benchmark::State& state, int64_t n, int arrays, size_t bytes_per_element = sizeof(float)) {
  state.counters["bytes/s"] = benchmark::Counter(double(arrays) * double(n) * double(bytes_per_element),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

void add_ember(benchmark::State& state, int64_t n) {
  Tensor a = uniform_tensor({n}, DType::f32, 1), b = uniform_tensor({n}, DType::f32, 2);
  warm_up(state, [&] { return add(a, b); });
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_counters(state, n, 3);
}

void add_16_bit_ember(benchmark::State& state, DType dtype, int64_t n) {
  Tensor a = uniform_tensor({n}, dtype, 1), b = uniform_tensor({n}, dtype, 2);
  warm_up(state, [&] { return add(a, b); });
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_counters(state, n, 3, size_t(element_size(dtype)));
}

// Two ops, as a user writes it: the intermediate's traffic is ember's cost,
// so bytes count only the 3 inputs and the output (addcmul below fuses them).
void multiply_add_ember(benchmark::State& state, int64_t n) {
  Tensor a = uniform_tensor({n}, DType::f32, 1), b = uniform_tensor({n}, DType::f32, 2);
  Tensor c = uniform_tensor({n}, DType::f32, 3);
  warm_up(state, [&] { return a * b + c; });
  for (auto _ : state) {
    Tensor d = a * b + c;
    benchmark::DoNotOptimize(d.data_ptr());
  }
  set_counters(state, n, 4);
}

// The fused form of the same computation: one pass, no temporary.
void addcmul_ember(benchmark::State& state, int64_t n) {
  Tensor a = uniform_tensor({n}, DType::f32, 1), b = uniform_tensor({n}, DType::f32, 2);
  Tensor c = uniform_tensor({n}, DType::f32, 3);
  warm_up(state, [&] { return addcmul(c, a, b); });
  for (auto _ : state) {
    Tensor d = addcmul(c, a, b);
    benchmark::DoNotOptimize(d.data_ptr());
  }
  set_counters(state, n, 4);
}

void triad(float* __restrict out, const float* __restrict left, const float* __restrict right, float scale,
           int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = left[i] + scale * right[i];
}

// STREAM's triad, a[i] = b[i] + s * c[i], into an existing buffer. Like ember,
// it enters an OpenMP region only above ember's grain, so at 1K it measures the
// bare loop rather than a parallel region the library would never pay for.
void triad_openmp(benchmark::State& state, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n), 0.0f), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  fill_uniform(b.data(), n, 2);
  fill_uniform(c.data(), n, 3);
  triad(a.data(), b.data(), c.data(), 3.0f, n);
  for (auto _ : state) {
    if (n > kParallelGrain) {
#pragma omp parallel
      {
        int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t chunk = (n + threads - 1) / threads, begin = std::min(n, id * chunk);
        triad(a.data() + begin, b.data() + begin, c.data() + begin, 3.0f, std::min(chunk, n - begin));
      }
    } else {
      triad(a.data(), b.data(), c.data(), 3.0f, n);
    }
    benchmark::ClobberMemory();
  }
  set_counters(state, n, 3);
}

// Validation, allocation and dispatch of one op: what a tiny op costs.
void add_overhead(benchmark::State& state) {
  Tensor a = uniform_tensor({1}, DType::f32, 1), b = uniform_tensor({1}, DType::f32, 2);
  warm_up(state, [&] { return add(a, b); });
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["time/op"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void register_all() {
  for (int64_t n : kSizes) {
    benchmark::RegisterBenchmark(run_name("add", "ember", n).c_str(), add_ember, n)->UseRealTime();
    benchmark::RegisterBenchmark(run_name("add_f16", "ember", n).c_str(), add_16_bit_ember, DType::f16, n)->UseRealTime();
    benchmark::RegisterBenchmark(run_name("add_bf16", "ember", n).c_str(), add_16_bit_ember, DType::bf16, n)->UseRealTime();
    benchmark::RegisterBenchmark(run_name("mul_add", "ember", n).c_str(), multiply_add_ember, n)->UseRealTime();
    benchmark::RegisterBenchmark(run_name("addcmul", "ember", n).c_str(), addcmul_ember, n)->UseRealTime();
    benchmark::RegisterBenchmark(run_name("triad", "openmp", n).c_str(), triad_openmp, n)->UseRealTime();
  }
  benchmark::RegisterBenchmark("overhead/add/ember/1", add_overhead)->UseRealTime();
}

void print_summary(const RecordingReporter& reporter) {
  std::vector<Comparison> rows;
  for (const char* op : {"add", "add_f16", "add_bf16", "mul_add", "addcmul"}) {
    for (int64_t n : kSizes) {
      rows.push_back({std::string(op) + " " + size_label(n) + " vs triad", run_name(op, "ember", n),
                      run_name("triad", "openmp", n)});
    }
  }
  print_ratio_table(reporter, "ember element-wise vs STREAM triad (OpenMP)", {"bytes/s", "GB/s", 1e-9}, rows);
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  ember::bench::register_all();
  ember::bench::RecordingReporter reporter;
  if (!ember::bench::run_benchmarks(argc, argv, reporter)) return 1;
  ember::bench::print_summary(reporter);
  return 0;
}
