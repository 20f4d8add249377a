// CUDA scan kernels (cumsum, cumprod), two layouts:
// - a block per slice when the input is dense along the scanned dim and the
//   slice is longer than a warp (a cumsum over the last dim): the block's
//   threads read consecutive elements, scan them by warp shuffles and the
//   warps' totals through shared memory, and carry the running total to the
//   next block-wide chunk;
// - a thread per slice otherwise (a scan along an outer dim, or short slices):
//   neighbouring threads own neighbouring slices, so each step's loads are
//   coalesced when the slices are adjacent in memory.
// Accumulation types are the CPU's (core/ops/scan_kernels.h): integers give
// the CPU's values exactly; the block layout adds floats in a tree within
// each chunk, so float results differ from the CPU's sequential sums by
// rounding only. Tests: tests/cuda/test_cuda_scan.cpp.
#include "core/ops/scan_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

constexpr int kBlockThreads = 256;

template <class T>
using Acc = reduction_types::Accumulator<T>;

template <class T, class Scan>
__global__ void scan_per_thread(DeviceLoop<2> slices, int64_t num_slices, int64_t length, int64_t out_step,
                                int64_t in_step) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < num_slices;
       i += int64_t(gridDim.x) * blockDim.x) {
    char* p[2];
    slices.pointers(i, p);
    T* out = reinterpret_cast<T*>(p[0]);
    const T* in = reinterpret_cast<const T*>(p[1]);
    Acc<T> accumulated = Scan::template identity<Acc<T>>();
    for (int64_t j = 0; j < length; ++j) {
      accumulated = Scan::step(accumulated, Acc<T>(load(in + j * in_step)));
      store(out + j * out_step, ComputeType<T>(accumulated));
    }
  }
}

// Inclusive scan over the 32 lanes of a warp: lane i gets the steps of lanes 0..i.
template <class Scan, class A>
__device__ __forceinline__ A warp_inclusive_scan(A value) {
  const int lane = int(threadIdx.x % 32);
  for (int offset = 1; offset < 32; offset *= 2) {
    A before = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value = Scan::step(before, value);
  }
  return value;
}

template <class T, class Scan>
__global__ void scan_per_block(DeviceLoop<2> slices, int64_t num_slices, int64_t length, int64_t out_step,
                               int64_t in_step) {
  using A = Acc<T>;
  __shared__ A warp_totals[kBlockThreads / 32];
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), warps = int(blockDim.x / 32);
  for (int64_t slice = blockIdx.x; slice < num_slices; slice += gridDim.x) {
    char* p[2];
    slices.pointers(slice, p);
    T* out = reinterpret_cast<T*>(p[0]);
    const T* in = reinterpret_cast<const T*>(p[1]);
    A carry = Scan::template identity<A>();  // the scan of every earlier chunk
    for (int64_t start = 0; start < length; start += blockDim.x) {
      const int64_t j = start + threadIdx.x;
      A value = j < length ? A(load(in + j * in_step)) : Scan::template identity<A>();
      value = warp_inclusive_scan<Scan>(value);
      if (lane == 31) warp_totals[warp] = value;
      __syncthreads();
      if (warp == 0) {
        A total = lane < warps ? warp_totals[lane] : Scan::template identity<A>();
        total = warp_inclusive_scan<Scan>(total);
        if (lane < warps) warp_totals[lane] = total;
      }
      __syncthreads();
      const A prefix = warp == 0 ? carry : Scan::step(carry, warp_totals[warp - 1]);
      if (j < length) store(out + j * out_step, ComputeType<T>(Scan::step(prefix, value)));
      carry = Scan::step(carry, warp_totals[warps - 1]);
      __syncthreads();  // every thread has read warp_totals before the next chunk writes it
    }
  }
}

template <class T, class Scan>
void scan(const ScanLoop& s) {
  const int64_t num_slices = s.slices.numel;
  if (num_slices == 0 || s.length == 0) return;
  const DeviceLoop<2> slices = device_loop<2>(s.slices);
  if (s.dim_strides[1] == 1 && s.length > 32) {
    scan_per_block<T, Scan><<<blocks_for(num_slices, 1), kBlockThreads, 0, current_stream()>>>(
        slices, num_slices, s.length, s.dim_strides[0], s.dim_strides[1]);
  } else {
    scan_per_thread<T, Scan><<<blocks_for(num_slices, kBlockThreads), kBlockThreads, 0, current_stream()>>>(
        slices, num_slices, s.length, s.dim_strides[0], s.dim_strides[1]);
  }
  check_launch("scan");
}

}  // namespace

void register_scan_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      cumsum_op, DeviceType::cuda, [](auto tag) { return &scan<decltype(tag), ScanSum>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      cumprod_op, DeviceType::cuda, [](auto tag) { return &scan<decltype(tag), ScanProduct>; });
}

}  // namespace ember::cuda
