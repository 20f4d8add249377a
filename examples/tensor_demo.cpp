// ember's first demo (scripts/demo.sh): logistic regression on synthetic data,
// trained with hand-written gradients using only core tensor ops (matmul,
// sigmoid, reductions, in-place updates). Autograd and nn replace the
// hand-written gradients in the later examples.
#include <ember/ember.h>

#include <cstdio>

#include "support/progress_bar.h"

using namespace ember;

int main() try {
  manual_seed(0);
  constexpr int64_t kSamples = 8192, kFeatures = 64, kBatch = 256, kEpochs = 8;
  constexpr double kLearningRate = 0.5;

  // Labels come from a hidden linear rule with 5% of them flipped.
  Tensor hidden = randn({kFeatures, 1});
  Tensor inputs = randn({kSamples, kFeatures});
  Tensor labels = gt(matmul(inputs, hidden), 0).to(DType::f32);
  Tensor flip = lt(rand({kSamples, 1}), 0.05);
  labels = where(flip, rsub(labels, 1.0), labels);
  int64_t num_train = kSamples * 3 / 4;
  Tensor train_x = inputs.narrow(0, 0, num_train), train_y = labels.narrow(0, 0, num_train);
  Tensor test_x = inputs.narrow(0, num_train, kSamples - num_train);
  Tensor test_y = labels.narrow(0, num_train, kSamples - num_train);

  Tensor weight = zeros({kFeatures, 1}), bias = zeros({1});
  int64_t steps_per_epoch = num_train / kBatch;
  examples::ProgressBar bar(kEpochs * steps_per_epoch);
  std::printf("logistic regression: %lld training samples, %lld features, batch %lld, %lld epochs\n",
              static_cast<long long>(num_train), static_cast<long long>(kFeatures), static_cast<long long>(kBatch),
              static_cast<long long>(kEpochs));
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      Tensor x = train_x.narrow(0, step * kBatch, kBatch), y = train_y.narrow(0, step * kBatch, kBatch);
      Tensor probability = sigmoid(matmul(x, weight) + bias);           // [B, 1]
      Tensor error = probability - y;                                     // d(loss)/d(logit), [B, 1]
      Tensor grad_weight = matmul(x.t(), error) / double(kBatch);         // [F, B] x [B, 1] -> [F, 1]
      Tensor grad_bias = mean(error, {0});                                // [1]
      weight -= grad_weight * kLearningRate;
      bias -= grad_bias * kLearningRate;

      Tensor eps = full({1}, 1e-7);
      Tensor loss = -mean(y * log(probability + eps) + rsub(y, 1.0) * log(rsub(probability, 1.0) + eps));
      bar.update(epoch * steps_per_epoch + step + 1, fmt::format("epoch {}/{}", epoch + 1, kEpochs),
                 {{"loss", loss.item<double>()}});
    }
  }
  Tensor predictions = gt(matmul(test_x, weight) + bias, 0).to(DType::f32);
  double accuracy = mean(eq(predictions, test_y).to(DType::f32)).item<double>();
  std::printf("test accuracy: %.2f%% on %lld held-out samples (labels are 5%% noisy, so ~95%% is the ceiling)\n",
              100 * accuracy, static_cast<long long>(kSamples - num_train));
  return accuracy > 0.85 ? 0 : 1;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
