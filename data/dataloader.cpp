// DataLoader: epochs, the iteration that walks one, and the loader state a
// checkpoint saves. Notes [Epoch order], [Worker order and prefetch bound] and
// [Resume mid-epoch] in data/README.md. Tests: tests/data/test_dataloader.cpp.
#include "data/dataloader.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/profiler/profiler.h"
#include "core/random.h"
#include "data/prefetcher.h"

namespace ember::data {

namespace detail {

// What a loader and its iterations share, so that moving the loader, or
// destroying it before an iterator, leaves nothing dangling.
struct LoaderCore {
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<BatchSampler> batch_sampler;
  std::function<Example(const std::vector<Example>&)> collate;
  HookList<BatchHook> batch_hooks;
  HookList<IterationEndHook> end_hooks;
  int num_workers = 0;
  int64_t max_in_flight = 0;
  DataLoaderState state;
  // Whether the next begin() starts exactly at `state`: true at first, after
  // set_state and once an epoch's last batch is out; false once begin() has
  // started `state.epoch`, so that an abandoned epoch is not resumed by accident.
  bool resume_at_state = true;
  // The sampler's count of set_epoch calls after the loader's own last one
  // (at first, the sampler's count then): a higher count at begin() is the
  // user's set_epoch, whatever epoch it named.
  uint64_t applied_sets = 0;
  // The dataset's size when the loader made its own sampler (shuffle, or
  // neither sampler nor batch_sampler given); -1 when the sampler is the user's.
  int64_t sampled_size = -1;
  // With workers: the seed of every batch's generator (Note [Random numbers in workers]).
  uint64_t worker_seed = 0;
  std::weak_ptr<Iteration> active;

  Example produce(const std::vector<int64_t>& indices) const {
    if (!collate) return dataset->get_batch(indices);
    std::vector<Example> examples;
    examples.reserve(indices.size());
    for (int64_t index : indices) examples.push_back(dataset->get(index));
    return collate(examples);
  }

  // Batch `batch` of epoch `epoch` on a worker: its random numbers come from
  // a generator of its own, so they do not depend on which worker made it,
  // or when.
  Example produce_in_worker(int64_t epoch, int64_t batch, const std::vector<int64_t>& indices) const {
    const std::array<uint32_t, 4> block = philox4x32(
        {uint32_t(batch), uint32_t(uint64_t(batch) >> 32), uint32_t(epoch), uint32_t(uint64_t(epoch) >> 32)},
        philox_key(worker_seed));
    Generator generator((uint64_t(block[0]) << 32) | block[1]);
    DefaultGeneratorGuard guard(generator);
    return produce(indices);
  }
};

// One pass over an epoch's batches from `first` on. The workers live exactly
// as long as this object: the last iterator to go (a finished loop, a break,
// an exception) joins them.
class Iteration {
 public:
  Iteration(std::shared_ptr<LoaderCore> core, std::vector<std::vector<int64_t>> batches, int64_t first)
      : core_(std::move(core)), epoch_(core_->state.epoch), batches_(std::move(batches)), next_(first) {
    int64_t end = int64_t(batches_.size());
    // No more workers or slots than the batches left: prefetch_factor is a
    // bound, and a large one must not allocate its ring up front.
    if (core_->num_workers > 0 && next_ < end)
      prefetcher_ = std::make_unique<OrderedPrefetcher>(
          next_, end,
          [this](int64_t batch) { return core_->produce_in_worker(epoch_, batch, batches_[size_t(batch)]); },
          int(std::min(int64_t(core_->num_workers), end - next_)), std::min(core_->max_in_flight, end - next_));
  }

  bool done() const { return done_; }
  Example& current() {
    EMBER_CHECK(!done_, "DataLoader: dereferencing an iterator that is at the end{}", stopped_by());
    return current_;
  }

