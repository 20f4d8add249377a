// Accelerator: Hugging Face Accelerate's Accelerator in C++. A single-process
// training loop becomes a distributed, mixed-precision one by adding four
// lines, and runs unchanged as one process or under `ember launch`:
//
//   Accelerator accelerator({.mixed_precision = "bf16", .gradient_accumulation_steps = 2});  // +
//   auto model = std::make_shared<nn::Sequential>(nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 10));
//   optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
//   data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true});
//   accelerator.prepare(model, optimizer, loader);                                            // +
//   for (auto& [inputs, targets] : loader) {
//     auto step = accelerator.accumulate(model);                                              // +
//     Tensor loss = nn::functional::cross_entropy((*model)(inputs), targets);
//     accelerator.backward(loss);                                                             // +
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// prepare() keeps every object's type and place; it installs behaviour
// through the hooks each base class exposes (Note [How prepare changes the
// user's objects] in distributed/README.md):
//   - a model is moved to device(), wrapped in DistributedDataParallel when
//     there is more than one process, and its forward runs under autocast in
//     the mixed-precision dtype, its floating outputs returned in f32;
//   - an optimizer's step()/zero_grad() do nothing on accumulation steps, and
//     step() is skipped when the fp16 scaler finds inf/NaN gradients (and
//     throws when it finds them with the scale at its floor, min_scale);
//   - a data loader is sharded across processes and its batches moved to device();
//   - a scheduler steps only after optimizer steps that really happened, so
//     a schedule's length counts optimizer steps whatever the world size.
// Tests: tests/distributed/test_accelerator*.cpp (scenarios in
// tests/distributed/workers/accelerator_scenarios.cpp).
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/autocast.h"
#include "core/named_tensors.h"
#include "core/tensor.h"
#include "data/dataloader.h"
#include "distributed/accelerator/accelerator_options.h"
#include "distributed/accelerator/trackers.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"

namespace ember {

class Generator;

namespace distributed {
class ProcessGroup;
class GradScaler;
class ShardedDataParallel;
}  // namespace distributed

// Accelerate's DistributedType, for the kinds ember runs.
enum class DistributedType { no, multi_cpu, multi_gpu };
std::string_view to_string(DistributedType type);

namespace detail {
struct AcceleratorState;
struct PreparedModel;
// An object register_for_checkpointing carries: its state as JSON or as tensors.
struct Checkpointable {
  std::function<nlohmann::json()> save_json;
  std::function<void(const nlohmann::json&)> load_json;
  std::function<NamedTensors()> save_tensors;  // empty for JSON state
  std::function<void(const NamedTensors&)> load_tensors;
};
template <class T>
struct is_shared_ptr : std::false_type {};
template <class T>
struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

// What register_for_checkpointing accepts: an object whose state is JSON or tensors.
template <class T>
concept JsonStateful = requires(T& object, const nlohmann::json& state) {
  { object.state_dict() } -> std::same_as<nlohmann::json>;
  object.load_state_dict(state);
};
template <class T>
concept TensorStateful = requires(T& object, const NamedTensors& state) {
  { object.state_dict() } -> std::same_as<NamedTensors>;
  object.load_state_dict(state);
};

class Accelerator {
 public:
  // Reads the launcher's environment; with more than one process, joins the
  // job (init_process_group) unless the program already did.
  explicit Accelerator(AcceleratorOptions options = {});
  // Removes the hooks from prepared objects that still exist and, if it
  // initialised the process group, destroys it. Objects prepared by it may
  // be destroyed before or after it (the hooks know).
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // --- Where this process stands -------------------------------------------
  // cuda:<local process index> when this machine has GPUs (made the current
  // GPU at construction), unless options.cpu; else the CPU. Collectives on
  // tensors there go to NCCL (Note [Choosing a backend]).
  Device device() const;
  int process_index() const;
  int local_process_index() const;
  int num_processes() const;
  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index() == 0; }
  DistributedType distributed_type() const;
  // Whether this step's backward synchronises gradients and the optimizer
  // steps: false on the accumulation steps inside accumulate().
  bool sync_gradients() const;
  const std::string& mixed_precision() const;
  int64_t gradient_accumulation_steps() const;
  const ResolvedAcceleratorOptions& options() const;
  // The group collectives run on; null with one process.
  distributed::ProcessGroup* process_group() const;
  // The fp16 loss scaler; null unless mixed_precision is "fp16".
  distributed::GradScaler* scaler() const;

