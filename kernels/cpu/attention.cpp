// Fused attention on the CPU, flash-attention style (core/ops/attention_kernels.h):
// the [query_length, key_length] scores never exist whole. Forward: each
// (head, block of query rows) folds in tiles of keys with the online softmax
// (running row max and sum, the output rescaled when the max grows) and writes
// the rows' logsumexp. Backward (FlashAttention-2): each head walks key
// tiles, and for each tile all the query rows that see it at once,
// recomputing the probabilities from the logsumexp; dk and dv of the tile
// come out of one product each, dq for the whole head accumulates in a
// [query_length, head_dim] buffer, so every gradient element has one writer.
// Those tasks run in parallel over the threads (Note [Attention tasks in
// parallel]). Tile products run on the matmul kernel of the operands' dtype
// (oneDNN, one thread per product within the parallel tasks: bf16 on its
// bf16 GEMM, whose products round to bf16 as the composite's do); the
// softmax, its statistics and every accumulation across tiles are in f32
// (f64 for f64). Scratch is O(length x (dim + tile)) per thread, never
// O(L x S). Every operand is read and written where its layout puts it
// (Note [Attention on strided heads], core/ops/attention.cpp); strided keys,
// values and output gradients are gathered per task (Note [Gathering strided
// heads]).
// Tests: tests/core/test_attention.cpp, tests/nn/test_attention.cpp.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "core/ops/attention_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/linalg_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/vector_exp.h"

namespace ember::cpu {
namespace {

// Tiles of 64 query rows. The forward takes up to 256 keys at a time: its
// online softmax needs no smaller tile, and fewer, longer products run
// faster (bench_attention, one thread: the forward at T = 512 and 2048 took
// 1.15-1.2x as long with 64-key tiles, f32 and bf16; 512 keys measured no
// better than 256). The backward takes 64 keys per tile (Note [Attention
// backward by key tile]): 128 was 10% slower at T = 128, as causality skips
// less of a wider tile.
constexpr int64_t kQueryBlock = 64;        // query rows per forward task and tile
constexpr int64_t kForwardKeyBlock = 256;  // keys per forward tile
constexpr int64_t kKeyBlock = 64;          // keys per backward tile

// The accumulation type: f64 for f64 operands, f32 otherwise.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class A>
constexpr A kMinusInfinity = -std::numeric_limits<A>::infinity();

// A row-major or transposed [rows, cols] view: element (r, c) at data[r * row_stride + c * col_stride].
template <class A>
struct View {
  const A* data;
  int64_t row_stride, col_stride;
};
// Rows `stride` elements apart, and the transpose of such rows.
template <class A>
View<A> rows_of(const A* data, int64_t stride) { return {data, stride, 1}; }
template <class A>
View<A> transposed(const A* data, int64_t stride) { return {data, 1, stride}; }

// Head `head`'s rows of an operand (AttentionLayout).
template <class T, class Void>
T* head_rows(Void* data, const AttentionLayout& layout, int64_t head) {
  return static_cast<T*>(data) + layout.head_offsets[head];
}

// out[m, n] = a[m, k] b[k, n], out dense, on the matmul kernel of T's dtype;
// when out is wider than T, the product lands in `narrow` (m x n) first.
template <class T, class A>
void product(int64_t m, int64_t n, int64_t k, View<T> a, View<T> b, A* out, T* narrow) {
  MatmulProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a.data = const_cast<T*>(a.data), p.a.row_stride = a.row_stride, p.a.col_stride = a.col_stride;
  p.b.data = const_cast<T*>(b.data), p.b.row_stride = b.row_stride, p.b.col_stride = b.col_stride;
  p.out.row_stride = n, p.out.col_stride = 1;
  if constexpr (std::is_same_v<T, A>) {
    p.out.data = out;
    matmul_op(DeviceType::cpu, dtype_of<T>, p);
  } else {
    p.out.data = narrow;
    matmul_op(DeviceType::cpu, dtype_of<T>, p);
    convert_run(narrow, out, m * n);
  }
}


// x as T, the tile products' operand: x itself when it is T, else rounded into `buffer`.
template <class T, class A>
const T* narrowed(const A* x, int64_t n, T* buffer) {
  if constexpr (std::is_same_v<T, A>) {
    return x;
  } else {
    convert_run(x, buffer, n);
    return buffer;
  }
}

// x as A: x itself when it is A, else widened into `buffer`.
template <class A, class T>
const A* widened(const T* x, int64_t n, A* buffer) {
  if constexpr (std::is_same_v<T, A>) {
    return x;
  } else {
    convert_run(x, buffer, n);
    return buffer;
  }
}

// `rows` rows of `cols` elements of x, `stride` apart, times factor, as dense
// T rows (the scale folds into the query once: [L, E] multiplies instead of [L, S]).
template <class T, class A>
const T* scaled(const T* x, int64_t rows, int64_t cols, int64_t stride, A factor, T* buffer) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buffer[r * cols + c] = T(A(x[r * stride + c]) * factor);
  return buffer;
}

// Dense rows of `cols` elements of A into rows of T `stride` apart.
template <class A, class T>
void store_rows(const A* source, int64_t rows, int64_t cols, T* target, int64_t stride) {
  if (stride == cols) return convert_run(source, target, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<A, T>)
      std::memcpy(target + r * stride, source + r * cols, size_t(cols) * sizeof(T));
    else
      convert_run(source + r * cols, target + r * stride, cols);
  }
}

