// Every optimizer against PyTorch: each case of golden_optim.json (written by
// tests/data/make_golden_optim.py) is replayed step by step in f32 and f64,
// through the fast CPU kernels and through the reference ones, and the
// parameters after every step and the final state must match. Then the
// state_dict round trip: saving after 3 steps and loading into a fresh
// optimizer continues exactly as the uninterrupted run.
#include "optim/optim_golden.h"

namespace ember::testing {
namespace {

struct Training {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> optimizer;
};

Training start(const nlohmann::json& spec, DType dtype) {
  Training run{golden_initial_params(dtype), nullptr};
  run.optimizer = make_golden_optimizer(spec, run.params);
  return run;
}

void step(Training& run, size_t index, DType dtype) {
  set_golden_grads(run.params, index, dtype);
  run.optimizer->step();
}

// The parameters after `index` steps equal PyTorch's.
void expect_params(const Training& run, const nlohmann::json& expected, const std::string& what) {
  for (size_t p = 0; p < run.params.size(); ++p) {
    Tensor param = run.params[p].detach();
    const double tolerance = golden_tolerance(param.dtype());
    EXPECT_TRUE(all_close(param, golden_tensor(expected[p], param), tolerance, tolerance))
        << what << ", parameter " << p;
  }
}

// PyTorch's final state: the same buffers, values and step counts.
void expect_state(const Training& run, const nlohmann::json& expected, const std::string& what) {
  optim::OptimizerStateDict dict = run.optimizer->state_dict();
  size_t index = 0, expected_tensors = 0;
  for (size_t g = 0; g < run.optimizer->num_param_groups(); ++g) {
    for (size_t i = 0; i < run.optimizer->params(g).size(); ++i, ++index) {
      const nlohmann::json& entry = expected.at(std::to_string(index));
      const optim::ParamState* state = run.optimizer->state(g, i);
      ASSERT_NE(state, nullptr) << what << ": no state for parameter " << index;
      for (const auto& item : entry.items()) {
        if (item.key() == "step") {
          EXPECT_EQ(double(state->step), item.value().get<double>()) << what << ", parameter " << index;
          EXPECT_EQ(dict.meta["state"][std::to_string(index)]["step"], state->step);
          continue;
        }
        ++expected_tensors;
        Tensor buffer = state->find(item.key());
        ASSERT_TRUE(buffer.defined()) << what << ": parameter " << index << " has no " << item.key();
        const double tolerance = golden_tolerance(buffer.dtype());
        EXPECT_TRUE(all_close(buffer, golden_tensor(item.value(), buffer), tolerance, tolerance))
            << what << ", parameter " << index << ", " << item.key();
      }
    }
  }
  EXPECT_EQ(dict.tensors.size(), expected_tensors) << what << ": buffers PyTorch does not have";
}

class OptimizerGolden : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(OptimizerGolden, EveryStepMatchesPyTorch) {
  const DType dtype = std::get<0>(GetParam());
  const bool use_reference = std::get<1>(GetParam());
  for (const nlohmann::json& spec : golden_optim()["optimizers"]) {
    const std::string name = spec["name"];
    const nlohmann::json& expected = spec[dtype == DType::f32 ? "f32" : "f64"];
    auto replay = [&] {
      Training run = start(spec, dtype);
      for (size_t s = 0; s < expected["params"].size(); ++s) {
        step(run, s, dtype);
        expect_params(run, expected["params"][s], name + " step " + std::to_string(s + 1));
      }
      expect_state(run, expected["state"], name);
    };
    if (use_reference)
      reference(replay);
    else
      replay();
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndKernels, OptimizerGolden,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f64), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == DType::f32 ? "f32" : "f64") +
                                  (std::get<1>(info.param) ? "_reference" : "_fast");
                         });

// Saving after 3 steps and loading into a fresh optimizer over fresh copies of
// the parameters continues bit for bit as the uninterrupted run.
TEST(OptimizerStateDict, RoundTripContinuesAsTheUninterruptedRun) {
  for (const nlohmann::json& spec : golden_optim()["optimizers"]) {
    const std::string name = spec["name"];
    const nlohmann::json& expected = spec["f32"];
    Training original = start(spec, DType::f32);
    for (size_t s = 0; s < 3; ++s) step(original, s, DType::f32);

    optim::OptimizerStateDict saved = original.optimizer->state_dict();
    // What a checkpoint keeps: the tensors copied out, the JSON as text.
    for (auto& [tensor_name, tensor] : saved.tensors) tensor = tensor.clone();
    saved.meta = nlohmann::json::parse(saved.meta.dump());

    Training resumed = start(spec, DType::f32);
    for (size_t p = 0; p < resumed.params.size(); ++p) {
      NoGradGuard no_grad;
      resumed.params[p].detach().copy_(original.params[p].detach());
    }
    resumed.optimizer->load_state_dict(saved);
    for (size_t s = 3; s < expected["params"].size(); ++s) {
      step(original, s, DType::f32);
      step(resumed, s, DType::f32);
      for (size_t p = 0; p < resumed.params.size(); ++p)
        EXPECT_TRUE(all_close(resumed.params[p].detach(), original.params[p].detach(), 0, 0)) << name << " step " << s;
      expect_params(resumed, expected["params"][s], name + " resumed, step " + std::to_string(s + 1));
    }
  }
}

}  // namespace
}  // namespace ember::testing
