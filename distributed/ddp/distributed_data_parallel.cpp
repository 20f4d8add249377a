// DistributedDataParallel (see distributed_data_parallel.h): construction
// (consistency check, broadcast, buckets, hooks), the forward hooks and the
// graph walk for unused parameters.
#include "distributed/ddp/distributed_data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/profiler/process_profile.h"
#include "distributed/parameter_signature.h"

namespace ember::distributed {

namespace {

// MiB to bytes, at least one (PyTorch's one parameter per bucket for a tiny
// cap: 1e-9 MiB was refused as "0 bytes") and at most INT64_MAX (infinity
// and 1e300 converted out of range, undefined behaviour).
int64_t cap_bytes(double mebibytes) {
  const double bytes = mebibytes * 1024 * 1024;
  if (bytes >= 9.2e18) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(1, int64_t(bytes));
}

std::string trace_prefix(const DDPOptions& options) {
  if (!options.trace_prefix.empty()) return options.trace_prefix;
  const char* value = std::getenv("EMBER_DDP_TRACE");
  return value ? value : "";
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

std::optional<DType> comm_hook_dtype(const std::string& hook) {
  if (hook == "no") return std::nullopt;
  if (hook == "fp16") return DType::f16;
  if (hook == "bf16") return DType::bf16;
  EMBER_CHECK(hook != "power_sgd" && hook != "batched_power_sgd",
              "DistributedDataParallel: comm_hook \"{}\" (PowerSGD) is not supported; \"fp16\" and \"bf16\" compress "
              "gradients to half the bytes, \"no\" sends them as they are",
              hook);
  detail::throw_error(
      fmt::format("DistributedDataParallel: unknown comm_hook \"{}\"; expected \"no\", \"fp16\" or \"bf16\"", hook));
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : DistributedDataParallel(std::move(module), default_group(), std::move(options)) {}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group,
                                                 DDPOptions options)
    : module_(std::move(module)), group_(group), options_(std::move(options)) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  EMBER_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got {}",
              options_.bucket_cap_mb);
  EMBER_CHECK(options_.first_bucket_cap_mb > 0, "DistributedDataParallel: first_bucket_cap_mb must be positive, got {}",
              options_.first_bucket_cap_mb);
  const std::optional<DType> compress_to = comm_hook_dtype(options_.comm_hook);
  for (auto& [name, parameter] : module_->named_parameters())
    if (parameter.requires_grad()) parameters_.emplace_back(name, parameter);
  EMBER_CHECK(!parameters_.empty(), "DistributedDataParallel: {} has no parameter that requires grad",
              module_->type_name());
  buffers_ = module_->buffers();

  // Every rank starts from rank 0's weights, frozen ones included, and its
  // buffers (PyTorch's _sync_module_states): equal gradients keep them equal.
  check_same_parameters_on_every_rank();
  std::vector<Tensor> state;
  for (const auto& entry : module_->named_parameters()) state.push_back(entry.second);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(state);

  if (std::string prefix = trace_prefix(options_); !prefix.empty()) {
    profiler::set_process_rank(group_.global_rank(group_.rank()));
    started_profile_ = profiler::start_process_profile({.path_prefix = prefix + ".rank",
                                                        .record = {.record_ops = false, .record_steps = false},
                                                        .print_table = false});
  }
  reducer_ = std::make_shared<Reducer>(
      parameters_, group_,
      ReducerOptions{.bucket_cap_bytes = cap_bytes(options_.bucket_cap_mb),
                     .first_bucket_cap_bytes = cap_bytes(options_.first_bucket_cap_mb),
                     .find_unused_parameters = options_.find_unused_parameters,
                     .compress_to = compress_to});

  // The destructor removes these hooks; they hold the reducer weakly all the
  // same, so a backward running while this object dies finds nothing to call.
  for (size_t index = 0; index < parameters_.size(); ++index) {
    std::weak_ptr<Reducer> weak = reducer_;
    gradient_hooks_.push_back(parameters_[index].second.register_post_accumulate_grad_hook([weak, index](const Tensor&) {
      if (std::shared_ptr<Reducer> reducer = weak.lock()) reducer->on_gradient(index);
    }));
  }
  pre_hook_ = module_->register_forward_pre_hook([this](nn::ForwardCall&) { before_forward(); });
  post_hook_ = module_->register_forward_hook([this](nn::ForwardCall& call) { after_forward(call.outputs); });
}

DistributedDataParallel::~DistributedDataParallel() {
  module_->remove_hook(pre_hook_);
  module_->remove_hook(post_hook_);
  for (size_t index = 0; index < parameters_.size(); ++index)
    parameters_[index].second.remove_post_accumulate_grad_hook(gradient_hooks_[index]);
  reducer_->wait_outstanding();
  reducer_->detach_gradients();
  reducer_.reset();
  if (started_profile_) profiler::finish_process_profile();
}

std::string DistributedDataParallel::trace_path() const { return profiler::process_profile_path(); }

// Note [Same parameters on every rank]: a rank built with another model would
// otherwise hang in the broadcast, or train on buffers of the wrong meaning.
void DistributedDataParallel::check_same_parameters_on_every_rank() const {
  distributed::check_same_parameters_on_every_rank(group_, module_->named_parameters(), "DistributedDataParallel",
                                                   module_->named_buffers());
}

void DistributedDataParallel::broadcast_from_rank0(const std::vector<Tensor>& tensors) const {
  if (group_.size() == 1) return;
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& tensor : tensors) works.push_back(group_.broadcast(tensor, 0));
  for (const auto& work : works) work->wait();
}

