// nn::save / nn::load (see serialize.h).
#include "nn/serialize.h"

#include "core/safetensors.h"

namespace ember::nn {

void save(const Module& module, const std::filesystem::path& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, without_aliases(module.state_dict()), metadata);
}

LoadStateDictResult load(Module& module, const std::filesystem::path& path, bool strict) {
  // Copied, not mapped: the tensors are copied into the module anyway, and a
  // mapping would let a file truncated during the load kill the process with
  // SIGBUS. Nothing of the file is held once this returns.
  SafetensorsContents contents = load_safetensors(path, {.mmap = false});
  try {
    return module.load_state_dict(contents.tensors, strict);
  } catch (const Error& error) {
    throw Error(fmt::format("nn::load: {}: {}", path.string(), error.what()));
  }
}

}  // namespace ember::nn
