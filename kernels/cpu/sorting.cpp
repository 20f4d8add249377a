// CPU sort and topk: each row's (value, position) pairs are sorted with
// std::sort (sort) or std::partial_sort (topk) under the total order of
// sorting_detail::element_before, which breaks ties by position: the result
// is the stable sort's without std::stable_sort's buffer, and equals the
// reference's rank count. Rows are split across threads above
// kParallelGrain elements; a row is never split.
#include <algorithm>
#include <utility>
#include <vector>

#include "core/ops/sorting_kernels.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

using sorting_detail::element_before;

template <class T, bool kPartial>
void sort_kernel(const SortProblem& p) {
  using V = ComputeType<T>;
  using Entry = std::pair<V, int64_t>;
  const T* input = static_cast<const T*>(p.input);
  T* values = static_cast<T*>(p.values);
  const bool descending = p.descending;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(p.length, 1));
  parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<Entry> entries(size_t(p.length));
    for (int64_t row = begin; row < end; ++row) {
      const T* x = input + row * p.length;
      for (int64_t i = 0; i < p.length; ++i) entries[size_t(i)] = {V(x[i]), i};
      auto before = [descending](const Entry& a, const Entry& b) {
        return element_before(a.first, a.second, b.first, b.second, descending);
      };
      if constexpr (kPartial) std::partial_sort(entries.begin(), entries.begin() + p.count, entries.end(), before);
      else std::sort(entries.begin(), entries.end(), before);
      for (int64_t j = 0; j < p.count; ++j) {
        const int64_t index = entries[size_t(j)].second;
        values[row * p.count + j] = x[index];
        p.indices[row * p.count + j] = index;
      }
    }
  });
}

}  // namespace

void register_sorting_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      sort_op, DeviceType::cpu, [](auto tag) { return &sort_kernel<decltype(tag), false>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      topk_op, DeviceType::cpu, [](auto tag) { return &sort_kernel<decltype(tag), true>; });
}

}  // namespace ember::cpu
