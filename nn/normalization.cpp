// Normalisation layers (see normalization.h).
#include "nn/normalization.h"

#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/normalization.h"
#include "nn/init.h"

namespace ember::nn {

namespace {
int64_t checked_num_features(int64_t num_features) {
  EMBER_CHECK(num_features > 0, "BatchNorm: num_features must be positive, got {}", num_features);
  return num_features;
}

// PyTorch takes any momentum; outside [0, 1] (or NaN) the running statistics
// extrapolate or turn NaN, silently, so ember refuses it.
const BatchNormOptions& checked_options(const BatchNormOptions& options) {
  EMBER_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1),
              "BatchNorm: momentum must be in [0, 1] (or None for a cumulative average), got {}", *options.momentum);
  return options;
}
}  // namespace

BatchNorm::BatchNorm(int64_t num_features, const BatchNormOptions& options)
    : num_features(checked_num_features(num_features)),
      options(checked_options(options)),
      weight(register_parameter("weight", options.affine ? empty({num_features}, {.dtype = options.dtype}) : Tensor())),
      bias(register_parameter("bias", options.affine ? empty({num_features}, {.dtype = options.dtype}) : Tensor())),
      running_mean(register_buffer(
          "running_mean", options.track_running_stats ? zeros({num_features}, {.dtype = options.dtype}) : Tensor())),
      running_var(register_buffer(
          "running_var", options.track_running_stats ? ones({num_features}, {.dtype = options.dtype}) : Tensor())),
      num_batches_tracked(register_buffer(
          "num_batches_tracked", options.track_running_stats ? zeros({}, {.dtype = DType::i64}) : Tensor())) {
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm::forward(const Tensor& input) {
  check_input_dim(input);
  EMBER_CHECK(input.size(1) == num_features, "{}: expected {} channels in dim 1, got input of shape {}", type_name(),
              num_features, input.shape().str());
  double momentum = options.momentum.value_or(0.0);
  if (is_training() && options.track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked += 1;
    if (!options.momentum) momentum = 1.0 / double(num_batches_tracked.item<int64_t>());
  }
  // Batch statistics while training, and always when no running ones are
  // kept; core updates running_mean/var in place when training with them.
  bool use_batch_statistics = is_training() || !options.track_running_stats;
  return batch_norm(input, running_mean, running_var, weight, bias, use_batch_statistics, momentum, options.eps);
}

std::string BatchNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     python_repr(options.eps), options.momentum ? python_repr(*options.momentum) : "None",
                     python_repr(options.affine), python_repr(options.track_running_stats));
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d: expected 2D or 3D input (got {}D input, shape {})",
              input.dim(), input.shape().str());
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 4, "BatchNorm2d: expected 4D input (got {}D input, shape {})", input.dim(),
              input.shape().str());
}

LayerNorm::LayerNorm(Shape normalized_shape, const LayerNormOptions& options)
    : normalized_shape(normalized_shape),
      options(options),
      weight(register_parameter(
          "weight", options.elementwise_affine ? ones(normalized_shape, {.dtype = options.dtype}) : Tensor())),
      bias(register_parameter("bias", options.elementwise_affine && options.bias
                                          ? zeros(normalized_shape, {.dtype = options.dtype})
                                          : Tensor())) {}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape, weight, bias, options.eps);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", python_tuple(normalized_shape.span()),
                     python_repr(options.eps), python_repr(options.elementwise_affine));
}

RMSNorm::RMSNorm(Shape normalized_shape, const RMSNormOptions& options)
    : normalized_shape(normalized_shape),
      options(options),
      weight(register_parameter(
          "weight", options.elementwise_affine ? ones(normalized_shape, {.dtype = options.dtype}) : Tensor())) {}

Tensor RMSNorm::forward(const Tensor& input) { return rms_norm(input, normalized_shape, weight, options.eps); }

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", python_tuple(normalized_shape.span()),
                     options.eps ? python_repr(*options.eps) : "None", python_repr(options.elementwise_affine));
}

}  // namespace ember::nn
