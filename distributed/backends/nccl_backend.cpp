// The NCCL backend (nccl_backend.h): one nonblocking NCCL communicator per
// group, its collectives queued on the backend's own stream, and a watchdog
// that aborts the communicator when an operation outlives the group's timeout
// (Notes [Collectives on a device stream] and [NCCL watchdog] in
// distributed/README.md). ProcessGroup calls it from its communication thread
// and orders its stream against the caller's.
// Tests: tests/cuda/test_cuda_nccl.cpp.
#include "distributed/backends/nccl_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>

#include "core/cuda_libraries.h"
#include "core/error.h"
#include "core/tensor.h"
#include "distributed/backends/watchdog.h"
#include "distributed/environment.h"
#include "kernels/cuda/runtime.h"

namespace ember::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// NCCL's text for `result` and its last message: "remote process exited or
// there was a network error (NCCL: <the message>)".
std::string describe(ncclResult_t result, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return fmt::format("{}{}", ncclGetErrorString(result),
                     last != nullptr && *last != '\0' ? fmt::format(" (NCCL: {})", last) : std::string());
}

// For the calls made before a communicator exists.
void check_nccl(ncclResult_t result, const char* what) {
  EMBER_CHECK(result == ncclSuccess, "nccl backend: {} failed: {}", what, describe(result, nullptr));
}
#define EMBER_NCCL_CHECK(call) check_nccl((call), #call)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::boolean: return ncclUint8;  // 0 or 1: max is "any", min is "all"
  }
  EMBER_ASSERT(false, "dtype {}", dtype);
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::product: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: break;
  }
  EMBER_ASSERT(false, "avg reaches backends as sum");
  return ncclSum;
}

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// EMBER_NCCL_STALL_OPERATION (nccl_backend.h): the stalled operation's place
// on the stream is a host function that blocks until release().
class Stall {
 public:
  void release() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
  }
  // Queues the blocking host function on `stream`. It owns a reference, so
  // the Stall outlives the backend if the function has not run yet.
  static void queue(const std::shared_ptr<Stall>& stall, cudaStream_t stream) {
    auto reference = std::make_unique<std::shared_ptr<Stall>>(stall);
    EMBER_CUDA_CHECK(cudaLaunchHostFunc(stream, &block, reference.get()));
    reference.release();  // block() owns it now
  }

 private:
  static void CUDART_CB block(void* user) {
    std::unique_ptr<std::shared_ptr<Stall>> stall(static_cast<std::shared_ptr<Stall>*>(user));
    Stall& self = **stall;
    std::unique_lock lock(self.mutex_);
    self.released_cv_.wait(lock, [&] { return self.released_; });
  }
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
};

