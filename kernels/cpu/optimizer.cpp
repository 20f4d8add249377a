// CPU optimizer updates, and loss scaling's unscale pass: the formulas of
// core/ops/optimizer.h in one pass per parameter. Options become coefficients
// outside the loop (maximize is a sign, an unused weight decay a zero factor,
// exact for finite values) and the other flags are loop-invariant, so the
// loops vectorise. The elements go through in blocks of kBlock that stay in
// L1: the moments first, then the square roots with SIMD instructions
// (std::sqrt sets errno, which keeps compilers from vectorising it), then the
// parameter. Threads split the blocks above kParallelGrain elements.
// Oracle: kernels/reference/optimizer.cpp; tests: tests/optim/test_update_kernels.cpp.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/ops/optimizer_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/target_isa.h"

namespace ember::cpu {
namespace {

constexpr int64_t kBlock = 256;

template <class T>
T* data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// Calls body(first, count) for every block of [0, numel).
template <class Body>
void for_each_block(int64_t numel, Body body) {
  parallel_for(0, numel, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t first = begin; first < end; first += kBlock) body(first, std::min(kBlock, end - first));
  });
}

template <class C>
void sqrt_in_place(C* values, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<C, float>) {
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(values + i, _mm_sqrt_ps(_mm_loadu_ps(values + i)));
  } else {
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(values + i, _mm_sqrt_pd(_mm_loadu_pd(values + i)));
  }
#endif
  for (; i < n; ++i) values[i] = std::sqrt(values[i]);
}

// The gradient as the update sees it: sign * g + weight_decay * p, the decay
// term left out when weight_decay is 0 (as PyTorch's): 0 * inf made an
// infinite parameter NaN. The test is loop-invariant; the loops stay vector
// code (a blend).
template <class T>
struct GradientTerms {
  ComputeType<T> sign, weight_decay;
  bool decay;
  ComputeType<T> operator()(T grad, T param) const {
    const ComputeType<T> signed_grad = sign * ComputeType<T>(grad);
    return decay ? signed_grad + weight_decay * ComputeType<T>(param) : signed_grad;
  }
};

template <class T>
GradientTerms<T> gradient_terms(bool maximize, double weight_decay) {
  return {ComputeType<T>(maximize ? -1 : 1), ComputeType<T>(weight_decay), weight_decay != 0};
}

// SGD's coefficients, computed once per update.
template <class T>
struct SgdCoefficients {
  using C = ComputeType<T>;
  GradientTerms<T> gradient;
  C momentum, damped, neg_lr;
};

