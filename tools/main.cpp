// The `ember` command line. Subcommands: launch (tools/launch.cpp), which
// starts and supervises a distributed job's workers; config
// (tools/config_command.cpp), which writes the config file launch reads; env
// (tools/env_command.cpp), which prints what a bug report needs;
// estimate-memory (tools/estimate_memory.cpp), each strategy's bytes per process;
// trace merge (tools/trace_merge.cpp), every rank's profile on one timeline.
// Tests: tests/distributed/test_launch.cpp, tests/tools/.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config_command.h"
#include "core/error.h"
#include "env_command.h"
#include "estimate_memory.h"
#include "launch.h"
#include "supervisor.h"
#include "trace_merge.h"

namespace {

// Runs a subcommand, turning its errors into "ember <name>: message" and exit code 1.
int run_reporting_errors(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ember %s: %s\n", name, error.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: a SIGINT sent while the launcher reads its flags
  // and config file must stop the job it then starts (supervisor.h).
  if (argc > 1 && std::string_view(argv[1]) == "launch") ember::launch::hold_stop_signals();
  // Everything after the first "--" is the program and its arguments, never
  // flags of ours; CLI11 parses only what comes before it.
  std::vector<std::string> args(argv + 1, argv + argc);
  auto separator = std::find(args.begin(), args.end(), std::string("--"));
  std::vector<std::string> program(separator == args.end() ? args.end() : separator + 1, args.end());
  std::vector<std::string> ours(args.begin(), separator);

  CLI::App app{"ember: a tensor and autograd engine with its own distributed layer"};
  app.name("ember");
  app.require_subcommand(1);
  ember::launch::LaunchOptions launch_options;
  CLI::App* launch = ember::launch::add_launch_command(app, launch_options);
  ember::launch::ConfigCommandOptions config_options;
  CLI::App* config = ember::launch::add_config_command(app, config_options);
  ember::launch::EnvCommandOptions env_options;
  CLI::App* env = ember::launch::add_env_command(app, env_options);
  ember::launch::EstimateMemoryOptions estimate_options;
  CLI::App* estimate = ember::launch::add_estimate_memory_command(app, estimate_options);
  ember::launch::TraceMergeOptions trace_options;
  CLI::App* trace_merge = ember::launch::add_trace_command(app, trace_options);
  try {
    std::reverse(ours.begin(), ours.end());  // CLI11 takes a vector in reverse order
    app.parse(ours);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "ember: %s\nRun 'ember --help' or 'ember <command> --help' for usage.\n", error.what());
    return 2;
  }

  if (config->parsed()) return run_reporting_errors("config", [&] { return ember::launch::run_config(config_options); });
  if (env->parsed()) {
    return run_reporting_errors("env", [&] {
      std::printf("Copy and paste the text below into your bug report.\n\n");
      for (const std::string& line : ember::launch::environment_report(env_options)) std::printf("%s\n", line.c_str());
      return 0;
    });
  }
  if (estimate->parsed()) {
    return run_reporting_errors("estimate-memory", [&] {
      for (const std::string& line : ember::launch::memory_table(estimate_options)) std::printf("%s\n", line.c_str());
      return 0;
    });
  }
  if (trace_merge->parsed()) {
    return run_reporting_errors("trace merge", [&] {
      std::printf("merged into %s\n", ember::launch::run_trace_merge(trace_options).c_str());
      return 0;
    });
  }
  if (launch->parsed()) {
    // Without "--", prefix_command() leaves the program and its arguments here.
    std::vector<std::string> rest = launch->remaining();
    if (!rest.empty() && rest.front().starts_with("-")) {
      std::fprintf(stderr, "ember launch: unknown option '%s'\nRun 'ember launch --help' for usage.\n",
                   rest.front().c_str());
      return 2;
    }
    // A "--" after the program's name is one of the program's arguments.
    launch_options.command = rest;
    if (!rest.empty() && separator != args.end()) launch_options.command.push_back("--");
    launch_options.command.insert(launch_options.command.end(), program.begin(), program.end());
    return run_reporting_errors("launch", [&] { return ember::launch::run_launch(launch_options); });
  }
  return 0;
}
