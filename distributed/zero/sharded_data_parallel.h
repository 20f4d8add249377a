// ShardedDataParallel: ZeRO stages 1-3 (FSDP), the sharded cousins of
// DistributedDataParallel. The model is split into units (wrap_policy.h);
// each unit's parameters live in FlatParameters whose shards are spread over
// the ranks (flat_parameter.h). What each stage keeps on a rank, and what it
// communicates, is Note [ZeRO stages] in distributed/README.md:
//   zero1: full parameters and gradients; the optimizer updates this rank's
//          shard, the updated shards are all-gathered after each step;
//   zero2: gradients reduce-scattered unit by unit during backward, only the
//          shard kept;
//   zero3: parameters too: a unit's are all-gathered before its forward and
//          again before its backward, released after each (the next unit's
//          gather is started early, prefetch).
//
//   auto model = std::make_shared<GPT>(config);
//   optim::AdamW optimizer(model->parameters(), {.lr = 3e-4});
//   ShardedDataParallel zero(model, group, {.strategy = ShardingStrategy::zero3});
//   zero.attach_optimizer(optimizer);            // it now updates this rank's pieces
//   Tensor loss = loss_of((*model)(inputs));     // call the model: the hooks gather
//   loss.backward();                             // reduce-scatters unit by unit
//   optimizer.step();
//   optimizer.zero_grad();
//
// The Accelerator builds one when its strategy is not ddp; then it calls
// before_step/after_step/zero_grad from its own optimizer hooks (which know
// whether this step really steps). Whole and sharded state for checkpoints
// are in sharded_state.cpp. Tests: tests/distributed/test_zero.cpp
// (scenarios in workers/zero_scenarios.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/named_tensors.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "distributed/zero/flat_parameter.h"
#include "distributed/zero/sharding_options.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace ember::distributed {

// What one rank holds between steps, in bytes (the memory estimate and the
// tests compare it with the allocator's counters).
struct ShardedMemory {
  int64_t parameters = 0;  // shards (ZeRO-3) or full copies, plus the root unit's gathered copy
  int64_t gradients = 0;   // accumulated gradient shards, or full gradients (ZeRO-1)
};

