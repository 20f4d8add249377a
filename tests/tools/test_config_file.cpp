// The config file's reader and writer (tools/config_file.cpp) and the values
// each key accepts (tools/config_keys.cpp), in-process: configs written by
// `accelerate config` (tests/data/accelerate_*_config.yaml), ember's own keys,
// unknown keys, wrong values and types, the text written and read back, and
// where the default file is.
#include <fmt/format.h>
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

// tests/data/accelerate_deepspeed_config.yaml: `accelerate config` (1.x) for
// this machine, multi-GPU, DeepSpeed without a JSON file, ZeRO stage 2, no
// offloading, 4 accumulation steps, clipping at 1.0, 2 processes, bf16. It
// ran as DDP with accumulation 1 before (issue 17); now every key counts.
TEST_F(ConfigFileTest, ReadsAccelerateDeepSpeedConfig) {
  ConfigFile config = launch::read_config_file(kDataDir + "/accelerate_deepspeed_config.yaml");
  Settings expected = {{"gradient_accumulation_steps", "4"}, {"machine_rank", "0"}, {"max_grad_norm", "1"},
                       {"mixed_precision", "bf16"},          {"num_machines", "1"}, {"num_processes", "2"},
                       {"strategy", "zero2"},                {"use_cpu", "false"}};
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
}

// tests/data/accelerate_fsdp_config.yaml: FSDP1, FULL_SHARD, transformer
// wrapping of TransformerBlock, BACKWARD_PRE, sharded state dict, activation
// checkpointing; CPU-RAM-efficient loading is warned about (every process
// builds the whole model in ember).
TEST_F(ConfigFileTest, ReadsAccelerateFsdpConfig) {
  std::string path = kDataDir + "/accelerate_fsdp_config.yaml";
  ConfigFile config = launch::read_config_file(path);
  Settings expected = {
      {"activation_checkpointing", "true"}, {"backward_prefetch", "true"},         {"forward_prefetch", "false"},
      {"machine_rank", "0"},                {"mixed_precision", "bf16"},           {"num_machines", "1"},
      {"num_processes", "2"},               {"state_dict_type", "sharded"},        {"strategy", "zero3"},
      {"use_cpu", "false"},                 {"wrap_module_types", "TransformerBlock"}, {"wrap_policy", "transformer"},
  };
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings,
            std::vector<std::string>{"config file '" + path +
                                     "', line 10: fsdp_config.fsdp_cpu_ram_efficient_loading: true is not honoured: "
                                     "every process builds the whole model (prepare() then starts every process from "
                                     "rank 0's parameters)"});
}

