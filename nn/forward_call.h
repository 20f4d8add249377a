// What a module's hooks see of one call, whatever the forward's signature:
// the tensors among its arguments and among its result. nn::Module::call
// fills a ForwardCall from the arguments and the value forward returned, so
// DistributedDataParallel, the Accelerator's autocast, sharding and user hooks
// work the same for `forward(x)`, `forward(idx, targets)` or a forward that
// returns a struct (Note [Module calls] in nn/README.md).
// Tests: tests/nn/test_forward_hooks.cpp.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::nn {

class Module;

struct ForwardCall {
  Module& module;
  // The defined tensors among the arguments, in order. A pre-hook may assign
  // to *inputs[i]; forward then sees the new tensor (the caller's is untouched).
  std::vector<Tensor*> inputs;
  // The defined tensors in forward's result, in order; empty until forward
  // returns. A hook may assign to *outputs[i] to replace one in the result.
  std::vector<Tensor*> outputs;
};

namespace detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T, class = void>
struct is_tuple_like : std::false_type {};
template <class T>
struct is_tuple_like<T, std::void_t<decltype(std::tuple_size<T>::value)>> : std::true_type {};

template <class T, class = void>
struct is_range : std::false_type {};
template <class T>
struct is_range<T, std::void_t<decltype(std::declval<T&>().begin()), decltype(std::declval<T&>().end())>>
    : std::true_type {};

// Values that cannot hold a tensor: skipped without a word.
template <class T>
constexpr bool holds_no_tensor = std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_pointer_v<T> ||
                                 std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view> ||
                                 std::is_same_v<T, std::nullopt_t> || std::is_same_v<T, DType> ||
                                 std::is_same_v<T, Device>;

template <class T>
constexpr bool always_false = false;

}  // namespace detail

// Calls visit(Tensor&) on every defined tensor inside `value`: a Tensor, and
// tensors held in std::optional, std::pair, std::tuple, std::array, a range
// (std::vector), or a struct with a `for_each_tensor(visit)` member template.
// `strict`: another class type is a compile error, since a tensor hidden in it
// would escape the hooks (results are visited strictly); arguments are visited
// leniently, so an options struct passes.
template <bool strict, class T, class Visit>
void visit_tensors(T& value, Visit& visit) {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    if (value.defined()) visit(value);
  } else if constexpr (detail::holds_no_tensor<U>) {
  } else if constexpr (detail::is_optional<U>::value) {
    if (value) visit_tensors<strict>(*value, visit);
  } else if constexpr (requires { value.for_each_tensor(visit); }) {
    auto defined_only = [&](Tensor& tensor) {
      if (tensor.defined()) visit(tensor);
    };
    value.for_each_tensor(defined_only);
  } else if constexpr (detail::is_tuple_like<U>::value) {
    std::apply([&](auto&... element) { (visit_tensors<strict>(element, visit), ...); }, value);
  } else if constexpr (detail::is_range<U>::value) {
    for (auto& element : value) visit_tensors<strict>(element, visit);
  } else if constexpr (strict) {
    static_assert(detail::always_false<U>,
                  "nn::Module::call: forward returns a type whose tensors the module hooks cannot find; return "
                  "Tensor, std::pair/std::tuple/std::vector/std::optional of them, or give the type a member "
                  "`template <class F> void for_each_tensor(F& visit)` that calls visit(t) on each tensor");
  }
}

}  // namespace ember::nn
