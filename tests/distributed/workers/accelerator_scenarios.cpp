// Accelerator scenarios, run by tests/distributed/test_accelerator.cpp through
// `ember launch` on 1-3 processes: gradient accumulation on N processes equals
// one process on the k * N times larger batch, fp16 overflow handling agreed
// across processes, gather_for_metrics counting each sample once, and the
// collectives and guards (reduce, pad_across_processes, broadcast,
// main_process_first, split_between_processes, uneven and split batches).
#include <ember/ember.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "distributed/accelerator/accelerator.h"
#include "distributed/amp/grad_scaler.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;

constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;

int check(bool ok, int rank, const std::string& what) {
  std::printf("process %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 16), nn::Tanh(), nn::Linear(16, kClasses));
}

// `size` examples that are the same in every process.
data::TensorDataset make_dataset(int64_t size, uint64_t seed = 7) {
  Generator generator(seed);
  return data::TensorDataset(randn({size, kFeatures}, {}, &generator),
                             randint(0, kClasses, {size}, {.dtype = DType::i64}, &generator));
}

// Same shape and values within `tolerance` (any dtypes).
bool same_values(const Tensor& a, const Tensor& b, double tolerance = 0) {
  if (a.shape() != b.shape()) return false;
  return a.numel() == 0 || max(abs(a.to(DType::f64) - b.to(DType::f64))).item<double>() <= tolerance;
}

// `a` read through the accelerator: under ZeRO-3 (EMBER_STRATEGY) the model
// holds shards, and get_state_dict gathers them.
double max_abs_difference(Accelerator& accelerator, nn::Module& a, const nn::Module& b) {
  NamedTensors pa = accelerator.get_state_dict(a), pb = b.state_dict();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max(abs(pa[i].second - pb[i].second)).item<double>());
  return worst;
}

}  // namespace

// args: k (accumulation steps), b (per-process batch). Accumulating k
// batches of b on each of N processes, then stepping, equals one process
// stepping on batches of k * N * b: the loss of each micro-batch is divided by
// k (backward) and DDP averages over the processes, so the applied gradient
// is the mean over the same k * N * b samples. The shards take the inner
// epoch's batches round-robin, so one accumulation window covers exactly the
// reference's next big batch in the same shuffled order.
EMBER_SCENARIO(accelerator_accumulation_matches_large_batch) {
  const int64_t k = std::stoll(args.at(0)), b = std::stoll(args.at(1));
  Accelerator accelerator({.gradient_accumulation_steps = k});
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  const int64_t big = k * world * b, size = 4 * big;
  data::TensorDataset dataset = make_dataset(size);

  auto model = make_mlp(100 + uint64_t(rank));  // prepare() broadcasts process 0's weights
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader loader(dataset, {.batch_size = b, .shuffle = true, .seed = 11});
  optim::StepLR scheduler(optimizer, /*step_size=*/2, /*gamma=*/0.5);
  accelerator.prepare(model, optimizer, loader, scheduler);

  auto reference = make_mlp(100);
  optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::StepLR reference_scheduler(reference_optimizer, 2, 0.5);
  data::DataLoader reference_loader(dataset, {.batch_size = big, .shuffle = true, .seed = 11});

  int failures = 0, syncs = 0, batches = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (auto& [inputs, targets] : loader) {
      auto step = accelerator.accumulate(model);
      accelerator.backward(F::cross_entropy((*model)(inputs), targets));
      optimizer.step();
      scheduler.step();
      optimizer.zero_grad();
      syncs += accelerator.sync_gradients();
      ++batches;
    }
    for (auto& [inputs, targets] : reference_loader) {
      F::cross_entropy((*reference)(inputs), targets).backward();
      reference_optimizer.step();
      reference_scheduler.step();
      reference_optimizer.zero_grad();
    }
  }
  failures += check(batches == 2 * 4 * k && syncs == 2 * 4, rank,
                    fmt::format("{} batches, {} synchronised steps (expected {} and {})", batches, syncs, 8 * k, 8));
  failures += check(scheduler.last_epoch() == 8 && optimizer.lr(0) == reference_optimizer.lr(0), rank,
                    fmt::format("the scheduler stepped {} times (lr {}), as the reference's (lr {})",
                                scheduler.last_epoch(), optimizer.lr(0), reference_optimizer.lr(0)));
  const double difference = max_abs_difference(accelerator, *model, *reference);
  failures += check(difference < 1e-5, rank,
                    fmt::format("max |accelerated - one process on {}-sample batches| = {:.3g}", big, difference));
  return failures;
}

