// CPU max-pool backward: each window's gradient goes to its first maximum
// (the first nan wins), as kernels/reference/conv.cpp and PyTorch. Without
// padding, windows select without branches; 2x2 windows at stride 2 (the
// CNN's pooling) take four windows at a time in vector registers, f32 and
// bf16 (whose values widen to f32 exactly); the rest run
// max_pool_backward_plane (core/ops/conv_kernels.h). Every element type
// takes the same paths, comparing in its ComputeType. Called through
// max_pool2d_backward_op (core/ops/conv.cpp); tests: tests/core/test_conv.cpp.
#include <algorithm>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/ops/conv_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

// Whether a window's running maximum `best` gives way to `v`: best is not nan,
// and v is larger or nan (max_pool_backward_plane's rule, without a branch).
template <class C>
bool takes_over(C best, C v) {
  return best == best && (v > best || v != v);
}

// One plane of max-pool backward without padding, where every window lies
// inside the input: max_pool_backward_plane's rule with selects instead of
// branches, whose outcome on random data is a coin toss, and no bounds
// checks. Windows add to grad_in in the reference's order, rounding alike.
template <class T>
void max_pool_backward_plane_unpadded(const MaxPoolBackwardProblem& b, int64_t plane) {
  using C = ComputeType<T>;
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1];
  const T* in = static_cast<const T*>(p.input) + plane * h * w;
  const T* grad_out = static_cast<const T*>(b.grad_output) + plane * p.out_size[0] * p.out_size[1];
  T* grad_in = static_cast<T*>(b.grad_input) + plane * h * w;
  for (int64_t oy = 0; oy < p.out_size[0]; ++oy) {
    for (int64_t ox = 0; ox < p.out_size[1]; ++ox) {
      const int64_t corner = oy * p.stride[0] * w + ox * p.stride[1];
      int64_t best_at = corner;
      C best = C(in[corner]);
      for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
        for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
          const int64_t at = corner + ky * w + kx;
          const C v = C(in[at]);
          const bool take = takes_over(best, v);
          best = take ? v : best;
          best_at = take ? at : best_at;
        }
      grad_in[best_at] = T(C(grad_in[best_at]) + C(grad_out[oy * p.out_size[1] + ox]));
    }
  }
}

#if defined(__SSE2__)
// Four 2x2 windows in f32 lanes: a and b their top row, c and d their bottom
// row; the gradient of each window element, the window's gradient where that
// element is the window's first maximum (the first nan wins) and zero
// elsewhere, as the scalar loop of max_pool_backward_plane_2x2.
struct WindowGradients {
  __m128 a, b, c, d;
};

inline WindowGradients route_to_first_maximum(__m128 a, __m128 b, __m128 c, __m128 d, __m128 gradient) {
  // takes_over on all-ones masks.
  auto take = [](__m128 best, __m128 v) {
    return _mm_and_ps(_mm_cmpord_ps(best, best), _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v)));
  };
  auto select = [](__m128 mask, __m128 yes, __m128 no) {
    return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no));
  };
  const __m128 take_b = take(a, b);
  const __m128 best_ab = select(take_b, b, a);
  const __m128 take_c = take(best_ab, c);
  const __m128 take_d = take(select(take_c, c, best_ab), d);
  const __m128 later = _mm_or_ps(take_c, take_d);  // a later element of the window won
  return {_mm_andnot_ps(_mm_or_ps(take_b, later), gradient), _mm_andnot_ps(later, _mm_and_ps(take_b, gradient)),
          _mm_andnot_ps(take_d, _mm_and_ps(take_c, gradient)), _mm_and_ps(take_d, gradient)};
}

// Four windows of rows `top` and `bottom` from the window at `ox` on: the
// eight elements of each row split into the windows' left (even) and right
// (odd) elements, and their gradients stored back interleaved.
inline void route_four_windows(const float* top, const float* bottom, const float* g, float* grad_top,
                               float* grad_bottom, int64_t ox) {
  const __m128 top_low = _mm_loadu_ps(top + 2 * ox), top_high = _mm_loadu_ps(top + 2 * ox + 4);
  const __m128 bottom_low = _mm_loadu_ps(bottom + 2 * ox), bottom_high = _mm_loadu_ps(bottom + 2 * ox + 4);
  const WindowGradients r = route_to_first_maximum(_mm_shuffle_ps(top_low, top_high, _MM_SHUFFLE(2, 0, 2, 0)),
                                                   _mm_shuffle_ps(top_low, top_high, _MM_SHUFFLE(3, 1, 3, 1)),
                                                   _mm_shuffle_ps(bottom_low, bottom_high, _MM_SHUFFLE(2, 0, 2, 0)),
                                                   _mm_shuffle_ps(bottom_low, bottom_high, _MM_SHUFFLE(3, 1, 3, 1)),
                                                   _mm_loadu_ps(g + ox));
  _mm_storeu_ps(grad_top + 2 * ox, _mm_unpacklo_ps(r.a, r.b));
  _mm_storeu_ps(grad_top + 2 * ox + 4, _mm_unpackhi_ps(r.a, r.b));
  _mm_storeu_ps(grad_bottom + 2 * ox, _mm_unpacklo_ps(r.c, r.d));
  _mm_storeu_ps(grad_bottom + 2 * ox + 4, _mm_unpackhi_ps(r.c, r.d));
}

