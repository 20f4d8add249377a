// bf16 mixed precision against f32 on the CPU: a whole training step
// (forward, cross-entropy, backward, AdamW step, zero_grad) of the MLP
// (batch 256) and the GPT of compare_libtorch/training_spec.h, once in f32,
// once with the micro-batches under AutocastGuard(cpu, bf16) (f32 master
// weights, the logits cast to f32 before the loss, as the Accelerator does),
// and once the same with the guard's cast cache off (Note [Autocast cast
// cache] in core/README.md). With --micro-batches k a step accumulates k
// forward/backward passes inside one guard before the optimizer step, the case
// the cache serves: each weight is cast once per step instead of k times.
// All three live in the same process and run in rotating order for --rounds
// rounds; each round times each for at least --min-time seconds. The medians
// over the rounds are printed as steps/s, with the medians of the rounds' speed
// ratios bf16 / f32 and cache on / off (> 1: the first is faster), at each
// thread count of --threads. Run with OMP_WAIT_POLICY=passive:
//   OMP_WAIT_POLICY=passive build/bench/bench_mixed_precision --threads 1,2 [--micro-batches 4]
// Results: bench/RESULTS.md, "Issue 6: mixed precision" and "Issue 22".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
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

enum class Precision { f32, bf16, bf16_uncached };

// One model, its AdamW optimizer and its fixed batch, trained in one precision.
class Trainer {
 public:
  Trainer(std::shared_ptr<nn::Module> model, Tensor inputs, Tensor targets, Precision precision, int micro_batches)
      : model_(std::move(model)),
        inputs_(std::move(inputs)),
        targets_(std::move(targets)),
        precision_(precision),
        micro_batches_(micro_batches) {
    initialise(*model_);
    AdamWSettings settings;
    optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(),
                                                optim::AdamWOptions{.lr = settings.lr,
                                                                    .betas = {settings.beta1, settings.beta2},
                                                                    .eps = settings.eps,
                                                                    .weight_decay = settings.weight_decay});
  }

  // One training step (micro_batches forward/backward passes on the batch); returns the last loss.
  double step() {
    double loss_value = 0;
    {
      std::optional<AutocastGuard> autocast;
      if (precision_ != Precision::f32)
        autocast.emplace(DeviceType::cpu, DType::bf16, true, /*cache_enabled=*/precision_ == Precision::bf16);
      for (int micro_batch = 0; micro_batch < micro_batches_; ++micro_batch) {
        Tensor logits = (*model_)(inputs_).to(DType::f32);
        Tensor loss = cross_entropy(logits.view({-1, logits.size(-1)}), targets_.view({-1}));
        loss.backward();
        loss_value = loss.item<double>();
      }
    }
    optimizer_->step();
    optimizer_->zero_grad();
    return loss_value;
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
  Precision precision_;
  int micro_batches_;
};

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

// A workload makes a fresh trainer in any precision.
struct Workload {
  std::string name;
  std::function<Trainer(Precision precision, int micro_batches)> make;
};

std::vector<Workload> workloads() {
  return {
      {"mlp_b256",
       [](Precision precision, int micro_batches) {
         MlpSpec spec{.batch = 256};
         ClassificationBatch batch = mlp_batch(spec);
         return Trainer(mlp(spec), from_vector(batch.inputs, shape_of(batch.input_shape)),
                        from_vector(batch.targets, Shape{spec.batch}), precision, micro_batches);
       }},
      {"gpt",
       [](Precision precision, int micro_batches) {
         GptSpec spec;
         TokenBatch batch = gpt_batch(spec);
         return Trainer(std::make_shared<Gpt>(spec), from_vector(batch.inputs, Shape{spec.batch, spec.sequence}),
                        from_vector(batch.targets, Shape{spec.batch, spec.sequence}), precision, micro_batches);
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
  int micro_batches = 1;
};

void run(const Workload& workload, int threads, const Options& options) {
  set_num_threads(threads);
  Trainer f32 = workload.make(Precision::f32, options.micro_batches);
  Trainer bf16 = workload.make(Precision::bf16, options.micro_batches);
  Trainer uncached = workload.make(Precision::bf16_uncached, options.micro_batches);
  Trainer* trainers[] = {&f32, &bf16, &uncached};
  // The first losses agree to bf16 rounding (and exactly with and without the cache):
  // all train the same model on the same batch.
  double losses[3];
  for (int k = 0; k < 3; ++k) losses[k] = trainers[k]->step();
  for (int i = 1; i < options.warmup_steps; ++i)
    for (Trainer* trainer : trainers) trainer->step();
  std::vector<double> times[3], bf16_ratios, cache_ratios;
  for (int round = 0; round < options.rounds; ++round) {
    // Rotating order, so no precision always runs on a warmer (or busier) machine.
    double time[3];
    for (int k = 0; k < 3; ++k) {
      const int which = (round + k) % 3;
      time[which] = trainers[which]->time_per_step(options.min_time);
    }
    for (int k = 0; k < 3; ++k) times[k].push_back(time[k]);
    bf16_ratios.push_back(time[0] / time[1]);
    cache_ratios.push_back(time[2] / time[1]);
  }
  // Each ratio is the median of each round's own ratio: the parts of a round
  // run seconds apart, so a slow spell on a shared machine (another process
  // on the cores) mostly hits all of them, where it would skew a ratio of
  // medians taken over different rounds.
  std::printf("%-8d %-10s %12.2f %12.2f %9.2fx %12.2f %9.2fx   first loss f32 %.4f, bf16 %.4f, no cache %.4f\n",
              threads, workload.name.c_str(), 1 / median(times[0]), 1 / median(times[1]), median(bf16_ratios),
              1 / median(times[2]), median(cache_ratios), losses[0], losses[1], losses[2]);
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
  app.add_option("--micro-batches", options.micro_batches,
                 "forward/backward passes per optimizer step, all inside one autocast guard")
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
  std::printf("%-8s %-10s %12s %12s %10s %12s %10s   (%d micro-batch(es) per step; medians of %d rounds, >= %.2g s each)\n",
              "threads", "model", "f32 step/s", "bf16 step/s", "bf16/f32", "no-cache/s", "cache on/off",
              options.micro_batches, options.rounds, options.min_time);
  for (int threads : options.threads)
    for (const Workload& workload : selected) run(workload, threads, options);
  return 0;
}
