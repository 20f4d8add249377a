// See trace_merge.h.
#include "trace_merge.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::launch {
namespace {

// Traces of long runs are large; this only bounds a mistaken path.
constexpr int64_t kMaxTraceBytes = int64_t(4) << 30;

// The rank in a file name rank<r>.json, or -1 for any other name.
int rank_of_file_name(const std::string& name) {
  if (!name.starts_with("rank") || !name.ends_with(".json")) return -1;
  const std::string digits = name.substr(4, name.size() - 4 - 5);
  int rank = -1;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  return error == std::errc() && end == digits.data() + digits.size() && !digits.empty() ? rank : -1;
}

// All of the job's ranks and no other file: a trace without world_size is of
// a run of one process (EMBER_PROFILE without ember launch), whose rank0.json
// is the only file.
void check_world_size(const nlohmann::json& ember, const std::filesystem::path& path,
                      const std::map<int, std::filesystem::path>& files, const std::string& directory) {
  if (!ember.contains("world_size")) {
    std::vector<std::string> names;
    for (const auto& [rank, file] : files) names.push_back(file.filename().string());
    EMBER_CHECK(files.size() == 1,
                "{} names no world size (a run of one process, without ember launch), but {} holds {} rank files "
                "({}): files of two runs? remove the other run's",
                path.string(), directory, files.size(), fmt::join(names, ", "));
    return;
  }
  const int world_size = ember["world_size"].get<int>();
  for (int r = 0; r < world_size; ++r)
    EMBER_CHECK(files.count(r), "{} is one of {} ranks, but {} has no rank{}.json", path.string(), world_size,
                directory, r);
  EMBER_CHECK(int(files.size()) == world_size, "{} is one of {} ranks, but {} holds {} rank files (an earlier run's?)",
              path.string(), world_size, directory, files.size());
}

}  // namespace

nlohmann::json merge_traces(const std::string& directory) {
  std::map<int, std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const int rank = rank_of_file_name(entry.path().filename().string());
    if (rank < 0) continue;
    auto [place, added] = files.emplace(rank, entry.path());
    EMBER_CHECK(added, "{} and {} are both rank {}'s trace", place->second.string(),
                entry.path().string(), rank);
  }
  EMBER_CHECK(!error, "cannot list {}: {}", directory, error.message());
  EMBER_CHECK(!files.empty(), "no rank<r>.json in {} (run with EMBER_PROFILE={})", directory,
              directory);

  nlohmann::json events = nlohmann::json::array();
  nlohmann::json offsets = nlohmann::json::object();
  std::optional<std::pair<std::string, std::string>> job;  // (id, the file that says it)
  std::optional<std::string> without_job;                  // a file that names no job
  for (const auto& [file_rank, path] : files) {
    nlohmann::json trace;
    try {
      trace = nlohmann::json::parse(read_small_file("reading a trace", path, kMaxTraceBytes));
    } catch (const nlohmann::json::exception& failure) {
      EMBER_CHECK(false, "{} is not JSON: {}", path.string(), failure.what());
    }
    EMBER_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
                "{} has no traceEvents array", path.string());
    // A field of another type than ember writes (hand-made or damaged) is
    // named with its file, not left as nlohmann's bare type_error.
    try {
      const nlohmann::json ember = trace.value("ember", nlohmann::json::object());
      const int rank = ember.value("rank", file_rank);
      EMBER_CHECK(rank == file_rank, "{} holds rank {}'s trace", path.string(), rank);
      // Files of one job only, and all of its ranks (traces written by ember launch's workers say both).
      if (ember.contains("job")) {
        const std::string id = ember["job"].get<std::string>();
        if (!job) job.emplace(id, path.string());
        EMBER_CHECK(job->first == id,
                    "{} is from job {} but {} from job {} (an earlier run's files in {}? remove them)",
                    job->second, job->first, path.string(), id, directory);
      } else if (!without_job) {
        without_job = path.string();
      }
      // A run outside ember launch (EMBER_PROFILE alone) names no job: it cannot be told apart from
      // another such run, so it never merges with a launched job's files.
      EMBER_CHECK(!job || !without_job,
                  "{} is from job {} but {} names no job (a run without ember launch): the files are of two "
                  "runs; remove the earlier run's from {}",
                  job ? job->second : "", job ? job->first : "", without_job.value_or(""), directory);
      check_world_size(ember, path, files, directory);
      // Note [One clock for every rank]: this rank's clock minus rank 0's.
      const int64_t offset_ns = ember.value("clock_offset_ns", int64_t(0));
      offsets[std::to_string(rank)] = offset_ns;
      for (nlohmann::json& event : trace["traceEvents"]) {
        event["pid"] = rank;
        if (event.contains("ts")) event["ts"] = event["ts"].get<double>() - double(offset_ns) / 1000.0;
        events.push_back(std::move(event));
      }
    } catch (const nlohmann::json::exception& failure) {
      EMBER_CHECK(false, "{}: a field is not what ember writes ({}); is it a trace from EMBER_PROFILE?", path.string(),
                  failure.what());
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"ember", {{"merged_ranks", files.size()}, {"clock_offsets_ns", std::move(offsets)}}}};
}

std::string run_trace_merge(const TraceMergeOptions& options) {
  const std::string output =
      options.output.empty() ? (std::filesystem::path(options.directory) / "merged.json").string() : options.output;
  const nlohmann::json merged = merge_traces(options.directory);
  write_file_atomically("writing the merged trace", output, merged.dump() + "\n");
  return output;
}

}  // namespace ember::launch
