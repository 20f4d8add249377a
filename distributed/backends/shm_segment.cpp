// The shm backend's segment: layout arithmetic and the POSIX shared-memory
// calls (Note [Shared-memory collectives]). Tests: tests/distributed/test_shm.cpp.
#include "distributed/backends/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>

#include "core/error.h"

namespace ember::distributed::shm {
namespace {

constexpr size_t kPageBytes = 4096;
// Chunks of 1 MiB: on the 2-core Zen 3 of bench/RESULTS.md, 512 KiB chunks
// cost as much at 1-4 MB and 2 MiB ones twice as much (the slots then spill
// out of L3), while fewer chunks mean fewer waits. A rank stages chunk j while
// it reduces j-1 and gathers j-2, so the pipeline needs 3 buffers per slot
// (with 2 it deadlocks); the 4th lets a rank run a chunk ahead of its peers.
// Note [Shared-memory collectives], "Budget": past 8 ranks the chunks
// shrink so that the slots stay within 32 MiB, and the mailboxes (n² of
// them) share 16 MiB, so that 16 ranks fit in a default container's 64 MB
// /dev/shm.
constexpr size_t kChunkBytes = size_t(1) << 20;
static_assert(kPipelineDepth >= 3, "the pipeline keeps three chunks in flight per slot");
constexpr size_t kSlotBudgetBytes = size_t(32) << 20;
constexpr size_t kMailboxChunkBytes = size_t(512) << 10;
constexpr size_t kMailboxDepth = 2;
constexpr size_t kMailboxBudgetBytes = size_t(16) << 20;

size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// The largest power of two <= value, and at least one page.
size_t floor_power_of_two(size_t value) {
  size_t power = kPageBytes;
  while (power * 2 <= value) power *= 2;
  return power;
}

std::string sanitize(const std::string& text, size_t max_length) {
  std::string out;
  for (char c : text) {
    if (out.size() == max_length) break;
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += plain ? c : '_';
  }
  return out;
}

std::string random_hex(int digits) {
  std::random_device device;
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < digits; ++i) out += kHex[device() % 16];
  return out;
}

}  // namespace

Layout::Layout(int ranks_)
    : ranks(ranks_), depth(kPipelineDepth), mailbox_depth(kMailboxDepth) {
  EMBER_ASSERT(ranks > 0, "a segment for {} ranks", ranks);
  size_t n = size_t(ranks);
  chunk_bytes = std::min(kChunkBytes, floor_power_of_two(kSlotBudgetBytes / (n * depth)));
  mailbox_chunk_bytes = std::min(kMailboxChunkBytes, floor_power_of_two(kMailboxBudgetBytes / (n * n * mailbox_depth)));
  rank_controls_offset = align_up(sizeof(SegmentHeader), kLineBytes);
  mailbox_controls_offset = align_up(rank_controls_offset + n * sizeof(RankControl), kLineBytes);
  slots_offset = align_up(mailbox_controls_offset + n * n * sizeof(MailboxControl), kPageBytes);
  mailboxes_offset = slots_offset + n * depth * chunk_bytes;
  total_bytes = mailboxes_offset + n * n * mailbox_depth * mailbox_chunk_bytes;
}

Segment::Segment(std::string name, const Layout& layout, std::byte* base, bool owner)
    : name_(std::move(name)), layout_(layout), base_(base), owner_(owner) {}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)), layout_(other.layout_), base_(other.base_), owner_(other.owner_) {
  other.base_ = nullptr;
  other.owner_ = false;
}

Segment::~Segment() {
  if (owner_) shm_unlink(name_.c_str());
  if (base_) munmap(base_, layout_.total_bytes);
}

void Segment::unlink() {
  if (!owner_) return;
  owner_ = false;
  EMBER_CHECK(shm_unlink(name_.c_str()) == 0, "shm backend: shm_unlink({}) failed: {}", name_, std::strerror(errno));
}

namespace {

std::string mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20)); }

// The bytes free in /dev/shm, if statvfs can say.
std::optional<uint64_t> dev_shm_free_bytes() {
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) != 0) return std::nullopt;
  return uint64_t(shm.f_bavail) * uint64_t(shm.f_frsize);
}

// posix_fallocate, again after a signal (it returns the error, not errno).
int reserve(int fd, size_t bytes) {
  int error = 0;
  do {
    error = posix_fallocate(fd, 0, off_t(bytes));
  } while (error == EINTR);
  return error;
}

}  // namespace

