// Resolving AcceleratorOptions: code, else the launcher's environment, else
// the defaults (see accelerator_options.h).
#include "distributed/accelerator/accelerator_options.h"

#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "distributed/environment.h"

namespace ember {
namespace {

// The option's value from code, else from `variable` through `parse`, else none.
template <class T, class Parse>
std::optional<T> from_code_or_env(const std::optional<T>& code, const char* variable, Parse parse) {
  if (code) return code;
  const char* text = std::getenv(variable);
  if (text == nullptr) return std::nullopt;
  return parse(variable, text);
}

std::optional<bool> flag(const std::optional<bool>& code, const char* variable) {
  return from_code_or_env(code, variable, distributed::parse_env_flag);
}

std::optional<int64_t> integer(const std::optional<int64_t>& code, const char* variable, int64_t low) {
  return from_code_or_env(code, variable, [low](const char* name, const char* text) {
    return distributed::parse_env_integer(name, text, low, std::numeric_limits<int64_t>::max());
  });
}

std::optional<std::string> text(const std::optional<std::string>& code, const char* variable) {
  return from_code_or_env(code, variable, [](const char*, const char* value) { return std::string(value); });
}

// Where a value came from, for error messages.
std::string origin(bool from_code, const char* variable) {
  return from_code ? "AcceleratorOptions" : std::string("the environment variable ") + variable;
}

}  // namespace

ResolvedAcceleratorOptions resolve_accelerator_options(const AcceleratorOptions& options) {
  ResolvedAcceleratorOptions resolved;
  if (auto value = text(options.mixed_precision, "EMBER_MIXED_PRECISION")) resolved.mixed_precision = *value;
  EMBER_CHECK(resolved.mixed_precision == "no" || resolved.mixed_precision == "fp16" ||
                  resolved.mixed_precision == "bf16",
              "Accelerator: mixed_precision '{}' (from {}) is not one of no, fp16, bf16", resolved.mixed_precision,
              origin(options.mixed_precision.has_value(), "EMBER_MIXED_PRECISION"));

  if (auto value = integer(options.gradient_accumulation_steps, "EMBER_GRADIENT_ACCUMULATION_STEPS", 1))
    resolved.gradient_accumulation_steps = *value;
  EMBER_CHECK(resolved.gradient_accumulation_steps >= 1,
              "Accelerator: gradient_accumulation_steps must be at least 1, got {} (from {})",
              resolved.gradient_accumulation_steps,
              origin(options.gradient_accumulation_steps.has_value(), "EMBER_GRADIENT_ACCUMULATION_STEPS"));

  resolved.cpu = flag(options.cpu, "EMBER_USE_CPU").value_or(false);
  resolved.split_batches = flag(options.split_batches, "EMBER_SPLIT_BATCHES").value_or(false);
  resolved.even_batches = flag(options.even_batches, "EMBER_EVEN_BATCHES").value_or(true);
  resolved.automatic_checkpoint_naming =
      flag(options.automatic_checkpoint_naming, "EMBER_AUTOMATIC_CHECKPOINT_NAMING").value_or(false);

  if (auto value = from_code_or_env(options.seed, "EMBER_SEED", [](const char* name, const char* value) {
        return uint64_t(distributed::parse_env_integer(name, value, 0, std::numeric_limits<int64_t>::max()));
      }))
    resolved.seed = *value;
  if (auto value = text(options.project_dir, "EMBER_PROJECT_DIR")) resolved.project_dir = *value;
  EMBER_CHECK(!resolved.project_dir.empty(), "Accelerator: project_dir (from {}) is empty",
              origin(options.project_dir.has_value(), "EMBER_PROJECT_DIR"));
  resolved.total_limit = integer(options.total_limit, "EMBER_TOTAL_LIMIT", 1);
  EMBER_CHECK(!resolved.total_limit || *resolved.total_limit >= 1,
              "Accelerator: total_limit must be at least 1, got {} (from AcceleratorOptions)", *resolved.total_limit);

  for (const std::string& tracker : options.log_with)
    EMBER_CHECK(tracker == "jsonl" || tracker == "csv", "Accelerator: unknown tracker '{}' in log_with (use jsonl or csv)",
                tracker);
  resolved.log_with = options.log_with;
  resolved.ddp = options.ddp;
  resolved.scaler = options.scaler;
  resolved.sharding = distributed::resolve_sharding_options(options.sharding);
  return resolved;
}

}  // namespace ember
