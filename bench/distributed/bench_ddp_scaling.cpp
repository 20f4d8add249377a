// DDP scaling: training steps per second of the bench MLP (784-1024-1024-10,
// SGD with momentum) on a fixed global batch, split across the ranks of the
// job. Run it once alone and once under `ember launch --nproc-per-node 2`
// (scripts/bench.sh does both, with one OpenMP thread per rank): the ratio of
// the two steps/s figures is the scaling, which DDP's overlap of the
// gradient all-reduce with backward is there to bring close to 2x.
// `--strategy zero1` runs the same step under ZeRO-1 instead (each rank
// updates its shard of the parameters, then all-gathers them), to see how
// much of what keeps DDP under 2x is the optimizer step every rank repeats.
//   bench_ddp_scaling [--global-batch 256] [--steps 60] [--warmup 10] [--bucket-cap-mb 25]
//                     [--first-bucket-cap-mb 1] [--strategy ddp|zero1] [--comm-hook no|fp16|bf16]
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/ops/creation.h"
#include "core/random.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/zero/sharded_data_parallel.h"
#include "nn/nn.h"
#include "optim/sgd.h"

using namespace ember;

int main(int argc, char** argv) {
  int64_t global_batch = 256;
  int steps = 60, warmup = 10;
  double bucket_cap_mb = 25, first_bucket_cap_mb = 1;
  std::string strategy = "ddp";
  CLI::App app("DDP scaling of an MLP training step");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--bucket-cap-mb", bucket_cap_mb, "DDP bucket size");
  app.add_option("--first-bucket-cap-mb", first_bucket_cap_mb, "DDP's first bucket size");
  std::string comm_hook = "no";
  app.add_option("--comm-hook", comm_hook, "DDP's comm_hook: no, fp16 or bf16 (gradients compressed)");
  app.add_option("--strategy", strategy, "ddp, or zero1 (the optimizer step sharded)")
      ->check(CLI::IsMember({"ddp", "zero1"}));
  CLI11_PARSE(app, argc, argv);
  if (strategy != "ddp" && comm_hook != "no") {
    std::fprintf(stderr, "bench_ddp_scaling: --comm-hook %s is DDP's; --strategy %s has none\n", comm_hook.c_str(),
                 strategy.c_str());
    return 1;
  }

  distributed::ProcessGroup& group = distributed::init_process_group();
  const int world = group.size();
  if (global_batch % world != 0) {
    std::fprintf(stderr, "bench_ddp_scaling: global batch %lld is not divisible by %d ranks\n",
                 static_cast<long long>(global_batch), world);
    return 1;
  }
  const int64_t local_batch = global_batch / world;

  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(),
                                                nn::Linear(1024, 10));
  optim::SGD optimizer(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<distributed::ShardedDataParallel> zero;
  if (strategy == "ddp") {
    ddp = std::make_unique<distributed::DistributedDataParallel>(
        model, group,
        distributed::DDPOptions{
            .bucket_cap_mb = bucket_cap_mb, .first_bucket_cap_mb = first_bucket_cap_mb, .comm_hook = comm_hook});
  } else {
    distributed::ResolvedShardingOptions options;
    options.strategy = distributed::ShardingStrategy::zero1;
    zero = std::make_unique<distributed::ShardedDataParallel>(model, group, options);
    zero->attach_optimizer(optimizer);
  }
  // This rank's share of one fixed global batch: compute, not data loading, is measured.
  manual_seed(1 + uint64_t(group.rank()));
  Tensor inputs = randn({local_batch, 784});
  Tensor targets = randint(0, 10, {local_batch});

  auto step = [&] {
    Tensor loss = nn::functional::cross_entropy(ddp ? (*ddp)(inputs) : (*model)(inputs), targets);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  group.barrier()->wait();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  group.barrier()->wait();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (group.rank() == 0)
    std::printf("ddp_scaling strategy=%s comm_hook=%s ranks=%d backend=%s global_batch=%lld local_batch=%lld "
                "steps_per_s=%.2f ms_per_step=%.3f\n",
                strategy.c_str(), comm_hook.c_str(), world, group.backend_name().c_str(), static_cast<long long>(global_batch),
                static_cast<long long>(local_batch), steps / seconds, 1e3 * seconds / steps);
  distributed::destroy_process_group();
  return 0;
}
