// Adam and AdamW (optim/adam.h). The step count is per parameter and counted
// before the update, so the first update uses step 1 (PyTorch's state["step"]).
#include "optim/adam.h"

#include "core/ops/creation.h"
#include "core/ops/optimizer.h"
#include "optim/json_fields.h"

namespace ember::optim {
namespace detail {

template <class Options>
void AdamFamily<Options>::check_options(const Options& options) const {
  const std::string& name = this->name();
  EMBER_CHECK(options.eps >= 0, "{}: invalid epsilon {}", name, options.eps);
  EMBER_CHECK(options.betas.first >= 0 && options.betas.first < 1, "{}: invalid beta parameter at index 0: {}", name,
              options.betas.first);
  EMBER_CHECK(options.betas.second >= 0 && options.betas.second < 1, "{}: invalid beta parameter at index 1: {}", name,
              options.betas.second);
  EMBER_CHECK(options.weight_decay >= 0, "{}: invalid weight_decay {}", name, options.weight_decay);
}

template <class Options>
void AdamFamily<Options>::update() {
  for (size_t g = 0; g < this->num_param_groups(); ++g) {
    const Options& o = this->options(g);
    for (size_t i = 0; i < this->params(g).size(); ++i) {
      const Tensor& param = this->params(g)[i];
      if (!param.grad().defined()) continue;
      ParamState& state = this->state_for(g, i);
      if (state.buffers.empty()) {
        for (const std::string& name : required_buffers(g))
          state.buffers.emplace_back(name, zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()}));
      }
      if (o.amsgrad && !state.find("max_exp_avg_sq").defined())
        state.buffers.emplace_back("max_exp_avg_sq",
                                   zeros(param.shape(), {.dtype = param.dtype(), .device = param.device()}));
      ++state.step;
      adam_update_(param, param.grad(), state.at("exp_avg"), state.at("exp_avg_sq"),
                   o.amsgrad ? state.at("max_exp_avg_sq") : Tensor(),
                   {.lr = o.lr,
                    .beta1 = o.betas.first,
                    .beta2 = o.betas.second,
                    .eps = o.eps,
                    .weight_decay = o.weight_decay,
                    .decoupled_weight_decay = decoupled_weight_decay_,
                    .amsgrad = o.amsgrad,
                    .maximize = o.maximize,
                    .step = state.step});
    }
  }
}

template <class Options>
std::vector<std::string> AdamFamily<Options>::required_buffers(size_t group) const {
  if (this->options(group).amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

template <class Options>
nlohmann::json AdamFamily<Options>::group_to_json(size_t group) const {
  const Options& o = this->options(group);
  return {{"lr", o.lr},
          {"betas", {o.betas.first, o.betas.second}},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad},
          {"maximize", o.maximize},
          {"foreach", nullptr},
          {"capturable", false},
          {"differentiable", false},
          {"fused", false}};
}

template <class Options>
void AdamFamily<Options>::group_from_json(size_t group, const nlohmann::json& json) {
  const std::string where = fmt::format("{}.load_state_dict: param_groups[{}]", this->name(), group);
  const std::vector<double> betas = number_list_field(json, "betas", where, 2);
  Options o{.lr = number_field(json, "lr", where),
            .betas = {betas[0], betas[1]},
            .eps = number_field(json, "eps", where),
            .weight_decay = number_field(json, "weight_decay", where),
            .amsgrad = bool_field(json, "amsgrad", where),
            .maximize = bool_field(json, "maximize", where)};
  check_options(o);
  this->options(group) = o;
}

template class AdamFamily<AdamOptions>;
template class AdamFamily<AdamWOptions>;

}  // namespace detail

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : AdamFamily("Adam", false) {
  add_default_group(std::move(params), options);
}
Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) : AdamFamily("Adam", false) {
  add_param_groups(std::move(groups));
}
AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options) : AdamFamily("AdamW", true) {
  add_default_group(std::move(params), options);
}
AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups) : AdamFamily("AdamW", true) {
  add_param_groups(std::move(groups));
}

}  // namespace ember::optim
