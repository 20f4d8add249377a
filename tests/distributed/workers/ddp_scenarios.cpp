// DistributedDataParallel scenarios, run by tests/distributed/test_ddp.cpp
// through `ember launch`. The equivalence scenarios train a DDP replica on
// this rank's slice of each global batch and, in the same process, a plain
// reference model on the whole global batch; the two must end equal.
// Why they must: the loss is a mean, so the global batch's gradient is the
// mean of the ranks' slice gradients (equal slices), which is exactly what
// DDP's sum-then-divide all-reduce leaves on every rank.
// args[0] (optional): the backend ("auto", "gloo", "shm").
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "distributed/zero/sharded_data_parallel.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;
using distributed::DDPOptions;
using distributed::DistributedDataParallel;
using distributed::ProcessGroup;

constexpr int64_t kFeatures = 8;
constexpr int64_t kClasses = 4;
constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4 ranks
constexpr int64_t kSteps = 20;
constexpr double kTolerance = 1e-5;

ProcessGroup& init(const std::vector<std::string>& args) {
  return distributed::init_process_group({.backend = args.empty() ? "auto" : args[0]});
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 16), nn::Tanh(), nn::Linear(16, 16), nn::Tanh(),
                                          nn::Linear(16, kClasses));
}

struct Batch {
  Tensor inputs;
  Tensor targets;
};

// Step `step`'s global batch: the same on every rank and in the reference.
Batch global_batch(int64_t step, int64_t size = kGlobalBatch, int64_t features = kFeatures) {
  Generator generator(1000 + uint64_t(step));
  Tensor inputs = randn({size, features}, {}, &generator);
  Tensor targets = randint(0, kClasses, {size}, {.dtype = DType::i64}, &generator);
  return {inputs, targets};
}

// Part `part` of `parts` equal consecutive slices.
Batch slice(const Batch& batch, int64_t part, int64_t parts) {
  int64_t size = batch.inputs.size(0) / parts;
  return {batch.inputs.narrow(0, part * size, size), batch.targets.narrow(0, part * size, size)};
}

double max_abs_difference(const nn::Module& a, const nn::Module& b) {
  NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  EMBER_CHECK(pa.size() == pb.size(), "the models have {} and {} parameters", pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    EMBER_CHECK(pa[i].first == pb[i].first, "parameter {} is \"{}\" in one model and \"{}\" in the other", i,
                pa[i].first, pb[i].first);
    worst = std::max(worst, max(abs(pa[i].second - pb[i].second)).item<double>());
  }
  return worst;
}

// One SGD step of `model` on `batch`'s mean cross-entropy (DDP's hooks, if
// installed on the model, all-reduce during backward).
void sgd_step(nn::Module& model, optim::SGD& optimizer, const Batch& batch) {
  Tensor loss = F::cross_entropy(model(batch.inputs), batch.targets);
  optimizer.zero_grad();
  loss.backward();
  optimizer.step();
}

int check(bool ok, int rank, const std::string& what) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// Rank 0's copy of `tensor`, on every rank.
Tensor rank0_copy(ProcessGroup& group, const Tensor& tensor) {
  Tensor copy = tensor.clone();
  group.broadcast(copy, 0)->wait();
  return copy;
}

int check_matches_reference(const nn::Module& model, const nn::Module& reference, int rank) {
  double difference = max_abs_difference(model, reference);
  return check(difference <= kTolerance, rank,
               fmt::format("after {} steps max |ddp - single process| = {:.3g} (tolerance {})", kSteps, difference,
                           kTolerance));
}

// A model with a layer its forward never uses, registered between two used ones.
struct WithUnused : nn::Module {
  explicit WithUnused(uint64_t seed) {
    manual_seed(seed);
    first = register_module("first", nn::Linear(kFeatures, 16));
    unused = register_module("unused", nn::Linear(16, 16));
    last = register_module("last", nn::Linear(16, kClasses));
  }
  Tensor forward(const Tensor& x) override { return last->forward(tanh(first->forward(x))); }
  std::shared_ptr<nn::Linear> first, unused, last;
};

// Two buckets with WithUnused: {last.*, unused.*} and {first.*}.
constexpr double kSmallBucketsMb = 0.0005;

// kSteps SGD steps (learning rate `lr`, momentum 0.9) of `model`, wrapped in
// DDP by the caller, on this rank's slice of each global batch, and of
// `reference` on the whole batch; the number of checks that failed.
int train_beside_reference(nn::Module& model, nn::Module& reference, int rank, int world, double lr) {
  optim::SGD optimizer(model.parameters(), {.lr = lr, .momentum = 0.9});
  optim::SGD reference_optimizer(reference.parameters(), {.lr = lr, .momentum = 0.9});
  for (int64_t step = 0; step < kSteps; ++step) {
    Batch global = global_batch(step);
    sgd_step(model, optimizer, slice(global, rank, world));  // through DDP's hooks on the model
    sgd_step(reference, reference_optimizer, global);
  }
  return check_matches_reference(model, reference, rank);
}

}  // namespace

