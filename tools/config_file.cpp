// See config_file.h.
#include "config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "accelerate_sections.h"
#include "core/error.h"
#include "core/file_io.h"

namespace ember::launch {
namespace {

constexpr int64_t kMaxConfigBytes = int64_t(16) << 20;  // a config file is a few hundred bytes

// Accelerate's keys that ember does not act on (ClusterConfig and BaseConfig in
// accelerate/commands/config/config_args.py): they choose Accelerate's backends,
// plugins, GPUs and TPU pods. Each is accepted without a word with a value that asks
// for nothing (null, an empty section, or Accelerate's default as `accelerate config`
// writes it), so that such a file works unchanged; any other value gets a warning that
// ember ignores it, with ember's own way where it has one (`debug: true` used to be
// dropped silently). The tpu_* keys apply to TPU jobs only, which distributed_type
// refuses. Any key not known at all gets a warning too. distributed_type,
// deepspeed_config and fsdp_config are read (accelerate_sections.h).
struct IgnoredAccelerateKey {
  std::string_view name;
  std::vector<std::string_view> harmless;  // scalar values that ask for nothing ("*": any)
  std::string_view instead;                // what to do in ember instead, if anything
};

const std::vector<IgnoredAccelerateKey>& ignored_accelerate_keys() {
  static const std::vector<IgnoredAccelerateKey> keys = {
      {"command_file", {}, ""},
      {"commands", {}, ""},
      {"compute_environment", {"LOCAL_MACHINE"},
       "ember launch starts this machine's workers (srun, mpirun and torchrun are read too)"},
      {"debug", {"false"}, "set EMBER_DISTRIBUTED_DEBUG=1 for ember's collective checks"},
      {"downcast_bf16", {"no", "false"}, ""},
      {"dynamo_backend", {"NO", "no"}, "ember has no graph compiler"},
      {"dynamo_config", {}, "ember has no graph compiler"},
      {"enable_cpu_affinity", {"false"}, "use ember launch --bind-cores"},
      {"fp8_config", {}, ""},
      {"gpu_ids", {"all"}, "set CUDA_VISIBLE_DEVICES"},
      {"ipex_config", {}, ""},
      {"main_training_function", {"main"}, ""},
      {"megatron_lm_config", {}, ""},
      {"mpirun_config", {}, "run mpirun yourself: ember reads its variables"},
      {"rdzv_backend", {"static", "c10d"}, ""},
      {"same_network", {"true"}, ""},
      {"tp_config", {}, ""},
      {"tpu_env", {"*"}, ""},
      {"tpu_name", {"*"}, ""},
      {"tpu_use_cluster", {"*"}, ""},
      {"tpu_use_sudo", {"*"}, ""},
      {"tpu_vm", {"*"}, ""},
      {"tpu_zone", {"*"}, ""},
  };
  return keys;
}

const IgnoredAccelerateKey* find_ignored_accelerate_key(std::string_view name) {
  for (const IgnoredAccelerateKey& key : ignored_accelerate_keys())
    if (key.name == name) return &key;
  return nullptr;
}

// Whether `value` asks for nothing: null, an empty sequence or mapping, a harmless
// scalar, or a mapping whose every value is null, false or no (ipex_config:
// {ipex: false}, dynamo_config: {dynamo_backend: 'NO'}).
// `seen`: the positions of the mappings already found to ask for nothing. An
// alias is its anchor's node, at its anchor's position, so each mapping is
// read once: nested aliases (a0: {x: *a1, y: *a1}, ...) would otherwise make
// the walk exponential in the depth of a file of a few hundred bytes.
bool asks_for_nothing(const IgnoredAccelerateKey& key, const YAML::Node& value, std::set<size_t>& seen) {
  if (!value.IsDefined() || value.IsNull()) return true;
  if (value.IsScalar()) {
    for (std::string_view harmless : key.harmless)
      if (harmless == "*" || harmless == value.Scalar()) return true;
    return false;
  }
  if (value.IsSequence()) return value.size() == 0;
  if (seen.contains(value.Mark().pos)) return true;
  static const IgnoredAccelerateKey kOff = {"", {"false", "no", "NO"}, ""};
  for (const auto& entry : value)
    if (!asks_for_nothing(kOff, entry.second, seen)) return false;
  seen.insert(value.Mark().pos);
  return true;
}

// PyYAML (Accelerate's reader) merges the mapping a plain `<<` key names into
// its own (`<<: *base`); yaml-cpp keeps `<<` as an ordinary key, so the file
// would mean one thing to Accelerate and another here. Refused anywhere in the
// file; each mapping or list is walked once (`seen`, as asks_for_nothing).
void refuse_merge_keys(const YAML::Node& node, const std::string& path, std::set<size_t>& seen) {
  if (!node.IsMap() && !node.IsSequence()) return;
  if (!seen.insert(node.Mark().pos).second) return;
  if (node.IsSequence()) {
    for (const auto& item : node) refuse_merge_keys(item, path, seen);
    return;
  }
  for (const auto& entry : node) {
    // A quoted '<<' (tag "!") is an ordinary key to PyYAML too.
    EMBER_CHECK(!(entry.first.IsScalar() && entry.first.Scalar() == "<<" && entry.first.Tag() != "!"),
                "config file '{}', line {}: YAML merge keys (<<) are not supported: write the merged keys out",
                path, entry.first.Mark().line + 1);
    refuse_merge_keys(entry.first, path, seen);
    refuse_merge_keys(entry.second, path, seen);
  }
}

// A leading ~ or ~/ of a path taken from the environment, as Python's
// os.path.expanduser in Accelerate's default paths.
std::string expand_home(std::string path) {
  if (path != "~" && !path.starts_with("~/")) return path;
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + path.substr(1) : path;
}

std::string node_kind(const YAML::Node& node) {
  if (node.IsSequence()) return "list";
  if (node.IsMap()) return "mapping";
  return "value";
}

// The reason `text` is not UTF-8 ("invalid UTF-8 byte at index 17: 0x82"), or nullopt when it is.
std::optional<std::string> utf8_error(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();  // nlohmann's serializer validates UTF-8 and says where it fails
  } catch (const nlohmann::json::type_error& error) {
    const std::string_view reason = error.what();
    return std::string(reason.substr(reason.find("] ") + 2));
  }
  return std::nullopt;
}

// The text of a key's YAML value, or nullopt when the key is present but
// empty or null (`main_process_ip: null`, as Accelerate writes it), which
// leaves it unset. A quoted boolean or fractional number is a string, not a
// value of its kind: checked here because yaml-cpp hands both over as the same
// text. Quoted integers are integers, as Accelerate reads them (int()).
std::optional<std::string> value_text(const ConfigKey& key, const YAML::Node& value, const std::string& where) {
  if (value.IsNull()) return std::nullopt;
  EMBER_CHECK(value.IsScalar(), "{}: expected {}, got a {}", where, describe_kind(key.kind), node_kind(value));
  const std::string& text = value.Scalar();
  // No setting (a host, a path, a name, a number) holds a control character,
  // and YAML readers disagree on them: yaml-cpp keeps a lone carriage return
  // in a plain value, which PyYAML takes for a line break (and the value for
  // null). Refused rather than read one way and written back another.
  const auto control = std::find_if(text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  EMBER_CHECK(control == text.end(), "{}: the value holds the control character {:#04x}", where,
              int(static_cast<unsigned char>(*control)));
  // yaml-cpp decodes some escapes of a double-quoted value (\_, a no-break
  // space) into a lone byte that is not UTF-8, which could not be written back.
  if (auto error = utf8_error(text))
    EMBER_CHECK(false, "{}: the value is not UTF-8 text once its escapes are read ({}): write the character itself",
                where, *error);
  const bool quoted = value.Tag() == "!";
  switch (key.kind) {
    case ValueKind::text:
    case ValueKind::strategy:
    case ValueKind::wrap_policy:
    case ValueKind::state_dict_type:
    case ValueKind::type_names:
      // Accelerate's launcher treats an empty main_process_ip as not given.
      if (text.empty()) return std::nullopt;
      return text;
    case ValueKind::mixed_precision:
      return text;  // 'no' is quoted by Accelerate, a plain no is meant the same
    case ValueKind::boolean: {
      EMBER_CHECK(!quoted, "{}: expected true or false, got the string '{}'", where, text);
      bool flag = false;
      EMBER_CHECK(YAML::convert<bool>::decode(value, flag), "{}: '{}' is not true or false", where, text);
      return flag ? "true" : "false";
    }
    case ValueKind::positive_integer:
    case ValueKind::non_negative_integer:
    case ValueKind::integer:
    case ValueKind::port:
    case ValueKind::count: {
      // Accelerate converts its integer keys with int(), so `num_processes: '2'` is 2 there (and here).
      // A plain 010, though, is octal 8 to PyYAML (YAML 1.1), and 10 here.
      const std::string_view digits = std::string_view(text).substr(text.starts_with('-') || text.starts_with('+'));
      EMBER_CHECK(quoted || digits.size() < 2 || digits[0] != '0' ||
                      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }),
                  "{}: '{}' has a leading zero, which makes it an octal number to Accelerate's YAML reader; write it "
                  "without the zero (or quote it)",
                  where, text);
      return text;
    }
    default:
      EMBER_CHECK(!quoted, "{}: expected {}, got the string '{}'", where, describe_kind(key.kind), text);
      return text;
  }
}

