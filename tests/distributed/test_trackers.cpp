// The JSON-lines and CSV trackers: exact file contents after each log call
// (so each line is flushed as it is logged), a CSV header that widens when a
// new name appears, escaping, config.json, errors naming the paths, and
// scripts/plot_metrics.py reading both kinds of file.
#include "distributed/accelerator/trackers.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/file_helpers.h"
#include "process_runner.h"
#include "support/test_support.h"

namespace ember::distributed {
namespace {

namespace fs = std::filesystem;
using ember::testing::ScratchDirectory;

std::string read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.is_open()) << path;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// 100.5, 101, 101.5, ...: a clock that makes "time" predictable.
std::function<double()> ticking_clock() {
  return [now = 100.0]() mutable { return now += 0.5; };
}

TrackerOptions options_in(const ScratchDirectory& scratch, std::string project = "run") {
  return {.project_name = std::move(project), .logging_dir = scratch.file(""), .clock = ticking_clock()};
}

TEST(Trackers, JsonLinesWritesOneFlushedRecordPerLog) {
  ScratchDirectory scratch;
  JsonLinesTracker tracker(options_in(scratch));
  EXPECT_EQ(tracker.name(), "jsonl");
  EXPECT_EQ(tracker.path(), fs::path(scratch.file("")) / "run" / "metrics.jsonl");
  EXPECT_EQ(read_file(tracker.path()), "");

  tracker.log({{"loss", 0.5}, {"epoch", 1}}, 10);
  std::string expected = R"({"step":10,"time":100.5,"epoch":1,"loss":0.5})"
                         "\n";
  EXPECT_EQ(read_file(tracker.path()), expected);  // readable before finish: flushed

  tracker.log({{"phase", "eval"}, {"accuracy", 0.875}});  // no step
  expected += R"({"time":101.0,"accuracy":0.875,"phase":"eval"})"
              "\n";
  EXPECT_EQ(read_file(tracker.path()), expected);

  // Strings escaped as JSON; integers exact beyond a double's 53 bits; JSON
  // has no NaN, so a NaN is null.
  tracker.log({{"note", "say \"hi\"\n\tok"}, {"loss", std::nan("")}, {"tokens", int64_t(9007199254740993)}}, 11);
  expected += R"({"step":11,"time":101.5,"loss":null,"note":"say \"hi\"\n\tok","tokens":9007199254740993})"
              "\n";
  EXPECT_EQ(read_file(tracker.path()), expected);

  // A flag stays a flag (it was the integer 1), and text stays text beside it.
  // Catches: TrackerValue without its bool alternative.
  tracker.log({{"converged", true}, {"label", "x"}}, 11);
  expected += R"({"step":11,"time":102.0,"converged":true,"label":"x"})"
              "\n";
  EXPECT_EQ(read_file(tracker.path()), expected);

  // Text that is not UTF-8 (a byte 0xff) is kept as U+FFFD, not lost.
  tracker.log({{"note", "bad \xff byte"}}, 12);
  expected += "{\"step\":12,\"time\":102.5,\"note\":\"bad \xEF\xBF\xBD byte\"}\n";
  EXPECT_EQ(read_file(tracker.path()), expected);

  tracker.finish();
  EXPECT_EMBER_ERROR(tracker.log({{"loss", 0.1}}, 13), "is finished");
  EXPECT_EQ(read_file(tracker.path()), expected);
}

TEST(Trackers, CsvWidensItsHeaderWhenANameIsNew) {
  ScratchDirectory scratch;
  CsvTracker tracker(options_in(scratch));
  EXPECT_EQ(tracker.name(), "csv");
  EXPECT_EQ(tracker.path(), fs::path(scratch.file("")) / "run" / "metrics.csv");

  tracker.log({{"loss", 0.5}}, 1);
  EXPECT_EQ(read_file(tracker.path()), "step,time,loss\n1,100.5,0.5\n");
  tracker.log({{"loss", 0.25}}, 2);
  EXPECT_EQ(read_file(tracker.path()), "step,time,loss\n1,100.5,0.5\n2,101,0.25\n");

  // A new name: one header for the whole file, earlier rows with empty fields.
  tracker.log({{"accuracy", 0.75}, {"loss", 0.125}}, 3);
  EXPECT_EQ(read_file(tracker.path()),
            "step,time,loss,accuracy\n"
            "1,100.5,0.5,\n"
            "2,101,0.25,\n"
            "3,101.5,0.125,0.75\n");

  // RFC 4180: a field with a comma, a quote or a line break is quoted and its
  // quotes doubled, names as well as values. No step: an empty field.
  tracker.log({{"note", "a,b \"c\"\nd"}, {"f1,macro", 1}, {"loss", INFINITY}});
  tracker.log({{"loss", std::nan("")}}, 5);
  EXPECT_EQ(read_file(tracker.path()),
            "step,time,loss,accuracy,\"f1,macro\",note\n"
            "1,100.5,0.5,,,\n"
            "2,101,0.25,,,\n"
            "3,101.5,0.125,0.75,,\n"
            ",102,inf,,1,\"a,b \"\"c\"\"\nd\"\n"
            "5,102.5,nan,,,\n");
  EXPECT_FALSE(fs::exists(tracker.path().string() + ".tmp"));

  tracker.finish();
  EXPECT_EMBER_ERROR(tracker.log({{"loss", 0.1}}, 6), "is finished");
}

