// ProcessGroup and Work (process_group.h): validation on the calling thread,
// staging of non-contiguous tensors, and the one communication thread per
// group that runs the queued operations in call order (Note [One
// communication thread per group]) on the backend of their tensors' device:
// host backends block, a device backend's work is ordered on its stream
// (Note [Collectives on a device stream]). The registry of groups is in init.cpp.
// Tests: tests/distributed/test_collectives.cpp, test_device_collectives.cpp,
// tests/cuda/test_cuda_nccl.cpp.
#include "distributed/process_group.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>

#include "core/allocator.h"
#include "core/error.h"
#include "core/grad_hook.h"
#include "core/memory_overlap.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise_kernels.h"
#include "core/profiler/profiler.h"
#include "distributed/collective_debug.h"
#include "distributed/store/wire.h"

namespace ember::distributed {
namespace {

// Where an error happened, for messages: "rank 1 of 3 in group pg/0/", with
// the global rank too when it differs from the group rank.
std::string where(const BackendContext& context) {
  const int global = context.global_ranks.at(size_t(context.rank));
  return fmt::format("rank {} of {}{} in group {}", context.rank, context.size,
                     global == context.rank ? "" : fmt::format(" (global rank {})", global), context.store_prefix);
}

// The reduction the backends run: on bool, sum is "any" (max) and product
// "all" (min), as ProcessGroupNCCL and Gloo compute them in PyTorch.
ReduceOp checked_reduction(const char* op, const Tensor& tensor, ReduceOp reduce) {
  if (tensor.dtype() == DType::boolean && reduce == ReduceOp::sum) reduce = ReduceOp::max;
  if (tensor.dtype() == DType::boolean && reduce == ReduceOp::product) reduce = ReduceOp::min;
  EMBER_CHECK(host_reduction_supported(tensor.dtype(), reduce),
              "{}: reduce op {} is not supported for {} (tensor {}); avg needs a floating dtype",
              op, reduce_op_name(reduce), tensor.dtype(), tensor.shape());
  return reduce;
}

void check_same_dtype(const char* op, const Tensor& output, const Tensor& input) {
  EMBER_CHECK(output.dtype() == input.dtype(), "{}: output dtype {} differs from input dtype {} (output {}, input {})", op,
              output.dtype(), input.dtype(), output.shape(), input.shape());
}

void check_same_device(const char* op, const Tensor& output, const Tensor& input) {
  EMBER_CHECK(output.device() == input.device(), "{}: the output is on {} but the input on {} (output {}, input {})", op,
              output.device(), input.device(), output.shape(), input.shape());
}

// NCCL matches the messages between two ranks in call order and has no tags.
void check_device_tag(const char* op, const Tensor& tensor, uint32_t tag) {
  EMBER_CHECK(tensor.device().is_cpu() || tag == 0,
              "{}: tag {} on a CUDA tensor ({}, {}): the nccl backend has no tags, it matches the messages between "
              "two ranks in call order (use tag 0)",
              op, tag, tensor.shape(), tensor.dtype());
}

// The staged (contiguous) input and output of a collective may share memory
// only as `input` starting `in_place_offset` elements into `output` (an
// allgather's input as its own block, `place`; an allreduce_into piece at
// its own place), never otherwise (-1): another overlap reads values the
// collective has already overwritten, differently by rank.
void check_overlap(const char* op, const Tensor& input, const Tensor& output, int64_t in_place_offset,
                   std::string_view place = "") {
  const auto* in = static_cast<const std::byte*>(input.data_ptr());
  const auto* out = static_cast<const std::byte*>(output.data_ptr());
  const bool disjoint = in + input.nbytes() <= out || out + output.nbytes() <= in;
  const bool in_place = in_place_offset >= 0 && in == out + in_place_offset * output.element_size();
  EMBER_CHECK(input.numel() == 0 || output.numel() == 0 || disjoint || in_place,
              "{}: the input ({}) overlaps the output ({}){}{}; use separate tensors", op, input.shape(),
              output.shape(), in_place_offset >= 0 ? " elsewhere than at " : "", place);
}

// The contiguous buffer a collective reads or writes for `tensor`: the
// tensor itself when it is contiguous, else uninitialised scratch that
// read_in fills and write_back empties (Note [Staging on the communication
// thread]).
Tensor staging_buffer(const Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : make_tensor(tensor.shape(), tensor.dtype(), tensor.device());
}

// Copies `from` into `to`, element by element in row-major order, one of
// them a staging buffer. On the communication thread: no autograd, no version
// bump (the caller bumped the version when it queued the operation). Host
// tensors: raw bytes; device tensors: the device's copy kernel, on the
// backend's stream (the current one on this thread while a device operation runs).
void copy_elements(const Tensor& to, const Tensor& from) {
  if (to.is_same(from)) return;
  if (!to.device().is_cpu()) {
    ElementwiseLoop loop = ElementwiseLoop::make({&to, &from});
    copy_op(to.device().type, to.dtype(), loop);
    return;
  }
  const int64_t element = to.element_size();
  const int dims = to.dim();
  const auto* source = static_cast<const char*>(from.data_ptr());
  auto* target = static_cast<char*>(to.data_ptr());
  std::vector<int64_t> index(size_t(dims), 0);
  for (int64_t i = 0; i < to.numel(); ++i) {
    int64_t to_offset = 0;
    int64_t from_offset = 0;
    for (int d = 0; d < dims; ++d) {
      to_offset += index[size_t(d)] * to.stride(d);
      from_offset += index[size_t(d)] * from.stride(d);
    }
    std::memcpy(target + to_offset * element, source + from_offset * element, size_t(element));
    for (int d = dims - 1; d >= 0; --d) {  // next row-major index
      if (++index[size_t(d)] < to.size(d)) break;
      index[size_t(d)] = 0;
    }
  }
}

// Note [Staging on the communication thread]: an operation reads its input
// when it runs, not when it is queued, as one on a contiguous tensor always
// did: `allreduce(x); allreduce(x.t())` then sees the first one's result.
void read_in(const Tensor& staged, const Tensor& tensor) { copy_elements(staged, tensor); }
void write_back(const Tensor& tensor, const Tensor& staged) { copy_elements(tensor, staged); }

// AVG is SUM followed by this division (floating dtypes only, checked by
// host_reduction_supported); 16-bit values divide in f32 and round once more.
// A group of one divides by 1, which changes no value: nothing to do. Device
// tensors divide with the device's division kernel, on the backend's stream.
// Every operation the group runs is a span on the profiler's communication
// track, from when the communication thread started it to when it returned:
// a host backend's whole operation; a device backend's only its launch (its
// stream runs it later; no CUDA events are read). The args say what moved.
// The algorithm is the backend's own word for what it ran (Backend::algorithm),
// except where no data crossed between ranks: an empty buffer (at most the
// backend's check that the peers called the same), a host backend's group of one (gloo, shm and reference return
// at once; nccl is called, and picks what it runs itself).
struct OperationRecord {
  const std::string& description;
  int64_t bytes;
  const Backend& backend;
  Collective collective;
  int group_size, rank;
  std::vector<int> peers;  // global ranks: the other end of a send/recv, else every other member
  bool on_device;
  int64_t queued_ns, began_ns;
};
std::string algorithm_of(const OperationRecord& record) {
  if (record.group_size == 1 && !record.on_device) return "local (group of one)";
  if (record.bytes == 0 && record.collective != Collective::barrier) return "none (empty buffer)";
  return record.backend.algorithm(record.collective);
}
void record_operation(const OperationRecord& record) {
  nlohmann::json args = {{"description", record.description},
                         {"bytes", record.bytes},
                         {"backend", record.backend.name()},
                         {"algorithm", algorithm_of(record)},
                         {"group_size", record.group_size},
                         {"rank", record.rank},
                         {"peers", record.peers},
                         {"queued_us", double(record.began_ns - record.queued_ns) / 1000.0}};
  if (record.on_device) args["timed"] = "launch only";
  profiler::record_span(profiler::kRecordDistributed, profiler::Category::collective,
                        record.description.substr(0, record.description.find('(')), record.began_ns,
                        profiler::now_ns(), std::move(args), profiler::Track::communication);
}

void divide_in_place(const Tensor& tensor, int divisor) {
  if (divisor == 1) return;
  if (!tensor.device().is_cpu()) {
    const Tensor by = scalar_tensor(Scalar(divisor), {.dtype = tensor.dtype(), .device = tensor.device()});
    ElementwiseLoop loop = ElementwiseLoop::make({&tensor, &tensor, &by});
    div_op(tensor.device().type, tensor.dtype(), loop);
    return;
  }
  visit_dtype(tensor.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      using C = ComputeType<T>;
      auto* values = static_cast<T*>(tensor.data_ptr());
      for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = T(C(values[i]) / C(divisor));
    }
  });
}

