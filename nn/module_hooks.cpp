// nn::Module's hooked call path and its backward hooks (see module.h,
// Note [Module calls] in nn/README.md). The registry and listings are in
// module.cpp. Tests: tests/nn/test_forward_hooks.cpp, tests/nn/test_module_call.cpp.
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "core/grad_hook.h"
#include "core/profiler/profiler.h"
#include "nn/module.h"

namespace ember::nn {

// What the backward hooks of one module share with the post-accumulate hooks
// they put on its parameters: whether a backward pass has reached one of the
// module's outputs and not yet fired the hooks, and which parameters have
// accumulated their gradient in it.
struct Module::BackwardState {
  Module* module = nullptr;        // the owner; a move of the module updates it
  std::vector<Tensor> parameters;  // those that require grad, when first armed
  std::vector<bool> accumulated;
  size_t pending = 0;
  bool armed = false;
};

// Moving keeps every parameter and buffer slot where it is (a moved deque
// hands over its elements), so members bound to the slots stay valid.
Module::Module(Module&& other) noexcept
    : parameters_(std::move(other.parameters_)),
      buffers_(std::move(other.buffers_)),
      forward_pre_hooks_(std::move(other.forward_pre_hooks_)),
      forward_hooks_(std::move(other.forward_hooks_)),
      forward_wrappers_(std::move(other.forward_wrappers_)),
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
  const int64_t begin = profiler::recording(profiler::kRecordOps) ? profiler::now_ns() : -1;
  // Snapshots, so that a hook may remove itself (or another) while they run.
  std::vector<ForwardWrapper> wrappers = forward_wrappers_.snapshot();
  run_from_wrapper(call, forward, wrappers, 0);
  if (begin >= 0)
    profiler::record_span(profiler::kRecordOps, profiler::Category::module, type_name(), begin, profiler::now_ns());
}

void Module::run_from_wrapper(ForwardCall& call, const std::function<void()>& forward,
                              const std::vector<ForwardWrapper>& wrappers, size_t index) {
  if (index < wrappers.size()) {
    wrappers[index](call, [&] { run_from_wrapper(call, forward, wrappers, index + 1); });
    return;
  }
  for (const ForwardPreHook& hook : forward_pre_hooks_.snapshot()) hook(call);
  forward();
  for (const ForwardHook& hook : forward_hooks_.snapshot()) hook(call);
  arm_backward_hooks(call);
}

// Both kinds of backward hook start from a gradient hook on each output of
// the call that requires grad: the first gradient to arrive runs the
// pre-hooks and arms the post-hooks for this backward pass.
void Module::arm_backward_hooks(const ForwardCall& call) {
  if ((backward_pre_hooks_.empty() && backward_hooks_.empty()) || !grad_mode_enabled()) return;
  if (!backward_state_) {
    backward_state_ = std::make_shared<BackwardState>();
    backward_state_->module = this;
    for (const Tensor& parameter : parameters())
      if (parameter.requires_grad()) backward_state_->parameters.push_back(parameter);
    std::weak_ptr<BackwardState> weak = backward_state_;
    for (size_t index = 0; index < backward_state_->parameters.size(); ++index)
      backward_state_->parameters[index].register_post_accumulate_grad_hook([weak, index](const Tensor&) {
        std::shared_ptr<BackwardState> state = weak.lock();
        if (!state || !state->armed || state->accumulated[index]) return;
        state->accumulated[index] = true;
        if (--state->pending == 0) state->module->fire_backward_hooks();
      });
  }
  auto reached = std::make_shared<bool>(false);  // this call's outputs, once per backward
  std::weak_ptr<BackwardState> weak = backward_state_;
  for (Tensor* output : call.outputs) {
    if (!output->requires_grad()) continue;
    output->register_hook([weak, reached](const Tensor&) {
      std::shared_ptr<BackwardState> state = weak.lock();
      if (!state || *reached) return Tensor();
      *reached = true;
      Module& module = *state->module;
      for (const BackwardHook& hook : module.backward_pre_hooks_.snapshot()) hook(module);
      if (!state->armed && !module.backward_hooks_.empty()) {
        state->armed = true;
        state->accumulated.assign(state->parameters.size(), false);
        state->pending = state->parameters.size();
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

ModuleHookId Module::register_forward_wrapper(ForwardWrapper wrapper) {
  EMBER_CHECK(wrapper != nullptr, "{}.register_forward_wrapper: the wrapper is empty", type_name());
  return forward_wrappers_.add(std::move(wrapper));
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
                 backward_pre_hooks_.remove(id) || backward_hooks_.remove(id);
  EMBER_CHECK(removed, "{}.remove_hook: no hook with id {} (already removed?)", type_name(), id);
}

}  // namespace ember::nn
