// Worker scenarios for tests/distributed/test_faults.cpp: a small training job
// under the Accelerator (2 processes, dropout, shuffling, AdamW, a checkpoint
// every 4 steps under automatic naming) with one fault injected at a chosen
// rank and step, and the jobs around the other faults (a full disk, a NaN
// loss, a job that holds its store's port). Markers ("rank 1: SIGKILL in
// forward at step 6") are printed and flushed just before a fault, so the
// test can time what follows from them.
//
// Every scenario ignores SIGTERM: the launcher's stop sequence would end the
// survivors of a failure before they notice it, and the tests want to see
// each one fail on its own, naming the rank that died or stopped (the grace
// period's SIGKILL still bounds them).
#include <ember/ember.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>

#include "distributed/accelerator/accelerator.h"
#include "distributed/amp/grad_scaler.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;
namespace fs = std::filesystem;
namespace checkpoint = distributed::checkpoint;
using namespace std::chrono_literals;

constexpr int64_t kSteps = 12;
constexpr int64_t kSaveEvery = 4;  // checkpoint_0 after step 4, checkpoint_1 after step 8
constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;
constexpr int64_t kExamples = 64;
constexpr int64_t kBatch = 4;
// 16 MiB of f32: 16 chunks of the shared-memory pipeline, which runs at most
// 4 chunks ahead of the slowest rank, so no rank finishes it alone.
constexpr int64_t kLargeAllreduce = int64_t(1) << 22;
// The other ranks issue their parts this much later than the victim: issued
// together, the whole allreduce could finish (a few ms) before the victim's
// SIGKILL lands, and the survivor would fail one collective later.
constexpr auto kLateIssue = std::chrono::seconds(1);

enum class Fault { none, kill_in_forward, kill_in_allreduce, kill_in_save, stop };

Fault parse_fault(const std::string& name) {
  if (name == "none") return Fault::none;
  if (name == "kill_in_forward") return Fault::kill_in_forward;
  if (name == "kill_in_allreduce") return Fault::kill_in_allreduce;
  if (name == "kill_in_save") return Fault::kill_in_save;
  EMBER_CHECK(name == "stop", "fault_train: unknown fault '{}'", name);
  return Fault::stop;
}

template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::fputs((fmt::format(format, std::forward<Args>(args)...) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int check(bool ok, int rank, const std::string& what) {
  say("rank {}: {}: {}", rank, what, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

void ignore_sigterm() { std::signal(SIGTERM, SIG_IGN); }

// A fault fires once per job: the first attempt leaves this file behind just
// before it, and a restarted attempt that finds it trains on undisturbed.
bool claim_fault(const fs::path& directory) {
  const int fd = open((directory / "fault_injected").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  close(fd);
  return true;
}

void die_here(int rank, const std::string& where, int64_t step) {
  say("rank {}: SIGKILL {} at step {}", rank, where, step);
  std::raise(SIGKILL);
}

// A registered object whose state_dict is asked for in the middle of a save
// (after the main process wrote its models and optimizers), where it can die.
struct SaveTripwire {
  bool armed = false;
  int rank = 0;
  int64_t step = 0;
  nlohmann::json state_dict() {
    if (armed) die_here(rank, "in save_state", step);
    return {{"tripwire", true}};
  }
  void load_state_dict(const nlohmann::json&) {}
};

data::TensorDataset make_dataset() {
  Generator generator(17);
  return data::TensorDataset(randn({kExamples, kFeatures}, {}, &generator),
                             randint(0, kClasses, {kExamples}, {.dtype = DType::i64}, &generator));
}

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 32), nn::ReLU(), nn::Dropout(0.2),
                                          nn::Linear(32, kClasses));
}

// A training job whose checkpoints go to <project>/checkpoints/checkpoint_N.
struct Training {
  Accelerator accelerator;
  data::TensorDataset dataset = make_dataset();
  std::shared_ptr<nn::Sequential> model = make_model();
  optim::AdamW optimizer{model->parameters(), {.lr = 1e-2}};
  data::DataLoader loader{dataset, {.batch_size = kBatch, .shuffle = true, .seed = 3}};
  SaveTripwire tripwire;

  explicit Training(const fs::path& project)
      : accelerator({.project_dir = project.string(), .automatic_checkpoint_naming = true}) {
    accelerator.prepare(model, optimizer, loader);
    accelerator.register_for_checkpointing(tripwire);
    tripwire.rank = rank();
  }
  int rank() const { return accelerator.process_index(); }
  fs::path checkpoints() const { return fs::path(accelerator.options().project_dir) / "checkpoints"; }
  // Optimizer steps taken so far (one per batch), from the loader's position.
  int64_t steps_done() const { return loader.state().epoch * loader.size() + loader.state().batch; }

  // Resumes from the latest checkpoint when there is one, as a restarted job does.
  void resume_if_possible() {
    if (!checkpoint::latest(checkpoints())) return;
    accelerator.load_state();
    say("rank {}: resumed from {} after step {}", rank(), checkpoint::latest(checkpoints())->filename().string(),
        steps_done());
  }

  // The loader's next batch, beginning an epoch when needed. The iterator
  // moves on only here, so that between steps the loader's position (what a
  // checkpoint saves) is just past the batch last trained on.
  data::Example& next_batch() {
    if (started_) ++batch_;
    if (batch_ == loader.end()) batch_ = loader.begin();
    started_ = true;
    return *batch_;
  }
  // One step on the next batch; `before_forward` runs first.
  template <class Hook>
  void step(Hook&& before_forward) {
    auto& [inputs, targets] = next_batch();
    before_forward();
    auto sync = accelerator.accumulate(model);
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    optimizer.step();
    optimizer.zero_grad();
  }
  void step() {
    step([] {});
  }

 private:
  data::DataLoader::Iterator batch_;
  bool started_ = false;
};

// RLIMIT_FSIZE as a full disk: while it lives, a write past `bytes` in any
// file fails with EFBIG (SIGXFSZ, which would kill the process, is ignored),
// through the same error paths as ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EMBER_CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0, "FileSizeLimit: setrlimit failed");
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
};

}  // namespace