// How an average runs on a backend without one of its own: a sum, then a
// division; 16-bit floats are summed in f32 (`widen`): summed in their own
// dtype, 2 x 65504 was inf where the mean is finite (a GradScaler's scaled
// fp16 gradients skipped steps on gloo only). Dividing first, as PyTorch's
// DDP does before a gloo sum, overflows too (3 x 65504 / 3 rounds to 65520)
// and makes the mean of three ones 0.9995; f32 costs twice the bytes on such
// backends, and gives shm's results.
struct AverageRun {
  bool widen = false;
  bool divide = false;
  ReduceOp backend_op;
};
AverageRun average_run(const Backend& backend, ReduceOp op, DType dtype) {
  if (op != ReduceOp::avg || backend.supports_avg()) return {.backend_op = op};
  return {.widen = dtype == DType::f16 || dtype == DType::bf16, .divide = true, .backend_op = ReduceOp::sum};
}

// The widened sum back into its 16-bit place with the conversion kernel
// itself, as read_in and write_back copy: copy_ would bump the version of the
// caller's tensor from the communication thread (the caller bumped it when
// it queued the operation).
void narrow_into(const Tensor& to, const Tensor& from) {
  ElementwiseLoop loop = ElementwiseLoop::make({&to, &from});
  copy_op(to.device().type, to.dtype(), loop);
}

}  // namespace

