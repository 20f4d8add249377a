// Accelerator's trackers: init_trackers, log and end_training, on the main
// process only (Accelerate's rule: one process writes the metrics files).
#include "distributed/accelerator/accelerator.h"
#include "distributed/accelerator/accelerator_state.h"

namespace ember {

void Accelerator::init_trackers(const std::string& project_name, const nlohmann::json& config) {
  if (!is_main_process()) return;
  EMBER_CHECK(state_->trackers.empty(), "Accelerator::init_trackers: the trackers are already running (project '{}')",
              project_name);
  for (const std::string& name : state_->options.log_with) {
    auto tracker = distributed::make_tracker(
        name, {.project_name = project_name, .logging_dir = state_->options.project_dir, .clock = nullptr});
    tracker->store_init_configuration(config);
    state_->trackers.push_back(std::move(tracker));
  }
}

void Accelerator::log(const distributed::TrackerValues& values, std::optional<int64_t> step) {
  for (const auto& tracker : state_->trackers) tracker->log(values, step);
}

void Accelerator::end_training() {
  for (const auto& tracker : state_->trackers) tracker->finish();
  state_->trackers.clear();
  wait_for_everyone();
}

}  // namespace ember
