// Tests generated from the dispatch table. For every op the program declares:
//  1. every dtype with a reference kernel has an optimized CPU kernel too, or
//     is on kReferenceOnly below with the reason;
//  2. the op has a case in kCases, and that case, run on random inputs of every
//     dtype the op supports, matches the reference kernels.
// A new op without a case here fails the suite. The family test files go
// deeper (layouts, broadcasting, exact values, errors); this is the net.
#include <functional>
#include <map>
#include <set>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// (op, dtype) pairs served only by the reference kernels, with the reason.
const std::map<std::pair<std::string, DType>, std::string> kReferenceOnly = {
    {{"conv2d_backward_input", DType::f64}, "f64 gradients are gradcheck-sized: the direct loops serve"},
    {{"conv2d_backward_weight", DType::f64}, "f64 gradients are gradcheck-sized: the direct loops serve"},
    {{"conv2d_backward", DType::f64}, "f64 gradients are gradcheck-sized: the direct loops serve"},
};

// Ops whose outputs are sums of many rounded terms of about the size of the
// largest output: in bf16 and f16 an output's error is a fraction of that
// largest output, not of the output itself, so both the fast kernels and the
// reference sit that far from the exact value (an attention key gradient of
// 0.053 came out 0.039 fast and 0.061 reference, next to outputs of 0.8).
// Their absolute tolerance is scaled by the largest expected magnitude.
const std::set<std::string> kScaledAbsoluteTolerance = {"attention_backward"};

// A case builds random inputs of `dtype` and returns the computation to run
// twice: once with the fast kernels, once with the reference ones.
using Case = std::function<std::function<Tensor()>(DType)>;

Case binary(Tensor (*fn)(const Tensor&, const Tensor&), double lo = -2, double hi = 2) {
  return [=](DType dtype) {
    Tensor a = random_tensor({17, 9}, dtype, lo, hi), b = random_tensor({9}, dtype, lo, hi);
    return [=] { return fn(a.t().contiguous().t(), b); };
  };
}

Case unary(Tensor (*fn)(const Tensor&), double lo = -2, double hi = 2) {
  return [=](DType dtype) {
    Tensor a = random_tensor({13, 21}, dtype, lo, hi);
    return [=] { return fn(a.slice(1, 0, 21, 2)); };
  };
}

Case reduce(Tensor (*fn)(const Tensor&), double lo = -2, double hi = 2) {
  return [=](DType dtype) {
    Tensor a = random_tensor({5, 7, 6}, dtype, lo, hi);
    return [=] { return fn(a.permute({1, 0, 2})); };
  };
}

