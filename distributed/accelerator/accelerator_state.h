// What an Accelerator keeps: its resolved options, the process group, the
// scaler, the gradient-accumulation state and one record per prepared
// object. Shared by the files that implement the Accelerator
// (accelerator.cpp: prepare and the training step; accelerator_collectives.cpp;
// accelerator_checkpointing.cpp); not installed for users.
//
// Hooks installed on user objects hold the state weakly and do nothing once
// the accelerator is gone; each hook also holds a token whose expiry tells
// the accelerator that the object (and with it the hook) is gone, so neither
// side ever touches the other after its destruction, whatever order the user
// declared them in (Note [How prepare changes the user's objects]).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/hook_list.h"
#include "data/sharded_batch_sampler.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/accelerator/trackers.h"
#include "distributed/amp/grad_scaler.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/zero/sharded_data_parallel.h"

namespace ember::detail {

// Whether the object a hook was installed on still exists: the hook's
// closure owns `token`; the record keeps only `alive`.
struct HookToken {
  std::shared_ptr<int> token = std::make_shared<int>(0);
  std::weak_ptr<int> alive = token;
};

struct PreparedModel {
  std::shared_ptr<nn::Module> module;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;  // with more than one process, strategy ddp
  std::unique_ptr<distributed::ShardedDataParallel> zero;    // with more than one process, a ZeRO strategy
  HookId autocast_wrapper = 0;                                // with mixed precision
  // With autocast and no DDP: whether the model was called through its hooks
  // since the last optimizer step, and the gradient hooks that check it
  // (Note [Forwards that skip the hooks]).
  std::shared_ptr<bool> called_since_step;
  std::vector<std::pair<Tensor, uint64_t>> gradient_hooks;
};

struct PreparedOptimizer {
  optim::Optimizer* optimizer = nullptr;
  std::weak_ptr<int> alive;
  HookId step_hook = 0;
  HookId step_post_hook = 0;
  HookId zero_grad_hook = 0;
  // The ZeRO engine whose model this optimizer updates (its pieces), or null.
  distributed::ShardedDataParallel* zero = nullptr;
  bool step_was_skipped = false;  // by the fp16 scaler, at the last real step
  // Note [One scaler update per iteration]: whether it stepped since the
  // scaler's last update, and whether an Accelerator::backward() ran since its
  // last step or zero_grad, so its gradients are scaled by the current scale.
  bool stepped_since_scaler_update = false;
  bool holds_scaled_gradients = false;
};

struct PreparedScheduler {
  optim::LRScheduler* scheduler = nullptr;
  std::weak_ptr<int> alive;
  HookId hook = 0;
};

struct PreparedLoader {
  data::DataLoader* loader = nullptr;
  std::weak_ptr<int> alive;
  HookId hook = 0;
  HookId end_hook = 0;
  std::shared_ptr<data::BatchSampler> original;         // the batch sampler before sharding
  std::shared_ptr<data::ShardedBatchSampler> sharded;   // null with one process
  bool at_last_batch = false;                           // the batch it last handed out ends its epoch
};

// Accelerate's GradientState: where the accumulation stands.
struct GradientState {
  bool sync_gradients = true;
  int64_t step = 0;  // batches counted by accumulate() since the last synchronisation
  // The prepared loaders whose iteration is running, innermost last (an
  // evaluation loop inside a training loop): a loader leaves when its
  // iteration ends, and the one around it is the data again (Accelerate's
  // dataloader_references).
  std::vector<PreparedLoader*> active_loaders;
  PreparedLoader* active_loader() const { return active_loaders.empty() ? nullptr : active_loaders.back(); }
  // The current batch is its loader's last of the epoch.
  bool end_of_dataloader() const { return active_loader() && active_loader()->at_last_batch; }
};

struct AcceleratorState {
  ResolvedAcceleratorOptions options;
  int process_index = 0;
  int local_process_index = 0;
  int num_processes = 1;
  Device device = kCPU;
  distributed::ProcessGroup* group = nullptr;  // null with one process
  bool owns_group = false;                     // init_process_group was ours to call
  DType low_precision = DType::f32;            // bf16 or f16 under mixed precision
  std::unique_ptr<distributed::GradScaler> scaler;
  GradientState gradient;
  std::vector<PreparedModel> models;
  std::vector<std::unique_ptr<PreparedOptimizer>> optimizers;
  std::vector<std::unique_ptr<PreparedScheduler>> schedulers;
  std::vector<std::unique_ptr<PreparedLoader>> loaders;
  std::vector<Checkpointable> checkpointables;
  std::vector<Generator*> generators;  // registered for checkpointing; each process saves its own state
  std::vector<std::unique_ptr<distributed::Tracker>> trackers;
  // With automatic checkpoint naming, the main process's lock on the
  // checkpoints directory, from its first save_state to the end
  // (Note [One job saves into a directory]).
  std::optional<distributed::checkpoint::SaveLock> checkpoint_lock;
};

// Runs `write` on this process, then all processes learn whether every one of
// them succeeded: a failure is rethrown where it happened, and everywhere else
// becomes an error naming `op` and the failed process indices, so no process
// waits forever on one that failed (save_state, save_model). A process that
// dies meanwhile makes the others' error name `op` and the dead process.
void run_on_every_process(AcceleratorState& state, const char* op, const std::function<void()>& work);

// The scaler's update() for the steps taken since the last one, if any; the
// gradients still waiting for their step are rescaled to the new scale
// (Note [One scaler update per iteration] in distributed/README.md).
void update_scaler_if_pending(AcceleratorState& state);

}  // namespace ember::detail
