// CPU max-pool backward: each window's gradient goes to its first maximum
// (the first nan wins), as kernels/reference/conv.cpp and PyTorch. f32
// without padding selects without branches; 2x2 windows at stride 2 (the
// CNN's pooling) take four windows at a time in vector registers; the rest
// run max_pool_backward_plane (core/ops/conv_kernels.h). Called through
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

// One plane of max-pool backward without padding, where every window lies
// inside the input: max_pool_backward_plane's rule (the first maximum; the
// first nan wins) with selects instead of branches, whose outcome on random
// data is a coin toss, and no bounds checks.
void max_pool_backward_plane_unpadded(const MaxPoolBackwardProblem& b, int64_t plane) {
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1];
  const float* in = static_cast<const float*>(p.input) + plane * h * w;
  const float* grad_out = static_cast<const float*>(b.grad_output) + plane * p.out_size[0] * p.out_size[1];
  float* grad_in = static_cast<float*>(b.grad_input) + plane * h * w;
  for (int64_t oy = 0; oy < p.out_size[0]; ++oy) {
    for (int64_t ox = 0; ox < p.out_size[1]; ++ox) {
      const int64_t corner = oy * p.stride[0] * w + ox * p.stride[1];
      int64_t best_at = corner;
      float best = in[corner];
      for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
        for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
          const int64_t at = corner + ky * w + kx;
          const float v = in[at];
          const bool take = best == best && (v > best || v != v);  // best is not nan; v is larger or nan
          best = take ? v : best;
          best_at = take ? at : best_at;
        }
      grad_in[best_at] += grad_out[oy * p.out_size[1] + ox];
    }
  }
}

// One plane of max-pool backward with 2x2 windows at stride 2 and no padding
// (the CNN's pooling): the windows do not overlap, so each pair of input rows
// is written once, in order, the window's gradient at its first maximum
// (max_pool_backward_plane's rule; the first nan wins) and zeros elsewhere.
// No scatter and no dependence between windows: four windows at a time in
// vector registers, where the general loop above runs one window at a time.
// Elements of a trailing odd row or column belong to no window and keep the
// caller's zeros.
void max_pool_backward_plane_2x2(const MaxPoolBackwardProblem& b, int64_t plane) {
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  const float* in = static_cast<const float*>(p.input) + plane * h * w;
  const float* grad_out = static_cast<const float*>(b.grad_output) + plane * out_h * out_w;
  float* grad_in = static_cast<float*>(b.grad_input) + plane * h * w;
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float* top = in + 2 * oy * w;
    const float* bottom = top + w;
    float* grad_top = grad_in + 2 * oy * w;
    float* grad_bottom = grad_top + w;
    const float* g = grad_out + oy * out_w;
    int64_t ox = 0;
#if defined(__SSE2__)
    // Four windows at a time (the compiler leaves the scalar loop below scalar
    // and branchy); a row's last windows as the four that end it, overlapping
    // windows already written, which get the same values again.
    for (int64_t next = 0; next < out_w && out_w >= 4; next += 4) {
      ox = std::min(next, out_w - 4);
      const __m128 top_low = _mm_loadu_ps(top + 2 * ox), top_high = _mm_loadu_ps(top + 2 * ox + 4);
      const __m128 bottom_low = _mm_loadu_ps(bottom + 2 * ox), bottom_high = _mm_loadu_ps(bottom + 2 * ox + 4);
      const __m128 a = _mm_shuffle_ps(top_low, top_high, _MM_SHUFFLE(2, 0, 2, 0));  // the windows' top left
      const __m128 b1 = _mm_shuffle_ps(top_low, top_high, _MM_SHUFFLE(3, 1, 3, 1));
      const __m128 c = _mm_shuffle_ps(bottom_low, bottom_high, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 d = _mm_shuffle_ps(bottom_low, bottom_high, _MM_SHUFFLE(3, 1, 3, 1));
      // take = (best is not nan) & (v > best | v is nan), as below, on all-ones masks.
      auto take = [](__m128 best, __m128 v) {
        return _mm_and_ps(_mm_cmpord_ps(best, best), _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v)));
      };
      auto select = [](__m128 mask, __m128 yes, __m128 no) {
        return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no));
      };
      const __m128 take_b = take(a, b1);
      const __m128 best_ab = select(take_b, b1, a);
      const __m128 take_c = take(best_ab, c);
      const __m128 take_d = take(select(take_c, c, best_ab), d);
      const __m128 gradient = _mm_loadu_ps(g + ox);
      const __m128 later = _mm_or_ps(take_c, take_d);  // a later element of the window won
      const __m128 grad_a = _mm_andnot_ps(_mm_or_ps(take_b, later), gradient);
      const __m128 grad_b = _mm_andnot_ps(later, _mm_and_ps(take_b, gradient));
      const __m128 grad_c = _mm_andnot_ps(take_d, _mm_and_ps(take_c, gradient));
      const __m128 grad_d = _mm_and_ps(take_d, gradient);
      _mm_storeu_ps(grad_top + 2 * ox, _mm_unpacklo_ps(grad_a, grad_b));
      _mm_storeu_ps(grad_top + 2 * ox + 4, _mm_unpackhi_ps(grad_a, grad_b));
      _mm_storeu_ps(grad_bottom + 2 * ox, _mm_unpacklo_ps(grad_c, grad_d));
      _mm_storeu_ps(grad_bottom + 2 * ox + 4, _mm_unpackhi_ps(grad_c, grad_d));
      ox += 4;
    }
#endif
    for (; ox < out_w; ++ox) {
      const float a = top[2 * ox], b1 = top[2 * ox + 1], c = bottom[2 * ox], d = bottom[2 * ox + 1];
      const bool take_b = a == a && (b1 > a || b1 != b1);  // the best so far is not nan; b is larger or nan
      const float best_ab = take_b ? b1 : a;
      const bool take_c = best_ab == best_ab && (c > best_ab || c != c);
      const float best_abc = take_c ? c : best_ab;
      const bool take_d = best_abc == best_abc && (d > best_abc || d != d);
      grad_bottom[2 * ox + 1] = take_d ? g[ox] : 0.0f;
      grad_bottom[2 * ox] = take_c && !take_d ? g[ox] : 0.0f;
      grad_top[2 * ox + 1] = take_b && !take_c && !take_d ? g[ox] : 0.0f;
      grad_top[2 * ox] = !take_b && !take_c && !take_d ? g[ox] : 0.0f;
    }
  }
}

template <class T>
void max_pool2d_backward(const MaxPoolBackwardProblem& b) {
  int64_t plane_size = b.forward.in_size[0] * b.forward.in_size[1];
  const bool unpadded = std::is_same_v<T, float> && b.forward.padding[0] == 0 && b.forward.padding[1] == 0;
  const bool two_by_two = unpadded && b.forward.kernel == Pair{2, 2} && b.forward.stride == Pair{2, 2};
  parallel_for(0, b.forward.batch * b.forward.channels, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(plane_size, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t plane = begin; plane < end; ++plane) {
                   if (two_by_two) max_pool_backward_plane_2x2(b, plane);
                   else if (unpadded) max_pool_backward_plane_unpadded(b, plane);
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
