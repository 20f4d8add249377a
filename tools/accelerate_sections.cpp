// See accelerate_sections.h. The keys and values are those Accelerate 1.x
// writes (accelerate/commands/config/cluster.py) and reads
// (utils/dataclasses.py: DeepSpeedPlugin, FullyShardedDataParallelPlugin),
// older spellings included; Note [Accelerate's DeepSpeed and FSDP keys] in
// tools/README.md has the table and the reasons.
#include "accelerate_sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"

namespace ember::launch {
namespace {

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return text;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// A setting a section implies, and where it came from (for conflicts).
struct Derived {
  std::string value;
  std::string where;    // "deepspeed_config.zero_stage at line 4"
  bool explicit_value;  // false: a default of distributed_type, which a top-level key beats
};

// Reads one section's entries into settings and warnings.
class SectionReader {
 public:
  SectionReader(ConfigFile& config, std::string section) : config_(config), section_(std::move(section)) {}

  // "config file 'P', line 7, deepspeed_config.zero_stage": the prefix of this key's messages.
  std::string where(int line, const std::string& key) const {
    return fmt::format("config file '{}', line {}, {}.{}", config_.path, line, section_, key);
  }

  // The value's text; nullopt when null or empty (unset, as at the top level).
  std::optional<std::string> scalar(const YAML::Node& value, const std::string& at) const {
    if (value.IsNull()) return std::nullopt;
    EMBER_CHECK(value.IsScalar(), "{}: expected a value, got a {}", at, value.IsSequence() ? "list" : "mapping");
    if (value.Scalar().empty()) return std::nullopt;
    return value.Scalar();
  }

  // Accelerate reads its sections' numbers with int() and float(), so '2' is 2.
  long long integer(const std::string& text, const std::string& at, long long low, long long high) const {
    std::optional<long long> value = parse_integer(text);
    EMBER_CHECK(value && *value >= low && *value <= high, "{}: '{}' is not an integer from {} to {}", at, text, low,
                high);
    return *value;
  }

  double number(const std::string& text, const std::string& at) const {
    double value = 0;
    auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    EMBER_CHECK(error == std::errc() && stop == text.data() + text.size() && std::isfinite(value) && value >= 0,
                "{}: '{}' is not a number of at least 0", at, text);
    return value;
  }

  // Accelerate's str_to_bool: YAML's booleans and the same words quoted.
  bool boolean(const std::string& text, const std::string& at) const {
    const std::string word = lower(text);
    for (const char* yes : {"y", "yes", "t", "true", "on", "1"}) {
      if (word == yes) return true;
    }
    for (const char* no : {"n", "no", "f", "false", "off", "0"}) {
      if (word == no) return false;
    }
    EMBER_CHECK(false, "{}: '{}' is not true or false", at, text);
    return false;
  }

  void set(const std::string& name, const std::string& value, int line, const std::string& key) {
    std::string at = fmt::format("{}.{} at line {}", section_, key, line);
    auto [entry, added] = derived.try_emplace(name, Derived{value, at, true});
    EMBER_CHECK(added || entry->second.value == value, "config file '{}': {} gives {} {} but {} gives {}; keep one",
                config_.path, entry->second.where, name, entry->second.value, at, value);
  }

  void warn(int line, const std::string& key, const std::string& text) {
    config_.warnings.push_back(fmt::format("config file '{}', line {}: {}.{}: {}", config_.path, line, section_, key, text));
  }

  std::map<std::string, Derived> derived;

