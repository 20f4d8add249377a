// The shared batches and initialisation of the training-step workloads
// (training_spec.h), linked into both comparison workers.
#include "training_spec.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

namespace ember::compare::training {
namespace {

// SplitMix64: a tiny generator whose stream depends only on its seed, the
// same in both workers.
class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), from the top 24 bits (exact in f32).
  float symmetric() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) / float(int64_t(1) << 23); }
  int64_t below(int64_t bound) { return int64_t(next() % uint64_t(bound)); }

 private:
  uint64_t state_;
};

// FNV-1a, so a parameter's values depend only on its name.
uint64_t name_seed(const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : name) hash = (hash ^ uint64_t(uint8_t(c))) * 0x100000001b3ULL;
  return hash;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

ClassificationBatch classification_batch(std::vector<int64_t> input_shape, int64_t classes) {
  ClassificationBatch batch{.input_shape = std::move(input_shape), .inputs = {}, .targets = {}};
  Generator inputs(1), targets(2);
  batch.inputs.resize(size_t(element_count(batch.input_shape)));
  for (float& value : batch.inputs) value = inputs.symmetric();
  batch.targets.resize(size_t(batch.input_shape[0]));
  for (int64_t& target : batch.targets) target = targets.below(classes);
  return batch;
}

}  // namespace

ClassificationBatch mlp_batch(const MlpSpec& spec) {
  return classification_batch({spec.batch, spec.inputs}, spec.classes);
}

ClassificationBatch cnn_batch(const CnnSpec& spec) {
  return classification_batch({spec.batch, 1, spec.image_size, spec.image_size}, spec.classes);
}

TokenBatch gpt_batch(const GptSpec& spec) {
  TokenBatch batch;
  Generator tokens(3);
  for (int64_t row = 0; row < spec.batch; ++row) {
    std::vector<int64_t> text(size_t(spec.sequence + 1));
    for (int64_t& token : text) token = tokens.below(spec.vocabulary);
    batch.inputs.insert(batch.inputs.end(), text.begin(), text.end() - 1);
    batch.targets.insert(batch.targets.end(), text.begin() + 1, text.end());
  }
  return batch;
}

std::vector<float> initial_parameter(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t count = element_count(shape);
  if (shape.size() == 1 && ends_with(name, "bias")) return std::vector<float>(size_t(count), 0.0f);
  if (shape.size() == 1 && ends_with(name, "weight")) return std::vector<float>(size_t(count), 1.0f);
  if (shape.size() < 2) throw std::invalid_argument("initial_parameter: no scheme for " + name);
  float bound = 1.0f / std::sqrt(float(count / shape[0]));
  Generator generator(name_seed(name));
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = bound * generator.symmetric();
  return values;
}

}  // namespace ember::compare::training
