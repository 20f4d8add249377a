// Every op with a CPU kernel has a CUDA kernel for the same dtypes, or a
// written exemption here saying why not. Registration needs no GPU, so this
// runs in every CUDA build (CI's included); it skips only without the backend.
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "cuda_compare.h"

namespace ember::testing {
namespace {

struct Exemption {
  std::set<DType> dtypes;  // empty: every dtype
  const char* reason;
};

// Ops, by name, that run on the CPU only, and why.
const std::map<std::string_view, Exemption>& exemptions() {
  static const std::map<std::string_view, Exemption> table = {
      {"matmul", {{DType::i32, DType::i64}, "cuBLAS has no integer GEMM; PyTorch's CUDA matmul refuses integers too"}},
      {"attention",
       {{DType::f32, DType::f64},
        "the fused CUDA kernel is f16/bf16 (tensor cores); scaled_dot_product_attention runs f32/f64 on a GPU as the "
        "composite (fused_attention_supported says so per device)"}},
      {"attention_backward", {{DType::f32, DType::f64}, "as attention"}},
  };
  return table;
}

bool exempt(std::string_view op, DType dtype) {
  auto it = exemptions().find(op);
  return it != exemptions().end() && (it->second.dtypes.empty() || it->second.dtypes.count(dtype));
}

TEST(CudaOpCoverage, EveryCpuKernelHasACudaKernelOrAWrittenExemption) {
  std::vector<std::string> missing;
  for (const OpBase* op : OpBase::all()) {
    for (DType dtype : kAllDTypes) {
      if (op->kind(DeviceType::cpu, dtype) != KernelKind::optimized) continue;
      if (op->kind(DeviceType::cuda, dtype) == KernelKind::optimized || exempt(op->name(), dtype)) continue;
      missing.push_back(fmt::format("{} ({})", op->name(), dtype));
    }
  }
  EXPECT_TRUE(missing.empty()) << "CPU kernels without a CUDA kernel or an exemption: " << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(CudaOpCoverage, ExemptionsNameOpsThatExistAndLackAKernel) {
  for (const auto& [name, exemption] : exemptions()) {
    const OpBase* found = nullptr;
    for (const OpBase* op : OpBase::all())
      if (op->name() == name) found = op;
    ASSERT_NE(found, nullptr) << "exemption for an op that does not exist: " << name;
    for (DType dtype : kAllDTypes) {
      if (!exemption.dtypes.empty() && !exemption.dtypes.count(dtype)) continue;
      EXPECT_EQ(found->kind(DeviceType::cuda, dtype), KernelKind::none)
          << name << " (" << dtype_name(dtype) << ") has a CUDA kernel now: drop its exemption";
    }
  }
}

}  // namespace
}  // namespace ember::testing
