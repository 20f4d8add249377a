// compare_libtorch: ember against libtorch on the same workloads, each
// framework in its own process. Runs compare_worker_ember and
// compare_worker_libtorch (found next to this program) in alternating rounds,
// each workload in a fresh process, takes each workload's median over the
// rounds and prints the ratios (speed ratio = libtorch time / ember time: > 1
// means ember is faster), each process's peak resident memory, and for the
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
  bool json = false;
  std::string json_path;
};

// One framework's worker: its program and the environment it runs in.
struct Worker {
  std::string framework;
  std::filesystem::path program;
  std::vector<std::string> environment;
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

// Both workers get passive OpenMP waits (a spinning pool steals the other
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

std::filesystem::path program_directory() { return std::filesystem::read_symlink("/proc/self/exe").parent_path(); }

std::vector<Worker> make_workers(const Options& options) {
  std::filesystem::path directory = program_directory();
  return {{"ember", directory / "compare_worker_ember", environment_with(common_settings(options), {})},
          {"libtorch", directory / "compare_worker_libtorch",
           environment_with(libtorch_settings(options), kLibtorchUnset)}};
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (const std::string& s : strings) result.push_back(const_cast<char*>(s.c_str()));
  result.push_back(nullptr);
  return result;
}

// Runs the worker in its own process (posix_spawn) and returns what it printed
// on stdout; its stderr passes through. Throws when it cannot start or fails.
std::string run_worker(const Worker& worker, const std::vector<std::string>& arguments) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  std::vector<std::string> argv_strings = {worker.program.string()};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv = c_strings(argv_strings), envp = c_strings(worker.environment);
  pid_t pid = 0;
  int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawned != 0) {
    close(pipe_ends[0]);
    throw std::runtime_error("cannot start " + worker.program.string() + ": " + std::strerror(spawned));
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
    throw std::runtime_error(worker.program.string() + " failed (" +
                             (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                : "signal " + std::to_string(WTERMSIG(status))) +
                             ")");
  }
  return output;
}

// Per framework, per workload: the worker's result object of each round.
using Samples = std::map<std::string, std::map<std::string, std::vector<nlohmann::json>>>;

