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
// init.cpp keeps the registry of groups (init_process_group, new_group,
// default_group, destroy_process_group) that DDP and the Accelerator use.
// Tests: tests/distributed/test_collectives.cpp (real processes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/backend.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed {

inline constexpr milliseconds kWorkWaitGrace{2'000};

class Work {
 public:
  // Blocks until the operation ran; rethrows its error. A timeout error names
  // the collective and this rank. The default is the group's timeout plus
  // kWorkWaitGrace, so that the operation's own timeout error (which says
  // what it waited for) normally arrives first.
  void wait();
  void wait(milliseconds timeout);
  bool is_completed() const;
  const std::string& description() const { return description_; }

  // Made by ProcessGroup; finish() is called by its communication thread.
  Work(std::string description, int rank, milliseconds default_timeout)
      : description_(std::move(description)), rank_(rank), default_timeout_(default_timeout) {}
  void finish(std::exception_ptr error = nullptr);

 private:
  std::string description_;
  int rank_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
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
  // `context.store` and `context.store_prefix` are the group's; `backend` is
  // made from the same context.
  ProcessGroup(BackendContext context, std::unique_ptr<Backend> backend, ProcessGroupOptions options = {});
  ~ProcessGroup();  // finishes the queued operations first
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return context_.rank; }
  int size() const { return context_.size; }
  // The global rank of group rank `group_rank`.
  int global_rank(int group_rank) const { return context_.global_ranks.at(size_t(group_rank)); }
  std::string backend_name() const { return backend_->name(); }
  milliseconds timeout() const { return options_.timeout; }
  const std::shared_ptr<TcpStore>& store() const { return context_.store; }
  const std::string& store_prefix() const { return context_.store_prefix; }

  // In place on `tensor`, on every rank.
  std::shared_ptr<Work> allreduce(Tensor tensor, ReduceOp op = ReduceOp::sum);
  std::shared_ptr<Work> broadcast(Tensor tensor, int root);
  // Tensors are CPU tensors of any shape; outputs and inputs of one call share a dtype.
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
  // Whether an operation of this group failed (every later one then fails too).
  bool failed() const;

 private:
  struct Queue;
  // Queues `operation`; `collective` ones take part in debug mode's checks.
  std::shared_ptr<Work> enqueue(std::string description, bool collective, std::function<void()> operation);
  void run_queue();  // the communication thread's loop

  BackendContext context_;
  std::unique_ptr<Backend> backend_;
  ProcessGroupOptions options_;
  std::unique_ptr<Queue> queue_;
};

// What the launcher (or the user) put in the environment.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;         // GROUP_RANK
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string token;          // EMBER_STORE_TOKEN
  bool store_hosted = false;  // EMBER_STORE_HOSTED=1: the launcher serves the store; else rank 0 does
  milliseconds timeout = kDefaultTimeout;  // EMBER_TIMEOUT (seconds)
  bool debug = false;         // EMBER_DISTRIBUTED_DEBUG
  std::string gloo_address;   // EMBER_GLOO_ADDR: the address this rank advertises to Gloo peers
  // Whether RANK and WORLD_SIZE were set at all (false: a plain single process).
  bool launched = false;
};
// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT and ember's EMBER_* variables; an error names a malformed one.
DistributedEnv read_distributed_env();

struct InitOptions {
  std::string backend = "auto";  // "auto", "gloo", "shm"
  std::optional<milliseconds> timeout = std::nullopt;  // default: the environment's, else 300 s
  bool debug = false;  // Note [Collective debug mode]; EMBER_DISTRIBUTED_DEBUG=1 also turns it on
};

// Makes the default (world) group from the environment: connects the store
// (rank 0 serves it in-process unless EMBER_STORE_HOSTED=1) and picks the
// backend. "auto" picks "shm" when every rank is on the same node (same host
// and node rank), "gloo" otherwise (Note [Choosing a backend]). Without
// RANK/WORLD_SIZE in the environment it makes a group of one. An error when
// already initialised.
ProcessGroup& init_process_group(InitOptions options = {});
bool is_initialized();
ProcessGroup& default_group();  // an error if init_process_group was not called
// Every rank of the default group calls it with the same list (global ranks,
// distinct, in range; their order gives the group ranks) at the same point;
// members get the new group, others a null pointer. Backend "" keeps the
// default group's. Each group has its own store connection and prefix
// "pg/<id>/", ids counting groups made in this process (across re-inits too).
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& backend = "");
// Finishes queued work, drops the registry's groups and the store connection.
// When rank 0 serves the store itself, it first waits for every rank to get
// here, and keeps serving until the process ends so that a re-init finds it
// (Note [Store lifetime across re-init]). init_process_group may be called
// again afterwards; all ranks must make the same init/new_group/destroy calls.
void destroy_process_group();

}  // namespace ember::distributed
