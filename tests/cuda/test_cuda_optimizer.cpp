// The CUDA fused optimizer updates and unscale pass (kernels/cuda/optimizer.cu)
// against the reference kernels: several steps of every optimizer and option
// in every floating dtype, from the same parameters, states and gradients,
// compared after the last step (parameter and every state) with the
// per-dtype tolerance; and the found_inf flag of loss scaling, which stays on
// the device. Skips without a GPU, except the coverage test.
#include <limits>
#include <set>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

const DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const int64_t kSizes[] = {1, 7, 1000, 70001};
constexpr int kSteps = 5;

// The operands of one optimizer (the parameter first, then its states; an
// undefined one is unused) on the CPU and their copies on the GPU.
struct Run {
  std::vector<Tensor> cpu, gpu;
};

Run start(const std::vector<Tensor>& operands) {
  Run run;
  for (const Tensor& t : operands) {
    run.cpu.push_back(t.defined() ? t.clone() : Tensor());
    run.gpu.push_back(t.defined() ? t.to(kGpu) : Tensor());
  }
  return run;
}

// Runs kSteps updates on both devices, each with a fresh gradient (the same on
// both), the CPU's through the reference kernels, and compares every operand.
// update(operands, grad, step) applies one step, step counted from 1.
template <class Update>
void expect_steps_match(const std::vector<Tensor>& operands, Update update, const std::string& what) {
  Run run = start(operands);
  const DType dtype = operands[0].dtype();
  for (int step = 1; step <= kSteps; ++step) {
    Tensor grad = random_tensor(operands[0].shape(), dtype);
    reference([&] { update(run.cpu, grad, step); });
    update(run.gpu, grad.to(kGpu), step);
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].defined()) continue;
    EXPECT_TRUE(all_close(run.gpu[i].to(kCPU), run.cpu[i])) << what << ", operand " << i;
  }
}

TEST(CudaOptimizer, EveryCpuDtypeHasACudaKernel) {
  const std::set<std::string> ours = {"sgd_update",     "adam_update", "rmsprop_update",
                                      "adagrad_update", "lion_update", "unscale_and_check"};
  EXPECT_TRUE(cuda_registers_cpu_dtypes(ours));
}

TEST(CudaOptimizer, SeveralStepsMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : kSizes) {
      const std::string what = fmt::format("{} n={}", dtype, n);
      Tensor param = random_tensor({n}, dtype), state = random_tensor({n}, dtype);
      Tensor positive = random_tensor({n}, dtype, 1, 2), small = random_tensor({n}, dtype, -0.5, 0.5);
      Tensor positive2 = random_tensor({n}, dtype, 0, 2);
      for (bool nesterov : {false, true}) {
        for (bool maximize : {false, true}) {
          expect_steps_match(
              {param, state},
              [&](std::vector<Tensor>& t, const Tensor& grad, int step) {
                sgd_update_(t[0], grad, t[1],
                            {.lr = 0.1,
                             .momentum = 0.9,
                             .dampening = 0.1,
                             .weight_decay = 0.01,
                             .nesterov = nesterov,
                             .maximize = maximize,
                             .first_step = step == 1});
              },
              what + " sgd");
        }
      }
      expect_steps_match(
          {param},
          [&](std::vector<Tensor>& t, const Tensor& grad, int) { sgd_update_(t[0], grad, Tensor(), {.lr = 0.1}); },
          what + " plain sgd");
      for (bool amsgrad : {false, true}) {
        for (bool decoupled : {false, true}) {
          for (bool maximize : {false, true}) {
            expect_steps_match(
                {param, state, positive, amsgrad ? positive2 : Tensor()},
                [&](std::vector<Tensor>& t, const Tensor& grad, int step) {
                  adam_update_(t[0], grad, t[1], t[2], t[3],
                               {.lr = 0.01,
                                .weight_decay = 0.1,
                                .decoupled_weight_decay = decoupled,
                                .amsgrad = amsgrad,
                                .maximize = maximize,
                                .step = step});
                },
                what + fmt::format(" adam amsgrad={} decoupled={} maximize={}", amsgrad, decoupled, maximize));
          }
        }
      }
      expect_steps_match(
          {param, state, positive, Tensor()},
          [&](std::vector<Tensor>& t, const Tensor& grad, int step) {
            adam_update_(t[0], grad, t[1], t[2], t[3], {.lr = 0.001, .step = step});
          },
          what + " plain adam");
      for (bool centered : {false, true}) {
        for (double momentum : {0.0, 0.9}) {
          expect_steps_match(
              {param, positive, centered ? small : Tensor(), momentum > 0 ? state : Tensor()},
              [&](std::vector<Tensor>& t, const Tensor& grad, int) {
                rmsprop_update_(t[0], grad, t[1], t[2], t[3],
                                {.lr = 0.01, .weight_decay = 0.1, .momentum = momentum, .centered = centered});
              },
              what + fmt::format(" rmsprop centered={} momentum={}", centered, momentum));
        }
      }
      for (bool maximize : {false, true}) {
        expect_steps_match(
            {param, positive2},
            [&](std::vector<Tensor>& t, const Tensor& grad, int step) {
              adagrad_update_(t[0], grad, t[1],
                              {.lr = 0.1, .lr_decay = 0.01, .weight_decay = 0.1, .maximize = maximize, .step = step});
            },
            what + " adagrad");
        expect_steps_match(
            {param, state},
            [&](std::vector<Tensor>& t, const Tensor& grad, int) {
              lion_update_(t[0], grad, t[1], {.lr = 0.01, .weight_decay = 0.1, .maximize = maximize});
            },
            what + " lion");
      }
    }
  }
}

