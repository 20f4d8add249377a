// CPU unary math kernels (neg, abs, relu, exp ... gelu, pow by a scalar, clamp).
// Floating rows run as Eigen array expressions, which vectorise the
// transcendental functions: dense f32/f64 rows in place, every other row (16-bit
// floats, strided views) a block at a time through a buffer of the compute type.
// Registered by elementwise.cpp; tested against the reference in tests/core/test_unary.cpp.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/binary_loop.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/vector_gelu.h"

namespace ember::cpu {
namespace {

template <class F> using In = Eigen::Map<const Eigen::Array<F, Eigen::Dynamic, 1>>;
template <class F> using Out = Eigen::Map<Eigen::Array<F, Eigen::Dynamic, 1>>;

// Elements per buffered block: small enough to stay in L1.
constexpr int64_t kBlock = 256;
// A transcendental function costs ~10x an add, so its work splits across threads sooner.
constexpr int64_t kMathGrain = kParallelGrain / 8;

// Runs row(in, out, n) over float or double runs (in may equal out). T is the
// stored type; ComputeType<T> is what `row` sees.
template <class T, class Row>
void floating_rows(const ElementwiseLoop& loop, Row row, int64_t grain) {
  using C = ComputeType<T>;
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    T* out = reinterpret_cast<T*>(p[0]);
    const T* in = reinterpret_cast<const T*>(p[1]);
    if constexpr (std::is_same_v<T, C>) {
      if (s[0] == 1 && s[1] == 1) return row(in, out, n);
    }
    if constexpr (requires { Row::dense_bf16(in, out, n); }) {
      if (s[0] == 1 && s[1] == 1 && Row::dense_bf16(in, out, n)) return;
    }
    C buffer[kBlock];
    const bool dense = s[0] == 1 && s[1] == 1;
    for (int64_t start = 0; start < n; start += kBlock) {
      const int64_t m = std::min(kBlock, n - start);
      if (dense)
        convert_run(in + start, buffer, m);
      else
        for (int64_t i = 0; i < m; ++i) buffer[i] = C(in[(start + i) * s[1]]);
      row(buffer, buffer, m);
      if (dense)
        convert_run(buffer, out + start, m);
      else
        for (int64_t i = 0; i < m; ++i) out[(start + i) * s[0]] = T(buffer[i]);
    }
  }, grain);
}

// The rows. Each computes what its reference kernel in kernels/reference/elementwise.cpp does.
// neg, abs and relu also take integers, one element at a time (`integer`), wrapping like the reference.
struct NegRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = -in[i];
  }
  template <class I> static I integer(I x) { return arith::sub(I(0), x); }
};
struct AbsRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::abs(in[i]);
  }
  template <class I> static I integer(I x) { return x < 0 ? arith::sub(I(0), x) : x; }
};
// `<= 0` (not `< 0`) so that relu(-0) = +0; nan compares false and passes through.
struct ReluRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] <= F(0) ? F(0) : in[i];
  }
  template <class I> static I integer(I x) { return x <= 0 ? I(0) : x; }
};
// sign(nan) = sign(-0) = 0, as the reference.
struct SignRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = F(in[i] > F(0)) - F(in[i] < F(0));
  }
  template <class I> static I integer(I x) { return I(I(x > 0) - I(x < 0)); }
};
struct FloorRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::floor(in[i]);
  }
};
struct CeilRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::ceil(in[i]);
  }
};
// Halves to the even neighbour: nearbyint in the default rounding mode.
struct RoundRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::nearbyint(in[i]);
  }
};
struct TruncRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::trunc(in[i]);
  }
};
// exp alone uses the C library: at the baseline ISA (SSE2) glibc's expf is as
// fast as Eigen's, and exact below the normal range, where Eigen's stops at
// about 3e-39 instead of reaching 0 (exp(-inf) must be 0). Inside sigmoid and
// silu that floor is harmless: 1 + 3e-39 rounds to 1.
struct ExpRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
  }
};
// Eigen's log raises positive subnormals to the smallest normal value (every
// f32 below 1.2e-38 gave -87.3, where the reference and PyTorch go down to
// -103.3; found by the op fuzzer): a row holding one takes the C library's.
struct LogRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    // Branchless, so that it vectorises: 7% over Eigen's log of a dense f32
    // row, where `bool |= a && b` cost 34% (1M elements, -O3, standalone).
    int subnormal = 0;
    for (int64_t i = 0; i < n; ++i) subnormal |= int(in[i] > F(0)) & int(in[i] < std::numeric_limits<F>::min());
    if (!subnormal) [[likely]] {
      Out<F>(out, n) = In<F>(in, n).log();
      return;
    }
    for (int64_t i = 0; i < n; ++i) out[i] = std::log(in[i]);
  }
};
struct Log1pRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).log1p(); }
};
// Eigen's fast-math float sqrt (an rsqrt estimate and a Newton step) gives nan
// for +inf and flushes denormals, so square roots use the exact instruction.
struct SqrtRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    int64_t i = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<F, float>) {
      for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
    } else {
      for (; i + 2 <= n; i += 2) _mm_storeu_pd(out + i, _mm_sqrt_pd(_mm_loadu_pd(in + i)));
    }
