// The engine's node observer: called once per node a backward runs, in the
// walk's order, with begin <= end; never called once removed; the previous
// observer is handed back.
#include "support/test_support.h"

namespace ember::testing {
namespace {

struct ObserverScope {
  explicit ObserverScope(autograd::NodeObserver observer)
      : previous(autograd::set_node_observer(std::move(observer))) {}
  ~ObserverScope() { autograd::set_node_observer(previous); }
  autograd::NodeObserver previous;
};

TEST(NodeObserver, SeesEveryNodeOfABackwardInOrder) {
  Tensor w = ones({3}).requires_grad_(true);
  Tensor x = full({3}, 2.0);
  std::vector<std::string> names;
  {
    ObserverScope scope([&](const autograd::Node& node, autograd::Clock::time_point begin,
                            autograd::Clock::time_point end) {
      EXPECT_LE(begin, end);
      names.push_back(node.name());
    });
    sum(w * x).backward();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"SumBackward", "MulBackward", "AccumulateGrad"}));
  names.clear();
  sum(w * x).backward();  // removed: not called
  EXPECT_TRUE(names.empty());
}

TEST(NodeObserver, ReturnsThePreviousObserver) {
  int first = 0;
  autograd::NodeObserver previous =
      autograd::set_node_observer([&](const autograd::Node&, autograd::Clock::time_point, autograd::Clock::time_point) {
        ++first;
      });
  EXPECT_FALSE(previous);  // none by default
  autograd::NodeObserver mine = autograd::set_node_observer(nullptr);
  ASSERT_TRUE(mine);
  Tensor w = ones({2}).requires_grad_(true);
  sum(w).backward();
  EXPECT_EQ(first, 0);
  autograd::set_node_observer(mine);
  sum(w).backward();
  EXPECT_EQ(first, 2);  // SumBackward, AccumulateGrad
  autograd::set_node_observer(nullptr);
}

}  // namespace
}  // namespace ember::testing
