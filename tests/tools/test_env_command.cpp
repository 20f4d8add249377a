// `ember env` as a real process (tools/env_command.cpp): every section of
// the report, the values this test can know (version, threads, the variables
// it sets, the config), and never the store token's value.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "core/version.h"
#include "distributed/process_runner.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

ProcessResult ember_env(const std::vector<std::string>& assignments, const std::vector<std::string>& args = {}) {
  std::vector<std::string> command = {EMBER_CLI, "env"};
  command.insert(command.end(), args.begin(), args.end());
  return run_process(clean_command(assignments, command), 30s);
}

// The report's lines that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& output, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  }
  return found;
}

class EnvCommandTest : public ::testing::Test {
 protected:
  std::filesystem::path directory = fresh_temp_dir("env_command");
  std::string config_path = (directory / "config.yaml").string();
  void TearDown() override { std::filesystem::remove_all(directory); }
};

TEST_F(EnvCommandTest, PrintsEverySection) {
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path, "OMP_NUM_THREADS=3", "MASTER_PORT=1234"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string& out = result.output;
  EXPECT_EQ(lines_starting(out, "- ember version: "), std::vector<std::string>{"- ember version: " + std::string(version())});
  for (const char* section : {"- build type: ", "- compiler: ", "- sanitizers: ", "- CUDA backend: ",
                              "- system: ", "- CPU: ", "- CPU features ember's kernels use: avx2 ",
                              "- CPU features for bf16 and fp16 GEMM: avx512f ", "- CPUs: ", "- GPUs: "}) {
    EXPECT_EQ(lines_starting(out, section).size(), 1u) << section << " in:\n" << out;
  }
  EXPECT_EQ(lines_starting(out, "- distributed backends: "),
            std::vector<std::string>{"- distributed backends: shm built, gloo built, nccl not built"});
  EXPECT_EQ(lines_starting(out, "- OpenMP threads: "), std::vector<std::string>{"- OpenMP threads: 3"});
  if (!built_with_cuda()) {
    EXPECT_TRUE(contains(out, "- GPUs: CUDA not built\n")) << out;
  }
  EXPECT_TRUE(contains(out, "- environment:\n")) << out;
  EXPECT_TRUE(contains(out, "  - MASTER_PORT: 1234\n")) << out;
  EXPECT_TRUE(contains(out, "  - OMP_NUM_THREADS: 3\n")) << out;
  EXPECT_TRUE(contains(out, "- config file: none (" + config_path + " does not exist; ember config writes it)\n")) << out;
}

TEST_F(EnvCommandTest, NeverPrintsTheStoreToken) {
  const std::string token = "0123456789abcdef-a-secret-never-to-print";
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path, "EMBER_STORE_TOKEN=" + token});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "  - EMBER_STORE_TOKEN: set\n")) << result.output;
  EXPECT_FALSE(contains(result.output, token)) << result.output;
  EXPECT_FALSE(contains(result.output, "a-secret")) << result.output;
}

TEST_F(EnvCommandTest, ShowsTheConfigInForce) {
  write_text(config_path, "num_processes: 2\nmixed_precision: bf16\n");
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "- config file: " + config_path + "\n  - mixed_precision: bf16\n  - num_processes: 2\n"))
      << result.output;

  std::string other = (directory / "other.yaml").string();
  write_text(other, "seed: 9\n");
  result = ember_env({"EMBER_CONFIG_FILE=" + config_path}, {"--config-file", other});
  EXPECT_TRUE(contains(result.output, "- config file: " + other + "\n  - seed: 9\n")) << result.output;
}

// A report is most needed when something is wrong: a bad config is reported, not fatal.
TEST_F(EnvCommandTest, ReportsABadConfigAndGoesOn) {
  write_text(config_path, "num_processes: zero\n");
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "- config file: cannot be used: config file '" + config_path +
                                          "', line 1, num_processes: 'zero' is not an integer of at least 1\n"))
      << result.output;
  EXPECT_TRUE(contains(result.output, "- ember version: ")) << result.output;
}

}  // namespace
}  // namespace ember::test
