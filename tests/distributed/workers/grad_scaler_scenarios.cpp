// GradScaler across ranks, run by tests/distributed/test_grad_scaler.cpp
// through `ember launch`. Only the last rank's gradient overflows; the
// scaler's all-reduced flag must make every rank skip that step and halve its
// scale, or the replicas would part ways (one rank stepped, the other not).
// args[0] (optional): the backend ("auto", "gloo", "shm").
#include <ember/ember.h>

#include <cstdio>
#include <limits>
#include <string>

#include "distributed/amp/grad_scaler.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

using distributed::GradScaler;
using distributed::ProcessGroup;

int check(bool ok, int rank, const std::string& what) {
  std::printf("rank %d: %s: %s\n", rank, what.c_str(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

// The same parameter on every rank, its scaled gradient scale * x after backward.
void scaled_backward(GradScaler& scaler, const Tensor& parameter, const Tensor& x) {
  scaler.scale(sum(parameter * x)).backward();
}

}  // namespace

// Step 1: the last rank's input holds inf, the others' are finite: every rank
// skips and halves the scale. Step 2: all finite: every rank steps.
EMBER_SCENARIO(grad_scaler_skips_together) {
  ProcessGroup& group = distributed::init_process_group({.backend = args.empty() ? "auto" : args[0]});
  const int rank = group.rank(), last = group.size() - 1;
  int failures = 0;
  {
    Tensor parameter = from_vector<float>({1, 2, 3}).requires_grad_();
    optim::SGD optimizer(std::vector<Tensor>{parameter}, {.lr = 0.5});
    GradScaler scaler({.init_scale = 1024, .growth_interval = 100}, &group);
    const float inf = std::numeric_limits<float>::infinity();

    Tensor overflow = rank == last ? from_vector<float>({1, inf, 1}) : from_vector<float>({1, 1, 1});
    scaled_backward(scaler, parameter, overflow);
    scaler.unscale_(optimizer);
    failures += check(scaler.found_inf(optimizer), rank,
                      rank == last ? "found inf in its own gradient" : "found the other rank's inf");
    failures += check(!scaler.step(optimizer), rank, "skipped the overflowing step");
    scaler.update();
    failures += check(scaler.get_scale() == 512, rank, fmt::format("scale halved to {}", scaler.get_scale()));
    failures += check(parameter.to_vector<float>() == std::vector<float>{1, 2, 3}, rank, "parameter untouched");

    optimizer.zero_grad();
    scaled_backward(scaler, parameter, from_vector<float>({1, 1, 1}));
    failures += check(scaler.step(optimizer), rank, "stepped on the clean step");
    scaler.update();
    failures += check(scaler.get_scale() == 512 && scaler.growth_tracker() == 1, rank,
                      fmt::format("scale {} kept, one clean step counted", scaler.get_scale()));
    failures += check(parameter.to_vector<float>() == std::vector<float>{0.5, 1.5, 2.5}, rank,
                      "parameter moved by lr * the unscaled gradient");
  }
  distributed::destroy_process_group();
  return failures;
}

}  // namespace ember::test
