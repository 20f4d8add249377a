// The job's key-value store: TcpStoreServer (one poll() thread over
// non-blocking sockets) and the TcpStore client. Frames are in wire.h, the
// handshake in auth.h; the design is in Notes [Store protocol] and [Store
// authentication] (distributed/README.md). Tests: tests/distributed/test_store.cpp.
#include "distributed/store/tcp_store.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "distributed/store/auth.h"
#include "distributed/store/wire.h"

namespace ember::distributed {

using wire::Clock;
using wire::deadline_after;
using wire::kLongestWait;
using wire::seconds_text;
using wire::Decoder;
using wire::Encoder;
using wire::Op;
using wire::ProtocolError;
using wire::Status;

namespace {

constexpr size_t kReadChunk = size_t(64) << 10;
constexpr size_t kMaxReadPerWakeup = size_t(8) << 20;  // then other connections get their turn
constexpr size_t kKeepBufferBytes = size_t(1) << 20;   // larger buffers are freed once drained

std::string_view as_text(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The body length a frame's prefix announces, checked before any room is made for it.
size_t announced_body(const uint8_t* prefix) {
  const uint32_t body = wire::read_u32(prefix);
  if (body > wire::kMaxBodyBytes)
    throw ProtocolError(fmt::format("frame of {} bytes announced (limit {})", body, wire::kMaxBodyBytes));
  if (body < wire::kHeaderBytes) throw ProtocolError(fmt::format("frame of {} bytes has no header", body));
  return body;
}

// One accepted socket and everything the server loop knows about it.
struct Connection {
  int fd = -1;
  std::string peer;
  bool authenticated = false;
  Clock::time_point handshake_deadline;
  auth::Nonce server_nonce{};
  Bytes in;  // received, not yet handled: [0, in_used)
  size_t in_used = 0;
  Bytes out;  // queued replies: [out_sent, out.size()) still to send
  size_t out_sent = 0;
  // A get or wait whose keys are not all set: answered when they are, or at the
  // deadline the client sent. While parked, nothing more is read from this peer.
  struct Parked {
    Op op;
    uint64_t id;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    size_t present = 0;  // keys[0, present) have been seen set: each set rechecks only the rest
  };
  std::optional<Parked> parked;
  bool resume = false;  // just unparked: frames buffered behind the parked one are due
  bool closed = false;

  bool sending() const { return out_sent < out.size(); }
};

}  // namespace

struct TcpStoreServer::State {
  StoreServerOptions options;
  int listen_fd = -1;
  int wake_fd = -1;  // an eventfd: the destructor's signal to stop
  int port = 0;
  std::atomic<int64_t> refused{0};
  std::unordered_map<std::string, Bytes> data;
  std::vector<std::unique_ptr<Connection>> connections;
  // Out of file descriptors, accept() fails while the listener stays readable:
  // pausing it keeps the loop from spinning until a connection closes.
  Clock::time_point accepts_paused_until{};
  std::thread thread;

  void listen_on_host();
  void run();
  void accept_all();
  void read_from(Connection& connection);
  void process(Connection& connection);
  bool handshake(Connection& connection, std::span<const uint8_t> answer);
  void handle(Connection& connection, std::span<const uint8_t> body, Bytes* frame);
  void park(Connection& connection, Op op, uint64_t id, std::vector<std::string> keys, milliseconds timeout);
  void answer(Connection& connection, bool timed_out);
  void wake_parked();
  void resume_unparked();
  void expire(Clock::time_point now);
  int poll_timeout_ms() const;
  void queue(Connection& connection, Bytes frame);
  void flush(Connection& connection);
  void resume_after_flush(Connection& connection);
  void close(Connection& connection, std::string_view why);
  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) { return data.contains(key); });
  }
  bool satisfied(Connection::Parked& parked) const {
    while (parked.present < parked.keys.size() && data.contains(parked.keys[parked.present])) ++parked.present;
    return parked.present == parked.keys.size();
  }
};

