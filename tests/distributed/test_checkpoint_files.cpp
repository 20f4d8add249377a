// The file layer of checkpoints (distributed/checkpoint/): staging and
// commit, the `latest` pointer, automatic names and total_limit, the
// manifest's round trip and every verification error; then a saver process
// SIGKILLed at random moments, after which the latest checkpoint must still
// verify (Note [Atomic checkpoints]). Single-process tests: the Accelerator's
// own tests cover which rank writes what.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "core/ops/creation.h"
#include "core/safetensors.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "distributed/process_runner.h"
#include "support/test_support.h"

namespace ember::distributed::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Json = nlohmann::json;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every entry under `root` (files and directories), as sorted relative paths.
std::set<std::string> tree(const fs::path& root) {
  std::set<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    names.insert(entry.path().lexically_relative(root).generic_string());
  return names;
}

std::set<std::string> entries(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

// ---------------------------------------------------------------------------
// Staging and commit.

TEST(CheckpointDir, StagingIsAHiddenSiblingOfTheFinalDirectory) {
  EXPECT_EQ(staging_path("/runs/checkpoints/checkpoint_3"), fs::path("/runs/checkpoints/.checkpoint_3.staging"));
  EXPECT_EQ(staging_path("/runs/checkpoints/checkpoint_3/"), fs::path("/runs/checkpoints/.checkpoint_3.staging"));
  EXPECT_EQ(staging_path("relative"), fs::path(".relative.staging"));
  EXPECT_THROW(staging_path("/"), Error);
  EXPECT_THROW(staging_path("runs/.."), Error);
}

TEST(CheckpointDir, CommitMovesExactlyTheStagedFilesToTheFinalName) {
  testing::ScratchDirectory scratch;
  const fs::path final_dir = scratch.path() / "checkpoint_0";
  const fs::path staging = staging_path(final_dir);
  begin_staging(staging);
  write_text(staging / "model.safetensors", "weights");
  write_text(staging / "rng" / "rank0.json", "{}");
  commit(staging, final_dir);
  EXPECT_EQ(tree(final_dir), (std::set<std::string>{"model.safetensors", "rng", "rng/rank0.json"}));
  EXPECT_EQ(read_text(final_dir / "model.safetensors"), "weights");
  EXPECT_EQ(entries(scratch.path()), std::set<std::string>{"checkpoint_0"});
}

TEST(CheckpointDir, CommitOverAnExistingCheckpointReplacesItWhole) {
  testing::ScratchDirectory scratch;
  const fs::path final_dir = scratch.path() / "best";
  write_text(final_dir / "manifest.json", "{}");  // a checkpoint (check_replaceable)
  write_text(final_dir / "old_only.json", "old");
  write_text(final_dir / "model.safetensors", "old weights");
  const fs::path staging = staging_path(final_dir);
  begin_staging(staging);
  write_text(staging / "model.safetensors", "new weights");
  commit(staging, final_dir);
  EXPECT_EQ(tree(final_dir), std::set<std::string>{"model.safetensors"});
  EXPECT_EQ(read_text(final_dir / "model.safetensors"), "new weights");
  // Neither the staging directory nor the replaced checkpoint is left behind.
  EXPECT_EQ(entries(scratch.path()), std::set<std::string>{"best"});
}

TEST(CheckpointDir, BeginStagingClearsWhatAnInterruptedSaveLeft) {
  testing::ScratchDirectory scratch;
  const fs::path staging = staging_path(scratch.path() / "checkpoint_1");
  write_text(staging / "half_written.safetensors.tmp", "partial");
  begin_staging(staging);
  EXPECT_TRUE(fs::is_directory(staging));
  EXPECT_TRUE(fs::is_empty(staging));
}

TEST(CheckpointDir, CommitErrors) {
  testing::ScratchDirectory scratch;
  EXPECT_EMBER_ERROR(commit(scratch.path() / ".absent.staging", scratch.path() / "absent"),
                     "staging directory");
  const fs::path staging = staging_path(scratch.path() / "taken");
  begin_staging(staging);
  write_text(scratch.path() / "taken", "a file, not a checkpoint");
  EXPECT_EMBER_ERROR(commit(staging, scratch.path() / "taken"), "is not a directory");
  write_text(scratch.path() / "users" / "notes.txt", "not a checkpoint");
  EXPECT_EMBER_ERROR(commit(staging, scratch.path() / "users"), "holds files but is not a checkpoint");
  EXPECT_EQ(read_text(scratch.path() / "users" / "notes.txt"), "not a checkpoint");
  fs::create_symlink("/etc/passwd", staging / "link");
  EXPECT_EMBER_ERROR(commit(staging, scratch.path() / "fresh"), "neither a file nor a directory");
}

// A rename cannot cross file systems; commit says so rather than copying.
TEST(CheckpointDir, CommitAcrossFileSystemsIsAnError) {
  testing::ScratchDirectory scratch;
  struct stat shm {}, tmp {};
  if (::stat("/dev/shm", &shm) != 0 || ::stat(scratch.path().c_str(), &tmp) != 0 || shm.st_dev == tmp.st_dev)
    GTEST_SKIP() << "needs /dev/shm on another file system than " << scratch.path();
  const fs::path staging = fs::path("/dev/shm") / fmt::format(".ember_checkpoint_{}.staging", ::getpid());
  begin_staging(staging);
  write_text(staging / "model.safetensors", "weights");
  EXPECT_EMBER_ERROR(commit(staging, scratch.path() / "fresh"), "cannot rename");
  fs::create_directories(scratch.path() / "taken");
  EXPECT_EMBER_ERROR(commit(staging, scratch.path() / "taken"), "cannot exchange");
  fs::remove_all(staging);
}

// ---------------------------------------------------------------------------
// The `latest` pointer.

TEST(CheckpointDir, LatestRoundTrip) {
  testing::ScratchDirectory scratch;
  EXPECT_FALSE(latest(scratch.path()).has_value());
  fs::create_directories(scratch.path() / "checkpoint_0");
  fs::create_directories(scratch.path() / "checkpoint_1");
  set_latest(scratch.path(), "checkpoint_0");
  EXPECT_EQ(latest(scratch.path()), scratch.path() / "checkpoint_0");
  set_latest(scratch.path(), "checkpoint_1");
  EXPECT_EQ(latest(scratch.path()), scratch.path() / "checkpoint_1");
  EXPECT_EQ(read_text(scratch.path() / "latest"), "checkpoint_1");
  EXPECT_EQ(entries(scratch.path()), (std::set<std::string>{"checkpoint_0", "checkpoint_1", "latest"}));
  write_text(scratch.path() / "latest", "checkpoint_0\n");  // edited by hand
  EXPECT_EQ(latest(scratch.path()), scratch.path() / "checkpoint_0");
}

// What a save killed between creating `latest.tmp.*` and renaming it left is
// removed by the next set_latest; a link or directory of such a name is not
// a temporary of ours and stays. Mutation caught (run once, failed as
// expected): without remove_stray_temporaries the stray file stays forever.
TEST(CheckpointDir, SetLatestRemovesWhatACrashedSaveLeft) {
  testing::ScratchDirectory scratch;
  fs::create_directories(scratch.path() / "checkpoint_0");
  write_text(scratch.path() / "latest.tmp.a1b2c3", "checkpoint_");
  fs::create_directories(scratch.path() / "latest.tmp.kept");
  fs::create_symlink(scratch.path() / "checkpoint_0", scratch.path() / "latest.tmp.link");
  set_latest(scratch.path(), "checkpoint_0");
  EXPECT_EQ(entries(scratch.path()),
            (std::set<std::string>{"checkpoint_0", "latest", "latest.tmp.kept", "latest.tmp.link"}));
  EXPECT_EQ(latest(scratch.path()), scratch.path() / "checkpoint_0");
}

TEST(CheckpointDir, LatestErrors) {
  testing::ScratchDirectory scratch;
  fs::create_directories(scratch.path() / "checkpoint_0");
  for (const std::string name : {"../checkpoint_0", "a/b", "", ".", ".."})
    EXPECT_EMBER_ERROR(set_latest(scratch.path(), name), "is not a directory name");
  EXPECT_EMBER_ERROR(set_latest(scratch.path(), "checkpoint_9"), "is not a directory");
  const fs::path pointer = scratch.path() / "latest";
  write_text(pointer, "../../etc");
  EXPECT_EMBER_ERROR(latest(scratch.path()), "which is not a directory name");
  write_text(pointer, "");
  EXPECT_EMBER_ERROR(latest(scratch.path()), "which is not a directory name");
  write_text(pointer, "checkpoint_7");
  EXPECT_EMBER_ERROR(latest(scratch.path()), "names '" + (scratch.path() / "checkpoint_7").string());
  write_text(pointer, std::string(5000, 'c'));
  EXPECT_EMBER_ERROR(latest(scratch.path()), "has 5000 bytes");
  fs::remove(pointer);
  fs::create_directories(pointer);
  EXPECT_EMBER_ERROR(latest(scratch.path()), "is not a regular file");
}

// ---------------------------------------------------------------------------
// Automatic naming and total_limit.

TEST(CheckpointDir, NextCheckpointPathFollowsTheLargestNumberAndIgnoresForeignNames) {
  testing::ScratchDirectory scratch;
  EXPECT_EQ(next_checkpoint_path(scratch.path() / "absent"), scratch.path() / "absent" / "checkpoint_0");
  EXPECT_EQ(next_checkpoint_path(scratch.path()), scratch.path() / "checkpoint_0");
  for (const char* name : {"checkpoint_0", "checkpoint_2", "checkpoint_x", "checkpoint_010", "checkpoint_-3",
                           "checkpoint_", "checkpoint_99999999999999999999999", ".checkpoint_12.staging",
                           "my_checkpoint_20", "checkpoint_4.bak"})
    fs::create_directories(scratch.path() / name);
  write_text(scratch.path() / "checkpoint_7", "a file also takes the name");
  write_text(scratch.path() / "latest", "checkpoint_2");
  EXPECT_EQ(next_checkpoint_path(scratch.path()), scratch.path() / "checkpoint_8");
  fs::create_directories(scratch.path() / "checkpoint_9223372036854775807");
  EXPECT_EMBER_ERROR(next_checkpoint_path(scratch.path()), "has the largest number");
}

TEST(CheckpointDir, TotalLimitRemovesTheOldestButNeverLatestAndClearsStaging) {
  testing::ScratchDirectory scratch;
  for (int i = 0; i < 5; ++i) write_text(scratch.path() / fmt::format("checkpoint_{}", i) / "model.safetensors", "w");
  fs::create_directories(scratch.path() / ".checkpoint_5.staging");
  fs::create_directories(scratch.path() / ".best.old.staging");
  fs::create_directories(scratch.path() / "notes");
  write_text(scratch.path() / "checkpoint_9", "a file, not a checkpoint");
  set_latest(scratch.path(), "checkpoint_1");
  enforce_total_limit(scratch.path(), 2);
  EXPECT_EQ(entries(scratch.path()),
            (std::set<std::string>{"checkpoint_1", "checkpoint_4", "checkpoint_9", "latest", "notes"}));
  EXPECT_EMBER_ERROR(enforce_total_limit(scratch.path(), 0), "at least 1");
}

TEST(CheckpointDir, TotalLimitKeepsTheNewest) {
  testing::ScratchDirectory scratch;
  for (int i = 0; i < 4; ++i) fs::create_directories(scratch.path() / fmt::format("checkpoint_{}", i));
  set_latest(scratch.path(), "checkpoint_3");
  enforce_total_limit(scratch.path(), 3);
  EXPECT_EQ(entries(scratch.path()), (std::set<std::string>{"checkpoint_1", "checkpoint_2", "checkpoint_3", "latest"}));
  enforce_total_limit(scratch.path(), 1);
  EXPECT_EQ(entries(scratch.path()), (std::set<std::string>{"checkpoint_3", "latest"}));
}

// ---------------------------------------------------------------------------
// The manifest.

Tensor counting(const Shape& shape, DType dtype) {
  Tensor values = make_tensor(shape, DType::f64);
  double* data = values.data_ptr<double>();
  for (int64_t i = 0; i < values.numel(); ++i) data[i] = double(i % 5);
  return values.to(dtype);
}

// A checkpoint directory as the Accelerator writes one: tensors of every dtype
// in two safetensors files, JSON beside them, one in a subdirectory.
void write_checkpoint_files(const fs::path& directory) {
  save_safetensors(directory / "model.safetensors", {{"0.weight", counting({4, 3}, DType::f32)},
                                                     {"0.bias", counting({4}, DType::f32)},
                                                     {"norm.var", counting({3}, DType::f64)},
                                                     {"half", counting({2, 2}, DType::f16)},
                                                     {"brain", counting({5}, DType::bf16)},
                                                     {"count", counting({}, DType::i64)},
                                                     {"mask", counting({3}, DType::boolean)},
                                                     {"empty", counting({0, 4}, DType::f32)}});
  save_safetensors(directory / "optimizer.safetensors",
                   {{"0.weight.exp_avg", counting({4, 3}, DType::f32)}, {"step", counting({2}, DType::i32)}});
  write_text(directory / "abc.json", "abc");
  write_text(directory / "rng" / "rank0.json", R"({"seed": 1})");
}

TEST(Manifest, RoundTripsEveryFileAndEveryTensor) {
  testing::ScratchDirectory scratch;
  write_checkpoint_files(scratch.path());
  const ParamOf param_of = [](const std::string& file, const std::string& tensor) {
    return file == "optimizer.safetensors" && tensor == "0.weight.exp_avg" ? std::string("0.weight") : tensor;
  };
  const Manifest written = write_manifest(scratch.path(), 3, {{"step", 7}, {"mixed_precision", "bf16"}}, param_of);
  const Manifest read = read_manifest(scratch.path());
  const Manifest verified = verify_checkpoint(scratch.path(), 3);
  for (const Manifest* manifest : {&written, &read, &verified}) {
    EXPECT_EQ(manifest->world_size, 3);
    EXPECT_EQ(manifest->metadata, (Json{{"step", 7}, {"mixed_precision", "bf16"}}));
    std::vector<std::string> names;
    for (const ManifestFile& file : manifest->files) {
      names.push_back(file.name);
      EXPECT_EQ(file.size, fs::file_size(scratch.path() / file.name)) << file.name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"abc.json", "model.safetensors", "optimizer.safetensors",
                                               "rng/rank0.json"}));
    // SHA-256("abc"), FIPS 180-2's first example.
    EXPECT_EQ(manifest->find_file("abc.json")->sha256,
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(manifest->find_file("manifest.json"), nullptr);
    // Every tensor of every safetensors file, as its header says, in file order.
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const SafetensorsHeader header = read_safetensors_header(scratch.path() / file);
      const std::vector<const ManifestTensor*> tensors = manifest->tensors_of(file);
      ASSERT_EQ(tensors.size(), header.tensors.size()) << file;
      for (size_t i = 0; i < tensors.size(); ++i) {
        EXPECT_EQ(tensors[i]->name, header.tensors[i].name);
        EXPECT_EQ(tensors[i]->dtype, safetensors_dtype_name(header.tensors[i].dtype));
        EXPECT_EQ(tensors[i]->shape, header.tensors[i].shape);
        EXPECT_EQ(tensors[i]->offset, 0);
        EXPECT_EQ(tensors[i]->numel, header.tensors[i].shape.numel());
        EXPECT_EQ(tensors[i]->param, tensors[i]->name == "0.weight.exp_avg" ? "0.weight" : tensors[i]->name);
      }
    }
    std::set<std::string> dtypes;
    for (const ManifestTensor& tensor : manifest->tensors) dtypes.insert(tensor.dtype);
    EXPECT_EQ(dtypes, (std::set<std::string>{"F32", "F64", "F16", "BF16", "I32", "I64", "BOOL"}));
    EXPECT_EQ(manifest->tensors.size(), 10u);
  }
}

