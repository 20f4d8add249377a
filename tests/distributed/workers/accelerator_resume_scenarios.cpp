// Checkpoint scenarios of the Accelerator, run by
// tests/distributed/test_accelerator_resume.cpp through `ember launch`:
//   accelerator_resume straight|interrupted|resume <dir> <batches before> <batches in all>
// trains a model with dropout, shuffling, gradient accumulation, AdamW, a
// warm-up schedule and a two-worker loader. `straight` trains every batch and
// writes the final parameters; `interrupted` trains the first part, saves the
// state and kills itself with SIGKILL; `resume` (a new process) loads the
// state and trains the rest. The test compares the two final parameter files
// bit for bit.
//   accelerator_kill_during_save <dir>: saves one checkpoint, then dies
// (SIGKILL) halfway through writing the next; accelerator_load_latest <dir>
// then finds the first one intact.
//   accelerator_load_agreed <dir>: process 1's file of a checkpoint damaged,
// every process refuses load_state.
#include <ember/ember.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "distributed/accelerator/accelerator.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;
namespace fs = std::filesystem;

constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;
constexpr int64_t kExamples = 200;
constexpr int64_t kBatch = 4;
constexpr int kWorkers = 2;
constexpr int kPrefetch = 2;  // DataLoaderOptions' default prefetch_factor

// A TensorDataset that counts the batches it is asked for.
class CountingDataset : public data::TensorDataset {
 public:
  using TensorDataset::TensorDataset;
  data::Example get_batch(const std::vector<int64_t>& indices) const override {
    reads_.fetch_add(1);
    return TensorDataset::get_batch(indices);
  }
  int64_t reads() const { return reads_.load(); }

 private:
  mutable std::atomic<int64_t> reads_{0};
};

CountingDataset make_dataset() {
  Generator generator(17);
  return CountingDataset(randn({kExamples, kFeatures}, {}, &generator),
                         randint(0, kClasses, {kExamples}, {.dtype = DType::i64}, &generator));
}

int check(bool ok, int rank, const std::string& what) {
  std::printf("process %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// Everything a training run holds, built the same way in every mode.
struct Run {
  Accelerator accelerator{{.gradient_accumulation_steps = 2}};
  CountingDataset dataset = make_dataset();
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::LinearWithWarmup> scheduler;
  std::unique_ptr<data::DataLoader> loader;

  Run() {
    manual_seed(5);
    model = std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 32), nn::ReLU(), nn::Dropout(0.2),
                                             nn::Linear(32, kClasses));
    optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    scheduler = std::make_unique<optim::LinearWithWarmup>(*optimizer, 5, 100);
    loader = std::make_unique<data::DataLoader>(
        dataset, data::DataLoaderOptions{.batch_size = kBatch, .shuffle = true, .num_workers = kWorkers, .seed = 3});
    accelerator.prepare(model, *optimizer, *loader, *scheduler);
  }

  // Trains until `count` batches have been handed out in all (counting from
  // where the loader stands), and returns the dataset reads made before the
  // first batch's step.
  int64_t train_until(int64_t done, int64_t count) {
    int64_t reads_at_first = -1;
    while (done < count) {
      for (auto& [inputs, targets] : *loader) {
        if (reads_at_first < 0) reads_at_first = dataset.reads();
        auto step = accelerator.accumulate(model);
        accelerator.backward(F::cross_entropy((*model)(inputs), targets));
        optimizer->step();
        scheduler->step();
        optimizer->zero_grad();
        if (++done == count) break;
      }
    }
    return reads_at_first;
  }

  // Batches handed out so far, from the loader's position.
  int64_t batches_done() const { return loader->state().epoch * loader->size() + loader->state().batch; }
};

}  // namespace

EMBER_SCENARIO(accelerator_resume) {
  const std::string mode = args.at(0);
  const fs::path directory = args.at(1);
  const int64_t before = std::stoll(args.at(2)), total = std::stoll(args.at(3));
  Run run;
  const int rank = run.accelerator.process_index();
  if (mode == "straight") {
    run.train_until(0, total);
  } else if (mode == "interrupted") {
    run.train_until(0, before);
    run.accelerator.save_state(directory / "checkpoint");
    std::printf("process %d: saved after %lld batches, accumulation step %s\n", rank, static_cast<long long>(before),
                run.accelerator.sync_gradients() ? "complete" : "partial");
    std::fflush(stdout);
    std::raise(SIGKILL);
  } else {
    EMBER_CHECK(mode == "resume", "accelerator_resume: unknown mode {}", mode);
    run.accelerator.load_state(directory / "checkpoint");
    const int64_t done = run.batches_done();
    const int64_t reads_at_first = run.train_until(done, total);
    int failures = check(done == before, rank, fmt::format("resumed after {} batches", done));
    // The loader starts at the next unseen batch: before the first step it has
    // read that batch and at most its prefetch window beyond it, none of the
    // epoch's earlier batches.
    failures += check(reads_at_first >= 1 && reads_at_first <= 1 + kWorkers * kPrefetch, rank,
                      fmt::format("{} dataset reads before the first resumed step", reads_at_first));
    if (failures) return failures;
  }
  // Through the accelerator: under ZeRO-3 (EMBER_STRATEGY) the model holds shards.
  save_safetensors(directory / fmt::format("{}_{}.safetensors", mode, rank), run.accelerator.get_state_dict(*run.model));
  return 0;
}

