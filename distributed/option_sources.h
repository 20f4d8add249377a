// Where an option of AcceleratorOptions or ShardingOptions comes from: the
// value set in code, else the EMBER_* variable `ember launch` set from its
// flags or config file, else none (the caller then uses its default). Used
// by accelerator/accelerator_options.cpp and zero/sharding_options.cpp.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "distributed/environment.h"

namespace ember::distributed {

// The option's value from code, else from `variable` through `parse`, else none.
template <class T, class Parse>
std::optional<T> from_code_or_env(const std::optional<T>& code, const char* variable, Parse parse) {
  if (code) return code;
  const char* text = std::getenv(variable);
  if (text == nullptr) return std::nullopt;
  return parse(variable, text);
}

inline std::optional<bool> flag_from_code_or_env(const std::optional<bool>& code, const char* variable) {
  return from_code_or_env(code, variable, parse_env_flag);
}

inline std::optional<std::string> text_from_code_or_env(const std::optional<std::string>& code, const char* variable) {
  return from_code_or_env(code, variable, [](const char*, const char* value) { return std::string(value); });
}

// Where a value came from, for error messages.
inline std::string option_origin(bool from_code, const char* variable) {
  return from_code ? "AcceleratorOptions" : std::string("the environment variable ") + variable;
}

}  // namespace ember::distributed
