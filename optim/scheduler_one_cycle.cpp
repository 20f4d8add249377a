// OneCycleLR (optim/scheduler_one_cycle.h), transcribed from PyTorch 1.13.
// PyTorch keeps max_lr, min_lr, base_momentum and max_momentum in the
// optimizer's param groups; here they live in the scheduler (and its state
// dict), and only initial_lr goes to the optimizer, where other schedulers
// read it.
#include "optim/scheduler_one_cycle.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "optim/json_fields.h"

namespace ember::optim {
namespace {

// One value for every group, or one per group.
std::vector<double> per_group(const std::vector<double>& values, size_t groups, const char* name) {
  EMBER_CHECK(values.size() == 1 || values.size() == groups, "OneCycleLR: expected 1 or {} values for {}, got {}",
              groups, name, values.size());
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options)
    : LRScheduler(optimizer, "OneCycleLR", options.last_epoch),
      anneal_strategy_(options.anneal_strategy),
      cycle_momentum_(options.cycle_momentum) {
  if (options.total_steps != 0) {  // 0: not given
    EMBER_CHECK(options.total_steps > 0, "OneCycleLR: expected a positive total_steps, got {}", options.total_steps);
    total_steps_ = options.total_steps;
  } else {
    EMBER_CHECK(options.epochs > 0 && options.steps_per_epoch > 0,
                "OneCycleLR: define a positive total_steps, or epochs and steps_per_epoch (got {}, {}, {})",
                options.total_steps, options.epochs, options.steps_per_epoch);
    total_steps_ = options.epochs * options.steps_per_epoch;
  }
  EMBER_CHECK(options.pct_start >= 0 && options.pct_start <= 1,
              "OneCycleLR: expected pct_start between 0 and 1, got {}", options.pct_start);
  const double total = double(total_steps_), pct = options.pct_start;
  if (options.three_phase) {
    phases_ = {{pct * total - 1, Point::initial, Point::max, MomentumPoint::max, MomentumPoint::base},
               {2 * pct * total - 2, Point::max, Point::initial, MomentumPoint::base, MomentumPoint::max},
               {total - 1, Point::initial, Point::min, MomentumPoint::max, MomentumPoint::max}};
  } else {
    phases_ = {{pct * total - 1, Point::initial, Point::max, MomentumPoint::max, MomentumPoint::base},
               {total - 1, Point::max, Point::min, MomentumPoint::base, MomentumPoint::max}};
  }
  // A phase that ends where it starts, and that a step reaches (any phase
  // ending at step 0 or later, and the last), would divide 0 by 0: a NaN
  // learning rate from the first step (PyTorch raises ZeroDivisionError).
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const double end = phases_[i].end_step;
    EMBER_CHECK(!(end == start && (end >= 0 || i + 1 == phases_.size())),
                "OneCycleLR: pct_start {} of total_steps {} leaves phase {} of {} without a step (it starts and ends at "
                "step {}); choose pct_start so that pct_start * total_steps is not 1 and pct_start is below 1",
                pct, total_steps_, i + 1, phases_.size(), end);
    start = end;
  }

  const size_t groups = optimizer.num_param_groups();
  const std::vector<double> max_lrs = per_group(options.max_lr, groups, "max_lr");
  const std::vector<double> max_momentums = per_group(options.max_momentum, groups, "max_momentum");
  const std::vector<double> base_momentums = per_group(options.base_momentum, groups, "base_momentum");
  EMBER_CHECK(!cycle_momentum_ || optimizer.has_momentum(),
              "OneCycleLR: {} has no momentum to cycle (set cycle_momentum = false)", optimizer.name());
  // Both momentums go through the optimizer's checks here, not at the step
  // that reaches them (Adam's beta1 of 1 made its parameters NaN); a refusal
  // leaves the optimizer as it was.
  if (cycle_momentum_)
    for (size_t g = 0; g < groups; ++g) {
      const double current = optimizer.momentum(g);
      try {
        optimizer.set_momentum(g, base_momentums[g]);
        optimizer.set_momentum(g, max_momentums[g]);
      } catch (...) {
        optimizer.set_momentum(g, current);
        throw;
      }
      optimizer.set_momentum(g, current);
    }
  for (size_t g = 0; g < groups; ++g) {
    const double initial_lr = max_lrs[g] / options.div_factor;
    groups_.push_back({.initial_lr = initial_lr,
                       .max_lr = max_lrs[g],
                       .min_lr = initial_lr / options.final_div_factor,
                       .base_momentum = base_momentums[g],
                       .max_momentum = max_momentums[g]});
    if (options.last_epoch == -1) {
      optimizer.set_initial_lr(g, initial_lr);
      if (cycle_momentum_) optimizer.set_momentum(g, max_momentums[g]);
    }
  }
  initialize_base_lrs();
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_strategy_ == AnnealStrategy::cos)
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  return (end - start) * pct + start;
}

