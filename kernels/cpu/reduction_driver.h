// The CPU reduction driver: runs a Reducer over a ReductionLoop. Used by
// kernels/cpu/reduction.cpp, tested through tests/core/test_reduction.cpp.
//
// Three loop shapes, chosen from the loop's innermost dims:
//  - dense rows (reduced dims end in a stride-1 run, e.g. a sum over the last
//    dim): kLanes independent accumulators the compiler keeps in vector
//    registers, summed pairwise over blocks for accuracy;
//  - columns (the kept dims end in a stride-1 run, e.g. a sum over the first
//    dim): each input row is folded into a tile of output accumulators, a
//    vectorised loop over the kept dim instead of strided gathers;
//  - strided runs for anything else.
// Threads split the outputs, or, when there are fewer outputs than threads,
// the reduced elements of each output (partial results merged in order).
// f16 inputs of the dense and column loops are widened to f32 a block at a
// time (F16C, convert_run) before the same leaves fold them: the same values
// in the same order, without Half's branching per-element conversion.
//
// A Reducer provides:
//   using Acc;                                    the running state
//   Acc identity() const;
//   Acc step(Acc, ComputeType<In> x, int64_t r) const;   r: the flat reduced index of x
//   Acc merge(Acc, Acc) const;                    must not depend on the order of its
//                                                 arguments beyond what step does
//   void store(const ReductionLoop&, int64_t o, Acc, int64_t count) const;
#pragma once

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/ops/reduction_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/target_isa.h"

namespace ember::cpu {

inline constexpr int64_t kLanes = 32;         // independent accumulators of a dense run
inline constexpr int64_t kDenseBlock = 1024;  // run length at the leaves of the pairwise tree
inline constexpr int64_t kColumnBlock = 64;   // rows at the leaves of the column pairwise tree

// Columns folded together: about 2 KiB of accumulators, so a tile stays in L1.
template <class Acc>
inline constexpr int64_t kColumnTile = std::max<int64_t>(16, int64_t(2048 / sizeof(Acc)));

// The vectorised leaves below are compiled twice: for the x86-64 baseline
// (SSE2) and, picked at run time, for AVX2 (twice the vector width).

// Folds n <= kDenseBlock elements `stride` apart (1 when kDense, known at
// compile time so the lanes vectorise) into kLanes independent accumulators.
template <bool kDense, class In, class Reducer>
[[gnu::always_inline]] inline typename Reducer::Acc fold_lanes(const Reducer& reducer, const In* p, int64_t stride,
                                                               int64_t n, int64_t r) {
  using Acc = typename Reducer::Acc;
  using Value = ComputeType<In>;
  if (kDense) stride = 1;
  Acc lanes[kLanes];
  for (Acc& lane : lanes) lane = reducer.identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = reducer.step(lanes[j], Value(p[(i + j) * stride]), r + i + j);
  for (; i < n; ++i) lanes[0] = reducer.step(lanes[0], Value(p[i * stride]), r + i);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t j = 0; j < width; ++j) lanes[j] = reducer.merge(lanes[j], lanes[j + width]);
  return lanes[0];
}
template <class In, class Reducer>
typename Reducer::Acc fold_dense_baseline(const Reducer& reducer, const In* p, int64_t n, int64_t r) {
  return fold_lanes<true>(reducer, p, 1, n, r);
}
template <class In, class Reducer>
EMBER_TARGET_AVX2 typename Reducer::Acc fold_dense_avx2(const Reducer& reducer, const In* p, int64_t n, int64_t r) {
  return fold_lanes<true>(reducer, p, 1, n, r);
}

// Where the pairwise tree splits n elements: the left half, in whole lanes.
// reduce_run and split_reduced's tree must split alike.
inline int64_t pairwise_half(int64_t n) { return (n / 2 + kLanes - 1) / kLanes * kLanes; }

