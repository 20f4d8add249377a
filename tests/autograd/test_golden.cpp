// Golden gradients of composite functions (attention, layer norm,
// cross-entropy) from PyTorch, made by tests/data/make_golden_gradients.py.
// Each function is rebuilt here from ember ops; value and gradients must agree
// to f64 precision.
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <numbers>

#include "support/golden_json.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

Tensor attention(const std::vector<Tensor>& x) {
  const Tensor &q = x[0], &k = x[1], &v = x[2];
  Tensor scores = matmul(q, k.transpose(-1, -2)) / std::sqrt(double(q.size(-1)));
  return sum(matmul(softmax(scores, -1), v) * linspace(-1, 1, v.size(-1), {.dtype = DType::f64}));
}

Tensor layer_norm(const std::vector<Tensor>& x) {
  Tensor m = mean(x[0], {-1}, true);
  Tensor v = var(x[0], {-1}, false, true);
  Tensor y = (x[0] - m) / sqrt(v + 1e-5) * x[1] + x[2];
  return sum(y * y) / 3;
}

Tensor cross_entropy(const std::vector<Tensor>& x, const Tensor& targets) {
  return -mean(gather(log_softmax(x[0], -1), 1, targets.unsqueeze(1)));
}

TEST(Golden, CompositeGradientsMatchPyTorch) {
  std::ifstream file(std::string(EMBER_TEST_DATA_DIR) + "/golden_gradients.json");
  ASSERT_TRUE(file.good()) << "missing tests/data/golden_gradients.json";
  nlohmann::json golden = nlohmann::json::parse(file);
  for (const auto& c : golden["cases"]) {
    std::string name = c["name"];
    SCOPED_TRACE(name);
    std::vector<Tensor> inputs;
    for (const auto& input : c["inputs"]) {
      inputs.push_back(tensor_from(input));
      inputs.back().requires_grad_(true);
    }
    Tensor out = name == "attention"    ? attention(inputs)
                 : name == "layer_norm" ? layer_norm(inputs)
                                        : cross_entropy(inputs, tensor_from(c["extra"], DType::i64));
    out.backward();
    EXPECT_NEAR(out.item<double>(), c["output"].get<double>(), 1e-10);
    for (size_t i = 0; i < inputs.size(); ++i)
      EXPECT_TRUE(all_close(inputs[i].grad(), tensor_from(c["grads"][i]), 1e-9, 1e-10)) << "input " << i;
  }
}

}  // namespace
}  // namespace ember::testing
