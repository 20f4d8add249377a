// Resolving ShardingOptions: code, else the EMBER_* variable `ember launch`
// sets, else the default (see sharding_options.h). The launcher's side of the
// same variables is tools/config_keys.cpp; change them together.
// Tests: tests/distributed/test_accelerator_options.cpp.
#include "distributed/zero/sharding_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "distributed/environment.h"
#include "distributed/option_sources.h"

namespace ember::distributed {
namespace {

std::string origin(bool from_code, const char* variable) { return option_origin(from_code, variable); }

std::optional<std::string> text(const std::optional<std::string>& code, const char* variable) {
  return text_from_code_or_env(code, variable);
}

std::optional<bool> flag(const std::optional<bool>& code, const char* variable) {
  return flag_from_code_or_env(code, variable);
}

// "GPT2Block, T5Block" -> {"GPT2Block", "T5Block"} (spaces around names
// dropped, as the launcher does); empty names are errors.
std::vector<std::string> split_type_names(const char* variable, const char* text) {
  std::vector<std::string> names;
  std::string_view rest = text;
  for (;;) {
    size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    EMBER_CHECK(!name.empty(), "{}='{}' is not a comma-separated list of module type names (an empty name)", variable,
                text);
    names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return names;
}

// A finite decimal number, checked for range by the caller.
double parse_number(const char* variable, const char* text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  // A subnormal (1e-310) sets ERANGE but is a number: the config file and the
  // launcher took it, and then every worker refused it.
  const bool subnormal = errno == ERANGE && value != 0 && std::isfinite(value);
  EMBER_CHECK(*text != '\0' && *end == '\0' && (errno == 0 || subnormal) && std::isfinite(value),
              "{}='{}' is not a number", variable, text);
  return value;
}

}  // namespace

std::string_view to_string(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::ddp: return "ddp";
    case ShardingStrategy::zero1: return "zero1";
    case ShardingStrategy::zero2: return "zero2";
    case ShardingStrategy::zero3: return "zero3";
    case ShardingStrategy::hybrid: return "hybrid";
  }
  return "?";
}

std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text) {
  if (text == "ddp") return ShardingStrategy::ddp;
  if (text == "zero1") return ShardingStrategy::zero1;
  if (text == "zero2") return ShardingStrategy::zero2;
  if (text == "zero3" || text == "fsdp") return ShardingStrategy::zero3;
  if (text == "hybrid") return ShardingStrategy::hybrid;
  return std::nullopt;
}

ResolvedShardingOptions resolve_sharding_options(const ShardingOptions& options) {
  ResolvedShardingOptions resolved;

  if (auto value = text(options.strategy, "EMBER_STRATEGY")) {
    std::optional<ShardingStrategy> strategy = parse_sharding_strategy(*value);
    EMBER_CHECK(strategy.has_value(), "Accelerator: strategy '{}' (from {}) is not one of ddp, zero1, zero2, zero3, fsdp, hybrid",
                *value, origin(options.strategy.has_value(), "EMBER_STRATEGY"));
    resolved.strategy = *strategy;
  }

  if (auto value = text(options.wrap_policy, "EMBER_WRAP_POLICY")) {
    if (*value == "transformer") {
      resolved.wrap_policy = WrapPolicy::transformer;
    } else if (*value == "size") {
      resolved.wrap_policy = WrapPolicy::size;
    } else if (*value == "none") {
      resolved.wrap_policy = WrapPolicy::none;
    } else {
      EMBER_CHECK(false, "Accelerator: wrap_policy '{}' (from {}) is not one of transformer, size, none", *value,
                  origin(options.wrap_policy.has_value(), "EMBER_WRAP_POLICY"));
    }
  }

  if (auto value = from_code_or_env(options.wrap_module_types, "EMBER_WRAP_MODULE_TYPES", split_type_names)) {
    EMBER_CHECK(!value->empty(), "Accelerator: wrap_module_types (from AcceleratorOptions) is empty");
    for (const std::string& name : *value) {
      EMBER_CHECK(!name.empty() && name.find(',') == std::string::npos,
                  "Accelerator: wrap_module_types holds '{}' (from AcceleratorOptions), not a module type name", name);
    }
    resolved.wrap_module_types = *value;
  }

  if (auto value = from_code_or_env(options.min_num_params, "EMBER_WRAP_MIN_NUM_PARAMS",
                                    [](const char* name, const char* text) {
                                      return parse_env_integer(name, text, 1, std::numeric_limits<int64_t>::max());
                                    })) {
    resolved.min_num_params = *value;
  }
  EMBER_CHECK(resolved.min_num_params >= 1, "Accelerator: min_num_params must be at least 1, got {} (from {})",
              resolved.min_num_params, origin(options.min_num_params.has_value(), "EMBER_WRAP_MIN_NUM_PARAMS"));

  if (auto value = text(options.state_dict_type, "EMBER_STATE_DICT_TYPE")) {
    EMBER_CHECK(*value == "sharded" || *value == "full",
                "Accelerator: state_dict_type '{}' (from {}) is not one of sharded, full", *value,
                origin(options.state_dict_type.has_value(), "EMBER_STATE_DICT_TYPE"));
    resolved.full_state_dict = *value == "full";
  }

  resolved.forward_prefetch = flag(options.forward_prefetch, "EMBER_FORWARD_PREFETCH").value_or(true);
  resolved.backward_prefetch = flag(options.backward_prefetch, "EMBER_BACKWARD_PREFETCH").value_or(true);
  resolved.activation_checkpointing =
      flag(options.activation_checkpointing, "EMBER_ACTIVATION_CHECKPOINTING").value_or(false);

  resolved.max_grad_norm = from_code_or_env(options.max_grad_norm, "EMBER_MAX_GRAD_NORM", parse_number);
  if (resolved.max_grad_norm) {
    EMBER_CHECK(std::isfinite(*resolved.max_grad_norm) && *resolved.max_grad_norm > 0,
                "Accelerator: max_grad_norm must be a positive number, got {} (from {})", *resolved.max_grad_norm,
                origin(options.max_grad_norm.has_value(), "EMBER_MAX_GRAD_NORM"));
  }
  return resolved;
}

}  // namespace ember::distributed
