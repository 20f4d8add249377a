// CPU layer_norm, rms_norm and batch_norm, forward and backward. Row norms:
// rows split across threads, each row in two or three vectorised passes (mean,
// centred sum of squares, output); the backward's weight and bias gradients
// sum over rows in a fixed number of row chunks, each into its own partial
// buffer, added in chunk order, so results do not depend on the thread count.
// Batch norm: channels split across threads, each channel's (batch x spatial)
// elements read as contiguous runs of `spatial`, twice in the forward (both
// moments, then the output) and twice in the backward. f16/bf16 compute in float.
// Tests: tests/core/test_normalization.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/normalization_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {

namespace {

constexpr int64_t kMaxRowChunks = 64;  // partial buffers of a row norm's weight/bias gradients

// A [n] parameter (weight or bias) in the compute type: the data itself for
// f32/f64, a converted copy in `storage` for 16-bit types; null when absent.
template <class T, class V = ComputeType<T>>
const V* in_compute_type(const void* data, int64_t n, std::vector<V>& storage) {
  if (!data) return nullptr;
  if constexpr (std::is_same_v<T, V>) {
    return static_cast<const V*>(data);
  } else {
    storage.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) storage[size_t(i)] = V(static_cast<const T*>(data)[i]);
    return storage.data();
  }
}

// One row: mean (layer_norm only), rstd = 1 / sqrt(mean((x - mean)^2) + eps),
// y = (x - mean) rstd w + b.
template <bool kCentered, class T, class V = ComputeType<T>>
void normalize_row(const T* x, T* y, int64_t n, const V* weight, const V* bias, V eps, V& mean_out, V& rstd_out) {
  V mean = 0;
  if constexpr (kCentered) {
    V sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += V(x[i]);
    mean = sum / V(n);
  }
  V squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < n; ++i) {
    const V centered = V(x[i]) - mean;
    squares += centered * centered;
  }
  const V rstd = V(1) / std::sqrt(squares / V(n) + eps);
  if (weight && bias) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = T((V(x[i]) - mean) * rstd * weight[i] + bias[i]);
  } else if (weight) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = T((V(x[i]) - mean) * rstd * weight[i]);
  } else if (bias) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = T((V(x[i]) - mean) * rstd + bias[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = T((V(x[i]) - mean) * rstd);
  }
  mean_out = mean;
  rstd_out = rstd;
}

template <bool kCentered, class T>
void row_norm(const RowNormProblem& p) {
  using V = ComputeType<T>;
  std::vector<V> weight_storage, bias_storage;
  const V* weight = in_compute_type<T>(p.weight, p.cols, weight_storage);
  const V* bias = in_compute_type<T>(p.bias, p.cols, bias_storage);
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.output);
  V* means = static_cast<V*>(p.mean);
  V* rstds = static_cast<V*>(p.rstd);
  parallel_for(0, p.rows, std::max<int64_t>(1, kParallelGrain / p.cols), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      V mean, rstd;
      normalize_row<kCentered>(in + row * p.cols, out + row * p.cols, p.cols, weight, bias, V(p.eps), mean, rstd);
      if constexpr (kCentered) means[row] = mean;
      rstds[row] = rstd;
    }
  });
}

// One row of the backward, xhat = (x - mean) rstd, dxhat = g w:
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))   (no mean(dxhat) term for rms_norm)
// and the row's share of dw (g xhat) and db (g) added into the chunk's partials.
template <bool kCentered, class T, class V = ComputeType<T>>
void row_backward(const T* x, const T* g, T* dx, int64_t n, const V* weight, V mean, V rstd, V* weight_partial,
                  V* bias_partial) {
  V sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
  for (int64_t i = 0; i < n; ++i) {
    const V xhat = (V(x[i]) - mean) * rstd;
    const V dxhat = weight ? V(g[i]) * weight[i] : V(g[i]);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  const V mean_dxhat = kCentered ? sum_dxhat / V(n) : V(0), mean_dxhat_xhat = sum_dxhat_xhat / V(n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const V xhat = (V(x[i]) - mean) * rstd;
    const V dxhat = weight ? V(g[i]) * weight[i] : V(g[i]);
    dx[i] = T(rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
  if (weight_partial) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) weight_partial[i] += V(g[i]) * (V(x[i]) - mean) * rstd;
  }
  if (bias_partial) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) bias_partial[i] += V(g[i]);
  }
}

