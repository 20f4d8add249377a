// Reference optimizer updates (and loss scaling's unscale pass): the formulas
// of core/ops/optimizer.h written out per element, in the order PyTorch's
// single-tensor optimizers apply them, with the arithmetic in the compute type
// (f32 for 16-bit parameters). The oracle of kernels/cpu/optimizer.cpp (tests/optim/test_update_kernels.cpp).
#include <cmath>

#include "core/ops/optimizer_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class T>
T* data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <class T>
void sgd(const Tensor& param_t, const Tensor& grad_t, const Tensor& buffer_t, const SgdUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T* buffer = data<T>(buffer_t);
  for (int64_t i = 0; i < param_t.numel(); ++i) {
    C d = hyper.maximize ? -C(grad[i]) : C(grad[i]);
    if (hyper.weight_decay != 0) d = d + C(hyper.weight_decay) * C(param[i]);
    if (hyper.momentum != 0) {
      if (hyper.first_step)
        buffer[i] = T(d);
      else
        buffer[i] = T(C(buffer[i]) * C(hyper.momentum) + C(1 - hyper.dampening) * d);
      d = hyper.nesterov ? d + C(hyper.momentum) * C(buffer[i]) : C(buffer[i]);
    }
    param[i] = T(C(param[i]) + C(-hyper.lr) * d);
  }
}

template <class T>
void adam(const Tensor& param_t, const Tensor& grad_t, const Tensor& exp_avg_t, const Tensor& exp_avg_sq_t,
          const Tensor& max_exp_avg_sq_t, const AdamUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T *exp_avg = data<T>(exp_avg_t), *exp_avg_sq = data<T>(exp_avg_sq_t), *max_exp_avg_sq = data<T>(max_exp_avg_sq_t);
  const double bias_correction1 = 1 - std::pow(hyper.beta1, double(hyper.step));
  const double bias_correction2 = 1 - std::pow(hyper.beta2, double(hyper.step));
  const double step_size = hyper.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (int64_t i = 0; i < param_t.numel(); ++i) {
    C g = hyper.maximize ? -C(grad[i]) : C(grad[i]);
    if (hyper.decoupled_weight_decay)
      param[i] = T(C(param[i]) * C(1 - hyper.lr * hyper.weight_decay));
    else if (hyper.weight_decay != 0)
      g = g + C(hyper.weight_decay) * C(param[i]);
    exp_avg[i] = T(C(exp_avg[i]) * C(hyper.beta1) + C(1 - hyper.beta1) * g);
    exp_avg_sq[i] = T(C(exp_avg_sq[i]) * C(hyper.beta2) + C(1 - hyper.beta2) * g * g);
    C second = C(exp_avg_sq[i]);
    if (hyper.amsgrad) {
      max_exp_avg_sq[i] = T(std::max(C(max_exp_avg_sq[i]), second));
      second = C(max_exp_avg_sq[i]);
    }
    C denom = std::sqrt(second) / C(bias_correction2_sqrt) + C(hyper.eps);
    param[i] = T(C(param[i]) + C(-step_size) * C(exp_avg[i]) / denom);
  }
}

template <class T>
void rmsprop(const Tensor& param_t, const Tensor& grad_t, const Tensor& square_avg_t, const Tensor& grad_avg_t,
             const Tensor& buffer_t, const RmspropUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T *square_avg = data<T>(square_avg_t), *grad_avg = data<T>(grad_avg_t), *buffer = data<T>(buffer_t);
  for (int64_t i = 0; i < param_t.numel(); ++i) {
    C g = hyper.maximize ? -C(grad[i]) : C(grad[i]);
    if (hyper.weight_decay != 0) g = g + C(hyper.weight_decay) * C(param[i]);
    square_avg[i] = T(C(square_avg[i]) * C(hyper.alpha) + C(1 - hyper.alpha) * g * g);
    C avg;
    if (hyper.centered) {
      grad_avg[i] = T(C(grad_avg[i]) * C(hyper.alpha) + C(1 - hyper.alpha) * g);
      avg = std::sqrt(C(square_avg[i]) - C(grad_avg[i]) * C(grad_avg[i]));
    } else {
      avg = std::sqrt(C(square_avg[i]));
    }
    avg = avg + C(hyper.eps);
    if (hyper.momentum > 0) {
      buffer[i] = T(C(buffer[i]) * C(hyper.momentum) + g / avg);
      param[i] = T(C(param[i]) + C(-hyper.lr) * C(buffer[i]));
    } else {
      param[i] = T(C(param[i]) + C(-hyper.lr) * g / avg);
    }
  }
}

template <class T>
void adagrad(const Tensor& param_t, const Tensor& grad_t, const Tensor& sum_t, const AdagradUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T* sum = data<T>(sum_t);
  const double clr = hyper.lr / (1 + double(hyper.step - 1) * hyper.lr_decay);
  for (int64_t i = 0; i < param_t.numel(); ++i) {
    C g = hyper.maximize ? -C(grad[i]) : C(grad[i]);
    if (hyper.weight_decay != 0) g = g + C(hyper.weight_decay) * C(param[i]);
    sum[i] = T(C(sum[i]) + g * g);
    C std_dev = std::sqrt(C(sum[i])) + C(hyper.eps);
    param[i] = T(C(param[i]) + C(-clr) * g / std_dev);
  }
}

template <class T>
void lion(const Tensor& param_t, const Tensor& grad_t, const Tensor& exp_avg_t, const LionUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T* exp_avg = data<T>(exp_avg_t);
  for (int64_t i = 0; i < param_t.numel(); ++i) {
    C g = hyper.maximize ? -C(grad[i]) : C(grad[i]);
    C p = C(param[i]) * C(1 - hyper.lr * hyper.weight_decay);
    C interpolated = C(hyper.beta1) * C(exp_avg[i]) + C(1 - hyper.beta1) * g;
    C sign = interpolated > 0 ? C(1) : interpolated < 0 ? C(-1) : C(0);
    param[i] = T(p - C(hyper.lr) * sign);
    exp_avg[i] = T(C(hyper.beta2) * C(exp_avg[i]) + C(1 - hyper.beta2) * g);
  }
}

template <class T>
void unscale_and_check(const Tensor& grad_t, const Tensor& found_inf_t, double inv_scale) {
  using C = ComputeType<T>;
  T* grad = data<T>(grad_t);
  bool found = false;
  for (int64_t i = 0; i < grad_t.numel(); ++i) {
    const C g = C(grad[i]);
    if (!std::isfinite(g)) found = true;
    grad[i] = T(g * C(inv_scale));
  }
  if (found) *data<float>(found_inf_t) = 1;
}

}  // namespace

void register_optimizer_kernels() {
  register_reference_for<float, double, Half, BFloat16>(sgd_update_op, [](auto tag) { return &sgd<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(adam_update_op, [](auto tag) { return &adam<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(rmsprop_update_op,
                                                        [](auto tag) { return &rmsprop<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(adagrad_update_op,
                                                        [](auto tag) { return &adagrad<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(lion_update_op, [](auto tag) { return &lion<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(unscale_and_check_op,
                                                        [](auto tag) { return &unscale_and_check<decltype(tag)>; });
}

}  // namespace ember::reference
