// ShardedDataParallel (see sharded_data_parallel.h): units, the module hooks
// that gather, release and reduce, and the optimizer's side.
#include "distributed/zero/sharded_data_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "autograd/engine.h"
#include "core/arithmetic.h"
#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "distributed/parameter_signature.h"
#include "distributed/zero/wrap_policy.h"

namespace ember::distributed {

ShardedDataParallel::ShardedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group,
                                         ResolvedShardingOptions options)
    : module_(std::move(module)), group_(group), options_(std::move(options)) {
  EMBER_CHECK(module_ != nullptr, "ShardedDataParallel: the module is null");
  EMBER_CHECK(options_.strategy != ShardingStrategy::ddp,
              "ShardedDataParallel: strategy ddp keeps full replicas; use DistributedDataParallel");
  NamedTensors parameters;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [name, parameter] : module_->named_parameters())
    if (parameter.requires_grad() && seen.insert(parameter.impl()).second) parameters.emplace_back(name, parameter);
  EMBER_CHECK(!parameters.empty(), "ShardedDataParallel: {} has no parameter that requires grad",
              module_->type_name());
  for (const auto& [name, parameter] : parameters)
    EMBER_CHECK(parameter.is_contiguous(),
                "ShardedDataParallel: parameter {} (shape {}) is not contiguous; call .contiguous() on it first",
                name, parameter.shape());
  buffers_ = module_->buffers();

  // Frozen parameters are not sharded, but every rank starts from rank 0's,
  // as from its trainable ones and buffers.
  const NamedTensors all_parameters = module_->named_parameters();
  check_same_parameters_on_every_rank(all_parameters);
  if (group_.size() > 1) {
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& entry : all_parameters) works.push_back(group_.broadcast(entry.second, 0));
    for (const Tensor& buffer : buffers_) works.push_back(group_.broadcast(buffer, 0));
    for (const auto& work : works) work->wait();
  }
  // EMBER_DDP_TRACE=<prefix> (or EMBER_PROFILE) records every all-gather and
  // reduction with its bytes, as DDP's buckets (core/profiler/process_profile.h).
  if (options_.strategy == ShardingStrategy::hybrid) make_hybrid_groups();
  build_units(parameters);
  install_module_hooks();
}

ShardedDataParallel::~ShardedDataParallel() {
  for (const auto& [module, id] : module_hooks_) module->remove_hook(id);
  for (size_t f = 0; f < flats_.size(); ++f)
    for (size_t i = 0; i < flats_[f]->parameters().size(); ++i)
      flats_[f]->parameters()[i].remove_post_accumulate_grad_hook(gradient_hooks_[f][i]);
  // An optimizer destroyed first took its hooks (and their token) with it.
  if (!optimizer_alive_.expired()) {
    for (HookId id : optimizer_hooks_) optimizer_->remove_hook(id);
    optimizer_->register_step_pre_hook([](optim::Optimizer& optimizer) -> bool {
      EMBER_CHECK(false,
                  "{}: its parameters are the pieces of a model whose ShardedDataParallel is gone, so a step would "
                  "update this rank's pieces only; build a new optimizer from the model's parameters",
                  optimizer.name());
      return false;
    });
  }
  flats_.clear();  // they wait for their collectives, which record spans
}

// Note [Same parameters on every rank].
void ShardedDataParallel::check_same_parameters_on_every_rank(const NamedTensors& parameters) const {
  distributed::check_same_parameters_on_every_rank(group_, parameters, "ShardedDataParallel", module_->named_buffers());
}

// HYBRID_SHARD: ranks are laid out node by node (ember launch, torchrun), so
// node k holds ranks [k*L, (k+1)*L) for L processes per node. Every rank
// takes part in making every group (new_group is collective over the
// default group), keeping the two it belongs to.
void ShardedDataParallel::make_hybrid_groups() {
  EMBER_CHECK(is_initialized() && &group_ == &default_group(),
              "ShardedDataParallel: strategy hybrid needs the default process group (it makes a group per node)");
  const int world = group_.size();
  const int per_node = read_distributed_env().local_world_size;
  EMBER_CHECK(per_node >= 1 && world % per_node == 0,
              "ShardedDataParallel: strategy hybrid: {} processes are not whole nodes of LOCAL_WORLD_SIZE={} each",
              world, per_node);
  const int rank = group_.rank();
  for (int node = 0; node < world / per_node; ++node) {
    std::vector<int> ranks;
    for (int local = 0; local < per_node; ++local) ranks.push_back(node * per_node + local);
    if (auto made = new_group(ranks)) shard_group_ = made;
  }
  for (int local = 0; local < per_node; ++local) {
    std::vector<int> ranks;
    for (int node = 0; node < world / per_node; ++node) ranks.push_back(node * per_node + local);
    if (auto made = new_group(ranks)) replica_group_ = made;
  }
  EMBER_ASSERT(shard_group_ && replica_group_, "rank {} is in no hybrid group", rank);
}

