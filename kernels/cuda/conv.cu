// CUDA convolution through cuDNN (forward, backward data, backward filter;
// the algorithm cuDNN's heuristics rank first, its workspace from the caching
// allocator; descriptors and algorithm kept per problem, Note [cuDNN plan
// cache]) and pooling as direct kernels: a thread per output element for
// the forwards, a thread per input element for max pooling's backward, which
// gathers the gradients of every window whose first maximum it is, in the
// CPU's order, so no two threads write one element (no atomics).
#include <cudnn.h>

#include "core/ops/conv_kernels.h"
#include "core/ops/linalg.h"
#include "core/primitive_cache.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/workspace.h"

namespace ember::cuda {
namespace {

// ---- cuDNN convolution ---------------------------------------------------------

void check_cudnn(cudnnStatus_t status, const char* what) {
  EMBER_CHECK(status == CUDNN_STATUS_SUCCESS, "conv2d: {} failed on cuda:{}: {}", what, current_device_index(),
              cudnnGetErrorString(status));
}
#define EMBER_CUDNN_CHECK(call) check_cudnn((call), #call)

// One handle per thread and GPU, bound to the current stream at every call;
// leaked at exit like cuBLAS's (kernels/cuda/matmul.cu).
cudnnHandle_t handle() {
  thread_local cudnnHandle_t handles[kMaxDevicesPerType] = {};
  cudnnHandle_t& h = handles[current_device_index()];
  if (h == nullptr) EMBER_CUDNN_CHECK(cudnnCreate(&h));
  EMBER_CUDNN_CHECK(cudnnSetStream(h, current_stream()));
  return h;
}

template <class T>
cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, Half>) return CUDNN_DATA_HALF;
  else if constexpr (std::is_same_v<T, BFloat16>) return CUDNN_DATA_BFLOAT16;
  else return CUDNN_DATA_FLOAT;
}

// Tensor cores for f16 and bf16; for f32 only when TF32 was asked for
// (float32_matmul_precision "high"); none for f64.
template <class T>
cudnnMathType_t math_type() {
  if constexpr (std::is_same_v<T, float>)
    return float32_matmul_precision() == "high" ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : CUDNN_FMA_MATH;
  else if constexpr (std::is_same_v<T, double>) return CUDNN_DEFAULT_MATH;
  else return CUDNN_TENSOR_OP_MATH;
}

// The descriptors of one problem, destroyed with it.
template <class T>
class ConvDescriptors {
 public:
  explicit ConvDescriptors(const Conv2dProblem& p) {
    const cudnnDataType_t type = data_type<T>();
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&input));
    EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&output));
    EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&filter));
    EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(input, CUDNN_TENSOR_NCHW, type, dim(p.batch), dim(p.in_channels),
                                                 dim(p.in_size[0]), dim(p.in_size[1])));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(output, CUDNN_TENSOR_NCHW, type, dim(p.batch), dim(p.out_channels),
                                                 dim(p.out_size[0]), dim(p.out_size[1])));
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter, type, CUDNN_TENSOR_NCHW, dim(p.out_channels),
                                                 dim(p.in_channels / p.groups), dim(p.kernel[0]), dim(p.kernel[1])));
    // f16/bf16 accumulate in f32, f64 in f64; f32 in f32 unless TF32 was asked for.
    const cudnnDataType_t compute = std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, dim(p.padding[0]), dim(p.padding[1]), dim(p.stride[0]),
                                                      dim(p.stride[1]), dim(p.dilation[0]), dim(p.dilation[1]),
                                                      CUDNN_CROSS_CORRELATION, compute));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, dim(p.groups)));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type<T>()));
  }
  ~ConvDescriptors() {
    cudnnDestroyTensorDescriptor(input);
    cudnnDestroyTensorDescriptor(output);
    cudnnDestroyFilterDescriptor(filter);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  cudnnTensorDescriptor_t input = nullptr, output = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

 private:
  static int dim(int64_t value) {
    EMBER_CHECK(value <= INT32_MAX, "conv2d: size {} exceeds cuDNN's 32-bit dims", value);
    return int(value);
  }
};

