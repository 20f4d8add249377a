// Entry points of the reduction family: validate dims and dtypes, compute the
// output shape (keepdim or not), describe the input as kept x reduced dims and
// dispatch. Kernels: kernels/{reference,cpu}/reduction.cpp and softmax.cpp.
#include "core/ops/reduction.h"

#include <cmath>

#include "core/autocast_ops.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<ReductionKernel> sum_op("sum"), mean_op("mean"), prod_op("prod"), amax_op("amax"), amin_op("amin"),
    logsumexp_op("logsumexp");
Op<ReductionKernel> max_indices_op("max_indices"), min_indices_op("min_indices");
Op<void(const ReductionLoop&, bool)> var_op("var"), std_op("std");
Op<void(const ReductionLoop&, double)> norm_op("norm");
Op<SoftmaxKernel> softmax_op("softmax"), log_softmax_op("log_softmax");
GradSlot sum_grad("sum"), mean_grad("mean"), prod_grad("prod"), extreme_grad("amax_amin"),
    extreme_all_grad("max_min_all"), indexed_extreme_grad("max_min_dim"), var_grad("var"), std_grad("std"),
    logsumexp_grad("logsumexp"), norm_grad("norm"), softmax_grad("softmax"), log_softmax_grad("log_softmax");

namespace {

// Sums, products, moments, norms and softmax run in f32 under autocast (Note [Autocast]).
constexpr AutocastKind kF32 = AutocastKind::f32;

// Which dims of the input a reduction folds, and the shape of its result.
struct Reduction {
  bool reduced[kMaxDims] = {};
  Shape output_shape;
};

// `dims` empty means every dim; negative dims count from the end.
Reduction plan_reduction(const Tensor& t, const Dims& dims, bool keepdim, std::string_view op) {
  EMBER_CHECK(t.defined(), "{}: undefined tensor argument", op);
  Reduction plan;
  const int ndim = t.dim();
  if (dims.empty()) std::fill(plan.reduced, plan.reduced + ndim, true);
  for (int64_t dim : dims) {
    int64_t d = wrap_dim(dim, ndim, op);
    EMBER_CHECK(!plan.reduced[d], "{}: dim {} appears more than once in dims {}", op, d, dims);
    plan.reduced[d] = true;
  }
  for (int d = 0; d < ndim; ++d) {
    if (!plan.reduced[d]) plan.output_shape.push_back(t.shape()[d]);
    else if (keepdim) plan.output_shape.push_back(1);
  }
  return plan;
}

void require_floating(const Tensor& t, std::string_view op) {
  EMBER_CHECK(t.defined(), "{}: undefined tensor argument", op);
  EMBER_CHECK(is_floating(t.dtype()), "{}: expected a floating point input, got {}", op, t.dtype());
}

// Max, min and their indices have no identity: PyTorch refuses an empty reduction.
void require_nonempty(const Tensor& t, const Reduction& plan, std::string_view op) {
  for (int d = 0; d < t.dim(); ++d)
    EMBER_CHECK(!(plan.reduced[d] && t.shape()[d] == 0),
                "{}: cannot reduce over dim {} of size 0 (input shape {}): the operation has no identity", op, d,
                t.shape());
}

// Appends the group's dims to (shape, strides), merging an outer dim into the
// previous one when memory steps through both as one (stride[a] == stride[b] * size[b]).
// An empty input may hold a size near INT64_MAX beside its 0 ([INT64_MAX, 7,
// 0]): sizes multiply in uint64, exact whenever the true product fits (as for
// every tensor's count) and without overflow's undefined behaviour when it
// does not; then the count is 0 and no kernel walks the merged shape. A span
// that overflows merges nothing. Found by the op fuzzer (UBSan).
void merge_group(const int64_t* sizes, const int64_t* strides, int count, int64_t* out_shape, int64_t* out_strides,
                 int& out_ndim, int64_t& numel) {
  auto times = [](int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); };
  out_ndim = 0;
  numel = 1;
  for (int i = 0; i < count; ++i) {
    numel = times(numel, sizes[i]);
    int64_t span = 0;
    if (out_ndim > 0 && !__builtin_mul_overflow(strides[i], sizes[i], &span) && out_strides[out_ndim - 1] == span) {
      out_shape[out_ndim - 1] = times(out_shape[out_ndim - 1], sizes[i]);
      out_strides[out_ndim - 1] = strides[i];
    } else {
      out_shape[out_ndim] = sizes[i];
      out_strides[out_ndim] = strides[i];
      ++out_ndim;
    }
  }
  if (out_ndim == 0) {  // nothing left: one element
    out_shape[0] = 1;
    out_strides[0] = 0;
    out_ndim = 1;
  }
}

