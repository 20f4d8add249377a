// The process that tests/distributed/test_checkpoint_files.cpp kills with
// SIGKILL while it saves checkpoints, to show that a kill at any moment leaves
// the previous checkpoint loadable (Note [Atomic checkpoints]).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/ops/creation.h"
#include "core/safetensors.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace checkpoint = distributed::checkpoint;

// A phase marker, written unbuffered so that the test sees the last one
// before the kill.
void phase(const std::string& text) {
  const std::string line = text + "\n";
  (void)!::write(1, line.data(), line.size());
}

Tensor filled(int64_t numel, double value) {
  Tensor tensor = make_tensor({numel}, DType::f32);
  tensor.fill_(Scalar(value));
  return tensor;
}

// One checkpoint written the way the Accelerator writes one: staging, the
// ranks' files, the manifest, commit. `label` prefixes the phase markers.
void save_checkpoint(const std::filesystem::path& final_dir, int64_t step, const std::string& label) {
  const std::filesystem::path staging = checkpoint::staging_path(final_dir);
  phase(label + "staging");
  checkpoint::begin_staging(staging);
  phase(label + "files");
  save_safetensors(staging / "model.safetensors", {{"weight", filled(1 << 19, double(step))}});
  save_safetensors(staging / "optimizer_rank1.safetensors", {{"exp_avg", filled(1 << 18, double(step) / 2)}});
  std::filesystem::create_directories(staging / "rng");
  std::FILE* json = std::fopen((staging / "rng" / "rank0.json").c_str(), "w");
  EMBER_CHECK(json != nullptr, "checkpoint_saver: cannot write the JSON file");
  std::fprintf(json, "{\"step\": %lld}\n", static_cast<long long>(step));
  std::fclose(json);
  phase(label + "manifest");
  checkpoint::write_manifest(staging, 2, {{"step", step}});
  phase(label + "commit");
  checkpoint::commit(staging, final_dir);
}

}  // namespace

// args: checkpoints directory, total_limit. Saves checkpoints of ~3 MB
// forever: a new `checkpoint_N` (then latest, then total_limit), and the same
// state again over `best`, which commit replaces by exchange.
EMBER_SCENARIO(checkpoint_saver) {
  EMBER_CHECK(args.size() == 2, "checkpoint_saver: usage: checkpoint_saver <checkpoints dir> <total_limit>");
  const std::filesystem::path directory = args[0];
  const int64_t total_limit = std::stoll(args[1]);
  phase("ready");
  for (int64_t step = 0;; ++step) {
    const std::filesystem::path final_dir = checkpoint::next_checkpoint_path(directory);
    save_checkpoint(final_dir, step, "");
    phase("latest");
    checkpoint::set_latest(directory, final_dir.filename().string());
    phase("total_limit");
    checkpoint::enforce_total_limit(directory, total_limit);
    save_checkpoint(directory / "best", step, "best ");
    phase("saved " + final_dir.filename().string());
  }
}

}  // namespace ember::test