// alpha = 1, beta = 0 in the scaling type cuDNN wants: double for f64, float otherwise.
template <class T>
struct Scaling {
  using Type = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Type one = 1, zero = 0;
};

// The first algorithm of a heuristics ranking that cuDNN says works.
template <class Perf>
auto first_working(const Perf* results, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS) return results[i].algo;
  detail::throw_error(fmt::format("conv2d: cuDNN has no {} algorithm for this problem", what));
}

// Note [cuDNN plan cache]: building the four descriptors and asking cuDNN's
// heuristics costs tens of microseconds per call, as much as a small
// convolution, so each pass (forward, backward data, backward filter) keeps
// its plan: the descriptors, the algorithm and its workspace size. A plan is
// keyed on the problem's whole geometry (add_conv2d_geometry), its math type
// (TF32 on or off) and the GPU; its dtype and pass pick the cache (one per
// ConvPlan type). Plans are shared between threads: after construction nobody
// writes them, and each call still binds its thread's handle to its stream.
// 64 plans per cache, least recently used evicted first (core/primitive_cache.h).
template <class T, class Algo>
struct ConvPlan {
  explicit ConvPlan(const Conv2dProblem& p) : descriptors(p) {}
  ConvDescriptors<T> descriptors;
  Algo algo{};
  size_t workspace_bytes = 0;
};

// The plan of problem `p` for the pass whose algorithm type is Algo; `choose`
// fills a new plan's algorithm and workspace size.
template <class T, class Algo, class Choose>
std::shared_ptr<const ConvPlan<T, Algo>> plan_of(const Conv2dProblem& p, Choose choose) {
  static PrimitiveCache<ConvPlan<T, Algo>> cache(64);
  PrimitiveKey key;
  add_conv2d_geometry(key, p);
  key.add(int64_t(math_type<T>()));
  key.add(current_device_index());
  return cache.get(key, [&] {
    auto plan = std::make_shared<ConvPlan<T, Algo>>(p);
    choose(*plan);
    return plan;
  });
}

// out[n, o, :, :] += bias[o]
template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t channels, int64_t plane, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    store(out + i, load(out + i) + load(bias + (i / plane) % channels));
}

template <class T>
void conv2d(const Conv2dProblem& p) {
  auto plan = plan_of<T, cudnnConvolutionFwdAlgo_t>(p, [&](auto& fresh) {
    const ConvDescriptors<T>& d = fresh.descriptors;
    cudnnConvolutionFwdAlgoPerf_t results[8];
    int count = 0;
    EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle(), d.input, d.filter, d.conv, d.output, 8, &count,
                                                             results));
    fresh.algo = first_working(results, count, "forward");
    EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle(), d.input, d.filter, d.conv, d.output, fresh.algo,
                                                              &fresh.workspace_bytes));
  });
  const ConvDescriptors<T>& d = plan->descriptors;
  Scaling<T> s;
  Workspace workspace(plan->workspace_bytes);
  EMBER_CUDNN_CHECK(cudnnConvolutionForward(handle(), &s.one, d.input, p.input, d.filter, p.weight, d.conv, plan->algo,
                                            workspace.as<void>(), plan->workspace_bytes, &s.zero, d.output, p.out));
  if (p.bias == nullptr) return;
  const int64_t plane = p.out_size[0] * p.out_size[1], total = p.batch * p.out_channels * plane;
  add_bias_kernel<T><<<blocks_for(total, 256), 256, 0, current_stream()>>>(
      static_cast<T*>(p.out), static_cast<const T*>(p.bias), p.out_channels, plane, total);
  check_launch("conv2d (bias)");
}

