// See memory_estimate.h: the formulas, and their checks.
#include "distributed/zero/memory_estimate.h"

#include "core/error.h"

namespace ember::distributed {

MemoryEstimate estimate_memory(const MemoryEstimateOptions& options) {
  const int64_t params = options.num_params;
  EMBER_CHECK(params >= 0, "estimate_memory: num_params must not be negative, got {}", params);
  EMBER_CHECK(options.largest_unit_params >= 0 && options.largest_unit_params <= params,
              "estimate_memory: largest_unit_params must be from 0 to num_params {}, got {}", params,
              options.largest_unit_params);
  EMBER_CHECK(options.optimizer_buffers >= 0, "estimate_memory: optimizer_buffers must not be negative, got {}",
              options.optimizer_buffers);
  EMBER_CHECK(options.world_size >= 1, "estimate_memory: world_size must be at least 1, got {}", options.world_size);
  EMBER_CHECK(options.processes_per_node >= 0 && options.processes_per_node <= options.world_size,
              "estimate_memory: processes_per_node must be from 0 to world_size {}, got {}", options.world_size,
              options.processes_per_node);
  const int64_t bytes = element_size(options.dtype);
  const int64_t unit = options.largest_unit_params == 0 ? params : options.largest_unit_params;
  // The group a parameter is sharded over: every process, or hybrid's node.
  int64_t group = options.world_size;
  if (options.strategy == ShardingStrategy::hybrid && options.processes_per_node > 0) group = options.processes_per_node;
  const int64_t shard = (params + group - 1) / group;  // s(P)
  const int64_t state = int64_t(options.optimizer_buffers) * bytes;

  MemoryEstimate estimate;
  switch (options.strategy) {
    case ShardingStrategy::ddp:
      estimate = {.parameters = params * bytes, .gradients = params * bytes, .optimizer_state = params * state};
      break;
    case ShardingStrategy::zero1:
      estimate = {.parameters = params * bytes, .gradients = params * bytes, .optimizer_state = shard * state};
      break;
    case ShardingStrategy::zero2:
      estimate = {.parameters = params * bytes, .gradients = shard * bytes, .optimizer_state = shard * state};
      break;
    case ShardingStrategy::zero3:
    case ShardingStrategy::hybrid:
      estimate = {.parameters = shard * bytes,
                  .gradients = shard * bytes,
                  .optimizer_state = shard * state,
                  .transient = group > 1 ? 2 * unit * bytes : 0};  // one process gathers nothing
      break;
  }
  return estimate;
}

}  // namespace ember::distributed
