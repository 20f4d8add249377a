// bf16 mixed precision against f32 on the CPU: a whole training step
// (forward, cross-entropy, backward, AdamW step, zero_grad) of the MLP
// (batch 256) and the GPT of compare_libtorch/training_spec.h, once in f32
// and once with the forward under AutocastGuard(cpu, bf16) (f32 master
// weights, the logits cast to f32 before the loss, as the Accelerator does).
// Both precisions live in the same process and run in alternating order for
// --rounds rounds; each round times each for at least --min-time seconds. The
// medians over the rounds are printed as steps/s, with the median of the
// rounds' speed ratios bf16 / f32 (> 1: bf16 is faster), at each thread count
// of --threads. Run with OMP_WAIT_POLICY=passive:
//   OMP_WAIT_POLICY=passive build/bench/bench_mixed_precision --threads 1,2
// Results: bench/RESULTS.md, "Issue 6: mixed precision".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/autocast.h"
#include "core/ops/creation.h"
#include "core/ops/loss.h"
#include "core/ops/views.h"
#include "core/parallel.h"
#include "optim/adam.h"
#include "training_models_ember.h"
#include "training_spec.h"

namespace ember::bench {
namespace {

using namespace compare::training;
using Clock = std::chrono::steady_clock;

// One model, its AdamW optimizer and its fixed batch, trained in one precision.
class Trainer {
 public:
  Trainer(std::shared_ptr<nn::Module> model, Tensor inputs, Tensor targets, bool bf16)
      : model_(std::move(model)), inputs_(std::move(inputs)), targets_(std::move(targets)), bf16_(bf16) {
    initialise(*model_);
    AdamWSettings settings;
    optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(),
                                                optim::AdamWOptions{.lr = settings.lr,
                                                                    .betas = {settings.beta1, settings.beta2},
                                                                    .eps = settings.eps,
                                                                    .weight_decay = settings.weight_decay});
  }

  // One training step; returns its loss.
  double step() {
    Tensor logits;
    if (bf16_) {
      AutocastGuard autocast(DeviceType::cpu, DType::bf16);
      logits = (*model_)(inputs_);
    } else {
      logits = (*model_)(inputs_);
    }
    logits = logits.to(DType::f32);
    Tensor loss = cross_entropy(logits.view({-1, logits.size(-1)}), targets_.view({-1}));
    loss.backward();
    optimizer_->step();
    optimizer_->zero_grad();
    return loss.item<double>();
  }

  // Seconds per step over at least `min_time` seconds (and at least one step).
  double time_per_step(double min_time) {
    int64_t steps = 0;
    Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      step();
      ++steps;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_time);
    return elapsed / double(steps);
  }

 private:
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  Tensor inputs_, targets_;
  bool bf16_;
};

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

// A workload makes a fresh trainer in either precision.
struct Workload {
  std::string name;
  std::function<Trainer(bool bf16)> make;
};

std::vector<Workload> workloads() {
  return {
      {"mlp_b256",
       [](bool bf16) {
         MlpSpec spec{.batch = 256};
         ClassificationBatch batch = mlp_batch(spec);
         return Trainer(mlp(spec), from_vector(batch.inputs, shape_of(batch.input_shape)),
                        from_vector(batch.targets, Shape{spec.batch}), bf16);
       }},
      {"gpt",
       [](bool bf16) {
         GptSpec spec;
         TokenBatch batch = gpt_batch(spec);
         return Trainer(std::make_shared<Gpt>(spec), from_vector(batch.inputs, Shape{spec.batch, spec.sequence}),
                        from_vector(batch.targets, Shape{spec.batch, spec.sequence}), bf16);
       }},
  };
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

struct Options {
  std::vector<int> threads{1, 2};
  std::vector<std::string> models{"mlp_b256", "gpt"};
  int rounds = 5;
  double min_time = 1.0;
  int warmup_steps = 3;
};

void run(const Workload& workload, int threads, const Options& options) {
  set_num_threads(threads);
  Trainer f32 = workload.make(false), bf16 = workload.make(true);
  // The first losses agree to bf16 rounding: both train the same model on the same batch.
  double f32_loss = f32.step(), bf16_loss = bf16.step();
  for (int i = 1; i < options.warmup_steps; ++i) f32.step(), bf16.step();
  std::vector<double> f32_times, bf16_times, ratios;
  for (int round = 0; round < options.rounds; ++round) {
    // Alternating order, so neither precision always runs on a warmer (or busier) machine.
    double f32_time, bf16_time;
    if (round % 2 == 0) {
      f32_time = f32.time_per_step(options.min_time);
      bf16_time = bf16.time_per_step(options.min_time);
    } else {
      bf16_time = bf16.time_per_step(options.min_time);
      f32_time = f32.time_per_step(options.min_time);
    }
    f32_times.push_back(f32_time), bf16_times.push_back(bf16_time);
    ratios.push_back(f32_time / bf16_time);
  }
  // The ratio is the median of each round's own ratio: the two halves of a
  // round run seconds apart, so a slow spell on a shared machine (another
  // process on the cores) mostly hits both, where it would skew a ratio of
  // medians taken over different rounds.
  std::printf("%-8d %-10s %12.2f %12.2f %9.2fx   first loss f32 %.4f, bf16 %.4f\n", threads, workload.name.c_str(),
              1 / median(f32_times), 1 / median(bf16_times), median(ratios), f32_loss, bf16_loss);
  std::fflush(stdout);
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  using namespace ember::bench;
  Options options;
  CLI::App app{"bf16 autocast against f32: whole training steps of the MLP and the GPT"};
  app.add_option("--threads", options.threads, "thread counts to run at")->delimiter(',');
  app.add_option("--models", options.models, "workloads: mlp_b256, gpt")->delimiter(',');
  app.add_option("--rounds", options.rounds, "alternating rounds; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--min-time", options.min_time, "seconds each precision runs per round")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", options.warmup_steps, "untimed steps of each before the rounds")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<Workload> selected;
  for (const std::string& name : options.models) {
    auto all = workloads();
    auto found = std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
    if (found == all.end()) {
      std::fprintf(stderr, "bench_mixed_precision: unknown model '%s' (mlp_b256, gpt)\n", name.c_str());
      return 2;
    }
    selected.push_back(*found);
  }
  std::printf("%-8s %-10s %12s %12s %10s   (medians of %d rounds, >= %.2g s each)\n", "threads", "model",
              "f32 step/s", "bf16 step/s", "bf16/f32", options.rounds, options.min_time);
  for (int threads : options.threads)
    for (const Workload& workload : selected) run(workload, threads, options);
  return 0;
}
