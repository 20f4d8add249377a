// estimate_memory (distributed/zero/memory_estimate.h): each strategy's bytes
// per process on a case small enough to count by hand, and its errors.
#include <gtest/gtest.h>

#include "distributed/zero/memory_estimate.h"
#include "support/test_support.h"

namespace ember::distributed {
namespace {

struct Bytes {
  int64_t parameters, gradients, optimizer_state, transient;
};

void expect_bytes(const MemoryEstimate& estimate, const Bytes& expected) {
  EXPECT_EQ(estimate.parameters, expected.parameters);
  EXPECT_EQ(estimate.gradients, expected.gradients);
  EXPECT_EQ(estimate.optimizer_state, expected.optimizer_state);
  EXPECT_EQ(estimate.transient, expected.transient);
  EXPECT_EQ(estimate.total(), expected.parameters + expected.gradients + expected.optimizer_state + expected.transient);
}

// P = 10 f32 parameters (b = 4), Adam (k = 2), 4 processes: a shard is
// ceil(10 / 4) = 3 elements (the flat parameter padded to 12); the largest unit has 4.
TEST(MemoryEstimate, EachStrategyByHand) {
  MemoryEstimateOptions options{.num_params = 10, .largest_unit_params = 4, .world_size = 4};
  options.strategy = ShardingStrategy::ddp;
  expect_bytes(estimate_memory(options), {40, 40, 80, 0});  // P·b, P·b, k·P·b
  options.strategy = ShardingStrategy::zero1;
  expect_bytes(estimate_memory(options), {40, 40, 24, 16});  // k·3·4, + the unit's flat gradient buffer
  options.strategy = ShardingStrategy::zero2;
  expect_bytes(estimate_memory(options), {40, 12, 24, 32});  // + the unit's full gradients and flat buffer
  options.strategy = ShardingStrategy::zero3;
  expect_bytes(estimate_memory(options), {12, 12, 24, 32});  // + the unit's 4 parameters and 4 gradients
  // hybrid shards inside a node of 2: ceil(10 / 2) = 5.
  options.strategy = ShardingStrategy::hybrid;
  options.processes_per_node = 2;
  expect_bytes(estimate_memory(options), {20, 20, 40, 32});
}

TEST(MemoryEstimate, DtypeBuffersAndOneProcess) {
  // bf16 parameters keep bf16 gradients and state; SGD with momentum has one buffer.
  expect_bytes(estimate_memory({.num_params = 10, .dtype = DType::bf16, .optimizer_buffers = 1}), {20, 20, 20, 0});
  // Plain SGD keeps no state.
  expect_bytes(estimate_memory({.num_params = 10, .optimizer_buffers = 0, .strategy = ShardingStrategy::zero2,
                                .world_size = 2}),
               {40, 20, 0, 80});
  // zero3 on one process is DDP: nothing to gather. No unit given: the whole model is one.
  expect_bytes(estimate_memory({.num_params = 10, .strategy = ShardingStrategy::zero3}), {40, 40, 80, 0});
  expect_bytes(estimate_memory({.num_params = 10, .strategy = ShardingStrategy::zero3, .world_size = 2}),
               {20, 20, 40, 80});
  // GPT-2 (124M) at 8 processes: exact, no overflow.
  MemoryEstimate gpt2 = estimate_memory({.num_params = 124'439'808, .largest_unit_params = 39'385'344,
                                         .strategy = ShardingStrategy::zero3, .world_size = 8});
  EXPECT_EQ(gpt2.parameters, 15'554'976 * 4);
  EXPECT_EQ(gpt2.transient, 2 * 39'385'344 * 4);
}

// Autocast keeps a cast of every f32 weight from its first use in the
// forward to the backward: P·c more on every strategy (measured by the tools
// audit: 2 bytes per parameter with gradient accumulation under bf16).
// Catches: the casts left out (the estimate said mixed precision adds nothing).
TEST(MemoryEstimate, MixedPrecisionCountsAutocastsCastsOfTheWeights) {
  for (ShardingStrategy strategy : {ShardingStrategy::ddp, ShardingStrategy::zero1, ShardingStrategy::zero2,
                                    ShardingStrategy::zero3}) {
    MemoryEstimateOptions options{.num_params = 10, .largest_unit_params = 4, .strategy = strategy, .world_size = 4};
    const MemoryEstimate plain = estimate_memory(options);
    options.autocast_dtype = DType::bf16;
    const MemoryEstimate mixed = estimate_memory(options);
    EXPECT_EQ(mixed.autocast_casts, 20);  // 10 parameters, 2 bytes each
    EXPECT_EQ(mixed.total(), plain.total() + 20);
    options.autocast_dtype = DType::f16;
    EXPECT_EQ(estimate_memory(options).autocast_casts, 20);
  }
  // Parameters already in bf16 need no cast.
  EXPECT_EQ(estimate_memory({.num_params = 10, .dtype = DType::bf16, .autocast_dtype = DType::bf16}).autocast_casts, 0);
}

TEST(MemoryEstimate, BadOptionsAreErrors) {
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = -1}), "num_params must not be negative, got -1");
  // Catches: byte counts past 64 bits wrapped (ember estimate-memory printed negative sizes).
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = int64_t(2e18)}),
                     "estimate_memory: 2000000000000000000 parameters of float32 take more bytes than 64 bits count");
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = int64_t(9e17), .dtype = DType::f64, .optimizer_buffers = 0}),
                     "take more bytes than 64 bits count");  // each part fits, their sum does not
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = 10, .largest_unit_params = 11}),
                     "largest_unit_params must be from 0 to num_params 10, got 11");
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = 10, .optimizer_buffers = -2}),
                     "optimizer_buffers must not be negative, got -2");
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = 10, .world_size = 0}), "world_size must be at least 1, got 0");
  EXPECT_EMBER_ERROR(estimate_memory({.num_params = 10, .world_size = 2, .processes_per_node = 3}),
                     "processes_per_node must be from 0 to world_size 2, got 3");
}

}  // namespace
}  // namespace ember::distributed
