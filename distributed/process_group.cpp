// ProcessGroup and Work (process_group.h): validation on the calling thread,
// staging of non-contiguous tensors, and the one communication thread per
// group that runs the queued operations on the Backend in call order (Note
// [One communication thread per group]). The registry of groups is in init.cpp.
// Tests: tests/distributed/test_collectives.cpp.
#include "distributed/process_group.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <type_traits>

#include "core/error.h"
#include "distributed/collective_debug.h"

namespace ember::distributed {
namespace {

// Where an error happened, for messages: "rank 1 of 3 in group pg/0/", with
// the global rank too when it differs from the group rank.
std::string where(const BackendContext& context) {
  const int global = context.global_ranks.at(size_t(context.rank));
  return fmt::format("rank {} of {}{} in group {}", context.rank, context.size,
                     global == context.rank ? "" : fmt::format(" (global rank {})", global), context.store_prefix);
}

void check_tensor(const char* op, const char* role, const Tensor& tensor) {
  EMBER_CHECK(tensor.defined(), "{}: the {} tensor is undefined", op, role);
  EMBER_CHECK(tensor.device().is_cpu(), "{}: the {} tensor ({}, {}) is on {}; host backends (gloo, shm) take CPU tensors",
              op, role, tensor.shape(), tensor.dtype(), tensor.device());
}

void check_reduction(const char* op, const Tensor& tensor, ReduceOp reduce) {
  EMBER_CHECK(host_reduction_supported(tensor.dtype(), reduce),
              "{}: reduce op {} is not supported for {} (tensor {}); avg needs a floating dtype, bool takes only max and min",
              op, reduce_op_name(reduce), tensor.dtype(), tensor.shape());
}

void check_same_dtype(const char* op, const Tensor& output, const Tensor& input) {
  EMBER_CHECK(output.dtype() == input.dtype(), "{}: output dtype {} differs from input dtype {} (output {}, input {})", op,
              output.dtype(), input.dtype(), output.shape(), input.shape());
}

// A contiguous tensor holding `tensor`'s values now: `tensor` itself when it
// is contiguous, else a copy (made on the calling thread, outside autograd).
Tensor staged_copy(const Tensor& tensor) { return tensor.is_contiguous() ? tensor : tensor.detach().contiguous(); }

// A contiguous tensor to receive an output into: `tensor` itself when it is
// contiguous, else uninitialised scratch copied back by write_back.
Tensor staged_output(const Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : make_tensor(tensor.shape(), tensor.dtype());
}

// Copies a contiguous staging buffer back into the strided view it stands
// for. Raw bytes, on the communication thread: no autograd, no version bump
// (the caller bumped the version when it queued the operation).
void write_back(const Tensor& view, const Tensor& staged) {
  if (view.is_same(staged)) return;
  const int64_t element = view.element_size();
  const int dims = view.dim();
  const auto* source = static_cast<const char*>(staged.data_ptr());
  auto* base = static_cast<char*>(view.data_ptr());
  std::vector<int64_t> index(size_t(dims), 0);
  for (int64_t i = 0; i < view.numel(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < dims; ++d) offset += index[size_t(d)] * view.stride(d);
    std::memcpy(base + offset * element, source + i * element, size_t(element));
    for (int d = dims - 1; d >= 0; --d) {  // next row-major index
      if (++index[size_t(d)] < view.size(d)) break;
      index[size_t(d)] = 0;
    }
  }
}

// AVG is SUM followed by this division (floating dtypes only, checked by
// host_reduction_supported); 16-bit values divide in f32 and round once more.
void divide_in_place(const Tensor& tensor, int divisor) {
  visit_dtype(tensor.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      using C = ComputeType<T>;
      auto* values = static_cast<T*>(tensor.data_ptr());
      for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = T(C(values[i]) / C(divisor));
    }
  });
}

}  // namespace

// --- Work ---------------------------------------------------------------------

void Work::wait() { wait(default_timeout_ + kWorkWaitGrace); }

