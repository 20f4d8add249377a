// The shared-memory backend: collectives among the ranks of one host through
// one segment per group, as NCCL does inside a node (Note [Shared-memory
// collectives] in distributed/README.md: layout, algorithm, synchronisation,
// lifecycle). ProcessGroup (process_group.cpp) calls it from its
// communication thread; tests: tests/distributed/test_shm.cpp and the shared
// conformance suite tests/distributed/test_collectives.cpp.
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
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
    case Collective::allreduce:
      if (call.symmetric_id >= 0)
        return fmt::format("allreduce of {} x {} ({}) in symmetric memory (allocation {}, byte {} of its region)",
                           call.size, dtype(), op(), call.symmetric_id, call.symmetric_offset);
      return fmt::format("allreduce of {} x {} ({})", call.size, dtype(), op());
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

// Each chunk of allreduce's `chunk_length` elements is cut into `ranks`
// shares of whole kShareAlignment bytes; rank q owns share q, [begin, begin + length).
struct Share {
  int64_t begin = 0;
  int64_t length = 0;
};
Share share_of(int64_t chunk_length, int q, int ranks, int64_t element) {
  const int64_t per_share = round_up(ceil_div(chunk_length, ranks), int64_t(shm::kShareAlignment) / element);
  const int64_t begin = std::min(chunk_length, q * per_share);
  return {begin, std::min(chunk_length, begin + per_share) - begin};
}

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
  std::shared_ptr<std::byte> allocate_symmetric(int64_t bytes) override;
  bool is_symmetric(const void* data, int64_t bytes) override { return find_symmetric(data, bytes) != nullptr; }
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
  // Note [Shared-memory collectives], lifecycle: rank 0 creates a segment
  // (`create` returns its name) and publishes the name under `key`, the
  // others map it (`open`) and say so, and once all have, rank 0 removes the
  // name (`unlink`) and everyone goes on. A rank that fails says so under the
  // key, so the others fail at once instead of at the timeout. `what` names
  // the segment in the errors. When `create` returns no name, every rank
  // returns false (no room in /dev/shm for a symmetric allocation).
  bool share(const std::string& key, const std::string& what, const std::function<std::string()>& create,
             const std::function<void(const std::string&)>& open, const std::function<void()>& unlink);
  // The symmetric allocation holding `bytes` at `data` in this rank's region (null: none).
  std::shared_ptr<shm::SymmetricMapping> find_symmetric(const void* data, int64_t bytes);
  // allreduce_into an output at byte `offset` of every rank's region of `memory`.
  void allreduce_symmetric(const shm::SymmetricMapping& memory, size_t offset, const Pieces& input, int64_t count,
                           DType dtype, ReduceOp op);
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
  // Note [Symmetric memory]: the allocations made so far, looked up by address
  // on the communication thread and added to on the caller's.
  std::mutex symmetric_mutex_;
  std::vector<std::weak_ptr<shm::SymmetricMapping>> symmetric_;
  uint64_t next_symmetric_id_ = 0;
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
  shm::Layout layout(size_);
  share(
      context_.store_prefix + "shm/segment", "the group's segment",
      [&] {
        segment_.emplace(shm::Segment::create(shm::make_segment_name(context_.store_prefix), layout));
        control(0).pid.store(int32_t(getpid()));
        return segment_->name();
      },
      [&](const std::string& name) {
        segment_.emplace(shm::Segment::open(name, layout));
        control(rank_).pid.store(int32_t(getpid()));
      },
      [&] { segment_->unlink(); });
  sync_.emplace(*segment_, rank_, context_.global_ranks, context_.timeout);
  mailboxes_.emplace(*segment_, rank_, context_.global_ranks, context_.timeout);
}

