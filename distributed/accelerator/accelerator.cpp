// Accelerator: construction, prepare() and the training step (backward,
// accumulate, clipping). Collectives are in accelerator_collectives.cpp,
// checkpoints in accelerator_checkpointing.cpp, trackers in
// accelerator_trackers.cpp. Notes [How prepare changes the user's objects] and
// [Gradient accumulation] in distributed/README.md.
#include "distributed/accelerator/accelerator.h"

#include <algorithm>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <unordered_set>

#include "core/allocator.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/profiler/process_profile.h"
#include "core/random.h"
#include "core/stream.h"
#include "core/version.h"
#include "data/distributed_sampler.h"
#include "distributed/accelerator/accelerator_plan.h"
#include "distributed/accelerator/accelerator_state.h"
#include "distributed/environment.h"
#include "distributed/zero/wrap_policy.h"
#include "nn/checkpoint.h"
#include "optim/clip_grad.h"

namespace ember {

using detail::AcceleratorState;
using detail::HookToken;

std::string_view to_string(DistributedType type) {
  switch (type) {
    case DistributedType::no:
      return "NO";
    case DistributedType::multi_cpu:
      return "MULTI_CPU";
    case DistributedType::multi_gpu:
      return "MULTI_GPU";
  }
  return "?";
}

namespace {

// As Accelerate: the GPU of this process's local rank when there are GPUs,
// unless options.cpu (EMBER_USE_CPU, --cpu); else the CPU. Each process of a
// node needs its own GPU (NCCL refuses two ranks on one device).
Device choose_device(const ResolvedAcceleratorOptions& options, int local_rank) {
  if (options.cpu || !cuda::is_available()) return kCPU;
  const int gpus = cuda::device_count();
  EMBER_CHECK(local_rank < gpus,
              "Accelerator: local process {} would use cuda:{}, but this machine has {} GPU{}; start at most {} "
              "processes per node, or run on the CPU (cpu = true, EMBER_USE_CPU=1, ember launch --cpu)",
              local_rank, local_rank, gpus, gpus == 1 ? "" : "s", gpus);
  return Device(DeviceType::cuda, local_rank);
}

bool is_low_precision(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

// The scaler while loss scaling is on. A disabled one (GradScalerOptions::enabled
// = false, Accelerate's GradScalerKwargs(enabled=False)) leaves fp16 autocast
// without loss scaling, as if there were no scaler.
distributed::GradScaler* active_scaler(const AcceleratorState& state) {
  return state.scaler && state.scaler->is_enabled() ? state.scaler.get() : nullptr;
}

// Note [One scaler update per iteration]: a live optimizer that has not stepped
// since the last update holds gradients of the current scale, so the scale
// must not change before its step.
bool scaled_gradients_await_a_step(const AcceleratorState& state) {
  return std::any_of(state.optimizers.begin(), state.optimizers.end(), [](const auto& prepared) {
    return !prepared->alive.expired() && prepared->holds_scaled_gradients && !prepared->stepped_since_scaler_update;
  });
}

// A step on gradients that no Accelerator::backward() scaled since the last
// step would divide them by the scale again: a second step on the same
// gradients, or a loss.backward() that bypassed the Accelerator.
void check_gradients_are_scaled(const detail::PreparedOptimizer& record, const distributed::GradScaler& scaler) {
  EMBER_CHECK(record.holds_scaled_gradients,
              "{}.step(): with mixed_precision \"fp16\" each step needs an Accelerator::backward() since the "
              "optimizer's last step() or zero_grad(); its gradients are not scaled by the loss scale {}, and "
              "unscaling them would divide them by it again. Call accelerator.backward(loss) (not loss.backward()) "
              "before each step, and step each optimizer once per backward",
              record.optimizer->name(), scaler.get_scale());
}

// Multiplies the gradients of `optimizers` by `factor`, a gradient shared by
// several of them once.
void rescale_gradients(const std::vector<optim::Optimizer*>& optimizers, double factor) {
  if (factor == 1) return;
  NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;
  for (optim::Optimizer* optimizer : optimizers)
    for (size_t g = 0; g < optimizer->num_param_groups(); ++g)
      for (const Tensor& parameter : optimizer->params(g)) {
        Tensor grad = parameter.grad();
        if (grad.defined() && done.insert(grad.impl()).second) mul_(grad, Scalar(factor));
      }
}

detail::PreparedModel& prepared_model(detail::AcceleratorState& state, const nn::Module* model) {
  auto prepared = std::find_if(state.models.begin(), state.models.end(),
                               [model](const detail::PreparedModel& p) { return p.module.get() == model; });
  EMBER_CHECK(prepared != state.models.end(), "Accelerator: the {} was not prepared",
              model ? model->type_name() : "null model");
  return *prepared;
}

// Under ZeRO the optimizer updates its model's shards: the engine of the
// prepared model that holds its parameters takes it over.
distributed::ShardedDataParallel* attach_to_sharded_model(detail::AcceleratorState& state, optim::Optimizer& optimizer) {
  if (state.options.sharding.strategy == distributed::ShardingStrategy::ddp || !state.group) return nullptr;
  EMBER_CHECK(optimizer.num_param_groups() > 0 && !optimizer.params(0).empty(),
              "Accelerator::prepare: the {} optimizer has no parameters", optimizer.name());
  const TensorImpl* first = optimizer.params(0).front().impl();
  for (detail::PreparedModel& model : state.models)
    for (const Tensor& parameter : model.module->parameters())
      if (parameter.impl() == first) {
        model.zero->attach_optimizer(optimizer, /*install_hooks=*/false);
        return model.zero.get();
      }
  EMBER_CHECK(false,
              "Accelerator::prepare: with strategy {} the {} optimizer's parameters must belong to a model prepared "
              "before it (prepare(model, optimizer), in that order)",
              distributed::to_string(state.options.sharding.strategy), optimizer.name());
  return nullptr;
}

// The same batches on every process (a hash of this epoch's, compared with
// process 0's): sharded batches of different orders would repeat some
// samples and skip others, silently.
void check_same_batches(distributed::ProcessGroup& group, const data::BatchSampler& batches) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the indices, batch ends marked
  for (const std::vector<int64_t>& batch : batches.batches()) {
    for (int64_t index : batch) hash = (hash ^ uint64_t(index)) * 1099511628211ull;
    hash = (hash ^ ~0ull) * 1099511628211ull;
  }
  Tensor mine = scalar_tensor(int64_t(hash), {.dtype = DType::i64}).reshape({1});
  Tensor all = empty({group.size()}, {.dtype = DType::i64});
  group.allgather(all, mine)->wait();
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  for (int process = 1; process < group.size(); ++process)
    EMBER_CHECK(hashes[size_t(process)] == hashes[0],
                "Accelerator::prepare: this DataLoader's sampler gives process {} other batches than process 0 (its "
                "randomness is not the same on every process); seed it alike on every process, or give it seed() "
                "and set_seed() so that prepare makes the processes agree",
                process);
}

// What each process will hold, once per optimizer, on the main process
// (accelerator_plan.h); before attaching, while the optimizer holds whole parameters.
void print_memory_plan(const detail::AcceleratorState& state, const optim::Optimizer& optimizer) {
  // The largest unit among those holding this optimizer's parameters (a GAN's
  // two optimizers each see their own model's), at most all of them.
  std::unordered_set<const TensorImpl*> held;
  int64_t num_params = 0;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const Tensor& parameter : optimizer.params(g)) {
      held.insert(parameter.impl());
      num_params += parameter.numel();
    }
  int64_t largest_unit = 0;
  int processes_per_node = 0;
  for (const detail::PreparedModel& model : state.models) {
    if (!model.zero) continue;
    processes_per_node = model.zero->shard_group().size();
    for (const auto& flat : model.zero->flat_parameters()) {
      const bool holds = std::any_of(flat->parameters().begin(), flat->parameters().end(),
                                     [&](const Tensor& parameter) { return held.count(parameter.impl()) > 0; });
      if (holds) largest_unit = std::max(largest_unit, std::min(flat->total_numel(), num_params));
    }
  }
  const std::optional<DType> autocast_dtype =
      state.low_precision == DType::f32 ? std::nullopt : std::optional<DType>(state.low_precision);
  for (const std::string& line : detail::memory_plan(optimizer, largest_unit, state.options.sharding.strategy,
                                                     state.num_processes, processes_per_node, autocast_dtype))
    std::fprintf(stderr, "%s\n", line.c_str());
}

// free_memory's work. ZeRO-3 releases its parameters between uses: destroying
// its engine left the model without its trained weights (forward, state_dict
// and save all refused). With `gather_sharded_parameters` every unit is
// gathered whole first and stays so: a collective, as Accelerate's scripts call
// free_memory on every process. The destructor does not gather: a process
// unwinding an error would wait there for the others.
void release_prepared(AcceleratorState& state, bool gather_sharded_parameters) {
  for (detail::PreparedModel& prepared : state.models) {
    prepared.ddp.reset();  // removes its hooks; .grad become standalone tensors
    if (gather_sharded_parameters && prepared.zero)
      for (const auto& flat : prepared.zero->flat_parameters()) flat->gather();
    prepared.zero.reset();
    if (prepared.autocast_wrapper) prepared.module->remove_hook(prepared.autocast_wrapper);
    for (const auto& [parameter, id] : prepared.gradient_hooks) parameter.remove_post_accumulate_grad_hook(id);
  }
  for (const auto& prepared : state.optimizers) {
    if (prepared->alive.expired()) continue;
    prepared->optimizer->remove_hook(prepared->step_hook);
    prepared->optimizer->remove_hook(prepared->zero_grad_hook);
    if (prepared->step_post_hook) prepared->optimizer->remove_hook(prepared->step_post_hook);
    // Its parameters are shards of a model that is whole no more: a step
    // would update memory the model does not read.
    if (prepared->zero)
      prepared->optimizer->register_step_pre_hook([](optim::Optimizer& optimizer) -> bool {
        EMBER_CHECK(false,
                    "{}: its parameters were the ZeRO shards of a model that Accelerator::free_memory released; "
                    "build a new optimizer from the model's parameters",
                    optimizer.name());
        return false;
      });
  }
  for (const auto& prepared : state.schedulers)
    if (!prepared->alive.expired()) prepared->scheduler->remove_hook(prepared->hook);
  for (const auto& prepared : state.loaders)  // a sharded loader stays sharded, as Accelerate's stays prepared
    if (!prepared->alive.expired()) {
      prepared->loader->remove_hook(prepared->hook);
      prepared->loader->remove_hook(prepared->end_hook);
    }
  state.models.clear();
  state.optimizers.clear();
  state.schedulers.clear();
  state.loaders.clear();
  state.gradient = {};
  empty_cache(state.device);
}

}  // namespace

