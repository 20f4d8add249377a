// Reading a whole file into memory, gunzipping it transparently when it starts
// with the gzip magic (zlib). Used by the readers data/idx.cpp and
// data/csv.cpp; tests: tests/data/test_idx.cpp, tests/data/test_csv.cpp.
#pragma once

#include <string>

namespace ember::data {

struct FileBytes {
  std::string bytes;        // decompressed when the file is gzipped
  bool compressed = false;  // whether it was
};

// Throws ember::Error naming `op` and `path` when the file is missing, not a
// regular file, unreadable, or a corrupt or truncated gzip stream.
FileBytes read_file_bytes(const std::string& path, const char* op);

}  // namespace ember::data