// Note [Gathering strided heads]: oneDNN 2.6 runs a tile product on its
// brgemm kernels only when the operands' rows are dense; with the rows of a
// head-split view (3 x H x D apart in a GPT's fused projection) it falls back
// to gemm:jit, which made the bf16 GPT step's attention 1.5x slower than
// copying the heads first. So the tile products' operands are gathered into
// dense per-thread scratch once per task (head, or head and row block), hot
// in cache, instead of by a separate copy of the whole tensor.
// `rows` rows of `cols` elements `stride` apart, dense: x itself when they
// are, else copied into `buffer`.
template <class T>
const T* dense_rows(const T* x, int64_t rows, int64_t cols, int64_t stride, T* buffer) {
  if (stride == cols || rows <= 1) return x;
  for (int64_t r = 0; r < rows; ++r) std::memcpy(buffer + r * cols, x + r * stride, size_t(cols) * sizeof(T));
  return buffer;
}

// target[m, n] = a b, target's rows `stride` apart, of T: straight into
// target when its rows are dense (the matmul kernel writes dense rows), else
// through `dense` (m x n).
template <class T>
void product_rows(int64_t m, int64_t n, int64_t k, View<T> a, View<T> b, T* target, int64_t stride, T* dense) {
  if (stride == n || m == 1) return product<T, T>(m, n, k, a, b, target, nullptr);
  product<T, T>(m, n, k, a, b, dense, nullptr);
  store_rows(dense, m, n, target, stride);
}

// target[i] += factor * source[i] for i < n
template <class A>
void add_scaled(A* target, const A* source, int64_t n, A factor) {
  for (int64_t i = 0; i < n; ++i) target[i] += factor * source[i];
}

// The largest of x[0..n): Eigen's vectorised reduction (a plain loop keeps
// the running max in memory and costs more than the tile's product).
template <class A>
A maximum(const A* x, int64_t n) {
  return Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>(x, n).maxCoeff();
}

// y[i] = exp(x[i] - shift), exactly 0 for -inf; returns the sum.
float exp_shifted(const float* x, float* y, int64_t n, float shift) { return exp_shifted_sum(x, y, n, shift); }
double exp_shifted(const double* x, double* y, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += y[i] = std::exp(x[i] - shift);
  return sum;
}

