// CUDA cross-entropy, forward and backward (the formulas of
// core/ops/loss_kernels.h), fused: a team of lanes takes a row (a warp for few
// classes, up to a block for many) and computes its log-sum-exp in one pass
// (exp_sum.cuh), then the loss or the gradient. Label smoothing and
// probability targets need sums against the final maximum, a second pass over
// the row (the row is then in cache). The forward's per-row losses and
// weights go to a workspace that one block sums in a fixed order, in double as
// the CPU kernel does: no float atomics, the same result on every run. A class
// index out of range is reported through the scratch flag (runtime.h): the
// first such row, as the CPU kernel finds it. Tests: tests/cuda/test_cuda_softmax_loss.cpp.
#include <cmath>
#include <limits>

#include "core/ops/loss_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/exp_sum.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/team_reduce.cuh"
#include "kernels/cuda/workspace.h"

namespace ember::cuda {
namespace {

// The scratch flag of an out-of-range class index: rows - row of the first
// such row (0: none; atomicMax keeps the lowest row), and its value, filled in
// by the totals kernel.
struct InvalidTargetFlag {
  unsigned long long rows_after = 0;
  int64_t value = 0;
};


// A CrossEntropyProblem as the kernels read it.
template <class T>
struct Rows {
  using V = ComputeType<T>;
  int64_t rows = 0, classes = 0;
  bool probabilities = false, target_is_i64 = true;
  int64_t ignore_index = -100;
  V smoothing = 0, per_class = 0;  // eps and eps / C
  Reduction reduction = Reduction::mean;
  const T* input = nullptr;
  const void* target = nullptr;
  const T* weight = nullptr;

  explicit Rows(const CrossEntropyProblem& p)
      : rows(p.rows), classes(p.classes), probabilities(p.probabilities), target_is_i64(p.target_dtype == DType::i64),
        ignore_index(p.ignore_index), smoothing(V(p.label_smoothing)),
        per_class(V(p.label_smoothing / double(p.classes))), reduction(p.reduction),
        input(static_cast<const T*>(p.input)), target(p.target), weight(static_cast<const T*>(p.weight)) {}

