// split and chunk under autograd: one SplitBackward node for all the pieces
// (forward: core/ops/indexing.cpp, gradient: autograd/functions/indexing.cpp).
// Gradients are checked against the same computation written with narrow,
// whose strided views each scatter their gradient into a zero-filled tensor
// of the input's shape (the formula split used before), on random shapes and
// layouts; then hand cases for pieces without a gradient, hooks, a second
// backward, double backward, and in-place writes into a piece. f64
// gradcheck/gradgradcheck cases are in test_gradcheck.cpp ("split").
#include <algorithm>

#include "autograd/leaf.h"

namespace ember::testing {
namespace {

std::vector<double> values(const Tensor& t) { return t.contiguous().to(DType::f64).to_vector<double>(); }

void expect_values(const Tensor& t, const std::vector<double>& expected) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], expected[i]) << "element " << i;
}

// The pieces split(t, sizes, dim) makes, written with narrow (one strided view each).
std::vector<Tensor> narrowed(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(t.narrow(dim, start, size));
    start += size;
  }
  return pieces;
}

std::vector<int64_t> sizes_of(const std::vector<Tensor>& pieces, int64_t dim) {
  std::vector<int64_t> sizes;
  for (const Tensor& piece : pieces) sizes.push_back(piece.shape()[int(dim < 0 ? dim + piece.dim() : dim)]);
  return sizes;
}

// Random shapes, every dim, split sizes that leave an uneven last piece,
// chunks of an empty dim, contiguous and non-contiguous inputs (the leaf
// transposed, or a step-2 slice of it), each piece used or not: the leaf's
// gradient through split equals the one through narrow. Catches a piece's
// gradient written at the wrong offset of the buffer, and a piece without a
// gradient whose slice is left unwritten instead of zeroed.
TEST(SplitGrad, MatchesNarrowOnRandomShapes) {
  std::uniform_int_distribution<int> ndim_of(1, 4), coin(0, 1);
  for (int trial = 0; trial < 60; ++trial) {
    Shape shape = random_shape(ndim_of(rng()), 7);
    int layout = trial % 3;
    Shape leaf_shape = shape;
    if (layout == 1) std::reverse(leaf_shape.begin(), leaf_shape.end());
    if (layout == 2) leaf_shape[0] = 2 * shape[0];
    Tensor x = random_tensor(leaf_shape, DType::f64);
    x.requires_grad_(true);
    auto input_of = [&](const Tensor& leaf) {
      if (layout == 1) {
        Dims reverse;
        for (int d = leaf.dim() - 1; d >= 0; --d) reverse.push_back(d);
        return leaf.permute(reverse);
      }
      if (layout == 2) return leaf.slice(0, 0, leaf.shape()[0], 2);
      return leaf * 1.0;
    };
    int64_t dim = std::uniform_int_distribution<int64_t>(-shape.ndim(), shape.ndim() - 1)(rng());
    int64_t size = shape[int(dim < 0 ? dim + shape.ndim() : dim)];  // dim may count from the end
    std::vector<Tensor> pieces;
    if (trial % 2 == 0) {
      int64_t split_size = size == 0 ? 0 : std::uniform_int_distribution<int64_t>(1, size)(rng());
      pieces = split(input_of(x), split_size, dim);
    } else {
      pieces = chunk(input_of(x), std::uniform_int_distribution<int64_t>(1, 4)(rng()), dim);
    }
    SCOPED_TRACE(fmt::format("trial {}: shape {} layout {} dim {} pieces {}", trial, shape, layout, dim, pieces.size()));
    std::vector<Tensor> weights;
    std::vector<bool> used;
    for (const Tensor& piece : pieces) {
      weights.push_back(random_tensor(piece.shape(), DType::f64));
      used.push_back(pieces.size() == 1 || coin(rng()) == 1);
    }
    auto loss_of = [&](const std::vector<Tensor>& parts) {
      Tensor loss = sum(x) * 0.0;  // defined even when no piece is used
      for (size_t i = 0; i < parts.size(); ++i)
        if (used[i]) loss = loss + sum(parts[i] * weights[i]);
      return loss;
    };
    Tensor via_split = autograd::grad({loss_of(pieces)}, {x})[0];
    Tensor via_narrow = autograd::grad({loss_of(narrowed(input_of(x), sizes_of(pieces, dim), dim))}, {x})[0];
    EXPECT_TRUE(all_close(via_split, via_narrow, 0, 0));
  }
}

// The pieces are views of the input (no copy), with one node for all.
TEST(SplitGrad, PiecesAreViewsOfOneNode) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor y = x * 1.0;
  std::vector<Tensor> pieces = split(y, 2, 1);  // [2, 2], [2, 2], [2, 1]
  ASSERT_EQ(pieces.size(), 3u);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].storage(), y.storage());
    EXPECT_EQ(pieces[i].offset(), int64_t(2 * i));
    EXPECT_EQ(pieces[i].strides(), y.strides());
    ASSERT_TRUE(pieces[i].grad_fn());
    EXPECT_EQ(pieces[i].grad_fn()->name(), "SplitBackward");
    EXPECT_EQ(pieces[i].grad_fn(), pieces[0].grad_fn());
  }
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(split(y, 2, 1)[0].requires_grad());
  }
  EXPECT_FALSE(split(from_vector<int64_t>({1, 2, 3}), 2)[0].requires_grad());
}

