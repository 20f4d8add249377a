// Reference element-wise kernels: one element at a time through for_each_row,
// with the scalar functions of core/arithmetic.h and <cmath>. 16-bit floats
// compute in float. The oracle of tests/core/test_{binary,unary,compare}.cpp.
#include <cmath>
#include <functional>
#include <numbers>

#include "core/arithmetic.h"
#include "core/convert.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class Out, class A, class B, class F>
void binary(const ElementwiseLoop& loop, F f) {
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      A a = reinterpret_cast<const A*>(p[1])[i * s[1]];
      B b = reinterpret_cast<const B*>(p[2])[i * s[2]];
      reinterpret_cast<Out*>(p[0])[i * s[0]] = f(a, b);
    }
  });
}

template <class Out, class In, class F>
void unary(const ElementwiseLoop& loop, F f) {
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      reinterpret_cast<Out*>(p[0])[i * s[0]] = f(reinterpret_cast<const In*>(p[1])[i * s[1]]);
  });
}

template <class T> void add(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::add(a, b); }); }
template <class T> void sub(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::sub(a, b); }); }
template <class T> void mul(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::mul(a, b); }); }
template <class T> void div(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::div(a, b); }); }

// The floating functions, on float or double. Each is the textbook formula.
struct Exp { template <class C> C operator()(C x) const { return std::exp(x); } };
struct Log { template <class C> C operator()(C x) const { return std::log(x); } };
struct Log1p { template <class C> C operator()(C x) const { return std::log1p(x); } };
struct Sqrt { template <class C> C operator()(C x) const { return std::sqrt(x); } };
struct Rsqrt { template <class C> C operator()(C x) const { return C(1) / std::sqrt(x); } };
struct Sin { template <class C> C operator()(C x) const { return std::sin(x); } };
struct Cos { template <class C> C operator()(C x) const { return std::cos(x); } };
struct Tanh { template <class C> C operator()(C x) const { return std::tanh(x); } };
struct Erf { template <class C> C operator()(C x) const { return std::erf(x); } };
struct Sigmoid { template <class C> C operator()(C x) const { return C(1) / (C(1) + std::exp(-x)); } };
struct Silu { template <class C> C operator()(C x) const { return x / (C(1) + std::exp(-x)); } };
// gelu(x) = x * Phi(x), Phi the standard normal CDF.
struct Gelu {
  template <class C> C operator()(C x) const { return C(0.5) * x * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2))); }
};
// The tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <class C> C operator()(C x) const {
    const C inner = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + std::tanh(inner));
  }
};

template <class T, class F>
void floating(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  unary<T, T>(loop, [](T x) { return T(F{}(C(x))); });
}

// Integers wrap like PyTorch's: -INT_MIN and abs(INT_MIN) are INT_MIN.
template <class T> T negate(T x) {
  if constexpr (std::is_integral_v<T>) return arith::sub(T(0), x);
  else return T(-ComputeType<T>(x));
}
template <class T> void neg(const ElementwiseLoop& loop) { unary<T, T>(loop, [](T x) { return negate(x); }); }
template <class T> void abs(const ElementwiseLoop& loop) {
  unary<T, T>(loop, [](T x) {
    if constexpr (std::is_integral_v<T>) return x < 0 ? negate(x) : x;
    else return T(std::abs(ComputeType<T>(x)));
  });
}
// Rounding; round takes halves to the even neighbour (nearbyint in the default mode).
struct Floor {
  template <class C> C operator()(C x) const { return std::floor(x); }
};
struct Ceil {
  template <class C> C operator()(C x) const { return std::ceil(x); }
};
struct Round {
  template <class C> C operator()(C x) const { return std::nearbyint(x); }
};
struct Trunc {
  template <class C> C operator()(C x) const { return std::trunc(x); }
};
// sign(nan) = sign(-0) = 0, as PyTorch's.
template <class T> void sign(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  unary<T, T>(loop, [](T x) { return T(C(C(x) > C(0)) - C(C(x) < C(0))); });
}
// relu(nan) = nan and relu(-0) = +0.
template <class T> void relu(const ElementwiseLoop& loop) {
  unary<T, T>(loop, [](T x) { return ComputeType<T>(x) <= 0 ? T(0) : x; });
}