// Accelerate writes its config files as UTF-8, and PyYAML (which it reads
// them with) refuses bytes that are not Unicode text. yaml-cpp does not: it keeps invalid UTF-8 bytes of a
// plain scalar as they are but turns them into U+FFFD in a quoted one, so a
// value read from such a file would not survive being written back.
// PyYAML takes only printable characters: of the ASCII controls, tab, line
// feed and carriage return. yaml-cpp reads the others its own way (a NUL
// followed by `_` becomes the escape of a no-break space, as a lone byte that
// is not UTF-8), so they are refused as PyYAML refuses them.
void check_text(const std::string& text, const std::string& path) {
  const auto control = std::find_if(text.begin(), text.end(), [](unsigned char c) {
    return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
  });
  if (auto error = utf8_error(text)) EMBER_CHECK(false, "config file '{}' is not UTF-8 text: {}", path, *error);
  EMBER_CHECK(control == text.end(),
              "config file '{}' holds the control character {:#04x} at index {}: YAML allows only tab, line feed and "
              "carriage return",
              path, int(static_cast<unsigned char>(*control)), control - text.begin());
}

YAML::Node parse_file(const std::string& path) {
  std::error_code error;
  EMBER_CHECK(std::filesystem::exists(path, error), "config file '{}' does not exist", path);
  EMBER_CHECK(!std::filesystem::is_directory(path, error), "config file '{}' is a directory", path);
  // A FIFO or device is refused at once (read_small_file), not read forever.
  const std::string text = read_small_file("ember: config file", path, kMaxConfigBytes);
  check_text(text, path);
  try {
    // One document, as PyYAML's safe_load (Accelerate's reader) requires: YAML::Load
    // read up to the first "---" and dropped the rest without a word.
    std::vector<YAML::Node> documents = YAML::LoadAll(text);
    EMBER_CHECK(documents.size() <= 1,
                "config file '{}' holds {} YAML documents (separated by ---); a config file holds one", path,
                documents.size());
    if (documents.empty()) return YAML::Node();
    std::set<size_t> seen;
    refuse_merge_keys(documents.front(), path, seen);
    return documents.front();
  } catch (const YAML::ParserException& parse_error) {
    EMBER_CHECK(false, "cannot parse config file '{}': {} at line {}, column {}", path, parse_error.msg,
                parse_error.mark.line + 1, parse_error.mark.column + 1);
  }
  return YAML::Node();
}

