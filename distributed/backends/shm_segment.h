// The shared-memory segment of one shm process group: its layout and its
// lifecycle (create, open, unlink, unmap); and the symmetric allocations. The layout is described in Note
// [Shared-memory collectives] (distributed/README.md). Used by
// shm_backend.cpp and shm_sync.cpp; tests: tests/distributed/test_shm.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::distributed::shm {

// Counters written by one process and polled by others each get two 64-byte
// lines of their own, so a write invalidates nothing else (the adjacent-line
// prefetcher pulls lines in pairs).
inline constexpr size_t kLineBytes = 128;
// Shares of a chunk start at this alignment, so two ranks never write one line.
inline constexpr size_t kShareAlignment = 64;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free to work across processes");

struct alignas(kLineBytes) Counter {
  std::atomic<uint64_t> value{0};
};

// Pipeline buffers per rank: three chunks in flight, and one more to start the next.
inline constexpr size_t kPipelineDepth = 4;

// Which collective a rank runs, written with each chunk it stages into a
// pipeline buffer and read by its peers before they use that chunk (Note
// [Same collective on every rank]): the counters publish it with the data.
struct CallDescriptor {
  uint64_t first_chunk = 0;  // of the collective in the group's chunk sequence
  int64_t size = 0;          // elements (reductions) or bytes (the others)
  int32_t collective = 0;    // Collective
  int32_t dtype = -1;        // DType, -1 for byte collectives
  int32_t op = -1;           // ReduceOp, -1 when there is none
  int32_t root = -1;         // broadcast's, -1 otherwise
  // An allreduce into symmetric memory: the allocation's id and the output's
  // element offset in its region; -1 otherwise (Note [Symmetric memory]).
  int64_t symmetric_id = -1;
  int64_t symmetric_offset = -1;
  bool operator==(const CallDescriptor&) const = default;
};

// Written only by its rank. Every counter counts chunks of the group's one
// pipeline (a chunk sequence shared by all collectives, Note [Shared-memory
// collectives]): "value v" means chunks 0 .. v-1 are through that phase.
struct RankControl {
  Counter staged;   // this rank's input is in its slot
  Counter reduced;  // this rank's share is reduced into its slot
  Counter drained;  // this rank has finished reading its peers' slots
  // Futex word of those waiting for this rank: bumped (and woken) by this
  // rank after it publishes, when `sleepers` says someone sleeps (shm_sync.cpp).
  alignas(kLineBytes) std::atomic<uint32_t> wake_sequence{0};
  std::atomic<uint32_t> sleepers{0};
  std::atomic<int32_t> pid{0};  // for liveness checks
  CallDescriptor calls[kPipelineDepth];  // by pipeline buffer
};

// The mailbox of one ordered pair (src, dst): src writes, dst reads.
struct MailboxControl {
  Counter produced;  // written by src: mailbox chunks sent so far
  Counter consumed;  // written by dst: mailbox chunks read so far
};

// At the start of each mailbox buffer: which message the chunk belongs to.
struct alignas(kShareAlignment) MailboxChunkHeader {
  uint64_t tag = 0;
  uint64_t message_bytes = 0;
  uint64_t offset = 0;  // of this chunk in the message
  uint64_t bytes = 0;   // in this chunk
};

struct SegmentHeader {
  uint64_t magic = 0;
  uint64_t total_bytes = 0;
  int32_t ranks = 0;
  // The first rank whose wait failed claims these and says why, so its peers
  // stop waiting on it at once instead of at their own deadlines.
  alignas(kLineBytes) std::atomic<int32_t> failure_claimed{0};
  std::atomic<int32_t> failed_rank_plus_one{0};  // set after `failure` is written
  char failure[1024] = {};
};

inline constexpr uint64_t kSegmentMagic = 0x656d6265722d7368;  // "ember-sh"

// Byte offsets of every part of a segment for `ranks` ranks.
struct Layout {
  explicit Layout(int ranks);

