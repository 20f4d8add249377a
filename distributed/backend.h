// The narrow interface a collective engine implements: synchronous
// collectives on contiguous host buffers, one call at a time, in the same
// order on every rank. ProcessGroup (process_group.h) does everything else:
// validation, non-contiguous staging, the async queue, debug checks, AVG, and
// skipping empty buffers (backends never see a count or nbytes of 0).
// Implementations: backends/gloo_backend.cpp (TCP, between hosts) and
// backends/shm_backend.cpp (shared memory, ranks of one host); CUDA's NCCL
// backend will implement the same calls on device buffers and streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed {

enum class ReduceOp { sum, avg, max, min, product };
const char* reduce_op_name(ReduceOp op);

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

  // `count` elements of `dtype`, reduced in place across ranks. ProcessGroup
  // turns AVG into SUM followed by a division, so backends never see it.
  // Every call blocks until done on this rank and throws ember::Error on failure
  // (a peer's death, the context's timeout); ProcessGroup adds the op's name.
  virtual void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
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
  // Point-to-point, matched by (peer, tag) in call order. send must not wait
  // for the matching recv: it returns once `data` may be reused (copied out
  // or fully written), so that a ring of send-then-recv issued from the one
  // communication thread cannot deadlock. recv blocks until the data arrived.
  // Both fail after the context's timeout. Ranks are group ranks, never rank().
  virtual void send(const void* data, int64_t nbytes, int dst, uint32_t tag) = 0;
  virtual void recv(void* data, int64_t nbytes, int src, uint32_t tag) = 0;
};

// Which dtypes and ops a host backend reduces (shared by gloo and shm): every
// numeric dtype with SUM/MAX/MIN/PRODUCT, bool with MAX (any) and MIN (all).
bool host_reduction_supported(DType dtype, ReduceOp op);
// out[i] = a[i] (op) b[i] for `count` elements of `dtype` (out may alias a or b);
// f16 and bf16 are computed in f32 and rounded once.
void reduce_host_buffers(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op);

std::unique_ptr<Backend> make_gloo_backend(const BackendContext& context);
std::unique_ptr<Backend> make_shm_backend(const BackendContext& context);

}  // namespace ember::distributed
