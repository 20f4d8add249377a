// CPU max and average pooling, forward, on oneDNN primitives cached like
// matmul's (Note [oneDNN primitive cache] in kernels/cpu/onednn.h), run on
// the caller's NCHW memory; f16, and bf16 without oneDNN's bf16 kernels,
// compute in f32; f64, and windows oneDNN refuses, use direct loops.
// Max-pool backward is in max_pool_backward.cpp. Called through
// max_pool2d_op and avg_pool2d_op (core/ops/conv.cpp). Oracle:
// kernels/reference/conv.cpp; tests: tests/core/test_conv.cpp.
#include <algorithm>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/ops/conv_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

using dnnl::memory;

enum class PoolKind { max, average };

PrimitiveCache<CachedPrimitive>& pool_cache() {
  static PrimitiveCache<CachedPrimitive> cache(128);
  return cache;
}

dnnl::algorithm pool_algorithm(const Pool2dProblem& p, PoolKind kind) {
  if (kind == PoolKind::max) return dnnl::algorithm::pooling_max;
  return p.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                             : dnnl::algorithm::pooling_avg_exclude_padding;
}

std::shared_ptr<CachedPrimitive> make_pool(const Pool2dProblem& p, PoolKind kind, DType dtype) {
  memory::data_type type = onednn_type(dtype);
  memory::dims right(2);
  for (int d = 0; d < 2; ++d)
    right[size_t(d)] = (p.out_size[d] - 1) * p.stride[d] + p.kernel[d] - p.in_size[d] - p.padding[d];
  dnnl::pooling_forward::primitive_desc pd;
  try {
    dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, pool_algorithm(p, kind),
                                     nchw(p.batch, p.channels, p.in_size, type),
                                     nchw(p.batch, p.channels, p.out_size, type), {p.stride[0], p.stride[1]},
                                     {p.kernel[0], p.kernel[1]}, {p.padding[0], p.padding[1]}, right);
    pd = dnnl::pooling_forward::primitive_desc(desc, onednn_attributes(), onednn_engine());
  } catch (const dnnl::error&) {
    // Unimplemented, or a geometry oneDNN refuses (a stride of 2^31 - 1 over
    // 5 rows, found by the op fuzzer): the caller takes the direct loop.
    return nullptr;
  }
  if (is_reference_implementation(pd) && dtype != DType::f32) return nullptr;
  auto entry = std::make_shared<CachedPrimitive>();
  entry->set_primitive(dnnl::pooling_forward(pd));
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_DST})
    entry->args.emplace(arg, memory(pd.query_md(dnnl::query::exec_arg_md, arg), onednn_engine(), nullptr));
  return entry;
}

bool run_pool(const Pool2dProblem& p, PoolKind kind, DType dtype) {
  // oneDNN 2.6 computes wrong windows for a stride past the padded input
  // (2^31 - 1 over 4 columns with padding 2 averaged 0 for -0.3125, found by
  // the op fuzzer): such a pooling, one window along that dim, takes the
  // direct loop. (Handing oneDNN a stride of 1 there instead broke max-pooling
  // with a negative right padding, which the fuzzer found next.)
  for (int d = 0; d < 2; ++d)
    if (p.stride[d] > p.in_size[d] + 2 * p.padding[d]) return false;
  // Note [Small primitives run on one thread] (kernels/cpu/onednn.h): a window
  // element counts as a multiply-add.
  int threads = onednn_threads(p.batch * p.channels * p.out_size[0] * p.out_size[1] * p.kernel[0] * p.kernel[1]);
  OnednnThreadsGuard threads_guard(threads);
  PrimitiveKey key;
  for (int64_t v : {int64_t(dtype), int64_t(threads), int64_t(kind), int64_t(p.count_include_pad), p.batch, p.channels}) key.add(v);
  for (const Pair* pair : {&p.in_size, &p.kernel, &p.stride, &p.padding}) key.add((*pair)[0]), key.add((*pair)[1]);
  std::shared_ptr<CachedPrimitive> entry = pool_cache().get(key, [&] { return make_pool(p, kind, dtype); });
  if (!entry) return false;
  entry->execute({{DNNL_ARG_SRC, const_cast<void*>(p.input)}, {DNNL_ARG_DST, p.out}});
  return true;
}

