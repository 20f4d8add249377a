// Wiring nodes into the graph, saved tensors, views' histories, and the
// formula node.
#include "autograd/function.h"

#include <atomic>

#include "autograd/accumulate_grad.h"
#include "autograd/saved_tensor_hooks.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

bool has_history(const TensorImpl& impl) { return impl.autograd && impl.autograd->grad_fn; }

// What the innermost pack hook keeps of `t` instead of its values, or null
// (no hook, or the hook declined): Note [Saved tensor hooks].
std::shared_ptr<PackedTensor> pack(const Tensor& t) {
  const PackHook* hook = current_pack_hook();
  return hook ? (*hook)(t) : nullptr;
}
}  // namespace

SavedTensor::SavedTensor(const Tensor& t) : defined_(t.defined()) {
  if (!defined_) return;
  packed_ = pack(t);
  if (!packed_) data_ = t.detach();
  version_ = t.version();
  if (!t.requires_grad()) return;
  if (const std::shared_ptr<Node>& grad_fn = t.grad_fn()) {
    grad_fn_ = grad_fn;
    output_nr_ = t.impl()->autograd->output_nr;
  } else {
    leaf_ = t.impl_ptr();
  }
}

SavedTensor::SavedTensor(const Tensor& output, int output_nr)
    : packed_(pack(output)), version_(output.version()), output_nr_(output_nr), is_output_(true), defined_(true) {
  if (!packed_) data_ = output.detach();
}

void SavedTensor::release() {
  data_ = Tensor();
  packed_.reset();
  grad_fn_.reset();
  leaf_.reset();
  released_ = true;
}

Tensor SavedTensor::unpack(std::string_view op, Node* owner) const {
  EMBER_CHECK(!released_,
              "{}: trying to backward through the graph a second time (its saved tensors were freed after the first "
              "backward); pass retain_graph=true to the first backward to keep them",
              op);
  if (!defined_) return Tensor();
  const Tensor data = packed_ ? packed_->unpack() : data_;  // the values, wherever they are kept
  EMBER_CHECK(data.defined(), "{}: a saved-tensor hook's unpack returned an undefined tensor; it must return the "
              "tensor its pack was given (autograd/saved_tensor_hooks.h)", op);
  // version_ is the saved tensor's; what a pack hook's unpack returns (a copy,
  // values brought back from the host) has a counter of its own, so the check
  // is on the original when the saved tensor still holds it (a leaf), and
  // otherwise left to the hook, as in PyTorch.
  const uint64_t now = packed_ ? (leaf_ ? leaf_->storage->version() : version_) : data.version();
  EMBER_CHECK(now == version_,
              "{}: a tensor saved for the gradient (shape {}, dtype {}) was modified by an in-place operation: saved "
              "at version {}, now at version {}",
              op, data.shape(), data.dtype(), version_, now);
  // Without create_graph nothing is recorded, and the values are all a formula needs.
  if (!grad_mode_enabled()) return data;
  if (leaf_) return Tensor(leaf_);
  std::shared_ptr<Node> grad_fn = grad_fn_;
  if (is_output_ && is_floating(data.dtype())) {
    EMBER_ASSERT(owner, "{}: a saved output was unpacked without its node", op);
    grad_fn = owner->shared_from_this();
  }
  if (!grad_fn) return data;
  Tensor tensor = data.detach();
  auto meta = std::make_shared<AutogradMeta>();
  meta->grad_fn = std::move(grad_fn);
  meta->output_nr = output_nr_;
  meta->history_version = version_;
  tensor.impl()->autograd = std::move(meta);
  tensor.impl()->requires_grad = true;
  return tensor;
}

Tensor apply_tensor_hook(const TensorHook& hook, const Tensor& grad) {
  Tensor replaced = hook(grad);
  if (!replaced.defined()) return grad;
  EMBER_CHECK(replaced.shape() == grad.shape() && replaced.dtype() == grad.dtype() && replaced.device() == grad.device(),
              "register_hook: a hook changed the gradient's shape, dtype or device: it was given {} {} on {} and "
              "returned {} {} on {}; a hook must return a gradient like the one it is given",
              grad.shape(), grad.dtype(), grad.device(), replaced.shape(), replaced.dtype(), replaced.device());
  return replaced;
}

