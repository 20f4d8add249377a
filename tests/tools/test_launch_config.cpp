// `ember launch` and the Accelerator's variables (Note [Launcher
// configuration]), on real processes: the flags and the config file set
// exactly the contract's EMBER_* variables in every worker; flags beat the
// file, the file beats the inherited environment, which passes through
// unchanged otherwise; the file's launch keys choose the workers; every bad
// value stops the launcher before a worker starts. The worker side is the
// launch_accelerator_env scenario in tests/distributed/workers/launch_scenarios.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "config_keys.h"
#include "distributed/process_runner.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

// The contract's variables in the order the scenario prints them.
const std::vector<std::string> kVariables = {
    "EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS", "EMBER_USE_CPU",
    "EMBER_SPLIT_BATCHES",   "EMBER_EVEN_BATCHES",                "EMBER_SEED",
    "EMBER_PROJECT_DIR",     "EMBER_AUTOMATIC_CHECKPOINT_NAMING", "EMBER_TOTAL_LIMIT",
    "EMBER_STRATEGY",        "EMBER_WRAP_POLICY",                 "EMBER_WRAP_MODULE_TYPES",
    "EMBER_WRAP_MIN_NUM_PARAMS", "EMBER_STATE_DICT_TYPE",         "EMBER_FORWARD_PREFETCH",
    "EMBER_BACKWARD_PREFETCH", "EMBER_ACTIVATION_CHECKPOINTING",  "EMBER_MAX_GRAD_NORM",
};

// The scenario's second line: what the Accelerator resolved from the variables.
std::string resolved_line(int rank, const std::string& strategy, int accumulation, const std::string& max_grad_norm) {
  return "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ": resolved strategy=" + strategy +
         " gradient_accumulation_steps=" + std::to_string(accumulation) + " max_grad_norm=" + max_grad_norm + "\n";
}

// The scenario's line for `rank` when the variables in `set` have those
// values and all others are unset.
std::string expected_line(int rank, const std::map<std::string, std::string>& set) {
  std::string line = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ":";
  for (const std::string& variable : kVariables) {
    auto found = set.find(variable);
    line += " " + variable + "=" + (found == set.end() ? "<unset>" : found->second);
  }
  return line + "\n";
}

// `ember launch <flags> -- distributed_worker launch_accelerator_env` in a
// clean environment plus `assignments`.
ProcessResult launch_in(const std::vector<std::string>& assignments, const std::vector<std::string>& flags) {
  return run_process(clean_command(assignments, launch_command(flags, "launch_accelerator_env")), 60s);
}

