// Step 6 of the ladder (examples/ladder/README.md): the Accelerator does what
// steps 2 to 5 wrote by hand. prepare() shards the optimizer state (zero1:
// gradients all-reduced during backward, each rank's updated piece
// all-gathered after the step) and runs the forward under bf16 autocast with
// f32 outputs, so this is step 5 with the by-hand lines replaced by the
// Accelerator's. At start-up it prints what each step communicates. Run
//   build/bin/ember launch --nproc-per-node 2 -- build/examples/ladder_6
// or alone, as one process.
#include "distributed/accelerator/accelerator.h"
#include "ladder/ladder.h"

using namespace ember;
namespace F = ember::nn::functional;

int main() try {
  Accelerator accelerator({.mixed_precision = "bf16", .sharding = {.strategy = "zero1"}});
  const int rank = accelerator.process_index(), world_size = accelerator.num_processes();
  ladder::Data data = ladder::make_data();
  std::shared_ptr<nn::Sequential> model = ladder::make_model();
  optim::AdamW optimizer(model->parameters(), {.lr = ladder::kLearningRate});
  accelerator.prepare(model, optimizer);
  for (int64_t step = 1; step <= ladder::kSteps; ++step) {
    auto [inputs, targets] = ladder::batch(data, step, rank, world_size);
    Tensor logits = (*model)(inputs);
    Tensor loss = F::cross_entropy(logits, targets);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    const double global_loss = accelerator.reduce(loss.detach(), "mean").item<double>();
    if (accelerator.is_main_process()) ladder::print_loss(step, global_loss);
  }
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
