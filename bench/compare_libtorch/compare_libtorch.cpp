// compare_libtorch: ember against its peers on the same workloads, each
// framework in its own process. Runs compare_worker_ember and
// compare_worker_libtorch (found next to this program) and, with
// --torch2-python, PyTorch 2 (worker_torch2.py: the training rows, eager and
// torch.compile, each with a tuned malloc and with glibc's default) in
// rotating rounds, each workload in a fresh process; takes each workload's
// median over the rounds and prints the speed ratios (peer time / ember time:
// > 1 means ember is faster), each process's peak resident memory, and for the
// training rows steps/s and the losses of their first steps.
// Run by scripts/bench.sh; figures go to bench/RESULTS.md.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace ember::compare {
namespace {

struct Options {
  int threads = 1;
  int rounds = 5;
  double min_seconds = 0.2;
  int loss_steps = 5;
  std::string filter;
  std::string openblas_dir = EMBER_OPENBLAS_OPENMP_DIR;
  std::string torch2_python;
  std::string tuned_malloc = EMBER_TUNED_MALLOC;
  std::vector<std::string> frameworks;
  bool json = false;
  std::string json_path;
};

// One framework's worker: the command that starts it, the environment it runs
// in, and what it says it is (its --list's "framework").
struct Worker {
  std::string framework;
  std::vector<std::string> command;
  std::vector<std::string> environment;
  std::string description;
  std::vector<std::string> workloads;
};

std::string variable_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// This process's environment, minus `unset`, with `set` applied.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& set,
                                          const std::vector<std::string>& unset) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string name = variable_name(*entry);
    bool dropped = set.count(name) > 0 || std::find(unset.begin(), unset.end(), name) != unset.end();
    if (!dropped) result.emplace_back(*entry);
  }
  for (const auto& [name, value] : set) result.push_back(name + "=" + value);
  return result;
}

// Every worker gets passive OpenMP waits (a spinning pool steals the other
// process's core, DESIGN.md) and the same thread count. ember otherwise runs in
// the plain environment: its caching allocator needs no tuning.
std::map<std::string, std::string> common_settings(const Options& options) {
  return {{"OMP_WAIT_POLICY", "passive"}, {"OMP_NUM_THREADS", std::to_string(options.threads)}};
}

// libtorch at its best (DESIGN.md, "peers for benchmarks"): glibc malloc keeps
// large buffers instead of returning them to the OS (3-4x faster steps here),
// the OpenMP build of OpenBLAS comes first on the library path (the default
// pthread build fights OpenMP for the cores), and no forced OpenBLAS core type
// or cache size.
std::map<std::string, std::string> libtorch_settings(const Options& options) {
  std::map<std::string, std::string> settings = common_settings(options);
  settings["GLIBC_TUNABLES"] = "glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=4294967296";
  if (!options.openblas_dir.empty()) {
    const char* existing = std::getenv("LD_LIBRARY_PATH");
    settings["LD_LIBRARY_PATH"] =
        existing != nullptr && *existing != '\0' ? options.openblas_dir + ":" + existing : options.openblas_dir;
  }
  return settings;
}
const std::vector<std::string> kLibtorchUnset = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"};

// PyTorch 2 with a tuned malloc: jemalloc preloaded with the settings of
// PyTorch's CPU performance guide (large buffers never go back to the OS, as
// the GLIBC_TUNABLES above do for libtorch). Its default-malloc twin runs on
// plain glibc malloc.
const char* const kTunedMallocConf =
    "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:9000000000,"
    "muzzy_decay_ms:9000000000";
std::map<std::string, std::string> torch2_settings(const Options& options, bool tuned_malloc) {
  std::map<std::string, std::string> settings = common_settings(options);
  if (tuned_malloc) {
    settings["LD_PRELOAD"] = options.tuned_malloc;
    settings["MALLOC_CONF"] = kTunedMallocConf;
  }
  return settings;
}
const std::vector<std::string> kTorch2Unset = {"LD_PRELOAD", "MALLOC_CONF", "GLIBC_TUNABLES", "PYTHONPATH"};

std::filesystem::path program_directory() { return std::filesystem::read_symlink("/proc/self/exe").parent_path(); }

bool selected(const Options& options, const std::string& framework) {
  return options.frameworks.empty() ||
         std::find(options.frameworks.begin(), options.frameworks.end(), framework) != options.frameworks.end();
}

