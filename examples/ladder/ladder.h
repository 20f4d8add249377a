// What every step of the ladder (examples/ladder/README.md) shares: the data,
// the model and the loss line, so that each step's file shows only what that
// step changes. Every rank builds the same data and the same initial weights
// from fixed seeds. Built into ladder_1 ... ladder_6; the test
// examples.ladder_losses compares their loss lines.
#pragma once

#include <ember/ember.h>

#include <cstdio>
#include <memory>

#include "distributed/process_group.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace ember::ladder {

inline constexpr int64_t kSteps = 30;       // optimizer steps
inline constexpr int64_t kBatchSize = 64;   // global: the ranks split each batch evenly
inline constexpr int64_t kFeatures = 32;
inline constexpr int64_t kClasses = 8;
inline constexpr double kLearningRate = 1e-2;

// A classification task learnable in a few steps: a random linear "teacher"
// labels random inputs with the class of its largest output.
struct Data {
  Tensor inputs;   // [kSteps * kBatchSize, kFeatures]
  Tensor targets;  // [kSteps * kBatchSize], class indices
};

inline Data make_data() {
  Generator generator(1234);
  Tensor inputs = randn({kSteps * kBatchSize, kFeatures}, {}, &generator);
  Tensor teacher = randn({kFeatures, kClasses}, {}, &generator);
  return {inputs, argmax(matmul(inputs, teacher), 1)};
}

// Rank `rank`'s share of step `step`'s global batch (steps count from 1):
// rows [rank * b, (rank + 1) * b) of it, with b = kBatchSize / world_size.
inline std::pair<Tensor, Tensor> batch(const Data& data, int64_t step, int rank, int world_size) {
  // Shares of another size would drop the batch's last rows and still call the loss the whole batch's.
  EMBER_CHECK(kBatchSize % world_size == 0, "ladder: the global batch of {} does not split over {} processes; run "
              "with a number of processes that divides it (1, 2, 4, 8, ...)", kBatchSize, world_size);
  const int64_t share = kBatchSize / world_size;
  const int64_t start = (step - 1) * kBatchSize + rank * share;
  return {data.inputs.narrow(0, start, share), data.targets.narrow(0, start, share)};
}

// [B, 32] -> [B, 64] -> [B, 64] -> [B, 8]: 6,792 parameters, the same
// initial values in every process (the seed).
inline std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 64), nn::ReLU(), nn::Linear(64, 64), nn::ReLU(),
                                          nn::Linear(64, kClasses));
}

// Prints the loss of the global batch at the first step, every tenth and the
// last, with every digit a float has, so that the test can compare steps.
inline void print_loss(int64_t step, double loss) {
  if (step == 1 || step % 10 == 0 || step == kSteps) std::printf("step %lld loss %.9g\n", (long long)step, loss);
}

// On several ranks each loss is of its own share of the batch; their mean is
// the loss of the whole batch (the shares are equal). Rank 0 prints it.
inline void print_loss(int64_t step, const Tensor& loss, distributed::ProcessGroup& group) {
  Tensor total = loss.detach().clone();
  group.allreduce(total)->wait();
  if (group.rank() == 0) print_loss(step, total.item<double>() / group.size());
}

}  // namespace ember::ladder
