// nn::init: the initialisers of torch.nn.init (see init.h).
#include "nn/init.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember::nn::init {

namespace {

void check_floating(const Tensor& tensor, const char* op) {
  EMBER_CHECK(tensor.defined(), "nn::init::{}: the tensor is undefined", op);
  EMBER_CHECK(is_floating(tensor.dtype()), "nn::init::{}: needs a floating tensor, got {}", op, tensor.dtype());
}

// Random draws happen in f32 (f64 for f64 tensors) and are then converted, so
// f16/bf16 tensors get the same values as their f32 counterparts, rounded
// (uniform_'s values that round up to `high` aside: see there).
TensorOptions draw_options(const Tensor& tensor) {
  return {.dtype = tensor.dtype() == DType::f64 ? DType::f64 : DType::f32, .device = tensor.device()};
}

double standard_normal_cdf(double x) { return (1.0 + std::erf(x / std::numbers::sqrt2)) / 2.0; }

// erf^-1(y) for y in (-1, 1): Winitzki's approximation refined by Newton steps on std::erf.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  constexpr double a = 0.147;
  double log_term = std::log(1.0 - y * y);
  double t = 2.0 / (std::numbers::pi * a) + log_term / 2.0;
  double x = std::copysign(std::sqrt(std::sqrt(t * t - log_term / a) - t), y);
  for (int step = 0; step < 3; ++step) {
    double slope = 2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x);
    if (slope == 0.0) break;
    x -= (std::erf(x) - y) / slope;
  }
  return x;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  EMBER_ASSERT(false, "calculate_gain: unknown nonlinearity {}", int(nonlinearity));
  return 1.0;
}

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  EMBER_CHECK(tensor.defined(), "nn::init: fan in and fan out of an undefined tensor (a bias=false layer's bias?)");
  EMBER_CHECK(tensor.dim() >= 2,
              "nn::init: fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape {})",
              tensor.shape().str());
  int64_t receptive_field = 1;
  for (int d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {.fan_in = tensor.size(1) * receptive_field, .fan_out = tensor.size(0) * receptive_field};
}

Tensor uniform_(const Tensor& tensor, double low, double high, Generator* generator) {
  check_floating(tensor, "uniform_");
  // As PyTorch: low > high drew from [high, low) without a word.
  EMBER_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
              "nn::init::uniform_: expects finite low <= high, got low {} and high {}", low, high);
  // As PyTorch's: bounds or a width past the dtype's range filled the tensor with inf.
  const DType dtype = tensor.dtype();
  EMBER_CHECK(scalar_range(low, dtype) == ScalarRange::inside && scalar_range(high, dtype) == ScalarRange::inside &&
                  scalar_range(high - low, dtype) == ScalarRange::inside,
              "nn::init::uniform_: low {} and high {} (a width of {}) do not fit dtype {}", low, high, high - low, dtype);
  NoGradGuard no_grad;
  Tensor value = (rand(tensor.shape(), draw_options(tensor), generator) * (high - low) + low).to(dtype);
  // As PyTorch 2's: a 16-bit value that rounds up to `high` (the compare is
  // in the tensor's dtype) becomes `low`, so the result stays below `high`.
  if (dtype == DType::bf16 || dtype == DType::f16) value = where(ne(value, high), value, Scalar(low));
  copy_(tensor, value);
  return tensor;
}

Tensor normal_(const Tensor& tensor, double mean, double std, Generator* generator) {
  check_floating(tensor, "normal_");
  EMBER_CHECK(std >= 0, "nn::init::normal_: std must be non-negative, got {}", std);
  NoGradGuard no_grad;
  Tensor draw = randn(tensor.shape(), draw_options(tensor), generator);
  copy_(tensor, draw * std + mean);
  return tensor;
}

namespace {

// Past this many standard deviations on one side, trunc_normal_ samples by rejection.
constexpr double kFarTail = 5.0;

// n draws of the standard normal restricted to [lo, hi], lo > 0 (hi may be
// inf), by rejection: for a narrow interval, uniform proposals accepted with
// probability e^((lo^2 - z^2)/2); otherwise Robert's (1995) exponential
// proposals from lo with rate (lo + sqrt(lo^2 + 4)) / 2, accepted with
// probability e^(-(z - rate)^2 / 2). Both are exact; their acceptance rates
// stay above a third.
std::vector<double> sample_upper_tail(int64_t n, double lo, double hi, Generator* generator) {
  const bool narrow = (hi - lo) * lo < 1.0;
  const double rate = (lo + std::sqrt(lo * lo + 4.0)) / 2.0;
  std::vector<double> out;
  out.reserve(size_t(n));
  while (int64_t(out.size()) < n) {
    const int64_t wanted = n - int64_t(out.size());
    const std::vector<double> u = rand({2 * (wanted + 16)}, {.dtype = DType::f64}, generator).to_vector<double>();
    for (size_t i = 0; i + 1 < u.size() && int64_t(out.size()) < n; i += 2) {
      double z, accept;
      if (narrow) {
        z = lo + (hi - lo) * u[i];
        accept = std::exp((lo * lo - z * z) / 2.0);
      } else {
        z = lo - std::log1p(-u[i]) / rate;  // u in [0, 1): log1p(-u) is finite
        accept = z <= hi ? std::exp(-(z - rate) * (z - rate) / 2.0) : 0.0;
      }
      if (u[i + 1] < accept) out.push_back(z);
    }
  }
  return out;
}

}  // namespace

