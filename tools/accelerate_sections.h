// Accelerate's `distributed_type`, `deepspeed_config` and `fsdp_config` in a
// config file, turned into ember's sharding keys (strategy, wrap_policy, ...,
// config_keys.h) and gradient_accumulation_steps, so that a file written by
// `accelerate config` for DeepSpeed or FSDP runs as the same kind of job. Every
// key is honoured, or refused, or warned about by name; none is dropped
// silently (the table in Note [Accelerate's DeepSpeed and FSDP keys],
// tools/README.md). config_file.cpp calls it once the file's other keys are read.
// Tests: tests/tools/test_config_file.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>

#include "config_file.h"

namespace ember::launch {

// The three top-level entries as the file has them (a default Node when absent).
struct AccelerateSections {
  YAML::Node distributed_type;
  YAML::Node deepspeed_config;
  YAML::Node fsdp_config;
  int distributed_type_line = 0;
  int deepspeed_config_line = 0;
  int fsdp_config_line = 0;
  std::map<std::string, int> key_lines;  // the line of each top-level key, for conflicts
};

// Adds the settings the sections imply to `config` (which holds the file's
// top-level keys already) and a warning for each key that is not honoured.
// A setting that a section and a top-level key both give, with different
// values, is an error naming both; so are both sections at once, a section
// that distributed_type contradicts, and a distributed_type ember cannot run.
void apply_accelerate_sections(const AccelerateSections& sections, ConfigFile& config);

}  // namespace ember::launch
