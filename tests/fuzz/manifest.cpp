// Fuzzes the checkpoint manifest reader (distributed/checkpoint/manifest.h):
// the input is manifest.json in a checkpoint directory of three files, next to
// a file outside it, symbolic links that lead there and a FIFO (fixtures.h).
// read_manifest and verify_checkpoint must refuse what is malformed; a
// verified manifest may only list the checkpoint's own regular files, with
// their sizes. Seeds: corpus/manifest/ (make_seeds.cpp).
#include "distributed/checkpoint/manifest.h"
#include "fuzz/fixtures.h"

using namespace ember;
using namespace ember::distributed::checkpoint;

namespace {

const fuzz::CheckpointFixture& fixture() {
  static const fuzz::CheckpointFixture written = [] {
    const std::filesystem::path& root = fuzz::scratch_directory();
    fuzz::CheckpointFixture checkpoint = fuzz::write_checkpoint_fixture(root);
    fuzz::add_hostile_checkpoint_entries(root, checkpoint);
    return checkpoint;
  }();
  return written;
}

void check_verified(const Manifest& manifest) {
  for (const ManifestFile& file : manifest.files) {
    const auto found = fixture().files.find(file.name);
    FUZZ_REQUIRE(found != fixture().files.end(), "verify_checkpoint accepted the file '{}'", file.name);
    FUZZ_REQUIRE(found->second == file.size, "verify_checkpoint accepted '{}' with {} bytes; it has {}", file.name,
                 file.size, found->second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::write_file(fixture().directory / kManifestName, fuzz::as_text(data, size));
  try {
    const Manifest manifest = read_manifest(fixture().directory);
    for (const ManifestTensor& tensor : manifest.tensors)
      FUZZ_REQUIRE(manifest.find_file(tensor.file) != nullptr, "tensor '{}' of an unlisted file '{}'", tensor.name,
                   tensor.file);
  } catch (const Error& error) {
    fuzz::rejected(error);
  }
  try {
    check_verified(verify_checkpoint(fixture().directory));
  } catch (const Error& error) {
    fuzz::rejected(error);
  }
  return 0;
}
