// `ember env`: what a bug report needs to know about this ember and this
// machine, as `accelerate env` prints it: one "- key: value" line each for
// the version, the build (type, compiler, sanitizers, CUDA), the CUDA
// libraries loaded (version and file), the distributed backends built, the
// CPU and its features, the threads, the GPUs, the job engine detected
// (distributed/environment.h), the relevant environment variables
// (EMBER_STORE_TOKEN's value never: "set"; an EMBER_* name ember does not
// read is marked) and the config file in force. `ember env --variables` lists
// every EMBER_* variable ember reads instead (core/ember_variables.h).
// tools/main.cpp calls it.
// Tests: tests/tools/test_env_command.cpp.
#pragma once

#include <string>
#include <vector>

namespace ember::launch {

struct EnvCommandOptions {
  std::string config_file;  // --config-file; "": the default one
  bool variables = false;   // --variables: the EMBER_* variables and what each does
};

// The report's lines.
std::vector<std::string> environment_report(const EnvCommandOptions& options);

}  // namespace ember::launch