// A scratch buffer of n elements from ember's allocator (so memory statistics see it).
template <class A>
A* scratch(Tensor& holder, int64_t n) {
  holder = make_tensor({std::max<int64_t>(n, 1)}, dtype_of<A>, kCPU);
  return holder.data_ptr<A>();
}

// Masks the score tile of query rows [row0, row0 + rows) and keys [key0, key0 + cols) in place:
// -inf where causality or a boolean mask excludes the key, plus an additive mask.
template <class A>
void mask_tile(const AttentionProblem& p, int64_t head, int64_t row0, int64_t rows, int64_t key0, int64_t cols,
               A* scores) {
  for (int64_t r = 0; r < rows; ++r) {
    A* row = scores + r * cols;
    const int64_t i = row0 + r;
    if (p.mask_kind != AttentionMaskKind::none) {
      const int64_t base = p.mask_head_offsets[head] + i * p.mask_row_stride + key0 * p.mask_col_stride;
      if (p.mask_kind == AttentionMaskKind::boolean) {
        const bool* mask = static_cast<const bool*>(p.mask) + base;
        for (int64_t c = 0; c < cols; ++c)
          if (!mask[c * p.mask_col_stride]) row[c] = kMinusInfinity<A>;
      } else {
        const A* mask = static_cast<const A*>(p.mask) + base;
        for (int64_t c = 0; c < cols; ++c) row[c] += mask[c * p.mask_col_stride];
      }
    }
    if (p.causal)
      for (int64_t c = std::max<int64_t>(0, i + 1 - key0); c < cols; ++c) row[c] = kMinusInfinity<A>;
  }
}

// How far along the tile [key0, key0 + cols) query row i's softmax (exp and
// max) must run: to the causal diagonal (at T = 128 a third of a causal
// tile's entries lie beyond), rounded up to the vector exp's 8 lanes. The
// rounding makes the row sum add the same vectors in the same order as over
// the whole tile (the rest adds exact zeros), so causal attention equals
// attention under the same explicit mask bit for bit (tests/nn/test_attention.cpp,
// tests/core/test_attention.cpp).
int64_t causal_prefix(const AttentionProblem& p, int64_t i, int64_t key0, int64_t cols) {
  constexpr int64_t kExpLanes = 8;
  if (!p.causal) return cols;
  const int64_t seen = std::max<int64_t>(0, i + 1 - key0);
  return std::min(cols, (seen + kExpLanes - 1) / kExpLanes * kExpLanes);
}

// The keys query rows [row0, row0 + rows) may see: [0, end).
int64_t visible_keys(const AttentionProblem& p, int64_t row0, int64_t rows) {
  return p.causal ? std::min(p.key_length, row0 + rows) : p.key_length;
}

// One thread's scratch for forward_block, for blocks of up to `rows` query rows.
template <class T>
struct ForwardScratch {
  using A = Acc<T>;
  Tensor holder, narrow_holder;
  A *scores, *out, *tile_out, *row_max, *row_sum;
  T *query_buffer, *tile_narrow, *out_narrow, *keys, *values;

  // gathered_keys: how many rows of keys and values a task may gather (Note [Gathering strided heads]).
  ForwardScratch(int64_t rows, int64_t E, int64_t Ev, int64_t gathered_keys) {
    scores = scratch<A>(holder, rows * kForwardKeyBlock + 2 * rows * Ev + 2 * rows);
    out = scores + rows * kForwardKeyBlock, tile_out = out + rows * Ev;
    row_max = tile_out + rows * Ev, row_sum = row_max + rows;
    query_buffer = scratch<T>(narrow_holder, rows * E + rows * kForwardKeyBlock + rows * Ev + gathered_keys * (E + Ev));
    tile_narrow = query_buffer + rows * E, out_narrow = tile_narrow + rows * kForwardKeyBlock;
    keys = out_narrow + rows * Ev, values = keys + gathered_keys * E;
  }
};

