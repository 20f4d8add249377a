// `ember config` as a real process (tools/config_command.cpp,
// tools/config_questions.cpp): from flags it writes a file that reads back
// to the same values, with Accelerate's text; bad flags write nothing; on a
// pseudo-terminal it asks its questions, asks again after a bad answer, and
// writes nothing when the input ends early; --show prints the config in force.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "config_file.h"
#include "distributed/process_runner.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;
using launch::Settings;
using Clock = std::chrono::steady_clock;

ProcessResult ember_config(const std::vector<std::string>& assignments, const std::vector<std::string>& args) {
  std::vector<std::string> command = {EMBER_CLI, "config"};
  command.insert(command.end(), args.begin(), args.end());
  return run_process(clean_command(assignments, command), 30s);
}

class ConfigCommandTest : public ::testing::Test {
 protected:
  std::filesystem::path directory = fresh_temp_dir("config_command");
  std::string path = (directory / "sub" / "default_config.yaml").string();
  std::string default_file = "EMBER_CONFIG_FILE=" + path;
  void TearDown() override { std::filesystem::remove_all(directory); }
};

// Without a terminal (the runner's stdin is not one) the flags are the whole config.
TEST_F(ConfigCommandTest, FlagsWriteAFileThatReadsBackEqual) {
  ProcessResult result = ember_config(
      {default_file}, {"--num-processes", "4", "--num-machines", "2", "--machine-rank", "1", "--main-process-ip",
                       "10.0.0.1", "--main-process-port", "29500", "--mixed-precision", "bf16",
                       "--gradient-accumulation-steps", "4", "--cpu", "--split-batches", "true", "--even-batches",
                       "false", "--seed", "42", "--project-dir", "/runs/x", "--automatic-checkpoint-naming", "true",
                       "--total-limit", "3"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "ember configuration saved at " + path + "\n");
  Settings expected = {
      {"automatic_checkpoint_naming", "true"}, {"even_batches", "false"},      {"gradient_accumulation_steps", "4"},
      {"machine_rank", "1"},                   {"main_process_ip", "10.0.0.1"}, {"main_process_port", "29500"},
      {"mixed_precision", "bf16"},             {"num_machines", "2"},          {"num_processes", "4"},
      {"project_dir", "/runs/x"},              {"seed", "42"},                 {"split_batches", "true"},
      {"total_limit", "3"},                    {"use_cpu", "true"},
  };
  launch::ConfigFile config = launch::read_config_file(path);
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
}

// No flags and no terminal: the defaults where no config exists, and an error
// that keeps one that does. Catches: `ember config </dev/null` replacing a
// written config with the defaults (strategy, precision and the rest lost).
TEST_F(ConfigCommandTest, NoFlagsWithoutATerminalNeverReplaceAConfig) {
  ProcessResult first = ember_config({default_file}, {});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(launch::read_config_file(path).settings,
            (Settings{{"machine_rank", "0"}, {"mixed_precision", "no"}, {"num_machines", "1"}, {"num_processes", "1"},
                      {"use_cpu", "false"}}));
  ASSERT_EQ(ember_config({default_file}, {"--num-processes", "4", "--mixed-precision", "bf16"}).exit_code, 0);
  ProcessResult again = ember_config({default_file}, {});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_TRUE(contains(again.output, "no settings given and stdin is not a terminal to ask them: '" + path +
                                         "' exists and is kept"))
      << again.output;
  EXPECT_EQ(launch::read_config_file(path).settings.at("mixed_precision"), "bf16");
}

// The sharding keys from their flags; a sharded strategy makes the job FSDP's
// kind for Accelerate's distributed_type.
TEST_F(ConfigCommandTest, ShardingFlagsWriteTheirKeys) {
  ProcessResult result = ember_config(
      {default_file}, {"--num-processes", "2", "--cpu", "--strategy", "zero3", "--wrap-policy", "size",
                       "--min-num-params", "5000", "--wrap-module-types", "Block", "--state-dict-type", "full",
                       "--forward-prefetch", "false", "--backward-prefetch", "true", "--activation-checkpointing",
                       "true", "--max-grad-norm", "1.0"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  Settings expected = {
      {"activation_checkpointing", "true"}, {"backward_prefetch", "true"}, {"forward_prefetch", "false"},
      {"machine_rank", "0"},                {"max_grad_norm", "1"},        {"min_num_params", "5000"},
      {"mixed_precision", "no"},            {"num_machines", "1"},         {"num_processes", "2"},
      {"state_dict_type", "full"},          {"strategy", "zero3"},         {"use_cpu", "true"},
      {"wrap_module_types", "Block"},       {"wrap_policy", "size"},
  };
  launch::ConfigFile config = launch::read_config_file(path);
  EXPECT_EQ(config.settings, expected);
  EXPECT_EQ(config.warnings, std::vector<std::string>{});
  EXPECT_TRUE(contains(read_text(path), "distributed_type: FSDP\n")) << read_text(path);
}

// The basic keys `accelerate config` writes, with its values for what is not
// given, and the text Accelerate would write for them; --config-file picks the path.
TEST_F(ConfigCommandTest, WritesAccelerateText) {
  std::string named = (directory / "named.yaml").string();
  ProcessResult result = ember_config({default_file}, {"--config-file", named, "--num-processes", "2", "--cpu"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(read_text(named),
            "compute_environment: LOCAL_MACHINE\n"
            "distributed_type: MULTI_CPU\n"
            "machine_rank: 0\n"
            "mixed_precision: 'no'\n"
            "num_machines: 1\n"
            "num_processes: 2\n"
            "use_cpu: true\n");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(ConfigCommandTest, BadFlagsWriteNothing) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--num-processes", "3", "--num-machines", "2", "--main-process-ip", "h", "--main-process-port", "1"},
       "ember config: --num-processes 3 (the processes of every machine together) is not divisible by --num-machines 2\n"},
      {{"--num-processes", "2", "--num-machines", "2", "--main-process-ip", "h"},
       "ember config: --num-machines 2 needs --main-process-ip and --main-process-port"},
      {{"--machine-rank", "1"}, "ember config: --machine-rank 1 is not a machine of --num-machines 1 (0 to 0)\n"},
      {{"--mixed-precision", "fp8"}, "ember config: --mixed-precision: 'fp8' is not one of no, fp16 or bf16\n"},
      {{"--split-batches", "yes"}, "ember config: --split-batches: 'yes' is not true or false\n"},
      {{"--strategy", "FULL_SHARD"},
       "ember config: --strategy: 'FULL_SHARD' is not one of ddp, zero1, zero2, zero3, fsdp or hybrid\n"},
      {{"--max-grad-norm", "-1"}, "ember config: --max-grad-norm: '-1' is not a positive number\n"},
      {{"--show", "--seed", "1"}, "ember config: --show prints the config in force and takes no settings\n"},
  };
  for (const Case& c : cases) {
    ProcessResult result = ember_config({default_file}, c.flags);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_TRUE(contains(result.output, c.message)) << "expected '" << c.message << "' in: " << result.output;
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

// Flags after "--" are not dropped: only launch runs a program, and the other
// commands refuse what they cannot take. Mutation: main.cpp cutting at the
// first "--" for every command -> the config is saved with mixed_precision
// 'no' (exit 0).
TEST_F(ConfigCommandTest, FlagsAfterDoubleDashAreRefusedNotDropped) {
  ProcessResult result = ember_config({default_file}, {"--seed", "1", "--", "--mixed-precision", "bf16"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(contains(result.output, "The following arguments were not expected")) << result.output;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(ConfigCommandTest, ShowPrintsTheConfigInForce) {
  ProcessResult result = ember_config({default_file}, {"--show"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "- config file: none (" + path + " does not exist; ember config writes it)\n");

  std::filesystem::create_directories(directory / "sub");
  write_text(path, "mixed_precision: bf16\nnum_processes: 2\nnew_key: 1\n");
  result = ember_config({default_file}, {"--show"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "- config file: " + path + "\n  - warning: config file '" + path +
                               "', line 3: unknown key 'new_key' ignored\n  - mixed_precision: bf16\n  - num_processes: 2\n");
}

// `ember config` on a pseudo-terminal: the test reads the questions from the
// master side and types the answers, as a person would.
class Terminal {
 public:
  explicit Terminal(const std::vector<std::string>& argv) {
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && !reaped_) {
      kill(-pid_, SIGKILL);  // forkpty made the child a session (and group) leader
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& output() const { return output_; }

  // Reads until `text` appears after what earlier expects consumed.
  bool expect(const std::string& text, std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      size_t found = output_.find(text, consumed_);
      if (found != std::string::npos) {
        consumed_ = found + text.size();
        return true;
      }
      if (Clock::now() >= deadline || !read_some(20)) return false;
    }
  }
  void type(const std::string& text) { (void)!write(master_, text.data(), text.size()); }

  // The exit code, or -1 when it did not exit in time.
  int wait(std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    int status = 0;
    while (Clock::now() < deadline) {
      read_some(20);
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        while (read_some(20)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    return -1;
  }

 private:
  // Whether the terminal is still open (EIO once the child side has closed).
  bool read_some(int timeout_ms) {
    pollfd poll_fd{master_, POLLIN, 0};
    if (poll(&poll_fd, 1, timeout_ms) <= 0) return true;
    char buffer[4096];
    ssize_t count = read(master_, buffer, sizeof buffer);
    if (count <= 0) return false;
    output_.append(buffer, size_t(count));
    return true;
  }
  pid_t pid_ = -1;
  int master_ = -1;
  bool reaped_ = false;
  size_t consumed_ = 0;
  std::string output_;
};

TEST_F(ConfigCommandTest, AsksOnATerminalAndAsksAgainAfterABadAnswer) {
  Terminal terminal(clean_command({default_file}, {EMBER_CLI, "config"}));
  ASSERT_TRUE(terminal.started());
  struct Step {
    std::string question;
    std::string answer;
  };
  std::vector<Step> steps = {
      {"Which type of machine are you using?\r\n [0] No distributed training\r\n [1] multi-CPU\r\n [2] multi-GPU\r\n"
       "Your choice [0]: ",
       "1"},
      {"How many different machines will you use (use more than 1 for multi-node training)? [1]: ", ""},
      {"How many processes should be used for distributed training, on all machines together? [1]: ", "three"},
      {"Please enter an integer from 1 to 2147483647.\r\n"
       "How many processes should be used for distributed training, on all machines together? [1]: ",
       "3"},
      {"Do you wish to use mixed precision (no, fp16 or bf16)? [no]: ", "fp8"},
      {"Please enter one of no, fp16 or bf16.\r\nDo you wish to use mixed precision (no, fp16 or bf16)? [no]: ", "bf16"},
      {"How many batches should be accumulated per optimizer step? [1]: ", "2"},
      {"Which sharding strategy should the processes use (ddp, zero1, zero2, zero3, fsdp or hybrid)? [ddp]: ", "zero4"},
      {"Please enter one of ddp, zero1, zero2, zero3, fsdp or hybrid.\r\n", "zero2"},
      {"Do you want to set ember's other Accelerator options (split_batches, even_batches, seed, project_dir, "
       "checkpoint naming)? [yes/NO]: ",
       "yes"},
      {"(split_batches)? [yes/NO]: ", ""},
      {"(even_batches)? [YES/no]: ", "maybe"},
      {"Please enter yes or no.\r\n", "n"},
      {"(seed) [none]: ", "17"},
      {"(project_dir) [none]: ", ""},
      {"(automatic_checkpoint_naming)? [yes/NO]: ", "y"},
      {"(total_limit) [none]: ", "4"},
  };
  for (const Step& step : steps) {
    ASSERT_TRUE(terminal.expect(step.question)) << "waiting for '" << step.question << "' in:\n" << terminal.output();
    terminal.type(step.answer + "\n");
  }
  ASSERT_TRUE(terminal.expect("ember configuration saved at " + path)) << terminal.output();
  EXPECT_EQ(terminal.wait(), 0) << terminal.output();
  Settings expected = {
      {"automatic_checkpoint_naming", "true"}, {"even_batches", "false"}, {"gradient_accumulation_steps", "2"},
      {"machine_rank", "0"},                   {"mixed_precision", "bf16"}, {"num_machines", "1"},
      {"num_processes", "3"},                  {"seed", "17"},           {"split_batches", "false"},
      {"strategy", "zero2"},                   {"total_limit", "4"},     {"use_cpu", "true"},
  };
  EXPECT_EQ(launch::read_config_file(path).settings, expected);
}

TEST_F(ConfigCommandTest, AsksForTheMainProcessOnSeveralMachines) {
  Terminal terminal(clean_command({default_file}, {EMBER_CLI, "config"}));
  ASSERT_TRUE(terminal.started());
  std::vector<std::pair<std::string, std::string>> steps = {
      {"Your choice [0]: ", "2"},
      {"multi-node training)? [1]: ", "2"},
      {"What is the rank of this machine (0 hosts the main process)? [0]: ", "2"},
      {"Please enter an integer from 0 to 1.\r\n", "1"},
      {"What is the IP address of the machine that will host the main process?: ", ""},
      {"Please enter a non-empty string.\r\n", "10.0.0.7"},
      {"What is the port you will use to communicate with the main process? [29500]: ", ""},
      {"on all machines together? [2]: ", "5"},
      {"Please enter a multiple of 2 from 2 to 2147483647.\r\n", "4"},
      {"(no, fp16 or bf16)? [no]: ", ""},
      {"per optimizer step? [1]: ", ""},
      {"(ddp, zero1, zero2, zero3, fsdp or hybrid)? [ddp]: ", ""},
      {"checkpoint naming)? [yes/NO]: ", ""},
  };
  for (const auto& [question, answer] : steps) {
    ASSERT_TRUE(terminal.expect(question)) << "waiting for '" << question << "' in:\n" << terminal.output();
    terminal.type(answer + "\n");
  }
  EXPECT_EQ(terminal.wait(), 0) << terminal.output();
  // No gradient_accumulation_steps at 1: Accelerate refuses the key, and 1 is the Accelerator's default.
  Settings expected = {
      {"machine_rank", "1"},  {"main_process_ip", "10.0.0.7"}, {"main_process_port", "29500"}, {"mixed_precision", "no"},
      {"num_machines", "2"},  {"num_processes", "4"},          {"use_cpu", "false"},
  };
  EXPECT_EQ(launch::read_config_file(path).settings, expected);
  EXPECT_TRUE(contains(read_text(path), "distributed_type: MULTI_GPU\n"));
}

// Ctrl-D before the last answer: an error, and no half-written file.
TEST_F(ConfigCommandTest, InputEndingEarlyWritesNothing) {
  Terminal terminal(clean_command({default_file}, {EMBER_CLI, "config"}));
  ASSERT_TRUE(terminal.started());
  ASSERT_TRUE(terminal.expect("Your choice [0]: ")) << terminal.output();
  terminal.type("0\n");
  ASSERT_TRUE(terminal.expect("[yes/NO]: ")) << terminal.output();
  terminal.type("\x04");
  EXPECT_EQ(terminal.wait(), 1) << terminal.output();
  EXPECT_TRUE(contains(terminal.output(),
                       "ember config: the input ended before every question was answered; nothing was written"))
      << terminal.output();
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ember::test