TcpStoreServer::TcpStoreServer(StoreServerOptions options) : state_(std::make_unique<State>()) {
  EMBER_CHECK(!options.token.empty(),
              "store server: empty token; every job needs a secret (make_job_token(), EMBER_STORE_TOKEN)");
  EMBER_CHECK(options.port >= 0 && options.port <= 65535, "store server: port {} is not in [0, 65535]", options.port);
  state_->options = std::move(options);
  state_->listen_on_host();
  state_->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state_->wake_fd < 0) {
    ::close(state_->listen_fd);
    EMBER_CHECK(false, "store server: eventfd failed: {}", wire::errno_text(errno));
  }
  state_->thread = std::thread([state = state_.get()] {
    try {
      state->run();
    } catch (const std::exception& error) {  // run() handles each connection's errors; this is the loop's own
      fmt::print(stderr, "ember store: server loop stopped: {}\n", error.what());
    }
  });
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = write(state_->wake_fd, &one, sizeof one);
  state_->thread.join();
  for (auto& connection : state_->connections)
    if (connection->fd >= 0) ::close(connection->fd);
  ::close(state_->listen_fd);
  ::close(state_->wake_fd);
}

int TcpStoreServer::port() const { return state_->port; }

int64_t TcpStoreServer::refused_connections() const { return state_->refused.load(); }

