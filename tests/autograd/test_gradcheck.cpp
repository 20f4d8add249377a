// gradcheck for every differentiable op, driven by the GradSlot registry: a
// differentiable op without a case here fails the suite. Each case runs on
// random f64 inputs; fn may transpose, slice or broadcast them, so gradients
// of non-contiguous and broadcast inputs are checked too. The same cases
// drive gradgradcheck (test_higher_order.cpp).
#include "autograd/grad_cases.h"

namespace ember::testing {

const std::map<std::string, std::vector<GradCase>>& gradcheck_cases() {
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
      // Piecewise constant or linear: inputs kept between the jumps, so that
      // the finite differences see one piece (a in (4.1, 4.9), b in (1.305,
      // 1.345): a / b in (3.05, 3.75)).
      {"floor", {{{{6}}, [](V x) { return floor(x[0] + 2.0); }, 0.1, 0.9}}},
      {"ceil", {{{{6}}, [](V x) { return ceil(x[0] - 2.0); }, 0.1, 0.9}}},
      {"round", {{{{6}}, [](V x) { return round(x[0] + 2.0); }, 0.1, 0.4}}},
      {"trunc", {{{{6}}, [](V x) { return trunc(x[0] - 2.0); }, 0.1, 0.9}}},
      {"sign", {{{{6}}, [](V x) { return sign(x[0]); }, 0.1, 2}, {{{6}}, [](V x) { return sign(x[0]); }, -2, -0.1}}},
      {"fmod", {{{{3, 4}, {4}}, [](V x) { return fmod(x[0] + 4.0, x[1] * 0.05 + 1.3); }, 0.1, 0.9},
                {{{3, 4}, {4}}, [](V x) { return fmod(-(x[0] + 4.0), x[1] * 0.05 + 1.3); }, 0.1, 0.9}}},
      {"remainder", {{{{3, 4}, {4}}, [](V x) { return remainder(x[0] + 4.0, x[1] * 0.05 + 1.3); }, 0.1, 0.9},
                     {{{3, 4}, {4}}, [](V x) { return remainder(-(x[0] + 4.0), x[1] * 0.05 + 1.3); }, 0.1, 0.9}}},
      {"floor_divide", {{{{3, 4}, {4}}, [](V x) { return floor_divide(x[0] + 4.0, x[1] * 0.05 + 1.3); }, 0.1, 0.9}}},
      {"where", {{{{3, 4}, {4}}, [](V x) { return where(gt(x[0], 0), x[0], x[1]); }}}},
      {"to", {{{{3, 4}}, [](V x) { return clone(x[0]) * x[0]; }}}},
      // reductions
      {"sum", {{{{3, 4, 5}}, [](V x) { return sum(x[0], {0, 2}); }}, {{{3, 4}}, [](V x) { return sum(x[0].t(), {1}, true); }},
               {{{3, 4}}, [](V x) { return sum(x[0]); }}}},
      {"mean", {{{{3, 4, 5}}, [](V x) { return mean(x[0], {-1}); }}, {{{3, 4}}, [](V x) { return mean(x[0]); }}}},
      {"prod", {{{{3, 4}}, [](V x) { return prod(x[0], {1}); }},
                {{{3, 4}}, [](V x) {  // one zero in row 0, two in row 1
                   Tensor mask = from_vector<double>({0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {3, 4});
                   return prod(x[0] * mask, {1}, true);
                 }}}},
      {"amax_amin", {{{{3, 4, 2}}, [](V x) { return amax(x[0], {0, 2}); }}, {{{3, 4}}, [](V x) { return amin(x[0].t(), {0}); }},
                     {{{4}}, [](V x) { return amax(clamp_max(x[0], 0.0), {0}); }, 0.5, 2}}},  // four-way tie
      {"max_min_all", {{{{5}}, [](V x) { return max(x[0]) + min(x[0]); }},
                       {{{2, 3}}, [](V x) { return max(x[0].t()) * min(x[0]); }}}},
      {"max_min_dim", {{{{3, 4}}, [](V x) { return max(x[0], 1).values; }},
                       {{{3, 4}}, [](V x) { return min(x[0].t(), 0, true).values; }}}},
      {"var", {{{{3, 4, 5}}, [](V x) { return var(x[0], {1, 2}); }}, {{{3, 4}}, [](V x) { return var(x[0].t(), {}, false, true); }}}},
      {"std", {{{{3, 4, 5}}, [](V x) { return std(x[0], {0}); }}, {{{6}}, [](V x) { return std(x[0], {}, false); }}}},
      {"logsumexp", {{{{3, 4, 5}}, [](V x) { return logsumexp(x[0], {1}, true); }}}},
      {"norm", {{{{3, 4}}, [](V x) { return norm(x[0]); }}, {{{3, 4}}, [](V x) { return norm(x[0], 3.0, {1}); }},
                {{{3, 4}}, [](V x) { return norm(x[0].t(), INFINITY, {0}); }}, {{{3, 4}}, [](V x) { return norm(x[0], 1.0, {0}); }}}},
      {"softmax", {{{{3, 5}}, [](V x) { return softmax(x[0], 1) * x[0]; }}, {{{2, 3, 4}}, [](V x) { return softmax(x[0].transpose(0, 2), 0); }}}},
      {"log_softmax", {{{{3, 5}}, [](V x) { return log_softmax(x[0], -1) * x[0]; }}, {{{2, 3, 4}}, [](V x) { return log_softmax(x[0], 1); }}}},
      // matrix products: batch broadcasting, 1-d operands, transposed operands
      {"matmul", {{{{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
                  {{{4, 3}, {5, 4}}, [](V x) { return mm(x[0].t(), x[1].t()); }},
                  {{{2, 3, 4}, {2, 4, 2}}, [](V x) { return bmm(x[0], x[1]); }},
                  {{{3}, {2, 4}, {4, 3}}, [](V x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); }}}},
      {"addmm", {{{{3}, {2, 4}, {4, 3}}, [](V x) { return addmm(x[0], x[1], x[2]); }}}},
      // views: every kind, on non-contiguous inputs too
      {"reshape_view", {{{{3, 4}}, [](V x) { return x[0].view({2, 6}) * x[0].reshape({12}).view({2, 6}); }},
                        {{{3, 4}}, [](V x) { return x[0].t().reshape({12}).unsqueeze(0).squeeze(); }},
                        {{{2, 3, 4}}, [](V x) { return x[0].flatten(1).unflatten(1, {4, 3}); }}}},
      {"permute", {{{{2, 3, 4}}, [](V x) { return x[0].permute({2, 0, 1}) * 2.0; }}, {{{3, 4}}, [](V x) { return x[0].t(); }}}},
      {"expand", {{{{3, 1}}, [](V x) { return x[0].expand({2, 3, 4}) * 1.5; }}}},
      {"strided_view", {{{{6, 5}}, [](V x) { return x[0].slice(1, 1, 5, 2).narrow(0, 2, 3) * x[0].narrow(0, 1, 3).slice(1, 0, 2); }},
                        {{{4, 5}}, [](V x) { return x[0].t().select(0, 3); }},
                        {{{4, 4}}, [](V x) { return x[0].diagonal(1) + x[0].t().diagonal(-1); }},
                        // picked from an expanded input; as_strided with overlapping outputs
                        {{{1, 4}}, [](V x) { return x[0].expand({3, 4}).narrow(0, 1, 2).diagonal(0, 0, 1); }},
                        {{{6}}, [](V x) { return as_strided(x[0] * 1.0, {3, 3}, {1, 1}, 1) * 0.5; }}}},
      // indexing
      // split and chunk: a transposed input with an uneven last piece, an
      // unused piece (its slice of the gradient is zeros), an empty piece
      {"split", {{{{5, 3}}, [](V x) {
                    std::vector<Tensor> p = split(x[0].t(), 2, 0);  // [2, 5], [1, 5]
                    return p[0] * 2.0 + p[1] * p[1];
                  }},
                 {{{2, 3, 7}}, [](V x) {
                    std::vector<Tensor> c = chunk(x[0], 3, -1);  // [2, 3, 3] x 2, [2, 3, 1]
                    return c[0] * c[2];
                  }},
                 {{{4, 3}}, [](V x) {
                    std::vector<Tensor> p = split(x[0], std::vector<int64_t>{2, 0, 2}, 0);
                    return p[2] - p[0] * p[0] + sum(p[1]);
                  }}}},
      {"cat", {{{{2, 3}, {4, 3}, {1, 3}}, [](V x) { return cat({x[0], x[1].t().t(), x[2]}, 0); }},
               {{{2, 3}, {2, 1}}, [](V x) { return cat({x[0], x[1]}, -1); }}}},
      {"index_select", {{{{4, 3}}, [](V x) { return index_select(x[0], 0, from_vector<int64_t>({3, 0, 3, 1})); }},
                        {{{4, 3}}, [](V x) { return index_select(x[0].t(), 1, from_vector<int64_t>({2, 2})); }}}},
      {"embedding", {{{{5, 3}}, [](V x) { return embedding(from_vector<int64_t>({4, 0, 4, 2}, {2, 2}), x[0]); }}}},
      {"gather", {{{{3, 4}}, [](V x) { return gather(x[0], 1, from_vector<int64_t>({0, 3, 3, 1, 2, 0}, {3, 2})); }}}},
      {"scatter_add", {{{{3, 4}, {2, 4}}, [](V x) {
                         return scatter_add(x[0], 0, from_vector<int64_t>({0, 2, 2, 1, 0, 0, 1, 2}, {2, 4}), x[1]);
                       }},
                       // src larger than index: its rest adds nothing (gradient 0; the
                       // gathered gradient used to be reshaped to src's shape and fail)
                       {{{3, 4}, {3, 5}}, [](V x) {
                         return scatter_add(x[0], 1, from_vector<int64_t>({0, 3, 3, 1, 2, 0}, {2, 3}), x[1]);
                       }}}},
      {"masked_fill", {{{{3, 4}}, [](V x) { return masked_fill(x[0], gt(x[0], 0.5), 2.0); }}}},
      {"tril", {{{{4, 4}}, [](V x) { return tril(x[0], -1); }}}},
      {"triu", {{{{3, 5}}, [](V x) { return triu(x[0].t(), 1); }}}},
      {"repeat", {{{{2, 3}}, [](V x) { return repeat(x[0], {2, 1, 3}); }}}},
      {"pad", {{{{3, 4}}, [](V x) { return pad(x[0], {1, 2, -1, 0}, 5.0); }}}},
      // sorting: the gradient goes back through the indices
      {"sort", {{{{3, 4}}, [](V x) { return sort(x[0], 1).values; }},
                {{{4, 3}}, [](V x) { return sort(x[0].t(), 0, true).values * x[0].t(); }}}},
      {"topk", {{{{3, 5}}, [](V x) { return topk(x[0], 2).values; }},
                {{{5, 3}}, [](V x) { return topk(x[0].t(), 3, 0, false).values; }}}},
      // scans and reorderings (more, with exact zeros: tests/autograd/test_scan_grads.cpp)
      {"cumsum", {{{{3, 4}}, [](V x) { return cumsum(x[0].t(), 1) * x[0].t(); }}, {{{2, 3, 2}}, [](V x) { return cumsum(x[0], -3); }}}},
      {"cumprod", {{{{3, 4}}, [](V x) { return cumprod(x[0], 1); }}, {{{3, 4}}, [](V x) { return cumprod(x[0].t(), 0); }}}},
      {"flip", {{{{3, 4}}, [](V x) { return flip(x[0].t(), {0, 1}) * x[0].t(); }}}},
      {"roll", {{{{3, 4}}, [](V x) { return roll(x[0], {1, -2}, {0, -1}); }}, {{{3, 4}}, [](V x) { return roll(x[0].t(), 5); }}}},
      // convolution and pooling: groups, stride, padding, dilation
      {"conv2d", {{{{2, 4, 5, 5}, {6, 2, 3, 3}, {6}}, [](V x) { return conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}); }},
                  {{{1, 2, 7, 6}, {3, 2, 2, 3}}, [](V x) { return conv2d(x[0], x[1], {}, {.stride = {2, 2}, .padding = {0, 2}, .dilation = {2, 1}}); }}}},
      {"max_pool2d", {{{{2, 3, 5, 6}}, [](V x) { return max_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}}); }}}},
      {"avg_pool2d", {{{{2, 3, 5, 6}}, [](V x) { return avg_pool2d(x[0], {.kernel_size = {3, 3}, .stride = {2, 1}, .padding = {1, 1}}); }},
                      {{{1, 2, 5, 5}}, [](V x) {
                         return avg_pool2d(x[0], {.kernel_size = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
                       }}}},
      // fused attention (more: tests/core/test_attention.cpp)
      {"attention", {{{{2, 3, 4}, {2, 5, 4}, {2, 5, 3}}, [](V x) { return attention(x[0], x[1], x[2], {.scale = 0.5, .causal = true}); }},
                     {{{3, 2, 2}, {2, 3, 2}, {2, 3, 2}}, [](V x) {
                        Tensor mask = from_vector<double>({0, -1, 0.5, 2, 0, -INFINITY}, {2, 1, 3});
                        return attention(x[0].transpose(0, 1), x[1], x[2], {.scale = 1.0, .mask = mask});
                      }}}},
      // normalisation, dropout and cross-entropy (fused backward kernels)
      {"layer_norm", {{{{3, 4}, {4}, {4}}, [](V x) { return layer_norm(x[0], {4}, x[1], x[2]); }},
                      {{{2, 3, 4}}, [](V x) { return layer_norm(x[0].transpose(0, 1), {2, 4}); }},
                      {{{3, 2, 2}, {2, 2}}, [](V x) { return layer_norm(x[0], {2, 2}, x[1], {}, 0.1); }}}},
      {"rms_norm", {{{{3, 5}, {5}}, [](V x) { return rms_norm(x[0], {5}, x[1], 1e-3); }},
                    {{{2, 6}}, [](V x) { return rms_norm(x[0].t(), {2}); }}}},
      {"batch_norm", {{{{4, 3, 2}, {3}, {3}}, [](V x) { return batch_norm(x[0], {}, {}, x[1], x[2], true); }},
                      {{{3, 2, 2, 2}}, [](V x) { return batch_norm(x[0].transpose(2, 3), zeros({2}, {.dtype = DType::f64}), ones({2}, {.dtype = DType::f64}), {}, {}, true); }},
                      {{{4, 3}, {3}, {3}}, [](V x) {
                         Tensor mean = from_vector<double>({0.5, -1, 0}), var = from_vector<double>({1, 2, 0.5});
                         return batch_norm(x[0], mean, var, x[1], x[2], false);
                       }}}},
      {"dropout", {{{{5, 4}}, [](V x) { Generator g(3); return dropout(x[0].t(), 0.4, true, &g) * x[0].t(); }}}},
      {"cross_entropy", {{{{4, 5}}, [](V x) {
                            CrossEntropyOptions options{.weight = from_vector<double>({1, 2, 0.5, 1, 3}), .label_smoothing = 0.1};
                            return cross_entropy(x[0], from_vector<int64_t>({1, 0, -100, 4}), options);
                          }},
                         {{{2, 3, 4}}, [](V x) {
                            Tensor target = from_vector<int64_t>({0, 2, 1, 1, 2, 2, 0, -100}, {2, 4});
                            return cross_entropy(x[0], target, {.reduction = Reduction::none});
                          }},
                         {{{3, 2}}, [](V x) {
                            Tensor target = from_vector<double>({0.2, 0.3, 0.5, 1, 0, 0}, {2, 3});
                            return cross_entropy(x[0].t(), target, {.reduction = Reduction::sum, .label_smoothing = 0.2});
                          }},
                         {{{5}}, [](V x) { return cross_entropy(x[0], from_vector<int64_t>({3}).reshape({})); }}}},
      {"in_place", {{{{3, 4}, {4}}, [](V x) {
                      Tensor y = x[0] * 1.0;
                      y += x[1];
                      y *= 2;
                      return y;
                    }}}},
  };
  return table;
}