// Note [Resuming at another world size]: `save <dir> <name> <batches>`
// trains that many batches (a step boundary) and saves checkpoint <name>;
// `resume <dir> <name> <batches> <tag>` loads it, whatever world size and
// strategy (EMBER_STRATEGY) saved it, trains that many more batches and
// writes the model to <tag>_<process>.safetensors.
EMBER_SCENARIO(accelerator_reshard) {
  const std::string mode = args.at(0);
  const fs::path directory = args.at(1);
  const fs::path checkpoint = directory / args.at(2);
  const int64_t batches = std::stoll(args.at(3));
  Run run;
  const int rank = run.accelerator.process_index();
  if (mode == "save") {
    run.train_until(0, batches);
    run.accelerator.save_state(checkpoint);
    return 0;
  }
  EMBER_CHECK(mode == "resume", "accelerator_reshard: unknown mode {}", mode);
  run.accelerator.load_state(checkpoint);
  const GeneratorState random = default_generator().state();
  std::printf("rank %d: random state %llu %llu\n", rank, (unsigned long long)random.seed,
              (unsigned long long)random.offset);
  std::fflush(stdout);
  const int64_t done = run.batches_done();
  run.train_until(done, done + batches);
  save_safetensors(directory / fmt::format("{}_{}.safetensors", args.at(4), rank),
                   run.accelerator.get_state_dict(*run.model));
  return check(true, rank, fmt::format("resumed at batch {} of {} processes", done, run.accelerator.num_processes()));
}

namespace {

// A registered object whose state the second save_state asks for while the
// checkpoint is half written; the main process dies right there.
struct DiesOnSecondSave {
  int saves = 0;
  bool main = false;
  nlohmann::json state_dict() {
    if (++saves == 2 && main) std::raise(SIGKILL);
    return {{"saves", saves}};
  }
  void load_state_dict(const nlohmann::json& state) { saves = state.at("saves").get<int>(); }
};

// The same deterministic start as kill_during_save: two synchronised steps.
void two_steps(Run& run) { run.train_until(0, 4); }

}  // namespace

EMBER_SCENARIO(accelerator_kill_during_save) {
  setenv("EMBER_PROJECT_DIR", args.at(0).c_str(), 1);
  setenv("EMBER_AUTOMATIC_CHECKPOINT_NAMING", "true", 1);
  Run run;
  DiesOnSecondSave dies;
  dies.main = run.accelerator.is_main_process();
  run.accelerator.register_for_checkpointing(dies);
  two_steps(run);
  run.accelerator.save_state();
  run.train_until(4, 6);
  run.accelerator.save_state();  // the main process dies inside
  return check(false, run.accelerator.process_index(), "the second save_state returned");
}

EMBER_SCENARIO(accelerator_load_latest) {
  setenv("EMBER_PROJECT_DIR", args.at(0).c_str(), 1);
  setenv("EMBER_AUTOMATIC_CHECKPOINT_NAMING", "true", 1);
  Run expected;
  two_steps(expected);
  Run run;
  DiesOnSecondSave dies;
  run.accelerator.register_for_checkpointing(dies);
  run.accelerator.load_state();
  const int rank = run.accelerator.process_index();
  int failures = check(dies.saves == 1, rank, fmt::format("the registered object was restored (saves = {})", dies.saves));
  failures += check(run.batches_done() == 4, rank, fmt::format("the loader resumes after {} batches", run.batches_done()));
  NamedTensors loaded = run.model->state_dict(), trained = expected.model->state_dict();
  bool same = loaded.size() == trained.size();
  for (size_t i = 0; same && i < loaded.size(); ++i)
    same = max(abs(loaded[i].second - trained[i].second)).item<double>() == 0;
  failures += check(same, rank, "the parameters are those of the first checkpoint");
  return failures;
}

// load_state is agreed by every process: process 1's own file damaged, both
// refuse (process 0 naming process 1), and neither changes anything.
EMBER_SCENARIO(accelerator_load_agreed) {
  Run run;
  run.train_until(0, 4);
  const fs::path saved = run.accelerator.save_state(fs::path(args.at(0)) / "state");
  const int rank = run.accelerator.process_index();
  if (rank == 1) {
    std::fstream file(saved / "process_1.json", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put('#');
  }
  run.accelerator.wait_for_everyone();
  const NamedTensors before = run.model->state_dict();
  std::vector<Tensor> copies;
  for (const auto& [name, tensor] : before) copies.push_back(tensor.clone());
  try {
    run.accelerator.load_state(saved);
    return check(false, rank, "load_state with a damaged process_1.json refused");
  } catch (const Error& error) {
    const std::string expected = rank == 1 ? "process_1.json" : "Accelerator::load_state: process 1 failed";
    int failures = check(std::string(error.what()).find(expected) != std::string::npos, rank,
                         fmt::format("the error names '{}' ({})", expected, error.what()));
    bool same = true;
    for (size_t i = 0; i < copies.size(); ++i) same = same && max(abs(before[i].second - copies[i])).item<double>() == 0;
    return failures + check(same, rank, "the parameters are unchanged");
  }
}

}  // namespace ember::test