// DDP over the global batch split across ranks equals one process on the
// whole batch after kSteps SGD steps. Ranks start from different weights:
// DDP's broadcast from rank 0 must make them equal to the reference's.
EMBER_SCENARIO(ddp_matches_single_process) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = make_mlp(100 + uint64_t(rank));
  auto reference = make_mlp(100);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    failures += train_beside_reference(*model, *reference, rank, world, 0.1);
    bool plain_names = true;
    for (const auto& entry : model->state_dict()) plain_names &= entry.first.rfind("module.", 0) != 0;
    failures += check(plain_names, rank, "state_dict keys are the module's own (no \"module.\" prefix)");
    failures += check(model->parameters()[0].grad().storage() == model->parameters()[1].grad().storage(), rank,
                      "the gradients are views into one bucket");
  }
  failures += check(model->parameters()[0].grad().storage() != model->parameters()[1].grad().storage(), rank,
                    "once DDP is gone each .grad is a tensor of its own");
  distributed::destroy_process_group();
  return failures;
}

// Note [Buckets in symmetric memory]: a model of about 1.1 MB of gradients
// (two buckets) trains as one process on the global batch would, and its
// gradients are bucket views in symmetric memory or not, as args[1] expects:
// "symmetric" (shm), "ordinary" (gloo), "either" (a /dev/shm with room for
// some buckets only).
EMBER_SCENARIO(ddp_bucket_memory) {
  EMBER_CHECK(args.size() == 2, "ddp_bucket_memory: usage: ddp_bucket_memory <backend> symmetric|ordinary|either");
  ProcessGroup& group = init(args);
  const int rank = group.rank(), world = group.size();
  const bool symmetric = args[1] == "symmetric";
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 256), nn::Tanh(), nn::Linear(256, 1024), nn::Tanh(),
                                            nn::Linear(1024, kClasses));
  };
  auto model = make(300 + uint64_t(rank));
  auto reference = make(300);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    failures += train_beside_reference(*model, *reference, rank, world, 0.05);
    if (args[1] != "either") {
      bool all_as_expected = true;
      for (const Tensor& parameter : model->parameters())
        all_as_expected &= group.is_symmetric(parameter.grad()) == symmetric;
      failures += check(all_as_expected, rank, fmt::format("every gradient is a bucket view in {} memory", args[1]));
    }
  }
  distributed::destroy_process_group();
  return failures;
}

// Gradient accumulation: two micro-batches per step, the first under
// no_sync (local accumulation into the bucket views, no communication), the
// second synced (all-reduces the sum). Each micro-batch loss is halved, so
// the accumulated gradient is the mean over the rank's slice, and the
// equivalence with one process on the global batch holds as above.
EMBER_SCENARIO(ddp_no_sync_matches_single_process) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = make_mlp(200 + uint64_t(rank));
  auto reference = make_mlp(200);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch global = global_batch(step);
      Batch local = slice(global, rank, world);
      Batch first = slice(local, 0, 2), second = slice(local, 1, 2);
      optimizer.zero_grad();
      {
        auto no_sync = ddp.no_sync();
        (F::cross_entropy(ddp(first.inputs), first.targets) / 2).backward();
      }
      // Still this rank's own gradient: nothing was reduced.
      if (step == 0) {
        Tensor local_grad = model->parameters()[0].grad().clone();
        auto check_model = make_mlp(0);
        check_model->load_state_dict(model->state_dict());
        (F::cross_entropy((*check_model)(first.inputs), first.targets) / 2).backward();
        failures += check(max(abs(local_grad - check_model->parameters()[0].grad())).item<double>() < 1e-6, rank,
                          "under no_sync the gradient stays local");
      }
      (F::cross_entropy(ddp(second.inputs), second.targets) / 2).backward();
      optimizer.step();

      sgd_step(*reference, reference_optimizer, global);
    }
    failures += check_matches_reference(*model, *reference, rank);
  }
  distributed::destroy_process_group();
  return failures;
}

