// SGD (optim/sgd.h): the momentum buffer starts as the first step's gradient,
// as in PyTorch, so it is created on that step rather than zeroed.
#include "optim/sgd.h"

#include "core/ops/creation.h"
#include "core/ops/optimizer.h"
#include "optim/json_fields.h"

namespace ember::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) : OptimizerWithOptions("SGD") {
  add_default_group(std::move(params), options);
}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : OptimizerWithOptions("SGD") {
  add_param_groups(std::move(groups));
}

void SGD::check_options(const SGDOptions& options) const {
  EMBER_CHECK(options.momentum >= 0, "SGD: invalid momentum {}", options.momentum);
  EMBER_CHECK(options.weight_decay >= 0, "SGD: invalid weight_decay {}", options.weight_decay);
  EMBER_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
              "SGD: nesterov momentum requires a momentum and zero dampening (momentum {}, dampening {})",
              options.momentum, options.dampening);
}

void SGD::update() {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const SGDOptions& o = options(g);
    for (size_t i = 0; i < params(g).size(); ++i) {
      const Tensor& param = params(g)[i];
      if (!param.grad().defined()) continue;
      ParamState& state = state_for(g, i);
      Tensor buffer = state.find("momentum_buffer");
      const bool first_step = o.momentum != 0 && !buffer.defined();
      if (first_step) {
        buffer = empty(param.shape(), {.dtype = param.dtype(), .device = param.device()});
        state.buffers.emplace_back("momentum_buffer", buffer);
      }
      sgd_update_(param, param.grad(), o.momentum != 0 ? buffer : Tensor(),
                  {.lr = o.lr,
                   .momentum = o.momentum,
                   .dampening = o.dampening,
                   .weight_decay = o.weight_decay,
                   .nesterov = o.nesterov,
                   .maximize = o.maximize,
                   .first_step = first_step});
    }
  }
}

nlohmann::json SGD::group_to_json(size_t group) const {
  const SGDOptions& o = options(group);
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov},
          {"maximize", o.maximize},
          {"foreach", nullptr},
          {"differentiable", false}};
}

void SGD::group_from_json(size_t group, const nlohmann::json& json) {
  const std::string where = fmt::format("SGD.load_state_dict: param_groups[{}]", group);
  SGDOptions o{.lr = detail::number_field(json, "lr", where),
               .momentum = detail::number_field(json, "momentum", where),
               .dampening = detail::number_field(json, "dampening", where),
               .weight_decay = detail::number_field(json, "weight_decay", where),
               .nesterov = detail::bool_field(json, "nesterov", where),
               .maximize = detail::bool_field(json, "maximize", where)};
  check_options(o);
  options(group) = o;
}

}  // namespace ember::optim
