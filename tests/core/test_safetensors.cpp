// safetensors I/O (core/safetensors.h): byte-exact agreement with files the
// reference Python writer produced (tests/data/make_safetensors_fixture.py),
// round trips, zero-copy loading and its copy-on-write, and a malformed-file
// set where every file must give an ember::Error naming the problem.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using ::ember::testing::layouts_of;
using ::ember::testing::random_tensor;

const fs::path kFixtures = fs::path(EMBER_TEST_DATA_DIR) / "safetensors";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A file: the 8-byte little-endian length of `header`, `header`, `data`.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t length) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((length >> (8 * i)) & 0xff);
  return bytes + header + data;
}
std::string file_bytes(const std::string& header, const std::string& data) {
  return file_bytes(header, data, header.size());
}

// The raw bytes of a tensor's elements in row-major order.
std::string bytes_of(const Tensor& tensor) {
  Tensor dense = tensor.contiguous();
  return std::string(static_cast<const char*>(dense.data_ptr()), size_t(dense.nbytes()));
}

// The value formula of make_safetensors_fixture.py: element i is
// ((i * multiplier) % modulus - shift) / divisor, divided in the tensor's own
// dtype; integers are multiplied by divisor instead; bool is "numerator odd".
struct Case {
  std::string name;
  Shape shape;
  DType dtype;
  int64_t multiplier, modulus, shift, divisor;
};

template <class T>
Tensor shaped(const std::vector<T>& values, const Shape& shape) {
  return from_vector(values, Shape{int64_t(values.size())}).reshape(shape);
}

Tensor formula(const Case& c) {
  std::vector<int64_t> numerators(size_t(c.shape.numel()));
  for (size_t i = 0; i < numerators.size(); ++i) numerators[i] = (int64_t(i) * c.multiplier) % c.modulus - c.shift;
  auto floats = [&]<class T>() {
    std::vector<T> values;
    for (int64_t n : numerators) values.push_back(T(ComputeType<T>(n) / ComputeType<T>(c.divisor)));
    return shaped(values, c.shape);
  };
  auto integers = [&]<class T>() {
    std::vector<T> values;
    for (int64_t n : numerators) values.push_back(T(n * c.divisor));
    return shaped(values, c.shape);
  };
  switch (c.dtype) {
    case DType::f32: return floats.operator()<float>();
    case DType::f64: return floats.operator()<double>();
    case DType::f16: return floats.operator()<Half>();
    case DType::bf16: return floats.operator()<BFloat16>();
    case DType::i32: return integers.operator()<int32_t>();
    case DType::i64: return integers.operator()<int64_t>();
    case DType::boolean: {
      std::vector<bool> values;
      for (int64_t n : numerators) values.push_back(((n % 2) + 2) % 2 == 1);
      return shaped(values, c.shape);
    }
  }
  return {};
}

// The MODEL table of the script, in the order a user would register them.
const std::vector<Case>& model_cases() {
  static const std::vector<Case> cases = {
      {"layers.0.weight", {4, 3}, DType::f32, 37, 101, 50, 7},
      {"layers.0.bias", {4}, DType::f32, 5, 11, 5, 3},
      {"layers.2.weight", {2, 4}, DType::f32, 53, 29, 14, 11},
      {"layers.2.bias", {2}, DType::f32, 1, 7, 3, 9},
      {"norm.running_var", {3}, DType::f64, 13, 17, 8, 3},
      {"norm.num_batches_tracked", {}, DType::i64, 1, 10, -7, 1},
      {"extra.half", {2, 3}, DType::f16, 7, 9, 4, 4},
      {"extra.bfloat", {5}, DType::bf16, 3, 13, 7, 8},
      {"extra.int32", {4}, DType::i32, 9, 23, 11, 100003},
      {"extra.int64", {3}, DType::i64, 11, 19, 9, 3000000007},
      {"extra.mask", {5}, DType::boolean, 3, 7, 0, 1},
      {"extra.scale", {}, DType::f32, 1, 5, -1, 2},
      {"extra.empty", {0, 4}, DType::f32, 1, 5, 0, 1},
  };
  return cases;
}

