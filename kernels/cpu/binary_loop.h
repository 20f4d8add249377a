// The loop shapes shared by CPU element-wise kernels: dense rows, a broadcast
// scalar on either side, and the general strided row. Dense and scalar rows of
// 16-bit floats run a copy of the loop compiled for AVX2 where the CPU has it:
// each element is widened to f32 and rounded back, work the baseline's SSE2
// does at half the width (convert_run.h). f16 rows of an op that computes in
// f32 go through f32 buffers instead (dense_binary_f16_widened).
#pragma once

#include <algorithm>
#include <concepts>

#include "core/cpu_features.h"
#include "core/elementwise_loop.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/target_isa.h"

namespace ember::cpu {

// out[i] = f(a[i], b[i]), or with a broadcast scalar (step 0) on one side,
// read once: out may alias the inputs.
template <int kAStep, int kBStep, class Out, class A, class B, class F>
[[gnu::always_inline]] inline void dense_binary(Out* out, const A* a, const B* b, int64_t n, F& f) {
  if constexpr (kBStep == 0) {
    const B scalar = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], scalar);
  } else if constexpr (kAStep == 0) {
    const A scalar = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = f(scalar, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  }
}
template <int kAStep, int kBStep, class Out, class A, class B, class F>
EMBER_TARGET_AVX2 void dense_binary_avx2(Out* out, const A* a, const B* b, int64_t n, F& f) {
  dense_binary<kAStep, kBStep>(out, a, b, n, f);
}

// An op whose value on two f16 elements is its f32 value on the widened
// elements, rounded to f16: add, sub, mul, div (arith::* on f16 compute in f32
// and round once). The kernel passes f as a generic lambda, so that on floats
// it returns a float; a lambda that takes Half would also accept floats,
// converting them back, hence the exact result type. maximum and minimum
// return one of their inputs, a nan's payload included, and so stay out.
template <class F>
concept ComputesInF32 = requires(F& f, float x) {
  { f(x, x) } -> std::same_as<float>;
};

// f16 rows a block at a time: widened into f32 buffers with F16C's
// conversions (convert_run), computed there, narrowed back; the same values
// as converting each element through Half's conversions (a nan's sign aside:
// x86 takes it from one operand, and the compiler may swap a commutative op's),
// which branch and so kept the loop scalar (0.58 GB/s for mul, bench/RESULTS.md). A broadcast
// scalar is read once, before any output is written: out may alias the inputs.
template <int kAStep, int kBStep, class F>
void dense_binary_f16_widened(Half* out, const Half* a, const Half* b, int64_t n, F& f) {
  constexpr int64_t kBlock = 256;  // elements per block: the three buffers stay in L1
  float wide_a[kBlock], wide_b[kBlock], wide_out[kBlock];
  if constexpr (kAStep == 0) wide_a[0] = float(*a);
  if constexpr (kBStep == 0) wide_b[0] = float(*b);
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    if constexpr (kAStep != 0) convert_run(a + start, wide_a, m);
    if constexpr (kBStep != 0) convert_run(b + start, wide_b, m);
    dense_binary<kAStep, kBStep>(wide_out, wide_a, wide_b, m, f);
    convert_run(wide_out, out + start, m);
  }
}

template <int kAStep, int kBStep, class Out, class A, class B, class F>
void dense_binary_run(Out* out, const A* a, const B* b, int64_t n, F& f) {
  if constexpr (std::is_same_v<Out, Half> && std::is_same_v<A, Half> && std::is_same_v<B, Half> &&
                ComputesInF32<F>) {
    if (cpu_has_f16c()) return dense_binary_f16_widened<kAStep, kBStep>(out, a, b, n, f);
  }
  if constexpr (is_16_bit_float<Out> || is_16_bit_float<A> || is_16_bit_float<B>) {
    if (cpu_has_avx2()) return dense_binary_avx2<kAStep, kBStep>(out, a, b, n, f);
  }
  dense_binary<kAStep, kBStep>(out, a, b, n, f);
}

template <class Out, class A, class B, class F>
void binary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      dense_binary_run<1, 1>(out, a, b, n, f);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      dense_binary_run<1, 0>(out, a, b, n, f);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      dense_binary_run<0, 1>(out, a, b, n, f);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(a[i * s[1]], b[i * s[2]]);
    }
  });
}

template <class Out, class In, class F>
void unary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const In* in = reinterpret_cast<const In*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(in[i * s[1]]);
    }
  });
}

}  // namespace ember::cpu
