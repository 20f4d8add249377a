// AcceleratorOptions: defaults, the launcher's environment variables, code
// winning over the environment, and errors naming the option, its origin and
// its value.
#include <gtest/gtest.h>

#include <cstdlib>

#include "distributed/accelerator/accelerator_options.h"
#include "support/test_support.h"

namespace ember {
namespace {

const char* const kVariables[] = {"EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS", "EMBER_USE_CPU",
                                  "EMBER_SPLIT_BATCHES",   "EMBER_EVEN_BATCHES",                "EMBER_SEED",
                                  "EMBER_PROJECT_DIR",     "EMBER_AUTOMATIC_CHECKPOINT_NAMING", "EMBER_TOTAL_LIMIT"};

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
  EXPECT_TRUE(resolved.automatic_checkpoint_naming);
  EXPECT_EQ(resolved.total_limit, 3);

  // Code wins.
  resolved = resolve_accelerator_options({.mixed_precision = "fp16", .gradient_accumulation_steps = 2,
                                          .even_batches = true, .total_limit = 9});
  EXPECT_EQ(resolved.mixed_precision, "fp16");
  EXPECT_EQ(resolved.gradient_accumulation_steps, 2);
  EXPECT_TRUE(resolved.even_batches);
  EXPECT_EQ(resolved.total_limit, 9);
  EXPECT_EQ(resolved.seed, 1234u);  // still from the environment
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
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.total_limit = 0}), "total_limit must be at least 1, got 0");
  EXPECT_EMBER_ERROR(resolve_accelerator_options({.project_dir = ""}), "project_dir (from AcceleratorOptions) is empty");
}

}  // namespace
}  // namespace ember
