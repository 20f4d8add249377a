// GEMM: ember::mm against raw oneDNN 2.6 matmul, fp32 and bf16, square N x N,
// in the same run; prints the ember/oneDNN GFLOP/s ratio per size at the end.
// Run by scripts/bench.sh; figures go to bench/RESULTS.md.
#include <dnnl.hpp>

#include <string>
#include <unordered_map>

#include "bench_support.h"
#include "core/ops/creation.h"
#include "core/ops/linalg.h"
#include "core/parallel.h"

namespace ember::bench {
namespace {

constexpr int64_t kSizes[] = {64, 128, 256, 512, 1024, 2048};

const char* dtype_label(DType dtype) { return dtype == DType::bf16 ? "bf16" : "f32"; }

std::string run_name(const char* side, DType dtype, int64_t n) {
  return std::string("gemm/") + dtype_label(dtype) + "/" + side + "/" + std::to_string(n);
}

void set_counters(benchmark::State& state, int64_t n) {
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(n) * double(n) * double(n),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = get_num_threads();
}

// The allocation of the result is part of what a user of mm pays, so it is timed.
void gemm_ember(benchmark::State& state, DType dtype, int64_t n) {
  Tensor a = uniform_tensor({n, n}, dtype, 1), b = uniform_tensor({n, n}, dtype, 2);
  warm_up(state, [&] { return mm(a, b); });
  for (auto _ : state) {
    Tensor c = mm(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_counters(state, n);
}

// The peer at its best: primitive, memory objects and output created once,
// outside the timing loop; only execute + wait is timed.
void gemm_onednn(benchmark::State& state, DType dtype, int64_t n) {
  using dnnl::memory;
  Tensor a = uniform_tensor({n, n}, dtype, 1), b = uniform_tensor({n, n}, dtype, 2);
  Tensor c = empty({n, n}, {.dtype = dtype});
  memory::data_type type = dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc desc({n, n}, type, memory::format_tag::ab);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::matmul primitive;
  try {
    dnnl::matmul::primitive_desc primitive_desc(dnnl::matmul::desc(desc, desc, desc), engine);
    primitive = dnnl::matmul(primitive_desc);
  } catch (const dnnl::error& error) {
    state.SkipWithError((std::string("oneDNN matmul unavailable: ") + error.what()).c_str());
    return;
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(desc, engine, a.data_ptr())},
                                          {DNNL_ARG_WEIGHTS, memory(desc, engine, b.data_ptr())},
                                          {DNNL_ARG_DST, memory(desc, engine, c.data_ptr())}};
  warm_up(state, [&] {
    primitive.execute(stream, args);
    stream.wait();
  });
  for (auto _ : state) {
    primitive.execute(stream, args);
    stream.wait();
  }
  set_counters(state, n);
}

void register_all() {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      benchmark::RegisterBenchmark(run_name("ember", dtype, n).c_str(), gemm_ember, dtype, n)->UseRealTime();
      benchmark::RegisterBenchmark(run_name("onednn", dtype, n).c_str(), gemm_onednn, dtype, n)->UseRealTime();
    }
  }
}

void print_summary(const RecordingReporter& reporter) {
  std::vector<Comparison> rows;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      rows.push_back({std::string("gemm ") + dtype_label(dtype) + " N=" + std::to_string(n),
                      run_name("ember", dtype, n), run_name("onednn", dtype, n)});
    }
  }
  print_ratio_table(reporter, "ember::mm vs raw oneDNN matmul", {"FLOP/s", "GFLOP/s", 1e-9}, rows);
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