// --- Construction -------------------------------------------------------------

Accelerator::Accelerator(AcceleratorOptions options) : state_(std::make_shared<AcceleratorState>()) {
  AcceleratorState& state = *state_;
  state.options = resolve_accelerator_options(options);
  // The whole run's profile; EMBER_PROFILE's, started by the first op, keeps its directory.
  if (!state.options.profile_dir.empty())
    profiler::start_process_profile(
        {.path_prefix = (std::filesystem::path(state.options.profile_dir) / "rank").string(), .record = {}});
  const distributed::DistributedEnv env = distributed::read_distributed_env();
  state.device = choose_device(state.options, env.local_rank);
  // Before the group exists: the ops of this thread, and the NCCL
  // communicator of the first collective on CUDA tensors, use this GPU.
  if (state.device.is_cuda()) cuda::set_device(state.device.index);
  if (env.world_size > 1 && !distributed::is_initialized()) {
    distributed::init_process_group();
    state.owns_group = true;
  }
  if (distributed::is_initialized() && distributed::default_group().size() > 1) {
    state.group = &distributed::default_group();
    state.process_index = state.group->rank();
    state.num_processes = state.group->size();
  }
  state.local_process_index = state.group ? env.local_rank : 0;
  // One line on the main process: who started the job (Note [Job engines]).
  if (state.group && state.process_index == 0)
    std::fprintf(stderr, "ember Accelerator: %s\n", distributed::describe(env).c_str());
  if (state.process_index == 0)
    for (const std::string& warning : state.options.warnings)
      std::fprintf(stderr, "ember Accelerator: warning: %s\n", warning.c_str());
  if (state.options.mixed_precision == "bf16") state.low_precision = DType::bf16;
  if (state.options.mixed_precision == "fp16") {
    state.low_precision = DType::f16;
    state.scaler = std::make_unique<distributed::GradScaler>(state.options.scaler, state.group);
  }
  if (state.options.seed) set_seed(*state.options.seed);
}

