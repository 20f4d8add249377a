// Ring all-reduce = ring reduce-scatter + ring all-gather (Patarasuk and
// Yuan 2009; Baidu's and Horovod's ring): the buffer is cut into n blocks
// (even_blocks: sizes differ by at most one element, and some are empty when
// the buffer has fewer than n elements); after the reduce-scatter rank r
// holds block r complete, and the all-gather hands every block to every
// rank. Each rank sends 2(n-1)/n of the buffer, independent of n for large n
// (Note [Why the ring moves 2(n-1)/n] in distributed/README.md). Element i
// of block b is reduced in the order ((x_{b+1} op x_{b+2}) op ...) op x_b
// (ring_reduce_scatter.cpp), the same bits on every rank since every rank
// copies block b from rank b. Tests: tests/distributed/test_reference_collectives.cpp.
#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void ring_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op) {
  if (peers.size == 1) return;
  const std::vector<Block> blocks = even_blocks(count, peers.size);
  auto* bytes = static_cast<std::byte*>(data);
  ring_reduce_scatter_blocks(peers, bytes, blocks, dtype, op);
  ring_allgather_blocks(peers, bytes, blocks, element_size(dtype));
}

}  // namespace ember::distributed::reference