// Note [Compressed gradients]: with comm_hook "fp16" or "bf16" each .grad
// after backward is the average of the ranks' gradients cast to that dtype
// and halved there, summed in it: every element a value of that dtype, within
// one of its units in the last place (ulp) of the exact average of the cast
// shares, computed here from every rank's slice on a plain copy of the model.
// Then 20 steps stay near one process on the global batch, as far as the
// dtype's rounding lets them, and unknown hooks are refused by name.
// args[1]: "fp16" or "bf16"; two ranks (one rounding of a sum of two shares).
// Mutations caught (run once, failed as expected): the hook ignored (f32
// averages: "every gradient is a float16 value" fails) and the shares not
// divided by the world size (twice the average: the ulp check fails).
EMBER_SCENARIO(ddp_compressed_gradients) {
  ProcessGroup& group = init(args);
  const std::string hook = args.at(1);
  const DType half = hook == "fp16" ? DType::f16 : DType::bf16;
  int rank = group.rank(), world = group.size();
  int failures = 0;
  for (const char* refused : {"power_sgd", "fp32"}) {
    std::string message;
    try {
      DistributedDataParallel bad(make_mlp(0), group, DDPOptions{.comm_hook = refused});
    } catch (const Error& error) {
      message = error.what();
    }
    failures += check(message.find(fmt::format("comm_hook \"{}\"", refused)) != std::string::npos, rank,
                      fmt::format("comm_hook \"{}\" is refused by name: {}", refused, message));
  }
  auto model = make_mlp(700 + uint64_t(rank));
  auto reference = make_mlp(700);
  {
    DistributedDataParallel ddp(model, group, DDPOptions{.comm_hook = hook});
    auto plain = make_mlp(0);
    plain->load_state_dict(model->state_dict());  // rank 0's weights, after DDP's broadcast
    Batch global = global_batch(0);
    std::vector<Tensor> expected;  // per parameter: the average of the cast shares, in f64
    for (int r = 0; r < world; ++r) {
      Batch part = slice(global, r, world);
      plain->zero_grad();
      F::cross_entropy((*plain)(part.inputs), part.targets).backward();
      for (size_t i = 0; i < plain->parameters().size(); ++i) {
        Tensor share = plain->parameters()[i].grad().to(half).to(DType::f64) / double(world);
        if (expected.size() <= i) expected.push_back(share);
        else expected[i] = expected[i] + share;
      }
    }
    Batch local = slice(global, rank, world);
    F::cross_entropy((*model)(local.inputs), local.targets).backward();
    bool representable = true, within_ulp = true;
    for (size_t i = 0; i < expected.size(); ++i) {
      Tensor grad = model->parameters()[i].grad().to(DType::f64);
      representable &= max(abs(grad - grad.to(half).to(DType::f64))).item<double>() == 0;
      // One ulp of the half dtype at the expected value, at least its smallest subnormal.
      const double mantissa_bits = half == DType::f16 ? 10 : 7, smallest = half == DType::f16 ? 5.96e-8 : 9.2e-41;
      Tensor ulp = clamp_min(abs(expected[i]) * std::ldexp(1.0, -int(mantissa_bits)), smallest);
      within_ulp &= max(abs(grad - expected[i]) - ulp).item<double>() <= 0;
    }
    failures += check(representable, rank, fmt::format("every gradient is a {} value", dtype_name(half)));
    failures += check(within_ulp, rank, "each gradient is the average of the cast shares, within one ulp");

    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch batch = global_batch(step);
      sgd_step(*model, optimizer, slice(batch, rank, world));
      sgd_step(*reference, reference_optimizer, batch);
    }
    const double difference = max_abs_difference(*model, *reference);
    const double tolerance = half == DType::f16 ? 1e-3 : 5e-3;
    failures += check(difference <= tolerance, rank,
                      fmt::format("after {} steps with {} gradients max |ddp - single process| = {:.3g} (tolerance {})",
                                  kSteps, dtype_name(half), difference, tolerance));
  }
  distributed::destroy_process_group();
  return failures;
}

// Whether every parameter's .grad is the view of its slot in its bucket.
bool gradients_are_bucket_views(const DistributedDataParallel& ddp) {
  const distributed::Reducer& reducer = ddp.reducer();
  for (size_t index = 0; index < reducer.parameters().size(); ++index) {
    const auto& at = reducer.locations()[index];
    const distributed::Bucket& bucket = reducer.buckets()[at.bucket];
    const Tensor grad = reducer.parameters()[index].second.grad();
    if (!grad.defined() || grad.storage() != bucket.buffer.storage() ||
        grad.data_ptr() != bucket.views[at.slot].data_ptr())
      return false;
  }
  return true;
}

// Note [Gradients as bucket views], across zero_grad: after every synced
// backward each .grad is its bucket view, whether the step before cleared
// the gradients with set_to_none (the fresh gradients backward writes are
// taken back into the views) or zeroed them in place (the views stay, and
// backward adds into them); both give the single process's training.
// args[1]: "none" (zero_grad(true)) or "zero" (zero_grad(false)).
// Mutation caught (run once, failed as expected): the post-accumulate hook
// no longer pointing .grad back at the view (adopt_gradient copying, then
// leaving .grad the fresh tensor): both variants fail the views check and
// the comparison (the optimizer steps on the unreduced local gradient).
EMBER_SCENARIO(ddp_gradients_stay_bucket_views) {
  ProcessGroup& group = init(args);
  const bool set_to_none = args.at(1) == "none";
  int rank = group.rank(), world = group.size();
  auto model = make_mlp(600 + uint64_t(rank));
  auto reference = make_mlp(600);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    bool views = true;
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch global = global_batch(step);
      Batch local = slice(global, rank, world);
      Tensor loss = F::cross_entropy((*model)(local.inputs), local.targets);
      optimizer.zero_grad(set_to_none);
      if (!set_to_none && step > 0) views &= gradients_are_bucket_views(ddp);  // zeroed in place
      loss.backward();
      views &= gradients_are_bucket_views(ddp);
      optimizer.step();
      reference_optimizer.zero_grad(set_to_none);
      F::cross_entropy((*reference)(global.inputs), global.targets).backward();
      reference_optimizer.step();
    }
    failures += check(views, rank, fmt::format("every .grad is its bucket view after each step (zero_grad({}))",
                                                set_to_none ? "set_to_none" : "false"));
    failures += check_matches_reference(*model, *reference, rank);
  }
  distributed::destroy_process_group();
  return failures;
}