// Folds n elements `stride` apart, pairwise above kDenseBlock so that rounding
// error grows with log(n), not n. The first element has flat reduced index r.
template <bool kDense, class In, class Reducer>
typename Reducer::Acc reduce_run(const Reducer& reducer, const In* p, int64_t stride, int64_t n, int64_t r) {
  if (n > kDenseBlock) {
    const int64_t half = pairwise_half(n);
    auto left = reduce_run<kDense>(reducer, p, stride, half, r);
    return reducer.merge(left, reduce_run<kDense>(reducer, p + half * stride, stride, n - half, r + half));
  }
  if constexpr (kDense) {
    if constexpr (std::is_same_v<In, Half>) {
      if (cpu_has_f16c()) {  // widened first: Half's conversion branches, which keeps the lanes scalar
        float wide[kDenseBlock];
        convert_run(p, wide, n);
        return fold_dense_avx2(reducer, static_cast<const float*>(wide), n, r);
      }
    }
    return cpu_has_avx2() ? fold_dense_avx2(reducer, p, n, r) : fold_dense_baseline(reducer, p, n, r);
  } else {
    return fold_lanes<false>(reducer, p, stride, n, r);
  }
}

// reduce_run at any stride: a dense run folds on SIMD lanes.
template <class In, class Reducer>
typename Reducer::Acc fold_run(const Reducer& reducer, const In* p, int64_t stride, int64_t n, int64_t r) {
  return stride == 1 ? reduce_run<true>(reducer, p, 1, n, r) : reduce_run<false>(reducer, p, stride, n, r);
}

// Folds the flat reduced range [begin, end) of the output whose input starts at `base`.
template <class In, class Reducer>
typename Reducer::Acc reduce_range(const Reducer& reducer, const ReductionLoop& loop, const In* base, int64_t begin,
                                   int64_t end) {
  if (loop.reduced_ndim == 1) {  // one run: skip the cursor
    const int64_t stride = loop.inner_reduced_stride();
    return fold_run(reducer, base + begin * stride, stride, end - begin, begin);
  }
  typename Reducer::Acc acc = reducer.identity();
  for_each_reduced_run(loop, begin, end, [&](int64_t offset, int64_t stride, int64_t n, int64_t r) {
    acc = reducer.merge(acc, fold_run(reducer, base + offset, stride, n, r));
  });
  return acc;
}

// acc[k] = step(acc[k], rows[i][k]) for i < kRows, k < width: the column loop's
// vectorised leaf. Folding several rows per pass over acc saves loads and stores
// of the accumulators (they do not fit in registers; walking rows column-block
// by column-block instead would thrash L1 with 4 KiB-strided rows).
template <int kRows, class In, class Reducer>
[[gnu::always_inline]] inline void fold_rows(const Reducer& reducer, const In* const* rows, int64_t width, int64_t r,
                                             typename Reducer::Acc* acc) {
  for (int64_t k = 0; k < width; ++k) {
    typename Reducer::Acc a = acc[k];
    for (int i = 0; i < kRows; ++i) a = reducer.step(a, ComputeType<In>(rows[i][k]), r + i);
    acc[k] = a;
  }
}
template <int kRows, class In, class Reducer>
void fold_rows_baseline(const Reducer& reducer, const In* const* rows, int64_t width, int64_t r,
                        typename Reducer::Acc* acc) {
  fold_rows<kRows>(reducer, rows, width, r, acc);
}
template <int kRows, class In, class Reducer>
EMBER_TARGET_AVX2 void fold_rows_avx2(const Reducer& reducer, const In* const* rows, int64_t width, int64_t r,
                                      typename Reducer::Acc* acc) {
  fold_rows<kRows>(reducer, rows, width, r, acc);
}

// fold_rows on the CPU's best path; f16 rows are widened first, as in reduce_run.
template <int kRows, class In, class Reducer>
void fold_row_group(const Reducer& reducer, const In* const* rows, int64_t width, int64_t r,
                    typename Reducer::Acc* acc, bool avx2) {
  if constexpr (std::is_same_v<In, Half>) {
    if (cpu_has_f16c()) {
      float wide[kRows][kColumnTile<typename Reducer::Acc>];
      const float* wide_rows[kRows];
      for (int i = 0; i < kRows; ++i) {
        convert_run(rows[i], wide[i], width);
        wide_rows[i] = wide[i];
      }
      return fold_rows_avx2<kRows>(reducer, wide_rows, width, r, acc);
    }
  }
  if (avx2) fold_rows_avx2<kRows>(reducer, rows, width, r, acc);
  else fold_rows_baseline<kRows>(reducer, rows, width, r, acc);
}