void expect_workers(const ProcessResult& result, int workers, const std::map<std::string, std::string>& set) {
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (int rank = 0; rank < workers; ++rank) {
    EXPECT_TRUE(contains(result.output, expected_line(rank, set))) << "expected " << expected_line(rank, set) << "in:\n"
                                                                   << result.output;
  }
  EXPECT_FALSE(contains(result.output, "[rank " + std::to_string(workers) + "]")) << result.output;
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

class LaunchConfigTest : public ::testing::Test {
 protected:
  std::filesystem::path directory = fresh_temp_dir("launch_config");
  std::string no_default_file = "EMBER_CONFIG_FILE=" + (directory / "absent.yaml").string();
  void TearDown() override { std::filesystem::remove_all(directory); }

  std::string config(const std::string& text, const std::string& name = "config.yaml") {
    write_text(directory / name, text);
    return (directory / name).string();
  }
};

// The variables the scenario prints are exactly those the config keys set
// (tools/config_keys.cpp), in the same order: a key added there without the
// Accelerator reading it, or the reverse, fails here.
TEST(LaunchContract, TheScenarioPrintsEveryConfigKeysVariable) {
  std::vector<std::string> from_keys;
  for (const launch::ConfigKey& key : launch::config_keys()) {
    if (!key.variable.empty()) from_keys.emplace_back(key.variable);
  }
  EXPECT_EQ(from_keys, kVariables);
  for (const std::string& variable : kVariables) {
    EXPECT_NE(std::find(kControlledVariables.begin(), kControlledVariables.end(), variable), kControlledVariables.end())
        << variable << " is not among the variables the tests clear";
  }
}

// EMBER_CONFIG_FILE naming a file that does not exist (the one `ember config`
// is to write, or a misspelt path) runs without one, and says so. Mutation
// caught: the warning left out (the job then ran with no config file silently).
TEST_F(LaunchConfigTest, WithoutFlagsOrFileNothingIsSet) {
  ProcessResult result = launch_in({no_default_file}, {"--nproc-per-node", "2"});
  expect_workers(result, 2, {});
  EXPECT_TRUE(contains(result.output, "ember launch: warning: no config file: EMBER_CONFIG_FILE names '" +
                                          (directory / "absent.yaml").string() +
                                          "', which does not exist (ember config writes it)\n"))
      << result.output;
}

TEST_F(LaunchConfigTest, FlagsSetTheContractsVariables) {
  ProcessResult result = launch_in(
      {no_default_file},
      {"--nproc-per-node", "2", "--mixed-precision", "bf16", "--gradient-accumulation-steps", "4", "--cpu"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_GRADIENT_ACCUMULATION_STEPS", "4"}, {"EMBER_USE_CPU", "true"}});
  EXPECT_TRUE(contains(result.output,
                       "ember launch: EMBER_MIXED_PRECISION=bf16, EMBER_GRADIENT_ACCUMULATION_STEPS=4, EMBER_USE_CPU=true\n"))
      << result.output;
}

// Every key of the file reaches the workers, and num_processes (all machines
// together, one machine here) chooses how many start.
// --config-file "" (a "$CFG" left unset) ran the job with no config file at all;
// the flag is refused, for every command that takes it. Mutation caught: the
// options without ->check(kNonEmptyPath).
TEST_F(LaunchConfigTest, AnEmptyConfigFilePathIsRefused) {
  ProcessResult result = launch_in({no_default_file}, {"--config-file", ""});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(contains(result.output, "ember: --config-file: an empty path (an unset variable?)")) << result.output;
  for (const char* command : {"env", "config"}) {
    ProcessResult other = run_process(clean_command({no_default_file}, {EMBER_CLI, command, "--config-file", ""}), 30s);
    EXPECT_EQ(other.exit_code, 2) << command << ": " << other.output;
    EXPECT_TRUE(contains(other.output, "an empty path")) << command << ": " << other.output;
  }
  // The same for the launcher's other options that an empty value made "not
  // given" (the job ran with no profile, no logs, no EMBER_BACKEND).
  for (const char* option : {"--log-dir", "--profile", "--backend", "--local-addr"}) {
    ProcessResult empty = launch_in({no_default_file}, {option, ""});
    EXPECT_EQ(empty.exit_code, 2) << option << ": " << empty.output;
    EXPECT_TRUE(contains(empty.output, std::string("ember: ") + option + ": an empty")) << empty.output;
  }
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

// A misspelt command was reported as "A subcommand is required", naming
// neither the word nor the commands (accelerate's argparse names both).
TEST(EmberCommand, AMisspeltCommandIsNamed) {
  ProcessResult result = run_process(clean_command({}, {EMBER_CLI, "lanch", "--nproc-per-node", "2", "train"}), 30s);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(contains(result.output, "ember: unknown command 'lanch' (choose from launch, config, env, "
                                      "estimate-memory, trace)"))
      << result.output;
}

// CLI11 read a number flag's "010" as octal 8 (--master-port 077777 ran on
// port 32767), "0x2" as 2 and "" as 0 (--grace-period "" stopped workers with
// no grace at all); torchrun and accelerate launch read decimal text only.
// Mutation caught: the number options without ->transform(kDecimalInteger).
TEST_F(LaunchConfigTest, NumberFlagsAreDecimal) {
  ProcessResult port = launch_in({no_default_file}, {"--master-port", "077777"});
  EXPECT_EQ(port.exit_code, 1) << port.output;
  EXPECT_TRUE(contains(port.output, "ember launch: --master-port 77777 is not a TCP port")) << port.output;
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{
           {"--nproc-per-node", ""}, {"--nproc-per-node", "0x2"}, {"--timeout", "1e3"}, {"--grace-period", ""},
           {"--grace-period", "0x1p3"}, {"--max-restarts", "0b1"}, {"--node-rank", "-+1"}}) {
    ProcessResult refused = launch_in({no_default_file}, {option, value});
    EXPECT_EQ(refused.exit_code, 2) << option << " " << value << ": " << refused.output;
    EXPECT_TRUE(contains(refused.output, "ember: " + option + ": '" + value + "' is not a")) << refused.output;
  }
  expect_workers(launch_in({no_default_file}, {"--nproc-per-node", "+02", "--grace-period", "0.50"}), 2, {});
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

// An exported EMBER_TIMEOUT was replaced by --timeout's default without a
// word (a 5 s timeout became 300 s). Mutation caught: inherited_environment
// without the warning.
TEST_F(LaunchConfigTest, AnInheritedTimeoutIsSaidToBeReplaced) {
  ProcessResult result = launch_in({no_default_file, "EMBER_TIMEOUT=5"}, {});
  expect_workers(result, 1, {});
  EXPECT_TRUE(contains(result.output, "ember launch: warning: EMBER_TIMEOUT=5 in the environment is replaced by "
                                      "--timeout (default 300 s); give --timeout instead"))
      << result.output;
}

TEST_F(LaunchConfigTest, ConfigFileSetsTheContractsVariables) {
  std::string file = config(
      "num_processes: 3\n"
      "mixed_precision: fp16\n"
      "gradient_accumulation_steps: 2\n"
      "use_cpu: false\n"
      "split_batches: true\n"
      "even_batches: false\n"
      "seed: 1234\n"
      "project_dir: /tmp/ember project\n"
      "automatic_checkpoint_naming: yes\n"
      "total_limit: 5\n");
  ProcessResult result = launch_in({no_default_file}, {"--config-file", file});
  expect_workers(result, 3,
                 {{"EMBER_MIXED_PRECISION", "fp16"},
                  {"EMBER_GRADIENT_ACCUMULATION_STEPS", "2"},
                  {"EMBER_USE_CPU", "false"},
                  {"EMBER_SPLIT_BATCHES", "true"},
                  {"EMBER_EVEN_BATCHES", "false"},
                  {"EMBER_SEED", "1234"},
                  {"EMBER_PROJECT_DIR", "/tmp/ember project"},
                  {"EMBER_AUTOMATIC_CHECKPOINT_NAMING", "true"},
                  {"EMBER_TOTAL_LIMIT", "5"}});
  EXPECT_TRUE(contains(result.output, "ember launch: config file '" + file + "'\n")) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: 3 workers")) << result.output;
}

// The case: Accelerate's DeepSpeed file with zero_stage 2 and
// accumulation 4 ran as plain DDP with accumulation 1. Now the workers get
// both, and the Accelerator resolves them.
TEST_F(LaunchConfigTest, DeepSpeedSectionReachesTheAccelerator) {
  ProcessResult result =
      launch_in({no_default_file}, {"--config-file", std::string(EMBER_TEST_DATA_DIR) + "/accelerate_deepspeed_config.yaml"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_GRADIENT_ACCUMULATION_STEPS", "4"}, {"EMBER_USE_CPU", "false"},
                  {"EMBER_STRATEGY", "zero2"}, {"EMBER_MAX_GRAD_NORM", "1"}});
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(result.output, resolved_line(rank, "zero2", 4, "1"))) << result.output;
  }
  EXPECT_FALSE(contains(result.output, "warning")) << result.output;
}

// Accelerate fills DeepSpeed's gradient_clipping "auto" with 1.0, so a
// DeepSpeed file without the key clips at 1 there; it ran without clipping
// here (other numbers from the same file). 0 still means none, and ember's
// own top-level max_grad_norm beats the default. Mutation caught: the default
// left out of apply_accelerate_sections -> EMBER_MAX_GRAD_NORM unset.
TEST_F(LaunchConfigTest, DeepSpeedWithoutGradientClippingClipsAtOneAsAccelerate) {
  const std::string section = "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 2\n";
  expect_workers(launch_in({no_default_file}, {"--config-file", config(section, "absent.yaml")}), 2,
                 {{"EMBER_STRATEGY", "zero2"}, {"EMBER_MAX_GRAD_NORM", "1"}});
  expect_workers(
      launch_in({no_default_file}, {"--config-file", config(section + "  gradient_clipping: 0\n", "zero.yaml")}), 2,
      {{"EMBER_STRATEGY", "zero2"}});
  expect_workers(
      launch_in({no_default_file}, {"--config-file", config(section + "max_grad_norm: 2\n", "top_level.yaml")}), 2,
      {{"EMBER_STRATEGY", "zero2"}, {"EMBER_MAX_GRAD_NORM", "2"}});
}

// Accelerate's FSDP file: each key becomes its variable; the keys ember does
// not honour are warned about by name, and the job runs.
TEST_F(LaunchConfigTest, FsdpSectionReachesTheAccelerator) {
  std::string file = std::string(EMBER_TEST_DATA_DIR) + "/accelerate_fsdp_config.yaml";
  ProcessResult result = launch_in({no_default_file}, {"--config-file", file});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_USE_CPU", "false"}, {"EMBER_STRATEGY", "zero3"},
                  {"EMBER_WRAP_POLICY", "transformer"}, {"EMBER_WRAP_MODULE_TYPES", "TransformerBlock"},
                  {"EMBER_STATE_DICT_TYPE", "sharded"}, {"EMBER_FORWARD_PREFETCH", "false"},
                  {"EMBER_BACKWARD_PREFETCH", "true"}, {"EMBER_ACTIVATION_CHECKPOINTING", "true"}});
  EXPECT_TRUE(contains(result.output, resolved_line(1, "zero3", 1, "none"))) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: warning: config file '" + file +
                                          "', line 10: fsdp_config.fsdp_cpu_ram_efficient_loading: true is not honoured"))
      << result.output;
}

