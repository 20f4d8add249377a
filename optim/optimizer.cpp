// The Optimizer base (optim/optimizer.h): groups, per-parameter state,
// zero_grad, and the state dict in PyTorch's layout (Note [Optimizer state
// dict], optim/README.md).
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "autograd/accumulate_grad.h"
#include "core/error.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/profiler/profiler.h"
#include "optim/json_fields.h"

namespace ember::optim {

Tensor ParamState::find(std::string_view name) const {
  for (const auto& [buffer_name, tensor] : buffers)
    if (buffer_name == name) return tensor;
  return Tensor();
}

const Tensor& ParamState::at(std::string_view name) const {
  for (const auto& [buffer_name, tensor] : buffers)
    if (buffer_name == name) return tensor;
  EMBER_ASSERT(false, "optimizer state has no buffer '{}'", name);
}

namespace {
// Runs every hook (none is skipped because an earlier one said no) and says
// whether all of them let the call go ahead.
template <class Hook, class... Args>
bool all_hooks_allow(const HookList<Hook>& hooks, Optimizer& optimizer, Args... args) {
  bool allowed = true;
  for (const Hook& hook : hooks.snapshot()) allowed = hook(optimizer, args...) && allowed;
  return allowed;
}
}  // namespace

void Optimizer::step() {
  // The profile's optimizer time (Note [Step summary]), hooks included: ZeRO's
  // post-step all-gather is part of the step it follows.
  const int64_t begin = profiler::recording(profiler::kRecordSteps) ? profiler::now_ns() : -1;
  // A scheduler may set a negative rate (a linear decay stepped past its
  // end): stepping with it would ascend the loss without a word. Checked
  // before the hooks, whose work (unscaling, clipping) a refusal would cut short.
  // A rate within rounding of 0 is a decay that ended at 0: LinearLR's
  // chainable factors give -1.9e-18 there, and PyTorch trains on with it.
  constexpr double kRoundingOfZero = 1e-12;
  for (size_t g = 0; g < num_param_groups(); ++g)
    EMBER_CHECK(lr(g) >= -kRoundingOfZero,
                "{}: step with the learning rate {} of param group {} (a scheduler stepped past the end "
                "of its schedule?); a negative rate would ascend the loss",
                name_, lr(g), g);
  if (!step_pre_hooks_.empty() && !all_hooks_allow(step_pre_hooks_, *this)) return;
  update();
  ++steps_taken_;
  for (const StepPostHook& hook : step_post_hooks_.snapshot()) hook(*this);
  if (begin >= 0)
    profiler::record_span(profiler::kRecordSteps, profiler::Category::optimizer, name_ + ".step", begin,
                          profiler::now_ns(), {{"step", steps_taken_}});
}

HookId Optimizer::register_step_pre_hook(StepPreHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_step_pre_hook: the hook is empty", name_);
  return step_pre_hooks_.add(std::move(hook));
}

HookId Optimizer::register_step_post_hook(StepPostHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_step_post_hook: the hook is empty", name_);
  return step_post_hooks_.add(std::move(hook));
}

HookId Optimizer::register_zero_grad_pre_hook(ZeroGradPreHook hook) {
  EMBER_CHECK(hook != nullptr, "{}.register_zero_grad_pre_hook: the hook is empty", name_);
  return zero_grad_pre_hooks_.add(std::move(hook));
}

void Optimizer::remove_hook(HookId id) {
  bool removed = step_pre_hooks_.remove(id) || zero_grad_pre_hooks_.remove(id) || step_post_hooks_.remove(id);
  EMBER_CHECK(removed, "{}.remove_hook: no hook with id {} (already removed?)", name_, id);
}

void Optimizer::zero_grad(bool set_to_none) {
  if (!zero_grad_pre_hooks_.empty() && !all_hooks_allow(zero_grad_pre_hooks_, *this, set_to_none)) return;
  for (Group& group : groups_)
    for (const Tensor& param : group.params) autograd::zero_grad(param, set_to_none);
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  EMBER_CHECK(group < groups_.size(), "{}: no param group {} (it has {})", name_, group, groups_.size());
  return groups_[group].params;
}

double Optimizer::momentum(size_t) const {
  EMBER_CHECK(false, "{}: this optimizer has no momentum", name_);
  return 0;
}

void Optimizer::set_momentum(size_t, double) { EMBER_CHECK(false, "{}: this optimizer has no momentum", name_); }

std::optional<double> Optimizer::initial_lr(size_t group) const {
  params(group);  // checks the index
  return groups_[group].initial_lr;
}

void Optimizer::set_initial_lr(size_t group, double initial_lr) {
  params(group);
  groups_[group].initial_lr = initial_lr;
}

const ParamState* Optimizer::state(size_t group, size_t index) const {
  EMBER_CHECK(index < params(group).size(), "{}: param group {} has no parameter {} (it has {})", name_, group, index,
              params(group).size());
  const std::optional<ParamState>& state = groups_[group].state[index];
  return state ? &*state : nullptr;
}

void Optimizer::add_group_params(std::vector<Tensor> params) {
  EMBER_CHECK(!params.empty(), "{}: a parameter group has no parameters", name_);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& param = params[i];
    EMBER_CHECK(param.defined(), "{}: parameter {} of the new group is undefined", name_, i);
    EMBER_CHECK(is_floating(param.dtype()), "{}: can only optimize floating-point tensors, parameter {} is {}", name_,
                i, param.dtype());
    EMBER_CHECK(param.is_leaf(), "{}: can't optimize a non-leaf tensor (parameter {} of the new group)", name_, i);
    // Refused here rather than at the first step: the update kernels write
    // parameters in place, element by element over contiguous memory.
    EMBER_CHECK(param.is_contiguous(),
                "{}: parameter {} of the new group (shape {}, strides {}) is not contiguous; make it contiguous "
                "before it becomes a parameter (x.contiguous().detach().requires_grad_())",
                name_, i, param.shape(), param.strides());
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!params[j].is_same(param), "{}: parameter {} appears twice in the new group", name_, i);
    for (size_t g = 0; g < groups_.size(); ++g)
      for (const Tensor& other : groups_[g].params)
        EMBER_CHECK(!other.is_same(param), "{}: parameter {} of the new group is already in param group {}", name_, i,
                    g);
  }
  Group group;
  group.state.resize(params.size());
  group.params = std::move(params);
  groups_.push_back(std::move(group));
}

