// parse_byte_size, save_sharded and load_sharded: Hugging Face's sharded
// layout byte for byte against files its own libraries wrote
// (tests/data/make_sharded_fixture.py), round trips through a model, stale
// shards, and indexes that try to read the wrong files.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <cmath>
#include <csignal>
#include <iterator>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::all_close;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::set<std::string> entries(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

std::vector<std::string> file_names(const std::vector<fs::path>& paths) {
  std::vector<std::string> names;
  for (const fs::path& path : paths) names.push_back(path.filename().string());
  return names;
}

// ---------------------------------------------------------------------------
// parse_byte_size

TEST(ParseByteSize, ReadsHuggingFacesSizes) {
  EXPECT_EQ(nn::parse_byte_size("10GB"), 10'000'000'000);
  EXPECT_EQ(nn::parse_byte_size("500MB"), 500'000'000);
  EXPECT_EQ(nn::parse_byte_size("100KB"), 100'000);
  EXPECT_EQ(nn::parse_byte_size("2TB"), 2'000'000'000'000);
  EXPECT_EQ(nn::parse_byte_size("5GiB"), int64_t(5) << 30);
  EXPECT_EQ(nn::parse_byte_size("3MiB"), int64_t(3) << 20);
  EXPECT_EQ(nn::parse_byte_size("7kib"), 7 * 1024);
  EXPECT_EQ(nn::parse_byte_size("1TiB"), int64_t(1) << 40);
  EXPECT_EQ(nn::parse_byte_size("1024"), 1024);
  EXPECT_EQ(nn::parse_byte_size(" 2 mb "), 2'000'000);
  EXPECT_EQ(nn::parse_byte_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(nn::parse_byte_size("0.1KB"), 100);
  EXPECT_EQ(nn::parse_byte_size("0.0001KB"), 0);  // truncated, as huggingface_hub's int(value * unit)
  EXPECT_EQ(nn::parse_byte_size("1.25KiB"), 1280);
  EXPECT_EQ(nn::parse_byte_size("0"), 0);
  EXPECT_EQ(nn::parse_byte_size("9223372036854775807"), std::numeric_limits<int64_t>::max());
}

TEST(ParseByteSize, ErrorsNameTheText) {
  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"", "does not start with a number"},
           {"GB", "does not start with a number"},
           {"-5MB", "does not start with a number"},
           {"5XB", "has the unit 'XB'"},
           {"5 G", "has the unit 'G'"},
           {"5GB extra", "has the unit 'GB EXTRA'"},
           {"1.5", "is a fraction of a byte"},
           {"1.GB", "needs 1 to 6 digits after the point"},
           {"1.1234567GB", "needs 1 to 6 digits after the point"},
           {"9223372036854775808", "is too large"},
           {"99999999999999999999999", "is too large"},
           {"9000000000TB", "more bytes than 64 bits hold"},
           {"9223372036854775807.5KB", "more bytes than 64 bits hold"}}) {
    EXPECT_EMBER_ERROR(nn::parse_byte_size(text), "parse_byte_size: '" + text + "'");
    EXPECT_EMBER_ERROR(nn::parse_byte_size(text), fragment);
  }
}

// ---------------------------------------------------------------------------
// The golden layout: make_sharded_fixture.py's STATE, saved by ember.

// Element i (row-major) is (i * 7) % 11 - 5, divided by 4 for floats (in the
// float dtype, exact); for bool, whether it is odd (the script's `values`).
Tensor fixture_values(DType dtype, const Shape& shape) {
  Tensor numbers = make_tensor(shape, DType::f64);
  double* data = numbers.data_ptr<double>();
  for (int64_t i = 0; i < numbers.numel(); ++i) data[i] = double((i * 7) % 11 - 5);
  if (dtype == DType::boolean) {
    for (int64_t i = 0; i < numbers.numel(); ++i) data[i] = std::fmod(data[i], 2.0) != 0 ? 1 : 0;
    return numbers.to(dtype);
  }
  if (is_floating(dtype)) return div(numbers.to(dtype), Scalar(4.0));
  return numbers.to(dtype);
}

