// The GPU benchmarks of issue 7, each a ratio against a peer measured in the
// same run on the same GPU: ember's GEMM against raw cuBLAS, element-wise and
// softmax bandwidth against a device-to-device copy, and the GPT training
// step's tokens/s (PyTorch's side is gpt_pytorch.py; scripts/gpu-check.sh runs
// both and divides). Timed with CUDA events; prints one "name: value" line per
// figure. Not Google Benchmark: the GPU machine has no such package.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>

#include <ember/ember.h>

#include "training_models_ember.h"

using namespace ember;

namespace {

const Device kGpu{DeviceType::cuda, 0};

// Milliseconds per call of `work`, after `warmup` untimed calls.
double time_ms(const std::function<void()>& work, int iterations, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) work();
  Event start(kGpu, true), end(kGpu, true);
  start.record();
  for (int i = 0; i < iterations; ++i) work();
  end.record();
  end.synchronize();
  return start.elapsed_ms(end) / iterations;
}

void check(cublasStatus_t status) { EMBER_CHECK(status == CUBLAS_STATUS_SUCCESS, "bench: cuBLAS error {}", int(status)); }

void gemm(DType dtype, int64_t n) {
  Tensor a = randn({n, n}, {.dtype = dtype, .device = kGpu}), b = randn({n, n}, {.dtype = dtype, .device = kGpu});
  Tensor c = empty({n, n}, {.dtype = dtype, .device = kGpu});
  const int iterations = n >= 8192 ? 10 : 30;
  const double ember_ms = time_ms([&] { matmul(a, b); }, iterations);
  cublasHandle_t handle;
  check(cublasCreate(&handle));
  check(cublasSetStream(handle, static_cast<cudaStream_t>(current_stream(kGpu).handle())));
  const cudaDataType_t type = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1, beta = 0;
  const double cublas_ms = time_ms(
      [&] {
        check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n), &alpha, b.data_ptr(), type, int(n),
                           a.data_ptr(), type, int(n), &beta, c.data_ptr(), type, int(n), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
      },
      iterations);
  cublasDestroy(handle);
  const double tflop = 2.0 * double(n) * double(n) * double(n) / 1e12;
  std::printf("gemm_%s_%lld: ember %.1f TFLOP/s, cuBLAS %.1f TFLOP/s, ratio %.3f\n", std::string(dtype_name(dtype)).c_str(),
              (long long)n, tflop / (ember_ms / 1e3), tflop / (cublas_ms / 1e3), cublas_ms / ember_ms);
}

void bandwidth() {
  const int64_t n = int64_t(256) << 20;  // 256M f32 elements: 1 GiB per tensor
  Tensor a = randn({n}, {.device = kGpu}), b = randn({n}, {.device = kGpu});
  Tensor copy_target = empty({n}, {.device = kGpu});
  const double copy_ms = time_ms([&] { copy_target.copy_(a); }, 10);
  const double copy_gbs = 2.0 * double(n) * 4 / (copy_ms / 1e3) / 1e9;  // read + write
  const double add_ms = time_ms([&] { add(a, b); }, 10);
  const double add_gbs = 3.0 * double(n) * 4 / (add_ms / 1e3) / 1e9;
  Tensor rows = a.view({n / 4096, 4096});
  const double softmax_ms = time_ms([&] { softmax(rows, -1); }, 10);
  const double softmax_gbs = 2.0 * double(n) * 4 / (softmax_ms / 1e3) / 1e9;
  std::printf("copy_256M_f32: %.0f GB/s\n", copy_gbs);
  std::printf("add_256M_f32: %.0f GB/s, ratio to copy %.3f\n", add_gbs, add_gbs / copy_gbs);
  std::printf("softmax_256M_f32_rows4096: %.0f GB/s, ratio to copy %.3f\n", softmax_gbs, softmax_gbs / copy_gbs);
}

// GPT-2 small: 12 layers, d_model 768, 12 heads, sequence 1024, batch 8, bf16 autocast, AdamW.
void gpt_step() {
  compare::training::GptSpec spec{.batch = 8, .sequence = 1024, .vocabulary = 50304, .layers = 12, .model_dim = 768,
                                  .heads = 12, .mlp_ratio = 4};
  auto model = std::make_shared<compare::training::Gpt>(spec);
  compare::training::initialise(*model);
  model->to(kGpu);
  compare::training::TokenBatch batch = compare::training::gpt_batch(spec);
  Tensor inputs = from_vector(batch.inputs, {spec.batch, spec.sequence}).to(kGpu);
  Tensor targets = from_vector(batch.targets, {spec.batch * spec.sequence}).to(kGpu);
  optim::AdamW optimizer(model->parameters(), {.lr = 1e-4, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0.01});
  Tensor loss;
  auto step = [&] {
    Tensor logits;
    {
      AutocastGuard autocast(DeviceType::cuda, DType::bf16);
      logits = (*model)(inputs);
    }
    loss = cross_entropy(logits.to(DType::f32).view({-1, spec.vocabulary}), targets);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
  };
  const double ms = time_ms(step, 10, 3);
  std::printf("gpt_step_loss: %.4f\n", loss.item<double>());
  std::printf("gpt_step_ember: %.0f tokens/s (%.1f ms per step)\n", double(spec.batch * spec.sequence) / (ms / 1e3), ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::printf("bench_cuda: no CUDA GPU on this machine: nothing measured\n");
    return 0;
  }
  std::printf("device: %s\n", cuda::device_description(0).c_str());
  const std::string only = argc > 1 ? argv[1] : "all";
  try {
    if (only == "all" || only == "gemm")
      for (DType dtype : {DType::bf16, DType::f16})
        for (int64_t n : {4096, 8192}) gemm(dtype, n);
    if (only == "all" || only == "bandwidth") bandwidth();
    if (only == "all" || only == "gpt") gpt_step();
  } catch (const Error& e) {
    std::printf("bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
