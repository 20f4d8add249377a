// attention (core/ops/attention.h) on the CPU: the fused kernel
// (kernels/cpu/attention.cpp) against a naive f64 loop and against the
// composite (the reference backend runs the composite) on random shapes:
// L != S, length 1, lengths off the tile sizes, causal or not, bool and
// additive masks at full and broadcast shapes, transposed heads, head-split
// views read in place; f64, f32 and bf16; gradients against the composite's
// and by finite differences; fully masked rows; memory linear in the length;
// bad operands. The fused GPU kernel is tested in
// tests/cuda/test_cuda_attention.cpp.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// softmax(q k^T scale + mask) v for [heads, L, E], [heads, S, E], [heads, S, Ev]
// in f64 loops; `mask` is [heads, L, S] f64 (additive, -inf = masked), causality
// added here. A row with every key masked gives 0.
Tensor naive_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask, double scale,
                       bool causal) {
  Tensor q = query.to(DType::f64).contiguous(), k = key.to(DType::f64).contiguous();
  Tensor v = value.to(DType::f64).contiguous(), m = mask.to(DType::f64).contiguous();
  const int64_t heads = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  Tensor out = zeros({heads, L, Ev}, {.dtype = DType::f64});
  const double *qd = q.data_ptr<double>(), *kd = k.data_ptr<double>(), *vd = v.data_ptr<double>();
  const double* md = m.data_ptr<double>();
  double* od = out.data_ptr<double>();
  std::vector<double> scores(size_t(S) + 1);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < L; ++i) {
      double top = -kInfinity;
      for (int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (int64_t e = 0; e < E; ++e) s += qd[(h * L + i) * E + e] * kd[(h * S + j) * E + e];
        s = s * scale + md[(h * L + i) * S + j];
        if (causal && j > i) s = -kInfinity;
        scores[j] = s;
        top = std::max(top, s);
      }
      if (top == -kInfinity) continue;
      double total = 0;
      for (int64_t j = 0; j < S; ++j) total += scores[j] = std::exp(scores[j] - top);
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e) od[(h * L + i) * Ev + e] += scores[j] / total * vd[(h * S + j) * Ev + e];
    }
  return out;
}

struct Case {
  int64_t batch, heads, L, S, E, Ev;
  bool causal;
  enum Mask { none, boolean_full, boolean_broadcast, additive_full, additive_broadcast } mask;
};

// Cases covering lengths 1, off the 64-row tiles and the 64-key (backward) and
// 256-key (forward) tiles, L != S, every mask kind.
const Case kCases[] = {
    {1, 2, 70, 300, 8, 8, false, Case::boolean_full}, {1, 1, 300, 300, 8, 4, true, Case::none},
    {2, 3, 5, 5, 4, 4, true, Case::none},          {1, 2, 1, 1, 8, 3, false, Case::none},
    {2, 2, 70, 150, 16, 8, false, Case::none},     {1, 3, 131, 131, 8, 8, true, Case::none},
    {2, 2, 67, 9, 5, 7, true, Case::none},         {2, 2, 9, 140, 6, 6, true, Case::none},
    {2, 3, 33, 130, 8, 8, false, Case::boolean_full}, {2, 2, 17, 65, 8, 4, true, Case::boolean_broadcast},
    {1, 2, 66, 129, 8, 8, false, Case::additive_full}, {2, 2, 20, 31, 12, 12, true, Case::additive_broadcast},
};

// [S] bool, true at key 0 only: or-ed into random masks so that no row is fully masked.
Tensor first_key(int64_t S) { return lt(arange(0, S, 1, {.dtype = DType::f64}), 0.5); }

// How many elements of t are NaN.
int64_t nan_count(const Tensor& t) { return int64_t(sum(isnan(t).to(DType::f64)).item<double>()); }