// A committed checkpoint and its manifest's JSON, to break in one way per case.
struct CheckpointFixture {
  testing::ScratchDirectory scratch;
  fs::path directory = scratch.path() / "checkpoint_3";
  Json manifest;
  CheckpointFixture() {
    fs::create_directories(directory);
    write_checkpoint_files(directory);
    write_manifest(directory, 2, Json::object());
    manifest = Json::parse(read_text(directory / kManifestName));
  }
  void write_manifest_json(const Json& json) const { write_text(directory / kManifestName, json.dump()); }
};

TEST(Manifest, VerifyNamesAMissingManifest) {
  CheckpointFixture fixture;
  fs::remove(fixture.directory / kManifestName);
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "there is no manifest.json");
}

TEST(Manifest, VerifyRefusesMalformedManifests) {
  CheckpointFixture fixture;
  struct Case {
    std::string what;
    std::function<void(Json&)> edit;
    std::string error;
  };
  const std::string hash(64, 'a');
  const std::vector<Case> cases = {
      {"array root", [](Json& m) { m = Json::array(); }, "not a JSON object"},
      {"no world_size", [](Json& m) { m.erase("world_size"); }, "has no 'world_size'"},
      {"string world_size", [](Json& m) { m["world_size"] = "2"; }, "world_size is \"2\", not a non-negative integer"},
      {"zero world_size", [](Json& m) { m["world_size"] = 0; }, "world_size is 0"},
      {"wrong format", [](Json& m) { m["format"] = "other"; }, "'format' is \"other\""},
      {"newer version", [](Json& m) { m["version"] = 2; }, "version 2 is not the version this ember reads"},
      {"unknown field", [](Json& m) { m["extra"] = 1; }, "unknown field 'extra'"},
      {"metadata not object", [](Json& m) { m["metadata"] = 3; }, "'metadata' is number"},
      {"files not object", [](Json& m) { m["files"] = Json::array(); }, "'files' is array"},
      {"negative size", [](Json& m) { m["files"]["abc.json"]["size"] = -3; }, "size is -3, which is negative"},
      {"fractional size", [](Json& m) { m["files"]["abc.json"]["size"] = 1.5; }, "not a non-negative integer"},
      {"huge size", [](Json& m) { m["files"]["abc.json"]["size"] = uint64_t(1) << 63; }, "which is too large"},
      {"no sha256", [](Json& m) { m["files"]["abc.json"].erase("sha256"); }, "has no 'sha256'"},
      {"non-hex sha256", [](Json& m) { m["files"]["abc.json"]["sha256"] = std::string(64, 'g'); },
       "not 64 lowercase hexadecimal digits"},
      {"upper-case sha256", [](Json& m) { m["files"]["abc.json"]["sha256"] = std::string(64, 'A'); },
       "not 64 lowercase hexadecimal digits"},
      {"short sha256", [](Json& m) { m["files"]["abc.json"]["sha256"] = "abc"; }, "not 64 lowercase"},
      {"parent path", [&](Json& m) { m["files"]["../outside"] = {{"size", 1}, {"sha256", hash}}; }, "inside the checkpoint"},
      {"absolute path", [&](Json& m) { m["files"]["/etc/passwd"] = {{"size", 1}, {"sha256", hash}}; },
       "inside the checkpoint"},
      {"empty component", [&](Json& m) { m["files"]["rng//rank0.json"] = {{"size", 1}, {"sha256", hash}}; },
       "inside the checkpoint"},
      {"empty name", [&](Json& m) { m["files"][""] = {{"size", 1}, {"sha256", hash}}; }, "inside the checkpoint"},
      {"lists itself", [&](Json& m) { m["files"]["manifest.json"] = {{"size", 1}, {"sha256", hash}}; },
       "cannot list itself"},
      {"tensors not array", [](Json& m) { m["tensors"] = Json::object(); }, "'tensors' is object"},
      {"tensor of an unlisted file", [](Json& m) { m["tensors"][0]["file"] = "other.safetensors"; },
       "is not among the manifest's files"},
      {"duplicate tensor", [](Json& m) { m["tensors"].push_back(m["tensors"][0]); }, "is listed twice"},
      {"unknown dtype", [](Json& m) { m["tensors"][0]["dtype"] = "U8"; }, "not a safetensors dtype"},
      {"shape of strings", [](Json& m) { m["tensors"][0]["shape"] = {"4"}; }, "not a non-negative 64-bit integer"},
      {"too many dims", [](Json& m) { m["tensors"][0]["shape"] = std::vector<int>(11, 1); }, "more than ember's 10"},
      {"shape overflow", [](Json& m) { m["tensors"][0]["shape"] = {int64_t(1) << 40, int64_t(1) << 40}; }, "overflows"},
      {"numel not the shape's", [](Json& m) { m["tensors"][0]["numel"] = 5; }, "numel 5 but shape"},
      {"negative offset", [](Json& m) { m["tensors"][0]["offset"] = -1; }, "which is negative"},
      {"offset overflow",
       [](Json& m) { m["tensors"][0]["offset"] = std::numeric_limits<int64_t>::max(); }, "overflows"},
      {"empty param", [](Json& m) { m["tensors"][0]["param"] = ""; }, "param is empty"},
      {"tensor field missing", [](Json& m) { m["tensors"][0].erase("numel"); }, "has no 'numel'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Json broken = fixture.manifest;
    c.edit(broken);
    fixture.write_manifest_json(broken);
    EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), c.error);
  }
  // Texts that are not one JSON object with unique keys.
  const std::string valid = fixture.manifest.dump();
  const std::string duplicate_file = R"("files": {"abc.json": {"size": 3, "sha256": ")" + hash +
                                     R"("}, "abc.json": {"size": 3, "sha256": ")" + hash + R"("}})";
  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"", "not valid JSON"},
           {valid.substr(0, valid.size() / 2), "not valid JSON"},
           {valid + "x", "not valid JSON"},
           {std::string(100000, '['), "not valid JSON"},
           {R"({"format": "ember-checkpoint", "version": 1, "world_size": 1, "metadata": {}, )" + duplicate_file +
                R"(, "tensors": []})",
            "the key 'abc.json' appears twice"}}) {
    write_text(fixture.directory / kManifestName, text);
    EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), error);
  }
}

