// AcceleratorOptions: defaults, the launcher's environment variables, code
// winning over the environment, and errors naming the option, its origin and
// its value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "distributed/accelerator/accelerator_options.h"
#include "support/test_support.h"

namespace ember {
namespace {

const char* const kVariables[] = {"EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS", "EMBER_USE_CPU",
                                  "EMBER_SPLIT_BATCHES",   "EMBER_EVEN_BATCHES",                "EMBER_SEED",
                                  "EMBER_PROJECT_DIR",     "EMBER_AUTOMATIC_CHECKPOINT_NAMING", "EMBER_TOTAL_LIMIT",
                                  "EMBER_STRATEGY",        "EMBER_WRAP_POLICY",                 "EMBER_WRAP_MODULE_TYPES",
                                  "EMBER_WRAP_MIN_NUM_PARAMS", "EMBER_STATE_DICT_TYPE",         "EMBER_FORWARD_PREFETCH",
                                  "EMBER_BACKWARD_PREFETCH", "EMBER_ACTIVATION_CHECKPOINTING",  "EMBER_MAX_GRAD_NORM",
                                  "ACCELERATE_MIXED_PRECISION", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
                                  "ACCELERATE_USE_CPU",      "ACCELERATE_USE_FSDP",               "ACCELERATE_DEBUG_MODE"};

// Clears the variables for the test and restores nothing: no other test in
// this binary sets them.
class AcceleratorOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) unsetenv(name);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(AcceleratorOptionsTest, DefaultsAreAccelerates) {
  ResolvedAcceleratorOptions resolved = resolve_accelerator_options({});
  EXPECT_EQ(resolved.mixed_precision, "no");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 1);
  EXPECT_FALSE(resolved.cpu);
  EXPECT_FALSE(resolved.split_batches);
  EXPECT_TRUE(resolved.even_batches);
  EXPECT_FALSE(resolved.seed.has_value());
  EXPECT_EQ(resolved.project_dir, ".");
  EXPECT_FALSE(resolved.automatic_checkpoint_naming);
  EXPECT_FALSE(resolved.total_limit.has_value());
}

TEST_F(AcceleratorOptionsTest, TheEnvironmentFillsWhatCodeLeavesUnset) {
  setenv("EMBER_MIXED_PRECISION", "bf16", 1);
  setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "4", 1);
  setenv("EMBER_USE_CPU", "true", 1);
  setenv("EMBER_SPLIT_BATCHES", "1", 1);
  setenv("EMBER_EVEN_BATCHES", "false", 1);
  setenv("EMBER_SEED", "1234", 1);
  setenv("EMBER_PROJECT_DIR", "/tmp/project", 1);
  setenv("EMBER_AUTOMATIC_CHECKPOINT_NAMING", "true", 1);
  setenv("EMBER_TOTAL_LIMIT", "3", 1);
  ResolvedAcceleratorOptions resolved = resolve_accelerator_options({});
  EXPECT_EQ(resolved.mixed_precision, "bf16");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 4);
  EXPECT_TRUE(resolved.cpu);
  EXPECT_TRUE(resolved.split_batches);
  EXPECT_FALSE(resolved.even_batches);
  EXPECT_EQ(resolved.seed, 1234u);
  EXPECT_EQ(resolved.project_dir, "/tmp/project");
  // A negative seed, which the launcher and config files pass on, wraps as
  // torch.manual_seed(-1) does. Catches: EMBER_SEED=-12 refused by every
  // worker of a job the launcher had accepted.
  setenv("EMBER_SEED", "-1", 1);
  EXPECT_EQ(resolve_accelerator_options({}).seed, std::numeric_limits<uint64_t>::max());
  setenv("EMBER_SEED", "1234", 1);
  EXPECT_TRUE(resolved.automatic_checkpoint_naming);
  EXPECT_EQ(resolved.total_limit, 3);

  // Code wins.
  resolved = resolve_accelerator_options({.mixed_precision = "fp16", .even_batches = true, .total_limit = 9});
  EXPECT_EQ(resolved.mixed_precision, "fp16");
  EXPECT_TRUE(resolved.even_batches);
  EXPECT_EQ(resolved.total_limit, 9);
  EXPECT_EQ(resolved.seed, 1234u);  // still from the environment
}

