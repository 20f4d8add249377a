// measure_clock_offset (profiler_clock.h): one ping through the store per
// rank, answered by rank 0 with its clock.
#include "distributed/profiler_clock.h"

#include <fstream>

#include "core/error.h"
#include "core/profiler/profiler.h"

namespace ember::distributed {
namespace {

// This boot of this machine's kernel, or "" where there is none to read. Two
// processes under one kernel read one steady clock (CLOCK_MONOTONIC).
std::string boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  return id;
}

}  // namespace

// Rank 0 serves the ranks one at a time and says when it is ready for rank
// r, so r's round trip holds only r's ping and rank 0's answer, not the wait
// for other ranks: rank 0 read its clock between r's two readings, and the
// middle of them is off from that by at most half the round trip. A rank
// under rank 0's kernel (the same boot id) reads the same clock: its offset
// is 0 exactly, not the ping's error (which measured 0.5-0.8 ms on a busy host).
void measure_clock_offset(TcpStore& store, const std::string& prefix, int rank, int size,
                          std::chrono::milliseconds timeout) {
  const std::string key = prefix + "profiler_clock/";
  if (rank == 0) {
    profiler::set_clock_offset_ns(0);
    for (int r = 1; r < size; ++r) {
      const std::string name = std::to_string(r);
      store.set(key + "ready/" + name, "1");
      store.wait({key + "ping/" + name}, timeout);
      store.set(key + "pong/" + name, std::to_string(profiler::now_ns()) + " " + boot_id());
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
  EMBER_CHECK(used < text.size() && text[used] == ' ',
              "init_process_group: rank 0 answered the clock ping with '{}', not a number and a boot id", text);
  const std::string rank0_boot = text.substr(used + 1);
  const bool same_clock = !rank0_boot.empty() && rank0_boot == boot_id();
  profiler::set_clock_offset_ns(same_clock ? 0 : sent + (received - sent) / 2 - rank0);
}

}  // namespace ember::distributed