// Each output element reduces its window directly, in double; planes split
// over threads. The f64 kernel, and the fallback for windows oneDNN refuses.
template <PoolKind kind, class T>
void pool2d_direct(const Pool2dProblem& p) {
  const T* input = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  // Plain copies, not structured bindings: clang 14 cannot capture those in lambdas.
  const int64_t in_h = p.in_size[0], in_w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  const int64_t plane_work = out_h * out_w * p.kernel[0] * p.kernel[1];
  parallel_for(0, p.batch * p.channels, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, plane_work)),
               [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* source = input + plane * in_h * in_w;
      for (int64_t y = 0; y < out_h; ++y)
        for (int64_t x = 0; x < out_w; ++x) {
          int64_t y0 = y * p.stride[0] - p.padding[0], x0 = x * p.stride[1] - p.padding[1];
          int64_t y_begin = std::max<int64_t>(y0, 0), y_end = std::min(y0 + p.kernel[0], in_h);
          int64_t x_begin = std::max<int64_t>(x0, 0), x_end = std::min(x0 + p.kernel[1], in_w);
          double value = kind == PoolKind::max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t iy = y_begin; iy < y_end; ++iy)
            for (int64_t ix = x_begin; ix < x_end; ++ix) {
              double v = double(ComputeType<T>(source[iy * in_w + ix]));
              if constexpr (kind == PoolKind::max) {
                if (v > value || v != v) value = v;  // nan wins and then stays, as in PyTorch
              } else {
                value += v;
              }
            }
          if constexpr (kind == PoolKind::average) {
            // With floor-mode sizes, a window never leaves the padded input.
            int64_t count = p.count_include_pad ? p.kernel[0] * p.kernel[1] : (y_end - y_begin) * (x_end - x_begin);
            value /= double(count);
          }
          if constexpr (std::is_same_v<T, double>) out[(plane * out_h + y) * out_w + x] = value;
          else out[(plane * out_h + y) * out_w + x] = T(float(value));
        }
    }
  });
}

template <PoolKind kind, class T>
bool pool_in_f32(const Pool2dProblem& p) {
  Pool2dProblem wide = p;
  Tensor input = converted<float, T>(p.input, p.batch * p.channels * p.in_size[0] * p.in_size[1]);
  Tensor out = make_tensor({p.batch * p.channels * p.out_size[0] * p.out_size[1]}, DType::f32);
  wide.input = input.data_ptr(), wide.out = out.data_ptr();
  if (!run_pool(wide, kind, DType::f32)) return false;
  convert_into<T>(out, p.out);
  return true;
}