void ShardedDataParallel::build_units(const NamedTensors& parameters) {
  const std::vector<WrappedUnit> wrapped = choose_units(*module_, options_);
  // A parameter belongs to the one unit whose subtree holds it; one shared
  // by several units (a tie across them), or by a unit and a module outside
  // every unit, stays with the root, which is gathered for the whole forward
  // and backward (the second case failed mid-forward: the module outside used
  // the unit's weight while that unit was released).
  std::unordered_map<const TensorImpl*, std::vector<size_t>> holders;
  for (size_t u = 0; u < wrapped.size(); ++u) {
    std::unordered_set<const TensorImpl*> seen;
    for (const Tensor& parameter : wrapped[u].module->parameters())
      if (seen.insert(parameter.impl()).second) holders[parameter.impl()].push_back(u);
  }
  std::unordered_set<const nn::Module*> unit_modules;
  for (const WrappedUnit& unit : wrapped) unit_modules.insert(unit.module);
  std::vector<const nn::Module*> outside = {module_.get()};  // the root's own modules, walked to the units
  std::unordered_set<const nn::Module*> reached = {module_.get()};
  for (size_t next = 0; next < outside.size(); ++next) {
    for (const Tensor& parameter : outside[next]->parameters(/*recurse=*/false))
      holders[parameter.impl()].push_back(wrapped.size());
    for (const auto& [name, child] : outside[next]->named_children())
      if (!unit_modules.contains(child.get()) && reached.insert(child.get()).second) outside.push_back(child.get());
  }
  units_.resize(wrapped.size() + 1);
  for (size_t u = 0; u < wrapped.size(); ++u) {
    units_[u].name = wrapped[u].name;
    units_[u].module = wrapped[u].module;
  }
  Unit& root = units_.back();
  root.name = "";
  root.module = module_.get();
  root.root = true;

  std::vector<NamedTensors> members(units_.size());
  for (const auto& entry : parameters) {
    auto found = holders.find(entry.second.impl());
    const size_t unit = found != holders.end() && found->second.size() == 1 ? found->second[0] : units_.size() - 1;
    members[unit].push_back(entry);
  }
  const bool sharded = shards_parameters();
  for (size_t u = 0; u < units_.size(); ++u) {
    // One flat buffer per (dtype, device) in the unit, in parameter order.
    std::map<std::pair<int, std::string>, std::pair<std::vector<std::string>, std::vector<Tensor>>> by_kind;
    std::vector<std::pair<int, std::string>> kinds;
    for (const auto& [name, parameter] : members[u]) {
      auto key = std::pair{int(parameter.dtype()), parameter.device().str()};
      if (!by_kind.count(key)) kinds.push_back(key);
      by_kind[key].first.push_back(name);
      by_kind[key].second.push_back(parameter);
    }
    for (const auto& key : kinds) {
      units_[u].flats.push_back(flats_.size());
      flat_unit_.push_back(u);
      flats_.push_back(std::make_unique<FlatParameter>(by_kind[key].first, by_kind[key].second, shard_group(),
                                                       sharded, units_[u].name, replica_group_.get()));
    }
  }
  ready_.assign(units_.size(), false);
}

void ShardedDataParallel::install_module_hooks() {
  const size_t root = units_.size() - 1;
  for (size_t u = 0; u < units_.size(); ++u) {
    nn::Module& module = *units_[u].module;
    auto add = [&](nn::ModuleHookId id) { module_hooks_.emplace_back(&module, id); };
    add(module.register_forward_pre_hook([this, u, root](nn::ForwardCall&) {
      if (u == root) before_root_forward();
      before_unit_forward(u);
    }));
    add(module.register_forward_hook([this, u](nn::ForwardCall& call) { after_unit_forward(u, call); }));
    add(module.register_backward_pre_hook([this, u](nn::Module&) { before_unit_backward(u); }));
    add(module.register_backward_hook([this, u](nn::Module&) { unit_gradients_ready(u); }));
  }
  // Every gradient must come from a backward the hooks prepared, and reach a
  // unit before its reduction: else it would never be averaged.
  gradient_hooks_.resize(flats_.size());
  for (size_t f = 0; f < flats_.size(); ++f)
    for (size_t i = 0; i < flats_[f]->parameters().size(); ++i)
      gradient_hooks_[f].push_back(
          flats_[f]->parameters()[i].register_post_accumulate_grad_hook([this, f, i](const Tensor&) { on_gradient(f, i); }));
}

