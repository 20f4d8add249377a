// A character-level text corpus for examples/train_char_gpt.cpp: the file's
// bytes are the tokens (vocabulary = the distinct bytes, sorted), the first 90%
// train and the last 10% are held out, as in nanoGPT's shakespeare_char.
// Training batches are random windows; validation walks the held-out text in
// consecutive windows so its loss is the same number on every run.
// Exercised by the train_char_gpt ctests (examples/CMakeLists.txt).
#pragma once

#include <ember/ember.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::examples {

// Inputs and next-token targets, both i64 [batch, block].
struct TokenBatch {
  Tensor inputs;
  Tensor targets;
};

class CharCorpus {
 public:
  static CharCorpus load(const std::string& path, double train_fraction = 0.9) {
    std::ifstream file(path, std::ios::binary);
    EMBER_CHECK(file.is_open(),
                "CharCorpus: cannot read '{}'; the default corpus comes with Debian's "
                "golang-github-pierrec-lz4-dev (apt-get install golang-github-pierrec-lz4-dev)",
                path);
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    EMBER_CHECK(text.size() >= 1024, "CharCorpus: '{}' holds {} bytes; at least 1024 are needed", path, text.size());
    return CharCorpus(text, train_fraction);
  }

  CharCorpus(std::string_view text, double train_fraction) {
    std::array<bool, 256> seen{};
    for (char c : text) seen[static_cast<unsigned char>(c)] = true;
    for (int byte = 0; byte < 256; ++byte) {
      if (!seen[byte]) continue;
      token_of_[byte] = int64_t(vocabulary_.size());
      vocabulary_.push_back(static_cast<char>(byte));
    }
    std::vector<int64_t> tokens = encode(text);
    auto split = static_cast<std::ptrdiff_t>(double(tokens.size()) * train_fraction);
    train_.assign(tokens.begin(), tokens.begin() + split);
    validation_.assign(tokens.begin() + split, tokens.end());
  }

  int64_t vocab_size() const { return int64_t(vocabulary_.size()); }
  const std::vector<int64_t>& train_tokens() const { return train_; }
  const std::vector<int64_t>& validation_tokens() const { return validation_; }

  // Whether every byte of `text` is in the vocabulary.
  bool covers(std::string_view text) const {
    return std::all_of(text.begin(), text.end(), [&](char c) { return token_of_[static_cast<unsigned char>(c)] >= 0; });
  }

  // Characters outside the vocabulary are an error: the model has no token for them.
  std::vector<int64_t> encode(std::string_view text) const {
    std::vector<int64_t> tokens;
    tokens.reserve(text.size());
    for (char c : text) {
      int64_t token = token_of_[static_cast<unsigned char>(c)];
      EMBER_CHECK(token >= 0, "CharCorpus::encode: byte {} is not in the corpus vocabulary",
                  int(static_cast<unsigned char>(c)));
      tokens.push_back(token);
    }
    return tokens;
  }

  std::string decode(const std::vector<int64_t>& tokens) const {
    std::string text;
    for (int64_t token : tokens) {
      EMBER_CHECK(token >= 0 && token < vocab_size(), "CharCorpus::decode: token {} outside [0, {})", token,
                  vocab_size());
      text.push_back(vocabulary_[size_t(token)]);
    }
    return text;
  }

  // `batch` windows of `block` tokens at random offsets of the training text.
  TokenBatch random_train_batch(int64_t batch, int64_t block, Generator& generator) const {
    auto num_tokens = int64_t(train_.size());
    EMBER_CHECK(num_tokens > block, "CharCorpus: block {} needs more than {} training tokens", block, num_tokens);
    std::vector<int64_t> starts = randint(0, num_tokens - block, {batch}, {.dtype = DType::i64}, &generator)
                                      .to_vector<int64_t>();
    return windows(train_, starts, block);
  }

  // The held-out text cut into consecutive windows of `block` tokens, `batch` windows at a time.
  std::vector<TokenBatch> validation_batches(int64_t batch, int64_t block) const {
    std::vector<TokenBatch> batches;
    std::vector<int64_t> starts;
    for (int64_t start = 0; start + block < int64_t(validation_.size()); start += block) {
      starts.push_back(start);
      if (int64_t(starts.size()) == batch) {
        batches.push_back(windows(validation_, starts, block));
        starts.clear();
      }
    }
    if (!starts.empty()) batches.push_back(windows(validation_, starts, block));
    return batches;
  }

 private:
  static TokenBatch windows(const std::vector<int64_t>& tokens, const std::vector<int64_t>& starts, int64_t block) {
    auto batch = int64_t(starts.size());
    std::vector<int64_t> inputs, targets;
    inputs.reserve(size_t(batch * block));
    targets.reserve(size_t(batch * block));
    for (int64_t start : starts) {
      inputs.insert(inputs.end(), tokens.begin() + start, tokens.begin() + start + block);
      targets.insert(targets.end(), tokens.begin() + start + 1, tokens.begin() + start + block + 1);
    }
    return {from_vector(inputs, {batch, block}), from_vector(targets, {batch, block})};
  }

  std::string vocabulary_;  // token i is the byte vocabulary_[i]
  std::array<int64_t, 256> token_of_ = filled_with_minus_one();
  std::vector<int64_t> train_, validation_;

  static std::array<int64_t, 256> filled_with_minus_one() {
    std::array<int64_t, 256> values{};
    values.fill(-1);
    return values;
  }
};

}  // namespace ember::examples
