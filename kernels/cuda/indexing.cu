// CUDA indexing kernels: gather, scatter_add, index_select, embedding, tril,
// triu and one_hot (masked_fill is element-wise and lives with its family).
// Every index read is checked on the device; a bad one is written to the
// scratch flag, nothing is written out of bounds, and the host raises the CPU
// kernels' error after the kernel (Note [Index errors on the GPU]). Kernels
// that only move elements are compiled once per element size, not per dtype.
// scatter_add gives the CPU's sums bit for bit (Note [Deterministic
// scatter_add on the GPU]). Tests: tests/cuda/test_cuda_indexing.cpp.
#include <algorithm>
#include <string>
#include <type_traits>

#include "core/ops/indexing_kernels.h"
#include "core/tensor.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

// ---- Index checks ------------------------------------------------------------

// The first bad index a thread found; zeroed by scratch_flag before the kernel.
struct IndexError {
  int found;
  int64_t index;
};

// Whether `index` lies in [0, size); reports it when not (the first reporter wins).
__device__ __forceinline__ bool in_range(int64_t index, int64_t size, IndexError* error) {
  if (index >= 0 && index < size) return true;
  if (atomicCAS(&error->found, 0, 1) == 0) error->index = index;
  return false;
}

// The scratch flag of one kernel's index checks.
class IndexCheck {
 public:
  IndexCheck() : error_(static_cast<IndexError*>(scratch_flag(sizeof(IndexError)))) {}
  IndexError* device() const { return error_; }
  // Throws the CPU kernels' error if a thread reported a bad index: after the
  // kernel, or at the next synchronisation in strict mode (check_scratch_flag).
  void throw_if_bad(std::string_view op, int64_t dim_size) const {
    check_scratch_flag(sizeof(IndexError), [op = std::string(op), dim_size](const void* flag) {
      const IndexError& error = *static_cast<const IndexError*>(flag);
      if (error.found) throw_index_out_of_range(op, error.index, dim_size);
    });
  }

 private:
  IndexError* error_;
};

// ---- Elements moved as bits ------------------------------------------------

// The unsigned integer of T's size: the kernels that only copy elements are
// registered for each dtype as their instantiation for its size.
template <class T>
using Bits = std::conditional_t<
    sizeof(T) == 1, uint8_t,
    std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// ---- index_select, embedding -------------------------------------------------

struct RowSizes {
  int64_t outer, input_rows, num_indices, row_size;
};

// One thread per output element: out[o, j, k] = input[o, index[j], k].
template <class W, class I>
__global__ void select_rows_kernel(W* out, const W* input, const I* index, RowSizes sizes, IndexError* error) {
  const int64_t total = sizes.outer * sizes.num_indices * sizes.row_size;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = e % sizes.row_size, r = e / sizes.row_size;
    const int64_t j = r % sizes.num_indices, o = r / sizes.num_indices;
    const int64_t row = int64_t(index[j]);
    if (in_range(row, sizes.input_rows, error)) out[e] = input[(o * sizes.input_rows + row) * sizes.row_size + k];
  }
}

template <class W>
void select_rows(const RowSelect& s) {
  const RowSizes sizes{s.outer, s.input_rows, s.num_indices, s.row_size};
  const int64_t total = s.outer * s.num_indices * s.row_size;
  const std::string op(s.op);
  IndexCheck check;
  visit_index_dtype(s.index_dtype, [&]<class I>() {
    select_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<W*>(s.out), static_cast<const W*>(s.input), static_cast<const I*>(s.index), sizes,
        check.device());
  });
  check_launch(op.c_str());
  check.throw_if_bad(op, s.input_rows);
}

// ---- gather, scatter_add -----------------------------------------------------

// An AlongDim's steps along dim: operands (out, index, other), strides in elements.
struct Steps {
  int64_t length, dim_size;
  int64_t out, index, other;
};

Steps steps_of(const AlongDim& a) {
  return {a.length, a.dim_size, a.dim_strides[0], a.dim_strides[1], a.dim_strides[2]};
}

// One thread per output element. Consecutive threads take consecutive steps
// along dim when that is out's dense dim, else consecutive slices.
template <class W, class I>
__global__ void gather_kernel(DeviceLoop<3> slices, int64_t num_slices, Steps steps, bool dim_innermost,
                              IndexError* error) {
  const int64_t total = num_slices * steps.length;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = dim_innermost ? e / steps.length : e % num_slices;
    const int64_t j = dim_innermost ? e % steps.length : e / num_slices;
    char* p[3];
    slices.pointers(i, p);
    const int64_t at = int64_t(reinterpret_cast<const I*>(p[1])[j * steps.index]);
    if (in_range(at, steps.dim_size, error))
      reinterpret_cast<W*>(p[0])[j * steps.out] = reinterpret_cast<const W*>(p[2])[at * steps.other];
  }
}

template <class W>
void gather(const AlongDim& a) {
  const int64_t total = a.slices.numel * a.length;
  IndexCheck check;
  visit_index_dtype(a.slices.dtypes[1], [&]<class I>() {
    gather_kernel<W, I><<<blocks_for(total, kThreads), kThreads, 0, current_stream()>>>(
        device_loop<3>(a.slices), a.slices.numel, steps_of(a), a.dim_strides[0] == 1, check.device());
  });
  check_launch("gather");
  check.throw_if_bad("gather", a.dim_size);
}

// arith::add on the device: integers wrap, bool is "or", floats add in the
// compute type (the store rounds 16-bit ones, as the CPU does after every add).
template <class T>
__device__ __forceinline__ ComputeType<T> add(ComputeType<T> a, ComputeType<T> b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else return a + b;
}

