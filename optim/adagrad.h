// Adagrad with learning-rate decay, weight decay, an initial accumulator
// value and maximize, as torch.optim.Adagrad. The update of each parameter is
// one fused pass (adagrad_update_, core/ops/optimizer.h). Tests:
// tests/optim/test_optimizers_golden.cpp.
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

class Adagrad final : public OptimizerWithOptions<AdagradOptions> {
 public:
  Adagrad(std::vector<Tensor> params, const AdagradOptions& options = {});
  explicit Adagrad(std::vector<ParamGroup<AdagradOptions>> groups);
  bool updates_elementwise() const override { return true; }

 private:
  void update() override;
  void initialize_state(size_t group, size_t index);
  void check_options(const AdagradOptions& options) const override;
  nlohmann::json group_to_json(size_t group) const override;
  void group_from_json(size_t group, const nlohmann::json& json) override;
  std::vector<std::string> required_buffers(size_t) const override { return {"sum"}; }
  bool counts_steps() const override { return true; }
};

}  // namespace ember::optim