std::vector<std::string> ShardedDataParallel::unit_names() const {
  std::vector<std::string> names;
  for (const Unit& unit : units_) names.push_back(unit.name);
  return names;
}

// --- The hooks -------------------------------------------------------------------

void ShardedDataParallel::before_root_forward() {
  drop_unstarted_backward("a forward");
  iteration_syncs_ = sync_;
  if (!buffers_.empty() && group_.size() > 1) {
    std::vector<std::shared_ptr<Work>> works;
    for (const Tensor& buffer : buffers_) works.push_back(group_.broadcast(buffer, 0));
    for (const auto& work : works) work->wait();
  }
}

void ShardedDataParallel::before_unit_forward(size_t unit) {
  gather_unit(unit);
  if (!units_[unit].root) {
    if (!order_fixed_ && std::find(forward_order_.begin(), forward_order_.end(), unit) == forward_order_.end())
      forward_order_.push_back(unit);
    if (options_.forward_prefetch) prefetch_after(unit, forward_order_);
  } else if (options_.forward_prefetch && !forward_order_.empty()) {
    prefetch_unit(forward_order_.front());
  }
}

void ShardedDataParallel::after_unit_forward(size_t unit, const nn::ForwardCall& call) {
  if (!units_[unit].root) {
    if (shards_parameters()) release_unit(unit);
    return;
  }
  bool differentiable = false;
  for (const Tensor* output : call.outputs) differentiable |= output->requires_grad();
  if (!grad_mode_enabled() || !differentiable) {
    release_all();  // no backward will come (evaluation)
    return;
  }
  if (!order_fixed_) {
    // The reduction order is fixed once, from the first forward: backward
    // runs roughly in reverse, and every rank must launch the same
    // collectives in the same order. Rank 0's order is every rank's: a unit
    // that only some ranks' first forward used put the units in different
    // orders, and equal-sized units then reduced each other's gradients.
    reduce_order_.assign(forward_order_.rbegin(), forward_order_.rend());
    for (size_t u = 0; u + 1 < units_.size(); ++u)
      if (std::find(reduce_order_.begin(), reduce_order_.end(), u) == reduce_order_.end()) reduce_order_.push_back(u);
    reduce_order_.push_back(units_.size() - 1);
    if (group_.size() > 1) {
      Tensor order = from_vector(std::vector<int64_t>(reduce_order_.begin(), reduce_order_.end()));
      group_.broadcast(order, 0)->wait();
      const std::vector<int64_t> agreed = order.to_vector<int64_t>();
      reduce_order_.assign(agreed.begin(), agreed.end());
    }
    order_fixed_ = true;
  }
  backward_expected_ = true;
  backward_started_ = false;
  ready_.assign(units_.size(), false);
  launched_.assign(units_.size(), false);
  next_launch_ = 0;
}

void ShardedDataParallel::before_unit_backward(size_t unit) {
  if (!backward_expected_) return;
  backward_started_ = true;
  // ZeRO-2/3 keep only the reduced shards of the gradients, which only an
  // attached optimizer updates from: a step of an optimizer left out of
  // prepare would find no gradient and change nothing. Refused as the
  // backward reaches the model's output, before any rank has launched a
  // reduction (a forward alone, for inference, needs no optimizer).
  EMBER_CHECK(!units_[unit].root || !iteration_syncs_ || optimizer_ != nullptr ||
                  options_.strategy == ShardingStrategy::zero1,
              "ShardedDataParallel: under strategy {} the gradients are reduced into shards that only an attached "
              "optimizer updates from, and {} has none: pass the optimizer to prepare (prepare(model, optimizer)), "
              "or attach_optimizer()",
              to_string(options_.strategy), module_->type_name());
  gather_unit(unit);
  if (units_[unit].root) {
    autograd::queue_callback([this] { end_of_backward(); });
    return;
  }
  if (options_.backward_prefetch) prefetch_after(unit, reduce_order_);
}