void Optimizer::substitute_parameters(const std::function<Tensor(const Tensor&)>& substitute) {
  for (Group& group : groups_)
    for (std::optional<ParamState>& state : group.state) state.reset();
  for (Group& group : groups_)
    for (Tensor& param : group.params) {
      Tensor replacement = substitute(param);
      EMBER_ASSERT(replacement.defined() && replacement.is_leaf() && replacement.dtype() == param.dtype(),
                   "a substitute parameter must be a defined leaf of the parameter's dtype");
      param = replacement;
    }
}

ParamState& Optimizer::state_for(size_t group, size_t index) {
  std::optional<ParamState>& state = groups_.at(group).state.at(index);
  if (!state) state.emplace();
  return *state;
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict dict;
  dict.meta["state"] = nlohmann::json::object();
  dict.meta["param_groups"] = nlohmann::json::array();
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json group = group_to_json(g);
    if (groups_[g].initial_lr) group["initial_lr"] = *groups_[g].initial_lr;
    group["params"] = nlohmann::json::array();
    for (const std::optional<ParamState>& state : groups_[g].state) {
      group["params"].push_back(index);
      if (state) {
        const std::string key = std::to_string(index);
        nlohmann::json entry = nlohmann::json::object();
        if (counts_steps()) entry["step"] = state->step;
        dict.meta["state"][key] = entry;
        for (const auto& [buffer_name, tensor] : state->buffers)
          dict.tensors.emplace_back("state." + key + "." + buffer_name, tensor);
      }
      ++index;
    }
    dict.meta["param_groups"].push_back(std::move(group));
  }
  return dict;
}

namespace {

struct Position {
  size_t group, index;
};

int64_t parse_index(std::string_view text, std::string_view where) {
  int64_t value = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  EMBER_CHECK(error == std::errc() && end == text.data() + text.size() && value >= 0,
              "{}: '{}' is not a parameter index", where, text);
  return value;
}

}  // namespace

void Optimizer::load_state_dict(const OptimizerStateDict& dict) { load_or_check(dict, /*apply=*/true); }

void Optimizer::check_state_dict(const OptimizerStateDict& dict) { load_or_check(dict, /*apply=*/false); }