// args: directory fault rank step. Trains kSteps steps (resuming from the
// latest checkpoint under directory/project when there is one), saving after
// every kSaveEvery-th step but the last, and writes the final parameters to
// directory/final_<rank>.safetensors. The fault, on `rank` at `step`, once
// per job:
//   kill_in_forward    SIGKILL in the forward, between the model's layers;
//   kill_in_allreduce  SIGKILL right after issuing its part of a 16 MiB
//                      allreduce that every rank issues after that step;
//   kill_in_save       SIGKILL in the middle of the save after that step (a
//                      step that saves; only the main process writes the
//                      registered object, so rank 0);
//   stop               SIGSTOP before that step's forward.
EMBER_SCENARIO(fault_train) {
  const fs::path directory = args.at(0);
  const Fault fault = parse_fault(args.at(1));
  const int fault_rank = std::stoi(args.at(2));
  const int64_t fault_step = std::stoll(args.at(3));
  ignore_sigterm();
  Training run(directory / "project");
  const int rank = run.rank();
  run.resume_if_possible();
  bool armed = false;
  (*run.model)[3]->register_forward_pre_hook([&](nn::ForwardCall&) {
    if (armed) die_here(rank, "in forward", fault_step);
  });
  for (int64_t step = run.steps_done() + 1; step <= kSteps; ++step) {
    const bool here = fault != Fault::none && rank == fault_rank && step == fault_step && claim_fault(directory);
    run.step([&] {
      armed = here && fault == Fault::kill_in_forward;
      if (here && fault == Fault::stop) {
        say("rank {}: SIGSTOP before the forward of step {}", rank, step);
        std::raise(SIGSTOP);
      }
    });
    if (fault == Fault::kill_in_allreduce && step == fault_step) {
      if (rank != fault_rank) std::this_thread::sleep_for(kLateIssue);
      Tensor large = full({kLargeAllreduce}, Scalar(1.0));
      auto work = run.accelerator.process_group()->allreduce(large);
      if (here) die_here(rank, "right after issuing its part of a 16 MiB allreduce", step);
      work->wait();
    }
    if (step % kSaveEvery == 0 && step < kSteps) {
      run.tripwire.armed = here && fault == Fault::kill_in_save;
      run.tripwire.step = step;
      run.accelerator.save_state();
    }
  }
  save_safetensors(directory / fmt::format("final_{}.safetensors", rank), run.model->state_dict());
  say("rank {}: trained {} steps", rank, kSteps);
  return 0;
}

