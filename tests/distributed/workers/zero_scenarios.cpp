// ZeRO scenarios, run by tests/distributed/test_zero.cpp through `ember
// launch`. The equivalence scenario trains, in each process, the same model
// twice on this rank's slice of each global batch: once under
// DistributedDataParallel and once under ShardedDataParallel, and checks
// that parameters and optimizer state agree after every few steps.
// Why they must: ZeRO changes where the sums and the update happen, not
// what they are. The reduce-scatter sums the same gradients as DDP's
// all-reduce (averaged the same way), and AdamW, SGD and the clipping
// coefficient act element by element, so updating each rank's piece of a
// parameter is updating that part of the whole. They agree to f32 rounding,
// not bit for bit: the global norm for clipping is summed shard by shard
// instead of parameter by parameter, and bf16 autocast rounds the same
// products in both but their sums can associate differently in a GEMM.
//   zero_matches_ddp <strategy> <backend> [accumulate] [bf16] [clip] [sgd] [subset] [keep]
//   accelerator_zero_keeps_the_model <strategy> <directory>
//   accelerator_fp16_held_gradients <strategy>
#include <ember/ember.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/zero/memory_estimate.h"
#include "distributed/zero/sharded_data_parallel.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;
using distributed::DistributedDataParallel;
using distributed::ProcessGroup;
using distributed::ResolvedShardingOptions;
using distributed::ShardedDataParallel;
using distributed::ShardingStrategy;

constexpr int64_t kVocab = 11;
constexpr int64_t kWidth = 12;
constexpr int64_t kGlobalBatch = 24;  // divisible by 1, 2, 3 and 4 ranks, and by 2 micro-batches
constexpr int64_t kSteps = 20;

}  // namespace

// A residual MLP block; the wrap policy makes each one a unit.
struct Block : nn::Module {
  explicit Block(int64_t width) {
    up = register_module("up", nn::Linear(width, 2 * width));
    down = register_module("down", nn::Linear(2 * width, width));
  }
  Tensor forward(const Tensor& x) override { return x + (*down)(tanh((*up)(x))); }
  std::string type_name() const override { return "Block"; }
  std::shared_ptr<nn::Linear> up, down;
};

// Embedding and head share one weight (it stays in the root unit); `unused`
// is never called, so no rank gives it a gradient.
struct TiedModel : nn::Module {
  explicit TiedModel(uint64_t seed) {
    manual_seed(seed);
    embed = register_module("embed", nn::Embedding(kVocab, kWidth));
    blocks = register_module("blocks", nn::Sequential(Block(kWidth), Block(kWidth), Block(kWidth)));
    unused = register_module("unused", nn::Linear(kWidth, kWidth));
    head = register_module("head", nn::Linear(kWidth, kVocab));
    head->weight = embed->weight;
  }
  Tensor forward(const Tensor& ids) override {
    if (!skip_middle) return (*head)((*blocks)((*embed)(ids)));
    // blocks.1 left out: a step in which some parameters get no gradient.
    const std::vector<std::shared_ptr<nn::Module>> stages = blocks->children();
    return (*head)((*stages[2])((*stages[0])((*embed)(ids))));
  }
  bool skip_middle = false;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::Linear> unused, head;
};

