// A character-level GPT (token and position embeddings, a few nanoGPT
// TransformerBlocks, a final LayerNorm and a linear head) trained on a Project
// Gutenberg text that Debian ships (pg1661.txt, The Adventures of Sherlock
// Holmes, in golang-github-pierrec-lz4-dev's test data). The first 90% of the
// text trains, the last 10% is held out. It trains with AdamW on a cosine
// schedule with warmup and gradient clipping, prints samples as it goes
// (multinomial draws at temperature 0.8 from the 10 likeliest characters:
// --temperature, --top-k) and ends with
//   validation loss: 1.7252 nats/char over 59456 held-out characters, 384.4 s
// (the default run on a 2-core machine whose cores other builds shared,
// load average 5 to 9; 142 s on the same machine when quiet: README.md).
// For scale: the text's unigram entropy is 3.15 nats/char, a bigram model's
// about 2.6. The full run (<= 2.0) is a `slow` ctest; CI runs a short one
// with --require-val-loss (examples/CMakeLists.txt).
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <limits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "nn/nn.h"
#include "optim/optim.h"
#include "support/char_corpus.h"
#include "support/metrics_writer.h"
#include "support/progress_bar.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

constexpr const char* kCorpusPath = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt";

struct Settings {
  std::string corpus = kCorpusPath;
  int64_t steps = 1500;
  int64_t batch_size = 32;
  int64_t block_size = 64;  // context length in characters
  int64_t embed_dim = 128;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  double lr = 3e-3;  // peak; the cosine decays it to 0
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double clip_norm = 1.0;
  int64_t eval_interval = 250;
  int64_t sample_length = 300;
  double temperature = 0.8;  // sampling: logits divided by this
  int64_t top_k = 10;        // sampling: only the k likeliest characters (0: all)
  int threads = 0;  // 0: ember's default (every core)
  uint64_t seed = 0;
  std::string metrics_out;
  double require_val_loss = 0;  // exit 1 when the final validation loss is above it (0: no check)
};

// nanoGPT's GPT without weight tying: [B, T] token ids -> [B, T, vocab] logits.
class CharGpt : public nn::Module {
 public:
  CharGpt(int64_t vocab_size, const Settings& settings) : block_size(settings.block_size) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(vocab_size, settings.embed_dim));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(settings.block_size, settings.embed_dim));
    h = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t layer = 0; layer < settings.num_layers; ++layer) {
      h->push_back(std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions{
          .embed_dim = settings.embed_dim, .num_heads = settings.num_heads, .num_layers = settings.num_layers}));
    }
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(settings.embed_dim));
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(settings.embed_dim, vocab_size,
                                                                      nn::LinearOptions{.bias = false}));
    // nanoGPT's initialisation of the layers outside the blocks: N(0, 0.02).
    for (const Tensor& weight : {wte->weight, wpe->weight, lm_head->weight}) nn::init::normal_(weight, 0.0, 0.02);
  }

  Tensor forward(const Tensor& tokens) override {
    int64_t length = tokens.size(1);
    EMBER_CHECK(length <= block_size, "CharGpt: {} tokens exceed the context of {}", length, block_size);
    Tensor positions = arange(0, length, 1, {.dtype = DType::i64});
    Tensor x = (*wte)(tokens) + (*wpe)(positions);  // [B, T, C] + [T, C]
    for (const auto& block : *h) x = (*block)(x);
    return (*lm_head)((*ln_f)(x));  // [B, T, C] -> [B, T, vocab]
  }

  int64_t block_size;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

// Mean next-character cross-entropy (nats) over [B, T] windows.
Tensor language_model_loss(CharGpt& model, const examples::TokenBatch& batch) {
  Tensor logits = model(batch.inputs);
  int64_t vocab = logits.size(2);
  return F::cross_entropy(logits.reshape({-1, vocab}), batch.targets.reshape({-1}));
}

// The loss over the whole held-out text, in nats per character.
double validation_loss(CharGpt& model, const std::vector<examples::TokenBatch>& batches) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  int64_t count = 0;
  for (const examples::TokenBatch& batch : batches) {
    total += language_model_loss(model, batch).item<double>() * double(batch.targets.numel());
    count += batch.targets.numel();
  }
  model.train();
  return total / double(count);
}

