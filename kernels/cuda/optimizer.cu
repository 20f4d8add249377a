// CUDA fused optimizer updates and loss scaling's unscale pass: one thread per
// element, the formulas of core/ops/optimizer.h written as the reference
// kernels (kernels/reference/optimizer.cpp) write them, in the same order,
// with the same roundings to the parameter's dtype where the reference stores
// a state. Coefficients are computed once on the host, in double as there.
// This file is compiled without fused multiply-adds (CMakeLists.txt), and
// CUDA's division and square root round correctly, so an update gives the
// reference kernels' values (the tests allow the per-dtype tolerance).
// Tests: tests/cuda/test_cuda_optimizer.cpp.
#include <cmath>

#include "core/ops/optimizer_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

// A value as stored in T and read back: what the reference sees when it reads
// a state it has just written.
template <class T>
__device__ __forceinline__ ComputeType<T> rounded(ComputeType<T> value) {
  if constexpr (std::is_same_v<T, Half>) return __half2float(__float2half_rn(value));
  else if constexpr (std::is_same_v<T, BFloat16>) return __bfloat162float(__float2bfloat16_rn(value));
  else return value;
}

template <class T>
T* data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Runs update(i) for every element of [0, n) on the current stream.
template <class Update>
__global__ void update_kernel(int64_t n, Update update) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    update(i);
}

template <class Update>
void launch(int64_t n, const Update& update, const char* name) {
  constexpr int kThreads = 256;
  update_kernel<<<blocks_for(n, kThreads), kThreads, 0, current_stream()>>>(n, update);
  check_launch(name);
}

// The gradient as every update starts it: negated to maximize.
template <class T>
__device__ __forceinline__ ComputeType<T> signed_gradient(const T* grad, int64_t i, bool maximize) {
  const ComputeType<T> g = load(grad + i);
  return maximize ? -g : g;
}

template <class T>
struct Sgd {
  using C = ComputeType<T>;
  T* param;
  const T* grad;
  T* buffer;
  C weight_decay, momentum, one_minus_dampening, neg_lr;
  bool use_weight_decay, use_momentum, nesterov, maximize, first_step;

  __device__ void operator()(int64_t i) const {
    C d = signed_gradient(grad, i, maximize);
    if (use_weight_decay) d = d + weight_decay * load(param + i);
    if (use_momentum) {
      const C b = rounded<T>(first_step ? d : load(buffer + i) * momentum + one_minus_dampening * d);
      store(buffer + i, b);
      d = nesterov ? d + momentum * b : b;
    }
    store(param + i, load(param + i) + neg_lr * d);
  }
};

template <class T>
void sgd(const Tensor& param, const Tensor& grad, const Tensor& buffer, const SgdUpdate& hyper) {
  using C = ComputeType<T>;
  launch(param.numel(),
         Sgd<T>{.param = data<T>(param),
                .grad = data<T>(grad),
                .buffer = data<T>(buffer),
                .weight_decay = C(hyper.weight_decay),
                .momentum = C(hyper.momentum),
                .one_minus_dampening = C(1 - hyper.dampening),
                .neg_lr = C(-hyper.lr),
                .use_weight_decay = hyper.weight_decay != 0,
                .use_momentum = hyper.momentum != 0,
                .nesterov = hyper.nesterov,
                .maximize = hyper.maximize,
                .first_step = hyper.first_step},
         "sgd_update");
}

template <class T>
struct Adam {
  using C = ComputeType<T>;
  T *param;
  const T* grad;
  T *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
  C weight_decay, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  bool decoupled, use_weight_decay, amsgrad, maximize;

  __device__ void operator()(int64_t i) const {
    C g = signed_gradient(grad, i, maximize);
    C p = load(param + i);
    if (decoupled) p = rounded<T>(p * decay);
    else if (use_weight_decay) g = g + weight_decay * p;
    const C m = rounded<T>(load(exp_avg + i) * beta1 + one_minus_beta1 * g);
    const C v = rounded<T>(load(exp_avg_sq + i) * beta2 + one_minus_beta2 * g * g);
    store(exp_avg + i, m);
    store(exp_avg_sq + i, v);
    C second = v;
    if (amsgrad) {
      const C previous = load(max_exp_avg_sq + i);
      second = previous < second ? second : previous;  // std::max's choice, nan included
      store(max_exp_avg_sq + i, second);
    }
    const C denom = sqrt(second) / bias_correction2_sqrt + eps;
    store(param + i, p + neg_step_size * m / denom);
  }
};