// args: directory. Trains until killed (for at most a minute), saying so
// after the first step: the test kills the launcher meanwhile.
EMBER_SCENARIO(fault_train_until_killed) {
  Training run(fs::path(args.at(0)) / "project");
  run.step();
  say("rank {}: training", run.rank());
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) run.step();
  say("rank {}: still alive a minute after its launcher should have been killed", run.rank());
  return 1;
}

// args: directory full_rank limit_bytes. Saves checkpoint_0, trains on, and
// saves again while `full_rank` cannot write more than limit_bytes to a file.
// Every rank must fail that save with an error; checkpoint_0 must still be
// complete and `latest`; and once there is room again the next save must
// succeed as checkpoint_1 and load.
EMBER_SCENARIO(fault_disk_full) {
  const fs::path directory = args.at(0);
  const int full_rank = std::stoi(args.at(1));
  const rlim_t limit_bytes = std::stoull(args.at(2));
  ignore_sigterm();
  Training run(directory / "project");
  const int rank = run.rank();
  const fs::path first = run.checkpoints() / "checkpoint_0";
  const fs::path second = run.checkpoints() / "checkpoint_1";
  run.step();
  run.step();
  run.accelerator.save_state();
  run.step();
  run.step();
  std::string error;
  {
    std::optional<FileSizeLimit> full;
    if (rank == full_rank) full.emplace(limit_bytes);
    try {
      run.accelerator.save_state();
    } catch (const Error& failure) {
      error = failure.what();
    }
  }
  say("rank {}: the save on a full disk failed with: {}", rank, error);
  int failures = check(!error.empty(), rank, "save_state on a full disk is an error");
  failures += check(checkpoint::latest(run.checkpoints()) == first, rank, "latest still names checkpoint_0");
  failures += check(!fs::exists(second), rank, "no checkpoint_1");
  checkpoint::verify_checkpoint(first, run.accelerator.num_processes());
  say("rank {}: checkpoint_0 verified", rank);
  failures += check(run.accelerator.save_state() == second, rank, "with room again, the next save is checkpoint_1");
  failures += check(checkpoint::latest(run.checkpoints()) == second, rank, "latest names checkpoint_1");
  run.accelerator.load_state();
  failures += check(run.steps_done() == 4, rank, "checkpoint_1 loads, after step 4");
  return failures;
}

// Trains with a loss that is NaN at every step, under fp16 (the launcher's
// --mixed-precision fp16), until the scaler stops it.
EMBER_SCENARIO(fault_nan_loss) {
  ignore_sigterm();
  Training run(fs::path(args.at(0)) / "project");
  const int rank = run.rank();
  EMBER_CHECK(run.accelerator.scaler() != nullptr, "fault_nan_loss: run it with --mixed-precision fp16");
  for (int64_t step = 1; step <= 100; ++step) {
    auto& [inputs, targets] = run.next_batch();
    Tensor loss = F::cross_entropy((*run.model)(inputs), targets) * std::numeric_limits<double>::quiet_NaN();
    run.accelerator.backward(loss);
    try {
      run.optimizer.step();
    } catch (const Error& error) {
      say("rank {}: training stopped at step {} with the scale at {}: {}", rank, step,
          run.accelerator.scaler()->get_scale(), error.what());
      return 2;
    }
    run.optimizer.zero_grad();
  }
  say("rank {}: 100 NaN losses and the training never stopped", rank);
  return 1;
}

// args: go_file. An allreduce, "holding", then waits (polling, at most a
// minute) until the test creates go_file, and allreduces again: the job the
// test tries to disturb meanwhile.
EMBER_SCENARIO(fault_hold_job) {
  distributed::ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank();
  Tensor value = full({1}, Scalar(double(rank + 1)));
  group.allreduce(value)->wait();
  say("rank {}: holding", rank);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!fs::exists(args.at(0)) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  group.allreduce(value)->wait();
  const double expected = 2.0 * group.size() * (group.size() + 1) / 2.0;  // the sum, summed again
  const int failures = check(value.item<double>() == expected, rank, fmt::format("allreduce after the intruder: {}",
                                                                                 value.item<double>()));
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test