// Gradient accumulation into the views: three micro-batches per step, the
// first two under no_sync, after zero_grad(false) (the views zeroed in place,
// every backward adding into them) or zero_grad(true) (the first backward's
// fresh gradient taken into the view, the others adding). The synced third
// all-reduces the sum of all three; each loss is divided by 3, so the step
// equals one process on the global batch, as in ddp_no_sync_matches_single_process.
// args[1]: "none" or "zero", as above.
// Mutation caught (run once, failed as expected): prepare_for_backward
// zeroing the buckets (clearing last iteration's gradients for the new one)
// drops the two no_sync micro-batches: "zero" and "none" both fail the comparison.
EMBER_SCENARIO(ddp_accumulation_in_bucket_views) {
  ProcessGroup& group = init(args);
  const bool set_to_none = args.at(1) == "none";
  int rank = group.rank(), world = group.size();
  auto model = make_mlp(700 + uint64_t(rank));
  auto reference = make_mlp(700);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    bool views = true;
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch global = global_batch(step);
      Batch local = slice(global, rank, world);
      optimizer.zero_grad(set_to_none);
      for (int64_t micro = 0; micro < 3; ++micro) {
        Batch part = slice(local, micro, 3);
        if (micro < 2) {
          auto no_sync = ddp.no_sync();
          (F::cross_entropy(ddp(part.inputs), part.targets) / 3).backward();
        } else {
          (F::cross_entropy(ddp(part.inputs), part.targets) / 3).backward();
        }
        views &= gradients_are_bucket_views(ddp);
      }
      optimizer.step();
      sgd_step(*reference, reference_optimizer, global);
    }
    failures += check(views, rank, "every .grad is its bucket view after each micro-batch");
    failures += check_matches_reference(*model, *reference, rank);
  }
  distributed::destroy_process_group();
  return failures;
}

// Note [Bucket order], the first bucket: with the default caps (1 MiB first,
// 25 MiB after) a model 8 -> 512 -> 512 -> 512 -> 4 gets bucket 0 = the
// output layer and the last 512 x 512 one (it closes once past 1 MiB), whose
// all-reduce can start while backward computes the first two layers'
// gradients, and bucket 1 = the rest; training through the two buckets
// still equals one process on the global batch.
// first_bucket_cap_mb = bucket_cap_mb gives one bucket, as before.
// Mutation caught (run once, failed as expected): assign_buckets closing
// every bucket at bucket_cap_bytes (the first cap ignored): one bucket.
EMBER_SCENARIO(ddp_first_bucket_is_small) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 512), nn::Tanh(), nn::Linear(512, 512), nn::Tanh(),
                                            nn::Linear(512, 512), nn::Tanh(), nn::Linear(512, kClasses));
  };
  auto model = make(800 + uint64_t(rank));
  auto reference = make(800);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    const auto& buckets = ddp.reducer().buckets();
    std::vector<std::string> first;
    for (size_t index : buckets.at(0).parameters) first.push_back(ddp.reducer().parameters()[index].first);
    failures += check(buckets.size() == 2 && first == std::vector<std::string>{"6.bias", "6.weight", "4.bias", "4.weight"},
                      rank, fmt::format("{} buckets, bucket 0 = [{}]", buckets.size(), fmt::join(first, ", ")));
    optim::SGD optimizer(model->parameters(), {.lr = 0.05});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.05});
    for (int64_t step = 0; step < 3; ++step) {
      Batch global = global_batch(step);
      sgd_step(*model, optimizer, slice(global, rank, world));
      sgd_step(*reference, reference_optimizer, global);
    }
    double difference = max_abs_difference(*model, *reference);
    failures += check(difference <= kTolerance, rank,
                      fmt::format("after 3 steps max |ddp - single process| = {:.3g}", difference));
  }
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 25, .first_bucket_cap_mb = 25});
    failures += check(ddp.reducer().buckets().size() == 1, rank,
                      fmt::format("first_bucket_cap_mb = bucket_cap_mb: {} bucket(s)", ddp.reducer().buckets().size()));
  }
  {
    // A cap under a byte was refused as "0 bytes" (PyTorch: a bucket per
    // parameter), and an infinite one converted out of range. Mutation
    // caught: the caps converted without cap_bytes.
    DistributedDataParallel tiny(model, group, {.bucket_cap_mb = 1e-9, .first_bucket_cap_mb = 1e-9});
    failures += check(tiny.reducer().buckets().size() == model->parameters().size(), rank,
                      fmt::format("bucket_cap_mb 1e-9: {} buckets, one per parameter", tiny.reducer().buckets().size()));
  }
  {
    DistributedDataParallel whole(model, group, {.bucket_cap_mb = INFINITY, .first_bucket_cap_mb = INFINITY});
    failures += check(whole.reducer().buckets().size() == 1, rank,
                      fmt::format("bucket_cap_mb inf: {} bucket(s)", whole.reducer().buckets().size()));
  }
  distributed::destroy_process_group();
  return failures;
}

