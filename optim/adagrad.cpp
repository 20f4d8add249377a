// Adagrad (optim/adagrad.h). As in PyTorch, the constructor gives every
// parameter its state (step 0, sum = initial_accumulator_value), so the
// state dict lists parameters that have not been updated yet.
#include "optim/adagrad.h"

#include "core/ops/creation.h"
#include "core/ops/optimizer.h"
#include "optim/json_fields.h"

namespace ember::optim {

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& options) : OptimizerWithOptions("Adagrad") {
  add_default_group(std::move(params), options);
  initialize_state(0, 0);
}

Adagrad::Adagrad(std::vector<ParamGroup<AdagradOptions>> groups) : OptimizerWithOptions("Adagrad") {
  add_param_groups(std::move(groups));
  initialize_state(0, 0);
}

// Gives every parameter from (group, index) on its state.
void Adagrad::initialize_state(size_t group, size_t index) {
  for (size_t g = group; g < num_param_groups(); ++g) {
    for (size_t i = g == group ? index : 0; i < params(g).size(); ++i) {
      if (state(g, i)) continue;
      const Tensor& param = params(g)[i];
      state_for(g, i).buffers.emplace_back("sum", full(param.shape(), options(g).initial_accumulator_value,
                                                       {.dtype = param.dtype(), .device = param.device()}));
    }
  }
}

void Adagrad::check_options(const AdagradOptions& options) const {
  EMBER_CHECK(options.lr_decay >= 0, "Adagrad: invalid lr_decay {}", options.lr_decay);
  EMBER_CHECK(options.weight_decay >= 0, "Adagrad: invalid weight_decay {}", options.weight_decay);
  EMBER_CHECK(options.initial_accumulator_value >= 0, "Adagrad: invalid initial_accumulator_value {}",
              options.initial_accumulator_value);
  EMBER_CHECK(options.eps >= 0, "Adagrad: invalid epsilon {}", options.eps);
}

void Adagrad::update() {
  initialize_state(0, 0);  // groups added after construction
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const AdagradOptions& o = options(g);
    for (size_t i = 0; i < params(g).size(); ++i) {
      const Tensor& param = params(g)[i];
      if (!param.grad().defined()) continue;
      ParamState& state = state_for(g, i);
      ++state.step;
      adagrad_update_(param, param.grad(), state.at("sum"),
                      {.lr = o.lr,
                       .lr_decay = o.lr_decay,
                       .weight_decay = o.weight_decay,
                       .eps = o.eps,
                       .maximize = o.maximize,
                       .step = state.step});
    }
  }
}

nlohmann::json Adagrad::group_to_json(size_t group) const {
  const AdagradOptions& o = options(group);
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"foreach", nullptr},
          {"maximize", o.maximize}};
}

void Adagrad::group_from_json(size_t group, const nlohmann::json& json) {
  const std::string where = fmt::format("Adagrad.load_state_dict: param_groups[{}]", group);
  AdagradOptions o{.lr = detail::number_field(json, "lr", where),
                   .lr_decay = detail::number_field(json, "lr_decay", where),
                   .weight_decay = detail::number_field(json, "weight_decay", where),
                   .initial_accumulator_value = detail::number_field(json, "initial_accumulator_value", where),
                   .eps = detail::number_field(json, "eps", where),
                   .maximize = detail::bool_field(json, "maximize", where)};
  check_options(o);
  options(group) = o;
}

}  // namespace ember::optim