  // Hands out the next batch, or ends. A batch whose production (or a batch
  // hook) threw ends the iteration; the loader state still names that batch.
  void advance() {
    EMBER_CHECK(!done_, "DataLoader: incrementing an iterator that is at the end{}", stopped_by());
    if (next_ == int64_t(batches_.size())) {
      // An epoch of no batches (drop_last, an empty shard) is over too, as
      // one whose last batch went out: a checkpoint between epochs says so.
      if (batches_.empty() && !cancelled_by_) {
        core_->state = {epoch_ + 1, 0};
        core_->resume_at_state = true;
      }
      return finish();
    }
    try {
      {
        // What the training loop waits here is the profile's data wait (Note [Step summary]).
        profiler::Span wait(profiler::kRecordSteps, profiler::Category::data, "DataLoader.next");
        current_ = prefetcher_ ? prefetcher_->take() : core_->produce(batches_[size_t(next_)]);
        if (wait.active()) wait.args() = {{"batch", next_}, {"epoch", epoch_}, {"prefetched", prefetcher_ != nullptr}};
      }
      if (!core_->batch_hooks.empty()) {
        BatchInfo info{epoch_, next_, int64_t(batches_.size())};
        for (const BatchHook& hook : core_->batch_hooks.snapshot()) hook(current_, info);
      }
    } catch (...) {
      finish();
      throw;
    }
    ++next_;
    if (cancelled_by_) return;
    if (next_ == int64_t(batches_.size())) {
      core_->state = {epoch_ + 1, 0};
      core_->resume_at_state = true;
    } else {
      core_->state = {epoch_, next_};
    }
  }

  // A newer begin() or set_state took over: stop, and stop touching the state.
  void cancel(const char* by) {
    cancelled_by_ = by;
    finish();
  }

 public:
  // Dropped before its end (a break out of the loop, an exception through
  // it): it ends here, and a failing end hook is reported, not thrown.
  ~Iteration() {
    try {
      finish();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "ember DataLoader: an iteration-end hook failed as its iteration was dropped: %s\n",
                   error.what());
    }
  }

 private:
  void finish() {
    if (done_) return;
    done_ = true;
    prefetcher_.reset();
    current_ = Example{};
    for (const IterationEndHook& hook : core_->end_hooks.snapshot()) hook();
  }

  // Why an iterator of a stopped iteration is at its end: a loop over a
  // loader that a nested loop (or set_state) took over ends there.
  std::string stopped_by() const {
    if (!cancelled_by_) return "";
    return fmt::format(": its iteration was stopped by {} on the same loader, which runs one iteration at a time "
                       "(a nested loop over one loader, or set_state inside its loop, ends the outer loop)",
                       cancelled_by_);
  }

  std::shared_ptr<LoaderCore> core_;
  int64_t epoch_;
  std::vector<std::vector<int64_t>> batches_;
  int64_t next_;  // the next batch to hand out
  Example current_;
  bool done_ = false;
  const char* cancelled_by_ = nullptr;  // what stopped the iteration, if anything did
  std::unique_ptr<OrderedPrefetcher> prefetcher_;  // declared last: joined before batches_ goes
};

}  // namespace detail

static_assert(std::input_iterator<DataLoader::Iterator>);

Example& DataLoader::Iterator::operator*() const {
  EMBER_CHECK(iteration_ != nullptr, "DataLoader: dereferencing an end iterator");
  return iteration_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  EMBER_CHECK(iteration_ != nullptr, "DataLoader: incrementing an end iterator");
  iteration_->advance();
  return *this;
}

bool DataLoader::Iterator::at_end() const { return iteration_ == nullptr || iteration_->done(); }

