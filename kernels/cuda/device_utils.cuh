// The device side shared by every CUDA kernel file: loading and storing each
// dtype in its compute type (f16/bf16 as f32 through the CUDA intrinsics; core's
// Half and BFloat16 are the same 16 bits), warp and block reductions, and the
// element-wise launcher over core's ElementwiseLoop.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/elementwise_loop.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

// ---- Loads and stores in the compute type --------------------------------

template <class T>
__device__ __forceinline__ ComputeType<T> load(const T* p) {
  if constexpr (std::is_same_v<T, Half>) return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t&>(*p)));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return __bfloat162float(__ushort_as_bfloat16(reinterpret_cast<const uint16_t&>(*p)));
  else return *p;
}

template <class T>
__device__ __forceinline__ void store(T* p, ComputeType<T> value) {
  if constexpr (std::is_same_v<T, Half>)
    reinterpret_cast<uint16_t&>(*p) = __half_as_ushort(__float2half_rn(value));
  else if constexpr (std::is_same_v<T, BFloat16>)
    reinterpret_cast<uint16_t&>(*p) = __bfloat16_as_ushort(__float2bfloat16_rn(value));
  else *p = value;
}

// core/convert.h's rules on the device: floating to integer truncates, nan
// gives 0 and out-of-range values saturate; anything to bool is != 0.
template <class To, class From>
__device__ __forceinline__ ComputeType<To> convert_value(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (isnan(v)) return 0;
    if (v <= From(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= From(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return To(v);
  } else {
    return ComputeType<To>(v);
  }
}

// ---- Reductions within a warp and a block ---------------------------------

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T value, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Every thread of the block gets the result. `shared` holds 32 Ts; the block
// is a multiple of 32 threads. Ends with a barrier, so `shared` may be reused.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T value, Op op, T identity, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_reduce(value, op);
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = threadIdx.x < warps ? shared[lane] : identity;
  if (warp == 0) value = warp_reduce(value, op);
  if (threadIdx.x == 0) shared[0] = value;
  __syncthreads();
  value = shared[0];
  __syncthreads();
  return value;
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// ---- The element-wise launcher ---------------------------------------------
// Note [CUDA element-wise launcher] in kernels/cuda/README.md.

// The unsigned integer of T's size: kernels that only move stored values
// (where, masked_fill) run on it, so dtypes of one size share a kernel.
template <class T>
using StoredBits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                      std::conditional_t<sizeof(T) == 2, uint16_t,
                                                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// An ElementwiseLoop as a kernel argument: byte strides, and the flat index's
// coordinates recovered by division when the loop has more than one dim.
template <int N>
struct DeviceLoop {
  int ndim = 1;
  bool index32 = false;  // numel fits in 32 bits: coordinates by 32-bit division
  int64_t shape[kMaxDims] = {};
  int64_t byte_strides[N][kMaxDims] = {};
  char* data[N] = {};

  __device__ __forceinline__ void pointers(int64_t flat, char* out[N]) const {
    int64_t offsets[N] = {};
    if (ndim == 1) {  // one run (broadcast scalars, misaligned dense operands, slices): no division
      for (int k = 0; k < N; ++k) offsets[k] = flat * byte_strides[k][0];
    } else if (index32) {
      add_offsets(uint32_t(flat), offsets);
    } else {
      add_offsets(flat, offsets);
    }
    for (int k = 0; k < N; ++k) out[k] = data[k] + offsets[k];
  }

  // Merged dims have sizes >= 2 and flat < numel, so what is left after the
  // inner dims is the outermost coordinate: it needs no division.
  template <class Index>
  __device__ __forceinline__ void add_offsets(Index flat, int64_t offsets[N]) const {
    for (int d = ndim - 1; d > 0; --d) {
      const Index size = Index(shape[d]);
      const int64_t coordinate = int64_t(flat % size);
      flat /= size;
      for (int k = 0; k < N; ++k) offsets[k] += coordinate * byte_strides[k][d];
    }
    for (int k = 0; k < N; ++k) offsets[k] += int64_t(flat) * byte_strides[k][0];
  }
};

template <int N>
DeviceLoop<N> device_loop(const ElementwiseLoop& loop) {
  EMBER_ASSERT(loop.num_operands == N, "elementwise launch: {} operands, expected {}", loop.num_operands, N);
  DeviceLoop<N> d;
  d.ndim = loop.ndim;
  d.index32 = loop.numel <= int64_t(UINT32_MAX);
  for (int k = 0; k < N; ++k) {
    d.data[k] = loop.data[k];
    for (int dim = 0; dim < loop.ndim; ++dim) d.byte_strides[k][dim] = loop.strides[k][dim] * element_size(loop.dtypes[k]);
  }
  for (int dim = 0; dim < loop.ndim; ++dim) d.shape[dim] = loop.shape[dim];
  return d;
}

inline constexpr int kElementwiseThreads = 256;

// Elements per thread on the dense path: 16 bytes of the widest operand (one
// 128-bit load or store), at most 8 elements so that the narrow operands'
// functor bodies are not unrolled further.
template <class Out, class... In>
inline constexpr int kPackElements = std::min(8, int(16 / std::max({sizeof(Out), sizeof(In)...})));

// V consecutive elements of T, aligned so that one instruction moves them.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T values[V];
};

template <class T, int V>
bool is_pack_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

// The inputs arrive by value: each was loaded whole, before any is used.
template <int V, class Out, class F, class... In>
__device__ __forceinline__ Pack<Out, V> apply_pack(const F& f, Pack<In, V>... inputs) {
  Pack<Out, V> result;
#pragma unroll
  for (int u = 0; u < V; ++u) store(&result.values[u], f(load(&inputs.values[u])...));
  return result;
}

// Dense operands, each aligned to its pack: element i of operand k is at
// data[k] + i. Each thread takes whole packs; the last n % V elements go one
// each to the first threads of the grid.
template <int V, class Out, class F, class... In>
__global__ void elementwise_dense_kernel(int64_t n, Out* out, F f, const In*... in) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  for (int64_t p = first; p < packs; p += step)
    reinterpret_cast<Pack<Out, V>*>(out)[p] = apply_pack<V, Out>(f, reinterpret_cast<const Pack<In, V>*>(in)[p]...);
  for (int64_t i = packs * V + first; i < n; i += step) store(out + i, f(load(in + i)...));
}

