// Threads that fold one row together: a "team" is the blockDim.x lanes of one
// row y of a block (a warp or more: warp shuffles, then shared memory across
// warps), a "column" the blockDim.y lanes of one x (shared memory). Merges run
// in a fixed tree, so results do not depend on timing. Used by the reduction
// engine (reduce_launcher.cuh), softmax.cu, loss.cu and normalization.cu
// (Note [CUDA reductions] in kernels/cuda/README.md).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ember::cuda {

// Any trivially copyable value, moved down the warp word by word.
template <class T>
__device__ __forceinline__ T shuffle_down(const T& value, int offset) {
  static_assert(std::is_trivially_copyable_v<T>, "shuffle_down: the value must be trivially copyable");
  constexpr int kWords = int((sizeof(T) + 3) / 4);
  unsigned words[kWords] = {};
  memcpy(words, &value, sizeof(T));
#pragma unroll
  for (int i = 0; i < kWords; ++i) words[i] = __shfl_down_sync(0xffffffffu, words[i], offset);
  T result;
  memcpy(&result, words, sizeof(T));
  return result;
}

// The dynamic shared memory of every kernel that merges: a kernel launched
// with team_shared_bytes / column_shared_bytes of its largest merged type.
extern __shared__ __align__(16) unsigned char merge_shared_memory[];

template <class T>
__device__ __forceinline__ T* merge_shared() {
  return reinterpret_cast<T*>(merge_shared_memory);
}

// Entries of T that team_reduce needs: a partial per warp, and a result per team.
__host__ __device__ inline int team_shared_entries(int lanes, int teams) {
  return std::max(lanes * teams / 32, teams);
}
template <class T>
size_t team_shared_bytes(dim3 block) {
  return size_t(team_shared_entries(int(block.x), int(block.y))) * sizeof(T);
}

// Merges `value` over the lanes of each team (threadIdx.x; blockDim.x a power
// of two, blockDim.x * blockDim.y a multiple of 32). Lane 0 gets the team's
// result, and every lane when `broadcast`. Every thread of the block must call
// it: it waits at barriers, and leaves shared memory free for reuse.
template <class T, class Merge>
__device__ T team_reduce(T value, const Merge& merge, bool broadcast) {
  T* shared = merge_shared<T>();
  const int lanes = int(blockDim.x), lane = int(threadIdx.x), team = int(threadIdx.y);
  // Lane 0 of each warp (or of each team narrower than a warp) folds its lanes:
  // lane i reads lane i + offset, and only lane 0's result is kept, so lanes
  // that read across a team boundary do not matter.
  for (int offset = std::min(lanes, 32) / 2; offset > 0; offset /= 2) value = merge(value, shuffle_down(value, offset));
  if (lanes > 32) {
    const int warps = lanes / 32;
    __syncthreads();
    if (lane % 32 == 0) shared[team * warps + lane / 32] = value;
    __syncthreads();
    if (lane == 0)
      for (int w = 1; w < warps; ++w) value = merge(value, shared[team * warps + w]);
  }
  if (broadcast) {
    __syncthreads();
    if (lane == 0) shared[team] = value;
    __syncthreads();
    value = shared[team];
  }
  __syncthreads();
  return value;
}

// Entries of T that column_reduce needs: the upper half of the rows of a block.
__host__ __device__ inline int column_shared_entries(int width, int height) {
  return std::max(width * height / 2, width);
}
template <class T>
size_t column_shared_bytes(dim3 block) {
  return size_t(column_shared_entries(int(block.x), int(block.y))) * sizeof(T);
}

// Merges `value` over the rows of the block (threadIdx.y; blockDim.y a power
// of two) for each x: row y takes row y + half, halving. Row 0 gets the
// result, and every row when `broadcast`. Every thread of the block must call it.
template <class T, class Merge>
__device__ T column_reduce(T value, const Merge& merge, bool broadcast) {
  T* shared = merge_shared<T>();
  const int width = int(blockDim.x), x = int(threadIdx.x), y = int(threadIdx.y);
  for (int half = int(blockDim.y) / 2; half > 0; half /= 2) {
    __syncthreads();
    if (y >= half && y < 2 * half) shared[(y - half) * width + x] = value;
    __syncthreads();
    if (y < half) value = merge(value, shared[y * width + x]);
  }
  if (broadcast) {
    __syncthreads();
    if (y == 0) shared[x] = value;
    __syncthreads();
    value = shared[x];
  }
  __syncthreads();
  return value;
}

// ---- Launch shapes --------------------------------------------------------

inline constexpr int kBlockThreads = 512;
inline constexpr int kMaxTeamLanes = 512;
inline constexpr int64_t kElementsPerLane = 8;  // a team grows while its lanes would each get more
inline constexpr int64_t kMaxGroups = int64_t(1) << 20;  // grid limit; kernels loop over the rest

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t next_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// A team per row of `length` elements: 32 to kMaxTeamLanes lanes, and as many
// rows per block as fill kBlockThreads (no more than there are rows).
// `groups` is the number of row groups, one block's worth each.
struct TeamLayout {
  dim3 block;
  int64_t groups = 0;
  unsigned grid = 1;
};

inline TeamLayout team_layout(int64_t rows, int64_t length) {
  int lanes = 32;
  while (lanes < kMaxTeamLanes && lanes * kElementsPerLane < length) lanes *= 2;
  const int teams = int(std::min<int64_t>(kBlockThreads / lanes, next_power_of_two(std::max<int64_t>(rows, 1))));
  TeamLayout layout;
  layout.block = dim3(unsigned(lanes), unsigned(teams));
  layout.groups = ceil_div(rows, teams);
  layout.grid = unsigned(std::clamp<int64_t>(layout.groups, 1, kMaxGroups));
  return layout;
}

// Two sums reduced together (mean and mean of squares, loss and weight).
template <class V>
struct Pair {
  V first, second;
};
struct PairSum {
  template <class V>
  __device__ Pair<V> operator()(const Pair<V>& a, const Pair<V>& b) const {
    return {a.first + b.first, a.second + b.second};
  }
};

}  // namespace ember::cuda
