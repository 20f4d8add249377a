// Grad mode and the GradSlot registry (see core/grad_hook.h).
#include "core/grad_hook.h"

#include "core/dispatch.h"

namespace ember {
namespace {
thread_local bool t_grad_mode = true;

std::vector<GradSlot*>& registry() {
  static std::vector<GradSlot*> slots;
  return slots;
}
}  // namespace

GradSlot in_place_grad("in_place");

bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode_enabled(bool enabled) { t_grad_mode = enabled; }

GradSlot::GradSlot(std::string_view name) : name_(name) { registry().push_back(this); }

const std::vector<GradSlot*>& GradSlot::all() {
  ensure_backends_registered();
  return registry();
}

bool GradSlot::has_recorder() const {
  ensure_backends_registered();
  return recorder_ != nullptr;
}

void GradSlot::record(const GradRecord& record) const {
  EMBER_CHECK(has_recorder(), "{}: this op has no gradient in this build (its input requires grad)", name_);
  recorder_(record);
}

}  // namespace ember