// The NAMES table: names that need JSON escaping or are not ASCII.
const std::vector<Case>& name_cases() {
  static const std::vector<Case> cases = {
      {"quote\"back\\slash", {2}, DType::f32, 3, 7, 2, 5},
      {"tab\tnew\nline\x01", {1}, DType::i32, 1, 5, 0, 1},
      {"caf\u00e9.\u2713", {3}, DType::f16, 5, 9, 4, 2},
  };
  return cases;
}

NamedTensors build(const std::vector<Case>& cases) {
  NamedTensors tensors;
  for (const Case& c : cases) tensors.emplace_back(c.name, formula(c));
  return tensors;
}

void expect_same_tensors(const NamedTensors& actual, const NamedTensors& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE(expected[i].first);
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_EQ(actual[i].second.dtype(), expected[i].second.dtype());
    EXPECT_EQ(actual[i].second.shape(), expected[i].second.shape());
    EXPECT_EQ(bytes_of(actual[i].second), bytes_of(expected[i].second));
  }
}

// `tensors` sorted as the reference writer orders a file: I64, F64, F32, I32,
// BF16, F16, BOOL, then by name.
NamedTensors in_writer_order(NamedTensors tensors) {
  auto rank = [](DType d) {
    const DType order[] = {DType::i64, DType::f64, DType::f32, DType::i32, DType::bf16, DType::f16, DType::boolean};
    return std::find(std::begin(order), std::end(order), d) - std::begin(order);
  };
  std::sort(tensors.begin(), tensors.end(), [&](const auto& a, const auto& b) {
    return std::pair(rank(a.second.dtype()), a.first) < std::pair(rank(b.second.dtype()), b.first);
  });
  return tensors;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() /
                 fmt::format("ember_safetensors_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }
  fs::path file(const std::string& name) const { return directory_ / name; }

  fs::path directory_;
};

using SafetensorsFixture = SafetensorsTest;
using SafetensorsRoundTrip = SafetensorsTest;
using SafetensorsMalformed = SafetensorsTest;

TEST_F(SafetensorsFixture, WritesTheReferenceWritersBytes) {
  for (const auto& [fixture, cases] : {std::pair{"model.safetensors", &model_cases()},
                                       std::pair{"names.safetensors", &name_cases()}}) {
    SCOPED_TRACE(fixture);
    const fs::path path = file(fixture);
    save_safetensors(path, build(*cases));
    EXPECT_EQ(read_bytes(path), read_bytes(kFixtures / fixture));
  }
}

TEST_F(SafetensorsFixture, ReadsEveryValueOfTheReferenceFile) {
  SafetensorsContents contents = load_safetensors(kFixtures / "model.safetensors");
  expect_same_tensors(contents.tensors, in_writer_order(build(model_cases())));
  EXPECT_EQ(contents.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  // Spot checks against values printed by the script's torch side, independent of formula().
  EXPECT_EQ(contents.tensors[1].first, "norm.num_batches_tracked");
  EXPECT_EQ(contents.tensors[1].second.item<int64_t>(), 7);
  EXPECT_EQ(contents.tensors[0].second.to_vector<int64_t>(),
            (std::vector<int64_t>{-27000000063, 6000000014, -18000000042}));
  EXPECT_EQ(contents.tensors.back().second.to_vector<bool>(), (std::vector<bool>{false, true, false, false, true}));

  expect_same_tensors(load_safetensors(kFixtures / "names.safetensors").tensors, in_writer_order(build(name_cases())));
}

TEST_F(SafetensorsFixture, ReadsReferenceMetadataAndFilesWithoutIt) {
  SafetensorsContents with = load_safetensors(kFixtures / "metadata.safetensors");
  EXPECT_EQ(with.metadata, (std::map<std::string, std::string>{
                               {"format", "pt"}, {"step", "1200"}, {"note", "line\nbreak \u00e9"}, {"empty", ""}}));
  expect_same_tensors(with.tensors, build({{"weight", {2, 2}, DType::f32, 3, 7, 3, 2}}));

  SafetensorsContents without = load_safetensors(kFixtures / "no_metadata.safetensors");
  EXPECT_TRUE(without.metadata.empty());
  expect_same_tensors(without.tensors, build({{"weight", {3}, DType::f64, 1, 4, 1, 2}}));
}

TEST_F(SafetensorsFixture, RejectsADTypeEmberDoesNotHaveByName) {
  const fs::path path = kFixtures / "uint8.safetensors";
  EXPECT_EMBER_ERROR(load_safetensors(path), "tensor 'bytes' has dtype U8, which ember does not support");
  EXPECT_EMBER_ERROR(load_safetensors(path), path.string());
}

TEST_F(SafetensorsFixture, ReadsTheHeaderAlone) {
  SafetensorsHeader header = read_safetensors_header(kFixtures / "model.safetensors");
  EXPECT_EQ(header.header_size, 928);  // the JSON padded to a multiple of 8 by the reference
  EXPECT_EQ(header.data_size, 207);
  EXPECT_EQ(header.data_start(), 936);
  EXPECT_EQ(header.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  NamedTensors expected = in_writer_order(build(model_cases()));
  ASSERT_EQ(header.tensors.size(), expected.size());
  int64_t offset = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const SafetensorsTensorInfo& info = header.tensors[i];
    EXPECT_EQ(info.name, expected[i].first);
    EXPECT_EQ(info.dtype, expected[i].second.dtype());
    EXPECT_EQ(info.shape, expected[i].second.shape());
    EXPECT_EQ(info.data_begin, offset);
    offset += expected[i].second.nbytes();
    EXPECT_EQ(info.data_end, offset);
  }
}

TEST_F(SafetensorsRoundTrip, EveryDTypeAndLayout) {
  NamedTensors tensors;
  for (DType dtype : kAllDTypes) {
    for (const auto& layout : layouts_of(random_tensor({3, 4}, dtype)))
      tensors.emplace_back(fmt::format("{}.{}", dtype, layout.name), layout.tensor);
    tensors.emplace_back(fmt::format("{}.scalar", dtype), random_tensor({}, dtype));
    tensors.emplace_back(fmt::format("{}.empty", dtype), random_tensor({2, 0, 3}, dtype));
  }
  const fs::path path = file("all.safetensors");
  save_safetensors(path, tensors, {{"step", "3"}});
  SafetensorsContents loaded = load_safetensors(path);
  expect_same_tensors(loaded.tensors, in_writer_order(tensors));
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "3"}}));
  for (const auto& named : loaded.tensors) EXPECT_TRUE(named.second.is_contiguous()) << named.first;
}

