// Fused causal attention on CUDA, flash-attention style (Note [CUDA causal
// attention] in kernels/cuda/README.md): the [length, length] scores never
// reach memory. Forward: a thread per query row keeps its output row in
// registers and folds in tiles of keys and values staged in shared memory
// with the online softmax; it writes the row's logsumexp. Backward: a thread
// per query row accumulates dq, a thread per key row accumulates dk and dv,
// both recomputing the probabilities from the logsumexp, so every gradient
// element has one writer (no atomics, deterministic).
#include "core/ops/attention_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

constexpr int kRowsPerBlock = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Rows of a tile staged in shared memory: 32 KiB per pair of [rows, E] f32 tiles.
template <int E>
constexpr int kTileRows = 4096 / E;

// Stages rows [first, first + kTileRows) of a [length, E] matrix as f32 (zeros past the end).
template <class T, int E>
__device__ void stage_tile(float (*tile)[E], const T* matrix, int64_t first, int64_t length) {
  for (int index = threadIdx.x; index < kTileRows<E> * E; index += blockDim.x) {
    const int row = index / E, col = index % E;
    tile[row][col] = first + row < length ? float(load(matrix + (first + row) * E + col)) : 0.0f;
  }
}

__device__ __forceinline__ int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

template <int E>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float sum = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) sum += a[e] * b[e];
  return sum;
}

template <class T, int E>
__global__ void __launch_bounds__(kRowsPerBlock) forward_kernel(AttentionProblem p) {
  __shared__ float keys[kTileRows<E>][E];
  __shared__ float values[kTileRows<E>][E];
  const int64_t length = p.query_length, head = blockIdx.y;
  const int64_t first_row = int64_t(blockIdx.x) * kRowsPerBlock, i = first_row + threadIdx.x;
  const bool active = i < length;
  const T* q = static_cast<const T*>(p.q) + head * length * E;
  const T* k = static_cast<const T*>(p.k) + head * length * E;
  const T* v = static_cast<const T*>(p.v) + head * length * E;

  // Scores in base 2: exp2 is one instruction, and the scale folds into q.
  const float q_scale = float(p.scale) * kLog2e;
  float query[E], accumulator[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    query[e] = active ? float(load(q + i * E + e)) * q_scale : 0.0f;
    accumulator[e] = 0;
  }
  float row_max = -INFINITY, row_sum = 0;
  const int64_t last_key = smaller(length - 1, first_row + kRowsPerBlock - 1);
  for (int64_t tile = 0; tile <= last_key; tile += kTileRows<E>) {
    __syncthreads();
    stage_tile<T, E>(keys, k, tile, length);
    stage_tile<T, E>(values, v, tile, length);
    __syncthreads();
    if (!active) continue;
    const int keys_here = int(smaller(kTileRows<E>, i - tile + 1));
    for (int j = 0; j < keys_here; ++j) {
      const float score = dot<E>(query, keys[j]);
      if (score > row_max) {  // a new maximum rescales what is summed so far
        const float correction = exp2f(row_max - score);
        row_sum *= correction;
#pragma unroll
        for (int e = 0; e < E; ++e) accumulator[e] *= correction;
        row_max = score;
      }
      const float weight = exp2f(score - row_max);
      row_sum += weight;
#pragma unroll
      for (int e = 0; e < E; ++e) accumulator[e] += weight * values[j][e];
    }
  }
  if (!active) return;
  T* out = static_cast<T*>(p.out) + head * length * E + i * E;
  const float inverse = 1.0f / row_sum;  // row i always sees key i, so row_sum >= 1
#pragma unroll
  for (int e = 0; e < E; ++e) store(out + e, accumulator[e] * inverse);
  static_cast<float*>(p.logsumexp)[head * length + i] = (row_max + log2f(row_sum)) * kLn2;  // shift, with
  static_cast<float*>(p.logsumexp)[(p.heads + head) * length + i] = 0.0f;                  // log_sum 0
}

