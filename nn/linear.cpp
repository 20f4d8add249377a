// nn::Linear and nn::Embedding (see linear.h).
#include "nn/linear.h"

#include <cmath>

#include "core/ops/creation.h"
#include "nn/functional/linear.h"
#include "nn/init.h"

namespace ember::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_features(in_features), out_features(out_features) {
  EMBER_CHECK(in_features >= 0 && out_features >= 0, "Linear: negative size ({}, {})", in_features, out_features);
  weight = register_parameter("weight", empty({out_features, in_features}, {.dtype = options.dtype}));
  bias = register_parameter("bias", options.bias ? empty({out_features}, {.dtype = options.dtype}) : Tensor());
  reset_parameters(options.generator);
}

void Linear::reset_parameters(Generator* generator) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0), .generator = generator});
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound, generator);
  }
}

Tensor Linear::forward(const Tensor& input) { return functional::linear(input, weight, bias); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features,
                     python_repr(bias.defined()));
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim), padding_idx(options.padding_idx) {
  EMBER_CHECK(num_embeddings >= 0 && embedding_dim >= 0, "Embedding: negative size ({}, {})", num_embeddings,
              embedding_dim);
  if (padding_idx) {
    EMBER_CHECK(*padding_idx < num_embeddings && *padding_idx >= -num_embeddings,
                "Embedding: padding_idx {} must be within num_embeddings {}", *padding_idx, num_embeddings);
    if (*padding_idx < 0) *padding_idx += num_embeddings;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}, {.dtype = options.dtype}));
  reset_parameters(options.generator);
}

void Embedding::reset_parameters(Generator* generator) {
  init::normal_(weight, 0.0, 1.0, generator);
  if (padding_idx) init::zeros_(weight.select(0, *padding_idx));
}

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx); }

std::string Embedding::extra_repr() const {
  std::string out = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) out += fmt::format(", padding_idx={}", *padding_idx);
  return out;
}

}  // namespace ember::nn
