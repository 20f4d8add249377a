// ember's training-step rows (training_workloads.h): the models of
// training_spec.h written with nn::, initialised from the shared values,
// trained with optim::. Linked into compare_worker_ember only; the same rows
// on libtorch are training_libtorch.cpp.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/loss.h"
#include "core/ops/views.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/functional/linear.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn/transformer.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "training_spec.h"
#include "training_workloads.h"

namespace ember::compare {
namespace {

using namespace training;

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

// Overwrites every parameter with the shared scheme's values for its name.
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

// nanoGPT's GPT with the head tied to the token embedding (training_spec.h).
class Gpt : public nn::Module {
 public:
  explicit Gpt(const GptSpec& spec) {
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
  Tensor forward(const Tensor& tokens) override {
    Tensor positions = arange(0, tokens.size(1), 1, {.dtype = DType::i64});
    Tensor x = (*wte)(tokens) + (*wpe)(positions);  // [B,T,C] + [T,C]
    for (const auto& block : *h) x = (*block)(x);
    return nn::functional::linear((*ln_f)(x), wte->weight);  // tied head: [B,T,C] x [V,C]^T
  }

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

// The parts of one training run; the step owns them through a shared_ptr.
struct Run {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor inputs, targets;
};

std::unique_ptr<optim::Optimizer> sgd(const nn::Module& model) {
  SgdSettings settings;
  return std::make_unique<optim::SGD>(model.parameters(),
                                      optim::SGDOptions{.lr = settings.lr, .momentum = settings.momentum});
}

std::unique_ptr<optim::Optimizer> adamw(const nn::Module& model) {
  AdamWSettings settings;
  optim::AdamWOptions options{.lr = settings.lr,
                              .betas = {settings.beta1, settings.beta2},
                              .eps = settings.eps,
                              .weight_decay = settings.weight_decay};
  return std::make_unique<optim::AdamW>(model.parameters(), options);
}

// zero_grad (gradients set to none, as libtorch's side does), forward,
// cross-entropy, backward, step.
TrainingStep training_step(std::shared_ptr<Run> run) {
  return [run] {
    run->optimizer->zero_grad();
    Tensor logits = (*run->model)(run->inputs);
    Tensor loss = cross_entropy(logits.view({-1, logits.size(-1)}), run->targets.view({-1}));
    loss.backward();
    run->optimizer->step();
    return loss.item<double>();
  };
}

using OptimizerFactory = std::unique_ptr<optim::Optimizer> (*)(const nn::Module&);

std::shared_ptr<Run> start_run(std::shared_ptr<nn::Module> model, OptimizerFactory make_optimizer) {
  auto run = std::make_shared<Run>();
  run->model = std::move(model);
  initialise(*run->model);
  run->optimizer = make_optimizer(*run->model);
  return run;
}

TrainingStep classification_step(std::shared_ptr<nn::Module> model, const ClassificationBatch& batch,
                                  OptimizerFactory make_optimizer) {
  std::shared_ptr<Run> run = start_run(std::move(model), make_optimizer);
  run->inputs = from_vector(batch.inputs, shape_of(batch.input_shape));
  run->targets = from_vector(batch.targets, Shape{int64_t(batch.targets.size())});
  return training_step(run);
}

TrainingStep gpt_step() {
  GptSpec spec;
  TokenBatch batch = gpt_batch(spec);
  std::shared_ptr<Run> run = start_run(std::make_shared<Gpt>(spec), adamw);
  run->inputs = from_vector(batch.inputs, Shape{spec.batch, spec.sequence});
  run->targets = from_vector(batch.targets, Shape{spec.batch, spec.sequence});
  return training_step(run);
}

}  // namespace

std::vector<TrainingWorkload> training_workloads() {
  return {
      {"train_mlp_sgd", [] { return classification_step(mlp(MlpSpec{}), mlp_batch(MlpSpec{}), sgd); }},
      {"train_mlp_adamw", [] { return classification_step(mlp(MlpSpec{}), mlp_batch(MlpSpec{}), adamw); }},
      {"train_cnn_sgd", [] { return classification_step(cnn(CnnSpec{}), cnn_batch(CnnSpec{}), sgd); }},
      {"train_gpt_adamw", [] { return gpt_step(); }},
  };
}

}  // namespace ember::compare
