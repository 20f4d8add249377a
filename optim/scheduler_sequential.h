// SequentialLR: runs schedulers one after another, switching at milestones,
// as torch.optim.lr_scheduler.SequentialLR (at a milestone the next scheduler
// restarts at epoch 0). Tests: tests/optim/test_schedulers_golden.cpp.
//
//   auto warmup = std::make_shared<optim::LinearLR>(optimizer, optim::LinearLROptions{.start_factor = 0.1});
//   auto decay = std::make_shared<optim::ExponentialLR>(optimizer, 0.9);
//   optim::SequentialLR scheduler(optimizer, {warmup, decay}, /*milestones=*/{5});
#pragma once

#include <memory>

#include "optim/scheduler.h"

namespace ember::optim {

class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  void advance() override;
  std::vector<double> get_lr() override;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace ember::optim
