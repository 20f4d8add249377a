// Helpers for the data tests: a per-test scratch directory, and writing plain
// or gzipped (zlib) files, so that the readers are checked against bytes the
// tests lay out themselves.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/test_support.h"

namespace ember::testing {

// A fresh directory under the system temp dir, removed at the end of the test.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_gzip_file(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// `value`'s bytes, most significant first.
template <class T>
std::string big_endian(T value) {
  unsigned char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  std::string bytes;
  for (size_t i = 0; i < sizeof(T); ++i) bytes.push_back(char(raw[sizeof(T) - 1 - i]));
  return bytes;
}

}  // namespace ember::testing