Accelerator::~Accelerator() {
  try {
    release_prepared(*state_, /*gather_sharded_parameters=*/false);
    // The trace and table of the run, before the group goes (Note [One clock for every rank]).
    if (!state_->options.profile_dir.empty()) profiler::finish_process_profile();
    if (state_->owns_group) distributed::destroy_process_group();
  } catch (...) {
    // A destructor must not throw; a failed job has reported its error already.
  }
}

// --- Properties ---------------------------------------------------------------

Device Accelerator::device() const { return state_->device; }
int Accelerator::process_index() const { return state_->process_index; }
int Accelerator::local_process_index() const { return state_->local_process_index; }
int Accelerator::num_processes() const { return state_->num_processes; }
bool Accelerator::sync_gradients() const { return state_->gradient.sync_gradients; }
const std::string& Accelerator::mixed_precision() const { return state_->options.mixed_precision; }
int64_t Accelerator::gradient_accumulation_steps() const { return state_->options.gradient_accumulation_steps; }
const ResolvedAcceleratorOptions& Accelerator::options() const { return state_->options; }
distributed::ProcessGroup* Accelerator::process_group() const { return state_->group; }
distributed::GradScaler* Accelerator::scaler() const { return state_->scaler.get(); }

DistributedType Accelerator::distributed_type() const {
  if (state_->num_processes == 1) return DistributedType::no;
  return state_->device.type == DeviceType::cuda ? DistributedType::multi_gpu : DistributedType::multi_cpu;
}

