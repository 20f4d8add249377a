// CUDA layer_norm, rms_norm and batch_norm, forward and backward. Row norms:
// a team of lanes per row (team_reduce.cuh), the row read for its mean, its
// centred sum of squares and the output, as the CPU kernel's passes. Sums over
// rows (the weight and bias gradients) and over batch x spatial (batch norm's
// statistics and gradient sums) are reductions run by the engine of
// reduce_launcher.cuh: per-block partials merged in a fixed order, no float
// atomics, the same result on every run. Batch norm's output and input
// gradient are element-wise passes over the statistics. f16/bf16 compute in
// float, statistics in ComputeType<T>. Tests: tests/cuda/test_cuda_normalization.cpp.
#include <cmath>

#include "core/ops/normalization_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/reduce_launcher.cuh"
#include "kernels/cuda/team_reduce.cuh"
#include "kernels/cuda/workspace.h"

namespace ember::cuda {
namespace {


template <class T>
__device__ __forceinline__ ComputeType<T> load_or(const T* data, int64_t i, ComputeType<T> absent) {
  return data ? load(data + i) : absent;
}

// ---- layer_norm and rms_norm ------------------------------------------------

// y = (x - mean) rstd w + b per row, rstd = 1 / sqrt(mean((x - mean)^2) + eps);
// rms_norm (kCentered false) takes mean = 0 and has no bias.
template <bool kCentered, class T>
__global__ void __launch_bounds__(kBlockThreads) row_norm_kernel(RowNormProblem p, int64_t groups) {
  using V = ComputeType<T>;
  const int64_t cols = p.cols;
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool active = row < p.rows;
    const T* x = static_cast<const T*>(p.input) + (active ? row : 0) * cols;
    V mean = 0;
    if constexpr (kCentered) {
      V sum = 0;
      if (active)
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += load(x + c);
      mean = team_reduce(sum, SumOp{}, /*broadcast=*/true) / V(cols);
    }
    V squares = 0;
    if (active)
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const V centered = load(x + c) - mean;
        squares += centered * centered;
      }
    const V rstd = V(1) / sqrt(team_reduce(squares, SumOp{}, /*broadcast=*/true) / V(cols) + V(p.eps));
    if (!active) continue;
    T* y = static_cast<T*>(p.output) + row * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      V value = (load(x + c) - mean) * rstd;
      if (weight) value *= load(weight + c);
      if (bias) value += load(bias + c);
      store(y + c, value);
    }
    if (threadIdx.x == 0) {
      if constexpr (kCentered) static_cast<V*>(p.mean)[row] = mean;
      static_cast<V*>(p.rstd)[row] = rstd;
    }
  }
}

