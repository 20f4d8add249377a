// AcceleratorOptions: what an Accelerator is built from. Every option left
// unset in code is taken from the environment `ember launch` sets from its
// flags or config file (EMBER_MIXED_PRECISION, ...), else from its default;
// an option set in code wins (Note [Accelerator options] in distributed/README.md).
//
//   Accelerator accelerator({.mixed_precision = "bf16", .gradient_accumulation_steps = 2});
//
// Tests: tests/distributed/test_accelerator_options.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distributed/amp/grad_scaler.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/zero/sharding_options.h"

namespace ember {

struct AcceleratorOptions {
  // "no", "fp16" or "bf16" (EMBER_MIXED_PRECISION; default "no").
  std::optional<std::string> mixed_precision = std::nullopt;
  // Batches whose gradients add up before each optimizer step (EMBER_GRADIENT_ACCUMULATION_STEPS; default 1).
  std::optional<int64_t> gradient_accumulation_steps = std::nullopt;
  // Run on the CPU even when a GPU is there (EMBER_USE_CPU; default false).
  std::optional<bool> cpu = std::nullopt;
  // A prepared loader's batch size is the global one, split across processes
  // (EMBER_SPLIT_BATCHES; default false: it is each process's).
  std::optional<bool> split_batches = std::nullopt;
  // Pad the end of each epoch by recycling samples so that every process gets
  // the same number of full batches (EMBER_EVEN_BATCHES; default true).
  std::optional<bool> even_batches = std::nullopt;
  // set_seed(seed) at construction (EMBER_SEED; default: none).
  std::optional<uint64_t> seed = std::nullopt;
  // Where checkpoints (with automatic naming) and trackers write (EMBER_PROJECT_DIR; default ".").
  std::optional<std::string> project_dir = std::nullopt;
  // save_state() without a path writes project_dir/checkpoints/checkpoint_N
  // (EMBER_AUTOMATIC_CHECKPOINT_NAMING; default false).
  std::optional<bool> automatic_checkpoint_naming = std::nullopt;
  // Automatic naming keeps at most this many checkpoints (EMBER_TOTAL_LIMIT; default: all).
  std::optional<int64_t> total_limit = std::nullopt;
  // Trackers for init_trackers/log: "jsonl", "csv".
  std::vector<std::string> log_with = {};
  // Profile the whole run (core/profiler/process_profile.h): each process
  // writes <profile_dir>/rank<r>.json and prints its table when the
  // Accelerator ends (EMBER_PROFILE, `ember launch --profile`; default: none).
  std::optional<std::string> profile_dir = std::nullopt;
  // How prepare() wraps models in DistributedDataParallel when there is more than one process.
  distributed::DDPOptions ddp = {};
  // The fp16 loss scaler's settings (used only with mixed_precision "fp16").
  distributed::GradScalerOptions scaler = {};
  // DDP or a ZeRO stage, and its settings (EMBER_STRATEGY, EMBER_WRAP_POLICY, ...;
  // distributed/zero/sharding_options.h; default ddp).
  distributed::ShardingOptions sharding = {};
};

// Every option decided: code, else environment, else default, validated.
struct ResolvedAcceleratorOptions {
  std::string mixed_precision = "no";
  int64_t gradient_accumulation_steps = 1;
  bool cpu = false;
  bool split_batches = false;
  bool even_batches = true;
  std::optional<uint64_t> seed;
  std::string project_dir = ".";
  bool automatic_checkpoint_naming = false;
  std::optional<int64_t> total_limit;
  std::vector<std::string> log_with;
  std::string profile_dir;  // "": no profile
  distributed::DDPOptions ddp;
  distributed::GradScalerOptions scaler;
  distributed::ResolvedShardingOptions sharding;
  // ACCELERATE_* variables not honoured, by name (the Accelerator prints them on the main process).
  std::vector<std::string> warnings;
};

// Errors name the option, where its value came from (code or the variable)
// and the value.
ResolvedAcceleratorOptions resolve_accelerator_options(const AcceleratorOptions& options);

}  // namespace ember
