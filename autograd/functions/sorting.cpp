// Gradients of sort and topk (forward: core/ops/sorting.cpp). The values are
// the input's elements moved to new positions, so the gradient moves back
// through the indices; the indices get none. Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/indexing.h"
#include "core/ops/sorting_kernels.h"

namespace ember::autograd {
namespace {

// values = a gathered at indices along dim  ->  da = zeros with g scattered to the indices
// (a sort's indices are a permutation and a topk's distinct, so the adds never meet)
void record_scatter_back(const GradRecord& r, const char* name) {
  Shape shape = input(r, 0).shape();
  int64_t dim = params<int64_t>(r);
  record_formula(r, name, {output(r, 1)}, [=](const std::vector<Tensor>& s, const Tensor& g) {
    if (shape.ndim() == 0) return std::vector<Tensor>{g};
    return std::vector<Tensor>{scatter_add(zeros(shape, {.dtype = g.dtype(), .device = g.device()}), dim, s[0], g)};
  });
}

}  // namespace

void register_sorting_functions() {
  sort_grad.set_recorder([](const GradRecord& r) { record_scatter_back(r, "SortBackward"); });
  topk_grad.set_recorder([](const GradRecord& r) { record_scatter_back(r, "TopkBackward"); });
}

}  // namespace ember::autograd