// --- prepare ------------------------------------------------------------------

void Accelerator::prepare_model(const std::shared_ptr<nn::Module>& model) {
  EMBER_CHECK(model != nullptr, "Accelerator::prepare: the model is null");
  AcceleratorState& state = *state_;
  for (const detail::PreparedModel& prepared : state.models)
    EMBER_CHECK(prepared.module != model, "Accelerator::prepare: this {} was prepared already", model->type_name());
  detail::PreparedModel prepared;
  prepared.module = model;
  model->to(state.device);
  if (state.options.sharding.activation_checkpointing) {
    // The units of the wrap policy recompute their activations in backward
    // (Accelerate's fsdp_activation_checkpointing), whatever the strategy.
    const std::vector<distributed::WrappedUnit> units = distributed::choose_units(*model, state.options.sharding);
    EMBER_CHECK(!units.empty(),
                "Accelerator::prepare: activation checkpointing is on, but the wrap policy chose no module of the {} "
                "to checkpoint; name its block type in wrap_module_types (fsdp_transformer_layer_cls_to_wrap) or "
                "lower min_num_params",
                model->type_name());
    for (const distributed::WrappedUnit& unit : units) nn::set_activation_checkpointing(*unit.module, true);
  }
  if (state.group && state.options.sharding.strategy == distributed::ShardingStrategy::ddp)
    prepared.ddp = std::make_unique<distributed::DistributedDataParallel>(model, *state.group, state.options.ddp);
  else if (state.group)
    prepared.zero = std::make_unique<distributed::ShardedDataParallel>(model, *state.group, state.options.sharding);
  if (state.low_precision != DType::f32) {
    // Note [How prepare changes the user's objects]: the forward runs under
    // autocast; low-precision outputs come back in f32 (Accelerate's
    // convert_outputs_to_fp32), so the loss and anything after it run in f32.
    const DeviceType device = state.device.type;
    const DType dtype = state.low_precision;
    auto called = std::make_shared<bool>(false);
    prepared.autocast_wrapper = model->register_forward_wrapper(
        [device, dtype, called](nn::ForwardCall& call, const std::function<void()>& proceed) {
          *called = true;
          {
            AutocastGuard autocast(device, dtype);
            proceed();
          }
          for (Tensor* output : call.outputs)
            if (is_low_precision(output->dtype())) *output = output->to(DType::f32);
        },
        nn::WrapperScope::forward);
    if (!prepared.ddp && !prepared.zero) watch_for_unhooked_forwards(prepared, called);
  }
  // What each step will communicate, once, on the main process (accelerator_plan.h).
  if (state.group && state.process_index == 0)
    for (const std::string& line : detail::communication_plan(prepared, state.num_processes))
      std::fprintf(stderr, "%s\n", line.c_str());
  state.models.push_back(std::move(prepared));
}

namespace {

// A model's call counts until an optimizer that updates it steps: a GAN
// steps D between G's forward and the backward into G, which must still
// find G called (a step of any optimizer reset every model before).
void forget_calls_of_models_updated_by(detail::AcceleratorState& state, const optim::Optimizer& optimizer) {
  std::unordered_set<const TensorImpl*> updated;
  for (detail::PreparedModel& model : state.models) {
    if (!model.called_since_step) continue;
    if (updated.empty())
      for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
        for (const Tensor& parameter : optimizer.params(g)) updated.insert(parameter.impl());
    for (const auto& entry : model.gradient_hooks)
      if (updated.contains(entry.first.impl())) {
        *model.called_since_step = false;
        break;
      }
  }
}

}  // namespace

// Note [Forwards that skip the hooks]: model.forward(...) called directly
// runs without autocast. DDP's reducer refuses such a backward; without DDP
// the Accelerator does: each parameter's gradient checks that the model was
// called through its hooks since the last optimizer step.
void Accelerator::watch_for_unhooked_forwards(detail::PreparedModel& prepared, const std::shared_ptr<bool>& called) {
  prepared.called_since_step = called;
  const std::string model_name = fmt::format("model {} ({})", state_->models.size(), prepared.module->type_name());
  std::string precision = state_->options.mixed_precision;
  for (const auto& entry : prepared.module->named_parameters()) {
    const Tensor& parameter = entry.second;
    if (!parameter.requires_grad()) continue;
    uint64_t id = parameter.register_post_accumulate_grad_hook([called, name = entry.first, model_name,
                                                                precision](const Tensor&) {
      EMBER_CHECK(*called,
                  "Accelerator: parameter \"{}\" of prepared {} got a gradient from a forward that ran without "
                  "the model's hooks, so without the {} autocast it was prepared with. Call the model as model(...) "
                  "instead of model.forward(...); a module whose forward takes other arguments gets a call operator "
                  "from nn::Module::call (nn/README.md, Note [Module calls])",
                  name, model_name, precision);
    });
    prepared.gradient_hooks.emplace_back(parameter, id);
  }
}

