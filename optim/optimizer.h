// Optimizer: the base of every optimizer. It holds the parameter groups (each
// with its own options), the per-parameter state, zero_grad, and state_dict /
// load_state_dict in PyTorch's layout. The optimizers (sgd.h, adam.h, ...)
// add their options and update(); schedulers (scheduler.h) read and write each
// group's lr (and momentum) through this interface. Step and zero_grad
// pre-hooks let the Accelerator skip them (accumulation steps, fp16
// overflow) without changing the optimizer's type. Tests: tests/optim/.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/hook_list.h"
#include "core/named_tensors.h"
#include "core/tensor.h"

namespace ember::optim {

// An optimizer's state_dict, split the way a checkpoint stores it (see
// Note [Optimizer state dict] in optim/README.md): the state tensors, named
// "state.<index>.<buffer>" (safetensors), and the rest as JSON:
//   {"state": {"0": {"step": 3}, ...},
//    "param_groups": [{"lr": 0.001, "betas": [0.9, 0.999], ..., "params": [0, 1]}, ...]}
// <index> counts parameters across the groups in order, as PyTorch does.
struct OptimizerStateDict {
  NamedTensors tensors;
  nlohmann::json meta;
};

// What an optimizer keeps for one parameter: its step count (for the
// optimizers that count steps) and its buffers, in PyTorch's names and order.
struct ParamState {
  int64_t step = 0;
  NamedTensors buffers;

  // The buffer called `name`, or an undefined tensor.
  Tensor find(std::string_view name) const;
  // The buffer called `name`, which must exist.
  const Tensor& at(std::string_view name) const;
};

// A group given to a constructor: its parameters and its options.
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; the others are skipped
  // (and get no state), as in PyTorch. Unless a step pre-hook says to skip it.
  void step();
  // Drops every gradient (set_to_none) or fills it with zeros, detached.
  // Unless a zero_grad pre-hook says to skip it.
  void zero_grad(bool set_to_none = true);

  // A pre-hook runs before every step() (or zero_grad()); when one returns
  // false the call does nothing (the hooks after it still run). Hooks run in
  // registration order. remove_hook takes the id of either kind. A zero_grad
  // hook is told the call's set_to_none (ZeRO clears its flat gradients the same way).
  using StepPreHook = std::function<bool(Optimizer& optimizer)>;
  using ZeroGradPreHook = std::function<bool(Optimizer& optimizer, bool set_to_none)>;
  HookId register_step_pre_hook(StepPreHook hook);
  HookId register_zero_grad_pre_hook(ZeroGradPreHook hook);
  // A post-hook runs after every step() that updated the parameters.
  using StepPostHook = std::function<void(Optimizer& optimizer)>;
  HookId register_step_post_hook(StepPostHook hook);
  void remove_hook(HookId id);
  // How many step() calls updated the parameters (skipped ones do not count).
  int64_t steps_taken() const { return steps_taken_; }

  const std::string& name() const { return name_; }
  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;

  // The learning rate of a group: what schedulers read and write.
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // The momentum OneCycleLR cycles: SGD's and RMSprop's momentum, beta1 of
  // Adam, AdamW and Lion. Optimizers without one (Adagrad) say so.
  virtual bool has_momentum() const { return false; }
  virtual double momentum(size_t group) const;
  virtual void set_momentum(size_t group, double momentum);
  // PyTorch's group["initial_lr"]: set by the first scheduler attached to the
  // optimizer, read by the later ones, saved with the groups.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double initial_lr);

  // The state of parameter `index` of `group`; null until its first update.
  const ParamState* state(size_t group, size_t index) const;
  // The buffers each parameter of `group` holds once updated (PyTorch's
  // names): the required ones, and those an optimizer may also keep.
  virtual std::vector<std::string> state_buffer_names(size_t group) const { return required_buffers(group); }

  // Whether update() acts on each element alone (given its gradient and
  // state), with no norm or other reduction over a parameter: what lets ZeRO
  // update each process's piece of a parameter (Note [ZeRO stages]). Every
  // built-in optimizer does; an optimizer of one's own says so explicitly.
  virtual bool updates_elementwise() const { return false; }

  // ZeRO (distributed/zero/): every parameter is replaced, in its place in its
  // group, by what `substitute` returns for it: the piece of it this process
  // updates. Its state, which would not fit the piece, is dropped: the caller
  // gives it back sliced (ZeRO loads the whole-parameter state_dict it took before).
  void substitute_parameters(const std::function<Tensor(const Tensor&)>& substitute);

