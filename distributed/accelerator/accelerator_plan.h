// What the Accelerator prints at start-up on the main process, so that a
// reader sees the cost of a strategy before the first step: what each step of
// a prepared model communicates (every collective, with the bytes the
// per-rank trace EMBER_DDP_TRACE records for it) and what each process holds
// (Note [ZeRO stages]'s formulas, estimate_memory). Every line starts with
// "ember Accelerator: ", as the start-up line does.
// Called by accelerator.cpp (prepare); tests: tests/distributed/test_zero.cpp
// (Zero.StartupPlanMatchesTheTrace: the printed bytes against the trace, for
// ddp, zero1, zero2 and zero3 on 2 processes).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distributed/accelerator/accelerator_state.h"

namespace ember::detail {

// The collectives of one training step of `model` (prepared with DDP or a
// ZeRO strategy), one line each: "  all_reduce of bucket 0: 27168 bytes, 1
// per step"; then what a process sends. Empty for a model prepared alone.
std::vector<std::string> communication_plan(const PreparedModel& model, int num_processes);

// What each process holds of the training state of `optimizer`'s
// parameters, `largest_unit_params` being the largest ZeRO unit (0: none),
// under `strategy` (hybrid shards over `processes_per_node`), and in all
// under each other strategy, with autocast's casts of the weights to
// `autocast_dtype` under mixed precision. Call it before the optimizer is
// attached to a ZeRO engine (it then holds pieces).
std::vector<std::string> memory_plan(const optim::Optimizer& optimizer, int64_t largest_unit_params,
                                     distributed::ShardingStrategy strategy, int num_processes,
                                     int processes_per_node, std::optional<DType> autocast_dtype);

}  // namespace ember::detail
