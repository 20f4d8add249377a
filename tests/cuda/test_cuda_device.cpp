// CUDA backend smoke tests (ctest label `cuda`): they skip, saying why, on
// machines without a GPU, so a CUDA build passes its suite anywhere.
#include "support/test_support.h"

namespace ember::testing {
namespace {

TEST(CudaDevice, ReportsDevicesOrSkips) {
  if (!built_with_cuda()) GTEST_SKIP() << "this build has no CUDA backend (EMBER_CUDA=OFF or no nvcc)";
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA GPU on this machine (cudaGetDeviceCount found none)";
  EXPECT_GT(cuda::device_count(), 0);
}

TEST(CudaDevice, MissingKernelsAreClearErrorsNotCrashes) {
  EXPECT_EMBER_ERROR(zeros({2}).to(Device("cuda:0")), "cuda");
}

}  // namespace
}  // namespace ember::testing
