#include "core/ember_variables.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace ember {
namespace {

constexpr EmberVariable kVariables[] = {
    {"EMBER_ACTIVATION_CHECKPOINTING", "Accelerator: recompute each wrapped unit's activations in backward"},
    {"EMBER_ALLOCATOR", "CPU allocator: system for plain malloc (sanitizers); caching or unset, ember's caching allocator"},
    {"EMBER_AUTOMATIC_CHECKPOINT_NAMING", "Accelerator: save_state() into project_dir/checkpoints/checkpoint_N"},
    {"EMBER_BACKEND", "process group backend: shm, gloo or nccl"},
    {"EMBER_BACKWARD_PREFETCH", "sharding: gather the next unit's parameters during backward"},
    {"EMBER_CONFIG_FILE", "ember launch: the config file used when --config-file is not given"},
    {"EMBER_CPU_BASELINE", "kernels: 1 ignores the CPU's optional instruction sets (AVX2, AVX-512, F16C, ...)"},
    {"EMBER_DDP_TRACE", "DDP: write a trace of each bucket's all-reduce under this prefix"},
    {"EMBER_DISABLE_BF16_GEMM", "kernels: 1 runs bf16 matrix products through f32"},
    {"EMBER_DISTRIBUTED_DEBUG", "collectives: check that every rank calls the same collective on the same shapes"},
    {"EMBER_EVEN_BATCHES", "Accelerator: pad the last batches so every rank gets as many"},
    {"EMBER_FORWARD_PREFETCH", "sharding: gather the next unit's parameters during forward"},
    {"EMBER_GLOO_ADDR", "ember launch: the address Gloo's connections use on this host"},
    {"EMBER_GRADIENT_ACCUMULATION_STEPS", "Accelerator: batches per optimizer step"},
    {"EMBER_JOB_ID", "ember launch: the job's id (names its shared-memory segments)"},
    {"EMBER_MAX_GRAD_NORM", "sharding: clip the gradients' global norm to this value"},
    {"EMBER_MIXED_PRECISION", "Accelerator: no, bf16 or fp16"},
    {"EMBER_NCCL_STALL_OPERATION", "tests: make the NCCL backend stall at this operation (watchdog test)"},
    {"EMBER_PROFILE", "profiler: write a profile of the whole process into this directory"},
    {"EMBER_PROFILE_SHAPES", "profiler: record each op's input shapes"},
    {"EMBER_PROJECT_DIR", "Accelerator: the directory for checkpoints and logs"},
    {"EMBER_REFERENCE_ALLREDUCE", "reference backend: the all-reduce algorithm (ring, ...)"},
    {"EMBER_RESTART_COUNT", "ember launch: how many times the workers were restarted"},
    {"EMBER_SEED", "Accelerator: seed every random generator"},
    {"EMBER_SPLIT_BATCHES", "Accelerator: split each batch across ranks instead of one batch per rank"},
    {"EMBER_STATE_DICT_TYPE", "sharding: full or sharded checkpoints"},
    {"EMBER_STORE_HOSTED", "the launcher serves the store (set by ember launch), not rank 0"},
    {"EMBER_STORE_PORT", "the store's port (MASTER_PORT's stand-in)"},
    {"EMBER_STORE_TOKEN", "the store's shared secret"},
    {"EMBER_STRATEGY", "Accelerator: ddp, zero1, zero2, zero3 (fsdp) or hybrid"},
    {"EMBER_STRICT_DEVICE_COPIES", "CUDA: refuse implicit copies between host and device"},
    {"EMBER_TIMEOUT", "collectives and the store: seconds before a wait fails"},
    {"EMBER_TOTAL_LIMIT", "Accelerator: how many automatically named checkpoints to keep"},
    {"EMBER_USE_CPU", "Accelerator: run on the CPU even where a GPU is present"},
    {"EMBER_WRAP_MIN_NUM_PARAMS", "sharding: the size policy's smallest unit"},
    {"EMBER_WRAP_MODULE_TYPES", "sharding: the module types the transformer policy wraps"},
    {"EMBER_WRAP_POLICY", "sharding: transformer, size or none"},
};

// Edits between two names, a swap of neighbours counting one (optimal string
// alignment): a misspelling is a letter or two away from its name.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::span<const EmberVariable> ember_variables() { return kVariables; }

std::optional<std::string> unknown_ember_variable_warning(std::string_view name) {
  if (!name.starts_with("EMBER_")) return std::nullopt;
  const EmberVariable* nearest = nullptr;
  size_t nearest_distance = 0;
  for (const EmberVariable& variable : kVariables) {
    const size_t distance = edit_distance(name, variable.name);
    if (distance == 0) return std::nullopt;
    if (nearest == nullptr || distance < nearest_distance) {
      nearest = &variable;
      nearest_distance = distance;
    }
  }
  // Within a third of the name's length: EMBER_MIXED_PRECISON, EMBER_SEEDS, not EMBER_HOME.
  if (nearest_distance * 3 <= name.size() - 6)
    return fmt::format("{} is not a variable ember reads (did you mean {}? `ember env --variables` lists them)", name,
                       nearest->name);
  return fmt::format("{} is not a variable ember reads (`ember env --variables` lists them)", name);
}

bool parse_flag(std::string_view name, std::string_view text) {
  if (text == "1" || text == "true") return true;
  if (text == "0" || text == "false") return false;
  EMBER_CHECK(false, "{}='{}' is not a flag (use true or false, 1 or 0; unset the variable for the default)", name,
              text);
  return false;
}

std::optional<bool> flag_variable(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  return parse_flag(name, text);
}

}  // namespace ember
