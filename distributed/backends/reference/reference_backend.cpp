// The "reference" backend: the collectives of this folder over another
// backend's send/recv (shm between the ranks of one host, Gloo otherwise:
// init.cpp picks it as for "auto"), so that a learner can train with
// collectives they can read in one sitting, or with their own. The
// all-reduce is EMBER_REFERENCE_ALLREDUCE (naive, ring or halving_doubling;
// default ring), read here because only this backend has the choice (as
// NCCL reads NCCL_ALGO itself). all_to_all and barrier are the transport's.
// Also the algorithms' shared pieces: Peers, even_blocks, the algorithm names.
// Tests: tests/distributed/test_reference_collectives.cpp.
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "distributed/backends/reference/reference_collectives.h"

namespace ember::distributed::reference {

void Peers::send(const void* data, int64_t nbytes, int peer) const {
  if (nbytes > 0) transport.send(data, nbytes, peer, kCollectiveTag);
}

void Peers::recv(void* data, int64_t nbytes, int peer) const {
  if (nbytes > 0) transport.recv(data, nbytes, peer, kCollectiveTag);
}

std::vector<Block> even_blocks(int64_t count, int parts) {
  std::vector<Block> blocks;
  int64_t offset = 0;
  for (int b = 0; b < parts; ++b) {
    const int64_t length = count / parts + (b < count % parts ? 1 : 0);
    blocks.push_back({.offset = offset, .length = length});
    offset += length;
  }
  return blocks;
}

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name, const std::string& source) {
  if (name == "naive") return AllreduceAlgorithm::naive;
  if (name == "ring") return AllreduceAlgorithm::ring;
  if (name == "halving_doubling") return AllreduceAlgorithm::halving_doubling;
  EMBER_CHECK(false, "reference backend: {} is '{}'; use naive, ring or halving_doubling", source, name);
  return AllreduceAlgorithm::ring;
}

const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::naive: return "naive";
    case AllreduceAlgorithm::ring: return "ring";
    case AllreduceAlgorithm::halving_doubling: return "halving_doubling";
  }
  return "?";
}

void allreduce(AllreduceAlgorithm algorithm, const Peers& peers, void* data, int64_t count, DType dtype, ReduceOp op) {
  switch (algorithm) {
    case AllreduceAlgorithm::naive: return naive_allreduce(peers, data, count, dtype, op);
    case AllreduceAlgorithm::ring: return ring_allreduce(peers, data, count, dtype, op);
    case AllreduceAlgorithm::halving_doubling: return halving_doubling_allreduce(peers, data, count, dtype, op);
  }
}

namespace {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(const BackendContext& context, std::unique_ptr<Backend> transport, AllreduceAlgorithm algorithm)
      : transport_(std::move(transport)),
        peers_{.transport = *transport_, .rank = context.rank, .size = context.size},
        algorithm_(algorithm) {}

  std::string name() const override { return "reference"; }
  // What this folder's files run; the rest is the transport's, named with it.
  std::string algorithm(Collective collective) const override {
    switch (collective) {
      case Collective::allreduce: return allreduce_algorithm_name(algorithm_);
      case Collective::broadcast: return "binomial_tree";
      case Collective::allgather: return "ring";
      case Collective::reduce_scatter: return "ring";
      case Collective::all_to_all:
      case Collective::barrier:
      case Collective::send:
      case Collective::recv: return transport_->name() + " " + transport_->algorithm(collective);
    }
    return "?";
  }

  // Empty buffers return at once, after the argument checks: nothing would
  // move, and these algorithms compare no calls (Note [Same collective on every rank]).
  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    check_reduction("allreduce", dtype, op);
    if (count == 0) return;
    reference::allreduce(algorithm_, peers_, data, count, dtype, op);
  }
  void broadcast(void* data, int64_t nbytes, int root) override {
    EMBER_CHECK(root >= 0 && root < peers_.size, "reference broadcast: root {} is not a rank of a group of {}", root,
                peers_.size);
    if (nbytes == 0) return;
    tree_broadcast(peers_, data, nbytes, root);
  }
  void allgather(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    ring_allgather(peers_, input, output, nbytes);
  }
  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override {
    check_reduction("reduce_scatter", dtype, op);
    if (count == 0) return;
    ring_reduce_scatter(peers_, input, output, count, dtype, op);
  }
  void all_to_all(const void* input, void* output, int64_t nbytes) override {
    if (nbytes == 0) return;
    transport_->all_to_all(input, output, nbytes);
  }
  void barrier() override { transport_->barrier(); }
  void send(const void* data, int64_t nbytes, int dst, uint32_t tag) override {
    check_tag("send", tag);
    transport_->send(data, nbytes, dst, tag);
  }
  void recv(void* data, int64_t nbytes, int src, uint32_t tag) override {
    check_tag("recv", tag);
    transport_->recv(data, nbytes, src, tag);
  }

 private:
  static void check_reduction(const char* op, DType dtype, ReduceOp reduce) {
    EMBER_CHECK(host_reduction_supported(dtype, reduce), "reference {}: {} is not supported for {}", op,
                reduce_op_name(reduce), dtype);
  }
  // A user message with the collectives' tag could be taken for one of theirs.
  static void check_tag(const char* op, uint32_t tag) {
    EMBER_CHECK(tag < kCollectiveTag, "reference {}: tag {} is reserved; the reference backend takes tags below {}", op,
                tag, kCollectiveTag);
  }

  std::unique_ptr<Backend> transport_;
  Peers peers_;
  AllreduceAlgorithm algorithm_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const BackendContext& context,
                                                const std::function<std::unique_ptr<Backend>()>& make_transport) {
  const char* variable = std::getenv("EMBER_REFERENCE_ALLREDUCE");
  const AllreduceAlgorithm algorithm =
      parse_allreduce_algorithm(variable && *variable ? variable : "ring", "EMBER_REFERENCE_ALLREDUCE");
  return std::make_unique<ReferenceBackend>(context, make_transport(), algorithm);
}

}  // namespace ember::distributed::reference