// Mutation caught (run once, failed as expected): verify_checkpoint not
// comparing the SHA-256 (only the size) accepts the flipped bit.
TEST(Manifest, VerifyNamesTheFileThatIsMissingTruncatedOrChanged) {
  CheckpointFixture fixture;
  const std::string checkpoint = "checkpoint " + fixture.directory.string() + ": ";
  const fs::path optimizer = fixture.directory / "optimizer.safetensors";
  const std::string bytes = read_text(optimizer);
  fs::remove(optimizer);
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory),
                     checkpoint + fmt::format("optimizer.safetensors is missing (the manifest lists it with {} bytes)",
                                              bytes.size()));
  write_text(optimizer, bytes.substr(0, bytes.size() - 1));
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory),
                     checkpoint + fmt::format("optimizer.safetensors has {} bytes but the manifest says {}",
                                              bytes.size() - 1, bytes.size()));
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 1;
  write_text(optimizer, flipped);
  const std::string expected = fixture.manifest["files"]["optimizer.safetensors"]["sha256"];
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), checkpoint + "optimizer.safetensors has SHA-256 ");
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "but the manifest says " + expected);
  write_text(optimizer, bytes);
  EXPECT_NO_THROW(verify_checkpoint(fixture.directory));
}

TEST(Manifest, VerifyChecksTheWorldSize) {
  CheckpointFixture fixture;
  EXPECT_NO_THROW(verify_checkpoint(fixture.directory, 2));
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory, 4), "saved by 2 processes, but this job has 4");
}

