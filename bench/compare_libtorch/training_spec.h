// The training-step workloads of the libtorch comparison, written once for
// both workers: model sizes, optimizer settings, the batch and the initial
// parameter values. Framework-free (plain vectors), so training_ember.cpp and
// training_libtorch.cpp build the same models from the same numbers and their
// first losses agree to rounding. The models are described in bench/README.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::compare::training {

// MLP 784-1024-1024-10 with ReLU, batch 128: nn::Sequential, names 0, 2, 4.
struct MlpSpec {
  int64_t batch = 128;
  int64_t inputs = 784;
  int64_t hidden = 1024;
  int64_t classes = 10;
};

// The small CNN, batch 64 of 1x28x28: conv 1->32 3x3 pad 1, ReLU, maxpool 2,
// conv 32->64 3x3 pad 1, ReLU, maxpool 2, flatten, linear 64*7*7->128, ReLU,
// linear 128->10. nn::Sequential, parameter names 0, 3, 7, 9.
struct CnnSpec {
  int64_t batch = 64;
  int64_t image_size = 28;
  int64_t channels1 = 32;
  int64_t channels2 = 64;
  int64_t hidden = 128;
  int64_t classes = 10;
};

// A GPT: token and position embeddings, pre-norm transformer blocks (causal
// self-attention, MLP ratio 4 with exact GELU, biases everywhere, no dropout),
// a final LayerNorm, and the head tied to the token embedding (logits =
// x wte^T). nanoGPT's names without its "transformer." prefix: wte, wpe,
// h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc,
// h.N.mlp.c_proj, ln_f.
struct GptSpec {
  int64_t batch = 16;
  int64_t sequence = 128;
  int64_t vocabulary = 65;
  int64_t layers = 4;
  int64_t model_dim = 256;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;
};

// PyTorch's defaults where these name one.
struct SgdSettings {
  double lr = 0.01;
  double momentum = 0.9;
};
struct AdamWSettings {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One fixed batch, reused every step: inputs uniform in [-1, 1) and class
// targets in [0, classes).
struct ClassificationBatch {
  std::vector<int64_t> input_shape;
  std::vector<float> inputs;
  std::vector<int64_t> targets;
};
ClassificationBatch mlp_batch(const MlpSpec& spec);
ClassificationBatch cnn_batch(const CnnSpec& spec);

// Rows of sequence + 1 tokens: inputs are the first `sequence`, targets the
// last (next-token prediction), both [batch, sequence] row-major.
struct TokenBatch {
  std::vector<int64_t> inputs;
  std::vector<int64_t> targets;
};
TokenBatch gpt_batch(const GptSpec& spec);

// The initialisation scheme of every workload, keyed by the parameter's name
// (so the two sides need not list parameters in the same order): weights of
// two or more dims uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's
// default bound for Linear and Conv2d; fan_in = numel / shape[0]) from a
// fixed-seed generator seeded by the name; one-dim `*.weight` (norm scales)
// ones; biases zeros.
std::vector<float> initial_parameter(const std::string& name, const std::vector<int64_t>& shape);

}  // namespace ember::compare::training
