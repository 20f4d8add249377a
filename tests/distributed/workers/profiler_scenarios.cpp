// Scenarios of tests/distributed/test_profiler.cpp and tests/cuda/test_cuda_nccl.cpp:
// each operation of the Backend interface once, under the launcher's
// --profile, so that the test can read the algorithm every span names; and
// programs profiled by EMBER_PROFILE alone.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/stream.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/process_group.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#include "workers/scenario.h"

namespace ember::test {

using distributed::ProcessGroup;

// args[0]: the backend; "cuda" after it: CUDA tensors on the GPU of the
// local rank (nccl). Calls allreduce (once with an empty tensor), broadcast,
// allgather, reduce_scatter, all_to_all, barrier and, with two ranks or more,
// a ring of send/recv; the values are not checked here (the conformance suite
// does that), only that every call completes.
EMBER_SCENARIO(profiled_collectives) {
  const std::string backend = args.at(0);
  const bool on_gpu = args.size() > 1 && args[1] == "cuda";
  ProcessGroup& group = distributed::init_process_group({.backend = backend});
  Device device = kCPU;
  if (on_gpu) {
    const int local_rank = distributed::read_distributed_env().local_rank;
    cuda::set_device(local_rank);
    device = Device(DeviceType::cuda, local_rank);
  }
  const int rank = group.rank(), size = group.size();
  const TensorOptions options{.dtype = DType::f32, .device = device};
  Tensor values = full({1024}, Scalar(double(rank + 1)), options);
  group.allreduce(values)->wait();
  group.allreduce(zeros({0}, options))->wait();
  group.broadcast(values, 0)->wait();
  Tensor gathered = zeros({size * 1024}, options);
  group.allgather(gathered, values)->wait();
  Tensor block = zeros({1024}, options);
  group.reduce_scatter(block, gathered)->wait();
  Tensor exchanged = zeros({size * 1024}, options);
  group.all_to_all(exchanged, gathered)->wait();
  group.barrier()->wait();
  if (size > 1) {
    Tensor incoming = zeros({1024}, options);
    auto sent = group.send(values, (rank + 1) % size);
    group.recv(incoming, (rank + size - 1) % size)->wait();
    sent->wait();
  }
  std::printf("rank %d: profiled_collectives on %s done\n", rank, group.backend_name(device.type).c_str());
  std::fflush(stdout);
  distributed::destroy_process_group();
  return 0;
}

// A program that never makes a process group (EMBER_PROFILE from the
// environment): its thread's name is not UTF-8 (a program named in another
// script, cut by the kernel inside a character), it runs a few ops, then
// changes directory to args[0] before its profile is written at exit.
EMBER_SCENARIO(profiled_without_a_group) {
  pthread_setname_np(pthread_self(), "entra\xc3\xaene\xc3");  // ends inside a two-byte character
  Tensor a = ones({4, 4});
  (void)sum(a * 2.0).item<float>();
  return chdir(args.at(0).c_str()) == 0 ? 0 : 1;
}

// A program that changes directory to args[0] before anything else, then
// makes its Accelerator (which starts EMBER_PROFILE's profile before any op
// could) and runs one product.
EMBER_SCENARIO(profiled_after_a_chdir) {
  if (chdir(args.at(0).c_str()) != 0) return 1;
  Accelerator accelerator;
  (void)sum(matmul(ones({4, 8}), ones({8, 3}))).item<float>();
  return 0;
}

// Two Accelerators one after the other (a program that trains twice) under
// EMBER_PROFILE, each profiling its own run: the first takes 3 optimizer
// steps, the second changes directory to args[0] after it starts and takes 5.
EMBER_SCENARIO(profiled_accelerators) {
  for (int run = 0; run < 2; ++run) {
    Accelerator accelerator;
    if (run == 1 && chdir(args.at(0).c_str()) != 0) return 1;
    auto model = std::make_shared<nn::Linear>(4, 3);
    optim::SGD optimizer(model->parameters(), {.lr = 0.01});
    accelerator.prepare(model, optimizer);
    for (int step = 0; step < 3 + 2 * run; ++step) {
      accelerator.backward(sum((*model)(randn({2, 4}))));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  std::printf("profiled_accelerators done\n");
  return 0;
}

}  // namespace ember::test
