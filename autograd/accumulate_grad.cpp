// Accumulating into leaves' .grad (see accumulate_grad.h).
#include "autograd/accumulate_grad.h"

#include "core/ops/elementwise.h"
#include "core/ops/views.h"

namespace ember::autograd {

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  // Accumulators run as soon as they are ready, so post-accumulate hooks fire
  // in backward order (DDP launches buckets from them).
  sequence_nr = UINT64_MAX;
  outlives_graph = true;
  inputs.push_back({leaf_->shape, leaf_->dtype});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grad_outputs) {
  Tensor grad = std::move(grad_outputs[0]);
  Tensor leaf(leaf_);
  AutogradMeta* meta = leaf_->autograd.get();
  if (meta) {
    for (const TensorHook& hook : meta->leaf_hooks) {
      Tensor replaced = hook(grad);
      if (replaced.defined()) grad = replaced;
    }
  }
  if (!grad.defined()) return {};
  if (!leaf_->grad) {
    // A fresh buffer, so the leaf's .grad never aliases a tensor the user holds.
    leaf_->grad = clone(grad).impl_ptr();
  } else {
    // In place: .grad may be a view into a bucket someone else owns (DDP).
    Tensor existing(leaf_->grad);
    add_(existing, grad);
  }
  if (meta)
    for (const auto& hook : meta->post_accumulate_hooks) hook(leaf);
  return {};
}

std::shared_ptr<Node> accumulator_for(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  std::shared_ptr<Node> node = impl->autograd->accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    impl->autograd->accumulator = node;
  }
  return node;
}

}  // namespace ember::autograd
