// CUDA sort and topk: a block per row counts each element's rank, the number
// of the row's elements that come before it (sorting_detail::element_before,
// a total order), and writes the element there when the rank is below the
// count. This is the reference kernel's definition run in parallel, with the
// row staged through shared memory in tiles, so its results equal the CPU's
// exactly. O(length^2 / threads) a row: right for vocabulary-sized rows and
// top-k sampling; a radix sort is the next step for long rows.
// Tests: tests/cuda/test_cuda_sorting.cpp.
#include "core/ops/sorting_kernels.h"
#include "core/tensor.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

using sorting_detail::element_before;

constexpr int kThreads = 256;
constexpr int kTile = 1024;

template <class T>
__global__ void sort_rows_kernel(const T* input, T* values, int64_t* indices, int64_t rows, int64_t length,
                                 int64_t count, bool descending) {
  using V = ComputeType<T>;
  __shared__ V tile[kTile];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = input + row * length;
    // Every thread takes part in every tile load, so the rounds are uniform across the block.
    for (int64_t round = 0; round * blockDim.x < length; ++round) {
      const int64_t i = round * blockDim.x + threadIdx.x;
      const bool mine = i < length;
      const V value = mine ? load(x + i) : V(0);
      int64_t rank = 0;
      for (int64_t start = 0; start < length; start += kTile) {
        const int64_t size = min(int64_t(kTile), length - start);
        __syncthreads();
        for (int64_t j = threadIdx.x; j < size; j += blockDim.x) tile[j] = load(x + start + j);
        __syncthreads();
        if (mine)
          for (int64_t j = 0; j < size; ++j) rank += element_before(tile[j], start + j, value, i, descending);
      }
      if (mine && rank < count) {
        values[row * count + rank] = x[i];
        indices[row * count + rank] = i;
      }
    }
  }
}

template <class T>
void sort_kernel(const SortProblem& p) {
  sort_rows_kernel<T><<<blocks_for(p.rows, 1, int64_t(1) << 16), kThreads, 0, current_stream()>>>(
      static_cast<const T*>(p.input), static_cast<T*>(p.values), p.indices, p.rows, p.length, p.count,
      p.descending);
  check_launch("sort");
}

}  // namespace

void register_sorting_kernels() {
  auto make = [](auto tag) { return &sort_kernel<decltype(tag)>; };
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(sort_op, DeviceType::cuda, make);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(topk_op, DeviceType::cuda, make);
}

}  // namespace ember::cuda