// One block of the SGD update, its flags template arguments so that each form
// is a branch-free loop (tested inside the loop, they kept it scalar: 3.2 ms a
// step of the MLP against PyTorch's 1.3 ms, bench/RESULTS.md). The operations
// are the reference's in its order: results bit-identical in f32 and f64.
template <class T, bool momentum, bool first_step, bool nesterov>
[[gnu::always_inline]] inline void sgd_block(const SgdCoefficients<T>& k, T* __restrict p, const T* __restrict g,
                                             T* __restrict b, int64_t n) {
  using C = ComputeType<T>;
  if constexpr (!momentum) {
    for (int64_t i = 0; i < n; ++i) p[i] = T(C(p[i]) + k.neg_lr * k.gradient(g[i], p[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const C d = k.gradient(g[i], p[i]);
      const T buffered = first_step ? T(d) : T(C(b[i]) * k.momentum + k.damped * d);
      b[i] = buffered;  // the parameter reads the buffer as stored (rounded, in bf16 and f16)
      p[i] = T(C(p[i]) + k.neg_lr * (nesterov ? d + k.momentum * C(buffered) : C(buffered)));
    }
  }
}

template <class T>
using SgdBlock = void (*)(const SgdCoefficients<T>&, T*, const T*, T*, int64_t);

template <class T, bool momentum, bool first_step, bool nesterov>
void sgd_block_baseline(const SgdCoefficients<T>& k, T* p, const T* g, T* b, int64_t n) {
  sgd_block<T, momentum, first_step, nesterov>(k, p, g, b, n);
}

#if defined(__x86_64__)
template <class T, bool momentum, bool first_step, bool nesterov>
EMBER_TARGET_AVX2 void sgd_block_avx2(const SgdCoefficients<T>& k, T* p, const T* g, T* b, int64_t n) {
  sgd_block<T, momentum, first_step, nesterov>(k, p, g, b, n);
}
#endif

template <class T, bool momentum, bool first_step, bool nesterov>
SgdBlock<T> pick_sgd_block() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return &sgd_block_avx2<T, momentum, first_step, nesterov>;
#endif
  return &sgd_block_baseline<T, momentum, first_step, nesterov>;
}

template <class T>
void sgd(const Tensor& param_t, const Tensor& grad_t, const Tensor& buffer_t, const SgdUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T* buffer = data<T>(buffer_t);
  const SgdCoefficients<T> k{.gradient = gradient_terms<T>(hyper.maximize, hyper.weight_decay),
                             .momentum = C(hyper.momentum),
                             .damped = C(1 - hyper.dampening),
                             .neg_lr = C(-hyper.lr)};
  static const SgdBlock<T> plain = pick_sgd_block<T, false, false, false>(),
                           heavy_ball = pick_sgd_block<T, true, false, false>(),
                           heavy_ball_first = pick_sgd_block<T, true, true, false>(),
                           nesterov = pick_sgd_block<T, true, false, true>(),
                           nesterov_first = pick_sgd_block<T, true, true, true>();
  const SgdBlock<T> block = hyper.momentum == 0 ? plain
                            : hyper.nesterov    ? (hyper.first_step ? nesterov_first : nesterov)
                                                : (hyper.first_step ? heavy_ball_first : heavy_ball);
  for_each_block(param_t.numel(), [&](int64_t first, int64_t n) {
    block(k, param + first, grad + first, buffer ? buffer + first : nullptr, n);
  });
}

// Adam's coefficients, computed once per update.
template <class T>
struct AdamCoefficients {
  using C = ComputeType<T>;
  GradientTerms<T> gradient;
  C decay, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, neg_step_size, bias_correction2_sqrt;
  bool amsgrad;
};

// One block of the Adam update: the moments, the square roots, the parameter.
// Compiled into each ISA variant below, whose loops vectorise at its width.
template <class T, class Sqrt>
[[gnu::always_inline]] inline void adam_block(const AdamCoefficients<T>& k, T* __restrict p, const T* __restrict g,
                                              T* __restrict m, T* __restrict v, T* __restrict v_max, int64_t n,
                                              Sqrt sqrt_run) {
  using C = ComputeType<T>;
  C root[kBlock];
  for (int64_t i = 0; i < n; ++i) {
    const C gi = k.gradient(g[i], p[i]);
    p[i] = T(C(p[i]) * k.decay);
    m[i] = T(C(m[i]) * k.beta1 + k.one_minus_beta1 * gi);
    v[i] = T(C(v[i]) * k.beta2 + k.one_minus_beta2 * gi * gi);
    root[i] = C(v[i]);
  }
  if (k.amsgrad) {
    for (int64_t i = 0; i < n; ++i) {
      v_max[i] = T(std::max(C(v_max[i]), root[i]));
      root[i] = C(v_max[i]);
    }
  }
  sqrt_run(root, n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = T(C(p[i]) + k.neg_step_size * C(m[i]) / (root[i] / k.bias_correction2_sqrt + k.eps));
}

template <class T>
using AdamBlock = void (*)(const AdamCoefficients<T>&, T*, const T*, T*, T*, T*, int64_t);

template <class T>
void adam_block_baseline(const AdamCoefficients<T>& k, T* p, const T* g, T* m, T* v, T* v_max, int64_t n) {
  adam_block(k, p, g, m, v, v_max, n, &sqrt_in_place<ComputeType<T>>);
}

#if defined(__x86_64__)
template <class C>
EMBER_TARGET_AVX2 void sqrt_in_place_avx2(C* values, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<C, float>) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(values + i, _mm256_sqrt_ps(_mm256_loadu_ps(values + i)));
  } else {
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(values + i, _mm256_sqrt_pd(_mm256_loadu_pd(values + i)));
  }
  for (; i < n; ++i) values[i] = std::sqrt(values[i]);
}

// Twice the vector width of the baseline: Adam's divisions and square roots
// make it compute-bound there (2.9 ns an element on one thread of this Zen 5).
template <class T>
EMBER_TARGET_AVX2 void adam_block_avx2(const AdamCoefficients<T>& k, T* p, const T* g, T* m, T* v, T* v_max,
                                       int64_t n) {
  adam_block(k, p, g, m, v, v_max, n, &sqrt_in_place_avx2<ComputeType<T>>);
}
#endif

