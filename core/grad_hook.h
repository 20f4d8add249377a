// The narrow interface between core's op entry points and the autograd layer
// (Note [Recording gradients] in core/README.md). core knows nothing of nodes
// or formulas: a differentiable entry point ends with
//     record_grad(add_grad, {&a, &b}, {&out});
// which does nothing unless grad mode is on and an input requires grad. The
// autograd layer fills each GradSlot with the function that records the op's
// backward node (autograd/functions/<family>.cpp), through an explicit init.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ember {

// Thread-local grad mode (NoGradGuard / EnableGradGuard in autograd/grad_mode.h).
bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

// What an entry point hands to the recorder: its inputs (null for an absent
// optional input), its outputs, and op-specific parameters (a struct the
// recorder knows by the slot, or null).
struct GradRecord {
  std::initializer_list<const Tensor*> inputs;
  std::initializer_list<Tensor*> outputs;
  const void* params = nullptr;
};

class GradSlot {
 public:
  using Recorder = void (*)(const GradRecord&);
  explicit GradSlot(std::string_view name);
  GradSlot(const GradSlot&) = delete;
  GradSlot& operator=(const GradSlot&) = delete;

  std::string_view name() const { return name_; }
  bool has_recorder() const;
  void set_recorder(Recorder recorder) { recorder_ = recorder; }
  void record(const GradRecord& record) const;  // throws if the op has no gradient

  // Every differentiable op declared in the program, for the gradcheck coverage test.
  static const std::vector<GradSlot*>& all();

 private:
  std::string_view name_;
  Recorder recorder_ = nullptr;
};

inline bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

inline void record_grad(const GradSlot& slot, std::initializer_list<const Tensor*> inputs,
                        std::initializer_list<Tensor*> outputs, const void* params = nullptr) {
  if (grad_mode_enabled() && any_requires_grad(inputs)) [[unlikely]]
    slot.record({inputs, outputs, params});
}

}  // namespace ember