// The same on bf16, whose value is the high half of its f32: eight elements
// of a row are one 128-bit load whose 32-bit lanes hold a window each, the
// left element in the low half (shifted up, it is that element as f32) and
// the right one in the high half (masked, likewise). The gradients are
// widened bf16 values or zeros, so their high halves are exact bf16 results.
inline void route_four_windows(const BFloat16* top, const BFloat16* bottom, const BFloat16* g, BFloat16* grad_top,
                               BFloat16* grad_bottom, int64_t ox) {
  const __m128i high_half = _mm_set1_epi32(int(0xffff0000u));
  auto left = [](__m128i pairs) { return _mm_castsi128_ps(_mm_slli_epi32(pairs, 16)); };
  auto right = [&](__m128i pairs) { return _mm_castsi128_ps(_mm_and_si128(pairs, high_half)); };
  const __m128i top_pairs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(top + 2 * ox));
  const __m128i bottom_pairs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bottom + 2 * ox));
  const __m128i gradient =
      _mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + ox)));
  const WindowGradients r = route_to_first_maximum(left(top_pairs), right(top_pairs), left(bottom_pairs),
                                                   right(bottom_pairs), _mm_castsi128_ps(gradient));
  auto pack = [](__m128 left_gradient, __m128 right_gradient) {
    return _mm_or_si128(_mm_srli_epi32(_mm_castps_si128(left_gradient), 16), _mm_castps_si128(right_gradient));
  };
  _mm_storeu_si128(reinterpret_cast<__m128i*>(grad_top + 2 * ox), pack(r.a, r.b));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(grad_bottom + 2 * ox), pack(r.c, r.d));
}
#endif

// One plane of max-pool backward with 2x2 windows at stride 2 and no padding
// (the CNN's pooling): the windows do not overlap, so each pair of input rows
// is written once, in order, the window's gradient at its first maximum
// (max_pool_backward_plane's rule; the first nan wins) and zeros elsewhere.
// No scatter and no dependence between windows: four windows at a time in
// vector registers (f32 and bf16), where the general loop above runs one
// window at a time. Elements of a trailing odd row or column belong to no
// window and keep the caller's zeros.
template <class T>
void max_pool_backward_plane_2x2(const MaxPoolBackwardProblem& b, int64_t plane) {
  using C = ComputeType<T>;
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  const T* in = static_cast<const T*>(p.input) + plane * h * w;
  const T* grad_out = static_cast<const T*>(b.grad_output) + plane * out_h * out_w;
  T* grad_in = static_cast<T*>(b.grad_input) + plane * h * w;
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const T* top = in + 2 * oy * w;
    const T* bottom = top + w;
    T* grad_top = grad_in + 2 * oy * w;
    T* grad_bottom = grad_top + w;
    const T* g = grad_out + oy * out_w;
    int64_t ox = 0;
#if defined(__SSE2__)
    // Four windows at a time (the compiler leaves the scalar loop below scalar
    // and branchy); a row's last windows as the four that end it, overlapping
    // windows already written, which get the same values again.
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
      for (int64_t next = 0; next < out_w && out_w >= 4; next += 4) {
        ox = std::min(next, out_w - 4);
        route_four_windows(top, bottom, g, grad_top, grad_bottom, ox);
        ox += 4;
      }
    }
#endif
    for (; ox < out_w; ++ox) {
      const C a = C(top[2 * ox]), b1 = C(top[2 * ox + 1]), c = C(bottom[2 * ox]), d = C(bottom[2 * ox + 1]);
      const bool take_b = takes_over(a, b1);
      const C best_ab = take_b ? b1 : a;
      const bool take_c = takes_over(best_ab, c);
      const bool take_d = takes_over(take_c ? c : best_ab, d);
      grad_bottom[2 * ox + 1] = take_d ? g[ox] : T(0);
      grad_bottom[2 * ox] = take_c && !take_d ? g[ox] : T(0);
      grad_top[2 * ox + 1] = take_b && !take_c && !take_d ? g[ox] : T(0);
      grad_top[2 * ox] = !take_b && !take_c && !take_d ? g[ox] : T(0);
    }
  }
}

template <class T>
void max_pool2d_backward(const MaxPoolBackwardProblem& b) {
  const int64_t plane_size = b.forward.in_size[0] * b.forward.in_size[1];
  const bool unpadded = b.forward.padding[0] == 0 && b.forward.padding[1] == 0;
  const bool two_by_two = unpadded && b.forward.kernel == Pair{2, 2} && b.forward.stride == Pair{2, 2};
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_size, 1));
  parallel_for(0, b.forward.batch * b.forward.channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      if (two_by_two) max_pool_backward_plane_2x2<T>(b, plane);
      else if (unpadded) max_pool_backward_plane_unpadded<T>(b, plane);
      else max_pool_backward_plane<T>(b, plane);
    }
  });
}

}  // namespace

void register_max_pool_backward_kernels() {
  register_for<float, double, Half, BFloat16>(max_pool2d_backward_op, DeviceType::cpu,
                                              [](auto tag) { return &max_pool2d_backward<decltype(tag)>; });
}

}  // namespace ember::cpu
