// Learning-rate schedulers: the LRScheduler base and PyTorch's simple
// schedules (LambdaLR, StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,
// LinearLR). Each computes PyTorch's chainable form (the next lr from the
// group's current one) where PyTorch does, so the values match it to the last
// bit. The composite and special ones live in scheduler_sequential.h,
// scheduler_one_cycle.h, scheduler_plateau.h and scheduler_warmup.h.
// Tests: tests/optim/test_schedulers_golden.cpp.
//
//   optim::StepLR scheduler(optimizer, /*step_size=*/30, /*gamma=*/0.1);
//   for (...) { optimizer.step(); scheduler.step(); }
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/hook_list.h"
#include "optim/optimizer.h"

namespace ember::optim {

class SequentialLR;

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or step) and writes the new lr into every group,
  // unless a step pre-hook returns false (the Accelerator's: "the optimizer
  // did not really step"), in which case nothing changes.
  void step();
  using StepPreHook = std::function<bool(LRScheduler& scheduler)>;
  HookId register_step_pre_hook(StepPreHook hook);
  void remove_hook(HookId id);
  // The lr of each group after the last step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }
  const std::string& name() const { return name_; }

  // PyTorch's scheduler state_dict keys (base_lrs, last_epoch, _step_count,
  // _last_lr, and each scheduler's own fields), as JSON.
  // Loading checks every field (counts not below their start, learning rates
  // finite and not negative) and changes nothing when it throws.
  virtual nlohmann::json state_dict() const;
  virtual void load_state_dict(const nlohmann::json& state);
  // Throws what load_state_dict(state) would throw, and leaves this scheduler
  // as it was either way: Accelerator::load_state checks every object before
  // it changes any.
  void check_state_dict(const nlohmann::json& state);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name, int64_t last_epoch);
  // What the constructors of PyTorch's _LRScheduler do, in two parts: base_lrs
  // from each group's initial_lr (set to the lr when absent), then a first
  // step to epoch 0. A derived constructor calls them once its fields are set.
  void initialize_base_lrs();
  void initial_step();
  // What step() does once the hooks let it: the next epoch's lrs.
  virtual void advance();
  // PyTorch's step(epoch): jump to `epoch`, by the closed form when there is one.
  void step_to(int64_t epoch);
  void apply(const std::vector<double>& lrs);
  // Throws when the optimizer's param groups are not the ones this scheduler was made for.
  void check_groups_unchanged() const;

  // The lrs at last_epoch_ (chainable form: may read the groups' current lr).
  virtual std::vector<double> get_lr() = 0;
  // The lrs at last_epoch_ from base_lrs alone; none when PyTorch has no closed form.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // Each scheduler's own state_dict fields.
  virtual void save_fields(nlohmann::json&) const {}
  virtual void load_fields(const nlohmann::json&) {}
  std::string where(std::string_view method) const { return name_ + "." + std::string(method); }

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_;
  size_t num_groups_;  // the optimizer's param groups when this scheduler was made
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
  HookList<StepPreHook> step_pre_hooks_;

  friend class SequentialLR;
};

// lr = base_lr * lambda(epoch); one lambda for every group, or one per group.
// Lambdas are code, so the state dict holds only the counters (PyTorch saves
// None for a plain function).
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda, int64_t last_epoch = -1);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas, int64_t last_epoch = -1);

 protected:
  LambdaLR(Optimizer& optimizer, std::string name, Lambda lambda);
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lambdas_;
};

// lr *= gamma every step_size epochs.
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  int64_t step_size_;
  double gamma_;
};

// lr *= gamma at each milestone (a milestone listed twice multiplies twice).
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1, int64_t last_epoch = -1);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr *= gamma every epoch.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch = -1);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  double gamma_;
};

// Cosine from base_lr down to eta_min over T_max epochs (and back up after,
// as PyTorch's recursive form does).
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0, int64_t last_epoch = -1);

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  int64_t T_max_;
  double eta_min_;
};

struct LinearLROptions {
  double start_factor = 1.0 / 3;
  double end_factor = 1.0;
  int64_t total_iters = 5;
  int64_t last_epoch = -1;
};

// The lr factor goes linearly from start_factor to end_factor over total_iters epochs.
class LinearLR final : public LRScheduler {
 public:
  explicit LinearLR(Optimizer& optimizer, const LinearLROptions& options = {});

 private:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  LinearLROptions options_;
};

}  // namespace ember::optim
