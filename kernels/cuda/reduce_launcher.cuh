// The CUDA reduction engine: runs a Reducer over the geometry of a
// ReductionLoop (kept dims x reduced dims) on the current stream, choosing
// between a team of lanes per output and adjacent outputs per warp, and
// splitting the reduced range across blocks when there are few outputs
// (Note [CUDA reductions] in kernels/cuda/README.md). Used by reduction.cu and
// normalization.cu; tested through tests/cuda/test_cuda_reduction.cpp and
// test_cuda_normalization.cpp.
//
// A Reducer is a plain struct, passed to the kernel by value, that holds its
// own pointers and provides (device functions):
//   using Acc;                                    the running state (trivially copyable)
//   Acc identity() const;                         a lane that has seen nothing
//   Value read(int64_t offset, int64_t r) const;  element r (flat reduced index) at input offset `offset`
//   Acc step(Acc, Value, int64_t r) const;
//   Acc merge(Acc, Acc) const;                    the left argument holds the lower indices
//   void store(int64_t o, Acc, int64_t count) const;   output o from the whole fold of its count elements
// and optionally
//   Acc start(int64_t o, int64_t offset) const;   the state of output o before its first element
//                                                 (offset: where its elements start); identity() if absent
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/reduction_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/team_reduce.cuh"
#include "kernels/cuda/workspace.h"

namespace ember::cuda {

// A ReductionLoop's shape as a kernel argument, with the launch's choices.
struct ReductionGeometry {
  int64_t outputs = 1, reduced = 1;
  int kept_ndim = 1, reduced_ndim = 1;
  int64_t kept_shape[kMaxDims] = {}, kept_strides[kMaxDims] = {};
  int64_t reduced_shape[kMaxDims] = {}, reduced_strides[kMaxDims] = {};
  // columns: threadIdx.x walks adjacent outputs and threadIdx.y splits each
  // output's elements; otherwise a team (threadIdx.x) folds one output.
  bool columns = false;
  int64_t lanes = 1;                    // threads that fold one output within a block
  int64_t lane_digits[kMaxDims] = {};   // `lanes` in the mixed radix of reduced_shape
  int64_t chunk = 1;                    // reduced elements per blockIdx.y
  int64_t groups = 1;                   // outputs / outputs per block, rounded up

  __device__ int64_t kept_offset(int64_t o) const {
    if (kept_ndim == 1) return o * kept_strides[0];
    int64_t offset = 0;
    for (int d = kept_ndim - 1; d >= 0; --d) {
      offset += (o % kept_shape[d]) * kept_strides[d];
      o /= kept_shape[d];
    }
    return offset;
  }
};

// A lane's walk over the flat reduced indices r, r + lanes, r + 2 lanes, ...:
// the input offset of each, by a mixed-radix addition instead of a division
// per element (the path for reduced dims that did not merge into one).
struct ReducedWalk {
  int64_t index[kMaxDims] = {};
  int64_t offset = 0;

