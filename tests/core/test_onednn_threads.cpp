// oneDNN primitives (kernels/cpu/onednn.h) run from several threads at once:
// matmuls, convolutions with both gradients, and pooling, f32 and bf16,
// each result exactly equal to the same op run on one thread (the same
// primitive on the same data computes the same bits on any thread).
// Note [oneDNN scratchpads] says why this can go wrong.
#include <atomic>
#include <functional>
#include <thread>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// Four threads run a mix of primitives that need scratchpads, each op many
// times, in an order that differs per thread so that different primitives
// (and the same one) run at once; every result must equal the one-thread
// result exactly. The primitives were created on this thread, so a worker
// runs primitives created elsewhere, as ember's process-wide cache makes
// happen, and this thread runs one that each worker created.
// The shapes: small m and n with a long k, which oneDNN splits over threads
// and reduces in its scratchpad (f32 and bf16); a convolution's backward by
// weights, which reduces per-thread partial sums there too; forward,
// backward by input, both gradients at once (conv2d_backward, whose two
// cached entries are locked together) and pooling besides.
// Mutation caught: creating the primitives in oneDNN's default
// scratchpad_mode::library (onednn_attributes() without
// set_scratchpad_mode(user)): a worker's primitive then uses the worker's own
// library scratchpad, sized by what that thread created, or none; the test
// process crashed (segfault) in each of several tries. (With the same
// mutation Attention.FusedKernelsGiveTheSameResultsOnAnyThreadCount gets
// wrong values instead.)
// Mutation caught: conv2d_backward locking only backward data's entry while
// it runs backward weights too (kernels/cpu/conv.cpp): about 35 of the 800
// results differed in each of three tries.
TEST(OnednnThreads, ConcurrentPrimitivesMatchOneThreadExactly) {
  // Every caller asks for two OpenMP threads (a per-thread setting, and part
  // of the primitive's key), so that all run the same primitives, which split
  // the long k dims over two threads.
  const int previous_threads = get_num_threads();
  set_num_threads(2);
  std::vector<std::function<Tensor()>> ops;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t k : {int64_t(24576), int64_t(4096)}) {
      Tensor a = random_tensor({12, k}, dtype), b = random_tensor({k, 20}, dtype);
      ops.push_back([a, b] { return mm(a, b); });
      Tensor batched_a = random_tensor({3, 8, k / 4}, dtype), batched_b = random_tensor({3, k / 4, 8}, dtype);
      ops.push_back([batched_a, batched_b] { return matmul(batched_a, batched_b); });
    }
    Tensor input = random_tensor({4, 16, 24, 24}, dtype), weight = random_tensor({32, 16, 3, 3}, dtype, -1, 1);
    Tensor bias = random_tensor({32}, dtype);
    Conv2dOptions options{.padding = {1, 1}};
    Tensor grad = random_tensor({4, 32, 24, 24}, dtype);
    ops.push_back([=] { return conv2d(input, weight, bias, options); });
    ops.push_back([=] { return conv2d_backward_input(grad, weight, input.shape(), options); });
    ops.push_back([=] { return conv2d_backward_weight(grad, input, weight.shape(), options); });
    ops.push_back([=] {  // both passes' entries locked at once, while other threads take each alone
      Conv2dGradients both = conv2d_backward(grad, input, weight, options);
      return cat({both.input.flatten(), both.weight.flatten()});
    });
    ops.push_back([=] { return max_pool2d(input, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); });
    ops.push_back([=] { return avg_pool2d(input, {.kernel_size = {2, 2}}); });
  }
  std::vector<Tensor> expected;
  for (auto& op : ops) expected.push_back(op());

  constexpr int kThreads = 4, kRounds = 10;
  // A product of a shape of each worker's own, created on the worker and
  // checked on this thread after.
  std::vector<Tensor> own_a, own_b, own_result(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    own_a.push_back(random_tensor({12, 8192 + 64 * t}, DType::f32));
    own_b.push_back(random_tensor({8192 + 64 * t, 20}, DType::f32));
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      set_num_threads(2);
      own_result[t] = mm(own_a[t], own_b[t]);
      for (int round = 0; round < kRounds; ++round)
        for (size_t i = 0; i < ops.size(); ++i) {
          const size_t which = (i + size_t(t) * 5) % ops.size();  // a different op at a time per thread
          if (!all_close(ops[which](), expected[which], 0, 0)) ++mismatches;
        }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0) << "of " << kThreads * kRounds * ops.size() << " results";
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(all_close(own_result[t], mm(own_a[t], own_b[t]), 0, 0)) << "thread " << t;
  set_num_threads(previous_threads);
}

}  // namespace
}  // namespace ember::testing