template <class T>
void forward_block(const AttentionProblem& p, int64_t head, int64_t row0, ForwardScratch<T>& scratch) {
  using A = Acc<T>;
  const int64_t rows = std::min(kQueryBlock, p.query_length - row0), E = p.head_dim, Ev = p.value_dim;
  const T* q = head_rows<const T>(p.q, p.q_layout, head);
  const int64_t end = visible_keys(p, row0, rows);
  const T* k = dense_rows(head_rows<const T>(p.k, p.k_layout, head), end, E, p.k_layout.row_stride, scratch.keys);
  const T* v = dense_rows(head_rows<const T>(p.v, p.v_layout, head), end, Ev, p.v_layout.row_stride, scratch.values);
  A *scores = scratch.scores, *out = scratch.out, *tile_out = scratch.tile_out;
  A *row_max = scratch.row_max, *row_sum = scratch.row_sum;
  T *tile_narrow = scratch.tile_narrow, *out_narrow = scratch.out_narrow;
  const T* query = scaled(q + row0 * p.q_layout.row_stride, rows, E, p.q_layout.row_stride, A(p.scale),
                          scratch.query_buffer);
  std::fill(out, out + rows * Ev, A(0));
  std::fill(row_max, row_max + rows, kMinusInfinity<A>);
  std::fill(row_sum, row_sum + rows, A(0));
  for (int64_t key0 = 0; key0 < end; key0 += kForwardKeyBlock) {
    const int64_t cols = std::min(kForwardKeyBlock, end - key0);
    const T *keys = k + key0 * E, *values = v + key0 * Ev;
    product(rows, cols, E, rows_of(query, E), transposed(keys, E), scores, tile_narrow);  // [rows, E] x [E, cols]
    mask_tile(p, head, row0, rows, key0, cols, scores);
    for (int64_t r = 0; r < rows; ++r) {
      A* row = scores + r * cols;
      const int64_t seen = causal_prefix(p, row0 + r, key0, cols);
      const A new_max = seen == 0 ? row_max[r] : std::max(row_max[r], maximum(row, seen));
      if (new_max == kMinusInfinity<A>) {  // every key so far masked out: nothing to add
        // unless the scores are NaN, which the max passed over: the row is NaN, as PyTorch's
        if (std::any_of(row, row + seen, [](A x) { return std::isnan(x); }))
          row_max[r] = row_sum[r] = std::numeric_limits<A>::quiet_NaN();
        std::fill(row, row + cols, A(0));
        continue;
      }
      const A correction = std::exp(row_max[r] - new_max);  // 0 while the row had no key
      row_sum[r] = row_sum[r] * correction + exp_shifted(row, row, seen, new_max);
      std::fill(row + seen, row + cols, A(0));
      row_max[r] = new_max;
      if (correction != A(1))
        for (int64_t e = 0; e < Ev; ++e) out[r * Ev + e] *= correction;
    }
    const T* probabilities = narrowed(scores, rows * cols, tile_narrow);
    product(rows, Ev, cols, rows_of(probabilities, cols), rows_of(values, Ev), tile_out, out_narrow);  // [rows, cols] x [cols, Ev]
    add_scaled(out, tile_out, rows * Ev, A(1));
  }
  T* result = head_rows<T>(p.out, p.out_layout, head) + row0 * p.out_layout.row_stride;
  A* shift = static_cast<A*>(p.logsumexp) + head * p.query_length + row0;
  A* log_sum = shift + p.heads * p.query_length;
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = row_sum[r] == A(0);  // every key masked out: output 0 (PyTorch 2.5's convention)
    const A inverse = empty ? A(0) : A(1) / row_sum[r];
    for (int64_t e = 0; e < Ev; ++e) out[r * Ev + e] *= inverse;
    shift[r] = empty ? kMinusInfinity<A> : row_max[r];
    log_sum[r] = empty ? A(0) : std::log(row_sum[r]);
  }
  store_rows(out, rows, Ev, result, p.out_layout.row_stride);
}

