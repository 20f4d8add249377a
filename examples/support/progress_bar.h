// A small progress bar for the examples' training loops (Debian ships no
// progress-bar library). On a terminal it redraws one line:
//   epoch 2/5 [=========>          ] 45% step 90/200 loss 0.3120 41.2 it/s ETA 3s
// Elsewhere (a log file, CI) it prints a plain line every tenth of the run.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ember::examples {

class ProgressBar {
 public:
  explicit ProgressBar(int64_t total_steps) : total_(total_steps), start_(Clock::now()), tty_(isatty(fileno(stdout))) {}

  // Call after each step; `label` prefixes the bar (e.g. "epoch 2/5"), metrics follow it.
  void update(int64_t step, const std::string& label, const std::vector<std::pair<std::string, double>>& metrics) {
    double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    double rate = elapsed > 0 ? double(step) / elapsed : 0.0;
    double eta = rate > 0 ? double(total_ - step) / rate : 0.0;
    int percent = int(100 * step / std::max<int64_t>(total_, 1));
    bool last = step >= total_;
    if (!tty_ && !last && percent / 10 == last_decile_) return;
    last_decile_ = percent / 10;

    std::string line = label + " ";
    if (tty_) {
      constexpr int kWidth = 24;
      int filled = kWidth * percent / 100;
      line += "[" + std::string(size_t(filled), '=') + (filled < kWidth ? ">" : "") +
              std::string(size_t(std::max(kWidth - filled - 1, 0)), ' ') + "] ";
    }
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, "%3d%% step %lld/%lld", percent, static_cast<long long>(step),
                  static_cast<long long>(total_));
    line += buffer;
    for (const auto& [name, value] : metrics) {
      std::snprintf(buffer, sizeof buffer, " %s %.4f", name.c_str(), value);
      line += buffer;
    }
    std::snprintf(buffer, sizeof buffer, " %.1f it/s ETA %.0fs", rate, eta);
    line += buffer;
    std::printf(tty_ ? "\r%s\033[K%s" : "%s%s\n", line.c_str(), tty_ && last ? "\n" : "");
    std::fflush(stdout);
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  Clock::time_point start_;
  bool tty_;
  int last_decile_ = -1;
};

}  // namespace ember::examples
