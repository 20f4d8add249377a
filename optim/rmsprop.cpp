// RMSprop (optim/rmsprop.h). Its state holds, in PyTorch's order, step,
// square_avg, momentum_buffer (momentum > 0) and grad_avg (centered).
#include "optim/rmsprop.h"

#include "core/ops/creation.h"
#include "core/ops/optimizer.h"
#include "optim/json_fields.h"

namespace ember::optim {

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options) : OptimizerWithOptions("RMSprop") {
  add_default_group(std::move(params), options);
}

RMSprop::RMSprop(std::vector<ParamGroup<RMSpropOptions>> groups) : OptimizerWithOptions("RMSprop") {
  add_param_groups(std::move(groups));
}

void RMSprop::check_options(const RMSpropOptions& options) const {
  EMBER_CHECK(options.eps >= 0, "RMSprop: invalid epsilon {}", options.eps);
  EMBER_CHECK(options.momentum >= 0, "RMSprop: invalid momentum {}", options.momentum);
  EMBER_CHECK(options.weight_decay >= 0, "RMSprop: invalid weight_decay {}", options.weight_decay);
  EMBER_CHECK(options.alpha >= 0, "RMSprop: invalid alpha {}", options.alpha);
}

std::vector<std::string> RMSprop::required_buffers(size_t group) const {
  std::vector<std::string> names = {"square_avg"};
  if (options(group).momentum > 0) names.push_back("momentum_buffer");
  if (options(group).centered) names.push_back("grad_avg");
  return names;
}

void RMSprop::update() {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const RMSpropOptions& o = options(g);
    for (size_t i = 0; i < params(g).size(); ++i) {
      const Tensor& param = params(g)[i];
      if (!param.grad().defined()) continue;
      ParamState& state = state_for(g, i);
      // Buffers a changed option now needs start at zero, as PyTorch's do on the first step.
      for (const std::string& name : required_buffers(g))
        if (!state.find(name).defined())
          state.buffers.emplace_back(name, zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()}));
      ++state.step;
      rmsprop_update_(param, param.grad(), state.at("square_avg"), o.centered ? state.at("grad_avg") : Tensor(),
                      o.momentum > 0 ? state.at("momentum_buffer") : Tensor(),
                      {.lr = o.lr,
                       .alpha = o.alpha,
                       .eps = o.eps,
                       .weight_decay = o.weight_decay,
                       .momentum = o.momentum,
                       .centered = o.centered,
                       .maximize = o.maximize});
    }
  }
}

nlohmann::json RMSprop::group_to_json(size_t group) const {
  const RMSpropOptions& o = options(group);
  return {{"lr", o.lr},         {"momentum", o.momentum}, {"alpha", o.alpha},
          {"eps", o.eps},       {"centered", o.centered}, {"weight_decay", o.weight_decay},
          {"foreach", nullptr}, {"maximize", o.maximize}, {"differentiable", false}};
}

void RMSprop::group_from_json(size_t group, const nlohmann::json& json) {
  const std::string where = fmt::format("RMSprop.load_state_dict: param_groups[{}]", group);
  RMSpropOptions o{.lr = detail::number_field(json, "lr", where),
                   .alpha = detail::number_field(json, "alpha", where),
                   .eps = detail::number_field(json, "eps", where),
                   .weight_decay = detail::number_field(json, "weight_decay", where),
                   .momentum = detail::number_field(json, "momentum", where),
                   .centered = detail::bool_field(json, "centered", where),
                   .maximize = detail::bool_field(json, "maximize", where)};
  check_options(o);
  options(group) = o;
}

}  // namespace ember::optim