  // The state tensors are shared with the optimizer, as PyTorch's are: save
  // them before the next step, or clone them.
  OptimizerStateDict state_dict() const;
  // Copies the state into this optimizer (converted to each parameter's dtype
  // and device) after checking it all: nothing changes when it throws.
  void load_state_dict(const OptimizerStateDict& state);
  // Throws what load_state_dict(state) would throw and changes nothing either
  // way (the hyper-parameters are applied to check the buffers they require,
  // then put back): Accelerator::load_state checks every object first.
  void check_state_dict(const OptimizerStateDict& state);

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}

  // The update itself, which step() runs unless a pre-hook skips it.
  virtual void update() = 0;

  // Appends a group's parameters after checking them (floating, leaves, not
  // empty, in no other group).
  void add_group_params(std::vector<Tensor> params);
  // The state of parameter `index` of `group`, created empty when absent.
  ParamState& state_for(size_t group, size_t index);

  // A group's hyper-parameters as PyTorch's param_groups entry names them
  // (without "params"), and back; from_json throws on a missing key.
  virtual nlohmann::json group_to_json(size_t group) const = 0;
  virtual void group_from_json(size_t group, const nlohmann::json& json) = 0;
  // The buffers a parameter's state must hold under its group's options, and
  // whether this optimizer counts steps: what load_state_dict checks.
  virtual std::vector<std::string> required_buffers(size_t group) const = 0;
  // Every buffer a parameter's state may hold under any options (an SGD whose
  // momentum a scheduler set to 0 keeps its momentum_buffer): load_state_dict
  // refuses any other name.
  virtual std::vector<std::string> buffers_ever_kept(size_t group) const { return state_buffer_names(group); }
  virtual bool counts_steps() const = 0;

 private:
  void load_or_check(const OptimizerStateDict& state, bool apply);
  struct Group {
    std::vector<Tensor> params;
    std::vector<std::optional<ParamState>> state;
    std::optional<double> initial_lr;
  };
  std::string name_;
  std::vector<Group> groups_;
  HookList<StepPreHook> step_pre_hooks_;
  HookList<ZeroGradPreHook> zero_grad_pre_hooks_;
  HookList<StepPostHook> step_post_hooks_;
  int64_t steps_taken_ = 0;
};

// An optimizer whose groups hold options of type Options.
template <class Options>
class OptimizerWithOptions : public Optimizer {
 public:
  Options& options(size_t group) { return options_.at(group); }
  const Options& options(size_t group) const { return options_.at(group); }

  // A new group with these options, checked. Every field counts: a C++
  // struct cannot leave one out, so `{.lr = 0.01}` means momentum 0 even
  // when the constructor's was 0.9. PyTorch fills the keys a group leaves out
  // from the optimizer's defaults; here start from them:
  //   auto options = sgd.defaults(); options.lr = 0.01; sgd.add_param_group(params, options);
  void add_param_group(std::vector<Tensor> params, const Options& options) {
    EMBER_CHECK(options.lr >= 0, "{}: invalid learning rate {}", name(), options.lr);
    check_options(options);
    add_group_params(std::move(params));
    options_.push_back(options);
  }
  // A new group with the defaults' options: PyTorch's
  // add_param_group({"params": params}).
  void add_param_group(std::vector<Tensor> params) { add_param_group(std::move(params), defaults_); }
  // PyTorch's optimizer.defaults: the options the constructor was given
  // (the struct's own values when it was given groups).
  const Options& defaults() const { return defaults_; }

  double lr(size_t group) const override { return options(group).lr; }
  void set_lr(size_t group, double lr) override { options(group).lr = lr; }

 protected:
  using Optimizer::Optimizer;
  // The constructor's one group, whose options become defaults(); called by
  // each optimizer's constructor (not here: check_options is virtual).
  void add_default_group(std::vector<Tensor> params, const Options& options) {
    add_param_group(std::move(params), options);
    defaults_ = options;
  }
  // The constructor's groups; called by each optimizer's constructor.
  void add_param_groups(std::vector<ParamGroup<Options>> groups) {
    EMBER_CHECK(!groups.empty(), "{}: got no parameter groups", name());
    for (ParamGroup<Options>& group : groups) add_param_group(std::move(group.params), group.options);
  }
  // Throws ember::Error naming the optimizer and the bad value; every option
  // but the lr, which add_param_group checks: a schedule may take it below 0
  // (OneCycleLR's linear anneal past its end), and such a state must save and
  // load (step() refuses to use it).
  virtual void check_options(const Options& options) const = 0;
  // Sets one option of a group through check_options, so that a scheduler
  // cannot set what the constructor would refuse (OneCycleLR's momentum of 1
  // made Adam's parameters NaN).
  void set_checked(size_t group, auto change) {
    Options changed = options(group);
    change(changed);
    check_options(changed);
    options(group) = changed;
  }

 private:
  std::vector<Options> options_;
  Options defaults_;
};

}  // namespace ember::optim