// --- Work ---------------------------------------------------------------------

void Work::wait() { wait(default_timeout_ + kWorkWaitGrace); }

void Work::wait(milliseconds timeout) {
  std::unique_lock lock(mutex_);
  // wait_for adds the timeout to now(): milliseconds::max() (the store's and
  // init's "never") overflowed there and reported a timeout at once.
  const bool done = done_cv_.wait_for(lock, std::min(timeout, wire::kLongestWait), [&] { return done_; });
  EMBER_CHECK(done,
              "{} on rank {}: Work::wait timed out after {} ms; the operation is still queued or running (did every "
              "rank of the group call it?)",
              description_, rank_, timeout.count());
  if (error_) std::rethrow_exception(error_);
  // Note [Collectives on a device stream]: the kernels this thread queues
  // from now on run after the operation; the host does not wait. A no-op
  // for host operations, whose completion is a CPU event.
  current_stream(completion_.device()).wait(completion_);
}

bool Work::is_completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Work::finish(std::exception_ptr error, Event completion) {
  {
    std::lock_guard lock(mutex_);
    EMBER_ASSERT(!done_, "{} finished twice", description_);
    done_ = true;
    error_ = std::move(error);
    completion_ = std::move(completion);
  }
  done_cv_.notify_all();
}

// --- The queue and its thread -----------------------------------------------

