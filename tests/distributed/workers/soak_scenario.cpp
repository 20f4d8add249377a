// The soak scenario behind scripts/soak.sh (not a ctest: it runs for tens of
// minutes):
//   accelerator_soak <project dir> <seconds> [steps between checkpoints]
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

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace

EMBER_SCENARIO(accelerator_soak) {
  const fs::path project = args.at(0);
  const double seconds = std::stod(args.at(1));
  const int64_t checkpoint_every = args.size() > 2 ? std::stoll(args.at(2)) : 500;
  Accelerator accelerator({.gradient_accumulation_steps = 2,
                           .project_dir = project.string(),
                           .automatic_checkpoint_naming = true,
                           .total_limit = 3});
  const int rank = accelerator.process_index();
  Generator generator(4);
  data::TensorDataset dataset(randn({8192, 128}, {}, &generator),
                              randint(0, 10, {8192}, {.dtype = DType::i64}, &generator));
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(128, 512), nn::ReLU(), nn::Dropout(0.1),
                                                nn::Linear(512, 512), nn::ReLU(), nn::Linear(512, 10));
  optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
  data::DataLoader loader(dataset, {.batch_size = 32, .shuffle = true, .num_workers = 2, .seed = 5});
  accelerator.prepare(model, optimizer, loader);

  std::ofstream log(project / fmt::format("soak_process{}.csv", rank));
  log << "seconds,step,resident_kib,open_fds\n";
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  int64_t step = 0, checkpoints = 0;
  bool done = false;
  while (!done) {
    for (auto& [inputs, targets] : loader) {
      auto accumulation = accelerator.accumulate(model);
      accelerator.backward(F::cross_entropy((*model)(inputs), targets));
      optimizer.step();
      optimizer.zero_grad();
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
