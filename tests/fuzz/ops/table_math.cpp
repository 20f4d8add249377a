// The op table's math families: element-wise (unary, binary, scalar, in place,
// comparisons, where/clamp/addcmul, activation gradients), reductions and
// softmax, matrix products, convolution and pooling, normalisation, losses,
// dropout and the fused optimizer updates. Each decoder's bytes, in order, are
// its operands and arguments as the code reads them (program.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "fuzz/ops/table_parts.h"

namespace ember::fuzz {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using WithScalar = Tensor (*)(const Tensor&, const Scalar&);
using Reduce = Tensor (*)(const Tensor&, const Dims&, bool);

OpEntry unary(std::string_view name, Unary fn, Accuracy accuracy) {
  return {name, [=](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            return Call{std::string(name), {x}, [fn](const Inputs& t) { return Outputs{fn(t[0])}; }, accuracy};
          }};
}

OpEntry binary(std::string_view name, Binary fn, Accuracy accuracy) {
  return {name, [=](Reader& in, Pool& pool) {
            Tensor a = operand(in, pool);
            Tensor b = partner(in, pool, a);
            return Call{std::string(name), {a, b}, [fn](const Inputs& t) { return Outputs{fn(t[0], t[1])}; },
                        accuracy};
          }};
}

// tensor op scalar: a selector byte picks the op, then the scalar.
OpEntry with_scalar() {
  struct Choice {
    const char* name;
    WithScalar fn;
    Accuracy accuracy;
  };
  static const std::array<Choice, 13> choices = {{
      {"add", [](const Tensor& a, const Scalar& s) { return add(a, s); }, Accuracy::exact},
      {"sub", [](const Tensor& a, const Scalar& s) { return sub(a, s); }, Accuracy::exact},
      {"mul", [](const Tensor& a, const Scalar& s) { return mul(a, s); }, Accuracy::exact},
      {"div", [](const Tensor& a, const Scalar& s) { return div(a, s); }, Accuracy::exact},
      {"rsub", [](const Tensor& a, const Scalar& s) { return rsub(a, s); }, Accuracy::exact},
      {"rdiv", [](const Tensor& a, const Scalar& s) { return rdiv(a, s); }, Accuracy::exact},
      {"pow", [](const Tensor& a, const Scalar& s) { return pow(a, s); }, Accuracy::rounding},
      {"eq", [](const Tensor& a, const Scalar& s) { return eq(a, s); }, Accuracy::exact},
      {"ne", [](const Tensor& a, const Scalar& s) { return ne(a, s); }, Accuracy::exact},
      {"lt", [](const Tensor& a, const Scalar& s) { return lt(a, s); }, Accuracy::exact},
      {"le", [](const Tensor& a, const Scalar& s) { return le(a, s); }, Accuracy::exact},
      {"gt", [](const Tensor& a, const Scalar& s) { return gt(a, s); }, Accuracy::exact},
      {"ge", [](const Tensor& a, const Scalar& s) { return ge(a, s); }, Accuracy::exact},
  }};
  return {"scalar", [](Reader& in, Pool& pool) {
            const Choice& choice = choices[in.byte() % choices.size()];
            Tensor a = operand(in, pool);
            Scalar s = in.scalar();
            WithScalar fn = choice.fn;
            return Call{fmt::format("{} scalar {}", choice.name, scalar_name(s)), {a},
                        [fn, s](const Inputs& t) { return Outputs{fn(t[0], s)}; }, choice.accuracy};
          }};
}

// Where an in-place op writes, so that under autograd (the `grad` prefix) it
// meets every case of Note [In-place ops and autograd]: the pool tensor
// itself (a leaf, which autograd refuses when it requires grad), an
// intermediate computed from it (its history is rebased), or a view of a
// buffer that does not require grad, filled from it (the buffer takes a
// CopySlices history; the whole buffer is the op's result).
enum class Target { itself, intermediate, view_of_buffer };

const char* target_name(Target target) {
  switch (target) {
    case Target::itself: return "";
    case Target::intermediate: return " into an intermediate";
    default: return " into a view of a buffer";
  }
}

struct Written {
  Tensor target;  // what the op writes into
  Tensor result;  // what the call returns: the target, or the buffer it views
};

Written prepare(Target target, const Tensor& t) {
  if (target == Target::itself) return {t, t};
  if (target == Target::intermediate) {
    Tensor copy = t.clone();
    return {copy, copy};
  }
  Shape shape = t.shape();
  shape.insert(0, 2);
  Tensor buffer = zeros(shape, {.dtype = t.dtype(), .device = t.device()});
  Tensor view = buffer.select(0, 1);
  view.copy_(t);
  return {view, buffer};
}

// a op= b and a op= scalar: a selector byte (bits 0-1 the op, bit 2 tensor or
// scalar, bits 3-4 the target), the operands.
OpEntry in_place() {
  return {"in_place", [](Reader& in, Pool& pool) {
            static const std::array<const char*, 4> names = {"add_", "sub_", "mul_", "div_"};
            const uint8_t selector = in.byte();
            const int op = selector % 4;
            const Target target = Target((selector >> 3) % 3);
            Tensor a = operand(in, pool);
            auto apply = [op](Tensor& written, const auto& b) {
              switch (op) {
                case 0: add_(written, b); break;
                case 1: sub_(written, b); break;
                case 2: mul_(written, b); break;
                default: div_(written, b);
              }
            };
            if (selector & 4) {
              Scalar s = in.scalar();
              return Call{fmt::format("{} scalar {}{}", names[op], scalar_name(s), target_name(target)), {a},
                          [apply, s, target](const Inputs& t) {
                            Written w = prepare(target, t[0]);
                            apply(w.target, s);
                            return Outputs{w.result};
                          }, Accuracy::exact};
            }
            Tensor b = partner(in, pool, a);
            return Call{fmt::format("{}{}", names[op], target_name(target)), {a, b}, [apply, target](const Inputs& t) {
                          Written w = prepare(target, t[0]);
                          apply(w.target, t[1]);
                          return Outputs{w.result};
                        }, Accuracy::exact};
          }};
}

// fill_ or copy_: a selector byte (bit 0 fill, bits 1-2 the target), the operands.
OpEntry fill_or_copy() {
  return {"fill_copy", [](Reader& in, Pool& pool) {
            Tensor a = operand(in, pool);
            const uint8_t selector = in.byte();
            const Target target = Target((selector >> 1) % 3);
            if (selector & 1) {
              Scalar s = in.scalar();
              return Call{fmt::format("fill_ {}{}", scalar_name(s), target_name(target)), {a}, [s, target](const Inputs& t) {
                            Written w = prepare(target, t[0]);
                            w.target.fill_(s);
                            return Outputs{w.result};
                          }, Accuracy::exact};
            }
            Tensor b = partner(in, pool, a);
            return Call{fmt::format("copy_{}", target_name(target)), {a, b}, [target](const Inputs& t) {
                          Written w = prepare(target, t[0]);
                          copy_(w.target, t[1]);
                          return Outputs{w.result};
                        }, Accuracy::exact};
          }};
}

OpEntry activation_backward() {
  return {"activation_backward", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 4;
            Tensor grad = operand(in, pool);
            Tensor input = partner(in, pool, grad);
            static const std::array<const char*, 4> names = {"threshold_backward", "gelu_backward",
                                                              "gelu_tanh_backward", "silu_backward"};
            return Call{names[which], {grad, input}, [which](const Inputs& t) {
                          switch (which) {
                            case 0: return Outputs{threshold_backward(t[0], t[1])};
                            case 1: return Outputs{gelu_backward(t[0], t[1])};
                            case 2: return Outputs{gelu_backward(t[0], t[1], GeluApproximation::tanh)};
                            default: return Outputs{silu_backward(t[0], t[1])};
                          }
                        }, which == 0 ? Accuracy::exact : Accuracy::scaled};
          }};
}