struct ProcessGroup::Queue {
  struct Item {
    std::shared_ptr<Work> work;
    uint64_t sequence = 0;  // collectives: 1, 2, ... (debug mode's call number); 0 for send/recv
    Collective collective = Collective::barrier;  // which operation (the profiler asks its backend the algorithm)
    Device device;          // whose backend runs it
    Event ready;            // device operations: recorded on the caller's stream at the call
    Operation operation;
    int64_t bytes = 0;      // for the profiler's span
    int64_t queued_ns = 0;  // when the call queued it (profiler clock)
    int peer = -1;          // send/recv: the other rank (group rank)
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
  // The GPU of the group's device operations, set by the first one's check:
  // one communicator per group, on one device.
  std::optional<Device> device;
  std::thread thread;
};

ProcessGroup::ProcessGroup(BackendContext context, std::unique_ptr<Backend> host_backend, ProcessGroupOptions options,
                           DeviceBackendFactory device_backend)
    : context_(std::move(context)),
      host_backend_(std::move(host_backend)),
      device_factory_(std::move(device_backend)),
      options_(options),
      queue_(std::make_unique<Queue>()) {
  EMBER_ASSERT(host_backend_ != nullptr || device_factory_.make != nullptr, "ProcessGroup needs a backend");
  EMBER_ASSERT(context_.rank >= 0 && context_.rank < context_.size, "rank {} of {}", context_.rank, context_.size);
  if (context_.global_ranks.empty())
    for (int r = 0; r < context_.size; ++r) context_.global_ranks.push_back(r);
  EMBER_ASSERT(int(context_.global_ranks.size()) == context_.size, "{} global ranks for {} ranks",
               context_.global_ranks.size(), context_.size);
  queue_->thread = std::thread([this] { run_queue(); });
}

ProcessGroup::~ProcessGroup() { close(); }

void ProcessGroup::close() {
  {
    std::lock_guard lock(queue_->mutex);
    if (queue_->stopping) return;
    queue_->stopping = true;
  }
  queue_->wake.notify_all();
  queue_->thread.join();  // runs what is still queued first
  device_backend_.reset();
  host_backend_.reset();
  context_.store.reset();  // after the backends, whose teardown may still use it
}

void ProcessGroup::check_open(std::string_view op) const {
  std::lock_guard lock(queue_->mutex);
  EMBER_CHECK(!queue_->stopping,
              "{}: the process group (rank {} of {}) was destroyed by destroy_process_group; call "
              "init_process_group again and use the group it returns (default_group())",
              op, rank(), size());
}

void ProcessGroup::flush() {
  std::unique_lock lock(queue_->mutex);
  queue_->idle.wait(lock, [&] { return queue_->items.empty() && !queue_->running; });
}

bool ProcessGroup::failed() const { return queue_->failed; }

std::string ProcessGroup::backend_name() const {
  return host_backend_ ? host_backend_->name() : device_factory_.name;
}

std::string ProcessGroup::backend_name(DeviceType type) const {
  if (type == DeviceType::cpu) return host_backend_ ? host_backend_->name() : "";
  return device_factory_.make ? device_factory_.name : "";
}

void ProcessGroup::check_tensor(const char* op, const char* role, const Tensor& tensor) {
  check_open(op);
  EMBER_CHECK(tensor.defined(), "{}: the {} tensor is undefined", op, role);
  const Device device = tensor.device();
  if (device.is_cpu()) {
    EMBER_CHECK(host_backend_ != nullptr,
                "{}: the {} tensor ({}, {}) is on the CPU; the group's {} backend takes CUDA tensors only (backend "
                "auto takes both)",
                op, role, tensor.shape(), tensor.dtype(), device_factory_.name);
    return;
  }
  EMBER_CHECK(device_factory_.make != nullptr,
              "{}: the {} tensor ({}, {}) is on {}; the group's {} backend takes CPU tensors only (backend auto or "
              "nccl takes CUDA tensors)",
              op, role, tensor.shape(), tensor.dtype(), device, backend_name());
  std::lock_guard lock(queue_->mutex);
  if (!queue_->device) queue_->device = device;
  EMBER_CHECK(*queue_->device == device,
              "{}: the {} tensor ({}, {}) is on {}, but the group's {} backend runs on {}: each process uses one GPU "
              "per group (cuda::set_device(local rank) before the first collective picks it)",
              op, role, tensor.shape(), tensor.dtype(), device, device_factory_.name, *queue_->device);
}

std::shared_ptr<Work> ProcessGroup::enqueue(std::string description, Collective collective, Device device,
                                            int64_t bytes, Operation operation, int peer) {
  const bool point_to_point = collective == Collective::send || collective == Collective::recv;
  auto work = std::make_shared<Work>(std::move(description), global_rank(rank()), options_.timeout);
  // Note [Collectives on a device stream]: what the operation reads was
  // written by the kernels queued on the caller's stream up to now.
  Event ready(device);
  ready.record(current_stream(device));
  {
    std::lock_guard lock(queue_->mutex);
    EMBER_ASSERT(!queue_->stopping, "{} queued on a group being destroyed", work->description());
    queue_->items.push_back(
        {work, point_to_point ? 0 : ++queue_->collectives, collective, device, std::move(ready), std::move(operation),
         bytes, profiler::now_ns(), peer});
  }
  queue_->wake.notify_one();
  return work;
}

Backend& ProcessGroup::backend_for(Device device) {
  if (device.is_cpu()) return *host_backend_;
  if (!device_backend_) {
    // This thread runs the device backend's calls and the kernels around them
    // (write-backs, AVG's division): they go to the group's GPU.
    if (device.is_cuda()) cuda::set_device(device.index);
    device_backend_ = device_factory_.make(context_, device);
  }
  return *device_backend_;
}

// Note [Collectives on a device stream]: the backend's stream waits for the
// caller's kernels, runs the operation (the backend's calls and the kernels
// around them, queued while its stream is current here), and records the
// event that Work::wait makes the caller's stream wait for. The backend holds
// the operation, and with it the tensors it captured, until that event
// completes, so no memory the work still uses returns to the allocator.
Event ProcessGroup::run_on_device(Backend& backend, const Event& ready, const std::string& description,
                                  Operation& operation) {
  const Stream side = backend.stream();
  side.wait(ready);
  std::exception_ptr error;
  {
    StreamGuard on_side(side);
    try {
      operation(backend);
    } catch (...) {
      error = std::current_exception();  // part of it may be queued: still watched below
    }
  }
  Event done(backend.device());
  done.record(side);
  backend.watch(description, done, std::make_shared<Operation>(std::move(operation)));
  if (error) std::rethrow_exception(error);
  return done;
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
    Event completion;
    try {
      EMBER_CHECK(queue.first_failure.empty(), "{} on {} was not run: an earlier operation of the group failed: {}",
                  item.work->description(), where(context_), queue.first_failure);
      if (options_.debug && item.sequence > 0)
        check_collective_call(*context_.store, context_.store_prefix, rank(), size(),
                              {.sequence = item.sequence, .description = item.work->description()}, options_.timeout);
      Backend& backend = backend_for(item.device);
      const int64_t began = profiler::now_ns();
      if (item.device.is_cpu())
        item.operation(backend);
      else
        completion = run_on_device(backend, item.ready, item.work->description(), item.operation);
      if (profiler::recording(profiler::kRecordDistributed)) {
        std::vector<int> peers;
        for (int member = 0; member < size(); ++member)
          if (item.peer >= 0 ? member == item.peer : member != rank()) peers.push_back(global_rank(member));
        record_operation({.description = item.work->description(), .bytes = item.bytes, .backend = backend,
                          .collective = item.collective, .group_size = size(), .rank = rank(),
                          .peers = std::move(peers), .on_device = !item.device.is_cpu(),
                          .queued_ns = item.queued_ns, .began_ns = began});
      }
    } catch (const std::exception& failure) {
      if (queue.first_failure.empty()) {
        queue.first_failure = fmt::format("{} failed on {} ({} backend): {}", item.work->description(), where(context_),
                                          backend_name(item.device.type), failure.what());
        error = std::make_exception_ptr(Error(queue.first_failure));
        queue.failed = true;
      } else {
        error = std::current_exception();
      }
    }
    // The group lets go of the call's tensors before the caller can see it
    // finish (a device backend holds those of device operations until done).
    item.operation = nullptr;
    item.work->finish(error, std::move(completion));
    {
      std::lock_guard lock(queue.mutex);
      queue.running = false;
      if (queue.items.empty()) queue.idle.notify_all();
    }
  }
}

