// Whole lines from a worker's output pipe to the launcher's terminal or a log
// file: `ember launch` (tools/supervisor.cpp) feeds each pipe's bytes in as
// they arrive and writes every complete line with one write(2), prefixed with
// "[rank N] ", so lines of different ranks never mix within a line.
// Tests: tests/distributed/test_launch.cpp (PrefixesWholeLines, LogDir).
#pragma once

#include <string>
#include <string_view>

namespace ember::launch {

// Writes all of `text` to `fd`, retrying short writes. Errors (a closed
// terminal, a full disk) are ignored: the launcher keeps draining its
// workers' pipes either way, so that no worker blocks on a full pipe.
void write_fully(int fd, std::string_view text);

// The launcher's own messages: "ember launch: <message>" on stderr, one write.
void say(const std::string& message);

class LineWriter {
 public:
  LineWriter(int target_fd, std::string prefix) : target_fd_(target_fd), prefix_(std::move(prefix)) {}

  // Writes every line that `data` completes; keeps the unfinished rest.
  void append(std::string_view data);
  // Writes the unfinished last line, if any, with a newline (at end of stream).
  void finish();

  // A line longer than this is written in pieces of this size (each with the
  // prefix), so that a stream without newlines cannot grow without bound.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

 private:
  void write_line(std::string_view line);
  int target_fd_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace ember::launch