// oneDNN's max pooling drops nans (its max instruction returns the other
// operand) and starts from the lowest finite value, so a window of -infs gives
// -FLT_MAX; PyTorch's and the reference's give nan and -inf. Inputs rarely
// hold either, so a scan of the input decides whether any window needs
// fixing, and only then are the windows found.
template <class T>
void fix_non_finite_maxima(const Pool2dProblem& p) {
  const T* input = static_cast<const T*>(p.input);
  const int64_t in_h = p.in_size[0], in_w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  const int64_t count = p.batch * p.channels * in_h * in_w;
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  bool any = false;
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {  // in vector registers: the compiler kept this scan scalar, a third
    __m128 found = _mm_setzero_ps();         // of the CNN pooling's forward
    const __m128 minus_infinities = _mm_set1_ps(minus_infinity);
    // Eight elements a step: at four, this loop's time moved by 15% with its
    // address when unrelated code in the library changed (bench_step_kernels).
    for (; i + 8 <= count; i += 8) {
      const __m128 v = _mm_loadu_ps(input + i), w = _mm_loadu_ps(input + i + 4);
      found = _mm_or_ps(found, _mm_or_ps(_mm_cmpunord_ps(v, w), _mm_or_ps(_mm_cmpeq_ps(v, minus_infinities),
                                                                          _mm_cmpeq_ps(w, minus_infinities))));
    }
    for (; i + 4 <= count; i += 4) {
      const __m128 v = _mm_loadu_ps(input + i);
      found = _mm_or_ps(found, _mm_or_ps(_mm_cmpunord_ps(v, v), _mm_cmpeq_ps(v, minus_infinities)));
    }
    any = _mm_movemask_ps(found) != 0;
  } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    // On the bits, eight at a time, where the loop below widens each element
    // first: a nan's magnitude lies above infinity's, -inf is one pattern.
    const int infinity_bits = std::is_same_v<T, BFloat16> ? 0x7f80 : 0x7c00;
    const __m128i magnitude = _mm_set1_epi16(0x7fff), infinity = _mm_set1_epi16(short(infinity_bits)),
                  minus_infinity = _mm_set1_epi16(short(infinity_bits | 0x8000));
    __m128i found = _mm_setzero_si128();
    for (; i + 8 <= count; i += 8) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(input + i));
      found = _mm_or_si128(found, _mm_or_si128(_mm_cmpgt_epi16(_mm_and_si128(v, magnitude), infinity),
                                               _mm_cmpeq_epi16(v, minus_infinity)));
    }
    any = _mm_movemask_epi8(found) != 0;
  }
#endif
  for (; i < count; ++i) {
    const float value = float(ComputeType<T>(input[i]));
    any |= value != value || value == minus_infinity;
  }
  if (!any) return;
  T* out = static_cast<T*>(p.out);
  for (int64_t plane = 0; plane < p.batch * p.channels; ++plane) {
    const T* source = input + plane * in_h * in_w;
    for (int64_t y = 0; y < out_h; ++y)
      for (int64_t x = 0; x < out_w; ++x) {
        const int64_t y0 = y * p.stride[0] - p.padding[0], x0 = x * p.stride[1] - p.padding[1];
        bool nan = false, all_minus_infinity = true;
        for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + p.kernel[0], in_h); ++iy)
          for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + p.kernel[1], in_w); ++ix) {
            const float value = float(ComputeType<T>(source[iy * in_w + ix]));
            nan |= value != value;
            all_minus_infinity &= value == minus_infinity;
          }
        T& result = out[(plane * out_h + y) * out_w + x];
        if (nan) result = T(std::numeric_limits<float>::quiet_NaN());
        else if (all_minus_infinity) result = T(minus_infinity);
      }
  }
}

template <PoolKind kind, class T>
void pool2d(const Pool2dProblem& p) {
  bool done = false;
  if constexpr (std::is_same_v<T, float>) done = run_pool(p, kind, DType::f32);
  else done = (std::is_same_v<T, BFloat16> && onednn_bf16_enabled() && run_pool(p, kind, DType::bf16)) ||
              pool_in_f32<kind, T>(p);
  if (!done) return pool2d_direct<kind, T>(p);  // exact for nan and -inf already
  if constexpr (kind == PoolKind::max) fix_non_finite_maxima<T>(p);
}

}  // namespace

void register_pool_kernels() {
  register_for<float, Half, BFloat16>(max_pool2d_op, DeviceType::cpu,
                                      [](auto tag) { return &pool2d<PoolKind::max, decltype(tag)>; });
  register_for<float, Half, BFloat16>(avg_pool2d_op, DeviceType::cpu,
                                      [](auto tag) { return &pool2d<PoolKind::average, decltype(tag)>; });
  max_pool2d_op.set(DeviceType::cpu, DType::f64, &pool2d_direct<PoolKind::max, double>);
  avg_pool2d_op.set(DeviceType::cpu, DType::f64, &pool2d_direct<PoolKind::average, double>);
}

}  // namespace ember::cpu