// --- Collectives --------------------------------------------------------------
// Each checks its arguments here, on the calling thread, and queues a lambda
// that keeps its tensors alive until it has run (device operations: until
// their work is done). Empty tensors go to the backend too: the shm backend
// still meets its peers, so an empty call against another one on some other
// rank is an error there, not a wait for the timeout.

Tensor ProcessGroup::empty_symmetric(const Shape& shape, DType dtype) {
  check_open("empty_symmetric");
  const std::string op = fmt::format("empty_symmetric({}, {})", shape, dtype);
  EMBER_CHECK(host_backend_ != nullptr,
              "{}: the group's {} backend takes device tensors only; symmetric memory is CPU memory of an shm group", op,
              device_factory_.name);
  for (int64_t size : shape) EMBER_CHECK(size >= 0, "{}: sizes must be non-negative", op);
  check_numel_fits(shape, op);
  const Strides strides = contiguous_strides(shape, op);
  EMBER_CHECK(shape.numel() <= std::numeric_limits<int64_t>::max() / element_size(dtype), "{}: {} bytes overflow int64",
              op, shape.numel());
  const int64_t nbytes = shape.numel() * element_size(dtype);
  // The allocation talks to the peers through the store on this thread:
  // nothing queued before it may still be waiting on the store (debug mode)
  // for peers that are already in the allocation.
  flush();
  std::shared_ptr<std::byte> memory;
  try {
    memory = host_backend_->allocate_symmetric(nbytes);
  } catch (const Error& error) {
    EMBER_CHECK(false, "{} on rank {}: {}", op, rank(), error.what());
  }
  if (!memory) return make_tensor(shape, dtype, kCPU, "empty_symmetric");
  // The storage holds the mapping: it is unmapped when the last view dies.
  // Its bytes count in memory_allocated() meanwhile.
  count_external_memory(nbytes);
  auto storage = std::make_shared<Storage>(memory.get(), size_t(nbytes), kCPU,
                                           [memory, nbytes](void*) { count_external_memory(-nbytes); });
  return Tensor::make(std::move(storage), dtype, shape, strides, 0);
}

