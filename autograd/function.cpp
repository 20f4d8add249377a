// Wiring nodes into the graph, saved tensors, and the formula node.
#include "autograd/function.h"

#include <atomic>

#include "autograd/accumulate_grad.h"

namespace ember::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

SavedTensor::SavedTensor(const Tensor& t) : tensor_(t), defined_(t.defined()) {
  if (defined_) version_ = t.version();
}

Tensor SavedTensor::unpack(std::string_view op) const {
  EMBER_CHECK(!released_,
              "{}: trying to backward through the graph a second time (its saved tensors were freed after the first "
              "backward); pass retain_graph=true to the first backward to keep them",
              op);
  if (!defined_) return Tensor();
  EMBER_CHECK(tensor_.version() == version_,
              "{}: a tensor saved for the gradient (shape {}, dtype {}) was modified by an in-place operation: saved "
              "at version {}, now at version {}",
              op, tensor_.shape(), tensor_.dtype(), version_, tensor_.version());
  return tensor_;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta* meta = t.impl()->autograd.get();
  if (meta && meta->grad_fn) return {meta->grad_fn, meta->output_nr};
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
    impl->requires_grad = is_floating(out->dtype());
  }
}

FormulaNode::FormulaNode(std::string name, std::vector<Tensor> saved, Formula formula)
    : name_(std::move(name)), formula_(std::move(formula)) {
  saved_.reserve(saved.size());
  for (const Tensor& t : saved) saved_.emplace_back(t);
}

std::vector<Tensor> FormulaNode::apply(std::vector<Tensor> grad_outputs) {
  std::vector<Tensor> saved;
  saved.reserve(saved_.size());
  for (const SavedTensor& s : saved_) saved.push_back(s.unpack(name_));
  return formula_(saved, grad_outputs[0]);
}

void FormulaNode::release_saved() {
  for (SavedTensor& s : saved_) s.release();
}

void record_formula(const GradRecord& r, std::string name, std::vector<Tensor> saved, Formula formula) {
  auto node = std::make_shared<FormulaNode>(std::move(name), std::move(saved), std::move(formula));
  connect(node, r.inputs, r.outputs);
}

}  // namespace ember::autograd