// Note [Attention tasks in parallel]: the forward's tasks, (head, block of
// query rows), and the backward's, heads, are independent (each writes its own
// rows of the outputs) and run over the OpenMP threads, each thread with its
// own scratch and its tile products on one thread (Note [Small primitives run
// on one thread], kernels/cpu/onednn.h). oneDNN primitives may run on any
// thread because each runs with its caller's scratchpad (Note [oneDNN
// scratchpads]); before that, two threads running tiles gave wrong values.
// Threads start only above kSingleThreadMultiplyAdds of work, as the GEMMs'.
// parallel_for hands each thread one contiguous range of tasks, so the causal
// forward orders its row blocks 0, n-1, 1, n-2, ... (cheap and dear in
// pairs: row block i sees (i + 1) x 64 keys) and any contiguous half holds
// about half the work. The backward splits heads only (dq of a head gathers
// every key tile), so one head runs on one thread.

// The parallel_for grain for tasks of `task_multiply_adds` each.
int64_t task_grain(int64_t task_multiply_adds) {
  return std::max<int64_t>(1, kSingleThreadMultiplyAdds / std::max<int64_t>(1, task_multiply_adds));
}

template <class T>
void forward(const AttentionProblem& p) {
  const int64_t blocks = (p.query_length + kQueryBlock - 1) / kQueryBlock;
  const int64_t task_work = std::min(kQueryBlock, p.query_length) * p.key_length * (p.head_dim + p.value_dim);
  parallel_for(0, p.heads * blocks, task_grain(task_work), [&](int64_t begin, int64_t end) {
    const bool strided = p.k_layout.row_stride != p.head_dim || p.v_layout.row_stride != p.value_dim;
    ForwardScratch<T> scratch(std::min(kQueryBlock, p.query_length), p.head_dim, p.value_dim,
                              strided ? p.key_length : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task % p.heads, rank = task / p.heads;
      const int64_t block = rank % 2 == 0 ? rank / 2 : blocks - 1 - rank / 2;  // 0, n-1, 1, n-2, ...
      forward_block<T>(p, head, block * kQueryBlock, scratch);
    }
  });
}

// delta[i] = sum_e grad_out[i, e] out[i, e] for `rows` rows of `cols`, in A
// (the rows of each operand its stride apart); `buffer` holds 2 x cols. Each
// row widened into `buffer` and reduced by Eigen (a plain loop's sum is not
// vectorised).
template <class T, class A>
void row_dots(const T* grad_out, int64_t grad_out_stride, const T* out, int64_t out_stride, int64_t rows, int64_t cols,
              A* delta, A* buffer) {
  using Row = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;
  for (int64_t i = 0; i < rows; ++i) {
    const A* g = widened(grad_out + i * grad_out_stride, cols, buffer);
    const A* o = widened(out + i * out_stride, cols, buffer + cols);
    delta[i] = (Row(g, cols) * Row(o, cols)).sum();
  }
}

// One thread's scratch for backward_head: for one key tile, the
// probabilities and their gradients of every query row that sees it; and,
// when dk or dv have rows wider than theirs (strided heads), a tile of them
// (`key_tile` elements: none otherwise, so dense heads' memory stays as it was).
template <class T>
struct BackwardScratch {
  using A = Acc<T>;
  Tensor holder, narrow_holder;
  A *grad_query, *probabilities, *grad_probabilities, *query_product, *row_buffer;
  T *query_buffer, *probabilities_narrow, *grad_scores_narrow, *out_narrow, *key_tile, *keys, *values, *grad_outs;

