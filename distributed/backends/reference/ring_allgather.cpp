// Ring all-gather: n - 1 steps around the ring 0 -> 1 -> ... -> n-1 -> 0.
// In step s, rank r forwards block r-s (its own at first, then the one it
// just received) to rank r+1 and receives block r-s-1 from rank r-1 (indices
// mod n). Each rank sends (n-1)/n of the gathered buffer, whatever n is
// (Note [Why the ring moves 2(n-1)/n] in distributed/README.md).
// Tests: tests/distributed/test_reference_collectives.cpp.
#include <cstring>

#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void ring_allgather_blocks(const Peers& peers, std::byte* data, const std::vector<Block>& blocks, int64_t element_size) {
  const int n = peers.size, rank = peers.rank;
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
  for (int step = 0; step < n - 1; ++step) {
    const Block& out = blocks[size_t((rank - step + n) % n)];
    const Block& in = blocks[size_t((rank - step - 1 + 2 * n) % n)];
    peers.send(data + out.offset * element_size, out.length * element_size, next);
    peers.recv(data + in.offset * element_size, in.length * element_size, previous);
  }
}

// `output` holds n blocks of `nbytes`; this rank's input goes to block rank() first.
void ring_allgather(const Peers& peers, const void* input, void* output, int64_t nbytes) {
  auto* gathered = static_cast<std::byte*>(output);
  std::memcpy(gathered + peers.rank * nbytes, input, size_t(nbytes));
  std::vector<Block> blocks;
  for (int r = 0; r < peers.size; ++r) blocks.push_back({.offset = r * nbytes, .length = nbytes});
  ring_allgather_blocks(peers, gathered, blocks, 1);
}

}  // namespace ember::distributed::reference
