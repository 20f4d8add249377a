// Bare Gloo all-reduce, the peer of bench_allreduce.cpp in the same table
// format (allreduce_table.h): gloo::allreduce on a TCP device, rendezvous
// through Gloo's own FileStore in /tmp (no ember code on the data path).
// Run under the launcher, which sets RANK, WORLD_SIZE and EMBER_JOB_ID:
//   ember launch --nproc-per-node 2 -- bench_gloo_allreduce
// Options: --min-bytes N, --max-bytes N. Results: bench/RESULTS.md.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "allreduce_table.h"

using Clock = std::chrono::steady_clock;

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

void allreduce(const std::shared_ptr<gloo::Context>& context, float* data, size_t count) {
  gloo::AllreduceOptions options(context);
  options.setOutput(data, count);
  options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int rank = env_int("RANK", 0), ranks = env_int("WORLD_SIZE", 1);
    const int64_t min_bytes = std::stoll(ember::bench::flag(argc, argv, "--min-bytes", "1024"));
    const int64_t max_bytes = std::stoll(ember::bench::flag(argc, argv, "--max-bytes", "67108864"));
    // The launcher's job id (else its store port) names a directory every rank of this job shares.
    const char* job = std::getenv("EMBER_JOB_ID");
    const char* port = std::getenv("MASTER_PORT");
    const std::filesystem::path directory =
        std::filesystem::temp_directory_path() / ("ember-bench-gloo-" + std::string(job ? job : port ? port : "0"));
    std::filesystem::create_directories(directory);

    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
    {
      gloo::rendezvous::FileStore store(directory.string());
      context->connectFullMesh(store, device);
    }
    if (rank == 0) ember::bench::print_allreduce_header("bare Gloo (tcp, FileStore rendezvous)", ranks);

    for (int64_t bytes : ember::bench::allreduce_sizes(min_bytes, max_bytes)) {
      const size_t count = size_t(bytes / 4);
      std::vector<float> data(count, float(rank + 1));
      allreduce(context, data.data(), count);
      const float expected = float(ranks * (ranks + 1) / 2);
      for (size_t i = 0; i < count; ++i)
        if (data[i] != expected) {
          std::fprintf(stderr, "bench_gloo_allreduce: element %zu is %g, expected %g\n", i, data[i], expected);
          return 1;
        }
      std::fill(data.begin(), data.end(), 0.0f);
      const int iterations = ember::bench::allreduce_iterations(bytes);
      for (int i = 0; i < 3; ++i) allreduce(context, data.data(), count);
      gloo::BarrierOptions barrier(context);
      gloo::barrier(barrier);
      Clock::time_point start = Clock::now();
      for (int i = 0; i < iterations; ++i) allreduce(context, data.data(), count);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
      gloo::AllreduceOptions slowest(context);
      slowest.setOutput(&seconds, 1);
      slowest.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
      gloo::allreduce(slowest);
      if (rank == 0) ember::bench::print_allreduce_row(bytes, seconds, ranks);
    }
    gloo::BarrierOptions done(context);
    gloo::barrier(done);
    if (rank == 0) std::filesystem::remove_all(directory);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_gloo_allreduce: %s\n", error.what());
    return 1;
  }
}
