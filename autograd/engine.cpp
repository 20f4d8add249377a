// The backward engine, in the spirit of micrograd: collect the nodes reachable
// from the roots, count how many consumers feed each one, then walk in reverse.
// A node runs once every consumer has contributed its gradient; among ready
// nodes the most recently created runs first, so the walk follows the reverse
// of the forward order (and leaf accumulators run as soon as they are ready).
#include "autograd/engine.h"

#include <algorithm>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd/accumulate_grad.h"
#include "autograd/function.h"
#include "core/autocast.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "core/profiler/profiler.h"

namespace ember::autograd {
namespace {

// Note [Broadcast undone once]: a gradient that arrives with the broadcast
// shape of the forward op is summed back to its input's shape here, and
// nowhere else; formulas return gradients in the output's shape.
Tensor fit_to_input(Tensor grad, const InputMeta& meta) {
  if (grad.shape() != meta.shape) {
    int lead = grad.dim() - meta.shape.ndim();
    Dims dims;
    for (int d = 0; d < grad.dim(); ++d)
      if (d < lead || (meta.shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
    grad = dims.empty() ? grad : sum(grad, dims, true);
    grad = grad.reshape(meta.shape);
  }
  if (grad.device() != meta.device) grad = grad.to(meta.device);  // a to(device) node's gradient goes back
  return grad.dtype() == meta.dtype ? grad : grad.to(meta.dtype);
}

// The observer is read once per walk, so the walk never races a change and
// the nodes pay nothing when there is none.
std::mutex observer_mutex;
std::shared_ptr<const NodeObserver> node_observer;

std::shared_ptr<const NodeObserver> current_observer() {
  std::lock_guard lock(observer_mutex);
  return node_observer;
}

struct Ready {
  Node* node;
  bool operator<(const Ready& other) const { return node->sequence_nr < other.node->sequence_nr; }
};

// Where autograd::grad collects its answers instead of accumulating them.
struct Capture {
  std::unordered_map<Node*, std::vector<std::pair<int, size_t>>> at;  // node -> (output_nr, answer index)
  std::vector<Tensor> answers;
};

// Note [Only the paths to grad's inputs run]: autograd::grad runs the nodes
// from which a path leads to one of its inputs, and no other (PyTorch's
// exec_info): a node off those paths would fire its hooks, retain_grad()
// included, and spend the time of its formula for nothing. Returns the nodes
// to run; a captured node itself runs only when another input lies below it.
std::unordered_set<Node*> nodes_leading_to(const std::vector<std::shared_ptr<Node>>& roots, const Capture& capture) {
  std::unordered_map<Node*, bool> leads;  // node -> whether it is or leads to a captured node
  std::unordered_set<Node*> to_run;
  std::vector<std::pair<Node*, size_t>> stack;  // (node, next edge to visit)
  for (const auto& root : roots) {
    if (!leads.emplace(root.get(), false).second) continue;
    stack.push_back({root.get(), 0});
    while (!stack.empty()) {
      Node* node = stack.back().first;
      const size_t edge = stack.back().second++;
      if (edge < node->next.size()) {
        Node* next = node->next[edge].node.get();
        if (next && leads.emplace(next, false).second) stack.push_back({next, 0});
        continue;
      }
      // Every node below is done (the graph has no cycles).
      const bool below = std::any_of(node->next.begin(), node->next.end(),
                                     [&](const Edge& e) { return e.node && leads[e.node.get()]; });
      if (below) to_run.insert(node);
      leads[node] = below || capture.at.count(node) > 0;
      stack.pop_back();
    }
  }
  return to_run;
}

// The callbacks queued during the backward pass running on this thread, or null.
thread_local std::vector<std::function<void()>>* queued_callbacks = nullptr;

void walk(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
          bool create_graph, Capture* capture);

// One backward pass: the walk, then the callbacks queued during it.
void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
         bool create_graph, Capture* capture) {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer = std::exchange(queued_callbacks, &callbacks);
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() { queued_callbacks = outer; }
  } restore{outer};
  walk(roots, grad_roots, retain_graph, create_graph, capture);
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
}

void walk(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
          bool create_graph, Capture* capture) {
  // Formulas are recorded only for create_graph (Note [Higher-order gradients]).
  GradModeGuard grad_mode(create_graph);
  // Gradient formulas compute in the dtypes the forward saved, whatever the
  // caller's autocast policy (Note [Autocast] in core/README.md).
  NoAutocastGuard no_autocast;
  std::shared_ptr<const NodeObserver> observer = current_observer();
  // Every node's span goes on the profiler's timeline while a profile records them.
  const bool profiling = profiler::recording(profiler::kRecordBackward);
  // grad() walks with a capture: its errors name it, not backward.
  const char* const caller = capture ? "grad" : "backward";
  EMBER_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "{}: {} gradients given for {} tensors", caller,
              grad_roots.size(), roots.size());