class ShardedDataParallel {
 public:
  // Collective: every rank of `group` builds it with the same model. Rank 0's
  // parameters and buffers are broadcast first (as DDP does), after checking
  // that every rank has the same parameter names, shapes and dtypes.
  ShardedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, ResolvedShardingOptions options);
  // Removes every hook it installed. The parameters stay as they are: under
  // ZeRO-3 released, so read the model through full_state_dict() first. An
  // attached optimizer that is still alive refuses to step from then on: its
  // parameters are pieces that no engine all-gathers any more.
  ~ShardedDataParallel();
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  nn::Module& module() const { return *module_; }
  ShardingStrategy strategy() const { return options_.strategy; }
  ProcessGroup& group() const { return group_; }
  // The processes a shard is spread over: the group, or under hybrid this node's.
  ProcessGroup& shard_group() const { return shard_group_ ? *shard_group_ : group_; }
  // The units' module paths ("" for the root), in the order of the model's modules.
  std::vector<std::string> unit_names() const;
  const std::vector<std::unique_ptr<FlatParameter>>& flat_parameters() const { return flats_; }

  // The optimizer updates this rank's piece of each parameter from now on
  // (Optimizer::substitute_parameters). Either may be destroyed first. With `install_hooks` its step and
  // zero_grad run before_step/after_step/zero_grad themselves; the
  // Accelerator passes false and calls them when a step really happens.
  void attach_optimizer(optim::Optimizer& optimizer, bool install_hooks = true);
  optim::Optimizer* optimizer() const { return optimizer_; }
  // The model's name of each of the optimizer's parameters, in its order.
  std::vector<std::string> optimizer_parameter_names() const;
  // Checks that the gradients were reduced and hands the optimizer its
  // pieces' gradients. Clipping (max_grad_norm) is the caller's, after it:
  // with fp16 the gradients must be unscaled first.
  void before_step();
  void after_step();
  void zero_grad(bool set_to_none = true);

  // While the guard lives, forwards prepare no reduction: their backwards
  // accumulate full gradients locally, reduced by the first backward of a
  // forward run after it (DDP's no_sync; FSDP's, with the same cost: full
  // gradients are held meanwhile).
  class NoSyncGuard {
   public:
    ~NoSyncGuard() { engine_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class ShardedDataParallel;
    explicit NoSyncGuard(ShardedDataParallel& engine) : engine_(engine), previous_(engine.sync_) { engine.sync_ = false; }
    ShardedDataParallel& engine_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The global gradient norm over every rank's shards (one all-reduce), and
  // the shards scaled so that it is at most max_norm, as optim::clip_grad_norm_
  // does on whole gradients. Call it between backward and step.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // The same over the attached optimizer's parameters only (max_grad_norm:
  // what clipping the optimizer's parameters does without sharding).
  Tensor clip_optimizer_grad_norm_(double max_norm);
  void clip_grad_value_(double clip_value);
  // Multiplies every gradient the engine holds by `factor`, reduced or
  // accumulated under no_sync (the Accelerator's rescale when the fp16 loss
  // scale changes while this model's optimizer has yet to step).
  void scale_gradients_(double factor);
  // The pieces the optimizer updates (for the fp16 scaler's unscale and inf check).
  std::vector<Tensor> piece_parameters() const;

  // --- Whole state, for checkpoints and save_model (collectives) -------------
  // The module's state dict with every parameter whole (copies).
  NamedTensors full_state_dict();
  // Writes whole tensors (a state dict of this module) into the shards.
  void load_full_state_dict(const NamedTensors& state);
  // The attached optimizer's state as if it had updated whole parameters:
  // what DDP's optimizer would hold, loadable at any world size and strategy.
  optim::OptimizerStateDict full_optimizer_state_dict();
  // Cuts a whole-parameter optimizer state (full_optimizer_state_dict's, or a
  // DDP run's) into this rank's pieces.
  void load_full_optimizer_state_dict(const optim::OptimizerStateDict& state);
  // Throws what load_full_optimizer_state_dict(state) would throw; changes nothing.
  void check_full_optimizer_state_dict(const optim::OptimizerStateDict& state);

  // --- Sharded state (state_dict_type "sharded", Note [Sharded checkpoints]) --
  // This rank's piece of every parameter (1-D copies, by parameter name) and
  // where each piece starts in its flattened parameter:
  //   {"<name>": {"begin": b, "shape": [...]}}.
  NamedTensors local_parameter_pieces() const;
  // Whether `tensor` is (a view of) one of the sharded parameters.
  bool holds(const Tensor& tensor) const;
  nlohmann::json piece_ranges() const;
  // The attached optimizer's state of this rank's pieces, its "state" entries
  // made whole (which parameters have state and their steps, agreed over
  // the ranks: a collective).
  optim::OptimizerStateDict local_optimizer_state();

  ShardedMemory memory() const;

 private:
  // The global norm of these gradients (views of this rank's shards) over
  // the shard group, and the views scaled so that it is at most max_norm.
  Tensor clip_gradients_(const std::vector<Tensor>& gradients, double max_norm, double norm_type);
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;
    std::vector<size_t> flats;  // indices into flats_
    bool root = false;
  };

  void check_same_parameters_on_every_rank(const NamedTensors& parameters) const;
  // This rank's pieces of a whole-parameter optimizer state: copies, or
  // views into `state` when `copy` is false (a check).
  optim::OptimizerStateDict optimizer_pieces(const optim::OptimizerStateDict& state, bool copy) const;
  void build_units(const NamedTensors& parameters);
  void install_module_hooks();
  // Hooks of each unit's module (the root's pre-hook also runs before_root_forward).
  void before_root_forward();
  void before_unit_forward(size_t unit);
  void after_unit_forward(size_t unit, const nn::ForwardCall& call);
  void before_unit_backward(size_t unit);
  void unit_gradients_ready(size_t unit);
  void on_gradient(size_t flat, size_t member);
  void end_of_backward();
  // Drops the backward a forward prepared when no gradient has reached it
  // (the forward's output was never backpropagated); refuses one under way.
  void drop_unstarted_backward(const char* before);
  void launch_ready_in_order();
  void gather_unit(size_t unit);
  void prefetch_unit(size_t unit);
  // Starts gathering the unit after `unit` in `order`.
  void prefetch_after(size_t unit, const std::vector<size_t>& order);
  void release_unit(size_t unit);
  void release_all();  // ZeRO-3: every unit, the root too
  // zero3 and hybrid: parameters are released between uses.
  bool shards_parameters() const {
    return options_.strategy == ShardingStrategy::zero3 || options_.strategy == ShardingStrategy::hybrid;
  }
  void make_hybrid_groups();
  // The "state" of full_optimizer_state_dict: every parameter some rank has
  // state for, with its step count (one all-reduce).
  nlohmann::json agreed_optimizer_state_entries(const optim::OptimizerStateDict& local);

  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  ResolvedShardingOptions options_;
  // Hybrid: this node's processes (they shard) and this shard's holders on
  // every node (they average); both null otherwise.
  std::shared_ptr<ProcessGroup> shard_group_, replica_group_;
  std::vector<Tensor> buffers_;
  std::vector<std::unique_ptr<FlatParameter>> flats_;
  std::vector<size_t> flat_unit_;  // the unit of each flat
  std::vector<std::vector<uint64_t>> gradient_hooks_;  // per flat, per parameter
  std::vector<Unit> units_;  // the root last
  std::vector<std::pair<nn::Module*, nn::ModuleHookId>> module_hooks_;

  optim::Optimizer* optimizer_ = nullptr;
  std::vector<std::pair<size_t, size_t>> optimizer_slots_;  // the optimizer's k-th parameter: (flat, member)
  std::vector<size_t> slot_groups_;                          // and its param group
  std::vector<HookId> optimizer_hooks_;
  std::weak_ptr<int> optimizer_alive_;  // expires with the optimizer (its hooks own the token)

  bool sync_ = true;
  bool iteration_syncs_ = true;       // the last root forward ran with sync_
  bool backward_expected_ = false;    // a forward whose backward has not ended
  bool backward_started_ = false;     // and that backward has begun
  bool reduced_since_step_ = false;   // a synced backward ended since the last step
  // Units (not the root) in the order the first forward called them, and
  // the reduction order derived from it: fixed then, the same on every rank.
  std::vector<size_t> forward_order_;
  std::vector<size_t> reduce_order_;
  bool order_fixed_ = false;
  // This backward's progress.
  size_t next_launch_ = 0;
  std::vector<bool> ready_;
  std::vector<bool> launched_;
};

}  // namespace ember::distributed
