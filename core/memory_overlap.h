// Memory overlap between the tensor an op writes and the tensors it reads,
// for the in-place arithmetic and copy_ (core/ops/elementwise.cpp,
// core/ops/copy.cpp). Tests: tests/core/test_copy.cpp.
#pragma once

#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace ember {

// What copy_ and the in-place arithmetic check too: a target whose elements
// share memory (a dimension of size > 1 and stride 0, as expand makes) would
// keep one write of several, chosen by the kernel's order. PyTorch refuses it
// too; fill_, which writes one value everywhere, allows it. An empty target
// has no elements to collide (PyTorch accepts `zeros({1}).expand({0, 3})`).
inline void check_no_internal_overlap(const Tensor& target, std::string_view op) {
  if (target.numel() == 0) return;
  for (int64_t d = 0; d < target.dim(); ++d)
    EMBER_CHECK(target.stride(d) != 0 || target.size(d) <= 1,
                "{}: the tensor written to (shape {}, strides {}) has several elements in one memory location (dim {} "
                "has stride 0, as expand makes), so the write would keep one of them; write into a clone() or "
                "contiguous() of it",
                op, target.shape(), target.strides(), d);
}

// Whether `source` may share memory with `target` other than element for
// element, so that a kernel writing target would read some of source's
// elements after writing them, in the kernel's own order (x.add_(x[3]),
// x[1:].copy_(x[:-1])): the op fuzzer found x.add_(x[3]) giving 0.625 where
// reading first gives 2.25. PyTorch refuses such calls; ember's callers read
// such a source from a copy, so the result is as if the source were read
// before the write (NumPy's rule). The same elements in the same places
// (x.add_(x)) are each read before written and need no copy. Conservative:
// byte ranges that intersect count, even when their elements interleave.
// Addresses are compared whatever the storages: two from_blob tensors over
// one buffer share memory without sharing a storage (PyTorch compares only
// views of one storage, and reads such a source after writing it).
inline bool source_overlaps_target(const Tensor& target, const Tensor& source) {
  if (source.device() != target.device() || target.numel() == 0 || source.numel() == 0) return false;
  auto bytes = [](const Tensor& t) {
    const char* first = static_cast<const char*>(t.data_ptr());
    const char* last = first;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t extent = (t.size(d) - 1) * t.stride(d) * t.element_size();
      (extent < 0 ? first : last) += extent;
    }
    return std::pair{first, last + t.element_size()};
  };
  auto [target_first, target_end] = bytes(target);
  auto [source_first, source_end] = bytes(source);
  if (source_end <= target_first || target_end <= source_first) return false;
  if (source.data_ptr() != target.data_ptr() || source.dtype() != target.dtype() || source.dim() > target.dim())
    return true;
  // Broadcast alignment: source's dims line up with target's last ones.
  const int64_t skipped = target.dim() - source.dim();
  for (int64_t d = 0; d < target.dim(); ++d) {
    if (target.size(d) == 1) continue;
    if (d < skipped || source.size(d - skipped) != target.size(d) || source.stride(d - skipped) != target.stride(d))
      return true;
  }
  return false;
}

}  // namespace ember
