// Step 1 of the ladder (examples/ladder/README.md): one process trains a small
// MLP with AdamW on the whole batch of each step. Run it with
//   build/examples/ladder_1
#include "ladder/ladder.h"

using namespace ember;
namespace F = ember::nn::functional;

int main() try {
  ladder::Data data = ladder::make_data();
  std::shared_ptr<nn::Sequential> model = ladder::make_model();
  optim::AdamW optimizer(model->parameters(), {.lr = ladder::kLearningRate});
  for (int64_t step = 1; step <= ladder::kSteps; ++step) {
    auto [inputs, targets] = ladder::batch(data, step, /*rank=*/0, /*world_size=*/1);
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    ladder::print_loss(step, loss.item<double>());
  }
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