// delta[i] = sum_e grad_out[i, e] out[i, e]: the softmax backward's row term.
template <class T, int E>
__global__ void delta_kernel(AttentionBackwardProblem p, int64_t rows) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* g = static_cast<const T*>(p.grad_out) + row * E;
  const T* o = static_cast<const T*>(p.forward.out) + row * E;
  float sum = 0;
  for (int e = 0; e < E; ++e) sum += float(load(g + e)) * float(load(o + e));
  static_cast<float*>(p.delta)[row] = sum;
}

// dq[i] = scale sum_{j <= i} P_ij (dO_i . v_j - delta_i) k_j
template <class T, int E>
__global__ void __launch_bounds__(kRowsPerBlock) grad_query_kernel(AttentionBackwardProblem p) {
  __shared__ float keys[kTileRows<E>][E];
  __shared__ float values[kTileRows<E>][E];
  const AttentionProblem& f = p.forward;
  const int64_t length = f.query_length, head = blockIdx.y;
  const int64_t first_row = int64_t(blockIdx.x) * kRowsPerBlock, i = first_row + threadIdx.x;
  const bool active = i < length;
  const int64_t base = head * length * E;
  const float q_scale = float(f.scale) * kLog2e;
  float query[E], grad_out[E], grad_query[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    query[e] = active ? float(load(static_cast<const T*>(f.q) + base + i * E + e)) * q_scale : 0.0f;
    grad_out[e] = active ? float(load(static_cast<const T*>(p.grad_out) + base + i * E + e)) : 0.0f;
    grad_query[e] = 0;
  }
  const float logsumexp2 = active ? static_cast<const float*>(f.logsumexp)[head * length + i] * kLog2e : 0.0f;
  const float delta = active ? static_cast<const float*>(p.delta)[head * length + i] : 0.0f;
  const int64_t last_key = smaller(length - 1, first_row + kRowsPerBlock - 1);
  for (int64_t tile = 0; tile <= last_key; tile += kTileRows<E>) {
    __syncthreads();
    stage_tile<T, E>(keys, static_cast<const T*>(f.k) + base, tile, length);
    stage_tile<T, E>(values, static_cast<const T*>(f.v) + base, tile, length);
    __syncthreads();
    if (!active) continue;
    const int keys_here = int(smaller(kTileRows<E>, i - tile + 1));
    for (int j = 0; j < keys_here; ++j) {
      const float probability = exp2f(dot<E>(query, keys[j]) - logsumexp2);
      const float grad_score = probability * (dot<E>(grad_out, values[j]) - delta);
#pragma unroll
      for (int e = 0; e < E; ++e) grad_query[e] += grad_score * keys[j][e];
    }
  }
  if (!active) return;
  T* out = static_cast<T*>(p.grad_q) + base + i * E;
#pragma unroll
  for (int e = 0; e < E; ++e) store(out + e, grad_query[e] * float(f.scale));
}

