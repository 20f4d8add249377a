// All-reduce bandwidth through ember's ProcessGroup, nccl-tests style (see
// allreduce_table.h). Run under the launcher:
//   ember launch --nproc-per-node 2 -- bench_allreduce --backend shm
// Options: --backend auto|shm|gloo, --min-bytes N, --max-bytes N,
// --direct 1 to time the Backend itself (make_shm_backend / make_gloo_backend
// on the group's store), without ProcessGroup's queue, and --symmetric 1 to
// all-reduce tensors from ProcessGroup::empty_symmetric (Note [Symmetric
// memory]; with --direct, from Backend::allocate_symmetric). Results:
// bench/RESULTS.md.
#include <chrono>
#include <cstdio>

#include "allreduce_table.h"
#include "core/error.h"
#include "core/tensor.h"
#include "distributed/backend.h"
#include "distributed/process_group.h"

namespace dist = ember::distributed;
using Clock = std::chrono::steady_clock;

namespace {

// Mean seconds per call over `iterations` calls of `call`, the slowest rank's
// (every rank's mean is max-reduced through the group).
template <class Call>
double time_calls(dist::ProcessGroup& group, int iterations, Call&& call) {
  for (int i = 0; i < 3; ++i) call();  // warm up: pages of the buffers and the segment
  group.barrier()->wait();
  Clock::time_point start = Clock::now();
  for (int i = 0; i < iterations; ++i) call();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iterations;
  ember::Tensor slowest = ember::make_tensor(ember::Shape{1}, ember::DType::f64);
  *slowest.data_ptr<double>() = seconds;
  group.allreduce(slowest, dist::ReduceOp::max)->wait();
  return *slowest.data_ptr<double>();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string backend = ember::bench::flag(argc, argv, "--backend", "auto");
    const bool direct = ember::bench::flag(argc, argv, "--direct", "0") == "1";
    const bool symmetric = ember::bench::flag(argc, argv, "--symmetric", "0") == "1";
    const int64_t min_bytes = std::stoll(ember::bench::flag(argc, argv, "--min-bytes", "1024"));
    const int64_t max_bytes = std::stoll(ember::bench::flag(argc, argv, "--max-bytes", "67108864"));
    dist::ProcessGroup& group = dist::init_process_group({.backend = backend});
    const int ranks = group.size();

    // --direct: the same kind of backend as the group's, on the group's store.
    std::unique_ptr<dist::Backend> bare;
    if (direct) {
      dist::BackendContext context;
      context.rank = group.rank();
      context.size = ranks;
      for (int r = 0; r < ranks; ++r) context.global_ranks.push_back(group.global_rank(r));
      context.store = group.store();
      context.store_prefix = group.store_prefix() + "bench_direct/";
      context.timeout = group.timeout();
      bare = group.backend_name() == "gloo" ? dist::make_gloo_backend(context) : dist::make_shm_backend(context);
    }
    if (group.rank() == 0)
      ember::bench::print_allreduce_header(
          fmt::format("ember {} backend{}{}", group.backend_name(),
                      direct ? " (Backend called directly)" : " (ProcessGroup)", symmetric ? ", symmetric memory" : ""),
          ranks);

    for (int64_t bytes : ember::bench::allreduce_sizes(min_bytes, max_bytes)) {
      const int64_t count = bytes / 4;
      ember::Tensor data = symmetric && !direct ? group.empty_symmetric({count}, ember::DType::f32)
                                                : ember::make_tensor(ember::Shape{count}, ember::DType::f32);
      std::shared_ptr<std::byte> bare_memory = symmetric && direct ? bare->allocate_symmetric(bytes) : nullptr;
      float* values = bare_memory ? reinterpret_cast<float*>(bare_memory.get()) : data.data_ptr<float>();
      // One checked call (every element becomes 1 + 2 + ... + ranks), then zeros:
      // the timed calls keep the values finite.
      for (int64_t i = 0; i < count; ++i) values[i] = float(group.rank() + 1);
      if (bare_memory) bare->allreduce(values, count, ember::DType::f32, dist::ReduceOp::sum);
      else group.allreduce(data)->wait();
      const float expected = float(ranks * (ranks + 1) / 2);
      for (int64_t i = 0; i < count; ++i)
        EMBER_CHECK(values[i] == expected, "bench_allreduce: element {} of {} is {}, expected {}", i, count, values[i],
                    expected);
      for (int64_t i = 0; i < count; ++i) values[i] = 0;

      const int iterations = ember::bench::allreduce_iterations(bytes);
      double seconds = direct ? time_calls(group, iterations,
                                           [&] { bare->allreduce(values, count, ember::DType::f32, dist::ReduceOp::sum); })
                              : time_calls(group, iterations, [&] { group.allreduce(data)->wait(); });
      if (group.rank() == 0) ember::bench::print_allreduce_row(bytes, seconds, ranks);
    }
    bare.reset();
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_allreduce: %s\n", error.what());
    return 1;
  }
}
