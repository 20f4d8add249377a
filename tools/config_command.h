// `ember config`: writes the config file `ember launch` reads (config_file.h).
// On a terminal, with no setting among its flags, it asks the questions of
// config_questions.h; otherwise it takes the flags (--num-processes,
// --mixed-precision, --cpu, ...) and writes without asking. `--show` prints
// the config in force instead. tools/main.cpp parses the command line into
// ConfigCommandOptions.
// Tests: tests/tools/test_config_command.cpp.
#pragma once

#include <string>
#include <vector>

#include "config_keys.h"

namespace ember::launch {

struct ConfigCommandOptions {
  std::string config_file;  // --config-file; "": the default path
  Settings settings;        // by config key, as the flags gave them (checked when run)
  bool show = false;        // --show
};

// Writes the file (or shows the config); returns the exit code. Errors throw ember::Error.
int run_config(const ConfigCommandOptions& options);

// "- config file: PATH" and "  - key: value" for each setting, or a line
// saying there is none: for `ember config --show` and `ember env`.
std::vector<std::string> describe_active_config(const std::string& explicit_path);

}  // namespace ember::launch
