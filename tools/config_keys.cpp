// See config_keys.h.
#include "config_keys.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "distributed/zero/sharding_options.h"

namespace ember::launch {
namespace {

// Note [Launcher configuration]: the variables are the contract with the
// Accelerator (distributed/accelerator); change them together.
constexpr ConfigKey kKeys[] = {
    {"num_processes", ValueKind::positive_integer, "", "Processes of the job, on all machines together"},
    {"num_machines", ValueKind::positive_integer, "", "Machines of the job (one launcher each)"},
    {"machine_rank", ValueKind::non_negative_integer, "", "This machine's index; machine 0 hosts the store"},
    {"main_process_ip", ValueKind::text, "", "Address of machine 0, where the store is"},
    {"main_process_port", ValueKind::port, "", "Port of the store on machine 0"},
    {"mixed_precision", ValueKind::mixed_precision, "EMBER_MIXED_PRECISION", "no, fp16 or bf16"},
    {"gradient_accumulation_steps", ValueKind::positive_integer, "EMBER_GRADIENT_ACCUMULATION_STEPS",
     "Batches per optimizer step"},
    {"use_cpu", ValueKind::boolean, "EMBER_USE_CPU", "Train on the CPU even when there is a GPU"},
    {"split_batches", ValueKind::boolean, "EMBER_SPLIT_BATCHES", "Split each batch between the processes"},
    {"even_batches", ValueKind::boolean, "EMBER_EVEN_BATCHES", "Give every process as many batches as the others"},
    {"seed", ValueKind::integer, "EMBER_SEED", "The seed every process starts from"},
    {"project_dir", ValueKind::text, "EMBER_PROJECT_DIR", "Directory of checkpoints and logs"},
    {"automatic_checkpoint_naming", ValueKind::boolean, "EMBER_AUTOMATIC_CHECKPOINT_NAMING",
     "Name checkpoints project_dir/checkpoints/checkpoint_N"},
    {"total_limit", ValueKind::positive_integer, "EMBER_TOTAL_LIMIT", "Checkpoints to keep"},
    {"strategy", ValueKind::strategy, "EMBER_STRATEGY",
     "ddp, zero1, zero2, zero3 (fsdp) or hybrid: what each process keeps of the model's state"},
    {"wrap_policy", ValueKind::wrap_policy, "EMBER_WRAP_POLICY",
     "transformer, size or none: which modules zero3 gathers as units"},
    {"wrap_module_types", ValueKind::type_names, "EMBER_WRAP_MODULE_TYPES",
     "Module types that are units under the transformer policy (comma-separated)"},
    {"min_num_params", ValueKind::count, "EMBER_WRAP_MIN_NUM_PARAMS", "Parameters of a unit under the size policy"},
    {"state_dict_type", ValueKind::state_dict_type, "EMBER_STATE_DICT_TYPE",
     "sharded or full: how save_state writes a sharded model"},
    {"forward_prefetch", ValueKind::boolean, "EMBER_FORWARD_PREFETCH", "Gather the next unit during forward"},
    {"backward_prefetch", ValueKind::boolean, "EMBER_BACKWARD_PREFETCH", "Gather the next unit during backward"},
    {"activation_checkpointing", ValueKind::boolean, "EMBER_ACTIVATION_CHECKPOINTING",
     "Recompute each unit's activations in backward"},
    {"max_grad_norm", ValueKind::positive_number, "EMBER_MAX_GRAD_NORM",
     "Clip the global gradient norm to this before each optimizer step"},
};

// "A, B" -> "A,B"; nullopt for an empty name or one with a space inside.
std::optional<std::string> canonical_type_names(std::string_view text) {
  std::string names;
  for (;;) {
    size_t comma = text.find(',');
    std::string_view name = text.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    bool plain = std::all_of(name.begin(), name.end(), [](unsigned char c) { return c > 0x20 && c != 0x7f; });
    if (name.empty() || !plain) return std::nullopt;
    if (!names.empty()) names += ',';
    names.append(name);
    if (comma == std::string_view::npos) return names;
    text = text.substr(comma + 1);
  }
}

// The shortest text that reads back as the same double: "1.0" -> "1", "1e-3" -> "0.001".
std::optional<std::string> canonical_positive_number(std::string_view text) {
  double value = 0;
  auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || stop != text.data() + text.size()) return std::nullopt;
  if (!std::isfinite(value) || value <= 0) return std::nullopt;
  return fmt::format("{}", value);
}

}  // namespace