OpEntry where_op() {
  return {"where", [](Reader& in, Pool& pool) {
            Tensor a = operand(in, pool);
            Tensor condition = in.flag() ? read_mask(in, broadcastable_to(in, a.shape())) : operand(in, pool);
            if (in.flag()) {
              Scalar s = in.scalar();
              return Call{fmt::format("where scalar {}", scalar_name(s)), {condition, a},
                          [s](const Inputs& t) { return Outputs{where(t[0], t[1], s)}; }, Accuracy::exact};
            }
            Tensor b = partner(in, pool, a);
            return Call{"where", {condition, a, b}, [](const Inputs& t) { return Outputs{where(t[0], t[1], t[2])}; },
                        Accuracy::exact};
          }};
}

OpEntry clamp_op() {
  return {"clamp", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor x = operand(in, pool);
            Scalar low = in.scalar();
            Scalar high = in.scalar();
            static const std::array<const char*, 3> names = {"clamp", "clamp_min", "clamp_max"};
            return Call{fmt::format("{} {} {}", names[which], scalar_name(low), scalar_name(high)), {x},
                        [which, low, high](const Inputs& t) {
                          if (which == 0) return Outputs{clamp(t[0], low, high)};
                          if (which == 1) return Outputs{clamp_min(t[0], low)};
                          return Outputs{clamp_max(t[0], high)};
                        }, Accuracy::exact};
          }};
}

OpEntry addcmul_op() {
  return {"addcmul", [](Reader& in, Pool& pool) {
            Tensor input = operand(in, pool);
            Tensor tensor1 = partner(in, pool, input);
            Tensor tensor2 = partner(in, pool, input);
            Scalar value = in.scalar();
            return Call{fmt::format("addcmul value {}", scalar_name(value)), {input, tensor1, tensor2},
                        [value](const Inputs& t) { return Outputs{addcmul(t[0], t[1], t[2], value)}; },
                        Accuracy::rounding};
          }};
}

