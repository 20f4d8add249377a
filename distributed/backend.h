// The narrow interface a collective engine implements: collectives on
// contiguous buffers, one call at a time, in the same order on every rank.
// ProcessGroup (process_group.h) does everything else: validation,
// non-contiguous staging, the async queue, debug checks, AVG, and skipping
// empty buffers (backends never see a count or nbytes of 0).
// Host backends take CPU memory and block until done: backends/gloo_backend.cpp
// (TCP, between hosts) and backends/shm_backend.cpp (shared memory, ranks of
// one host). A device backend, backends/nccl_backend.cpp (CUDA builds), takes
// memory of one GPU and only queues its work on a stream of its own (Note
// [Collectives on a device stream] in distributed/README.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/stream.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed {

enum class ReduceOp { sum, avg, max, min, product };
const char* reduce_op_name(ReduceOp op);

// The operations of the Backend interface, by name: what a backend is asked
// the algorithm of (Backend::algorithm) for the profiler's span.
enum class Collective { allreduce, broadcast, allgather, reduce_scatter, all_to_all, barrier, send, recv };

// What a backend is built from: its place in the group and the store, with the
// group's key prefix, through which its ranks bootstrap.
struct BackendContext {
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;  // global rank of each group rank (for error messages)
  std::shared_ptr<TcpStore> store;
  std::string store_prefix;  // e.g. "pg/0/": every key this group writes starts with it
  milliseconds timeout = kDefaultTimeout;
  // The address this rank advertises to its peers (Gloo): EMBER_GLOO_ADDR when
  // set; empty lets the backend choose (Note [Choosing a backend]).
  std::string advertise_address;
};

// A group of one is valid: every call is then local (a copy, or nothing).
class Backend {
 public:
  virtual ~Backend() = default;  // may wait (up to the timeout) for sends still in flight
  virtual std::string name() const = 0;
  // The algorithm this backend runs for `collective` on a group of two or
  // more ranks and a non-empty buffer, as the profiler's collective spans name
  // it ("ring", "binomial_tree", ...; "nccl" where NCCL picks its own). The
  // truth, not a family name: a span that says "ring" must have run a ring.
  virtual std::string algorithm(Collective collective) const = 0;

  // `count` elements of `dtype`, reduced in place across ranks. ProcessGroup
  // turns AVG into SUM followed by a division, unless supports_avg() says the
  // backend divides in its own last pass.
  // Every call blocks until done on this rank and throws ember::Error on failure
  // (a peer's death, the context's timeout); ProcessGroup adds the op's name.
  virtual void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // One input of allreduce_into: `count` elements at `data`.
  struct Piece {
    const void* data = nullptr;
    int64_t count = 0;
  };
  // allreduce of `pieces` laid end to end (counts summing to `count`), the
  // result written to `output` (Note [Reducing into a bucket] in
  // distributed/README.md). A piece is either the very elements of `output`
  // it stands for or disjoint from `output`. Host backends; this default
  // copies the pieces into `output` and runs allreduce there, and the shm
  // backend reads them where they lie, saving that copy.
  virtual void allreduce_into(void* output, std::span<const Piece> pieces, int64_t count, DType dtype, ReduceOp op);
  virtual void broadcast(void* data, int64_t nbytes, int root) = 0;
  // `output` holds size() blocks of `nbytes`; block r receives rank r's `input`.
  virtual void allgather(const void* input, void* output, int64_t nbytes) = 0;
  // `input` holds size() blocks of `count` elements; this rank's `output` gets
  // the reduction of every rank's block rank().
  virtual void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) = 0;
  // `input` and `output` hold size() blocks of `nbytes` each: block r of
  // `input` goes to rank r, arriving there as block rank() of its `output`.
  virtual void all_to_all(const void* input, void* output, int64_t nbytes) = 0;
  virtual void barrier() = 0;
  // Whether allreduce and reduce_scatter take ReduceOp::avg (floating dtypes)
  // themselves, dividing by the group's size as they write the result: no
  // extra pass over the buffer (the shm backend).
  virtual bool supports_avg() const { return false; }
  // Note [Symmetric memory] (distributed/README.md): `bytes` of CPU memory
  // that every rank of the group maps, for tensors whose collectives then
  // read and write the peers' copies where they lie. Collective: every rank
  // calls it, in the same order, with the same `bytes`. Null, on every rank,
  // where the backend has none (gloo, nccl, a group of one) or /dev/shm has
  // no room for it: the caller uses ordinary memory.
  virtual std::shared_ptr<std::byte> allocate_symmetric(int64_t /*bytes*/) { return nullptr; }
  // Whether `bytes` at `data` lie in one of this group's symmetric allocations.
  virtual bool is_symmetric(const void* /*data*/, int64_t /*bytes*/) { return false; }
  // Point-to-point, matched by (peer, tag) in call order. send must not wait
  // for the matching recv: it returns once `data` may be reused (copied out
  // or fully written), so that a ring of send-then-recv issued from the one
  // communication thread cannot deadlock. recv blocks until the data arrived.
  // Both fail after the context's timeout. Ranks are group ranks, never rank().
  virtual void send(const void* data, int64_t nbytes, int dst, uint32_t tag) = 0;
  virtual void recv(void* data, int64_t nbytes, int src, uint32_t tag) = 0;

  // --- Device backends (Note [Collectives on a device stream]) ---
  // Where the buffers are: the CPU for host backends, one GPU for nccl.
  virtual Device device() const { return kCPU; }
  // The stream a device backend queues its work on. Its calls return once the
  // work is queued (barrier excepted, which waits on the host); errors of the
  // work itself surface later, through watch().
  virtual Stream stream() const { return Stream(); }
  // ProcessGroup, after each operation on a device backend: `done` is recorded
  // on stream() after the operation's work; `keep_alive` holds its tensors,
  // which the backend releases once `done` completes. When an operation has
  // not completed within the context's timeout the backend gives up on its
  // communicator, and its next call (or a barrier waiting) throws, naming
  // `description` (e.g. "allreduce([4], float32, sum)").
  virtual void watch(std::string /*description*/, Event /*done*/, std::shared_ptr<const void> /*keep_alive*/) {}
};

// How a group gets its device backend: `make` is called for `device` on the
// group's communication thread when the group's first operation on a tensor of
// that device runs. An empty `make`: the group takes no device tensors.
struct DeviceBackendFactory {
  std::string name;  // "nccl"
  std::function<std::unique_ptr<Backend>(const BackendContext& context, Device device)> make;
};

// Which dtypes and ops a backend reduces (gloo and shm; nccl reduces the same):
// every numeric dtype with SUM/MAX/MIN/PRODUCT, bool with MAX (any) and MIN (all).
bool host_reduction_supported(DType dtype, ReduceOp op);
// out[i] = a[i] (op) b[i] for `count` elements of `dtype` (out may alias a or b);
// f16 and bf16 are computed in f32 and rounded once.
void reduce_host_buffers(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op);

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context);
std::unique_ptr<Backend> make_shm_backend(const BackendContext& context);

}  // namespace ember::distributed