template <class T> void pow(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) {
    if constexpr (std::is_integral_v<T>) return arith::power(a, int64_t(b));
    else return T(std::pow(ComputeType<T>(a), ComputeType<T>(b)));
  });
}
template <class T> void pow_scalar(const ElementwiseLoop& loop, const Scalar& exponent) {
  if constexpr (std::is_integral_v<T>) {
    unary<T, T>(loop, [&](T x) { return arith::power(x, exponent.to_int()); });
  } else {
    using C = ComputeType<T>;
    const C e = exponent.to<C>();
    unary<T, T>(loop, [&](T x) { return T(std::pow(C(x), e)); });
  }
}

template <class T> void fmod(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) { return arith::fmod(a, b); });
}
template <class T> void remainder(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) { return arith::remainder(a, b); });
}
template <class T> void floor_divide(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) { return arith::floor_divide(a, b); });
}
template <class T> void maximum(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) { return arith::maximum(a, b); });
}
template <class T> void minimum(const ElementwiseLoop& loop) {
  binary<T, T, T>(loop, [](T a, T b) { return arith::minimum(a, b); });
}

// min(max(x, low), high), so low > high gives high; nan stays nan.
template <class T> void clamp(const ElementwiseLoop& loop, const Scalar* low, const Scalar* high) {
  using C = ComputeType<T>;
  const C lo = arith::clamp_bound<T>(low, true), hi = arith::clamp_bound<T>(high, false);
  unary<T, T>(loop, [&](T x) {
    if (arith::is_nan(x)) return x;
    C v = C(x);
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return T(v);
  });
}

template <class T> void where(const ElementwiseLoop& loop) {
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      bool condition = reinterpret_cast<const bool*>(p[1])[i * s[1]];
      reinterpret_cast<T*>(p[0])[i * s[0]] = reinterpret_cast<const T*>(p[condition ? 2 : 3])[i * s[condition ? 2 : 3]];
    }
  });
}

// input + value * tensor1 * tensor2, evaluated as PyTorch does; integers wrap,
// 16-bit floats compute in float and round once.
template <class T> void addcmul(const ElementwiseLoop& loop, const Scalar& value) {
  using C = ComputeType<T>;
  const C scale = value.to<C>();
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      C input = C(reinterpret_cast<const T*>(p[1])[i * s[1]]);
      C tensor1 = C(reinterpret_cast<const T*>(p[2])[i * s[2]]);
      C tensor2 = C(reinterpret_cast<const T*>(p[3])[i * s[3]]);
      reinterpret_cast<T*>(p[0])[i * s[0]] = T(arith::add(input, arith::mul(arith::mul(scale, tensor1), tensor2)));
    }
  });
}

// Comparisons and logic write bool; 16-bit floats compare as float.
template <class T, class F> void compare(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  binary<bool, T, T>(loop, [](T a, T b) { return F{}(C(a), C(b)); });
}
template <class T> void logical_and(const ElementwiseLoop& loop) {
  binary<bool, T, T>(loop, [](T a, T b) { return convert<bool>(a) && convert<bool>(b); });
}
template <class T> void logical_or(const ElementwiseLoop& loop) {
  binary<bool, T, T>(loop, [](T a, T b) { return convert<bool>(a) || convert<bool>(b); });
}
template <class T> void logical_not(const ElementwiseLoop& loop) {
  unary<bool, T>(loop, [](T x) { return !convert<bool>(x); });
}
template <class T> void isnan(const ElementwiseLoop& loop) { unary<bool, T>(loop, [](T x) { return arith::is_nan(x); }); }
template <class T> void isinf(const ElementwiseLoop& loop) {
  unary<bool, T>(loop, [](T x) {
    if constexpr (std::is_integral_v<T>) return false;
    else return std::isinf(ComputeType<T>(x));
  });
}