// find_unused_parameters: a layer the forward never uses does not stall the
// buckets (its bucket also holds used parameters), training still matches
// the single process, and the unused layer's .grad stays undefined as in the
// reference (no rank used it).
EMBER_SCENARIO(ddp_unused_parameters) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = std::make_shared<WithUnused>(300 + uint64_t(rank));
  auto reference = std::make_shared<WithUnused>(300);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = kSmallBucketsMb, .find_unused_parameters = true});
    failures += check(ddp.reducer().buckets().size() == 2, rank,
                      fmt::format("{} buckets (expected 2)", ddp.reducer().buckets().size()));
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int64_t step = 0; step < kSteps; ++step) {
      Batch global = global_batch(step);
      Batch local = slice(global, rank, world);
      sgd_step(*model, optimizer, local);  // through DDP's hooks on the model

      sgd_step(*reference, reference_optimizer, global);
    }
    failures += check_matches_reference(*model, *reference, rank);
    failures += check(!model->unused->weight.grad().defined() && !model->unused->bias.grad().defined(), rank,
                      "the unused layer's .grad is undefined");
  }
  distributed::destroy_process_group();
  return failures;
}

namespace {

// A middle layer the forward uses on even steps only.
struct SometimesUsed : nn::Module {
  explicit SometimesUsed(uint64_t seed) {
    manual_seed(seed);
    first = register_module("first", nn::Linear(kFeatures, 16));
    middle = register_module("middle", nn::Linear(16, 16));
    last = register_module("last", nn::Linear(16, kClasses));
  }
  Tensor forward(const Tensor& x) override {
    Tensor hidden = tanh(first->forward(x));
    if (use_middle) hidden = tanh(middle->forward(hidden));
    return last->forward(hidden);
  }
  bool use_middle = true;
  std::shared_ptr<nn::Linear> first, middle, last;
};

}  // namespace

// find_unused_parameters with a layer used on alternate steps, and zero_grad
// between forward and backward (sgd_step's order). The layer was marked ready
// at the forward with the gradient it held then, last step's average, which
// the next zero_grad only unhooked: it was all-reduced and stepped again.
// Marked at backward's first gradient, it is zero or absent as in the single
// process. Mutation caught: prepare_for_backward marking the unused at once.
EMBER_SCENARIO(ddp_sometimes_unused) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = std::make_shared<SometimesUsed>(310 + uint64_t(rank));
  auto reference = std::make_shared<SometimesUsed>(310);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = kSmallBucketsMb, .find_unused_parameters = true});
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int64_t step = 0; step < 6; ++step) {
      model->use_middle = reference->use_middle = step % 2 == 0;
      Batch global = global_batch(step);
      sgd_step(*model, optimizer, slice(global, rank, world));
      sgd_step(*reference, reference_optimizer, global);
      failures += check(model->middle->weight.grad().defined() == reference->middle->weight.grad().defined(), rank,
                        fmt::format("step {}: the middle layer has a gradient exactly when the reference has", step));
    }
    const double difference = max_abs_difference(*model, *reference);
    failures += check(difference <= kTolerance, rank,
                      fmt::format("after 6 steps max |ddp - single process| = {:.3g}", difference));
  }
  distributed::destroy_process_group();
  return failures;
}

// find_unused_parameters with accumulation: the middle layer is used only in
// rank 0's no_sync micro-batch. It counted as unused by every rank at the
// synced forward, so rank 1, which held no gradient of it, dropped the
// averaged gradient while rank 0 kept it: the replicas drifted apart without
// a word. Used under no_sync now counts as used, as PyTorch's local_used_map
// does, and both ranks step on the average. Mutation caught: the
// used_under_no_sync_ term in prepare_for_backward replaced by 0 -> rank 1's
// middle layer has no gradient and both ranks differ from the reference.
EMBER_SCENARIO(ddp_used_under_no_sync_counts_as_used) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = std::make_shared<SometimesUsed>(320 + uint64_t(rank));
  auto reference = std::make_shared<SometimesUsed>(320);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = kSmallBucketsMb, .find_unused_parameters = true});
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    auto micro_batch = [](SometimesUsed& net, auto& call, const Batch& batch, bool use_middle, double scale) {
      net.use_middle = use_middle;
      (F::cross_entropy(call(batch.inputs), batch.targets) * scale).backward();
    };
    for (int64_t step = 0; step < 3; ++step) {
      const Batch global = global_batch(step);
      optimizer.zero_grad();
      const Batch local = slice(global, rank, world);
      {
        auto no_sync = ddp.no_sync();
        micro_batch(*model, ddp, slice(local, 0, 2), rank == 0, 0.5);
      }
      micro_batch(*model, ddp, slice(local, 1, 2), false, 0.5);
      failures += check(model->middle->weight.grad().defined(), rank,
                        fmt::format("step {}: the middle layer has the averaged gradient", step));
      optimizer.step();

      reference_optimizer.zero_grad();
      for (int part = 0; part < world; ++part) {
        const Batch theirs = slice(global, part, world);
        micro_batch(*reference, *reference, slice(theirs, 0, 2), part == 0, 0.5 / world);
        micro_batch(*reference, *reference, slice(theirs, 1, 2), false, 0.5 / world);
      }
      reference_optimizer.step();
    }
    const double difference = max_abs_difference(*model, *reference);
    failures += check(difference <= kTolerance, rank,
                      fmt::format("after 3 steps max |ddp - single process| = {:.3g}", difference));
  }
  distributed::destroy_process_group();
  return failures;
}

