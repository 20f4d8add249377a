// The store's frames and the socket helpers both ends use (Note [Store
// protocol] in distributed/README.md). Called by tcp_store.cpp only; tested
// through the store in tests/distributed/test_store.cpp.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed::wire {

using Clock = std::chrono::steady_clock;

// Deadlines further out than this are treated as this far, so that
// now + timeout cannot overflow for timeouts like milliseconds::max().
inline constexpr milliseconds kLongestWait{int64_t(365) * 24 * 3600 * 1000};
Clock::time_point deadline_after(milliseconds timeout);
std::string seconds_text(milliseconds timeout);  // "0.2 s", "300 s", for error messages

enum class Op : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kDelete, kNumKeys };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Every frame: u32 length of what follows, then u8 op (or status), u64 request id, fields.
inline constexpr size_t kLengthBytes = 4;
inline constexpr size_t kHeaderBytes = 1 + 8;
// The largest body either end accepts: a set of the largest key and value, or
// a wait on kMaxWaitKeys of the largest keys, whichever is larger.
inline constexpr size_t kMaxBodyBytes =
    kHeaderBytes + 8 + 4 + std::max(kMaxKeyBytes + 4 + kMaxValueBytes, kMaxWaitKeys * (4 + kMaxKeyBytes));

// A frame that breaks the layout or a bound, or a failed socket: the server
// closes that connection; the client drops its connection and reports it.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// Appends little-endian fields to a frame; finish() fills in the length
// prefix, counting `trailing_bytes` the caller sends right after the frame
// (a large value, sent from where it is instead of copied in).
class Encoder {
 public:
  Encoder(uint8_t op_or_status, uint64_t request_id);
  void u8(uint8_t value);
  void u32(uint32_t value);
  void u64(uint64_t value);
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void bytes(std::span<const uint8_t> value);
  void string(std::string_view value);
  Bytes finish(size_t trailing_bytes = 0) &&;

 private:
  Bytes frame_;
};

// Reads fields from one frame's body, checking each length against what is
// left and against its bound before anything is copied.
class Decoder {
 public:
  explicit Decoder(std::span<const uint8_t> body) : body_(body) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::span<const uint8_t> bytes(size_t max_bytes, const char* what);
  std::string key() { auto key = bytes(kMaxKeyBytes, "key"); return {key.begin(), key.end()}; }
  std::vector<std::string> keys();  // u32 count (at most kMaxWaitKeys), then that many keys
  void expect_end() const;

 private:
  std::span<const uint8_t> take(size_t count);
  std::span<const uint8_t> body_;
  size_t offset_ = 0;
};

uint32_t read_u32(const uint8_t* data);

// Sockets.
std::string errno_text(int error);
std::string peer_name(const sockaddr* address, socklen_t length);  // "127.0.0.1:5000", "[::1]:5000"
void set_nonblocking(int fd);
void set_nodelay(int fd);

// Blocking-with-deadline I/O on a non-blocking socket, for the client. Both
// return false when the deadline passes; they throw ProtocolError when the
// peer closes the connection or the socket fails.
bool send_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline);
bool recv_all(int fd, std::span<uint8_t> data, Clock::time_point deadline);

}  // namespace ember::distributed::wire