// acc[k] = fold of rows [begin, end) at column k < width; rows start at
// base + (offset of reduced index r), columns are dense.
template <class In, class Reducer>
void reduce_columns(const Reducer& reducer, const ReductionLoop& loop, const In* base, int64_t width, int64_t begin,
                    int64_t end, typename Reducer::Acc* acc) {
  using Acc = typename Reducer::Acc;
  if (end - begin > kColumnBlock) {  // pairwise over rows, as reduce_run
    int64_t middle = begin + (end - begin) / 2;
    Acc right[kColumnTile<Acc>];
    reduce_columns(reducer, loop, base, width, begin, middle, acc);
    reduce_columns(reducer, loop, base, width, middle, end, right);
    for (int64_t k = 0; k < width; ++k) acc[k] = reducer.merge(acc[k], right[k]);
    return;
  }
  for (int64_t k = 0; k < width; ++k) acc[k] = reducer.identity();
  constexpr int kRows = 4;
  const bool avx2 = cpu_has_avx2();
  ReducedCursor cursor(loop, begin);
  const In* rows[kRows];
  int64_t r = begin;
  for (; r + kRows <= end; r += kRows) {
    for (int i = 0; i < kRows; ++i, cursor.next()) rows[i] = base + cursor.offset();
    fold_row_group<kRows>(reducer, rows, width, r, acc, avx2);
  }
  for (; r < end; ++r, cursor.next()) {
    rows[0] = base + cursor.offset();
    fold_row_group<1>(reducer, rows, width, r, acc, avx2);
  }
}

// Outputs [begin, end) by columns: runs of the innermost kept dim, in tiles.
template <class In, class Reducer>
void column_outputs(const Reducer& reducer, const ReductionLoop& loop, int64_t begin, int64_t end) {
  using Acc = typename Reducer::Acc;
  const In* input = reinterpret_cast<const In*>(loop.input);
  const int64_t inner = loop.inner_kept_size();
  Acc acc[kColumnTile<Acc>];
  for (int64_t o = begin; o < end;) {
    const int64_t width = std::min(inner - o % inner, end - o);
    const In* base = input + loop.kept_offset(o);
    for (int64_t k0 = 0; k0 < width; k0 += kColumnTile<Acc>) {
      const int64_t tile = std::min(kColumnTile<Acc>, width - k0);
      reduce_columns(reducer, loop, base + k0, tile, 0, loop.reduced_numel, acc);
      for (int64_t k = 0; k < tile; ++k) reducer.store(loop, o + k0 + k, acc[k], loop.reduced_numel);
    }
    o += width;
  }
}

// The subtrees of reduce_run's pairwise tree over [begin, begin + n), `depth`
// levels down: each is folded whole by reduce_run(begin, n).
inline void tree_leaves(int64_t begin, int64_t n, int depth, std::vector<std::pair<int64_t, int64_t>>& leaves) {
  if (depth == 0 || n <= kDenseBlock) {
    leaves.emplace_back(begin, n);
    return;
  }
  const int64_t half = pairwise_half(n);
  tree_leaves(begin, half, depth - 1, leaves);
  tree_leaves(begin + half, n - half, depth - 1, leaves);
}

// Merges the leaves' folds as reduce_run merges its halves.
template <class Reducer>
typename Reducer::Acc merge_tree(const Reducer& reducer, int64_t n, int depth, const typename Reducer::Acc* folds,
                                 size_t& next) {
  if (depth == 0 || n <= kDenseBlock) return folds[next++];
  const int64_t half = pairwise_half(n);
  const typename Reducer::Acc left = merge_tree(reducer, half, depth - 1, folds, next);
  return reducer.merge(left, merge_tree(reducer, n - half, depth - 1, folds, next));
}

