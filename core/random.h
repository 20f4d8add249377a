// Random numbers: Philox 4x32-10, a counter-based generator. The same seed
// gives the same stream on every device, and its whole state is two integers
// (seed, offset) that a checkpoint can save. Kernels: kernels/*/random.cpp.
// Philox and the helpers below are inline and EMBER_HOST_DEVICE: the CUDA
// kernels run this very code, which is what makes their streams bit-identical.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "core/host_device.h"

namespace ember {

// One Philox 4x32-10 block: four 32-bit outputs for (counter, key) (Salmon,
// Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
// Tests: tests/core/test_random.cpp (Random123's known-answer vectors).
EMBER_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                                             std::array<uint32_t, 2> key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t product0 = uint64_t(kMultiplier0) * counter[0], product1 = uint64_t(kMultiplier1) * counter[2];
    counter = {uint32_t(product1 >> 32) ^ counter[1] ^ key[0], uint32_t(product1),
               uint32_t(product0 >> 32) ^ counter[3] ^ key[1], uint32_t(product0)};
  }
  return counter;
}

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // blocks of 4 outputs consumed so far
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  GeneratorState state() const;
  void set_state(GeneratorState state);
  // Reserves `blocks` Philox blocks and returns the first block's offset; the
  // caller generates block i from counter (offset + i) and key(seed).
  uint64_t reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The generator ops draw from when given none: the process's, or the one a
// DefaultGeneratorGuard set on this thread.
Generator& default_generator();
void manual_seed(uint64_t seed);  // seeds the default generator

// While it lives, `generator` is this thread's default_generator(): a
// DataLoader worker draws each batch's random numbers from a generator of
// that batch's own (Note [Random numbers in workers] in data/README.md).
class DefaultGeneratorGuard {
 public:
  [[nodiscard]] explicit DefaultGeneratorGuard(Generator& generator);
  ~DefaultGeneratorGuard();
  DefaultGeneratorGuard(const DefaultGeneratorGuard&) = delete;
  DefaultGeneratorGuard& operator=(const DefaultGeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

// The counter for block `index` of a stream that starts at `offset`.
EMBER_HOST_DEVICE inline std::array<uint32_t, 4> philox_counter(uint64_t offset, uint64_t index) {
  uint64_t c = offset + index;
  return {uint32_t(c), uint32_t(c >> 32), 0u, 0u};
}
EMBER_HOST_DEVICE inline std::array<uint32_t, 2> philox_key(uint64_t seed) {
  return {uint32_t(seed), uint32_t(seed >> 32)};
}
// A uniform float in [0, 1) from 32 random bits (24 bits of mantissa).
EMBER_HOST_DEVICE inline float uniform_float(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }
EMBER_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  return double((uint64_t(hi) << 21) | (uint64_t(lo) >> 11)) * (1.0 / 9007199254740992.0);
}

}  // namespace ember