bool ProcessGroup::is_symmetric(const Tensor& tensor) const {
  return host_backend_ && tensor.defined() && tensor.device().is_cpu() && tensor.is_contiguous() &&
         host_backend_->is_symmetric(tensor.data_ptr(), tensor.nbytes());
}

std::shared_ptr<Work> ProcessGroup::allreduce(Tensor tensor, ReduceOp op) {
  check_tensor("allreduce", "input", tensor);
  check_no_internal_overlap(tensor, "allreduce");
  op = checked_reduction("allreduce", tensor, op);
  Tensor buffer = staging_buffer(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("allreduce({}, {}, {})", tensor.shape(), tensor.dtype(), reduce_op_name(op)),
                 Collective::allreduce, tensor.device(), tensor.nbytes(), [this, tensor, buffer, op](Backend& backend) {
                   read_in(buffer, tensor);
                   const AverageRun run = average_run(backend, op, buffer.dtype());
                   NoGradGuard no_grad;  // the widened copies are plain data
                   const Tensor summed = run.widen ? buffer.to(DType::f32) : buffer;
                   backend.allreduce(summed.data_ptr(), summed.numel(), summed.dtype(), run.backend_op);
                   if (run.divide) divide_in_place(summed, size());
                   if (run.widen) narrow_into(buffer, summed);
                   write_back(tensor, buffer);
                 });
}