// fp16: at step 3, process `world - 1` alone sees an inf gradient. Every
// process must skip that step (parameters untouched), say so, and halve the
// scale; the steps around it apply.
EMBER_SCENARIO(accelerator_fp16_overflow_skips_everywhere) {
  Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.init_scale = 1024, .growth_interval = 100}});
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  data::TensorDataset dataset = make_dataset(8 * world * 5);
  auto model = make_mlp(3);
  optim::SGD optimizer(model->parameters(), {.lr = 0.05});
  data::DataLoader loader(dataset, {.batch_size = 8});
  accelerator.prepare(model, optimizer, loader);
  int failures = 0, step = 0;
  for (auto& [inputs, targets] : loader) {
    ++step;
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    if (step == 3 && rank == world - 1) loss = loss * std::numeric_limits<double>::infinity();
    accelerator.backward(loss);
    NamedTensors before = accelerator.get_state_dict(*model);
    std::vector<Tensor> saved;
    for (const auto& [name, tensor] : before) saved.push_back(tensor.clone());
    optimizer.step();
    optimizer.zero_grad();
    bool unchanged = true;
    NamedTensors after = accelerator.get_state_dict(*model);
    for (size_t i = 0; i < after.size(); ++i) unchanged = unchanged && same_values(after[i].second, saved[i]);
    const double scale = accelerator.scaler()->get_scale();
    if (step == 3)
      failures += check(accelerator.optimizer_step_was_skipped() && unchanged && scale == 512, rank,
                        fmt::format("step 3 skipped (parameters unchanged: {}), scale {}", unchanged, scale));
    else
      failures += check(!accelerator.optimizer_step_was_skipped() && !unchanged, rank,
                        fmt::format("step {} applied, scale {}", step, scale));
  }
  return failures;
}

// fp16, two models, one backward, each model's gradients clipped by its own
// call, then both steps: every norm is the true (unscaled) one and both
// models move as one f32 process moves them. Under ZeRO the first clip used
// to unscale the second model's optimizer before its engine had published
// its shards: its norm came out times the scale (46341 for 0.7071) and its
// step applied gradients 65536 times too large. Mutation caught (with
// EMBER_STRATEGY=zero2): steps_them always true in unscale_gradients_of.
EMBER_SCENARIO(accelerator_fp16_clip_each_of_two_models) {
  int rank = 0;
  auto run = [&](const std::string& precision, std::vector<double>& norms) {
    Accelerator accelerator({.mixed_precision = precision});
    manual_seed(0);
    auto a = std::make_shared<nn::Linear>(4, 4), b = std::make_shared<nn::Linear>(4, 4);
    optim::SGD a_sgd(a->parameters(), {.lr = 0.1}), b_sgd(b->parameters(), {.lr = 0.1});
    accelerator.prepare(a, a_sgd, b, b_sgd);
    rank = accelerator.process_index();
    Tensor x = full({2, 4}, 0.5);
    accelerator.backward(mean((*a)(x)) + mean((*b)(x)));
    norms.push_back(accelerator.clip_grad_norm_(a->parameters(), 1e9).item<double>());
    norms.push_back(accelerator.clip_grad_norm_(b->parameters(), 1e9).item<double>());
    a_sgd.step();
    b_sgd.step();
    NamedTensors state = accelerator.get_state_dict(*a), b_state = accelerator.get_state_dict(*b);
    state.insert(state.end(), b_state.begin(), b_state.end());
    return state;
  };
  std::vector<double> f32_norms, fp16_norms;
  NamedTensors f32 = run("no", f32_norms), fp16 = run("fp16", fp16_norms);
  int failures = 0;
  for (size_t i = 0; i < 2; ++i)
    failures += check(std::abs(fp16_norms[i] - f32_norms[i]) < 1e-3 * f32_norms[i], rank,
                      fmt::format("model {}'s norm {} (f32: {})", i, fp16_norms[i], f32_norms[i]));
  for (size_t i = 0; i < f32.size(); ++i)
    failures += check(same_values(fp16[i].second, f32[i].second, 1e-3), rank, "parameter " + f32[i].first);
  return failures;
}

