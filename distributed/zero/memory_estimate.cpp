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
  // Every byte count must fit in 64 bits, their sum too (a wrapped one printed negative sizes).
  auto times = [&](int64_t count, int64_t size) {
    int64_t product = 0;
    EMBER_CHECK(!__builtin_mul_overflow(count, size, &product),
                "estimate_memory: {} parameters of {} take more bytes than 64 bits count", params,
                dtype_name(options.dtype));
    return product;
  };
  const int64_t state = times(options.optimizer_buffers, bytes);

  MemoryEstimate estimate;
  switch (options.strategy) {
    case ShardingStrategy::ddp:
      estimate = {.parameters = times(params, bytes),
                  .gradients = times(params, bytes),
                  .optimizer_state = times(params, state)};
      break;
    case ShardingStrategy::zero1:
      estimate = {.parameters = times(params, bytes),
                  .gradients = times(params, bytes),
                  .optimizer_state = times(shard, state),
                  .transient = times(unit, bytes)};
      break;
    case ShardingStrategy::zero2:
      estimate = {.parameters = times(params, bytes),
                  .gradients = times(shard, bytes),
                  .optimizer_state = times(shard, state),
                  .transient = times(unit, 2 * bytes)};
      break;
    case ShardingStrategy::zero3:
    case ShardingStrategy::hybrid:
      estimate = {.parameters = times(shard, bytes),
                  .gradients = times(shard, bytes),
                  .optimizer_state = times(shard, state),
                  .transient = group > 1 ? times(unit, 2 * bytes) : 0};  // one process gathers nothing
      break;
  }
  if (options.autocast_dtype && *options.autocast_dtype != options.dtype)
    estimate.autocast_casts = times(params, element_size(*options.autocast_dtype));
  int64_t total = 0;
  for (int64_t part : {estimate.parameters, estimate.gradients, estimate.optimizer_state, estimate.autocast_casts,
                       estimate.transient})
    EMBER_CHECK(!__builtin_add_overflow(total, part, &total),
                "estimate_memory: {} parameters of {} take more bytes than 64 bits count", params,
                dtype_name(options.dtype));
  return estimate;
}

}  // namespace ember::distributed
