// ember's config file: YAML with the key names of Accelerate's
// default_config.yaml, so that a config written by `accelerate config` works
// unchanged, plus ember's own Accelerator keys (config_keys.h). `ember launch`
// reads it, `ember config` writes it, `ember env` shows it (Note [Launcher
// configuration] in tools/README.md).
// Tests: tests/tools/test_config_file.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config_keys.h"

namespace ember::launch {

struct ConfigFile {
  std::string path;
  Settings settings;                  // the keys ember uses, with their values
  std::vector<std::string> warnings;  // one per unknown key: not an error, newer Accelerate versions add keys
  std::string origin;                 // "" for ember's own; else why this file (Accelerate's default)
};

// Where the config file is when no --config-file names one:
// $EMBER_CONFIG_FILE, else $XDG_CACHE_HOME/ember/default_config.yaml, else
// $HOME/.cache/ember/default_config.yaml (Accelerate keeps its own in
// ~/.cache/huggingface/accelerate/).
std::string default_config_path();

// Reads and checks the file. Throws ember::Error naming the path and the
// reason: missing, unreadable, yaml-cpp's message with line and column, or
// the key, line and value that is wrong.
ConfigFile read_config_file(const std::string& path);

// Accelerate's default config file: $HF_HOME/accelerate/default_config.yaml,
// else $XDG_CACHE_HOME/huggingface/accelerate/..., else
// ~/.cache/huggingface/accelerate/... (accelerate/commands/config/config_args.py).
std::optional<std::string> accelerate_default_config_path();

// The config in force: `explicit_path` when not empty (it must exist), else
// the default file when it exists, else (when EMBER_CONFIG_FILE is not set)
// Accelerate's default file when it exists, with its `origin` saying so, else none.
std::optional<ConfigFile> active_config_file(const std::string& explicit_path);

// The file's text: the settings in Accelerate's format (keys sorted, strings
// that YAML would read as booleans or numbers quoted), led by the two keys
// Accelerate requires, compute_environment and distributed_type.
std::string config_yaml(const Settings& settings);

// Writes config_yaml(settings) to `path` atomically: a temporary file in the
// same directory, fsync, rename over `path`, fsync of the directory. Creates
// missing parent directories.
void write_config_file(const std::string& path, const Settings& settings);

}  // namespace ember::launch