 private:
  ConfigFile& config_;
  std::string section_;
};

// fsdp_sharding_strategy, and FSDP1's fsdp_reshard_after_forward: torch's
// ShardingStrategy by name (any case, as Accelerate upper-cases it) or by number.
std::string fsdp_strategy(const std::string& text, const std::string& at) {
  const std::string name = upper(text);
  if (name == "FULL_SHARD" || name == "1") return "zero3";
  if (name == "SHARD_GRAD_OP" || name == "2") return "zero2";
  if (name == "NO_SHARD" || name == "3") return "ddp";
  if (name == "HYBRID_SHARD" || name == "4") return "hybrid";
  EMBER_CHECK(name != "HYBRID_SHARD_ZERO2" && name != "_HYBRID_SHARD_ZERO2" && name != "5",
              "{}: '{}' (HYBRID_SHARD_ZERO2) is not a strategy ember has: its hybrid shards the parameters too inside "
              "a node (HYBRID_SHARD); use HYBRID_SHARD, or SHARD_GRAD_OP for zero2 over every process",
              at, text);
  EMBER_CHECK(false, "{}: '{}' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (or 1 to 4)", at, text);
  return "";
}

void read_deepspeed_entry(SectionReader& reader, const std::string& key, const YAML::Node& node, int line) {
  const std::string at = reader.where(line, key);
  std::optional<std::string> text = reader.scalar(node, at);
  if (key == "deepspeed_config_file") {
    EMBER_CHECK(!text, "{}: '{}': ember does not read DeepSpeed's JSON config; give zero_stage, "
                "gradient_accumulation_steps and gradient_clipping in deepspeed_config instead (or ember launch "
                "--strategy zero1/zero2/zero3), and remove deepspeed_config_file",
                at, *text);
    return;
  }
  if (!text) return;
  if (key == "zero_stage") {
    constexpr const char* kStrategies[] = {"ddp", "zero1", "zero2", "zero3"};
    reader.set("strategy", kStrategies[reader.integer(*text, at, 0, 3)], line, key);
  } else if (key == "gradient_accumulation_steps") {
    reader.set(key, std::to_string(reader.integer(*text, at, 1, std::numeric_limits<int>::max())), line, key);
  } else if (key == "gradient_clipping") {
    // DeepSpeed's gradient_clipping 0 means no clipping.
    double norm = reader.number(*text, at);
    if (norm > 0) reader.set("max_grad_norm", fmt::format("{}", norm), line, key);
  } else if (key == "offload_optimizer_device" || key == "offload_param_device") {
    const std::string device = lower(*text);
    EMBER_CHECK(device == "none" || device == "cpu" || device == "nvme", "{}: '{}' is not one of none, cpu, nvme", at,
                *text);
    const char* what = key == "offload_optimizer_device" ? "the optimizer state" : "the parameters";
    if (device != "none") {
      reader.warn(line, key,
                  fmt::format("{} is not honoured: ember keeps {} on the device it trains on (in a CPU job, the CPU's "
                              "memory already)",
                              device, what));
    }
  } else if (key == "offload_optimizer_nvme_path" || key == "offload_param_nvme_path") {
    reader.warn(line, key, "ignored: ember does not offload to NVMe");
  } else if (key == "zero3_init_flag") {
    if (reader.boolean(*text, at)) {
      reader.warn(line, key, "true is not honoured: every process builds the whole model, and prepare() shards it");
    }
  } else if (key == "zero3_save_16bit_model") {
    if (reader.boolean(*text, at)) {
      reader.warn(line, key, "true is not honoured: save_model writes the whole model in the parameters' own dtype");
    }
  } else if (key == "deepspeed_multinode_launcher") {
    // "standard" is torchrun's way, one launcher per machine: ember launch's.
    if (lower(*text) != "standard") {
      reader.warn(line, key,
                  fmt::format("'{}' ignored: ember launch runs on each machine itself (num_machines, machine_rank)",
                              *text));
    }
  } else if (key == "deepspeed_hostfile" || key == "deepspeed_inclusion_filter" || key == "deepspeed_exclusion_filter") {
    reader.warn(line, key, "ignored: ember launch runs on each machine itself (num_machines, machine_rank)");
  } else if (key == "deepspeed_moe_layer_cls_names") {
    reader.warn(line, key, "not honoured: ember has no mixture-of-experts layers to treat apart");
  } else {
    reader.warn(line, key, "unknown key ignored");
  }
}

void read_fsdp_entry(SectionReader& reader, const std::string& key, const YAML::Node& node, int line) {
  const std::string at = reader.where(line, key);
  std::optional<std::string> text = reader.scalar(node, at);
  if (!text) return;
  if (key == "fsdp_version") {
    reader.integer(*text, at, 1, 2);  // either reads the same here (fsdp_reshard_after_forward takes both forms)
  } else if (key == "fsdp_sharding_strategy") {
    reader.set("strategy", fsdp_strategy(*text, at), line, key);
  } else if (key == "fsdp_reshard_after_forward") {
    // FSDP2's boolean (true: FULL_SHARD, false: SHARD_GRAD_OP) or FSDP1's strategy name.
    const std::string word = lower(*text);
    bool is_boolean = word == "true" || word == "false" || word == "yes" || word == "no" || word == "on" || word == "off";
    std::string strategy = is_boolean ? (reader.boolean(*text, at) ? "zero3" : "zero2") : fsdp_strategy(*text, at);
    reader.set("strategy", strategy, line, key);
  } else if (key == "fsdp_auto_wrap_policy") {
    const std::string policy = upper(*text);
    std::string value = policy == "TRANSFORMER_BASED_WRAP" ? "transformer"
                        : policy == "SIZE_BASED_WRAP"      ? "size"
                        : policy == "NO_WRAP"              ? "none"
                                                           : "";
    EMBER_CHECK(!value.empty(), "{}: '{}' is not one of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP", at, *text);
    reader.set("wrap_policy", value, line, key);
  } else if (key == "fsdp_transformer_layer_cls_to_wrap") {
    reader.set("wrap_module_types", canonical_value(*find_config_key("wrap_module_types"), *text, at), line, key);
  } else if (key == "fsdp_min_num_params") {
    reader.set("min_num_params",
               std::to_string(reader.integer(*text, at, 1, std::numeric_limits<long long>::max())), line, key);
  } else if (key == "fsdp_state_dict_type") {
    // torch's StateDictType: FULL_STATE_DICT 1, LOCAL_STATE_DICT 2, SHARDED_STATE_DICT 3.
    const std::string type = upper(*text);
    if (type == "FULL_STATE_DICT" || type == "1") {
      reader.set("state_dict_type", "full", line, key);
    } else if (type == "SHARDED_STATE_DICT" || type == "3") {
      reader.set("state_dict_type", "sharded", line, key);
    } else if (type == "LOCAL_STATE_DICT" || type == "2") {
      reader.set("state_dict_type", "sharded", line, key);
      reader.warn(line, key,
                  "LOCAL_STATE_DICT is read as SHARDED_STATE_DICT: ember's sharded checkpoints carry a manifest and "
                  "load at any number of processes");
    } else {
      EMBER_CHECK(false, "{}: '{}' is not one of FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT", at, *text);
    }
  } else if (key == "fsdp_backward_prefetch" || key == "fsdp_backward_prefetch_policy") {
    // torch's BackwardPrefetch: BACKWARD_PRE 1, BACKWARD_POST 2; Accelerate's NO_PREFETCH is none.
    const std::string policy = upper(*text);
    bool prefetch = policy == "BACKWARD_PRE" || policy == "BACKWARD_POST" || policy == "1" || policy == "2";
    EMBER_CHECK(prefetch || policy == "NO_PREFETCH", "{}: '{}' is not one of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH",
                at, *text);
    reader.set("backward_prefetch", prefetch ? "true" : "false", line, key);
  } else if (key == "fsdp_forward_prefetch") {
    reader.set("forward_prefetch", reader.boolean(*text, at) ? "true" : "false", line, key);
  } else if (key == "fsdp_activation_checkpointing") {
    reader.set("activation_checkpointing", reader.boolean(*text, at) ? "true" : "false", line, key);
  } else if (key == "fsdp_offload_params") {
    if (reader.boolean(*text, at)) {
      reader.warn(line, key, "true is not honoured: ember keeps parameters and gradients on the device it trains on");
    }
  } else if (key == "fsdp_cpu_ram_efficient_loading") {
    if (reader.boolean(*text, at)) {
      reader.warn(line, key,
                  "true is not honoured: every process builds the whole model (prepare() then starts every process "
                  "from rank 0's parameters)");
    }
  } else if (key == "fsdp_sync_module_states") {
    // prepare() broadcasts rank 0's parameters, as DDP does: true is what ember does anyway.
    if (!reader.boolean(*text, at)) {
      reader.warn(line, key, "false is not honoured: prepare() always starts every process from rank 0's parameters");
    }
  } else if (key == "fsdp_use_orig_params") {
    // The optimizer always holds the model's own parameters: true is what ember does anyway.
    if (!reader.boolean(*text, at)) {
      reader.warn(line, key, "false is not honoured: the optimizer always sees the model's own parameters");
    }
  } else if (key == "fsdp_ignored_modules") {
    reader.warn(line, key, "not honoured: every module's parameters are sharded");
  } else {
    reader.warn(line, key, "unknown key ignored");
  }
}

// A section present with entries; null and {} (which Accelerate writes for
// the kinds of job that do not use it) count as absent.
bool has_entries(const YAML::Node& section, const std::string& path, int line, const char* name) {
  if (!section.IsDefined() || section.IsNull()) return false;
  EMBER_CHECK(section.IsMap(), "config file '{}', line {}, {}: expected a mapping of keys to values, got a {}", path,
              line, name, section.IsSequence() ? "list" : "value");
  return section.size() > 0;
}

// Reads a section's entries; fsdp_config's keys may lack their fsdp_ prefix,
// which Accelerate's launcher adds.
std::map<std::string, Derived> read_section(ConfigFile& config, const YAML::Node& section, const char* name) {
  SectionReader reader(config, name);
  const bool fsdp = std::string_view(name) == "fsdp_config";
  std::set<std::string> seen;
  for (const auto& entry : section) {
    const int line = entry.first.Mark().line + 1;
    EMBER_CHECK(entry.first.IsScalar(), "config file '{}', line {}, {}: a key must be a name", config.path, line, name);
    std::string key = entry.first.Scalar();
    if (fsdp && !key.starts_with("fsdp_")) key = "fsdp_" + key;
    EMBER_CHECK(seen.insert(key).second, "{}: the key appears twice", reader.where(line, key));
    if (fsdp) {
      read_fsdp_entry(reader, key, entry.second, line);
    } else {
      read_deepspeed_entry(reader, key, entry.second, line);
    }
  }
  return reader.derived;
}

// Why ember cannot run a kind of job Accelerate has.
std::string unsupported_kind(const std::string& kind) {
  if (kind == "XLA" || kind == "TPU") return "ember has no TPU or XLA backend";
  if (kind == "MEGATRON_LM" || kind == "TP") return "ember has no tensor parallelism";
  if (kind.starts_with("MULTI_")) return "ember runs on CPUs and NVIDIA GPUs (MULTI_CPU, MULTI_GPU)";
  return "it is not a kind of job ember knows";
}

}  // namespace

void apply_accelerate_sections(const AccelerateSections& sections, ConfigFile& config) {
  const std::string& path = config.path;
  std::optional<std::string> kind;
  if (sections.distributed_type.IsDefined() && !sections.distributed_type.IsNull()) {
    EMBER_CHECK(sections.distributed_type.IsScalar(), "config file '{}', line {}, distributed_type: expected a value",
                path, sections.distributed_type_line);
    kind = sections.distributed_type.Scalar();
    static const std::set<std::string> kRunnable = {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP"};
    EMBER_CHECK(kRunnable.count(*kind) > 0,
                "config file '{}', line {}, distributed_type: '{}' is not a kind of job ember runs ({}); use NO, "
                "MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP",
                path, sections.distributed_type_line, *kind, unsupported_kind(*kind));
  }
  // Accelerate's launcher runs distributed_type NO as one process whatever
  // num_processes says (its simple_launcher); ember started num_processes,
  // another world size and global batch from the same file.
  if (kind == "NO") {
    for (const char* key : {"num_processes", "num_machines"}) {
      auto entry = config.settings.find(key);
      if (entry == config.settings.end()) continue;
      long long count = 0;
      const std::string& text = entry->second;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
      auto line = sections.key_lines.find(key);
      EMBER_CHECK(error != std::errc() || end != text.data() + text.size() || count <= 1,
                  "config file '{}', line {}, {}: {}, but distributed_type NO (line {}) is one process, as "
                  "Accelerate runs it; set distributed_type: MULTI_CPU (or MULTI_GPU), or {}: 1",
                  path, line == sections.key_lines.end() ? 0 : line->second, key, text, sections.distributed_type_line,
                  key);
    }
  }
  const bool deepspeed = has_entries(sections.deepspeed_config, path, sections.deepspeed_config_line, "deepspeed_config");
  const bool fsdp = has_entries(sections.fsdp_config, path, sections.fsdp_config_line, "fsdp_config");
  EMBER_CHECK(!(deepspeed && fsdp),
              "config file '{}': deepspeed_config (line {}) and fsdp_config (line {}) are both set; a job shards one "
              "way: keep one",
              path, sections.deepspeed_config_line, sections.fsdp_config_line);
  auto check_kind = [&](bool present, const char* section, int line, const char* wanted) {
    EMBER_CHECK(!present || !kind || *kind == wanted,
                "config file '{}', line {}, {}: the section is set but distributed_type is {} (line {}), for which "
                "Accelerate ignores it; set distributed_type: {}, or remove the section",
                path, line, section, kind.value_or(""), sections.distributed_type_line, wanted);
  };
  check_kind(deepspeed, "deepspeed_config", sections.deepspeed_config_line, "DEEPSPEED");
  check_kind(fsdp, "fsdp_config", sections.fsdp_config_line, "FSDP");

  std::map<std::string, Derived> derived;
  if (deepspeed) derived = read_section(config, sections.deepspeed_config, "deepspeed_config");
  if (fsdp) derived = read_section(config, sections.fsdp_config, "fsdp_config");
  // Accelerate's defaults when the section does not say: DeepSpeedPlugin's
  // zero_stage 2, FullyShardedDataParallelPlugin's FULL_SHARD.
  if (!derived.count("strategy")) {
    if (deepspeed || kind == "DEEPSPEED") derived["strategy"] = {"zero2", "distributed_type DEEPSPEED", false};
    if (fsdp || kind == "FSDP") derived["strategy"] = {"zero3", "distributed_type FSDP", false};
  }
  // And DeepSpeedPlugin's gradient_clipping "auto", which Accelerator's
  // _prepare_deepspeed fills with 1.0: a DeepSpeed job under Accelerate clips
  // the global gradient norm at 1 unless the section says otherwise (0: none).
  const bool clipping_given = deepspeed && sections.deepspeed_config["gradient_clipping"].IsDefined();
  if ((deepspeed || kind == "DEEPSPEED") && !clipping_given)
    derived["max_grad_norm"] = {"1", "distributed_type DEEPSPEED (Accelerate's gradient_clipping 1.0)", false};

  // ember's own top-level strategy may pick the ZeRO stage, but ddp shards nothing.
  auto strategy = config.settings.find("strategy");
  const bool sharded = deepspeed || fsdp || kind == "DEEPSPEED" || kind == "FSDP";
  EMBER_CHECK(!sharded || strategy == config.settings.end() || strategy->second != "ddp",
              "config file '{}': strategy is ddp, which shards nothing, but distributed_type {} asks for sharding; keep "
              "one",
              path, kind.value_or(deepspeed ? "DEEPSPEED" : "FSDP"));
  for (const auto& [name, setting] : derived) {
    auto top = config.settings.find(name);
    if (top == config.settings.end()) {
      config.settings[name] = setting.value;
    } else if (setting.explicit_value) {
      auto line = sections.key_lines.find(name);
      EMBER_CHECK(top->second == setting.value, "config file '{}': {} is {} at line {} but {} gives {}; keep one", path,
                  name, top->second, line == sections.key_lines.end() ? 0 : line->second, setting.where, setting.value);
    }
  }
}

}  // namespace ember::launch
