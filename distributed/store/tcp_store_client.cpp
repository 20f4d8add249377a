// TcpStore, the store's client: one connection, one request at a time under
// the client's mutex, every wait bounded (Note [Store protocol]); the server is
// in tcp_store.cpp. Tests: tests/distributed/test_store.cpp.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "distributed/store/auth.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/wire.h"

namespace ember::distributed {

using wire::Clock;
using wire::deadline_after;
using wire::seconds_text;
using wire::Decoder;
using wire::Encoder;
using wire::Op;
using wire::ProtocolError;
using wire::Status;

namespace {

// How long past a get's or wait's own timeout the client waits for the
// server's answer (the server itself replies "timed out" at the timeout).
constexpr milliseconds kReplyGrace{2'000};

std::string keys_text(const std::vector<std::string>& keys) {
  if (keys.empty()) return "the store";
  return fmt::format("{} '{}'", keys.size() == 1 ? "key" : "keys", fmt::join(keys, "', '"));
}

void check_key(const char* op, const std::string& key) {
  EMBER_CHECK(key.size() <= kMaxKeyBytes, "store {}: key of {} bytes (limit {}) starting '{}'", op, key.size(),
              kMaxKeyBytes, key.substr(0, 64));
}

// A negative wait has no meaning; zero asks for the keys as they are now.
void check_timeout(const char* op, milliseconds timeout, const std::vector<std::string>& keys) {
  EMBER_CHECK(timeout.count() >= 0, "store {}: negative timeout {} ms for {}", op, timeout.count(), keys_text(keys));
}

void check_keys(const char* op, const std::vector<std::string>& keys) {
  EMBER_CHECK(keys.size() <= kMaxWaitKeys, "store {}: {} keys in one call (limit {})", op, keys.size(), kMaxWaitKeys);
  for (const auto& key : keys) check_key(op, key);
}

// A reply's status and the fields after its header.
struct Reply {
  Status status;
  Bytes body;
  Decoder fields() const { return Decoder(std::span(body).subspan(wire::kHeaderBytes)); }
};

// Connects once, without retrying: -1 and `error` set on failure.
int connect_once(const StoreOptions& options, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  if (const int resolved = getaddrinfo(options.host.c_str(), service.c_str(), &hints, &found); resolved != 0) {
    error = gai_strerror(resolved);
    return -1;
  }
  int connected = -1;
  for (addrinfo* address = found; address != nullptr && connected < 0; address = address->ai_next) {
    const int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    // Non-blocking connect, so an unreachable host costs the timeout, not the kernel's minutes of SYN retries.
    int status = connect(fd, address->ai_addr, address->ai_addrlen) == 0 ? 0 : errno;
    if (status == EINPROGRESS) {
      pollfd entry{.fd = fd, .events = POLLOUT, .revents = 0};
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
      if (poll(&entry, 1, int(std::clamp<int64_t>(left, 1, 60'000))) == 1) {
        socklen_t length = sizeof status;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length);
      } else {
        status = ETIMEDOUT;
      }
    }
    if (status == 0) {
      connected = fd;
    } else {
      error = wire::errno_text(status);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (connected >= 0) wire::set_nodelay(connected);
  return connected;
}

constexpr milliseconds kGreetingWait{10'000};

}  // namespace

struct TcpStore::Connection {
  explicit Connection(const StoreOptions& options) : options(options) { open(); }
  ~Connection() { drop(); }

  const StoreOptions& options;  // the owning TcpStore's, so set_timeout applies here
  int fd = -1;
  uint64_t next_id = 1;

  std::string where() const { return fmt::format("{}:{}", options.host, options.port); }
  // "rank 3 waiting, " for the timeout errors' parenthesis; nothing when not a rank.
  std::string rank_text(const char* doing) const {
    return options.rank >= 0 ? fmt::format("rank {}{}, ", options.rank, doing) : "";
  }

  void drop() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Connects, retrying until the timeout (the server may start after the
  // workers), then authenticates (Note [Store authentication]).
  void open() {
    const auto deadline = deadline_after(options.timeout);
    std::string error;
    for (milliseconds delay{10};; delay = std::min(delay * 2, milliseconds(1'000))) {
      fd = connect_once(options, deadline, error);
      if (fd >= 0) break;
      EMBER_CHECK(Clock::now() + delay < deadline,
                  "store: cannot connect to the store at {} within {} ({}last error: {}); is the server up there "
                  "(MASTER_ADDR, MASTER_PORT)?",
                  where(), seconds_text(options.timeout), options.rank >= 0 ? fmt::format("rank {}, ", options.rank) : "",
                  error);
      std::this_thread::sleep_for(delay);
    }
    try {
      authenticate(deadline);
    } catch (...) {
      drop();
      throw;
    }
  }

  void authenticate(Clock::time_point deadline) {
    const auto receive = [&](std::span<uint8_t> data, const char* what) {
      EMBER_CHECK(wire::recv_all(fd, data, deadline), "store: the store at {} sent no {} within {}", where(), what,
                  seconds_text(options.timeout));
    };
    // An ember server greets as soon as it accepts. A silent one is another
    // kind of store (PyTorch's TCPStore waits for its client to speak
    // first), or a stopped process: either way waiting the whole timeout
    // would only delay saying so.
    const auto greeting_deadline = std::min(deadline, deadline_after(kGreetingWait));
    std::array<uint8_t, auth::kHelloBytes> hello{};
    try {
      EMBER_CHECK(wire::recv_all(fd, hello, greeting_deadline),
                  "store: the server at {} accepted the connection but sent no greeting within {}: it is not an ember "
                  "store (PyTorch's TCPStore, e.g. torchrun's agent store on MASTER_PORT, waits silently for its "
                  "client), or the process serving it is stopped; MASTER_ADDR and MASTER_PORT must lead to the "
                  "store of the job's rank 0",
                  where(), seconds_text(std::min(options.timeout, kGreetingWait)));
    } catch (const ProtocolError& error) {
      EMBER_CHECK(false, "store: the store at {} dropped the connection before greeting: {}", where(), error.what());
    }
    EMBER_CHECK(std::equal(auth::kMagic.begin(), auth::kMagic.end(), hello.begin()),
                "store: {} is not an ember store (unexpected greeting)", where());
    auth::Nonce server_nonce;
    std::copy(hello.begin() + auth::kMagic.size(), hello.end(), server_nonce.begin());
    const auth::Nonce client_nonce = auth::random_nonce();
    const auth::Proof proof = auth::client_proof(options.token, server_nonce);
    Bytes answer(proof.begin(), proof.end());
    answer.insert(answer.end(), client_nonce.begin(), client_nonce.end());
    std::array<uint8_t, 1> verdict{auth::kRefused};
    try {
      EMBER_CHECK(wire::send_all(fd, answer, deadline), "store: could not send the token's proof to {} within {}",
                  where(), seconds_text(options.timeout));
      receive(verdict, "verdict on the token");
    } catch (const ProtocolError&) {
      verdict[0] = auth::kRefused;  // a server that hangs up here has refused us
    }
    EMBER_CHECK(verdict[0] == auth::kAccepted,
                "store: the store at {} refused the token ({}EMBER_STORE_TOKEN must be the job's token)", where(),
                options.rank >= 0 ? fmt::format("rank {}; ", options.rank) : "");
    auth::Proof server_proof{};
    receive(server_proof, "proof of the token");
    EMBER_CHECK(auth::proofs_equal(server_proof, auth::server_proof(options.token, client_nonce)),
                "store: the server at {} does not know the job's token; not using it", where());
  }

  // Sends one request and reads its reply. nullopt when the deadline passes
  // first: the connection is then dropped, since a late reply would be read as
  // the next request's; the next call reconnects. Throws when the connection fails.
  std::optional<Reply> exchange(Encoder request, Clock::time_point deadline, const char* op,
                                std::span<const uint8_t> trailing = {}) {
    if (fd < 0) open();  // an earlier failure dropped the connection
    const uint64_t id = next_id++;
    try {
      const Bytes frame = std::move(request).finish(trailing.size());
      std::array<uint8_t, wire::kLengthBytes> length{};
      if (!wire::send_all(fd, frame, deadline) || !wire::send_all(fd, trailing, deadline) ||
          !wire::recv_all(fd, length, deadline)) {
        drop();
        return std::nullopt;
      }
      const uint32_t body_bytes = wire::read_u32(length.data());
      if (body_bytes > wire::kMaxBodyBytes || body_bytes < wire::kHeaderBytes)
        throw ProtocolError(fmt::format("reply of {} bytes", body_bytes));
      Reply reply{.status = Status::kOk, .body = Bytes(body_bytes)};
      if (!wire::recv_all(fd, reply.body, deadline)) {
        drop();
        return std::nullopt;
      }
      Decoder header(reply.body);
      reply.status = Status(header.u8());
      if (header.u64() != id) throw ProtocolError("reply to another request");
      if (reply.status == Status::kError) {
        auto fields = reply.fields();
        const auto message = fields.bytes(wire::kMaxBodyBytes, "message");
        EMBER_CHECK(false, "store {}: {} (store {})", op,
                    std::string_view(reinterpret_cast<const char*>(message.data()), message.size()), where());
      }
      return reply;
    } catch (const ProtocolError& error) {
      drop();
      EMBER_CHECK(false, "store {}: lost the connection to the store at {} ({}): {}", op, where(),
                  options.rank >= 0 ? fmt::format("rank {}", options.rank) : "not a rank", error.what());
    }
    return std::nullopt;  // not reached: EMBER_CHECK(false) throws
  }

  Encoder begin(Op op) const { return Encoder(uint8_t(op), next_id); }

  // A request that should be answered at once; an error if it is not within the timeout.
  Reply call(Encoder request, const char* op, const std::vector<std::string>& keys,
             std::span<const uint8_t> trailing = {}) {
    auto reply = exchange(std::move(request), deadline_after(options.timeout), op, trailing);
    EMBER_CHECK(reply.has_value(), "store {}: no reply within {} about {} ({}store {}); reconnecting on the next call",
                op, seconds_text(options.timeout), keys_text(keys), rank_text(""), where());
    return std::move(*reply);
  }

  // A get or wait: the server parks it until the keys are set or `timeout` passes.
  // The grace is added after deadline_after has capped the timeout at
  // kLongestWait, so milliseconds::max() ("never") cannot overflow.
  Reply call_blocking(Encoder request, const char* op, const std::vector<std::string>& keys, milliseconds timeout) {
    auto reply = exchange(std::move(request), deadline_after(timeout) + kReplyGrace, op);
    if (reply && reply->status == Status::kOk) return std::move(*reply);
    std::vector<std::string> missing = keys;
    if (reply) missing = reply->fields().keys();  // the server names those still missing
    EMBER_CHECK(false, "store {}: {} not set after {} ({}store {})", op, keys_text(missing), seconds_text(timeout),
                rank_text(" waiting"), where());
    return {};  // not reached
  }
};

TcpStore::TcpStore(StoreOptions options) : options_(std::move(options)) {
  EMBER_CHECK(!options_.token.empty(), "store: empty token for {}:{}; the job's token is in EMBER_STORE_TOKEN",
              options_.host, options_.port);
  EMBER_CHECK(options_.port > 0 && options_.port <= 65535, "store: port {} is not in [1, 65535] (MASTER_PORT)",
              options_.port);
  connection_ = std::make_unique<Connection>(options_);
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, std::span<const uint8_t> value) {
  check_key("set", key);
  EMBER_CHECK(value.size() <= kMaxValueBytes, "store set: value of {} bytes for key '{}' (limit {})", value.size(), key,
              kMaxValueBytes);
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kSet);
  request.string(key);
  request.u32(uint32_t(value.size()));  // the value's size; the value follows the frame
  connection_->call(std::move(request), "set", {key}, value);
}

void TcpStore::set(const std::string& key, const std::string& value) {
  set(key, std::span(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
}

Bytes TcpStore::get(const std::string& key) { return get(key, options_.timeout); }

Bytes TcpStore::get(const std::string& key, milliseconds timeout) {
  check_key("get", key);
  check_timeout("get", timeout, {key});
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kGet);
  request.u64(uint64_t(timeout.count()));
  request.string(key);
  Reply reply = connection_->call_blocking(std::move(request), "get", {key}, timeout);
  auto fields = reply.fields();
  const auto value = fields.bytes(kMaxValueBytes, "value");
  fields.expect_end();
  // The value is the reply's tail: shifted down in place rather than copied to new memory.
  reply.body.erase(reply.body.begin(), reply.body.begin() + (value.data() - reply.body.data()));
  return std::move(reply.body);
}

std::string TcpStore::get_string(const std::string& key) {
  const Bytes value = get(key);
  return std::string(value.begin(), value.end());
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  check_key("add", key);
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kAdd);
  request.string(key);
  request.i64(delta);
  return connection_->call(std::move(request), "add", {key}).fields().i64();
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  check_keys("wait", keys);
  check_timeout("wait", timeout, keys);
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kWait);
  request.u64(uint64_t(timeout.count()));
  request.u32(uint32_t(keys.size()));
  for (const auto& key : keys) request.string(key);
  connection_->call_blocking(std::move(request), "wait", keys, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  check_keys("check", keys);
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kCheck);
  request.u32(uint32_t(keys.size()));
  for (const auto& key : keys) request.string(key);
  return connection_->call(std::move(request), "check", keys).fields().u8() != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  check_key("delete_key", key);
  std::lock_guard lock(mutex_);
  auto request = connection_->begin(Op::kDelete);
  request.string(key);
  return connection_->call(std::move(request), "delete_key", {key}).fields().u8() != 0;
}

int64_t TcpStore::num_keys() {
  std::lock_guard lock(mutex_);
  return connection_->call(connection_->begin(Op::kNumKeys), "num_keys", {}).fields().i64();
}

}  // namespace ember::distributed