  __device__ ReducedWalk(const ReductionGeometry& g, int64_t r) {
    for (int d = g.reduced_ndim - 1; d >= 0; --d) {
      index[d] = r % g.reduced_shape[d];
      r /= g.reduced_shape[d];
      offset += index[d] * g.reduced_strides[d];
    }
  }
  __device__ void advance(const ReductionGeometry& g) {
    int64_t carry = 0;
    for (int d = g.reduced_ndim - 1; d >= 0; --d) {
      int64_t i = index[d] + g.lane_digits[d] + carry;
      carry = i >= g.reduced_shape[d] ? 1 : 0;
      if (carry) i -= g.reduced_shape[d];
      offset += (i - index[d]) * g.reduced_strides[d];
      index[d] = i;
    }
  }
};

// Folds the elements begin, begin + lanes, ... (< end) of the output whose
// elements start at input offset `base`, in increasing r.
template <class Reducer, class Acc>
__device__ Acc fold_lane(const ReductionGeometry& g, const Reducer& reducer, Acc acc, int64_t base, int64_t begin,
                         int64_t end) {
  if (begin >= end) return acc;
  const int64_t lanes = g.lanes;
  if (g.reduced_ndim == 1) {
    const int64_t stride = g.reduced_strides[0];
    int64_t r = begin;
    for (; r + 3 * lanes < end; r += 4 * lanes) {  // four loads in flight, then their steps in order
      auto v0 = reducer.read(base + r * stride, r);
      auto v1 = reducer.read(base + (r + lanes) * stride, r + lanes);
      auto v2 = reducer.read(base + (r + 2 * lanes) * stride, r + 2 * lanes);
      auto v3 = reducer.read(base + (r + 3 * lanes) * stride, r + 3 * lanes);
      acc = reducer.step(acc, v0, r);
      acc = reducer.step(acc, v1, r + lanes);
      acc = reducer.step(acc, v2, r + 2 * lanes);
      acc = reducer.step(acc, v3, r + 3 * lanes);
    }
    for (; r < end; r += lanes) acc = reducer.step(acc, reducer.read(base + r * stride, r), r);
    return acc;
  }
  ReducedWalk walk(g, begin);
  for (int64_t r = begin; r < end; r += lanes) {
    acc = reducer.step(acc, reducer.read(base + walk.offset, r), r);
    walk.advance(g);
  }
  return acc;
}

template <class Reducer>
__device__ typename Reducer::Acc start_state(const Reducer& reducer, int64_t o, int64_t base) {
  if constexpr (requires { reducer.start(o, base); }) return reducer.start(o, base);
  else return reducer.identity();
}

// Block (x, y) folds chunk blockIdx.y of a block's worth of outputs, for each
// such group blockIdx.x, blockIdx.x + gridDim.x, ... With one chunk the block
// stores the outputs; with more, each writes its partial state to
// partials[chunk * outputs + o] for merge_partials_kernel.
template <class Reducer>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_kernel(ReductionGeometry g, Reducer reducer, typename Reducer::Acc* partials) {
  using Acc = typename Reducer::Acc;
  const auto merge = [&](const Acc& a, const Acc& b) { return reducer.merge(a, b); };
  const int64_t output_lane = g.columns ? threadIdx.x : threadIdx.y;
  const int64_t lane = g.columns ? threadIdx.y : threadIdx.x;
  const int64_t outputs_per_block = g.columns ? blockDim.x : blockDim.y;
  const int64_t chunk_begin = int64_t(blockIdx.y) * g.chunk;
  const int64_t chunk_end = std::min(g.reduced, chunk_begin + g.chunk);
  for (int64_t group = blockIdx.x; group < g.groups; group += gridDim.x) {
    const int64_t o = group * outputs_per_block + output_lane;
    const bool active = o < g.outputs;
    Acc acc = reducer.identity();
    if (active) {
      const int64_t base = g.kept_offset(o);
      acc = fold_lane(g, reducer, start_state(reducer, o, base), base, chunk_begin + lane, chunk_end);
    }
    // Every thread merges, active or not: the merges wait at barriers.
    acc = g.columns ? column_reduce(acc, merge, false) : team_reduce(acc, merge, false);
    if (active && lane == 0) {
      if (gridDim.y == 1) reducer.store(o, acc, g.reduced);
      else partials[int64_t(blockIdx.y) * g.outputs + o] = acc;
    }
  }
}

// Merges each output's chunk partials in chunk order: the same result
// whatever order the blocks ran in.
template <class Reducer>
__global__ void merge_partials_kernel(int64_t outputs, int64_t reduced, int64_t chunks, Reducer reducer,
                                      const typename Reducer::Acc* partials) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    typename Reducer::Acc acc = partials[o];
    for (int64_t chunk = 1; chunk < chunks; ++chunk) acc = reducer.merge(acc, partials[chunk * outputs + o]);
    reducer.store(o, acc, reduced);
  }
}

inline constexpr int64_t kTargetBlocks = 512;          // about 4 resident blocks per SM of an H100/H200
inline constexpr int64_t kChunkElementsPerLane = 64;  // a chunk gives each of its lanes at least this many
inline constexpr int64_t kMaxChunks = 65535;          // gridDim.y