bool ShmBackend::share(const std::string& key, const std::string& what, const std::function<std::string()>& create,
                       const std::function<void(const std::string&)>& open, const std::function<void()>& unlink) {
  EMBER_CHECK(context_.store != nullptr, "shm backend: rank {} has no store to bootstrap through", rank_);
  TcpStore& store = *context_.store;
  const milliseconds timeout = context_.timeout;
  const auto global = [&](int r) { return context_.global_ranks[size_t(r)]; };
  auto attached_key = [&](int r) { return fmt::format("{}/attached/{}", key, r); };
  // Until `key_of(q)` is set for every q in `ranks`. Once the group's segment
  // exists (a symmetric allocation) through a Sync of its own, which notices
  // a rank that exited within 50 ms as the collectives do; before it (the
  // segment's own bootstrap), through the store's timeout.
  auto wait_for = [&](std::span<const int> ranks, const std::function<std::string(int)>& key_of) {
    if (segment_) {
      shm::Sync sync(*segment_, rank_, context_.global_ranks, timeout);
      sync.begin(what);
      sync.wait_while([&](int q) { return !store.check({key_of(q)}); }, ranks);
      return;
    }
    std::vector<std::string> keys;
    for (int q : ranks) keys.push_back(key_of(q));
    store.wait(keys, timeout);
  };
  auto value_of = [&](const std::string& k) {
    Bytes value = store.get(k, timeout);
    return std::string(value.begin(), value.end());
  };
  constexpr char kFailed = '!';  // a value starting with it is a rank's error
  const int zero = 0;
  if (rank_ == 0) {
    std::string name;
    try {
      name = create();
    } catch (const Error& error) {
      store.set(key + "/name", std::string(1, kFailed) + error.what());
      throw;
    }
    store.set(key + "/name", name);
    if (name.empty()) return false;
    // From here on a failure is also the peers': they wait for "ready".
    try {
      try {
        wait_for(peers_, attached_key);
      } catch (const Error& error) {
        std::string missing;
        for (int r : peers_)
          if (!store.check({attached_key(r)})) missing += fmt::format(" {} (global {})", r, global(r));
        EMBER_CHECK(false, "shm backend: ranks{} did not attach to {} ({}): {}", missing, what, name, error.what());
      }
      unlink();
      for (int r : peers_) {
        const std::string value = value_of(attached_key(r));
        EMBER_CHECK(value.empty() || value[0] != kFailed, "shm backend: rank {} (global {}) could not map {} ({}): {}",
                    r, global(r), what, name, value.substr(1));
      }
    } catch (const Error& error) {
      unlink();
      store.set(key + "/ready", std::string(1, kFailed) + error.what());
      throw;
    }
    store.set(key + "/ready", "1");
    return true;
  }
  std::string name;
  try {
    wait_for(std::span(&zero, 1), [&](int) { return key + "/name"; });
    name = value_of(key + "/name");
  } catch (const Error& error) {
    EMBER_CHECK(false, "shm backend: rank 0 (global {}) did not publish {}: {}", global(0), what, error.what());
  }
  if (name.empty()) return false;
  EMBER_CHECK(name[0] != kFailed, "shm backend: rank 0 (global {}) could not create {}: {}", global(0), what,
              name.substr(1));
  try {
    open(name);
  } catch (const Error& error) {
    store.set(attached_key(rank_), std::string(1, kFailed) + error.what());
    throw;
  }
  store.set(attached_key(rank_), "1");
  std::string ready;
  try {
    wait_for(std::span(&zero, 1), [&](int) { return key + "/ready"; });
    ready = value_of(key + "/ready");
  } catch (const Error& error) {
    EMBER_CHECK(false, "shm backend: rank 0 (global {}) did not see every rank attach to {} ({}): {}", global(0), what,
                name, error.what());
  }
  EMBER_CHECK(ready.empty() || ready[0] != kFailed, "shm backend: rank 0 (global {}) gave up on {} ({}): {}", global(0),
              what, name, ready.substr(1));
  return true;
}