  // --- prepare ---------------------------------------------------------------
  // Any number of models (as std::shared_ptr), optimizers, data loaders and
  // schedulers, in any order. Each is prepared once; preparing one again is
  // an error. Every process must prepare the same objects in the same order.
  template <class... Objects>
  void prepare(Objects&... objects) {
    (prepare_one(objects), ...);
  }
  void prepare_model(const std::shared_ptr<nn::Module>& model);
  void watch_for_unhooked_forwards(detail::PreparedModel& prepared, const std::shared_ptr<bool>& called);
  void prepare_optimizer(optim::Optimizer& optimizer);
  void prepare_data_loader(data::DataLoader& loader);
  void prepare_scheduler(optim::LRScheduler& scheduler);

  // --- The training step -----------------------------------------------------
  // loss / gradient_accumulation_steps, scaled for fp16, then backward(), with
  // retain_graph and create_graph as Tensor::backward takes them (Accelerate
  // passes its keyword arguments through): a second backward through the
  // same graph, or gradients a penalty can differentiate.
  void backward(const Tensor& loss, std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

  // Returned by accumulate() and no_sync(): while it lives, the models'
  // forwards prepare no gradient all-reduce (DDP's no_sync).
  class SyncGuard {
   public:
    SyncGuard(SyncGuard&&) noexcept;
    ~SyncGuard();
    SyncGuard(const SyncGuard&) = delete;
    SyncGuard& operator=(const SyncGuard&) = delete;
    SyncGuard& operator=(SyncGuard&&) = delete;
    struct Suspended;  // one model's engine held in no_sync (accelerator.cpp)

   private:
    friend class Accelerator;
    explicit SyncGuard(std::vector<std::unique_ptr<Suspended>> suspended);
    std::vector<std::unique_ptr<Suspended>> suspended_;
  };
  // Counts one batch; gradients are synchronised (and the optimizer steps)
  // only on every gradient_accumulation_steps-th batch and on the data's last
  // batch. Create it before the forward: DDP decides at forward time.
  template <class... Models>
  [[nodiscard]] SyncGuard accumulate(const std::shared_ptr<Models>&... models) {
    return accumulate_models({models.get()...});
  }
  // Skips gradient synchronisation for the forwards run while the guard lives.
  template <class... Models>
  [[nodiscard]] SyncGuard no_sync(const std::shared_ptr<Models>&... models) {
    return suspend_sync({models.get()...});
  }
  // Autocast in the mixed-precision dtype on device() (with "no", a guard
  // that changes nothing, as Accelerate's nullcontext), for code outside a
  // prepared model's forward.
  [[nodiscard]] AutocastGuard autocast() const;
  // Whether the last optimizer step was skipped because the fp16 scaler found
  // inf/NaN gradients (accumulation steps do not count as skipped).
  bool optimizer_step_was_skipped() const;

  // Unscales fp16 gradients first. Call them when sync_gradients() is true:
  // on an accumulation step the gradients are partial sums (an error). With
  // synchronised gradients every process holds the same averaged gradient,
  // so its norm is the global one.
  Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0);
  void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