// args: dataset size, batch size, "even" or "uneven". gather_for_metrics over
// an evaluation set whose size the processes do not divide returns every
// sample exactly once, in order; with even_batches=false the shards differ in
// length and cover the set without padding.
EMBER_SCENARIO(accelerator_gather_for_metrics_counts_each_sample_once) {
  const int64_t size = std::stoll(args.at(0)), batch = std::stoll(args.at(1));
  const bool even = args.at(2) == "even";
  Accelerator accelerator({.even_batches = even});
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  data::TensorDataset dataset(arange(0, size, 1, {.dtype = DType::i64}), zeros({size}, {.dtype = DType::i64}));
  data::DataLoader loader(dataset, {.batch_size = batch});
  accelerator.prepare(loader);
  int failures = 0;
  if (even) {
    std::vector<int64_t> seen;
    for (auto& [indices, unused] : loader) {
      std::vector<int64_t> gathered = accelerator.gather_for_metrics(indices).to_vector<int64_t>();
      seen.insert(seen.end(), gathered.begin(), gathered.end());
    }
    std::vector<int64_t> expected(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) expected[size_t(i)] = i;
    failures += check(seen == expected, rank,
                      fmt::format("gathered {} samples over {} processes: {}", seen.size(), world, fmt::join(seen, " ")));
  } else {
    int64_t mine = 0, batches = 0;
    for (auto& [indices, unused] : loader) mine += indices.numel(), ++batches;
    Tensor total = accelerator.reduce(scalar_tensor(mine, {.dtype = DType::i64}), "sum");
    const int64_t expected_batches = ((size + batch - 1) / batch - rank + world - 1) / world;
    failures += check(total.item<int64_t>() == size && batches == expected_batches, rank,
                      fmt::format("uneven shards: {} samples in {} batches here, {} in all", mine, batches,
                                  total.item<int64_t>()));
  }
  return failures;
}

