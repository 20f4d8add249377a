// Models whose forward is not one tensor in, one tensor out, prepared by the
// Accelerator (DDP with several processes, bf16 autocast): run by
// tests/distributed/test_accelerator.cpp through `ember launch`. N ranks on
// slices of each global batch must equal one process on the whole batch, for
// the same reason as in ddp_scenarios.cpp (the loss is a mean over equal
// slices, DDP averages the slices' gradients); a forward that skips the
// module's hooks must be refused, never trained on.
#include <ember/ember.h>

#include <cstdio>
#include <string>

#include "distributed/accelerator/accelerator.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

namespace F = ember::nn::functional;

constexpr int64_t kFeatures = 8;
constexpr int64_t kHidden = 16;
constexpr int64_t kClasses = 4;
constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2 and 3 ranks
constexpr int64_t kSteps = 8;

// forward(input, mask): the mask zeroes hidden features per sample.
struct MaskedNet : nn::Module {
  using nn::Module::forward;  // the single-tensor form stays the base's (it throws)
  explicit MaskedNet(uint64_t seed) {
    manual_seed(seed);
    first = register_module("first", nn::Linear(kFeatures, kHidden));
    last = register_module("last", nn::Linear(kHidden, kClasses));
  }
  Tensor forward(const Tensor& input, const Tensor& mask) { return (*last)(tanh((*first)(input)) * mask); }
  auto operator()(const Tensor& input, const Tensor& mask) { return call(*this, input, mask); }
  std::shared_ptr<nn::Linear> first, last;
};

// forward(input, targets) -> (logits, loss).
struct LossNet : nn::Module {
  using nn::Module::forward;
  explicit LossNet(uint64_t seed) {
    manual_seed(seed);
    first = register_module("first", nn::Linear(kFeatures, kHidden));
    last = register_module("last", nn::Linear(kHidden, kClasses));
  }
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& targets) {
    Tensor logits = (*last)(tanh((*first)(input)));
    return {logits, F::cross_entropy(logits, targets)};
  }
  auto operator()(const Tensor& input, const Tensor& targets) { return call(*this, input, targets); }
  std::shared_ptr<nn::Linear> first, last;
};

struct Batch {
  Tensor inputs, mask, targets;
  Batch slice(int64_t part, int64_t parts) const {
    int64_t size = inputs.size(0) / parts;
    return {inputs.narrow(0, part * size, size), mask.narrow(0, part * size, size),
            targets.narrow(0, part * size, size)};
  }
};

Batch global_batch(int64_t step) {
  Generator generator(2000 + uint64_t(step));
  return {randn({kGlobalBatch, kFeatures}, {}, &generator),
          randint(0, 2, {kGlobalBatch, kHidden}, {}, &generator).to(DType::f32),
          randint(0, kClasses, {kGlobalBatch}, {.dtype = DType::i64}, &generator)};
}

template <class Model>
Tensor loss_of(Model& model, const Batch& batch) {
  if constexpr (std::is_same_v<Model, MaskedNet>) {
    return F::cross_entropy(model(batch.inputs, batch.mask), batch.targets);
  } else {
    return model(batch.inputs, batch.targets).second;
  }
}

int check(bool ok, int rank, const std::string& what) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// `a` through the accelerator, which gathers ZeRO-3's shards (EMBER_STRATEGY).
double max_abs_difference(Accelerator& accelerator, nn::Module& a, const nn::Module& b) {
  double worst = 0;
  NamedTensors pa = accelerator.get_state_dict(a), pb = b.state_dict();
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, max(abs(pa[i].second - pb[i].second)).item<double>());
  return worst;
}

// Every rank's parameters, bit for bit, against rank 0's.
bool equal_on_every_rank(Accelerator& accelerator, nn::Module& model, distributed::ProcessGroup* group) {
  if (!group) return true;
  bool equal = true;
  for (const auto& [name, parameter] : accelerator.get_state_dict(model)) {
    Tensor from_rank0 = parameter.detach().clone();
    group->broadcast(from_rank0, 0)->wait();
    equal &= max(abs(from_rank0 - parameter)).item<double>() == 0;
  }
  return equal;
}

