// Recursive halving-doubling all-reduce (Rabenseifner's; Thakur, Rabenseifner
// and Gropp 2005, as in MPICH): a reduce-scatter by recursive halving, then
// an all-gather by recursive doubling, each log2(p) steps instead of the
// ring's n - 1, moving the same 2(p-1)/p of the buffer per rank.
// p is the largest power of two not above n. With n = p + e (e > 0), the
// first 2e ranks fold in pairs first: each even rank r < 2e sends its whole
// buffer to r + 1, which reduces x_r op x_{r+1}; the even ranks then wait for
// the result, which r + 1 sends back at the end. The p remaining ranks take
// virtual ranks 0..p-1 (r / 2 for the odd folded ones, r - e for the rest).
// Halving: with `mask` from p/2 down to 1, virtual ranks v and v ^ mask
// split their current range of blocks (even_blocks of p), each keeping the
// half its bit `mask` selects and reducing the partner's partial of it into
// its own; afterwards v holds block v complete. Doubling retraces the steps
// upward, swapping complete ranges. Element i is reduced as a balanced tree:
// leaves are the virtual ranks' (folded) values, and step `mask` combines
// the partials of v and v ^ mask (op is commutative, so which rank holds a
// partial does not change its bits). Tests: tests/distributed/test_reference_collectives.cpp.
#include <vector>

#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void halving_doubling_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op) {
  const int n = peers.size, rank = peers.rank;
  if (n == 1) return;
  const int64_t element = element_size(dtype);
  auto* base = static_cast<std::byte*>(data);
  std::vector<std::byte> incoming(static_cast<size_t>(count * element));
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;

  // Fold the extra ranks in.
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      peers.send(base, count * element, rank + 1);
      peers.recv(base, count * element, rank + 1);  // the result, at the end
      return;
    }
    peers.recv(incoming.data(), count * element, rank - 1);
    reduce_host_buffers(base, incoming.data(), base, count, dtype, op);  // x_{r-1} op x_r
  }
  const int virtual_rank = rank < 2 * extra ? rank / 2 : rank - extra;
  auto actual = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  const std::vector<Block> blocks = even_blocks(count, p);
  // Blocks [first, last) as one span of elements.
  auto span = [&](int first, int last) {
    const int64_t offset = blocks[size_t(first)].offset;
    return Block{.offset = offset, .length = blocks[size_t(last - 1)].offset + blocks[size_t(last - 1)].length - offset};
  };

  // Reduce-scatter by recursive halving: the range shrinks to block v.
  int first = 0, last = p;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = actual(virtual_rank ^ mask);
    const int middle = (first + last) / 2;
    const bool keep_lower = (virtual_rank & mask) == 0;
    const Block out = keep_lower ? span(middle, last) : span(first, middle);
    if (keep_lower) last = middle;
    else first = middle;
    const Block keep = span(first, last);
    peers.send(base + out.offset * element, out.length * element, partner);
    peers.recv(incoming.data(), keep.length * element, partner);
    std::byte* target = base + keep.offset * element;
    reduce_host_buffers(target, target, incoming.data(), keep.length, dtype, op);
  }

  // All-gather by recursive doubling: swap complete ranges of `mask` blocks.
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner_virtual = virtual_rank ^ mask;
    const int mine = virtual_rank & ~(mask - 1), theirs = partner_virtual & ~(mask - 1);
    const Block out = span(mine, mine + mask), in = span(theirs, theirs + mask);
    peers.send(base + out.offset * element, out.length * element, actual(partner_virtual));
    peers.recv(base + in.offset * element, in.length * element, actual(partner_virtual));
  }

  // Unfold: hand the result to the even rank folded into this one.
  if (rank < 2 * extra) peers.send(base, count * element, rank - 1);
}

}  // namespace ember::distributed::reference
