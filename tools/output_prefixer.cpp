// See output_prefixer.h.
#include "output_prefixer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <vector>

namespace ember::launch {
namespace {

// The sinks by descriptor (two descriptors of one pipe share one); they live
// until forgotten or until the launcher exits.
std::map<int, std::shared_ptr<OutputSink>>& sinks() {
  static std::map<int, std::shared_ptr<OutputSink>> by_fd;
  return by_fd;
}

}  // namespace

OutputSink::OutputSink(int fd) : fd_(fd), write_fd_(fd) {
  struct stat info {};
  // A regular file takes what it is given without waiting for a reader.
  if (fstat(fd, &info) != 0 || S_ISREG(info.st_mode)) return;
  if (S_ISSOCK(info.st_mode)) {
    socket_ = true;
    return;
  }
  // A pipe or terminal gets a non-blocking description of its own: setting
  // O_NONBLOCK on the inherited one would change it for every process that
  // shares it (the shell, the other commands of a pipeline). Where that
  // cannot be opened, writes block as they always did.
  const int own = open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (own >= 0) write_fd_ = own;
  whole_lines_ = true;
}

OutputSink::~OutputSink() {
  if (write_fd_ != fd_) close(write_fd_);
}

void OutputSink::push(std::string_view bytes) {
  if (broken_) return;
  buffer_.append(bytes);
  flush();
}

// Up to PIPE_BUF bytes of whole lines (or one longer line), so that each
// write to a pipe is all or nothing and lines stay whole beside the other
// writers of the same pipe (the launcher's stderr is often its stdout too).
size_t OutputSink::next_chunk() const {
  const std::string_view rest = std::string_view(buffer_).substr(written_);
  if (!whole_lines_ || rest.size() <= PIPE_BUF) return rest.size();
  const size_t last_newline = rest.rfind('\n', PIPE_BUF - 1);
  if (last_newline != std::string_view::npos) return last_newline + 1;
  const size_t newline = rest.find('\n');
  return newline == std::string_view::npos ? rest.size() : newline + 1;
}

void OutputSink::write_out() {
  flush();
  if (!pending()) return;
  // A description of the same target without O_NONBLOCK: this write waits.
  const ssize_t wrote = write(fd_, buffer_.data() + written_, pending_bytes());
  (void)wrote;  // as with every write here, a failed target loses the bytes
  discard();
}

void OutputSink::flush() {
  while (pending() && !broken_) {
    const char* data = buffer_.data() + written_;
    const ssize_t wrote = socket_ ? send(write_fd_, data, pending_bytes(), MSG_DONTWAIT | MSG_NOSIGNAL)
                                  : write(write_fd_, data, next_chunk());
    if (wrote > 0) {
      written_ += size_t(wrote);
    } else if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else if (!(wrote < 0 && errno == EINTR)) {
      broken_ = true;
    }
  }
  if (broken_ || !pending()) {
    discard();
  } else if (written_ >= buffer_.size() / 2) {
    buffer_.erase(0, written_);  // at most once per half a buffer written: linear overall
    written_ = 0;
  }
}

void OutputSink::discard() {
  buffer_.clear();
  written_ = 0;
}

// Descriptors of one pipe or terminal (`2>&1 | tee`: stdout and stderr on
// one pipe) share a sink: two sinks would each write part of a long line and
// let the other's bytes in between, where one writes its lines whole, one
// after another. (A regular file is written whole, blocking, by each.)
OutputSink& output_sink(int fd) {
  std::shared_ptr<OutputSink>& sink = sinks()[fd];
  if (sink) return *sink;
  struct stat target {};
  if (fstat(fd, &target) == 0 && !S_ISREG(target.st_mode)) {
    for (const auto& [other_fd, other] : sinks()) {
      struct stat seen {};
      if (other && other_fd != fd && fstat(other_fd, &seen) == 0 && seen.st_dev == target.st_dev &&
          seen.st_ino == target.st_ino)
        return *(sink = other);
    }
  }
  sink = std::shared_ptr<OutputSink>(new OutputSink(fd));
  return *sink;
}

void forget_output_sink(int fd) {
  auto found = sinks().find(fd);
  if (found == sinks().end()) return;
  found->second->flush();
  sinks().erase(found);  // the sink goes with its last descriptor
}

void flush_outputs(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::vector<pollfd> waiting;
    std::vector<OutputSink*> pending;
    for (auto& [fd, sink] : sinks()) {
      sink->flush();
      if (!sink->pending()) continue;
      waiting.push_back(pollfd{sink->poll_fd(), POLLOUT, 0});
      pending.push_back(sink.get());
    }
    if (pending.empty()) return;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      for (OutputSink* sink : pending) sink->discard();
      return;
    }
    poll(waiting.data(), waiting.size(), int(std::min<long long>(left.count(), 60'000)));
  }
}

namespace {
int supervising = 0;  // SupervisedOutput objects alive
}  // namespace

SupervisedOutput::SupervisedOutput() { ++supervising; }
SupervisedOutput::~SupervisedOutput() { --supervising; }

void say(const std::string& message) {
  OutputSink& sink = output_sink(2);
  sink.push("ember launch: " + message + "\n");
  if (supervising == 0) sink.write_out();
}

void LineWriter::write_line(std::string_view line) {
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  sink_->push(out);
}
void LineWriter::append(std::string_view data) {
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(data);
      while (pending_.size() >= kMaxLineBytes) {
        write_line(std::string_view(pending_).substr(0, kMaxLineBytes));
        pending_.erase(0, kMaxLineBytes);
      }
      return;
    }
    if (pending_.empty()) {
      write_line(data.substr(0, newline));
    } else {
      pending_.append(data.substr(0, newline));
      write_line(pending_);
      pending_.clear();
    }
    data.remove_prefix(newline + 1);
  }
}

void LineWriter::finish() {
  if (pending_.empty()) return;
  write_line(pending_);
  pending_.clear();
}

}  // namespace ember::launch
