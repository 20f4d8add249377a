// GradScaler (grad_scaler.h): PyTorch's torch.cuda.amp.GradScaler state
// machine over ember's fused unscale_and_check_ op. The scale is kept as the
// f32 value PyTorch keeps (its _scale tensor is float32), so the sequences of
// scales, and the state dicts, are the same numbers.
#include "distributed/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/optimizer.h"
#include "distributed/process_group.h"

namespace ember::distributed {
namespace {

// The value as PyTorch's float32 scale tensor holds it.
double as_f32(double value) { return double(float(value)); }

// unscale_ multiplies the gradients by the reciprocal of the f32 scale, in
// f32: below 2^-128 (a subnormal scale, or one that underflowed to zero) that
// reciprocal is inf, and the parameters would turn inf/NaN while the inf check,
// made before the multiplication, found nothing.
bool has_finite_reciprocal(double scale) { return std::isfinite(float(1.0 / as_f32(scale))); }

// A scale the f32 scale tensor can hold and unscale_ can divide by.
void check_scale(double scale, std::string_view where) {
  EMBER_CHECK(scale > 0 && std::isfinite(scale), "{}: the scale must be positive and finite, got {}", where, scale);
  EMBER_CHECK(std::isfinite(float(scale)),
              "{}: the scale {} is above float32's largest value {}; the scale is kept in float32 (as PyTorch's), "
              "where it would be inf and skip every step; start from a smaller scale (65536 is the default)",
              where, scale, std::numeric_limits<float>::max());
  EMBER_CHECK(has_finite_reciprocal(scale),
              "{}: the scale {} is too small: its float32 reciprocal, which unscale_ multiplies the gradients by, is "
              "inf (the scale must be above 2^-128, about 2.9e-39); start from a larger scale",
              where, scale);
}

void check_options(const GradScalerOptions& options, std::string_view where) {
  check_scale(options.init_scale, where);
  EMBER_CHECK(options.growth_factor > 1 && std::isfinite(options.growth_factor),
              "{}: growth_factor must be greater than 1, got {}", where, options.growth_factor);
  EMBER_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
              "{}: backoff_factor must be in (0, 1), got {}", where, options.backoff_factor);
  EMBER_CHECK(options.growth_interval >= 1, "{}: growth_interval must be at least 1, got {}", where,
              options.growth_interval);
  EMBER_CHECK(options.min_scale >= 0 && std::isfinite(options.min_scale),
              "{}: min_scale must be zero or positive and finite, got {}", where, options.min_scale);
  EMBER_CHECK(options.init_scale >= options.min_scale, "{}: the scale {} is below min_scale {}", where,
              options.init_scale, options.min_scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options, ProcessGroup* group)
    : options_(options), group_(group), scale_(as_f32(options.init_scale)) {
  check_options(options_, "GradScaler");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  EMBER_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler::scale: expected a floating point loss, got {}",
              loss.defined() ? dtype_name(loss.dtype()) : "an undefined tensor");
  // f16 and bf16 losses are scaled in f32, where the scaled value cannot overflow.
  return mul(loss.to(promote_types(loss.dtype(), DType::f32)), scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  EMBER_CHECK(!found_inf_.count(&optimizer),
              "GradScaler::unscale_: unscale_() has already been called on this optimizer ({}) since the last "
              "update()",
              optimizer.name());
  // One flag for every gradient of the optimizer, read once at the end: a
  // single host synchronisation per step, whatever the number of parameters.
  // An f16 gradient has no f32 copy to unscale into: rounded back to f16,
  // the small gradients loss scaling protects flush to 0 again, and the step
  // went ahead as if scaling had worked. PyTorch refuses them as well.
  for (size_t group = 0; group < optimizer.num_param_groups(); ++group)
    for (size_t i = 0; i < optimizer.params(group).size(); ++i) {
      const Tensor grad = optimizer.params(group)[i].grad();
      EMBER_CHECK(!grad.defined() || grad.dtype() != DType::f16,
                  "GradScaler::unscale_: parameter {} of param group {} of {} has a float16 gradient, which unscaling "
                  "in float16 would flush to 0 where it is small (PyTorch: \"Attempting to unscale FP16 "
                  "gradients\"); keep the parameters in float32 and run the forward under autocast (the "
                  "Accelerator's mixed_precision \"fp16\" does)",
                  i, group, optimizer.name());
    }
  const double inv_scale = 1.0 / scale_;
  Tensor found_inf;
  for (size_t group = 0; group < optimizer.num_param_groups(); ++group) {
    for (const Tensor& param : optimizer.params(group)) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      if (!found_inf.defined()) found_inf = zeros({1}, {.device = grad.device()});
      unscale_and_check_(grad, found_inf, inv_scale);
    }
  }
  if (!found_inf.defined()) found_inf = zeros({1});
  // Every rank must skip the same steps, or their replicas drift apart: the
  // flag is the maximum over the ranks.
  if (group_ && group_->size() > 1) group_->allreduce(found_inf, ReduceOp::max)->wait();
  found_inf_[&optimizer] = found_inf.item<float>() != 0;
}

bool GradScaler::is_unscaled(const optim::Optimizer& optimizer) const { return found_inf_.count(&optimizer) > 0; }

bool GradScaler::found_inf(const optim::Optimizer& optimizer) const {
  auto found = found_inf_.find(&optimizer);
  EMBER_CHECK(found != found_inf_.end(),
              "GradScaler::found_inf: unscale_() has not been called on this optimizer ({}) since the last update()",
              optimizer.name());
  return found->second;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  EMBER_CHECK(stepped_.insert(&optimizer).second,
              "GradScaler::step: step() was already called on this optimizer ({}) since the last update(); call "
              "update() once per iteration, after every optimizer's step",
              optimizer.name());
  if (!is_unscaled(optimizer)) unscale_(optimizer);
  if (found_inf(optimizer)) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  EMBER_CHECK(!found_inf_.empty(),
              "GradScaler::update: no inf checks were recorded since the last update(): call unscale_() or step() "
              "first");
  bool any_found = false;
  for (const auto& [optimizer, found] : found_inf_) any_found = any_found || found;
  found_inf_.clear();
  stepped_.clear();
  if (any_found) {
    growth_tracker_ = 0;
    ++skipped_in_a_row_;
    // Note [Loss scaling across ranks]: at the floor a smaller scale cannot
    // help, and skipping on would never step again without a word. Every rank
    // has the same flag, so every rank throws at the same step.
    EMBER_CHECK(scale_ > options_.min_scale,
                "GradScaler::update: inf/NaN gradients with the scale at its floor (min_scale = {}), {} step{} in a "
                "row skipped. The loss or the gradients are inf/NaN whatever the scale (a NaN loss, "
                "a diverging model, too high a learning rate), so training stops here instead of skipping every "
                "step; lower GradScalerOptions::min_scale only if the gradients really need a smaller scale",
                options_.min_scale, skipped_in_a_row_, skipped_in_a_row_ == 1 ? "" : "s");
    const double backed_off = std::max(as_f32(scale_ * options_.backoff_factor), as_f32(options_.min_scale));
    // With min_scale 0 (or below 2^-128) the smallest scale unscale_ can divide by is the floor.
    EMBER_CHECK(has_finite_reciprocal(backed_off),
                "GradScaler::update: inf/NaN gradients with the scale at its floor: {} would back off to {}, whose "
                "float32 reciprocal is inf, {} step{} in a row skipped. The loss or the gradients are inf/NaN "
                "whatever the scale (a NaN loss, a diverging model, too high a learning rate), so training stops here "
                "instead of skipping every step",
                scale_, backed_off, skipped_in_a_row_, skipped_in_a_row_ == 1 ? "" : "s");
    scale_ = backed_off;
    return;
  }
  skipped_in_a_row_ = 0;
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  // As PyTorch: the scale never grows past f32's range into inf.
  if (std::isfinite(float(scale_ * options_.growth_factor))) scale_ = as_f32(scale_ * options_.growth_factor);
}

nlohmann::json GradScaler::state_dict() const {
  if (!options_.enabled) return nlohmann::json::object();  // PyTorch's disabled scaler saves {}
  return {{"scale", scale_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval},
          {"_growth_tracker", growth_tracker_}};
}

void GradScaler::check_state_dict(const nlohmann::json& state) const {
  GradScaler copy(options_);
  copy.load_state_dict(state);
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!options_.enabled) return;
  EMBER_CHECK(state.is_object() && !state.empty(),
              "GradScaler::load_state_dict: the state is empty or not an object ({}); a disabled scaler saves {{}}",
              state.dump());
  auto number = [&](const char* key) {
    EMBER_CHECK(state.contains(key), "GradScaler::load_state_dict: missing key \"{}\" in {}", key, state.dump());
    EMBER_CHECK(state[key].is_number(), "GradScaler::load_state_dict: \"{}\" must be a number, got {}", key,
                state[key].dump());
    return state[key].get<double>();
  };
  auto integer = [&](const char* key) {
    EMBER_CHECK(state.contains(key), "GradScaler::load_state_dict: missing key \"{}\" in {}", key, state.dump());
    EMBER_CHECK(state[key].is_number_integer(), "GradScaler::load_state_dict: \"{}\" must be an integer, got {}",
                key, state[key].dump());
    return state[key].get<int64_t>();
  };
  GradScalerOptions loaded = options_;
  loaded.init_scale = number("scale");
  loaded.growth_factor = number("growth_factor");
  loaded.backoff_factor = number("backoff_factor");
  loaded.growth_interval = integer("growth_interval");
  const int64_t growth_tracker = integer("_growth_tracker");
  check_options(loaded, "GradScaler::load_state_dict");
  EMBER_CHECK(growth_tracker >= 0 && growth_tracker < loaded.growth_interval,
              "GradScaler::load_state_dict: _growth_tracker must be in [0, growth_interval = {}), got {}",
              loaded.growth_interval, growth_tracker);
  options_ = loaded;
  scale_ = as_f32(loaded.init_scale);
  growth_tracker_ = growth_tracker;
  // What was unscaled or stepped belongs to the iteration the loaded state replaces.
  found_inf_.clear();
  stepped_.clear();
  skipped_in_a_row_ = 0;
}

}  // namespace ember::distributed