// Without find_unused_parameters the unused layer's bucket never completes;
// the next forward says so, naming the parameters that got no gradient.
namespace {

// x * scale whose backward gives `scale` an undefined gradient: the forward
// uses it, yet no gradient reaches its accumulator.
struct ScaleWithoutItsGradient : autograd::Function<ScaleWithoutItsGradient> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, const Tensor& scale) {
    ctx.save_for_backward({scale});
    return x * scale;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    return {grads[0] * ctx.saved_tensors()[0], Tensor()};
  }
};

struct WithScale : nn::Module {
  WithScale() : scale(register_parameter("scale", ones({1}))) {
    manual_seed(300);
    layer = register_module("layer", nn::Linear(kFeatures, kClasses));
  }
  Tensor forward(const Tensor& x) override { return ScaleWithoutItsGradient::apply((*layer)(x), scale); }
  std::shared_ptr<nn::Linear> layer;
  Tensor& scale;
};

// One training forward and backward through `ddp`, then a second forward: what
// it refused with ("" when it did not).
std::string second_forward_error(DistributedDataParallel& ddp, int rank, int world) {
  Batch local = slice(global_batch(0), rank, world);
  F::cross_entropy(ddp(local.inputs), local.targets).backward();
  std::string message;
  try {
    ddp(local.inputs);
  } catch (const Error& error) {
    message = error.what();
  }
  std::printf("rank %d: the second forward said: %s\n", rank, message.c_str());
  return message;
}

}  // namespace

EMBER_SCENARIO(ddp_unused_parameters_error) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  auto model = std::make_shared<WithUnused>(300);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = kSmallBucketsMb});
    const std::string message = second_forward_error(ddp, rank, world);
    failures += check(message.find("Expected to have finished reduction in the prior iteration") != std::string::npos &&
                          message.find("find_unused_parameters=true") != std::string::npos &&
                          message.find("unused.weight") != std::string::npos &&
                          message.find("unused.bias") != std::string::npos &&
                          message.find("first.weight") == std::string::npos,
                      rank, "the error names the unused parameters");
  }
  {
    // With find_unused_parameters on, the error told the user to turn it on.
    // Mutation caught: the advice without its find_unused_parameters case.
    auto scaled = std::make_shared<WithScale>();
    DistributedDataParallel ddp(scaled, group, {.find_unused_parameters = true});
    const std::string message = second_forward_error(ddp, rank, world);
    failures += check(message.find("find_unused_parameters is on, so the forward used these parameters but no "
                                   "gradient reached them") != std::string::npos &&
                          message.find("scale") != std::string::npos,
                      rank, "the error says why with find_unused_parameters on");
  }
  distributed::destroy_process_group();
  return failures;
}

// broadcast_buffers: every forward starts from rank 0's BatchNorm running
// statistics. Ranks see different data, so after a training forward their
// statistics differ; after an eval forward (which updates none) every rank's
// equal rank 0's, and the parameters stay equal across ranks throughout.
EMBER_SCENARIO(ddp_broadcast_buffers) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  manual_seed(400 + uint64_t(rank));
  auto model = std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 16), nn::BatchNorm1d(16), nn::Tanh(),
                                                nn::Linear(16, kClasses));
  auto norm = std::dynamic_pointer_cast<nn::BatchNorm>(model->children()[1]);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1});
    bool differed_after_training_forward = true;
    for (int64_t step = 0; step < 3; ++step) {
      Batch local = slice(global_batch(step), rank, world);
      Tensor loss = F::cross_entropy(ddp(local.inputs), local.targets);
      Tensor rank0_mean = rank0_copy(group, norm->running_mean);
      if (rank != 0 && max(abs(norm->running_mean - rank0_mean)).item<double>() == 0)
        differed_after_training_forward = false;
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
    if (world > 1) failures += check(differed_after_training_forward, rank, "training forwards update stats locally");
    model->eval();
    {
      NoGradGuard no_grad;
      ddp(slice(global_batch(99), rank, world).inputs);
    }
    for (const auto& [name, buffer] : model->named_buffers())
      failures += check(rank0_copy(group, buffer).to_vector<double>() == buffer.to_vector<double>(), rank,
                        fmt::format("buffer {} equals rank 0's after forward", name));
    for (const auto& [name, parameter] : model->named_parameters())
      failures += check(rank0_copy(group, parameter).to_vector<float>() == parameter.to_vector<float>(), rank,
                        fmt::format("parameter {} equals rank 0's", name));
  }
  distributed::destroy_process_group();
  return failures;
}