// An activation gradient: grad and input of one shape, both dense (the fast path).
Case activation_backward(Tensor (*fn)(const Tensor&, const Tensor&)) {
  return [=](DType dtype) {
    Tensor grad = random_tensor({13, 21}, dtype), input = random_tensor({13, 21}, dtype, -4, 4);
    return [=] { return fn(grad, input); };
  };
}

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> table = {
      {"copy", [](DType dtype) {
         Tensor a = random_tensor({5, 7}, DType::f64, -100, 100);
         return [=] { return a.t().to(dtype); };
       }},
      {"fill", [](DType dtype) { return [=] { return full({3, 4}, 3, {.dtype = dtype}); }; }},
      {"add", binary([](const Tensor& a, const Tensor& b) { return add(a, b); })},
      {"sub", binary([](const Tensor& a, const Tensor& b) { return sub(a, b); })},
      {"mul", binary([](const Tensor& a, const Tensor& b) { return mul(a, b); })},
      {"div", binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.5, 3)},
      {"maximum", binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); })},
      {"minimum", binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); })},
      {"pow", binary([](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0, 3)},
      // Divisors in [1, 3]: an integer 0 is refused.
      {"fmod", binary([](const Tensor& a, const Tensor& b) { return fmod(a * 3, b); }, 1, 3)},
      {"remainder", binary([](const Tensor& a, const Tensor& b) { return remainder(a * -3, b); }, 1, 3)},
      {"floor_divide", binary([](const Tensor& a, const Tensor& b) { return floor_divide(a * -3, b); }, 1, 3)},
      {"eq", binary([](const Tensor& a, const Tensor& b) { return eq(a, b); }, 0, 2)},
      {"ne", binary([](const Tensor& a, const Tensor& b) { return ne(a, b); }, 0, 2)},
      {"lt", binary([](const Tensor& a, const Tensor& b) { return lt(a, b); })},
      {"le", binary([](const Tensor& a, const Tensor& b) { return le(a, b); }, 0, 2)},
      {"gt", binary([](const Tensor& a, const Tensor& b) { return gt(a, b); })},
      {"ge", binary([](const Tensor& a, const Tensor& b) { return ge(a, b); }, 0, 2)},
      {"logical_and", binary([](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, 0, 1)},
      {"logical_or", binary([](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, 0, 1)},
      {"logical_not", unary([](const Tensor& a) { return logical_not(a); }, 0, 1)},
      {"isnan", unary([](const Tensor& a) { return isnan(log(a)); })},
      {"isinf", unary([](const Tensor& a) { return isinf(div(a, 0.0)); }, 0, 1)},
      {"neg", unary([](const Tensor& a) { return neg(a); })},
      {"abs", unary([](const Tensor& a) { return abs(a); })},
      {"sign", unary([](const Tensor& a) { return sign(a); })},
      {"floor", unary([](const Tensor& a) { return floor(a * 3); })},
      {"ceil", unary([](const Tensor& a) { return ceil(a * 3); })},
      {"round", unary([](const Tensor& a) { return round(a * 3); })},
      {"trunc", unary([](const Tensor& a) { return trunc(a * 3); })},
      {"exp", unary([](const Tensor& a) { return exp(a); })},
      {"log", unary([](const Tensor& a) { return log(a); }, 0.1, 5)},
      {"log1p", unary([](const Tensor& a) { return log1p(a); }, 0, 5)},
      {"sqrt", unary([](const Tensor& a) { return sqrt(a); }, 0, 5)},
      {"rsqrt", unary([](const Tensor& a) { return rsqrt(a); }, 0.1, 5)},
      {"sin", unary([](const Tensor& a) { return sin(a); })},
      {"cos", unary([](const Tensor& a) { return cos(a); })},
      {"tanh", unary([](const Tensor& a) { return tanh(a); })},
      {"erf", unary([](const Tensor& a) { return erf(a); })},
      {"sigmoid", unary([](const Tensor& a) { return sigmoid(a); })},
      {"relu", unary([](const Tensor& a) { return relu(a); })},
      {"gelu", unary([](const Tensor& a) { return gelu(a); })},
      {"gelu_tanh", unary([](const Tensor& a) { return gelu(a, GeluApproximation::tanh); })},
      {"silu", unary([](const Tensor& a) { return silu(a); })},
      {"threshold_backward",
       activation_backward([](const Tensor& g, const Tensor& x) { return threshold_backward(g, x); })},
      {"gelu_backward", activation_backward([](const Tensor& g, const Tensor& x) { return gelu_backward(g, x); })},
      {"gelu_tanh_backward", activation_backward([](const Tensor& g, const Tensor& x) {
         return gelu_backward(g, x, GeluApproximation::tanh);
       })},
      {"silu_backward", activation_backward([](const Tensor& g, const Tensor& x) { return silu_backward(g, x); })},
      {"pow_scalar", unary([](const Tensor& a) { return pow(a, 3); })},
      {"clamp", unary([](const Tensor& a) { return clamp(a, -1, 1); })},
      {"where", [](DType dtype) {
         Tensor condition = random_tensor({6, 1}, DType::boolean);
         Tensor a = random_tensor({6, 5}, dtype), b = random_tensor({5}, dtype);
         return [=] { return where(condition, a, b); };
       }},
      {"addcmul", [](DType dtype) {
         Tensor input = random_tensor({9}, dtype), tensor1 = random_tensor({17, 9}, dtype);
         Tensor tensor2 = random_tensor({17, 1}, dtype);
         Scalar value = is_floating(dtype) ? Scalar(0.5) : Scalar(3);
         return [=] { return addcmul(input, tensor1.t().contiguous().t(), tensor2, value); };
       }},
      // reductions: a 3-d non-contiguous input reduced over two dims
      {"sum", reduce([](const Tensor& a) { return sum(a, {0, 2}); })},
      {"mean", reduce([](const Tensor& a) { return mean(a, {0, 2}); })},
      {"prod", reduce([](const Tensor& a) { return prod(a, {1}, true); }, 0.5, 1.5)},
      {"amax", reduce([](const Tensor& a) { return amax(a, {0, 2}); })},
      {"amin", reduce([](const Tensor& a) { return amin(a, {1}); })},
      {"logsumexp", reduce([](const Tensor& a) { return logsumexp(a, {2}); })},
      {"max_indices", reduce([](const Tensor& a) {
         ValuesIndices m = max(a, 1);
         return cat({m.values.to(DType::f64), m.indices.to(DType::f64)});
       })},
      {"min_indices", reduce([](const Tensor& a) {
         return cat({min(a, 2).values.flatten().to(DType::f64), argmin(a).to(DType::f64).reshape({1})});
       })},
      {"var", reduce([](const Tensor& a) { return var(a, {0, 1}); })},
      {"std", reduce([](const Tensor& a) { return std(a, {2}, false); })},
      {"norm", reduce([](const Tensor& a) { return norm(a, 3.0, {1}); })},
      {"softmax", reduce([](const Tensor& a) { return softmax(a, 1); })},
      {"log_softmax", reduce([](const Tensor& a) { return log_softmax(a, -1); })},
      // linear algebra and convolution
      {"matmul", [](DType dtype) {
         Tensor a = random_tensor({2, 9, 5}, dtype), b = random_tensor({7, 9}, dtype);
         return [=] { return matmul(a.transpose(1, 2), b.t()); };
       }},
      // fused attention: the reference backend has no kernel and composes it (matmul, softmax)
      {"attention", [](DType dtype) {
         Tensor q = random_tensor({7, 2, 5}, dtype), k = random_tensor({2, 9, 5}, dtype), v = random_tensor({2, 9, 3}, dtype);
         return [=] { return attention(q.transpose(0, 1), k, v, {.scale = 0.5, .causal = true}); };
       }},
      {"attention_backward", [](DType dtype) {
         Tensor q0 = random_tensor({2, 7, 5}, dtype), k0 = random_tensor({2, 9, 5}, dtype), v0 = random_tensor({2, 9, 3}, dtype);
         Tensor mask = random_tensor({7, 9}, dtype);
         return [=] {
           Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
           sum(attention(q, k, v, {.scale = 0.5, .mask = mask})).backward();
           return cat({q.grad().flatten(), k.grad().flatten(), v.grad().flatten()});
         };
       }},
      {"conv2d", [](DType dtype) {
         Tensor input = random_tensor({2, 4, 7, 6}, dtype), weight = random_tensor({6, 2, 3, 3}, dtype);
         Tensor bias = random_tensor({6}, dtype);
         return [=] { return conv2d(input, weight, bias, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}); };
       }},
      {"conv2d_backward_input", [](DType dtype) {
         Tensor grad = random_tensor({2, 6, 4, 6}, dtype), weight = random_tensor({6, 2, 3, 3}, dtype);
         return [=] {
           return conv2d_backward_input(grad, weight, {2, 4, 7, 6}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2});
         };
       }},
      {"conv2d_backward_weight", [](DType dtype) {
         Tensor grad = random_tensor({2, 6, 4, 6}, dtype), input = random_tensor({2, 4, 7, 6}, dtype);
         return [=] {
           return conv2d_backward_weight(grad, input, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2});
         };
       }},
      {"conv2d_backward", [](DType dtype) {
         Tensor grad = random_tensor({2, 6, 4, 6}, dtype), input = random_tensor({2, 4, 7, 6}, dtype);
         Tensor weight = random_tensor({6, 2, 3, 3}, dtype);
         return [=] {
           Conv2dGradients both = conv2d_backward(grad, input, weight, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2});
           return cat({both.input.flatten(), both.weight.flatten()});
         };
       }},
      {"max_pool2d", [](DType dtype) {
         Tensor input = random_tensor({2, 3, 7, 6}, dtype);
         return [=] { return max_pool2d(input, {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}}); };
       }},
      {"avg_pool2d", [](DType dtype) {
         Tensor input = random_tensor({2, 3, 7, 6}, dtype);
         return [=] { return avg_pool2d(input, {.kernel_size = {3, 3}, .stride = {2, 1}, .padding = {1, 0}}); };
       }},
      {"max_pool2d_backward", [](DType dtype) {
         Tensor input = random_tensor({2, 3, 7, 6}, dtype), grad = random_tensor({2, 3, 4, 4}, dtype);
         return [=] { return max_pool2d_backward(grad, input, {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}}); };
       }},
      // indexing
      {"index_select", [](DType dtype) {
         Tensor t = random_tensor({6, 5}, dtype), index = random_tensor({7}, DType::i64, 0, 4);
         return [=] { return index_select(t.t(), 0, index); };
       }},
      {"embedding", [](DType dtype) {
         Tensor weight = random_tensor({10, 4}, dtype), index = random_tensor({3, 2}, DType::i32, 0, 9);
         return [=] { return embedding(index, weight); };
       }},
      {"gather", [](DType dtype) {
         Tensor t = random_tensor({4, 6}, dtype), index = random_tensor({4, 3}, DType::i64, 0, 5);
         return [=] { return gather(t, 1, index); };
       }},
      {"scatter_add", [](DType dtype) {
         Tensor t = random_tensor({5, 3}, dtype), src = random_tensor({8, 3}, dtype);
         Tensor index = random_tensor({8, 3}, DType::i64, 0, 4);
         return [=] { return scatter_add(t, 0, index, src); };
       }},
      {"masked_fill", [](DType dtype) {
         Tensor t = random_tensor({4, 5}, dtype), mask = random_tensor({5}, DType::boolean);
         return [=] { return masked_fill(t, mask, 1); };
       }},
      {"tril", [](DType dtype) {
         Tensor t = random_tensor({5, 7}, dtype);
         return [=] { return tril(t, 1); };
       }},
      {"triu", [](DType dtype) {
         Tensor t = random_tensor({2, 5, 4}, dtype);
         return [=] { return triu(t, -1); };
       }},
      {"one_hot", [](DType dtype) {
         Tensor index = random_tensor({6}, dtype, 0, 4);
         return [=] { return one_hot(index, 5); };
       }},
      // sorting: descending along a transposed dim, values and indices in one tensor
      {"sort", [](DType dtype) {
         Tensor t = random_tensor({5, 9}, dtype);
         return [=] {
           ValuesIndices s = sort(t.t(), 0, true);
           return cat({s.values.to(DType::f64).flatten(), s.indices.to(DType::f64).flatten()});
         };
       }},
      {"topk", [](DType dtype) {
         Tensor t = random_tensor({5, 9}, dtype);
         return [=] {
           ValuesIndices s = topk(t.t(), 3, 0, false);
           return cat({s.values.to(DType::f64).flatten(), s.indices.to(DType::f64).flatten()});
         };
       }},
      // scans: along an inner dim of a permuted input, and along the outer dim
      {"cumsum", [](DType dtype) {
         Tensor t = random_tensor({5, 7, 6}, dtype);
         return [=] { return cat({cumsum(t.permute({1, 0, 2}), 1).flatten(), cumsum(t, 0).flatten()}); };
       }},
      {"cumprod", [](DType dtype) {
         Tensor t = random_tensor({5, 7, 6}, dtype, 0.5, 1.5);
         return [=] { return cat({cumprod(t.permute({1, 0, 2}), 1).flatten(), cumprod(t, -1).flatten()}); };
       }},
      // random: a fresh generator per run, so both runs draw the same stream
      {"uniform", [](DType dtype) { return [=] { Generator g(7); return rand({1000}, {.dtype = dtype}, &g); }; }},
      {"normal", [](DType dtype) { return [=] { Generator g(7); return randn({1000}, {.dtype = dtype}, &g); }; }},
      {"randint", [](DType dtype) {
         return [=] { Generator g(7); return randint(0, 2, {1000}, {.dtype = dtype}, &g); };
       }},
      {"multinomial", [](DType dtype) {  // keyed by f64, its working copy's dtype
         Tensor weights = random_tensor({4, 6}, dtype, 0, 2);
         return [=] {
           Generator g(7);
           return cat({multinomial(weights, 3, false, &g).flatten(), multinomial(weights.t(), 9, true, &g).flatten()});
         };
       }},
      // normalisation, dropout and cross-entropy: forward and fused backward
      {"layer_norm", [](DType dtype) {
         Tensor x = random_tensor({4, 3, 6}, dtype), w = random_tensor({6, 4}, dtype), b = random_tensor({4, 6}, dtype);
         return [=] { return layer_norm(x.transpose(0, 1), {4, 6}, w.t(), b); };
       }},
      {"rms_norm", [](DType dtype) {
         Tensor x = random_tensor({5, 9}, dtype), w = random_tensor({9}, dtype);
         return [=] { return rms_norm(x, {9}, w); };
       }},
      {"layer_norm_backward", [](DType dtype) {
         Tensor x = random_tensor({5, 9}, dtype), g = random_tensor({5, 9}, dtype), w = random_tensor({9}, dtype);
         NormalizationResult saved = reference([&] { return layer_norm_forward(x, {9}, w, {}, 1e-5); });
         return [=] {
           NormalizationGrads grads = layer_norm_backward(g, x, {9}, w, saved.mean, saved.rstd, true);
           return cat({grads.input.flatten(), grads.weight, grads.bias});
         };
       }},
      {"rms_norm_backward", [](DType dtype) {
         Tensor x = random_tensor({5, 9}, dtype), g = random_tensor({5, 9}, dtype), w = random_tensor({9}, dtype);
         NormalizationResult saved = reference([&] { return rms_norm_forward(x, {9}, w, 1e-6); });
         return [=] {
           NormalizationGrads grads = rms_norm_backward(g, x, {9}, w, saved.rstd);
           return cat({grads.input.flatten(), grads.weight});
         };
       }},
      {"batch_norm", [](DType dtype) {
         Tensor x = random_tensor({3, 4, 5}, dtype), w = random_tensor({4}, dtype), b = random_tensor({4}, dtype);
         Tensor mean = random_tensor({4}, DType::f32), var = random_tensor({4}, DType::f32, 0.5, 2);
         return [=] {
           return cat({batch_norm(x.transpose(0, 2).contiguous().transpose(0, 2), {}, {}, w, b, true).flatten(),
                       batch_norm(x, mean, var, w, b, false).flatten()});
         };
       }},
      {"batch_norm_backward", [](DType dtype) {
         Tensor x = random_tensor({3, 4, 5}, dtype), g = random_tensor({3, 4, 5}, dtype), w = random_tensor({4}, dtype);
         NormalizationResult saved = reference([&] { return batch_norm_forward(x, {}, {}, w, {}, true, 1e-5); });
         return [=] {
           NormalizationGrads grads = batch_norm_backward(g, x, w, saved.mean, saved.rstd, true, true);
           return cat({grads.input.flatten(), grads.weight, grads.bias});
         };
       }},
      {"dropout", [](DType dtype) {
         Tensor x = random_tensor({33, 5}, dtype);
         return [=] { Generator g(7); return dropout(x.t(), 0.3, true, &g); };
       }},
      {"cross_entropy", [](DType dtype) {
         Tensor x = random_tensor({6, 5, 2}, dtype, -3, 3), w = random_tensor({5}, dtype, 0.5, 2);
         Tensor target = from_vector<int64_t>({0, 4, -100, 2, 1, 3, 3, 0, 4, -100, 1, 2}, {6, 2});
         return [=] {
           return cross_entropy(x, target, {.weight = w, .reduction = Reduction::none, .label_smoothing = 0.1});
         };
       }},
      {"cross_entropy_backward", [](DType dtype) {
         Tensor x = random_tensor({7, 5}, dtype, -3, 3), target = random_tensor({7}, DType::i64, 0, 4);
         CrossEntropyOptions options{.label_smoothing = 0.2};
         CrossEntropyResult saved = reference([&] { return cross_entropy_forward(x, target, options); });
         return [=] { return cross_entropy_backward(ones({}, {.dtype = dtype}), x, target, options, saved.row_max, saved.log_sum, saved.total_weight); };
       }},
      // fused optimizer updates: fresh copies of the parameter and its state per run,
      // then everything the update wrote, flattened into one tensor
      {"sgd_update", [](DType dtype) {
         Tensor param = random_tensor({7, 5}, dtype), grad = random_tensor({7, 5}, dtype);
         Tensor buffer = random_tensor({7, 5}, dtype);
         return [=] {
           Tensor p = param.clone(), b = buffer.clone();
           sgd_update_(p, grad.t().contiguous().t(), b,
                       {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = true});
           return cat({p.flatten(), b.flatten()});
         };
       }},
      {"adam_update", [](DType dtype) {
         Tensor param = random_tensor({33}, dtype), grad = random_tensor({33}, dtype);
         Tensor exp_avg = random_tensor({33}, dtype), exp_avg_sq = random_tensor({33}, dtype, 0, 2);
         Tensor max_exp_avg_sq = random_tensor({33}, dtype, 0, 2);
         return [=] {
           Tensor p = param.clone(), m = exp_avg.clone(), v = exp_avg_sq.clone(), v_max = max_exp_avg_sq.clone();
           adam_update_(p, grad, m, v, v_max, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true, .step = 3});
           return cat({p, m, v, v_max});
         };
       }},
      {"rmsprop_update", [](DType dtype) {
         Tensor param = random_tensor({33}, dtype), grad = random_tensor({33}, dtype);
         Tensor square_avg = random_tensor({33}, dtype, 1, 2), grad_avg = random_tensor({33}, dtype, -0.5, 0.5);
         Tensor buffer = random_tensor({33}, dtype);
         return [=] {
           Tensor p = param.clone(), s = square_avg.clone(), a = grad_avg.clone(), b = buffer.clone();
           rmsprop_update_(p, grad, s, a, b, {.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9, .centered = true});
           return cat({p, s, a, b});
         };
       }},
      {"adagrad_update", [](DType dtype) {
         Tensor param = random_tensor({33}, dtype), grad = random_tensor({33}, dtype);
         Tensor sum = random_tensor({33}, dtype, 0, 2);
         return [=] {
           Tensor p = param.clone(), s = sum.clone();
           adagrad_update_(p, grad, s, {.lr = 0.1, .lr_decay = 0.01, .weight_decay = 0.1, .step = 4});
           return cat({p, s});
         };
       }},
      {"unscale_and_check", [](DType dtype) {
         Tensor grad = random_tensor({7, 5}, dtype, -100, 100);
         return [=] {
           Tensor g = grad.clone(), found_inf = zeros({1});
           unscale_and_check_(g, found_inf, 0.125);
           unscale_and_check_(g, found_inf, std::numeric_limits<double>::infinity());  // the flag's path
           unscale_and_check_(g, found_inf, 0.5);
           return cat({g.flatten(), found_inf.to(dtype)});
         };
       }},
      {"lion_update", [](DType dtype) {
         Tensor param = random_tensor({33}, dtype), grad = random_tensor({33}, dtype);
         Tensor exp_avg = random_tensor({33}, dtype);
         return [=] {
           Tensor p = param.clone(), m = exp_avg.clone();
           lion_update_(p, grad, m, {.lr = 0.01, .weight_decay = 0.1, .maximize = true});
           return cat({p, m});
         };
       }},
  };
  return table;
}

