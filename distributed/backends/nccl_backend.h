// The NCCL backend: collectives on CUDA tensors between processes, one GPU
// per process, through one NCCL communicator per group. A ProcessGroup makes
// it at its first operation on a CUDA tensor (backend "auto" or "nccl",
// distributed/init.cpp); it queues its work on a stream of its own (Note
// [Collectives on a device stream]) and a watchdog aborts the communicator
// when an operation does not complete within the group's timeout (Note [NCCL
// watchdog]), both in distributed/README.md.
//
// Built only with the CUDA backend (CUDA_SOURCES in CMakeLists.txt), into the
// CUDA plugin libember_cuda.so (Note [CUDA backend plugin] in core/README.md):
// init.cpp reaches it through ember_nccl_entry_points, loading the plugin the
// first time a group needs NCCL or `ember env` describes it.
// Tests: tests/cuda/test_cuda_nccl.cpp (the conformance suite at world size 1
// and the watchdog, on a GPU), tests/distributed/test_watchdog.cpp (the
// watchdog's logic, on any machine).
//
// EMBER_NCCL_STALL_OPERATION=<n> (fault injection, for the watchdog's test):
// the n-th operation a communicator queues never completes. In its place its
// stream blocks, as it would behind a peer that never arrives, until the
// communicator is aborted or destroyed.
#pragma once

#include <memory>
#include <string>

#include "core/device.h"
#include "distributed/backend.h"

namespace ember::distributed {

// What the plugin hands init.cpp (ember_nccl_entry_points in nccl_backend.cpp).
struct NcclEntryPoints {
  // Bootstraps the communicator of `context`'s group on `device` (a CUDA GPU):
  // group rank 0 makes the ncclUniqueId and publishes it under
  // "<prefix>nccl/unique_id" in the store. Throws when the group's ranks do
  // not all arrive within context.timeout.
  std::unique_ptr<Backend> (*make_backend)(const BackendContext& context, Device device);
  std::string (*library_description)();  // as nccl_library_description
};

// The NCCL backend of a group (init.cpp): loads the plugin; throws in a build without CUDA.
std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context, Device device);

// Whether this build has the NCCL backend (CUDA builds do), for `ember env`,
// as torch.distributed.is_nccl_available.
bool nccl_built();

// "NCCL 2.27.7 (/usr/local/cuda/lib/libnccl.so.2)": the version and file of
// the library this process loaded; "" when nccl is not built.
std::string nccl_library_description();

}  // namespace ember::distributed
