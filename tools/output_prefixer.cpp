// See output_prefixer.h.
#include "output_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace ember::launch {

void write_fully(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t written = write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    text.remove_prefix(size_t(written));
  }
}

void say(const std::string& message) { write_fully(2, "ember launch: " + message + "\n"); }

void LineWriter::write_line(std::string_view line) {
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  write_fully(target_fd_, out);
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
