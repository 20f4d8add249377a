// Checkpoint directories: staging, commit by rename or exchange, the `latest`
// pointer, automatic names and total_limit (checkpoint_dir.h). Why each step
// and what a kill at each moment leaves: Note [Atomic checkpoints] in
// distributed/README.md.
#include "distributed/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <limits>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "distributed/checkpoint/manifest.h"

namespace ember::distributed::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLatestFile = "latest";
constexpr std::string_view kCheckpointPrefix = "checkpoint_";
constexpr std::string_view kStagingSuffix = ".staging";
constexpr int64_t kMaxLatestBytes = 4096;  // a directory name (NAME_MAX is 255) and a newline

// N for a name written as `checkpoint_N` (N in decimal, no sign, no leading
// zeros); none for any other name, which this file then never touches.
std::optional<int64_t> checkpoint_number(std::string_view name) {
  if (!name.starts_with(kCheckpointPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kCheckpointPrefix.size());
  if (digits.empty() || (digits.size() > 1 && digits.front() == '0')) return std::nullopt;
  int64_t number = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (error != std::errc() || end != digits.data() + digits.size() || number < 0) return std::nullopt;
  return number;
}

// `.<name>.staging`: a save in progress, or what an interrupted one (or a
// removal) left.
bool is_staging_name(std::string_view name) {
  return name.size() > 1 + kStagingSuffix.size() && name.front() == '.' && name.ends_with(kStagingSuffix);
}

// `a/b/` names the directory `a/b`: without this its file name would be empty.
fs::path without_trailing_separator(const fs::path& path) {
  fs::path normal = path.lexically_normal();
  return normal.has_filename() ? normal : normal.parent_path();
}

// The `<file>.tmp.*` files (core/file_io.h) a crash between their creation
// and their rename left beside `file` in `directory`. Only regular files go:
// a link or directory of that name is the user's.
void remove_stray_temporaries(const fs::path& directory, std::string_view file) {
  const std::string prefix = std::string(file) + ".tmp.";
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(prefix) && it->symlink_status(error).type() == fs::file_type::regular) {
      std::error_code ignored;  // gone already, or not ours to remove: the save goes on either way
      fs::remove(it->path(), ignored);
    }
  }
}

bool is_real_directory(const fs::path& path) {
  std::error_code error;
  return fs::symlink_status(path, error).type() == fs::file_type::directory;
}

// Removes `path` so that no partial directory is ever left under its own
// name: it is renamed to its staging name first, which an interrupted removal
// then leaves for begin_staging or enforce_total_limit to clear.
void remove_checkpoint(const fs::path& path) {
  const fs::path trash = staging_path(path);
  std::error_code error;
  fs::remove_all(trash, error);
  EMBER_CHECK(!error, "checkpoint: cannot remove '{}': {}", trash.string(), error.message());
  fs::rename(path, trash, error);
  EMBER_CHECK(!error, "checkpoint: cannot rename '{}' to '{}' to remove it: {}", path.string(), trash.string(),
              error.message());
  fs::remove_all(trash, error);
  EMBER_CHECK(!error, "checkpoint: cannot remove '{}': {}", trash.string(), error.message());
}

// fsyncs every file and directory under `root`, then `root` itself. Anything
// that is neither (a link, a socket) has no place in a checkpoint.
void sync_tree(const fs::path& root) {
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    const fs::file_type type = it->symlink_status().type();
    EMBER_CHECK(type == fs::file_type::regular || type == fs::file_type::directory,
                "checkpoint commit: '{}' is neither a file nor a directory; a checkpoint holds only those",
                it->path().string());
    if (type == fs::file_type::regular) {
      sync_path("checkpoint commit", it->path());
    } else {
      sync_directory("checkpoint commit", it->path());
    }
  }
  EMBER_CHECK(!error, "checkpoint commit: cannot list '{}': {}", root.string(), error.message());
  sync_directory("checkpoint commit", root);
}

// Moves `staging` to `final_dir`, which exists: swaps the two atomically, so
// `final_dir` always names a complete checkpoint, and returns where the old
// one now is. A file system without RENAME_EXCHANGE (NFS, for one) gets two
// renames, between which `final_dir` does not exist (the old checkpoint is
// complete under its staging name meanwhile).
fs::path replace_existing(const fs::path& staging, const fs::path& final_dir) {
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) return staging;
  EMBER_CHECK(errno == EINVAL || errno == ENOSYS, "checkpoint commit: cannot exchange '{}' with '{}': {}",
              staging.string(), final_dir.string(), errno_text());
  const fs::path old = final_dir.parent_path() / fmt::format(".{}.old{}", final_dir.filename().string(), kStagingSuffix);
  std::error_code error;
  fs::remove_all(old, error);
  EMBER_CHECK(!error, "checkpoint commit: cannot remove '{}': {}", old.string(), error.message());
  fs::rename(final_dir, old, error);
  EMBER_CHECK(!error, "checkpoint commit: cannot rename '{}' to '{}': {}", final_dir.string(), old.string(),
              error.message());
  fs::rename(staging, final_dir, error);
  EMBER_CHECK(!error, "checkpoint commit: cannot rename '{}' to '{}': {}", staging.string(), final_dir.string(),
              error.message());
  return old;
}

}  // namespace

