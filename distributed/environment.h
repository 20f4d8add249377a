// Parsers for the environment variables the launcher hands its workers
// (torchrun's RANK, WORLD_SIZE, ... and ember's EMBER_*): one per kind of
// value, each error naming the variable and its text. Used by
// init_process_group (distributed/init.cpp) and the Accelerator's options.
// Tests: tests/distributed/test_collectives.cpp, tests/distributed/test_accelerator_options.cpp.
#pragma once

#include <cstdint>

#include "distributed/store/tcp_store.h"

namespace ember::distributed {

// A decimal integer in [low, high].
int64_t parse_env_integer(const char* name, const char* text, int64_t low, int64_t high);
// 1/true or 0/false (empty counts as false).
bool parse_env_flag(const char* name, const char* text);
// The longest timeout (EMBER_TIMEOUT, `ember launch --timeout`) the workers
// accept, in seconds (excluded): ~31 years, far inside every clock's range.
// One constant, so that the launcher refuses what its workers would.
inline constexpr double kMaxTimeoutSeconds = 1e9;

// A positive number of seconds (fractions allowed), below kMaxTimeoutSeconds.
milliseconds parse_env_seconds(const char* name, const char* text);

}  // namespace ember::distributed
