// ShardingOptions: how the Accelerator spreads a model's state over the
// processes: DDP's full replicas, or ZeRO's shards (Note [ZeRO stages] in
// distributed/README.md). Read from AcceleratorOptions::sharding, else from
// the EMBER_* variables `ember launch` sets from `--strategy` and from the
// config file's `deepspeed_config` / `fsdp_config` sections.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember::distributed {

// What each process holds between steps:
//   ddp:    everything (parameters, gradients, optimizer state);
//   zero1:  parameters and gradients, 1/n of the optimizer state;
//   zero2:  parameters, 1/n of gradients and optimizer state;
//   zero3:  1/n of everything, each wrapped unit's parameters gathered while it runs
//           (FSDP's FULL_SHARD; "fsdp" is the same strategy);
//   hybrid: zero3 inside each node, replicas across nodes (HYBRID_SHARD).
enum class ShardingStrategy { ddp, zero1, zero2, zero3, hybrid };
std::string_view to_string(ShardingStrategy strategy);
// "ddp", "zero1", "zero2", "zero3", "fsdp" (= zero3), "hybrid"; nullopt for anything else.
std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text);

// Which modules become units (all-gathered and reduce-scattered together).
enum class WrapPolicy {
  transformer,  // modules whose type_name() is in wrap_module_types (FSDP's TRANSFORMER_BASED_WRAP)
  size,         // the smallest subtrees holding at least min_num_params parameters (SIZE_BASED_WRAP)
  none,         // the whole model is one unit (NO_WRAP)
};

struct ShardingOptions {
  // EMBER_STRATEGY.
  std::optional<std::string> strategy = std::nullopt;
  // EMBER_WRAP_POLICY: "transformer", "size" or "none"; default transformer,
  // falling back to size when the model holds no module of those types.
  std::optional<std::string> wrap_policy = std::nullopt;
  // EMBER_WRAP_MODULE_TYPES (comma-separated type names); default {"TransformerBlock"}.
  std::optional<std::vector<std::string>> wrap_module_types = std::nullopt;
  // EMBER_WRAP_MIN_NUM_PARAMS; default 100000 (FSDP's size-based policy's default is 1e8,
  // sized for GPUs; ember's CPU models are smaller).
  std::optional<int64_t> min_num_params = std::nullopt;
  // EMBER_STATE_DICT_TYPE: "full" (save_state gathers whole tensors from the
  // shards and the main process writes them, as DDP would; default) or
  // "sharded" (each process writes its own pieces, nothing is gathered).
  // Both load at any world size and under any strategy (Note [Sharded checkpoints]).
  std::optional<std::string> state_dict_type = std::nullopt;
  // EMBER_FORWARD_PREFETCH / EMBER_BACKWARD_PREFETCH: start the next unit's
  // all-gather while this one computes; default true.
  std::optional<bool> forward_prefetch = std::nullopt;
  std::optional<bool> backward_prefetch = std::nullopt;
  // EMBER_ACTIVATION_CHECKPOINTING: recompute each unit's activations in backward
  // (nn::checkpoint) instead of storing them; default false.
  std::optional<bool> activation_checkpointing = std::nullopt;
  // EMBER_MAX_GRAD_NORM: clip the global gradient norm to this before every
  // optimizer step (DeepSpeed's gradient_clipping); default: no clipping.
  std::optional<double> max_grad_norm = std::nullopt;
};

// Every option decided and checked.
struct ResolvedShardingOptions {
  ShardingStrategy strategy = ShardingStrategy::ddp;
  WrapPolicy wrap_policy = WrapPolicy::transformer;
  std::vector<std::string> wrap_module_types = {"TransformerBlock"};
  int64_t min_num_params = 100000;
  bool full_state_dict = true;
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  bool activation_checkpointing = false;
  std::optional<double> max_grad_norm;
};

// Code, else environment, else default; errors name the option, where its
// value came from and the value.
ResolvedShardingOptions resolve_sharding_options(const ShardingOptions& options);

}  // namespace ember::distributed