Tensor trunc_normal_(const Tensor& tensor, double mean, double std, double low, double high, Generator* generator) {
  check_floating(tensor, "trunc_normal_");
  EMBER_CHECK(std > 0 && low < high, "nn::init::trunc_normal_: needs std > 0 and low < high, got std {}, [{}, {}]",
              std, low, high);
  NoGradGuard no_grad;
  const double z_low = (low - mean) / std, z_high = (high - mean) / std;
  std::vector<double> values;
  if (z_low > kFarTail || z_high < -kFarTail) {
    // Far in one tail, 2 cdf - 1 is within a few ulps of +-1 at both bounds:
    // the draws collapsed to a few values, or all onto one bound. Sampled
    // there by rejection, in the upper tail (a lower one mirrored).
    const bool mirrored = z_high < -kFarTail;
    values = sample_upper_tail(tensor.numel(), mirrored ? -z_high : z_low, mirrored ? -z_low : z_high, generator);
    for (double& value : values) value = (mirrored ? -value : value) * std + mean;
  } else {
    // A uniform draw on [2 cdf(low) - 1, 2 cdf(high) - 1] mapped through
    // erf^-1 lands in [low, high] with the normal's shape (torch.nn.init's method).
    double lower = 2.0 * standard_normal_cdf(z_low) - 1.0;
    double upper = 2.0 * standard_normal_cdf(z_high) - 1.0;
    values = rand(tensor.shape(), {.dtype = DType::f64}, generator).to_vector<double>();
    for (double& value : values) value = erfinv(lower + (upper - lower) * value) * std * std::numbers::sqrt2 + mean;
  }
  for (double& value : values) value = std::min(std::max(value, low), high);
  copy_(tensor, from_vector(values, tensor.shape()));
  return tensor;
}

Tensor constant_(const Tensor& tensor, double value) {
  EMBER_CHECK(tensor.defined(), "nn::init::constant_: the tensor is undefined");
  NoGradGuard no_grad;
  Tensor target = tensor;
  target.fill_(value);
  return tensor;
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

namespace {

// The fans' sum, for the xavier initialisers, refused where they would
// divide by 0 (PyTorch: ZeroDivisionError) and checked under their own name.
double xavier_fans(const Tensor& tensor, double gain, const char* op) {
  check_floating(tensor, op);
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  EMBER_CHECK(fans.fan_in + fans.fan_out > 0, "nn::init::{}: fan_in + fan_out is 0 for a tensor of shape {}", op,
              tensor.shape());
  EMBER_CHECK(gain >= 0, "nn::init::{}: gain must be non-negative, got {}", op, gain);
  return double(fans.fan_in + fans.fan_out);
}

}  // namespace

Tensor xavier_uniform_(const Tensor& tensor, double gain, Generator* generator) {
  double bound = gain * std::sqrt(6.0 / xavier_fans(tensor, gain, "xavier_uniform_"));
  return uniform_(tensor, -bound, bound, generator);
}

Tensor xavier_normal_(const Tensor& tensor, double gain, Generator* generator) {
  return normal_(tensor, 0.0, gain * std::sqrt(2.0 / xavier_fans(tensor, gain, "xavier_normal_")), generator);
}

namespace {

double kaiming_std(const Tensor& tensor, const KaimingOptions& options) {
  Fans fans = calculate_fan_in_and_fan_out(tensor);
  int64_t fan = options.mode == FanMode::fan_in ? fans.fan_in : fans.fan_out;
  EMBER_CHECK(fan > 0, "nn::init::kaiming: the fan of a tensor of shape {} is 0", tensor.shape().str());
  return calculate_gain(options.nonlinearity, options.a) / std::sqrt(double(fan));
}

}  // namespace

Tensor kaiming_uniform_(const Tensor& tensor, const KaimingOptions& options) {
  check_floating(tensor, "kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;  // PyTorch skips empty tensors too
  double bound = std::sqrt(3.0) * kaiming_std(tensor, options);
  return uniform_(tensor, -bound, bound, options.generator);
}

Tensor kaiming_normal_(const Tensor& tensor, const KaimingOptions& options) {
  check_floating(tensor, "kaiming_normal_");
  if (tensor.numel() == 0) return tensor;
  return normal_(tensor, 0.0, kaiming_std(tensor, options), options.generator);
}

}  // namespace ember::nn::init
