// nn::save / nn::load: a module's state dict as a safetensors file
// (core/safetensors.h), with the names PyTorch gives the same model, so the
// file loads into it with safetensors.torch.load_model. Tests: tests/nn/test_serialize.cpp.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "nn/module.h"

namespace ember::nn {

// Writes module.state_dict() (parameters and persistent buffers) to `path`;
// metadata gains {"format": "pt"} unless it has a "format".
void save(const Module& module, const std::filesystem::path& path,
          const std::map<std::string, std::string>& metadata = {});

// Reads `path` and copies its tensors into the module in place
// (load_state_dict, with its strictness and its error listing, prefixed by the path).
LoadStateDictResult load(Module& module, const std::filesystem::path& path, bool strict = true);

}  // namespace ember::nn
