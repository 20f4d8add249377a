// Gradients of the scan and reorder ops and of the composites einsum and
// repeat_interleave: exact hand cases for cumprod through zeros (one, two,
// leading, in several slices), gradcheck (f64 finite differences) on inputs
// that hold exact zeros, along every dim, on non-contiguous inputs, and for
// every einsum equation of tests/core/test_einsum.cpp's common list.
#include "support/test_support.h"
#include "autograd/leaf.h"

namespace ember::testing {
namespace {

std::vector<double> gradient_of_sum(const Tensor& out, const Tensor& x) {
  return autograd::grad({sum(out)}, {x})[0].contiguous().to_vector<double>();
}

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  autograd::GradcheckResult result = autograd::gradcheck(fn, inputs);
  EXPECT_TRUE(result.ok) << result.report;
}

TEST(ScanGrads, CumprodThroughZerosHandCases) {
  // dx_k = sum over j >= k of the product of x_0..x_j without x_k.
  Tensor one_zero = leaf({2, 0, 3, 4}, {4});
  EXPECT_EQ(gradient_of_sum(cumprod(one_zero, 0), one_zero), (std::vector<double>{1, 2 + 6 + 24, 0, 0}));
  Tensor two_zeros = leaf({0, 2, 0, 3}, {4});
  EXPECT_EQ(gradient_of_sum(cumprod(two_zeros, 0), two_zeros), (std::vector<double>{1 + 2, 0, 0, 0}));
  Tensor no_zero = leaf({2, 3, 4}, {3});
  EXPECT_EQ(gradient_of_sum(cumprod(no_zero, 0), no_zero), (std::vector<double>{1 + 3 + 12, 2 + 8, 6}));
  // Zeros in some slices only, along dim 0 of a matrix.
  Tensor slices = leaf({1, 0, 2, 3, 5, 0}, {3, 2});
  EXPECT_EQ(gradient_of_sum(cumprod(slices, 0), slices), (std::vector<double>{1 + 2 + 10, 1 + 3, 1 + 5, 0, 1 * 2, 0}));
}

// The case analysis of the first derivative is right in value, not in its own
// derivative: past the first zero it is the constant 0, whose derivative by
// that zero is not 0 (x = [0, 2]: d(dx_1)/dx_0 = 1, which came out 0). A double
// backward through a zero takes the gradient's definition (PyTorch's
// cumprod_backward under grad mode). Mutation caught: the recorder without
// its grad-mode branch (gradgradcheck fails, the hand case gives [0, 0]).
TEST(ScanGrads, CumprodSecondDerivativeThroughZeros) {
  Tensor x = leaf({0, 2}, {2});
  Tensor gx = autograd::grad({sum(cumprod(x, 0))}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  EXPECT_EQ(gx.to_vector<double>(), (std::vector<double>{3, 0}));
  EXPECT_EQ(autograd::grad({gx.select(0, 1)}, {x})[0].to_vector<double>(), (std::vector<double>{1, 0}));
  Tensor zeros_in_rows = from_vector<double>({1, 0, 2, 3, 0, 0, 1, 2, 2, 3, 4, 0}, {3, 4});
  for (int64_t dim : {1, -2}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckResult result =
        autograd::gradgradcheck([dim](const std::vector<Tensor>& v) { return cumprod(v[0], dim); }, {zeros_in_rows});
    EXPECT_TRUE(result.ok) << result.report;
  }
}

TEST(ScanGrads, CumsumHandCaseAndDtypeArgument) {
  Tensor x = leaf({1, 2, 3}, {3});
  EXPECT_EQ(gradient_of_sum(cumsum(x, 0), x), (std::vector<double>{3, 2, 1}));
  Tensor f32 = from_vector<float>({1, 2, 3});
  f32.requires_grad_(true);
  Tensor g = autograd::grad({sum(cumsum(f32, 0, DType::f64))}, {f32})[0];
  EXPECT_EQ(g.dtype(), DType::f32);  // the gradient comes back in the input's dtype
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{3, 2, 1}));
}

TEST(ScanGrads, GradcheckWithExactZerosAlongEveryDim) {
  // Finite differences move each zero off zero and back: the k == z case is checked for real.
  Tensor x = from_vector<double>({0, 1.5, -0.5, 2, 0, 0, 0.7, -1.2, 1.1, 0, 0.3, 0.9}, {3, 4});
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    expect_gradcheck([dim](const std::vector<Tensor>& v) { return cumprod(v[0], dim); }, {x});
    expect_gradcheck([dim](const std::vector<Tensor>& v) { return cumprod(v[0].t(), dim); }, {x});
    expect_gradcheck([dim](const std::vector<Tensor>& v) { return cumsum(v[0].t(), dim) * v[0].t(); }, {x});
  }
  expect_gradcheck([](const std::vector<Tensor>& v) { return cumprod(v[0], 0); }, {from_vector<double>({0, 0, 0})});
  expect_gradcheck([](const std::vector<Tensor>& v) { return cumprod(v[0], 0); }, {from_vector<double>({0.5})});
}

TEST(ScanGrads, FlipRollAndRepeatInterleaveGradcheck) {
  Tensor x = random_tensor({3, 4, 2}, DType::f64);
  expect_gradcheck([](const std::vector<Tensor>& v) { return flip(v[0].transpose(0, 2), {0, -1}) * v[0].transpose(0, 2); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& v) { return roll(v[0], {2, -1, 1}, {1, 0, 1}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& v) { return roll(v[0].transpose(0, 1), 5) * v[0].transpose(0, 1); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& v) { return repeat_interleave(v[0], 3, 1); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& v) { return repeat_interleave(v[0].transpose(1, 2), 2); }, {x});
  Tensor counts = from_vector<int64_t>({2, 0, 1, 3});
  expect_gradcheck([counts](const std::vector<Tensor>& v) { return repeat_interleave(v[0], counts, -2); }, {x});
}

TEST(ScanGrads, EinsumGradcheckForTheCommonEquations) {
  struct Case {
    const char* equation;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 2}}},           {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 2}}},
      {"ii->i", {{3, 3}}},                       {"ij->ji", {{2, 3}}},
      {"i,i->", {{4}, {4}}},                     {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 2, 4}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}}, {"ii", {{3, 3}}},
      {"ij,kj", {{2, 3}, {4, 3}}},               {"abc,cd,db->a", {{2, 3, 4}, {4, 2}, {2, 3}}},
      {"i,j->ij", {{3}, {2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    std::vector<Tensor> inputs;
    for (const Shape& shape : c.shapes) inputs.push_back(random_tensor(shape, DType::f64));
    std::string equation = c.equation;
    expect_gradcheck([equation](const std::vector<Tensor>& v) { return einsum(equation, v); }, inputs);
  }
  // A transposed operand.
  expect_gradcheck([](const std::vector<Tensor>& v) { return einsum("ij,jk->ik", {v[0].t(), v[1]}); },
                   {random_tensor({4, 3}, DType::f64), random_tensor({4, 2}, DType::f64)});
}

}  // namespace
}  // namespace ember::testing
