// The snippets shown in README.md, compiled and run by the test suite so the
// README cannot drift from the API (STYLE.md, principle 11).
#include <ember/ember.h>

#include <cstdio>

using namespace ember;

int main() try {
  manual_seed(0);
  // README: "Using ember from your project"
  Tensor a = randn({64, 128});
  Tensor b = randn({128, 32}, {.dtype = DType::bf16});
  Tensor c = softmax(matmul(a.to(DType::bf16), b).to(DType::f32), -1);

  // README: "Gradients work as in PyTorch"
  Tensor x = randn({8, 4});
  Tensor w = randn({4, 3}, {.requires_grad = true});
  Tensor loss = mean(relu(matmul(x, w)));
  loss.backward();                         // w.grad() now holds d(loss)/d(w)
  std::string dot = autograd::to_dot(loss);  // the recorded graph, for Graphviz

  // README: "A training loop"
  auto model = nn::Sequential(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
  data::TensorDataset dataset(randn({256, 4}), randint(0, 3, {256}));
  data::DataLoader loader(dataset, {.batch_size = 32, .shuffle = true});
  for (auto& [inputs, targets] : loader) {
    Tensor batch_loss = nn::functional::cross_entropy(model(inputs), targets);
    optimizer.zero_grad();
    batch_loss.backward();
    optimizer.step();
  }
  nn::save(model, "readme_model.safetensors");  // loads into the same PyTorch model

  std::printf("softmax rows sum to %.4f; |dL/dw| = %.4f; graph of %zu characters\n",
              mean(sum(c, {1})).item<double>(), norm(w.grad()).item<double>(), dot.size());
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
