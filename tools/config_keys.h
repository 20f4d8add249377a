// The keys of ember's config file and what each accepts: the launch's own
// (Accelerate's num_processes, num_machines, ...) and the Accelerator's options,
// which `ember launch` passes to its workers as EMBER_* variables (Note
// [Launcher configuration] in tools/README.md). The one place that knows these
// names and their valid values: config_file.cpp reads and writes them,
// launch.cpp turns them into variables, config_command.cpp asks for them.
// Tests: tests/tools/test_config_file.cpp, tests/tools/test_launch_config.cpp.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ember::launch {

enum class ValueKind {
  mixed_precision,       // no, fp16, bf16
  positive_integer,      // 1, 2, ...
  non_negative_integer,  // 0, 1, ...
  integer,               // any 64-bit integer
  port,                  // 1 to 65535
  boolean,               // true, false
  text,                  // a non-empty string (an address, a path)
  strategy,              // ddp, zero1, zero2, zero3, fsdp (zero3's other name), hybrid
  wrap_policy,           // transformer, size, none
  state_dict_type,       // sharded, full
  type_names,            // a comma-separated list of module type names: "TransformerBlock,Embedding"
  count,                 // a 64-bit integer of at least 1 (a number of parameters)
  positive_number,       // a finite decimal number > 0 (1, 0.5, 1e-3)
};

// Kinds whose values are YAML strings (quoted or not), as opposed to numbers and booleans.
bool is_string_kind(ValueKind kind);

struct ConfigKey {
  std::string_view name;      // the YAML key; Accelerate's name where Accelerate has one
  ValueKind kind;
  std::string_view variable;  // the worker's EMBER_* variable; "" for the launch's own keys
  std::string_view help;      // one line for --help
};

// Every key ember reads, launch keys first, then the Accelerator's in the
// order of the variables' contract, the sharding keys last
// (distributed/zero/sharding_options.h). The config file's `deepspeed_config`
// and `fsdp_config` sections become these keys too (accelerate_sections.h).
std::span<const ConfigKey> config_keys();
// The key named `name`, or nullptr.
const ConfigKey* find_config_key(std::string_view name);

// The flag of `ember config` and `ember launch` that sets a key:
// "--num-processes" for num_processes; "--cpu" (a flag without a value) for use_cpu.
std::string flag_name(std::string_view key_name);

// `text` as a value of `key` in its canonical form ("bf16", "4", "true"), or
// nullopt when it is not one.
std::optional<std::string> parse_value(const ConfigKey& key, std::string_view text);
// A decimal integer and nothing else: no spaces, no "0x", no trailing text.
std::optional<long long> parse_integer(std::string_view text);

// parse_value that throws ember::Error "<where>: ..." naming `where` (a flag, a key in a
// file, a variable) and the value.
std::string canonical_value(const ConfigKey& key, std::string_view text, std::string_view where);

// What the accepted values are, for messages and questions: "no, fp16 or bf16".
std::string_view describe_kind(ValueKind kind);

// Settings by key name, each value in canonical form; sorted by name, which is
// also the order Accelerate writes its keys in.
using Settings = std::map<std::string, std::string>;

// The value of `name` as an integer (it must be one of the integer kinds).
std::optional<long long> integer_setting(const Settings& settings, std::string_view name);

}  // namespace ember::launch