// Fewer outputs than threads: each output's reduced range is split instead,
// along the serial fold's own tree (one run: the top levels of reduce_run's
// pairwise tree; several runs: the runs, folded left to right), so that the
// result is the same bits whatever the thread count. Chunks of the range
// merged per thread made sum(x, 1) of [5, 300001] change with the count.
template <class In, class Reducer>
void split_reduced(const Reducer& reducer, const ReductionLoop& loop) {
  using Acc = typename Reducer::Acc;
  constexpr int kDepth = 6;  // up to 64 pieces an output
  constexpr size_t kMostRuns = size_t(1) << 16;
  const In* input = reinterpret_cast<const In*>(loop.input);
  const int64_t reduced = loop.reduced_numel;
  struct Run {
    int64_t offset, stride, n, r;
  };
  std::vector<std::pair<int64_t, int64_t>> leaves;
  std::vector<Run> runs;
  if (loop.reduced_ndim == 1) {
    tree_leaves(0, reduced, kDepth, leaves);
  } else {
    for_each_reduced_run(loop, 0, reduced, [&](int64_t offset, int64_t stride, int64_t n, int64_t r) {
      if (runs.size() <= kMostRuns) runs.push_back({offset, stride, n, r});
    });
  }
  const size_t pieces = loop.reduced_ndim == 1 ? leaves.size() : runs.size();
  // Not a vector: vector<bool> (any, all) packs the folds into shared words.
  const std::unique_ptr<Acc[]> folds = std::make_unique<Acc[]>(pieces);
  for (int64_t o = 0; o < loop.kept_numel; ++o) {
    const In* base = input + loop.kept_offset(o);
    if (runs.size() > kMostRuns) {  // short runs: not worth splitting
      reducer.store(loop, o, reduce_range(reducer, loop, base, 0, reduced), reduced);
      continue;
    }
    parallel_for(0, int64_t(pieces), 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        if (loop.reduced_ndim == 1) {
          const auto [begin, n] = leaves[size_t(i)];
          folds[size_t(i)] = reduce_range(reducer, loop, base, begin, begin + n);
        } else {
          const Run& run = runs[size_t(i)];
          folds[size_t(i)] = fold_run(reducer, base + run.offset, run.stride, run.n, run.r);
        }
      }
    });
    Acc total;
    if (loop.reduced_ndim == 1) {
      size_t next = 0;
      total = merge_tree(reducer, reduced, kDepth, folds.get(), next);
    } else {
      total = reducer.identity();
      for (size_t i = 0; i < pieces; ++i) total = reducer.merge(total, folds[i]);
    }
    reducer.store(loop, o, total, reduced);
  }
}

template <class In, class Reducer>
void run_reduction(const ReductionLoop& loop, const Reducer& reducer) {
  const int64_t outputs = loop.kept_numel, reduced = loop.reduced_numel;
  if (reduced == 0) {
    for (int64_t o = 0; o < outputs; ++o) reducer.store(loop, o, reducer.identity(), 0);
    return;
  }
  const bool by_columns = loop.inner_kept_stride() == 1 && loop.inner_kept_size() > 1 && reduced > 1;
  // Columns fold along a tree of their own, which split_reduced does not follow.
  if (!by_columns && outputs < get_num_threads() && outputs * reduced > kParallelGrain && !in_parallel_region()) {
    split_reduced<In>(reducer, loop);
    return;
  }
  const In* input = reinterpret_cast<const In*>(loop.input);
  parallel_for(0, outputs, std::max<int64_t>(1, kParallelGrain / reduced), [&](int64_t begin, int64_t end) {
    if (by_columns) {
      column_outputs<In>(reducer, loop, begin, end);
    } else {
      for (int64_t o = begin; o < end; ++o)
        reducer.store(loop, o, reduce_range(reducer, loop, input + loop.kept_offset(o), 0, reduced), reduced);
    }
  });
}

}  // namespace ember::cpu