std::shared_ptr<Work> ProcessGroup::allreduce_into(Tensor output, std::vector<Tensor> inputs, ReduceOp op) {
  check_tensor("allreduce_into", "output", output);
  check_no_internal_overlap(output, "allreduce_into");
  op = checked_reduction("allreduce_into", output, op);
  EMBER_CHECK(output.is_contiguous(), "allreduce_into: the output ({}, {}) must be contiguous", output.shape(),
              output.dtype());
  int64_t total = 0;
  std::vector<Tensor> buffers;
  for (const Tensor& input : inputs) {
    check_tensor("allreduce_into", "input", input);
    check_same_device("allreduce_into", output, input);
    check_same_dtype("allreduce_into", output, input);
    buffers.push_back(staging_buffer(input));
    // Its own place: where it lies when the inputs are laid end to end.
    check_overlap("allreduce_into", buffers.back(), output, total,
                  fmt::format("its own place (element {} of the output)", total));
    total += input.numel();
  }
  EMBER_CHECK(total == output.numel(), "allreduce_into: the inputs hold {} elements, the output {} has {} ({})", total,
              output.shape(), output.numel(), output.dtype());
  output.bump_version();
  return enqueue(fmt::format("allreduce_into({}, {} inputs, {}, {})", output.shape(), inputs.size(), output.dtype(),
                             reduce_op_name(op)),
                 Collective::allreduce, output.device(), output.nbytes(),
                 [this, output, inputs, buffers, op](Backend& backend) {
                   for (size_t i = 0; i < inputs.size(); ++i) read_in(buffers[i], inputs[i]);
                   const AverageRun run = average_run(backend, op, output.dtype());
                   const ReduceOp backend_op = run.backend_op;
                   if (output.device().is_cpu() && !run.widen) {
                     std::vector<Backend::Piece> pieces;
                     for (const Tensor& input : buffers) pieces.push_back({input.data_ptr(), input.numel()});
                     backend.allreduce_into(output.data_ptr(), pieces, output.numel(), output.dtype(), backend_op);
                   } else {
                     // Device backends reduce in place (and a widened sum
                     // reads the output whole): the pieces go to their places
                     // first, on the backend's stream (current here).
                     const Tensor flat = output.detach().view({output.numel()});
                     int64_t at = 0;
                     for (const Tensor& input : buffers) {
                       const Tensor place = flat.narrow(0, at, input.numel()).view(input.shape());
                       if (place.data_ptr() != input.data_ptr()) write_back(place, input);
                       at += input.numel();
                     }
                     NoGradGuard no_grad;
                     const Tensor summed = run.widen ? output.to(DType::f32) : output;
                     backend.allreduce(summed.data_ptr(), summed.numel(), summed.dtype(), backend_op);
                     if (run.widen) {
                       divide_in_place(summed, size());
                       narrow_into(output, summed);
                       return;
                     }
                   }
                   if (run.divide) divide_in_place(output, size());
                 });
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor tensor, int root) {
  check_tensor("broadcast", "input", tensor);
  check_no_internal_overlap(tensor, "broadcast");
  EMBER_CHECK(root >= 0 && root < size(), "broadcast: root {} is out of range for a group of {} ranks (tensor {}, {}; {})",
              root, size(), tensor.shape(), tensor.dtype(), where(context_));
  Tensor buffer = staging_buffer(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("broadcast({}, {}, root {})", tensor.shape(), tensor.dtype(), root), Collective::broadcast,
                 tensor.device(), tensor.nbytes(), [this, tensor, buffer, root](Backend& backend) {
                   if (rank() == root) read_in(buffer, tensor);
                   backend.broadcast(buffer.data_ptr(), buffer.nbytes(), root);
                   write_back(tensor, buffer);
                 });
}

std::shared_ptr<Work> ProcessGroup::allgather(Tensor output, Tensor input) {
  check_tensor("allgather", "output", output);
  check_no_internal_overlap(output, "allgather");
  check_tensor("allgather", "input", input);
  check_same_device("allgather", output, input);
  check_same_dtype("allgather", output, input);
  EMBER_CHECK(output.numel() == size() * input.numel(),
              "allgather: output {} has {} elements, but {} ranks x input {} ({} elements) need {} ({}, {})",
              output.shape(), output.numel(), size(), input.shape(), input.numel(), size() * input.numel(),
              input.dtype(), where(context_));
  Tensor source = staging_buffer(input), destination = staging_buffer(output);
  check_overlap("allgather", source, destination, int64_t(rank()) * input.numel(), "this rank's block");
  output.bump_version();
  return enqueue(fmt::format("allgather(output {}, input {}, {})", output.shape(), input.shape(), input.dtype()),
                 Collective::allgather, input.device(), output.nbytes(),
                 [output, input, source, destination](Backend& backend) {
                   read_in(source, input);
                   backend.allgather(source.data_ptr(), destination.data_ptr(), source.nbytes());
                   write_back(output, destination);
                 });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor output, Tensor input, ReduceOp op) {
  check_tensor("reduce_scatter", "output", output);
  check_no_internal_overlap(output, "reduce_scatter");
  check_tensor("reduce_scatter", "input", input);
  check_same_device("reduce_scatter", output, input);
  check_same_dtype("reduce_scatter", output, input);
  op = checked_reduction("reduce_scatter", input, op);
  EMBER_CHECK(input.numel() == size() * output.numel(),
              "reduce_scatter: input {} has {} elements, but {} ranks x output {} ({} elements) need {} ({}, {})",
              input.shape(), input.numel(), size(), output.shape(), output.numel(), size() * output.numel(),
              input.dtype(), where(context_));
  Tensor source = staging_buffer(input), destination = staging_buffer(output);
  check_overlap("reduce_scatter", source, destination, -1);
  output.bump_version();
  return enqueue(fmt::format("reduce_scatter(output {}, input {}, {}, {})", output.shape(), input.shape(),
                             input.dtype(), reduce_op_name(op)),
                 Collective::reduce_scatter, input.device(), input.nbytes(),
                 [this, output, input, source, destination, op](Backend& backend) {
                   read_in(source, input);
                   const AverageRun run = average_run(backend, op, source.dtype());
                   NoGradGuard no_grad;
                   const Tensor summed = run.widen ? source.to(DType::f32) : source;
                   const Tensor scattered = run.widen ? destination.to(DType::f32) : destination;
                   backend.reduce_scatter(summed.data_ptr(), scattered.data_ptr(), scattered.numel(), scattered.dtype(),
                                          run.backend_op);
                   if (run.divide) divide_in_place(scattered, size());
                   if (run.widen) narrow_into(destination, scattered);
                   write_back(output, destination);
                 });
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor output, Tensor input) {
  check_tensor("all_to_all", "output", output);
  check_no_internal_overlap(output, "all_to_all");
  check_tensor("all_to_all", "input", input);
  check_same_device("all_to_all", output, input);
  check_same_dtype("all_to_all", output, input);
  EMBER_CHECK(input.numel() == output.numel() && input.numel() % size() == 0,
              "all_to_all: input {} ({} elements) and output {} ({} elements) must have the same number of elements, "
              "divisible by the group's {} ranks ({}, {})",
              input.shape(), input.numel(), output.shape(), output.numel(), size(), input.dtype(), where(context_));
  Tensor source = staging_buffer(input), destination = staging_buffer(output);
  check_overlap("all_to_all", source, destination, -1);
  output.bump_version();
  return enqueue(fmt::format("all_to_all(output {}, input {}, {})", output.shape(), input.shape(), input.dtype()),
                 Collective::all_to_all, input.device(), input.nbytes(),
                 [this, output, input, source, destination](Backend& backend) {
                   read_in(source, input);
                   backend.all_to_all(source.data_ptr(), destination.data_ptr(), source.nbytes() / size());
                   write_back(output, destination);
                 });
}

