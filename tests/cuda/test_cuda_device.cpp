// CUDA backend smoke tests (ctest label `cuda`): they skip, saying why, on
// machines without a GPU, so a CUDA build passes its suite anywhere.
#include "support/test_support.h"

namespace ember::testing {
namespace {

TEST(CudaDevice, ReportsDevicesOrSkips) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA GPU on this machine (cudaGetDeviceCount found none)";
  EXPECT_GT(cuda::device_count(), 0);
  // What `ember env` prints for each device: "NVIDIA H200, 139.8 GiB, compute capability 9.0".
  for (int index = 0; index < cuda::device_count(); ++index) {
    std::string description = cuda::device_description(index);
    EXPECT_NE(description.find(" GiB, compute capability "), std::string::npos) << description;
  }
}

}  // namespace
}  // namespace ember::testing
