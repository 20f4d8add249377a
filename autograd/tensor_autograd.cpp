// The autograd methods of Tensor (declared in core/tensor.h).
#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/function.h"
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

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  EMBER_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  if (is_leaf()) {
    meta_of(*this).leaf_hooks.push_back(std::move(hook));
  } else {
    grad_fn()->pre_hooks.emplace_back(impl()->autograd->output_nr, std::move(hook));
  }
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate a gradient");
  AutogradMeta& meta = meta_of(*this);
  uint64_t id = meta.next_hook_id++;
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
