// Saved-tensor hooks, torch.autograd.graph.saved_tensors_hooks in C++. While a
// SavedTensorHooksGuard is active on a thread, every tensor that a node saves
// for backward (a SavedTensor, node.h) is first offered to the guard's `pack`
// hook. When pack returns a PackedTensor the node keeps that instead of the
// tensor, and backward gets the values back from its unpack(); when it
// returns null the node keeps the tensor as usual. Activation checkpointing
// (nn/checkpoint.h) packs a placeholder and unpacks by recomputing:
// Note [Saved tensor hooks] in autograd/README.md.
// Tests: tests/nn/test_checkpoint.cpp.
#pragma once

#include <functional>
#include <memory>

#include "core/tensor.h"

namespace ember::autograd {

// What a node keeps of a tensor it saved under a pack hook.
class PackedTensor {
 public:
  virtual ~PackedTensor() = default;
  // The saved values, as an alias without history (SavedTensor gives the
  // history back). Called by backward, possibly more than once (retain_graph).
  virtual Tensor unpack() = 0;
};

// `tensor` is the one being saved, with its history; keep what you need of it.
using PackHook = std::function<std::shared_ptr<PackedTensor>(const Tensor& tensor)>;

// Installs `pack` for this thread until destroyed; guards nest, the innermost
// wins. An empty `pack` turns packing off inside an outer guard.
class SavedTensorHooksGuard {
 public:
  [[nodiscard]] explicit SavedTensorHooksGuard(PackHook pack);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  const PackHook* previous_;
  PackHook pack_;
};

// The innermost active pack hook of this thread, or null.
const PackHook* current_pack_hook();

}  // namespace ember::autograd
