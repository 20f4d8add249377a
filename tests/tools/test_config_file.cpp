// The config file's reader and writer (tools/config_file.cpp) and the values
// each key accepts (tools/config_keys.cpp), in-process: configs written by
// `accelerate config` (tests/data/accelerate_*_config.yaml), ember's own keys,
// unknown keys, wrong values and types, the text written and read back, and
// where the default file is.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <optional>

#include "config_file.h"
#include "core/error.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using launch::ConfigFile;
using launch::Settings;

const std::string kDataDir = EMBER_TEST_DATA_DIR;

// The message of the ember::Error that `body` throws, or "" when it throws none.
template <class Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

class ConfigFileTest : public ::testing::Test {
 protected:
  std::filesystem::path directory = fresh_temp_dir("config_file");
  void TearDown() override { std::filesystem::remove_all(directory); }

  ConfigFile read(const std::string& text) {
    write_text(directory / "config.yaml", text);
    return launch::read_config_file((directory / "config.yaml").string());
  }
  std::string read_error(const std::string& text) {
    write_text(directory / "config.yaml", text);
    return error_of([&] { launch::read_config_file((directory / "config.yaml").string()); });
  }
  std::string path() const { return (directory / "config.yaml").string(); }
};

// tests/data/accelerate_multi_cpu_config.yaml is the file `accelerate config`
// (Accelerate 1.x, commands/config/cluster.py) writes for: this machine,
// multi-CPU, 1 machine, no debug checks, no IPEX, no mpirun, no dynamo, 2
// processes, no mixed precision. Its other keys are Accelerate's own and ignored.
TEST_F(ConfigFileTest, ReadsAccelerateMultiCpuConfig) {
  ConfigFile config = launch::read_config_file(kDataDir + "/accelerate_multi_cpu_config.yaml");
  Settings expected = {{"machine_rank", "0"},   {"mixed_precision", "no"}, {"num_machines", "1"},
                       {"num_processes", "2"},  {"use_cpu", "true"}};
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
}

// An older Accelerate's GPU config (0.15-0.17): nulls, empty mappings and
// keys Accelerate itself has since renamed (dynamo_backend).
TEST_F(ConfigFileTest, ReadsOlderAccelerateConfigWithNulls) {
  ConfigFile config = launch::read_config_file(kDataDir + "/accelerate_legacy_gpu_config.yaml");
  Settings expected = {{"machine_rank", "0"},   {"mixed_precision", "fp16"}, {"num_machines", "1"},
                       {"num_processes", "1"},  {"use_cpu", "false"}};
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
}

TEST_F(ConfigFileTest, ReadsEmbersOwnKeys) {
  ConfigFile config = read(
      "gradient_accumulation_steps: 4\n"
      "split_batches: yes\n"
      "even_batches: False\n"
      "seed: -12\n"
      "project_dir: /tmp/run 1\n"
      "automatic_checkpoint_naming: true\n"
      "total_limit: 3\n"
      "main_process_ip: 10.0.0.1\n"
      "main_process_port: 29500\n"
      "mixed_precision: bf16\n");
  Settings expected = {
      {"automatic_checkpoint_naming", "true"}, {"even_batches", "false"},    {"gradient_accumulation_steps", "4"},
      {"main_process_ip", "10.0.0.1"},         {"main_process_port", "29500"}, {"mixed_precision", "bf16"},
      {"project_dir", "/tmp/run 1"},           {"seed", "-12"},              {"split_batches", "true"},
      {"total_limit", "3"},
  };
  EXPECT_EQ(config.settings, expected);
}

TEST_F(ConfigFileTest, EmptyAndNullValuesLeaveKeysUnset) {
  ConfigFile config = read("main_process_ip: ''\nmain_process_port: null\nseed: ~\nproject_dir:\n");
  EXPECT_EQ(config.settings, Settings{});
  EXPECT_EQ(read("").settings, Settings{});
}