template <class T>
void conv2d_backward_input(const Conv2dBackwardProblem& b) {
  auto plan = plan_of<T, cudnnConvolutionBwdDataAlgo_t>(b.forward, [&](auto& fresh) {
    const ConvDescriptors<T>& d = fresh.descriptors;
    cudnnConvolutionBwdDataAlgoPerf_t results[8];
    int count = 0;
    EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle(), d.filter, d.output, d.conv, d.input, 8,
                                                                  &count, results));
    fresh.algo = first_working(results, count, "backward data");
    EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle(), d.filter, d.output, d.conv, d.input,
                                                                   fresh.algo, &fresh.workspace_bytes));
  });
  const ConvDescriptors<T>& d = plan->descriptors;
  Scaling<T> s;
  Workspace workspace(plan->workspace_bytes);
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(handle(), &s.one, d.filter, b.forward.weight, d.output, b.grad_output,
                                                 d.conv, plan->algo, workspace.as<void>(), plan->workspace_bytes,
                                                 &s.zero, d.input, b.grad));
}

template <class T>
void conv2d_backward_weight(const Conv2dBackwardProblem& b) {
  auto plan = plan_of<T, cudnnConvolutionBwdFilterAlgo_t>(b.forward, [&](auto& fresh) {
    const ConvDescriptors<T>& d = fresh.descriptors;
    cudnnConvolutionBwdFilterAlgoPerf_t results[8];
    int count = 0;
    EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle(), d.input, d.output, d.conv, d.filter, 8,
                                                                    &count, results));
    fresh.algo = first_working(results, count, "backward filter");
    EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle(), d.input, d.output, d.conv, d.filter,
                                                                     fresh.algo, &fresh.workspace_bytes));
  });
  const ConvDescriptors<T>& d = plan->descriptors;
  Scaling<T> s;
  Workspace workspace(plan->workspace_bytes);
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle(), &s.one, d.input, b.forward.input, d.output,
                                                   b.grad_output, d.conv, plan->algo, workspace.as<void>(),
                                                   plan->workspace_bytes, &s.zero, d.filter, b.grad));
}

// Both gradients: the two passes, one after the other on the stream (cuDNN
// reads grad_output as it is, so there is nothing to share).
template <class T>
void conv2d_backward_both(const Conv2dBackwardBothProblem& b) {
  conv2d_backward_input<T>(b.input_pass());
  conv2d_backward_weight<T>(b.weight_pass());
}

// ---- Pooling -----------------------------------------------------------------

enum class PoolKind { max, average };

// One output element per thread; the reference kernel's window walk
// (kernels/reference/conv.cpp): padding is -inf for max and zeros for the
// average, a nan in the window wins the max.
template <PoolKind kind, class T>
__global__ void pool_kernel(Pool2dProblem p, int64_t total) {
  using V = ComputeType<T>;
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t out_h = p.out_size[0], out_w = p.out_size[1], in_h = p.in_size[0], in_w = p.in_size[1];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % out_w, y = (i / out_w) % out_h, plane = i / (out_w * out_h);
    const T* in = static_cast<const T*>(p.input) + plane * in_h * in_w;
    Acc best = -INFINITY, sum = 0;
    bool nan = false;
    int64_t inside = 0, padded = 0;
    for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
      for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
        const int64_t iy = y * p.stride[0] - p.padding[0] + ky, ix = x * p.stride[1] - p.padding[1] + kx;
        if (iy < in_h + p.padding[0] && ix < in_w + p.padding[1]) ++padded;
        if (iy < 0 || iy >= in_h || ix < 0 || ix >= in_w) continue;
        const Acc v = Acc(V(load(in + iy * in_w + ix)));
        nan = nan || v != v;
        best = v > best ? v : best;
        sum += v;
        ++inside;
      }
    V result;
    if constexpr (kind == PoolKind::max) result = nan ? V(NAN) : V(best);
    else result = V(sum / Acc(p.count_include_pad ? padded : inside));
    store(static_cast<T*>(p.out) + i, result);
  }
}