TEST_F(SafetensorsRoundTrip, AGivenFormatWinsAndNoTensorsIsAFile) {
  const fs::path path = file("empty.safetensors");
  save_safetensors(path, {}, {{"format", "ember"}});
  // {"__metadata__":{"format":"ember"}} is 35 bytes, padded to 40.
  EXPECT_EQ(read_bytes(path), file_bytes(R"({"__metadata__":{"format":"ember"}})" + std::string(5, ' '), ""));
  SafetensorsContents loaded = load_safetensors(path);
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_EQ(loaded.metadata.at("format"), "ember");
}

TEST_F(SafetensorsRoundTrip, AlignedTensorsViewTheFileWithoutCopying) {
  const fs::path fixture = kFixtures / "model.safetensors";
  SafetensorsHeader header = read_safetensors_header(fixture);
  SafetensorsContents contents = load_safetensors(fixture);
  // Views of one mapping sit as far apart in memory as in the file; copies would not.
  const char* first = static_cast<const char*>(contents.tensors[0].second.data_ptr());
  for (size_t i = 0; i < contents.tensors.size(); ++i) {
    if (contents.tensors[i].second.numel() == 0) continue;
    EXPECT_EQ(static_cast<const char*>(contents.tensors[i].second.data_ptr()) - first, header.tensors[i].data_begin)
        << contents.tensors[i].first;
  }
  // Each tensor has its own storage, so an in-place write to one does not bump the others' versions.
  EXPECT_NE(contents.tensors[2].second.storage(), contents.tensors[3].second.storage());
}