// Kept dims stay in logical order (the output is contiguous in that order).
// Reduced dims are sorted by decreasing stride when `order_free` (the result
// does not depend on visiting order), so the innermost run is the densest;
// index ops keep the logical order so that r is the logical position.
ReductionLoop make_loop(const Tensor& t, const bool reduced[], bool order_free) {
  int64_t kept_sizes[kMaxDims], kept_strides[kMaxDims], reduced_sizes[kMaxDims], reduced_strides[kMaxDims];
  int kept_count = 0, reduced_count = 0;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] == 1) continue;
    if (reduced[d]) {
      reduced_sizes[reduced_count] = t.shape()[d];
      reduced_strides[reduced_count++] = t.strides()[d];
    } else {
      kept_sizes[kept_count] = t.shape()[d];
      kept_strides[kept_count++] = t.strides()[d];
    }
  }
  if (order_free) {  // insertion sort, stable: few dims
    for (int i = 1; i < reduced_count; ++i)
      for (int j = i; j > 0 && reduced_strides[j - 1] < reduced_strides[j]; --j) {
        std::swap(reduced_strides[j - 1], reduced_strides[j]);
        std::swap(reduced_sizes[j - 1], reduced_sizes[j]);
      }
  }
  ReductionLoop loop;
  loop.input = static_cast<const char*>(t.data_ptr());
  loop.input_dtype = t.dtype();
  merge_group(kept_sizes, kept_strides, kept_count, loop.kept_shape, loop.kept_strides, loop.kept_ndim,
              loop.kept_numel);
  merge_group(reduced_sizes, reduced_strides, reduced_count, loop.reduced_shape, loop.reduced_strides,
              loop.reduced_ndim, loop.reduced_numel);
  return loop;
}

// The shared path: allocate the result and run `op` keyed by the input dtype.
template <class OpT, class... Extra>
Tensor reduce(const OpT& op, const Tensor& t, const Reduction& plan, DType output_dtype, Extra... extra) {
  Tensor out = make_tensor(plan.output_shape, output_dtype, t.device());
  if (out.numel() == 0) return out;
  ReductionLoop loop = make_loop(t, plan.reduced, /*order_free=*/true);
  loop.output = static_cast<char*>(out.data_ptr());
  op(t.device().type, t.dtype(), loop, extra...);
  return out;
}

// sum and prod of bool and integers accumulate and return in i64, as in PyTorch.
DType widened(DType dtype) { return is_floating(dtype) ? dtype : DType::i64; }

// Values and indices of the extreme along `plan`'s dims; either may be skipped.
ValuesIndices extreme(const Op<ReductionKernel>& op, const Tensor& t, const Reduction& plan, bool want_values,
                      std::string_view name) {
  require_nonempty(t, plan, name);
  ValuesIndices result;
  if (want_values) result.values = make_tensor(plan.output_shape, t.dtype(), t.device());
  result.indices = make_tensor(plan.output_shape, DType::i64, t.device());
  if (result.indices.numel() == 0) return result;
  ReductionLoop loop = make_loop(t, plan.reduced, /*order_free=*/false);
  if (want_values) loop.output = static_cast<char*>(result.values.data_ptr());
  loop.indices = result.indices.data_ptr<int64_t>();
  op(t.device().type, t.dtype(), loop);
  return result;
}

