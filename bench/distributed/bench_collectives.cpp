// Every reference collective (distributed/backends/reference/) beside the
// production shm and Gloo backends, nccl-tests style (its doc/PERFORMANCE.md):
// time per call (the slowest rank's mean), bytes each rank sent (counted at
// the reference collectives' send; the production backends do not expose
// theirs), algorithm bandwidth = size / time and bus bandwidth = algbw times
//   all-reduce 2(n-1)/n,  all-gather and reduce-scatter (n-1)/n,  broadcast 1
// (size: the buffer for all-reduce and broadcast, the gathered buffer for
// all-gather, the input of all n blocks for reduce-scatter). Run under the launcher:
//   ember launch --nproc-per-node 4 -- bench_collectives [--sizes 4096,262144,4194304]
// Every backend is called directly (no ProcessGroup queue), each on its own
// store prefix; the reference ones run on a shm backend's send/recv. With a
// CUDA build and a GPU per local rank, the nccl rows run the same calls on
// buffers of the GPU of the local rank, each call timed to the end of its
// work on NCCL's stream; otherwise one line says why they are absent.
// Note [Why the ring moves 2(n-1)/n] in distributed/README.md reads the bytes
// column; results: bench/RESULTS.md.
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "allreduce_table.h"
#include "core/ops/creation.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "core/version.h"
#include "distributed/backends/nccl_backend.h"
#include "distributed/backends/reference/reference_collectives.h"
#include "distributed/environment.h"
#include "distributed/process_group.h"

namespace dist = ember::distributed;
namespace ref = ember::distributed::reference;
using Clock = std::chrono::steady_clock;