template <class T>
AdamBlock<T> pick_adam_block() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return &adam_block_avx2<T>;
#endif
  return &adam_block_baseline<T>;
}

template <class T>
void adam(const Tensor& param_t, const Tensor& grad_t, const Tensor& exp_avg_t, const Tensor& exp_avg_sq_t,
          const Tensor& max_exp_avg_sq_t, const AdamUpdate& hyper) {
  using C = ComputeType<T>;
  T* param = data<T>(param_t);
  const T* grad = data<T>(grad_t);
  T *exp_avg = data<T>(exp_avg_t), *exp_avg_sq = data<T>(exp_avg_sq_t), *max_exp_avg_sq = data<T>(max_exp_avg_sq_t);
  const AdamCoefficients<T> k{
      .gradient = gradient_terms<T>(hyper.maximize, hyper.decoupled_weight_decay ? 0.0 : hyper.weight_decay),
      .decay = C(hyper.decoupled_weight_decay ? 1 - hyper.lr * hyper.weight_decay : 1.0),
      .beta1 = C(hyper.beta1),
      .beta2 = C(hyper.beta2),
      .one_minus_beta1 = C(1 - hyper.beta1),
      .one_minus_beta2 = C(1 - hyper.beta2),
      .eps = C(hyper.eps),
      .neg_step_size = C(-(hyper.lr / (1 - std::pow(hyper.beta1, double(hyper.step))))),
      .bias_correction2_sqrt = C(std::sqrt(1 - std::pow(hyper.beta2, double(hyper.step)))),
      .amsgrad = hyper.amsgrad};
  static const AdamBlock<T> block = pick_adam_block<T>();
  for_each_block(param_t.numel(), [&](int64_t first, int64_t n) {
    block(k, param + first, grad + first, exp_avg + first, exp_avg_sq + first,
          max_exp_avg_sq ? max_exp_avg_sq + first : nullptr, n);
  });
}