// Frozen parameters start from rank 0's too (PyTorch's _sync_module_states),
// and an evaluation forward under NoGradGuard between a forward and its
// backward is allowed, as in PyTorch. Catches: only trainable parameters
// broadcast (the frozen layer differed by rank, and so did the outputs).
EMBER_SCENARIO(ddp_frozen_parameters_and_evaluation_forwards) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  manual_seed(100 + uint64_t(rank));
  auto model = std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 16), nn::Tanh(), nn::Linear(16, kClasses));
  for (auto& [name, parameter] : model->named_parameters())
    if (name.starts_with("0.")) parameter.requires_grad_(false);
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1});
    for (int64_t step = 0; step < 2; ++step) {
      Batch local = slice(global_batch(step), rank, world);
      Tensor loss = F::cross_entropy(ddp(local.inputs), local.targets);
      {
        NoGradGuard no_grad;
        ddp(local.inputs);
      }
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
    for (const auto& [name, parameter] : model->named_parameters())
      failures += check(rank0_copy(group, parameter).to_vector<float>() == parameter.to_vector<float>(), rank,
                        fmt::format("parameter {} equals rank 0's", name));
  }
  distributed::destroy_process_group();
  return failures;
}

// Changes to the model after DDP was built, each refused on every rank at
// once: a parameter unfrozen afterwards was never averaged (the replicas
// drifted apart), and after model->to(f64) with a comm hook every step took
// the gradient frozen at the conversion. Mutations caught: before_forward
// without check_no_parameter_joined, mark_ready without its dtype check.
EMBER_SCENARIO(ddp_model_changed_after_wrapping) {
  ProcessGroup& group = init(args);
  const int rank = group.rank(), world = group.size();
  int failures = 0;
  auto refusal = [](const std::function<void()>& run) {
    try {
      run();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  Batch local = slice(global_batch(0), rank, world);
  {
    auto model = make_mlp(700);
    for (auto& [name, parameter] : model->named_parameters())
      if (name.starts_with("0.")) parameter.requires_grad_(false);
    DistributedDataParallel ddp(model, group);
    for (auto& [name, parameter] : model->named_parameters()) parameter.requires_grad_(true);
    const std::string message = refusal([&] { (void)ddp(local.inputs); });
    failures += check(message.find("parameter \"0.weight\" requires grad but did not when DistributedDataParallel "
                                   "was built") != std::string::npos,
                      rank, "a parameter unfrozen after wrapping is refused: " + message);
  }
  for (const char* hook : {"fp16", "no"}) {
    auto model = make_mlp(710);
    DistributedDataParallel ddp(model, group, {.comm_hook = hook});
    F::cross_entropy(ddp(local.inputs), local.targets).backward();
    model->to(DType::f64);
    const std::string message =
        refusal([&] { F::cross_entropy(ddp(local.inputs.to(DType::f64)), local.targets).backward(); });
    failures += check(message.find("is float64 on cpu (gradient float64), but was float32 on cpu when "
                                   "DistributedDataParallel was built") != std::string::npos,
                      rank, fmt::format("comm_hook {}: a model converted after wrapping is refused: {}", hook, message));
  }
  distributed::destroy_process_group();
  return failures;
}

// Forwards that PyTorch's reducer accepts before a backward, because its
// "prior reduction" check looks only at a reduction a gradient began: a
// forward whose output is dropped (a metric), two forwards whose losses one
// backward sums, and a no_sync forward between a forward and its backward
// (that backward still synchronises, as the first forward prepared it).
// Each step must still equal one process on the global batch, with and
// without find_unused_parameters. Catches: the check refusing any prepared
// reduction (every one of these was refused, with advice about unused
// parameters).
EMBER_SCENARIO(ddp_forwards_before_a_backward) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  int failures = 0;
  for (bool find_unused : {false, true}) {
    auto model = make_mlp(600 + uint64_t(rank));
    auto reference = make_mlp(600);
    DistributedDataParallel ddp(model, group, {.find_unused_parameters = find_unused});
    optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int64_t step = 0; step < 9; ++step) {
      Batch global = global_batch(step);
      Batch local = slice(global, rank, world);
      optimizer.zero_grad();
      if (step % 3 == 0) {
        (void)ddp(local.inputs);  // never backpropagated
        F::cross_entropy(ddp(local.inputs), local.targets).backward();
      } else if (step % 3 == 1) {
        Batch first = slice(local, 0, 2), second = slice(local, 1, 2);
        Tensor first_loss = F::cross_entropy(ddp(first.inputs), first.targets);
        Tensor second_loss = F::cross_entropy(ddp(second.inputs), second.targets);
        ((first_loss + second_loss) * 0.5).backward();
      } else {
        Tensor loss = F::cross_entropy(ddp(local.inputs), local.targets);
        {
          auto no_sync = ddp.no_sync();
          (void)ddp(local.inputs);
        }
        loss.backward();
      }
      optimizer.step();
      sgd_step(*reference, reference_optimizer, global);
    }
    double difference = max_abs_difference(*model, *reference);
    failures += check(difference <= kTolerance, rank,
                      fmt::format("find_unused_parameters={}: max |ddp - single process| = {:.3g}", find_unused,
                                  difference));
  }
  distributed::destroy_process_group();
  return failures;
}

