// ProcessGroup: the collectives of a set of ranks, each asynchronous. A call
// validates its tensors on the calling thread, then queues the operation on
// the group's communication thread, which runs operations one at a time in
// call order (every rank calls collectives in the same order, so queue order
// is the global order: Note [One communication thread per group]) on the
// group's Backend. The returned Work completes when the operation has run;
// wait() rethrows its error. After an operation fails, the group is broken:
// every later operation fails at once with the first error.
// Non-contiguous tensors are staged through a contiguous copy and copied back.
// Outputs are written by the communication thread: do not read them, nor
// modify contiguous inputs, before wait() (outputs' version counters are
// bumped at the call, for autograd).
// A group has a host backend for CPU tensors (gloo, shm) and, in CUDA builds,
// a device backend for CUDA tensors (nccl), made at the group's first
// operation on a CUDA tensor; each call goes to the backend of its tensors'
// device (Note [Choosing a backend]). Device operations run on the backend's
// stream, ordered after the caller's kernels and before whatever the caller
// queues after wait() (Note [Collectives on a device stream]).
// init.cpp keeps the registry of groups (init_process_group, new_group,
// default_group, destroy_process_group) that DDP and the Accelerator use.
// Tests: tests/distributed/test_collectives.cpp (real processes),
// tests/distributed/test_device_collectives.cpp (the device path on a
// stand-in device), tests/cuda/test_cuda_nccl.cpp (the nccl backend).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "distributed/backend.h"
#include "distributed/environment.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed {

inline constexpr milliseconds kWorkWaitGrace{2'000};

class Work {
 public:
  // Blocks until the operation ran; rethrows its error. A timeout error names
  // the collective and this rank. The default is the group's timeout plus
  // kWorkWaitGrace, so that the operation's own timeout error (which says
  // what it waited for) normally arrives first.
  // An operation on CUDA tensors has "run" once it is queued on its backend's
  // stream: wait() then makes the waiting thread's current stream of that
  // device wait for it, so the kernels it queues next see the results while
  // the host goes on (PyTorch's NCCL semantics).
  void wait();
  void wait(milliseconds timeout);
  bool is_completed() const;  // ran (for CUDA tensors: queued on the backend's stream)
  const std::string& description() const { return description_; }

  // Made by ProcessGroup; finish() is called by its communication thread,
  // with the event recorded after a device operation's work.
  Work(std::string description, int rank, milliseconds default_timeout)
      : description_(std::move(description)), rank_(rank), default_timeout_(default_timeout) {}
  void finish(std::exception_ptr error = nullptr, Event completion = Event());

 private:
  std::string description_;
  int rank_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Event completion_;  // a CPU event (nothing to wait for) for host operations
  milliseconds default_timeout_;
};

struct ProcessGroupOptions {
  milliseconds timeout = kDefaultTimeout;
  // Before each collective, ranks compare what they are about to call through
  // the store (Note [Collective debug mode]); EMBER_DISTRIBUTED_DEBUG=1 sets it.
  bool debug = false;
};

class ProcessGroup {
 public:
  // `context.store` and `context.store_prefix` are the group's; `host_backend`
  // (for CPU tensors; null for a group of CUDA tensors only) is made from the
  // same context, and so is the device backend, by `device_backend.make`
  // (empty: the group takes no CUDA tensors).
  ProcessGroup(BackendContext context, std::unique_ptr<Backend> host_backend, ProcessGroupOptions options = {},
               DeviceBackendFactory device_backend = {});
  ~ProcessGroup();  // finishes the queued operations first
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return context_.rank; }
  int size() const { return context_.size; }
  // The global rank of group rank `group_rank`.
  int global_rank(int group_rank) const { return context_.global_ranks.at(size_t(group_rank)); }
  // The host backend's name ("gloo", "shm"), or the device backend's for a
  // group of CUDA tensors only ("nccl").
  std::string backend_name() const;
  // The backend that takes tensors of `type`: "" when the group takes none.
  std::string backend_name(DeviceType type) const;
  milliseconds timeout() const { return options_.timeout; }
  const std::shared_ptr<TcpStore>& store() const { return context_.store; }
  const std::string& store_prefix() const { return context_.store_prefix; }

  // Note [Symmetric memory] (distributed/README.md): an uninitialised CPU
  // tensor that every rank's process maps, so that the shm backend's
  // allreduce of it (or of a contiguous view of it, the same view on every
  // rank) reads and writes the peers' copies where they lie: one pass over
  // the bytes instead of two. Collective: every rank calls it, in the same
  // order, with the same shape and dtype. Where the host backend has no such
  // memory (gloo, a group of one), or /dev/shm has no room for it, it is an
  // ordinary tensor on every rank, whose collectives run as any other's
  // (is_symmetric says which).
  Tensor empty_symmetric(const Shape& shape, DType dtype = DType::f32);
  // Whether `tensor` is contiguous and lies in this group's symmetric memory,
  // so that its allreduce takes the symmetric path.
  bool is_symmetric(const Tensor& tensor) const;

  // In place on `tensor`, on every rank.
  std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::sum);
  // `output` (contiguous) gets the allreduce of `inputs` laid end to end
  // (their element counts summing to output's), on every rank; the inputs are
  // only read. An input may be the very part of `output` it stands for,
  // otherwise it must not overlap `output`. DDP's buckets: the gradients are
  // read where backward left them, with no copy into the bucket first (Note
  // [Reducing into a bucket] in distributed/README.md).
  std::shared_ptr<Work> allreduce_into(Tensor output, std::vector<Tensor> inputs, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> broadcast(Tensor tensor, int root);
  // Tensors are of any shape, all of one call on one device, outputs and
  // inputs sharing a dtype.
  // `output` has size() * input.numel() elements (any shape, e.g. [size, *input.shape]);
  // block r is rank r's input.
  std::shared_ptr<Work> allgather(Tensor output, Tensor input);
  // `input` has size() * output.numel() elements; output gets block rank() reduced over ranks.
  std::shared_ptr<Work> reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::sum);
  // Equal splits: block r of input (input.numel() / size() elements) goes to rank r;
  // output has as many elements as input, block r coming from rank r.
  std::shared_ptr<Work> all_to_all(Tensor output, Tensor input);
  std::shared_ptr<Work> barrier();
  // Point-to-point between group ranks, matched by (peer, tag) in call order.
  // A send's Work completes once its data is handed off (the matching recv may
  // come later), so a ring `send(next); recv(prev)` works.
  std::shared_ptr<Work> send(Tensor tensor, int dst, uint32_t tag = 0);
  std::shared_ptr<Work> recv(Tensor tensor, int src, uint32_t tag = 0);

  // Blocks until every queued operation has run (not an error if one failed).
  void flush();
  // Runs what is queued, stops the communication thread and releases the
  // backends; every later call is an error. destroy_process_group closes the
  // groups it made and keeps them, so a `ProcessGroup&` held past it refuses
  // instead of dangling. The destructor closes too.
  void close();
  // Whether an operation of this group failed (every later one then fails too).
  bool failed() const;

 private:
  struct Queue;
  using Operation = std::function<void(Backend&)>;
  // Checks that `tensor` is defined and that the group has a backend for its
  // device (one GPU per group); "op: the output tensor ...".
  void check_tensor(const char* op, const char* role, const Tensor& tensor);
  void check_open(std::string_view op) const;  // an error naming `op` once the group is closed
  // Queues `operation`, to run on the backend of `device`; all but send and
  // recv take part in debug mode's checks. Called after the call's staging copies:
  // a device operation waits for the kernels queued so far on the caller's stream.
  // `bytes`: the buffer the operation moves (nccl-tests' size), and `peer`:
  // send's and recv's other rank (group rank), both for the profiler.
  std::shared_ptr<Work> enqueue(std::string description, Collective collective, Device device, int64_t bytes,
                                Operation operation, int peer = -1);
  void run_queue();  // the communication thread's loop
  Backend& backend_for(Device device);  // on the communication thread; makes the device backend once
  // Runs `operation` on `backend`'s stream, ordered after `ready`; returns the
  // event that completes with it.
  Event run_on_device(Backend& backend, const Event& ready, const std::string& description, Operation& operation);

  BackendContext context_;
  std::unique_ptr<Backend> host_backend_;
  DeviceBackendFactory device_factory_;
  std::unique_ptr<Backend> device_backend_;  // made and used on the communication thread
  ProcessGroupOptions options_;
  std::unique_ptr<Queue> queue_;
};

