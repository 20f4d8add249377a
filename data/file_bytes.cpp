// read_file_bytes: a whole regular file, gunzipped with zlib's inflate when
// it starts with the gzip magic. Memory grows with the bytes actually read
// and decompressed, never with a size some header claims.
#include "data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::data {

namespace {

// inflate's counts are 32-bit: a larger file goes in and out in pieces.
constexpr size_t kMaxPiece = size_t(1) << 30;

bool starts_gzip_member(std::string_view bytes) {
  return bytes.size() >= 2 && bytes[0] == '\x1f' && bytes[1] == '\x8b';
}

// Ends the inflate stream on every way out of gunzip.
struct InflateStream {
  z_stream stream{};
  InflateStream(const std::string& path, const char* op) {
    EMBER_CHECK(inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK, "{}: cannot start zlib to read '{}': {}", op, path,
                stream.msg ? stream.msg : "out of memory");
  }
  ~InflateStream() { inflateEnd(&stream); }
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;
};

// Every gzip member of `raw` decompressed in turn, as `gzip -d` reads
// concatenated members. Bytes after a member that do not start another are an
// error: zlib's gzread skipped them without a word, while a plain IDX file
// with bytes past its data is refused.
std::string gunzip(std::string_view raw, const std::string& path, const char* op) {
  InflateStream inflater(path, op);
  z_stream& stream = inflater.stream;
  std::string bytes(std::max<size_t>(raw.size(), 1 << 16), '\0');
  size_t read = 0, used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const size_t in = std::min(raw.size() - read, kMaxPiece), out = std::min(bytes.size() - used, kMaxPiece);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data() + read));
    stream.avail_in = uInt(in);
    stream.next_out = reinterpret_cast<Bytef*>(bytes.data() + used);
    stream.avail_out = uInt(out);
    const int code = inflate(&stream, Z_NO_FLUSH);
    read += in - stream.avail_in;
    used += out - stream.avail_out;
    if (code == Z_STREAM_END) {
      if (read == raw.size()) break;
      EMBER_CHECK(starts_gzip_member(raw.substr(read)),
                  "{}: '{}' has {} bytes after the end of its gzip stream (at byte {} of the file) that are not "
                  "another gzip member; the file is damaged or something was appended to it",
                  op, path, raw.size() - read, read);
      EMBER_CHECK(inflateReset(&stream) == Z_OK, "{}: cannot restart zlib to read '{}'", op, path);
      continue;
    }
    // With room to write, Z_BUF_ERROR means the input ended inside a member.
    EMBER_CHECK(code == Z_OK, "{}: '{}' is a corrupt or truncated gzip stream after {} decompressed bytes (zlib: {})",
                op, path, used, code == Z_BUF_ERROR ? "stream ended early" : stream.msg ? stream.msg : "error");
  }
  bytes.resize(used);
  return bytes;
}

}  // namespace

FileBytes read_file_bytes(const std::string& path, const char* op) {
  std::error_code error;
  auto status = std::filesystem::status(path, error);
  EMBER_CHECK(!error && std::filesystem::exists(status), "{}: cannot open '{}': no such file", op, path);
  // A FIFO or device is refused at once, by fstat on the opened descriptor.
  int64_t file_size = 0;
  FileDescriptor descriptor = open_regular_file(op, path, Links::follow, &file_size);
  std::string raw = read_whole_file(op, descriptor.get(), file_size, path);
  if (!starts_gzip_member(raw)) return {std::move(raw), false};
  return {gunzip(raw, path, op), true};
}

}  // namespace ember::data
