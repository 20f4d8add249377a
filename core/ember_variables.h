// The EMBER_* environment variables: every one the library and the `ember`
// command read, in one list, so that a misspelt name is reported instead of
// silently changing nothing (Note [Misspelt variables], core/README.md).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ember {

struct EmberVariable {
  std::string_view name;
  std::string_view meaning;  // one line, for `ember env` and the warnings
};

// Every EMBER_* variable read anywhere, sorted by name.
std::span<const EmberVariable> ember_variables();

// For an EMBER_* name that is not on the list, a warning naming it and the
// nearest known name when one is close; nullopt for a known name and for any
// name outside the EMBER_ prefix.
std::optional<std::string> unknown_ember_variable_warning(std::string_view name);

}  // namespace ember
