// The shared-memory backend: collectives among the ranks of one host through
// one segment per group, as NCCL does inside a node (Note [Shared-memory
// collectives] in distributed/README.md: layout, algorithm, synchronisation,
// lifecycle). ProcessGroup (process_group.cpp) calls it from its
// communication thread; tests: tests/distributed/test_shm.cpp and the shared
// conformance suite tests/distributed/test_collectives.cpp.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"
#include "distributed/backend.h"
#include "distributed/backends/shm_kernels.h"
#include "distributed/backends/shm_mailbox.h"
#include "distributed/backends/shm_segment.h"
#include "distributed/backends/shm_sync.h"

namespace ember::distributed {
namespace {

using shm::copy_bytes;
using shm::Counter;
using shm::reduce_many;
using shm::RankControl;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

// "allreduce of 4 x float32 (sum)", for the errors and the sync's waits.
std::string describe(const shm::CallDescriptor& call) {
  const auto dtype = [&] { return DType(call.dtype); };
  const auto op = [&] { return reduce_op_name(ReduceOp(call.op)); };
  switch (Collective(call.collective)) {
    case Collective::allreduce: return fmt::format("allreduce of {} x {} ({})", call.size, dtype(), op());
    case Collective::broadcast: return fmt::format("broadcast of {} bytes from rank {}", call.size, call.root);
    case Collective::allgather: return fmt::format("allgather of {} bytes per rank", call.size);
    case Collective::reduce_scatter:
      return fmt::format("reduce_scatter of {} x {} per rank ({})", call.size, dtype(), op());
    case Collective::all_to_all: return fmt::format("all_to_all of {} bytes per block", call.size);
    case Collective::barrier: return "barrier";
    case Collective::send:
    case Collective::recv: break;
  }
  return "?";
}

std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }
const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }

// The inputs of allreduce_into by element index: which piece holds element i.
class Pieces {
 public:
  Pieces(std::span<const Backend::Piece> pieces, int64_t element) : pieces_(pieces), element_(element) {
    starts_.reserve(pieces.size() + 1);
    int64_t start = 0;
    for (const Backend::Piece& piece : pieces) {
      starts_.push_back(start);
      start += piece.count;
    }
    starts_.push_back(start);
  }
  // f(source, offset, n) for each run of elements [begin, begin + length)
  // that lies in one piece: `source` is the run's first element, `offset` its
  // place in the range. One call when the range lies in one piece.
  template <class F>
  void for_each_run(int64_t begin, int64_t length, F&& f) const {
    size_t p = size_t(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
    for (int64_t offset = 0; offset < length; ++p) {
      const int64_t n = std::min(length - offset, starts_[p + 1] - (begin + offset));
      if (n > 0) f(bytes(pieces_[p].data) + (begin + offset - starts_[p]) * element_, offset, n);
      offset += n;
    }
  }

 private:
  std::span<const Backend::Piece> pieces_;
  int64_t element_;
  std::vector<int64_t> starts_;  // each piece's first element, then the total
};

class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(const BackendContext& context);