OpEntry reduction(std::string_view name, Reduce fn, Accuracy accuracy) {
  return {name, [=](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            Dims dims = read_dims(in, x.dim());
            bool keepdim = in.flag();
            return Call{fmt::format("{} dims {} keepdim {}", name, dims, keepdim), {x},
                        [fn, dims, keepdim](const Inputs& t) { return Outputs{fn(t[0], dims, keepdim)}; }, accuracy};
          }};
}

// prod: its partial products depend on the order of the factors, so where
// they may leave the accumulator's range (the factors above 1 multiply past
// its largest value, or those below 1 past its smallest normal one), one side
// may overflow to inf or flush to 0 where the other does not (the fast
// kernels accumulate f32 in f32, as PyTorch's do): only errors are compared.
OpEntry prod_op() {
  return {"prod", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            Dims dims = read_dims(in, x.dim());
            bool keepdim = in.flag();
            const bool f64 = x.dtype() == DType::f64;
            using Limits = std::numeric_limits<float>;
            const double largest = f64 ? std::numeric_limits<double>::max() : double(Limits::max());
            const double smallest = f64 ? std::numeric_limits<double>::min() : double(Limits::min());
            double growth = 1, shrinkage = 1;
            if (is_floating(x.dtype()))
              for (double v : x.to_vector<double>()) {
                const double magnitude = std::abs(v);
                if (!std::isfinite(magnitude) || magnitude == 0) continue;
                if (magnitude > 1) growth = std::min(growth * magnitude, std::numeric_limits<double>::max());
                else shrinkage *= magnitude;
              }
            const bool out_of_range = growth > largest || shrinkage < smallest;
            return Call{fmt::format("prod dims {} keepdim {}", dims, keepdim), {x},
                        [dims, keepdim](const Inputs& t) { return Outputs{prod(t[0], dims, keepdim)}; },
                        out_of_range ? Accuracy::errors_only : Accuracy::scaled};
          }};
}

// max/min over everything, max/min along a dim (values and indices), argmax/argmin.
OpEntry extremes() {
  return {"extremes", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 6;
            Tensor x = operand(in, pool);
            const int64_t dim = in.dim(x.dim());
            const bool keepdim = in.flag(), whole = in.flag();
            static const std::array<const char*, 6> names = {"max", "min", "max_dim", "min_dim", "argmax", "argmin"};
            return Call{fmt::format("{} dim {} keepdim {} whole {}", names[which], dim, keepdim, whole), {x},
                        [=](const Inputs& t) {
                          std::optional<int64_t> maybe_dim = whole ? std::nullopt : std::optional<int64_t>(dim);
                          switch (which) {
                            case 0: return Outputs{max(t[0])};
                            case 1: return Outputs{min(t[0])};
                            case 2: { ValuesIndices r = max(t[0], dim, keepdim); return Outputs{r.values, r.indices}; }
                            case 3: { ValuesIndices r = min(t[0], dim, keepdim); return Outputs{r.values, r.indices}; }
                            case 4: return Outputs{argmax(t[0], maybe_dim, keepdim)};
                            default: return Outputs{argmin(t[0], maybe_dim, keepdim)};
                          }
                        }, Accuracy::exact};
          }};
}

OpEntry moments() {
  return {"var_std", [](Reader& in, Pool& pool) {
            const bool take_std = in.flag();
            Tensor x = operand(in, pool);
            Dims dims = read_dims(in, x.dim());
            const bool unbiased = in.flag(), keepdim = in.flag();
            return Call{fmt::format("{} dims {} unbiased {} keepdim {}", take_std ? "std" : "var", dims, unbiased, keepdim),
                        {x}, [=](const Inputs& t) {
                          return Outputs{take_std ? std(t[0], dims, unbiased, keepdim) : var(t[0], dims, unbiased, keepdim)};
                        }, Accuracy::rounding};
          }};
}

OpEntry norm_op() {
  return {"norm", [](Reader& in, Pool& pool) {
            static const std::array<double, 8> powers = {2, 1, 0, kInf, -kInf, 3, 0.5, kNan};
            const double p = powers[in.byte() % powers.size()];
            Tensor x = operand(in, pool);
            Dims dims = read_dims(in, x.dim());
            const bool keepdim = in.flag();
            return Call{fmt::format("norm p {} dims {} keepdim {}", p, dims, keepdim), {x},
                        [=](const Inputs& t) { return Outputs{norm(t[0], p, dims, keepdim)}; }, Accuracy::scaled,
                        std::isfinite(p) && p > 0 ? p : 1};
          }};
}

OpEntry softmax_op() {
  return {"softmax", [](Reader& in, Pool& pool) {
            const bool log_form = in.flag();
            Tensor x = operand(in, pool);
            const int64_t dim = in.dim(x.dim());
            return Call{fmt::format("{} dim {}", log_form ? "log_softmax" : "softmax", dim), {x},
                        [=](const Inputs& t) { return Outputs{log_form ? log_softmax(t[0], dim) : softmax(t[0], dim)}; },
                        Accuracy::rounding};
          }};
}