  // Seed the root nodes with their gradients.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    EMBER_CHECK(root.defined() && root.requires_grad(),
                "{}: tensor {} of shape {} does not require grad and has no grad_fn (a gradient taken without "
                "create_graph=true, or one that does not depend on the inputs, is a constant)",
                caller, i, root.shape());
    Tensor seed = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!seed.defined()) {
      EMBER_CHECK(root.numel() == 1,
                  "{}: grad can be implicitly created only for scalar outputs, got shape {}", caller, root.shape());
      seed = ones_like(root);
    }
    EMBER_CHECK(seed.shape() == root.shape(), "{}: gradient of shape {} given for a tensor of shape {}", caller,
                seed.shape(), root.shape());
    // A gradient of another dtype or device is taken as the root's, as
    // PyTorch's validate_outputs does (an f16 seed made the formulas run in f16).
    if (seed.dtype() != root.dtype()) seed = seed.to(root.dtype());
    if (seed.device() != root.device()) seed = seed.to(root.device());
    Edge edge = gradient_edge(root);
    auto& buffer = buffers[edge.node.get()];
    buffer.resize(size_t(edge.node->num_outputs));
    Tensor& slot = buffer[size_t(edge.output_nr)];
    slot = slot.defined() ? slot + seed : seed;
    root_nodes.push_back(edge.node);
  }

  // Count, for every reachable node, the edges that lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const auto& node : root_nodes)
    if (seen.insert(node.get()).second) stack.push_back(node.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next) {
      if (!edge.node) continue;
      ++dependencies[edge.node.get()];
      if (seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }

  const std::unordered_set<Node*> to_run = capture ? nodes_leading_to(root_nodes, *capture) : std::unordered_set<Node*>();

  // The reverse walk.
  std::priority_queue<Ready> ready;
  std::unordered_set<Node*> seeded;
  for (const auto& node : root_nodes)
    if (dependencies[node.get()] == 0 && seeded.insert(node.get()).second) ready.push({node.get()});
  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(size_t(node->num_outputs));
    // autograd::grad() collects its answers at the captured nodes, runs only
    // the nodes that lead to them, and never writes any .grad.
    const auto captured = capture ? capture->at.find(node) : decltype(capture->at)::iterator();
    const bool skip = capture && !to_run.count(node);
    const bool is_captured = capture && captured != capture->at.end();
    if (!skip || is_captured) {
      // A hook may register more on its tensor (reallocating the list): they
      // run from the next pass. retain_grad's come last, whenever registered.
      for (const auto* list : {&node->pre_hooks, &node->retain_grad_hooks}) {
        if (list->empty()) continue;
        const auto hooks = *list;
        for (const OutputHook& entry : hooks) {
          Tensor& grad = grads[size_t(entry.output_nr)];
          if (grad.defined()) grad = apply_tensor_hook(entry.hook, grad);
        }
      }
    }
    if (is_captured) {
      // A captured leaf's answer has been through its tensor hooks, as what
      // backward would accumulate (PyTorch 2 runs them before capturing).
      if (const auto* accumulator = dynamic_cast<const AccumulateGrad*>(node))
        grads[0] = apply_leaf_hooks(*accumulator->leaf(), std::move(grads[0]));
      for (auto [output_nr, index] : captured->second) capture->answers[index] = grads[size_t(output_nr)];
    }

    std::vector<Tensor> input_grads;
    if (!skip) {
      if (observer || profiling) {
        Clock::time_point begin = Clock::now();
        input_grads = node->apply(std::move(grads));
        Clock::time_point end = Clock::now();
        if (observer) (*observer)(*node, begin, end);
        if (profiling)
          profiler::record_span(profiler::kRecordBackward, profiler::Category::backward, node->name(), begin, end);
      } else {
        input_grads = node->apply(std::move(grads));
      }
      // A second backward through a node that saved nothing runs it again,
      // as in PyTorch; one that saved tensors refuses when it unpacks them
      // (SavedTensor::unpack: "backward through the graph a second time").
      if (!retain_graph && !node->outlives_graph) node->release_saved();
    }

    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& edge = node->next[i];
      if (!edge.node) continue;
      Node* next = edge.node.get();
      if (i < input_grads.size() && input_grads[i].defined()) {
        Tensor grad = fit_to_input(std::move(input_grads[i]), node->inputs[i]);
        auto& buffer = buffers[next];
        buffer.resize(size_t(next->num_outputs));
        Tensor& slot = buffer[size_t(edge.output_nr)];
        slot = slot.defined() ? slot + grad : grad;
      }
      if (--dependencies[next] == 0) ready.push({next});
    }
  }
}

}  // namespace

void queue_callback(std::function<void()> callback) {
  EMBER_CHECK(queued_callbacks != nullptr, "autograd::queue_callback: called outside a backward pass");
  queued_callbacks->push_back(std::move(callback));
}

NodeObserver set_node_observer(NodeObserver observer) {
  std::lock_guard lock(observer_mutex);
  NodeObserver previous = node_observer ? *node_observer : NodeObserver();
  node_observer = observer ? std::make_shared<const NodeObserver>(std::move(observer)) : nullptr;
  return previous;
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              std::optional<bool> retain_graph, bool create_graph) {
  // PyTorch refuses both empty lists too: an empty call is a bug that would otherwise train on nothing.
  EMBER_CHECK(!roots.empty(), "backward: no tensors given to differentiate");
  run(roots, grad_roots, retain_graph.value_or(create_graph), create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  EMBER_CHECK(!outputs.empty(), "grad: no outputs given to differentiate");
  EMBER_CHECK(!inputs.empty(), "grad: no inputs given; pass the tensors whose gradients you want");
  Capture capture;
  capture.answers.resize(inputs.size());
  std::vector<std::shared_ptr<Node>> keep_alive;  // accumulators made here must live through the walk
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input {} does not require grad", i);
    Edge edge = gradient_edge(inputs[i]);
    keep_alive.push_back(edge.node);
    capture.at[edge.node.get()].push_back({edge.output_nr, i});
  }
  run(outputs, grad_outputs, retain_graph.value_or(create_graph), create_graph, &capture);
  for (size_t i = 0; i < inputs.size(); ++i)
    EMBER_CHECK(allow_unused || capture.answers[i].defined(),
                "grad: input {} (shape {}) was not used to compute the outputs; pass allow_unused=true", i,
                inputs[i].shape());
  return capture.answers;
}

}  // namespace ember::autograd
