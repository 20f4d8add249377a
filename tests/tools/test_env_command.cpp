// `ember env` as a real process (tools/env_command.cpp): every section of
// the report, the values this test can know (version, threads, the variables
// it sets, the config, the backends and CUDA libraries of a CUDA build), and
// never the store token's value.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>
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
  // NCCL is the CUDA backend's collective library: built exactly when CUDA is.
  const std::string nccl = built_with_cuda() ? "built" : "not built";
  EXPECT_EQ(lines_starting(out, "- distributed backends: "),
            std::vector<std::string>{"- distributed backends: shm built, gloo built, reference built, nccl " + nccl});
  EXPECT_EQ(lines_starting(out, "- OpenMP threads: "), std::vector<std::string>{"- OpenMP threads: 3"});
  if (!built_with_cuda()) {
    EXPECT_TRUE(contains(out, "- GPUs: CUDA not built\n")) << out;
  }
  EXPECT_TRUE(contains(out, "- environment:\n")) << out;
  EXPECT_TRUE(contains(out, "  - MASTER_PORT: 1234\n")) << out;
  EXPECT_TRUE(contains(out, "  - OMP_NUM_THREADS: 3\n")) << out;
  EXPECT_TRUE(contains(out, "- config file: none (" + config_path + " does not exist; ember config writes it)\n")) << out;
}

// The job engine, as distributed/environment.h reads it: none here; the
// values srun gives a task; and an environment that cannot be read, shown
// (the report still prints, and exits 0).
TEST_F(EnvCommandTest, SaysWhichJobEngineWasDetected) {
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(lines_starting(result.output, "- job engine: "),
            std::vector<std::string>{"- job engine: no job engine detected: a single process"});
  result = ember_env({"EMBER_CONFIG_FILE=" + config_path, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1",
                      "SLURM_JOB_NODELIST=node[3-4]", "MASTER_PORT=4321"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "- job engine: Slurm: rank 1 of 2, local rank 1 of 2, node 0, store node3:4321 ("))
      << result.output;
  EXPECT_TRUE(contains(result.output, "  - SLURM_PROCID: 1\n")) << result.output;
  result = ember_env({"EMBER_CONFIG_FILE=" + config_path, "SLURM_NTASKS=4"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "- job engine: cannot be read: found SLURM_NTASKS=4 but not SLURM_PROCID"))
      << result.output;
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

// The entries under "- CUDA libraries:" (the "  - " lines up to the next key).
std::vector<std::string> cuda_library_entries(const std::string& output) {
  std::vector<std::string> entries;
  std::istringstream stream(output);
  bool inside = false;
  for (std::string line; std::getline(stream, line);) {
    if (line.rfind("- ", 0) == 0) {
      inside = line == "- CUDA libraries:";
    } else if (inside && line.rfind("  - ", 0) == 0) {
      entries.push_back(line.substr(4));
    }
  }
  return entries;
}

// The GPU check's library probe reads these lines: each library with the
// version it reports and the file it was loaded from, which must exist and
// be that library. None of it needs a GPU (the driver may be absent).
TEST_F(EnvCommandTest, NamesTheCudaLibrariesLoadedAndTheirFiles) {
  ProcessResult result = ember_env({"EMBER_CONFIG_FILE=" + config_path});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  if (!built_with_cuda()) {
    EXPECT_EQ(lines_starting(result.output, "- CUDA libraries: "),
              std::vector<std::string>{"- CUDA libraries: none (CUDA not built)"});
    EXPECT_EQ(cuda_library_entries(result.output), std::vector<std::string>{});
    return;
  }
  const std::vector<std::string> entries = cuda_library_entries(result.output);
  ASSERT_EQ(entries.size(), 5u) << result.output;
  const std::regex driver(R"(CUDA driver( \d+\.\d+|: none found))");
  EXPECT_TRUE(std::regex_match(entries[1], driver)) << entries[1];
  // Name, version, file; the file's name is the library's.
  struct Expected {
    size_t index;
    std::string name, file_prefix;
  };
  const Expected libraries[] = {{0, "CUDA runtime", "libcudart.so"}, {2, "cuBLAS", "libcublas.so"},
                                {3, "cuDNN", "libcudnn.so"}, {4, "NCCL", "libnccl.so"}};
  const std::regex entry(R"((.+) (\d+\.\d+(\.\d+)?) \((/.+)\))");
  for (const Expected& library : libraries) {
    const std::string& line = entries[library.index];
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, entry)) << line;
    EXPECT_EQ(match[1].str(), library.name) << line;
    const std::filesystem::path file = match[4].str();
    EXPECT_TRUE(std::filesystem::exists(file)) << line;
    EXPECT_EQ(file.filename().string().rfind(library.file_prefix, 0), 0u) << line;
  }
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
