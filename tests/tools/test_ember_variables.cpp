// core/ember_variables.h: the list of EMBER_* variables is the sources' own
// list, and a misspelt name is reported with the name it was meant to be,
// by `ember env` and `ember launch` (Note [Misspelt variables]).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/ember_variables.h"
#include "distributed/process_runner.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

// Every "EMBER_..." string literal in the library's and the tools' sources.
std::set<std::string> variables_in_sources() {
  const std::regex literal("\"(EMBER_[A-Z0-9_]+)\"");
  std::set<std::string> found;
  for (const char* layer : {"core", "kernels", "autograd", "nn", "optim", "data", "distributed", "tools"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(EMBER_SOURCE_DIR) / layer)) {
      const std::string extension = entry.path().extension().string();
      if (extension != ".cpp" && extension != ".h" && extension != ".cu") continue;
      std::ifstream file(entry.path());
      const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
      for (std::sregex_iterator match(text.begin(), text.end(), literal), end; match != end; ++match)
        found.insert((*match)[1].str());
    }
  }
  return found;
}

// Catches: a variable read somewhere and missing from the list (its users
// would be told that ember does not read it), and a listed name nothing reads.
// The on/off variables were each read their own way: EMBER_PROFILE_SHAPES=0
// turned shape recording on, EMBER_DISABLE_BF16_GEMM=true changed nothing,
// EMBER_CPU_BASELINE=false forced the baseline kernels. All go through
// parse_flag now. Mutation caught: parse_flag taking any other text for true.
TEST(EmberVariables, OnOffVariablesTakeFlagsOnly) {
  EXPECT_TRUE(parse_flag("EMBER_X", "1"));
  EXPECT_TRUE(parse_flag("EMBER_X", "true"));
  EXPECT_FALSE(parse_flag("EMBER_X", "0"));
  EXPECT_FALSE(parse_flag("EMBER_X", "false"));
  for (const char* text : {"", "yes", "TRUE", "2", "off"})
    EXPECT_TRUE(contains(error_of([&] { parse_flag("EMBER_X", text); }), std::string("EMBER_X='") + text + "' is not a flag"))
        << text;
  unsetenv("EMBER_PROFILE_SHAPES");
  EXPECT_EQ(flag_variable("EMBER_PROFILE_SHAPES"), std::nullopt);
  setenv("EMBER_PROFILE_SHAPES", "false", 1);
  EXPECT_EQ(flag_variable("EMBER_PROFILE_SHAPES"), false);
  setenv("EMBER_PROFILE_SHAPES", "yes", 1);
  EXPECT_TRUE(contains(error_of([] { flag_variable("EMBER_PROFILE_SHAPES"); }), "EMBER_PROFILE_SHAPES='yes' is not a flag"));
  unsetenv("EMBER_PROFILE_SHAPES");
}

TEST(EmberVariables, TheListIsEveryVariableTheSourcesRead) {
  std::set<std::string> listed;
  for (const EmberVariable& variable : ember_variables()) {
    EXPECT_FALSE(variable.meaning.empty()) << variable.name;
    listed.insert(std::string(variable.name));
  }
  const std::set<std::string> read = variables_in_sources();
  ASSERT_GT(read.size(), 20u) << "the sources were not found under " << EMBER_SOURCE_DIR;
  for (const std::string& name : read) EXPECT_TRUE(listed.count(name)) << name << " is read but not listed";
  for (const std::string& name : listed) EXPECT_TRUE(read.count(name)) << name << " is listed but nothing reads it";
  EXPECT_TRUE(std::is_sorted(ember_variables().begin(), ember_variables().end(),
                             [](const EmberVariable& a, const EmberVariable& b) { return a.name < b.name; }));
}

// Catches: the nearest name not offered, a far one offered as a guess, or a
// known name (or another prefix) warned about.
TEST(EmberVariables, AnUnknownNameIsReportedWithTheNearestKnownOne) {
  EXPECT_EQ(unknown_ember_variable_warning("EMBER_MIXED_PRECISON"),
            "EMBER_MIXED_PRECISON is not a variable ember reads (did you mean EMBER_MIXED_PRECISION? "
            "`ember env --variables` lists them)");
  EXPECT_NE(unknown_ember_variable_warning("EMBER_SEEDS")->find("did you mean EMBER_SEED?"), std::string::npos);
  EXPECT_EQ(unknown_ember_variable_warning("EMBER_HOME"),
            "EMBER_HOME is not a variable ember reads (`ember env --variables` lists them)");
  EXPECT_EQ(unknown_ember_variable_warning("EMBER_"), "EMBER_ is not a variable ember reads (`ember env --variables` lists them)");
  for (const EmberVariable& variable : ember_variables())
    EXPECT_EQ(unknown_ember_variable_warning(variable.name), std::nullopt) << variable.name;
  EXPECT_EQ(unknown_ember_variable_warning("MIXED_PRECISON"), std::nullopt);
  EXPECT_EQ(unknown_ember_variable_warning("ACCELERATE_MIXED_PRECISON"), std::nullopt);
}

TEST(EmberVariables, EmberEnvListsThemAndMarksAnUnknownOne) {
  ProcessResult listing = run_process(clean_command({}, {EMBER_CLI, "env", "--variables"}), 30s);
  ASSERT_EQ(listing.exit_code, 0) << listing.output;
  for (const EmberVariable& variable : ember_variables()) {
    EXPECT_NE(listing.output.find(fmt::format("- {}: {}\n", variable.name, variable.meaning)), std::string::npos)
        << variable.name << " in:\n" << listing.output;
  }

  // The list reads no config file, so one named beside it is refused, not ignored.
  ProcessResult both = run_process(
      clean_command({}, {EMBER_CLI, "env", "--variables", "--config-file", "/nonexistent.yaml"}), 30s);
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("ember: --config-file excludes --variables"), std::string::npos) << both.output;

  ProcessResult report =
      run_process(clean_command({"EMBER_SEED=3", "EMBER_SEDE=4"}, {EMBER_CLI, "env"}), 30s);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("  - EMBER_SEED: 3\n"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("  - EMBER_SEDE: 4 (warning: EMBER_SEDE is not a variable ember reads (did you mean "
                               "EMBER_SEED?"),
            std::string::npos)
      << report.output;
}

// Catches: the launcher passing a misspelt variable on without a word.
TEST(EmberVariables, EmberLaunchWarnsAboutAnUnknownOne) {
  ProcessResult result = run_process(
      clean_command({"EMBER_MIXED_PRECISON=bf16"}, {EMBER_CLI, "launch", "--nproc-per-node", "1", "--", "/bin/true"}),
      60s);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("warning: EMBER_MIXED_PRECISON is not a variable ember reads (did you mean "
                               "EMBER_MIXED_PRECISION?"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace ember::test
