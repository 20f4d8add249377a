// The job's key-value store: one TCP server, many clients. Ranks meet here
// before any collective exists: Gloo exchanges its addresses through it, the
// shared-memory backend its segment name, debug mode its collective records.
// The launcher hosts the server (or rank 0 does, without a launcher). Every
// connection starts with a challenge-response on the job's token (Note [Store
// authentication] in distributed/README.md); then frames of requests and
// replies, blocking ones parked on the server (Note [Store protocol]).
// Server in tcp_store.cpp, client in tcp_store_client.cpp; tests:
// tests/distributed/test_store.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ember::distributed {

using Bytes = std::vector<uint8_t>;
using std::chrono::milliseconds;

inline constexpr milliseconds kDefaultTimeout{300'000};
// Bounds checked, by both ends, before anything is allocated for a request.
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t(1) << 30;
inline constexpr size_t kMaxWaitKeys = 1024;  // keys in one wait or check

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // the address to bind (MASTER_ADDR)
  int port = 0;                    // 0: any free port (read it back with port())
  std::string token;               // the job's secret; clients must prove they know it
  int backlog = 128;
  // A connection that has not proved the token by then is dropped, so silent
  // sockets cannot pile up.
  milliseconds handshake_timeout{5'000};
};

// Serves the store from a background thread until destroyed. Errors (a port
// in use, an empty token) are thrown from the constructor; a misbehaving peer
// only loses its own connection (logged to stderr with its address).
class TcpStoreServer {
 public:
  explicit TcpStoreServer(StoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  // Connections refused for a wrong token so far (each is also logged to stderr).
  int64_t refused_connections() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct StoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  milliseconds timeout = kDefaultTimeout;  // for connecting and for every blocking call
  int rank = -1;                           // named in timeout errors; -1: not a rank (the launcher, a test)
};

// A client. Thread-safe: calls from several threads are serialised on its one
// connection (a blocking get holds up the others; give a thread that must not
// wait its own client). The constructor connects, retrying until the timeout.
// After a timeout error the client stays usable. Other errors: the store's
// refusal of the token, a lost connection (the next call reconnects), add on a
// value that is not an integer, a key or value over its bound.
class TcpStore {
 public:
  explicit TcpStore(StoreOptions options);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, std::span<const uint8_t> value);
  void set(const std::string& key, const std::string& value);
  // Blocks until `key` exists, then returns its value; an error naming the key
  // and this rank after the timeout. For get and wait, milliseconds::max()
  // means no timeout (in effect wire::kLongestWait); a negative one is an error.
  Bytes get(const std::string& key);
  Bytes get(const std::string& key, milliseconds timeout);
  std::string get_string(const std::string& key);
  // Atomically adds `delta` to the integer stored at `key` (0 when absent) and
  // returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Blocks until every key exists; an error naming the missing keys after the timeout.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, milliseconds timeout);
  // Whether every key exists, without waiting.
  bool check(const std::vector<std::string>& keys);
  // Whether the key existed.
  bool delete_key(const std::string& key);
  int64_t num_keys();

  milliseconds timeout() const { return options_.timeout; }
  void set_timeout(milliseconds timeout) { options_.timeout = timeout; }  // not while calls are in flight
  int rank() const { return options_.rank; }
  const StoreOptions& options() const { return options_; }

 private:
  struct Connection;
  StoreOptions options_;
  std::mutex mutex_;
  std::unique_ptr<Connection> connection_;
};

// A fresh random token (hex) for a new job, from the OS's random source.
std::string make_job_token();

}  // namespace ember::distributed
