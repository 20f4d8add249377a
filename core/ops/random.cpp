// Random creation: rand, randn, randint and their _like forms, and
// multinomial sampling. Each call reserves the Philox blocks it needs from the
// generator, so consecutive calls draw fresh numbers and a saved (seed,
// offset) replays a stream exactly. Kernels: kernels/{reference,cpu}/random.cpp,
// kernels/cuda/random.cu; tests: tests/core/test_random.cpp, tests/core/test_multinomial.cpp.
#include "core/ops/random.h"

#include <cmath>
#include <limits>

#include "core/device_runtime.h"
#include "core/ops/creation.h"
#include "core/ops/random_kernels.h"
#include "core/scalar_fits.h"

namespace ember {

Op<void(const Tensor&, GeneratorState)> uniform_op("uniform"), normal_op("normal");
Op<void(const Tensor&, GeneratorState, int64_t, int64_t)> randint_op("randint");
Op<void(const MultinomialProblem&)> multinomial_op("multinomial");

namespace {

// Reserves the blocks for `numel` values at `per_block` values a block.
GeneratorState reserve(Generator* generator, int64_t numel, int per_block) {
  Generator& source = generator ? *generator : default_generator();
  uint64_t seed = source.seed();
  uint64_t offset = source.reserve(uint64_t((numel + per_block - 1) / per_block));
  return {seed, offset};
}

// Checks the weights as torch.multinomial does, naming the first offending
// row and value: `host` is the f64 [rows, categories] working copy, on the CPU.
void check_weights(const Tensor& host, int64_t num_samples, bool replacement) {
  const int64_t rows = host.size(0), categories = host.size(1);
  const double* w = host.data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    int64_t nonzero = 0;
    for (int64_t c = 0; c < categories; ++c) {
      const double weight = w[r * categories + c];
      EMBER_CHECK(std::isfinite(weight) && weight >= 0,
                  "multinomial: probability tensor contains either inf, nan or element < 0: weight {} at row {}, "
                  "category {}",
                  weight, r, c);
      total += weight;
      nonzero += weight > 0;
    }
    EMBER_CHECK(total > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0) in row {}", r);
    EMBER_CHECK(replacement || num_samples <= nonzero,
                "multinomial: cannot draw {} samples without replacement from row {}, which has {} categories with "
                "a nonzero weight",
                num_samples, r, nonzero);
  }
}

int uniforms_per_block(DType dtype) { return dtype == DType::f64 ? 2 : 4; }

Tensor floating_random(const Op<void(const Tensor&, GeneratorState)>& op, std::string_view name, const Shape& shape,
                       TensorOptions options, Generator* generator) {
  EMBER_CHECK(is_floating(options.dtype), "{}: expected a floating dtype, got {}", name, options.dtype);
  Tensor out = make_tensor(shape, options.dtype, options.device, name);
  if (out.numel() > 0)
    op(options.device.type, options.dtype, out, reserve(generator, out.numel(), uniforms_per_block(options.dtype)));
  out.impl()->requires_grad = options.requires_grad;
  return out;
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  return floating_random(uniform_op, "rand", shape, options, generator);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  return floating_random(normal_op, "randn", shape, options, generator);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, RandintOptions options, Generator* generator) {
  EMBER_CHECK(low < high, "randint: expected low < high, got low={} high={}", low, high);
  // Every dtype: f16 and bf16 took [0, 2^40) and filled the tensor with inf.
  const bool fits = options.dtype == DType::boolean
                        ? low >= 0 && high <= 2
                        : scalar_range(low, options.dtype) == ScalarRange::inside &&
                              scalar_range(high - 1, options.dtype) == ScalarRange::inside;
  EMBER_CHECK(fits, "randint: range [{}, {}) does not fit dtype {}", low, high, options.dtype);
  // Past 2^digits a floating dtype skips integers: high - 1 rounded up to
  // high (f16 [0, 2052) gave 2052), and the values were not uniform. PyTorch
  // warns; a draw outside [low, high) is refused here.
  if (is_floating(options.dtype)) {
    const int digits = options.dtype == DType::f16 ? 11 : options.dtype == DType::bf16 ? 8
                       : options.dtype == DType::f32 ? 24 : 53;
    const int64_t exact = int64_t(1) << digits;
    EMBER_CHECK(low >= -exact && high - 1 <= exact,
                "randint: range [{}, {}) has integers {} cannot hold exactly (it holds every integer in [-2^{}, 2^{}]); "
                "draw int64 values and convert them",
                low, high, options.dtype, digits, digits);
  }
  EMBER_CHECK(!options.requires_grad || is_floating(options.dtype),
              "randint: only floating tensors can require gradients, got {}", options.dtype);
  Tensor out = make_tensor(shape, options.dtype, options.device, "randint");
  if (out.numel() > 0) {
    uint64_t range = uint64_t(high) - uint64_t(low);
    GeneratorState stream = reserve(generator, out.numel(), random_detail::randint_per_block(range));
    randint_op(options.device.type, options.dtype, out, stream, low, high);
  }
  out.impl()->requires_grad = options.requires_grad;
  return out;
}

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, Generator* generator) {
  EMBER_CHECK(weights.defined(), "multinomial: undefined tensor");
  EMBER_CHECK(weights.dim() == 1 || weights.dim() == 2, "multinomial: prob_dist must be 1 or 2 dim, got shape {}",
              weights.shape());
  EMBER_CHECK(is_floating(weights.dtype()), "multinomial: expected a floating dtype, got {}", weights.dtype());
  EMBER_CHECK(num_samples > 0, "multinomial: cannot sample n_sample <= 0 samples (num_samples={})", num_samples);
  const int64_t categories = weights.size(-1);
  EMBER_CHECK(replacement || num_samples <= categories,
              "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement "
              "(num_samples={}, {} categories)",
              num_samples, categories);
  const int64_t rows = weights.dim() == 2 ? weights.size(0) : 1;
  // The kernels' working copy: f64 [rows, categories], fresh, since the kernels overwrite it.
  Tensor working = make_tensor({rows, categories}, DType::f64, weights.device());
  working.copy_(weights.detach().reshape({rows, categories}));
  // On a GPU the check reads the weights back, as torch.multinomial's does (refused under strict device copies).
  if (!working.device().is_cpu()) check_implicit_device_copy("multinomial", working.device());
  check_weights(working.device().is_cpu() ? working : working.to(kCPU), num_samples, replacement);
  Tensor out = make_tensor({rows, num_samples}, DType::i64, weights.device());
  if (rows > 0) {
    MultinomialProblem p;
    p.weights = working.data_ptr<double>(), p.out = out.data_ptr<int64_t>();
    p.rows = rows, p.categories = categories, p.samples = num_samples, p.replacement = replacement;
    p.stream = reserve(generator, rows * num_samples, 2);
    multinomial_op(weights.device().type, DType::f64, p);
  }
  return weights.dim() == 1 ? out.reshape({num_samples}) : out;
}

Tensor rand_like(const Tensor& t, Generator* generator) {
  EMBER_CHECK(t.defined(), "rand_like: undefined tensor");
  return rand(t.shape(), {.dtype = t.dtype(), .device = t.device()}, generator);
}

Tensor randn_like(const Tensor& t, Generator* generator) {
  EMBER_CHECK(t.defined(), "randn_like: undefined tensor");
  return randn(t.shape(), {.dtype = t.dtype(), .device = t.device()}, generator);
}

}  // namespace ember
