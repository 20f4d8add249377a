// Fuzzes the store server's side of the wire protocol (distributed/store/,
// Notes [Store protocol] and [Store authentication]): per input, a fresh
// TcpStoreServer on loopback, and one connection that sends the input while
// reading whatever comes back, then half-closes. Input byte 0, bit 0: whether
// the connection first completes the handshake (the rest is then frames), or
// the rest is the handshake answer itself. The server must close the
// connection by itself, keep its memory within a bound of what was sent (never
// making room for a length it was only announced), and afterwards still
// serve a well-formed client. The server's state (keys set) is per input, so a
// reproducer replays alone. Seeds: corpus/store_wire/ (make_seeds.cpp).
#include <netinet/in.h>
#include <poll.h>
#include <sanitizer/allocator_interface.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <span>

#include "distributed/store/auth.h"
#include "distributed/store/tcp_store.h"
#include "fuzz/fuzz_support.h"

using namespace ember;
using namespace ember::distributed;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "fuzz-token";
constexpr auto kDeadline = std::chrono::seconds(5);  // far beyond a healthy exchange on loopback

// ---------------------------------------------------------------------------
// Heap accounting: the bytes live on the heap (every thread, the server's
// included) and their peak since the last reset, from ASan's allocator hooks.

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

void on_malloc(const volatile void*, size_t size) {
  const int64_t now = live_bytes.fetch_add(int64_t(size)) + int64_t(size);
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

void on_free(const volatile void* pointer) {
  live_bytes.fetch_sub(int64_t(__sanitizer_get_allocated_size(const_cast<const void*>(pointer))));
}

// ---------------------------------------------------------------------------
// The raw peer.

class Socket {
 public:
  explicit Socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    FUZZ_REQUIRE(fd_ >= 0, "socket failed: {}", std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const auto connect = [&] { return ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address); };
    // An interrupted connect goes on by itself; calling again waits for it (EALREADY) or finds it made (EISCONN).
    int result = connect();
    while (result != 0 && (errno == EINTR || errno == EALREADY)) result = connect();
    FUZZ_REQUIRE(result == 0 || errno == EISCONN, "cannot connect to the store: {}", std::strerror(errno));
    timeval limit{.tv_sec = 5, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// libFuzzer's SIGALRM (its -timeout check, every few seconds) interrupts
// blocking calls: a socket with a receive timeout returns EINTR even under
// SA_RESTART (signal(7)), so every blocking call here retries on it.

void receive_exactly(int fd, std::span<uint8_t> out, const char* what) {
  for (size_t got = 0; got < out.size();) {
    const ssize_t count = ::recv(fd, out.data() + got, out.size() - got, 0);
    if (count < 0 && errno == EINTR) continue;
    FUZZ_REQUIRE(count > 0, "the server sent no {} ({})", what, count == 0 ? "closed" : std::strerror(errno));
    got += size_t(count);
  }
}

void send_all(int fd, std::span<const uint8_t> bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t count = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (count < 0 && errno == EINTR) continue;
    FUZZ_REQUIRE(count > 0, "send failed: {}", std::strerror(errno));
    sent += size_t(count);
  }
}

void authenticate(int fd) {
  std::array<uint8_t, auth::kHelloBytes> hello{};
  receive_exactly(fd, hello, "greeting");
  auth::Nonce server_nonce;
  std::copy(hello.begin() + auth::kMagic.size(), hello.end(), server_nonce.begin());
  const auth::Proof proof = auth::client_proof(kToken, server_nonce);
  std::array<uint8_t, auth::kAnswerBytes> answer{};
  std::copy(proof.begin(), proof.end(), answer.begin());
  send_all(fd, answer);
  std::array<uint8_t, 1 + auth::kProofBytes> verdict{};
  receive_exactly(fd, verdict, "verdict");
  FUZZ_REQUIRE(verdict[0] == auth::kAccepted, "the server refused the right token");
}

// Sends `payload` while draining the replies, so that a server that waits for
// us to read cannot stall us; then half-closes and reads until the server
// closes the connection, which it must do within the deadline.
void exchange(int fd, std::span<const uint8_t> payload) {
  const auto deadline = Clock::now() + kDeadline;
  std::array<uint8_t, 1 << 16> sink;
  size_t sent = 0;
  bool writing = true;
  while (true) {
    if (writing && sent == payload.size()) {
      ::shutdown(fd, SHUT_WR);
      writing = false;
    }
    pollfd entry{.fd = fd, .events = short(POLLIN | (writing ? POLLOUT : 0)), .revents = 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    FUZZ_REQUIRE(left > 0, "the server neither closed the connection nor read the input within {} s",
                 kDeadline.count());
    const int ready = ::poll(&entry, 1, int(left));
    if (ready < 0 && errno == EINTR) continue;
    FUZZ_REQUIRE(ready >= 0, "poll failed: {}", std::strerror(errno));
    if (entry.revents & POLLIN || entry.revents & (POLLERR | POLLHUP)) {
      const ssize_t count = ::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT);
      if (count == 0 || (count < 0 && errno == ECONNRESET)) return;  // closed by the server
    }
    if (writing && entry.revents & POLLOUT) {
      const ssize_t count = ::send(fd, payload.data() + sent, payload.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (count > 0) sent += size_t(count);
      if (count < 0 && (errno == EPIPE || errno == ECONNRESET)) writing = false;  // the server hung up first
    }
  }
}

// The server's memory may grow with what it was sent (the bytes themselves,
// a value kept, a reply), by a small factor for buffers that double, plus its
// fixed receive chunk; never with the lengths it was told.
int64_t memory_bound(size_t sent) { return (int64_t(1) << 20) + int64_t(8 * sent); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FUZZ_REQUIRE(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0, "cannot install malloc hooks");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool authenticated = data[0] & 1;
  const std::span<const uint8_t> payload(data + 1, size - 1);
  TcpStoreServer server({.token = kToken});
  {
    Socket peer(server.port());
    if (authenticated) authenticate(peer.fd());
    const int64_t baseline = live_bytes.load();
    peak_bytes.store(baseline);
    exchange(peer.fd(), payload);
    const int64_t growth = peak_bytes.load() - baseline;
    FUZZ_REQUIRE(growth <= memory_bound(payload.size()), "the heap grew by {} bytes for {} bytes sent (bound {})",
                 growth, payload.size(), memory_bound(payload.size()));
  }
  try {
    TcpStore client({.host = "127.0.0.1", .port = server.port(), .token = kToken, .timeout = kDeadline});
    client.set("fuzz/after", "still serving");
    FUZZ_REQUIRE(client.get_string("fuzz/after") == "still serving", "the server lost a value");
    FUZZ_REQUIRE(client.num_keys() >= 1, "the server counts no keys after a set");
  } catch (const Error& error) {
    fuzz::fail(fmt::format("a well-formed client is not served after the input: {}", error.what()));
  }
  return 0;
}