// With xhat = (x - mean) rstd and dxhat = g w, per row:
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))   (no mean(dxhat) for rms_norm)
template <bool kCentered, class T>
__global__ void __launch_bounds__(kBlockThreads) row_norm_backward_kernel(RowNormBackwardProblem p, int64_t groups) {
  using V = ComputeType<T>;
  const int64_t cols = p.cols;
  const T* weight = static_cast<const T*>(p.weight);
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t row = group * blockDim.y + threadIdx.y;
    const bool active = row < p.rows;
    const int64_t first = (active ? row : 0) * cols;
    const T* x = static_cast<const T*>(p.input) + first;
    const T* g = static_cast<const T*>(p.grad_output) + first;
    const V mean = kCentered && active ? static_cast<const V*>(p.mean)[row] : V(0);
    const V rstd = active ? static_cast<const V*>(p.rstd)[row] : V(0);
    Pair<V> sums{V(0), V(0)};  // sum(dxhat), sum(dxhat xhat)
    if (active)
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const V xhat = (load(x + c) - mean) * rstd, dxhat = load(g + c) * load_or(weight, c, V(1));
        sums.first += dxhat;
        sums.second += dxhat * xhat;
      }
    sums = team_reduce(sums, PairSum{}, /*broadcast=*/true);
    if (!active) continue;
    const V mean_dxhat = kCentered ? sums.first / V(cols) : V(0), mean_dxhat_xhat = sums.second / V(cols);
    T* dx = static_cast<T*>(p.grad_input) + first;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const V xhat = (load(x + c) - mean) * rstd, dxhat = load(g + c) * load_or(weight, c, V(1));
      store(dx + c, rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// dw_c = sum over rows of g xhat, db_c = sum over rows of g: a reduction over
// the rows (reduced index r = row) for each column c.
template <class T>
struct RowNormParameterGrads {
  using V = ComputeType<T>;
  using Acc = Pair<V>;
  const T* grad_output;
  const T* input;
  const V* mean;  // null for rms_norm
  const V* rstd;
  T* grad_weight;  // either may be null
  T* grad_bias;
  __device__ Acc read(int64_t offset, int64_t row) const {
    const V g = load(grad_output + offset), mean_of_row = mean ? mean[row] : V(0);
    return {g * (load(input + offset) - mean_of_row) * rstd[row], g};
  }
  __device__ Acc identity() const { return {V(0), V(0)}; }
  __device__ Acc step(Acc a, Acc v, int64_t) const { return {a.first + v.first, a.second + v.second}; }
  __device__ Acc merge(Acc a, Acc b) const { return step(a, b, 0); }
  __device__ void store(int64_t c, Acc a, int64_t) const {
    if (grad_weight) cuda::store(grad_weight + c, a.first);
    if (grad_bias) cuda::store(grad_bias + c, a.second);
  }
};

// The geometry of a sum over the rows of [rows, cols], one output per column.
ReductionLoop over_rows(int64_t rows, int64_t cols) {
  ReductionLoop loop;
  loop.kept_numel = cols, loop.kept_shape[0] = cols, loop.kept_strides[0] = 1;
  loop.reduced_numel = rows, loop.reduced_shape[0] = rows, loop.reduced_strides[0] = cols;
  return loop;
}

template <bool kCentered, class T>
void row_norm(const RowNormProblem& p) {
  if (p.rows == 0 || p.cols == 0) return;
  const TeamLayout layout = team_layout(p.rows, p.cols);
  row_norm_kernel<kCentered, T><<<layout.grid, layout.block, team_shared_bytes<ComputeType<T>>(layout.block),
                                  current_stream()>>>(p, layout.groups);
  check_launch(kCentered ? "layer_norm" : "rms_norm");
}

template <bool kCentered, class T>
void row_norm_backward(const RowNormBackwardProblem& p) {
  using V = ComputeType<T>;
  if (p.rows == 0 || p.cols == 0) return;
  const char* name = kCentered ? "layer_norm_backward" : "rms_norm_backward";
  const TeamLayout layout = team_layout(p.rows, p.cols);
  row_norm_backward_kernel<kCentered, T><<<layout.grid, layout.block, team_shared_bytes<Pair<V>>(layout.block),
                                           current_stream()>>>(p, layout.groups);
  check_launch(name);
  if (!p.grad_weight && !p.grad_bias) return;
  const RowNormParameterGrads<T> grads{static_cast<const T*>(p.grad_output), static_cast<const T*>(p.input),
                                       static_cast<const V*>(p.mean),       static_cast<const V*>(p.rstd),
                                       static_cast<T*>(p.grad_weight),      static_cast<T*>(p.grad_bias)};
  launch_reduction(over_rows(p.rows, p.cols), grads, name);
}

// ---- batch_norm -------------------------------------------------------------

// The geometry of a per-channel reduction over batch x spatial of a
// [batch, channels, spatial] tensor: one output per channel, size-1 dims
// dropped and batch and spatial merged when there is one channel.
ReductionLoop over_channels(int64_t batch, int64_t channels, int64_t spatial) {
  ReductionLoop loop;
  loop.kept_numel = channels, loop.kept_shape[0] = channels, loop.kept_strides[0] = spatial;
  loop.reduced_numel = batch * spatial;
  int ndim = 0;
  if (batch > 1) loop.reduced_shape[ndim] = batch, loop.reduced_strides[ndim++] = channels * spatial;
  if (spatial > 1) {
    if (ndim == 1 && channels == 1) loop.reduced_shape[0] *= spatial, loop.reduced_strides[0] = 1;
    else loop.reduced_shape[ndim] = spatial, loop.reduced_strides[ndim++] = 1;
  }
  if (ndim == 0) loop.reduced_shape[ndim] = 1, loop.reduced_strides[ndim++] = 0;
  loop.reduced_ndim = ndim;
  return loop;
}

// A channel's mean and biased variance in one pass, as the CPU kernel: sums of
// x - shift and its square, the shift being the channel's first element (so a
// large mean does not cancel the variance away), or 0 when that is not finite
// (inf - inf would turn a mean of inf into nan).
template <class T>
struct BatchStatistics {
  using V = ComputeType<T>;
  struct Acc {
    V shift, sum, squares;
  };
  const T* input;
  V* mean;
  V* rstd;
  V* var;  // may be null
  double eps;
  __device__ V read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return {V(0), V(0), V(0)}; }
  __device__ Acc start(int64_t, int64_t offset) const {
    const V first = load(input + offset);
    return {isfinite(first) ? first : V(0), V(0), V(0)};
  }
  __device__ Acc step(Acc a, V x, int64_t) const {
    const V shifted = x - a.shift;
    return {a.shift, a.sum + shifted, a.squares + shifted * shifted};
  }
  __device__ Acc merge(Acc a, Acc b) const { return {a.shift, a.sum + b.sum, a.squares + b.squares}; }
  __device__ void store(int64_t c, Acc a, int64_t count) const {
    const double shifted_mean = double(a.sum) / double(count);
    // Rounding can take the difference below 0; an infinite input makes it
    // nan, which this keeps (as std::max(difference, 0.0) on the CPU).
    const double difference = double(a.squares) / double(count) - shifted_mean * shifted_mean;
    const V variance = V(difference < 0.0 ? 0.0 : difference);
    mean[c] = V(double(a.shift) + shifted_mean);
    rstd[c] = V(1) / sqrt(variance + V(eps));
    if (var) var[c] = variance;
  }
};

