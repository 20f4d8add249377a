// The CUDA backend as a plugin (Note [CUDA backend plugin] in core/README.md):
// a CPU training step of a CUDA build maps none of the CUDA libraries, and
// asking for CUDA loads libember_cuda (and with it cudart) without throwing on
// a machine without a GPU, and a plugin that cannot load is an error naming
// the file. Each test needs a process of its own, as ctest
// runs them; the suite's GPUs are hidden (HIDE_GPUS, and CUDA_VISIBLE_DEVICES
// below for direct runs), so is_available() is false even on a GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "core/cuda_backend.h"
#include "core/cuda_libraries.h"
#include "core/dispatch.h"
#include "distributed/process_runner.h"
#include "tools/tools_test_support.h"

namespace ember::test {
namespace {

// The CUDA libraries (and the plugin) this process has mapped, by file name prefix.
std::vector<std::string> mapped_cuda_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  std::vector<std::string> found;
  for (const char* name : {"/libember_cuda.so", "/libcudart.so", "/libcublas.so", "/libcublasLt.so", "/libcudnn",
                           "/libnccl.so"}) {
    if (text.str().find(name) != std::string::npos) found.push_back(name);
  }
  return found;
}

class CudaPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CUDA_VISIBLE_DEVICES", "", 1);  // before the driver is asked anything
    ASSERT_FALSE(cuda::backend_loaded()) << "the plugin was loaded before the test: run it in a process of its own";
  }
};

// Catches: libember linking cudart, cuBLAS, cuDNN or NCCL again, and any CPU
// path (op registration, the allocator registry, is_available) that loads the
// plugin. Seen failing with device_count() skipping the driver check (so that
// is_available() loaded the plugin).
TEST_F(CudaPluginTest, CpuTrainingStepMapsNoCudaLibrary) {
  manual_seed(0);
  auto model = nn::Sequential(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
  const std::vector<float> before = model.parameters()[0].to_vector<float>();
  Tensor loss = nn::functional::cross_entropy(model(randn({8, 4})), randint(0, 3, {8}));
  optimizer.zero_grad();
  loss.backward();
  optimizer.step();
  EXPECT_NE(model.parameters()[0].to_vector<float>(), before);  // the step ran
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_EQ(mapped_cuda_libraries(), std::vector<std::string>{});
  EXPECT_FALSE(cuda::backend_loaded());
}

// Catches: a CUDA query that answers without the plugin (kernels or library
// lines missing), or one that throws without a GPU.
TEST_F(CudaPluginTest, AskingForCudaLoadsThePlugin) {
  EXPECT_FALSE(cuda::is_available());  // without a GPU: false, not an error
  if (!built_with_cuda()) {
    EXPECT_EQ(cuda::library_descriptions(), std::vector<std::string>{});
    EXPECT_EQ(cuda::backend(), nullptr);
    EXPECT_FALSE(cuda::backend_loaded());
    return;
  }
  int cuda_kernels = 0;  // kind() on a CUDA device loads the plugin, which registers them
  for (const OpBase* op : OpBase::all()) cuda_kernels += op->kind(DeviceType::cuda, DType::f32) == KernelKind::optimized;
  EXPECT_GT(cuda_kernels, 50);
  EXPECT_TRUE(cuda::backend_loaded());
  EXPECT_EQ(cuda::library_descriptions().size(), 4u);  // runtime, driver, cuBLAS, cuDNN
  const std::vector<std::string> mapped = mapped_cuda_libraries();
  for (const char* name : {"/libember_cuda.so", "/libcudart.so", "/libcublas.so"})
    EXPECT_NE(std::find(mapped.begin(), mapped.end(), name), mapped.end()) << name;
}

// libember looks for the plugin in its own folder, and a plugin it cannot
// load is an error naming the file and the loader's reason: `ember env` run
// on a copy of libember alone in a folder (LD_LIBRARY_PATH outranks the
// command's RUNPATH). Catches a plugin looked up by name on the library path
// instead of beside libember (seen failing so: the error named the bare file).
TEST(CudaPlugin, APluginThatCannotLoadIsAnErrorNamingTheFile) {
  using namespace std::chrono_literals;
  const std::filesystem::path directory = fresh_temp_dir("lone_libember");
  const std::filesystem::path library = library_file_of(reinterpret_cast<const void*>(&version));
  std::filesystem::copy_file(library, directory / library.filename());
  const ProcessResult result =
      run_process(clean_command({"LD_LIBRARY_PATH=" + directory.string()}, {EMBER_CLI, "env"}), 30s);
  std::filesystem::remove_all(directory);
  if (!built_with_cuda()) {
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_TRUE(contains(result.output, "- CUDA libraries: none (CUDA not built)\n")) << result.output;
    return;
  }
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "CUDA backend: cannot load " + (directory / "libember_cuda.so").string()))
      << result.output;
  EXPECT_TRUE(contains(result.output, "cannot open shared object file: No such file or directory")) << result.output;
}

}  // namespace
}  // namespace ember::test
