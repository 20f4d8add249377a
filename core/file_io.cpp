// File helpers for crash-safe writers (core/file_io.h).
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ember {

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string errno_text() { return std::strerror(errno); }

void read_exactly(std::string_view op, int fd, void* buffer, size_t size, int64_t offset, const std::string& path) {
  auto* out = static_cast<char*>(buffer);
  while (size > 0) {
    ssize_t got = ::pread(fd, out, size, offset);
    if (got < 0 && errno == EINTR) continue;
    EMBER_CHECK(got > 0, "{}: cannot read '{}' at byte {}: {}", op, path, offset,
                got == 0 ? std::string("unexpected end of file") : errno_text());
    out += got;
    size -= size_t(got);
    offset += got;
  }
}

void write_exactly(std::string_view op, int fd, const void* buffer, size_t size, const std::string& path) {
  const auto* in = static_cast<const char*>(buffer);
  while (size > 0) {
    ssize_t put = ::write(fd, in, size);
    if (put < 0 && errno == EINTR) continue;
    EMBER_CHECK(put > 0, "{}: cannot write '{}': {}", op, path, errno_text());
    in += put;
    size -= size_t(put);
  }
}

void sync_path(std::string_view op, const std::filesystem::path& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  EMBER_CHECK(file.get() >= 0, "{}: cannot open '{}' to sync it: {}", op, path.string(), errno_text());
  EMBER_CHECK(::fsync(file.get()) == 0 || errno == EINVAL, "{}: cannot sync '{}': {}", op, path.string(),
              errno_text());
}

void sync_directory(std::string_view op, const std::filesystem::path& directory) {
  const std::filesystem::path name = directory.empty() ? "." : directory;
  FileDescriptor dir(::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EMBER_CHECK(dir.get() >= 0, "{}: cannot open directory '{}': {}", op, name.string(), errno_text());
  EMBER_CHECK(::fsync(dir.get()) == 0 || errno == EINVAL, "{}: cannot sync directory '{}': {}", op, name.string(),
              errno_text());
}

void write_file_atomically(std::string_view op, const std::filesystem::path& path, const FileWriter& write) {
  const std::string target = path.string();
  const std::string temporary = target + ".tmp";
  FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EMBER_CHECK(file.get() >= 0, "{}: cannot create '{}': {}", op, temporary, errno_text());
  try {
    write(file.get(), temporary);
    // The bytes reach the disk before the name does, so a crash leaves the old file or the new one.
    EMBER_CHECK(::fsync(file.get()) == 0, "{}: cannot sync '{}': {}", op, temporary, errno_text());
    EMBER_CHECK(::close(file.release()) == 0, "{}: cannot close '{}': {}", op, temporary, errno_text());
    EMBER_CHECK(::rename(temporary.c_str(), target.c_str()) == 0, "{}: cannot rename '{}' to '{}': {}", op, temporary,
                target, errno_text());
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  sync_directory(op, path.parent_path());
}

void write_file_atomically(std::string_view op, const std::filesystem::path& path, std::string_view contents) {
  write_file_atomically(op, path, [&](int fd, const std::string& temporary) {
    write_exactly(op, fd, contents.data(), contents.size(), temporary);
  });
}

std::string read_small_file(std::string_view op, const std::filesystem::path& path, int64_t max_size) {
  const std::string name = path.string();
  // O_NONBLOCK: a FIFO in the file's place fails the regular-file check below instead of hanging the open.
  FileDescriptor file(::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  EMBER_CHECK(file.get() >= 0, "{}: cannot open '{}': {}", op, name, errno_text());
  struct stat status {};
  EMBER_CHECK(::fstat(file.get(), &status) == 0, "{}: cannot stat '{}': {}", op, name, errno_text());
  EMBER_CHECK(S_ISREG(status.st_mode), "{}: '{}' is not a regular file", op, name);
  EMBER_CHECK(status.st_size <= max_size, "{}: '{}' has {} bytes, more than the {} this file may have", op, name,
              int64_t(status.st_size), max_size);
  std::string contents(size_t(status.st_size), '\0');
  read_exactly(op, file.get(), contents.data(), contents.size(), 0, name);
  return contents;
}

}  // namespace ember