// Every value each key takes, Accelerate's older spellings included.
TEST_F(ConfigFileTest, MapsEveryDeepSpeedAndFsdpValue) {
  struct Case {
    std::string text;
    Settings expected;
  };
  std::vector<Case> cases = {
      {"distributed_type: DEEPSPEED\n", {{"strategy", "zero2"}, {"max_grad_norm", "1"}}},  // DeepSpeedPlugin's defaults
      {"distributed_type: FSDP\n", {{"strategy", "zero3"}}},       // FULL_SHARD, the plugin's default
      {"distributed_type: FSDP\nfsdp_config: {}\n", {{"strategy", "zero3"}}},
      {"distributed_type: MULTI_GPU\ndeepspeed_config: {}\nfsdp_config: {}\n", {}},
      {"deepspeed_config:\n  zero_stage: 0\n", {{"strategy", "ddp"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  zero_stage: 1\n", {{"strategy", "zero1"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  zero_stage: '3'\n", {{"strategy", "zero3"}, {"max_grad_norm", "1"}}},  // Accelerate reads '3' as 3
      {"deepspeed_config:\n  gradient_accumulation_steps: '8'\n",
       {{"strategy", "zero2"}, {"gradient_accumulation_steps", "8"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  gradient_clipping: 0.5\n", {{"strategy", "zero2"}, {"max_grad_norm", "0.5"}}},
      {"deepspeed_config:\n  gradient_clipping: 0\n", {{"strategy", "zero2"}}},  // DeepSpeed: 0 is no clipping
      {"deepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n  zero3_save_16bit_model: false\n",
       {{"strategy", "zero3"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  zero_stage: 2\n  deepspeed_multinode_launcher: standard\n",
       {{"strategy", "zero2"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  zero_stage: 2\ngradient_accumulation_steps: 2\n",
       {{"strategy", "zero2"}, {"gradient_accumulation_steps", "2"}, {"max_grad_norm", "1"}}},
      {"deepspeed_config:\n  gradient_accumulation_steps: 2\ngradient_accumulation_steps: 2\n",
       {{"strategy", "zero2"}, {"gradient_accumulation_steps", "2"}, {"max_grad_norm", "1"}}},  // no conflict
      // A top-level key beats a default.
      {"distributed_type: DEEPSPEED\nstrategy: zero1\n", {{"strategy", "zero1"}, {"max_grad_norm", "1"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n", {{"strategy", "zero2"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: no_shard\n", {{"strategy", "ddp"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n", {{"strategy", "hybrid"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: 1\n", {{"strategy", "zero3"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: 2\n", {{"strategy", "zero2"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: 3\n", {{"strategy", "ddp"}}},
      {"fsdp_config:\n  fsdp_sharding_strategy: 4\n", {{"strategy", "hybrid"}}},
      {"fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n", {{"strategy", "zero2"}}},
      {"fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n", {{"strategy", "zero3"}}},
      {"fsdp_config:\n  fsdp_reshard_after_forward: SHARD_GRAD_OP\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n",
       {{"strategy", "zero2"}}},
      {"fsdp_config:\n  sharding_strategy: FULL_SHARD\n", {{"strategy", "zero3"}}},  // Accelerate adds the fsdp_ prefix
      {"fsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 100000000\n",
       {{"strategy", "zero3"}, {"wrap_policy", "size"}, {"min_num_params", "100000000"}}},
      {"fsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n", {{"strategy", "zero3"}, {"wrap_policy", "none"}}},
      {"fsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: 'Block, Embedding'\n",
       {{"strategy", "zero3"}, {"wrap_module_types", "Block,Embedding"}}},
      {"fsdp_config:\n  fsdp_state_dict_type: FULL_STATE_DICT\n", {{"strategy", "zero3"}, {"state_dict_type", "full"}}},
      {"fsdp_config:\n  fsdp_state_dict_type: 3\n", {{"strategy", "zero3"}, {"state_dict_type", "sharded"}}},
      {"fsdp_config:\n  fsdp_backward_prefetch: BACKWARD_POST\n", {{"strategy", "zero3"}, {"backward_prefetch", "true"}}},
      {"fsdp_config:\n  fsdp_backward_prefetch: NO_PREFETCH\n", {{"strategy", "zero3"}, {"backward_prefetch", "false"}}},
      {"fsdp_config:\n  fsdp_backward_prefetch_policy: BACKWARD_PRE\n",
       {{"strategy", "zero3"}, {"backward_prefetch", "true"}}},
      {"fsdp_config:\n  fsdp_forward_prefetch: 'True'\n  fsdp_activation_checkpointing: no\n",
       {{"strategy", "zero3"}, {"forward_prefetch", "true"}, {"activation_checkpointing", "false"}}},
      {"fsdp_config:\n  fsdp_offload_params: false\n  fsdp_sync_module_states: true\n  fsdp_use_orig_params: true\n",
       {{"strategy", "zero3"}}},
  };
  for (const Case& c : cases) {
    ConfigFile config = read(c.text);
    EXPECT_EQ(config.settings, c.expected) << c.text;
    EXPECT_EQ(config.warnings, std::vector<std::string>{}) << c.text;
    // What the sections set survives the writer (the invariant of tests/fuzz/config_yaml.cpp):
    // config_yaml names the job FSDP or DEEPSPEED, whose default strategy the written key beats.
    ConfigFile reread = read(launch::config_yaml(config.settings));
    EXPECT_EQ(reread.settings, config.settings) << launch::config_yaml(config.settings);
    EXPECT_EQ(reread.warnings, std::vector<std::string>{}) << c.text;
  }
}

// What ember does not do is said, key by key; the job still runs.
TEST_F(ConfigFileTest, KeysNotHonouredAreWarnedAboutByName) {
  struct Case {
    std::string text;
    std::string warning;  // after "config file '<path>', line 2: "
  };
  std::vector<Case> cases = {
      {"deepspeed_config:\n  offload_optimizer_device: cpu\n",
       "deepspeed_config.offload_optimizer_device: cpu is not honoured: ember keeps the optimizer state on the device "
       "it trains on (in a CPU job, the CPU's memory already)"},
      {"deepspeed_config:\n  offload_param_device: nvme\n",
       "deepspeed_config.offload_param_device: nvme is not honoured: ember keeps the parameters on the device it "
       "trains on (in a CPU job, the CPU's memory already)"},
      {"deepspeed_config:\n  offload_param_nvme_path: /nvme\n",
       "deepspeed_config.offload_param_nvme_path: ignored: ember does not offload to NVMe"},
      {"deepspeed_config:\n  zero3_init_flag: true\n",
       "deepspeed_config.zero3_init_flag: true is not honoured: every process builds the whole model, and prepare() "
       "shards it"},
      {"deepspeed_config:\n  zero3_save_16bit_model: true\n",
       "deepspeed_config.zero3_save_16bit_model: true is not honoured: save_model writes the whole model in the "
       "parameters' own dtype"},
      {"deepspeed_config:\n  deepspeed_multinode_launcher: pdsh\n",
       "deepspeed_config.deepspeed_multinode_launcher: 'pdsh' ignored: ember launch runs on each machine itself "
       "(num_machines, machine_rank)"},
      {"deepspeed_config:\n  deepspeed_hostfile: /etc/hosts\n",
       "deepspeed_config.deepspeed_hostfile: ignored: ember launch runs on each machine itself (num_machines, "
       "machine_rank)"},
      {"deepspeed_config:\n  deepspeed_moe_layer_cls_names: MixtralSparseMoeBlock\n",
       "deepspeed_config.deepspeed_moe_layer_cls_names: not honoured: ember has no mixture-of-experts layers to treat "
       "apart"},
      {"deepspeed_config:\n  future_key: 1\n", "deepspeed_config.future_key: unknown key ignored"},
      {"fsdp_config:\n  fsdp_offload_params: true\n",
       "fsdp_config.fsdp_offload_params: true is not honoured: ember keeps parameters and gradients on the device it "
       "trains on"},
      {"fsdp_config:\n  fsdp_sync_module_states: false\n",
       "fsdp_config.fsdp_sync_module_states: false is not honoured: prepare() always starts every process from rank "
       "0's parameters"},
      {"fsdp_config:\n  fsdp_use_orig_params: false\n",
       "fsdp_config.fsdp_use_orig_params: false is not honoured: the optimizer always sees the model's own parameters"},
      {"fsdp_config:\n  fsdp_ignored_modules: lm_head\n",
       "fsdp_config.fsdp_ignored_modules: not honoured: every module's parameters are sharded"},
      {"fsdp_config:\n  fsdp_state_dict_type: LOCAL_STATE_DICT\n",
       "fsdp_config.fsdp_state_dict_type: LOCAL_STATE_DICT is read as SHARDED_STATE_DICT: ember's sharded checkpoints "
       "carry a manifest and load at any number of processes"},
      {"fsdp_config:\n  fsdp_mixed_precision_policy: bf16\n", "fsdp_config.fsdp_mixed_precision_policy: unknown key ignored"},
  };
  for (const Case& c : cases) {
    ConfigFile config = read(c.text);
    EXPECT_EQ(config.warnings, std::vector<std::string>{"config file '" + path() + "', line 2: " + c.warning}) << c.text;
  }
  EXPECT_EQ(read("deepspeed_config:\n  offload_optimizer_device: cpu\n").settings,
            (Settings{{"strategy", "zero2"}, {"max_grad_norm", "1"}}));
}

// What ember cannot run, or cannot tell how to run, stops the launcher with the key and the value.
TEST_F(ConfigFileTest, DeepSpeedAndFsdpErrors) {
  struct Case {
    std::string text;
    std::string message;  // after "config file '<path>'"
  };
  std::vector<Case> cases = {
      {"distributed_type: XLA\n",
       ", line 1, distributed_type: 'XLA' is not a kind of job ember runs (ember has no TPU or XLA backend); use NO, "
       "MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP"},
      {"distributed_type: MEGATRON_LM\n",
       ", line 1, distributed_type: 'MEGATRON_LM' is not a kind of job ember runs (ember has no tensor parallelism); "
       "use NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP"},
      {"distributed_type: MULTI_NPU\n",
       ", line 1, distributed_type: 'MULTI_NPU' is not a kind of job ember runs (ember runs on CPUs and NVIDIA GPUs "
       "(MULTI_CPU, MULTI_GPU)); use NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP"},
      // distributed_type FSDP with ember's strategy ddp ran DDP without a word.
      {"distributed_type: FSDP\nstrategy: ddp\n",
       ": strategy is ddp, which shards nothing, but distributed_type FSDP asks for sharding; keep one"},
      {"deepspeed_config:\n  zero_stage: 2\nstrategy: ddp\n",
       ": strategy is ddp, which shards nothing, but distributed_type DEEPSPEED asks for sharding; keep one"},
      {"deepspeed_config:\n  zero_stage: 2\nfsdp_config:\n  fsdp_version: 1\n",
       ": deepspeed_config (line 1) and fsdp_config (line 3) are both set; a job shards one way: keep one"},
      {"distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 2\n",
       ", line 2, deepspeed_config: the section is set but distributed_type is MULTI_GPU (line 1), for which "
       "Accelerate ignores it; set distributed_type: DEEPSPEED, or remove the section"},
      {"distributed_type: DEEPSPEED\nfsdp_config:\n  fsdp_version: 1\n",
       ", line 2, fsdp_config: the section is set but distributed_type is DEEPSPEED (line 1), for which Accelerate "
       "ignores it; set distributed_type: FSDP, or remove the section"},
      {"deepspeed_config:\n  deepspeed_config_file: ds.json\n",
       ", line 2, deepspeed_config.deepspeed_config_file: 'ds.json': ember does not read DeepSpeed's JSON config; "
       "give zero_stage, gradient_accumulation_steps and gradient_clipping in deepspeed_config instead (or ember "
       "launch --strategy zero1/zero2/zero3), and remove deepspeed_config_file"},
      {"deepspeed_config:\n  zero_stage: 4\n",
       ", line 2, deepspeed_config.zero_stage: '4' is not an integer from 0 to 3"},
      {"deepspeed_config:\n  zero_stage: two\n",
       ", line 2, deepspeed_config.zero_stage: 'two' is not an integer from 0 to 3"},
      {"deepspeed_config:\n  gradient_accumulation_steps: auto\n",
       ", line 2, deepspeed_config.gradient_accumulation_steps: 'auto' is not an integer from 1 to 2147483647"},
      {"deepspeed_config:\n  gradient_clipping: -1\n",
       ", line 2, deepspeed_config.gradient_clipping: '-1' is not a number of at least 0"},
      {"deepspeed_config:\n  offload_optimizer_device: gpu\n",
       ", line 2, deepspeed_config.offload_optimizer_device: 'gpu' is not one of none, cpu, nvme"},
      {"deepspeed_config:\n  zero3_init_flag: maybe\n",
       ", line 2, deepspeed_config.zero3_init_flag: 'maybe' is not true or false"},
      {"deepspeed_config:\n  zero_stage: [2]\n", ", line 2, deepspeed_config.zero_stage: expected a value, got a list"},
      {"deepspeed_config: 2\n", ", line 1, deepspeed_config: expected a mapping of keys to values, got a value"},
      {"gradient_accumulation_steps: 2\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n",
       ": gradient_accumulation_steps is 2 at line 1 but deepspeed_config.gradient_accumulation_steps at line 3 gives "
       "4; keep one"},
      {"strategy: zero1\ndeepspeed_config:\n  zero_stage: 3\n",
       ": strategy is zero1 at line 1 but deepspeed_config.zero_stage at line 3 gives zero3; keep one"},
      {"max_grad_norm: 2\ndeepspeed_config:\n  gradient_clipping: 1.0\n",
       ": max_grad_norm is 2 at line 1 but deepspeed_config.gradient_clipping at line 3 gives 1; keep one"},
      {"fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_reshard_after_forward: false\n",
       ": fsdp_config.fsdp_sharding_strategy at line 2 gives strategy zero3 but fsdp_config.fsdp_reshard_after_forward "
       "at line 3 gives zero2; keep one"},
      {"fsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD_ZERO2\n",
       ", line 2, fsdp_config.fsdp_sharding_strategy: 'HYBRID_SHARD_ZERO2' (HYBRID_SHARD_ZERO2) is not a strategy "
       "ember has: its hybrid shards the parameters too inside a node (HYBRID_SHARD); use HYBRID_SHARD, or "
       "SHARD_GRAD_OP for zero2 over every process"},
      {"fsdp_config:\n  fsdp_sharding_strategy: 5\n",
       ", line 2, fsdp_config.fsdp_sharding_strategy: '5' (HYBRID_SHARD_ZERO2) is not a strategy ember has"},
      {"fsdp_config:\n  fsdp_reshard_after_forward: NO_RESHARD\n",
       ", line 2, fsdp_config.fsdp_reshard_after_forward: 'NO_RESHARD' is not one of FULL_SHARD, SHARD_GRAD_OP, "
       "NO_SHARD, HYBRID_SHARD (or 1 to 4)"},
      {"fsdp_config:\n  fsdp_version: 3\n", ", line 2, fsdp_config.fsdp_version: '3' is not an integer from 1 to 2"},
      {"fsdp_config:\n  fsdp_auto_wrap_policy: MODULE_WRAP\n",
       ", line 2, fsdp_config.fsdp_auto_wrap_policy: 'MODULE_WRAP' is not one of TRANSFORMER_BASED_WRAP, "
       "SIZE_BASED_WRAP, NO_WRAP"},
      {"fsdp_config:\n  fsdp_min_num_params: 1e8\n",
       ", line 2, fsdp_config.fsdp_min_num_params: '1e8' is not an integer from 1 to 9223372036854775807"},
      {"fsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: 'Block,,Mlp'\n",
       ", line 2, fsdp_config.fsdp_transformer_layer_cls_to_wrap: 'Block,,Mlp' is not a comma-separated list of "
       "module type names"},
      {"fsdp_config:\n  fsdp_state_dict_type: FULL\n",
       ", line 2, fsdp_config.fsdp_state_dict_type: 'FULL' is not one of FULL_STATE_DICT, SHARDED_STATE_DICT, "
       "LOCAL_STATE_DICT"},
      {"fsdp_config:\n  fsdp_backward_prefetch: ALWAYS\n",
       ", line 2, fsdp_config.fsdp_backward_prefetch: 'ALWAYS' is not one of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH"},
      {"fsdp_config:\n  sharding_strategy: FULL_SHARD\n  fsdp_sharding_strategy: FULL_SHARD\n",
       ", line 3, fsdp_config.fsdp_sharding_strategy: the key appears twice"},
  };
  for (const Case& c : cases) {
    std::string message = read_error(c.text);
    EXPECT_TRUE(contains(message, "config file '" + path() + "'" + c.message)) << c.text << "\ngot: " << message;
  }
}

// ember's own sharding keys at the top level, and what each refuses.
TEST_F(ConfigFileTest, ReadsShardingKeys) {
  ConfigFile config = read(
      "strategy: hybrid\n"
      "wrap_policy: size\n"
      "wrap_module_types: Block , Mlp\n"
      "min_num_params: 12345678901\n"
      "state_dict_type: full\n"
      "forward_prefetch: off\n"
      "backward_prefetch: true\n"
      "activation_checkpointing: yes\n"
      "max_grad_norm: 1.0e-1\n");
  Settings expected = {
      {"activation_checkpointing", "true"}, {"backward_prefetch", "true"}, {"forward_prefetch", "false"},
      {"max_grad_norm", "0.1"},             {"min_num_params", "12345678901"}, {"state_dict_type", "full"},
      {"strategy", "hybrid"},               {"wrap_module_types", "Block,Mlp"}, {"wrap_policy", "size"},
  };
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(read("strategy: ''\n").settings, Settings{});
  EXPECT_EQ(read_error("strategy: zero4\n"),
            "config file '" + path() + "', line 1, strategy: 'zero4' is not one of ddp, zero1, zero2, zero3, fsdp or hybrid");
  EXPECT_EQ(read_error("wrap_policy: TRANSFORMER_BASED_WRAP\n"),
            "config file '" + path() + "', line 1, wrap_policy: 'TRANSFORMER_BASED_WRAP' is not one of transformer, "
                                       "size or none");
  EXPECT_EQ(read_error("max_grad_norm: 0\n"),
            "config file '" + path() + "', line 1, max_grad_norm: '0' is not a positive number");
  EXPECT_EQ(read_error("max_grad_norm: '1'\n"),
            "config file '" + path() + "', line 1, max_grad_norm: expected a positive number, got the string '1'");
  EXPECT_EQ(read_error("min_num_params: 0\n"),
            "config file '" + path() + "', line 1, min_num_params: '0' is not an integer of at least 1");
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

// Accelerate's keys that ember does not act on were all dropped without a word, whatever
// they asked for (gpu_ids: 1,3 ran on every GPU; debug: true ran without checks). A value
// that asks for nothing (Accelerate's default, null, an empty section) still passes
// silently; any other gets a warning naming ember's way, if it has one. Mutation caught:
// asks_for_nothing() returning true for everything (no warnings below).
TEST_F(ConfigFileTest, AccelerateKeysEmberIgnoresWarnWhenTheyAskForSomething) {
  ConfigFile quiet = read(
      "compute_environment: LOCAL_MACHINE\ndebug: false\ngpu_ids: all\nenable_cpu_affinity: false\n"
      "dynamo_config:\n  dynamo_backend: 'NO'\nmpirun_config: {}\ndowncast_bf16: 'no'\ntpu_name: pod\n");
  EXPECT_EQ(quiet.warnings, std::vector<std::string>{});
  ConfigFile loud = read("gpu_ids: 1,3\ndebug: true\ndynamo_config:\n  dynamo_backend: INDUCTOR\n"
                         "compute_environment: AMAZON_SAGEMAKER\nenable_cpu_affinity: true\n");
  const std::string at = "config file '" + path() + "', line ";
  EXPECT_EQ(loud.warnings,
            (std::vector<std::string>{
                at + "1: Accelerate's 'gpu_ids' is set to '1,3', which ember does not honour; set CUDA_VISIBLE_DEVICES",
                at + "2: Accelerate's 'debug' is set to 'true', which ember does not honour; set "
                     "EMBER_DISTRIBUTED_DEBUG=1 for ember's collective checks",
                at + "3: Accelerate's 'dynamo_config' is set, which ember does not honour; ember has no graph compiler",
                at + "5: Accelerate's 'compute_environment' is set to 'AMAZON_SAGEMAKER', which ember does not honour; "
                     "ember launch starts this machine's workers (srun, mpirun and torchrun are read too)",
                at + "6: Accelerate's 'enable_cpu_affinity' is set to 'true', which ember does not honour; use ember "
                     "launch --bind-cores"}));
}

// PyYAML merges `<<: *base` into its mapping (Accelerate runs 2 bf16 processes
// from this file); yaml-cpp kept `<<` as an unknown key, and the job ran with
// the defaults after an "unknown key" warning. Refused, at any depth; a quoted
// '<<' is an ordinary key to both. Mutation caught: parse_file without
// refuse_merge_keys.
TEST_F(ConfigFileTest, YamlMergeKeysAreRefused) {
  EXPECT_EQ(read_error("base: &base {num_processes: 2, mixed_precision: bf16}\n<<: *base\n"),
            "config file '" + path() + "', line 2: YAML merge keys (<<) are not supported: write the merged keys out");
  EXPECT_EQ(read_error("fsdp_config:\n  <<: {fsdp_sharding_strategy: FULL_SHARD}\n"),
            "config file '" + path() + "', line 2: YAML merge keys (<<) are not supported: write the merged keys out");
  ConfigFile quoted = read("'<<': 1\nseed: 3\n");
  EXPECT_EQ(quoted.settings, (Settings{{"seed", "3"}}));
  EXPECT_EQ(quoted.warnings, std::vector<std::string>{"config file '" + path() + "', line 1: unknown key '<<' ignored"});
}

// An ignored Accelerate key whose value nests aliases, each level naming the
// one below twice, was walked once per path: 2^N mappings for a file of a few
// hundred bytes (depth 24 took 36 s, depth 40 never ended). Each mapping is read
// once now; the depth-60 file below would not finish in the age of the universe
// otherwise. Mutation caught: asks_for_nothing without its `seen` positions.
TEST_F(ConfigFileTest, NestedAliasesAreReadOnce) {
  std::string text = "ipex_config:\n  defs:\n    a0: &a0 {off: false}\n";
  for (int level = 1; level <= 60; ++level)
    text += fmt::format("    a{0}: &a{0} {{x: *a{1}, y: *a{1}}}\n", level, level - 1);
  text += "  ipex: *a60\nseed: 1\n";
  ConfigFile config = read(text);
  EXPECT_EQ(config.settings, (Settings{{"seed", "1"}}));
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
  // And a mapping that asks for something still does, reached through an alias.
  ConfigFile loud = read("ipex_config:\n  defs: {a: &a {ipex: true}}\n  use: *a\n");
  EXPECT_EQ(loud.warnings.size(), 1u);
}

// Accelerate reads its integer keys with int(), so `num_processes: '2'` is 2
// there, and here. Booleans and numbers with a fraction stay strict.
// Catches: the quoted-string check applied to integer keys again.
TEST_F(ConfigFileTest, QuotedIntegersAreNumbersAsInAccelerate) {
  write_text(path(), "num_processes: '2'\nnum_machines: \"1\"\nmain_process_port: '29500'\nseed: '007'\n");
  ConfigFile config = launch::read_config_file(path());
  Settings expected = {{"main_process_port", "29500"}, {"num_machines", "1"}, {"num_processes", "2"}, {"seed", "7"}};
  EXPECT_EQ(config.settings, expected);
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
      // PyYAML reads a plain 010 as octal 8 (Accelerate would start 8 processes, ember 10).
      {"num_processes: 010\n", "1, num_processes: '010' has a leading zero, which makes it an octal number to "
                                "Accelerate's YAML reader; write it without the zero (or quote it)"},
      {"seed: -010\n", "1, seed: '-010' has a leading zero, which makes it an octal number to Accelerate's YAML "
                        "reader; write it without the zero (or quote it)"},
      {"num_processes: 'two'\n", "1, num_processes: 'two' is not an integer of at least 1"},
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
  // Several documents: yaml-cpp's Load read the first and dropped the rest without a
  // word; PyYAML's safe_load (Accelerate's) refuses them. Mutation caught: YAML::Load again.
  EXPECT_EQ(read_error("num_processes: 1\n---\nnum_processes: 2\n"),
            "config file '" + path() + "' holds 2 YAML documents (separated by ---); a config file holds one");
  EXPECT_EQ(read("---\nnum_processes: 2\n").settings.at("num_processes"), "2");  // one document, marked
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
            "config file '" + path() + "' holds the control character 0x01 at index 14: YAML allows only tab, "
            "line feed and carriage return");
  EXPECT_EQ(read_error("project_dir: \"a\\x01b\"\n"),  // the same character through an escape
            "config file '" + path() + "', line 1, project_dir: the value holds the control character 0x01");
  // A NUL in the file: yaml-cpp read "\0_" as the escape of a no-break space, a lone 0xA0 byte that
  // config_yaml wrote into a file that is not UTF-8 (found by tests/fuzz/config_yaml.cpp,
  // corpus/config_yaml/regression_nul). PyYAML refuses the NUL; so does ember, naming where it is.
  EXPECT_EQ(read_error(std::string("main_process_ip: a\0_b\n", 22)),
            "config file '" + path() + "' holds the control character 0x00 at index 18: YAML allows only tab, "
            "line feed and carriage return");
  // The same lone byte from a double-quoted escape: refused by name (mutation checked: without the value's
  // UTF-8 check the setting reads as "a\xa0b" and cannot be written back).
  EXPECT_EQ(read_error("main_process_ip: \"a\\_b\"\n"),
            "config file '" + path() + "', line 1, main_process_ip: the value is not UTF-8 text once its escapes "
            "are read (invalid UTF-8 byte at index 1: 0xA0): write the character itself");
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
  // A sharded strategy is FSDP's kind of job for Accelerate, zero1 DeepSpeed's (FSDP has no stage 1).
  EXPECT_EQ(launch::config_yaml({{"num_processes", "4"}, {"strategy", "zero3"}, {"wrap_module_types", "A,B"}}),
            "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 4\nstrategy: zero3\n"
            "wrap_module_types: A,B\n");
  EXPECT_EQ(launch::config_yaml({{"strategy", "zero1"}}),
            "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nstrategy: zero1\n");
  EXPECT_EQ(launch::config_yaml({{"strategy", "ddp"}, {"num_processes", "2"}}),
            "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 2\nstrategy: ddp\n");
}

TEST_F(ConfigFileTest, WrittenFileReadsBackTheSame) {
  Settings settings = {
      {"automatic_checkpoint_naming", "true"}, {"even_batches", "false"},   {"gradient_accumulation_steps", "8"},
      {"machine_rank", "1"},                   {"main_process_ip", "10.1.2.3"}, {"main_process_port", "29500"},
      {"mixed_precision", "fp16"},             {"num_machines", "2"},       {"num_processes", "4"},
      {"project_dir", "/runs/a: b # c"},       {"seed", "-9223372036854775808"}, {"split_batches", "true"},
      {"total_limit", "2"},                    {"use_cpu", "false"},
      {"strategy", "zero2"},                   {"wrap_policy", "size"},     {"wrap_module_types", "Block,Mlp"},
      {"min_num_params", "1000"},              {"state_dict_type", "full"}, {"forward_prefetch", "false"},
      {"backward_prefetch", "true"},           {"activation_checkpointing", "true"}, {"max_grad_norm", "0.25"},
  };
  std::filesystem::path target = directory / "nested" / "deeper" / "config.yaml";
  launch::write_config_file(target.string(), settings);
  ConfigFile config = launch::read_config_file(target.string());
  EXPECT_EQ(config.settings, settings);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});

  // Text PyYAML would read as a number (base 60, hex, underscores, .inf) is
  // quoted: unquoted, `main_process_ip: 1:20` is 80 to Accelerate. Mutation
  // caught: needs_quotes without the YAML 1.1 number forms.
  for (const char* text : {"1:20", "0x10", "1_000", ".inf", "-.inf", ".5", "0b11", "017"}) {
    const std::string written = launch::config_yaml({{"project_dir", text}});
    EXPECT_NE(written.find(std::string("'") + text + "'"), std::string::npos) << written;
  }
  EXPECT_NE(launch::config_yaml({{"project_dir", "runs/1:20"}}).find("project_dir: runs/1:20"), std::string::npos);

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
  // A file made private stays so when rewritten, as `accelerate config`'s
  // open(path, "w") leaves it. Catches: the temporary's default mode renamed
  // over it (0600 became 0644).
  ASSERT_EQ(chmod(target.c_str(), 0600), 0);
  launch::write_config_file(target.string(), {{"seed", "2"}});
  ASSERT_EQ(stat(target.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
}

TEST_F(ConfigFileTest, WriteWhereNoFileCanBeIsAnError) {
  write_text(directory / "a_file", "x");
  std::string target = (directory / "a_file" / "config.yaml").string();
  std::string message = error_of([&] { launch::write_config_file(target, {{"seed", "1"}}); });
  EXPECT_TRUE(contains(message, "cannot write config file '" + target + "': cannot create its directory")) << message;
  std::string into_directory = (directory).string();
  message = error_of([&] { launch::write_config_file(into_directory, {{"seed", "1"}}); });
  EXPECT_EQ(message, "writing the config file: '" + into_directory + "' exists and is not a regular file: it is a "
                     "directory");
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
  // A leading ~ is the home directory, as os.path.expanduser in Accelerate's
  // paths: HF_HOME='~/hf' hid Accelerate's file ("config file: none").
  // Mutation caught: the paths without expand_home.
  {
    ScopedVariable explicit_file("EMBER_CONFIG_FILE", std::nullopt);
    ScopedVariable cache("XDG_CACHE_HOME", "~/cache");
    ScopedVariable hf_home("HF_HOME", std::nullopt);
    EXPECT_EQ(launch::default_config_path(), "/home/someone/cache/ember/default_config.yaml");
    EXPECT_EQ(launch::accelerate_default_config_path(),
              "/home/someone/cache/huggingface/accelerate/default_config.yaml");
  }
  {
    ScopedVariable hf_home("HF_HOME", "~/hf");
    EXPECT_EQ(launch::accelerate_default_config_path(), "/home/someone/hf/accelerate/default_config.yaml");
  }
  {
    ScopedVariable hf_home("HF_HOME", "~other/hf");
    EXPECT_EQ(launch::accelerate_default_config_path(), "~other/hf/accelerate/default_config.yaml");
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
