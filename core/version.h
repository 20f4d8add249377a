// Build facts, for `ember env` and bug reports.
#pragma once

#include <string>
#include <string_view>

namespace ember {

std::string_view version();     // "0.1.0"
bool built_with_cuda();         // whether this build has the CUDA backend
namespace cuda {
bool is_available();            // a CUDA build with at least one usable GPU
int device_count();             // 0 without a GPU or without CUDA
// "NVIDIA H200, 139.8 GiB, compute capability 9.0"; "" without CUDA; an
// error for an index that is not a usable GPU's.
std::string device_description(int index);
}  // namespace cuda

}  // namespace ember
