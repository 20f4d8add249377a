// The node at the end of every path to a leaf that requires grad: it adds the
// incoming gradient into the leaf's `.grad`, then fires the leaf's
// post-accumulate hooks (where DDP starts its bucket all-reduces).
#pragma once

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
};

// The leaf's accumulator, made on first use and shared by all later uses.
std::shared_ptr<Node> accumulator_for(const Tensor& leaf);

}  // namespace ember::autograd
