// CPU dropout: Philox blocks split across threads in batches of 16 (each block
// decides four consecutive elements, so the mask does not depend on the
// split), scale in ComputeType<T>. Tests: tests/core/test_dropout.cpp.
#include <algorithm>

#include "core/ops/dropout_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {

namespace {

// Philox 4x32-10 (core/random.h) for kBatch consecutive counters at once, in
// structure-of-arrays form so the 32x32 -> 64-bit multiplies vectorise; one
// block at a time through philox4x32 is ~4x slower. The bit-equality test
// against the reference kernel (which calls philox4x32) guards the copy.
constexpr int kBatch = 16;
constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

struct PhiloxBatch {
  uint32_t words[4][kBatch];  // words[lane][j]: lane `lane` of block (first + j)
};

void philox_batch(uint64_t first, std::array<uint32_t, 2> key, PhiloxBatch& out) {
  uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  for (int j = 0; j < kBatch; ++j) {
    const uint64_t counter = first + uint64_t(j);
    c0[j] = uint32_t(counter), c1[j] = uint32_t(counter >> 32), c2[j] = 0, c3[j] = 0;
  }
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kWeyl0, k1 += kWeyl1;
#pragma omp simd
    for (int j = 0; j < kBatch; ++j) {
      const uint64_t product0 = uint64_t(kMultiplier0) * c0[j], product1 = uint64_t(kMultiplier1) * c2[j];
      const uint32_t next0 = uint32_t(product1 >> 32) ^ c1[j] ^ k0, next2 = uint32_t(product0 >> 32) ^ c3[j] ^ k1;
      c1[j] = uint32_t(product1), c3[j] = uint32_t(product0), c0[j] = next0, c2[j] = next2;
    }
  }
  for (int j = 0; j < kBatch; ++j)
    out.words[0][j] = c0[j], out.words[1][j] = c1[j], out.words[2][j] = c2[j], out.words[3][j] = c3[j];
}

template <class T>
void dropout(const DropoutProblem& p) {
  using V = ComputeType<T>;
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.output);
  const V scale = V(p.scale);
  const std::array<uint32_t, 2> key = philox_key(p.stream.seed);
  constexpr int64_t kBatchElements = int64_t(kBatch) * kDropoutPerBlock;
  const int64_t batches = (p.numel + kBatchElements - 1) / kBatchElements;
  parallel_for(0, batches, kParallelGrain / kBatchElements, [&](int64_t begin, int64_t end) {
    PhiloxBatch batch;
    V factor[kBatchElements];
    for (int64_t b = begin; b < end; ++b) {
      philox_batch(p.stream.offset + uint64_t(b * kBatch), key, batch);
      for (int lane = 0; lane < kDropoutPerBlock; ++lane)
        for (int j = 0; j < kBatch; ++j)
          factor[j * kDropoutPerBlock + lane] = dropout_keeps(batch.words[lane][j], p.threshold) ? scale : V(0);
      const int64_t first = b * kBatchElements, count = std::min(kBatchElements, p.numel - first);
      // A multiply, not a select: a dropped nan stays nan, as in PyTorch.
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) out[first + i] = T(V(in[first + i]) * factor[i]);
    }
  });
}

}  // namespace

void register_dropout_kernels() {
  register_for<float, double, Half, BFloat16>(dropout_op, DeviceType::cpu,
                                              [](auto tag) { return &dropout<decltype(tag)>; });
}

}  // namespace ember::cpu