void ShardedDataParallel::unit_gradients_ready(size_t unit) {
  if (!backward_expected_ || launched_[unit]) return;
  if (!iteration_syncs_) {
    if (!units_[unit].root && shards_parameters()) release_unit(unit);
    return;
  }
  ready_[unit] = true;
  launch_ready_in_order();
}

void ShardedDataParallel::on_gradient(size_t flat, size_t member) {
  const std::string& name = flats_[flat]->names()[member];
  EMBER_CHECK(backward_expected_,
              "ShardedDataParallel: parameter {} got a gradient from a forward that did not run through the model's "
              "hooks (model.forward(x) instead of model(x)?), so it would never be averaged across the {} ranks "
              "(Note [Forwards that skip the hooks] in distributed/README.md)",
              name, group_.size());
  backward_started_ = true;
  EMBER_CHECK(!launched_[flat_unit_[flat]],
              "ShardedDataParallel: parameter {} got a gradient after the gradients of its unit '{}' were reduced in "
              "this backward (a second backward through the same forward?); under ZeRO each forward has one backward",
              name, units_[flat_unit_[flat]].name);
}

void ShardedDataParallel::launch_ready_in_order() {
  while (next_launch_ < reduce_order_.size() && ready_[reduce_order_[next_launch_]]) {
    const size_t unit = reduce_order_[next_launch_++];
    // At most one unit's reduction in flight: its buffers are what a rank
    // holds of gradients beyond its shards.
    for (size_t f = 0; f < flats_.size(); ++f) flats_[f]->finish_reduction();
    for (size_t f : units_[unit].flats) flats_[f]->launch_reduction(options_.strategy == ShardingStrategy::zero1);
    launched_[unit] = true;
    if (!units_[unit].root && shards_parameters()) release_unit(unit);
  }
}

// Note [End of backward] for ZeRO: units whose backward hooks never fired
// (not called this iteration, or a parameter left without a gradient) are
// reduced now, in the fixed order, so every rank launches the same collectives.
void ShardedDataParallel::end_of_backward() {
  if (!backward_expected_) return;
  if (iteration_syncs_) {
    ready_.assign(units_.size(), true);
    launch_ready_in_order();
    for (auto& flat : flats_) flat->finish_reduction();
    reduced_since_step_ = true;
  }
  backward_expected_ = false;
  backward_started_ = false;
  release_all();
}

// A forward with grad on whose output is dropped (a metric, a loss never
// backpropagated) prepares a backward that never comes. PyTorch's FSDP and
// DDP take the next forward or step regardless, and so does ember's DDP
// (Note [Unused parameters]): nothing was reduced, so dropping it loses
// nothing, the same on every rank. A backward that a gradient has reached
// cannot be dropped: some of its reductions may have run.
void ShardedDataParallel::drop_unstarted_backward(const char* before) {
  if (!backward_expected_) return;
  EMBER_CHECK(!backward_started_,
              "ShardedDataParallel: {} came while the backward of the previous forward was under way (its gradients "
              "partly reduced): let that backward finish (did it throw?) before the next forward or step",
              before);
  backward_expected_ = false;
  release_all();
}

void ShardedDataParallel::gather_unit(size_t unit) {
  for (size_t f : units_[unit].flats) flats_[f]->gather();
}

void ShardedDataParallel::prefetch_unit(size_t unit) {
  for (size_t f : units_[unit].flats) flats_[f]->start_gather();
}

void ShardedDataParallel::prefetch_after(size_t unit, const std::vector<size_t>& order) {
  auto at = std::find(order.begin(), order.end(), unit);
  if (at == order.end() || ++at == order.end() || units_[*at].root) return;
  prefetch_unit(*at);
}

void ShardedDataParallel::release_unit(size_t unit) {
  for (size_t f : units_[unit].flats) flats_[f]->release();
}

void ShardedDataParallel::release_all() {
  if (!shards_parameters()) return;
  for (auto& flat : flats_) flat->release();
}

// --- The optimizer ----------------------------------------------------------------