template <class V>
__global__ void running_statistics_kernel(const V* running_mean, const V* running_var, V* mean, V* rstd,
                                          int64_t channels, double eps) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    mean[c] = running_mean[c];
    rstd[c] = V(1) / sqrt(running_var[c] + V(eps));
  }
}

// y = (x - mean_c) rstd_c w_c + b_c, element by element.
template <class T>
__global__ void batch_norm_output_kernel(BatchNormProblem p, int64_t numel) {
  using V = ComputeType<T>;
  const T* input = static_cast<const T*>(p.input);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  const V* mean = static_cast<const V*>(p.mean);
  const V* rstd = static_cast<const V*>(p.rstd);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / p.spatial % p.channels;
    const V scale = rstd[c] * load_or(weight, c, V(1));
    store(static_cast<T*>(p.output) + i, (load(input + i) - mean[c]) * scale + load_or(bias, c, V(0)));
  }
}

template <class T>
void batch_norm(const BatchNormProblem& p) {
  using V = ComputeType<T>;
  const int64_t numel = p.batch * p.channels * p.spatial;
  if (numel == 0) return;
  if (p.training) {
    const BatchStatistics<T> statistics{static_cast<const T*>(p.input), static_cast<V*>(p.mean),
                                        static_cast<V*>(p.rstd), static_cast<V*>(p.var), p.eps};
    launch_reduction(over_channels(p.batch, p.channels, p.spatial), statistics, "batch_norm");
  } else {
    running_statistics_kernel<V><<<blocks_for(p.channels, 256), 256, 0, current_stream()>>>(
        static_cast<const V*>(p.running_mean), static_cast<const V*>(p.running_var), static_cast<V*>(p.mean),
        static_cast<V*>(p.rstd), p.channels, p.eps);
    check_launch("batch_norm");
  }
  batch_norm_output_kernel<T><<<blocks_for(numel, 256), 256, 0, current_stream()>>>(p, numel);
  check_launch("batch_norm");
}

