// A transformer training step on the GPU: the same model, batch and AdamW
// run on the CPU and on cuda:0 give the same losses step by step, and the GPU
// run is clean under strict device copies (no host read until the losses are
// copied out explicitly at the end). Label `cuda`: skips without a GPU.
#include "cuda_compare.h"

namespace ember::testing {
namespace {

// Token embedding, one pre-norm transformer block, a linear head.
class TinyGpt : public nn::Module {
 public:
  TinyGpt() {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(kVocabulary, 64));
    block = register_module("block", std::make_shared<nn::TransformerBlock>(
                                         nn::TransformerBlockOptions{.embed_dim = 64, .num_heads = 2}));
    head = register_module("head", std::make_shared<nn::Linear>(64, kVocabulary));
  }
  Tensor forward(const Tensor& tokens) override { return (*head)((*block)((*embedding)(tokens))); }

  static constexpr int64_t kVocabulary = 50;
  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<nn::TransformerBlock> block;
  std::shared_ptr<nn::Linear> head;
};

// The losses of `steps` AdamW steps on one fixed batch, as one tensor on `device`.
Tensor train(Device device, int steps, bool bf16) {
  manual_seed(7);
  TinyGpt model;
  model.to(device);
  optim::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  Tensor tokens = randint(0, TinyGpt::kVocabulary, {4, 16}, {.dtype = DType::i64}).to(device);
  Tensor targets = randint(0, TinyGpt::kVocabulary, {4 * 16}, {.dtype = DType::i64}).to(device);
  std::vector<Tensor> losses;
  for (int step = 0; step < steps; ++step) {
    Tensor logits;
    {
      AutocastGuard autocast(device.type, DType::bf16, bf16);
      logits = model(tokens);
    }
    Tensor loss = cross_entropy(logits.to(DType::f32).view({-1, TinyGpt::kVocabulary}), targets);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    losses.push_back(loss.detach());
  }
  return stack(losses);
}

TEST(CudaTraining, LossesMatchTheCpuStepByStep) {
  EMBER_REQUIRE_GPU();
  Tensor cpu = train(kCPU, 5, false);
  Tensor gpu = train(kGpu, 5, false).to(kCPU);
  EXPECT_TRUE(all_close(gpu, cpu, 1e-4, 1e-4));
  EXPECT_LT(gpu.to_vector<float>().back(), gpu.to_vector<float>().front());  // it learns
}

TEST(CudaTraining, ABf16StepRunsCleanUnderStrictDeviceCopies) {
  EMBER_REQUIRE_GPU();
  set_strict_device_copies(true);
  Tensor losses;
  try {
    losses = train(kGpu, 3, true);
    losses = losses.to(kCPU);  // the one copy, asked for
  } catch (...) {
    set_strict_device_copies(false);
    throw;
  }
  set_strict_device_copies(false);
  for (float loss : losses.to_vector<float>()) EXPECT_TRUE(std::isfinite(loss));
}

}  // namespace
}  // namespace ember::testing