void Accelerator::prepare_optimizer(optim::Optimizer& optimizer) {
  AcceleratorState& state = *state_;
  for (const auto& prepared : state.optimizers)
    EMBER_CHECK(prepared->optimizer != &optimizer, "Accelerator::prepare: this {} optimizer was prepared already",
                optimizer.name());
  auto prepared = std::make_unique<detail::PreparedOptimizer>();
  prepared->optimizer = &optimizer;
  if (state.group && state.process_index == 0) print_memory_plan(state, optimizer);
  prepared->zero = attach_to_sharded_model(state, optimizer);
  HookToken token;
  prepared->alive = token.alive;
  std::weak_ptr<AcceleratorState> weak = state_;
  detail::PreparedOptimizer* record = prepared.get();
  // Note [Gradient accumulation]: no step on accumulation steps; with fp16,
  // unscale (unless the user did, to clip) and skip a step whose gradients
  // hold inf/NaN, as every process agrees through the scaler.
  prepared->step_hook = optimizer.register_step_pre_hook([weak, record, keepalive = token.token](optim::Optimizer& o) {
    std::shared_ptr<AcceleratorState> state = weak.lock();
    if (!state) return true;
    distributed::GradScaler* scaler = active_scaler(*state);
    if (scaler && state->gradient.sync_gradients) check_gradients_are_scaled(*record, *scaler);
    forget_calls_of_models_updated_by(*state, o);
    if (!state->gradient.sync_gradients) return false;
    record->step_was_skipped = false;
    // Note [One scaler update per iteration]: this optimizer's next iteration
    // begins while another still holds gradients; the update of the last one is due.
    if (scaler && record->stepped_since_scaler_update) detail::update_scaler_if_pending(*state);
    if (record->zero) record->zero->before_step();
    if (scaler && !scaler->is_unscaled(o)) scaler->unscale_(o);
    if (const std::optional<double>& max_norm = state->options.sharding.max_grad_norm) {
      if (record->zero) {
        record->zero->clip_optimizer_grad_norm_(*max_norm);
      } else {
        std::vector<Tensor> parameters;
        for (size_t g = 0; g < o.num_param_groups(); ++g)
          parameters.insert(parameters.end(), o.params(g).begin(), o.params(g).end());
        optim::clip_grad_norm_(parameters, *max_norm);
      }
    }
    if (!scaler) return true;
    record->step_was_skipped = scaler->found_inf(o);
    record->stepped_since_scaler_update = true;
    record->holds_scaled_gradients = false;
    // Note [One scaler update per iteration]: once every optimizer holding
    // gradients of this scale has stepped.
    if (!scaled_gradients_await_a_step(*state)) detail::update_scaler_if_pending(*state);
    return !record->step_was_skipped;
  });
  if (prepared->zero)
    prepared->step_post_hook = optimizer.register_step_post_hook([weak, record, keepalive = token.token](optim::Optimizer&) {
      if (weak.lock() && record->zero) record->zero->after_step();
    });
  prepared->zero_grad_hook = optimizer.register_zero_grad_pre_hook(
      [weak, record, keepalive = token.token](optim::Optimizer&, bool set_to_none) {
        std::shared_ptr<AcceleratorState> state = weak.lock();
        if (!state) return true;
        if (!state->gradient.sync_gradients) return false;
        if (record->zero) record->zero->zero_grad(set_to_none);
        record->holds_scaled_gradients = false;
        return true;
      });
  state.optimizers.push_back(std::move(prepared));
}

