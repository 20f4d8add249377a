// POSIX file helpers: the one way ember writes a file (atomically, through a
// temporary created exclusively, never through a link), opens a file to read
// (regular files only, refused at once otherwise) and opens a log to append
// to. Callers: safetensors files (core/safetensors.cpp), checkpoint
// directories and manifests (distributed/checkpoint/), sharded model indexes
// (nn/serialize_sharded.cpp), trackers, profiler traces (core/profiler/),
// the launcher's config and log files (tools/). Every failure is an ember::Error that names
// the operation (`op`), the path and the system's reason. Note [Paths ember
// opens] in core/README.md says what each guards against. Tests: through
// their callers (tests/core/test_safetensors.cpp, tests/nn/test_serialize.cpp,
// tests/distributed/test_checkpoint_files.cpp, tests/distributed/test_trackers.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "core/shown_text.h"  // for the callers' messages

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
// fills a new temporary file `<path>.tmp.<random>` beside it (given its
// descriptor and name), which is then fsynced and renamed over `path`, and the
// directory fsynced. The temporary is created with O_CREAT | O_EXCL |
// O_NOFOLLOW, so a link or file planted under any name it might take is never
// written through (another name is drawn). Only a regular file at `path` is
// replaced: a symbolic link there (even a dangling one), a directory, a device
// or a FIFO is an error naming it. On an error the temporary file is removed;
// a crash may leave one, which no reader takes for the file. The new file's
// mode is 0666 less the umask, as any file open(2) creates.
using FileWriter = std::function<void(int fd, const std::string& temporary_path)>;
void write_file_atomically(std::string_view op, const std::filesystem::path& path, const FileWriter& write);
void write_file_atomically(std::string_view op, const std::filesystem::path& path, std::string_view contents);

namespace detail {
// For tests only: when set, the temporary names write_file_atomically tries
// (attempt 0, 1, ...) instead of random ones, so a test can plant a link
// exactly where the writer will look.
using TemporaryNames = std::function<std::string(const std::string& target, int attempt)>;
void set_temporary_names_for_testing(TemporaryNames names);
}  // namespace detail

// Whether the last component of a path to read may be a symbolic link: a
// path the user gives may (a model file linked into a cache); a name inside a
// checkpoint directory may not.
enum class Links { follow, refuse };

// "a FIFO", "a directory", "a character device", ...: the kind of file an
// st_mode names, for messages.
std::string file_type_name(unsigned int mode);

// Opens `path` to read, refusing at once anything but a regular file with an
// error naming the path and what it is: the open is non-blocking (a FIFO
// would otherwise block it until a writer comes), the check is fstat on the
// descriptor (no window between check and use), then O_NONBLOCK is cleared.
// `size`, when given, receives the file's size.
FileDescriptor open_regular_file(std::string_view op, const std::filesystem::path& path, Links links,
                                 int64_t* size = nullptr);
// The same check on a descriptor already open (e.g. by openat, component by
// component); returns the file's size and clears O_NONBLOCK.
int64_t check_regular_file(std::string_view op, int fd, const std::string& path);

// Opens a log file to write (created if absent, 0666 less the umask, as open(2) callers do), at
// its end when `append`, else emptied: never through a symbolic link at
// `path` (O_NOFOLLOW), never anything but a regular file.
FileDescriptor open_log_file(std::string_view op, const std::filesystem::path& path, bool append);

// The whole of a regular file of at most `max_size` bytes (a larger one is an
// error before anything is allocated), opened by open_regular_file.
std::string read_small_file(std::string_view op, const std::filesystem::path& path, int64_t max_size,
                            Links links = Links::follow);
// The whole of an open regular file of `size` bytes.
std::string read_whole_file(std::string_view op, int fd, int64_t size, const std::string& path);

}  // namespace ember
