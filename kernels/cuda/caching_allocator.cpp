// The CUDA caching allocator's policy (Note [CUDA caching allocator] in
// kernels/cuda/README.md). Called by the CUDA Allocator of
// kernels/cuda/cuda_allocator.cpp; tested on a fake address space in
// tests/core/test_caching_allocator.cpp.
#include "kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace ember::cuda {

// A block is a piece of one segment. The blocks of a segment form a list in
// address order (prev/next), so a freed block finds its neighbours to merge with.
struct CachingAllocator::Block {
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = 0;
  Pool* pool = nullptr;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;

  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

// Best fit: the smallest free block of the stream that is large enough is the
// first one at or after (stream, size); the address breaks ties.
bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->address) < std::tie(b->stream, b->size, b->address);
}

namespace {

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Split off the remainder only when it can serve a later request of its pool:
// a large-pool remainder of 1 MiB or less could only serve small requests,
// which never come to the large pool.
bool worth_splitting(size_t block_size, size_t rounded, bool small_pool) {
  size_t remainder = block_size - rounded;
  return small_pool ? remainder >= kMinBlockSize : remainder > kSmallRequestLimit;
}

// "512 bytes", "1.50 KiB", "20.00 MiB", "139.80 GiB": the sizes of an out-of-memory message.
std::string human_size(int64_t nbytes) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024.0, kGiB = kMiB * 1024.0;
  if (nbytes < 1024) return fmt::format("{} bytes", nbytes);
  if (nbytes < int64_t(kMiB)) return fmt::format("{:.2f} KiB", double(nbytes) / kKiB);
  if (nbytes < int64_t(kGiB)) return fmt::format("{:.2f} MiB", double(nbytes) / kMiB);
  return fmt::format("{:.2f} GiB", double(nbytes) / kGiB);
}

}  // namespace

size_t round_size(size_t nbytes) { return round_up(std::max(nbytes, kMinBlockSize), kMinBlockSize); }

size_t segment_size(size_t rounded) {
  if (rounded <= kSmallRequestLimit) return kSmallSegmentSize;
  if (rounded < kMinLargeSegment) return kMediumSegmentSize;
  return round_up(rounded, kLargeRounding);
}

CachingAllocator::CachingAllocator(DeviceMemory& memory, int device_index)
    : memory_(memory), device_index_(device_index) {}

CachingAllocator::~CachingAllocator() {
  for (Pool* pool : {&small_pool_, &large_pool_})
    for (Block* block : *pool) delete block;
  for (auto& [address, block] : allocated_blocks_) delete block;
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  size_t rounded = round_size(nbytes);
  std::lock_guard lock(mutex_);
  Pool& pool = rounded <= kSmallRequestLimit ? small_pool_ : large_pool_;
  Block* block = find_free_block(pool, rounded, stream);
  if (!block) block = reserve_segment(pool, rounded, nbytes, stream);
  if (worth_splitting(block->size, rounded, &pool == &small_pool_)) pool.insert(split(block, rounded));
  block->allocated = true;
  allocated_blocks_.emplace(block->address, block);
  stats_.allocated += int64_t(block->size);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return reinterpret_cast<void*>(block->address);
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto found = allocated_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  EMBER_ASSERT(found != allocated_blocks_.end(), "CUDA caching allocator: {} was not allocated by it", ptr);
  Block* block = found->second;
  allocated_blocks_.erase(found);
  block->allocated = false;
  stats_.allocated -= int64_t(block->size);
  Pool& pool = *block->pool;
  if (block->prev && !block->prev->allocated) {
    Block* prev = block->prev;
    pool.erase(prev);
    merge_into(prev, block);
    block = prev;
  }
  if (block->next && !block->next->allocated) {
    pool.erase(block->next);
    merge_into(block, block->next);
  }
  pool.insert(block);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_free_segments();
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, size_t rounded, StreamId stream) {
  Block key{.address = 0, .size = rounded, .stream = stream};
  auto found = pool.lower_bound(&key);
  if (found == pool.end() || (*found)->stream != stream) return nullptr;
  Block* block = *found;
  pool.erase(found);
  return block;
}

// A new segment holding one block; on out-of-memory the cache goes back to
// the device and the reserve is tried once more.
CachingAllocator::Block* CachingAllocator::reserve_segment(Pool& pool, size_t rounded, size_t nbytes,
                                                           StreamId stream) {
  size_t size = segment_size(rounded);
  void* ptr = memory_.reserve(size);
  if (!ptr) {
    release_free_segments();
    ptr = memory_.reserve(size);
  }
  if (!ptr) throw_out_of_memory(nbytes);
  stats_.reserved += int64_t(size);
  ++stats_.system_allocations;
  return new Block{.address = reinterpret_cast<uintptr_t>(ptr), .size = size, .stream = stream, .pool = &pool};
}

void CachingAllocator::release_free_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    std::vector<Block*> segments;
    for (Block* block : *pool)
      if (block->whole_segment()) segments.push_back(block);
    for (Block* segment : segments) {
      memory_.release(reinterpret_cast<void*>(segment->address));
      stats_.reserved -= int64_t(segment->size);
      pool->erase(segment);
      delete segment;
    }
  }
}

// Cuts `block` to `rounded` bytes and returns the free remainder that follows it.
CachingAllocator::Block* CachingAllocator::split(Block* block, size_t rounded) {
  auto* remainder = new Block{.address = block->address + rounded,
                              .size = block->size - rounded,
                              .stream = block->stream,
                              .pool = block->pool,
                              .prev = block,
                              .next = block->next};
  if (block->next) block->next->prev = remainder;
  block->next = remainder;
  block->size = rounded;
  return remainder;
}

// `neighbour` follows `block` in its segment and is absorbed by it.
void CachingAllocator::merge_into(Block* block, Block* neighbour) {
  block->size += neighbour->size;
  block->next = neighbour->next;
  if (neighbour->next) neighbour->next->prev = block;
  delete neighbour;
}

void CachingAllocator::throw_out_of_memory(size_t nbytes) const {
  detail::throw_error(fmt::format("CUDA out of memory: tried to allocate {} on cuda:{}; {} allocated, {} reserved, {} free in cache",
                                  human_size(int64_t(nbytes)), device_index_, human_size(stats_.allocated),
                                  human_size(stats_.reserved), human_size(stats_.reserved - stats_.allocated)));
}

}  // namespace ember::cuda
