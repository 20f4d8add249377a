// The checkpoint manifest (`manifest.json`): what a complete checkpoint
// holds, so that load_state can check all of it before changing anything.
//
//   {"format": "ember-checkpoint", "version": 1, "world_size": 2,
//    "metadata": {...the writer's JSON: step, mixed precision, ...},
//    "files": {"model.safetensors": {"size": 4096, "sha256": "9f86d0..."}, ...},
//    "tensors": [{"file": "model.safetensors", "name": "0.weight", "dtype": "F32",
//                 "shape": [16, 4], "param": "0.weight", "offset": 0, "numel": 64}, ...]}
//
// Every file of the checkpoint directory but the manifest is listed with its
// size and SHA-256 (names relative, '/'-separated). Every tensor of every .safetensors file is listed with
// the parameter it belongs to and the range [offset, offset + numel) of that
// parameter's flattened elements it covers: today each tensor covers a whole
// parameter, and a sharded (ZeRO) checkpoint will list one range per shard.
// Tests: tests/distributed/test_checkpoint_files.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.h"

namespace ember::distributed::checkpoint {

inline constexpr const char* kManifestName = "manifest.json";

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t size = 0;
  std::string sha256;  // lowercase hex
};

struct ManifestTensor {
  std::string file;
  std::string name;
  std::string dtype;  // safetensors' spelling: F32, BF16, I64, ...
  Shape shape;
  std::string param;  // the parameter (or buffer) this tensor belongs to
  int64_t offset = 0;
  int64_t numel = 0;
};

struct Manifest {
  int64_t world_size = 1;
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<ManifestFile> files;
  std::vector<ManifestTensor> tensors;

  const ManifestFile* find_file(const std::string& name) const;
  // The tensors of one file, in the file's order.
  std::vector<const ManifestTensor*> tensors_of(const std::string& file) const;
};

// The parameter a tensor of a file belongs to; by default the tensor's own name.
using ParamOf = std::function<std::string(const std::string& file, const std::string& tensor)>;

// Hashes every file under `directory` (recursively, the manifest excepted),
// indexes the tensors of its .safetensors files, and writes manifest.json
// there (atomically, fsynced). Returns what it wrote. world_size >= 1 and
// metadata must be an object; a symbolic link or other non-file is an error.
Manifest write_manifest(const std::filesystem::path& directory, int64_t world_size, const nlohmann::json& metadata,
                        const ParamOf& param_of = {});

// Parses `directory`/manifest.json (at most 64 MiB); an error names the path
// and what is malformed: unknown, missing or mistyped fields, repeated keys,
// negative or too large numbers, checksums that are not 64 lowercase hex
// digits, file names that could leave the directory (absolute, "..", empty
// components), tensors of unlisted files or listed twice, an unknown dtype, a
// shape whose product overflows.
Manifest read_manifest(const std::filesystem::path& directory);

// read_manifest, then checks that every listed file exists with its size and
// checksum and, when given, that the world size matches. The first problem
// found is an ember::Error naming the checkpoint, the file and the expected
// and found values ("checkpoint /x/checkpoint_3: optimizer.safetensors has
// SHA-256 ab12... but the manifest says 9f86..."). Reads every file once.
// Files are opened without following symbolic links at any component, so
// verification never reads outside `directory`; a FIFO or device in a listed
// file's place is refused at once. Files the manifest does not list are
// allowed (load_state reads only listed ones, through read_listed_file).
Manifest verify_checkpoint(const std::filesystem::path& directory, std::optional<int64_t> world_size = std::nullopt);

// The bytes of `name` for a loader: `name` must be among the manifest's files
// (an unlisted file is never read, whatever lies in the directory); it is
// opened as verify_checkpoint opens it (beneath `directory`, no symbolic link
// at any component, a regular file, not blocking on a FIFO), must have the
// listed size, and the bytes returned are the very bytes whose SHA-256 was
// checked against the manifest, so a file changed after verify_checkpoint is
// caught too. Errors name the checkpoint and the file.
std::string read_listed_file(const std::filesystem::path& directory, const Manifest& manifest, const std::string& name);

}  // namespace ember::distributed::checkpoint