// ember first: every ratio is against it.
std::vector<Worker> make_workers(const Options& options) {
  std::filesystem::path directory = program_directory();
  std::vector<Worker> workers = {
      {"ember", {(directory / "compare_worker_ember").string()}, environment_with(common_settings(options), {}), "", {}},
      {"libtorch",
       {(directory / "compare_worker_libtorch").string()},
       environment_with(libtorch_settings(options), kLibtorchUnset),
       "",
       {}}};
  if (!options.torch2_python.empty()) {
    for (bool compiled : {false, true}) {
      for (bool tuned_malloc : {true, false}) {
        std::string name = std::string("torch2") + (compiled ? "_compile" : "") + (tuned_malloc ? "" : "_glibc");
        std::vector<std::string> command = {options.torch2_python, EMBER_TORCH2_WORKER};
        if (compiled) command.push_back("--compile");
        workers.push_back({name, command, environment_with(torch2_settings(options, tuned_malloc), kTorch2Unset),
                           "", {}});
      }
    }
  }
  std::vector<Worker> chosen;
  for (Worker& worker : workers) {
    if (worker.framework == "ember" || selected(options, worker.framework)) chosen.push_back(std::move(worker));
  }
  return chosen;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (const std::string& s : strings) result.push_back(const_cast<char*>(s.c_str()));
  result.push_back(nullptr);
  return result;
}

// Runs the worker in its own process (posix_spawnp) and returns what it
// printed on stdout; its stderr passes through. Throws when it cannot start or
// fails.
std::string run_worker(const Worker& worker, const std::vector<std::string>& arguments) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  std::vector<std::string> argv_strings = worker.command;
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv = c_strings(argv_strings), envp = c_strings(worker.environment);
  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawned != 0) {
    close(pipe_ends[0]);
    throw std::runtime_error("cannot start " + worker.command.front() + ": " + std::strerror(spawned));
  }
  std::string output;
  char buffer[4096];
  for (;;) {
    ssize_t count = read(pipe_ends[0], buffer, sizeof buffer);
    if (count > 0) output.append(buffer, size_t(count));
    if (count == 0 || (count < 0 && errno != EINTR)) break;
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(worker.framework + " worker (" + worker.command.back() + ") failed (" +
                             (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                : "signal " + std::to_string(WTERMSIG(status))) +
                             ")");
  }
  return output;
}

// Per framework, per workload: the worker's result object of each round.
using Samples = std::map<std::string, std::map<std::string, std::vector<nlohmann::json>>>;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Asks each worker for its workloads and its own description; returns the
// names any worker lists (ember's order, then the others') that contain the
// filter.
std::vector<std::string> list_workloads(std::vector<Worker>& workers, const std::string& filter) {
  std::vector<std::string> names;
  for (Worker& worker : workers) {
    nlohmann::json listing = nlohmann::json::parse(run_worker(worker, {"--list"}));
    worker.description = listing.value("framework", worker.framework);
    for (const std::string& name : listing.at("workloads").get<std::vector<std::string>>()) {
      if (name.find(filter) == std::string::npos) continue;
      worker.workloads.push_back(name);
      if (!contains(names, name)) names.push_back(name);
    }
  }
  return names;
}

// Each workload runs in a fresh worker process, so its peak resident memory
// is its own and no workload inherits another's caches. The order of the
// frameworks rotates from round to round, so drift in the machine's state
// (thermal, other processes) favours none of them.
Samples run_rounds(const Options& options, const std::vector<Worker>& workers,
                   const std::vector<std::string>& workloads) {
  Samples samples;
  for (int round = 0; round < options.rounds; ++round) {
    std::fprintf(stderr, "round %d/%d\n", round + 1, options.rounds);
    for (const std::string& name : workloads) {
      std::vector<std::string> arguments = {"--threads", std::to_string(options.threads), "--min-time",
                                            std::to_string(options.min_seconds), "--loss-steps",
                                            std::to_string(options.loss_steps), "--name", name};
      for (size_t turn = 0; turn < workers.size(); ++turn) {
        const Worker& worker = workers[(size_t(round) + turn) % workers.size()];
        if (!contains(worker.workloads, name)) continue;
        nlohmann::json report;
        try {
          report = nlohmann::json::parse(run_worker(worker, arguments));
        } catch (const std::runtime_error& error) {
          // A peer that crashes on one row (torch.compile can) leaves that row
          // n/a in the tables; the other rows and rounds go on.
          std::fprintf(stderr, "compare_libtorch: %s on %s: %s\n", worker.framework.c_str(), name.c_str(), error.what());
          continue;
        }
        for (const nlohmann::json& result : report.at("results")) {
          if (result.contains("ns_per_step")) samples[worker.framework][result.at("name")].push_back(result);
        }
      }
    }
  }
  return samples;
}

const std::vector<nlohmann::json>* results_of(const Samples& samples, const std::string& framework,
                                              const std::string& workload) {
  auto by_framework = samples.find(framework);
  if (by_framework == samples.end()) return nullptr;
  auto found = by_framework->second.find(workload);
  return found == by_framework->second.end() || found->second.empty() ? nullptr : &found->second;
}

