// Two kernels of issue 22's training steps on their own: max-pool forward
// and backward on the CNN's two poolings (2x2 at stride 2), bf16 against f32
// in the same run, and one SGD-with-momentum update of the MLP's parameters
// (784-1024-1024-10, lr 0.01, momentum 0.9, as compare_libtorch), f32 and
// bf16. Before/after figures come from running this binary alternately on
// two builds of the library; bench/RESULTS.md ("bf16 max-pool and the SGD
// kernel") has the command.
#include <string>
#include <vector>

#include "bench_support.h"
#include "core/ops/conv.h"
#include "core/ops/optimizer.h"

namespace ember::bench {
namespace {

const Shape kPoolInputs[] = {{64, 32, 28, 28}, {64, 64, 14, 14}};
const DType kDTypes[] = {DType::f32, DType::bf16};

std::string shape_name(const Shape& shape) {
  std::string name = std::to_string(shape[0]);
  for (int d = 1; d < shape.ndim(); ++d) name.append("x").append(std::to_string(shape[d]));
  return name;
}

std::string pool_run(const char* pass, const Shape& shape, DType dtype) {
  return std::string("max_pool/") + pass + "/" + shape_name(shape) + "/" + std::string(dtype_name(dtype));
}

void pool_forward(benchmark::State& state, Shape shape, DType dtype) {
  Tensor input = uniform_tensor(shape, dtype, 1);
  auto run = [&] { return max_pool2d(input, {}); };
  if (!warm_up(state, run)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run().data_ptr());
  state.counters["calls/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void pool_backward(benchmark::State& state, Shape shape, DType dtype) {
  Tensor input = uniform_tensor(shape, dtype, 1);
  Tensor grad_output = uniform_tensor(max_pool2d(input, {}).shape(), dtype, 2);
  auto run = [&] { return max_pool2d_backward(grad_output, input, {}); };
  if (!warm_up(state, run)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run().data_ptr());
  state.counters["calls/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// The MLP's parameters in nn::Linear's layout: weight [out, in], bias [out].
const Shape kMlpParameters[] = {{1024, 784}, {1024}, {1024, 1024}, {1024}, {10, 1024}, {10}};

void sgd_step(benchmark::State& state, DType dtype) {
  std::vector<Tensor> params, grads, buffers;
  uint32_t seed = 1;
  for (const Shape& shape : kMlpParameters) {
    params.push_back(uniform_tensor(shape, dtype, seed++));
    grads.push_back(uniform_tensor(shape, dtype, seed++));
    buffers.push_back(uniform_tensor(shape, dtype, seed++));
  }
  // Small steps keep the parameters bounded over many iterations.
  const SgdUpdate hyper{.lr = 1e-6, .momentum = 0.9};
  auto run = [&] {
    for (size_t i = 0; i < params.size(); ++i) sgd_update_(params[i], grads[i], buffers[i], hyper);
    return 0;
  };
  if (!warm_up(state, run)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["calls/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  for (const Shape& shape : kPoolInputs)
    for (DType dtype : kDTypes) {
      benchmark::RegisterBenchmark(pool_run("forward", shape, dtype).c_str(), pool_forward, shape, dtype)
          ->UseRealTime();
      benchmark::RegisterBenchmark(pool_run("backward", shape, dtype).c_str(), pool_backward, shape, dtype)
          ->UseRealTime();
    }
  for (DType dtype : kDTypes)
    benchmark::RegisterBenchmark((std::string("sgd_momentum/mlp/") + std::string(dtype_name(dtype))).c_str(), sgd_step,
                                 dtype)
        ->UseRealTime();
}

void print_summary(const RecordingReporter& reporter) {
  std::vector<Comparison> rows;
  for (const Shape& shape : kPoolInputs)
    for (const char* pass : {"forward", "backward"})
      rows.push_back({std::string(pass) + " " + shape_name(shape) + " bf16 vs f32", pool_run(pass, shape, DType::bf16),
                      pool_run(pass, shape, DType::f32)});
  rows.push_back({"sgd momentum mlp bf16 vs f32", "sgd_momentum/mlp/bf16", "sgd_momentum/mlp/f32"});
  print_ratio_table(reporter, "bf16 (ember) vs f32 (peer), calls per second", {"calls/s", "calls/s", 1}, rows);
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
