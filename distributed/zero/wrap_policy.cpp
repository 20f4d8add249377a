// The auto-wrap policies (see wrap_policy.h).
#include "distributed/zero/wrap_policy.h"

#include <algorithm>
#include <unordered_set>

namespace ember::distributed {
namespace {

int64_t parameter_elements(nn::Module& module) {
  int64_t count = 0;
  std::unordered_set<const TensorImpl*> seen;
  for (const Tensor& parameter : module.parameters())
    if (seen.insert(parameter.impl()).second) count += parameter.numel();
  return count;
}

std::string child_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

// Wraps, below `module`, the smallest subtrees of at least `minimum`
// elements; says whether it wrapped any.
bool wrap_by_size(nn::Module& module, const std::string& path, int64_t minimum, std::vector<WrappedUnit>& units) {
  bool wrapped_any = false;
  for (const auto& [name, child] : module.named_children()) {
    if (parameter_elements(*child) < minimum) continue;
    const std::string child_name = child_path(path, name);
    if (!wrap_by_size(*child, child_name, minimum, units)) units.push_back({child_name, child.get()});
    wrapped_any = true;
  }
  return wrapped_any;
}

}  // namespace

std::vector<WrappedUnit> choose_units(nn::Module& model, const ResolvedShardingOptions& options) {
  std::vector<WrappedUnit> units;
  if (options.wrap_policy == WrapPolicy::none) return units;
  if (options.wrap_policy == WrapPolicy::transformer) {
    const auto& types = options.wrap_module_types;
    for (const auto& entry : model.named_modules()) {
      const std::string& path = entry.first;
      if (path.empty() || std::find(types.begin(), types.end(), entry.second->type_name()) == types.end()) continue;
      const bool inside_another = std::any_of(units.begin(), units.end(), [&](const WrappedUnit& unit) {
        return path.starts_with(unit.name + ".");
      });
      if (!inside_another) units.push_back({path, entry.second});
    }
    if (!units.empty()) return units;
  }
  wrap_by_size(model, "", options.min_num_params, units);
  // Post-order from the recursion; the model's module order reads better.
  std::vector<WrappedUnit> ordered;
  for (const auto& [path, module] : model.named_modules())
    for (const WrappedUnit& unit : units)
      if (unit.module == module && unit.name == path) ordered.push_back(unit);
  return ordered;
}

}  // namespace ember::distributed
