// Accelerator's trackers: init_trackers, log and end_training, on the main
// process only (Accelerate's rule: one process writes the metrics files).
#include "distributed/accelerator/accelerator.h"

#include <fmt/ranges.h>

#include "distributed/accelerator/accelerator_state.h"

namespace ember {

void Accelerator::init_trackers(const std::string& project_name, const nlohmann::json& config) {
  if (!is_main_process()) return;
  EMBER_CHECK(state_->trackers.empty(), "Accelerator::init_trackers: the trackers are already running (project '{}')",
              project_name);
  // All of them or none: a call that fails can be made again once its cause is fixed.
  std::vector<std::unique_ptr<distributed::Tracker>> trackers;
  for (const std::string& name : state_->options.log_with) {
    auto tracker = distributed::make_tracker(
        name, {.project_name = project_name, .logging_dir = state_->options.project_dir, .clock = nullptr});
    tracker->store_init_configuration(config);
    trackers.push_back(std::move(tracker));
  }
  state_->trackers = std::move(trackers);
}

// Metrics logged where no tracker runs would be lost without a word (Accelerate
// drops them): with log_with set, the main process needs init_trackers first.
void Accelerator::log(const distributed::TrackerValues& values, std::optional<int64_t> step) {
  EMBER_CHECK(!is_main_process() || state_->options.log_with.empty() || !state_->trackers.empty(),
              "Accelerator::log: no tracker is running: call init_trackers before logging (and log nothing after "
              "end_training); log_with is {}",
              fmt::join(state_->options.log_with, ", "));
  for (const auto& tracker : state_->trackers) tracker->log(values, step);
}

void Accelerator::end_training() {
  for (const auto& tracker : state_->trackers) tracker->finish();
  state_->trackers.clear();
  wait_for_everyone();
}

}  // namespace ember