// Sums chunk partials [chunks, n] in chunk order into out [n] (of T).
template <class T, class V>
void sum_partials(const std::vector<V>& partials, int64_t chunks, int64_t n, void* out) {
  std::vector<V> total(partials.begin(), partials.begin() + n);
  for (int64_t chunk = 1; chunk < chunks; ++chunk) {
    const V* part = partials.data() + chunk * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) total[size_t(i)] += part[i];
  }
  for (int64_t i = 0; i < n; ++i) static_cast<T*>(out)[i] = T(total[size_t(i)]);
}

template <bool kCentered, class T>
void row_norm_backward(const RowNormBackwardProblem& p) {
  using V = ComputeType<T>;
  std::vector<V> weight_storage;
  const V* weight = in_compute_type<T>(p.weight, p.cols, weight_storage);
  const T* in = static_cast<const T*>(p.input);
  const T* grad_out = static_cast<const T*>(p.grad_output);
  T* grad_in = static_cast<T*>(p.grad_input);
  const V* means = static_cast<const V*>(p.mean);
  const V* rstds = static_cast<const V*>(p.rstd);
  const int64_t chunks = std::min(p.rows, kMaxRowChunks);
  std::vector<V> weight_partials(p.grad_weight ? size_t(chunks * p.cols) : 0, V(0));
  std::vector<V> bias_partials(p.grad_bias ? size_t(chunks * p.cols) : 0, V(0));
  const int64_t chunk_elements = std::max<int64_t>(1, p.rows / chunks * p.cols);
  parallel_for(0, chunks, std::max<int64_t>(1, kParallelGrain / chunk_elements), [&](int64_t first, int64_t last) {
    for (int64_t chunk = first; chunk < last; ++chunk) {
      V* weight_partial = p.grad_weight ? weight_partials.data() + chunk * p.cols : nullptr;
      V* bias_partial = p.grad_bias ? bias_partials.data() + chunk * p.cols : nullptr;
      for (int64_t row = p.rows * chunk / chunks; row < p.rows * (chunk + 1) / chunks; ++row) {
        const int64_t offset = row * p.cols;
        row_backward<kCentered>(in + offset, grad_out + offset, grad_in + offset, p.cols, weight,
                                kCentered ? means[row] : V(0), rstds[row], weight_partial, bias_partial);
      }
    }
  });
  if (p.grad_weight) sum_partials<T>(weight_partials, chunks, p.cols, p.grad_weight);
  if (p.grad_bias) sum_partials<T>(bias_partials, chunks, p.cols, p.grad_bias);
}

// Calls run(offset) for the start of each contiguous run of channel c in a
// [batch, channels, spatial] tensor.
template <class Run>
void for_each_run(int64_t batch, int64_t channels, int64_t spatial, int64_t c, Run&& run) {
  for (int64_t n = 0; n < batch; ++n) run((n * channels + c) * spatial);
}

template <class T>
void batch_norm(const BatchNormProblem& p) {
  using V = ComputeType<T>;
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.output);
  const int64_t spatial = p.spatial;
  const double count = double(p.batch * p.spatial);
  parallel_for(0, p.channels, std::max<int64_t>(1, kParallelGrain / (p.batch * spatial)), [&](int64_t first,
                                                                                                int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      V mean, var;
      if (p.training) {
        // One pass for both moments, of x - shift with the channel's first
        // element as the shift, so a large mean does not cancel the variance
        // away; runs summed in V, runs added in double. An infinite or nan
        // first element shifts by 0 instead: inf - inf would turn a mean of
        // inf into nan (found by the op fuzzer).
        const V first_element = V(in[c * spatial]);
        const V shift = std::isfinite(double(first_element)) ? first_element : V(0);
        double sum = 0, squares = 0;
        for_each_run(p.batch, p.channels, spatial, c, [&](int64_t offset) {
          V run_sum = 0, run_squares = 0;
#pragma omp simd reduction(+ : run_sum, run_squares)
          for (int64_t i = 0; i < spatial; ++i) {
            const V shifted = V(in[offset + i]) - shift;
            run_sum += shifted;
            run_squares += shifted * shifted;
          }
          sum += double(run_sum);
          squares += double(run_squares);
        });
        const double shifted_mean = sum / count;
        mean = V(double(shift) + shifted_mean);
        // Rounding can take the difference below 0; an infinite input makes it
        // nan, which max(difference, 0) keeps (max(0, nan) would give 0).
        var = V(std::max(squares / count - shifted_mean * shifted_mean, 0.0));
        if (p.var) static_cast<V*>(p.var)[c] = var;
      } else {
        mean = static_cast<const V*>(p.running_mean)[c], var = static_cast<const V*>(p.running_var)[c];
      }
      const V rstd = V(1) / std::sqrt(var + V(p.eps));
      static_cast<V*>(p.mean)[c] = mean;
      static_cast<V*>(p.rstd)[c] = rstd;
      const V scale = p.weight ? rstd * V(static_cast<const T*>(p.weight)[c]) : rstd;
      const V shift = p.bias ? V(static_cast<const T*>(p.bias)[c]) : V(0);
      for_each_run(p.batch, p.channels, spatial, c, [&](int64_t offset) {
#pragma omp simd
        for (int64_t i = 0; i < spatial; ++i) out[offset + i] = T((V(in[offset + i]) - mean) * scale + shift);
      });
    }
  });
}

