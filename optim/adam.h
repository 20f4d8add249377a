// Adam and AdamW (decoupled weight decay), with amsgrad and maximize, as
// torch.optim.Adam and torch.optim.AdamW. The update of each parameter is one
// fused pass (adam_update_, core/ops/optimizer.h). Tests:
// tests/optim/test_optimizers_golden.cpp.
#pragma once

#include <utility>

#include "optim/optimizer.h"

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // added to the gradient (L2 regularisation)
  bool amsgrad = false;
  bool maximize = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: the parameter shrinks by lr * weight_decay
  bool amsgrad = false;
  bool maximize = false;
};

namespace detail {

// What Adam and AdamW share: all but their options' defaults and the way
// weight decay applies.
template <class Options>
class AdamFamily : public OptimizerWithOptions<Options> {
 public:
  bool updates_elementwise() const override { return true; }
  bool has_momentum() const override { return true; }
  double momentum(size_t group) const override { return this->options(group).betas.first; }
  void set_momentum(size_t group, double momentum) override {
    this->set_checked(group, [momentum](Options& o) { o.betas.first = momentum; });
  }

 protected:
  void update() override;
  AdamFamily(std::string name, bool decoupled_weight_decay)
      : OptimizerWithOptions<Options>(std::move(name)), decoupled_weight_decay_(decoupled_weight_decay) {}

 private:
  void check_options(const Options& options) const override;
  nlohmann::json group_to_json(size_t group) const override;
  void group_from_json(size_t group, const nlohmann::json& json) override;
  std::vector<std::string> required_buffers(size_t group) const override;
  std::vector<std::string> buffers_ever_kept(size_t) const override {
    return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  bool counts_steps() const override { return true; }

  bool decoupled_weight_decay_;
};

extern template class AdamFamily<AdamOptions>;
extern template class AdamFamily<AdamWOptions>;

}  // namespace detail

class Adam final : public detail::AdamFamily<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);
};

class AdamW final : public detail::AdamFamily<AdamWOptions> {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups);
};

}  // namespace ember::optim