fs::path staging_path(const fs::path& final_dir) {
  const fs::path final_path = without_trailing_separator(final_dir);
  const std::string name = final_path.filename().string();
  EMBER_CHECK(is_plain_name(name), "checkpoint: '{}' does not end in a directory name", final_dir.string());
  return final_path.parent_path() / fmt::format(".{}{}", name, kStagingSuffix);
}

fs::path save_target(const fs::path& final_dir) {
  const fs::path path = without_trailing_separator(final_dir);
  std::error_code error;
  if (fs::symlink_status(path, error).type() != fs::file_type::symlink) return final_dir;
  const fs::path link = fs::read_symlink(path, error);
  const fs::path target = fs::canonical(path, error);
  EMBER_CHECK(!error, "checkpoint: '{}' is a symbolic link to '{}', which does not exist; create that directory or "
              "remove the link", path.string(), link.string());
  EMBER_CHECK(fs::is_directory(target, error), "checkpoint: '{}' is a symbolic link to '{}', which is not a directory",
              path.string(), target.string());
  return target;
}

fs::path lock_path(const fs::path& final_dir) {
  const fs::path staging = staging_path(final_dir);  // checks the name
  const std::string name = staging.filename().string();
  return staging.parent_path() / (name.substr(0, name.size() - kStagingSuffix.size()) + ".lock");
}

void begin_staging(const fs::path& staging) {
  std::error_code error;
  fs::remove_all(staging, error);
  EMBER_CHECK(!error, "begin_staging: cannot remove what an earlier save left at '{}': {}", staging.string(),
              error.message());
  fs::create_directories(staging, error);
  EMBER_CHECK(!error, "begin_staging: cannot create '{}': {}", staging.string(), error.message());
}

void check_replaceable(std::string_view op, const fs::path& final_dir) {
  const fs::path final_path = without_trailing_separator(final_dir);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(final_path, error))) return;
  EMBER_CHECK(is_real_directory(final_path), "{}: '{}' exists and is not a directory", op, final_path.string());
  const bool empty = fs::directory_iterator(final_path, error) == fs::directory_iterator();
  EMBER_CHECK(!error, "{}: cannot read the directory '{}': {}", op, final_path.string(), error.message());
  const fs::file_type manifest = fs::symlink_status(final_path / kManifestName, error).type();
  EMBER_CHECK(empty || manifest == fs::file_type::regular,
              "{}: '{}' holds files but is not a checkpoint (no {}); a save replaces the whole directory, so it "
              "would delete them: save into a new or empty directory, or remove it first",
              op, final_path.string(), kManifestName);
}

void commit(const fs::path& staging, const fs::path& final_dir) {
  check_replaceable("checkpoint commit", final_dir);
  const fs::path final_path = without_trailing_separator(final_dir);
  EMBER_CHECK(is_real_directory(staging), "checkpoint commit: the staging directory '{}' does not exist",
              staging.string());
  sync_tree(staging);
  std::error_code error;
  const bool replacing = fs::exists(fs::symlink_status(final_path, error));
  if (replacing) {
    const fs::path old = replace_existing(staging, final_path);
    sync_directory("checkpoint commit", final_path.parent_path());
    fs::remove_all(old, error);
    EMBER_CHECK(!error, "checkpoint commit: cannot remove the replaced checkpoint at '{}': {}", old.string(),
                error.message());
    return;
  }
  fs::rename(staging, final_path, error);
  EMBER_CHECK(!error, "checkpoint commit: cannot rename '{}' to '{}': {}", staging.string(), final_path.string(),
              error.message());
  sync_directory("checkpoint commit", final_path.parent_path());
}

void set_latest(const fs::path& checkpoints_dir, const std::string& name) {
  EMBER_CHECK(is_plain_name(name), "set_latest: '{}' is not a directory name (no '/', not empty, '.' or '..')", name);
  EMBER_CHECK(is_real_directory(checkpoints_dir / name), "set_latest: '{}' is not a directory",
              (checkpoints_dir / name).string());
  remove_stray_temporaries(checkpoints_dir, kLatestFile);
  write_file_atomically("set_latest", checkpoints_dir / kLatestFile, name);
}

std::optional<fs::path> latest(const fs::path& checkpoints_dir) {
  const fs::path pointer = checkpoints_dir / kLatestFile;
  std::error_code error;
  if (!fs::exists(fs::symlink_status(pointer, error))) return std::nullopt;
  // Neither `latest` nor the checkpoint it names may be a link: either could lead a load outside checkpoints_dir.
  std::string name = read_small_file("checkpoint latest", pointer, kMaxLatestBytes, Links::refuse);
  if (name.ends_with('\n')) name.pop_back();  // an `echo checkpoint_3 > latest` by hand
  EMBER_CHECK(is_plain_name(name), "checkpoint latest: '{}' holds '{}', which is not a directory name", pointer.string(),
              shown_text(name));
  const fs::path checkpoint = checkpoints_dir / name;
  const fs::file_type type = fs::symlink_status(checkpoint, error).type();
  EMBER_CHECK(type != fs::file_type::symlink,
              "checkpoint latest: '{}' names '{}', which is a symbolic link; a checkpoint is loaded only from inside "
              "'{}'",
              pointer.string(), shown_text(checkpoint.string(), 4096), checkpoints_dir.string());
  EMBER_CHECK(type == fs::file_type::directory, "checkpoint latest: '{}' names '{}', which is not a directory",
              pointer.string(), shown_text(checkpoint.string(), 4096));
  return checkpoint;
}