TEST_F(SafetensorsRoundTrip, MisalignedDataIsCopiedAndCorrect) {
  // A hand-made header of 12 bytes + 8 puts the data section at file offset 20:
  // f64 and i64 there are misaligned (20 % 8 = 4), f32 is aligned (20 % 4 = 0).
  const std::vector<double> f64_values = {1.5, -2.25, 1e300};
  const std::vector<float> f32_values = {3.5f, -0.125f};
  const std::vector<int64_t> i64_values = {-(int64_t(1) << 40), 77};
  std::string data(48, '\0');
  std::memcpy(data.data(), f64_values.data(), 24);
  std::memcpy(data.data() + 24, f32_values.data(), 8);
  std::memcpy(data.data() + 32, i64_values.data(), 16);
  std::string header = R"({"a":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
                       R"("c":{"dtype":"I64","shape":[2],"data_offsets":[32,48]}})";
  header.resize(header.size() + (8 - (8 + header.size()) % 8) % 8 + 4, ' ');
  ASSERT_EQ((8 + header.size()) % 8, 4u);
  const fs::path path = file("misaligned.safetensors");
  write_bytes(path, file_bytes(header, data));

  SafetensorsContents contents = load_safetensors(path);
  ASSERT_EQ(contents.tensors.size(), 3u);
  EXPECT_EQ(contents.tensors[0].second.to_vector<double>(), f64_values);
  EXPECT_EQ(contents.tensors[1].second.to_vector<float>(), f32_values);
  EXPECT_EQ(contents.tensors[2].second.to_vector<int64_t>(), i64_values);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(contents.tensors[0].second.data_ptr()) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(contents.tensors[2].second.data_ptr()) % 8, 0u);
  EXPECT_EQ(contents.tensors[1].second.data_ptr<float>()[1], -0.125f);
}

TEST_F(SafetensorsRoundTrip, WritingALoadedTensorLeavesTheFileAlone) {
  const fs::path path = file("model.safetensors");
  save_safetensors(path, build(model_cases()));
  const std::string before = read_bytes(path);
  {
    SafetensorsContents contents = load_safetensors(path);
    for (auto& named : contents.tensors) named.second.fill_(1);
    EXPECT_EQ(contents.tensors[2].second.to_vector<double>(), (std::vector<double>{1, 1, 1}));
    EXPECT_EQ(read_bytes(path), before);
  }
  EXPECT_EQ(read_bytes(path), before);
  expect_same_tensors(load_safetensors(path).tensors, in_writer_order(build(model_cases())));
}

TEST_F(SafetensorsRoundTrip, TensorsOutliveTheirContentsAndAnOverwrittenFile) {
  const fs::path path = file("weights.safetensors");
  const Tensor old_values = formula({"w", {64}, DType::f32, 7, 31, 15, 4});
  save_safetensors(path, {{"w", old_values}});
  Tensor loaded = load_safetensors(path).tensors.at(0).second;  // the contents struct is gone
  save_safetensors(path, {{"w", formula({"w", {64}, DType::f32, 3, 11, 5, 2})}});
  // The rename left the old inode mapped, so the view still reads the old values.
  EXPECT_EQ(bytes_of(loaded), bytes_of(old_values));
  EXPECT_NE(bytes_of(load_safetensors(path).tensors.at(0).second), bytes_of(old_values));
}

TEST_F(SafetensorsRoundTrip, SavingLeavesNoStagingFile) {
  const fs::path path = file("model.safetensors");
  save_safetensors(path, build(model_cases()));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(file("model.safetensors.tmp")));

  const fs::path missing = file("no_such_directory") / "model.safetensors";
  EXPECT_EMBER_ERROR(save_safetensors(missing, build(model_cases())),
                     "cannot write '" + missing.string() + "': the directory '" + file("no_such_directory").string() +
                         "' does not exist");
  EXPECT_FALSE(fs::exists(missing.string() + ".tmp"));
}