  int ranks = 0;
  size_t chunk_bytes = 0;          // one pipeline buffer of one rank
  size_t depth = 0;                // pipeline buffers per rank
  size_t mailbox_chunk_bytes = 0;  // one mailbox buffer, header included
  size_t mailbox_depth = 0;        // buffers per mailbox
  size_t rank_controls_offset = 0;
  size_t mailbox_controls_offset = 0;
  size_t slots_offset = 0;
  size_t mailboxes_offset = 0;
  size_t total_bytes = 0;
};

// One mapping of a segment. The creator (group rank 0) unlinks the name once
// every rank has mapped it; the memory lives until the last mapping goes.
class Segment {
 public:
  // shm_open(O_CREAT | O_EXCL), posix_fallocate (an error naming the bytes
  // needed and free when /dev/shm is too small), mmap, initialise the header.
  // Both create and open map every page up front (MAP_POPULATE), so no
  // collective takes the segment's first-touch page faults.
  static Segment create(const std::string& name, const Layout& layout);
  // shm_open and mmap an existing segment; checks its header against `layout`.
  static Segment open(const std::string& name, const Layout& layout);

  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) = delete;
  Segment(const Segment&) = delete;
  ~Segment();  // unmaps; unlinks too if this process created it and has not yet

  // Removes the name from /dev/shm (creator only; idempotent).
  void unlink();

  const std::string& name() const { return name_; }
  const Layout& layout() const { return layout_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankControl& rank(int r) const;
  MailboxControl& mailbox(int src, int dst) const;
  std::byte* slot(int r, size_t buffer) const;
  std::byte* mailbox_buffer(int src, int dst, size_t buffer) const;

 private:
  Segment(std::string name, const Layout& layout, std::byte* base, bool owner);
  std::string name_;
  Layout layout_;
  std::byte* base_ = nullptr;
  bool owner_ = false;  // created it and has not unlinked yet
};

// One allocation of symmetric memory (Note [Symmetric memory] in
// distributed/README.md): a segment of one region per rank, back to back,
// that every rank of the group maps whole, so that a collective on a tensor
// in region r reads and writes the other ranks' regions where they lie.
class SymmetricMapping {
 public:
  // Takes the mapping of `ranks` regions of `region_bytes` at `base`.
  SymmetricMapping(uint64_t id, std::byte* base, size_t region_bytes, int ranks);
  ~SymmetricMapping();  // unmaps this process's view; the peers' stay valid
  SymmetricMapping(const SymmetricMapping&) = delete;
  SymmetricMapping& operator=(const SymmetricMapping&) = delete;

  // The allocation's place in its group's sequence, the same on every rank.
  uint64_t id() const { return id_; }
  std::byte* region(int r) const { return base_ + size_t(r) * region_bytes_; }
  size_t region_bytes() const { return region_bytes_; }

 private:
  uint64_t id_;
  std::byte* base_;
  size_t region_bytes_;
  int ranks_;
};

// A region's size for `bytes` of tensor: whole pages, so every region starts
// page-aligned and the ranks never write one cache line.
size_t symmetric_region_bytes(int64_t bytes);

// Whether /dev/shm has `bytes` free now (a symmetric allocation that does
// not fit is ordinary memory instead, Note [Symmetric memory]).
bool dev_shm_has_room(size_t bytes);

// shm_open(O_CREAT | O_EXCL) a new name, reserve `bytes` with posix_fallocate
// (an error naming `purpose`, the bytes needed and those free when /dev/shm
// is too small) and map them all (MAP_POPULATE), so no collective takes
// first-touch page faults. The segment and the symmetric allocations use it.
std::byte* create_mapping(const std::string& name, size_t bytes, const std::string& purpose);
// shm_open and map an existing name, which must hold `bytes` (for `purpose`).
std::byte* open_mapping(const std::string& name, size_t bytes, const std::string& purpose);

// "/ember-<job id>-<prefix>-<random>": the job id from EMBER_JOB_ID (else
// random), the group's store prefix with everything but [A-Za-z0-9] as '_'.
std::string make_segment_name(const std::string& store_prefix);

}  // namespace ember::distributed::shm
