// Reference indexing kernels: one element at a time, every index checked.
// The oracle for kernels/cpu/indexing.cpp (tests/core/test_indexing.cpp).
#include "core/arithmetic.h"
#include "core/ops/indexing_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class T>
void select_rows(const RowSelect& s) {
  visit_index_dtype(s.index_dtype, [&]<class I>() {
    const I* index = static_cast<const I*>(s.index);
    const T* input = static_cast<const T*>(s.input);
    T* out = static_cast<T*>(s.out);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.num_indices; ++j) {
        int64_t row = checked_index(index[j], s.input_rows, s.op);
        for (int64_t k = 0; k < s.row_size; ++k)
          out[(o * s.num_indices + j) * s.row_size + k] = input[(o * s.input_rows + row) * s.row_size + k];
      }
    }
  });
}

// Visits every (position in a slice, step along dim) of an AlongDim with the
// operands' element pointers and the index read there.
template <class T, class F>
void for_each_along(const AlongDim& a, std::string_view op, F f) {
  visit_index_dtype(a.slices.dtypes[1], [&]<class I>() {
    for_each_row(a.slices, 0, a.slices.numel, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < a.length; ++j) {
          T* first = reinterpret_cast<T*>(p[0]) + i * s[0];
          const I* index = reinterpret_cast<const I*>(p[1]) + i * s[1] + j * a.dim_strides[1];
          T* other = reinterpret_cast<T*>(p[2]) + i * s[2];
          f(first, other, j, checked_index(*index, a.dim_size, op));
        }
      }
    });
  });
}

template <class T>
void gather(const AlongDim& a) {
  for_each_along<T>(a, "gather", [&](T* out, const T* input, int64_t j, int64_t index) {
    out[j * a.dim_strides[0]] = input[index * a.dim_strides[2]];
  });
}

template <class T>
void scatter_add(const AlongDim& a) {
  for_each_along<T>(a, "scatter_add", [&](T* out, const T* src, int64_t j, int64_t index) {
    T& target = out[index * a.dim_strides[0]];
    target = arith::add(target, src[j * a.dim_strides[2]]);
  });
}

template <class T>
void masked_fill(const ElementwiseLoop& loop, const Scalar& value) {
  const T v = value.to<T>();
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      bool masked = reinterpret_cast<const bool*>(p[2])[i * s[2]];
      reinterpret_cast<T*>(p[0])[i * s[0]] = masked ? v : reinterpret_cast<const T*>(p[1])[i * s[1]];
    }
  });
}

template <class T, bool upper>
void triangle(const Tensor& out, const Tensor& input, int64_t diagonal) {
  const int64_t rows = out.size(-2), cols = out.size(-1), matrices = out.numel() / (rows * cols);
  const T* in = static_cast<const T*>(input.data_ptr());
  T* result = static_cast<T*>(out.data_ptr());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        int64_t at = (m * rows + r) * cols + c;
        bool keep = upper ? c - r >= diagonal : c - r <= diagonal;
        result[at] = keep ? in[at] : T(0);
      }
    }
  }
}

template <class I>
void one_hot(const Tensor& out, const Tensor& indices) {
  const int64_t classes = out.size(1);
  const I* index = static_cast<const I*>(indices.data_ptr());
  int64_t* result = static_cast<int64_t*>(out.data_ptr());
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t hot = checked_index(index[i], classes, "one_hot");
    for (int64_t c = 0; c < classes; ++c) result[i * classes + c] = c == hot ? 1 : 0;
  }
}

}  // namespace

void register_indexing_kernels() {
  auto rows = [](auto tag) { return &select_rows<decltype(tag)>; };
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(index_select_op, rows);
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(embedding_op, rows);
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      gather_op, [](auto tag) { return &gather<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      scatter_add_op, [](auto tag) { return &scatter_add<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      masked_fill_op, [](auto tag) { return &masked_fill<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      tril_op, [](auto tag) { return &triangle<decltype(tag), false>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      triu_op, [](auto tag) { return &triangle<decltype(tag), true>; });
  register_reference_for<int32_t, int64_t>(one_hot_op, [](auto tag) { return &one_hot<decltype(tag)>; });
}

}  // namespace ember::reference