// What YAML 1.1 (PyYAML, which Accelerate reads with) would take for a
// boolean, a null or a number, and must therefore be quoted to stay a string.
bool needs_quotes(const std::string& text) {
  static const std::set<std::string> special = {"yes", "no", "true", "false", "on", "off", "y", "n", "null", "~"};
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  double number = 0;
  auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  bool numeric = !text.empty() && error == std::errc() && stop == text.data() + text.size();
  // PyYAML's int and float resolvers: 0x10, 0b1, 010, 1_000, 1:20 (base 60), .5, .inf, .nan.
  static const std::regex yaml11_number(
      "[-+]?(0b[0-1_]+|0[0-7_]+|(0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|[1-9][0-9_]*(:[0-5]?[0-9])+)"
      "|[-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9][0-9_]*([eE][-+][0-9]+)?"
      "|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  return text.empty() || special.count(lower) > 0 || numeric || std::regex_match(text, yaml11_number);
}

void emit_string(YAML::Emitter& out, const std::string& text) {
  if (needs_quotes(text)) out << YAML::SingleQuoted;
  out << text;
}

// Accelerate's name for the kind of job, which it requires in every config:
// sharded strategies are DeepSpeed's (zero1, which FSDP lacks) or FSDP's.
std::string distributed_type(const Settings& settings) {
  auto strategy = settings.find("strategy");
  if (strategy != settings.end() && strategy->second == "zero1") return "DEEPSPEED";
  if (strategy != settings.end() && strategy->second != "ddp") return "FSDP";
  long long processes = integer_setting(settings, "num_processes").value_or(1);
  long long machines = integer_setting(settings, "num_machines").value_or(1);
  if (processes <= 1 && machines <= 1) return "NO";
  auto cpu = settings.find("use_cpu");
  return cpu != settings.end() && cpu->second == "true" ? "MULTI_CPU" : "MULTI_GPU";
}

}  // namespace

