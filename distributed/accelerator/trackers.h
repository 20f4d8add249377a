// Experiment trackers: where the Accelerator's log() sends metrics, as
// Accelerate's GeneralTracker and its subclasses. The Accelerator creates
// them (init_trackers) and calls them on the main process only; these
// classes just write files, under <logging_dir>/<project_name>/:
//
//   JsonLinesTracker   metrics.jsonl   {"step":3,"time":1733256000.25,"loss":0.41,"phase":"train"}
//   CsvTracker         metrics.csv     step,time,loss,phase
//   (both)             config.json     the run's hyper-parameters
//
// scripts/plot_metrics.py plots either metrics file. Every log call is one
// line, written whole and flushed, so a run that is killed keeps every metric
// logged before (Note [Tracker files] in distributed/README.md). A metrics
// file is started afresh when its tracker is made. No file is written
// through a symbolic link, nor anything but a regular file (a link or FIFO at
// metrics.jsonl is an error naming it); config.json and a rewritten
// metrics.csv replace the old file through a new temporary (core/file_io.h).
// Tests: tests/distributed/test_trackers.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/file_io.h"

namespace ember::distributed {

// A logged value: a flag, a count, a measurement or a label. bool is its own
// alternative: without it a logged `true` became the integer 1.
using TrackerValue = std::variant<bool, int64_t, double, std::string>;
using TrackerValues = std::map<std::string, TrackerValue>;

struct TrackerOptions {
  std::string project_name;                // the run's folder under logging_dir; required
  std::filesystem::path logging_dir = ".";
  // Each record's "time": seconds since the Unix epoch. Empty: the system
  // clock (a fixed one makes the files reproducible).
  std::function<double()> clock = nullptr;
};

class Tracker {
 public:
  virtual ~Tracker() = default;
  // The name make_tracker knows it by.
  virtual std::string_view name() const = 0;
  // Writes the run's configuration (a JSON object) to config.json.
  virtual void store_init_configuration(const nlohmann::json& config) = 0;
  // One record: "step" (when given), "time", then the values by name. The
  // names "step" and "time" are the tracker's own and not allowed in values.
  virtual void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt) = 0;
  // Closes the files; logging afterwards is an error.
  virtual void finish() = 0;
};

class JsonLinesTracker : public Tracker {
 public:
  explicit JsonLinesTracker(TrackerOptions options);
  std::string_view name() const override { return "jsonl"; }
  void store_init_configuration(const nlohmann::json& config) override;
  void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt) override;
  void finish() override;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path directory_;
  std::filesystem::path path_;
  std::function<double()> clock_;
  FileDescriptor file_{-1};  // the metrics file, appended to; -1 once finished
};

// RFC 4180 fields (quoted when they hold a comma, a quote or a line break;
// quotes doubled), records ended by "\n". The header is the union of the
// names logged so far, in the order they first appeared; see Note [Tracker
// files] for what a new name does.
class CsvTracker : public Tracker {
 public:
  explicit CsvTracker(TrackerOptions options);
  std::string_view name() const override { return "csv"; }
  void store_init_configuration(const nlohmann::json& config) override;
  void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt) override;
  void finish() override;
  const std::filesystem::path& path() const { return path_; }

 private:
  void rewrite();

  std::filesystem::path directory_;
  std::filesystem::path path_;
  std::function<double()> clock_;
  FileDescriptor file_{-1};  // the metrics file, appended to; -1 once finished
  std::vector<std::string> columns_;              // step, time, then the values' names
  std::vector<std::vector<std::string>> rows_;    // every record's fields, already escaped
  size_t columns_in_file_ = 0;                    // how many columns the file's header has
};

// "jsonl" or "csv"; any other name is an error listing these.
std::unique_ptr<Tracker> make_tracker(std::string_view name, TrackerOptions options);

}  // namespace ember::distributed