// The mask of a case (bool true = attend; additive in [-2, 2) with some -inf)
// and the same as a dense f64 additive [B*H, L, S] for the naive loop.
struct MaskPair {
  Tensor mask, dense;
};
MaskPair make_mask(const Case& c, DType dtype) {
  const int64_t B = c.batch, H = c.heads, L = c.L, S = c.S;
  Shape full = {B, H, L, S};
  Shape shape = c.mask == Case::boolean_broadcast || c.mask == Case::additive_broadcast ? Shape{B, 1, L, S}
                                                                                         : Shape{L, S};
  if (c.mask == Case::none) return {Tensor{}, zeros({B * H, L, S}, {.dtype = DType::f64})};
  Tensor keep = logical_or(lt(random_tensor(shape, DType::f64, 0, 1), 0.8), first_key(S));
  if (c.mask == Case::boolean_full || c.mask == Case::boolean_broadcast) {
    Tensor dense = masked_fill(zeros(full, {.dtype = DType::f64}), logical_not(keep), -kInfinity);
    return {keep, dense.reshape({B * H, L, S})};
  }
  Tensor additive = masked_fill(random_tensor(shape, DType::f64), logical_not(keep), -kInfinity);
  return {additive.to(dtype), expand(additive.to(dtype).to(DType::f64), full).contiguous().reshape({B * H, L, S})};
}

double tolerance(DType dtype) { return dtype == DType::bf16 ? 3e-2 : dtype == DType::f32 ? 2e-5 : 1e-10; }

TEST(Attention, FusedForwardMatchesNaiveLoopsAndTheComposite) {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16})
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " L=" << c.L << " S=" << c.S << " E=" << c.E
                                        << " mask=" << int(c.mask) << " causal=" << c.causal);
      // query from transposed storage ([B, L, H, E] -> [B, H, L, E]), as a model's head split makes it
      Tensor q = random_tensor({c.batch, c.L, c.heads, c.E}, dtype).transpose(1, 2);
      Tensor k = random_tensor({c.batch, c.heads, c.S, c.E}, dtype);
      Tensor v = random_tensor({c.batch, c.S, c.heads, c.Ev}, dtype).transpose(1, 2);
      MaskPair mask = make_mask(c, dtype);
      AttentionOptions options{.scale = 0.4, .causal = c.causal, .mask = mask.mask};
      ASSERT_TRUE(fused_attention_supported(q, k, v, options));
      KernelCallCounter counter;
      Tensor y = attention(q, k, v, options);
      EXPECT_EQ(counter.calls("attention", DeviceType::cpu, dtype), 1);
      EXPECT_EQ(y.shape(), (Shape{c.batch, c.heads, c.L, c.Ev}));
      auto heads = [](const Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); };
      Tensor expected = naive_attention(heads(q), heads(k), heads(v), mask.dense, 0.4, c.causal);
      const double tol = tolerance(dtype);
      EXPECT_TRUE(all_close(heads(y).to(DType::f64), expected, tol, tol));
      // The bf16 composite rounds each step to bf16: the scores (sums of up
      // to 16 products of values in [-2, 2], about 5 typically, half an ulp
      // 0.016 there), then the mask's add, the softmax and P again. With |v|
      // up to 2 its error reached 0.043 where an output's terms cancel, so it
      // is compared as loosely as the gradients below; the fused kernel keeps
      // the tight tolerance against the f64 loops above.
      const double composite_tol = dtype == DType::bf16 ? 6e-2 : tol;
      Tensor composite = reference([&] { return attention(q, k, v, options); });
      EXPECT_TRUE(all_close(y.to(DType::f64), composite.to(DType::f64), composite_tol, composite_tol));
    }
}

TEST(Attention, FusedGradientsMatchTheComposite) {
  for (DType dtype : {DType::f64, DType::f32, DType::bf16})
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " L=" << c.L << " S=" << c.S << " mask=" << int(c.mask));
      Tensor q0 = random_tensor({c.batch, c.L, c.heads, c.E}, dtype), k0 = random_tensor({c.batch, c.heads, c.S, c.E}, dtype);
      Tensor v0 = random_tensor({c.batch, c.heads, c.S, c.Ev}, dtype), g = random_tensor({c.batch, c.heads, c.L, c.Ev}, dtype);
      AttentionOptions options{.scale = 0.3, .causal = c.causal, .mask = make_mask(c, dtype).mask};
      auto grads = [&](bool composite) {
        Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
        auto run = [&] { sum(attention(q.transpose(1, 2), k, v, options) * g).backward(); };
        if (composite) reference(run); else run();
        return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
      };
      KernelCallCounter counter;
      std::vector<Tensor> fused = grads(false);
      EXPECT_EQ(counter.calls("attention_backward", DeviceType::cpu, dtype), 1);
      std::vector<Tensor> composite = grads(true);
      // bf16 gradients round every product of the composite to bf16: compare loosely
      const double tol = dtype == DType::bf16 ? 6e-2 : tolerance(dtype) * 10;
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(fused[i].to(DType::f64), composite[i].to(DType::f64), tol, tol)) << i;
    }
}