TEST_F(SafetensorsRoundTrip, SavingRejectsBadNames) {
  const fs::path path = file("bad.safetensors");
  Tensor t = zeros({2});
  EXPECT_EMBER_ERROR(save_safetensors(path, {{"a", t}, {"a", t}}), "the name 'a' is given twice");
  EXPECT_EMBER_ERROR(save_safetensors(path, {{"__metadata__", t}}), "'__metadata__' is reserved");
  EXPECT_EMBER_ERROR(save_safetensors(path, {{"bad\xff", t}}), "is not valid UTF-8");
  EXPECT_EMBER_ERROR(save_safetensors(path, {{"a", Tensor()}}), "tensor 'a' is undefined");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(file("bad.safetensors.tmp")));
}

// A tensor entry of the header.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype, shape, begin, end);
}

struct MalformedCase {
  std::string description;
  std::string bytes;
  std::string fragment;
};

std::vector<MalformedCase> malformed_cases() {
  const std::string f32x2 = entry("a", "F32", "[2]", 0, 8);
  const std::string eight(8, '\x11'), twelve(12, '\x22');
  auto header = [](const std::string& body) { return "{" + body + "}"; };
  auto with = [&](const std::string& body, const std::string& data) { return file_bytes(header(body), data); };
  return {
      {"empty file", "", "fewer than the 8-byte header length"},
      {"shorter than the length", std::string("\x08\x00\x00", 3), "fewer than the 8-byte header length"},
      {"truncated header", file_bytes(header(f32x2), eight, header(f32x2).size() + 100), "runs past the end of the file"},
      {"truncated data", with(f32x2, "\x01\x02\x03\x04"), "run past the end of the data section (4 bytes)"},
      {"huge header length", file_bytes("{}", "", ~uint64_t(0)), "exceeds the limit of 100000000 bytes"},
      {"header length just over the bound", file_bytes("{}", "", 100'000'001), "exceeds the limit"},
      {"header length 0", file_bytes("", eight), "the header length is 0"},
      {"invalid JSON", file_bytes(R"({"a":)", ""), "header is not valid JSON"},
      {"JSON with trailing garbage", file_bytes("{} x", ""), "header is not valid JSON"},
      {"NUL padding", file_bytes(std::string("{}\0\0", 4), ""), "the header has a NUL byte at offset 2"},
      {"not UTF-8", file_bytes("{\"\xff\":1}", ""), "header is not valid JSON"},
      {"not an object", file_bytes("[1,2]", ""), "does not start with '{'"},
      {"leading space", file_bytes(" {}", ""), "does not start with '{'"},
      {"entry not an object", with(R"("a":5)", ""), "entry 'a' is a number, not an object"},
      {"missing dtype", with(R"("a":{"shape":[2],"data_offsets":[0,8]})", eight), "tensor 'a' has no 'dtype'"},
      {"missing shape", with(R"("a":{"dtype":"F32","data_offsets":[0,8]})", eight), "tensor 'a' has no 'shape'"},
      {"missing offsets", with(R"("a":{"dtype":"F32","shape":[2]})", eight), "tensor 'a' has no 'data_offsets'"},
      {"dtype not a string", with(R"("a":{"dtype":4,"shape":[2],"data_offsets":[0,8]})", eight),
       "'dtype' is a number, not a string"},
      {"shape not an array", with(R"("a":{"dtype":"F32","shape":"2","data_offsets":[0,8]})", eight),
       "'shape' is a string, not an array"},
      {"shape an object", with(R"("a":{"dtype":"F32","shape":{},"data_offsets":[0,8]})", eight),
       "'shape' is an object, not an array"},
      {"negative dimension", with(entry("a", "F32", "[-2]", 0, 8), eight), "shape holds the negative number -2"},
      {"fractional dimension", with(entry("a", "F32", "[2.0]", 0, 8), eight), "not an unsigned 64-bit integer"},
      {"nested shape", with(entry("a", "F32", "[[2]]", 0, 8), eight), "shape holds an array"},
      {"one offset", with(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8]})", eight), "it has 1 number(s)"},
      {"three offsets", with(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})", eight),
       "it has more than 2 numbers"},
      {"begin after end", with(entry("a", "F32", "[0]", 8, 4), eight), "data_offsets [8, 4] begin after they end"},
      {"offsets past the end", with(entry("a", "F32", "[2]", 8, 16), eight), "run past the end of the data section"},
      {"offset past 2^64", with(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]})", eight),
       "not an unsigned 64-bit integer"},
      {"bad dtype", with(entry("a", "Q7", "[2]", 0, 8), eight), "has dtype Q7, which ember does not support"},
      {"shape/bytes mismatch", with(entry("a", "F32", "[3]", 0, 8), eight), "shape [3] of F32 needs 12 bytes"},
      {"shape product overflow", with(entry("a", "F32", "[4294967296,4294967296]", 0, 8), eight),
       "the product of shape [4294967296, 4294967296] overflows"},
      {"byte count overflow", with(entry("a", "F64", "[2305843009213693952]", 0, 8), eight), "overflows in bytes"},
      // No elements, but strides past 64 bits (the same fault tests/fuzz/idx.cpp found in the IDX reader).
      {"zero dim with huge strides", with(entry("a", "F32", "[0,4294967296,4294967296]", 0, 0), ""),
       "shape [0, 4294967296, 4294967296] is too large for ember: its strides overflow 64 bits"},
      {"too many dims", with(entry("a", "F32", "[1,1,1,1,1,1,1,1,1,1,2]", 0, 8), eight), "more than 10 dims"},
      {"overlapping offsets", with(f32x2 + "," + entry("b", "F32", "[2]", 4, 12), twelve),
       "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a', which ends at 8"},
      {"same offsets twice", with(f32x2 + "," + entry("b", "F32", "[2]", 0, 8), eight), "overlaps tensor"},
      {"gap between tensors", with(f32x2 + "," + entry("b", "F32", "[1]", 12, 16), std::string(16, 'x')),
       "data bytes [8, 12) belong to no tensor (a gap before tensor 'b')"},
      {"gap at the start", with(entry("a", "F32", "[1]", 4, 8), eight), "data bytes [0, 4) belong to no tensor"},
      {"trailing bytes", with(f32x2, twelve), "leaving 4 trailing bytes (the whole file must be covered)"},
      {"duplicate key", with(f32x2 + "," + f32x2, eight), "the header has the key 'a' twice"},
      {"duplicate field", with(R"("a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]})", eight),
       "tensor 'a' has the field 'dtype' twice"},
      {"duplicate metadata key", with(R"("__metadata__":{"k":"1","k":"2"},)" + f32x2, eight),
       "__metadata__ has the key 'k' twice"},
      {"non-string metadata", with(R"("__metadata__":{"step":1},)" + f32x2, eight),
       "__metadata__ value for 'step' is a number, not a string"},
      {"nested metadata", with(R"("__metadata__":{"step":{}},)" + f32x2, eight),
       "__metadata__ value for 'step' is an object"},
      {"metadata not an object", with(R"("__metadata__":"pt",)" + f32x2, eight),
       "__metadata__ is a string, not an object of strings"},
  };
}

