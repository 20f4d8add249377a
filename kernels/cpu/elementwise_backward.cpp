// CPU kernels of the activation gradients (threshold_backward, gelu_backward
// in both forms, silu_backward): out = grad * f'(input) in one pass, as Eigen
// array expressions that vectorise erf, exp and tanh. Dense f32/f64 rows run
// in place; other rows (16-bit floats, strided or broadcast views) a block at
// a time through buffers of the compute type. Registered by elementwise.cpp;
// tested against the reference kernels in tests/core/test_unary.cpp and the
// op table.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <numbers>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/vector_gelu.h"

namespace ember::cpu {
namespace {

template <class F> using In = Eigen::Map<const Eigen::Array<F, Eigen::Dynamic, 1>>;
template <class F> using Out = Eigen::Map<Eigen::Array<F, Eigen::Dynamic, 1>>;

constexpr int64_t kBlock = 256;  // elements per buffered block: stays in L1
constexpr int64_t kMathGrain = kParallelGrain / 8;

// Runs row(grad, input, out, n) over float or double runs. T is the stored type.
template <class T, class Row>
void backward_rows(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    T* out = reinterpret_cast<T*>(p[0]);
    const T* grad = reinterpret_cast<const T*>(p[1]);
    const T* input = reinterpret_cast<const T*>(p[2]);
    if constexpr (std::is_same_v<T, C>) {
      if (s[0] == 1 && s[1] == 1 && s[2] == 1) return Row{}(grad, input, out, n);
    }
    if constexpr (requires { Row::dense_bf16(grad, input, out, n); }) {
      if (s[0] == 1 && s[1] == 1 && s[2] == 1 && Row::dense_bf16(grad, input, out, n)) return;
    }
    C grad_buffer[kBlock], input_buffer[kBlock];
    const bool dense = s[0] == 1 && s[1] == 1 && s[2] == 1;
    for (int64_t start = 0; start < n; start += kBlock) {
      const int64_t m = std::min(kBlock, n - start);
      if (dense) {
        convert_run(grad + start, grad_buffer, m);
        convert_run(input + start, input_buffer, m);
      } else {
        for (int64_t i = 0; i < m; ++i) {
          grad_buffer[i] = C(grad[(start + i) * s[1]]);
          input_buffer[i] = C(input[(start + i) * s[2]]);
        }
      }
      Row{}(grad_buffer, input_buffer, grad_buffer, m);
      if (dense)
        convert_run(grad_buffer, out + start, m);
      else
        for (int64_t i = 0; i < m; ++i) out[(start + i) * s[0]] = T(grad_buffer[i]);
    }
  }, kMathGrain);
}

// Each row computes what its reference kernel (kernels/reference/elementwise.cpp) does.
// Both operands are loaded unconditionally, so the select compiles to a
// blend rather than a branch on the sign (random signs mispredict half the time).
struct ThresholdBackwardRow {
  template <class F> void operator()(const F* grad, const F* input, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      const F g = grad[i], x = input[i];
      out[i] = x <= F(0) ? F(0) : g;
    }
  }
};
// gelu'(x) = Phi(x) + x phi(x). Floats and dense bf16 runs take the AVX2 row
// of vector_gelu.cpp where the CPU has it: Eigen's SSE2 exp made this 5 ns an element.
struct GeluBackwardRow {
  template <class F> void operator()(const F* grad, const F* input, F* out, int64_t n) const {
    if constexpr (std::is_same_v<F, float>) {
      if (vector_gelu_available()) return gelu_backward_run(grad, input, out, n);
    }
    In<F> x(input, n);
    auto cdf = F(0.5) * (F(1) + (x * F(std::numbers::sqrt2 / 2)).erf());
    auto pdf = (F(-0.5) * x.square()).exp() * F(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    Out<F>(out, n) = In<F>(grad, n) * (cdf + x * pdf);
  }  // Dense bf16 runs without the buffers, where the CPU has AVX2; false: take the buffers.
  static bool dense_bf16(const BFloat16* grad, const BFloat16* input, BFloat16* out, int64_t n) {
    if (!vector_gelu_available()) return false;
    gelu_backward_run(grad, input, out, n);
    return true;
  }
};
// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2), u = k (x + c x^3).
struct GeluTanhBackwardRow {
  template <class F> void operator()(const F* grad, const F* input, F* out, int64_t n) const {
    In<F> x(input, n);
    const F k = F(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), c = F(0.044715);
    Eigen::Array<F, Eigen::Dynamic, 1> t = (k * (x + c * x.cube())).tanh();
    Out<F>(out, n) =
        In<F>(grad, n) * (F(0.5) * (F(1) + t) + F(0.5) * x * (F(1) - t.square()) * k * (F(1) + F(3) * c * x.square()));
  }
};
// s (1 + x (1 - s)), s = sigmoid(x).
struct SiluBackwardRow {
  template <class F> void operator()(const F* grad, const F* input, F* out, int64_t n) const {
    In<F> x(input, n);
    Eigen::Array<F, Eigen::Dynamic, 1> sig = (F(1) + (-x).exp()).inverse();
    Out<F>(out, n) = In<F>(grad, n) * sig * (F(1) + x * (F(1) - sig));
  }
};

template <class Row>
void register_backward(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16>(
      op, DeviceType::cpu, [](auto tag) { return &backward_rows<decltype(tag), Row>; });
}

}  // namespace

void register_elementwise_backward_kernels() {
  register_backward<ThresholdBackwardRow>(threshold_backward_op);
  register_backward<GeluBackwardRow>(gelu_backward_op);
  register_backward<GeluTanhBackwardRow>(gelu_tanh_backward_op);
  register_backward<SiluBackwardRow>(silu_backward_op);
}

}  // namespace ember::cpu