// Activation gradients: grad * f'(x), each the textbook derivative. relu's
// passes grad where x is nan (x <= 0 is false), as PyTorch's threshold_backward.
struct ThresholdBackward { template <class C> C operator()(C g, C x) const { return x <= C(0) ? C(0) : g; } };
// gelu'(x) = Phi(x) + x phi(x), phi the standard normal density.
struct GeluBackward {
  template <class C> C operator()(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2)));
    const C pdf = std::exp(C(-0.5) * x * x) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    return g * (cdf + x * pdf);
  }
};
// d/dx 0.5 x (1 + tanh u), u = k (x + c x^3): 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2).
struct GeluTanhBackward {
  template <class C> C operator()(C g, C x) const {
    const C k = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), c = C(0.044715);
    const C t = std::tanh(k * (x + c * x * x * x));
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * c * x * x));
  }
};
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
struct SiluBackward {
  template <class C> C operator()(C g, C x) const {
    const C sig = C(1) / (C(1) + std::exp(-x));
    return g * sig * (C(1) + x * (C(1) - sig));
  }
};
template <class T, class F> void activation_backward(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  binary<T, T, T>(loop, [](T g, T x) { return T(F{}(C(g), C(x))); });
}

template <class F>
void register_backward(Op<ElementwiseKernel>& op) {
  register_reference_for<float, double, Half, BFloat16>(
      op, [](auto tag) { return &activation_backward<decltype(tag), F>; });
}

template <class F>
void register_floating(Op<ElementwiseKernel>& op) {
  register_reference_for<float, double, Half, BFloat16>(op, [](auto tag) { return &floating<decltype(tag), F>; });
}
template <class F>
void register_compare(Op<ElementwiseKernel>& op) {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      op, [](auto tag) { return &compare<decltype(tag), F>; });
}

}  // namespace

void register_elementwise_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      add_op, [](auto tag) { return &add<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sub_op, [](auto tag) { return &sub<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      mul_op, [](auto tag) { return &mul<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(div_op, [](auto tag) { return &div<decltype(tag)>; });

  register_floating<Exp>(exp_op);
  register_floating<Log>(log_op);
  register_floating<Log1p>(log1p_op);
  register_floating<Sqrt>(sqrt_op);
  register_floating<Rsqrt>(rsqrt_op);
  register_floating<Sin>(sin_op);
  register_floating<Cos>(cos_op);
  register_floating<Tanh>(tanh_op);
  register_floating<Erf>(erf_op);
  register_floating<Sigmoid>(sigmoid_op);
  register_floating<Floor>(floor_op);
  register_floating<Ceil>(ceil_op);
  register_floating<Round>(round_op);
  register_floating<Trunc>(trunc_op);
  register_floating<Silu>(silu_op);
  register_floating<Gelu>(gelu_op);
  register_floating<GeluTanh>(gelu_tanh_op);
  register_backward<ThresholdBackward>(threshold_backward_op);
  register_backward<GeluBackward>(gelu_backward_op);
  register_backward<GeluTanhBackward>(gelu_tanh_backward_op);
  register_backward<SiluBackward>(silu_backward_op);

  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      neg_op, [](auto tag) { return &neg<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      abs_op, [](auto tag) { return &abs<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      relu_op, [](auto tag) { return &relu<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sign_op, [](auto tag) { return &sign<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_op, [](auto tag) { return &pow<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      fmod_op, [](auto tag) { return &fmod<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      remainder_op, [](auto tag) { return &remainder<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      floor_divide_op, [](auto tag) { return &floor_divide<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_scalar_op, [](auto tag) { return &pow_scalar<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      clamp_op, [](auto tag) { return &clamp<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      maximum_op, [](auto tag) { return &maximum<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      minimum_op, [](auto tag) { return &minimum<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      where_op, [](auto tag) { return &where<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      addcmul_op, [](auto tag) { return &addcmul<decltype(tag)>; });

  register_compare<std::equal_to<>>(eq_op);
  register_compare<std::not_equal_to<>>(ne_op);
  register_compare<std::less<>>(lt_op);
  register_compare<std::less_equal<>>(le_op);
  register_compare<std::greater<>>(gt_op);
  register_compare<std::greater_equal<>>(ge_op);
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_and_op, [](auto tag) { return &logical_and<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_or_op, [](auto tag) { return &logical_or<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_not_op, [](auto tag) { return &logical_not<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      isnan_op, [](auto tag) { return &isnan<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      isinf_op, [](auto tag) { return &isinf<decltype(tag)>; });
}

}  // namespace ember::reference
