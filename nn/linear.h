// nn::Linear (y = x W^T + b) and nn::Embedding (a lookup table): the layers
// that own one weight matrix. Tests: tests/nn/test_layers.cpp.
#pragma once

#include <optional>

#include "core/random.h"
#include "nn/module.h"

namespace ember::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // for the default initialisation; the default generator when null
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});
  // [..., in_features] -> [..., out_features]
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  // PyTorch's: weight kaiming_uniform_(a = sqrt(5)), i.e. U(+-1/sqrt(in_features)); bias U(+-1/sqrt(in_features)).
  void reset_parameters(Generator* generator = nullptr);

  int64_t in_features;
  int64_t out_features;
  // Bound to the registered slots (Note [Parameter slots]): assigning one re-points the parameter.
  Tensor& weight;  // [out_features, in_features]
  Tensor& bias;    // [out_features], undefined when options.bias is false
};

struct EmbeddingOptions {
  // A row that starts at zero and receives no gradient (negative: counted from the end).
  std::optional<int64_t> padding_idx{};
  DType dtype = DType::f32;
  Generator* generator = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& options = {});
  // integer indices [...] -> [..., embedding_dim]
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  void reset_parameters(Generator* generator = nullptr);  // N(0, 1) with the padding row zeroed, as PyTorch

  int64_t num_embeddings;
  int64_t embedding_dim;
  std::optional<int64_t> padding_idx;  // in [0, num_embeddings)
  Tensor& weight;  // [num_embeddings, embedding_dim], a registered slot (Note [Parameter slots])
};

}  // namespace ember::nn
