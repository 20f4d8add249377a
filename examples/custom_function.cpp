// A custom autograd function (autograd/custom_function.h): SwiGLU's gate,
// silu(a) * b, with a forward that makes one pass over memory and a
// backward written by hand. Written from ops, the same gate takes two
// kernels (silu, then the product) and also keeps silu(a) alive for
// backward; this one saves only a and b. The program checks that its output and gradients
// match the composite silu(a) * b, that gradcheck (f64 finite differences)
// passes, and that it trains inside a model; it exits 1 otherwise. ctest
// runs it (examples.custom_function). README.md, "Extending ember", shows it.
#include <ember/ember.h>

#include <cmath>
#include <cstdio>

using namespace ember;

namespace {

// y[i] = a[i] * sigmoid(a[i]) * b[i], one pass over a, b and y (dense CPU memory).
template <class T>
void swiglu_loop(const T* a, const T* b, T* y, int64_t n) {
  parallel_for(0, n, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] / (T(1) + std::exp(-a[i])) * b[i];
  });
}

// silu(a) * b, in one pass for dense f32/f64 CPU tensors; other devices and
// dtypes get the composite.
Tensor swiglu_forward(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(),
              "SwiGLU: a ({} {} on {}) and b ({} {} on {}) must agree", a.shape(), a.dtype(), a.device(), b.shape(),
              b.dtype(), b.device());
  bool fused = a.device() == kCPU && (a.dtype() == DType::f32 || a.dtype() == DType::f64);
  if (!fused) return silu(a) * b;
  Tensor a_dense = a.contiguous(), b_dense = b.contiguous();
  Tensor y = empty(a.shape(), {.dtype = a.dtype()});
  if (a.dtype() == DType::f32)
    swiglu_loop(a_dense.data_ptr<float>(), b_dense.data_ptr<float>(), y.data_ptr<float>(), y.numel());
  else
    swiglu_loop(a_dense.data_ptr<double>(), b_dense.data_ptr<double>(), y.data_ptr<double>(), y.numel());
  return y;
}

// README: "Extending ember" (custom function)
struct SwiGLU : autograd::Function<SwiGLU> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return swiglu_forward(a, b);  // y = a * sigmoid(a) * b in one pass over memory
  }
  // With s = sigmoid(a): dy/da = b s (1 + a (1 - s)), dy/db = a s = silu(a).
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &a = saved[0], &b = saved[1];
    Tensor s = sigmoid(a);
    Tensor grad_a = ctx.needs_input_grad(0) ? grads[0] * b * s * (1.0 + a * (1.0 - s)) : Tensor();
    Tensor grad_b = ctx.needs_input_grad(1) ? grads[0] * a * s : Tensor();
    return {grad_a, grad_b};
  }
};

// Llama's feed-forward block: down(silu(gate(x)) * up(x)), the gate fused.
class SwiGLUFeedForward : public nn::Module {
 public:
  SwiGLUFeedForward(int64_t dim, int64_t hidden)
      : gate(register_module("gate", nn::Linear(dim, hidden, {.bias = false}))),
        up(register_module("up", nn::Linear(dim, hidden, {.bias = false}))),
        down(register_module("down", nn::Linear(hidden, dim, {.bias = false}))) {}
  Tensor forward(const Tensor& x) override { return (*down)(SwiGLU::apply((*gate)(x), (*up)(x))); }

  std::shared_ptr<nn::Linear> gate, up, down;
};

bool close(const Tensor& x, const Tensor& y, const char* what) {
  double difference = max(abs(x - y)).item<double>();
  std::printf("%-34s max |difference| %.3g\n", what, difference);
  return difference <= 1e-5;
}

}  // namespace

int main() try {
  manual_seed(0);
  bool ok = true;

  // Output and gradients against the composite, on a non-contiguous layout too.
  Tensor a = randn({64, 96}, {.requires_grad = true}), b = randn({96, 64}, {.requires_grad = true});
  Tensor weights = randn({64, 96});
  Tensor fused = SwiGLU::apply(a, b.t());
  Tensor composite = silu(a) * b.t();
  ok &= close(fused, composite, "output");
  std::vector<Tensor> fused_grads = autograd::grad({sum(fused * weights)}, {a, b});
  std::vector<Tensor> composite_grads = autograd::grad({sum(composite * weights)}, {a, b});
  ok &= close(fused_grads[0], composite_grads[0], "gradient of a");
  ok &= close(fused_grads[1], composite_grads[1], "gradient of b");

  // Finite differences in f64.
  autograd::GradcheckResult check = autograd::gradcheck(
      [](const std::vector<Tensor>& x) { return SwiGLU::apply(x[0], x[1]); }, {randn({5, 7}), randn({5, 7})});
  std::printf("%-34s %s\n", "gradcheck", check.ok ? "ok" : check.report.c_str());
  ok &= check.ok;

  // Inside a model: the feed-forward block fits a random linear map; the loss must fall.
  SwiGLUFeedForward model(16, 32);
  optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
  Tensor inputs = randn({256, 16}), targets = matmul(inputs, randn({16, 16}));
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor loss = nn::functional::mse_loss(model(inputs), targets);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("%-34s %.4f -> %.4f\n", "SwiGLU feed-forward training loss", first, last);
  ok &= last < 0.5 * first;

  std::printf("%s\n", ok ? "custom function ok" : "custom function WRONG");
  return ok ? 0 : 1;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
