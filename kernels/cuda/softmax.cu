// CUDA softmax and log_softmax over a SoftmaxLoop [outer, size, inner]. Each
// line along the dim is read once for its maximum and sum of exponentials
// together (exp_sum.cuh), then once more to write. Along the last dim (inner
// == 1) a team of lanes takes a line: a warp for short lines, up to a block
// for long ones. Along any other dim a block takes adjacent lines (threadIdx.x
// along inner, so reads are coalesced) and splits each line across
// threadIdx.y. f16/bf16 compute in float. Tests: tests/cuda/test_cuda_softmax_loss.cpp.
#include <limits>

#include "core/ops/reduction_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/exp_sum.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/team_reduce.cuh"

namespace ember::cuda {
namespace {

// What a line's outputs need from its maximum m and sum s of exp(x - m):
// softmax exp(x - m) / s, log_softmax (x - m) - log(s) (as the CPU kernel: for
// logits of large magnitude, x - (m + log(s)) would lose the result). A +inf
// in the line makes every output nan, as the reference's inf - inf does; a
// line of -inf gives nan through x - m.
template <bool kLog, class V>
struct LineScale {
  V max, factor;  // factor: 1 / s, or log(s)

  __device__ explicit LineScale(ExpSum<V> line) : max(line.max) {
    const V sum = line.max == std::numeric_limits<V>::infinity() ? std::numeric_limits<V>::quiet_NaN() : line.sum;
    factor = kLog ? log(sum) : V(1) / sum;
  }
  __device__ V operator()(V x) const { return kLog ? (x - max) - factor : exp(x - max) * factor; }
};

template <bool kLog, class T>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_rows_kernel(const T* input, T* output, int64_t rows, int64_t size, int64_t groups) {
  using V = ComputeType<T>;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool active = row < rows;
    const T* x = input + (active ? row : 0) * size;
    ExpSum<V> line = exp_sum_identity<V>();
    if (active)
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) line = exp_sum_add(line, load(x + i));
    const LineScale<kLog, V> scale(team_reduce(line, ExpSumMerge{}, /*broadcast=*/true));
    if (active) {
      T* y = output + row * size;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) store(y + i, scale(load(x + i)));
    }
  }
}

// Group g is block row g / column_blocks of the outer dim and the
// blockDim.x lines (inner indices) from (g % column_blocks) * blockDim.x.
template <bool kLog, class T>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_columns_kernel(const T* input, T* output, int64_t size, int64_t inner, int64_t column_blocks,
                           int64_t groups) {
  using V = ComputeType<T>;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t k = (group % column_blocks) * blockDim.x + threadIdx.x;
    const bool active = k < inner;
    const int64_t first = (group / column_blocks) * size * inner + (active ? k : 0);
    ExpSum<V> line = exp_sum_identity<V>();
    if (active)
      for (int64_t i = threadIdx.y; i < size; i += blockDim.y) line = exp_sum_add(line, load(input + first + i * inner));
    const LineScale<kLog, V> scale(column_reduce(line, ExpSumMerge{}, /*broadcast=*/true));
    if (active)
      for (int64_t i = threadIdx.y; i < size; i += blockDim.y)
        store(output + first + i * inner, scale(load(input + first + i * inner)));
  }
}

template <bool kLog, class T>
void softmax(const SoftmaxLoop& loop) {
  using V = ComputeType<T>;
  const T* input = reinterpret_cast<const T*>(loop.input);
  T* output = reinterpret_cast<T*>(loop.output);
  const int64_t lines = loop.outer * loop.inner;
  if (lines == 0 || loop.size == 0) return;
  const char* name = kLog ? "log_softmax" : "softmax";
  if (loop.inner == 1) {
    const TeamLayout layout = team_layout(loop.outer, loop.size);
    softmax_rows_kernel<kLog, T><<<layout.grid, layout.block, team_shared_bytes<ExpSum<V>>(layout.block),
                                   current_stream()>>>(input, output, loop.outer, loop.size, layout.groups);
  } else {
    const int width = int(std::min<int64_t>(32, next_power_of_two(loop.inner)));
    int height = 1;
    while (width * height * 2 <= kBlockThreads && height * 2 * kElementsPerLane <= loop.size) height *= 2;
    const dim3 block{unsigned(width), unsigned(height)};
    const int64_t column_blocks = ceil_div(loop.inner, width), groups = loop.outer * column_blocks;
    softmax_columns_kernel<kLog, T><<<unsigned(std::min(groups, kMaxGroups)), block,
                                      column_shared_bytes<ExpSum<V>>(block), current_stream()>>>(
        input, output, loop.size, loop.inner, column_blocks, groups);
  }
  check_launch(name);
}

}  // namespace

void register_softmax_kernels() {
  register_for<float, double, Half, BFloat16>(softmax_op, DeviceType::cuda,
                                              [](auto tag) { return &softmax<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(log_softmax_op, DeviceType::cuda,
                                              [](auto tag) { return &softmax<true, decltype(tag)>; });
}

}  // namespace ember::cuda
