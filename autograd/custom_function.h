// Custom autograd functions, torch.autograd.Function in C++: the user writes
// the forward and the backward, ember records one node for them.
//
//   struct SwiGLU : autograd::Function<SwiGLU> {
//     static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
//       ctx.save_for_backward({a, b});
//       return silu(a) * b;
//     }
//     static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
//       std::vector<Tensor> saved = ctx.saved_tensors();  // {a, b}
//       ...
//       return {grad_a, grad_b};  // one per argument of forward
//     }
//   };
//   Tensor y = SwiGLU::apply(a, b);
//
// Note [Custom functions] in autograd/README.md has the rules. Built on the
// same Node and connect() as the built-in formulas (autograd/function.h).
// Examples: examples/custom_function.cpp, examples/custom_op.cpp.
// Tests: tests/autograd/test_custom_function.cpp.
#pragma once

#include <any>
#include <array>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <typeinfo>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "core/grad_hook.h"

namespace ember::autograd {

// The class name of a type, without namespaces ("SwiGLU" for examples::SwiGLU).
std::string short_type_name(const std::type_info& type);

class FunctionCtx;
using CustomBackward = std::vector<Tensor> (*)(FunctionCtx&, const std::vector<Tensor>&);

// What forward hands to backward: saved tensors (version-checked), which
// inputs need a gradient, which outputs are not differentiable, and any
// non-tensor state.
class FunctionCtx {
 public:
  // Call in forward, once: the tensors backward will need. Inputs and outputs
  // of forward may both be saved. Modifying one in place before backward
  // makes backward raise an error, as for every built-in op.
  void save_for_backward(std::vector<Tensor> tensors);
  // Call in backward: the saved tensors, in the order they were saved.
  std::vector<Tensor> saved_tensors() const;

  // Whether argument i of forward (0 is the first after ctx) is a tensor
  // whose gradient is wanted: backward may skip computing the others.
  bool needs_input_grad(size_t i) const;

  // Call in forward with outputs (returned by forward) that have no
  // gradient, such as indices: they do not require grad, and backward gets
  // zeros for them.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);

  // Non-tensor state (sizes, flags, a scalar) for backward, by name.
  void save_data(const std::string& key, std::any value);
  template <class T>
  const T& saved_data(const std::string& key) const {
    const std::any& value = find_data(key);
    const T* typed = std::any_cast<T>(&value);
    EMBER_CHECK(typed != nullptr, "{}: saved_data(\"{}\") holds a {}, not a {}", name_, key,
                short_type_name(value.type()), short_type_name(typeid(T)));
    return *typed;
  }

 private:
  friend class CustomFunctionNode;
  friend std::shared_ptr<FunctionCtx> begin_custom_function(std::string name, std::span<const Tensor* const> inputs);
  friend std::vector<Tensor> finish_custom_function(const std::shared_ptr<FunctionCtx>& ctx, CustomBackward backward,
                                                    std::span<const Tensor* const> inputs,
                                                    std::vector<Tensor> outputs);
  const std::any& find_data(const std::string& key) const;

  std::string name_;                        // the Function's class name, for error messages
  std::vector<bool> needs_input_grad_;      // one per argument of forward
  std::vector<Tensor> to_save_;             // during forward
  std::vector<SavedTensor> saved_;          // after forward
  std::vector<int> saved_output_nr_;        // per saved tensor: which output of forward it is, or -1
  std::weak_ptr<Node> node_;                // gives saved outputs their history back (create_graph)
  std::vector<const TensorImpl*> non_differentiable_;
  std::map<std::string, std::any> data_;
  bool forward_done_ = false;
};

// The two halves of Function::apply that need no template (custom_function.cpp).
// Before forward: a context for a function called `name` on these arguments
// (null: not a tensor). After: aliases outputs that are inputs, records the
// node when grad mode is on and an input requires grad, returns the outputs.
std::shared_ptr<FunctionCtx> begin_custom_function(std::string name, std::span<const Tensor* const> inputs);
std::vector<Tensor> finish_custom_function(const std::shared_ptr<FunctionCtx>& ctx, CustomBackward backward,
                                           std::span<const Tensor* const> inputs, std::vector<Tensor> outputs);
namespace detail {
template <class T>
const Tensor* tensor_argument(const T& argument) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) return &argument;
  else return nullptr;
}
template <class T>
struct is_tensor_tuple : std::false_type {};
template <class... Ts>
struct is_tensor_tuple<std::tuple<Ts...>> : std::bool_constant<(std::is_same_v<Ts, Tensor> && ...)> {};
}  // namespace detail

// The base of a user's function: Derived has
//   static R forward(FunctionCtx& ctx, Args... args);   R: Tensor, std::vector<Tensor> or std::tuple<Tensor...>
//   static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grad_outputs);
// and is called as Derived::apply(args...). Tensor arguments are the inputs
// a gradient can flow to; other arguments (numbers, options) are passed
// through. backward returns one gradient per argument of forward, an
// undefined Tensor() for non-tensor arguments and inputs without one.
template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(const Args&... args) {
    std::array<const Tensor*, sizeof...(Args)> inputs{detail::tensor_argument(args)...};
    std::shared_ptr<FunctionCtx> ctx = begin_custom_function(short_type_name(typeid(Derived)), inputs);
    // Forward runs without recording: its ops become one node, whose gradient is backward.
    auto result = [&] {
      NoGradGuard no_grad;
      return Derived::forward(*ctx, args...);
    }();
    using Result = decltype(result);
    CustomBackward backward = +[](FunctionCtx& c, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
      return Derived::backward(c, grads);
    };
    if constexpr (std::is_same_v<Result, Tensor>) {
      return finish_custom_function(ctx, backward, inputs, {std::move(result)})[0];
    } else if constexpr (std::is_same_v<Result, std::vector<Tensor>>) {
      return finish_custom_function(ctx, backward, inputs, std::move(result));
    } else {
      static_assert(detail::is_tensor_tuple<Result>::value,
                    "forward must return a Tensor, a std::vector<Tensor> or a std::tuple of Tensors");
      std::vector<Tensor> flat = std::apply([](const auto&... t) { return std::vector<Tensor>{t...}; }, result);
      flat = finish_custom_function(ctx, backward, inputs, std::move(flat));
      return [&]<size_t... I>(std::index_sequence<I...>) { return Result{flat[I]...}; }(
          std::make_index_sequence<std::tuple_size_v<Result>>());
    }
  }
};

}  // namespace ember::autograd
