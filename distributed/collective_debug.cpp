// Debug mode's cross-rank check of collective calls (collective_debug.h,
// Note [Collective debug mode]).
#include "distributed/collective_debug.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"

namespace ember::distributed {
namespace {

std::string record_key(const std::string& prefix, uint64_t sequence, int rank) {
  return fmt::format("{}debug/{}/{}", prefix, sequence, rank);
}

std::string as_string(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace

void check_collective_call(TcpStore& store, const std::string& prefix, int rank, int size, const CollectiveCall& call,
                           milliseconds timeout) {
  if (size == 1) return;
  const std::string record = fmt::format("{}: {}", call.sequence, call.description);
  store.set(record_key(prefix, call.sequence, rank), record);

  std::vector<std::string> others;
  for (int r = 0; r < size; ++r)
    if (r != rank) others.push_back(record_key(prefix, call.sequence, r));
  try {
    store.wait(others, timeout);
  } catch (const Error&) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r)
      if (r != rank && !store.check({record_key(prefix, call.sequence, r)})) missing.push_back(r);
    EMBER_CHECK(missing.empty(), "collective debug: rank {} called {} as call {}, but rank(s) {} did not reach call {} within {} ms",
                rank, call.description, call.sequence, fmt::join(missing, ", "), call.sequence, timeout.count());
    throw;
  }

  std::vector<std::string> records(static_cast<size_t>(size));
  bool same = true;
  for (int r = 0; r < size; ++r) {
    records[size_t(r)] = r == rank ? record : as_string(store.get(record_key(prefix, call.sequence, r), timeout));
    same = same && records[size_t(r)] == record;
  }
  if (!same) {
    // Each record reads "<sequence>: <call>"; the message quotes the calls.
    std::string calls;
    for (int r = 0; r < size; ++r) {
      const std::string& text = records[size_t(r)];
      const size_t colon = text.find(": ");
      calls += fmt::format("{}rank {} called {}", r ? ", " : "", r, colon == std::string::npos ? text : text.substr(colon + 2));
    }
    EMBER_CHECK(false, "collective mismatch at call {}: {}", call.sequence, calls);
  }
  // Every rank wrote its record of this call after reading all of call - 1,
  // so nobody reads this rank's record of call - 2 any more.
  if (call.sequence > 2) store.delete_key(record_key(prefix, call.sequence - 2, rank));
}

}  // namespace ember::distributed