// Note [Symmetric memory]: one segment of size() regions, made and mapped
// like the group's segment, under a key of its own (its id).
std::shared_ptr<std::byte> ShmBackend::allocate_symmetric(int64_t bytes) {
  if (size_ == 1) return nullptr;
  EMBER_CHECK(bytes >= 0, "shm backend: symmetric memory of {} bytes", bytes);
  const uint64_t id = next_symmetric_id_++;
  const size_t region = shm::symmetric_region_bytes(bytes);
  const size_t total = region * size_t(size_);
  const std::string what = fmt::format("symmetric allocation {} ({} bytes per rank)", id, bytes);
  const std::string purpose = fmt::format("{} on {} ranks", what, size_);
  std::unique_ptr<shm::SymmetricMapping> mapping;
  std::string created;  // rank 0: the name, until unlinked
  auto unlink_created = [&] {
    if (!created.empty()) shm_unlink(created.c_str());
    created.clear();
  };
  bool made = false;
  try {
    made = share(
        fmt::format("{}shm/symmetric/{}", context_.store_prefix, id), what,
        [&] {
          if (!shm::dev_shm_has_room(total)) return std::string();  // every rank: ordinary memory
          const std::string name = shm::make_segment_name(context_.store_prefix);
          std::byte* base = shm::create_mapping(name, total, purpose);
          created = name;
          mapping = std::make_unique<shm::SymmetricMapping>(id, base, region, size_);
          return name;
        },
        [&](const std::string& name) {
          mapping = std::make_unique<shm::SymmetricMapping>(id, shm::open_mapping(name, total, purpose), region, size_);
        },
        unlink_created);
  } catch (...) {
    unlink_created();
    throw;
  }
  if (!made) return nullptr;
  std::shared_ptr<shm::SymmetricMapping> shared = std::move(mapping);
  {
    std::lock_guard lock(symmetric_mutex_);
    std::erase_if(symmetric_, [](const std::weak_ptr<shm::SymmetricMapping>& m) { return m.expired(); });
    symmetric_.push_back(shared);
  }
  return std::shared_ptr<std::byte>(shared, shared->region(rank_));
}

