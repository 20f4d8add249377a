// GradScaler: dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler.
// fp16 gradients of small losses underflow to zero; scaling the loss by S
// before backward scales every gradient by S, and unscale_ divides them by S
// again (in f32 master gradients) before the optimizer reads them. When any
// gradient is inf or NaN the step is skipped and S halves; after
// growth_interval clean steps in a row S doubles. With a process group, the
// inf/NaN flag is all-reduced (max) so that every rank skips the same steps.
//
//   GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);            // optional: before clipping
//   optim::clip_grad_norm_(params, 1.0);
//   scaler.step(optimizer);                // unscale_ if not done; step unless inf/NaN
//   scaler.update();
//
// The Accelerator drives it from its optimizer step hook instead of calling
// step(): unscale_ (unless the user did), found_inf, update.
// Tests: tests/distributed/test_grad_scaler.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace ember::distributed {

class ProcessGroup;

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  bool enabled = true;             // disabled: scale() returns the loss, step() just steps
};

class GradScaler {
 public:
  // `group`: when given (and of more than one rank), found_inf is agreed
  // across its ranks. The group must outlive the scaler.
  explicit GradScaler(GradScalerOptions options = {}, ProcessGroup* group = nullptr);

  bool is_enabled() const { return options_.enabled; }
  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }

  // loss * scale, in f32.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `optimizer`'s parameters by the scale in place
  // (one fused pass per gradient) and records whether any was inf/NaN.
  // A second call for the same optimizer before update() is an error.
  void unscale_(optim::Optimizer& optimizer);
  // Whether unscale_ ran for `optimizer` since the last update().
  bool is_unscaled(const optim::Optimizer& optimizer) const;
  // What unscale_ found for `optimizer` (agreed across the group's ranks); an
  // error when unscale_ has not run for it since the last update().
  bool found_inf(const optim::Optimizer& optimizer) const;
  // unscale_ unless done, then optimizer.step() unless found_inf; returns
  // whether it stepped.
  bool step(optim::Optimizer& optimizer);
  // Backs the scale off if any optimizer unscaled since the last update found
  // inf/NaN, else counts a clean step and grows it every growth_interval;
  // forgets which optimizers were unscaled.
  void update();

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  GradScalerOptions options_;
  ProcessGroup* group_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const optim::Optimizer*, bool> found_inf_;  // optimizers unscaled since the last update
};

}  // namespace ember::distributed