template <class T>
void adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
          const Tensor& max_exp_avg_sq, const AdamUpdate& hyper) {
  using C = ComputeType<T>;
  const double bias_correction1 = 1 - std::pow(hyper.beta1, double(hyper.step));
  const double bias_correction2 = 1 - std::pow(hyper.beta2, double(hyper.step));
  launch(param.numel(),
         Adam<T>{.param = data<T>(param),
                 .grad = data<T>(grad),
                 .exp_avg = data<T>(exp_avg),
                 .exp_avg_sq = data<T>(exp_avg_sq),
                 .max_exp_avg_sq = data<T>(max_exp_avg_sq),
                 .weight_decay = C(hyper.weight_decay),
                 .decay = C(1 - hyper.lr * hyper.weight_decay),
                 .beta1 = C(hyper.beta1),
                 .one_minus_beta1 = C(1 - hyper.beta1),
                 .beta2 = C(hyper.beta2),
                 .one_minus_beta2 = C(1 - hyper.beta2),
                 .bias_correction2_sqrt = C(std::sqrt(bias_correction2)),
                 .eps = C(hyper.eps),
                 .neg_step_size = C(-(hyper.lr / bias_correction1)),
                 .decoupled = hyper.decoupled_weight_decay,
                 .use_weight_decay = hyper.weight_decay != 0,
                 .amsgrad = hyper.amsgrad,
                 .maximize = hyper.maximize},
         "adam_update");
}

template <class T>
struct Rmsprop {
  using C = ComputeType<T>;
  T* param;
  const T* grad;
  T *square_avg, *grad_avg, *buffer;
  C weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
  bool use_weight_decay, centered, use_momentum, maximize;

  __device__ void operator()(int64_t i) const {
    C g = signed_gradient(grad, i, maximize);
    const C p = load(param + i);
    if (use_weight_decay) g = g + weight_decay * p;
    const C s = rounded<T>(load(square_avg + i) * alpha + one_minus_alpha * g * g);
    store(square_avg + i, s);
    C avg;
    if (centered) {
      const C a = rounded<T>(load(grad_avg + i) * alpha + one_minus_alpha * g);
      store(grad_avg + i, a);
      avg = sqrt(s - a * a);
    } else {
      avg = sqrt(s);
    }
    avg = avg + eps;
    if (use_momentum) {
      const C b = rounded<T>(load(buffer + i) * momentum + g / avg);
      store(buffer + i, b);
      store(param + i, p + neg_lr * b);
    } else {
      store(param + i, p + neg_lr * g / avg);
    }
  }
};

template <class T>
void rmsprop(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
             const Tensor& buffer, const RmspropUpdate& hyper) {
  using C = ComputeType<T>;
  launch(param.numel(),
         Rmsprop<T>{.param = data<T>(param),
                    .grad = data<T>(grad),
                    .square_avg = data<T>(square_avg),
                    .grad_avg = data<T>(grad_avg),
                    .buffer = data<T>(buffer),
                    .weight_decay = C(hyper.weight_decay),
                    .alpha = C(hyper.alpha),
                    .one_minus_alpha = C(1 - hyper.alpha),
                    .eps = C(hyper.eps),
                    .momentum = C(hyper.momentum),
                    .neg_lr = C(-hyper.lr),
                    .use_weight_decay = hyper.weight_decay != 0,
                    .centered = hyper.centered,
                    .use_momentum = hyper.momentum > 0,
                    .maximize = hyper.maximize},
         "rmsprop_update");
}

template <class T>
struct Adagrad {
  using C = ComputeType<T>;
  T* param;
  const T* grad;
  T* sum;
  C weight_decay, eps, neg_clr;
  bool use_weight_decay, maximize;