// Newer Accelerate versions add keys: a warning naming the key and the file, not an error.
TEST_F(ConfigFileTest, UnknownKeyIsAWarning) {
  ConfigFile config = read("num_processes: 2\nparallelism_config:\n  tp_size: 2\n");
  EXPECT_EQ(config.settings, (Settings{{"num_processes", "2"}}));
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_EQ(config.warnings[0], "config file '" + path() + "', line 2: unknown key 'parallelism_config' ignored");
}

// Every error names the file, the line, the key and the value.
TEST_F(ConfigFileTest, WrongValuesAndTypesAreErrors) {
  struct Case {
    std::string text;
    std::string message;  // after "config file '<path>', line "
  };
  std::vector<Case> cases = {
      {"mixed_precision: fp8\n", "1, mixed_precision: 'fp8' is not one of no, fp16 or bf16"},
      {"num_processes: 0\n", "1, num_processes: '0' is not an integer of at least 1"},
      {"num_processes: 2.5\n", "1, num_processes: '2.5' is not an integer of at least 1"},
      {"num_processes: '2'\n", "1, num_processes: expected an integer of at least 1, got the string '2'"},
      {"num_processes: 99999999999\n", "1, num_processes: '99999999999' is not an integer of at least 1"},
      {"num_machines: [1, 2]\n", "1, num_machines: expected an integer of at least 1, got a list"},
      {"machine_rank: -1\n", "1, machine_rank: '-1' is not an integer of at least 0"},
      {"seed: 0x10\n", "1, seed: '0x10' is not a 64-bit integer"},
      {"seed: 99999999999999999999\n", "1, seed: '99999999999999999999' is not a 64-bit integer"},
      {"main_process_port: 70000\n", "1, main_process_port: '70000' is not a TCP port (1 to 65535)"},
      {"use_cpu: maybe\n", "1, use_cpu: 'maybe' is not true or false"},
      {"use_cpu: 'true'\n", "1, use_cpu: expected true or false, got the string 'true'"},
      {"even_batches: {a: 1}\n", "1, even_batches: expected true or false, got a mapping"},
      {"gradient_accumulation_steps: 0\n", "1, gradient_accumulation_steps: '0' is not an integer of at least 1"},
      {"total_limit: -3\n", "1, total_limit: '-3' is not an integer of at least 1"},
      {"project_dir: [a]\n", "1, project_dir: expected a non-empty string, got a list"},
      {"seed: 1\nseed: 2\n", "2, seed: the key appears twice"},
  };
  for (const Case& c : cases) {
    std::string expected = "config file '" + path() + "', line " + c.message;
    EXPECT_EQ(read_error(c.text), expected) << c.text;
  }
}

TEST_F(ConfigFileTest, MachineRankMustBeAMachine) {
  EXPECT_EQ(read_error("num_machines: 2\nmachine_rank: 2\n"),
            "config file '" + path() + "': machine_rank 2 is not a machine of num_machines 2 (0 to 1)");
  EXPECT_EQ(read_error("machine_rank: 1\n"),
            "config file '" + path() + "': machine_rank 1 is not a machine of num_machines 1 (0 to 0)");
}