Tensor extreme_all(const Op<ReductionKernel>& op, const Tensor& t, std::string_view name) {
  EMBER_CHECK(t.defined(), "{}: undefined tensor argument", name);
  EMBER_CHECK(t.numel() > 0,
              "{}: cannot reduce an empty tensor (shape {}) over all elements: the operation has no identity; "
              "give a dim",
              name, t.shape());
  Dims all;
  ReduceParams params{all, false};
  return with_grad(extreme_all_grad, reduce(op, t, plan_reduction(t, {}, false, name), t.dtype()), {&t}, &params);
}

Tensor softmax_like(const Op<SoftmaxKernel>& op, const Tensor& t, int64_t dim) {
  require_floating(t, op.name());
  const int64_t d = wrap_dim(dim, t.dim(), op.name());
  Tensor out = make_tensor(t.shape(), t.dtype(), t.device());
  if (out.numel() == 0) return out;
  Tensor input = contiguous(t);
  SoftmaxLoop loop;
  loop.input = static_cast<const char*>(input.data_ptr());
  loop.output = static_cast<char*>(out.data_ptr());
  for (int i = 0; i < t.dim(); ++i) {
    if (i < d) loop.outer *= t.shape()[i];
    if (i > d) loop.inner *= t.shape()[i];
  }
  loop.size = t.dim() == 0 ? 1 : t.shape()[int(d)];
  op(t.device().type, t.dtype(), loop);
  return out;
}

}  // namespace

Tensor sum(const Tensor& t, const Dims& dims, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return sum(autocast_input(t, kF32), dims, keepdim);
  Reduction plan = plan_reduction(t, dims, keepdim, "sum");
  ReduceParams params{dims, keepdim};
  return with_grad(sum_grad, reduce(sum_op, t, plan, widened(t.dtype())), {&t}, &params);
}

Tensor mean(const Tensor& t, const Dims& dims, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return mean(autocast_input(t, kF32), dims, keepdim);
  require_floating(t, "mean");
  ReduceParams params{dims, keepdim};
  return with_grad(mean_grad, reduce(mean_op, t, plan_reduction(t, dims, keepdim, "mean"), t.dtype()), {&t}, &params);
}

Tensor prod(const Tensor& t, const Dims& dims, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return prod(autocast_input(t, kF32), dims, keepdim);
  Reduction plan = plan_reduction(t, dims, keepdim, "prod");
  ReduceParams params{dims, keepdim};
  return with_grad(prod_grad, reduce(prod_op, t, plan, widened(t.dtype())), {&t}, &params);
}

// Counts of the elements that decide, through sum's kernels; planned first
// so that a bad dim is reported by the op the user called.
Tensor any(const Tensor& t, const Dims& dims, bool keepdim) {
  plan_reduction(t, dims, keepdim, "any");
  return gt(sum(ne(t, 0), dims, keepdim), 0);
}

Tensor all(const Tensor& t, const Dims& dims, bool keepdim) {
  plan_reduction(t, dims, keepdim, "all");
  return eq(sum(eq(t, 0), dims, keepdim), 0);
}

bool equal(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "equal: undefined tensor");
  return a.shape() == b.shape() && all(eq(a, b)).item<bool>();
}

Tensor amax(const Tensor& t, const Dims& dims, bool keepdim) {
  Reduction plan = plan_reduction(t, dims, keepdim, "amax");
  require_nonempty(t, plan, "amax");
  ReduceParams params{dims, keepdim};
  return with_grad(extreme_grad, reduce(amax_op, t, plan, t.dtype()), {&t}, &params);
}

Tensor amin(const Tensor& t, const Dims& dims, bool keepdim) {
  Reduction plan = plan_reduction(t, dims, keepdim, "amin");
  require_nonempty(t, plan, "amin");
  ReduceParams params{dims, keepdim};
  return with_grad(extreme_grad, reduce(amin_op, t, plan, t.dtype()), {&t}, &params);
}