std::string default_config_path() {
  auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return value && *value ? std::optional<std::string>(value) : std::nullopt;
  };
  if (auto path = variable("EMBER_CONFIG_FILE")) return *path;
  if (auto cache = variable("XDG_CACHE_HOME")) return expand_home(*cache) + "/ember/default_config.yaml";
  if (auto home = variable("HOME")) return *home + "/.cache/ember/default_config.yaml";
  EMBER_CHECK(false, "no default config file: none of EMBER_CONFIG_FILE, XDG_CACHE_HOME and HOME is set");
  return "";
}

std::optional<std::string> accelerate_default_config_path() {
  auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return value && *value ? std::optional<std::string>(value) : std::nullopt;
  };
  if (auto hf_home = variable("HF_HOME")) return expand_home(*hf_home) + "/accelerate/default_config.yaml";
  if (auto cache = variable("XDG_CACHE_HOME")) return expand_home(*cache) + "/huggingface/accelerate/default_config.yaml";
  if (auto home = variable("HOME")) return *home + "/.cache/huggingface/accelerate/default_config.yaml";
  return std::nullopt;
}

ConfigFile read_config_file(const std::string& path) {
  YAML::Node root = parse_file(path);
  ConfigFile config{.path = path, .settings = {}, .warnings = {}, .origin = {}};
  if (root.IsNull()) return config;  // an empty file sets nothing
  EMBER_CHECK(root.IsMap(), "config file '{}': expected a mapping of keys to values, got a {}", path, node_kind(root));
  std::set<std::string> seen;
  AccelerateSections sections;
  for (const auto& entry : root) {
    int line = entry.first.Mark().line + 1;
    EMBER_CHECK(entry.first.IsScalar(), "config file '{}', line {}: a key must be a name, got a {}", path, line,
                node_kind(entry.first));
    const std::string& name = entry.first.Scalar();
    std::string where = fmt::format("config file '{}', line {}, {}", path, line, shown_text(name));
    EMBER_CHECK(seen.insert(name).second, "{}: the key appears twice", where);
    sections.key_lines[name] = line;
    if (name == "distributed_type") {
      sections.distributed_type = entry.second;
      sections.distributed_type_line = line;
    } else if (name == "deepspeed_config") {
      sections.deepspeed_config = entry.second;
      sections.deepspeed_config_line = line;
    } else if (name == "fsdp_config") {
      sections.fsdp_config = entry.second;
      sections.fsdp_config_line = line;
    } else if (const ConfigKey* key = find_config_key(name)) {
      if (auto text = value_text(*key, entry.second, where)) config.settings[name] = canonical_value(*key, *text, where);
    } else if (const IgnoredAccelerateKey* ignored = find_ignored_accelerate_key(name)) {
      std::set<size_t> seen_mappings;
      if (!asks_for_nothing(*ignored, entry.second, seen_mappings))
        config.warnings.push_back(fmt::format("config file '{}', line {}: Accelerate's '{}' is set{}, which ember does "
                                              "not honour{}{}",
                                              path, line, name,
                                              entry.second.IsScalar()
                                                  ? fmt::format(" to '{}'", shown_text(entry.second.Scalar()))
                                                  : std::string(),
                                              ignored->instead.empty() ? "" : "; ", ignored->instead));
    } else {
      config.warnings.push_back(
          fmt::format("config file '{}', line {}: unknown key '{}' ignored", path, line, shown_text(name)));
    }
  }
  apply_accelerate_sections(sections, config);
  // Checked here, where the file can be named; ember launch checks them again
  // against its flags (Note [Launcher configuration]).
  long long machines = integer_setting(config.settings, "num_machines").value_or(1);
  if (auto rank = integer_setting(config.settings, "machine_rank")) {
    EMBER_CHECK(*rank < machines, "config file '{}': machine_rank {} is not a machine of num_machines {} (0 to {})",
                path, *rank, machines, machines - 1);
  }
  return config;
}

