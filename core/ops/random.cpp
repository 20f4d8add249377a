// Random creation: rand, randn, randint and their _like forms. Each call
// reserves the Philox blocks it needs from the generator, so consecutive calls
// draw fresh numbers and a saved (seed, offset) replays a stream exactly.
// Kernels: kernels/{reference,cpu}/random.cpp; tests: tests/core/test_random.cpp.
#include <limits>

#include "core/ops/creation.h"
#include "core/ops/random_kernels.h"

namespace ember {

Op<void(const Tensor&, GeneratorState)> uniform_op("uniform"), normal_op("normal");
Op<void(const Tensor&, GeneratorState, int64_t, int64_t)> randint_op("randint");

namespace {

// Reserves the blocks for `numel` values at `per_block` values a block.
GeneratorState reserve(Generator* generator, int64_t numel, int per_block) {
  Generator& source = generator ? *generator : default_generator();
  uint64_t seed = source.seed();
  uint64_t offset = source.reserve(uint64_t((numel + per_block - 1) / per_block));
  return {seed, offset};
}

int uniforms_per_block(DType dtype) { return dtype == DType::f64 ? 2 : 4; }

Tensor floating_random(const Op<void(const Tensor&, GeneratorState)>& op, std::string_view name, const Shape& shape,
                       TensorOptions options, Generator* generator) {
  EMBER_CHECK(is_floating(options.dtype), "{}: expected a floating dtype, got {}", name, options.dtype);
  Tensor out = make_tensor(shape, options.dtype, options.device);
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

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* generator) {
  EMBER_CHECK(low < high, "randint: expected low < high, got low={} high={}", low, high);
  if (options.dtype == DType::i32)
    EMBER_CHECK(low >= std::numeric_limits<int32_t>::min() && high - 1 <= std::numeric_limits<int32_t>::max(),
                "randint: range [{}, {}) does not fit dtype int32", low, high);
  if (options.dtype == DType::boolean)
    EMBER_CHECK(low >= 0 && high <= 2, "randint: range [{}, {}) does not fit dtype bool", low, high);
  EMBER_CHECK(!options.requires_grad || is_floating(options.dtype),
              "randint: only floating tensors can require gradients, got {}", options.dtype);
  Tensor out = make_tensor(shape, options.dtype, options.device);
  if (out.numel() > 0) {
    uint64_t range = uint64_t(high) - uint64_t(low);
    GeneratorState stream = reserve(generator, out.numel(), random_detail::randint_per_block(range));
    randint_op(options.device.type, options.dtype, out, stream, low, high);
  }
  out.impl()->requires_grad = options.requires_grad;
  return out;
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
