// CosineWithWarmup and LinearWithWarmup (optim/scheduler_warmup.h): the
// lambdas of transformers/optimization.py, line for line.
#include "optim/scheduler_warmup.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "optim/json_fields.h"

namespace ember::optim {
namespace {

void check_steps(const char* name, int64_t num_warmup_steps, int64_t num_training_steps) {
  EMBER_CHECK(num_warmup_steps >= 0 && num_training_steps >= 0,
              "{}: step counts must not be negative (num_warmup_steps {}, num_training_steps {})", name,
              num_warmup_steps, num_training_steps);
}

double warmup_factor(int64_t step, int64_t num_warmup_steps) {
  return double(step) / double(std::max<int64_t>(1, num_warmup_steps));
}

// The lambdas check their numbers when made, before the base class's first
// step sets the optimizer's learning rates.
LambdaLR::Lambda cosine_lambda(int64_t num_warmup_steps, int64_t num_training_steps, double num_cycles) {
  check_steps("CosineWithWarmup", num_warmup_steps, num_training_steps);
  return [=](int64_t step) {
    if (step < num_warmup_steps) return warmup_factor(step, num_warmup_steps);
    const double progress =
        double(step - num_warmup_steps) / double(std::max<int64_t>(1, num_training_steps - num_warmup_steps));
    return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
  };
}

LambdaLR::Lambda linear_lambda(int64_t num_warmup_steps, int64_t num_training_steps) {
  check_steps("LinearWithWarmup", num_warmup_steps, num_training_steps);
  return [=](int64_t step) {
    if (step < num_warmup_steps) return warmup_factor(step, num_warmup_steps);
    return std::max(
        0.0, double(num_training_steps - step) / double(std::max<int64_t>(1, num_training_steps - num_warmup_steps)));
  };
}

// The saved schedule must be this one: its lambda is made from these numbers.
void check_saved_numbers(const std::string& at, const nlohmann::json& state, int64_t num_warmup_steps,
                         int64_t num_training_steps) {
  int64_t warmup = detail::integer_field(state, "num_warmup_steps", at);
  int64_t training = detail::integer_field(state, "num_training_steps", at);
  EMBER_CHECK(warmup == num_warmup_steps && training == num_training_steps,
              "{}: the state was saved with num_warmup_steps {} and num_training_steps {}, this scheduler has {} and "
              "{}; make it with the saved numbers",
              at, warmup, training, num_warmup_steps, num_training_steps);
}


}  // namespace

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, int64_t num_warmup_steps, int64_t num_training_steps,
                                   double num_cycles)
    : LambdaLR(optimizer, "CosineWithWarmup", cosine_lambda(num_warmup_steps, num_training_steps, num_cycles)),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      num_cycles_(num_cycles) {}

void CosineWithWarmup::save_fields(nlohmann::json& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
  state["num_cycles"] = num_cycles_;
}

void CosineWithWarmup::load_fields(const nlohmann::json& state) {
  const std::string at = where("load_state_dict");
  check_saved_numbers(at, state, num_warmup_steps_, num_training_steps_);
  double cycles = detail::number_field(state, "num_cycles", at);
  EMBER_CHECK(cycles == num_cycles_, "{}: the state was saved with num_cycles {}, this scheduler has {}; make it with "
              "the saved number", at, cycles, num_cycles_);
}

LinearWithWarmup::LinearWithWarmup(Optimizer& optimizer, int64_t num_warmup_steps, int64_t num_training_steps)
    : LambdaLR(optimizer, "LinearWithWarmup", linear_lambda(num_warmup_steps, num_training_steps)),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps) {}

void LinearWithWarmup::save_fields(nlohmann::json& state) const {
  state["num_warmup_steps"] = num_warmup_steps_;
  state["num_training_steps"] = num_training_steps_;
}

void LinearWithWarmup::load_fields(const nlohmann::json& state) {
  check_saved_numbers(where("load_state_dict"), state, num_warmup_steps_, num_training_steps_);
}

}  // namespace ember::optim
