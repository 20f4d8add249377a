// The node at the end of every path to a leaf that requires grad: it adds the
// incoming gradient into the leaf's `.grad`, then fires the leaf's
// post-accumulate hooks (where DDP starts its bucket all-reduces).
#pragma once

#include <mutex>

#include "autograd/node.h"

namespace ember::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
  std::mutex mutex_;  // held while .grad is written
};

// `grad` through the tensor hooks registered on `leaf` (register_hook on a
// leaf), in order: what accumulates into its .grad, and what autograd::grad
// returns for it.
Tensor apply_leaf_hooks(const TensorImpl& leaf, Tensor grad);

// The leaf's accumulator, made on first use and shared by all later uses.
std::shared_ptr<Node> accumulator_for(const Tensor& leaf);

// What zero_grad (Module's and Optimizer's) does to one leaf's `.grad`: drops it
// (set_to_none), or cuts it from any graph (a create_graph gradient) and zeroes it
// in place, as PyTorch does.
void zero_grad(const Tensor& leaf, bool set_to_none);

}  // namespace ember::autograd
