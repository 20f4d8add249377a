// The Generator that hands out Philox counters (Philox itself is inline in
// core/random.h), and the recorder of generator uses (core/random_uses.h).
// Tests: tests/core/test_random.cpp, tests/nn/test_checkpoint.cpp.
#include "core/random.h"
#include "core/random_uses.h"

namespace ember {

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

namespace {
thread_local GeneratorUseRecorder* t_innermost_recorder = nullptr;
}  // namespace

GeneratorUseRecorder::GeneratorUseRecorder() : outer_(t_innermost_recorder) { t_innermost_recorder = this; }
GeneratorUseRecorder::~GeneratorUseRecorder() { t_innermost_recorder = outer_; }

GeneratorUsesHidden::GeneratorUsesHidden() : hidden_(t_innermost_recorder) { t_innermost_recorder = nullptr; }
GeneratorUsesHidden::~GeneratorUsesHidden() { t_innermost_recorder = hidden_; }

void GeneratorUseRecorder::note(Generator* generator, GeneratorState before) {
  for (const GeneratorUse& use : uses_)
    if (use.generator == generator) return;
  uses_.push_back({generator, before});
}

uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  for (GeneratorUseRecorder* recorder = t_innermost_recorder; recorder; recorder = recorder->outer_)
    recorder->note(this, state_);
  uint64_t first = state_.offset;
  state_.offset += blocks;
  return first;
}

namespace {
thread_local Generator* t_default_generator = nullptr;  // set by a DefaultGeneratorGuard
}  // namespace

Generator& default_generator() {
  if (t_default_generator) return *t_default_generator;
  static Generator generator;
  return generator;
}

DefaultGeneratorGuard::DefaultGeneratorGuard(Generator& generator) : previous_(t_default_generator) {
  t_default_generator = &generator;
}
DefaultGeneratorGuard::~DefaultGeneratorGuard() { t_default_generator = previous_; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