// The median over the rounds of one numeric field of the results.
std::optional<double> median(const Samples& samples, const std::string& framework, const std::string& workload,
                             const std::string& field = "ns_per_step") {
  const std::vector<nlohmann::json>* results = results_of(samples, framework, workload);
  if (results == nullptr) return std::nullopt;
  std::vector<double> values;
  for (const nlohmann::json& result : *results) values.push_back(result.value(field, 0.0));
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

// The peer's median time over ember's: > 1 means ember is faster.
std::optional<double> speed_ratio(const Samples& samples, const std::string& peer, const std::string& workload) {
  std::optional<double> ember = median(samples, "ember", workload), other = median(samples, peer, workload);
  if (!ember || !other) return std::nullopt;
  return *other / *ember;
}

// A training row's losses over its first steps (the first round's: every
// round starts from the same parameters).
std::vector<double> losses(const Samples& samples, const std::string& framework, const std::string& workload) {
  const std::vector<nlohmann::json>* results = results_of(samples, framework, workload);
  if (results == nullptr || !results->front().contains("losses")) return {};
  return results->front().at("losses").get<std::vector<double>>();
}

std::string format_time(std::optional<double> ns) {
  if (!ns) return "n/a";
  char text[32];
  if (*ns < 1e3) std::snprintf(text, sizeof text, "%.1f ns", *ns);
  else if (*ns < 1e6) std::snprintf(text, sizeof text, "%.2f us", *ns * 1e-3);
  else std::snprintf(text, sizeof text, "%.2f ms", *ns * 1e-6);
  return text;
}

std::string format_number(std::optional<double> value, const char* format) {
  if (!value) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

std::optional<double> mebibytes(std::optional<double> bytes) {
  if (!bytes) return std::nullopt;
  return *bytes / double(1 << 20);
}

// One table: a row per workload that any framework measured, a column per
// framework; `cell` formats one framework's figure for one workload.
template <class Cell>
void print_columns(const char* title, const std::vector<Worker>& columns, const std::vector<std::string>& workloads,
                   const Samples& samples, Cell&& cell) {
  std::printf("\n%s\n%-30s", title, "workload");
  for (const Worker& worker : columns) std::printf(" %21s", worker.framework.c_str());
  std::printf("\n");
  for (const std::string& name : workloads) {
    bool measured = false;
    for (const Worker& worker : columns) measured = measured || results_of(samples, worker.framework, name);
    if (!measured) continue;
    std::printf("%-30s", name.c_str());
    for (const Worker& worker : columns) std::printf(" %21s", cell(worker.framework, name).c_str());
    std::printf("\n");
  }
}

void print_table(const Options& options, const std::vector<Worker>& workers, const Samples& samples,
                 const std::vector<std::string>& workloads) {
  std::printf("ember vs its peers: %d thread(s), median of %d rounds (speed ratio > 1: ember faster)\n",
              options.threads, options.rounds);
  for (const Worker& worker : workers) {
    std::printf("  %-22s %s\n", worker.framework.c_str(), worker.description.c_str());
  }
  std::vector<Worker> peers(workers.begin() + 1, workers.end());
  print_columns("time per step", workers, workloads, samples, [&](const std::string& framework, const std::string& name) {
    return format_time(median(samples, framework, name));
  });
  print_columns("speed ratio: peer time / ember time", peers, workloads, samples,
                [&](const std::string& framework, const std::string& name) {
                  return format_number(speed_ratio(samples, framework, name), "%.3f");
                });
  print_columns("peak resident MiB", workers, workloads, samples,
                [&](const std::string& framework, const std::string& name) {
                  return format_number(mebibytes(median(samples, framework, name, "peak_rss_bytes")), "%.0f");
                });
  std::string title = "training steps: losses at steps 1 and " + std::to_string(options.loss_steps) +
                      " from the same parameters";
  std::vector<std::string> training;
  for (const std::string& name : workloads) {
    if (!losses(samples, "ember", name).empty()) training.push_back(name);
  }
  print_columns(title.c_str(), workers, training, samples, [&](const std::string& framework, const std::string& name) {
    std::vector<double> values = losses(samples, framework, name);
    if (values.empty()) return std::string("n/a");
    return format_number(values.front(), "%.4f") + " / " + format_number(values.back(), "%.4f");
  });
}

nlohmann::json optional_json(std::optional<double> value) { return value ? nlohmann::json(*value) : nlohmann::json(); }

// Per workload, per framework: "<framework>_ns", "_peak_rss_bytes",
// "_start_rss_bytes", "_losses" and, for the peers, "_speed_ratio".
nlohmann::json json_report(const Options& options, const std::vector<Worker>& workers, const Samples& samples,
                           const std::vector<std::string>& workloads) {
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& name : workloads) {
    nlohmann::json row = {{"name", name}};
    for (const Worker& worker : workers) {
      const std::string& prefix = worker.framework;
      row[prefix + "_ns"] = optional_json(median(samples, prefix, name));
      if (prefix != "ember") row[prefix + "_speed_ratio"] = optional_json(speed_ratio(samples, prefix, name));
      row[prefix + "_peak_rss_bytes"] = optional_json(median(samples, prefix, name, "peak_rss_bytes"));
      row[prefix + "_start_rss_bytes"] = optional_json(median(samples, prefix, name, "start_rss_bytes"));
      std::vector<double> framework_losses = losses(samples, prefix, name);
      if (!framework_losses.empty()) row[prefix + "_losses"] = framework_losses;
    }
    results.push_back(row);
  }
  nlohmann::json frameworks = nlohmann::json::object();
  for (const Worker& worker : workers) {
    frameworks[worker.framework] = {{"description", worker.description}, {"command", worker.command}};
  }
  return {{"threads", options.threads},
          {"rounds", options.rounds},
          {"min_time_s", options.min_seconds},
          {"loss_steps", options.loss_steps},
          {"frameworks", frameworks},
          {"libtorch_environment", libtorch_settings(options)},
          {"libtorch_unset", kLibtorchUnset},
          {"torch2_tuned_environment", torch2_settings(options, true)},
          {"results", results}};
}

void report(const Options& options, const std::vector<Worker>& workers, const Samples& samples,
            const std::vector<std::string>& workloads) {
  nlohmann::json json = json_report(options, workers, samples, workloads);
  if (options.json) std::printf("%s\n", json.dump(2).c_str());
  else print_table(options, workers, samples, workloads);
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << json.dump(2) << "\n";
    if (!file) throw std::runtime_error("cannot write " + options.json_path);
  }
}

}  // namespace
}  // namespace ember::compare

