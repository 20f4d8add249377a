// RMSprop with centering, momentum, weight decay and maximize, as
// torch.optim.RMSprop. The update of each parameter is one fused pass
// (rmsprop_update_, core/ops/optimizer.h). Tests: tests/optim/test_optimizers_golden.cpp.
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

class RMSprop final : public OptimizerWithOptions<RMSpropOptions> {
 public:
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& options = {});
  explicit RMSprop(std::vector<ParamGroup<RMSpropOptions>> groups);
  bool updates_elementwise() const override { return true; }

  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return options(group).momentum; }
  void set_momentum(size_t group, double momentum) override {
    set_checked(group, [momentum](RMSpropOptions& o) { o.momentum = momentum; });
  }

 private:
  void update() override;
  void check_options(const RMSpropOptions& options) const override;
  nlohmann::json group_to_json(size_t group) const override;
  void group_from_json(size_t group, const nlohmann::json& json) override;
  std::vector<std::string> required_buffers(size_t group) const override;
  std::vector<std::string> buffers_ever_kept(size_t) const override {
    return {"square_avg", "momentum_buffer", "grad_avg"};
  }
  bool counts_steps() const override { return true; }
};

}  // namespace ember::optim