  // gathered: whether k, v and grad_out are gathered (Note [Gathering strided heads]).
  BackwardScratch(int64_t L, int64_t S, int64_t E, int64_t Ev, int64_t key_tile_elements, bool gathered) {
    const int64_t gathered_elements = gathered ? S * (E + Ev) + L * Ev : 0;
    grad_query = scratch<A>(holder, 2 * L * E + 2 * L * kKeyBlock + 2 * Ev);
    query_product = grad_query + L * E, probabilities = query_product + L * E;
    grad_probabilities = probabilities + L * kKeyBlock, row_buffer = grad_probabilities + L * kKeyBlock;
    query_buffer = scratch<T>(narrow_holder,
                              L * E + 2 * L * kKeyBlock + L * std::max(kKeyBlock, E) + key_tile_elements +
                                  gathered_elements);
    probabilities_narrow = query_buffer + L * E, grad_scores_narrow = probabilities_narrow + L * kKeyBlock;
    out_narrow = grad_scores_narrow + L * kKeyBlock, key_tile = out_narrow + L * std::max(kKeyBlock, E);
    keys = key_tile + key_tile_elements, values = keys + (gathered ? S * E : 0);
    grad_outs = values + (gathered ? S * Ev : 0);
  }
};

// Note [Attention backward by key tile]: for each key tile, one product per
// term over all the query rows that see the tile (every row, or from the
// tile's first key on when causal), not one per (key tile, query block)
// pair: 5 GEMM calls per key tile, whatever the length (at T = 128 causal,
// 10 per head instead of 15; at T = 2048, 160 instead of 2,640), each with
// a longer dimension that oneDNN runs faster. dk and dv of the tile come out
// of a single product each, straight into the gradients; the scratch is
// O(query_length x tile), linear in the length.
template <class T>
void backward_head(const AttentionBackwardProblem& b, int64_t head, BackwardScratch<T>& scratch) {
  using A = Acc<T>;
  const AttentionProblem& p = b.forward;
  const int64_t L = p.query_length, S = p.key_length, E = p.head_dim, Ev = p.value_dim;
  const T* k = dense_rows(head_rows<const T>(p.k, p.k_layout, head), S, E, p.k_layout.row_stride, scratch.keys);
  const T* v = dense_rows(head_rows<const T>(p.v, p.v_layout, head), S, Ev, p.v_layout.row_stride, scratch.values);
  const T* grad_out = dense_rows(head_rows<const T>(b.grad_out, b.grad_out_layout, head), L, Ev,
                                 b.grad_out_layout.row_stride, scratch.grad_outs);
  const A* shifts = static_cast<const A*>(p.logsumexp) + head * L;
  const A* log_sums = shifts + p.heads * L;
  A* delta = static_cast<A*>(b.delta) + head * L;
  T* dk = head_rows<T>(b.grad_k, b.grad_k_layout, head);
  T* dv = head_rows<T>(b.grad_v, b.grad_v_layout, head);
  const int64_t dk_stride = b.grad_k_layout.row_stride, dv_stride = b.grad_v_layout.row_stride;
  A *grad_query = scratch.grad_query, *probabilities = scratch.probabilities;
  A* grad_probabilities = scratch.grad_probabilities;
  // q s, as the forward saw it
  const T* query = scaled(head_rows<const T>(p.q, p.q_layout, head), L, E, p.q_layout.row_stride, A(p.scale),
                          scratch.query_buffer);
  row_dots(grad_out, Ev, head_rows<const T>(p.out, p.out_layout, head), p.out_layout.row_stride, L, Ev, delta,
           scratch.row_buffer);
  std::fill(grad_query, grad_query + L * E, A(0));
  for (int64_t key0 = 0; key0 < S; key0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, S - key0);
    const int64_t row0 = p.causal ? std::min(key0, L) : 0, rows = L - row0;  // the rows that see these keys
    if (rows == 0) {
      for (int64_t c = key0; c < key0 + cols; ++c) {
        std::fill(dk + c * dk_stride, dk + c * dk_stride + E, T(0));
        std::fill(dv + c * dv_stride, dv + c * dv_stride + Ev, T(0));
      }
      continue;
    }
    const T *keys = k + key0 * E, *queries = query + row0 * E, *grad_outs = grad_out + row0 * Ev;
    product(rows, cols, E, rows_of(queries, E), transposed(keys, E), probabilities, scratch.out_narrow);
    mask_tile(p, head, row0, rows, key0, cols, probabilities);
    for (int64_t r = 0; r < rows; ++r) {
      A* row = probabilities + r * cols;
      const A shift = shifts[row0 + r];
      const int64_t seen = shift == kMinusInfinity<A> ? 0 : causal_prefix(p, row0 + r, key0, cols);
      exp_shifted(row, row, seen, shift);  // a fully masked row (shift -inf): no gradient
      const A inverse_sum = std::exp(-log_sums[row0 + r]);
      for (int64_t c = 0; c < seen; ++c) row[c] *= inverse_sum;
      std::fill(row + seen, row + cols, A(0));
    }
    // dv = P^T dO: [cols, rows] x [rows, Ev]
    const T* probabilities_narrow = narrowed(probabilities, rows * cols, scratch.probabilities_narrow);
    product_rows(cols, Ev, rows, transposed(probabilities_narrow, cols), rows_of(grad_outs, Ev),
                 dv + key0 * dv_stride, dv_stride, scratch.key_tile);
    // dP = dO v^T: [rows, Ev] x [Ev, cols]; dS = P (dP - delta), in place of dP
    product(rows, cols, Ev, rows_of(grad_outs, Ev), transposed(v + key0 * Ev, Ev), grad_probabilities,
            scratch.out_narrow);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        A& d = grad_probabilities[r * cols + c];
        d = probabilities[r * cols + c] * (d - delta[row0 + r]);
      }
    // dq += dS k s: [rows, cols] x [cols, E]
    const T* grad_scores = narrowed(grad_probabilities, rows * cols, scratch.grad_scores_narrow);
    product(rows, E, cols, rows_of(grad_scores, cols), rows_of(keys, E), scratch.query_product,
            scratch.out_narrow);
    add_scaled(grad_query + row0 * E, scratch.query_product, rows * E, A(p.scale));
    // dk = dS^T (q s): [cols, rows] x [rows, E]
    product_rows(cols, E, rows, transposed(grad_scores, cols), rows_of(queries, E), dk + key0 * dk_stride, dk_stride,
                 scratch.key_tile);
  }
  store_rows(grad_query, L, E, head_rows<T>(b.grad_q, b.grad_q_layout, head), b.grad_q_layout.row_stride);
}

