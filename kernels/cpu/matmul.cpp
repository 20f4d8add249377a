// (filled by the matmul family)
#include "kernels/cpu/families.h"

namespace ember::cpu {
void register_matmul_kernels() {}
}  // namespace ember::cpu