  std::string name() const override { return "shm"; }
  // "direct": every rank reads its peers' slots in the segment itself, in one
  // hop, no ring or tree (Note [Shared-memory collectives], Algorithm).
  std::string algorithm(Collective collective) const override {
    switch (collective) {
      case Collective::allreduce: return "direct_reduce_scatter_allgather";
      case Collective::broadcast: return "direct_from_root";
      case Collective::allgather: return "direct";
      case Collective::reduce_scatter: return "direct_reduce_scatter";
      case Collective::all_to_all: return "direct";
      case Collective::barrier: return "counters";
      case Collective::send:
      case Collective::recv: return "mailbox";
    }
    return "?";
  }
  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    const Piece whole{data, count};
    allreduce_into(data, std::span(&whole, 1), count, dtype, op);
  }
  void allreduce_into(void* output, std::span<const Piece> pieces, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t nbytes, int root) override;
  void allgather(const void* input, void* output, int64_t nbytes) override;
  void reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) override;
  void all_to_all(const void* input, void* output, int64_t nbytes) override;
  void barrier() override;
  bool supports_avg() const override { return true; }
  void send(const void* data, int64_t nbytes, int dst, uint32_t tag) override;
  void recv(void* data, int64_t nbytes, int src, uint32_t tag) override;

 private:
  // Runs `chunks` chunks of one collective through the pipeline (Note
  // [Shared-memory collectives]): stage(j, buffer) writes this rank's slot,
  // reduce(j, buffer) reads the peers' slots once they staged chunk j, and
  // gather(j, buffer), when the collective has one, reads what the peers
  // reduced. Three consecutive chunks are in the three phases at once.
  template <class Stage, class Reduce, class Gather>
  void run_pipeline(int64_t chunks, Stage&& stage, Reduce&& reduce, Gather&& gather, bool has_gather);
  // Throws if an earlier failure left the segment's counters out of step.
  void begin(std::string description);
  // The same for a collective of the pipeline, which it describes (call_).
  void begin_call(const shm::CallDescriptor& call);
  // Note [Same collective on every rank]: throws when a peer staged chunk
  // `first` of another collective than this rank's.
  void check_peers_call(uint64_t first, size_t buffer) const;
  // An empty chunk through the pipeline: the peers' calls checked, no data.
  void meet_peers();
  template <class F>
  void guarded(F&& body);

  std::byte* slot(int r, size_t buffer) const { return segment_->slot(r, buffer); }
  RankControl& control(int r) const { return segment_->rank(r); }

  BackendContext context_;
  int rank_;
  int size_;
  std::vector<int> peers_;  // every group rank but this one
  std::optional<shm::Segment> segment_;
  std::optional<shm::Sync> sync_;
  std::optional<shm::Mailboxes> mailboxes_;  // send/recv; destroyed before the segment
  uint64_t next_chunk_ = 0;                   // the pipeline's chunk sequence, the same on every rank
  shm::CallDescriptor call_;                  // the collective running
  std::string broken_;  // the error that left this backend unusable
};

ShmBackend::ShmBackend(const BackendContext& context)
    : context_(context), rank_(context.rank), size_(context.size) {
  EMBER_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "shm backend: rank {} of a group of {}", rank_, size_);
  if (context_.global_ranks.empty())
    for (int r = 0; r < size_; ++r) context_.global_ranks.push_back(r);
  EMBER_CHECK(int(context_.global_ranks.size()) == size_, "shm backend: {} global ranks for a group of {}",
              context_.global_ranks.size(), size_);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) peers_.push_back(r);
  if (size_ == 1) return;  // nothing to share
  EMBER_CHECK(context_.store != nullptr, "shm backend: rank {} has no store to bootstrap through", rank_);

  // Note [Shared-memory collectives], lifecycle: rank 0 creates, the others
  // attach and say so, rank 0 unlinks the name, then everyone starts.
  TcpStore& store = *context_.store;
  const std::string& prefix = context_.store_prefix;
  shm::Layout layout(size_);
  auto attached_key = [&](int r) { return fmt::format("{}shm/attached/{}", prefix, r); };
  if (rank_ == 0) {
    segment_.emplace(shm::Segment::create(shm::make_segment_name(prefix), layout));
    control(0).pid.store(int32_t(getpid()));
    store.set(prefix + "shm/segment", segment_->name());
    std::vector<std::string> keys;
    for (int r : peers_) keys.push_back(attached_key(r));
    try {
      store.wait(keys, context_.timeout);
    } catch (const Error& error) {
      std::string missing;
      for (int r : peers_)
        if (!store.check({attached_key(r)})) missing += fmt::format(" {} (global {})", r, context_.global_ranks[size_t(r)]);
      EMBER_CHECK(false, "shm backend: ranks{} did not attach to segment {} within {} ms ({})", missing,
                  segment_->name(), context_.timeout.count(), error.what());
    }
    segment_->unlink();
    store.set(prefix + "shm/ready", "1");
  } else {
    std::string name;
    try {
      Bytes value = store.get(prefix + "shm/segment", context_.timeout);
      name.assign(value.begin(), value.end());
    } catch (const Error& error) {
      EMBER_CHECK(false, "shm backend: rank 0 (global {}) did not publish the group's segment within {} ms ({})",
                  context_.global_ranks[0], context_.timeout.count(), error.what());
    }
    segment_.emplace(shm::Segment::open(name, layout));
    control(rank_).pid.store(int32_t(getpid()));
    store.set(attached_key(rank_), "1");
    try {
      store.wait({prefix + "shm/ready"}, context_.timeout);
    } catch (const Error& error) {
      EMBER_CHECK(false, "shm backend: rank 0 (global {}) did not see every rank attach to segment {} within {} ms ({})",
                  context_.global_ranks[0], name, context_.timeout.count(), error.what());
    }
  }
  sync_.emplace(*segment_, rank_, context_.global_ranks, context_.timeout);
  mailboxes_.emplace(*segment_, rank_, context_.global_ranks, context_.timeout);
}