TEST_F(ConfigFileTest, FilesThatCannotBeReadAreErrors) {
  EXPECT_EQ(read_error("num_processes: [2\n"),
            "cannot parse config file '" + path() + "': end of sequence flow not found at line 2, column 1");
  EXPECT_EQ(read_error("- num_processes\n- 2\n"),
            "config file '" + path() + "': expected a mapping of keys to values, got a list");
  EXPECT_EQ(read_error("? [a]\n: 1\n"), "config file '" + path() + "', line 1: a key must be a name, got a list");
  // Not UTF-8: yaml-cpp took the bytes, and config_yaml wrote back a file that read as other text (found by
  // tests/fuzz/config_yaml.cpp, corpus/config_yaml/regression_not_utf8).
  EXPECT_EQ(read_error("main_process_ip: \x82\x82\x02\x82host\n"),
            "config file '" + path() + "' is not UTF-8 text: invalid UTF-8 byte at index 17: 0x82");
  EXPECT_EQ(read("main_process_ip: h\xc3\xb4te\n").settings.at("main_process_ip"), "h\xc3\xb4te");  // UTF-8 is fine
  // A lone carriage return: yaml-cpp kept it as the value, config_yaml wrote it before the line's end, and the
  // file read back without the setting (found by tests/fuzz/config_yaml.cpp, corpus/config_yaml/regression_lone_cr).
  EXPECT_EQ(read_error("main_process_ip: \r"),
            "config file '" + path() + "', line 1, main_process_ip: the value holds the control character 0x0d");
  EXPECT_EQ(read_error("project_dir: a\x01" "b\n"),
            "config file '" + path() + "', line 1, project_dir: the value holds the control character 0x01");
  std::string missing = (directory / "missing.yaml").string();
  EXPECT_EQ(error_of([&] { launch::read_config_file(missing); }), "config file '" + missing + "' does not exist");
  EXPECT_EQ(error_of([&] { launch::read_config_file(directory.string()); }),
            "config file '" + directory.string() + "' is a directory");
}

// The text Accelerate's yaml.safe_dump would write for the same values: keys
// sorted, 'no' and 'NO' quoted (YAML 1.1 would read them as false).
TEST_F(ConfigFileTest, WritesAccelerateFormat) {
  Settings settings = {{"machine_rank", "0"},  {"mixed_precision", "no"}, {"num_machines", "1"},
                       {"num_processes", "2"}, {"use_cpu", "true"},       {"project_dir", "yes"},
                       {"seed", "7"}};
  EXPECT_EQ(launch::config_yaml(settings),
            "compute_environment: LOCAL_MACHINE\n"
            "distributed_type: MULTI_CPU\n"
            "machine_rank: 0\n"
            "mixed_precision: 'no'\n"
            "num_machines: 1\n"
            "num_processes: 2\n"
            "project_dir: 'yes'\n"
            "seed: 7\n"
            "use_cpu: true\n");
  EXPECT_EQ(launch::config_yaml({{"num_processes", "1"}, {"mixed_precision", "bf16"}}),
            "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: bf16\nnum_processes: 1\n");
  EXPECT_EQ(launch::config_yaml({{"num_processes", "4"}}),
            "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 4\n");
}

TEST_F(ConfigFileTest, WrittenFileReadsBackTheSame) {
  Settings settings = {
      {"automatic_checkpoint_naming", "true"}, {"even_batches", "false"},   {"gradient_accumulation_steps", "8"},
      {"machine_rank", "1"},                   {"main_process_ip", "10.1.2.3"}, {"main_process_port", "29500"},
      {"mixed_precision", "fp16"},             {"num_machines", "2"},       {"num_processes", "4"},
      {"project_dir", "/runs/a: b # c"},       {"seed", "-9223372036854775808"}, {"split_batches", "true"},
      {"total_limit", "2"},                    {"use_cpu", "false"},
  };
  std::filesystem::path target = directory / "nested" / "deeper" / "config.yaml";
  launch::write_config_file(target.string(), settings);
  ConfigFile config = launch::read_config_file(target.string());
  EXPECT_EQ(config.settings, settings);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});

  // Replaced whole, and nothing of the temporary file is left beside it.
  launch::write_config_file(target.string(), {{"seed", "1"}});
  EXPECT_EQ(launch::read_config_file(target.string()).settings, (Settings{{"seed", "1"}}));
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(target.parent_path())) {
    names.push_back(entry.path().filename());
  }
  EXPECT_EQ(names, std::vector<std::string>{"config.yaml"});
  struct stat info {};
  ASSERT_EQ(stat(target.c_str(), &info), 0);
  mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(info.st_mode & 0777, 0666 & ~mask) << "as readable as a file written with open()";
}

