// POSIX file helpers for the writers that must survive a crash: safetensors
// files (core/safetensors.cpp), checkpoint directories and manifests
// (distributed/checkpoint/), sharded model indexes (nn/serialize_sharded.cpp).
// Every failure is an ember::Error that names the operation (`op`), the path
// and the system's reason. Tests: through their callers
// (tests/core/test_safetensors.cpp, tests/distributed/test_checkpoint_files.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace ember {

// Owns a file descriptor; closes it when destroyed.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// A name that can only mean an entry of its directory: not empty, "." or
// "..", without '/' or NUL.
bool is_plain_name(std::string_view name);

// strerror(errno), for messages.
std::string errno_text();

// Reads exactly `size` bytes at `offset` (an early end of file is an error).
void read_exactly(std::string_view op, int fd, void* buffer, size_t size, int64_t offset, const std::string& path);
// Writes all of `size` bytes at the file position.
void write_exactly(std::string_view op, int fd, const void* buffer, size_t size, const std::string& path);

// fsync of a file (or directory) by path.
void sync_path(std::string_view op, const std::filesystem::path& path);
// fsync of a directory, which makes the names created, renamed or removed in
// it durable. A file system without directory sync (EINVAL) is accepted: there
// the rename is as durable as it gets.
void sync_directory(std::string_view op, const std::filesystem::path& directory);

// Replaces `path` so that a crash leaves the old file or the new one: `write`
// fills `<path>.tmp` (given its descriptor and name), which is then fsynced and
// renamed over `path`, and the directory fsynced. On an error the temporary
// file is removed.
using FileWriter = std::function<void(int fd, const std::string& temporary_path)>;
void write_file_atomically(std::string_view op, const std::filesystem::path& path, const FileWriter& write);
void write_file_atomically(std::string_view op, const std::filesystem::path& path, std::string_view contents);

// The whole of a regular file of at most `max_size` bytes (a larger one is an
// error before anything is allocated).
std::string read_small_file(std::string_view op, const std::filesystem::path& path, int64_t max_size);

}  // namespace ember
