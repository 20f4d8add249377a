// The backward engine: the reverse walk over the recorded graph.
// Tests: tests/autograd/test_engine.cpp, tests/autograd/test_node_observer.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

// Computes gradients of `roots` (seeded with `grad_roots`; ones for a scalar
// root when omitted) and accumulates them into the leaves' `.grad`.
// create_graph records the backward pass itself, so the gradients it produces
// can be differentiated again (Note [Higher-order gradients] in
// autograd/README.md); retain_graph, which keeps the saved tensors for another
// backward, defaults to create_graph, as in PyTorch.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching any `.grad`. An input the
// outputs do not depend on gets an undefined tensor if allow_unused, else an
// error. retain_graph and create_graph as for backward; PyTorch's order.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

// Runs `callback` once the backward pass now running has finished its walk,
// before backward() returns (PyTorch's queue_callback): module backward hooks
// use it to learn that a backward ended. Callbacks run in the order queued;
// one may queue another. Only valid inside a backward pass (from a hook or a
// node); elsewhere it is an error.
void queue_callback(std::function<void()> callback);

class Node;

// Called after each node of a backward walk ran, with the node and the times
// around its apply() (the leaf accumulators' hooks included). One observer for
// the process; none by default, and then the engine reads no clock unless a
// profile records backward nodes (core/profiler, which the engine calls
// directly). The observer runs on the thread running backward.
using Clock = std::chrono::steady_clock;
using NodeObserver = std::function<void(const Node& node, Clock::time_point begin, Clock::time_point end)>;
// Installs `observer` (an empty one removes it) for backward walks that start
// afterwards, and returns the previous one so a caller can restore it.
NodeObserver set_node_observer(NodeObserver observer);

}  // namespace ember::autograd
