// Debug mode's cross-rank check (Note [Collective debug mode]): before each
// collective, every rank publishes what it is about to call and compares it
// with what the others publish for the same call number. Called by
// ProcessGroup's communication thread; tests: CollectivesTest.DebugMode* in
// tests/distributed/test_collectives.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/store/tcp_store.h"

namespace ember::distributed {

struct CollectiveCall {
  uint64_t sequence;        // 1 for the group's first collective
  std::string description;  // e.g. "allreduce([4], float32, sum)"
};

// Writes this rank's record of `call` under prefix + "debug/<sequence>/<rank>",
// reads every other rank's (waiting up to `timeout` for each), and throws
// ember::Error naming each rank and its call when they differ, or the ranks
// that did not reach the call in time. Deletes this rank's record of call
// sequence - 2, which every rank has read by now.
void check_collective_call(TcpStore& store, const std::string& prefix, int rank, int size, const CollectiveCall& call,
                           milliseconds timeout);

}  // namespace ember::distributed
