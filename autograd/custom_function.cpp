// Custom autograd functions (custom_function.h): the context, and the node
// that runs a user's backward. Note [Custom functions] in autograd/README.md.
// Tests: tests/autograd/test_custom_function.cpp.
#include "autograd/custom_function.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "autograd/function.h"
#include "core/ops/creation.h"

namespace ember::autograd {

std::string short_type_name(const std::type_info& type) {
  const char* mangled = type.name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop the namespaces (before any template arguments): ember::nn::Linear -> Linear.
  size_t template_start = name.find('<');
  size_t last_scope = name.rfind("::", template_start);
  return last_scope == std::string::npos ? name : name.substr(last_scope + 2);
}

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  EMBER_CHECK(!forward_done_, "{}: save_for_backward must be called in forward", name_);
  to_save_ = std::move(tensors);
}

std::vector<Tensor> FunctionCtx::saved_tensors() const {
  EMBER_CHECK(forward_done_, "{}: saved_tensors is for backward; in forward, use the tensors themselves", name_);
  std::vector<Tensor> tensors;
  tensors.reserve(saved_.size());
  std::shared_ptr<Node> node = node_.lock();
  for (size_t i = 0; i < saved_.size(); ++i) {
    Tensor t = saved_[i].unpack(name_ + "Backward");
    // An output was saved without its history (keeping it would make a
    // cycle: output -> node -> ctx -> output). When backward itself records
    // (create_graph), the saved output gets that history back, so gradients
    // of the gradient flow through this node.
    int output_nr = saved_output_nr_[i];
    if (output_nr >= 0 && node && t.defined() && grad_mode_enabled() && is_floating(t.dtype())) {
      t = t.detach();
      TensorImpl* impl = t.impl();
      impl->autograd = std::make_shared<AutogradMeta>();
      impl->autograd->grad_fn = node;
      impl->autograd->output_nr = output_nr;
      impl->requires_grad = true;
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

bool FunctionCtx::needs_input_grad(size_t i) const {
  EMBER_CHECK(i < needs_input_grad_.size(), "{}: needs_input_grad({}) asked, but forward takes {} arguments", name_, i,
              needs_input_grad_.size());
  return needs_input_grad_[i];
}

void FunctionCtx::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  EMBER_CHECK(!forward_done_, "{}: mark_non_differentiable must be called in forward", name_);
  for (const Tensor& t : outputs) {
    EMBER_CHECK(t.defined(), "{}: mark_non_differentiable got an undefined tensor", name_);
    non_differentiable_.push_back(t.impl());
  }
}

void FunctionCtx::save_data(const std::string& key, std::any value) { data_[key] = std::move(value); }

const std::any& FunctionCtx::find_data(const std::string& key) const {
  auto found = data_.find(key);
  EMBER_CHECK(found != data_.end(), "{}: saved_data(\"{}\"): nothing was saved under that name", name_, key);
  return found->second;
}

namespace {
// Whether `shape` broadcasts to `target`: the engine then sums a gradient of
// shape `target` back to `shape` (Note [Broadcast undone once]).
bool broadcasts_to(const Shape& shape, const Shape& target) {
  int lead = target.ndim() - shape.ndim();
  if (lead < 0) return false;
  for (int d = 0; d < shape.ndim(); ++d)
    if (shape[d] != 1 && shape[d] != target[d + lead]) return false;
  return true;
}
}  // namespace

// The node of one call of a custom function: runs the user's backward over
// its context, with PyTorch's checks on what backward returns.
class CustomFunctionNode final : public Node {
 public:
  CustomFunctionNode(std::shared_ptr<FunctionCtx> ctx, CustomBackward backward, std::vector<InputMeta> outputs,
                     std::vector<bool> is_tensor)
      : ctx_(std::move(ctx)), backward_(backward), outputs_(std::move(outputs)), is_tensor_(std::move(is_tensor)) {}

  std::string name() const override { return ctx_->name_ + "Backward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    // An output that got no gradient (unused, or not differentiable) is
    // handed to backward as zeros, as PyTorch does by default.
    for (size_t i = 0; i < grad_outputs.size(); ++i)
      if (!grad_outputs[i].defined())
        grad_outputs[i] = zeros(outputs_[i].shape, {.dtype = outputs_[i].dtype, .device = outputs_[i].device});
    std::vector<Tensor> grads = backward_(*ctx_, grad_outputs);
    const std::string op = name();
    EMBER_CHECK(grads.size() == next.size(),
                "{}: backward returned {} gradients, but forward took {} arguments (return one per argument, an "
                "undefined Tensor() for the non-tensor ones and for inputs without a gradient)",
                op, grads.size(), next.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      EMBER_CHECK(is_tensor_[i], "{}: backward returned a gradient for argument {}, which is not a tensor", op, i);
      if (!next[i].node) {  // the input needs no gradient: whatever backward computed is dropped
        grads[i] = Tensor();
        continue;
      }
      const Shape& shape = inputs[i].shape;
      bool fits = broadcasts_to(shape, grads[i].shape());
      EMBER_CHECK(fits, "{}: backward returned a gradient of shape {} for argument {}, whose shape is {}", op,
                  grads[i].shape(), i, shape);
      EMBER_CHECK(is_floating(grads[i].dtype()),
                  "{}: backward returned a gradient of dtype {} for argument {}; gradients are floating", op,
                  grads[i].dtype(), i);
    }
    return grads;
  }

  void release_saved() override {
    for (SavedTensor& s : ctx_->saved_) s.release();
  }

 private:
  std::shared_ptr<FunctionCtx> ctx_;
  CustomBackward backward_;
  std::vector<InputMeta> outputs_;  // to materialise the gradients of outputs that got none
  std::vector<bool> is_tensor_;     // per argument of forward
};

std::shared_ptr<FunctionCtx> begin_custom_function(std::string name, std::span<const Tensor* const> inputs) {
  auto ctx = std::make_shared<FunctionCtx>();
  ctx->name_ = std::move(name);
  bool recording = grad_mode_enabled();
  for (const Tensor* t : inputs)
    ctx->needs_input_grad_.push_back(recording && t && t->defined() && t->requires_grad());
  return ctx;
}

std::vector<Tensor> finish_custom_function(const std::shared_ptr<FunctionCtx>& ctx, CustomBackward backward,
                                           std::span<const Tensor* const> inputs, std::vector<Tensor> outputs) {
  ctx->forward_done_ = true;
  const std::string& name = ctx->name_;
  std::vector<bool> differentiable;
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& out = outputs[k];
    EMBER_CHECK(out.defined(), "{}: forward returned an undefined tensor as output {}", name, k);
    differentiable.push_back(is_floating(out.dtype()) &&
                             std::ranges::find(ctx->non_differentiable_, out.impl()) == ctx->non_differentiable_.end());
    // An output that already has a history of its own (an input returned as
    // it is, a tensor from outside) becomes a new tensor on the same
    // storage, so that recording this node does not rewrite that history.
    // So does an input returned as it is that needs no gradient (a mask):
    // recording made the caller's tensor a non-leaf of this call, and the
    // next call chained onto the freed graph.
    const bool is_input = std::ranges::any_of(inputs, [&](const Tensor* t) { return t && t->impl() == out.impl(); });
    if (out.requires_grad() || out.grad_fn() || is_input) out = out.detach();
  }
  bool record = std::ranges::any_of(ctx->needs_input_grad_, [](bool needed) { return needed; });
  if (!record) {
    ctx->to_save_.clear();
    return outputs;
  }

  std::vector<InputMeta> output_meta;
  std::vector<Tensor*> output_pointers;
  for (Tensor& out : outputs) {
    output_meta.push_back({out.shape(), out.dtype(), out.device()});
    output_pointers.push_back(&out);
  }
  std::vector<bool> is_tensor;
  for (const Tensor* t : inputs) is_tensor.push_back(t != nullptr);
  auto node = std::make_shared<CustomFunctionNode>(ctx, backward, std::move(output_meta), std::move(is_tensor));
  connect(node, inputs, output_pointers);
  ctx->node_ = node;
  // An output on an input's storage (a view of it, or the input itself)
  // would let an in-place op change the input behind autograd's back: it is
  // refused, as on the built-in views (Note [In-place ops and autograd]).
  for (const Tensor& out : outputs)
    for (const Tensor* in : inputs)
      if (in && in->defined() && in->impl()->storage == out.impl()->storage) node->refuses_in_place = true;
  // Forward ran without recording, so a view it made of an input is marked
  // as a no-grad alias; the node's own rule above replaces that one.
  for (Tensor& out : outputs) out.impl()->no_grad_view = false;

  for (size_t k = 0; k < outputs.size(); ++k) {
    if (differentiable[k]) continue;
    outputs[k].impl()->autograd->grad_fn.reset();
    outputs[k].impl()->requires_grad = false;
  }
  // Saved outputs lose their history here (see saved_tensors); the version
  // each saved tensor has now is the one backward expects.
  for (const Tensor& t : ctx->to_save_) {
    int output_nr = -1;
    bool is_output = false;
    for (size_t k = 0; k < outputs.size(); ++k)
      if (t.defined() && t.impl() == outputs[k].impl()) {
        is_output = true;
        output_nr = differentiable[k] ? int(k) : -1;  // a non-differentiable output never gets a history
      }
    ctx->saved_.emplace_back(is_output ? t.detach() : t);
    ctx->saved_output_nr_.push_back(output_nr);
  }
  ctx->to_save_.clear();
  return outputs;
}

}  // namespace ember::autograd
