// What the tests of tests/tools share: a fresh directory per test, files
// written and read whole, and commands run in a clean environment, without the
// caller's config file or Accelerator variables, so that a developer's own
// ~/.cache/ember/default_config.yaml or exported EMBER_SEED cannot change a result.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"

namespace ember::test {

// The message of the ember::Error that `body` throws, or "" when it throws none.
template <class Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// The variables a test controls; each command starts without them.
inline const std::vector<std::string> kControlledVariables = {
    "EMBER_CONFIG_FILE",     "XDG_CACHE_HOME",     "EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS",
    "EMBER_USE_CPU",         "EMBER_SPLIT_BATCHES", "EMBER_EVEN_BATCHES",   "EMBER_SEED",
    "EMBER_PROJECT_DIR",     "EMBER_AUTOMATIC_CHECKPOINT_NAMING", "EMBER_TOTAL_LIMIT", "EMBER_STORE_TOKEN",
    "EMBER_STRATEGY",        "EMBER_WRAP_POLICY",  "EMBER_WRAP_MODULE_TYPES", "EMBER_WRAP_MIN_NUM_PARAMS",
    "EMBER_STATE_DICT_TYPE", "EMBER_FORWARD_PREFETCH", "EMBER_BACKWARD_PREFETCH", "EMBER_ACTIVATION_CHECKPOINTING",
    "EMBER_MAX_GRAD_NORM",   "HF_HOME",            "ACCELERATE_MIXED_PRECISION", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "ACCELERATE_USE_CPU",
};

// `/usr/bin/env -u ... NAME=value ... command...`: `command` with the
// controlled variables removed, then `assignments` ("NAME=value") set, and
// one OpenMP thread, passive (the launcher's summary stays predictable).
inline std::vector<std::string> clean_command(const std::vector<std::string>& assignments,
                                              const std::vector<std::string>& command) {
  std::vector<std::string> full = {"/usr/bin/env"};
  for (const std::string& variable : kControlledVariables) full.insert(full.end(), {"-u", variable});
  full.insert(full.end(), {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"});
  full.insert(full.end(), assignments.begin(), assignments.end());
  full.insert(full.end(), command.begin(), command.end());
  return full;
}

inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  auto path = std::filesystem::temp_directory_path() / ("ember_test_tools_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace ember::test