// For the overlap test: a 4-layer MLP with buckets of ~10 KB, so that there
// are three (bucket 0: layers 6 and 4, bucket 1: layer 2, bucket 2: layer 0),
// trained for a few steps with EMBER_DDP_TRACE set by the test. The test
// reads the trace files the profiler writes when the process ends.
EMBER_SCENARIO(ddp_trace) {
  ProcessGroup& group = init(args);
  int rank = group.rank(), world = group.size();
  manual_seed(500);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(32, 64), nn::Tanh(), nn::Linear(64, 64), nn::Tanh(),
                                                nn::Linear(64, 64), nn::Tanh(), nn::Linear(64, kClasses));
  int failures = 0;
  {
    DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.01});
    failures += check(!ddp.trace_path().empty(), rank, "EMBER_DDP_TRACE (or EMBER_PROFILE) turned the profiler on");
    std::printf("rank %d: %zu buckets, trace %s\n", rank, ddp.reducer().buckets().size(), ddp.trace_path().c_str());
    optim::SGD optimizer(model->parameters(), {.lr = 0.01});
    for (int64_t step = 0; step < 3; ++step) {
      Batch local = slice(global_batch(step, 64 * world, 32), rank, world);
      sgd_step(*model, optimizer, local);  // through DDP's hooks on the model
    }
  }
  distributed::destroy_process_group();
  return failures;
}

// Ranks that built different models (Note [Same parameters on every rank]):
// args[0] "dtype": rank 1's model is f64 where rank 0's is f32; "shape": one
// weight, [6, 4] on rank 0 and [4, 6] on rank 1 (same count, same number of
// elements); args[1] "ddp" or "zero3" picks the engine. Every rank must
// throw at construction, naming the parameter and both ranks' versions.
// Mutation caught: comparing only the parameter count and the total number
// of elements (the check before) passes "shape" and "dtype" silently, and
// the job then trains to garbage (seen once: the scenario exits 1, "no error").
EMBER_SCENARIO(ddp_mismatched_parameters) {
  const std::string kind = args.at(0), engine = args.at(1);
  ProcessGroup& group = distributed::init_process_group({.backend = "auto"});
  const int rank = group.rank();
  manual_seed(7);
  std::shared_ptr<nn::Module> model;
  if (kind == "dtype" || kind == "frozen") {
    model = std::make_shared<nn::Sequential>(nn::Linear(kFeatures, 16), nn::Tanh(), nn::Linear(16, kClasses));
    if (rank == 1 && kind == "dtype") model->to(DType::f64);
    // Frozen on one rank only: the buckets hold the trainable parameters, so
    // the ranks summed different parameters' gradients slot by slot (equal
    // sizes hid it). Mutation caught: describe_parameters without the mark.
    if (rank == 1 && kind == "frozen") model->named_parameters()[1].second.requires_grad_(false);
  } else if (kind == "buffer") {
    // A buffer of another shape on rank 1: the broadcast of rank 0's buffers
    // failed, naming neither the engine nor the buffer. Mutation caught: the
    // check describing parameters only.
    struct WithTable : nn::Module {
      explicit WithTable(int64_t n) {
        register_parameter("weight", ones({3}));
        register_buffer("table", zeros({n}));
      }
    };
    model = std::make_shared<WithTable>(rank == 0 ? 5 : 7);
  } else {
    const int64_t in = rank == 0 ? 4 : 6, out = rank == 0 ? 6 : 4;
    model = std::make_shared<nn::Sequential>(nn::Linear(in, out, {.bias = false}));
  }
  std::string message;
  try {
    if (engine == "ddp") {
      DistributedDataParallel ddp(model, group);
    } else {
      distributed::ResolvedShardingOptions options;
      options.strategy = distributed::ShardingStrategy::zero3;
      distributed::ShardedDataParallel zero(model, group, options);
    }
  } catch (const Error& error) {
    message = error.what();
  }
  std::printf("rank %d: construction said: %s\n", rank, message.empty() ? "(no error)" : message.c_str());
  auto says = [&message](const std::string& text) { return message.find(text) != std::string::npos; };
  const std::string op = engine == "ddp" ? "DistributedDataParallel:" : "ShardedDataParallel:";
  bool named = kind == "dtype"    ? says("'0.weight [16, 8] float64 cpu' on rank 1 and '0.weight [16, 8] float32 cpu' on rank 0")
               : kind == "frozen" ? says("'0.bias [16] float32 cpu frozen' on rank 1 and '0.bias [16] float32 cpu' on rank 0")
               : kind == "buffer" ? says("'buffer table [7] float32 cpu' on rank 1 and 'buffer table [5] float32 cpu' on rank 0")
                                  : says("'0.weight [4, 6] float32 cpu' on rank 1 and '0.weight [6, 4] float32 cpu' on rank 0");
  int failures = check(says(op) && named, rank, "the error names the first differing parameter on both ranks");
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test
