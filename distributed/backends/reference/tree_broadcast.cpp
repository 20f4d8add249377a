// Binomial-tree broadcast (MPICH's): ranks are numbered relative to the
// root, v = (rank - root) mod n. A rank receives once, from v minus its
// lowest set bit, then sends to v + 2^k for every 2^k below that bit (the
// root: below n). The set of ranks holding the data doubles each round, so
// it takes ceil(log2 n) rounds; each non-root receives the buffer once and
// no rank sends it more than ceil(log2 n) times.
//   n = 8, root 0:  round 1: 0->4;  round 2: 0->2, 4->6;  round 3: 0->1, 2->3, 4->5, 6->7
// Tests: tests/distributed/test_reference_collectives.cpp.
#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void tree_broadcast(const Peers& peers, void* data, int64_t nbytes, int root) {
  const int n = peers.size;
  const int relative = (peers.rank - root + n) % n;
  auto actual = [&](int v) { return (v + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (relative & mask) {
      peers.recv(data, nbytes, actual(relative - mask));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (relative + mask < n) peers.send(data, nbytes, actual(relative + mask));
}

}  // namespace ember::distributed::reference