// Decision: files the manifest does not list are allowed. load_state reads
// only listed files, so an extra one cannot change what is loaded, and users
// put their own files into checkpoint directories (a README, a config).
TEST(Manifest, VerifyAllowsFilesTheManifestDoesNotList) {
  CheckpointFixture fixture;
  write_text(fixture.directory / "notes.txt", "added by hand");
  const Manifest manifest = verify_checkpoint(fixture.directory);
  EXPECT_EQ(manifest.find_file("notes.txt"), nullptr);
}

TEST(Manifest, VerifyStaysInsideTheCheckpoint) {
  CheckpointFixture fixture;
  // A listed file replaced by a link to a file outside, with the right size and hash.
  const fs::path outside = fixture.scratch.path() / "outside.json";
  fs::copy_file(fixture.directory / "abc.json", outside);
  fs::remove(fixture.directory / "abc.json");
  fs::create_symlink(outside, fixture.directory / "abc.json");
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "abc.json leads through a symbolic link");
  fs::remove(fixture.directory / "abc.json");
  fs::copy_file(outside, fixture.directory / "abc.json");
  // A listed directory replaced by a link to a directory outside.
  fs::rename(fixture.directory / "rng", fixture.scratch.path() / "rng");
  fs::create_directory_symlink(fixture.scratch.path() / "rng", fixture.directory / "rng");
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "rng/rank0.json leads through a symbolic link");
}