void TcpStoreServer::State::listen_on_host() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  const int resolved = getaddrinfo(options.host.c_str(), service.c_str(), &hints, &found);
  EMBER_CHECK(resolved == 0, "store server: cannot resolve host '{}': {}", options.host, gai_strerror(resolved));
  std::string last_error = "no address";
  for (addrinfo* address = found; address != nullptr && listen_fd < 0; address = address->ai_next) {
    const int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // restart on a port in TIME_WAIT
    if (bind(fd, address->ai_addr, address->ai_addrlen) == 0 && ::listen(fd, options.backlog) == 0) {
      listen_fd = fd;
    } else {
      last_error = wire::errno_text(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  EMBER_CHECK(listen_fd >= 0, "store server: cannot listen on {}:{}: {}", options.host, options.port, last_error);
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void TcpStoreServer::State::run() {
  std::vector<pollfd> polled;
  while (true) {
    polled.clear();
    polled.push_back({.fd = wake_fd, .events = POLLIN, .revents = 0});
    const bool accepting = Clock::now() >= accepts_paused_until;
    polled.push_back({.fd = listen_fd, .events = short(accepting ? POLLIN : 0), .revents = 0});
    for (const auto& connection : connections) {
      // Replies first: a peer that does not read its answers is not read from.
      short events = POLLRDHUP;
      if (connection->sending()) events |= POLLOUT;
      else if (!connection->parked) events |= POLLIN;
      polled.push_back({.fd = connection->fd, .events = events, .revents = 0});
    }
    if (poll(polled.data(), polled.size(), poll_timeout_ms()) < 0 && errno != EINTR) {
      fmt::print(stderr, "ember store: poll failed: {}\n", wire::errno_text(errno));
      std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    if (polled[0].revents != 0) return;
    const size_t polled_connections = polled.size() - 2;  // accept_all appends after these
    if (polled[1].revents & POLLIN) {
      try {
        accept_all();
      } catch (const std::exception& error) {  // no memory or no randomness for one more peer
        fmt::print(stderr, "ember store: cannot take a new connection: {}\n", error.what());
      }
    }
    for (size_t i = 0; i < polled_connections; ++i) {
      Connection& connection = *connections[i];
      const short events = polled[i + 2].revents;
      if (events == 0 || connection.closed) continue;
      try {
        if (events & POLLIN) read_from(connection);  // also sees the end of the stream
        else if (events & (POLLERR | POLLHUP | POLLRDHUP)) close(connection, "");
        else if (events & POLLOUT) resume_after_flush(connection);
      } catch (const std::exception& error) {  // ProtocolError, or no memory for a frame
        close(connection, error.what());
      }
    }
    resume_unparked();
    expire(Clock::now());
    resume_unparked();
    std::erase_if(connections, [](const auto& connection) { return connection->closed; });
  }
}

void TcpStoreServer::State::accept_all() {
  while (true) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      fmt::print(stderr, "ember store: accept failed: {}; not accepting for 100 ms\n", wire::errno_text(errno));
      accepts_paused_until = Clock::now() + milliseconds(100);
      return;
    }
    wire::set_nodelay(fd);
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->peer = wire::peer_name(reinterpret_cast<sockaddr*>(&address), length);
    connection->handshake_deadline = deadline_after(options.handshake_timeout);
    connection->server_nonce = auth::random_nonce();
    Bytes hello(auth::kMagic.begin(), auth::kMagic.end());
    hello.insert(hello.end(), connection->server_nonce.begin(), connection->server_nonce.end());
    queue(*connection, std::move(hello));
    connections.push_back(std::move(connection));
  }
}

void TcpStoreServer::State::read_from(Connection& connection) {
  size_t read_now = 0;
  while (!connection.closed && !connection.parked && !connection.sending() && read_now < kMaxReadPerWakeup) {
    // What this peer's next message needs.
    size_t target = auth::kAnswerBytes;
    if (connection.authenticated) {
      target = wire::kLengthBytes;
      if (connection.in_used >= wire::kLengthBytes) target += announced_body(connection.in.data());
    }
    // Room grows by doubling with what actually arrived, never to an announced
    // length at once, so a peer that claims a gigabyte and sends nothing costs nothing.
    const size_t wanted = std::max(connection.in_used + kReadChunk, std::min(target, 2 * connection.in_used));
    if (connection.in.size() < wanted) connection.in.resize(wanted);
    const ssize_t count =
        recv(connection.fd, connection.in.data() + connection.in_used, connection.in.size() - connection.in_used, 0);
    if (count == 0) return close(connection, connection.authenticated ? "" : "closed before authenticating");
    if (count < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == ECONNRESET) return close(connection, "");  // a peer that hung up with replies unread
      throw ProtocolError(fmt::format("recv failed: {}", wire::errno_text(errno)));
    }
    connection.in_used += size_t(count);
    read_now += size_t(count);
    process(connection);
  }
}

// Handles the complete messages in the connection's buffer, up to a parked
// request or a reply the socket has not taken yet: a peer that sends requests
// without reading the replies gets no more than one reply's worth of our memory.
void TcpStoreServer::State::process(Connection& connection) {
  size_t consumed = 0;
  while (!connection.closed && !connection.parked && !connection.sending()) {
    std::span<const uint8_t> pending(connection.in.data() + consumed, connection.in_used - consumed);
    if (!connection.authenticated) {
      if (pending.size() < auth::kAnswerBytes) break;
      if (!handshake(connection, pending.first(auth::kAnswerBytes))) return;
      consumed += auth::kAnswerBytes;
      continue;
    }
    if (pending.size() < wire::kLengthBytes) break;
    const size_t body = announced_body(pending.data());
    if (pending.size() < wire::kLengthBytes + body) break;
    if (consumed == 0 && connection.in_used == wire::kLengthBytes + body && body > kKeepBufferBytes) {
      // A large frame alone in the buffer: handed over whole, so a set can
      // keep the buffer as the value instead of copying it.
      Bytes frame = std::exchange(connection.in, Bytes());
      connection.in_used = 0;
      handle(connection, std::span(frame).subspan(wire::kLengthBytes, body), &frame);
      continue;
    }
    handle(connection, pending.subspan(wire::kLengthBytes, body), nullptr);
    consumed += wire::kLengthBytes + body;
  }
  if (connection.closed || consumed == 0) return;
  std::copy(connection.in.begin() + consumed, connection.in.begin() + connection.in_used, connection.in.begin());
  connection.in_used -= consumed;
  if (connection.in.size() > kKeepBufferBytes && connection.in_used <= kReadChunk) {
    connection.in.resize(kReadChunk);
    connection.in.shrink_to_fit();
  }
}

bool TcpStoreServer::State::handshake(Connection& connection, std::span<const uint8_t> answer) {
  const auth::Proof expected = auth::client_proof(options.token, connection.server_nonce);
  if (!auth::proofs_equal(answer.first(auth::kProofBytes), expected)) {
    refused.fetch_add(1);  // before the verdict goes out, so a refused client already sees the count
    fmt::print(stderr, "ember store: refused connection from {}: wrong token\n", connection.peer);
    queue(connection, Bytes{auth::kRefused});
    close(connection, "");
    return false;
  }
  auth::Nonce client_nonce;
  std::copy_n(answer.begin() + auth::kProofBytes, auth::kNonceBytes, client_nonce.begin());
  const auth::Proof proof = auth::server_proof(options.token, client_nonce);
  Bytes verdict{auth::kAccepted};
  verdict.insert(verdict.end(), proof.begin(), proof.end());
  connection.authenticated = true;
  queue(connection, std::move(verdict));
  return true;
}

// `frame`, when given, is the buffer that holds exactly this request, which the request may take.
void TcpStoreServer::State::handle(Connection& connection, std::span<const uint8_t> body, Bytes* frame) {
  Decoder request(body);
  const auto op = Op(request.u8());
  const uint64_t id = request.u64();
  const auto reply = [&](Status status) { return Encoder(uint8_t(status), id); };
  switch (op) {
    case Op::kSet: {
      std::string key = request.key();
      const auto value = request.bytes(kMaxValueBytes, "value");
      request.expect_end();
      if (frame != nullptr) {
        const size_t size = value.size();
        frame->erase(frame->begin(), frame->begin() + (value.data() - frame->data()));  // value to the front
        frame->resize(size);
        data.insert_or_assign(std::move(key), std::move(*frame));
      } else {
        data.insert_or_assign(std::move(key), Bytes(value.begin(), value.end()));
      }
      queue(connection, reply(Status::kOk).finish());
      return wake_parked();
    }
    case Op::kGet:
    case Op::kWait: {
      const uint64_t timeout_ms = request.u64();
      std::vector<std::string> keys;
      if (op == Op::kGet) keys.push_back(request.key());
      else keys = request.keys();
      request.expect_end();
      const auto timeout = milliseconds(int64_t(std::min<uint64_t>(timeout_ms, kLongestWait.count())));
      return park(connection, op, id, std::move(keys), timeout);
    }
    case Op::kAdd: {
      std::string key = request.key();
      const int64_t delta = request.i64();
      request.expect_end();
      int64_t value = 0;
      if (auto found = data.find(key); found != data.end()) {
        const auto text = as_text(found->second);
        const auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
        if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) {
          auto error = reply(Status::kError);
          error.string(fmt::format("key '{}' holds {} bytes that are not a decimal integer", key, text.size()));
          return queue(connection, std::move(error).finish());
        }
      }
      if (__builtin_add_overflow(value, delta, &value)) {
        auto error = reply(Status::kError);
        error.string(fmt::format("adding {} to key '{}' overflows int64", delta, key));
        return queue(connection, std::move(error).finish());
      }
      const std::string text = std::to_string(value);  // decimal text, as PyTorch's store keeps counters
      data.insert_or_assign(std::move(key), Bytes(text.begin(), text.end()));
      auto ok = reply(Status::kOk);
      ok.i64(value);
      queue(connection, std::move(ok).finish());
      return wake_parked();
    }
    case Op::kCheck: {
      const auto keys = request.keys();
      request.expect_end();
      auto ok = reply(Status::kOk);
      ok.u8(has_all(keys) ? 1 : 0);
      return queue(connection, std::move(ok).finish());
    }
    case Op::kDelete: {
      const std::string key = request.key();
      request.expect_end();
      auto ok = reply(Status::kOk);
      ok.u8(data.erase(key) > 0 ? 1 : 0);
      return queue(connection, std::move(ok).finish());
    }
    case Op::kNumKeys: {
      request.expect_end();
      auto ok = reply(Status::kOk);
      ok.i64(int64_t(data.size()));
      return queue(connection, std::move(ok).finish());
    }
  }
  throw ProtocolError(fmt::format("unknown request type {}", int(op)));
}

