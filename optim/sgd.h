// Stochastic gradient descent with momentum, dampening, Nesterov momentum,
// weight decay and maximize, as torch.optim.SGD. The update of each parameter
// is one fused pass (sgd_update_, core/ops/optimizer.h). Tests:
// tests/optim/test_optimizers_golden.cpp.
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD final : public OptimizerWithOptions<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);
  bool updates_elementwise() const override { return true; }

  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return options(group).momentum; }
  void set_momentum(size_t group, double momentum) override {
    set_checked(group, [momentum](SGDOptions& o) { o.momentum = momentum; });
  }
  // PyTorch's SGD loads a state without momentum_buffer (it is None until a
  // step with momentum), so none is required, but one is kept with momentum.
  std::vector<std::string> state_buffer_names(size_t group) const override {
    if (options(group).momentum != 0) return {"momentum_buffer"};
    return {};
  }

 private:
  void update() override;
  void check_options(const SGDOptions& options) const override;
  nlohmann::json group_to_json(size_t group) const override;
  void group_from_json(size_t group, const nlohmann::json& json) override;
  std::vector<std::string> required_buffers(size_t) const override { return {}; }
  std::vector<std::string> buffers_ever_kept(size_t) const override { return {"momentum_buffer"}; }
  bool counts_steps() const override { return false; }
};

}  // namespace ember::optim