  __device__ int64_t class_index(int64_t row) const {
    return target_is_i64 ? static_cast<const int64_t*>(target)[row] : static_cast<const int32_t*>(target)[row];
  }
  // The row of probability targets; null for class indices.
  __device__ const T* probability_row(int64_t row) const {
    return probabilities ? static_cast<const T*>(target) + row * classes : nullptr;
  }
  __device__ V weight_at(int64_t c) const { return weight ? load(weight + c) : V(1); }
  // a_c of a probability row q: w_c ((1 - eps) q_c + eps / C).
  __device__ V probability_coefficient(const T* q, int64_t c) const {
    return weight_at(c) * ((V(1) - smoothing) * load(q + c) + per_class);
  }
};

// What the forward writes besides the loss.
template <class T>
struct ForwardOutputs {
  T* loss;                        // [rows] for Reduction::none, else one element
  ComputeType<T>* row_max;        // [rows]
  ComputeType<T>* log_sum;        // [rows]
  ComputeType<T>* total_weight;   // one element
  double* row_loss;               // workspace [rows]
  double* row_weight;             // workspace [rows]
  InvalidTargetFlag* invalid;     // null for probability targets
};

// Per row: lse = m + log(s); the loss as the CPU kernel computes it, with
// terms against the maximum m, so logits of large magnitude keep their precision:
//   class index t: (1 - eps) w_t ((m - x_t) + log s) + eps / C (W log s - sum_c w_c (x_c - m))
//   probabilities: A log s - sum_c a_c (x_c - m)
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_kernel(Rows<T> p, ForwardOutputs<T> out, int64_t groups) {
  using V = ComputeType<T>;
  const V nan = std::numeric_limits<V>::quiet_NaN();
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool active = row < p.rows;
    const T* x = p.input + (active ? row : 0) * p.classes;
    int64_t target = 0;
    bool counted = true, in_range = true;
    if (active && !p.probabilities) {
      target = p.class_index(row);
      counted = target != p.ignore_index;
      in_range = target >= 0 && target < p.classes;
      if (counted && !in_range && threadIdx.x == 0)
        atomicMax(&out.invalid->rows_after, static_cast<unsigned long long>(p.rows - row));
    }
    ExpSum<V> line = exp_sum_identity<V>();
    if (active)
      for (int64_t c = threadIdx.x; c < p.classes; c += blockDim.x) line = exp_sum_add(line, load(x + c));
    line = team_reduce(line, ExpSumMerge{}, /*broadcast=*/true);
    // All -inf or a +inf: exp(x - m) is nan at inf - inf, so are the row's
    // log-softmax and loss, as in PyTorch and the CPU kernel.
    const bool finite = !isinf(line.max);
    const V m = finite ? line.max : nan, log_sum = finite ? log(line.sum) : nan;
    // (W or A, sum_c w_c (x_c - m) or sum_c a_c (x_c - m)); every block takes
    // this branch or none, as team_reduce needs.
    Pair<V> sums{V(0), V(0)};
    if (p.probabilities || p.smoothing > V(0)) {
      if (active) {
        const T* q = p.probability_row(row);
        for (int64_t c = threadIdx.x; c < p.classes; c += blockDim.x) {
          const V a = p.probabilities ? p.probability_coefficient(q, c) : p.weight_at(c);
          sums.first += a;
          sums.second += a * (load(x + c) - m);
        }
      }
      sums = team_reduce(sums, PairSum{}, /*broadcast=*/false);
    }
    if (active && threadIdx.x == 0) {
      V loss = 0, weight = 1;
      if (p.probabilities) {
        loss = sums.first * log_sum - sums.second;
      } else if (!counted || !in_range) {
        weight = 0;
      } else {
        weight = p.weight_at(target);
        loss = (V(1) - p.smoothing) * weight * ((m - load(x + target)) + log_sum);
        if (p.smoothing > V(0)) loss += p.per_class * (sums.first * log_sum - sums.second);
      }
      out.row_max[row] = m;
      out.log_sum[row] = log_sum;
      out.row_loss[row] = double(loss);
      out.row_weight[row] = double(weight);
      if (p.reduction == Reduction::none) store(out.loss + row, loss);
    }
  }
}

// One block: the mean's denominator, the sum or mean, and the value of the
// first invalid class index. Rows are summed in double, each thread a fixed
// stride of them, then in a fixed tree.
template <class T>
__global__ void __launch_bounds__(kBlockThreads) cross_entropy_totals_kernel(Rows<T> p, ForwardOutputs<T> out) {
  using V = ComputeType<T>;
  Pair<double> totals{0.0, 0.0};
  for (int64_t row = threadIdx.x; row < p.rows; row += blockDim.x) {
    totals.first += out.row_loss[row];
    totals.second += out.row_weight[row];
  }
  totals = team_reduce(totals, PairSum{}, /*broadcast=*/false);
  if (threadIdx.x != 0) return;
  *out.total_weight = V(totals.second);
  if (p.reduction == Reduction::sum) store(out.loss, V(totals.first));
  if (p.reduction == Reduction::mean) store(out.loss, V(totals.first / totals.second));
  if (out.invalid && out.invalid->rows_after != 0)
    out.invalid->value = p.class_index(p.rows - int64_t(out.invalid->rows_after));
}

template <class T>
void cross_entropy(const CrossEntropyProblem& problem) {
  using V = ComputeType<T>;
  const Rows<T> p(problem);
  Workspace row_values(size_t(p.rows) * 2 * sizeof(double));
  ForwardOutputs<T> out{static_cast<T*>(problem.loss),
                        static_cast<V*>(problem.row_max),
                        static_cast<V*>(problem.log_sum),
                        static_cast<V*>(problem.total_weight),
                        row_values.as<double>(),
                        row_values.as<double>() + p.rows,
                        nullptr};
  if (!p.probabilities) out.invalid = static_cast<InvalidTargetFlag*>(scratch_flag(sizeof(InvalidTargetFlag)));
  if (p.rows > 0) {
    const TeamLayout layout = team_layout(p.rows, p.classes);
    const size_t shared = std::max(team_shared_bytes<ExpSum<V>>(layout.block), team_shared_bytes<Pair<V>>(layout.block));
    cross_entropy_kernel<T><<<layout.grid, layout.block, shared, current_stream()>>>(p, out, layout.groups);
    check_launch("cross_entropy");
  }
  const dim3 block(kBlockThreads);
  cross_entropy_totals_kernel<T><<<1, block, team_shared_bytes<Pair<double>>(block), current_stream()>>>(p, out);
  check_launch("cross_entropy");
  if (!out.invalid) return;
  check_scratch_flag(sizeof(InvalidTargetFlag), [rows = p.rows, classes = problem.classes,
                                                  ignore_index = problem.ignore_index](const void* flag) {
    const InvalidTargetFlag& found = *static_cast<const InvalidTargetFlag*>(flag);
    if (found.rows_after != 0)
      throw_invalid_target(classes, ignore_index, {rows - int64_t(found.rows_after), found.value});
  });
}

// What the backward reads besides the forward's operands.
template <class T>
struct BackwardOperands {
  const T* grad_output;                   // [rows] for Reduction::none, else one element
  const ComputeType<T>* row_max;          // [rows]
  const ComputeType<T>* log_sum;          // [rows]
  const ComputeType<T>* total_weight;     // one element
  T* grad_input;                          // [rows, classes]
};

// grad_c = g (A p_c - a_c), p_c = exp((x_c - m) - log_sum), g the row's grad_output
// (over the total weight for the mean). A = sum_c a_c: for class indices
// (1 - eps) w_t + eps / C W, needing a pass over the weights for W only with
// both weights and smoothing; for probabilities a pass over the row.
// A class index out of range (the forward refuses it) contributes no target
// term, as in the reference kernel.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_backward_kernel(Rows<T> p, BackwardOperands<T> b, int64_t groups) {
  using V = ComputeType<T>;
  const V mean_scale = p.reduction == Reduction::mean ? V(1) / *b.total_weight : V(1);
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool active = row < p.rows;
    const T* x = p.input + (active ? row : 0) * p.classes;
    const T* q = active ? p.probability_row(row) : nullptr;
    int64_t target = -1;
    bool counted = true;
    if (active && !p.probabilities) {
      const int64_t index = p.class_index(row);
      counted = index != p.ignore_index;
      if (index >= 0 && index < p.classes) target = index;
    }
    const V target_weight = target >= 0 ? (V(1) - p.smoothing) * p.weight_at(target) : V(0);
    // sum_c a_c for probabilities, else W: C without weights, or summed below.
    V coefficient_sum = (p.probabilities || p.weight) ? V(0) : V(p.classes);
    if (p.probabilities || (p.weight && p.smoothing > V(0))) {  // the same branch for every block
      if (active)
        for (int64_t c = threadIdx.x; c < p.classes; c += blockDim.x)
          coefficient_sum += p.probabilities ? p.probability_coefficient(q, c) : p.weight_at(c);
      coefficient_sum = team_reduce(coefficient_sum, SumOp{}, /*broadcast=*/true);
    }
    if (!active) continue;
    const V total = p.probabilities ? coefficient_sum : target_weight + p.per_class * coefficient_sum;
    const V g = load(b.grad_output + (p.reduction == Reduction::none ? row : 0)) * mean_scale;
    const V m = b.row_max[row], log_sum = b.log_sum[row];
    T* grad = b.grad_input + row * p.classes;
    for (int64_t c = threadIdx.x; c < p.classes; c += blockDim.x) {
      V value = 0;
      if (counted) {
        const V a = p.probabilities ? p.probability_coefficient(q, c)
                                    : p.per_class * p.weight_at(c) + (c == target ? target_weight : V(0));
        value = g * (total * exp((load(x + c) - m) - log_sum) - a);
      }
      store(grad + c, value);
    }
  }
}

template <class T>
void cross_entropy_backward(const CrossEntropyBackwardProblem& problem) {
  using V = ComputeType<T>;
  const Rows<T> p(problem.forward);
  if (p.rows == 0) return;
  const BackwardOperands<T> b{static_cast<const T*>(problem.grad_output),
                              static_cast<const V*>(problem.forward.row_max),
                              static_cast<const V*>(problem.forward.log_sum),
                              static_cast<const V*>(problem.forward.total_weight),
                              static_cast<T*>(problem.grad_input)};
  const TeamLayout layout = team_layout(p.rows, p.classes);
  cross_entropy_backward_kernel<T><<<layout.grid, layout.block, team_shared_bytes<V>(layout.block),
                                     current_stream()>>>(p, b, layout.groups);
  check_launch("cross_entropy_backward");
}

}  // namespace

void register_loss_kernels() {
  register_for<float, double, Half, BFloat16>(cross_entropy_op, DeviceType::cuda,
                                              [](auto tag) { return &cross_entropy<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(cross_entropy_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &cross_entropy_backward<decltype(tag)>; });
}

}  // namespace ember::cuda
