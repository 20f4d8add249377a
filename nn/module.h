// nn::Module: the base of every layer and user model. It keeps parameters,
// buffers and submodules by name in registration order, and from them derives
// PyTorch's dotted names, state dicts, train/eval, dtype/device moves and the
// printed tree. Ownership and naming rules: nn/README.md, Note [Module ownership].
// Forward hooks and wrappers let DistributedDataParallel and the Accelerator
// add behaviour around forward() without changing the user's model type.
// Tests: tests/nn/test_module.cpp, tests/nn/test_forward_hooks.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/grad_hook.h"
#include "core/hook_list.h"
#include "core/named_tensors.h"
#include "core/tensor.h"
#include "core/profiler/kernel_span.h"
#include "nn/forward_call.h"

namespace ember::nn {

class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// Note [Module calls] (nn/README.md): hooks see a call, not a signature.
// Runs before forward; may replace input tensors through call.inputs.
using ForwardPreHook = std::function<void(ForwardCall& call)>;
// Runs after forward returned; may replace output tensors through call.outputs.
using ForwardHook = std::function<void(ForwardCall& call)>;
// Runs the rest of the call (inner wrappers, pre-hooks, forward, hooks) as
// `proceed()`, after which call.outputs holds the result's tensors. State it
// sets around `proceed` with RAII is restored even when forward throws, which
// a pre-hook/hook pair cannot promise (the Accelerator's autocast is one).
using ForwardWrapper = std::function<void(ForwardCall& call, const std::function<void()>& proceed)>;
// What a wrapper encloses: the whole call (its pre-hooks and hooks inside),
// or forward() alone, between the pre-hooks and the hooks. The Accelerator's
// autocast takes the second, as Accelerate wraps `model.forward`: the user's
// hooks then run outside autocast and see the outputs already back in f32.
enum class WrapperScope { call, forward };
// Backward pre-hooks run once per call of the module, when the first gradient
// reaches one of that call's outputs, before any gradient flows inside it.
// Backward hooks run once per call when every parameter of the module (and
// its descendants) that requires grad has accumulated its gradient, or at the
// end of the backward pass for a call that left some parameter unused.
using BackwardHook = std::function<void(Module& module)>;
// What the register_*_hook functions return, for remove_hook.
using ModuleHookId = HookId;

namespace detail {
// Activation checkpointing's core (nn/checkpoint.cpp, Note [Activation
// checkpointing] in nn/README.md): runs `region` now, keeping none of the
// tensors its operations save for backward, and keeps `replay` (the same
// operations on the same arguments) to recompute them in backward. `name`
// goes into error messages; `inputs` are the arguments' tensors, whose
// versions are checked before the recomputation.
void run_checkpointed(std::string name, std::span<Tensor* const> inputs, std::function<void()> replay,
                      const std::function<void()>& region);
}  // namespace detail

// PyTorch's nn.Parameter: a leaf sharing `data`'s storage (detached from any
// history), marked as a parameter, for a module's parameter slot:
// `linear.weight = nn::Parameter(randn({2, 3}))`. A slot refuses a plain
// tensor, as PyTorch's setattr does (Note [Parameter slots]).
class Parameter : public Tensor {
 public:
  explicit Parameter(const Tensor& data, bool requires_grad = true);
};

// How Module::call keeps an argument while the hooks run: a non-const lvalue
// of a type other than Tensor by reference (the caller's object), anything
// else by value (a Tensor handle a pre-hook may replace).
template <class Arg>
using CallArgument = std::conditional_t<std::is_lvalue_reference_v<Arg> &&
                                            !std::is_const_v<std::remove_reference_t<Arg>> &&
                                            !std::is_same_v<std::decay_t<Arg>, Tensor>,
                                        Arg, std::decay_t<Arg>>;

// The arguments activation checkpointing keeps to run forward again in
// backward: values, never references. The caller's objects (an operator()'s
// own parameters among them) are gone by then, and a recomputation must not
// write into the caller's cache a second time.
template <class Arguments>
struct ReplayArguments;
template <class... Stored>
struct ReplayArguments<std::tuple<Stored...>> {
  using type = std::tuple<std::decay_t<Stored>...>;
};

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
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

  // The single-tensor forward that Sequential chains and operator() calls.
  // Modules with other signatures declare their own forward (Note [Module calls]).
  virtual Tensor forward(const Tensor& input);

