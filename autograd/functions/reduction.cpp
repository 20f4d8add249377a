// Gradients of the reduction family (forward: core/ops/reduction.cpp).
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction_kernels.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// The reduced dims of a reduction over `dims` of an input of `ndim` dims,
// wrapped and sorted (all dims when the list is empty).
std::vector<int64_t> reduced_dims(const Dims& dims, int ndim) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int d = 0; d < ndim; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, "reduction"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// g of the reduced shape, viewed with the reduced dims back as size 1 and
// expanded to the input's shape: the gradient of every input element.
Tensor expand_reduced(const Tensor& g, const std::vector<int64_t>& dims, bool keepdim, const Shape& input_shape) {
  Tensor out = g;
  if (!keepdim)
    for (int64_t d : dims) out = out.unsqueeze(d);
  return out.expand(input_shape);
}

}  // namespace

void register_reduction_functions() {
  // sum: out = sum over dims of a  ->  da = g expanded back over the reduced dims
  sum_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    Shape shape = input(r, 0).shape();
    auto dims = reduced_dims(p.dims, shape.ndim());
    record_formula(r, "SumBackward", {}, [dims, keepdim = p.keepdim, shape](const Saved&, const Tensor& g) {
      return Grads{expand_reduced(g, dims, keepdim, shape)};
    });
  });
  // mean: out = sum / n  ->  da = g / n expanded back
  mean_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    Shape shape = input(r, 0).shape();
    auto dims = reduced_dims(p.dims, shape.ndim());
    int64_t count = 1;
    for (int64_t d : dims) count *= shape[int(d)];
    record_formula(r, "MeanBackward", {}, [dims, keepdim = p.keepdim, shape, count](const Saved&, const Tensor& g) {
      return Grads{expand_reduced(g / double(count), dims, keepdim, shape)};
    });
  });
}

}  // namespace ember::autograd