void Accelerator::prepare_scheduler(optim::LRScheduler& scheduler) {
  AcceleratorState& state = *state_;
  for (const auto& prepared : state.schedulers)
    EMBER_CHECK(prepared->scheduler != &scheduler, "Accelerator::prepare: this {} was prepared already",
                scheduler.name());
  auto prepared = std::make_unique<detail::PreparedScheduler>();
  prepared->scheduler = &scheduler;
  HookToken token;
  prepared->alive = token.alive;
  std::weak_ptr<AcceleratorState> weak = state_;
  // Accelerate's AcceleratedScheduler: a step on an accumulation step, or
  // after its optimizer's fp16 step was skipped, does nothing; any other
  // call steps once (not num_processes times, so that a schedule's length
  // counts optimizer steps). A rule of "only after an optimizer step" also
  // dropped a second call per iteration and an epoch-start call, silently.
  prepared->hook = scheduler.register_step_pre_hook([weak, keepalive = token.token](optim::LRScheduler& s) {
    std::shared_ptr<AcceleratorState> state = weak.lock();
    if (!state) return true;
    if (!state->gradient.sync_gradients) return false;
    for (const auto& optimizer : state->optimizers)
      if (optimizer->optimizer == &s.optimizer() && optimizer->step_was_skipped) return false;
    return true;
  });
  state.schedulers.push_back(std::move(prepared));
}

void Accelerator::prepare_data_loader(data::DataLoader& loader) {
  AcceleratorState& state = *state_;
  for (const auto& prepared : state.loaders)
    EMBER_CHECK(prepared->loader != &loader, "Accelerator::prepare: this DataLoader was prepared already");
  auto prepared = std::make_unique<detail::PreparedLoader>();
  prepared->loader = &loader;
  prepared->original = loader.batch_sampler();
  if (state.group) {
    const std::shared_ptr<data::Sampler>& sampler = prepared->original->sampler();
    EMBER_CHECK(!std::dynamic_pointer_cast<data::DistributedSampler>(sampler),
                "Accelerator::prepare: this DataLoader already uses a DistributedSampler; prepare() shards loaders "
                "itself (build the loader with shuffle or a plain sampler instead)");
    // Every process must shuffle alike for the shards to partition each
    // epoch: a sampler with a seed takes process 0's (RandomSampler's,
    // SubsetRandomSampler's), and the batches are compared, for a sampler or
    // batch sampler of one's own whose randomness ember cannot see.
    if (sampler && sampler->seed()) {
      Tensor seed = scalar_tensor(int64_t(*sampler->seed()), {.dtype = DType::i64});
      state.group->broadcast(seed, 0)->wait();
      sampler->set_seed(uint64_t(seed.item<int64_t>()));
    }
    check_same_batches(*state.group, *prepared->original);
    prepared->sharded = std::make_shared<data::ShardedBatchSampler>(
        prepared->original, state.num_processes, state.process_index,
        data::ShardingOptions{.split_batches = state.options.split_batches,
                              .even_batches = state.options.even_batches});
    loader.set_batch_sampler(prepared->sharded);
  }
  HookToken token;
  prepared->alive = token.alive;
  std::weak_ptr<AcceleratorState> weak = state_;
  detail::PreparedLoader* record = prepared.get();
  prepared->hook =
      loader.register_batch_hook([weak, record, keepalive = token.token](data::Example& batch, const data::BatchInfo& info) {
        std::shared_ptr<AcceleratorState> state = weak.lock();
        if (!state) return;
        if (state->device != kCPU) {
          for (Tensor* field : {&batch.input, &batch.target})
            if (field->defined()) *field = field->to(state->device);
          for (Tensor& field : batch.extra) field = field.to(state->device);
        }
        // The loader knows its epoch's batches, so the last one is known
        // without reading a batch ahead (Note [Gradient accumulation]).
        record->at_last_batch = info.is_last();
        std::vector<detail::PreparedLoader*>& active = state->gradient.active_loaders;
        if (active.empty() || active.back() != record) {
          std::erase(active, record);
          active.push_back(record);
        }
      });
  prepared->end_hook = loader.register_iteration_end_hook([weak, record, keepalive = token.token] {
    std::shared_ptr<AcceleratorState> state = weak.lock();
    if (!state) return;
    record->at_last_batch = false;
    std::erase(state->gradient.active_loaders, record);
  });
  state.loaders.push_back(std::move(prepared));
}

// --- The training step --------------------------------------------------------

void detail::update_scaler_if_pending(AcceleratorState& state) {
  const bool pending = std::any_of(state.optimizers.begin(), state.optimizers.end(),
                                   [](const auto& prepared) { return prepared->stepped_since_scaler_update; });
  if (!pending) return;
  // Gradients of the old scale that no unscale_ has reached yet are brought to
  // the new one, so their step divides by the scale they hold. A ZeRO
  // optimizer's gradients are in its engine until its step.
  std::vector<optim::Optimizer*> waiting;
  std::vector<distributed::ShardedDataParallel*> waiting_engines;
  for (const auto& prepared : state.optimizers) {
    if (prepared->alive.expired() || !prepared->holds_scaled_gradients ||
        (!prepared->stepped_since_scaler_update && state.scaler->is_unscaled(*prepared->optimizer)))
      continue;
    if (prepared->zero) {
      waiting_engines.push_back(prepared->zero);
    } else {
      waiting.push_back(prepared->optimizer);
    }
  }
  // Cleared before update(), which throws at the floor: a loop that catches
  // that error and skips the batch must find no update pending afterwards.
  for (const auto& prepared : state.optimizers) prepared->stepped_since_scaler_update = false;
  const double scale = state.scaler->get_scale();
  state.scaler->update();
  const double factor = state.scaler->get_scale() / scale;
  rescale_gradients(waiting, factor);
  if (factor != 1)
    for (distributed::ShardedDataParallel* engine : waiting_engines) engine->scale_gradients_(factor);
}