std::byte* create_mapping(const std::string& name, size_t bytes, const std::string& purpose) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  EMBER_CHECK(fd >= 0, "shm backend: shm_open({}, O_CREAT | O_EXCL) failed: {}", name, std::strerror(errno));
  // Reserved, not a sparse ftruncate: tmpfs would hand out the pages when
  // first touched, and a full /dev/shm would then kill a rank mid-collective
  // with SIGBUS instead of failing here.
  if (int error = reserve(fd, bytes); error != 0) {
    close(fd);
    shm_unlink(name.c_str());
    const std::optional<uint64_t> free_bytes = dev_shm_free_bytes();
    EMBER_CHECK(error != ENOSPC,
                "shm backend: {} needs {} bytes ({}) of /dev/shm, which has {} free; give the container more (docker "
                "run --shm-size=1g), run fewer ranks per host, or use the gloo backend "
                "(init_process_group({{.backend = \"gloo\"}}))",
                purpose, bytes, mib(bytes),
                free_bytes ? fmt::format("{} bytes ({})", *free_bytes, mib(*free_bytes))
                           : std::string("an unknown number of bytes"));
    EMBER_CHECK(false, "shm backend: posix_fallocate({}, {} bytes) failed: {}", name, bytes, std::strerror(error));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    EMBER_CHECK(false, "shm backend: mmap({}, {} bytes) failed: {}", name, bytes, std::strerror(error));
  }
  return static_cast<std::byte*>(base);
}

std::byte* open_mapping(const std::string& name, size_t bytes, const std::string& purpose) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  EMBER_CHECK(fd >= 0, "shm backend: shm_open({}) failed: {}", name, std::strerror(errno));
  struct stat info {};
  if (fstat(fd, &info) != 0 || size_t(info.st_size) != bytes) {
    close(fd);
    EMBER_CHECK(false, "shm backend: segment {} has {} bytes, expected {} for {}", name, int64_t(info.st_size), bytes,
                purpose);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int error = errno;
  close(fd);
  EMBER_CHECK(base != MAP_FAILED, "shm backend: mmap({}, {} bytes) failed: {}", name, bytes, std::strerror(error));
  return static_cast<std::byte*>(base);
}

Segment Segment::create(const std::string& name, const Layout& layout) {
  std::byte* base = create_mapping(name, layout.total_bytes, fmt::format("the segment for {} ranks", layout.ranks));
  Segment segment(name, layout, base, true);
  // The file starts zeroed; constructing the atomics there starts their lifetimes.
  auto* header = new (base) SegmentHeader{};
  header->total_bytes = layout.total_bytes;
  header->ranks = layout.ranks;
  for (int r = 0; r < layout.ranks; ++r) {
    new (&segment.rank(r)) RankControl{};
    for (int d = 0; d < layout.ranks; ++d) new (&segment.mailbox(r, d)) MailboxControl{};
  }
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kSegmentMagic;
  return segment;
}

Segment Segment::open(const std::string& name, const Layout& layout) {
  std::byte* base = open_mapping(name, layout.total_bytes, fmt::format("{} ranks", layout.ranks));
  Segment segment(name, layout, base, false);
  const SegmentHeader& header = segment.header();
  EMBER_CHECK(header.magic == kSegmentMagic && header.ranks == layout.ranks && header.total_bytes == layout.total_bytes,
              "shm backend: segment {} is not an ember segment for {} ranks (magic {:#x}, {} ranks, {} bytes)", name,
              layout.ranks, header.magic, header.ranks, header.total_bytes);
  return segment;
}

RankControl& Segment::rank(int r) const {
  return reinterpret_cast<RankControl*>(base_ + layout_.rank_controls_offset)[r];
}

MailboxControl& Segment::mailbox(int src, int dst) const {
  return reinterpret_cast<MailboxControl*>(base_ + layout_.mailbox_controls_offset)[src * layout_.ranks + dst];
}

std::byte* Segment::slot(int r, size_t buffer) const {
  return base_ + layout_.slots_offset + (size_t(r) * layout_.depth + buffer) * layout_.chunk_bytes;
}

std::byte* Segment::mailbox_buffer(int src, int dst, size_t buffer) const {
  size_t pair = size_t(src) * size_t(layout_.ranks) + size_t(dst);
  return base_ + layout_.mailboxes_offset + (pair * layout_.mailbox_depth + buffer) * layout_.mailbox_chunk_bytes;
}

SymmetricMapping::SymmetricMapping(uint64_t id, std::byte* base, size_t region_bytes, int ranks)
    : id_(id), base_(base), region_bytes_(region_bytes), ranks_(ranks) {}

SymmetricMapping::~SymmetricMapping() { munmap(base_, region_bytes_ * size_t(ranks_)); }

bool dev_shm_has_room(size_t bytes) {
  const std::optional<uint64_t> free_bytes = dev_shm_free_bytes();
  return free_bytes && *free_bytes >= bytes;
}

size_t symmetric_region_bytes(int64_t bytes) { return align_up(size_t(std::max<int64_t>(bytes, 1)), kPageBytes); }

std::string make_segment_name(const std::string& store_prefix) {
  const char* job = std::getenv("EMBER_JOB_ID");
  std::string job_id = job && *job ? sanitize(job, 32) : random_hex(8);
  return "/ember-" + job_id + "-" + sanitize(store_prefix, 64) + "-" + random_hex(8);
}

}  // namespace ember::distributed::shm