// The fused kernels split their tasks over the threads (Note [Attention tasks
// in parallel], kernels/cpu/attention.cpp), each computed as on one thread,
// so the output and gradients on 2 and 3 threads equal those on 1 exactly.
// The shape is above the threshold at which threads start (16 heads of 256
// rows), and each count runs twice, so that the threads overlap.
// Mutations caught: one scratch shared by the threads (the ForwardScratch or
// BackwardScratch made outside parallel_for's body), and the tile products'
// oneDNN primitives back in library scratchpad mode (Note [oneDNN
// scratchpads]).
TEST(Attention, FusedKernelsGiveTheSameResultsOnAnyThreadCount) {
  const int previous_threads = get_num_threads();
  for (DType dtype : {DType::f32, DType::bf16})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " causal=" << causal);
      Tensor q0 = random_tensor({4, 4, 256, 64}, dtype), k0 = random_tensor({4, 4, 200, 64}, dtype);
      Tensor v0 = random_tensor({4, 4, 200, 32}, dtype), g = random_tensor({4, 4, 256, 32}, dtype);
      Tensor mask = causal ? Tensor() : random_tensor({256, 200}, dtype);
      auto run = [&](int threads) {
        set_num_threads(threads);
        Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
        Tensor y = attention(q, k, v, {.scale = 0.125, .causal = causal, .mask = mask});
        sum(y * g).backward();
        return std::vector<Tensor>{y, q.grad(), k.grad(), v.grad()};
      };
      std::vector<Tensor> one = run(1);
      for (int threads : {2, 3, 2, 3}) {
        std::vector<Tensor> several = run(threads);
        for (size_t i = 0; i < one.size(); ++i)
          EXPECT_TRUE(all_close(several[i], one[i], 0, 0)) << threads << " threads, tensor " << i;
      }
    }
  set_num_threads(previous_threads);
}

// Causal attention equals the same attention under the explicit lower
// triangular mask exactly (as tests/nn/test_attention.cpp asks at T = 5),
// here over several tiles and off the vector width: the fused kernel stops
// the causal softmax at the diagonal rounded up to the exp's lanes.
// Mutation caught: stopping at the diagonal itself (no rounding), which sums
// the row in another order.
TEST(Attention, CausalEqualsTheExplicitMaskExactlyOverSeveralTiles) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor q = random_tensor({2, 2, 300, 16}, dtype), k = random_tensor({2, 2, 300, 16}, dtype);
    Tensor v = random_tensor({2, 2, 300, 8}, dtype);
    Tensor allowed = lt(arange(0, 300, 1).unsqueeze(0), arange(1, 301, 1).unsqueeze(1));  // key j <= query i
    EXPECT_TRUE(all_close(attention(q, k, v, {.scale = 0.25, .causal = true}),
                          attention(q, k, v, {.scale = 0.25, .mask = allowed}), 0, 0))
        << dtype_name(dtype);
  }
}

TEST(Attention, GradcheckWithCausalityAndAnAdditiveMask) {
  using V = const std::vector<Tensor>&;
  // L = 3 queries, S = 5 keys, E = 2, Ev = 3, two heads; the float mask broadcast over heads
  Tensor mask = random_tensor({1, 3, 5}, DType::f64);
  for (bool causal : {false, true}) {
    auto result = autograd::gradcheck(
        [&](V x) {
          AttentionOptions options{.scale = 0.7, .causal = causal, .mask = mask};
          EXPECT_TRUE(fused_attention_supported(x[0].transpose(0, 1), x[1], x[2], options));
          return attention(x[0].transpose(0, 1), x[1], x[2], options);
        },
        {random_tensor({3, 2, 2}, DType::f64), random_tensor({2, 5, 2}, DType::f64), random_tensor({2, 5, 3}, DType::f64)});
    EXPECT_TRUE(result.ok) << result.report;
  }
}