OpEntry products() {
  return {"matmul", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 4;
            Tensor a = operand(in, pool);
            Tensor b = matmul_partner(in, pool, a);
            static const std::array<const char*, 4> names = {"matmul", "mm", "bmm", "addmm"};
            if (which < 3)
              return Call{names[which], {a, b}, [which](const Inputs& t) {
                            if (which == 0) return Outputs{matmul(t[0], t[1])};
                            if (which == 1) return Outputs{mm(t[0], t[1])};
                            return Outputs{bmm(t[0], t[1])};
                          }, Accuracy::scaled};
            Tensor input = in.flag() ? operand(in, pool) : read_tensor_of(in, addmm_bias_shape(in, a, b), a.dtype());
            Scalar beta = in.scalar();
            Scalar alpha = in.scalar();
            return Call{fmt::format("addmm beta {} alpha {}", scalar_name(beta), scalar_name(alpha)), {input, a, b},
                        [beta, alpha](const Inputs& t) { return Outputs{addmm(t[0], t[1], t[2], beta, alpha)}; },
                        Accuracy::scaled};
          }};
}

// conv2d's padding written out as zeros, for Call::nan_alternative: the
// padded input, and the options without padding.
Tensor zero_padded(const Tensor& input, const Conv2dOptions& options) {
  return pad(input, {options.padding[1], options.padding[1], options.padding[0], options.padding[0]});
}
Conv2dOptions without_padding(Conv2dOptions options) {
  options.padding = {0, 0};
  return options;
}

// conv2d, its two gradient passes and both at once: the input, then the weight's sizes, bias flag and options.
// The input's gradient never reads the padding; the output and the weight's gradient multiply it.
OpEntry convolution() {
  return {"conv2d", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 4;
            Tensor input = image(in, pool);
            Conv2dOptions options;
            options.groups = in.integer(1, 3);
            const int64_t groups = std::clamp<int64_t>(options.groups, 1, 3);
            const int64_t channels = input.dim() == 4 ? input.size(1) : 1;
            Shape weight_shape{groups * in.in_range(0, 2), channels / groups, in.in_range(0, 3), in.in_range(0, 3)};
            Tensor weight = read_tensor_of(in, weight_shape, in.flag() ? input.dtype() : in.dtype());
            Tensor bias = in.flag() ? read_tensor_of(in, {weight_shape[0]}, input.dtype()) : Tensor();
            options.stride = {in.integer(1, 3), in.integer(1, 3)};
            options.padding = {in.integer(0, 2), in.integer(0, 2)};
            options.dilation = {in.integer(1, 2), in.integer(1, 2)};
            std::string name = fmt::format("conv2d stride [{}, {}] padding [{}, {}] dilation [{}, {}] groups {}",
                                           options.stride[0], options.stride[1], options.padding[0],
                                           options.padding[1], options.dilation[0], options.dilation[1],
                                           options.groups);
            if (which == 0)
              return Call{.name = name,
                          .inputs = {input, weight, bias},
                          .run = [options](const Inputs& t) { return Outputs{conv2d(t[0], t[1], t[2], options)}; },
                          .accuracy = Accuracy::scaled,
                          .nan_alternative = [options](const Inputs& t) {
                            return Outputs{conv2d(zero_padded(t[0], options), t[1], t[2], without_padding(options))};
                          }};
            // The gradients need a grad_output of the forward's output shape.
            Shape out_shape = shape_or_empty([&] { return conv2d(input, weight, bias, options); });
            Tensor grad_output = read_tensor_of(in, out_shape, input.dtype());
            if (which == 1)
              return Call{"conv2d_backward_input " + name, {grad_output, weight}, [options, shape = input.shape()](
                                                                                     const Inputs& t) {
                            return Outputs{conv2d_backward_input(t[0], t[1], shape, options)};
                          }, Accuracy::scaled};
            if (which == 2)
              return Call{.name = "conv2d_backward_weight " + name,
                          .inputs = {grad_output, input},
                          .run = [options, weight_shape](const Inputs& t) {
                            return Outputs{conv2d_backward_weight(t[0], t[1], weight_shape, options)};
                          },
                          .accuracy = Accuracy::scaled,
                          .nan_alternative = [options, weight_shape](const Inputs& t) {
                            return Outputs{conv2d_backward_weight(t[0], zero_padded(t[1], options), weight_shape,
                                                                  without_padding(options))};
                          }};
            return Call{.name = "conv2d_backward " + name,
                        .inputs = {grad_output, input, weight},
                        .run = [options](const Inputs& t) {
                          Conv2dGradients both = conv2d_backward(t[0], t[1], t[2], options);
                          return Outputs{both.input, both.weight};
                        },
                        .accuracy = Accuracy::scaled,
                        .nan_alternative = [options](const Inputs& t) {
                          return Outputs{conv2d_backward_input(t[0], t[2], t[1].shape(), options),
                                         conv2d_backward_weight(t[0], zero_padded(t[1], options), t[2].shape(),
                                                                without_padding(options))};
                        }};
          }};
}