namespace {

// A transport that counts the bytes it sends and forwards everything.
class CountingTransport final : public dist::Backend {
 public:
  explicit CountingTransport(std::unique_ptr<dist::Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::string algorithm(dist::Collective collective) const override { return inner_->algorithm(collective); }
  void allreduce(void* data, int64_t count, ember::DType dtype, dist::ReduceOp op) override {
    inner_->allreduce(data, count, dtype, op);
  }
  void broadcast(void* data, int64_t nbytes, int root) override { inner_->broadcast(data, nbytes, root); }
  void allgather(const void* input, void* output, int64_t nbytes) override { inner_->allgather(input, output, nbytes); }
  void reduce_scatter(const void* input, void* output, int64_t count, ember::DType dtype, dist::ReduceOp op) override {
    inner_->reduce_scatter(input, output, count, dtype, op);
  }
  void all_to_all(const void* input, void* output, int64_t nbytes) override { inner_->all_to_all(input, output, nbytes); }
  void barrier() override { inner_->barrier(); }
  void send(const void* data, int64_t nbytes, int dst, uint32_t tag) override {
    sent += nbytes;
    inner_->send(data, nbytes, dst, tag);
  }
  void recv(void* data, int64_t nbytes, int src, uint32_t tag) override { inner_->recv(data, nbytes, src, tag); }
  int64_t sent = 0;

 private:
  std::unique_ptr<dist::Backend> inner_;
};

// The slowest rank's value of `x` (every rank calls it).
double slowest(dist::ProcessGroup& world, double x) {
  ember::Tensor t = ember::make_tensor(ember::Shape{1}, ember::DType::f64);
  *t.data_ptr<double>() = x;
  world.allreduce(t, dist::ReduceOp::max)->wait();
  return *t.data_ptr<double>();
}

struct Row {
  const char* collective;
  std::string implementation;
  int64_t size;        // bytes, as the bus bandwidth formula counts them
  double bus_factor;   // busbw / algbw
};

// Times `call`, printing one row; `counter` (may be null) counts the sent bytes.
void measure(dist::ProcessGroup& world, const Row& row, CountingTransport* counter, const std::function<void()>& call) {
  const int iterations = ember::bench::allreduce_iterations(row.size);
  call();  // warm up: pages of the buffers, connections
  if (counter) counter->sent = 0;
  call();
  const double sent = counter ? slowest(world, double(counter->sent)) : -1;
  world.barrier()->wait();
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iterations; ++i) call();
  const double seconds = slowest(world, std::chrono::duration<double>(Clock::now() - start).count() / iterations);
  if (world.rank() != 0) return;
  const double algbw = double(row.size) / seconds / 1e9;
  const std::string sent_text = sent < 0 ? "-" : std::to_string(int64_t(sent));
  const std::string ratio = sent < 0 ? "-" : fmt::format("{:.3f}", sent / double(row.size));
  std::printf("  %-14s %-26s %10lld %10.1f %12s %9s %10.2f %10.2f\n", row.collective, row.implementation.c_str(),
              static_cast<long long>(row.size), seconds * 1e6, sent_text.c_str(), ratio.c_str(), algbw,
              algbw * row.bus_factor);
  std::fflush(stdout);
}

// Why this rank cannot run NCCL ("" when it can): NCCL needs the CUDA build
// and a GPU of its own for every rank of a host (it refuses two on one GPU).
std::string nccl_absence(int local_world_size) {
  if (!dist::nccl_built()) return "ember was built without CUDA";
  if (!ember::cuda::is_available()) return "no GPU is visible";
  const int gpus = ember::cuda::device_count();
  if (gpus < local_world_size)
    return fmt::format("{} local ranks but {} GPU(s): NCCL needs one per rank", local_world_size, gpus);
  return "";
}

// NCCL's calls return once queued on its stream: a call ends when its work has.
std::function<void()> to_completion(dist::Backend& backend, std::function<void()> call) {
  return [&backend, call = std::move(call)] {
    call();
    backend.stream().synchronize();
  };
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) sizes.push_back(std::stoll(item));
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<int64_t> sizes = parse_sizes(ember::bench::flag(argc, argv, "--sizes", "4096,262144,4194304"));
    dist::ProcessGroup& world = dist::init_process_group({.backend = "shm"});
    const int n = world.size(), rank = world.rank();
    auto context = [&](const std::string& name) {
      dist::BackendContext c{.rank = rank, .size = n, .global_ranks = {}, .store = world.store(),
                             .store_prefix = world.store_prefix() + "bench_" + name + "/", .timeout = world.timeout(),
                             .advertise_address = ""};
      for (int q = 0; q < n; ++q) c.global_ranks.push_back(q);
      return c;
    };
    std::unique_ptr<dist::Backend> shm = dist::make_shm_backend(context("shm"));
    std::unique_ptr<dist::Backend> gloo = dist::make_gloo_backend(context("gloo"));
    auto transport = std::make_unique<CountingTransport>(dist::make_shm_backend(context("reference")));
    const ref::Peers peers{.transport = *transport, .rank = rank, .size = n};
    // Plain pointers, not structured bindings: clang's lambdas cannot capture those.
    const std::vector<std::pair<const char*, dist::Backend*>> production = {{"shm", shm.get()}, {"gloo", gloo.get()}};
    // Every rank runs the nccl rows or none does: one rank's reason stops them all.
    const dist::DistributedEnv env = dist::read_distributed_env();
    const std::string absence = nccl_absence(env.local_world_size);
    const bool any_absent = slowest(world, absence.empty() ? 0.0 : 1.0) > 0;
    std::unique_ptr<dist::Backend> nccl;
    const ember::Device gpu(ember::DeviceType::cuda, env.local_rank);
    if (!any_absent) {
      ember::cuda::set_device(env.local_rank);
      nccl = dist::make_nccl_backend(context("nccl"), gpu);
    }
    const double all_reduce_factor = 2.0 * (n - 1) / n, gather_factor = double(n - 1) / n;
    if (rank == 0) {
      std::printf("# collectives on %d ranks, float32 (sum where reducing); time = slowest rank's mean per call;\n", n);
      std::printf("# sent = bytes the busiest rank sent per call, and as a fraction of size (reference only)\n");
      if (any_absent)
        std::printf("# no nccl rows: %s\n",
                    absence.empty() ? "another rank cannot run NCCL (its stderr says why)" : absence.c_str());
      std::printf("  %-14s %-26s %10s %10s %12s %9s %10s %10s\n", "collective", "implementation", "size(B)", "time(us)",
                  "sent(B)", "sent/size", "algbw", "busbw");
    }
    for (int64_t size : sizes) {
      const int64_t count = size / 4;
      std::vector<float> buffer(size_t(count), 0.0f), piece(size_t(count) / size_t(n));
      std::vector<float> gathered(piece.size() * size_t(n));
      for (const auto& entry : production) {
        dist::Backend* backend = entry.second;
        measure(world, {"allreduce", entry.first, size, all_reduce_factor}, nullptr,
                [&] { backend->allreduce(buffer.data(), count, ember::DType::f32, dist::ReduceOp::sum); });
      }
      for (ref::AllreduceAlgorithm algorithm : {ref::AllreduceAlgorithm::naive, ref::AllreduceAlgorithm::ring,
                                                ref::AllreduceAlgorithm::halving_doubling}) {
        const std::string name = fmt::format("reference {}", ref::allreduce_algorithm_name(algorithm));
        measure(world, {"allreduce", name, size, all_reduce_factor}, transport.get(), [&] {
          ref::allreduce(algorithm, peers, buffer.data(), count, ember::DType::f32, dist::ReduceOp::sum);
        });
      }
      // all-gather: n pieces of size / n make `size`; reduce-scatter: n blocks of size / n.
      const int64_t piece_bytes = int64_t(piece.size()) * 4;
      for (const auto& entry : production) {
        dist::Backend* backend = entry.second;
        const char* name = entry.first;
        measure(world, {"allgather", name, piece_bytes * n, gather_factor}, nullptr,
                [&] { backend->allgather(piece.data(), gathered.data(), piece_bytes); });
        measure(world, {"reduce_scatter", name, piece_bytes * n, gather_factor}, nullptr, [&] {
          backend->reduce_scatter(buffer.data(), piece.data(), int64_t(piece.size()), ember::DType::f32, dist::ReduceOp::sum);
        });
        measure(world, {"broadcast", name, size, 1.0}, nullptr, [&] { backend->broadcast(buffer.data(), size, 0); });
      }
      measure(world, {"allgather", "reference ring", piece_bytes * n, gather_factor}, transport.get(),
              [&] { ref::ring_allgather(peers, piece.data(), gathered.data(), piece_bytes); });
      measure(world, {"reduce_scatter", "reference ring", piece_bytes * n, gather_factor}, transport.get(), [&] {
        ref::ring_reduce_scatter(peers, buffer.data(), piece.data(), int64_t(piece.size()), ember::DType::f32,
                                 dist::ReduceOp::sum);
      });
      measure(world, {"broadcast", "reference binomial tree", size, 1.0}, transport.get(),
              [&] { ref::tree_broadcast(peers, buffer.data(), size, 0); });
      if (nccl) {
        const ember::TensorOptions on_gpu{.dtype = ember::DType::f32, .device = gpu};
        ember::Tensor device_buffer = ember::zeros({count}, on_gpu);
        ember::Tensor device_piece = ember::zeros({int64_t(piece.size())}, on_gpu);
        ember::Tensor device_gathered = ember::zeros({int64_t(gathered.size())}, on_gpu);
        dist::Backend& backend = *nccl;
        measure(world, {"allreduce", "nccl", size, all_reduce_factor}, nullptr, to_completion(backend, [&] {
                  backend.allreduce(device_buffer.data_ptr(), count, ember::DType::f32, dist::ReduceOp::sum);
                }));
        measure(world, {"allgather", "nccl", piece_bytes * n, gather_factor}, nullptr, to_completion(backend, [&] {
                  backend.allgather(device_piece.data_ptr(), device_gathered.data_ptr(), piece_bytes);
                }));
        measure(world, {"reduce_scatter", "nccl", piece_bytes * n, gather_factor}, nullptr,
                to_completion(backend, [&] {
                  backend.reduce_scatter(device_buffer.data_ptr(), device_piece.data_ptr(), int64_t(piece.size()),
                                         ember::DType::f32, dist::ReduceOp::sum);
                }));
        measure(world, {"broadcast", "nccl", size, 1.0}, nullptr,
                to_completion(backend, [&] { backend.broadcast(device_buffer.data_ptr(), size, 0); }));
      }
    }
    nccl.reset();
    shm.reset();
    gloo.reset();
    transport.reset();
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_collectives: %s\n", error.what());
    return 1;
  }
}
