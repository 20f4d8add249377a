// The one table format of the all-reduce benchmarks (bench_allreduce.cpp,
// bench_gloo_allreduce.cpp), nccl-tests style (its doc/PERFORMANCE.md):
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the rate each link of
// a ring would carry, comparable across rank counts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ember::bench {

// 1 KB .. 64 MB in steps of 4, or [min_bytes, max_bytes].
inline std::vector<int64_t> allreduce_sizes(int64_t min_bytes = 1 << 10, int64_t max_bytes = 64 << 20) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 1 << 10; bytes <= (int64_t(64) << 20); bytes *= 4)
    if (bytes >= min_bytes && bytes <= max_bytes) sizes.push_back(bytes);
  return sizes;
}

// About 256 MB of traffic per size (at least 5, at most 1000 calls): the same
// on every rank, since every rank must make the same calls.
inline int allreduce_iterations(int64_t bytes) {
  return int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 5, 1000));
}

// "--name value" from argv, else `fallback`.
inline std::string flag(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

inline void print_allreduce_header(const std::string& title, int ranks) {
  std::printf("# %s: %d ranks, float32 sum, in place; time = slowest rank's mean per call\n", title.c_str(), ranks);
  std::printf("# %12s %12s %10s %12s %12s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
}

inline void print_allreduce_row(int64_t bytes, double seconds, int ranks) {
  double algbw = double(bytes) / seconds / 1e9;
  double busbw = algbw * 2.0 * (ranks - 1) / ranks;
  std::printf("  %12lld %12lld %10.1f %12.2f %12.2f\n", static_cast<long long>(bytes),
              static_cast<long long>(bytes / 4), seconds * 1e6, algbw, busbw);
  std::fflush(stdout);
}

}  // namespace ember::bench
