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

// An on/off variable's text: 1/true or 0/false; anything else, empty
// included, is an error naming the variable (as Accelerate's str_to_bool).
// Every on/off EMBER_* variable is read through this, so that none takes
// "false" or "yes" for something it is not.
bool parse_flag(std::string_view name, std::string_view text);
// The on/off variable `name` (parse_flag), or nullopt when it is unset.
std::optional<bool> flag_variable(const char* name);

// For an EMBER_* name that is not on the list, a warning naming it and the
// nearest known name when one is close; nullopt for a known name and for any
// name outside the EMBER_ prefix.
std::optional<std::string> unknown_ember_variable_warning(std::string_view name);

}  // namespace ember