// Thread (slice i, owner c) walks slice i's whole index in increasing step
// order and adds the steps whose target t has t % owners == c; owners is a
// power of two. Each output element has one owner thread, which adds into it
// in the CPU's order (Note [Deterministic scatter_add on the GPU]).
template <class T, class I>
__global__ void scatter_add_kernel(DeviceLoop<3> slices, int64_t num_slices, Steps steps, int64_t owners,
                                   IndexError* error) {
  const int64_t owner = blockIdx.y;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < num_slices;
       i += int64_t(gridDim.x) * blockDim.x) {
    char* p[3];
    slices.pointers(i, p);
    T* out = reinterpret_cast<T*>(p[0]);
    const I* index = reinterpret_cast<const I*>(p[1]);
    const T* src = reinterpret_cast<const T*>(p[2]);
    for (int64_t j = 0; j < steps.length; ++j) {
      const int64_t at = int64_t(index[j * steps.index]);
      if (!in_range(at, steps.dim_size, error) || (at & (owners - 1)) != owner) continue;
      T* target = out + at * steps.out;
      store(target, add<T>(load(target), load(src + j * steps.other)));
    }
  }
}

// Owners per slice: enough threads to fill the GPU, but no more than the
// targets a slice can reach or the steps it walks (each owner reads them all).
int64_t owners_for(int64_t num_slices, int64_t length, int64_t dim_size) {
  constexpr int64_t kWantedThreads = 65536, kMaxOwners = 1024;
  const int64_t limit = std::min({dim_size, length, kWantedThreads / num_slices, kMaxOwners});
  int64_t owners = 1;
  while (owners * 2 <= limit) owners *= 2;
  return owners;
}

template <class T>
void scatter_add(const AlongDim& a) {
  const int64_t num_slices = a.slices.numel, owners = owners_for(num_slices, a.length, a.dim_size);
  // Few slices make small blocks: a warp's threads share an owner, so they
  // take the same branches when the index is the same across slices.
  const int threads = int(std::min<int64_t>(kThreads, (num_slices + 31) / 32 * 32));
  const dim3 grid(blocks_for(num_slices, threads), unsigned(owners));
  IndexCheck check;
  visit_index_dtype(a.slices.dtypes[1], [&]<class I>() {
    scatter_add_kernel<T, I><<<grid, threads, 0, current_stream()>>>(device_loop<3>(a.slices), num_slices,
                                                                      steps_of(a), owners, check.device());
  });
  check_launch("scatter_add");
  check.throw_if_bad("scatter_add", a.dim_size);
}

// ---- tril, triu ---------------------------------------------------------------

template <class W>
__global__ void triangle_kernel(W* out, const W* input, int64_t numel, int64_t rows, int64_t cols, int64_t diagonal,
                                bool upper) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < numel; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % cols, r = (e / cols) % rows;
    const bool keep = upper ? c - r >= diagonal : c - r <= diagonal;
    out[e] = keep ? input[e] : W(0);  // zero bits: +0, or false
  }
}

template <class W, bool upper>
void triangle(const Tensor& out, const Tensor& input, int64_t diagonal) {
  const int64_t numel = out.numel();
  triangle_kernel<<<blocks_for(numel, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<W*>(out.data_ptr()), static_cast<const W*>(input.data_ptr()), numel, out.size(-2), out.size(-1),
      diagonal, upper);
  check_launch(upper ? "triu" : "tril");
}

// ---- one_hot --------------------------------------------------------------------

// One thread per (index i, class c) of a [num_indices, width] grid; width is
// the number of classes, or 1 when there are none, so that every index is
// still checked (and, with no class to be in, reported).
template <class I>
__global__ void one_hot_kernel(int64_t* out, const I* index, int64_t num_indices, int64_t classes,
                               IndexError* error) {
  const int64_t width = classes > 0 ? classes : 1, total = num_indices * width;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hot = int64_t(index[e / width]);
    if (in_range(hot, classes, error)) out[e] = e % width == hot ? 1 : 0;
  }
}

template <class I>
void one_hot(const Tensor& out, const Tensor& indices) {
  const int64_t classes = out.size(1), num_indices = indices.numel();
  const int64_t total = num_indices * (classes > 0 ? classes : 1);
  IndexCheck check;
  one_hot_kernel<<<blocks_for(total, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<int64_t*>(out.data_ptr()), static_cast<const I*>(indices.data_ptr()), num_indices, classes,
      check.device());
  check_launch("one_hot");
  check.throw_if_bad("one_hot", classes);
}

}  // namespace

void register_indexing_kernels() {
  auto rows = [](auto tag) { return &select_rows<Bits<decltype(tag)>>; };
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(index_select_op, DeviceType::cuda, rows);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(embedding_op, DeviceType::cuda, rows);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      gather_op, DeviceType::cuda, [](auto tag) { return &gather<Bits<decltype(tag)>>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      scatter_add_op, DeviceType::cuda, [](auto tag) { return &scatter_add<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      tril_op, DeviceType::cuda, [](auto tag) { return &triangle<Bits<decltype(tag)>, false>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      triu_op, DeviceType::cuda, [](auto tag) { return &triangle<Bits<decltype(tag)>, true>; });
  register_for<int32_t, int64_t>(one_hot_op, DeviceType::cuda, [](auto tag) { return &one_hot<decltype(tag)>; });
}

}  // namespace ember::cuda
