// Lion (optim/lion.h).
#include "optim/lion.h"

#include "core/ops/creation.h"
#include "core/ops/optimizer.h"
#include "optim/json_fields.h"

namespace ember::optim {

Lion::Lion(std::vector<Tensor> params, const LionOptions& options) : OptimizerWithOptions("Lion") {
  add_default_group(std::move(params), options);
}

Lion::Lion(std::vector<ParamGroup<LionOptions>> groups) : OptimizerWithOptions("Lion") {
  add_param_groups(std::move(groups));
}

void Lion::check_options(const LionOptions& options) const {
  EMBER_CHECK(options.betas.first >= 0 && options.betas.first <= 1, "Lion: invalid beta parameter at index 0: {}",
              options.betas.first);
  EMBER_CHECK(options.betas.second >= 0 && options.betas.second <= 1, "Lion: invalid beta parameter at index 1: {}",
              options.betas.second);
  EMBER_CHECK(options.weight_decay >= 0, "Lion: invalid weight_decay {}", options.weight_decay);
}

void Lion::update() {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const LionOptions& o = options(g);
    for (size_t i = 0; i < params(g).size(); ++i) {
      const Tensor& param = params(g)[i];
      if (!param.grad().defined()) continue;
      ParamState& state = state_for(g, i);
      if (state.buffers.empty())
        state.buffers.emplace_back("exp_avg", zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()}));
      lion_update_(param, param.grad(), state.at("exp_avg"),
                   {.lr = o.lr,
                    .beta1 = o.betas.first,
                    .beta2 = o.betas.second,
                    .weight_decay = o.weight_decay,
                    .maximize = o.maximize});
    }
  }
}

nlohmann::json Lion::group_to_json(size_t group) const {
  const LionOptions& o = options(group);
  return {{"lr", o.lr},
          {"betas", {o.betas.first, o.betas.second}},
          {"weight_decay", o.weight_decay},
          {"maximize", o.maximize}};
}

void Lion::group_from_json(size_t group, const nlohmann::json& json) {
  const std::string where = fmt::format("Lion.load_state_dict: param_groups[{}]", group);
  const std::vector<double> betas = detail::number_list_field(json, "betas", where, 2);
  LionOptions o{.lr = detail::number_field(json, "lr", where),
                .betas = {betas[0], betas[1]},
                .weight_decay = detail::number_field(json, "weight_decay", where),
                .maximize = detail::bool_field(json, "maximize", where)};
  check_options(o);
  options(group) = o;
}

}  // namespace ember::optim
