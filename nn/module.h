// nn::Module: the base of every layer and user model. It keeps parameters,
// buffers and submodules by name in registration order, and from them derives
// PyTorch's dotted names, state dicts, train/eval, dtype/device moves and the
// printed tree. Ownership and naming rules: nn/README.md, Note [Module ownership].
// Forward hooks and wrappers let DistributedDataParallel and the Accelerator
// add behaviour around forward() without changing the user's model type.
// Tests: tests/nn/test_module.cpp, tests/nn/test_forward_hooks.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hook_list.h"
#include "core/named_tensors.h"
#include "core/tensor.h"

namespace ember::nn {

class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// Runs before forward(input); a defined result replaces the input.
using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
// Runs after forward(input) returned `output`, which it may replace.
using ForwardHook = std::function<void(Module& module, const Tensor& input, Tensor& output)>;
// Runs the rest of the call (inner wrappers, pre-hooks, forward, hooks) as
// `call(input)` and returns the output, which it may replace. State it sets
// around `call` with RAII is restored even when forward throws, which a
// pre-hook/hook pair cannot promise (the Accelerator's autocast is one).
using ForwardWrapper =
    std::function<Tensor(Module& module, const Tensor& input, const std::function<Tensor(const Tensor&)>& call)>;
// What register_forward_(pre_)hook and register_forward_wrapper return, for remove_forward_hook.
using ForwardHookId = HookId;

// What load_state_dict found besides the keys it loaded (PyTorch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // A copy would alias every parameter; moving hands them over (Note [Module ownership]).
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // The single-tensor forward that Sequential chains and operator() calls.
  // Modules with other signatures (MultiheadAttention) keep this one throwing.
  virtual Tensor forward(const Tensor& input);
  // forward(), between the forward hooks when there are any (PyTorch's
  // __call__). Without hooks it costs one branch more than forward().
  Tensor operator()(const Tensor& input) {
    return forward_pre_hooks_.empty() && forward_hooks_.empty() && forward_wrappers_.empty() ? forward(input)
                                                                                              : call_with_hooks(input);
  }

  // Hooks run in registration order, each pre-hook seeing the input the one
  // before returned; they fire when this module is called through operator(),
  // not when a container calls a child's forward() directly. Wrappers enclose
  // all of it, the first registered outermost.
  ForwardHookId register_forward_pre_hook(ForwardPreHook hook);
  ForwardHookId register_forward_hook(ForwardHook hook);
  ForwardHookId register_forward_wrapper(ForwardWrapper wrapper);
  // Removes the hook or wrapper with this id; an unknown id is an error.
  void remove_forward_hook(ForwardHookId id);

  // The class name printed in the tree; by default the C++ class name without namespaces.
  virtual std::string type_name() const;
  // The text inside the parentheses, as PyTorch's extra_repr (e.g. "in_features=4, out_features=2, bias=True").
  virtual std::string extra_repr() const { return {}; }
  // The tree, exactly as PyTorch's repr prints it.
  virtual std::string str() const;

  // Registration. Names may not contain '.' or repeat within one module. An
  // undefined tensor registers a slot that listings skip (PyTorch's None,
  // e.g. Linear's bias when bias=false). Each returns the tensor it registered.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: not an nn::Module");
    add_child(name, module);
    return module;
  }
  // Moves a module held by value into shared ownership.
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, std::decay_t<M>> && !std::is_lvalue_reference_v<M>>>
  std::shared_ptr<std::decay_t<M>> register_module(const std::string& name, M&& module) {
    return register_module(name, std::make_shared<std::decay_t<M>>(std::move(module)));
  }

  // Dotted names ("blocks.0.attn.c_attn.weight") in registration order,
  // depth first; a tensor reached twice (tied weights) is listed once.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const NamedModules& named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;
  // This module first (named ""), then every descendant once, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // The direct submodule called `name`, or an error naming the module's children.
  std::shared_ptr<Module> child(const std::string& name) const;

  // The training flag of this module and every descendant (Dropout, BatchNorm read it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Moves floating parameters and buffers (and their .grad) to `dtype`, or all of
  // them to `device`, changing each tensor in place so that handles held
  // elsewhere (an optimizer's) see the change (Note [Parameters change in place]).
  Module& to(DType dtype);
  Module& to(Device device);
  // Drops every parameter's .grad, or zeroes it in place when !set_to_none.
  void zero_grad(bool set_to_none = true);
  // fn on every descendant, children first and this module last, as PyTorch.
  Module& apply(const std::function<void(Module&)>& fn);

  // Parameters and persistent buffers in registration order, detached (sharing storage).
  NamedTensors state_dict() const;
  // Copies each value into the matching tensor in place, under NoGradGuard.
  // Nothing is copied unless every shape matches; the error lists every
  // missing, unexpected and mis-shaped key (mis-shaped ones even when !strict).
  LoadStateDictResult load_state_dict(const NamedTensors& state, bool strict = true);

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect_tensors(const std::string& prefix, bool parameters, bool recurse, NamedTensors& out,
                       std::unordered_set<const TensorImpl*>& seen) const;
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out,
                       std::unordered_set<const Module*>& seen);

  Tensor call_with_hooks(const Tensor& input);
  Tensor call_with_pre_and_post_hooks(const Tensor& input);

  NamedTensors parameters_;
  std::vector<Buffer> buffers_;
  HookList<ForwardPreHook> forward_pre_hooks_;
  HookList<ForwardHook> forward_hooks_;
  HookList<ForwardWrapper> forward_wrappers_;
  NamedModules children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& stream, const Module& module);

// PyTorch's spelling of values inside extra_repr: True/False, 1e-05, (3, 3), None.
std::string python_repr(bool value);
std::string python_repr(double value);
std::string python_tuple(std::span<const int64_t> values);

}  // namespace ember::nn

template <class M>
struct fmt::formatter<M, char, std::enable_if_t<std::is_base_of_v<ember::nn::Module, M>>>
    : fmt::formatter<std::string_view> {
  auto format(const M& module, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(module.str(), ctx);
  }
};