// Note [Where the launcher beats the code]: as in Accelerate 1.16, the
// launcher's gradient accumulation steps and its --cpu beat the code's values,
// and a warning says so. The code's value used to win without a word, so
// `ember launch --gradient_accumulation_steps 4` trained with the code's 2.
// Mutation caught: the code's gradient_accumulation_steps read first again
// -> 2 instead of 4.
TEST_F(AcceleratorOptionsTest, TheLauncherBeatsTheCodeWhereAccelerateLetsIt) {
  setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "4", 1);
  setenv("EMBER_USE_CPU", "true", 1);
  ResolvedAcceleratorOptions resolved = resolve_accelerator_options({.gradient_accumulation_steps = 2, .cpu = false});
  EXPECT_EQ(resolved.gradient_accumulation_steps, 4);
  EXPECT_TRUE(resolved.cpu);
  ASSERT_EQ(resolved.warnings.size(), 2u);
  EXPECT_EQ(resolved.warnings[0], "gradient_accumulation_steps 2 set in code is replaced by "
                                  "EMBER_GRADIENT_ACCUMULATION_STEPS=4 (ember launch's flag or config file), as "
                                  "Accelerate's Accelerator does");
  EXPECT_TRUE(resolved.warnings[1].starts_with("cpu = false set in code is replaced by EMBER_USE_CPU")) << resolved.warnings[1];
  // The same value, or the CPU asked for by the code: nothing to say.
  resolved = resolve_accelerator_options({.gradient_accumulation_steps = 4, .cpu = true});
  EXPECT_EQ(resolved.warnings, std::vector<std::string>{});
  setenv("EMBER_USE_CPU", "false", 1);
  EXPECT_TRUE(resolve_accelerator_options({.cpu = true}).cpu);  // false in the environment forces nothing
}

TEST_F(AcceleratorOptionsTest, BadValuesNameTheOptionAndWhereItCameFrom) {
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.mixed_precision = "fp8"}),
                     "mixed_precision 'fp8' (from AcceleratorOptions) is not one of no, fp16, bf16");
  setenv("EMBER_MIXED_PRECISION", "half", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "(from the environment variable EMBER_MIXED_PRECISION)");
  unsetenv("EMBER_MIXED_PRECISION");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.gradient_accumulation_steps = 0}),
                     "gradient_accumulation_steps must be at least 1, got 0");
  setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "two", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_GRADIENT_ACCUMULATION_STEPS='two' is not an integer");
  setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "0", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_GRADIENT_ACCUMULATION_STEPS=0 is out of range");
  unsetenv("EMBER_GRADIENT_ACCUMULATION_STEPS");
  setenv("EMBER_USE_CPU", "yes", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_USE_CPU='yes' is not a flag");
  unsetenv("EMBER_USE_CPU");
  // An empty flag (EMBER_EVEN_BATCHES=$UNSET) read as false and turned a
  // default-on option off without a word. Mutation caught: parse_env_flag
  // taking "" for false.
  setenv("EMBER_EVEN_BATCHES", "", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_EVEN_BATCHES='' is not a flag");
  unsetenv("EMBER_EVEN_BATCHES");
  // A subnormal max_grad_norm passed the config file and the launcher, then
  // every worker refused it (strtod's ERANGE). Mutation caught: parse_number
  // without the subnormal case.
  setenv("EMBER_MAX_GRAD_NORM", "1e-310", 1);
  EXPECT_EQ(resolve_accelerator_options({}).sharding.max_grad_norm, 1e-310);
  unsetenv("EMBER_MAX_GRAD_NORM");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.total_limit = 0}), "total_limit must be at least 1, got 0");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.project_dir = ""}), "project_dir (from AcceleratorOptions) is empty");
}

// Note [Accelerate's variables]: ACCELERATE_MIXED_PRECISION,
// ACCELERATE_GRADIENT_ACCUMULATION_STEPS and ACCELERATE_USE_CPU (Accelerate's
// booleans) stand in for the EMBER_* ones, which win; code wins over both for
// mixed_precision (Note [Where the launcher beats the code]).
// Catches: the ACCELERATE_* variable read before the EMBER_* one.
TEST_F(AcceleratorOptionsTest, AccelerateVariablesStandInForEmbers) {
  setenv("ACCELERATE_MIXED_PRECISION", "bf16", 1);
  setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3", 1);
  setenv("ACCELERATE_USE_CPU", "True", 1);
  ResolvedAcceleratorOptions resolved = resolve_accelerator_options({});
  EXPECT_EQ(resolved.mixed_precision, "bf16");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 3);
  EXPECT_TRUE(resolved.cpu);
  EXPECT_EQ(resolved.warnings, std::vector<std::string>{});

  setenv("EMBER_MIXED_PRECISION", "fp16", 1);
  setenv("EMBER_USE_CPU", "false", 1);
  resolved = resolve_accelerator_options({});
  EXPECT_EQ(resolved.mixed_precision, "fp16");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 3);
  EXPECT_FALSE(resolved.cpu);
  EXPECT_EQ(resolved.warnings.size(), 2u);
  for (const std::string& warning : resolved.warnings)
    EXPECT_TRUE(warning.find(" is ignored: EMBER_") != std::string::npos) << warning;

  unsetenv("EMBER_MIXED_PRECISION");
  setenv("ACCELERATE_MIXED_PRECISION", "fp8", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "(from the environment variable ACCELERATE_MIXED_PRECISION)");
  unsetenv("ACCELERATE_MIXED_PRECISION");
  unsetenv("EMBER_USE_CPU");
  setenv("ACCELERATE_USE_CPU", "perhaps", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "ACCELERATE_USE_CPU='perhaps' is not a flag");
}

