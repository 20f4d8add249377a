// libtorch's training-step rows (training_workloads.h): the models of
// training_spec.h written with torch::nn, initialised from the shared values,
// trained with torch::optim, in f32 and under bf16 autocast. Linked into
// compare_worker_libtorch only; the same rows on ember are training_ember.cpp.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "training_spec.h"
#include "training_workloads.h"

namespace ember::compare {
namespace {

using namespace training;

torch::Tensor float_tensor(const std::vector<float>& values, const std::vector<int64_t>& shape) {
  return torch::from_blob(const_cast<float*>(values.data()), shape, torch::kFloat32).clone();
}

torch::Tensor index_tensor(const std::vector<int64_t>& values, const std::vector<int64_t>& shape) {
  return torch::from_blob(const_cast<int64_t*>(values.data()), shape, torch::kInt64).clone();
}

// Overwrites every parameter with the shared scheme's values for its name.
void initialise(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& named : model.named_parameters()) {
    torch::Tensor& parameter = named.value();
    std::vector<int64_t> shape(parameter.sizes().begin(), parameter.sizes().end());
    parameter.copy_(float_tensor(initial_parameter(named.key(), shape), shape));
  }
}

torch::nn::Sequential mlp(const MlpSpec& spec) {
  return torch::nn::Sequential(torch::nn::Linear(spec.inputs, spec.hidden), torch::nn::ReLU(),
                               torch::nn::Linear(spec.hidden, spec.hidden), torch::nn::ReLU(),
                               torch::nn::Linear(spec.hidden, spec.classes));
}

torch::nn::Sequential cnn(const CnnSpec& spec) {
  auto conv = [](int64_t in, int64_t out) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1));
  };
  auto pool = [] { return torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)); };
  int64_t pooled = spec.image_size / 4;
  return torch::nn::Sequential(conv(1, spec.channels1), torch::nn::ReLU(), pool(),  //
                               conv(spec.channels1, spec.channels2), torch::nn::ReLU(), pool(), torch::nn::Flatten(),
                               torch::nn::Linear(spec.channels2 * pooled * pooled, spec.hidden), torch::nn::ReLU(),
                               torch::nn::Linear(spec.hidden, spec.classes));
}

// nanoGPT's attention without its flash path (libtorch 1.13 has none on the
// CPU): scores, causal mask, softmax, weighted values. The query is scaled
// rather than the scores ([T, D] is smaller than [T, T]), as ember's is.
struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GptSpec& spec)
      : heads(spec.heads),
        c_attn(register_module("c_attn", torch::nn::Linear(spec.model_dim, 3 * spec.model_dim))),
        c_proj(register_module("c_proj", torch::nn::Linear(spec.model_dim, spec.model_dim))),
        future(torch::ones({spec.sequence, spec.sequence}, torch::kBool).triu(1)) {}

  torch::Tensor forward(const torch::Tensor& x) {
    int64_t batch = x.size(0), sequence = x.size(1), width = x.size(2), head_dim = width / heads;
    std::vector<torch::Tensor> qkv = c_attn(x).split(width, 2);  // 3 x [B,T,C]
    auto split_heads = [&](const torch::Tensor& t) {
      return t.view({batch, sequence, heads, head_dim}).transpose(1, 2);  // [B,H,T,D]
    };
    torch::Tensor q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]);
    double scale = 1.0 / std::sqrt(double(head_dim));
    torch::Tensor scores = torch::matmul(q * scale, k.transpose(-2, -1));  // [B,H,T,T]
    scores = scores.masked_fill(future.slice(0, 0, sequence).slice(1, 0, sequence),
                                -std::numeric_limits<float>::infinity());
    torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v);  // [B,H,T,D]
    return c_proj(y.transpose(1, 2).contiguous().view({batch, sequence, width}));
  }

  int64_t heads;
  torch::nn::Linear c_attn, c_proj;
  torch::Tensor future;
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const GptSpec& spec)
      : c_fc(register_module("c_fc", torch::nn::Linear(spec.model_dim, spec.mlp_ratio * spec.model_dim))),
        c_proj(register_module("c_proj", torch::nn::Linear(spec.mlp_ratio * spec.model_dim, spec.model_dim))) {}

  torch::Tensor forward(const torch::Tensor& x) { return c_proj(torch::gelu(c_fc(x))); }

  torch::nn::Linear c_fc, c_proj;
};
TORCH_MODULE(Mlp);

// x + attn(ln_1(x)), then + mlp(ln_2(.)).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptSpec& spec)
      : ln_1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec.model_dim})))),
        attn(register_module("attn", CausalSelfAttention(spec))),
        ln_2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec.model_dim})))),
        mlp(register_module("mlp", Mlp(spec))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x + attn(ln_1(x));
    return h + mlp(ln_2(h));
  }

  torch::nn::LayerNorm ln_1;
  CausalSelfAttention attn;
  torch::nn::LayerNorm ln_2;
  Mlp mlp;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptSpec& spec)
      : wte(register_module("wte", torch::nn::Embedding(spec.vocabulary, spec.model_dim))),
        wpe(register_module("wpe", torch::nn::Embedding(spec.sequence, spec.model_dim))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec.model_dim})))) {
    for (int64_t layer = 0; layer < spec.layers; ++layer) h->push_back(Block(spec));
  }

  // [B,T] tokens -> [B,T,V] logits
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor positions = torch::arange(tokens.size(1), torch::kInt64);
    torch::Tensor x = wte(tokens) + wpe(positions);  // [B,T,C]
    for (const auto& block : *h) x = block->as<Block>()->forward(x);
    return torch::nn::functional::linear(ln_f(x), wte->weight);  // tied head
  }

  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

