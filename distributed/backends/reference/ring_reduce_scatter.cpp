// Ring reduce-scatter: n - 1 steps around the ring 0 -> 1 -> ... -> n-1 -> 0.
// In step s, rank r sends its partial reduction of block r-s-1 to rank r+1
// and reduces what rank r-1 sent into block r-s-2 (indices mod n). Block b
// starts at rank b+1 and, after n - 1 hops, arrives complete at rank b, so
// its elements are reduced in the order ((x_{b+1} op x_{b+2}) op ...) op x_b.
// Each rank sends (n-1)/n of the buffer (Note [Why the ring moves 2(n-1)/n]
// in distributed/README.md). ring_allreduce.cpp is this followed by
// ring_allgather.cpp. Tests: tests/distributed/test_reference_collectives.cpp.
#include <algorithm>
#include <cstring>
#include <vector>

#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void ring_reduce_scatter_blocks(const Peers& peers, std::byte* data, const std::vector<Block>& blocks, DType dtype,
                                ReduceOp op) {
  const int n = peers.size, rank = peers.rank;
  const int64_t element = element_size(dtype);
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
  int64_t longest = 0;
  for (const Block& block : blocks) longest = std::max(longest, block.length);
  std::vector<std::byte> incoming(static_cast<size_t>(longest * element));
  for (int step = 0; step < n - 1; ++step) {
    const Block& out = blocks[size_t((rank - step - 1 + 2 * n) % n)];
    const Block& in = blocks[size_t((rank - step - 2 + 2 * n) % n)];
    peers.send(data + out.offset * element, out.length * element, next);  // returns before rank r+1 receives
    peers.recv(incoming.data(), in.length * element, previous);
    std::byte* target = data + in.offset * element;
    reduce_host_buffers(target, target, incoming.data(), in.length, dtype, op);  // this rank's x op the partial
  }
}

// `input` holds n blocks of `count`: reduced in place on a copy, then block rank() out.
void ring_reduce_scatter(const Peers& peers, const void* input, void* output, int64_t count, DType dtype, ReduceOp op) {
  const int64_t block_bytes = count * element_size(dtype);
  std::vector<std::byte> partial(static_cast<size_t>(block_bytes * peers.size));
  std::memcpy(partial.data(), input, partial.size());
  std::vector<Block> blocks;
  for (int r = 0; r < peers.size; ++r) blocks.push_back({.offset = r * count, .length = count});
  ring_reduce_scatter_blocks(peers, partial.data(), blocks, dtype, op);
  std::memcpy(output, partial.data() + peers.rank * block_bytes, size_t(block_bytes));
}

}  // namespace ember::distributed::reference
