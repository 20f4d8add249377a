// The profiler on the GPU (Note [Device time of kernels] in
// core/profiler/README.md): every kernel an op queues on a CUDA stream is a
// device_kernel span on that stream's track, timed by CUDA events, beside the
// op span of its launch on the host. Skips without a GPU.
#include <map>
#include <string>
#include <vector>

#include "core/profiler/profile.h"
#include "cuda_compare.h"

namespace ember::testing {
namespace {

// Catches: device spans missing (KernelSpan no longer bracketing device
// kernels), spans left on the launching thread's track, begin and end
// swapped or read from the wrong event (spans that end before they begin,
// or overlap on one stream, which runs its kernels one after another), and
// an anchor that puts the device's clock before the host's (a kernel that
// starts before its launch began).
TEST(CudaProfiler, KernelsGetDeviceSpansInStreamOrderAfterTheirLaunch) {
  EMBER_REQUIRE_GPU();
  const Tensor a = randn({256, 256}).to(kGpu), b = randn({256, 256}).to(kGpu);
  Tensor warm = matmul(a, b);  // the handle and workspace of the first GEMM
  cuda::synchronize();
  profiler::Profile profile;
  Tensor c = matmul(a, b);
  Tensor d = add(c, a);
  Tensor e = mul(d, b);
  cuda::synchronize();
  profile.stop();

  std::vector<const profiler::Event*> launches, kernels;
  for (const profiler::Event& event : profile.events()) {
    if (event.category == profiler::Category::op && event.device == DeviceType::cuda) launches.push_back(&event);
    if (event.category == profiler::Category::device_kernel) kernels.push_back(&event);
  }
  ASSERT_EQ(kernels.size(), launches.size());
  ASSERT_GE(kernels.size(), 3u);
  std::map<int, int64_t> last_end;  // per stream track
  for (size_t i = 0; i < kernels.size(); ++i) {
    const profiler::Event& kernel = *kernels[i];
    const profiler::Event& launch = *launches[i];  // both sorted by begin: the i-th launch ran the i-th kernel
    EXPECT_EQ(kernel.name, launch.name) << i;
    EXPECT_GE(kernel.thread, profiler::kDeviceTrackBase) << kernel.name;
    EXPECT_TRUE(profile.tracks().count(kernel.thread)) << kernel.name;
    EXPECT_LE(kernel.begin_ns, kernel.end_ns) << kernel.name;
    EXPECT_GE(kernel.begin_ns, launch.begin_ns) << kernel.name << ": the device ran it before its launch began";
    // A kernel launched inside another's launch (nested calls) runs inside it too.
    const bool nested = i > 0 && launch.begin_ns < launches[i - 1]->end_ns;
    if (!nested) {
      EXPECT_GE(kernel.begin_ns, last_end[kernel.thread]) << kernel.name << " overlaps the one before it";
    }
    last_end[kernel.thread] = kernel.end_ns;
  }
  const std::string track = profile.tracks().at(kernels[0]->thread);
  EXPECT_NE(track.find("GPU cuda:0"), std::string::npos) << track;
  // The trace shows them, with the kernel's details.
  bool in_trace = false;
  for (const auto& event : profile.chrome_trace()["traceEvents"])
    in_trace |= event.value("cat", "") == "device_kernel" && event["args"]["device"] == "cuda";
  EXPECT_TRUE(in_trace);
}

}  // namespace
}  // namespace ember::testing