OpEntry pooling() {
  return {"pool2d", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 3;
            Tensor input = image(in, pool);
            Pool2dOptions options;
            options.kernel_size = {in.integer(1, 3), in.integer(1, 3)};
            options.stride = {in.integer(0, 3), in.integer(0, 3)};
            options.padding = {in.integer(0, 1), in.integer(0, 1)};
            options.count_include_pad = in.flag();
            std::string name = fmt::format("kernel [{}, {}] stride [{}, {}] padding [{}, {}] count_include_pad {}",
                                           options.kernel_size[0], options.kernel_size[1], options.stride[0],
                                           options.stride[1], options.padding[0], options.padding[1],
                                           options.count_include_pad);
            if (which == 0)
              return Call{"max_pool2d " + name, {input},
                          [options](const Inputs& t) { return Outputs{max_pool2d(t[0], options)}; }, Accuracy::exact};
            if (which == 1)
              return Call{"avg_pool2d " + name, {input},
                          [options](const Inputs& t) { return Outputs{avg_pool2d(t[0], options)}; },
                          Accuracy::scaled};
            Shape out_shape = shape_or_empty([&] { return max_pool2d(input, options); });
            Tensor grad_output = read_tensor_of(in, out_shape, input.dtype());
            return Call{"max_pool2d_backward " + name, {grad_output, input}, [options](const Inputs& t) {
                          return Outputs{max_pool2d_backward(t[0], t[1], options)};
                        }, Accuracy::scaled};
          }};
}

// Whether the squares of `x`'s values, summed over groups of `group` elements,
// can exceed the f32 accumulator of the fast norm kernels (f64 inputs sum in f64).
// The largest finite |element| of t (0 when it has none).
double largest_magnitude(const Tensor& t) {
  double largest = 0;
  for (double v : t.to_vector<double>())
    if (std::isfinite(v)) largest = std::max(largest, std::abs(v));
  return largest;
}

bool squares_overflow_f32(const Tensor& x, int64_t group) {
  if (x.dtype() == DType::f64 || !is_floating(x.dtype())) return false;
  const double largest = largest_magnitude(x);
  return largest * largest * double(std::max<int64_t>(group, 1)) > double(std::numeric_limits<float>::max());
}

// Whether an affine weight times an input can pass the f32 range: the fast
// kernels may multiply them before the 1/sqrt(var + eps) that brings the
// product back (batch_norm gave inf where the f64 reference gives 2.8e38,
// found by the op fuzzer).
bool affine_overflows_f32(const Tensor& x, const Tensor& weight) {
  if (!weight.defined() || x.dtype() == DType::f64 || !is_floating(x.dtype())) return false;
  return 2 * largest_magnitude(x) * largest_magnitude(weight) > double(std::numeric_limits<float>::max());
}

// Whether normalising rows of `group` elements multiplies the input's
// rounding by more than 64: layer_norm's x - mean carries the mean's last-ulp
// error (f32: |x| * 2^-24) times 1 / sqrt(var + eps), which for rows almost
// constant is far past the dtype's tolerance (found by the op fuzzer: -1.5e-4
// for -1.8e-13 in f32, rows of 27 nearly equal values, eps 1e-5).
bool amplifies_rounding(const Tensor& x, int64_t group, double eps) {
  if (x.dtype() == DType::f64 || group <= 0 || x.numel() == 0 || eps < 0) return false;
  Tensor rows = x.detach().to(DType::f64).reshape({-1, group});
  std::vector<double> variance = var(rows, {1}, false, false).to_vector<double>();
  std::vector<double> largest = amax(abs(rows), {1}).to_vector<double>();
  for (size_t r = 0; r < variance.size(); ++r)
    if (!(largest[r] / std::sqrt(variance[r] + eps) <= 64)) return true;
  return false;
}

// The scale of a row norm's rounding error, per result element: the input's
// rounding (|x| and the mean's |mean|, in units of the dtype's epsilon) over
// the row's deviation, times |weight|, plus |bias|. x - mean cancels for an
// element near its row's mean, and a large weight carries that cancellation
// into the result: 11.5734 for 11.5749 in f32 with a weight of 1.4e4 (the op
// fuzzer's long-open layer-norm report) is f32's own rounding, not a bug.
Outputs row_norm_scale(const std::vector<Tensor>& t, const Shape& normalized, double eps, bool rms) {
  Tensor x = t[0].detach().to(DType::f64);
  Dims dims;
  for (int64_t d = x.dim() - normalized.ndim(); d < x.dim(); ++d) dims.push_back(d);
  Tensor deviation = rms ? mean(x * x, dims, true) : var(x, dims, false, true);
  Tensor scale = (rms ? abs(x) : abs(x) + abs(mean(x, dims, true))) * rsqrt(deviation + eps);
  if (t[1].defined()) scale = scale * abs(t[1].detach().to(DType::f64));
  if (t.size() > 2 && t[2].defined()) scale = scale + abs(t[2].detach().to(DType::f64));
  return Outputs{scale};
}

