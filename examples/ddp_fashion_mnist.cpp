// Data-parallel training of the Fashion-MNIST MLP, written out by hand: the
// distributed version of examples/train_fashion_mnist.cpp. Run it on two
// processes with
//   build/bin/ember launch --nproc-per-node 2 -- build/examples/ddp_fashion_mnist --epochs 2
// (or alone: a process without the launcher's environment is a group of one).
// The three changes against single-process training are marked (1), (2), (3):
// join the job, give each rank its own share of the data, wrap the model.
// Rank 0 prints (every rank holds the same weights), ending with
//   test accuracy: 87.40% (8740/10000), test loss 0.3485, 5.9 s on 2 ranks
// --batch-size is the global batch, split evenly across ranks, so N ranks take
// the same steps as one process and reach its accuracy: on one rank this
// program computes exactly what `train_fashion_mnist --model mlp --epochs 2`
// does (87.43%: same initialisation, same shuffled order), on two the sums
// are rounded in another order. Its ctest runs one epoch on 2 ranks
// (examples/CMakeLists.txt).
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "support/fashion_mnist.h"
#include "support/progress_bar.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

struct Settings {
  int64_t epochs = 10;
  int64_t batch_size = 128;  // global: every rank takes batch_size / world_size of each step's batch
  double lr = 1e-3;
  double weight_decay = 1e-2;
  uint64_t seed = 0;
  std::string backend = "auto";
  std::string data_dir = data::kFashionMnistDirectory;
  double require_accuracy = 0;  // exit 1 when the test accuracy ends below it
};

