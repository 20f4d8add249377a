// GradScaler: dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler.
// fp16 gradients of small losses underflow to zero; scaling the loss by S
// before backward scales every gradient by S, and unscale_ divides them by S
// again (in f32 master gradients) before the optimizer reads them (Note
// [Loss scaling] in distributed/README.md: why fp16 needs it and bf16 not). When any
// gradient is inf or NaN the step is skipped and S halves; after
// growth_interval clean steps in a row S doubles. With a process group, the
// inf/NaN flag is all-reduced (max) so that every rank skips the same steps.
// S never backs off below min_scale, and inf/NaN gradients with S already
// there are an error: a loss that is NaN at every scale would otherwise be
// skipped silently forever (Note [Loss scaling across ranks]).
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
#include <set>
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
  // The floor: backing off stops here, and inf/NaN gradients at this scale
  // make update() throw. 1 as DeepSpeed's min_loss_scale; 0 turns the floor
  // off (PyTorch's scaler, which has none), leaving as an error only a
  // back-off below 2^-128, whose f32 reciprocal (used to unscale) is inf.
  // The scale (init_scale, a loaded "scale") must be an f32 value above
  // 2^-128 and at most f32's largest.
  double min_scale = 1.0;
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
  // whether it stepped. A second step of the same optimizer before update()
  // is an error, as in PyTorch (it would step on gradients unscaled once).
  bool step(optim::Optimizer& optimizer);
  // Backs the scale off (not below min_scale) if any optimizer unscaled since
  // the last update found inf/NaN, else counts a clean step and grows it every
  // growth_interval; forgets which optimizers were unscaled. An error when
  // inf/NaN was found with the scale already at min_scale.
  void update();

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval,
  // _growth_tracker (min_scale is not saved: it is set in code, as `enabled`).
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);
  // Throws what load_state_dict(state) would throw; changes nothing.
  void check_state_dict(const nlohmann::json& state) const;

 private:
  GradScalerOptions options_;
  ProcessGroup* group_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_in_a_row_ = 0;  // for the floor's error message
  std::map<const optim::Optimizer*, bool> found_inf_;  // optimizers unscaled since the last update
  std::set<const optim::Optimizer*> stepped_;           // optimizers step() ran for since the last update
};

}  // namespace ember::distributed