// A copy of `grad` with `value` written at `position`.
Tensor with_value_at(const Tensor& grad, int64_t position, double value) {
  std::vector<double> values = grad.to(DType::f64).to_vector<double>();
  values[size_t(position)] = value;
  return from_vector(values, grad.shape()).to(grad.dtype());
}

TEST(CudaOptimizer, UnscaleAndCheckScalesLikeTheCpuAndFlagsOnTheDevice) {
  EMBER_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : kSizes) {
      Tensor clean = random_tensor({n}, dtype, -1000, 1000);
      for (double special : {0.0, inf, -inf, nan}) {
        for (float initial_flag : {0.0f, 1.0f}) {
          const std::string what = fmt::format("{} n={} special={} flag={}", dtype, n, special, initial_flag);
          Tensor grad = special == 0.0 ? clean : with_value_at(clean, n - 1, special);
          Tensor cpu_grad = grad.clone(), cpu_flag = full({1}, initial_flag);
          reference([&] { unscale_and_check_(cpu_grad, cpu_flag, 1.0 / 1024); });
          Tensor gpu_grad = grad.to(kGpu), gpu_flag = full({1}, initial_flag).to(kGpu);
          unscale_and_check_(gpu_grad, gpu_flag, 1.0 / 1024);
          EXPECT_TRUE(gpu_flag.device().is_cuda()) << what;
          EXPECT_TRUE(all_close(gpu_grad.to(kCPU), cpu_grad)) << what;
          EXPECT_TRUE(all_close(gpu_flag.to(kCPU), cpu_flag, 0, 0)) << what;
        }
      }
    }
  }
  // A strided gradient is staged through a dense copy and written back in place.
  Tensor base = random_tensor({64, 32}, DType::f32);
  Tensor cpu_grad = base.clone().transpose(0, 1), cpu_flag = zeros({1});
  reference([&] { unscale_and_check_(cpu_grad, cpu_flag, 0.5); });
  Tensor gpu_grad = base.to(kGpu).transpose(0, 1), gpu_flag = zeros({1}).to(kGpu);
  unscale_and_check_(gpu_grad, gpu_flag, 0.5);
  EXPECT_TRUE(all_close(gpu_grad.to(kCPU), cpu_grad));
  EXPECT_TRUE(all_close(gpu_flag.to(kCPU), cpu_flag, 0, 0));
}

}  // namespace
}  // namespace ember::testing
