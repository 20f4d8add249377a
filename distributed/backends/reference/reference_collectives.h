// Collectives from first principles: each algorithm in a short file of its
// own, written only on a Backend's point-to-point send/recv (which must not
// wait for the matching recv, backend.h), with reduce_host_buffers for the
// arithmetic. reference_backend.cpp makes them a backend ("reference") that
// init_process_group / new_group select like gloo or shm, over shm's or
// Gloo's send/recv. Why the ring moves 2(n-1)/n of the buffer: Note [Why the
// ring moves 2(n-1)/n] in distributed/README.md.
// Tests: tests/distributed/test_reference_collectives.cpp (every algorithm
// bit for bit against shm and Gloo, and in its documented order);
// bench/distributed/bench_collectives.cpp measures them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/backend.h"

namespace ember::distributed::reference {

// The tag of every message of a reference collective. Messages are matched
// by (peer, tag) in call order and every rank runs the same collectives in
// the same order, so one tag suffices; user tags stay below it.
inline constexpr uint32_t kCollectiveTag = 0x80000000u;

// The ranks an algorithm runs among and the transport it runs on: only
// transport.send and transport.recv are used. Empty messages are skipped on
// both sides (both sides always know a message's size).
struct Peers {
  Backend& transport;
  int rank = 0;
  int size = 1;
  void send(const void* data, int64_t nbytes, int peer) const;
  void recv(void* data, int64_t nbytes, int peer) const;
};

// Elements [offset, offset + length) of a buffer of `count` cut into
// `parts` blocks: the first count % parts blocks hold one element more, and
// blocks past the end (count < parts) are empty.
struct Block {
  int64_t offset = 0;
  int64_t length = 0;
};
std::vector<Block> even_blocks(int64_t count, int parts);

// All-reduce in place, three ways (each file's header gives the order in
// which it reduces, which fixes the bits of a floating-point sum).
void naive_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op);
void ring_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op);
void halving_doubling_allreduce(const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op);
// The rest of the Backend interface's collectives, same contracts as there.
void tree_broadcast(const Peers& peers, void* data, int64_t nbytes, int root);
void ring_allgather(const Peers& peers, const void* input, void* output, int64_t nbytes);
void ring_reduce_scatter(const Peers& peers, const void* input, void* output, int64_t count, DType dtype, ReduceOp op);

// The two halves of the ring all-reduce, in place on `data` cut into
// `blocks` (blocks[r] is rank r's; elements of `dtype`, or bytes for the
// all-gather): afterwards rank r holds block r reduced over every rank, and
// every rank holds every rank's block r.
void ring_reduce_scatter_blocks(const Peers& peers, std::byte* data, const std::vector<Block>& blocks, DType dtype,
                                ReduceOp op);
void ring_allgather_blocks(const Peers& peers, std::byte* data, const std::vector<Block>& blocks, int64_t element_size);

enum class AllreduceAlgorithm { naive, ring, halving_doubling };
// "naive", "ring" or "halving_doubling"; anything else is an ember::Error
// naming the value and `source` (e.g. "EMBER_REFERENCE_ALLREDUCE").
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name, const std::string& source);
const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm);
void allreduce(AllreduceAlgorithm algorithm, const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op);

// The "reference" backend: these algorithms over the send/recv of the
// backend that `make_transport` makes (from the same context), called once
// EMBER_REFERENCE_ALLREDUCE (naive, ring or halving_doubling; default ring)
// has been read. all_to_all and barrier are the transport's own.
std::unique_ptr<Backend> make_reference_backend(const BackendContext& context,
                                                const std::function<std::unique_ptr<Backend>()>& make_transport);

}  // namespace ember::distributed::reference
