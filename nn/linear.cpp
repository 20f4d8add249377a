// nn::Linear and nn::Embedding (see linear.h).
#include "nn/linear.h"

#include <cmath>

#include "core/ops/creation.h"
#include "nn/functional/linear.h"
#include "nn/init.h"

namespace ember::nn {

namespace {
int64_t checked_size(int64_t size, const char* layer, const char* what) {
  EMBER_CHECK(size >= 0, "{}: {} must not be negative, got {}", layer, what, size);
  return size;
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_features(checked_size(in_features, "Linear", "in_features")),
      out_features(checked_size(out_features, "Linear", "out_features")),
      weight(register_parameter("weight", empty({out_features, in_features}, {.dtype = options.dtype}))),
      bias(register_parameter("bias", options.bias ? empty({out_features}, {.dtype = options.dtype}) : Tensor())) {
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
    : num_embeddings(checked_size(num_embeddings, "Embedding", "num_embeddings")),
      embedding_dim(checked_size(embedding_dim, "Embedding", "embedding_dim")),
      padding_idx(options.padding_idx),
      weight(register_parameter("weight", empty({num_embeddings, embedding_dim}, {.dtype = options.dtype}))) {
  if (padding_idx) {
    EMBER_CHECK(*padding_idx < num_embeddings && *padding_idx >= -num_embeddings,
                "Embedding: padding_idx {} must be within num_embeddings {}", *padding_idx, num_embeddings);
    if (*padding_idx < 0) *padding_idx += num_embeddings;
  }
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