TEST(Manifest, AFifoInPlaceOfTheManifestIsAnErrorNotAHang) {
  CheckpointFixture fixture;
  fs::remove(fixture.directory / kManifestName);
  ASSERT_EQ(::mkfifo((fixture.directory / kManifestName).c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "is not a regular file");
  fs::remove(fixture.directory / kManifestName);
  write_manifest(fixture.directory, 2, Json::object());
  fs::remove(fixture.directory / "abc.json");
  ASSERT_EQ(::mkfifo((fixture.directory / "abc.json").c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(verify_checkpoint(fixture.directory), "abc.json' is not a regular file: it is a FIFO");
}

// Mutation caught: reading a file by its path (as load_state did, with
// std::ifstream) instead of through read_listed_file reads the unlisted file
// and the one changed after verification; dropping the checksum of the bytes
// read (trusting verify_checkpoint's earlier pass) accepts the rewrite.
TEST(Manifest, ReadListedFileReadsOnlyListedFilesAndTheBytesItChecked) {
  CheckpointFixture fixture;
  const Manifest manifest = verify_checkpoint(fixture.directory);
  EXPECT_EQ(read_listed_file(fixture.directory, manifest, "abc.json"), read_text(fixture.directory / "abc.json"));
  write_text(fixture.directory / "scheduler.json", "{}");
  EXPECT_EMBER_ERROR(read_listed_file(fixture.directory, manifest, "scheduler.json"),
                     "scheduler.json is not among the files its manifest lists");
  // Rewritten in place after verification, same size: the checksum of what is read catches it.
  std::string text = read_text(fixture.directory / "abc.json");
  text[0] = text[0] == 'x' ? 'y' : 'x';
  write_text(fixture.directory / "abc.json", text);
  EXPECT_EMBER_ERROR(read_listed_file(fixture.directory, manifest, "abc.json"), "abc.json has SHA-256");
}

// Mutation caught: dropping O_NOFOLLOW from open_beneath lets the listed file
// that is a link to a copy outside be read (its size and checksum match).
TEST(Manifest, ReadListedFileNeverFollowsALinkOrBlocksOnAFifo) {
  CheckpointFixture fixture;
  const Manifest manifest = verify_checkpoint(fixture.directory);
  const fs::path outside = fixture.scratch.path() / "outside.json";
  fs::copy_file(fixture.directory / "abc.json", outside);
  fs::remove(fixture.directory / "abc.json");
  fs::create_symlink(outside, fixture.directory / "abc.json");
  EXPECT_EMBER_ERROR(read_listed_file(fixture.directory, manifest, "abc.json"), "abc.json leads through a symbolic link");
  fs::remove(fixture.directory / "abc.json");
  ASSERT_EQ(::mkfifo((fixture.directory / "abc.json").c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(read_listed_file(fixture.directory, manifest, "abc.json"), "it is a FIFO");
}

// Mutation caught: following links in latest() (read_small_file with
// Links::follow, or fs::is_directory instead of the symlink_status check) loads a
// checkpoint from outside the checkpoints directory.
TEST(CheckpointDir, LatestNeverLeadsOutsideThroughALink) {
  testing::ScratchDirectory scratch;
  const fs::path checkpoints = scratch.path() / "checkpoints";
  fs::create_directories(checkpoints / "checkpoint_0");
  fs::create_directories(scratch.path() / "elsewhere" / "checkpoint_9");
  fs::create_directory_symlink(scratch.path() / "elsewhere" / "checkpoint_9", checkpoints / "checkpoint_1");
  write_text(checkpoints / "latest", "checkpoint_1");
  EXPECT_EMBER_ERROR(latest(checkpoints), "which is a symbolic link");
  fs::remove(checkpoints / "latest");
  write_text(scratch.path() / "elsewhere" / "latest", "checkpoint_0");
  fs::create_symlink(scratch.path() / "elsewhere" / "latest", checkpoints / "latest");
  EXPECT_EMBER_ERROR(latest(checkpoints), "is a symbolic link, which is not followed");
  fs::remove(checkpoints / "latest");
  ASSERT_EQ(::mkfifo((checkpoints / "latest").c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(latest(checkpoints), "it is a FIFO");
  fs::remove(checkpoints / "latest");
  write_text(checkpoints / "latest", std::string("checkpoint_\x1b[31m", 16));
  try {
    latest(checkpoints);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()).find('\x1b'), std::string::npos) << "the name is shown escaped";
  }
}

// Mutation caught: without the flock (acquire returning at once) the second
// lock is granted and both "jobs" would save into one directory.
TEST(CheckpointDir, ASecondSaveLockIsRefusedNamingTheHolder) {
  testing::ScratchDirectory scratch;
  const fs::path lock_file = scratch.path() / "checkpoints" / ".lock";
  {
    SaveLock first = SaveLock::acquire(lock_file, "test");
    EXPECT_EMBER_ERROR(SaveLock::acquire(lock_file, "test"), fmt::format("locked by process {} on host", ::getpid()));
    // Another process (a second job) is refused too: flock is per open file, not per process.
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        SaveLock::acquire(lock_file, "test");
        ::_exit(1);
      } catch (const Error&) {
        ::_exit(0);
      }
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child got the lock the parent holds";
  }
  SaveLock again = SaveLock::acquire(lock_file, "test");  // released with the first
  EXPECT_EQ(again.path(), lock_file);
  // Never taken through a link.
  fs::create_symlink(scratch.path() / "elsewhere", scratch.path() / "link.lock");
  EXPECT_EMBER_ERROR(SaveLock::acquire(scratch.path() / "link.lock", "test"), "is a symbolic link");
}

TEST(Manifest, WriteErrors) {
  testing::ScratchDirectory scratch;
  EXPECT_EMBER_ERROR(write_manifest(scratch.path(), 0, Json::object()), "world_size must be at least 1");
  EXPECT_EMBER_ERROR(write_manifest(scratch.path(), 1, Json::array()), "metadata must be a JSON object");
  fs::create_symlink("/etc/passwd", scratch.path() / "link");
  EXPECT_EMBER_ERROR(write_manifest(scratch.path(), 1, Json::object()), "is not a regular file");
}

// ---------------------------------------------------------------------------
// Crash safety with real kills.

// The last phase marker the saver printed (workers/checkpoint_scenarios.cpp).
std::string last_phase(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "none";
  const size_t begin = output.rfind('\n', end);
  const std::string line = output.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin + 1));
  return line.starts_with("saved") ? "saved" : line;
}

// A saver process is SIGKILLed at a random moment of its saves, over and
// over, in the same directory. After every kill `latest` names a checkpoint
// that verifies, and so does every directory with a final name (the new
// `checkpoint_N`s, and `best`, replaced by exchange on every save): a kill
// leaves only staging directories incomplete, and the next saver clears them. Half
// the kills come 0-50 ms after the saver starts; the other half 0-3 ms after
// it announces a given phase, so that the short phases (commit, latest,
// total_limit) are hit too. The histogram of the phases hit is printed.
TEST(CheckpointCrash, AKillAtAnyMomentLeavesTheLatestCheckpointLoadable) {
  testing::ScratchDirectory scratch;
  const fs::path checkpoints = scratch.path() / "checkpoints";
  const std::vector<std::string> saver = {EMBER_WORKER, "checkpoint_saver", checkpoints.string(), "2"};
  {
    test::Process first(saver);
    ASSERT_TRUE(first.wait_for_output("saved", 20s)) << "the saver never finished a checkpoint";
  }
  const std::vector<std::string> phases = {"staging", "files",       "manifest",   "commit",
                                           "latest",  "total_limit", "best files", "best commit"};
  std::mt19937 random(12345);
  std::map<std::string, int> kills_by_phase;
  for (int iteration = 0; iteration < 48; ++iteration) {
    SCOPED_TRACE(fmt::format("kill {}", iteration));
    test::Process process(saver);
    ASSERT_TRUE(process.wait_for_output("ready\n", 10s));
    int max_delay_ms = 50;
    if (iteration % 2 == 1) {
      ASSERT_TRUE(process.wait_for_output(phases[size_t(iteration / 2) % phases.size()] + "\n", 10s));
      max_delay_ms = 3;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(
        std::uniform_int_distribution<int>(0, max_delay_ms * 1000)(random)));
    process.signal(SIGKILL);
    const test::ProcessResult result = process.wait(10s);
    ASSERT_EQ(result.signal, SIGKILL) << result.output;
    ++kills_by_phase[last_phase(result.output)];

    const std::optional<fs::path> newest = latest(checkpoints);
    ASSERT_TRUE(newest.has_value());
    EXPECT_NO_THROW(verify_checkpoint(*newest, 2)) << newest->string();
    for (const auto& entry : fs::directory_iterator(checkpoints)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("checkpoint_") && name != "best") continue;
      EXPECT_NO_THROW(verify_checkpoint(entry.path(), 2)) << name << " has a final name but is incomplete";
    }
  }
  for (const auto& [phase, count] : kills_by_phase) std::printf("killed after '%s': %d times\n", phase.c_str(), count);
}

}  // namespace
}  // namespace ember::distributed::checkpoint
