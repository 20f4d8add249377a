// Which generators a stretch of code draws from, and the state each had
// before its first draw there: what activation checkpointing restores before
// running a region again, so that dropout with any generator (the default
// one, or a module's own) draws the same numbers twice
// (Note [Activation checkpointing] in nn/README.md).
// Tests: tests/nn/test_checkpoint.cpp.
#pragma once

#include <vector>

#include "core/random.h"

namespace ember {

struct GeneratorUse {
  Generator* generator;
  GeneratorState before;  // its state before the first draw seen
};

// Records, on this thread, every generator that reserves numbers while it
// lives (Generator::reserve). Recorders nest; each sees the draws made
// inside it, those of inner recorders included.
class GeneratorUseRecorder {
 public:
  GeneratorUseRecorder();
  ~GeneratorUseRecorder();
  GeneratorUseRecorder(const GeneratorUseRecorder&) = delete;
  GeneratorUseRecorder& operator=(const GeneratorUseRecorder&) = delete;
  // In order of first use, each generator once.
  const std::vector<GeneratorUse>& uses() const { return uses_; }

 private:
  friend class Generator;
  void note(Generator* generator, GeneratorState before);
  GeneratorUseRecorder* outer_;
  std::vector<GeneratorUse> uses_;
};

}  // namespace ember