namespace {
std::shared_ptr<BatchSampler> make_batch_sampler(const Dataset& dataset, const DataLoaderOptions& options) {
  if (options.batch_sampler) {
    EMBER_CHECK(options.batch_size == 1 && !options.shuffle && !options.sampler && !options.drop_last,
                "DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler and "
                "drop_last (got batch_size {}, shuffle {}, sampler {}, drop_last {})",
                options.batch_size, options.shuffle, options.sampler != nullptr, options.drop_last);
    return options.batch_sampler;
  }
  EMBER_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be positive, got {}", options.batch_size);
  std::shared_ptr<Sampler> sampler = options.sampler;
  if (sampler) {
    EMBER_CHECK(!options.shuffle, "DataLoader: sampler option is mutually exclusive with shuffle");
  } else if (options.shuffle) {
    sampler = std::make_shared<RandomSampler>(dataset.size(), RandomSamplerOptions{.seed = options.seed});
  } else {
    sampler = std::make_shared<SequentialSampler>(dataset.size());
  }
  return std::make_shared<BatchSampler>(sampler, BatchSamplerOptions{options.batch_size, options.drop_last});
}
// Note [Random numbers in workers]: a loader's worker seed comes from the
// default generator's state when it is made, read without drawing from it:
// the numbers the rest of the program draws do not depend on any loader's
// num_workers, and a loader made again after the same manual_seed gets the
// same seed. (The word 1 keeps it apart from the generator's own stream.)
uint64_t worker_seed_now() {
  const GeneratorState state = default_generator().state();
  const std::array<uint32_t, 4> block =
      philox4x32({uint32_t(state.offset), uint32_t(state.offset >> 32), 1u, 0u}, philox_key(state.seed));
  return (uint64_t(block[0]) << 32) | block[1];
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : core_(std::make_shared<detail::LoaderCore>()) {
  EMBER_CHECK(dataset != nullptr, "DataLoader: dataset is null");
  EMBER_CHECK(options.num_workers >= 0, "DataLoader: num_workers must be non-negative, got {}", options.num_workers);
  EMBER_CHECK(options.prefetch_factor >= 1, "DataLoader: prefetch_factor must be positive, got {}",
              options.prefetch_factor);
  // Both as PyTorch 1.13: a bound on the workers' batches means nothing without workers.
  EMBER_CHECK(options.num_workers > 0 || options.prefetch_factor == 2,
              "DataLoader: prefetch_factor {} bounds the batches that workers prepare; it needs num_workers > 0",
              options.prefetch_factor);
  // The seed is the shuffle's that the loader makes; a sampler of your own takes its own seed.
  EMBER_CHECK(!options.seed || (options.shuffle && !options.sampler && !options.batch_sampler),
              "DataLoader: seed {} seeds the shuffle the loader makes (shuffle = true, no sampler or batch_sampler); "
              "give your sampler the seed instead",
              options.seed.value_or(0));
  core_->batch_sampler = make_batch_sampler(*dataset, options);
  if (!options.sampler && !options.batch_sampler) core_->sampled_size = dataset->size();
  core_->dataset = std::move(dataset);
  core_->collate = std::move(options.collate);
  core_->num_workers = options.num_workers;
  core_->max_in_flight = int64_t(options.num_workers) * options.prefetch_factor;
  core_->worker_seed = worker_seed_now();
  // PyTorch's loader runs whatever epoch its sampler is at: a sampler whose
  // epoch was set before the loader was made (set_epoch(e), then a new loader
  // each epoch; a resumed run's first epoch) starts there.
  if (const std::shared_ptr<Sampler>& sampler = core_->batch_sampler->sampler()) {
    core_->state = {sampler->epoch(), 0};
    core_->applied_sets = sampler->epoch_sets();
  }
}

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : DataLoader(borrow(dataset), std::move(options)) {}

DataLoader::~DataLoader() {
  if (!core_) return;  // moved from
  if (auto active = core_->active.lock()) active->cancel("the loader's destruction");
}

DataLoader::Iterator DataLoader::begin() {
  if (auto active = core_->active.lock()) active->cancel("a newer begin()");
  // The loader's own sampler read the dataset's size when the loader was made.
  EMBER_CHECK(core_->sampled_size < 0 || core_->dataset->size() == core_->sampled_size,
              "DataLoader: the dataset has {} examples now, but the loader's sampler was made for {}; make a new "
              "DataLoader after the dataset changes size",
              core_->dataset->size(), core_->sampled_size);
  if (!core_->resume_at_state) core_->state = {core_->state.epoch + 1, 0};
  adopt_epoch_set_by_user();
  core_->resume_at_state = false;
  core_->batch_sampler->set_epoch(core_->state.epoch);
  if (const std::shared_ptr<Sampler>& sampler = core_->batch_sampler->sampler())
    core_->applied_sets = sampler->epoch_sets();
  std::vector<std::vector<int64_t>> batches = core_->batch_sampler->batches();
  EMBER_CHECK(int64_t(batches.size()) == core_->batch_sampler->size(),
              "DataLoader: the batch sampler made {} batches but its size() says {}", batches.size(),
              core_->batch_sampler->size());
  // set_state could only check against the epoch the sampler was at then; a
  // batch sampler's epochs may differ in length.
  EMBER_CHECK(core_->state.batch <= int64_t(batches.size()),
              "DataLoader: set_state asked to resume epoch {} at batch {}, but that epoch has {} batches",
              core_->state.epoch, core_->state.batch, batches.size());
  auto iteration = std::make_shared<detail::Iteration>(core_, std::move(batches), core_->state.batch);
  core_->active = iteration;
  iteration->advance();
  return Iterator(std::move(iteration));
}

int64_t DataLoader::size() const { return core_->batch_sampler->size(); }

DataLoaderState DataLoader::state() const { return core_->state; }

uint64_t DataLoader::worker_seed() const { return core_->worker_seed; }

// Workers read the seed as they make batches: a running iteration stops
// first, as set_state stops it (load_state calls both), so that none of its
// batches mixes the two seeds.
void DataLoader::set_worker_seed(uint64_t seed) {
  if (auto active = core_->active.lock()) active->cancel("set_worker_seed()");
  core_->worker_seed = seed;
}

// PyTorch's habit, sampler->set_epoch(epoch) before each epoch, picks the epoch this
// begin() runs; the loader used to overwrite it with its own count, and the run
// silently got another epoch's order (epoch 0's, again, after a resume). A batch
// sampler of your own has no sampler() to watch and no epoch to read: the loader's
// count drives it, as Accelerate's iteration count drives a prepared loader's, and
// its epoch is chosen through set_state (Note [Epoch order]).
void DataLoader::adopt_epoch_set_by_user() {
  const std::shared_ptr<Sampler>& sampler = core_->batch_sampler->sampler();
  if (!sampler || sampler->epoch_sets() == core_->applied_sets) return;
  const int64_t wanted = sampler->epoch();
  if (wanted == core_->state.epoch) return;
  EMBER_CHECK(core_->state.batch == 0,
              "DataLoader: the sampler's epoch was set to {}, but set_state asked to resume epoch {} at batch {}; "
              "set one of them",
              wanted, core_->state.epoch, core_->state.batch);
  core_->state = {wanted, 0};
}

void DataLoader::set_state(DataLoaderState state) {
  int64_t batches = size();
  EMBER_CHECK(state.epoch >= 0 && state.batch >= 0 && state.batch <= batches,
              "DataLoader::set_state: epoch {} batch {} is not a position in an epoch of {} batches", state.epoch,
              state.batch, batches);
  if (auto active = core_->active.lock()) active->cancel("set_state()");
  core_->state = state.batch == batches ? DataLoaderState{state.epoch + 1, 0} : state;
  core_->resume_at_state = true;
}

const Dataset& DataLoader::dataset() const { return *core_->dataset; }

const std::shared_ptr<BatchSampler>& DataLoader::batch_sampler() const { return core_->batch_sampler; }

void DataLoader::set_batch_sampler(std::shared_ptr<BatchSampler> batch_sampler) {
  EMBER_CHECK(batch_sampler != nullptr, "DataLoader::set_batch_sampler: the batch sampler is null");
  EMBER_CHECK(core_->state.batch == 0,
              "DataLoader::set_batch_sampler: the loader is at batch {} of epoch {}; the batch sampler can only be "
              "replaced between epochs",
              core_->state.batch, core_->state.epoch);
  if (auto active = core_->active.lock()) active->cancel("set_batch_sampler()");
  // The size check is the loader's own sampler's; a batch sampler that draws
  // from another sampler (not the Accelerator's shard of the same one) is
  // sized by its maker.
  if (batch_sampler->sampler() != core_->batch_sampler->sampler()) {
    core_->sampled_size = -1;
    if (batch_sampler->sampler()) core_->applied_sets = batch_sampler->sampler()->epoch_sets();
  }
  core_->batch_sampler = std::move(batch_sampler);
}

HookId DataLoader::register_batch_hook(BatchHook hook) {
  EMBER_CHECK(hook != nullptr, "DataLoader::register_batch_hook: the hook is empty");
  return core_->batch_hooks.add(std::move(hook));
}

HookId DataLoader::register_iteration_end_hook(IterationEndHook hook) {
  EMBER_CHECK(hook != nullptr, "DataLoader::register_iteration_end_hook: the hook is empty");
  return core_->end_hooks.add(std::move(hook));
}

void DataLoader::remove_hook(HookId id) {
  EMBER_CHECK(core_->batch_hooks.remove(id) || core_->end_hooks.remove(id),
              "DataLoader::remove_hook: no hook with id {} (already removed?)", id);
}

}  // namespace ember::data