// Heads over the threads: Note [Attention tasks in parallel].
template <class T>
void backward(const AttentionBackwardProblem& b) {
  const AttentionProblem& p = b.forward;
  const int64_t head_work = p.query_length * p.key_length * (2 * p.head_dim + 3 * p.value_dim);
  parallel_for(0, p.heads, task_grain(head_work), [&](int64_t begin, int64_t end) {
    const bool strided = b.grad_k_layout.row_stride != p.head_dim || b.grad_v_layout.row_stride != p.value_dim;
    const bool gathered = p.k_layout.row_stride != p.head_dim || p.v_layout.row_stride != p.value_dim ||
                          b.grad_out_layout.row_stride != p.value_dim;
    BackwardScratch<T> scratch(p.query_length, p.key_length, p.head_dim, p.value_dim,
                               strided ? kKeyBlock * std::max(p.head_dim, p.value_dim) : 0, gathered);
    for (int64_t head = begin; head < end; ++head) backward_head<T>(b, head, scratch);
  });
}

}  // namespace

void register_attention_kernels() {
  register_for<float, double, BFloat16>(attention_op, DeviceType::cpu, [](auto tag) { return &forward<decltype(tag)>; });
  register_for<float, double, BFloat16>(attention_backward_op, DeviceType::cpu,
                                        [](auto tag) { return &backward<decltype(tag)>; });
}

}  // namespace ember::cpu
