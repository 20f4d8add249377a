// The narrow interface between core's op entry points and the autograd layer
// (Note [Recording gradients] in core/README.md). core knows nothing of nodes
// or formulas: a differentiable entry point ends with
//     record_grad(add_grad, {&a, &b}, {&out});
// which does nothing unless grad mode is on and an input requires grad. The
// autograd layer fills each GradSlot with the function that records the op's
// backward node (autograd/functions/<family>.cpp), through an explicit init.
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ember {

// Thread-local grad mode: inside NoGradGuard no op records a node;
// EnableGradGuard turns recording back on inside it. GradModeGuard sets
// either (the backward engine records its formulas only for create_graph).
bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

// The guards' constructors are [[nodiscard]]: `NoGradGuard{};` alone is a
// temporary that ends at once, and g++ and clang warn about it.
class GradModeGuard {
 public:
  [[nodiscard]] explicit GradModeGuard(bool enabled) : previous_(grad_mode_enabled()) { set_grad_mode_enabled(enabled); }
  ~GradModeGuard() { set_grad_mode_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  [[nodiscard]] NoGradGuard() : GradModeGuard(false) {}
};

class EnableGradGuard : public GradModeGuard {
 public:
  [[nodiscard]] EnableGradGuard() : GradModeGuard(true) {}
};

// What an entry point hands to the recorder: its inputs (null for an absent
// optional input), its outputs, and op-specific parameters (a struct the
// recorder knows by the slot, or null).
struct GradRecord {
  std::span<const Tensor* const> inputs;
  std::span<Tensor* const> outputs;
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

inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  return grad_mode_enabled() && any_requires_grad(inputs);
}

inline void record_grad(const GradSlot& slot, std::initializer_list<const Tensor*> inputs,
                        std::initializer_list<Tensor*> outputs, const void* params = nullptr) {
  if (should_record(inputs)) [[unlikely]]
    slot.record({{inputs.begin(), inputs.size()}, {outputs.begin(), outputs.size()}, params});
}

// `out` after recording `slot` for it: the one-line form of record_grad used
// by entry points that return a single tensor.
inline Tensor with_grad(const GradSlot& slot, Tensor out, std::initializer_list<const Tensor*> inputs,
                        const void* params = nullptr) {
  record_grad(slot, inputs, {&out}, params);
  return out;
}

// In-place ops under autograd (Note [In-place ops and autograd]): the entry
// point computes `result` out of place (recorded as usual; an operand whose
// value its formula saves is a copy, since the target is about to be
// overwritten), then this writes it into `target` and moves result's history
// onto target, and onto target's view base when target is a view. It refuses
// leaves that require grad and views of them.
extern GradSlot in_place_grad;

// What every in-place entry point checks first: writing with grad mode on
// through a view made under NoGradGuard of a tensor that requires grad would
// change that tensor behind autograd's back (a silently wrong gradient), so
// it is refused, as PyTorch refuses it.
inline void check_in_place_target(const Tensor& target, std::string_view op) {
  EMBER_CHECK(!(target.impl()->no_grad_view && grad_mode_enabled()),
              "{}: in-place operation on a view (shape {}) that was made under NoGradGuard of a tensor that requires "
              "grad, with grad mode on: autograd cannot see the write. Make the view with grad mode on, or write "
              "under NoGradGuard",
              op, target.shape());
}

inline Tensor& assign_in_place(Tensor& target, Tensor result) {
  const Tensor* inputs[] = {&result};
  Tensor* outputs[] = {&target};
  in_place_grad.record({inputs, outputs, nullptr});
  return target;
}

}  // namespace ember