// Note [Attention on strided heads] (core/ops/attention.cpp): q, k and v as
// a transformer makes them, head-split views of one [B, T, 3 x H x D]
// projection (rows 3HD apart, each head at its own offset), a key broadcast
// over the heads (stride 0), and a query sliced out of a wider tensor. The
// kernel reads them in place (no copy kernel runs in the forward), the output
// lies as [B, T, H, Ev] so that merging the heads is a view, the gradients lie
// as their inputs do, and values and gradients match the composite.
// Mutations caught: a kernel that ignores a layout's row stride or head
// offsets (reads the heads as if dense: wrong values), and an output made
// contiguous [B, H, T, Ev] (the layout assertions).
TEST(Attention, StridedHeadsAreReadInPlaceAndWrittenInTheirOrder) {
  const int64_t B = 2, T = 70, H = 3, D = 8;
  for (DType dtype : {DType::f64, DType::f32, DType::bf16})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " causal=" << causal);
      Tensor projection = random_tensor({B, T, 3 * H * D}, dtype);
      Tensor shared_key = random_tensor({B, 1, T, D}, dtype);
      Tensor wide_query = random_tensor({B, T, H, 2 * D}, dtype);
      Tensor g = random_tensor({B, T, H, D}, dtype).transpose(1, 2);  // as the heads' merge passes it back
      auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };
      auto run = [&](bool composite, bool sliced) {
        Tensor x = projection.clone().requires_grad_(), key = shared_key.clone().requires_grad_();
        Tensor wide = wide_query.clone().requires_grad_();
        std::vector<Tensor> qkv = chunk(x, 3, -1);
        Tensor q = sliced ? wide.narrow(3, 3, D).transpose(1, 2) : heads(qkv[0]);
        Tensor k = sliced ? key.expand({B, H, T, D}) : heads(qkv[1]);
        Tensor v = heads(qkv[2]);
        Tensor y, grad_q;
        q.register_hook([&](const Tensor& grad) {
          grad_q = grad;
          return grad;
        });
        AttentionOptions options{.scale = 0.35, .causal = causal};
        auto forward = [&] {
          EXPECT_TRUE(composite || fused_attention_supported(q, k, v, options));
          y = attention(q, k, v, options);
          sum(y * g).backward();
        };
        if (composite) {
          reference(forward);
        } else {
          KernelCallCounter counter;
          Tensor out = attention(q.detach(), k.detach(), v.detach(), options);
          EXPECT_EQ(counter.calls("copy", DeviceType::cpu, dtype), 0);
          EXPECT_TRUE(out.transpose(1, 2).is_contiguous());  // merging the heads is a view
          forward();
          EXPECT_TRUE(grad_q.transpose(1, 2).is_contiguous());  // the gradient lies as q does
        }
        return std::vector<Tensor>{y, x.grad(), key.grad(), wide.grad(), grad_q};
      };
      for (bool sliced : {false, true}) {
        std::vector<Tensor> fused = run(false, sliced), composite = run(true, sliced);
        const double tol = dtype == DType::bf16 ? 6e-2 : tolerance(dtype) * 10;
        for (size_t i = 0; i < fused.size(); ++i) {
          if (!fused[i].defined() && !composite[i].defined()) continue;
          EXPECT_TRUE(all_close(fused[i].to(DType::f64), composite[i].to(DType::f64), tol, tol))
              << "sliced " << sliced << ", tensor " << i;
        }
      }
    }
}

// Finite differences through a head split with rows wider than the head and
// a key broadcast over the heads (both read in place).
TEST(Attention, GradcheckOnHeadSplitViews) {
  using V = const std::vector<Tensor>&;
  for (bool causal : {false, true}) {
    auto result = autograd::gradcheck(
        [&](V x) {
          // x[0]: [L = 4, 2 heads x E = 3 x 2] -> query [2, 4, 3] from every other column block
          Tensor q = x[0].reshape({4, 2, 6}).narrow(2, 3, 3).transpose(0, 1);
          Tensor k = x[1].expand({2, 5, 3});
          Tensor v = x[2].reshape({5, 2, 2}).transpose(0, 1);
          AttentionOptions options{.scale = 0.6, .causal = causal};
          EXPECT_TRUE(fused_attention_supported(q, k, v, options));
          return attention(q, k, v, options);
        },
        {random_tensor({4, 12}, DType::f64), random_tensor({1, 5, 3}, DType::f64), random_tensor({5, 4}, DType::f64)});
    EXPECT_TRUE(result.ok) << result.report;
  }
}