struct ReductionLaunch {
  ReductionGeometry geometry;
  dim3 block, grid;
};

// The launch shape of a loop (host side; see Note [CUDA reductions]).
inline ReductionLaunch plan_reduction_launch(const ReductionLoop& loop) {
  ReductionLaunch launch;
  ReductionGeometry& g = launch.geometry;
  g.outputs = loop.kept_numel, g.reduced = loop.reduced_numel;
  g.kept_ndim = loop.kept_ndim, g.reduced_ndim = loop.reduced_ndim;
  std::copy_n(loop.kept_shape, kMaxDims, g.kept_shape);
  std::copy_n(loop.kept_strides, kMaxDims, g.kept_strides);
  std::copy_n(loop.reduced_shape, kMaxDims, g.reduced_shape);
  std::copy_n(loop.reduced_strides, kMaxDims, g.reduced_strides);
  // Adjacent outputs per warp when the kept dim is the denser one (a sum over
  // the first dim) or each output has too few elements to share among a warp.
  const int64_t kept_stride = loop.inner_kept_stride(), reduced_stride = loop.inner_reduced_stride();
  g.columns = loop.inner_kept_size() > 1 &&
              (g.reduced < 32 || (reduced_stride != 1 && kept_stride < reduced_stride));
  if (g.columns) {
    const int width = int(std::min<int64_t>(32, next_power_of_two(g.outputs)));
    int height = 1;
    while (width * height * 2 <= kBlockThreads && height * 2 * kElementsPerLane <= g.reduced) height *= 2;
    launch.block = dim3(unsigned(width), unsigned(height));
    g.lanes = height;
    g.groups = ceil_div(g.outputs, width);
  } else {
    const TeamLayout layout = team_layout(g.outputs, g.reduced);
    launch.block = layout.block;
    g.lanes = layout.block.x;
    g.groups = layout.groups;
  }
  int64_t chunks = 1;
  if (g.groups < kTargetBlocks)
    chunks = std::clamp<int64_t>(std::min(ceil_div(kTargetBlocks, g.groups),
                                          g.reduced / (g.lanes * kChunkElementsPerLane)),
                                 1, kMaxChunks);
  g.chunk = std::max<int64_t>(1, ceil_div(g.reduced, chunks));
  chunks = std::max<int64_t>(1, ceil_div(g.reduced, g.chunk));
  int64_t place = 1;  // the product of the reduced dims after d
  for (int d = g.reduced_ndim - 1; d >= 0 && g.reduced > 0; --d) {
    g.lane_digits[d] = (g.lanes / place) % g.reduced_shape[d];
    place *= g.reduced_shape[d];
  }
  launch.grid = dim3(unsigned(std::min(g.groups, kMaxGroups)), unsigned(chunks));
  return launch;
}

// Runs `reducer` over the loop's geometry on the current stream; `name`
// names the kernel in launch errors.
template <class Reducer>
void launch_reduction(const ReductionLoop& loop, const Reducer& reducer, const char* name) {
  using Acc = typename Reducer::Acc;
  if (loop.kept_numel == 0) return;
  const ReductionLaunch launch = plan_reduction_launch(loop);
  const ReductionGeometry& g = launch.geometry;
  const size_t shared = g.columns ? column_shared_bytes<Acc>(launch.block) : team_shared_bytes<Acc>(launch.block);
  const int64_t chunks = launch.grid.y;
  if (chunks == 1) {
    reduce_kernel<<<launch.grid, launch.block, shared, current_stream()>>>(g, reducer, static_cast<Acc*>(nullptr));
    check_launch(name);
    return;
  }
  Workspace partials(size_t(chunks * g.outputs) * sizeof(Acc));
  reduce_kernel<<<launch.grid, launch.block, shared, current_stream()>>>(g, reducer, partials.as<Acc>());
  check_launch(name);
  merge_partials_kernel<<<blocks_for(g.outputs, 256), 256, 0, current_stream()>>>(g.outputs, g.reduced, chunks,
                                                                                 reducer, partials.as<Acc>());
  check_launch(name);
}

}  // namespace ember::cuda
