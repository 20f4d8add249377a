// (filled by the reduction family)
#include "kernels/cpu/families.h"

namespace ember::cpu {
void register_reduction_kernels() {}
}  // namespace ember::cpu
