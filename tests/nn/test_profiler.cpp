// The profiler on a small model: forward kernels nested in the spans of the
// modules that ran them, every backward node's span with the kernels of its
// formula inside, on one thread.
#include "support/test_support.h"

namespace ember::testing {
namespace {

using profiler::Category;
using profiler::Event;

bool inside(const Event& inner, const Event& outer) {
  return inner.thread == outer.thread && outer.begin_ns <= inner.begin_ns && inner.end_ns <= outer.end_ns;
}

// Catches: module spans or backward node spans missing (seen failing with the
// engine's recording branch disabled), or kernels recorded outside them.
TEST(Profiler, SmallModelForwardAndBackwardSpansNest) {
  auto model = nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  Tensor x = random_tensor({3, 4}, DType::f32);
  profiler::Profile profile({.record_shapes = true});
  Tensor loss = sum(model(x));
  loss.backward();
  const auto& events = profile.events();

  std::vector<const Event*> linears, matmuls, sequential, backward_nodes;
  for (const Event& event : events) {
    if (event.category == Category::module && event.name == "Linear") linears.push_back(&event);
    if (event.category == Category::module && event.name == "Sequential") sequential.push_back(&event);
    if (event.category == Category::op && event.name == "matmul") matmuls.push_back(&event);
    if (event.category == Category::backward) backward_nodes.push_back(&event);
  }
  ASSERT_EQ(sequential.size(), 1u);
  ASSERT_EQ(linears.size(), 2u);
  for (const Event* linear : linears) EXPECT_TRUE(inside(*linear, *sequential[0]));
  // Forward: one product per Linear, inside it, with the layer's shapes.
  ASSERT_GE(matmuls.size(), 2u);
  EXPECT_TRUE(inside(*matmuls[0], *linears[0]));
  EXPECT_EQ(matmuls[0]->shapes, "[[3, 4], [4, 8]]");
  EXPECT_EQ(matmuls[0]->flops, 2 * 3 * 4 * 8);
  EXPECT_TRUE(inside(*matmuls[1], *linears[1]));
  EXPECT_EQ(matmuls[1]->shapes, "[[3, 8], [8, 2]]");

  // Backward: the nodes of sum, both linears (bias included), relu and the
  // leaf accumulators, after the forward; every backward matmul (the
  // gradients of the inputs and weights) lies in a linear's backward node.
  std::vector<std::string> names;
  for (const Event* node : backward_nodes) {
    names.push_back(node->name);
    EXPECT_GE(node->begin_ns, sequential[0]->end_ns);
  }
  EXPECT_EQ(std::count(names.begin(), names.end(), "AddmmBackward"), 2) << ::testing::PrintToString(names);
  EXPECT_EQ(std::count(names.begin(), names.end(), "AccumulateGrad"), 4) << ::testing::PrintToString(names);
  int backward_matmuls = 0;
  for (const Event* matmul : matmuls) {
    if (matmul->begin_ns < sequential[0]->end_ns) continue;
    ++backward_matmuls;
    bool nested = false;
    for (const Event* node : backward_nodes) nested |= node->name == "AddmmBackward" && inside(*matmul, *node);
    EXPECT_TRUE(nested) << "a backward matmul outside every AddmmBackward span";
  }
  EXPECT_GE(backward_matmuls, 3);  // the first layer's input needs no gradient
}

}  // namespace
}  // namespace ember::testing