namespace {

struct Batch {
  Tensor ids;
  Tensor targets;
};

Batch global_batch(int64_t step) {
  Generator generator(5000 + uint64_t(step));
  Tensor ids = randint(0, kVocab, {kGlobalBatch}, {.dtype = DType::i64}, &generator);
  Tensor targets = randint(0, kVocab, {kGlobalBatch}, {.dtype = DType::i64}, &generator);
  return {ids, targets};
}

Batch slice(const Batch& batch, int64_t part, int64_t parts) {
  const int64_t size = batch.ids.size(0) / parts;
  return {batch.ids.narrow(0, part * size, size), batch.targets.narrow(0, part * size, size)};
}

int check(bool ok, int rank, const std::string& what) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

double max_difference(const NamedTensors& a, const NamedTensors& b, std::string& worst_name) {
  double worst = 0;
  for (const auto& entry : a) {
    const std::string& name = entry.first;
    const Tensor& tensor = entry.second;
    auto found = std::find_if(b.begin(), b.end(), [&](const auto& other) { return other.first == name; });
    if (found == b.end() || found->second.shape() != tensor.shape()) {
      worst_name = name + (found == b.end() ? " (missing)" : " (another shape)");
      return INFINITY;
    }
    if (tensor.numel() == 0) continue;
    const double difference = max(abs(tensor.to(DType::f64) - found->second.to(DType::f64))).item<double>();
    if (difference > worst || std::isnan(difference)) {
      worst = difference;
      worst_name = name;
    }
  }
  return worst;
}

bool has(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

}  // namespace

EMBER_SCENARIO(zero_matches_ddp) {
  const ShardingStrategy strategy = *distributed::parse_sharding_strategy(args.at(0));
  ProcessGroup& group = distributed::init_process_group({.backend = args.at(1)});
  const int rank = group.rank(), world = group.size();
  const bool accumulate = has(args, "accumulate"), bf16 = has(args, "bf16"), clip = has(args, "clip");
  const bool sgd = has(args, "sgd");
  // keep: zero_grad(set_to_none = false), and blocks.1 skipped on odd steps, so that its zero
  // gradients must still step it (AdamW's momentum and weight decay), as under DDP.
  const bool keep = has(args, "keep");
  // subset: both optimizers leave blocks.2 out, and ZeRO clips by max_grad_norm, which must
  // measure the optimizer's parameters only, as clipping them without sharding does.
  const bool subset = has(args, "subset");
  // metric: a forward with grad on whose output is dropped, before each
  // step's forward and between its backward and the optimizer step.
  const bool metric = has(args, "metric");
  const double tolerance = bf16 ? 2e-3 : 2e-5;
  int failures = 0;
  {
    // Different seeds per rank: both engines must broadcast rank 0's weights.
    auto reference = std::make_shared<TiedModel>(10 + uint64_t(rank));
    auto model = std::make_shared<TiedModel>(10 + uint64_t(rank));
    DistributedDataParallel ddp(reference, group, {.find_unused_parameters = true});
    ResolvedShardingOptions options;
    options.strategy = strategy;
    options.wrap_module_types = {"Block"};
    if (subset) options.max_grad_norm = 0.05;
    ShardedDataParallel zero(model, group, options);
    auto optimized = [subset](const nn::Module& net) {
      std::vector<Tensor> parameters;
      for (const auto& [name, parameter] : net.named_parameters())
        if (!subset || !name.starts_with("blocks.2.")) parameters.push_back(parameter);
      return parameters;
    };
    failures += check(zero.unit_names() == std::vector<std::string>{"blocks.0", "blocks.1", "blocks.2", ""}, rank,
                      "every Block is a unit, the rest is the root unit");

    std::unique_ptr<optim::Optimizer> reference_optimizer, optimizer;
    if (sgd) {
      reference_optimizer = std::make_unique<optim::SGD>(optimized(*reference), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      optimizer = std::make_unique<optim::SGD>(optimized(*model), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    } else {
      reference_optimizer = std::make_unique<optim::AdamW>(optimized(*reference), optim::AdamWOptions{.lr = 1e-2});
      optimizer = std::make_unique<optim::AdamW>(optimized(*model), optim::AdamWOptions{.lr = 1e-2});
    }
    zero.attach_optimizer(*optimizer);

    const int64_t micro_batches = accumulate ? 2 : 1;
    auto train_step = [&](nn::Module& net, auto no_sync, const Batch& local) {
      if (metric) (void)net(local.ids);
      for (int64_t micro = 0; micro < micro_batches; ++micro) {
        Batch part = slice(local, micro, micro_batches);
        auto loss_of = [&] {
          AutocastGuard autocast(DeviceType::cpu, DType::bf16, bf16);
          return F::cross_entropy(net(part.ids).to(DType::f32), part.targets) / double(micro_batches);
        };
        if (micro + 1 < micro_batches) {
          auto guard = no_sync();
          loss_of().backward();
        } else {
          loss_of().backward();
        }
      }
      if (metric) (void)net(local.ids);
    };
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch local = slice(global_batch(step), rank, world);
      reference->skip_middle = model->skip_middle = keep && step % 2 == 1;
      train_step(*reference, [&] { return ddp.no_sync(); }, local);
      if (clip) optim::clip_grad_norm_(reference->parameters(), 0.5);
      if (subset) optim::clip_grad_norm_(optimized(*reference), 0.05);
      reference_optimizer->step();
      reference_optimizer->zero_grad(!keep);

      train_step(*model, [&] { return zero.no_sync(); }, local);
      if (clip) {
        zero.before_step();
        zero.clip_grad_norm_(0.5);
      }
      optimizer->step();
      optimizer->zero_grad(!keep);
    }
    std::string worst;
    const double parameters = max_difference(zero.full_state_dict(), reference->state_dict(), worst);
    failures += check(parameters <= tolerance, rank,
                      fmt::format("{} vs ddp after {} steps: max |difference| = {:.3g} at {} (tolerance {})",
                                  args.at(0), kSteps, parameters, worst, tolerance));
    const optim::OptimizerStateDict whole = zero.full_optimizer_state_dict();
    const optim::OptimizerStateDict expected = reference_optimizer->state_dict();
    const double state = max_difference(whole.tensors, expected.tensors, worst);
    failures += check(state <= tolerance && whole.tensors.size() == expected.tensors.size(), rank,
                      fmt::format("optimizer state made whole vs ddp's: {} and {} tensors, max |difference| = {:.3g} "
                                  "at {}",
                                  whole.tensors.size(), expected.tensors.size(), state, worst));
    failures += check(whole.meta["state"] == expected.meta["state"], rank,
                      "step counts and the parameters with state agree: " + whole.meta["state"].dump());
    // The whole state loaded back gives each rank exactly its own: no
    // [0]-shaped entries for a parameter whose piece here is empty, which a
    // resumed rank's next sharded checkpoint carried and a running one's did
    // not. Mutation caught: optimizer_pieces keeping the empty pieces.
    const optim::OptimizerStateDict own = optimizer->state_dict();
    zero.load_full_optimizer_state_dict(whole);
    const optim::OptimizerStateDict reloaded = optimizer->state_dict();
    const double reload_difference = max_difference(reloaded.tensors, own.tensors, worst);
    failures += check(reloaded.tensors.size() == own.tensors.size() && reload_difference == 0 &&
                          reloaded.meta["state"] == own.meta["state"],
                      rank,
                      fmt::format("the whole state loaded back is this rank's own: {} and {} tensors, state {} and {}",
                                  reloaded.tensors.size(), own.tensors.size(), reloaded.meta["state"].dump(),
                                  own.meta["state"].dump()));
    failures += check(!model->unused->weight.grad().defined(), rank, "the unused layer has no gradient");
  }
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test

namespace ember::test {

// What one rank holds between steps under `strategy` (args[0]), measured by
// the allocator (live bytes after the second step, before zero_grad, less
// what was live before the model existed), against estimate_memory's
// parameters + gradients + optimizer state. Prints one row of the table
// test_zero.cpp shows.
EMBER_SCENARIO(zero_memory) {
  const ShardingStrategy strategy = *distributed::parse_sharding_strategy(args.at(0));
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank(), world = group.size();
  constexpr int64_t kBlocks = 4, kMemoryWidth = 128;
  int failures = 0;
  {
    const int64_t before = memory_allocated();
    manual_seed(3);
    auto model = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < kBlocks; ++i) model->push_back(std::make_shared<Block>(kMemoryWidth));
    int64_t parameters = 0;
    for (const Tensor& parameter : model->parameters()) parameters += parameter.numel();
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<ShardedDataParallel> zero;
    optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
    if (strategy == ShardingStrategy::ddp) {
      ddp = std::make_unique<DistributedDataParallel>(model, group);
    } else {
      ResolvedShardingOptions options;
      options.strategy = strategy;
      options.wrap_module_types = {"Block"};
      zero = std::make_unique<ShardedDataParallel>(model, group, options);
      zero->attach_optimizer(optimizer);
    }
    Generator generator(9);
    const Tensor inputs = randn({8, kMemoryWidth}, {}, &generator);
    for (int step = 0; step < 2; ++step) {
      optimizer.zero_grad();
      const Tensor out = (*model)(inputs);
      mean(out * out).backward();
      optimizer.step();
    }
    const int64_t measured = memory_allocated() - before - inputs.nbytes();
    const distributed::MemoryEstimate estimate =
        distributed::estimate_memory({.num_params = parameters, .strategy = strategy, .world_size = world});
    const int64_t expected = estimate.parameters + estimate.gradients + estimate.optimizer_state;
    const double ratio = double(measured) / double(expected);
    // strategy, ranks, rank, measured, formula, ratio
    std::printf("memory-row %s %d %d %lld %lld %.3f\n", args.at(0).c_str(), world, rank,
                static_cast<long long>(measured), static_cast<long long>(expected), ratio);
    failures += check(std::abs(ratio - 1) <= 0.10, rank,
                      fmt::format("{} on {} ranks: {} bytes held, the formula says {} (ratio {:.3f})", args.at(0),
                                  world, measured, expected, ratio));
  }
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test

namespace ember::test {

// Three Block units under ZeRO-3, two AdamW steps, with the per-rank trace
// on (EMBER_DDP_TRACE): test_zero.cpp reads what it recorded.
EMBER_SCENARIO(zero_trace) {
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  {
    manual_seed(4);
    auto model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth), Block(kWidth));
    optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
    ResolvedShardingOptions options;
    options.strategy = ShardingStrategy::zero3;
    options.wrap_module_types = {"Block"};
    ShardedDataParallel zero(model, group, options);
    zero.attach_optimizer(optimizer);
    Generator generator(2);
    const Tensor inputs = randn({4, kWidth}, {}, &generator);
    for (int step = 0; step < 2; ++step) {
      const Tensor out = (*model)(inputs);
      mean(out * out).backward();
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  distributed::destroy_process_group();
  return 0;
}

}  // namespace ember::test

namespace ember::test {
namespace {

// An optimizer of one's own that scales each parameter by its own norm: not
// element by element, so ZeRO must refuse it.
class NormScaling final : public optim::OptimizerWithOptions<optim::SGDOptions> {
 public:
  explicit NormScaling(std::vector<Tensor> params) : OptimizerWithOptions("NormScaling") {
    add_param_groups({{std::move(params), {}}});
  }

 private:
  void update() override {}
  void check_options(const optim::SGDOptions&) const override {}
  nlohmann::json group_to_json(size_t) const override { return nlohmann::json::object(); }
  void group_from_json(size_t, const nlohmann::json&) override {}
  std::vector<std::string> required_buffers(size_t) const override { return {}; }
  bool counts_steps() const override { return false; }
};

// Whether `action` throws an ember::Error whose message holds `expected`.
int expect_error(int rank, const std::string& what, const std::string& expected, const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    const bool found = std::string(error.what()).find(expected) != std::string::npos;
    if (!found) std::printf("rank %d: %s: got: %s\n", rank, what.c_str(), error.what());
    return check(found, rank, what);
  }
  return check(false, rank, what + " (no error)");
}

ResolvedShardingOptions options_for(ShardingStrategy strategy) {
  ResolvedShardingOptions options;
  options.strategy = strategy;
  options.wrap_module_types = {"Block"};
  return options;
}

}  // namespace

// What sharding must not change about the model's state as PyTorch users
// see it, on each stage:
// - a tie (head and embedding sharing a weight) is one tensor in the full
//   state dict, so save_model writes it once, as without sharding. Catches:
//   full_state_dict cloning each name alone (the tie written twice);
// - ZeRO-1 leaves a parameter no rank used without a gradient, as DDP's
//   find_unused_parameters does. Catches: the reduced buffer's zero slot
//   handed to it (an optimizer left out of prepare then decayed it).
EMBER_SCENARIO(zero_keeps_ties_and_unused_gradients) {
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank();
  int failures = 0;
  const Tensor ids = randint(0, kVocab, {6}, {.dtype = DType::i64});
  for (ShardingStrategy strategy : {ShardingStrategy::zero1, ShardingStrategy::zero2, ShardingStrategy::zero3}) {
    const std::string name(distributed::to_string(strategy));
    auto model = std::make_shared<TiedModel>(21);
    const size_t whole = nn::without_aliases(model->state_dict()).size();
    ShardedDataParallel zero(model, group, options_for(strategy));
    optim::AdamW optimizer(model->parameters(), {.lr = 0.1});
    zero.attach_optimizer(optimizer);
    const size_t sharded = nn::without_aliases(zero.full_state_dict()).size();
    failures += check(sharded == whole, rank,
                      fmt::format("{}: the full state dict keeps the tie ({} tensors without aliases, {} unsharded)",
                                  name, sharded, whole));
    mean((*model)(ids)).backward();
    if (strategy == ShardingStrategy::zero1)
      failures += check(!model->unused->weight.grad().defined() && model->blocks->parameters().front().grad().defined(),
                        rank, "zero1: the unused layer has no gradient, the used ones have theirs");
    optimizer.step();
  }
  distributed::destroy_process_group();
  return failures;
}

// The order in which units are reduced is fixed at the first forward, from
// the units that forward used. Here rank 1's first forward skips blocks.1,
// so its own order differed from rank 0's, and the three equal-sized Blocks
// reduce-scattered each other's gradients: the parameters after one SGD step
// were wrong on every rank without a word. Every rank now takes rank 0's
// order. Mutation caught (zero1 and zero2): the broadcast of the order in
// after_unit_forward removed -> blocks.*.up.weight off by about 1.
EMBER_SCENARIO(zero_ranks_agree_on_the_reduction_order) {
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank(), world = group.size();
  int failures = 0;
  const Batch batch = global_batch(0);
  auto gradients_of = [&](int part, TiedModel& model) {
    model.skip_middle = part == 1;
    Batch mine = slice(batch, part, world);
    F::cross_entropy(model(mine.ids), mine.targets).backward();
  };
  // The reference: every rank's gradients on one unsharded model, averaged.
  auto reference = std::make_shared<TiedModel>(21);
  for (int part = 0; part < world; ++part) gradients_of(part, *reference);
  optim::SGD reference_sgd(reference->parameters(), {.lr = 1.0});
  for (const Tensor& parameter : reference->parameters())
    if (Tensor grad = parameter.grad(); grad.defined()) div_(grad, Scalar(double(world)));
  reference_sgd.step();
  for (ShardingStrategy strategy : {ShardingStrategy::zero1, ShardingStrategy::zero2}) {
    const std::string name(distributed::to_string(strategy));
    auto model = std::make_shared<TiedModel>(21);
    ShardedDataParallel zero(model, group, options_for(strategy));
    optim::SGD optimizer(model->parameters(), {.lr = 1.0});
    zero.attach_optimizer(optimizer);
    gradients_of(rank, *model);
    optimizer.step();
    std::string worst;
    const double difference = max_difference(zero.full_state_dict(), reference->state_dict(), worst);
    failures += check(difference < 1e-5, rank,
                      fmt::format("{}: one step equals the averaged gradients' (worst {} off by {})", name, worst,
                                  difference));
  }
  distributed::destroy_process_group();
  return failures;
}

// The paths that must be refused, each with an error that says what to do.
EMBER_SCENARIO(zero_errors) {
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank();
  int failures = 0;
  Generator generator(6);
  const Tensor inputs = randn({4, kWidth}, {}, &generator);
  {
    auto model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth));
    ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero3));
    optim::SGD optimizer(model->parameters(), {.lr = 0.1});
    Tensor stranger = zeros({3}).requires_grad_(true);
    optim::SGD foreign(std::vector<Tensor>{stranger}, {.lr = 0.1});
    NormScaling norm_scaling(model->parameters());
    failures += expect_error(rank, "an optimizer that is not element by element", "updates_elementwise",
                             [&] { zero.attach_optimizer(norm_scaling); });
    failures += expect_error(rank, "an optimizer of other tensors", "not a trainable parameter",
                             [&] { zero.attach_optimizer(foreign); });
    zero.attach_optimizer(optimizer);
    failures += expect_error(rank, "a second optimizer", "already attached", [&] {
      optim::SGD second(model->parameters(), {.lr = 0.1});
      zero.attach_optimizer(second);
    });
    {
      auto no_sync = zero.no_sync();
      const Tensor out = (*model)(inputs);
      mean(out * out).backward();
    }
    failures += expect_error(rank, "a step on gradients never reduced", "never reduced", [&] { optimizer.step(); });
    optimizer.zero_grad();
    // p = 0 combined the shards' norms into inf and zeroed every gradient.
    failures += expect_error(rank, "a clipping norm of order 0", "norm_type must be positive (or inf) under sharding, "
                             "got 0", [&] { (void)zero.clip_grad_norm_(1.0, 0.0); });
  }
  {
    // Catches: the reduced shards dropped with no optimizer to take them (a
    // step of the optimizer left out of prepare found no gradient and
    // changed nothing), and a frozen parameter refused as not the model's.
    auto model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth));
    ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero2));
    const Tensor out = (*model)(inputs);
    failures += expect_error(rank, "a backward with no optimizer attached",
                             "has none: pass the optimizer to prepare", [&] { mean(out * out).backward(); });
    auto frozen_model = std::make_shared<nn::Sequential>(Block(kWidth));
    frozen_model->named_parameters().front().second.requires_grad_(false);
    ShardedDataParallel frozen(frozen_model, group, options_for(ShardingStrategy::zero2));
    optim::SGD all(frozen_model->parameters(), {.lr = 0.1});
    failures += expect_error(rank, "an optimizer holding a frozen parameter", "holds a frozen parameter",
                             [&] { frozen.attach_optimizer(all); });
  }
  {
    // A group added after the optimizer was attached holds whole parameters,
    // whose gradients ZeRO-2 drops: it never trained. Catches: before_step
    // without the count of the optimizer's parameters.
    auto model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth));
    ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero2));
    optim::SGD optimizer(model->children()[0]->parameters(), {.lr = 0.1});
    zero.attach_optimizer(optimizer);
    optimizer.add_param_group(model->children()[1]->parameters());
    const Tensor out = (*model)(inputs);
    mean(out * out).backward();
    failures += expect_error(rank, "a group added after attaching", "holds 8 parameters, but 4 were sharded when it "
                             "was attached", [&] { optimizer.step(); });
  }
  {
    auto model = std::make_shared<nn::Sequential>(Block(kWidth));
    optim::SGD optimizer(model->parameters(), {.lr = 0.1});
    {
      ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero2));
      zero.attach_optimizer(optimizer);
    }
    failures += expect_error(rank, "a step after the engine is gone", "is gone", [&] { optimizer.step(); });
  }
  {
    auto model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth));
    ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero3));
    // A unit's forward() called directly runs without its gather.
    failures += expect_error(rank, "a forward that skips the hooks (ZeRO-3)", "released",
                             [&] { (void)model->children()[0]->forward(inputs); });
  }
  {
    // An optimizer with state (stepped once, the same on every rank) is
    // sharded with its state sliced: made whole again it is what it was; and
    // Adagrad, whose constructor makes its state, shards and steps. Catches:
    // the state refused ("already has state (the optimizer has stepped)",
    // which kept Adagrad out of ZeRO altogether) or dropped.
    manual_seed(11);
    auto model = std::make_shared<nn::Sequential>(Block(kWidth));
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    const Tensor out = (*model)(inputs);
    mean(out * out).backward();
    optimizer.step();
    optimizer.zero_grad();
    const optim::OptimizerStateDict before = optimizer.state_dict();
    ShardedDataParallel zero(model, group, options_for(ShardingStrategy::zero1));
    zero.attach_optimizer(optimizer);
    const optim::OptimizerStateDict after = zero.full_optimizer_state_dict();
    std::string worst;
    const double difference = max_difference(after.tensors, before.tensors, worst);
    failures += check(difference == 0 && after.tensors.size() == before.tensors.size(), rank,
                      fmt::format("a stepped optimizer's state, sharded and made whole, is what it was (max "
                                  "|difference| {} at {})",
                                  difference, worst));
    auto adagrad_model = std::make_shared<nn::Sequential>(Block(kWidth));
    optim::Adagrad adagrad(adagrad_model->parameters(), {.lr = 0.1});
    ShardedDataParallel sharded(adagrad_model, group, options_for(ShardingStrategy::zero3));
    sharded.attach_optimizer(adagrad);
    const Tensor adagrad_out = (*adagrad_model)(inputs);
    mean(adagrad_out * adagrad_out).backward();
    adagrad.step();
    failures += check(adagrad.state_dict().meta["state"].size() > 0, rank, "Adagrad steps under zero3");
  }
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test