TEST(Trackers, ConfigurationGoesToConfigJson) {
  ScratchDirectory scratch;
  nlohmann::json config = {{"lr", 0.001}, {"batch_size", 64}, {"model", {{"layers", {784, 10}}}}};
  std::string expected =
      "{\n"
      "  \"batch_size\": 64,\n"
      "  \"lr\": 0.001,\n"
      "  \"model\": {\n"
      "    \"layers\": [\n"
      "      784,\n"
      "      10\n"
      "    ]\n"
      "  }\n"
      "}\n";
  JsonLinesTracker json_lines(options_in(scratch, "a"));
  json_lines.store_init_configuration(config);
  EXPECT_EQ(read_file(fs::path(scratch.file("a")) / "config.json"), expected);
  CsvTracker csv(options_in(scratch, "b"));
  csv.store_init_configuration(config);
  EXPECT_EQ(read_file(fs::path(scratch.file("b")) / "config.json"), expected);
  csv.store_init_configuration({{"name", "bad \xff byte"}});
  EXPECT_EQ(read_file(fs::path(scratch.file("b")) / "config.json"), "{\n  \"name\": \"bad \xEF\xBF\xBD byte\"\n}\n");
  EXPECT_EMBER_ERROR(csv.store_init_configuration(nlohmann::json::array({1, 2})),
                     "the configuration must be a JSON object, got array");
}

TEST(Trackers, MakeTrackerKnowsBothByName) {
  ScratchDirectory scratch;
  std::unique_ptr<Tracker> json_lines = make_tracker("jsonl", options_in(scratch));
  std::unique_ptr<Tracker> csv = make_tracker("csv", options_in(scratch));
  EXPECT_EQ(json_lines->name(), "jsonl");
  EXPECT_EQ(csv->name(), "csv");
  EXPECT_TRUE(fs::exists(fs::path(scratch.file("run")) / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(fs::path(scratch.file("run")) / "metrics.csv"));
  EXPECT_EMBER_ERROR(make_tracker("tensorboard", options_in(scratch)),
                     "unknown tracker 'tensorboard'; the known ones are jsonl, csv");
}

// Catches: two trackers on one metrics file (two runs of one project name),
// each writing at its own offset over the other's lines ('{"step":1,...,
// "accuracy":0{"step":2,...').
TEST(Trackers, ASecondWriterOfOneMetricsFileIsRefused) {
  ScratchDirectory scratch;
  for (std::string kind : {"jsonl", "csv"}) {
    SCOPED_TRACE(kind);
    std::unique_ptr<Tracker> first = make_tracker(kind, options_in(scratch, "shared_" + kind));
    first->log({{"loss", 0.5}}, 1);
    EXPECT_EMBER_ERROR(make_tracker(kind, options_in(scratch, "shared_" + kind)),
                       "is being written by another tracker (of this process or another)");
    first->log({{"loss", 0.25}}, 2);  // the refused one emptied nothing
    const std::string text = read_file(fs::path(scratch.file("shared_" + kind)) / ("metrics." + kind));
    EXPECT_NE(text.find("0.5"), std::string::npos) << text;
    EXPECT_NE(text.find("0.25"), std::string::npos) << text;
    first->finish();
    EXPECT_NO_THROW(make_tracker(kind, options_in(scratch, "shared_" + kind)));  // finished: the file is free
  }
}

TEST(Trackers, BadNamesAndPathsAreErrorsNamingThem) {
  ScratchDirectory scratch;
  for (std::string kind : {"jsonl", "csv"}) {
    SCOPED_TRACE(kind);
    EXPECT_EMBER_ERROR(make_tracker(kind, {.project_name = ""}), "the project name is empty");

    // The logging directory is a file.
    ember::testing::write_file(scratch.file("a_file"), "x");
    EXPECT_EMBER_ERROR(make_tracker(kind, {.project_name = "run", .logging_dir = scratch.file("a_file")}),
                       "cannot create the directory '" + scratch.file("a_file") + "/run'");

    // The metrics file's place is taken by a directory.
    std::string taken = kind == "jsonl" ? "metrics.jsonl" : "metrics.csv";
    fs::create_directories(fs::path(scratch.file("taken")) / taken);
    EXPECT_EMBER_ERROR(make_tracker(kind, options_in(scratch, "taken")),
                       "cannot open '" + (fs::path(scratch.file("taken")) / taken).string() + "' for writing");

    std::unique_ptr<Tracker> tracker = make_tracker(kind, options_in(scratch, "names_" + kind));
    EXPECT_EMBER_ERROR(tracker->log({{"step", 3}}), "'step' is the tracker's own field");
    EXPECT_EMBER_ERROR(tracker->log({{"time", 1.0}}), "'time' is the tracker's own field");
    EXPECT_EMBER_ERROR(tracker->log({{"", 1.0}}), "a value has an empty name");
  }
}

// A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) fails every write past
// it with EFBIG, as a full disk fails them with ENOSPC. (A link to /dev/full
// did this before; trackers no longer write through links.)
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : previous_signal_(std::signal(SIGXFSZ, SIG_IGN)) {
    ::getrlimit(RLIMIT_FSIZE, &previous_);
    rlimit limit = previous_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &previous_);
    std::signal(SIGXFSZ, previous_signal_);
  }

 private:
  rlimit previous_{};
  void (*previous_signal_)(int);
};

