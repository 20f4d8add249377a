// A custom op with kernels of its own and a gradient: squared_relu(x) =
// relu(x)^2 (Primer's activation), the way ember's built-in ops are made:
//   1. an entry in the dispatch table (core/dispatch.h: Op), keyed by device
//      and dtype, declared in custom_op.h;
//   2. kernels registered into it: a CPU kernel here, a CUDA kernel in
//      custom_op_cuda.cu when the CUDA backend is built;
//   3. an entry point that validates its input, allocates the output and
//      calls the kernel the table holds for (device, dtype);
//   4. a custom autograd function for the gradient, 2 relu(x).
// The program checks the op against relu(x)^2 built from ops (on the GPU too
// when there is one), its gradient with gradcheck, and the error for a dtype
// without a kernel; it exits 1 otherwise. ctest runs it (examples.custom_op).
// README.md, "Extending ember", shows it.
#include "custom_op.h"

#include <ember/ember.h>

#include <cstdio>
#include <string>

using namespace ember;

namespace example {

// README: "Extending ember" (custom op)
Op<void(const void* x, void* y, int64_t n)> squared_relu_op("squared_relu");

template <class T>
void squared_relu_cpu(const void* x_data, void* y_data, int64_t n) {
  const T* x = static_cast<const T*>(x_data);
  T* y = static_cast<T*>(y_data);
  parallel_for(0, n, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] > T(0) ? x[i] * x[i] : T(0);
  });
}

void register_squared_relu_kernels() {
  register_for<float, double>(squared_relu_op, DeviceType::cpu, [](auto tag) { return &squared_relu_cpu<decltype(tag)>; });
  if (register_squared_relu_cuda_kernels) register_squared_relu_cuda_kernels();
}

// Forward calls the kernel; backward is ordinary ops, so it runs on every
// device and can itself be differentiated.
struct SquaredRelu : autograd::Function<SquaredRelu> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    Tensor dense = x.contiguous();
    Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    if (y.numel() > 0) squared_relu_op(x.device().type, x.dtype(), dense.data_ptr(), y.data_ptr(), y.numel());
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    Tensor x = ctx.saved_tensors()[0];
    return {grads[0] * relu(x) * 2.0};
  }
};

Tensor squared_relu(const Tensor& x) {
  static const bool registered = (register_squared_relu_kernels(), true);  // once, on first use
  static_cast<void>(registered);
  EMBER_CHECK(x.defined(), "squared_relu: the input is an undefined tensor");
  EMBER_CHECK(is_floating(x.dtype()), "squared_relu: expected a floating input, got {}", x.dtype());
  return SquaredRelu::apply(x);
}

}  // namespace example

namespace {

bool close(const Tensor& x, const Tensor& y, const char* what) {
  double difference = max(abs(x.to(kCPU) - y.to(kCPU))).item<double>();
  std::printf("%-40s max |difference| %.3g\n", what, difference);
  return difference <= 1e-6;
}

}  // namespace

int main() try {
  manual_seed(0);
  bool ok = true;
  Tensor x = randn({33, 65}, {.requires_grad = true});
  Tensor y = example::squared_relu(x.t());  // a transposed view: the entry point makes it dense
  ok &= close(y, pow(relu(x.t()), 2), "CPU output against relu(x)^2");
  Tensor g = randn(y.shape());
  y.backward(g);
  ok &= close(x.grad(), (g * relu(x.t()) * 2.0).t(), "CPU gradient against 2 relu(x)");

  autograd::GradcheckResult check =
      autograd::gradcheck([](const std::vector<Tensor>& t) { return example::squared_relu(t[0]); }, {randn({6, 5})});
  std::printf("%-40s %s\n", "gradcheck", check.ok ? "ok" : check.report.c_str());
  ok &= check.ok;

  // A dtype the table has no kernel for is an error that names op, device and dtype.
  try {
    example::squared_relu(randn({3}).to(DType::bf16));
    ok = false;
  } catch (const ember::Error& error) {
    std::printf("%-40s %s\n", "bfloat16 on the CPU", error.what());
    ok &= std::string(error.what()).find("squared_relu: no CPU kernel for dtype bfloat16") != std::string::npos;
  }

  if (cuda::is_available()) {
    Device gpu("cuda:0");
    Tensor on_gpu = randn({1000, 3}).to(gpu);
    ok &= close(example::squared_relu(on_gpu), pow(relu(on_gpu), 2), "CUDA output against relu(x)^2");
  } else {
    std::printf("%-40s %s\n", "CUDA", "no GPU here: skipped");
  }

  std::printf("%s\n", ok ? "custom op ok" : "custom op WRONG");
  return ok ? 0 : 1;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