#endif
    for (; i < n; ++i) out[i] = std::sqrt(in[i]);
  }
};
struct RsqrtRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    SqrtRow{}(in, out, n);
    Out<F>(out, n) = Out<F>(out, n).inverse();
  }
};
struct SinRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).sin(); }
};
struct CosRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).cos(); }
};
struct TanhRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).tanh(); }
};
struct ErfRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).erf(); }
};
struct SigmoidRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    Out<F>(out, n) = (F(1) + (-In<F>(in, n)).exp()).inverse();
  }
};
struct SiluRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    In<F> x(in, n);
    Out<F>(out, n) = x / (F(1) + (-x).exp());
  }
};
// Floats and dense bf16 runs take the AVX2 GELU of vector_gelu.cpp where the CPU has it (Eigen's
// SSE2 erf is four lanes wide).
struct GeluRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    if constexpr (std::is_same_v<F, float>) {
      if (vector_gelu_available()) return gelu_run(in, out, n);
    }
    In<F> x(in, n);
    Out<F>(out, n) = F(0.5) * x * (F(1) + (x * F(std::numbers::sqrt2 / 2)).erf());
  }  // Dense bf16 runs without the buffers, where the CPU has AVX2; false: take the buffers.
  static bool dense_bf16(const BFloat16* in, BFloat16* out, int64_t n) {
    if (!vector_gelu_available()) return false;
    gelu_run(in, out, n);
    return true;
  }
};
struct GeluTanhRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    In<F> x(in, n);
    const F beta = F(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), kappa = F(0.044715);
    Out<F>(out, n) = F(0.5) * x * (F(1) + (beta * (x + kappa * x.cube())).tanh());
  }
};
// out = in ** exponent, exponent in the compute type (double for f64, else float).
struct PowRow {
  double exponent;
  template <class F> void operator()(const F* in, F* out, int64_t n) const {
    Out<F>(out, n) = In<F>(in, n).pow(F(exponent));
  }
};
struct SquareRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).square(); }
};
struct CubeRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).cube(); }
};
struct ReciprocalRow {
  template <class F> void operator()(const F* in, F* out, int64_t n) const { Out<F>(out, n) = In<F>(in, n).inverse(); }
};

template <class T, class Row>
void floating(const ElementwiseLoop& loop) {
  floating_rows<T>(loop, Row{}, kMathGrain);
}

template <class T, class Row>
void signed_op(const ElementwiseLoop& loop) {
  if constexpr (std::is_integral_v<T>) unary_loop<T, T>(loop, [](T x) { return Row::integer(x); });
  else floating_rows<T>(loop, Row{}, kParallelGrain);
}

// Small integer and half-integer exponents take exact shortcuts instead of a general pow.
template <class T>
void pow_scalar(const ElementwiseLoop& loop, const Scalar& exponent) {
  if constexpr (std::is_integral_v<T>) {
    const int64_t e = exponent.to_int();
    unary_loop<T, T>(loop, [e](T x) { return arith::power(x, e); });
  } else {
    const double e = double(exponent.to<ComputeType<T>>());
    if (e == 2) return floating_rows<T>(loop, SquareRow{}, kParallelGrain);
    if (e == 3) return floating_rows<T>(loop, CubeRow{}, kParallelGrain);
    if (e == 0.5) return floating_rows<T>(loop, SqrtRow{}, kParallelGrain);
    if (e == -0.5) return floating_rows<T>(loop, RsqrtRow{}, kParallelGrain);
    if (e == -1) return floating_rows<T>(loop, ReciprocalRow{}, kParallelGrain);
    floating_rows<T>(loop, PowRow{e}, kMathGrain);
  }
}

// min(max(x, low), high) in this operand order keeps a nan x (std::max and
// std::min return their first argument when the comparison is false).
template <class T>
void clamp(const ElementwiseLoop& loop, const Scalar* low, const Scalar* high) {
  using C = ComputeType<T>;
  const C lo = arith::clamp_bound<T>(low, true), hi = arith::clamp_bound<T>(high, false);
  if constexpr (std::is_integral_v<T>) {
    unary_loop<T, T>(loop, [lo, hi](T x) { return std::min(std::max(x, lo), hi); });
  } else {
    floating_rows<T>(loop, [lo, hi](const C* in, C* out, int64_t n) {
      for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(in[i], lo), hi);
    }, kParallelGrain);
  }
}

template <class Row>
void register_floating(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16>(
      op, DeviceType::cpu, [](auto tag) { return &floating<decltype(tag), Row>; });
}
template <class Row>
void register_signed(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      op, DeviceType::cpu, [](auto tag) { return &signed_op<decltype(tag), Row>; });
}

}  // namespace

void register_elementwise_unary_kernels() {
  register_signed<NegRow>(neg_op);
  register_signed<AbsRow>(abs_op);
  register_signed<ReluRow>(relu_op);
  register_signed<SignRow>(sign_op);
  register_floating<FloorRow>(floor_op);
  register_floating<CeilRow>(ceil_op);
  register_floating<RoundRow>(round_op);
  register_floating<TruncRow>(trunc_op);
  register_floating<ExpRow>(exp_op);
  register_floating<LogRow>(log_op);
  register_floating<Log1pRow>(log1p_op);
  register_floating<SqrtRow>(sqrt_op);
  register_floating<RsqrtRow>(rsqrt_op);
  register_floating<SinRow>(sin_op);
  register_floating<CosRow>(cos_op);
  register_floating<TanhRow>(tanh_op);
  register_floating<ErfRow>(erf_op);
  register_floating<SigmoidRow>(sigmoid_op);
  register_floating<SiluRow>(silu_op);
  register_floating<GeluRow>(gelu_op);
  register_floating<GeluTanhRow>(gelu_tanh_op);
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_scalar_op, DeviceType::cpu, [](auto tag) { return &pow_scalar<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      clamp_op, DeviceType::cpu, [](auto tag) { return &clamp<decltype(tag)>; });
}

}  // namespace ember::cpu