// Ranks meet through the host backend; a group of CUDA tensors only meets
// through its device backend, on the group's GPU (before its first
// operation: the current one).
std::shared_ptr<Work> ProcessGroup::barrier() {
  check_open("barrier");
  Device device = kCPU;
  if (!host_backend_) {
    std::lock_guard lock(queue_->mutex);
    if (!queue_->device) queue_->device = Device(DeviceType::cuda, cuda::current_device());
    device = *queue_->device;
  }
  return enqueue("barrier()", Collective::barrier, device, 0, [](Backend& backend) { backend.barrier(); });
}

std::shared_ptr<Work> ProcessGroup::send(Tensor tensor, int dst, uint32_t tag) {
  check_tensor("send", "input", tensor);
  check_device_tag("send", tensor, tag);
  EMBER_CHECK(dst >= 0 && dst < size() && dst != rank(),
              "send: dst {} must be another rank of the group's {} (tensor {}, {}, tag {}; {})", dst, size(),
              tensor.shape(), tensor.dtype(), tag, where(context_));
  Tensor buffer = staging_buffer(tensor);
  return enqueue(fmt::format("send({}, {}, dst {}, tag {})", tensor.shape(), tensor.dtype(), dst, tag), Collective::send,
                 tensor.device(), tensor.nbytes(), [tensor, buffer, dst, tag](Backend& backend) {
                   read_in(buffer, tensor);
                   backend.send(buffer.data_ptr(), buffer.nbytes(), dst, tag);
                 }, dst);
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor tensor, int src, uint32_t tag) {
  check_tensor("recv", "output", tensor);
  check_no_internal_overlap(tensor, "recv");
  check_device_tag("recv", tensor, tag);
  EMBER_CHECK(src >= 0 && src < size() && src != rank(),
              "recv: src {} must be another rank of the group's {} (tensor {}, {}, tag {}; {})", src, size(),
              tensor.shape(), tensor.dtype(), tag, where(context_));
  Tensor buffer = staging_buffer(tensor);
  tensor.bump_version();
  return enqueue(fmt::format("recv({}, {}, src {}, tag {})", tensor.shape(), tensor.dtype(), src, tag), Collective::recv,
                 tensor.device(), tensor.nbytes(), [tensor, buffer, src, tag](Backend& backend) {
                   backend.recv(buffer.data_ptr(), buffer.nbytes(), src, tag);
                   write_back(tensor, buffer);
                 }, src);
}

}  // namespace ember::distributed
