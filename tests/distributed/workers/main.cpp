// distributed_worker <scenario> [args...]: runs one registered scenario
// (workers/scenario.h). An ember::Error escaping a scenario is printed and
// exits 2, so tests can tell a failed check (1) from an error (2).
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "workers/scenario.h"

namespace ember::test {
std::map<std::string, Scenario>& scenarios() {
  static std::map<std::string, Scenario> all;
  return all;
}
}  // namespace ember::test

int main(int argc, char** argv) {
  auto& all = ember::test::scenarios();
  if (argc < 2 || !all.count(argv[1])) {
    std::fprintf(stderr, "usage: distributed_worker <scenario> [args...]; scenarios:");
    for (const auto& [name, _] : all) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 64;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    return all.at(argv[1])(args);
  } catch (const ember::Error& error) {
    std::fprintf(stderr, "ember::Error: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "exception: %s\n", error.what());
    return 2;
  }
}
