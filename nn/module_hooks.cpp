// nn::Module's hooked call path and its backward hooks (see module.h,
// Note [Module calls] in nn/README.md). The registry and listings are in
// module.cpp. Tests: tests/nn/test_forward_hooks.cpp, tests/nn/test_module_call.cpp.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/engine.h"
#include "core/grad_hook.h"
#include "core/profiler/profiler.h"
#include "nn/module.h"

namespace ember::nn {

// What the backward hooks of one module share with the post-accumulate hooks
// they put on its parameters: whether a backward pass has reached one of the
// module's outputs and not yet fired the hooks, and which parameters it still
// waits for. The watched parameters are those that require grad at the
// module's latest call (a parameter unfrozen or added later is watched from
// its next call); each carries the flag its own hook clears.
struct Module::BackwardState {
  struct Watched {
    Tensor parameter;
    std::shared_ptr<bool> waiting;  // shared with the parameter's hook
  };
  Module* module = nullptr;  // the owner; a move of the module updates it
  std::vector<Watched> watched;
  size_t pending = 0;
  bool armed = false;

  // Watches `parameters` (those that require grad), putting a post-accumulate
  // hook on each one seen for the first time; a parameter no longer watched
  // keeps an inert hook.
  static void watch(const std::shared_ptr<BackwardState>& state, const std::vector<Tensor>& parameters) {
    // Every call refreshes the set, and nearly every call finds it as it was
    // (the same parameters, in the same order): that costs a walk, no search
    // and no allocation.
    size_t same = 0;
    for (const Tensor& parameter : parameters) {
      if (!parameter.requires_grad()) continue;
      if (same == state->watched.size() || !state->watched[same].parameter.is_same(parameter)) {
        same = state->watched.size() + 1;
        break;
      }
      ++same;
    }
    if (same == state->watched.size()) return;
    std::vector<Watched> now;
    for (const Tensor& parameter : parameters) {
      if (!parameter.requires_grad()) continue;
      auto known = std::find_if(state->watched.begin(), state->watched.end(),
                                [&](const Watched& w) { return w.parameter.is_same(parameter); });
      if (known != state->watched.end()) {
        now.push_back(*known);
        continue;
      }
      auto waiting = std::make_shared<bool>(false);
      std::weak_ptr<BackwardState> weak = state;
      parameter.register_post_accumulate_grad_hook([weak, waiting](const Tensor&) {
        std::shared_ptr<BackwardState> alive = weak.lock();
        if (!alive || !alive->armed || !*waiting) return;
        *waiting = false;
        if (--alive->pending == 0) alive->module->fire_backward_hooks();
      });
      now.push_back({parameter, std::move(waiting)});
    }
    state->watched = std::move(now);
  }
};

// Moving keeps every parameter and buffer slot where it is (a moved deque
// hands over its elements), so members bound to the slots stay valid.
Module::Module(Module&& other) noexcept
    : parameters_(std::move(other.parameters_)),
      buffers_(std::move(other.buffers_)),
      forward_pre_hooks_(std::move(other.forward_pre_hooks_)),
      forward_hooks_(std::move(other.forward_hooks_)),
      forward_wrappers_(std::move(other.forward_wrappers_)),
      forward_step_wrappers_(std::move(other.forward_step_wrappers_)),
      backward_pre_hooks_(std::move(other.backward_pre_hooks_)),
      backward_hooks_(std::move(other.backward_hooks_)),
      backward_state_(std::move(other.backward_state_)),
      children_(std::move(other.children_)),
      training_(other.training_),
      activation_checkpointing_(other.activation_checkpointing_) {
  if (backward_state_) backward_state_->module = this;  // the hooks find the module through it
}

Module& Module::operator=(Module&& other) noexcept {
  parameters_ = std::move(other.parameters_);
  buffers_ = std::move(other.buffers_);
  forward_pre_hooks_ = std::move(other.forward_pre_hooks_);
  forward_hooks_ = std::move(other.forward_hooks_);
  forward_wrappers_ = std::move(other.forward_wrappers_);
  forward_step_wrappers_ = std::move(other.forward_step_wrappers_);
  backward_pre_hooks_ = std::move(other.backward_pre_hooks_);
  backward_hooks_ = std::move(other.backward_hooks_);
  backward_state_ = std::move(other.backward_state_);
  if (backward_state_) backward_state_->module = this;  // the hooks find the module through it
  children_ = std::move(other.children_);
  training_ = other.training_;
  activation_checkpointing_ = other.activation_checkpointing_;
  return *this;
}

void Module::run_call(ForwardCall& call, const std::function<void()>& forward) {
  // Closed by its destructor, so a call that throws still has its span
  // around the kernels it ran (as PyTorch's record_function). Made only while
  // recording: type_name() demangles, and hooked calls (DDP, ZeRO units) are every step's.
  std::optional<profiler::Span> span;
  if (profiler::recording(profiler::kRecordOps)) span.emplace(profiler::kRecordOps, profiler::Category::module, type_name());
  // Snapshots, so that a hook may remove itself (or another) while they run.
  const std::vector<ForwardWrapper> call_wrappers = forward_wrappers_.snapshot();
  const std::vector<ForwardWrapper> step_wrappers = forward_step_wrappers_.snapshot();
  run_wrapped(call, call_wrappers, 0, [&] {
    for (const ForwardPreHook& hook : forward_pre_hooks_.snapshot()) hook(call);
    run_wrapped(call, step_wrappers, 0, forward);
    for (const ForwardHook& hook : forward_hooks_.snapshot()) hook(call);
    arm_backward_hooks(call);
  });
}

void Module::run_wrapped(ForwardCall& call, const std::vector<ForwardWrapper>& wrappers, size_t index,
                         const std::function<void()>& body) {
  if (index == wrappers.size()) return body();
  // The call's result exists only once the forward ran, so every wrapper
  // must run the rest of the call exactly once.
  int proceeded = 0;
  wrappers[index](call, [&] {
    EMBER_CHECK(proceeded++ == 0,
                "{}: forward wrapper {} called proceed() a second time; a wrapper runs the rest of the call once",
                type_name(), index);
    run_wrapped(call, wrappers, index + 1, body);
  });
  EMBER_CHECK(proceeded == 1,
              "{}: forward wrapper {} returned without calling proceed(); a wrapper must run the rest of the call "
              "(the forward and its hooks) exactly once, as the call's result comes from it",
              type_name(), index);
}

// Both kinds of backward hook start from a gradient hook on each output of
// the call that requires grad: the first gradient to arrive runs the
// pre-hooks and arms the post-hooks for this backward pass.
void Module::arm_backward_hooks(const ForwardCall& call) {
  if ((backward_pre_hooks_.empty() && backward_hooks_.empty()) || !grad_mode_enabled()) return;
  if (!backward_state_) {
    backward_state_ = std::make_shared<BackwardState>();
    backward_state_->module = this;
  }
  if (!backward_state_->armed) BackwardState::watch(backward_state_, parameters());
  // This call's outputs run the pre-hooks once per backward pass: the first
  // gradient to reach one sets the flag, the end of that pass clears it (a
  // second pass through a retained graph runs them again).
  auto reached = std::make_shared<bool>(false);
  std::weak_ptr<BackwardState> weak = backward_state_;
  for (Tensor* output : call.outputs) {
    if (!output->requires_grad()) continue;
    // A leaf output (a module returning its parameter, Identity on a leaf) is
    // the same tensor at every call, so its hooks piled up and pass k ran the
    // pre-hooks k times. The call returns a view of it instead, whose hook
    // lives as long as this call's graph (PyTorch's BackwardHookFunction).
    if (!output->grad_fn()) *output = output->view(output->shape());
    output->register_hook([weak, reached](const Tensor&) {
      std::shared_ptr<BackwardState> state = weak.lock();
      if (!state || *reached) return Tensor();
      *reached = true;
      autograd::queue_callback([reached] { *reached = false; });
      Module& module = *state->module;
      for (const BackwardHook& hook : module.backward_pre_hooks_.snapshot()) hook(module);
      if (!state->armed && !module.backward_hooks_.empty()) {
        state->armed = true;
        for (BackwardState::Watched& watched : state->watched) *watched.waiting = true;
        state->pending = state->watched.size();
        // A parameter this pass leaves without a gradient must not hold the
        // hooks back forever: the end of the pass fires them.
        autograd::queue_callback([weak] {
          if (std::shared_ptr<BackwardState> alive = weak.lock(); alive && alive->armed)
            alive->module->fire_backward_hooks();
        });
        if (state->pending == 0) module.fire_backward_hooks();
      }
      return Tensor();
    });
  }
}

void Module::fire_backward_hooks() {
  backward_state_->armed = false;
  for (const BackwardHook& hook : backward_hooks_.snapshot()) hook(*this);
}

ModuleHookId Module::register_forward_pre_hook(ForwardPreHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_forward_pre_hook: the hook is empty", type_name());
  return forward_pre_hooks_.add(std::move(hook));
}

ModuleHookId Module::register_forward_hook(ForwardHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_forward_hook: the hook is empty", type_name());
  return forward_hooks_.add(std::move(hook));
}

ModuleHookId Module::register_forward_wrapper(ForwardWrapper wrapper, WrapperScope scope) {
  EMBER_CHECK(wrapper != nullptr, "{}.register_forward_wrapper: the wrapper is empty", type_name());
  return (scope == WrapperScope::call ? forward_wrappers_ : forward_step_wrappers_).add(std::move(wrapper));
}

ModuleHookId Module::register_backward_pre_hook(BackwardHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_backward_pre_hook: the hook is empty", type_name());
  return backward_pre_hooks_.add(std::move(hook));
}

ModuleHookId Module::register_backward_hook(BackwardHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_backward_hook: the hook is empty", type_name());
  return backward_hooks_.add(std::move(hook));
}

void Module::remove_hook(ModuleHookId id) {
  bool removed = forward_pre_hooks_.remove(id) || forward_hooks_.remove(id) || forward_wrappers_.remove(id) ||
                 forward_step_wrappers_.remove(id) || backward_pre_hooks_.remove(id) || backward_hooks_.remove(id);
  EMBER_CHECK(removed, "{}.remove_hook: no hook with id {} (already removed?)", type_name(), id);
}

}  // namespace ember::nn