void DistributedDataParallel::before_forward() {
  // A forward with grad mode on needs a reduction that a backward began to
  // have finished, under no_sync too (PyTorch's _rebuild_buckets checks its
  // require_finalize_). One that no gradient reached yet is not in the way:
  // a forward whose output is never backpropagated, or two forwards before
  // one backward, work as in PyTorch (the next synced forward re-prepares).
  // An evaluation forward under NoGradGuard never checks.
  if (grad_mode_enabled() && reducer_->reduction_unfinished()) {
    // With find_unused_parameters on, the usual advice is wrong: the forward
    // did reach these parameters, but no gradient reached their accumulators
    // (a custom Function returning an undefined gradient for one, or a
    // backward that stopped short of them).
    const std::string advice =
        options_.find_unused_parameters
            ? "find_unused_parameters is on, so the forward used these parameters but no gradient reached them: a "
              "custom Function that returns an undefined gradient for one (return zeros instead), or a backward "
              "that did not run to them"
            : "You can enable unused parameter detection by passing find_unused_parameters=true in DDPOptions, and "
              "by making sure all forward outputs participate in calculating loss";
    EMBER_CHECK(false,
                "DistributedDataParallel: Expected to have finished reduction in the prior iteration before starting "
                "a new one. This error indicates that your module has parameters that were not used in producing "
                "loss. {}. Parameters which did not receive grad for rank {}: {}",
                advice, group_.rank(), joined(reducer_->unready_parameters()));
  }
  if (options_.broadcast_buffers) broadcast_from_rank0(buffers_);
  if (grad_mode_enabled()) check_no_parameter_joined();
}

// The reducer's buckets hold the parameters that required grad when DDP was
// built. One unfrozen afterwards (gradual unfreezing) or added got its own
// gradient on each rank, never averaged: the replicas drifted apart without
// a word (PyTorch's DDP does the same). A parameter frozen afterwards is
// fine: its slot is filled as unused, or refused as such.
void DistributedDataParallel::check_no_parameter_joined() const {
  size_t next = 0;
  for (const auto& [name, parameter] : module_->named_parameters()) {
    if (next < parameters_.size() && parameter.impl() == parameters_[next].second.impl()) {
      ++next;
      continue;
    }
    EMBER_CHECK(!parameter.requires_grad(),
                "DistributedDataParallel: parameter \"{}\" requires grad but did not when DistributedDataParallel was "
                "built (unfrozen or added afterwards), so its gradient would never be averaged across the {} ranks "
                "and the replicas would drift apart; leave the parameter trainable from the start and add it to the "
                "optimizer (add_param_group) when it should train (the one way under the Accelerator, which "
                "prepares a model once), or, with DistributedDataParallel of your own, build it again after "
                "changing which parameters train",
                name, group_.size());
  }
}

void DistributedDataParallel::after_forward(const std::vector<Tensor*>& outputs) {
  // Only a forward whose backward will run (grad mode on, an output in a
  // graph) prepares a reduction; under no_sync it only allows the backward
  // to accumulate locally (Note [Forwards that skip the hooks]).
  bool differentiable = false;
  for (const Tensor* output : outputs) differentiable |= output->requires_grad();
  if (!grad_mode_enabled() || !differentiable) return;
  if (!sync_) {
    reducer_->allow_local_accumulation();
    return;
  }
  reducer_->prepare_for_backward(options_.find_unused_parameters ? unused_parameters(outputs)
                                                                 : std::vector<size_t>{});
}

std::vector<size_t> DistributedDataParallel::unused_parameters(const std::vector<Tensor*>& outputs) const {
  // Note [Unused parameters]: the parameters whose accumulators the graph
  // reaches get a gradient in backward; the rest do not.
  std::unordered_set<const TensorImpl*> reached;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> stack;
  for (const Tensor* output : outputs) {
    if (!output->requires_grad()) continue;
    if (output->grad_fn()) {
      stack.push_back(output->grad_fn().get());
    } else {
      reached.insert(output->impl());  // the output is itself a parameter
    }
  }
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto* accumulator = dynamic_cast<const autograd::AccumulateGrad*>(node))
      reached.insert(accumulator->leaf().get());
    for (const autograd::Edge& edge : node->next)
      if (edge.node) stack.push_back(edge.node.get());
  }
  std::vector<size_t> unused;
  for (size_t index = 0; index < parameters_.size(); ++index)
    if (!reached.count(parameters_[index].second.impl())) unused.push_back(index);
  return unused;
}

}  // namespace ember::distributed