// Per channel, xhat = (x - mean) rstd and means over batch x spatial:
//   training: dx = w rstd (g - mean(g) - xhat mean(g xhat));  eval: dx = w rstd g
//   dw = sum g xhat, db = sum g.
template <class T>
void batch_norm_backward(const BatchNormBackwardProblem& p) {
  using V = ComputeType<T>;
  const T* in = static_cast<const T*>(p.input);
  const T* grad_out = static_cast<const T*>(p.grad_output);
  T* grad_in = static_cast<T*>(p.grad_input);
  const int64_t spatial = p.spatial;
  const double count = double(p.batch * p.spatial);
  parallel_for(0, p.channels, std::max<int64_t>(1, kParallelGrain / (p.batch * spatial)), [&](int64_t first,
                                                                                                int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const V mean = static_cast<const V*>(p.mean)[c], rstd = static_cast<const V*>(p.rstd)[c];
      const V weight = p.weight ? V(static_cast<const T*>(p.weight)[c]) : V(1);
      double sum_g = 0, sum_g_xhat = 0;
      for_each_run(p.batch, p.channels, spatial, c, [&](int64_t offset) {
        V run_g = 0, run_g_xhat = 0;
#pragma omp simd reduction(+ : run_g, run_g_xhat)
        for (int64_t i = 0; i < spatial; ++i) {
          const V g = V(grad_out[offset + i]);
          run_g += g;
          run_g_xhat += g * (V(in[offset + i]) - mean) * rstd;
        }
        sum_g += double(run_g);
        sum_g_xhat += double(run_g_xhat);
      });
      const V scale = weight * rstd;
      // In evaluation the statistics are constants: the input's gradient is
      // scale * g and must not read the input (an inf or nan there would
      // turn the term xhat * 0 into nan).
      if (p.training) {
        const V mean_g = V(sum_g / count), mean_g_xhat = V(sum_g_xhat / count);
        for_each_run(p.batch, p.channels, spatial, c, [&](int64_t offset) {
#pragma omp simd
          for (int64_t i = 0; i < spatial; ++i) {
            const V xhat = (V(in[offset + i]) - mean) * rstd;
            grad_in[offset + i] = T(scale * (V(grad_out[offset + i]) - mean_g - xhat * mean_g_xhat));
          }
        });
      } else {
        for_each_run(p.batch, p.channels, spatial, c, [&](int64_t offset) {
#pragma omp simd
          for (int64_t i = 0; i < spatial; ++i) grad_in[offset + i] = T(scale * V(grad_out[offset + i]));
        });
      }
      if (p.grad_weight) static_cast<T*>(p.grad_weight)[c] = T(V(sum_g_xhat));
      if (p.grad_bias) static_cast<T*>(p.grad_bias)[c] = T(V(sum_g));
    }
  });
}

}  // namespace

void register_normalization_kernels() {
  register_for<float, double, Half, BFloat16>(layer_norm_op, DeviceType::cpu,
                                              [](auto tag) { return &row_norm<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rms_norm_op, DeviceType::cpu,
                                              [](auto tag) { return &row_norm<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(layer_norm_backward_op, DeviceType::cpu,
                                              [](auto tag) { return &row_norm_backward<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(rms_norm_backward_op, DeviceType::cpu,
                                              [](auto tag) { return &row_norm_backward<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(batch_norm_op, DeviceType::cpu,
                                              [](auto tag) { return &batch_norm<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(batch_norm_backward_op, DeviceType::cpu,
                                              [](auto tag) { return &batch_norm_backward<decltype(tag)>; });
}

}  // namespace ember::cpu