  // --- Collectives (identity with one process) --------------------------------
  // Every process's tensor concatenated along dim 0 (a 0-d tensor becomes one
  // row each), in process order. Shapes must agree (checked: an error names them).
  Tensor gather(const Tensor& tensor);
  // gather(), minus the samples even_batches recycled to complete the last
  // round of the prepared loader that handed out the current batch, so that
  // every sample of an evaluation set is counted exactly once.
  Tensor gather_for_metrics(const Tensor& tensor);
  // The element-wise "sum", "mean", "max" or "min" over processes (a new tensor).
  Tensor reduce(const Tensor& tensor, std::string_view reduction = "sum");
  // Pads `dim` with `pad_value` to the largest size any process has there.
  Tensor pad_across_processes(const Tensor& tensor, int64_t dim = 0, double pad_value = 0, bool pad_first = false);
  // `from_process`'s tensor on every process (a new tensor).
  Tensor broadcast(const Tensor& tensor, int from_process = 0);
  void wait_for_everyone();
  // Prints (with a newline) once per node: on the local main process.
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) {
    if (!is_local_main_process()) return;
    std::fputs((fmt::format(format, std::forward<Args>(args)...) + "\n").c_str(), stdout);
    std::fflush(stdout);
  }

  // While the guard lives, the main (or local main) process runs first and
  // the others wait, then they run while it waits (downloads, caches).
  class ProcessFirstGuard {
   public:
    ~ProcessFirstGuard() noexcept(false);
    ProcessFirstGuard(const ProcessFirstGuard&) = delete;
    ProcessFirstGuard& operator=(const ProcessFirstGuard&) = delete;

   private:
    friend class Accelerator;
    ProcessFirstGuard(Accelerator& accelerator, bool first);
    Accelerator& accelerator_;
    bool first_;
  };
  [[nodiscard]] ProcessFirstGuard main_process_first() { return ProcessFirstGuard(*this, is_main_process()); }
  [[nodiscard]] ProcessFirstGuard local_main_process_first() {
    return ProcessFirstGuard(*this, is_local_main_process());
  }
  // This process's contiguous share of `items` (the first `size % n`
  // processes get one more); with apply_padding every share has the largest
  // size, short ones repeating the input's last item, as Accelerate's (an
  // empty list stays empty).
  template <class T>
  std::vector<T> split_between_processes(const std::vector<T>& items, bool apply_padding = false) const {
    auto [begin, end] = share_of(int64_t(items.size()));
    std::vector<T> share(items.begin() + begin, items.begin() + end);
    const int64_t largest = (int64_t(items.size()) + num_processes() - 1) / num_processes();
    if (apply_padding && !items.empty())
      while (int64_t(share.size()) < largest) share.push_back(items.back());
    return share;
  }
  // Seeds the default generator with `seed` (plus the process index when per_rank).
  void set_seed(uint64_t seed, bool per_rank = false);

  // --- Models ----------------------------------------------------------------
  // The model itself: prepare() wraps nothing. Its forward() runs without any
  // prepared behaviour; calling it runs the hooks.
  nn::Module& unwrap_model(const std::shared_ptr<nn::Module>& model) { return *model; }
  // The full state dict under the unprepared names (detached, sharing storage).
  NamedTensors get_state_dict(const nn::Module& model) const;
  // Removes every hook the accelerator installed, destroys its DDP wrappers,
  // forgets the prepared objects and empties the allocator cache. A ZeRO-3
  // model is gathered whole first, so it keeps its weights: collective, call
  // it on every process.
  void free_memory();

  // --- Trackers (main process only) -----------------------------------------
  // Starts the trackers named by options().log_with under
  // project_dir/<project_name>; `config` goes into each tracker's config.json.
  // On the other processes these three do nothing.
  void init_trackers(const std::string& project_name, const nlohmann::json& config = nlohmann::json::object());
  void log(const distributed::TrackerValues& values, std::optional<int64_t> step = std::nullopt);
  void end_training();

