// HookList: the callbacks registered on one object (a module's forward hooks,
// an optimizer's step hooks, a data loader's batch hooks, a scheduler's step
// hooks), in registration order, each under an id that is unique in the
// process, so that an owner with several lists can remove a hook from
// whichever holds it. This is how the Accelerator and DDP add behaviour to a
// user's objects without changing their types (distributed/README.md,
// Note [How prepare changes the user's objects]).
// Tests: tests/nn/test_forward_hooks.cpp, tests/optim/test_optimizer_hooks.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace ember {

using HookId = uint64_t;

// A fresh id, never 0 (0 can mean "no hook").
inline HookId next_hook_id() {
  static std::atomic<HookId> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

template <class Fn>
class HookList {
 public:
  HookId add(Fn fn) {
    HookId id = next_hook_id();
    entries_.emplace_back(id, std::move(fn));
    return id;
  }
  // Whether a hook with this id was here (and is now gone).
  bool remove(HookId id) {
    auto found = std::find_if(entries_.begin(), entries_.end(), [id](const auto& entry) { return entry.first == id; });
    if (found == entries_.end()) return false;
    entries_.erase(found);
    return true;
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The hooks in order, copied: a hook may remove itself (or another) while
  // the caller runs them.
  std::vector<Fn> snapshot() const {
    std::vector<Fn> hooks;
    hooks.reserve(entries_.size());
    for (const auto& entry : entries_) hooks.push_back(entry.second);
    return hooks;
  }

 private:
  std::vector<std::pair<HookId, Fn>> entries_;
};

}  // namespace ember
