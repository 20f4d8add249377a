// The store's frame encoding and socket helpers (Note [Store protocol]).
// Called by tcp_store.cpp; tested through tests/distributed/test_store.cpp.
#include "distributed/store/wire.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace ember::distributed::wire {

Clock::time_point deadline_after(milliseconds timeout) {
  return Clock::now() + std::clamp(timeout, milliseconds(0), kLongestWait);
}

std::string seconds_text(milliseconds timeout) { return fmt::format("{:g} s", double(timeout.count()) / 1000.0); }

Encoder::Encoder(uint8_t op_or_status, uint64_t request_id) {
  frame_.resize(kLengthBytes);  // filled in by finish()
  u8(op_or_status);
  u64(request_id);
}

void Encoder::u8(uint8_t value) { frame_.push_back(value); }

void Encoder::u32(uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) frame_.push_back(uint8_t(value >> shift));
}

void Encoder::u64(uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) frame_.push_back(uint8_t(value >> shift));
}

void Encoder::bytes(std::span<const uint8_t> value) {
  EMBER_ASSERT(value.size() <= kMaxValueBytes, "store frame field of {} bytes", value.size());
  u32(uint32_t(value.size()));
  frame_.insert(frame_.end(), value.begin(), value.end());
}

void Encoder::string(std::string_view value) {
  bytes({reinterpret_cast<const uint8_t*>(value.data()), value.size()});
}

Bytes Encoder::finish(size_t trailing_bytes) && {
  const size_t body = frame_.size() - kLengthBytes + trailing_bytes;
  EMBER_ASSERT(body <= kMaxBodyBytes, "store frame of {} bytes", body);
  for (size_t i = 0; i < kLengthBytes; ++i) frame_[i] = uint8_t(body >> (8 * i));
  return std::move(frame_);
}

uint32_t read_u32(const uint8_t* data) {
  return uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 | uint32_t(data[3]) << 24;
}

std::span<const uint8_t> Decoder::take(size_t count) {
  if (count > body_.size() - offset_)
    throw ProtocolError(fmt::format("frame ends after {} bytes, a field needs {} more", body_.size(), count));
  auto field = body_.subspan(offset_, count);
  offset_ += count;
  return field;
}

uint8_t Decoder::u8() { return take(1)[0]; }

uint32_t Decoder::u32() { return read_u32(take(4).data()); }

uint64_t Decoder::u64() {
  auto field = take(8);
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = value << 8 | field[i];
  return value;
}

std::span<const uint8_t> Decoder::bytes(size_t max_bytes, const char* what) {
  const uint32_t length = u32();
  if (length > max_bytes) throw ProtocolError(fmt::format("{} of {} bytes (limit {})", what, length, max_bytes));
  return take(length);
}

std::vector<std::string> Decoder::keys() {
  const uint32_t count = u32();
  if (count > kMaxWaitKeys) throw ProtocolError(fmt::format("{} keys in one request (limit {})", count, kMaxWaitKeys));
  std::vector<std::string> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(key());
  return keys;
}

void Decoder::expect_end() const {
  if (offset_ != body_.size())
    throw ProtocolError(fmt::format("{} unexpected bytes at the end of a frame", body_.size() - offset_));
}

std::string errno_text(int error) {
  char buffer[256];
  return strerror_r(error, buffer, sizeof buffer);  // the GNU strerror_r returns the text
}

std::string peer_name(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(address, length, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "(unknown address)";
  if (address->sa_family == AF_INET6) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  EMBER_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "store: fcntl(O_NONBLOCK) failed: {}",
              errno_text(errno));
}

void set_nodelay(int fd) {
  // Requests are small and answered at once; Nagle's delay would add up to
  // 40 ms to every round trip.
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes (false).
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd entry{.fd = fd, .events = events, .revents = 0};
    const int ready = poll(&entry, 1, int(std::min<int64_t>(left, 60'000)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) throw ProtocolError(fmt::format("poll failed: {}", errno_text(errno)));
  }
}

}  // namespace

bool send_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t count = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (count > 0) {
      sent += size_t(count);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLOUT, deadline)) return false;
    } else if (errno != EINTR) {
      throw ProtocolError(fmt::format("send failed: {}", errno_text(errno)));
    }
  }
  return true;
}

bool recv_all(int fd, std::span<uint8_t> data, Clock::time_point deadline) {
  size_t received = 0;
  while (received < data.size()) {
    const ssize_t count = recv(fd, data.data() + received, data.size() - received, 0);
    if (count > 0) {
      received += size_t(count);
    } else if (count == 0) {
      throw ProtocolError("the connection was closed");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return false;
    } else if (errno != EINTR) {
      throw ProtocolError(fmt::format("recv failed: {}", errno_text(errno)));
    }
  }
  return true;
}

}  // namespace ember::distributed::wire
