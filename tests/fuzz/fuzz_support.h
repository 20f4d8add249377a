// What the libFuzzer targets of tests/fuzz share (README.md there): the rule
// that ember::Error is a clean rejection and anything else a bug, the input
// as a file without a temporary file, and a scratch directory per process for
// the readers that take a directory.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace ember::fuzz {

// A broken promise of the code under test, or of the harness: printed, then
// abort(), which libFuzzer reports as a crash with the input that caused it.
[[noreturn]] inline void fail(const std::string& what) {
  fmt::print(stderr, "fuzz target: {}\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ember::fuzz

// FUZZ_REQUIRE(condition, "format", values...): fail() with the message unless
// the condition holds (formatted only then, as EMBER_CHECK does).
#define FUZZ_REQUIRE(condition, ...)                                  \
  do {                                                                \
    if (!(condition)) [[unlikely]]                                    \
      ::ember::fuzz::fail(::fmt::format(__VA_ARGS__));                \
  } while (0)

namespace ember::fuzz {

// The catch clause of every target: an ember::Error is the reader refusing
// its input, as it must; but EMBER_ASSERT throws ember::Error too, and an
// internal error is a bug like any crash.
inline void rejected(const Error& error) {
  if (std::string_view(error.what()).starts_with("internal error")) fail(fmt::format("{}", error.what()));
}

// The input as a file that readers open by path: an anonymous memory file
// (memfd_create), named by its /proc/self/fd link. Nothing touches the disk and
// nothing is left behind, whatever happens to the process.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(::memfd_create("ember-fuzz-input", MFD_CLOEXEC)) {
    FUZZ_REQUIRE(fd_ >= 0, "memfd_create failed: {}", std::strerror(errno));
    for (size_t written = 0; written < size;) {
      const ssize_t count = ::write(fd_, data + written, size - written);
      FUZZ_REQUIRE(count > 0 || errno == EINTR, "writing the input failed: {}", std::strerror(errno));
      if (count > 0) written += size_t(count);
    }
    path_ = fmt::format("/proc/self/fd/{}", fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A directory of this process's own under the system's temporary directory
// ($TMPDIR), created on first use and removed when the process exits
// normally (libFuzzer exits through exit() at the end of a run); a crashed
// run leaves it for the post-mortem.
inline const std::filesystem::path& scratch_directory() {
  struct Scratch {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 fmt::format("ember_fuzz_{}_{}", program_invocation_short_name, ::getpid());
    Scratch() {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  FUZZ_REQUIRE(!out.fail(), "cannot write '{}'", path.string());
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace ember::fuzz