void Work::wait(milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const bool done = done_cv_.wait_for(lock, timeout, [&] { return done_; });
  EMBER_CHECK(done,
              "{} on rank {}: Work::wait timed out after {} ms; the operation is still queued or running (did every "
              "rank of the group call it?)",
              description_, rank_, timeout.count());
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    EMBER_ASSERT(!done_, "{} finished twice", description_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

// --- The queue and its thread -----------------------------------------------

struct ProcessGroup::Queue {
  struct Item {
    std::shared_ptr<Work> work;
    uint64_t sequence = 0;  // collectives: 1, 2, ... (debug mode's call number); 0 for send/recv
    std::function<void()> operation;
  };
  std::mutex mutex;
  std::condition_variable wake;  // an item arrived, or stopping
  std::condition_variable idle;  // the queue ran dry
  std::deque<Item> items;
  bool running = false;
  bool stopping = false;
  uint64_t collectives = 0;
  std::string first_failure;  // non-empty once an operation failed; only the communication thread touches it
  std::atomic<bool> failed = false;
  std::thread thread;
};

ProcessGroup::ProcessGroup(BackendContext context, std::unique_ptr<Backend> backend, ProcessGroupOptions options)
    : context_(std::move(context)), backend_(std::move(backend)), options_(options), queue_(std::make_unique<Queue>()) {
  EMBER_ASSERT(backend_ != nullptr, "ProcessGroup needs a backend");
  EMBER_ASSERT(context_.rank >= 0 && context_.rank < context_.size, "rank {} of {}", context_.rank, context_.size);
  if (context_.global_ranks.empty())
    for (int r = 0; r < context_.size; ++r) context_.global_ranks.push_back(r);
  EMBER_ASSERT(int(context_.global_ranks.size()) == context_.size, "{} global ranks for {} ranks",
               context_.global_ranks.size(), context_.size);
  queue_->thread = std::thread([this] { run_queue(); });
}

ProcessGroup::~ProcessGroup() {
  {
    std::lock_guard lock(queue_->mutex);
    queue_->stopping = true;
  }
  queue_->wake.notify_all();
  queue_->thread.join();  // runs what is still queued first
}

void ProcessGroup::flush() {
  std::unique_lock lock(queue_->mutex);
  queue_->idle.wait(lock, [&] { return queue_->items.empty() && !queue_->running; });
}

bool ProcessGroup::failed() const { return queue_->failed; }

std::shared_ptr<Work> ProcessGroup::enqueue(std::string description, bool collective, std::function<void()> operation) {
  auto work = std::make_shared<Work>(std::move(description), global_rank(rank()), options_.timeout);
  {
    std::lock_guard lock(queue_->mutex);
    EMBER_ASSERT(!queue_->stopping, "{} queued on a group being destroyed", work->description());
    queue_->items.push_back({work, collective ? ++queue_->collectives : 0, std::move(operation)});
  }
  queue_->wake.notify_one();
  return work;
}

// Note [One communication thread per group]: operations run here one at a
// time, in the order they were queued.
void ProcessGroup::run_queue() {
  Queue& queue = *queue_;
  for (;;) {
    Queue::Item item;
    {
      std::unique_lock lock(queue.mutex);
      queue.wake.wait(lock, [&] { return queue.stopping || !queue.items.empty(); });
      if (queue.items.empty()) return;
      item = std::move(queue.items.front());
      queue.items.pop_front();
      queue.running = true;
    }
    std::exception_ptr error;
    try {
      EMBER_CHECK(queue.first_failure.empty(), "{} on {} was not run: an earlier operation of the group failed: {}",
                  item.work->description(), where(context_), queue.first_failure);
      if (options_.debug && item.sequence > 0)
        check_collective_call(*context_.store, context_.store_prefix, rank(), size(),
                              {.sequence = item.sequence, .description = item.work->description()}, options_.timeout);
      item.operation();
    } catch (const std::exception& failure) {
      if (queue.first_failure.empty()) {
        queue.first_failure = fmt::format("{} failed on {} ({} backend): {}", item.work->description(), where(context_),
                                          backend_->name(), failure.what());
        error = std::make_exception_ptr(Error(queue.first_failure));
        queue.failed = true;
      } else {
        error = std::current_exception();
      }
    }
    // The group lets go of the call's tensors before the caller can see it finish.
    item.operation = nullptr;
    item.work->finish(error);
    {
      std::lock_guard lock(queue.mutex);
      queue.running = false;
      if (queue.items.empty()) queue.idle.notify_all();
    }
  }
}

// --- Collectives --------------------------------------------------------------
// Each checks its arguments here, on the calling thread, and queues a lambda
// that keeps its tensors alive until it has run. Empty tensors queue a no-op:
// the call still takes its place in the order (and in debug mode's checks).

std::shared_ptr<Work> ProcessGroup::allreduce(Tensor tensor, ReduceOp op) {
  check_tensor("allreduce", "input", tensor);
  check_reduction("allreduce", tensor, op);
  Tensor buffer = staged_copy(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("allreduce({}, {}, {})", tensor.shape(), tensor.dtype(), reduce_op_name(op)), true,
                 [this, tensor, buffer, op] {
                   if (buffer.numel() == 0) return;
                   backend_->allreduce(buffer.data_ptr(), buffer.numel(), buffer.dtype(),
                                       op == ReduceOp::avg ? ReduceOp::sum : op);
                   if (op == ReduceOp::avg) divide_in_place(buffer, size());
                   write_back(tensor, buffer);
                 });
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor tensor, int root) {
  check_tensor("broadcast", "input", tensor);
  EMBER_CHECK(root >= 0 && root < size(), "broadcast: root {} is out of range for a group of {} ranks (tensor {}, {}; {})",
              root, size(), tensor.shape(), tensor.dtype(), where(context_));
  Tensor buffer = staged_copy(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("broadcast({}, {}, root {})", tensor.shape(), tensor.dtype(), root), true,
                 [this, tensor, buffer, root] {
                   if (buffer.numel() == 0) return;
                   backend_->broadcast(buffer.data_ptr(), buffer.nbytes(), root);
                   write_back(tensor, buffer);
                 });
}

std::shared_ptr<Work> ProcessGroup::allgather(Tensor output, Tensor input) {
  check_tensor("allgather", "output", output);
  check_tensor("allgather", "input", input);
  check_same_dtype("allgather", output, input);
  EMBER_CHECK(output.numel() == size() * input.numel(),
              "allgather: output {} has {} elements, but {} ranks x input {} ({} elements) need {} ({}, {})",
              output.shape(), output.numel(), size(), input.shape(), input.numel(), size() * input.numel(),
              input.dtype(), where(context_));
  Tensor source = staged_copy(input), destination = staged_output(output);
  output.bump_version();
  return enqueue(fmt::format("allgather(output {}, input {}, {})", output.shape(), input.shape(), input.dtype()), true,
                 [this, output, source, destination] {
                   if (source.numel() == 0) return;
                   backend_->allgather(source.data_ptr(), destination.data_ptr(), source.nbytes());
                   write_back(output, destination);
                 });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor output, Tensor input, ReduceOp op) {
  check_tensor("reduce_scatter", "output", output);
  check_tensor("reduce_scatter", "input", input);
  check_same_dtype("reduce_scatter", output, input);
  check_reduction("reduce_scatter", input, op);
  EMBER_CHECK(input.numel() == size() * output.numel(),
              "reduce_scatter: input {} has {} elements, but {} ranks x output {} ({} elements) need {} ({}, {})",
              input.shape(), input.numel(), size(), output.shape(), output.numel(), size() * output.numel(),
              input.dtype(), where(context_));
  Tensor source = staged_copy(input), destination = staged_output(output);
  output.bump_version();
  return enqueue(fmt::format("reduce_scatter(output {}, input {}, {}, {})", output.shape(), input.shape(),
                             input.dtype(), reduce_op_name(op)),
                 true, [this, output, source, destination, op] {
                   if (destination.numel() == 0) return;
                   backend_->reduce_scatter(source.data_ptr(), destination.data_ptr(), destination.numel(),
                                            destination.dtype(), op == ReduceOp::avg ? ReduceOp::sum : op);
                   if (op == ReduceOp::avg) divide_in_place(destination, size());
                   write_back(output, destination);
                 });
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor output, Tensor input) {
  check_tensor("all_to_all", "output", output);
  check_tensor("all_to_all", "input", input);
  check_same_dtype("all_to_all", output, input);
  EMBER_CHECK(input.numel() == output.numel() && input.numel() % size() == 0,
              "all_to_all: input {} ({} elements) and output {} ({} elements) must have the same number of elements, "
              "divisible by the group's {} ranks ({}, {})",
              input.shape(), input.numel(), output.shape(), output.numel(), size(), input.dtype(), where(context_));
  Tensor source = staged_copy(input), destination = staged_output(output);
  output.bump_version();
  return enqueue(fmt::format("all_to_all(output {}, input {}, {})", output.shape(), input.shape(), input.dtype()), true,
                 [this, output, source, destination] {
                   if (source.numel() == 0) return;
                   backend_->all_to_all(source.data_ptr(), destination.data_ptr(), source.nbytes() / size());
                   write_back(output, destination);
                 });
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  return enqueue("barrier()", true, [this] { backend_->barrier(); });
}

std::shared_ptr<Work> ProcessGroup::send(Tensor tensor, int dst, uint32_t tag) {
  check_tensor("send", "input", tensor);
  EMBER_CHECK(dst >= 0 && dst < size() && dst != rank(),
              "send: dst {} must be another rank of the group's {} (tensor {}, {}, tag {}; {})", dst, size(),
              tensor.shape(), tensor.dtype(), tag, where(context_));
  Tensor buffer = staged_copy(tensor);
  return enqueue(fmt::format("send({}, {}, dst {}, tag {})", tensor.shape(), tensor.dtype(), dst, tag), false,
                 [this, buffer, dst, tag] {
                   if (buffer.numel() == 0) return;
                   backend_->send(buffer.data_ptr(), buffer.nbytes(), dst, tag);
                 });
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor tensor, int src, uint32_t tag) {
  check_tensor("recv", "output", tensor);
  EMBER_CHECK(src >= 0 && src < size() && src != rank(),
              "recv: src {} must be another rank of the group's {} (tensor {}, {}, tag {}; {})", src, size(),
              tensor.shape(), tensor.dtype(), tag, where(context_));
  Tensor buffer = staged_output(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("recv({}, {}, src {}, tag {})", tensor.shape(), tensor.dtype(), src, tag), false,
                 [this, tensor, buffer, src, tag] {
                   if (buffer.numel() == 0) return;
                   backend_->recv(buffer.data_ptr(), buffer.nbytes(), src, tag);
                   write_back(tensor, buffer);
                 });
}

}  // namespace ember::distributed
