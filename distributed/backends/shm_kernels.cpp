// Copies and reductions of the shm backend (shm_kernels.h). Each kernel is
// written once, always inlined into a baseline entry point and an AVX2 one,
// so the compiler vectorises it for both; run-time dispatch picks one.
// Tests: tests/distributed/test_shm.cpp.
#include "distributed/backends/shm_kernels.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/arithmetic.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/convert_run.h"

namespace ember::distributed::shm {
namespace {

#define EMBER_SHM_INLINE __attribute__((always_inline)) inline

#if defined(__x86_64__)
void copy_baseline(std::byte* out, const std::byte* in, int64_t nbytes) {
  int64_t i = 0;
  for (; i + 64 <= nbytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
  }
  std::memcpy(out + i, in + i, size_t(nbytes - i));
}

__attribute__((target("avx2"))) void copy_avx2(std::byte* out, const std::byte* in, int64_t nbytes) {
  int64_t i = 0;
  for (; i + 128 <= nbytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 96), d);
  }
  std::memcpy(out + i, in + i, size_t(nbytes - i));
}
#endif

// avg sums, then divides each result once in ComputeType, in the same pass
// (Note [Shared-memory collectives], "avg"). Multiplying by 1/n gives the
// same correctly rounded quotient when n is a power of two, and is cheaper.
template <class C>
struct Identity {
  C operator()(C x) const { return x; }
};
template <class C>
struct MultiplyBy {
  C factor;
  C operator()(C x) const { return x * factor; }
};
template <class C>
struct DivideBy {
  C divisor;
  C operator()(C x) const { return x / divisor; }
};

// Elements per block of the reductions that accumulate in a buffer: it stays
// in L1 while the sources stream through.
constexpr int64_t kReduceBlock = 2048;

// One block of 16-bit floats: each source widened into f32 and the result
// narrowed back a block at a time (convert_run: F16C for f16, AVX-512 for
// bf16 where the CPU has them), the same values as converting element by
// element, which for f16 goes through Half's branching conversions and kept
// the loop scalar: the fp16 comm hook's all-reduce spent 39% of its step there.
template <class T, class Combine, class Finish>
EMBER_SHM_INLINE void reduce_16_bit_block(T* out_a, T* out_b, const T* const* sources, int num_sources, int64_t start,
                                          int64_t n, float* accumulator, Combine combine, Finish finish) {
  float widened[kReduceBlock];
  cpu::convert_run(sources[0] + start, accumulator, n);
  for (int s = 1; s < num_sources; ++s) {
    cpu::convert_run(sources[s] + start, widened, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) accumulator[i] = combine(accumulator[i], widened[i]);
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) accumulator[i] = finish(accumulator[i]);
  cpu::convert_run(accumulator, out_a + start, n);
  if (out_b && out_b != out_a) std::memcpy(static_cast<void*>(out_b + start), out_a + start, size_t(n) * sizeof(T));
}

template <class T, ReduceOp Op, class Finish>
EMBER_SHM_INLINE void reduce_sources(T* out_a, T* out_b, const T* const* sources, int num_sources, int64_t count,
                                     Finish finish) {
  using C = ComputeType<T>;
  auto combine = [](C x, C y) -> C {
    if constexpr (std::is_same_v<T, bool>) return Op == ReduceOp::max ? (x || y) : (x && y);
    else if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) return x + y;
    else if constexpr (Op == ReduceOp::product) return x * y;
    else if constexpr (Op == ReduceOp::max) return arith::maximum(x, y);  // NaN from either side
    else return arith::minimum(x, y);
  };
  if constexpr (std::is_same_v<T, C> && !std::is_same_v<T, bool>) {
    if (num_sources == 2) {  // the common case, one pass: two reads, one or two writes
      const T* a = sources[0];
      const T* b = sources[1];
      if (out_b) {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i) out_a[i] = out_b[i] = finish(combine(a[i], b[i]));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i) out_a[i] = finish(combine(a[i], b[i]));
      }
      return;
    }
  }
  C accumulator[kReduceBlock];
  for (int64_t start = 0; start < count; start += kReduceBlock) {
    const int64_t n = std::min(kReduceBlock, count - start);
    if constexpr (cpu::is_16_bit_float<T>) {
      reduce_16_bit_block<T>(out_a, out_b, sources, num_sources, start, n, accumulator, combine, finish);
    } else {
      const T* first = sources[0] + start;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) accumulator[i] = C(first[i]);
      for (int s = 1; s < num_sources; ++s) {
        const T* source = sources[s] + start;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) accumulator[i] = combine(accumulator[i], C(source[i]));
      }
      T* a = out_a + start;
      if (out_b) {
        T* b = out_b + start;
        for (int64_t i = 0; i < n; ++i) a[i] = b[i] = T(finish(accumulator[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) a[i] = T(finish(accumulator[i]));
      }
    }
  }
}

