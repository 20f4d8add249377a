// Causal scaled dot-product attention on the CPU: the fused kernel
// (kernels/cpu/attention.cpp) against the composite it replaced (matmul,
// masked_fill, softmax, matmul: nn::functional::attention_weights), forward
// and forward+backward, f32 and bf16, at T = 128, 512 (batch 4, 8 heads) and
// 2048 (batch 1, 8 heads, so the composite's [T, T] scores fit), head_dim 64,
// on the thread count of --threads (1 by default). Counters: calls/s and the
// allocator's peak MiB above the inputs. bench/bench_attention.sh interleaves
// it with PyTorch's SDPA (bench_attention_torch.py); figures in bench/RESULTS.md.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench_support.h"
#include "core/allocator.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/parallel.h"
#include "nn/functional/attention.h"

namespace ember::bench {
namespace {

constexpr int64_t kHeads = 8, kHeadDim = 64;
constexpr int64_t kLengths[] = {128, 512, 2048};

int64_t batch_for(int64_t length) { return length >= 2048 ? 1 : 4; }

// One attention call (and its backward when `backward`) on leaves q, k, v.
void step(bool fused, bool backward, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad) {
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  Tensor y = fused ? attention(q, k, v, {.scale = scale, .causal = true})
                   : matmul(nn::functional::attention_weights(q, k, {.is_causal = true, .scale = scale}), v);
  if (backward) sum(y * grad).backward();
  benchmark::DoNotOptimize(y.data_ptr());
}

void run(benchmark::State& state, bool fused, DType dtype, int64_t length, bool backward) {
  const Shape shape{batch_for(length), kHeads, length, kHeadDim};
  Tensor q = uniform_tensor(shape, dtype, 1).requires_grad_(backward);
  Tensor k = uniform_tensor(shape, dtype, 2).requires_grad_(backward);
  Tensor v = uniform_tensor(shape, dtype, 3).requires_grad_(backward);
  Tensor grad = uniform_tensor(shape, dtype, 4);
  if (!warm_up(state, [&] { step(fused, backward, q, k, v, grad); })) return;
  reset_peak_memory_stats();
  const int64_t before = memory_allocated();
  step(fused, backward, q, k, v, grad);
  const double peak = double(max_memory_allocated() - before);
  for (auto _ : state) step(fused, backward, q, k, v, grad);
  state.counters["calls/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = peak / (1 << 20);
  state.counters["threads"] = get_num_threads();
}

std::string name_of(const char* path, DType dtype, int64_t length, bool backward) {
  return std::string("attention/") + path + "/" + std::string(dtype_name(dtype)) + "/T=" + std::to_string(length) +
         (backward ? "/fwd+bwd" : "/fwd");
}

std::vector<Comparison> register_all() {
  std::vector<Comparison> rows;
  for (DType dtype : {DType::f32, DType::bf16})
    for (int64_t length : kLengths)
      for (bool backward : {false, true}) {
        for (bool fused : {true, false})
          benchmark::RegisterBenchmark(name_of(fused ? "fused" : "composite", dtype, length, backward).c_str(),
                                       [=](benchmark::State& state) { run(state, fused, dtype, length, backward); })
              ->UseRealTime()
              ->MinTime(0.3);
        rows.push_back({name_of("", dtype, length, backward).substr(11), name_of("fused", dtype, length, backward),
                        name_of("composite", dtype, length, backward)});
      }
  return rows;
}

// --threads=N (default 1), taken off the command line before Google Benchmark reads it.
int take_threads(int& argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  return threads;
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  ember::set_num_threads(ember::bench::take_threads(argc, argv));
  std::vector<ember::bench::Comparison> rows = ember::bench::register_all();
  ember::bench::RecordingReporter reporter;
  if (!ember::bench::run_benchmarks(argc, argv, reporter)) return 1;
  ember::bench::print_ratio_table(reporter, "fused / composite attention (calls/s; ratio = speedup)",
                                  {"calls/s", "calls/s", 1.0}, rows);
  ember::bench::print_ratio_table(reporter, "fused / composite attention (allocator peak above the inputs)",
                                  {"peak_MiB", "MiB", 1.0}, rows);
  return 0;
}
