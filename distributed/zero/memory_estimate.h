// What one process holds of a model's training state under each sharding
// strategy: the formulas of Note [ZeRO stages] (distributed/README.md) in one
// function, for `ember estimate-memory` (tools/estimate_memory.cpp) before a
// run and for the Accelerator at start-up.
//
//   MemoryEstimate estimate = estimate_memory({.num_params = 124'439'808, .largest_unit_params = 39'385'344,
//                                              .strategy = ShardingStrategy::zero3, .world_size = 4});
//
// Tests: tests/distributed/test_memory_estimate.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "distributed/zero/sharding_options.h"

namespace ember::distributed {

struct MemoryEstimateOptions {
  int64_t num_params = 0;  // P
  // U: the largest unit's parameters, which zero3 and hybrid gather whole while
  // it runs; 0 counts the whole model as one unit (U = P).
  int64_t largest_unit_params = 0;
  // The parameters' dtype, and so the gradients' and the optimizer state's (ember's
  // optimizers keep their buffers in the parameter's dtype, as PyTorch's do).
  DType dtype = DType::f32;
  // Mixed precision's lower dtype (bf16 or f16), or none. Autocast keeps its
  // cast of each weight from the weight's first use in the forward until the
  // backward has used it (Note [Autocast cast cache] in core/README.md).
  std::optional<DType> autocast_dtype = std::nullopt;
  // k: optimizer buffers per parameter: Adam/AdamW 2 (3 with amsgrad), SGD with
  // momentum, Adagrad, RMSprop, Lion 1, plain SGD 0.
  int optimizer_buffers = 2;
  ShardingStrategy strategy = ShardingStrategy::ddp;
  int world_size = 1;  // n
  // hybrid: the processes of a node, the group inside which it shards; 0 = world_size.
  int processes_per_node = 0;
};

// Bytes per process. With b = element_size(dtype) and s(x) = ceil(x / n), the
// shard of x elements (flat parameters are padded to a multiple of n):
//
//   strategy  parameters  gradients  optimizer state  transient (while the largest unit's gradients are reduced)
//   ddp       P·b         P·b        k·P·b            0
//   zero1     P·b         P·b        k·s(P)·b         U·b (the unit's flat gradient buffer, beside its gradients)
//   zero2     P·b         s(P)·b     k·s(P)·b         U·b + U·b (the unit's full gradients and flat buffer)
//   zero3     s(P)·b      s(P)·b     k·s(P)·b         U·b + U·b (its full parameters and gradients; 0 when n = 1)
//   hybrid    zero3's with n = processes_per_node
//
// With mixed precision every strategy adds P·c for autocast's casts of the
// weights (c = element_size(autocast_dtype); none when the parameters are
// already in that dtype). Not counted: activations (they depend on the
// batch), the communication buckets, with prefetching the next unit's
// parameters (up to another U·b) under zero3, and zero3's root unit (the
// parameters outside every wrapped module), which stays gathered from the
// forward's start to the backward's end beside the unit that runs.
struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t autocast_casts = 0;
  int64_t transient = 0;
  int64_t total() const { return parameters + gradients + optimizer_state + autocast_casts + transient; }
};

// Throws ember::Error naming the option and its value when one is out of range.
MemoryEstimate estimate_memory(const MemoryEstimateOptions& options);

}  // namespace ember::distributed