void ShardedDataParallel::attach_optimizer(optim::Optimizer& optimizer, bool install_hooks) {
  EMBER_CHECK(optimizer_ == nullptr,
              "ShardedDataParallel: an optimizer ({}) is already attached; ZeRO shards one optimizer per model",
              optimizer_ != nullptr ? optimizer_->name() : "");
  EMBER_CHECK(optimizer.updates_elementwise(),
              "ShardedDataParallel: {} does not say it updates element by element (Optimizer::updates_elementwise), "
              "so updating each rank's piece of a parameter might not be updating the parameter; ZeRO takes SGD, "
              "Adam, AdamW, RMSprop, Adagrad, Lion, or an optimizer of one's own that overrides updates_elementwise",
              optimizer.name());
  std::unordered_map<const TensorImpl*, std::pair<size_t, size_t>> where;
  for (size_t f = 0; f < flats_.size(); ++f)
    for (size_t i = 0; i < flats_[f]->parameters().size(); ++i) where.emplace(flats_[f]->parameters()[i].impl(), std::pair{f, i});
  std::vector<std::pair<size_t, size_t>> slots;
  std::vector<size_t> slot_groups;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const Tensor& parameter : optimizer.params(g)) {
      auto found = where.find(parameter.impl());
      // A frozen parameter has no piece: the optimizer's state indices are its pieces'.
      EMBER_CHECK(found != where.end() || parameter.requires_grad(),
                  "ShardedDataParallel: {} holds a frozen parameter (requires_grad false) of shape {}; ZeRO shards "
                  "only trainable parameters, so build the optimizer from those (the parameters of "
                  "model->parameters() whose requires_grad() is true)",
                  optimizer.name(), parameter.shape());
      EMBER_CHECK(found != where.end(),
                  "ShardedDataParallel: {} holds a parameter of shape {} that is not a trainable parameter of the "
                  "sharded {}; ZeRO shards only the model's parameters (build the optimizer from model->parameters())",
                  optimizer.name(), parameter.shape(), module_->type_name());
      slots.push_back(found->second);
      slot_groups.push_back(g);
    }
  // State the optimizer has already (Adagrad's from its constructor, a loaded
  // checkpoint's, earlier steps'): taken whole, given back sliced to the pieces.
  const optim::OptimizerStateDict whole = optimizer.state_dict();
  optimizer.substitute_parameters([&](const Tensor& parameter) {
    const auto [f, i] = where.at(parameter.impl());
    return flats_[f]->piece(i);
  });
  optimizer_ = &optimizer;
  optimizer_slots_ = std::move(slots);
  slot_groups_ = std::move(slot_groups);
  if (!whole.meta["state"].empty()) optimizer.load_state_dict(optimizer_pieces(whole, /*copy=*/true));
  if (!install_hooks) return;
  auto token = std::make_shared<int>(0);
  optimizer_alive_ = token;
  optimizer_hooks_.push_back(optimizer.register_step_pre_hook([this, token](optim::Optimizer&) {
    before_step();
    if (options_.max_grad_norm) clip_optimizer_grad_norm_(*options_.max_grad_norm);
    return true;
  }));
  optimizer_hooks_.push_back(optimizer.register_step_post_hook([this, token](optim::Optimizer&) { after_step(); }));
  optimizer_hooks_.push_back(optimizer.register_zero_grad_pre_hook([this, token](optim::Optimizer&, bool set_to_none) {
    zero_grad(set_to_none);
    return true;
  }));
}

void ShardedDataParallel::before_step() {
  drop_unstarted_backward("an optimizer step");
  if (optimizer_ != nullptr) {
    // attach_optimizer gave the optimizer each parameter's piece; a group
    // added later holds whole parameters, whose gradients ZeRO-2/3 drop after
    // reducing them: it would never train.
    size_t held = 0;
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) held += optimizer_->params(g).size();
    EMBER_CHECK(held == optimizer_slots_.size(),
                "ShardedDataParallel: {} holds {} parameters, but {} were sharded when it was attached: a parameter "
                "group added afterwards (add_param_group) is not sharded and would never train; add every group "
                "before prepare (or attach_optimizer)",
                optimizer_->name(), held, optimizer_slots_.size());
  }
  if (!reduced_since_step_) {
    // Gradients accumulated under no_sync, never reduced: stepping on them
    // would let the ranks' shards drift apart silently.
    for (auto& flat : flats_)
      for (size_t i = 0; i < flat->parameters().size(); ++i)
        EMBER_CHECK(!flat->parameters()[i].grad().defined(),
                    "ShardedDataParallel: optimizer step with gradients that were never reduced (parameter {}): the "
                    "last backward ran under no_sync; run the last micro-batch's forward outside no_sync",
                    flat->names()[i]);
  }
  for (auto& flat : flats_) flat->publish_piece_gradients();
}

