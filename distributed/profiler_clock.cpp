// measure_clock_offset (profiler_clock.h): one ping through the store per
// rank, answered by rank 0 with its clock.
#include "distributed/profiler_clock.h"

#include "core/error.h"
#include "core/profiler/profiler.h"

namespace ember::distributed {

// Rank 0 serves the ranks one at a time and says when it is ready for rank
// r, so r's round trip holds only r's ping and rank 0's answer, not the wait
// for other ranks: rank 0 read its clock between r's two readings, and the
// middle of them is off from that by at most half the round trip (tens of
// microseconds on one host).
void measure_clock_offset(TcpStore& store, const std::string& prefix, int rank, int size,
                          std::chrono::milliseconds timeout) {
  const std::string key = prefix + "profiler_clock/";
  if (rank == 0) {
    profiler::set_clock_offset_ns(0);
    for (int r = 1; r < size; ++r) {
      const std::string name = std::to_string(r);
      store.set(key + "ready/" + name, "1");
      store.wait({key + "ping/" + name}, timeout);
      store.set(key + "pong/" + name, std::to_string(profiler::now_ns()));
    }
    return;
  }
  const std::string name = std::to_string(rank);
  store.get(key + "ready/" + name, timeout);
  const int64_t sent = profiler::now_ns();
  store.set(key + "ping/" + name, "1");
  const Bytes reply = store.get(key + "pong/" + name, timeout);
  const int64_t received = profiler::now_ns();
  const std::string text(reply.begin(), reply.end());
  size_t used = 0;
  const int64_t rank0 = std::stoll(text, &used);
  EMBER_CHECK(used == text.size(), "init_process_group: rank 0 answered the clock ping with '{}', not a number", text);
  profiler::set_clock_offset_ns(sent + (received - sent) / 2 - rank0);
}

}  // namespace ember::distributed
