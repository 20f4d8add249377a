// The soak scenarios behind scripts/soak.sh (not ctests: they run for tens of
// minutes):
//   accelerator_soak <project dir> <seconds> [steps between checkpoints]
//   chaos_soak <project dir> <batches> <batches between checkpoints> <pause ms>
// trains an MLP through the Accelerator (shuffling, two loader workers,
// gradient accumulation, dropout) until `seconds` have passed on process 0,
// saving a checkpoint (automatic naming, total_limit 3) every so many steps,
// and every 50 steps appends one line per process to
// <project dir>/soak_process<r>.csv:
//   seconds,step,resident_kib,open_fds
// At the end it checks that every checkpoint left is complete and loads the
// latest. scripts/plot_soak.py draws the memory curve and says whether
// resident memory and descriptors stayed flat after warm-up.
#include <ember/ember.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "distributed/accelerator/accelerator.h"
#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;
namespace fs = std::filesystem;

int64_t resident_kib() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int64_t open_descriptors() {
  return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator());
}

// The job both scenarios train: an MLP through the Accelerator with
// shuffling, two loader workers, gradient accumulation and dropout.
struct SoakJob {
  Accelerator accelerator;
  data::TensorDataset dataset;
  std::shared_ptr<nn::Sequential> model;
  optim::AdamW optimizer;
  data::DataLoader loader;

  explicit SoakJob(const fs::path& project)
      : accelerator({.gradient_accumulation_steps = 2,
                     .project_dir = project.string(),
                     .automatic_checkpoint_naming = true,
                     .total_limit = 3}),
        dataset(make_dataset()),
        model(make_model()),
        optimizer(model->parameters(), {.lr = 1e-3}),
        loader(dataset, {.batch_size = 32, .shuffle = true, .num_workers = 2, .seed = 5}) {
    accelerator.prepare(model, optimizer, loader);
  }
  void train_on(data::Example& batch) {
    auto& [inputs, targets] = batch;
    auto accumulation = accelerator.accumulate(model);
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    optimizer.step();
    optimizer.zero_grad();
  }

 private:
  static data::TensorDataset make_dataset() {
    Generator generator(4);
    return data::TensorDataset(randn({8192, 128}, {}, &generator),
                               randint(0, 10, {8192}, {.dtype = DType::i64}, &generator));
  }
  static std::shared_ptr<nn::Sequential> make_model() {
    manual_seed(1);
    return std::make_shared<nn::Sequential>(nn::Linear(128, 512), nn::ReLU(), nn::Dropout(0.1), nn::Linear(512, 512),
                                            nn::ReLU(), nn::Linear(512, 10));
  }
};

// One line appended to <project>/chaos_events.log by the main process, in
// one write(2), so that a process killed at any moment leaves whole lines.
void append_event(const fs::path& project, const std::string& line) {
  const int fd = ::open((project / "chaos_events.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  EMBER_CHECK(fd >= 0, "chaos_soak: cannot open {}", (project / "chaos_events.log").string());
  const std::string text = line + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  EMBER_CHECK(written, "chaos_soak: cannot append to {}", (project / "chaos_events.log").string());
}

}  // namespace

// The chaos soak of scripts/soak.sh --chaos: trains `batches` micro-batches
// (resuming from the latest checkpoint when there is one, as a job that
// `ember launch --max-restarts` restarted does), saving every so many, and
// sleeping `pause` ms after each batch so that the script's faults land all
// along the job. The main process logs to <project>/chaos_events.log
//   start <checkpoint or none> <batches done>   when an attempt begins
//   saved <checkpoint> <batches done>           once a save has returned
//   batch <n>                                   after every batch
// from which the script counts steps redone and checkpoints lost. At the end
// every process writes its parameters to <project>/final_<rank>.safetensors,
// to be compared byte for byte with a run without faults or pauses.
EMBER_SCENARIO(chaos_soak) {
  const fs::path project = args.at(0);
  const int64_t batches = std::stoll(args.at(1));
  const int64_t checkpoint_every = std::stoll(args.at(2));
  const auto pause = std::chrono::milliseconds(std::stoll(args.at(3)));
  SoakJob job(project);
  const bool main = job.accelerator.is_main_process();
  const auto done = [&] { return job.loader.state().epoch * job.loader.size() + job.loader.state().batch; };
  std::string resumed = "none";
  if (const auto latest = distributed::checkpoint::latest(project / "checkpoints")) {
    job.accelerator.load_state();
    resumed = latest->filename().string();
  }
  if (main) append_event(project, fmt::format("start {} {}", resumed, done()));
  while (done() < batches) {
    for (auto& batch : job.loader) {
      job.train_on(batch);
      const int64_t trained = done();  // `batch` counts the one in hand (data/dataloader.h)
      if (main) append_event(project, fmt::format("batch {}", trained));
      if (trained % checkpoint_every == 0 && trained < batches && job.accelerator.sync_gradients()) {
        const fs::path saved = job.accelerator.save_state();
        if (main) append_event(project, fmt::format("saved {} {}", saved.filename().string(), trained));
      }
      if (trained >= batches) break;
      std::this_thread::sleep_for(pause);
    }
  }
  save_safetensors(project / fmt::format("final_{}.safetensors", job.accelerator.process_index()),
                   job.model->state_dict());
  std::printf("process %d: trained %lld batches (this attempt began at %s)\n", job.accelerator.process_index(),
              static_cast<long long>(batches), resumed.c_str());
  return 0;
}

EMBER_SCENARIO(accelerator_soak) {
  const fs::path project = args.at(0);
  const double seconds = std::stod(args.at(1));
  const int64_t checkpoint_every = args.size() > 2 ? std::stoll(args.at(2)) : 500;
  SoakJob job(project);
  Accelerator& accelerator = job.accelerator;
  const int rank = accelerator.process_index();

  std::ofstream log(project / fmt::format("soak_process{}.csv", rank));
  log << "seconds,step,resident_kib,open_fds\n";
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  int64_t step = 0, checkpoints = 0;
  bool done = false;
  while (!done) {
    for (auto& batch : job.loader) {
      job.train_on(batch);
      if (++step % 50 == 0) {
        log << fmt::format("{:.2f},{},{},{}\n", elapsed(), step, resident_kib(), open_descriptors()) << std::flush;
        // Process 0's clock decides for everyone, so all stop at the same step.
        Tensor stop = accelerator.broadcast(scalar_tensor(int64_t(elapsed() >= seconds), {.dtype = DType::i64}));
        done = stop.item<int64_t>() != 0;
      }
      if (step % checkpoint_every == 0 && accelerator.sync_gradients()) {
        accelerator.save_state();
        ++checkpoints;
      }
      if (done) break;
    }
  }
  // Every checkpoint left is complete, and the latest loads.
  const fs::path directory = project / "checkpoints";
  int kept = 0;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_directory() && entry.path().filename().string().starts_with("checkpoint_")) {
      distributed::checkpoint::verify_checkpoint(entry.path(), accelerator.num_processes());
      ++kept;
    }
  accelerator.load_state();
  std::printf("process %d: %lld steps in %.0f s, %lld checkpoints saved, %d kept and verified, the latest loaded\n",
              rank, static_cast<long long>(step), elapsed(), static_cast<long long>(checkpoints), kept);
  return kept >= 1 && kept <= 3 ? 0 : 1;
}

}  // namespace ember::test