// --strategy beats the file's section, as every flag beats the file.
TEST_F(LaunchConfigTest, StrategyFlagBeatsTheSection) {
  ProcessResult result = launch_in({no_default_file}, {"--config-file", std::string(EMBER_TEST_DATA_DIR) +
                                                                            "/accelerate_deepspeed_config.yaml",
                                                       "--strategy", "zero3", "--gradient-accumulation-steps", "2"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_GRADIENT_ACCUMULATION_STEPS", "2"}, {"EMBER_USE_CPU", "false"},
                  {"EMBER_STRATEGY", "zero3"}, {"EMBER_MAX_GRAD_NORM", "1"}});
  EXPECT_TRUE(contains(result.output, resolved_line(0, "zero3", 2, "1"))) << result.output;
  result = launch_in({no_default_file}, {"--nproc-per-node", "2", "--strategy", "fsdp"});
  expect_workers(result, 2, {{"EMBER_STRATEGY", "fsdp"}});
  EXPECT_TRUE(contains(result.output, resolved_line(1, "zero3", 1, "none"))) << result.output;
}

// Accelerate's own file for a 2-process CPU job runs as one.
TEST_F(LaunchConfigTest, AccelerateConfigRuns) {
  ProcessResult result =
      launch_in({no_default_file}, {"--config-file", std::string(EMBER_TEST_DATA_DIR) + "/accelerate_multi_cpu_config.yaml"});
  expect_workers(result, 2, {{"EMBER_MIXED_PRECISION", "no"}, {"EMBER_USE_CPU", "true"}});
  EXPECT_FALSE(contains(result.output, "warning")) << result.output;
}

