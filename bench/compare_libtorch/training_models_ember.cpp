// ember's models of the training-step workloads (training_models_ember.h).
#include "training_models_ember.h"

#include <span>
#include <vector>

#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/views.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/functional/linear.h"
#include "nn/transformer.h"

namespace ember::compare::training {

void initialise(const nn::Module& model) {
  NoGradGuard no_grad;
  for (const auto& [name, parameter] : model.named_parameters()) {
    std::vector<int64_t> shape(parameter.shape().begin(), parameter.shape().end());
    copy_(parameter, from_vector(initial_parameter(name, shape), parameter.shape()));
  }
}

std::shared_ptr<nn::Sequential> mlp(const MlpSpec& spec) {
  return std::make_shared<nn::Sequential>(nn::Linear(spec.inputs, spec.hidden), nn::ReLU(),
                                          nn::Linear(spec.hidden, spec.hidden), nn::ReLU(),
                                          nn::Linear(spec.hidden, spec.classes));
}

std::shared_ptr<nn::Sequential> cnn(const CnnSpec& spec) {
  nn::Conv2dOptions same{.padding = {1, 1}};
  int64_t pooled = spec.image_size / 4;
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, spec.channels1, 3, same), nn::ReLU(), nn::MaxPool2d(2),  //
      nn::Conv2d(spec.channels1, spec.channels2, 3, same), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(spec.channels2 * pooled * pooled, spec.hidden), nn::ReLU(), nn::Linear(spec.hidden, spec.classes));
}

Gpt::Gpt(const GptSpec& spec) {
  wte = register_module("wte", std::make_shared<nn::Embedding>(spec.vocabulary, spec.model_dim));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(spec.sequence, spec.model_dim));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t layer = 0; layer < spec.layers; ++layer) {
    h->push_back(std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions{.embed_dim = spec.model_dim,
                                                                                    .num_heads = spec.heads,
                                                                                    .mlp_ratio = spec.mlp_ratio,
                                                                                    .num_layers = spec.layers}));
  }
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(spec.model_dim));
}

// [B,T] tokens -> [B,T,V] logits
Tensor Gpt::forward(const Tensor& tokens) {
  Tensor positions = arange(0, tokens.size(1), 1, {.dtype = DType::i64, .device = tokens.device()});
  Tensor x = (*wte)(tokens) + (*wpe)(positions);  // [B,T,C] + [T,C]
  for (const auto& block : *h) x = (*block)(x);
  return nn::functional::linear((*ln_f)(x), wte->weight);  // tied head: [B,T,C] x [V,C]^T
}

}  // namespace ember::compare::training