Tensor max(const Tensor& t) { return extreme_all(amax_op, t, "max"); }
Tensor min(const Tensor& t) { return extreme_all(amin_op, t, "min"); }

ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim) {
  ValuesIndices result = extreme(max_indices_op, t, plan_reduction(t, {dim}, keepdim, "max"), true, "max");
  DimParams params{dim, keepdim};
  record_grad(indexed_extreme_grad, {&t}, {&result.values, &result.indices}, &params);
  return result;
}

ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim) {
  ValuesIndices result = extreme(min_indices_op, t, plan_reduction(t, {dim}, keepdim, "min"), true, "min");
  DimParams params{dim, keepdim};
  record_grad(indexed_extreme_grad, {&t}, {&result.values, &result.indices}, &params);
  return result;
}

Tensor argmax(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  Reduction plan = plan_reduction(t, dim ? Dims{*dim} : Dims{}, keepdim, "argmax");
  return extreme(max_indices_op, t, plan, false, "argmax").indices;
}

Tensor argmin(const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
  Reduction plan = plan_reduction(t, dim ? Dims{*dim} : Dims{}, keepdim, "argmin");
  return extreme(min_indices_op, t, plan, false, "argmin").indices;
}

Tensor var(const Tensor& t, const Dims& dims, bool unbiased, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return var(autocast_input(t, kF32), dims, unbiased, keepdim);
  require_floating(t, "var");
  MomentParams params{dims, keepdim, unbiased};
  return with_grad(var_grad, reduce(var_op, t, plan_reduction(t, dims, keepdim, "var"), t.dtype(), unbiased), {&t},
                   &params);
}

Tensor std(const Tensor& t, const Dims& dims, bool unbiased, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return std(autocast_input(t, kF32), dims, unbiased, keepdim);
  require_floating(t, "std");
  MomentParams params{dims, keepdim, unbiased};
  return with_grad(std_grad, reduce(std_op, t, plan_reduction(t, dims, keepdim, "std"), t.dtype(), unbiased), {&t},
                   &params);
}

Tensor logsumexp(const Tensor& t, const Dims& dims, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return logsumexp(autocast_input(t, kF32), dims, keepdim);
  // Integer and bool inputs reduce in f32, as torch.logsumexp gives them.
  if (t.defined() && !is_floating(t.dtype())) return logsumexp(t.to(DType::f32), dims, keepdim);
  require_floating(t, "logsumexp");
  ReduceParams params{dims, keepdim};
  return with_grad(logsumexp_grad, reduce(logsumexp_op, t, plan_reduction(t, dims, keepdim, "logsumexp"), t.dtype()),
                   {&t}, &params);
}

Tensor norm(const Tensor& t, double p, const Dims& dims, bool keepdim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return norm(autocast_input(t, kF32), p, dims, keepdim);
  require_floating(t, "norm");
  EMBER_CHECK(!std::isnan(p), "norm: p must be a number, got nan");
  Reduction plan = plan_reduction(t, dims, keepdim, "norm");
  // A negative p over nothing is 0^(1/p), inf: refused as -inf is (as
  // torch.linalg.vector_norm), not returned.
  if (p == INFINITY) require_nonempty(t, plan, "norm (p = inf)");
  if (p < 0) require_nonempty(t, plan, fmt::format("norm (p = {})", p));
  NormParams params{dims, keepdim, p};
  return with_grad(norm_grad, reduce(norm_op, t, plan, t.dtype(), p), {&t}, &params);
}

Tensor softmax(const Tensor& t, int64_t dim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return softmax(autocast_input(t, kF32), dim);
  return with_grad(softmax_grad, softmax_like(softmax_op, t, dim), {&t}, &dim);
}
Tensor log_softmax(const Tensor& t, int64_t dim) {
  if (autocast_wants(kF32, {&t})) [[unlikely]]
    return log_softmax(autocast_input(t, kF32), dim);
  return with_grad(log_softmax_grad, softmax_like(log_softmax_op, t, dim), {&t}, &dim);
}

}  // namespace ember
