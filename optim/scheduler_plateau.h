// ReduceLROnPlateau: multiplies the lr by `factor` once a metric has stopped
// improving for `patience` epochs, as torch.optim.lr_scheduler.ReduceLROnPlateau
// (not an LRScheduler: its step takes the metric). Tests:
// tests/optim/test_schedulers_golden.cpp.
//
//   optim::ReduceLROnPlateau scheduler(optimizer, {.patience = 3});
//   scheduler.step(validation_loss);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

enum class PlateauMode { min, max };
enum class ThresholdMode { rel, abs };

struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::min;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;
  std::vector<double> min_lr = {0};  // one value for every group, or one per group
  double eps = 1e-8;                 // smaller lr changes are skipped
};

class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});

  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

  // PyTorch's keys: best, num_bad_epochs, cooldown_counter, last_epoch, the options, _last_lr.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  bool is_better(double value) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace ember::optim