  // self.forward(args...) between self's hooks, for any signature: what a
  // module whose forward takes other arguments calls from its operator():
  //   std::pair<Tensor, Tensor> forward(const Tensor& idx, const Tensor& targets);
  //   auto operator()(const Tensor& idx, const Tensor& targets) { return call(*this, idx, targets); }
  // Without hooks it is forward() plus five emptiness checks. With hooks the
  // tensor arguments are copied (so a pre-hook can replace a tensor without
  // touching the caller's) and the tensors in both are collected into a
  // ForwardCall. An argument passed as a non-const lvalue of another type (a
  // KV cache `std::vector<Tensor>&`, an `int&` counter) stays the caller's
  // object, so the forward's writes reach it, as a Python list argument is the
  // caller's list; copying it lost them once any hook was registered.
  template <class Self, class... Args>
  static auto call(Self& self, Args&&... args) {
    using Result = decltype(self.forward(std::forward<Args>(args)...));
    static_assert(!std::is_reference_v<Result>, "nn::Module::call: forward must return by value");
    self.check_parameter_slots();
    if (!self.has_call_hooks()) return self.forward(std::forward<Args>(args)...);
    std::tuple<CallArgument<Args>...> arguments(std::forward<Args>(args)...);
    ForwardCall record{self, {}, {}};
    auto add_input = [&record](Tensor& tensor) { record.inputs.push_back(&tensor); };
    std::apply([&](auto&... argument) { (visit_tensors<false>(argument, add_input), ...); }, arguments);
    auto run_forward = [&] { return std::apply([&](auto&... argument) { return self.forward(argument...); }, arguments); };
    if constexpr (std::is_void_v<Result>) {
      self.run_call(record, [&] { forward_step(self, record, arguments, run_forward); });
    } else {
      std::optional<Result> result;
      self.run_call(record, [&] {
        forward_step(self, record, arguments, [&] { result.emplace(run_forward()); });
        auto add_output = [&record](Tensor& tensor) { record.outputs.push_back(&tensor); };
        visit_tensors<true>(*result, add_output);
      });
      // A wrapper that caught the forward's exception returned without a result.
      EMBER_CHECK(result.has_value(),
                  "{}: the call ended without the forward's result: a forward wrapper caught the forward's exception "
                  "(or its hooks') and returned; a wrapper must let it propagate",
                  self.type_name());
      return Result(std::move(*result));
    }
  }
  // forward(input) between the module's hooks (PyTorch's __call__).
  Tensor operator()(const Tensor& input) { return call(*this, input); }

  // Hooks run in registration order; pre-hooks see the inputs the one before
  // left. They fire when the module is called (operator(), call), not when
  // forward() is called directly: DDP and the Accelerator detect that path
  // at backward instead of training on it. Wrappers of each scope nest in
  // registration order, the first registered outermost.
  ModuleHookId register_forward_pre_hook(ForwardPreHook hook);
  ModuleHookId register_forward_hook(ForwardHook hook);
  ModuleHookId register_forward_wrapper(ForwardWrapper wrapper, WrapperScope scope = WrapperScope::call);
  ModuleHookId register_backward_pre_hook(BackwardHook hook);
  ModuleHookId register_backward_hook(BackwardHook hook);
  // Removes the hook or wrapper with this id; an unknown id is an error.
  void remove_hook(ModuleHookId id);
  // Whether any hook or wrapper is registered, or activation checkpointing is
  // on (then calls take the hooked path).
  // A profile recording ops times every module call too (run_call), so a
  // trace nests kernels under the modules that ran them.
  bool has_call_hooks() const {
    return !forward_pre_hooks_.empty() || !forward_hooks_.empty() || !forward_wrappers_.empty() ||
           !forward_step_wrappers_.empty() ||
           !backward_pre_hooks_.empty() || !backward_hooks_.empty() || activation_checkpointing_ ||
           profiler::recording(profiler::kRecordOps);
  }
  // Every call (operator(), call) runs forward without keeping the tensors
  // its operations save for backward; backward runs forward again to get
  // them (nn/checkpoint.h says which hooks run again).
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // The class name printed in the tree; by default the C++ class name without namespaces.
  virtual std::string type_name() const;
  // The text inside the parentheses, as PyTorch's extra_repr (e.g. "in_features=4, out_features=2, bias=True").
  virtual std::string extra_repr() const { return {}; }
  // The tree, exactly as PyTorch's repr prints it.
  virtual std::string str() const;

