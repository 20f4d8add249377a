// Accumulating into leaves' .grad (see accumulate_grad.h).
#include "autograd/accumulate_grad.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <vector>

#include "autograd/function.h"
#include "core/grad_hook.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

// Whether `impl` is the only holder of its storage. A gradient is often a
// view of a formula's temporary (the transposed product of a Linear weight's
// gradient, a reshaped sum), which the view keeps alive as its view_base and
// nothing else holds: the two then share the storage with nobody.
bool sole_owner(const TensorImpl& impl) {
  if (!impl.view_base) return impl.storage.use_count() == 1;
  const TensorImpl& base = *impl.view_base;
  return impl.view_base.use_count() == 1 && impl.storage.use_count() == 2 && base.storage == impl.storage &&
         !base.requires_grad && !base.autograd && !base.grad;
}

// Whether `grad` can become the leaf's .grad as it is (as PyTorch steals a
// gradient): this is its only handle (no hook, user or saved tensor keeps
// it), no other tensor shares its storage and it covers all of it, it is
// dense in the leaf's dtype, device and shape, and carries no autograd state.
bool stealable(const Tensor& grad, const TensorImpl& leaf) {
  const TensorImpl& impl = *grad.impl();
  return grad.impl_ptr().use_count() == 1 && sole_owner(impl) && impl.contiguous && impl.offset == 0 &&
         impl.storage->nbytes() == size_t(grad.nbytes()) && impl.dtype == leaf.dtype &&
         impl.storage->device() == leaf.storage->device() && impl.shape == leaf.shape && !impl.requires_grad &&
         !impl.autograd && !impl.grad;
}

}  // namespace

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  // Accumulators run as soon as they are ready, so post-accumulate hooks fire
  // in backward order (DDP launches buckets from them).
  sequence_nr = UINT64_MAX;
  outlives_graph = true;
  inputs.push_back({leaf_->shape, leaf_->dtype, leaf_->storage->device()});
}

namespace {

// A hook may remove itself or others (a one-shot hook) or register more: the
// pass runs the hooks registered when it began that are still registered,
// each from a copy, since removing a running hook would destroy it.
void run_post_accumulate_hooks(AutogradMeta& meta, const Tensor& leaf) {
  std::vector<uint64_t> ids;
  for (const auto& entry : meta.post_accumulate_hooks) ids.push_back(entry.first);
  for (uint64_t id : ids) {
    auto registered = std::find_if(meta.post_accumulate_hooks.begin(), meta.post_accumulate_hooks.end(),
                                   [id](const auto& entry) { return entry.first == id; });
    if (registered == meta.post_accumulate_hooks.end()) continue;
    const std::function<void(const Tensor&)> hook = registered->second;
    hook(leaf);
  }
}

}  // namespace

Tensor apply_leaf_hooks(const TensorImpl& leaf, Tensor grad) {
  const AutogradMeta* meta = leaf.autograd.get();
  if (!meta || meta->leaf_hooks.empty() || !grad.defined()) return grad;
  // A hook may register more on this tensor (reallocating the list): they run from the next pass.
  const auto hooks = meta->leaf_hooks;
  for (const auto& entry : hooks) grad = apply_tensor_hook(entry.second, grad);
  return grad;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grad_outputs) {
  Tensor grad = std::move(grad_outputs[0]);
  Tensor leaf(leaf_);
  AutogradMeta* meta = leaf_->autograd.get();
  // A leaf frozen after the forward (requires_grad_(false) before backward)
  // gets no gradient and runs no hook, as in PyTorch: DDP's hooks and the
  // optimizer would otherwise train a parameter the user froze.
  if (!grad.defined() || !leaf.requires_grad()) return {};
  grad = apply_leaf_hooks(*leaf_, std::move(grad));
  // Backward threads that share a leaf take turns at its .grad.
  std::unique_lock lock(mutex_);
  if (leaf_->grad) {
    // A .grad the user set (set_grad) is added to, never broadcast into.
    const TensorImpl& existing = *leaf_->grad;
    EMBER_CHECK(existing.shape == leaf_->shape && existing.dtype == leaf_->dtype &&
                    existing.storage->device() == leaf_->storage->device(),
                "backward: the leaf's .grad is {} {} on {} but the leaf is {} {} on {}; a .grad given with set_grad "
                "must be like its tensor",
                existing.shape, existing.dtype, existing.storage->device(), leaf_->shape, leaf_->dtype,
                leaf_->storage->device());
  }
  if (!leaf_->grad) {
    // .grad must never alias a tensor someone else holds: a gradient nothing
    // else references is taken over, any other is copied into a fresh buffer.
    if (stealable(grad, *leaf_)) {
      grad.impl()->view_base.reset();  // .grad is no view: the base, held by nothing else, goes
      leaf_->grad = grad.impl_ptr();
    } else {
      leaf_->grad = clone(grad).impl_ptr();
    }
  } else if (grad_mode_enabled()) {
    // create_graph: the sum is recorded, and a .grad the caller may hold (a
    // gradient penalty's input) is left as it was, as PyTorch does.
    leaf_->grad = (Tensor(leaf_->grad) + grad).impl_ptr();
  } else {
    // In place: .grad may be a view into a bucket someone else owns (DDP).
    Tensor existing(leaf_->grad);
    add_(existing, grad);
  }
  lock.unlock();
  if (meta && !meta->post_accumulate_hooks.empty()) run_post_accumulate_hooks(*meta, leaf);
  return {};
}

std::shared_ptr<Node> accumulator_for(const Tensor& leaf) {
  // Two backward passes on threads of their own may meet at a leaf first used by both.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  TensorImpl* impl = leaf.impl();
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  std::shared_ptr<Node> node = impl->autograd->accumulator.lock();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    impl->autograd->accumulator = node;
  }
  return node;
}

void zero_grad(const Tensor& leaf, bool set_to_none) {
  NoGradGuard no_grad;
  Tensor grad = leaf.grad();
  if (!grad.defined()) return;
  if (set_to_none) {
    leaf.set_grad(Tensor());
    return;
  }
  if (grad.requires_grad() || grad.grad_fn()) {
    grad = grad.detach();
    leaf.set_grad(grad);
  }
  grad.fill_(0);
}

}  // namespace ember::autograd