namespace ember::test {

// Two Block units and a root Linear (5x12 + 5 = 65 elements, padded to 66 on
// 2 ranks) prepared by the Accelerator under args[0] ("ddp", "zero1", "zero2", "zero3"), two
// AdamW steps, with the trace on: test_zero.cpp compares the plan the
// Accelerator printed at start-up with what the trace recorded.
EMBER_SCENARIO(accelerator_plan) {
  {
    Accelerator accelerator({.sharding = {.strategy = args.at(0), .wrap_module_types = std::vector<std::string>{"Block"}}});
    manual_seed(4);
    std::shared_ptr<nn::Module> model = std::make_shared<nn::Sequential>(Block(kWidth), Block(kWidth), nn::Linear(kWidth, 5));
    optim::AdamW optimizer(model->parameters(), {.lr = 1e-3});
    accelerator.prepare(model, optimizer);
    Generator generator(2);
    const Tensor inputs = randn({4, kWidth}, {}, &generator);
    for (int step = 0; step < 2; ++step) {
      const Tensor out = (*model)(inputs);
      accelerator.backward(mean(out * out));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return 0;
}

// A generator and a discriminator, each with its own AdamW, prepared together
// under args[0]; the generator's bias is frozen (left out of its optimizer,
// given to clip_grad_norm_ with the rest). Two steps of each.
EMBER_SCENARIO(accelerator_two_models) {
  int failures = 0;
  {
    Accelerator accelerator({.sharding = {.strategy = args.at(0)}});
    manual_seed(3);
    std::shared_ptr<nn::Module> generator = std::make_shared<nn::Linear>(20, 20);
    std::shared_ptr<nn::Module> discriminator = std::make_shared<nn::Linear>(20, 1);
    generator->named_parameters().back().second.requires_grad_(false);
    std::vector<Tensor> trainable;
    for (const Tensor& parameter : generator->parameters())
      if (parameter.requires_grad()) trainable.push_back(parameter);
    optim::AdamW generator_optimizer(trainable, {.lr = 1e-3});
    optim::AdamW discriminator_optimizer(discriminator->parameters(), {.lr = 1e-3});
    accelerator.prepare(generator, discriminator, generator_optimizer, discriminator_optimizer);
    Generator noise(7 + uint64_t(accelerator.process_index()));
    for (int step = 0; step < 2; ++step) {
      const Tensor fake = (*generator)(randn({4, 20}, {}, &noise));
      accelerator.backward(mean((*discriminator)(fake.detach())));
      discriminator_optimizer.step();
      discriminator_optimizer.zero_grad();
      accelerator.backward(-mean((*discriminator)(fake)));
      const double norm = accelerator.clip_grad_norm_(generator->parameters(), 1.0).item<double>();
      failures += check(std::isfinite(norm) && norm > 0, accelerator.process_index(),
                        fmt::format("generator gradient norm {} is finite and positive", norm));
      generator_optimizer.step();
      generator_optimizer.zero_grad();
      discriminator_optimizer.zero_grad();
    }
  }
  distributed::destroy_process_group();
  return failures;
}

// Two bias-free 1x1 linears a and b with zero weights and an SGD (lr 1) each,
// prepared under args[0] with fp16 loss scaling that grows at every update;
// every rank's gradient is 1 for each weight. a steps every iteration, b
// every second one on the gradients of two: the update at a's second step
// changes the scale while b's engine holds gradients of the old one, which
// must be rescaled with it, as they are without ZeRO. The weights must be
// f32 training's: a = -i, b = -2 floor(i / 2).
EMBER_SCENARIO(accelerator_fp16_held_gradients) {
  int failures = 0;
  {
    Accelerator accelerator({.mixed_precision = "fp16",
                             .scaler = {.init_scale = 1024, .growth_interval = 1},
                             .sharding = {.strategy = args.at(0)}});
    const int rank = accelerator.process_index();
    auto zero_linear = [] {
      auto linear = std::make_shared<nn::Linear>(1, 1, nn::LinearOptions{.bias = false});
      nn::init::zeros_(linear->weight);
      return linear;
    };
    std::shared_ptr<nn::Linear> a = zero_linear(), b = zero_linear();
    std::shared_ptr<nn::Module> a_module = a, b_module = b;
    optim::SGD a_sgd(a->parameters(), {.lr = 1.0}), b_sgd(b->parameters(), {.lr = 1.0});
    accelerator.prepare(a_module, b_module, a_sgd, b_sgd);
    const Tensor x = ones({1, 1});
    for (int iteration = 1; iteration <= 4; ++iteration) {
      accelerator.backward(sum((*a)(x)) + sum((*b)(x)));
      a_sgd.step();
      a_sgd.zero_grad();
      if (iteration % 2 == 0) {
        b_sgd.step();
        b_sgd.zero_grad();
      }
      const float a_weight = accelerator.get_state_dict(*a).front().second.item<float>();
      const float b_weight = accelerator.get_state_dict(*b).front().second.item<float>();
      failures += check(a_weight == -float(iteration), rank,
                        fmt::format("iteration {}: a's weight {} is f32's {}", iteration, a_weight, -iteration));
      failures += check(b_weight == -2.0f * float(iteration / 2), rank,
                        fmt::format("iteration {}: b's weight {} is f32's {}", iteration, b_weight, -2 * (iteration / 2)));
    }
  }
  distributed::destroy_process_group();
  return failures;
}

namespace {

// blocks.0.up's weight is also `extra`'s, a module outside every unit; `empty`
// has no elements and comes first, so that in the root unit's flat buffer it
// starts where embed.weight does; head ties embed's weight.
struct SharedWeights : nn::Module {
  SharedWeights() {
    manual_seed(8);
    empty = register_parameter("empty", zeros({0}));
    embed = register_module("embed", nn::Embedding(kVocab, kWidth));
    blocks = register_module("blocks", nn::Sequential(Block(kWidth), Block(kWidth)));
    extra = register_module("extra", nn::Linear(kWidth, 2 * kWidth));
    extra->weight = std::static_pointer_cast<Block>(blocks->children()[0])->up->weight;
    down = register_module("down", nn::Linear(2 * kWidth, kWidth));
    head = register_module("head", nn::Linear(kWidth, kVocab));
    head->weight = embed->weight;
  }
  Tensor forward(const Tensor& ids) override { return (*head)((*down)(tanh((*extra)((*blocks)((*embed)(ids)))))); }
  Tensor empty;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::Linear> extra, down, head;
};

}  // namespace

// Three ways ZeRO lost or refused a trained model, under args[0]:
//  - a weight shared by a unit (blocks.0) and a module outside every unit
//    (extra) was the unit's, released while `extra` ran: the forward failed
//    ("this tensor's memory is released"); such a weight goes to the root;
//  - a sharded save_state of the model (an empty parameter, a tie) did not
//    load at the same world size: the tie was matched to the empty parameter
//    at the same place ("head.weight has shape [0]");
//  - free_memory destroyed the engine with ZeRO-3's parameters released: the
//    model's weights were gone. They are gathered whole first.
EMBER_SCENARIO(accelerator_zero_keeps_the_model) {
  int failures = 0;
  {
    Accelerator accelerator({.sharding = {.strategy = args.at(0),
                                          .wrap_module_types = std::vector<std::string>{"Block"},
                                          .state_dict_type = "sharded"}});
    const int rank = accelerator.process_index();
    auto model = std::make_shared<SharedWeights>();
    std::shared_ptr<nn::Module> prepared = model;
    optim::AdamW optimizer(model->parameters(), {.lr = 1e-2});
    accelerator.prepare(prepared, optimizer);
    auto train = [&](int64_t step) {
      Batch local = slice(global_batch(step), rank, accelerator.num_processes());
      accelerator.backward(F::cross_entropy((*model)(local.ids), local.targets));
      optimizer.step();
      optimizer.zero_grad();
    };
    for (int64_t step = 0; step < 3; ++step) train(step);
    const std::filesystem::path checkpoint = std::filesystem::path(args.at(1)) / "checkpoint";
    accelerator.save_state(checkpoint);
    const NamedTensors saved = accelerator.get_state_dict(*model);
    train(3);
    accelerator.load_state(checkpoint);
    std::string worst;
    const double resumed = max_difference(accelerator.get_state_dict(*model), saved, worst);
    failures += check(resumed == 0, rank, fmt::format("loaded back exactly: max |difference| {} at {}", resumed, worst));

    const Tensor ids = global_batch(9).ids;
    const Tensor before = (*model)(ids).detach();
    accelerator.free_memory();
    const double kept = max_difference(model->state_dict(), saved, worst);
    failures += check(kept == 0, rank, fmt::format("free_memory kept the weights: max |difference| {} at {}", kept, worst));
    const Tensor after = (*model)(ids);
    failures += check(max(abs(after - before)).item<double>() == 0, rank, "the model computes as before free_memory");
  }
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test