// Continues `prompt` one character at a time: the last position's logits,
// divided by the temperature (below 1 sharpens the distribution, above 1
// flattens it), all but the top_k largest masked out (0 keeps them all), then
// multinomial draws from the softmax.
std::string sample(CharGpt& model, const examples::CharCorpus& corpus, const std::string& prompt, int64_t length,
                   const Settings& settings, Generator& generator) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> tokens = corpus.encode(prompt);
  for (int64_t i = 0; i < length; ++i) {
    auto context_length = std::min<int64_t>(int64_t(tokens.size()), model.block_size);
    std::vector<int64_t> context(tokens.end() - context_length, tokens.end());
    Tensor logits = model(from_vector(context, {1, context_length}));                  // [1, T, vocab]
    Tensor last = logits.select(1, context_length - 1) / settings.temperature;         // [1, vocab]
    if (settings.top_k > 0 && settings.top_k < last.size(-1)) {
      Tensor kth = topk(last, settings.top_k).values.narrow(-1, settings.top_k - 1, 1);  // [1, 1]
      last = masked_fill(last, lt(last, kth), -std::numeric_limits<double>::infinity());
    }
    tokens.push_back(multinomial(softmax(last, -1), 1, false, &generator).item<int64_t>());
  }
  model.train();
  return corpus.decode(std::vector<int64_t>(tokens.begin() + int64_t(prompt.size()), tokens.end()));
}