// The flat input index of the first maximum of output window (oy, ox) of a
// plane, as max_pool_backward_plane picks it; -1 when the window is all padding.
template <class T>
__device__ int64_t first_maximum(const Pool2dProblem& p, const T* in, int64_t oy, int64_t ox) {
  const int64_t h = p.in_size[0], w = p.in_size[1];
  int64_t best_at = -1;
  double best = 0;
  for (int64_t ky = 0; ky < p.kernel[0]; ++ky) {
    const int64_t y = oy * p.stride[0] - p.padding[0] + ky;
    if (y < 0 || y >= h) continue;
    for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
      const int64_t x = ox * p.stride[1] - p.padding[1] + kx;
      if (x < 0 || x >= w) continue;
      const double v = double(load(in + y * w + x));
      if (best_at < 0 || (!isnan(best) && (v > best || isnan(v)))) {
        best = v;
        best_at = y * w + x;
      }
    }
  }
  return best_at;
}

__device__ __forceinline__ int64_t clamp_index(int64_t i, int64_t size) { return i < 0 ? 0 : (i >= size ? size - 1 : i); }

// grad_input[e] += the output gradients of the windows whose first maximum is
// input element e, in increasing (oy, ox) order.
template <class T>
__global__ void max_pool_backward_kernel(MaxPoolBackwardProblem b, int64_t total) {
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ix = i % w, iy = (i / w) % h, plane = i / (w * h), at = iy * w + ix;
    const T* in = static_cast<const T*>(p.input) + plane * h * w;
    const T* grad_out = static_cast<const T*>(b.grad_output) + plane * out_h * out_w;
    // Windows covering row iy: oy * stride - padding <= iy <= oy * stride - padding + kernel - 1.
    const int64_t oy_first = clamp_index((iy + p.padding[0] - p.kernel[0] + p.stride[0]) / p.stride[0], out_h);
    const int64_t oy_last = clamp_index((iy + p.padding[0]) / p.stride[0], out_h);
    const int64_t ox_first = clamp_index((ix + p.padding[1] - p.kernel[1] + p.stride[1]) / p.stride[1], out_w);
    const int64_t ox_last = clamp_index((ix + p.padding[1]) / p.stride[1], out_w);
    ComputeType<T> sum = load(static_cast<const T*>(b.grad_input) + i);
    for (int64_t oy = oy_first; oy <= oy_last; ++oy)
      for (int64_t ox = ox_first; ox <= ox_last; ++ox)
        if (first_maximum(p, in, oy, ox) == at) sum += load(grad_out + oy * out_w + ox);
    store(static_cast<T*>(b.grad_input) + i, sum);
  }
}

template <PoolKind kind, class T>
void pool2d(const Pool2dProblem& p) {
  const int64_t total = p.batch * p.channels * p.out_size[0] * p.out_size[1];
  if (total == 0) return;
  pool_kernel<kind, T><<<blocks_for(total, 256), 256, 0, current_stream()>>>(p, total);
  check_launch(kind == PoolKind::max ? "max_pool2d" : "avg_pool2d");
}

template <class T>
void max_pool2d_backward(const MaxPoolBackwardProblem& b) {
  const int64_t total = b.forward.batch * b.forward.channels * b.forward.in_size[0] * b.forward.in_size[1];
  if (total == 0) return;
  max_pool_backward_kernel<T><<<blocks_for(total, 256), 256, 0, current_stream()>>>(b, total);
  check_launch("max_pool2d_backward");
}

}  // namespace

void register_conv_kernels() {
  register_for<float, double, Half, BFloat16>(conv2d_op, DeviceType::cuda, [](auto tag) { return &conv2d<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(conv2d_backward_input_op, DeviceType::cuda,
                                              [](auto tag) { return &conv2d_backward_input<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(conv2d_backward_weight_op, DeviceType::cuda,
                                              [](auto tag) { return &conv2d_backward_weight<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(conv2d_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &conv2d_backward_both<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(max_pool2d_op, DeviceType::cuda,
                                              [](auto tag) { return &pool2d<PoolKind::max, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(avg_pool2d_op, DeviceType::cuda,
                                              [](auto tag) { return &pool2d<PoolKind::average, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(max_pool2d_backward_op, DeviceType::cuda,
                                              [](auto tag) { return &max_pool2d_backward<decltype(tag)>; });
}

}  // namespace ember::cuda