TEST_F(ConfigFileTest, WriteWhereNoFileCanBeIsAnError) {
  write_text(directory / "a_file", "x");
  std::string target = (directory / "a_file" / "config.yaml").string();
  std::string message = error_of([&] { launch::write_config_file(target, {{"seed", "1"}}); });
  EXPECT_TRUE(contains(message, "cannot write config file '" + target + "': cannot create its directory")) << message;
  std::string into_directory = (directory).string();
  message = error_of([&] { launch::write_config_file(into_directory, {{"seed", "1"}}); });
  EXPECT_TRUE(contains(message, "cannot write config file '" + into_directory + "': ember config: cannot rename"))
      << message;
  EXPECT_FALSE(contains(read_text(directory / "a_file"), "seed"));
}

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedVariable() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(ConfigFileTest, DefaultPathFollowsTheEnvironment) {
  ScopedVariable home("HOME", "/home/someone");
  {
    ScopedVariable explicit_file("EMBER_CONFIG_FILE", "/etc/ember.yaml");
    ScopedVariable cache("XDG_CACHE_HOME", "/cache");
    EXPECT_EQ(launch::default_config_path(), "/etc/ember.yaml");
  }
  {
    ScopedVariable explicit_file("EMBER_CONFIG_FILE", std::nullopt);
    ScopedVariable cache("XDG_CACHE_HOME", "/cache");
    EXPECT_EQ(launch::default_config_path(), "/cache/ember/default_config.yaml");
  }
  {
    ScopedVariable explicit_file("EMBER_CONFIG_FILE", "");
    ScopedVariable cache("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(launch::default_config_path(), "/home/someone/.cache/ember/default_config.yaml");
  }
}

// No --config-file: the default file when it exists, else none. A named
// file must exist.
TEST_F(ConfigFileTest, ActiveConfigFile) {
  std::string missing = (directory / "missing.yaml").string();
  ScopedVariable explicit_file("EMBER_CONFIG_FILE", missing);
  EXPECT_FALSE(launch::active_config_file("").has_value());
  EXPECT_EQ(error_of([&] { launch::active_config_file(missing); }), "config file '" + missing + "' does not exist");
  write_text(missing, "seed: 3\n");
  std::optional<ConfigFile> config = launch::active_config_file("");
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->path, missing);
  EXPECT_EQ(config->settings, (Settings{{"seed", "3"}}));
}

TEST(ConfigKeys, ValuesInCanonicalForm) {
  auto value = [](const char* key, const char* text) { return launch::parse_value(*launch::find_config_key(key), text); };
  EXPECT_EQ(value("num_processes", "007"), "7");
  EXPECT_EQ(value("num_processes", "+7"), std::nullopt);
  EXPECT_EQ(value("num_processes", " 7"), std::nullopt);
  EXPECT_EQ(value("num_processes", "2147483647"), "2147483647");
  EXPECT_EQ(value("num_processes", "2147483648"), std::nullopt);
  EXPECT_EQ(value("machine_rank", "0"), "0");
  EXPECT_EQ(value("main_process_port", "65535"), "65535");
  EXPECT_EQ(value("main_process_port", "0"), std::nullopt);
  EXPECT_EQ(value("seed", "-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(value("use_cpu", "true"), "true");
  EXPECT_EQ(value("use_cpu", "1"), std::nullopt);
  EXPECT_EQ(value("mixed_precision", "BF16"), std::nullopt);
  EXPECT_EQ(value("project_dir", ""), std::nullopt);
  EXPECT_EQ(launch::find_config_key("compute_environment"), nullptr);
  EXPECT_EQ(launch::flag_name("use_cpu"), "--cpu");
  EXPECT_EQ(launch::flag_name("gradient_accumulation_steps"), "--gradient-accumulation-steps");
}

}  // namespace
}  // namespace ember::test
