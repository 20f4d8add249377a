// Containers: Sequential (chains single-tensor forwards), ModuleList and
// ModuleDict (hold modules so their parameters are registered, named by
// position or key). Each takes modules by value (moved into shared ownership)
// or by shared_ptr (shared with the caller): Note [Module ownership].
// Tests: tests/nn/test_module.cpp.
#pragma once

#include <cstddef>
#include <iterator>
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
// Its modules are all its children in registration order, so a child added
// with register_module (PyTorch's add_module) is in the list, counted by
// size() and run by Sequential's forward, as PyTorch's containers walk _modules.
class IndexedModules : public Module {
 public:
  // Iterates the modules, leaving out their names.
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::shared_ptr<Module>;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;
    iterator() = default;
    explicit iterator(NamedModules::const_iterator at) : at_(at) {}
    reference operator*() const { return at_->second; }
    pointer operator->() const { return &at_->second; }
    iterator& operator++() {
      ++at_;
      return *this;
    }
    iterator operator++(int) { return iterator(at_++); }
    bool operator==(const iterator&) const = default;

   private:
    NamedModules::const_iterator at_;
  };

  template <class M>
  void push_back(M&& module) {
    register_module(std::to_string(size()), detail::share(std::forward<M>(module)));
  }
  size_t size() const { return registered_children().size(); }
  bool empty() const { return registered_children().empty(); }
  // Negative indices count from the end, as in Python.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    return detail::cast_module<M>((*this)[index], fmt::format("{}[{}]", type_name(), index));
  }
  iterator begin() const { return iterator(registered_children().begin()); }
  iterator end() const { return iterator(registered_children().end()); }
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
  size_t size() const { return registered_children().size(); }
  auto begin() const { return registered_children().begin(); }
  auto end() const { return registered_children().end(); }
};

}  // namespace ember::nn