// A row whose keys are all masked out: 0 on the fused path (PyTorch 2.5's
// convention, where the composite gives NaN), no gradient through it, and the
// other rows unaffected. Catches a kernel that divides by the empty row's zero sum.
TEST(Attention, AFullyMaskedRowGivesZeroAndNoGradient) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    Tensor q = random_tensor({2, 4, 3}, dtype).requires_grad_(), k = random_tensor({2, 6, 3}, dtype).requires_grad_();
    Tensor v = random_tensor({2, 6, 5}, dtype).requires_grad_();
    Tensor allowed = logical_or(lt(random_tensor({4, 6}, DType::f64, 0, 1), 0.7), first_key(6)).contiguous();
    allowed.select(0, 2).fill_(false);  // query 2 sees no key
    Tensor y = attention(q, k, v, {.scale = 1.0, .mask = allowed});
    EXPECT_TRUE(all_close(y.select(1, 2), zeros({2, 5}, {.dtype = dtype}), 0, 0)) << dtype_name(dtype);
    Tensor additive = masked_fill(zeros({4, 6}, {.dtype = dtype}), logical_not(allowed), -kInfinity);
    EXPECT_TRUE(all_close(attention(q, k, v, {.scale = 1.0, .mask = additive}), y, 0, 0));
    Tensor composite = reference([&] { return attention(q.detach(), k.detach(), v.detach(), {.scale = 1.0, .mask = allowed}); });
    EXPECT_EQ(nan_count(composite.select(1, 2)), 2 * 5);
    sum(y * random_tensor(y.shape(), dtype)).backward();
    EXPECT_TRUE(all_close(q.grad().select(1, 2), zeros({2, 3}, {.dtype = dtype}), 0, 0));
    EXPECT_EQ(nan_count(k.grad()) + nan_count(v.grad()), 0);
    Tensor expected = naive_attention(q.detach(), k.detach(), v.detach(),
                                      masked_fill(zeros({2, 4, 6}, {.dtype = DType::f64}), logical_not(allowed), -kInfinity),
                                      1.0, false);
    EXPECT_TRUE(all_close(y.to(DType::f64), expected, tolerance(dtype), tolerance(dtype)));
  }
  // S = 0: every row is empty
  Tensor q = random_tensor({3, 4}, DType::f32);
  EXPECT_TRUE(all_close(attention(q, zeros({0, 4}), zeros({0, 2}), {.scale = 1.0}), zeros({3, 2}), 0, 0));
}

// Hugging Face masks padded rows with finfo.min, a finite number: every key
// of such a row gets the same score, and its probabilities are 1/S. Catches:
// one saved statistic max + log(sum), which rounds back to the max at -1e9
// (the backward then saw probabilities of 1, gradients S times too large).
TEST(Attention, ARowMaskedWithAHugeFiniteValueHasTheCompositesGradients) {
  for (double big : {-1e9, double(std::numeric_limits<float>::lowest())}) {
    SCOPED_TRACE(big);
    Tensor q0 = random_tensor({2, 5, 8}, DType::f32), k0 = random_tensor({2, 7, 8}, DType::f32);
    Tensor v0 = random_tensor({2, 7, 4}, DType::f32), g = random_tensor({2, 5, 4}, DType::f32);
    Tensor mask = zeros({5, 7});
    mask.select(0, 1).fill_(big);
    auto grads = [&](bool composite) {
      Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
      auto run = [&] { sum(attention(q, k, v, {.scale = 0.3, .mask = mask}) * g).backward(); };
      if (composite) reference(run); else run();
      return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
    };
    std::vector<Tensor> fused = grads(false), composite = grads(true);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(fused[i], composite[i], 1e-4, 1e-4)) << i;
  }
}

