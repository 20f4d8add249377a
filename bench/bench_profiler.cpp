// What the profiler costs (core/profiler/README.md, Note [One branch when
// off]): whole training steps (forward, cross-entropy, backward, AdamW step,
// zero_grad) of the MLP (batch 256) and the GPT of
// compare_libtorch/training_spec.h with profiling off and with a
// profiler::Profile recording (shapes included), and a loop of one tiny op
// (an add of two 16-element tensors, where the per-op overhead is all there
// is) off and on. Off and on alternate for --rounds rounds in one process;
// medians of the rounds' times and of each round's on/off ratio are printed.
//   OMP_WAIT_POLICY=passive build/bench/bench_profiler --threads 1
// Results: bench/RESULTS.md, "Issue 21: profiler".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/views.h"
#include "core/parallel.h"
#include "core/profiler/profile.h"
#include "optim/adam.h"
#include "training_models_ember.h"
#include "training_spec.h"

namespace ember::bench {
namespace {

using namespace compare::training;
using Clock = std::chrono::steady_clock;

// Seconds per call of `body` over at least `min_time` seconds.
double time_per_call(const std::function<void()>& body, double min_time, int64_t batch) {
  int64_t calls = 0;
  Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t i = 0; i < batch; ++i) body();
    calls += batch;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_time);
  return elapsed / double(calls);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

struct Options {
  std::vector<int> threads{1};
  std::vector<std::string> workloads{"add_16", "mlp_b256", "gpt"};
  int rounds = 7;
  double min_time = 1.0;
};

// A workload: the call to time, and how many calls per clock read.
struct Workload {
  std::function<void()> call;
  int64_t batch = 1;
};

Shape shape_of(const std::vector<int64_t>& dims) { return Shape(std::span<const int64_t>(dims)); }

Workload training(std::shared_ptr<nn::Module> model, Tensor inputs, Tensor targets) {
  initialise(*model);
  AdamWSettings settings;
  auto optimizer = std::make_shared<optim::AdamW>(
      model->parameters(), optim::AdamWOptions{.lr = settings.lr,
                                               .betas = {settings.beta1, settings.beta2},
                                               .eps = settings.eps,
                                               .weight_decay = settings.weight_decay});
  return {[=] {
    Tensor logits = (*model)(inputs);
    Tensor loss = cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1}));
    loss.backward();
    optimizer->step();
    optimizer->zero_grad();
  }};
}

Workload make(const std::string& name) {
  if (name == "add_16") {
    Tensor a = ones({16}), b = ones({16});
    return {[a, b] { Tensor c = a + b; }, 1000};
  }
  if (name == "mlp_b256") {
    MlpSpec spec{.batch = 256};
    ClassificationBatch batch = mlp_batch(spec);
    return training(mlp(spec), from_vector(batch.inputs, shape_of(batch.input_shape)),
                    from_vector(batch.targets, Shape{spec.batch}));
  }
  EMBER_CHECK(name == "gpt", "bench_profiler: unknown workload '{}' (add_16, mlp_b256, gpt)", name);
  GptSpec spec;
  TokenBatch batch = gpt_batch(spec);
  return training(std::make_shared<Gpt>(spec), from_vector(batch.inputs, Shape{spec.batch, spec.sequence}),
                  from_vector(batch.targets, Shape{spec.batch, spec.sequence}));
}

void run(const std::string& name, int threads, const Options& options) {
  set_num_threads(threads);
  Workload workload = make(name);
  for (int i = 0; i < 3; ++i) workload.call();  // warm the allocator and the primitive caches
  std::vector<double> off, on, ratios;
  size_t events = 0;
  for (int round = 0; round < options.rounds; ++round) {
    auto time_off = [&] { return time_per_call(workload.call, options.min_time, workload.batch); };
    auto time_on = [&] {
      profiler::Profile profile({.record_shapes = true});
      double seconds = time_per_call(workload.call, options.min_time, workload.batch);
      profile.stop();  // collecting the events is not part of the steps
      events = profile.events().size();
      return seconds;
    };
    // Alternating order, so neither always runs on a warmer (or busier) machine.
    double off_time, on_time;
    if (round % 2 == 0) {
      off_time = time_off();
      on_time = time_on();
    } else {
      on_time = time_on();
      off_time = time_off();
    }
    off.push_back(off_time), on.push_back(on_time), ratios.push_back(on_time / off_time);
  }
  std::printf("%-8d %-10s %14.3f %14.3f %9.3fx   %zu events in the last on round\n", threads, name.c_str(),
              median(off) * 1e6, median(on) * 1e6, median(ratios), events);
  std::fflush(stdout);
}

}  // namespace
}  // namespace ember::bench

int main(int argc, char** argv) {
  using namespace ember::bench;
  Options options;
  CLI::App app{"The profiler's cost: training steps and a tiny op, profiling off and on"};
  app.add_option("--threads", options.threads, "thread counts to run at")->delimiter(',');
  app.add_option("--workloads", options.workloads, "add_16, mlp_b256, gpt")->delimiter(',');
  app.add_option("--rounds", options.rounds, "alternating rounds; medians are reported")->check(CLI::PositiveNumber);
  app.add_option("--min-time", options.min_time, "seconds each side runs per round")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  std::printf("%-8s %-10s %14s %14s %10s   (medians of %d rounds, >= %.2g s each)\n", "threads", "workload",
              "off us/call", "on us/call", "on/off", options.rounds, options.min_time);
  for (int threads : options.threads)
    for (const std::string& name : options.workloads) run(name, threads, options);
  return 0;
}