void Accelerator::backward(const Tensor& loss, std::optional<bool> retain_graph, bool create_graph) {
  EMBER_CHECK(loss.defined(), "Accelerator::backward: the loss is undefined");
  const int64_t steps = state_->options.gradient_accumulation_steps;
  Tensor scaled = steps > 1 ? loss / double(steps) : loss;
  distributed::GradScaler* scaler = active_scaler(*state_);
  if (scaler) {
    // Note [One scaler update per iteration]: an iteration that stepped only
    // some optimizers is updated here, unless one yet to step holds gradients of this scale.
    if (!scaled_gradients_await_a_step(*state_)) detail::update_scaler_if_pending(*state_);
    scaled = scaler->scale(scaled);
  }
  scaled.backward({}, retain_graph, create_graph);
  if (scaler)
    for (const auto& prepared : state_->optimizers) prepared->holds_scaled_gradients = true;
}

struct Accelerator::SyncGuard::Suspended {
  virtual ~Suspended() = default;
};

namespace {
// The no_sync guard of a DDP or ZeRO engine, held for the SyncGuard's life.
template <class Engine>
struct SuspendedEngine : Accelerator::SyncGuard::Suspended {
  explicit SuspendedEngine(Engine& engine) : guard(engine.no_sync()) {}
  typename Engine::NoSyncGuard guard;
};
}  // namespace

Accelerator::SyncGuard::SyncGuard(std::vector<std::unique_ptr<Suspended>> suspended)
    : suspended_(std::move(suspended)) {}
Accelerator::SyncGuard::SyncGuard(SyncGuard&&) noexcept = default;
Accelerator::SyncGuard::~SyncGuard() = default;

Accelerator::SyncGuard Accelerator::suspend_sync(const std::vector<nn::Module*>& models) {
  std::vector<std::unique_ptr<SyncGuard::Suspended>> suspended;
  for (nn::Module* model : models) {
    detail::PreparedModel& prepared = prepared_model(*state_, model);
    if (prepared.ddp) suspended.push_back(std::make_unique<SuspendedEngine<distributed::DistributedDataParallel>>(*prepared.ddp));
    if (prepared.zero) suspended.push_back(std::make_unique<SuspendedEngine<distributed::ShardedDataParallel>>(*prepared.zero));
  }
  return SyncGuard(std::move(suspended));
}

Accelerator::SyncGuard Accelerator::accumulate_models(std::vector<nn::Module*> models) {
  for (nn::Module* model : models) prepared_model(*state_, model);
  // Note [Gradient accumulation]: sync on every k-th batch, and on the data's
  // last batch so an epoch never ends with gradients left unapplied.
  detail::GradientState& gradient = state_->gradient;
  if (gradient.end_of_dataloader()) {
    gradient.step = 0;
    gradient.sync_gradients = true;
  } else {
    ++gradient.step;
    gradient.sync_gradients = gradient.step % state_->options.gradient_accumulation_steps == 0;
  }
  if (!gradient.sync_gradients) return suspend_sync(models);
  gradient.step = 0;
  return SyncGuard({});
}

AutocastGuard Accelerator::autocast() const {
  const DeviceType device = state_->device.type;
  // Without mixed precision, Accelerate's nullcontext: a guard that keeps the
  // policy it finds, so an autocast of the user's own around it stays on.
  if (state_->low_precision == DType::f32)
    return AutocastGuard(device, autocast_dtype(device), is_autocast_enabled(device));
  return AutocastGuard(device, state_->low_precision);
}

bool Accelerator::optimizer_step_was_skipped() const {
  return std::any_of(state_->optimizers.begin(), state_->optimizers.end(),
                     [](const auto& prepared) { return prepared->step_was_skipped; });
}