int64_t stalled_operation_from_environment() {
  const char* text = std::getenv("EMBER_NCCL_STALL_OPERATION");
  return text == nullptr ? 0 : parse_env_integer("EMBER_NCCL_STALL_OPERATION", text, 1, INT64_MAX);
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const BackendContext& context, Device device)
      : context_(context),
        device_(device),
        where_(fmt::format("nccl backend, rank {} of {} (global rank {}) in group {} on {}", context.rank,
                           context.size, context.global_ranks.at(size_t(context.rank)), context.store_prefix, device)),
        stalled_operation_(stalled_operation_from_environment()) {
    EMBER_CHECK(device_.is_cuda(), "{}: needs a CUDA device", where_);
    cuda::DeviceGuard guard(device_.index);
    stream_ = Stream::create(device_);
    barrier_buffer_ = make_tensor({1}, DType::f32, device_);
    comm_ = create_communicator(exchange_unique_id());
    watchdog_ = std::make_unique<Watchdog>(
        WatchdogOptions{.timeout = context_.timeout, .poll_interval = milliseconds(10), .where = where_},
        [this] { return async_error(); }, [this] { abort(); });
  }

  // Lets queued work finish (the watchdog ends what outlives the timeout),
  // then frees the communicator: finalized and destroyed after a clean run,
  // aborted after a failure (ncclCommDestroy could wait for peers for ever).
  ~NcclBackend() override {
    try {
      watchdog_->wait_idle();
    } catch (const Error&) {
      // The watchdog gave up and aborted the communicator; nothing is left to finish.
    }
    watchdog_.reset();
    std::lock_guard lock(comm_mutex_);
    if (stall_) stall_->release();
    if (comm_ == nullptr) return;
    try {
      cuda::DeviceGuard guard(device_.index);
      if (settle(ncclCommFinalize(comm_), "ncclCommFinalize").empty()) {
        ncclCommDestroy(comm_);
        return;
      }
    } catch (const Error&) {
      // A CUDA error on the way out: abort below.
    }
    ncclCommAbort(comm_);
  }

  std::string name() const override { return "nccl"; }
  // NCCL picks ring, tree or others per call itself (NCCL_ALGO); ember cannot see which.
  std::string algorithm(Collective) const override { return "nccl"; }
  Device device() const override { return device_; }
  Stream stream() const override { return stream_; }

  void watch(std::string description, Event done, std::shared_ptr<const void> keep_alive) override {
    watchdog_->watch({.description = std::move(description),
                      .done = [done = std::move(done)] { return done.query(); },
                      .keep_alive = std::move(keep_alive)});
  }

  // Empty buffers are not handed to NCCL: nothing would move, and NCCL cannot
  // tell that the peers called the same (Note [Same collective on every rank]).
  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return;
    enqueue("ncclAllReduce", [&](cudaStream_t stream) {
      return ncclAllReduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream);
    });
  }

  void broadcast(void* data, int64_t nbytes, int root) override {
    if (nbytes == 0) return;
    enqueue("ncclBroadcast", [&](cudaStream_t stream) {
      return ncclBroadcast(data, data, size_t(nbytes), ncclUint8, root, comm_, stream);
    });
  }

  void allgather(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    enqueue("ncclAllGather", [&](cudaStream_t stream) {
      return ncclAllGather(input, output, size_t(nbytes), ncclUint8, comm_, stream);
    });
  }

  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return;
    enqueue("ncclReduceScatter", [&](cudaStream_t stream) {
      return ncclReduceScatter(input, output, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream);
    });
  }

  // NCCL has no all-to-all: one group of a send and a recv per peer, so every
  // pair progresses together; this rank's own block is a device copy.
  void all_to_all(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    enqueue("all_to_all (ncclSend/ncclRecv)", [&](cudaStream_t stream) {
      const size_t block = size_t(nbytes);
      const size_t mine = size_t(context_.rank) * block;
      EMBER_CUDA_CHECK(
          cudaMemcpyAsync(bytes(output) + mine, bytes(input) + mine, block, cudaMemcpyDeviceToDevice, stream));
      if (context_.size == 1) return ncclSuccess;
      ncclResult_t result = ncclGroupStart();
      if (result != ncclSuccess) return result;
      for (int peer = 0; peer < context_.size; ++peer) {
        if (peer == context_.rank) continue;
        const size_t at = size_t(peer) * block;
        if (result == ncclSuccess) result = ncclSend(bytes(input) + at, block, ncclUint8, peer, comm_, stream);
        if (result == ncclSuccess) result = ncclRecv(bytes(output) + at, block, ncclUint8, peer, comm_, stream);
      }
      const ncclResult_t ended = ncclGroupEnd();  // a group once started is always ended
      return result != ncclSuccess ? result : ended;
    });
  }

  // A one-element all-reduce that every rank must join, then the host waits
  // for it, and for everything queued before it, bounded by the watchdog.
  void barrier() override {
    enqueue("barrier (ncclAllReduce)", [&](cudaStream_t stream) {
      void* data = barrier_buffer_.data_ptr();
      return ncclAllReduce(data, data, 1, ncclFloat32, ncclSum, comm_, stream);
    });
    Event arrived(device_);
    arrived.record(stream_);
    watch("barrier()", arrived, nullptr);
    watchdog_->wait_idle();
  }

  // ProcessGroup allows only tag 0 on CUDA tensors: NCCL matches the messages
  // between two ranks in call order.
  void send(const void* data, int64_t nbytes, int dst, uint32_t) override {
    if (nbytes == 0) return;
    enqueue("ncclSend", [&](cudaStream_t stream) {
      return ncclSend(data, size_t(nbytes), ncclUint8, dst, comm_, stream);
    });
  }

  void recv(void* data, int64_t nbytes, int src, uint32_t) override {
    if (nbytes == 0) return;
    enqueue("ncclRecv", [&](cudaStream_t stream) {
      return ncclRecv(data, size_t(nbytes), ncclUint8, src, comm_, stream);
    });
  }

 private:
  ncclUniqueId exchange_unique_id() {
    const std::string key = context_.store_prefix + "nccl/unique_id";
    ncclUniqueId id;
    if (context_.rank == 0) {
      EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
      context_.store->set(key, std::span(reinterpret_cast<const uint8_t*>(id.internal), sizeof(id.internal)));
      return id;
    }
    const Bytes value = context_.store->get(key, context_.timeout);
    EMBER_CHECK(value.size() == sizeof(id.internal), "{}: the store's {} holds {} bytes, not an ncclUniqueId's {}",
                where_, key, value.size(), sizeof(id.internal));
    std::memcpy(id.internal, value.data(), sizeof(id.internal));
    return id;
  }

  // Nonblocking, so that a rank that never arrives makes this fail after the
  // timeout (ncclCommAbort ends the waiting init) instead of hanging in it.
  ncclComm_t create_communicator(const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, context_.size, id, context_.rank, &config);
    if (comm == nullptr) check_nccl(started == ncclSuccess ? ncclInternalError : started, "ncclCommInitRankConfig");
    comm_ = comm;
    const std::string failure = settle(started, "ncclCommInitRankConfig");
    if (failure.empty()) return comm;
    ncclCommAbort(comm);
    comm_ = nullptr;
    detail::throw_error(fmt::format("{}; every rank of the group must reach its first operation on CUDA tensors, each "
                                    "process on its own GPU (NCCL refuses two ranks on one device)",
                                    failure));
  }

  // A nonblocking communicator may answer ncclInProgress while NCCL is still
  // at work in the background; the next call may only come once its state
  // left that. Returns "" on success, else why it failed, after the timeout
  // at the latest.
  std::string settle(ncclResult_t result, const char* what) {
    const auto deadline = Clock::now() + context_.timeout;
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline)
        return fmt::format("{}: {} was still in progress after the timeout of {} ms", where_, what,
                           context_.timeout.count());
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclResult_t state = ncclSuccess;
      const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
      result = asked != ncclSuccess ? asked : state;
    }
    return result == ncclSuccess ? std::string() : fmt::format("{}: {} failed: {}", where_, what, describe(result, comm_));
  }

  // Queues one call (or group of calls) on the stream, under the
  // communicator's lock, which the watchdog's abort takes too; refused once
  // the watchdog gave up. A failure aborts the communicator: the first one
  // breaks the group anyway (Note [One communication thread per group]).
  template <class Calls>
  void enqueue(const char* what, Calls&& calls) {
    std::string failure;
    {
      std::lock_guard lock(comm_mutex_);
      watchdog_->check();
      cuda::DeviceGuard guard(device_.index);
      const auto stream = static_cast<cudaStream_t>(stream_.handle());
      if (stall_ != nullptr || ++queued_ == stalled_operation_) {
        // EMBER_NCCL_STALL_OPERATION: this operation, and every later one,
        // waits behind a stall that only the abort releases; no NCCL kernel
        // is queued behind it, so none runs on the aborted communicator.
        if (stall_ == nullptr) {
          stall_ = std::make_shared<Stall>();
          Stall::queue(stall_, stream);
        }
        return;
      }
      failure = settle(calls(stream), what);
    }
    if (failure.empty()) return;
    watchdog_->fail(failure);
    watchdog_->check();
  }

  // The watchdog's probe, between its polls. It never waits for the lock:
  // the communication thread may hold it while NCCL finishes queueing.
  std::string async_error() {
    std::unique_lock lock(comm_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || comm_ == nullptr) return "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
    const ncclResult_t result = asked != ncclSuccess ? asked : state;
    return result == ncclSuccess || result == ncclInProgress ? std::string() : describe(result, comm_);
  }

  // The watchdog's decision, carried out once: kernels still waiting for
  // peers end, and every later call is refused (watchdog_->check()). NCCL
  // makes the communicator's GPU current itself.
  void abort() {
    std::lock_guard lock(comm_mutex_);
    if (stall_) stall_->release();
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  const BackendContext context_;
  const Device device_;
  const std::string where_;
  const int64_t stalled_operation_;  // 0: none
  Stream stream_;
  Tensor barrier_buffer_;
  std::mutex comm_mutex_;      // every NCCL call on comm_, and its abort
  ncclComm_t comm_ = nullptr;  // null once aborted
  int64_t queued_ = 0;         // operations queued so far (for EMBER_NCCL_STALL_OPERATION)
  std::shared_ptr<Stall> stall_;  // once the stalled operation is queued
  std::unique_ptr<Watchdog> watchdog_;  // made last: its thread calls async_error and abort
};

std::unique_ptr<Backend> make_backend(const BackendContext& context, Device device) {
  return std::make_unique<NcclBackend>(context, device);
}

// NCCL counts major * 10000 + minor * 100 + patch (since 2.9).
std::string library_description() {
  const std::string file = library_file_of(reinterpret_cast<const void*>(&ncclGetVersion));
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return fmt::format("NCCL: version unknown ({})", file);
  return fmt::format("NCCL {}.{}.{} ({})", version / 10000, version % 10000 / 100, version % 100, file);
}

}  // namespace
}  // namespace ember::distributed

// A C symbol, for dlsym (core/cuda_backend.h's backend_symbol).
extern "C" const ember::distributed::NcclEntryPoints* ember_nccl_entry_points() {
  static const ember::distributed::NcclEntryPoints entry_points{
      .make_backend = &ember::distributed::make_backend,
      .library_description = &ember::distributed::library_description,
  };
  return &entry_points;
}