TEST_F(LaunchConfigTest, FlagsBeatTheFile) {
  std::string file = config("num_processes: 3\nmixed_precision: fp16\ngradient_accumulation_steps: 2\nuse_cpu: false\n");
  ProcessResult result = launch_in({no_default_file}, {"--config-file", file, "--nproc-per-node", "2", "--mixed-precision",
                                                        "bf16", "--gradient-accumulation-steps", "8", "--cpu"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_GRADIENT_ACCUMULATION_STEPS", "8"}, {"EMBER_USE_CPU", "true"}});
}

// The file describes node 1 of 2 with its store on 10.9.9.9 (where this
// machine cannot host one); the flags make it a single-node job on loopback,
// which runs only if each of them beats its key.
TEST_F(LaunchConfigTest, LaunchFlagsBeatTheFilesLaunchKeys) {
  std::string file = config(
      "num_processes: 4\nnum_machines: 2\nmachine_rank: 1\nmain_process_ip: 10.9.9.9\nmain_process_port: 1\n");
  ProcessResult result = launch_in({no_default_file}, {"--config-file", file, "--nnodes", "1", "--node-rank", "0",
                                                        "--master-addr", "127.0.0.1", "--master-port", "0"});
  expect_workers(result, 4, {});
  EXPECT_TRUE(contains(result.output, "ember launch: 4 workers, ")) << result.output;
  EXPECT_TRUE(contains(result.output, ", store 127.0.0.1:")) << result.output;
}

// What neither a flag nor the file sets passes through as it was (even
// spelled "007"); what they set replaces the inherited value.
TEST_F(LaunchConfigTest, FileBeatsTheInheritedEnvironment) {
  std::string file = config("mixed_precision: bf16\n");
  ProcessResult result = launch_in(
      {no_default_file, "EMBER_MIXED_PRECISION=fp16", "EMBER_SEED=007", "EMBER_USE_CPU=false", "EMBER_PROJECT_DIR=/p"},
      {"--config-file", file, "--nproc-per-node", "2", "--cpu"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_SEED", "007"}, {"EMBER_USE_CPU", "true"},
                  {"EMBER_PROJECT_DIR", "/p"}});
}

// An inherited flag variable is read as the Accelerator reads it (1 and 0
// too), and refused with its message otherwise. Catches: EMBER_USE_CPU=1,
// which every worker's Accelerator takes, refused by the launcher as "not
// true or false".
TEST_F(LaunchConfigTest, InheritedFlagsAreReadAsTheAcceleratorReadsThem) {
  expect_workers(launch_in({no_default_file, "EMBER_USE_CPU=1", "EMBER_SPLIT_BATCHES=0"}, {"--nproc-per-node", "1"}),
                 1, {{"EMBER_USE_CPU", "1"}, {"EMBER_SPLIT_BATCHES", "0"}});
  ProcessResult refused = launch_in({no_default_file, "EMBER_USE_CPU=yes"}, {"--nproc-per-node", "1"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(contains(refused.output, "EMBER_USE_CPU='yes' is not a flag (use true or false, 1 or 0"))
      << refused.output;
}

// Without --config-file: $EMBER_CONFIG_FILE, else $XDG_CACHE_HOME/ember/default_config.yaml.
TEST_F(LaunchConfigTest, DefaultConfigFileIsUsedWhenItExists) {
  std::string file = config("num_processes: 2\nseed: 5\n", "named.yaml");
  expect_workers(launch_in({"EMBER_CONFIG_FILE=" + file}, {}), 2, {{"EMBER_SEED", "5"}});
  std::filesystem::create_directories(directory / "cache" / "ember");
  config("automatic_checkpoint_naming: true\ntotal_limit: 4\n", "cache/ember/default_config.yaml");
  expect_workers(launch_in({"XDG_CACHE_HOME=" + (directory / "cache").string()}, {}), 1,
                 {{"EMBER_AUTOMATIC_CHECKPOINT_NAMING", "true"}, {"EMBER_TOTAL_LIMIT", "4"}});
}

TEST_F(LaunchConfigTest, UnknownKeyWarnsAndTheJobRuns) {
  std::string file = config("num_processes: 2\nfuture_accelerate_option: 3\n");
  ProcessResult result = launch_in({no_default_file}, {"--config-file", file});
  expect_workers(result, 2, {});
  EXPECT_TRUE(contains(result.output, "ember launch: warning: config file '" + file +
                                          "', line 2: unknown key 'future_accelerate_option' ignored\n"))
      << result.output;
}

// The file's total of processes is shared between the machines; flags that
// change the machines change the share. Node 1 of 2 starts its workers only
// once it has met node 0 at the store: a second launcher here, the same file
// with --node-rank 0.
TEST_F(LaunchConfigTest, NumProcessesIsSharedBetweenMachines) {
  const std::string port = std::to_string(free_port());
  std::string file = config("num_processes: 4\nnum_machines: 2\nmachine_rank: 1\nmain_process_port: " + port + "\n");
  const std::vector<std::string> job = {no_default_file, "EMBER_STORE_TOKEN=launch-config-test-token"};
  Process node0(clean_command(job, launch_command({"--config-file", file, "--node-rank", "0"}, "launch_accelerator_env")));
  ProcessResult result = launch_in(job, {"--config-file", file});
  ProcessResult first = node0.wait(60s);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(contains(first.output, "ember launch: 2 workers (ranks 0-1 of 4, node 0 of 2)")) << first.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: 2 workers (ranks 2-3 of 4, node 1 of 2)")) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 3] rank 3:")) << result.output;

  std::string uneven = config("num_processes: 3\nnum_machines: 2\nmain_process_port: 1\n", "uneven.yaml");
  result = launch_in({no_default_file}, {"--config-file", uneven});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(contains(result.output, "ember launch: config file '" + uneven +
                                          "': num_processes 3 (the processes of every machine together) is not "
                                          "divisible by num_machines 2\n"))
      << result.output;
  result = launch_in({no_default_file}, {"--config-file", file, "--nnodes", "3", "--node-rank", "0"});
  EXPECT_TRUE(contains(result.output, "num_processes 4 (the processes of every machine together) is not divisible by "
                                      "--nnodes 3"))
      << result.output;
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

// Bad values from any source stop the launcher before a worker starts, and
// the message names the flag, the file and key, or the variable, and the value.
TEST_F(LaunchConfigTest, BadValuesAreErrorsBeforeAnyWorkerStarts) {
  std::string bad_value = config("gradient_accumulation_steps: many\n", "bad_value.yaml");
  std::string bad_yaml = config("mixed_precision: [bf16\n", "bad_yaml.yaml");
  std::string missing = (directory / "missing.yaml").string();
  struct Case {
    std::vector<std::string> assignments;
    std::vector<std::string> flags;
    std::string message;
  };
  std::vector<Case> cases = {
      {{}, {"--mixed-precision", "fp8"}, "ember launch: --mixed-precision: 'fp8' is not one of no, fp16 or bf16\n"},
      {{}, {"--strategy", "zero4"},
       "ember launch: --strategy: 'zero4' is not one of ddp, zero1, zero2, zero3, fsdp or hybrid\n"},
      {{"EMBER_STRATEGY=FULL_SHARD"}, {},
       "ember launch: EMBER_STRATEGY in the environment: 'FULL_SHARD' is not one of ddp, zero1, zero2, zero3, fsdp or "
       "hybrid\n"},
      {{"EMBER_MAX_GRAD_NORM=-1"}, {}, "ember launch: EMBER_MAX_GRAD_NORM in the environment: '-1' is not a positive number\n"},
      {{}, {"--gradient-accumulation-steps", "0"},
       "ember launch: --gradient-accumulation-steps: '0' is not an integer of at least 1\n"},
      {{}, {"--config-file", bad_value},
       "ember launch: config file '" + bad_value +
           "', line 1, gradient_accumulation_steps: 'many' is not an integer of at least 1\n"},
      {{}, {"--config-file", bad_yaml},
       "ember launch: cannot parse config file '" + bad_yaml + "': end of sequence flow not found at line 2, column 1\n"},
      {{}, {"--config-file", missing}, "ember launch: config file '" + missing + "' does not exist\n"},
      {{"EMBER_USE_CPU=yes"}, {}, "ember launch: EMBER_USE_CPU='yes' is not a flag (use true or false, 1 or 0"},
      // Read as false, an empty flag turned even_batches (default on) off: refused, as Accelerate's
      // str_to_bool. Mutation caught: parse_env_flag taking "" for false.
      {{"EMBER_EVEN_BATCHES="}, {}, "ember launch: EMBER_EVEN_BATCHES='' is not a flag"},
      {{"EMBER_TOTAL_LIMIT=0"}, {}, "ember launch: EMBER_TOTAL_LIMIT in the environment: '0' is not an integer of at least 1\n"},
      {{"EMBER_CONFIG_FILE=" + bad_value}, {},
       "ember launch: config file '" + bad_value +
           "', line 1, gradient_accumulation_steps: 'many' is not an integer of at least 1\n"},
  };
  // Accelerate runs distributed_type NO as one process; ember started two
  // without a word. Mutation caught: the NO check removed from
  // apply_accelerate_sections -> two workers start.
  std::string single = config("distributed_type: 'NO'\nnum_processes: 2\n", "single.yaml");
  cases.push_back({{}, {"--config-file", single},
                   "ember launch: config file '" + single + "', line 2, num_processes: 2, but distributed_type NO (line "
                   "1) is one process, as Accelerate runs it; set distributed_type: MULTI_CPU (or MULTI_GPU), or "
                   "num_processes: 1\n"});
  for (const Case& c : cases) {
    std::vector<std::string> assignments = {no_default_file};
    assignments.insert(assignments.end(), c.assignments.begin(), c.assignments.end());
    ProcessResult result = launch_in(assignments, c.flags);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_TRUE(contains(result.output, c.message)) << "expected '" << c.message << "' in: " << result.output;
    EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  }
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

// --- Accelerate's and torchrun's spellings (Note [Accelerate's and torchrun's flags]) ---

// Accelerate's command line as it is: --num_processes is every machine's
// processes (one machine here), --multi_gpu changes nothing.
TEST_F(LaunchConfigTest, AccelerateFlagSpellingsAreAliases) {
  ProcessResult result = launch_in({no_default_file}, {"--multi_gpu", "--num_processes", "2", "--mixed_precision", "bf16",
                                                        "--gradient_accumulation_steps", "4", "--cpu"});
  expect_workers(result, 2,
                 {{"EMBER_MIXED_PRECISION", "bf16"}, {"EMBER_GRADIENT_ACCUMULATION_STEPS", "4"}, {"EMBER_USE_CPU", "true"}});
  std::string file = config("mixed_precision: fp16\n");
  result = launch_in({no_default_file}, {"--config_file", file, "--num-processes", "2"});
  expect_workers(result, 2, {{"EMBER_MIXED_PRECISION", "fp16"}});
}

TEST_F(LaunchConfigTest, TorchrunFlagSpellingsAreAliases) {
  ProcessResult result = launch_in({no_default_file}, {"--nproc_per_node", "2", "--nnodes", "1", "--node_rank", "0",
                                                        "--master_addr", "127.0.0.1", "--master_port", "0"});
  expect_workers(result, 2, {});
  EXPECT_TRUE(contains(result.output, "ember launch: 2 workers, ")) << result.output;
  // --standalone: one node, a free loopback port, whatever the file's launch keys say.
  std::string file = config("main_process_ip: 10.9.9.9\nmain_process_port: 1\n");
  result = launch_in({no_default_file}, {"--standalone", "--nproc_per_node", "2", "--config-file", file});
  expect_workers(result, 2, {});
  EXPECT_TRUE(contains(result.output, ", store 127.0.0.1:")) << result.output;
}

// Accelerate's --num_processes is the total of every machine: two launchers
// of --num_processes 2 --num_machines 2 start one worker each (ranks 0 and 1
// of 2). Catches: --num_processes taken as per node (ranks 0-1 and 2-3 of 4).
TEST_F(LaunchConfigTest, NumProcessesFlagIsTheTotalOfEveryMachine) {
  const std::string port = std::to_string(free_port());
  const std::vector<std::string> job = {no_default_file, "EMBER_STORE_TOKEN=launch-alias-test-token"};
  auto flags = [&](const char* rank) {
    return std::vector<std::string>{"--num_processes", "2", "--num_machines", "2", "--machine_rank", rank,
                                    "--main_process_ip", "127.0.0.1", "--main_process_port", port};
  };
  Process node0(clean_command(job, launch_command(flags("0"), "launch_accelerator_env")));
  ProcessResult second = launch_in(job, flags("1"));
  ProcessResult first = node0.wait(60s);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(contains(first.output, "ember launch: 1 worker (ranks 0-0 of 2, node 0 of 2)")) << first.output;
  EXPECT_TRUE(contains(second.output, "ember launch: 1 worker (ranks 1-1 of 2, node 1 of 2)")) << second.output;
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
}

TEST_F(LaunchConfigTest, AliasMisusesAreErrorsBeforeAnyWorkerStarts) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--num_processes", "4", "--nproc-per-node", "2"},
       "ember launch: --num_processes 4 (Accelerate's: the processes of every machine together) and --nproc-per-node 2 "
       "(this machine's) are both given: use one\n"},
      {{"--num_processes", "3", "--num_machines", "2", "--main_process_port", "1"},
       "ember launch: --num_processes 3 (the processes of every machine together) is not divisible by the 2 machines"},
      {{"--standalone", "--nnodes", "2", "--master_port", "1"},
       "ember launch: --standalone is a job on one node, but --nnodes (or num_machines) is 2\n"},
      {{"--standalone", "--master_port", "29500"},
       "ember launch: --standalone hosts the store on a free loopback port: it takes no --master-port"},
  };
  for (const auto& [flags, message] : cases) {
    ProcessResult result = launch_in({no_default_file}, flags);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_TRUE(contains(result.output, message)) << "expected '" << message << "' in: " << result.output;
    EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  }
}

// A flag takes no value. CLI11 accepted --cpu=false and skipped the flag's
// callback, so a config file's use_cpu: true stayed in force without a word
// (argparse refuses the value). Mutation caught: disable_flag_override left
// off --cpu -> the job runs with EMBER_USE_CPU=true.
TEST_F(LaunchConfigTest, AValueOnAFlagIsRefused) {
  const std::string file = config("use_cpu: true\n");
  for (const std::string flag : {"--cpu=false", "--multi_gpu=garbage", "--standalone=no", "--bind-cores=0"}) {
    ProcessResult result = launch_in({no_default_file}, {"--config-file", file, flag});
    EXPECT_EQ(result.exit_code, 2) << flag << ": " << result.output;
    EXPECT_TRUE(contains(result.output, "was given a disallowed flag override")) << flag << ": " << result.output;
    EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  }
}

// Without ember's own default file, Accelerate's ($HF_HOME/accelerate/
// default_config.yaml) is read, quoted numbers and all, and the launcher says
// which file it used. EMBER_CONFIG_FILE naming an absent file still means none.
TEST_F(LaunchConfigTest, AcceleratesDefaultConfigIsReadWhenEmbersIsAbsent) {
  std::filesystem::create_directories(directory / "hf" / "accelerate");
  std::string file = config("num_processes: '2'\nmixed_precision: bf16\n", "hf/accelerate/default_config.yaml");
  const std::string cache = (directory / "cache").string();
  ProcessResult result = launch_in({"HF_HOME=" + (directory / "hf").string(), "XDG_CACHE_HOME=" + cache}, {});
  expect_workers(result, 2, {{"EMBER_MIXED_PRECISION", "bf16"}});
  EXPECT_TRUE(contains(result.output, "ember launch: config file '" + file + "' (Accelerate's default config; ember's own " +
                                          cache + "/ember/default_config.yaml is absent)\n"))
      << result.output;
  expect_workers(launch_in({no_default_file, "HF_HOME=" + (directory / "hf").string()}, {}), 1, {});
}

}  // namespace
}  // namespace ember::test