// dv[j] = sum_{i >= j} P_ij dO_i;  dk[j] = scale sum_{i >= j} P_ij (dO_i . v_j - delta_i) q_i
template <class T, int E>
__global__ void __launch_bounds__(kRowsPerBlock) grad_key_value_kernel(AttentionBackwardProblem p) {
  __shared__ float queries[kTileRows<E>][E];
  __shared__ float grad_outs[kTileRows<E>][E];
  __shared__ float row_logsumexp2[kTileRows<E>];
  __shared__ float row_delta[kTileRows<E>];
  const AttentionProblem& f = p.forward;
  const int64_t length = f.query_length, head = blockIdx.y;
  const int64_t first_key = int64_t(blockIdx.x) * kRowsPerBlock, j = first_key + threadIdx.x;
  const bool active = j < length;
  const int64_t base = head * length * E;
  const float q_scale = float(f.scale) * kLog2e;
  float key[E], value[E], grad_key[E], grad_value[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    key[e] = active ? float(load(static_cast<const T*>(f.k) + base + j * E + e)) : 0.0f;
    value[e] = active ? float(load(static_cast<const T*>(f.v) + base + j * E + e)) : 0.0f;
    grad_key[e] = grad_value[e] = 0;
  }
  for (int64_t tile = first_key; tile < length; tile += kTileRows<E>) {
    __syncthreads();
    stage_tile<T, E>(queries, static_cast<const T*>(f.q) + base, tile, length);
    stage_tile<T, E>(grad_outs, static_cast<const T*>(p.grad_out) + base, tile, length);
    for (int r = threadIdx.x; r < kTileRows<E>; r += blockDim.x) {
      const bool inside = tile + r < length;
      row_logsumexp2[r] = inside ? static_cast<const float*>(f.logsumexp)[head * length + tile + r] * kLog2e : 0.0f;
      row_delta[r] = inside ? static_cast<const float*>(p.delta)[head * length + tile + r] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const int rows_here = int(smaller(kTileRows<E>, length - tile));
    for (int r = int(j > tile ? j - tile : 0); r < rows_here; ++r) {  // query rows i = tile + r >= j
      const float probability = exp2f(dot<E>(queries[r], key) * q_scale - row_logsumexp2[r]);
      const float grad_score = probability * (dot<E>(grad_outs[r], value) - row_delta[r]);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        grad_value[e] += probability * grad_outs[r][e];
        grad_key[e] += grad_score * queries[r][e];
      }
    }
  }
  if (!active) return;
  T* dk = static_cast<T*>(p.grad_k) + base + j * E;
  T* dv = static_cast<T*>(p.grad_v) + base + j * E;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    store(dk + e, grad_key[e] * float(f.scale));
    store(dv + e, grad_value[e]);
  }
}

template <class F>
void with_head_dim(int64_t head_dim, F&& f) {
  if (head_dim == 64) f.template operator()<64>();
  else if (head_dim == 128) f.template operator()<128>();
  else EMBER_CHECK(false, "causal_attention: head_dim {} is not supported on CUDA (64 or 128)", head_dim);
}

// The problems these kernels take; fused_attention_supported
// (core/ops/attention.cpp) routes only these here.
dim3 row_grid(const AttentionProblem& p) {
  EMBER_CHECK(p.causal && p.mask_kind == AttentionMaskKind::none && p.query_length == p.key_length &&
                  p.head_dim == p.value_dim,
              "causal_attention: CUDA takes causal attention without a mask, with equal lengths and dims; got "
              "causal {}, query length {}, key length {}, head_dim {}, value_dim {}",
              p.causal, p.query_length, p.key_length, p.head_dim, p.value_dim);
  EMBER_CHECK(p.heads <= 65535, "causal_attention: {} heads exceed CUDA's grid limit of 65535", p.heads);
  return dim3(unsigned((p.query_length + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(p.heads));
}

template <class T>
void forward(const AttentionProblem& p) {
  with_head_dim(p.head_dim, [&]<int E>() {
    const dim3 grid = row_grid(p);
    forward_kernel<T, E><<<grid, kRowsPerBlock, 0, current_stream()>>>(p);
    check_launch("causal_attention");
  });
}

template <class T>
void backward(const AttentionBackwardProblem& p) {
  with_head_dim(p.forward.head_dim, [&]<int E>() {
    const dim3 grid = row_grid(p.forward);
    const int64_t rows = p.forward.heads * p.forward.query_length;
    delta_kernel<T, E><<<blocks_for(rows, 256), 256, 0, current_stream()>>>(p, rows);
    check_launch("causal_attention_backward (delta)");
    grad_query_kernel<T, E><<<grid, kRowsPerBlock, 0, current_stream()>>>(p);
    check_launch("causal_attention_backward (dq)");
    grad_key_value_kernel<T, E><<<grid, kRowsPerBlock, 0, current_stream()>>>(p);
    check_launch("causal_attention_backward (dk, dv)");
  });
}

}  // namespace

void register_attention_kernels() {
  register_for<Half, BFloat16>(attention_op, DeviceType::cuda, [](auto tag) { return &forward<decltype(tag)>; });
  register_for<Half, BFloat16>(attention_backward_op, DeviceType::cuda,
                               [](auto tag) { return &backward<decltype(tag)>; });
}

}  // namespace ember::cuda