// Tiny exact cases: each piece's gradient lands in its own slice; a piece
// used by nothing gets zeros.
TEST(SplitGrad, HandCases) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  std::vector<Tensor> p = split(x, 4);  // [1 2 3 4], [5 6]
  (sum(p[0] * from_vector<double>({1, 2, 3, 4})) + sum(p[1]) * 10.0).backward();
  expect_values(x.grad(), {1, 2, 3, 4, 10, 10});

  Tensor z = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  std::vector<Tensor> c = chunk(z * 1.0, 3, 0);  // rows
  sum(c[1] * 7.0).backward();                    // rows 0 and 2 get no gradient
  expect_values(z.grad(), {0, 0, 7, 7, 0, 0});
}

// Backward through one piece, then through another with retain_graph on the
// first: the gradients add up; a third backward after one without
// retain_graph is refused.
TEST(SplitGrad, BackwardThroughOnePieceThenAnother) {
  Tensor x = leaf({1, 2, 3, 4});
  std::vector<Tensor> p = chunk(x * 2.0, 2);
  Tensor a = sum(p[0] * p[0]), b = sum(p[1]) * 3.0;
  a.backward({}, true);
  expect_values(x.grad(), {8, 16, 0, 0});  // d (2x)^2 / dx = 8x
  b.backward({}, true);
  expect_values(x.grad(), {8, 16, 6, 6});
  a.backward();
  expect_values(x.grad(), {16, 32, 6, 6});
  EXPECT_EMBER_ERROR(a.backward(), "second time");
}

// A hook on one piece sees that piece's gradient only and may replace it;
// retain_grad keeps one piece's gradient.
TEST(SplitGrad, HooksAndRetainGradOnOnePiece) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  std::vector<Tensor> p = split(x * 1.0, std::vector<int64_t>{1, 3, 2});
  Tensor seen;
  p[1].register_hook([&](const Tensor& g) {
    seen = g.clone();
    return g * 10.0;
  });
  p[2].retain_grad();
  (sum(p[0]) + sum(p[1] * from_vector<double>({1, 2, 3})) + sum(p[2] * 5.0)).backward();
  expect_values(seen, {1, 2, 3});
  expect_values(p[2].grad(), {5, 5});
  expect_values(x.grad(), {1, 10, 20, 30, 5, 5});
}

// create_graph through split: the gradient is itself differentiable and its
// own gradient equals the one through narrow.
TEST(SplitGrad, DoubleBackwardMatchesNarrow) {
  Tensor x = random_tensor({3, 5}, DType::f64);
  x.requires_grad_(true);
  Tensor v = random_tensor({3, 5}, DType::f64);
  auto second = [&](bool use_split) {
    std::vector<Tensor> p = use_split ? split(x, 2, 1) : narrowed(x, {2, 2, 1}, 1);
    Tensor loss = sum(p[0] * p[0] * p[0]) + sum(p[1] * p[0]);  // p[2] unused
    Tensor g = autograd::grad({loss}, {x}, {}, std::nullopt, true)[0];
    return std::vector<Tensor>{g.detach(), autograd::grad({sum(g * v)}, {x})[0]};
  };
  std::vector<Tensor> by_split = second(true), by_narrow = second(false);
  EXPECT_TRUE(all_close(by_split[0], by_narrow[0], 0, 0));
  EXPECT_TRUE(all_close(by_split[1], by_narrow[1], 1e-14, 1e-14));
}

// In-place writes into pieces: the written piece takes the op's history, its
// base a CopySlices one, and the other pieces a fresh view of the base
// (Note [In-place ops and autograd]), so gradients equal those of the same
// computation written out of place. Catches pieces made without a view base
// (the writes would not reach y's history, and k, v would keep SplitBackward).
TEST(SplitGrad, InPlaceOnPiecesMatchesOutOfPlace) {
  Tensor x = random_tensor({2, 6}, DType::f64), w = random_tensor({2, 2}, DType::f64);
  Tensor e = random_tensor({2, 6}, DType::f64), f = random_tensor({2, 2}, DType::f64);
  x.requires_grad_(true);
  w.requires_grad_(true);
  auto grads = [&](bool in_place) {
    Tensor y = x * x;
    std::vector<Tensor> qkv = chunk(y, 3, -1);
    Tensor before = sum(qkv[2] * 3.0);  // recorded before the write: unaffected by it
    Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    if (in_place) {
      mul_(q, w);
      EXPECT_EQ(q.grad_fn()->name(), "MulBackward");
      add_(k, 1.0);  // a write into the same storage: q's history becomes a view of y's
      EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
    } else {
      q = q * w;
      k = k + 1.0;
      y = cat({q, k, v}, -1);
    }
    Tensor loss = before + sum(q * f) + sum(k * k) + sum(v * v) + sum(y * e);
    return autograd::grad({loss}, {x, w});
  };
  std::vector<Tensor> written = grads(true), out_of_place = grads(false);
  EXPECT_TRUE(all_close(written[0], out_of_place[0], 1e-14, 1e-14));
  EXPECT_TRUE(all_close(written[1], out_of_place[1], 1e-14, 1e-14));
}

// What stays refused: writing into a piece of a leaf that requires grad, and
// writing into a piece whose old value a node saved.
TEST(SplitGrad, InPlaceRefusals) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor piece = split(x, 2)[0];
  EXPECT_EMBER_ERROR(mul_(piece, 2.0), "leaf tensor that requires grad");
  std::vector<Tensor> p = split(x * 1.0, 2);
  Tensor square = p[0] * p[0];  // saves p[0]
  mul_(p[0], 2.0);
  EXPECT_EMBER_ERROR(sum(square).backward(), "modified by an in-place operation");
}

}  // namespace
}  // namespace ember::testing