  __device__ void operator()(int64_t i) const {
    C g = signed_gradient(grad, i, maximize);
    const C p = load(param + i);
    if (use_weight_decay) g = g + weight_decay * p;
    const C s = rounded<T>(load(sum + i) + g * g);
    store(sum + i, s);
    store(param + i, p + neg_clr * g / (sqrt(s) + eps));
  }
};

template <class T>
void adagrad(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradUpdate& hyper) {
  using C = ComputeType<T>;
  const double clr = hyper.lr / (1 + double(hyper.step - 1) * hyper.lr_decay);
  launch(param.numel(),
         Adagrad<T>{.param = data<T>(param),
                    .grad = data<T>(grad),
                    .sum = data<T>(sum),
                    .weight_decay = C(hyper.weight_decay),
                    .eps = C(hyper.eps),
                    .neg_clr = C(-clr),
                    .use_weight_decay = hyper.weight_decay != 0,
                    .maximize = hyper.maximize},
         "adagrad_update");
}

template <class T>
struct Lion {
  using C = ComputeType<T>;
  T* param;
  const T* grad;
  T* exp_avg;
  C decay, lr, beta1, one_minus_beta1, beta2, one_minus_beta2;
  bool maximize;

  __device__ void operator()(int64_t i) const {
    const C g = signed_gradient(grad, i, maximize), m = load(exp_avg + i);
    const C p = load(param + i) * decay;
    const C interpolated = beta1 * m + one_minus_beta1 * g;
    const C sign = interpolated > 0 ? C(1) : interpolated < 0 ? C(-1) : C(0);
    store(param + i, p - lr * sign);
    store(exp_avg + i, beta2 * m + one_minus_beta2 * g);
  }
};

template <class T>
void lion(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionUpdate& hyper) {
  using C = ComputeType<T>;
  launch(param.numel(),
         Lion<T>{.param = data<T>(param),
                 .grad = data<T>(grad),
                 .exp_avg = data<T>(exp_avg),
                 .decay = C(1 - hyper.lr * hyper.weight_decay),
                 .lr = C(hyper.lr),
                 .beta1 = C(hyper.beta1),
                 .one_minus_beta1 = C(1 - hyper.beta1),
                 .beta2 = C(hyper.beta2),
                 .one_minus_beta2 = C(1 - hyper.beta2),
                 .maximize = hyper.maximize},
         "lion_update");
}

// grad *= inv_scale; a thread that saw inf or nan writes 1 to found_inf (every
// writer writes the same value, and nothing ever clears it), so the flag stays
// on the device for the scaler to read when it chooses.
template <class T>
struct Unscale {
  using C = ComputeType<T>;
  T* grad;
  float* found_inf;
  C inv_scale;

  __device__ void operator()(int64_t i) const {
    const C g = load(grad + i);
    if (!isfinite(g)) *found_inf = 1.0f;
    store(grad + i, g * inv_scale);
  }
};

template <class T>
void unscale_and_check(const Tensor& grad, const Tensor& found_inf, double inv_scale) {
  using C = ComputeType<T>;
  launch(grad.numel(), Unscale<T>{data<T>(grad), data<float>(found_inf), C(inv_scale)}, "unscale_and_check");
}

}  // namespace

void register_optimizer_kernels() {
  register_for<float, double, Half, BFloat16>(sgd_update_op, DeviceType::cuda,
                                              [](auto tag) { return &sgd<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(adam_update_op, DeviceType::cuda,
                                              [](auto tag) { return &adam<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rmsprop_update_op, DeviceType::cuda,
                                              [](auto tag) { return &rmsprop<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(adagrad_update_op, DeviceType::cuda,
                                              [](auto tag) { return &adagrad<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(lion_update_op, DeviceType::cuda,
                                              [](auto tag) { return &lion<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(unscale_and_check_op, DeviceType::cuda,
                                              [](auto tag) { return &unscale_and_check<decltype(tag)>; });
}

}  // namespace ember::cuda
