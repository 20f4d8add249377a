// to_dot (see dot.h): a depth-first walk from the root's grad_fn.
#include "autograd/dot.h"

#include <unordered_map>
#include <vector>

#include "autograd/accumulate_grad.h"

namespace ember::autograd {

std::string to_dot(const Tensor& root) {
  std::string out = "digraph autograd {\n  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  if (!root.defined() || !root.grad_fn()) {
    if (root.defined())
      out += fmt::format("  n0 [shape=box, label=\"leaf {} {}\"];\n", root.shape(), root.dtype());
    return out + "}\n";
  }
  std::unordered_map<const Node*, int> ids;
  std::vector<const Node*> stack{root.grad_fn().get()};
  ids[root.grad_fn().get()] = 0;
  out += fmt::format("  output [shape=plaintext, label=\"output {} {}\"];\n  n0 -> output;\n", root.shape(),
                     root.dtype());
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    int id = ids[node];
    if (const auto* leaf = dynamic_cast<const AccumulateGrad*>(node)) {
      out += fmt::format("  n{} [shape=box, style=filled, fillcolor=lightblue, label=\"leaf {} {}\"];\n", id,
                         leaf->leaf()->shape, leaf->leaf()->dtype);
      continue;
    }
    out += fmt::format("  n{} [shape=ellipse, label=\"{}\"];\n", id, node->name());
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node) continue;
      auto [it, inserted] = ids.emplace(edge.node.get(), int(ids.size()));
      if (inserted) stack.push_back(edge.node.get());
      out += fmt::format("  n{} -> n{} [label=\"{} {}\"];\n", it->second, id, node->inputs[i].shape,
                         node->inputs[i].dtype);
    }
  }
  return out + "}\n";
}

}  // namespace ember::autograd
