// The Accelerator's overhead: one training step of the bench MLP
// (784-1024-1024-10, AdamW, 128 samples per process) written by hand with
// DistributedDataParallel and a DistributedSampler, and the same step
// through the Accelerator (prepare, accumulate, backward), in the same
// processes, alternating rounds; median step time of each and the ratio.
// Issue 6's target: the Accelerator adds at most 3%. Run alone and under
// `ember launch --nproc-per-node 2` (scripts/bench.sh --distributed does both).
//   bench_accelerator_overhead [--rounds 7] [--steps 20] [--batch 128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/ops/creation.h"
#include "core/random.h"
#include "data/data.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "nn/nn.h"
#include "optim/adam.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(),
                                          nn::Linear(1024, 10));
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Seconds per step over `steps` batches of `loader`, run by `step`.
template <class Step>
double time_steps(data::DataLoader& loader, int steps, distributed::ProcessGroup& group, Step step) {
  group.barrier()->wait();
  auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (done < steps)
    for (auto& [inputs, targets] : loader) {
      step(inputs, targets);
      if (++done == steps) break;
    }
  group.barrier()->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

void run(distributed::ProcessGroup& group, int rounds, int steps, int64_t batch) {
  const int world = group.size(), rank = group.rank();
  Generator generator(1);
  data::TensorDataset dataset(randn({batch * world * 8, 784}, {}, &generator),
                              randint(0, 10, {batch * world * 8}, {.dtype = DType::i64}, &generator));

  // By hand: DDP, a DistributedSampler, zero_grad / backward / step.
  auto hand_model = make_mlp();
  distributed::DistributedDataParallel ddp(hand_model, group);
  optim::AdamW hand_optimizer(hand_model->parameters());
  data::DataLoader hand_loader(dataset, {.batch_size = batch,
                                         .sampler = std::make_shared<data::DistributedSampler>(
                                             dataset.size(), world, rank, data::DistributedSamplerOptions{.seed = 2})});
  auto hand_step = [&](const Tensor& inputs, const Tensor& targets) {
    Tensor loss = F::cross_entropy(ddp(inputs), targets);
    loss.backward();
    hand_optimizer.step();
    hand_optimizer.zero_grad();
  };

  // The Accelerator: the same loop with its four lines.
  Accelerator accelerator;
  auto model = make_mlp();
  optim::AdamW optimizer(model->parameters());
  data::DataLoader loader(dataset, {.batch_size = batch, .shuffle = true, .seed = 2});
  accelerator.prepare(model, optimizer, loader);
  auto accelerated_step = [&](const Tensor& inputs, const Tensor& targets) {
    auto accumulation = accelerator.accumulate(model);
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  };

  time_steps(hand_loader, steps, group, hand_step);  // warm-up: allocator caches, oneDNN primitives
  time_steps(loader, steps, group, accelerated_step);
  std::vector<double> hand, accelerated;
  for (int r = 0; r < rounds; ++r) {
    hand.push_back(time_steps(hand_loader, steps, group, hand_step));
    accelerated.push_back(time_steps(loader, steps, group, accelerated_step));
  }
  const double hand_ms = 1e3 * median(hand), accelerated_ms = 1e3 * median(accelerated);
  if (rank == 0)
    std::printf("accelerator_overhead processes=%d batch=%lld hand_ms=%.3f accelerator_ms=%.3f ratio=%.3f "
                "overhead=%+.1f%%\n",
                world, static_cast<long long>(batch), hand_ms, accelerated_ms, accelerated_ms / hand_ms,
                100 * (accelerated_ms / hand_ms - 1));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, steps = 20;
  int64_t batch = 128;
  CLI::App app("The Accelerator's step time against the same step written by hand with DDP");
  app.add_option("--rounds", rounds, "alternating rounds of each loop");
  app.add_option("--steps", steps, "steps per round");
  app.add_option("--batch", batch, "samples per process per step");
  CLI11_PARSE(app, argc, argv);
  run(distributed::init_process_group(), rounds, steps, batch);  // every user of the group is gone when it returns
  distributed::destroy_process_group();
  return 0;
}
