// File helpers for crash-safe writers (core/file_io.h).
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

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

namespace {

detail::TemporaryNames& temporary_names_for_testing() {
  static detail::TemporaryNames names;
  return names;
}

// Creates `<target>.tmp.<6 random letters or digits>`, a name no one else
// holds: O_EXCL fails on anything already there, a link included, and
// O_NOFOLLOW makes sure of the link even where O_EXCL were dropped.
FileDescriptor create_temporary(std::string_view op, const std::string& target, std::string& temporary) {
  static constexpr char kLetters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random(std::random_device{}() ^ (uint64_t(::getpid()) << 32));
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    temporary = target + ".tmp.";
    for (int i = 0; i < 6; ++i) temporary += kLetters[random() % (sizeof(kLetters) - 1)];
    if (const auto& names = temporary_names_for_testing()) temporary = names(target, attempt);
    FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
    if (file.get() >= 0) return file;
    const std::string parent = std::filesystem::path(target).parent_path().string();
    EMBER_CHECK(errno != ENOENT, "{}: cannot write '{}': the directory '{}' does not exist", op, target,
                parent.empty() ? "." : parent);
    EMBER_CHECK(errno == EEXIST, "{}: cannot create '{}': {}", op, temporary, errno_text());
  }
  EMBER_CHECK(false, "{}: cannot create a temporary file beside '{}': {} random names were all taken", op, target,
              kAttempts);
  return FileDescriptor(-1);
}

}  // namespace

void detail::set_temporary_names_for_testing(TemporaryNames names) { temporary_names_for_testing() = std::move(names); }

void write_file_atomically(std::string_view op, const std::filesystem::path& path, const FileWriter& write) {
  const std::string target = path.string();
  // The rename would put a regular file in the place of whatever is there: a link
  // (the user meant its target), a device (a save to /dev/full "succeeded" and
  // replaced the device node as root), a FIFO. Only a regular file, or nothing, is replaced.
  struct stat existing {};
  const bool replacing = ::lstat(target.c_str(), &existing) == 0;
  if (replacing) {
    EMBER_CHECK(!S_ISLNK(existing.st_mode),
                "{}: '{}' is a symbolic link; a file is never written through one nor replaced by a save: save to "
                "its target, or remove the link first",
                op, target);
    EMBER_CHECK(S_ISREG(existing.st_mode), "{}: '{}' exists and is not a regular file: it is {}", op, target,
                file_type_name(existing.st_mode));
  }
  std::string temporary;
  FileDescriptor file = create_temporary(op, target, temporary);
  try {
    // A replaced file keeps its permissions (a config file made 0600 stays
    // so), as a file rewritten in place would.
    EMBER_CHECK(!replacing || ::fchmod(file.get(), existing.st_mode & 07777) == 0,
                "{}: cannot give '{}' the permissions of '{}': {}", op, temporary, target, errno_text());
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

std::string file_type_name(unsigned int mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return fmt::format("a file of type {:#o}", mode & S_IFMT);
  }
}

int64_t check_regular_file(std::string_view op, int fd, const std::string& path) {
  struct stat status {};
  EMBER_CHECK(::fstat(fd, &status) == 0, "{}: cannot stat '{}': {}", op, path, errno_text());
  EMBER_CHECK(S_ISREG(status.st_mode), "{}: '{}' is not a regular file: it is {}", op, path,
              file_type_name(status.st_mode));
  // Reads of a regular file never block anyway; cleared so that the descriptor behaves as an ordinary one.
  const int flags = ::fcntl(fd, F_GETFL);
  EMBER_CHECK(flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0, "{}: cannot set up '{}': {}", op, path,
              errno_text());
  return int64_t(status.st_size);
}

FileDescriptor open_regular_file(std::string_view op, const std::filesystem::path& path, Links links, int64_t* size) {
  const std::string name = path.string();
  // O_NONBLOCK: a FIFO in the file's place opens at once and fails the check below instead of hanging the open.
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (links == Links::refuse ? O_NOFOLLOW : 0);
  FileDescriptor file(::open(name.c_str(), flags));
  EMBER_CHECK(file.get() >= 0 || !(links == Links::refuse && errno == ELOOP),
              "{}: '{}' is a symbolic link, which is not followed here", op, name);
  EMBER_CHECK(file.get() >= 0, "{}: cannot open '{}': {}", op, name, errno_text());
  const int64_t file_size = check_regular_file(op, file.get(), name);
  if (size) *size = file_size;
  return file;
}

FileDescriptor open_log_file(std::string_view op, const std::filesystem::path& path, bool append) {
  const std::string name = path.string();
  // O_NONBLOCK: a FIFO without a reader fails the open (ENXIO) instead of blocking it; with one, the check refuses it.
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (append ? O_APPEND : 0);
  FileDescriptor file(::open(name.c_str(), flags, 0666));
  EMBER_CHECK(file.get() >= 0 || errno != ELOOP, "{}: '{}' is a symbolic link; a log is never written through one",
              op, name);
  EMBER_CHECK(file.get() >= 0, "{}: cannot open '{}' for writing: {}", op, name, errno_text());
  check_regular_file(op, file.get(), name);
  // Emptied only once it is known to be a regular file of ours to write.
  EMBER_CHECK(append || ::ftruncate(file.get(), 0) == 0, "{}: cannot empty '{}': {}", op, name, errno_text());
  return file;
}

std::string read_whole_file(std::string_view op, int fd, int64_t size, const std::string& path) {
  std::string contents(size_t(size), '\0');
  read_exactly(op, fd, contents.data(), contents.size(), 0, path);
  return contents;
}

std::string read_small_file(std::string_view op, const std::filesystem::path& path, int64_t max_size, Links links) {
  const std::string name = path.string();
  int64_t size = 0;
  FileDescriptor file = open_regular_file(op, path, links, &size);
  EMBER_CHECK(size <= max_size, "{}: '{}' has {} bytes, more than the {} this file may have", op, name, size,
              max_size);
  return read_whole_file(op, file.get(), size, name);
}

}  // namespace ember