  // --- Checkpoints (Note [Accelerator checkpoints]) --------------------------
  // Writes every prepared model, optimizer, scheduler, the scaler, each
  // process's RNG state and data loader positions, the accumulation counter
  // and (mid-accumulation) the partial gradients, and every registered
  // object, atomically. Without `directory`, automatic naming must be on: the
  // checkpoint goes to project_dir/checkpoints/checkpoint_N. Returns where it went.
  std::filesystem::path save_state(const std::optional<std::filesystem::path>& directory = std::nullopt);
  // Verifies the whole checkpoint first (manifest, sizes, checksums, world
  // size, the models' names and shapes, the number of each kind of object)
  // and changes nothing if anything is wrong. Without `directory`, the latest
  // automatically named checkpoint.
  void load_state(const std::optional<std::filesystem::path>& directory = std::nullopt);
  // Adds an object to what save_state/load_state carry: anything with
  // state_dict()/load_state_dict() over nlohmann::json or NamedTensors. It must
  // live as long as the accelerator saves or loads.
  // A Generator of one's own (a module's: nn::Dropout(p, &generator)) is
  // saved by every process beside the default generator's state, and
  // restored as that is; unregistered, a resumed run drew other numbers.
  void register_for_checkpointing(Generator& generator);
  template <class T>
  void register_for_checkpointing(T& object) {
    if constexpr (TensorStateful<T>) {  // nn::Module among them
      register_checkpointable({{}, {}, [&object] { return object.state_dict(); },
                               [&object](const NamedTensors& state) { object.load_state_dict(state); }});
    } else if constexpr (JsonStateful<T>) {
      register_checkpointable({[&object] { return object.state_dict(); },
                               [&object](const nlohmann::json& state) { object.load_state_dict(state); }, {}, {}});
    } else {
      static_assert(detail::always_false<T>,
                    "register_for_checkpointing: the object needs state_dict() and load_state_dict() over "
                    "nlohmann::json or NamedTensors");
    }
  }
  // The model's state dict as Hugging Face's model.safetensors, or shards of
  // at most max_shard_size ("10GB", "500MB", ...) plus their index, under
  // the unprepared names; written by the main process, after which every
  // process returns.
  void save_model(const nn::Module& model, const std::filesystem::path& directory,
                  std::string_view max_shard_size = "10GB");

 private:
  template <class T>
  void prepare_one(T& object) {
    if constexpr (detail::is_shared_ptr<T>::value) {
      static_assert(std::is_base_of_v<nn::Module, typename T::element_type>,
                    "Accelerator::prepare: a std::shared_ptr must hold an nn::Module");
      prepare_model(object);
    } else if constexpr (std::is_base_of_v<nn::Module, T>) {
      static_assert(detail::always_false<T>,
                    "Accelerator::prepare: pass a model as the std::shared_ptr that owns it, so that its "
                    "DistributedDataParallel hooks can never outlive it");
    } else if constexpr (std::is_base_of_v<optim::Optimizer, T>) {
      prepare_optimizer(object);
    } else if constexpr (std::is_same_v<data::DataLoader, T>) {
      prepare_data_loader(object);
    } else if constexpr (std::is_base_of_v<optim::LRScheduler, T>) {
      prepare_scheduler(object);
    } else {
      static_assert(detail::always_false<T>,
                    "Accelerator::prepare: takes models (std::shared_ptr<nn::Module>), optimizers, data loaders "
                    "and schedulers");
    }
  }
  SyncGuard accumulate_models(std::vector<nn::Module*> models);
  SyncGuard suspend_sync(const std::vector<nn::Module*>& models);
  // [begin, end) of this process's share of `count` items.
  std::pair<int64_t, int64_t> share_of(int64_t count) const;
  // Unscales, once per step (fp16), the gradients of the prepared optimizers
  // that step these parameters (or this ZeRO engine's optimizer).
  void unscale_gradients_of(const std::vector<Tensor>& parameters, const distributed::ShardedDataParallel* zero);
  void check_clip_allowed(const char* op) const;
  // The ZeRO engine of the prepared model whose parameters these are, or null.
  distributed::ShardedDataParallel* sharded_engine_of(const std::vector<Tensor>& parameters, const char* op) const;

  void register_checkpointable(detail::Checkpointable checkpointable);

  std::shared_ptr<detail::AcceleratorState> state_;
};

}  // namespace ember