template <class Model>
int run_matches_single_process(const std::string& precision) {
  Accelerator accelerator({.mixed_precision = precision});
  const int rank = accelerator.process_index(), world = accelerator.num_processes();
  auto model = std::make_shared<Model>(100 + uint64_t(rank));  // DDP broadcasts rank 0's weights
  Model reference(100);
  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD reference_optimizer(reference.parameters(), {.lr = 0.1, .momentum = 0.9});
  accelerator.prepare(model, optimizer);
  const bool bf16 = precision == "bf16";
  int failures = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    Batch global = global_batch(step);
    {
      KernelCallCounter counter;
      Tensor loss = loss_of(*model, global.slice(rank, world));
      if (step == 0)
        failures += check(counter.calls("matmul", DeviceType::cpu, bf16 ? DType::bf16 : DType::f32) == 2, rank,
                          fmt::format("the forward ran its matmuls in {}", bf16 ? "bf16" : "f32"));
      accelerator.backward(loss);
    }
    optimizer.step();
    optimizer.zero_grad();

    Tensor reference_loss;
    {
      AutocastGuard autocast(DeviceType::cpu, DType::bf16, /*enabled=*/bf16);
      reference_loss = loss_of(reference, global);
    }
    reference_loss.backward();
    reference_optimizer.step();
    reference_optimizer.zero_grad();
  }
  failures += check(equal_on_every_rank(accelerator, *model, accelerator.process_group()), rank,
                    "parameters are identical on every rank");
  // bf16 rounds each rank's slice gradient before the average: looser.
  const double tolerance = bf16 ? 5e-3 : 1e-5;
  const double difference = max_abs_difference(accelerator, *model, reference);
  failures += check(difference <= tolerance, rank,
                    fmt::format("after {} steps max |{} ranks - one process| = {:.3g} (tolerance {})", kSteps, world,
                                difference, tolerance));
  return failures;
}

}  // namespace

// args: the model ("masked": forward(input, mask); "loss": forward(input,
// targets) -> (logits, loss)) and the mixed precision ("no" or "bf16").
EMBER_SCENARIO(module_call_matches_single_process) {
  EMBER_CHECK(args.size() == 2, "module_call_matches_single_process: expected <model> <precision>");
  return args[0] == "masked" ? run_matches_single_process<MaskedNet>(args[1])
                             : run_matches_single_process<LossNet>(args[1]);
}

// After one proper iteration, model.forward(...) called directly (DDP's
// hooks skipped) and backward: the reducer must refuse, naming a parameter
// (mutation caught: on_gradient returning when no reduction is expected, as
// it did, lets each rank step on its own gradient).
EMBER_SCENARIO(module_call_direct_forward_is_refused) {
  Accelerator accelerator;
  const int rank = accelerator.process_index();
  auto model = std::make_shared<MaskedNet>(7);
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  Batch batch = global_batch(0).slice(rank, accelerator.num_processes());
  accelerator.backward(F::cross_entropy((*model)(batch.inputs, batch.mask), batch.targets));
  optimizer.step();
  optimizer.zero_grad();
  std::string message;
  try {
    accelerator.backward(F::cross_entropy(model->forward(batch.inputs, batch.mask), batch.targets));
  } catch (const Error& error) {
    message = error.what();
  }
  std::printf("rank %d: error: %s\n", rank, message.c_str());
  int failures = check(message.find("got a gradient from a backward that no call of the model prepared") !=
                               std::string::npos &&
                           message.find("model(...) instead of model.forward(...)") != std::string::npos,
                       rank, "a direct forward's backward is refused with the fix");
  accelerator.wait_for_everyone();
  return failures;
}

}  // namespace ember::test