void TcpStoreServer::State::park(Connection& connection, Op op, uint64_t id, std::vector<std::string> keys,
                                 milliseconds timeout) {
  connection.parked = Connection::Parked{.op = op, .id = id, .keys = std::move(keys), .deadline = deadline_after(timeout)};
  if (satisfied(*connection.parked)) answer(connection, /*timed_out=*/false);
}

// Replies to the parked request: the value (get) or nothing (wait), or the keys still missing.
void TcpStoreServer::State::answer(Connection& connection, bool timed_out) {
  const Connection::Parked parked = std::move(*connection.parked);
  connection.parked.reset();
  connection.resume = true;
  Encoder reply(uint8_t(timed_out ? Status::kTimeout : Status::kOk), parked.id);
  if (timed_out) {
    std::vector<const std::string*> missing;
    for (const auto& key : parked.keys)
      if (!data.contains(key)) missing.push_back(&key);
    reply.u32(uint32_t(missing.size()));
    for (const std::string* key : missing) reply.string(*key);
  } else if (parked.op == Op::kGet) {
    reply.bytes(data.at(parked.keys[0]));
  }
  queue(connection, std::move(reply).finish());
}

void TcpStoreServer::State::wake_parked() {
  for (auto& connection : connections)
    if (!connection->closed && connection->parked && satisfied(*connection->parked)) answer(*connection, false);
}