template <class Out, class... In, class F, size_t... I>
__device__ __forceinline__ void apply_one(char* const* ptrs, const F& f, std::index_sequence<I...>) {
  store(reinterpret_cast<Out*>(ptrs[0]), f(load(reinterpret_cast<const In*>(ptrs[I + 1]))...));
}

template <class Out, class F, class... In>
__global__ void elementwise_strided_kernel(int64_t n, DeviceLoop<1 + sizeof...(In)> loop, F f) {
  constexpr int N = 1 + sizeof...(In);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* ptrs[N];
    loop.pointers(i, ptrs);
    apply_one<Out, In...>(ptrs, f, std::index_sequence_for<In...>{});
  }
}

// Runs out = f(in...) over the loop on the current stream: f is a __device__
// functor taking and returning compute types (ComputeType<In>..., ComputeType<Out>).
template <class Out, class... In, class F>
void launch_elementwise(const ElementwiseLoop& loop, const F& f, const char* name) {
  if (loop.numel == 0) return;
  constexpr int N = 1 + sizeof...(In), V = kPackElements<Out, In...>;
  const bool packed = [&]<size_t... I>(std::index_sequence<I...>) {
    return loop.contiguous() && is_pack_aligned<Out, V>(loop.data[0]) &&
           (is_pack_aligned<In, V>(loop.data[I + 1]) && ...);
  }(std::index_sequence_for<In...>{});
  if (packed) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      elementwise_dense_kernel<V, Out, F, In...><<<blocks_for(loop.numel / V, kElementwiseThreads),
                                                   kElementwiseThreads, 0, current_stream()>>>(
          loop.numel, reinterpret_cast<Out*>(loop.data[0]), f, reinterpret_cast<const In*>(loop.data[I + 1])...);
    }(std::index_sequence_for<In...>{});
  } else {
    elementwise_strided_kernel<Out, F, In...><<<blocks_for(loop.numel, kElementwiseThreads), kElementwiseThreads, 0,
                                             current_stream()>>>(loop.numel, device_loop<N>(loop), f);
  }
  check_launch(name);
}

}  // namespace ember::cuda
