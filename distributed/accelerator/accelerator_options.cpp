// Resolving AcceleratorOptions: code, else the launcher's environment, else
// the defaults (see accelerator_options.h).
#include "distributed/accelerator/accelerator_options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "core/ember_variables.h"
#include "core/error.h"
#include "distributed/environment.h"
#include "distributed/option_sources.h"

extern char** environ;

namespace ember {
namespace {

using distributed::from_code_or_env;

std::optional<bool> flag(const std::optional<bool>& code, const char* variable) {
  return distributed::flag_from_code_or_env(code, variable);
}

std::optional<int64_t> integer(const std::optional<int64_t>& code, const char* variable, int64_t low) {
  return from_code_or_env(code, variable, [low](const char* name, const char* text) {
    return distributed::parse_env_integer(name, text, low, std::numeric_limits<int64_t>::max());
  });
}

std::optional<std::string> text(const std::optional<std::string>& code, const char* variable) {
  return distributed::text_from_code_or_env(code, variable);
}

std::string origin(bool from_code, const char* variable) { return distributed::option_origin(from_code, variable); }

// Note [Accelerate's variables]: the ACCELERATE_* variable that stands in for
// an EMBER_* one when code and the EMBER_* variable leave the option unset.
struct AccelerateVariable {
  const char* ember;
  const char* accelerate;
};
constexpr AccelerateVariable kAccelerateVariables[] = {
    {"EMBER_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION"},
    {"EMBER_GRADIENT_ACCUMULATION_STEPS", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
    {"EMBER_USE_CPU", "ACCELERATE_USE_CPU"},
};

// The variable that gives `ember`'s value: itself, else its ACCELERATE_* stand-in when set.
const char* source_variable(const char* ember) {
  if (std::getenv(ember) != nullptr) return ember;
  for (const AccelerateVariable& pair : kAccelerateVariables)
    if (std::string_view(pair.ember) == ember && std::getenv(pair.accelerate) != nullptr) return pair.accelerate;
  return ember;
}

// Accelerate's booleans (str_to_bool): y, yes, t, true, on, 1 and n, no, f, false, off, 0, any case.
bool parse_accelerate_flag(const char* name, const char* text) {
  std::string value = text;
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const char* yes : {"y", "yes", "t", "true", "on", "1"})
    if (value == yes) return true;
  for (const char* no : {"n", "no", "f", "false", "off", "0"})
    if (value == no) return false;
  EMBER_CHECK(false, "{}='{}' is not a flag (Accelerate's: yes/no, true/false, on/off, 1/0)", name, text);
  return false;
}

// A warning for every EMBER_* and ACCELERATE_* variable ember does not read
// (Note [Misspelt variables]), and for a stand-in that its EMBER_* variable overrides.
std::vector<std::string> environment_warnings() {
  std::vector<std::string> warnings;
  for (char** entry = environ; *entry; ++entry) {
    const std::string_view text(*entry);
    const std::string name(text.substr(0, text.find('=')));
    if (std::optional<std::string> unknown = unknown_ember_variable_warning(name)) warnings.push_back(*unknown);
    if (!name.starts_with("ACCELERATE_")) continue;
    const AccelerateVariable* read = nullptr;
    for (const AccelerateVariable& pair : kAccelerateVariables)
      if (name == pair.accelerate) read = &pair;
    if (read == nullptr) {
      warnings.push_back(fmt::format("{} is Accelerate's and ember does not honour it (it reads "
                                     "ACCELERATE_MIXED_PRECISION, ACCELERATE_GRADIENT_ACCUMULATION_STEPS and "
                                     "ACCELERATE_USE_CPU; distributed/README.md, Note [Accelerate's variables])",
                                     name));
    } else if (std::getenv(read->ember) != nullptr) {
      warnings.push_back(fmt::format("{} is ignored: {} is set and wins", name, read->ember));
    }
  }
  return warnings;
}

// The sharding options the ddp strategy has no use for, set away from their
// defaults (by code, EMBER_* or a config file): a warning each. DDP keeps whole
// replicas, so checkpoints hold whole tensors and nothing is gathered or
// prefetched; the wrap policy only chooses what activation checkpointing recomputes.
std::vector<std::string> ddp_ignores(const distributed::ResolvedShardingOptions& sharding) {
  if (sharding.strategy != distributed::ShardingStrategy::ddp) return {};
  const distributed::ResolvedShardingOptions defaults;
  std::vector<std::string> unused;
  if (sharding.full_state_dict != defaults.full_state_dict) unused.push_back("state_dict_type sharded");
  if (sharding.forward_prefetch != defaults.forward_prefetch) unused.push_back("forward_prefetch false");
  if (sharding.backward_prefetch != defaults.backward_prefetch) unused.push_back("backward_prefetch false");
  const bool wrap_changed = sharding.wrap_policy != defaults.wrap_policy ||
                            sharding.wrap_module_types != defaults.wrap_module_types ||
                            sharding.min_num_params != defaults.min_num_params;
  if (wrap_changed && !sharding.activation_checkpointing)
    unused.push_back("the wrap policy (wrap_policy, wrap_module_types, min_num_params)");
  std::vector<std::string> warnings;
  for (const std::string& option : unused)
    warnings.push_back(fmt::format("{} has no effect under the ddp strategy, which keeps whole replicas; use a "
                                   "sharded strategy (zero1, zero2, zero3, hybrid) or leave it unset",
                                   option));
  return warnings;
}

}  // namespace

ResolvedAcceleratorOptions resolve_accelerator_options(const AcceleratorOptions& options) {
  ResolvedAcceleratorOptions resolved;
  const char* precision_variable = source_variable("EMBER_MIXED_PRECISION");
  if (auto value = text(options.mixed_precision, precision_variable)) resolved.mixed_precision = *value;
  EMBER_CHECK(resolved.mixed_precision == "no" || resolved.mixed_precision == "fp16" ||
                  resolved.mixed_precision == "bf16",
              "Accelerator: mixed_precision '{}' (from {}) is not one of no, fp16, bf16", resolved.mixed_precision,
              origin(options.mixed_precision.has_value(), precision_variable));

  // Note [Where the launcher beats the code]: Accelerate's Accelerator reads
  // ACCELERATE_GRADIENT_ACCUMULATION_STEPS with its argument as the default,
  // and ACCELERATE_USE_CPU true forces the CPU whatever the argument says; so
  // do these two options here, with a warning where the code said otherwise.
  std::vector<std::string> overridden;
  const char* accumulation_variable = source_variable("EMBER_GRADIENT_ACCUMULATION_STEPS");
  const std::optional<int64_t> launched_steps = integer(std::nullopt, accumulation_variable, 1);
  if (auto value = launched_steps ? launched_steps : options.gradient_accumulation_steps)
    resolved.gradient_accumulation_steps = *value;
  EMBER_CHECK(resolved.gradient_accumulation_steps >= 1,
              "Accelerator: gradient_accumulation_steps must be at least 1, got {} (from {})",
              resolved.gradient_accumulation_steps, origin(!launched_steps, accumulation_variable));
  if (launched_steps && options.gradient_accumulation_steps && *options.gradient_accumulation_steps != *launched_steps)
    overridden.push_back(fmt::format("gradient_accumulation_steps {} set in code is replaced by {}={} (ember launch's "
                                     "flag or config file), as Accelerate's Accelerator does",
                                     *options.gradient_accumulation_steps, accumulation_variable, *launched_steps));

  const char* cpu_variable = source_variable("EMBER_USE_CPU");
  const std::optional<bool> launched_cpu = std::string_view(cpu_variable) == "EMBER_USE_CPU"
                                               ? flag(std::nullopt, cpu_variable)
                                               : from_code_or_env(std::optional<bool>(), cpu_variable, parse_accelerate_flag);
  resolved.cpu = options.cpu.value_or(false) || launched_cpu.value_or(false);
  if (options.cpu == false && launched_cpu == true)
    overridden.push_back(fmt::format("cpu = false set in code is replaced by {} (ember launch --cpu or use_cpu in the "
                                     "config file): the job runs on the CPU, as Accelerate's Accelerator does",
                                     cpu_variable));
  resolved.warnings = environment_warnings();
  resolved.warnings.insert(resolved.warnings.end(), overridden.begin(), overridden.end());
  resolved.split_batches = flag(options.split_batches, "EMBER_SPLIT_BATCHES").value_or(false);
  resolved.even_batches = flag(options.even_batches, "EMBER_EVEN_BATCHES").value_or(true);
  resolved.automatic_checkpoint_naming =
      flag(options.automatic_checkpoint_naming, "EMBER_AUTOMATIC_CHECKPOINT_NAMING").value_or(false);

  // Any 64-bit integer, a negative one wrapping to 2^64 + seed as torch.manual_seed
  // takes it: the launcher and the config file pass what they accept (seed: -12).
  if (auto value = from_code_or_env(options.seed, "EMBER_SEED", [](const char* name, const char* value) {
        return uint64_t(distributed::parse_env_integer(name, value, std::numeric_limits<int64_t>::min(),
                                                       std::numeric_limits<int64_t>::max()));
      }))
    resolved.seed = *value;
  if (auto value = text(options.project_dir, "EMBER_PROJECT_DIR")) resolved.project_dir = *value;
  EMBER_CHECK(!resolved.project_dir.empty(), "Accelerator: project_dir (from {}) is empty",
              origin(options.project_dir.has_value(), "EMBER_PROJECT_DIR"));
  resolved.total_limit = integer(options.total_limit, "EMBER_TOTAL_LIMIT", 1);
  EMBER_CHECK(!resolved.total_limit || *resolved.total_limit >= 1,
              "Accelerator: total_limit must be at least 1, got {} (from AcceleratorOptions)", *resolved.total_limit);
  // total_limit prunes the checkpoints automatic naming makes; with directories of the
  // program's naming it removed nothing, without a word (Accelerate ignores it too).
  EMBER_CHECK(!resolved.total_limit || resolved.automatic_checkpoint_naming,
              "Accelerator: total_limit {} (from {}) keeps the newest checkpoints that automatic_checkpoint_naming "
              "names, but that is off, so it would remove nothing; turn automatic_checkpoint_naming on or drop "
              "total_limit",
              *resolved.total_limit, origin(options.total_limit.has_value(), "EMBER_TOTAL_LIMIT"));

  for (size_t i = 0; i < options.log_with.size(); ++i) {
    const std::string& tracker = options.log_with[i];
    EMBER_CHECK(tracker == "jsonl" || tracker == "csv", "Accelerator: unknown tracker '{}' in log_with (use jsonl or csv)",
                tracker);
    EMBER_CHECK(std::find(options.log_with.begin(), options.log_with.begin() + i, tracker) == options.log_with.begin() + i,
                "Accelerator: log_with names '{}' twice; each tracker writes its one file", tracker);
  }
  resolved.log_with = options.log_with;
  if (auto value = text(options.profile_dir, "EMBER_PROFILE")) resolved.profile_dir = *value;
  resolved.ddp = options.ddp;
  resolved.scaler = options.scaler;
  resolved.sharding = distributed::resolve_sharding_options(options.sharding);
  // Checked here, not only by DistributedDataParallel: one process runs no
  // DDP and the ZeRO strategies reduce-scatter instead, and neither may drop
  // a hook that changes the numbers unseen.
  distributed::comm_hook_dtype(resolved.ddp.comm_hook);
  EMBER_CHECK(resolved.ddp.comm_hook == "no" || resolved.sharding.strategy == distributed::ShardingStrategy::ddp,
              "Accelerator: ddp.comm_hook \"{}\" compresses DistributedDataParallel's all-reduce, but the strategy is "
              "{}, whose collectives do not take it; set comm_hook to \"no\" or use the ddp strategy",
              resolved.ddp.comm_hook, distributed::to_string(resolved.sharding.strategy));
  // The other DDPOptions too (bucket sizes, find_unused_parameters, broadcast_buffers,
  // trace_prefix): a ZeRO strategy runs no DistributedDataParallel and used none of them.
  EMBER_CHECK(resolved.ddp == distributed::DDPOptions{} ||
                  resolved.sharding.strategy == distributed::ShardingStrategy::ddp,
              "Accelerator: options in ddp are set, but the strategy is {}, which runs no DistributedDataParallel and "
              "uses none of them; leave ddp at its defaults or use the ddp strategy",
              distributed::to_string(resolved.sharding.strategy));
  for (std::string& warning : ddp_ignores(resolved.sharding)) resolved.warnings.push_back(std::move(warning));
  return resolved;
}

}  // namespace ember