// An ACCELERATE_* variable ember does not honour is named in a warning.
TEST_F(AcceleratorOptionsTest, UnhonouredAccelerateVariablesAreWarnedAbout) {
  setenv("ACCELERATE_USE_FSDP", "true", 1);
  setenv("ACCELERATE_DEBUG_MODE", "1", 1);
  const std::vector<std::string> warnings = resolve_accelerator_options({}).warnings;
  ASSERT_EQ(warnings.size(), 2u);
  for (const char* name : {"ACCELERATE_USE_FSDP", "ACCELERATE_DEBUG_MODE"}) {
    EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [&](const std::string& warning) {
      return warning.rfind(std::string(name) + " is Accelerate's and ember does not honour it", 0) == 0;
    })) << name;
  }
}

// A misspelt EMBER_* variable is warned about, and not taken for the one it
// was meant to be (Note [Misspelt variables]).
// Catches: the warnings built from the ACCELERATE_* variables alone.
TEST_F(AcceleratorOptionsTest, MisspeltEmberVariablesAreWarnedAbout) {
  setenv("EMBER_GRADIENT_ACCUMULATION_STEP", "4", 1);
  const ResolvedAcceleratorOptions resolved = resolve_accelerator_options({});
  unsetenv("EMBER_GRADIENT_ACCUMULATION_STEP");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 1);
  EXPECT_EQ(resolved.warnings, std::vector<std::string>{"EMBER_GRADIENT_ACCUMULATION_STEP is not a variable ember reads "
                                                        "(did you mean EMBER_GRADIENT_ACCUMULATION_STEPS? `ember env "
                                                        "--variables` lists them)"});
}

// Sharding options the ddp strategy does not use are warned about. Catches:
// EMBER_STATE_DICT_TYPE=sharded (or a wrap policy) under ddp taken and unused.
TEST_F(AcceleratorOptionsTest, ShardingOptionsUnderDdpAreWarnedAbout) {
  setenv("EMBER_STATE_DICT_TYPE", "sharded", 1);
  setenv("EMBER_WRAP_POLICY", "size", 1);
  std::vector<std::string> warnings = resolve_accelerator_options({}).warnings;
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], "state_dict_type sharded has no effect under the ddp strategy, which keeps whole replicas; "
                         "use a sharded strategy (zero1, zero2, zero3, hybrid) or leave it unset");
  EXPECT_EQ(warnings[1].rfind("the wrap policy (wrap_policy, wrap_module_types, min_num_params) has no effect", 0), 0u);
  // The wrap policy chooses what activation checkpointing recomputes, and a sharded strategy uses both.
  setenv("EMBER_ACTIVATION_CHECKPOINTING", "true", 1);
  EXPECT_EQ(resolve_accelerator_options({}).warnings.size(), 1u);
  setenv("EMBER_STRATEGY", "zero2", 1);
  EXPECT_EQ(resolve_accelerator_options({}).warnings, std::vector<std::string>{});
  for (const char* name : {"EMBER_STATE_DICT_TYPE", "EMBER_WRAP_POLICY", "EMBER_ACTIVATION_CHECKPOINTING", "EMBER_STRATEGY"})
    unsetenv(name);
}

// Sharding (distributed/zero/sharding_options.h): DDP unless asked, each
// transformer block a unit, whole-state checkpoints, prefetching on, no clipping.
TEST_F(AcceleratorOptionsTest, ShardingDefaults) {
  distributed::ResolvedShardingOptions resolved = resolve_accelerator_options({}).sharding;
  EXPECT_EQ(resolved.strategy, distributed::ShardingStrategy::ddp);
  EXPECT_EQ(resolved.wrap_policy, distributed::WrapPolicy::transformer);
  EXPECT_EQ(resolved.wrap_module_types, std::vector<std::string>{"TransformerBlock"});
  EXPECT_EQ(resolved.min_num_params, 100000);
  EXPECT_TRUE(resolved.full_state_dict);
  EXPECT_TRUE(resolved.forward_prefetch);
  EXPECT_TRUE(resolved.backward_prefetch);
  EXPECT_FALSE(resolved.activation_checkpointing);
  EXPECT_FALSE(resolved.max_grad_norm.has_value());
}