// A NaN in a query makes its row NaN, as PyTorch's. Catches: the row's max
// passing over NaN scores, so the row looked fully masked and gave 0.
TEST(Attention, ANaNQueryGivesANaNRow) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor q = random_tensor({1, 3, 4}, dtype), k = random_tensor({1, 5, 4}, dtype), v = random_tensor({1, 5, 2}, dtype);
    q.select(1, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    Tensor y = attention(q, k, v, {.scale = 0.5});
    EXPECT_EQ(nan_count(y.select(1, 1)), 2) << dtype_name(dtype);
    EXPECT_EQ(nan_count(y.select(1, 0)) + nan_count(y.select(1, 2)), 0) << dtype_name(dtype);
  }
}

// Forward and backward keep the allocator's peak linear in the length: at
// T = 2048 it is about twice T = 1024's, and far below one [T, T] f32 score
// matrix (16 MiB); the scratch is O(T x head_dim). Catches a kernel (or a
// fallback to the composite) that materialises the scores.
int64_t peak_bytes(int64_t T) {
  const int64_t E = 64;
  Tensor q = random_tensor({1, T, E}, DType::f32).requires_grad_(), k = random_tensor({1, T, E}, DType::f32).requires_grad_();
  Tensor v = random_tensor({1, T, E}, DType::f32).requires_grad_();
  Tensor g = random_tensor({1, T, E}, DType::f32);
  reset_peak_memory_stats();
  const int64_t before = memory_allocated();
  sum(attention(q, k, v, {.scale = 0.125, .causal = true}) * g).backward();
  const int64_t peak = max_memory_allocated() - before;
  EXPECT_GT(peak, 4 * T * E * 4);  // the gradients of q, k, v and the output were counted
  return peak;
}

TEST(Attention, MemoryIsLinearInTheLength) {
  const int64_t small = peak_bytes(1024), large = peak_bytes(2048);
  EXPECT_LT(large, 2048 * 2048 * 4 / 2) << large << " bytes";
  EXPECT_LT(double(large), 2.2 * double(small)) << small << " then " << large << " bytes";
}

TEST(Attention, DispatchAndBadOperands) {
  Tensor q = random_tensor({2, 4, 3}, DType::f16);
  EXPECT_FALSE(fused_attention_supported(q, q, q, {}));  // f16 composes on the CPU
  Tensor x = random_tensor({2, 4, 3}, DType::f32);
  EXPECT_FALSE(fused_attention_supported(x, x, x, {.mask = random_tensor({2, 2, 4, 4}, DType::f32)}));  // widens
  EXPECT_FALSE(fused_attention_supported(x, x, x, {.mask = random_tensor({4, 4}, DType::f32).requires_grad_()}));
  EXPECT_TRUE(fused_attention_supported(x, x, x, {.mask = random_tensor({4, 1}, DType::f32)}));
  EXPECT_TRUE(all_close(attention(q, q, q, {.scale = 0.5, .causal = true}).to(DType::f32),
                        attention(q.to(DType::f32), q.to(DType::f32), q.to(DType::f32), {.scale = 0.5, .causal = true}),
                        1e-2, 1e-2));
  EXPECT_EMBER_ERROR(attention(x, zeros({2, 5, 4}), x, {}), "attention: query [2, 4, 3], key [2, 5, 4]");
  EXPECT_EMBER_ERROR(attention(x, x, x.to(DType::f64), {}), "dtypes");
  Tensor i = zeros({2, 4, 3}, {.dtype = DType::i64});
  EXPECT_EMBER_ERROR(attention(i, i, i, {}), "attention: expected floating query, key and value, got int64");
  EXPECT_EMBER_ERROR(attention(zeros({3}), zeros({3}), zeros({3}), {}), "attention");
  EXPECT_EMBER_ERROR(attention(x, x, x, {.mask = zeros({4, 4}, {.dtype = DType::i64})}), "the mask must be bool or floating");
  EXPECT_EQ(attention(zeros({2, 0, 4}), zeros({2, 0, 4}), zeros({2, 0, 4}), {.scale = 0.5}).shape(), (Shape{2, 0, 4}));
}

}  // namespace
}  // namespace ember::testing