  // Registration. Names may not contain '.' or repeat within one module. An
  // undefined tensor registers a slot that listings skip (PyTorch's None,
  // e.g. Linear's bias when bias=false). Each returns the slot itself, which
  // stays where it is for the module's life: a module binds its member to it
  // (`Tensor& weight;` initialised with register_parameter), so that assigning
  // the member re-points the registered parameter, as PyTorch's setattr does
  // (weight tying: `lm_head->weight = wte->weight`, Note [Parameter slots]).
  // register_parameter marks the tensor as a parameter and sets its
  // requires_grad to `requires_grad` (false: a frozen parameter, which
  // parameters() still lists and backward leaves without a gradient); by
  // default true, except that a parameter already (another module's, an
  // nn::Parameter) keeps its own, as PyTorch's register_parameter does.
  Tensor& register_parameter(const std::string& name, Tensor tensor, std::optional<bool> requires_grad = {});
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
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
  // The direct submodules, each once under its first name, as PyTorch's
  // named_children (a child registered under two names is one module).
  NamedModules named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // This module first (named ""), then every descendant once, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // The direct submodule called `name`, or an error naming the module's children.
  // Const, so that `model.child("fc") = other` (which would change nothing) does not compile.
  const std::shared_ptr<Module> child(const std::string& name) const;

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

 protected:
  // Every registration in order, a child under two names twice: what the
  // containers hold by position or key, as PyTorch's _modules.
  const NamedModules& registered_children() const { return children_; }

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void check_new_name(const std::string& name, const char* what) const;
  // A member bound to a slot may have been assigned anything (Note [Parameter
  // slots]): each call refuses a plain tensor there, which no optimizer holds.
  void check_parameter_slots() const {
    for (const auto& [name, tensor] : parameters_)
      if (tensor.defined() && !tensor.impl()->is_parameter) refuse_plain_parameter("", name, tensor);
  }
  // The error for a slot holding a non-leaf or a plain tensor.
  [[noreturn]] void refuse_plain_parameter(const std::string& prefix, const std::string& name,
                                           const Tensor& tensor) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect_tensors(const std::string& prefix, bool parameters, bool recurse, NamedTensors& out,
                       std::unordered_set<const TensorImpl*>& seen) const;
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out,
                       std::unordered_set<const Module*>& seen);

  // The forward step of a hooked call: `run` (forward itself), or with
  // activation checkpointing on, `run` without keeping what its operations
  // save for backward, and a copy of the arguments to run forward again then.
  template <class Self, class Arguments, class Run>
  static void forward_step(Self& self, ForwardCall& record, const Arguments& arguments, const Run& run) {
    if (!self.activation_checkpointing_ || !grad_mode_enabled()) return run();
    using Replay = typename ReplayArguments<Arguments>::type;
    if constexpr (std::is_constructible_v<Replay, const Arguments&>) {
      auto replay = [&self, copy = std::make_shared<Replay>(arguments)] {
        std::apply([&](auto&... argument) { (void)self.forward(argument...); }, *copy);
      };
      detail::run_checkpointed(fmt::format("nn::checkpoint({})", self.type_name()), record.inputs, replay, run);
    } else {
      EMBER_CHECK(false, "nn::checkpoint({}): activation checkpointing keeps a copy of forward's arguments to run it "
                  "again in backward, and these cannot be copied", self.type_name());
    }
  }
  // The hooked path of call(): the call's wrappers, pre-hooks, the forward
  // wrappers around `forward` (which fills call.outputs), hooks, then the
  // backward hooks' arming (module_hooks.cpp).
  void run_call(ForwardCall& call, const std::function<void()>& forward);
  void run_wrapped(ForwardCall& call, const std::vector<ForwardWrapper>& wrappers, size_t index,
                   const std::function<void()>& body);
  void arm_backward_hooks(const ForwardCall& call);
  void fire_backward_hooks();
  struct BackwardState;

  // Deques: a slot never moves, so a module may bind a member to it
  // (Note [Parameter slots]).
  std::deque<std::pair<std::string, Tensor>> parameters_;
  std::deque<Buffer> buffers_;
  HookList<ForwardPreHook> forward_pre_hooks_;
  HookList<ForwardHook> forward_hooks_;
  HookList<ForwardWrapper> forward_wrappers_;       // WrapperScope::call
  HookList<ForwardWrapper> forward_step_wrappers_;  // WrapperScope::forward
  HookList<BackwardHook> backward_pre_hooks_;
  HookList<BackwardHook> backward_hooks_;
  std::shared_ptr<BackwardState> backward_state_;  // made when backward hooks first arm
  NamedModules children_;
  bool training_ = true;
  bool activation_checkpointing_ = false;
};

std::ostream& operator<<(std::ostream& stream, const Module& module);

// Which tensors of a state dict are one tensor under several names (tied
// weights: the same storage, offset, shape and strides).
using AliasKey = std::tuple<const Storage*, int64_t, std::string>;
AliasKey alias_key(const Tensor& tensor);
// `state` with each tensor under its first name only, what a file holds
// (safetensors.torch.save_model drops tied duplicates the same way).
NamedTensors without_aliases(const NamedTensors& state);

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
