// Example: what a Dataset returns for one index and what a DataLoader yields
// for one batch (the same struct, stacked along a new dim 0), so a training
// loop reads `for (auto& [inputs, targets] : loader)`. Tuple protocol below
// binds exactly (input, target); `extra` holds any further fields (a
// TensorDataset of N > 2 tensors). Tests: tests/data/test_dataset.cpp.
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::data {

struct Example {
  Tensor input;
  Tensor target;              // undefined for a dataset without targets
  std::vector<Tensor> extra;  // fields 2..N-1 of an N-field example
};

// Stacks each field of `examples` along a new dim 0, as torch's
// default_collate does for tensors: [B, *input shape], [B, *target shape], ...
// A field undefined in every example stays undefined.
Example default_collate(const std::vector<Example>& examples);

// Structured bindings: `auto& [input, target] = example`.
template <std::size_t I>
Tensor& get(Example& example) {
  static_assert(I < 2, "an Example binds as (input, target)");
  if constexpr (I == 0)
    return example.input;
  else
    return example.target;
}
template <std::size_t I>
const Tensor& get(const Example& example) {
  static_assert(I < 2, "an Example binds as (input, target)");
  if constexpr (I == 0)
    return example.input;
  else
    return example.target;
}
template <std::size_t I>
Tensor&& get(Example&& example) {
  return std::move(get<I>(example));
}

}  // namespace ember::data

template <>
struct std::tuple_size<ember::data::Example> : std::integral_constant<std::size_t, 2> {};
template <std::size_t I>
struct std::tuple_element<I, ember::data::Example> {
  using type = ember::Tensor;
};
