// Reference sort and topk: the definition of the order, counted naively. An
// element's position in its sorted row is the number of elements of the row
// that come before it (sorting_detail::element_before), so no sorting
// algorithm is involved; the fast kernels are tested against this.
#include "core/ops/sorting_kernels.h"
#include "core/tensor.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

using sorting_detail::element_before;

template <class T>
void sort_kernel(const SortProblem& p) {
  using V = ComputeType<T>;
  const T* input = static_cast<const T*>(p.input);
  T* values = static_cast<T*>(p.values);
  for (int64_t row = 0; row < p.rows; ++row) {
    const T* x = input + row * p.length;
    for (int64_t i = 0; i < p.length; ++i) {
      int64_t position = 0;
      for (int64_t j = 0; j < p.length; ++j) position += element_before(V(x[j]), j, V(x[i]), i, p.descending);
      if (position >= p.count) continue;
      values[row * p.count + position] = x[i];
      p.indices[row * p.count + position] = i;
    }
  }
}

}  // namespace

void register_sorting_kernels() {
  auto make = [](auto tag) { return &sort_kernel<decltype(tag)>; };
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(sort_op, make);
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(topk_op, make);
}

}  // namespace ember::reference