int main(int argc, char** argv) {
  using ember::compare::Options;
  Options options;
  CLI::App app("ember vs its peers (libtorch 1.13, PyTorch 2) on the same workloads, each in its own process");
  app.add_option("--threads", options.threads, "threads for every framework (OMP_NUM_THREADS)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--rounds", options.rounds, "rotating rounds; the median is reported")->check(CLI::Range(1, 1024));
  app.add_option("--min-time", options.min_seconds, "seconds of timed steps per workload per round")
      ->check(CLI::Range(0.001, 600.0));
  app.add_option("--filter", options.filter, "only workloads whose name contains this");
  app.add_option("--loss-steps", options.loss_steps, "training rows: compare the losses of this many first steps")
      ->check(CLI::Range(1, 100000));
  app.add_option("--openblas-dir", options.openblas_dir,
                 "directory of the OpenMP OpenBLAS put first on libtorch's library path (empty: none)");
  app.add_option("--torch2-python", options.torch2_python,
                 "a Python with PyTorch 2: adds the peers torch2, torch2_glibc, torch2_compile, torch2_compile_glibc "
                 "(the training rows; empty: none)");
  app.add_option("--tuned-malloc", options.tuned_malloc, "the malloc preloaded into the torch2 peers without _glibc")
      ->check(CLI::ExistingFile);
  app.add_option("--frameworks", options.frameworks, "only these peers (ember always runs)")
      ->delimiter(',')
      ->check(CLI::IsMember({"libtorch", "torch2", "torch2_glibc", "torch2_compile", "torch2_compile_glibc"}));
  app.add_flag("--json", options.json, "print the results as JSON instead of a table");
  app.add_option("--json-out", options.json_path, "also write the JSON results to this file");
  CLI11_PARSE(app, argc, argv);
  if (options.openblas_dir.empty() || !std::filesystem::exists(options.openblas_dir)) {
    std::fprintf(stderr, "warning: no OpenMP OpenBLAS directory ('%s'): libtorch runs on the default BLAS\n",
                 options.openblas_dir.c_str());
    options.openblas_dir.clear();
  }
  if (!options.torch2_python.empty() && options.tuned_malloc.empty()) {
    std::fprintf(stderr, "compare_libtorch: no tuned malloc for the torch2 peers (install libjemalloc2 or pass "
                         "--tuned-malloc)\n");
    return 2;
  }
  try {
    std::vector<ember::compare::Worker> workers = ember::compare::make_workers(options);
    std::vector<std::string> workloads = ember::compare::list_workloads(workers, options.filter);
    ember::compare::Samples samples = ember::compare::run_rounds(options, workers, workloads);
    ember::compare::report(options, workers, samples, workloads);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "compare_libtorch: %s\n", error.what());
    return 1;
  }
  return 0;
}