TEST_F(AcceleratorOptionsTest, ShardingFromTheEnvironmentAndCode) {
  setenv("EMBER_STRATEGY", "zero2", 1);
  setenv("EMBER_WRAP_POLICY", "size", 1);
  setenv("EMBER_WRAP_MODULE_TYPES", "Block, Embedding", 1);
  setenv("EMBER_WRAP_MIN_NUM_PARAMS", "5000", 1);
  setenv("EMBER_STATE_DICT_TYPE", "sharded", 1);
  setenv("EMBER_FORWARD_PREFETCH", "false", 1);
  setenv("EMBER_BACKWARD_PREFETCH", "0", 1);
  setenv("EMBER_ACTIVATION_CHECKPOINTING", "true", 1);
  setenv("EMBER_MAX_GRAD_NORM", "0.5", 1);
  distributed::ResolvedShardingOptions resolved = resolve_accelerator_options({}).sharding;
  EXPECT_EQ(resolved.strategy, distributed::ShardingStrategy::zero2);
  EXPECT_EQ(resolved.wrap_policy, distributed::WrapPolicy::size);
  EXPECT_EQ(resolved.wrap_module_types, (std::vector<std::string>{"Block", "Embedding"}));
  EXPECT_EQ(resolved.min_num_params, 5000);
  EXPECT_FALSE(resolved.full_state_dict);
  EXPECT_FALSE(resolved.forward_prefetch);
  EXPECT_FALSE(resolved.backward_prefetch);
  EXPECT_TRUE(resolved.activation_checkpointing);
  EXPECT_EQ(resolved.max_grad_norm, 0.5);

  // Code wins, field by field.
  resolved = resolve_accelerator_options({.sharding = {.strategy = "fsdp", .wrap_module_types = std::vector<std::string>{"Mlp"},
                                                       .backward_prefetch = true, .max_grad_norm = 2.0}})
                 .sharding;
  EXPECT_EQ(resolved.strategy, distributed::ShardingStrategy::zero3);  // fsdp is zero3's other name
  EXPECT_EQ(resolved.wrap_module_types, std::vector<std::string>{"Mlp"});
  EXPECT_TRUE(resolved.backward_prefetch);
  EXPECT_EQ(resolved.max_grad_norm, 2.0);
  EXPECT_EQ(resolved.wrap_policy, distributed::WrapPolicy::size);  // still from the environment
  EXPECT_FALSE(resolved.forward_prefetch);
}

TEST_F(AcceleratorOptionsTest, ShardingStrategyNames) {
  using distributed::ShardingStrategy;
  for (ShardingStrategy strategy : {ShardingStrategy::ddp, ShardingStrategy::zero1, ShardingStrategy::zero2,
                                    ShardingStrategy::zero3, ShardingStrategy::hybrid}) {
    EXPECT_EQ(distributed::parse_sharding_strategy(distributed::to_string(strategy)), strategy);
  }
  EXPECT_EQ(distributed::parse_sharding_strategy("fsdp"), ShardingStrategy::zero3);
  EXPECT_EQ(distributed::parse_sharding_strategy("ZERO3"), std::nullopt);
  EXPECT_EQ(distributed::parse_sharding_strategy("zero4"), std::nullopt);
  EXPECT_EQ(distributed::parse_sharding_strategy(""), std::nullopt);
}

// DDP's comm_hook is checked when the options are resolved: a one-process
// run builds no DDP and a ZeRO strategy has no all-reduce to compress, and
// neither may drop it unseen. Catches: the hook resolved as given and left to
// DistributedDataParallel, which a ZeRO run never constructs (run once: the
// zero2 call returned).
TEST_F(AcceleratorOptionsTest, CommHookIsCheckedAndNeedsTheDdpStrategy) {
  EXPECT_EQ(resolve_accelerator_options({.ddp = {.comm_hook = "bf16"}}).ddp.comm_hook, "bf16");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.ddp = {.comm_hook = "bf8"}}),
                     "unknown comm_hook \"bf8\"; expected \"no\", \"fp16\" or \"bf16\"");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.ddp = {.comm_hook = "fp16"}, .sharding = {.strategy = "zero2"}}),
                     "Accelerator: ddp.comm_hook \"fp16\" compresses DistributedDataParallel's all-reduce, but the "
                     "strategy is zero2");
}

