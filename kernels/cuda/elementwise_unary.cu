// CUDA unary math kernels (neg, abs, relu, exp ... gelu, pow by a scalar,
// clamp) and the activation gradients (threshold, gelu in both forms, silu).
// Each computes its reference kernel's textbook formula
// (kernels/reference/elementwise.cpp) in the compute type (f32 for 16-bit
// floats) with CUDA's math library (within a few ulp; never the fast-math
// intrinsics). Registered for the dtypes the CPU backend registers.
// Tests: tests/cuda/test_cuda_elementwise.cpp.
#include <cmath>
#include <numbers>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

// Integers wrap like PyTorch's: -INT_MIN and abs(INT_MIN) are INT_MIN.
struct Neg {
  template <class C> __device__ C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return arith::sub(C(0), x);
    else return -x;
  }
};
struct Abs {
  template <class C> __device__ C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return x < 0 ? arith::sub(C(0), x) : x;
    else return std::fabs(x);
  }
};
// `<= 0` so that relu(-0) = +0; nan compares false and passes through.
struct Relu {
  template <class C> __device__ C operator()(C x) const { return x <= C(0) ? C(0) : x; }
};

// sign(nan) = sign(-0) = 0, as the CPU's.
struct Sign {
  template <class C> __device__ C operator()(C x) const { return C(C(x > C(0)) - C(x < C(0))); }
};
struct Floor {
  template <class C> __device__ C operator()(C x) const { return std::floor(x); }
};
struct Ceil {
  template <class C> __device__ C operator()(C x) const { return std::ceil(x); }
};
// Halves to the even neighbour, as the CPU's nearbyint.
struct Round {
  template <class C> __device__ C operator()(C x) const { return std::rint(x); }
};
struct Trunc {
  template <class C> __device__ C operator()(C x) const { return std::trunc(x); }
};
struct Exp {
  template <class C> __device__ C operator()(C x) const { return std::exp(x); }
};
struct Log {
  template <class C> __device__ C operator()(C x) const { return std::log(x); }
};
struct Log1p {
  template <class C> __device__ C operator()(C x) const { return std::log1p(x); }
};
struct Sqrt {
  template <class C> __device__ C operator()(C x) const { return std::sqrt(x); }
};
struct Rsqrt {
  template <class C> __device__ C operator()(C x) const { return C(1) / std::sqrt(x); }
};
struct Sin {
  template <class C> __device__ C operator()(C x) const { return std::sin(x); }
};
struct Cos {
  template <class C> __device__ C operator()(C x) const { return std::cos(x); }
};
struct Tanh {
  template <class C> __device__ C operator()(C x) const { return std::tanh(x); }
};
struct Erf {
  template <class C> __device__ C operator()(C x) const { return std::erf(x); }
};
struct Sigmoid {
  template <class C> __device__ C operator()(C x) const { return C(1) / (C(1) + std::exp(-x)); }
};
struct Silu {
  template <class C> __device__ C operator()(C x) const { return x / (C(1) + std::exp(-x)); }
};
// gelu(x) = x * Phi(x), Phi the standard normal CDF.
struct Gelu {
  template <class C> __device__ C operator()(C x) const {
    return C(0.5) * x * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2)));
  }
};
// The tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <class C> __device__ C operator()(C x) const {
    const C inner = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + std::tanh(inner));
  }
};

template <class T, class F>
void unary(const ElementwiseLoop& loop) {
  launch_elementwise<T, T>(loop, F{}, "elementwise unary");
}

// out = x ** exponent: integers by repeated squaring with an int64 exponent
// (the entry point refuses negative ones), floats by pow in the compute type.
template <class C>
struct PowScalar {
  using Exponent = std::conditional_t<std::is_integral_v<C>, int64_t, C>;
  Exponent exponent;
  __device__ C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return arith::power(x, exponent);
    else return std::pow(x, exponent);
  }
};
template <class T>
void pow_scalar(const ElementwiseLoop& loop, const Scalar& exponent) {
  using F = PowScalar<ComputeType<T>>;
  launch_elementwise<T, T>(loop, F{exponent.to<typename F::Exponent>()}, "pow_scalar");
}

// min(max(x, low), high), so low > high gives high; nan stays nan. The bounds
// are in the compute type, so a 16-bit float is clamped before it is rounded.
template <class C>
struct Clamp {
  C low, high;
  __device__ C operator()(C x) const {
    if (arith::is_nan(x)) return x;
    if (x < low) x = low;
    if (x > high) x = high;
    return x;
  }
};
template <class T>
void clamp(const ElementwiseLoop& loop, const Scalar* low, const Scalar* high) {
  using C = ComputeType<T>;
  launch_elementwise<T, T>(loop, Clamp<C>{arith::clamp_bound<T>(low, true), arith::clamp_bound<T>(high, false)},
                           "clamp");
}

// Activation gradients, grad * f'(x). threshold_backward passes grad where x
// is nan (x <= 0 is false), as PyTorch's does.
struct ThresholdBackward {
  template <class C> __device__ C operator()(C g, C x) const { return x <= C(0) ? C(0) : g; }
};
// gelu'(x) = Phi(x) + x phi(x), phi the standard normal density.
struct GeluBackward {
  template <class C> __device__ C operator()(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + std::erf(x * C(std::numbers::sqrt2 / 2)));
    const C pdf = std::exp(C(-0.5) * x * x) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    return g * (cdf + x * pdf);
  }
};
// d/dx 0.5 x (1 + tanh u), u = k (x + c x^3): 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2).
struct GeluTanhBackward {
  template <class C> __device__ C operator()(C g, C x) const {
    const C k = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), c = C(0.044715);
    const C t = std::tanh(k * (x + c * x * x * x));
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * c * x * x));
  }
};
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
struct SiluBackward {
  template <class C> __device__ C operator()(C g, C x) const {
    const C sig = C(1) / (C(1) + std::exp(-x));
    return g * sig * (C(1) + x * (C(1) - sig));
  }
};

template <class T, class F>
void activation_backward(const ElementwiseLoop& loop) {
  launch_elementwise<T, T, T>(loop, F{}, "activation backward");
}

template <class F>
void register_floating(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16>(op, DeviceType::cuda, [](auto tag) { return &unary<decltype(tag), F>; });
}
template <class F>
void register_signed(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      op, DeviceType::cuda, [](auto tag) { return &unary<decltype(tag), F>; });
}
template <class F>
void register_backward(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16>(
      op, DeviceType::cuda, [](auto tag) { return &activation_backward<decltype(tag), F>; });
}

}  // namespace

void register_elementwise_unary_kernels() {
  register_signed<Neg>(neg_op);
  register_signed<Abs>(abs_op);
  register_signed<Relu>(relu_op);
  register_signed<Sign>(sign_op);
  register_floating<Floor>(floor_op);
  register_floating<Ceil>(ceil_op);
  register_floating<Round>(round_op);
  register_floating<Trunc>(trunc_op);
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
  register_floating<Silu>(silu_op);
  register_floating<Gelu>(gelu_op);
  register_floating<GeluTanh>(gelu_tanh_op);
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_scalar_op, DeviceType::cuda, [](auto tag) { return &pow_scalar<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      clamp_op, DeviceType::cuda, [](auto tag) { return &clamp<decltype(tag)>; });
  register_backward<ThresholdBackward>(threshold_backward_op);
  register_backward<GeluBackward>(gelu_backward_op);
  register_backward<GeluTanhBackward>(gelu_tanh_backward_op);
  register_backward<SiluBackward>(silu_backward_op);
}

}  // namespace ember::cuda