void Optimizer::load_or_check(const OptimizerStateDict& dict, bool apply) {
  const std::string where = name_ + ".load_state_dict";
  const nlohmann::json& saved_groups = detail::field(dict.meta, "param_groups", where);
  const nlohmann::json& saved_state = detail::field(dict.meta, "state", where);
  EMBER_CHECK(saved_groups.is_array(), "{}: 'param_groups' must be a list", where);
  EMBER_CHECK(saved_state.is_object(), "{}: 'state' must be an object keyed by parameter index", where);
  EMBER_CHECK(saved_groups.size() == groups_.size(), "{}: the state dict has {} param groups but the optimizer has {}",
              where, saved_groups.size(), groups_.size());

  // Saved indices map to this optimizer's parameters by position, as in PyTorch.
  std::map<int64_t, Position> positions;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string group_where = fmt::format("{}: param_groups[{}]", where, g);
    const nlohmann::json& indices = detail::field(saved_groups[g], "params", group_where);
    EMBER_CHECK(indices.is_array(), "{}: 'params' must be a list of indices", group_where);
    EMBER_CHECK(indices.size() == groups_[g].params.size(), "{} has {} parameters but the optimizer's group has {}",
                group_where, indices.size(), groups_[g].params.size());
    for (size_t i = 0; i < indices.size(); ++i) {
      EMBER_CHECK(indices[i].is_number_integer(), "{}: 'params' must hold integers, got {}", group_where,
                  indices[i].dump());
      bool inserted = positions.emplace(indices[i].get<int64_t>(), Position{g, i}).second;
      EMBER_CHECK(inserted, "{}: parameter index {} appears twice", where, indices[i].dump());
    }
  }

  std::vector<std::vector<std::optional<ParamState>>> loaded(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) loaded[g].resize(groups_[g].params.size());
  auto position_of = [&](int64_t index, std::string_view what) {
    auto found = positions.find(index);
    EMBER_CHECK(found != positions.end(), "{}: {} names parameter {}, which no param group lists", where, what, index);
    return found->second;
  };
  for (const auto& item : saved_state.items()) {
    const std::string entry_where = fmt::format("{}: state['{}']", where, item.key());
    Position at = position_of(parse_index(item.key(), where), "the state");
    ParamState state;
    // The step is JSON here; a dict converted from PyTorch may hold it as a
    // tensor state.<index>.step instead (-1 until one of them is read).
    state.step =
        counts_steps() && item.value().contains("step") ? detail::integer_field(item.value(), "step", entry_where) : -1;
    EMBER_CHECK(state.step >= -1, "{}: 'step' must not be negative, got {}", entry_where, state.step);
    loaded[at.group][at.index] = std::move(state);
  }
  for (const auto& [tensor_name, tensor] : dict.tensors) {
    std::string_view rest = tensor_name;
    EMBER_CHECK(rest.starts_with("state.") && rest.find('.', 6) != std::string_view::npos,
                "{}: tensor '{}' is not named state.<index>.<buffer>", where, tensor_name);
    rest.remove_prefix(6);
    const size_t dot = rest.find('.');
    Position at = position_of(parse_index(rest.substr(0, dot), where), fmt::format("tensor '{}'", tensor_name));
    std::optional<ParamState>& state = loaded[at.group][at.index];
    EMBER_CHECK(state.has_value(), "{}: tensor '{}' belongs to a parameter with no entry in 'state'", where,
                tensor_name);
    const std::string buffer_name(rest.substr(dot + 1));
    EMBER_CHECK(!state->find(buffer_name).defined(), "{}: tensor '{}' appears twice", where, tensor_name);
    if (buffer_name == "step" && counts_steps()) {
      EMBER_CHECK(tensor.defined() && tensor.numel() == 1, "{}: tensor '{}' must hold one value", where, tensor_name);
      const double step = tensor.item<double>();
      EMBER_CHECK(step >= 0 && step < 9.2e18 && std::floor(step) == step, "{}: tensor '{}' holds {}, not a step count",
                  where, tensor_name, step);
      state->step = int64_t(step);
      continue;
    }
    const Tensor& param = groups_[at.group].params[at.index];
    EMBER_CHECK(tensor.defined() && tensor.shape() == param.shape(),
                "{}: tensor '{}' has shape {} but its parameter has shape {}", where, tensor_name,
                tensor.defined() ? tensor.shape().str() : "undefined", param.shape());
    // A check needs only to know the buffer is there: no copy.
    Tensor copy = tensor;
    if (apply) {
      copy = empty(param.shape(), {.dtype = param.dtype(), .device = param.device()});
      copy.copy_(tensor);
    }
    state->buffers.emplace_back(buffer_name, copy);
  }

  // The groups' hyper-parameters decide which buffers are required (amsgrad,
  // centered, momentum), so they are applied first and put back on failure.
  std::vector<nlohmann::json> previous;
  std::vector<std::optional<double>> initial_lrs(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) previous.push_back(group_to_json(g));
  try {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (saved_groups[g].contains("initial_lr"))
        initial_lrs[g] =
            detail::non_negative_field(saved_groups[g], "initial_lr", fmt::format("{}: param_groups[{}]", where, g));
      group_from_json(g, saved_groups[g]);
      for (size_t i = 0; i < loaded[g].size(); ++i) {
        if (!loaded[g][i]) continue;
        if (!counts_steps()) loaded[g][i]->step = 0;
        EMBER_CHECK(loaded[g][i]->step >= 0, "{}: the state of parameter {} of param group {} has no 'step'", where, i,
                    g);
        for (const std::string& required : required_buffers(g))
          EMBER_CHECK(loaded[g][i]->find(required).defined(),
                      "{}: the state of parameter {} of param group {} has no '{}'", where, i, g, required);
        // A buffer this optimizer never keeps (another optimizer's state, a
        // renamed one) would be carried along unused, its own restarted.
        const std::vector<std::string> known = buffers_ever_kept(g);
        for (const auto& [buffer, tensor] : loaded[g][i]->buffers)
          EMBER_CHECK(std::find(known.begin(), known.end(), buffer) != known.end(),
                      "{}: the state of parameter {} of param group {} has a buffer '{}', which {} does not keep "
                      "(it keeps: {}); is this another optimizer's state?",
                      where, i, g, buffer, name_, known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", ")));
      }
    }
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) group_from_json(g, previous[g]);
    throw;
  }
  if (!apply) {
    for (size_t g = 0; g < groups_.size(); ++g) group_from_json(g, previous[g]);
    return;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].state = std::move(loaded[g]);
    groups_[g].initial_lr = initial_lrs[g];
  }
}

}  // namespace ember::optim