TEST(OpTable, EveryCpuDtypeHasAnOptimizedKernelOrAWrittenExemption) {
  for (const OpBase* op : OpBase::all()) {
    for (DType dtype : kAllDTypes) {
      if (op->kind(DeviceType::cpu, dtype) != KernelKind::reference) continue;
      EXPECT_TRUE(kReferenceOnly.count({std::string(op->name()), dtype}))
          << op->name() << " has only a reference kernel for " << dtype_name(dtype)
          << ": add an optimized CPU kernel or a kReferenceOnly entry saying why";
    }
  }
}

TEST(OpTable, ExemptionsAreStillNeeded) {
  std::set<std::string> names;
  for (const OpBase* op : OpBase::all()) names.insert(std::string(op->name()));
  for (const auto& [key, reason] : kReferenceOnly) {
    EXPECT_TRUE(names.count(key.first)) << "kReferenceOnly names an unknown op " << key.first;
    for (const OpBase* op : OpBase::all()) {
      if (op->name() != key.first) continue;
      EXPECT_EQ(op->kind(DeviceType::cpu, key.second), KernelKind::reference)
          << key.first << "/" << dtype_name(key.second) << " now has a fast kernel: drop its exemption";
    }
  }
}

// An op without any CPU kernel is a GPU-only fused op: the CUDA suites compare
// it with the composite it replaces (tests/cuda/).
bool gpu_only(const OpBase& op) {
  for (DType dtype : kAllDTypes)
    if (op.kind(DeviceType::cpu, dtype) != KernelKind::none) return false;
  return true;
}

TEST(OpTable, EveryOpHasACaseThatMatchesTheReferenceForEverySupportedDtype) {
  for (const OpBase* op : OpBase::all()) {
    if (gpu_only(*op)) continue;
    auto found = cases().find(std::string(op->name()));
    if (found == cases().end()) {
      ADD_FAILURE() << "op '" << op->name() << "' has no case in tests/core/test_op_table.cpp";
      continue;
    }
    for (DType dtype : kAllDTypes) {
      if (op->kind(DeviceType::cpu, dtype) == KernelKind::none) continue;
      std::function<Tensor()> run = found->second(dtype);
      Tensor expected = reference(run);
      double atol = tolerance(dtype);
      if (kScaledAbsoluteTolerance.count(std::string(op->name())) && expected.numel() > 0)
        atol *= std::max(1.0, max(abs(expected.to(DType::f64))).item<double>());
      EXPECT_TRUE(all_close(run(), expected, tolerance(dtype), atol)) << op->name() << " " << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace ember::testing
