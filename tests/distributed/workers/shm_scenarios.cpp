// Scenarios of the shared-memory backend's own tests (tests/distributed/test_shm.cpp).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

using distributed::ProcessGroup;

}  // namespace

// args: victim. Every rank allreduces 4 MB in a loop; 300 ms in, the victim
// SIGKILLs itself from a second thread, so it dies inside a collective. The
// others print the error that ends their loop.
EMBER_SCENARIO(shm_killed_mid_allreduce) {
  EMBER_CHECK(args.size() == 1, "shm_killed_mid_allreduce: usage: shm_killed_mid_allreduce <victim rank>");
  ProcessGroup& group = distributed::init_process_group({.backend = "shm"});
  Tensor data = make_tensor({1 << 20}, DType::f32);
  data.fill_(Scalar(1.0));
  group.allreduce(data)->wait();
  if (group.rank() == std::stoi(args[0])) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    }).detach();
  }
  try {
    for (;;) group.allreduce(data)->wait();
  } catch (const Error& error) {
    std::printf("rank %d: %s\n", group.rank(), error.what());
    std::fflush(stdout);
    return 3;
  }
}

// Touches every part of the segment: a 4 MB allreduce (every slot buffer) and
// one 1 MB message to every other rank (every mailbox, several chunks each).
// Prints "fits" on success; an init that throws prints its error.
EMBER_SCENARIO(shm_segment_fits) {
  try {
    ProcessGroup& group = distributed::init_process_group({.backend = "shm"});
    const int rank = group.rank(), size = group.size();
    Tensor data = make_tensor({1 << 20}, DType::f32);
    data.fill_(Scalar(1.0));
    group.allreduce(data)->wait();
    EMBER_CHECK(data.to_vector<float>()[12345] == float(size), "allreduce gave {}", data.to_vector<float>()[12345]);
    Tensor message = make_tensor({1 << 18}, DType::f32);
    message.fill_(Scalar(double(rank)));
    std::vector<Tensor> received;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      group.send(message, peer);
      received.push_back(make_tensor({1 << 18}, DType::f32));
      group.recv(received.back(), peer)->wait();
      EMBER_CHECK(received.back().to_vector<float>().back() == float(peer), "rank {}: wrong message from {}", rank, peer);
    }
    group.barrier()->wait();
    std::printf("rank %d: fits\n", rank);
    std::fflush(stdout);
    distributed::destroy_process_group();
    return 0;
  } catch (const Error& error) {
    std::printf("%s\n", error.what());
    std::fflush(stdout);
    return 3;
  }
}

}  // namespace ember::test
