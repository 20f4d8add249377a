// gradcheck for every differentiable op, driven by the GradSlot registry: a
// differentiable op without a case here fails the suite. Each case runs on
// random f64 inputs; fn may transpose, slice or broadcast them, so gradients
// of non-contiguous and broadcast inputs are checked too.
#include <map>

#include "support/test_support.h"

namespace ember::testing {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
struct GradCase {
  std::vector<Shape> shapes;  // one random input per shape
  Fn fn;
  double lo = -2, hi = 2;     // the inputs' range (keep log/sqrt positive)
};

const std::map<std::string, std::vector<GradCase>>& cases() {
  using V = const std::vector<Tensor>&;
  static const std::map<std::string, std::vector<GradCase>> table = {
      // element-wise: broadcast shapes and a transposed operand
      {"add", {{{{3, 4}, {4}}, [](V x) { return x[0] + x[1]; }}, {{{4, 3}, {4, 1}}, [](V x) { return x[0].t() + x[1].t(); }}}},
      {"sub", {{{{3, 4}, {3, 1}}, [](V x) { return x[0] - x[1]; }}}},
      {"mul", {{{{2, 3, 4}, {3, 1}}, [](V x) { return x[0] * x[1]; }}, {{{3}}, [](V x) { return x[0] * 2.5; }}}},
      {"addcmul", {{{{3, 4}, {4}, {3, 1}}, [](V x) { return addcmul(x[0], x[1], x[2], 0.5); }},
                   {{{4}, {2, 1, 4}, {3, 4}}, [](V x) { return addcmul(x[0], x[1], x[2]); }}}},
      {"div", {{{{3, 4}, {4}}, [](V x) { return x[0] / x[1]; }, 0.5, 2}, {{{3}}, [](V x) { return 1.5 / x[0]; }, 0.5, 2}}},
      {"neg", {{{{5}}, [](V x) { return -x[0]; }}}},
      {"abs", {{{{6}}, [](V x) { return abs(x[0]); }, 0.1, 2}, {{{6}}, [](V x) { return abs(x[0]); }, -2, -0.1}}},
      {"exp", {{{{3, 4}}, [](V x) { return exp(x[0].t()); }}}},
      {"log", {{{{3, 4}}, [](V x) { return log(x[0]); }, 0.5, 3}}},
      {"log1p", {{{{3, 4}}, [](V x) { return log1p(x[0]); }, 0, 3}}},
      {"sqrt", {{{{7}}, [](V x) { return sqrt(x[0]); }, 0.5, 3}}},
      {"rsqrt", {{{{7}}, [](V x) { return rsqrt(x[0]); }, 0.5, 3}}},
      {"sin", {{{{7}}, [](V x) { return sin(x[0]); }}}},
      {"cos", {{{{7}}, [](V x) { return cos(x[0]); }}}},
      {"tanh", {{{{7}}, [](V x) { return tanh(x[0]); }}}},
      {"erf", {{{{7}}, [](V x) { return erf(x[0]); }}}},
      {"sigmoid", {{{{7}}, [](V x) { return sigmoid(x[0]); }}}},
      {"relu", {{{{8}}, [](V x) { return relu(x[0]); }}}},
      {"gelu", {{{{8}}, [](V x) { return gelu(x[0]); }}}},
      {"gelu_tanh", {{{{8}}, [](V x) { return gelu(x[0], GeluApproximation::tanh); }}}},
      {"silu", {{{{8}}, [](V x) { return silu(x[0]); }}}},
      {"pow_scalar", {{{{6}}, [](V x) { return pow(x[0], 3); }}, {{{6}}, [](V x) { return pow(x[0], 0.5); }, 0.5, 2}}},
      {"pow", {{{{2, 3}, {3}}, [](V x) { return pow(x[0], x[1]); }, 0.5, 2}}},
      {"maximum", {{{{3, 4}, {4}}, [](V x) { return maximum(x[0], x[1]); }}}},
      {"minimum", {{{{3, 4}, {4}}, [](V x) { return minimum(x[0], x[1]); }}}},
      {"clamp", {{{{9}}, [](V x) { return clamp(x[0], -1, 1); }}, {{{9}}, [](V x) { return clamp_min(x[0], 0.3); }}}},
      {"where", {{{{3, 4}, {4}}, [](V x) { return where(gt(x[0], 0), x[0], x[1]); }}}},
      {"to", {{{{3, 4}}, [](V x) { return clone(x[0]) * x[0]; }}}},
      // reductions
      {"sum", {{{{3, 4, 5}}, [](V x) { return sum(x[0], {0, 2}); }}, {{{3, 4}}, [](V x) { return sum(x[0].t(), {1}, true); }},
               {{{3, 4}}, [](V x) { return sum(x[0]); }}}},
      {"mean", {{{{3, 4, 5}}, [](V x) { return mean(x[0], {-1}); }}, {{{3, 4}}, [](V x) { return mean(x[0]); }}}},
      // matrix products: batch broadcasting, 1-d operands, transposed operands
      {"matmul", {{{{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4, 3}, {5, 4}}, [](V x) { return mm(x[0].t(), x[1].t()); }},
                  {{{2, 3, 4}, {2, 4, 2}}, [](V x) { return bmm(x[0], x[1]); }},
                  {{{3}, {2, 4}, {4, 3}}, [](V x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); }}}},
      {"addmm", {{{{3}, {2, 4}, {4, 3}}, [](V x) { return addmm(x[0], x[1], x[2]); }}}},
      {"in_place", {{{{3, 4}, {4}}, [](V x) {
                      Tensor y = x[0] * 1.0;
                      y += x[1];
                      y *= 2;
                      return y;
                    }}}},
  };
  return table;
}

TEST(Gradcheck, EveryDifferentiableOpHasPassingCases) {
  for (const GradSlot* slot : GradSlot::all()) {
    auto found = cases().find(std::string(slot->name()));
    if (found == cases().end()) {
      ADD_FAILURE() << "differentiable op '" << slot->name() << "' has no gradcheck case in " << __FILE__;
      continue;
    }
    SCOPED_TRACE(std::string(slot->name()));
    ASSERT_TRUE(slot->has_recorder()) << slot->name() << " has no gradient";
    for (const GradCase& c : found->second) {
      std::vector<Tensor> inputs;
      for (const Shape& shape : c.shapes) inputs.push_back(random_tensor(shape, DType::f64, c.lo, c.hi));
      try {
        autograd::GradcheckResult result = autograd::gradcheck(c.fn, inputs);
        EXPECT_TRUE(result.ok) << slot->name() << ": " << result.report;
      } catch (const Error& e) {
        ADD_FAILURE() << slot->name() << ": " << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace ember::testing
