// The worker program that distributed tests start through `ember launch`:
//   distributed_worker <scenario> [args...]
// Each scenario is a function registered by name in one of workers/*.cpp; it
// returns the process's exit code (0: every check held) and prints what it
// found, so a failing test shows which rank saw what.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ember::test {

using Scenario = std::function<int(const std::vector<std::string>& args)>;
std::map<std::string, Scenario>& scenarios();

struct ScenarioRegistrar {
  ScenarioRegistrar(const std::string& name, Scenario scenario) { scenarios()[name] = std::move(scenario); }
};

}  // namespace ember::test

#define EMBER_SCENARIO_CONCAT2(a, b) a##b
#define EMBER_SCENARIO_CONCAT(a, b) EMBER_SCENARIO_CONCAT2(a, b)
// EMBER_SCENARIO(name) { ...; return 0; }  with `args` in scope.
#define EMBER_SCENARIO(name)                                                                    \
  static int EMBER_SCENARIO_CONCAT(scenario_, name)(const std::vector<std::string>& args);     \
  static ::ember::test::ScenarioRegistrar EMBER_SCENARIO_CONCAT(registrar_, name)(             \
      #name, EMBER_SCENARIO_CONCAT(scenario_, name));                                          \
  static int EMBER_SCENARIO_CONCAT(scenario_, name)([[maybe_unused]] const std::vector<std::string>& args)
