// The models of training_spec.h written with ember's nn::, and the shared
// initialisation applied to them. Used by the comparison's ember worker
// (training_ember.cpp) and by bench_mixed_precision, so both time the same
// models. The libtorch side is training_libtorch.cpp.
#pragma once

#include <memory>

#include "nn/container.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "training_spec.h"

namespace ember::compare::training {

// Overwrites every parameter with the shared scheme's values for its name.
void initialise(const nn::Module& model);

std::shared_ptr<nn::Sequential> mlp(const MlpSpec& spec);
std::shared_ptr<nn::Sequential> cnn(const CnnSpec& spec);

// nanoGPT's GPT with the head tied to the token embedding: [B,T] tokens -> [B,T,V] logits.
class Gpt : public nn::Module {
 public:
  explicit Gpt(const GptSpec& spec);
  Tensor forward(const Tensor& tokens) override;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

}  // namespace ember::compare::training
