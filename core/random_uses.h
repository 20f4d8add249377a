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
  friend class GeneratorUsesHidden;
  void note(Generator* generator, GeneratorState before);
  GeneratorUseRecorder* outer_;
  std::vector<GeneratorUse> uses_;
};

// While it lives, the recorders around it see no draw made on this thread
// (recorders made inside it see theirs). Checkpointing's recomputation runs
// under one: it restores the generators, draws, and restores them back, so
// its draws belong to no region's forward; an outer region's recorder took
// the restored state for its own, and its recomputation drew other numbers.
class GeneratorUsesHidden {
 public:
  GeneratorUsesHidden();
  ~GeneratorUsesHidden();
  GeneratorUsesHidden(const GeneratorUsesHidden&) = delete;
  GeneratorUsesHidden& operator=(const GeneratorUsesHidden&) = delete;

 private:
  GeneratorUseRecorder* hidden_;
};

}  // namespace ember
