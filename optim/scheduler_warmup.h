// The warmup schedules Hugging Face users know, exactly as transformers'
// get_cosine_schedule_with_warmup and get_linear_schedule_with_warmup: LambdaLR
// schedulers whose factor rises linearly from 0 over num_warmup_steps, then
// follows a cosine (num_cycles = 0.5: one half-wave down to 0) or a line down
// to 0 at num_training_steps. Their state dicts hold those numbers; loading one
// saved with other numbers is an error (the schedule is the constructor's lambda, so
// it would go on with the new numbers from the saved step). Tests:
// tests/optim/test_schedulers_golden.cpp.
//
//   optim::CosineWithWarmup scheduler(optimizer, /*num_warmup_steps=*/100, /*num_training_steps=*/2000);
#pragma once

#include "optim/scheduler.h"

namespace ember::optim {

class CosineWithWarmup final : public LambdaLR {
 public:
  CosineWithWarmup(Optimizer& optimizer, int64_t num_warmup_steps, int64_t num_training_steps, double num_cycles = 0.5);

 private:
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  int64_t num_warmup_steps_, num_training_steps_;
  double num_cycles_;
};

class LinearWithWarmup final : public LambdaLR {
 public:
  LinearWithWarmup(Optimizer& optimizer, int64_t num_warmup_steps, int64_t num_training_steps);

 private:
  void save_fields(nlohmann::json& state) const override;
  void load_fields(const nlohmann::json& state) override;
  int64_t num_warmup_steps_, num_training_steps_;
};

}  // namespace ember::optim
