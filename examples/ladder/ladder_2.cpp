// Step 2 of the ladder (examples/ladder/README.md): data parallel by hand.
// Each rank computes the gradient of its half of the batch; after backward,
// every gradient is summed over the ranks and divided by their number, so
// every rank steps with the gradient of the whole batch, as step 1 did. Run
//   build/bin/ember launch --nproc-per-node 2 -- build/examples/ladder_2
#include "ladder/ladder.h"

using namespace ember;
namespace F = ember::nn::functional;

int main() try {
  distributed::ProcessGroup& group = distributed::init_process_group();
  const int rank = group.rank(), world_size = group.size();
  ladder::Data data = ladder::make_data();
  std::shared_ptr<nn::Sequential> model = ladder::make_model();
  // The seed gave every rank the same weights; rank 0's copy makes sure.
  for (const Tensor& parameter : model->parameters()) group.broadcast(parameter, /*root=*/0)->wait();
  optim::AdamW optimizer(model->parameters(), {.lr = ladder::kLearningRate});
  for (int64_t step = 1; step <= ladder::kSteps; ++step) {
    auto [inputs, targets] = ladder::batch(data, step, rank, world_size);
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    loss.backward();
    // One all-reduce per parameter, each waited for: communication only
    // starts once backward has finished (step 3 overlaps the two).
    for (const Tensor& parameter : model->parameters()) {
      group.allreduce(parameter.grad())->wait();
      parameter.grad() /= world_size;
    }
    optimizer.step();
    optimizer.zero_grad();
    ladder::print_loss(step, loss, group);
  }
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
