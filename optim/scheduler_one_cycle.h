// OneCycleLR (Smith and Topin, "Super-Convergence"), as
// torch.optim.lr_scheduler.OneCycleLR: the lr rises from max_lr / div_factor
// to max_lr over pct_start of the steps, then falls to
// initial_lr / final_div_factor (three_phase: back to the initial lr first),
// by cosine or linear annealing; the momentum (beta1 for Adam-like
// optimizers) moves the opposite way. Tests: tests/optim/test_schedulers_golden.cpp.
#pragma once

#include "optim/scheduler.h"

namespace ember::optim {

enum class AnnealStrategy { cos, linear };

struct OneCycleLROptions {
  std::vector<double> max_lr;  // one value for every group, or one per group
  int64_t total_steps = 0;     // or epochs * steps_per_epoch when 0
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::cos;
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool three_phase = false;
  int64_t last_epoch = -1;
};

class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);

 private:
  // A phase anneals from one of the group's values to another until end_step.
  enum class Point { initial, max, min };
  enum class MomentumPoint { base, max };
  struct Phase {
    double end_step;
    Point start_lr, end_lr;
    MomentumPoint start_momentum, end_momentum;
  };
  struct GroupValues {
    double initial_lr, max_lr, min_lr, base_momentum, max_momentum;
  };

  std::vector<double> get_lr() override;
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  double anneal(double start, double end, double pct) const;
  double lr_at(const GroupValues& values, Point point) const;

  int64_t total_steps_;
  AnnealStrategy anneal_strategy_;
  bool cycle_momentum_;
  std::vector<Phase> phases_;
  std::vector<GroupValues> groups_;
};

}  // namespace ember::optim