// The workloads both workers list (ember's order, then any only libtorch has)
// whose names contain the filter.
std::vector<std::string> list_workloads(const std::vector<Worker>& workers, const std::string& filter) {
  std::vector<std::string> names;
  for (const Worker& worker : workers) {
    nlohmann::json listing = nlohmann::json::parse(run_worker(worker, {"--list"}));
    for (const std::string& name : listing.at("workloads").get<std::vector<std::string>>()) {
      bool wanted = name.find(filter) != std::string::npos;
      if (wanted && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

// Each workload runs in a fresh worker process, so its peak resident memory
// is its own and no workload inherits another's caches. Alternates which
// framework goes first, so drift in the machine's state (thermal, other
// processes) does not favour one side.
Samples run_rounds(const Options& options, const std::vector<Worker>& workers,
                   const std::vector<std::string>& workloads) {
  Samples samples;
  for (int round = 0; round < options.rounds; ++round) {
    std::fprintf(stderr, "round %d/%d\n", round + 1, options.rounds);
    for (const std::string& name : workloads) {
      std::vector<std::string> arguments = {"--threads", std::to_string(options.threads), "--min-time",
                                            std::to_string(options.min_seconds), "--loss-steps",
                                            std::to_string(options.loss_steps), "--name", name};
      for (int turn = 0; turn < 2; ++turn) {
        const Worker& worker = workers[size_t((round + turn) % 2)];
        nlohmann::json report = nlohmann::json::parse(run_worker(worker, arguments));
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

void print_table(const Options& options, const Samples& samples, const std::vector<std::string>& workloads) {
  std::printf("ember vs libtorch: %d thread(s), median of %d rounds (speed ratio > 1: ember faster)\n",
              options.threads, options.rounds);
  std::printf("%-30s %12s %12s %12s %16s %16s\n", "workload", "ember", "libtorch", "speed ratio",
              "ember peak MiB", "libtorch peak MiB");
  for (const std::string& name : workloads) {
    std::optional<double> ember = median(samples, "ember", name), libtorch = median(samples, "libtorch", name);
    std::string ratio = "-";
    if (ember && libtorch) ratio = format_number(*libtorch / *ember, "%.3f");
    std::printf("%-30s %12s %12s %12s %16s %16s\n", name.c_str(), format_time(ember).c_str(),
                format_time(libtorch).c_str(), ratio.c_str(),
                format_number(mebibytes(median(samples, "ember", name, "peak_rss_bytes")), "%.0f").c_str(),
                format_number(mebibytes(median(samples, "libtorch", name, "peak_rss_bytes")), "%.0f").c_str());
  }
  bool header_printed = false;
  for (const std::string& name : workloads) {
    std::vector<double> ember_losses = losses(samples, "ember", name);
    std::vector<double> libtorch_losses = losses(samples, "libtorch", name);
    if (ember_losses.empty() && libtorch_losses.empty()) continue;
    if (!header_printed) {
      std::printf("\ntraining steps: steps/s, and the losses (ember / libtorch) at steps 1 and %d from the same "
                  "parameters\n",
                  options.loss_steps);
      std::string last_loss = "loss at step " + std::to_string(options.loss_steps);
      std::printf("%-30s %12s %12s %16s %16s\n", "workload", "ember", "libtorch", "loss at step 1", last_loss.c_str());
      header_printed = true;
    }
    auto rate = [&](const std::string& framework) {
      std::optional<double> ns = median(samples, framework, name);
      return ns ? std::optional<double>(1e9 / *ns) : std::nullopt;
    };
    auto pair = [](const std::vector<double>& ember_values, const std::vector<double>& libtorch_values, bool last) {
      auto pick = [last](const std::vector<double>& values) {
        return values.empty() ? std::nullopt : std::optional<double>(last ? values.back() : values.front());
      };
      return format_number(pick(ember_values), "%.4f") + " / " + format_number(pick(libtorch_values), "%.4f");
    };
    std::printf("%-30s %12s %12s %16s %16s\n", name.c_str(), format_number(rate("ember"), "%.2f").c_str(),
                format_number(rate("libtorch"), "%.2f").c_str(), pair(ember_losses, libtorch_losses, false).c_str(),
                pair(ember_losses, libtorch_losses, true).c_str());
  }
}

nlohmann::json optional_json(std::optional<double> value) { return value ? nlohmann::json(*value) : nlohmann::json(); }

nlohmann::json json_report(const Options& options, const Samples& samples, const std::vector<std::string>& workloads) {
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& name : workloads) {
    std::optional<double> ember = median(samples, "ember", name), libtorch = median(samples, "libtorch", name);
    nlohmann::json row = {{"name", name}, {"ember_ns", optional_json(ember)}, {"libtorch_ns", optional_json(libtorch)},
                          {"speed_ratio", nullptr}};
    if (ember && libtorch) row["speed_ratio"] = *libtorch / *ember;
    for (const char* framework : {"ember", "libtorch"}) {
      std::string prefix = framework;
      row[prefix + "_peak_rss_bytes"] = optional_json(median(samples, framework, name, "peak_rss_bytes"));
      row[prefix + "_start_rss_bytes"] = optional_json(median(samples, framework, name, "start_rss_bytes"));
      std::vector<double> framework_losses = losses(samples, framework, name);
      if (!framework_losses.empty()) row[prefix + "_losses"] = framework_losses;
    }
    results.push_back(row);
  }
  return {{"threads", options.threads},
          {"rounds", options.rounds},
          {"min_time_s", options.min_seconds},
          {"loss_steps", options.loss_steps},
          {"libtorch_environment", libtorch_settings(options)},
          {"libtorch_unset", kLibtorchUnset},
          {"results", results}};
}

void report(const Options& options, const Samples& samples, const std::vector<std::string>& workloads) {
  nlohmann::json json = json_report(options, samples, workloads);
  if (options.json) std::printf("%s\n", json.dump(2).c_str());
  else print_table(options, samples, workloads);
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
  CLI::App app("ember vs libtorch on the same workloads, each in its own process");
  app.add_option("--threads", options.threads, "threads for both frameworks (OMP_NUM_THREADS)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--rounds", options.rounds, "alternating ember/libtorch rounds; the median is reported")
      ->check(CLI::Range(1, 1024));
  app.add_option("--min-time", options.min_seconds, "seconds of timed steps per workload per round")
      ->check(CLI::Range(0.001, 600.0));
  app.add_option("--filter", options.filter, "only workloads whose name contains this");
  app.add_option("--loss-steps", options.loss_steps, "training rows: compare the losses of this many first steps")
      ->check(CLI::Range(1, 100000));
  app.add_option("--openblas-dir", options.openblas_dir,
                 "directory of the OpenMP OpenBLAS put first on libtorch's library path (empty: none)");
  app.add_flag("--json", options.json, "print the results as JSON instead of a table");
  app.add_option("--json-out", options.json_path, "also write the JSON results to this file");
  CLI11_PARSE(app, argc, argv);
  if (options.openblas_dir.empty() || !std::filesystem::exists(options.openblas_dir)) {
    std::fprintf(stderr, "warning: no OpenMP OpenBLAS directory ('%s'): libtorch runs on the default BLAS\n",
                 options.openblas_dir.c_str());
    options.openblas_dir.clear();
  }
  try {
    std::vector<ember::compare::Worker> workers = ember::compare::make_workers(options);
    std::vector<std::string> workloads = ember::compare::list_workloads(workers, options.filter);
    ember::compare::Samples samples = ember::compare::run_rounds(options, workers, workloads);
    ember::compare::report(options, samples, workloads);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "compare_libtorch: %s\n", error.what());
    return 1;
  }
  return 0;
}