void retain_grad_at_history(const Tensor& t) {
  AutogradMeta& meta = *t.impl()->autograd;
  const Node* node = meta.grad_fn.get();
  const int output_nr = meta.output_nr;
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  // The hook stays on the node after the tensor moves on to a newer history,
  // and then keeps nothing: only the latest history's hook writes .grad.
  meta.grad_fn->retain_grad_hooks.push_back({output_nr, [weak, node, output_nr](const Tensor& grad) {
    std::shared_ptr<TensorImpl> impl = weak.lock();
    if (!impl || !impl->autograd || impl->autograd->grad_fn.get() != node || impl->autograd->output_nr != output_nr) return Tensor();
    Tensor existing(impl->grad);
    impl->grad = existing.defined() ? (existing + grad).impl_ptr() : grad.clone().impl_ptr();
    return Tensor();
  }});
}

void refresh_view_history(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->view_base || (impl->requires_grad && !has_history(*impl))) return;
  if (has_history(*impl) && impl->autograd->history_version == t.version()) return;
  std::shared_ptr<TensorImpl> base = impl->view_base;
  if (!base->requires_grad) {  // the base lost its history (a fill_ of all of it): so did the view
    if (impl->autograd) impl->autograd->grad_fn.reset();
    impl->requires_grad = false;
    return;
  }
  // An expanded view (stride 0) is regenerated as the strided view of one
  // copy expanded again, so that the engine sums its gradient over the
  // repeats (a strided view's gradient writes each element once).
  Shape shape = t.shape();
  bool expanded = false;
  for (int d = 0; d < shape.ndim(); ++d)
    if (t.strides()[d] == 0 && shape[d] > 1) shape[d] = 1, expanded = true;
  Tensor regenerated;
  {
    EnableGradGuard grad;
    regenerated = as_strided(Tensor(base), shape, t.strides(), t.offset());
    if (expanded) regenerated = regenerated.expand(t.shape());
  }
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  impl->autograd->grad_fn = regenerated.grad_fn();
  impl->autograd->output_nr = 0;
  impl->autograd->history_version = t.version();
  impl->requires_grad = true;
  if (impl->autograd->retains_grad) retain_grad_at_history(t);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  refresh_view_history(t);
  AutogradMeta* meta = t.impl()->autograd.get();
  if (meta && meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!t.impl()->requires_grad) return {};  // a view whose base lost its history
  return {accumulator_for(t), 0};
}

void connect(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
             std::span<Tensor* const> outputs) {
  node->sequence_nr = g_next_sequence_nr++;
  node->num_outputs = int(outputs.size());
  for (const Tensor* t : inputs) {
    bool present = t && t->defined();
    node->next.push_back(present ? gradient_edge(*t) : Edge{});
    node->inputs.push_back(present ? InputMeta{t->shape(), t->dtype(), t->device()} : InputMeta{});
  }
  int output_nr = 0;
  for (Tensor* out : outputs) {
    TensorImpl* impl = out->impl();
    if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
    impl->autograd->grad_fn = node;
    impl->autograd->output_nr = output_nr++;
    impl->autograd->history_version = out->version();
    impl->requires_grad = is_floating(out->dtype());
  }
}

FormulaNode::FormulaNode(std::string name, Formula formula) : name_(std::move(name)), formula_(std::move(formula)) {}

void FormulaNode::save(const std::vector<Tensor>& saved, std::span<Tensor* const> outputs) {
  saved_.reserve(saved.size());
  for (const Tensor& t : saved) {
    int output_nr = -1;
    for (size_t i = 0; i < outputs.size() && t.defined(); ++i)
      if (outputs[i]->is_same(t)) output_nr = int(i);
    if (output_nr >= 0) saved_.emplace_back(t, output_nr);
    else saved_.emplace_back(t);
  }
}

std::vector<Tensor> FormulaNode::apply(std::vector<Tensor> grad_outputs) {
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_) saved.push_back(s.unpack(name_, this));
  return formula_(saved, grad_outputs[0]);
}

void FormulaNode::release_saved() {
  for (SavedTensor& s : saved_) s.release();
}

void record_formula(const GradRecord& r, std::string name, std::vector<Tensor> saved, Formula formula) {
  auto node = std::make_shared<FormulaNode>(std::move(name), std::move(formula));
  connect(node, r.inputs, r.outputs);
  node->save(saved, r.outputs);
}

Tensor zero_through(const Tensor& t) { return where(zeros_like(t).to(DType::boolean), t, 0.0); }

void refuse_double_backward(std::string_view node, std::initializer_list<const Tensor*> operands) {
  EMBER_CHECK(!should_record(operands),
              "double backward of {} is not supported: its gradient is a fused kernel with no gradient of its own "
              "(backward or grad was called with create_graph=true and an operand requires grad)",
              node);
}

}  // namespace ember::autograd