int run(const Settings& settings) {
  // (1) Join the job. `ember launch` put RANK, WORLD_SIZE and the store's
  // address in the environment; this connects every rank to every other.
  distributed::ProcessGroup& group = distributed::init_process_group({.backend = settings.backend});
  const int rank = group.rank(), world_size = group.size();
  const bool is_rank0 = rank == 0;  // prints for everyone
  EMBER_CHECK(settings.batch_size % world_size == 0,
              "ddp_fashion_mnist: --batch-size {} is not divisible by the {} ranks", settings.batch_size, world_size);
  auto start = std::chrono::steady_clock::now();

  examples::FashionMnist fashion = examples::load_standardized_fashion_mnist(settings.data_dir);
  data::TensorDataset train_set(fashion.train.images, fashion.train.labels);
  data::TensorDataset test_set(fashion.test.images, fashion.test.labels);

  // (2) Each rank reads a different share of every epoch: the sampler builds
  // the same shuffled order on every rank (it depends only on the seed and the
  // epoch, which DataLoader sets at each pass) and gives rank r every
  // world_size-th index from r.
  auto train_sampler = std::make_shared<data::DistributedSampler>(
      train_set.size(), world_size, rank, data::DistributedSamplerOptions{.seed = settings.seed});
  data::DataLoader train_loader(train_set, {.batch_size = settings.batch_size / world_size, .sampler = train_sampler});
  // The test set is split the same way, in order; the counts are summed below.
  auto test_sampler = std::make_shared<data::DistributedSampler>(test_set.size(), world_size, rank,
                                                                 data::DistributedSamplerOptions{.shuffle = false});
  data::DataLoader test_loader(test_set, {.batch_size = 250, .sampler = test_sampler});

  // (3) Wrap the model. DDP copies rank 0's weights to every rank, then
  // during each backward all-reduces the gradients bucket by bucket and
  // divides them by the world size, so every rank steps with the gradient of
  // the whole global batch. The model keeps its own type and parameter names;
  // the optimizer is built on it as usual.
  manual_seed(settings.seed);
  std::shared_ptr<nn::Sequential> model = examples::make_fashion_mnist_mlp();
  distributed::DistributedDataParallel ddp(model, group);
  optim::AdamW optimizer(model->parameters(), {.lr = settings.lr, .weight_decay = settings.weight_decay});
  int64_t total_steps = settings.epochs * train_loader.size();
  optim::CosineWithWarmup scheduler(optimizer, /*num_warmup_steps=*/std::min<int64_t>(100, total_steps / 10),
                                    /*num_training_steps=*/total_steps);
  if (is_rank0)
    std::printf("mlp on Fashion-MNIST, %d ranks (%s): %lld training images, %lld epochs of %lld steps "
                "(global batch %lld = %d x %lld), AdamW lr %g\n",
                world_size, group.backend_name().c_str(), static_cast<long long>(train_set.size()),
                static_cast<long long>(settings.epochs), static_cast<long long>(train_loader.size()),
                static_cast<long long>(settings.batch_size), world_size,
                static_cast<long long>(settings.batch_size / world_size), settings.lr);

  examples::ProgressBar progress({.total_steps = total_steps, .num_epochs = settings.epochs});
  int64_t step = 0;
  double smoothed_loss = 0;
  examples::Evaluation evaluation;
  for (int64_t epoch = 1; epoch <= settings.epochs; ++epoch) {
    for (auto& [inputs, targets] : train_loader) {
      Tensor loss = F::cross_entropy(ddp(inputs), targets);
      optimizer.zero_grad();
      loss.backward();  // returns once the averaged gradients are in .grad
      optimizer.step();
      scheduler.step();
      ++step;
      if (is_rank0) {
        // This rank's loss on its half of the batch: a noisier view of the global one.
        double value = loss.item<double>();
        smoothed_loss = step == 1 ? value : 0.95 * smoothed_loss + 0.05 * value;
        progress.update(step, epoch, {{"loss", smoothed_loss}});
      }
    }
    // Each rank evaluates its share of the test set; summing the counts over
    // ranks gives the whole test set's accuracy on every rank. (With a world
    // size that does not divide 10,000 the sampler's padding counts a few
    // images twice, as in PyTorch.)
    examples::Evaluation mine = examples::evaluate(*model, test_loader);
    Tensor sums = from_vector(std::vector<double>{mine.loss_sum, double(mine.correct), double(mine.total)}, {3});
    group.allreduce(sums)->wait();
    std::vector<double> total = sums.to_vector<double>();
    evaluation = {total[0], int64_t(total[1]), int64_t(total[2])};
    if (is_rank0)
      progress.message(fmt::format("epoch {}/{}: test loss {:.4f}, test accuracy {:.2f}%", epoch, settings.epochs,
                                   evaluation.loss(), 100 * evaluation.accuracy()));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (is_rank0)
    std::printf("test accuracy: %.2f%% (%lld/%lld), test loss %.4f, %.1f s on %d ranks\n",
                100 * evaluation.accuracy(), static_cast<long long>(evaluation.correct),
                static_cast<long long>(evaluation.total), evaluation.loss(), seconds, world_size);
  if (evaluation.accuracy() < settings.require_accuracy) {
    if (is_rank0)
      std::fprintf(stderr, "error: test accuracy %.2f%% is below the required %.2f%%\n", 100 * evaluation.accuracy(),
                   100 * settings.require_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  Settings settings;
  CLI::App app("Train the Fashion-MNIST MLP data-parallel (run it under `ember launch`)");
  app.add_option("--epochs", settings.epochs, "passes over the training set")->check(CLI::Range(1, 1'000'000));
  app.add_option("--batch-size", settings.batch_size, "global batch size, split across ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", settings.lr, "peak AdamW learning rate");
  app.add_option("--weight-decay", settings.weight_decay, "AdamW weight decay");
  app.add_option("--seed", settings.seed, "seed for initialisation and shuffling (the same on every rank)");
  app.add_option("--backend", settings.backend, "auto, shm or gloo")->check(CLI::IsMember({"auto", "shm", "gloo"}));
  app.add_option("--data-dir", settings.data_dir, "directory with the Fashion-MNIST .gz IDX files");
  // CLI::Range(0.0, 1.0) would let "nan" through (every comparison with it is false), and a nan threshold passed
  // every run.
  app.add_option("--require-accuracy", settings.require_accuracy, "exit 1 if the test accuracy ends below this, 0 to 1")
      ->check([](const std::string& text) {
        const double accuracy = std::strtod(text.c_str(), nullptr);
        return accuracy >= 0 && accuracy <= 1 ? std::string() : "'" + text + "' is not an accuracy from 0 to 1";
      });
  CLI11_PARSE(app, argc, argv);
  int exit_code = run(settings);  // DDP, which uses the group, is gone when run returns
  distributed::destroy_process_group();
  return exit_code;
} catch (const ember::Error& error) {
  std::fprintf(stderr, "error: %s\n", error.what());
  return 1;
}
