// nn::save / nn::load: a model written to a safetensors file and read back
// into a fresh one, and the errors for a file that does not fit the model.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

#include "core/file_io.h"

#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;

std::filesystem::path temporary_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / fmt::format("ember_nn_{}_{}.safetensors", name, getpid());
}

nn::Sequential small_cnn() {
  return nn::Sequential(nn::Conv2d(1, 4, 3), nn::BatchNorm2d(4), nn::ReLU(), nn::Flatten(), nn::Linear(4 * 6 * 6, 10));
}

// The module whose state dict is tests/data/safetensors/model.safetensors
// (make_safetensors_fixture.py's MODEL): an MLP, a norm's buffers, and one
// buffer of every other dtype, a 0-d and an empty one.
struct FixtureModel : nn::Module {
  FixtureModel() {
    register_module("layers", nn::Sequential(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)));
    auto norm = register_module("norm", std::make_shared<nn::Module>());
    norm->register_buffer("running_var", zeros({3}, {.dtype = DType::f64}));
    norm->register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
    auto extra = register_module("extra", std::make_shared<nn::Module>());
    extra->register_buffer("half", zeros({2, 3}, {.dtype = DType::f16}));
    extra->register_buffer("bfloat", zeros({5}, {.dtype = DType::bf16}));
    extra->register_buffer("int32", zeros({4}, {.dtype = DType::i32}));
    extra->register_buffer("int64", zeros({3}, {.dtype = DType::i64}));
    extra->register_buffer("mask", zeros({5}, {.dtype = DType::boolean}));
    extra->register_buffer("scale", zeros({}));
    extra->register_buffer("empty", zeros({0, 4}));
  }
};

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// The reference writer's file loads strictly into the model, and nn::save
// writes the model back byte for byte as the reference writer did.
TEST(Serialize, AKnownModelRoundTripsTheReferenceWritersFile) {
  const std::filesystem::path fixture = std::filesystem::path(EMBER_TEST_DATA_DIR) / "safetensors" / "model.safetensors";
  FixtureModel model;
  nn::LoadStateDictResult result = nn::load(model, fixture);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  // layers.2.bias is ((i % 7) - 3) / 9: -3/9, -2/9
  EXPECT_TRUE(all_close(model.state_dict()[3].second, from_vector<float>({-3.0f / 9, -2.0f / 9})));
  const std::filesystem::path path = temporary_path("fixture");
  nn::save(model, path);
  EXPECT_EQ(file_bytes(path), file_bytes(fixture));
  std::filesystem::remove(path);
}

TEST(Serialize, SaveThenLoadRestoresEveryTensor) {
  std::filesystem::path path = temporary_path("round_trip");
  nn::Sequential source = small_cnn();
  source(randn({2, 1, 8, 8}));  // moves the batch norm's running statistics off their initial values
  nn::save(source, path, {{"epoch", "3"}});
  SafetensorsContents contents = load_safetensors(path);
  EXPECT_EQ(contents.metadata.at("format"), "pt");
  EXPECT_EQ(contents.metadata.at("epoch"), "3");
  EXPECT_EQ(contents.tensors.size(), 9u);  // conv weight/bias, bn weight/bias/mean/var/count, linear weight/bias

  nn::Sequential target = small_cnn();
  Tensor held = target.at<nn::Linear>(4)->weight;
  nn::LoadStateDictResult result = nn::load(target, path);
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  NamedTensors expected = source.state_dict(), loaded = target.state_dict();
  ASSERT_EQ(expected.size(), loaded.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].first, loaded[i].first);
    EXPECT_TRUE(all_close(loaded[i].second, expected[i].second, 0, 0)) << loaded[i].first;
  }
  EXPECT_EQ(target.at<nn::BatchNorm2d>(1)->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(target.at<nn::Linear>(4)->weight.impl(), held.impl());
  std::filesystem::remove(path);
}

