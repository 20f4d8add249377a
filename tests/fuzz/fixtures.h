// The fixed files around the fuzzed one, for the targets that read a
// directory (sharded_index.cpp, manifest.cpp) and for make_seeds.cpp, whose
// seeds must describe these same files (names, sizes, checksums). Written with
// ember's own writers, which are deterministic.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "fuzz/fuzz_support.h"

namespace ember::fuzz {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// sharded_index: root/model/ holds the two shards of a Linear(3, 2), as
// save_sharded writes them (weight alone in the first, bias in the second),
// and its index, which the target replaces with the input. Around them, files
// an index must not reach: a valid shard outside the directory (root/outside.safetensors,
// with other values), one in a subdirectory (model/sub/), and a file that is not
// a shard (model/notes.txt).

struct ShardedFixture {
  fs::path directory;  // root/model
  fs::path index;      // the index file in it
  NamedTensors state;  // what the two shards hold
};

inline NamedTensors sharded_state() {
  return {{"weight", from_vector<float>({0.5f, -1.5f, 2.0f, 3.25f, -4.0f, 5.5f}, {2, 3})},
          {"bias", from_vector<float>({10.0f, -20.0f}, {2})}};
}

inline ShardedFixture write_sharded_fixture(const fs::path& root) {
  ShardedFixture fixture{.directory = root / "model", .index = root / "model" / "model.safetensors.index.json",
                         .state = sharded_state()};
  constexpr int64_t kWeightBytes = 6 * 4;  // a shard holds the weight alone, so the bias gets the second
  nn::save_sharded(fixture.state, fixture.directory, kWeightBytes);
  FUZZ_REQUIRE(fs::exists(fixture.index), "save_sharded wrote no index");
  NamedTensors outside;
  for (const auto& [name, tensor] : fixture.state) outside.emplace_back(name, full_like(tensor, -1.0));
  save_safetensors(root / "outside.safetensors", outside);
  fs::create_directories(fixture.directory / "sub");
  save_safetensors(fixture.directory / "sub" / "model-00002-of-00002.safetensors", {fixture.state[1]});
  write_file(fixture.directory / "notes.txt", "not a shard\n");
  return fixture;
}

// ---------------------------------------------------------------------------
// manifest: root/checkpoint/ holds three files, one in a subdirectory, as a
// checkpoint would; the target replaces its manifest.json with the input. A
// manifest must not reach what it does not hold: root/outside.bin, through
// the name "../outside.bin", a symbolic link to it (checkpoint/link.bin), or a
// link to the root (checkpoint/up/outside.bin); nor hang on a FIFO
// (checkpoint/fifo). The hostile entries come after write_manifest, which
// accepts regular files only.

struct CheckpointFixture {
  fs::path directory;                     // root/checkpoint
  std::map<std::string, uint64_t> files;  // the regular files in it, by relative name, with their sizes
};

inline CheckpointFixture write_checkpoint_fixture(const fs::path& root) {
  CheckpointFixture fixture{.directory = root / "checkpoint", .files = {}};
  fs::create_directories(fixture.directory / "optimizer");
  save_safetensors(fixture.directory / "model.safetensors",
                   {{"0.weight", from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2})},
                    {"0.bias", from_vector<float>({-1.0f, 0.5f}, {2})}});
  save_safetensors(fixture.directory / "optimizer" / "state.safetensors",
                   {{"state.0.exp_avg", from_vector<double>({0.25, 0.125}, {2})},
                    {"state.0.step", scalar_tensor(7, {.dtype = DType::i64})}});
  write_file(fixture.directory / "trainer_state.json", "{\"step\": 7, \"epoch\": 1}\n");
  for (const auto& entry : fs::recursive_directory_iterator(fixture.directory))
    if (entry.is_regular_file())
      fixture.files.emplace(entry.path().lexically_relative(fixture.directory).generic_string(), entry.file_size());
  return fixture;
}

inline void add_hostile_checkpoint_entries(const fs::path& root, const CheckpointFixture& fixture) {
  write_file(root / "outside.bin", "a file outside the checkpoint\n");
  fs::create_symlink("../outside.bin", fixture.directory / "link.bin");
  fs::create_directory_symlink("..", fixture.directory / "up");
  FUZZ_REQUIRE(::mkfifo((fixture.directory / "fifo").c_str(), 0600) == 0, "mkfifo failed");
}

}  // namespace ember::fuzz
