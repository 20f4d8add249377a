// Scenarios of the shared-memory backend's own tests (tests/distributed/test_shm.cpp).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

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

}  // namespace ember::test
