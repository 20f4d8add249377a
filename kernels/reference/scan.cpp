// Reference scan kernels: each slice walked one element at a time. The oracle
// for kernels/cpu/scan.cpp and kernels/cuda/scan.cu (tests/core/test_scan.cpp).
#include "core/ops/scan_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class T, class Scan>
void scan(const ScanLoop& s) {
  using Acc = reduction_types::Accumulator<T>;
  for_each_row(s.slices, 0, s.slices.numel, [&](char** p, const int64_t* strides, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      T* out = reinterpret_cast<T*>(p[0]) + i * strides[0];
      const T* in = reinterpret_cast<const T*>(p[1]) + i * strides[1];
      Acc accumulated = Scan::template identity<Acc>();
      for (int64_t j = 0; j < s.length; ++j) {
        accumulated = Scan::step(accumulated, Acc(in[j * s.dim_strides[1]]));
        out[j * s.dim_strides[0]] = T(accumulated);
      }
    }
  });
}

}  // namespace

void register_scan_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      cumsum_op, [](auto tag) { return &scan<decltype(tag), ScanSum>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      cumprod_op, [](auto tag) { return &scan<decltype(tag), ScanProduct>; });
}

}  // namespace ember::reference
