// nn::save / nn::load: a module's state dict as a safetensors file
// (core/safetensors.h), with the names PyTorch gives the same model, so the
// file loads into it with safetensors.torch.load_model. save_sharded /
// load_sharded: the same as a directory in Hugging Face's layout, split into
// shards of bounded size when it is large (what Accelerator::save_model
// writes). Tests: tests/nn/test_serialize.cpp, tests/nn/test_serialize_sharded.cpp.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/named_tensors.h"
#include "nn/module.h"

namespace ember::nn {

// Writes module.state_dict() (parameters and persistent buffers) to `path`,
// a tied tensor once under its first name (without_aliases; load restores the
// tie); metadata gains {"format": "pt"} unless it has a "format".
void save(const Module& module, const std::filesystem::path& path,
          const std::map<std::string, std::string>& metadata = {});

// Reads `path` and copies its tensors into the module in place
// (load_state_dict, with its strictness and its error listing, prefixed by the path).
// The file is read into memory, not mapped (SafetensorsLoadOptions in
// core/safetensors.h says why a mapping is fragile): once this returns,
// nothing of the file is held open or mapped, and truncating or rewriting it
// changes nothing in the module. A FIFO or device at `path` is refused at once.
LoadStateDictResult load(Module& module, const std::filesystem::path& path, bool strict = true);

// Hugging Face's byte sizes: "10GB" (10^10 bytes), "500MB", "100KB", "1.5GB",
// "5GiB" (5 * 2^30), "1024" (bytes); units in any case, spaces allowed around
// them. An error names the text.
int64_t parse_byte_size(std::string_view text);

// Writes `state` (a tied tensor once, under its first name) into `directory` (created if needed) as `model.safetensors`
// when its tensors fit in one shard of max_shard_size bytes, else as
// `model-00001-of-0000N.safetensors` ... plus `model.safetensors.index.json`:
//   {"metadata": {"total_size": <bytes of all tensors>},
//    "weight_map": {"<tensor name>": "model-00001-of-0000N.safetensors", ...}}
// Tensors go to shards in order, a new shard starting when the next tensor
// would overflow the current one; a tensor larger than the limit gets a shard
// of its own, placed before the shard being filled (huggingface_hub's
// split_state_dict_into_shards_factory, which transformers and Accelerate
// call). The index is written as transformers writes it (sorted keys, indent
// 2, ASCII escapes, a final newline). Every file is written atomically; the
// files an earlier save left (model.safetensors, model-*-of-*.safetensors, the
// index) that this one does not write again are removed afterwards (a stale
// shard would confuse a loader). Returns the files written.
std::vector<std::filesystem::path> save_sharded(const NamedTensors& state, const std::filesystem::path& directory,
                                                int64_t max_shard_size,
                                                const std::map<std::string, std::string>& metadata = {});

// Reads what save_sharded wrote (either layout) into the module in place, as
// load(). The index is validated before any shard is read: every weight_map
// entry must name a plain file in `directory` (no "/", "..", absolute or empty
// names), every shard must exist, and a tensor must be in the shard the index
// says; errors name the directory, the entry and the reason. A tensor in a
// shard that the index does not list, a name listed twice, or a directory
// holding both layouts is an error too. The module changes only once every
// shard has been read and checked. Like load, it reads copies and keeps no
// mapping; names from the index and the shards appear escaped in errors.
LoadStateDictResult load_sharded(Module& module, const std::filesystem::path& directory, bool strict = true);
}  // namespace ember::nn