double read_eps(Reader& in) {
  static const std::array<double, 4> values = {1e-5, 0, 1e-3, -1};
  return values[in.byte() % values.size()];
}

OpEntry row_norms() {
  return {"layer_rms_norm", [](Reader& in, Pool& pool) {
            const bool rms = in.flag();
            Tensor x = operand(in, pool);
            Shape normalized = trailing_shape(in, pool, x);
            Tensor weight = in.flag() ? read_tensor_of(in, normalized, x.dtype()) : Tensor();
            Tensor bias = in.flag() ? read_tensor_of(in, normalized, x.dtype()) : Tensor();
            const double eps = read_eps(in);
            const bool default_eps = in.flag();
            const bool ill_conditioned = squares_overflow_f32(x, normalized.numel()) || (!rms && eps == 0) ||
                                         (!rms && amplifies_rounding(x, normalized.numel(), eps));
            const Accuracy accuracy = ill_conditioned ? Accuracy::errors_only : Accuracy::scaled;
            if (rms) {
              Call call{fmt::format("rms_norm {} eps {}", normalized, default_eps ? "default" : fmt::format("{}", eps)),
                        {x, weight}, [=](const Inputs& t) {
                          std::optional<double> e = default_eps ? std::nullopt : std::optional<double>(eps);
                          return Outputs{rms_norm(t[0], normalized, t[1], e)};
                        }, accuracy};
              // rms_norm's default eps is the dtype's epsilon: at least that much.
              const double scale_eps = default_eps ? 0 : eps;
              call.scale = [=](const Inputs& t) { return row_norm_scale(t, normalized, scale_eps, true); };
              return call;
            }
            Call call{fmt::format("layer_norm {} eps {}", normalized, eps), {x, weight, bias},
                      [=](const Inputs& t) { return Outputs{layer_norm(t[0], normalized, t[1], t[2], eps)}; },
                      accuracy};
            call.scale = [=](const Inputs& t) { return row_norm_scale(t, normalized, eps, false); };
            return call;
          }};
}

OpEntry batch_norm_op() {
  return {"batch_norm", [](Reader& in, Pool& pool) {
            Tensor x = image(in, pool);
            const int64_t channels = x.dim() >= 2 ? x.size(1) : in.in_range(0, 3);
            auto statistic = [&](bool positive) {
              if (!in.flag()) return Tensor();
              Tensor s = read_tensor_of(in, {channels}, in.flag() ? DType::f32 : x.dtype());
              return positive ? abs(s) : s;
            };
            Tensor running_mean = statistic(false);
            Tensor running_var = statistic(true);
            Tensor weight = statistic(false);
            Tensor bias = statistic(false);
            const bool training = in.flag();
            static const std::array<double, 4> momenta = {0.1, 0, 1, kNan};
            const double momentum = momenta[in.byte() % momenta.size()];
            const double eps = read_eps(in);
            const int64_t group = channels > 0 ? x.numel() / channels : 0;
            const bool ill_conditioned = (training && (eps == 0 || squares_overflow_f32(x, group))) ||
                                         affine_overflows_f32(x, weight);
            return Call{fmt::format("batch_norm training {} momentum {} eps {}", training, momentum, eps),
                        {x, running_mean, running_var, weight, bias}, [=](const Inputs& t) {
                          return Outputs{batch_norm(t[0], t[1], t[2], t[3], t[4], training, momentum, eps)};
                        }, ill_conditioned ? Accuracy::errors_only : Accuracy::rounding};
          }};
}

// Whether a class loss's terms can pass the f32 range: a class weight times a
// probability target times a log-probability (at most 2 max|x| + log C + 1),
// summed over every element. The fast kernels accumulate in f32 where the
// reference's f64 stays finite (found by the op fuzzer: bf16 weights of 3e38
// gave a mean of inf for 1.2, and inf - inf = nan for -7.4e34).
bool class_loss_overflows_f32(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t classes) {
  if (input.dtype() == DType::f64 || !is_floating(input.dtype())) return false;
  const double largest_weight = weight.defined() ? largest_magnitude(weight) : 1;
  const double largest_target = is_floating(target.dtype()) ? largest_magnitude(target) : 1;
  const double largest_log_probability = 2 * largest_magnitude(input) + std::log(double(std::max<int64_t>(classes, 1))) + 1;
  return largest_weight * largest_target * largest_log_probability * double(std::max<int64_t>(input.numel(), 1)) >
         double(std::numeric_limits<float>::max());
}

Reduction read_reduction(Reader& in) { return std::array{Reduction::mean, Reduction::sum, Reduction::none}[in.byte() % 3]; }

