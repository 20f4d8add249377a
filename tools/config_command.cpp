// See config_command.h.
#include "config_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "config_file.h"
#include "config_questions.h"
#include "core/error.h"

namespace ember::launch {
namespace {

// The file the flags describe. Unset keys of Accelerate's basic set get the
// values `accelerate config` writes for a single process; the Accelerator's
// own options are written only when given.
Settings settings_from_flags(const Settings& given) {
  Settings settings = {
      {"machine_rank", "0"}, {"mixed_precision", "no"}, {"num_machines", "1"}, {"num_processes", "1"}, {"use_cpu", "false"},
  };
  for (const auto& [name, value] : given) settings[name] = canonical_value(*find_config_key(name), value, flag_name(name));
  long long processes = *integer_setting(settings, "num_processes");
  long long machines = *integer_setting(settings, "num_machines");
  long long rank = *integer_setting(settings, "machine_rank");
  EMBER_CHECK(processes % machines == 0,
              "--num-processes {} (the processes of every machine together) is not divisible by --num-machines {}",
              processes, machines);
  EMBER_CHECK(rank < machines, "--machine-rank {} is not a machine of --num-machines {} (0 to {})", rank, machines,
              machines - 1);
  EMBER_CHECK(machines == 1 || (settings.count("main_process_ip") && settings.count("main_process_port")),
              "--num-machines {} needs --main-process-ip and --main-process-port: every machine must know where "
              "machine 0 hosts the store",
              machines);
  return settings;
}

}  // namespace

int run_config(const ConfigCommandOptions& options) {
  if (options.show) {
    EMBER_CHECK(options.settings.empty(), "--show prints the config in force and takes no settings");
    for (const std::string& line : describe_active_config(options.config_file)) std::printf("%s\n", line.c_str());
    return 0;
  }
  std::string path = options.config_file.empty() ? default_config_path() : options.config_file;
  bool interactive = options.settings.empty() && isatty(STDIN_FILENO);
  // No flags and no terminal to ask (a pipe, CI, ssh host ember config):
  // the defaults, as `accelerate config default` writes them, but never over
  // a config that exists, which would lose every setting in it.
  std::error_code error;
  EMBER_CHECK(interactive || !options.settings.empty() || !std::filesystem::exists(path, error),
              "no settings given and stdin is not a terminal to ask them: '{}' exists and is kept (pass the settings "
              "as flags, e.g. --num-processes 2 --mixed-precision bf16, to replace it)",
              path);
  Settings settings = interactive ? ask_config_questions(std::cin, std::cout) : settings_from_flags(options.settings);
  write_config_file(path, settings);
  std::printf("ember configuration saved at %s\n", path.c_str());
  return 0;
}

std::vector<std::string> describe_active_config(const std::string& explicit_path) {
  std::optional<ConfigFile> config = active_config_file(explicit_path);
  if (!config) {
    return {fmt::format("- config file: none ({} does not exist; ember config writes it)", default_config_path())};
  }
  std::vector<std::string> lines = {"- config file: " + config->path +
                                    (config->origin.empty() ? "" : " (" + config->origin + ")")};
  for (const std::string& warning : config->warnings) lines.push_back("  - warning: " + warning);
  for (const auto& [name, value] : config->settings) lines.push_back(fmt::format("  - {}: {}", name, value));
  return lines;
}

}  // namespace ember::launch
