// ZeRO against DDP on the comparison's GPT (4 blocks of 256, AdamW): step
// time and peak bytes per rank for ddp, zero1, zero2 and zero3, measured one
// after the other in the same processes, on one fixed global batch split
// across the ranks. Run under `ember launch --nproc-per-node N`; rank 0
// prints one row per strategy with its ratios to DDP (Note [ZeRO stages]).
//   bench_zero [--global-batch 16] [--steps 20] [--warmup 3] [--layers 4] [--dim 256] [--sequence 128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/allocator.h"
#include "core/ops/creation.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/zero/sharded_data_parallel.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "training_models_ember.h"

using namespace ember;
namespace training = ember::compare::training;

namespace {

struct Measured {
  double ms_per_step = 0;
  int64_t peak_bytes = 0;  // above what was live before the model was built
};

Measured measure(distributed::ShardingStrategy strategy, distributed::ProcessGroup& group, const training::GptSpec& spec,
                 const Tensor& inputs, const Tensor& targets, int steps, int warmup) {
  const int64_t before = memory_allocated();
  reset_peak_memory_stats();
  auto model = std::make_shared<training::Gpt>(spec);
  training::initialise(*model);
  optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<distributed::ShardedDataParallel> zero;
  if (strategy == distributed::ShardingStrategy::ddp) {
    ddp = std::make_unique<distributed::DistributedDataParallel>(model, group);
  } else {
    distributed::ResolvedShardingOptions options;
    options.strategy = strategy;
    zero = std::make_unique<distributed::ShardedDataParallel>(model, group, options);
    zero->attach_optimizer(optimizer);
  }
  auto step = [&] {
    Tensor logits = (*model)(inputs);
    Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, spec.vocabulary}), targets.reshape({-1}));
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
  };
  for (int i = 0; i < warmup; ++i) step();
  group.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  group.barrier()->wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {1e3 * seconds / steps, max_memory_allocated() - before};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t global_batch = 16;
  int steps = 20, warmup = 3;
  training::GptSpec spec;
  CLI::App app("ZeRO stages against DDP on a GPT training step");
  app.add_option("--layers", spec.layers, "transformer blocks");
  app.add_option("--dim", spec.model_dim, "model width (heads of 64)");
  app.add_option("--sequence", spec.sequence, "tokens per sequence");
  app.add_option("--global-batch", global_batch, "sequences per step over all ranks");
  app.add_option("--steps", steps, "timed steps per strategy");
  app.add_option("--warmup", warmup, "untimed steps first");
  CLI11_PARSE(app, argc, argv);

  distributed::ProcessGroup& group = distributed::init_process_group();
  const int world = group.size();
  if (global_batch % world != 0) {
    std::fprintf(stderr, "bench_zero: global batch %lld is not divisible by %d ranks\n",
                 static_cast<long long>(global_batch), world);
    return 1;
  }
  spec.batch = global_batch;
  spec.heads = std::max<int64_t>(1, spec.model_dim / 64);
  const training::TokenBatch batch = training::gpt_batch(spec);
  const int64_t local = global_batch / world;
  const int64_t offset = group.rank() * local * spec.sequence;
  const int64_t count = local * spec.sequence;
  Tensor inputs = from_vector(std::vector<int64_t>(batch.inputs.begin() + offset, batch.inputs.begin() + offset + count),
                              {local, spec.sequence});
  Tensor targets = from_vector(
      std::vector<int64_t>(batch.targets.begin() + offset, batch.targets.begin() + offset + count), {local, spec.sequence});

  using distributed::ShardingStrategy;
  const std::vector<ShardingStrategy> strategies = {ShardingStrategy::ddp, ShardingStrategy::zero1,
                                                    ShardingStrategy::zero2, ShardingStrategy::zero3};
  std::vector<Measured> results;
  for (ShardingStrategy strategy : strategies)
    results.push_back(measure(strategy, group, spec, inputs, targets, steps, warmup));
  if (group.rank() == 0) {
    std::printf("bench_zero ranks=%d backend=%s gpt=%lldx%lld sequence=%lld global_batch=%lld (rank 0's figures)\n",
                world, group.backend_name().c_str(), static_cast<long long>(spec.layers),
                static_cast<long long>(spec.model_dim), static_cast<long long>(spec.sequence),
                static_cast<long long>(global_batch));
    std::printf("%-8s %12s %10s %14s %10s\n", "strategy", "ms/step", "vs ddp", "peak MiB", "vs ddp");
    for (size_t i = 0; i < strategies.size(); ++i)
      std::printf("%-8s %12.2f %9.2fx %14.2f %9.2fx\n", std::string(distributed::to_string(strategies[i])).c_str(),
                  results[i].ms_per_step, results[i].ms_per_step / results[0].ms_per_step,
                  double(results[i].peak_bytes) / (1 << 20),
                  double(results[i].peak_bytes) / double(results[0].peak_bytes));
  }
  distributed::destroy_process_group();
  return 0;
}