// cross_entropy and nll_loss: an input of classes along dim 1, class-index or probability targets.
OpEntry class_losses() {
  return {"class_loss", [](Reader& in, Pool& pool) {
            const bool nll = in.flag();
            Tensor input;
            if (in.flag()) {
              input = operand(in, pool);
            } else {
              Shape shape = read_class_shape(in);
              input = read_tensor_of(in, shape, kFloating[in.byte() % kFloating.size()]);
            }
            const int64_t classes = input.dim() == 0 ? 1 : input.size(input.dim() == 1 ? 0 : 1);
            Tensor target = !nll && in.flag() ? read_tensor_of(in, input.shape(), input.dtype())
                                              : read_indices(in, rows_of(input), classes);
            Tensor weight = in.flag() ? abs(read_tensor_of(in, {classes}, input.dtype())) : Tensor();
            const int64_t ignore_index = in.flag() ? -100 : in.integer(-1, 3);
            const Reduction reduction = read_reduction(in);
            const double smoothing = in.probability();
            std::string name = fmt::format("{} ignore_index {} reduction {} label_smoothing {}",
                                           nll ? "nll_loss" : "cross_entropy", ignore_index, int(reduction), smoothing);
            return Call{name, {input, target, weight}, [=](const Inputs& t) {
                          if (nll)
                            return Outputs{nn::functional::nll_loss(
                                t[0], t[1], {.weight = t[2], .ignore_index = ignore_index, .reduction = reduction})};
                          return Outputs{cross_entropy(t[0], t[1], {.weight = t[2], .ignore_index = ignore_index,
                                                                    .reduction = reduction,
                                                                    .label_smoothing = smoothing})};
                        }, class_loss_overflows_f32(input, target, weight, classes) ? Accuracy::errors_only
                                                                                    : Accuracy::scaled};
          }};
}

// mse, l1, smooth_l1 and binary cross-entropy with logits.
OpEntry pair_losses() {
  return {"pair_loss", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 4;
            Tensor input = operand(in, pool);
            Tensor target = partner(in, pool, input);
            const Reduction reduction = read_reduction(in);
            static const std::array<double, 5> betas = {1, 0, 0.5, -1, kNan};
            const double beta = betas[in.byte() % betas.size()];
            Tensor weight = in.flag() ? read_tensor_of(in, broadcastable_to(in, input.shape()), input.dtype()) : Tensor();
            Tensor pos_weight = in.flag() && input.dim() > 0
                                    ? read_tensor_of(in, {input.size(-1)}, input.dtype())
                                    : Tensor();
            static const std::array<const char*, 4> names = {"mse_loss", "l1_loss", "smooth_l1_loss",
                                                              "binary_cross_entropy_with_logits"};
            return Call{fmt::format("{} reduction {} beta {}", names[which], int(reduction), beta),
                        {input, target, weight, pos_weight}, [=](const Inputs& t) {
                          namespace F = nn::functional;
                          switch (which) {
                            case 0: return Outputs{F::mse_loss(t[0], t[1], reduction)};
                            case 1: return Outputs{F::l1_loss(t[0], t[1], reduction)};
                            case 2: return Outputs{F::smooth_l1_loss(t[0], t[1], reduction, beta)};
                            default:
                              return Outputs{F::binary_cross_entropy_with_logits(
                                  t[0], t[1], {.weight = t[2], .pos_weight = t[3], .reduction = reduction})};
                          }
                        }, Accuracy::scaled};
          }};
}

OpEntry dropout_op() {
  return {"dropout", [](Reader& in, Pool& pool) {
            Tensor x = operand(in, pool);
            const double p = in.probability();
            const bool training = in.flag();
            const uint8_t seed = in.byte();
            // A fresh generator per run, so both runs draw the same mask.
            return Call{fmt::format("dropout p {} training {} seed {}", p, training, seed), {x}, [=](const Inputs& t) {
                          Generator generator(seed);
                          return Outputs{dropout(t[0], p, training, &generator)};
                        }, Accuracy::exact};
          }};
}

double read_rate(Reader& in) {
  static const std::array<double, 6> values = {0.1, 0, 0.9, -0.5, 1e30, kNan};
  return values[in.byte() % values.size()];
}

