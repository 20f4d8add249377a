// Whole lines from a worker's output pipe to the launcher's terminal or a log
// file: `ember launch` (tools/supervisor.cpp) feeds each pipe's bytes in as
// they arrive and writes every complete line with one write(2), prefixed with
// "[rank N] ", so lines of different ranks never mix within a line. The
// bytes go through an OutputSink, which never blocks the supervisor.
// Tests: tests/distributed/test_launch.cpp (PrefixesWholeLines, LogDir,
// AStalledStdoutReaderDoesNotFreezeTheLauncher).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace ember::launch {

// What the launcher has for one of its outputs (its stdout, its stderr, a
// rank's log file), written without ever blocking: a reader of the
// launcher's stdout that stops reading must not keep it from serving
// signals and reaping workers (Note [Launcher supervision]). What the target
// does not take at once waits here; the supervisor polls poll_fd() for
// POLLOUT while pending(), and stops reading the pipes of the workers that
// feed a full() sink, so that the backpressure reaches those workers, not
// the launcher. A target that fails (a closed pipe, a full disk) drops what
// it is given: the launcher keeps draining its workers' pipes either way.
// Main thread only.
class OutputSink {
 public:
  void push(std::string_view bytes);  // queues the bytes and writes what the target takes now
  void flush();                       // writes what the target takes now
  int poll_fd() const { return write_fd_; }
  bool pending() const { return written_ < buffer_.size(); }
  size_t pending_bytes() const { return buffer_.size() - written_; }
  bool full() const { return pending_bytes() >= kMaxBufferedBytes; }
  void discard();
  // Writes what is pending, waiting for the target as long as it takes.
  void write_out();

  static constexpr size_t kMaxBufferedBytes = size_t(1) << 20;

  ~OutputSink();

 private:
  friend OutputSink& output_sink(int fd);
  explicit OutputSink(int fd);
  size_t next_chunk() const;
  int fd_;
  int write_fd_;          // fd_, or a non-blocking description of the same pipe or terminal
  bool socket_ = false;   // written with send(MSG_DONTWAIT): no description of its own needed
  bool whole_lines_ = false;  // a pipe or terminal: written in chunks of whole lines
  bool broken_ = false;
  std::string buffer_;
  size_t written_ = 0;    // of buffer_, from the front
};

// The sink of one of the launcher's descriptors, made on first use.
OutputSink& output_sink(int fd);
// Before `fd` is closed (a log file), so that a later descriptor of that number gets a fresh sink.
void forget_output_sink(int fd);
// Waits up to `limit` for every sink to be written out (the launcher's last
// words, after every worker is gone), then drops what is left.
void flush_outputs(std::chrono::milliseconds limit);

// While one exists (the supervision loop), say() only queues its message
// for the loop to write. Outside it there is no worker to serve, and the
// launcher's messages are written out at once, waiting for the reader: a stop
// signal that comes meanwhile stays pending for the loop (Note [Launcher
// supervision]).
class SupervisedOutput {
 public:
  SupervisedOutput();
  ~SupervisedOutput();
  SupervisedOutput(const SupervisedOutput&) = delete;
  SupervisedOutput& operator=(const SupervisedOutput&) = delete;
};

// The launcher's own messages: "ember launch: <message>" on stderr, through its sink.
void say(const std::string& message);

class LineWriter {
 public:
  LineWriter(int target_fd, std::string prefix) : sink_(&output_sink(target_fd)), prefix_(std::move(prefix)) {}
  OutputSink& sink() const { return *sink_; }

  // Writes every line that `data` completes; keeps the unfinished rest.
  void append(std::string_view data);
  // Writes the unfinished last line, if any, with a newline (at end of stream).
  void finish();

  // A line longer than this is written in pieces of this size (each with the
  // prefix), so that a stream without newlines cannot grow without bound.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

 private:
  void write_line(std::string_view line);
  OutputSink* sink_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace ember::launch
