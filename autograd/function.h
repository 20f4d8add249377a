// Recording helpers used by every autograd/functions/<family>.cpp: how a new
// node is wired to its inputs and made the grad_fn of its outputs.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "core/grad_hook.h"

namespace ember::autograd {

// The edge a gradient for `t` should follow: its grad_fn, its leaf
// accumulator, or nothing when `t` does not require grad.
Edge gradient_edge(const Tensor& t);

// A view whose storage was written since its history was set (an in-place op
// on its base or on another view of it), or that has none while its base now
// requires grad, takes a fresh one: a strided view of its base's current
// history, as PyTorch regenerates a view's grad_fn. A view that is a leaf of
// its own (requires_grad_ on it) keeps being one.
void refresh_view_history(const Tensor& t);

// What a tensor hook (register_hook) leaves for the gradient: its result,
// which must have the gradient's shape, dtype and device (PyTorch's "hook has
// changed the size of value"), or `grad` itself when it returns none.
Tensor apply_tensor_hook(const TensorHook& hook, const Tensor& grad);

// Points a tensor's retain_grad() at its current history: the gradient it
// keeps is that of its latest version, after an in-place op or a view's
// fresh history (Note [Retained gradients follow the history]).
void retain_grad_at_history(const Tensor& t);

// Wires `node` to `inputs` (an edge and metadata each; null entries are
// inputs without gradient) and makes it the grad_fn of `outputs`.
void connect(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
             std::span<Tensor* const> outputs);

// A node of type N built from `args`, connected per the record.
template <class N, class... Args>
std::shared_ptr<N> record(const GradRecord& r, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  connect(node, r.inputs, r.outputs);
  return node;
}

// The number of storage elements a geometry reaches from its offset (the
// views' gradients lay gradients out in a buffer shaped like the storage).
inline int64_t extent(const Shape& shape, const Strides& strides) {
  int64_t last = 0;
  for (int d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

// Whether two elements of a geometry may share a memory location (an
// expanded view, or one of as_strided). They are apart when each dim's
// |stride|, in increasing order, passes the last element the dims before it
// reach; `dim` gets the first dim that fails.
inline bool elements_may_share_memory(const Shape& shape, const Strides& strides, int* dim = nullptr) {
  if (shape.numel() == 0) return false;  // no elements to share anything
  std::vector<int> dims;
  for (int d = 0; d < shape.ndim(); ++d)
    if (shape[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](int x, int y) { return std::abs(strides[x]) < std::abs(strides[y]); });
  int64_t span = 0;
  for (int d : dims) {
    if (std::abs(strides[d]) <= span) {
      if (dim) *dim = d;
      return true;
    }
    span += (shape[d] - 1) * std::abs(strides[d]);
  }
  return false;
}

// The i-th input and output of a record, and its parameters as P.
inline const Tensor& input(const GradRecord& r, size_t i) { return *r.inputs[i]; }
inline const Tensor& output(const GradRecord& r, size_t i) { return *r.outputs[i]; }
// Whether the record's i-th input needs a gradient (is present and requires
// grad): formulas capture it at record time and return an undefined gradient
// for the others, which the engine drops (their edges are empty).
inline bool needs_grad(const GradRecord& r, size_t i) {
  return i < r.inputs.size() && r.inputs[i] && r.inputs[i]->defined() && r.inputs[i]->requires_grad();
}
template <class P>
const P& params(const GradRecord& r) {
  return *static_cast<const P*>(r.params);
}

// A node whose inputs' gradients come from one formula over saved tensors:
//   make_node("MulBackward", {a, b}, [](const Saved& s, const Tensor& g) { ... })
// keeps each family file to one short block per op. `saved` is unpacked
// (with the in-place check) before `formula` runs. A saved tensor that is one
// of the node's outputs (pass the output itself, not a detached copy) comes
// back with its history under create_graph (SavedTensor in node.h).
using Formula = std::function<std::vector<Tensor>(const std::vector<Tensor>& saved, const Tensor& grad)>;
class FormulaNode final : public Node {
 public:
  FormulaNode(std::string name, Formula formula);
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  void release_saved() override;
  // Saves `saved`, recognising the node's `outputs` among them.
  void save(const std::vector<Tensor>& saved, std::span<Tensor* const> outputs);

 private:
  std::string name_;
  std::vector<SavedTensor> saved_;
  Formula formula_;
};

// Records a FormulaNode for a single-output op.
void record_formula(const GradRecord& r, std::string name, std::vector<Tensor> saved, Formula formula);

// 0 everywhere, with t's history. A gradient that reads its input only
// through a mask (relu, abs, leaky_relu, hardtanh, max pooling) adds it under
// create_graph, so that it keeps the edge to the input that PyTorch's keeps
// (with a second derivative of zeros). Without it a parameter reached only
// through the mask (a critic's first bias in a gradient penalty) got no .grad
// at all, where PyTorch gives it zeros and Adam still moves it.
Tensor zero_through(const Tensor& t);

// Under create_graph a fused backward kernel gives way to a composite of
// recorded ops; on a 16-bit x those ops would round at every step, where the
// kernel (and PyTorch) computes in f32: the bf16 layer-norm input gradient
// came out ten times less accurate with create_graph than without. This runs
// `composite(operands)` on f32 copies when x is f16 or bf16 and rounds each
// gradient back to x's dtype once; the casts are recorded, so the result
// stays differentiable.
template <class Composite>
std::vector<Tensor> composite_in_f32(const Tensor& x, std::vector<Tensor> operands, Composite composite) {
  if (x.dtype() != DType::f16 && x.dtype() != DType::bf16) return composite(operands);
  for (Tensor& operand : operands)
    if (operand.defined()) operand = operand.to(DType::f32);
  std::vector<Tensor> grads = composite(operands);
  for (Tensor& grad : grads)
    if (grad.defined()) grad = grad.to(x.dtype());
  return grads;
}

// Called first by a formula built on a fused backward kernel, which records
// no gradient of its own: when the formula's result would have to be
// differentiable (backward with create_graph, and `operands` -- the incoming
// gradient and the saved tensors -- include one that requires grad), it
// raises "double backward of <node> is not supported" rather than return a
// gradient silently cut from the graph (Note [Higher-order gradients]).
void refuse_double_backward(std::string_view node, std::initializer_list<const Tensor*> operands);

}  // namespace ember::autograd
