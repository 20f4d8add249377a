// read_file_bytes: whole files through zlib's gzread, which passes plain files
// through unchanged. Memory grows with the bytes actually read, never with a
// size some header claims.
#include "data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::data {

FileBytes read_file_bytes(const std::string& path, const char* op) {
  std::error_code error;
  auto status = std::filesystem::status(path, error);
  EMBER_CHECK(!error && std::filesystem::exists(status), "{}: cannot open '{}': no such file", op, path);
  // A FIFO or device is refused at once, by fstat on the opened descriptor (a FIFO would block gzopen).
  int64_t file_size = 0;
  FileDescriptor descriptor = open_regular_file(op, path, Links::follow, &file_size);
  gzFile file = gzdopen(descriptor.get(), "rb");
  EMBER_CHECK(file != nullptr, "{}: cannot open '{}': {}", op, path, std::strerror(errno));
  descriptor.release();  // gzclose_r closes it
  gzbuffer(file, 1 << 17);
  FileBytes result;
  // A plain file fills the buffer exactly; a gzipped one grows it
  // geometrically. A full buffer grows only once a probe read finds more.
  std::string& bytes = result.bytes;
  bytes.resize(size_t(std::max<int64_t>(file_size, 1 << 16)));
  size_t used = 0;
  std::array<char, 1 << 16> probe;
  for (;;) {
    if (used == bytes.size()) {
      int got = gzread(file, probe.data(), unsigned(probe.size()));
      if (got <= 0) break;
      bytes.resize(bytes.size() * 2);
      std::memcpy(bytes.data() + used, probe.data(), size_t(got));
      used += size_t(got);
      continue;
    }
    unsigned want = unsigned(std::min<size_t>(bytes.size() - used, 1u << 30));
    int got = gzread(file, bytes.data() + used, want);
    if (got <= 0) break;
    used += size_t(got);
  }
  bytes.resize(used);
  result.compressed = gzdirect(file) == 0;
  // gzread reports a truncated stream as end of file with Z_BUF_ERROR set,
  // and a bad checksum or corrupt data as -1: both land in gzerror.
  int status_code = Z_OK;
  std::string message = gzerror(file, &status_code);
  int close_code = gzclose_r(file);
  EMBER_CHECK(status_code != Z_ERRNO, "{}: cannot read '{}': {}", op, path, message);
  EMBER_CHECK(status_code == Z_OK && close_code == Z_OK,
              "{}: '{}' is a corrupt or truncated gzip stream after {} decompressed bytes (zlib: {})", op, path, used,
              status_code != Z_OK ? message : "stream ended early");
  return result;
}

}  // namespace ember::data
