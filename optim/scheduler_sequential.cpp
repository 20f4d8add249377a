// SequentialLR (optim/scheduler_sequential.h), following PyTorch's
// constructor: the children's constructors each took a first step, so the
// groups' lr is reset to initial_lr, every child is moved back one epoch, and
// only the first child takes its first step again.
#include "optim/scheduler_sequential.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/json_fields.h"

namespace ember::optim {

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR", 0),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    EMBER_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler {} is null", i);
    EMBER_CHECK(&schedulers_[i]->optimizer() == &optimizer,
                "SequentialLR: scheduler {} ({}) belongs to a different optimizer", i, schedulers_[i]->name());
  }
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(),
              "SequentialLR: expects one milestone fewer than schedulers, got {} schedulers and {} milestones",
              schedulers_.size(), milestones_.size());
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be increasing");
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    EMBER_CHECK(optimizer.initial_lr(g).has_value(), "SequentialLR: param group {} has no initial_lr", g);
    optimizer.set_lr(g, *optimizer.initial_lr(g));
  }
  for (const std::shared_ptr<LRScheduler>& scheduler : schedulers_) --scheduler->last_epoch_;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
  base_lrs_ = schedulers_[0]->base_lrs();
}

void SequentialLR::advance() {
  ++last_epoch_;
  const size_t index = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& scheduler = *schedulers_[index];
  if (index > 0 && milestones_[index - 1] == last_epoch_)
    scheduler.step_to(0);
  else
    scheduler.advance();
  last_lr_ = scheduler.get_last_lr();
}

std::vector<double> SequentialLR::get_lr() { return last_lr_; }

nlohmann::json SequentialLR::state_dict() const {
  nlohmann::json state = {{"_milestones", milestones_}, {"last_epoch", last_epoch_}, {"_last_lr", last_lr_}};
  state["_schedulers"] = nlohmann::json::array();
  for (const std::shared_ptr<LRScheduler>& scheduler : schedulers_)
    state["_schedulers"].push_back(scheduler->state_dict());
  return state;
}

void SequentialLR::load_state_dict(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  const nlohmann::json& children = detail::field(state, "_schedulers", at);
  EMBER_CHECK(children.is_array() && children.size() == schedulers_.size(),
              "{}: '_schedulers' must hold the states of {} schedulers", at, schedulers_.size());
  std::vector<double> milestones = detail::number_list_field(state, "_milestones", at, int64_t(milestones_.size()));
  for (size_t i = 0; i < milestones.size(); ++i)
    EMBER_CHECK(milestones[i] >= 0 && std::floor(milestones[i]) == milestones[i] && milestones[i] < 9.2e18 &&
                    (i == 0 || milestones[i] >= milestones[i - 1]),
                "{}: '_milestones' must be increasing whole numbers >= 0, got {}", at, state["_milestones"].dump());
  // _last_lr may be negative, as LRScheduler::load_state_dict takes it: a
  // child decaying to 0 ends a rounding below it, and that state must load.
  std::vector<double> last_lr =
      detail::number_list_field(state, "_last_lr", at, int64_t(optimizer_.num_param_groups()));
  const int64_t last_epoch = detail::count_field(state, "last_epoch", at, -1);
  // Each child checks its own state; one that throws after others were
  // loaded puts them back, so that nothing changes.
  std::vector<nlohmann::json> before;
  for (const auto& child : schedulers_) before.push_back(child->state_dict());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    try {
      schedulers_[i]->load_state_dict(children[i]);
    } catch (...) {
      for (size_t j = 0; j < i; ++j) schedulers_[j]->load_state_dict(before[j]);
      throw;
    }
  }
  for (size_t i = 0; i < milestones.size(); ++i) milestones_[i] = int64_t(milestones[i]);
  last_lr_ = std::move(last_lr);
  last_epoch_ = last_epoch;
}

}  // namespace ember::optim