// The fused updates: the parameter, its gradient, then state buffers of the
// parameter's shape (each with its own layout), then the hyper-parameters.
OpEntry optimizer_updates() {
  return {"optimizer", [](Reader& in, Pool& pool) {
            const uint8_t which = in.byte() % 6;
            Tensor param = operand(in, pool);
            Tensor grad = partner(in, pool, param);
            auto state = [&] { return in.flag() ? read_tensor_of(in, param.shape(), param.dtype()) : Tensor(); };
            Tensor s0 = state(), s1 = state(), s2 = state();
            if (which == 5 && !s0.defined()) s0 = zeros({1});  // unscale_and_check_'s found_inf flag
            const double lr = read_rate(in), decay = read_rate(in), beta = read_rate(in);
            const bool flag0 = in.flag(), flag1 = in.flag();
            const int64_t step = in.integer(1, 4);
            static const std::array<const char*, 6> names = {"sgd_update_", "adam_update_", "rmsprop_update_",
                                                              "adagrad_update_", "lion_update_", "unscale_and_check_"};
            std::string name = fmt::format("{} lr {} decay {} beta {} flags {} {} step {}", names[which], lr, decay,
                                           beta, flag0, flag1, step);
            return Call{name, {param, grad, s0, s1, s2}, [=](const Inputs& t) {
                          switch (which) {
                            case 0:
                              sgd_update_(t[0], t[1], t[2], {.lr = lr, .momentum = beta, .dampening = decay,
                                                             .weight_decay = decay, .nesterov = flag0,
                                                             .maximize = flag1, .first_step = step == 1});
                              break;
                            case 1:
                              adam_update_(t[0], t[1], t[2], t[3], t[4], {.lr = lr, .beta1 = beta, .weight_decay = decay,
                                                                          .decoupled_weight_decay = flag0,
                                                                          .amsgrad = flag1, .step = step});
                              break;
                            case 2:
                              rmsprop_update_(t[0], t[1], t[2], t[3], t[4], {.lr = lr, .alpha = beta,
                                                                             .weight_decay = decay, .momentum = decay,
                                                                             .centered = flag0, .maximize = flag1});
                              break;
                            case 3:
                              adagrad_update_(t[0], t[1], t[2], {.lr = lr, .lr_decay = beta, .weight_decay = decay,
                                                                 .maximize = flag1, .step = step});
                              break;
                            case 4:
                              lion_update_(t[0], t[1], t[2], {.lr = lr, .beta1 = beta, .weight_decay = decay,
                                                              .maximize = flag1});
                              break;
                            default: unscale_and_check_(t[0], t[2], lr); break;
                          }
                          return Outputs{};
                        }, Accuracy::rounding};
          }};
}

}  // namespace

std::vector<OpEntry> math_entries() {
  const Accuracy exact = Accuracy::exact, rounding = Accuracy::rounding, scaled = Accuracy::scaled;
  return {
      unary("neg", [](const Tensor& a) { return neg(a); }, exact),
      unary("abs", [](const Tensor& a) { return abs(a); }, exact),
      unary("relu", [](const Tensor& a) { return relu(a); }, exact),
      unary("sqrt", [](const Tensor& a) { return sqrt(a); }, exact),
      unary("exp", [](const Tensor& a) { return exp(a); }, rounding),
      unary("log", [](const Tensor& a) { return log(a); }, rounding),
      unary("log1p", [](const Tensor& a) { return log1p(a); }, rounding),
      unary("rsqrt", [](const Tensor& a) { return rsqrt(a); }, rounding),
      unary("sin", [](const Tensor& a) { return sin(a); }, rounding),
      unary("cos", [](const Tensor& a) { return cos(a); }, rounding),
      unary("tanh", [](const Tensor& a) { return tanh(a); }, rounding),
      unary("erf", [](const Tensor& a) { return erf(a); }, rounding),
      unary("sigmoid", [](const Tensor& a) { return sigmoid(a); }, rounding),
      unary("gelu", [](const Tensor& a) { return gelu(a); }, rounding),
      unary("gelu_tanh", [](const Tensor& a) { return gelu(a, GeluApproximation::tanh); }, rounding),
      unary("silu", [](const Tensor& a) { return silu(a); }, rounding),
      unary("logical_not", [](const Tensor& a) { return logical_not(a); }, exact),
      unary("isnan", [](const Tensor& a) { return isnan(a); }, exact),
      unary("isinf", [](const Tensor& a) { return isinf(a); }, exact),
      binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, exact),
      binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, exact),
      binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, exact),
      binary("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, exact),
      binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, exact),
      binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, exact),
      binary("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, rounding),
      binary("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, exact),
      binary("ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, exact),
      binary("lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, exact),
      binary("le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, exact),
      binary("gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, exact),
      binary("ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, exact),
      binary("logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, exact),
      binary("logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, exact),
      with_scalar(),
      in_place(),
      fill_or_copy(),
      activation_backward(),
      where_op(),
      clamp_op(),
      addcmul_op(),
      reduction("sum", [](const Tensor& t, const Dims& d, bool k) { return sum(t, d, k); }, scaled),
      reduction("mean", [](const Tensor& t, const Dims& d, bool k) { return mean(t, d, k); }, scaled),
      prod_op(),
      reduction("amax", [](const Tensor& t, const Dims& d, bool k) { return amax(t, d, k); }, exact),
      reduction("amin", [](const Tensor& t, const Dims& d, bool k) { return amin(t, d, k); }, exact),
      reduction("logsumexp", [](const Tensor& t, const Dims& d, bool k) { return logsumexp(t, d, k); }, rounding),
      extremes(),
      moments(),
      norm_op(),
      softmax_op(),
      products(),
      convolution(),
      pooling(),
      row_norms(),
      batch_norm_op(),
      class_losses(),
      pair_losses(),
      dropout_op(),
      optimizer_updates(),
  };
}

}  // namespace ember::fuzz