double OneCycleLR::lr_at(const GroupValues& values, Point point) const {
  switch (point) {
    case Point::initial:
      return values.initial_lr;
    case Point::max:
      return values.max_lr;
    case Point::min:
      return values.min_lr;
  }
  return 0;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step = last_epoch_;
  EMBER_CHECK(step <= total_steps_, "OneCycleLR: tried to step {} times, but the number of total steps is {}", step + 1,
              total_steps_);
  std::vector<double> lrs;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupValues& values = groups_[g];
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (double(step) <= phase.end_step || i == phases_.size() - 1) {
        const double pct = (double(step) - start_step) / (phase.end_step - start_step);
        lr = anneal(lr_at(values, phase.start_lr), lr_at(values, phase.end_lr), pct);
        auto momentum_at = [&](MomentumPoint point) {
          return point == MomentumPoint::base ? values.base_momentum : values.max_momentum;
        };
        momentum = anneal(momentum_at(phase.start_momentum), momentum_at(phase.end_momentum), pct);
        break;
      }
      start_step = phase.end_step;
    }
    lrs.push_back(lr);
    if (cycle_momentum_) optimizer_.set_momentum(g, momentum);
  }
  return lrs;
}

void OneCycleLR::save_fields(nlohmann::json& state) const {
  state["total_steps"] = total_steps_;
  state["anneal_strategy"] = anneal_strategy_ == AnnealStrategy::cos ? "cos" : "linear";
  state["cycle_momentum"] = cycle_momentum_;
  nlohmann::json phases = nlohmann::json::array();
  for (const Phase& phase : phases_) phases.push_back({{"end_step", phase.end_step}});
  state["_schedule_phases"] = phases;
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupValues& values : groups_)
    groups.push_back({{"initial_lr", values.initial_lr},
                      {"max_lr", values.max_lr},
                      {"min_lr", values.min_lr},
                      {"base_momentum", values.base_momentum},
                      {"max_momentum", values.max_momentum}});
  state["group_values"] = groups;
}

void OneCycleLR::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  const int64_t total_steps = detail::count_field(state, "total_steps", at, 1);
  // Not taken from the state: the schedule's shape is the constructor's, as
  // the warmup schedulers' (a linear schedule loaded into a cos one went on as cos).
  const nlohmann::json& strategy = detail::field(state, "anneal_strategy", at);
  const std::string made = anneal_strategy_ == AnnealStrategy::cos ? "cos" : "linear";
  EMBER_CHECK(strategy == made, "{}: the state was saved with anneal_strategy {}, this scheduler anneals by '{}'", at,
              strategy.dump(), made);
  const nlohmann::json& cycle = detail::field(state, "cycle_momentum", at);
  EMBER_CHECK(cycle == cycle_momentum_, "{}: the state was saved with cycle_momentum {}, this scheduler has {}", at,
              cycle.dump(), cycle_momentum_);
  const nlohmann::json& phases = detail::field(state, "_schedule_phases", at);
  EMBER_CHECK(phases.is_array() && phases.size() == phases_.size(), "{}: '_schedule_phases' must hold {} phases", at,
              phases_.size());
  const nlohmann::json& groups = detail::field(state, "group_values", at);
  EMBER_CHECK(groups.is_array() && groups.size() == groups_.size(), "{}: 'group_values' must hold {} groups", at,
              groups_.size());
  std::vector<GroupValues> values;
  for (const nlohmann::json& group : groups)
    values.push_back({.initial_lr = detail::non_negative_field(group, "initial_lr", at),
                      .max_lr = detail::non_negative_field(group, "max_lr", at),
                      .min_lr = detail::non_negative_field(group, "min_lr", at),
                      .base_momentum = detail::number_field(group, "base_momentum", at),
                      .max_momentum = detail::number_field(group, "max_momentum", at)});
  std::vector<double> end_steps;
  for (size_t i = 0; i < phases_.size(); ++i) end_steps.push_back(detail::non_negative_field(phases[i], "end_step", at));
  for (size_t i = 0; i < phases_.size(); ++i) phases_[i].end_step = end_steps[i];
  total_steps_ = total_steps;
  groups_ = std::move(values);
}

}  // namespace ember::optim
