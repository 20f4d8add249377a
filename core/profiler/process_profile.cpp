// The process-wide profile (process_profile.h).
#include "core/profiler/process_profile.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "core/ember_variables.h"
#include "core/error.h"
#include "core/output_directory.h"
#include "core/profiler/profiler.h"
#include "core/profiler/recorder.h"

namespace ember::profiler {
namespace {

struct ProcessProfile {
  ProcessProfileOptions options;
  std::unique_ptr<Profile> profile;
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

}  // namespace

bool start_process_profile(ProcessProfileOptions options) {
  std::lock_guard lock(process_mutex());
  ProcessProfile& process = process_profile();
  if (process.profile) return false;
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
      // Absolute now, so a program that changes directory writes where it
      // was asked; checked now, so a run learns at its start that it cannot.
      std::error_code error;
      const std::filesystem::path absolute = std::filesystem::absolute(directory, error);
      try {
        prepare_output_directory("EMBER_PROFILE", absolute);
      } catch (const Error& cannot) {
        std::fprintf(stderr, "[ember profiler] no profile will be written: %s\n", cannot.what());
        return;
      }
      start_process_profile({.path_prefix = (absolute / "rank").string(),
                             .record = {.record_shapes = flag_variable("EMBER_PROFILE_SHAPES").value_or(false)}});
    } else if (const char* prefix = environment("EMBER_DDP_TRACE")) {
      // DDP's trace of old: backward nodes and communication only.
      start_process_profile({.path_prefix = std::string(prefix) + ".rank",
                             .record = {.record_ops = false, .record_steps = false},
                             .print_table = false});
    }
  });
}

std::string process_profile_path() {
  std::lock_guard lock(process_mutex());
  ProcessProfile& process = process_profile();
  if (!process.profile) return "";
  return process.options.path_prefix + std::to_string(rank_for_file()) + ".json";
}

void finish_process_profile() {
  std::unique_ptr<Profile> profile;
  ProcessProfileOptions options;
  {
    std::lock_guard lock(process_mutex());
    profile = std::move(process_profile().profile);
    options = process_profile().options;
  }
  if (!profile) return;
  const int rank = rank_for_file();
  // The trace says the rank its file is named after (a job without a process group: RANK).
  if (detail::process_rank() < 0) set_process_rank(rank);
  const std::string path = options.path_prefix + std::to_string(rank) + ".json";
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
  if (options.print_table)
    std::fprintf(stderr, "%s",
                 fmt::format("[ember profiler] rank {}: trace in {}\n{}", rank, path, profile->table()).c_str());
}

}  // namespace ember::profiler
