// See env_command.h. The build facts come from compile definitions that
// tools/CMakeLists.txt sets on this file, and from core/version.h.
#include "env_command.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "config_command.h"
#include "core/cpu_features.h"
#include "core/cuda_libraries.h"
#include "core/ember_variables.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/version.h"
#include "distributed/backends/nccl_backend.h"
#include "distributed/environment.h"

extern char** environ;

namespace ember::launch {
namespace {

struct CpuInfo {
  std::string model = "unknown";
  std::set<std::string> flags;
};

// The first processor's "model name" and "flags" in /proc/cpuinfo.
CpuInfo read_cpu_info() {
  CpuInfo info;
  std::ifstream file("/proc/cpuinfo");
  bool model_seen = false;
  bool flags_seen = false;
  for (std::string line; std::getline(file, line) && !(model_seen && flags_seen);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (name == "model name" && !model_seen) {
      info.model = value;
      model_seen = true;
    } else if (name == "flags" && !flags_seen) {
      std::istringstream words(value);
      for (std::string flag; words >> flag;) info.flags.insert(flag);
      flags_seen = true;
    }
  }
  return info;
}

std::string yes_no(bool value) { return value ? "yes" : "no"; }

// The CPU flags that decide whether oneDNN has bf16 and fp16 GEMM kernels;
// without them bf16 runs through f32 (kernels/cpu/onednn.h).
constexpr const char* kLowPrecisionFlags[] = {"avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};

// The variables a report shows: ember's, the launcher's (torchrun's names),
// OpenMP's, and those of the libraries ember calls.
bool is_reported_variable(std::string_view name) {
  constexpr std::string_view kPrefixes[] = {"EMBER_", "OMP_", "KMP_", "MASTER_", "GLOO_", "NCCL_", "CUDA_", "ONEDNN_",
                                            "DNNL_", "TORCHELASTIC_", "OMPI_COMM_WORLD_", "MV2_COMM_WORLD_", "ACCELERATE_"};
  // The job engines' variables distributed/environment.h reads.
  constexpr std::string_view kNames[] = {
      "RANK",           "WORLD_SIZE",    "LOCAL_RANK",           "LOCAL_WORLD_SIZE",      "GROUP_RANK",
      "XDG_CACHE_HOME", "HF_HOME",       "SLURM_PROCID",         "SLURM_NTASKS",          "SLURM_LOCALID",
      "SLURM_NODEID",   "SLURM_JOB_ID",  "SLURM_STEP_ID",        "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
      "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST", "PMI_RANK", "PMI_SIZE",
      "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes), [&](std::string_view p) { return name.starts_with(p); }) ||
         std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// Secrets: a report says only whether they are set.
bool is_secret_variable(std::string_view name) { return name == "EMBER_STORE_TOKEN"; }

std::vector<std::string> environment_lines() {
  std::vector<std::string> variables;
  for (char** entry = environ; *entry; ++entry) {
    std::string_view text(*entry);
    size_t equals = text.find('=');
    std::string_view name = text.substr(0, equals);
    if (equals == std::string_view::npos || !is_reported_variable(name)) continue;
    std::string_view value = is_secret_variable(name) ? "set" : text.substr(equals + 1);
    std::optional<std::string> unknown = unknown_ember_variable_warning(name);
    variables.push_back(unknown ? fmt::format("  - {}: {} (warning: {})", name, value, *unknown)
                                : fmt::format("  - {}: {}", name, value));
  }
  std::sort(variables.begin(), variables.end());
  if (variables.empty()) variables.push_back("  - (none of EMBER_*, OMP_*, MASTER_*, RANK, ... is set)");
  return variables;
}

std::vector<std::string> gpu_lines() {
  if (!built_with_cuda()) return {"- GPUs: CUDA not built"};
  int count = cuda::device_count();
  if (count == 0) return {"- GPUs: none (CUDA is built, but the driver and cudaGetDeviceCount find no usable device)"};
  std::vector<std::string> lines = {fmt::format("- GPUs: {}", count)};
  for (int index = 0; index < count; ++index) {
    lines.push_back(fmt::format("  - cuda:{}: {}", index, cuda::device_description(index)));
  }
  return lines;
}

// The CUDA libraries this process loaded and where from (NCCL's with them:
// the device backend's library), which tells a machine's libraries apart
// from the ones a bundle brought (scripts/gpu-check.sh).
std::vector<std::string> cuda_library_lines() {
  if (!built_with_cuda()) return {"- CUDA libraries: none (CUDA not built)"};
  std::vector<std::string> lines = {"- CUDA libraries:"};
  for (const std::string& library : cuda::library_descriptions()) lines.push_back("  - " + library);
  if (distributed::nccl_built()) lines.push_back("  - " + distributed::nccl_library_description());
  return lines;
}

}  // namespace

std::vector<std::string> environment_report(const EnvCommandOptions& options) {
  if (options.variables) {
    std::vector<std::string> lines;
    for (const EmberVariable& variable : ember_variables())
      lines.push_back(fmt::format("- {}: {}", variable.name, variable.meaning));
    return lines;
  }
  CpuInfo cpu = read_cpu_info();
  utsname system{};
  uname(&system);
  cpu_set_t usable;
  CPU_ZERO(&usable);
  int usable_count = sched_getaffinity(0, sizeof usable, &usable) == 0 ? CPU_COUNT(&usable) : 0;
  std::vector<std::string> flags;
  for (const char* flag : kLowPrecisionFlags) flags.push_back(fmt::format("{} {}", flag, yes_no(cpu.flags.count(flag) > 0)));

  std::vector<std::string> lines = {
      fmt::format("- ember version: {}", version()),
      fmt::format("- build type: {}", EMBER_BUILD_TYPE),
      fmt::format("- compiler: {}", EMBER_COMPILER),
      fmt::format("- sanitizers: {}", EMBER_SANITIZERS),
      fmt::format("- CUDA backend: {}", built_with_cuda() ? "built" : "not built"),
      // Gloo, the shared-memory backend and the reference collectives are
      // always part of distributed/; NCCL comes with the CUDA backend.
      fmt::format("- distributed backends: shm built, gloo built, reference built, nccl {}",
                  distributed::nccl_built() ? "built" : "not built"),
      fmt::format("- system: {} {} {}", system.sysname, system.release, system.machine),
      fmt::format("- CPU: {}", cpu.model),
      fmt::format("- CPU features ember's kernels use: avx2 {}, fma {}", yes_no(cpu_has_avx2()), yes_no(cpu_has_fma())),
      fmt::format("- CPU features for bf16 and fp16 GEMM: {}", fmt::join(flags, ", ")),
      fmt::format("- CPUs: {} usable, {} online", usable_count, sysconf(_SC_NPROCESSORS_ONLN)),
      fmt::format("- OpenMP threads: {}", get_num_threads()),
  };
  for (std::string& line : cuda_library_lines()) lines.push_back(std::move(line));
  for (std::string& line : gpu_lines()) lines.push_back(std::move(line));
  try {
    lines.push_back("- job engine: " + distributed::describe(distributed::read_distributed_env()));
  } catch (const Error& error) {
    lines.push_back(fmt::format("- job engine: cannot be read: {}", error.what()));
  }
  lines.push_back("- environment:");
  for (std::string& line : environment_lines()) lines.push_back(std::move(line));
  try {
    for (std::string& line : describe_active_config(options.config_file)) lines.push_back(std::move(line));
  } catch (const Error& error) {
    lines.push_back(fmt::format("- config file: cannot be used: {}", error.what()));
  }
  return lines;
}

}  // namespace ember::launch