// The order of a prepared loader's epoch is the same on every process and
// follows the user's set_epoch, as one process's would, with samplers of
// every kind. Catches, each seen failing on 2 processes: a SubsetRandomSampler
// seeded per process (samples repeated and missing: 0 1 2 3 4 5 6 6), the
// user's sampler->set_epoch(5) replaced by the loader's own epoch after
// prepare (epoch 0's order), and the sharded loader's batch_sampler()->sampler()
// being null (a segmentation fault).
EMBER_SCENARIO(accelerator_sampler_orders) {
  Accelerator accelerator;
  const int rank = accelerator.process_index();
  accelerator.set_seed(1, /*per_rank=*/true);  // each process draws other unseeded seeds
  data::TensorDataset dataset(arange(0, 8, 1, {.dtype = DType::i64}), zeros({8}, {.dtype = DType::i64}));
  // One epoch of batches of 1, gathered: the global order.
  auto epoch_order = [&](data::DataLoader& loader) {
    std::vector<int64_t> order;
    for (auto& [indices, unused] : loader) {
      std::vector<int64_t> gathered = accelerator.gather_for_metrics(indices).to_vector<int64_t>();
      order.insert(order.end(), gathered.begin(), gathered.end());
    }
    return order;
  };
  int failures = 0;
  auto subset = std::make_shared<data::SubsetRandomSampler>(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  data::DataLoader subset_loader(dataset, {.sampler = subset});
  accelerator.prepare(subset_loader);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> order = epoch_order(subset_loader);
    std::sort(order.begin(), order.end());
    failures += check(order == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, rank,
                      fmt::format("SubsetRandomSampler epoch {}: every sample once ({})", epoch, fmt::join(order, " ")));
  }
  auto random = std::make_shared<data::RandomSampler>(8, data::RandomSamplerOptions{.seed = 3});
  data::DataLoader random_loader(dataset, {.sampler = random});
  accelerator.prepare(random_loader);
  auto expected_order = [](int64_t epoch) {
    data::RandomSampler alone(8, {.seed = 3});
    alone.set_epoch(epoch);
    return alone.indices();
  };
  random->set_epoch(5);
  failures += check(epoch_order(random_loader) == expected_order(5), rank, "sampler->set_epoch(5) gives epoch 5's order");
  const std::shared_ptr<data::Sampler>& watched = random_loader.batch_sampler()->sampler();
  failures += check(watched != nullptr, rank, "the prepared loader's batch_sampler()->sampler() is its sampler");
  if (watched) watched->set_epoch(7);
  failures += check(epoch_order(random_loader) == expected_order(7), rank,
                    "batch_sampler()->sampler()->set_epoch(7) gives epoch 7's order");
  return failures;
}

// split_batches: the loader's batch size is the global one; each process
// gets its consecutive share of every global batch.
EMBER_SCENARIO(accelerator_split_batches) {
  Accelerator accelerator({.split_batches = true});
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  const int64_t global = 2 * world, size = 5 * global;
  data::TensorDataset dataset(arange(0, size, 1, {.dtype = DType::i64}), zeros({size}, {.dtype = DType::i64}));
  data::DataLoader loader(dataset, {.batch_size = global});
  accelerator.prepare(loader);
  int failures = 0;
  int64_t batch_index = 0;
  for (auto& [indices, unused] : loader) {
    std::vector<int64_t> expected{batch_index * global + 2 * rank, batch_index * global + 2 * rank + 1};
    failures += check(indices.to_vector<int64_t>() == expected, rank,
                      fmt::format("global batch {}: got {}", batch_index, fmt::join(indices.to_vector<int64_t>(), " ")));
    ++batch_index;
  }
  failures += check(loader.size() == 5 && batch_index == 5, rank, fmt::format("{} batches", batch_index));
  return failures;
}

