// The JSON-lines and CSV trackers (see trackers.h) and the file handling they
// share: the run's directory, whole-line flushed writes, files replaced by
// rename. Note [Tracker files] in distributed/README.md.
// Tests: tests/distributed/test_trackers.cpp.
#include "distributed/accelerator/trackers.h"

#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "core/error.h"

namespace ember::distributed {

namespace {

constexpr const char* kConfigName = "config.json";

// <logging_dir>/<project_name>, created with its parents.
std::filesystem::path make_run_directory(std::string_view tracker, const TrackerOptions& options) {
  EMBER_CHECK(!options.project_name.empty(), "{}: the project name is empty", tracker);
  std::filesystem::path directory = options.logging_dir / options.project_name;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  EMBER_CHECK(!error && std::filesystem::is_directory(directory), "{}: cannot create the directory '{}': {}", tracker,
              directory.string(), error ? error.message() : "a file is in the way");
  return directory;
}

std::function<double()> clock_or_system(std::function<double()> clock) {
  if (clock) return clock;
  return [] { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); };
}

// A metrics file, appended to: never through a symbolic link, only a regular
// file, emptied when `append` is false.
FileDescriptor open_for_writing(const std::filesystem::path& path, std::string_view tracker, bool append) {
  // One writer per metrics file: a second tracker on it (a name given twice
  // in log_with, two runs of one project name) wrote over the first one's
  // lines at its own offset. An flock, held while the descriptor lives and
  // taken before the file is emptied, refuses the second; O_APPEND keeps
  // every line whole at the end.
  FileDescriptor file = open_log_file(tracker, path, /*append=*/true);
  EMBER_CHECK(::flock(file.get(), LOCK_EX | LOCK_NB) == 0,
              "{}: '{}' is being written by another tracker (of this process or another); give each run a project "
              "name of its own",
              tracker, path.string());
  EMBER_CHECK(append || ::ftruncate(file.get(), 0) == 0, "{}: cannot empty '{}': {}", tracker, path.string(),
              std::strerror(errno));
  return file;
}

// Writes `text` with write(2), unbuffered, so that a killed run keeps it.
void write_flushed(const FileDescriptor& file, std::string_view text, const std::filesystem::path& path,
                   std::string_view tracker) {
  write_exactly(tracker, file.get(), text.data(), text.size(), path.string());
}

// Replaces `path` by a file holding `text`: written to a new temporary beside
// it, then renamed over it, so that a reader (or a kill) sees the old file or
// the new one (write_file_atomically, which never writes through a link).
void replace_file(const std::filesystem::path& path, std::string_view text, std::string_view tracker) {
  write_file_atomically(tracker, path, text);
}

void write_config(const std::filesystem::path& directory, const nlohmann::json& config, std::string_view tracker) {
  EMBER_CHECK(config.is_object(), "{}::store_init_configuration: the configuration must be a JSON object, got {}",
              tracker, config.type_name());
  replace_file(directory / kConfigName, config.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
               tracker);
}

void check_names(const TrackerValues& values, std::string_view tracker) {
  for (const auto& [name, value] : values) {
    EMBER_CHECK(!name.empty(), "{}::log: a value has an empty name", tracker);
    EMBER_CHECK(name != "step" && name != "time",
                "{}::log: '{}' is the tracker's own field; pass the step as log's step argument", tracker, name);
  }
}

void check_open(const FileDescriptor& file, const std::filesystem::path& path, std::string_view tracker) {
  EMBER_CHECK(file.get() >= 0, "{}::log: the tracker writing '{}' is finished", tracker, path.string());
}

nlohmann::ordered_json to_json(const TrackerValue& value) {
  return std::visit([](const auto& held) { return nlohmann::ordered_json(held); }, value);
}

std::string csv_escape(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// Numbers in fmt's shortest form that reads back exactly; Python's float()
// reads every one of them, "nan" and "inf" included.
std::string csv_field(const TrackerValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return csv_escape(*text);
  return std::visit([](const auto& number) { return fmt::format("{}", number); }, value);
}

std::string csv_line(const std::vector<std::string>& fields, size_t columns) {
  std::string line;
  for (size_t i = 0; i < columns; ++i) {
    if (i > 0) line += ',';
    if (i < fields.size()) line += fields[i];
  }
  return line + "\n";
}

}  // namespace

JsonLinesTracker::JsonLinesTracker(TrackerOptions options)
    : directory_(make_run_directory("JsonLinesTracker", options)),
      path_(directory_ / "metrics.jsonl"),
      clock_(clock_or_system(std::move(options.clock))) {
  file_ = open_for_writing(path_, "JsonLinesTracker", /*append=*/false);
}

void JsonLinesTracker::store_init_configuration(const nlohmann::json& config) {
  write_config(directory_, config, "JsonLinesTracker");
}

void JsonLinesTracker::log(const TrackerValues& values, std::optional<int64_t> step) {
  check_open(file_, path_, "JsonLinesTracker");
  check_names(values, "JsonLinesTracker");
  // Ordered, so that every line reads step, time, then the values by name.
  // JSON has no NaN or infinity: nlohmann writes those as null. Bytes that
  // are not UTF-8 become U+FFFD rather than losing the record.
  nlohmann::ordered_json record = nlohmann::ordered_json::object();
  if (step) record["step"] = *step;
  record["time"] = clock_();
  for (const auto& [name, value] : values) record[name] = to_json(value);
  std::string line = record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  write_flushed(file_, line, path_, "JsonLinesTracker");
}

void JsonLinesTracker::finish() { file_ = FileDescriptor(-1); }

CsvTracker::CsvTracker(TrackerOptions options)
    : directory_(make_run_directory("CsvTracker", options)),
      path_(directory_ / "metrics.csv"),
      clock_(clock_or_system(std::move(options.clock))),
      columns_{"step", "time"} {
  file_ = open_for_writing(path_, "CsvTracker", /*append=*/false);
}

void CsvTracker::store_init_configuration(const nlohmann::json& config) {
  write_config(directory_, config, "CsvTracker");
}

void CsvTracker::log(const TrackerValues& values, std::optional<int64_t> step) {
  check_open(file_, path_, "CsvTracker");
  check_names(values, "CsvTracker");
  for (const auto& [name, value] : values)
    if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) columns_.push_back(name);
  std::vector<std::string> row(columns_.size());
  if (step) row[0] = fmt::format("{}", *step);
  row[1] = csv_field(clock_());
  for (size_t column = 2; column < columns_.size(); ++column) {
    auto found = values.find(columns_[column]);
    if (found != values.end()) row[column] = csv_field(found->second);
  }
  rows_.push_back(std::move(row));
  if (columns_.size() != columns_in_file_) return rewrite();
  write_flushed(file_, csv_line(rows_.back(), columns_.size()), path_, "CsvTracker");
}

// A CSV file has one header, so a name not seen before means a new file:
// the wider header, and the earlier rows with empty fields in the new columns.
void CsvTracker::rewrite() {
  std::vector<std::string> header;
  for (const std::string& column : columns_) header.push_back(csv_escape(column));
  std::string text = csv_line(header, columns_.size());
  for (const std::vector<std::string>& row : rows_) text += csv_line(row, columns_.size());
  // Until the new file is in place the old one stays open, so a failed
  // rewrite leaves the tracker as it was and the next log tries again.
  replace_file(path_, text, "CsvTracker");
  file_ = open_for_writing(path_, "CsvTracker", /*append=*/true);
  columns_in_file_ = columns_.size();
}

void CsvTracker::finish() { file_ = FileDescriptor(-1); }

std::unique_ptr<Tracker> make_tracker(std::string_view name, TrackerOptions options) {
  if (name == "jsonl") return std::make_unique<JsonLinesTracker>(std::move(options));
  EMBER_CHECK(name == "csv", "make_tracker: unknown tracker '{}'; the known ones are jsonl, csv", name);
  return std::make_unique<CsvTracker>(std::move(options));
}

}  // namespace ember::distributed