TEST(Trackers, AFailedWriteIsAnErrorNamingTheFile) {
  ScratchDirectory scratch;
  JsonLinesTracker json_lines(options_in(scratch, "full"));
  {
    FileSizeLimit limit(10);
    EXPECT_EMBER_ERROR(json_lines.log({{"loss", 0.5}}, 1),
                       "cannot write '" + (fs::path(scratch.file("full")) / "metrics.jsonl").string() + "'");
  }

  // A CSV rewrite that fails leaves the file as it was; the next log writes
  // the wider header with every row.
  CsvTracker csv(options_in(scratch, "rewrite"));
  csv.log({{"loss", 0.5}}, 1);
  {
    FileSizeLimit limit(30);
    EXPECT_EMBER_ERROR(csv.log({{"accuracy", 0.5}}, 2), "cannot write '" + csv.path().string() + ".tmp.");
  }
  EXPECT_EQ(read_file(csv.path()), "step,time,loss\n1,100.5,0.5\n");
  csv.log({{"loss", 0.25}}, 3);
  EXPECT_EQ(read_file(csv.path()), "step,time,loss,accuracy\n1,100.5,0.5,\n2,101,,0.5\n3,101.5,0.25,\n");
}

// scripts/plot_metrics.py on what both trackers wrote: it draws a PNG, and
// reads exactly the values logged (tests/distributed/check_plot_metrics.py).
// Mutation caught: opening the metrics file as before (std::ofstream, which
// follows links and truncates) empties and fills the planted link's target;
// a FIFO there would block the tracker's construction.
TEST(Trackers, MetricsFilesAreNeverWrittenThroughALinkOrIntoAFifo) {
  ScratchDirectory scratch;
  const fs::path run = scratch.path() / "run";
  fs::create_directories(run);
  const fs::path outside = scratch.path() / "outside";
  std::ofstream(outside) << "precious";
  fs::create_symlink(outside, run / "metrics.jsonl");
  EXPECT_EMBER_ERROR(JsonLinesTracker(options_in(scratch)), "is a symbolic link");
  ASSERT_EQ(::mkfifo((run / "metrics.csv").c_str(), 0600), 0);
  EXPECT_EMBER_ERROR(CsvTracker(options_in(scratch)), (run / "metrics.csv").string());
  EXPECT_EQ(read_file(outside), "precious");
}

TEST(Trackers, PlotScriptReadsBothFiles) {
  ScratchDirectory scratch;
  std::vector<std::unique_ptr<Tracker>> trackers;
  trackers.push_back(make_tracker("jsonl", options_in(scratch)));
  trackers.push_back(make_tracker("csv", options_in(scratch)));
  for (auto& tracker : trackers) {
    tracker->log({{"train_loss", 1.0}, {"lr", 0.1}, {"epoch", 0}}, 1);
    tracker->log({{"train_loss", 0.5}, {"lr", 0.05}, {"epoch", 0}}, 2);
    tracker->log({{"test_loss", 0.75}, {"test_accuracy", 0.5}, {"phase", "eval"}, {"epoch", 0}}, 2);
    tracker->log({{"train_loss", std::nan("")}});  // no step: its position, 3
    tracker->finish();
  }
  // {panel: {curve: [[steps], [values]]}}; "epoch" and "phase" are not curves.
  std::string expected = R"({"loss": {"train_loss": [[1, 2, 3], [1.0, 0.5, null]], "test_loss": [[2], [0.75]]},
                             "accuracy": {"test_accuracy": [[2], [0.5]]},
                             "lr": {"lr": [[1, 2], [0.1, 0.05]]}})";
  ember::testing::write_file(scratch.file("expected.json"), expected);
  for (std::string file : {"metrics.jsonl", "metrics.csv"}) {
    SCOPED_TRACE(file);
    std::string source = EMBER_SOURCE_DIR;
    ember::test::ProcessResult result = ember::test::run_process(
        {"/usr/bin/python3", source + "/tests/distributed/check_plot_metrics.py", source + "/scripts/plot_metrics.py",
         scratch.file("run/" + file), scratch.file("expected.json"), scratch.file(file + ".png")},
        std::chrono::seconds(180));
    EXPECT_FALSE(result.timed_out);
    EXPECT_EQ(result.exit_code, 0) << result.output;
  }
}

}  // namespace
}  // namespace ember::distributed
