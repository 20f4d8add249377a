// See node_rendezvous.h. The keys live under "launch/" in the store node 0
// hosts; workers' keys are under "pg/<id>/", so the two never meet.
#include "node_rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/error.h"
#include "distributed/store/tcp_store.h"

namespace ember::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kVerdictKey = "launch/verdict";
constexpr const char* kAgreed = "ok";
// Set once every node has read an agreed verdict: "start", or why not.
constexpr const char* kStartKey = "launch/start";
constexpr const char* kStart = "start";

std::string settings_key(int node) { return fmt::format("launch/node/{}", node); }
std::string claim_key(int node) { return fmt::format("launch/claim/{}", node); }
std::string seen_key(int node) { return fmt::format("launch/seen/{}", node); }

// What every node must agree on: together they make WORLD_SIZE and RANK.
std::string settings_of(const LaunchOptions& options) {
  return fmt::format("--nnodes {} --nproc-per-node {}", options.nnodes, options.nproc_per_node);
}

// The launcher blocks its stop signals for the supervision loop's signalfd.
// While it waits here there is nothing to stop, so they take their default
// action (end the launcher) instead of waiting, unheard, for the timeout.
class StopSignalsUnblocked {
 public:
  StopSignalsUnblocked() {
    sigset_t stop;
    sigemptyset(&stop);
    for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, signal_number);
    pthread_sigmask(SIG_UNBLOCK, &stop, &saved_);
  }
  ~StopSignalsUnblocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  StopSignalsUnblocked(const StopSignalsUnblocked&) = delete;
  StopSignalsUnblocked& operator=(const StopSignalsUnblocked&) = delete;

 private:
  sigset_t saved_{};
};

milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
}

std::string get_text(distributed::TcpStore& store, const std::string& key, Clock::time_point deadline) {
  const distributed::Bytes value = store.get(key, left_until(deadline));
  return std::string(value.begin(), value.end());
}

// Node 0: every other node's settings, as each arrives, must be its own.
std::string verdict_of_node_zero(distributed::TcpStore& store, const LaunchOptions& options,
                                 Clock::time_point deadline) {
  const std::string mine = settings_of(options);
  for (int node = 1; node < options.nnodes; ++node) {
    std::string theirs;
    try {
      theirs = get_text(store, settings_key(node), deadline);
    } catch (const Error&) {
      std::vector<int> missing;
      for (int other = node; other < options.nnodes; ++other)
        if (!store.check({settings_key(other)})) missing.push_back(other);
      return fmt::format("node(s) {} did not join within {} s: start their launchers with --master-addr {} "
                         "--master-port {} and this job's EMBER_STORE_TOKEN",
                         fmt::join(missing, ", "), options.timeout_seconds, options.master_addr, options.master_port);
    }
    if (theirs != mine)
      return fmt::format("node {} was launched with {}, node 0 with {}: every node's launcher needs the same",
                         node, theirs, mine);
  }
  return kAgreed;
}

// The nodes of `nodes` whose key `key_of(node)` is not set.
template <typename KeyOf>
std::vector<int> without_key(distributed::TcpStore& store, const std::vector<int>& nodes, KeyOf key_of) {
  std::vector<int> missing;
  for (int node : nodes)
    if (!store.check({key_of(node)})) missing.push_back(node);
  return missing;
}

void join_as_node_zero(distributed::TcpStore& store, const LaunchOptions& options, Clock::time_point deadline) {
  const std::string mine = settings_of(options);
  store.set(settings_key(0), mine);
  const std::string verdict = verdict_of_node_zero(store, options, deadline);
  store.set(kVerdictKey, verdict);
  // Every node that joined as it should reads the verdict before this
  // launcher goes on: a refused job's store ends with it, and so may an
  // agreed one's, if its own workers finish first.
  std::vector<int> readers;
  for (int node = 1; node < options.nnodes; ++node)
    if (store.check({settings_key(node)}) && get_text(store, settings_key(node), deadline) == mine)
      readers.push_back(node);
  std::vector<std::string> keys;
  for (int node : readers) keys.push_back(seen_key(node));
  std::vector<int> gone;
  try {
    if (!keys.empty()) store.wait(keys, left_until(deadline));
  } catch (const Error&) {
    gone = without_key(store, readers, seen_key);
  }
  EMBER_CHECK(verdict == kAgreed, "{}", verdict);
  // Note [Launcher supervision]: the verdict alone is not a start signal. A
  // node may have read "ok" and be ready while another went away before
  // reading it; only once every node has read it does any node start workers.
  if (!gone.empty()) {
    const std::string why = fmt::format("node(s) {} joined but went away before the job could start",
                                        fmt::join(gone, ", "));
    store.set(kStartKey, why);
    EMBER_CHECK(false, "{}", why);
  }
  store.set(kStartKey, kStart);
}

void join_as_other_node(distributed::TcpStore& store, const LaunchOptions& options, Clock::time_point deadline) {
  const int node = options.node_rank;
  const std::string mine = settings_of(options);
  // Node 0 publishes its settings as soon as it hosts the store.
  auto node_zero_says = [&](const std::string& key) {
    try {
      return get_text(store, key, deadline);
    } catch (const Error& error) {
      EMBER_CHECK(false, "node {} cannot join the job: {}", node, error.what());
      return std::string();
    }
  };
  // Compared before this node's settings are out: node 0 may end the job
  // (and its store) as soon as it has seen them.
  const std::string first = node_zero_says(settings_key(0));
  store.set(settings_key(node), mine);
  EMBER_CHECK(first == mine, "node 0 was launched with {}, this node ({}) with {}: every node's launcher needs the same",
              first, node, mine);
  const std::string verdict = node_zero_says(kVerdictKey);
  store.set(seen_key(node), "1");
  EMBER_CHECK(verdict == kAgreed, "node 0 did not start the job: {}", verdict);
  const std::string start = node_zero_says(kStartKey);
  EMBER_CHECK(start == kStart, "node 0 did not start the job: {}", start);
}

}  // namespace

void meet_other_nodes(const LaunchOptions& options, const std::string& token) {
  StopSignalsUnblocked stoppable;
  const auto timeout = std::chrono::seconds(options.timeout_seconds);
  const Clock::time_point deadline = Clock::now() + timeout;
  const int node = options.node_rank;
  std::unique_ptr<distributed::TcpStore> store;
  try {
    store = std::make_unique<distributed::TcpStore>(distributed::StoreOptions{
        .host = options.master_addr, .port = options.master_port, .token = token, .timeout = timeout});
  } catch (const Error& error) {
    EMBER_CHECK(false, "node {} cannot join the job: {}", node, error.what());
  }
  EMBER_CHECK(store->add(claim_key(node), 1) == 1,
              "node rank {} of this job (store {}:{}) has a launcher already: is the job started twice, or another "
              "node given --node-rank {} too?",
              node, options.master_addr, options.master_port, node);
  if (node == 0) {
    join_as_node_zero(*store, options, deadline);
  } else {
    join_as_other_node(*store, options, deadline);
  }
}

}  // namespace ember::launch
