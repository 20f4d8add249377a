// CPU indexing kernels. Row selection copies whole contiguous rows with
// memcpy; gather and scatter_add walk the index slice by slice with the dense
// inner dim innermost. Work is split across threads by rows or slices above
// kParallelGrain elements; scatter_add never splits a slice, so each output
// element accumulates in the same order as the reference on any thread count.
#include <algorithm>
#include <cstring>

#include "core/arithmetic.h"
#include "core/ops/indexing_kernels.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

// Items per thread chunk so a chunk holds about kParallelGrain elements.
int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work_per_item, 1));
}

template <class T>
void select_rows(const RowSelect& s) {
  visit_index_dtype(s.index_dtype, [&]<class I>() {
    const I* index = static_cast<const I*>(s.index);
    const T* input = static_cast<const T*>(s.input);
    T* out = static_cast<T*>(s.out);
    const size_t row_bytes = size_t(s.row_size) * sizeof(T);
    parallel_for(0, s.outer * s.num_indices, grain_for(s.row_size), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t o = r / s.num_indices, j = r % s.num_indices;
        int64_t row = checked_index(index[j], s.input_rows, s.op);
        std::memcpy(out + r * s.row_size, input + (o * s.input_rows + row) * s.row_size, row_bytes);
      }
    });
  });
}

// Runs body(out, index, other, slice_strides, n) over the slices of an
// AlongDim in parallel; a slice (a run of `length` steps along dim) is never split.
template <class T, class F>
void parallel_slices(const AlongDim& a, F body) {
  visit_index_dtype(a.slices.dtypes[1], [&]<class I>() {
    parallel_rows(
        a.slices,
        [&](char** p, const int64_t* s, int64_t n) {
          body(reinterpret_cast<T*>(p[0]), reinterpret_cast<const I*>(p[1]), reinterpret_cast<T*>(p[2]), s, n);
        },
        grain_for(a.length));
  });
}

// Visits f(i, j) for i in [0, n) across a row of slices and j in [0, length)
// along dim, with whichever index is dense innermost. Both orders visit each i
// in increasing j, which is all scatter_add's determinism needs.
template <class F>
inline void walk(int64_t n, int64_t length, bool slices_dense, F f) {
  if (slices_dense) {
    for (int64_t j = 0; j < length; ++j)
      for (int64_t i = 0; i < n; ++i) f(i, j);
  } else {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < length; ++j) f(i, j);
  }
}

template <class T>
void gather(const AlongDim& a) {
  const int64_t out_step = a.dim_strides[0], index_step = a.dim_strides[1], input_step = a.dim_strides[2];
  parallel_slices<T>(a, [&](T* out, const auto* index, const T* input, const int64_t* s, int64_t n) {
    walk(n, a.length, s[0] == 1, [&](int64_t i, int64_t j) {
      int64_t at = checked_index(index[i * s[1] + j * index_step], a.dim_size, "gather");
      out[i * s[0] + j * out_step] = input[i * s[2] + at * input_step];
    });
  });
}

template <class T>
void scatter_add(const AlongDim& a) {
  const int64_t out_step = a.dim_strides[0], index_step = a.dim_strides[1], src_step = a.dim_strides[2];
  parallel_slices<T>(a, [&](T* out, const auto* index, const T* src, const int64_t* s, int64_t n) {
    walk(n, a.length, s[2] == 1, [&](int64_t i, int64_t j) {
      int64_t at = checked_index(index[i * s[1] + j * index_step], a.dim_size, "scatter_add");
      T& target = out[i * s[0] + at * out_step];
      target = arith::add(target, src[i * s[2] + j * src_step]);
    });
  });
}

// The dense loop vectorises (a blend) because it moves stored bits rather
// than 16-bit float structs, loads the input unconditionally, reads the mask
// as bytes (GCC 12 vectorises no select on bool) and keeps the fill value in
// a local (one read through the closure would be repeated after every store
// that might alias it).
template <class T>
void masked_fill(const ElementwiseLoop& loop, const Scalar& value) {
  using Bits = StoredBits<T>;
  const Bits fill = std::bit_cast<Bits>(value.to<T>());
  parallel_rows(loop, [fill](char** p, const int64_t* s, int64_t n) {
    const Bits v = fill;
    Bits* out = reinterpret_cast<Bits*>(p[0]);
    const Bits* in = reinterpret_cast<const Bits*>(p[1]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      const uint8_t* mask_bytes = reinterpret_cast<const uint8_t*>(p[2]);
      for (int64_t i = 0; i < n; ++i) {
        const Bits kept = in[i];
        out[i] = mask_bytes[i] ? v : kept;
      }
    } else {
      const bool* mask = reinterpret_cast<const bool*>(p[2]);
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = mask[i * s[2]] ? v : in[i * s[1]];
    }
  });
}

// Each row is a kept run and a zeroed run, whose boundary moves one column per row.
template <class T, bool upper>
void triangle(const Tensor& out, const Tensor& input, int64_t diagonal) {
  const int64_t rows = out.size(-2), cols = out.size(-1);
  const T* in = static_cast<const T*>(input.data_ptr());
  T* result = static_cast<T*>(out.data_ptr());
  parallel_for(0, out.numel() / cols, grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t r = row % rows;
      const T* source = in + row * cols;
      T* target = result + row * cols;
      if (upper) {
        int64_t start = std::clamp<int64_t>(r + diagonal, 0, cols);
        std::fill(target, target + start, T(0));
        std::copy(source + start, source + cols, target + start);
      } else {
        int64_t keep = std::clamp<int64_t>(r + diagonal + 1, 0, cols);
        std::copy(source, source + keep, target);
        std::fill(target + keep, target + cols, T(0));
      }
    }
  });
}

template <class I>
void one_hot(const Tensor& out, const Tensor& indices) {
  const int64_t classes = out.size(1);
  const I* index = static_cast<const I*>(indices.data_ptr());
  int64_t* result = static_cast<int64_t*>(out.data_ptr());
  parallel_for(0, indices.numel(), grain_for(classes), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t hot = checked_index(index[i], classes, "one_hot");
      std::fill(result + i * classes, result + (i + 1) * classes, int64_t(0));
      result[i * classes + hot] = 1;
    }
  });
}

}  // namespace

void register_indexing_kernels() {
  auto rows = [](auto tag) { return &select_rows<decltype(tag)>; };
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(index_select_op, DeviceType::cpu, rows);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(embedding_op, DeviceType::cpu, rows);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      gather_op, DeviceType::cpu, [](auto tag) { return &gather<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      scatter_add_op, DeviceType::cpu, [](auto tag) { return &scatter_add<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      masked_fill_op, DeviceType::cpu, [](auto tag) { return &masked_fill<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      tril_op, DeviceType::cpu, [](auto tag) { return &triangle<decltype(tag), false>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      triu_op, DeviceType::cpu, [](auto tag) { return &triangle<decltype(tag), true>; });
  register_for<int32_t, int64_t>(one_hot_op, DeviceType::cpu, [](auto tag) { return &one_hot<decltype(tag)>; });
}

}  // namespace ember::cpu