fs::path next_checkpoint_path(const fs::path& checkpoints_dir) {
  int64_t next = 0;
  std::error_code error;
  if (!fs::exists(checkpoints_dir, error)) return checkpoints_dir / fmt::format("{}0", kCheckpointPrefix);
  for (fs::directory_iterator it(checkpoints_dir, error), end; !error && it != end; it.increment(error)) {
    // Every entry so named counts, directory or not, so the new name is never taken.
    const std::optional<int64_t> number = checkpoint_number(it->path().filename().string());
    if (!number) continue;
    EMBER_CHECK(*number < std::numeric_limits<int64_t>::max(), "next_checkpoint_path: '{}' has the largest number",
                it->path().string());
    next = std::max(next, *number + 1);
  }
  EMBER_CHECK(!error, "next_checkpoint_path: cannot list '{}': {}", checkpoints_dir.string(), error.message());
  return checkpoints_dir / fmt::format("{}{}", kCheckpointPrefix, next);
}

void enforce_total_limit(const fs::path& checkpoints_dir, int64_t total_limit) {
  EMBER_CHECK(total_limit >= 1, "enforce_total_limit: total_limit must be at least 1, got {}", total_limit);
  const std::optional<fs::path> kept = latest(checkpoints_dir);
  std::vector<std::pair<int64_t, fs::path>> checkpoints;
  std::vector<fs::path> leftovers;
  std::error_code error;
  for (fs::directory_iterator it(checkpoints_dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!is_real_directory(it->path())) continue;
    if (is_staging_name(name)) {
      leftovers.push_back(it->path());
    } else if (std::optional<int64_t> number = checkpoint_number(name)) {
      checkpoints.emplace_back(*number, it->path());
    }
  }
  EMBER_CHECK(!error, "enforce_total_limit: cannot list '{}': {}", checkpoints_dir.string(), error.message());
  for (const fs::path& leftover : leftovers) {
    fs::remove_all(leftover, error);
    EMBER_CHECK(!error, "enforce_total_limit: cannot remove '{}': {}", leftover.string(), error.message());
  }
  std::sort(checkpoints.begin(), checkpoints.end());
  int64_t remaining = int64_t(checkpoints.size());
  for (const auto& [number, path] : checkpoints) {
    if (remaining <= total_limit) break;
    if (kept && path.filename() == kept->filename()) continue;
    remove_checkpoint(path);
    --remaining;
  }
}

SaveLock SaveLock::acquire(const fs::path& lock_file, std::string_view op) {
  std::error_code error;
  // save_state("ckpt") locks ".ckpt.lock", whose parent_path() is "" (an
  // error to create_directories): the working directory.
  const fs::path directory = lock_file.has_parent_path() ? lock_file.parent_path() : fs::path(".");
  fs::create_directories(directory, error);
  EMBER_CHECK(!error, "{}: cannot create '{}': {}", op, directory.string(), error.message());
  // Opened like a log (never through a link, only a regular file), but not emptied before the lock is ours.
  FileDescriptor file = open_log_file(op, lock_file, /*append=*/true);
  if (::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
    EMBER_CHECK(errno == EWOULDBLOCK, "{}: cannot lock '{}': {}", op, lock_file.string(), errno_text());
    std::string text;
    try {
      text = read_small_file(op, lock_file, 4096, Links::refuse);
    } catch (const Error&) {
      // The holder may be between its lock and its write; the refusal stands either way.
    }
    if (text.ends_with('\n')) text.pop_back();
    if (text.empty()) text = "a process that has not yet written its name";
    EMBER_CHECK(false,
                "{}: another job is saving checkpoints into '{}': '{}' is locked by {}. Two jobs saving into one "
                "directory would interleave their checkpoints; give this one another project_dir (or wait for the "
                "other to end)",
                op, directory.string(), lock_file.string(), shown_text(text, 400));
  }
  // Ours now: say who holds it, for the message of the next one that tries.
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "an unknown host");
  const int64_t since = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string text = fmt::format("process {} on host {} (since Unix time {})\n", ::getpid(), host, since);
  EMBER_CHECK(::ftruncate(file.get(), 0) == 0, "{}: cannot write '{}': {}", op, lock_file.string(), errno_text());
  write_exactly(op, file.get(), text.data(), text.size(), lock_file.string());
  return SaveLock(std::move(file), lock_file);
}

}  // namespace ember::distributed::checkpoint
