// Fuzzes the config file reader of `ember launch` (tools/config_file.h) with
// the input as the YAML file. An accepted file's settings must survive the
// writer: config_yaml of them reads back as the same settings (the two keys
// the writer adds aside), so what the reader takes, the writer can say.
// Seeds: corpus/config_yaml/ (make_seeds.cpp).
#include "config_file.h"
#include "fuzz/fuzz_support.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemoryFile file(data, size);
  launch::ConfigFile config;
  try {
    config = launch::read_config_file(file.path());
  } catch (const Error& error) {
    fuzz::rejected(error);
    return 0;
  }
  const std::string written = launch::config_yaml(config.settings);
  const fuzz::MemoryFile rewritten(reinterpret_cast<const uint8_t*>(written.data()), written.size());
  launch::ConfigFile reread;
  try {
    reread = launch::read_config_file(rewritten.path());
  } catch (const Error& error) {
    fuzz::fail(fmt::format("config_yaml wrote a file the reader refuses: {}\n{}", error.what(), written));
  }
  FUZZ_REQUIRE(reread.settings == config.settings && reread.warnings.empty(),
               "config_yaml's file reads back differently:\n{}", written);
  return 0;
}