std::optional<long long> parse_integer(std::string_view text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::span<const ConfigKey> config_keys() { return kKeys; }

bool is_string_kind(ValueKind kind) {
  switch (kind) {
    case ValueKind::mixed_precision:
    case ValueKind::text:
    case ValueKind::strategy:
    case ValueKind::wrap_policy:
    case ValueKind::state_dict_type:
    case ValueKind::type_names:
      return true;
    default:
      return false;
  }
}

const ConfigKey* find_config_key(std::string_view name) {
  auto found = std::find_if(std::begin(kKeys), std::end(kKeys), [&](const ConfigKey& key) { return key.name == name; });
  return found == std::end(kKeys) ? nullptr : found;
}

std::string flag_name(std::string_view key_name) {
  if (key_name == "use_cpu") return "--cpu";  // Accelerate's name for it
  std::string flag = "--" + std::string(key_name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string_view describe_kind(ValueKind kind) {
  switch (kind) {
    case ValueKind::mixed_precision: return "one of no, fp16 or bf16";
    case ValueKind::positive_integer: return "an integer of at least 1";
    case ValueKind::non_negative_integer: return "an integer of at least 0";
    case ValueKind::integer: return "a 64-bit integer";
    case ValueKind::port: return "a TCP port (1 to 65535)";
    case ValueKind::boolean: return "true or false";
    case ValueKind::text: return "a non-empty string";
    case ValueKind::strategy: return "one of ddp, zero1, zero2, zero3, fsdp or hybrid";
    case ValueKind::wrap_policy: return "one of transformer, size or none";
    case ValueKind::state_dict_type: return "one of sharded or full";
    case ValueKind::type_names: return "a comma-separated list of module type names";
    case ValueKind::count: return "an integer of at least 1";
    case ValueKind::positive_number: return "a positive number";
  }
  return "";
}

std::optional<std::string> parse_value(const ConfigKey& key, std::string_view text) {
  switch (key.kind) {
    case ValueKind::mixed_precision:
      if (text == "no" || text == "fp16" || text == "bf16") return std::string(text);
      return std::nullopt;
    case ValueKind::boolean:
      if (text == "true" || text == "false") return std::string(text);
      return std::nullopt;
    case ValueKind::text:
      if (!text.empty()) return std::string(text);
      return std::nullopt;
    case ValueKind::strategy:
      if (distributed::parse_sharding_strategy(text)) return std::string(text);
      return std::nullopt;
    case ValueKind::wrap_policy:
      if (text == "transformer" || text == "size" || text == "none") return std::string(text);
      return std::nullopt;
    case ValueKind::state_dict_type:
      if (text == "sharded" || text == "full") return std::string(text);
      return std::nullopt;
    case ValueKind::type_names:
      return canonical_type_names(text);
    case ValueKind::positive_number:
      return canonical_positive_number(text);
    case ValueKind::count:
    case ValueKind::positive_integer:
    case ValueKind::non_negative_integer:
    case ValueKind::integer:
    case ValueKind::port: {
      constexpr long long kLowest = std::numeric_limits<long long>::min();
      constexpr long long kHighest = std::numeric_limits<long long>::max();
      constexpr long long kIntMax = std::numeric_limits<int>::max();
      auto [low, high] = key.kind == ValueKind::positive_integer       ? std::pair(1LL, kIntMax)
                         : key.kind == ValueKind::count                ? std::pair(1LL, kHighest)
                         : key.kind == ValueKind::non_negative_integer ? std::pair(0LL, kIntMax)
                         : key.kind == ValueKind::port                 ? std::pair(1LL, 65535LL)
                                                                       : std::pair(kLowest, kHighest);
      std::optional<long long> value = parse_integer(text);
      if (value && *value >= low && *value <= high) return std::to_string(*value);
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::string canonical_value(const ConfigKey& key, std::string_view text, std::string_view where) {
  std::optional<std::string> value = parse_value(key, text);
  EMBER_CHECK(value.has_value(), "{}: '{}' is not {}", where, text, describe_kind(key.kind));
  return *value;
}

std::optional<long long> integer_setting(const Settings& settings, std::string_view name) {
  auto found = settings.find(std::string(name));
  if (found == settings.end()) return std::nullopt;
  std::optional<long long> value = parse_integer(found->second);
  EMBER_ASSERT(value.has_value(), "setting {} = '{}' is not an integer", name, found->second);
  return value;
}

}  // namespace ember::launch