// The same kernel instantiated for the baseline and for AVX2.
template <class T, ReduceOp Op, class Finish>
void reduce_baseline(T* out_a, T* out_b, const T* const* sources, int num_sources, int64_t count, Finish finish) {
  reduce_sources<T, Op>(out_a, out_b, sources, num_sources, count, finish);
}

#if defined(__x86_64__)
template <class T, ReduceOp Op, class Finish>
__attribute__((target("avx2"))) void reduce_avx2(T* out_a, T* out_b, const T* const* sources, int num_sources,
                                                 int64_t count, Finish finish) {
  reduce_sources<T, Op>(out_a, out_b, sources, num_sources, count, finish);
}
#endif

template <class T, ReduceOp Op, class Finish = Identity<ComputeType<T>>>
void reduce_dispatch(T* out_a, T* out_b, const T* const* sources, int num_sources, int64_t count, Finish finish = {}) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return reduce_avx2<T, Op>(out_a, out_b, sources, num_sources, count, finish);
#endif
  reduce_baseline<T, Op>(out_a, out_b, sources, num_sources, count, finish);
}

template <class T>
void average(T* out_a, T* out_b, const T* const* sources, int num_sources, int64_t count) {
  using C = ComputeType<T>;
  if (std::has_single_bit(unsigned(num_sources)))
    return reduce_dispatch<T, ReduceOp::avg>(out_a, out_b, sources, num_sources, count,
                                             MultiplyBy<C>{C(1) / C(num_sources)});
  reduce_dispatch<T, ReduceOp::avg>(out_a, out_b, sources, num_sources, count, DivideBy<C>{C(num_sources)});
}

}  // namespace

void copy_bytes(void* dst, const void* src, int64_t nbytes) {
  if (dst == src || nbytes <= 0) return;
  auto* out = static_cast<std::byte*>(dst);
  auto* in = static_cast<const std::byte*>(src);
#if defined(__x86_64__)
  if (cpu_has_avx2()) return copy_avx2(out, in, nbytes);
  copy_baseline(out, in, nbytes);
#else
  std::memcpy(out, in, size_t(nbytes));
#endif
}

void reduce_many(void* out_a, void* out_b, const std::byte* const* sources, int num_sources, int64_t count,
                 DType dtype, ReduceOp op) {
  visit_dtype(dtype, [&]<class T>() {
    auto* a = static_cast<T*>(out_a);
    auto* b = static_cast<T*>(out_b);
    auto* typed = reinterpret_cast<const T* const*>(sources);
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_ASSERT(op == ReduceOp::max || op == ReduceOp::min, "bool {} reached the shm backend", reduce_op_name(op));
    }
    switch (op) {
      case ReduceOp::sum:
        if constexpr (!std::is_same_v<T, bool>) reduce_dispatch<T, ReduceOp::sum>(a, b, typed, num_sources, count);
        break;
      case ReduceOp::product:
        if constexpr (!std::is_same_v<T, bool>) reduce_dispatch<T, ReduceOp::product>(a, b, typed, num_sources, count);
        break;
      case ReduceOp::max: reduce_dispatch<T, ReduceOp::max>(a, b, typed, num_sources, count); break;
      case ReduceOp::min: reduce_dispatch<T, ReduceOp::min>(a, b, typed, num_sources, count); break;
      case ReduceOp::avg:
        if constexpr (std::is_floating_point_v<ComputeType<T>>) average<T>(a, b, typed, num_sources, count);
        else EMBER_ASSERT(false, "avg of {} reached the shm backend", dtype);
        break;
    }
  });
}

}  // namespace ember::distributed::shm