int run(const Settings& settings) {
  auto start = std::chrono::steady_clock::now();
  auto seconds_since_start = [start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (settings.threads > 0) set_num_threads(settings.threads);
  manual_seed(settings.seed);
  Generator batch_generator(settings.seed + 1), sample_generator(settings.seed + 2);

  examples::CharCorpus corpus = examples::CharCorpus::load(settings.corpus);
  std::vector<examples::TokenBatch> validation = corpus.validation_batches(64, settings.block_size);
  // With no window of block_size + 1 held-out characters the loss would be 0 / 0 (and pass --require-val-loss).
  EMBER_CHECK(!validation.empty(),
              "train_char_gpt: the held-out text ({} characters, the last tenth of --corpus) is shorter than "
              "--block-size {} + 1; use a longer corpus or a smaller --block-size",
              corpus.validation_tokens().size(), settings.block_size);
  // Sherlock Holmes's line break and name, where the corpus has those characters; else its first character.
  auto prompt_for = [&](const std::string& preferred) {
    return corpus.covers(preferred) ? preferred : corpus.decode({corpus.train_tokens().front()});
  };
  auto model = std::make_shared<CharGpt>(corpus.vocab_size(), settings);
  int64_t num_parameters = 0;
  for (const Tensor& parameter : model->parameters()) num_parameters += parameter.numel();
  std::printf("char GPT on %s: %zu training / %zu held-out characters, vocabulary %lld; %lld layers, d_model %lld, "
              "%lld heads, context %lld, %lld parameters; %lld steps of batch %lld, AdamW lr %g, %d threads\n",
              settings.corpus.c_str(), corpus.train_tokens().size(), corpus.validation_tokens().size(),
              static_cast<long long>(corpus.vocab_size()), static_cast<long long>(settings.num_layers),
              static_cast<long long>(settings.embed_dim), static_cast<long long>(settings.num_heads),
              static_cast<long long>(settings.block_size), static_cast<long long>(num_parameters),
              static_cast<long long>(settings.steps), static_cast<long long>(settings.batch_size), settings.lr,
              get_num_threads());

  // As nanoGPT: weight decay on the matrices (linear and embedding weights), none on biases and LayerNorm gains.
  std::vector<Tensor> decayed, not_decayed;
  for (const Tensor& parameter : model->parameters()) {
    (parameter.dim() >= 2 ? decayed : not_decayed).push_back(parameter);
  }
  optim::AdamWOptions adamw{.lr = settings.lr, .betas = {0.9, 0.99}, .weight_decay = settings.weight_decay};
  optim::AdamWOptions adamw_without_decay = adamw;
  adamw_without_decay.weight_decay = 0;
  optim::AdamW optimizer({{decayed, adamw}, {not_decayed, adamw_without_decay}});
  optim::CosineWithWarmup scheduler(optimizer, settings.warmup_steps, settings.steps);
  examples::MetricsWriter metrics(settings.metrics_out);
  examples::ProgressBar progress({.total_steps = settings.steps});
  constexpr int64_t kLogInterval = 25;  // steps per "train" metrics record (their mean loss)
  double smoothed_loss = 0, interval_loss = 0, final_validation_loss = 0;
  for (int64_t step = 1; step <= settings.steps; ++step) {
    examples::TokenBatch batch = corpus.random_train_batch(settings.batch_size, settings.block_size, batch_generator);
    Tensor loss = language_model_loss(*model, batch);
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), settings.clip_norm);
    optimizer.step();
    scheduler.step();

    double value = loss.item<double>();
    smoothed_loss = step == 1 ? value : 0.95 * smoothed_loss + 0.05 * value;
    progress.update(step, "train", {{"loss", smoothed_loss}});
    interval_loss += value;
    if (step % kLogInterval == 0) {
      metrics.write({{"split", "train"}, {"step", step}, {"loss", interval_loss / kLogInterval},
                     {"lr", optimizer.lr(0)}, {"time_s", seconds_since_start()}});
      interval_loss = 0;
    }
    if (step % settings.eval_interval == 0 || step == settings.steps) {
      final_validation_loss = validation_loss(*model, validation);
      metrics.write({{"split", "validation"}, {"step", step}, {"loss", final_validation_loss},
                     {"time_s", seconds_since_start()}});
      std::string text = sample(*model, corpus, prompt_for("\r\n"), 80, settings, sample_generator);
      std::replace(text.begin(), text.end(), '\r', ' ');
      std::replace(text.begin(), text.end(), '\n', ' ');  // one line in the log
      progress.message(fmt::format("step {}: validation loss {:.4f}; sample: {}", step, final_validation_loss, text));
    }
  }
  const std::string prompt = prompt_for("Holmes");
  std::printf("sample:\n%s%s\n", prompt.c_str(),
              sample(*model, corpus, prompt, settings.sample_length, settings, sample_generator).c_str());
  int64_t held_out = 0;
  for (const examples::TokenBatch& batch : validation) held_out += batch.targets.numel();
  std::printf("validation loss: %.4f nats/char over %lld held-out characters, %.1f s\n", final_validation_loss,
              static_cast<long long>(held_out), seconds_since_start());
  if (settings.require_val_loss > 0 && !(final_validation_loss <= settings.require_val_loss)) {  // NaN fails too
    std::fprintf(stderr, "error: validation loss %.4f is above the required %.4f\n", final_validation_loss,
                 settings.require_val_loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  Settings settings;
  CLI::App app("Train a character-level GPT on a Project Gutenberg text");
  app.add_option("--corpus", settings.corpus, "text file to train on");
  app.add_option("--steps", settings.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", settings.batch_size, "windows per step")->check(CLI::PositiveNumber);
  app.add_option("--block-size", settings.block_size, "context length in characters")->check(CLI::PositiveNumber);
  app.add_option("--embed-dim", settings.embed_dim, "model width")->check(CLI::PositiveNumber);
  app.add_option("--layers", settings.num_layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", settings.num_heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--lr", settings.lr, "peak AdamW learning rate");
  app.add_option("--warmup-steps", settings.warmup_steps, "linear warmup steps")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", settings.weight_decay, "AdamW weight decay");
  app.add_option("--clip-norm", settings.clip_norm, "gradient norm clipping threshold");
  app.add_option("--eval-interval", settings.eval_interval, "steps between validation passes")
      ->check(CLI::PositiveNumber);
  app.add_option("--sample-length", settings.sample_length, "characters in the final sample")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", settings.temperature, "sampling temperature (below 1: more conservative)")
      ->check(CLI::PositiveNumber);
  app.add_option("--top-k", settings.top_k, "sample from the k likeliest characters only (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", settings.threads, "CPU threads (default: every core)")->check(CLI::Range(1, 4096));
  app.add_option("--seed", settings.seed, "seed for initialisation, batches and sampling");
  app.add_option("--metrics-out", settings.metrics_out, "write metrics as JSON lines to this file");
  app.add_option("--require-val-loss", settings.require_val_loss,
                 "exit 1 if the final validation loss is above this (nats/char)");
  CLI11_PARSE(app, argc, argv);
  return run(settings);
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
