// Containers: Sequential (chains single-tensor forwards), ModuleList and
// ModuleDict (hold modules so their parameters are registered, named by
// position or key). Each takes modules by value (moved into shared ownership)
// or by shared_ptr (shared with the caller): Note [Module ownership].
// Tests: tests/nn/test_module.cpp.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ember::nn {

namespace detail {
template <class M>
struct is_module_pointer : std::false_type {};
template <class M>
struct is_module_pointer<std::shared_ptr<M>> : std::is_base_of<Module, M> {};

// A module passed by shared_ptr, or an rvalue module moved into one.
template <class M>
std::shared_ptr<Module> share(M&& module) {
  using Plain = std::decay_t<M>;
  if constexpr (is_module_pointer<Plain>::value) {
    return std::forward<M>(module);
  } else {
    static_assert(std::is_base_of_v<Module, Plain> && !std::is_lvalue_reference_v<M>,
                  "pass an nn::Module by value (std::move it) or as a std::shared_ptr");
    return std::make_shared<Plain>(std::forward<M>(module));
  }
}

// The module of type M in a container slot, or an error naming both types.
template <class M>
std::shared_ptr<M> cast_module(const std::shared_ptr<Module>& module, const std::string& where) {
  auto typed = std::dynamic_pointer_cast<M>(module);
  EMBER_CHECK(typed != nullptr, "{}: holds a {}, not the type asked for", where, module->type_name());
  return typed;
}
}  // namespace detail

// A module list with positional names, shared by Sequential and ModuleList.
class IndexedModules : public Module {
 public:
  template <class M>
  void push_back(M&& module) {
    std::shared_ptr<Module> shared = detail::share(std::forward<M>(module));
    register_module(std::to_string(items_.size()), shared);
    items_.push_back(std::move(shared));
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  // Negative indices count from the end, as in Python.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    return detail::cast_module<M>((*this)[index], fmt::format("{}[{}]", type_name(), index));
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class Sequential : public IndexedModules {
 public:
  Sequential() = default;
  template <class First, class... Rest,
            class = std::enable_if_t<sizeof...(Rest) != 0 || !std::is_same_v<std::decay_t<First>, Sequential>>>
  explicit Sequential(First&& first, Rest&&... rest) {
    push_back(std::forward<First>(first));
    (push_back(std::forward<Rest>(rest)), ...);
  }
  // Each module's output is the next one's input.
  Tensor forward(const Tensor& input) override;
};

class ModuleList : public IndexedModules {
 public:
  ModuleList() = default;
  template <class First, class... Rest,
            class = std::enable_if_t<sizeof...(Rest) != 0 || !std::is_same_v<std::decay_t<First>, ModuleList>>>
  explicit ModuleList(First&& first, Rest&&... rest) {
    push_back(std::forward<First>(first));
    (push_back(std::forward<Rest>(rest)), ...);
  }
  // PyTorch 2's ModuleList repr: runs of identical children print once, as "(0-3): 4 x Block(...)".
  std::string str() const override;
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  // Keys keep their insertion order; inserting an existing key is an error.
  template <class M>
  void insert(const std::string& key, M&& module) {
    register_module(key, detail::share(std::forward<M>(module)));
  }
  bool contains(const std::string& key) const;
  std::shared_ptr<Module> operator[](const std::string& key) const { return child(key); }
  template <class M>
  std::shared_ptr<M> at(const std::string& key) const {
    return detail::cast_module<M>(child(key), fmt::format("{}[\"{}\"]", type_name(), key));
  }
  std::vector<std::string> keys() const;
  size_t size() const { return named_children().size(); }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};

}  // namespace ember::nn