std::optional<ConfigFile> active_config_file(const std::string& explicit_path) {
  if (!explicit_path.empty()) return read_config_file(explicit_path);
  std::string path = default_config_path();
  std::error_code error;
  if (std::filesystem::exists(path, error)) return read_config_file(path);
  // ember's own is absent: Accelerate's, unless EMBER_CONFIG_FILE named a file (which then counts as none).
  const char* named = std::getenv("EMBER_CONFIG_FILE");
  if (named && *named) return std::nullopt;
  std::optional<std::string> accelerate = accelerate_default_config_path();
  if (!accelerate || !std::filesystem::exists(*accelerate, error)) return std::nullopt;
  ConfigFile config = read_config_file(*accelerate);
  config.origin = fmt::format("Accelerate's default config; ember's own {} is absent", path);
  return config;
}

std::string config_yaml(const Settings& settings) {
  Settings all = settings;
  all["compute_environment"] = "LOCAL_MACHINE";
  all["distributed_type"] = distributed_type(settings);
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& [name, value] : all) {
    out << YAML::Key << name << YAML::Value;
    const ConfigKey* key = find_config_key(name);
    bool is_string = !key || is_string_kind(key->kind);
    if (is_string) {
      emit_string(out, value);
    } else {
      out << value;  // canonical numbers and booleans are plain YAML already
    }
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void write_config_file(const std::string& path, const Settings& settings) {
  std::string text = config_yaml(settings);
  std::filesystem::path target = std::filesystem::absolute(path);
  std::error_code error;
  std::filesystem::create_directories(target.parent_path(), error);
  EMBER_CHECK(!error, "cannot write config file '{}': cannot create its directory: {}", path, error.message());

  // A new temporary beside it, renamed over it: never written through a link (core/file_io.h).
  write_file_atomically("writing the config file", target, text);
}

}  // namespace ember::launch
