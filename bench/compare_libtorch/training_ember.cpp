// ember's training-step rows (training_workloads.h): the models of
// training_models_ember.h, initialised from the shared values, trained with
// optim::, in f32 and under bf16 autocast (the _bf16 rows). Linked into compare_worker_ember only; the same rows
// on libtorch are training_libtorch.cpp.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/ops/creation.h"
#include "core/ops/loss.h"
#include "core/ops/views.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "training_models_ember.h"
#include "training_spec.h"
#include "training_workloads.h"

namespace ember::compare {
namespace {

using namespace training;

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

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
// cross-entropy, backward, step. With `bf16` the forward runs under bf16
// autocast and its logits are cast back to f32 for the loss, as the
// Accelerator does; the guard closes before backward, as PyTorch advises.
TrainingStep training_step(std::shared_ptr<Run> run, bool bf16) {
  return [run, bf16] {
    run->optimizer->zero_grad();
    Tensor logits;
    {
      std::optional<AutocastGuard> autocast;
      if (bf16) autocast.emplace(DeviceType::cpu, DType::bf16);
      logits = (*run->model)(run->inputs);
      if (bf16) logits = logits.to(DType::f32);
    }
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
                                  OptimizerFactory make_optimizer, bool bf16) {
  std::shared_ptr<Run> run = start_run(std::move(model), make_optimizer);
  run->inputs = from_vector(batch.inputs, shape_of(batch.input_shape));
  run->targets = from_vector(batch.targets, Shape{int64_t(batch.targets.size())});
  return training_step(run, bf16);
}

TrainingStep gpt_step(bool bf16) {
  GptSpec spec;
  TokenBatch batch = gpt_batch(spec);
  std::shared_ptr<Run> run = start_run(std::make_shared<Gpt>(spec), adamw);
  run->inputs = from_vector(batch.inputs, Shape{spec.batch, spec.sequence});
  run->targets = from_vector(batch.targets, Shape{spec.batch, spec.sequence});
  return training_step(run, bf16);
}

}  // namespace

std::vector<TrainingWorkload> training_workloads() {
  std::vector<TrainingWorkload> rows;
  for (bool bf16 : {false, true}) {
    std::string suffix = bf16 ? "_bf16" : "";
    rows.push_back({"train_mlp_sgd" + suffix,
                    [bf16] { return classification_step(mlp(MlpSpec{}), mlp_batch(MlpSpec{}), sgd, bf16); }});
    rows.push_back({"train_mlp_adamw" + suffix,
                    [bf16] { return classification_step(mlp(MlpSpec{}), mlp_batch(MlpSpec{}), adamw, bf16); }});
    rows.push_back({"train_cnn_sgd" + suffix,
                    [bf16] { return classification_step(cnn(CnnSpec{}), cnn_batch(CnnSpec{}), sgd, bf16); }});
    rows.push_back({"train_gpt_adamw" + suffix, [bf16] { return gpt_step(bf16); }});
  }
  return rows;
}

}  // namespace ember::compare
