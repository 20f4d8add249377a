// The optim tests' golden file and optimizer factory (optim_golden.h).
#include "optim/optim_golden.h"

#include <fstream>

namespace ember::testing {

const nlohmann::json& golden_optim() {
  static const nlohmann::json golden = [] {
    std::ifstream file(std::string(EMBER_TEST_DATA_DIR) + "/golden_optim.json");
    EXPECT_TRUE(file.good()) << "missing tests/data/golden_optim.json: run tests/data/make_golden_optim.py";
    return nlohmann::json::parse(file);
  }();
  return golden;
}

Tensor golden_tensor(const nlohmann::json& values, const Tensor& like) {
  return from_vector(values.get<std::vector<double>>()).reshape(like.shape()).to(like.dtype());
}

std::vector<Tensor> golden_initial_params(DType dtype) {
  const nlohmann::json& golden = golden_optim();
  std::vector<Tensor> params;
  for (size_t i = 0; i < golden["shapes"].size(); ++i) {
    Shape shape;
    for (int64_t size : golden["shapes"][i].get<std::vector<int64_t>>()) shape.push_back(size);
    Tensor param = from_vector(golden["initial_params"][i].get<std::vector<double>>()).reshape(shape).to(dtype);
    param.requires_grad_(true);
    params.push_back(param);
  }
  return params;
}

void set_golden_grads(const std::vector<Tensor>& params, size_t step, DType dtype) {
  const nlohmann::json& grads = golden_optim()["grads"][step];
  for (size_t i = 0; i < params.size(); ++i) {
    if (grads[i].is_null())
      params[i].set_grad(Tensor());
    else
      params[i].set_grad(golden_tensor(grads[i], params[i].detach()).to(dtype));
  }
}

namespace {

template <class Options, class Make>
std::vector<optim::ParamGroup<Options>> groups_of(const nlohmann::json& spec, const std::vector<Tensor>& params,
                                                  Make make_options) {
  std::vector<optim::ParamGroup<Options>> groups;
  for (const nlohmann::json& group : spec["groups"]) {
    std::vector<Tensor> members;
    for (size_t index : group["params"].get<std::vector<size_t>>()) members.push_back(params[index]);
    groups.push_back({members, make_options(group["options"])});
  }
  return groups;
}

std::pair<double, double> betas_of(const nlohmann::json& options, std::pair<double, double> fallback) {
  if (!options.contains("betas")) return fallback;
  return {options["betas"][0].get<double>(), options["betas"][1].get<double>()};
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_golden_optimizer(const nlohmann::json& spec, const std::vector<Tensor>& params) {
  const std::string kind = spec["optimizer"];
  if (kind == "SGD") {
    return std::make_unique<optim::SGD>(groups_of<optim::SGDOptions>(spec, params, [](const nlohmann::json& o) {
      optim::SGDOptions d;
      return optim::SGDOptions{.lr = o.value("lr", d.lr),
                               .momentum = o.value("momentum", d.momentum),
                               .dampening = o.value("dampening", d.dampening),
                               .weight_decay = o.value("weight_decay", d.weight_decay),
                               .nesterov = o.value("nesterov", d.nesterov),
                               .maximize = o.value("maximize", d.maximize)};
    }));
  }
  if (kind == "Adam") {
    return std::make_unique<optim::Adam>(groups_of<optim::AdamOptions>(spec, params, [](const nlohmann::json& o) {
      optim::AdamOptions d;
      return optim::AdamOptions{.lr = o.value("lr", d.lr),
                                .betas = betas_of(o, d.betas),
                                .eps = o.value("eps", d.eps),
                                .weight_decay = o.value("weight_decay", d.weight_decay),
                                .amsgrad = o.value("amsgrad", d.amsgrad),
                                .maximize = o.value("maximize", d.maximize)};
    }));
  }
  if (kind == "AdamW") {
    return std::make_unique<optim::AdamW>(groups_of<optim::AdamWOptions>(spec, params, [](const nlohmann::json& o) {
      optim::AdamWOptions d;
      return optim::AdamWOptions{.lr = o.value("lr", d.lr),
                                 .betas = betas_of(o, d.betas),
                                 .eps = o.value("eps", d.eps),
                                 .weight_decay = o.value("weight_decay", d.weight_decay),
                                 .amsgrad = o.value("amsgrad", d.amsgrad),
                                 .maximize = o.value("maximize", d.maximize)};
    }));
  }
  if (kind == "RMSprop") {
    return std::make_unique<optim::RMSprop>(groups_of<optim::RMSpropOptions>(spec, params, [](const nlohmann::json& o) {
      optim::RMSpropOptions d;
      return optim::RMSpropOptions{.lr = o.value("lr", d.lr),
                                   .alpha = o.value("alpha", d.alpha),
                                   .eps = o.value("eps", d.eps),
                                   .weight_decay = o.value("weight_decay", d.weight_decay),
                                   .momentum = o.value("momentum", d.momentum),
                                   .centered = o.value("centered", d.centered),
                                   .maximize = o.value("maximize", d.maximize)};
    }));
  }
  if (kind == "Adagrad") {
    return std::make_unique<optim::Adagrad>(groups_of<optim::AdagradOptions>(spec, params, [](const nlohmann::json& o) {
      optim::AdagradOptions d;
      return optim::AdagradOptions{
          .lr = o.value("lr", d.lr),
          .lr_decay = o.value("lr_decay", d.lr_decay),
          .weight_decay = o.value("weight_decay", d.weight_decay),
          .initial_accumulator_value = o.value("initial_accumulator_value", d.initial_accumulator_value),
          .eps = o.value("eps", d.eps),
          .maximize = o.value("maximize", d.maximize)};
    }));
  }
  EXPECT_EQ(kind, "Lion");
  return std::make_unique<optim::Lion>(groups_of<optim::LionOptions>(spec, params, [](const nlohmann::json& o) {
    optim::LionOptions d;
    return optim::LionOptions{.lr = o.value("lr", d.lr),
                              .betas = betas_of(o, d.betas),
                              .weight_decay = o.value("weight_decay", d.weight_decay),
                              .maximize = o.value("maximize", d.maximize)};
  }));
}

}  // namespace ember::testing