NamedTensors fixture_state() {
  return {{"embed.weight", fixture_values(DType::f32, {8, 4})},
          {"layers.0.weight", fixture_values(DType::f32, {4, 4})},
          {"layers.0.bias", fixture_values(DType::f32, {4})},
          {"big", fixture_values(DType::f32, {64})},
          {"layers.1.weight", fixture_values(DType::f16, {4, 4})},
          {"layers.1.bias", fixture_values(DType::f16, {4})},
          {"norm.weight", fixture_values(DType::f64, {4})},
          {"steps", fixture_values(DType::i64, {})},
          {"\u00fcn\u00efcode.weight", fixture_values(DType::f32, {2})},
          {"tab\tname", fixture_values(DType::i32, {3})},
          {"Zeta", fixture_values(DType::boolean, {5})}};
}

const fs::path kFixtures = fs::path(EMBER_TEST_DATA_DIR) / "sharded";

// Every file equals what huggingface_hub's split, the reference writer and
// transformers' index line produced: names, the shard a tensor lands in (the
// 256-byte "big" in a shard of its own ahead of the one being filled), the
// index's sorting, indentation, escapes and final newline.
TEST(SaveSharded, WritesHuggingFacesLayoutByteForByte) {
  testing::ScratchDirectory scratch;
  const std::vector<fs::path> written = nn::save_sharded(fixture_state(), scratch.path(), 200);
  EXPECT_EQ(file_names(written),
            (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_EQ(entries(scratch.path()), entries(kFixtures / "three_shards"));
  for (const std::string& name : entries(kFixtures / "three_shards"))
    EXPECT_EQ(read_text(scratch.path() / name), read_text(kFixtures / "three_shards" / name)) << name;
}

TEST(SaveSharded, WritesOneFileWhenTheStateFits) {
  testing::ScratchDirectory scratch;
  const std::vector<fs::path> written = nn::save_sharded(fixture_state(), scratch.path(), nn::parse_byte_size("1MB"));
  EXPECT_EQ(file_names(written), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(entries(scratch.path()), std::set<std::string>{"model.safetensors"});
  EXPECT_EQ(read_text(scratch.path() / "model.safetensors"), read_text(kFixtures / "one_file" / "model.safetensors"));
}

TEST(SaveSharded, Errors) {
  testing::ScratchDirectory scratch;
  EXPECT_EMBER_ERROR(nn::save_sharded(fixture_state(), scratch.path(), 0), "max_shard_size must be positive, got 0");
  EXPECT_EMBER_ERROR(nn::save_sharded({{"a", zeros({2})}, {"a", zeros({3})}}, scratch.path(), 100),
                     "the tensor name 'a' is given twice");
  EXPECT_TRUE(fs::is_empty(scratch.path()));
}

// ---------------------------------------------------------------------------
// Through a model.

// Three layers whose tensors (256, 64, 512, 32, 128, 16 bytes) split at 400
// bytes into [1.weight], [0.weight, 0.bias, 1.bias], [2.weight, 2.bias].
nn::Sequential three_layers() { return nn::Sequential(nn::Linear(4, 16), nn::Linear(16, 8), nn::Linear(8, 4)); }
constexpr int64_t kThreeShardLimit = 400;

void expect_same_state(const nn::Module& actual, const nn::Module& expected) {
  const NamedTensors actual_state = actual.state_dict(), expected_state = expected.state_dict();
  ASSERT_EQ(actual_state.size(), expected_state.size());
  for (size_t i = 0; i < actual_state.size(); ++i) {
    EXPECT_EQ(actual_state[i].first, expected_state[i].first);
    EXPECT_TRUE(all_close(actual_state[i].second, expected_state[i].second, 0, 0)) << actual_state[i].first;
  }
}

TEST(LoadSharded, ThreeShardsLoadStrictlyIntoAFreshModel) {
  testing::ScratchDirectory scratch;
  nn::Sequential model = three_layers();
  const std::vector<fs::path> written = nn::save_sharded(model.state_dict(), scratch.path(), kThreeShardLimit);
  ASSERT_EQ(written.size(), 4u);
  const Json index = Json::parse(read_text(scratch.path() / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 256 + 64 + 512 + 32 + 128 + 16);
  EXPECT_EQ(index["weight_map"], (Json{{"1.weight", "model-00001-of-00003.safetensors"},
                                       {"0.weight", "model-00002-of-00003.safetensors"},
                                       {"0.bias", "model-00002-of-00003.safetensors"},
                                       {"1.bias", "model-00002-of-00003.safetensors"},
                                       {"2.weight", "model-00003-of-00003.safetensors"},
                                       {"2.bias", "model-00003-of-00003.safetensors"}}));
  // Each tensor is in exactly the shard the index names, and in no other.
  std::multiset<std::string> seen;
  for (int shard = 0; shard < 3; ++shard) {
    const fs::path path = written[size_t(shard)];
    for (const SafetensorsTensorInfo& info : read_safetensors_header(path).tensors) {
      seen.insert(info.name);
      EXPECT_EQ(index["weight_map"][info.name], path.filename().string());
    }
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"}));

  nn::Sequential fresh = three_layers();
  const nn::LoadStateDictResult result = nn::load_sharded(fresh, scratch.path());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  expect_same_state(fresh, model);
}

TEST(LoadSharded, OneFileLoadsToo) {
  testing::ScratchDirectory scratch;
  nn::Sequential model = three_layers();
  nn::save_sharded(model.state_dict(), scratch.path(), nn::parse_byte_size("10GB"));
  nn::Sequential fresh = three_layers();
  nn::load_sharded(fresh, scratch.path());
  expect_same_state(fresh, model);
}

TEST(LoadSharded, NonStrictReportsMissingAndUnexpectedKeys) {
  testing::ScratchDirectory scratch;
  nn::Sequential model = three_layers();
  NamedTensors state = model.state_dict();
  state.erase(state.begin() + 1);  // 0.bias
  state.emplace_back("head.weight", zeros({2}));
  nn::save_sharded(state, scratch.path(), kThreeShardLimit);
  nn::Sequential fresh = three_layers();
  EXPECT_EMBER_ERROR(nn::load_sharded(fresh, scratch.path()), "0.bias");
  const nn::LoadStateDictResult result = nn::load_sharded(fresh, scratch.path(), false);
  EXPECT_EQ(result.missing_keys, std::vector<std::string>{"0.bias"});
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"head.weight"});
  EXPECT_TRUE(all_close(fresh.state_dict()[2].second, model.state_dict()[2].second, 0, 0));
}

TEST(SaveSharded, ASaveWithFewerShardsRemovesTheStaleOnes) {
  testing::ScratchDirectory scratch;
  nn::Sequential model = three_layers();
  write_text(scratch.path() / "config.json", "{}");
  write_text(scratch.path() / "model-00001-of-00003.safetensors.bak", "a user's copy");
  nn::save_sharded(model.state_dict(), scratch.path(), kThreeShardLimit);
  nn::save_sharded(model.state_dict(), scratch.path(), 700);  // two shards now
  EXPECT_EQ(entries(scratch.path()),
            (std::set<std::string>{"config.json", "model-00001-of-00003.safetensors.bak",
                                   "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                   "model.safetensors.index.json"}));
  nn::save_sharded(model.state_dict(), scratch.path(), nn::parse_byte_size("1MB"));
  EXPECT_EQ(entries(scratch.path()),
            (std::set<std::string>{"config.json", "model-00001-of-00003.safetensors.bak", "model.safetensors"}));
  nn::save_sharded(model.state_dict(), scratch.path(), kThreeShardLimit);
  EXPECT_FALSE(fs::exists(scratch.path() / "model.safetensors"));
  nn::Sequential fresh = three_layers();
  nn::load_sharded(fresh, scratch.path());
  expect_same_state(fresh, model);
}

// A save that fails between two shards (a full disk; here a file-size limit
// in a child process) leaves a directory load_sharded refuses, never shards
// of two saves under one index. Catches: the entry points left in place until
// the end (the old index then loaded the new first shard with the old others,
// without a word).
TEST(SaveSharded, ASaveThatFailsMidwayLeavesNothingLoadable) {
  testing::ScratchDirectory scratch;
  // Weights of 300 and 388 bytes (and a bias each): a shard, then a larger one.
  auto small_then_large = [] { return nn::Sequential(nn::Linear(75, 1), nn::Linear(97, 1)); };
  nn::Sequential model = small_then_large();
  const std::vector<fs::path> first = nn::save_sharded(model.state_dict(), scratch.path(), kThreeShardLimit);
  ASSERT_GE(first.size(), 3u);  // two shards or more, and the index
  const auto shard_size = [&](size_t i) { return fs::file_size(first[i]); };
  ASSERT_LT(shard_size(0), shard_size(1));  // the limit stops the second shard
  NamedTensors changed;
  for (const auto& [name, tensor] : model.state_dict()) changed.emplace_back(name, tensor + 1.0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{shard_size(0), shard_size(0)};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      nn::save_sharded(changed, scratch.path(), kThreeShardLimit);
    } catch (const Error&) {
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);  // the save failed
  nn::Sequential target = small_then_large();
  EXPECT_EMBER_ERROR(nn::load_sharded(target, scratch.path()),
                     "holds neither model.safetensors nor model.safetensors.index.json");
}

// An index that is a link (to a copy elsewhere) is refused before any shard
// is written. Catches: skipping it when clearing the entry points (the save
// then failed at its very end, leaving the link's index over new shards: a
// mix that loaded without a word).
TEST(SaveSharded, AnIndexThatIsALinkIsRefusedBeforeAnyShardIsWritten) {
  testing::ScratchDirectory scratch;
  const fs::path directory = scratch.path() / "model";
  nn::Sequential model = three_layers();
  const std::vector<fs::path> first = nn::save_sharded(model.state_dict(), directory, kThreeShardLimit);
  fs::rename(directory / "model.safetensors.index.json", scratch.path() / "index.json");
  fs::create_symlink(scratch.path() / "index.json", directory / "model.safetensors.index.json");
  const std::string shard_before = read_text(first[0]);
  NamedTensors changed;
  for (const auto& [name, tensor] : model.state_dict()) changed.emplace_back(name, tensor + 1.0);
  EXPECT_EMBER_ERROR(nn::save_sharded(changed, directory, kThreeShardLimit),
                     "model.safetensors.index.json' is not a regular file (a link, a directory, ...)");
  EXPECT_EQ(read_text(first[0]), shard_before);
}

// ---------------------------------------------------------------------------
// Hostile indexes: each rejected with an error naming the entry, and the
// model left as it was.

struct ShardedFixture {
  testing::ScratchDirectory scratch;
  nn::Sequential model = three_layers();
  fs::path index_path = scratch.path() / "model.safetensors.index.json";
  Json index;
  ShardedFixture() {
    nn::save_sharded(model.state_dict(), scratch.path(), kThreeShardLimit);
    index = Json::parse(read_text(index_path));
  }
  // load_sharded fails with `fragment`, and the model it loaded into is unchanged.
  void expect_refused(const std::string& fragment) {
    nn::Sequential target = three_layers();
    const NamedTensors before = target.state_dict();
    std::vector<Tensor> copies;
    for (const auto& [name, tensor] : before) copies.push_back(tensor.clone());
    EXPECT_EMBER_ERROR(nn::load_sharded(target, scratch.path()), fragment);
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(all_close(before[i].second, copies[i], 0, 0));
  }
};

// Mutation caught (run once, failed as expected): without the plain-name
// check in load_sharded's index reader, '../x' and '/etc/passwd' are opened
// as shards (the errors are then about their contents, not their names).
TEST(LoadSharded, RefusesWeightMapEntriesOutsideTheDirectory) {
  ShardedFixture fixture;
  write_text(fixture.scratch.path().parent_path() / "x", "outside");
  for (const std::string file : {"../x", "/etc/passwd", "a/b", "", ".", "..", "..\\x",
                                 "sub\\model-00002-of-00003.safetensors", "\\etc\\passwd"}) {
    SCOPED_TRACE(file);
    Json index = fixture.index;
    index["weight_map"]["0.bias"] = file;
    write_text(fixture.index_path, index.dump());
    fixture.expect_refused("weight_map entry '0.bias' names the file '" + file +
                           "', which is not a plain file name in the directory");
  }
  // The name of a real shard, then a NUL: a C API would open that shard. The
  // message shows the NUL, which would otherwise end it.
  Json index = fixture.index;
  index["weight_map"]["0.bias"] = std::string("model-00002-of-00003.safetensors\0", 33);
  write_text(fixture.index_path, index.dump());
  fixture.expect_refused("weight_map entry '0.bias' names the file 'model-00002-of-00003.safetensors\\0', which is not "
                         "a plain file name in the directory");
  fs::remove(fixture.scratch.path().parent_path() / "x");
}

TEST(LoadSharded, RefusesIndexesThatDisagreeWithTheShards) {
  ShardedFixture fixture;
  const auto with_index = [&](const std::function<void(Json&)>& edit) {
    Json index = fixture.index;
    edit(index);
    write_text(fixture.index_path, index.dump());
  };
  with_index([](Json& index) { index["weight_map"]["0.bias"] = "model-00007-of-00009.safetensors"; });
  fixture.expect_refused("weight_map entry '0.bias' names the shard 'model-00007-of-00009.safetensors', which is not "
                         "a file in");
  // A name longer than the file system allows (found by tests/fuzz/sharded_index.cpp: the check threw
  // std::filesystem::filesystem_error, which no caller expects).
  with_index([](Json& index) { index["weight_map"]["0.bias"] = std::string(300, 'a'); });
  fixture.expect_refused("(300 bytes)', which is not a file in");
  // 0.bias is in shard 2; the index says shard 3.
  with_index([](Json& index) { index["weight_map"]["0.bias"] = "model-00003-of-00003.safetensors"; });
  fixture.expect_refused("shard 'model-00002-of-00003.safetensors' holds tensor '0.bias', which the index puts in "
                         "'model-00003-of-00003.safetensors'");
  // The index names a tensor the shard does not hold.
  with_index([](Json& index) { index["weight_map"]["3.weight"] = "model-00003-of-00003.safetensors"; });
  fixture.expect_refused("shard 'model-00003-of-00003.safetensors' does not hold tensor '3.weight'");
  // A shard holds a tensor the index does not list.
  with_index([](Json& index) { index["weight_map"].erase("2.bias"); });
  fixture.expect_refused("shard 'model-00003-of-00003.safetensors' holds tensor '2.bias', which the index does not "
                         "list");
  // A tensor named twice (nlohmann alone would keep the last).
  std::string text = fixture.index.dump();
  text.insert(text.find("\"weight_map\":{") + 14, "\"2.bias\":\"model-00001-of-00003.safetensors\",");
  write_text(fixture.index_path, text);
  fixture.expect_refused("the key '2.bias' appears twice");
}

TEST(LoadSharded, RefusesMalformedIndexes) {
  ShardedFixture fixture;
  const std::string valid = fixture.index.dump();
  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"", "not valid JSON"},
           {valid.substr(0, valid.size() - 2), "not valid JSON"},
           {std::string(50000, '{'), "not valid JSON"},
           {"[]", "the index is array, not a JSON object"},
           {R"({"metadata": {}})", "the index has no 'weight_map'"},
           {R"({"weight_map": []})", "'weight_map' is array"},
           {R"({"weight_map": {"0.bias": 3}})", "weight_map entry '0.bias' is number, not a file name"},
           {R"({"metadata": [], "weight_map": {}})", "'metadata' is array"},
           // The lexer stopped at a NUL: what followed was never read. Mutation
           // caught: parse_json_strictly without its NUL check.
           {valid + std::string(1, '\0') + "junk", "not valid JSON: a NUL byte at offset"},
       }) {
    SCOPED_TRACE(text.substr(0, 40));
    write_text(fixture.index_path, text);
    fixture.expect_refused(fragment);
  }
}

// Indexes Hugging Face's Python loaders read: a total_size that is not an
// integer (they never read it), and shard names with a leading "./" (which
// os.path.join resolves). Both refused the whole load before. Mutation
// caught: the "./" prefix kept -> "not a plain file name".
TEST(LoadSharded, ReadsIndexesHuggingFacesLoadersRead) {
  ShardedFixture fixture;
  Json index = fixture.index;
  index["metadata"]["total_size"] = 60.5;
  for (auto& [tensor, file] : index["weight_map"].items()) file = "./" + file.get<std::string>();
  write_text(fixture.index_path, index.dump());
  nn::Sequential target = three_layers();
  const nn::LoadStateDictResult result = nn::load_sharded(target, fixture.scratch.path());
  EXPECT_TRUE(result.missing_keys.empty());
  const NamedTensors loaded = target.state_dict(), saved = fixture.model.state_dict();
  for (size_t i = 0; i < saved.size(); ++i) EXPECT_TRUE(all_close(loaded[i].second, saved[i].second, 0, 0));
}

TEST(LoadSharded, RefusesADirectoryWithBothLayoutsOrNeither) {
  ShardedFixture fixture;
  write_text(fixture.scratch.path() / "model.safetensors", "");
  fixture.expect_refused("holds both model.safetensors and model.safetensors.index.json");
  fs::remove(fixture.scratch.path() / "model.safetensors");
  fs::remove(fixture.index_path);
  fixture.expect_refused("holds neither model.safetensors nor model.safetensors.index.json");
  nn::Sequential target = three_layers();
  EXPECT_EMBER_ERROR(nn::load_sharded(target, fixture.scratch.path() / "absent"), "is not a directory");
}

}  // namespace
}  // namespace ember
