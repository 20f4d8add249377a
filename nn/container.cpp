// Containers (see container.h).
#include "nn/container.h"


namespace ember::nn {

const std::shared_ptr<Module>& IndexedModules::operator[](int64_t index) const {
  int64_t count = int64_t(size());
  EMBER_CHECK(index >= -count && index < count, "{}: index {} is out of range for {} modules", type_name(), index,
              count);
  return registered_children()[size_t(index < 0 ? index + count : index)].second;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  // Through operator(), so each child's forward hooks run (as PyTorch's).
  for (const std::shared_ptr<Module>& module : *this) x = (*module)(x);
  return x;
}

std::string ModuleList::str() const {
  if (empty()) return type_name() + "()";
  std::vector<std::string> reprs;
  for (const std::shared_ptr<Module>& module : *this) reprs.push_back(module->str());
  std::string out = type_name() + "(";
  for (size_t start = 0; start < reprs.size();) {
    size_t end = start;
    while (end + 1 < reprs.size() && reprs[end + 1] == reprs[start]) ++end;
    std::string line = end == start ? fmt::format("({}): {}", start, reprs[start])
                                    : fmt::format("({}-{}): {} x {}", start, end, end - start + 1, reprs[start]);
    // _addindent: nested lines gain two spaces.
    std::string indented;
    for (char c : line) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    out += "\n  " + indented;
    start = end + 1;
  }
  return out + "\n)";
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& entry : registered_children())
    if (entry.first == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& entry : registered_children()) out.push_back(entry.first);
  return out;
}

}  // namespace ember::nn
