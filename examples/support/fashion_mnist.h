// Fashion-MNIST pieces shared by the examples that train on it: the
// standardised splits, the MLP, and a test-set evaluation that returns sums
// (so a distributed run can add them up across ranks). Used by
// examples/train_fashion_mnist.cpp, examples/ddp_fashion_mnist.cpp and
// examples/accelerate_fashion_mnist.cpp.
#pragma once

#include <ember/ember.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

namespace ember::examples {

struct FashionMnist {
  data::MnistData train;
  data::MnistData test;
};

// Both splits, standardised in place with the training pixels' mean and
// standard deviation (in [0, 1] units); out of place, the 188 MB training
// images would briefly exist three times.
inline FashionMnist load_standardized_fashion_mnist(const std::string& directory) {
  FashionMnist data{data::load_fashion_mnist(data::MnistSplit::train, directory),
                    data::load_fashion_mnist(data::MnistSplit::test, directory)};
  for (data::MnistData* split : {&data.train, &data.test}) {
    split->images -= 0.2860;
    split->images /= 0.3530;
  }
  return data;
}

// 784-512-256-10, about 535k parameters.
inline std::shared_ptr<nn::Sequential> make_fashion_mnist_mlp() {
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(28 * 28, 512), nn::ReLU(), nn::Linear(512, 256),
                                          nn::ReLU(), nn::Linear(256, 10));
}

// Two 3x3 conv + 2x2 max-pool stages, then two linear layers: [N,1,28,28] -> [N,10], about 420k parameters.
inline std::shared_ptr<nn::Sequential> make_fashion_mnist_cnn() {
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),   // -> [N, 32, 14, 14]
      nn::Conv2d(32, 64, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),  // -> [N, 64, 7, 7]
      nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

struct Evaluation {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t total = 0;
  double loss() const { return loss_sum / double(std::max<int64_t>(total, 1)); }
  double accuracy() const { return total ? double(correct) / double(total) : 0.0; }
};

// `gather` combines a batch's tensors across processes (the Accelerator's
// gather_for_metrics); by default they are this process's own.
inline Evaluation evaluate(nn::Module& model, data::DataLoader& loader,
                           const std::function<Tensor(const Tensor&)>& gather = [](const Tensor& t) { return t; }) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation result;
  for (auto& [batch_inputs, batch_targets] : loader) {
    Tensor logits = gather(model(batch_inputs)), targets = gather(batch_targets);
    result.loss_sum += nn::functional::cross_entropy(logits, targets, {.reduction = Reduction::sum}).item<double>();
    result.correct += sum(eq(argmax(logits, 1), targets)).item<int64_t>();
    result.total += targets.size(0);
  }
  model.train();
  return result;
}

}  // namespace ember::examples