TEST_F(SafetensorsMalformed, EachFileGivesAClearError) {
  for (const MalformedCase& c : malformed_cases()) {
    SCOPED_TRACE(c.description);
    const fs::path path = file("malformed.safetensors");
    write_bytes(path, c.bytes);
    EXPECT_EMBER_ERROR(load_safetensors(path), c.fragment);
    EXPECT_EMBER_ERROR(read_safetensors_header(path), c.fragment);
    EXPECT_EMBER_ERROR(load_safetensors(path), path.string());
  }
}

// A BOOL element is the byte 0 or 1. Catches: other bytes taken as they are
// (to f32 gave 2 and 255, logical_not 3 and 254, neither true nor false).
TEST_F(SafetensorsMalformed, BoolBytesOtherThanZeroOrOneAreAnError) {
  const fs::path path = file("bools.safetensors");
  write_bytes(path, file_bytes("{" + entry("b", "BOOL", "[4]", 0, 4) + "}", std::string("\x00\x01\x02\xff", 4)));
  for (bool mmap : {true, false})
    EXPECT_EMBER_ERROR(load_safetensors(path, {.mmap = mmap}),
                       "tensor 'b' is BOOL but element 2 is the byte 2; a BOOL element must be 0 or 1");
  EXPECT_EQ(read_safetensors_header(path).tensors.size(), 1u);
  write_bytes(path, file_bytes("{" + entry("b", "BOOL", "[4]", 0, 4) + "}", std::string("\x00\x01\x01\x00", 4)));
  EXPECT_EQ(load_safetensors(path).tensors[0].second.to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
}

// `"__metadata__": null` is no metadata, as the reference reads it (an
// Option) and Python writers emit it; it was refused. Mutation caught: null()
// without the __metadata__ case -> "__metadata__ is null".
TEST_F(SafetensorsMalformed, NullMetadataIsNone) {
  const fs::path path = file("null_metadata.safetensors");
  write_bytes(path, file_bytes(R"({"__metadata__":null,)" + entry("a", "F32", "[2]", 0, 8) + "}", std::string(8, '\0')));
  const SafetensorsContents contents = load_safetensors(path);
  EXPECT_TRUE(contents.metadata.empty());
  ASSERT_EQ(contents.tensors.size(), 1u);
  EXPECT_EQ(contents.tensors[0].second.to_vector<float>(), (std::vector<float>{0, 0}));
  // A null anywhere else is still refused.
  write_bytes(path, file_bytes(R"({"a":null})", ""));
  EXPECT_EMBER_ERROR(load_safetensors(path), "entry 'a' is null");
}

TEST_F(SafetensorsMalformed, PathsThatAreNoFile) {
  EXPECT_EMBER_ERROR(load_safetensors(file("absent.safetensors")), "cannot open");
  EXPECT_EMBER_ERROR(load_safetensors(directory_), "is not a regular file");
  EXPECT_EMBER_ERROR(read_safetensors_header(file("absent.safetensors")), "cannot open");
}

TEST_F(SafetensorsMalformed, UnknownEntryFieldsAreSkippedAsTheReferenceDoes) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  const std::string header =
      R"({"a":{"note":{"x":[1,"y",null]},"dtype":"F32","deep":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})";
  const fs::path path = file("extra_fields.safetensors");
  write_bytes(path, file_bytes(header, std::string("\x00\x00\x80\x3f", 4)));
  SafetensorsContents contents = load_safetensors(path);
  ASSERT_EQ(contents.tensors.size(), 1u);
  EXPECT_EQ(contents.tensors[0].second.to_vector<float>(), std::vector<float>{1.0f});
}

// Truncations of a valid file and random byte changes in its header:
// each load either succeeds or throws ember::Error, never anything else.
TEST_F(SafetensorsMalformed, TruncationsAndByteFlipsNeverCrash) {
  const std::string valid = read_bytes(kFixtures / "model.safetensors");
  const fs::path path = file("fuzz.safetensors");
  int errors = 0;
  auto attempt = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    try {
      load_safetensors(path);
    } catch (const Error&) {
      ++errors;
    }
  };
  int truncations = 0;
  for (size_t length = 0; length < valid.size(); length += length < 16 ? 1 : 11, ++truncations)
    attempt(valid.substr(0, length));
  EXPECT_EQ(errors, truncations);  // a file cut anywhere is incomplete
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes = valid;
    for (int flip = 0; flip < 1 + trial % 3; ++flip)
      bytes[rng() % 936] = char(rng() % 256);  // within the length and the JSON
    attempt(bytes);
  }
}

}  // namespace
}  // namespace ember
