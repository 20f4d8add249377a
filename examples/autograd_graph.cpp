// Records the forward pass of a tiny MLP, runs backward, and writes the
// recorded graph as Graphviz DOT (autograd::to_dot): a picture of what
// backpropagation walks. Usage: autograd_graph [out.dot]; then
//   dot -Tpng out.dot -o mlp_graph.png
#include <ember/ember.h>

#include <cstdio>
#include <fstream>

using namespace ember;

int main(int argc, char** argv) try {
  manual_seed(0);
  Tensor x = randn({8, 4});                                   // a batch of 8 inputs
  Tensor targets = randint(0, 3, {8});                        // 3 classes
  Tensor w1 = randn({4, 16}, {.requires_grad = true}), b1 = zeros({16}, {.requires_grad = true});
  Tensor w2 = randn({16, 3}, {.requires_grad = true}), b2 = zeros({3}, {.requires_grad = true});

  Tensor hidden = relu(matmul(x, w1) + b1);                   // [8, 4] x [4, 16] -> [8, 16]
  Tensor logits = matmul(hidden, w2) + b2;                    // [8, 16] x [16, 3] -> [8, 3]
  Tensor picked = gather(log_softmax(logits, 1), 1, targets.unsqueeze(1));  // log p(target), [8, 1]
  Tensor loss = -mean(picked);
  loss.backward();

  std::string dot = autograd::to_dot(loss);
  const char* path = argc > 1 ? argv[1] : "mlp_graph.dot";
  std::ofstream(path) << dot;
  std::printf("loss %.4f; |dL/dw1| %.4f; graph with %zu lines written to %s\n", loss.item<double>(),
              norm(w1.grad()).item<double>(), size_t(std::count(dot.begin(), dot.end(), '\n')), path);
  return 0;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
