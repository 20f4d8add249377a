// The autograd methods of Tensor (declared in core/tensor.h).
#include <algorithm>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "core/hook_list.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"

namespace ember {

namespace {
AutogradMeta& meta_of(const Tensor& t) {
  if (!t.impl()->autograd) t.impl()->autograd = std::make_shared<AutogradMeta>();
  return *t.impl()->autograd;
}
const std::shared_ptr<autograd::Node> kNoNode;
}  // namespace

Tensor& Tensor::requires_grad_(bool requires_grad) {
  // A non-leaf requires grad already: asking for it again changes nothing (PyTorch allows it).
  if (requires_grad && !is_leaf()) return *this;
  EMBER_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (this one has grad_fn {}); use "
                         "detach() first",
              grad_fn()->name());
  EMBER_CHECK(!requires_grad || is_floating(dtype()),
              "requires_grad_: only floating point tensors can require gradients, got {}", dtype());
  impl()->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  if (impl()->view_base && requires_grad()) autograd::refresh_view_history(*this);
  return impl()->autograd ? impl()->autograd->grad_fn : kNoNode;
}

Tensor Tensor::detach() const { return Tensor::make(storage(), dtype(), shape(), strides(), offset()); }

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

uint64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  EMBER_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  const uint64_t id = next_hook_id();
  if (is_leaf()) {
    meta_of(*this).leaf_hooks.emplace_back(id, std::move(hook));
    return id;
  }
  const std::shared_ptr<autograd::Node>& history = grad_fn();
  AutogradMeta& meta = meta_of(*this);
  history->pre_hooks.push_back({meta.output_nr, std::move(hook), id});
  auto same = [&](const std::weak_ptr<autograd::Node>& hooked) { return hooked.lock() == history; };
  if (std::find_if(meta.hooked_histories.begin(), meta.hooked_histories.end(), same) == meta.hooked_histories.end())
    meta.hooked_histories.push_back(history);
  return id;
}

bool Tensor::remove_hook(uint64_t id) const {
  AutogradMeta* meta = impl()->autograd.get();
  if (!meta) return false;
  if (std::erase_if(meta->leaf_hooks, [id](const auto& entry) { return entry.first == id; }) > 0) return true;
  for (const std::weak_ptr<autograd::Node>& hooked : meta->hooked_histories)
    if (std::shared_ptr<autograd::Node> history = hooked.lock())
      if (std::erase_if(history->pre_hooks, [id](const autograd::OutputHook& entry) { return entry.id == id; }) > 0)
        return true;
  return false;
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate a gradient");
  AutogradMeta& meta = meta_of(*this);
  const uint64_t id = next_hook_id();
  meta.post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

bool Tensor::remove_post_accumulate_grad_hook(uint64_t id) const {
  AutogradMeta* meta = impl()->autograd.get();
  auto has_id = [id](const auto& entry) { return entry.first == id; };
  return meta && std::erase_if(meta->post_accumulate_hooks, has_id) > 0;
}

void Tensor::retain_grad() const {
  EMBER_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  if (is_leaf() || meta_of(*this).retains_grad) return;
  grad_fn();  // a view's history is brought up to date first
  meta_of(*this).retains_grad = true;
  autograd::retain_grad_at_history(*this);
}

}  // namespace ember
