// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// the sign of an interpolation of momentum and gradient, with decoupled
// weight decay. PyTorch has none; the formula is the paper's (and
// lucidrains/lion-pytorch's), written out in core/ops/optimizer.h. Its state
// is one buffer, exp_avg, and no step count. Tests: tests/optim/test_optimizers_golden.cpp.
#pragma once

#include <utility>

#include "optim/optimizer.h"

namespace ember::optim {

struct LionOptions {
  double lr = 1e-4;
  std::pair<double, double> betas = {0.9, 0.99};
  double weight_decay = 0;
  bool maximize = false;
};

class Lion final : public OptimizerWithOptions<LionOptions> {
 public:
  Lion(std::vector<Tensor> params, const LionOptions& options = {});
  explicit Lion(std::vector<ParamGroup<LionOptions>> groups);
  bool updates_elementwise() const override { return true; }

  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return options(group).betas.first; }
  void set_momentum(size_t group, double momentum) override {
    set_checked(group, [momentum](LionOptions& o) { o.betas.first = momentum; });
  }

 private:
  void update() override;
  void check_options(const LionOptions& options) const override;
  nlohmann::json group_to_json(size_t group) const override;
  void group_from_json(size_t group, const nlohmann::json& json) override;
  std::vector<std::string> required_buffers(size_t) const override { return {"exp_avg"}; }
  bool counts_steps() const override { return false; }
};

}  // namespace ember::optim