namespace {

TEST(Gradcheck, EveryDifferentiableOpHasPassingCases) {
  for (const GradSlot* slot : GradSlot::all()) {
    auto found = gradcheck_cases().find(std::string(slot->name()));
    if (found == gradcheck_cases().end()) {
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

namespace ember::testing {
namespace {

// The same composite in f32 and f64: f32 gradients agree with the f64 ones
// within f32 precision (the formulas do not lose accuracy in lower precision).
TEST(Gradcheck, Float32GradientsMatchFloat64) {
  Tensor x64 = random_tensor({4, 6}, DType::f64), w64 = random_tensor({6, 5}, DType::f64);
  auto grads = [&](DType dtype) {
    Tensor x = x64.to(dtype), w = w64.to(dtype);
    x.requires_grad_(true);
    w.requires_grad_(true);
    Tensor h = gelu(matmul(x, w));
    Tensor loss = sum(log_softmax(h, 1) * softmax(h * 0.5, 1)) + sum(var(h, {0}) * sum(tanh(mean(h, {1}, true))));
    loss.backward();
    return std::vector<Tensor>{x.grad().to(DType::f64), w.grad().to(DType::f64)};
  };
  std::vector<Tensor> g32 = grads(DType::f32), g64 = grads(DType::f64);
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_TRUE(all_close(g32[i], g64[i], 1e-4, 1e-5)) << "input " << i;
}

}  // namespace
}  // namespace ember::testing

namespace ember::testing {
namespace {

// stack has no node of its own: it is made of unsqueeze and cat, whose
// gradients carry it. split and chunk (one SplitBackward, cases in the table)
// are checked here composed with it.
TEST(Gradcheck, CompositeShapeOpsCarryGradients) {
  using V = const std::vector<Tensor>&;
  std::vector<Tensor> inputs = {random_tensor({2, 3}, DType::f64), random_tensor({2, 3}, DType::f64)};
  auto stacked = autograd::gradcheck([](V x) { return stack({x[0], x[1].t().t()}, 1) * 2.0; }, inputs);
  EXPECT_TRUE(stacked.ok) << stacked.report;
  auto pieces = autograd::gradcheck([](V x) {
    std::vector<Tensor> parts = split(x[0], 1, 1);
    std::vector<Tensor> halves = chunk(x[1], 2, 0);
    return parts[2] * halves[1] + parts[0];  // [2, 1] x [1, 3] + [2, 1]
  }, inputs);
  EXPECT_TRUE(pieces.ok) << pieces.report;
}

// A NaN gradient fails gradcheck even where the finite differences are NaN
// too (sqrt of negative numbers is NaN both ways). Catches the comparison
// that let every NaN pass: `error > worst` is false for a NaN error.
TEST(Gradcheck, NanGradientsFail) {
  using V = const std::vector<Tensor>&;
  auto result = autograd::gradcheck([](V x) { return sqrt(x[0]); }, {full({3}, Scalar(-1.0), {.dtype = DType::f64})});
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.report.find("nan"), std::string::npos) << result.report;  // "analytic -nan, numeric -nan"
}

}  // namespace
}  // namespace ember::testing
