// The auto-wrap policies (see wrap_policy.h).
#include "distributed/zero/wrap_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "core/error.h"

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
    std::set<std::string> present;
    for (const auto& entry : model.named_modules()) present.insert(entry.second->type_name());
    for (const std::string& type : types)
      EMBER_CHECK(type == "TransformerBlock" || present.contains(type),
                  "ZeRO: wrap_module_types names '{}', which is the type of no module of the model (its types: {}); "
                  "Module::type_name() is what is matched",
                  type, fmt::join(present, ", "));
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
