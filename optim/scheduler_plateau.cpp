// ReduceLROnPlateau (optim/scheduler_plateau.h), transcribed from PyTorch 1.13.
#include "optim/scheduler_plateau.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "optim/json_fields.h"

namespace ember::optim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// JSON has no infinity: one is written as the string "inf" or "-inf" (a best
// metric may be one: a PSNR at zero error). null, which files before this
// wrote for every infinity, reads as the mode's worst value.
nlohmann::json number_or_infinity(double value) {
  if (!std::isinf(value)) return value;
  return value > 0 ? "inf" : "-inf";
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : optimizer_(optimizer), options_(options) {
  EMBER_CHECK(options.factor < 1.0, "ReduceLROnPlateau: factor should be < 1.0, got {}", options.factor);
  EMBER_CHECK(options.factor >= 0, "ReduceLROnPlateau: factor must not be negative (it would make lrs negative), got {}",
              options.factor);
  EMBER_CHECK(options.patience >= 0 && options.cooldown >= 0,
              "ReduceLROnPlateau: patience and cooldown must not be negative (got {}, {})", options.patience,
              options.cooldown);
  const size_t groups = optimizer.num_param_groups();
  EMBER_CHECK(options.min_lr.size() == 1 || options.min_lr.size() == groups,
              "ReduceLROnPlateau: expected 1 or {} min_lrs, got {}", groups, options.min_lr.size());
  min_lrs_ = options.min_lr.size() == 1 ? std::vector<double>(groups, options.min_lr[0]) : options.min_lr;
  // As load_state_dict: a state with these would not load.
  for (size_t g = 0; g < groups; ++g)
    EMBER_CHECK(min_lrs_[g] >= 0, "ReduceLROnPlateau: learning rates must not be negative, got min_lrs[{}] = {}", g,
                min_lrs_[g]);
  EMBER_CHECK(options.eps >= 0, "ReduceLROnPlateau: 'eps' must not be negative, got {}", options.eps);
  best_ = options.mode == PlateauMode::min ? kInfinity : -kInfinity;
  for (size_t g = 0; g < groups; ++g) last_lr_.push_back(optimizer.lr(g));
}

bool ReduceLROnPlateau::is_better(double value) const {
  const double threshold = options_.threshold;
  if (options_.mode == PlateauMode::min)
    return options_.threshold_mode == ThresholdMode::rel ? value < best_ * (1. - threshold) : value < best_ - threshold;
  return options_.threshold_mode == ThresholdMode::rel ? value > best_ * (threshold + 1.) : value > best_ + threshold;
}

void ReduceLROnPlateau::step(double metric) {
  EMBER_CHECK(optimizer_.num_param_groups() == min_lrs_.size(),
              "ReduceLROnPlateau: the optimizer has {} param groups, {} when this scheduler was made; make the "
              "scheduler after the last add_param_group",
              optimizer_.num_param_groups(), min_lrs_.size());
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g);
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_[g] = optimizer_.lr(g);
}

nlohmann::json ReduceLROnPlateau::state_dict() const {
  return {{"mode", options_.mode == PlateauMode::min ? "min" : "max"},
          {"factor", options_.factor},
          {"patience", options_.patience},
          {"threshold", options_.threshold},
          {"threshold_mode", options_.threshold_mode == ThresholdMode::rel ? "rel" : "abs"},
          {"cooldown", options_.cooldown},
          {"min_lrs", min_lrs_},
          {"eps", options_.eps},
          {"verbose", false},
          {"best", number_or_infinity(best_)},
          {"num_bad_epochs", num_bad_epochs_},
          {"cooldown_counter", cooldown_counter_},
          {"mode_worse", number_or_infinity(options_.mode == PlateauMode::min ? kInfinity : -kInfinity)},
          {"last_epoch", last_epoch_},
          {"_last_lr", last_lr_}};
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& state) {
  const char* at = "ReduceLROnPlateau.load_state_dict";
  const size_t groups = optimizer_.num_param_groups();
  ReduceLROnPlateauOptions options = options_;
  const nlohmann::json& mode = detail::field(state, "mode", at);
  const nlohmann::json& threshold_mode = detail::field(state, "threshold_mode", at);
  EMBER_CHECK(mode == "min" || mode == "max", "{}: mode {} is unknown", at, mode.dump());
  EMBER_CHECK(threshold_mode == "rel" || threshold_mode == "abs", "{}: threshold mode {} is unknown", at,
              threshold_mode.dump());
  options.mode = mode == "min" ? PlateauMode::min : PlateauMode::max;
  options.threshold_mode = threshold_mode == "rel" ? ThresholdMode::rel : ThresholdMode::abs;
  options.factor = detail::non_negative_field(state, "factor", at);
  EMBER_CHECK(options.factor < 1.0, "{}: factor should be < 1.0, got {}", at, options.factor);
  options.patience = detail::count_field(state, "patience", at, 0);
  options.threshold = detail::number_field(state, "threshold", at);
  options.cooldown = detail::count_field(state, "cooldown", at, 0);
  options.eps = detail::non_negative_field(state, "eps", at);
  std::vector<double> min_lrs = detail::number_list_field(state, "min_lrs", at, int64_t(groups));
  std::vector<double> last_lr = detail::number_list_field(state, "_last_lr", at, int64_t(groups));
  for (size_t g = 0; g < groups; ++g)
    EMBER_CHECK(min_lrs[g] >= 0 && last_lr[g] >= 0,
                "{}: learning rates must not be negative, got min_lrs[{}] = {} and _last_lr[{}] = {}", at, g,
                min_lrs[g], g, last_lr[g]);
  const nlohmann::json& best = detail::field(state, "best", at);
  EMBER_CHECK(best.is_null() || best.is_number() || best == "inf" || best == "-inf",
              "{}: 'best' must be a number, \"inf\", \"-inf\" or null, got {}", at, best.dump());
  const double worst = options.mode == PlateauMode::min ? kInfinity : -kInfinity;
  const int64_t num_bad_epochs = detail::count_field(state, "num_bad_epochs", at, 0);
  const int64_t cooldown_counter = detail::count_field(state, "cooldown_counter", at, 0);
  const int64_t last_epoch = detail::count_field(state, "last_epoch", at, 0);
  // Everything is read and checked: from here on nothing throws.
  best_ = best.is_null() ? worst : best.is_number() ? best.get<double>() : best == "inf" ? kInfinity : -kInfinity;
  num_bad_epochs_ = num_bad_epochs;
  cooldown_counter_ = cooldown_counter;
  last_epoch_ = last_epoch;
  options_ = options;
  options_.min_lr = min_lrs;
  min_lrs_ = std::move(min_lrs);
  last_lr_ = std::move(last_lr);
}

}  // namespace ember::optim
