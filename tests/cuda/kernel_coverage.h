// Which ops the CUDA backend serves, for the CUDA family suites: a family
// registers exactly the dtypes the CPU backend does, and a test that runs ops
// of other families (the element-wise ones of a gradient check) skips, naming
// them, while a build has no CUDA kernel for them.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {

// Every op named: a CUDA kernel for each dtype the CPU backend has a fast one for, and no other.
inline ::testing::AssertionResult cuda_registers_cpu_dtypes(const std::set<std::string>& names) {
  std::set<std::string> found;
  for (const OpBase* op : OpBase::all()) {
    const std::string name(op->name());
    if (!names.count(name)) continue;
    found.insert(name);
    for (DType dtype : kAllDTypes)
      if ((op->kind(DeviceType::cuda, dtype) == KernelKind::optimized) !=
          (op->kind(DeviceType::cpu, dtype) == KernelKind::optimized))
        return ::testing::AssertionFailure() << name << " " << dtype_name(dtype) << ": CUDA "
                                             << int(op->kind(DeviceType::cuda, dtype)) << ", CPU "
                                             << int(op->kind(DeviceType::cpu, dtype));
  }
  if (found.size() != names.size()) return ::testing::AssertionFailure() << "some ops are not declared";
  return ::testing::AssertionSuccess();
}

// The ops among `names` without an f32 CUDA kernel.
inline std::string missing_cuda_kernels(const std::vector<std::string>& names) {
  std::string missing;
  for (const OpBase* op : OpBase::all())
    for (const std::string& name : names)
      if (op->name() == name && op->kind(DeviceType::cuda, DType::f32) == KernelKind::none)
        missing += (missing.empty() ? "" : ", ") + name;
  return missing;
}

#define EMBER_REQUIRE_CUDA_KERNELS(...)                                                                  \
  do {                                                                                                  \
    const std::string missing = ::ember::testing::missing_cuda_kernels({__VA_ARGS__});                  \
    if (!missing.empty()) GTEST_SKIP() << "this build has no CUDA kernel for " << missing << " yet";    \
  } while (0)

// What the gradient formulas of the reduction, softmax, loss and
// normalisation families and same_gradients_on_gpu run besides this family.
#define EMBER_REQUIRE_GRADIENT_KERNELS()                                                                      \
  EMBER_REQUIRE_CUDA_KERNELS("add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "abs", "pow", "sign", \
                             "eq", "gt", "lt", "where", "scatter_add")

}  // namespace ember::testing