// DistributedEnv and read_distributed_env(): distributed/environment.h.

struct InitOptions {
  std::string backend = "auto";  // "auto", "gloo", "shm", "nccl", "reference" (Note [Choosing a backend])
  std::optional<milliseconds> timeout = std::nullopt;  // default: the environment's, else 300 s
  bool debug = false;  // Note [Collective debug mode]; EMBER_DISTRIBUTED_DEBUG=1 also turns it on
};

// Makes the default (world) group from the environment: connects the store
// (rank 0 serves it in-process unless EMBER_STORE_HOSTED=1) and picks the
// backends. "auto" is EMBER_BACKEND when that is set (a backend named here
// and another one there is an error naming both); else it picks "shm" for
// CPU tensors when every rank is on the same node (same host and node rank),
// "gloo" otherwise, and, in a CUDA build, "nccl" for CUDA tensors; "gloo" and
// "shm" take CPU tensors only, "nccl" CUDA tensors only (Note [Choosing a backend]). Without RANK/WORLD_SIZE in
// the environment it makes a group of one. An error when already initialised.
ProcessGroup& init_process_group(InitOptions options = {});
bool is_initialized();
ProcessGroup& default_group();  // an error if init_process_group was not called
// Every rank of the default group calls it with the same set of ranks (global
// ranks, distinct, in range, in any order: group ranks follow the global ones,
// as in torch.distributed) at the same point;
// members get the new group, others a null pointer. Backend "" keeps the
// default group's. Each group has its own store connection and prefix
// "pg/<id>/", ids counting groups made in this process (across re-inits too).
std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, const std::string& backend = "");
// Finishes queued work, drops the registry's groups and the store connection.
// When rank 0 serves the store itself, it first waits for every rank to get
// here, and keeps serving until the process ends so that a re-init finds it
// (Note [Store lifetime across re-init]). init_process_group may be called
// again afterwards; all ranks must make the same init/new_group/destroy calls.
void destroy_process_group();

}  // namespace ember::distributed
