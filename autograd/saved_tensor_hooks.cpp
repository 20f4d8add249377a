// The thread's stack of pack hooks (saved_tensor_hooks.h). SavedTensor
// (function.cpp) consults it when a node saves a tensor.
// Tests: tests/nn/test_checkpoint.cpp.
#include "autograd/saved_tensor_hooks.h"

namespace ember::autograd {
namespace {
// The innermost guard's hook; guards live on the stack, so a pointer suffices.
thread_local const PackHook* g_pack_hook = nullptr;
}  // namespace

SavedTensorHooksGuard::SavedTensorHooksGuard(PackHook pack) : previous_(g_pack_hook), pack_(std::move(pack)) {
  g_pack_hook = pack_ ? &pack_ : nullptr;
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { g_pack_hook = previous_; }

const PackHook* current_pack_hook() { return g_pack_hook; }

}  // namespace ember::autograd