void ShmBackend::begin(std::string description) {
  EMBER_CHECK(broken_.empty(), "shm backend: cannot run {} after an earlier failure: {}", description, broken_);
  if (mailboxes_) {
    std::string failure = mailboxes_->failure();
    EMBER_CHECK(failure.empty(), "shm backend: cannot run {} after a queued send failed: {}", description, failure);
  }
  if (sync_) sync_->begin(std::move(description));
}

void ShmBackend::begin_call(const shm::CallDescriptor& call) {
  call_ = call;
  begin(describe(call));
}

void ShmBackend::check_peers_call(uint64_t first, size_t buffer) const {
  shm::CallDescriptor mine = call_;
  mine.first_chunk = first;
  for (int q : peers_) {
    const shm::CallDescriptor& theirs = control(q).calls[buffer];
    EMBER_CHECK(theirs == mine,
                "shm backend: rank {} (global {}) runs {} where rank {} (global {}) runs {}: every rank must call the "
                "same collectives, in the same order, with the same sizes, dtypes, ops and roots "
                "(EMBER_DISTRIBUTED_DEBUG=1 names the calls that differ)",
                rank_, context_.global_ranks[size_t(rank_)], describe(mine), q, context_.global_ranks[size_t(q)],
                theirs.first_chunk == first ? describe(theirs) : "a collective that is not at the same point");
  }
}

template <class F>
void ShmBackend::guarded(F&& body) {
  try {
    body();
  } catch (const Error& error) {
    broken_ = error.what();
    throw;
  }
}

template <class Stage, class Reduce, class Gather>
void ShmBackend::run_pipeline(int64_t chunks, Stage&& stage, Reduce&& reduce, Gather&& gather, bool has_gather) {
  const uint64_t first = next_chunk_;
  const uint64_t depth = segment_->layout().depth;
  RankControl& self = control(rank_);
  auto staged = [&](int q) -> Counter& { return control(q).staged; };
  auto reduced = [&](int q) -> Counter& { return control(q).reduced; };
  auto drained = [&](int q) -> Counter& { return control(q).drained; };
  int64_t lag = has_gather ? 2 : 1;
  for (int64_t step = 0; step < chunks + lag; ++step) {
    if (step < chunks) {
      uint64_t s = first + uint64_t(step);
      // The buffer is free once every peer is done with its previous chunk.
      if (s >= depth) sync_->wait(drained, s - depth + 1, peers_);
      stage(step, size_t(s % depth));
      self.calls[s % depth] = call_;
      self.calls[s % depth].first_chunk = first;
      sync_->publish(self.staged, s + 1);
    }
    int64_t j = step - 1;
    if (j >= 0 && j < chunks) {
      uint64_t s = first + uint64_t(j);
      sync_->wait(staged, s + 1, peers_);
      if (j == 0) check_peers_call(first, size_t(s % depth));
      reduce(j, size_t(s % depth));
      sync_->publish(self.reduced, s + 1);
      if (!has_gather) sync_->publish(self.drained, s + 1);
    }
    j = step - 2;
    if (has_gather && j >= 0 && j < chunks) {
      uint64_t s = first + uint64_t(j);
      for (int q : peers_) {  // one peer at a time: copy from whoever is done first
        sync_->wait(reduced, s + 1, std::span<const int>(&q, 1));
        gather(j, size_t(s % depth), q);
      }
      sync_->publish(self.drained, s + 1);
    }
  }
  next_chunk_ += uint64_t(chunks);
}

