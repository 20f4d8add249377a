// The clock offset of this rank against rank 0 (Note [One clock for every
// rank] in core/profiler/README.md), measured through the store when the
// default process group starts, so that `ember trace merge` can put every
// rank's trace on rank 0's clock.
// Called by: init_process_group (distributed/init.cpp).
// Tests: tests/distributed/test_profiler.cpp.
#pragma once

#include <chrono>
#include <string>

#include "distributed/store/tcp_store.h"

namespace ember::distributed {

// Every rank of the group must call it (rank 0 answers each other rank in
// turn); it sets profiler::set_clock_offset_ns.
void measure_clock_offset(TcpStore& store, const std::string& prefix, int rank, int size,
                          std::chrono::milliseconds timeout);

}  // namespace ember::distributed
