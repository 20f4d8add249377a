// The snippets shown in README.md, compiled and run by the test suite so the
// README cannot drift from the API (STYLE.md, principle 11).
#include <ember/ember.h>

#include <cstdio>

using namespace ember;

// README: "Extending ember" (custom module)
// y = (x - running_mean) * gain, per feature: a learned gain and a running
// mean of the training batches, saved with the model but not trained.
class CenteredScale : public nn::Module {
 public:
  explicit CenteredScale(int64_t features, double momentum = 0.1)
      : gain(register_parameter("gain", ones({features}))),
        running_mean(register_buffer("running_mean", zeros({features}))),
        momentum(momentum) {}
  Tensor forward(const Tensor& x) override {  // x: [batch, features]
    if (is_training()) {
      NoGradGuard no_grad;  // a buffer is updated in place, outside the graph
      running_mean *= 1.0 - momentum;
      running_mean += mean(x, {0}) * momentum;
    }
    return (x - running_mean) * gain;
  }

  Tensor& gain;  // bound to the registered slots: assigning one re-points it
  Tensor& running_mean;
  double momentum;
};

// README: "Extending ember" (tied weights, a forward with two inputs)
struct TiedLm : nn::Module {
  using nn::Module::forward;  // the single-tensor form stays the base's (it throws)
  TiedLm(int64_t vocab, int64_t width) {
    wte = register_module("wte", nn::Embedding(vocab, width));
    lm_head = register_module("lm_head", nn::Linear(width, vocab, {.bias = false}));
    lm_head->weight = wte->weight;  // tied: one parameter, one gradient, saved once
  }
  std::pair<Tensor, Tensor> forward(const Tensor& tokens, const Tensor& targets) {  // [B, T] each
    Tensor logits = (*lm_head)((*wte)(tokens));                                       // [B, T, vocab]
    Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    return {logits, loss};
  }
  // model(tokens, targets): forward between the module's hooks, so DDP and autocast see it
  auto operator()(const Tensor& tokens, const Tensor& targets) { return call(*this, tokens, targets); }

  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Linear> lm_head;
};

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

  // README: "Profiling"
  {
    profiler::Profile profile({.record_shapes = true});
    for (auto& [inputs, targets] : loader) {
      Tensor batch_loss = nn::functional::cross_entropy(model(inputs), targets);
      optimizer.zero_grad();
      batch_loss.backward();
      optimizer.step();
    }
    profile.export_chrome_trace("readme_trace.json");  // open in https://ui.perfetto.dev
    std::printf("%s", profile.table().c_str());       // top ops by self time, then the step summary
  }

  // README: "Extending ember" (custom module, in use)
  auto net = nn::Sequential(nn::Linear(4, 8), CenteredScale(8), nn::ReLU(), nn::Linear(8, 2));
  // net.named_parameters(): 0.weight, 0.bias, 1.gain, 3.weight, 3.bias
  // net.state_dict() adds the buffer: 1.running_mean
  Tensor out = net(randn({16, 4}));
  // The names, not their count: the README's comment said 2.weight for a
  // Linear at index 3 (ReLU is index 2), and a count could not see it.
  std::vector<std::string> names;
  for (const auto& [name, parameter] : net.named_parameters()) names.push_back(name);
  bool module_ok = names == std::vector<std::string>{"0.weight", "0.bias", "1.gain", "3.weight", "3.bias"} &&
                   net.state_dict().size() == 6 &&
                   out.shape() == Shape{16, 2} && sum(abs(net.at<CenteredScale>(1)->running_mean)).item<double>() > 0;

  // README: "Extending ember" (tied weights, in use)
  TiedLm lm(11, 6);
  auto [logits, lm_loss] = lm(randint(0, 11, {2, 5}), randint(0, 11, {2, 5}));
  lm_loss.backward();
  bool tied_ok = lm.named_parameters().size() == 1 && lm.wte->weight.grad().defined() &&
                 logits.shape() == Shape{2, 5, 11};

  std::printf("softmax rows sum to %.4f; |dL/dw| = %.4f; graph of %zu characters; custom module %s; tied %s\n",
              mean(sum(c, {1})).item<double>(), norm(w.grad()).item<double>(), dot.size(),
              module_ok ? "ok" : "WRONG", tied_ok ? "ok" : "WRONG");
  return module_ok && tied_ok ? 0 : 1;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