// Accelerate unscales every optimizer here. ember unscales only the ones
// that step the clipped parameters: an optimizer unscaled now is not
// unscaled again at its step, so one whose gradients were not all there yet
// (a GAN's generator, clipped around by the discriminator's step, or a ZeRO
// engine that had not published its shards) stepped on gradients still
// multiplied by the loss scale.
void Accelerator::unscale_gradients_of(const std::vector<Tensor>& parameters,
                                       const distributed::ShardedDataParallel* zero) {
  distributed::GradScaler* scaler = active_scaler(*state_);
  if (!scaler) return;
  std::unordered_set<const TensorImpl*> clipped;
  for (const Tensor& parameter : parameters) clipped.insert(parameter.impl());
  for (const auto& prepared : state_->optimizers) {
    if (prepared->alive.expired() || scaler->is_unscaled(*prepared->optimizer)) continue;
    bool steps_them = zero != nullptr && prepared->zero == zero;
    for (size_t g = 0; zero == nullptr && !steps_them && g < prepared->optimizer->num_param_groups(); ++g)
      for (const Tensor& parameter : prepared->optimizer->params(g)) steps_them = steps_them || clipped.count(parameter.impl());
    if (steps_them) scaler->unscale_(*prepared->optimizer);
  }
}

void Accelerator::check_clip_allowed(const char* op) const {
  EMBER_CHECK(state_->gradient.sync_gradients,
              "Accelerator::{}: called on an accumulation step (batch {} of {}), where gradients are partial sums; "
              "clip when sync_gradients() is true",
              op, state_->gradient.step, state_->options.gradient_accumulation_steps);
}

Tensor Accelerator::clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  check_clip_allowed("clip_grad_norm_");
  distributed::ShardedDataParallel* zero = sharded_engine_of(parameters, "clip_grad_norm_");
  if (zero) zero->before_step();
  unscale_gradients_of(parameters, zero);
  if (zero) return zero->clip_grad_norm_(max_norm, norm_type);
  return optim::clip_grad_norm_(parameters, max_norm, norm_type);
}

void Accelerator::clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  check_clip_allowed("clip_grad_value_");
  distributed::ShardedDataParallel* zero = sharded_engine_of(parameters, "clip_grad_value_");
  if (zero) zero->before_step();
  unscale_gradients_of(parameters, zero);
  if (zero) return zero->clip_grad_value_(clip_value);
  optim::clip_grad_value_(parameters, clip_value);
}

// Under ZeRO the gradients live in the shards, so clipping a prepared
// model's parameters is its engine's job, over all of them: a subset cannot
// be clipped by a global norm that the shards do not separate.
distributed::ShardedDataParallel* Accelerator::sharded_engine_of(const std::vector<Tensor>& parameters,
                                                                 const char* op) const {
  if (parameters.empty()) return nullptr;
  for (detail::PreparedModel& model : state_->models) {
    if (!model.zero) continue;
    std::unordered_set<const TensorImpl*> mine;
    for (const Tensor& parameter : model.module->parameters())
      if (parameter.requires_grad()) mine.insert(parameter.impl());
    // Frozen parameters have no gradient to clip (PyTorch skips them): only
    // the trainable ones given must be the model's.
    size_t found = 0;
    size_t trainable = 0;
    std::unordered_set<const TensorImpl*> given;
    for (const Tensor& parameter : parameters) {
      if (!parameter.requires_grad()) continue;
      found += mine.count(parameter.impl());
      ++trainable;
      given.insert(parameter.impl());
    }
    if (found == 0) continue;
    EMBER_CHECK(found == trainable && given.size() == mine.size(),
                "Accelerator::{}: under strategy {} gradients are sharded, so only all of the prepared {}'s "
                "trainable parameters can be clipped together (got {} of its {} parameters{})",
                op, distributed::to_string(state_->options.sharding.strategy), model.module->type_name(), found,
                mine.size(), found == trainable ? "" : " and others");
    return model.zero.get();
  }
  return nullptr;
}

// --- Seeds, models, memory ----------------------------------------------------

void Accelerator::set_seed(uint64_t seed, bool per_rank) {
  manual_seed(seed + (per_rank ? uint64_t(state_->process_index) : 0));
}

NamedTensors Accelerator::get_state_dict(const nn::Module& model) const {
  for (detail::PreparedModel& prepared : state_->models)
    if (prepared.module.get() == &model && prepared.zero) return prepared.zero->full_state_dict();
  return model.state_dict();
}

void Accelerator::free_memory() { release_prepared(*state_, /*gather_sharded_parameters=*/true); }

void Accelerator::register_for_checkpointing(Generator& generator) {
  for (const Generator* registered : state_->generators)
    EMBER_CHECK(registered != &generator, "Accelerator::register_for_checkpointing: this generator is registered already");
  state_->generators.push_back(&generator);
}

void Accelerator::register_checkpointable(detail::Checkpointable checkpointable) {
  state_->checkpointables.push_back(std::move(checkpointable));
}

}  // namespace ember
