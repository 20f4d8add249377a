// Naive all-reduce: every rank sends its whole buffer to rank 0, which
// reduces them in rank order, ((x0 op x1) op x2) op ..., and sends the result
// back to every rank. Rank 0 receives and sends (n-1) N bytes for a buffer of
// N bytes, so its link is the bottleneck: the baseline the ring improves on
// (Note [Why the ring moves 2(n-1)/n] in distributed/README.md). Rank order is
// the order shm reduces f32 and f64 in, so the two agree bit for bit.
// Tests: tests/distributed/test_reference_collectives.cpp.
#include <vector>

#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void naive_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op) {
  const int64_t nbytes = count * element_size(dtype);
  if (peers.rank != 0) {
    peers.send(data, nbytes, 0);
    peers.recv(data, nbytes, 0);
    return;
  }
  std::vector<std::byte> incoming(static_cast<size_t>(nbytes));
  for (int q = 1; q < peers.size; ++q) {
    peers.recv(incoming.data(), nbytes, q);
    reduce_host_buffers(data, data, incoming.data(), count, dtype, op);  // accumulator op x_q
  }
  for (int q = 1; q < peers.size; ++q) peers.send(data, nbytes, q);
}

}  // namespace ember::distributed::reference
