// The recorded graph. Each differentiable op, when an input requires grad,
// records a Node: its gradient function, the tensors it saved, and an Edge per
// input saying where that input's gradient flows next. Leaves that require
// grad end in an AccumulateGrad node that adds into their `.grad`.
// The engine (engine.cpp) walks these nodes in reverse; the formulas live in
// autograd/functions/<family>.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

class Node;
class PackedTensor;  // saved_tensor_hooks.h

// Where the gradient of one input goes: output `input_nr` of `node`'s inputs
// list... precisely, `node` receives it as its gradient for output `output_nr`.
struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  int output_nr = 0;
};

// What the engine needs to hand a gradient to an input: its shape (to undo
// broadcasting, Note [Broadcast undone once] in autograd/README.md) and dtype.
struct InputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

// A saved tensor remembers its version, so a later in-place change is caught.
// It keeps the values as an alias without history or view base, and the
// history apart (the tensor's grad_fn, or the leaf itself), given back when
// unpacked under create_graph so that formulas stay differentiable. Keeping
// the tensor itself could make a cycle once an in-place op rebased it (or its
// view base) onto a history that leads back to the node that saved it
// (`h.add_(h * w)`, or a buffer written with a function of its own view). An
// output of the node that saves it has that node as its history, which is
// passed in at unpack time, so that the node does not own itself. Under a
// pack hook (saved_tensor_hooks.h) it keeps what the hook returned instead of
// the values, and the rest as above (Note [Saved tensor hooks]).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // `output` is output `output_nr` of the node that saves it.
  SavedTensor(const Tensor& output, int output_nr);
  // The tensor, or an error naming `op` if it was modified in place since.
  // `owner` is the node that saved it, needed for outputs.
  Tensor unpack(std::string_view op, Node* owner = nullptr) const;
  void release();

 private:
  Tensor data_;
  std::shared_ptr<PackedTensor> packed_;  // set instead of data_ under a pack hook
  std::shared_ptr<Node> grad_fn_;
  std::shared_ptr<TensorImpl> leaf_;  // a leaf that requires grad: its gradient must reach it
  uint64_t version_ = 0;
  int output_nr_ = 0;
  bool is_output_ = false;
  bool defined_ = false;
  bool released_ = false;
};

using TensorHook = std::function<Tensor(const Tensor&)>;

// A hook on one output of a node, under the id that removes it (0: none).
struct OutputHook {
  int output_nr = 0;
  TensorHook hook;
  uint64_t id = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // Gradients of the inputs, given the gradients of the outputs (undefined
  // tensors where an output got no gradient); an undefined result means none.
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  // Drops saved tensors once backward has used them (unless retain_graph).
  virtual void release_saved() {}

  std::vector<Edge> next;            // one per input
  std::vector<InputMeta> inputs;     // one per input
  int num_outputs = 1;
  uint64_t sequence_nr = 0;          // creation order; later nodes run first in backward
  bool outlives_graph = false;       // a leaf accumulator: reused by every graph, never released
  // Its outputs share an input's memory without being views autograd knows
  // how to regenerate (a custom function's): in-place ops on them are refused.
  bool refuses_in_place = false;
  std::vector<OutputHook> pre_hooks;  // from register_hook on non-leaves
  // retain_grad's, run after every pre-hook whenever registered, so .grad is
  // the gradient the hooks left (PyTorch 2's retains_grad_hooks).
  std::vector<OutputHook> retain_grad_hooks;
};

}  // namespace ember::autograd

namespace ember {

// Per-tensor autograd state (declared in core/tensor.h).
struct AutogradMeta {
  std::shared_ptr<autograd::Node> grad_fn;   // null for leaves
  int output_nr = 0;                         // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> accumulator;  // leaves: the AccumulateGrad node, shared by all uses
  // Leaves: run before accumulation, each with the id its registration returned.
  std::vector<std::pair<uint64_t, autograd::TensorHook>> leaf_hooks;
  // Non-leaves: every history register_hook put a hook on. An in-place op
  // moves the tensor to a new history, and its older hooks stay where they
  // were, as PyTorch's do; remove_hook finds them there.
  std::vector<std::weak_ptr<autograd::Node>> hooked_histories;
  // Leaves: run after .grad is written, each with the id its registration returned.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  bool retains_grad = false;
  // The storage's version when grad_fn was set. A view whose storage was
  // written since takes a fresh history from its base when next used
  // (refresh_view_history in autograd/function.h).
  uint64_t history_version = 0;
};

}  // namespace ember