// The other DDPOptions under a ZeRO strategy (no trace written, buffers broadcast
// although broadcast_buffers was false), and total_limit without automatic naming
// (nothing pruned): each was accepted and ignored. Mutation caught: either check removed.
TEST_F(AcceleratorOptionsTest, OptionsTheRunWouldIgnoreAreRefused) {
  for (const char* strategy : {"zero1", "zero3"}) {
    EXPECT_EMBER_ERROR(resolve_accelerator_options({.ddp = {.broadcast_buffers = false}, .sharding = {.strategy = strategy}}),
                       fmt::format("Accelerator: options in ddp are set, but the strategy is {}, which runs no "
                                   "DistributedDataParallel", strategy));
    EXPECT_EMBER_ERROR(resolve_accelerator_options({.ddp = {.trace_prefix = "/tmp/t"}, .sharding = {.strategy = strategy}}),
                       "options in ddp are set");
  }
  EXPECT_EQ(resolve_accelerator_options({.ddp = {.bucket_cap_mb = 5}}).ddp.bucket_cap_mb, 5);  // the ddp strategy
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.total_limit = 2}),
                     "Accelerator: total_limit 2 (from AcceleratorOptions) keeps the newest checkpoints that "
                     "automatic_checkpoint_naming names, but that is off");
  EXPECT_EQ(resolve_accelerator_options({.automatic_checkpoint_naming = true, .total_limit = 2}).total_limit, 2);
}

TEST_F(AcceleratorOptionsTest, BadShardingValuesNameTheOptionAndWhereItCameFrom) {
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.sharding = {.strategy = "zero4"}}),
                     "strategy 'zero4' (from AcceleratorOptions) is not one of ddp, zero1, zero2, zero3, fsdp, hybrid");
  setenv("EMBER_STRATEGY", "FULL_SHARD", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}),
                     "strategy 'FULL_SHARD' (from the environment variable EMBER_STRATEGY) is not one of");
  unsetenv("EMBER_STRATEGY");
  setenv("EMBER_WRAP_POLICY", "TRANSFORMER_BASED_WRAP", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}),
                     "wrap_policy 'TRANSFORMER_BASED_WRAP' (from the environment variable EMBER_WRAP_POLICY) is not one "
                     "of transformer, size, none");
  unsetenv("EMBER_WRAP_POLICY");
  setenv("EMBER_WRAP_MODULE_TYPES", "Block, ,Mlp", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}),
                     "EMBER_WRAP_MODULE_TYPES='Block, ,Mlp' is not a comma-separated list of module type names");
  unsetenv("EMBER_WRAP_MODULE_TYPES");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.sharding = {.wrap_module_types = std::vector<std::string>{}}}),
                     "wrap_module_types (from AcceleratorOptions) is empty");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.sharding = {.min_num_params = 0}}),
                     "min_num_params must be at least 1, got 0 (from AcceleratorOptions)");
  setenv("EMBER_WRAP_MIN_NUM_PARAMS", "1e8", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_WRAP_MIN_NUM_PARAMS='1e8' is not an integer");
  unsetenv("EMBER_WRAP_MIN_NUM_PARAMS");
  setenv("EMBER_STATE_DICT_TYPE", "FULL_STATE_DICT", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}),
                     "state_dict_type 'FULL_STATE_DICT' (from the environment variable EMBER_STATE_DICT_TYPE) is not one "
                     "of sharded, full");
  unsetenv("EMBER_STATE_DICT_TYPE");
  setenv("EMBER_BACKWARD_PREFETCH", "BACKWARD_PRE", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_BACKWARD_PREFETCH='BACKWARD_PRE' is not a flag");
  unsetenv("EMBER_BACKWARD_PREFETCH");
  setenv("EMBER_MAX_GRAD_NORM", "none", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}), "EMBER_MAX_GRAD_NORM='none' is not a number");
  setenv("EMBER_MAX_GRAD_NORM", "0", 1);
  EXPECT_EMBER_ERROR(resolve_accelerator_options({}),
                     "max_grad_norm must be a positive number, got 0 (from the environment variable EMBER_MAX_GRAD_NORM)");
  unsetenv("EMBER_MAX_GRAD_NORM");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.sharding = {.max_grad_norm = -1.0}}),
                     "max_grad_norm must be a positive number, got -1 (from AcceleratorOptions)");
}

}  // namespace
}  // namespace ember
