// The `ember` command line. Subcommands: launch (tools/launch.cpp), which
// starts and supervises a distributed job's workers.
// Tests: tests/distributed/test_launch.cpp.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "launch.h"

int main(int argc, char** argv) {
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
  try {
    std::reverse(ours.begin(), ours.end());  // CLI11 takes a vector in reverse order
    app.parse(ours);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "ember: %s\nRun 'ember --help' or 'ember launch --help' for usage.\n", error.what());
    return 2;
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
    try {
      return ember::launch::run_launch(launch_options);
    } catch (const ember::Error& error) {
      std::fprintf(stderr, "ember launch: %s\n", error.what());
      return 1;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "ember launch: %s\n", error.what());
      return 1;
    }
  }
  return 0;
}
