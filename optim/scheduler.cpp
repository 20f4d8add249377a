// The LRScheduler base and the simple schedules (optim/scheduler.h), each a
// transcription of torch/optim/lr_scheduler.py (1.13): get_lr is the
// chainable form, closed_form_lr the one PyTorch uses for step(epoch).
#include "optim/scheduler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "optim/json_fields.h"

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name, int64_t last_epoch)
    : optimizer_(optimizer), name_(std::move(name)), last_epoch_(last_epoch), num_groups_(optimizer.num_param_groups()) {}

// The schedule holds a base lr per group of the optimizer as it was when the scheduler
// was made; a group added later would get no schedule (PyTorch leaves it at its lr
// without a word, and the per-group lists here would be read past their end).
void LRScheduler::check_groups_unchanged() const {
  EMBER_CHECK(optimizer_.num_param_groups() == num_groups_,
              "{}: the optimizer has {} param groups, {} when this scheduler was made; make the scheduler after "
              "the last add_param_group",
              name_, optimizer_.num_param_groups(), num_groups_);
}

void LRScheduler::initialize_base_lrs() {
  base_lrs_.clear();
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    if (last_epoch_ == -1 && !optimizer_.initial_lr(g)) optimizer_.set_initial_lr(g, optimizer_.lr(g));
    EMBER_CHECK(optimizer_.initial_lr(g).has_value(),
                "{}: param group {} has no initial_lr, which resuming (last_epoch {}) needs", name_, g, last_epoch_);
    base_lrs_.push_back(*optimizer_.initial_lr(g));
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  advance();
}

void LRScheduler::apply(const std::vector<double>& lrs) {
  EMBER_ASSERT(lrs.size() == optimizer_.num_param_groups(), "{}: {} lrs for {} groups", name_, lrs.size(),
               optimizer_.num_param_groups());
  // A NaN or infinite rate is refused at the step that makes it. A negative
  // one is PyTorch's value too (OneCycleLR's linear anneal at its last
  // step), refused only if the optimizer steps with it (Optimizer::step).
  for (size_t g = 0; g < lrs.size(); ++g)
    EMBER_CHECK(std::isfinite(lrs[g]), "{}: the learning rate of param group {} at epoch {} would be {}", name_, g,
                last_epoch_, lrs[g]);
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(g, lrs[g]);
  last_lr_.clear();
  for (size_t g = 0; g < lrs.size(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

void LRScheduler::step() {
  bool allowed = true;
  for (const StepPreHook& hook : step_pre_hooks_.snapshot()) allowed = hook(*this) && allowed;
  if (allowed) advance();
}

HookId LRScheduler::register_step_pre_hook(StepPreHook hook) {
  EMBER_CHECK(hook != nullptr, "{}: the hook is empty", where("register_step_pre_hook"));
  return step_pre_hooks_.add(std::move(hook));
}

void LRScheduler::remove_hook(HookId id) {
  EMBER_CHECK(step_pre_hooks_.remove(id), "{}: no hook with id {} (already removed?)", where("remove_hook"), id);
}

void LRScheduler::advance() {
  check_groups_unchanged();
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  check_groups_unchanged();
  ++step_count_;
  last_epoch_ = epoch;
  std::optional<std::vector<double>> closed = closed_form_lr();
  apply(closed ? *closed : get_lr());
}

nlohmann::json LRScheduler::state_dict() const {
  nlohmann::json state = {{"base_lrs", base_lrs_}, {"last_epoch", last_epoch_},           {"_step_count", step_count_},
                          {"verbose", false},      {"_get_lr_called_within_step", false}, {"_last_lr", last_lr_}};
  save_fields(state);
  return state;
}

void LRScheduler::check_state_dict(const nlohmann::json& state) {
  const nlohmann::json before = state_dict();
  load_state_dict(state);  // changes nothing when it throws
  load_state_dict(before);
}

void LRScheduler::load_state_dict(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  const size_t groups = optimizer_.num_param_groups();
  std::vector<double> base_lrs = detail::number_list_field(state, "base_lrs", at, int64_t(groups));
  std::vector<double> last_lr = detail::number_list_field(state, "_last_lr", at, int64_t(groups));
  // _last_lr may be negative: OneCycleLR's linear anneal goes below 0 at
  // its last step, and that state must load (step() refuses to use it).
  for (size_t g = 0; g < groups; ++g)
    EMBER_CHECK(base_lrs[g] >= 0, "{}: learning rates must not be negative, got base_lrs[{}] = {}", at, g, base_lrs[g]);
  // -1 is "before the first step" (a constructor's argument); a count below
  // it would give a negative epoch and, for most schedules, a negative lr.
  int64_t last_epoch = detail::count_field(state, "last_epoch", at, -1);
  int64_t step_count = detail::count_field(state, "_step_count", at, 0);
  // The derived fields are read last and put back if one of them is wrong,
  // so that nothing changes when this throws.
  nlohmann::json before;
  save_fields(before);
  try {
    load_fields(state);
  } catch (...) {
    load_fields(before);
    throw;
  }
  base_lrs_ = std::move(base_lrs);
  last_lr_ = std::move(last_lr);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
}

namespace {

std::vector<double> current_lrs(const Optimizer& optimizer) {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) lrs.push_back(optimizer.lr(g));
  return lrs;
}

// Every group's current lr times `factor`.
std::vector<double> scaled_lrs(const Optimizer& optimizer, double factor) {
  std::vector<double> lrs = current_lrs(optimizer);
  for (double& lr : lrs) lr *= factor;
  return lrs;
}

}  // namespace

// LambdaLR

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), std::move(lambda)), last_epoch) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas, int64_t last_epoch)
    : LRScheduler(optimizer, "LambdaLR", last_epoch), lambdas_(std::move(lambdas)) {
  EMBER_CHECK(lambdas_.size() == optimizer.num_param_groups(), "LambdaLR: expected {} lr_lambdas, but got {}",
              optimizer.num_param_groups(), lambdas_.size());
  for (size_t g = 0; g < lambdas_.size(); ++g) EMBER_CHECK(bool(lambdas_[g]), "LambdaLR: lr_lambda {} is empty", g);
  initialize_base_lrs();
  initial_step();
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::string name, Lambda lambda)
    : LRScheduler(optimizer, std::move(name), -1), lambdas_(optimizer.num_param_groups(), std::move(lambda)) {
  initialize_base_lrs();
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(base_lrs_[g] * lambdas_[g](last_epoch_));
  return lrs;
}

// StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, "StepLR", last_epoch), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  EMBER_CHECK(gamma >= 0, "StepLR: gamma must not be negative, got {}", gamma);
  initialize_base_lrs();
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return current_lrs(optimizer_);
  return scaled_lrs(optimizer_, gamma_);
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base_lr : base_lrs_) lrs.push_back(base_lr * std::pow(gamma_, double(last_epoch_ / step_size_)));
  return lrs;
}

void StepLR::save_fields(nlohmann::json& state) const {
  state["step_size"] = step_size_;
  state["gamma"] = gamma_;
}

void StepLR::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  int64_t step_size = detail::integer_field(state, "step_size", at);
  EMBER_CHECK(step_size > 0, "{}: step_size must be positive, got {}", at, step_size);
  gamma_ = detail::non_negative_field(state, "gamma", at);
  step_size_ = step_size;
}

// MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, "MultiStepLR", last_epoch), milestones_(std::move(milestones)), gamma_(gamma) {
  EMBER_CHECK(gamma >= 0, "MultiStepLR: gamma must not be negative, got {}", gamma);
  // As load_state_dict: a state with a negative milestone would not load.
  for (int64_t milestone : milestones_)
    EMBER_CHECK(milestone >= 0, "MultiStepLR: milestone {} is not an epoch (a whole number >= 0)", milestone);
  std::sort(milestones_.begin(), milestones_.end());
  initialize_base_lrs();
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return current_lrs(optimizer_);
  return scaled_lrs(optimizer_, std::pow(gamma_, double(count)));
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base_lr : base_lrs_) lrs.push_back(base_lr * std::pow(gamma_, double(passed)));
  return lrs;
}

// PyTorch saves milestones as a Counter, i.e. {"milestone": count}.
void MultiStepLR::save_fields(nlohmann::json& state) const {
  nlohmann::json counts = nlohmann::json::object();
  for (int64_t milestone : milestones_) {
    const std::string key = std::to_string(milestone);
    counts[key] = counts.value(key, 0) + 1;
  }
  state["milestones"] = counts;
  state["gamma"] = gamma_;
}

void MultiStepLR::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  const nlohmann::json& counts = detail::field(state, "milestones", at);
  EMBER_CHECK(counts.is_object(), "{}: 'milestones' must map each milestone to its count", at);
  std::vector<int64_t> milestones;
  for (const auto& item : counts.items()) {
    int64_t milestone = -1;
    const std::string& key = item.key();
    auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), milestone);
    EMBER_CHECK(error == std::errc() && end == key.data() + key.size() && milestone >= 0,
                "{}: milestone '{}' is not an epoch (a whole number >= 0)", at, key);
    // A count of 10^18 would loop here for ever: a milestone is listed at
    // most as often as a state dict has entries to spare.
    const int64_t count = detail::count_field(counts, key, at, 1);
    EMBER_CHECK(count <= 1024, "{}: milestone {} is listed {} times (at most 1024)", at, key, count);
    for (int64_t i = 0; i < count; ++i) milestones.push_back(milestone);
  }
  std::sort(milestones.begin(), milestones.end());
  gamma_ = detail::non_negative_field(state, "gamma", at);
  milestones_ = std::move(milestones);
}

// ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, "ExponentialLR", last_epoch), gamma_(gamma) {
  EMBER_CHECK(gamma >= 0, "ExponentialLR: gamma must not be negative, got {}", gamma);
  initialize_base_lrs();
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  if (last_epoch_ == 0) return current_lrs(optimizer_);
  return scaled_lrs(optimizer_, gamma_);
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base_lr : base_lrs_) lrs.push_back(base_lr * std::pow(gamma_, double(last_epoch_)));
  return lrs;
}

void ExponentialLR::save_fields(nlohmann::json& state) const { state["gamma"] = gamma_; }
void ExponentialLR::load_fields(const nlohmann::json& state) {
  gamma_ = detail::non_negative_field(state, "gamma", where("load_state_dict"));
}

// CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler(optimizer, "CosineAnnealingLR", last_epoch), T_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got {}", T_max);
  // Its state dict refuses a negative eta_min (the lr it anneals to), so resuming would fail.
  EMBER_CHECK(eta_min >= 0, "CosineAnnealingLR: eta_min must not be negative, got {}", eta_min);
  initialize_base_lrs();
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  const double T_max = double(T_max_), epoch = double(last_epoch_);
  std::vector<double> lrs = current_lrs(optimizer_);
  if (last_epoch_ == 0) return lrs;
  for (size_t g = 0; g < lrs.size(); ++g) {
    const double base_lr = base_lrs_[g];
    if (step_count_ == 1 && last_epoch_ > 0)
      lrs[g] = eta_min_ + (base_lr - eta_min_) * (1 + std::cos(epoch * pi / T_max)) / 2;
    else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)
      lrs[g] = lrs[g] + (base_lr - eta_min_) * (1 - std::cos(pi / T_max)) / 2;
    else
      lrs[g] = (1 + std::cos(pi * epoch / T_max)) / (1 + std::cos(pi * (epoch - 1) / T_max)) * (lrs[g] - eta_min_) +
               eta_min_;
  }
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base_lr : base_lrs_)
    lrs.push_back(eta_min_ +
                  (base_lr - eta_min_) * (1 + std::cos(std::numbers::pi * double(last_epoch_) / double(T_max_))) / 2);
  return lrs;
}

void CosineAnnealingLR::save_fields(nlohmann::json& state) const {
  state["T_max"] = T_max_;
  state["eta_min"] = eta_min_;
}

void CosineAnnealingLR::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  int64_t T_max = detail::integer_field(state, "T_max", at);
  EMBER_CHECK(T_max > 0, "{}: T_max must be positive, got {}", at, T_max);
  eta_min_ = detail::non_negative_field(state, "eta_min", at);
  T_max_ = T_max;
}

// LinearLR

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options)
    : LRScheduler(optimizer, "LinearLR", options.last_epoch), options_(options) {
  EMBER_CHECK(options.start_factor > 0 && options.start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got {}",
              options.start_factor);
  EMBER_CHECK(options.end_factor >= 0 && options.end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got {}",
              options.end_factor);
  EMBER_CHECK(options.total_iters > 0, "LinearLR: total_iters must be positive, got {}", options.total_iters);
  initialize_base_lrs();
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  const double start = options_.start_factor, end = options_.end_factor;
  if (last_epoch_ == 0) return scaled_lrs(optimizer_, start);
  if (last_epoch_ > options_.total_iters) return current_lrs(optimizer_);
  return scaled_lrs(optimizer_, 1. + (end - start) / (double(options_.total_iters) * start +
                                                      double(last_epoch_ - 1) * (end - start)));
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double start = options_.start_factor, end = options_.end_factor;
  const double done = double(std::min(options_.total_iters, last_epoch_));
  std::vector<double> lrs;
  for (double base_lr : base_lrs_)
    lrs.push_back(base_lr * (start + (end - start) * done / double(options_.total_iters)));
  return lrs;
}

void LinearLR::save_fields(nlohmann::json& state) const {
  state["start_factor"] = options_.start_factor;
  state["end_factor"] = options_.end_factor;
  state["total_iters"] = options_.total_iters;
}

void LinearLR::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  const double start_factor = detail::number_field(state, "start_factor", at);
  const double end_factor = detail::number_field(state, "end_factor", at);
  const int64_t total_iters = detail::count_field(state, "total_iters", at, 1);
  EMBER_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1,
              "{}: start_factor must be in (0, 1] and end_factor in [0, 1], got {} and {}", at, start_factor,
              end_factor);
  options_.start_factor = start_factor;
  options_.end_factor = end_factor;
  options_.total_iters = total_iters;
}

}  // namespace ember::optim
