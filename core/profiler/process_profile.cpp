// The process-wide profile (process_profile.h).
#include "core/profiler/process_profile.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "core/ember_variables.h"
#include "core/error.h"
#include "core/output_directory.h"
#include "core/profiler/profiler.h"
#include "core/profiler/recorder.h"

namespace ember::profiler {
namespace {

// The directory the program started in, read as the library loads: a
// relative EMBER_PROFILE (or profile_dir) names a directory there, even when
// the program changes directory before its first op or its Accelerator.
const std::filesystem::path g_starting_directory = [] {
  std::error_code error;
  std::filesystem::path directory = std::filesystem::current_path(error);
  return error ? std::filesystem::path() : directory;
}();

std::filesystem::path from_start(const std::filesystem::path& path) {
  if (!path.is_absolute() && !g_starting_directory.empty()) return g_starting_directory / path;
  std::error_code failure;
  std::filesystem::path absolute = std::filesystem::absolute(path, failure);
  EMBER_CHECK(!failure, "profiler: cannot make '{}' absolute: {}", path.string(), failure.message());
  return absolute;
}

struct ProcessProfile {
  ProcessProfileOptions options;
  std::unique_ptr<Profile> profile;
  std::set<std::string> written;  // the traces this process wrote: a later profile never replaces one
};

// Never destroyed: the exit handler uses them.
std::mutex& process_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
ProcessProfile& process_profile() {
  static auto* profile = new ProcessProfile;
  return *profile;
}

int rank_for_file() {
  if (detail::process_rank() >= 0) return detail::process_rank();
  const char* rank = std::getenv("RANK");
  return rank != nullptr && *rank != '\0' ? std::atoi(rank) : 0;
}

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Where the running profile's trace goes: <prefix><rank>.json, or, when this
// process already wrote that file (a second Accelerator of one program),
// <prefix><rank>-2.json, -3, ..., which `ember trace merge` leaves alone.
std::string trace_path(const ProcessProfile& process, int rank) {
  const std::string stem = process.options.path_prefix + std::to_string(rank);
  std::string path = stem + ".json";
  for (int count = 2; process.written.count(path); ++count) path = fmt::format("{}-{}.json", stem, count);
  return path;
}

}  // namespace

bool start_process_profile(ProcessProfileOptions options) {
  std::lock_guard lock(process_mutex());
  ProcessProfile& process = process_profile();
  if (process.profile) return false;
  // Absolute now, so a program that changes directory writes where it was
  // asked; checked now, so a run learns at its start (an ember::Error to the
  // Accelerator or DistributedDataParallel that asked) that it cannot write.
  const std::filesystem::path prefix = from_start(options.path_prefix);
  prepare_output_directory("profiler", prefix.parent_path());
  options.path_prefix = prefix.string();
  // EMBER_PROFILE_SHAPES asks it of every process-wide profile: the
  // Accelerator's too, which starts before the first op would read it.
  options.record.record_shapes = options.record.record_shapes || flag_variable("EMBER_PROFILE_SHAPES").value_or(false);
  try {
    process.profile = std::make_unique<Profile>(options.record);
  } catch (const Error& error) {
    // A profiler::Profile of the program's own records already: it keeps the events.
    std::fprintf(stderr, "[ember profiler] not starting the process-wide profile for %s*.json: %s\n",
                 options.path_prefix.c_str(), error.what());
    return false;
  }
  process.options = std::move(options);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(finish_process_profile); });
  return true;
}

void start_environment_profile() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* directory = environment("EMBER_PROFILE")) {
      std::filesystem::path absolute;
      try {
        absolute = from_start(directory);
        prepare_output_directory("EMBER_PROFILE", absolute);
      } catch (const Error& cannot) {
        std::fprintf(stderr, "[ember profiler] no profile will be written: %s\n", cannot.what());
        return;
      }
      // EMBER_PROFILE records everything EMBER_DDP_TRACE would, in one profile (one at a time).
      if (const char* prefix = environment("EMBER_DDP_TRACE"))
        std::fprintf(stderr,
                     "[ember profiler] EMBER_DDP_TRACE=%s writes no trace of its own: its backward nodes and "
                     "communication are in EMBER_PROFILE's trace, %s\n",
                     prefix, (absolute / "rank<r>.json").c_str());
      start_process_profile({.path_prefix = (absolute / "rank").string(), .record = {}});
    } else if (const char* prefix = environment("EMBER_DDP_TRACE")) {
      // DDP's trace of old: backward nodes and communication only.
      try {
        start_process_profile({.path_prefix = std::string(prefix) + ".rank",
                               .record = {.record_ops = false, .record_steps = false},
                               .print_table = false});
      } catch (const Error& cannot) {
        // The first op of the program starts it: no caller expects this error.
        std::fprintf(stderr, "[ember profiler] no EMBER_DDP_TRACE trace will be written: %s\n", cannot.what());
      }
    }
  });
}

std::string process_profile_path() {
  std::lock_guard lock(process_mutex());
  ProcessProfile& process = process_profile();
  if (!process.profile) return "";
  return trace_path(process, rank_for_file());
}

void finish_process_profile() {
  std::unique_ptr<Profile> profile;
  ProcessProfileOptions options;
  const int rank = rank_for_file();
  std::string path;
  {
    std::lock_guard lock(process_mutex());
    ProcessProfile& process = process_profile();
    if (!process.profile) return;
    profile = std::move(process.profile);
    options = process.options;
    path = trace_path(process, rank);
  }
  if (path != options.path_prefix + std::to_string(rank) + ".json")
    std::fprintf(stderr,
                 "[ember profiler] rank %d: %s%d.json holds this process's earlier profile; this one is in %s\n", rank,
                 options.path_prefix.c_str(), rank, path.c_str());
  // The trace says the rank its file is named after (a job without a process group: RANK).
  if (detail::process_rank() < 0) set_process_rank(rank);
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ignored;
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  try {
    profile->export_chrome_trace(path);
  } catch (const std::exception& error) {
    // At exit there is no caller to throw to: say it and go on.
    std::fprintf(stderr, "[ember profiler] rank %d: %s\n", rank, error.what());
    return;
  }
  {
    std::lock_guard lock(process_mutex());
    process_profile().written.insert(path);
  }
  if (options.print_table)
    std::fprintf(stderr, "%s",
                 fmt::format("[ember profiler] rank {}: trace in {}\n{}", rank, path, profile->table()).c_str());
}

}  // namespace ember::profiler
