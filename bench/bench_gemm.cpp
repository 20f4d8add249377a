// GEMM: ember::mm against raw oneDNN 2.6 matmul, fp32 and bf16, square N x N,
// in the same run; prints the ember/oneDNN GFLOP/s ratio per size at the end,
// and both against this core's measured f32 FMA peak (issue 22's MLP target is
// a fraction of that peak).
// Run by scripts/bench.sh; figures go to bench/RESULTS.md.
#include <dnnl.hpp>
#include <immintrin.h>

#include <string>
#include <unordered_map>

#include "bench_support.h"
#include "core/ops/creation.h"
#include "core/cpu_features.h"
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

// The f32 FMA peak of one core: 16 independent chains of fused multiply-adds,
// enough to fill two FMA pipes of latency 4 to 8; each FMA is 2 FLOP per lane.
constexpr int kChains = 16;
constexpr int64_t kFmaRounds = 1 << 16;

// One function per instruction set, each compiled for it whole: vectors never
// cross a function boundary built for another.
__attribute__((target("avx512f"))) double fma_flops_avx512() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
  for (int64_t round = 0; round < kFmaRounds; ++round)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  benchmark::DoNotOptimize(lanes);
  return 2.0 * 16 * kChains * double(kFmaRounds);
}

__attribute__((target("avx2,fma"))) double fma_flops_avx2() {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
  for (int64_t round = 0; round < kFmaRounds; ++round)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 total = acc[0];
  for (int i = 1; i < kChains; ++i) total = _mm256_add_ps(total, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, total);
  benchmark::DoNotOptimize(lanes);
  return 2.0 * 8 * kChains * double(kFmaRounds);
}

void fma_peak(benchmark::State& state) {
  if (!cpu_has_fma()) {
    state.SkipWithError("this CPU has no FMA");
    return;
  }
  const bool wide = cpu_has_avx512bw();
  double flops = 0;
  for (auto _ : state) flops += wide ? fma_flops_avx512() : fma_flops_avx2();
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
  state.SetLabel(wide ? "avx512" : "avx2");
}

void register_all() {
  benchmark::RegisterBenchmark("fma_peak/f32", fma_peak)->UseRealTime();
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
  std::vector<Comparison> peak;
  for (int64_t n : kSizes) {
    const std::string size = " N=" + std::to_string(n);
    peak.push_back({"ember gemm f32" + size, run_name("ember", DType::f32, n), "fma_peak/f32"});
    peak.push_back({"oneDNN gemm f32" + size, run_name("onednn", DType::f32, n), "fma_peak/f32"});
  }
  print_ratio_table(reporter, "f32 GEMM vs this core's FMA peak", {"FLOP/s", "GFLOP/s", 1e-9}, peak);
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