// reduce, pad_across_processes, broadcast, gather, split_between_processes,
// main_process_first and wait_for_everyone against values computed here.
EMBER_SCENARIO(accelerator_collectives) {
  Accelerator accelerator;
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  int failures = 0;
  Tensor mine = full({3}, double(rank + 1));
  const double sum = world * (world + 1) / 2.0;
  failures += check(same_values(accelerator.reduce(mine, "sum"), full({3}, sum)), rank, "reduce sum");
  failures += check(same_values(accelerator.reduce(mine, "mean"), full({3}, sum / world), 1e-6), rank, "reduce mean");
  failures += check(same_values(accelerator.reduce(mine, "max"), full({3}, double(world))), rank, "reduce max");
  failures += check(same_values(accelerator.reduce(mine, "min"), full({3}, 1.0)), rank, "reduce min");

  // Process r has r + 1 rows; after padding everyone has `world` rows, the extra ones -1.
  Tensor rows = full({rank + 1, 2}, double(rank));
  Tensor padded = accelerator.pad_across_processes(rows, 0, -1);
  Tensor expected = cat({rows, full({world - 1 - rank, 2}, -1.0)}, 0);
  failures += check(padded.shape() == Shape{world, 2} && same_values(padded, expected), rank, "pad_across_processes");
  Tensor first = accelerator.pad_across_processes(rows, 0, -1, /*pad_first=*/true);
  failures += check(same_values(first, cat({full({world - 1 - rank, 2}, -1.0), rows}, 0)), rank, "pad_first");
  Tensor gathered = accelerator.gather(padded);
  failures += check(gathered.shape() == Shape{world * world, 2}, rank, "gather of the padded rows");

  failures += check(same_values(accelerator.broadcast(mine, world - 1), full({3}, double(world))), rank,
                    "broadcast from the last process");
  failures += check(accelerator.gather(scalar_tensor(rank, {.dtype = DType::i64})).to_vector<int64_t>().size() ==
                        size_t(world),
                    rank, "gather of 0-d tensors gives one row per process");

  // 10 items: shares of 4, 3, 3 for three processes; padded to 4 each.
  std::vector<int> items{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int> share = accelerator.split_between_processes(items);
  std::vector<int> all;
  for (int r = 0; r < world; ++r) {
    Tensor size = accelerator.broadcast(scalar_tensor(int64_t(share.size()), {.dtype = DType::i64}), r);
    Tensor values = accelerator.broadcast(
        r == rank ? from_vector(std::vector<int64_t>(share.begin(), share.end())) : zeros({size.item<int64_t>()}, {.dtype = DType::i64}), r);
    for (int64_t v : values.to_vector<int64_t>()) all.push_back(int(v));
  }
  failures += check(all == items, rank, fmt::format("split_between_processes shares: {}", fmt::join(all, " ")));
  // Padding repeats the input's last item, as Accelerate's: on three
  // processes the shares are 0-3, 4 5 6 9, 7 8 9 9. Mutation caught: a
  // share padded with its own last item (4 5 6 6).
  std::vector<int> padded_share = accelerator.split_between_processes(items, /*apply_padding=*/true);
  std::vector<int> expected_padded = share;
  expected_padded.resize(size_t((10 + world - 1) / world), items.back());
  failures += check(padded_share == expected_padded, rank,
                    fmt::format("padded share: {}", fmt::join(padded_share, " ")));

  // main_process_first: process 0 writes a marker; the others must see it.
  std::filesystem::path marker = std::filesystem::temp_directory_path() /
                                 fmt::format("ember-first-{}", std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0");
  {
    auto first = accelerator.main_process_first();
    if (accelerator.is_main_process()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::ofstream(marker) << "done";
    } else {
      failures += check(std::filesystem::exists(marker), rank, "main_process_first: the main process ran first");
    }
  }
  accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) std::filesystem::remove(marker);

  // Trackers write on the main process only.
  const std::filesystem::path project = std::filesystem::temp_directory_path() /
      fmt::format("ember-trackers-{}", std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0");
  {
    Accelerator tracked({.project_dir = project.string(), .log_with = {"jsonl"}});
    tracked.init_trackers("run");
    tracked.log({{"rank", int64_t(rank)}});
    tracked.end_training();  // ends with a barrier: every process has logged
    if (tracked.is_main_process()) {
      std::ifstream file(project / "run" / "metrics.jsonl");
      int lines = 0;
      for (std::string line; std::getline(file, line);) ++lines;
      failures += check(lines == 1, rank, fmt::format("the metrics file has {} record(s)", lines));
      std::filesystem::remove_all(project);
    }
  }

  // Mismatched shapes are an error naming each process's tensor, on every process.
  try {
    accelerator.gather(zeros({rank + 1}));
    failures += check(world == 1, rank, "mismatched gather raised");
  } catch (const Error& error) {
    failures += check(std::string(error.what()).find("process 0: [1] float32") != std::string::npos, rank,
                      std::string("mismatched gather: ") + error.what());
  }
  return failures;
}

}  // namespace ember::test