std::shared_ptr<shm::SymmetricMapping> ShmBackend::find_symmetric(const void* data, int64_t bytes) {
  std::lock_guard lock(symmetric_mutex_);
  for (const std::weak_ptr<shm::SymmetricMapping>& weak : symmetric_) {
    std::shared_ptr<shm::SymmetricMapping> mapping = weak.lock();
    if (!mapping) continue;
    const std::byte* begin = mapping->region(rank_);
    const std::byte* at = static_cast<const std::byte*>(data);
    if (at >= begin && at + bytes <= begin + mapping->region_bytes()) return mapping;
  }
  return nullptr;
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
// pieces only read, each once (Note [Reducing into a bucket]). An output in
// symmetric memory takes allreduce_symmetric instead.
void ShmBackend::allreduce_into(void* output, std::span<const Piece> pieces, int64_t count, DType dtype, ReduceOp op) {
  const int64_t element = element_size(dtype);
  shm::CallDescriptor call{.size = count, .collective = int32_t(Collective::allreduce), .dtype = int32_t(dtype),
                           .op = int32_t(op)};
  // Note [Same collective on every rank]: whether the output is in symmetric
  // memory, and where, is part of the call.
  std::shared_ptr<shm::SymmetricMapping> symmetric = find_symmetric(output, count * element);
  const int64_t symmetric_offset = symmetric ? bytes(output) - symmetric->region(rank_) : -1;
  if (symmetric) call.symmetric_id = int64_t(symmetric->id()), call.symmetric_offset = symmetric_offset;
  begin_call(call);
  EMBER_CHECK(host_reduction_supported(dtype, op), "shm allreduce: {} is not supported for {}", reduce_op_name(op), dtype);
  if (count == 0) return meet_peers();
  const Pieces input(pieces, element);
  std::byte* out = bytes(output);
  if (size_ == 1) {
    input.for_each_run(0, count, [&](const std::byte* source, int64_t offset, int64_t n) {
      if (source != out + offset * element) copy_bytes(out + offset * element, source, n * element);
    });
    return;
  }
  if (symmetric) return allreduce_symmetric(*symmetric, size_t(symmetric_offset), input, count, dtype, op);
  const int64_t chunk = int64_t(segment_->layout().chunk_bytes) / element;
  auto chunk_length = [&](int64_t j) { return std::min(chunk, count - j * chunk); };
  std::vector<const std::byte*> sources(static_cast<size_t>(size_));
  auto stage = [&](int64_t j, size_t buffer) {
    for (int q : peers_) {
      const Share s = share_of(chunk_length(j), q, size_, element);
      input.for_each_run(j * chunk + s.begin, s.length, [&](const std::byte* source, int64_t offset, int64_t n) {
        copy_bytes(slot(rank_, buffer) + (s.begin + offset) * element, source, n * element);
      });
    }
  };
  auto reduce_share = [&](int64_t j, size_t buffer) {
    const Share s = share_of(chunk_length(j), rank_, size_, element);
    input.for_each_run(j * chunk + s.begin, s.length, [&](const std::byte* own, int64_t offset, int64_t n) {
      const int64_t at = s.begin + offset;
      for (int q = 0; q < size_; ++q) sources[size_t(q)] = q == rank_ ? own : slot(q, buffer) + at * element;
      reduce_many(out + (j * chunk + at) * element, slot(rank_, buffer) + at * element, sources.data(), size_, n,
                  dtype, op);
    });
  };
  auto gather = [&](int64_t j, size_t buffer, int q) {
    const Share s = share_of(chunk_length(j), q, size_, element);
    copy_bytes(out + (j * chunk + s.begin) * element, slot(q, buffer) + s.begin * element, s.length * element);
  };
  guarded([&] { run_pipeline(ceil_div(count, chunk), stage, reduce_share, gather, true); });
}

// Note [Symmetric memory]: every rank's output lies at `offset` of its own
// region, and each rank maps them all. stage: this rank's pieces into its
// own region (nothing when they are already there); reduce: share rank() of
// the chunk over every region, written into every region; gather: nothing to
// copy, only the wait for each peer's share, after which no peer touches this
// rank's region for this call. Per byte of the tensor a rank reads and
// writes once (pieces already in place) instead of twice.
void ShmBackend::allreduce_symmetric(const shm::SymmetricMapping& memory, size_t offset, const Pieces& input,
                                     int64_t count, DType dtype, ReduceOp op) {
  const int64_t element = element_size(dtype);
  auto at = [&](int q, int64_t index) { return memory.region(q) + offset + size_t(index * element); };
  const int64_t chunk = int64_t(segment_->layout().chunk_bytes) / element;
  auto chunk_length = [&](int64_t j) { return std::min(chunk, count - j * chunk); };
  std::vector<const std::byte*> sources(static_cast<size_t>(size_));
  auto stage = [&](int64_t j, size_t) {
    input.for_each_run(j * chunk, chunk_length(j), [&](const std::byte* source, int64_t run, int64_t n) {
      copy_bytes(at(rank_, j * chunk + run), source, n * element);
    });
  };
  auto reduce_share = [&](int64_t j, size_t) {
    const Share s = share_of(chunk_length(j), rank_, size_, element);
    if (s.length == 0) return;
    const int64_t first = j * chunk + s.begin;
    for (int q = 0; q < size_; ++q) sources[size_t(q)] = at(q, first);
    reduce_many(at(rank_, first), at(peers_[0], first), sources.data(), size_, s.length, dtype, op);
    for (size_t p = 1; p < peers_.size(); ++p) copy_bytes(at(peers_[p], first), at(rank_, first), s.length * element);
  };
  guarded([&] { run_pipeline(ceil_div(count, chunk), stage, reduce_share, [](int64_t, size_t, int) {}, true); });
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