void ShardedDataParallel::after_step() {
  if (!shards_parameters())
    for (auto& flat : flats_) flat->refresh_after_step();
  reduced_since_step_ = false;
}

void ShardedDataParallel::zero_grad(bool set_to_none) {
  for (auto& flat : flats_) flat->clear_gradients(set_to_none);
  reduced_since_step_ = false;
}

std::vector<std::string> ShardedDataParallel::optimizer_parameter_names() const {
  std::vector<std::string> names;
  for (const auto& [f, i] : optimizer_slots_) names.push_back(flats_[f]->names()[i]);
  return names;
}

std::vector<Tensor> ShardedDataParallel::piece_parameters() const {
  std::vector<Tensor> pieces;
  for (const auto& [f, i] : optimizer_slots_) pieces.push_back(flats_[f]->piece(i));
  return pieces;
}

// The same formula as optim::clip_grad_norm_, on shards: the padding and the
// parameters no rank used are zeros there, so they add nothing.
Tensor ShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  for (auto& flat : flats_) flat->publish_piece_gradients();
  std::vector<Tensor> gradients;
  for (auto& flat : flats_)
    if (flat->has_gradients()) gradients.push_back(flat->gradient_shard());
  return clip_gradients_(gradients, max_norm, norm_type);
}

Tensor ShardedDataParallel::clip_optimizer_grad_norm_(double max_norm) {
  for (auto& flat : flats_) flat->publish_piece_gradients();
  std::vector<Tensor> gradients;
  for (const auto& [f, i] : optimizer_slots_) {
    FlatParameter& flat = *flats_[f];
    if (flat.has_gradients() && flat.piece(i).numel() > 0)
      gradients.push_back(flat.gradient_shard().narrow(0, flat.piece_shard_offset(i), flat.piece(i).numel()));
  }
  return clip_gradients_(gradients, max_norm, 2.0);
}

Tensor ShardedDataParallel::clip_gradients_(const std::vector<Tensor>& gradients, double max_norm, double norm_type) {
  // The shards' norms combine as (sum of norm^p)^(1/p), which holds for p > 0
  // only: with p = 0 it gave inf and zeroed every gradient, and a negative p
  // takes the padding's zeros to infinity.
  EMBER_CHECK(norm_type > 0, "ShardedDataParallel::clip_grad_norm_: norm_type must be positive (or inf) under "
              "sharding, got {}", norm_type);
  const bool infinity = std::isinf(norm_type);
  double local = 0;
  for (const Tensor& gradient : gradients) {
    const double shard_norm = norm(gradient, infinity ? INFINITY : norm_type).to(DType::f64).item<double>();
    // arith::maximum keeps a NaN norm (std::max dropped one after the first shard).
    local = infinity ? arith::maximum(local, shard_norm) : local + std::pow(shard_norm, norm_type);
  }
  // Over one copy of each shard: under hybrid the other nodes hold the same ones.
  Tensor total = scalar_tensor(local, {.dtype = DType::f64});
  if (shard_group().size() > 1) shard_group().allreduce(total, infinity ? ReduceOp::max : ReduceOp::sum)->wait();
  const double norm_value = infinity ? total.item<double>() : std::pow(total.item<double>(), 1.0 / norm_type);
  const double coefficient = std::min(max_norm / (norm_value + 1e-6), 1.0);
  NoGradGuard no_grad;
  for (Tensor gradient : gradients) gradient *= coefficient;
  return scalar_tensor(norm_value, {.dtype = DType::f32});
}

void ShardedDataParallel::clip_grad_value_(double clip_value) {
  for (auto& flat : flats_) flat->publish_piece_gradients();
  NoGradGuard no_grad;
  for (auto& flat : flats_)
    if (flat->has_gradients()) flat->gradient_shard().copy_(clamp(flat->gradient_shard(), -clip_value, clip_value));
}

void ShardedDataParallel::scale_gradients_(double factor) {
  for (auto& flat : flats_) flat->scale_gradients_(factor);
}

ShardedMemory ShardedDataParallel::memory() const {
  ShardedMemory memory;
  for (const auto& flat : flats_) {
    memory.parameters += flat->parameter_bytes();
    memory.gradients += flat->gradient_bytes();
  }
  return memory;
}

}  // namespace ember::distributed