// The parts of one training run; the step owns them through a shared_ptr.
template <class Model>
struct Run {
  explicit Run(Model model_) : model(std::move(model_)) {}
  Model model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  torch::Tensor inputs, targets;
};

std::unique_ptr<torch::optim::Optimizer> sgd(torch::nn::Module& model) {
  SgdSettings settings;
  return std::make_unique<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(settings.lr).momentum(settings.momentum));
}

std::unique_ptr<torch::optim::Optimizer> adamw(torch::nn::Module& model) {
  AdamWSettings settings;
  return std::make_unique<torch::optim::AdamW>(model.parameters(),
                                               torch::optim::AdamWOptions(settings.lr)
                                                   .betas({settings.beta1, settings.beta2})
                                                   .eps(settings.eps)
                                                   .weight_decay(settings.weight_decay));
}

// Python's torch.autocast("cpu", torch.bfloat16) in C++ (libtorch 1.13 has
// no guard class): on for the forward, its cast cache cleared when it ends.
class BFloat16Autocast {
 public:
  BFloat16Autocast() : previous_dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
    at::autocast::increment_nesting();
  }
  ~BFloat16Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
  BFloat16Autocast(const BFloat16Autocast&) = delete;
  BFloat16Autocast& operator=(const BFloat16Autocast&) = delete;

 private:
  at::ScalarType previous_dtype_;
};

// zero_grad, forward, cross-entropy, backward, step. Gradients are set to none
// rather than zeroed (libtorch 1.13's zero_grad() only zeroes), as PyTorch
// does by default since 2.0: no memset, backward writes them fresh. With
// `bf16` the forward runs under bf16 autocast and the logits are cast back to
// f32 for the loss, as training_ember.cpp does.
template <class Model>
TrainingStep training_step(std::shared_ptr<Run<Model>> run, bool bf16) {
  return [run, bf16] {
    c10::InferenceMode grad_mode_on(false);
    for (torch::Tensor& parameter : run->model->parameters()) parameter.mutable_grad() = torch::Tensor();
    torch::Tensor logits;
    {
      std::optional<BFloat16Autocast> autocast;
      if (bf16) autocast.emplace();
      logits = run->model->forward(run->inputs);
      if (bf16) logits = logits.to(torch::kFloat32);
    }
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), run->targets.view(-1));
    loss.backward();
    run->optimizer->step();
    return loss.item<double>();
  };
}

using OptimizerFactory = std::unique_ptr<torch::optim::Optimizer> (*)(torch::nn::Module&);

// Models are built outside the worker's InferenceMode, or their parameters
// could not record gradients.
TrainingStep mlp_step(OptimizerFactory make_optimizer, bool bf16) {
  c10::InferenceMode grad_mode_on(false);
  MlpSpec spec;
  ClassificationBatch batch = mlp_batch(spec);
  auto run = std::make_shared<Run<torch::nn::Sequential>>(mlp(spec));
  initialise(*run->model);
  run->optimizer = make_optimizer(*run->model);
  run->inputs = float_tensor(batch.inputs, batch.input_shape);
  run->targets = index_tensor(batch.targets, {spec.batch});
  return training_step(run, bf16);
}

TrainingStep cnn_step(bool bf16) {
  c10::InferenceMode grad_mode_on(false);
  CnnSpec spec;
  ClassificationBatch batch = cnn_batch(spec);
  auto run = std::make_shared<Run<torch::nn::Sequential>>(cnn(spec));
  initialise(*run->model);
  run->optimizer = sgd(*run->model);
  run->inputs = float_tensor(batch.inputs, batch.input_shape);
  run->targets = index_tensor(batch.targets, {spec.batch});
  return training_step(run, bf16);
}

TrainingStep gpt_step(bool bf16) {
  c10::InferenceMode grad_mode_on(false);
  GptSpec spec;
  TokenBatch batch = gpt_batch(spec);
  auto run = std::make_shared<Run<Gpt>>(Gpt(spec));
  initialise(*run->model);
  run->optimizer = adamw(*run->model);
  run->inputs = index_tensor(batch.inputs, {spec.batch, spec.sequence});
  run->targets = index_tensor(batch.targets, {spec.batch, spec.sequence});
  return training_step(run, bf16);
}

}  // namespace

std::vector<TrainingWorkload> training_workloads() {
  std::vector<TrainingWorkload> rows;
  for (bool bf16 : {false, true}) {
    std::string suffix = bf16 ? "_bf16" : "";
    rows.push_back({"train_mlp_sgd" + suffix, [bf16] { return mlp_step(sgd, bf16); }});
    rows.push_back({"train_mlp_adamw" + suffix, [bf16] { return mlp_step(adamw, bf16); }});
    rows.push_back({"train_cnn_sgd" + suffix, [bf16] { return cnn_step(bf16); }});
    rows.push_back({"train_gpt_adamw" + suffix, [bf16] { return gpt_step(bf16); }});
  }
  return rows;
}

}  // namespace ember::compare
