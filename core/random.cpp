// Philox 4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011) and the Generator that hands out its counters.
// Tests: tests/core/test_random.cpp (Random123's known-answer vectors).
#include "core/random.h"

namespace ember {

namespace {
constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
constexpr int kRounds = 10;

inline void multiply(uint32_t a, uint32_t b, uint32_t& high, uint32_t& low) {
  uint64_t product = uint64_t(a) * uint64_t(b);
  high = uint32_t(product >> 32);
  low = uint32_t(product);
}
}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint32_t high0, low0, high1, low1;
    multiply(kMultiplier0, counter[0], high0, low0);
    multiply(kMultiplier1, counter[2], high1, low1);
    counter = {high1 ^ counter[1] ^ key[0], low1, high0 ^ counter[3] ^ key[1], low0};
  }
  return counter;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard lock(mutex_);
  return state_.seed;
}

GeneratorState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard lock(mutex_);
  state_ = state;
}

uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  uint64_t first = state_.offset;
  state_.offset += blocks;
  return first;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
