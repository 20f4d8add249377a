// Reference dropout: one Philox block per four elements, element by element,
// the oracle of tests/core/test_dropout.cpp. The arithmetic is ComputeType<T>'s,
// as in the CPU kernel, so the two match bit for bit.
#include "core/ops/dropout_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {

namespace {

template <class T>
void dropout(const DropoutProblem& p) {
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.output);
  for (int64_t i = 0; i < p.numel; ++i) {
    std::array<uint32_t, 4> words =
        philox4x32(philox_counter(p.stream.offset, uint64_t(i / kDropoutPerBlock)), philox_key(p.stream.seed));
    bool keep = dropout_keeps(words[size_t(i % kDropoutPerBlock)], p.threshold);
    out[i] = T(ComputeType<T>(in[i]) * (keep ? ComputeType<T>(p.scale) : ComputeType<T>(0)));
  }
}

}  // namespace

void register_dropout_kernels() {
  register_reference_for<float, double, Half, BFloat16>(dropout_op, [](auto tag) { return &dropout<decltype(tag)>; });
}

}  // namespace ember::reference