template <class T>
void rmsprop(const Tensor& param_t, const Tensor& grad_t, const Tensor& square_avg_t, const Tensor& grad_avg_t,
             const Tensor& buffer_t, const RmspropUpdate& hyper) {
  using C = ComputeType<T>;
  T* __restrict param = data<T>(param_t);
  const T* __restrict grad = data<T>(grad_t);
  T* __restrict square_avg = data<T>(square_avg_t);
  T* __restrict grad_avg = data<T>(grad_avg_t);
  T* __restrict buffer = data<T>(buffer_t);
  const GradientTerms<T> gradient = gradient_terms<T>(hyper.maximize, hyper.weight_decay);
  const C alpha = C(hyper.alpha), one_minus_alpha = C(1 - hyper.alpha), eps = C(hyper.eps),
          momentum = C(hyper.momentum), neg_lr = C(-hyper.lr);
  for_each_block(param_t.numel(), [&](int64_t first, int64_t n) {
    T* p = param + first;
    const T* g = grad + first;
    T* s = square_avg + first;
    C update[kBlock], root[kBlock];
    for (int64_t i = 0; i < n; ++i) {
      update[i] = gradient(g[i], p[i]);
      s[i] = T(C(s[i]) * alpha + one_minus_alpha * update[i] * update[i]);
      root[i] = C(s[i]);
    }
    if (hyper.centered) {
      T* a = grad_avg + first;
      for (int64_t i = 0; i < n; ++i) {
        a[i] = T(C(a[i]) * alpha + one_minus_alpha * update[i]);
        root[i] = root[i] - C(a[i]) * C(a[i]);
      }
    }
    sqrt_in_place(root, n);
    if (hyper.momentum > 0) {
      T* b = buffer + first;
      for (int64_t i = 0; i < n; ++i) {
        b[i] = T(C(b[i]) * momentum + update[i] / (root[i] + eps));
        p[i] = T(C(p[i]) + neg_lr * C(b[i]));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = T(C(p[i]) + neg_lr * update[i] / (root[i] + eps));
    }
  });
}

template <class T>
void adagrad(const Tensor& param_t, const Tensor& grad_t, const Tensor& sum_t, const AdagradUpdate& hyper) {
  using C = ComputeType<T>;
  T* __restrict param = data<T>(param_t);
  const T* __restrict grad = data<T>(grad_t);
  T* __restrict sum = data<T>(sum_t);
  const GradientTerms<T> gradient = gradient_terms<T>(hyper.maximize, hyper.weight_decay);
  const C neg_clr = C(-(hyper.lr / (1 + double(hyper.step - 1) * hyper.lr_decay))), eps = C(hyper.eps);
  for_each_block(param_t.numel(), [&](int64_t first, int64_t n) {
    T* p = param + first;
    const T* g = grad + first;
    T* s = sum + first;
    C update[kBlock], root[kBlock];
    for (int64_t i = 0; i < n; ++i) {
      update[i] = gradient(g[i], p[i]);
      s[i] = T(C(s[i]) + update[i] * update[i]);
      root[i] = C(s[i]);
    }
    sqrt_in_place(root, n);
    for (int64_t i = 0; i < n; ++i) p[i] = T(C(p[i]) + neg_clr * update[i] / (root[i] + eps));
  });
}

template <class T>
void lion(const Tensor& param_t, const Tensor& grad_t, const Tensor& exp_avg_t, const LionUpdate& hyper) {
  using C = ComputeType<T>;
  T* __restrict param = data<T>(param_t);
  const T* __restrict grad = data<T>(grad_t);
  T* __restrict exp_avg = data<T>(exp_avg_t);
  const C sign = C(hyper.maximize ? -1 : 1), decay = C(1 - hyper.lr * hyper.weight_decay), lr = C(hyper.lr);
  const C beta1 = C(hyper.beta1), beta2 = C(hyper.beta2), one_minus_beta1 = C(1 - hyper.beta1),
          one_minus_beta2 = C(1 - hyper.beta2);
  for_each_block(param_t.numel(), [&](int64_t first, int64_t n) {
    T* p = param + first;
    const T* g = grad + first;
    T* m = exp_avg + first;
    for (int64_t i = 0; i < n; ++i) {
      const C gi = sign * C(g[i]), mi = C(m[i]);
      const C interpolated = beta1 * mi + one_minus_beta1 * gi;
      const C direction = C(interpolated > 0) - C(interpolated < 0);
      p[i] = T(C(p[i]) * decay - lr * direction);
      m[i] = T(beta2 * mi + one_minus_beta2 * gi);
    }
  });
}

// Whether `value` is inf or NaN (every exponent bit set), tested on its bits:
// an integer test vectorises where std::isfinite does not.
inline bool non_finite(float value) { return (std::bit_cast<uint32_t>(value) & 0x7f800000u) == 0x7f800000u; }
inline bool non_finite(double value) {
  return (std::bit_cast<uint64_t>(value) & 0x7ff0000000000000u) == 0x7ff0000000000000u;
}
inline bool non_finite(BFloat16 value) { return (value.bits & 0x7f80u) == 0x7f80u; }
inline bool non_finite(Half value) { return (value.bits & 0x7c00u) == 0x7c00u; }

template <class T>
void unscale_and_check(const Tensor& grad_t, const Tensor& found_inf_t, double inv_scale) {
  using C = ComputeType<T>;
  T* __restrict grad = data<T>(grad_t);
  const C scale = C(inv_scale);
  std::atomic<bool> found{false};
  for_each_block(grad_t.numel(), [&](int64_t first, int64_t n) {
    T* g = grad + first;
    unsigned block_found = 0;  // an OR-reduction the loop vectorises with the scaling
    for (int64_t i = 0; i < n; ++i) {
      block_found |= unsigned(non_finite(g[i]));
      g[i] = T(C(g[i]) * scale);
    }
    if (block_found) found.store(true, std::memory_order_relaxed);
  });
  if (found.load(std::memory_order_relaxed)) *data<float>(found_inf_t) = 1;
}

}  // namespace

void register_optimizer_kernels() {
  register_for<float, double, Half, BFloat16>(sgd_update_op, DeviceType::cpu,
                                              [](auto tag) { return &sgd<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(adam_update_op, DeviceType::cpu,
                                              [](auto tag) { return &adam<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rmsprop_update_op, DeviceType::cpu,
                                              [](auto tag) { return &rmsprop<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(adagrad_update_op, DeviceType::cpu,
                                              [](auto tag) { return &adagrad<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(lion_update_op, DeviceType::cpu,
                                              [](auto tag) { return &lion<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(unscale_and_check_op, DeviceType::cpu,
                                              [](auto tag) { return &unscale_and_check<decltype(tag)>; });
}

}  // namespace ember::cpu
