// Gradients of flip and roll (forward: core/ops/reorder.cpp): each moves
// elements, so its gradient moves them back. repeat_interleave needs none of
// its own (its composites' gradients serve). Tests: the gradcheck table
// (tests/autograd/test_gradcheck.cpp) and tests/autograd/test_scan_grads.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/reorder.h"

namespace ember {
extern GradSlot flip_grad, roll_grad;
}

namespace ember::autograd {

void register_reorder_functions() {
  // flip: out = a reversed along dims  ->  da = g reversed along the same dims
  flip_grad.set_recorder([](const GradRecord& r) {
    Dims dims = params<Dims>(r);
    record_formula(r, "FlipBackward", {}, [dims](const std::vector<Tensor>&, const Tensor& g) {
      return std::vector<Tensor>{flip(g, dims)};
    });
  });
  // roll: out = a shifted by shifts along dims (or flattened)  ->  da = g shifted back by -shifts
  roll_grad.set_recorder([](const GradRecord& r) {
    // (shifts, dims) as core/ops/reorder.cpp records them: one total shift per
    // distinct dim, or one shift and no dims for the flattened form.
    const auto& rolled = params<std::pair<std::vector<int64_t>, std::vector<int64_t>>>(r);
    std::vector<int64_t> back, dims = rolled.second;
    for (int64_t shift : rolled.first) back.push_back(-shift);
    record_formula(r, "RollBackward", {}, [back, dims](const std::vector<Tensor>&, const Tensor& g) {
      return std::vector<Tensor>{roll(g, back, dims)};
    });
  });
}

}  // namespace ember::autograd