TEST(Serialize, LoadIntoTheWrongModelNamesThePathAndTheKeys) {
  std::filesystem::path path = temporary_path("wrong_model");
  nn::save(nn::Sequential(nn::Linear(3, 2)), path);
  nn::Sequential other(nn::Linear(3, 4), nn::Linear(4, 1));
  EXPECT_EMBER_ERROR(nn::load(other, path), path.string());
  EXPECT_EMBER_ERROR(nn::load(other, path), "size mismatch for 0.weight");
  EXPECT_EMBER_ERROR(nn::load(other, path), "Missing key(s) in state_dict: \"1.weight\", \"1.bias\".");
  nn::Sequential wider(nn::Linear(3, 2), nn::Linear(2, 1));
  nn::LoadStateDictResult result = nn::load(wider, path, /*strict=*/false);
  EXPECT_EQ(result.missing_keys, (std::vector<std::string>{"1.weight", "1.bias"}));
  EXPECT_EMBER_ERROR(nn::load(wider, temporary_path("absent")), "absent");
  std::filesystem::remove(path);
}

// Mutation caught: nn::load keeping the loaded tensors (and with them a
// mapping) alive past its return, e.g. a module taking the file's tensors
// instead of copying them. (Mapping during the load alone is not caught here:
// the mapping goes when the load returns.) Once nn::load returns, the file is
// in no mapping of this process and truncating it changes no parameter.
TEST(Serialize, LoadKeepsNothingOfTheFile) {
  testing::ScratchDirectory scratch;
  const std::filesystem::path path = scratch.path() / "model.safetensors";
  nn::Sequential source = small_cnn();
  nn::save(source, path);
  nn::Sequential target = small_cnn();
  nn::load(target, path);
  std::ifstream maps("/proc/self/maps");
  const std::string mapped{std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>()};
  EXPECT_EQ(mapped.find(std::filesystem::canonical(path).string()), std::string::npos);
  std::filesystem::resize_file(path, 0);
  NamedTensors expected = source.state_dict(), loaded = target.state_dict();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(all_close(loaded[i].second, expected[i].second, 0, 0));
}

// Mutation caught: nn::save through the old fixed `<path>.tmp`, opened with
// O_TRUNC and no O_EXCL | O_NOFOLLOW, writes the model into the planted
// link's target. (The temporary's name is random now; the test plants the
// link where the writer is told to look first.)
TEST(Serialize, SaveNeverWritesThroughAPlantedTemporaryLink) {
  testing::ScratchDirectory scratch;
  const std::filesystem::path outside = scratch.path() / "outside";
  { std::ofstream(outside) << "precious"; }
  const std::filesystem::path path = scratch.path() / "model.safetensors";
  std::filesystem::create_symlink(outside, path.string() + ".tmp");
  detail::set_temporary_names_for_testing(
      [](const std::string& target, int attempt) { return target + (attempt == 0 ? ".tmp" : ".tmp2"); });
  nn::save(small_cnn(), path);
  detail::set_temporary_names_for_testing(nullptr);
  EXPECT_EQ(file_bytes(outside), "precious");
  nn::Sequential target = small_cnn();
  EXPECT_TRUE(nn::load(target, path).missing_keys.empty());
}

// Mutation caught: printing unexpected keys raw in load_state_dict's listing
// puts the file's escape sequence into the message (byte 0x1b).
TEST(Serialize, NamesFromTheFileAreEscapedInTheErrorListing) {
  testing::ScratchDirectory scratch;
  const std::filesystem::path path = scratch.path() / "hostile.safetensors";
  save_safetensors(path, {{"0.weight\x1b]0;owned\x07", zeros({2, 3})}, {"0.weight", zeros({2, 3})}, {"0.bias", zeros({2})}});
  nn::Sequential model(nn::Linear(3, 2));
  try {
    nn::load(model, path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
    EXPECT_NE(message.find("\"0.weight\\x1b]0;owned\\x07\""), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ember
