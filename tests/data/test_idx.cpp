// read_idx: round trips of every type code through files the test lays out
// byte by byte (plain and gzipped with zlib), dtype choices, and the
// malformed-file set with the path and byte offset in each message.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>

#include "data/file_helpers.h"
#include "support/test_support.h"

namespace ember::data {
namespace {

using ember::testing::big_endian;
using ember::testing::ScratchDirectory;
using ember::testing::write_file;
using ember::testing::write_gzip_file;

// An IDX file: magic (0, 0, type code, ndim), big-endian u32 sizes, then `data`.
std::string idx_bytes(unsigned char code, const std::vector<uint32_t>& sizes, const std::string& data) {
  std::string bytes = {0, 0, char(code), char(sizes.size())};
  for (uint32_t size : sizes) bytes += big_endian(size);
  return bytes + data;
}

template <class T>
std::string big_endian_values(const std::vector<T>& values) {
  std::string bytes;
  for (T value : values) bytes += big_endian(value);
  return bytes;
}

// Values of each type code: the extremes of the type, zero and a few others,
// 6 of them so the file can say [2, 3].
template <class T>
std::vector<T> sample_values() {
  if constexpr (std::is_floating_point_v<T>)
    return {T(0),
            T(-1.5),
            T(3.25),
            std::numeric_limits<T>::max(),
            std::numeric_limits<T>::lowest(),
            std::numeric_limits<T>::denorm_min()};
  else
    return {T(0), T(1), T(-1), std::numeric_limits<T>::max(), std::numeric_limits<T>::min(), T(42)};
}

template <class T>
void expect_round_trip(unsigned char code, DType natural, bool gzip) {
  ScratchDirectory directory;
  std::vector<T> values = sample_values<T>();
  std::string path = directory.file(gzip ? "values.idx.gz" : "values.idx");
  std::string bytes = idx_bytes(code, {2, 3}, big_endian_values(values));
  if (gzip)
    write_gzip_file(path, bytes);
  else
    write_file(path, bytes);

  Tensor t = read_idx(path);
  EXPECT_EQ(t.dtype(), natural);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  visit_dtype(natural, [&]<class N>() {
    std::vector<N> expected;
    for (T value : values) expected.push_back(N(value));
    EXPECT_EQ(t.to_vector<N>(), expected) << "type code " << int(code) << (gzip ? " gzipped" : "");
  });
  // Asking for f64 converts exactly for every type code.
  std::vector<double> as_double;
  for (T value : values) as_double.push_back(double(value));
  EXPECT_EQ(read_idx(path, {.dtype = DType::f64}).to_vector<double>(), as_double);
}

TEST(Idx, EveryTypeCodeRoundTripsPlainAndGzipped) {
  for (bool gzip : {false, true}) {
    expect_round_trip<uint8_t>(0x08, DType::i32, gzip);
    expect_round_trip<int8_t>(0x09, DType::i32, gzip);
    expect_round_trip<int16_t>(0x0B, DType::i32, gzip);
    expect_round_trip<int32_t>(0x0C, DType::i32, gzip);
    expect_round_trip<float>(0x0D, DType::f32, gzip);
    expect_round_trip<double>(0x0E, DType::f64, gzip);
  }
}

TEST(Idx, ByteOrderIsBigEndian) {
  // 0x0102 as i16 is 258 only when the first byte is the most significant.
  ScratchDirectory directory;
  write_file(directory.file("a.idx"), idx_bytes(0x0B, {1}, std::string{1, 2}));
  EXPECT_EQ(read_idx(directory.file("a.idx")).item<int32_t>(), 258);
}

TEST(Idx, ShapesOfOneToFourDimsAndEmptyDims) {
  ScratchDirectory directory;
  write_file(directory.file("a.idx"), idx_bytes(0x08, {5}, std::string(5, '\x07')));
  EXPECT_EQ(read_idx(directory.file("a.idx")).shape(), (Shape{5}));
  write_file(directory.file("b.idx"), idx_bytes(0x08, {2, 1, 3, 2}, std::string(12, '\x07')));
  EXPECT_EQ(read_idx(directory.file("b.idx")).shape(), (Shape{2, 1, 3, 2}));
  write_file(directory.file("c.idx"), idx_bytes(0x0D, {0, 28, 28}, ""));
  EXPECT_EQ(read_idx(directory.file("c.idx")).shape(), (Shape{0, 28, 28}));
}

TEST(Idx, DtypeOptionConvertsIntegersToAnyDtypeAndFloatsToFloatsOnly) {
  ScratchDirectory directory;
  std::string bytes_path = directory.file("bytes.idx");
  write_file(bytes_path, idx_bytes(0x08, {3}, std::string{0, char(128), char(255)}));
  EXPECT_EQ(read_idx(bytes_path, {.dtype = DType::f32}).to_vector<float>(), (std::vector<float>{0, 128, 255}));
  EXPECT_EQ(read_idx(bytes_path, {.dtype = DType::i64}).to_vector<int64_t>(), (std::vector<int64_t>{0, 128, 255}));
  EXPECT_EQ(read_idx(bytes_path, {.dtype = DType::boolean}).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  std::string floats_path = directory.file("floats.idx");
  write_file(floats_path, idx_bytes(0x0D, {1}, big_endian(std::nanf(""))));
  EXPECT_TRUE(std::isnan(read_idx(floats_path, {.dtype = DType::f64}).item<double>()));
  EXPECT_EMBER_ERROR(read_idx(floats_path, {.dtype = DType::i32}), "holds f32 data, which cannot be read as int32");
}

// The malformed set: each error names the path and the byte offset.
TEST(Idx, MalformedFilesGiveErrorsWithPathAndOffset) {
  ScratchDirectory directory;
  auto expect_error = [&](const std::string& name, const std::string& bytes, const std::string& fragment) {
    std::string path = directory.file(name);
    write_file(path, bytes);
    EXPECT_EMBER_ERROR(read_idx(path), fragment);
    EXPECT_EMBER_ERROR(read_idx(path), "read_idx: '" + path + "': at byte ");
  };
  expect_error("empty.idx", "", "at byte 0: truncated: the 4-byte magic number needs 4 more bytes");
  expect_error("short_magic.idx", std::string{0, 0, 8}, "at byte 3: truncated");
  std::string bad_magic = idx_bytes(0x08, {1}, "x");
  bad_magic[0] = '\x50';
  expect_error("bad_magic.idx", bad_magic, "at byte 0: bad magic number 50 00 08 01");
  expect_error("bad_type.idx", idx_bytes(0x07, {1}, "x"), "at byte 2: unknown type code 0x07");
  expect_error("many_dims.idx", idx_bytes(0x08, std::vector<uint32_t>(11, 1), "x"),
               "at byte 3: 11 dims, ember supports at most 10");
  expect_error("short_header.idx", idx_bytes(0x08, {1, 2, 3}, "").substr(0, 10),
               "at byte 10: truncated: the header of 3 dims needs 16 bytes, the file has 10");
  expect_error("truncated_data.idx", idx_bytes(0x0B, {2, 3}, std::string(11, '\0')),
               "at byte 23: truncated: shape [2, 3] of i16 needs 12 bytes of data from byte 12, the file has 11");
  expect_error("trailing.idx", idx_bytes(0x08, {2}, "abc"), "at byte 10: 1 bytes after the data of shape [2] of u8");
  // 2^60 elements: rejected from the header, before any allocation.
  expect_error("huge.idx", idx_bytes(0x08, {1u << 30, 1u << 30}, "tiny"),
               "needs 1152921504606846976 bytes of data from byte 12, the file has 4");
  expect_error("overflow.idx", idx_bytes(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, "x"),
               "at byte 4: sizes [4294967295, 4294967295, 4294967295] of f64 overflow 64 bits");
  // No elements (a zero size), but strides past 64 bits: found by tests/fuzz/idx.cpp (corpus/idx/regression_zero_dim_huge_strides).
  expect_error("zero_size_huge_strides.idx", idx_bytes(0x0B, {0, 0, 0x21000000u, 10, 0x80007FFFu}, ""),
               "at byte 4: sizes [0, 0, 553648128, 10, 2147516415] of i16 overflow 64 bits");
}

TEST(Idx, MalformedGzipAndUnreadablePaths) {
  ScratchDirectory directory;
  std::string whole = directory.file("whole.idx.gz");
  write_gzip_file(whole, idx_bytes(0x08, {100}, std::string(100, 'x')));
  std::ifstream in(whole, std::ios::binary);
  std::string compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::string truncated = directory.file("truncated.idx.gz");
  write_file(truncated, compressed.substr(0, compressed.size() - 6));
  EXPECT_EMBER_ERROR(read_idx(truncated), "read_idx: '" + truncated + "' is a corrupt or truncated gzip stream");

  std::string corrupt = directory.file("corrupt.idx.gz");
  std::string flipped = compressed;
  flipped[flipped.size() - 5] = char(flipped[flipped.size() - 5] ^ 0x55);  // in the CRC-32 trailer
  write_file(corrupt, flipped);
  EXPECT_EMBER_ERROR(read_idx(corrupt), "corrupt or truncated gzip stream");

  // A gzipped file whose header lies: the offset counts decompressed bytes.
  std::string lying = directory.file("lying.idx.gz");
  write_gzip_file(lying, idx_bytes(0x08, {10}, "abc"));
  EXPECT_EMBER_ERROR(read_idx(lying), "at byte 11 of the decompressed data: truncated");

  // Bytes after the gzip stream: zlib's gzread skipped them without a word,
  // while a plain file with bytes past its data is refused. A second gzip
  // member is gzip's own concatenation, read as `gzip -d` reads it. Mutation
  // caught: gunzip stopping at the first member's end -> the file with junk
  // reads as 100 bytes, and the concatenated one as its first member alone.
  std::string trailing = directory.file("trailing.idx.gz");
  write_file(trailing, compressed + "junk");
  EXPECT_EMBER_ERROR(read_idx(trailing), "read_idx: '" + trailing + "' has 4 bytes after the end of its gzip stream " +
                                             "(at byte " + std::to_string(compressed.size()) + " of the file)");
  std::string second_part = directory.file("second_part.gz");
  write_gzip_file(second_part, std::string(50, 'y'));
  std::ifstream second_in(second_part, std::ios::binary);
  std::string second((std::istreambuf_iterator<char>(second_in)), std::istreambuf_iterator<char>());
  std::string halves = directory.file("halves.idx.gz");
  write_gzip_file(halves, idx_bytes(0x08, {150}, std::string(100, 'x')));  // the header and the first 100 bytes
  std::ifstream halves_in(halves, std::ios::binary);
  std::string first((std::istreambuf_iterator<char>(halves_in)), std::istreambuf_iterator<char>());
  write_file(halves, first + second);
  Tensor joined = read_idx(halves);
  EXPECT_EQ(joined.shape(), (Shape{150}));
  EXPECT_EQ(joined.to(DType::i64).to_vector<int64_t>()[120], int64_t('y'));
  write_file(trailing, first + second + std::string(3, '\0'));  // tar's zero padding is no member either
  EXPECT_EMBER_ERROR(read_idx(trailing), "has 3 bytes after the end of its gzip stream");

  EXPECT_EMBER_ERROR(read_idx(directory.file("missing.idx")),
                     "read_idx: cannot open '" + directory.file("missing.idx") + "': no such file");
  EXPECT_EMBER_ERROR(read_idx(directory.file("")), "not a regular file");
}

}  // namespace
}  // namespace ember::data