// Unparked connections may have further requests buffered; those may set keys
// and unpark others in turn, hence the loop.
void TcpStoreServer::State::resume_unparked() {
  for (bool any = true; any;) {
    any = false;
    for (auto& connection : connections) {
      if (!connection->resume || connection->closed) continue;
      connection->resume = false;
      any = true;
      try {
        process(*connection);
      } catch (const std::exception& error) {
        close(*connection, error.what());
      }
    }
  }
}

void TcpStoreServer::State::expire(Clock::time_point now) {
  for (auto& connection : connections) {
    if (connection->closed) continue;
    try {
      if (!connection->authenticated && now >= connection->handshake_deadline)
        close(*connection, fmt::format("not authenticated within {}", seconds_text(options.handshake_timeout)));
      else if (connection->parked && now >= connection->parked->deadline)
        answer(*connection, /*timed_out=*/true);
    } catch (const std::exception& error) {
      close(*connection, error.what());
    }
  }
}

int TcpStoreServer::State::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  if (accepts_paused_until > Clock::now()) next = accepts_paused_until;
  for (const auto& connection : connections) {
    if (!connection->authenticated) next = std::min(next.value_or(connection->handshake_deadline), connection->handshake_deadline);
    if (connection->parked) next = std::min(next.value_or(connection->parked->deadline), connection->parked->deadline);
  }
  if (!next) return -1;
  const auto left = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
  return int(std::clamp<int64_t>(left, 0, 60'000));
}

void TcpStoreServer::State::queue(Connection& connection, Bytes frame) {
  if (connection.closed) return;
  if (!connection.sending()) {
    connection.out = std::move(frame);
    connection.out_sent = 0;
  } else {
    connection.out.insert(connection.out.end(), frame.begin(), frame.end());
  }
  flush(connection);
}

// Sends what the socket takes now; the rest goes when poll() says it can. A
// failure closes this connection only (this runs for other peers' replies too).
void TcpStoreServer::State::flush(Connection& connection) {
  while (!connection.closed && connection.sending()) {
    const ssize_t count = send(connection.fd, connection.out.data() + connection.out_sent,
                               connection.out.size() - connection.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (count > 0) {
      connection.out_sent += size_t(count);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno == EPIPE || errno == ECONNRESET) {
      return close(connection, "");  // the peer hung up
    } else if (errno != EINTR) {
      return close(connection, fmt::format("send failed: {}", wire::errno_text(errno)));
    }
  }
  if (connection.out.capacity() > kKeepBufferBytes) Bytes().swap(connection.out);
  connection.out.clear();
  connection.out_sent = 0;
}

void TcpStoreServer::State::resume_after_flush(Connection& connection) {
  flush(connection);
  if (!connection.sending()) process(connection);
}

// Marks the connection closed (erased after this loop turn); `why` is logged
// unless empty (an ordinary hang-up).
void TcpStoreServer::State::close(Connection& connection, std::string_view why) {
  if (connection.closed) return;
  if (!why.empty()) fmt::print(stderr, "ember store: closed connection from {}: {}\n", connection.peer, why);
  ::close(connection.fd);
  connection.fd = -1;
  connection.closed = true;
  connection.parked.reset();
  Bytes().swap(connection.in);
  Bytes().swap(connection.out);
}

std::string make_job_token() {
  std::array<uint8_t, 32> secret{};
  auth::random_bytes(secret);
  std::string token;
  for (const uint8_t byte : secret) token += fmt::format("{:02x}", byte);
  return token;
}

}  // namespace ember::distributed
