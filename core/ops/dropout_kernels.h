// The kernel interface of dropout (entry point: core/ops/dropout.cpp; kernels:
// kernels/{reference,cpu}/dropout.cpp). Element i keeps or drops by the 32-bit
// word in lane i % 4 of Philox block (offset + i / 4), so any split of the
// elements across threads, and any backend, gives the same mask. The backward
// runs the same kernel on the output gradient with the same stream.
#pragma once

#include <array>
#include <cstdint>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/host_device.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ember {

// output[i] = keep(i) ? input[i] * scale : 0; both contiguous, of the key dtype.
struct DropoutProblem {
  int64_t numel = 0;
  uint32_t threshold = 0;  // element i is dropped when (word >> 8) < threshold, i.e. uniform < p
  double scale = 1;        // 1 / (1 - p)
  GeneratorState stream;
  const void* input = nullptr;
  void* output = nullptr;
};

inline constexpr int kDropoutPerBlock = 4;

// Whether the element drawn from `word` survives: its 24-bit uniform is >= p.
EMBER_HOST_DEVICE inline bool dropout_keeps(uint32_t word, uint32_t threshold) { return (word >> 8) >= threshold; }

extern Op<void(const DropoutProblem&)> dropout_op;

// The backward: grad_output through the forward's mask and scale (the same
// threshold, scale and stream; the forward's data pointers are not used).
Tensor dropout_backward(const Tensor& grad_output, const DropoutProblem& forward);

// Gradient slot (autograd/functions/dropout.cpp); params: the DropoutProblem of
// the forward (threshold, scale and stream; pointers unused).
extern GradSlot dropout_grad;

}  // namespace ember
