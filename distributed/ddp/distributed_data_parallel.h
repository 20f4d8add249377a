// DistributedDataParallel: data parallelism by gradient averaging, as
// torch.nn.parallel.DistributedDataParallel. Every rank holds a replica of
// the model and runs it on its own part of the batch; during backward, the
// gradients are summed across ranks bucket by bucket (overlapping the rest of
// backward) and divided by the world size, so after backward() every rank
// holds the gradient of the mean loss over the global batch and the same
// optimizer step keeps the replicas equal.
//
//   auto model = std::make_shared<nn::Sequential>(...);
//   distributed::DistributedDataParallel ddp(model);   // broadcasts rank 0's weights
//   optim::SGD optimizer(model->parameters(), {.lr = 0.1});
//   for (auto& [inputs, targets] : loader) {            // a DistributedSampler's share
//     Tensor loss = F::cross_entropy(ddp(inputs), targets);
//     optimizer.zero_grad();
//     loss.backward();                                  // all-reduces, then averages
//     optimizer.step();
//   }
//
// DDP wraps nothing: it installs forward hooks on the module and
// post-accumulate-grad hooks on its parameters, so names and state_dict keys
// stay the module's own (no "module." prefix). The bucketing is in reducer.h;
// the design notes (Note [Bucket order], [Gradients as bucket views], [End of
// backward], [Unused parameters]) in distributed/README.md.
// Tests: tests/distributed/test_ddp.cpp (scenarios in workers/ddp_scenarios.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/tensor.h"
#include "distributed/ddp/reducer.h"
#include "distributed/process_group.h"
#include "nn/module.h"

namespace ember::distributed {

struct DDPOptions {
  // Gradient bytes per bucket (MiB): smaller buckets start communicating
  // earlier in backward, larger ones pay the per-collective cost less often.
  double bucket_cap_mb = 25;
  // The first bucket's cap (MiB, at most bucket_cap_mb): it holds the last
  // layers, whose gradients come first, so a small one starts communicating
  // early in backward (PyTorch's 1 MiB first bucket; Note [Bucket order]).
  double first_bucket_cap_mb = 1;
  // Before every forward, copy rank 0's buffers (BatchNorm running stats) to every rank.
  bool broadcast_buffers = true;
  // After every forward, walk the autograd graph from the output and treat
  // parameters it does not reach as ready (Note [Unused parameters]).
  bool find_unused_parameters = false;
  // How gradients travel (Accelerate's DistributedDataParallelKwargs.comm_hook,
  // PyTorch's fp16_compress_hook / bf16_compress_hook): "no", or "fp16" /
  // "bf16": each bucket is cast to that dtype and divided by the world size,
  // summed across ranks in it, and cast back: half the bytes on the wire, at
  // that dtype's rounding of the averaged gradients (Note [Compressed
  // gradients] in distributed/README.md).
  std::string comm_hook = "no";
  // Record a profile of backward nodes and communication (collectives,
  // buckets) and write it per rank to <prefix>.rank<N>.json when the process
  // ends or this object is destroyed (core/profiler/process_profile.h);
  // empty: the EMBER_DDP_TRACE environment variable's value, if any. With a
  // profile already recording (EMBER_PROFILE), the events go into it.
  std::string trace_prefix = "";
  bool operator==(const DDPOptions&) const = default;
};

// The dtype DDPOptions::comm_hook names, none for "no"; Accelerate's other
// hooks ("power_sgd", "batched_power_sgd") and unknown names are errors, not
// plain all-reduces.
std::optional<DType> comm_hook_dtype(const std::string& hook);

class DistributedDataParallel {
 public:
  // Over the default group (init_process_group first).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});
  // Collective: every rank of `group` constructs it with the same model
  // structure; rank 0's parameters and buffers are broadcast to the others.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DDPOptions options = {});
  // Waits for outstanding all-reduces, removes the forward hooks, makes every
  // .grad a standalone tensor again and writes the trace it started.
  ~DistributedDataParallel();
  // The hooks point at this object, which therefore stays where it was built.
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's single-tensor forward through its hooks; calling the module
  // itself is the same, and is how a module with another forward signature
  // is run (its operator(), Note [Module calls] in nn/README.md).
  Tensor forward(const Tensor& input) { return (*module_)(input); }
  Tensor operator()(const Tensor& input) { return forward(input); }
  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() const { return group_; }
  const Reducer& reducer() const { return *reducer_; }

  // While the guard lives, forwards do not prepare a reduction, so their
  // backwards only accumulate into .grad (the bucket views) and communicate
  // nothing; the first backward of a forward run after it all-reduces the
  // accumulated sum. As in PyTorch, what counts is where the forward runs:
  //   { auto guard = ddp.no_sync(); loss_of(ddp(micro_batch_1)).backward(); }
  //   loss_of(ddp(micro_batch_2)).backward();  // all-reduces both micro-batches' sum
  class NoSyncGuard {
   public:
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Where the process's profile will be written (empty when none records).
  std::string trace_path() const;

 private:
  void check_same_parameters_on_every_rank() const;
  void broadcast_from_rank0(const std::vector<Tensor>& tensors) const;
  void before_forward();
  void check_no_parameter_joined() const;
  void after_forward(const std::vector<Tensor*>& outputs);
  // Indices of the parameters the graphs of `outputs` do not reach.
  std::vector<size_t> unused_parameters(const std::vector<Tensor*>& outputs) const;

  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  DDPOptions options_;
  NamedTensors parameters_;  // those that require grad, registration order
  std::vector<Tensor> buffers_;
  std::shared_ptr<Reducer> reducer_;  // the gradient hooks hold it weakly
  bool started_profile_ = false;  // trace_prefix started the process's profile: write it at destruction
  std::vector<uint64_t> gradient_hooks_;  // one per parameter, removed at destruction
  nn::ModuleHookId pre_hook_ = 0;
  nn::ModuleHookId post_hook_ = 0;
  bool sync_ = true;
};

}  // namespace ember::distributed
