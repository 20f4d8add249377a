// A bounded, thread-safe map from a key of integers (the shapes, strides,
// dtype... that determine a library primitive) to a shared entry, least
// recently used evicted first. Creating a library primitive costs as much as
// a small problem's whole computation, so kernels keep them: oneDNN's
// primitives (kernels/cpu/onednn.h, Note [oneDNN primitive cache]) and
// cuDNN's descriptors and chosen algorithms (kernels/cuda/conv.cu).
// Plain C++, tested on every machine: tests/core/test_primitive_cache.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace ember {

// A cache key: the integers that determine a primitive (dims, strides, dtype...).
class PrimitiveKey {
 public:
  static constexpr int kCapacity = 64;
  void add(int64_t value) {
    EMBER_ASSERT(size_ < kCapacity, "PrimitiveKey: more than {} values", kCapacity);
    values_[size_++] = value;
    hash_ = (hash_ ^ uint64_t(value)) * 0x100000001b3ull;  // FNV-1a over whole values
  }
  size_t hash() const { return size_t(hash_); }
  friend bool operator==(const PrimitiveKey& a, const PrimitiveKey& b) {
    if (a.size_ != b.size_ || a.hash_ != b.hash_) return false;
    for (int i = 0; i < a.size_; ++i)
      if (a.values_[i] != b.values_[i]) return false;
    return true;
  }

 private:
  int64_t values_[kCapacity];
  int size_ = 0;
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

// A bounded map from key to a shared entry, least recently used evicted first.
// Lookups take one mutex for a hash probe and a list splice; an entry is built
// outside the lock (a racing builder's duplicate is simply dropped).
template <class Entry>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

  template <class Make>
  std::shared_ptr<Entry> get(const PrimitiveKey& key, Make&& make) {
    // A thread that repeats one shape (a training loop) finds its last entry
    // without the lock. The memo may outlive the entry's eviction: it only
    // keeps a valid primitive alive a little longer.
    thread_local Memo memo;
    if (memo.owner == this && memo.key == key) return memo.entry;
    std::shared_ptr<Entry> entry = find_or_make(key, make);
    memo.owner = this, memo.key = key, memo.entry = entry;
    return entry;
  }

 private:
  struct Memo {
    const PrimitiveCache* owner = nullptr;
    PrimitiveKey key;
    std::shared_ptr<Entry> entry;
  };

  template <class Make>
  std::shared_ptr<Entry> find_or_make(const PrimitiveKey& key, Make& make) {
    {
      std::lock_guard lock(mutex_);
      auto found = index_.find(key);
      if (found != index_.end()) {
        order_.splice(order_.begin(), order_, found->second);
        return found->second->second;
      }
    }
    std::shared_ptr<Entry> entry = make();
    std::lock_guard lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) return found->second->second;
    order_.emplace_front(key, entry);
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return entry;
  }

  struct Hash {
    size_t operator()(const PrimitiveKey& key) const { return key.hash(); }
  };
  using Item = std::pair<PrimitiveKey, std::shared_ptr<Entry>>;
  size_t capacity_;
  std::mutex mutex_;
  std::list<Item> order_;  // most recently used first
  std::unordered_map<PrimitiveKey, typename std::list<Item>::iterator, Hash> index_;
};

}  // namespace ember