// Each chunk of E elements is cut into size() shares; rank q owns share q.
// stage: the shares of the others, read from the pieces, into this rank's
// slot (its own share it reduces straight from the pieces); reduce: share
// rank() over every slot, into `output` and this rank's slot; gather: share q
// from rank q's slot into `output`. So `output` is only written, and the
// pieces only read, each once (Note [Reducing into a bucket]).
void ShmBackend::allreduce_into(void* output, std::span<const Piece> pieces, int64_t count, DType dtype, ReduceOp op) {
  begin_call({.size = count, .collective = int32_t(Collective::allreduce), .dtype = int32_t(dtype), .op = int32_t(op)});
  EMBER_CHECK(host_reduction_supported(dtype, op), "shm allreduce: {} is not supported for {}", reduce_op_name(op), dtype);
  if (count == 0) return meet_peers();
  const int64_t element = element_size(dtype);
  const Pieces input(pieces, element);
  std::byte* out = bytes(output);
  if (size_ == 1) {
    input.for_each_run(0, count, [&](const std::byte* source, int64_t offset, int64_t n) {
      if (source != out + offset * element) copy_bytes(out + offset * element, source, n * element);
    });
    return;
  }
  const int64_t chunk = int64_t(segment_->layout().chunk_bytes) / element;
  const int64_t align = int64_t(shm::kShareAlignment) / element;
  auto chunk_length = [&](int64_t j) { return std::min(chunk, count - j * chunk); };
  auto share = [&](int64_t j, int q, int64_t& begin, int64_t& length) {
    int64_t n = chunk_length(j);
    int64_t per_share = round_up(ceil_div(n, size_), align);
    begin = std::min(n, q * per_share);
    length = std::min(n, begin + per_share) - begin;
  };
  std::vector<const std::byte*> sources(static_cast<size_t>(size_));
  auto stage = [&](int64_t j, size_t buffer) {
    for (int q : peers_) {
      int64_t begin = 0, length = 0;
      share(j, q, begin, length);
      input.for_each_run(j * chunk + begin, length, [&](const std::byte* source, int64_t offset, int64_t n) {
        copy_bytes(slot(rank_, buffer) + (begin + offset) * element, source, n * element);
      });
    }
  };
  auto reduce_share = [&](int64_t j, size_t buffer) {
    int64_t begin = 0, length = 0;
    share(j, rank_, begin, length);
    input.for_each_run(j * chunk + begin, length, [&](const std::byte* own, int64_t offset, int64_t n) {
      const int64_t at = begin + offset;
      for (int q = 0; q < size_; ++q) sources[size_t(q)] = q == rank_ ? own : slot(q, buffer) + at * element;
      reduce_many(out + (j * chunk + at) * element, slot(rank_, buffer) + at * element, sources.data(), size_, n,
                  dtype, op);
    });
  };
  auto gather = [&](int64_t j, size_t buffer, int q) {
    int64_t begin = 0, length = 0;
    share(j, q, begin, length);
    copy_bytes(out + (j * chunk + begin) * element, slot(q, buffer) + begin * element, length * element);
  };
  guarded([&] { run_pipeline(ceil_div(count, chunk), stage, reduce_share, gather, true); });
}

void ShmBackend::broadcast(void* data, int64_t nbytes, int root) {
  begin_call({.size = nbytes, .collective = int32_t(Collective::broadcast), .root = root});
  EMBER_CHECK(root >= 0 && root < size_, "shm broadcast: root {} is not a rank of a group of {}", root, size_);
  if (nbytes == 0) return meet_peers();
  if (size_ == 1) return;
  const int64_t chunk = int64_t(segment_->layout().chunk_bytes);
  auto length = [&](int64_t j) { return std::min(chunk, nbytes - j * chunk); };
  auto stage = [&](int64_t j, size_t buffer) {
    if (rank_ == root) copy_bytes(slot(root, buffer), bytes(data) + j * chunk, length(j));
  };
  auto receive = [&](int64_t j, size_t buffer) {
    if (rank_ != root) copy_bytes(bytes(data) + j * chunk, slot(root, buffer), length(j));
  };
  guarded([&] { run_pipeline(ceil_div(nbytes, chunk), stage, receive, [](int64_t, size_t, int) {}, false); });
}

void ShmBackend::allgather(const void* input, void* output, int64_t nbytes) {
  begin_call({.size = nbytes, .collective = int32_t(Collective::allgather)});
  if (nbytes == 0) return meet_peers();
  if (size_ == 1) return copy_bytes(output, input, nbytes);
  const int64_t chunk = int64_t(segment_->layout().chunk_bytes);
  auto length = [&](int64_t j) { return std::min(chunk, nbytes - j * chunk); };
  auto stage = [&](int64_t j, size_t buffer) { copy_bytes(slot(rank_, buffer), bytes(input) + j * chunk, length(j)); };
  auto collect = [&](int64_t j, size_t buffer) {
    for (int q = 0; q < size_; ++q) {
      const std::byte* from = q == rank_ ? bytes(input) + j * chunk : slot(q, buffer);
      copy_bytes(bytes(output) + q * nbytes + j * chunk, from, length(j));
    }
  };
  guarded([&] { run_pipeline(ceil_div(nbytes, chunk), stage, collect, [](int64_t, size_t, int) {}, false); });
}

