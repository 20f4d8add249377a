// Checkpoint directories made atomically: a checkpoint is written into a
// staging directory beside its final place, then moved there by rename, and
// only then does the `latest` pointer (a small file, itself replaced by
// rename) name it. A process killed at any moment leaves either the previous
// state or the new one, never a half-written checkpoint under a final name
// (Note [Atomic checkpoints] in distributed/README.md). Who writes which file
// and the barriers between ranks are the Accelerator's
// (distributed/accelerator/checkpointing.cpp); this file knows only paths.
// Tests: tests/distributed/test_checkpoint_files.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "core/file_io.h"

namespace ember::distributed::checkpoint {

// Where the checkpoint for `final_dir` is staged: a sibling directory
// ".<name>.staging" (same filesystem, so the final move is a rename). An error
// when `final_dir` does not end in a directory name ("/", "a/..").
std::filesystem::path staging_path(const std::filesystem::path& final_dir);

// Where a save into `final_dir` goes: `final_dir` itself, or, when it is a
// symbolic link, the directory the link leads to (Accelerate's save_state
// follows it too, through os.makedirs). Staging and lock then sit beside that
// directory, on its file system, and the link names the saved checkpoint. A
// link to nothing or to something else than a directory is an error naming
// both paths.
std::filesystem::path save_target(const std::filesystem::path& final_dir);

// The lock file of a save into `final_dir` given by name: ".<name>.lock"
// beside it (SaveLock below).
std::filesystem::path lock_path(const std::filesystem::path& final_dir);

// Throws unless a save may replace `final_dir`: it does not exist, or it is a
// directory that is empty or holds a checkpoint (its manifest.json). A
// directory of other files would be deleted whole by the commit, so it is
// refused, before anything is written (`op` names the caller).
void check_replaceable(std::string_view op, const std::filesystem::path& final_dir);

// Removes whatever an interrupted save left at `staging`, then creates it
// (and its parents) empty.
void begin_staging(const std::filesystem::path& staging);

// fsyncs every file under `staging` and the directories, then moves it to
// `final_dir`: a rename when `final_dir` does not exist; otherwise an atomic
// exchange of the two (renameat2 RENAME_EXCHANGE) followed by removing the old
// one, so `final_dir` always holds a complete checkpoint (a file system
// without the exchange gets two renames, with `final_dir` briefly absent).
// fsyncs the parent. Anything in `staging` but files and directories (a
// symbolic link) is an error, as is a `final_dir` that check_replaceable refuses.
void commit(const std::filesystem::path& staging, const std::filesystem::path& final_dir);

// The `latest` file in `checkpoints_dir` names its newest complete checkpoint
// (a directory name inside it). set_latest writes a temporary file, fsyncs it,
// renames it over `latest` and fsyncs the directory. Its callers hold the
// directory's SaveLock, so a `latest.tmp.*` it finds was left by a save that
// crashed mid-write, and is removed.
void set_latest(const std::filesystem::path& checkpoints_dir, const std::string& name);
// The checkpoint `latest` names, or none when there is no `latest` file; an
// error (naming the paths) when it names something that is not a directory
// there (a symbolic link to one included: a load never leaves
// `checkpoints_dir` through a link), when `latest` itself is a link, a FIFO or
// anything but a regular file, or holds anything but one plain name (a
// trailing newline, from an edit by hand, is accepted; the file is read only
// up to 4 KiB).
std::optional<std::filesystem::path> latest(const std::filesystem::path& checkpoints_dir);

// Automatic naming: `checkpoints_dir/checkpoint_N`, N one more than the
// largest N already there (0 for the first). Only names spelled exactly
// `checkpoint_<decimal without leading zeros>` count (any entry, so the new
// name is never taken); other names are foreign and ignored here and below.
std::filesystem::path next_checkpoint_path(const std::filesystem::path& checkpoints_dir);
// Deletes the oldest `checkpoint_N` directories (smallest N) until at most
// `total_limit` (>= 1) remain; never the one `latest` names (an error if
// `latest` is broken: nothing is deleted on a guess). A victim is renamed to
// its staging name before it is removed. Also removes every ".<name>.staging"
// directory, so call it only when no save into `checkpoints_dir` is running.
void enforce_total_limit(const std::filesystem::path& checkpoints_dir, int64_t total_limit);

// An advisory lock (flock) that keeps two jobs from saving into one
// directory at once: their checkpoints would interleave, and one's
// total_limit would delete the other's. The lock file holds "process <pid> on
// host <host> (since ...)" of its holder, which the refusal quotes. The lock
// goes when the SaveLock is destroyed or its process dies (the kernel drops
// it; the stale text is overwritten by the next holder). Who takes it and
// when: Note [One job saves into a directory] in distributed/README.md.
class SaveLock {
 public:
  // Takes the lock on `lock_file` (created if absent, never through a symbolic
  // link), or throws an ember::Error naming `op`, the directory and the holder.
  static SaveLock acquire(const std::filesystem::path& lock_file, std::string_view op);
  const std::filesystem::path& path() const { return path_; }

 private:
  SaveLock(FileDescriptor file, std::filesystem::path path) : file_(std::move(file)), path_(std::move(path)) {}
  FileDescriptor file_;  // holds the lock while open
  std::filesystem::path path_;
};

}  // namespace ember::distributed::checkpoint
