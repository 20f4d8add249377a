// Activation checkpointing, torch.utils.checkpoint.checkpoint (the
// non-reentrant form) in C++: a region of the forward keeps none of the
// tensors its operations save for backward, and backward runs the region
// again to get them. Gradients are those of the unchecked run, bit for bit on
// the CPU. Note [Activation checkpointing] in nn/README.md.
//
//   Tensor h = nn::checkpoint([&](const Tensor& x) { return mlp(ln(x)); }, x);
//   Tensor y = nn::checkpoint(block, x);            // a module, through its hooks
//   nn::set_activation_checkpointing(block, true);  // every call of block, any signature
//
// Used by the sharding engine for `fsdp_activation_checkpointing` (one call of
// set_activation_checkpointing per wrapped unit). Tests: tests/nn/test_checkpoint.cpp.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/grad_hook.h"
#include "nn/forward_call.h"
#include "nn/module.h"

namespace ember::nn {

// Runs function(args...) and returns its result, keeping none of the tensors
// that the operations inside save for backward. Backward runs function again
// on the same arguments, with every generator it drew from (the default one,
// shared by CPU and CUDA, or a module's own) and the autocast policy as the
// forward had them, and takes the saved tensors from that run; the graph it differentiates
// is the forward's own, so gradients reach the arguments, the leaves the
// function captured (a module's weights) and any tensor with a history it
// captured, and every hook on that graph fires as without checkpointing.
//
// `function` is a callable (copied, so a lambda capturing by reference must
// outlive backward) or an nn::Module (held by reference, called as
// module(args...), so its forward hooks run again in backward). Arguments are
// copied (tensors are handles) and may be of any type; the result may be any
// type. Under NoGradGuard it is a plain call. Errors name nn::checkpoint:
// an argument tensor modified in place before backward, a function that
// modifies its arguments, or one whose second run saves other tensors than
// its first (other control flow).
template <class F, class... Args>
auto checkpoint(F&& function, const Args&... args) {
  constexpr bool is_module = std::is_base_of_v<Module, std::remove_cvref_t<F>>;
  static_assert(!is_module || !std::is_const_v<std::remove_reference_t<F>>,
                "nn::checkpoint: a module is called through its hooks, which needs a non-const module");
  // A module is held by reference, anything else by value (a function name as a pointer).
  using Function = std::conditional_t<is_module, std::remove_reference_t<F>*, std::decay_t<F>>;
  if (!grad_mode_enabled()) {
    if constexpr (is_module) return function(args...);
    else return std::invoke(function, args...);
  }
  // What backward needs to run the function again: the callable and copies of the arguments.
  struct Call {
    Function function;
    std::tuple<Args...> arguments;
    auto operator()() {
      return std::apply(
          [this](const auto&... argument) {
            if constexpr (is_module) return (*function)(argument...);
            else return std::invoke(function, argument...);
          },
          arguments);
    }
  };
  auto call = [&] {
    if constexpr (is_module) return std::make_shared<Call>(Call{&function, {args...}});
    else return std::make_shared<Call>(Call{std::forward<F>(function), {args...}});
  }();
  std::vector<Tensor*> inputs;
  auto add_input = [&inputs](Tensor& tensor) { inputs.push_back(&tensor); };
  std::apply([&](auto&... argument) { (visit_tensors<false>(argument, add_input), ...); }, call->arguments);
  std::string name = "nn::checkpoint";
  if constexpr (is_module) name = fmt::format("nn::checkpoint({})", function.type_name());

  using Result = decltype((*call)());
  static_assert(!std::is_reference_v<Result>, "nn::checkpoint: the function must return by value");
  auto replay = [call] { (void)(*call)(); };
  if constexpr (std::is_void_v<Result>) {
    detail::run_checkpointed(std::move(name), inputs, replay, [&] { (*call)(); });
  } else {
    std::optional<Result> result;
    detail::run_checkpointed(std::move(name), inputs, replay, [&] { result.emplace((*call)()); });
    return Result(std::move(*result));
  }
}

// Every later call of `module` through its hooks (module(x), Module::call,
// any forward signature) runs forward checkpointed, until turned off with
// on = false. Per call, which hooks run again in backward:
//   - the module's own forward wrappers, pre-hooks and hooks run once, in the
//     forward, outside the checkpointed region: backward runs
//     module.forward(arguments as the pre-hooks left them) alone, under the
//     autocast policy that forward had (the wrappers' included);
//   - hooks of submodules that forward calls run again during that
//     recomputation (wrappers, pre-hooks, hooks), so a forward hook there
//     must tolerate a second call, which sees equal tensors;
//   - backward pre-hooks and backward hooks, the module's and its
//     submodules', fire once, as without checkpointing: they are on the
//     forward's graph, which is the one differentiated. The recomputation runs
//     when the first node inside forward needs its saved tensors, which is
//     after the module's backward pre-hooks fired (they run when a gradient
//     reaches one of its outputs), so parameters they gather are there.
// This is the arrangement of PyTorch's FSDP(checkpoint_wrapper(module)): a
// sharding pre-hook that gathers parameters and a hook that frees them stay
// outside the region. nn::checkpoint(module, x) instead puts module(x),
// hooks included, inside the region, so they run again in backward.
// The module must outlive the backward of its calls.
inline void set_activation_checkpointing(Module& module, bool on) { module.set_activation_checkpointing(on); }

}  // namespace ember::nn
