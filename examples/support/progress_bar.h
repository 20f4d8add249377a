// A small progress bar for the examples' training loops (Debian ships no
// progress-bar library). On a terminal it redraws one line, at most ten times
// a second:
//   epoch 2/5 [=========>              ] 45% step 90/200 loss 0.3120 41.2 steps/s ETA 3s
// Elsewhere (a log file, CI) it prints the same fields as a plain line every
// tenth of the run, so logs stay short and greppable. Used by every example in
// examples/; the examples' ctests run it in plain mode.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ember::examples {

using Metrics = std::vector<std::pair<std::string, double>>;

class ProgressBar {
 public:
  enum class Mode { automatic, terminal, plain };
  struct Options {
    int64_t total_steps = 1;
    int64_t num_epochs = 0;  // 0: the label says nothing about epochs
    Mode mode = Mode::automatic;  // automatic: a bar when stdout is a terminal
    bool enabled = true;          // false: prints nothing (a distributed run's other processes)
  };

  explicit ProgressBar(Options options)
      : options_(options),
        start_(Clock::now()),
        terminal_(options.mode == Mode::terminal ||
                  (options.mode == Mode::automatic && isatty(fileno(stdout)))) {}
  explicit ProgressBar(int64_t total_steps) : ProgressBar(Options{.total_steps = total_steps}) {}

  // Call after each step (1-based, counted over the whole run); `epoch` is 1-based.
  void update(int64_t step, int64_t epoch, const Metrics& metrics) {
    update(step, fmt::format("epoch {}/{}", epoch, options_.num_epochs), metrics);
  }

  // Call after each step; `label` prefixes the line (e.g. "epoch 2/5"), metrics follow it.
  void update(int64_t step, const std::string& label, const Metrics& metrics) {
    if (!options_.enabled) return;
    auto now = Clock::now();
    int64_t total = std::max<int64_t>(options_.total_steps, 1);
    int percent = int(100 * std::min(step, total) / total);
    bool last = step >= total;
    if (terminal_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    if (!terminal_ && !last && percent / 10 == last_decile_) return;
    last_decile_ = percent / 10;
    last_draw_ = now;

    double elapsed = std::chrono::duration<double>(now - start_).count();
    double rate = elapsed > 0 ? double(step) / elapsed : 0.0;
    double eta = rate > 0 ? double(total - step) / rate : 0.0;
    std::string line = label;
    if (terminal_) {
      constexpr int kWidth = 24;
      int filled = kWidth * percent / 100;
      line.append(" [").append(size_t(filled), '=').append(filled < kWidth ? ">" : "");
      line.append(size_t(std::max(kWidth - filled - 1, 0)), ' ').append("]");
    }
    line += fmt::format(" {:3d}% step {}/{}", percent, step, total);
    for (const auto& [name, value] : metrics) line += fmt::format(" {} {:.4f}", name, value);
    line += fmt::format(" {:.1f} steps/s ETA {}", rate, format_duration(eta));
    std::printf(terminal_ ? "\r%s\033[K%s" : "%s%s\n", line.c_str(), terminal_ && last ? "\n" : "");
    drawn_ = terminal_ && !last;
    std::fflush(stdout);
  }

  // Prints a line of its own (an evaluation result, a sample) without tearing the bar.
  void message(const std::string& text) {
    if (!options_.enabled) return;
    std::printf("%s%s\n", drawn_ ? "\r\033[K" : "", text.c_str());
    drawn_ = false;
    std::fflush(stdout);
  }

  double elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  static std::string format_duration(double seconds) {
    auto whole = int64_t(seconds + 0.5);
    if (whole < 60) return fmt::format("{}s", whole);
    if (whole < 3600) return fmt::format("{}m{:02d}s", whole / 60, whole % 60);
    return fmt::format("{}h{:02d}m", whole / 3600, (whole / 60) % 60);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Options options_;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
  bool terminal_;
  bool drawn_ = false;  // a bar is on the current terminal line
  int last_decile_ = -1;
};

}  // namespace ember::examples