// A chunk covers the same E elements of every block; block q's part goes to
// section q of the slot, and rank q reduces section q of every slot.
void ShmBackend::reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op) {
  begin_call({.size = count, .collective = int32_t(Collective::reduce_scatter), .dtype = int32_t(dtype), .op = int32_t(op)});
  EMBER_CHECK(host_reduction_supported(dtype, op), "shm reduce_scatter: {} is not supported for {}",
              reduce_op_name(op), dtype);
  if (count == 0) return meet_peers();
  const int64_t element = element_size(dtype);
  if (size_ == 1) return copy_bytes(output, input, count * element);
  const int64_t align = int64_t(shm::kShareAlignment) / element;
  const int64_t section = std::max(align, int64_t(segment_->layout().chunk_bytes) / element / size_ / align * align);
  auto length = [&](int64_t j) { return std::min(section, count - j * section); };
  std::vector<const std::byte*> sources(static_cast<size_t>(size_));
  auto stage = [&](int64_t j, size_t buffer) {
    for (int q : peers_)
      copy_bytes(slot(rank_, buffer) + q * section * element, bytes(input) + (q * count + j * section) * element,
           length(j) * element);
  };
  auto reduce_section = [&](int64_t j, size_t buffer) {
    for (int q = 0; q < size_; ++q)
      sources[size_t(q)] = q == rank_ ? bytes(input) + (rank_ * count + j * section) * element
                                      : slot(q, buffer) + rank_ * section * element;
    reduce_many(bytes(output) + j * section * element, nullptr, sources.data(), size_, length(j), dtype, op);
  };
  guarded([&] { run_pipeline(ceil_div(count, section), stage, reduce_section, [](int64_t, size_t, int) {}, false); });
}

void ShmBackend::all_to_all(const void* input, void* output, int64_t nbytes) {
  begin_call({.size = nbytes, .collective = int32_t(Collective::all_to_all)});
  if (nbytes == 0) return meet_peers();
  if (size_ == 1) return copy_bytes(output, input, nbytes);
  const int64_t section =
      std::max(int64_t(shm::kShareAlignment), int64_t(segment_->layout().chunk_bytes) / size_ /
                                                  int64_t(shm::kShareAlignment) * int64_t(shm::kShareAlignment));
  auto length = [&](int64_t j) { return std::min(section, nbytes - j * section); };
  auto stage = [&](int64_t j, size_t buffer) {
    for (int q : peers_) copy_bytes(slot(rank_, buffer) + q * section, bytes(input) + q * nbytes + j * section, length(j));
  };
  auto exchange = [&](int64_t j, size_t buffer) {
    for (int q = 0; q < size_; ++q) {
      const std::byte* from = q == rank_ ? bytes(input) + rank_ * nbytes + j * section : slot(q, buffer) + rank_ * section;
      copy_bytes(bytes(output) + q * nbytes + j * section, from, length(j));
    }
  };
  guarded([&] { run_pipeline(ceil_div(nbytes, section), stage, exchange, [](int64_t, size_t, int) {}, false); });
}

void ShmBackend::barrier() {
  begin_call({.collective = int32_t(Collective::barrier)});
  meet_peers();
}

// One empty chunk: waiting for every peer to stage it is a barrier, and its
// descriptor is compared as any chunk's. So an empty collective still meets
// the others: against a different call elsewhere it fails at once instead of
// leaving that rank to wait for the timeout.
void ShmBackend::meet_peers() {
  if (size_ == 1) return;
  auto nothing = [](int64_t, size_t) {};
  guarded([&] { run_pipeline(1, nothing, nothing, [](int64_t, size_t, int) {}, false); });
}

void ShmBackend::send(const void* data, int64_t nbytes, int dst, uint32_t tag) {
  begin(fmt::format("send of {} bytes to rank {} (tag {})", nbytes, dst, tag));
  EMBER_CHECK(dst >= 0 && dst < size_ && dst != rank_, "shm send: destination {} is not another rank of a group of {}",
              dst, size_);
  mailboxes_->send(data, nbytes, dst, tag);
}

void ShmBackend::recv(void* data, int64_t nbytes, int src, uint32_t tag) {
  begin(fmt::format("recv of {} bytes from rank {} (tag {})", nbytes, src, tag));
  EMBER_CHECK(src >= 0 && src < size_ && src != rank_, "shm recv: source {} is not another rank of a group of {}", src,
              size_);
  // A size mismatch is the caller's error and leaves the mailbox in step; a
  // dead or silent peer marks the segment failed (Sync::fail), which stops
  // every later wait of the group.
  mailboxes_->recv(data, nbytes, src, tag);
}

}  // namespace

std::unique_ptr<Backend> make_shm_backend(const BackendContext& context) { return std::make_unique<ShmBackend>(context); }

}  // namespace ember::distributed