// A channel's sum of g and of g xhat, xhat = (x - mean) rstd: the weight and
// bias gradients, and (training) the means the input gradient subtracts,
// kept in `sums` [2, channels]. The channel's mean and rstd ride in the state.
template <class T>
struct BatchGradientSums {
  using V = ComputeType<T>;
  struct Acc {
    V sum_g, sum_g_xhat, mean, rstd;
  };
  const T* grad_output;
  const T* input;
  const V* mean;
  const V* rstd;
  V* sums;
  int64_t channels;
  T* grad_weight;  // either may be null
  T* grad_bias;
  __device__ Pair<V> read(int64_t offset, int64_t) const { return {load(grad_output + offset), load(input + offset)}; }
  __device__ Acc identity() const { return {V(0), V(0), V(0), V(0)}; }
  __device__ Acc start(int64_t c, int64_t) const { return {V(0), V(0), mean[c], rstd[c]}; }
  __device__ Acc step(Acc a, Pair<V> gx, int64_t) const {
    return {a.sum_g + gx.first, a.sum_g_xhat + gx.first * (gx.second - a.mean) * a.rstd, a.mean, a.rstd};
  }
  __device__ Acc merge(Acc a, Acc b) const { return {a.sum_g + b.sum_g, a.sum_g_xhat + b.sum_g_xhat, a.mean, a.rstd}; }
  __device__ void store(int64_t c, Acc a, int64_t) const {
    sums[c] = a.sum_g;
    sums[channels + c] = a.sum_g_xhat;
    if (grad_weight) cuda::store(grad_weight + c, a.sum_g_xhat);
    if (grad_bias) cuda::store(grad_bias + c, a.sum_g);
  }
};

// training: dx = w rstd (g - mean(g) - xhat mean(g xhat));  eval: dx = w rstd g.
template <class T>
__global__ void batch_norm_input_grad_kernel(BatchNormBackwardProblem p, const ComputeType<T>* sums, int64_t numel) {
  using V = ComputeType<T>;
  const double count = double(p.batch * p.spatial);
  const T* weight = static_cast<const T*>(p.weight);
  const V* mean = static_cast<const V*>(p.mean);
  const V* rstd = static_cast<const V*>(p.rstd);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / p.spatial % p.channels;
    const V scale = load_or(weight, c, V(1)) * rstd[c], g = load(static_cast<const T*>(p.grad_output) + i);
    V dx = scale * g;
    if (p.training) {
      const V xhat = (load(static_cast<const T*>(p.input) + i) - mean[c]) * rstd[c];
      const V mean_g = V(double(sums[c]) / count), mean_g_xhat = V(double(sums[p.channels + c]) / count);
      dx = scale * (g - mean_g - xhat * mean_g_xhat);
    }
    store(static_cast<T*>(p.grad_input) + i, dx);
  }
}

template <class T>
void batch_norm_backward(const BatchNormBackwardProblem& p) {
  using V = ComputeType<T>;
  const int64_t numel = p.batch * p.channels * p.spatial;
  if (numel == 0) return;
  Workspace sums(size_t(2 * p.channels) * sizeof(V));
  if (p.training || p.grad_weight || p.grad_bias) {
    const BatchGradientSums<T> reducer{static_cast<const T*>(p.grad_output), static_cast<const T*>(p.input),
                                       static_cast<const V*>(p.mean),        static_cast<const V*>(p.rstd),
                                       sums.as<V>(),                         p.channels,
                                       static_cast<T*>(p.grad_weight),       static_cast<T*>(p.grad_bias)};
    launch_reduction(over_channels(p.batch, p.channels, p.spatial), reducer, "batch_norm_backward");
  }
  batch_norm_input_grad_kernel<T><<<blocks_for(numel, 256), 256, 0, current_stream()>>>(p, sums.as<V>(), numel);
  check_launch("batch_norm_backward");
}

}  // namespace

void register_normalization_kernels() {
  register_for<float, double, Half, BFloat16>(layer_norm_op, DeviceType::cuda,
                                              [](auto tag) { return &row_norm<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rms_norm_op, DeviceType::cuda,
                                              [](auto tag) { return &row_norm<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(layer_norm_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &row_norm_backward<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rms_norm_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &row_norm_backward<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(batch_norm_op, DeviceType::cuda,
                                              [](auto tag) { return &batch_norm<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(batch_norm_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &batch_norm_backward<decltype(tag)>; });
}

}  // namespace ember::cuda
