// The profiler's hook in the op dispatch: what `Op::operator()` (core/dispatch.h)
// runs around a kernel while a profile records ops (Note [One branch when off]
// in core/profiler/README.md). Kept apart from profiler.h so the dispatch
// header includes only this.
// Tests: tests/core/test_profiler.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"

namespace ember {

class Tensor;
struct ElementwiseLoop;
struct ReductionLoop;
struct SoftmaxLoop;
struct MatmulProblem;
struct Conv2dProblem;
struct Conv2dBackwardProblem;
struct Conv2dBackwardBothProblem;
struct AttentionProblem;
struct AttentionBackwardProblem;

namespace profiler {

// What a profile records, as bits of one process-wide word (0: nothing).
enum Recording : int {
  kRecordOps = 1,          // every kernel an op dispatches
  kRecordShapes = 2,       // with the shapes of its operands
  kRecordBackward = 4,     // every autograd node the engine runs
  kRecordDistributed = 8,  // collectives, DDP/ZeRO buckets, clock offsets
  kRecordSteps = 16,       // DataLoader waits, optimizer steps, checkpoint saves
};

namespace detail {
extern std::atomic<int> g_recording;
}

// The one relaxed load and test the dispatch pays when nothing records.
inline bool recording(Recording what) { return (detail::g_recording.load(std::memory_order_relaxed) & what) != 0; }

// What a kernel's arguments tell about the call: operand shapes (only when
// shapes are recorded), bytes read and written, floating-point operations.
// -1: unknown.
struct KernelFacts {
  DType dtype;
  int64_t flops = -1;
  int64_t bytes = -1;
  std::string shapes;
};

// Fills `facts` from a kernel's first argument: an overload per argument type
// that says something (core/profiler/kernel_facts.cpp), nothing for the rest.
template <class T>
void describe_kernel_call(KernelFacts&, const T&) {}
void describe_kernel_call(KernelFacts& facts, const Tensor& first);
void describe_kernel_call(KernelFacts& facts, const ElementwiseLoop& loop);
void describe_kernel_call(KernelFacts& facts, const ReductionLoop& loop);
void describe_kernel_call(KernelFacts& facts, const SoftmaxLoop& loop);
void describe_kernel_call(KernelFacts& facts, const MatmulProblem& problem);
void describe_kernel_call(KernelFacts& facts, const Conv2dProblem& problem);
void describe_kernel_call(KernelFacts& facts, const Conv2dBackwardProblem& problem);
void describe_kernel_call(KernelFacts& facts, const Conv2dBackwardBothProblem& problem);
void describe_kernel_call(KernelFacts& facts, const AttentionProblem& problem);
void describe_kernel_call(KernelFacts& facts, const AttentionBackwardProblem& problem);

// Times one kernel call from construction to destruction and records it as
// an op event named `op` on this thread.
class KernelSpan {
 public:
  KernelSpan(std::string_view op, DeviceType device, KernelFacts facts);
  ~KernelSpan();
  KernelSpan(const KernelSpan&) = delete;
  KernelSpan& operator=(const KernelSpan&) = delete;

 private:
  std::string_view op_;
  DeviceType device_;
  KernelFacts facts_;
  int64_t begin_ns_;
};

template <class First, class... Rest>
const First& first_argument(const First& first, const Rest&...) {
  return first;
}

}  // namespace profiler
}  // namespace ember
